"""cuemm.dask: cuemm in every worker of a Dask cluster (distributed).

    from dask.distributed import Client
    import cuemm.dask
    client = Client(cluster)
    client.register_plugin(cuemm.dask.CuemmPlugin(pool_release_threshold="2GiB",
                                                  log="/tmp/cuemm-%p.csv"))
    ...
    print(cuemm.dask.format_stats(cuemm.dask.gather_stats(client)))
    cuemm.dask.gather_logs(client, "logs/")       # for cuemm-replay

CuemmPlugin is a distributed.WorkerPlugin, in the spirit of dask_cuda's RMM
set-up: its setup() runs in each worker (those there now and those that
join later) and, before the worker's first CUDA allocation,
  1. sets the worker's CUEMM_* environment: the settings given as keyword
     arguments (pool="vmm" becomes CUEMM_POOL=vmm, pool_release_threshold=
     "2GiB" CUEMM_POOL_RELEASE_THRESHOLD=2GiB, ...), the `env` mapping, and,
     with from_environ=True (the default), the CUEMM_* variables of the
     process that made the plugin; cuemm reads them when it makes a
     device's manager, so they must be in place before then;
  2. switches the frameworks to cuemm: CuPy (cuemm.cupy.use()) where CuPy
     is importable, Numba (cuemm.numba as its memory manager) where Numba
     is, PyTorch (cuemm.torch.use()) only when asked (torch=True: importing
     PyTorch costs seconds in every worker, and it must happen before
     PyTorch's first CUDA tensor there).
What happened in each worker is kept there; worker_status(client) gathers
it.  A worker whose CUDA was in use before the plugin ran (a manager made
already) is reported so: the settings apply to managers made afterwards.

gather_stats(client) collects every worker's cuemm statistics (held, peak
held, live, peak live, footprint, allocation counts) into rows, one per
worker and device; format_stats(rows) makes the table.  gather_logs(client,
directory) writes each worker's event log (CUEMM_LOG, "%p" the worker's
pid) there, every row the worker had made so far (cuemm_log_flush), named
after the worker's host and pid, ready for `cuemm-replay`.

This module imports without Dask; CuemmPlugin and the functions raise an
ImportError that says what to install when distributed is absent.
"""

import ctypes
import os
import socket
import sys

from cuemm import _lib

__all__ = ["CuemmPlugin", "settings", "worker_status", "gather_stats", "format_stats", "gather_logs",
           "NEED_DISTRIBUTED"]

NEED_DISTRIBUTED = ("cuemm.dask needs dask.distributed, which is not importable here (%s); install it "
                    "with `pip install dask distributed` (and dask-cuda for GPU clusters)")

# The worker's own record of what setup() did, for worker_status().
_status = {}


def _distributed():
    try:
        import distributed
    except ImportError as e:
        raise ImportError(NEED_DISTRIBUTED % e) from e
    return distributed


def _env_value(v):
    if v is True:
        return "1"
    if v is False:
        return "0"
    return str(v)


def settings(env=None, from_environ=True, **kwargs):
    """The CUEMM_* variables a worker gets, as a dict: those of this process
    (from_environ), then `env`, then the keyword arguments, each named after
    its variable without the prefix (pool_limit="8GiB" is CUEMM_POOL_LIMIT).
    A key of `env` must start with CUEMM_; values are passed as strings
    (True and False as 1 and 0).  Raises ValueError on a bad name."""
    out = {}
    if from_environ:
        out.update({k: v for k, v in os.environ.items() if k.startswith("CUEMM_")})
    for k, v in (env or {}).items():
        if not k.startswith("CUEMM_"):
            raise ValueError("cuemm.dask: %r is not a cuemm setting (names start with CUEMM_)" % (k,))
        out[k] = _env_value(v)
    for k, v in kwargs.items():
        name = "CUEMM_" + k.upper()
        if not k.replace("_", "").isalnum() or k.upper().startswith("CUEMM_"):
            raise ValueError("cuemm.dask: %r is not a setting name (write pool_limit=..., not CUEMM_POOL_LIMIT; "
                             "or pass env={'CUEMM_POOL_LIMIT': ...})" % (k,))
        out[name] = _env_value(v)
    return out


