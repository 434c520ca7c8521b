#!/bin/sh
# gpu-python.sh: the Python package cuemm, as pip installs it, on the GPU
# machine.
#
#   scripts/gpu-python.sh OUTDIR [SDIST]
#
# Offline (no network, no libtool; torch, cupy, numba-cuda, setuptools,
# wheel and build installed in the system's Python, PYTHON, default
# python3):
#   1. builds the wheel with `pip wheel --no-build-isolation --no-deps`
#      from this source tree, or from SDIST (a cuemm-*.tar.gz of
#      `python3 -m build --sdist`) when given;
#   2. installs it into a fresh venv made with --system-site-packages (so
#      the frameworks are visible) and checks that cuemm is imported from
#      the venv and loads the libcuemm.so.0 inside the package;
#   3. runs, from OUTDIR (outside the tree), with PYTHONPATH and
#      CUEMM_LIBRARY unset, so only the installed package can serve:
#      cuemm-replay --help from the venv's bin; the suite's adapter, Numba
#      plugin and package tests on the real driver (CUEMM_TEST_DRIVER=system);
#      a Numba kernel with NUMBA_CUDA_MEMORY_MANAGER=cuemm.numba and with
#      the old name cuemm_numba; scripts/torch-proof.py --quick,
#      scripts/cupy-proof.py --quick and scripts/torch-compile-proof.py
#      (which write their tables and logs under OUTDIR).
# Prints a summary table (also OUTDIR/summary.md).  Each step is bounded
# by a timeout; the whole run takes about 5 minutes on an H100.  Exit
# status 0 when every step passed.
set -u
out=${1:-}
test -n "$out" || { echo "usage: scripts/gpu-python.sh OUTDIR [SDIST]" >&2; exit 2; }
sdist=${2:-}
py=${PYTHON:-python3}
src=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
unset PYTHONPATH CUEMM_LIBRARY CUEMM_LIBCUDA
summary=$out/summary.md
: > "$out/steps.txt"

# step NAME SECONDS LOG COMMAND...: runs COMMAND with a timeout, logs it,
# and records the outcome.
step() {
  name=$1 secs=$2 log=$3; shift 3
  t0=$(date +%s)
  timeout "$secs" "$@" > "$log" 2>&1
  rc=$?
  t=$(( $(date +%s) - t0 ))
  if test $rc -eq 0; then res=pass; elif test $rc -eq 124; then res="TIMEOUT (${secs} s)"; else res="FAIL (exit $rc)"; fi
  printf '| %s | %s | %s s | %s |\n' "$name" "$res" "$t" "${log#$out/}" >> "$out/steps.txt"
  echo "== $name: $res after $t s (log: $log)"
  test $rc -eq 0 || tail -15 "$log"
  return $rc
}

echo "== cuemm Python package on $(hostname), $("$py" --version 2>&1)"
"$py" -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")' 2>&1 | head -1

# 1. the wheel, offline
wheeldir=$out/wheel
rm -rf "$wheeldir"
if test -n "$sdist"; then
  rm -rf "$out/sdist" && mkdir -p "$out/sdist" && tar -xzf "$sdist" -C "$out/sdist" || exit 2
  tree=$(ls -d "$out"/sdist/cuemm-*/ | head -1)
else
  tree=$src
fi
# The build writes build/ and python/cuemm.egg-info into the tree; a copy
# keeps the tree as it was.
rm -rf "$out/tree" && mkdir -p "$out/tree" &&
  (cd "$tree" && tar --exclude=.git --exclude='./build' --exclude='./build-*' --exclude='./cuemm-*' --exclude='*.o' --exclude='*.lo' --exclude=.libs -cf - .) |
  (cd "$out/tree" && tar -xf -) || exit 2
step "wheel: pip wheel --no-build-isolation --no-deps${sdist:+ (from sdist)}" 300 "$out/wheel.log" \
  sh -c "cd '$out/tree' && '$py' -m pip wheel --no-build-isolation --no-deps --no-index -w '$wheeldir' ." || {
  cat "$out/steps.txt"; exit 1; }
whl=$(ls "$wheeldir"/cuemm-*.whl | head -1)

