#!/bin/sh
# python-tap.sh NAME: runs tests/NAME.py (TAP) with the Python configure
# found, or skips when there is none; the suite's Python tests each call it
# from a wrapper of two lines.  A library built with sanitizers cannot be
# loaded into an uninstrumented Python: then CUEMM_PLUGIN_SKIP tells the
# test to check only what needs no libcuemm, and simcuda, built with them
# too, leaves the library path (importing numba.cuda loads the libcuda.so.1
# that path names, and Python would abort at start).
top_srcdir=${top_srcdir:-$(dirname "$0")/..}
py=${CUEMM_PYTHON:-}
if test -z "$py" || test "$py" = ":"; then
  echo "1..0 # SKIP no Python 3.8 or newer found by configure"
  exit 0
fi
lib=${CUEMM_TOP_BUILDDIR:-.}/.libs/libcuemm.so.0
if test -f "$lib" && readelf -d "$lib" 2>/dev/null | grep -q 'lib[at]san\|libubsan'; then
  CUEMM_PLUGIN_SKIP="libcuemm is built with sanitizers"; export CUEMM_PLUGIN_SKIP
  unset LD_LIBRARY_PATH
fi
exec "$py" "$top_srcdir/tests/$1.py"
