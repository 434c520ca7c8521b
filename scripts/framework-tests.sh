#!/bin/sh
# framework-tests.sh: a framework's own tests, once on its own allocator and
# once switched to cuemm, compared test by test as scripts/numba-compare.sh
# does for Numba.
#
#   scripts/framework-tests.sh torch|cupy OUTDIR SECONDS FILE...
#       on the GPU machine, from a configured and built cuemm tree (or with
#       CUEMM_LIBRARY and PYTHONPATH already naming libcuemm and python/).
#       Runs `python -m pytest -rA FILE...` twice, each at most SECONDS:
#       with the framework's default allocator, then with cuemm switched in
#       at start-up by a sitecustomize.py that calls cuemm.torch.use() or
#       cuemm.cupy.use() (in pytest-xdist's workers too).  TESTS_ARGS
#       replaces pytest's arguments besides the files (default "-v": its
#       per-test lines survive a run cut short by the time limit).
#       Writes OUTDIR/tests-FW-default.log, tests-FW-cuemm.log and
#       tests-FW.md (the tests that pass on the default and not on cuemm,
#       and the reverse), appends tests-FW.md to OUTDIR/summary.md.
#   scripts/framework-tests.sh --compare OUTDIR FW
#       the comparison alone, on logs already in OUTDIR.
# Exit status 0 when no test passing on the default failed on cuemm.
set -u
py=${PYTHON:-python3}

compare() {  # OUTDIR FW
  "$py" - "$1" "$2" <<'PY'
import re, sys
out, fw = sys.argv[1], sys.argv[2]
# A test's outcome, from either of pytest's forms: the short summary of -rA
# ("PASSED id") at the end of a run, and the lines of -v as tests finish
# ("id PASSED [ 5%]", with xdist "[gw0] [ 5%] PASSED id"), which survive a
# run cut short by the time limit.
states = "PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS"
pats = [re.compile(r"^(?:\[gw\d+\] \[\s*\d+%\] )?(" + states + r") (\S+::\S+)", re.M),
        re.compile(r"^(\S+::\S+) (" + states + r")\b", re.M)]
def parse(name):
    try:
        text = open("%s/tests-%s-%s.log" % (out, fw, name), errors="replace").read()
    except OSError:
        return {}, "no log"
    tail = [l for l in text.splitlines() if re.match(r"^=+ .*(passed|failed|error|skipped).* =+$", l)]
    got = {}
    for m in pats[1].finditer(text):
        got[m.group(1)] = m.group(2)
    for m in pats[0].finditer(text):  # the summary, when there is one, has the last word
        got[m.group(2)] = m.group(1)
    return got, (tail[-1] if tail else "no summary line (cut short?), %d tests seen" % len(got))
d, dt = parse("default")
c, ct = parse("cuemm")
lost = sorted(t for t, s in d.items() if s == "PASSED" and c.get(t, "PASSED") != "PASSED")
unreached = sorted(t for t, s in d.items() if s == "PASSED" and t not in c)
gained = sorted(t for t, s in c.items() if s == "PASSED" and d.get(t, "PASSED") != "PASSED")
both = sum(1 for t, s in d.items() if s == "PASSED" and c.get(t) == "PASSED")
lines = ["%s's own tests: default allocator: %s; cuemm: %s" % (fw, dt, ct),
         "passing on both: %d" % both,
         "passing on the default, not on cuemm: %d" % len(lost)]
lines += ["  %-8s %s" % (c[t], t) for t in lost]
lines += ["passing on cuemm, not on the default: %d" % len(gained)]
lines += ["  %-8s %s" % (d[t], t) for t in gained]
lines += ["passing on the default, not reached on cuemm (the run was cut short): %d" % len(unreached)]
text = "\n".join(lines) + "\n"
open("%s/tests-%s.md" % (out, fw), "w").write(text)
open("%s/summary.md" % out, "a").write(text + "\n")
sys.stdout.write(text)
sys.exit(1 if lost or not d else 0)
PY
}

if test "${1:-}" = --compare; then
  test $# -eq 3 || { echo "usage: scripts/framework-tests.sh --compare OUTDIR FW" >&2; exit 2; }
  compare "$2" "$3"
  exit $?
fi
test $# -ge 4 || { echo "usage: scripts/framework-tests.sh torch|cupy OUTDIR SECONDS FILE..." >&2; exit 2; }
fw=$1 out=$2 secs=$3
shift 3
case $fw in torch|cupy) ;; *) echo "framework-tests: unknown framework '$fw' (torch or cupy)" >&2; exit 2 ;; esac
case $secs in ''|*[!0-9]*) echo "framework-tests: SECONDS must be a number, not '$secs'" >&2; exit 2 ;; esac
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)
if test -z "${CUEMM_LIBRARY:-}"; then
  b=${CUEMM_BUILDDIR:-.}
  b=$(cd "$b" && pwd)
  test -f "$b/.libs/libcuemm.so.0" ||
    { echo "framework-tests: no $b/.libs/libcuemm.so.0 and CUEMM_LIBRARY unset" >&2; exit 2; }
  src=$(cd "$(dirname "$0")/.." && pwd)
  CUEMM_LIBRARY=$b/.libs/libcuemm.so.0; export CUEMM_LIBRARY
  PYTHONPATH=$b/python:$src/python${PYTHONPATH:+:$PYTHONPATH}; export PYTHONPATH
fi
site=$out/site-cuemm
mkdir -p "$site" || exit 1
cat > "$site/sitecustomize.py" <<'PY'
# Switches the framework named by CUEMM_USE to cuemm at start-up.
import os
_which = os.environ.get("CUEMM_USE", "")
if _which == "torch":
    import cuemm.torch
    cuemm.torch.use()
elif _which == "cupy":
    import cuemm.cupy
    cuemm.cupy.use()
PY
echo "== $fw's own tests, default allocator then cuemm (at most $secs s each): $*"
# shellcheck disable=SC2086
timeout "$secs" "$py" -m pytest -rA -p no:cacheprovider ${TESTS_ARGS:--v} "$@" > "$out/tests-$fw-default.log" 2>&1
echo "default: exit $?"
# shellcheck disable=SC2086
CUEMM_USE=$fw PYTHONPATH=$site:$PYTHONPATH timeout "$secs" "$py" -m pytest -rA -p no:cacheprovider ${TESTS_ARGS:--v} \
  "$@" > "$out/tests-$fw-cuemm.log" 2>&1
echo "cuemm: exit $?"
compare "$out" "$fw"
