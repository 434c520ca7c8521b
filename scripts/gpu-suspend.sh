#!/bin/sh
# gpu-suspend.sh OUTDIR [--quick] [SIZE]: the proof on a GPU of suspend and
# resume, in the C library and under PyTorch, with one summary.
#
# Runs in a cuemm tree unpacked from `make dist`, configured and built (as
# scripts/gpu-run.sh run leaves it: ./configure && make), or a configured
# checkout; CUEMM_BUILDDIR names the build tree when it is not this one.
# PyTorch in the Python it uses (PYTHON, default python3) for steps 3-4.
#   1. OUTDIR/gpu.txt              the GPU, driver, host CPU, Python packages
#   2. OUTDIR/bench-suspend.N.txt  bench/bench-suspend --size SIZE (default
#                                  20G; --quick: 2G, one run), three runs:
#                                  suspend/resume against the driver's
#                                  unmap/release and create/map/access of
#                                  the same bytes, the KEEP copy's bandwidth
#                                  against a plain pinned copy, memory given
#                                  back, the stream pair
#      OUTDIR/bench-tags.txt       bench/bench-tags: PyTorch's entry points'
#                                  alloc+free pair without tags, with tags
#                                  made, inside a tag, after a cycle
#      OUTDIR/test-suspend.log     tests/test-suspend on the system's driver
#                                  (the fault-injection checks skip)
#   3. scripts/suspend-proof.py: training suspended while a second process
#      takes 90% of the GPU, losses equal to an uninterrupted run step for
#      step; ten rounds of inference and training taking turns; a CUDA graph
#      across a suspension: OUTDIR/suspend-proof.md, .json, suspend-*.log
#   4. scripts/tms-compare.py: torch_memory_saver against cuemm (allocation
#      cost, pause/resume of SIZE with and without contents, memory given
#      back): OUTDIR/tms-compare.md, .json, tms-*.log.  torch_memory_saver
#      is used where importable; else TMS_PACKAGE may name its wheel or
#      sdist, installed offline into OUTDIR/tms-site first (an sdist builds
#      its C++ library, which needs the CUDA headers); where neither works
#      the comparison says so and measures cuemm alone.
# The package is loaded from python/ with libcuemm from the build
# (CUEMM_LIBRARY, PYTHONPATH); no install is needed.  The tables go to
# stdout and OUTDIR/summary.md.  Needs 20 GiB of device memory free for
# the default size and about 40 GiB of host memory (the staging buffers and
# the plain copy's).  About 6 minutes on an H100 (--quick: about 2).  Exit
# status 0 when every step finished and every check held.
set -u
out=${1:-}
test -n "$out" || { echo "usage: scripts/gpu-suspend.sh OUTDIR [--quick] [SIZE]" >&2; exit 2; }
shift
quick=
size=
for a in "$@"; do
  case $a in
    --quick) quick=--quick ;;
    *) size=$a ;;
  esac
done
runs="1 2 3"
if test -n "$quick"; then
  size=${size:-2G}
  runs=1
