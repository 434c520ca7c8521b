#!/usr/bin/env python3
"""dask-proof.py: a Dask cluster of two GPU workers on CuPy's memory pool and
on cuemm (cuemm.dask.CuemmPlugin), for scripts/gpu-multi.sh.

    scripts/dask-proof.py OUTDIR [--n N] [--repeats R] [--launches L]
                         [--variant NAME:SETTING=VALUE[,SETTING=VALUE]...]

For each allocator in turn (L times, the order reversed every other time,
so that neither always meets the machine as the other left it), a fresh dask_cuda.LocalCUDACluster of two
workers, one per GPU (CUDA_VISIBLE_DEVICES 0 and 1; a distributed
SpecCluster of two Nannies, each given one GPU, where dask_cuda is not
importable), runs the same dask.array workload on CuPy chunks of mixed sizes
R times (the first a warm-up): a random N x N float64 matrix in row and
column chunks of 1000 to 4000, elementwise work, reductions (sum, mean, std
along each axis), a matrix product x @ x.T reduced by rows, and a rechunk to
square chunks of another size, which moves most of the data between the
workers, reduced again.  Results are compared between the allocators (they
must be equal to within 1e-9 of each result's largest magnitude: the
order in which dask sums partial results may differ from run to run).
The table gives the wall time of each repeat after the warm-up (median);
the device memory each worker's workload used at its highest (cuMemGetInfo
sampled every 2 ms in the worker, less what was in use before: every byte
of the process, the same way for both allocators; this is the memory figure
the comparison is judged on); and the allocator's own figures: CuPy's
pool's total_bytes() at its highest (read after every allocation) and
cuemm's peak_held_bytes (cuemm.dask.gather_stats).  The allocators' own
figures do not cover the same bytes: Dask's transfers receive data into
buffers allocated through Numba, which cuemm's plugin serves too and CuPy's
pool never sees.
The cuemm run also writes each worker's statistics table and event logs
(cuemm.dask.gather_logs) to OUTDIR.  A --variant is one more cuemm
allocator in the turns, its workers given the CUEMM_* settings named
(without the prefix: pool_release_threshold=64GiB), to see what a setting
does to the same workload.  Each allocator's figures are the medians over
its launches.  Writes OUTDIR/dask-proof.md and .json;
exit status 1 when the results differ or a run failed.

NVLink multicast stays off: NCCL_NVLS_ENABLE=0 and
TORCH_SYMM_MEM_DISABLE_MULTICAST=1 are set for this process and its workers.
"""
import argparse
import json
import os
import statistics
import sys
import time

os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
GiB = float(1 << 30)

# ---- in the workers ---------------------------------------------------------------

def _track():
    """The worker's record of the highest figures, kept on the cupy module:
    functions of this script reach the workers pickled by value, globals
    and all, so a module-level dict here would be a fresh copy in each call
    (install_tracking's and tracked_peak's).  [allocator's held, allocator's
    live, device memory used, device memory used when tracking began]."""
    import cupy
    t = getattr(cupy, "_cuemm_dask_proof_peak", None)
    if t is None:
        t = cupy._cuemm_dask_proof_peak = [0, 0, 0, 0]
    return t


def _sample_device(track, device, stop):
    """Keeps the highest device memory in use (cuMemGetInfo's total - free),
    every 2 ms: all the worker's GPU memory, whoever allocated it.  Dask's
    transfers receive data into buffers it allocates through Numba, which
    CuPy's pool never sees (and cuemm's Numba plugin does), so only this
    figure compares the two allocators on the same bytes."""
    import cupy
    cupy.cuda.Device(device).use()
    while not stop.is_set():
        free, total = cupy.cuda.runtime.memGetInfo()
        if total - free > track[2]:
            track[2] = total - free
        stop.wait(0.002)


