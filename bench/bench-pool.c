/* bench-pool.c: what the growable pool costs, against the driver in the
 * same run.
 *
 * 1. Alloc+free pair by size, 256 B .. 16 MiB, steady state, one thread:
 *    cuemm with CUEMM_POOL=vmm (its deferred frees included: each sample
 *    times a whole cycle of max_pending_count + 1 pairs, the last of which
 *    flushes with one cuCtxSynchronize, and divides) against
 *    cuMemAllocAsync+cuMemFreeAsync on the device's default memory pool
 *    with its release threshold set to the maximum.  Medians; the two
 *    sides take turns in blocks of samples.
 * 2. Growth: a fresh pool growing by N bytes (one request of N) against one
 *    cuMemAlloc of N bytes, N = 64 MiB .. 8 GiB, with the piece size the
 *    pool chose (large growths are made of pieces, piece.c), 5 ms between
 *    rounds and then 200 ms, beside the time of writing N bytes (fresh
 *    memory is zeroed before the driver hands it out); the cost of
 *    growing 1 GiB one unit at a time for several units
 *    (CUEMM_POOL_CHUNK), which is the measurement that sets the default
 *    chunk; and cuMemCreate of one piece by size, 2 MiB .. 8 GiB, beside
 *    what the pool measured of its own pieces, which shows where the
 *    optimum lies.
 * 3. The pipeline: 200 x (allocate 1 MiB, queue ~0.3 ms of GPU work and a
 *    write of the 1 MiB, free) with the pool against the same work on a
 *    buffer allocated once.  Median of several runs, taking turns.
 *
 * Usage: bench-pool [--quick]   (--quick: small sizes and few samples, for
 * a smoke run on the simulated driver)
 */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BENCH_NAME "bench-pool"
#include "bench.h"

#define MiB ((size_t)1 << 20)


static CUcontext ctx;

static cuemm_manager *pool_manager(size_t chunk, size_t reserve)
{
  cuemm_config c;
  CHECK(cuemm_config_init(&c));
  c.pool = CUEMM_POOL_VMM;
  if (chunk)
    c.pool_chunk = chunk;
  c.pool_reserve = reserve;
  c.pool_release_threshold = (size_t)1 << 46;
  cuemm_manager *m;
  CHECK(cuemm_manager_create(ctx, &c, &m));
  return m;
}


/* Pairs of `size` for whole cycles until at least `ns` have passed (and at
 * least 5 cycles): the pool has grown, and the first size measured is not
 * charged with the clock ramping up, cold caches and the first flushes. */
static void warm_pairs(cuemm_manager *m, size_t size, int cycle, double ns)
{
  double t0 = now_ns();
  for (int n = 0; n < 5 || now_ns() - t0 < ns; n++)
    for (int k = 0; k < cycle; k++) {
      CUdeviceptr p;
      CHECK(cuemm_allocate(m, size, &p));
      CHECK(cuemm_free(m, p));
    }
}

