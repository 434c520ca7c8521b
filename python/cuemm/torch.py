"""cuemm.torch: PyTorch's CUDA memory from cuemm.

    import torch
    import cuemm.torch
    cuemm.torch.use()        # before the first CUDA tensor

From then on every CUDA allocation of PyTorch goes to libcuemm's entry
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
  - several devices: each device's allocations go to its own manager.
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

import ctypes

from cuemm import _lib

__all__ = ["use", "is_used", "stats", "pool_stats", "adapter_stats", "empty_cache",
           "memory_allocated", "max_memory_allocated", "memory_reserved",
           "max_memory_reserved", "ALLOC", "FREE", "HOOKS"]

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

TOO_LATE = ("cuemm.torch.use() must run before PyTorch initializes CUDA (its first CUDA tensor, "
            "torch.cuda.init(), or anything else that does): %s.  Call it right after `import torch`.")

_allocator = None
_hooks = ()


def _torch():
    try:
        import torch
    except ImportError as e:
        raise ImportError("cuemm.torch: PyTorch is not importable here (%s); install torch, or use "
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
    return alloc


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
    """torch.cuda.empty_cache()'s effect without torch: every device's pool
    trimmed."""
    _lib.empty_cache()


# torch.cuda's names for the figures, from cuemm's statistics.
def memory_allocated(device=None):
    """Bytes the program holds now (live_bytes)."""
    return stats(device)["live_bytes"]


def max_memory_allocated(device=None):
    """The most bytes the program held (peak_bytes)."""
    return stats(device)["peak_bytes"]


def memory_reserved(device=None):
    """Bytes cuemm holds from the driver now (held_bytes)."""
    return stats(device)["held_bytes"]


def max_memory_reserved(device=None):
    """The most bytes cuemm held from the driver (peak_held_bytes)."""
    return stats(device)["peak_held_bytes"]


# The C entry points with PyTorch's types, for tests and tools that call
# them as PyTorch does.
ALLOC_TYPE = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)
FREE_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)
