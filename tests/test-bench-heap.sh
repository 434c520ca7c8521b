#!/bin/sh
# test-bench-heap.sh: bench-heap's control flow on the simulated driver
# (--quick, cuMemAllocAsync measured with --force-driver since simcuda has
# no pool attributes): every maximum has its table with a row per thread
# count and its ratios, the manager's figures follow the 2 MiB and 8 MiB
# tables (a row per thread count, one cache per thread, no less mapped than
# live), the remote table has a row per count of threads in pairs, and
# cuemm's live count matched the blocks the threads held after every run.
# --part and --max run one part, one maximum; --warm sets the uncounted
# span before each timed one; bad options exit 2 with a message.  Timings
# on simcuda mean nothing and are not looked at (on a loaded machine a
# thread may get no turn in a 30 ms span: a figure of 0 and a ratio n/a
# are accepted); scripts/gpu-heap.sh runs it in full on a GPU.
b=${CUEMM_TOP_BUILDDIR:-.}
echo "1..12"
if test "${CUEMM_TEST_DRIVER:-sim}" = system; then
  for i in 1 2 3 4 5 6 7 8 9 10 11 12; do echo "ok $i # SKIP runs on the GPU in full (scripts/gpu-heap.sh)"; done
  exit 0
fi
num='[0-9]+\.[0-9]+'
x="($num"'x|n/a)'
out=$("$b/bench/bench-heap" --quick --force-driver 2>&1); rc=$?
echo "$out" | sed 's/^/# /'
if test $rc -eq 0; then echo "ok 1 - bench-heap --quick runs"; else echo "not ok 1 - bench-heap --quick runs (exit $rc)"; fi
# Part 1: five tables of five rows (threads, cuemm, driver, malloc, two ratios), the driver measured.
n=$(echo "$out" | grep -cE "^ +(1|2|4|8|16) +$num +$num +$num +$x +$x$")
if test "$n" -eq 25; then echo "ok 2 - five maxima, five thread counts, three allocators"; else echo "not ok 2 - 25 rows of mixed sizes (got $n)"; fi
n=0
for m in "512 B" "8 KiB" "128 KiB" "2 MiB" "8 MiB"; do
  echo "$out" | grep -qE "^16 threads / 1 thread \($m\): cuemm $x, driver $x, malloc $x$" &&
    echo "$out" | grep -qE "^one thread, cuemm / driver \($m\): $x$" &&
    echo "$out" | grep -qE "^ +$m +$x +$x +$x +$x$" && n=$((n + 1))
done
if test "$n" -eq 5; then echo "ok 3 - 16T/1T, one thread's cuemm/driver and a summary row for each maximum"; else echo "not ok 3 - ratios for five maxima (got $n)"; fi
# The manager's figures at 2 MiB and 8 MiB: threads run live mapped chunks grows cached c.blocks heaps reclaims events steals.
fig=$(echo "$out" | grep -E "^ +(1|2|4|8|16) +1 +$num +$num( +[0-9]+){2} +$num( +[0-9]+){5}$")
n=$(echo "$fig" | grep -c .)
bad=$(echo "$fig" | awk '$9 != $1 || $4 < $3 || $3 <= 0 || $5 < 1 { print }')
if test "$n" -eq 10 && test -z "$bad"; then echo "ok 4 - the manager's figures after each run at 2 MiB and 8 MiB"
else echo "not ok 4 - ten rows of the manager's figures, a cache per thread, mapped >= live > 0 (got $n; wrong: $bad)"; fi
# Part 2: four rows (threads, cuemm, driver, malloc, three ratios) and the same-thread line.
n=$(echo "$out" | grep -cE "^ +(2|4|8|16) +$num +$num +$num +$x +$x +$x$")
if test "$n" -eq 4 && echo "$out" | grep -qE "^same thread, 1 thread: cuemm $num, driver $num, malloc $num Mpairs/s \(cuemm/malloc $x, cuemm/drv $x\)$"
then echo "ok 5 - frees from another thread at 2, 4, 8, 16 threads, and one thread's pairs"
else echo "not ok 5 - the remote table (got $n rows)"; fi
# 5 maxima x 5 counts x (paused, after) + 5 remote runs.
if echo "$out" | grep -q "^consistency: 55 checks of cuemm's live count, 0 mismatches$"; then
  echo "ok 6 - cuemm's live count matched the blocks held, after every run"
