#!/bin/sh
# gpu-corpus.sh: the trace corpus on a GPU.  Generates every log of
# tests/fixtures/corpus.txt with tools/cuemm-tracegen and replays each
# through all four backends of tools/cuemm-replay (cuMemAlloc, the driver's
# pool cuMemAllocAsync, cuemm-async, cuemm-deferred) and `none`, the
# replay's own time per event (no allocator: the floor under every
# figure), 3 timed passes, each thread of a log on a thread of its own
# (--threads), then prints a table per log (ns per event and footprint of
# each backend) and one over the corpus: the footprints of cuemm-async and
# cuMemAllocAsync, their ns per event, the footprint recorded on simcuda
# (tests/fixtures/corpus-footprint.txt), which the GPU's should equal, and
# none's ns per event.
#
#   scripts/gpu-corpus.sh OUTDIR [TREE]
#
# TREE (default .) is either a configured cuemm tree (an unpacked `make
# dist` tarball, configured: its Makefile is used as it is), or a checkout
# holding .gpu/cuemm-*.tar.gz (scripts/gpu-run.sh pack makes it where the
# autotools are): the tarball is unpacked into a directory under
# ${TMPDIR:-/tmp}, configured and built there (gcc and make; no autotools,
# no libtool needed), so that OUTDIR holds results only.  The logs are
# generated into that directory too (KEEP_LOGS=1: into OUTDIR/logs), since
# the generator makes them again from the list.  Writes to OUTDIR
# replay-NAME.txt (cuemm-replay's output, progress in .err), gpu.txt,
# build.log, summary.txt (the tables) and corpus-footprint.txt (the figures
# in the format of tests/fixtures/corpus-footprint.txt, the driver's
# pool's filled in).  About 3 to 5 minutes on an H100; each replay stops
# at LOG_TIMEOUT seconds (default 150).  CORPUS names another list
# (default the tree's tests/fixtures/corpus.txt); REPLAY_ARGS replaces
# `--reps 3` (tests/test-gpu-corpus.sh runs it on simcuda with --quick).
# Exit 0 when every log replayed.
set -u
out=${1:-}
tree=${2:-.}
test -n "$out" || { echo "usage: scripts/gpu-corpus.sh OUTDIR [TREE]" >&2; exit 2; }
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)
tree=$(cd "$tree" && pwd) || exit 2
start=$(date +%s)
work=$(mktemp -d "${TMPDIR:-/tmp}/cuemm-corpus.XXXXXX") || exit 1
logs=$work/logs
test "${KEEP_LOGS:-0}" = 1 && logs=$out/logs
# the work directory stays when it holds the build
trap 'rm -rf "$work/logs"; rmdir "$work" 2> /dev/null' EXIT
mkdir -p "$logs" || exit 1

if test -f "$tree/Makefile" && grep -q '^tools_cuemm_tracegen_SOURCES' "$tree/Makefile"; then
  b=$tree
else
  tarball=$(ls "$tree"/.gpu/cuemm-*.tar.gz 2>/dev/null | head -n 1)
  if test -z "$tarball"; then
    echo "gpu-corpus: $tree is neither a configured cuemm tree nor holds .gpu/cuemm-*.tar.gz" \
      "(run 'scripts/gpu-run.sh pack' where the autotools are)" >&2
    exit 2
  fi
  tar -xzf "$tarball" -C "$work" || exit 1
  b=$(ls -d "$work"/cuemm-* | head -n 1)
  echo "gpu-corpus: building $(basename "$tarball") in $b"
  (cd "$b" && ./configure) > "$out/build.log" 2>&1 || { tail -n 30 "$out/build.log"; exit 1; }
fi
make -C "$b" -j"$(nproc 2>/dev/null || echo 2)" tools/cuemm-tracegen tools/cuemm-replay >> "$out/build.log" 2>&1 ||
  { tail -n 30 "$out/build.log"; exit 1; }
src=$(sed -n 's/^abs_top_srcdir = //p' "$b/Makefile")
list=${CORPUS:-${src:-$b}/tests/fixtures/corpus.txt}
rec=${src:-$b}/tests/fixtures/corpus-footprint.txt
test -f "$list" || { echo "gpu-corpus: no corpus list $list" >&2; exit 2; }

{ if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv 2>&1
  else
    echo "no nvidia-smi"
  fi
  grep -m1 'model name' /proc/cpuinfo; echo "cpus: $(nproc 2>/dev/null)"
  echo "tree: $b"
} > "$out/gpu.txt"
cat "$out/gpu.txt"

