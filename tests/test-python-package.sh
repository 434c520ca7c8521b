#!/bin/sh
# test-python-package.sh: the package cuemm itself (its version, its report
# objects, the build's cuda.h search) through tests/test-python-package.py;
# tests/python-tap.sh says how it runs.
exec sh "${top_srcdir:-$(dirname "$0")/..}/tests/python-tap.sh" test-python-package
