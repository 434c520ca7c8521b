"""test-modes.py: PyTorch's MemPool mode (cuemm.torch.mempool, pool), the
rule that chooses between it and per-tensor mode (recommended_mode),
Triton's allocator (cuemm.triton) and cuda.core's memory resource
(cuemm.cuda_core), without the frameworks: stand-ins for `torch` and
`triton` put in sys.modules are wired the way the real ones are (a
MemPool's allocator made from the loaded libcuemm's segment functions, one
per tag; triton.set_allocator in a ContextVar), and the functions they are
given are called as PyTorch and Triton call them, on the suite's driver
(simcuda unless CUEMM_TEST_DRIVER=system).  cuda.core's memory resource is
exercised where cuda.core imports (it runs on simcuda), skipped otherwise.
Prints TAP."""

import contextlib
import contextvars
import ctypes
import gc
import os
import sys
import types

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from taputil import device_copies, done, library_for_tests, ok, package_paths, raises, skip  # noqa: E402

build, src, installed = package_paths()

import cuemm  # noqa: E402
import cuemm._lib as cuemm_lib  # noqa: E402
import cuemm.torch as ct  # noqa: E402

# ---- the rule -------------------------------------------------------------------

rule = [
    # (keyword arguments, mode)
    ({}, "mempool"),
    ({"uses_compile": True}, "mempool"),
    ({"reduce_overhead": True}, "mempool"),
    ({"needs_torch_memory_stats": True}, "mempool"),
    ({"suspend_everything": True}, "tensor"),
    ({"suspend_everything": True, "reduce_overhead": True}, "tensor"),
    ({"shares_with_other_frameworks": True}, "tensor"),
    ({"shares_with_other_frameworks": True, "uses_compile": True}, "tensor"),
]
bad = [k for k, want in rule if ct.recommended_mode(**k) != want]
ok(not bad, "recommended_mode: each case of its table (%d)" % len(rule), bad)
c = ct.recommended_mode(suspend_everything=True, reduce_overhead=True, why=True)
ok(isinstance(c, ct.ModeChoice) and c.mode == "tensor" and "plain CUDA graphs" in c.reason,
   "why=True: the mode and the reason (per-tensor with reduce-overhead: plain CUDA graphs)", c)
c = ct.recommended_mode(reduce_overhead=True, why=True)
ok(c.mode == "mempool" and "CUDA graph trees" in c.reason, "MemPool mode keeps the CUDA graph trees", c)
for k in ({"needs_torch_memory_stats": True, "suspend_everything": True},
          {"needs_torch_memory_stats": True, "shares_with_other_frameworks": True}):
    e = raises(lambda: ct.recommended_mode(**k), ValueError)
    ok(isinstance(e, ValueError) and "no mode gives both" in str(e), "conflicting needs: ValueError (%s)"
       % ", ".join(sorted(k)), e)

# ---- the library -------------------------------------------------------------------

lib_path = library_for_tests(build, installed)
cuemm_lib.load()
lib_path = cuemm_lib.loaded_path()
import cuemm._tags as tags  # noqa: E402

cuda = ctypes.CDLL(os.environ.get("CUEMM_LIBCUDA", "libcuda.so.1"))
put, get = device_copies(cuda)
dev = ctypes.c_int()
ctx = ctypes.c_void_p()
ok(cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0 and
   cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0 and cuda.cuCtxSetCurrent(ctx) == 0,
   "the primary context current, as PyTorch has it")
stream = ctypes.c_void_p()
ok(cuda.cuStreamCreate(ctypes.byref(stream), 1) == 0 and stream.value, "a created stream")
MIB = 1 << 20


def holds(tag, ptr):
    """Whether tag's manager on device 0 holds a live block at ptr."""
    base = ctypes.c_uint64()
    lib = cuemm_lib.load()
    fn = lib.cuemm_mem_get_address_range
    fn.restype = ctypes.c_int
    fn.argtypes = (ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64), ctypes.c_void_p, ctypes.c_uint64)
    return fn(tags.tag_manager(tag, 0), ctypes.byref(base), None, ptr) == 0 and base.value == ptr


# ---- MemPool mode with a stand-in torch ----------------------------------------------


