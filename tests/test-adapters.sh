#!/bin/sh
# test-adapters.sh: the framework adapters (cuemm.torch, cuemm.cupy, cuemm._lib)
# through tests/test-adapters.py; tests/python-tap.sh says how it runs.
exec sh "${top_srcdir:-$(dirname "$0")/..}/tests/python-tap.sh" test-adapters
