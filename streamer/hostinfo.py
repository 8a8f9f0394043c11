"""The machine a speed figure was measured on: its CPU, the torch threads, its matmul peak.

A frame rate means little without its host: the project's 2-core machine has been hosts whose
fp32 matmul peak differs by more than 2x, and the same weights' one-stream rate moved with it
(docs/benchmarks.md, "Read a rate against its host"). So `streamer eval` and the benchmarks
record this beside their rates, and absolute rates are compared only with the peak of their run.

torch is imported where a function needs it: `cpu_name` serves torch-free clients too (the
capacity benchmark drives a server over HTTP and must not load torch beside it).
"""

from __future__ import annotations

import platform
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), or what `platform` knows where there is none."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def matmul_peak_gflops(device: torch.device, n: int = 1024, dtype: torch.dtype | None = None,
                       seconds: float = 2.0) -> float:
    """n x n matmul GFLOP/s in `dtype` on `device`, at torch's current thread count. On CUDA each
    product is waited for, so the count is what the device finished (an 8192-wide fp32 product
    takes ~20 ms: the wait is noise). `dtype` defaults to fp32."""
    import torch

    from .models.device import synchronize

    dtype = dtype or torch.float32
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    synchronize(device)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        a @ b
        synchronize(device)
        count += 1
    return 2 * n**3 * count / (time.perf_counter() - start) / 1e9


def host_info(device: torch.device, peak_seconds: float = 1.0) -> dict:
    """What to record beside a speed figure: CPU (and GPU) name, threads, fp32 matmul peak on `device`."""
    import torch

    info: dict = {"cpu": cpu_name(), "threads": torch.get_num_threads(), "device": str(device)}
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    info["matmul_peak_gflops"] = round(matmul_peak_gflops(device, seconds=peak_seconds), 1)
    return info
