/* fuzz.h: what cuemm's fuzz targets share.
 *
 * Each target is one LLVMFuzzerTestOneInput.  Built with clang and
 * configure --enable-fuzzing, a target is a libFuzzer binary; otherwise
 * replay.c gives it a main() that feeds it every file of its seed corpus
 * (tests/fuzz/corpus/<target>/) as a TAP test, so the targets build and run
 * in every `make check`.  A target states what must hold with FUZZ_ASSERT,
 * which aborts: libFuzzer then saves the input as a crash, and the replay
 * program dies, which fails its test.
 */
#ifndef CUEMM_FUZZ_H
#define CUEMM_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define FUZZ_ASSERT(cond, ...)                                                 \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: fuzz check failed: %s: ", __FILE__, __LINE__,    \
              #cond);                                                          \
      fprintf(stderr, __VA_ARGS__);                                            \
      fputc('\n', stderr);                                                     \
      abort();                                                                 \
    }                                                                          \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
