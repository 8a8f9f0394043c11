"""Key mapping between the original (Wan / CausalWanModel) state-dict layout and diffusers'.

Self-Forcing, CausVid and LongLive save their generator as Wan's own module tree (`CausalWanModel`
keeps `WanModel`'s parameter names); diffusers' `WanTransformer3DModel` names the same tensors
differently. The mapping is one table used in both directions, so it round-trips by construction
and the tests check it against diffusers' own module names. Tensors are never reshaped: every
pair has the same shape on both sides.

Note the swap: the original block's `norm3` (the affine cross-attention norm) is diffusers'
`norm2`; the original `norm2`/diffusers `norm3` (before the FFN) has no parameters.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import torch

from .config import WanLoadError

_WB = (".weight", ".bias")

# (original, diffusers) name stems; a stem maps with every suffix listed for it.
TOP_LEVEL: list[tuple[str, str, tuple[str, ...]]] = [
    ("patch_embedding", "patch_embedding", _WB),
    ("text_embedding.0", "condition_embedder.text_embedder.linear_1", _WB),
    ("text_embedding.2", "condition_embedder.text_embedder.linear_2", _WB),
    ("time_embedding.0", "condition_embedder.time_embedder.linear_1", _WB),
    ("time_embedding.2", "condition_embedder.time_embedder.linear_2", _WB),
    ("time_projection.1", "condition_embedder.time_proj", _WB),
    ("head.head", "proj_out", _WB),
    ("head.modulation", "scale_shift_table", ("",)),
]
PER_BLOCK: list[tuple[str, str, tuple[str, ...]]] = [
    ("self_attn.q", "attn1.to_q", _WB),
    ("self_attn.k", "attn1.to_k", _WB),
    ("self_attn.v", "attn1.to_v", _WB),
    ("self_attn.o", "attn1.to_out.0", _WB),
    ("self_attn.norm_q", "attn1.norm_q", (".weight",)),
    ("self_attn.norm_k", "attn1.norm_k", (".weight",)),
    ("cross_attn.q", "attn2.to_q", _WB),
    ("cross_attn.k", "attn2.to_k", _WB),
    ("cross_attn.v", "attn2.to_v", _WB),
    ("cross_attn.o", "attn2.to_out.0", _WB),
    ("cross_attn.norm_q", "attn2.norm_q", (".weight",)),
    ("cross_attn.norm_k", "attn2.norm_k", (".weight",)),
    ("norm3", "norm2", _WB),
    ("ffn.0", "ffn.net.0.proj", _WB),
    ("ffn.2", "ffn.net.2", _WB),
    ("modulation", "scale_shift_table", ("",)),
]
# Wrappers the training code leaves in front of the model's names.
PREFIXES = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.", "model.diffusion_model.", "model.")
# Training checkpoints hold several state dicts; the EMA generator is what these projects sample with.
CONTAINER_KEYS = ("generator_ema", "generator", "state_dict", "model")

_BLOCK_KEY = re.compile(r"blocks\.(\d+)\.(.+)")


def _table(stems: list[tuple[str, str, tuple[str, ...]]]) -> dict[str, str]:
    return {a + s: b + s for a, b, suffixes in stems for s in suffixes}


_TOP_O2D, _BLOCK_O2D = _table(TOP_LEVEL), _table(PER_BLOCK)
_TOP_D2O = {v: k for k, v in _TOP_O2D.items()}
_BLOCK_D2O = {v: k for k, v in _BLOCK_O2D.items()}


def _rename(key: str, top: dict[str, str], block: dict[str, str]) -> str | None:
    m = _BLOCK_KEY.fullmatch(key)
    if m:
        new = block.get(m.group(2))
        return None if new is None else f"blocks.{m.group(1)}.{new}"
    return top.get(key)


def strip_prefixes(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = {}
    for key, value in state.items():
        changed = True
        while changed:
            changed = False
            for p in PREFIXES:
                if key.startswith(p):
                    key, changed = key[len(p) :], True
        out[key] = value
    return out


def unwrap(checkpoint: Mapping, source: str, key: str | None = None) -> dict[str, torch.Tensor]:
    """A loaded checkpoint -> its generator state dict, prefixes stripped.

    `key` picks the entry (LongLive samples with "generator"); by default the first of
    CONTAINER_KEYS present (the EMA generator, which Self-Forcing samples with), else the file.
    """
    if key is not None:
        if not isinstance(checkpoint.get(key), Mapping):
            raise WanLoadError(f"{source}: no state dict under key '{key}' (found {sorted(checkpoint)[:8]})")
        checkpoint = checkpoint[key]
    for name in CONTAINER_KEYS if key is None else ():
        inner = checkpoint.get(name)
        if isinstance(inner, Mapping) and inner and all(isinstance(v, torch.Tensor) for v in inner.values()):
            checkpoint = inner
            break
    bad = [k for k, v in checkpoint.items() if not isinstance(v, torch.Tensor)]
    if bad:
        raise WanLoadError(f"{source}: entry '{bad[0]}' is not a tensor (expected a state dict, or one "
                           f"under {list(CONTAINER_KEYS)})")
    return strip_prefixes(checkpoint)


def is_original_layout(state: Mapping[str, torch.Tensor]) -> bool:
    return any(k.endswith("self_attn.q.weight") or k == "head.head.weight" for k in state)


def to_diffusers(state: Mapping[str, torch.Tensor], source: str = "state dict") -> dict[str, torch.Tensor]:
    """Original CausalWanModel keys -> WanTransformer3DModel keys; an unknown key is an error naming it."""
    out = {}
    for key, value in state.items():
        new = _rename(key, _TOP_O2D, _BLOCK_O2D)
        if new is None:
            raise WanLoadError(f"{source}: key '{key}' has no diffusers counterpart (image-to-video, LoRA "
                               "or training-only modules are not supported)")
        out[new] = value
    return out


def to_original(state: Mapping[str, torch.Tensor], source: str = "state dict") -> dict[str, torch.Tensor]:
    """WanTransformer3DModel keys -> original CausalWanModel keys (the inverse of `to_diffusers`)."""
    out = {}
    for key, value in state.items():
        new = _rename(key, _TOP_D2O, _BLOCK_D2O)
        if new is None:
            raise WanLoadError(f"{source}: diffusers key '{key}' has no original counterpart")
        out[new] = value
    return out


def mapping_rows() -> list[tuple[str, str]]:
    """(original, diffusers) stems for the docs, with `N` for the block index."""
    rows = [(a, b) for a, b, _ in TOP_LEVEL]
    rows += [(f"blocks.N.{a}", f"blocks.N.{b}") for a, b, _ in PER_BLOCK]
    return rows
