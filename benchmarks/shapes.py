"""Where the embedded model loses shapes: the evaluator's reading of each shape at each stage
from the renderer to a rollout.

The story figures are held down by shape (colour is read right far more often than colour and
shape). This renders story clips (their prompts drawn as the evaluator draws them) and reads
them, with the evaluator's own reader (`evaluate.read_objects`), at every stage on the way:

    rendered      the renderer's frames: the reader's ceiling, the baseline of the ratios
    blur1.5       the frames Gaussian-blurred (sigma 1.5 px): does the reader survive soft edges?
    blur2         the same at sigma 2 px
    autoencoder   the frames encoded and decoded: what the latents keep
    dit_t0.5      every chunk noised to t = 0.5 and denoised by the model after its clip's real,
                  clean past (teacher forcing: the real chunk is committed, not the denoised one)
    dit_t1        the same from pure noise (t = 1)
    rollout       the model's own rollout of the clip's prompt (what `streamer eval` scores)

An object of the prompt is `seen` in a frame when an object of its colour is found there, and
right when that object also has the prompt's shape. Per stage and per shape: `colour` (seen /
frames), `shape_and_colour` (right / frames, the evaluator's figure) and `shape_given_colour`
(right / seen), with one- and two-object prompts apart. Every figure's ratio is against
`rendered`. `binding`: in two-object prompts whose shapes differ, the share of object frames
whose colour is found with its own shape, with the other object's (the two swapped), with the
third shape, or not found.

    python benchmarks/shapes.py [--weights DIR] [--guidance 2 --steps 8] [--two-objects 1]
        [--autoencoder-only] -> benchmarks/results/shapes.json
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS, emit_result  # noqa: E402
from streamer.argtypes import positive_int, share  # noqa: E402
from streamer.chunk_steps import commit_noise, denoise_step  # noqa: E402
from streamer.hostinfo import host_info  # noqa: E402
from streamer.models.base import PromptCond  # noqa: E402
from streamer.models.embedded.evaluate import read_objects  # noqa: E402
from streamer.models.embedded.model import EmbeddedModel  # noqa: E402
from streamer.models.embedded.rollout import Script, chunk_conditioning, rollout  # noqa: E402
from streamer.models.embedded.scripts import story_scripts  # noqa: E402
from streamer.models.embedded.vocab import SHAPES, TWO_OBJECT_SHARE, SceneSpec  # noqa: E402
from streamer.models.embedded.world import World  # noqa: E402

BLURS = (1.5, 2.0)
NOISE_LEVELS = (0.5, 1.0)


def rendered(specs: list[SceneSpec], frames: int, size: int, seed: int) -> np.ndarray:
    """The renderer's clips of `specs`: (B, T, H, W, 3) uint8."""
    out = []
    for i, spec in enumerate(specs):
        world = World(spec, np.random.default_rng([seed, i]), size)
        out.append(np.stack([world.step() for _ in range(frames)]))
    return np.stack(out)


def blurred(clips: np.ndarray, sigma: float) -> np.ndarray:
    """Clips (B, T, H, W, 3) Gaussian-blurred in space, wrapping at the edges as the world does."""
    r = int(np.ceil(3 * sigma))
    k = torch.exp(-(torch.arange(-r, r + 1, dtype=torch.float32) ** 2) / (2 * sigma**2))
    k = k / k.sum()
    b, t, h, w, ch = clips.shape
    x = torch.from_numpy(clips).float().permute(0, 1, 4, 2, 3).reshape(-1, 1, h, w)
    x = torch.nn.functional.pad(x, (r, r, r, r), mode="circular")
    x = torch.nn.functional.conv2d(torch.nn.functional.conv2d(x, k.view(1, 1, 1, -1)), k.view(1, 1, -1, 1))
    return x.reshape(b, t, ch, h, w).permute(0, 1, 3, 4, 2).round().clamp(0, 255).to(torch.uint8).numpy()


def latents(model: EmbeddedModel, clips: np.ndarray) -> torch.Tensor:
    """Clips (B, T, H, W, 3) -> the model's latents (B, T, C, h, w)."""
    b, t = clips.shape[:2]
    z = model.encode_frames(torch.from_numpy(clips.reshape(b * t, *clips.shape[2:])))
    return z.reshape(b, t, *z.shape[1:])


