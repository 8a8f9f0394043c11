"""Caching benchmark: each acceleration technique against the exact path, in the same run.

For every technique and threshold: speedup of generating a frame (denoise steps + commit +
decode, batched story rollouts), PSNR of its frames against the exact path's frames (same
seeds), and the evaluator's prompt adherence against the exact path's.

`psnr_loss_db` is 58.9 dB (the PSNR of 8-bit rounding noise, i.e. frames that differ only by
quantisation) minus the technique's PSNR against the exact path: identical frames lose 0 dB.

    python benchmarks/caching.py [--clips 6] [--chunks 12]   -> benchmarks/results/caching.json
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import QUANT_PSNR, RESULTS, emit_result, psnr  # noqa: E402
from streamer.models.embedded import evaluate as ev  # noqa: E402
from streamer.models.embedded.model import EmbeddedModel  # noqa: E402
from streamer.models.embedded.rollout import rollout  # noqa: E402
from streamer.models.embedded.scripts import story_scripts  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clips", type=int, default=6)
    ap.add_argument("--chunks", type=int, default=12)
    ap.add_argument("--weights", type=Path, default=None)
    ap.add_argument("--thresholds", type=float, nargs="*", default=[0.05, 0.1, 0.2, 0.4])
    ap.add_argument("--out", type=Path, default=RESULTS / "caching.json")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    model = EmbeddedModel.load(args.weights)
    f = model.spec.frames_per_chunk
    scripts, specs = story_scripts(np.random.default_rng(0), args.clips, args.chunks, f)

    pool = model.new_pool(args.clips)

    def run(name: str, threshold: float | None) -> tuple[np.ndarray, float, float]:
        model.configure_caching(threshold if name == "step_reuse" else None, name == "commit_reuse")
        rollout(model, [type(s)(s.prompts[:1], s.actions[:f], s.controls[:f]) for s in scripts], pool=pool)  # warm-up
        res = rollout(model, scripts, seed=1, pool=pool)
        adherence = float(np.mean([ev.score_story(fr, sp)["adherence"] for fr, sp in zip(res.frames, specs, strict=True)]))
        return res.frames, res.seconds, adherence

    exact_frames, exact_s, exact_adh = run("exact", None)
    cases: list[tuple[str, float | None]] = [("commit_reuse", None)] + [("step_reuse", t) for t in args.thresholds]
    techniques = []
    for name, threshold in cases:
        frames, seconds, adherence = run(name, threshold)
        p = psnr(frames, exact_frames)
        row = {
            "name": name,
            "threshold": threshold,
            "speedup": exact_s / seconds,
            "psnr_db": None if math.isinf(p) else p,
            "psnr_loss_db": 0.0 if math.isinf(p) else max(0.0, QUANT_PSNR - p),
            "adherence": adherence,
            "adherence_delta": adherence - exact_adh,
        }
        if name == "step_reuse":
            row["reuse_rate"] = model.caching_stats()["step_reuse_hit_rate"]
        techniques.append(row)
        print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()}, file=sys.stderr)
    out = {
        "techniques": techniques,
        "exact": {"seconds": exact_s, "frames_per_s": args.clips * args.chunks * f / exact_s, "adherence": exact_adh},
        "clips": args.clips,
        "chunks": args.chunks,
        "threads": torch.get_num_threads(),
        "psnr_loss_reference_db": QUANT_PSNR,
    }
    emit_result(out, args.out, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
