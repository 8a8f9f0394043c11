"""Frame autoencoder: 128x128 RGB <-> a 16x16x8 latent grid.

The decoder runs for every streamed frame, so it is built for a CPU: convolutions at the
latent grid, at twice it and (optionally, `dec_fine_channels`) at four times it, and pixel
shuffles for the rest (0.26 GFLOP a frame in the default config, the shipped one; 0.39 with
the deeper stages measured in docs/model.md). The encoder only runs in training, and is kept
cheap too because training encodes clips on the fly.
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


def _upsampled(c_in: int, c_out: int) -> list[nn.Module]:
    """Layers from c_in channels to c_out at twice the resolution (a list: the state-dict keys
    stay those of one flat Sequential)."""
    return [nn.SiLU(), nn.Conv2d(c_in, c_out * 4, 3, padding=1), nn.PixelShuffle(2), nn.SiLU(),
            nn.Conv2d(c_out, c_out, 3, padding=1)]


class Decoder(nn.Module):
    def __init__(self, cfg: AutoencoderConfig):
        super().__init__()
        ch, mid, fine, f = cfg.dec_channels, cfg.dec_mid_channels, cfg.dec_fine_channels, cfg.downsample
        layers: list[nn.Module] = [nn.Conv2d(cfg.latent_channels, ch, 3, padding=1), nn.SiLU()]
        layers += [ResBlock(ch) for _ in range(cfg.dec_blocks)]
        layers += _upsampled(ch, mid)  # (mid, 2h, 2w)
        layers += [ResBlock(mid) for _ in range(cfg.dec_mid_blocks)]
        if fine:  # a stage at 4h x 4w draws edges inside a latent cell's 8x8 pixels
            layers += _upsampled(mid, fine)  # (fine, 4h, 4w)
        last, up = (fine, f // 4) if fine else (mid, f // 2)
        layers += [nn.SiLU(), nn.Conv2d(last, 3 * up**2, 3, padding=1), nn.PixelShuffle(up)]  # (3, H, W)
        # Layer indices (the state-dict keys) of the default config are those of the first weights.
        self.net = nn.Sequential(*layers)

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
