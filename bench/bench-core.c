/* bench-core.c: what deferred deallocation costs and what it saves.
 *
 * 1. Alloc+free pair latency by size, 256 B .. 256 MiB: cuMemAlloc+cuMemFree
 *    against cuemm_allocate+cuemm_free with the default thresholds.  cuemm's
 *    cost comes in cycles: max_pending_count cheap pairs, then one pair that
 *    flushes the whole queue, so each sample times a whole cycle of
 *    (max_pending_count + 1) pairs and divides; the median over samples is
 *    reported, with the single-pair median beside it.
 * 2. The pipeline: 200 x (allocate 1 MiB, queue ~0.3 ms of GPU work and a
 *    write of the 1 MiB, free), for the work alone (the same writes to a
 *    buffer allocated once), raw cuMemFree, cuemm's default, and cuemm with
 *    the loop inside a defer scope.  Median of several runs each, the
 *    variants taking turns.
 *
 * Usage: bench-core [--quick]   (--quick: fewer samples, small work; for a
 * smoke run on the simulated driver)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BENCH_NAME "bench-core"
#include "bench.h"


static void pair_latency(cuemm_manager *m, int quick)
{
  cuemm_stats st;
  cuemm_get_stats(m, &st);
  int cycle = (int)st.max_pending_count + 1;
  printf("\n## alloc+free pair, median ns per pair (cuemm: whole cycles of %d pairs, flush included)\n", cycle);
  printf("%10s %14s %14s %14s %9s\n", "size", "cuMemAlloc+Free", "cuemm cycle/pair", "cuemm 1 pair", "speedup");
  enum { MAXS = 400 };
  double raw[MAXS], cyc[MAXS], one[MAXS * 16];
  for (size_t size = 256; size <= ((size_t)256 << 20); size *= 4) {
    int samples = quick ? 20 : (size >= (64u << 20) ? 60 : 200);
    for (int i = 0; i < samples; i++) {
      CUdeviceptr p;
      double t0 = now_ns();
      CHECK(cuMemAlloc(&p, size));
      CHECK(cuMemFree(p));
      raw[i] = now_ns() - t0;
    }
    int nones = 0;
    for (int i = 0; i < samples; i++) {
      double t0 = now_ns();
      for (int k = 0; k < cycle; k++) {
        CUdeviceptr p;
        double t1 = now_ns();
        CHECK(cuemm_allocate(m, size, &p));
        CHECK(cuemm_free(m, p));
        if (nones < MAXS * 16)
          one[nones++] = now_ns() - t1;
      }
      cyc[i] = (now_ns() - t0) / cycle;
    }
    CHECK(cuemm_flush(m));
    double r = median(raw, samples), c = median(cyc, samples), o = median(one, nones);
    printf("%10zu %14.0f %14.0f %14.0f %8.1fx\n", size, r, c, o, r / c);
  }
}

static void pipelines(cuemm_manager *m, int quick)
{
  size_t work_bytes = quick ? (8u << 20) : ((size_t)1 << 30);
  int iters = 200, runs = quick ? 3 : 9;
  CUstream s;
  CUdeviceptr work, scratch;
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CHECK(cuMemAlloc(&work, work_bytes));
  CHECK(cuMemAlloc(&scratch, 1 << 20));
  double step_ms = bench_step_ms(work, work_bytes / 4, s);
  printf("\n## pipeline: %d x (allocate 1 MiB, queue %.3f ms of GPU work and a write of the 1 MiB, free); "
         "median of %d runs, ms\n", iters, step_ms, runs);
  bench_pipeline(m, CUEMM_DEFAULT, work, work_bytes / 4, scratch, s, 20); /* warm */
  /* The variants take turns, so that a drift of the GPU's clocks over the
   * run is shared by all of them rather than charged to one. */
  double v[4][16], med[4];
  for (int r = 0; r < runs; r++)
    for (int k = 0; k < 4; k++)
      v[k][r] = bench_pipeline(m, (bench_pipeline_kind)k, work, work_bytes / 4, scratch, s, iters);
  for (int k = 0; k < 4; k++)
    med[k] = median(v[k], runs);
  for (int k = 0; k < 4; k++)
    printf("%-20s %9.2f ms  %+6.2f%% vs work alone\n", bench_pipeline_name[k], med[k],
           100.0 * (med[k] - med[WORK_ONLY]) / med[WORK_ONLY]);
  CHECK(cuMemFree(scratch));
  CHECK(cuMemFree(work));
  CHECK(cuStreamDestroy(s));
}

int main(int argc, char **argv)
{
  CUdevice dev;
  CUcontext ctx;
  int quick = bench_start(argc, argv, &dev, &ctx);
  cuemm_manager *m;
  CHECK(cuemm_manager_create(ctx, NULL, &m));
  pair_latency(m, quick);
  pipelines(m, quick);
  CHECK(cuemm_destroy(m));
  bench_end(dev);
  return 0;
}
