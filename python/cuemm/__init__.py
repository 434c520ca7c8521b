"""cuemm: the cuemm device memory manager from Python.

    import cuemm.torch; cuemm.torch.use()     # PyTorch (before its first CUDA tensor)
    import cuemm.cupy;  cuemm.cupy.use()      # CuPy
    NUMBA_CUDA_MEMORY_MANAGER=cuemm.numba     # Numba (numba-cuda), an EMM plugin

Each framework module imports without its framework and says what is
missing when use() is called.  This module holds what needs no framework:
the library (load(), loaded_path(), last_error(), version_string()), the
statistics of a device's manager (stats() and pool_stats() as dicts,
held() alone and cheaply, stats_text() and print_stats() as
cuemm_stats_print's table) and a snapshot
of its blocks (snapshot(): a Snapshot dataclass of Chunk and Block
dataclasses).  docs/python.md has the rest.
"""

from cuemm._version import __version__
from cuemm._lib import (CuemmError, load, loaded_path, last_error, device_manager, stats, held,
                        pool_stats, adapter_stats, empty_cache)
from cuemm._report import Block, Chunk, Snapshot, snapshot, stats_text, print_stats


def version_string():
    """cuemm_version_string() of the libcuemm loaded: __version__ when the
    package and the library come from one build."""
    lib = load()
    return lib.cuemm_version_string().decode()


__all__ = ["__version__", "version_string", "CuemmError", "load", "loaded_path", "last_error",
           "device_manager", "stats", "held", "pool_stats", "adapter_stats", "empty_cache",
           "snapshot", "Snapshot", "Block", "Chunk", "stats_text", "print_stats"]
