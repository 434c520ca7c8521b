#!/bin/sh
# test-torchrun-report.sh: scripts/torchrun-proof.py's report over made-up
# launches, through tests/test-torchrun-report.py; tests/python-tap.sh says how it runs.
exec sh "${top_srcdir:-$(dirname "$0")/..}/tests/python-tap.sh" test-torchrun-report
