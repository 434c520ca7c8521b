"""cuemm._lib: libcuemm for the package's modules (cuemm.torch, cuemm.cupy,
cuemm.numba, cuemm.triton, cuemm.cuda_core): finding and loading it, its per-device managers, their
statistics and the adapters' failures.

libcuemm is found in this order (candidates()): the path in CUEMM_LIBRARY
(when set, nothing else is tried); the libcuemm.so.0 inside the package
(what a wheel ships); the libdir `make install` recorded in cuemm._config;
the dynamic loader's idea of "cuemm" (ctypes.util.find_library);
libcuemm.so.0 through the loader's search path.  The module is pure ctypes
and imports no framework.
"""

import ctypes
import ctypes.util
import os
import threading

__all__ = ["CuemmError", "load", "loaded_path", "last_error", "device_manager",
           "stats", "pool_stats", "adapter_stats", "empty_cache"]

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
SONAME = "libcuemm.so.0"
try:  # written by `make install` only: the libdir it put libcuemm in
    from cuemm._config import LIBDIR
except ImportError:
    LIBDIR = None

HOW_TO_INSTALL = ("Set CUEMM_LIBRARY to the path of libcuemm.so.0, or install cuemm with pip "
                  "(pip install . in its source tree: the package then holds the library) or with "
                  "make install (the package then loads it from the libdir).")

CUDA_SUCCESS = 0
CU_MEMHOSTALLOC_PORTABLE = 0x01


class CuemmError(RuntimeError):
    """A cuemm call failed: .code is the CUresult, the message cuemm's."""

    def __init__(self, code, msg):
        super().__init__("[%d] %s" % (code, msg))
        self.code = code
        self.msg = msg


class Stats(ctypes.Structure):
    """struct cuemm_stats."""
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "total_bytes", "max_pending_bytes", "max_pending_count", "live_bytes",
        "live_count", "peak_bytes", "peak_count", "host_live_bytes",
        "host_live_count", "pinned_bytes", "pinned_count", "pending_bytes",
        "pending_count")] + [("defer_depth", ctypes.c_uint)] + [
        (n, ctypes.c_uint64) for n in (
            "allocs", "frees", "flushes", "driver_frees", "oom_retries",
            "alloc_failures", "free_failures")] + [
        (n, ctypes.c_size_t) for n in (
            "stream_cached_bytes", "stream_cached_count", "stream_heaps")] + [
        (n, ctypes.c_uint64) for n in (
            "stream_events", "stream_event_waits", "stream_steals",
            "stream_reclaims")] + [
        (n, ctypes.c_size_t) for n in ("held_bytes", "peak_held_bytes")] + [
        (n, ctypes.c_uint64) for n in ("log_rows", "log_lost")] + [
        (n, ctypes.c_size_t) for n in (
            "stream_spans", "stream_span_bytes", "stream_span_free_bytes")]


PIECE_CLASSES = 19


class PoolStats(ctypes.Structure):
    """struct cuemm_pool_stats."""
    _fields_ = [("enabled", ctypes.c_int), ("base", ctypes.c_uint64)] + [
        (n, ctypes.c_size_t) for n in (
            "reserved_bytes", "chunk_bytes", "granularity", "release_threshold",
            "limit_bytes", "mapped_bytes", "used_bytes", "free_bytes",
            "largest_free_block", "used_blocks", "free_blocks", "chunks")] + [
        (n, ctypes.c_uint64) for n in (
            "chunks_mapped", "chunks_released", "grow_steps", "grow_failures",
            "releases", "fallback_allocs")] + [
        ("peers", ctypes.c_uint), ("fragmentation", ctypes.c_double),
        ("limit_hard", ctypes.c_int), ("piece_pinned", ctypes.c_size_t),
        ("piece_bytes", ctypes.c_size_t),
        ("piece_cost_us", ctypes.c_double * PIECE_CLASSES),
        ("piece_samples", ctypes.c_uint * PIECE_CLASSES), ("slab", ctypes.c_int),
        ("suspended", ctypes.c_int), ("suspended_need_bytes", ctypes.c_size_t),
        ("kept_bytes", ctypes.c_size_t), ("suspends", ctypes.c_uint64),
        ("resumes", ctypes.c_uint64)]


class AdapterStats(ctypes.Structure):
    """struct cuemm_adapter_stats."""
    _fields_ = [("devices", ctypes.c_int)] + [
        (n, ctypes.c_uint64) for n in (
            "alloc_failures", "free_failures", "record_stream_failures",
            "empty_cache_failures", "empty_caches", "graph_pools",
            "graph_blocks_held", "graph_failures")] + [
        ("last_failure", ctypes.c_char * 512)]


def _as_dict(s):
    out = {}
    for name, _ in s._fields_:
        v = getattr(s, name)
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        elif hasattr(v, "_length_"):
            v = list(v)
        out[name] = v
    return out


