"""cuemm.numba: cuemm as Numba's CUDA memory manager (an EMM plugin).

Use it without changing the program:

    NUMBA_CUDA_MEMORY_MANAGER=cuemm.numba python3 app.py

or from the program, before any CUDA work:

    import cuemm.numba
    cuemm.numba.use()   # numba.cuda.set_memory_manager(cuemm.numba.CuemmMemoryManager)

Device allocations, pinned and mapped host allocations and pinned ranges all
go through libcuemm's manager of Numba's context, so frees are deferred and
released in batches by cuemm (CUEMM_MAX_PENDING_DEALLOCS_COUNT and
CUEMM_MAX_PENDING_DEALLOCS_RATIO apply, not Numba's NUMBA_CUDA_* settings),
and cuda.defer_cleanup() opens a cuemm defer-cleanup scope.  Numba's extent
queries (driver.device_extents, driver.device_memory_size) answer for memory
cuemm handed out with cuemm's own record of it: with CUEMM_POOL=vmm the
driver's cuMemGetAddressRange would give the whole pool mapping, not the
block.  Managed memory
(cuda.managed_array) is not part of the plugin interface; it stays with
Numba's own code.

libcuemm is found as cuemm._lib finds it (cuemm._lib.candidates():
CUEMM_LIBRARY first, then the copy inside the package).

The module is pure ctypes.  Without Numba it still imports: the low-level
Manager class works on its own, and the plugin class raises when used.
"""

import contextlib
import ctypes
import inspect
import sys
import threading
import weakref

from cuemm import _lib as _cuemm_lib
from cuemm import _tags

__all__ = ["use", "CuemmMemoryManager", "CuemmError", "Manager", "load_library",
           "install_extents", "INTERFACE", "INTERFACE_VERSION",
           "region", "suspend", "resume", "current_tag"]

INTERFACE_VERSION = 1

# The EMM plugin interface, version 1: method name -> its parameters after
# self (interface_version is a read-only property).
INTERFACE = {
    "memalloc": ("size",),
    "memhostalloc": ("size", "mapped", "portable", "wc"),
    "mempin": ("owner", "pointer", "size", "mapped"),
    "initialize": (),
    "get_ipc_handle": ("memory",),
    "get_memory_info": (),
    "reset": (),
    "defer_cleanup": (),
    "interface_version": None,
}

CUDA_SUCCESS = 0
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_OUT_OF_MEMORY = 2
CUDA_ERROR_NOT_FOUND = 500
CUDA_ERROR_NOT_SUPPORTED = 801

CU_MEMHOSTALLOC_PORTABLE = 0x01
CU_MEMHOSTALLOC_DEVICEMAP = 0x02
CU_MEMHOSTALLOC_WRITECOMBINED = 0x04
CU_MEMHOSTREGISTER_DEVICEMAP = 0x02

# ---------------------------------------------------------------------------
# Numba, when present

_nbdrv = None
for _name in ("numba.cuda.cudadrv.driver", "numba_cuda.numba.cuda.cudadrv.driver"):
    try:
        _nbdrv = __import__(_name, fromlist=["driver"])
        break
    except Exception:  # absent, or unusable here: the plugin class says so when used
        _nbdrv = None
del _name

if _nbdrv is not None:
    _APIErrorBase = _nbdrv.CudaAPIError
    # HostOnlyCUDAMemoryManager keeps Numba's own code for what the plugin
    # interface leaves out (managed memory); every method of the interface is
    # overridden below.
    _ManagerBase = getattr(_nbdrv, "HostOnlyCUDAMemoryManager", None) or _nbdrv.BaseCUDAMemoryManager
else:
    class _APIErrorBase(Exception):
        def __init__(self, code, msg):
            self.code = code
            self.msg = msg
            super().__init__(code, msg)

        def __str__(self):
            return "[%s] %s" % (self.code, self.msg)

    class _ManagerBase(object):
        def __init__(self, *args, **kwargs):
            if "context" not in kwargs:
                raise RuntimeError("Memory manager requires a context")
            self.context = kwargs.pop("context")


