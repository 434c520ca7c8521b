/* bench-suspend.c: cuemm_pool_suspend and cuemm_pool_resume on the GPU,
 * each against what the driver does for the same bytes in the same run:
 *   (1) suspend and resume of SIZE bytes of live 8 MiB blocks, contents
 *       dropped, against one cuMemCreate + cuMemMap + cuMemSetAccess of
 *       SIZE bytes and the matching cuMemUnmap + cuMemRelease (target: at
 *       most 2x).  The driver's cycle and cuemm's take turns in every round
 *       (which goes first alternates), in three cadences that set up the
 *       same state of the driver for both sides (see SETTLED below): right
 *       after a release the driver hands the same memory back at a
 *       fraction of the cost of fresh memory, which it zeroes first (20
 *       GiB on an H100: about 1 ms against 6 to 10 ms), and a creation
 *       that meets memory still being zeroed waits for it (65 to 100 ms);
 *   (2) the same with CUEMM_SUSPEND_KEEP: the copy's bandwidth each way
 *       (bytes kept / the time KEEP adds to the call) and of the whole call,
 *       against one cuMemcpyDtoH / cuMemcpyHtoD of the same bytes with
 *       cuMemHostAlloc memory (target: at least 80%);
 *   (3) device memory used (cuMemGetInfo) before and after a suspension
 *       (target: what stays, beyond what was used before the manager was
 *       made, at most 1% of what the manager held);
 *   (4) a cuemm_allocate_async + cuemm_free_async pair on one stream after a
 *       suspend/resume cycle, 4 KiB .. 8 MiB, against the same on a
 *       manager that never suspended, taking turns (target: at most 25 ns,
 *       as outside a suspendable region).
 * Medians of --rounds rounds (default 7).  --size BYTES (default 20 GiB;
 * suffixes K M G) picks the size; --quick is 64 MiB and 3 rounds, which
 * runs on simcuda too (its timings mean nothing).
 */
#define BENCH_NAME "bench-suspend"
#include "bench.h"

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

static size_t parse_size(const char *s)
{
  char *end;
  double v = strtod(s, &end);
  switch (*end) {
  case 'G': case 'g': v *= (double)GiB; break;
  case 'M': case 'm': v *= (double)MiB; break;
  case 'K': case 'k': v *= 1024.0; break;
  default: break;
  }
  return (size_t)v;
}

static void pause_ms(int ms)
{
  if (ms > 0) {
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
  }
}

/* The cadences of part (1).  The driver releases memory it is given back
 * by zeroing it in the background; a creation meets either memory it can
 * hand back at once, memory still being zeroed (it waits), or fresh memory
 * it zeroes itself, and which one depends on what was released how long
 * before, by anyone in the process.  A comparison is fair only where both
 * sides meet the same state, so each cadence sets it up the same way for
 * both:
 *   SETTLED  nothing in flight (a pause first), then the release and, at
 *            once, the creation: what a program that suspends and resumes
 *            back to back meets, memory handed straight back;
 *   FRESH    the same pause before the release and again before the
 *            creation: what a program that suspends for a while meets
 *            (on an H100 memory released 60 ms before was no longer
 *            handed back, and zeroing it could still be under way);
 *   TURNS    no pause at all, the two sides taking turns: each meets
 *            whatever the other just released, so which side waits for
 *            the zeroing is luck; shown with its range, not judged.
 * The driver's side is a whole cycle in each: create, map and access (not
 * timed), then the timed release and creation, as the pool's blocks are
 * live before a suspension. */
enum { SETTLED, FRESH, TURNS, NCAD };
static const char *const cad_name[NCAD] = {
  "settled, then back to back (nothing in flight, release, creation at once):",
  "a pause before the release and again before the creation (memory no longer handed back):",
  "back to back, taking turns without a pause (each meets what the other released):",
};
static int pause_before[NCAD]; /* ms: set from --quick in main */

