#!/bin/sh
# test-gpu-corpus.sh: scripts/gpu-corpus.sh run here, on the driver the
# suite runs on, over a corpus of three logs (CORPUS: two small ones and
# serve-mixed of the corpus) and one pass each (REPLAY_ARGS=--quick), so
# that the script the GPU run depends on is known to work before it
# reaches a GPU: a table per log with the four backends and none, the corpus's
# table with a row per log, the figure recorded on simcuda beside the log
# of the corpus, the medians and counts, the failure of a log that cannot
# be generated, and the usage error.
b=${CUEMM_TOP_BUILDDIR:-.}
src=${top_srcdir:-$(dirname "$0")/..}
script="$src/scripts/gpu-corpus.sh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-gpu-corpus.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
# the script runs make in the build tree: not as a job of this make
unset MAKEFLAGS MFLAGS MAKELEVEL
if test "${CUEMM_TEST_DRIVER:-sim}" != system; then
  SIMCUDA_CAPACITY=80G
  export SIMCUDA_CAPACITY
fi
n=0
check() { d=$1; shift; n=$((n + 1)); if "$@"; then echo "ok $n - $d"; else echo "not ok $n - $d"; fi; }
has() { grep -q -e "$2" "$1"; }
echo "1..16"

cat > "$tmp/corpus.txt" <<'LIST'
# a small corpus for the test
tiny-cupy   cupy-array --steps 300 --elems-max 200000 --seed 3
tiny-serve  serve-mixed --steps 6 --layers 2 --hidden 256 --kv-mib 16 --seed 2
serve-mixed serve-mixed --seed 1
LIST
TMPDIR=$tmp KEEP_LOGS=1 CORPUS="$tmp/corpus.txt" REPLAY_ARGS=--quick sh "$script" "$tmp/out" "$b" > "$tmp/run.txt" 2>&1; rc=$?
sed 's/^/# /' "$tmp/run.txt"
check "the run exits 0 (exit $rc)" test $rc -eq 0
check "a table per log, with its events and streams" \
  has "$tmp/run.txt" "^tiny-serve: [0-9]* events, 4 streams, peak live"
for k in cuMemAlloc cuMemAllocAsync cuemm-async cuemm-deferred none; do
  check "tiny-cupy's table has $k with its ns per event and footprint" \
    has "$tmp/run.txt" "^  $k  *[0-9.]*  *\([0-9.]*\|n/a\)  *0$"
done
check "the corpus's table has a row per log, cuemm-async's footprint to 4 places" \
  test "$(grep -c '^[a-z-]*  *[0-9]*  *[0-9]\.[0-9][0-9][0-9][0-9] ' "$tmp/run.txt")" = 3
recorded=$(awk '$1 == "serve-mixed" { print $4 }' "$src/tests/fixtures/corpus-footprint.txt")
check "a log of the corpus shows the figure recorded on simcuda ($recorded), the others none" \
  test -n "$recorded" -a "$(awk '$1 ~ /^(tiny-cupy|tiny-serve|serve-mixed)$/ { printf "%s ", $7 }' "$tmp/run.txt")" = "none none $recorded "
check "the corpus's table ends each row with none's ns per event, the replay's own" \
  test "$(awk '$1 ~ /^(tiny-cupy|tiny-serve|serve-mixed)$/ && NF == 8 && $8 ~ /^[0-9]+\.[0-9]$/' "$tmp/run.txt" | wc -l)" = 3
check "the medians, the logs equal to simcuda's figures and those above 1.10" \
  test "$(grep -c -e '^median footprint: cuemm-async [0-9]\.[0-9]*, cuMemAllocAsync' \
    -e '^cuemm-async footprint equal to the one recorded on simcuda: [01] of the 1 logs recorded there$' \
    -e '^cuemm-async above 1.10: [0-9]* of 3 logs' "$tmp/run.txt")" = 3
check "the logs (KEEP_LOGS=1), replays and summary are written under OUTDIR" \
  test -s "$tmp/out/logs/tiny-cupy.csv" -a -s "$tmp/out/replay-tiny-serve.txt" -a -s "$tmp/out/summary.txt"
check "without KEEP_LOGS the logs are not kept, nor the empty work directory" \
  test ! -d "$tmp/out2/logs" -a -z "$(ls -d "$tmp"/cuemm-corpus.* 2>/dev/null)"
check "OUTDIR/corpus-footprint.txt has the fixture's format, serve-mixed's events and peak as recorded" \
  test "$(grep -v '^#' "$tmp/out/corpus-footprint.txt" | awk 'NF == 5' | wc -l)" = 3 -a \
  "$(awk '$1 == "serve-mixed" { print $2, $3 }' "$tmp/out/corpus-footprint.txt")" = \
  "$(awk '$1 == "serve-mixed" { print $2, $3 }' "$src/tests/fixtures/corpus-footprint.txt")"

printf 'bad  cupy-array --steps 0\n' > "$tmp/bad.txt"
TMPDIR=$tmp CORPUS="$tmp/bad.txt" REPLAY_ARGS=--quick sh "$script" "$tmp/out2" "$b" > "$tmp/bad.out" 2>&1; rc=$?
check "a log that cannot be generated is named with the generator's message, exit 1 (exit $rc)" \
  test $rc -eq 1 -a "$(grep -c "gpu-corpus: cuemm-tracegen cupy-array --steps 0: cuemm-tracegen: cupy-array --steps: 0 is outside" "$tmp/bad.out")" -ge 1
sh "$script" > "$tmp/usage.txt" 2>&1; rc=$?
check "no OUTDIR is a usage error (exit $rc)" test $rc -eq 2 -a "$(cat "$tmp/usage.txt")" = "usage: scripts/gpu-corpus.sh OUTDIR [TREE]"
