#!/bin/sh
# test-gpu-sanitize.sh: scripts/gpu-sanitize.sh reads compute-sanitizer's
# logs right.  Made-up logs (tests/fixtures/compute-sanitizer) in the
# format compute-sanitizer writes; each check compares one parsed row:
# passed|skipped|failed|exit|provoked|api-in-failed-run|invalid|leaks|races|other|calls|notes
top_srcdir=${top_srcdir:-$(dirname "$0")/..}
script=$top_srcdir/scripts/gpu-sanitize.sh
fx=$top_srcdir/tests/fixtures/compute-sanitizer
n=0
echo "1..10"
check() {
  n=$((n + 1))
  got=$(sh "$script" --parse "$1" "$fx/$2" "$3")
  if test "$got" = "$4"; then
    echo "ok $n - $5"
  else
    echo "not ok $n - $5"
    echo "#        got: $got"
    echo "#   expected: $4"
  fi
}
check memcheck memcheck-provoked.txt 0 \
  '3|1|0|0|3|0|0|0|0|0|cuIpcOpenMemHandle_v2(CUDA_ERROR_INVALID_CONTEXT), cuMemFree_v2(CUDA_ERROR_INVALID_VALUE) x2|-' \
  "a passing test's API errors are provoked, counted by call; backtraces and SKIP lines read right"
check memcheck memcheck-findings.txt 0 \
  '2|0|0|0|0|0|1|2 (1052672 B)|0|0|-|first: Invalid __global__ write of size 4 bytes' \
  "an invalid access and two device leaks are findings, whatever the exit status"
check memcheck memcheck-failed.txt 1 \
  '1|0|1|1|0|1|0|0|0|0|cuMemCreate(CUDA_ERROR_OUT_OF_MEMORY)|-' \
  "in a failing test an API error is not taken as provoked"
check memcheck memcheck-provoked.txt 1 \
  '3|1|0|1|0|3|0|0|0|0|cuIpcOpenMemHandle_v2(CUDA_ERROR_INVALID_CONTEXT), cuMemFree_v2(CUDA_ERROR_INVALID_VALUE) x2|-' \
  "nor in a test that exits with an error"
check memcheck memcheck-skipped.txt 0 '0|0|0|0|0|0|0|0|0|0|-|all skipped: no device' \
  "a program that skips everything says why"
check racecheck racecheck.txt 0 '0|0|0|0|0|0|0|0|1|0|-|-' "a race is a finding"
check synccheck synccheck-clean.txt 0 '0|0|0|0|0|0|0|0|0|0|-|-' "a clean synccheck run has nothing"
check synccheck synccheck-barrier.txt 0 \
  '0|0|0|0|0|0|0|0|0|2|-|first: Barrier error detected. Divergent thread(s) in warp' \
  "a barrier error and an unknown report are findings, the first one named"
check memcheck memcheck-findings.txt 124 \
  '2|0|0|124|0|0|1|2 (1052672 B)|0|0|-|timed out; first: Invalid __global__ write of size 4 bytes' \
  "a run stopped by the time limit says so"
check memcheck memcheck-nvtx-refused.txt 0 \
  '2|0|0|0|0|0|0|0|0|0|-|the tool refused the NVTX annotations of pool memory (1x)' \
  "the tool refusing the pool's NVTX annotations is a note, not a finding"
