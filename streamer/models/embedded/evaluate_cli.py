"""`streamer eval`: roll the embedded model out and score it from pixels.

Prints a table, and with `--json` a last line that dashboards read:
`prompt_adherence`, `motion_accuracy`, `action_response_frames` (p90), `avatar_mouth_corr`,
`redirect_chunks` (p90), `drift_points` (null in --quick), `fps_single`, `frame_size`; beside
`drift_points`, its standard error over the rollouts, `drift_stderr_points`.
`autoencoder_*` score rendered clips through the autoencoder alone: the ceiling of the story
figures. `--quick` runs in under a minute; the full run adds the drift rollouts (2100 frames,
`--drift-clips` of them, 8 by default) and the per-step time of batches of 1..16 streams.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from ...argtypes import add_guidance_arguments, positive_int
from ...hostinfo import host_info
from ...sampling import SAMPLERS
from ..device import DEVICE_CHOICES
from ..precision import PRECISIONS
from . import evaluate as ev
from . import vocab
from .model import SHIPPED_WEIGHTS, EmbeddedModel
from .rollout import Script, rollout
from .scripts import avatar_scripts, game_scripts, story_scripts


def _nanmean(values: list[float]) -> float:
    good = [v for v in values if not np.isnan(v)]
    return float(np.mean(good)) if good else float("nan")


def eval_story(model: EmbeddedModel, rng: np.random.Generator, n: int, chunks: int, steps: int | None,
               sampler: str) -> dict[str, float]:
    f = model.spec.frames_per_chunk
    scripts, specs = story_scripts(rng, n, chunks, f)
    frames = rollout(model, scripts, steps, int(rng.integers(1 << 30)), sampler).frames
    scores = [ev.score_story(fr, sp) for fr, sp in zip(frames, specs, strict=True)]
    moving = [s["motion"] for s, sp in zip(scores, specs, strict=True)]
    return {
        "prompt_adherence": float(np.mean([s["adherence"] for s in scores])),
        "background": float(np.mean([s["background"] for s in scores])),
        "shape_and_colour": float(np.mean([s["shape_and_colour"] for s in scores])),
        "colour": float(np.mean([s["colour"] for s in scores])),
        "motion_accuracy": float(np.mean(moving)),
    }


def eval_game(model: EmbeddedModel, rng: np.random.Generator, n: int, chunks: int, steps: int | None,
              sampler: str) -> dict[str, float]:
    f = model.spec.frames_per_chunk
    scripts, specs = game_scripts(rng, n, chunks, f)
    frames = rollout(model, scripts, steps, int(rng.integers(1 << 30)), sampler).frames
    scores = [ev.score_game(fr, s.actions, sp) for fr, s, sp in zip(frames, scripts, specs, strict=True)]
    lags = [s["response_frames"] for s in scores if not np.isnan(s["response_frames"])]
    responded = [s["responded"] for s in scores if not np.isnan(s["responded"])]
    return {
        # A clip whose presses never showed counts as the clip length (a miss, not a gap).
        "action_response_frames": float(np.percentile(lags + [float(chunks * f)] * (n - len(lags)), 90)),
        "action_responded": float(np.mean(responded)) if responded else 0.0,
        "action_move_accuracy": _nanmean([s["move"] for s in scores]),
        "character_found": float(np.mean([s["found"] for s in scores])),
    }


def eval_avatar(model: EmbeddedModel, rng: np.random.Generator, n: int, chunks: int, steps: int | None,
                sampler: str) -> dict[str, float]:
    f = model.spec.frames_per_chunk
    scripts, specs = avatar_scripts(rng, n, chunks, f)
    frames = rollout(model, scripts, steps, int(rng.integers(1 << 30)), sampler).frames
    corr = [ev.score_avatar(fr, s.controls, sp)["mouth_corr"] for fr, s, sp in zip(frames, scripts, specs, strict=True)]
    return {"avatar_mouth_corr": _nanmean(corr)}


def eval_redirect(model: EmbeddedModel, rng: np.random.Generator, n: int, chunks: int, steps: int | None,
                  sampler: str) -> dict[str, float]:
    """Switch the prompt to another object colour mid-rollout; count chunks until it shows."""
    f, switch = model.spec.frames_per_chunk, chunks // 2
    scripts, targets = [], []
    for _ in range(n):
        a = vocab.random_spec(rng, "story")
        b = a
        while b.objects[0].color == a.objects[0].color:
            b = vocab.random_spec(rng, "story")
        b = vocab.SceneSpec("story", a.background, (vocab.ObjectSpec(b.objects[0].color, a.objects[0].shape,
                                                                     a.objects[0].motion),))
        scripts.append(Script([vocab.describe(a)] * switch + [vocab.describe(b)] * (chunks - switch),
                              np.zeros(chunks * f, np.int64), np.tile([0.0, 1.0], (chunks * f, 1)).astype(np.float32)))
        targets.append(b)
    frames = rollout(model, scripts, steps, int(rng.integers(1 << 30)), sampler).frames
    waits = []
    for fr, b in zip(frames, targets, strict=True):
        colour = b.objects[0].color
        hit = [any(d.color == colour for d in ev.find_objects(x, b.background)) for x in fr[switch * f :]]
        first = next((i for i, h in enumerate(hit) if h), None)
        waits.append((chunks - switch + 1) if first is None else first // f + 1)
    return {"redirect_chunks": float(np.percentile(waits, 90)),
            "redirect_within_2": float(np.mean([w <= 2 for w in waits]))}


def eval_autoencoder(model: EmbeddedModel, rng: np.random.Generator, n: int, frames: int = 24) -> dict[str, float]:
    """Rendered story clips through the autoencoder alone, scored as the rollouts are.

    No rollout can beat what its decoder draws from exact latents, so this is the ceiling of
    the story figures above; with PSNR against the rendered frames.
    """
    from .world import sample_clip  # the renderer: ground truth, not needed to score rollouts

    scores, mse = [], []
    for _ in range(n):
        clip = sample_clip(rng, frames, frames, size=model.spec.height, kind="story", switch_prob=0.0)
        real = torch.from_numpy(clip.frames)
        out = model.decode(model.encode_frames(real)[None])[0].cpu()
        scores.append(ev.score_story(out.numpy(), clip.specs[0]))
        mse.append(float((out.float() - real.float()).pow(2).mean()))
    return {
        "autoencoder_adherence": float(np.mean([s["adherence"] for s in scores])),
        "autoencoder_shape_and_colour": float(np.mean([s["shape_and_colour"] for s in scores])),
        "autoencoder_psnr_db": float(10 * np.log10(255.0**2 / max(float(np.mean(mse)), 1e-12))),
    }


def eval_drift(model: EmbeddedModel, rng: np.random.Generator, steps: int | None, sampler: str,
               n: int = 8, frames: int = 2100) -> dict[str, float | None]:
    """Adherence over frames 2000-2100 minus over 0-100, in points (negative = got worse), over `n` clips.

    One clip's 100-frame windows are a handful of objects, each seen or not: with 2 clips the
    same weights read -3.5, +23.5 and -8.5 points on three seeds (session 13), so the default
    is 8 clips, rolled out as one batch. Even 8 swing by ±10 between seeds, so the figure comes
    with its standard error (`paired_drift`): an A/B read of drift is only as good as that.
    """
    f = model.spec.frames_per_chunk
    scripts, specs = story_scripts(rng, n, frames // f, f)
    out = rollout(model, scripts, steps, int(rng.integers(1 << 30)), sampler).frames
    early = [ev.score_story(o[:100], s)["adherence"] for o, s in zip(out, specs, strict=True)]
    late = [ev.score_story(o[2000:2100], s)["adherence"] for o, s in zip(out, specs, strict=True)]
    return paired_drift(early, late)


def paired_drift(early: list[float], late: list[float]) -> dict[str, float | None]:
    """Each clip's late-minus-early adherence, in points: their mean (`drift_points`) and its
    standard error over clips (`drift_stderr_points`; None from one clip, which has no spread)."""
    d = 100 * (np.asarray(late, dtype=float) - np.asarray(early, dtype=float))
    return {"drift_points": float(d.mean()),
            "drift_stderr_points": float(d.std(ddof=1) / np.sqrt(d.size)) if d.size > 1 else None}


def speed(model: EmbeddedModel, steps: int | None, sampler: str, batches: tuple[int, ...]) -> dict:
    f = model.spec.frames_per_chunk
    rng = np.random.default_rng(0)
    out: dict = {}
    for b in batches:
        scripts, _ = story_scripts(rng, b, 12, f)
        rollout(model, [Script(s.prompts[:2], s.actions[: 2 * f], s.controls[: 2 * f]) for s in scripts], steps)
        res = rollout(model, scripts, steps, sampler=sampler)
        out[b] = {"frames_per_s": b * 12 * f / res.seconds,
                  "seconds_per_step": res.seconds / (12 * ((steps or model.spec.default_steps) + 1))}
    return out


def score_seeds(model: EmbeddedModel, seeds: list[int], story: int, game: int, sampler: str = "euler",
                redirect: bool = False, steps: int | None = None) -> dict[str, float]:
    """Mean story (and redirect) and game figures over `seeds`, for A/B benchmarks.

    Each seed draws its own clips, the same ones for every model or setting scored with it.
    A figure nothing measured in any seed is NaN.
    """
    figures: dict[str, list[float]] = {}
    for seed in seeds:
        rng = np.random.default_rng(seed)
        res = eval_story(model, rng, story, 8, steps, sampler)
        if redirect:
            res.update(eval_redirect(model, rng, story, 8, steps, sampler))
        res.update(eval_game(model, rng, game, 16, steps, sampler))
        for key, value in res.items():
            figures.setdefault(key, []).append(value)
    return {k: _nanmean(v) for k, v in figures.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="streamer eval", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=tuple(SHIPPED_WEIGHTS), default="embedded",
                    help="which shipped weights to score (default: embedded, the wide 6-block student)")
    ap.add_argument("--weights", type=Path, default=None,
                    help="weights dir or .safetensors (default: the --model's shipped folder)")
    ap.add_argument("--quick", action="store_true", help="a run under a minute (no drift, one speed figure)")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON object on the last line")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--sampler", choices=SAMPLERS, default="euler")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--drift-clips", type=positive_int, default=8, metavar="N",
                    help="rollouts of 2100 frames the drift figure averages (full mode; default 8)")
    ap.add_argument("--threads", type=positive_int, default=None)
    ap.add_argument("--device", choices=DEVICE_CHOICES, default="cpu",
                    help="where the model runs (frames come back to the CPU to be scored)")
    ap.add_argument("--precision", choices=PRECISIONS, default="fp32",
                    help="what the model computes in (bf16 needs native bf16: docs/model.md, Precision)")
    add_guidance_arguments(ap)
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        model = EmbeddedModel.load(args.weights or SHIPPED_WEIGHTS[args.model], device=args.device,
                                   precision=args.precision)
        model.configure_guidance(args.guidance, args.guidance_min_t)
    except ValueError as exc:  # ConfigError, DeviceError, PrecisionError: bad weights, no such device, no bf16
        print(f"streamer eval: error: {exc}", file=sys.stderr)
        return 2
    rng = np.random.default_rng(args.seed)
    n, chunks = (6, 8) if args.quick else (24, 12)
    started = time.perf_counter()
    res: dict = {}
    res.update(eval_story(model, rng, n, chunks, args.steps, args.sampler))
    res.update(eval_game(model, rng, max(2, n // 2), chunks * 2, args.steps, args.sampler))
    res.update(eval_avatar(model, rng, max(2, n // 2), chunks, args.steps, args.sampler))
    res.update(eval_redirect(model, rng, n, chunks, args.steps, args.sampler))
    res.update({"drift_points": None, "drift_stderr_points": None} if args.quick
               else eval_drift(model, rng, args.steps, args.sampler, args.drift_clips))
    res["drift_clips"] = None if args.quick else args.drift_clips
    res.update(eval_autoencoder(model, rng, n))  # after the rollouts, whose clips it leaves as they were
    sp = speed(model, args.steps, args.sampler, (1,) if args.quick else (1, 2, 4, 8, 16))
    res["fps_single"] = sp[1]["frames_per_s"]
    if not args.quick:
        res["batch_speed"] = {str(k): v for k, v in sp.items()}
    res["frame_size"] = [model.spec.height, model.spec.width]
    res["weights"] = str(args.weights) if args.weights else args.model
    res["depth"] = model.cfg.dit.depth
    res["steps"] = args.steps or model.spec.default_steps
    res["sampler"] = args.sampler
    res["precision"] = args.precision
    res["guidance_scale"] = model.cfg.guidance_scale
    res["guidance_min_t"] = model.cfg.guidance_min_t
    res["distilled_guidance_scale"] = model.cfg.distilled_guidance_scale  # baked into the weights
    res["context_noise"] = model.cfg.context_noise  # the flow time chunks are committed at
    res["device"] = args.device
    res["host"] = host_info(model.device)  # a frame rate is read against its host (streamer/hostinfo.py)
    res["eval_seconds"] = round(time.perf_counter() - started, 1)
    for key, value in res.items():
        if not isinstance(value, dict):
            print(f"{key:>24}: {value:.3f}" if isinstance(value, float) else f"{key:>24}: {value}", file=sys.stderr)
    host = res["host"]
    print(f"{'host':>24}: {host['cpu']}, {host['threads']} threads, fp32 matmul {host['matmul_peak_gflops']} GFLOP/s",
          file=sys.stderr)
    # NaN (nothing measurable, e.g. no character found) is not JSON: report it as null.
    res = {k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in res.items()}
    line = json.dumps(res)
    if args.out:
        args.out.write_text(line + "\n")
    if args.json:
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
