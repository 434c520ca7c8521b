#!/bin/sh
# test-tracegen-2.sh: part 2 of 2 of tests/test-tracegen.sh (which says what
# it checks, and why in parts).
exec sh "${top_srcdir:-$(dirname "$0")/..}/tests/test-tracegen.sh" --part 2/2
