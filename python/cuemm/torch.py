"""cuemm.torch: PyTorch's CUDA memory from cuemm, in one of two modes.

    import torch
    import cuemm.torch
    cuemm.torch.use()        # per-tensor mode, before the first CUDA tensor

    with cuemm.torch.pool("kv"):       # MemPool mode, at any time
        cache = torch.empty(...)       # in a segment of tag kv's manager
    cuemm.torch.suspend("kv")          # its memory back to the driver

recommended_mode() says which to choose.  Per-tensor mode (use(), below)
makes every tensor a cuemm block.  MemPool mode (mempool(), pool())
leaves PyTorch's caching allocator in charge of tensors and gives it whole
segments from a tag's cuemm manager, through torch.cuda.MemPool: what
PyTorch reports (torch.cuda.memory_stats(), memory_summary(),
torch.cuda.memory._snapshot()) keeps working, and the tag's memory can be
suspended, resumed and exported like any cuemm memory; see mempool().

In per-tensor mode, every CUDA allocation of PyTorch goes to libcuemm's entry
points for PyTorch's pluggable allocator (torch.cuda.memory.
CUDAPluggableAllocator): one cuemm manager per device, over the device's
primary context, with the stream-ordered pool (CUEMM_POOL=vmm unless
CUEMM_POOL is set; the other CUEMM_* variables apply, CUEMM_LOG included).

What PyTorch's pluggable interface carries, and so what works:
  - allocations and frees in stream order (a block freed on its stream is
    reused at once by that stream, by others once its work is done, or,
    where the pool would otherwise grow, by another stream made to wait
    for that work: CUEMM_STREAM_REUSE, default "internal");
  - Tensor.record_stream (the hook set_record_stream_fn);
  - torch.cuda.empty_cache() (set_reset_fn): cuemm trims its pools;
  - CUDA graphs (set_begin_allocate_to_pool and friends, where the torch
    has them): blocks allocated during a capture are kept for the graph
    until it is released;
  - torch.compile, default mode and mode="reduce-overhead": use() switches
    torch._inductor.config.triton.cudagraph_trees off (with one
    CuemmWarning; where inductor is not loaded yet, when torch.compile
    first loads its config), since CUDA graph trees need allocator calls PyTorch does
    not make pluggable (GRAPH_TREES_OFF says which); reduce-overhead then
    captures plain CUDA graphs, which cuemm's graph hooks serve;
  - several devices: each device's allocations go to its own manager;
  - tags (region(), suspend(), resume()): allocations made inside
    region(tag) go to a manager of the tag's own, whose memory suspend()
    gives back to the driver without losing a tensor's address.
What it does not carry: torch.cuda.memory_stats(), memory_allocated(),
max_memory_reserved() and the rest of the statistics raise under a
pluggable allocator (PyTorch's getDeviceStats is not pluggable); use
stats(), memory_allocated(), max_memory_reserved() of this module instead.
torch.cuda.set_per_process_memory_fraction is not passed on (set
CUEMM_POOL_LIMIT with CUEMM_POOL_LIMIT_HARD=1).  Memory snapshots
(torch.cuda.memory._snapshot) are not available; CUEMM_LOG writes cuemm's
own event log.  PyTorch does not check what the allocator returns: an
out-of-memory shows up as an illegal address in the kernel that uses the
tensor; adapter_stats() says which allocation failed and why.

The library is found as cuemm._lib finds it (CUEMM_LIBRARY first).
"""

import collections
import contextlib
import ctypes
import importlib.abc
import sys
import threading
import warnings

from cuemm import _lib, _tags

__all__ = ["use", "is_used", "CuemmWarning", "stats", "pool_stats", "adapter_stats", "empty_cache",
           "memory_allocated", "max_memory_allocated", "memory_reserved",
           "max_memory_reserved", "region", "suspend", "resume", "current_tag", "tag_stats",
           "tag_pool_stats", "mempool", "pool", "release_mempool", "recommended_mode", "ModeChoice", "ALLOC", "FREE", "HOOKS",
           "SEGMENT_ALLOC", "SEGMENT_FREE"]

