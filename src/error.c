/* error.c: owns the thread-local last-error message behind cuemm_last_error.
 *
 * Thread-local so that two threads failing at once each read their own
 * story; fixed-size so that reporting an error never allocates (the failure
 * being reported may be an allocation failure).
 */

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cuemm.h"
#include "error.h"

static _Thread_local char last_error[1024];

CUresult cuemm__error(CUresult r, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  return r;
}

void cuemm__error_append(const char *fmt, ...)
{
  size_t used = strlen(last_error);
  if (used + 1 >= sizeof last_error)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error + used, sizeof last_error - used, fmt, ap);
  va_end(ap);
}

CUEMM_EXTERN const char *cuemm_last_error(void)
{
  return last_error;
}
