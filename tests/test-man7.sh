#!/bin/sh
# test-man7.sh: man/cuemm.7, the page of the environment variables, is what
# tools/cuemm-man7 prints from src/base/config.c's table now (not a stale copy),
# and names every variable of the table and every CUEMM_* variable the
# library or its Python modules read (getenv in src/, os.environ in python/).
top_srcdir=${top_srcdir:-$(dirname "$0")/..}
b=${CUEMM_TOP_BUILDDIR:-.}
gen=$b/tools/cuemm-man7
page=$top_srcdir/man/cuemm.7
. "$top_srcdir/tests/tap.sh"
if ! test -x "$gen"; then
  echo "1..0 # SKIP $gen is not built"
  exit 0
fi
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

"$gen" > "$tmp/page.7"
check "the generator prints a page" test -s "$tmp/page.7"
check "man/cuemm.7 is the generator's page (run make to regenerate it)" cmp -s "$tmp/page.7" "$page"
cmp -s "$tmp/page.7" "$page" || diff "$page" "$tmp/page.7" | head -n 20 | sed 's/^/# /'

# The page's entries: one ".TP" then ".B NAME" each.
sed -n '/^\.TP$/{n;s/^\.B //p;}' "$page" | sort > "$tmp/documented"
"$gen" --list | sort > "$tmp/listed"
check "the table and the list of other variables have $(wc -l < "$tmp/listed") variables" \
  test "$(wc -l < "$tmp/listed")" -ge 20
missing=$(comm -23 "$tmp/listed" "$tmp/documented")
check "every variable of the table and of the other list has an entry" test -z "$missing"
test -z "$missing" || echo "$missing" | sed 's/^/# missing: /'

# Every CUEMM_* variable the code reads, by scanning the sources.
{
  grep -ho 'getenv("CUEMM_[A-Z0-9_]*")' "$top_srcdir"/src/*.c | sed 's/getenv("\(.*\)")/\1/'
  grep -ho 'environ\(\.get\)\{0,1\}[[(]"CUEMM_[A-Z0-9_]*"' "$top_srcdir"/python/* | sed 's/.*"\(CUEMM_[A-Z0-9_]*\)"/\1/'
  # config.c reads its table's names through a variable: those rows.
  sed -n 's/^  { "\(CUEMM_[A-Z0-9_]*\)", "[a-z_]*", KNOB_.*/\1/p' "$top_srcdir/src/base/config.c"
} | sort -u > "$tmp/read"
check "the scan finds the variables read ($(wc -l < "$tmp/read"))" test "$(wc -l < "$tmp/read")" -ge 20
unlisted=$(comm -23 "$tmp/read" "$tmp/documented")
check "every CUEMM_* variable read in src/ and python/ is on the page" test -z "$unlisted"
test -z "$unlisted" || echo "$unlisted" | sed 's/^/# not on the page: /'
# The suite runs with every CUEMM_* variable read unset (Makefile.am's
# AM_TESTS_ENVIRONMENT), so that the shell's settings do not reach the tests.
sed -n '/^AM_TESTS_ENVIRONMENT = /,/CUEMM_TEST_DRIVER=/p' "$top_srcdir/Makefile.am" | tr ' \t;\\' '\n\n\n\n' |
  grep '^CUEMM_[A-Z0-9_]*$' | sort -u > "$tmp/unset"
kept=$(comm -23 "$tmp/read" "$tmp/unset")
check "make check unsets every CUEMM_* variable read" test -z "$kept"
test -z "$kept" || echo "$kept" | sed 's/^/# not unset for the tests: /'
for v in CUEMM_LIBCUDA CUEMM_LIBRARY CUEMM_LOG CUEMM_POOL_CHUNK; do
  check "$v is on the page" grep -qx "$v" "$tmp/documented"
done
if command -v groff > /dev/null 2>&1; then
  warn=$(groff -man -ww -z "$page" 2>&1)
  check "groff reads the page without a warning" test -z "$warn"
  test -z "$warn" || echo "$warn" | sed 's/^/# /'
else
  n=$((n + 1))
  echo "ok $n # SKIP no groff to read the page with"
fi
tap_done
