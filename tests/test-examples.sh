#!/bin/sh
# test-examples.sh: the examples build and run, and say what they should;
# none shows the deprecated module names (cuemm_lib, cuemm_torch,
# cuemm_cupy, cuemm_numba) where the package's (cuemm.torch, ...) are meant.
b=${CUEMM_TOP_BUILDDIR:-.}
src=${top_srcdir:-$(dirname "$0")/..}
echo "1..7"
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
out=$("$b/examples/ipc_share" 2>&1); rc=$?
echo "$out" | sed 's/^/# /'
if test $rc -eq 0; then echo "ok 5 - ipc_share runs"; else echo "not ok 5 - ipc_share runs (exit $rc)"; fi
if echo "$out" | grep -q "consumer changed 65536 bytes of the slice, 0 bytes are not as expected" &&
   echo "$out" | grep -q "consumer: opened 65536 bytes at offset 12388 from pid [0-9]*, 0 wrong"; then
  echo "ok 6 - ipc_share sees data both ways"
else
  echo "not ok 6 - ipc_share sees data both ways"
fi
# A name followed by a letter, a digit or "_" is another (cuemm_torch_alloc,
# the adapters' entry point, is not the module cuemm_torch).
old=$(grep -n -E '(^|[^A-Za-z0-9_.])cuemm_(lib|torch|cupy|numba)([^A-Za-z0-9_]|$)' "$src"/examples/* 2>/dev/null)
if test -z "$old"; then
  echo "ok 7 - no example names a deprecated module (cuemm_lib, cuemm_torch, cuemm_cupy, cuemm_numba)"
else
  echo "$old" | sed 's/^/# /'
  echo "not ok 7 - no example names a deprecated module (cuemm_lib, cuemm_torch, cuemm_cupy, cuemm_numba): use cuemm.torch, ..."
fi
