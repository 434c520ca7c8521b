/* bench.h: what the benchmark programs share: a check that stops the run
 * with cuemm's message, a monotonic clock, and medians.  Define BENCH_NAME
 * before including it. */
#ifndef CUEMM_BENCH_H
#define CUEMM_BENCH_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* The driver's stream-ordered pool (the device's default memory pool), its
 * release threshold at the maximum as production use sets it; 0 when the
 * driver (or simcuda) lacks the memory-pool calls. */
static inline int bench_async_setup(CUdevice dev)
{
  typedef CUresult (*get_pool_fn)(CUmemoryPool *, CUdevice);
  typedef CUresult (*set_attr_fn)(CUmemoryPool, CUmemPool_attribute, void *);
  get_pool_fn get_pool = (get_pool_fn)dlsym(RTLD_DEFAULT, "cuDeviceGetDefaultMemPool");
  set_attr_fn set_attr = (set_attr_fn)dlsym(RTLD_DEFAULT, "cuMemPoolSetAttribute");
  if (!get_pool || !set_attr)
    return 0;
  CUmemoryPool pool;
  if (get_pool(&pool, dev) != CUDA_SUCCESS)
    return 0;
  cuuint64_t max = ~(cuuint64_t)0;
  return set_attr(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &max) == CUDA_SUCCESS;
}

/* Loads the driver, makes device 0's primary context current and prints
 * the header line; returns whether --quick was given. */
static inline int bench_start(int argc, char **argv, CUdevice *dev, CUcontext *ctx)
{
  int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
  char name[128];
  cuemm_driver_info info;
  CHECK(cuemm_driver_load());
  CHECK(cuemm_driver_get_info(&info));
  CHECK(cuDeviceGet(dev, 0));
  CHECK(cuDeviceGetName(name, sizeof name, *dev));
  CHECK(cuDevicePrimaryCtxRetain(ctx, *dev));
  CHECK(cuCtxSetCurrent(*ctx));
  printf("# " BENCH_NAME ": cuemm %s, %s, driver %d (%s)%s\n", cuemm_version_string(), name, info.version,
         info.path, quick ? ", quick mode" : "");
  return quick;
}

static inline void bench_end(CUdevice dev)
{
  CHECK(cuCtxSetCurrent(NULL));
  CHECK(cuDevicePrimaryCtxRelease(dev));
}

/* The pipelines: iterations of (allocate 1 MiB, queue a step of GPU work
 * and a write of the 1 MiB, free), in the ways the benchmarks compare. */
typedef enum { WORK_ONLY, RAW_FREE, CUEMM_DEFAULT, CUEMM_SCOPE } bench_pipeline_kind;
static const char *const bench_pipeline_name[] = { "work alone", "raw cuMemFree", "cuemm default",
                                                   "cuemm defer scope" };

/* Every variant queues the same GPU work: the step, then a write of the
 * 1 MiB buffer.  The work alone writes a buffer allocated once, so the
 * differences are what allocating and freeing cost, nothing else. */
static inline double bench_pipeline(cuemm_manager *m, bench_pipeline_kind kind, CUdeviceptr work, size_t work_words,
                                   CUdeviceptr scratch, CUstream s, int iters)
{
  CHECK(cuStreamSynchronize(s));
  CHECK(cuemm_flush(m));
  double t0 = now_ns();
  if (kind == CUEMM_SCOPE)
    CHECK(cuemm_defer_cleanup_begin(m));
  for (int i = 0; i < iters; i++) {
    CUdeviceptr p = scratch;
    if (kind == RAW_FREE)
      CHECK(cuMemAlloc(&p, 1 << 20));
    else if (kind != WORK_ONLY)
      CHECK(cuemm_allocate(m, 1 << 20, &p));
    CHECK(cuMemsetD32Async(work, (unsigned)i, work_words, s));
    CHECK(cuMemsetD8Async(p, 1, 1 << 20, s));
    if (kind == RAW_FREE)
      CHECK(cuMemFree(p));
    else if (kind != WORK_ONLY)
      CHECK(cuemm_free(m, p));
  }
  if (kind == CUEMM_SCOPE)
    CHECK(cuemm_defer_cleanup_end(m));
  CHECK(cuStreamSynchronize(s));
  double t = now_ns() - t0;
  CHECK(cuemm_flush(m));
  return t / 1e6;
}

#endif
