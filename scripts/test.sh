#!/usr/bin/env bash
# Installs streamer with its test extras (and Debian's chromium for the browser tests), then
# runs the linters and the whole test suite. This is exactly what CI runs (.ci/run).
# The suite always runs, even when a linter fails, and its summary is the last thing printed;
# the exit status is non-zero if the linters or the tests failed.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test,triton,wan || { echo "setup failed" >&2; exit 1; }
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "warning: could not install chromium; browser tests will be skipped" >&2
fi
lint=0
.venv/bin/python -m ruff check streamer scheduler kernels tests benchmarks || lint=1
.venv/bin/python -m mypy scheduler streamer || lint=1
# Triton fixes interpreter-or-compiled at import; the kernel tests run it on this CPU.
export TRITON_INTERPRET=1
.venv/bin/python -m pytest -q "$@"
tests=$?
[ "$lint" -ne 0 ] && echo "lint failed (ruff or mypy, above)" >&2
exit $(( tests != 0 || lint != 0 ))
