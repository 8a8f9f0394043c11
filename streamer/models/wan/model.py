"""A causal Wan-2.1 checkpoint (Self-Forcing / CausVid / LongLive) behind the engine's model contract.

- `encode_prompt`: UMT5 states, zero-padded to `text_len` (cross-attention input, cached per prompt
  by the engine; `PromptCond.blend` interpolates them for "blend" redirects).
- `denoise`: one block-causal step of a chunk over each session's KV cache slot, each sample at its
  own time; returns x0 = x - t * v (Wan predicts the flow v = noise - x0).
- `commit`: the chunk again at t = 0 (the family's clean-context pass), its keys/values kept in
  the slot; the pool rolls the window with `rotate_back` re-indexing the kept keys.
- `decode`: the causal VAE, streamed per chunk with one temporal cache per slot (the slot of each
  row is the one whose last estimate it is; the cache advances when the chunk is committed).

Units: latents come in chunks of `frames_per_chunk` latent frames; every latent frame decodes to
`temporal` (4) video frames, so the spec's `frames_per_chunk`, `sink_frames` and `window_frames`
(what the engine, sessions and scheduler count) are video frames, while `latent_shape[0]` and the
pool layout are latent frames. A stream's first latent frame decodes to a single frame: the first
chunk is padded at its start by repeating that frame, so every chunk has the same frame count.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from diffusers import AutoencoderKLWan, WanTransformer3DModel

from ...cache.kv_pool import CacheBatch, KVCachePool, PoolLayout
from ..base import Conditioning, ModelSpec, PromptCond
from .config import CausalConfig, WanLoadError
from .text import PromptEncoder
from .transformer import CausalWanTransformer
from .vae_stream import StreamingDecoder


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality, rejecting most non-matches on one element first."""
    return a.shape == b.shape and bool(a.view(-1)[0] == b.view(-1)[0]) and torch.equal(a, b)


class StreamCachePool(KVCachePool):
    """A KV pool whose slots also own a stream's VAE decode cache: (re)allocating a slot starts fresh.

    `reset` keeps the decode cache: it is the "recache" redirect, and the video goes on.
    """

    def __init__(self, layout: PoolLayout, num_slots: int, dtype: torch.dtype, device: torch.device,
                 forget: Callable[[int], None]):
        super().__init__(layout, num_slots, dtype=dtype, device=device)
        self._forget = forget

    def allocate(self) -> int:
        slot = super().allocate()
        self._forget(slot)
        return slot

    def release(self, slot: int) -> None:
        super().release(slot)
        self._forget(slot)


