"""test-dask.py: cuemm.dask on a distributed.LocalCluster of two worker
processes, on the suite's driver (simcuda unless CUEMM_TEST_DRIVER=system).

Without distributed (hidden in a child interpreter) the module imports and
says what to install when used.  With it: the plugin registered on the
client sets the CUEMM_* settings in each worker before cuemm makes a
manager there (CUEMM_POOL, the release threshold and the event log,
checked in the workers' environment and in their pools' figures); a
workload with no framework allocates through libcuemm (ctypes) in each
worker; where Numba (numba-cuda) is importable, each worker makes its Numba
context first, as dask-cuda's workers do, the plugin puts cuemm's memory
manager into it, and a Numba device array counts in cuemm's figures;
gather_stats brings back both workers' counts and bytes, exactly;
gather_logs brings back both workers' event logs with every row, though the
rows are still in the workers' thread buffers when it runs.  Prints TAP;
skips with the reason when dask or distributed is not importable."""

import ctypes
import importlib.util
import os
import subprocess
import sys
import tempfile
import textwrap

build = os.environ.get("CUEMM_TOP_BUILDDIR", ".")
src = os.environ.get("top_srcdir", os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
installed = os.environ.get("CUEMM_PYTHON_INSTALLED") == "1"
pydir = os.path.join(os.path.abspath(src), "python")
if not installed:
    sys.path[:0] = [pydir]
    # The workers are processes of their own: they find the package the same way.
    os.environ["PYTHONPATH"] = pydir + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from taputil import done, ok, raises  # noqa: E402

# ---- the cluster -------------------------------------------------------------------

SIZES = [4096 * (i + 1) for i in range(7)]
FREED = (1, 3, 5)
LIVE = sum(s for i, s in enumerate(SIZES) if i not in FREED)
MiB = 1 << 20


def workload():
    """In a worker: 7 allocations through libcuemm (device 0's manager),
    3 of them freed; the 4 others stay live."""
    from cuemm import _lib
    lib = _lib.load()
    lib.cuemm_allocate.restype = ctypes.c_int
    lib.cuemm_allocate.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_uint64))
    lib.cuemm_free.restype = ctypes.c_int
    lib.cuemm_free.argtypes = (ctypes.c_void_p, ctypes.c_uint64)
    m = _lib.device_manager(0)
    ptrs = []
    for s in SIZES:
        p = ctypes.c_uint64()
        _lib.check(lib.cuemm_allocate(m, s, ctypes.byref(p)), "cuemm_allocate")
        ptrs.append(p.value)
    for i in FREED:
        _lib.check(lib.cuemm_free(m, ptrs[i]), "cuemm_free")
    return os.getpid()


def numba_context():
    """In a worker: Numba's context of device 0 made now, with Numba's own
    memory manager, as dask-cuda makes it when a worker starts."""
    from numba import cuda
    return type(cuda.current_context().memory_manager).__name__


def numba_workload(dask_worker):
    """In a worker: one Numba device array of 8192 bytes, kept by the worker
    (this function is shipped by value: its own globals do not last)."""
    import numpy as np
    from numba import cuda
    dask_worker.cuemm_test_array = cuda.device_array(8192, dtype=np.uint8)
    return type(cuda.current_context().memory_manager).__name__


def worker_view():
    from cuemm import _lib
    ps = _lib.pool_stats(0)
    return {"pid": os.getpid(), "pool": os.environ.get("CUEMM_POOL"), "log": os.environ.get("CUEMM_LOG"),
            "threshold": ps["release_threshold"], "enabled": ps["enabled"]}



