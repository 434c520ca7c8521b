# CUEMM_ENABLE_SANITIZERS
# --enable-sanitizers builds everything with AddressSanitizer and
# UndefinedBehaviorSanitizer, --enable-tsan with ThreadSanitizer (the two
# cannot share a process), and either makes any report fatal so that a test
# run fails on it.
AC_DEFUN([CUEMM_ENABLE_SANITIZERS], [
  AC_ARG_ENABLE([sanitizers],
    [AS_HELP_STRING([--enable-sanitizers], [build with AddressSanitizer and UndefinedBehaviorSanitizer])],
    [], [enable_sanitizers=no])
  AC_ARG_ENABLE([tsan],
    [AS_HELP_STRING([--enable-tsan], [build with ThreadSanitizer])],
    [], [enable_tsan=no])
  AS_IF([test "x$enable_sanitizers" = xyes && test "x$enable_tsan" = xyes],
    [AC_MSG_ERROR([--enable-sanitizers and --enable-tsan exclude each other: build twice])])
  SANITIZER_CFLAGS=
  SANITIZER_LDFLAGS=
  AS_IF([test "x$enable_sanitizers" = xyes], [
    SANITIZER_CFLAGS="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g"
    SANITIZER_LDFLAGS="-fsanitize=address,undefined"
    cuemm_sanitizer_what="address,undefined"
  ])
  AS_IF([test "x$enable_tsan" = xyes], [
    SANITIZER_CFLAGS="-fsanitize=thread -fno-omit-frame-pointer -g"
    SANITIZER_LDFLAGS="-fsanitize=thread"
    cuemm_sanitizer_what="thread"
  ])
  AS_IF([test -n "$SANITIZER_CFLAGS"], [
    cuemm_save_CFLAGS=$CFLAGS
    cuemm_save_LDFLAGS=$LDFLAGS
    CFLAGS="$CFLAGS $SANITIZER_CFLAGS"
    LDFLAGS="$LDFLAGS $SANITIZER_LDFLAGS"
    AC_MSG_CHECKING([whether $CC can build with -fsanitize=$cuemm_sanitizer_what])
    AC_LINK_IFELSE([AC_LANG_PROGRAM([], [return 0;])], [AC_MSG_RESULT([yes])],
      [AC_MSG_RESULT([no]); AC_MSG_ERROR([$CC cannot build with -fsanitize=$cuemm_sanitizer_what])])
    CFLAGS=$cuemm_save_CFLAGS
    LDFLAGS=$cuemm_save_LDFLAGS
  ])
  AM_CONDITIONAL([SANITIZERS], [test "x$enable_sanitizers" = xyes])
  AM_CONDITIONAL([TSAN], [test "x$enable_tsan" = xyes])
  AC_SUBST([SANITIZER_CFLAGS])
  AC_SUBST([SANITIZER_LDFLAGS])
])
