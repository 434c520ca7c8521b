# CUEMM_CHECK_PTHREAD
# cuemm needs POSIX threads (its locks and thread-local error messages).
# Adds -pthread when the compiler takes it; sets PTHREAD_CFLAGS/PTHREAD_LIBS.
AC_DEFUN([CUEMM_CHECK_PTHREAD], [
  AC_MSG_CHECKING([whether $CC accepts -pthread])
  cuemm_save_CFLAGS=$CFLAGS
  CFLAGS="$CFLAGS -pthread"
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <pthread.h>]], [[pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER; return pthread_mutex_lock(&m);]])],
    [AC_MSG_RESULT([yes]); PTHREAD_CFLAGS=-pthread; PTHREAD_LIBS=-pthread],
    [AC_MSG_RESULT([no]); PTHREAD_CFLAGS=; PTHREAD_LIBS=-lpthread])
  CFLAGS=$cuemm_save_CFLAGS
  AC_SUBST([PTHREAD_CFLAGS])
  AC_SUBST([PTHREAD_LIBS])
])
