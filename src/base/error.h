/* error.h: the thread-local message that explains the last failed call.
 *
 * Every public function returns a CUresult, which composes with the error
 * handling driver-API programs already have; the message adds what a CUresult
 * cannot say (which variable was invalid, which pointer was foreign, which
 * driver call failed).  Internal code sets it with cuemm__error(), which
 * returns its CUresult so a failure is one statement: return cuemm__error(...).
 */
#ifndef CUEMM_ERROR_H
#define CUEMM_ERROR_H

#include <cuda.h>

CUresult cuemm__error(CUresult r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Appends to the current message (used to add context to a lower layer's
 * message without losing it). */
void cuemm__error_append(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

#endif
