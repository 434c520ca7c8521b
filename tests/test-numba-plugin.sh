#!/bin/sh
# test-numba-plugin.sh: runs tests/test-numba-plugin.py (TAP) with the Python
# configure found, or skips when there is none.  A library built with
# sanitizers cannot be loaded into an uninstrumented Python: then only the
# module and its interface are checked.
top_srcdir=${top_srcdir:-$(dirname "$0")/..}
py=${CUEMM_PYTHON:-}
if test -z "$py" || test "$py" = ":"; then
  echo "1..0 # SKIP no Python 3.8 or newer found by configure"
  exit 0
fi
lib=${CUEMM_TOP_BUILDDIR:-.}/.libs/libcuemm.so.0
if test -f "$lib" && readelf -d "$lib" 2>/dev/null | grep -q 'lib[at]san\|libubsan'; then
  CUEMM_PLUGIN_SKIP="libcuemm is built with sanitizers"; export CUEMM_PLUGIN_SKIP
  # simcuda is built with them too, and importing numba.cuda loads the
  # libcuda.so.1 the library path names: Python would abort at start.
  unset LD_LIBRARY_PATH
fi
exec "$py" "$top_srcdir/tests/test-numba-plugin.py"
