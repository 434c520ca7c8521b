#!/bin/sh
# gpu-heap.sh OUTDIR [--quick]: bench/bench-heap on a GPU, three times
# (BENCH_REPEAT), with one table of the figures of every run.
#
# Runs in a cuemm tree unpacked from `make dist`, configured and built (as
# scripts/gpu-run.sh run leaves it), or a configured checkout;
# CUEMM_BUILDDIR names the build tree when it is not this one.  An
# unpacked tree that was never configured is configured and built first
# (./configure && make: gcc and make, no autotools, no libtool needed).
#   OUTDIR/gpu.txt           the GPU, driver and host CPU
#   OUTDIR/bench-heap.N.txt  the whole output of run N: mixed sizes across
#                            1..16 threads at maxima 512 B .. 8 MiB (cuemm,
#                            the driver's pool, malloc; the manager's
#                            figures at 2 and 8 MiB), frees from another
#                            thread in pairs of threads
#   OUTDIR/summary.md        the ratios of every run side by side (also on
#                            stdout)
# About 100 s a run on an H100 with a 16-core host (--quick: one run of a
# few seconds, figures of 30 ms spans).  Exit status 0 when every run
# finished and cuemm's live counts matched in each.
set -u
out=${1:-}
test -n "$out" || { echo "usage: scripts/gpu-heap.sh OUTDIR [--quick]" >&2; exit 2; }
quick=
test "${2:-}" = --quick && quick=--quick
runs=${BENCH_REPEAT:-3}
test -n "$quick" && runs=1
src=$(cd "$(dirname "$0")/.." && pwd)
b=${CUEMM_BUILDDIR:-$src}
b=$(cd "$b" && pwd)
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)
if ! test -f "$b/Makefile"; then
  test -x "$b/configure" || { echo "gpu-heap: $b has neither a Makefile nor a configure script" >&2; exit 2; }
  echo "== configuring $b"
  (cd "$b" && ./configure && make -j"$(nproc)") > "$out/build.log" 2>&1 ||
    { tail -n 30 "$out/build.log"; echo "gpu-heap: the build failed ($out/build.log)"; exit 1; }
fi
(cd "$b" && make bench/bench-heap) >> "$out/build.log" 2>&1 ||
  { tail -n 30 "$out/build.log"; echo "gpu-heap: bench-heap did not build ($out/build.log)"; exit 1; }

{
  echo "date: $(date -u)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv 2>&1
  grep -m1 'model name' /proc/cpuinfo; echo "cpus: $(nproc)"
} > "$out/gpu.txt" 2>&1
cat "$out/gpu.txt"

status=0
files=
n=1
while test "$n" -le "$runs"; do
  f=$out/bench-heap.$n.txt
  echo "== bench-heap $quick, run $n"
  timeout 900 "$b/bench/bench-heap" $quick 2>&1 | tee "$f"
  if grep -q "^consistency: .*, 0 mismatches$" "$f"; then
    files="$files $f"
  else
    echo "gpu-heap: run $n did not finish, or cuemm's counts did not match ($f)"
    status=1
  fi
  n=$((n + 1))
done

# One row per maximum (per thread count for the remote part), the runs'
# figures side by side, from each run's summary and remote tables.
{
  echo "# bench-heap on the GPU"
  echo
  echo '```'; cat "$out/gpu.txt"; echo '```'
  echo
  test -n "$files" && awk '
    FNR == 1 { run++; part = "" }
    /^## mixed sizes, summary/ { part = "sum"; next }
    /^## frees from another thread/ { part = "remote"; next }
    /^(#|same thread|consistency|$)/ {
      if ($0 ~ /^same thread, 1 thread:/) { sub(/^same thread, 1 thread: /, ""); same[run] = $0 }
      if ($0 !~ /^ /) part = ""
      next
    }
    part == "sum" && NF == 6 && $1 ~ /^[0-9]+$/ {
      k = $1 " " $2
      if (!(k in c)) { keys[++nk] = k }
      c[k] = c[k] (run > 1 ? ", " : "") $3; d[k] = d[k] (run > 1 ? ", " : "") $4
      m[k] = m[k] (run > 1 ? ", " : "") $5; o[k] = o[k] (run > 1 ? ", " : "") $6
    }
    part == "remote" && NF == 7 && $1 ~ /^[0-9]+$/ {
      t = $1
      if (!(t in rc)) { tk[++nt] = t }
      rc[t] = rc[t] (run > 1 ? ", " : "") $2; rm[t] = rm[t] (run > 1 ? ", " : "") $5
      rd[t] = rd[t] (run > 1 ? ", " : "") $6; rs[t] = rs[t] (run > 1 ? ", " : "") $7
    }
    END {
      print "## Mixed sizes, 16 live blocks per thread: 16 threads / 1 thread, and one thread cuemm / driver (runs 1.." run ")"
      print ""
      print "| maximum | cuemm 16T/1T | driver 16T/1T | malloc 16T/1T | 1T cuemm/driver |"
      print "|---|---|---|---|---|"
      for (i = 1; i <= nk; i++) { k = keys[i]; print "| " k " | " c[k] " | " d[k] " | " m[k] " | " o[k] " |" }
      print ""
      print "## Frees from another thread, 4 KiB, threads in pairs (runs 1.." run ")"
      print ""
      print "| threads | cuemm Mpairs/s | cuemm/malloc | cuemm/driver | cuemm / one thread same-thread |"
      print "|---|---|---|---|---|"
      for (i = 1; i <= nt; i++) { t = tk[i]; print "| " t " | " rc[t] " | " rm[t] " | " rd[t] " | " rs[t] " |" }
      print ""
      for (r = 1; r <= run; r++) if (r in same) print "- same thread, 1 thread, run " r ": " same[r]
    }' $files
  echo
  echo "Whole outputs: bench-heap.N.txt in $out (the Mops/s of every thread count, the manager's figures)."
} > "$out/summary.md"
echo
echo "==== summary ($out/summary.md)"
cat "$out/summary.md"
exit $status
