"""cuemm.cupy: CuPy's device and pinned memory from cuemm.

    import cupy
    import cuemm.cupy
    cuemm.cupy.use()

cupy.cuda.set_allocator then gets cuemm's allocator: each request is
served on CuPy's current stream by the device's cuemm manager (one per
device, over its primary context, with the stream-ordered pool unless
CUEMM_POOL is set), through the same entry points as PyTorch's
(cuemm_torch_alloc, cuemm_torch_free), and freed in stream order on that
stream when CuPy drops the memory.  cupy.cuda.set_pinned_memory_allocator
gets cuemm_host_allocate (portable pinned memory, freed deferred).  CuPy's own
pools (cupy.get_default_memory_pool()) are then unused; cuemm's figures are
in stats().  An allocation cuemm cannot serve raises CuPy's
OutOfMemoryError with cuemm's message.

CuPy has no record_stream: as with its own pool, memory used on another
stream than the one it was allocated on must be ordered by the program
(events, synchronization).  A block keeps its CuPy stream object alive
until it is freed, so its free names a live stream.

CuPy destroys a stream when the program drops it, and cuemm must hear of
that first (cuemm_stream_release), or it would later record events on a
dead handle, or let a new stream that gets the handle take the old one's
blocks.  So every stream cuemm has served is kept alive here, and once
nothing but this module holds it (looked at every SWEEP_EVERY allocations,
and by empty_cache()), it is released in cuemm and let go, for CuPy to
destroy.  The default streams (legacy and per-thread) are never destroyed
and are not kept.

The library is found as cuemm._lib finds it (CUEMM_LIBRARY first).
"""

import ctypes
import sys
import threading

from cuemm import _lib, _tags

__all__ = ["use", "is_used", "malloc", "malloc_pinned", "stats", "pool_stats", "adapter_stats",
           "empty_cache", "sweep_streams", "OutOfMemoryError", "region", "suspend", "resume",
           "current_tag", "tag_stats", "tag_pool_stats"]

_cupy = None
_used = False
_managers = {}
_lock = threading.RLock()  # sweep_streams takes _manager under it
_streams = {}  # (device, stream handle, id) -> the CuPy stream object, for streams cuemm has served
_allocs = 0
SWEEP_EVERY = 256
OutOfMemoryError = MemoryError  # CuPy's, subclassed, once use() ran


def _import_cupy():
    try:
        import cupy
    except ImportError as e:
        raise ImportError("cuemm.cupy: CuPy is not importable here (%s); install it (`pip install "
                          "cupy-cuda12x`, or cupy-cuda13x for CUDA 13), or use cuemm.torch or cuemm.numba for "
                          "the other frameworks" % e) from e
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
                m = _managers[device] = _lib.device_manager(device)
    return m


def _keep_stream(device, stream):
    """Keeps a created stream alive while cuemm may hold blocks freed on it;
    every SWEEP_EVERY calls, releases those the program let go of."""
    global _allocs
    handle = stream.ptr or 0
    if handle > 2:  # 0 and 0x1: the legacy default stream, 0x2: the per-thread one
        # By object: two objects may wrap one handle (cupy.cuda.ExternalStream);
        # releasing it when one is let go only costs same-stream reuse.
        key = (device, handle, id(stream))
        if key not in _streams:
            with _lock:
                _streams[key] = stream
    _allocs += 1
    if _allocs % SWEEP_EVERY == 0:
        sweep_streams()


def _release_stream(device, handle):
    _manager(device)
    # Every tag's manager on the device may hold blocks freed on it.
    _tags.stream_release(device, handle)


def sweep_streams():
    """Releases, in cuemm, the streams only this module still holds (the
    program and every block of theirs let go of them), and lets them go so
    that CuPy destroys them.  Returns how many were released."""
    released = 0
    with _lock:
        for key in list(_streams):
            # Held by the dict, by `s` and by getrefcount's argument: nothing else.
            s = _streams[key]
            if sys.getrefcount(s) <= 3:
                _release_stream(key[0], key[1])
                del _streams[key]
                released += 1
            del s
    return released


