#!/bin/sh
# test-bench-tags.sh: bench-tags's control flow on the simulated driver
# (--quick): every state runs without a failed allocation or free, and the
# table has a row per size.  Timings on simcuda are not looked at.
b=${CUEMM_TOP_BUILDDIR:-.}
echo "1..2"
if test "${CUEMM_TEST_DRIVER:-sim}" = system; then
  for i in 1 2; do echo "ok $i # SKIP runs on the GPU in full (scripts/gpu-suspend.sh)"; done
  exit 0
fi
out=$("$b/bench/bench-tags" --quick 2>&1); rc=$?
echo "$out" | sed 's/^/# /'
if test $rc -eq 0 && echo "$out" | grep -q "^failures 0$"; then echo "ok 1 - bench-tags --quick runs, nothing failed"
else echo "not ok 1 - bench-tags --quick runs, nothing failed (exit $rc)"; fi
n=$(echo "$out" | grep -cE '^[0-9]+[KM]iB( +[0-9.]+){4}$')
if test "$n" -eq 4; then echo "ok 2 - four sizes in four states"; else echo "not ok 2 - four sizes in four states (got $n rows)"; fi
