"""Precision benchmark: the embedded model in bf16 against fp32, on the same rollouts, in the same run.

For each batch size: frames/s of batched story rollouts (denoise steps + commit + decode) in
each precision, timed in interleaved rounds so that a slow spell of a shared machine lands on
both alike (the median round counts), and the PSNR of the bf16 frames against the fp32 frames
(same scripts, same seeds). Runs on the CPU, which needs native bf16 (docs/model.md, Precision).

    python benchmarks/precision.py [--batches 1 8] [--chunks 12] [--rounds 3]   -> benchmarks/results/precision.json
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import QUANT_PSNR, RESULTS, emit_result, psnr  # noqa: E402
from streamer.hostinfo import host_info  # noqa: E402
from streamer.models.embedded.model import EmbeddedModel  # noqa: E402
from streamer.models.embedded.rollout import Script, rollout  # noqa: E402
from streamer.models.embedded.scripts import story_scripts  # noqa: E402
from streamer.models.precision import NATIVE_BF16_CPU_FEATURES, PRECISIONS, PrecisionError  # noqa: E402


def measure(models: dict[str, EmbeddedModel], batch: int, chunks: int, rounds: int) -> dict:
    f = next(iter(models.values())).spec.frames_per_chunk
    scripts, _ = story_scripts(np.random.default_rng(0), batch, chunks, f)
    warm = [Script(s.prompts[:2], s.actions[: 2 * f], s.controls[: 2 * f]) for s in scripts]
    fps: dict[str, list[float]] = {p: [] for p in models}
    frames: dict[str, np.ndarray] = {}
    for model in models.values():
        rollout(model, warm)
    for _ in range(rounds):
        for name, model in models.items():
            res = rollout(model, scripts, seed=1)
            fps[name].append(batch * chunks * f / res.seconds)
            frames[name] = res.frames
    p = psnr(frames["bf16"], frames["fp32"])
    row = {"batch": batch, "frames": batch * chunks * f,
           **{f"{name}_frames_per_s": statistics.median(v) for name, v in fps.items()},
           "rounds_frames_per_s": fps, "bf16_psnr_db": None if math.isinf(p) else p}  # fmt: skip
    row["bf16_speedup"] = row["bf16_frames_per_s"] / row["fp32_frames_per_s"]
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", type=int, nargs="*", default=[1, 8])
    ap.add_argument("--chunks", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--weights", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=RESULTS / "precision.json")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    try:
        models = {p: EmbeddedModel.load(args.weights, precision=p) for p in PRECISIONS}
    except PrecisionError as exc:
        print(f"benchmarks/precision.py: {exc}", file=sys.stderr)
        return 2
    rows = []
    for batch in args.batches:
        rows.append(measure(models, batch, args.chunks, args.rounds))
        print({k: (round(v, 2) if isinstance(v, float) else v) for k, v in rows[-1].items()
               if k != "rounds_frames_per_s"}, file=sys.stderr)  # fmt: skip
    out = {"batches": rows, "chunks": args.chunks, "rounds": args.rounds, "threads": torch.get_num_threads(),
           "cpu_bf16_features": [k for k in NATIVE_BF16_CPU_FEATURES if torch.cpu.get_capabilities().get(k)],
           "psnr_of_8bit_rounding_db": QUANT_PSNR, "host": host_info(torch.device("cpu"))}  # fmt: skip
    emit_result(out, args.out, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
