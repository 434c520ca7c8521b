/* bench-stream.c: what the stream-ordered path costs, against the driver's
 * own stream-ordered pool in the same run.
 *
 * 1. Same-stream alloc+free pair by size, 256 B .. 16 MiB, one thread:
 *    cuemm_allocate_async+cuemm_free_async against cuMemAllocAsync+
 *    cuMemFreeAsync (default memory pool, release threshold at the maximum).
 *    A sample times 100 pairs (the clock read would be a third of a pair);
 *    the two sides take turns in blocks of samples, and the sizes in turn.  Medians.
 * 2. Threads: T = 1, 2, 4, 8, 16 threads, each on its own stream, 4 KiB
 *    pairs on one shared manager, for a fixed time; aggregate pairs per
 *    second, and the driver's pool the same way.
 * 3. Cross-stream: N blocks freed on stream A, then allocated on stream B
 *    once A's event has completed (the first alloc on B records it; the
 *    stream is synchronized before the timed part), against the same-stream
 *    pair; and the same with CUEMM_STREAM_REUSE=wait, no synchronization.
 * 4. The deferred path's pair (cuemm_allocate+cuemm_free, flush included), for
 *    the record.
 *
 * Usage: bench-stream [--quick]
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_NAME "bench-stream"
#include "bench.h"

#define MiB ((size_t)1 << 20)
#define BATCH 100

static CUcontext ctx;

static cuemm_manager *pool_manager(cuemm_stream_reuse reuse)
{
  cuemm_config c;
  CHECK(cuemm_config_init(&c));
  c.pool = CUEMM_POOL_VMM;
  c.pool_release_threshold = (size_t)1 << 46;
  c.stream_reuse = reuse;
  cuemm_manager *m;
  CHECK(cuemm_manager_create(ctx, &c, &m));
  return m;
}


static double cuemm_batch(cuemm_manager *m, size_t size, CUstream s)
{
  double t0 = now_ns();
  for (int k = 0; k < BATCH; k++) {
    CUdeviceptr p;
    CHECK(cuemm_allocate_async(m, size, s, &p));
    CHECK(cuemm_free_async(m, p, s));
  }
  return (now_ns() - t0) / BATCH;
}

static double driver_batch(size_t size, CUstream s)
{
  double t0 = now_ns();
  for (int k = 0; k < BATCH; k++) {
    CUdeviceptr p;
    CHECK(cuMemAllocAsync(&p, size, s));
    CHECK(cuMemFreeAsync(p, s));
  }
  return (now_ns() - t0) / BATCH;
}

static void same_stream(int async, int quick)
{
  cuemm_manager *m = pool_manager(CUEMM_STREAM_REUSE_EVENT);
  CUstream s;
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  printf("\n## same-stream alloc+free pair, one thread, median ns per pair (samples of %d pairs)\n", BATCH);
  printf("%10s %18s %14s %9s\n", "size", "AllocAsync+Free", "cuemm async", "speedup");
  enum { MAXS = 1000 };
  static double drv[MAXS], cu[MAXS];
  int samples = quick ? 10 : 400;
  /* Warm up by time, both sides, at the first size: the host's clocks and
   * caches, and the driver's pool (the first row measured 1.5x the others
   * on both sides after a warm-up by count). */
  double t0 = now_ns();
  while (now_ns() - t0 < (quick ? 2e6 : 500e6)) {
    cuemm_batch(m, 256, s);
    if (async)
      driver_batch(256, s);
  }
  /* The sizes take turns, a block of samples each, rather than one after
   * the other: a spell of a slower host (they last up to seconds on a
   * shared machine) then shifts every row a little, not one row whole. */
  enum { NSIZES = 9 }; /* 256 B .. 16 MiB */
  static double drvs[NSIZES][MAXS], cus[NSIZES][MAXS];
  for (int k = 0; k < NSIZES; k++)
    for (int w = 0; w < 20; w++) {
      cuemm_batch(m, (size_t)256 << (2 * k), s);
      if (async)
        driver_batch((size_t)256 << (2 * k), s);
    }
  for (int i0 = 0; i0 < samples; i0 += 20) {
    int i1 = i0 + 20 < samples ? i0 + 20 : samples;
    for (int k = 0; k < NSIZES; k++) {
      size_t size = (size_t)256 << (2 * k);
      for (int i = i0; async && i < i1; i++)
        drvs[k][i] = driver_batch(size, s);
      for (int i = i0; i < i1; i++)
        cus[k][i] = cuemm_batch(m, size, s);
    }
  }
  for (int k = 0; k < NSIZES; k++) {
    size_t size = (size_t)256 << (2 * k);
    memcpy(cu, cus[k], samples * sizeof cu[0]);
    double c = median(cu, samples);
    if (async) {
      memcpy(drv, drvs[k], samples * sizeof drv[0]);
      double d = median(drv, samples);
      printf("%10zu %18.1f %14.1f %8.1fx\n", size, d, c, d / c);
    } else
      printf("%10zu %18s %14.1f %9s\n", size, "n/a", c, "n/a");
  }
  CHECK(cuStreamSynchronize(s));
  CHECK(cuStreamDestroy(s));
  CHECK(cuemm_destroy(m));
}

