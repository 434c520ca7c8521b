/* bench-heap.c: how the stream-ordered path scales with threads at every
 * size, and what a free from another thread costs, against the driver's
 * stream-ordered pool and glibc's malloc/free driven through the same loops.
 *
 * 1. Mixed sizes across threads ("sizes").  T = 1, 2, 4, 8, 16 threads, each
 *    on its own non-blocking stream, each keeping 16 blocks live and
 *    replacing one at a time: free the block of a random slot on the
 *    thread's stream, allocate a new one there.  Sizes are drawn
 *    log-uniformly from 256 B up to a maximum (512 B, 8 KiB, 128 KiB,
 *    2 MiB, 8 MiB); every thread draws its own sequence of slots and sizes,
 *    the same for the three allocators.  A run is a fixed time after a
 *    warm-up (every slot filled, then 256 replacements; the first tenth of
 *    the timed span is not counted, so that the threads have all started,
 *    or --warm's span: at sizes of 2 MiB and up, a pool's first million or
 *    so replacements are its growth, which a program pays once);
 *    the median of three runs.  For each maximum: aggregate replacements
 *    (a free and an alloc) per second at each T, 16T/1T for each allocator,
 *    and one thread's cuemm / driver.  At maxima of 2 MiB and up, the
 *    manager's figures at the end of each cuemm run, taken while the
 *    threads are paused with their blocks live: what it holds from the
 *    driver, what the threads' caches keep, how often the pool took cached
 *    blocks back and recorded events.
 * 2. Frees from another thread ("remote").  Threads in pairs (2, 4, 8, 16
 *    threads): the producer allocates 4 KiB blocks on its own stream and
 *    passes each to its consumer through a single-producer single-consumer
 *    ring of 256 slots (C11 atomics, no lock); the consumer frees it on the
 *    producer's stream, as PyTorch's autograd thread frees what the forward
 *    thread allocated.  Aggregate pairs per second; cuemm / malloc and
 *    cuemm / driver at each count; one thread's same-thread pair for
 *    reference.
 *
 * cuemm is a manager with a VMM pool, its release threshold out of reach
 * (as bench-stream's), stream reuse "event" unless CUEMM_STREAM_REUSE says
 * otherwise; a fresh manager per run.  The driver's side is
 * cuMemAllocAsync/cuMemFreeAsync on the device's default pool with its
 * release threshold at the maximum, "n/a" where the driver lacks it
 * (--force-driver measures cuMemAllocAsync there anyway: the simulated
 * driver has no pool attributes).  After every cuemm run the manager's
 * live count is checked against the blocks the threads hold (while paused,
 * and zero once all are freed); the last line says whether all matched.
 *
 * Usage: bench-heap [--quick] [--part sizes|remote] [--max SIZE] [--warm MS] [--force-driver]
 *   --quick   runs of 30 ms, one run each (300 ms, three runs by default)
 *   --max     one maximum for part 1 (512, 8K, 128K, 2M, 8MiB, ... bytes)
 *   --warm    milliseconds of every run, every allocator's alike, left
 *             uncounted before its timed span (0 to 60000; default a tenth
 *             of the span)
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_NAME "bench-heap"
#include "bench.h"

#define MiB ((size_t)1 << 20)
#define LIVE 16          /* blocks each thread keeps live in part 1 */
#define MAXT 16          /* most threads */
#define TABLE 4096       /* draws of (slot, size) per thread, used in a cycle */
#define WARM 256         /* replacements before the timed span */
#define CHECK_EVERY 16   /* operations between looks at the stop flag */
#define RING 256         /* slots of a pair's ring */
#define REMOTE_SIZE 4096

typedef enum { B_CUEMM, B_DRIVER, B_MALLOC, NBACKENDS } backend;

static CUcontext ctx;
static int driver_ok;    /* cuMemAllocAsync measured */
static double run_ms;    /* the counted span of a run */
static double warm_ms;   /* the uncounted span before it */
static int rounds;       /* runs per figure, the median taken */
static char runs_text[64]; /* says so in the tables' titles */
static unsigned checks, mismatches;

