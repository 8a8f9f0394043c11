"""Train the embedded model from a seed: `python -m streamer.models.embedded.train`.

Two stages, each resumable from `--run-dir` (checkpoints every few minutes):
1. the frame autoencoder, on single frames of the procedural world;
2. the block-causal DiT, on latent clips with flow matching and diffusion forcing:
   every chunk gets its own noise level under a block-causal mask, and half the clips have
   a clean past before the chunk being denoised, the shape of inference. Clips are as long
   as the streaming view (sinks + window + chunk); half of them have a time gap after the
   sink chunk, because in a long stream the sinks are old. Prompts switch mid-clip so
   redirects are learned, and a tenth of the chunks are trained under the empty prompt so
   that classifier-free guidance has an unconditional prediction to steer away from.
   `--recycle P` gives a share of the clean pasts the model's own errors (flow.recycled_past);
   `--two-objects P` sets the share of story clips with two objects (default 0.3).

Two optional stages distil (distill.py): `--distill-guidance TEACHER` turns a guided model into
one that needs one pass a step, and `--distill-steps TEACHER` makes a model's every step do what
two of the teacher's do. The shipped weights went through both (docs/model.md, Guidance
distillation and Step distillation); recipe.py runs all the stages in order in one command.
`--dmd TEACHER` (dmd.py) trains such a student further by distribution matching on its own
rollouts, scored by TEACHER against a critic trained beside it.

The EMA weights are exported to `streamer/models/embedded/weights/` (or `--export`) at every
checkpoint, so the shipped model is always the latest one, and a sample sheet of them is written
to `<run-dir>/samples/` (see samples.py).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from ...argtypes import positive_int, unit_interval
from .autoencoder import Autoencoder, to_unit
from .config import EmbeddedConfig, differing_fields
from .distill import guidance_distill_loss, halving_grids, step_distill_loss, teacher_problem
from .dit import CausalDiT
from .dmd import DMD_EMA, DistributionMatching
from .flow import clip_text, noised, recycled_past, sample_times
from .grow import grown_decoder, grown_dit
from .masks import block_causal_context
from .model import WEIGHTS_DIR, EmbeddedModel, prompt_tokens
from .samples import sample_sheet
from .self_rollout import SelfRollout
from .vocab import TWO_OBJECT_SHARE
from .world import sample_clip

# The stage a DiT run is when its record names none: plain flow-matching training.
BASE_STAGE = "flow-matching"


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
            torch.save({"ae": ae.state_dict(), "opt": opt.state_dict(), "step": step, "rng": rng}, ckpt_path)
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
    (export / "ae_eval.json").write_text(json.dumps({"psnr_db": after, "latent_std": z_std}) + "\n")


@torch.no_grad()
def evaluate_autoencoder(ae: Autoencoder, size: int, seed: int = 12345, n: int = 64) -> tuple[float, float]:
    """Held-out reconstruction PSNR (dB) and the latent std (for latent_scale)."""
    img = to_unit(frame_batch(np.random.default_rng(seed), n, size))
    z = ae.encoder(img)
    return psnr(ae.decoder(z), img), float(z.std())


class ClipSampler:
    """Latent training clips: [sink chunk, (gap), window chunks, current chunk]."""

    def __init__(self, model: EmbeddedModel, rng: np.random.Generator, gap_prob: float = 0.5,
                 null_prompt_prob: float = 0.1, two_objects: float = TWO_OBJECT_SHARE):
        self.model, self.rng, self.gap_prob = model, rng, gap_prob
        self.null_prompt_prob, self.two_objects = null_prompt_prob, two_objects
        self.cfg = model.cfg

    def sample(self, batch: int) -> dict[str, torch.Tensor]:
        cfg, f = self.cfg, self.cfg.frames_per_chunk
        n = cfg.sink_frames + cfg.window_frames + f
        frames, acts, ctrls, toks = [], [], [], []
        for _ in range(batch):
            gap = f * int(self.rng.integers(1, 16)) if self.rng.random() < self.gap_prob else 0
            clip = sample_clip(self.rng, n + gap, f, cfg.autoencoder.image_size, two_objects=self.two_objects)
            keep = np.r_[0 : cfg.sink_frames, cfg.sink_frames + gap : n + gap]
            frames.append(clip.frames[keep])
            acts.append(clip.actions[keep])
            ctrls.append(clip.controls[keep])
            # Some chunks are trained under the empty prompt, so the model also learns the
            # unconditional prediction that classifier-free guidance steers away from.
            prompts = [p if self.rng.random() >= self.null_prompt_prob else "" for p in clip.prompts]
            chunk_prompts = [prompts[i // f] for i in keep]
            toks.append(torch.stack([prompt_tokens(p, cfg.dit.max_tokens)[0] for p in chunk_prompts]))
        flat = torch.from_numpy(np.concatenate(frames))
        latents = self.model.encode_frames(flat).reshape(batch, n, *self.model.spec.latent_shape[1:])
        return {
            "x0": latents,  # (B, T, C, h, w)
            "actions": torch.from_numpy(np.stack(acts)).long(),  # (B, T)
            "controls": torch.from_numpy(np.stack(ctrls)).float(),  # (B, T, 2)
            "tokens": torch.stack(toks),  # (B, T, L) prompt of each frame's chunk
        }


def dit_loss(dit: CausalDiT, data: dict[str, torch.Tensor], cfg: EmbeddedConfig, recycle: float = 0.0) -> torch.Tensor:
    """Flow-matching loss of a batch of clips. `recycle`: the share of clean-past clips whose past
    is the model's own estimate of it (`recycled_past`), against the exposure gap of rollouts."""
    x0 = data["x0"]
    b, t = x0.shape[:2]
    f = cfg.frames_per_chunk
    chunks = t // f
    # Independent noise level per chunk (diffusion forcing), half of them at the schedule's times.
    t_chunk = sample_times(cfg, (b, chunks))
    # Half the clips take the inference shape: a clean past (small noise, against the drift
    # of rollouts that feed on their own output) before a random chunk that is denoised.
    first = torch.randint(1, chunks, (b, 1))
    clean_prefix = (torch.arange(chunks)[None] < first) & (torch.rand(b, 1) < 0.5)
    t_chunk = torch.where(clean_prefix, torch.rand(b, chunks) * 0.05, t_chunk)
    t_frame = t_chunk.repeat_interleave(f, 1)  # (B, T)
    text = clip_text(dit, data["tokens"])
    ctx = block_causal_context(b, t, f, cfg.dit.tokens_per_frame)
    if recycle > 0:
        own = clean_prefix & (torch.rand(b, 1) < recycle)
        # Only the past is replaced: its frames are context (weight 0 below), the chunks trained
        # keep the real clip, so the model learns to carry on the real motion from an imperfect past.
        x0 = recycled_past(dit, x0, own.repeat_interleave(f, 1), data, cfg)
    x_t, noise = noised(x0, t_frame)
    v = dit(x_t, t_frame, text, data["actions"], data["controls"], ctx)
    # Nearly clean chunks are context only: their velocity target is unpredictable noise.
    weight = (t_frame > 0.05).float()[..., None, None, None]
    return ((v - (noise - x0)) ** 2 * weight).sum() / (weight.sum() * v[0, 0].numel()).clamp(min=1)


