#!/usr/bin/env python3
"""torch-trace.py: allocation traces of real PyTorch workloads, written as
RMM logging_resource_adaptor logs for tools/cuemm-replay.

Each workload runs in a process of its own (a fresh caching allocator, so
that its trace starts empty and torch's peak figures are its own) with
PyTorch's allocator history on (torch.cuda.memory._record_memory_history,
no stack traces); at its end torch.cuda.memory._snapshot() gives the
device's trace, which is written as CSV:

    Thread,Time,Action,Pointer,Size,Stream
    0,14:02:11.123456,allocate,0x7f2a40000000,2097152,0x0

'alloc' becomes allocate, 'free_requested' free (the moment the program
let go of the block; 'free_completed', when a block used on other streams
can be reused, is the allocator's business), 'oom' an `allocate failure`
line; the segment events are not written.  Sizes are the block sizes
PyTorch reports (its rounding included), streams the cudaStream_t as hex
(0x0: the default stream), times the entries' time_us as UTC time of day.

Workloads (all together about 2 minutes on an H100, peaks under 36 GiB):
  gpt2      a GPT-2-small-sized decoder (12 layers, d 768, 12 heads, vocab
            50257; torch.nn only) trained with AdamW under bf16 autocast,
            30 steps of batch 8 at random sequence lengths 64..1024
  resnet50  ResNet-50 (torchvision's, else a bottleneck ResNet-50 built
            here) trained with SGD under bf16 autocast, 20 steps at random
            batch sizes 16..64 of 224x224 images
  serve     an inference server: a 12-layer decoder in eval mode serving
            200 requests of random batch 1..8 and length 16..512 on two
            streams in turn; each request's logits go to the other stream
            for the top-5 (wait_stream + record_stream), results collected
            a few requests later
  vit       a ViT-Base-sized vision transformer (patch 16, 12 layers, d 768)
            trained with AdamW under bf16 autocast, 20 steps of random batch
            16..96 at random image sides 160..256 (101 to 257 tokens)
  unet      a diffusion-style UNet (four levels of 128..512 channels, the
            skips held across the forward pass, attention at the lowest
            level) trained with AdamW under bf16 autocast, 20 steps of
            random batch 4..24 at random image sides 64..256
  lstm      a two-layer LSTM language model (d 1024, vocab 32000) trained in
            fp32 with Adam, 25 steps of random batch 4..32 and length
            32..512, sampling every fifth step: a prompt, then 32..128
            tokens one at a time, the output grown by concatenation

Usage:
  torch-trace.py [--out DIR] [--workloads gpt2,resnet50,serve,...] [--quick]
                 [--max-entries N] [--seed S] [--timeout SECONDS]
  torch-trace.py --self-test [--out DIR]   (the conversion alone, no torch)
"""
import argparse
import os
import random
import statistics
import subprocess
import sys
import time

HEADER = "Thread,Time,Action,Pointer,Size,Stream"
DEV = "cuda"  # where the workloads run; only a dry run of their code changes it
WORKLOADS = ("gpt2", "resnet50", "serve", "vit", "unet", "lstm")
GiB = float(1 << 30)


