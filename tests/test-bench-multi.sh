#!/bin/sh
# test-bench-multi.sh: bench-multi's control flow on the simulated driver
# (--quick): with two devices every configuration runs and is reported, each
# device's manager counted its allocations and none failed; with one device
# (SIMCUDA_DEVICES=1) it says why it stops and exits 0.  Timings on simcuda
# mean nothing and are not looked at (scripts/gpu-multi.sh runs it in full).
b=${CUEMM_TOP_BUILDDIR:-.}
echo "1..5"
if test "${CUEMM_TEST_DRIVER:-sim}" = system; then
  for i in 1 2 3 4 5; do echo "ok $i # SKIP runs on the GPU in full (scripts/gpu-multi.sh)"; done
  exit 0
fi
out=$("$b/bench/bench-multi" --quick 2>&1); rc=$?
echo "$out" | sed 's/^/# /'
if test $rc -eq 0; then echo "ok 1 - bench-multi --quick runs"; else echo "not ok 1 - bench-multi --quick runs (exit $rc)"; fi
n=$(echo "$out" | grep -cE '^(device 0 alone|device 1 alone|devices 0 and 1 at once) +[0-9.]+ +[0-9.]+x')
if test "$n" -eq 3; then echo "ok 2 - a row for each device alone and both at once"; else echo "not ok 2 - three rows (got $n)"; fi
if echo "$out" | grep -qE '^both devices / one device \(cuemm\): [0-9.]+x \(target at least 1.9x\)'; then
  echo "ok 3 - the ratio against the target"
else
  echo "not ok 3 - the ratio against the target"
fi
n=$(echo "$out" | grep -cE '^device [01]: held [0-9.]+ MiB, peak held [0-9.]+ MiB, [1-9][0-9]* allocations, 0 failed$')
if test "$n" -eq 2; then echo "ok 4 - both devices' managers allocated, none failed"; else echo "not ok 4 - both managers (got $n)"; fi
out=$(SIMCUDA_DEVICES=1 "$b/bench/bench-multi" --quick 2>&1); rc=$?
echo "$out" | sed 's/^/# /'
if test $rc -eq 0 && echo "$out" | grep -q "skipped: it compares two devices driven at once with one, and this machine shows 1 device "; then
  echo "ok 5 - with one device it says why it stops"
else
  echo "not ok 5 - with one device it says why it stops (exit $rc)"
fi
