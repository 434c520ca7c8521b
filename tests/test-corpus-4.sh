#!/bin/sh
# test-corpus-4.sh: part 4 of 5 of the corpus's footprint gate
# (tests/test-corpus.sh says what it checks, and why in parts).
exec sh "${top_srcdir:-$(dirname "$0")/..}/tests/test-corpus.sh" --part 4/5