def time_of_day(us):
    """RMM's timestamp: %H:%M:%S.%f (microseconds), UTC time of day."""
    s, frac = divmod(int(us), 1000000)
    return "%02d:%02d:%02d.%06d" % (s // 3600 % 24, s // 60 % 60, s % 60, frac)


def convert(entries, path):
    """Writes the trace entries as an RMM log; returns what the trace holds."""
    live = {}
    cur = peak = 0
    sizes = []
    streams = set()
    events = failures = unknown_frees = 0
    other = {}
    # Written aside and renamed at the end: a run stopped halfway leaves no
    # truncated log for the replay to read.
    with open(path + ".part", "w") as f:
        f.write(HEADER + "\n")
        for i, e in enumerate(entries):
            action = e.get("action")
            if action == "alloc":
                kind = "allocate"
            elif action == "free_requested":
                kind = "free"
            elif action == "oom":
                kind = "allocate failure"
            else:
                other[action] = other.get(action, 0) + 1
                continue
            addr = 0 if kind == "allocate failure" else int(e["addr"])
            size = int(e["size"])
            stream = int(e.get("stream", 0))
            thread = int(e.get("thread_id", e.get("tid", 0)))
            t = time_of_day(e["time_us"]) if "time_us" in e else time_of_day(i)
            f.write("%d,%s,%s,0x%x,%d,0x%x\n" % (thread, t, kind, addr, size, stream))
            if kind == "allocate failure":
                failures += 1
                continue
            events += 1
            streams.add(stream)
            if kind == "allocate":
                if addr in live:  # its free is missing: counted live to the end, as the replay does
                    live[("lost", i)] = live.pop(addr)
                live[addr] = size
                sizes.append(size)
                cur += size
                peak = max(peak, cur)
            elif addr in live:
                cur -= live.pop(addr)
            else:
                unknown_frees += 1
    os.replace(path + ".part", path)
    return {
        "events": events,
        "streams": len(streams),
        "peak_live": peak,
        "sizes": sizes,
        "failures": failures,
        "unknown_frees": unknown_frees,
        "live_at_end": cur,
        "other": other,
    }


def describe(name, path, st, entries, max_entries, reserved=None, seconds=None):
    sizes = sorted(st["sizes"])
    print("trace %s: %s" % (name, path))
    print("  events %d (allocate + free), streams %d, peak live %d bytes (%.3f GiB), %d bytes live at the end"
          % (st["events"], st["streams"], st["peak_live"], st["peak_live"] / GiB, st["live_at_end"]))
    if sizes:
        print("  sizes: min %d, median %d, max %d bytes over %d allocations"
              % (sizes[0], int(statistics.median(sizes)), sizes[-1], len(sizes)))
    if reserved is not None:
        print("  torch max_memory_reserved %d bytes (%.3f GiB, %.2fx peak live)"
              % (reserved, reserved / GiB, reserved / st["peak_live"] if st["peak_live"] else 0.0))
    if st["failures"] or st["unknown_frees"]:
        print("  %d allocate failures, %d frees of blocks allocated before the history began"
              % (st["failures"], st["unknown_frees"]))
    if st["other"]:
        print("  not written: " + ", ".join("%s %d" % kv for kv in sorted(st["other"].items())))
    if max_entries and entries >= max_entries:
        print("  WARNING: %d entries, the history's limit: the oldest events were overwritten" % entries)
    if seconds is not None:
        print("  workload ran %.1f s" % seconds)
    sys.stdout.flush()


# ---- the workloads (torch is imported only here) ---------------------------

def train_step(torch, opt, forward, loss_of, amp=True):
    """One optimizer step as the training workloads take it: the forward
    pass (under bf16 autocast unless amp is off), the loss outside it,
    backward, the step, the gradients dropped (set to None) and the loss
    read back, which waits for the step's work."""
    with torch.autocast(DEV, dtype=torch.bfloat16, enabled=amp):
        out = forward()
    loss = loss_of(out)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    loss.item()


def encoder_stack(nn, layers, d, heads, dropout):
    """`layers` pre-norm transformer layers of width d (GELU, MLP of 4d)."""
    layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=dropout, activation="gelu",
                                       batch_first=True, norm_first=True)
    try:
        return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
    except TypeError:  # older torch: no nested-tensor switch
        return nn.TransformerEncoder(layer, layers)


def gpt_model(torch, nn, layers, d=768, heads=12, vocab=50257, ctx=1024):
    import inspect
    causal_hint = "is_causal" in inspect.signature(nn.TransformerEncoder.forward).parameters

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(vocab, d)
            self.pos = nn.Embedding(ctx, d)
            self.blocks = encoder_stack(nn, layers, d, heads, dropout=0.1)
            self.norm = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab, bias=False)
            self.head.weight = self.tok.weight

        def forward(self, idx):
            n = idx.shape[1]
            x = self.tok(idx) + self.pos(torch.arange(n, device=idx.device))
            mask = torch.full((n, n), float("-inf"), device=idx.device).triu(1)
            # With the causal hint the attention runs as one fused kernel
            # (no n x n matrices), as GPT-2 training does today.
            if causal_hint:
                x = self.blocks(x, mask=mask, is_causal=True)
            else:
                x = self.blocks(x, mask=mask)
            return self.head(self.norm(x))

    return Decoder()


