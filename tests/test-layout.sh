#!/bin/sh
# test-layout.sh: src/ keeps the shape src/README.md draws.  No source at
# its top; a folder per concern, each with its internal.h, the only header
# other folders include; a folder includes only folders of lower layers
# (the order below, which src/README.md explains); every source is built;
# a function's prefix names its file; no function body longer than 80
# lines.
top_srcdir=${top_srcdir:-$(dirname "$0")/..}
src=$top_srcdir/src
. "$top_srcdir/tests/tap.sh"
say() { sed 's/^/# /'; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

# The layers, bottom up; folders of one layer do not include each other.
layers="base:0 suballoc:1 trace:2 pool:3 core:4 stream:5 observe:6 ipc:6 suspend:6 lifecycle:7 compat:8 adapter:8"
layer_of() { for l in $layers; do test "${l%%:*}" = "$1" && { echo "${l#*:}"; return; }; done; echo none; }

top=$(ls "$src" | grep '\.[ch]$')
check "src/ has no source file at its top" test -z "$top"
test -z "$top" || echo "$top" | say

folders=$(cd "$src" && for d in */; do echo "${d%/}"; done)
unknown=
for f in $folders; do test "$(layer_of "$f")" = none && unknown="$unknown $f"; done
check "every folder of src/ has its layer here and in src/README.md" test -z "$unknown"
test -z "$unknown" || echo "folders without a layer:$unknown" | say
no_internal=
for f in $folders; do test -f "$src/$f/internal.h" || no_internal="$no_internal $f"; done
check "every folder has its internal.h" test -z "$no_internal"
test -z "$no_internal" || echo "without internal.h:$no_internal" | say

# Every include of a header of another folder, as "FILE FOLDER HEADER".
for f in $folders; do
  for file in "$src/$f"/*.c "$src/$f"/*.h; do
    test -f "$file" || continue
    sed -n 's/^#include "\([a-z]*\)\/\([a-z-]*\.h\)".*/\1 \2/p' "$file" |
      while read g h; do test "$g" != "$f" && echo "$f/${file##*/} $g $h"; done
  done
done > "$tmp/cross"
grep -v ' internal\.h$' "$tmp/cross" > "$tmp/private"
check "other folders include a folder's internal.h only" test ! -s "$tmp/private"
say < "$tmp/private"
while read file g h; do
  lf=$(layer_of "${file%%/*}") lg=$(layer_of "$g")
  test "$lg" != none && test "$lf" != none && test "$lg" -lt "$lf" || echo "$file includes $g/$h"
done < "$tmp/cross" > "$tmp/upward"
check "a folder includes only folders of lower layers" test ! -s "$tmp/upward"
say < "$tmp/upward"

# Every source is in libcuemm_la_SOURCES.
sed -n '/^libcuemm_la_SOURCES/,/^[^\t]/p' "$top_srcdir/Makefile.am" | tr ' \t\\' '\n\n\n' | grep '^src/' | sort > "$tmp/built"
(cd "$top_srcdir" && ls src/*/*.c src/*/*.h) | sort > "$tmp/present"
unbuilt=$(comm -13 "$tmp/built" "$tmp/present")
check "every file under src/ is in libcuemm_la_SOURCES" test -z "$unbuilt"
test -z "$unbuilt" || echo "$unbuilt" | say

# Prefixes: a function of src/F/x.c that other files call is cuemm__x_...;
# a file x-y.c of family x may use x's prefix, and three files have short
# forms (src/README.md, "Names").
for file in "$src"/*/*.c; do
  base=${file##*/} base=${base%.c}
  own=$(echo "$base" | tr '-' '_') family=${base%%-*}
  case $family in suballoc) short=sa ;; addrtree) short=at ;; error) short=first ;; *) short=$family ;; esac
  grep -hoE '^[a-zA-Z_][^;(]*[^a-zA-Z0-9_]cuemm__[a-z0-9_]+\(' "$file" | grep -v '^static' |
    grep -oE 'cuemm__[a-z0-9_]+\($' | tr -d '(' | while read -r fn; do
      case $fn in cuemm__"$own"*|cuemm__"$family"_*|cuemm__"$short"_*) ;; *) echo "${file#"$src"/}: $fn" ;; esac
    done
done > "$tmp/prefix"
check "every function other files call carries its file's prefix" test ! -s "$tmp/prefix"
say < "$tmp/prefix"

# Function bodies: from a "{" alone at the line's start to the next "}"
# alone at the line's start.
awk 'FNR == 1 { open = 0 } /^\{$/ { open = FNR } /^\}/ && open { if (FNR - open + 1 > 80) print FILENAME ":" open ": " FNR - open + 1 " lines"; open = 0 }' \
  "$src"/*/*.c "$src"/*/*.h > "$tmp/long"
check "no function body in src/ is longer than 80 lines" test ! -s "$tmp/long"
say < "$tmp/long"

tap_done