_HOST_ONLY_BASE = _nbdrv is not None and _ManagerBase is getattr(_nbdrv, "HostOnlyCUDAMemoryManager", None)


def _result_code(code):
    """The code as Numba's binding spells it (an enum where it has one)."""
    binding = getattr(_nbdrv, "binding", None)
    cls = getattr(binding, "CUresult", None)
    if cls is not None:
        try:
            return cls(code)
        except Exception:
            pass
    return code


class CuemmError(_APIErrorBase):
    """A cuemm call failed.  .code is the CUresult (as Numba's binding spells
    it), .msg what failed and cuemm's explanation.  When Numba is present this
    is a numba.cuda.cudadrv.driver.CudaAPIError, so out of memory is
    recognized as such (code CUDA_ERROR_OUT_OF_MEMORY)."""

    def __init__(self, code, msg):
        super().__init__(_result_code(code), msg)
        self.result = int(code)


# ---------------------------------------------------------------------------
# libcuemm

class _DriverInfo(ctypes.Structure):
    _fields_ = [("version", ctypes.c_int), ("api_version", ctypes.c_int),
                ("vmm", ctypes.c_int), ("ipc", ctypes.c_int),
                ("async_", ctypes.c_int), ("path", ctypes.c_char * 4096),
                ("managed", ctypes.c_int), ("concurrent_managed", ctypes.c_int),
                ("prefetch", ctypes.c_int), ("pageable", ctypes.c_int),
                ("pageable_host_page_tables", ctypes.c_int)]


class Stats(_cuemm_lib.Stats):
    """struct cuemm_stats (its layout is cuemm._lib's)."""

    def as_dict(self):
        return {name: getattr(self, name) for name, _ in self._fields_}


class IpcHandle(ctypes.Structure):
    """struct cuemm_ipc_handle (128 bytes; the driver's CUipcMemHandle of the
    allocation's start in `driver`, the exported pointer's place in it in
    `offset`)."""
    _fields_ = [("magic", ctypes.c_char * 4), ("version", ctypes.c_uint16),
                ("kind", ctypes.c_uint16), ("source_pid", ctypes.c_uint32),
                ("checksum", ctypes.c_uint32), ("offset", ctypes.c_uint64),
                ("size", ctypes.c_uint64), ("alloc_size", ctypes.c_uint64),
                ("device_uuid", ctypes.c_uint8 * 16),
                ("reserved", ctypes.c_uint8 * 8),
                ("driver", ctypes.c_uint8 * 64)]


assert ctypes.sizeof(IpcHandle) == 128

_vp = ctypes.c_void_p
_u64 = ctypes.c_uint64
_sz = ctypes.c_size_t
_P = ctypes.POINTER
_PROTOTYPES = {
    "cuemm_version_string": (ctypes.c_char_p, ()),
    "cuemm_last_error": (ctypes.c_char_p, ()),
    "cuemm_driver_load": (ctypes.c_int, ()),
    "cuemm_driver_get_info": (ctypes.c_int, (_P(_DriverInfo),)),
    "cuemm_manager_create": (ctypes.c_int, (_vp, _vp, _P(_vp))),
    "cuemm_destroy": (ctypes.c_int, (_vp,)),
    "cuemm_get": (ctypes.c_int, (_P(_vp),)),
    "cuemm_context": (_vp, (_vp,)),
    "cuemm_allocate": (ctypes.c_int, (_vp, _sz, _P(_u64))),
    "cuemm_free": (ctypes.c_int, (_vp, _u64)),
    "cuemm_flush": (ctypes.c_int, (_vp,)),
    "cuemm_defer_cleanup_begin": (ctypes.c_int, (_vp,)),
    "cuemm_defer_cleanup_end": (ctypes.c_int, (_vp,)),
    "cuemm_host_allocate": (ctypes.c_int, (_vp, _sz, ctypes.c_uint, _P(_vp))),
    "cuemm_host_free": (ctypes.c_int, (_vp, _vp)),
    "cuemm_host_device_pointer": (ctypes.c_int, (_vp, _vp, _P(_u64))),
    "cuemm_host_pin": (ctypes.c_int, (_vp, _vp, _sz, ctypes.c_uint)),
    "cuemm_host_unpin": (ctypes.c_int, (_vp, _vp)),
    "cuemm_get_memory_info": (ctypes.c_int, (_vp, _P(_sz), _P(_sz))),
    "cuemm_get_stats": (ctypes.c_int, (_vp, _P(Stats))),
    "cuemm_reset": (ctypes.c_int, (_vp,)),
}
# Present in libraries built with IPC support; looked up separately so that
# everything else works without them.
_OPTIONAL = {
    "cuemm_ipc_export": (ctypes.c_int, (_vp, _u64, _sz, _P(IpcHandle))),
    "cuemm_address_range": (ctypes.c_int, (_vp, _u64, _P(_u64), _P(_sz))),
}