static void pairs(CUdevice dev, int quick)
{
  cuemm_manager *m = pool_manager(0, 0);
  cuemm_stats st;
  CHECK(cuemm_get_stats(m, &st));
  int cycle = (int)st.max_pending_count + 1;
  int async = bench_async_setup(dev);
  CUstream s;
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  printf("\n## alloc+free pair, steady state, median ns per pair (pool: whole cycles of %d pairs, flush included)\n",
         cycle);
  printf("%10s %16s %16s %14s %9s\n", "size", "AllocAsync+Free", "pool cycle/pair", "pool 1 pair", "speedup");
  enum { MAXS = 2000 };
  static double drv[MAXS], cyc[MAXS], one[MAXS * 16];
  double warm_ns = quick ? 2e6 : 50e6;
  warm_pairs(m, 256, cycle, 4 * warm_ns); /* once, before the first size */
  for (size_t size = 256; size <= 16 * MiB; size *= 4) {
    int samples = quick ? 20 : 1000;
    double d = 0;
    if (async)
      for (int i = 0; i < 50; i++) { /* warm the driver's pool */
        CUdeviceptr p;
        CHECK(cuMemAllocAsync(&p, size, s));
        CHECK(cuMemFreeAsync(p, s));
      }
    warm_pairs(m, size, cycle, warm_ns);
    /* The two sides take turns in blocks of 50 samples, so that a change in
     * the host's speed during the row (clock, neighbours) reaches both;
     * cycles are timed whole (no clock read inside), single pairs apart. */
    for (int i0 = 0; i0 < samples; i0 += 50) {
      int i1 = i0 + 50 < samples ? i0 + 50 : samples;
      for (int i = i0; async && i < i1; i++) {
        CUdeviceptr p;
        double t0 = now_ns();
        CHECK(cuMemAllocAsync(&p, size, s));
        CHECK(cuMemFreeAsync(p, s));
        drv[i] = now_ns() - t0;
      }
      if (async) /* the pool's next flush must not wait for the driver's queued frees */
        CHECK(cuStreamSynchronize(s));
      for (int i = i0; i < i1; i++) {
        double t0 = now_ns();
        for (int k = 0; k < cycle; k++) {
          CUdeviceptr p;
          CHECK(cuemm_allocate(m, size, &p));
          CHECK(cuemm_free(m, p));
        }
        cyc[i] = (now_ns() - t0) / cycle;
      }
    }
    if (async)
      d = median(drv, samples);
    int nones = 0;
    for (int i = 0; i < samples && nones < MAXS * 16; i++)
      for (int k = 0; k < cycle; k++) {
        CUdeviceptr p;
        double t1 = now_ns();
        CHECK(cuemm_allocate(m, size, &p));
        CHECK(cuemm_free(m, p));
        one[nones++] = now_ns() - t1;
      }
    double c = median(cyc, samples), o = median(one, nones);
    if (async)
      printf("%10zu %16.0f %16.1f %14.1f %8.1fx\n", size, d, c, o, d / c);
    else
      printf("%10zu %16s %16.1f %14.1f %9s\n", size, "n/a", c, o, "n/a");
  }
  cuemm_pool_stats ps;
  CHECK(cuemm_pool_get_stats(m, &ps));
  printf("# pool after the pairs: %zu bytes mapped in %zu chunks, %llu growth steps\n", ps.mapped_bytes, ps.chunks,
         (unsigned long long)ps.grow_steps);
  CHECK(cuStreamDestroy(s));
  CHECK(cuemm_destroy(m));
}

/* Where a cycle's time goes: the flush's idle cuCtxSynchronize, and the
 * pair with the count threshold raised so that sync is amortized over many
 * frees; a CPU malloc+free pair for scale.  Medians. */
static void flush_cost(int quick)
{
  int samples = quick ? 20 : 2000;
  static double v[2000];
  for (int i = 0; i < samples; i++) {
    double t0 = now_ns();
    CHECK(cuCtxSynchronize());
    v[i] = now_ns() - t0;
  }
  double sync = median(v, samples);
  for (int i = 0; i < samples; i++) {
    double t0 = now_ns();
    for (int k = 0; k < 100; k++) {
      void *volatile q = malloc(256 + k);
      free(q);
    }
    v[i] = (now_ns() - t0) / 100;
  }
  double cpu = median(v, samples);
  cuemm_config c;
  CHECK(cuemm_config_init(&c));
  c.pool = CUEMM_POOL_VMM;
  c.pool_release_threshold = (size_t)1 << 46;
  c.max_pending_count = 1000;
  cuemm_manager *m;
  CHECK(cuemm_manager_create(ctx, &c, &m));
  int cycle = 1001, n = quick ? 5 : 200;
  for (int k = 0; k < cycle; k++) { /* warm */
    CUdeviceptr p;
    CHECK(cuemm_allocate(m, 4096, &p));
    CHECK(cuemm_free(m, p));
  }
  for (int i = 0; i < n; i++) {
    double t0 = now_ns();
    for (int k = 0; k < cycle; k++) {
      CUdeviceptr p;
      CHECK(cuemm_allocate(m, 4096, &p));
      CHECK(cuemm_free(m, p));
    }
    v[i] = (now_ns() - t0) / cycle;
  }
  double big = median(v, n);
  CHECK(cuemm_destroy(m));
  /* The locking a pair cannot avoid: alloc and free each take and drop the
   * manager's lock, one atomic read-modify-write each way (lock.h). */
  atomic_int word = 0;
  for (int i = 0; i < samples; i++) {
    double t0 = now_ns();
    for (int k = 0; k < 100; k++)
      for (int j = 0; j < 2; j++) {
        int expected = 0;
        atomic_compare_exchange_strong_explicit(&word, &expected, 1, memory_order_acquire, memory_order_relaxed);
        atomic_fetch_sub_explicit(&word, 1, memory_order_release);
      }
    v[i] = (now_ns() - t0) / 100;
  }
  double locks = median(v, samples);
  printf("\n## where a cycle's time goes, medians\n");
  printf("idle cuCtxSynchronize                      %8.1f ns\n", sync);
  printf("pool pair, 4 KiB, max_pending_count 1000  %8.1f ns (cycles of %d pairs, flush included)\n", big, cycle);
  printf("two lock round trips, uncontended          %8.1f ns (the atomics of one pair)\n", locks);
  printf("CPU malloc+free pair, 256 B               %8.1f ns\n", cpu);
}

