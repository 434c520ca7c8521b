#!/bin/sh
# gpu-frameworks.sh: cuemm under PyTorch and CuPy on the GPU machine.
#
#   scripts/gpu-frameworks.sh OUTDIR [--quick]
#
# Runs in a configured and built cuemm tree (an unpacked `make dist`
# tarball after ./configure && make, as scripts/gpu-run.sh leaves it), with
# the framework(s) installed in the Python it uses (PYTHON, default
# python3).  It uses .libs/libcuemm.so.0 (CUEMM_LIBRARY) and python/
# (PYTHONPATH) from there; no `make install` is needed.
#   1. scripts/torch-proof.py: GPT-2-sized training at variable sequence
#      lengths, ResNet-50 training at variable batch sizes, a two-stream
#      inference server and a CUDA graph check, each once on PyTorch's
#      allocator and once on cuemm: OUTDIR/torch-proof.md (the table),
#      .json, the runs' logs, and cuemm's event logs (cuemm-*.csv);
#   2. scripts/cupy-proof.py: FFTs, linear algebra, reductions and
#      elementwise work of mixed sizes on CuPy's pool and on cuemm:
#      OUTDIR/cupy-proof.md, .json, cuemm-cupy.csv;
#   3. the frameworks' own tests, where test files are on the machine
#      (wheels ship none): TORCH_TESTS and CUPY_TESTS name test files or
#      folders (space-separated) to run with pytest, once with the
#      framework's own allocator and once switched to cuemm (through a
#      sitecustomize.py that calls use() at start-up), through
#      scripts/framework-tests.sh (which says what it writes).
# The tables go to stdout and OUTDIR/summary.md.  A framework that is not
# importable is skipped with a message.  The full run takes about 8
# minutes on an H100 (three runs of each PyTorch workload and mode, each
# its own process; the timeouts bound it at about 11), --quick about 1.5.
# Exit status 0 when every run finished,
# cuemm's adapters counted no failure and the graph check matched.
set -u
out=${1:-}
test -n "$out" || { echo "usage: scripts/gpu-frameworks.sh OUTDIR [--quick]" >&2; exit 2; }
quick=
test "${2:-}" = "--quick" && quick=--quick
b=${CUEMM_BUILDDIR:-.}
b=$(cd "$b" && pwd)
py=${PYTHON:-python3}
src=$(cd "$(dirname "$0")/.." && pwd)
test -f "$b/.libs/libcuemm.so.0" && test -f "$src/python/cuemm/__init__.py" ||
  { echo "gpu-frameworks: no $b/.libs/libcuemm.so.0 or $src/python/cuemm/__init__.py; run ./configure && make first" >&2; exit 2; }
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)
CUEMM_LIBRARY=$b/.libs/libcuemm.so.0; export CUEMM_LIBRARY
PYTHONPATH=$b/python:$src/python${PYTHONPATH:+:$PYTHONPATH}; export PYTHONPATH
start=$(date +%s)
status=0

{
  echo "date: $(date -u)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader 2>&1
  grep -m1 'model name' /proc/cpuinfo; echo "cpus: $(nproc)"
  "$py" -c '
import sys, importlib.metadata as md
print("python", sys.version.split()[0])
for d in ("torch", "torchvision", "cupy", "cupy-cuda12x", "cupy-cuda13x", "numpy", "pytest"):
    try: print(d, md.version(d))
    except Exception: print(d, "absent")
'
  echo "cuemm: $CUEMM_LIBRARY"
  echo "mode: ${quick:-full}"
} > "$out/env.txt" 2>&1
cat "$out/env.txt"
: > "$out/summary.md"

has() { "$py" -c "import $1" >/dev/null 2>&1; }