def run_gpt2(torch, rng, quick):
    nn, F = torch.nn, torch.nn.functional
    vocab, batch = 50257, 8
    steps, lo, hi = (5, 64, 256) if quick else (30, 64, 1024)
    model = gpt_model(torch, nn, 12).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    for _ in range(steps):
        n = rng.randint(lo, hi)
        idx = torch.randint(0, vocab, (batch, n + 1), device=DEV)
        x, y = idx[:, :-1], idx[:, 1:]
        train_step(torch, opt, lambda: model(x),
                   lambda logits: F.cross_entropy(logits.float().reshape(-1, vocab), y.reshape(-1)))
        del idx, x, y
    return (model, opt)


def resnet50(torch):
    try:
        import torchvision
        return torchvision.models.resnet50(weights=None), "torchvision"
    except Exception:
        pass
    nn = torch.nn

    class Bottleneck(nn.Module):
        def __init__(self, cin, width, stride):
            super().__init__()
            cout = width * 4
            self.body = nn.Sequential(
                nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
                nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
                nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout))
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            self.relu = nn.ReLU(inplace=True)

        def forward(self, x):
            return self.relu(self.body(x) + (x if self.down is None else self.down(x)))

    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
              nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for b in range(blocks):
            layers.append(Bottleneck(cin, width, stride if b == 0 else 1))
            cin = width * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, 1000)]
    return nn.Sequential(*layers), "built here (torchvision not importable)"


def run_resnet50(torch, rng, quick):
    F = torch.nn.functional
    steps, lo, hi = (3, 8, 16) if quick else (20, 16, 64)
    model, origin = resnet50(torch)
    print("  resnet50: %s" % origin)
    model = model.to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    for _ in range(steps):
        b = rng.randint(lo, hi)
        x = torch.randn(b, 3, 224, 224, device=DEV)
        y = torch.randint(0, 1000, (b,), device=DEV)
        train_step(torch, opt, lambda: model(x), lambda out: F.cross_entropy(out.float(), y))
        del x, y
    return (model, opt)


def run_serve(torch, rng, quick):
    vocab = 50257
    requests, lo, hi = (20, 16, 128) if quick else (200, 16, 512)
    model = gpt_model(torch, torch.nn, 12).to(DEV).eval()
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    results = []
    with torch.no_grad():
        for i in range(requests):
            s, post = streams[i % 2], streams[(i + 1) % 2]
            with torch.cuda.stream(s):
                tokens = torch.randint(0, vocab, (rng.randint(1, 8), rng.randint(lo, hi)), device=DEV)
                with torch.autocast(DEV, dtype=torch.bfloat16):
                    logits = model(tokens)[:, -1, :]
            # The other stream takes the logits over: it waits for them, and
            # the allocator must not reuse them until it is done.
            post.wait_stream(s)
            logits.record_stream(post)
            with torch.cuda.stream(post):
                top = torch.topk(torch.softmax(logits.float(), dim=-1), 5).indices
            results.append((post, top))
            del tokens, logits, top
            if len(results) > 4:  # a reply goes out a few requests later
                st, t = results.pop(0)
                st.synchronize()
                t.cpu()
    torch.cuda.synchronize()
    return (model, streams, results)