def data_streams(seed: int, step: int) -> np.random.Generator:
    """The clip stream (returned) and the noise stream (torch's global generator, seeded here) of a
    run that starts at `step`. Both depend on the step: a run warm-started from step N's weights
    trains on clips and noise that the runs before it did not draw. (Until session 16 every
    warm start replayed the first run's stream from its first batch.)"""
    rng = np.random.default_rng([seed + 1, step])
    torch.manual_seed(int(rng.integers(2**62)))
    return rng


class Companion(Protocol):
    """Nets a loss trains beside the DiT (dmd.DistributionMatching's critic): train_dit keeps
    their state in its checkpoint and their figures in its log."""

    def state_dict(self) -> dict: ...
    def load_state_dict(self, state: dict) -> None: ...
    def log_fields(self) -> dict[str, float]: ...


def train_dit(model: EmbeddedModel, run: Path, steps: int, batch: int, seed: int,
              minutes_per_ckpt: float, export: Path, lr: float, cooldown: int = 0,
              loss_fn: Callable[[CausalDiT, dict[str, torch.Tensor]], torch.Tensor | None] | None = None,
              record: dict | None = None, companion: Companion | None = None, ema_max: float = 0.999) -> None:
    """Train `model.dit` with `loss_fn` (default: flow matching, `dit_loss`), resumable from `run`.

    `record` is written into the exported dit_step.json beside the step (what the run was); its
    `two_objects` (`data_record`) is also the share of story clips with two objects it trains on.
    A `loss_fn` that returns None took a step of its own nets only (`companion`, e.g. dmd.py's
    critic, whose state the checkpoint keeps): `model.dit` and its EMA (decay up to `ema_max`)
    then stay as they are.
    """
    cfg, dit = model.cfg, model.dit
    run_stage = (record or {}).get("stage", BASE_STAGE)
    if loss_fn is None:
        def loss_fn(net: CausalDiT, data: dict[str, torch.Tensor]) -> torch.Tensor:
            return dit_loss(net, data, cfg)
    ema = copy.deepcopy(dit).eval()
    for p in ema.parameters():
        p.requires_grad_(False)
    opt = torch.optim.AdamW(dit.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.99))
    ckpt_path, log_path = run / "dit.pt", run / "dit_log.jsonl"
    step = fresh_opt_step = 0  # the learning rate ramps up over the first steps of a fresh optimiser
    ck = torch.load(ckpt_path, weights_only=False) if ckpt_path.exists() else None
    if ck is not None:
        dit.load_state_dict(ck["dit"])
        ema.load_state_dict(ck["ema"])
        opt.load_state_dict(ck["opt"])
        step = ck["step"]
        if companion is not None:
            companion.load_state_dict(ck["companion"])
    elif (export / "embedded.safetensors").exists() and (export / "dit_step.json").exists():
        # Warm start across work sessions from the committed EMA weights (no optimiser state).
        shipped_record = json.loads((export / "dit_step.json").read_text())
        stage = shipped_record.get("stage", BASE_STAGE)
        if stage != run_stage:  # e.g. flow-matching training must not go on from a distilled student
            raise SystemExit(f"{export / 'dit_step.json'}: these weights come from stage '{stage}', this run is "
                             f"'{run_stage}': warm-start from weights of the same stage (docs/model.md, Guidance)")
        shipped = EmbeddedModel.load(export)
        differ = differing_fields(shipped.cfg.dit, cfg.dit, "dit.")
        if differ:
            raise SystemExit(f"{export / 'embedded.json'}: config field '{differ[0]}' differs from this run's "
                             "config: warm-start with the weights' own config (leave out --config)")
        dit.load_state_dict(shipped.dit.state_dict())
        ema.load_state_dict(shipped.dit.state_dict())
        step = fresh_opt_step = shipped_record["step"]
    if ck is None:
        rng = data_streams(seed, step)
    else:  # both streams go on where the checkpoint left them
        rng = ck["rng"]
        if "torch_rng" in ck:  # checkpoints before session 16 did not keep the noise stream
            torch.set_rng_state(ck["torch_rng"])
    dit.train()
    sampler = ClipSampler(model, rng, two_objects=(record or {}).get("two_objects", TWO_OBJECT_SHARE))
    last_ckpt, t_start = time.monotonic(), time.monotonic()
    bar = tqdm(total=steps, initial=step, desc="dit", dynamic_ncols=True)
    losses: list[float] = []
    while step < steps:
        data = sampler.sample(batch)
        warm = min(1.0, (step - fresh_opt_step + 1) / 200)
        # Warmup-stable-decay: a linear cool-down over the last `cooldown` steps lands the weights
        # in a lower loss than the constant rate's noise floor; a later run warms up again from them.
        cool = min(1.0, (steps - step) / cooldown) if cooldown > 0 else 1.0
        for g in opt.param_groups:
            g["lr"] = lr * warm * cool
        loss = loss_fn(dit, data)
        if loss is not None:
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(dit.parameters(), 1.0)
            opt.step()
            decay = min(ema_max, (1 + step) / (10 + step))
            with torch.no_grad():
                for pe, pm in zip(ema.parameters(), dit.parameters(), strict=True):
                    pe.lerp_(pm, 1 - decay)
            losses.append(loss.item())
        step += 1
        bar.update(1)
        if step % 10 == 0 and losses:
            bar.set_postfix(loss=f"{np.mean(losses[-50:]):.4f}")
        if time.monotonic() - last_ckpt > 60 * minutes_per_ckpt or step == steps:
            torch.save({"dit": dit.state_dict(), "ema": ema.state_dict(), "opt": opt.state_dict(),
                        "step": step, "rng": rng, "torch_rng": torch.get_rng_state(),
                        **({"companion": companion.state_dict()} if companion is not None else {})}, ckpt_path)
            with log_path.open("a") as fh:
                fh.write(json.dumps({"stage": run_stage, "step": step,
                                     "loss": float(np.mean(losses[-100:])) if losses else None,
                                     "minutes": (time.monotonic() - t_start) / 60,
                                     **(companion.log_fields() if companion is not None else {})}) + "\n")
            shipped = export_weights(model, ema, export, {"step": step, **(record or {})})
            (run / "samples").mkdir(exist_ok=True)
            sample_sheet(shipped).save(run / "samples" / f"step_{step:06d}.png")
            last_ckpt = time.monotonic()
    bar.close()


