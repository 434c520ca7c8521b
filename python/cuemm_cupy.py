"""cuemm_cupy: CuPy's device and pinned memory from cuemm.

    import cupy
    import cuemm_cupy
    cuemm_cupy.use()

cupy.cuda.set_allocator then gets cuemm's allocator: each request is
served on CuPy's current stream by the device's cuemm manager (one per
device, over its primary context, with the stream-ordered pool unless
CUEMM_POOL is set), through the same entry points as PyTorch's
(cuemm_torch_alloc, cuemm_torch_free), and freed in stream order on that
stream when CuPy drops the memory.  cupy.cuda.set_pinned_memory_allocator
gets cuemm_host_alloc (portable pinned memory, freed deferred).  CuPy's own
pools (cupy.get_default_memory_pool()) are then unused; cuemm's figures are
in stats().  An allocation cuemm cannot serve raises CuPy's
OutOfMemoryError with cuemm's message.

CuPy has no record_stream: as with its own pool, memory used on another
stream than the one it was allocated on must be ordered by the program
(events, synchronization).  A block keeps its CuPy stream object alive
until it is freed, so its free names a live stream.

The library is found as cuemm_lib finds it (CUEMM_LIBRARY first).
"""

import ctypes
import threading

import cuemm_lib

__all__ = ["use", "is_used", "malloc", "malloc_pinned", "stats", "pool_stats", "adapter_stats",
           "empty_cache", "OutOfMemoryError"]

_cupy = None
_used = False
_managers = {}
_lock = threading.Lock()
OutOfMemoryError = MemoryError  # CuPy's, subclassed, once use() ran


def _import_cupy():
    try:
        import cupy
    except ImportError as e:
        raise ImportError("cuemm_cupy: CuPy is not importable here (%s); install cupy (cupy-cuda12x or "
                          "cupy-cuda13x), or use cuemm_torch or cuemm_numba for the other frameworks" % e) from e
    return cupy


def _oom_class(cupy):
    base = getattr(getattr(cupy.cuda, "memory", None), "OutOfMemoryError", None)
    if not (isinstance(base, type) and issubclass(base, BaseException)):
        base = MemoryError

    class CuemmOutOfMemoryError(base):
        """CuPy's OutOfMemoryError, with cuemm's explanation."""

        def __init__(self, size, msg):
            MemoryError.__init__(self, "cuemm: out of memory allocating %d bytes: %s" % (size, msg))
            self.size = size
            self.msg = msg

        def __str__(self):
            return self.args[0]

    return CuemmOutOfMemoryError


class _DeviceBlock(object):
    """The owner of a block (UnownedMemory's owner): frees it on its stream
    when CuPy lets go of it."""

    __slots__ = ("ptr", "size", "device", "stream", "lib")

    def __init__(self, lib, ptr, size, device, stream):
        self.lib = lib
        self.ptr = ptr
        self.size = size
        self.device = device
        self.stream = stream  # the CuPy stream object: kept alive until the free

    def __del__(self):
        ptr, self.ptr = self.ptr, 0
        if ptr:
            try:
                self.lib.cuemm_torch_free(ptr, self.size, self.device, self.stream.ptr)
            except Exception:  # interpreter shutdown: nothing left to free into
                pass


class _PinnedBlock(object):
    """Pinned host memory of cuemm (PinnedMemoryPointer's `mem`)."""

    __slots__ = ("ptr", "size", "manager", "lib")

    def __init__(self, lib, manager, ptr, size):
        self.lib = lib
        self.manager = manager
        self.ptr = ptr
        self.size = size

    def __int__(self):
        return self.ptr

    def __del__(self):
        ptr, self.ptr = self.ptr, 0
        if ptr:
            try:
                self.lib.cuemm_host_free(self.manager, ptr)
            except Exception:
                pass


def _manager(device):
    m = _managers.get(device)
    if m is None:
        with _lock:
            m = _managers.get(device)
            if m is None:
                m = _managers[device] = cuemm_lib.device_manager(device)
    return m


def malloc(size):
    """The allocator cupy.cuda.set_allocator gets: a MemoryPointer to `size`
    bytes of the current device, for work on CuPy's current stream."""
    cupy = _cupy
    lib = cuemm_lib.load()
    device = cupy.cuda.runtime.getDevice()
    if size == 0:
        return cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(0, 0, None, device), 0)
    stream = cupy.cuda.get_current_stream()
    ptr = lib.cuemm_torch_alloc(size, device, stream.ptr)
    if not ptr:
        raise OutOfMemoryError(size, cuemm_lib.last_error())
    owner = _DeviceBlock(lib, ptr, size, device, stream)
    return cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(ptr, size, owner, device), 0)


def malloc_pinned(size):
    """The allocator cupy.cuda.set_pinned_memory_allocator gets: `size`
    bytes of portable pinned host memory (cuemm_host_alloc)."""
    cupy = _cupy
    lib = cuemm_lib.load()
    if size == 0:
        return cupy.cuda.PinnedMemoryPointer(_PinnedBlock(lib, None, 0, 0), 0)
    m = _manager(cupy.cuda.runtime.getDevice())
    p = ctypes.c_void_p()
    rc = lib.cuemm_host_alloc(m, ctypes.byref(p), size, cuemm_lib.CU_MEMHOSTALLOC_PORTABLE)
    if rc != cuemm_lib.CUDA_SUCCESS:
        raise OutOfMemoryError(size, cuemm_lib.last_error())
    return cupy.cuda.PinnedMemoryPointer(_PinnedBlock(lib, m, p.value, size), 0)


def use(pinned=True):
    """Sets CuPy's device allocator (and with pinned=True its pinned-memory
    allocator) to cuemm.  May be called at any time: memory CuPy allocated
    before stays with the allocator that gave it.  Raises ImportError
    without CuPy, OSError when libcuemm cannot be loaded."""
    global _cupy, _used, OutOfMemoryError
    cupy = _import_cupy()
    cuemm_lib.load()
    _cupy = cupy
    OutOfMemoryError = _oom_class(cupy)
    cupy.cuda.set_allocator(malloc)
    if pinned:
        cupy.cuda.set_pinned_memory_allocator(malloc_pinned)
    _used = True


def is_used():
    return _used


def _device(device):
    if device is None:
        return _cupy.cuda.runtime.getDevice() if _cupy is not None else 0
    return int(getattr(device, "id", device))


def stats(device=None):
    """cuemm's statistics of the device's manager as a dict (device None:
    CuPy's current device)."""
    return cuemm_lib.stats(_device(device))


def pool_stats(device=None):
    return cuemm_lib.pool_stats(_device(device))


def adapter_stats():
    return cuemm_lib.adapter_stats()


def empty_cache():
    """Every device's cuemm pool trimmed (what free_all_blocks does for
    CuPy's pool)."""
    cuemm_lib.empty_cache()