/* The driver's cycle of `size` bytes in cadence `c`: returns the time of
 * the measured create + map + access, *down that of the unmap + release
 * before it. */
static double driver_cycle(CUdevice dev, size_t size, double *down, int c)
{
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = (int)dev;
  CUdeviceptr va;
  CHECK(cuMemAddressReserve(&va, size, 0, 0, 0));
  CUmemAccessDesc acc;
  acc.location = prop.location;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CUmemGenericAllocationHandle h;
  double t0, up;
  /* Live first, as the pool's blocks are; then the measured release and
   * creation, with what the cadence puts before each. */
  CHECK(cuMemCreate(&h, size, &prop, 0));
  CHECK(cuMemMap(va, size, 0, h, 0));
  CHECK(cuMemSetAccess(va, size, &acc, 1));
  pause_ms(pause_before[c]);
  t0 = now_ns();
  CHECK(cuMemUnmap(va, size));
  CHECK(cuMemRelease(h));
  *down = now_ns() - t0;
  if (c == FRESH)
    pause_ms(pause_before[c]);
  t0 = now_ns();
  CHECK(cuMemCreate(&h, size, &prop, 0));
  CHECK(cuMemMap(va, size, 0, h, 0));
  CHECK(cuMemSetAccess(va, size, &acc, 1));
  up = now_ns() - t0;
  CHECK(cuMemUnmap(va, size));
  CHECK(cuMemRelease(h));
  CHECK(cuMemAddressFree(va, size));
  return up;
}

/* cuemm's cycle in cadence `c`: *sus the suspension, returns the
 * resumption. */
static double cuemm_cycle(cuemm_manager *m, double *sus, int c)
{
  pause_ms(pause_before[c]);
  double t0 = now_ns();
  CHECK(cuemm_pool_suspend(m, 0));
  *sus = now_ns() - t0;
  if (c == FRESH)
    pause_ms(pause_before[c]);
  t0 = now_ns();
  CHECK(cuemm_pool_resume(m));
  return now_ns() - t0;
}

/* Median ns of a cuemm_allocate_async + cuemm_free_async pair of `size` on
 * `s`, over `iters` pairs. */
static double pair_ns(cuemm_manager *m, size_t size, CUstream s, long iters)
{
  double t0 = now_ns();
  for (long i = 0; i < iters; i++) {
    CUdeviceptr q;
    cuemm_allocate_async(m, size, s, &q);
    cuemm_free_async(m, q, s);
  }
  return (now_ns() - t0) / (double)iters;
}

