#!/usr/bin/env python3
"""torch-proof.py: real PyTorch workloads on PyTorch's own allocator and on
cuemm (cuemm.torch.use()), each run in a fresh process, one after the other
on the same GPU, and a table of what they took.

Workloads (the model code of scripts/torch-trace.py):
  gpt2      a GPT-2-small-sized decoder (12 layers, d 768, 12 heads, vocab
            50257) trained with AdamW under bf16 autocast, batch 8 at random
            sequence lengths 64..1024 (the same lengths in both runs)
  resnet50  ResNet-50 (torchvision's, else one built here) trained with SGD
            under bf16 autocast at random batch sizes 16..64 of 224x224
  serve     an inference server: a 12-layer decoder in eval mode serving
            requests of random batch 1..8 and length 16..512 on two streams
            in turn; each request's logits go to the other stream for the
            top-5 (wait_stream + record_stream)
  graph     a check, not timed: a small MLP captured in a CUDA graph
            (torch.cuda.graph), replayed with new inputs and compared with
            the eager result, while other tensors come and go

For each run: the median step time after the warm-up steps (a step is one
training step, or one request), the total of those steps, and the peak
memory held from the driver: torch.cuda.max_memory_reserved() for PyTorch's
allocator, cuemm's peak_held_bytes for cuemm (torch.cuda.memory_stats does
not work under a pluggable allocator).  The cuemm runs write cuemm's event
log (CUEMM_LOG) to OUTDIR/cuemm-WORKLOAD.csv, for tools/cuemm-replay.

Usage:
  torch-proof.py [--out DIR] [--workloads gpt2,resnet50,serve,graph] [--quick]
                 [--seed S] [--timeout SECONDS]
It needs the package cuemm importable: installed (pip install ., as
scripts/gpu-python.sh does), or python/ on PYTHONPATH with CUEMM_LIBRARY
naming libcuemm, as scripts/gpu-frameworks.sh sets them.  Writes DIR/torch-proof.md (the table)
and DIR/torch-proof.json (every figure).
"""
import argparse
import importlib.util
import json
import os
import random
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = ("gpt2", "resnet50", "serve", "graph")
MODES = ("native", "cuemm")
GiB = float(1 << 30)


