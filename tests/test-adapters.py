"""test-adapters.py: the framework adapters (python/cuemm/torch.py,
python/cuemm/cupy.py, on cuemm._lib) without the frameworks: they import
and refuse clearly when PyTorch or CuPy is absent; with stand-ins for
`torch` and `cupy` put in sys.modules, use() wires the framework the way
the real one is wired (PyTorch: the pluggable allocator made from the
loaded libcuemm's path and entry points, every hook set with the address of
its function, a refusal when CUDA is initialized already; CuPy: the
allocator returns a MemoryPointer over cuemm memory of the current stream,
which is freed on that stream when CuPy drops it), and the entry points
work when called through PyTorch's function types, on the suite's driver
(simcuda unless CUEMM_TEST_DRIVER=system).  Prints TAP."""

import ctypes
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import types

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from taputil import device_copies, done, library_for_tests, ok, package_paths, raises  # noqa: E402

build, src, installed = package_paths()


# ---- without the frameworks ---------------------------------------------------

# None in sys.modules makes `import torch` raise ImportError even where torch
# is installed.
real = {name: sys.modules.get(name) for name in ("torch", "cupy")}
sys.modules["torch"] = None
sys.modules["cupy"] = None
import cuemm._lib as cuemm_lib  # noqa: E402
import cuemm.torch as cuemm_torch  # noqa: E402
import cuemm.cupy as cuemm_cupy  # noqa: E402

ok(True, "cuemm.torch and cuemm.cupy import without their frameworks")
import warnings  # noqa: E402
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import cuemm_lib as old_lib  # noqa: E402
    import cuemm_torch as old_torch  # noqa: E402
    import cuemm_cupy as old_cupy  # noqa: E402
ok(old_lib is cuemm_lib and old_torch is cuemm_torch and old_cupy is cuemm_cupy,
   "the old names cuemm_lib, cuemm_torch, cuemm_cupy are the package's modules")
ok(sorted(str(w.message).split()[0] for w in caught if issubclass(w.category, DeprecationWarning))
   == ["cuemm_cupy", "cuemm_lib", "cuemm_torch"], "each warns once that it is deprecated",
   [str(w.message) for w in caught])
e = raises(cuemm_torch.use, ImportError)
ok(isinstance(e, ImportError) and "PyTorch is not importable" in str(e),
   "cuemm_torch.use() without torch: ImportError saying so", e)
e = raises(cuemm_cupy.use, ImportError)
ok(isinstance(e, ImportError) and "CuPy is not importable" in str(e),
   "cuemm_cupy.use() without cupy: ImportError saying so", e)
ok(not cuemm_torch.is_used() and not cuemm_cupy.is_used(), "nothing is switched")
for name, mod in real.items():
    if mod is None:
        del sys.modules[name]
    else:
        sys.modules[name] = mod

# ---- finding the library ---------------------------------------------------------

env = dict(os.environ, CUEMM_LIBRARY="/nonexistent/libcuemm.so.0")
if not installed:
    env["PYTHONPATH"] = os.path.join(src, "python")