class WanCausalModel:
    def __init__(self, transformer: WanTransformer3DModel, vae: AutoencoderKLWan, text: PromptEncoder,
                 cfg: CausalConfig, name: str = "wan-causal"):
        self.cfg = cfg
        self.net = CausalWanTransformer(transformer.eval())
        self.vae = StreamingDecoder(vae.eval())
        self.text = text
        tc = transformer.config
        temporal, spatial = self.vae.temporal, self.vae.spatial
        if tc.in_channels != vae.config.z_dim:
            raise WanLoadError(f"transformer in_channels ({tc.in_channels}) != vae z_dim ({vae.config.z_dim})")
        _, ph, pw = tc.patch_size
        if cfg.height % (spatial * ph) or cfg.width % (spatial * pw):
            raise WanLoadError(f"height x width {cfg.height}x{cfg.width} must be multiples of {spatial * ph}x"
                               f"{spatial * pw} (VAE x patch)")
        h, w = cfg.height // spatial, cfg.width // spatial
        f = cfg.frames_per_chunk
        self.temporal = temporal
        self.spec = ModelSpec(
            name=name,
            frames_per_chunk=temporal * f,
            height=cfg.height,
            width=cfg.width,
            fps=cfg.fps,
            latent_shape=(f, tc.in_channels, h, w),
            default_steps=len(cfg.denoising_steps),
            timesteps=cfg.timesteps,
            sink_frames=temporal * cfg.sink_frames,
            window_frames=temporal * cfg.window_frames,
            conditioning=("text",),
            num_actions=1,  # "none" only: the protocol's action message is refused by name
            control_dim=0,
            max_batch=cfg.max_batch,
            shift=cfg.shift,
        )
        self.layout = PoolLayout(
            layers=tc.num_layers, heads=tc.num_attention_heads, head_dim=tc.attention_head_dim,
            tokens_per_frame=self.net.tokens_per_frame(h, w), sink_frames=cfg.sink_frames,
            window_frames=cfg.window_frames, frames_per_chunk=f,
        )
        # The last x0 estimate made for each slot. `decode(x0)` has no cache argument; the engine's
        # final step hands back that estimate bit for bit (t_next = 0), so decode finds each row's
        # stream (its VAE cache) by matching it here, whatever the order of decode and commit.
        self._estimates: dict[int, torch.Tensor] = {}

    @classmethod
    def load(cls, folder: Path | str, device: str | torch.device | None = None,
             dtype: torch.dtype | None = None) -> WanCausalModel:
        from .loader import load_folder

        return load_folder(Path(folder), device=device, dtype=dtype)

    @property
    def device(self) -> torch.device:
        return self.net.device

    @property
    def compute_dtype(self) -> torch.dtype:
        return self.net.dtype

    @property
    def records_batch_sizes(self) -> bool:
        return False

    # -- the model contract -------------------------------------------------------------------
    def new_pool(self, num_slots: int) -> StreamCachePool:
        return StreamCachePool(self.layout, num_slots, self.net.dtype, self.device, self._forget)

    def configure_caching(self, step_reuse: float | None, commit_reuse: bool) -> None:
        """Neither technique is built for Wan's blocks yet: asking for one is an error, not a no-op."""
        asked = [name for name, on in (("step reuse", step_reuse is not None), ("commit reuse", commit_reuse)) if on]
        if asked:
            raise ValueError(f"{self.spec.name} does not support {' or '.join(asked)} "
                             "(docs/caching.md: only the embedded model has them)")

    def caching_stats(self) -> dict[str, float]:
        return {}

    def _forget(self, slot: int) -> None:
        self.vae.forget(slot)
        self._estimates.pop(slot, None)

    @torch.no_grad()
    def encode_prompt(self, texts: list[str]) -> list[PromptCond]:
        states = self.text(texts).to(self.net.dtype)  # (B, text_len, text_dim)
        return [PromptCond(text=t, tensors={"text": states[i]}) for i, t in enumerate(texts)]

    def _text(self, prompts: list[PromptCond]) -> torch.Tensor:
        return torch.stack([p.tensors["text"] for p in prompts])  # (B, L, text_dim)

    @torch.no_grad()
    def denoise(self, x: torch.Tensor, t: torch.Tensor, cond: Conditioning, cache: CacheBatch) -> torch.Tensor:
        """x (B, F, C, h, w) at times t (B,) -> x0 estimate, on x's device and dtype."""
        v = self.net(x, t, self._text(cond.prompts), cache=cache)
        xd, td = x.to(v.device, torch.float32), t.to(v.device, torch.float32).view(-1, 1, 1, 1, 1)
        x0 = (xd - td * v.float()).to(x.device, x.dtype)
        self._estimates.update(zip(cache.slots, x0.cpu(), strict=True))
        return x0

    @torch.no_grad()
    def commit(self, x0: torch.Tensor, cond: Conditioning, cache: CacheBatch,
               noise: torch.Tensor | None = None) -> None:
        """Run the finished chunk at t = 0 so its clean keys/values enter each slot (the
        family commits clean: spec.context_noise is 0 and `noise` goes unused)."""
        if not cache.commit:
            raise ValueError("commit() needs a cache batch made with commit=True")
        self.net(x0, torch.zeros(x0.shape[0]), self._text(cond.prompts), cache=cache)
        cache.finish(self.net.rotate_back)
        self.vae.settle(list(cache.slots))

    def streams_of(self, x0: torch.Tensor) -> list[int | None]:
        """The slot whose last estimate each row of x0 is (None: no stream, e.g. calibration)."""
        out: list[int | None] = []
        for row in x0.cpu():
            slot = next((s for s, e in self._estimates.items() if s not in out and _same(e, row)), None)
            out.append(slot)
        return out

    @torch.no_grad()
    def decode(self, x0: torch.Tensor, slots: list[int | None] | None = None) -> torch.Tensor:
        """x0 (B, F, C, h, w) -> uint8 frames (B, temporal * F, H, W, 3) on the CPU.

        `slots` name the streams (default: found from the last estimates, see `streams_of`); a
        row without one decodes as a fresh stream.
        """
        keys = slots if slots is not None else self.streams_of(x0)
        videos = self.vae.decode(x0, keys)  # per sample (3, T, H, W) in [-1, 1]
        n = self.spec.frames_per_chunk
        out = []
        for v in videos:
            if v.shape[1] < n:  # a stream's first chunk: hold its first frame
                v = torch.cat([v[:, :1].expand(-1, n - v.shape[1], -1, -1), v], 1)
            out.append(v)
        video = torch.stack(out)  # (B, 3, n, H, W)
        pixels = ((video.float() + 1.0) * 127.5).round().clamp(0, 255).to(torch.uint8)
        return pixels.permute(0, 2, 3, 4, 1).cpu()  # (B, n, H, W, 3)
