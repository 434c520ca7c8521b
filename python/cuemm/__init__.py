"""cuemm: the cuemm device memory manager from Python.

    import cuemm; cuemm.torch.use()           # PyTorch (before its first CUDA tensor)
    with cuemm.torch.pool("kv"): ...          # PyTorch, MemPool mode (any time)
    import cuemm; cuemm.cupy.use()            # CuPy
    NUMBA_CUDA_MEMORY_MANAGER=cuemm.numba     # Numba (numba-cuda), an EMM plugin
    import cuemm; cuemm.triton.use()          # Triton's runtime scratch
    cuemm.cuda_core.MemoryResource(0)         # a cuda.core memory resource

The framework modules (cuemm.torch, cuemm.cupy, cuemm.numba, cuemm.dask,
cuemm.triton, cuemm.cuda_core) are attributes of the package, imported
when first used, so that `import cuemm` imports no framework.  Each
imports without its framework and says what is missing, and how to
install it, when use() is called (cuemm.cuda_core: when MemoryResource is
first used).  This module holds what needs no framework:
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


# The framework modules, imported on first use as attributes (PEP 562):
# cuemm.numba imports Numba's driver module where Numba is installed (its
# plugin class derives from Numba's), which `import cuemm` must not do.
_SUBMODULES = ("torch", "cupy", "numba", "dask", "triton", "cuda_core")


def __getattr__(name):
    if name in _SUBMODULES:
        import importlib
        return importlib.import_module("cuemm." + name)  # the import sets the attribute too
    raise AttributeError("module 'cuemm' has no attribute %r" % name)


def __dir__():
    return sorted(set(globals()) | set(_SUBMODULES))


def version_string():
    """cuemm_version_string() of the libcuemm loaded: __version__ when the
    package and the library come from one build."""
    lib = load()
    return lib.cuemm_version_string().decode()


__all__ = ["__version__", "version_string", "CuemmError", "load", "loaded_path", "last_error",
           "device_manager", "stats", "held", "pool_stats", "adapter_stats", "empty_cache",
           "snapshot", "Snapshot", "Block", "Chunk", "stats_text", "print_stats"]
