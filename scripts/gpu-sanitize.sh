#!/bin/sh
# gpu-sanitize.sh: the suite's programs on the GPU under NVIDIA's
# compute-sanitizer, one table per tool.
#
#   scripts/gpu-sanitize.sh OUTDIR
#       on the GPU machine, in the repository root: unpacks
#       .gpu/cuemm-*.tar.gz (scripts/gpu-run.sh pack makes it), configures
#       and builds it as scripts/gpu-run.sh run does (or, run from a tree
#       already configured and built, uses that tree), then runs
#         - every TAP test program and every example against the system's
#           driver (CUEMM_TEST_DRIVER=system) under memcheck with
#           --leak-check full, and
#         - the programs that launch kernels (examples/numba_kernel.py
#           through the Numba plugin, when Python has numba-cuda) under
#           memcheck, racecheck and synccheck: those two check kernels only.
#       Writes OUTDIR/<program>.<tool>.log, OUTDIR/summary.md (the tables)
#       and prints the tables.  Exit status 0 when every program passed and
#       no real finding was reported.  Stays within about 5.5 minutes
#       (SANITIZE_BUDGET seconds, default 330; each run at most
#       SANITIZE_TIMEOUT, default 90).
#   scripts/gpu-sanitize.sh --parse TOOL LOG EXIT
#       one table row for a log that compute-sanitizer wrote (used by
#       tests/test-gpu-sanitize.sh on made-up logs).
#
# What the tables count.  A test provokes driver errors on purpose (a bad
# pointer freed, an IPC handle opened in the wrong process...): memcheck
# reports each as "Program hit CUDA_ERROR_... on CUDA API call to cuX".
# In a program that passed, those are counted as provoked API errors, with
# the calls named; in a program that failed they count as findings.  Real
# findings are invalid or misaligned accesses, hardware exceptions, device
# memory leaked at exit, races and barrier errors, and any report the
# script does not recognise (listed by its first line, so it is seen).
set -u

# ---- parsing a log -------------------------------------------------------------
# Prints: checks-passed|skipped|failed|exit|provoked|api-in-failed-run|invalid|leaks|races|other|calls|notes
parse() {
  tool=$1 log=$2 rc=$3
  awk -v tool="$tool" -v rc="$rc" '
    function hdr(s) { sub(/^=========[ ]/, "", s); return s }
    /^(not )?ok [0-9]/ {
      if ($0 ~ /^ok [0-9]+ # [Ss][Kk][Ii][Pp]/) skip++
      else if ($0 ~ /^ok /) pass++
      else fail++
      next
    }
    /^1\.\.0 # SKIP/ { skipall = $0; sub(/^1\.\.0 # SKIP */, "", skipall); if (skipall == "") skipall = "-"; next }
    /^Bail out!/ { bail = 1; next }
    /^========= [^ ]/ {
      h = hdr($0)
      if (h ~ /^(COMPUTE-SANITIZER|ERROR SUMMARY|LEAK SUMMARY|RACECHECK SUMMARY|Target application returned an error|Error: process didn.t terminate successfully|No CUDA-MEMCHECK results found|This is a warning)/) {
        if (h ~ /^LEAK SUMMARY: [0-9]+ bytes/) { split(h, f, " "); leakbytes_summary += f[3] }
        if (h ~ /^RACECHECK SUMMARY: [0-9]+ hazard/) { split(h, f, " "); hazards += f[3] }
        next
      }
      if (h ~ /^Program hit /) {
        call = h; sub(/.* on CUDA API call to /, "", call); sub(/[.]$/, "", call)
        err = h; sub(/^Program hit /, "", err); sub(/ .*/, "", err)
        api++; calls[call "(" err ")"]++
        next
      }
      if (h ~ /^Leaked [0-9]+ bytes/) { split(h, f, " "); leaks++; leakbytes += f[2]; next }
      if (h ~ /^(Invalid |Misaligned |Out-of-range |Address .* out of bounds|Illegal |Warp |Lane |Hardware exception|Unspecified launch failure|Malloc\/Free error|Cuda API error detected: illegal)/) { invalid++; first_other = first_other ? first_other : h; next }
      if (h ~ /^(Error|Warning): Race reported/ || h ~ /race/ || h ~ /[Hh]azard/) { races++; next }
      # The tool refusing the NVTX annotations of pool memory (compute-sanitizer
      # 2025.3 on memory mapped with cuMemMap): said once per process, not a finding.
      if (h ~ /^Warning: Call to nvtxMem[A-Za-z]* failed/) { nvtx_refused++; next }
      if (h ~ /[Bb]arrier error|[Ss]ync(hronization)? error|Invalid arguments/) { other++; if (!first_other) first_other = h; next }
      other++
      if (!first_other) first_other = h
    }
    END {
      passed = (rc == 0 && fail == 0 && !bail)
      if (!passed) { api_failed = api; provoked = 0 } else { provoked = api; api_failed = 0 }
      if (races < hazards) races = hazards
      n = 0; list = ""
      for (c in calls) { names[++n] = c }
      # a stable order: by name
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (names[j] < names[i]) { t = names[i]; names[i] = names[j]; names[j] = t }
      for (i = 1; i <= n; i++) list = list (i > 1 ? ", " : "") names[i] (calls[names[i]] > 1 ? " x" calls[names[i]] : "")
      note = skipall != "" ? "all skipped: " skipall : ""
      if (bail) note = note (note ? "; " : "") "bailed out"
      if (nvtx_refused) note = note (note ? "; " : "") "the tool refused the NVTX annotations of pool memory (" nvtx_refused "x)"
      if (rc == 124 || rc == 137) note = note (note ? "; " : "") "timed out"
      if (first_other) note = note (note ? "; " : "") "first: " substr(first_other, 1, 100)
      lb = leakbytes ? leakbytes : leakbytes_summary
      printf "%d|%d|%d|%d|%d|%d|%d|%s|%d|%d|%s|%s\n", pass, skip, fail, rc, provoked, api_failed, invalid,
        (leaks || lb) ? leaks " (" lb " B)" : "0", races, other, list ? list : "-", note ? note : "-"
    }' "$log"
}

# One markdown row: program | result | checks | provoked | findings...
row() {
  name=$1 fields=$2 secs=$3
  echo "$fields" | awk -F'|' -v name="$name" -v secs="$secs" '{
    verdict = ($3 == 0 && $4 == 0) ? "pass" : "FAIL"
    findings = $6 + $7 + $9 + $10 + ($8 != "0")
    printf "| %s | %s (exit %s) | %s / %s / %s | %s | %s | %s | %s | %s | %s | %s | %s | %s s |\n",
      name, verdict, $4, $1, $2, $3, $5, $11, $6, $7, $8, $9, $10, ($12 == "-" ? "" : $12), secs
  }'
}

