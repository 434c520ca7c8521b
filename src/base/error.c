/* error.c: owns the thread-local last-error message behind cuemm_last_error.
 *
 * Thread-local so that two threads failing at once each read their own
 * story; a fixed-size buffer first so that reporting an error rarely
 * allocates (the failure being reported may be an allocation failure).  The buffer
 * stays small because the library's thread-local storage is taken from the
 * static block (thread-heap.c's slots are initial-exec), which a library loaded
 * with dlopen shares with every other one.  The rare message that outgrows
 * it (cuemm_config_init's, which names every invalid variable) goes to a
 * buffer allocated for the thread and freed at its exit; when that
 * allocation fails the message is cut to the fixed buffer.  The rest of
 * error.h (saving, the first of several failures) builds on the two.
 */

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuemm.h"
#include "base/error.h"

static _Thread_local char last_error[1024];
static _Thread_local char *long_error;  /* NULL, or the thread's larger buffer */
static _Thread_local size_t long_cap;
static _Thread_local int in_long;       /* the message is in long_error */

static pthread_key_t long_key;
static pthread_once_t long_once = PTHREAD_ONCE_INIT;

/* At the thread's exit.  A message set later still (by another exit
 * handler) starts from the fixed buffer again. */
static void long_free(void *p)
{
  free(p);
  long_error = NULL;
  long_cap = 0;
  in_long = 0;
}

static void long_key_init(void)
{
  pthread_key_create(&long_key, long_free);
}

/* Makes long_error hold at least n bytes, keeping its text.  0, or -1. */
static int long_reserve(size_t n)
{
  if (n <= long_cap)
    return 0;
  pthread_once(&long_once, long_key_init);
  char *p = realloc(long_error, n);
  if (!p)
    return -1;
  long_error = p;
  long_cap = n;
  pthread_setspecific(long_key, p);
  return 0;
}

/* The message becomes fmt's text, of any length (cut to the fixed buffer
 * only when no host memory is left for a longer one). */
static void set_v(const char *fmt, va_list ap)
{
  va_list again;
  va_copy(again, ap);
  int n = vsnprintf(last_error, sizeof last_error, fmt, ap);
  in_long = 0;
  if (n >= (int)sizeof last_error && long_reserve((size_t)n + 1) == 0) {
    vsnprintf(long_error, long_cap, fmt, again);
    in_long = 1;
  }
  va_end(again);
}

CUresult cuemm__error(CUresult r, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  set_v(fmt, ap);
  va_end(ap);
  return r;
}

void cuemm__error_append(const char *fmt, ...)
{
  va_list ap, again;
  va_start(ap, fmt);
  va_copy(again, ap);
  size_t used = strlen(in_long ? long_error : last_error);
  int n = vsnprintf(NULL, 0, fmt, ap);
  if (n >= 0 && used + (size_t)n + 1 > (in_long ? long_cap : sizeof last_error) &&
      long_reserve(used + (size_t)n + 1) == 0 && !in_long) {
    memcpy(long_error, last_error, used + 1);
    in_long = 1;
  }
  char *buf = in_long ? long_error : last_error;
  size_t cap = in_long ? long_cap : sizeof last_error;
  if (n >= 0 && used + 1 < cap)
    vsnprintf(buf + used, cap - used, fmt, again);
  va_end(again);
  va_end(ap);
}

CUresult cuemm__error_prefix(CUresult r, const char *fmt, ...)
{
  cuemm__saved_error was;
  cuemm__error_save(&was);
  va_list ap;
  va_start(ap, fmt);
  set_v(fmt, ap);
  va_end(ap);
  cuemm__error_append(": %s", cuemm__error_saved_text(&was));
  cuemm__error_discard(&was);
  return r;
}

void cuemm__error_save(cuemm__saved_error *s)
{
  const char *now = cuemm_last_error();
  size_t n = strlen(now);
  s->text = n < sizeof s->small ? NULL : malloc(n + 1);
  if (s->text)
    memcpy(s->text, now, n + 1);
  else
    snprintf(s->small, sizeof s->small, "%s", now);
}

const char *cuemm__error_saved_text(const cuemm__saved_error *s)
{
  return s->text ? s->text : s->small;
}

void cuemm__error_append_saved(const char *sep, cuemm__saved_error *s)
{
  cuemm__error_append("%s%s", sep, cuemm__error_saved_text(s));
  cuemm__error_discard(s);
}

void cuemm__error_discard(cuemm__saved_error *s)
{
  free(s->text);
  s->text = NULL;
  s->small[0] = 0;
}

CUresult cuemm__error_restore(cuemm__saved_error *s, CUresult r)
{
  cuemm__error(r, "%s", cuemm__error_saved_text(s));
  cuemm__error_discard(s);
  return r;
}

void cuemm__first_note(cuemm__first_error *f, CUresult r)
{
  if (r == CUDA_SUCCESS || f->r != CUDA_SUCCESS)
    return;
  f->r = r;
  cuemm__error_save(&f->msg);
}

CUresult cuemm__first_end(cuemm__first_error *f)
{
  if (f->r == CUDA_SUCCESS)
    return CUDA_SUCCESS;
  return cuemm__error_restore(&f->msg, f->r);
}

CUEMM_EXTERN const char *cuemm_last_error(void)
{
  return in_long ? long_error : last_error;
}
