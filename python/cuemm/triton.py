"""cuemm.triton: Triton's runtime scratch memory from cuemm.

    import cuemm.triton
    cuemm.triton.use()       # triton.set_allocator(cuemm's allocator)
    ...                      # kernels that need global scratch (on-device
                             # TMA descriptors, tl.make_tensor_descriptor)
    cuemm.triton.restore()   # what was set before

Triton asks its allocator for global memory when a kernel needs scratch
(on Hopper and later, a kernel that makes tensor descriptors on the device
writes them there): allocator(size, alignment, stream) must return an
object whose data_ptr() is the address.  use() installs Allocator, which
serves each request with cuemm_allocate_async on that stream, from the
current tag's cuemm manager of Triton's current device (the same entry
point as cuemm.torch's and cuemm.cupy's, cuemm_torch_alloc, so region()
and suspend() apply), and returns a Buffer that frees it with
cuemm_free_async on the same stream when Triton drops it, right after the
launch: the kernel was queued on that stream first, so the free is in
stream order and the memory goes to the stream's next request at once.

Triton keeps its allocator in a contextvars.ContextVar: use() and restore()
act on the calling thread's context (each thread starts with Triton's
default, which refuses every request).  Call use() on every thread that
launches such kernels.

With torch.compile.  PyTorch's inductor installs an allocator of its own
(torch.empty of int8 tensors) for the kernels it generates that need
scratch, and may do so over one already set (pytorch/pytorch#155584): after
such a compile, Triton's scratch comes from PyTorch's allocator in that
context, which is cuemm's anyway under cuemm.torch.use(), and PyTorch's
caching allocator otherwise.  Nothing breaks; is_used() says whether
cuemm's allocator is still the current one, use() installs it again (it
does nothing when it is current already), and restore() puts back what
was there before use() only while cuemm's is current (it never removes an
allocator someone else set since).

The library is found as cuemm._lib finds it (CUEMM_LIBRARY first).
"""

import ctypes

from cuemm import _lib

__all__ = ["use", "restore", "is_used", "Allocator", "Buffer", "allocator"]

# cuemm's pool blocks are at least this aligned; larger alignments are
# served by asking for more and rounding the address up.
POOL_ALIGNMENT = 256


def _triton():
    try:
        import triton
    except ImportError as e:
        raise ImportError("cuemm.triton: Triton is not importable here (%s); install it (`pip install triton`; "
                          "PyTorch's CUDA wheels bring it)" % e) from e
    if not hasattr(triton, "set_allocator"):
        raise RuntimeError("cuemm.triton: this Triton (%s) has no triton.set_allocator (Triton 3.3 or newer has "
                           "it)" % getattr(triton, "__version__", "?"))
    return triton


class Buffer(object):
    """A block of cuemm memory for one Triton launch: data_ptr() is the
    (aligned) address; the block is freed with cuemm_free_async on its
    stream when the object is collected, or at free()."""

    __slots__ = ("_ptr", "_base", "size", "device", "stream", "__weakref__")

    def __init__(self, base, ptr, size, device, stream):
        self._base, self._ptr, self.size, self.device, self.stream = base, ptr, size, device, stream

    def data_ptr(self):
        return self._ptr

    def free(self):
        """Gives the block back now (in stream order); later calls do
        nothing."""
        base, self._base = self._base, None
        if base:
            _lib.load().cuemm_torch_free(base, self.size, self.device, self.stream)

    def __del__(self):
        try:
            self.free()
        except Exception:  # the interpreter is shutting down: the process frees all
            pass

    def __repr__(self):
        return "<cuemm.triton.Buffer 0x%x, %d bytes, device %d, stream 0x%x>" % (
            self._ptr, self.size, self.device, self.stream or 0)


class Allocator(object):
    """Triton's allocator protocol over cuemm: Allocator()(size, alignment,
    stream) -> Buffer.  stream None is the legacy default stream; the
    device is Triton's current one (driver.active.get_current_device()),
    device 0 where Triton cannot say."""

    def __init__(self, current_device=None):
        self._current_device = current_device

    def _device(self):
        if self._current_device is None:
            try:
                import triton
                self._current_device = triton.runtime.driver.active.get_current_device
            except Exception:
                self._current_device = lambda: 0
        return int(self._current_device())

    def __call__(self, size, alignment, stream):
        size = int(size)
        alignment = int(alignment or 0)
        stream = int(stream or 0)
        if alignment & (alignment - 1):
            raise ValueError("cuemm.triton: alignment %d is not a power of two" % alignment)
        device = self._device()
        extra = alignment - POOL_ALIGNMENT if alignment > POOL_ALIGNMENT else 0
        want = max(size, 1) + extra
        base = _lib.load().cuemm_torch_alloc(want, device, stream)
        if not base:
            raise MemoryError("cuemm.triton: %d bytes of scratch (alignment %d) on device %d, stream 0x%x: %s"
                              % (size, alignment, device, stream, _lib.adapter_stats()["last_failure"]))
        ptr = (base + alignment - 1) & ~(alignment - 1) if extra else base
        return Buffer(base, ptr, want, device, stream)


allocator = Allocator()
_previous = []  # what was current before use(), while ours is installed


def _current(triton):
    """Triton's current allocator in this context, or None where this
    Triton does not say."""
    try:
        from triton.runtime import _allocation
    except ImportError:
        return None
    var = getattr(_allocation, "_allocator", None)
    return var.get() if hasattr(var, "get") else var


def _null(triton):
    try:
        from triton.runtime._allocation import NullAllocator
        return NullAllocator()
    except ImportError:
        return None


def is_used():
    """Whether cuemm's allocator is Triton's current one in this context."""
    try:
        triton = _triton()
    except (ImportError, RuntimeError):
        return False
    return _current(triton) is allocator


def use():
    """Makes cuemm's allocator Triton's (triton.set_allocator) in this
    context, remembering the one it replaces for restore(); returns it.
    Does nothing when it is current already.  Raises ImportError without
    Triton, RuntimeError for a Triton without set_allocator, OSError when
    libcuemm cannot be loaded."""
    triton = _triton()
    _lib.load()
    current = _current(triton)
    if current is allocator:
        return allocator
    _previous.append(current)
    triton.set_allocator(allocator)
    return allocator


def restore():
    """Puts back the allocator use() replaced, when cuemm's is still the
    current one; returns whether it did.  When another allocator was set
    since (inductor's, a user's), it stays, and False is returned."""
    triton = _triton()
    if _current(triton) is not allocator or not _previous:
        return False
    prev = _previous.pop()
    if prev is None:
        prev = _null(triton)
    if prev is not None:
        triton.set_allocator(prev)
    return True
