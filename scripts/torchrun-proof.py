#!/usr/bin/env python3
"""torchrun-proof.py: data-parallel training over NCCL on PyTorch's allocator
and on cuemm, for scripts/gpu-multi.sh.

Two uses:

  torchrun --standalone --nproc-per-node 2 scripts/torchrun-proof.py \\
      --mode ddp|fsdp --alloc native|cuemm --out DIR --launch N [--steps S]
      [--no-log] [--no-bind] [--profile STEP]
      One launch: every rank trains the same small decoder-only transformer
      (8 blocks, d 768, 12 heads, vocab 16384, no dropout) with AdamW at
      variable sequence lengths (batch 8 per rank, lengths 64..1024 chosen
      per step from the seed, the same on every rank and in every run; each
      rank's tokens its own).  ddp: DistributedDataParallel (gradient
      buckets all-reduced on NCCL's stream while backward runs); fsdp:
      torch.distributed.fsdp.fully_shard on every block and the root
      (parameters all-gathered and gradients reduce-scattered on FSDP's own
      streams).  Each local rank is bound to its share of the CPUs
      (--no-bind leaves it unbound).  With --alloc cuemm,
      `cuemm.torch.use()` runs in each rank before its first CUDA tensor,
      and each rank writes cuemm's event log (not with --no-log)
      (CUEMM_LOG) to DIR.  TORCH_NCCL_AVOID_RECORD_STREAMS=0: c10d calls
      record_stream on the tensors its collectives use; every step also
      all-reduces its loss asynchronously on a side stream, the buffer
      recorded there with Tensor.record_stream.  Rank 0 writes
      DIR/MODE-ALLOC-N.json: the global loss of every step (all-reduced
      mean), the median step time after the warm-up, and per rank the peak
      memory held from the driver (native: torch.cuda.max_memory_reserved;
      cuemm: cuemm.torch.max_memory_reserved, its peak_held_bytes), and for
      cuemm the adapters' failures (cuemm.torch.adapter_stats()) and the
      streams the rank's allocations were made on (from its log), and each
      rank's step times and host times (until the host has queued the whole
      step).  --profile STEP: rank 0 profiles that step with torch.profiler
      (left out of the times) into DIR/profile-MODE-ALLOC-N-rank0.txt (its
      operators by host and by GPU time) and .json (its trace).

  scripts/torchrun-proof.py --report DIR
      Reads every DIR/*.json and prints one table per mode: for each
      allocator its runs' median step times and peak memory per rank; the
      largest difference of the losses between native runs (the run-to-run
      spread) and between each cuemm run and the first native run; whether
      cuemm stayed within the spread (a floor of 1e-5 of the loss where the
      native runs agree exactly); adapter failures; each allocator's median
      over the steps of the shortest and of the longest third of the
      sequence lengths (the host sets the pace of the first, the GPU of
      the second).  Writes DIR/torchrun.md;
      exit status 1 when a check failed or a run is missing.

NVLink multicast stays off: NCCL_NVLS_ENABLE=0 and
TORCH_SYMM_MEM_DISABLE_MULTICAST=1 are set here too.
"""
import argparse
import ctypes
import glob
import json
import math
import os
import random
import statistics
import sys
import time

os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
os.environ.setdefault("TORCH_NCCL_AVOID_RECORD_STREAMS", "0")
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS

VOCAB, D, HEADS, LAYERS, BATCH = 16384, 768, 12, 8, 8
LO, HI = 64, 1024
GiB = float(1 << 30)


def build_model(torch):
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(D)
            self.qkv = nn.Linear(D, 3 * D)
            self.proj = nn.Linear(D, D)
            self.ln2 = nn.LayerNorm(D)
            self.fc1 = nn.Linear(D, 4 * D)
            self.fc2 = nn.Linear(4 * D, D)

        def forward(self, x):
            b, n, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, n, D))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(VOCAB, D)
            self.pos = nn.Embedding(HI, D)
            self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
            self.norm = nn.LayerNorm(D)
            self.head = nn.Linear(D, VOCAB, bias=False)

        def forward(self, idx):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.norm(x))

    return Decoder()


