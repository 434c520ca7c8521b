#!/bin/sh
# gpu-managed.sh OUTDIR: the proof on a GPU of managed and system-allocated
# memory, in a cuemm tree unpacked from `make dist`, configured and built
# (as scripts/gpu-run.sh run leaves it: ./configure && make).  Builds
# bench-managed and test-managed if needed, then
#   OUTDIR/gpu.txt              the GPU, driver and host CPU
#   OUTDIR/bench-managed.txt    bench/bench-managed: the managed pair against
#                               the device pool's, the first access with and
#                               without prefetch, the system-memory detection
#   OUTDIR/test-managed.log     tests/test-managed on the system's driver
# Takes under a minute: the benchmark 10 to 30 seconds (stopped by
# `timeout` at 2 minutes), the test seconds.  Exit status: 0 when the
# test passed and the benchmark ran to its end (a target missed is
# reported in its output, not here).
set -u
out=${1:?usage: scripts/gpu-managed.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.." || exit 1
test -f Makefile || { echo "gpu-managed: run ./configure && make in $(pwd) first" >&2; exit 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv 2>&1 | tee "$out/gpu.txt"
{ grep -m1 'model name' /proc/cpuinfo; echo "cpus: $(nproc)"; } 2>&1 | tee -a "$out/gpu.txt"
make bench/bench-managed tests/test-managed > "$out/build.log" 2>&1 || { tail -n 20 "$out/build.log"; exit 1; }
status=0
timeout 120 ./bench/bench-managed 2>&1 | tee "$out/bench-managed.txt"
grep -q '^# targets:' "$out/bench-managed.txt" || { echo "gpu-managed: bench-managed did not finish"; status=1; }
# The test program on the system's libcuda (the checks needing simcuda skip).
CUEMM_TEST_DRIVER=system ./tests/test-managed > "$out/test-managed.log" 2>&1 || status=1
grep -E '^(not ok|Bail out)' "$out/test-managed.log" | head -n 40
echo "test-managed: $(grep -c '^ok' "$out/test-managed.log") ok, $(grep -c '^not ok' "$out/test-managed.log") not ok," \
  "$(grep -c '# SKIP' "$out/test-managed.log") skipped"
exit $status