ALLOC = "cuemm_torch_alloc"
FREE = "cuemm_torch_free"
# The optional hooks of torch._C._CUDAPluggableAllocator: setter -> symbol.
HOOKS = (
    ("set_record_stream_fn", "cuemm_torch_record_stream"),
    ("set_reset_fn", "cuemm_torch_empty_cache"),
    ("set_init_fn", "cuemm_torch_init"),
    ("set_begin_allocate_to_pool", "cuemm_torch_begin_allocate_to_pool"),
    ("set_end_allocate_to_pool_fn", "cuemm_torch_end_allocate_to_pool"),
    ("set_release_pool", "cuemm_torch_release_pool"),
)
GRAPH_HOOKS = ("set_begin_allocate_to_pool", "set_end_allocate_to_pool_fn", "set_release_pool")

# torch.compile(mode="reduce-overhead") builds CUDA graph trees by default.
# Trees keep their memory pool's bookkeeping with three calls of the
# allocator that PyTorch (2.11) does not let a pluggable allocator answer:
# getCheckpointState after every recording (unconditionally),
# setCheckpointPoolState when a tree changes path, and
# checkPoolLiveAllocations for the slow-path assertions (on by default).
# None has a hook in CUDAPluggableAllocator, and the checkpoint state is a
# C++ object of the caching allocator that restores its blocks and swaps
# the deleters of live storages, so no answer from cuemm can stand in for
# it.  Plain CUDA graphs (cudagraph_trees = False) need only the graph-pool
# hooks, which cuemm has: use() switches the trees off, and says so once
# (when inductor's config is loaded: at once, or at its first import).
GRAPH_TREES_OFF = ("cuemm.torch: torch.compile(mode=\"reduce-overhead\") will capture plain CUDA graphs "
                   "(torch._inductor.config.triton.cudagraph_trees = False): CUDA graph trees need "
                   "getCheckpointState, setCheckpointPoolState and checkPoolLiveAllocations, which PyTorch "
                   "offers no pluggable allocator")


class CuemmWarning(UserWarning):
    """What cuemm.torch changed in PyTorch's settings, and why."""


TOO_LATE = ("cuemm.torch.use() must run before PyTorch initializes CUDA (its first CUDA tensor, "
            "torch.cuda.init(), or anything else that does): %s.  Call it right after `import torch`.")

_allocator = None
_hooks = ()


def _torch():
    try:
        import torch
    except ImportError as e:
        raise ImportError("cuemm.torch: PyTorch is not importable here (%s); install it (`pip install torch`), or use "
                          "cuemm.cupy or cuemm.numba for the other frameworks" % e) from e
    return torch


def use(graphs=True):
    """Switches PyTorch to cuemm; returns the torch allocator object.
    Calling it again does nothing.  graphs=False leaves the graph hooks
    unset (CUDA graph captures then get ordinary blocks, which cuemm may
    hand out again while the graph lives: only for programs without graphs).
    Raises ImportError without PyTorch, OSError when libcuemm cannot be
    loaded, RuntimeError when it is too late (CUDA already initialized in
    torch) or this torch has no pluggable allocator."""
    global _allocator, _hooks
    torch = _torch()
    if _allocator is not None:
        return _allocator
    if _pools:
        raise RuntimeError(BOTH_MODES % "use() after mempool()")
    mem = getattr(getattr(torch, "cuda", None), "memory", None)
    if mem is None or not hasattr(mem, "CUDAPluggableAllocator") or not hasattr(mem, "change_current_allocator"):
        raise RuntimeError("cuemm.torch: this torch (%s) has no torch.cuda.memory.CUDAPluggableAllocator "
                           "(PyTorch 2.0 or newer, built with CUDA, has it)" % getattr(torch, "__version__", "?"))
    path = _lib.loaded_path()
    if torch.cuda.is_initialized():
        raise RuntimeError(TOO_LATE % "torch.cuda.is_initialized() is True already")
    try:
        alloc = mem.CUDAPluggableAllocator(path, ALLOC, FREE)
    except AttributeError as e:  # a torch built without CUDA lacks _cuda_customAllocator
        raise RuntimeError("cuemm.torch: this torch (%s) cannot take a pluggable allocator: %s"
                           % (getattr(torch, "__version__", "?"), e)) from e
    raw = alloc.allocator()
    hooked = []
    for setter, symbol in HOOKS:
        fn = getattr(raw, setter, None)
        if fn is None or (not graphs and setter in GRAPH_HOOKS):
            continue
        fn(_lib.symbol_address(symbol))
        hooked.append(setter)
    try:
        mem.change_current_allocator(alloc)
    except RuntimeError as e:
        raise RuntimeError(TOO_LATE % ("change_current_allocator refused: %s" % e)) from e
    _allocator, _hooks = alloc, tuple(hooked)
    _graph_trees_off()
    return alloc