def main():
    # ---- without distributed -----------------------------------------------------------

    code = r"""
    import sys
    sys.modules["distributed"] = None
    sys.modules["dask.distributed"] = None
    import cuemm.dask as cd
    print("imported")
    for what in ("plugin", "stats", "logs"):
        try:
            if what == "plugin":
                cd.CuemmPlugin
            elif what == "stats":
                cd.gather_stats(None)
            else:
                cd.gather_logs(None, "/nonexistent")
            print(what, "no error")
        except ImportError as e:
            print(what, "ImportError:", e)
    """
    env = dict(os.environ)
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True)
    lines = r.stdout.splitlines()
    ok(r.returncode == 0 and lines[:1] == ["imported"], "cuemm.dask imports without distributed", r.stdout)
    ok(len(lines) == 4 and all("ImportError: cuemm.dask needs dask.distributed" in ln and "pip install dask distributed"
                               in ln for ln in lines[1:]),
       "CuemmPlugin, gather_stats and gather_logs raise ImportError saying what to install", r.stdout)

    import cuemm.dask as cd  # noqa: E402

    s = cd.settings(from_environ=False, pool="vmm", pool_limit_hard=True, env={"CUEMM_LOG": "/tmp/x-%p.csv"})
    ok(s == {"CUEMM_POOL": "vmm", "CUEMM_POOL_LIMIT_HARD": "1", "CUEMM_LOG": "/tmp/x-%p.csv"},
       "settings: keyword names become CUEMM_ variables, True becomes 1", s)
    e = raises(lambda: cd.settings(env={"POOL": "vmm"}), ValueError)
    ok(isinstance(e, ValueError) and "start with CUEMM_" in str(e), "settings: an env name without CUEMM_ refused", e)
    e = raises(lambda: cd.settings(CUEMM_POOL="vmm"), ValueError)
    ok(isinstance(e, ValueError) and "pool_limit=" in str(e), "settings: a keyword with the prefix refused, saying why", e)
    os.environ["CUEMM_STREAM_REUSE"] = "event"
    ok(cd.settings().get("CUEMM_STREAM_REUSE") == "event" and "CUEMM_STREAM_REUSE" not in cd.settings(from_environ=False),
       "settings: this process's CUEMM_ variables unless from_environ=False")
    del os.environ["CUEMM_STREAM_REUSE"]

    try:
        import distributed  # noqa: F401
        import dask  # noqa: F401
    except ImportError as e:
        print("# skipping the cluster: dask or distributed is not importable here (%s)" % e)
        done()

    lib_path = os.path.join(build, ".libs", "libcuemm.so.0")
    skip_why = os.environ.get("CUEMM_PLUGIN_SKIP", "")
    if installed:
        lib_path = None
    elif not skip_why and not os.path.exists(lib_path):
        skip_why = "no shared library built (%s)" % lib_path
    if skip_why:
        print("# the cluster is not exercised: " + skip_why)
        done()
    if lib_path:
        os.environ["CUEMM_LIBRARY"] = os.path.abspath(lib_path)


    from distributed import Client, LocalCluster  # noqa: E402

    logs = tempfile.mkdtemp(prefix="cuemm-test-dask-")
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                           silence_logs=40)
    client = Client(cluster)
    try:
        plugin = cd.CuemmPlugin(pool="vmm", pool_release_threshold="64MiB",
                                env={"CUEMM_LOG": os.path.join(logs, "w-%p.csv")})
        ok(isinstance(plugin, distributed.WorkerPlugin), "CuemmPlugin is a distributed.WorkerPlugin")
        # With Numba (numba-cuda) importable, each worker makes its Numba
        # context before the plugin runs, as dask-cuda's workers do.
        have_numba = importlib.util.find_spec("numba") is not None
        if have_numba:
            before = client.run(numba_context)
            ok(all(v != "CuemmMemoryManager" for v in before.values()),
               "Numba: each worker's context made first, with Numba's own manager", before)
        client.register_plugin(plugin)
        st = cd.worker_status(client)
        ok(len(st) == 2 and len({v["pid"] for v in st.values()}) == 2, "the plugin ran in both worker processes", st)
        ok(all(v["env"].get("CUEMM_POOL") == "vmm" and v["env"].get("CUEMM_POOL_RELEASE_THRESHOLD") == "64MiB"
               and v["env"].get("CUEMM_LIBRARY") == os.environ.get("CUEMM_LIBRARY") for v in st.values()),
           "each got the settings given and this process's CUEMM_LIBRARY", st)
        ok(all(v["managers_before"] == 0 and not v["errors"] for v in st.values()),
           "before any cuemm manager there, with no error", st)

        if have_numba:
            ok(all(v["frameworks"].get("numba") == "cuemm (put into the context Numba had made before the plugin ran)"
                   for v in st.values()), "Numba: the plugin put cuemm's manager into that context", st)
            after = client.run(numba_workload)
            ok(all(v == "CuemmMemoryManager" for v in after.values()),
               "Numba: a device array allocated there goes through cuemm", after)
        else:
            print("# Numba (numba-cuda) is not importable: its checks are left out")
        extra_allocs, extra_live = (1, 8192) if have_numba else (0, 0)
        pids = client.run(workload)
        ok(sorted(pids.values()) == sorted(v["pid"] for v in st.values()), "the workload ran in both workers", pids)
        view = client.run(worker_view)
        ok(all(v["pool"] == "vmm" and v["enabled"] == 1 and v["threshold"] == 64 * MiB for v in view.values()),
           "cuemm's managers in the workers were made with the settings (pool on, release threshold 64 MiB)", view)

        rows = cd.gather_stats(client)
        ok(len(rows) == 2 and {r["worker"] for r in rows} == set(pids), "gather_stats: a row for each worker", rows)
        ok(all(r.get("allocs") == 7 + extra_allocs and r.get("frees") == 3 and r.get("alloc_failures") == 0
               for r in rows), "gather_stats: %d allocations and 3 frees counted in each worker" % (7 + extra_allocs),
           rows)
        ok(all(r.get("live_bytes") == LIVE + extra_live and r.get("peak_bytes", 0) >= LIVE + extra_live for r in rows),
           "gather_stats: %d live bytes in each worker" % (LIVE + extra_live), rows)
        ok(all(r.get("held_bytes", 0) >= LIVE and r.get("pool_mapped", 0) > 0 and r.get("peak_held_bytes", 0) >=
               r.get("held_bytes", 0) and r.get("footprint") is not None and r["footprint"] >= 1 for r in rows),
           "gather_stats: held bytes from the pool, peak held and footprint", rows)
        # The pool grew for the workload and gave nothing back: what it
        # holds free stays under the 64 MiB release threshold.
        ok(all(isinstance(r.get("pool_grows"), int) and r["pool_grows"] >= 1 and r.get("pool_releases") == 0
               for r in rows), "gather_stats: the pool's growth steps (at least one) and release passes (none)", rows)
        table = cd.format_stats(rows)
        ok(all(a in table for a in pids) and "total (sum)" in table and "footprint" in table and "grows" in table
           and ("%.1f" % (2 * (LIVE + extra_live) / float(MiB))) in table.splitlines()[-1],
           "format_stats: one line per worker and the total of live bytes", table)
        print("# " + table.replace("\n", "\n# "))

        written = cd.gather_logs(client, os.path.join(logs, "gathered"))
        ok(sorted(written) == sorted(pids), "gather_logs: a file from each worker", written)
        counts = {}
        for addr, path in written.items():
            with open(path) as f:
                lines = f.read().splitlines()
            counts[addr] = (lines[:1], sum(1 for ln in lines[1:] if ",allocate," in ln),
                            sum(1 for ln in lines[1:] if ",free," in ln), os.path.basename(path))
        ok(all(c[0] == ["Thread,Time,Action,Pointer,Size,Stream,Seq,Manager,Call,Held,Events"]
               and c[1] == 7 + extra_allocs and c[2] == 3 for c in counts.values()),
           "gather_logs: each log has the header, %d allocate and 3 free rows (flushed from the live workers)"
           % (7 + extra_allocs), counts)
        ok(all(c[3] == "cuemm-%s-%d.csv" % (__import__("socket").gethostname(), pids[a]) for a, c in counts.items()),
           "gather_logs: files named after the worker's host and pid", counts)

        # A worker that joins later gets the plugin too.
        cluster.scale(3)
        client.wait_for_workers(3, timeout=60)
        st = cd.worker_status(client)
        new = [v for a, v in st.items() if a not in pids]
        ok(len(st) == 3 and len(new) == 1 and new[0]["env"].get("CUEMM_POOL") == "vmm" and not new[0]["errors"],
           "a worker that joins later is set up by the plugin as well", st)
    finally:
        client.close()
        cluster.close()

    done()


if __name__ == "__main__":
    # The workers are started with multiprocessing's spawn, which imports this
    # file again in each: only the first process runs the test.
    main()
