#!/bin/sh
# gpu-suspend.sh OUTDIR [SIZE]: the proof on a GPU of cuemm_pool_suspend and
# cuemm_pool_resume, in a cuemm tree unpacked from `make dist`, configured
# and built (as scripts/gpu-run.sh run leaves it: ./configure && make).
# Builds bench-suspend and test-suspend if needed, then
#   OUTDIR/gpu.txt               the GPU, driver and host CPU
#   OUTDIR/bench-suspend.N.txt   bench/bench-suspend --size SIZE (default
#                                20G), three runs: suspend/resume against
#                                the driver's unmap/release and
#                                create/map/access of the same bytes, the
#                                KEEP copy's bandwidth against a plain pinned
#                                copy, memory given back, the stream pair
#   OUTDIR/test-suspend.log      tests/test-suspend on the system's driver
#                                (the fault-injection checks skip)
# Needs 20 GiB of device memory free for the default size and about 40 GiB
# of host memory (the staging buffer and the plain copy's buffer).  Takes a
# few minutes.  Exit status 0 when the test passed and every run finished.
set -u
out=${1:?usage: scripts/gpu-suspend.sh OUTDIR [SIZE]}
size=${2:-20G}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.." || exit 1
test -f Makefile || { echo "gpu-suspend: run ./configure && make in $(pwd) first" >&2; exit 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv 2>&1 | tee "$out/gpu.txt"
{ grep -m1 'model name' /proc/cpuinfo; echo "cpus: $(nproc)"; } 2>&1 | tee -a "$out/gpu.txt"
make bench/bench-suspend tests/test-suspend > "$out/build.log" 2>&1 || { tail -n 20 "$out/build.log"; exit 1; }
status=0
for n in 1 2 3; do
  echo "== bench-suspend --size $size, run $n"
  timeout 600 ./bench/bench-suspend --size "$size" 2>&1 | tee "$out/bench-suspend.$n.txt"
  grep -q '^(4) ' "$out/bench-suspend.$n.txt" || { echo "gpu-suspend: run $n did not finish"; status=1; }
done
CUEMM_TEST_DRIVER=system timeout 600 ./tests/test-suspend > "$out/test-suspend.log" 2>&1 || status=1
grep -E '^(not ok|Bail out)' "$out/test-suspend.log" | head -n 40
echo "test-suspend: $(grep -c '^ok' "$out/test-suspend.log") ok, $(grep -c '^not ok' "$out/test-suspend.log") not ok," \
  "$(grep -c '# SKIP' "$out/test-suspend.log") skipped"
exit $status
