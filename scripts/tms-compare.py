#!/usr/bin/env python3
"""tms-compare.py: cuemm's suspend/resume under PyTorch against
torch_memory_saver (pause/resume), each in its own process on one GPU.

  tms-compare.py OUTDIR [--quick] [--gib G] [--only cuemm|tms|native]

torch_memory_saver (fzyzcjy/torch_memory_saver, 0.0.10 measured) swaps
PyTorch's allocations made inside `torch_memory_saver.region(tag, ...)`
for memory of its own (one cuMemCreate + cuMemMap per allocation, its .so
preloaded with LD_PRELOAD in its default "preload" mode) and gives it back
with pause(tag) / resume(tag); enable_cpu_backup=True keeps the contents in
host memory.  cuemm's equivalents: cuemm.torch.region(tag),
suspend(tag, keep) and resume(tag).  Measured, each implementation in a
fresh process:

  1. allocation cost inside a region: torch.empty + del of one tensor of
     4 KiB .. 8 MiB, repeated, in ns per pair (PyTorch's own per-call cost
     included, the same in every column: the "native" column is PyTorch's
     caching allocator with no region, for that floor);
  2. pause / suspend and resume of G GiB (default 20; --quick 1) made of
     8 MiB tensors, without contents (discarded) and with contents
     (tms enable_cpu_backup=True, cuemm keep=True; twice, since host
     memory pinned the first time may serve the second), each timed,
     with the contents checked after the resume that keeps them;
  3. memory given back: the device's used memory (torch.cuda.mem_get_info)
     before and during the pause, and the difference as a share of the G GiB.

cuemm's own allocation figures without Python (bench/bench-suspend's pair
cost) come from scripts/gpu-suspend.sh.  When torch_memory_saver is not
importable, its preload library is not found, or its process fails, this
says so and measures cuemm (and native) alone.  Writes OUTDIR/tms-compare.md
(the table, also printed), OUTDIR/tms-compare.json and each process's log
OUTDIR/tms-<impl>.log.
"""
import argparse
import glob
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import time

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
SIZES = [4 * KiB, 64 * KiB, 256 * KiB, 1 * MiB, 2 * MiB, 8 * MiB]


# ---- the implementations, in the child ----------------------------------------

class Native(object):
    name = "native"

    def region(self, tag, keep):
        import contextlib
        return contextlib.nullcontext()


class Cuemm(object):
    name = "cuemm"

    def __init__(self):
        import cuemm.torch as ct
        ct.use()
        self.ct = ct

    def region(self, tag, keep):
        return self.ct.region(tag)

    def pause(self, tag, keep):
        self.ct.suspend(tag, keep=keep)

    def resume(self, tag):
        self.ct.resume(tag)


class Tms(object):
    name = "tms"

    def __init__(self):
        import torch_memory_saver as mod
        tms = getattr(mod, "torch_memory_saver", None)
        if tms is None or not hasattr(tms, "pause"):
            tms = getattr(mod, "memory_saver", None)
        if tms is None or not hasattr(tms, "pause"):
            tms = mod.TorchMemorySaver()
        self.tms = tms
        self.version = getattr(mod, "__version__", None)
        if self.version is None:
            try:
                import importlib.metadata as md
                self.version = md.version("torch_memory_saver")
            except Exception:
                self.version = "?"

    def region(self, tag, keep):
        try:
            return self.tms.region(tag=tag, enable_cpu_backup=keep)
        except TypeError:  # a version without CPU backup
            if keep:
                raise
            return self.tms.region(tag=tag)

    def pause(self, tag, keep):
        self.tms.pause(tag)

    def resume(self, tag):
        self.tms.resume(tag)


def pair_cost(torch, impl, size, n):
    """ns per torch.empty + del pair of `size` bytes inside a region."""
    with impl.region("pairs", False):
        for _ in range(200):  # warm
            t = torch.empty(size, dtype=torch.uint8, device="cuda")
            del t
        torch.cuda.synchronize()
        rounds = []
        for _ in range(5):
            t0 = time.perf_counter_ns()
            for _ in range(n):
                t = torch.empty(size, dtype=torch.uint8, device="cuda")
                del t
            rounds.append((time.perf_counter_ns() - t0) / n)
        torch.cuda.synchronize()
    return statistics.median(rounds)


def used(torch):
    free, total = torch.cuda.mem_get_info()
    return total - free


