#!/bin/sh
# growth-run.sh: the pool's growth in pieces and its hard limit, on a GPU.
#
#   scripts/growth-run.sh OUTDIR
#       in the top directory of an unpacked `make dist` tarball, configured
#       and built (scripts/gpu-run.sh run leaves one in /tmp/cuemm-gpu.*):
#       runs the pool's tests against the system's driver (test-piece,
#       test-pool-growth, test-pool, test-pool-ipc), then bench-pool twice
#       with the piece size chosen by measurement and once pinned to 1 GiB
#       (CUEMM_POOL_PIECE=1GiB), and writes to OUTDIR the logs, each run's
#       output, and growth-summary.txt: per run, the growth table (pool vs
#       cuMemAlloc for 64 MiB .. 8 GiB, the piece size chosen) and the
#       cuMemCreate time per piece size beside the pool's own record.
#       About 2 to 3 minutes on an H100 (each bench-pool run is bounded to
#       150 s).
#
# GROWTH_DRIVER=sim runs the same on the simulated driver (bench-pool
# --quick), to try the script where there is no GPU.
set -u
out=${1:-}
test -n "$out" || { echo "usage: scripts/growth-run.sh OUTDIR" >&2; exit 2; }
test -f configure && test -f Makefile || { echo "growth-run: run it in a configured cuemm tree" >&2; exit 2; }
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)
driver=${GROWTH_DRIVER:-system}
quick=
if test "$driver" = sim; then
  LD_LIBRARY_PATH="$(pwd)/tests/simcuda/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export LD_LIBRARY_PATH
  quick=--quick
fi
status=0
{ nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv 2>&1 || true; } > "$out/gpu.txt"
date -u > "$out/when.txt"

make bench/bench-pool > "$out/build.log" 2>&1 || { tail -n 30 "$out/build.log"; exit 1; }
# One test at a time: programs sizing allocations from cuMemGetInfo on one
# GPU at once would measure each other.
make -j1 check CUEMM_TEST_DRIVER="$driver" \
  TESTS="tests/test-piece tests/test-pool-growth tests/test-pool tests/test-pool-ipc" > "$out/check.log" 2>&1 ||
  status=1
grep -E '^# (TOTAL|PASS|SKIP|FAIL|ERROR)' "$out/check.log"
for t in test-piece test-pool-growth test-pool test-pool-ipc; do
  cp "tests/$t.log" "$out/$t.log" 2>/dev/null
done
test $status -eq 0 || grep -B2 -A8 '^not ok' tests/test-piece.log tests/test-pool*.log | head -n 80

run() {
  name=$1
  shift
  echo "== bench-pool $name"
  start=$(date +%s)
  env "$@" timeout 150 ./bench/bench-pool $quick > "$out/bench-pool.$name.txt" 2>&1 || {
    echo "bench-pool $name failed (exit $?)"
    tail -n 5 "$out/bench-pool.$name.txt"
    status=1
  }
  echo "   $(($(date +%s) - start)) s"
  {
    echo "#### bench-pool $name"
    head -n 1 "$out/bench-pool.$name.txt"
    sed -n '/^## growth by N/,/^$/p' "$out/bench-pool.$name.txt"
    sed -n '/^## cuMemCreate of one piece/,/^# cheapest/p' "$out/bench-pool.$name.txt"
    echo
  } >> "$out/growth-summary.txt"
}
: > "$out/growth-summary.txt"
run auto1 CUEMM_POOL_PIECE=0
run auto2 CUEMM_POOL_PIECE=0
run pinned-1GiB CUEMM_POOL_PIECE=1GiB
cat "$out/growth-summary.txt"
exit $status
