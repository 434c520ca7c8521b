# CUEMM_CHECK_CUDA_HEADER
# Finds cuda.h.  cuemm only needs the header: libcuda itself is loaded at run
# time, so nothing here links against the toolkit.
# Order: --with-cuda=DIR, then $CUDA_HOME, then /usr/local/cuda.
# Sets CUDA_CPPFLAGS and CUDA_INCDIR.
AC_DEFUN([CUEMM_CHECK_CUDA_HEADER], [
  AC_ARG_WITH([cuda],
    [AS_HELP_STRING([--with-cuda=DIR],
      [CUDA toolkit prefix holding include/cuda.h (default: $CUDA_HOME, then /usr/local/cuda)])],
    [], [with_cuda=])
  AS_IF([test "x$with_cuda" = xno],
        [AC_MSG_ERROR([cuemm cannot be built without cuda.h; drop --without-cuda])])
  cuemm_cuda_tried=
  cuemm_cuda_found=
  for cuemm_dir in $with_cuda ${with_cuda:+__stop__} $CUDA_HOME /usr/local/cuda; do
    test "x$cuemm_dir" = x__stop__ && break
    cuemm_cuda_tried="$cuemm_cuda_tried $cuemm_dir/include/cuda.h"
    AC_MSG_CHECKING([for cuda.h in $cuemm_dir/include])
    cuemm_save_CPPFLAGS=$CPPFLAGS
    CPPFLAGS="$CPPFLAGS -I$cuemm_dir/include"
    # The file test comes first: CPATH or the compiler's own paths may hold
    # another cuda.h, which must not pass for the one in $cuemm_dir.
    AS_IF([test -f "$cuemm_dir/include/cuda.h"],
      [AC_PREPROC_IFELSE([AC_LANG_SOURCE([[#include "$cuemm_dir/include/cuda.h"
#if CUDA_VERSION < 12000
#error cuda.h older than CUDA 12.0
#endif]])], [cuemm_cuda_found=$cuemm_dir])])
    CPPFLAGS=$cuemm_save_CPPFLAGS
    AS_IF([test -n "$cuemm_cuda_found"], [AC_MSG_RESULT([yes]); break], [AC_MSG_RESULT([no])])
  done
  AS_IF([test -z "$cuemm_cuda_found"],
    [AC_MSG_ERROR([cuda.h (CUDA 12.0 or newer) not found; looked for:$cuemm_cuda_tried
  Point configure at a CUDA toolkit with --with-cuda=DIR (DIR/include/cuda.h)
  or set CUDA_HOME. Only the header is needed: cuemm loads libcuda at run time.])])
  CUDA_INCDIR="$cuemm_cuda_found/include"
  CUDA_CPPFLAGS="-I$CUDA_INCDIR"
  AC_SUBST([CUDA_CPPFLAGS])
  AC_SUBST([CUDA_INCDIR])
])

# CUEMM_CHECK_CUDA_STUB
# Test programs and examples call the driver directly, as driver-API programs
# do, so they link against libcuda.so.1 by soname.  At link time the
# toolkit's stub stands in for it (a machine without a GPU has no real one);
# at run time the dynamic loader picks the real driver or, in the test
# environment, the simulated one.  Without a stub, tests link against the
# simulated driver's build directory instead.  The library never links it.
# Sets CUDA_TEST_LIBS.
AC_DEFUN([CUEMM_CHECK_CUDA_STUB], [
  AC_REQUIRE([CUEMM_CHECK_CUDA_HEADER])
  CUDA_TEST_LIBS=
  for cuemm_stubdir in "$cuemm_cuda_found/lib64/stubs" "$cuemm_cuda_found/lib/stubs" "$cuemm_cuda_found/targets/x86_64-linux/lib/stubs"; do
    AS_IF([test -f "$cuemm_stubdir/libcuda.so"], [CUDA_TEST_LIBS="-L$cuemm_stubdir -lcuda"; break])
  done
  AS_IF([test -z "$CUDA_TEST_LIBS"],
        [CUDA_TEST_LIBS='-L$(top_builddir)/tests/simcuda/.libs -lcuda'])
  AC_SUBST([CUDA_TEST_LIBS])
])
