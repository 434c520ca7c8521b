/* test-error-path.c: how a failure travels inside the library (error.h),
 * built from src/base/error.c directly: messages of any length, a message
 * put aside while cleanup sets others, the first of several failures, and
 * context added before and after a lower layer's words.
 */
#include <string.h>

#include "base/error.h"
#include "cuemm.h"
#include "tap.h"

/* A message of n characters: "x...x" ending in "END". */
static char *long_text(size_t n)
{
  static char buf[20000];
  memset(buf, 'x', n - 3);
  memcpy(buf + n - 3, "END", 4);
  return buf;
}

int main(void)
{
  tap_plan(16);

  /* Any length: 10,000 characters come back whole. */
  CUresult r = cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "%s", long_text(10000));
  is(r, CUDA_ERROR_OUT_OF_MEMORY, "cuemm__error returns its code");
  is(strlen(cuemm_last_error()), 10000, "a message of 10,000 characters is kept whole");
  cuemm__error_append("; and more");
  like(cuemm_last_error(), "END; and more", "an appended clause follows the long message");

  /* Saved across cleanup that sets its own message. */
  cuemm__error(CUDA_ERROR_INVALID_VALUE, "%s", long_text(5000));
  cuemm__saved_error s;
  cuemm__error_save(&s);
  cuemm__error(CUDA_ERROR_UNKNOWN, "cleanup's own words");
  is(strlen(cuemm__error_saved_text(&s)), 5000, "the saved text is whole while cleanup runs");
  r = cuemm__error_restore(&s, CUDA_ERROR_INVALID_VALUE);
  is(r, CUDA_ERROR_INVALID_VALUE, "restore returns the code it is given");
  is(strlen(cuemm_last_error()), 5000, "the saved message is the thread's again");
  ok(s.text == NULL && s.small[0] == 0, "restoring spends the saved message");

  cuemm__error(CUDA_SUCCESS, "short");
  cuemm__error_save(&s);
  ok(s.text == NULL, "a short message is saved without an allocation");
  cuemm__error(CUDA_SUCCESS, "other");
  cuemm__error_append_saved("; ", &s);
  is_str(cuemm_last_error(), "other; short", "append_saved quotes the saved words after the current ones");

  /* Context before a lower layer's words. */
  cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "cuMemCreate(2097152 bytes): out of memory");
  r = cuemm__error_prefix(CUDA_ERROR_OUT_OF_MEMORY, "cuemm_adapter_suspend(tag \"%s\", device %d)", "kv", 0);
  is(r, CUDA_ERROR_OUT_OF_MEMORY, "prefix returns its code");
  is_str(cuemm_last_error(), "cuemm_adapter_suspend(tag \"kv\", device 0): cuMemCreate(2097152 bytes): out of memory",
         "prefix puts the caller's context before the lower layer's words");
  cuemm__error(CUDA_ERROR_UNKNOWN, "%s", long_text(3000));
  cuemm__error_prefix(CUDA_ERROR_UNKNOWN, "outer");
  is(strlen(cuemm_last_error()), 3000 + strlen("outer: "), "prefix keeps a long message whole");

  /* The first of several failures. */
  cuemm__first_error f = CUEMM__FIRST_ERROR_INIT;
  cuemm__first_note(&f, CUDA_SUCCESS);
  is(cuemm__first_end(&f), CUDA_SUCCESS, "no failure noted: CUDA_SUCCESS");
  cuemm__error(CUDA_ERROR_INVALID_HANDLE, "the first failure");
  cuemm__first_note(&f, CUDA_ERROR_INVALID_HANDLE);
  cuemm__error(CUDA_ERROR_UNKNOWN, "the second failure");
  cuemm__first_note(&f, CUDA_ERROR_UNKNOWN);
  cuemm__error(CUDA_SUCCESS, "a later step's note");
  r = cuemm__first_end(&f);
  is(r, CUDA_ERROR_INVALID_HANDLE, "first_end returns the first failure's code");
  is_str(cuemm_last_error(), "the first failure", "and makes its message the thread's again");

  /* CUEMM__NEXT is no driver code. */
  ok(CUEMM__NEXT < 0, "CUEMM__NEXT lies outside every CUresult");
  return tap_done();
}