def export_weights(model: EmbeddedModel, ema: CausalDiT, export: Path, record: dict) -> EmbeddedModel:
    shipped = EmbeddedModel(model.cfg, ae=model.ae, dit=copy.deepcopy(ema))
    shipped.save(export)
    (export / "dit_step.json").write_text(json.dumps(record) + "\n")
    return shipped


def load_teacher(args: argparse.Namespace, folder: Path, guided: bool) -> tuple[EmbeddedModel, int]:
    """The teacher in `folder`, frozen, and the training step its weights come from.

    `guided`: it must be guided on every step; otherwise it may also be unguided.
    """
    if args.export.resolve() == folder.resolve():
        raise SystemExit("--export must differ from the teacher's folder: the teacher is reloaded on resume")
    teacher = EmbeddedModel.load(folder)
    problem = teacher_problem(teacher.cfg)
    if problem is not None and (guided or teacher.cfg.guidance_scale != 1.0):
        raise SystemExit(f"{folder}: {problem}")
    teacher.dit.eval().requires_grad_(False)
    return teacher, json.loads((folder / "dit_step.json").read_text())["step"]


def student_init(args: argparse.Namespace, teacher: EmbeddedModel, folder: Path) -> EmbeddedModel:
    """The weights a student starts from: `--init`, or the teacher's own. The init may differ from
    the teacher in depth (`beside_teacher`): a deeper teacher (`--grow-depth`) can teach a student
    the runtime can afford."""
    if args.init is None:
        return teacher
    return beside_teacher(args.init, teacher, folder)


