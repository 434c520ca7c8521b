"""cuemm._report: what a device's manager holds, as Python objects: the
statistics table (cuemm_stats_print) as text, and the snapshot
(cuemm_snapshot_take) as frozen dataclasses.

Both are read through the C library's own writers (the table, the snapshot's
JSON) into memory with the C library's open_memstream, so the Python side
mirrors no struct layout of cuemm_snapshot and cannot drift from it.
"""

import ctypes
import dataclasses
import json
import sys
from typing import List

from cuemm import _lib

__all__ = ["Block", "Chunk", "Snapshot", "snapshot", "stats_text", "print_stats", "BLOCK_STATES"]

BLOCK_STATES = ("live", "pending", "cached", "free")

_libc = None


def _memstream():
    global _libc
    if _libc is None:
        libc = ctypes.CDLL(None)
        libc.open_memstream.restype = ctypes.c_void_p
        libc.open_memstream.argtypes = (ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t))
        libc.fclose.argtypes = (ctypes.c_void_p,)
        libc.free.argtypes = (ctypes.c_void_p,)
        _libc = libc
    return _libc


def _capture(write, what):
    """What write(FILE *) writes, as text; write returns a CUresult."""
    libc = _memstream()
    buf, size = ctypes.c_void_p(), ctypes.c_size_t()
    f = libc.open_memstream(ctypes.byref(buf), ctypes.byref(size))
    if not f:
        raise OSError(ctypes.get_errno(), "open_memstream failed")
    try:
        rc = write(f)
    finally:
        libc.fclose(f)
        text = ctypes.string_at(buf, size.value).decode("utf-8", "replace") if buf.value else ""
        libc.free(buf)
    _lib.check(rc, what)
    return text


def _prototypes(lib):
    if not getattr(lib, "_cuemm_report", False):
        lib.cuemm_stats_print.restype = ctypes.c_int
        lib.cuemm_stats_print.argtypes = (ctypes.c_void_p, ctypes.c_void_p)
        lib.cuemm_snapshot_take.restype = ctypes.c_int
        lib.cuemm_snapshot_take.argtypes = (ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p))
        lib.cuemm_snapshot_free.restype = None
        lib.cuemm_snapshot_free.argtypes = (ctypes.c_void_p,)
        lib.cuemm_snapshot_write_json.restype = ctypes.c_int
        lib.cuemm_snapshot_write_json.argtypes = (ctypes.c_void_p, ctypes.c_void_p)
        lib._cuemm_report = True
    return lib


def stats_text(device=0):
    """The statistics table of the device's manager (cuemm_stats_print) as
    a string."""
    lib = _prototypes(_lib.load())
    m = _lib.device_manager(device)
    return _capture(lambda f: lib.cuemm_stats_print(m, f), "cuemm_stats_print")


def print_stats(device=0, file=None):
    """Prints the statistics table of the device's manager to `file`
    (default sys.stderr, where CUEMM_STATS=1 prints it)."""
    (file or sys.stderr).write(stats_text(device))


@dataclasses.dataclass(frozen=True)
class Chunk:
    """A physical allocation mapped into the pool (cuemm_snapshot_chunk)."""
    base: int
    size: int


@dataclasses.dataclass(frozen=True)
class Block:
    """One block of a snapshot (cuemm_snapshot_block).  state is one of
    BLOCK_STATES; chunk indexes Snapshot.chunks, -1 for memory outside the
    pool; stream is the stream handle as an int (0: none or the legacy
    default stream)."""
    ptr: int
    size: int
    requested: int
    stream: int
    state: str
    chunk: int
    stream_ordered: bool


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """A manager's memory at one moment (cuemm_snapshot): the pool's chunks
    and every block (live, pending, cached, free) in address order, the
    pool's first, with the statistics (stats(), pool_stats() as dicts) of
    the same moment."""
    chunks: List[Chunk]
    blocks: List[Block]
    stats: dict
    pool: dict

    def live(self):
        """The blocks the program holds."""
        return [b for b in self.blocks if b.state == "live"]


def _int(v):
    return int(v, 16) if isinstance(v, str) else int(v or 0)


def snapshot(device=0):
    """A Snapshot of the device's manager (cuemm_snapshot_take, consistent:
    taken under the manager's lock)."""
    lib = _prototypes(_lib.load())
    m = _lib.device_manager(device)
    s = ctypes.c_void_p()
    _lib.check(lib.cuemm_snapshot_take(m, ctypes.byref(s)), "cuemm_snapshot_take")
    try:
        doc = json.loads(_capture(lambda f: lib.cuemm_snapshot_write_json(s, f), "cuemm_snapshot_write_json"))
    finally:
        lib.cuemm_snapshot_free(s)
    chunks = [Chunk(_int(c["base"]), int(c["size"])) for c in doc.get("chunks", [])]
    blocks = [Block(_int(b["ptr"]), int(b["size"]), int(b["requested"]), _int(b.get("stream")), b["state"],
                    int(b["chunk"]), bool(b["stream_ordered"])) for b in doc.get("blocks", [])]
    return Snapshot(chunks, blocks, doc.get("stats", {}), doc.get("pool", {}))
