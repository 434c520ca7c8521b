"""numba_kernel.py: a Numba kernel over arrays allocated through cuemm.

Run on a machine with a GPU and numba-cuda, from the build directory:

    CUEMM_LIBRARY=.libs/libcuemm.so.0 PYTHONPATH=python \
        NUMBA_CUDA_MEMORY_MANAGER=cuemm.numba python3 examples/numba_kernel.py

(after `make install`: NUMBA_CUDA_MEMORY_MANAGER=cuemm.numba python3 numba_kernel.py).
Each step of the loop allocates temporaries that die at once; inside
cuda.defer_cleanup() none of their frees is released while the kernels run,
and cuemm releases them in one batch afterwards.
"""
import os

os.environ.setdefault("NUMBA_CUDA_MEMORY_MANAGER", "cuemm.numba")

import numpy as np
from numba import cuda


@cuda.jit
def axpy(out, a, x, y):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


def main():
    n = 1 << 20
    ctx = cuda.current_context()
    mgr = ctx.memory_manager
    print("memory manager:", type(mgr).__module__ + "." + type(mgr).__name__)
    stats = mgr.cuemm.stats if hasattr(mgr, "cuemm") else (lambda: {})

    x = cuda.to_device(np.arange(n, dtype=np.float32))
    acc = cuda.to_device(np.zeros(n, dtype=np.float32))
    threads = 256
    blocks = (n + threads - 1) // threads
    steps = 50
    stream = cuda.stream()
    with cuda.defer_cleanup():
        for _ in range(steps):
            tmp = cuda.device_array(n, dtype=np.float32, stream=stream)  # a temporary per step
            axpy[blocks, threads, stream](tmp, 2.0, x, acc)
            axpy[blocks, threads, stream](acc, 1.0, tmp, x)
            del tmp
        s = stats()
        if s:
            print("inside defer_cleanup: %d frees pending, defer depth %d"
                  % (s["pending_count"], s["defer_depth"]))
    stream.synchronize()
    if s:
        mgr.cuemm.flush()
        print("after flush: %d pending, %d released by the driver so far"
              % (mgr.cuemm.stats()["pending_count"], mgr.cuemm.stats()["driver_frees"]))

    # acc_{k+1} = 2 x + acc_k + x = acc_k + 3 x
    expect = 3.0 * steps * np.arange(n, dtype=np.float32)
    got = acc.copy_to_host()
    ok = np.allclose(got, expect)
    print("result %s (acc[10] = %g, expected %g)" % ("correct" if ok else "WRONG", got[10], expect[10]))
    free, total = ctx.get_memory_info()
    print("device memory: %d MiB free of %d MiB" % (free >> 20, total >> 20))
    # Everything back to the driver before exit, so that a memory checker
    # (compute-sanitizer --leak-check full) finds no leak.
    del x, acc
    ctx.deallocations.clear()
    if hasattr(mgr, "cuemm"):
        mgr.cuemm.flush()
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