/* Gives the driver `ms` after a large free: it may still be scrubbing or
 * unmapping what was just released, work that neither side should be
 * charged for. */
static void settle_ms(long ms)
{
  struct timespec ts = { ms / 1000, ms % 1000 * 1000 * 1000 };
  nanosleep(&ts, NULL);
}

static void settle(void)
{
  settle_ms(5);
}

/* "64M", "1G": a power-of-two size, short. */
static const char *size_name(size_t n, char *buf, size_t len)
{
  if (n >= ((size_t)1 << 30) && n % ((size_t)1 << 30) == 0)
    snprintf(buf, len, "%zuG", n >> 30);
  else if (n % MiB == 0)
    snprintf(buf, len, "%zuM", n / MiB);
  else
    snprintf(buf, len, "%zu", n);
  return buf;
}

/* cuMemCreate of one piece of each size, a few rounds each, released at
 * once: where the driver's cost per byte is lowest, against what the pool
 * measured of its own calls (cuMemCreate + cuMemMap, best per byte) in the
 * growths before. */
static void piece_table(int quick)
{
  int rounds = quick ? 2 : 3;
  size_t top = quick ? 256 * MiB : 8192 * MiB;
  cuemm_manager *seen = pool_manager(0, 0); /* its record is the device's, shared by every manager */
  cuemm_pool_stats ps;
  CHECK(cuemm_pool_get_stats(seen, &ps));
  CHECK(cuemm_destroy(seen));
  printf("\n## cuMemCreate of one piece by size, %d rounds each, cuMemRelease after; beside it, the best the pool "
         "measured of its own cuMemCreate + cuMemMap per piece in the growths above\n", rounds);
  printf("%8s %12s %12s %12s %14s %8s\n", "piece", "median us", "min us", "min us/GiB", "pool best us", "pool n");
  CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
                               .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 } };
  size_t best = 0;
  double best_cost = 0;
  int k = 0;
  for (size_t n = 2 * MiB; n <= top; n *= 2, k++) {
    double t[8];
    for (int r = 0; r < rounds; r++) {
      CUmemGenericAllocationHandle h;
      double t0 = now_ns();
      CHECK(cuMemCreate(&h, n, &prop, 0));
      t[r] = (now_ns() - t0) / 1e3;
      CHECK(cuMemRelease(h));
      settle();
    }
    double lo = t[0];
    for (int r = 1; r < rounds; r++)
      lo = t[r] < lo ? t[r] : lo;
    double per_gib = lo * (double)((size_t)1 << 30) / (double)n;
    if (!best || per_gib <= best_cost)
      best = n, best_cost = per_gib;
    char pn[32];
    printf("%8s %12.1f %12.1f %12.1f %14.1f %8u\n", size_name(n, pn, sizeof pn), median(t, rounds), lo, per_gib,
           k < CUEMM_POOL_PIECE_CLASSES ? ps.piece_cost_us[k] : 0.0,
           k < CUEMM_POOL_PIECE_CLASSES ? ps.piece_samples[k] : 0u);
  }
  char bn[32];
  printf("# cheapest per byte by hand: %s (%.1f us/GiB); CUEMM_POOL_PIECE=0 lets the pool find it\n",
         size_name(best, bn, sizeof bn), best_cost);
}

/* Writing n bytes of memory mapped beforehand (cuMemsetD8, synchronized):
 * median us.  Memory the driver hands out fresh it has zeroed first, at
 * about this speed, so this is the floor under cuMemAlloc and growth alike. */