def _managers_made():
    """Managers cuemm_device_manager has made in this process; 0 when
    libcuemm is not loaded yet (then none can exist)."""
    if _lib._lib is None:
        return 0
    try:
        return int(_lib.adapter_stats().get("devices", 0))
    except Exception:
        return 0


def _numba_existing_context(cn, cuda):
    """set_memory_manager serves contexts Numba makes from now on; a context
    it made before (dask-cuda makes one when a worker starts, to pin its
    device) keeps the manager it was made with.  Such a context gets cuemm's
    in place of Numba's own while it holds no memory; one that holds memory
    keeps Numba's, and the record says so."""
    drv = getattr(cn, "_nbdrv", None)
    if drv is None or not getattr(getattr(drv, "driver", None), "is_initialized", False):
        return "cuemm"
    ctx = cuda.current_context()
    mm = getattr(ctx, "memory_manager", None)
    if isinstance(mm, cn.CuemmMemoryManager):
        return "cuemm"
    held = len(getattr(ctx, "allocations", None) or {}) + len(getattr(mm, "allocations", None) or {})
    if held:
        raise RuntimeError("Numba's context on this device was made before the plugin ran and holds %d "
                           "allocations: it keeps Numba's memory manager (register the plugin before the "
                           "workers allocate, or start the workers with NUMBA_CUDA_MEMORY_MANAGER=cuemm.numba)"
                           % held)
    new = cn._construct(cn.CuemmMemoryManager, context=ctx)
    new.initialize()
    ctx.memory_manager = new
    return "cuemm (put into the context Numba had made before the plugin ran)"


def _setup_worker(env, cupy, numba, torch):
    """What CuemmPlugin.setup does, in the worker's process; returns the
    record kept for worker_status()."""
    rec = {"pid": os.getpid(), "host": socket.gethostname(), "env": dict(env), "frameworks": {},
           "managers_before": _managers_made(), "errors": []}
    os.environ.update(env)
    if rec["managers_before"]:
        rec["errors"].append("cuemm had made %d device manager(s) in this worker before the plugin ran: the "
                             "settings apply to managers made from now on" % rec["managers_before"])

    def want(flag, module):
        if flag is False:
            return False
        if flag is True:
            return True
        try:  # None: where the framework is importable
            __import__(module)
            return True
        except Exception:
            return False

    if want(cupy, "cupy"):
        try:
            from cuemm import cupy as cc
            cc.use()
            rec["frameworks"]["cupy"] = "cuemm"
        except Exception as e:
            rec["frameworks"]["cupy"] = "not switched: %s" % e
            rec["errors"].append("cupy: %s" % e)
    if want(numba, "numba.cuda"):
        try:
            os.environ["NUMBA_CUDA_MEMORY_MANAGER"] = "cuemm.numba"
            from cuemm import numba as cn
            from numba import cuda
            cuda.set_memory_manager(cn.CuemmMemoryManager)
            rec["frameworks"]["numba"] = _numba_existing_context(cn, cuda)
        except Exception as e:
            rec["frameworks"]["numba"] = "not switched: %s" % e
            rec["errors"].append("numba: %s" % e)
    if torch:
        try:
            from cuemm import torch as ct
            ct.use()
            rec["frameworks"]["torch"] = "cuemm"
        except Exception as e:
            rec["frameworks"]["torch"] = "not switched: %s" % e
            rec["errors"].append("torch: %s" % e)
    _status.clear()
    _status.update(rec)
    return rec


