# CUEMM_ENABLE_WARNINGS
# Warnings are always on; --enable-werror turns them into errors (opt-in, so a
# newer compiler's new warning never breaks a user's build).
AC_DEFUN([CUEMM_ENABLE_WARNINGS], [
  AC_ARG_ENABLE([werror],
    [AS_HELP_STRING([--enable-werror], [treat compiler warnings as errors])],
    [], [enable_werror=no])
  WARN_CFLAGS="-Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wpointer-arith -Wformat=2 -Wno-unused-parameter"
  AS_IF([test "x$enable_werror" = xyes], [WARN_CFLAGS="$WARN_CFLAGS -Werror"])
  AC_SUBST([WARN_CFLAGS])
])
