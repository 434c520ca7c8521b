#!/usr/bin/env python3
"""suspend-proof.py: PyTorch on cuemm gives a GPU's memory back and takes
it again without losing a tensor (cuemm.torch.region / suspend / resume).

  suspend-proof.py OUTDIR [--quick] [--steps N] [--rounds R] [--part train,alternate,graph]

Three parts, each its own process (so one failing does not hide the
others), run one after the other on one GPU:

  train      a small transformer language model (--quick: a tiny one)
             trained with Adam, deterministic (torch.use_deterministic_
             algorithms, TF32 off, math attention, CUBLAS_WORKSPACE_CONFIG),
             its weights and optimizer state made in region("weights"),
             activations and gradients in region("act").  First a
             reference run of 2N steps (weights in "ref-weights", freed
             after); then N steps, suspend("act") (discarded),
             suspend("weights", keep=True); the memory figures before and
             after (torch.cuda.mem_get_info, cuemm's held bytes of every
             tag, nvidia-smi's used memory for this process); a SECOND
             process allocates 90% of the GPU's memory, computes on it and
             exits; resume both and train N more steps.  The 2N losses must
             equal the reference run's, step for step, bit for bit.
  alternate  inference and training taking turns in one process, R rounds
             (default 10): a trainer (weights+Adam kept in "train-w",
             activations in "train-act" discarded) and an inference model
             (weights kept in "inf-w", a KV cache discarded in "kv"); at each
             switch the leaving side's tags are suspended and the coming
             side's resumed; the suspend and resume times and the device's
             used memory at every round, and the inference model's answer
             to a fixed probe checked unchanged in every round.
  graph      a CUDA graph captured (torch.cuda.graph) inside region("g"),
             replayed; suspend("g", keep=True), resume("g"); its output
             kept, a replay of the same input bit-identical to the one
             before, and a replay of a new input matching eager.

Libraries' lazily made buffers (cuBLAS's workspace) are made in the
default tag by a warm-up before any region, since a buffer made in a tag
that is suspended while other work runs would be unmapped under it.

Writes OUTDIR/suspend-proof.md (the tables, also printed) and
OUTDIR/suspend-proof.json, and each part's log OUTDIR/suspend-<part>.log.
Needs torch with CUDA and the cuemm package importable (PYTHONPATH, or an
installed cuemm) with libcuemm found (CUEMM_LIBRARY or the package's).
Exit status 0 when every part ran and every check held.
"""
import argparse
import json
import os
import subprocess
import sys
import time

MiB = float(1 << 20)
GiB = float(1 << 30)
PARTS = ("train", "alternate", "graph")


# ---- figures shared by the parts (in the children) -------------------------