def _make_plugin_class():
    distributed = _distributed()

    class CuemmPlugin(distributed.WorkerPlugin):
        """Sets cuemm up in every worker; see the module's documentation.

        CuemmPlugin(env=None, from_environ=True, cupy=None, numba=None,
                    torch=False, library=None, **settings)
          settings     CUEMM_* settings by name without the prefix:
                       pool="vmm", pool_limit="8GiB", log="/tmp/w-%p.csv", ...
          env          a dict of CUEMM_* variables, for names as they are
          from_environ take this process's CUEMM_* variables too (default)
          cupy, numba  True: switch it (an error if that fails, reported by
                       worker_status), None: where importable, False: never
          torch        True: cuemm.torch.use() in setup; False (default)
          library      the libcuemm file workers load (CUEMM_LIBRARY)
        """

        name = "cuemm"
        idempotent = True

        def __init__(self, env=None, from_environ=True, cupy=None, numba=None, torch=False, library=None,
                     **kwargs):
            self.env = settings(env=env, from_environ=from_environ, **kwargs)
            if library:
                self.env["CUEMM_LIBRARY"] = str(library)
            self.cupy, self.numba, self.torch = cupy, numba, torch

        def setup(self, worker=None):
            rec = _setup_worker(self.env, self.cupy, self.numba, self.torch)
            if worker is not None:
                try:
                    worker.cuemm_status = rec
                except Exception:
                    pass

    return CuemmPlugin


_plugin_class = None


def __getattr__(name):
    # CuemmPlugin is made on first use: it subclasses distributed.WorkerPlugin,
    # and this module imports without distributed.
    global _plugin_class
    if name == "CuemmPlugin":
        if _plugin_class is None:
            _plugin_class = _make_plugin_class()
        return _plugin_class
    raise AttributeError("module 'cuemm.dask' has no attribute %r" % name)


# ---- gathering, in the workers -----------------------------------------------

def _worker_status():
    return dict(_status) if _status else {"pid": os.getpid(), "host": socket.gethostname(),
                                          "errors": ["the cuemm plugin has not run in this worker"]}


def _worker_stats(devices):
    rows = []
    for d in devices:
        row = {"pid": os.getpid(), "host": socket.gethostname(), "device": d}
        try:
            s = _lib.stats(d)
            row.update({k: s[k] for k in ("live_bytes", "peak_bytes", "held_bytes", "peak_held_bytes", "allocs",
                                          "frees", "alloc_failures") if k in s})
            row["footprint"] = (s["peak_held_bytes"] / s["peak_bytes"]) if s.get("peak_bytes") else None
            # How often the pool went to the driver: each growth maps
            # memory, each release gives some back (the churn a release
            # threshold set too low causes).  None without a pool.
            row["pool_mapped"] = row["pool_grows"] = row["pool_releases"] = None
            try:
                ps = _lib.pool_stats(d)
                if ps.get("enabled"):
                    row["pool_mapped"], row["pool_grows"], row["pool_releases"] = (
                        ps.get("mapped_bytes"), ps.get("grow_steps"), ps.get("releases"))
            except Exception:
                pass
        except Exception as e:
            row["error"] = str(e)
        rows.append(row)
    a = None
    try:
        a = _lib.adapter_stats()
    except Exception:
        pass
    for row in rows:
        row["adapter_failures"] = (a or {}).get("alloc_failures")
    return rows


def _log_path():
    p = os.environ.get("CUEMM_LOG", "")
    return p.replace("%p", str(os.getpid())) if p else ""


def _worker_log(devices):
    path = _log_path()
    out = {"pid": os.getpid(), "host": socket.gethostname(), "path": path, "data": None, "error": None}
    if not path:
        out["error"] = "CUEMM_LOG is not set in this worker"
        return out
    lib = _lib.load()
    flush = getattr(lib, "cuemm_log_flush", None)
    if flush is not None:
        flush.restype, flush.argtypes = ctypes.c_int, (ctypes.c_void_p,)
        for d in devices:
            try:
                _lib.check(flush(_lib.device_manager(d)), "cuemm_log_flush")
            except Exception as e:
                out["error"] = "device %d: %s" % (d, e)
    try:
        with open(path, "rb") as f:
            out["data"] = f.read()
    except OSError as e:
        out["error"] = str(e)
    return out


# ---- gathering, from the client ----------------------------------------------

