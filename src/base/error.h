/* error.h: how a failure travels inside cuemm (error.c).
 *
 * Almost every public function returns a CUresult (cuemm.h lists the few
 * that cannot fail), which composes with the error handling driver-API
 * programs already have; the thread's message adds what a CUresult cannot
 * say (which variable was invalid, which pointer was
 * foreign, which driver call failed).  Inside the library there is one way:
 *
 * - cuemm__error() sets the message and returns its code, so a failure is
 *   one statement: return cuemm__error(...).  cuemm__error_append() adds
 *   context after it; cuemm__error_prefix() before it.  Messages have any
 *   length.
 * - A message that cleanup might overwrite is put aside with
 *   cuemm__error_save() and made current again with cuemm__error_restore().
 * - Steps that all run, of which the first failure is the one to report
 *   (a destroy, a release of every chunk), collect it in a
 *   cuemm__first_error.
 * - "Not here, try the next way" is CUEMM__NEXT, an internal result that is
 *   no driver code and carries no message; it never leaves the library.
 */
#ifndef CUEMM_ERROR_H
#define CUEMM_ERROR_H

#include <cuda.h>

/* An internal step's result: CUDA_SUCCESS, a driver code with the thread's
 * message set, or CUEMM__NEXT. */
typedef int cuemm__result;
#define CUEMM__NEXT ((cuemm__result)-1)

CUresult cuemm__error(CUresult r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Appends to the current message (context after a lower layer's words). */
void cuemm__error_append(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The message becomes "<fmt>: <the current message>"; returns r. */
CUresult cuemm__error_prefix(CUresult r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A message put aside.  Saving never fails: without host memory for a
 * long message it keeps the message's first bytes. */
typedef struct cuemm__saved_error {
  char *text;        /* the copy, or NULL: it is in `small` */
  char small[256];
} cuemm__saved_error;

void cuemm__error_save(cuemm__saved_error *s);

/* The saved message is the thread's again; s is spent.  Returns r. */
CUresult cuemm__error_restore(cuemm__saved_error *s, CUresult r);

/* The saved text, to quote in another message; s stays saved. */
const char *cuemm__error_saved_text(const cuemm__saved_error *s);

/* Appends sep and the saved text to the current message; s is spent. */
void cuemm__error_append_saved(const char *sep, cuemm__saved_error *s);

/* s spent without restoring it. */
void cuemm__error_discard(cuemm__saved_error *s);

/* The first failure of several steps: its code and its message. */
typedef struct cuemm__first_error {
  CUresult r;
  cuemm__saved_error msg;
} cuemm__first_error;

#define CUEMM__FIRST_ERROR_INIT {CUDA_SUCCESS, {NULL, {0}}}

/* Notes step result r: the first failure's code and message are kept. */
void cuemm__first_note(cuemm__first_error *f, CUresult r);

/* The first failure's message current again (if any step failed); returns
 * its code, CUDA_SUCCESS if none. */
CUresult cuemm__first_end(cuemm__first_error *f);

#endif