static double fill_us(size_t n, int runs)
{
  CUdeviceptr p;
  CHECK(cuMemAlloc(&p, n));
  CHECK(cuMemsetD8(p, 0, n)); /* first touch */
  CHECK(cuCtxSynchronize());
  double t[16];
  for (int r = 0; r < runs; r++) {
    double t0 = now_ns();
    CHECK(cuMemsetD8(p, (unsigned char)r, n));
    CHECK(cuCtxSynchronize());
    t[r] = (now_ns() - t0) / 1e3;
  }
  CHECK(cuMemFree(p));
  return median(t, runs);
}

/* One table of growth by N against cuMemAlloc of N, `pause` ms between
 * rounds. */
static void growth_table(int quick, long pause)
{
  printf("%12s %12s %12s %8s %10s %8s %12s %12s %8s\n", "N", "cuMemAlloc", "pool grow", "ratio", "piece", "pieces",
         "pool max", "write N", "GB/s");
  int runs = quick ? 3 : 11;
  size_t top = quick ? 256 * MiB : 8192 * MiB;
  for (size_t n = 64 * MiB; n <= top; n *= 2) {
    double a[16], g[16];
    size_t piece = 0, pieces = 0;
    /* The two take turns going first, after one untimed round: whichever
     * follows the other may find the driver still busy with what the other
     * released, and a fixed order would charge that to one side only. */
    for (int r = -1; r < runs; r++) {
      for (int k = 0; k < 2; k++) {
        CUdeviceptr p;
        if ((k == 0) == (r % 2 == 0)) {
          double t0 = now_ns();
          CHECK(cuMemAlloc(&p, n));
          double t = (now_ns() - t0) / 1e3;
          CHECK(cuMemFree(p));
          if (r >= 0)
            a[r] = t;
        } else {
          cuemm_manager *m = pool_manager(0, 2 * n);
          double t0 = now_ns();
          CHECK(cuemm_allocate(m, n, &p));
          double t = (now_ns() - t0) / 1e3;
          cuemm_pool_stats ps;
          CHECK(cuemm_pool_get_stats(m, &ps));
          piece = ps.piece_bytes, pieces = ps.chunks;
          CHECK(cuemm_destroy(m));
          if (r >= 0)
            g[r] = t;
        }
        CHECK(cuCtxSynchronize());
        settle_ms(pause);
      }
    }
    double gmax = 0;
    for (int r = 0; r < runs; r++)
      gmax = g[r] > gmax ? g[r] : gmax;
    double ma = median(a, runs), mg = median(g, runs), fill = fill_us(n, runs);
    settle_ms(pause);
    char pn[32];
    printf("%12zu %12.1f %12.1f %7.2fx %10s %8zu %12.1f %12.1f %8.0f\n", n, ma, mg, mg / ma,
           size_name(piece, pn, sizeof pn), pieces, gmax, fill, (double)n / (mg * 1e3));
  }
}

