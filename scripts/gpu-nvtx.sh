#!/bin/sh
# gpu-nvtx.sh: the GPU proof of the NVTX annotations (src/trace/nvtx.c): a write
# one element past a pool block, inside the pool's memory, is reported by
# compute-sanitizer's memcheck when the pool's blocks are annotated
# (CUEMM_NVTX=1) and not when they are not (CUEMM_NVTX=0).
#
#   scripts/gpu-nvtx.sh BUILDDIR [OUTDIR]
#       on the GPU machine.  BUILDDIR is a configured and built tree (an
#       unpacked `make dist` tarball; scripts/gpu-run.sh pack makes one):
#       builds tests/gpu-nvtx-oob there and runs it under `compute-sanitizer
#       --tool memcheck` (SANITIZE_FLAGS adds options) four times: with
#       CUEMM_NVTX=1 on the pool of virtual memory (reported, or refused by
#       a tool that takes no annotations on memory mapped with cuMemMap, as
#       compute-sanitizer 2025.3 does); with CUEMM_NVTX=1 on a slab
#       (CUEMM_POOL_SLAB=1, 64 MiB: one cuMemAlloc, one heap; must be
#       reported: the proof); with CUEMM_NVTX=0 (must not be); and as a
#       control with the block from cuMemAlloc (which memcheck checks by
#       itself: if that write is not reported either, the kernel's writes
#       are not checked at all, and the pool runs prove nothing).  Writes
#       OUTDIR/nvtx-1.log, nvtx-slab.log, nvtx-0.log, control.log and
#       versions.txt (default OUTDIR: BUILDDIR/gpu-nvtx), prints one line
#       per run, and exits 0 when the slab run reported the invalid write,
#       the unannotated one did not, and the first either did or was
#       refused by the tool.
#   scripts/gpu-nvtx.sh --parse LOG
#       the verdict on one log: "reported", "not reported" or "did not run"
#       (used by tests/test-gpu-nvtx.sh on made-up logs).
set -u

# reported: memcheck saw an invalid global write; not reported: the kernel
# ran and memcheck said nothing of it; did not run: neither.
verdict() {
  if grep -q '^========= Invalid __global__ write' "$1"; then
    echo "reported"
  elif grep -q '^gpu-nvtx-oob: launched' "$1"; then
    echo "not reported"
  else
    echo "did not run"
  fi
}

if test "${1:-}" = --parse; then
  test $# -eq 2 || { echo "usage: scripts/gpu-nvtx.sh --parse LOG" >&2; exit 2; }
  verdict "$2"
  exit 0
fi

b=${1:-}
test -n "$b" && test -d "$b" || { echo "usage: scripts/gpu-nvtx.sh BUILDDIR [OUTDIR] | --parse LOG" >&2; exit 2; }
b=$(cd "$b" && pwd)
test -f "$b/Makefile" && test -x "$b/libtool" || { echo "gpu-nvtx: $b is not a configured build tree" >&2; exit 2; }
out=${2:-$b/gpu-nvtx}
mkdir -p "$out" && out=$(cd "$out" && pwd) || exit 1

cs=$(command -v compute-sanitizer 2>/dev/null || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -n 1)
test -n "$cs" || { echo "gpu-nvtx: compute-sanitizer not found (PATH, /usr/local/cuda*/bin)" >&2; exit 1; }
make -C "$b" tests/gpu-nvtx-oob > "$out/build.log" 2>&1 || { tail -n 30 "$out/build.log"; exit 1; }
{ "$cs" --version | tail -n 1; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > "$out/versions.txt" 2>&1

# Only the pool's settings the program chooses: nothing from the caller's
# environment may change what is allocated.
unset CUEMM_MAX_PENDING_DEALLOCS_COUNT CUEMM_MAX_PENDING_DEALLOCS_RATIO CUEMM_POOL CUEMM_POOL_RESERVE \
  CUEMM_POOL_CHUNK CUEMM_POOL_RELEASE_THRESHOLD CUEMM_POOL_LIMIT CUEMM_POOL_IPC CUEMM_POOL_LIMIT_HARD \
  CUEMM_POOL_PIECE CUEMM_POOL_RELEASE_DELAY CUEMM_MEMORY CUEMM_POOL_SLAB

status=0
for run in 1 slab 0 control; do
  slab=0 reserve=
  case $run in
  control) log=$out/control.log nvtx=1 arg=--control label="control (cuMemAlloc block)" ;;
  slab) log=$out/nvtx-slab.log nvtx=1 arg= slab=1 reserve=64MiB label="CUEMM_NVTX=1 CUEMM_POOL_SLAB=1" ;;
  *) log=$out/nvtx-$run.log nvtx=$run arg= label="CUEMM_NVTX=$run" ;;
  esac
  # shellcheck disable=SC2086
  CUEMM_NVTX=$nvtx CUEMM_POOL_SLAB=$slab CUEMM_POOL_RESERVE=$reserve \
    timeout -k 5 "${SANITIZE_TIMEOUT:-120}" "$b/libtool" --mode=execute \
    "$cs" --tool memcheck ${SANITIZE_FLAGS:-} "$b/tests/gpu-nvtx-oob" $arg > "$log" 2>&1
  rc=$?
  v=$(verdict "$log")
  want=$(sed -n 's/.*writing 4 bytes at \(0x[0-9a-f]*\).*/\1/p' "$log" | head -n 1)
  got=$(sed -n 's/^=========     Address \(0x[0-9a-f]*\) is out of bounds.*/\1/p' "$log" | head -n 1)
  case $v in
  reported) said="memcheck reported the invalid write" ;;
  "not reported") said="memcheck reported no invalid write" ;;
  *) said="the program did not run" ;;
  esac
  case $run:$v in
  "1:reported" | "slab:reported" | "0:not reported" | "control:reported") note="as expected" ;;
  "1:not reported")
    if grep -q 'Warning: Call to nvtxMemHeapRegister failed' "$log"; then
      note="the tool refused the annotations of memory mapped with cuMemMap (CUEMM_POOL_SLAB=1 is the way)"
    else
      note="WRONG"; status=1
    fi ;;
  control:*) note="UNEXPECTED: memcheck does not see this kernel's writes" ;;
  *) note="WRONG"; status=1 ;;
  esac
  echo "$label: $said: $note (exit $rc; written at ${want:-?}, reported at ${got:--}; $log)"
done
# The tool may take the annotations and refuse them: compute-sanitizer
# 2025.3 answers nvtxMemHeapRegister (and regions, and permissions) on
# memory mapped with cuMemMap with "One or more of the parameters is
# invalid", while it takes the same calls on cuMemAlloc memory.
refused=$(grep -h 'Warning: Call to nvtxMem[A-Za-z]* failed' "$out/nvtx-1.log" | sort | uniq -c | sed 's/^ *//')
if test -n "$refused"; then
  echo "the tool refused cuemm's annotations on the pool's memory (cuMemCreate + cuMemMap), so it cannot check"
  echo "pool blocks; its warnings, with their counts:"
  printf '%s\n' "$refused" | sed 's/^/  /'
fi
grep -h '^gpu-nvtx-oob: NVTX_INJECTION64_PATH=' "$out/nvtx-1.log" | head -n 1
echo "compute-sanitizer and driver: $(tr '\n' ' ' < "$out/versions.txt")"
exit $status
