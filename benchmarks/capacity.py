"""Capacity sweep: how many sessions this machine holds in real time, batched vs baseline.

    python benchmarks/capacity.py --server-args "--config tiny-random" --seconds 30
    python benchmarks/capacity.py --schedulers deadline --max-sessions 24 --json

For each scheduler (`--scheduler deadline`, the batched one, and `serial`, the
one-stream-at-a-time baseline) it reports two figures:

- **admitted**: how many of `--max-sessions` simultaneous users admission control lets in
  (a server with the default admission settings, soaked for `--admit-seconds`);
- **held in real time**: the most sessions whose soak keeps server-side deadline misses at or
  under `--threshold` (1 %) with no errors. To probe past admission, this server runs with
  `--utilisation-bound 1000 --no-degrade` (nothing refused, no step or fps cuts: full quality)
  at the fps the default server chose, and session counts double until a soak fails, then
  bisect between the last one held and the first one not.

Each probe is a `benchmarks/soak.py` run (its JSON goes to `results/capacity/`). Writes
`benchmarks/results/capacity.json`; the last stdout line is a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS, ServerProcess  # noqa: E402
from benchmarks.soak import SoakConfig  # noqa: E402
from benchmarks.soak import run as run_soak  # noqa: E402
from streamer.hostinfo import cpu_name  # noqa: E402

KEEP = ("sessions", "sessions_started", "errors", "refused", "lost", "miss_rate", "ttff_p50_s", "ttff_p99_s",
        "interval_p99_s", "stalls_per_min", "glass_to_glass_p50_s", "glass_to_glass_p99_s", "fps_session")  # fmt: skip


def held(result: dict[str, Any], n: int, threshold: float) -> bool:
    rate = result["miss_rate"]
    return (result["errors"] == 0 and result["refused"] == 0 and result["sessions"] == n
            and rate is not None and rate <= threshold)  # fmt: skip


def wait_idle(url: str, timeout_s: float = 30.0) -> None:
    """Between probes: wait until the server has closed the last probe's sessions."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if httpx.get(f"{url}/v1/info", timeout=5).json().get("sessions") == 0:
            return
        time.sleep(0.5)


class Sweep:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out_dir: Path = args.out_dir / "capacity"
        self.bar = tqdm(desc="capacity", unit="probe", file=sys.stderr, disable=args.no_progress)

    def soak(self, url: str, n: int, seconds: float, name: str) -> dict[str, Any]:
        cfg = SoakConfig(sessions=n, seconds=seconds, transport=self.args.transport, url=url, name=name,
                         out_dir=self.out_dir, plot=False, progress=False, seed=n)  # fmt: skip
        result = run_soak(cfg)
        self.bar.update(1)
        self.bar.set_postfix(probe=name, miss=result["miss_rate"], refused=result["refused"])
        return {"n": n, **{k: result.get(k) for k in KEEP}, "json": result["json"]}

    def server(self, scheduler: str, *extra: str) -> ServerProcess:
        args = [*shlex.split(self.args.server_args), "--scheduler", scheduler,
                "--max-sessions", str(self.args.max_sessions), *extra]  # fmt: skip
        return ServerProcess(args)

    def admission(self, scheduler: str) -> tuple[dict[str, Any], dict[str, Any]]:
        with self.server(scheduler) as server:
            info = httpx.get(f"{server.url}/v1/info", timeout=10).json()
            run = self.soak(
                server.url, self.args.max_sessions, self.args.admit_seconds, f"{scheduler}-admission"
            )
        return run, info

    def real_time(self, scheduler: str, fps: float) -> tuple[int, list[dict[str, Any]]]:
        runs: dict[int, dict[str, Any]] = {}
        extra = ["--utilisation-bound", "1000", "--no-degrade"]
        if "--fps" not in self.args.server_args:
            extra += ["--fps", str(fps)]
        with self.server(scheduler, *extra) as server:

            def probe(n: int) -> bool:
                wait_idle(server.url)
                runs[n] = self.soak(server.url, n, self.args.seconds, f"{scheduler}-{n}")
                return held(runs[n], n, self.args.threshold)

            good, bad, n = 0, None, 1
            while n <= self.args.max_sessions:
                if not probe(n):
                    bad = n
                    break
                good, n = n, n * 2
            if bad is None and good < self.args.max_sessions:  # doubling overshot the cap
                bad = self.args.max_sessions + 1
            while bad is not None and bad - good > 1:
                mid = (good + bad) // 2
                good, bad = (mid, bad) if probe(mid) else (good, mid)
        return good, [runs[k] for k in sorted(runs)]

    def run(self) -> dict[str, Any]:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        out: dict[str, Any] = {"schedulers": {}}
        for scheduler in self.args.schedulers:
            admission, info = self.admission(scheduler)
            holds, runs = self.real_time(scheduler, info["fps"])
            out["schedulers"][scheduler] = {
                "fps": info["fps"],
                "compute_dtype": info.get("compute_dtype"),  # `serve --precision auto` picks it per host
                "admitted": admission["sessions_started"],
                "admission_run": admission,
                "held_in_real_time": holds,
                "runs": runs,
            }
        self.bar.close()
        s = out["schedulers"]
        if "deadline" in s and "serial" in s and s["serial"]["held_in_real_time"]:
            out["held_ratio_batched_over_baseline"] = round(
                s["deadline"]["held_in_real_time"] / s["serial"]["held_in_real_time"], 3)  # fmt: skip
        out["settings"] = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(self.args).items()}
        out["machine"] = {
            "cpu": cpu_name(),
            "python": platform.python_version(),
        }
        return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--schedulers", nargs="+", choices=["deadline", "serial"], default=["deadline", "serial"])
    ap.add_argument(
        "--server-args", default="", help='extra `streamer serve` arguments, e.g. "--config tiny-random"'
    )
    ap.add_argument("--transport", choices=["ws", "webrtc", "mix"], default="ws")
    ap.add_argument("--seconds", type=float, default=30.0, help="length of each probe")
    ap.add_argument("--admit-seconds", type=float, default=15.0, help="length of the admission run")
    ap.add_argument("--max-sessions", type=int, default=16, help="largest count probed")
    ap.add_argument("--threshold", type=float, default=0.01, help="miss rate that ends the sweep")
    ap.add_argument("--out-dir", type=Path, default=RESULTS)
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--json", action="store_true", help="print only the JSON summary line on stdout")
    args = ap.parse_args(argv)
    result = Sweep(args).run()
    path = args.out_dir / "capacity.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    summary = {name: {k: v for k, v in r.items() if k in ("fps", "admitted", "held_in_real_time")}
               for name, r in result["schedulers"].items()}  # fmt: skip
    summary["held_ratio_batched_over_baseline"] = result.get("held_ratio_batched_over_baseline")
    summary["json"] = str(path)
    if not args.json:
        for name, r in result["schedulers"].items():
            for run in r["runs"]:
                print(f"{name:>8} n={run['n']:>2} miss={run['miss_rate']} refused={run['refused']} "
                      f"errors={run['errors']} interval_p99={run['interval_p99_s']}", file=sys.stderr)  # fmt: skip
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