int main(int argc, char **argv)
{
  size_t size = 20 * GiB;
  int rounds = 7;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) {
      size = 64 * MiB;
      rounds = 3;
    } else if (!strcmp(argv[i], "--size") && i + 1 < argc)
      size = parse_size(argv[++i]);
    else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
      rounds = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: bench-suspend [--quick] [--size BYTES] [--rounds N]\n");
      return 2;
    }
  }
  if (rounds < 1)
    rounds = 1;
  int quick = size <= 256 * MiB;
  /* 300 ms: on an H100 20 GiB released were zeroed within 60 ms. */
  pause_before[SETTLED] = quick ? 1 : 300;
  pause_before[FRESH] = quick ? 1 : 200;
  pause_before[TURNS] = 0;
  const size_t block = 8 * MiB;
  size = (size + block - 1) / block * block;
  size_t nblocks = size / block;

  CUdevice dev;
  CUcontext ctx;
  CHECK(cuInit(0));
  CHECK(cuDeviceGet(&dev, 0));
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  size_t gran = 0;
  {
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = (int)dev;
    CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  }
  size_t free0, total;
  CHECK(cuMemGetInfo(&free0, &total));
  printf("bench-suspend: %zu bytes (%zu blocks of 8 MiB), %d rounds, device memory %zu bytes\n", size, nblocks,
         rounds, total);

  cuemm_config cfg;
  cuemm_config_init(&cfg);
  cfg.pool = CUEMM_POOL_VMM;
  cfg.pool_reserve = size + 2 * GiB;
  cfg.pool_release_threshold = size + 2 * GiB; /* the pool keeps what it maps: the figures are the suspension's */
  cuemm_manager *m;
  CHECK(cuemm_manager_create(ctx, &cfg, &m));
  CUdeviceptr *p = calloc(nblocks, sizeof *p);
  for (size_t i = 0; i < nblocks; i++)
    CHECK(cuemm_allocate(m, block, &p[i]));
  size_t free1;
  CHECK(cuMemGetInfo(&free1, &total));
  cuemm_pool_stats grown;
  CHECK(cuemm_pool_get_stats(m, &grown));

  double *s0 = calloc((size_t)rounds, sizeof(double)), *r0 = calloc((size_t)rounds, sizeof(double));
  double *s1 = calloc((size_t)rounds, sizeof(double)), *r1 = calloc((size_t)rounds, sizeof(double));
  double *t_up = calloc((size_t)rounds, sizeof(double)), *t_down = calloc((size_t)rounds, sizeof(double));
  size_t free_susp = 0, chunks_after = 0;
  /* The first suspension unmaps the chunks as growth made them (a growth
   * per four blocks here); the resumption maps runs in pieces, which the
   * next ones find. */
  double t0 = now_ns();
  CHECK(cuemm_pool_suspend(m, 0));
  double first_sus = now_ns() - t0;
  CHECK(cuMemGetInfo(&free_susp, &total));
  t0 = now_ns();
  CHECK(cuemm_pool_resume(m));
  double first_res = now_ns() - t0;
  {
    cuemm_pool_stats after;
    CHECK(cuemm_pool_get_stats(m, &after));
    chunks_after = after.chunks;
  }
  double sus_g[NCAD], res_g[NCAD], drv_down_g[NCAD], drv_up_g[NCAD];
  double range[NCAD][4]; /* lowest and highest resumption, then the driver's creation */
  for (int c = 0; c < NCAD; c++) {
    for (int r = 0; r < rounds; r++) {
      /* Which side goes first alternates. */
      if (r % 2 == 0)
        t_up[r] = driver_cycle(dev, size, &t_down[r], c);
      r0[r] = cuemm_cycle(m, &s0[r], c);
      if (r % 2 == 1)
        t_up[r] = driver_cycle(dev, size, &t_down[r], c);
    }
    sus_g[c] = median(s0, rounds), res_g[c] = median(r0, rounds);
    drv_down_g[c] = median(t_down, rounds), drv_up_g[c] = median(t_up, rounds);
    /* median() sorted them: the ends are the range. */
    range[c][0] = r0[0], range[c][1] = r0[rounds - 1];
    range[c][2] = t_up[0], range[c][3] = t_up[rounds - 1];
  }
  /* (2) with KEEP; a first suspension makes the staging buffer, which
   * later ones reuse.  (The suspensions above dropped the contents.) */
  CHECK(cuMemsetD8(p[0], 0x5a, block));
  CHECK(cuemm_pool_suspend(m, CUEMM_SUSPEND_KEEP));
  cuemm_pool_stats ps;
  CHECK(cuemm_pool_get_stats(m, &ps));
  size_t kept = ps.kept_bytes;
  CHECK(cuemm_pool_resume(m));
  for (int r = 0; r < rounds; r++) {
    t0 = now_ns();
    CHECK(cuemm_pool_suspend(m, CUEMM_SUSPEND_KEEP));
    s1[r] = now_ns() - t0;
    t0 = now_ns();
    CHECK(cuemm_pool_resume(m));
    r1[r] = now_ns() - t0;
  }
  unsigned char probe = 0;
  CHECK(cuMemcpyDtoH(&probe, p[0] + block / 2, 1));
  if (probe != 0x5a) {
    fprintf(stderr, "bench-suspend: a kept block reads 0x%02x after resume, not 0x5a\n", probe);
    return 1;
  }
  double sus = sus_g[SETTLED], res = res_g[SETTLED], drv_down = drv_down_g[SETTLED];
  double sus_k = median(s1, rounds), res_k = median(r1, rounds);
  /* The plain pinned copy of the same bytes: from the blocks when they lie
   * side by side (they do in a fresh pool), else from one cuMemAlloc. */
  int contiguous = 1;
  for (size_t i = 1; i < nblocks && contiguous; i++)
    contiguous = p[i] == p[i - 1] + block;
  CUdeviceptr src = p[0];
  if (!contiguous)
    CHECK(cuMemAlloc(&src, kept));
  void *host;
  CHECK(cuMemHostAlloc(&host, kept, 0));
  double *c_d2h = calloc((size_t)rounds, sizeof(double)), *c_h2d = calloc((size_t)rounds, sizeof(double));
  for (int r = 0; r < rounds; r++) {
    t0 = now_ns();
    CHECK(cuMemcpyDtoH(host, src, kept));
    c_d2h[r] = now_ns() - t0;
    t0 = now_ns();
    CHECK(cuMemcpyHtoD(src, host, kept));
    c_h2d[r] = now_ns() - t0;
  }
  double d2h = median(c_d2h, rounds), h2d = median(c_h2d, rounds);
  CHECK(cuMemFreeHost(host));
  if (!contiguous)
    CHECK(cuMemFree(src));

  /* (4) pairs after a cycle, against a manager of the same kind that
   * never suspended, taking turns: warmed up by time first (the host's
   * clocks), then samples of each size on each side in turn, so that a
   * slower spell of the host shifts both columns alike. */
  CUstream st;
  CHECK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
  cuemm_config pc = cfg;
  pc.pool_reserve = pc.pool_release_threshold = 2 * GiB;
  pc.secondary = 1;
  cuemm_manager *plain;
  CHECK(cuemm_manager_create(ctx, &pc, &plain));
  static const size_t sizes[] = { 4096, 65536, 1 << 20, 8 << 20 };
  enum { NS = sizeof sizes / sizeof sizes[0], MAXSAMPLES = 201 };
  const int samples = quick ? 5 : MAXSAMPLES;
  const long iters = 2000;
  static double after_v[NS][MAXSAMPLES], plain_v[NS][MAXSAMPLES];
  double pair[NS], pair_plain[NS];
  t0 = now_ns();
  while (now_ns() - t0 < (quick ? 2e6 : 300e6))
    for (int k = 0; k < NS; k++)
      pair_ns(m, sizes[k], st, 200), pair_ns(plain, sizes[k], st, 200);
  for (int i = 0; i < samples; i++)
    for (int k = 0; k < NS; k++) {
      if (i % 2 == 0)
        plain_v[k][i] = pair_ns(plain, sizes[k], st, iters);
      after_v[k][i] = pair_ns(m, sizes[k], st, iters);
      if (i % 2 == 1)
        plain_v[k][i] = pair_ns(plain, sizes[k], st, iters);
    }
  for (int k = 0; k < NS; k++)
    pair[k] = median(after_v[k], samples), pair_plain[k] = median(plain_v[k], samples);
  CHECK(cuStreamSynchronize(st));
  CHECK(cuemm_stream_release(m, st));
  CHECK(cuemm_stream_release(plain, st));
  CHECK(cuemm_destroy(plain));
  CHECK(cuStreamDestroy(st));

  double gbs = 1e9 / (double)GiB;
  double copy_out = sus_k - sus > 0 ? sus_k - sus : sus_k, copy_in = res_k - res > 0 ? res_k - res : res_k;
  printf("\n(1) suspend / resume without contents, %zu bytes (granularity %zu), medians of %d rounds\n", size, gran,
         rounds);
  printf("%-50s %12s %12s %8s\n", "operation", "cuemm ms", "driver ms", "ratio");
  for (int c = 0; c < NCAD; c++) {
    printf("%s\n", cad_name[c]);
    printf("%-50s %12.3f %12.3f %7.2fx\n", "  suspend vs cuMemUnmap+cuMemRelease", sus_g[c] / 1e6,
           drv_down_g[c] / 1e6, sus_g[c] / drv_down_g[c]);
    printf("%-50s %12.3f %12.3f %7.2fx\n", "  resume vs cuMemCreate+cuMemMap+cuMemSetAccess", res_g[c] / 1e6,
           drv_up_g[c] / 1e6, res_g[c] / drv_up_g[c]);
    printf("%-50s %12.3f %12.3f %7.2fx\n", "  suspend vs cuMemCreate+cuMemMap+cuMemSetAccess", sus_g[c] / 1e6,
           drv_up_g[c] / 1e6, sus_g[c] / drv_up_g[c]);
    if (c == TURNS)
      printf("  range of the creations: cuemm %.3f .. %.3f ms, the driver %.3f .. %.3f ms\n", range[c][0] / 1e6,
             range[c][1] / 1e6, range[c][2] / 1e6, range[c][3] / 1e6);
  }
  printf("first round, back to back, %zu chunks as grown (then %zu):\n", grown.chunks, chunks_after);
  printf("%-50s %12.3f %12.3f %7.2fx\n", "  first suspend vs unmap+release, settled", first_sus / 1e6,
         drv_down / 1e6, first_sus / drv_down);
  printf("%-50s %12.3f %12.3f %7.2fx\n", "  first resume vs creation, settled", first_res / 1e6,
         drv_up_g[SETTLED] / 1e6, first_res / drv_up_g[SETTLED]);
  printf("\n(2) with CUEMM_SUSPEND_KEEP, %zu bytes kept (staging buffer pinned once, reused)\n", kept);
  printf("%-44s %12s %12s %8s\n", "direction", "cuemm GiB/s", "plain GiB/s", "ratio");
  printf("%-44s %12.2f %12.2f %7.2fx\n", "device to host: copy part of suspend", kept / copy_out * gbs,
         kept / d2h * gbs, d2h / copy_out);
  printf("%-44s %12.2f %12.2f %7.2fx\n", "device to host: whole suspend", kept / sus_k * gbs, kept / d2h * gbs,
         d2h / sus_k);
  printf("%-44s %12.2f %12.2f %7.2fx\n", "host to device: copy part of resume", kept / copy_in * gbs,
         kept / h2d * gbs, h2d / copy_in);
  printf("%-44s %12.2f %12.2f %7.2fx\n", "host to device: whole resume", kept / res_k * gbs, kept / h2d * gbs,
         h2d / res_k);
  size_t used0 = total - free0, used1 = total - free1, used_s = total - free_susp;
  size_t held = used1 > used0 ? used1 - used0 : 0, left = used_s > used0 ? used_s - used0 : 0;
  printf("\n(3) device memory used (cuMemGetInfo)\n");
  printf("%-44s %16zu\n", "before the manager", used0);
  printf("%-44s %16zu\n", "with the blocks live", used1);
  printf("%-44s %16zu\n", "suspended", used_s);
  printf("%-44s %15.3f%%\n", "left while suspended / held", held ? 100.0 * (double)left / (double)held : 0.0);
  printf("\n(4) cuemm_alloc_async + cuemm_free_async pair, one stream, median ns of %d samples of %ld pairs\n",
         samples, iters);
  printf("%-12s %14s %14s %8s\n", "size", "after a cycle", "never", "ratio");
  for (int k = 0; k < NS; k++)
    printf("%-12zu %14.1f %14.1f %8.2f\n", sizes[k], pair[k], pair_plain[k], pair[k] / pair_plain[k]);

  for (size_t i = 0; i < nblocks; i++)
    CHECK(cuemm_free(m, p[i]));
  CHECK(cuemm_destroy(m));
  CHECK(cuDevicePrimaryCtxRelease(dev));
  free(p);
  free(t_up), free(t_down), free(s0), free(r0), free(s1), free(r1), free(c_d2h), free(c_h2d);
  return 0;
}
