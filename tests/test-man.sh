#!/bin/sh
# test-man.sh: the manual pages against what they describe.  cuemm(3) must
# show every function cuemm.h declares, in its synopsis and with its
# description; cuemm-replay(1) every option tools/cuemm-replay.c accepts.
# Those checks read the pages' source and need nothing else.  Where Python
# runs, each page must also be what its generator makes of its source now
# (not stale); where groff runs, each page must format without a warning.
src=${top_srcdir:-$(dirname "$0")/..}
b=${CUEMM_TOP_BUILDDIR:-.}
py=${CUEMM_PYTHON:-python3}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-man.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
notok() { n=$((n + 1)); echo "not ok $n - $1"; }
skip() { n=$((n + 1)); echo "ok $n # SKIP $1"; }
check() { d=$1; shift; if "$@"; then ok "$d"; else notok "$d"; fi; }

# A generated page lives in the source tree (shipped in the tarball); look
# in the build tree first for one made there.
page() { if test -f "$b/man/$1"; then echo "$b/man/$1"; else echo "$src/man/$1"; fi; }
man3=$(page cuemm.3)
man1=$(page cuemm-replay.1)
# A page's text with the font and character escapes the generators write
# taken out, so that names read as in C and on the command line.
text() { sed -e 's/\\f[BIRP]//g' -e 's/\\-/-/g' -e 's/\\&//g' -e 's/\\e/\\/g' "$1"; }

echo "1..8"
check "cuemm(3) exists ($man3)" test -s "$man3"
check "cuemm-replay(1) exists ($man1)" test -s "$man1"

# ---- cuemm(3) against cuemm.h ----
# The functions cuemm.h declares: comments removed, every line at the
# margin that names cuemm_something( (declarations start at the margin,
# struct members and macros do not).
awk '
  { line = $0; out = "" }
  { while (line != "") {
      if (inc) { k = index(line, "*/"); if (k == 0) { line = "" } else { line = substr(line, k + 2); inc = 0 } }
      else { k = index(line, "/*"); if (k == 0) { out = out line; line = "" } else { out = out substr(line, 1, k - 1); line = substr(line, k + 2); inc = 1 } }
    }
    print out }' "$src/include/cuemm.h" |
  grep -E '^[A-Za-z_]' | grep -v '^#' | grep -oE '\bcuemm_[a-z0-9_]+[[:space:]]*\(' |
  sed 's/[[:space:]]*($//' | sort -u > "$tmp/declared"
text "$man3" > "$tmp/man3.txt"
sed -n '/^\.SH SYNOPSIS/,/^\.SH /p' "$tmp/man3.txt" > "$tmp/synopsis"
sed -n '/^\.SH FUNCTIONS/,/^\.SH /p' "$tmp/man3.txt" | grep '^\.B ' > "$tmp/described"
ndecl=$(wc -l < "$tmp/declared")
missing_syn= missing_desc=
for f in $(cat "$tmp/declared"); do
  grep -q "[ *]$f(" "$tmp/synopsis" || missing_syn="$missing_syn $f"
  grep -q "[ *]$f(" "$tmp/described" || missing_desc="$missing_desc $f"
done
if test "$ndecl" -ge 50 && test -z "$missing_syn"; then
  ok "cuemm(3)'s synopsis has all $ndecl functions cuemm.h declares"
else
  notok "cuemm(3)'s synopsis has all functions cuemm.h declares ($ndecl found in the header)"
  echo "# missing:$missing_syn"
fi
if test "$ndecl" -ge 50 && test -z "$missing_desc"; then
  ok "cuemm(3) describes all $ndecl functions"
else
  notok "cuemm(3) describes every function cuemm.h declares"
  echo "# missing:$missing_desc"
fi

# ---- cuemm-replay(1) against the options the program parses ----
grep -oE 'strcmp\(argv\[i\], "[^"]+"\)|option_value\([^"]*"[^"]+"\)' "$src/tools/cuemm-replay.c" |
  sed 's/.*"\([^"]*\)".*/\1/' | grep -v '^--$' | sort -u > "$tmp/options"
text "$man1" > "$tmp/man1.txt"
nopt=$(wc -l < "$tmp/options")
missing=
for o in $(cat "$tmp/options"); do
  grep -qE -e "(^|[^-A-Za-z0-9])$o([^-A-Za-z0-9]|$)" "$tmp/man1.txt" || missing="$missing $o"
done
if test "$nopt" -ge 8 && test -z "$missing"; then
  ok "cuemm-replay(1) names all $nopt options the program accepts"
else
  notok "cuemm-replay(1) names every option the program accepts ($nopt found in the source)"
  echo "# missing:$missing"
fi

# ---- the pages are what their sources make now ----
if test "$py" != ":" && "$py" -c 'import sys; sys.exit(sys.version_info < (3, 6))' 2>/dev/null; then
  "$py" "$src/man/gen-cuemm3.py" "$src/include/cuemm.h" "$src/man/cuemm3-prose.txt" > "$tmp/cuemm.3" &&
    cmp -s "$tmp/cuemm.3" "$man3"
  check "cuemm(3) is what man/gen-cuemm3.py makes of cuemm.h and cuemm3-prose.txt now (else: make remakes it)" test $? -eq 0
  "$py" "$src/man/gen-cuemm-replay1.py" "$src/tools/cuemm-replay.c" > "$tmp/cuemm-replay.1" &&
    cmp -s "$tmp/cuemm-replay.1" "$man1"
  check "cuemm-replay(1) is what man/gen-cuemm-replay1.py makes of cuemm-replay.c now" test $? -eq 0
else
  skip "no Python 3 here to remake cuemm(3) and compare"
  skip "no Python 3 here to remake cuemm-replay(1) and compare"
fi

# ---- the pages format cleanly ----
if command -v groff >/dev/null 2>&1; then
  warn=
  for p in "$man3" "$man1"; do
    groff -man -Tutf8 -ww "$p" > /dev/null 2> "$tmp/groff.err" || warn="$warn $p(exit $?)"
    if test -s "$tmp/groff.err"; then warn="$warn $p"; sed 's/^/# /' "$tmp/groff.err"; fi
  done
  check "both pages format with groff -man -ww, no warning${warn:+ (not:$warn)}" test -z "$warn"
else
  skip "groff is not installed, so the pages' formatting is not checked here (their contents are, above)"
fi
