#!/bin/sh
# gpu-traces.sh: record allocation traces of real PyTorch workloads on the
# GPU machine and replay them through the allocators.
#
#   scripts/gpu-traces.sh OUTDIR
#
# Runs in an unpacked `make dist` tree that is configured and built (as
# scripts/gpu-run.sh leaves it), with Python and torch on the machine:
#   1. scripts/torch-trace.py records its workloads (gpt2, resnet50, serve,
#      vit, unet and lstm) into OUTDIR/traces/torch-*.csv (RMM logs), with
#      its figures in OUTDIR/record.txt;
#   2. tools/cuemm-replay replays each log through cuMemAlloc, the driver's
#      pool, cuemm's stream-ordered path and its deferred path:
#      OUTDIR/replay-NAME.txt (progress in .err), all of them in
#      OUTDIR/replay.txt, the tables together in OUTDIR/summary.txt.
# About 4 to 6 minutes on an H100; the recording stops at 300 s and the
# replays at 540 s from the start, so the whole stays under 10 minutes.
# PYTHON picks the interpreter (default python3); TRACE_ARGS adds options
# to the recorder (--quick for a smoke run), REPLAY_ARGS to the replay
# (--reps R).
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

make tools/cuemm-replay > "$out/replay-build.log" 2>&1 || { tail -n 20 "$out/replay-build.log"; exit 1; }

echo "== recording (scripts/torch-trace.py)"
# Each workload gets 70 s in its own process; the six together about 2
# minutes on an H100.
# shellcheck disable=SC2086
timeout 300 "$py" scripts/torch-trace.py --out "$out/traces" ${TRACE_ARGS:-} 2>&1 | tee "$out/record.txt"
echo "recorded in $(($(date +%s) - start)) s"

set -- "$out"/traces/torch-*.csv
if test ! -f "$1"; then
  echo "gpu-traces: no trace was recorded; see $out/record.txt" >&2
  exit 1
fi
# One replay per trace, each within what is left of 540 s from the start, so
# that a trace too long for the budget costs only its own table.
: > "$out/replay.txt"
: > "$out/summary.txt"
for log in "$@"; do
  left=$((540 - ($(date +%s) - start)))
  name=$(basename "$log" .csv)
  if test $left -lt 10; then
    echo "gpu-traces: no time left to replay $name" | tee -a "$out/replay.txt" >&2
    status=1
    continue
  fi
  echo "== replaying $name (tools/cuemm-replay, at most $left s)"
  # Progress lines go to stderr, apart from the table.
  # shellcheck disable=SC2086
  timeout $left ./tools/cuemm-replay ${REPLAY_ARGS:-} "$log" > "$out/replay-$name.txt" 2> "$out/replay-$name.err"
  rc=$?
  cat "$out/replay-$name.txt"
  cat "$out/replay-$name.txt" >> "$out/replay.txt"
  if test $rc -eq 3; then # replayed, but allocations failed out of memory: the table's oom column
    echo "gpu-traces: cuemm-replay on $name: allocations failed out of memory" | tee -a "$out/replay.txt" >&2
    grep 'out of memory' "$out/replay-$name.err" >&2
  elif test $rc -ne 0; then
    echo "gpu-traces: cuemm-replay on $name: exit $rc" | tee -a "$out/replay.txt" >&2
    tail -n 5 "$out/replay-$name.err" >&2
    status=1
  fi
  if test -s "$out/summary.txt"; then
    sed -n '/^## summary/,$p' "$out/replay-$name.txt" | sed 1,2d >> "$out/summary.txt"
  else
    sed -n '/^## summary/,$p' "$out/replay-$name.txt" >> "$out/summary.txt"
  fi
done
echo
cat "$out/summary.txt"
ls -l "$out/traces"
echo "gpu-traces: done in $(($(date +%s) - start)) s; logs and tables in $out"
exit $status