def fake_torch():
    """torch with what mempool() and pool() use: MemPool(allocator=...),
    use_mem_pool, CUDAPluggableAllocator (dlopen and dlsym, as PyTorch's),
    torch._C._cuda_customAllocator and torch.cuda.memory._CUDAAllocator."""
    torch = types.ModuleType("torch")
    torch.__version__ = "2.11.0+fake"
    cuda_ = types.ModuleType("torch.cuda")
    memory = types.ModuleType("torch.cuda.memory")
    calls = {"pools": [], "use": [], "device": [], "empty_cache": 0}

    class Raw(object):
        """torch._C._cuda_CUDAAllocator: the two function addresses."""

        def __init__(self, alloc, free):
            self.alloc, self.free = alloc, free

    class _CUDAAllocator(object):
        def __init__(self, raw):
            self._allocator = raw

        def allocator(self):
            return self._allocator

    class CUDAPluggableAllocator(_CUDAAllocator):
        def __init__(self, path, alloc_name, free_name):
            so = ctypes.CDLL(path)
            super().__init__(Raw(ctypes.cast(getattr(so, alloc_name), ctypes.c_void_p).value,
                                 ctypes.cast(getattr(so, free_name), ctypes.c_void_p).value))
            self.path, self.names = path, (alloc_name, free_name)

    class MemPool(object):
        def __init__(self, allocator=None, use_on_oom=False, no_split=False):
            self.allocator, self.device = allocator, calls["device"][-1] if calls["device"] else None
            self.id = (0, len(calls["pools"]) + 1)
            calls["pools"].append(self)

    @contextlib.contextmanager
    def use_mem_pool(pool, device=None):
        calls["use"].append((pool, device))
        yield

    @contextlib.contextmanager
    def device(d):
        calls["device"].append(d)
        try:
            yield
        finally:
            calls["device"].pop()

    def empty_cache():
        calls["empty_cache"] += 1

    memory.CUDAPluggableAllocator = CUDAPluggableAllocator
    memory._CUDAAllocator = _CUDAAllocator
    memory.MemPool = MemPool
    memory.use_mem_pool = use_mem_pool
    memory.change_current_allocator = lambda a: None
    cuda_.memory = memory
    cuda_.MemPool = MemPool
    cuda_.use_mem_pool = use_mem_pool
    cuda_.device = device
    cuda_.empty_cache = empty_cache
    cuda_.is_initialized = lambda: True
    cuda_.current_device = lambda: 0
    torch.cuda = cuda_
    torch._C = types.SimpleNamespace(_cuda_customAllocator=lambda a, f: Raw(a, f))
    return torch, calls


torch, calls = fake_torch()
saved = sys.modules.get("torch")
sys.modules["torch"] = torch
p0 = ct.mempool()
pkv = ct.mempool("kv")
ok(p0 is not pkv and len(calls["pools"]) == 2 and p0.device == 0 and pkv.device == 0,
   "mempool() and mempool('kv'): two MemPools, each made under torch.cuda.device(0)")
ok(ct.mempool("kv") is pkv and ct.mempool("kv", device=0) is pkv and len(calls["pools"]) == 2,
   "asked again: the same MemPool")
alloc0 = ct._pool_allocs[(None, 0)]
ok(alloc0.path == lib_path and alloc0.names == (ct.SEGMENT_ALLOC, ct.SEGMENT_FREE),
   "the default tag's allocator: CUDAPluggableAllocator(libcuemm, cuemm_torch_segment_alloc, "
   "cuemm_torch_segment_free)", (alloc0.path, alloc0.names))
raw0, rawkv = p0.allocator, pkv.allocator
ok(rawkv.alloc == ct.segment_alloc_address("kv") and rawkv.alloc != raw0.alloc
   and rawkv.free == raw0.free == cuemm_lib.symbol_address(ct.SEGMENT_FREE),
   "kv's allocator: kv's own allocation function, the one free function")
ok(ct.segment_alloc_address(None) == raw0.alloc, "the default tag's function is cuemm_torch_segment_alloc")

# PyTorch calls the functions when its pools need a segment.
seg_alloc_kv = ct.ALLOC_TYPE(rawkv.alloc)
seg_alloc_0 = ct.ALLOC_TYPE(raw0.alloc)
seg_free = ct.FREE_TYPE(rawkv.free)
with ct.region("other"):  # per-tensor mode's current tag is not what a pool follows
    k = seg_alloc_kv(20 * MIB, 0, stream.value)
    d = seg_alloc_0(2 * MIB, 0, stream.value)