def cycle(torch, impl, total_bytes, keep, tag):
    """Allocates total_bytes in 8 MiB tensors in region(tag), then pauses and
    resumes; returns the figures."""
    block = 8 * MiB
    n = total_bytes // block
    base_used = used(torch)
    t0 = time.perf_counter()
    with impl.region(tag, keep):
        ts = [torch.empty(block, dtype=torch.uint8, device="cuda") for _ in range(n)]
    for i, t in enumerate(ts):
        t.fill_(i % 251)
    torch.cuda.synchronize()
    alloc_s = time.perf_counter() - t0
    before = used(torch)
    t0 = time.perf_counter()
    impl.pause(tag, keep)
    pause_s = time.perf_counter() - t0
    during = used(torch)
    t0 = time.perf_counter()
    impl.resume(tag)
    torch.cuda.synchronize()
    resume_s = time.perf_counter() - t0
    after = used(torch)
    intact = None
    if keep:
        # Every block's first and last byte, and one whole block.
        firsts = torch.stack([t[0] for t in ts]).cpu().tolist()
        lasts = torch.stack([t[-1] for t in ts]).cpu().tolist()
        whole = bool((ts[n // 2] == (n // 2) % 251).all().item())
        intact = whole and all(f == i % 251 and l_ == i % 251 for i, (f, l_) in enumerate(zip(firsts, lasts)))
    addresses = [t.data_ptr() for t in ts[:4]]
    del ts
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return {"bytes": n * block, "blocks": n, "alloc_s": alloc_s, "pause_s": pause_s, "resume_s": resume_s,
            "used_base": base_used, "used_before": before, "used_paused": during, "used_after": after,
            "given_back": (before - during) / float(n * block), "intact": intact, "addresses": addresses}


def child(args):
    import torch
    impl = {"native": Native, "cuemm": Cuemm, "tms": Tms}[args.child]()
    torch.cuda.init()
    a = torch.ones(64, 64, device="cuda")
    (a @ a).sum().item()  # the libraries' buffers, before any region
    torch.nn.functional.linear(a, a, a[0]).sum().item()
    res = {"impl": impl.name, "torch": torch.__version__, "pairs": {}}
    if impl.name == "tms":
        res["tms_version"] = impl.version
    n = 2000 if args.quick else 20000
    for size in SIZES:
        res["pairs"][str(size)] = pair_cost(torch, impl, size, n)
        print("pair %d bytes: %.0f ns" % (size, res["pairs"][str(size)]), flush=True)
    if impl.name != "native":
        total = int(args.gib * GiB)
        res["discard"] = cycle(torch, impl, total, False, "nokeep")
        print("discard: %s" % json.dumps(res["discard"]), flush=True)
        res["keep"] = cycle(torch, impl, total, True, "keep")
        print("keep: %s" % json.dumps(res["keep"]), flush=True)
        # Again: host memory either side pinned at the first may be reused.
        res["keep2"] = cycle(torch, impl, total, True, "keep")
        print("keep, second time: %s" % json.dumps(res["keep2"]), flush=True)
    print("RESULT " + json.dumps(res), flush=True)
    return 0


# ---- the parent ------------------------------------------------------------------

def find_tms_preload():
    """(path of torch_memory_saver's preload library, why not) without
    importing it (which would import torch here)."""
    spec = importlib.util.find_spec("torch_memory_saver")
    if spec is None or not spec.submodule_search_locations:
        return None, "torch_memory_saver is not importable"
    pkg = list(spec.submodule_search_locations)[0]
    found = []
    for d in (pkg, os.path.dirname(pkg)):
        found += glob.glob(os.path.join(d, "torch_memory_saver_hook_mode_preload*.so"))
        found += glob.glob(os.path.join(d, "torch_memory_saver_cpp*.so"))
    if not found:
        return None, "torch_memory_saver is importable (%s) but its preload library is not beside it" % pkg
    # Its wheel ships one build per CUDA major (_cu12, _cu13) and an
    # unsuffixed one that needs libcudart.so.12: take the torch's own, read
    # from its version ("2.11.0+cu130") so that torch is not imported here.
    major = None
    try:
        import importlib.metadata as md
        local = md.version("torch").partition("+")[2]
        if local.startswith("cu") and len(local) >= 4:
            major = local[2:-1]
    except Exception:
        pass
    if not major:
        # A wheel whose version carries no "+cu130": torch/version.py says
        # `cuda = '13.0'`.
        try:
            tspec = importlib.util.find_spec("torch")
            text = open(os.path.join(os.path.dirname(tspec.origin), "version.py")).read()
            m = re.search(r"^cuda\s*(?::[^=]*)?=\s*['\"](\d+)\.", text, re.M)
            major = m.group(1) if m else None
        except Exception:
            major = None
    if major:
        mine = [f for f in found if "_cu%s." % major in os.path.basename(f)]
        if mine:
            return mine[0], None
    return sorted(found)[0], None


def run_child(impl, args, env):
    cmd = [sys.executable, os.path.abspath(__file__), args.out, "--child", impl, "--gib", str(args.gib)]
    if args.quick:
        cmd.append("--quick")
    t = time.time()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                           env=env, timeout=args.timeout)
        text, rc = p.stdout, p.returncode
    except subprocess.TimeoutExpired as e:
        text, rc = e.stdout if isinstance(e.stdout, str) else "", "timeout after %ds" % args.timeout
    with open(os.path.join(args.out, "tms-%s.log" % impl), "w") as f:
        f.write(text)
    for line in text.splitlines():
        if line.startswith("RESULT "):
            r = json.loads(line[7:])
            r["wall_s"] = time.time() - t
            return r, None
    return None, "exit %s; the log's end:\n    %s" % (rc, "\n    ".join(text.splitlines()[-12:]))


def table(results, notes, args):
    impls = [i for i in ("native", "cuemm", "tms") if i in results]
    L = ["# torch_memory_saver against cuemm (%.1f GiB%s)" % (args.gib, ", quick" if args.quick else ""), ""]
    L += ["note: " + n for n in notes]
    if notes:
        L.append("")
    if "tms" in results:
        L += ["torch_memory_saver %s; torch %s" % (results["tms"].get("tms_version"), results["tms"]["torch"]), ""]
    L += ["## allocation: torch.empty + del inside a region, ns per pair (median of 5 rounds)", "",
          "| size | " + " | ".join(impls) + " |", "|---|" + "---|" * len(impls)]
    for size in SIZES:
        cells = ["%.0f" % results[i]["pairs"][str(size)] for i in impls]
        L.append("| %s | %s |" % ("%d KiB" % (size // KiB) if size < MiB else "%d MiB" % (size // MiB),
                                  " | ".join(cells)))
    L.append("")
    impls = [i for i in ("cuemm", "tms") if i in results]
    if impls:
        L += ["## pause/suspend and resume of %.1f GiB in 8 MiB tensors" % args.gib, "",
              "| figure | " + " | ".join(impls) + " |", "|---|" + "---|" * len(impls)]
        rows = [
            ("allocate + fill (s)", lambda r: "%.3f" % r["alloc_s"]),
            ("pause, contents discarded (ms)", lambda r: "%.1f" % (1e3 * r["pause_s"])),
            ("resume, contents discarded (ms)", lambda r: "%.1f" % (1e3 * r["resume_s"])),
            ("memory given back, discarded", lambda r: "%.1f%%" % (100 * r["given_back"])),
        ]
        for label, f in rows:
            L.append("| %s | %s |" % (label, " | ".join(f(results[i]["discard"]) for i in impls)))
        rows = [
            ("pause, contents kept (ms)", lambda r: "%.1f" % (1e3 * r["pause_s"])),
            ("  = GB/s to host", lambda r: "%.2f" % (r["bytes"] / r["pause_s"] / 1e9)),
            ("resume, contents kept (ms)", lambda r: "%.1f" % (1e3 * r["resume_s"])),
            ("  = GB/s to device", lambda r: "%.2f" % (r["bytes"] / r["resume_s"] / 1e9)),
            ("memory given back, kept", lambda r: "%.1f%%" % (100 * r["given_back"])),
            ("contents intact after resume", lambda r: "yes" if r["intact"] else "NO"),
            ("device used before / paused (GiB)",
             lambda r: "%.2f / %.2f" % (r["used_before"] / GiB, r["used_paused"] / GiB)),
        ]
        for label, f in rows:
            L.append("| %s | %s |" % (label, " | ".join(f(results[i]["keep"]) for i in impls)))
        for label, f in rows[:5]:
            L.append("| %s, second time | %s |" % (label.strip(), " | ".join(f(results[i]["keep2"]) for i in impls)))
        L.append("| contents intact, second time | %s |"
                 % " | ".join("yes" if results[i]["keep2"]["intact"] else "NO" for i in impls))
        L.append("")
    return "\n".join(L) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--gib", type=float, default=None)
    ap.add_argument("--only", default=None, help="native, cuemm or tms (comma-separated)")
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.gib is None:
        args.gib = 1.0 if args.quick else 20.0
    if args.child:
        return child(args)
    os.makedirs(args.out, exist_ok=True)
    impls = (args.only or "native,cuemm,tms").split(",")
    results, notes = {}, []
    base = dict(os.environ)
    base.pop("LD_PRELOAD", None)
    for impl in impls:
        env = dict(base)
        if impl == "tms":
            so, why = find_tms_preload()
            if so is None:
                notes.append("torch_memory_saver not measured: %s" % why)
                continue
            env["LD_PRELOAD"] = so
            notes.append("torch_memory_saver's preload library: %s" % so)
        print("== %s" % impl, flush=True)
        r, err = run_child(impl, args, env)
        if r is None:
            notes.append("%s failed: %s" % (impl, err))
            continue
        results[impl] = r
    text = table(results, notes, args)
    print(text)
    with open(os.path.join(args.out, "tms-compare.md"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, "tms-compare.json"), "w") as f:
        json.dump({"results": results, "notes": notes}, f, indent=1)
    ok = "cuemm" in results and results["cuemm"]["keep"]["intact"] and results["cuemm"]["keep2"]["intact"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
