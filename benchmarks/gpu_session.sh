#!/usr/bin/env bash
# One GPU measurement session as one command (see docs/benchmarks.md, "GPU session").
#
#   bash benchmarks/gpu_session.sh wheels   # on a machine with PyPI: the packages the GPU image
#                                           # lacks, as wheels in .whl/ (git-ignored)
#   bash benchmarks/gpu_session.sh          # on the GPU machine, with .whl/ carried beside the tree
#   bash benchmarks/gpu_session.sh engine8 wan   # only these steps (names below), e.g. a second
#                                                # call with what the lease has left
#
# The GPU machine has no network and no copy of .venv: it runs its own python3 (torch with CUDA,
# Triton, numpy, safetensors, prometheus-client, transformers, pytest) with the repository on
# PYTHONPATH, plus the wheels from .whl/ unpacked into /tmp/site (pydantic and its parts for the
# engine, diffusers for the Wan benchmark). Nothing is built and nothing is downloaded there.
#
# Steps, in order, each with its own timeout, each run whatever the one before returned:
#   device            tests/models/test_device.py (the CUDA model against the CPU model)
#   kernels           benchmarks/kernels_gpu.py --quick
#   engine8           benchmarks/engine.py --device cuda --quick --fps-for-sessions 10 (8 sessions at
#                     the rate 10 share, batched vs baseline: the issue's GPU goal), 10 s windows,
#                     with the default dispatch
#   engine8-reference the same with STREAMER_KERNELS=reference
#   engine8-graphs    the same with --compile reduce-overhead (inductor + CUDA graphs of the maths)
#   overhead          benchmarks/engine_overhead.py --device cuda: one stream flat out, engine
#                     against calibration (where a step's time goes besides the model)
#   sweep             benchmarks/engine.py --device cuda --fps-for-sessions 8, 1, 2, 4, 8, 16
#                     sessions, windows sized to the time left -> benchmarks/results/engine_gpu.json
#   wan               benchmarks/wan_gpu.py --quick --text-encoder small (Wan2.1-1.3B shapes,
#                     random bf16 weights: no checkpoint needed)
# The whole session stays under GPU_SESSION_BUDGET_S (default 560 s: run it with timeout_s 600). Everything lands in $OUT
# (session.log, summary.txt, and results.tar: every result JSON the run wrote) and in benchmarks/results/.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

if [ "${1:-}" = "wheels" ]; then
  # Versions are the ones the CPU test suite runs with; the GPU image runs Python 3.12 on x86-64.
  # pydantic-core is compiled: the platform list is the one pip needs to pick a manylinux wheel.
  start=$(date +%s)
  rm -rf .whl && mkdir -p .whl
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl \
    pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
    typing-extensions==4.16.0 diffusers==0.42.1 importlib-metadata==10.2.0 lazy-importer==0.1.0 zipp==4.1.2 || exit 1
  ls -la .whl
  echo "wheels: $(du -sh .whl | cut -f1) in $(( $(date +%s) - start )) s; carry \".whl\" in the run"
  exit 0
fi

OUT=${OUT:-$ROOT/gpu-session-out}
mkdir -p "$OUT" benchmarks/results
LOG=$OUT/session.log
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
STAMP=$(mktemp)  # results newer than this are this run's
START=$(date +%s)
BUDGET=${GPU_SESSION_BUDGET_S:-560}
PY=${PYTHON:-python3}
SITE=${GPU_SESSION_SITE:-/tmp/site}
export PYTHONUNBUFFERED=1

left() { echo $(( START + BUDGET - $(date +%s) )); }
STEPS=" ${*:-device kernels engine8 engine8-reference engine8-graphs overhead sweep wan} "
want() { [[ $STEPS == *" $1 "* ]]; }

# step NAME MAX_SECONDS CMD...: run CMD with a timeout of min(MAX_SECONDS, time left), output to
# the log; one line per step in the summary. Returns CMD's status (124: timed out; 99: no time).
step() {
  local name=$1 max=$2 t rc s
  shift 2
  t=$(left)
  (( max < t )) && t=$max
  if (( t < 30 )); then
    echo "$name: skipped, $(left) s of the budget left" | tee -a "$SUMMARY"
    return 99
  fi
  echo "== $name (timeout ${t} s): $*" | tee -a "$LOG"
  s=$(date +%s)
  timeout -k 10 "$t" "$@" >>"$LOG" 2>&1
  rc=$?
  echo "$name: rc=$rc in $(( $(date +%s) - s )) s$([ "$rc" = 124 ] && echo ' (timed out)')" | tee -a "$SUMMARY"
  return $rc
}

