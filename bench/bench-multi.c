/* bench-multi.c: one process driving two GPUs, a thread per device.
 *
 * Each device has its own manager (a pool over its primary context) and its
 * own thread; the thread works on 4 streams of its device in turn, each
 * stream keeping 16 live blocks: it allocates a block with
 * cuemm_allocate_async and frees the stream's oldest with cuemm_free_async (a
 * pair), at sizes 256 B .. 1 MiB in a fixed mix.  Measured for a fixed time,
 * after a warm-up that fills the pools:
 *   - device 0 alone (one thread), device 1 alone;
 *   - both at once, a thread each: the aggregate pairs per second, against
 *     one device's (the mean of the two alone, in the same round: the three
 *     take turns in each round, and the ratio is the median of the rounds'
 *     ratios); two devices share nothing in cuemm but the process, so the
 *     target is at least 1.9x;
 *   - the same with the driver's stream-ordered pool (cuMemAllocAsync +
 *     cuMemFreeAsync on each device's default pool, release threshold at the
 *     maximum), where the driver has it.
 * Each device's thread runs on a CPU of its own, the same alone and beside
 * the other (see pick_cpus).  Medians of the rounds; the devices' managers'
 * held bytes at the end.
 * With one device it says so and stops (exit status 0).
 *
 * Usage: bench-multi [--quick]
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread_setaffinity_np, CPU_SET */
#endif
#include <ctype.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_NAME "bench-multi"
#include "bench.h"

#define STREAMS 4
#define LIVE 16
#define NDEV 2
#define CHECK_EVERY 64

static const size_t sizes[] = { 256, 4096, 24576, 65536, 3072, 200704, 1 << 20, 512, 131072, 8192, 524288, 1536 };
#define NSIZES (sizeof sizes / sizeof sizes[0])

typedef struct device_side {
  int ordinal;
  CUdevice dev;
  CUcontext ctx;
  cuemm_manager *m;
  CUstream s[STREAMS];
  int driver_pool; /* cuMemAllocAsync usable here */
  int cpu;         /* the CPU its thread runs on; -1: wherever it is put */
} device_side;

static device_side sides[NDEV];

typedef struct worker {
  device_side *d;
  int driver;              /* 1: the driver's pool instead of cuemm */
  pthread_barrier_t *start;
  atomic_int *stop;
  unsigned long long pairs;
} worker;

static void alloc_on(const worker *w, CUdeviceptr *p, size_t size, CUstream s)
{
  if (w->driver)
    CHECK(cuMemAllocAsync(p, size, s));
  else
    CHECK(cuemm_allocate_async(w->d->m, size, s, p));
}

static void free_on(const worker *w, CUdeviceptr p, CUstream s)
{
  if (w->driver)
    CHECK(cuMemFreeAsync(p, s));
  else
    CHECK(cuemm_free_async(w->d->m, p, s));
}

/* Adds the CPUs of a list such as "0-31,64-95" in file `path` to `set`;
 * returns 0 when the file cannot be read or parsed. */
static int read_cpulist(const char *path, cpu_set_t *set)
{
  char buf[1024];
  FILE *f = fopen(path, "r");
  if (!f)
    return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  int any = 0;
  for (char *p = buf; *p && !isspace((unsigned char)*p);) {
    char *e;
    long a = strtol(p, &e, 10), b = a;
    if (e == p || a < 0)
      return 0;
    if (*e == '-') {
      p = e + 1;
      b = strtol(p, &e, 10);
      if (e == p || b < a)
        return 0;
    }
    for (long c = a; c <= b && c < CPU_SETSIZE; c++) {
      CPU_SET((int)c, set);
      any = 1;
    }
    p = *e == ',' ? e + 1 : e;
  }
  return any;
}

/* Whether CPU c shares a core with a CPU of `taken`. */
static int sibling_taken(int c, const cpu_set_t *taken)
{
  char path[128];
  cpu_set_t sib;
  CPU_ZERO(&sib);
  snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list", c);
  if (!read_cpulist(path, &sib))
    return 0;
  for (int k = 0; k < CPU_SETSIZE; k++)
    if (k != c && CPU_ISSET(k, &sib) && CPU_ISSET(k, taken))
      return 1;
  return 0;
}

