"""test-torchrun-report.py: scripts/torchrun-proof.py --report over made-up
launches (no torch needed): the loss check against native's own spread,
the ratios of step time and memory, the medians over the shortest and
longest thirds of the sequence lengths for step times and for the host's
times (a profiled step left out by its number), runs missing, and the CPU
lists of bound ranks."""

import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from taputil import ok, done  # noqa: E402

src = os.environ.get("top_srcdir", os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
script = os.path.join(src, "scripts", "torchrun-proof.py")
GiB = 1 << 30
LENGTHS = [900, 800, 700, 100, 110, 120, 500, 510, 520, 930, 940, 130]  # steps 3.. are timed
WARM = 3


def launch(d, mode, alloc, run, ms_short, ms_long, host_short, losses, peak_gib, skip=None, cpus=("0-2,16-17", "3-5")):
    """One launch's JSON: short steps (under 200 tokens) take ms_short, long
    ones (over 900) ms_long, the rest their mean; the host's times likewise."""
    steps = [s for s in range(WARM, len(LENGTHS)) if s != skip]

    def t(s, short, long_):
        n = LENGTHS[s]
        return (short if n < 200 else long_ if n > 900 else (short + long_) / 2) / 1e3

    times = [t(s, ms_short, ms_long) for s in steps]
    hosts = [t(s, host_short, host_short + 1) for s in steps]
    ranks = []
    for rank in (0, 1):
        x = {"rank": rank, "peak_held": peak_gib * GiB, "peak_live": GiB, "median_step_s": sorted(times)[len(times) // 2],
             "step_times_s": times, "host_times_s": hosts, "timed_steps": steps, "cpus": cpus[rank]}
        if alloc == "cuemm":
            x["adapter"] = {"alloc_failures": 0, "free_failures": 0, "last_failure": ""}
            x["log_streams"] = 4
        ranks.append(x)
    r = {"mode": mode, "alloc": alloc, "run": run, "steps": len(LENGTHS), "warm": WARM, "lengths": LENGTHS,
         "losses": losses, "median_step_s": sorted(times)[len(times) // 2], "ranks": ranks, "torch": "2.x",
         "world": 2, "nccl": "2.x", "device": "made-up GPU"}
    with open(os.path.join(d, "%s-%s-%d.json" % (mode, alloc, run)), "w") as f:
        json.dump(r, f)


def report(d):
    p = subprocess.run([sys.executable, script, "--report", d], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True)
    try:
        with open(os.path.join(d, "torchrun.md")) as f:
            md = f.read()
    except OSError:
        md = ""
    return p.returncode, md, p.stdout


base = [9.70, 9.60, 9.50, 9.40, 9.30, 9.20, 9.10, 9.00, 8.90, 8.80, 8.70, 8.60]
ulp = 2.0 ** -20  # a float32 step of a loss between 8 and 16
with tempfile.TemporaryDirectory() as d:
    for mode in ("ddp", "fsdp"):
        launch(d, mode, "native", 1, 50, 90, 45, base, 9.0)
        launch(d, mode, "native", 2, 60, 90, 55, [x + ulp for x in base], 9.0)
        launch(d, mode, "cuemm", 1, 40, 90, 35, [x + 2 * ulp for x in base], 6.0, skip=5)
        launch(d, mode, "cuemm", 2, 50, 90, 45, base, 6.0)
    rc, md, out = report(d)
    ok(rc == 0, "two launches of each allocator in both modes, losses within two float32 steps: exit 0", out + md)
    fsdp = md[md.index("### FSDP"):] if "### FSDP" in md else ""
    ok("): within" in fsdp, "cuemm's losses, two float32 steps from native's, are within the tolerance", fsdp)
    # Step medians: the middle of each launch's sorted times; runs' medians
    # native (70, 75) -> 72.5, cuemm (65, 70) -> 67.5.
    ok("step time cuemm/native 0.931 (medians of the runs' medians: 67.5 / 72.5 ms)" in fsdp,
       "the step time ratio is the ratio of the medians of the launches' medians", fsdp)
    ok("peak held per rank cuemm/native 0.667 (6.00 / 9.00 GiB" in fsdp, "peak held: the larger rank's, as a ratio",
       fsdp)
    ok("shortest third (100..120 tokens) cuemm 50.0 / native 55.0 ms; longest third (520..940) cuemm 90.0 / "
       "native 90.0 ms" in fsdp,
       "step times by thirds of the sequence lengths, the profiled step left out by its number", fsdp)
    ok("host's time to queue a step, the same medians: shortest third (100..120 tokens) cuemm 45.0 / native 50.0 ms"
       in fsdp, "the host's times by the same thirds", fsdp)
    ok("the ranks' CPUs: 0-2,16-17; 3-5" in fsdp, "the bound ranks' CPU lists, whole cores", fsdp)

    launch(d, "fsdp", "cuemm", 3, 50, 90, 45, [x + 4 * ulp for x in base], 6.0)
    rc, md, out = report(d)
    fsdp = md[md.index("### FSDP"):] if "### FSDP" in md else ""
    ok(rc == 1 and "OUTSIDE" in fsdp and "fsdp: cuemm's losses outside the native spread" in md,
       "a cuemm launch four float32 steps away: OUTSIDE, and exit 1", md)
    os.remove(os.path.join(d, "fsdp-cuemm-3.json"))
    os.remove(os.path.join(d, "ddp-native-2.json"))
    rc, md, out = report(d)
    ok(rc == 1 and "missing runs: 1 native, 2 cuemm (2 of each wanted)" in md and "ddp: runs missing" in md,
       "one native DDP launch only: runs missing, exit 1", md)

with tempfile.TemporaryDirectory() as d:
    p = subprocess.run([sys.executable, "-c", "import importlib.util as u; s = u.spec_from_file_location('t', %r); "
                        "m = u.module_from_spec(s); s.loader.exec_module(m); "
                        "print(m.cpu_list([0, 1, 2, 16, 17, 20]), m.cpu_list([7]))" % script],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    ok(p.stdout.strip() == "0-2,16-17,20 7", "CPU lists written as ranges", p.stdout)
done()