def install_tracking(mode):
    """Puts a thin wrapper around the worker's CuPy allocator that keeps the
    highest figures of what the allocator holds and of what the program
    has live, read after each allocation (CuPy's pool has no peak figure of
    its own; cuemm's come from its statistics).  The same wrapper runs in
    both modes, so that both pay for it.  The live peak tells the
    allocator's share of a difference from the schedule's: Dask runs the
    tasks in an order of its own choosing, so the bytes live at the peak
    differ from run to run whatever the allocator.  A thread samples the
    device's memory in use, the same way in both modes."""
    import threading
    import cupy
    if mode == "cupy":
        pool = cupy.get_default_memory_pool()
        inner, held, live = pool.malloc, pool.total_bytes, pool.used_bytes
    else:
        import cuemm.cupy
        inner, held, live = cuemm.cupy.malloc, (lambda: 0), (lambda: 0)
    track = _track()
    device = cupy.cuda.runtime.getDevice()
    free, total = cupy.cuda.runtime.memGetInfo()
    track[0] = track[1] = 0
    track[2] = track[3] = total - free
    stop = threading.Event()
    threading.Thread(target=_sample_device, args=(track, device, stop), daemon=True,
                     name="dask-proof-sampler").start()
    cupy._cuemm_dask_proof_stop = stop

    def malloc(size):
        p = inner(size)
        h, v = held(), live()
        if h > track[0]:
            track[0] = h
        if v > track[1]:
            track[1] = v
        return p

    cupy.cuda.set_allocator(malloc)
    return cupy.cuda.runtime.getDeviceProperties(device)["name"].decode()


def tracked_peak():
    return _track()[0]


def tracked_live_peak():
    return _track()[1]


def tracked_device_peak():
    """The device memory the workload added at its highest: the sampled
    peak over what was in use when tracking began (the CUDA context)."""
    import cupy
    cupy._cuemm_dask_proof_stop.set()
    t = _track()
    return t[2] - t[3]


def workload(n, seed):
    """The dask.array graph: a dict of small results (dask arrays)."""
    import cupy
    import dask.array as da
    sizes = [1000, 3000, 2000, 4000]
    chunks, left, i = [], n, 0
    while left > 0:
        c = min(sizes[i % len(sizes)], left)
        chunks.append(c)
        left -= c
        i += 1
    rs = da.random.RandomState(seed, RandomState=cupy.random.RandomState)
    x = rs.random_sample((n, n), chunks=(tuple(chunks), tuple(reversed(chunks))))
    y = da.sin(x) * 2.0 + x ** 2 - 1.0
    out = {
        "sum0": y.sum(axis=0),
        "mean1": y.mean(axis=1),
        "std0": x.std(axis=0),
        "total": y.sum(),
        "gram_rows": (x @ x.T).sum(axis=1),
        "rechunked": (y.rechunk((2500, 2500)) * x.rechunk((2500, 2500))).sum(axis=1),
    }
    # Brought back as NumPy arrays, converted in the workers: the client
    # itself makes no CUDA allocation.
    import numpy as np
    return {k: v.map_blocks(cupy.asnumpy, dtype=v.dtype, meta=np.empty((0,) * v.ndim, dtype=v.dtype))
            for k, v in out.items()}


# ---- the driver ---------------------------------------------------------------------

def make_cluster():
    try:
        from dask_cuda import LocalCUDACluster
        return LocalCUDACluster(n_workers=2, CUDA_VISIBLE_DEVICES="0,1", threads_per_worker=1,
                                dashboard_address=None, silence_logs=40), "dask_cuda.LocalCUDACluster"
    except ImportError as e:
        why = str(e)
    from distributed import Nanny, Scheduler, SpecCluster
    workers = {i: {"cls": Nanny, "options": {"nthreads": 1, "env": {"CUDA_VISIBLE_DEVICES": "%d,%d" % (i, 1 - i),
                                                                    "NCCL_NVLS_ENABLE": "0",
                                                                    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}}}
               for i in range(2)}
    return (SpecCluster(workers=workers, scheduler={"cls": Scheduler, "options": {"dashboard_address": None}},
                        silence_logs=40),
            "distributed.SpecCluster of 2 Nannies (dask_cuda not importable: %s)" % why)


