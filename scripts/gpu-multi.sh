#!/bin/sh
# gpu-multi.sh: cuemm past one GPU, on a machine with two GPUs.
#
#   scripts/gpu-multi.sh OUTDIR
#
# Runs in a configured and built cuemm tree (./configure && make, as
# scripts/gpu-run.sh leaves it; CUEMM_BUILDDIR names another build
# directory), with the Python package from its python/ folder and the
# library from .libs/libcuemm.so.0: it sets PYTHONPATH=python (in front of
# what PYTHONPATH holds, e.g. the folder the Dask wheels were installed
# into) and CUEMM_LIBRARY=.libs/libcuemm.so.0 itself; a pip-installed cuemm
# works too where those are absent.  It needs PyTorch with NCCL, CuPy, and
# dask, distributed and dask-cuda importable by PYTHON (default python3).
# In order:
#   1. torchrun: DDP and FSDP (fully_shard) training of a small transformer
#      at variable sequence lengths, two ranks over NCCL, PyTorch's
#      allocator and cuemm taking turns, each a fresh
#      `torchrun --standalone --nproc-per-node 2` launch, four launches of
#      each (TORCHRUN_REPEATS; a launch's pace differs from the next by up
#      to 25% under either allocator, docs/clusters.md): scripts/
#      torchrun-proof.py, one table per mode (OUTDIR/torchrun/torchrun.md),
#      logs in OUTDIR/torchrun/; cuemm without its event log, then one
#      launch of it with the log in each mode for the streams its
#      allocations were made on (OUTDIR/torchrun/logged/torchrun.md);
#   2. Dask: scripts/dask-proof.py on two GPU workers, CuPy's pool and cuemm
#      taking turns, two fresh clusters of each (DASK_LAUNCHES), four
#      repeats each (OUTDIR/dask/dask-proof.md);
#   3. bench/bench-multi: one process, a thread per GPU (OUTDIR/bench-multi.txt);
#   4. the suite's multi-device tests on the system driver (a pool block of
#      GPU 0 opened by a process on GPU 1; the out-of-memory message naming
#      the device): make check CUEMM_TEST_DRIVER=system TESTS=...
#      (OUTDIR/check-multi.log).
# Then one summary (stdout and OUTDIR/summary.md).  About 12 minutes on two
# H100s; each step has a time limit.  Exit status 0 when every step passed.
#
# NVLink multicast stays off in everything started here: NCCL_NVLS_ENABLE=0,
# TORCH_SYMM_MEM_DISABLE_MULTICAST=1.
set -u
out=${1:-}
test -n "$out" || { echo "usage: scripts/gpu-multi.sh OUTDIR" >&2; exit 2; }
NCCL_NVLS_ENABLE=0; export NCCL_NVLS_ENABLE
TORCH_SYMM_MEM_DISABLE_MULTICAST=1; export TORCH_SYMM_MEM_DISABLE_MULTICAST
b=${CUEMM_BUILDDIR:-.}
b=$(cd "$b" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-python3}
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)
if test -f "$b/.libs/libcuemm.so.0"; then
  CUEMM_LIBRARY=$b/.libs/libcuemm.so.0; export CUEMM_LIBRARY
else
  echo "gpu-multi: no $b/.libs/libcuemm.so.0 (run ./configure && make first); using an installed cuemm if any"
fi
PYTHONPATH=$src/python${PYTHONPATH:+:$PYTHONPATH}; export PYTHONPATH
start=$(date +%s)
status=0
summary=$out/summary.md
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }

{
  echo "date: $(date -u)"
  nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,memory.total,memory.used --format=csv,noheader 2>&1
  nvidia-smi topo -m 2>&1 | head -n 4
  grep -m1 'model name' /proc/cpuinfo; echo "cpus: $(nproc)"
  "$py" -c '
import sys, importlib.metadata as md
print("python", sys.version.split()[0])
for d in ("torch", "cupy-cuda13x", "cupy-cuda12x", "dask", "distributed", "dask-cuda", "numba-cuda", "numpy"):
    try: print(d, md.version(d))
    except Exception: print(d, "absent")
'
  echo "cuemm: ${CUEMM_LIBRARY:-installed}; PYTHONPATH=$PYTHONPATH"
  echo "NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE TORCH_SYMM_MEM_DISABLE_MULTICAST=$TORCH_SYMM_MEM_DISABLE_MULTICAST"
} > "$out/env.txt" 2>&1
cat "$out/env.txt"
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
test "$ngpu" -ge 2 || note "gpu-multi: this machine shows $ngpu GPU(s); the runs below need two and will fail or skip"
has() { "$py" -c "import $1" >/dev/null 2>&1; }

