#!/bin/sh
# test-cuemm-replay.sh: cuemm-replay reads RMM logs as RMM writes them, replays the
# traces in bench/traces through every backend the driver offers, prints
# their known peaks, and stops at a malformed line naming it.
b=${CUEMM_TOP_BUILDDIR:-.}
src=${top_srcdir:-.}
replay="$b/tools/cuemm-replay"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-cuemm-replay.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
n=0
check() { # check DESCRIPTION COMMAND...
  d=$1; shift
  n=$((n + 1))
  if "$@"; then echo "ok $n - $d"; else echo "not ok $n - $d"; fi
}
has() { printf '%s\n' "$out" | grep -q -e "$1"; }
row() { # the summary row of trace $1, backend $2
  printf '%s\n' "$out" | awk -v t="$1" -v k="$2" '$1 == t && substr($0, 30, 16) ~ "^" k " *$"'
}
col() { row "$1" "$2" | awk -v c="$3" '{ print $(NF - 7 + c) }'; } # 1 events .. 7 oom, from the end

echo "1..26"

out=$("$replay" --quick "$src/bench/traces/two-streams.csv" "$src/bench/traces/rmm-bare-hex.csv" 2>&1); rc=$?
printf '%s\n' "$out" | sed 's/^/# /'
check "replays the two traces (exit $rc)" test $rc -eq 0
check "two-streams: 10 events on 3 streams, peak live 3153920 bytes" \
  has "10 events replayed on 3 streams; peak live 3153920 bytes"
check "rmm-bare-hex (hex without 0x, an extra column): 6 events on 3 streams, peak live 268436456" \
  has "6 events replayed on 3 streams; peak live 268436456 bytes"
check "rmm-bare-hex: the allocate failure line is skipped and counted" has "skipped: 1 'allocate failure' lines"
for t in two-streams.csv rmm-bare-hex.csv; do
  for k in cuMemAlloc cuMemAllocAsync "cuemm-deferred"; do
    check "$t through $k: every event replayed, no out of memory" \
      test "$(col $t "$k" 1)" = "$(case $t in two*) echo 10 ;; *) echo 6 ;; esac)" -a "$(col $t "$k" 7)" = 0
  done
done
check "cuemm-async replays two-streams without out of memory, in one 32 MiB chunk" \
  test "$(col two-streams.csv cuemm-async 7)" = 0 -a "$(col two-streams.csv cuemm-async 5)" = 33554432
# One 32 MiB chunk holds the whole of two-streams, and the 256 MiB block of
# rmm-bare-hex needs 8 chunks with the 1000 bytes beside it in a ninth.
check "cuemm deferred holds one chunk for two-streams" test "$(col two-streams.csv "cuemm-deferred" 5)" = 33554432
check "cuemm deferred holds nine chunks for rmm-bare-hex" test "$(col rmm-bare-hex.csv "cuemm-deferred" 5)" = 301989888
if test "${CUEMM_TEST_DRIVER:-sim}" != system; then
  check "cuMemAlloc holds exactly the live bytes on simcuda" test "$(col two-streams.csv cuMemAlloc 5)" = 3153920
else
  echo "ok $((n = n + 1)) # SKIP simcuda's exact device accounting (CUEMM_TEST_DRIVER=system)"
fi
# With a 128 MiB pool of 2 MiB chunks, the 256 MiB block goes to cuMemAlloc
# and counts as held beside the pool's one chunk.
out=$(CUEMM_POOL_RESERVE=128MiB CUEMM_POOL_CHUNK=2MiB "$replay" --quick "$src/bench/traces/rmm-bare-hex.csv" 2>&1)
printf '%s\n' "$out" | sed 's/^/# /'
check "cuemm deferred counts its cuMemAlloc fallback as held: 256 + 2 MiB" \
  test "$(col rmm-bare-hex.csv "cuemm-deferred" 5)" = 270532608

