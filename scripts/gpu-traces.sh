#!/bin/sh
# gpu-traces.sh: record allocation traces of real PyTorch workloads on the
# GPU machine and replay them through the allocators.
#
#   scripts/gpu-traces.sh OUTDIR
#
# Runs in an unpacked `make dist` tree that is configured and built (as
# scripts/gpu-run.sh leaves it), with Python and torch on the machine:
#   1. scripts/torch-trace.py records the gpt2, resnet50 and serve workloads
#      into OUTDIR/traces/torch-*.csv (RMM logs), with its figures in
#      OUTDIR/record.txt;
#   2. bench/bench-replay replays the logs through cuMemAlloc, the driver's
#      pool, cuemm's stream-ordered path (when the library has it) and its
#      deferred path: OUTDIR/replay.txt, the table alone in
#      OUTDIR/summary.txt.
# About 3 to 4 minutes on an H100; each step has a time limit, so the whole
# stays under 6.  PYTHON picks the interpreter (default python3);
# TRACE_ARGS adds options to the recorder (--quick for a smoke run),
# REPLAY_ARGS to the replay (--reps R).
set -u
out=${1:-}
test -n "$out" || { echo "usage: scripts/gpu-traces.sh OUTDIR" >&2; exit 2; }
test -f scripts/torch-trace.py && test -f Makefile ||
  { echo "gpu-traces: run me in the configured cuemm tree (no Makefile or scripts/torch-trace.py here)" >&2; exit 2; }
mkdir -p "$out/traces" || exit 1
out=$(cd "$out" && pwd)
py=${PYTHON:-python3}
start=$(date +%s)
status=0

{ nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv
  grep -m1 'model name' /proc/cpuinfo; echo "cpus: $(nproc)"
  "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
} > "$out/gpu.txt" 2>&1
cat "$out/gpu.txt"

make bench > "$out/bench-build.log" 2>&1 || { tail -n 20 "$out/bench-build.log"; exit 1; }

echo "== recording (scripts/torch-trace.py)"
# shellcheck disable=SC2086
timeout 210 "$py" scripts/torch-trace.py --out "$out/traces" ${TRACE_ARGS:-} 2>&1 | tee "$out/record.txt"
rc=$(sed -n 's/^  [a-z0-9]*: exit \([0-9]*\) after.*/\1/p' "$out/record.txt" | sort -u | tr '\n' ' ')
echo "recorder exits: ${rc:-none} ($(($(date +%s) - start)) s so far)"

set -- "$out"/traces/torch-*.csv
if test ! -f "$1"; then
  echo "gpu-traces: no trace was recorded; see $out/record.txt" >&2
  exit 1
fi
echo "== replaying $# trace(s) (bench/bench-replay)"
# Progress lines go to stderr, kept apart from the table.
# shellcheck disable=SC2086
timeout 240 ./bench/bench-replay ${REPLAY_ARGS:-} "$@" > "$out/replay.txt" 2> "$out/replay-progress.txt" ||
  status=1
cat "$out/replay.txt"
test $status -eq 0 || { echo "gpu-traces: bench-replay failed:" >&2; tail -n 5 "$out/replay-progress.txt" >&2; }
sed -n '/^## summary/,$p' "$out/replay.txt" > "$out/summary.txt"
ls -l "$out/traces"
echo "gpu-traces: done in $(($(date +%s) - start)) s; logs and tables in $out"
exit $status