header() {
  echo "| program | result | checks passed / skipped / failed | provoked API errors | calls (error) | API errors in a failed run | invalid accesses | device leaks | races | other | notes | time |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
}

# Real findings in a parse() line.
findings_of() {
  echo "$1" | awk -F'|' '{ print $6 + $7 + $9 + $10 + ($8 != "0") }'
}

if test "${1:-}" = --parse; then
  test $# -eq 4 || { echo "usage: scripts/gpu-sanitize.sh --parse TOOL LOG EXIT" >&2; exit 2; }
  parse "$2" "$3" "$4"
  exit 0
fi

# ---- the run ---------------------------------------------------------------------
out=${1:-}
test -n "$out" || { echo "usage: scripts/gpu-sanitize.sh OUTDIR | --parse TOOL LOG EXIT" >&2; exit 2; }
mkdir -p "$out" && out=$(cd "$out" && pwd) || exit 1
start=$(date +%s)
budget=${SANITIZE_BUDGET:-330}
per_run=${SANITIZE_TIMEOUT:-90}

cs=$(command -v compute-sanitizer 2>/dev/null || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -n 1)
test -n "$cs" || { echo "gpu-sanitize: compute-sanitizer not found (PATH, /usr/local/cuda*/bin)" >&2; exit 1; }

if test -f config.status && test -f Makefile && test -x libtool; then
  tree=$(pwd)
else
  tarball=$(ls .gpu/cuemm-*.tar.gz 2>/dev/null | head -n 1)
  test -n "$tarball" || { echo "gpu-sanitize: no .gpu/cuemm-*.tar.gz; run 'scripts/gpu-run.sh pack' first" >&2; exit 1; }
  work=$(mktemp -d /tmp/cuemm-sanitize.XXXXXX)
  tar -xzf "$tarball" -C "$work" || exit 1
  cd "$work"/cuemm-* || exit 1
  tree=$(pwd)
  { ./configure && make -j"$(nproc)"; } > "$out/build.log" 2>&1 || { tail -n 40 "$out/build.log"; exit 1; }
