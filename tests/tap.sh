# tap.sh: TAP for the suite's shell tests, sourced (. "$top_srcdir/tests/tap.sh"):
# check DESCRIPTION COMMAND... runs COMMAND and prints one numbered result;
# tap_done prints the plan and returns the status the harness reads.
n=0
fails=0
check() { # check DESCRIPTION COMMAND...
  d=$1
  shift
  n=$((n + 1))
  if "$@"; then echo "ok $n - $d"; else echo "not ok $n - $d"; fails=$((fails + 1)); fi
}
tap_done() {
  echo "1..$n"
  test "$fails" -eq 0
}
