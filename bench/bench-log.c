/* bench-log.c: what the event log (CUEMM_LOG) costs per event.
 *
 * The same loops run on two managers of the pool, one without a log and
 * one writing it to a file (in $TMPDIR, default /tmp): 4 KiB alloc+free
 * pairs on the stream-ordered path (one thread; then 16 threads, each on
 * its own stream) and on the deferred path.  A pair is two rows, so the
 * cost per event is (pair with log - pair without) / 2.  Medians of R runs
 * (default 9, --quick 3); each run makes the plain manager, then the
 * logged one (a context has one manager at a time).
 */
#include <pthread.h>
#include <stdint.h>
#include <unistd.h>

#define BENCH_NAME "bench-log"
#include "bench.h"

#define PAIRS 200000
#define THREADS 16

static CUcontext ctx;

static cuemm_manager *manager(const char *log)
{
  cuemm_config c;
  CHECK(cuemm_config_init(&c));
  c.pool = CUEMM_POOL_VMM;
  c.log_file = log;
  cuemm_manager *m = NULL;
  CHECK(cuemm_manager_create(ctx, &c, &m));
  return m;
}

/* ns per pair */
static double pairs_async(cuemm_manager *m, CUstream s, int n)
{
  CUdeviceptr p;
  double t0 = now_ns();
  for (int i = 0; i < n; i++) {
    CHECK(cuemm_allocate_async(m, 4096, s, &p));
    CHECK(cuemm_free_async(m, p, s));
  }
  return (now_ns() - t0) / n;
}

static double pairs_deferred(cuemm_manager *m, int n)
{
  CUdeviceptr p;
  double t0 = now_ns();
  for (int i = 0; i < n; i++) {
    CHECK(cuemm_allocate(m, 4096, &p));
    CHECK(cuemm_free(m, p));
  }
  return (now_ns() - t0) / n;
}

typedef struct job {
  cuemm_manager *m;
  pthread_barrier_t *go;
  int n;
  double ns;
} job;

static void *thread_pairs(void *arg)
{
  job *j = arg;
  CHECK(cuCtxSetCurrent(ctx));
  CUstream s;
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  pairs_async(j->m, s, 1000); /* warm */
  pthread_barrier_wait(j->go);
  j->ns = pairs_async(j->m, s, j->n);
  CHECK(cuStreamSynchronize(s));
  CHECK(cuemm_stream_release(j->m, s));
  CHECK(cuStreamDestroy(s));
  return NULL;
}

/* Aggregate ns per pair of 16 threads (wall time / all pairs). */
static double pairs_threads(cuemm_manager *m, int n)
{
  pthread_t t[THREADS];
  job j[THREADS];
  pthread_barrier_t go;
  pthread_barrier_init(&go, NULL, THREADS + 1);
  for (int i = 0; i < THREADS; i++) {
    j[i] = (job){ m, &go, n, 0 };
    pthread_create(&t[i], NULL, thread_pairs, &j[i]);
  }
  pthread_barrier_wait(&go);
  double t0 = now_ns();
  for (int i = 0; i < THREADS; i++)
    pthread_join(t[i], NULL);
  pthread_barrier_destroy(&go);
  return (now_ns() - t0) / ((double)n * THREADS);
}

int main(int argc, char **argv)
{
  CUdevice dev;
  int quick = bench_start(argc, argv, &dev, &ctx);
  int reps = quick ? 3 : 9, n = quick ? PAIRS / 10 : PAIRS;
  const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  char path[512];
  snprintf(path, sizeof path, "%s/bench-log-%ld.csv", tmp, (long)getpid());
  CUstream s;
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  /* One manager per context: each run makes the plain one, then the logged
   * one, warmed the same way. */
  double a0[16], a1[16], d0[16], d1[16], t0[16], t1[16];
  cuemm_stats st = { 0 };
  for (int r = 0; r < reps; r++) {
    for (int logged = 0; logged < 2; logged++) {
      cuemm_manager *m = manager(logged ? path : NULL);
      pairs_async(m, s, 1000);
      pairs_deferred(m, 1000);
      (logged ? a1 : a0)[r] = pairs_async(m, s, n);
      (logged ? d1 : d0)[r] = pairs_deferred(m, n / 4);
      (logged ? t1 : t0)[r] = pairs_threads(m, n / 4);
      if (logged)
        CHECK(cuemm_get_stats(m, &st));
      CHECK(cuemm_destroy(m));
    }
  }
  printf("# log file %s: %llu rows, %llu lost; %d runs, medians\n", path, (unsigned long long)st.log_rows,
         (unsigned long long)st.log_lost, reps);
  /* What a row is made of, on this host: its clock read (the Time column). */
  struct timespec ts;
  double c0 = now_ns();
  for (int i = 0; i < 1000000; i++)
    clock_gettime(CLOCK_REALTIME, &ts);
  printf("# clock_gettime(CLOCK_REALTIME): %.1f ns\n", (now_ns() - c0) / 1e6);
  printf("%-34s %12s %12s %14s\n", "loop (4 KiB pairs)", "no log ns", "log ns", "ns per event");
  double x0 = median(a0, reps), x1 = median(a1, reps);
  printf("%-34s %12.1f %12.1f %14.1f\n", "stream-ordered, one thread", x0, x1, (x1 - x0) / 2);
  x0 = median(d0, reps), x1 = median(d1, reps);
  printf("%-34s %12.1f %12.1f %14.1f\n", "deferred (cuemm_alloc/free)", x0, x1, (x1 - x0) / 2);
  x0 = median(t0, reps), x1 = median(t1, reps);
  printf("%-34s %12.1f %12.1f %14.1f\n", "stream-ordered, 16 threads (aggr.)", x0, x1, (x1 - x0) / 2);
  CHECK(cuStreamDestroy(s));
  unlink(path);
  bench_end(dev);
  return 0;
}
