"""Precision benchmark: the embedded model in bf16 (and/or compiled) against fp32, on the same rollouts, in one run.

For each batch size: frames/s of batched story rollouts (denoise steps + commit + decode) in
each variant, timed in interleaved rounds so that a slow spell of a shared machine lands on
all alike (the median round counts), and the PSNR of each variant's frames against the first
variant's (same scripts, same seeds). A variant is a precision, `fp32` or `bf16` (which needs
native bf16: docs/model.md, Precision), optionally `-compiled` (torch.compile on the blocks:
docs/model.md, Compiled blocks). Runs on the CPU.

    python benchmarks/precision.py [--batches 1 8] [--chunks 12] [--rounds 3]   -> benchmarks/results/precision.json
    python benchmarks/precision.py --variants fp32 fp32-compiled --batches 1 8 16 --out benchmarks/results/compile.json
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import QUANT_PSNR, RESULTS, emit_result, psnr  # noqa: E402
from benchmarks.timed_rollouts import median_fps, timed_rollouts  # noqa: E402
from streamer.hostinfo import host_info  # noqa: E402
from streamer.models.embedded.model import EmbeddedModel  # noqa: E402
from streamer.models.precision import NATIVE_BF16_CPU_FEATURES, PRECISIONS  # noqa: E402

VARIANTS = (*PRECISIONS, *(f"{p}-compiled" for p in PRECISIONS))


def load_variant(name: str, weights: Path | None) -> EmbeddedModel:
    """`fp32`, `bf16`, `fp32-compiled` or `bf16-compiled` (PrecisionError, CompileError)."""
    precision, _, compiled = name.partition("-")
    model = EmbeddedModel.load(weights, precision=precision)
    if compiled:
        model.compile()
    return model


def measure(models: dict[str, EmbeddedModel], batch: int, chunks: int, rounds: int) -> dict:
    fps, frames = timed_rollouts(models, batch, chunks, rounds)
    base, *others = models
    f = next(iter(models.values())).spec.frames_per_chunk
    row = {"batch": batch, "frames": batch * chunks * f,
           **{f"{name}_frames_per_s": v for name, v in median_fps(fps).items()},
           "rounds_frames_per_s": fps}  # fmt: skip
    for name in others:  # against the first variant, the baseline
        p = psnr(frames[name], frames[base])
        row[f"{name}_psnr_db"] = None if math.isinf(p) else p  # identical frames
        row[f"{name}_speedup"] = row[f"{name}_frames_per_s"] / row[f"{base}_frames_per_s"]
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", nargs="+", default=list(PRECISIONS), choices=VARIANTS, metavar="VARIANT",
                    help=f"the first is the baseline (default: fp32 bf16; any of {', '.join(VARIANTS)})")
    ap.add_argument("--batches", type=int, nargs="*", default=[1, 8])
    ap.add_argument("--chunks", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--weights", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=RESULTS / "precision.json")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if len(set(args.variants)) < 2 or len(set(args.variants)) != len(args.variants):
        ap.error("--variants needs at least two different variants, each once")
    try:
        models = {name: load_variant(name, args.weights) for name in args.variants}
    except ValueError as exc:  # PrecisionError, CompileError
        print(f"benchmarks/precision.py: {exc}", file=sys.stderr)
        return 2
    rows = []
    for batch in args.batches:
        rows.append(measure(models, batch, args.chunks, args.rounds))
        print({k: (round(v, 2) if isinstance(v, float) else v) for k, v in rows[-1].items()
               if k != "rounds_frames_per_s"}, file=sys.stderr)  # fmt: skip
    out = {"variants": args.variants, "batches": rows, "chunks": args.chunks, "rounds": args.rounds, "threads": torch.get_num_threads(),
           "cpu_bf16_features": [k for k in NATIVE_BF16_CPU_FEATURES if torch.cpu.get_capabilities().get(k)],
           "psnr_of_8bit_rounding_db": QUANT_PSNR, "host": host_info(torch.device("cpu"))}  # fmt: skip
    emit_result(out, args.out, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
