/* tap.h: a small Test Anything Protocol producer for cuemm's test programs.
 *
 * Each test program declares its plan, reports each check with ok/is/...,
 * and returns tap_done().  A failed comparison prints both values as a TAP
 * diagnostic, so the log of a failure says what was expected and what came.
 */
#ifndef CUEMM_TAP_H
#define CUEMM_TAP_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tap__planned = -1, tap__run, tap__failed;

static inline void tap_plan(int n) { tap__planned = n; printf("1..%d\n", n); fflush(stdout); }

/* The whole program is skipped: prints "1..0 # SKIP why" and exits 0. */
static inline void tap_skip_all(const char *fmt, ...)
{
  va_list ap; va_start(ap, fmt);
  printf("1..0 # SKIP "); vprintf(fmt, ap); printf("\n");
  va_end(ap); fflush(stdout); exit(0);
}

static inline void tap_diag(const char *fmt, ...)
{
  va_list ap; va_start(ap, fmt);
  fputs("# ", stdout); vprintf(fmt, ap); fputs("\n", stdout);
  va_end(ap); fflush(stdout);
}

static inline int tap__report(int pass, const char *file, int line, const char *fmt, va_list ap)
{
  ++tap__run;
  if (!pass) ++tap__failed;
  printf("%sok %d - ", pass ? "" : "not ", tap__run);
  vprintf(fmt, ap);
  printf("\n");
  if (!pass) printf("#   failed at %s:%d\n", file, line);
  fflush(stdout);
  return pass;
}

static inline int tap__ok(int pass, const char *file, int line, const char *fmt, ...)
{
  va_list ap; va_start(ap, fmt);
  int r = tap__report(pass, file, line, fmt, ap);
  va_end(ap); return r;
}

static inline int tap__is_ll(long long got, long long want, const char *file, int line, const char *fmt, ...)
{
  va_list ap; va_start(ap, fmt);
  int r = tap__report(got == want, file, line, fmt, ap);
  va_end(ap);
  if (!r) printf("#        got: %lld\n#   expected: %lld\n", got, want);
  return r;
}

static inline int tap__is_str(const char *got, const char *want, const char *file, int line, const char *fmt, ...)
{
  int pass = (got && want) ? strcmp(got, want) == 0 : got == want;
  va_list ap; va_start(ap, fmt);
  int r = tap__report(pass, file, line, fmt, ap);
  va_end(ap);
  if (!r) printf("#        got: \"%s\"\n#   expected: \"%s\"\n", got ? got : "(null)", want ? want : "(null)");
  return r;
}

/* Passes when `needle` occurs in `hay`. */
static inline int tap__like(const char *hay, const char *needle, const char *file, int line, const char *fmt, ...)
{
  int pass = hay && needle && strstr(hay, needle) != NULL;
  va_list ap; va_start(ap, fmt);
  int r = tap__report(pass, file, line, fmt, ap);
  va_end(ap);
  if (!r) printf("#        got: \"%s\"\n#   expected to contain: \"%s\"\n", hay ? hay : "(null)", needle ? needle : "(null)");
  return r;
}

#define ok(cond, ...)          tap__ok(!!(cond), __FILE__, __LINE__, __VA_ARGS__)
#define is(got, want, ...)     tap__is_ll((long long)(got), (long long)(want), __FILE__, __LINE__, __VA_ARGS__)
#define is_str(got, want, ...) tap__is_str((got), (want), __FILE__, __LINE__, __VA_ARGS__)
#define like(got, want, ...)   tap__like((got), (want), __FILE__, __LINE__, __VA_ARGS__)
#define pass(...)              tap__ok(1, __FILE__, __LINE__, __VA_ARGS__)
#define flunk(...)             tap__ok(0, __FILE__, __LINE__, __VA_ARGS__)

/* Report n checks as skipped, with the reason. */
static inline void skip(int n, const char *fmt, ...)
{
  char why[256];
  va_list ap; va_start(ap, fmt); vsnprintf(why, sizeof why, fmt, ap); va_end(ap);
  for (int i = 0; i < n; i++) printf("ok %d # SKIP %s\n", ++tap__run, why);
  fflush(stdout);
}

static inline int tap_done(void)
{
  if (tap__planned < 0) { printf("1..%d\n", tap__run); tap__planned = tap__run; }
  if (tap__run != tap__planned) printf("# planned %d checks but ran %d\n", tap__planned, tap__run);
  fflush(stdout);
  return (tap__failed || tap__run != tap__planned) ? 1 : 0;
}

#endif
