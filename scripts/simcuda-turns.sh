#!/bin/sh
# simcuda-turns.sh: two built trees of cuemm taking turns on this machine,
# on simcuda (or on the GPU with DRIVER=system): bench-stream's same-stream
# pair by size and the trace corpus replayed through cuemm-async (3 timed
# passes a log, each log's threads on threads of their own), ROUNDS rounds
# (default 5), the order of the trees swapped each round.  Prints, per size
# and per log, the median of each tree's rounds and the ratio B / A.
#
#   scripts/simcuda-turns.sh TREE_A TREE_B [ROUNDS]
#
# A tree is a configured build directory where `make`, `make
# bench/bench-stream` and `make tests/simcuda/libcuda.la` have run; the
# logs are made once, by TREE_A's cuemm-tracegen from its
# tests/fixtures/corpus.txt, so both trees replay the same events.  A
# reference tree from the project's history: `git worktree add /tmp/ref
# REV`, then the README's build in it.
set -u
a=${1:-} b=${2:-} rounds=${3:-5}
test -n "$a" && test -n "$b" || { echo "usage: scripts/simcuda-turns.sh TREE_A TREE_B [ROUNDS]" >&2; exit 2; }
a=$(cd "$a" && pwd) && b=$(cd "$b" && pwd) || exit 2
for t in "$a" "$b"; do
  for f in bench/bench-stream tools/cuemm-replay tools/cuemm-tracegen; do
    test -x "$t/$f" || { echo "simcuda-turns: $t/$f is not built" >&2; exit 2; }
  done
done
work=$(mktemp -d "${TMPDIR:-/tmp}/cuemm-turns.XXXXXX") || exit 1
trap 'test -n "${KEEP:-}" || rm -rf "$work"' EXIT
SIMCUDA_CAPACITY=80G
export SIMCUDA_CAPACITY

# The corpus's logs, made once.
names=$(sed -e 's/#.*//' "$a/tests/fixtures/corpus.txt" 2>/dev/null | awk 'NF { print $1 }')
src_a=$(sed -n 's/^abs_top_srcdir = //p' "$a/Makefile")
for name in $names; do
  args=$(sed -e 's/#.*//' "$src_a/tests/fixtures/corpus.txt" | awk -v n="$name" '$1 == n { $1 = ""; print; exit }')
  case $args in
    " @"*) gzip -dc "$src_a/tests/fixtures/${args# @}" > "$work/$name.csv" ;;
    *) # shellcheck disable=SC2086
       "$a/tools/cuemm-tracegen" $args > "$work/$name.csv" ;;
  esac || { echo "simcuda-turns: no log $name" >&2; exit 1; }
done

# One tree's turn: "TREE KIND KEY NS" lines into $work/rows.
turn() {
  t=$1 tag=$2
  env=
  test "${DRIVER:-simcuda}" = system || env="LD_LIBRARY_PATH=$t/tests/simcuda/.libs"
  env $env "$t/bench/bench-stream" --quick 2>/dev/null |
    awk -v t="$tag" '/^## same-stream/ { on = 1; next } /^##/ { on = 0 } on && $1 ~ /^[0-9]+$/ { print t, "pair", $1, $3 }' >> "$work/rows"
  for name in $names; do
    env $env "$t/tools/cuemm-replay" --backends cuemm-async --reps 3 --threads --quiet "$work/$name.csv" 2>/dev/null |
      awk -v t="$tag" -v n="$name.csv" '$1 == n && $2 == "cuemm-async" { print t, "log", $1, $5 }' >> "$work/rows"
  done
}
: > "$work/rows"
r=1
while test $r -le "$rounds"; do
  if test $((r % 2)) -eq 1; then turn "$a" A; turn "$b" B; else turn "$b" B; turn "$a" A; fi
  echo "# round $r of $rounds done" >&2
  r=$((r + 1))
done

echo "# A: $a"
echo "# B: $b"
echo "# $(uname -m), $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //'), $(nproc) cores; ${DRIVER:-simcuda}; $rounds rounds in turns"
awk '
  function median(s,   n, v, i, j, x) {
    n = split(s, v, " ")
    for (i = 2; i <= n; i++) { x = v[i]; for (j = i - 1; j >= 1 && v[j] > x; j--) v[j + 1] = v[j]; v[j + 1] = x }
    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
  }
  { k = $2 " " $3; if (!(k in seen)) { seen[k] = 1; order[++nk] = k } ns[$1 " " k] = ns[$1 " " k] " " $4 }
  END {
    printf "%-4s %-22s %10s %10s %8s\n", "", "size or log", "A ns", "B ns", "B / A"
    for (i = 1; i <= nk; i++) {
      split(order[i], p, " ")
      ma = median(ns["A " order[i]]); mb = median(ns["B " order[i]])
      printf "%-4s %-22s %10.1f %10.1f %7.3fx\n", p[1], p[2], ma, mb, (ma > 0 ? mb / ma : 0)
      if (p[1] == "log") { lr[++nl] = ma > 0 ? mb / ma : 0 } else { pr[++np] = ma > 0 ? mb / ma : 0 }
    }
    s = ""; for (i = 1; i <= np; i++) s = s " " pr[i]; if (np) printf "median B / A, pairs: %.3fx\n", median(s)
    s = ""; for (i = 1; i <= nl; i++) s = s " " lr[i]; if (nl) printf "median B / A, logs: %.3fx\n", median(s)
  }' "$work/rows"
