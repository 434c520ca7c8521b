"""cuemm._tags: tags, the part of suspend and resume that needs no framework
(cuemm.torch, cuemm.cupy and cuemm.numba build on it).

A tag is a name that gets a cuemm manager of its own on each device, over
the device's primary context, with its own pool (cuemm_adapter_set_tag in
cuemm.h).  While a tag is current, the frameworks' allocations go to its
manager; suspend(tag) gives that manager's physical memory back to the
driver, keeping every address (and, with keep=True, the contents, copied to
host memory), and resume(tag) maps memory again at the same addresses.
The default tag (None) is each device's ordinary manager.

The current tag is one for the whole process, not one per thread:
PyTorch's backward pass allocates gradients on its autograd threads, which
a tag of the thread that opened region() would miss.  So region() is not
for threads that want different tags at the same time: the last one set
holds.  Frees find the block's manager from the pointer, whatever tag is
current.  docs/suspend-frameworks.md says more.
"""

import contextlib
import ctypes
import threading

from cuemm import _lib

__all__ = ["KEEP", "IGNORE_IPC", "set_tag", "current_tag", "region", "suspend", "resume",
           "tag_manager", "stats", "pool_stats", "stream_release"]

KEEP = 0x1        # CUEMM_SUSPEND_KEEP
IGNORE_IPC = 0x2  # CUEMM_SUSPEND_IGNORE_IPC

_vp = ctypes.c_void_p
_PROTOTYPES = {
    "cuemm_adapter_set_tag": (ctypes.c_int, (ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p))),
    "cuemm_adapter_get_tag": (ctypes.c_char_p, ()),
    "cuemm_adapter_tag_manager": (ctypes.c_int, (ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(_vp))),
    "cuemm_adapter_suspend": (ctypes.c_int, (ctypes.c_char_p, ctypes.c_int, ctypes.c_uint)),
    "cuemm_adapter_resume": (ctypes.c_int, (ctypes.c_char_p, ctypes.c_int)),
    "cuemm_adapter_stream_release": (ctypes.c_int, (ctypes.c_int, _vp)),
    "cuemm_pool_suspend": (ctypes.c_int, (_vp, ctypes.c_uint)),
    "cuemm_pool_resume": (ctypes.c_int, (_vp,)),
    "cuemm_get_stats": (ctypes.c_int, (_vp, ctypes.POINTER(_lib.Stats))),
    "cuemm_pool_get_stats": (ctypes.c_int, (_vp, ctypes.POINTER(_lib.PoolStats))),
}
_typed = None
_typed_lock = threading.Lock()


def lib():
    """libcuemm (cuemm._lib.load()) with the tag calls typed."""
    global _typed
    if _typed is None:
        with _typed_lock:
            if _typed is None:
                handle = _lib.load()
                for name, (res, args) in _PROTOTYPES.items():
                    fn = getattr(handle, name)
                    fn.restype = res
                    fn.argtypes = args
                _typed = handle
    return _typed


def _name(tag):
    if tag is None or tag == "":
        return None
    if not isinstance(tag, str):
        raise TypeError("a tag is a str (letters, digits, '_', '-', '.') or None, not %r" % (tag,))
    return tag.encode()


def _text(raw):
    return None if raw is None else raw.decode()


def set_tag(tag):
    """Makes `tag` current for the whole process (None: the default);
    returns the tag current before.  Raises CuemmError for a name cuemm
    refuses (too long, other characters, past 63 tags)."""
    prev = ctypes.c_char_p()
    _lib.check(lib().cuemm_adapter_set_tag(_name(tag), ctypes.byref(prev)),
               "cuemm_adapter_set_tag(%r)" % (tag,))
    return _text(prev.value)


def current_tag():
    """The current tag; None for the default."""
    return _text(lib().cuemm_adapter_get_tag())


@contextlib.contextmanager
def region(tag):
    """Allocations made inside go to `tag`'s managers (process-wide, see
    the module's text); the tag current before comes back at the exit."""
    prev = set_tag(tag)
    try:
        yield tag
    finally:
        set_tag(prev)


def suspend(tag, device=0, keep=False, ignore_ipc=False):
    """Suspends `tag`'s manager on `device` (cuemm_adapter_suspend): its
    physical memory goes back to the driver, its blocks keep their
    addresses; with keep=True their contents are copied to host memory
    and come back at resume().  The device's context is synchronized
    first.  Until resume(), allocations in the tag fail."""
    flags = (KEEP if keep else 0) | (IGNORE_IPC if ignore_ipc else 0)
    _lib.check(lib().cuemm_adapter_suspend(_name(tag), device, flags),
               "suspend(%r, device %d)" % (tag, device))


def resume(tag, device=0):
    """Maps memory again under `tag`'s blocks on `device`
    (cuemm_adapter_resume); kept contents are copied back.  Raises
    CuemmError with code CUDA_ERROR_OUT_OF_MEMORY (2) when the device
    lacks the memory: the tag then stays suspended and a later resume() can
    succeed."""
    _lib.check(lib().cuemm_adapter_resume(_name(tag), device), "resume(%r, device %d)" % (tag, device))


def tag_manager(tag, device=0):
    """The handle (an int) of `tag`'s manager on `device`, made on first use."""
    m = _vp()
    _lib.check(lib().cuemm_adapter_tag_manager(_name(tag), device, ctypes.byref(m)),
               "cuemm_adapter_tag_manager(%r, device %d)" % (tag, device))
    return m.value


def stats(tag, device=0):
    """cuemm_get_stats of `tag`'s manager on `device`, as a dict."""
    s = _lib.Stats()
    _lib.check(lib().cuemm_get_stats(tag_manager(tag, device), ctypes.byref(s)), "cuemm_get_stats")
    return _lib._as_dict(s)


def pool_stats(tag, device=0):
    """cuemm_pool_get_stats of `tag`'s manager on `device`, as a dict
    (suspended, suspended_need_bytes, kept_bytes, suspends, resumes among
    its keys)."""
    s = _lib.PoolStats()
    _lib.check(lib().cuemm_pool_get_stats(tag_manager(tag, device), ctypes.byref(s)), "cuemm_pool_get_stats")
    return _lib._as_dict(s)


def stream_release(device, handle):
    """cuemm_adapter_stream_release: every tag's manager on `device` forgets
    the stream (before it is destroyed)."""
    _lib.check(lib().cuemm_adapter_stream_release(device, handle),
               "cuemm_adapter_stream_release(device %d, stream 0x%x)" % (device, handle or 0))
