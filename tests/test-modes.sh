#!/bin/sh
# test-modes.sh: PyTorch's MemPool mode and the rule choosing a mode
# (cuemm.torch), Triton's allocator (cuemm.triton) and cuda.core's memory
# resource (cuemm.cuda_core) through tests/test-modes.py;
# tests/python-tap.sh says how it runs.
exec sh "${top_srcdir:-$(dirname "$0")/..}/tests/python-tap.sh" test-modes