def run_vit(torch, rng, quick):
    nn, F = torch.nn, torch.nn.functional
    d, heads, layers, patch, classes = 768, 12, 12, 16, 1000
    steps, lo, hi = (3, 8, 16) if quick else (20, 16, 96)
    sides = (160, 192, 224, 256)

    class ViT(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Conv2d(3, d, patch, patch)
            self.cls = nn.Parameter(torch.zeros(1, 1, d))
            self.pos = nn.Parameter(torch.zeros(1, (max(sides) // patch) ** 2 + 1, d))
            self.blocks = encoder_stack(nn, layers, d, heads, dropout=0.0)
            self.norm = nn.LayerNorm(d)
            self.head = nn.Linear(d, classes)

        def forward(self, x):
            x = self.embed(x).flatten(2).transpose(1, 2)
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1)
            x = self.blocks(x + self.pos[:, :x.shape[1]])
            return self.head(self.norm(x[:, 0]))

    model = ViT().to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05)
    for _ in range(steps):
        b, side = rng.randint(lo, hi), rng.choice(sides)
        x = torch.randn(b, 3, side, side, device=DEV)
        y = torch.randint(0, classes, (b,), device=DEV)
        train_step(torch, opt, lambda: model(x), lambda out: F.cross_entropy(out.float(), y))
        del x, y
    return (model, opt)


def run_unet(torch, rng, quick):
    nn, F = torch.nn, torch.nn.functional
    steps, lo, hi = (3, 2, 4) if quick else (20, 4, 24)
    sides = (64, 96, 128, 160, 192, 256)
    tdim = 512

    class Res(nn.Module):
        def __init__(self, cin, cout):
            super().__init__()
            self.n1, self.c1 = nn.GroupNorm(32, cin), nn.Conv2d(cin, cout, 3, padding=1)
            self.t = nn.Linear(tdim, cout)
            self.n2, self.c2 = nn.GroupNorm(32, cout), nn.Conv2d(cout, cout, 3, padding=1)
            self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

        def forward(self, x, t):
            h = self.c1(F.silu(self.n1(x))) + self.t(t)[:, :, None, None]
            return self.c2(F.silu(self.n2(h))) + self.skip(x)

    class Attn(nn.Module):
        def __init__(self, c, heads=8):
            super().__init__()
            self.heads = heads
            self.n, self.qkv, self.out = nn.GroupNorm(32, c), nn.Conv2d(c, 3 * c, 1), nn.Conv2d(c, c, 1)

        def forward(self, x):
            b, c, hh, ww = x.shape
            q, k, v = self.qkv(self.n(x)).reshape(b, 3, self.heads, c // self.heads, hh * ww).unbind(1)
            a = F.scaled_dot_product_attention(q.transpose(-1, -2), k.transpose(-1, -2), v.transpose(-1, -2))
            return x + self.out(a.transpose(-1, -2).reshape(b, c, hh, ww))

    class UNet(nn.Module):
        def __init__(self, ch=(128, 256, 384, 512)):
            super().__init__()
            self.temb = nn.Sequential(nn.Linear(128, tdim), nn.SiLU(), nn.Linear(tdim, tdim))
            self.inp = nn.Conv2d(3, ch[0], 3, padding=1)
            self.downs, self.pools, self.ups = nn.ModuleList(), nn.ModuleList(), nn.ModuleList()
            c = ch[0]
            for co in ch:
                self.downs.append(Res(c, co))
                self.pools.append(nn.Conv2d(co, co, 3, stride=2, padding=1))
                c = co
            self.mid1, self.attn, self.mid2 = Res(c, c), Attn(c), Res(c, c)
            for co in reversed(ch):
                self.ups.append(Res(c + co, co))
                c = co
            self.out = nn.Sequential(nn.GroupNorm(32, c), nn.SiLU(), nn.Conv2d(c, 3, 3, padding=1))

        def forward(self, x, t):
            f = torch.exp(-torch.arange(64, device=x.device, dtype=torch.float32) * (9.21 / 64))
            e = t[:, None].float() * f[None]
            temb = self.temb(torch.cat([e.sin(), e.cos()], dim=1))
            h, skips = self.inp(x), []
            for res, pool in zip(self.downs, self.pools):
                h = res(h, temb)
                skips.append(h)
                h = pool(h)
            h = self.mid2(self.attn(self.mid1(h, temb)), temb)
            for res in self.ups:
                s = skips.pop()
                h = res(torch.cat([F.interpolate(h, size=s.shape[-2:], mode="nearest"), s], dim=1), temb)
            return self.out(h)

    model = UNet().to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(steps):
        b, side = rng.randint(lo, hi), rng.choice(sides)
        x = torch.randn(b, 3, side, side, device=DEV)
        noise = torch.randn_like(x)
        t = torch.randint(0, 1000, (b,), device=DEV)
        train_step(torch, opt, lambda: model(x + noise, t), lambda pred: F.mse_loss(pred.float(), noise))
        del x, noise, t
    return (model, opt)


def run_lstm(torch, rng, quick):
    nn, F = torch.nn, torch.nn.functional
    vocab, d = 32000, 1024
    steps, lo, hi = (3, 16, 64) if quick else (25, 32, 512)

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.rnn = nn.LSTM(d, d, num_layers=2, batch_first=True)
            self.head = nn.Linear(d, vocab)

        def forward(self, idx, state=None):
            y, state = self.rnn(self.emb(idx), state)
            return self.head(y), state

    model = LM().to(DEV)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for i in range(steps):
        idx = torch.randint(0, vocab, (rng.randint(4, 32), rng.randint(lo, hi) + 1), device=DEV)
        train_step(torch, opt, lambda: model(idx[:, :-1])[0],
                   lambda logits: F.cross_entropy(logits.reshape(-1, vocab), idx[:, 1:].reshape(-1)), amp=False)
        del idx
        if i % 5 == 4:
            # Sampling: the prompt at once, then a token at a time, the
            # output grown by concatenation.
            with torch.no_grad():
                out = torch.randint(0, vocab, (rng.randint(1, 8), rng.randint(8, 64)), device=DEV)
                logits, state = model(out)
                for _ in range(rng.randint(32, 128)):
                    nxt = torch.multinomial(torch.softmax(logits[:, -1], dim=-1), 1)
                    out = torch.cat([out, nxt], dim=1)
                    logits, state = model(nxt, state)
                out.cpu()
                del out, logits, state, nxt
    return (model, opt)


def child(args):
    try:
        import torch
    except ImportError as e:
        print("torch-trace: torch is not importable (%s)" % e, file=sys.stderr)
        return 1
    if not torch.cuda.is_available():
        print("torch-trace: torch sees no CUDA device", file=sys.stderr)
        return 1
    rng = random.Random(args.seed)
    torch.manual_seed(args.seed)
    torch.cuda.init()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    hist = torch.cuda.memory._record_memory_history
    try:
        hist(enabled="all", context=None, stacks="python", max_entries=args.max_entries)
    except TypeError:  # the older, boolean interface
        hist(True, record_context=False, trace_alloc_max_entries=args.max_entries,
             trace_alloc_record_context=False)
    run = {"gpt2": run_gpt2, "resnet50": run_resnet50, "serve": run_serve, "vit": run_vit, "unet": run_unet,
           "lstm": run_lstm}[args.child]
    t0 = time.time()
    keep = run(torch, rng, args.quick)
    torch.cuda.synchronize()
    seconds = time.time() - t0
    snap = torch.cuda.memory._snapshot()
    reserved = torch.cuda.max_memory_reserved()
    try:
        hist(enabled=None)
    except TypeError:
        hist(False)
    del keep
    entries = snap["device_traces"][torch.cuda.current_device()]
    path = os.path.join(args.out, "torch-%s.csv" % args.child)
    st = convert(entries, path)
    describe(args.child, path, st, len(entries), args.max_entries, reserved, seconds)
    return 0


# ---- the conversion checked without torch ----------------------------------

def self_test(out):
    t = 1700000000 * 1000000 + 123456  # 22:13:20.123456 UTC
    entries = [
        {"action": "segment_alloc", "addr": 0x7F0000000000, "size": 2097152, "stream": 0, "time_us": t},
        {"action": "alloc", "addr": 0x7F0000000000, "size": 512, "stream": 0, "time_us": t + 1},
        {"action": "alloc", "addr": 0x7F0000000200, "size": 1024, "stream": 0x5555AAAA0000, "time_us": t + 2},
        {"action": "free_requested", "addr": 0x7F0000000000, "size": 512, "stream": 0, "time_us": t + 3},
        {"action": "free_completed", "addr": 0x7F0000000000, "size": 512, "stream": 0, "time_us": t + 4},
        {"action": "alloc", "addr": 0x7F0000000000, "size": 4096, "stream": 0, "time_us": t + 5},
        {"action": "oom", "size": 1 << 40, "device_free": 0, "stream": 0, "time_us": t + 6},
        {"action": "free_requested", "addr": 0x7F0000000200, "size": 1024, "stream": 0x5555AAAA0000,
         "time_us": t + 7},
        {"action": "free_requested", "addr": 0x7F0000300000, "size": 8192, "stream": 0, "time_us": t + 8},
    ]
    want = HEADER + "\n" + "".join(s + "\n" for s in (
        "0,22:13:20.123457,allocate,0x7f0000000000,512,0x0",
        "0,22:13:20.123458,allocate,0x7f0000000200,1024,0x5555aaaa0000",
        "0,22:13:20.123459,free,0x7f0000000000,512,0x0",
        "0,22:13:20.123461,allocate,0x7f0000000000,4096,0x0",
        "0,22:13:20.123462,allocate failure,0x0,1099511627776,0x0",
        "0,22:13:20.123463,free,0x7f0000000200,1024,0x5555aaaa0000",
        "0,22:13:20.123464,free,0x7f0000300000,8192,0x0"))
    path = os.path.join(out, "torch-selftest.csv")
    st = convert(entries, path)
    with open(path) as f:
        got = f.read()
    ok = got == want and st["peak_live"] == 5120 and st["events"] == 6 and st["streams"] == 2 \
        and st["failures"] == 1 and st["unknown_frees"] == 1 and st["live_at_end"] == 4096 \
        and st["other"] == {"segment_alloc": 1, "free_completed": 1}
    describe("selftest", path, st, len(entries), 0)
    if not ok:
        print("torch-trace: self-test failed; wrote:\n" + got + "wanted:\n" + want, file=sys.stderr)
        return 1
    print("self-test passed")
    return 0


def main():
    p = argparse.ArgumentParser(description="Record PyTorch allocation traces as RMM logs.")
    p.add_argument("--out", default=".", help="directory for the torch-WORKLOAD.csv logs")
    p.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated: " + ", ".join(WORKLOADS))
    p.add_argument("--quick", action="store_true", help="few steps, short sequences: a smoke run")
    p.add_argument("--max-entries", type=int, default=4000000, help="the allocator history's limit")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=float, default=70, help="seconds each workload's process may take")
    p.add_argument("--self-test", action="store_true", help="check the conversion on made-up entries")
    p.add_argument("--child", choices=WORKLOADS, help=argparse.SUPPRESS)
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.self_test:
        return self_test(args.out)
    if args.child:
        return child(args)
    names = [w for w in args.workloads.split(",") if w]
    bad = [w for w in names if w not in WORKLOADS]
    if bad or not names:
        p.error("unknown workload %s; choose from %s" % (",".join(bad) or "(none)", ",".join(WORKLOADS)))
    status = 0
    for w in names:
        cmd = [sys.executable, os.path.abspath(__file__), "--child", w, "--out", args.out,
               "--max-entries", str(args.max_entries), "--seed", str(args.seed)]
        if args.quick:
            cmd.append("--quick")
        t0 = time.time()
        try:
            r = subprocess.call(cmd, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            print("torch-trace: %s took longer than %.0f s: stopped, no trace" % (w, args.timeout), file=sys.stderr)
            r = 124
        print("  %s: exit %d after %.1f s (process included)" % (w, r, time.time() - t0))
        sys.stdout.flush()
        status = status or r
    return status


if __name__ == "__main__":
    sys.exit(main())
