/* bench-suspend.c: cuemm_pool_suspend and cuemm_pool_resume on the GPU,
 * each against what the driver does for the same bytes in the same run:
 *   (1) suspend and resume of SIZE bytes of live 8 MiB blocks, contents
 *       dropped, against one cuMemCreate + cuMemMap + cuMemSetAccess of
 *       SIZE bytes and the matching cuMemUnmap + cuMemRelease (target: at
 *       most 2x).  The driver's cycle and cuemm's take turns in every round
 *       (which goes first alternates), so both meet the same state of the
 *       driver: right after a release it may hand the same memory back at
 *       a fraction of the cost of fresh memory, which it zeroes first
 *       (20 GiB: about 1 ms against 40 to 120 ms on an H100), and which
 *       request gets which is the driver's choice.  The rounds run twice:
 *       back to back, and with 200 ms before every creation (fresh memory
 *       on both sides, as for a program that suspends rarely);
 *   (2) the same with CUEMM_SUSPEND_KEEP: the copy's bandwidth each way
 *       (bytes kept / the time KEEP adds to the call) and of the whole call,
 *       against one cuMemcpyDtoH / cuMemcpyHtoD of the same bytes with
 *       cuMemHostAlloc memory (target: at least 80%);
 *   (3) device memory used (cuMemGetInfo) before and after a suspension
 *       (target: what stays, beyond what was used before the manager was
 *       made, at most 1% of what the manager held);
 *   (4) a cuemm_alloc_async + cuemm_free_async pair on one stream after a
 *       suspend/resume cycle, 4 KiB .. 8 MiB (target: at most 25 ns).
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

/* One driver allocation of `size` bytes: reserve, create, map, access;
 * returns the time of create + map + access, *down the unmap + release.
 * `gap_ms` passes before the creation. */
static double driver_cycle(CUdevice dev, size_t size, double *down, int gap_ms)
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
  pause_ms(gap_ms);
  double t0 = now_ns();
  CHECK(cuMemCreate(&h, size, &prop, 0));
  CHECK(cuMemMap(va, size, 0, h, 0));
  CHECK(cuMemSetAccess(va, size, &acc, 1));
  double up = now_ns() - t0;
  t0 = now_ns();
  CHECK(cuMemUnmap(va, size));
  CHECK(cuMemRelease(h));
  *down = now_ns() - t0;
  CHECK(cuMemAddressFree(va, size));
  return up;
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
  CHECK(cuemm_create(&m, ctx, &cfg));
  CUdeviceptr *p = calloc(nblocks, sizeof *p);
  for (size_t i = 0; i < nblocks; i++)
    CHECK(cuemm_alloc(m, &p[i], block));
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
  static const int gaps[2] = { 0, 200 };
  double sus_g[2], res_g[2], drv_down_g[2], drv_up_g[2];
  for (int g = 0; g < 2; g++) {
    for (int r = 0; r < rounds; r++) {
      if (r % 2 == 0)
        t_up[r] = driver_cycle(dev, size, &t_down[r], gaps[g]);
      t0 = now_ns();
      CHECK(cuemm_pool_suspend(m, 0));
      s0[r] = now_ns() - t0;
      pause_ms(gaps[g]);
      t0 = now_ns();
      CHECK(cuemm_pool_resume(m));
      r0[r] = now_ns() - t0;
      if (r % 2 == 1)
        t_up[r] = driver_cycle(dev, size, &t_down[r], gaps[g]);
    }
    sus_g[g] = median(s0, rounds), res_g[g] = median(r0, rounds);
    drv_down_g[g] = median(t_down, rounds), drv_up_g[g] = median(t_up, rounds);
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
  double sus = sus_g[0], res = res_g[0], drv_down = drv_down_g[0], drv_up = drv_up_g[0];
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

  /* (4) pairs after a cycle. */
  CUstream st;
  CHECK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
  static const size_t sizes[] = { 4096, 65536, 1 << 20, 8 << 20 };
  enum { NS = sizeof sizes / sizeof sizes[0] };
  double pair[NS];
  long iters = size <= 256 * MiB ? 20000 : 200000;
  for (int k = 0; k < NS; k++) {
    double *v = calloc((size_t)rounds, sizeof(double));
    CUdeviceptr q;
    CHECK(cuemm_alloc_async(m, &q, sizes[k], st));
    CHECK(cuemm_free_async(m, q, st));
    for (int r = 0; r < rounds; r++) {
      t0 = now_ns();
      for (long i = 0; i < iters; i++) {
        cuemm_alloc_async(m, &q, sizes[k], st);
        cuemm_free_async(m, q, st);
      }
      v[r] = (now_ns() - t0) / (double)iters;
    }
    pair[k] = median(v, rounds);
    free(v);
  }
  CHECK(cuStreamSynchronize(st));
  CHECK(cuemm_stream_release(m, st));
  CHECK(cuStreamDestroy(st));

  double gbs = 1e9 / (double)GiB;
  double copy_out = sus_k - sus > 0 ? sus_k - sus : sus_k, copy_in = res_k - res > 0 ? res_k - res : res_k;
  printf("\n(1) suspend / resume without contents, %zu bytes (granularity %zu)\n", size, gran);
  printf("%-44s %12s %12s %8s\n", "operation", "cuemm ms", "driver ms", "ratio");
  for (int g = 0; g < 2; g++) {
    printf("%s\n", g ? "200 ms before every creation (fresh memory on both sides):" :
                        "back to back (the driver may hand back what it was just given):");
    printf("%-44s %12.3f %12.3f %7.2fx\n", "  suspend vs cuMemUnmap+cuMemRelease", sus_g[g] / 1e6,
           drv_down_g[g] / 1e6, sus_g[g] / drv_down_g[g]);
    printf("%-44s %12.3f %12.3f %7.2fx\n", "  resume vs cuMemCreate+cuMemMap+cuMemSetAccess", res_g[g] / 1e6,
           drv_up_g[g] / 1e6, res_g[g] / drv_up_g[g]);
    printf("%-44s %12.3f %12.3f %7.2fx\n", "  suspend vs cuMemCreate+cuMemMap+cuMemSetAccess", sus_g[g] / 1e6,
           drv_up_g[g] / 1e6, sus_g[g] / drv_up_g[g]);
  }
  printf("first round, back to back, %zu chunks as grown (then %zu):\n", grown.chunks, chunks_after);
  printf("%-44s %12.3f %12.3f %7.2fx\n", "  first suspend", first_sus / 1e6, drv_down / 1e6, first_sus / drv_down);
  printf("%-44s %12.3f %12.3f %7.2fx\n", "  first suspend vs create+map+access", first_sus / 1e6, drv_up / 1e6,
         first_sus / drv_up);
  printf("%-44s %12.3f %12.3f %7.2fx\n", "  first resume", first_res / 1e6, drv_up / 1e6, first_res / drv_up);
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
  printf("\n(4) cuemm_alloc_async + cuemm_free_async pair, one stream, after a cycle\n");
  printf("%-12s %10s\n", "size", "ns/pair");
  for (int k = 0; k < NS; k++)
    printf("%-12zu %10.1f\n", sizes[k], pair[k]);

  for (size_t i = 0; i < nblocks; i++)
    CHECK(cuemm_free(m, p[i]));
  CHECK(cuemm_destroy(m));
  CHECK(cuDevicePrimaryCtxRelease(dev));
  free(p);
  free(t_up), free(t_down), free(s0), free(r0), free(s1), free(r1), free(c_d2h), free(c_h2d);
  return 0;
}
