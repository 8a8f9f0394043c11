"""Engine benchmark: the batched deadline scheduler against the peers' one-stream-at-a-time pattern.

Both modes run in the same process, on the same model, in the same run. For each session
count: aggregate frames/s, per-session fps, chunk deadline-miss rate (over admitted sessions),
time to first chunk p50/p99, and model FLOPs utilisation (model FLOPs per frame x frames/s,
against a 1024-wide fp32 matmul peak measured in the same run).

    python benchmarks/engine.py --quick --json      # 8 sessions, ~20 s per mode
    python benchmarks/engine.py                     # 1, 2, 4, 8, 16 sessions x 30 s -> results/engine.json
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS, emit_result  # noqa: E402
from streamer.engine import Engine, EngineConfig  # noqa: E402
from streamer.engine_factory import build_model  # noqa: E402
from streamer.events import Chunk, Refused  # noqa: E402
from streamer.models.base import Conditioning  # noqa: E402
from streamer.models.embedded import vocab  # noqa: E402
from streamer.protocol import StartMessage  # noqa: E402


def matmul_peak_gflops(n: int = 1024, seconds: float = 2.0) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        a @ b
        count += 1
    return 2 * n**3 * count / (time.perf_counter() - start) / 1e9


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
        model.commit(x, cond, pool.batch([slot], commit=True))
    with FlopCounterMode(display=False) as counter:
        for _ in range(steps):
            model.denoise(x, torch.tensor([0.5]), cond, pool.batch([slot]))
        model.commit(x, cond, pool.batch([slot], commit=True))
        model.decode(x)
    return counter.get_total_flops() / f


class Recorder:
    def __init__(self, opened: float) -> None:
        self.opened, self.arrivals = opened, []

    def on_chunk(self, chunk: Chunk) -> None:
        self.arrivals.append((time.monotonic(), chunk.frames.shape[0]))

    def on_event(self, event: dict) -> None:
        pass


async def run_mode(model, mode: str, sessions: int, seconds: float, fps: float | None, stagger: float) -> dict:
    engine = Engine(model, EngineConfig(max_sessions=max(sessions, 1), scheduler=mode, fps=fps))
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
        wall = time.monotonic() - t0
    finally:
        await engine.stop()
    frames = sum(n for r in recs for _, n in r.arrivals)
    ttff = [r.arrivals[0][0] - r.opened for r in recs if r.arrivals]
    per_session = [sum(n for _, n in r.arrivals) / max(1e-9, wall - (r.opened - t0)) for r in recs]
    return {
        "mode": "batched" if mode == "deadline" else "baseline",
        "sessions": sessions,
        "admitted": len(recs),
        "refused": refused,
        "aggregate_fps": frames / wall,
        "per_session_fps_mean": float(np.mean(per_session)) if per_session else 0.0,
        "per_session_fps_min": float(np.min(per_session)) if per_session else 0.0,
        "target_fps": engine.fps,
        "miss_rate": stats["miss_rate"],
        "chunks": stats["chunks"],
        "ttff_p50_s": float(np.percentile(ttff, 50)) if ttff else None,
        "ttff_p99_s": float(np.percentile(ttff, 99)) if ttff else None,
        "mean_batch": stats.get("mean_batch"),
        "degrade_level": stats.get("degrade_level"),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="8 sessions, ~20 s per mode")
    ap.add_argument("--json", action="store_true", help="print the result object as the last line")
    ap.add_argument("--sessions", type=int, nargs="*", default=None)
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--fps", type=float, default=None, help="target fps per session (default: the model's)")
    ap.add_argument("--stagger", type=float, default=0.25, help="seconds between session arrivals")
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--config", default=None)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if args.device != "cpu":
        print("this benchmark runs the embedded model on the CPU only so far", file=sys.stderr)
        return 2
    sessions = args.sessions or ([8] if args.quick else [1, 2, 4, 8, 16])
    seconds = args.seconds or (20.0 if args.quick else 30.0)
    model = build_model(args.model, args.config, None)
    steps = model.spec.default_steps
    peak = matmul_peak_gflops()
    fpf = flops_per_frame(model, steps)
    runs = []
    for n in sessions:
        for mode in ("deadline", "serial"):
            r = asyncio.run(run_mode(model, mode, n, seconds, args.fps, args.stagger))
            r["mfu"] = fpf * r["aggregate_fps"] / (peak * 1e9)
            runs.append(r)
            print(f"{r['mode']:>8} n={n:>2} admitted={r['admitted']:>2} agg={r['aggregate_fps']:6.1f} fps "
                  f"miss={r['miss_rate']:.3f} ttff p50={r['ttff_p50_s']} mfu={r['mfu']:.2f}", file=sys.stderr)
    result = {
        "runs": runs,
        "machine": {"cpu": platform.processor() or platform.machine(), "threads": torch.get_num_threads()},
        "matmul_peak_gflops": peak,
        "model_gflops_per_frame": fpf / 1e9,
        "seconds_per_mode": seconds,
    }
    for n in sessions:
        b = next(r for r in runs if r["sessions"] == n and r["mode"] == "batched")
        s = next(r for r in runs if r["sessions"] == n and r["mode"] == "baseline")
        result.setdefault("ratios", {})[str(n)] = {
            "aggregate_fps_batched_over_baseline": b["aggregate_fps"] / max(s["aggregate_fps"], 1e-9),
        }
    out = args.out or (None if args.quick else RESULTS / "engine.json")
    emit_result(result, out, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
