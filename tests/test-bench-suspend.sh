#!/bin/sh
# test-bench-suspend.sh: bench-suspend's control flow on the simulated
# driver (--quick): every part runs, the kept block reads back what was
# written (checked inside), and the report has every table.  Timings on
# simcuda mean nothing and are not looked at.
b=${CUEMM_TOP_BUILDDIR:-.}
echo "1..4"
if test "${CUEMM_TEST_DRIVER:-sim}" = system; then
  for i in 1 2 3 4; do echo "ok $i # SKIP runs on the GPU in full (scripts/gpu-suspend.sh)"; done
  exit 0
fi
out=$("$b/bench/bench-suspend" --quick 2>&1); rc=$?
echo "$out" | sed 's/^/# /'
if test $rc -eq 0; then echo "ok 1 - bench-suspend --quick runs"; else echo "not ok 1 - bench-suspend --quick runs (exit $rc)"; fi
if test "$(echo "$out" | grep -c "^  resume vs cuMemCreate+cuMemMap+cuMemSetAccess")" -eq 3; then echo "ok 2 - the suspend/resume table, three cadences"; else echo "not ok 2 - the suspend/resume table, three cadences"; fi
if echo "$out" | grep -q "^suspended  *0$"; then echo "ok 3 - nothing of the pool held while suspended"; else echo "not ok 3 - nothing of the pool held while suspended"; fi
n=$(echo "$out" | grep -cE '^[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$')
if test "$n" -eq 4; then echo "ok 4 - four sizes of pairs, after a cycle and never suspended"; else echo "not ok 4 - four sizes of pairs, after a cycle and never suspended (got $n rows)"; fi
