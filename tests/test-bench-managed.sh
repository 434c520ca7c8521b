#!/bin/sh
# test-bench-managed.sh: bench-managed's control flow on the simulated
# driver (--quick): every part runs, the checks inside it pass (the copy
# reads what the host wrote), and the report has every table.  Timings on
# simcuda mean nothing and are not looked at.
b=${CUEMM_TOP_BUILDDIR:-.}
echo "1..6"
if test "${CUEMM_TEST_DRIVER:-sim}" = system; then
  for i in 1 2 3 4 5 6; do echo "ok $i # SKIP runs on the GPU in full (scripts/gpu-managed.sh)"; done
  exit 0
fi
out=$(SIMCUDA_PAGEABLE=1 "$b/bench/bench-managed" --quick 2>&1); rc=$?
echo "$out" | sed 's/^/# /'
if test $rc -eq 0; then echo "ok 1 - bench-managed --quick runs"; else echo "not ok 1 - bench-managed --quick runs (exit $rc)"; fi
n=$(echo "$out" | grep -cE '^ +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+x$')
if test "$n" -eq 9; then echo "ok 2 - nine sizes of pairs, 256 B .. 16 MiB"; else echo "not ok 2 - nine sizes of pairs (got $n rows)"; fi
if echo "$out" | grep -q "cuMemAllocManaged calls"; then echo "ok 3 - the managed pool's figures"; else echo "not ok 3 - the managed pool's figures"; fi
if echo "$out" | grep -q "^(c) prefetch + copy"; then echo "ok 4 - the first-access table"; else echo "not ok 4 - the first-access table"; fi
if echo "$out" | grep -q "^PAGEABLE_MEMORY_ACCESS (CUEMM_MEMORY=system possible) *1$"; then
  echo "ok 5 - the detection reads SIMCUDA_PAGEABLE=1"
else
  echo "not ok 5 - the detection reads SIMCUDA_PAGEABLE=1"
fi
if echo "$out" | grep -q "system manager: created; 1 MiB of malloc memory copied by the GPU reads 7"; then
  echo "ok 6 - a system-memory manager works where the detection says so"
else
  echo "not ok 6 - a system-memory manager works where the detection says so"
fi
