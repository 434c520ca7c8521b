"""cuemm.cuda_core: a cuda.core memory resource backed by cuemm.

    from cuda.core import Device
    import cuemm.cuda_core
    dev = Device(0); dev.set_current()
    mr = cuemm.cuda_core.MemoryResource(0)            # or (0, tag="kv")
    buf = mr.allocate(1 << 20, stream=dev.default_stream)
    ...
    buf.close()                                       # freed on its stream

MemoryResource subclasses cuda.core's MemoryResource (cuda.core 0.3 to 1.x:
cuda.core, or cuda.core.experimental where that is where it lives).
allocate(size, stream) serves the request with cuemm_allocate_async on that
stream from a cuemm manager of the device: the device's own (the one
cuemm.torch and cuemm.cupy use, over its primary context) or a tag's, so
that suspend and resume (cuemm._tags, cuemm.torch.suspend) apply to the
buffers; deallocate(ptr, size, stream) gives the block back with
cuemm_free_async on that stream.  The Buffer (Buffer.from_handle with
mr=self) records the allocation's stream for its deallocation, so a buffer
closed or collected without a stream is freed in order on the stream it
was allocated for.  stream None means the legacy default stream, which is
cuda.core's default_stream unless CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM
is set (pass the stream then).

The memory is device memory of the primary context: use it where that
context is current (Device(n).set_current() retains and makes it current).

cuda.core is imported when MemoryResource is first used (the module itself
imports without it): where cuda.core is missing, that raises ImportError
saying what to install.
"""

import ctypes
import threading

from cuemm import _lib, _tags

__all__ = ["MemoryResource", "available"]

_lock = threading.Lock()
_class = None


def _core():
    """cuda.core's namespace that holds MemoryResource and Buffer."""
    errors = []
    for name in ("cuda.core", "cuda.core.experimental"):
        try:
            mod = __import__(name, fromlist=["MemoryResource"])
        except ImportError as e:
            errors.append("%s: %s" % (name, e))
            continue
        if hasattr(mod, "MemoryResource") and hasattr(mod, "Buffer"):
            return mod
        errors.append("%s has no MemoryResource and Buffer" % name)
    raise ImportError("cuemm.cuda_core: cuda.core is not importable here (%s); install it (`pip install "
                      "cuda-core[cu12]`, or cuda-core[cu13] for CUDA 13)" % "; ".join(errors))


def available():
    """Whether cuda.core can be imported here."""
    try:
        _core()
    except ImportError:
        return False
    return True


def _stream_handle(stream):
    """The CUstream (an int) of a cuda.core Stream, a GraphBuilder (its
    stream), an object with a handle, or an int; None: the legacy default
    stream (0)."""
    if stream is None:
        return 0
    if isinstance(stream, int):
        return stream
    inner = getattr(stream, "stream", None)  # a GraphBuilder's stream
    if inner is not None and not callable(inner):
        stream = inner
    handle = getattr(stream, "handle", stream)
    return int(handle or 0)


def _make_class():
    core = _core()
    Buffer = core.Buffer

    class MemoryResource(core.MemoryResource):
        """cuda.core memory resource over cuemm: MemoryResource(device_id=0,
        tag=None).  tag None: the device's manager (cuemm_device_manager);
        a name: that tag's manager on the device (cuemm_adapter_tag_manager),
        which cuemm.torch.suspend(tag) and resume(tag) act on."""

        def __init__(self, device_id=0, tag=None):
            self._device_id = int(device_id)
            self._tag = tag or None
            self._manager = _tags.tag_manager(self._tag, self._device_id)

        def allocate(self, size, stream=None):
            """A Buffer of `size` bytes for work on `stream` (cuemm_allocate_async).
            Raises CuemmError (code 2: out of memory) with cuemm's message."""
            size = int(size)
            if size == 0:
                return Buffer.from_handle(0, 0, mr=self)
            p = ctypes.c_uint64(0)
            handle = _stream_handle(stream)
            _lib.check(_lib.load().cuemm_allocate_async(self._manager, size, handle, ctypes.byref(p)),
                       "cuemm.cuda_core: %d bytes on device %d, stream 0x%x" % (size, self._device_id, handle))
            if stream is not None and not isinstance(stream, int):
                try:  # cuda.core 1.x: the buffer's deallocation is ordered on this stream
                    return Buffer.from_handle(p.value, size, mr=self, stream=stream)
                except TypeError:
                    pass
            return Buffer.from_handle(p.value, size, mr=self)

        def deallocate(self, ptr, size, stream=None):
            """Frees a buffer of this resource in stream order
            (cuemm_free_async on `stream`)."""
            ptr = int(ptr)
            if ptr == 0:
                return
            handle = _stream_handle(stream)
            _lib.check(_lib.load().cuemm_free_async(self._manager, ptr, handle),
                       "cuemm.cuda_core: free of 0x%x on stream 0x%x" % (ptr, handle))

        @property
        def is_device_accessible(self):
            return True

        @property
        def is_host_accessible(self):
            return False

        @property
        def is_managed(self):
            return False

        @property
        def device_id(self):
            return self._device_id

        @property
        def tag(self):
            """The cuemm tag of the resource's manager (None: the default)."""
            return self._tag

        def __repr__(self):
            return "<cuemm.cuda_core.MemoryResource device %d, tag %r>" % (self._device_id, self._tag)

    MemoryResource.__module__ = __name__
    return MemoryResource


def __getattr__(name):
    # MemoryResource derives from cuda.core's class, made on first use so
    # that the module imports without cuda.core (PEP 562).
    global _class
    if name == "MemoryResource":
        with _lock:
            if _class is None:
                _class = _make_class()
        return _class
    raise AttributeError("module 'cuemm.cuda_core' has no attribute %r" % name)
