#!/usr/bin/env python3
"""mempool-proof.py: PyTorch's MemPool mode (cuemm.torch.mempool, pool),
cuemm.triton and cuemm.cuda_core on a real GPU, and the cost per tensor of
the three ways to run PyTorch (its own allocator, per-tensor cuemm, MemPool
cuemm).

Checks, each printing PASS or FAIL (SKIP where a framework is missing):
  pool      tensors made inside `with cuemm.torch.pool("kv")` lie in
            segments of tag kv's manager; tensors made outside do not
  torch     torch.cuda.memory_stats(), memory_summary() and
            torch.cuda.memory._snapshot() work, and the snapshot's segments
            of kv's pool are what cuemm's statistics of tag kv count
  suspend   suspend("kv") (keep=False) gives the memory back to the driver
            (cuMemGetInfo's free bytes grow) and resume("kv") maps it
            again, the tensors usable; a weights tag suspended with
            keep=True comes back bit-identical; tensors outside every pool
            are untouched
  ipc       a segment, and a tensor inside it, export with cuemm_ipc_export
  graph     a CUDA graph captured into a MemPool (torch.cuda.graph(g,
            pool=p.id)) is suspended with keep=True, resumed, replayed, and
            its output is bit-identical to the replay before
  empty     what torch.cuda.empty_cache() gives back while the MemPool
            lives (INFO); once released (release_mempool) and its tensors
            dropped, its segments go back to cuemm, which trims them
  triton    a Triton kernel that makes tensor descriptors on the device
            (tl.make_tensor_descriptor: global scratch on Hopper) runs with
            cuemm.triton.use() and its scratch comes from cuemm; whether
            torch.compile leaves cuemm's Triton allocator current is
            reported (INFO)
  cudacore  cuemm.cuda_core.MemoryResource allocates, fills and frees a
            buffer on a cuda.core stream (SKIP without cuda.core)
Then the benchmark: torch.empty + drop of sizes 512 B to 64 MiB,
--iters tensors per size, on one thread and on four, for PyTorch's
allocator, per-tensor cuemm (cuemm.torch.use(), which must come before the
first CUDA allocation, so each mode runs in a process of its own) and
MemPool cuemm (every thread inside cuemm.torch.pool()): a table of the
nanoseconds per tensor.

Usage: mempool-proof.py [--out DIR] [--iters N] [--no-bench]
It needs the package cuemm importable and CUEMM_LIBRARY naming libcuemm, as
scripts/gpu-mempool.sh sets them.  Exit status 0 when every check passed
(SKIPs allowed) and every benchmark process finished.
"""
import argparse
import contextlib
import ctypes
import json
import os
import subprocess
import sys
import threading
import time

SIZES = (512, 8 << 10, 128 << 10, 2 << 20, 16 << 20, 64 << 20)
MODES = ("native", "tensor", "mempool")
MIB = 1 << 20

results = []


def report(status, name, detail=""):
    results.append((status, name))
    print("%-4s %s%s" % (status, name, (": " + str(detail)) if detail else ""), flush=True)


def check(cond, name, detail=""):
    report("PASS" if cond else "FAIL", name, detail)
    return cond


@contextlib.contextmanager
def step(name):
    """A group of checks: an exception in it is one FAIL, not the end."""
    try:
        yield
    except Exception as e:  # noqa: BLE001 - reported, the next group runs
        import traceback
        traceback.print_exc()
        report("FAIL", name, "%s: %s" % (type(e).__name__, e))


def fmt(n):
    for unit, v in (("MiB", MIB), ("KiB", 1 << 10)):
        if n >= v:
            return "%d %s" % (n // v, unit)
    return "%d B" % n


# ---- cuemm's side, through ctypes ---------------------------------------------------

def _typed(name, res, args):
    import cuemm
    fn = getattr(cuemm.load(), name)
    fn.restype, fn.argtypes = res, args
    return fn


def tag_holds(tag, ptr):
    """(base, size) of the live block of tag's manager on device 0 that
    holds ptr, or None."""
    from cuemm import _tags
    fn = _typed("cuemm_mem_get_address_range", ctypes.c_int,
                (ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t),
                 ctypes.c_uint64))
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    if fn(_tags.tag_manager(tag, 0), ctypes.byref(base), ctypes.byref(size), ptr) != 0:
        return None
    return base.value, size.value


def ipc_export(tag, ptr, size):
    """cuemm_ipc_export of tag's manager: (rc, kind, offset, size)."""
    from cuemm import _tags
    fn = _typed("cuemm_ipc_export", ctypes.c_int, (ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p))
    h = ctypes.create_string_buffer(128)
    rc = fn(_tags.tag_manager(tag, 0), ptr, size, h)
    raw = h.raw
    return (rc, int.from_bytes(raw[6:8], "little"), int.from_bytes(raw[16:24], "little"),
            int.from_bytes(raw[24:32], "little"))