fi
size=${size:-20G}
gib=$(echo "$size" | sed -n 's/^\([0-9][0-9]*\)[Gg].*$/\1/p')
gib=${gib:-20}
src=$(cd "$(dirname "$0")/.." && pwd)
b=${CUEMM_BUILDDIR:-$src}
b=$(cd "$b" && pwd)
py=${PYTHON:-python3}
test -f "$b/Makefile" || { echo "gpu-suspend: run ./configure && make in $b first" >&2; exit 2; }
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)
start=$(date +%s)
status=0
results=
note() { results="$results
| $1 | $2 |"; }

{
  echo "date: $(date -u)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv 2>&1
  grep -m1 'model name' /proc/cpuinfo; echo "cpus: $(nproc)"
  "$py" -c '
import sys, importlib.metadata as md
print("python", sys.version.split()[0])
for d in ("torch", "torch_memory_saver"):
    try: print(d, md.version(d))
    except Exception: print(d, "absent")
' 2>&1
} > "$out/gpu.txt" 2>&1
cat "$out/gpu.txt"

# ---- 2. the C library: bench-suspend and test-suspend -------------------------
(cd "$b" && make bench/bench-suspend tests/test-suspend) > "$out/build.log" 2>&1 ||
  { tail -n 20 "$out/build.log"; echo "gpu-suspend: bench-suspend or test-suspend did not build"; status=1; }
if test -x "$b/bench/bench-suspend"; then
  for n in $runs; do
    echo "== bench-suspend --size $size, run $n"
    timeout 600 "$b/bench/bench-suspend" --size "$size" 2>&1 | tee "$out/bench-suspend.$n.txt"
    if grep -q '^(4) ' "$out/bench-suspend.$n.txt"; then
      note "bench-suspend run $n" ok
    else
      echo "gpu-suspend: run $n did not finish"; note "bench-suspend run $n" "DID NOT FINISH"; status=1
    fi
  done
fi
(cd "$b" && make bench/bench-tags) >> "$out/build.log" 2>&1
if test -x "$b/bench/bench-tags"; then
  echo "== bench-tags"
  if timeout 120 "$b/bench/bench-tags" $quick 2>&1 | tee "$out/bench-tags.txt" | tail -n 7 &&
     grep -q '^failures 0$' "$out/bench-tags.txt"; then
    note bench-tags ok
  else
    note bench-tags FAILED; status=1
  fi
fi
if test -x "$b/tests/test-suspend"; then
  (cd "$b" && CUEMM_TEST_DRIVER=system timeout 600 ./tests/test-suspend) > "$out/test-suspend.log" 2>&1 || status=1
  grep -E '^(not ok|Bail out)' "$out/test-suspend.log" | head -n 40
  t="$(grep -c '^ok' "$out/test-suspend.log") ok, $(grep -c '^not ok' "$out/test-suspend.log") not ok,"
  t="$t $(grep -c '# SKIP' "$out/test-suspend.log") skipped"
  echo "test-suspend: $t"
  note test-suspend "$t"
fi

# ---- 3-4. PyTorch ---------------------------------------------------------------
if test -f "$b/.libs/libcuemm.so.0"; then
  CUEMM_LIBRARY=$b/.libs/libcuemm.so.0; export CUEMM_LIBRARY
  PYTHONPATH=$src/python${PYTHONPATH:+:$PYTHONPATH}; export PYTHONPATH

  echo "== suspend-proof"
  if timeout 420 "$py" "$src/scripts/suspend-proof.py" "$out" $quick > "$out/suspend-proof.out" 2>&1; then
    note suspend-proof ok
  else
    note suspend-proof "FAILED (exit $?)"; status=1
  fi
  tail -n 40 "$out/suspend-proof.out"

  echo "== tms-compare"
  tms_path=
  if ! "$py" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("torch_memory_saver") is None)' \
       2>/dev/null && test -n "${TMS_PACKAGE:-}"; then
    if "$py" -m pip install --no-index --no-deps --no-build-isolation --target "$out/tms-site" "$TMS_PACKAGE" \
         > "$out/tms-install.log" 2>&1; then
      tms_path=$out/tms-site
    else
      echo "(torch_memory_saver from $TMS_PACKAGE did not install: $out/tms-install.log)"
    fi
  fi
  if PYTHONPATH=${tms_path:+$tms_path:}$PYTHONPATH timeout 420 "$py" "$src/scripts/tms-compare.py" "$out" \
       --gib "$gib" $quick > "$out/tms-compare.out" 2>&1; then
    note tms-compare ok
  else
    note tms-compare "FAILED (exit $?)"; status=1
  fi
  tail -n 40 "$out/tms-compare.out"
else
  echo "gpu-suspend: no $b/.libs/libcuemm.so.0 (a shared library build): the PyTorch proofs are skipped"
  note "suspend-proof, tms-compare" "skipped: no shared libcuemm"
  status=1
fi

end=$(date +%s)
{
  echo "# gpu-suspend summary"
  echo
  echo '```'; cat "$out/gpu.txt"; echo '```'
  echo
  for n in $runs; do
    test -f "$out/bench-suspend.$n.txt" &&
      { echo "## bench-suspend --size $size, run $n"; echo; echo '```'; cat "$out/bench-suspend.$n.txt"; echo '```'; echo; }
  done
  test -f "$out/bench-tags.txt" && { echo "## bench-tags"; echo; echo '```'; cat "$out/bench-tags.txt"; echo '```'; echo; }
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