_lib = None
_lib_path = None
_lib_lock = threading.Lock()


def _candidates():
    return _cuemm_lib.candidates()


def load_library():
    """Loads libcuemm (once) and returns the ctypes.CDLL.  Raises OSError
    naming every file tried when none loads."""
    global _lib, _lib_path
    with _lib_lock:
        if _lib is not None:
            return _lib
        tried = []
        for how, path in _candidates():
            try:
                lib = ctypes.CDLL(path)
                missing = [n for n in _PROTOTYPES if not hasattr(lib, n)]
                if missing:
                    raise OSError("not libcuemm: lacks %s" % ", ".join(missing))
            except OSError as e:
                tried.append("%s (%s): %s" % (path, how, e))
                continue
            for name, (res, args) in list(_PROTOTYPES.items()) + list(_OPTIONAL.items()):
                fn = getattr(lib, name, None)
                if fn is not None:
                    fn.restype = res
                    fn.argtypes = args
            _lib, _lib_path = lib, path
            return lib
        raise OSError(
            "cuemm.numba: cannot load libcuemm; tried:\n  " + "\n  ".join(tried) +
            "\n" + _cuemm_lib.HOW_TO_INSTALL)


def loaded_library():
    """The file libcuemm was loaded from (loading it if needed)."""
    load_library()
    return _lib_path


def has_ipc():
    """Whether the loaded libcuemm can export IPC handles."""
    return hasattr(load_library(), "cuemm_ipc_export")


def last_error():
    msg = load_library().cuemm_last_error()
    return msg.decode("utf-8", "replace") if msg else ""


def _check(rc, what):
    if rc != CUDA_SUCCESS:
        raise CuemmError(rc, "%s: %s" % (what, last_error()))


_libcuda = None


def _driver():
    """libcuda as cuemm loaded it (the same file), for the context stack."""
    global _libcuda
    if _libcuda is None:
        lib = load_library()
        _check(lib.cuemm_driver_load(), "cuemm_driver_load")
        info = _DriverInfo()
        _check(lib.cuemm_driver_get_info(ctypes.byref(info)), "cuemm_driver_get_info")
        cuda = ctypes.CDLL(info.path.decode())
        for base, argtypes in (("cuCtxPushCurrent", (_vp,)),
                               ("cuCtxPopCurrent", (_P(_vp),)),
                               ("cuCtxGetCurrent", (_P(_vp),))):
            fn = getattr(cuda, base + "_v2", None) or getattr(cuda, base)
            fn.restype = ctypes.c_int
            fn.argtypes = argtypes
            setattr(cuda, "cuemm_" + base, fn)
        _libcuda = cuda
    return _libcuda


def as_address(obj):
    """An integer address from a pointer or handle of any binding: int,
    ctypes pointer (c_void_p), cuda-python objects (CUdeviceptr, CUcontext:
    int() or getPtr()), or None (0)."""
    if obj is None:
        return 0
    if isinstance(obj, int):
        return obj
    if isinstance(obj, ctypes.c_void_p):
        return obj.value or 0
    try:
        return int(obj)
    except (TypeError, ValueError):
        pass
    value = getattr(obj, "value", None)
    if isinstance(value, int):
        return value
    get_ptr = getattr(obj, "getPtr", None)
    if get_ptr is not None:
        return ctypes.c_void_p.from_address(int(get_ptr())).value or 0
    raise TypeError("cannot read an address from %r" % (obj,))