def worker_status(client):
    """{worker address: what the plugin did there} (its settings, the
    frameworks switched, errors)."""
    _distributed()
    return client.run(_worker_status)


def gather_stats(client, devices=(0,)):
    """Every worker's cuemm statistics, one row (a dict) per worker and
    device, sorted by worker address: worker, host, pid, device,
    live_bytes, peak_bytes, held_bytes, peak_held_bytes, footprint (peak
    held / peak live), allocs, frees, alloc_failures, pool_mapped,
    pool_grows and pool_releases (the pool's growth steps and release
    passes; None without a pool) and the adapters' failures.  devices:
    the ordinals asked in each worker (with dask-cuda, each worker's GPU
    is its device 0).  A worker where cuemm
    cannot answer gets a row with "error"."""
    _distributed()
    got = client.run(_worker_stats, list(devices))
    rows = []
    for addr in sorted(got):
        for row in got[addr]:
            rows.append(dict(row, worker=addr))
    return rows


def _mib(v):
    return "-" if v is None else "%.1f" % (v / 1048576.0)


def _count(v):
    return "-" if v is None else str(v)


def format_stats(rows):
    """The rows of gather_stats as a text table, with a total line."""
    head = ("worker", "pid", "dev", "held MiB", "peak held MiB", "live MiB", "peak live MiB", "footprint",
            "allocs", "frees", "failed", "grows", "releases")
    lines = [head]
    tot = {"held_bytes": 0, "peak_held_bytes": 0, "live_bytes": 0, "peak_bytes": 0, "allocs": 0, "frees": 0,
           "alloc_failures": 0}
    for r in rows:
        if "error" in r:
            lines.append((r.get("worker", "?"), str(r.get("pid", "?")), str(r.get("device", "?")),
                          "error: " + r["error"], "", "", "", "", "", "", "", "", ""))
            continue
        for k in tot:
            tot[k] += r.get(k) or 0
        fp = r.get("footprint")
        lines.append((r["worker"], str(r["pid"]), str(r["device"]), _mib(r.get("held_bytes")),
                      _mib(r.get("peak_held_bytes")), _mib(r.get("live_bytes")), _mib(r.get("peak_bytes")),
                      "-" if fp is None else "%.2f" % fp, str(r.get("allocs", "-")), str(r.get("frees", "-")),
                      str(r.get("alloc_failures", "-")), _count(r.get("pool_grows")),
                      _count(r.get("pool_releases"))))
    lines.append(("total (sum)", "", "", _mib(tot["held_bytes"]), _mib(tot["peak_held_bytes"]),
                  _mib(tot["live_bytes"]), _mib(tot["peak_bytes"]), "", str(tot["allocs"]), str(tot["frees"]),
                  str(tot["alloc_failures"]), "", ""))
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    out = []
    for n, line in enumerate(lines):
        out.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths))))
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def gather_logs(client, directory, devices=(0,)):
    """Writes every worker's cuemm event log (CUEMM_LOG, set through the
    plugin or the workers' environment) into `directory` as
    cuemm-HOST-PID.csv, after writing out the rows the worker still held in
    its threads' buffers (cuemm_log_flush on each device's manager);
    returns {worker address: the file written}.  A worker without a log is
    left out; RuntimeError when none had one."""
    _distributed()
    got = client.run(_worker_log, list(devices))
    os.makedirs(directory, exist_ok=True)
    written, problems = {}, []
    for addr in sorted(got):
        r = got[addr]
        if r["data"] is None:
            problems.append("%s: %s" % (addr, r["error"]))
            continue
        name = os.path.join(directory, "cuemm-%s-%d.csv" % (r["host"], r["pid"]))
        with open(name, "wb") as f:
            f.write(r["data"])
        written[addr] = name
        if r["error"]:
            problems.append("%s: %s" % (addr, r["error"]))
    if not written:
        raise RuntimeError("cuemm.dask.gather_logs: no worker had a log: " + "; ".join(problems))
    if problems:
        print("cuemm.dask.gather_logs: " + "; ".join(problems), file=sys.stderr)
    return written