def nvsmi_used_mib(pid):
    """nvidia-smi's used memory of process `pid`, MiB; None when it cannot
    tell (no nvidia-smi, or a container whose process ids differ)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                              "--format=csv,noheader,nounits"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, universal_newlines=True, timeout=20).stdout
    except Exception:
        return None
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0] == str(pid):
            try:
                return float(parts[1])
            except ValueError:
                return None
    return None


def held_bytes(tags_):
    """cuemm's bytes held from the driver, summed over the default manager
    and the tags named."""
    import cuemm.torch as ct
    total = ct.stats()["held_bytes"]
    for t in tags_:
        total += ct.tag_stats(t)["held_bytes"]
    return total


def used_bytes(torch):
    free, total = torch.cuda.mem_get_info()
    return total - free


def setup_torch(deterministic=True):
    # The small deterministic cuBLAS workspace: it lives in the default tag
    # (see warm_up) and stays when the tags are suspended.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    import torch
    import cuemm.torch as ct
    ct.use()
    # The default tag holds only the libraries' small buffers that live as
    # long as the process (warm_up): a growth unit of 2 MiB for its manager,
    # made by the first allocation below, so that what stays mapped while
    # the tags are suspended is that small.  The tags' managers, made
    # later, take the usual unit.
    chunk = os.environ.get("CUEMM_POOL_CHUNK")
    os.environ["CUEMM_POOL_CHUNK"] = "2MiB"
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        # The math attention: deterministic forward and backward.
        for name in ("enable_flash_sdp", "enable_mem_efficient_sdp", "enable_cudnn_sdp"):
            fn = getattr(torch.backends.cuda, name, None)
            if fn is not None:
                fn(False)
    torch.cuda.init()
    warm_up(torch)
    if chunk is None:
        del os.environ["CUEMM_POOL_CHUNK"]
    else:
        os.environ["CUEMM_POOL_CHUNK"] = chunk
    return torch, ct


def warm_up(torch):
    """One matmul on the default stream, forward and backward, and one
    random draw, before any region: the libraries' lazily made buffers (the
    cuBLAS workspaces of the stream, the generator's state) go to the
    default tag, which is never suspended, and not to a tag whose memory is
    gone while other work runs."""
    a = torch.ones(64, 64, device="cuda", requires_grad=True)
    bias = torch.ones(64, device="cuda", requires_grad=True)
    # A plain matmul and a linear layer with its bias (cuBLASLt), forward
    # and backward (the autograd thread has a cuBLAS handle of its own).
    ((a @ a).sum() + torch.nn.functional.linear(a, a, bias).sum()).backward()
    # The default CUDA generator, whatever device state it keeps.
    torch.randn(16, device="cuda")
    torch.cuda.synchronize()


def resume_if_suspended(ct, tag):
    if ct.tag_pool_stats(tag)["suspended"]:
        ct.resume(tag)


def make_lm(torch, vocab, d, layers, heads, seed):
    """A small decoder-style language model, no dropout (deterministic)."""
    nn = torch.nn
    torch.manual_seed(seed)

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True, norm_first=True)
            self.body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab)

        def forward(self, x):
            n = x.shape[1]
            mask = torch.triu(torch.full((n, n), float("-inf"), device=x.device), diagonal=1)
            return self.head(self.norm(self.body(self.emb(x), mask=mask, is_causal=True)))

    return LM().cuda()


def batch(torch, step, b, n, vocab, seed):
    g = torch.Generator(device="cuda")
    g.manual_seed(seed * 100003 + step)
    x = torch.randint(0, vocab, (b, n + 1), device="cuda", generator=g)
    return x[:, :-1], x[:, 1:]


def train_step(torch, ct, model, opt, step, cfg, act="act", weights="weights"):
    x, y = None, None
    with ct.region(act):
        x, y = batch(torch, step, cfg["batch"], cfg["seq"], cfg["vocab"], cfg["seed"])
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, cfg["vocab"]), y.reshape(-1))
        loss.backward()
    with ct.region(weights):
        opt.step()  # Adam's state is made at the first step: in the weights' tag
    opt.zero_grad(set_to_none=True)
    v = loss.item()
    del x, y, logits, loss
    return v


def config(quick):
    if quick:
        return dict(vocab=2048, d=256, layers=2, heads=4, batch=8, seq=64, seed=1234)
    # ~100M parameters: 0.4 GB of weights, 0.8 GB of Adam state.
    return dict(vocab=8192, d=1024, layers=8, heads=16, batch=16, seq=256, seed=1234)


# ---- part 1: train, suspend, another process, resume, train on -------------

HOG = r"""
import sys, torch
frac = float(sys.argv[1])
free, total = torch.cuda.mem_get_info()
want = int(total * frac)
how = "90% of total"
if want > free - (256 << 20):
    want = int(free * frac)
    how = "90%% of free (%.2f GiB free)" % (free / 2**30)
x = torch.empty(want, dtype=torch.uint8, device="cuda")
x.fill_(7)
s = int(x[:: 1 << 20].sum().item())
torch.cuda.synchronize()
print("HOG allocated %.2f GiB (%s), computed (sum %d), device used %.2f GiB"
      % (want / 2**30, how, s, (total - torch.cuda.mem_get_info()[0]) / 2**30), flush=True)