# 2. a venv that sees the system's frameworks
venv=$out/venv
rm -rf "$venv"
# Where $py is itself a virtual environment (the GPU machine's Python is
# /opt/torch/.venv), --system-site-packages reaches the base interpreter's
# packages, not the frameworks: a .pth file in the new venv names $py's own
# site-packages, which then come after the venv's (the installed cuemm wins).
export py venv whl
step "venv --system-site-packages + pip install the wheel" 120 "$out/install.log" sh -c '
  "$py" -m venv --system-site-packages "$venv" || exit 1
  purelib=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()[\"purelib\"])") || exit 1
  "$py" -c "import site; print(chr(10).join(site.getsitepackages()))" > "$purelib/frameworks.pth" || exit 1
  cat "$purelib/frameworks.pth"
  "$venv/bin/python" -m pip install --no-deps --no-index "$whl"' || {
  cat "$out/steps.txt"; exit 1; }
vpy=$venv/bin/python
cd "$out" || exit 2
step "installed: cuemm from the venv, its own libcuemm" 60 "$out/where.log" "$vpy" -c '
import os, sys, cuemm
pkg = os.path.dirname(cuemm.__file__)
print("cuemm", cuemm.__version__, "from", pkg, "library", cuemm.loaded_path(), cuemm.version_string())
assert pkg.startswith(sys.prefix), "not the venv copy"
assert cuemm.loaded_path() == os.path.join(pkg, "libcuemm.so.0"), "not the bundled library"
assert cuemm.version_string() == cuemm.__version__
'
step "cuemm-replay --help from the venv's bin" 30 "$out/replay.log" "$venv/bin/cuemm-replay" --help

# 3. the suite's Python tests against the installed package, on the GPU
for t in adapters numba-plugin python-package; do
  step "tests/test-$t.py (installed, real driver)" 120 "$out/test-$t.log" \
    env CUEMM_PYTHON_INSTALLED=1 CUEMM_TEST_DRIVER=system top_srcdir="$src" "$vpy" "$src/tests/test-$t.py"
done

numba_check='
import sys
from numba import cuda
import numpy as np
@cuda.jit
def twice(a):
    i = cuda.grid(1)
    if i < a.size:
        a[i] *= 2
x = np.arange(1 << 20, dtype=np.float32)
d = cuda.to_device(x)
twice[(x.size + 255) // 256, 256](d)
ok = bool((d.copy_to_host() == 2 * x).all())
mm = cuda.current_context().memory_manager
st = mm.cuemm.stats()
print("Numba uses", type(mm).__module__ + "." + type(mm).__name__, "- kernel result", "right" if ok else "WRONG",
      "- cuemm live", st["live_count"], "allocs", st["allocs"])
sys.exit(0 if ok and type(mm).__module__ == "cuemm.numba" and st["allocs"] > 0 else 1)
'
if "$vpy" -c 'import numba.cuda' 2>/dev/null; then
  step "Numba: NUMBA_CUDA_MEMORY_MANAGER=cuemm.numba" 120 "$out/numba.log" \
    env NUMBA_CUDA_MEMORY_MANAGER=cuemm.numba "$vpy" -c "$numba_check"
  step "Numba: the old name cuemm_numba" 120 "$out/numba-alias.log" \
    env NUMBA_CUDA_MEMORY_MANAGER=cuemm_numba "$vpy" -c "$numba_check"
else
  echo "| Numba | skipped: numba.cuda not importable | | |" >> "$out/steps.txt"
fi

if "$vpy" -c 'import torch' 2>/dev/null; then
  step "scripts/torch-proof.py --quick" 200 "$out/torch-proof.log" \
    "$vpy" "$src/scripts/torch-proof.py" --quick --out "$out/torch" --timeout 90
  step "scripts/torch-compile-proof.py" 330 "$out/torch-compile-proof.log" \
    "$vpy" "$src/scripts/torch-compile-proof.py" --out "$out/compile" --timeout 120
else
  echo "| PyTorch | skipped: torch not importable | | |" >> "$out/steps.txt"
fi
if "$vpy" -c 'import cupy' 2>/dev/null; then
  step "scripts/cupy-proof.py --quick" 180 "$out/cupy-proof.log" \
    "$vpy" "$src/scripts/cupy-proof.py" --quick --out "$out/cupy" --timeout 90
else
  echo "| CuPy | skipped: cupy not importable | | |" >> "$out/steps.txt"
fi

{
  echo "cuemm Python package, installed from $(basename "$whl"), on $(hostname)"
  echo
  echo "| step | result | time | log |"
  echo "|---|---|---|---|"
  cat "$out/steps.txt"
  for t in "$out/torch/torch-proof.md" "$out/compile/torch-compile-proof.md" "$out/cupy/cupy-proof.md"; do
    test -f "$t" && { echo; cat "$t"; }
  done
} > "$summary"
echo
cat "$summary"
! grep -q '| \(FAIL\|TIMEOUT\)' "$out/steps.txt"
