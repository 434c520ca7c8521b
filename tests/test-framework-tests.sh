#!/bin/sh
# test-framework-tests.sh: scripts/framework-tests.sh compares two pytest
# runs test by test (made-up `pytest -rA` logs written here), and refuses
# bad arguments clearly.
top_srcdir=${top_srcdir:-$(dirname "$0")/..}
script=$top_srcdir/scripts/framework-tests.sh
py=${CUEMM_PYTHON:-}
if test -z "$py" || test "$py" = ":"; then
  echo "1..0 # SKIP no Python 3.8 or newer found by configure"
  exit 0
fi
PYTHON=$py; export PYTHON
dir=$(mktemp -d "${TMPDIR:-/tmp}/cuemm-fwtests.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
n=0
echo "1..10"
ok() {  # CONDITION-EXIT DESCRIPTION [DETAIL]
  n=$((n + 1))
  if test "$1" -eq 0; then echo "ok $n - $2"; else echo "not ok $n - $2"; test -n "${3:-}" && echo "$3" | sed 's/^/# /'; fi
}
cat > "$dir/tests-cupy-default.log" <<'LOG'
........sF
=========================== short test summary info ============================
PASSED tests/a.py::test_one
PASSED tests/a.py::test_two
PASSED tests/b.py::test_three[float32]
SKIPPED [1] tests/b.py:10: no cuTENSOR
FAILED tests/b.py::test_four - AssertionError
================== 1 failed, 3 passed, 1 skipped in 2.50s ===================
LOG
# The cuemm run cut short by its time limit: no summary, only -v's lines
# (xdist's form), and test_three never reached.
cat > "$dir/tests-cupy-cuemm.log" <<'LOG'
[gw0] [ 20%] PASSED tests/a.py::test_one
[gw1] [ 40%] FAILED tests/a.py::test_two
tests/b.py::test_four PASSED                                             [ 60%]
LOG
out=$(sh "$script" --compare "$dir" cupy 2>&1); rc=$?
test $rc -eq 1; ok $? "a test passing on the default and failing on cuemm: exit 1" "$out"
echo "$out" | grep -q '^passing on both: 1$'; ok $? "one test passes on both" "$out"
echo "$out" | grep -q '^passing on the default, not on cuemm: 1$'; ok $? "one lost: the one that failed" "$out"
echo "$out" | grep -q '^  FAILED   tests/a.py::test_two$'; ok $? "the lost test is named with its state on cuemm" "$out"
echo "$out" | grep -q '^passing on the default, not reached on cuemm (the run was cut short): 1$'
ok $? "a test the cut-short run never reached is not counted lost" "$out"
echo "$out" | grep -q '^  FAILED   tests/b.py::test_four$'; ok $? "a test gained on cuemm is named with its state on the default" "$out"
grep -q "default allocator: =* 1 failed, 3 passed, 1 skipped in 2.50s =*; cuemm: no summary line (cut short?), 3 tests seen" "$dir/summary.md"
ok $? "pytest's summary line, or how many tests a cut-short run saw, goes to summary.md" "$(cat "$dir/summary.md")"
cp "$dir/tests-cupy-default.log" "$dir/tests-cupy-cuemm.log"
out=$(sh "$script" --compare "$dir" cupy 2>&1); rc=$?
test $rc -eq 0; ok $? "the same results on both: exit 0" "$out"
out=$(sh "$script" jax "$dir" 10 x.py 2>&1); rc=$?
test $rc -eq 2 && echo "$out" | grep -q "unknown framework 'jax'"; ok $? "an unknown framework is refused (exit 2)" "$out"
out=$(sh "$script" cupy "$dir" soon x.py 2>&1); rc=$?
test $rc -eq 2 && echo "$out" | grep -q "SECONDS must be a number, not 'soon'"; ok $? "a time that is no number is refused (exit 2)" "$out"
