"""Autoencoder training (stage 1 of train.py): from scratch on single frames of the procedural world,
or a fine-tune of a shipped one (`--decoder-steps`, `--autoencoder-steps`), and its held-out PSNR."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from .atomic_save import save_atomically, write_text_atomically
from .autoencoder import Autoencoder, to_unit
from .config import EmbeddedConfig
from .grow import grown_decoder
from .model import EmbeddedModel
from .world import sample_clip


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    """PSNR in dB of images in [-1, 1]."""
    mse = F.mse_loss(a.clamp(-1, 1), b.clamp(-1, 1)).item()
    return 10 * np.log10(4.0 / max(mse, 1e-12))


def frame_batch(rng: np.random.Generator, n: int, size: int) -> torch.Tensor:
    clips = [sample_clip(rng, 2, 2, size) for _ in range((n + 1) // 2)]
    return torch.from_numpy(np.concatenate([c.frames for c in clips])[:n])


def edge_weight(img: torch.Tensor, boost: float = 8.0) -> torch.Tensor:
    """Per-pixel loss weight (N, 1, H, W): 1 + boost near edges.

    Objects are a few percent of the pixels; an unweighted loss spends the autoencoder on
    backgrounds and leaves objects as soft blobs whose shape the evaluator cannot read.
    """
    gx = (img[..., :, 1:] - img[..., :, :-1]).abs().sum(1, keepdim=True)
    gy = (img[..., 1:, :] - img[..., :-1, :]).abs().sum(1, keepdim=True)
    edges = (F.pad(gx, (0, 1)) + F.pad(gy, (0, 0, 0, 1)) > 0.3).float()
    return 1.0 + boost * F.max_pool2d(edges, 3, stride=1, padding=1)


def train_autoencoder(cfg: EmbeddedConfig, run: Path, steps: int, seed: int, minutes_per_ckpt: float) -> Autoencoder:
    return fit_autoencoder(Autoencoder(cfg.autoencoder), run / "ae.pt", steps, seed, minutes_per_ckpt, 1e-3)


def fit_autoencoder(ae: Autoencoder, ckpt_path: Path, steps: int, seed: int, minutes_per_ckpt: float, lr: float,
                    decoder_only: bool = False) -> Autoencoder:
    """Train `ae` on single frames of the world (cosine learning rate from `lr`), resumable.

    `decoder_only` freezes the encoder: the latent space the DiT was trained on stays exactly as
    it is, so a better decoder ships without retraining the DiT.
    """
    params = ae.decoder.parameters() if decoder_only else ae.parameters()
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    step, rng = 0, np.random.default_rng(seed)
    if ckpt_path.exists():
        ck = torch.load(ckpt_path, weights_only=False)
        ae.load_state_dict(ck["ae"])
        opt.load_state_dict(ck["opt"])
        step, rng = ck["step"], ck["rng"]
    ae.train()
    last_ckpt = time.monotonic()
    bar = tqdm(total=steps, initial=step, desc="decoder" if decoder_only else "autoencoder", dynamic_ncols=True)
    while step < steps:
        for g in opt.param_groups:  # cosine decay, computed from the step so resuming is exact
            g["lr"] = lr * 0.5 * (1 + np.cos(np.pi * step / steps))
        img = to_unit(frame_batch(rng, 16, ae.cfg.image_size))
        with torch.set_grad_enabled(not decoder_only):
            z = ae.encoder(img)
        # Noise on the latents: generated latents are never exact, the decoder must not care.
        z_in = z + 0.1 * z.detach().std() * torch.randn_like(z) * (torch.rand(z.shape[0], 1, 1, 1) < 0.5)
        rec = ae.decoder(z_in)
        w = edge_weight(img)
        loss = ((rec - img).abs() * w).mean() + ((rec - img) ** 2 * w).mean()
        if not decoder_only:
            loss = loss + 1e-4 * z.pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        bar.update(1)
        if step % 20 == 0:
            bar.set_postfix(loss=f"{loss.item():.4f}", psnr=f"{psnr(rec.detach(), img):.1f}")
        if time.monotonic() - last_ckpt > 60 * minutes_per_ckpt or step == steps:
            save_atomically({"ae": ae.state_dict(), "opt": opt.state_dict(), "step": step, "rng": rng}, ckpt_path)
            last_ckpt = time.monotonic()
    bar.close()
    return ae.eval()


def finetune_autoencoder(export: Path, run: Path, steps: int, seed: int, minutes_per_ckpt: float, lr: float,
                         arch: dict[str, int] | None = None, decoder_only: bool = True) -> None:
    """Fine-tune the autoencoder of the model in `export` and save the model back.

    `decoder_only` freezes the encoder, so the DiT's latent space stays exactly as it was.
    Otherwise the encoder trains too and the latents move: the DiT in `export` then no longer
    matches them and must be trained on the new ones (docs/model.md, Autoencoder).
    `arch` (AutoencoderConfig decoder fields) grows the decoder first: the new one starts from
    every old weight whose name and shape it shares, so only the added layers start from scratch.
    """
    model = EmbeddedModel.load(export)
    before, _ = evaluate_autoencoder(model.ae, model.cfg.autoencoder.image_size)
    if arch:
        model = grown_decoder(model, arch)
    ckpt = run / ("decoder.pt" if decoder_only else "autoencoder.pt")
    fit_autoencoder(model.ae, ckpt, steps, seed + 2, minutes_per_ckpt, lr, decoder_only=decoder_only)
    after, z_std = evaluate_autoencoder(model.ae, model.cfg.autoencoder.image_size)
    what = "decoder" if decoder_only else "autoencoder (encoder too: train the DiT on the new latents next)"
    print(f"{what} fine-tune: held-out PSNR {before:.2f} -> {after:.2f} dB", flush=True)
    model.save(export)
    write_text_atomically(export / "ae_eval.json", json.dumps({"psnr_db": after, "latent_std": z_std}) + "\n")


@torch.no_grad()
def evaluate_autoencoder(ae: Autoencoder, size: int, seed: int = 12345, n: int = 64) -> tuple[float, float]:
    """Held-out reconstruction PSNR (dB) and the latent std (for latent_scale)."""
    img = to_unit(frame_batch(np.random.default_rng(seed), n, size))
    z = ae.encoder(img)
    return psnr(ae.decoder(z), img), float(z.std())