# 1. torchrun, DDP and FSDP; the allocators take turns, each launch fresh.
echo "== 1. torchrun (scripts/torchrun-proof.py)"
if has torch; then
  t=$out/torchrun
  mkdir -p "$t"
  repeats=${TORCHRUN_REPEATS:-4}
  launch() { # dir mode alloc run [args]
    d=$1; mo=$2; al=$3; n=$4; shift 4
    echo "-- $mo $al run $n $*"
    timeout 180 "$py" -m torch.distributed.run --standalone --nproc-per-node 2 \
      "$src/scripts/torchrun-proof.py" --mode $mo --alloc $al --launch $n --out "$d" "$@" \
      > "$d/$mo-$al-$n.log" 2>&1 ||
      { echo "   failed (exit $?): tail of $d/$mo-$al-$n.log"; tail -n 15 "$d/$mo-$al-$n.log"; status=1; }
  }
  # The timed launches: cuemm as a program gets it (no event log), the
  # allocators taking turns, each first in every other round.
  for mode in ddp fsdp; do
    run=1
    while test $run -le "$repeats"; do
      if test $((run % 2)) -eq 1; then order="native cuemm"; else order="cuemm native"; fi
      for alloc in $order; do
        if test $alloc = cuemm; then launch "$t" $mode cuemm $run --no-log; else launch "$t" $mode native $run; fi
      done
      run=$((run + 1))
    done
  done
  "$py" "$src/scripts/torchrun-proof.py" --report "$t" > /dev/null 2>&1 || status=1
  test -f "$t/torchrun.md" && { echo "## torchrun"; cat "$t/torchrun.md"; echo; } >> "$summary"
  # One launch of cuemm with its event log in each mode, reported beside
  # the native launches: the streams its allocations were made on (NCCL's).
  mkdir -p "$t/logged"
  for mode in ddp fsdp; do
    launch "$t/logged" $mode cuemm 1
    cp "$t"/$mode-native-*.json "$t/logged/" 2>/dev/null
  done
  "$py" "$src/scripts/torchrun-proof.py" --report "$t/logged" > /dev/null 2>&1 || status=1
  test -f "$t/logged/torchrun.md" &&
    { echo "## torchrun, cuemm with its event log (one launch a mode)"; cat "$t/logged/torchrun.md"; echo; } >> "$summary"
else
  note "gpu-multi: torch is not importable by $py: the torchrun runs are skipped"; status=1
fi

# 2. Dask.
echo "== 2. Dask (scripts/dask-proof.py)"
mkdir -p "$out/dask"
launches=${DASK_LAUNCHES:-2}
timeout $((launches * 150 + 60)) "$py" "$src/scripts/dask-proof.py" "$out/dask" --repeats 4 --launches "$launches" \
  > "$out/dask/dask-proof.log" 2>&1
rc=$?
test $rc -eq 0 || { echo "   dask proof exit $rc: tail of $out/dask/dask-proof.log"; tail -n 25 "$out/dask/dask-proof.log"; status=1; }
if test -f "$out/dask/dask-proof.md"; then
  { echo "## Dask"; cat "$out/dask/dask-proof.md"; echo; } >> "$summary"
else
  note "gpu-multi: the Dask proof wrote no table (exit $rc; see $out/dask/dask-proof.log)"
fi

# 3. bench-multi.
echo "== 3. bench/bench-multi"
if (cd "$b" && make bench/bench-multi) > "$out/bench-build.log" 2>&1; then
  timeout 120 "$b/bench/bench-multi" > "$out/bench-multi.txt" 2>&1 || status=1
  { echo "## bench-multi (one process, a thread per GPU)"; echo '```'; cat "$out/bench-multi.txt"; echo '```'; echo; } >> "$summary"
  grep -q 'target at least 1.9x): met' "$out/bench-multi.txt" || status=1
else
  note "gpu-multi: make bench/bench-multi failed (see $out/bench-build.log)"; status=1
fi

# 4. The multi-device tests of the suite, on the system driver.
echo "== 4. make check CUEMM_TEST_DRIVER=system (multi-device tests)"
tests="tests/test-pool-ipc-peer tests/test-oom-device tests/test-ipc"
if (cd "$b" && make check CUEMM_TEST_DRIVER=system TESTS="$tests") > "$out/check-multi.log" 2>&1; then
  res=passed
else
  res=FAILED; status=1
fi
{ echo "## the suite's multi-device tests on the system driver: $res"; echo '```'
  grep -E '^(PASS|FAIL|ERROR|SKIP|XFAIL|XPASS):|^# (TOTAL|PASS|SKIP|FAIL|ERROR)' "$out/check-multi.log" |
    grep -v '^PASS:' | head -n 40
  echo '```'; } >> "$summary"
for t in $tests; do cp "$b/$t.log" "$out/" 2>/dev/null; done

echo
echo "== summary ($summary)"
cat "$summary"
echo "gpu-multi: done in $(($(date +%s) - start)) s; exit $status"
exit $status
