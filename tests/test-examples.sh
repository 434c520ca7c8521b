#!/bin/sh
# test-examples.sh: the examples build and run, and say what they should.
b=${CUEMM_TOP_BUILDDIR:-.}
echo "1..4"
out=$("$b/examples/quickstart" 2>&1); rc=$?
echo "$out" | sed 's/^/# /'
if test $rc -eq 0; then echo "ok 1 - quickstart runs"; else echo "not ok 1 - quickstart runs (exit $rc)"; fi
if echo "$out" | grep -q "inside the defer scope: *live  0 .*pending 32"; then
  echo "ok 2 - quickstart holds 32 frees inside its defer scope"
else
  echo "not ok 2 - quickstart holds 32 frees inside its defer scope"
fi
out=$("$b/examples/jit_launch" 2>&1); rc=$?
echo "$out" | sed 's/^/# /'
if test $rc -eq 0; then echo "ok 3 - jit_launch runs"; else echo "not ok 3 - jit_launch runs (exit $rc)"; fi
if echo "$out" | grep -q "400 temporaries: 0 released inside the loop, 400 after it"; then
  echo "ok 4 - jit_launch releases no temporary inside its loop"
else
  echo "not ok 4 - jit_launch releases no temporary inside its loop"
fi
