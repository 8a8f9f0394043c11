"""Helpers the benchmarks share: a `streamer serve` subprocess, `/metrics` scraping, the small
statistics the soak and capacity benchmarks report (percentiles, least-squares slopes), and the
PSNR that the caching and precision benchmarks compare frames by.

No torch here: a benchmark that drives a server over the network must stay light, because on
a 2-core machine every cycle it spends is taken from the server it measures.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import httpx
import numpy as np
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
_URL_LINE = "streamer: serving on "


class ServerError(RuntimeError):
    """The server subprocess did not come up; the message ends with its log's tail."""


class ServerProcess:
    """`streamer serve` on 127.0.0.1 and a free port, stopped like Ctrl-C (drain, then exit).

    `args` are extra `serve` arguments, e.g. `["--config", "tiny-random"]`. stdout and stderr
    go to `log_path` (a temporary file by default), whose tail is quoted if startup fails.
    """

    def __init__(self, args: Sequence[str] = (), env: dict[str, str] | None = None,
                 log_path: Path | None = None, startup_timeout_s: float = 300.0) -> None:  # fmt: skip
        self.args = list(args)
        self.env = {**os.environ, **(env or {})}
        self.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), self.env.get("PYTHONPATH")]))
        self.env.setdefault("PYTHONUNBUFFERED", "1")
        self.log_path = log_path or Path(tempfile.mkstemp(prefix="streamer-serve-", suffix=".log")[1])
        self.startup_timeout_s = startup_timeout_s
        self.proc: subprocess.Popen | None = None
        self.url = ""

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self) -> str:
        cmd = [sys.executable, "-m", "streamer.cli", "serve", "--host", "127.0.0.1", "--port", "0",
               "--log-level", "warning", *self.args]  # fmt: skip
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            for line in self.log_path.read_text(errors="replace").splitlines():
                if line.startswith(_URL_LINE):
                    self.url = line[len(_URL_LINE) :].strip().rstrip("/")
                    return self.url
            if self.proc.poll() is not None:
                raise ServerError(
                    f"`{shlex.join(cmd)}` exited with {self.proc.returncode}:\n{self.log_tail()}"
                )
            time.sleep(0.2)
        self.stop()
        raise ServerError(f"server not up after {self.startup_timeout_s:.0f}s:\n{self.log_tail()}")

    def stop(self, timeout_s: float = 20.0) -> int | None:
        """SIGINT (the server drains: every session gets `ended`), then SIGKILL if it hangs."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text -> {sample name: value}, summing over label sets (`_total` names kept)."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[sample.name] = out.get(sample.name, 0.0) + float(sample.value)
    return out


async def scrape(http: httpx.AsyncClient, url: str) -> dict[str, float] | None:
    """The server's `/metrics`, or None if it cannot be read (then that sample is skipped)."""
    try:
        response = await http.get(f"{url}/metrics", timeout=5.0)
        response.raise_for_status()
        return parse_metrics(response.text)
    except (httpx.HTTPError, ValueError):
        return None


def pct(values: Sequence[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 5) if len(values) else None


def slope_per_minute(times_s: Sequence[float], values: Sequence[float]) -> float | None:
    """Least-squares slope of `values` against time, per minute (None under 3 points)."""
    if len(times_s) < 3 or np.ptp(times_s) <= 0:
        return None
    return round(float(np.polyfit(np.asarray(times_s) / 60.0, np.asarray(values, float), 1)[0]), 4)


# The PSNR of 8-bit rounding noise (uniform error of variance 1/12): frames that differ only by
# quantisation score this.
QUANT_PSNR = 10 * math.log10(255.0**2 * 12)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """PSNR in dB of uint8 frames `a` against `b` (inf when identical)."""
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * math.log10(255.0**2 / mse)


def emit_result(result: dict, out: Path | None, print_json: bool) -> None:
    """Write a benchmark's result to `out` (if any) and print it as the last stdout line if asked."""
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")
    if print_json:
        print(json.dumps(result))