# ---------------------------------------------------------------------------
# The manager of one context

class Manager(object):
    """A cuemm manager (one per CUDA context), shared by every plugin instance
    of that context.  `epoch` grows at every reset: a finalizer of memory
    from an earlier epoch does nothing (reset freed it already, and the
    address may be in use again)."""

    _by_handle = {}
    _lock = threading.Lock()

    def __init__(self, handle):
        self.handle = handle
        self.epoch = 0
        self._lib = load_library()

    @classmethod
    def _wrap(cls, handle):
        with cls._lock:
            m = cls._by_handle.get(handle)
            if m is None:
                m = cls._by_handle[handle] = cls(handle)
            return m

    @classmethod
    def current(cls):
        """The manager of the calling thread's current context (cuemm_get)."""
        lib = load_library()
        m = ctypes.c_void_p()
        _check(lib.cuemm_get(ctypes.byref(m)), "cuemm_get")
        return cls._wrap(m.value)

    @classmethod
    def for_context(cls, ctx):
        """The manager of context `ctx` (an address, or any handle object),
        created on first use; 0 or None: the current context's."""
        ctx = as_address(ctx)
        if not ctx:
            return cls.current()
        cuda = _driver()
        _check(cuda.cuemm_cuCtxPushCurrent(ctypes.c_void_p(ctx)), "cuCtxPushCurrent")
        try:
            return cls.current()
        finally:
            popped = ctypes.c_void_p()
            cuda.cuemm_cuCtxPopCurrent(ctypes.byref(popped))

    @property
    def context(self):
        return self._lib.cuemm_context(self.handle) or 0

    def alloc(self, size):
        p = _u64()
        _check(self._lib.cuemm_allocate(self.handle, size, ctypes.byref(p)),
               "cuemm_allocate(%d bytes)" % size)
        return p.value

    def free(self, p):
        _check(self._lib.cuemm_free(self.handle, p), "cuemm_free(0x%x)" % p)

    def flush(self):
        _check(self._lib.cuemm_flush(self.handle), "cuemm_flush")

    def defer_begin(self):
        _check(self._lib.cuemm_defer_cleanup_begin(self.handle), "cuemm_defer_cleanup_begin")

    def defer_end(self):
        _check(self._lib.cuemm_defer_cleanup_end(self.handle), "cuemm_defer_cleanup_end")

    @contextlib.contextmanager
    def defer_cleanup(self):
        """A defer-cleanup scope, closed on every way out of the block."""
        self.defer_begin()
        try:
            yield
        finally:
            self.defer_end()

    def host_alloc(self, size, flags=0):
        p = ctypes.c_void_p()
        _check(self._lib.cuemm_host_allocate(self.handle, size, flags, ctypes.byref(p)),
               "cuemm_host_allocate(%d bytes, flags 0x%x)" % (size, flags))
        return p.value

    def host_free(self, p):
        _check(self._lib.cuemm_host_free(self.handle, p), "cuemm_host_free(0x%x)" % p)

    def host_device_pointer(self, p):
        d = _u64()
        _check(self._lib.cuemm_host_device_pointer(self.handle, p, ctypes.byref(d)),
               "cuemm_host_device_pointer(0x%x)" % p)
        return d.value

    def pin(self, p, size, flags=0):
        _check(self._lib.cuemm_host_pin(self.handle, p, size, flags),
               "cuemm_host_pin(0x%x, %d bytes, flags 0x%x)" % (p, size, flags))

    def unpin(self, p):
        _check(self._lib.cuemm_host_unpin(self.handle, p), "cuemm_host_unpin(0x%x)" % p)

    def memory_info(self):
        free, total = _sz(), _sz()
        _check(self._lib.cuemm_get_memory_info(self.handle, ctypes.byref(free), ctypes.byref(total)),
               "cuemm_get_memory_info")
        return free.value, total.value

    def stats(self):
        s = Stats()
        _check(self._lib.cuemm_get_stats(self.handle, ctypes.byref(s)), "cuemm_get_stats")
        return s.as_dict()

    def reset(self):
        self.epoch += 1
        _check(self._lib.cuemm_reset(self.handle), "cuemm_reset")

    def ipc_export(self, p, size=0):
        """A cuemm_ipc_handle for device pointer p (inside an allocation of
        this manager) and `size` bytes from it."""
        fn = getattr(self._lib, "cuemm_ipc_export", None)
        if fn is None:
            raise CuemmError(CUDA_ERROR_NOT_SUPPORTED,
                             "IPC export: %s has no cuemm_ipc_export (a cuemm "
                             "built without IPC support)" % _lib_path)
        h = IpcHandle()
        _check(fn(self.handle, p, size, ctypes.byref(h)),
               "cuemm_ipc_export(0x%x, %d bytes)" % (p, size))
        return h

    def address_range(self, p):
        """(start, size) of the allocation of this manager that holds device
        pointer p (a pool block, not the driver's whole mapping), or None
        when p is not in one."""
        fn = getattr(self._lib, "cuemm_address_range", None)
        if fn is None:
            return None
        base, size = _u64(), _sz()
        rc = fn(self.handle, p, ctypes.byref(base), ctypes.byref(size))
        if rc == CUDA_ERROR_NOT_FOUND:
            return None
        _check(rc, "cuemm_address_range(0x%x)" % p)
        return base.value, size.value

    @classmethod
    def find_range(cls, p):
        """(start, size) of the allocation holding p among every manager the
        plugin uses, or None when cuemm did not hand p out."""
        with cls._lock:
            managers = list(cls._by_handle.values())
        for m in managers:
            hit = m.address_range(p)
            if hit is not None:
                return hit
        return None

    # Finalizers: a free whose epoch is over, or one run while the interpreter
    # shuts down after a failure, is dropped.
    def _finalizer(self, release, p):
        epoch = self.epoch

        def finalize():
            if self.epoch != epoch:
                return
            try:
                release(p)
            except CuemmError:
                if not sys.is_finalizing():
                    raise
        return finalize