{
  echo "== environment"
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1
  "$PY" -c "import sys, torch; print(sys.executable, sys.version.split()[0], 'torch', torch.__version__,
'cuda', torch.version.cuda, 'available', torch.cuda.is_available())
import triton; print('triton', triton.__version__)" 2>&1
} >>"$LOG"

if ls .whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
    .whl/*.whl >>"$LOG" 2>&1 || echo "wheels: install failed (see session.log)" | tee -a "$SUMMARY"
  export PYTHONPATH=$SITE:$ROOT
else
  echo "wheels: no .whl/ (run 'bash benchmarks/gpu_session.sh wheels' here and carry .whl): the engine needs pydantic" \
    | tee -a "$SUMMARY"
  export PYTHONPATH=$ROOT
fi

want device && step "device tests" 60 "$PY" -m pytest -q -p no:cacheprovider tests/models/test_device.py
want kernels && step "kernels" 100 "$PY" benchmarks/kernels_gpu.py --quick --out benchmarks/results/kernels_gpu.json

# 8 sessions at the rate 10 share: session 14's one-user rate (9 fps) left the batched scheduler
# room for one session, and the rate 8 share exactly admitted 5-6: on a virtual clock with that
# run's calibration, batches 10 % slower than calibrated refuse 1 of 8, 20 % slower 3 (both
# hosts have timed 10-30 % off their start-up calibration). Both dispatch choices, same windows.
EIGHT=(--device cuda --quick --json --fps-for-sessions 10 --seconds 10 --saturated-seconds 4)
want engine8 && step "engine 8, default kernels" 90 "$PY" benchmarks/engine.py "${EIGHT[@]}" \
  --out benchmarks/results/engine_gpu_8s.json
want engine8-reference && STREAMER_KERNELS=reference step "engine 8, torch kernels" 90 "$PY" benchmarks/engine.py \
  "${EIGHT[@]}" --out benchmarks/results/engine_gpu_8s_reference.json
# Inductor-compiled maths recorded as CUDA graphs (the compiled regions take the torch
# references; the attention between them stays eager, on the default dispatch): session 14's
# steps were launch-bound, and plain --compile left them where they were. Session 15: steps
# 15 % faster at calibration (7.5 against 8.9 ms, batch 1), but batch sizes first met in the
# paced run re-record their graphs there (learned 29-33 ms a step), so admission fell to 3.
want engine8-graphs && step "engine 8, compiled reduce-overhead" 150 "$PY" benchmarks/engine.py "${EIGHT[@]}" --compile reduce-overhead \
  --out benchmarks/results/engine_gpu_8s_cudagraphs.json
want overhead && step "overhead" 60 "$PY" benchmarks/engine_overhead.py --device cuda --seconds 10 --json \
  --out benchmarks/results/engine_overhead_gpu.json

# The sweep gets the time left after keeping 80 s for Wan, at most 180 s: 10 runs (5 session
# counts x 2 modes), each a paced window and a flat-out window a third as long, and up to 40 s
# of set-up (model, matmul peak, FLOP count, one calibration up to batch 16). engine.py
# rewrites its JSON after every session count, so a timeout keeps the counts done.
sweep=$(( $(left) - 80 ))
(( sweep > 180 )) && sweep=180
per_run=$(( (sweep - 40) / 10 ))
if want sweep && (( per_run >= 8 )); then
  paced=$(( per_run * 3 / 4 )) flat=$(( per_run / 4 ))
  step "engine sweep" "$sweep" "$PY" benchmarks/engine.py --device cuda --json --fps-for-sessions 8 \
    --sessions 1 2 4 8 16 --seconds "$paced" --saturated-seconds "$flat" --out benchmarks/results/engine_gpu.json
elif want sweep; then
  echo "engine sweep: skipped, ${sweep} s left for it" | tee -a "$SUMMARY"
fi

want wan && step "wan" 120 "$PY" benchmarks/wan_gpu.py --quick --text-encoder small --out benchmarks/results/wan_gpu.json

# One archive of every result this run wrote ($OUT takes at most 8 files); unpack it here with
# tar -xf results.tar (the paths inside are benchmarks/results/...).
(cd "$ROOT" && find benchmarks/results -name '*.json' -newer "$STAMP" -print0 | xargs -0 -r tar -cf "$OUT/results.tar")
tar -tf "$OUT/results.tar" 2>/dev/null | tee -a "$SUMMARY"
echo "total: $(( $(date +%s) - START )) s" | tee -a "$SUMMARY"
echo "== summary"
cat "$SUMMARY"
echo "== end of session.log"
tail -n 60 "$LOG"