r = subprocess.run([sys.executable, "-c", "import cuemm; cuemm.load()"], env=env,
                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
ok(r.returncode != 0 and "/nonexistent/libcuemm.so.0 (CUEMM_LIBRARY)" in r.stdout
   and "cannot load libcuemm" in r.stdout, "a CUEMM_LIBRARY that does not load: OSError naming it", r.stdout)

lib_path = library_for_tests(build, installed)
lib = cuemm_lib.load()
ok(lib_path is None or cuemm_lib.loaded_path() == lib_path, "CUEMM_LIBRARY is the library loaded (%s)"
   % cuemm_lib.loaded_path())
lib_path = cuemm_lib.loaded_path()
if installed:
    pkg = os.path.dirname(os.path.abspath(cuemm_lib.__file__))
    ok(not pkg.startswith(os.path.abspath(os.path.join(src, "python"))), "the package imported is the installed one (%s)" % pkg)
    ok(lib_path == os.path.join(pkg, "libcuemm.so.0"), "libcuemm is the one inside the package (%s)" % lib_path)

# ---- PyTorch, a stand-in -------------------------------------------------------------


class FakeRaw(object):
    """torch._C._CUDAPluggableAllocator: records what its setters get."""

    def __init__(self, with_graphs=True):
        self.set = {}
        names = ["set_init_fn", "set_reset_fn", "set_memory_fraction_fn", "set_base_alloc_fn",
                 "set_record_stream_fn"]
        if with_graphs:
            names += ["set_begin_allocate_to_pool", "set_end_allocate_to_pool_fn", "set_release_pool"]
        for n in names:
            setattr(self, n, (lambda n: lambda addr: self.set.__setitem__(n, addr))(n))


def fake_torch(initialized=False, refuse=None, with_graphs=True):
    torch = types.ModuleType("torch")
    torch.__version__ = "2.9.0+fake"
    cuda = types.ModuleType("torch.cuda")
    memory = types.ModuleType("torch.cuda.memory")
    calls = {"change": [], "made": []}

    class CUDAPluggableAllocator(object):
        def __init__(self, path, alloc_name, free_name):
            # What PyTorch does: dlopen the path and look the names up.
            so = ctypes.CDLL(path)
            self.alloc = ctypes.cast(getattr(so, alloc_name), ctypes.c_void_p).value
            self.free = ctypes.cast(getattr(so, free_name), ctypes.c_void_p).value
            self.path, self.names = path, (alloc_name, free_name)
            self._raw = FakeRaw(with_graphs)
            calls["made"].append(self)

        def allocator(self):
            return self._raw

    def change_current_allocator(a):
        if refuse:
            raise RuntimeError(refuse)
        calls["change"].append(a)

    memory.CUDAPluggableAllocator = CUDAPluggableAllocator
    memory.change_current_allocator = change_current_allocator
    cuda.memory = memory
    cuda.is_initialized = lambda: initialized
    cuda.current_device = lambda: 0
    torch.cuda = cuda
    return torch, calls


def with_module(name, mod, fn):
    old = sys.modules.get(name)
    sys.modules[name] = mod
    try:
        return fn()
    finally:
        if old is None:
            del sys.modules[name]
        else:
            sys.modules[name] = old


torch, calls = fake_torch(initialized=True)
e = with_module("torch", torch, lambda: raises(cuemm_torch.use, RuntimeError))
ok(isinstance(e, RuntimeError) and "before PyTorch initializes CUDA" in str(e) and "is_initialized" in str(e),
   "use() after torch initialized CUDA: refused, saying when to call it", e)
ok(not calls["change"] and not calls["made"], "and nothing was swapped")

torch, calls = fake_torch(refuse="Can't swap an already initialized allocator")
e = with_module("torch", torch, lambda: raises(cuemm_torch.use, RuntimeError))
ok(isinstance(e, RuntimeError) and "Can't swap an already initialized allocator" in str(e)
   and "before PyTorch initializes CUDA" in str(e), "change_current_allocator's refusal is explained", e)
ok(not cuemm_torch.is_used(), "and cuemm_torch is not marked used")

notorch = types.ModuleType("torch")
notorch.__version__ = "1.13"
notorch.cuda = types.ModuleType("torch.cuda")
e = with_module("torch", notorch, lambda: raises(cuemm_torch.use, RuntimeError))
ok(isinstance(e, RuntimeError) and "no torch.cuda.memory.CUDAPluggableAllocator" in str(e),
   "a torch without the pluggable allocator: refused, saying so", e)

torch, calls = fake_torch()
a = with_module("torch", torch, cuemm_torch.use)
ok(len(calls["change"]) == 1 and calls["change"][0] is a, "use(): change_current_allocator got the allocator")
ok(a.path == lib_path, "made from the path of the loaded libcuemm (%s)" % a.path)
ok(a.names == ("cuemm_torch_alloc", "cuemm_torch_free"), "with the entry points cuemm_torch_alloc, cuemm_torch_free")
want = {setter: cuemm_lib.symbol_address(sym) for setter, sym in cuemm_torch.HOOKS}
ok(a.allocator().set == want, "every hook set with its function's address", a.allocator().set)
ok("set_memory_fraction_fn" not in a.allocator().set and "set_base_alloc_fn" not in a.allocator().set,
   "memory fraction and base allocation are left to PyTorch")
ok(with_module("torch", torch, cuemm_torch.use) is a and len(calls["change"]) == 1,
   "use() again: the same allocator, no second swap")
ok(cuemm_torch.is_used(), "is_used()")

# The entry points through PyTorch's function types.
alloc = cuemm_torch.ALLOC_TYPE(a.alloc)
free = cuemm_torch.FREE_TYPE(a.free)
record = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(want["set_record_stream_fn"])
reset = ctypes.CFUNCTYPE(None)(want["set_reset_fn"])
init = ctypes.CFUNCTYPE(None, ctypes.c_int)(want["set_init_fn"])
init(1)
ok(cuemm_lib.adapter_stats()["alloc_failures"] == 0, "init: no failure")
s0 = cuemm_lib.stats(0)
p = alloc(1 << 20, 0, None)
s1 = cuemm_lib.stats(0)
ok(p and s1["live_bytes"] == s0["live_bytes"] + (1 << 20), "alloc(1 MiB, device 0, default stream): live", s1)
ok(cuemm_torch.memory_reserved(0) == cuemm_lib.held(0) == s1["held_bytes"] >= 1 << 20,
   "memory_reserved() and held(): cuemm_get_held, as stats() says", cuemm_lib.held(0))
ok(cuemm_lib.pool_stats(0)["enabled"] == 1, "the device's manager has the pool")
ok(alloc(0, 0, None) is None, "alloc(0): NULL")
record(p, None)
ok(cuemm_lib.adapter_stats()["record_stream_failures"] == 0, "record_stream: accepted")
free(p, 1 << 20, 0, None)
s2 = cuemm_lib.stats(0)
ok(s2["live_bytes"] == s0["live_bytes"] and s2["stream_cached_bytes"] >= 1 << 20, "free: cached for its stream", s2)
ok(alloc(1 << 50, 0, None) is None, "alloc(1 PiB): NULL")
st = cuemm_lib.adapter_stats()
ok(st["alloc_failures"] == 1 and "1125899906842624" in st["last_failure"], "counted, with the message", st)
ok(alloc(64, 9, None) is None and "device 9" in cuemm_lib.adapter_stats()["last_failure"],
   "alloc on device 9: NULL, and the message names the device")
reset()
ok(cuemm_lib.pool_stats(0)["mapped_bytes"] == 0 and cuemm_lib.stats(0)["stream_cached_bytes"] == 0,
   "reset (torch.cuda.empty_cache): the pool is trimmed")
ok(cuemm_torch.stats(0)["held_bytes"] == 0 and cuemm_torch.memory_reserved(0) == 0,
   "stats() and memory_reserved() read the device's manager")
ok(cuemm_torch.max_memory_reserved(0) >= 1 << 20 and cuemm_torch.max_memory_allocated(0) >= 1 << 20,
   "the peaks remember the 1 MiB")

torch2, calls2 = fake_torch(with_graphs=False)
cuemm_torch._allocator = None
a2 = with_module("torch", torch2, cuemm_torch.use)
ok(set(a2.allocator().set) == {"set_record_stream_fn", "set_reset_fn", "set_init_fn"},
   "a torch without the graph hooks: the others are set", a2.allocator().set)
cuemm_torch._allocator = None
torch3, calls3 = fake_torch()
a3 = with_module("torch", torch3, lambda: cuemm_torch.use(graphs=False))
ok(not any(k in a3.allocator().set for k in cuemm_torch.GRAPH_HOOKS), "use(graphs=False) leaves them unset")

# torch.compile: use() switches CUDA graph trees off, saying so once.
cfg = types.ModuleType("torch._inductor.config")
cfg.triton = types.SimpleNamespace(cudagraph_trees=True)


def use_with_inductor(torch_mod):
    sys.modules["torch._inductor.config"] = cfg
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with_module("torch", torch_mod, cuemm_torch.use)
            with_module("torch", torch_mod, cuemm_torch.use)
    finally:
        del sys.modules["torch._inductor.config"]
    return [w for w in caught if issubclass(w.category, cuemm_torch.CuemmWarning)]


cuemm_torch._allocator = None
said = use_with_inductor(fake_torch()[0])
ok(cfg.triton.cudagraph_trees is False, "use(): torch._inductor.config.triton.cudagraph_trees is off")
ok(len(said) == 1 and "cudagraph_trees = False" in str(said[0].message)
   and "getCheckpointState" in str(said[0].message) and "reduce-overhead" in str(said[0].message),
   "one CuemmWarning, naming the setting, the mode and what PyTorch lacks", [str(w.message) for w in said])
cuemm_torch._allocator = None
ok(use_with_inductor(fake_torch()[0]) == [] and cfg.triton.cudagraph_trees is False,
   "trees off already: nothing to say")

# Inductor not loaded yet: use() loads nothing of it, and the trees go off
# when torch.compile first imports its config (a stand-in torch package on
# disk, in a child process).
fake_root = tempfile.mkdtemp(prefix="cuemm-faketorch-")
os.makedirs(os.path.join(fake_root, "torch", "_inductor"))
for rel, text in (("torch/__init__.py", ""), ("torch/_inductor/__init__.py", ""),
                  ("torch/_inductor/config.py", "class triton:\n    cudagraph_trees = True\n")):
    with open(os.path.join(fake_root, rel), "w") as f:
        f.write(text)
probe = """
import sys, warnings
sys.path.insert(0, %r)
import cuemm.torch as ct
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    ct._graph_trees_off()
    ct._graph_trees_off()
    print("loaded before:", "torch._inductor" in sys.modules)
    import torch._inductor.config as c
    print("trees:", c.triton.cudagraph_trees)
    print("hook left:", any(isinstance(f, ct._InductorConfigHook) for f in sys.meta_path))
print("warnings:", len([w for w in caught if issubclass(w.category, ct.CuemmWarning)]))
""" % fake_root
env = dict(os.environ)
if not installed:
    env["PYTHONPATH"] = os.path.join(src, "python")
r = subprocess.run([sys.executable, "-c", probe], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                   universal_newlines=True)
ok(r.returncode == 0 and "loaded before: False" in r.stdout, "inductor not loaded: use() does not load it", r.stdout)
ok("trees: False" in r.stdout and "hook left: False" in r.stdout and "warnings: 1" in r.stdout,
   "its first import turns the trees off, says so once, and the hook is gone", r.stdout)
shutil.rmtree(fake_root, ignore_errors=True)

# ---- CuPy, a stand-in ------------------------------------------------------------------

cuda = ctypes.CDLL(os.environ.get("CUEMM_LIBCUDA", "libcuda.so.1"))
dev = ctypes.c_int()
ctx = ctypes.c_void_p()
ok(cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0 and
   cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0 and cuda.cuCtxSetCurrent(ctx) == 0,
   "the primary context current, as CuPy has it")
stream = ctypes.c_void_p()
ok(cuda.cuStreamCreate(ctypes.byref(stream), 1) == 0 and stream.value, "a created stream")


def fake_cupy():
    cupy = types.ModuleType("cupy")
    c = types.ModuleType("cupy.cuda")
    c.memory = types.ModuleType("cupy.cuda.memory")

    class OutOfMemoryError(MemoryError):
        def __init__(self, size, total, limit=0):
            super().__init__("Out of memory allocating %d bytes" % size)

    class Stream(object):
        def __init__(self, ptr):
            self.ptr = ptr

    class UnownedMemory(object):
        def __init__(self, ptr, size, owner, device_id=-1):
            if device_id < 0:
                raise RuntimeError("needs a device id")
            self.ptr, self.size, self._owner, self.device_id = ptr, size, owner, device_id

    class MemoryPointer(object):
        def __init__(self, mem, offset):
            self.mem, self.ptr = mem, mem.ptr + offset

    class PinnedMemoryPointer(object):
        def __init__(self, mem, offset):
            self.mem, self.ptr = mem, mem.ptr + offset

    state = {"stream": Stream(0), "allocator": None, "pinned": None}
    c.memory.OutOfMemoryError = OutOfMemoryError
    c.Stream = Stream
    c.UnownedMemory = UnownedMemory
    c.MemoryPointer = MemoryPointer
    c.PinnedMemoryPointer = PinnedMemoryPointer
    c.runtime = types.SimpleNamespace(getDevice=lambda: 0)
    c.get_current_stream = lambda: state["stream"]
    c.set_allocator = lambda f: state.__setitem__("allocator", f)
    c.set_pinned_memory_allocator = lambda f: state.__setitem__("pinned", f)
    cupy.cuda = c
    return cupy, state


cupy, state = fake_cupy()
with_module("cupy", cupy, cuemm_cupy.use)
ok(state["allocator"] is cuemm_cupy.malloc and state["pinned"] is cuemm_cupy.malloc_pinned,
   "use(): CuPy's allocator and pinned-memory allocator are cuemm's")
malloc = state["allocator"]
s0 = cuemm_lib.stats(0)
mp = malloc(4096)
s1 = cuemm_lib.stats(0)
ok(type(mp).__name__ == "MemoryPointer" and mp.ptr and mp.mem.size == 4096 and mp.mem.device_id == 0,
   "malloc(4096): a MemoryPointer over 4096 bytes of device 0")
ok(s1["live_bytes"] == s0["live_bytes"] + 4096, "cuemm holds it live")
ptr = mp.ptr
del mp
gc.collect()
s2 = cuemm_lib.stats(0)
ok(s2["live_bytes"] == s0["live_bytes"] and s2["stream_cached_count"] >= 1, "dropping it frees it in stream order")

state["stream"] = cupy.cuda.Stream(stream.value)
mp = malloc(4096)
ok(mp.ptr != 0 and mp.mem._owner.stream.ptr == stream.value, "on CuPy's current stream, a created one")
first = mp.ptr
del mp
gc.collect()
mp = malloc(4096)
ok(mp.ptr == first, "freed on that stream: the stream gets it again at once")
del mp
gc.collect()

# Streams the program lets go of are released in cuemm before CuPy may
# destroy them (cuemm_adapter_stream_release: every tag's manager), and only then.
lib = cuemm_lib.load()
import cuemm._tags  # noqa: E402
lib = cuemm._tags.lib()  # the tag calls typed before one is replaced below
real_release = lib.cuemm_adapter_stream_release
released = []


def counting_release(device, handle):
    released.append(handle)
    return real_release(device, handle)


lib.cuemm_adapter_stream_release = counting_release
kept = [k for k in cuemm_cupy._streams if k[1] == stream.value]
ok(len(kept) == 1, "the created stream is kept while cuemm may hold its blocks", cuemm_cupy._streams)
ok(cuemm_cupy.sweep_streams() == 0 and released == [], "a sweep leaves a stream the program still holds")
mp = malloc(4096)  # a live block on it
state["stream"] = cupy.cuda.Stream(0)
ok(cuemm_cupy.sweep_streams() == 0 and released == [], "and one a live block of its still holds")
del mp
gc.collect()
ok(cuemm_cupy.sweep_streams() == 1 and released == [stream.value],
   "once the program and its blocks let go of it: released in cuemm and let go", released)
ok(not [k for k in cuemm_cupy._streams if k[1] == stream.value], "no longer kept")
malloc(64)
ok(not [k for k in cuemm_cupy._streams if k[1] in (0, 1, 2)], "the default streams are never kept")
state["stream"] = cupy.cuda.Stream(stream.value)
malloc(64)
state["stream"] = cupy.cuda.Stream(0)
old_every = cuemm_cupy.SWEEP_EVERY
cuemm_cupy.SWEEP_EVERY = 2
for _ in range(2):
    malloc(64)
cuemm_cupy.SWEEP_EVERY = old_every
ok(released == [stream.value, stream.value], "every SWEEP_EVERY allocations a sweep runs by itself", released)
lib.cuemm_adapter_stream_release = real_release

z = malloc(0)
ok(z.ptr == 0 and z.mem.size == 0 and z.mem.device_id == 0, "malloc(0): a null pointer with its device")
e = raises(lambda: malloc(1 << 50), MemoryError)
ok(isinstance(e, cupy.cuda.memory.OutOfMemoryError) and "cuemm: out of memory allocating 1125899906842624" in str(e),
   "malloc(1 PiB): CuPy's OutOfMemoryError with cuemm's message", e)

h0 = cuemm_lib.stats(0)
pm = state["pinned"](1000)
h1 = cuemm_lib.stats(0)
ok(pm.ptr and h1["host_live_bytes"] == h0["host_live_bytes"] + 1000, "pinned malloc(1000): cuemm pinned memory")
ctypes.memset(pm.ptr, 0x5A, 1000)
ok(ctypes.string_at(pm.ptr + 999, 1) == b"\x5a", "the host can write it")
del pm
gc.collect()
h2 = cuemm_lib.stats(0)
ok(h2["host_live_bytes"] == h0["host_live_bytes"], "dropping it frees it (deferred)")
ok(state["pinned"](0).ptr == 0, "pinned malloc(0): a null pointer")
ok(cuemm_cupy.stats()["live_bytes"] == h2["live_bytes"], "cuemm_cupy.stats() reads the current device's manager")

# ---- tags: region, suspend, resume ------------------------------------------------------

import cuemm._tags as tags  # noqa: E402
import cuemm.numba as cuemm_numba  # noqa: E402

put, get = device_copies(cuda)


MIB = 1 << 20
saved_torch = sys.modules.get("torch")
sys.modules["torch"] = torch  # the stand-in: device None is its current device
pattern = bytes(range(256)) * (3 * MIB // 256)
ok(cuemm_torch.current_tag() is None and tags.current_tag() is None, "the default tag is current at first")
with cuemm_torch.region("weights") as t:
    ok(t == "weights" and cuemm_torch.current_tag() == "weights", "region('weights'): the tag is current")
    w = alloc(3 * MIB, 0, None)
    with cuemm_torch.region("kv"):
        k = alloc(2 * MIB, 0, None)
        ok(cuemm_cupy.current_tag() == "kv", "regions nest (cuemm.cupy sees the same tag)")
        kv_array = malloc(MIB)  # CuPy's allocator, in the same tag
    ok(cuemm_torch.current_tag() == "weights", "the inner region's exit restores the outer tag")
ok(cuemm_torch.current_tag() is None, "and the outer one the default")
d = alloc(MIB, 0, None)
ok(w and k and d and put(w, pattern) and put(k, b"\x77" * (2 * MIB)) and put(d, b"\x55" * MIB),
   "blocks in tags weights and kv and the default, written")
ok(cuemm_torch.tag_stats("weights")["live_bytes"] == 3 * MIB, "tag_stats('weights'): its 3 MiB live")
ok(cuemm_torch.tag_stats("kv")["live_bytes"] == 3 * MIB, "tag_stats('kv'): 2 MiB from torch, 1 MiB from CuPy")
ok(tags.tag_manager("weights") != cuemm_lib.device_manager(0), "a tag has a manager of its own")
e = raises(lambda: cuemm_torch.region("no spaces").__enter__(), cuemm_lib.CuemmError)
ok(isinstance(e, cuemm_lib.CuemmError) and "character 0x20" in str(e), "a bad tag name: CuemmError saying why", e)
ok(cuemm_torch.current_tag() is None, "and the tag stays")

cuemm_torch.suspend("kv")
cuemm_torch.suspend("weights", keep=True)
ps = cuemm_torch.tag_pool_stats("weights")
ok(ps["suspended"] == 1 and ps["mapped_bytes"] == 0 and ps["kept_bytes"] >= 3 * MIB,
   "suspend('weights', keep=True): nothing mapped, its contents kept", ps)
ps = cuemm_torch.tag_pool_stats("kv")
ok(ps["suspended"] == 1 and ps["mapped_bytes"] == 0 and ps["kept_bytes"] == 0, "suspend('kv'): nothing mapped", ps)
e = raises(lambda: cuemm_torch.suspend("kv"), cuemm_lib.CuemmError)
ok(isinstance(e, cuemm_lib.CuemmError) and "kv" in str(e), "a second suspend: CuemmError naming the tag", e)
with cuemm_torch.region("kv"):
    ok(alloc(4096, 0, None) is None, "an allocation in suspended kv: NULL")
ok("suspended" in cuemm_lib.adapter_stats()["last_failure"], "and the failure says the manager is suspended")
ok(get(d, 4) == b"\x55" * 4, "the default tag's memory is untouched")
cuemm_torch.resume("weights")
cuemm_torch.resume("kv")
ok(get(w, 3 * MIB) == pattern, "resume('weights'): 3 MiB back byte for byte at the same address")
ok(put(k, b"\x78" * 16) and get(k, 16) == b"\x78" * 16, "kv's block is usable again")
e = raises(lambda: cuemm_torch.resume("weights"), cuemm_lib.CuemmError)
ok(isinstance(e, cuemm_lib.CuemmError), "a resume of a resumed tag: CuemmError", e)
del kv_array
gc.collect()
for ptr, size in ((w, 3 * MIB), (k, 2 * MIB), (d, MIB)):
    free(ptr, size, 0, None)
ok(cuemm_torch.tag_stats("weights")["live_bytes"] == 0 and cuemm_torch.tag_stats("kv")["live_bytes"] == 0,
   "freed from their tags under the default tag")
ok(cuemm_lib.adapter_stats()["free_failures"] == 0, "no free failed")

# CuPy's functions, on the stand-in (device None: CuPy's current device).
saved_cupy = sys.modules.get("cupy")
sys.modules["cupy"] = cupy
with cuemm_cupy.region("cp"):
    arr = malloc(MIB)
ok(cuemm_cupy.tag_stats("cp")["live_bytes"] == MIB and put(arr.ptr, pattern[:MIB]),
   "cuemm.cupy.region('cp'): CuPy's array is the tag's")
cuemm_cupy.suspend("cp", keep=True)
ok(cuemm_cupy.tag_pool_stats("cp")["suspended"] == 1 and cuemm_cupy.tag_pool_stats("cp")["mapped_bytes"] == 0,
   "cuemm.cupy.suspend('cp', keep=True): nothing mapped")
cuemm_cupy.resume("cp")
ok(get(arr.ptr, MIB) == pattern[:MIB], "cuemm.cupy.resume('cp'): the array's contents back")
del arr
gc.collect()
ok(cuemm_cupy.tag_stats("cp")["live_bytes"] == 0, "dropping the array frees it in its tag")
if saved_cupy is None:
    del sys.modules["cupy"]
else:
    sys.modules["cupy"] = saved_cupy

# Numba's module-level functions (no Numba needed for these).
with cuemm_numba.region("nb"):
    ok(cuemm_numba.current_tag() == "nb", "cuemm.numba.region sets the same tag")
    n = alloc(MIB, 0, None)
ok(put(n, pattern[:MIB]), "a block in tag nb")
cuemm_numba.suspend("nb", keep=True, device=0)
ok(tags.pool_stats("nb")["suspended"] == 1, "cuemm.numba.suspend('nb', keep=True)")
cuemm_numba.resume("nb", device=0)
ok(get(n, MIB) == pattern[:MIB], "cuemm.numba.resume: contents back")
free(n, MIB, 0, None)
if saved_torch is None:
    del sys.modules["torch"]
else:
    sys.modules["torch"] = saved_torch

cuemm_lib.empty_cache()
ok(cuemm_lib.adapter_stats()["empty_cache_failures"] == 0, "empty_cache: no failure")
ok(cuda.cuStreamSynchronize(stream) == 0, "the stream's work is done")
done()
