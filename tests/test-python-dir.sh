#!/bin/sh
# test-python-dir.sh: where `make install` puts the package cuemm, as
# configure's summary says it (config.log) and the Makefile has it: the
# summary names the directory with every variable expanded; it is the one
# the Makefile installs into; and it is the Python's own site directory
# under the prefix where that Python has one (Debian's dist-packages under
# /usr/local, a venv's), else the summary's note says that this Python does
# not look there and gives the PYTHONPATH that makes it.
b=${CUEMM_TOP_BUILDDIR:-.}
py=${CUEMM_PYTHON:-}
if test -z "$py" || test "$py" = ":"; then
  echo "1..0 # SKIP no Python 3.8 or newer found by configure"
  exit 0
fi
# make is asked for the Makefile's values: not as a job of this make
unset MAKEFLAGS MFLAGS MAKELEVEL
n=0
check() { d=$1; shift; n=$((n + 1)); if "$@"; then echo "ok $n - $d"; else echo "not ok $n - $d"; fi; }
echo "1..4"
line=$(grep '^  Python: ' "$b/config.log" | tail -1)
echo "# config.log: $line"
check "configure's summary names the Python package's directory with no variable left unexpanded" \
  test -n "$line" -a -z "$(printf '%s\n' "$line" | grep -F '${')"
dir=$(printf '%s\n' "$line" | sed -n 's/.*(the package cuemm installs in \(.*\))$/\1/p')
mk() { printf 'show:\n\t@echo $(%s)\n' "$1" | make -s -C "$b" -f Makefile -f - show 2>/dev/null; }
pkgdir=$(mk cuemmpydir) prefix=$(mk prefix)
echo "# the Makefile installs the package into $pkgdir (prefix $prefix)"
check "that is where the Makefile installs it ($dir/cuemm)" test -n "$dir" -a "$pkgdir" = "$dir/cuemm"
own=$("$py" -c '
import site, sys
base = sys.argv[1].rstrip("/") + "/"
print(next((d for d in site.getsitepackages() if d.startswith(base)), ""))' "$prefix")
if test -n "$own"; then
  check "the Python's own site directory under $prefix ($own)" test "$dir" = "$own"
else
  check "$py has no site directory under $prefix: the directory is automake's" test -n "$dir"
fi
if "$py" -c '
import os, site, sys
d = os.path.realpath(sys.argv[1])
dirs = list(site.getsitepackages()) + [site.getusersitepackages()] + sys.path
sys.exit(0 if any(x and os.path.realpath(x) == d for x in dirs) else 1)' "$dir"; then
  check "$py looks there" true
else
  check "$py does not look there, and configure's note gives the PYTHONPATH that makes it" \
    test -n "$(grep -F "note: $py does not look in $dir" "$b/config.log")" \
      -a -n "$(grep -F "PYTHONPATH=$dir to import cuemm" "$b/config.log")"
fi
