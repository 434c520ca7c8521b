/* bench-managed.c: what managed memory costs, against device memory in the
 * same run.
 *
 * 1. Alloc+free pair by size, 256 B .. 16 MiB, steady state, one thread:
 *    cuemm with CUEMM_MEMORY=managed (sub-allocated from cuMemAllocManaged
 *    segments, no prefetch) against cuemm with CUEMM_POOL=vmm (device
 *    memory), each on a context of its own (one manager per context), made
 *    current for its turn.  Each sample times a whole cycle of
 *    max_pending_count + 1 pairs (the last one flushes, with its
 *    cuCtxSynchronize) and divides; medians; the two sides take turns in
 *    blocks of 50 samples.  Target: the managed pair at most 2x the pool's.
 *    Then the managed pair with CUEMM_MANAGED_PREFETCH=1, at two sizes: the
 *    price of prefetching every allocation.
 * 2. First GPU access of N bytes of managed memory (N = 256 MiB, or less so
 *    that it stays below a quarter of the free device memory): a
 *    cuMemcpyDtoDAsync of the N bytes into a device buffer, timed with
 *    events, (a) on a block never touched, (b) after the host wrote it, no
 *    prefetch, (c) after the host wrote it and cuemm_prefetch moved it to
 *    the device (the copy timed alone, and prefetch + copy).  Medians of 5.
 *    Target: (c)'s copy at least 5x faster than (b).
 * 3. What the system-memory detection says (cuemm_driver_get_info), and
 *    whether a CUEMM_MEMORY=system manager can be created here.
 *
 * Usage: bench-managed [--quick]   (--quick: small sizes and few samples,
 * for a smoke run on the simulated driver)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_NAME "bench-managed"
#include "bench.h"

#define MiB ((size_t)1 << 20)

static cuemm_manager *manager(CUcontext c, cuemm_memory_kind kind, int prefetch)
{
  cuemm_config cfg;
  CHECK(cuemm_config_init(&cfg));
  cfg.memory = kind;
  cfg.pool = kind == CUEMM_MEMORY_DEVICE ? CUEMM_POOL_VMM : CUEMM_POOL_NONE;
  cfg.pool_release_threshold = (size_t)1 << 46;
  cfg.managed_prefetch = prefetch;
  cuemm_manager *m;
  CHECK(cuemm_manager_create(c, &cfg, &m));
  return m;
}

/* One sample: a whole cycle of pairs, per pair. */
static double cycle_ns(cuemm_manager *m, size_t size, int cycle)
{
  double t0 = now_ns();
  for (int k = 0; k < cycle; k++) {
    CUdeviceptr p;
    CHECK(cuemm_allocate(m, size, &p));
    CHECK(cuemm_free(m, p));
  }
  return (now_ns() - t0) / cycle;
}

static void warm(cuemm_manager *m, size_t size, int cycle, double ns)
{
  double t0 = now_ns();
  for (int n = 0; n < 5 || now_ns() - t0 < ns; n++)
    cycle_ns(m, size, cycle);
}