@torch.no_grad()
def teacher_forced(model: EmbeddedModel, scripts: list[Script], z: torch.Tensor, t0: float, steps: int,
                   seed: int) -> np.ndarray:
    """Every chunk of each clip noised to `t0` and denoised (the model's `steps`-step schedule
    from `t0` on) after the clip's real past; the real chunk is then committed. -> frames."""
    spec = model.spec
    f, b = spec.frames_per_chunk, len(scripts)
    schedule = (t0, *(s for s in spec.schedule(steps) if s < t0))
    gen = torch.Generator().manual_seed(seed)

    def draw_noise() -> torch.Tensor:
        return torch.randn(b, *spec.latent_shape, generator=gen)

    pool = model.new_pool(b)  # a fresh pool a call: its slots go with it
    slots = [pool.allocate() for _ in range(b)]
    prompts: dict[str, PromptCond] = {}
    out = np.empty((b, z.shape[1], spec.height, spec.width, 3), np.uint8)
    for c in range(z.shape[1] // f):
        sl = slice(c * f, (c + 1) * f)
        cond = chunk_conditioning(model, scripts, c, prompts)
        real = z[:, sl]
        x = (1 - t0) * real + t0 * draw_noise()
        for i in range(len(schedule)):
            x = denoise_step(model, pool, slots, x, [schedule] * b, [i] * b, cond, "euler", draw_noise)
        out[:, sl] = model.decode(x).numpy()
        model.commit(real, cond, pool.batch(slots, commit=True), commit_noise(spec, b, gen))
    return out


def shape_reads(clips: np.ndarray, specs: list[SceneSpec]) -> dict:
    """Per shape and per object count: frames, colour, shape_and_colour, shape_given_colour."""
    counts: dict[str, list[int]] = {}  # group -> [frames, seen, right]
    for frames, spec in zip(clips, specs, strict=True):
        n_obj = f"{len(spec.objects)}_object"
        for frame in frames:
            for obj, seen in zip(spec.objects, read_objects(frame, spec), strict=True):
                right = seen is not None and seen.shape == obj.shape
                for group in ("all", obj.shape, f"{obj.shape}_{n_obj}"):
                    c = counts.setdefault(group, [0, 0, 0])
                    c[0] += 1
                    c[1] += seen is not None
                    c[2] += right
    return {g: {"object_frames": n, "colour": seen / n, "shape_and_colour": right / n,
                "shape_given_colour": right / seen if seen else None}
            for g, (n, seen, right) in sorted(counts.items())}


def binding_reads(clips: np.ndarray, specs: list[SceneSpec]) -> dict:
    """In two-object prompts with two shapes: the share of object frames read with the object's
    own shape, the other object's, the third, or unseen (colour not found)."""
    counts = dict.fromkeys(("own_shape", "other_shape", "third_shape", "unseen"), 0)
    for frames, spec in zip(clips, specs, strict=True):
        objs = spec.objects
        if len(objs) != 2 or objs[0].shape == objs[1].shape:
            continue
        for frame in frames:
            for obj, other, seen in zip(objs, objs[::-1], read_objects(frame, spec), strict=True):
                key = ("unseen" if seen is None else "own_shape" if seen.shape == obj.shape
                       else "other_shape" if seen.shape == other.shape else "third_shape")
                counts[key] += 1
    n = sum(counts.values())
    return {"object_frames": n, **{k: v / n if n else None for k, v in counts.items()}}


class StoryBench(NamedTuple):
    """What a stage benchmark (this one, benchmarks/motion.py) reads: its arguments, the model,
    the story clips drawn as the evaluator draws them, rendered and encoded."""

    args: argparse.Namespace
    model: EmbeddedModel
    steps: int
    scripts: list[Script]
    specs: list[SceneSpec]
    real: np.ndarray  # (B, T, H, W, 3) the renderer's clips
    z: torch.Tensor  # (B, T, C, h, w) their latents


def story_bench(argv: list[str] | None, description: str, clips: int, out: Path,
                add_arguments: Callable[[argparse.ArgumentParser], None] | None = None) -> StoryBench:
    """Parse a stage benchmark's command line (its own flags from `add_arguments`) and set up its
    model and clips."""
    ap = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", type=Path, default=None, help="weights folder (default: shipped)")
    ap.add_argument("--guidance", type=float, default=None, help="guidance scale (default: the weights' own)")
    ap.add_argument("--steps", type=positive_int, default=None, help="denoising steps (default: the weights' own)")
    ap.add_argument("--clips", type=positive_int, default=clips)
    ap.add_argument("--chunks", type=positive_int, default=12, help="chunks a clip")
    ap.add_argument("--two-objects", type=share, default=TWO_OBJECT_SHARE, metavar="P",
                    help=f"the share of clips with two objects (default {TWO_OBJECT_SHARE}, the evaluator's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=positive_int, default=2)
    ap.add_argument("--json", action="store_true", help="print the result object as the last line")
    ap.add_argument("--out", type=Path, default=out)
    if add_arguments is not None:
        add_arguments(ap)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    model = EmbeddedModel.load(args.weights)
    model.configure_guidance(args.guidance)
    scripts, specs = story_scripts(np.random.default_rng(args.seed), args.clips, args.chunks,
                                   model.spec.frames_per_chunk, args.two_objects)
    real = rendered(specs, scripts[0].frames, model.spec.height, args.seed)
    return StoryBench(args, model, args.steps or model.spec.default_steps, scripts, specs, real, latents(model, real))


def emit_story_bench(bench: StoryBench, stages: dict) -> None:
    """Write a stage benchmark's result: what ran, on which clips, and the stages' figures."""
    args, model = bench.args, bench.model
    result = {"weights": str(args.weights or "shipped"), "guidance_scale": model.cfg.guidance_scale,
              "context_noise": model.cfg.context_noise, "steps": bench.steps,
              "clips": args.clips, "two_objects": args.two_objects, "frames_per_clip": bench.scripts[0].frames, "seed": args.seed,
              "threads": args.threads, "stages": stages, "host": host_info(torch.device("cpu"))}
    emit_result(result, args.out, args.json)


def main(argv: list[str] | None = None) -> int:
    def autoencoder_only(ap: argparse.ArgumentParser) -> None:
        ap.add_argument("--autoencoder-only", action="store_true",
                        help="stop at the autoencoder stage (no DiT pass): compares autoencoders in seconds, "
                             "also of exports whose DiT is untrained")

    bench = story_bench(argv, __doc__ or "", 24, RESULTS / "shapes.json", autoencoder_only)
    model, scripts, z, steps, seed = bench.model, bench.scripts, bench.z, bench.steps, bench.args.seed
    stages = {"rendered": bench.real, **{f"blur{s:g}": blurred(bench.real, s) for s in BLURS},
              "autoencoder": model.decode(z).numpy()}
    if not bench.args.autoencoder_only:
        stages.update({f"dit_t{t:g}": teacher_forced(model, scripts, z, t, steps, seed) for t in NOISE_LEVELS})
        stages["rollout"] = rollout(model, scripts, steps, seed).frames
    rows = {name: shape_reads(clips, bench.specs) for name, clips in stages.items()}
    base = rows["rendered"]
    for name, row in rows.items():
        row["ratios_vs_rendered"] = {g: r["shape_and_colour"] / base[g]["shape_and_colour"]
                                     if base[g]["shape_and_colour"] else None for g, r in row.items()}
        print(f"{name:>12} shape+colour {row['all']['shape_and_colour']:.3f} colour {row['all']['colour']:.3f} "
              + " ".join(f"{s} {row[s]['shape_and_colour']:.2f}" for s in SHAPES if s in row), file=sys.stderr)
    for name, clips in stages.items():
        rows[name]["binding"] = bind = binding_reads(clips, bench.specs)
        if bind["object_frames"]:
            print(f"{name:>12} binding: own {bind['own_shape']:.3f} other {bind['other_shape']:.3f} "
                  f"third {bind['third_shape']:.3f} unseen {bind['unseen']:.3f}", file=sys.stderr)
    emit_story_bench(bench, rows)
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
