"""Engine benchmark: the batched deadline scheduler against the peers' one-stream-at-a-time pattern.

Both modes run in the same process, on the same model, in the same run, at the same pinned
session fps: `--fps`, or the rate one calibration at the start picks (as `streamer serve` would:
the best rate for one session, or with `--fps-for-sessions N` the highest rate at which N
sessions fit the batched scheduler at once), shared by every run so that admission and fps never
differ by calibration noise. For each session
count: aggregate frames/s, per-session fps, chunk deadline-miss rate (over admitted sessions),
time to first chunk p50/p99, and model FLOPs utilisation (model FLOPs per frame x frames/s,
against a matmul peak measured on the same device in the same run, in the dtype the model's
matmuls run in: 1024-wide on the CPU, 8192-wide on a GPU, fp32 there with TF32 off).

Each run also measures `saturated_fps`: the same number of sessions, all admitted, with no
deadlines that could be met (a 1000 fps target) and no degrading, so the device runs flat out.
Batched against one-at-a-time, that ratio is what batching itself costs or gains, whatever
admission let in.

    python benchmarks/engine.py --quick --json      # 8 sessions, ~20 s per mode
    python benchmarks/engine.py                     # 1, 2, 4, 8, 16 sessions x 30 s -> results/engine.json
    python benchmarks/engine.py --device cuda       # the same on a GPU -> results/engine_gpu.json
    python benchmarks/engine.py --fps-for-sessions 8 --out benchmarks/results/engine_8sessions.json
    python benchmarks/engine.py --quick --precision bf16   # the embedded model in bf16 (docs/model.md)
    python benchmarks/engine.py --quick --step-reuse 0.4   # with a caching technique on (docs/caching.md)
    python benchmarks/engine.py --quick --compile          # the blocks under torch.compile (docs/model.md)

With `--step-reuse`/`--commit-reuse` every engine of the run has the technique on (the JSON's
`caching`; each run's `caching_stats` has the step-reuse hit rate); compare with a run without.
The calibration and the FLOP count are made before any engine exists, on the exact path, so a
run with caching serves the same fps, and its MFU counts the exact path's FLOPs per frame.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import kernels  # noqa: E402
from benchmarks.common import RESULTS, emit_result  # noqa: E402
from streamer.argtypes import positive_int  # noqa: E402
from streamer.calibration import calibrate  # noqa: E402
from streamer.chunk_steps import commit_noise  # noqa: E402
from streamer.engine import Engine, EngineConfig, make_scheduler  # noqa: E402
from streamer.engine_factory import build_model  # noqa: E402
from streamer.events import Chunk, Refused  # noqa: E402
from streamer.hostinfo import cpu_name, host_info, matmul_peak_gflops  # noqa: E402
from streamer.models.base import Conditioning  # noqa: E402
from streamer.models.compiled import MODES as COMPILE_MODES  # noqa: E402
from streamer.models.device import resolve_device  # noqa: E402
from streamer.models.embedded import vocab  # noqa: E402
from streamer.models.precision import PRECISIONS  # noqa: E402
from streamer.protocol import StartMessage  # noqa: E402


@contextlib.contextmanager
def reference_kernels() -> Iterator[None]:
    """Run kernels/ through the PyTorch references, whose attention the FLOP counter can see
    (a Triton launch is invisible to it), so the count is the same on every device."""
    old = os.environ.get("STREAMER_KERNELS")
    os.environ["STREAMER_KERNELS"] = "reference"
    try:
        yield
    finally:
        if old is None:
            del os.environ["STREAMER_KERNELS"]
        else:
            os.environ["STREAMER_KERNELS"] = old


def _cpu_sdpa_flops(q_shape, k_shape, v_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(q_shape, k_shape, v_shape)


def flop_counter() -> FlopCounterMode:
    """torch's FLOP counter, also counting the CPU's fused attention: torch 2.13 has no formula for
    `_scaled_dot_product_flash_attention_for_cpu` and counts it as 0 FLOPs, which left every
    CPU MFU before session 13 without its attention (about a quarter of the embedded model's FLOPs)."""
    aten = torch.ops.aten
    return FlopCounterMode(display=False, custom_mapping={aten._scaled_dot_product_flash_attention_for_cpu: _cpu_sdpa_flops})


def flops_per_frame(model, steps: int) -> float:
    """Model FLOPs to make one frame: `steps` denoise passes, one commit, one decode (batch 1)."""
    spec = model.spec
    pool = model.new_pool(1)
    slot = pool.allocate()
    prompt = model.encode_prompt(["a red ball moving left on grass"])[0]
    f = spec.frames_per_chunk
    cond = Conditioning([prompt], torch.zeros(1, f, dtype=torch.long), torch.zeros(1, f, spec.control_dim))
    x = torch.randn(1, *spec.latent_shape)
    for _ in range(spec.window_frames // f + 1):  # a full cache window, the steady state
        model.commit(x, cond, pool.batch([slot], commit=True), commit_noise(spec, 1))
    with reference_kernels(), flop_counter() as counter:
        for _ in range(steps):
            model.denoise(x, torch.tensor([0.5]), cond, pool.batch([slot]))
        model.commit(x, cond, pool.batch([slot], commit=True), commit_noise(spec, 1))
        model.decode(x)
    return counter.get_total_flops() / f


def set_mfu(run: dict, flops_per_frame: float, peak_gflops: float) -> None:
    """Model FLOPs utilisation of the frames delivered (`mfu`) and of flat-out (`saturated_mfu`)."""
    run["mfu"] = flops_per_frame * run["aggregate_fps"] / (peak_gflops * 1e9)
    run["saturated_mfu"] = flops_per_frame * run["saturated_fps"] / (peak_gflops * 1e9)


class Recorder:
    def __init__(self, opened: float) -> None:
        self.opened, self.arrivals = opened, []

    def on_chunk(self, chunk: Chunk) -> None:
        self.arrivals.append((time.monotonic(), chunk.frames.shape[0]))

    def on_event(self, event: dict) -> None:
        pass


SATURATED_FPS = 1000.0  # a target no model here meets: every chunk is late, the device never idles
Calibration = dict[tuple[str, int], float]


def ms_table(costs: Calibration) -> dict[str, float]:
    """{"denoise@8": milliseconds, ...}: a calibration or a cost model's table, as the JSON holds it."""
    return {f"{kind}@{b}": round(v * 1e3, 3) for (kind, b), v in sorted(costs.items())}


async def drive(engine: Engine, sessions: int, seconds: float, stagger: float, skip_s: float = 0.0) -> dict:
    """Open `sessions` sessions `stagger` s apart and record them for `seconds` of wall time.

    Frames that arrive in the first `skip_s` seconds do not count towards `fps` (a warm-up).
    """
    await engine.start()
    rng = np.random.default_rng(0)
    recs: list[Recorder] = []
    refused = 0
    try:
        t0 = time.monotonic()
        for i in range(sessions):
            await asyncio.sleep(max(0.0, t0 + i * stagger - time.monotonic()))
            rec = Recorder(time.monotonic())
            prompt = vocab.describe(vocab.random_spec(rng))
            try:
                await engine.open_session(StartMessage(prompt=prompt, seed=i), rec)
                recs.append(rec)
            except Refused:
                refused += 1
        await asyncio.sleep(max(0.0, t0 + seconds - time.monotonic()))
        stats = engine.scheduler.stats()
        learned = engine.scheduler.cost.measurements()
        wall = time.monotonic() - t0
    finally:
        await engine.stop()
    counted = sum(n for r in recs for t, n in r.arrivals if t - t0 >= skip_s)
    return {"recs": recs, "refused": refused, "stats": stats, "wall": wall, "t0": t0, "learned": learned,
            "fps": counted / max(1e-9, wall - skip_s)}  # fmt: skip


async def run_mode(model, mode: str, sessions: int, seconds: float, fps: float, stagger: float,
                   calibration: Calibration, caching: dict) -> dict:  # fmt: skip
    cfg = EngineConfig(max_sessions=max(sessions, 1), scheduler=mode, fps=fps, **caching)
    engine = Engine(model, cfg, calibration=calibration)
    d = await drive(engine, sessions, seconds, stagger)
    recs, stats, wall, t0 = d["recs"], d["stats"], d["wall"], d["t0"]
    ttff = [r.arrivals[0][0] - r.opened for r in recs if r.arrivals]
    per_session = [sum(n for _, n in r.arrivals) / max(1e-9, wall - (r.opened - t0)) for r in recs]
    return {
        "mode": "batched" if mode == "deadline" else "baseline",
        "sessions": sessions,
        "admitted": len(recs),
        "refused": d["refused"],
        "fps": fps,
        "aggregate_fps": d["fps"],
        "per_session_fps_mean": float(np.mean(per_session)) if per_session else 0.0,
        "per_session_fps_min": float(np.min(per_session)) if per_session else 0.0,
        "target_fps": engine.fps,
        "miss_rate": stats["miss_rate"],
        "chunks": stats["chunks"],
        "ttff_p50_s": float(np.percentile(ttff, 50)) if ttff else None,
        "ttff_p99_s": float(np.percentile(ttff, 99)) if ttff else None,
        "mean_batch": stats.get("mean_batch"),
        "degrade_level": stats.get("degrade_level"),
        "caching_stats": engine.info()["caching"],
        # What the cost model had learned by the end, against `calibration_ms` at the top: how far
        # the engine's batches ran from the start-up calibration that admission began with.
        "learned_ms": ms_table(d["learned"]),
    }


async def saturated_fps(model, mode: str, sessions: int, seconds: float, calibration: Calibration,
                        caching: dict) -> tuple[float, dict]:  # fmt: skip
    """Aggregate frames/s with every session admitted and running flat out (no deadline holds),
    and the engine's caching figures.

    All sessions open at once; the first quarter of the window is a warm-up and is not counted.
    """
    cfg = EngineConfig(max_sessions=max(sessions, 1), scheduler=mode, fps=SATURATED_FPS,
                       utilisation_bound=1e9, degrade=False, **caching)  # fmt: skip
    engine = Engine(model, cfg, calibration=calibration)
    d = await drive(engine, sessions, seconds, 0.0, skip_s=seconds / 4)
    return float(d["fps"]), engine.info()["caching"]


def shared_fps(model, calibration: Calibration, steps: int, sessions: int, max_sessions: int) -> float:
    """The rate `streamer serve --fps-for-sessions N` picks from this calibration (batched scheduler)."""
    sched = make_scheduler(EngineConfig(max_sessions=max_sessions), min(model.spec.max_batch, max_sessions))
    sched.cost.calibrate(calibration)
    return sched.sustainable_fps(sessions, steps, model.spec.frames_per_chunk, model.spec.fps)


def calibrate_once(model, steps: int, max_sessions: int) -> Calibration:
    """One calibration for the whole run, up to the largest batch any of its engines forms."""
    return calibrate(model, model.new_pool(min(model.spec.max_batch, max_sessions)), steps)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="8 sessions, ~20 s per mode")
    ap.add_argument("--json", action="store_true", help="print the result object as the last line")
    ap.add_argument("--sessions", type=int, nargs="*", default=None)
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--fps", type=float, default=None,
                    help="session fps for every run (default: picked once from one calibration, as serve does)")
    ap.add_argument("--fps-for-sessions", type=positive_int, default=1, metavar="N",
                    help="without --fps, pick the rate at which N sessions fit at once (as serve's flag)")
    ap.add_argument("--saturated-seconds", type=float, default=None,
                    help="flat-out throughput window per mode and session count (default 5 s quick, 10 s full)")
    ap.add_argument("--stagger", type=float, default=0.25, help="seconds between session arrivals")
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--config", default=None)
    ap.add_argument("--weights", default=None, help="weights folder (default: the --model's shipped ones)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--precision", default=None, choices=PRECISIONS,
                    help="what the embedded model computes in (default fp32; see docs/model.md, Precision)")
    ap.add_argument("--step-reuse", type=float, default=None, metavar="THRESHOLD",
                    help="step reuse on, at this threshold (docs/caching.md)")
    ap.add_argument("--commit-reuse", action="store_true", help="commit reuse on (docs/caching.md)")
    ap.add_argument("--compile", nargs="?", const="default", default=None, choices=COMPILE_MODES, metavar="MODE",
                    help="torch.compile the embedded model's blocks (docs/model.md, Compiled blocks), in torch.compile's "
                         f"MODE ({', '.join(COMPILE_MODES)}; default: default; reduce-overhead: CUDA graphs, GPU only)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    caching = {"step_reuse": args.step_reuse, "commit_reuse": args.commit_reuse}
    try:
        device = resolve_device(args.device)
        model = build_model(args.model, args.config, args.weights, args.device, args.precision)
        model.configure_caching(**caching)  # a technique the model lacks fails here, not mid-run
        model.configure_caching(None, False)  # the calibration and FLOP count run the exact path
        steps = model.spec.default_steps
        fpf = flops_per_frame(model, steps)  # eager: the counter cannot see into compiled C++ kernels
        if args.compile:
            model.compile(args.compile)  # a CompileError here; the calibration's warm-up rounds compile the graphs
    except ValueError as exc:  # DeviceError, PrecisionError, CompileError, an unsupported technique
        print(f"benchmarks/engine.py: {exc}", file=sys.stderr)
        return 2
    sessions = args.sessions or ([8] if args.quick else [1, 2, 4, 8, 16])
    seconds = args.seconds or (20.0 if args.quick else 30.0)
    saturated_s = args.saturated_seconds or (5.0 if args.quick else 10.0)
    dtype = model.compute_dtype
    peak_n = 8192 if device.type == "cuda" else 1024
    peak = matmul_peak_gflops(device, peak_n, dtype)
    largest = max(*sessions, args.fps_for_sessions)
    calibration = calibrate_once(model, steps, largest)
    fps = args.fps or shared_fps(model, calibration, steps, args.fps_for_sessions, largest)
    out = args.out or (None if args.quick else RESULTS / ("engine_gpu.json" if device.type == "cuda" else "engine.json"))
    result = {
        "runs": [],
        "model": args.model,
        "weights": args.weights,  # None: the model's shipped ones
        "fps": fps,
        "fps_source": "--fps" if args.fps else "one calibration, shared by every run",
        "fps_for_sessions": None if args.fps else args.fps_for_sessions,
        "calibration_ms": ms_table(calibration),
        "machine": {"cpu": cpu_name(), "threads": torch.get_num_threads()},  # the older spelling, kept for readers
        "host": host_info(device),  # as the other benchmarks name it: the fp32 peak, whatever the model dtype
        "device": device.type,
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "versions": {"torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version()},
        "kernels": kernels.backend(device).reason,
        "model_dtype": str(dtype).removeprefix("torch."),
        # torch's defaults, not changed here: fp32 matmuls (TF32 off); cuDNN convolutions may use TF32.
        "tf32": {"matmul": torch.backends.cuda.matmul.allow_tf32, "cudnn_conv": torch.backends.cudnn.allow_tf32},
        "matmul_peak_gflops": peak,
        "matmul_peak_dtype": str(dtype).removeprefix("torch.") + (
            " (TF32 off)" if dtype == torch.float32 and device.type == "cuda" and
            not torch.backends.cuda.matmul.allow_tf32 else ""),  # fmt: skip
        "matmul_peak_n": peak_n,
        "model_gflops_per_frame": fpf / 1e9,
        "caching": caching,
        "compiled": args.compile is not None,
        "compile_mode": args.compile,
        "seconds_per_mode": seconds,
        "saturated_seconds_per_mode": saturated_s,
        "sessions_planned": sessions,
        "complete": False,
    }
    runs: list[dict] = result["runs"]
    for n in sessions:
        for mode in ("deadline", "serial"):
            r = asyncio.run(run_mode(model, mode, n, seconds, fps, args.stagger, calibration, caching))
            r["saturated_fps"], r["saturated_caching_stats"] = asyncio.run(
                saturated_fps(model, mode, n, saturated_s, calibration, caching))
            set_mfu(r, fpf, peak)  # against the start's peak until the end's is measured
            runs.append(r)
            print(f"{r['mode']:>8} n={n:>2} fps={fps:g} admitted={r['admitted']:>2} agg={r['aggregate_fps']:6.1f} "
                  f"fps miss={r['miss_rate']:.3f} ttff p50={r['ttff_p50_s']} mfu={r['mfu']:.2f} "
                  f"saturated={r['saturated_fps']:6.1f} fps", file=sys.stderr)  # fmt: skip
        b, s = runs[-2], runs[-1]
        result.setdefault("ratios", {})[str(n)] = {
            "aggregate_fps_batched_over_baseline": b["aggregate_fps"] / max(s["aggregate_fps"], 1e-9),
            "saturated_fps_batched_over_baseline": b["saturated_fps"] / max(s["saturated_fps"], 1e-9),
        }
        result["complete"] = n == sessions[-1]
        if out is not None and not result["complete"]:
            emit_result(result, out, False)  # a run stopped by a time limit keeps the counts it finished
    # A shared machine's speed drifts over a run's minutes (one sweep measured 345 GFLOP/s where
    # the one before it measured 410): the peak is measured again at the end, and MFU divides
    # by the mean of both, so one slow or fast spell at the start does not set every MFU.
    peak_end = matmul_peak_gflops(device, peak_n, dtype)
    result.update(matmul_peak_gflops=(peak + peak_end) / 2, matmul_peak_gflops_start=peak,
                  matmul_peak_gflops_end=peak_end)
    for r in runs:
        set_mfu(r, fpf, result["matmul_peak_gflops"])
    emit_result(result, out, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
