#!/bin/sh
# test-tracegen.sh: what tools/cuemm-tracegen promises of its logs.  Every
# shape it lists is documented in --help with its parameters; each shape's
# log at its defaults is an RMM log in which every allocation is freed once
# and no live pointer is handed out twice, within 50,000 events, with a peak
# between 10 MB and 10 GB; the same seed gives the same bytes and another
# seed other bytes; the serving shapes use 2, 3 and 4 streams and the
# server its threads; sizes are multiples of 512 but for Numba's exact
# ones.  Then the errors: each with its message and exit status, and no
# partial log on standard output.
# `--part K/N` checks the shapes K, K+N, ... alone (the first part also the
# rest), so that make check runs it as N tests (test-tracegen-K.sh) and
# shows each as it ends; without it, everything.
part= parts=
case ${1:-} in
  --part) part=${2%/*} parts=${2#*/} ;;
  "") ;;
  *) echo "usage: tests/test-tracegen.sh [--part K/N]" >&2; exit 2 ;;
esac
b=${CUEMM_TOP_BUILDDIR:-.}
gen="$b/tools/cuemm-tracegen"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-tracegen.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
n=0
check() { d=$1; shift; n=$((n + 1)); if "$@"; then echo "ok $n - $d"; else echo "not ok $n - $d"; fi; }

shapes=$("$gen" --list)
count=$(printf '%s\n' $shapes | grep -c .)
rest=1
if test -n "$part"; then
  shapes=$(printf '%s\n' $shapes | awk -v k="$part" -v n="$parts" '(NR - 1) % n == k - 1')
  test "$part" = 1 || rest=0
fi
echo "1..$((4 * $(printf '%s\n' $shapes | grep -c .) + 12 * rest))"
test $rest = 0 || check "at least ten shapes ($count)" test "$count" -ge 10
"$gen" --help > "$tmp/help.txt"

# One line of facts a log: events, allocations never freed or freed twice
# (or frees of unknown pointers), allocations at a live pointer, peak live,
# distinct streams, distinct threads, sizes not a multiple of 512.
facts() {
  awk -F, 'NR == 1 { if ($0 != "Thread,Time,Action,Pointer,Size,Stream") bad++; next }
    { ev++; st[$6] = 1; th[$1] = 1; if ($5 % 512) odd++ }
    $3 == "allocate" { if ($4 in live) dup++; live[$4] = $5; cur += $5; if (cur > peak) peak = cur; next }
    $3 == "free" { if (!($4 in live)) bad++; else { cur -= live[$4]; delete live[$4] } next }
    { bad++ }
    END { for (p in live) bad++; ns = 0; for (s in st) ns++; nt = 0; for (t in th) nt++
          printf "%d %d %d %.0f %d %d %d\n", ev, bad, dup, peak, ns, nt, odd }' "$1"
}
for s in $shapes; do
  "$gen" "$s" > "$tmp/$s.csv"; rc=$?
  set -- $(facts "$tmp/$s.csv")
  check "$s: exit $rc, $1 events (at most 50000), every allocation freed once ($2 faults), no live pointer reused ($3)" \
    test $rc -eq 0 -a "$1" -gt 1000 -a "$1" -le 50000 -a "$2" = 0 -a "$3" = 0
  check "$s: peak live $4 bytes, between 10 MB and 10 GB" \
    awk -v p="$4" 'BEGIN { exit !(p >= 1e7 && p <= 1e10) }'
  case $s in
    serve-chat) want="2 1" ;; serve-rag) want="3 1" ;; serve-mixed) want="4 1" ;; mt-server) want="5 5" ;;
    *) want= ;;
  esac
  if test -n "$want"; then
    check "$s: $5 streams and $6 threads (want $want)" test "$5 $6" = "$want"
  elif test "$s" = numba-kernels; then
    check "$s: Numba's sizes are exact bytes ($7 not a multiple of 512)" test "$7" -gt 0
  else
    check "$s: sizes rounded to 512 bytes ($7 not)" test "$7" = 0
  fi
  np=$(sed -n "/^$s: /,/^\$/p" "$tmp/help.txt" | grep -c '^  --[a-z-]* .*([0-9]* \[[0-9]*\.\.[0-9]*\])$')
  check "$s: documented in --help, $np parameters with default and range" test "$np" -ge 3
done

test $rest = 1 || exit 0
"$gen" cupy-array --steps 500 --seed 7 > "$tmp/a.csv"
"$gen" cupy-array --steps=500 --seed=7 > "$tmp/b.csv"
"$gen" cupy-array --steps 500 --seed 8 > "$tmp/c.csv"
check "the same seed gives the same bytes" cmp -s "$tmp/a.csv" "$tmp/b.csv"
check "another seed gives another log" test -n "$(cmp "$tmp/a.csv" "$tmp/c.csv" 2>&1)"
"$gen" mt-server --threads 3 --requests 5 > "$tmp/mt.csv"
set -- $(facts "$tmp/mt.csv")
check "a parameter is applied: mt-server --threads 3 has 4 threads (the main one loads the model)" test "$6" = 4

err() { # err DESCRIPTION EXIT EXPECTED-MESSAGE ARGS...: fails so, nothing on stdout
  d=$1 x=$2 e=$3; shift 3
  "$gen" "$@" > "$tmp/out" 2> "$tmp/err"; rc=$?
  check "$d (exit $rc): $e" test $rc -eq "$x" -a ! -s "$tmp/out" -a "$(sed -n 1p "$tmp/err")" = "$e"
}
err "more events than --max-events" 1 \
  "cuemm-tracegen: gpt2-train makes more than 100 events with these parameters; lower --steps (or the like) or raise --max-events" \
  gpt2-train --max-events 100
err "an unknown shape" 2 "cuemm-tracegen: unknown shape 'gpt5' (--list names them)" gpt5
err "a parameter of another shape" 2 "cuemm-tracegen: kv-cache has no parameter --threads (--help lists each shape's)" \
  kv-cache --threads 2
err "a value out of range" 2 "cuemm-tracegen: serve-rag --streams: 5 is outside 1..4" serve-rag --streams 5
err "a value that is not a number" 2 "cuemm-tracegen: --seed: '1x' is not a whole number" moe-train --seed 1x
err "bounds the wrong way round" 2 "cuemm-tracegen: bert-train: --seq-min 600 is more than --seq-max 512" \
  bert-train --seq-min 600
err "no shape" 2 "cuemm-tracegen: no SHAPE named"
err "a missing value" 2 "cuemm-tracegen: option '--steps' needs a value" numba-kernels --steps
