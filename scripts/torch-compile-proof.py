#!/usr/bin/env python3
"""torch-compile-proof.py: torch.compile on PyTorch's own allocator and on
cuemm (cuemm.torch.use()), default mode and mode="reduce-overhead", each run
in a fresh process, and a table: the losses of each cuemm run compared with
the native run of the same mode (equal: bitwise), the median step time after
the warm-up, and the first step's time (compilation; the inductor cache in
OUTDIR is shared, so runs after the first of a mode find their kernels).

The model: an MLP (LayerNorm, Linear, GELU; 4 blocks of width 1024, a
regression head) trained with AdamW on random batches of 256 drawn from a
seeded generator, so every run sees the same data.  Deterministic algorithms
are asked for (CUBLAS_WORKSPACE_CONFIG=:4096:8), so the losses of two runs
of a mode are expected to be equal, whatever allocator serves the memory.

cuemm.torch.use() switches torch.compile's CUDA graph trees off (trees need
allocator calls PyTorch offers no pluggable allocator), so the cuemm runs of
reduce-overhead capture plain CUDA graphs; the native runs keep the trees.
Two probes (not failures of the proof) run a few steps on cuemm with the
trees forced back on, with and without the slow-path assertions, and show
the call that fails.

Usage:
  torch-compile-proof.py [--out DIR] [--steps N] [--warmup W] [--timeout SECONDS] [--no-probe]
It needs the package cuemm importable (pip install ., as scripts/gpu-python.sh
does; or python/ on PYTHONPATH and CUEMM_LIBRARY naming libcuemm).  Writes
DIR/torch-compile-proof.md (the table) and DIR/torch-compile-proof.json.
Exit status 0 when every run finished and every cuemm run's losses equal
native's (or agree within 1e-5 relative, reported as "close"), 1 otherwise.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

MODES = ("default", "reduce-overhead")
ALLOCATORS = ("native", "cuemm")
PROBES = ("trees-on", "trees-on-no-asserts")


def child(args):
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if args.allocator == "cuemm":
            import cuemm.torch
            cuemm.torch.use()
        import torch
        import torch._inductor.config as inductor_config  # where cuemm switches the graph trees off
    said = [str(w.message) for w in caught if "cuemm" in str(w.message)]
    if args.probe:
        inductor_config.triton.cudagraph_trees = True
        if args.probe == "trees-on-no-asserts":
            inductor_config.triton.slow_path_cudagraph_asserts = False
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.manual_seed(1)
    dev = "cuda"
    width, depth, batch = 1024, 4, 256
    layers = []
    for _ in range(depth):
        layers += [torch.nn.LayerNorm(width), torch.nn.Linear(width, width), torch.nn.GELU()]
    layers.append(torch.nn.Linear(width, 1))
    model = torch.nn.Sequential(*layers).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step_model = torch.compile(model, mode=args.compile_mode)
    gen = torch.Generator(device=dev)
    gen.manual_seed(2)
    w_true = torch.randn(width, 1, device=dev, generator=gen)
    # Marks each training step for the graph trees (native reduce-overhead):
    # the outputs of the step before may be overwritten from here on.
    mark_step = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None)
    losses, times = [], []
    for i in range(args.steps):
        if mark_step is not None:
            mark_step()
        x = torch.randn(batch, width, device=dev, generator=gen)
        y = torch.tanh(x @ w_true)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        out = step_model(x)
        loss = torch.nn.functional.mse_loss(out, y)
        loss.backward()
        opt.step()
        value = loss.item()  # synchronizes; read before the next replay overwrites graph outputs
        times.append(time.perf_counter() - t0)
        losses.append(value)
    res = {"compile_mode": args.compile_mode, "allocator": args.allocator, "probe": args.probe,
           "losses": losses, "first_step_s": times[0], "torch": torch.__version__,
           "device": torch.cuda.get_device_name(0), "cudagraph_trees": bool(inductor_config.triton.cudagraph_trees),
           "warnings": said}
    steady = times[args.warmup:]
    if steady:
        res["median_step_s"] = statistics.median(steady)
    if args.allocator == "cuemm":
        import cuemm.torch
        st = cuemm.torch.stats(0)
        ad = cuemm.torch.adapter_stats()
        res["cuemm"] = {"peak_held": st["peak_held_bytes"], "peak_live": st["peak_bytes"],
                        "graph_pools": ad["graph_pools"], "graph_blocks_held": ad["graph_blocks_held"],
                        "alloc_failures": ad["alloc_failures"], "graph_failures": ad["graph_failures"],
                        "last_failure": ad["last_failure"]}
    else:
        res["native"] = {"peak_held": torch.cuda.max_memory_reserved(), "peak_live": torch.cuda.max_memory_allocated()}
    print("RESULT " + json.dumps(res))
    sys.stdout.flush()
    return 0


def run_child(args, compile_mode, allocator, probe, steps, warmup):
    env = dict(os.environ)
    env["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(args.out, "inductor-cache")
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--compile-mode", compile_mode,
           "--allocator", allocator, "--steps", str(steps), "--warmup", str(warmup), "--out", args.out]
    if probe:
        cmd += ["--probe", probe]
    name = probe or "%s-%s" % (compile_mode, allocator)
    log = os.path.join(args.out, "compile-%s.log" % name)
    t0 = time.time()
    try:
        with open(log, "w") as f:
            r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=f, universal_newlines=True,
                               timeout=args.timeout)
        out, rc = r.stdout, r.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        rc = 124
    res = None
    for line in out.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[7:])
    err = ""
    if res is None and os.path.exists(log):
        lines = [ln.strip() for ln in open(log) if ln.strip()]
        errs = [ln for ln in lines if "Error" in ln or "error" in ln]
        err = (errs or lines or ["(no output)"])[-1][:300]
    print("%-28s exit %d after %.1f s%s" % (name, rc, time.time() - t0, "" if res else " (no result; see %s)" % log))
    sys.stdout.flush()
    return rc, res, err


def compare(native, cuemm):
    a, b = native["losses"], cuemm["losses"]
    if len(a) != len(b):
        return "FAIL", "%d vs %d steps" % (len(a), len(b))
    if a == b:
        return "equal", "bitwise, %d steps" % len(a)
    worst = max(abs(x - y) / max(abs(x), 1e-12) for x, y in zip(a, b))
    return ("close" if worst <= 1e-5 else "FAIL"), "max relative difference %.2e" % worst


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="torch-compile-proof-out")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--timeout", type=float, default=240, help="seconds each run's process may take")
    p.add_argument("--no-probe", action="store_true", help="skip the runs with graph trees forced on")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--compile-mode", choices=MODES, help=argparse.SUPPRESS)
    p.add_argument("--allocator", choices=ALLOCATORS, help=argparse.SUPPRESS)
    p.add_argument("--probe", choices=PROBES, help=argparse.SUPPRESS)
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    args.out = os.path.abspath(args.out)
    if args.child:
        return child(args)
    status = 0
    results = {}
    for mode in MODES:
        for alloc in ALLOCATORS:
            rc, res, err = run_child(args, mode, alloc, None, args.steps, args.warmup)
            results[(mode, alloc)] = res
            if res is None or rc != 0:
                status = 1
                print("  %s" % err)
    probes = {}
    if not args.no_probe:
        for probe in PROBES:
            rc, res, err = run_child(args, "reduce-overhead", "cuemm", probe, 4, 1)
            probes[probe] = {"rc": rc, "ran": res is not None and rc == 0, "error": err}

    rows = ["| torch.compile mode | allocator | graph trees | median step | first step (compile) | loss: first, last "
            "| losses vs native | peak held |", "|---|---|---|---|---|---|---|---|"]
    checks = {}
    for mode in MODES:
        nat = results.get((mode, "native"))
        for alloc in ALLOCATORS:
            r = results.get((mode, alloc))
            if r is None:
                rows.append("| %s | %s | | | | | no result (see compile-%s-%s.log) | |" % (mode, alloc, mode, alloc))
                continue
            if alloc == "native":
                verdict = "(reference)"
            elif nat is None:
                verdict, status = "no native run to compare", 1
            else:
                v, why = compare(nat, r)
                checks[mode] = v
                if v == "FAIL":
                    status = 1
                verdict = "%s (%s)" % (v, why)
            held = (r.get("cuemm") or r.get("native"))["peak_held"] / float(1 << 20)
            trees = "-" if mode == "default" else ("on" if r["cudagraph_trees"] else "off")
            rows.append("| %s | %s | %s | %.3f ms | %.1f s | %.6g, %.6g | %s | %.0f MiB |" % (
                mode, alloc, trees, r.get("median_step_s", float("nan")) * 1e3, r["first_step_s"],
                r["losses"][0], r["losses"][-1], verdict, held))
            if alloc == "cuemm" and (r["cuemm"]["alloc_failures"] or r["cuemm"]["graph_failures"]):
                status = 1
                rows.append("|  | cuemm adapter failures | | | | | %s | |" % r["cuemm"]["last_failure"])
    any_res = next((r for r in results.values() if r), None)
    head = "torch.compile proof: PyTorch %s on %s, %d steps, medians after %d warm-up steps, fresh process each" % (
        any_res["torch"] if any_res else "?", any_res["device"] if any_res else "?", args.steps, args.warmup)
    text = [head, ""] + rows
    cu = results.get(("reduce-overhead", "cuemm"))
    if cu and cu.get("warnings"):
        text += ["", "cuemm.torch.use() said: " + cu["warnings"][0]]
    if probes:
        text += ["", "| probe: cuemm, reduce-overhead, graph trees forced on | ran? | first error |", "|---|---|---|"]
        for probe in PROBES:
            pr = probes[probe]
            text.append("| %s | %s | %s |" % ("slow-path asserts on (default)" if probe == "trees-on"
                                               else "slow-path asserts off", "yes" if pr["ran"] else "no",
                                               pr["error"].replace("|", "/") or "-"))
    text += ["", "verdict: %s" % ("PASS" if status == 0 else "FAIL")]
    out = "\n".join(text) + "\n"
    sys.stdout.write("\n" + out)
    with open(os.path.join(args.out, "torch-compile-proof.md"), "w") as f:
        f.write(out)
    with open(os.path.join(args.out, "torch-compile-proof.json"), "w") as f:
        json.dump({"runs": {"%s/%s" % k: v for k, v in results.items()}, "probes": probes, "checks": checks,
                   "status": status}, f, indent=1)
    return status


if __name__ == "__main__":
    sys.exit(main())
