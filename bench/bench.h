/* bench.h: what the benchmark programs share: a check that stops the run
 * with cuemm's message, a monotonic clock, and medians.  Define BENCH_NAME
 * before including it. */
#ifndef CUEMM_BENCH_H
#define CUEMM_BENCH_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cuda.h>
#include <cuemm.h>

#define CHECK(call)                                                            \
  do {                                                                         \
    CUresult r_ = (call);                                                      \
    if (r_ != CUDA_SUCCESS) {                                                  \
      fprintf(stderr, BENCH_NAME ": %s failed (%d): %s\n", #call, (int)r_,     \
              cuemm_last_error());                                             \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

static inline double now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Sorts v in place. */
static inline double median(double *v, int n)
{
  qsort(v, n, sizeof *v, bench_cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* What one cuMemsetD32Async of `words` words on `s` costs, in ms: the step
 * of GPU work the pipelines queue per iteration. */
static inline double bench_step_ms(CUdeviceptr work, size_t words, CUstream s)
{
  double t0 = now_ns();
  for (int i = 0; i < 20; i++)
    CHECK(cuMemsetD32Async(work, (unsigned)i, words, s));
  CHECK(cuStreamSynchronize(s));
  return (now_ns() - t0) / 20 / 1e6;
}

#endif