/* A CPU for each device's thread, kept alone and beside the other device:
 * unpinned, the rounds' ratios of one run spread from 1.04x to 3.09x on a
 * 32-core host, where a thread moved between cores or shared one with the
 * other thread's sibling, so the ratio measured the scheduler.  Each device
 * gets an allowed CPU among its local ones (the PCI device's local_cpulist)
 * when it has any, no two on one core, and not the first allowed CPU where
 * there are enough others (the host's interrupts go there).  With fewer
 * usable CPUs than devices, nothing is pinned. */
static void pick_cpus(const char bus[NDEV][32])
{
  cpu_set_t allowed, taken;
  CPU_ZERO(&taken);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0 || CPU_COUNT(&allowed) < NDEV) {
    for (int d = 0; d < NDEV; d++)
      sides[d].cpu = -1;
    return;
  }
  int first = 0;
  while (!CPU_ISSET(first, &allowed))
    first++;
  int skip_first = CPU_COUNT(&allowed) > NDEV + 1;
  for (int d = 0; d < NDEV; d++) {
    char path[128], lower[32];
    size_t k = 0;
    for (; bus[d][k] && k < sizeof lower - 1; k++)
      lower[k] = (char)tolower((unsigned char)bus[d][k]);
    lower[k] = 0;
    cpu_set_t local;
    CPU_ZERO(&local);
    snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/local_cpulist", lower);
    int have_local = read_cpulist(path, &local);
    int pick = -1;
    /* Passes: local CPUs on a free core, any CPU on a free core, any free CPU. */
    for (int pass = have_local ? 0 : 1; pass < 3 && pick < 0; pass++)
      for (int c = 0; c < CPU_SETSIZE && pick < 0; c++)
        if (CPU_ISSET(c, &allowed) && !CPU_ISSET(c, &taken) && !(skip_first && c == first) &&
            (pass > 0 || CPU_ISSET(c, &local)) && (pass > 1 || !sibling_taken(c, &taken)))
          pick = c;
    if (pick < 0) /* every CPU but the first is taken */
      for (int c = 0; c < CPU_SETSIZE && pick < 0; c++)
        if (CPU_ISSET(c, &allowed) && !CPU_ISSET(c, &taken))
          pick = c;
    sides[d].cpu = pick;
    CPU_SET(pick, &taken);
  }
}

static void *work(void *arg)
{
  worker *w = arg;
  if (w->d->cpu >= 0) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(w->d->cpu, &one);
    if (pthread_setaffinity_np(pthread_self(), sizeof one, &one) != 0) {
      fprintf(stderr, BENCH_NAME ": device %d: the thread could not be moved to CPU %d\n", w->d->ordinal, w->d->cpu);
      exit(1);
    }
  }
  CHECK(cuCtxSetCurrent(w->d->ctx));
  CUdeviceptr live[STREAMS][LIVE];
  unsigned k = (unsigned)w->d->ordinal * 5; /* the devices start at other points of the mix */
  for (int s = 0; s < STREAMS; s++)
    for (int i = 0; i < LIVE; i++)
      alloc_on(w, &live[s][i], sizes[k++ % NSIZES], w->d->s[s]);
  /* Warm-up: a few rounds of the loop below, so the pools have grown. */
  for (int r = 0; r < 4 * LIVE; r++)
    for (int s = 0; s < STREAMS; s++) {
      int i = r % LIVE;
      free_on(w, live[s][i], w->d->s[s]);
      alloc_on(w, &live[s][i], sizes[k++ % NSIZES], w->d->s[s]);
    }
  pthread_barrier_wait(w->start);
  unsigned long long n = 0;
  int i = 0;
  while (!atomic_load_explicit(w->stop, memory_order_relaxed)) {
    for (int c = 0; c < CHECK_EVERY; c++) {
      int s = c % STREAMS;
      free_on(w, live[s][i], w->d->s[s]);
      alloc_on(w, &live[s][i], sizes[k++ % NSIZES], w->d->s[s]);
      if (s == STREAMS - 1)
        i = (i + 1) % LIVE;
    }
    n += CHECK_EVERY;
  }
  w->pairs = n;
  for (int s = 0; s < STREAMS; s++) {
    for (int j = 0; j < LIVE; j++)
      free_on(w, live[s][j], w->d->s[s]);
    CHECK(cuStreamSynchronize(w->d->s[s]));
  }
  return NULL;
}