def run_mode(mode, a, out, launch):
    """One launch of one allocator: a fresh cluster, the workload a.repeats
    times; returns (figures, the last result)."""
    import dask
    import numpy as np
    from distributed import Client
    import cuemm.dask as cd
    t0 = time.time()
    cluster, kind = make_cluster()
    client = Client(cluster)
    cuemm_kind = mode["kind"] == "cuemm"
    res = {"mode": mode["label"], "launch": launch, "cluster": kind}
    try:
        if cuemm_kind:
            tag = "%s-%d" % (mode["label"].replace(":", "-"), launch)
            client.register_plugin(cd.CuemmPlugin(cupy=True, env=mode["env"],
                                                  log=os.path.join(out, "cuemm-dask-%s-%%p.csv" % tag)))
            res["status"] = cd.worker_status(client)
        res["devices"] = client.run(install_tracking, mode["kind"])
        res["startup_s"] = time.time() - t0
        times, result = [], None
        for r in range(a.repeats):
            graph = workload(a.n, a.seed)
            t = time.perf_counter()
            got = dask.compute(graph)[0]
            times.append(time.perf_counter() - t)
            result = {k: np.asarray(v) for k, v in got.items()}
        res["times_s"] = times
        res["median_s"] = statistics.median(times[1:] if len(times) > 1 else times)
        if cuemm_kind:
            rows = cd.gather_stats(client)
            res["peaks"] = {r["worker"]: r.get("peak_held_bytes") for r in rows}
            res["live_peaks"] = {r["worker"]: r.get("peak_bytes") for r in rows}
            res["stats_rows"] = rows
            res["table"] = cd.format_stats(rows)
            with open(os.path.join(out, "dask-stats-%s.txt" % tag), "w") as f:
                f.write(res["table"] + "\n")
            res["logs"] = cd.gather_logs(client, os.path.join(out, "dask-logs-%s" % tag))
            res["adapter_failures"] = client.run(lambda: __import__("cuemm").adapter_stats()["alloc_failures"])
        else:
            res["peaks"] = client.run(tracked_peak)
            res["live_peaks"] = client.run(tracked_live_peak)
        res["device_peaks"] = client.run(tracked_device_peak)
        return res, result
    finally:
        client.close()
        cluster.close()


def parse_variant(text):
    """NAME:SETTING=VALUE[,SETTING=VALUE]... as a cuemm allocator of the turns."""
    name, sep, rest = text.partition(":")
    if not sep or not name or not rest:
        raise SystemExit("dask-proof: --variant %r: write NAME:SETTING=VALUE[,SETTING=VALUE]..." % text)
    env = {}
    for item in rest.split(","):
        k, eq, v = item.partition("=")
        if not eq or not k:
            raise SystemExit("dask-proof: --variant %r: %r is not SETTING=VALUE" % (text, item))
        env["CUEMM_" + k.strip().upper()] = v.strip()
    return {"label": "cuemm:" + name, "kind": "cuemm", "env": env}