# Lines RMM's adaptor does not write, or that only another writer would.
cat > "$tmp/odd.csv" <<'EOF'
Thread,Time,Action,Pointer,Size,Stream
1,00:00:00.000001,allocate,0xa000,4096,0x0
1,00:00:00.000002,resize,0xa000,8192,0x0
1,00:00:00.000003,free,0xb000,4096,0x0
1,00:00:00.000004,allocate,0xa000,512,0x0
1,00:00:00.000005,resize,0xa000,8192,0x0
1,00:00:00.000006,free,0xa000,512,0x1
EOF
out=$("$replay" --quick "$tmp/odd.csv" 2>&1); rc=$?
printf '%s\n' "$out" | sed 's/^/# /'
check "a trace with unknown actions and frees still replays (exit $rc)" test $rc -eq 0
check "unknown actions are counted by name" has "skipped: 2 lines of unknown action 'resize'"
check "a free of a pointer not live is counted and skipped" has "skipped: 1 frees of a pointer not live"
check "an allocation at a live pointer keeps the earlier one live to the end" \
  has "1 allocations at a pointer still live: the earlier one stays live to the end"
check "stream 0x1 is the default stream: one stream, 4096 bytes live at the end" \
  has "3 events replayed on 1 stream; peak live 4608 bytes (0.0 MiB); 4096 bytes in 1 allocations live at the end"

printf 'Thread,Time,Action,Pointer,Size\n1,0,allocate,0x1,1\n' > "$tmp/header.csv"
out=$("$replay" --quick "$tmp/header.csv" 2>&1); rc=$?
check "a header without Stream is refused at line 1 (exit $rc)" \
  test $rc -eq 1 -a "$out" = "cuemm-replay: $tmp/header.csv:1: not an RMM log: the header must start Thread,Time,Action,Pointer,Size,Stream; found '(missing column)'"
printf 'Thread,Time,Action,Pointer,Size,Stream\n\n1,0,allocate,0x1000,64,0x0\n1,0,free,0xZZ,64,0x0\n' > "$tmp/bad.csv"
out=$("$replay" --quick "$tmp/bad.csv" 2>&1); rc=$?
check "a pointer that is not hex stops the run with its line (exit $rc)" \
  test $rc -eq 1 -a "$out" = "cuemm-replay: $tmp/bad.csv:4: Pointer is not hex '0xZZ'"
printf 'Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate,0x1000,64\n' > "$tmp/short.csv"
out=$("$replay" --quick "$tmp/short.csv" 2>&1); rc=$?
check "a line of 5 columns stops the run with its line (exit $rc)" \
  test $rc -eq 1 -a "$out" = "cuemm-replay: $tmp/short.csv:2: fewer than the 6 columns Thread,Time,Action,Pointer,Size,Stream"
"$replay" --quick > "$tmp/usage" 2>&1; rc=$?
check "no log is a usage error (exit $rc)" test $rc -eq 2

# The recorder's conversion of PyTorch's trace entries (no torch needed),
# and its log read back by the replay.
py=${CUEMM_PYTHON:-python3}
if test "$py" != : && "$py" -c 'import sys; sys.exit(sys.version_info < (3, 8))' 2>/dev/null; then
  out=$("$py" "$src/scripts/torch-trace.py" --self-test --out "$tmp" 2>&1); rc=$?
  printf '%s\n' "$out" | sed 's/^/# /'
  check "torch-trace.py --self-test: the RMM log it writes is the one expected (exit $rc)" test $rc -eq 0
  out=$("$replay" --quick "$tmp/torch-selftest.csv" 2>&1); rc=$?
  printf '%s\n' "$out" | sed 's/^/# /'
  check "cuemm-replay reads the recorder's log: 5 events on 2 streams, peak live 5120 (exit $rc)" \
    has "5 events replayed on 2 streams; peak live 5120 bytes"
else
  echo "ok $((n = n + 1)) # SKIP no Python 3.8 or newer for scripts/torch-trace.py"
  echo "ok $((n = n + 1)) # SKIP no Python 3.8 or newer for scripts/torch-trace.py"
fi
