#!/bin/sh
# test-broken-rule.sh: the suite can fail.  tests/test-stream-random-broken
# is tests/test-stream-random linked against a copy of the library built
# with CUEMM_BREAK_DELAYED_FREE, where a stream's frees count as done at
# once: blocks freed on one stream then serve others while work queued
# before their free may still use them.  That test must catch it (simcuda's
# early-reuse detector, in queue mode, or the data it reads back); this
# script passes when it does, and fails when the broken build passes.
b=${CUEMM_TOP_BUILDDIR:-.}
echo "1..2"
if test "${CUEMM_TEST_DRIVER:-sim}" = system; then
  echo "ok 1 # SKIP needs simcuda's queue mode and early-reuse detector"
  echo "ok 2 # SKIP needs simcuda's queue mode and early-reuse detector"
  exit 0
fi
out=$("$b/tests/test-stream-random-broken" 2>&1); rc=$?
echo "$out" | grep -E '^(not ok|# )' | head -20 | sed 's/^/# broken: /'
if test $rc -ne 0; then
  echo "ok 1 - with the rule broken, test-stream-random fails (exit $rc)"
else
  echo "not ok 1 - with the rule broken, test-stream-random still passes"
fi
n=$(echo "$out" | grep '^not ok' | grep -ciE 'handed out while|read back its own data')
if test "$n" -gt 0; then
  echo "ok 2 - and says why: $n checks of early reuse or data failed"
else
  echo "not ok 2 - no check of early reuse or data failed"
fi