def beside_teacher(path: Path, teacher: EmbeddedModel, folder: Path) -> EmbeddedModel:
    """The model in `path`, which works beside the teacher in `folder` (a student's init, a DMD
    critic): all it may have of its own is its guidance, default schedule and context noise (a
    student's inference choices), and its depth. Everything else fixes what the latents, prompts,
    actions and positions mean, so it must match."""
    model = EmbeddedModel.load(path)
    own = {"guidance_scale", "guidance_min_t", "distilled_guidance_scale", "timesteps", "context_noise", "dit.depth"}
    differ = [name for name in differing_fields(model.cfg, teacher.cfg) if name not in own]
    if differ:
        raise SystemExit(f"{path}: config field '{differ[0]}' differs from the teacher's in {folder}")
    return model


def student_cfg(args: argparse.Namespace, init: EmbeddedModel) -> EmbeddedConfig:
    """The init's config with `--context-noise` (when given): the student's past is then trained
    at the time its chunks will be committed at (distill.past_times)."""
    if args.context_noise is None:
        return init.cfg
    return dataclasses.replace(init.cfg, context_noise=args.context_noise)


def data_record(args: argparse.Namespace) -> dict[str, float]:
    """The run's error-recycling, two-object and self-rollout shares for its exported record (each
    only when it is not the default)."""
    return ({"recycle": args.recycle} if args.recycle else {}) | (
        {"two_objects": args.two_objects} if args.two_objects != TWO_OBJECT_SHARE else {}) | (
        {"self_rollout": args.self_rollout} if args.self_rollout else {})


