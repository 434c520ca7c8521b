#!/bin/sh
# test-libdir.sh: libcuemm.la names the libdir that configure set last.
# libtool writes that directory into the .la when it links the library,
# and `make install` relinks the installed programs with it as their run
# path; configure run again with another --prefix must relink the library,
# or the library installed there names the old directory and the installed
# cuemm-replay cannot find it.  The configured libdir is read from cuemm.pc,
# which config.status writes.
b=${CUEMM_TOP_BUILDDIR:-.}
n=0
check() { # check DESCRIPTION COMMAND...
  d=$1; shift
  n=$((n + 1))
  if "$@"; then echo "ok $n - $d"; else echo "not ok $n - $d"; fi
}
# cuemm.pc begins with shell-style assignments (prefix=, exec_prefix=${prefix},
# libdir=${exec_prefix}/lib): evaluated here, in a subshell.
want=$( (eval "$(sed -n 's/^\([a-z_]*\)=\(.*\)$/\1="\2"/p' "$b/cuemm.pc")"; printf '%s\n' "$libdir") )
have=$(sed -n "s/^libdir='\(.*\)'$/\1/p" "$b/libcuemm.la")
echo "# configured: '$want'; libcuemm.la: '$have'"
check "the configured libdir is known" test -n "$want"
check "libcuemm.la names the configured libdir ($want)" test "$have" = "$want"
echo "1..$n"
