#!/bin/sh
# test-docs.sh: the documentation holds together.  README.md and
# docs/performance.md stay short enough to read (at most 200 lines each);
# the README links every page of docs/; every relative link of README.md,
# docs/*.md and bench/results/*.md leads to a file that exists, and every
# link's #anchor to a heading of that file; no page offers the deprecated
# Python module names (cuemm_cupy, cuemm_numba, cuemm_torch, cuemm_lib) to
# import, except on a line that says they are deprecated; Makefile.am
# ships every page.
top_srcdir=${top_srcdir:-$(dirname "$0")/..}
. "$top_srcdir/tests/tap.sh"
cd "$top_srcdir" || exit 1
if ! test -f README.md || ! test -d docs; then
  echo "1..0 # SKIP no README.md or docs/ in $top_srcdir"
  exit 0
fi
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

for f in README.md docs/performance.md; do
  lines=$(wc -l < "$f")
  check "$f has $lines lines, at most 200" test "$lines" -le 200
done

# Every page under docs/ is linked from the README.
unlinked=
for f in docs/*.md; do
  grep -q "](\(\./\)\{0,1\}$f\(#[^)]*\)\{0,1\})" README.md || unlinked="$unlinked $f"
done
check "README.md links every page of docs/" test -z "$unlinked"
test -z "$unlinked" || echo "# not linked from README.md:$unlinked"

# The headings of a page as GitHub makes their anchors: outside code
# fences, lower case, punctuation but - and _ dropped, spaces as dashes.
anchors() {
  awk '/^```/ { fence = !fence; next }
    !fence && /^#+ / {
      h = $0; sub(/^#+ +/, "", h); h = tolower(h)
      gsub(/[^a-z0-9 _-]/, "", h); gsub(/ /, "-", h); print h
    }' "$1"
}

# Every relative link resolves: the file, and the anchor in it.
pages="README.md $(ls docs/*.md) $(ls bench/results/*.md 2>/dev/null)"
: > "$tmp/broken"
links=0
for f in $pages; do
  dir=$(dirname "$f")
  grep -o '](\([^)]*\))' "$f" | sed 's/^](//; s/)$//' | while read -r target; do
    case $target in
      http://* | https://* | mailto:* | "") continue ;;
    esac
    echo "$f $target" >> "$tmp/seen"
    path=${target%%#*}
    anchor=
    case $target in *'#'*) anchor=${target#*#} ;; esac
    if test -z "$path"; then file=$f; else file=$dir/$path; fi
    if ! test -e "$file"; then
      echo "$f: $target: no such file" >> "$tmp/broken"
      continue
    fi
    if test -n "$anchor"; then
      case $file in
        *.md)
          anchors "$file" | grep -qx -- "$anchor" ||
            echo "$f: $target: no such heading" >> "$tmp/broken" ;;
      esac
    fi
  done
done
links=$(wc -l < "$tmp/seen" 2>/dev/null || echo 0)
check "the pages have relative links to check ($links)" test "$links" -ge 50
check "every relative link leads to a file and heading that exist" test ! -s "$tmp/broken"
sed 's/^/# /' "$tmp/broken"

# The deprecated module names appear only where they are called deprecated.
grep -n -i -E '(^|[^a-z0-9_])cuemm_(cupy|numba|torch|lib)([^a-z0-9_]|$)' README.md docs/*.md |
  grep -v -i 'deprecated' > "$tmp/old"
check "no page offers cuemm_cupy, cuemm_numba, cuemm_torch or cuemm_lib to import" test ! -s "$tmp/old"
sed 's/^/# /' "$tmp/old"

# Every page ships in make dist: Makefile.am names each in EXTRA_DIST.
unshipped=
for f in docs/*.md bench/results/*.md; do
  grep -q "[ 	]$f\( \|\$\)" Makefile.am || unshipped="$unshipped $f"
done
check "Makefile.am ships every page of docs/ and bench/results/" test -z "$unshipped"
test -z "$unshipped" || echo "# not in Makefile.am:$unshipped"

# The README's two set-up commands.
check "README.md gives the first build's command" \
  grep -q '^\./autogen\.sh && \./configure && make quickstart' README.md
check "README.md gives the suite's command" grep -q '^make check ' README.md

tap_done
