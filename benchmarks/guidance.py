"""Guidance and step benchmark: quality and speed of guided, unguided and distilled weights.

Every variant is a weights folder, a guidance scale and a step count. All of them roll out the same clips
(same seeds) in the same run and are scored from pixels by the evaluator's story, redirect
and game figures; each also gets the one-stream frame rate end to end (denoise, commit,
decode). Ratios are against the first variant. Run it on a quiet machine: the frame rates
share the cores with whatever else runs.

    python benchmarks/guidance.py --variant guided=runs/teacher:2 --variant distilled=shipped:1
        -> benchmarks/results/guidance.json

A variant is NAME=WEIGHTS[:SCALE[:STEPS]]; WEIGHTS "shipped" is the shipped folder, and without
SCALE (or STEPS) the weights' own config decides: `teacher8=checkpoints/teacher:2:8` is the
guided teacher at 8 steps, `student8=shipped::8` the shipped model at 8.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS, emit_result  # noqa: E402
from streamer.argtypes import positive_int  # noqa: E402
from streamer.hostinfo import host_info  # noqa: E402
from streamer.models.embedded import evaluate_cli as ec  # noqa: E402
from streamer.models.embedded.model import EmbeddedModel  # noqa: E402

RATIO_KEYS = ("prompt_adherence", "colour", "shape_and_colour", "motion_accuracy", "redirect_within_2",
              "character_found", "action_move_accuracy", "fps_single")


def variant(text: str) -> tuple[str, Path | None, float | None, int | None]:
    name, sep, rest = text.partition("=")
    if not sep or not name or not rest:
        raise argparse.ArgumentTypeError(f"expected NAME=WEIGHTS[:SCALE[:STEPS]], got {text!r}")
    weights, _, rest = rest.partition(":")
    scale, _, steps = rest.partition(":")
    try:
        return (name, None if weights == "shipped" else Path(weights), float(scale) if scale else None,
                positive_int(steps) if steps else None)
    except (ValueError, argparse.ArgumentTypeError):
        raise argparse.ArgumentTypeError(f"{text!r}: the scale must be a number and the steps "
                                         "a positive whole number") from None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variant", type=variant, action="append", required=True, help="NAME=WEIGHTS[:SCALE[:STEPS]]")
    ap.add_argument("--seeds", type=int, nargs="+", default=[7])
    ap.add_argument("--story", type=int, default=8, help="story and redirect clips per seed")
    ap.add_argument("--game", type=int, default=4, help="game clips per seed")
    ap.add_argument("--threads", type=positive_int, default=2)
    ap.add_argument("--json", action="store_true", help="print the result object as the last line")
    ap.add_argument("--out", type=Path, default=RESULTS / "guidance.json")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = []
    for name, weights, scale, steps in args.variant:
        model = EmbeddedModel.load(weights)
        model.configure_guidance(scale)
        steps = steps or model.spec.default_steps
        scores = ec.score_seeds(model, args.seeds, args.story, args.game, redirect=True, steps=steps)
        row = {"name": name, "weights": str(weights or "shipped"), "guidance_scale": model.cfg.guidance_scale,
               "distilled_guidance_scale": model.cfg.distilled_guidance_scale, "context_noise": model.cfg.context_noise,
               "steps": steps,
               **{k: None if np.isnan(v) else v for k, v in scores.items()},  # not measurable: null in the JSON
               "fps_single": ec.speed(model, steps, "euler", (1,))[1]["frames_per_s"]}
        rows.append(row)
        print(f"{name:>12} adherence {row['prompt_adherence']:.3f} colour {row['colour']:.3f} motion "
              f"{row['motion_accuracy']:.3f} redirect<=2 {row['redirect_within_2']:.2f} character "
              f"{row['character_found']:.2f} fps {row['fps_single']:.1f}", file=sys.stderr)
    base = rows[0]
    for row in rows:
        row[f"ratios_vs_{base['name']}"] = {
            k: row[k] / base[k] if row.get(k) is not None and base.get(k) else None for k in RATIO_KEYS}
    result = {"variants": rows, "seeds": args.seeds, "story_clips_per_seed": args.story,
              "game_clips_per_seed": args.game, "threads": args.threads, "host": host_info(torch.device("cpu"))}
    emit_result(result, args.out, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