static cuemm_manager *pool_manager(void)
{
  cuemm_config c;
  CHECK(cuemm_config_init(&c));
  c.pool = CUEMM_POOL_VMM;
  c.pool_release_threshold = (size_t)1 << 46;
  if (!getenv("CUEMM_STREAM_REUSE"))
    c.stream_reuse = CUEMM_STREAM_REUSE_EVENT;
  cuemm_manager *m;
  CHECK(cuemm_manager_create(ctx, &c, &m));
  return m;
}

/* The three allocators behind one pair of calls; b is the same for a whole
 * run, so the branch is predicted and costs each side alike. */
static inline CUdeviceptr heap_alloc(backend b, cuemm_manager *m, size_t size, CUstream s)
{
  CUdeviceptr p = 0;
  if (b == B_CUEMM)
    CHECK(cuemm_allocate_async(m, size, s, &p));
  else if (b == B_DRIVER)
    CHECK(cuMemAllocAsync(&p, size, s));
  else {
    void *h = malloc(size);
    if (!h) {
      fprintf(stderr, BENCH_NAME ": malloc(%zu) failed\n", size);
      exit(1);
    }
    p = (CUdeviceptr)(uintptr_t)h;
  }
  return p;
}

static inline void heap_free(backend b, cuemm_manager *m, CUdeviceptr p, CUstream s)
{
  if (b == B_CUEMM)
    CHECK(cuemm_free_async(m, p, s));
  else if (b == B_DRIVER)
    CHECK(cuMemFreeAsync(p, s));
  else
    free((void *)(uintptr_t)p);
}

static void sleep_ms(double ms)
{
  struct timespec d = { (time_t)(ms / 1000), (long)((ms - (double)(long)(ms / 1000) * 1000) * 1e6) };
  nanosleep(&d, NULL);
}

/* A waiting thread of a pair: spins briefly, then yields, so that a machine
 * with fewer cores than threads still makes progress. */
static inline void relax(unsigned *spins)
{
  if (++*spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  } else {
    *spins = 0;
    sched_yield();
  }
}

static void fmt_size(char *buf, size_t n, size_t v)
{
  if (v >= MiB && v % MiB == 0)
    snprintf(buf, n, "%zu MiB", v / MiB);
  else if (v >= 1024 && v % 1024 == 0)
    snprintf(buf, n, "%zu KiB", v / 1024);
  else
    snprintf(buf, n, "%zu B", v);
}

/* a / b as "12.34x", or "n/a" where either side was not measured. */
static const char *ratio(char *buf, double a, double b)
{
  if (a > 0 && b > 0)
    snprintf(buf, 16, "%.2fx", a / b);
  else
    snprintf(buf, 16, "n/a");
  return buf;
}

static const char *rate(char *buf, double v, int measured)
{
  if (measured)
    snprintf(buf, 16, "%.3f", v);
  else
    snprintf(buf, 16, "n/a");
  return buf;
}

/* ---- the timing of a run, shared by both parts ------------------------------ */

/* Each thread publishes its count every CHECK_EVERY operations on a line
 * of its own; the main thread reads the sum at the two ends of the span. */
typedef struct counter {
  _Alignas(64) atomic_ullong n;
} counter;

static unsigned long long sum(counter *c, int n)
{
  unsigned long long s = 0;
  for (int i = 0; i < n; i++)
    s += atomic_load_explicit(&c[i].n, memory_order_relaxed);
  return s;
}

/* Operations per second of `n` counters between warm_ms after the start
 * and the end of the span; then raises the stop flag. */
static double timed_span(counter *c, int n, atomic_int *stop)
{
  sleep_ms(warm_ms);
  unsigned long long c0 = sum(c, n);
  double t0 = now_ns();
  sleep_ms(run_ms);
  unsigned long long c1 = sum(c, n);
  double t1 = now_ns();
  atomic_store(stop, 1);
  return (double)(c1 - c0) / ((t1 - t0) / 1e9);
}

