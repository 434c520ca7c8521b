#!/bin/sh
# gpu-run.sh: the whole GPU run in two steps.
#
#   scripts/gpu-run.sh pack [BUILDDIR]
#       where autotools are installed: `make dist` and put the tarball in
#       .gpu/ (a folder git ignores) to be copied to the GPU machine.
#   scripts/gpu-run.sh run [OUTDIR]
#       on the GPU machine, in the repository root (it needs gcc and make, no
#       autotools, no libtool, no network): unpack .gpu/cuemm-*.tar.gz,
#       configure, build, run the whole suite against the system's driver
#       (make check CUEMM_TEST_DRIVER=system), then the benchmarks, each
#       BENCH_REPEAT times (default 3) to show the spread from run to run.
#       Logs go to OUTDIR (default .gpu/out).
set -u
mode=${1:-}
case $mode in
pack)
  b=${2:-.}
  (cd "$b" && make dist-gzip) || exit 1
  mkdir -p .gpu
  rm -f .gpu/cuemm-*.tar.gz
  cp "$b"/cuemm-*.tar.gz .gpu/ || exit 1
  ls -l .gpu/
  ;;
run)
  out=${2:-.gpu/out}
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
  tarball=$(ls .gpu/cuemm-*.tar.gz | head -n 1)
  test -n "$tarball" || { echo "gpu-run: no .gpu/cuemm-*.tar.gz; run 'scripts/gpu-run.sh pack' first" >&2; exit 1; }
  work=$(mktemp -d /tmp/cuemm-gpu.XXXXXX)
  tar -xzf "$tarball" -C "$work" || exit 1
  cd "$work"/cuemm-* || exit 1
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv 2>&1 | tee "$out/gpu.txt"
  # The host matters as much as the GPU for the fast paths.
  { grep -m1 'model name' /proc/cpuinfo; echo "cpus: $(nproc)"; } 2>&1 | tee -a "$out/gpu.txt"
  status=0
  { ./configure && make -j"$(nproc)"; } > "$out/build.log" 2>&1 || { tail -n 40 "$out/build.log"; exit 1; }
  # One test at a time: several programs sizing their allocations from
  # cuMemGetInfo on one GPU at once would measure each other.
  make -j1 check CUEMM_TEST_DRIVER=system > "$out/check.log" 2>&1 || status=1
  grep -E '^(# (TOTAL|PASS|SKIP|XFAIL|FAIL|XPASS|ERROR)|(PASS|FAIL|ERROR|SKIP|XPASS):)' "$out/check.log" | grep -v '^PASS' | head -n 200
  grep -E '^# (TOTAL|PASS|SKIP|FAIL|ERROR)' "$out/check.log"
  cat tests/*.log > "$out/tests.log" 2>/dev/null
  test $status -eq 0 || grep -B2 -A8 '^not ok' tests/*.log | head -n 120
  make quickstart > "$out/quickstart.log" 2>&1; echo "quickstart exit $?"; head -n 3 "$out/quickstart.log"
  make bench > "$out/bench-build.log" 2>&1 || { tail -n 20 "$out/bench-build.log"; exit 1; }
  for b in bench/bench-*; do
    case $b in *.o|*.c) continue ;; esac
    test -x "$b" || continue
    n=1
    while test $n -le "${BENCH_REPEAT:-3}"; do
      echo "== $b, run $n"
      "./$b" 2>&1 | tee "$out/$(basename "$b").$n.txt"
      n=$((n + 1))
    done
  done
  exit $status
  ;;
*)
  echo "usage: scripts/gpu-run.sh pack [BUILDDIR] | run [OUTDIR]" >&2
  exit 2
  ;;
esac