"""


def part_train(args):
    torch, ct = setup_torch()
    cfg = config(args.quick)
    n = args.steps
    res = {"config": cfg, "steps": n}

    # Reference: 2N uninterrupted steps on the default tag.
    with ct.region("ref-weights"):
        model = make_lm(torch, cfg["vocab"], cfg["d"], cfg["layers"], cfg["heads"], cfg["seed"])
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
    ref = [train_step(torch, ct, model, opt, s, cfg, act="act", weights="ref-weights") for s in range(2 * n)]
    params = sum(p.numel() for p in model.parameters())
    del model, opt
    torch.cuda.synchronize()
    ct.empty_cache()
    res["params"] = params

    # The run that is suspended: weights and Adam state in "weights".
    with ct.region("weights"):
        model = make_lm(torch, cfg["vocab"], cfg["d"], cfg["layers"], cfg["heads"], cfg["seed"])
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
    run = [train_step(torch, ct, model, opt, s, cfg) for s in range(n)]
    torch.cuda.synchronize()
    ct.empty_cache()  # the default tag's cache (the reference run's) goes back too
    tags_ = ("weights", "act", "ref-weights")
    before = {"used": used_bytes(torch), "held": held_bytes(tags_), "smi": nvsmi_used_mib(os.getpid()),
              "default_held": ct.stats()["held_bytes"],
              "weights_live": ct.tag_stats("weights")["live_bytes"], "act_live": ct.tag_stats("act")["live_bytes"]}
    t0 = time.perf_counter()
    ct.suspend("act")
    t1 = time.perf_counter()
    ct.suspend("weights", keep=True)
    t2 = time.perf_counter()
    after = {"used": used_bytes(torch), "held": held_bytes(tags_), "smi": nvsmi_used_mib(os.getpid()),
             "default_held": ct.stats()["held_bytes"],
             "kept": ct.tag_pool_stats("weights")["kept_bytes"],
             "need": ct.tag_pool_stats("weights")["suspended_need_bytes"]
             + ct.tag_pool_stats("act")["suspended_need_bytes"]}
    res["suspend_s"] = {"act": t1 - t0, "weights_keep": t2 - t1}

    hog = subprocess.run([sys.executable, "-c", HOG, "0.9"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         universal_newlines=True, timeout=300)
    res["hog"] = {"rc": hog.returncode, "out": hog.stdout.strip()[-2000:]}
    print(hog.stdout.strip(), flush=True)

    t0 = time.perf_counter()
    ct.resume("weights")
    t1 = time.perf_counter()
    ct.resume("act")
    t2 = time.perf_counter()
    res["resume_s"] = {"weights_keep": t1 - t0, "act": t2 - t1}
    resumed = {"used": used_bytes(torch), "held": held_bytes(tags_)}
    run += [train_step(torch, ct, model, opt, s, cfg) for s in range(n, 2 * n)]
    res.update(before=before, after=after, resumed=resumed, ref=ref, run=run)
    res["identical"] = ref == run
    res["first_diff"] = next((i for i, (a, b) in enumerate(zip(ref, run)) if a != b), None)
    res["given_back"] = 1 - after["held"] / before["held"] if before["held"] else None
    res["held_after_frac"] = after["held"] / before["held"] if before["held"] else None
    res["adapter"] = ct.adapter_stats()
    # The 1% target is for the full model: the quick one's few MiB are of
    # the order of the default tag's chunk.
    res["target_checked"] = not args.quick
    res["ok"] = (res["identical"] and hog.returncode == 0 and res["held_after_frac"] is not None
                 and (args.quick or res["held_after_frac"] <= 0.01) and res["adapter"]["alloc_failures"] == 0)
    return res


# ---- part 2: inference and training taking turns ---------------------------

def part_alternate(args):
    torch, ct = setup_torch()
    cfg = config(args.quick)
    kv_bytes = (64 << 20) if args.quick else (8 << 30)
    res = {"rounds": [], "kv_bytes": kv_bytes}
    with ct.region("train-w"):
        trainer = make_lm(torch, cfg["vocab"], cfg["d"], cfg["layers"], cfg["heads"], cfg["seed"])
        opt = torch.optim.Adam(trainer.parameters(), lr=1e-3, foreach=False)
    with ct.region("inf-w"):
        server = make_lm(torch, cfg["vocab"], cfg["d"], cfg["layers"], cfg["heads"], cfg["seed"] + 1).eval()
        probe = torch.randint(0, cfg["vocab"], (2, cfg["seq"]), device="cuda",
                              generator=torch.Generator(device="cuda").manual_seed(5))
    ref_answer = None
    # Start in training: the inference side's tags are suspended.
    ct.suspend("inf-w", keep=True)
    ct.suspend("kv")
    step = 0

    def timed(fn, *a, **k):
        t = time.perf_counter()
        fn(*a, **k)
        return (time.perf_counter() - t) * 1e3

    for r in range(args.rounds):
        row = {"round": r}
        # Training turn.
        row["resume_train_ms"] = (timed(resume_if_suspended, ct, "train-w")
                                  + timed(resume_if_suspended, ct, "train-act"))
        losses = [train_step(torch, ct, trainer, opt, step + i, cfg, act="train-act", weights="train-w")
                  for i in range(args.train_steps)]
        step += args.train_steps
        row["loss"] = losses[-1]
        torch.cuda.synchronize()
        row["used_training_gib"] = used_bytes(torch) / GiB
        row["suspend_train_ms"] = (timed(ct.suspend, "train-act") + timed(ct.suspend, "train-w", keep=True))
        row["used_between_gib"] = used_bytes(torch) / GiB
        # Inference turn.
        row["resume_inf_ms"] = timed(ct.resume, "inf-w") + timed(ct.resume, "kv")
        with torch.no_grad():
            with ct.region("kv"):
                kv = torch.empty(kv_bytes // 2, dtype=torch.bfloat16, device="cuda")
                kv.fill_(float(r))  # the cache's pages, written as a server writes them
                answer = server(probe).float()
        if ref_answer is None:
            ref_answer = answer.clone()
        row["probe_same"] = bool(torch.equal(answer, ref_answer))
        del kv, answer
        torch.cuda.synchronize()
        row["used_inference_gib"] = used_bytes(torch) / GiB
        row["suspend_inf_ms"] = timed(ct.suspend, "kv") + timed(ct.suspend, "inf-w", keep=True)
        row["used_after_gib"] = used_bytes(torch) / GiB
        res["rounds"].append(row)
        print("round %d: %s" % (r, json.dumps(row)), flush=True)
    for t in ("train-w", "train-act", "inf-w", "kv"):
        resume_if_suspended(ct, t)
    res["adapter"] = ct.adapter_stats()
    res["ok"] = all(r["probe_same"] for r in res["rounds"]) and res["adapter"]["alloc_failures"] == 0
    return res


# ---- part 3: a CUDA graph across a suspension -------------------------------

def part_graph(args):
    torch, ct = setup_torch()
    d = 256 if args.quick else 2048
    res = {}
    with ct.region("g"):
        torch.manual_seed(3)
        net = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d)).cuda()
        static_x = torch.randn(64, d, device="cuda")
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s), torch.no_grad():
            for _ in range(3):
                net(static_x)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(g):
            static_y = net(static_x)
    x1 = torch.randn(64, d, device="cuda", generator=torch.Generator(device="cuda").manual_seed(11))
    static_x.copy_(x1)
    g.replay()
    torch.cuda.synchronize()
    with torch.no_grad():
        eager1 = net(x1)
    y1 = static_y.clone()
    res["before_close"] = bool(torch.allclose(static_y, eager1, rtol=1e-4, atol=1e-5))
    ps = ct.tag_pool_stats("g")
    res["g_mapped_before"] = ps["mapped_bytes"]
    t = time.perf_counter()
    ct.suspend("g", keep=True)
    res["suspend_ms"] = (time.perf_counter() - t) * 1e3
    res["g_mapped_suspended"] = ct.tag_pool_stats("g")["mapped_bytes"]
    res["kept_bytes"] = ct.tag_pool_stats("g")["kept_bytes"]
    t = time.perf_counter()
    ct.resume("g")
    res["resume_ms"] = (time.perf_counter() - t) * 1e3
    res["output_kept"] = bool(torch.equal(static_y, y1))
    static_x.copy_(x1)
    g.replay()
    torch.cuda.synchronize()
    res["replay_same"] = bool(torch.equal(static_y, y1))
    x2 = torch.randn(64, d, device="cuda", generator=torch.Generator(device="cuda").manual_seed(12))
    static_x.copy_(x2)
    g.replay()
    torch.cuda.synchronize()
    with torch.no_grad():
        eager2 = net(x2)
    res["after_close"] = bool(torch.allclose(static_y, eager2, rtol=1e-4, atol=1e-5))
    res["adapter"] = ct.adapter_stats()
    res["ok"] = (res["before_close"] and res["after_close"] and res["output_kept"] and res["replay_same"]
                 and res["g_mapped_suspended"] == 0 and res["adapter"]["alloc_failures"] == 0)
    return res


# ---- the parent --------------------------------------------------------------

def child(args):
    fn = {"train": part_train, "alternate": part_alternate, "graph": part_graph}[args.child]
    res = fn(args)
    print("RESULT " + json.dumps(res), flush=True)
    return 0


def run_part(part, args, out):
    cmd = [sys.executable, os.path.abspath(__file__), out, "--child", part, "--steps", str(args.steps),
           "--rounds", str(args.rounds), "--train-steps", str(args.train_steps)] + (["--quick"] if args.quick else [])
    log = os.path.join(out, "suspend-%s.log" % part)
    t = time.time()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                           timeout=args.timeout)
        text, rc = p.stdout, p.returncode
    except subprocess.TimeoutExpired as e:
        text, rc = (e.stdout or "") if isinstance(e.stdout, str) else "", "timeout"
    with open(log, "w") as f:
        f.write(text)
    res = None
    for line in text.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[7:])
    if res is None:
        tail = "\n".join(text.splitlines()[-15:])
        res = {"ok": False, "error": "exit %s, no result; the log's end:\n%s" % (rc, tail)}
    res["wall_s"] = time.time() - t
    return res


def fmt_gib(b):
    return "%.3f" % (b / GiB) if b is not None else "n/a"


def report(results, args):
    L = ["# suspend-proof (%s)" % ("quick" if args.quick else "full"), ""]
    r = results.get("train")
    if r:
        L.append("## train, suspend, a second process, resume, train on")
        if "error" in r:
            L += ["FAILED: " + r["error"], ""]
        else:
            b, a, z = r["before"], r["after"], r["resumed"]
            L += ["model: %.1fM parameters (%s); %d + %d steps" % (r["params"] / 1e6, r["config"], r["steps"], r["steps"]),
                  "",
                  "| figure | before suspend | suspended | resumed |",
                  "|---|---|---|---|",
                  "| device used, mem_get_info (GiB) | %s | %s | %s |" % (fmt_gib(b["used"]), fmt_gib(a["used"]), fmt_gib(z["used"])),
                  "| cuemm held, all tags (GiB) | %s | %s | %s |" % (fmt_gib(b["held"]), fmt_gib(a["held"]), fmt_gib(z["held"])),
                  "| nvidia-smi, this process (MiB) | %s | %s | |" % (b["smi"], a["smi"]),
                  "",
                  "held after / before: %.4f%% (target at most 1%%%s; the default tag's part %.1f MiB before, "
                  "%.1f MiB after); kept in host memory %.3f GiB; resume maps %.3f GiB"
                  % (100 * (r["held_after_frac"] or 0), "" if r.get("target_checked") else ", not checked in quick mode",
                     b["default_held"] / MiB, a["default_held"] / MiB, a["kept"] / GiB, a["need"] / GiB),
                  "suspend act %.1f ms, weights (keep) %.1f ms; resume weights %.1f ms, act %.1f ms"
                  % (1e3 * r["suspend_s"]["act"], 1e3 * r["suspend_s"]["weights_keep"],
                     1e3 * r["resume_s"]["weights_keep"], 1e3 * r["resume_s"]["act"]),
                  "second process: %s (exit %s)" % (r["hog"]["out"].splitlines()[-1] if r["hog"]["out"] else "",
                                                   r["hog"]["rc"]),
                  "losses identical to the uninterrupted run, step for step: %s%s"
                  % ("YES" if r["identical"] else "NO",
                     "" if r["identical"] else " (first difference at step %s)" % r["first_diff"]),
                  "", "| step | reference loss | suspended run's loss |", "|---|---|---|"]
            for i, (x, y) in enumerate(zip(r["ref"], r["run"])):
                L.append("| %d%s | %.9g | %.9g |" % (i, " (after resume)" if i == r["steps"] else "", x, y))
            L.append("")
    r = results.get("alternate")
    if r:
        L.append("## inference and training taking turns")
        if "error" in r:
            L += ["FAILED: " + r["error"], ""]
        else:
            L += ["KV cache %.2f GiB; times in ms, memory = device used (GiB)" % (r["kv_bytes"] / GiB), "",
                  "| round | resume train | suspend train | resume inference | suspend inference | used training "
                  "| used inference | used between | loss | probe same |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
            for x in r["rounds"]:
                L.append("| %d | %.1f | %.1f | %.1f | %.1f | %.3f | %.3f | %.3f | %.6g | %s |" % (
                    x["round"], x["resume_train_ms"], x["suspend_train_ms"], x["resume_inf_ms"], x["suspend_inf_ms"],
                    x["used_training_gib"], x["used_inference_gib"], x["used_between_gib"], x["loss"],
                    "yes" if x["probe_same"] else "NO"))
            L.append("")
    r = results.get("graph")
    if r:
        L.append("## a CUDA graph across suspend and resume")
        if "error" in r:
            L += ["FAILED: " + r["error"], ""]
        else:
            L += ["replay matches eager before: %s; graph output kept through suspend and resume: %s; "
                  "replay of the same input after resume bit-identical to the one before: %s; replay of a new "
                  "input matches eager: %s" % (r["before_close"], r["output_kept"], r["replay_same"], r["after_close"]),
                  "tag g: %.1f MiB mapped, %.1f MiB while suspended, %.1f MiB kept; suspend %.1f ms, resume %.1f ms"
                  % (r["g_mapped_before"] / MiB, r["g_mapped_suspended"] / MiB, r["kept_bytes"] / MiB,
                     r["suspend_ms"], r["resume_ms"]), ""]
    L.append("| part | result | seconds |")
    L.append("|---|---|---|")
    for part, r in results.items():
        L.append("| %s | %s | %.0f |" % (part, "ok" if r.get("ok") else "FAILED", r.get("wall_s", 0)))
    return "\n".join(L) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--steps", type=int, default=None, help="N: steps before and after the suspension")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--train-steps", type=int, default=None, help="training steps per round (alternate)")
    ap.add_argument("--part", default=",".join(PARTS))
    ap.add_argument("--timeout", type=int, default=240)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.steps is None:
        args.steps = 4 if args.quick else 20
    if args.train_steps is None:
        args.train_steps = 2 if args.quick else 5
    if args.child:
        return child(args)
    os.makedirs(args.out, exist_ok=True)
    results = {}
    for part in args.part.split(","):
        if part not in PARTS:
            sys.exit("suspend-proof: no part %r (parts: %s)" % (part, ", ".join(PARTS)))
        print("== %s" % part, flush=True)
        results[part] = run_part(part, args, args.out)
    text = report(results, args)
    print(text)
    with open(os.path.join(args.out, "suspend-proof.md"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, "suspend-proof.json"), "w") as f:
        json.dump(results, f, indent=1)
    return 0 if all(r.get("ok") for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
