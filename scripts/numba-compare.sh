#!/bin/sh
# numba-compare.sh: runs numba-cuda's own test suite twice the same way, with
# Numba's default memory manager and with cuemm's plugin
# (NUMBA_CUDA_MEMORY_MANAGER=cuemm.numba), and lists the tests that pass
# under the default manager but not under cuemm.
#
#   scripts/numba-compare.sh EXTRA_PYTHONPATH [OUTDIR]
#
# Run it in a configured and built cuemm tree (./configure && make): it uses
# .libs/libcuemm.so.0 (CUEMM_LIBRARY) from there, or from CUEMM_BUILDDIR, and
# the package cuemm of the source tree (python/, on PYTHONPATH); no `make install` is needed.
#
# EXTRA_PYTHONPATH is put in front of PYTHONPATH for both runs: a
# colon-separated list of folders.  A .whl file in the list, or .whl files in a
# listed folder, are unpacked to OUTDIR/wheels first and their contents used.
# On a machine whose numba-cuda test helpers need the `filecheck` package and
# whose numpy lacks numpy.row_stack, the list carries the filecheck wheel and a
# sitecustomize.py that sets numpy.row_stack = numpy.vstack.
#
# OUTDIR (default numba-compare-out) receives env.txt (versions),
# default.log, cuemm.log and cuemm-pool.log (the runs), and summary.txt (the
# summaries and the differences).  NUMBA_COMPARE_RUNS="default cuemm" (the
# default) says which runs to do, among default, cuemm and cuemm-pool (the
# plugin with cuemm's pool: CUEMM_POOL=vmm); a run not done reuses its log
# when present.  NUMBA_COMPARE_POOL=1 adds cuemm-pool to the runs, so that
# one call compares Numba's manager, cuemm without the pool and cuemm with it.
# NUMBA_COMPARE_ARGS (default "-v -m 16 numba.cuda.tests") are the arguments
# of `python3 -m numba.runtests`.  Exit status: 0 when no test passing under
# the default manager fails, errors or is skipped under cuemm.
#
# On a machine without autotools: unpack the dist tarball (make dist), build,
# and run it there; with TARBALL the tarball, PYEXTRA a folder holding the
# sitecustomize.py and WHEELS one holding the filecheck wheel:
#
#   t=$(mktemp -d) && tar -xzf TARBALL -C $t && cd $t/cuemm-* &&
#   ./configure -q && make -j16 >/dev/null &&
#   scripts/numba-compare.sh "PYEXTRA:WHEELS" OUTDIR
set -u
extra=${1:?usage: scripts/numba-compare.sh EXTRA_PYTHONPATH [OUTDIR]}
out=${2:-numba-compare-out}
b=${CUEMM_BUILDDIR:-.}
py=${PYTHON:-python3}
runs=${NUMBA_COMPARE_RUNS:-default cuemm}
if test "${NUMBA_COMPARE_POOL:-0}" = 1; then
  case " $runs " in *" cuemm-pool "*) ;; *) runs="$runs cuemm-pool" ;; esac
fi
args=${NUMBA_COMPARE_ARGS:--v -m 16 numba.cuda.tests}

mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)
b=$(cd "$b" && pwd)
lib=$b/.libs/libcuemm.so.0
mod=$(cd "$(dirname "$0")/.." && pwd)/python
test -f "$lib" || { echo "numba-compare: no $lib; run ./configure && make first" >&2; exit 1; }
test -f "$mod/cuemm/numba.py" || { echo "numba-compare: no $mod/cuemm/numba.py" >&2; exit 1; }