def distill_guidance(args: argparse.Namespace) -> None:
    """Guidance distillation (distill.py): the student starts as the teacher (or as `--init`) and
    runs unguided."""
    teacher, teacher_step = load_teacher(args, args.distill_guidance, guided=True)
    init = student_init(args, teacher, args.distill_guidance)
    scale = teacher.cfg.guidance_scale
    cfg = dataclasses.replace(student_cfg(args, init), guidance_scale=1.0, guidance_min_t=0.0,
                              distilled_guidance_scale=scale)
    model = EmbeddedModel(cfg, ae=teacher.ae, dit=copy.deepcopy(init.dit).requires_grad_(True))
    train_dit(model, args.run_dir, args.dit_steps, args.batch, args.seed, args.ckpt_minutes, args.export, args.lr,
              args.cooldown_steps, lambda net, data: guidance_distill_loss(net, teacher.dit, data, cfg, scale, args.recycle),
              {"stage": "guidance-distill", "teacher_step": teacher_step, "guidance_scale": scale, **data_record(args)})


def distill_steps(args: argparse.Namespace) -> None:
    """Step distillation (distill.py): the student's default schedule does in each step what the
    teacher (guided or not) does in two. The student starts from `--init` (default: the teacher),
    e.g. a guidance-distilled student of the same teacher, which then stays unguided."""
    teacher, teacher_step = load_teacher(args, args.distill_steps, guided=False)
    init = student_init(args, teacher, args.distill_steps)
    steps = args.student_steps or init.spec.default_steps
    cfg = dataclasses.replace(student_cfg(args, init), timesteps=init.spec.schedule(steps))
    scale = teacher.cfg.guidance_scale
    if scale != 1.0:  # a guided teacher's student runs unguided: the guidance is in its targets
        cfg = dataclasses.replace(cfg, guidance_scale=1.0, distilled_guidance_scale=scale)
    # The teacher's autoencoder: its targets live in its latent space. A student from weights whose
    # encoder was older (docs/model.md, "A sharper latent space") learns the new latents here.
    model = EmbeddedModel(cfg, ae=teacher.ae, dit=copy.deepcopy(init.dit).requires_grad_(True))
    grids = halving_grids(model.spec.schedule(steps), teacher.spec.schedule(2 * steps))
    rollout = SelfRollout(model, args.self_rollout) if args.self_rollout else None  # model.dit is the trained net
    train_dit(model, args.run_dir, args.dit_steps, args.batch, args.seed, args.ckpt_minutes, args.export, args.lr,
              args.cooldown_steps,
              lambda net, data: step_distill_loss(net, teacher.dit, data, cfg, scale, grids, args.recycle, rollout),
              {"stage": "step-distill", "teacher_step": teacher_step, "guidance_scale": scale,
               "teacher_steps": 2 * steps, **data_record(args)})


