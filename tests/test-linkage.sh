#!/bin/sh
# test-linkage.sh: the built library links neither libcuda nor libcudart, and
# exports exactly the functions cuemm.h declares.
top_srcdir=${top_srcdir:-$(dirname "$0")/..}
lib=${CUEMM_TOP_BUILDDIR:-.}/.libs/libcuemm.so
echo "1..4"
if ! test -f "$lib"; then
  echo "ok 1 # SKIP no shared library built ($lib)"
  echo "ok 2 # SKIP no shared library built"
  echo "ok 3 # SKIP no shared library built"
  echo "ok 4 # SKIP no shared library built"
  exit 0
fi
needed=$(readelf -d "$lib" | grep NEEDED)
echo "$needed" | sed 's/^/# /'
if echo "$needed" | grep -q 'libcuda'; then echo "not ok 1 - libcuemm does not link libcuda"; else echo "ok 1 - libcuemm does not link libcuda"; fi
if echo "$needed" | grep -q 'libcudart'; then echo "not ok 2 - libcuemm does not link libcudart"; else echo "ok 2 - libcuemm does not link libcudart"; fi
exported=$(nm -D --defined-only "$lib" | awk '$2 == "T" { print $3 }' | sort)
declared=$(sed -n 's/^CUEMM_EXTERN [^(]*[ *]\(cuemm_[a-z0-9_]*\)(.*/\1/p' "$top_srcdir/include/cuemm.h" | sort)
if test "$exported" = "$declared" && test -n "$declared"; then
  echo "ok 3 - exported functions are exactly those cuemm.h declares ($(echo "$declared" | wc -l))"
else
  echo "not ok 3 - exported functions are exactly those cuemm.h declares"
  diff_out=$(printf '%s\n' "$exported" > exported.tmp; printf '%s\n' "$declared" > declared.tmp; diff exported.tmp declared.tmp; rm -f exported.tmp declared.tmp)
  echo "$diff_out" | sed 's/^/# /'
fi
others=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDB]$/ { print $3 }' | grep -v '^cuemm_' | grep -v '^_' )
if test -z "$others"; then echo "ok 4 - no other symbols exported"; else echo "not ok 4 - no other symbols exported"; echo "$others" | sed 's/^/# /'; fi
