"""The shipped weights' recipes in one command: `python -m streamer.models.embedded.recipe`.

The shipped weights were made in pieces over many work sessions, by the stages of train.py
(docs/model.md tells that history). This runs the same stages in order, from a seed, with the
history folded into one pass:

1. teacher: the autoencoder (encoder and decoder together), then an 8-block DiT (the config's
   architecture) with flow matching, guided at `guidance_scale` 2 (`checkpoints/teacher/`);
2. teacher-wide: a fresh DiT of shape `WIDE` (6 blocks at width 192, 3 heads) on the teacher's
   autoencoder, trained from step 0 by flow matching with the binding loss (`--bind 1.0`), guided
   at 2 (`checkpoints/teacher-wide/`);
3. guidance-wide: guidance distillation from it into a student that starts as the teacher itself
   (one pass a step gives the guided picture);
4. steps-wide: step distillation from it, starting from stage 3's student (its 4 steps land
   where the guided teacher's 8 land).

The exported student then commits its past at flow time `CONTEXT_NOISE` (an inference setting
chosen on the finished weights, which were distilled with a clean past: docs/model.md,
"Committing the past slightly noisy").

Every stage is train.py's own resumable run in `<run-dir>/<stage>`, so the recipe is too: run
the same command again after an interruption (or in the next work session) and it goes on where
it stopped; finished stages are passed over in seconds. The student and the merged training log
are then written to `--export` (default: the shipped folder).

It makes weights of the shipped kind, not the shipped bits: those went through code that changed
between their pieces (docs/model.md, "Reproducing the shipped weights").
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import NamedTuple

from ...argtypes import positive_int
from . import train
from .atomic_save import copy_atomically, write_text_atomically
from .config import EmbeddedConfig
from .model import SHIPPED_WEIGHTS, EmbeddedModel


class Start(NamedTuple):
    """Where a stage's weights start: stage `source`'s export with its DiT replaced by a fresh one
    of `shape` (dim, heads, depth). Only the autoencoder and the rest of the config are kept, so
    the new DiT learns the same latent space, and training starts at step 0."""

    source: str
    shape: tuple[int, int, int]


class Stage(NamedTuple):
    """One train.py run of `steps` steps (its learning rate cooled over the last `cooldown`), in a
    folder seeded by `start` if given. `{run}` in `flags` is the run folder, `{teacher_config}` the
    config teacher_config() writes there, `{ae_steps}` AE_STEPS scaled."""

    name: str
    flags: tuple[str, ...]
    steps: int
    cooldown: int
    start: Start | None = None


# The default student's DiT (dim, heads, depth): the shape benchmarks/dit_shapes.py priced best
# (docs/model.md, "A wide teacher, begun").
WIDE = (192, 3, 6)
# The stages of the shipped weights, by the model name they are served under.
RECIPES: dict[str, tuple[Stage, ...]] = {
    "embedded": (
        Stage("teacher", ("--config", "{teacher_config}", "--ae-steps", "{ae_steps}", "--lr", "3e-4"), 35000, 1200),
        Stage("teacher-wide", ("--bind", "1.0", "--lr", "3e-4"), 35000, 1200, start=Start("teacher", shape=WIDE)),
        # No --init: the student starts as its teacher.
        Stage("guidance-wide", ("--distill-guidance", "{run}/teacher-wide/export", "--lr", "1.5e-4"), 1000, 400),
        Stage("steps-wide", ("--distill-steps", "{run}/teacher-wide/export", "--init", "{run}/guidance-wide/export",
                             "--lr", "1e-4"), 1200, 500),
    ),
}
WEIGHT_FILES = ("embedded.json", "embedded.safetensors", "dit_step.json")  # a stage's exported weights
AE_STEPS = 7500  # 1,500 steps first, then 6,000 of fine-tuning, made the shipped autoencoder
TEACHER_GUIDANCE = 2.0
CONTEXT_NOISE = 0.2  # the shipped student's context_noise, set on the export (not trained at)


def scaled(n: int, scale: float) -> int:
    return max(1, round(n * scale))


def stage_argv(stage: Stage, args: argparse.Namespace, teacher_cfg: Path) -> list[str]:
    s = args.steps_scale
    fill = {"run": str(args.run_dir), "teacher_config": str(teacher_cfg), "ae_steps": str(scaled(AE_STEPS, s))}
    stage_dir = args.run_dir / stage.name
    steps = scaled(stage.steps, s)
    return [*(f.format(**fill) for f in stage.flags), "--run-dir", str(stage_dir), "--export", str(stage_dir / "export"),
            "--dit-steps", str(steps), "--cooldown-steps", str(min(scaled(stage.cooldown, s), steps)),
            "--batch", str(args.batch), "--seed", str(args.seed), "--threads", str(args.threads),
            "--ckpt-minutes", str(args.ckpt_minutes)]


def start_from(export: Path, source: Path, start: Start) -> None:
    """Seed the folder `export` with the model in `source`, its DiT replaced by a fresh one of
    `start.shape`, and no dit_step.json: the training run in it starts at step 0 on the source's
    autoencoder. Done once: a folder that already holds a DiT of that shape (a resumed recipe) is
    left as it is."""
    if (export / "embedded.json").exists():
        dit = EmbeddedConfig.load(export / "embedded.json").dit
        if (dit.dim, dit.heads, dit.depth) == start.shape:
            return
    model = EmbeddedModel.load(source)
    dim, heads, depth = start.shape
    cfg = dataclasses.replace(model.cfg, dit=dataclasses.replace(model.cfg.dit, dim=dim, heads=heads, depth=depth))
    # The saved DiT is a placeholder that makes the folder loadable: with no dit_step.json,
    # train.py builds the fresh one itself, from its seed, and keeps only the autoencoder.
    EmbeddedModel(cfg, ae=model.ae).save(export)
    (export / "dit_step.json").unlink(missing_ok=True)  # a folder seeded for another shape had one


def teacher_config(args: argparse.Namespace) -> Path:
    """The teacher's config: `--config` (default: EmbeddedConfig's, an 8-block DiT), guided at 2."""
    cfg = EmbeddedConfig.load(args.config) if args.config is not None else EmbeddedConfig()
    data = {**cfg.to_dict(), "guidance_scale": TEACHER_GUIDANCE, "guidance_min_t": 0.0,
            "distilled_guidance_scale": 1.0, "latent_scale": 1.0}  # 1.0: measured from the new encoder
    path = args.run_dir / "teacher.json"
    EmbeddedConfig.from_dict(data, source=str(path)).save(path)
    return path


def merged_log(run_dir: Path, stages: tuple[Stage, ...]) -> str:
    """Every stage's training log, in order: the loss history the shipped folder carries."""
    return "".join((run_dir / stage.name / "dit_log.jsonl").read_text() for stage in stages)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run-dir", type=Path, default=Path("runs/recipe"))
    ap.add_argument("--model", choices=tuple(RECIPES), default="embedded",
                    help="which shipped model to make (default: embedded, the wide 6-block student)")
    ap.add_argument("--export", type=Path, default=None,
                    help="where the finished student goes (default: the model's shipped folder)")
    ap.add_argument("--config", type=Path, default=None, help="the teacher stage's model config JSON (default: EmbeddedConfig's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=positive_int, default=8)
    ap.add_argument("--threads", type=positive_int, default=2)
    ap.add_argument("--ckpt-minutes", type=float, default=3.0)
    ap.add_argument("--steps-scale", type=float, default=1.0,
                    help="multiply every stage's step count (a smoke test of the whole chain: e.g. 0.001)")
    args = ap.parse_args(argv)
    if args.steps_scale <= 0:
        ap.error("--steps-scale must be > 0")
    args.export = args.export or SHIPPED_WEIGHTS[args.model]
    args.run_dir.mkdir(parents=True, exist_ok=True)
    if args.export.resolve() == args.run_dir.resolve():
        ap.error("--export must differ from --run-dir")
    teacher_cfg = teacher_config(args)
    stages = RECIPES[args.model]
    for i, stage in enumerate(stages, 1):
        print(f"recipe stage {i}/{len(stages)}: {stage.name} ({scaled(stage.steps, args.steps_scale)} steps) "
              f"in {args.run_dir / stage.name}", flush=True)
        if stage.start is not None:
            start_from(args.run_dir / stage.name / "export", args.run_dir / stage.start.source / "export", stage.start)
        train.main(stage_argv(stage, args, teacher_cfg))
    student = args.run_dir / stages[-1].name / "export"
    args.export.mkdir(parents=True, exist_ok=True)
    for f in WEIGHT_FILES:
        copy_atomically(student / f, args.export / f)
    cfg = EmbeddedConfig.load(args.export / "embedded.json")
    dataclasses.replace(cfg, context_noise=CONTEXT_NOISE).save(args.export / "embedded.json")
    copy_atomically(args.run_dir / "teacher" / "ae_eval.json", args.export / "ae_eval.json")
    write_text_atomically(args.export / "training_log.jsonl", merged_log(args.run_dir, stages))
    record = json.loads((student / "dit_step.json").read_text())
    print(f"recipe done: {args.export} ({record['stage']} step {record['step']}, "
          f"teacher step {record['teacher_step']})", flush=True)


if __name__ == "__main__":
    main()