INDUCTOR_CONFIG = "torch._inductor.config"


def _graph_trees_off():
    """Switches torch.compile's CUDA graph trees off (see GRAPH_TREES_OFF):
    at once when inductor's config is loaded already, else when it is
    first imported (by torch.compile; importing it here would load dynamo
    and inductor into programs that never compile)."""
    config = sys.modules.get(INDUCTOR_CONFIG)
    if config is not None:
        _trees_off_in(config, stacklevel=4)
    elif not any(isinstance(f, _InductorConfigHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _InductorConfigHook())


def _trees_off_in(config, stacklevel):
    """Turns the trees off in inductor's config module; says so when they
    were on.  Returns whether they were."""
    triton = getattr(config, "triton", None)
    if triton is None or not getattr(triton, "cudagraph_trees", False):
        return False
    triton.cudagraph_trees = False
    warnings.warn(GRAPH_TREES_OFF, CuemmWarning, stacklevel=stacklevel)
    return True


class _InductorConfigHook(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """An import hook for torch._inductor.config alone: the module is found
    and run by the finder that would have loaded it, then its trees are
    switched off, and the hook removes itself."""

    def find_spec(self, fullname, path, target=None):
        if fullname != INDUCTOR_CONFIG:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                self._loader = spec.loader
                spec.loader = self
                return spec
        return None

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        try:
            self._loader.exec_module(module)
        finally:
            if self in sys.meta_path:
                sys.meta_path.remove(self)
        _trees_off_in(module, stacklevel=2)


def is_used():
    """Whether use() has switched PyTorch to cuemm."""
    return _allocator is not None


def hooks():
    """The hooks use() could set on this torch."""
    return _hooks


def _device(device):
    if device is None:
        torch = _torch()
        return torch.cuda.current_device() if torch.cuda.is_initialized() else 0
    if isinstance(device, int):
        return device
    index = getattr(device, "index", None)
    if index is not None:
        return index
    if isinstance(device, str) and ":" in device:
        return int(device.rsplit(":", 1)[1])
    return 0


def stats(device=None):
    """cuemm's statistics of the device's manager (cuemm_get_stats) as a
    dict (device None: torch's current device)."""
    return _lib.stats(_device(device))


def pool_stats(device=None):
    """The device's pool (cuemm_pool_get_stats) as a dict."""
    return _lib.pool_stats(_device(device))


def adapter_stats():
    """The adapters' failures (cuemm_adapter_get_stats) as a dict."""
    return _lib.adapter_stats()


def empty_cache():
    """Every device's cuemm pools trimmed (their free memory back to the
    driver), as torch.cuda.empty_cache() does in per-tensor mode.  In
    MemPool mode PyTorch's empty_cache comes first: it gives back to cuemm
    the cached segments of pools no MemPool holds (release_mempool()),
    which cuemm then trims."""
    if _pools:
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():
            torch.cuda.empty_cache()
    _lib.empty_cache()


# torch.cuda's names for the figures, from cuemm's statistics.
def memory_allocated(device=None):
    """Bytes the program holds now (live_bytes)."""
    return stats(device)["live_bytes"]


def max_memory_allocated(device=None):
    """The most bytes the program held (peak_bytes)."""
    return stats(device)["peak_bytes"]


def memory_reserved(device=None):
    """Bytes cuemm holds from the driver now (held_bytes, through
    cuemm_get_held: cheap enough to read at every step)."""
    return _lib.held(_device(device))


def max_memory_reserved(device=None):
    """The most bytes cuemm held from the driver (peak_held_bytes)."""
    return stats(device)["peak_held_bytes"]


# ---- tags: suspend and resume (docs/suspend-frameworks.md) ----------------

def region(tag):
    """A context manager: PyTorch allocations made inside (on any thread:
    the tag is process-wide, so the backward pass's gradients follow it)
    go to `tag`'s manager on their device, so that suspend(tag) can give
    them back to the driver.  Nests; the tag current before comes back at
    the exit.  Frees of the tag's tensors may happen anywhere.  Needs use()
    for PyTorch's allocations to reach cuemm."""
    return _tags.region(tag)


def current_tag():
    """The current tag (None: the default)."""
    return _tags.current_tag()


def suspend(tag, keep=False, device=None):
    """Gives the physical memory of `tag`'s tensors on the device back to
    the driver (device None: torch's current device).  The device is
    synchronized first.  The tensors stay valid Python objects with the
    same addresses; with keep=True their contents are copied to pinned host
    memory and come back at resume(), else they are garbage after it.  Do
    not touch them on the GPU, or allocate in the tag, until resume(); CUDA
    graphs whose memory is the tag's may be replayed again after resume()
    (keep=True keeps their inputs and outputs)."""
    _tags.suspend(tag, _device(device), keep=keep)


def resume(tag, device=None):
    """Maps memory again under `tag`'s tensors on the device (and copies
    kept contents back).  Raises cuemm.CuemmError (code 2, out of memory,
    with the bytes needed and free) when the device lacks the memory: the
    tag stays suspended, and resume() can be tried again."""
    _tags.resume(tag, _device(device))


def tag_stats(tag, device=None):
    """cuemm's statistics of `tag`'s manager on the device, as a dict."""
    return _tags.stats(tag, _device(device))


def tag_pool_stats(tag, device=None):
    """The pool statistics of `tag`'s manager on the device (suspended,
    suspended_need_bytes, kept_bytes, mapped_bytes, ...), as a dict."""
    return _tags.pool_stats(tag, _device(device))


# ---- MemPool mode ------------------------------------------------------------

SEGMENT_ALLOC = "cuemm_torch_segment_alloc"
SEGMENT_FREE = "cuemm_torch_segment_free"
BOTH_MODES = ("cuemm.torch: %s: per-tensor mode (use()) and MemPool mode (mempool(), pool()) exclude each "
              "other in a process (PyTorch's pluggable allocator has no MemPools); recommended_mode() says "
              "which to choose")

_pools = {}        # (tag, device) -> torch.cuda.MemPool
_pool_allocs = {}  # (tag, device) -> its allocator object, kept alive with it
_retired_allocs = []  # the allocators of released pools, never dropped
_pools_lock = threading.Lock()
_segment_fn = None


def _tag_key(tag):
    _tags._name(tag)  # refuses what is not a str or None
    return tag or None


def segment_alloc_address(tag):
    """The address of the segment allocation function bound to `tag`
    (cuemm_torch_segment_alloc_fn; None: cuemm_torch_segment_alloc)."""
    global _segment_fn
    lib = _lib.load()
    if _segment_fn is None:
        fn = getattr(lib, "cuemm_torch_segment_alloc_fn", None)
        if fn is None:
            raise OSError("cuemm.torch: the libcuemm loaded (%s) predates MemPool mode: it lacks "
                          "cuemm_torch_segment_alloc_fn" % _lib.loaded_path())
        fn.restype = ctypes.c_int
        fn.argtypes = (ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p))
        _segment_fn = fn
    out = ctypes.c_void_p()
    _lib.check(_segment_fn(_tags._name(tag), ctypes.byref(out)), "cuemm_torch_segment_alloc_fn(%r)" % (tag,))
    return out.value


def _segment_allocator(torch, tag):
    """The pluggable allocator object of tag's pool: the exported pair by
    name for the default tag; for another tag the same constructor that
    CUDAPluggableAllocator ends in (torch._C._cuda_customAllocator), given
    the address of the tag's own allocation function, which is no exported
    symbol (one function per tag: PyTorch's signature carries no user
    data)."""
    mem = torch.cuda.memory
    path = _lib.loaded_path()
    if tag is None:
        return mem.CUDAPluggableAllocator(path, SEGMENT_ALLOC, SEGMENT_FREE)
    make = getattr(torch._C, "_cuda_customAllocator", None)
    wrap = getattr(mem, "_CUDAAllocator", None)
    if make is None or wrap is None:
        raise RuntimeError("cuemm.torch: this torch (%s) lacks torch._C._cuda_customAllocator or "
                           "torch.cuda.memory._CUDAAllocator, which a tag's MemPool is made with"
                           % getattr(torch, "__version__", "?"))
    return wrap(make(segment_alloc_address(tag), _lib.symbol_address(SEGMENT_FREE)))


def mempool(tag=None, device=None):
    """The torch.cuda.MemPool of `tag` on the device (tag None: the
    device's default manager; device None: torch's current device), made on
    first use and the same object afterwards.  Its segments come from the
    tag's cuemm manager (cuemm_torch_segment_alloc_fn): PyTorch's caching
    allocator asks for a segment (2 MiB for small tensors, 20 MiB or the
    rounded size for larger ones) when the pool has no cached block that
    fits, and keeps a segment while the MemPool lives, its tensors dead or
    not (PyTorch's empty_cache releases the segments of pools no MemPool
    holds any more: release_mempool() lets this module's go); a segment
    given back is freed deferred in cuemm, and empty_cache() of this module
    trims the memory back to the driver.  Suspending the tag needs none of
    that: it releases the physical memory of every segment, cached or not.  Whatever makes PyTorch allocate in the pool (pool(), or
    torch.cuda.use_mem_pool, or a CUDA graph captured with pool=p.id, on
    any thread) takes segments from the tag.

    Because the segments are blocks of the tag's pool, suspend(tag) gives
    their memory back to the driver under the pool's tensors, which keep
    their addresses (contents kept with keep=True), and resume(tag) maps it
    again; a segment, or a tensor inside it, can be exported with
    cuemm_ipc_export of tag_manager (CUEMM_POOL_IPC=1).  While the tag is
    suspended, do not touch its tensors or allocate in its pool: PyTorch
    hands out cached blocks of a segment without asking cuemm, and a new
    segment is refused (PyTorch raises its out-of-memory error).

    The process allocator is not replaced: tensors outside any pool are
    PyTorch's own, and torch.cuda.memory_stats(), memory_summary() and
    torch.cuda.memory._snapshot() count every pool.  Not with use() in the
    same process (RuntimeError).  Needs torch.cuda.MemPool with an
    allocator (PyTorch 2.5 or newer); raises ImportError without PyTorch,
    OSError when libcuemm cannot be loaded, CuemmError for a tag name cuemm
    refuses."""
    torch = _torch()
    if _allocator is not None:
        raise RuntimeError(BOTH_MODES % "mempool() after use()")
    mem = getattr(torch.cuda, "memory", None)
    MemPool = getattr(torch.cuda, "MemPool", None) or getattr(mem, "MemPool", None)
    if MemPool is None or mem is None or not hasattr(mem, "CUDAPluggableAllocator"):
        raise RuntimeError("cuemm.torch: this torch (%s) has no torch.cuda.MemPool with a pluggable allocator "
                           "(PyTorch 2.5 or newer, built with CUDA, has it)" % getattr(torch, "__version__", "?"))
    key = (_tag_key(tag), _device(device))
    with _pools_lock:
        p = _pools.get(key)
        if p is None:
            alloc = _segment_allocator(torch, key[0])
            with torch.cuda.device(key[1]):
                p = MemPool(allocator=alloc.allocator())
            _pools[key], _pool_allocs[key] = p, alloc
    return p


def release_mempool(tag=None, device=None):
    """Forgets mempool(tag, device): once nothing else holds the MemPool
    (no pool() scope open on it, no CUDA graph captured into it), PyTorch
    releases it, giving its cached segments back to cuemm at once and the
    others as their tensors die.  A later mempool(tag) makes a new one.
    Returns whether there was one."""
    key = (_tag_key(tag), _device(device))
    with _pools_lock:
        alloc = _pool_allocs.pop(key, None)
        if alloc is not None:
            # Kept for good: PyTorch frees a released pool's last segments
            # through its allocator when their tensors die, after the
            # MemPool object is gone, and some releases hold the
            # allocator by a plain pointer.
            _retired_allocs.append(alloc)
        return _pools.pop(key, None) is not None


@contextlib.contextmanager
def pool(tag=None, device=None):
    """A context manager: PyTorch allocations made inside, on this thread,
    go to mempool(tag, device) (torch.cuda.use_mem_pool); yields the
    MemPool.  PyTorch routes only the calling thread's allocations to a
    pool: the backward pass's gradients, made on autograd threads, land
    outside it (region() of per-tensor mode is process-wide).  Nests."""
    torch = _torch()
    p = mempool(tag, device)
    use_mem_pool = getattr(torch.cuda, "use_mem_pool", None) or getattr(torch.cuda.memory, "use_mem_pool")
    with use_mem_pool(p) if device is None else use_mem_pool(p, device=device):
        yield p


# ---- which mode --------------------------------------------------------------

ModeChoice = collections.namedtuple("ModeChoice", "mode reason")
ModeChoice.__doc__ = """recommended_mode(..., why=True): the mode ("tensor" or "mempool") and why."""


def recommended_mode(uses_compile=False, reduce_overhead=False, needs_torch_memory_stats=False,
                     suspend_everything=False, shares_with_other_frameworks=False, why=False):
    """Which mode suits a program: "tensor" (use(): every allocation a cuemm
    block) or "mempool" (mempool()/pool(): PyTorch's caching allocator
    with segments from cuemm).  With why=True, a ModeChoice (mode, reason).
    The rule, first match wins:

      needs_torch_memory_stats with suspend_everything or
        shares_with_other_frameworks      ValueError: no mode gives both
      suspend_everything                  "tensor": only it puts every
                                          allocation (autograd threads',
                                          graph pools', compiled code's) in
                                          cuemm's tags; reduce-overhead then
                                          captures plain CUDA graphs
      shares_with_other_frameworks        "tensor": CuPy and Numba allocate
                                          from the same managers, block by
                                          block
      anything else                       "mempool": PyTorch keeps its
                                          statistics, snapshots and
                                          torch.compile's CUDA graph trees
                                          (reduce-overhead), and nothing
                                          needs setting before CUDA starts;
                                          the memory meant to be suspended
                                          or shared goes in pool(tag)

    uses_compile alone changes nothing (both modes run torch.compile);
    reduce_overhead implies it."""
    uses_compile = bool(uses_compile or reduce_overhead)
    if needs_torch_memory_stats and (suspend_everything or shares_with_other_frameworks):
        raise ValueError("cuemm.torch.recommended_mode: torch.cuda.memory_stats() and snapshots need PyTorch's "
                         "caching allocator (MemPool mode), while %s needs every allocation to be a cuemm block "
                         "(per-tensor mode): no mode gives both"
                         % ("suspending everything" if suspend_everything else "sharing with CuPy or Numba"))
    if suspend_everything:
        choice = ModeChoice("tensor", "only per-tensor mode puts every allocation, autograd threads', CUDA graph "
                                      "pools' and compiled code's, in cuemm's tags"
                            + ("; torch.compile's reduce-overhead then captures plain CUDA graphs "
                               "(cudagraph_trees off)" if reduce_overhead else ""))
    elif shares_with_other_frameworks:
        choice = ModeChoice("tensor", "CuPy and Numba allocate from the same cuemm managers block by block: one "
                                      "pool and one footprint for all")
    else:
        choice = ModeChoice("mempool", "PyTorch's caching allocator stays: memory_stats(), snapshots%s keep "
                                       "working, nothing must run before CUDA starts, and pool(tag) puts the "
                                       "memory to suspend or share in cuemm's tags"
                            % (" and torch.compile's CUDA graph trees" if reduce_overhead
                               else " and torch.compile" if uses_compile else ""))
    return choice if why else choice.mode


# The C entry points with PyTorch's types, for tests and tools that call
# them as PyTorch does.
ALLOC_TYPE = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)
FREE_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)