def malloc(size):
    """The allocator cupy.cuda.set_allocator gets: a MemoryPointer to `size`
    bytes of the current device, for work on CuPy's current stream."""
    cupy = _cupy
    lib = _lib.load()
    device = cupy.cuda.runtime.getDevice()
    if size == 0:
        return cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(0, 0, None, device), 0)
    stream = cupy.cuda.get_current_stream()
    _keep_stream(device, stream)
    ptr = lib.cuemm_torch_alloc(size, device, stream.ptr)
    if not ptr:
        raise OutOfMemoryError(size, _lib.last_error())
    owner = _DeviceBlock(lib, ptr, size, device, stream)
    return cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(ptr, size, owner, device), 0)


def malloc_pinned(size):
    """The allocator cupy.cuda.set_pinned_memory_allocator gets: `size`
    bytes of portable pinned host memory (cuemm_host_allocate)."""
    cupy = _cupy
    lib = _lib.load()
    if size == 0:
        return cupy.cuda.PinnedMemoryPointer(_PinnedBlock(lib, None, 0, 0), 0)
    m = _manager(cupy.cuda.runtime.getDevice())
    p = ctypes.c_void_p()
    rc = lib.cuemm_host_allocate(m, size, _lib.CU_MEMHOSTALLOC_PORTABLE, ctypes.byref(p))
    if rc != _lib.CUDA_SUCCESS:
        raise OutOfMemoryError(size, _lib.last_error())
    return cupy.cuda.PinnedMemoryPointer(_PinnedBlock(lib, m, p.value, size), 0)


def use(pinned=True):
    """Sets CuPy's device allocator (and with pinned=True its pinned-memory
    allocator) to cuemm.  May be called at any time: memory CuPy allocated
    before stays with the allocator that gave it.  Raises ImportError
    without CuPy, OSError when libcuemm cannot be loaded."""
    global _cupy, _used, OutOfMemoryError
    cupy = _import_cupy()
    _lib.load()
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
    return _lib.stats(_device(device))


def pool_stats(device=None):
    return _lib.pool_stats(_device(device))


def adapter_stats():
    return _lib.adapter_stats()


def empty_cache():
    """Every device's cuemm pool trimmed (what free_all_blocks does for
    CuPy's pool), after the streams the program let go of are released."""
    sweep_streams()
    _lib.empty_cache()


# ---- tags: suspend and resume (docs/suspend-frameworks.md) ----------------

def region(tag):
    """A context manager: CuPy allocations made inside (malloc, on any
    thread: the tag is process-wide) go to `tag`'s manager on their device,
    so that suspend(tag) can give them back.  Nests; the tag current before
    comes back at the exit.  Pinned host memory is not tagged."""
    return _tags.region(tag)


def current_tag():
    """The current tag (None: the default)."""
    return _tags.current_tag()


def suspend(tag, keep=False, device=None):
    """Gives the physical memory of `tag`'s arrays on the device back to the
    driver (device None: CuPy's current device), after synchronizing it;
    the arrays keep their addresses, and with keep=True their contents,
    which come back at resume().  Do not use them on the GPU, or allocate
    in the tag, until resume()."""
    _tags.suspend(tag, _device(device), keep=keep)


def resume(tag, device=None):
    """Maps memory again under `tag`'s arrays (and copies kept contents
    back).  Raises cuemm.CuemmError (code 2) when the device lacks the
    memory; the tag then stays suspended."""
    _tags.resume(tag, _device(device))


def tag_stats(tag, device=None):
    """cuemm's statistics of `tag`'s manager on the device, as a dict."""
    return _tags.stats(tag, _device(device))


def tag_pool_stats(tag, device=None):
    """The pool statistics of `tag`'s manager on the device, as a dict."""
    return _tags.pool_stats(tag, _device(device))
