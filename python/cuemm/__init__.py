"""cuemm: the cuemm device memory manager from Python.

    import cuemm.torch; cuemm.torch.use()     # PyTorch (before its first CUDA tensor)
    import cuemm.cupy;  cuemm.cupy.use()      # CuPy
    NUMBA_CUDA_MEMORY_MANAGER=cuemm.numba     # Numba (numba-cuda), an EMM plugin

Each framework module imports without its framework and says what is
missing when use() is called.  This module holds what needs no framework:
the library (load(), loaded_path(), last_error()), the statistics of a
device's manager and a snapshot of its blocks.  docs/python.md has the rest.
"""

from cuemm._version import __version__
from cuemm._lib import (CuemmError, load, loaded_path, last_error, device_manager, stats,
                        pool_stats, adapter_stats, empty_cache)

__all__ = ["__version__", "CuemmError", "load", "loaded_path", "last_error", "device_manager",
           "stats", "pool_stats", "adapter_stats", "empty_cache"]
