#!/bin/sh
# test-dask.sh: runs tests/test-dask.py (TAP), cuemm.dask on a
# distributed.LocalCluster of two worker processes, with the Python
# configure found, or skips when there is none.  The script itself skips
# the cluster, saying why, when dask or distributed is not importable.  A
# library built with sanitizers cannot be loaded into an uninstrumented
# Python: then only what needs no libcuemm is checked.
top_srcdir=${top_srcdir:-$(dirname "$0")/..}
py=${CUEMM_PYTHON:-}
if test -z "$py" || test "$py" = ":"; then
  echo "1..0 # SKIP no Python 3.8 or newer found by configure"
  exit 0
fi
lib=${CUEMM_TOP_BUILDDIR:-.}/.libs/libcuemm.so.0
if test -f "$lib" && readelf -d "$lib" 2>/dev/null | grep -q 'lib[at]san\|libubsan'; then
  CUEMM_PLUGIN_SKIP="libcuemm is built with sanitizers"; export CUEMM_PLUGIN_SKIP
fi
exec "$py" "$top_srcdir/tests/test-dask.py"
