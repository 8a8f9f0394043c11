#!/usr/bin/env bash
# Installs streamer with its test extras (and Debian's chromium for the browser tests), then
# runs the whole test suite. This is exactly what CI runs (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test,triton,wan
if ! command -v chromium >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
      || echo "warning: could not install chromium; browser tests will be skipped" >&2
  fi
fi
.venv/bin/python -m ruff check streamer scheduler kernels tests benchmarks
.venv/bin/python -m mypy scheduler streamer
# Triton fixes interpreter-or-compiled at import; the kernel tests run it on this CPU.
export TRITON_INTERPRET=1
# model_quality tests wait on the embedded model's training (issue 2); run them with -m model_quality.
exec .venv/bin/python -m pytest -q -m "not model_quality" "$@"
