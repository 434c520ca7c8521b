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

# CUEMM_ENABLE_FUZZING
# --enable-fuzzing (clang: CC=clang) builds the fuzz targets of tests/fuzz
# as libFuzzer programs, and everything else with the fuzzer's coverage,
# AddressSanitizer and UndefinedBehaviorSanitizer.  Without it the same
# targets build as programs that replay their seed corpus in `make check`.
AC_DEFUN([CUEMM_ENABLE_FUZZING], [
  AC_REQUIRE([CUEMM_ENABLE_SANITIZERS])
  AC_ARG_ENABLE([fuzzing],
    [AS_HELP_STRING([--enable-fuzzing], [build the fuzz targets with libFuzzer (needs clang)])],
    [], [enable_fuzzing=no])
  FUZZ_LDFLAGS=
  AS_IF([test "x$enable_fuzzing" = xyes], [
    AS_IF([test "x$enable_tsan" = xyes],
      [AC_MSG_ERROR([--enable-fuzzing and --enable-tsan exclude each other])])
    SANITIZER_CFLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g"
    SANITIZER_LDFLAGS="-fsanitize=address,undefined"
    FUZZ_LDFLAGS="-fsanitize=fuzzer"
    cuemm_save_CFLAGS=$CFLAGS
    cuemm_save_LDFLAGS=$LDFLAGS
    CFLAGS="$CFLAGS $SANITIZER_CFLAGS"
    LDFLAGS="$LDFLAGS $SANITIZER_LDFLAGS $FUZZ_LDFLAGS"
    AC_MSG_CHECKING([whether $CC can build libFuzzer programs])
    AC_LINK_IFELSE([AC_LANG_SOURCE([[
#include <stddef.h>
#include <stdint.h>
int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }
]])], [AC_MSG_RESULT([yes])],
      [AC_MSG_RESULT([no]); AC_MSG_ERROR([$CC cannot build with -fsanitize=fuzzer: use clang (CC=clang) with its compiler-rt (libclang-rt-dev)])])
    CFLAGS=$cuemm_save_CFLAGS
    LDFLAGS=$cuemm_save_LDFLAGS
  ])
  AM_CONDITIONAL([FUZZING], [test "x$enable_fuzzing" = xyes])
  AC_SUBST([FUZZ_LDFLAGS])
])