# 1. PyTorch
if has torch; then
  echo "== PyTorch (scripts/torch-proof.py)"
  # shellcheck disable=SC2086
  # TORCH_REPEATS runs of each workload and mode, taking turns (default 3,
  # --quick 1): processes on one GPU differ by 10 to 30 percent from run to
  # run, more than the allocators do.
  repeats=${TORCH_REPEATS:-3}
  test -n "$quick" && repeats=${TORCH_REPEATS:-1}
  timeout $((120 + 150 * repeats)) "$py" "$src/scripts/torch-proof.py" --out "$out" $quick --timeout 150 \
    --repeats "$repeats" || status=1
  test -f "$out/torch-proof.md" && { cat "$out/torch-proof.md"; echo; } >> "$out/summary.md"
else
  echo "gpu-frameworks: torch is not importable by $py: the PyTorch runs are skipped" | tee -a "$out/summary.md"
fi

# 2. CuPy
if has cupy; then
  echo "== CuPy (scripts/cupy-proof.py)"
  # shellcheck disable=SC2086
  timeout 150 "$py" "$src/scripts/cupy-proof.py" --out "$out" $quick --timeout 70 || status=1
  test -f "$out/cupy-proof.md" && { cat "$out/cupy-proof.md"; echo; } >> "$out/summary.md"
else
  echo "gpu-frameworks: cupy is not importable by $py: the CuPy runs are skipped" | tee -a "$out/summary.md"
fi

# 3. The frameworks' own tests, where there are test files.
own_tests() {  # FRAMEWORK FILES...
  left=$((start + 480 - $(date +%s)))
  if test $left -lt 30; then
    echo "gpu-frameworks: no time left for $1's own tests" | tee -a "$out/summary.md"
    return
  fi
  fw=$1; shift
  sh "$src/scripts/framework-tests.sh" "$fw" "$out" $((left / 2)) "$@" || status=1
}
find_tests() {  # MODULE: test files shipped inside an installed package, if any
  "$py" - "$1" <<'PY' 2>/dev/null
import importlib, os, sys
try:
    root = os.path.dirname(importlib.import_module(sys.argv[1]).__file__)
except Exception:
    sys.exit(0)
found = []
for d, _, files in os.walk(root):
    found += [os.path.join(d, f) for f in files if f.startswith("test_") and f.endswith(".py")
              and ("cuda" in f or "memory" in f or "alloc" in f)]
print(" ".join(sorted(found)[:20]))
PY
}
if has pytest; then
  for fw in torch cupy; do
    has $fw || continue
    if test "$fw" = torch; then files=${TORCH_TESTS:-$(find_tests torch)}; else files=${CUPY_TESTS:-$(find_tests cupy)}; fi
    if test -z "$files"; then
      echo "gpu-frameworks: no $fw test files on this machine (its wheel ships none; set" \
           "$(echo $fw | tr a-z A-Z)_TESTS to test files of its source tree): its own tests are skipped" |
        tee -a "$out/summary.md"
      continue
    fi
    # shellcheck disable=SC2086
    own_tests $fw $files
  done
else
  echo "gpu-frameworks: pytest is not importable by $py: the frameworks' own tests are skipped" | tee -a "$out/summary.md"
fi

# cuemm's event logs of the runs, replayed through every backend: the
# footprint each allocator would have had on the same sequence.
if test -x tools/cuemm-replay; then
  for log in "$out"/cuemm-*.csv; do
    test -s "$log" || continue
    name=$(basename "$log" .csv)
    timeout 240 tools/cuemm-replay --quiet --quick "$log" > "$out/replay-$name.txt" 2>&1
    case $? in
      0) ;;
      3) echo "gpu-frameworks: replaying $log: allocations failed out of memory (see $out/replay-$name.txt)" ;;
      *) echo "gpu-frameworks: replaying $log failed (see $out/replay-$name.txt)" ;;
    esac
  done
  { echo; echo "### cuemm's event logs replayed (tools/cuemm-replay --quick)"; echo '```'
    for f in "$out"/replay-cuemm-*.txt; do test -f "$f" && sed -n '/## summary/,$p' "$f" | tail -n +2; done
    echo '```'; } >> "$out/summary.md"
fi

echo
echo "== summary ($out/summary.md)"
cat "$out/summary.md"
ls -l "$out"/cuemm-*.csv 2>/dev/null
echo "gpu-frameworks: done in $(($(date +%s) - start)) s; exit $status"
exit $status
