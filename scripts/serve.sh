#!/usr/bin/env bash
# Installs streamer and serves the embedded model: `bash scripts/serve.sh [streamer serve args]`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/streamer serve "$@"
