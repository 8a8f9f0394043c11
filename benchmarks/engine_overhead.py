"""Engine overhead: where one flat-out stream's chunk time goes, against the calibration's prediction.

One process calibrates the model (the start-up run `streamer serve` makes), then runs one session
flat out in the engine (no deadline can hold, no degrading) and times, per chunk:
- the model batches as the engine measures them (what its cost model observes: gather, model
  call, scatter, device sync), by kind;
- the scheduler's planning (`schedule`) and bookkeeping (`update`);
- the wall time per delivered chunk.
The first two are read from the engine's own metrics (`streamer_step_seconds` and
`streamer_scheduler_seconds`, as `/metrics` serves them), so this measures what a running server reports.
The baseline is the calibration of the same process: `ratios` are engine over calibration, so
a ratio above 1 is a cost the calibration does not see (or a slower spell of the machine).

    python benchmarks/engine_overhead.py            # -> benchmarks/results/engine_overhead.json
    python benchmarks/engine_overhead.py --config tiny-random --seconds 2 --json
    python benchmarks/engine_overhead.py --device cuda --out benchmarks/results/engine_overhead_gpu.json
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import kernels  # noqa: E402
from benchmarks.common import RESULTS, emit_result  # noqa: E402
from benchmarks.engine import SATURATED_FPS, calibrate_once, drive  # noqa: E402
from streamer import metrics  # noqa: E402
from streamer.argtypes import positive_int  # noqa: E402
from streamer.engine import Engine, EngineConfig  # noqa: E402
from streamer.engine_factory import build_model  # noqa: E402

SERIES = {"denoise_batches": ("streamer_step_seconds", {"kind": "denoise"}),
          "commit_batches": ("streamer_step_seconds", {"kind": "commit"}),
          "schedule": ("streamer_scheduler_seconds", {"phase": "schedule"}),
          "update": ("streamer_scheduler_seconds", {"phase": "update"})}


def engine_totals() -> dict[str, tuple[float, float]]:
    """(seconds, calls) so far of each series the engine records in its Prometheus metrics."""
    get = metrics.REGISTRY.get_sample_value
    return {key: (get(f"{name}_sum", labels) or 0.0, get(f"{name}_count", labels) or 0.0)
            for key, (name, labels) in SERIES.items()}


async def one_stream(model, calibration: dict, seconds: float) -> dict:
    cfg = EngineConfig(max_sessions=1, fps=SATURATED_FPS, utilisation_bound=1e9, degrade=False)
    engine = Engine(model, cfg, calibration=calibration)
    before = engine_totals()
    d = await drive(engine, 1, seconds, 0.0)
    after = engine_totals()
    spent = {k: after[k][0] - before[k][0] for k in SERIES}
    calls = {k: after[f"{k}_batches"][1] - before[f"{k}_batches"][1] for k in ("denoise", "commit")}
    chunks = max(calls["commit"], 1)
    return {"chunks": int(calls["commit"]), "fps": d["fps"], "wall_per_chunk_ms": d["wall"] / chunks * 1e3,
            "per_chunk_ms": {k: v / chunks * 1e3 for k, v in spent.items()},
            "per_call_ms": {k: spent[f"{k}_batches"] / n * 1e3 for k, n in calls.items() if n}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=12.0)
    ap.add_argument("--config", default=None, help="'tiny-random' for a plumbing run (default: shipped weights)")
    ap.add_argument("--threads", type=positive_int, default=2)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--json", action="store_true", help="print the result object as the last line")
    ap.add_argument("--out", type=Path, default=RESULTS / "engine_overhead.json")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    try:
        model = build_model("embedded", args.config, None, args.device)
    except ValueError as exc:  # DeviceError: no CUDA device here
        print(f"benchmarks/engine_overhead.py: {exc}", file=sys.stderr)
        return 2
    steps = model.spec.default_steps
    calibration = calibrate_once(model, steps, 1)
    predicted = {"denoise": calibration[("denoise", 1)] * 1e3, "commit": calibration[("commit", 1)] * 1e3}
    run = asyncio.run(one_stream(model, calibration, args.seconds))
    predicted_chunk = steps * predicted["denoise"] + predicted["commit"]
    result = {
        "model": args.config or "embedded (shipped weights)", "steps": steps, "threads": args.threads,
        "device": args.device,
        "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None,
        "kernels": kernels.backend(args.device).reason,
        "seconds": args.seconds, "calibrated_ms": predicted, "predicted_chunk_ms": predicted_chunk,
        "predicted_fps": 1e3 * model.spec.frames_per_chunk / predicted_chunk, **run,
        "ratios": {
            "denoise_engine_over_calibration": run["per_call_ms"].get("denoise", 0.0) / predicted["denoise"],
            "commit_engine_over_calibration": run["per_call_ms"].get("commit", 0.0) / predicted["commit"],
            "chunk_wall_over_prediction": run["wall_per_chunk_ms"] / predicted_chunk,
        },
    }
    print(f"predicted {result['predicted_fps']:.1f} fps, engine {run['fps']:.1f} fps flat out; per chunk (ms): "
          + ", ".join(f"{k} {v:.2f}" for k, v in run["per_chunk_ms"].items()), file=sys.stderr)
    emit_result(result, args.out, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