def nccl_version(torch):
    try:
        v = torch.cuda.nccl.version()
        return ".".join(map(str, v)) if isinstance(v, (tuple, list)) else str(v)
    except Exception:
        return "?"


def flush_log(device):
    """Writes cuemm's buffered log rows of this rank (cuemm_log_flush)."""
    from cuemm import _lib
    lib = _lib.load()
    fn = getattr(lib, "cuemm_log_flush", None)
    if fn is None:
        return
    fn.restype, fn.argtypes = ctypes.c_int, (ctypes.c_void_p,)
    fn(_lib.device_manager(device))


def log_streams(path):
    """(allocation rows, {stream: allocations}) of a cuemm event log."""
    rows, streams = 0, {}
    try:
        with open(path) as f:
            next(f, None)
            for line in f:
                c = line.split(",")
                if len(c) > 5 and c[2] == "allocate":
                    rows += 1
                    streams[c[5]] = streams.get(c[5], 0) + 1
    except OSError:
        pass
    return rows, streams


def cores_of(cpus):
    """The CPUs grouped by physical core (hyperthread siblings together),
    in the order of their first CPU; one group a CPU where the topology
    is not readable."""
    groups, seen = [], set()
    for c in cpus:
        if c in seen:
            continue
        try:
            with open("/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list" % c) as f:
                sib = set()
                for part in f.read().strip().split(","):
                    lo, _, hi = part.partition("-")
                    sib.update(range(int(lo), int(hi or lo) + 1))
        except (OSError, ValueError):
            sib = {c}
        g = sorted(x for x in sib if x in cpus) or [c]
        seen.update(g)
        groups.append(g)
    return groups


def cpu_list(cpus):
    """[0, 1, 2, 16, 17] as "0-2,16-17"."""
    runs = []
    for c in cpus:
        if runs and c == runs[-1][1] + 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ",".join("%d-%d" % (a, b) if b > a else "%d" % a for a, b in runs)


def bind_cpus(local, nlocal):
    """Pins this rank's process, and the threads it starts later, to its
    own share of the CPUs the launch may use (rank 0 the first share), as
    a cluster operator binds ranks: whole physical cores, so that no busy
    thread of one rank (NCCL's proxy spins) shares a core with the other
    rank's main thread.  Unbound, the same allocator's FSDP launches
    differed by up to 25% in every step at once (66 to 84 ms on two H100s),
    from where the scheduler put the ranks' busy threads, which hid a
    difference between allocators of a few percent.  Returns the CPUs, or
    None where there are fewer than one core per rank."""
    cores = cores_of(sorted(os.sched_getaffinity(0)))
    share = len(cores) // nlocal
    if share < 1:
        return None
    mine = sorted(c for g in cores[local * share:(local + 1) * share] for c in g)
    os.sched_setaffinity(0, mine)
    return mine