static int pairs(CUdevice dev, CUcontext primary, int quick)
{
  CUcontext other;
  CHECK(cuCtxCreate(&other, NULL, 0, dev));
  CHECK(cuCtxSetCurrent(primary));
  cuemm_manager *pool = manager(primary, CUEMM_MEMORY_DEVICE, 0);
  cuemm_manager *man = manager(other, CUEMM_MEMORY_MANAGED, 0);
  cuemm_stats st;
  CHECK(cuemm_get_stats(pool, &st));
  int cycle = (int)st.max_pending_count + 1;
  printf("\n## 1. alloc+free pair, steady state, median ns per pair (whole cycles of %d pairs, flush included)\n",
         cycle);
  printf("%10s %14s %14s %8s\n", "size", "device pool", "managed", "ratio");
  enum { MAXS = 1000 };
  static double vp[MAXS], vm[MAXS];
  int samples = quick ? 20 : MAXS;
  double warm_ns = quick ? 2e6 : 50e6;
  double worst = 0;
  for (size_t size = 256; size <= 16 * MiB; size *= 4) {
    CHECK(cuCtxSetCurrent(primary));
    warm(pool, size, cycle, warm_ns);
    CHECK(cuCtxSetCurrent(other));
    warm(man, size, cycle, warm_ns);
    for (int i0 = 0; i0 < samples; i0 += 50) {
      int i1 = i0 + 50 < samples ? i0 + 50 : samples;
      CHECK(cuCtxSetCurrent(primary));
      for (int i = i0; i < i1; i++)
        vp[i] = cycle_ns(pool, size, cycle);
      CHECK(cuCtxSetCurrent(other));
      for (int i = i0; i < i1; i++)
        vm[i] = cycle_ns(man, size, cycle);
    }
    double p = median(vp, samples), m = median(vm, samples);
    if (m / p > worst)
      worst = m / p;
    printf("%10zu %14.1f %14.1f %7.2fx\n", size, p, m, m / p);
  }
  printf("# worst ratio %.2fx: target (managed pair at most 2x the device pool's) %s\n", worst,
         worst <= 2.0 ? "met" : "MISSED");
  cuemm_managed_stats ms;
  CHECK(cuemm_managed_get_stats(man, &ms));
  printf("# managed pool after the pairs: %zu bytes held in %zu segments, %llu cuMemAllocManaged calls\n",
         ms.held_bytes, ms.segments, (unsigned long long)ms.segments_allocated);
  CHECK(cuCtxSetCurrent(primary));
  CHECK(cuemm_destroy(pool));
  CHECK(cuemm_destroy(man));

  /* The same pair with a prefetch at every allocation. */
  cuemm_manager *pf = manager(other, CUEMM_MEMORY_MANAGED, 1);
  CHECK(cuCtxSetCurrent(other));
  printf("%10s %14s   (CUEMM_MANAGED_PREFETCH=1: the pair with a cuMemPrefetchAsync per allocation)\n", "size",
         "managed+pf");
  for (size_t size = 4096; size <= MiB; size *= 256) {
    int n = quick ? 10 : 200;
    warm(pf, size, cycle, warm_ns);
    for (int i = 0; i < n; i++)
      vm[i] = cycle_ns(pf, size, cycle);
    printf("%10zu %14.1f\n", size, median(vm, n));
  }
  CHECK(cuCtxSynchronize());
  CHECK(cuemm_destroy(pf));
  CHECK(cuCtxSetCurrent(primary));
  CHECK(cuCtxDestroy(other));
  return worst <= 2.0;
}

/* ---- 2. first access ----------------------------------------------------------- */

typedef struct access_times {
  double copy_ms, prefetch_ms;
} access_times;

/* Copies n bytes from managed block p into dst on s, timed with events;
 * with `prefetch`, cuemm_prefetch to dev first, on the same stream. */
static access_times gpu_read(cuemm_manager *m, CUdeviceptr p, CUdeviceptr dst, size_t n, CUdevice dev, CUstream s,
                             int prefetch)
{
  CUevent e0, e1, e2;
  CHECK(cuEventCreate(&e0, CU_EVENT_DEFAULT));
  CHECK(cuEventCreate(&e1, CU_EVENT_DEFAULT));
  CHECK(cuEventCreate(&e2, CU_EVENT_DEFAULT));
  CHECK(cuEventRecord(e0, s));
  if (prefetch)
    CHECK(cuemm_prefetch(m, p, n, dev, s));
  CHECK(cuEventRecord(e1, s));
  CHECK(cuMemcpyDtoDAsync(dst, p, n, s));
  CHECK(cuEventRecord(e2, s));
  CHECK(cuStreamSynchronize(s));
  access_times t;
  float ms;
  CHECK(cuEventElapsedTime(&ms, e1, e2));
  t.copy_ms = ms;
  CHECK(cuEventElapsedTime(&ms, e0, e1));
  t.prefetch_ms = ms;
  CHECK(cuEventDestroy(e0));
  CHECK(cuEventDestroy(e1));
  CHECK(cuEventDestroy(e2));
  return t;
}

