"""Modules that must not load torch: the scheduler is pure Python (DESIGN.md), and the capacity
benchmark's client drives a server over HTTP on the same cores, so it must not carry torch's
threads and memory beside it."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_scheduler_and_the_capacity_client_import_without_torch() -> None:
    code = (
        "import sys\n"
        "import scheduler, benchmarks.capacity\n"
        "from streamer.hostinfo import cpu_name\n"
        "assert cpu_name()\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