# The extra path, wheels unpacked.
path=
add() { path=${path:+$path:}$1; }
unwheel() {
  d=$out/wheels/$(basename "$1" .whl)
  rm -rf "$d" && mkdir -p "$d" &&
    "$py" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$1" "$d" || exit 1
  add "$d"
}
old_ifs=$IFS; IFS=:
for e in $extra; do
  IFS=$old_ifs
  test -n "$e" || continue
  if test -f "$e"; then
    case $e in
    *.whl) unwheel "$e" ;;
    *) echo "numba-compare: $e is neither a folder nor a wheel" >&2; exit 1 ;;
    esac
  else
    e=$(cd "$e" 2>/dev/null && pwd) || { echo "numba-compare: no folder $e" >&2; exit 1; }
    add "$e"
    for w in "$e"/*.whl; do test -f "$w" && unwheel "$w"; done
  fi
done
IFS=$old_ifs
base_pp=$path${PYTHONPATH:+:$PYTHONPATH}

{
  echo "date: $(date -u)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  PYTHONPATH=$base_pp "$py" -c '
import sys, importlib.metadata as md
print("python", sys.version.split()[0])
for d in ("numba", "numba-cuda", "cuda-bindings", "cuda-python", "cuda-core", "numpy", "filecheck"):
    try: print(d, md.version(d))
    except Exception: print(d, "absent")
'
  echo "cuemm: $lib"
  echo "extra PYTHONPATH: $path"
  echo "runtests arguments: $args"
} > "$out/env.txt" 2>&1
cat "$out/env.txt"

# Fails early, and says why, if the plugin cannot be used (Numba's own
# message for a plugin that fails to import hides the cause).
CUEMM_LIBRARY=$lib PYTHONPATH=$mod:$base_pp NUMBA_CUDA_MEMORY_MANAGER=cuemm.numba "$py" -c '
import cuemm.numba
print("plugin: libcuemm from", cuemm.numba.loaded_library(), "- IPC export:", cuemm.numba.has_ipc())
from numba import cuda
ctx = cuda.current_context()
print("Numba uses", type(ctx.memory_manager).__module__, "- memory info", ctx.get_memory_info())
' 2>&1 | tee "$out/plugin-check.txt"
grep -q "Numba uses cuemm.numba" "$out/plugin-check.txt" || { echo "numba-compare: the plugin does not work" >&2; exit 1; }
case " $runs " in
*" cuemm-pool "*)
  CUEMM_POOL=vmm CUEMM_LIBRARY=$lib PYTHONPATH=$mod:$base_pp NUMBA_CUDA_MEMORY_MANAGER=cuemm.numba "$py" -c '
from numba import cuda
a = cuda.device_array(1000, dtype="u1")
st = cuda.current_context().memory_manager.cuemm.stats()
from numba.cuda.cudadrv import driver
print("pool run: live", st["live_count"], "- device_memory_size of a 1000-byte array:",
      driver.device_memory_size(a))
' 2>&1 | tee -a "$out/plugin-check.txt"
  grep -q "device_memory_size of a 1000-byte array: 1000$" "$out/plugin-check.txt" ||
    echo "numba-compare: with CUEMM_POOL=vmm, Numba does not see pool blocks' own sizes" >&2 ;;
esac

for r in $runs; do
  start=$(date +%s)
  case $r in
  default)
    # shellcheck disable=SC2086
    env -u NUMBA_CUDA_MEMORY_MANAGER PYTHONPATH=$base_pp "$py" -m numba.runtests $args > "$out/default.log" 2>&1 ;;
  cuemm)
    # shellcheck disable=SC2086
    env -u CUEMM_POOL CUEMM_LIBRARY=$lib PYTHONPATH=$mod:$base_pp NUMBA_CUDA_MEMORY_MANAGER=cuemm.numba \
      "$py" -m numba.runtests $args > "$out/cuemm.log" 2>&1 ;;
  cuemm-pool)
    # shellcheck disable=SC2086
    CUEMM_POOL=vmm CUEMM_LIBRARY=$lib PYTHONPATH=$mod:$base_pp NUMBA_CUDA_MEMORY_MANAGER=cuemm.numba \
      "$py" -m numba.runtests $args > "$out/cuemm-pool.log" 2>&1 ;;
  *) echo "numba-compare: unknown run $r" >&2; exit 2 ;;
  esac
  echo "run $r: exit $?, $(( $(date +%s) - start )) s"
done

"$py" - "$out" <<'PY'
import os, re, sys
out = sys.argv[1]
line_re = re.compile(r"^(\w+) \(([\w.]+)\)(?:\n(?!\w+ \([\w.]+\)).*)? \.\.\. "
                     r"(ok|FAIL|ERROR|skipped.*|expected failure|unexpected success)$", re.M)
head_re = re.compile(r"^(FAIL|ERROR): (\w+) \(([\w.]+)\)", re.M)


def parse(name):
    path = os.path.join(out, name + ".log")
    if not os.path.exists(path):
        return None, "", {}
    text = open(path, errors="replace").read()
    res = {}
    for m in line_re.finditer(text):
        st = m.group(3)
        res[m.group(2)] = "skipped" if st.startswith("skipped") else st
        if st.startswith("skipped"):
            res[m.group(2) + "#why"] = st[len("skipped"):].strip()
    for m in head_re.finditer(text):     # the report at the end is authoritative
        res[m.group(3)] = m.group(1)
    tail = "\n".join(l for l in text.splitlines()
                     if re.match(r"^(Ran \d+ tests|OK|FAILED)\b", l))
    return text, tail, res


def counts(res):
    c = {}
    for k, v in res.items():
        if not k.endswith("#why"):
            c[v] = c.get(v, 0) + 1
    return ", ".join("%s %d" % kv for kv in sorted(c.items()))


def traceback_of(text, test):
    m = re.search(r"^(?:FAIL|ERROR): \w+ \(%s\)\n-+\n(.*?)(?=\n={20,}|\n-{20,}\nRan )" % re.escape(test),
                  text, re.S | re.M)
    if not m:
        return ""
    lines = m.group(1).strip().splitlines()
    return "\n".join("      " + l for l in lines[-6:])


dt, dtail, d = parse("default")
others = [(name,) + parse(name) for name in ("cuemm", "cuemm-pool")]
lines = []
for name, tail, res in [("default", dtail, d)] + [(n, tl, r) for n, _, tl, r in others]:
    if name != "default" and tail == "" and not res:
        continue
    lines.append("== %s manager: %s" % (name, "no log" if tail == "" and not res else ""))
    lines.append(tail)
    lines.append("per-test lines: %s" % counts(res))
diff_total = 0
for name, ct, ctail, c in others:
    if not (d and c):
        continue
    diff = []
    for t in sorted(k for k in d if not k.endswith("#why")):
        if d[t] != "ok":
            continue
        st = c.get(t)
        if st == "ok":
            continue
        entry = "%-10s %s" % (st or "absent", t)
        if st == "skipped":
            entry += "  [%s]" % c.get(t + "#why", "")
        elif st in ("FAIL", "ERROR"):
            entry += "\n" + traceback_of(ct, t)
        diff.append(entry)
    diff_total += len(diff)
    better = [t for t in c if not t.endswith("#why") and c[t] == "ok" and d.get(t) not in ("ok", None)]
    lines.append("")
    lines.append("== passing under default, not under %s: %d" % (name, len(diff)))
    lines.extend(diff)
    lines.append("")
    lines.append("== passing under %s, not under default: %d" % (name, len(better)))
    lines.extend("%-10s %s" % (d[t], t) for t in sorted(better))
text = "\n".join(lines) + "\n"
open(os.path.join(out, "summary.txt"), "w").write(text)
sys.stdout.write(text)
sys.exit(1 if diff_total else 0)
PY