ok(k and holds("kv", k) and not holds("other", k), "a segment of kv's pool is kv's, whatever tag is current")
ok(d and holds(None, d), "a segment of the default pool is the device manager's")
ok(ct.tag_stats("kv")["live_bytes"] == 20 * MIB, "tag_stats('kv') shows the segment")
with ct.pool("kv") as got:
    ok(got is pkv and calls["use"][-1] == (pkv, None), "pool('kv'): torch.cuda.use_mem_pool(mempool('kv'))")
with ct.pool("kv", device=0):
    ok(calls["use"][-1] == (pkv, 0), "pool('kv', device=0) passes the device")
pattern = bytes(range(256)) * (MIB // 256)
ok(put(k, pattern), "the segment is written")
ct.suspend("kv", keep=True)
ps = ct.tag_pool_stats("kv")
ok(ps["suspended"] == 1 and ps["mapped_bytes"] == 0 and ps["kept_bytes"] >= 20 * MIB,
   "suspend('kv', keep=True) with the pool's segment live: nothing mapped, its contents kept", ps)
ok(not seg_alloc_kv(2 * MIB, 0, stream.value), "a new segment while kv is suspended: NULL (PyTorch: out of memory)")
ct.resume("kv")
ok(get(k, MIB) == pattern, "resume('kv'): the segment's contents back at the same address")
seg_free(k, 20 * MIB, 0, stream.value)
seg_free(d, 2 * MIB, 0, stream.value)
ok(cuemm_lib.adapter_stats()["free_failures"] == 0, "the segments are given back")
ct.empty_cache()
ok(calls["empty_cache"] == 1 and ct.pool_stats(0)["mapped_bytes"] == 0,
   "empty_cache() in MemPool mode: torch.cuda.empty_cache(), then cuemm trims")
e = raises(lambda: ct.mempool("kv cache"), cuemm_lib.CuemmError)
ok(isinstance(e, cuemm_lib.CuemmError) and "0x20" in str(e), "a bad tag name: CuemmError", e)
e = raises(lambda: ct.use(), RuntimeError)
ok(isinstance(e, RuntimeError) and "exclude each other" in str(e), "use() after mempool(): refused, saying why", e)
saved_pools = dict(ct._pools)
ct._pools.clear()
ct._allocator = object()
e = raises(lambda: ct.mempool("x"), RuntimeError)
ok(isinstance(e, RuntimeError) and "mempool() after use()" in str(e), "mempool() after use(): refused", e)
ct._allocator = None
ct._pools.update(saved_pools)
old = types.ModuleType("torch")
old.__version__ = "2.3"
old.cuda = types.SimpleNamespace(memory=types.SimpleNamespace(), is_initialized=lambda: False)
sys.modules["torch"] = old
e = raises(lambda: ct.mempool("y"), RuntimeError)
ok(isinstance(e, RuntimeError) and "no torch.cuda.MemPool" in str(e), "a torch without MemPool: refused", e)
if saved is None:
    del sys.modules["torch"]
else:
    sys.modules["torch"] = saved

# ---- Triton with a stand-in -----------------------------------------------------------


def fake_triton():
    """triton with set_allocator over a ContextVar, as Triton 3.3 and later."""
    triton = types.ModuleType("triton")
    triton.__version__ = "3.6.0+fake"
    runtime = types.ModuleType("triton.runtime")
    allocation = types.ModuleType("triton.runtime._allocation")

    class NullAllocator(object):
        def __call__(self, size, alignment, stream):
            raise RuntimeError("Kernel requires a runtime memory allocation, but no allocator was set.")

    allocation.NullAllocator = NullAllocator
    allocation._allocator = contextvars.ContextVar("_allocator", default=NullAllocator())
    triton.set_allocator = allocation._allocator.set
    runtime._allocation = allocation
    runtime.driver = types.SimpleNamespace(active=types.SimpleNamespace(get_current_device=lambda: 0))
    triton.runtime = runtime
    return triton, allocation


triton, allocation = fake_triton()
saved = {n: sys.modules.get(n) for n in ("triton", "triton.runtime", "triton.runtime._allocation")}
sys.modules.update({"triton": triton, "triton.runtime": triton.runtime, "triton.runtime._allocation": allocation})
import cuemm.triton as ctr  # noqa: E402

ok(not ctr.is_used(), "is_used(): False before use()")
a = ctr.use()
ok(a is ctr.allocator and allocation._allocator.get() is a and ctr.is_used(),
   "use(): triton.set_allocator(cuemm's allocator)")
ok(ctr.use() is a and len(ctr._previous) == 1, "use() again does nothing")
live0 = cuemm_lib.stats(0)["live_bytes"]
buf = allocation._allocator.get()(4096, 128, stream.value)
ok(buf.data_ptr() and buf.data_ptr() % 256 == 0 and cuemm_lib.stats(0)["live_bytes"] == live0 + 4096,
   "a 4 KiB request (alignment 128) on the stream: a cuemm block", buf)
ok(put(buf.data_ptr(), b"\x42" * 4096) and get(buf.data_ptr(), 4) == b"\x42" * 4, "its memory works")
del buf
gc.collect()
s = cuemm_lib.stats(0)
ok(s["live_bytes"] == live0 and s["stream_cached_bytes"] >= 4096,
   "dropped by Triton: freed in stream order (cached for its stream)", s)
big = allocation._allocator.get()(1000, 4096, None)
ok(big.data_ptr() % 4096 == 0 and big.stream == 0, "alignment 4096 honoured; stream None is the legacy stream",
   big)
big.free()
big.free()
ok(cuemm_lib.stats(0)["live_bytes"] == live0, "free() gives it back once")
with ct.region("scratch"):
    t = allocation._allocator.get()(8192, 0, stream.value)
ok(holds("scratch", t.data_ptr()), "a request inside region('scratch'): the tag's block")
del t
gc.collect()
tags.suspend("scratch", 0)
with ct.region("scratch"):
    e = raises(lambda: allocation._allocator.get()(8192, 0, stream.value), MemoryError)
tags.resume("scratch", 0)
ok(isinstance(e, MemoryError) and "suspended" in str(e), "a request cuemm refuses: MemoryError with its message", e)
ok(ctr.restore() and isinstance(allocation._allocator.get(), allocation.NullAllocator) and not ctr.is_used(),
   "restore(): Triton's allocator as before use()")
ok(not ctr.restore(), "restore() again: nothing to do")
ctr.use()


def inductors(size, alignment, stream):
    return None


triton.set_allocator(inductors)  # what inductor does when it needs scratch
ok(not ctr.is_used() and not ctr.restore() and allocation._allocator.get() is inductors,
   "another allocator set since use(): is_used() says so, restore() leaves it")
ctr.use()
ok(ctr.is_used() and ctr.restore() and allocation._allocator.get() is inductors,
   "use() installs cuemm's again; restore() then gives back the other")
ctr._previous[:] = []
for n, m in saved.items():
    if m is None:
        sys.modules.pop(n, None)
    else:
        sys.modules[n] = m

# ---- cuda.core --------------------------------------------------------------------------

import cuemm.cuda_core as ccc  # noqa: E402

if not ccc.available():
    for name in ("MemoryResource on cuda.core", "allocate", "deallocate", "close", "tag"):
        skip("cuda.core: " + name, "cuda.core is not importable here")
else:
    from cuda.core import Device  # noqa: E402
    dev0 = Device(0)
    dev0.set_current()
    import cuda.core as core  # noqa: E402
    mr = ccc.MemoryResource(0)
    ok(isinstance(mr, core.MemoryResource) and mr.device_id == 0 and mr.is_device_accessible
       and not mr.is_host_accessible, "MemoryResource(0): a cuda.core MemoryResource of device 0", mr)
    # A cuda.core Stream over the stream created above (simcuda lacks the
    # priority query Device.create_stream makes).
    s = core.Stream.from_handle(stream.value)
    live0 = cuemm_lib.stats(0)["live_bytes"]
    b = mr.allocate(MIB, stream=s)
    ok(b.size == MIB and int(b.handle) and cuemm_lib.stats(0)["live_bytes"] == live0 + MIB,
       "allocate(1 MiB, stream): a Buffer over a cuemm block", b)
    b.close()
    ok(cuemm_lib.stats(0)["live_bytes"] == live0, "Buffer.close(): deallocate, freed in stream order")
    b = mr.allocate(4096)
    ptr = int(b.handle)
    del b
    gc.collect()
    ok(cuemm_lib.stats(0)["live_bytes"] == live0, "a Buffer of the default stream, collected: freed", ptr)
    mk = ccc.MemoryResource(0, tag="ccore")
    b = mk.allocate(MIB, stream=s)
    ok(holds("ccore", int(b.handle)) and mk.tag == "ccore", "MemoryResource(0, tag='ccore'): the tag's block")
    b.close()
ok(cuda.cuStreamSynchronize(stream) == 0, "the stream's work is done")
done()