static void check_live(cuemm_manager *m, size_t want, const char *when)
{
  cuemm_stats st;
  CHECK(cuemm_get_stats(m, &st));
  checks++;
  if (st.live_count != want || st.alloc_failures != 0) {
    mismatches++;
    printf("# MISMATCH %s: cuemm counts %zu live blocks (%llu failed allocations), the threads hold %zu\n", when,
           st.live_count, (unsigned long long)st.alloc_failures, want);
  }
}

/* ---- 1. mixed sizes across threads ------------------------------------------ */

static uint32_t draw_size[MAXT][TABLE];
static uint8_t draw_slot[MAXT][TABLE];

static uint64_t splitmix(uint64_t *x)
{
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Each thread's slots and sizes, log-uniform in [lo, max]: drawn once per
 * maximum, so every allocator runs the same sequence. */
static void draw(size_t max)
{
  size_t lo = max < 256 ? max : 256;
  double span = log2((double)max / (double)lo);
  for (int t = 0; t < MAXT; t++) {
    uint64_t x = 0x5eed0000u + (uint64_t)t * 7919 + max;
    for (int i = 0; i < TABLE; i++) {
      double u = (double)(splitmix(&x) >> 11) * 0x1.0p-53;
      size_t v = (size_t)((double)lo * exp2(u * span));
      draw_size[t][i] = (uint32_t)(v < lo ? lo : v > max ? max : v);
      draw_slot[t][i] = (uint8_t)(splitmix(&x) % LIVE);
    }
  }
}

typedef struct sizes_worker {
  backend b;
  cuemm_manager *m;
  CUstream s;
  int t;                      /* which draw table */
  pthread_barrier_t *start, *paused, *resume;
  atomic_int *stop;
  counter *ops;
} sizes_worker;

static void *sizes_work(void *arg)
{
  sizes_worker *w = arg;
  backend b = w->b;
  cuemm_manager *m = w->m;
  CUstream s = w->s;
  const uint32_t *size = draw_size[w->t];
  const uint8_t *slot = draw_slot[w->t];
  if (b != B_MALLOC)
    CHECK(cuCtxSetCurrent(ctx));
  CUdeviceptr live[LIVE];
  unsigned k = 0;
  for (int i = 0; i < LIVE; i++, k++)
    live[i] = heap_alloc(b, m, size[k], s);
  for (int i = 0; i < WARM; i++, k++) {
    unsigned j = k % TABLE;
    heap_free(b, m, live[slot[j]], s);
    live[slot[j]] = heap_alloc(b, m, size[j], s);
  }
  pthread_barrier_wait(w->start);
  unsigned long long n = 0;
  while (!atomic_load_explicit(w->stop, memory_order_relaxed)) {
    for (int c = 0; c < CHECK_EVERY; c++, k++) {
      unsigned j = k % TABLE;
      heap_free(b, m, live[slot[j]], s);
      live[slot[j]] = heap_alloc(b, m, size[j], s);
    }
    n += CHECK_EVERY;
    atomic_store_explicit(&w->ops->n, n, memory_order_relaxed);
  }
  /* Paused with every block live while the main thread reads the figures. */
  pthread_barrier_wait(w->paused);
  pthread_barrier_wait(w->resume);
  for (int i = 0; i < LIVE; i++)
    heap_free(b, m, live[i], s);
  if (b != B_MALLOC)
    CHECK(cuStreamSynchronize(s));
  if (b == B_CUEMM)
    CHECK(cuemm_stream_release(m, s));
  return NULL;
}

typedef struct heap_figures {
  cuemm_stats st;
  cuemm_pool_stats ps;
} heap_figures;

/* Replacements per second of `threads` threads of allocator b; for cuemm,
 * *fig gets the manager's figures at the pause. */
static double sizes_run(backend b, int threads, heap_figures *fig)
{
  pthread_t th[MAXT];
  sizes_worker w[MAXT];
  CUstream s[MAXT] = { 0 };
  static counter ops[MAXT];
  pthread_barrier_t start, paused, resume;
  atomic_int stop = 0;
  cuemm_manager *m = b == B_CUEMM ? pool_manager() : NULL;
  pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
  pthread_barrier_init(&paused, NULL, (unsigned)threads + 1);
  pthread_barrier_init(&resume, NULL, (unsigned)threads + 1);
  for (int i = 0; i < threads; i++) {
    if (b != B_MALLOC)
      CHECK(cuStreamCreate(&s[i], CU_STREAM_NON_BLOCKING));
    atomic_store(&ops[i].n, 0);
    w[i] = (sizes_worker){ b, m, s[i], i, &start, &paused, &resume, &stop, &ops[i] };
    pthread_create(&th[i], NULL, sizes_work, &w[i]);
  }
  pthread_barrier_wait(&start);
  double r = timed_span(ops, threads, &stop);
  pthread_barrier_wait(&paused);
  if (m) {
    CHECK(cuemm_get_stats(m, &fig->st));
    CHECK(cuemm_pool_get_stats(m, &fig->ps));
    check_live(m, (size_t)threads * LIVE, "paused");
  }
  pthread_barrier_wait(&resume);
  for (int i = 0; i < threads; i++)
    pthread_join(th[i], NULL);
  for (int i = 0; i < threads && b != B_MALLOC; i++)
    CHECK(cuStreamDestroy(s[i]));
  if (m) {
    check_live(m, 0, "after the frees");
    CHECK(cuemm_destroy(m));
  }
  pthread_barrier_destroy(&start);
  pthread_barrier_destroy(&paused);
  pthread_barrier_destroy(&resume);
  return r;
}

static const int thread_counts[] = { 1, 2, 4, 8, 16 };
#define NCOUNTS (int)(sizeof thread_counts / sizeof thread_counts[0])

typedef struct sizes_summary {
  size_t max;
  double one[NBACKENDS], all[NBACKENDS]; /* 1 thread, 16 threads */
} sizes_summary;

static void sizes_part(size_t max, sizes_summary *sum_out)
{
  char lo[32], hi[32], b1[16], b2[16], b3[16];
  fmt_size(lo, sizeof lo, max < 256 ? max : 256);
  fmt_size(hi, sizeof hi, max);
  draw(max);
  int show_stats = max >= 2 * MiB;
  static heap_figures figs[NCOUNTS][8];
  double med[NCOUNTS][NBACKENDS];
  for (int k = 0; k < NCOUNTS; k++) {
    double v[NBACKENDS][8];
    for (int r = 0; r < rounds; r++)
      for (int b = 0; b < NBACKENDS; b++)
        v[b][r] = b == B_DRIVER && !driver_ok ? 0 : sizes_run((backend)b, thread_counts[k], &figs[k][r]) / 1e6;
    for (int b = 0; b < NBACKENDS; b++)
      med[k][b] = median(v[b], rounds);
  }
  printf("\n## sizes %s .. %s (log-uniform), %d live blocks per thread, each on its own stream: aggregate Mops/s "
         "(an op: free a random block, allocate one; %s)\n",
         lo, hi, LIVE, runs_text);
  printf("%8s %12s %12s %12s %12s %13s\n", "threads", "cuemm", "driver", "malloc", "cuemm/drv", "cuemm/malloc");
  for (int k = 0; k < NCOUNTS; k++)
    printf("%8d %12.3f %12s %12.3f %12s %13s\n", thread_counts[k], med[k][B_CUEMM],
           rate(b1, med[k][B_DRIVER], driver_ok), med[k][B_MALLOC], ratio(b2, med[k][B_CUEMM], med[k][B_DRIVER]),
           ratio(b3, med[k][B_CUEMM], med[k][B_MALLOC]));
  int last = NCOUNTS - 1;
  printf("16 threads / 1 thread (%s): cuemm %s, driver %s, malloc %s\n", hi, ratio(b1, med[last][B_CUEMM], med[0][B_CUEMM]),
         ratio(b2, med[last][B_DRIVER], med[0][B_DRIVER]), ratio(b3, med[last][B_MALLOC], med[0][B_MALLOC]));
  printf("one thread, cuemm / driver (%s): %s\n", hi, ratio(b1, med[0][B_CUEMM], med[0][B_DRIVER]));
  if (show_stats) {
    printf("# cuemm's manager at the end of each run, the threads paused with their blocks live (MiB; counts since "
           "the manager's creation)\n");
    printf("%8s %4s %10s %10s %7s %7s %10s %8s %6s %9s %9s %9s\n", "threads", "run", "live", "mapped", "chunks",
           "grows", "cached", "c.blocks", "heaps", "reclaims", "events", "steals");
    for (int k = 0; k < NCOUNTS; k++)
      for (int r = 0; r < rounds; r++) {
        const heap_figures *f = &figs[k][r];
        printf("%8d %4d %10.1f %10.1f %7zu %7llu %10.1f %8zu %6zu %9llu %9llu %9llu\n", thread_counts[k], r + 1,
               (double)f->st.live_bytes / MiB, (double)f->ps.mapped_bytes / MiB, f->ps.chunks,
               (unsigned long long)f->ps.grow_steps, (double)f->st.stream_cached_bytes / MiB,
               f->st.stream_cached_count, f->st.stream_heaps, (unsigned long long)f->st.stream_reclaims,
               (unsigned long long)f->st.stream_events, (unsigned long long)f->st.stream_steals);
      }
  }
  sum_out->max = max;
  for (int b = 0; b < NBACKENDS; b++) {
    sum_out->one[b] = med[0][b];
    sum_out->all[b] = med[last][b];
  }
  fflush(stdout);
}

/* ---- 2. frees from another thread ------------------------------------------- */

/* One pair's ring: the producer alone writes head, the consumer alone
 * tail, each on its own line; a slot is written before head moves past it
 * (release) and read after the consumer sees that (acquire). */
typedef struct ring {
  _Alignas(64) atomic_size_t head;
  _Alignas(64) atomic_size_t tail;
  _Alignas(64) atomic_int done; /* the producer has stopped */
  _Alignas(64) CUdeviceptr slot[RING];
} ring;

typedef struct pair_worker {
  backend b;
  cuemm_manager *m;
  CUstream s;                 /* the producer's stream: both sides use it */
  ring *q;
  pthread_barrier_t *start;
  atomic_int *stop;
  counter *frees;             /* the consumer's count */
  unsigned long long made;    /* the producer's allocations, for the check */
} pair_worker;

static void *producer(void *arg)
{
  pair_worker *w = arg;
  ring *q = w->q;
  if (w->b != B_MALLOC)
    CHECK(cuCtxSetCurrent(ctx));
  size_t h = 0, t = 0;
  unsigned long long n = 0;
  pthread_barrier_wait(w->start);
  while (!atomic_load_explicit(w->stop, memory_order_relaxed)) {
    for (int c = 0; c < CHECK_EVERY; c++) {
      CUdeviceptr p = heap_alloc(w->b, w->m, REMOTE_SIZE, w->s);
      unsigned spins = 0;
      while (h - t == RING) {
        t = atomic_load_explicit(&q->tail, memory_order_acquire);
        if (h - t == RING)
          relax(&spins);
      }
      q->slot[h % RING] = p;
      atomic_store_explicit(&q->head, ++h, memory_order_release);
    }
    n += CHECK_EVERY;
  }
  w->made = n;
  atomic_store_explicit(&q->done, 1, memory_order_release);
  return NULL;
}

static void *consumer(void *arg)
{
  pair_worker *w = arg;
  ring *q = w->q;
  if (w->b != B_MALLOC)
    CHECK(cuCtxSetCurrent(ctx));
  size_t t = 0, h = 0;
  unsigned long long n = 0;
  unsigned spins = 0;
  pthread_barrier_wait(w->start);
  for (;;) {
    if (t == h) {
      h = atomic_load_explicit(&q->head, memory_order_acquire);
      if (t == h) {
        /* done is set after the last head: seen done, one more look. */
        if (atomic_load_explicit(&q->done, memory_order_acquire)) {
          h = atomic_load_explicit(&q->head, memory_order_acquire);
          if (t == h)
            break;
        } else {
          relax(&spins);
          continue;
        }
      }
    }
    spins = 0;
    CUdeviceptr p = q->slot[t % RING];
    heap_free(w->b, w->m, p, w->s);
    atomic_store_explicit(&q->tail, ++t, memory_order_release);
    /* Counted while the run lasts; the drain after it is not. */
    if (++n % CHECK_EVERY == 0 && !atomic_load_explicit(w->stop, memory_order_relaxed))
      atomic_store_explicit(&w->frees->n, n, memory_order_relaxed);
  }
  w->made = n;
  return NULL;
}

/* Same-thread pairs of one thread, for reference. */
static void *same_thread(void *arg)
{
  pair_worker *w = arg;
  if (w->b != B_MALLOC)
    CHECK(cuCtxSetCurrent(ctx));
  unsigned long long n = 0;
  pthread_barrier_wait(w->start);
  while (!atomic_load_explicit(w->stop, memory_order_relaxed)) {
    for (int c = 0; c < CHECK_EVERY; c++) {
      CUdeviceptr p = heap_alloc(w->b, w->m, REMOTE_SIZE, w->s);
      heap_free(w->b, w->m, p, w->s);
    }
    n += CHECK_EVERY;
    atomic_store_explicit(&w->frees->n, n, memory_order_relaxed);
  }
  return NULL;
}

/* Pairs per second of `threads` threads in pairs (threads 1: one thread's
 * same-thread pairs); *fig gets cuemm's figures at the end. */
static double remote_run(backend b, int threads, heap_figures *fig)
{
  int pairs = threads > 1 ? threads / 2 : 1;
  pthread_t th[MAXT];
  pair_worker pw[MAXT / 2], cw[MAXT / 2];
  CUstream s[MAXT / 2] = { 0 };
  static counter frees[MAXT / 2];
  ring *q = aligned_alloc(64, sizeof(ring) * (size_t)pairs);
  if (!q) {
    fprintf(stderr, BENCH_NAME ": no memory for the rings\n");
    exit(1);
  }
  pthread_barrier_t start;
  atomic_int stop = 0;
  cuemm_manager *m = b == B_CUEMM ? pool_manager() : NULL;
  pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
  for (int i = 0; i < pairs; i++) {
    if (b != B_MALLOC)
      CHECK(cuStreamCreate(&s[i], CU_STREAM_NON_BLOCKING));
    atomic_init(&q[i].head, 0);
    atomic_init(&q[i].tail, 0);
    atomic_init(&q[i].done, 0);
    atomic_store(&frees[i].n, 0);
    pw[i] = (pair_worker){ b, m, s[i], &q[i], &start, &stop, &frees[i], 0 };
    cw[i] = pw[i];
    if (threads == 1)
      pthread_create(&th[0], NULL, same_thread, &pw[0]);
    else {
      pthread_create(&th[2 * i], NULL, producer, &pw[i]);
      pthread_create(&th[2 * i + 1], NULL, consumer, &cw[i]);
    }
  }
  pthread_barrier_wait(&start);
  double r = timed_span(frees, pairs, &stop);
  for (int i = 0; i < threads; i++)
    pthread_join(th[i], NULL);
  for (int i = 0; i < pairs && threads > 1; i++)
    if (pw[i].made != cw[i].made) {
      mismatches++;
      printf("# MISMATCH: a producer made %llu blocks, its consumer freed %llu\n", pw[i].made, cw[i].made);
    }
  for (int i = 0; i < pairs && b != B_MALLOC; i++) {
    CHECK(cuStreamSynchronize(s[i]));
    if (m)
      CHECK(cuemm_stream_release(m, s[i]));
    CHECK(cuStreamDestroy(s[i]));
  }
  if (m) {
    CHECK(cuemm_get_stats(m, &fig->st));
    CHECK(cuemm_pool_get_stats(m, &fig->ps));
    check_live(m, 0, "after the pairs");
    CHECK(cuemm_destroy(m));
  }
  pthread_barrier_destroy(&start);
  free(q);
  return r;
}

static void remote_part(void)
{
  static const int counts[] = { 1, 2, 4, 8, 16 };
  enum { N = sizeof counts / sizeof counts[0] };
  char b1[16], b2[16], b3[16], b4[16], b5[16];
  double med[N][NBACKENDS];
  static heap_figures figs[N];
  for (int k = 0; k < N; k++) {
    double v[NBACKENDS][8];
    for (int r = 0; r < rounds; r++)
      for (int b = 0; b < NBACKENDS; b++)
        v[b][r] = b == B_DRIVER && !driver_ok ? 0 : remote_run((backend)b, counts[k], &figs[k]) / 1e6;
    for (int b = 0; b < NBACKENDS; b++)
      med[k][b] = median(v[b], rounds);
  }
  printf("\n## frees from another thread: pairs of threads, the producer allocates %d B blocks on its stream and "
         "passes each through a ring of %d slots, the consumer frees it on the producer's stream: aggregate "
         "Mpairs/s (%s)\n",
         REMOTE_SIZE, RING, runs_text);
  printf("%8s %12s %12s %12s %13s %12s %12s\n", "threads", "cuemm", "driver", "malloc", "cuemm/malloc", "cuemm/drv",
         "cuemm/same");
  for (int k = 1; k < N; k++)
    printf("%8d %12.3f %12s %12.3f %13s %12s %12s\n", counts[k], med[k][B_CUEMM], rate(b1, med[k][B_DRIVER], driver_ok),
           med[k][B_MALLOC], ratio(b2, med[k][B_CUEMM], med[k][B_MALLOC]), ratio(b3, med[k][B_CUEMM], med[k][B_DRIVER]),
           ratio(b4, med[k][B_CUEMM], med[0][B_CUEMM]));
  printf("same thread, 1 thread: cuemm %.3f, driver %s, malloc %.3f Mpairs/s (cuemm/malloc %s, cuemm/drv %s)\n",
         med[0][B_CUEMM], rate(b1, med[0][B_DRIVER], driver_ok), med[0][B_MALLOC],
         ratio(b2, med[0][B_CUEMM], med[0][B_MALLOC]), ratio(b5, med[0][B_CUEMM], med[0][B_DRIVER]));
  printf("# cuemm's manager after the last run at each count, every block freed (counts since its creation)\n");
  printf("%8s %10s %7s %10s %8s %6s %9s %9s %9s\n", "threads", "mapped", "chunks", "cached", "c.blocks", "heaps",
         "reclaims", "events", "steals");
  for (int k = 0; k < N; k++) {
    const heap_figures *f = &figs[k];
    printf("%8d %10.1f %7zu %10.1f %8zu %6zu %9llu %9llu %9llu\n", counts[k], (double)f->ps.mapped_bytes / MiB,
           f->ps.chunks, (double)f->st.stream_cached_bytes / MiB, f->st.stream_cached_count, f->st.stream_heaps,
           (unsigned long long)f->st.stream_reclaims, (unsigned long long)f->st.stream_events,
           (unsigned long long)f->st.stream_steals);
  }
  fflush(stdout);
}

/* ---- the program ------------------------------------------------------------- */

static int parse_max(const char *s, size_t *out)
{
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (end == s || errno || *s == '-')
    return -1;
  size_t unit = 1;
  if (*end == 'K' || *end == 'k')
    unit = 1024, end++;
  else if (*end == 'M' || *end == 'm')
    unit = MiB, end++;
  if (unit > 1 && *end == 'i')
    end++;
  if (*end == 'B')
    end++;
  if (*end || v == 0 || v > (uint32_t)-1 / unit)
    return -1;
  *out = (size_t)v * unit;
  return 0;
}

static int usage(const char *why)
{
  fprintf(stderr, BENCH_NAME ": %s\nusage: bench-heap [--quick] [--part sizes|remote] [--max SIZE] [--warm MS] "
          "[--force-driver]\n"
          "  SIZE: bytes, or with K/M (KiB, MiB): 512, 8K, 128K, 2M, 8MiB; 1 B .. 4095 MiB\n"
          "  MS: milliseconds of every run left uncounted, 0 .. 60000 (default: a tenth of the run)\n", why);
  return 2;
}

int main(int argc, char **argv)
{
  int quick = 0, force_driver = 0, part_sizes = 1, part_remote = 1;
  size_t one_max = 0;
  long warm = -1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick"))
      quick = 1;
    else if (!strcmp(argv[i], "--force-driver"))
      force_driver = 1;
    else if (!strcmp(argv[i], "--part") && i + 1 < argc) {
      i++;
      if (!strcmp(argv[i], "sizes"))
        part_remote = 0;
      else if (!strcmp(argv[i], "remote"))
        part_sizes = 0;
      else
        return usage("--part takes sizes or remote");
    } else if (!strcmp(argv[i], "--max") && i + 1 < argc) {
      if (parse_max(argv[++i], &one_max))
        return usage("--max takes a size from 1 B to 4095 MiB, such as 512, 8K, 2M or 8MiB");
    } else if (!strcmp(argv[i], "--warm") && i + 1 < argc) {
      char *end;
      errno = 0;
      warm = strtol(argv[++i], &end, 10);
      if (errno || end == argv[i] || *end || warm < 0 || warm > 60000)
        return usage("--warm takes milliseconds from 0 to 60000");
    } else {
      char why[160];
      if (i + 1 == argc && (!strcmp(argv[i], "--part") || !strcmp(argv[i], "--max") || !strcmp(argv[i], "--warm")))
        snprintf(why, sizeof why, "%s lacks its value", argv[i]);
      else
        snprintf(why, sizeof why, "unknown option '%.100s'", argv[i]);
      return usage(why);
    }
  }
  CUdevice dev;
  char *bargv[] = { argv[0], (char *)"--quick", NULL };
  bench_start(quick ? 2 : 1, bargv, &dev, &ctx);
  driver_ok = bench_async_setup(dev);
  int forced = 0;
  if (!driver_ok && force_driver && dlsym(RTLD_DEFAULT, "cuMemAllocAsync"))
    driver_ok = forced = 1;
  run_ms = quick ? 30 : 300;
  warm_ms = warm >= 0 ? (double)warm : run_ms / 10;
  rounds = quick ? 1 : 3;
  int len;
  if (rounds == 1)
    len = snprintf(runs_text, sizeof runs_text, "one run of %.0f ms", run_ms);
  else
    len = snprintf(runs_text, sizeof runs_text, "median of %d runs of %.0f ms", rounds, run_ms);
  if (warm >= 0)
    snprintf(runs_text + len, sizeof runs_text - (size_t)len, " after %ld ms uncounted", warm);
  printf("# cuemm: VMM pool, stream reuse %s; %s; %s per figure\n",
         getenv("CUEMM_STREAM_REUSE") ? getenv("CUEMM_STREAM_REUSE") : "event",
         forced      ? "driver: cuMemAllocAsync, its pool's release threshold not set (--force-driver)"
         : driver_ok ? "driver: cuMemAllocAsync on the default pool, release threshold at the maximum"
                     : "driver: no stream-ordered pool (n/a)",
         runs_text);
  if (part_sizes) {
    static const size_t maxima[] = { 512, 8 << 10, 128 << 10, 2 * MiB, 8 * MiB };
    sizes_summary s[5];
    int n = 0;
    if (one_max)
      sizes_part(one_max, &s[n++]);
    else
      for (; n < 5; n++)
        sizes_part(maxima[n], &s[n]);
    char hi[32], b1[16], b2[16], b3[16], b4[16];
    printf("\n## mixed sizes, summary: 16 threads / 1 thread, and one thread's cuemm / driver\n");
    printf("%10s %14s %14s %14s %16s\n", "maximum", "cuemm 16T/1T", "driver 16T/1T", "malloc 16T/1T",
           "1T cuemm/driver");
    for (int i = 0; i < n; i++) {
      fmt_size(hi, sizeof hi, s[i].max);
      printf("%10s %14s %14s %14s %16s\n", hi, ratio(b1, s[i].all[B_CUEMM], s[i].one[B_CUEMM]),
             ratio(b2, s[i].all[B_DRIVER], s[i].one[B_DRIVER]), ratio(b3, s[i].all[B_MALLOC], s[i].one[B_MALLOC]),
             ratio(b4, s[i].one[B_CUEMM], s[i].one[B_DRIVER]));
    }
  }
  if (part_remote)
    remote_part();
  printf("\nconsistency: %u checks of cuemm's live count, %u mismatches\n", checks, mismatches);
  bench_end(dev);
  return mismatches ? 1 : 0;
}
