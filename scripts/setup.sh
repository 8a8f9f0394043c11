#!/usr/bin/env bash
# Creates .venv and installs streamer into it. Idempotent; safe to re-run.
# torch is pinned to the CPU wheel (2.13.0): a looser pin pulls a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS="${1:-}"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".${EXTRAS:+[$EXTRAS]}"