/* Aggregate pairs per second of a thread on each device in `which` (a bit
 * per device) for `ms` milliseconds. */
static double run(unsigned which, int driver, double ms)
{
  pthread_t t[NDEV];
  worker w[NDEV];
  pthread_barrier_t start;
  atomic_int stop = 0;
  int n = 0;
  for (int d = 0; d < NDEV; d++)
    n += (which >> d) & 1;
  pthread_barrier_init(&start, NULL, (unsigned)n + 1);
  for (int d = 0, j = 0; d < NDEV; d++) {
    if (!((which >> d) & 1))
      continue;
    w[j] = (worker){ &sides[d], driver, &start, &stop, 0 };
    pthread_create(&t[j], NULL, work, &w[j]);
    j++;
  }
  pthread_barrier_wait(&start);
  double t0 = now_ns();
  struct timespec sl = { (time_t)(ms / 1000), (long)((ms - (double)(long)(ms / 1000) * 1000) * 1e6) };
  nanosleep(&sl, NULL);
  atomic_store(&stop, 1);
  unsigned long long total = 0;
  for (int j = 0; j < n; j++) {
    pthread_join(t[j], NULL);
    total += w[j].pairs;
  }
  double secs = (now_ns() - t0) / 1e9;
  pthread_barrier_destroy(&start);
  return (double)total / secs;
}