def train(a):
    rank = int(os.environ["RANK"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    cpus = bind_cpus(local, int(os.environ.get("LOCAL_WORLD_SIZE", "1"))) if a.bind else None
    log = None
    if a.alloc == "cuemm" and a.log:
        log = os.path.join(os.path.abspath(a.out), "cuemm-%s-%d-rank%d.csv" % (a.mode, a.run, rank))
        os.environ["CUEMM_LOG"] = log
    import torch
    import torch.distributed as dist
    if a.alloc == "cuemm":
        import cuemm.torch as ct
        ct.use()
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    world = dist.get_world_size()
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    torch.manual_seed(a.seed)  # the same initial weights on every rank
    model = build_model(torch).to(dev)
    if a.mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(model, device_ids=[local], bucket_cap_mb=8)
    else:
        from torch.distributed.fsdp import fully_shard
        for blk in model.blocks:
            fully_shard(blk)
        fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    F = torch.nn.functional
    side = torch.cuda.Stream(device=dev)
    lengths = [random.Random(a.seed * 7919 + s).randint(LO, HI) for s in range(a.steps)]
    gen = torch.Generator().manual_seed(a.seed * 1000003 + rank)
    losses, times, hosts, timed, pending = [], [], [], [], []
    prof = None
    for step in range(a.steps):
        if a.profile is not None and step == a.profile and rank == 0:
            from torch.profiler import profile, ProfilerActivity
            prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
            prof.__enter__()
        n = lengths[step]
        idx = torch.randint(VOCAB, (BATCH, n + 1), generator=gen).to(dev, non_blocking=False)
        torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        logits = model(idx[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB).float(), idx[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        # The step's loss all-reduced on a side stream: a communication
        # buffer made on the compute stream, used by NCCL from the side
        # stream, recorded there (record_stream) and dropped at once.
        buf = loss.detach().reshape(1).clone()
        side.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(side):
            buf.record_stream(side)
            work = dist.all_reduce(buf, op=dist.ReduceOp.SUM, async_op=True)
            work.wait()  # the side stream waits for NCCL's; the host does not
            out = buf.clone()
        pending.append(out)
        del buf, work
        t1 = time.perf_counter()  # the host has queued the whole step
        torch.cuda.synchronize(dev)
        if step >= a.warm and step != a.profile:
            times.append(time.perf_counter() - t0)
            hosts.append(t1 - t0)
            timed.append(step)
        if prof is not None and step == a.profile:
            prof.__exit__(None, None, None)
            write_profile(prof, a, rank, n)
            prof = None
    torch.cuda.synchronize(dev)
    losses = [float(out.item()) / world for out in pending]
    if a.alloc == "cuemm":
        import cuemm.torch as ct
        peak = ct.max_memory_reserved(local)
        adapter = ct.adapter_stats()
        adapter = {k: v for k, v in adapter.items() if k.endswith("failures") or k == "last_failure"}
        st = ct.stats(local)
        extra = {"adapter": adapter, "peak_live": st["peak_bytes"],
                 "stream_event_waits": st["stream_event_waits"], "stream_steals": st["stream_steals"]}
        try:
            from cuemm import _lib
            ps = _lib.pool_stats(local)
            extra["pool_grows"], extra["pool_releases"] = ps.get("grow_steps"), ps.get("releases")
        except Exception:
            pass
        if log:
            flush_log(local)
            rows, streams = log_streams(log)
            extra["log_allocations"] = rows
            extra["log_streams"] = len(streams)
    else:
        peak = torch.cuda.max_memory_reserved(dev)
        extra = {"peak_live": torch.cuda.max_memory_allocated(dev)}
    # Every timed step, so that a slow launch can be told apart: slow in
    # every step (the machine, the placement) or in a few (a growth, a stall).
    mine = {"rank": rank, "peak_held": peak, "median_step_s": statistics.median(times) if times else None,
            "step_times_s": times, "host_times_s": hosts, "timed_steps": timed, "cpus": cpu_list(cpus) if cpus else None}
    mine.update(extra)
    ranks = [None] * world
    dist.all_gather_object(ranks, mine)
    if rank == 0:
        res = {"mode": a.mode, "alloc": a.alloc, "run": a.run, "steps": a.steps, "warm": a.warm,
               "lengths": lengths, "losses": losses, "median_step_s": statistics.median(times) if times else None,
               "ranks": ranks, "torch": torch.__version__, "world": world,
               "nccl": nccl_version(torch),
               "device": torch.cuda.get_device_name(dev)}
        with open(os.path.join(a.out, "%s-%s-%d.json" % (a.mode, a.alloc, a.run)), "w") as f:
            json.dump(res, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()


def write_profile(prof, a, rank, n):
    """--profile: the profiled step's operators by their own host time and
    by their GPU time, and its trace (chrome://tracing, Perfetto)."""
    base = os.path.join(a.out, "profile-%s-%s-%d-rank%d" % (a.mode, a.alloc, a.run, rank))
    ka = prof.key_averages()
    with open(base + ".txt", "w") as f:
        f.write("step %d, %d tokens a sequence\n\n" % (a.profile, n))
        f.write(ka.table(sort_by="self_cpu_time_total", row_limit=45))
        f.write("\n")
        f.write(ka.table(sort_by="self_cuda_time_total", row_limit=25))
    prof.export_chrome_trace(base + ".json")


def split_steps(runs, field="step_times_s"):
    """(lo, hi, cuemm, native, lo2, hi2, cuemm2, native2): the shortest and
    the longest thirds of the timed steps' sequence lengths, and each
    allocator's median step time (ms; field "host_times_s": the time the
    host took to queue the step) over those steps of all its launches
    (rank 0's times); None where the runs lack those times."""
    r0 = runs[0]
    lengths = r0["lengths"][r0["warm"]:]
    if not lengths or any(field not in r["ranks"][0] for r in runs):
        return None
    order = sorted(lengths)
    third = max(1, len(order) // 3)
    short_max, long_min = order[third - 1], order[-third]
    got = {}
    for r in runs:
        rk = min(r["ranks"], key=lambda x: x["rank"])
        steps = rk.get("timed_steps") or range(r["warm"], r["steps"])
        for n, t in zip((r["lengths"][i] for i in steps), rk[field]):
            key = "short" if n <= short_max else "long" if n >= long_min else None
            if key:
                got.setdefault((r["alloc"], key), []).append(1e3 * t)
    if any((a, k) not in got for a in ("cuemm", "native") for k in ("short", "long")):
        return None
    med = {k: statistics.median(v) for k, v in got.items()}
    return (order[0], short_max, med[("cuemm", "short")], med[("native", "short")],
            long_min, order[-1], med[("cuemm", "long")], med[("native", "long")])


def report(out):
    runs = {}
    for p in sorted(glob.glob(os.path.join(out, "*.json"))):
        try:
            with open(p) as f:
                r = json.load(f)
        except (OSError, ValueError):
            continue
        if "mode" in r and "alloc" in r:
            runs.setdefault(r["mode"], {}).setdefault(r["alloc"], []).append(r)
    lines, bad = [], []
    for mode in ("ddp", "fsdp"):
        got = runs.get(mode, {})
        nat, cu = sorted(got.get("native", []), key=lambda r: r["run"]), sorted(got.get("cuemm", []), key=lambda r: r["run"])
        title = {"ddp": "DDP (DistributedDataParallel)", "fsdp": "FSDP (fully_shard)"}[mode]
        lines.append("### %s, 2 ranks over NCCL" % title)
        if len(nat) < 2 or len(cu) < 2:
            lines.append("missing runs: %d native, %d cuemm (2 of each wanted)" % (len(nat), len(cu)))
            bad.append("%s: runs missing" % mode)
            lines.append("")
            continue
        ref = nat[0]["losses"]

        def diff(r):
            return max(abs(x - y) for x, y in zip(r["losses"], ref)) if len(r["losses"]) == len(ref) else float("inf")

        spread = max(diff(r) for r in nat[1:])
        floor = 1e-5 * max(abs(x) for x in ref)
        # The losses are float32 values: two native launches of one call
        # agreed to one step of float32 at the loss's size (9.5e-07 near
        # 9.7) where those of another call differed by two, so the spread
        # of a few launches is not less than two such steps.
        top = max(abs(x) for x in ref)
        step = 2.0 ** (math.floor(math.log2(top)) - 23) if top > 0 else 0.0
        tol = max(spread, 2 * step) if spread > 0 else floor
        lines.append("")
        lines.append("| allocator | run | median step | peak held rank 0 | peak held rank 1 | peak live rank 0 | "
                     "max loss difference from native run 1 | streams allocated on (rank 0, 1) | adapter failures |")
        lines.append("|---|---|---|---|---|---|---|---|---|")
        for r in nat + cu:
            rk = sorted(r["ranks"], key=lambda x: x["rank"])
            d = diff(r)
            fails = "-"
            streams = "-"
            if r["alloc"] == "cuemm":
                fails = sum(sum(v for k, v in x["adapter"].items() if k.endswith("failures")) for x in rk)
                streams = ", ".join(str(x.get("log_streams", "?")) for x in rk)
                if fails:
                    bad.append("%s cuemm run %d: %d adapter failures (%s)" % (
                        mode, r["run"], fails, "; ".join(x["adapter"].get("last_failure", "") for x in rk)))
            lines.append("| %s | %d | %.1f ms | %.2f GiB | %.2f GiB | %.2f GiB | %s | %s | %s |" % (
                r["alloc"], r["run"], 1e3 * r["median_step_s"], rk[0]["peak_held"] / GiB, rk[1]["peak_held"] / GiB,
                rk[0]["peak_live"] / GiB, "0 (reference)" if r is nat[0] else "%.3g" % d, streams, fails))
        ok_loss = all(diff(r) <= tol for r in cu)
        med = {k: statistics.median(r["median_step_s"] for r in v) for k, v in (("native", nat), ("cuemm", cu))}
        mem = {k: statistics.median(max(x["peak_held"] for x in r["ranks"]) for r in v)
               for k, v in (("native", nat), ("cuemm", cu))}
        lines.append("")
        lines.append("- losses: native run-to-run spread %.3g; cuemm's largest difference from native run 1 %.3g; "
                     "tolerance %.3g (the spread, at least two float32 steps of the loss; 1e-5 of the loss only "
                     "where the native runs agree exactly): %s"
                     % (spread, max(diff(r) for r in cu), tol, "within" if ok_loss else "OUTSIDE"))
        lines.append("- step time cuemm/native %.3f (medians of the runs' medians: %.1f / %.1f ms); "
                     "peak held per rank cuemm/native %.3f (%.2f / %.2f GiB, the larger rank)"
                     % (med["cuemm"] / med["native"], 1e3 * med["cuemm"], 1e3 * med["native"],
                        mem["cuemm"] / mem["native"], mem["cuemm"] / GiB, mem["native"] / GiB))
        # The steps of the shortest and the longest thirds of the sequence
        # lengths, apart: the long ones wait on the GPU, the short ones on
        # the host, where launches differ most (docs/clusters.md).
        parts = split_steps(nat + cu)
        if parts:
            lines.append("- by sequence length, medians over every launch's steps: shortest third (%d..%d "
                         "tokens) cuemm %.1f / native %.1f ms; longest third (%d..%d) cuemm %.1f / native %.1f ms"
                         % parts)
        parts = split_steps(nat + cu, "host_times_s")
        if parts:
            lines.append("- the host's time to queue a step, the same medians: shortest third (%d..%d tokens) "
                         "cuemm %.1f / native %.1f ms; longest third (%d..%d) cuemm %.1f / native %.1f ms" % parts)
        bound = sorted(set(x.get("cpus") or "none" for r in nat + cu for x in r["ranks"]))
        lines.append("- %s, torch %s, NCCL %s, %d steps (median over the last %d), sequence lengths %d..%d; "
                     "the ranks' CPUs: %s"
                     % (nat[0]["device"], nat[0]["torch"], nat[0]["nccl"], nat[0]["steps"],
                        nat[0]["steps"] - nat[0]["warm"], min(nat[0]["lengths"]), max(nat[0]["lengths"]),
                        "; ".join("unbound" if c == "none" else c for c in bound)))
        if not ok_loss:
            bad.append("%s: cuemm's losses outside the native spread" % mode)
        lines.append("")
    if bad:
        lines.append("FAILED: " + "; ".join(bad))
    else:
        lines.append("torchrun proof: all checks passed")
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(out, "torchrun.md"), "w") as f:
        f.write(text + "\n")
    return 1 if bad else 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--report", metavar="DIR")
    p.add_argument("--mode", choices=("ddp", "fsdp"))
    p.add_argument("--alloc", choices=("native", "cuemm"))
    p.add_argument("--out", default=".")
    p.add_argument("--launch", dest="run", type=int, default=1,
                   help="the number of this launch (torchrun would take --run for its own --run-path)")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warm", type=int, default=8)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--no-log", dest="log", action="store_false",
                   help="cuemm's launches write no event log (CUEMM_LOG)")
    p.add_argument("--profile", type=int, metavar="STEP",
                   help="rank 0 profiles step STEP (torch.profiler) into DIR/profile-*")
    p.add_argument("--no-bind", dest="bind", action="store_false",
                   help="leave the ranks where the scheduler puts them (by default each local rank is "
                        "bound to its share of the CPUs)")
    a = p.parse_args()
    if a.report:
        sys.exit(report(a.report))
    if not a.mode or not a.alloc or "RANK" not in os.environ:
        p.error("run it under torchrun with --mode and --alloc, or give --report DIR")
    os.makedirs(a.out, exist_ok=True)
    train(a)


if __name__ == "__main__":
    main()
