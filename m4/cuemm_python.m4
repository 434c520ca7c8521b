# CUEMM_PYTHON_SITE
# -----------------
# After AM_PATH_PYTHON: where `make install` puts the package cuemm, and
# whether the Python configure found looks there.
#
# AM_PATH_PYTHON's pythondir is PYTHON_PREFIX (the --prefix, unless
# --with-python-sys-prefix or --with-python_prefix) joined with the
# "posix_prefix" scheme's site-packages, which is not always a directory
# that Python reads: Debian's looks under /usr/local in dist-packages, and
# a Python of its own prefix (pyenv, conda, a venv) does not look under
# /usr/local at all.  So where one of the Python's own site directories
# (site.getsitepackages()) lies under PYTHON_PREFIX, that one is pythondir,
# still written from ${PYTHON_PREFIX} so that `make install prefix=...`
# moves it.  cuemm_python_dir is pythondir with every variable expanded,
# for the summary; cuemm_python_note, when not empty, says that this Python
# does not look there, and what to do about it.
AC_DEFUN([CUEMM_PYTHON_SITE], [
cuemm_python_dir=
cuemm_python_note=
AS_IF([test "x$PYTHON" != "x:"], [
  cuemm_save_prefix=$prefix
  cuemm_save_exec_prefix=$exec_prefix
  test "x$prefix" = xNONE && prefix=$ac_default_prefix
  test "x$exec_prefix" = xNONE && exec_prefix=$prefix
  # A value of ${...} references expanded until none is left.
  cuemm_expand() {
    cuemm_x=$[1]
    while :; do
      case $cuemm_x in
        *'${'*) eval "cuemm_x=\"$cuemm_x\"" ;;
        *) break ;;
      esac
    done
    printf '%s\n' "$cuemm_x"
  }
  cuemm_py_base=`cuemm_expand "$PYTHON_PREFIX"`
  cuemm_py_site=`$PYTHON -c '
import site, sys
base = sys.argv[[1]].rstrip("/") + "/"
for d in getattr(site, "getsitepackages", lambda: [[]])():
    if d.startswith(base):
        sys.stdout.write(d[[len(base):]])
        break
' "$cuemm_py_base" 2>/dev/null`
  AS_IF([test -n "$cuemm_py_site"], [pythondir="\${PYTHON_PREFIX}/$cuemm_py_site"])
  cuemm_python_dir=`cuemm_expand "$pythondir"`
  AS_IF([$PYTHON -c '
import os, site, sys
d = os.path.realpath(sys.argv[[1]])
dirs = list(getattr(site, "getsitepackages", lambda: [[]])()) + [[site.getusersitepackages()]] + sys.path
sys.exit(0 if any(x and os.path.realpath(x) == d for x in dirs) else 1)
' "$cuemm_python_dir" 2>/dev/null], [],
    [cuemm_py_own=`$PYTHON -c 'import sysconfig, sys; sys.stdout.write(sysconfig.get_paths()[["purelib"]])' 2>/dev/null`
     cuemm_python_note="$PYTHON does not look in $cuemm_python_dir: after make install, set
                PYTHONPATH=$cuemm_python_dir to import cuemm, or configure with
                --with-python-sys-prefix to install into its own ($cuemm_py_own)"])
  prefix=$cuemm_save_prefix
  exec_prefix=$cuemm_save_exec_prefix
])
])