def worker_figures(launches, key):
    """{worker rank (1, 2): the median over launches} of a per-worker figure;
    workers are ranked by address within each launch."""
    per = {}
    for r in launches:
        for i, w in enumerate(sorted(r[key])):
            per.setdefault(i + 1, []).append(r[key][w] or 0)
    return {i: statistics.median(v) for i, v in per.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out")
    p.add_argument("--n", type=int, default=20000)
    p.add_argument("--repeats", type=int, default=6)
    p.add_argument("--launches", type=int, default=1)
    p.add_argument("--variant", action="append", default=[])
    p.add_argument("--seed", type=int, default=42)
    a = p.parse_args()
    if a.repeats < 1 or a.launches < 1:
        raise SystemExit("dask-proof: --repeats and --launches must be at least 1")
    modes = [{"label": "cupy", "kind": "cupy", "env": {}}, {"label": "cuemm", "kind": "cuemm", "env": {}}]
    modes += [parse_variant(v) for v in a.variant]
    os.makedirs(a.out, exist_ok=True)
    out = os.path.abspath(a.out)
    try:
        import cupy  # noqa: F401
        import dask.array  # noqa: F401
        import distributed  # noqa: F401
        import cuemm.dask  # noqa: F401
    except ImportError as e:
        print("dask-proof: skipped: %s is not importable" % e)
        return 2
    import numpy as np
    runs, reference, failed = {m["label"]: [] for m in modes}, None, []
    maxrel = 0.0
    for launch in range(a.launches):
        for mode in (modes if launch % 2 == 0 else list(reversed(modes))):
            try:
                res, result = run_mode(mode, a, out, launch)
            except Exception as e:
                import traceback
                traceback.print_exc()
                failed.append("%s launch %d failed: %s" % (mode["label"], launch, e))
                continue
            runs[mode["label"]].append(res)
            print("dask-proof: %s, launch %d: median %.3f s (%s)" % (
                mode["label"], launch, res["median_s"], ", ".join("%.3f" % t for t in res["times_s"])), flush=True)
            if reference is None:
                reference = result
                continue
            for k in reference:
                x, y = reference[k], result[k]
                # Relative to the result's largest magnitude: elements near zero
                # (sums of signed terms) would make an element-wise ratio meaningless.
                den = max(float(np.max(np.abs(x))), 1e-300)
                maxrel = max(maxrel, float(np.max(np.abs(x - y))) / den)
    if maxrel > 1e-9:
        failed.append("results differ (largest relative difference %.3g)" % maxrel)
    lines = ["### Dask: two GPU workers, dask.array on CuPy chunks of mixed sizes (N = %d, %d repeats, "
             "the first a warm-up; %d launch%s of each allocator, taking turns)" % (
                 a.n, a.repeats, a.launches, "" if a.launches == 1 else "es"), ""]
    done = [m for m in modes if runs[m["label"]]]
    if done:
        any_run = runs[done[0]["label"]][0]
        lines.append("cluster: %s; devices: %s" % (any_run["cluster"], ", ".join(sorted(set(
            any_run.get("devices", {}).values())))))
        lines.append("")
        lines.append("| allocator | settings | median wall time | each launch's median | device memory, worker 1 "
                     "| device memory, worker 2 | peak held, worker 1 | peak held, worker 2 | peak live, worker 1 "
                     "| peak live, worker 2 |")
        lines.append("|---|---|---|---|---|---|---|---|---|---|")
    summary = {}
    for m in modes:
        rs = runs[m["label"]]
        if not rs:
            lines.append("| %s | | failed | | | | | | | |" % m["label"])
            continue
        med = statistics.median(r["median_s"] for r in rs)
        pk, lv = worker_figures(rs, "peaks"), worker_figures(rs, "live_peaks")
        dv = worker_figures(rs, "device_peaks")
        summary[m["label"]] = (med, max(dv.values()), pk, lv)
        lines.append("| %s | %s | %.3f s | %s | %.2f GiB | %.2f GiB | %.2f GiB | %.2f GiB | %.2f GiB | %.2f GiB |" % (
            "CuPy's pool" if m["kind"] == "cupy" else m["label"],
            ", ".join("%s=%s" % kv for kv in sorted(m["env"].items())) or "default",
            med, ", ".join("%.3f" % r["median_s"] for r in rs), dv.get(1, 0) / GiB, dv.get(2, 0) / GiB,
            pk.get(1, 0) / GiB, pk.get(2, 0) / GiB, lv.get(1, 0) / GiB, lv.get(2, 0) / GiB))
    lines.append("")
    if "cupy" in summary:
        tc, mc = summary["cupy"][0], summary["cupy"][1]
        for m in modes[1:]:
            if m["label"] not in summary:
                continue
            tu, mu, pk, lv = summary[m["label"]]
            lines.append("- %s: time / CuPy pool %.3f; device memory (the larger worker) / CuPy pool %.3f "
                         "(target: at most 1): %s" % (m["label"], tu / tc if tc else float("nan"),
                                                      mu / mc if mc else float("nan"),
                                                      "met" if tu <= tc and mu <= mc else "NOT met"))
        # Each worker's peak held over its own peak live: the allocator's
        # overhead, apart from how much the schedule kept live.  CuPy's
        # figures leave out the buffers Dask's transfers take through Numba.
        for m in modes:
            if m["label"] in summary:
                pk, lv = summary[m["label"]][2], summary[m["label"]][3]
                lines.append("- %s, peak held / peak live per worker: %s" % (m["label"], ", ".join(
                    "%.3f" % (pk[w] / lv[w]) if lv.get(w) else "n/a" for w in sorted(pk))))
    if len(done) > 1:
        lines.append("- results: largest relative difference %.3g (%s)" % (
            maxrel, "equal" if maxrel <= 1e-9 else "DIFFERENT"))
    for m in modes[1:]:
        for r in runs[m["label"]]:
            fails = sum(r.get("adapter_failures", {}).values())
            if fails:
                failed.append("%s launch %d: %d cuemm adapter failures" % (m["label"], r["launch"], fails))
        if runs[m["label"]]:
            last = runs[m["label"]][-1]
            lines.append("- %s: adapter failures counted in the workers: %d; plugin: %s" % (
                m["label"], sum(sum(r.get("adapter_failures", {}).values()) for r in runs[m["label"]]),
                "; ".join("%s %s" % (w, s.get("frameworks")) for w, s in sorted(last["status"].items()))))
            lines.append("")
            lines.append("cuemm.dask.gather_stats, %s, the last launch:" % m["label"])
            lines.append("```")
            lines.append(last["table"])
            lines.append("```")
    if failed:
        lines.append("FAILED: " + "; ".join(failed))
    else:
        lines.append("dask proof: all checks passed")
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(out, "dask-proof.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(out, "dask-proof.json"), "w") as f:
        json.dump({k: [{kk: vv for kk, vv in r.items() if kk != "stats_rows"} for r in v] for k, v in runs.items()},
                  f, indent=1, default=str)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
