#!/usr/bin/env python3
"""cupy-proof.py: a CuPy workload of mixed sizes on CuPy's own memory pool
and on cuemm (cuemm.cupy.use()), each in a fresh process, and a table.

The workload, the same in both runs (seeded): iterations of a random mix of
  fft       1-D and 2-D complex FFTs (cupy.fft) of sizes 2^10 .. 2^22
  linalg    matrix products, solves and QR of sizes 128 .. 4096
  reduce    sums, means, standard deviations and argmaxes over axes of
            arrays of 64 KiB .. 256 MiB
  elem      elementwise chains with temporaries of 1 KiB .. 64 MiB
each on CuPy's current stream; every 4th iteration runs on a second stream
(cupy.cuda.Stream) to exercise a stream other than the default one.

For each run: the median time per iteration after the warm-up, their total,
and the peak memory held from the driver: the high-water of CuPy's pool
(cupy.get_default_memory_pool().total_bytes(), sampled after every
operation, so a peak between two samples is missed: in CuPy's favour), or
cuemm's peak_held_bytes.  The cuemm run writes cuemm's event log
(CUEMM_LOG) to OUTDIR/cuemm-cupy.csv.

Usage: cupy-proof.py [--out DIR] [--quick] [--seed S] [--timeout SECONDS]
Writes DIR/cupy-proof.md and DIR/cupy-proof.json.
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

MODES = ("cupy", "cuemm")
GiB = float(1 << 30)


def workload(cp, rng, iters, warm, sample):
    s2 = cp.cuda.Stream(non_blocking=True)
    times = []
    kinds = ("fft", "linalg", "reduce", "elem")
    for i in range(iters):
        t0 = time.perf_counter()
        stream = s2 if i % 4 == 3 else cp.cuda.get_current_stream()
        with stream:
            for _ in range(6):
                k = rng.choice(kinds)
                if k == "fft":
                    if rng.random() < 0.5:
                        n = 1 << rng.randint(10, 22)
                        x = cp.random.random(n, dtype=cp.float32) + 1j * cp.random.random(n, dtype=cp.float32)
                        y = cp.fft.ifft(cp.fft.fft(x))
                    else:
                        n = 1 << rng.randint(6, 11)
                        x = cp.random.random((n, n), dtype=cp.float32).astype(cp.complex64)
                        y = cp.fft.ifft2(cp.fft.fft2(x))
                    float(cp.abs(y[:4]).sum())
                elif k == "linalg":
                    n = rng.choice((128, 256, 512, 1024, 2048, 4096))
                    a = cp.random.random((n, n), dtype=cp.float32) + n * cp.eye(n, dtype=cp.float32)
                    b = cp.random.random((n, 8), dtype=cp.float32)
                    op = rng.randint(0, 2)
                    if op == 0:
                        r = a @ a.T
                    elif op == 1:
                        r = cp.linalg.solve(a, b)
                    else:
                        r = cp.linalg.qr(a[:, : max(8, n // 4)])[0]
                    float(r[0, 0])
                elif k == "reduce":
                    n = (64 << 10) * (1 << rng.randint(0, 12)) // 4
                    x = cp.random.random(n, dtype=cp.float32).reshape(-1, 64)
                    out = [x.sum(axis=0), x.mean(axis=1), x.std(), cp.argmax(x, axis=1)]
                    float(out[2])
                else:
                    n = (1 << 8) * (1 << rng.randint(0, 16))
                    x = cp.random.random(n, dtype=cp.float32)
                    y = cp.sqrt(x * 2.0 + 1.0) - cp.exp(-x) * cp.sin(x)
                    float(y[:1].sum())
                sample()
        stream.synchronize()
        if i >= warm:
            times.append(time.perf_counter() - t0)
    return times


def child(args):
    if args.mode == "cuemm":
        import cuemm.cupy as cuemm_cupy
        cuemm_cupy.use()
    import cupy as cp
    cp.cuda.Device(0).use()
    rng = random.Random(args.seed)
    cp.random.seed(args.seed)
    pool = cp.get_default_memory_pool()
    high = [0]

    def sample():
        if args.mode == "cupy":
            high[0] = max(high[0], pool.total_bytes())

    iters, warm = (8, 2) if args.quick else (40, 8)
    t0 = time.time()
    times = workload(cp, rng, iters, warm, sample)
    cp.cuda.Device().synchronize()
    res = {"mode": args.mode, "seconds": time.time() - t0, "steps": len(times),
           "median_s": statistics.median(times), "total_s": sum(times), "cupy": cp.__version__,
           "device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode()}
    if args.mode == "cupy":
        res["peak_held"] = high[0]
        res["pool_used_now"] = pool.used_bytes()
    else:
        import cuemm.cupy as cuemm_cupy
        st = cuemm_cupy.stats(0)
        res["peak_held"] = st["peak_held_bytes"]
        res["peak_live"] = st["peak_bytes"]
        res["pool_used_now"] = pool.used_bytes()  # CuPy's own pool: unused under cuemm, so 0
        ad = cuemm_cupy.adapter_stats()
        res["adapter"] = {k: ad[k] for k in ("alloc_failures", "free_failures", "last_failure")}
        res["cuemm"] = {k: st[k] for k in ("allocs", "frees", "stream_steals", "stream_events", "log_rows")}
    print("RESULT " + json.dumps(res))
    return 0


def main():
    p = argparse.ArgumentParser(description="A CuPy workload on CuPy's pool and on cuemm.")
    p.add_argument("--out", default="cupy-proof-out")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=float, default=150)
    p.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    args.out = os.path.abspath(args.out)
    if args.mode:
        return child(args)
    results = {}
    status = 0
    for mode in MODES:
        env = dict(os.environ)
        env.pop("CUEMM_LOG", None)
        if mode == "cuemm":
            env["CUEMM_LOG"] = os.path.join(args.out, "cuemm-cupy.csv")
        log = os.path.join(args.out, "cupy-%s.log" % mode)
        cmd = [sys.executable, os.path.abspath(__file__), "--mode", mode, "--out", args.out,
               "--seed", str(args.seed)] + (["--quick"] if args.quick else [])
        t0 = time.time()
        try:
            with open(log, "w") as f:
                r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=f, universal_newlines=True,
                                   timeout=args.timeout)
            out, rc = r.stdout, r.returncode
        except subprocess.TimeoutExpired:
            out, rc = "", 124
        res = None
        for line in out.splitlines():
            if line.startswith("RESULT "):
                res = json.loads(line[7:])
        print("cupy-proof %-6s exit %d after %.1f s%s" % (mode, rc, time.time() - t0,
                                                          "" if res else " (no result; see %s)" % log))
        if res is None or rc != 0:
            status = 1
            if os.path.exists(log):
                sys.stdout.write("".join(open(log).readlines()[-15:]))
            continue
        results[mode] = res
        if mode == "cuemm" and (res["adapter"]["alloc_failures"] or res["adapter"]["free_failures"]):
            print("  cuemm adapter failures: %s" % res["adapter"])
            status = 1
    lines = ["| workload | CuPy pool median iteration | cuemm median iteration | time cuemm/CuPy (median) | "
             "time cuemm/CuPy (total) | CuPy pool peak held | cuemm peak held | memory cuemm/CuPy |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    c, e = results.get("cupy"), results.get("cuemm")
    if c and e:
        lines.append("| fft + linalg + reductions + elementwise | %.2f ms | %.2f ms | %.3f | %.3f | %.2f GiB | "
                     "%.2f GiB | %.3f |" % (c["median_s"] * 1e3, e["median_s"] * 1e3, e["median_s"] / c["median_s"],
                                            e["total_s"] / c["total_s"], c["peak_held"] / GiB, e["peak_held"] / GiB,
                                            e["peak_held"] / c["peak_held"] if c["peak_held"] else float("nan")))
    else:
        lines.append("| fft + linalg + reductions + elementwise | %s | %s | failed | | | | |"
                     % ("ok" if c else "failed", "ok" if e else "failed"))
    any_res = c or e
    head = "CuPy %s on %s, %s run; medians of the iterations after the warm-up, fresh process each" % (
        any_res["cupy"] if any_res else "?", any_res["device"] if any_res else "?", "quick" if args.quick else "full")
    report = head + "\n\n" + "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "cupy-proof.md"), "w") as f:
        f.write(report)
    with open(os.path.join(args.out, "cupy-proof.json"), "w") as f:
        json.dump(list(results.values()), f, indent=1)
    print()
    print(report)
    return status


if __name__ == "__main__":
    sys.exit(main())