typedef struct worker {
  cuemm_manager *m;   /* NULL: the driver's pool */
  pthread_barrier_t *start;
  atomic_int *stop;
  unsigned long long pairs;
} worker;

static void *work(void *arg)
{
  worker *w = arg;
  CHECK(cuCtxSetCurrent(ctx));
  CUstream s;
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  /* Warm this thread's cache (or the driver's pool) first. */
  if (w->m)
    cuemm_batch(w->m, 4096, s);
  else
    driver_batch(4096, s);
  pthread_barrier_wait(w->start);
  unsigned long long n = 0;
  while (!atomic_load_explicit(w->stop, memory_order_relaxed)) {
    if (w->m)
      cuemm_batch(w->m, 4096, s);
    else
      driver_batch(4096, s);
    n += BATCH;
  }
  w->pairs = n;
  CHECK(cuStreamSynchronize(s));
  if (w->m)
    CHECK(cuemm_stream_release(w->m, s));
  CHECK(cuStreamDestroy(s));
  return NULL;
}

/* Pairs per second of `threads` threads for `ms` milliseconds. */
static double run_threads(cuemm_manager *m, int threads, double ms)
{
  pthread_t t[16];
  worker w[16];
  pthread_barrier_t start;
  atomic_int stop = 0;
  pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
  for (int i = 0; i < threads; i++) {
    w[i] = (worker){ m, &start, &stop, 0 };
    pthread_create(&t[i], NULL, work, &w[i]);
  }
  pthread_barrier_wait(&start);
  double t0 = now_ns();
  struct timespec d = { (time_t)(ms / 1000), (long)((ms - (double)(long)(ms / 1000) * 1000) * 1e6) };
  nanosleep(&d, NULL);
  atomic_store(&stop, 1);
  unsigned long long total = 0;
  for (int i = 0; i < threads; i++) {
    pthread_join(t[i], NULL);
    total += w[i].pairs;
  }
  double secs = (now_ns() - t0) / 1e9;
  pthread_barrier_destroy(&start);
  return (double)total / secs;
}

static void threads(int async, int quick)
{
  static const int counts[] = { 1, 2, 4, 8, 16 };
  double ms = quick ? 50 : 500;
  int rounds = quick ? 1 : 5;
  printf("\n## threads, each on its own stream, 4 KiB pairs: aggregate Mpairs/s (median of %d rounds of %.0f ms)\n",
         rounds, ms);
  printf("%8s %14s %10s %16s %10s %12s\n", "threads", "cuemm", "vs 1", "AllocAsync+Free", "vs 1", "cuemm/drv");
  double one_c = 0, one_d = 0;
  for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
    double c[8], d[8];
    for (int r = 0; r < rounds; r++) {
      cuemm_manager *m = pool_manager(CUEMM_STREAM_REUSE_EVENT);
      c[r] = run_threads(m, counts[k], ms) / 1e6;
      CHECK(cuemm_destroy(m));
      d[r] = async ? run_threads(NULL, counts[k], ms) / 1e6 : 0;
    }
    double cm = median(c, rounds), dm = median(d, rounds);
    if (k == 0) {
      one_c = cm;
      one_d = dm;
    }
    if (async)
      printf("%8d %14.2f %9.2fx %16.2f %9.2fx %11.1fx\n", counts[k], cm, cm / one_c, dm, dm / one_d, cm / dm);
    else
      printf("%8d %14.2f %9.2fx %16s %10s %12s\n", counts[k], cm, cm / one_c, "n/a", "", "");
  }
}