static void growth(int quick)
{
  /* Right after a release the driver may hand back, at a fraction of the
   * cost, memory the process just gave it, or make the request wait:
   * which side of a pair gets which is the driver's to decide, so the
   * first table measures the driver as much as the pool.  The second
   * leaves it time to settle: both sides then get fresh memory, which the
   * driver zeroes first, the case of a program that grows rarely. */
  printf("\n## growth by N bytes: one request of N on a fresh pool vs one cuMemAlloc of N; median us "
         "(the pool's pieces: the size chosen in the last run, and how many; writing N bytes with cuMemsetD8, "
         "and the pool's growth in GB/s); 5 ms between rounds\n");
  growth_table(quick, 5);
  if (!quick) {
    printf("\n## the same, 200 ms between rounds\n");
    growth_table(quick, 200);
  }
  int runs = quick ? 3 : 11;
  size_t top = quick ? 256 * MiB : 8192 * MiB;

  /* What one growth step is made of, done by hand with the same calls: the
   * driver's share of the pool's figure. */
  printf("\n## one growth step by hand (reservation made beforehand): median us\n");
  printf("%12s %12s %12s %14s %12s\n", "N", "cuMemCreate", "cuMemMap", "cuMemSetAccess", "total");
  static const size_t by_hand[] = { 64 * MiB, 1024 * MiB, 8192 * MiB };
  for (size_t k = 0; k < sizeof by_hand / sizeof by_hand[0]; k++) {
    size_t n = by_hand[k];
    if (n > top)
      break;
    double c[16], mp[16], ac[16], tot[16];
    CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                 .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 } };
    CUmemAccessDesc acc = { .location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    for (int r = 0; r < runs; r++) {
      CUdeviceptr va;
      CUmemGenericAllocationHandle h;
      CHECK(cuMemAddressReserve(&va, n, 0, 0, 0));
      double t0 = now_ns();
      CHECK(cuMemCreate(&h, n, &prop, 0));
      double t1 = now_ns();
      CHECK(cuMemMap(va, n, 0, h, 0));
      double t2 = now_ns();
      CHECK(cuMemSetAccess(va, n, &acc, 1));
      double t3 = now_ns();
      c[r] = (t1 - t0) / 1e3, mp[r] = (t2 - t1) / 1e3, ac[r] = (t3 - t2) / 1e3, tot[r] = (t3 - t0) / 1e3;
      CHECK(cuMemUnmap(va, n));
      CHECK(cuMemRelease(h));
      CHECK(cuMemAddressFree(va, n));
      settle();
    }
    printf("%12zu %12.1f %12.1f %14.1f %12.1f\n", n, median(c, runs), median(mp, runs), median(ac, runs),
           median(tot, runs));
  }

  size_t total = quick ? 128 * MiB : 1024 * MiB;
  printf("\n## growing %zu MiB one unit at a time (requests of one unit each): per step and per GiB\n", total / MiB);
  printf("%10s %8s %12s %12s\n", "unit", "steps", "us/step", "ms/GiB");
  static const size_t units[] = { 2 * MiB, 8 * MiB, 32 * MiB, 128 * MiB };
  for (size_t k = 0; k < sizeof units / sizeof units[0]; k++) {
    size_t unit = units[k], steps = total / unit;
    if (steps == 0)
      continue;
    cuemm_manager *m = pool_manager(unit, 2 * total);
    CUdeviceptr *p = malloc(steps * sizeof *p);
    double t0 = now_ns();
    for (size_t i = 0; i < steps; i++)
      CHECK(cuemm_allocate(m, unit, &p[i]));
    double t = (now_ns() - t0) / 1e3;
    printf("%10zu %8zu %12.1f %12.2f\n", unit, steps, t / (double)steps, t / 1e3 * (double)((size_t)1 << 30) / (double)total);
    free(p);
    CHECK(cuemm_destroy(m));
  }
}

static void pipelines(int quick)
{
  size_t work_bytes = quick ? 8 * MiB : (size_t)1 << 30;
  int iters = 200, runs = quick ? 3 : 9;
  cuemm_manager *m = pool_manager(0, 0);
  CUstream s;
  CUdeviceptr work, scratch;
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CHECK(cuMemAlloc(&work, work_bytes));
  CHECK(cuMemAlloc(&scratch, MiB));
  double step_ms = bench_step_ms(work, work_bytes / 4, s);
  printf("\n## pipeline: %d x (allocate 1 MiB, queue %.3f ms of GPU work and a write of the 1 MiB, free); "
         "median of %d runs, ms\n", iters, step_ms, runs);
  bench_pipeline(m, CUEMM_DEFAULT, work, work_bytes / 4, scratch, s, 20); /* warm */
  double v[2][16];
  for (int r = 0; r < runs; r++)
    for (int k = 0; k < 2; k++)
      v[k][r] = bench_pipeline(m, k ? CUEMM_DEFAULT : WORK_ONLY, work, work_bytes / 4, scratch, s, iters);
  double alone = median(v[0], runs), pooled = median(v[1], runs);
  printf("%-20s %9.2f ms\n", "work alone", alone);
  printf("%-20s %9.2f ms  %+6.2f%% vs work alone\n", "cuemm pool", pooled, 100.0 * (pooled - alone) / alone);
  CHECK(cuMemFree(scratch));
  CHECK(cuMemFree(work));
  CHECK(cuStreamDestroy(s));
  CHECK(cuemm_destroy(m));
}

int main(int argc, char **argv)
{
  CUdevice dev;
  int quick = bench_start(argc, argv, &dev, &ctx);
  pairs(dev, quick);
  flush_cost(quick);
  growth(quick);
  piece_table(quick);
  pipelines(quick);
  bench_end(dev);
  return 0;
}