else
  echo "not ok 6 - cuemm's live count matched the blocks held, after every run"
fi
out=$("$b/bench/bench-heap" --quick --part sizes --max 2M 2>&1); rc=$?
echo "$out" | sed 's/^/# /'
n=$(echo "$out" | grep -c '^## sizes ')
if test $rc -eq 0 && test "$n" -eq 1 && echo "$out" | grep -q '^## sizes 256 B \.\. 2 MiB ' &&
   ! echo "$out" | grep -q '^## frees from another thread' &&
   echo "$out" | grep -q "^consistency: 10 checks of cuemm's live count, 0 mismatches$"
then echo "ok 7 - --part sizes --max 2M runs that table alone"; else echo "not ok 7 - --part sizes --max 2M (exit $rc, $n tables)"; fi
# Without --force-driver simcuda's driver side is not measured and says so.
out=$("$b/bench/bench-heap" --quick --part remote 2>&1); rc=$?
echo "$out" | sed 's/^/# /'
n=$(echo "$out" | grep -cE "^ +(2|4|8|16) +$num +n/a +$num +$x +n/a +$x$")
if test $rc -eq 0 && test "$n" -eq 4 && ! echo "$out" | grep -q '^## sizes '; then
  echo "ok 8 - --part remote runs that part alone, the driver n/a without its pool"
else
  echo "not ok 8 - --part remote (exit $rc, $n rows)"
fi
out=$("$b/bench/bench-heap" --part all 2>&1); rc=$?
if test $rc -eq 2 && echo "$out" | grep -q -- "--part takes sizes or remote"; then echo "ok 9 - a bad --part exits 2 and says why"
else echo "not ok 9 - a bad --part exits 2 and says why (exit $rc: $out)"; fi
n=0
for v in 0 3X -5 5G 2Mx; do
  out=$("$b/bench/bench-heap" --max "$v" 2>&1); rc=$?
  test $rc -eq 2 && echo "$out" | grep -q -- "--max takes a size" && n=$((n + 1))
done
if test "$n" -eq 5; then echo "ok 10 - bad --max values exit 2 and say why"; else echo "not ok 10 - bad --max values (got $n of 5)"; fi
out=$("$b/bench/bench-heap" --quick --part sizes --max 512 --warm 5 2>&1); rc=$?
echo "$out" | sed 's/^/# /'
if test $rc -eq 0 && echo "$out" | grep -q '^## sizes 256 B \.\. 512 B .*one run of 30 ms after 5 ms uncounted)$' &&
   echo "$out" | grep -q "^consistency: 10 checks of cuemm's live count, 0 mismatches$"
then echo "ok 11 - --warm 5 leaves 5 ms of each run uncounted, and says so"; else echo "not ok 11 - --warm 5 (exit $rc)"; fi
n=0
for v in x -1 60001 5ms ""; do
  out=$("$b/bench/bench-heap" --warm "$v" 2>&1); rc=$?
  test $rc -eq 2 && echo "$out" | grep -q -- "--warm takes milliseconds from 0 to 60000" && n=$((n + 1))
done
out=$("$b/bench/bench-heap" --warm 2>&1); rc=$?
test $rc -eq 2 && echo "$out" | grep -q -- "--warm lacks its value" && n=$((n + 1))
if test "$n" -eq 6; then echo "ok 12 - bad --warm values exit 2 and say why"; else echo "not ok 12 - bad --warm values (got $n of 6)"; fi