status=0
{
  echo "# the corpus's footprints (peak held / peak live) on $(sed -n 2p "$out/gpu.txt" | cut -d, -f1), written by"
  echo "# scripts/gpu-corpus.sh (${REPLAY_ARGS:---reps 3 --threads}); the format of tests/fixtures/corpus-footprint.txt"
  echo "# name events peak-live cuemm-async cuMemAllocAsync"
} > "$out/corpus-footprint.txt"
sum="$out/summary.txt"
rows="$out/rows.txt"
: > "$rows"
: > "$sum"
# A field of cuemm-replay's summary row: trace backend events streams
# ns/event peak-live peak-held footprint oom.
field() { awk -v t="$1" -v k="$2" -v c="$3" '$1 == t && $2 == k { print $c; exit }' "$4"; }
names=$(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$list" | awk '{ print $1 }')
for name in $names; do
  args=$(sed -e 's/#.*//' "$list" | awk -v n="$name" '$1 == n { $1 = ""; print; exit }')
  log="$logs/$name.csv"
  case $args in
    " @"*) # a log recorded from a program, gzipped beside the list
      if ! gzip -dc "$(dirname "$list")/${args# @}" > "$log" 2> "$out/gen-$name.err"; then
        echo "gpu-corpus: $name: ${args# @}: $(cat "$out/gen-$name.err")" | tee -a "$sum" >&2
        status=1
        continue
      fi ;;
    *)
      # shellcheck disable=SC2086
      if ! "$b/tools/cuemm-tracegen" $args > "$log" 2> "$out/gen-$name.err"; then
        echo "gpu-corpus: cuemm-tracegen$args: $(cat "$out/gen-$name.err")" | tee -a "$sum" >&2
        status=1
        continue
      fi ;;
  esac
  rm -f "$out/gen-$name.err"
  r="$out/replay-$name.txt"
  # shellcheck disable=SC2086
  timeout "${LOG_TIMEOUT:-150}" "$b/tools/cuemm-replay" --backends all,none ${REPLAY_ARGS:---reps 3 --threads} "$log" \
    > "$r" 2> "$out/replay-$name.err"
  rc=$?
  # 3: replayed, but allocations failed out of memory (the table's oom
  # column counts them): said, and the log tabulated all the same.
  if test $rc -eq 3; then
    echo "gpu-corpus: cuemm-replay on $name: allocations failed out of memory: $(grep -m1 'failed out of memory' "$out/replay-$name.err")" | tee -a "$sum" >&2
  elif test $rc -ne 0; then
    echo "gpu-corpus: cuemm-replay on $name: exit $rc; $(tail -n 2 "$out/replay-$name.err")" | tee -a "$sum" >&2
    status=1
    continue
  fi
  t=$name.csv
  events=$(field "$t" cuemm-async 3 "$r") live=$(field "$t" cuemm-async 6 "$r")
  simrec=$(awk -v n="$name" '$1 == n { print $4; exit }' "$rec" 2>/dev/null)
  {
    echo
    printf '%s: %s events, %s streams, peak live %s bytes (%s GiB)  [cuemm-tracegen%s]\n' "$name" "$events" \
      "$(field "$t" cuemm-async 4 "$r")" "$live" "$(awk -v l="$live" 'BEGIN { printf "%.2f", l / 1073741824 }')" "$args"
    printf '  %-16s %12s %10s %6s\n' backend ns/event footprint oom
    for k in cuMemAlloc cuMemAllocAsync cuemm-async cuemm-deferred none; do
      printf '  %-16s %12s %10s %6s\n' "$k" "$(field "$t" "$k" 5 "$r")" "$(field "$t" "$k" 8 "$r")" "$(field "$t" "$k" 9 "$r")"
    done
  } | tee -a "$sum"
  # footprints to 4 places from the bytes (the table shows 2)
  fp() { awk -v h="$(field "$t" "$1" 7 "$r")" -v l="$live" 'BEGIN { if (h ~ /^[0-9]+$/ && l > 0) printf "%.4f", h / l; else print "n/a" }'; }
  echo "$name $events $(fp cuemm-async) $(fp cuMemAllocAsync) $(field "$t" cuemm-async 5 "$r") $(field "$t" cuMemAllocAsync 5 "$r") ${simrec:-none} $(field "$t" none 5 "$r")" >> "$rows"
  echo "$name $events $live $(fp cuemm-async) $(fp cuMemAllocAsync)" >> "$out/corpus-footprint.txt"
done

{
  echo
  echo "## the corpus: footprint (peak held / peak live) and ns per event, ${REPLAY_ARGS:---reps 3 --threads}"
  printf '%-16s %7s %12s %16s %14s %18s %14s %12s\n' log events cuemm-async cuMemAllocAsync "cuemm ns/ev" "cuMemAllocAsync ns" \
    "simcuda cuemm" "none ns/ev"
  awk '{ printf "%-16s %7s %12s %16s %14s %18s %14s %12s\n", $1, $2, $3, $4, $5, $6, $7, $8 }' "$rows"
  med() { awk -v c="$1" '$c ~ /^[0-9.]+$/ { print $c }' "$rows" | sort -n |
    awk '{ v[NR] = $1 } END { if (NR) printf "%.4f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; else print "n/a" }'; }
  echo "median footprint: cuemm-async $(med 3), cuMemAllocAsync $(med 4)"
  same=$(awk '$7 != "none" && $3 == $7' "$rows" | wc -l) recd=$(awk '$7 != "none"' "$rows" | wc -l)
  all=$(wc -l < "$rows")
  echo "cuemm-async footprint equal to the one recorded on simcuda: $same of the $recd logs recorded there"
  awk '$7 != "none" && $3 != $7 { print "  differs: " $1 " GPU " $3 ", simcuda " $7 }' "$rows"
  above=$(awk '$3 ~ /^[0-9.]+$/ && $3 > 1.10' "$rows" | wc -l)
  echo "cuemm-async above 1.10: $above of $all logs"
  echo "gpu-corpus: done in $(($(date +%s) - start)) s; tables in $out, the build in $b"
} | tee -a "$sum"
exit $status
