#!/bin/sh
# test-numba-plugin.sh: the Numba memory-manager plugin (cuemm.numba)
# through tests/test-numba-plugin.py; tests/python-tap.sh says how it runs.
exec sh "${top_srcdir:-$(dirname "$0")/..}/tests/python-tap.sh" test-numba-plugin
