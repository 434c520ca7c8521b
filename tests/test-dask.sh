#!/bin/sh
# test-dask.sh: cuemm.dask on a distributed.LocalCluster of two worker
# processes through tests/test-dask.py, which skips the cluster, saying why,
# when dask or distributed is not importable; tests/python-tap.sh says how
# it runs.
exec sh "${top_srcdir:-$(dirname "$0")/..}/tests/python-tap.sh" test-dask
