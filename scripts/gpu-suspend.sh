#!/bin/sh
# gpu-suspend.sh: suspend and resume on the GPU machine, with one summary.
#
#   scripts/gpu-suspend.sh OUTDIR [--quick]
#
# Runs in a configured and built cuemm tree (./configure && make, or an
# unpacked `make dist` tarball built so), with PyTorch in the Python it
# uses (PYTHON, default python3).  It loads .libs/libcuemm.so.0
# (CUEMM_LIBRARY) and the package from python/ (PYTHONPATH); no install is
# needed.
#   1. bench/bench-suspend (built with `make bench/bench-suspend` when it is
#      not yet): suspend and resume of 20 GiB against the driver's own
#      calls, copy bandwidth against a plain pinned copy, memory given
#      back, the pair cost after a cycle: OUTDIR/bench-suspend.txt;
#   2. scripts/suspend-proof.py: training suspended while a second process
#      takes 90% of the GPU, losses equal to an uninterrupted run; ten
#      rounds of inference and training taking turns; a CUDA graph across a
#      suspension: OUTDIR/suspend-proof.md, .json, suspend-*.log;
#   3. scripts/tms-compare.py: torch_memory_saver against cuemm (allocation
#      cost, pause/resume of 20 GiB with and without contents, memory given
#      back): OUTDIR/tms-compare.md, .json, tms-*.log.  torch_memory_saver
#      is used where importable; else TMS_PACKAGE may name its wheel or
#      sdist, installed offline into OUTDIR/tms-site first (an sdist builds
#      its C++ library, which needs the CUDA headers); where neither works
#      the comparison says so and measures cuemm alone.
# The tables go to stdout and OUTDIR/summary.md.  About 3 to 5 minutes on an
# H100 (--quick: about 1.5).  Exit status 0 when every part ran and every
# check held.
set -u
out=${1:-}
test -n "$out" || { echo "usage: scripts/gpu-suspend.sh OUTDIR [--quick]" >&2; exit 2; }
quick=
test "${2:-}" = "--quick" && quick=--quick
b=${CUEMM_BUILDDIR:-.}
b=$(cd "$b" && pwd)
py=${PYTHON:-python3}
src=$(cd "$(dirname "$0")/.." && pwd)
test -f "$b/.libs/libcuemm.so.0" ||
  { echo "gpu-suspend: no $b/.libs/libcuemm.so.0; run ./configure && make first" >&2; exit 2; }
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)
CUEMM_LIBRARY=$b/.libs/libcuemm.so.0; export CUEMM_LIBRARY
PYTHONPATH=$src/python${PYTHONPATH:+:$PYTHONPATH}; export PYTHONPATH
start=$(date +%s)
status=0
results=

note() { results="$results
| $1 | $2 |"; }

{
  echo "date: $(date -u)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader 2>&1
  grep -m1 'model name' /proc/cpuinfo; echo "cpus: $(nproc)"
  "$py" -c '
import sys, importlib.metadata as md
print("python", sys.version.split()[0])
for d in ("torch", "torch_memory_saver"):
    try: print(d, md.version(d))
    except Exception: print(d, "absent")
'
  echo "cuemm: $CUEMM_LIBRARY"
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt"

echo "== bench-suspend"
if test ! -x "$b/bench/bench-suspend"; then
  (cd "$b" && make bench/bench-suspend) > "$out/bench-suspend-build.log" 2>&1 ||
    echo "(bench/bench-suspend could not be built: $out/bench-suspend-build.log)"
fi
if test -x "$b/bench/bench-suspend"; then
  if timeout 240 "$b/bench/bench-suspend" $quick > "$out/bench-suspend.txt" 2>&1; then
    note bench-suspend ok
  else
    note bench-suspend "FAILED (exit $?)"; status=1
  fi
  cat "$out/bench-suspend.txt"
else
  note bench-suspend "not built"
fi

echo "== suspend-proof"
if timeout 420 "$py" "$src/scripts/suspend-proof.py" "$out" $quick > "$out/suspend-proof.out" 2>&1; then
  note suspend-proof ok
else
  note suspend-proof "FAILED (exit $?)"; status=1
fi
tail -n 40 "$out/suspend-proof.out"

echo "== tms-compare"
tms_path=
if ! "$py" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("torch_memory_saver") is None)' 2>/dev/null &&
   test -n "${TMS_PACKAGE:-}"; then
  if "$py" -m pip install --no-index --no-deps --no-build-isolation --target "$out/tms-site" "$TMS_PACKAGE" \
       > "$out/tms-install.log" 2>&1; then
    tms_path=$out/tms-site
  else
    echo "(torch_memory_saver from $TMS_PACKAGE did not install: $out/tms-install.log)"
  fi
fi
if PYTHONPATH=${tms_path:+$tms_path:}$PYTHONPATH timeout 420 "$py" "$src/scripts/tms-compare.py" "$out" $quick \
     > "$out/tms-compare.out" 2>&1; then
  note tms-compare ok
else
  note tms-compare "FAILED (exit $?)"; status=1
fi
tail -n 40 "$out/tms-compare.out"

end=$(date +%s)
{
  echo "# gpu-suspend summary"
  echo
  cat "$out/machine.txt"
  echo
  test -f "$out/bench-suspend.txt" && { echo "## bench-suspend"; echo; echo '```'; cat "$out/bench-suspend.txt"; echo '```'; echo; }
  test -f "$out/suspend-proof.md" && cat "$out/suspend-proof.md"
  echo
  test -f "$out/tms-compare.md" && cat "$out/tms-compare.md"
  echo
  echo "| step | result |"
  echo "|---|---|$results"
  echo
  echo "took $((end - start)) s"
} > "$out/summary.md"
echo
echo "==== summary ($out/summary.md)"
cat "$out/summary.md"
exit $status