# ---- the checks ------------------------------------------------------------------------

def checks():
    import torch
    import cuemm
    import cuemm.torch as ct

    dev = torch.device("cuda", 0)
    print("torch %s, CUDA %s, %s" % (torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0)))
    print("mode rule: tensor-free program -> %s; reduce-overhead -> %s; suspend everything -> %s"
          % (ct.recommended_mode(), ct.recommended_mode(reduce_overhead=True),
             ct.recommended_mode(suspend_everything=True)))
    outside = torch.full((4 * MIB,), 7, dtype=torch.uint8, device=dev)
    kv_pool = ct.mempool("kv")
    w_pool = ct.mempool("weights")
    kv, w = None, None

    with step("pool"):
        with ct.pool("kv") as p:
            kv = torch.ones(32 * MIB // 4, dtype=torch.float32, device=dev)
            small = torch.arange(1000, dtype=torch.int64, device=dev)
        check(p is kv_pool and ct.mempool("kv") is kv_pool, "pool('kv') yields mempool('kv'), one per tag")
        check(tag_holds("kv", kv.data_ptr()) is not None and tag_holds("kv", small.data_ptr()) is not None,
              "tensors made inside pool('kv') lie in segments of tag kv's manager")
        check(tag_holds("kv", outside.data_ptr()) is None and tag_holds(None, outside.data_ptr()) is None,
              "a tensor made outside every pool is PyTorch's own")
        with ct.pool("weights"):
            w = torch.randn(64 * MIB // 4, dtype=torch.float32, device=dev)
        check(tag_holds("weights", w.data_ptr()) is not None, "pool('weights'): tag weights' segments")

    with step("torch"):
        st = torch.cuda.memory_stats()
        check(st.get("allocated_bytes.all.current", 0) >= kv.numel() * 4 + w.numel() * 4,
              "torch.cuda.memory_stats() works and counts the pools' tensors",
              "allocated %d" % st.get("allocated_bytes.all.current", 0))
        summary = torch.cuda.memory_summary()
        check("Allocated memory" in summary, "torch.cuda.memory_summary() works")
        snap = torch.cuda.memory._snapshot()
        segs = [s for s in snap["segments"] if tuple(s.get("segment_pool_id", (0, 0))) == tuple(kv_pool.id)]
        total = sum(s["total_size"] for s in segs)
        live = ct.tag_stats("kv")["live_bytes"]
        check(segs and total == live, "torch.cuda.memory._snapshot(): kv's pool has %d segments, %s, what cuemm's "
              "tag kv holds live (%s)" % (len(segs), fmt(total), fmt(live)))
        check(all(tag_holds("kv", s["address"]) == (s["address"], s["total_size"]) for s in segs),
              "each of those segments is one block of kv's manager")

    with step("ipc"):
        seg = tag_holds("kv", kv.data_ptr())
        rc, kind, off, size = ipc_export("kv", seg[0], 0)
        check(rc == 0 and kind == 2 and size == seg[1], "cuemm_ipc_export of a kv segment: a pool handle (%s)"
              % fmt(size), "rc %d kind %d" % (rc, kind))
        rc, kind, off2, size = ipc_export("kv", kv.data_ptr(), kv.numel() * 4)
        check(rc == 0 and kind == 2 and size == kv.numel() * 4 and off2 == off + kv.data_ptr() - seg[0],
              "and of a tensor inside it, at its offset", "rc %d" % rc)

    with step("suspend"):
        host_w = w.cpu()
        torch.cuda.synchronize()
        free0 = torch.cuda.mem_get_info()[0]
        ct.suspend("kv")
        ct.suspend("weights", keep=True)
        free1 = torch.cuda.mem_get_info()[0]
        ps_kv, ps_w = ct.tag_pool_stats("kv"), ct.tag_pool_stats("weights")
        check(ps_kv["suspended"] and ps_kv["mapped_bytes"] == 0 and ps_w["mapped_bytes"] == 0
              and ps_w["kept_bytes"] >= w.numel() * 4,
              "suspend('kv') and suspend('weights', keep=True): nothing of theirs mapped, weights kept (%s)"
              % fmt(ps_w["kept_bytes"]))
        check(free1 - free0 >= (kv.numel() + w.numel()) * 4,
              "the driver's free memory grew by %s" % fmt(free1 - free0))
        check(int(outside.sum().item()) == 7 * 4 * MIB, "a tensor outside the pools works meanwhile")
        ct.resume("weights")
        ct.resume("kv")
        check(torch.equal(w.cpu(), host_w), "resume('weights'): 64 MiB bit-identical at the same address")
        kv.fill_(3.0)
        check(float(kv.sum().item()) == 3.0 * kv.numel(), "resume('kv'): its tensor usable again (contents "
              "discarded, refilled)")

    with step("graph"):
        with ct.pool("graph") as gp:
            x = torch.randn(4 * MIB // 4, device=dev)
        fn = lambda t: (t * 2.0 + 1.0).sin() * t  # noqa: E731
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                fn(x)
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, pool=gp.id):
            y = fn(x)
        g.replay()
        torch.cuda.synchronize()
        ref = y.clone()
        check(tag_holds("graph", y.data_ptr()) is not None, "the graph's output lies in tag graph's segments")
        ct.suspend("graph", keep=True)
        ct.resume("graph")
        g.replay()
        torch.cuda.synchronize()
        check(torch.equal(y, ref), "graph captured into the pool: suspend (keep) + resume + replay, "
              "bit-identical output")
        del g, y, x

    with step("empty"):
        before = ct.tag_stats("kv")["live_bytes"]
        del kv, small
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        mid = ct.tag_stats("kv")["live_bytes"]
        print("INFO torch.cuda.empty_cache() with kv's MemPool alive: kv holds %s live in cuemm (%s before)"
              % (fmt(mid), fmt(before)))
        ct.release_mempool("kv")
        del p, kv_pool
        import gc
        gc.collect()
        ct.empty_cache()
        after = ct.tag_stats("kv")["live_bytes"]
        check(after == 0 and ct.tag_pool_stats("kv")["mapped_bytes"] == 0,
              "release_mempool('kv') + empty_cache(): kv's segments back to cuemm and trimmed (%s -> %s live)"
              % (fmt(before), fmt(after)))
    return w  # kept alive until the end


def triton_check():
    try:
        import triton
        import triton.language as tl
    except ImportError as e:
        report("SKIP", "triton", "not importable: %s" % e)
        return
    import torch
    import cuemm
    import cuemm.triton as ctr
    with step("triton"):
        if not hasattr(tl, "make_tensor_descriptor"):
            report("SKIP", "triton", "this Triton (%s) has no tl.make_tensor_descriptor" % triton.__version__)
            return

        @triton.jit
        def twice(src, dst, M, N, BM: tl.constexpr, BN: tl.constexpr):
            a = tl.make_tensor_descriptor(src, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
            b = tl.make_tensor_descriptor(dst, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
            m, n = tl.program_id(0) * BM, tl.program_id(1) * BN
            b.store([m, n], a.load([m, n]) * 2.0)

        ctr.use()
        check(ctr.is_used() and ctr.use() is ctr.allocator, "cuemm.triton.use(): current, and idempotent")
        src = torch.randn(256, 256, device="cuda")
        dst = torch.empty_like(src)
        allocs0 = cuemm.stats(0)["allocs"]
        twice[(4, 4)](src, dst, 256, 256, 64, 64)
        torch.cuda.synchronize()
        allocs = cuemm.stats(0)["allocs"] - allocs0
        check(torch.equal(dst, src * 2.0), "a kernel with on-device tensor descriptors runs correctly")
        check(allocs >= 1, "its global scratch came from cuemm (%d allocation%s)" % (allocs, "" if allocs == 1 else "s"))
        check(ctr.restore() and not ctr.is_used(), "cuemm.triton.restore(): the allocator before use() is back")
        ctr.use()
        try:
            f = torch.compile(lambda t: t.sin() + 1.0)
            f(src)
            torch.cuda.synchronize()
            print("INFO after torch.compile (default mode), cuemm's Triton allocator is %s"
                  % ("still current" if ctr.is_used() else "replaced by another (inductor's)"))
        except Exception as e:  # noqa: BLE001 - informative only
            print("INFO torch.compile failed here: %s: %s" % (type(e).__name__, e))


def cuda_core_check():
    import cuemm
    import cuemm.cuda_core as ccc
    if not ccc.available():
        report("SKIP", "cudacore", "cuda.core is not importable (pip install cuda-core[cu12])")
        return
    with step("cudacore"):
        from cuda.core import Device
        import cuemm.torch as ct
        d = Device(0)
        d.set_current()
        s = d.create_stream()
        mr = ccc.MemoryResource(0, tag="cc")
        buf = mr.allocate(MIB, stream=s)
        buf.fill(0x5A, stream=s)
        s.sync()
        host = ctypes.create_string_buffer(16)
        libcuda = ctypes.CDLL("libcuda.so.1")
        libcuda.cuMemcpyDtoH_v2.argtypes = (ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t)
        rc = libcuda.cuMemcpyDtoH_v2(host, int(buf.handle), 16)
        check(rc == 0 and host.raw == b"\x5a" * 16 and ct.tag_stats("cc")["live_bytes"] == MIB,
              "cuda.core: MemoryResource(0, tag='cc').allocate on a stream, filled, read back: tag cc's block")
        buf.close()
        s.sync()
        check(ct.tag_stats("cc")["live_bytes"] == 0, "Buffer.close(): freed on its stream")


# ---- the benchmark ---------------------------------------------------------------------

def bench(mode, iters):
    """In a process of its own: ns per torch.empty + drop, per size and
    thread count; prints one JSON line."""
    import torch
    import cuemm.torch as ct
    if mode == "tensor":
        ct.use()
    torch.empty(1, device="cuda")
    scope = (lambda: ct.pool("bench")) if mode == "mempool" else contextlib.nullcontext
    out = {}
    for nthreads in (1, 4):
        for size in SIZES:
            per = max(1, iters // nthreads)
            go = threading.Barrier(nthreads + 1)

            def work():
                torch.cuda.set_device(0)
                with scope():
                    for _ in range(200):  # warm: the pool's segments, the caches
                        torch.empty(size, dtype=torch.uint8, device="cuda")
                    go.wait()
                    for _ in range(per):
                        torch.empty(size, dtype=torch.uint8, device="cuda")
                    go.wait()

            ts = [threading.Thread(target=work) for _ in range(nthreads)]
            for t in ts:
                t.start()
            go.wait()
            t0 = time.perf_counter()
            go.wait()
            dt = time.perf_counter() - t0
            for t in ts:
                t.join()
            torch.cuda.synchronize()
            out["%d/%d" % (nthreads, size)] = dt * 1e9 / (per * nthreads)
    print("BENCH " + json.dumps({"mode": mode, "ns": out}), flush=True)


def run_bench(iters, out_dir):
    table = {}
    ok_all = True
    for mode in MODES:
        env = dict(os.environ)
        env.pop("CUEMM_POOL_IPC", None)
        t0 = time.time()
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--bench", mode, "--iters", str(iters)],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                           timeout=150)
        line = [x for x in r.stdout.splitlines() if x.startswith("BENCH ")]
        if r.returncode != 0 or not line:
            ok_all = False
            report("FAIL", "bench %s" % mode, "exit %d:\n%s" % (r.returncode, r.stdout[-3000:]))
            continue
        table[mode] = json.loads(line[-1][6:])["ns"]
        print("bench %s: %.1f s" % (mode, time.time() - t0), flush=True)
    lines = ["", "ns per tensor (torch.empty + drop, %d per size; 4 threads: %d each)" % (iters, iters // 4),
             "| size | " + " | ".join("%s %dT" % (m, n) for n in (1, 4) for m in MODES) + " |",
             "|---:|" + "---:|" * (2 * len(MODES))]
    for size in SIZES:
        cells = []
        for n in (1, 4):
            for m in MODES:
                v = table.get(m, {}).get("%d/%d" % (n, size))
                cells.append("%.0f" % v if v is not None else "-")
        lines.append("| %s | %s |" % (fmt(size), " | ".join(cells)))
    text = "\n".join(lines)
    print(text, flush=True)
    if out_dir:
        with open(os.path.join(out_dir, "mempool-bench.md"), "w") as f:
            f.write(text + "\n")
        with open(os.path.join(out_dir, "mempool-bench.json"), "w") as f:
            json.dump(table, f, indent=1)
    return ok_all


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="")
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--no-bench", action="store_true")
    ap.add_argument("--bench", choices=MODES, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.bench:
        bench(a.bench, a.iters)
        return 0
    try:
        import torch
    except ImportError as e:
        print("FAIL torch is not importable: %s" % e)
        return 1
    if not torch.cuda.is_available():
        print("FAIL no CUDA device for torch")
        return 1
    os.environ["CUEMM_POOL_IPC"] = "1"  # before the first manager: segments can be exported
    if a.out:
        os.makedirs(a.out, exist_ok=True)
    t0 = time.time()
    keep = checks()
    triton_check()
    cuda_core_check()
    del keep
    print("checks: %.1f s" % (time.time() - t0), flush=True)
    bench_ok = True if a.no_bench else run_bench(a.iters, a.out)
    failed = [n for s, n in results if s == "FAIL"]
    print("\n%d PASS, %d FAIL, %d SKIP%s" % (sum(s == "PASS" for s, _ in results), len(failed),
                                            sum(s == "SKIP" for s, _ in results),
                                            ("; failed: " + ", ".join(failed)) if failed else ""))
    return 0 if not failed and bench_ok else 1


if __name__ == "__main__":
    sys.exit(main())
