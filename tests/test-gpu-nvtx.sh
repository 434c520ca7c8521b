#!/bin/sh
# test-gpu-nvtx.sh: scripts/gpu-nvtx.sh reads memcheck's logs right
# (made-up logs in tests/fixtures/compute-sanitizer, in the format
# compute-sanitizer writes), and tests/gpu-nvtx-oob, the program it runs
# on the GPU, starts here: on simcuda, which loads no modules, it skips
# (exit 77); on the system's driver it runs its kernel (exit 0), with no
# tool attached to tell anything of it.
top_srcdir=${top_srcdir:-$(dirname "$0")/..}
script=$top_srcdir/scripts/gpu-nvtx.sh
fx=$top_srcdir/tests/fixtures/compute-sanitizer
prog=${CUEMM_TOP_BUILDDIR:-.}/tests/gpu-nvtx-oob
n=0
echo "1..4"
check() {
  n=$((n + 1))
  got=$(sh "$script" --parse "$fx/$1")
  if test "$got" = "$2"; then
    echo "ok $n - $3"
  else
    echo "not ok $n - $3"
    echo "#        got: $got"
    echo "#   expected: $2"
  fi
}
check nvtx-reported.txt "reported" "an invalid global write in the log: reported"
check nvtx-clean.txt "not reported" "the kernel ran and memcheck said nothing: not reported"
check nvtx-skipped.txt "did not run" "a program that skipped: did not run"
n=$((n + 1))
out=$("$prog" 2>&1)
rc=$?
if test "${CUEMM_TEST_DRIVER:-sim}" = system; then
  if test $rc -eq 0 && echo "$out" | grep -q '^gpu-nvtx-oob: launched'; then
    echo "ok $n - gpu-nvtx-oob loads its PTX and runs its kernel on the system's driver"
  else
    echo "not ok $n - gpu-nvtx-oob loads its PTX and runs its kernel on the system's driver (exit $rc)"
    echo "$out" | sed 's/^/# /'
  fi
elif test $rc -eq 77 && echo "$out" | grep -q '^gpu-nvtx-oob: skipped: the driver cannot load modules'; then
  echo "ok $n - gpu-nvtx-oob starts on simcuda and skips, saying why (exit 77)"
else
  echo "not ok $n - gpu-nvtx-oob starts on simcuda and skips, saying why (exit $rc)"
  echo "$out" | sed 's/^/# /'
fi
