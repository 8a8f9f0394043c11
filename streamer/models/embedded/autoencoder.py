"""Frame autoencoder: 128x128 RGB <-> a 16x16x8 latent grid.

The decoder runs for every streamed frame, so it is built for a CPU: one stage of
convolutions at the latent grid, one at twice that, and pixel shuffles for the rest
(about 0.3 GFLOP a frame). The encoder only runs in training, and is kept cheap too because
training encodes clips on the fly.
"""

from __future__ import annotations

import torch
from torch import nn

from .config import AutoencoderConfig


class ResBlock(nn.Module):
    def __init__(self, ch: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(ch, ch, 3, padding=1), nn.SiLU(), nn.Conv2d(ch, ch, 3, padding=1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


class Encoder(nn.Module):
    def __init__(self, cfg: AutoencoderConfig):
        super().__init__()
        ch, f = cfg.enc_channels, cfg.downsample
        self.net = nn.Sequential(
            nn.PixelUnshuffle(f),  # (3*f*f, h, w): every latent cell sees its own pixels first
            nn.Conv2d(3 * f * f, ch, 3, padding=1),
            nn.SiLU(),
            ResBlock(ch),
            nn.SiLU(),
            nn.Conv2d(ch, cfg.latent_channels, 3, padding=1),
        )

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        """img (N, 3, H, W) in [-1, 1] -> latents (N, C, h, w)."""
        return self.net(img)


class Decoder(nn.Module):
    def __init__(self, cfg: AutoencoderConfig):
        super().__init__()
        ch, mid, f = cfg.dec_channels, cfg.dec_mid_channels, cfg.downsample
        self.net = nn.Sequential(
            nn.Conv2d(cfg.latent_channels, ch, 3, padding=1),
            nn.SiLU(),
            ResBlock(ch),
            nn.SiLU(),
            nn.Conv2d(ch, mid * 4, 3, padding=1),
            nn.PixelShuffle(2),  # (mid, 2h, 2w)
            nn.SiLU(),
            nn.Conv2d(mid, mid, 3, padding=1),
            nn.SiLU(),
            nn.Conv2d(mid, 3 * (f // 2) ** 2, 3, padding=1),
            nn.PixelShuffle(f // 2),  # (3, H, W)
        )

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """latents (N, C, h, w) -> img (N, 3, H, W), roughly in [-1, 1]."""
        return self.net(z)


class Autoencoder(nn.Module):
    def __init__(self, cfg: AutoencoderConfig):
        super().__init__()
        self.cfg = cfg
        self.encoder = Encoder(cfg)
        self.decoder = Decoder(cfg)

    def forward(self, img: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = self.encoder(img)
        return self.decoder(z), z


def to_unit(frames: torch.Tensor) -> torch.Tensor:
    """uint8 (N, H, W, 3) -> float (N, 3, H, W) in [-1, 1]."""
    return frames.permute(0, 3, 1, 2).float().div(127.5).sub(1.0)


def to_uint8(img: torch.Tensor) -> torch.Tensor:
    """float (N, 3, H, W) in [-1, 1] -> uint8 (N, H, W, 3)."""
    return img.add(1.0).mul(127.5).round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1)
