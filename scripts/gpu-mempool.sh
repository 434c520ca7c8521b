#!/bin/sh
# gpu-mempool.sh: PyTorch's MemPool mode, cuemm.triton and cuemm.cuda_core
# on the GPU machine, and the cost per tensor of PyTorch's allocator,
# per-tensor cuemm and MemPool cuemm.
#
#   scripts/gpu-mempool.sh [OUTDIR]
#
# Runs in a configured and built cuemm tree (./configure && make, or an
# unpacked `make dist` tarball built so, as scripts/gpu-run.sh leaves it),
# with PyTorch (and with it Triton; cupy, numba-cuda and cuda.core where
# installed) in the Python it uses (PYTHON, default python3).  It uses
# .libs/libcuemm.so.0 (CUEMM_LIBRARY) and python/ (PYTHONPATH) from there;
# no `make install` is needed.  scripts/mempool-proof.py prints one PASS,
# FAIL or SKIP line per check (SKIP: Triton or cuda.core missing) and the
# benchmark's table of nanoseconds per tensor (OUTDIR/mempool-bench.md and
# .json when OUTDIR is given; the whole output also goes to
# OUTDIR/mempool-proof.txt).  About 1.5 minutes on an H100 (three fresh
# processes for the benchmark); bounded at 230 s.  Exit status 0 when
# every check passed and every benchmark process finished; 2 when the tree
# is not built or torch is not importable.
set -u
out=${1:-}
b=${CUEMM_BUILDDIR:-.}
b=$(cd "$b" && pwd)
py=${PYTHON:-python3}
src=$(cd "$(dirname "$0")/.." && pwd)
test -f "$b/.libs/libcuemm.so.0" && test -f "$src/python/cuemm/__init__.py" ||
  { echo "gpu-mempool: no $b/.libs/libcuemm.so.0 or $src/python/cuemm/__init__.py; run ./configure && make first" >&2; exit 2; }
CUEMM_LIBRARY=$b/.libs/libcuemm.so.0; export CUEMM_LIBRARY
PYTHONPATH=$b/python:$src/python${PYTHONPATH:+:$PYTHONPATH}; export PYTHONPATH
"$py" -c 'import torch' 2>/dev/null ||
  { echo "gpu-mempool: torch is not importable by $py: nothing to run (pip install torch)" >&2; exit 2; }
if test -n "$out"; then
  mkdir -p "$out" || exit 1
  out=$(cd "$out" && pwd)
fi

echo "date: $(date -u)"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader 2>&1
"$py" -c '
import sys, importlib.metadata as md
print("python", sys.version.split()[0])
for d in ("torch", "triton", "cuda-core", "cuda-bindings", "cupy-cuda12x", "cupy-cuda13x", "numba-cuda"):
    try: print(d, md.version(d))
    except Exception: print(d, "absent")
'
echo "cuemm: $CUEMM_LIBRARY"
start=$(date +%s)
if test -n "$out"; then
  timeout 230 "$py" "$src/scripts/mempool-proof.py" --out "$out" 2>&1 | tee "$out/mempool-proof.txt"
  status=$(tail -n 1 "$out/mempool-proof.txt" | grep -q ', 0 FAIL,' && echo 0 || echo 1)
else
  timeout 230 "$py" "$src/scripts/mempool-proof.py"
  status=$?
fi
test "$status" = 0 || status=1
echo "gpu-mempool: done in $(($(date +%s) - start)) s; exit $status"
exit $status
