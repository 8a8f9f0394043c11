"""The DiT training loop (train.py's stage 2 and every distillation): latent training clips,
the flow-matching loss with diffusion forcing, and `train_dit`, resumable from its run dir, which
exports its EMA weights at every checkpoint."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import torch
from tqdm import tqdm

from .atomic_save import save_atomically, write_text_atomically
from .binding import BIND_PROMPTS, binding_loss
from .config import EmbeddedConfig, differing_fields
from .dit import CausalDiT
from .flow import clip_velocity, noised, recycled_past, sample_times
from .model import EmbeddedModel, prompt_tokens
from .samples import sample_sheet
from .vocab import TWO_OBJECT_SHARE, describe, random_spec
from .world import sample_clip

# The stage a DiT run is when its record names none: plain flow-matching training.
BASE_STAGE = "flow-matching"


class ClipSampler:
    """Latent training clips: [sink chunk, (gap), window chunks, current chunk].

    `encode=False` is for a loss that reads only the clips' prompts, actions and controls (dmd.py
    rolls out its own latents): the autoencoder pass is skipped and "x0" is NaN, so a loss that
    reads it anyway fails loudly. The draws are the same either way. `bind_prompts` > 0 adds
    "bind_tokens", that many two-object story prompts for binding.py's loss, drawn after the clips.
    """

    def __init__(self, model: EmbeddedModel, rng: np.random.Generator, gap_prob: float = 0.5,
                 null_prompt_prob: float = 0.1, two_objects: float = TWO_OBJECT_SHARE, encode: bool = True,
                 bind_prompts: int = 0):
        self.model, self.rng, self.gap_prob = model, rng, gap_prob
        self.null_prompt_prob, self.two_objects, self.encode = null_prompt_prob, two_objects, encode
        self.bind_prompts = bind_prompts
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
        shape = (batch, n, *self.model.spec.latent_shape[1:])
        if self.encode:
            latents = self.model.encode_frames(torch.from_numpy(np.concatenate(frames))).reshape(shape)
        else:
            latents = torch.full(shape, float("nan"))
        data = {
            "x0": latents,  # (B, T, C, h, w)
            "actions": torch.from_numpy(np.stack(acts)).long(),  # (B, T)
            "controls": torch.from_numpy(np.stack(ctrls)).float(),  # (B, T, 2)
            "tokens": torch.stack(toks),  # (B, T, L) prompt of each frame's chunk
        }
        if self.bind_prompts:
            specs = [random_spec(self.rng, "story", two_objects=1.0) for _ in range(self.bind_prompts)]
            data["bind_tokens"] = torch.stack([prompt_tokens(describe(s), cfg.dit.max_tokens)[0] for s in specs])
        return data


def dit_loss(dit: CausalDiT, data: dict[str, torch.Tensor], cfg: EmbeddedConfig, recycle: float = 0.0,
             bind: float = 0.0) -> torch.Tensor:
    """Flow-matching loss of a batch of clips. `recycle`: the share of clean-past clips whose past
    is the model's own estimate of it (`recycled_past`), against the exposure gap of rollouts.
    `bind`: the weight of binding.py's loss on the prompt encoder, added to it."""
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
    if recycle > 0:
        own = clean_prefix & (torch.rand(b, 1) < recycle)
        # Only the past is replaced: its frames are context (weight 0 below), the chunks trained
        # keep the real clip, so the model learns to carry on the real motion from an imperfect past.
        x0 = recycled_past(dit, x0, own.repeat_interleave(f, 1), data, cfg)
    x_t, noise = noised(x0, t_frame)
    v = clip_velocity(dit, x_t, t_frame, data, cfg)
    # Nearly clean chunks are context only: their velocity target is unpredictable noise.
    weight = (t_frame > 0.05).float()[..., None, None, None]
    loss = ((v - (noise - x0)) ** 2 * weight).sum() / (weight.sum() * v[0, 0].numel()).clamp(min=1)
    if bind == 0:
        return loss
    tokens = data["tokens"].reshape(-1, data["tokens"].shape[-1])
    return loss + bind * binding_loss(dit.text, torch.cat([tokens, data.get("bind_tokens", tokens[:0])]))


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


@dataclass(frozen=True)
class Schedule:
    """Where a DiT run lives and what it steps through (train.py's run flags, `run_schedule`)."""

    run: Path  # checkpoint, loss log and sample sheets; the run resumes from here
    export: Path  # the EMA weights, exported at every checkpoint (and warm-started from)
    steps: int  # the learning-rate schedule's length: its cool-down ends here
    lr: float
    cooldown: int  # a linear cool-down over the last `cooldown` steps (0: none)
    # Checkpoint and stop here, short of `steps`, whose schedule (the cool-down) stays the same:
    # one work session's share of a run that spans several. None: run to `steps`.
    stop_at: int | None
    batch: int
    seed: int
    minutes_per_ckpt: float


def train_dit(model: EmbeddedModel, schedule: Schedule,
              loss_fn: Callable[[CausalDiT, dict[str, torch.Tensor]], torch.Tensor | None] | None = None,
              record: dict | None = None, companion: Companion | None = None, ema_max: float = 0.999,
              encode: bool = True) -> None:
    """Train `model.dit` with `loss_fn` (default: flow matching, `dit_loss`) through `schedule`,
    resumable from its run dir.

    `record` is written into the exported dit_step.json beside the step (what the run was); its
    `two_objects` (`data_record`) is also the share of story clips with two objects it trains on.
    A `loss_fn` that returns None took a step of its own nets only (`companion`, e.g. dmd.py's
    critic, whose state the checkpoint keeps): `model.dit` and its EMA (decay up to `ema_max`)
    then stay as they are. `encode=False`: the loss reads no real latents (ClipSampler).
    """
    cfg, dit = model.cfg, model.dit
    run, export, steps, lr, cooldown = schedule.run, schedule.export, schedule.steps, schedule.lr, schedule.cooldown
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
        rng = data_streams(schedule.seed, step)
    else:  # both streams go on where the checkpoint left them
        rng = ck["rng"]
        if "torch_rng" in ck:  # checkpoints before session 16 did not keep the noise stream
            torch.set_rng_state(ck["torch_rng"])
    dit.train()
    sampler = ClipSampler(model, rng, two_objects=(record or {}).get("two_objects", TWO_OBJECT_SHARE), encode=encode,
                          bind_prompts=BIND_PROMPTS if (record or {}).get("bind") else 0)
    last_ckpt, t_start = time.monotonic(), time.monotonic()
    bar = tqdm(total=steps, initial=step, desc="dit", dynamic_ncols=True)
    losses: list[float] = []
    end = steps if schedule.stop_at is None else min(schedule.stop_at, steps)
    while step < end:
        data = sampler.sample(schedule.batch)
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
        if time.monotonic() - last_ckpt > 60 * schedule.minutes_per_ckpt or step == end:
            save_atomically({"dit": dit.state_dict(), "ema": ema.state_dict(), "opt": opt.state_dict(),
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
    write_text_atomically(export / "dit_step.json", json.dumps(record) + "\n")
    return shipped