_vp = ctypes.c_void_p
_P = ctypes.POINTER
_PROTOTYPES = {
    "cuemm_last_error": (ctypes.c_char_p, ()),
    "cuemm_version_string": (ctypes.c_char_p, ()),
    "cuemm_device_manager": (ctypes.c_int, (ctypes.c_int, _P(_vp))),
    "cuemm_get_stats": (ctypes.c_int, (_vp, _P(Stats))),
    "cuemm_get_held": (ctypes.c_int, (_vp, _P(ctypes.c_size_t))),
    "cuemm_pool_get_stats": (ctypes.c_int, (_vp, _P(PoolStats))),
    "cuemm_adapter_get_stats": (ctypes.c_int, (_P(AdapterStats),)),
    "cuemm_torch_alloc": (_vp, (ctypes.c_size_t, ctypes.c_int, _vp)),
    "cuemm_torch_free": (None, (_vp, ctypes.c_size_t, ctypes.c_int, _vp)),
    "cuemm_torch_record_stream": (None, (_vp, _vp)),
    "cuemm_torch_empty_cache": (None, ()),
    "cuemm_torch_init": (None, (ctypes.c_int,)),
    "cuemm_torch_begin_allocate_to_pool": (None, None),  # called by PyTorch only
    "cuemm_torch_end_allocate_to_pool": (None, None),
    "cuemm_torch_release_pool": (None, None),
    "cuemm_host_allocate": (ctypes.c_int, (_vp, ctypes.c_size_t, ctypes.c_uint, _P(_vp))),
    "cuemm_host_free": (ctypes.c_int, (_vp, _vp)),
    "cuemm_stream_release": (ctypes.c_int, (_vp, _vp)),
    "cuemm_allocate_async": (ctypes.c_int, (_vp, ctypes.c_size_t, _vp, _P(ctypes.c_uint64))),
    "cuemm_free_async": (ctypes.c_int, (_vp, ctypes.c_uint64, _vp)),
}

_lib = None
_lib_path = None
_lib_lock = threading.Lock()


def candidates():
    """[(how, path)] in the order they are tried."""
    env = os.environ.get("CUEMM_LIBRARY", "")
    if env:
        return [("CUEMM_LIBRARY", env)]
    out = []
    bundled = os.path.join(PACKAGE_DIR, SONAME)
    if os.path.exists(bundled):
        out.append(("inside the package", bundled))
    if LIBDIR:
        out.append(("installed by make install", os.path.join(LIBDIR, SONAME)))
    found = ctypes.util.find_library("cuemm")
    if found:
        out.append(("find_library('cuemm')", found))
    out.append(("loader search path", "libcuemm.so.0"))
    return out


def load():
    """Loads libcuemm (once) and returns the ctypes.CDLL.  Raises OSError
    naming every file tried when none loads, or when the one found lacks the
    adapters' entry points (an older cuemm)."""
    global _lib, _lib_path
    with _lib_lock:
        if _lib is not None:
            return _lib
        tried = []
        for how, path in candidates():
            try:
                lib = ctypes.CDLL(path)
                missing = [n for n in _PROTOTYPES if not hasattr(lib, n)]
                if missing:
                    raise OSError("a libcuemm without the framework adapters: lacks %s" % ", ".join(missing))
            except OSError as e:
                tried.append("%s (%s): %s" % (path, how, e))
                continue
            for name, (res, args) in _PROTOTYPES.items():
                fn = getattr(lib, name)
                fn.restype = res
                if args is not None:
                    fn.argtypes = args
            _lib, _lib_path = lib, path
            return lib
        raise OSError(
            "cuemm: cannot load libcuemm; tried:\n  " + "\n  ".join(tried) + "\n" + HOW_TO_INSTALL)


def loaded_path():
    """The file libcuemm was loaded from (loading it if needed): what a
    framework that dlopens it itself must be given, so that both share one
    copy of the library."""
    load()
    return _lib_path


def symbol_address(name):
    """The address of a function of libcuemm, as an int."""
    return ctypes.cast(getattr(load(), name), ctypes.c_void_p).value


def last_error():
    """The calling thread's cuemm message."""
    msg = load().cuemm_last_error()
    return msg.decode("utf-8", "replace") if msg else ""


def check(rc, what):
    if rc != CUDA_SUCCESS:
        raise CuemmError(rc, "%s: %s" % (what, last_error()))


def device_manager(device):
    """The handle (an int) of device `device`'s manager, made on first use
    over its primary context (cuemm_device_manager)."""
    m = ctypes.c_void_p()
    check(load().cuemm_device_manager(int(device), ctypes.byref(m)), "cuemm_device_manager(%d)" % device)
    return m.value


def stats(device=0):
    """cuemm_get_stats of the device's manager, as a dict: live_bytes and
    peak_bytes (what the program holds), held_bytes and peak_held_bytes
    (what cuemm holds from the driver), counts of allocations, frees,
    flushes and the stream caches (see cuemm.h)."""
    s = Stats()
    check(load().cuemm_get_stats(device_manager(device), ctypes.byref(s)), "cuemm_get_stats")
    return _as_dict(s)


def held(device=0):
    """cuemm_get_held of the device's manager: the bytes it holds from the
    driver now (held_bytes), from a few loads, without the manager's lock
    or the threads' caches that stats() asks."""
    v = ctypes.c_size_t(0)
    check(load().cuemm_get_held(device_manager(device), ctypes.byref(v)), "cuemm_get_held")
    return v.value


def pool_stats(device=0):
    """cuemm_pool_get_stats of the device's manager, as a dict."""
    s = PoolStats()
    check(load().cuemm_pool_get_stats(device_manager(device), ctypes.byref(s)), "cuemm_pool_get_stats")
    return _as_dict(s)


def adapter_stats():
    """cuemm_adapter_get_stats as a dict: the adapters' failures, counted
    process-wide, and the message of the latest one (last_failure)."""
    s = AdapterStats()
    check(load().cuemm_adapter_get_stats(ctypes.byref(s)), "cuemm_adapter_get_stats")
    return _as_dict(s)


def empty_cache():
    """Gives every device manager's free memory back to the driver
    (cuemm_torch_empty_cache: a trim of each pool, which synchronizes)."""
    load().cuemm_torch_empty_cache()
