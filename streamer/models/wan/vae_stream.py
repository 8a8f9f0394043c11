"""Streamed VAE decode: one chunk at a time per stream, keeping each stream's causal feature cache.

diffusers' `AutoencoderKLWan._decode` decodes a whole clip one latent frame at a time, carrying a
`feat_cache` list (the last frames seen by every causal conv) from frame to frame, and clears it at
the end. `StreamingDecoder` runs the same per-frame loop on the decoder's own `feat_cache`
mechanism, but keeps one cache per stream (keyed by the KV cache slot) across calls: decoding a
stream chunk by chunk therefore equals decoding the whole clip at once.

A decode only stages the stream's next cache; `settle` (called by the model's commit) makes it
the stream's cache. Decoding the same chunk again before it settles (the engine re-runs a failed
batch item by item) starts from the same cache, so a retry cannot advance a stream twice. If a
stream is decoded again with other latents before settling, the staged cache settles first (the
caller committed before decoding).

Streams in a batch whose caches have the same layout decode in one call (caches concatenated
along the batch); fresh streams form their own group. The first latent frame of a stream decodes
to one frame, every later one to `temporal` frames (4 for Wan 2.1).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch
from diffusers import AutoencoderKLWan
from diffusers.models.autoencoders.autoencoder_kl_wan import WanCausalConv3d, unpatchify

FeatCache = list  # one entry per causal conv: None (unused), the marker "Rep", or a (b, C, <=2, H, W) tensor


def compression(vae: AutoencoderKLWan) -> tuple[int, int]:
    """(temporal, spatial) compression of a Wan VAE, from its config."""
    cfg = vae.config
    temporal = 2 ** sum(bool(d) for d in cfg.temperal_downsample)
    spatial = 2 ** (len(cfg.dim_mult) - 1) * (cfg.patch_size or 1)
    return temporal, spatial


class StreamingDecoder:
    def __init__(self, vae: AutoencoderKLWan):
        self.vae = vae
        self.temporal, self.spatial = compression(vae)
        self.num_convs = sum(isinstance(m, WanCausalConv3d) for m in vae.decoder.modules())
        mean = torch.tensor(vae.config.latents_mean, dtype=torch.float32)
        std = torch.tensor(vae.config.latents_std, dtype=torch.float32)
        self._mean, self._std = mean.view(1, -1, 1, 1, 1), std.view(1, -1, 1, 1, 1)
        self.states: dict[Hashable, FeatCache] = {}  # settled: after the stream's last final chunk
        self._staged: dict[Hashable, tuple[torch.Tensor, FeatCache]] = {}  # (latents, cache after them)

    def forget(self, key: Hashable) -> None:
        """The stream under `key` ended (or its slot is reused): its next chunk starts fresh."""
        self.states.pop(key, None)
        self._staged.pop(key, None)

    def settle(self, keys: list[Hashable]) -> None:
        """The chunks last decoded for `keys` are final: their caches become the streams' caches."""
        for key in keys:
            staged = self._staged.pop(key, None)
            if staged is not None:
                self.states[key] = staged[1]

    @torch.no_grad()
    def decode(self, latents: torch.Tensor, keys: Sequence[Hashable | None] | None) -> list[torch.Tensor]:
        """Normalised latents (B, F, C, h, w) -> per sample a video (3, T, H, W) in [-1, 1].

        T is 1 + temporal * (F - 1) for a stream's first chunk, temporal * F after. `keys` name the
        streams; a None key (or keys=None) decodes that sample as a fresh stream and keeps nothing.
        """
        b = latents.shape[0]
        keys_: list[Hashable | None] = list(keys) if keys is not None else [None] * b
        for key, row in zip(keys_, latents, strict=True):
            staged = self._staged.get(key) if key is not None else None
            if staged is not None and not torch.equal(staged[0], row):
                self.settle([key])  # a new chunk: the staged one was final (commit came first)
        states = [self.states.get(k) if k is not None else None for k in keys_]
        vae = self.vae
        dev, dtype = vae.post_quant_conv.weight.device, vae.post_quant_conv.weight.dtype
        z = latents.to(dev, torch.float32).permute(0, 2, 1, 3, 4)  # (B, C, F, h, w)
        z = (z * self._std.to(dev) + self._mean.to(dev)).to(dtype)  # undo Wan's latent normalisation
        out: list[torch.Tensor | None] = [None] * b
        new_states: list[FeatCache | None] = [None] * b
        for group in self._groups(states):
            cache = self._merge([states[i] for i in group])
            video, cache = self._run(z[group], cache, fresh=states[group[0]] is None)
            for j, i in enumerate(group):
                out[i] = video[j]
                new_states[i] = [c[j : j + 1] if isinstance(c, torch.Tensor) else c for c in cache]
        for key, row, state in zip(keys_, latents, new_states, strict=True):
            if key is not None:
                self._staged[key] = (row.clone(), state)  # type: ignore[assignment]
        return out  # type: ignore[return-value]

    def _groups(self, states: list[FeatCache | None]) -> list[list[int]]:
        """Indices that can share one decoder call: caches with the same entry shapes and markers.

        After a stream's first chunk of two or more latent frames every stream has the same layout,
        so steady-state batches decode in one call; fresh streams form their own group.
        """
        groups: dict[object, list[int]] = {}
        for i, s in enumerate(states):
            sig = None if s is None else tuple(tuple(c.shape[1:]) if isinstance(c, torch.Tensor) else c for c in s)
            groups.setdefault(sig, []).append(i)
        return list(groups.values())

    def _merge(self, states: list[FeatCache | None]) -> FeatCache:
        first = states[0]
        if first is None:
            return [None] * self.num_convs
        if len(states) == 1:
            return list(first)
        return [
            torch.cat([s[n] for s in states]) if isinstance(first[n], torch.Tensor) else first[n]  # type: ignore[index]
            for n in range(self.num_convs)
        ]

    def _run(self, z: torch.Tensor, cache: FeatCache, fresh: bool) -> tuple[torch.Tensor, FeatCache]:
        """The per-latent-frame loop of diffusers' `_decode`, continuing `cache` (mutated)."""
        vae = self.vae
        x = vae.post_quant_conv(z)
        frames = []
        for i in range(x.shape[2]):
            idx = [0]
            frames.append(vae.decoder(x[:, :, i : i + 1], feat_cache=cache, feat_idx=idx, first_chunk=fresh and i == 0))
        video = torch.cat(frames, 2)  # (b, 3, T, H, W)
        if vae.config.patch_size is not None:
            video = unpatchify(video, patch_size=vae.config.patch_size)
        return video.clamp(-1.0, 1.0), cache