static int first_access(CUdevice dev, CUcontext primary, int quick)
{
  size_t free_b = 0, total = 0;
  CHECK(cuMemGetInfo(&free_b, &total));
  size_t n = quick ? 4 * MiB : 256 * MiB;
  if (n > free_b / 4)
    n = free_b / 4 / MiB * MiB;
  if (n < MiB) {
    printf("\n## 2. skipped: %zu bytes free on the device, too little for the measurement\n", free_b);
    return 1;
  }
  cuemm_manager *m = manager(primary, CUEMM_MEMORY_MANAGED, 0);
  CUstream s;
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr dst;
  CHECK(cuMemAlloc(&dst, n));
  enum { REPS = 5 };
  double a[REPS], b[REPS], c[REPS], cp[REPS];
  for (int r = 0; r < REPS; r++) {
    CUdeviceptr p;
    /* (a) a block never touched: a fresh segment each time (trim gave the
     * last one back). */
    CHECK(cuemm_allocate(m, n, &p));
    a[r] = gpu_read(m, p, dst, n, dev, s, 0).copy_ms;
    /* (b) the host writes it, the GPU reads it. */
    memset((void *)(uintptr_t)p, r + 1, n);
    b[r] = gpu_read(m, p, dst, n, dev, s, 0).copy_ms;
    /* (c) the host writes it, cuemm_prefetch, the GPU reads it. */
    memset((void *)(uintptr_t)p, r + 2, n);
    access_times t = gpu_read(m, p, dst, n, dev, s, 1);
    c[r] = t.copy_ms;
    cp[r] = t.copy_ms + t.prefetch_ms;
    unsigned char check = 0;
    CHECK(cuMemcpyDtoH(&check, dst + n - 1, 1));
    if (check != (unsigned char)(r + 2)) {
      fprintf(stderr, BENCH_NAME ": the copy read %u, the host wrote %u\n", check, (unsigned)(r + 2));
      exit(1);
    }
    CHECK(cuemm_free(m, p));
    CHECK(cuemm_managed_trim(m));
  }
  double ma = median(a, REPS), mb = median(b, REPS), mc = median(c, REPS), mcp = median(cp, REPS);
  printf("\n## 2. first GPU access of N = %zu MiB of managed memory (cuMemcpyDtoDAsync into device memory, "
         "events), median of %d (device: %zu MiB free of %zu)\n", n / MiB, REPS, free_b / MiB, total / MiB);
  printf("%-44s %10s %10s\n", "case", "ms", "GB/s");
  printf("%-44s %10.3f %10.1f\n", "(a) first touch on the GPU", ma, n / ma / 1e6);
  printf("%-44s %10.3f %10.1f\n", "(b) after a host write, no prefetch", mb, n / mb / 1e6);
  printf("%-44s %10.3f %10.1f\n", "(c) after a host write, prefetched: copy", mc, n / mc / 1e6);
  printf("%-44s %10.3f %10.1f\n", "(c) prefetch + copy", mcp, n / mcp / 1e6);
  double speedup = mb / mc;
  printf("# speedup of the access, (b) / (c copy): %.1fx; target (at least 5x) %s\n", speedup,
         speedup >= 5.0 ? "met" : "MISSED");
  printf("# (b) / (c prefetch + copy): %.2fx; (b) / (a): %.2fx\n", mb / mcp, mb / ma);
  CHECK(cuMemFree(dst));
  CHECK(cuStreamDestroy(s));
  CHECK(cuemm_destroy(m));
  return speedup >= 5.0;
}

/* ---- 3. system memory ----------------------------------------------------------- */

static void system_detection(CUcontext primary)
{
  cuemm_driver_info info;
  CHECK(cuemm_driver_get_info(&info));
  printf("\n## 3. managed and system-allocated memory on device 0 (cuemm_driver_get_info)\n");
  printf("managed memory (cuMemAllocManaged, MANAGED_MEMORY)             %d\n", info.managed);
  printf("concurrent managed access (prefetch and advice work)           %d\n", info.concurrent_managed);
  printf("cuMemPrefetchAsync and cuMemAdvise entry points                %d\n", info.prefetch);
  printf("PAGEABLE_MEMORY_ACCESS (CUEMM_MEMORY=system possible)          %d\n", info.pageable);
  printf("PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES (ATS, not HMM)    %d\n", info.pageable_host_page_tables);
  cuemm_config cfg;
  CHECK(cuemm_config_init(&cfg));
  cfg.memory = CUEMM_MEMORY_SYSTEM;
  cfg.pool = CUEMM_POOL_NONE;
  cuemm_manager *m = NULL;
  CUresult r = cuemm_manager_create(primary, &cfg, &m);
  if (r != CUDA_SUCCESS) {
    printf("# a CUEMM_MEMORY=system manager: refused (%d): %s\n", (int)r, cuemm_last_error());
    return;
  }
  CUdeviceptr p;
  CHECK(cuemm_allocate(m, MiB, &p));
  memset((void *)(uintptr_t)p, 7, MiB);
  CUdeviceptr d;
  CHECK(cuMemAlloc(&d, MiB));
  CHECK(cuMemcpyDtoD(d, p, MiB));
  unsigned char back = 0;
  CHECK(cuMemcpyDtoH(&back, d + MiB - 1, 1));
  printf("# a CUEMM_MEMORY=system manager: created; 1 MiB of malloc memory copied by the GPU reads %u (wrote 7)\n",
         back);
  CHECK(cuMemFree(d));
  CHECK(cuemm_free(m, p));
  CHECK(cuemm_destroy(m));
}

int main(int argc, char **argv)
{
  CUdevice dev;
  CUcontext ctx;
  int quick = bench_start(argc, argv, &dev, &ctx);
  double t0 = now_ns();
  int ok1 = pairs(dev, ctx, quick);
  int ok2 = first_access(dev, ctx, quick);
  system_detection(ctx);
  printf("\n# targets: pair %s, prefetch %s; %.1f s in all\n", ok1 ? "met" : "MISSED", ok2 ? "met" : "MISSED",
         (now_ns() - t0) / 1e9);
  bench_end(dev);
  return 0;
}
