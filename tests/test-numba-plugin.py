"""test-numba-plugin.py: the Numba plugin (python/cuemm/numba.py) imports, has
the whole EMM interface (version 1), and its ctypes bindings work against
libcuemm on the suite's driver (simcuda unless CUEMM_TEST_DRIVER=system).
Prints TAP.  Numba is not needed; where it is importable, the plugin is also
checked against Numba's own BaseCUDAMemoryManager."""

import ctypes
import gc
import inspect
import os
import subprocess
import sys
import traceback

build = os.environ.get("CUEMM_TOP_BUILDDIR", ".")
src = os.environ.get("top_srcdir", os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
# CUEMM_PYTHON_INSTALLED=1: the package as installed (pip or make install),
# found through the interpreter's own path, not the source tree.
if os.environ.get("CUEMM_PYTHON_INSTALLED") != "1":
    sys.path.insert(0, os.path.join(src, "python"))

# The interface Numba defines for EMM plugins, version 1
# (numba.cuda.BaseCUDAMemoryManager): method -> parameters after self.
EMM_V1 = {
    "memalloc": ["size"],
    "memhostalloc": ["size", "mapped", "portable", "wc"],
    "mempin": ["owner", "pointer", "size", "mapped"],
    "initialize": [],
    "get_ipc_handle": ["memory"],
    "get_memory_info": [],
    "reset": [],
    "defer_cleanup": [],
}

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from taputil import done, library_for_tests, ok, raises, skip  # noqa: E402


def params(fn):
    return [p.name for p in inspect.signature(fn).parameters.values()][1:]


# ---- import and interface --------------------------------------------------

try:
    import cuemm.numba as cn
except Exception:
    print("1..1")
    ok(False, "cuemm.numba imports", traceback.format_exc())
    sys.exit(1)
ok(True, "cuemm.numba imports from %s" % os.path.dirname(cn.__file__))
import warnings  # noqa: E402
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import cuemm_numba  # noqa: E402
ok(cuemm_numba is cn, "the old name cuemm_numba is the same module")
ok(any(issubclass(w.category, DeprecationWarning) and "cuemm.numba" in str(w.message) for w in caught),
   "importing it warns that it is deprecated, naming cuemm.numba", [str(w.message) for w in caught])

cls = getattr(cn, "_numba_memory_manager", None)
ok(cls is cn.CuemmMemoryManager, "_numba_memory_manager is the plugin class")
for name, want in sorted(EMM_V1.items()):
    fn = getattr(cls, name, None)
    ok(callable(fn) and params(fn) == want,
       "%s(%s)" % (name, ", ".join(want)),
       "has %s" % (params(fn) if callable(fn) else fn))
ok(isinstance(inspect.getattr_static(cls, "interface_version"), property),
   "interface_version is a property")

# Numba calls cls(context=None) in set_memory_manager to read the version:
# that must not load anything.
dummy = cls(context=None)
ok(dummy.interface_version == 1, "interface_version is 1, read without a context")
ok(isinstance(raises(lambda: cls(), RuntimeError), RuntimeError),
   "constructing without context= raises RuntimeError, as Numba's base does")

try:
    from numba.cuda.cudadrv import driver as nbdrv
except Exception as e:
    nbdrv = None
    why = "Numba not importable (%s)" % type(e).__name__
    skip("subclass of Numba's BaseCUDAMemoryManager", why)
    skip("no abstract method left unimplemented", why)
    skip("signatures match Numba's BaseCUDAMemoryManager", why)
    ok(isinstance(raises(lambda: dummy.initialize(), RuntimeError), RuntimeError),
       "without Numba, initialize raises RuntimeError saying so")
    e = raises(cn.use, ImportError)
    ok(isinstance(e, ImportError) and "install numba-cuda" in str(e), "without Numba, use() raises ImportError saying so", e)
else:
    base = nbdrv.BaseCUDAMemoryManager
    ok(issubclass(cls, base), "subclass of Numba's BaseCUDAMemoryManager")
    ok(not getattr(cls, "__abstractmethods__", None),
       "no abstract method left unimplemented", getattr(cls, "__abstractmethods__", None))
    bad = [n for n in EMM_V1 if params(getattr(base, n)) != params(getattr(cls, n))]
    ok(not bad, "signatures match Numba's BaseCUDAMemoryManager", bad)
    skip("without Numba, initialize raises RuntimeError saying so", "Numba is importable")
    skip("without Numba, use() raises ImportError saying so", "Numba is importable")
    saved = nbdrv._memory_manager if hasattr(nbdrv, "_memory_manager") else None
    cn.use()
    ok(getattr(nbdrv, "_memory_manager", None) is cls, "use(): Numba's memory manager is the plugin")
    if hasattr(nbdrv, "_memory_manager"):
        nbdrv._memory_manager = saved
    # Numba's own resolution of NUMBA_CUDA_MEMORY_MANAGER (it imports the
    # module named and takes its _numba_memory_manager), by both names.
    for name in ("cuemm.numba", "cuemm_numba"):
        if not hasattr(nbdrv, "_ensure_memory_manager"):
            skip("NUMBA_CUDA_MEMORY_MANAGER=%s: Numba takes the plugin" % name, "no _ensure_memory_manager here")
            continue
        env = dict(os.environ, NUMBA_CUDA_MEMORY_MANAGER=name)
        if os.environ.get("CUEMM_PYTHON_INSTALLED") != "1":
            env["PYTHONPATH"] = os.path.join(src, "python")
        r = subprocess.run([sys.executable, "-c", "from numba.cuda.cudadrv import driver as d\n"
                            "d._ensure_memory_manager()\nm = d._memory_manager\n"
                            "print(m.__module__ + '.' + m.__name__)"],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
        ok(r.returncode == 0 and r.stdout.strip().splitlines()[-1:] == ["cuemm.numba.CuemmMemoryManager"],
           "NUMBA_CUDA_MEMORY_MANAGER=%s: Numba takes the plugin" % name, r.stdout)

# as_address reads every binding's pointers.


class WithPtr(object):
    def __init__(self, v):
        self._cell = ctypes.c_void_p(v)

    def getPtr(self):
        return ctypes.addressof(self._cell)


ok([cn.as_address(x) for x in (None, 0x1000, ctypes.c_void_p(0x2000), ctypes.c_void_p(),
                               ctypes.c_uint64(5).value, WithPtr(0x3000))]
   == [0, 0x1000, 0x2000, 0, 5, 0x3000],
   "as_address reads int, c_void_p and getPtr() handles")

# ---- finding the library ----------------------------------------------------

env = dict(os.environ, CUEMM_LIBRARY="/nonexistent/libcuemm.so.0")
if os.environ.get("CUEMM_PYTHON_INSTALLED") != "1":
    env["PYTHONPATH"] = os.path.join(src, "python")
r = subprocess.run([sys.executable, "-c", "import cuemm.numba as c; c.load_library()"],
                   env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
ok(r.returncode != 0 and "/nonexistent/libcuemm.so.0 (CUEMM_LIBRARY)" in r.stdout
   and "cannot load libcuemm" in r.stdout,
   "a CUEMM_LIBRARY that does not load: a message naming it", r.stdout)

lib = library_for_tests(build, os.environ.get("CUEMM_PYTHON_INSTALLED") == "1")
cn.load_library()
ok(lib is None or cn.loaded_library() == lib, "CUEMM_LIBRARY is the library loaded (%s)" % cn.loaded_library())
if lib is None:
    pkg = os.path.dirname(os.path.abspath(cn.__file__))
    ok(not pkg.startswith(os.path.abspath(os.path.join(src, "python"))), "the package imported is the installed one (%s)" % pkg)
    ok(cn.loaded_library() == os.path.join(pkg, "libcuemm.so.0"), "libcuemm is the one inside the package")
version = cn.load_library().cuemm_version_string().decode()
ok(version.count(".") == 2, "cuemm_version_string through ctypes: %s" % version)

# ---- a context made with the driver, as Numba makes one ---------------------

cn._check(cn.load_library().cuemm_driver_load(), "cuemm_driver_load")
cuda = cn._driver()
dev = ctypes.c_int()
ctx = ctypes.c_void_p()
ok(cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0 and
   cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0 and ctx.value,
   "a primary context from the driver")
cur = ctypes.c_void_p()
cuda.cuCtxSetCurrent(None)

m = cn.Manager.for_context(ctx)
cuda.cuemm_cuCtxGetCurrent(ctypes.byref(cur))
ok(m.context == ctx.value, "Manager.for_context: a manager of that context, none current")
ok(not cur.value, "the thread's current context is left as it was (none)")
ok(cn.Manager.for_context(ctx.value) is m, "the same context gives the same manager")
cuda.cuCtxSetCurrent(ctx)
ok(cn.Manager.current() is m, "cuemm_get on the current context finds it too")
cuda.cuCtxSetCurrent(None)

s0 = m.stats()
p = m.alloc(1 << 20)
s = m.stats()
ok(p != 0 and s["live_count"] == s0["live_count"] + 1 and s["live_bytes"] == s0["live_bytes"] + (1 << 20),
   "alloc: 1 MiB live", s)
m.free(p)
s = m.stats()
ok(s["pending_count"] == s0["pending_count"] + 1 and s["live_count"] == s0["live_count"],
   "free: queued, not released", s)
m.flush()
ok(m.stats()["pending_count"] == 0, "flush releases the queue")

with m.defer_cleanup():
    ptrs = [m.alloc(4096) for _ in range(20)]
    for q in ptrs:
        m.free(q)
    s = m.stats()
ok(s["pending_count"] == 20 and s["defer_depth"] == 1,
   "inside a defer scope: 20 frees held, depth 1", s)
ok(m.stats()["defer_depth"] == 0, "the scope is closed on leaving the block")
try:
    with m.defer_cleanup():
        raise KeyError("inside")
except KeyError:
    pass
ok(m.stats()["defer_depth"] == 0, "the scope is closed when the block raises")
e = raises(m.defer_end, cn.CuemmError)
ok(isinstance(e, cn.CuemmError) and e.result == 1, "closing a scope not open: CUDA_ERROR_INVALID_VALUE", e)
m.flush()

hp = m.host_alloc(8192, cn.CU_MEMHOSTALLOC_DEVICEMAP | cn.CU_MEMHOSTALLOC_PORTABLE)
dp = m.host_device_pointer(hp)
ok(hp and dp and m.stats()["host_live_count"] == 1, "mapped host allocation with a device address")
m.host_free(hp)
ok(m.stats()["host_live_count"] == 0, "host free accepted")
buf = ctypes.create_string_buffer(1 << 16)
m.pin(ctypes.addressof(buf), len(buf), cn.CU_MEMHOSTREGISTER_DEVICEMAP)
ok(m.stats()["pinned_count"] == 1 and m.host_device_pointer(ctypes.addressof(buf)),
   "pin a host buffer, mapped")
e = raises(lambda: m.pin(ctypes.addressof(buf), len(buf)), cn.CuemmError)
ok(isinstance(e, cn.CuemmError) and e.result == 712,
   "pinning it again: CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", e)
m.unpin(ctypes.addressof(buf))
ok(m.stats()["pinned_count"] == 0, "unpin is immediate")

free, total = m.memory_info()
ok(0 < free <= total and total == m.stats()["total_bytes"], "memory_info: free %d of %d" % (free, total))

e = raises(lambda: m.free(0x1234), cn.CuemmError)
ok(isinstance(e, cn.CuemmError) and e.result == 1 and "0x1234" in e.msg and len(e.msg) > 20,
   "free of a pointer never allocated: CUDA_ERROR_INVALID_VALUE with cuemm's message", e)
e = raises(lambda: m.alloc(total + (1 << 30)), cn.CuemmError)
ok(isinstance(e, cn.CuemmError) and e.result == 2,
   "allocating more than the device holds: CUDA_ERROR_OUT_OF_MEMORY", e)
if nbdrv is not None:
    ok(isinstance(e, nbdrv.CudaAPIError), "the error is Numba's CudaAPIError")

# A reset frees everything; finalizers from before it do nothing.
p = m.alloc(4096)
fin = m._finalizer(m.free, p)
epoch = m.epoch
m.reset()
s = m.stats()
ok(m.epoch == epoch + 1 and s["live_count"] == 0 and s["pending_count"] == 0, "reset frees everything", s)
frees = s["frees"]
fin()
ok(m.stats()["frees"] == frees, "a finalizer from before the reset does nothing")
p = m.alloc(4096)
fin = m._finalizer(m.free, p)
fin()
ok(m.stats()["pending_count"] == 1, "a finalizer from this epoch frees through cuemm")
m.flush()

# IPC export: a slice carries its offset.
p = m.alloc(1 << 16)
if cn.has_ipc():
    h = m.ipc_export(p + 256, 1024)
    ok(h.magic == b"cuem" and h.offset == 256 and h.size == 1024 and any(bytes(h.driver)),
       "ipc_export of a slice: offset 256, 1024 bytes, the driver's handle")
else:
    e = raises(lambda: m.ipc_export(p, 1024), cn.CuemmError)
    ok(isinstance(e, cn.CuemmError) and e.result == 801 and "cuemm_ipc_export" in e.msg,
       "this libcuemm has no IPC export: CUDA_ERROR_NOT_SUPPORTED saying so", e)
m.free(p)
m.flush()

# ---- extents: Numba's device_extents / device_memory_size through cuemm -----
#
# A stand-in for numba.cuda.cudadrv.driver: the same two functions as Numba
# writes them (device_memory_size looks device_extents up in its module's
# globals), asking the driver with cuMemGetAddressRange.  With CUEMM_POOL=vmm
# the driver's answer for a pool block is the whole mapping, and a memset of
# that many bytes fails (numba-cuda's test_host_alloc_pinned did).

import types

_cu_u64 = ctypes.c_uint64
for _name, _args in (("cuMemGetAddressRange_v2", (ctypes.POINTER(_cu_u64), ctypes.POINTER(ctypes.c_size_t), _cu_u64)),
                     ("cuMemAlloc_v2", (ctypes.POINTER(_cu_u64), ctypes.c_size_t)),
                     ("cuMemFree_v2", (_cu_u64,)),
                     ("cuMemsetD8_v2", (_cu_u64, ctypes.c_ubyte, ctypes.c_size_t)),
                     ("cuMemcpyHtoD_v2", (_cu_u64, ctypes.c_void_p, ctypes.c_size_t)),
                     ("cuMemcpyDtoH_v2", (ctypes.c_void_p, _cu_u64, ctypes.c_size_t)),
                     ("cuCtxCreate_v2", (ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint, ctypes.c_int)),
                     ("cuCtxDestroy_v2", (ctypes.c_void_p,))):
    getattr(cuda, _name).restype = ctypes.c_int
    getattr(cuda, _name).argtypes = _args

fake = types.ModuleType("fake_numba_driver")
fake.__dict__.update(ctypes=ctypes, cuda=cuda, _cu_u64=_cu_u64)
exec("""
calls = []
USE_NV_BINDING = False

class Mem(object):
    __cuda_memory__ = True

    def __init__(self, ptr):
        self.device_ctypes_pointer = ctypes.c_void_p(ptr)


def device_ctypes_pointer(obj):
    return obj.device_ctypes_pointer


def device_extents(devmem):
    calls.append(devmem)
    s, n = _cu_u64(), ctypes.c_size_t()
    rc = cuda.cuMemGetAddressRange_v2(ctypes.byref(s), ctypes.byref(n), device_ctypes_pointer(devmem).value)
    if rc:
        raise RuntimeError("cuMemGetAddressRange: %d" % rc)
    return s.value, s.value + n.value


def device_memory_size(devmem):
    sz = getattr(devmem, "_cuda_memsize_", None)
    if sz is None:
        s, e = device_extents(devmem)
        sz = e - s
        devmem._cuda_memsize_ = sz
    return sz
""", fake.__dict__)
numba_extents = fake.device_extents

# A second context whose manager has a pool (cuemm_get reads CUEMM_POOL).
ctx2 = ctypes.c_void_p()
ok(cuda.cuCtxCreate_v2(ctypes.byref(ctx2), 0, dev) == 0 and ctx2.value, "a second context")
cuda.cuemm_cuCtxPopCurrent(ctypes.byref(ctypes.c_void_p()))
os.environ["CUEMM_POOL"] = "vmm"
try:
    pm = cn.Manager.for_context(ctx2)
finally:
    del os.environ["CUEMM_POOL"]
a, b, c = pm.alloc(4096), pm.alloc(5000), pm.alloc(4096)
cuda.cuCtxSetCurrent(ctx2)  # for the driver calls below, as Numba has its context current
ok(pm.address_range(b + 4999) == (b, 5000), "Manager.address_range of a pool block's last byte: the block")
ok(pm.address_range(b + 5000) is None, "one past its end: None (CUDA_ERROR_NOT_FOUND)")
ok(m.address_range(b) is None, "another manager's block: None")
ok(cn.Manager.find_range(b + 100) == (b, 5000), "Manager.find_range looks through every manager")

installed = cn.install_extents(fake)
ok(fake.device_extents is installed and cn.install_extents(fake) is installed,
   "install_extents replaces device_extents, once")
ok(installed.numba_extents is numba_extents, "and keeps Numba's own for other memory")

s0, e0 = numba_extents(fake.Mem(b + 10))
ok(s0 <= a and e0 >= c + 4096 and e0 - s0 > 5000,
   "the driver's extent of a pool block is the mapping: %d bytes from 0x%x" % (e0 - s0, s0))
del fake.calls[:]
ok(fake.device_extents(fake.Mem(b + 10)) == (b, b + 5000), "device_extents of a pool block: the block")
mem = fake.Mem(b)
ok(fake.device_memory_size(mem) == 5000, "device_memory_size of a pool block: 5000",
   getattr(mem, "_cuda_memsize_", None))
ok(not fake.calls, "Numba's own device_extents was not asked", fake.calls)

pattern = (ctypes.c_ubyte * 4096)(*([0x11] * 4096))
ok(cuda.cuMemcpyHtoD_v2(a, pattern, 4096) == 0 and cuda.cuMemcpyHtoD_v2(c, pattern, 4096) == 0,
   "the neighbours hold a pattern")
ok(cuda.cuMemsetD8_v2(b, 0, fake.device_memory_size(fake.Mem(b))) == 0,
   "cuMemsetD8 over device_memory_size succeeds (as test_host_alloc_pinned does)")
back = (ctypes.c_ubyte * 4096)()
ok(cuda.cuMemcpyDtoH_v2(back, a, 4096) == 0 and bytes(back) == bytes(pattern) and
   cuda.cuMemcpyDtoH_v2(back, c, 4096) == 0 and bytes(back) == bytes(pattern),
   "and leaves the neighbours intact")

p = m.alloc(3000)
ok(fake.device_extents(fake.Mem(p + 2999)) == (p, p + 3000), "cuMemAlloc memory of a manager without a pool")
m.free(p)
m.flush()
foreign = ctypes.c_uint64()
ok(cuda.cuMemAlloc_v2(ctypes.byref(foreign), 8192) == 0, "memory from cuMemAlloc, not from cuemm")
del fake.calls[:]
ok(fake.device_extents(fake.Mem(foreign.value + 8)) == (foreign.value, foreign.value + 8192)
   and len(fake.calls) == 1, "its extent comes from Numba's own device_extents", fake.calls)
cuda.cuMemFree_v2(foreign)
pm.free(b)
pm.flush()
del fake.calls[:]
ok(fake.device_extents(fake.Mem(a + 1)) == (a, a + 4096) and not fake.calls, "a live neighbour still answers")
s1, e1 = fake.device_extents(fake.Mem(b))
ok(len(fake.calls) == 1 and (s1, e1) == numba_extents(fake.Mem(b)), "a freed block goes to Numba's own")


class FakePtr(object):
    def __init__(self, v):
        self.v = v

    def __int__(self):
        return self.v


fake.USE_NV_BINDING = True
fake.binding = types.SimpleNamespace(CUdeviceptr=FakePtr)
s2, e2 = fake.device_extents(fake.Mem(c + 4))
ok(isinstance(s2, FakePtr) and (int(s2), int(e2)) == (c, c + 4096),
   "with the NVIDIA binding, CUdeviceptr objects as Numba returns them")
fake.USE_NV_BINDING = False

# The plugin installs it when Numba sets it up (initialize).
fake2 = types.ModuleType("fake_numba_driver2")
fake2.device_extents = numba_extents
saved = cn._nbdrv
cn._nbdrv = fake2
try:
    plugin = cls(context=types.SimpleNamespace(handle=ctx2.value))
    plugin.initialize()
    ok(getattr(fake2.device_extents, "_cuemm", False) and plugin.cuemm is pm,
       "initialize installs the extents on Numba's driver module")
finally:
    cn._nbdrv = saved
pm.free(a)
pm.free(c)
pm.flush()
cuda.cuCtxSetCurrent(None)
ok(cn.load_library().cuemm_destroy(pm.handle) == 0, "the pool manager is destroyed")
del cn.Manager._by_handle[pm.handle]
ok(cuda.cuCtxDestroy_v2(ctx2) == 0, "and its context")

# ---- tags: the plugin's device allocations follow the current tag ----------

import cuemm._tags as tags  # noqa: E402

nb = cls(context=types.SimpleNamespace(handle=ctx.value, device=types.SimpleNamespace(id=0)))
nb._cuemm = m  # what initialize() sets, which needs Numba's driver module
ok(nb._allocating_manager() is m, "with the default tag current, allocations go to the context's manager")
with cn.region("nb-weights"):
    ok(cn.current_tag() == "nb-weights", "cuemm.numba.region sets the tag")
    tm = nb._allocating_manager()
    q = tm.alloc(1 << 20)
ok(tm is not m and tm.handle == tags.tag_manager("nb-weights", 0),
   "inside region('nb-weights'): the tag's own manager on the context's device")
ok(nb._allocating_manager() is m, "after the region, the context's manager again")
cuda.cuCtxSetCurrent(ctx)
data = bytes(range(256)) * 4096
ok(cuda.cuMemcpyHtoD_v2(q, data, len(data)) == 0, "1 MiB written into the tag's block")
nb.suspend("nb-weights", keep=True)
ps = tags.pool_stats("nb-weights")
ok(ps["suspended"] == 1 and ps["mapped_bytes"] == 0 and ps["kept_bytes"] >= len(data),
   "the plugin's suspend(tag, keep=True): nothing mapped, the contents kept", ps)
e = raises(lambda: tm.alloc(4096), cn.CuemmError)
ok(isinstance(e, cn.CuemmError) and e.result == 401 and "suspended" in e.msg,
   "an allocation in the suspended tag: CUDA_ERROR_ILLEGAL_STATE saying so", e)
p = m.alloc(4096)
ok(p != 0, "the context's own manager still allocates")
m.free(p)
nb.resume("nb-weights")
back = ctypes.create_string_buffer(len(data))
ok(cuda.cuCtxSynchronize() == 0 and cuda.cuMemcpyDtoH_v2(back, q, len(data)) == 0 and back.raw == data,
   "the plugin's resume(tag): the contents back at the same address")
e = raises(lambda: nb.resume("nb-weights"), cn.CuemmError)
ok(isinstance(e, cn.CuemmError) and e.result == 401 and "not suspended" in e.msg,
   "a second resume: the plugin's CuemmError, CUDA_ERROR_ILLEGAL_STATE", e)
tm.free(q)
tm.flush()
m.flush()
ok(tm.stats()["live_count"] == 0, "the tag's block freed through its manager")
cuda.cuCtxSetCurrent(None)

gc.collect()
done()