def distill_dmd(args: argparse.Namespace) -> None:
    """Distribution matching on the student's own rollouts (dmd.py): the student starts from
    `--init`, runs unguided, and is scored by the teacher (guided at its scale) against a critic
    that starts from `--critic` (default: the teacher's weights)."""
    teacher, teacher_step = load_teacher(args, args.dmd, guided=False)
    init = beside_teacher(args.init, teacher, args.dmd)
    critic = teacher if args.critic is None else beside_teacher(args.critic, teacher, args.dmd)
    scale = teacher.cfg.guidance_scale
    cfg = dataclasses.replace(student_cfg(args, init), guidance_scale=1.0, guidance_min_t=0.0,
                              distilled_guidance_scale=scale)
    model = EmbeddedModel(cfg, ae=teacher.ae, dit=copy.deepcopy(init.dit).requires_grad_(True))
    loss = DistributionMatching(model, teacher.dit, scale, copy.deepcopy(critic.dit), args.critic_lr or args.lr,
                                args.critic_every)
    train_dit(model, args.run_dir, args.dit_steps, args.batch, args.seed, args.ckpt_minutes, args.export, args.lr,
              args.cooldown_steps, loss,
              {"stage": "dmd", "teacher_step": teacher_step, "guidance_scale": scale,
               "critic_every": args.critic_every, **data_record(args)},
              companion=loss, ema_max=DMD_EMA)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run-dir", type=Path, default=Path("runs/embedded"))
    ap.add_argument("--export", type=Path, default=WEIGHTS_DIR)
    ap.add_argument("--ae-steps", type=int, default=1500)
    ap.add_argument("--dit-steps", type=int, default=20000)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--config", type=Path, default=None, help="model config JSON (default: the shipped one)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=positive_int, default=2)
    ap.add_argument("--ckpt-minutes", type=float, default=3.0)
    ap.add_argument("--cooldown-steps", type=int, default=0,
                    help="the learning rate falls linearly to zero over the last N of --dit-steps")
    ap.add_argument("--decoder-steps", type=int, default=0,
                    help="instead of training: fine-tune the decoder of the model in --export for N steps "
                         "(encoder frozen, so the DiT needs no retraining) and save it back, at --lr (cosine)")
    ap.add_argument("--autoencoder-steps", type=int, default=0,
                    help="instead of training: fine-tune the whole autoencoder of the model in --export for N steps "
                         "(the latents move: train its DiT on them next) and save it back, at --lr (cosine)")
    for name, what in (("blocks", "residual blocks at the latent grid"), ("mid-blocks", "residual blocks at twice it"),
                       ("fine-channels", "channels of a stage at four times it (0: none)")):
        ap.add_argument(f"--dec-{name}", type=int, default=None,
                        help=f"with --decoder-steps or --autoencoder-steps: grow the decoder to this many {what}")
    ap.add_argument("--grow-depth", type=positive_int, default=None, metavar="N",
                    help="instead of training: grow the DiT of the model in --export to N blocks (the added ones "
                         "start as the identity: the model predicts what it did) and save it back; a run with "
                         "that --export then warm-starts from it (docs/model.md, A deeper teacher)")
    ap.add_argument("--distill-guidance", type=Path, default=None, metavar="TEACHER",
                    help="instead of training: distil the guided model in TEACHER (its guidance_scale) "
                         "into one that needs one pass a step, for --dit-steps steps, exported to --export")
    ap.add_argument("--distill-steps", type=Path, default=None, metavar="TEACHER",
                    help="instead of training: distil the model in TEACHER, at twice the student's steps, into one "
                         "that needs the student's steps, for --dit-steps steps, exported to --export")
    ap.add_argument("--init", type=Path, default=None,
                    help="with --distill-guidance, --distill-steps or --dmd: the weights the student starts from "
                         "(default: the teacher's; --dmd needs one); its depth may differ from the teacher's")
    ap.add_argument("--student-steps", type=positive_int, default=None,
                    help="with --distill-steps: the student's default step count (default: the --init weights'); "
                         "the teacher runs twice as many")
    ap.add_argument("--recycle", type=unit_interval, default=0.0, metavar="P",
                    help="the share of clean-past clips whose past is the trained model's own one-pass estimate "
                         "of it (error recycling, docs/model.md); in distillation the teacher sees that past too")
    ap.add_argument("--two-objects", type=unit_interval, default=TWO_OBJECT_SHARE, metavar="P",
                    help=f"the share of story clips with two objects (default {TWO_OBJECT_SHARE}, the evaluator's): "
                         "more of them trains binding each motion to its object, the weakest part of rollouts")
    ap.add_argument("--self-rollout", type=unit_interval, default=0.0, metavar="P",
                    help="with --distill-steps: the share of clips whose past is the student's own rollout, through "
                         "the inference path, and whose trained chunk starts from its own sampling (self_rollout.py)")
    ap.add_argument("--dmd", type=Path, default=None, metavar="TEACHER",
                    help="instead of training: distil the student in --init by distribution matching on its own "
                         "rollouts, scored by TEACHER (guided at its scale) against a critic (dmd.py), for "
                         "--dit-steps critic steps, every --critic-every-th of them also a student step")
    ap.add_argument("--critic", type=Path, default=None,
                    help="with --dmd: the weights the critic starts from (default: the teacher's)")
    ap.add_argument("--critic-every", type=positive_int, default=5, metavar="N",
                    help="with --dmd: critic steps per student step (default 5, Self-Forcing's)")
    ap.add_argument("--critic-lr", type=float, default=None, help="with --dmd: the critic's learning rate (default: --lr)")
    ap.add_argument("--context-noise", type=unit_interval, default=None, metavar="T",
                    help="with --distill-guidance, --distill-steps or --dmd: the flow time the student commits its past "
                         "at (default: the --init weights'), which its past is trained at")
    args = ap.parse_args(argv)
    if args.decoder_steps and args.autoencoder_steps:
        ap.error("--decoder-steps and --autoencoder-steps are two different fine-tunes: give one")
    if args.dmd is not None and args.init is None:
        ap.error("--dmd needs --init: the few-step student it trains (e.g. a step-distilled one)")
    if args.dmd is not None and args.recycle:
        ap.error("--recycle has no use with --dmd: the student's past is its own rollout")
    if args.self_rollout and args.distill_steps is None:
        ap.error("--self-rollout needs --distill-steps: its target is the teacher's steps from the student's own states")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    args.run_dir.mkdir(parents=True, exist_ok=True)
    if args.decoder_steps or args.autoencoder_steps:
        arch = {k: v for k, v in (("dec_blocks", args.dec_blocks), ("dec_mid_blocks", args.dec_mid_blocks),
                                  ("dec_fine_channels", args.dec_fine_channels)) if v is not None}
        finetune_autoencoder(args.export, args.run_dir, args.decoder_steps or args.autoencoder_steps, args.seed,
                             args.ckpt_minutes, args.lr, arch, decoder_only=bool(args.decoder_steps))
        return
    if args.grow_depth is not None:
        model = EmbeddedModel.load(args.export)
        old = model.cfg.dit.depth
        grown_dit(model, args.grow_depth, args.seed).save(args.export)
        print(f"{args.export}: DiT grown from {old} to {args.grow_depth} blocks", flush=True)
        return
    if args.distill_guidance is not None:
        distill_guidance(args)
        return
    if args.distill_steps is not None:
        distill_steps(args)
        return
    if args.dmd is not None:
        distill_dmd(args)
        return

    cfg = EmbeddedConfig()
    if args.config is not None:
        cfg = EmbeddedConfig.load(args.config)
    elif (args.export / "embedded.json").exists():
        cfg = EmbeddedConfig.load(args.export / "embedded.json")
    if (args.export / "embedded.safetensors").exists() and not (args.run_dir / "ae.pt").exists():
        ae = EmbeddedModel.load(args.export).ae  # resume across sessions from the shipped autoencoder
    else:
        ae = train_autoencoder(cfg, args.run_dir, args.ae_steps, args.seed, args.ckpt_minutes)
    ae_psnr, z_std = evaluate_autoencoder(ae, cfg.autoencoder.image_size)
    if cfg.latent_scale == 1.0:
        cfg = EmbeddedConfig.from_dict({**cfg.to_dict(), "latent_scale": 1.0 / z_std})
    print(f"autoencoder: held-out PSNR {ae_psnr:.2f} dB, latent std {z_std:.3f}", flush=True)
    (args.run_dir / "ae_eval.json").write_text(json.dumps({"psnr_db": ae_psnr, "latent_std": z_std}) + "\n")
    model = EmbeddedModel(cfg, ae=ae)
    torch.manual_seed(args.seed)
    model.dit = CausalDiT(cfg.dit)
    train_dit(model, args.run_dir, args.dit_steps, args.batch, args.seed, args.ckpt_minutes, args.export, args.lr,
              args.cooldown_steps, lambda net, data: dit_loss(net, data, cfg, args.recycle), data_record(args) or None)


if __name__ == "__main__":
    main()