# ---------------------------------------------------------------------------
# The plugin

def _need_numba():
    if _nbdrv is None:
        raise RuntimeError("cuemm.numba: Numba (numba-cuda) is not importable here; "
                           "the plugin needs it")


def _construct(cls, **kwargs):
    """cls(**kwargs), passing only the parameters this Numba's constructor
    takes (older and newer versions differ in taking `context`)."""
    try:
        params = inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):
        params = None
    if params is not None and not any(p.kind == p.VAR_KEYWORD for p in params.values()):
        kwargs = {k: v for k, v in kwargs.items() if k in params}
    return cls(**kwargs)


def _host_pointer(addr):
    # Numba's own host pointers are ints with the NVIDIA binding, c_void_p
    # with its older ctypes binding.
    if getattr(_nbdrv, "USE_NV_BINDING", True):
        return addr
    return ctypes.c_void_p(addr)


def install_extents(drv):
    """Routes Numba's extent queries through cuemm: drv.device_extents (and
    so drv.device_memory_size, which calls it) answers for memory cuemm
    handed out with cuemm_address_range, and with Numba's own code
    (cuMemGetAddressRange) for any other memory.  The driver's answer for a
    pool block is the whole mapping around it, so a memset or copy sized
    from it would overrun the block.  Idempotent; returns the function
    installed."""
    current = drv.device_extents
    if getattr(current, "_cuemm", False):
        return current
    numba_extents = current

    def device_extents(devmem):
        addr = as_address(drv.device_ctypes_pointer(devmem))
        hit = Manager.find_range(addr) if addr else None
        if hit is None:
            return numba_extents(devmem)
        start, size = hit
        # As Numba's own returns them: CUdeviceptr objects where it uses the
        # NVIDIA binding's types (USE_NV_BINDING), plain ints otherwise.
        if getattr(drv, "USE_NV_BINDING", False) is True and hasattr(getattr(drv, "binding", None), "CUdeviceptr"):
            return drv.binding.CUdeviceptr(start), drv.binding.CUdeviceptr(start + size)
        return start, start + size

    device_extents._cuemm = True
    device_extents.numba_extents = numba_extents
    device_extents.__doc__ = numba_extents.__doc__
    drv.device_extents = device_extents
    return device_extents