def trace_module():
    """scripts/torch-trace.py, for its models."""
    spec = importlib.util.spec_from_file_location("torch_trace", os.path.join(HERE, "torch-trace.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ---- the workloads (in the child) ------------------------------------------

def step_times(torch, n, warm, step):
    """Runs step(i) n times, each followed by a synchronization; returns the
    times of the steps after the first `warm`."""
    times = []
    for i in range(n):
        t0 = time.perf_counter()
        step(i)
        torch.cuda.synchronize()
        if i >= warm:
            times.append(time.perf_counter() - t0)
    return times


def gpt2(torch, tt, rng, quick):
    nn, F = torch.nn, torch.nn.functional
    vocab, batch = 50257, 8
    steps, warm, lo, hi = (12, 4, 64, 256) if quick else (40, 10, 64, 1024)
    lengths = [rng.randint(lo, hi) for _ in range(steps)]
    model = tt.gpt_model(torch, nn, 12).to("cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)

    def step(i):
        idx = torch.randint(0, vocab, (batch, lengths[i] + 1), device="cuda")
        x, y = idx[:, :-1], idx[:, 1:]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(x)
        loss = F.cross_entropy(logits.float().reshape(-1, vocab), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()

    return step_times(torch, steps, warm, step), {"lengths": "%d..%d" % (lo, hi)}


def resnet50(torch, tt, rng, quick):
    F = torch.nn.functional
    steps, warm, lo, hi = (8, 3, 8, 16) if quick else (30, 8, 16, 64)
    sizes = [rng.randint(lo, hi) for _ in range(steps)]
    model, origin = tt.resnet50(torch)
    model = model.to("cuda")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)

    def step(i):
        x = torch.randn(sizes[i], 3, 224, 224, device="cuda")
        y = torch.randint(0, 1000, (sizes[i],), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(x)
        loss = F.cross_entropy(out.float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()

    return step_times(torch, steps, warm, step), {"model": origin, "batches": "%d..%d" % (lo, hi)}


def serve(torch, tt, rng, quick):
    vocab = 50257
    requests, warm, lo, hi = (30, 5, 16, 128) if quick else (200, 20, 16, 512)
    shapes = [(rng.randint(1, 8), rng.randint(lo, hi)) for _ in range(requests)]
    model = tt.gpt_model(torch, torch.nn, 12).to("cuda").eval()
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    pending = []
    times = []
    with torch.no_grad():
        for i in range(requests):
            t0 = time.perf_counter()
            s, post = streams[i % 2], streams[(i + 1) % 2]
            with torch.cuda.stream(s):
                tokens = torch.randint(0, vocab, shapes[i], device="cuda")
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    logits = model(tokens)[:, -1, :]
            post.wait_stream(s)
            logits.record_stream(post)
            with torch.cuda.stream(post):
                top = torch.topk(torch.softmax(logits.float(), dim=-1), 5).indices
            pending.append((post, top))
            del tokens, logits, top
            if len(pending) > 4:  # a reply goes out a few requests later
                st, t = pending.pop(0)
                st.synchronize()
                t.cpu()
            if i >= warm:
                times.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    return times, {"requests": requests, "streams": 2}


def graph(torch, tt, rng, quick):
    """A CUDA graph's replays against eager results, with allocations and
    frees around the capture."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)).cuda()
    static_in = torch.randn(64, 512, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # warm-up on a side stream, as PyTorch's docs do
            model(static_in)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.no_grad():
        with torch.cuda.graph(g):
            static_out = model(static_in)
    worst = 0.0
    replays = 5 if quick else 20
    with torch.no_grad():
        for i in range(replays):
            churn = [torch.randn(rng.randint(1, 4) << 20, device="cuda") for _ in range(4)]
            x = torch.randn(64, 512, device="cuda")
            static_in.copy_(x)
            g.replay()
            want = model(x)
            worst = max(worst, (static_out - want).abs().max().item())
            del churn
    del g
    torch.cuda.synchronize()
    return [], {"replays": replays, "max_abs_diff": worst, "ok": worst < 1e-3}


def child(args):
    if args.mode == "cuemm":
        import cuemm.torch as cuemm_torch
        cuemm_torch.use()
    import torch
    if not torch.cuda.is_available():
        print("torch-proof: torch sees no CUDA device", file=sys.stderr)
        return 1
    tt = trace_module()
    rng = random.Random(args.seed)
    torch.manual_seed(args.seed)
    run = {"gpt2": gpt2, "resnet50": resnet50, "serve": serve, "graph": graph}[args.child]
    t0 = time.time()
    times, info = run(torch, tt, rng, args.quick)
    torch.cuda.synchronize()
    res = {"workload": args.child, "mode": args.mode, "seconds": time.time() - t0, "info": info,
           "steps": len(times), "torch": torch.__version__,
           "device": torch.cuda.get_device_name(0)}
    if times:
        res["median_s"] = statistics.median(times)
        res["total_s"] = sum(times)
    if args.mode == "native":
        res["peak_held"] = torch.cuda.max_memory_reserved()
        res["peak_live"] = torch.cuda.max_memory_allocated()
    else:
        import cuemm.torch as cuemm_torch
        st = cuemm_torch.stats(0)
        res["peak_held"] = st["peak_held_bytes"]
        res["peak_live"] = st["peak_bytes"]
        res["cuemm"] = {k: st[k] for k in ("allocs", "frees", "flushes", "oom_retries", "stream_events",
                                           "stream_event_waits", "stream_steals", "stream_reclaims",
                                           "stream_heaps", "log_rows", "log_lost")}
        try:
            ps = cuemm_torch.pool_stats(0)
            res["cuemm"].update({k: ps[k] for k in ("grow_steps", "releases", "chunks_released", "chunks")})
        except Exception as e:  # pool_stats is a helper of cuemm.torch; its absence must not lose the run
            res["cuemm"]["pool_stats_error"] = str(e)
        ad = cuemm_torch.adapter_stats()
        res["adapter"] = {k: ad[k] for k in ("alloc_failures", "free_failures", "record_stream_failures",
                                             "graph_pools", "graph_blocks_held", "last_failure")}
        res["hooks"] = list(cuemm_torch.hooks())
    print("RESULT " + json.dumps(res))
    sys.stdout.flush()
    return 0


# ---- the parent ---------------------------------------------------------------

def merge(rs):
    """One figure of several runs of a workload and mode: the median of their
    median steps and of their totals, the largest peak held."""
    r = dict(rs[0])
    timed = [x for x in rs if "median_s" in x]
    if timed:
        r["median_s"] = statistics.median(x["median_s"] for x in timed)
        r["total_s"] = statistics.median(x["total_s"] for x in timed)
        r["run_medians_ms"] = [round(x["median_s"] * 1e3, 2) for x in timed]
    r["peak_held"] = max(x.get("peak_held") or 0 for x in rs)
    r["runs"] = len(rs)
    return r


def fmt_bytes(b):
    return "%.2f GiB" % (b / GiB) if b is not None else "-"


def table(results, names):
    lines = ["| workload | native median step | cuemm median step | time cuemm/native (median) | "
             "time cuemm/native (total) | native peak reserved | cuemm peak held | memory cuemm/native |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    checks = []
    for w in names:
        n, c = results.get((w, "native")), results.get((w, "cuemm"))
        if w == "graph":
            for r in (n, c):
                if r:
                    checks.append("CUDA graph (%s): %d replays, largest difference from eager %.3g: %s"
                                  % (r["mode"], r["info"]["replays"], r["info"]["max_abs_diff"],
                                     "ok" if r["info"]["ok"] else "WRONG"))
                else:
                    checks.append("CUDA graph: a run failed")
            continue
        if not n or not c or "median_s" not in n or "median_s" not in c:
            lines.append("| %s | %s | %s | failed | | | | |" % (
                w, "%.2f ms" % (n["median_s"] * 1e3) if n and "median_s" in n else "failed",
                "%.2f ms" % (c["median_s"] * 1e3) if c and "median_s" in c else "failed"))
            continue
        lines.append("| %s | %.2f ms | %.2f ms | %.3f | %.3f | %s | %s | %.3f |" % (
            w, n["median_s"] * 1e3, c["median_s"] * 1e3, c["median_s"] / n["median_s"],
            c["total_s"] / n["total_s"], fmt_bytes(n["peak_held"]), fmt_bytes(c["peak_held"]),
            c["peak_held"] / n["peak_held"] if n["peak_held"] else float("nan")))
    return "\n".join(lines), checks


def main():
    p = argparse.ArgumentParser(description="PyTorch workloads on PyTorch's allocator and on cuemm.")
    p.add_argument("--out", default="torch-proof-out")
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--quick", action="store_true", help="few short steps: a smoke run")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=float, default=150, help="seconds each run's process may take")
    p.add_argument("--no-log", action="store_true", help="cuemm runs without the event log (CUEMM_LOG)")
    p.add_argument("--repeats", type=int, default=1,
                   help="runs of each workload and mode, taking turns; the table gives the median of their "
                        "medians and the largest peak (the event log is written by the first cuemm run)")
    p.add_argument("--child", choices=WORKLOADS, help=argparse.SUPPRESS)
    p.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    args.out = os.path.abspath(args.out)
    if args.child:
        return child(args)
    names = [w for w in args.workloads.split(",") if w]
    bad = [w for w in names if w not in WORKLOADS]
    if bad or not names:
        p.error("unknown workload %s; choose from %s" % (",".join(bad) or "(none)", ",".join(WORKLOADS)))
    runs = {}
    status = 0
    for w in names:
        for rep in range(args.repeats if w != "graph" else 1):
            # The two modes take turns going first: a GPU or host that drifts
            # over the run is charged to both alike.
            for mode in (MODES if rep % 2 == 0 else tuple(reversed(MODES))):
                env = dict(os.environ)
                env.pop("CUEMM_LOG", None)
                if mode == "cuemm" and not args.no_log and rep == 0:
                    env["CUEMM_LOG"] = os.path.join(args.out, "cuemm-%s.csv" % w)
                cmd = [sys.executable, os.path.abspath(__file__), "--child", w, "--mode", mode, "--out", args.out,
                       "--seed", str(args.seed)] + (["--quick"] if args.quick else [])
                t0 = time.time()
                log = os.path.join(args.out, "torch-%s-%s.log" % (w, mode))
                try:
                    with open(log, "w") as f:
                        r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=f, universal_newlines=True,
                                           timeout=args.timeout)
                    out, rc = r.stdout, r.returncode
                except subprocess.TimeoutExpired as e:
                    out, rc = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), 124
                res = None
                for line in out.splitlines():
                    if line.startswith("RESULT "):
                        res = json.loads(line[7:])
                print("%-9s %-6s exit %d after %.1f s%s" % (w, mode, rc, time.time() - t0,
                                                           "" if res else " (no result; see %s)" % log))
                sys.stdout.flush()
                if res is None or rc != 0:
                    status = 1
                    if os.path.exists(log):
                        sys.stdout.write("".join(open(log).readlines()[-15:]))
                else:
                    runs.setdefault((w, mode), []).append(res)
                    if mode == "cuemm" and (res["adapter"]["alloc_failures"] or res["adapter"]["free_failures"]):
                        print("  cuemm adapter failures: %s" % res["adapter"])
                        status = 1
                    if w == "graph" and not res["info"]["ok"]:
                        status = 1
    results = {key: merge(rs) for key, rs in runs.items()}
    text, checks = table(results, names)
    any_res = next(iter(results.values()), None)
    head = ("PyTorch %s on %s, %s run; medians of the steps after the warm-up, fresh process each; %d run%s of "
            "each workload and mode, taking turns (median of the runs' medians, largest peak)" % (
                any_res["torch"] if any_res else "?", any_res["device"] if any_res else "?",
                "quick" if args.quick else "full", args.repeats, "" if args.repeats == 1 else "s"))
    spread = ["%s %s: run medians %s ms" % (w, m, results[(w, m)].get("run_medians_ms"))
              for w in names for m in MODES if (w, m) in results and w != "graph"]
    report = "\n".join([head, "", text, ""] + checks + [""] + spread) + "\n"
    with open(os.path.join(args.out, "torch-proof.md"), "w") as f:
        f.write(report)
    with open(os.path.join(args.out, "torch-proof.json"), "w") as f:
        json.dump([v for v in results.values()], f, indent=1)
    print()
    print(report)
    return status


if __name__ == "__main__":
    sys.exit(main())
