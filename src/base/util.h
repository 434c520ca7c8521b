/* util.h: the arithmetic and the clock that every layer shares, written
 * once. */
#ifndef CUEMM_UTIL_H
#define CUEMM_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* v rounded up to a multiple of a (a > 0; a constant power of two costs
 * no division). */
static inline size_t cuemm__round_up(size_t v, size_t a)
{
  return (v + a - 1) / a * a;
}

/* CLOCK_MONOTONIC now, in ns: every interval the library measures or
 * waits out. */
static inline uint64_t cuemm__now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif
