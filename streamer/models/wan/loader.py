"""Load a causal Wan checkpoint from a local folder (never the hub).

    FOLDER/
      streamer.json              optional CausalConfig overrides (chunk, window, sink, steps, shift, size)
      transformer/config.json    diffusers WanTransformer3DModel config
      transformer/diffusion_pytorch_model.safetensors[.index.json + shards]   diffusers layout, or
      transformer/<one file>.safetensors|.pt|.pth|.bin                        original CausalWanModel layout
      vae/config.json + vae/diffusion_pytorch_model.safetensors               AutoencoderKLWan
      text_encoder/config.json + weights                                      transformers UMT5EncoderModel
      tokenizer/                                                              its tokenizer files

Original-layout files may be Self-Forcing/CausVid/LongLive training checkpoints: the EMA generator
is taken (then the generator), wrapper prefixes are stripped, and keys are mapped by `convert.py`.
Every state dict is checked against the model its config builds before anything is loaded: a
missing file, a missing or unexpected key, or a shape mismatch is a `WanLoadError` naming the file
and the key.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from diffusers import AutoencoderKLWan, WanTransformer3DModel
from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed
from safetensors.torch import load_file

from ..checkpoint import check_state_dict
from ..device import resolve_device
from .config import CausalConfig, WanLoadError
from .convert import is_original_layout, to_diffusers, unwrap
from .text import PromptEncoder

DIFFUSERS_WEIGHTS = "diffusion_pytorch_model.safetensors"
ORIGINAL_SUFFIXES = (".safetensors", ".pt", ".pth", ".bin")


def default_device_dtype(device=None, dtype=None) -> tuple[torch.device, torch.dtype]:
    """`device` checked (a DeviceError names what is missing), default the GPU when there is one."""
    dev = resolve_device(device, "cuda" if torch.cuda.is_available() else "cpu")
    return dev, dtype or (torch.bfloat16 if dev.type == "cuda" else torch.float32)


def cast_for_inference(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """`dtype`, except the parameters diffusers keeps in fp32 (`_keep_in_fp32_modules`: modulation, norms).

    Casts tensor by tensor: diffusers' `.to(dtype)` would cast those too (and warn about it).
    """
    keep = getattr(model, "_keep_in_fp32_modules", None) or []
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        if tensor.is_floating_point():
            tensor.data = tensor.data.to(torch.float32 if any(k in name.split(".") for k in keep) else dtype)
    return model


def read_json(path: Path) -> dict:
    if not path.is_file():
        raise WanLoadError(f"missing file: {path}")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise WanLoadError(f"{path}: not valid JSON ({exc})") from exc


def read_state(path: Path, key: str | None = None) -> dict[str, torch.Tensor]:
    """A safetensors file, a sharded index, or a torch checkpoint (weights only) -> flat state dict.

    `key` picks the entry of a training checkpoint (see `convert.unwrap`).
    """
    try:
        if path.name.endswith(".index.json"):
            shards = sorted(set(read_json(path).get("weight_map", {}).values()))
            if not shards:
                raise WanLoadError(f"{path}: no 'weight_map' entries")
            state: dict[str, torch.Tensor] = {}
            for shard in shards:
                state.update(read_state(path.parent / shard))
            return state
        if not path.is_file():
            raise WanLoadError(f"missing file: {path}")
        if path.suffix == ".safetensors":
            return load_file(str(path))
        obj = torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
    except WanLoadError:
        raise
    except Exception as exc:  # corrupt files raise several types
        raise WanLoadError(f"{path}: cannot read weights ({exc})") from exc
    if not isinstance(obj, dict):
        raise WanLoadError(f"{path}: expected a state dict, found {type(obj).__name__}")
    return unwrap(obj, str(path), key)


def _weights_file(folder: Path) -> Path:
    for name in (DIFFUSERS_WEIGHTS + ".index.json", DIFFUSERS_WEIGHTS):
        if (folder / name).is_file():
            return folder / name
    found = sorted(p for p in folder.iterdir() if p.suffix in ORIGINAL_SUFFIXES) if folder.is_dir() else []
    if len(found) == 1:
        return found[0]
    if not found:
        raise WanLoadError(f"missing file: {folder / DIFFUSERS_WEIGHTS} (or one original-layout "
                           f"{'/'.join(ORIGINAL_SUFFIXES)} file in {folder})")
    raise WanLoadError(f"{folder}: several weight files {[p.name for p in found]}; keep one")


def load_checked(cls: Any, config: dict, state: dict[str, torch.Tensor], source: str,
                 ignore_unexpected: tuple[str, ...] = ()) -> Any:
    """Build `cls` from `config` without allocating, check `state` against it, then load it."""
    try:
        with torch.device("meta"):
            model = cls.from_config(config)
    except Exception as exc:
        raise WanLoadError(f"{source}: config does not build a {cls.__name__} ({exc})") from exc
    expected = model.state_dict()
    state = {k: v for k, v in state.items() if not any(s in k for s in ignore_unexpected)}
    check_state_dict(expected, state, source, WanLoadError)
    model.load_state_dict(state, assign=True)
    return model


def load_transformer(folder: Path, device: torch.device, dtype: torch.dtype,
                     checkpoint_key: str | None = None) -> WanTransformer3DModel:
    config = read_json(folder / "config.json")
    path = _weights_file(folder)
    state = read_state(path, checkpoint_key)
    if is_original_layout(state):
        state = to_diffusers(state, str(path))
    model = load_checked(WanTransformer3DModel, config, state, str(path),
                         tuple(WanTransformer3DModel._keys_to_ignore_on_load_unexpected or ()))
    # RoPE tables are computed, not stored: the meta-device build left them empty.
    cfg = model.config
    model.rope = WanRotaryPosEmbed(cfg.attention_head_dim, cfg.patch_size, cfg.rope_max_seq_len)
    return cast_for_inference(model, dtype).to(device)


def load_vae(folder: Path, device: torch.device, dtype: torch.dtype) -> AutoencoderKLWan:
    config = read_json(folder / "config.json")
    path = folder / DIFFUSERS_WEIGHTS
    if not path.is_file():
        raise WanLoadError(f"missing file: {path} (the VAE must be in diffusers layout)")
    model = load_checked(AutoencoderKLWan, config, read_state(path), str(path))
    return cast_for_inference(model, dtype).to(device)


def load_text(folder: Path, tokenizer_folder: Path, device: torch.device, dtype: torch.dtype,
              text_len: int) -> PromptEncoder:
    from transformers import AutoTokenizer, UMT5EncoderModel

    read_json(folder / "config.json")
    if not any(folder.glob("*.safetensors")) and not any(folder.glob("*.bin")):
        raise WanLoadError(f"missing file: {folder / 'model.safetensors'} (UMT5 encoder weights)")
    if not tokenizer_folder.is_dir():
        raise WanLoadError(f"missing folder: {tokenizer_folder} (the prompt tokenizer)")
    try:
        encoder = UMT5EncoderModel.from_pretrained(str(folder), dtype=dtype, local_files_only=True)
    except Exception as exc:
        raise WanLoadError(f"{folder}: cannot load the UMT5 encoder ({exc})") from exc
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_folder), local_files_only=True)
    except Exception as exc:
        raise WanLoadError(f"{tokenizer_folder}: cannot load the tokenizer ({exc})") from exc
    return PromptEncoder(encoder.to(device), tokenizer, text_len)


def load_folder(root: Path, device=None, dtype=None):
    from .model import WanCausalModel

    if not root.is_dir():
        raise WanLoadError(f"checkpoint folder not found: {root}")
    dev, dt = default_device_dtype(device, dtype)
    cfg = CausalConfig.load(root / "streamer.json") if (root / "streamer.json").exists() else CausalConfig()
    transformer = load_transformer(root / "transformer", dev, dt, cfg.checkpoint_key)
    vae = load_vae(root / "vae", dev, dt)
    text = load_text(root / "text_encoder", root / "tokenizer", dev, dt, cfg.text_len)
    return WanCausalModel(transformer, vae, text, cfg)