class CuemmMemoryManager(_ManagerBase):
    """Numba EMM plugin (interface version 1) over libcuemm."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not hasattr(self, "allocations"):
            self.allocations = {}
        self._cuemm = None

    # -- set-up
    def initialize(self):
        _need_numba()
        if self._cuemm is None:
            self._cuemm = Manager.for_context(as_address(self.context.handle))
        install_extents(_nbdrv)

    @property
    def cuemm(self):
        """The cuemm Manager of this context."""
        if self._cuemm is None:
            self.initialize()
        return self._cuemm

    @property
    def interface_version(self):
        return INTERFACE_VERSION

    def _ctx(self):
        return weakref.proxy(self.context)

    # -- tags: suspend and resume (docs/suspend-frameworks.md)
    def _device_id(self):
        return int(self.context.device.id)

    def _allocating_manager(self):
        """The manager device allocations go to: the current tag's on this
        context's device, else this context's."""
        tag = _tags.current_tag()
        if tag is None:
            return self.cuemm
        return Manager._wrap(_tag_call(_tags.tag_manager, tag, self._device_id()))

    def suspend(self, tag, keep=False):
        """Suspends `tag`'s manager on this context's device (its memory
        goes back to the driver; addresses kept, contents too with
        keep=True).  Synchronizes the context first.  Raises CuemmError."""
        _tag_call(_tags.suspend, tag, self._device_id(), keep=keep)

    def resume(self, tag):
        """Resumes `tag`'s manager on this context's device.  Raises
        CuemmError (result 2, out of memory: the tag stays suspended)."""
        _tag_call(_tags.resume, tag, self._device_id())

    # -- device memory
    def memalloc(self, size):
        m = self._allocating_manager()
        ptr = m.alloc(size)
        key = ptr
        allocations = self.allocations
        free = m._finalizer(m.free, ptr)

        def finalizer():
            allocations.pop(key, None)
            free()

        mem = _construct(_nbdrv.AutoFreePointer, context=self._ctx(),
                         pointer=ctypes.c_void_p(ptr), size=size,
                         finalizer=finalizer)
        self.allocations[key] = mem
        return mem.own()

    # -- host memory
    def memhostalloc(self, size, mapped=False, portable=False, wc=False):
        m = self.cuemm
        flags = ((CU_MEMHOSTALLOC_DEVICEMAP if mapped else 0) |
                 (CU_MEMHOSTALLOC_PORTABLE if portable else 0) |
                 (CU_MEMHOSTALLOC_WRITECOMBINED if wc else 0))
        ptr = m.host_alloc(size, flags)
        return self._host_memory(m, ptr, size, mapped, None, m._finalizer(m.host_free, ptr))

    def mempin(self, owner, pointer, size, mapped=False):
        m = self.cuemm
        addr = as_address(pointer)
        m.pin(addr, size, CU_MEMHOSTREGISTER_DEVICEMAP if mapped else 0)
        return self._host_memory(m, addr, size, mapped, owner, m._finalizer(m.unpin, addr))

    def _host_memory(self, m, ptr, size, mapped, owner, release):
        key = ptr
        if not mapped:
            return _construct(_nbdrv.PinnedMemory, context=self._ctx(),
                              pointer=_host_pointer(ptr), size=size,
                              owner=owner, finalizer=release)
        allocations = self.allocations

        def finalizer():
            allocations.pop(key, None)
            release()

        try:
            dptr = m.host_device_pointer(ptr)
            mem = _construct(_nbdrv.MappedMemory, context=self._ctx(),
                             pointer=_host_pointer(ptr), size=size,
                             owner=owner, finalizer=finalizer)
        except BaseException:
            release()
            raise
        # From here on, mem's finalizer releases the memory.
        if as_address(mem.device_pointer) != dptr:
            raise CuemmError(CUDA_ERROR_INVALID_VALUE,
                             "mapped host memory 0x%x: Numba sees device address 0x%x, "
                             "cuemm 0x%x" % (ptr, as_address(mem.device_pointer), dptr))
        self.allocations[key] = mem
        return mem.own()

    # -- IPC
    def get_ipc_handle(self, memory):
        _need_numba()
        ptr = as_address(memory.device_pointer)
        h = self.cuemm.ipc_export(ptr, memory.size)
        raw = bytes(h.driver)
        binding = getattr(_nbdrv, "binding", None)
        if binding is not None and hasattr(binding, "CUipcMemHandle"):
            handle = binding.CUipcMemHandle()
            handle.reserved = raw
        else:
            handle = (ctypes.c_byte * 64).from_buffer_copy(raw)
        source_info = self.context.device.get_device_identity()
        return _construct(_nbdrv.IpcHandle, base=memory, handle=handle,
                          size=memory.size, source_info=source_info,
                          offset=int(h.offset))

    # -- information, reset, scopes
    def get_memory_info(self):
        free, total = self.cuemm.memory_info()
        return _nbdrv.MemoryInfo(free=free, total=total)

    def reset(self):
        # Dropping the records runs the finalizers of memory nobody else
        # holds (their frees join cuemm's queue); cuemm_reset then frees
        # whatever is left, and finalizers that run later do nothing.
        self.allocations.clear()
        if _HOST_ONLY_BASE:
            super().reset()
        if self._cuemm is not None:
            self._cuemm.reset()

    @contextlib.contextmanager
    def defer_cleanup(self):
        with contextlib.ExitStack() as stack:
            if _HOST_ONLY_BASE:
                stack.enter_context(super().defer_cleanup())
            stack.enter_context(self.cuemm.defer_cleanup())
            yield


_numba_memory_manager = CuemmMemoryManager


def use():
    """Makes cuemm Numba's memory manager from the program, as
    NUMBA_CUDA_MEMORY_MANAGER=cuemm.numba does from the environment
    (numba.cuda.set_memory_manager(CuemmMemoryManager)); call it before any
    CUDA work.  Raises ImportError when Numba (numba-cuda) is not
    importable."""
    try:
        from numba import cuda
    except ImportError as e:
        raise ImportError("cuemm.numba: Numba is not importable here (%s); install it (`pip install "
                          "numba-cuda`), or use cuemm.torch or cuemm.cupy for the other frameworks" % e) from e
    if _nbdrv is None:
        raise ImportError("cuemm.numba: Numba imports but its CUDA driver module does not "
                          "(numba.cuda.cudadrv.driver); install numba-cuda")
    cuda.set_memory_manager(CuemmMemoryManager)


# ---- tags, module-level (the plugin's methods on the current context's device)

def _tag_call(fn, *args, **kwargs):
    """A call of cuemm._tags, its failure raised as this module's CuemmError
    (Numba's CudaAPIError where Numba is present)."""
    try:
        return fn(*args, **kwargs)
    except _cuemm_lib.CuemmError as e:
        raise CuemmError(e.code, e.msg) from None


def _current_device(device):
    if device is not None:
        return int(device)
    try:
        from numba import cuda
        return int(cuda.get_current_device().id)
    except Exception:  # no Numba, or no context yet: device 0
        return 0


def region(tag):
    """A context manager: device allocations the plugin makes inside go to
    `tag`'s manager (process-wide, as in cuemm.torch.region)."""
    return _tags.region(tag)


def current_tag():
    """The current tag (None: the default)."""
    return _tags.current_tag()


def suspend(tag, keep=False, device=None):
    """Suspends `tag`'s manager on the device (None: Numba's current one)."""
    _tag_call(_tags.suspend, tag, _current_device(device), keep=keep)


def resume(tag, device=None):
    """Resumes `tag`'s manager on the device (None: Numba's current one)."""
    _tag_call(_tags.resume, tag, _current_device(device))