/* N blocks freed on A, then allocated on B after A's event completed. */
static void cross_stream(int quick)
{
  int n = quick ? 100 : 1000, rounds = quick ? 3 : 51;
  static CUdeviceptr v[1000];
  double cross[64], same[64], waitv[64];
  for (int mode = 0; mode < 2; mode++) {
    cuemm_manager *m = pool_manager(mode ? CUEMM_STREAM_REUSE_WAIT : CUEMM_STREAM_REUSE_EVENT);
    CUstream a, b;
    CHECK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
    for (int r = 0; r < rounds; r++) {
      for (int i = 0; i < n; i++)
        CHECK(cuemm_allocate_async(m, 4096, a, &v[i]));
      double t0 = now_ns();
      for (int i = 0; i < n; i++)
        CHECK(cuemm_free_async(m, v[i], a));
      double tf = now_ns() - t0;
      if (!mode) {
        /* The first alloc on B records A's event; let it complete. */
        CHECK(cuemm_allocate_async(m, 4096, b, &v[0]));
        CHECK(cuStreamSynchronize(a));
      }
      t0 = now_ns();
      for (int i = mode ? 0 : 1; i < n; i++)
        CHECK(cuemm_allocate_async(m, 4096, b, &v[i]));
      double ta = now_ns() - t0;
      (mode ? waitv : cross)[r] = (tf + ta) / n;
      for (int i = 0; i < n; i++)
        CHECK(cuemm_free_async(m, v[i], b));
      CHECK(cuStreamSynchronize(b));
      /* The same-stream figure, same blocks, same round. */
      if (!mode) {
        t0 = now_ns();
        for (int i = 0; i < n; i++)
          CHECK(cuemm_allocate_async(m, 4096, b, &v[i]));
        for (int i = 0; i < n; i++)
          CHECK(cuemm_free_async(m, v[i], b));
        same[r] = (now_ns() - t0) / n;
      }
      /* Back to A for the next round: B's blocks must reach A by events too. */
      CHECK(cuemm_pool_trim(m));
    }
    CHECK(cuStreamSynchronize(a));
    CHECK(cuStreamSynchronize(b));
    CHECK(cuemm_stream_release(m, a));
    CHECK(cuemm_stream_release(m, b));
    CHECK(cuStreamDestroy(a));
    CHECK(cuStreamDestroy(b));
    cuemm_stats st;
    CHECK(cuemm_get_stats(m, &st));
    if (mode)
      printf("# wait mode: %llu stream waits, %llu steals\n", (unsigned long long)st.stream_event_waits,
             (unsigned long long)st.stream_steals);
    else
      printf("# event mode: %llu events recorded, %llu steals\n", (unsigned long long)st.stream_events,
             (unsigned long long)st.stream_steals);
    CHECK(cuemm_destroy(m));
  }
  double c = median(cross, rounds), s = median(same, rounds), w = median(waitv, rounds);
  printf("\n## cross-stream pair (free on A, alloc on B), %d blocks of 4 KiB, median ns per pair over %d rounds\n", n,
         rounds);
  printf("  same stream %.1f, cross stream after the event %.1f (%.2fx), cross stream with a wait %.1f (%.2fx)\n", s, c,
         c / s, w, w / s);
}

static void deferred_pair(int quick)
{
  cuemm_manager *m = pool_manager(CUEMM_STREAM_REUSE_EVENT);
  enum { N = 400 };
  double v[N];
  int samples = quick ? 10 : N;
  for (int i = 0; i < samples; i++) {
    double t0 = now_ns();
    for (int k = 0; k < 110; k++) {
      CUdeviceptr p;
      CHECK(cuemm_allocate(m, 4096, &p));
      CHECK(cuemm_free(m, p));
    }
    v[i] = (now_ns() - t0) / 110;
  }
  printf("\n## deferred path (cuemm_alloc+cuemm_free, pool, 4 KiB, flushes included): %.1f ns per pair\n",
         median(v, samples));
  CHECK(cuemm_destroy(m));
}

int main(int argc, char **argv)
{
  CUdevice dev;
  int quick = bench_start(argc, argv, &dev, &ctx);
  int async = bench_async_setup(dev);
  same_stream(async, quick);
  threads(async, quick);
  cross_stream(quick);
  deferred_pair(quick);
  bench_end(dev);
  return 0;
}