fi
cd "$tree" || exit 1
srcdir=$(sed -n 's/^abs_top_srcdir = //p' Makefile)
test -n "$srcdir" || srcdir=$tree
# Builds the test programs without running them.
make -j"$(nproc)" check TESTS= > "$out/build-tests.log" 2>&1 || { tail -n 40 "$out/build-tests.log"; exit 1; }
{ "$cs" --version | tail -n 1; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > "$out/versions.txt" 2>&1

# The environment `make check CUEMM_TEST_DRIVER=system` gives the tests.
unset CUEMM_MAX_PENDING_DEALLOCS_COUNT CUEMM_MAX_PENDING_DEALLOCS_RATIO CUEMM_LIBCUDA CUEMM_LIBRARY CUEMM_POOL \
  CUEMM_POOL_RESERVE CUEMM_POOL_CHUNK CUEMM_POOL_RELEASE_THRESHOLD CUEMM_POOL_LIMIT CUEMM_POOL_IPC
CUEMM_TEST_DRIVER=system CUEMM_TOP_BUILDDIR=$tree top_srcdir=$srcdir CUEMM_SIM_DIR=$tree/tests/simcuda/.libs
# The stress test's shorter pass: every driver call is intercepted.
CUEMM_STRESS_OPS=${CUEMM_STRESS_OPS:-200}
export CUEMM_TEST_DRIVER CUEMM_TOP_BUILDDIR top_srcdir CUEMM_SIM_DIR CUEMM_STRESS_OPS

# Programs that never touch the GPU are listed, not run: test-simcuda tests
# the simulated driver (linked directly), test-suballoc, test-owned,
# test-piece, test-heap and test-heap-entry are data structures, threads
# and pure functions alone,
# test-faults needs simcuda's fault injection (it skips on the system
# driver), fuzz-config and fuzz-ipc-recv make no driver call, and test-nvtx
# brings an NVTX tool of its own, which the sanitizer's would replace.
# (compute-sanitizer fails a program that never calls the driver.)
no_gpu="tests/test-simcuda tests/test-suballoc tests/test-owned tests/test-piece tests/test-heap tests/test-heap-entry"
no_gpu="$no_gpu tests/test-faults"
no_gpu="$no_gpu tests/test-nvtx tests/fuzz/fuzz-config"
no_gpu="$no_gpu tests/fuzz/fuzz-ipc-recv"
programs=
for p in tests/test-* tests/fuzz/fuzz-* examples/quickstart examples/jit_launch examples/ipc_share; do
  case $p in *.c|*.h|*.sh|*.py|*.log|*.trs|*.o) continue ;; esac
  case " $no_gpu " in *" $p "*) continue ;; esac
  test -f "$p" && test -x "$p" && programs="$programs $p"
done

total_findings=0
failed_programs=0
summary=$out/summary.md
: > "$summary"

# run NAME TOOL DEADLINE COMMAND...: one program under one tool.
run() {
  name=$1 tool=$2 deadline=$3
  shift 3
  log=$out/$(echo "$name" | tr '/' '_').$tool.log
  now=$(date +%s)
  if test $((now + 5)) -ge "$deadline"; then
    echo "| $name | not run: time budget spent | | | | | | | | | | |" >> "$table"
    return
  fi
  left=$((deadline - now))
  limit=$per_run
  test "$left" -lt "$limit" && limit=$left
  t0=$(date +%s)
  timeout -k 5 "$limit" "$@" > "$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - t0 ))
  fields=$(parse "$tool" "$log" "$rc")
  label=$name
  test -n "${show_tool:-}" && label="$name ($tool)"
  row "$label" "$fields" "$secs" >> "$table"
  f=$(findings_of "$fields")
  total_findings=$((total_findings + f))
  echo "$fields" | awk -F'|' '{ exit !($3 != 0 || $4 != 0) }' && failed_programs=$((failed_programs + 1))
}

sanitize() {
  tool=$1
  shift
  extra=
  test "$tool" = memcheck && extra="--leak-check full"
  echo "$cs --tool $tool $extra --target-processes all --print-limit 200 ${SANITIZE_FLAGS:-}"
}

# ---- memcheck: every program ----------------------------------------------------
table=$out/memcheck.md
{ echo "## memcheck --leak-check full (every program, system driver)"; echo; header; } > "$table"
mem_deadline=$((start + budget - 100))
for p in $programs; do
  # shellcheck disable=SC2046
  run "$p" memcheck "$mem_deadline" ./libtool --mode=execute $(sanitize memcheck) "$p"
done
for p in $no_gpu; do
  echo "| $p | not run: no GPU use | | | | | | | | | | |" >> "$table"
done
cat "$table" >> "$summary"; echo >> "$summary"

# ---- kernels: memcheck, racecheck, synccheck --------------------------------------
table=$out/kernels.md
{ echo "## kernels: examples/numba_kernel.py through the Numba plugin"; echo; header; } > "$table"
py=$(command -v python3 2>/dev/null)
show_tool=yes
if test -n "$py" && test -f python/cuemm/numba.py && "$py" -c 'import numba.cuda' 2>/dev/null; then
  for tool in racecheck synccheck memcheck; do
    # shellcheck disable=SC2046
    run "numba_kernel.py" "$tool" "$((start + budget))" env CUEMM_LIBRARY="$tree/.libs/libcuemm.so.0" \
      PYTHONPATH="$tree/python${SANITIZE_PYTHONPATH:+:$SANITIZE_PYTHONPATH}" NUMBA_CUDA_MEMORY_MANAGER=cuemm.numba $(sanitize "$tool") "$py" \
      "$srcdir/examples/numba_kernel.py"
  done
else
  echo "| numba_kernel.py | not run: no python3 with numba-cuda, or the plugin was not built | | | | | | | | | | |" >> "$table"
fi
cat "$table" >> "$summary"
{
  echo
  echo "Elapsed: $(( $(date +%s) - start )) s.  Programs that failed: $failed_programs.  Real findings: $total_findings."
  echo "compute-sanitizer and driver: $(tr '\n' ' ' < "$out/versions.txt")"
} >> "$summary"
cat "$summary"
test "$total_findings" -eq 0 && test "$failed_programs" -eq 0
