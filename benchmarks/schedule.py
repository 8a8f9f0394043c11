"""Sampling-schedule benchmark: which few-step schedule and sampler give the best pictures?

Scores story and game rollouts of the embedded model from pixels (the evaluator's story and
game scores) for several 4-step schedules, each the evenly spaced (1, 0.75, 0.5, 0.25) warped
by a shift t' = s t / (1 + (s - 1) t) as SD3 and Wan warp theirs, and for the Euler and
"renoise" samplers. Every variant sees the same clips (same seeds), in the same run; the
figures are means over the seeds. The shipped schedule is the variant called "shipped".

    python benchmarks/schedule.py [--seeds 1 2 3] [--json]   -> benchmarks/results/schedule.json
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS, emit_result  # noqa: E402
from streamer.argtypes import positive_int  # noqa: E402
from streamer.models.embedded import evaluate_cli as ec  # noqa: E402
from streamer.models.embedded.model import EmbeddedModel  # noqa: E402

EVEN = (1.0, 0.75, 0.5, 0.25)
SHIFTS = (1.0, 2.0, 3.0, 4.0)
RATIO_KEYS = ("prompt_adherence", "shape_and_colour", "motion_accuracy", "character_found", "action_responded")


def shifted(shift: float) -> tuple[float, ...]:
    return tuple(round(shift * t / (1 + (shift - 1) * t), 4) for t in EVEN)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", type=Path, default=None, help="weights dir (default: the shipped ones)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--story", type=int, default=12, help="story clips per seed")
    ap.add_argument("--game", type=int, default=6, help="game clips per seed")
    ap.add_argument("--threads", type=positive_int, default=1)
    ap.add_argument("--json", action="store_true", help="print the result object as the last line")
    ap.add_argument("--out", type=Path, default=RESULTS / "schedule.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model = EmbeddedModel.load(args.weights)
    shipped = model.spec.timesteps
    variants = [(f"shift {s:g}", shifted(s), "euler") for s in SHIFTS]
    variants += [("shipped, renoise", shipped, "renoise")]
    if all(ts != shipped for _, ts, _ in variants):
        variants.insert(0, ("shipped", shipped, "euler"))
    rows = []
    for name, timesteps, sampler in variants:
        model.spec = dataclasses.replace(model.spec, timesteps=timesteps)
        row = {"name": name, "timesteps": list(timesteps), "sampler": sampler, "shipped": timesteps == shipped and sampler == "euler",
               **ec.score_seeds(model, args.seeds, args.story, args.game, sampler)}
        rows.append(row)
        print(f"{name:>18} {timesteps} adherence {row['prompt_adherence']:.3f} colour+shape "
              f"{row['shape_and_colour']:.3f} motion {row['motion_accuracy']:.3f} character "
              f"{row['character_found']:.3f} responded {row['action_responded']:.3f}", file=sys.stderr)
    base = rows[[r["name"] for r in rows].index("shift 1")]
    for row in rows:  # against the unwarped schedule, measured on the same clips
        row["ratios_vs_shift_1"] = {k: row[k] / base[k] if base[k] else None for k in RATIO_KEYS}
    rows = [{k: None if isinstance(v, float) and np.isnan(v) else v for k, v in r.items()} for r in rows]
    result = {"variants": rows, "seeds": args.seeds, "story_clips_per_seed": args.story,
              "game_clips_per_seed": args.game, "threads": args.threads,
              "weights": str(args.weights or "shipped")}
    emit_result(result, args.out, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
