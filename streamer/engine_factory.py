"""Build an engine from `streamer serve` arguments: pick the model, its weights, the engine config."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import torch

from .engine import Engine, EngineConfig
from .models.device import resolve_device
from .models.embedded.autoencoder import Autoencoder
from .models.embedded.config import AutoencoderConfig, DiTConfig, EmbeddedConfig
from .models.embedded.dit import CausalDiT
from .models.embedded.model import SHIPPED_WEIGHTS, EmbeddedModel
from .models.precision import AUTO, resolve_precision

MODELS = (*SHIPPED_WEIGHTS, "wan-causal")
log = logging.getLogger(__name__)


def tiny_embedded(seed: int = 0, device: str | torch.device | None = None, precision: str = "fp32") -> EmbeddedModel:
    """A tiny random embedded model (32x32 frames) for plumbing tests: fast, meaningless pixels.

    The weights are drawn in fp32 on the CPU, then moved and cast, so every device and
    precision gets the same model.
    """
    dev = resolve_device(device)
    torch.manual_seed(seed)
    cfg = EmbeddedConfig(
        autoencoder=AutoencoderConfig(image_size=32, enc_channels=16, dec_channels=16, dec_mid_channels=8),
        dit=DiTConfig(latent_size=4, dim=32, depth=2, heads=2, text_layers=1),
    )
    ae, dit = Autoencoder(cfg.autoencoder), CausalDiT(cfg.dit)
    with torch.no_grad():  # adaLN-Zero starts at zero; make every input matter
        for p in dit.parameters():
            p.add_(torch.randn_like(p) * 0.2)
        # An untrained decoder maps everything to mid-grey; spread it so frames differ visibly.
        last_conv = ae.decoder.net[-2]
        assert isinstance(last_conv, torch.nn.Conv2d)
        last_conv.weight.mul_(8.0)
    return EmbeddedModel(cfg, ae, dit, max_batch=8, device=dev, precision=precision)


def build_model(name: str, config: str | None, weights: str | None, device: str | None = None,
                precision: str | None = None, guidance: float | None = None, compile: bool = False):
    """The model `streamer serve --model NAME` serves, on `device`, computing in `precision`.

    `device` None is each model's own default: the CPU for the embedded model (it is built to run
    live there), the GPU when there is one for Wan. A device this machine lacks is a DeviceError,
    and a precision it cannot compute in natively a PrecisionError (both ValueErrors), before any
    weight is read. `precision` None is fp32 for the embedded model, and `auto` is bf16 where
    that was measured to pay (`streamer.models.precision.resolve_precision`); Wan computes in the dtype its loader
    picks (bf16 on a GPU, fp32 on the CPU) and takes no `precision` but `auto`. `guidance`
    overrides the embedded model's classifier-free guidance scale (None: its config's). `compile`
    switches torch.compile on for the embedded model's blocks (a CompileError where it cannot build).
    """
    if name in SHIPPED_WEIGHTS:  # the embedded model: --weights, or its shipped folder
        precision = resolve_precision(precision or "fp32", resolve_device(device))
        if config == "tiny-random":
            model = tiny_embedded(device=device, precision=precision)
        elif config is not None:
            raise ValueError(f"--config for the embedded model must be 'tiny-random', got {config!r}")
        else:
            model = EmbeddedModel.load(Path(weights) if weights else SHIPPED_WEIGHTS[name], device=device,
                                       precision=precision)
        model.configure_guidance(guidance)
        if compile:
            model.compile()
        return model
    if name == "wan-causal":
        if precision not in (None, AUTO):  # its loader's own choice is an `auto`
            raise ValueError("--precision is for the embedded model; wan-causal computes in the dtype its "
                             "loader picks (bf16 on a GPU, fp32 on the CPU; see docs/wan.md)")
        if compile:
            raise ValueError("--compile is for the embedded model; wan-causal runs eager (docs/model.md, Compiled blocks)")
        if guidance is not None:
            raise ValueError("--guidance is for the embedded model; the distilled wan-causal checkpoints "
                             "sample without classifier-free guidance")
        # Guarded: needs the `wan` extra (diffusers, transformers); its ImportError says so.
        from .models.wan import WanCausalModel, tiny_random

        if config == "tiny-random":
            return tiny_random(device=device)
        if config is not None:
            raise ValueError(f"--config for wan-causal must be 'tiny-random', got {config!r}")
        if not weights:
            raise ValueError("--model wan-causal needs --weights FOLDER (a local checkpoint folder) "
                             "or --config tiny-random")
        return WanCausalModel.load(weights, device=device)
    raise ValueError(f"unknown model {name!r}; choose from {MODELS}")


def build_engine(args: argparse.Namespace) -> Engine:
    model = build_model(args.model, getattr(args, "config", None), getattr(args, "weights", None),
                        getattr(args, "device", None), getattr(args, "precision", None),
                        getattr(args, "guidance", None), getattr(args, "compile", False))
    bound = getattr(args, "utilisation_bound", None)
    fps_sessions = getattr(args, "fps_for_sessions", 1)
    cfg = EngineConfig(
        max_sessions=args.max_sessions or max(8, fps_sessions),
        steps=args.steps,
        fps=args.fps,
        fps_sessions=fps_sessions,
        scheduler=getattr(args, "scheduler", None) or "deadline",
        utilisation_bound=EngineConfig.utilisation_bound if bound is None else bound,
        degrade=getattr(args, "degrade", True),
        step_reuse=getattr(args, "step_reuse", None),
        commit_reuse=getattr(args, "commit_reuse", False),
        # Few-step distilled Wan checkpoints (Self-Forcing, CausVid) sample by re-noising x0.
        sampler="renoise" if args.model == "wan-causal" else "euler",
    )
    engine = Engine(model, cfg)
    info = engine.info()
    log.info("model %s on %s, computing in %s", model.spec.name, info["device"], info["compute_dtype"])
    return engine