int main(int argc, char **argv)
{
  int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
  cuemm_driver_info info;
  CHECK(cuemm_driver_load());
  CHECK(cuemm_driver_get_info(&info));
  int count = 0;
  CHECK(cuDeviceGetCount(&count));
  printf("# " BENCH_NAME ": cuemm %s, driver %d (%s), %d devices%s\n", cuemm_version_string(), info.version,
         info.path, count, quick ? ", quick mode" : "");
  if (count < NDEV) {
    printf("# " BENCH_NAME ": skipped: it compares two devices driven at once with one, and this machine shows %d "
           "device%s (check CUDA_VISIBLE_DEVICES)\n", count, count == 1 ? "" : "s");
    return 0;
  }
  int driver_pool = 1;
  char name[NDEV][128], bus[NDEV][32];
  for (int d = 0; d < NDEV; d++) {
    device_side *x = &sides[d];
    x->ordinal = d;
    CHECK(cuDeviceGet(&x->dev, d));
    CHECK(cuDeviceGetName(name[d], sizeof name[d], x->dev));
    CHECK(cuDeviceGetPCIBusId(bus[d], sizeof bus[d], x->dev));
    CHECK(cuDevicePrimaryCtxRetain(&x->ctx, x->dev));
    CHECK(cuCtxSetCurrent(x->ctx));
    cuemm_config c;
    CHECK(cuemm_config_init(&c));
    c.pool = CUEMM_POOL_VMM;
    c.pool_release_threshold = (size_t)1 << 46;
    CHECK(cuemm_manager_create(x->ctx, &c, &x->m));
    for (int s = 0; s < STREAMS; s++)
      CHECK(cuStreamCreate(&x->s[s], CU_STREAM_NON_BLOCKING));
    x->driver_pool = bench_async_setup(x->dev);
    driver_pool &= x->driver_pool;
  }
  pick_cpus((const char (*)[32])bus);
  for (int d = 0; d < NDEV; d++) {
    if (sides[d].cpu >= 0)
      printf("# device %d: %s, PCI %s, its thread on CPU %d\n", d, name[d], bus[d], sides[d].cpu);
    else
      printf("# device %d: %s, PCI %s, its thread not pinned (fewer CPUs than devices)\n", d, name[d], bus[d]);
  }
  CHECK(cuCtxSetCurrent(NULL));

  double ms = quick ? 50 : 300;
  int rounds = quick ? 1 : 11;
  printf("\n## alloc+free pairs, a thread per device, %d streams each, %d live blocks per stream, sizes 256 B .. "
         "1 MiB: Mpairs/s (median of %d rounds of %.0f ms)\n", STREAMS, LIVE, rounds, ms);
  static const struct { const char *name; unsigned which; } configs[] = {
    { "device 0 alone", 1u }, { "device 1 alone", 2u }, { "devices 0 and 1 at once", 3u } };
  /* The three configurations take turns within each round, and the ratio
   * is taken per round: the host's speed changes within seconds (device 0
   * alone and device 1 alone, measured one after the other in blocks of
   * rounds, once differed by 1.36x), so a ratio of medians taken minutes
   * apart measures the host as much as the process. */
  double v[2][3][16], ratio_r[2][16]; /* rounds <= 16 */
  for (int r = 0; r < rounds; r++)
    for (int drv = 0; drv < 2; drv++) {
      for (int k = 0; k < 3; k++)
        v[drv][k][r] = drv && !driver_pool ? 0 : run(configs[k].which, drv, ms) / 1e6;
      double one = (v[drv][0][r] + v[drv][1][r]) / 2;
      ratio_r[drv][r] = one > 0 ? v[drv][2][r] / one : 0;
    }
  double med[2][3];
  for (int drv = 0; drv < 2; drv++)
    for (int k = 0; k < 3; k++)
      med[drv][k] = median(v[drv][k], rounds);
  double one_c = (med[0][0] + med[0][1]) / 2, one_d = (med[1][0] + med[1][1]) / 2;
  printf("%-26s %14s %12s %18s %12s\n", "", "cuemm", "vs one", "AllocAsync+Free", "vs one");
  for (int k = 0; k < 3; k++) {
    printf("%-26s %14.2f %11.2fx", configs[k].name, med[0][k], med[0][k] / one_c);
    if (driver_pool)
      printf(" %18.2f %11.2fx\n", med[1][k], med[1][k] / one_d);
    else
      printf(" %18s %12s\n", "n/a", "");
  }
  printf("\nboth devices / one device, per round (cuemm):");
  for (int r = 0; r < rounds; r++)
    printf(" %.2fx", ratio_r[0][r]);
  if (driver_pool) {
    printf("\nboth devices / one device, per round (driver's pool):");
    for (int r = 0; r < rounds; r++)
      printf(" %.2fx", ratio_r[1][r]);
  }
  double ratio = median(ratio_r[0], rounds);
  printf("\nboth devices / one device (cuemm): %.2fx (target at least 1.9x): %s\n", ratio,
         ratio >= 1.9 ? "met" : "NOT met");
  printf("(the median of the rounds' ratios; each round runs device 0 alone, device 1 alone and both, in turn)\n");

  printf("\n## each device's manager at the end\n");
  for (int d = 0; d < NDEV; d++) {
    cuemm_stats st;
    CHECK(cuemm_get_stats(sides[d].m, &st));
    printf("device %d: held %.1f MiB, peak held %.1f MiB, %llu allocations, %llu failed\n", d,
           (double)st.held_bytes / (1 << 20), (double)st.peak_held_bytes / (1 << 20),
           (unsigned long long)st.allocs, (unsigned long long)st.alloc_failures);
  }
  for (int d = 0; d < NDEV; d++) {
    CHECK(cuCtxSetCurrent(sides[d].ctx));
    for (int s = 0; s < STREAMS; s++) {
      CHECK(cuemm_stream_release(sides[d].m, sides[d].s[s]));
      CHECK(cuStreamDestroy(sides[d].s[s]));
    }
    CHECK(cuemm_destroy(sides[d].m));
    CHECK(cuCtxSetCurrent(NULL));
    CHECK(cuDevicePrimaryCtxRelease(sides[d].dev));
  }
  return 0;
}
