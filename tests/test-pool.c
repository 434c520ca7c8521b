/* test-pool.c: the growable pool on CUDA virtual memory.
 *
 * A randomized run checked against a shadow model (no overlap with live or
 * pending blocks, every block in mapped memory, data intact while others
 * come and go, growth without moves, statistics that add up); release and
 * trim measured with cuMemGetInfo; every VMM call failing in turn on
 * simcuda; a block freed while queued work still writes it; defer scopes;
 * the out-of-memory path (flush, trim, retry, message); the cuMemAlloc
 * fallback for requests larger than the pool; peers; configuration errors.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define MiB ((size_t)1 << 20)

static cuemm_config pool_config(size_t chunk, size_t reserve, size_t threshold, size_t limit, size_t count)
{
  cuemm_config c = test_config(count, 1.0);
  c.pool_release_delay_ms = 0; /* the threshold alone; the delay has tests of its own */
  c.pool = CUEMM_POOL_VMM;
  c.pool_chunk = chunk;
  c.pool_reserve = reserve;
  c.pool_release_threshold = threshold;
  c.pool_limit = limit;
  return c;
}

static cuemm_manager *make_pool(size_t chunk, size_t reserve, size_t threshold, size_t limit, size_t count)
{
  cuemm_config c = pool_config(chunk, reserve, threshold, limit, count);
  cuemm_manager *m = NULL;
  CHECK_CU(cuemm_manager_create(NULL, &c, &m));
  return m;
}

static cuemm_pool_stats pstats(cuemm_manager *m)
{
  cuemm_pool_stats s;
  CHECK_CU(cuemm_pool_get_stats(m, &s));
  return s;
}

static size_t round256(size_t v)
{
  return (v + 255) & ~(size_t)255;
}

static uint64_t rng = 0x2545F4914F6CDD1Du;
static uint64_t next_rand(void)
{
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* ---- basics ------------------------------------------------------------------- */

static void basics(void)
{
  cuemm_manager *m = make_pool(4 * MiB, 256 * MiB, (size_t)1 << 40, 0, 10);
  cuemm_pool_stats s = pstats(m);
  ok(s.enabled, "the pool is on");
  is(s.reserved_bytes, 256 * MiB, "reservation as configured");
  is(s.mapped_bytes, 0, "nothing mapped before the first allocation");
  ok(s.granularity > 0 && (4 * MiB) % s.granularity == 0, "granularity %zu divides the chunk", s.granularity);
  CUdeviceptr p[11];
  unsigned long creates0 = sim_calls("cuMemCreate"), access0 = sim_calls("cuMemSetAccess");
  CHECK_CU(cuemm_allocate(m, 1000, &p[0]));
  s = pstats(m);
  ok(p[0] >= s.base && p[0] < s.base + s.reserved_bytes, "the block lies in the reservation");
  is(p[0] % 256, 0, "256-byte aligned");
  is(s.mapped_bytes, s.granularity, "one granule mapped: an empty pool grows by the least it can");
  is(s.used_bytes, 1024, "1000 bytes use 1024");
  is(s.grow_steps, 1, "one growth step");
  if (sim_present) {
    is(sim_calls("cuMemCreate") - creates0, 1, "one cuMemCreate");
    is(sim_calls("cuMemSetAccess") - access0, 1, "one cuMemSetAccess");
  } else
    skip(2, SIM_REASON);
  for (int i = 1; i < 11; i++) {
    CHECK_CU(cuemm_allocate(m, 4096, &p[i]));
    ok(p[i] == p[i - 1] + (i == 1 ? 1024 : 4096), "block %d follows the previous one", i);
  }
  is(pstats(m).grow_steps, 1, "no more growth for small blocks");
  cuemm_ipc_handle h;
  is(cuemm_ipc_export(m, p[3] + 100, 0, &h), CUDA_ERROR_NOT_SUPPORTED, "a pool block cannot be exported without pool IPC");
  like(cuemm_last_error(), "CUEMM_POOL_IPC=1 (or cuemm_config.pool_ipc = 1)", "the message says how to enable it");
  unsigned long syncs0 = sim_calls("cuCtxSynchronize");
  for (int i = 0; i < 10; i++)
    CHECK_CU(cuemm_free(m, p[i]));
  is(test_stats(m).pending_count, 10, "ten pool frees pending");
  is(pstats(m).used_bytes, 1024 + 9 * 4096 + 4096, "pending blocks still count as used");
  CHECK_CU(cuemm_free(m, p[10]));
  cuemm_stats st = test_stats(m);
  is(st.pending_count, 0, "the eleventh flushes");
  is(st.flushes, 1, "one flush");
  is(st.driver_frees, 0, "no driver free for pool blocks");
  if (sim_present)
    is(sim_calls("cuCtxSynchronize") - syncs0, 1, "one cuCtxSynchronize for the batch of eleven");
  else
    skip(1, SIM_REASON);
  s = pstats(m);
  is(s.used_bytes, 0, "all blocks back");
  is(s.free_blocks, 12, "the eleven small blocks are cached, the rest is one free block");
  is(s.free_bytes, s.mapped_bytes, "cached blocks count as free");

  /* Bad frees. */
  CUdeviceptr q;
  CHECK_CU(cuemm_allocate(m, 512, &q));
  is(cuemm_free(m, q + 256), CUDA_ERROR_INVALID_VALUE, "interior pointer refused");
  is(cuemm_host_free(m, (void *)(uintptr_t)q), CUDA_ERROR_INVALID_VALUE, "host free of a pool block refused");
  like(cuemm_last_error(), "from the pool", "the message says what it is");
  CHECK_CU(cuemm_free(m, q));
  is(cuemm_free(m, q), CUDA_ERROR_INVALID_VALUE, "double free refused");
  like(cuemm_last_error(), "double free", "and named");
  is(test_stats(m).pending_count, 1, "the queue holds it once");

  /* Reset returns live blocks through the queue. */
  CUdeviceptr r[3];
  for (int i = 0; i < 3; i++)
    CHECK_CU(cuemm_allocate(m, 10000, &r[i]));
  CHECK_CU(cuemm_reset(m));
  st = test_stats(m);
  ok(st.live_count == 0 && st.pending_count == 0, "reset frees the live pool blocks");
  is(pstats(m).used_bytes, 0, "and the pool has them back");
  is(cuemm_free(m, r[0]), CUDA_ERROR_INVALID_VALUE, "their pointers are no longer valid");
  CHECK_CU(cuemm_destroy(m));

  /* Without a pool. */
  cuemm_config c = test_config(10, 0.2);
  CHECK_CU(cuemm_manager_create(NULL, &c, &m));
  s = pstats(m);
  is(s.enabled, 0, "stats of a manager without a pool: disabled");
  is(cuemm_pool_trim(m), CUDA_ERROR_INVALID_VALUE, "trim without a pool refused");
  like(cuemm_last_error(), "CUEMM_POOL=vmm", "the message says how to enable it");
  is(cuemm_pool_grant_access(m, 0), CUDA_ERROR_INVALID_VALUE, "grant without a pool refused");
  CHECK_CU(cuemm_destroy(m));
}

/* ---- randomized, against a shadow model ------------------------------------------ */

typedef struct blk { CUdeviceptr p; size_t size; unsigned char tag; } blk;

static int overlaps(const blk *v, size_t n, CUdeviceptr p, size_t size)
{
  for (size_t i = 0; i < n; i++)
    if (p < v[i].p + v[i].size && v[i].p < p + size)
      return 1;
  return 0;
}

/* Reads the first and last bytes (all of a small block) back. */
static int intact(const blk *b, int whole)
{
  static unsigned char buf[1 << 16];
  size_t n = whole || b->size <= sizeof buf ? b->size : 4096;
  for (size_t off = 0; off < b->size;) {
    size_t k = n - off < sizeof buf ? n - off : sizeof buf;
    if (k == 0)
      break;
    CHECK_CU(cuMemcpyDtoH(buf, b->p + off, k));
    for (size_t i = 0; i < k; i++)
      if (buf[i] != b->tag)
        return 0;
    off += k;
  }
  if (!whole && b->size > n) {
    size_t k = b->size - n < 4096 ? b->size - n : 4096;
    CHECK_CU(cuMemcpyDtoH(buf, b->p + b->size - k, k));
    for (size_t i = 0; i < k; i++)
      if (buf[i] != b->tag)
        return 0;
  }
  return 1;
}

static void randomized(void)
{
  enum { STEPS = 3000, MAXLIVE = 160, MAXPEND = 64 };
  cuemm_manager *m = make_pool(4 * MiB, 2048 * MiB, 16 * MiB, 0, 10);
  cuemm_pool_stats s = pstats(m);
  static blk live[MAXLIVE], pend[MAXPEND];
  size_t nlive = 0, npend = 0, allocs = 0, frees = 0;
  int misaligned = 0, outside = 0, overlap = 0, unmapped = 0, corrupt = 0, inconsistent = 0, moved = 0;
  CUdeviceptr first = 0;
  blk keeper = { 0, 0, 0 };
  unsigned tagseq = 0;
  for (int step = 0; step < STEPS; step++) {
    int do_alloc = nlive == 0 || (nlive < MAXLIVE && next_rand() % 100 < 55);
    if (do_alloc) {
      unsigned bits = 8 + (unsigned)(next_rand() % 15); /* 256 B .. 4 MiB */
      size_t size = 1 + (size_t)(next_rand() % ((size_t)1 << bits));
      if (size < 256)
        size = 256 - (size % 7);
      CUdeviceptr p = 0;
      CHECK_CU(cuemm_allocate(m, size, &p));
      allocs++;
      misaligned += p % 256 != 0;
      outside += p < s.base || p + size > s.base + s.reserved_bytes;
      overlap += overlaps(live, nlive, p, size) || overlaps(pend, npend, p, size);
      CUdeviceptr rb = 0;
      size_t rs = 0;
      if (cuMemGetAddressRange(&rb, &rs, p) != CUDA_SUCCESS || cuMemGetAddressRange(&rb, &rs, p + size - 1) != CUDA_SUCCESS)
        unmapped++;
      unsigned char tag = (unsigned char)(1 + tagseq++ % 251);
      CHECK_CU(cuMemsetD8(p, tag, size));
      live[nlive++] = (blk){ p, size, tag };
      if (!first) {
        first = p;
        keeper = live[0];
      }
    } else {
      size_t k = (size_t)(next_rand() % nlive);
      if (live[k].p == keeper.p)
        k = (k + 1) % nlive;
      if (live[k].p == keeper.p)
        continue;
      corrupt += !intact(&live[k], 0);
      CHECK_CU(cuemm_free(m, live[k].p));
      frees++;
      if (npend < MAXPEND)
        pend[npend++] = live[k];
      live[k] = live[--nlive];
      if (test_stats(m).pending_count == 0)
        npend = 0;
    }
    s = pstats(m);
    size_t used = 0;
    for (size_t i = 0; i < nlive; i++)
      used += round256(live[i].size);
    for (size_t i = 0; i < npend; i++)
      used += round256(pend[i].size);
    if (s.mapped_bytes != s.used_bytes + s.free_bytes || s.used_bytes != used || s.largest_free_block > s.free_bytes)
      inconsistent++;
  }
  is(misaligned, 0, "%zu allocations, %zu frees: every block 256-byte aligned", allocs, frees);
  is(outside, 0, "every block inside the reservation");
  is(overlap, 0, "no block overlaps a live or a pending one");
  is(unmapped, 0, "every block lies in mapped memory");
  is(corrupt, 0, "every block read back intact when freed");
  is(inconsistent, 0, "statistics add up after every step (mapped = used + free, used = the model's)");
  int all = 1;
  for (size_t i = 0; i < nlive; i++)
    all &= intact(&live[i], 1);
  ok(all, "all %zu live blocks intact at the end", nlive);
  moved = keeper.p != first || !intact(&keeper, 1);
  s = pstats(m);
  ok(s.grow_steps > 1 && !moved, "the pool grew %llu times and the first block stayed put with its data",
     (unsigned long long)s.grow_steps);
  ok(s.chunks_released > 0, "chunks were released on the way (%llu)", (unsigned long long)s.chunks_released);
  for (size_t i = 0; i < nlive; i++)
    CHECK_CU(cuemm_free(m, live[i].p));
  CHECK_CU(cuemm_flush(m));
  s = pstats(m);
  is(s.used_bytes, 0, "everything back after the last flush");
  CHECK_CU(cuemm_pool_trim(m));
  is(pstats(m).mapped_bytes, 0, "and a trim releases it all");
  CHECK_CU(cuemm_destroy(m));
}

/* ---- release ------------------------------------------------------------------ */

static void release(void)
{
  size_t free0, total;
  CHECK_CU(cuMemGetInfo(&free0, &total));
  cuemm_manager *m = make_pool(4 * MiB, 1024 * MiB, (size_t)1 << 40, 0, 1000);
  CUdeviceptr p[64];
  size_t sum = 0;
  for (int i = 0; i < 64; i++) {
    size_t size = (i % 4 + 1) * 512 * 1024 + 777;
    CHECK_CU(cuemm_allocate(m, size, &p[i]));
    sum += size;
  }
  size_t free1;
  CHECK_CU(cuMemGetInfo(&free1, &total));
  ok(free0 - free1 >= sum, "the driver's free memory went down by at least what was allocated (%zu >= %zu)",
     free0 - free1, sum);
  for (int i = 0; i < 64; i++)
    CHECK_CU(cuemm_free(m, p[i]));
  CHECK_CU(cuemm_flush(m));
  cuemm_pool_stats s = pstats(m);
  ok(s.mapped_bytes >= sum, "below a huge threshold, the free memory stays mapped");
  CHECK_CU(cuemm_pool_trim(m));
  s = pstats(m);
  is(s.mapped_bytes, 0, "trim releases every wholly free chunk");
  is(s.chunks, 0, "no chunk left");
  is(s.chunks_released, s.chunks_mapped, "every chunk mapped was released");
  size_t free2;
  CHECK_CU(cuMemGetInfo(&free2, &total));
  ok(free2 + 4 * MiB >= free0, "the driver's free memory is back within one chunk of the start (%zu of %zu)", free2,
     free0);
  CHECK_CU(cuemm_destroy(m));

  /* The automatic release keeps the threshold. */
  m = make_pool(4 * MiB, 1024 * MiB, 8 * MiB, 0, 1000);
  for (int i = 0; i < 16; i++)
    CHECK_CU(cuemm_allocate(m, 4 * MiB, &p[i]));
  is(pstats(m).mapped_bytes, 64 * MiB, "sixteen 4 MiB blocks map 64 MiB");
  for (int i = 0; i < 16; i++)
    CHECK_CU(cuemm_free(m, p[i]));
  CHECK_CU(cuemm_flush(m));
  s = pstats(m);
  ok(s.mapped_bytes >= 8 * MiB && s.mapped_bytes <= 12 * MiB, "after the flush about the threshold stays mapped (%zu)",
     s.mapped_bytes);
  ok(s.releases >= 1, "an automatic release ran");
  CHECK_CU(cuemm_destroy(m));
}

/* ---- queued work and a reused block --------------------------------------------- */

static void queued_reuse(void)
{
  if (sim_present)
    sim.set_queue_mode(1);
  cuemm_manager *m = make_pool(4 * MiB, 256 * MiB, (size_t)1 << 40, 0, 0);
  CUstream st;
  CHECK_CU(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
  size_t size = 2 * MiB;
  CUdeviceptr a, b;
  CHECK_CU(cuemm_allocate(m, size, &a));
  CHECK_CU(cuMemsetD8Async(a, 0xAA, size, st));
  if (sim_present)
    ok(sim.queued_work() > 0, "the memset is queued");
  else
    skip(1, SIM_REASON);
  CHECK_CU(cuemm_free(m, a)); /* max_pending_count 0: flushes */
  if (sim_present)
    is(sim.queued_work(), 0, "the flush synchronized before returning the block");
  else
    skip(1, SIM_REASON);
  CHECK_CU(cuemm_allocate(m, size, &b));
  is(b, a, "the same block comes back");
  CHECK_CU(cuMemsetD8(b, 0x55, size));
  CHECK_CU(cuCtxSynchronize());
  unsigned char *host = malloc(size);
  CHECK_CU(cuMemcpyDtoH(host, b, size));
  size_t bad = 0;
  for (size_t i = 0; i < size; i++)
    bad += host[i] != 0x55;
  is(bad, 0, "the new owner's data is 0x55 everywhere: the old queued 0xAA never lands on it");
  free(host);
  CHECK_CU(cuemm_free(m, b));
  CHECK_CU(cuStreamDestroy(st));
  CHECK_CU(cuemm_destroy(m));
  if (sim_present)
    sim.set_queue_mode(0);
}

/* ---- defer scopes ------------------------------------------------------------ */

static void scopes(void)
{
  cuemm_manager *m = make_pool(4 * MiB, 256 * MiB, (size_t)1 << 40, 0, 10);
  CUdeviceptr p[20], q[20];
  for (int i = 0; i < 20; i++)
    CHECK_CU(cuemm_allocate(m, 64 * 1024, &p[i]));
  size_t used = pstats(m).used_bytes;
  unsigned long syncs0 = sim_calls("cuCtxSynchronize");
  CHECK_CU(cuemm_defer_cleanup_begin(m));
  for (int i = 0; i < 20; i++)
    CHECK_CU(cuemm_free(m, p[i]));
  CHECK_CU(cuemm_flush(m));
  is(test_stats(m).pending_count, 20, "inside a scope, twenty pool frees stay queued");
  is(pstats(m).used_bytes, used, "their blocks stay used");
  if (sim_present)
    is(sim_calls("cuCtxSynchronize") - syncs0, 0, "no synchronization inside the scope");
  else
    skip(1, SIM_REASON);
  int clash = 0;
  for (int i = 0; i < 20; i++) {
    CHECK_CU(cuemm_allocate(m, 64 * 1024, &q[i]));
    for (int k = 0; k < 20; k++)
      clash += q[i] == p[k];
  }
  is(clash, 0, "new blocks never reuse the held-back ones");
  CHECK_CU(cuemm_defer_cleanup_end(m));
  CHECK_CU(cuemm_flush(m));
  is(test_stats(m).pending_count, 0, "after the scope a flush returns them");
  is(pstats(m).used_bytes, used, "only the second twenty are used");
  if (sim_present)
    is(sim_calls("cuCtxSynchronize") - syncs0, 1, "with one synchronization");
  else
    skip(1, SIM_REASON);
  CHECK_CU(cuemm_destroy(m));
}

/* ---- out of memory -------------------------------------------------------------- */

static void out_of_memory(void)
{
  /* A limit of 64 MiB: the pending free of A must be flushed for B. */
  cuemm_manager *m = make_pool(4 * MiB, 256 * MiB, (size_t)1 << 40, 64 * MiB, 1000);
  CUdeviceptr a, b, c;
  CHECK_CU(cuemm_allocate(m, 40 * MiB, &a));
  CHECK_CU(cuemm_free(m, a));
  is(cuemm_allocate(m, 40 * MiB, &b), CUDA_SUCCESS, "past the limit, the pending frees are flushed and it fits");
  is(b, a, "in the block just returned");
  cuemm_stats st = test_stats(m);
  is(st.oom_retries, 1, "one retry");
  CHECK_CU(cuemm_defer_cleanup_begin(m));
  CHECK_CU(cuemm_free(m, b));
  is(cuemm_allocate(m, 40 * MiB, &c), CUDA_ERROR_OUT_OF_MEMORY, "inside a scope the same request fails");
  const char *msg = cuemm_last_error();
  like(msg, "out of pool memory for 41943040 bytes", "the message names the size");
  like(msg, "41943040 bytes mapped", "the mapped bytes");
  like(msg, "41943040 used", "the used bytes");
  like(msg, "largest free block", "the largest free block");
  like(msg, "defer scope", "and the scope that held the frees back");
  like(msg, "CUEMM_POOL_LIMIT", "and the limit that stopped growth");
  CHECK_CU(cuemm_defer_cleanup_end(m));
  CHECK_CU(cuemm_flush(m));

  /* Free memory in the wrong place: a trim lets the pool map it anew. */
  CUdeviceptr x, y, z;
  CHECK_CU(cuemm_pool_trim(m));
  CHECK_CU(cuemm_allocate(m, 24 * MiB, &x));
  CHECK_CU(cuemm_allocate(m, 24 * MiB, &y));
  CHECK_CU(cuemm_free(m, x));
  CHECK_CU(cuemm_flush(m));
  is(pstats(m).largest_free_block, 24 * MiB, "24 MiB free below a used block");
  is(cuemm_allocate(m, 32 * MiB, &z), CUDA_SUCCESS, "32 MiB fits after the trim released the free chunk");
  cuemm_pool_stats s = pstats(m);
  is(s.mapped_bytes, 56 * MiB, "24 + 32 MiB mapped, within the limit");
  ok(s.chunks_released >= 1, "a chunk was released on the way");
  CHECK_CU(cuemm_free(m, y));
  CHECK_CU(cuemm_free(m, z));

  /* Larger than the pool: cuMemAlloc. */
  CUdeviceptr big;
  CHECK_CU(cuemm_allocate(m, 100 * MiB, &big));
  s = pstats(m);
  is(s.fallback_allocs, 1, "a request larger than the limit goes to cuMemAlloc");
  ok(big < s.base || big >= s.base + s.reserved_bytes, "outside the reservation");
  CHECK_CU(cuemm_free(m, big));
  CHECK_CU(cuemm_flush(m));
  is(test_stats(m).driver_frees, 1, "and is freed with cuMemFree");
  CHECK_CU(cuemm_destroy(m));
}

/* ---- every VMM call failing in turn (simcuda) ------------------------------------- */

static void check_clean(size_t live0, const char *what)
{
  is(sim.live_count(), live0, "%s: nothing left in the driver after destroy", what);
}

static void faults(void)
{
  enum { CHECKS = 52 };
  if (!sim_present) {
    skip(CHECKS, SIM_REASON);
    return;
  }
  size_t live0 = sim.live_count();
  cuemm_config c = pool_config(4 * MiB, 256 * MiB, 0, 0, 10);
  cuemm_manager *m = NULL;
  CUdeviceptr p = 0;

  sim.fail("cuMemAddressReserve", 1, CUDA_ERROR_OUT_OF_MEMORY);
  is(cuemm_manager_create(NULL, &c, &m), CUDA_ERROR_OUT_OF_MEMORY, "cuMemAddressReserve failing fails creation");
  like(cuemm_last_error(), "cuMemAddressReserve", "naming the call");
  ok(m == NULL, "and creates nothing");
  check_clean(live0, "cuMemAddressReserve");

  static const char *grow_calls[] = { "cuMemCreate", "cuMemMap", "cuMemSetAccess" };
  for (int k = 0; k < 3; k++) {
    CHECK_CU(cuemm_manager_create(NULL, &c, &m));
    sim.fail(grow_calls[k], 1, CUDA_ERROR_UNKNOWN);
    is(cuemm_allocate(m, MiB, &p), CUDA_ERROR_UNKNOWN, "%s failing fails the growth", grow_calls[k]);
    like(cuemm_last_error(), grow_calls[k], "naming the call");
    cuemm_pool_stats s = pstats(m);
    ok(s.mapped_bytes == 0 && s.chunks == 0 && s.used_bytes == 0 && s.grow_failures == 1,
       "the pool is as before (mapped %zu, chunks %zu)", s.mapped_bytes, s.chunks);
    simcuda_live l;
    sim.live_get(&l);
    is(l.vmm_handles + l.vmm_mappings, 0, "the step was rolled back in the driver");
    is(cuemm_allocate(m, MiB, &p), CUDA_SUCCESS, "the next allocation grows the pool");
    CHECK_CU(cuemm_free(m, p));
    CHECK_CU(cuemm_destroy(m));
    check_clean(live0, grow_calls[k]);
  }

  static const char *release_calls[] = { "cuMemRelease", "cuMemUnmap" };
  for (int k = 0; k < 2; k++) {
    cuemm_config keep = pool_config(4 * MiB, 256 * MiB, (size_t)1 << 40, 0, 0);
    CHECK_CU(cuemm_manager_create(NULL, &keep, &m));
    CHECK_CU(cuemm_allocate(m, MiB, &p));
    CHECK_CU(cuemm_free(m, p));
    sim.fail(release_calls[k], 1, CUDA_ERROR_UNKNOWN);
    is(cuemm_pool_trim(m), CUDA_ERROR_UNKNOWN, "%s failing fails the trim", release_calls[k]);
    like(cuemm_last_error(), release_calls[k], "naming the call");
    cuemm_pool_stats s = pstats(m);
    ok(s.mapped_bytes == s.granularity && s.chunks == 1 && s.free_bytes == s.granularity,
       "the chunk stays mapped and free");
    CHECK_CU(cuemm_allocate(m, MiB, &p));
    CHECK_CU(cuMemsetD8(p, 7, MiB));
    pass("and usable");
    CHECK_CU(cuemm_free(m, p));
    is(cuemm_pool_trim(m), CUDA_SUCCESS, "the next trim releases it");
    is(pstats(m).mapped_bytes, 0, "nothing mapped");
    CHECK_CU(cuemm_destroy(m));
    check_clean(live0, release_calls[k]);
  }

  CHECK_CU(cuemm_manager_create(NULL, &c, &m));
  CHECK_CU(cuemm_allocate(m, MiB, &p));
  cuemm_pool_stats s = pstats(m);
  sim.fail("cuMemAddressFree", 1, CUDA_ERROR_UNKNOWN);
  is(cuemm_destroy(m), CUDA_ERROR_UNKNOWN, "cuMemAddressFree failing is reported by destroy");
  like(cuemm_last_error(), "cuMemAddressFree", "naming the call");
  simcuda_live l;
  sim.live_get(&l);
  ok(l.vmm_handles == 0 && l.vmm_reservations == 1, "only the reservation is left");
  CHECK_CU(cuMemAddressFree(s.base, s.reserved_bytes));
  check_clean(live0, "cuMemAddressFree");

  cuemm_config now = pool_config(4 * MiB, 256 * MiB, (size_t)1 << 40, 0, 0);
  CHECK_CU(cuemm_manager_create(NULL, &now, &m));
  CHECK_CU(cuemm_allocate(m, MiB, &p));
  sim.fail("cuCtxSynchronize", 1, CUDA_ERROR_UNKNOWN);
  is(cuemm_free(m, p), CUDA_ERROR_UNKNOWN, "cuCtxSynchronize failing fails the flush");
  like(cuemm_last_error(), "cuCtxSynchronize", "naming the call");
  is(test_stats(m).pending_count, 1, "the free stays queued");
  is(pstats(m).used_bytes, MiB, "its block is not handed out");
  is(cuemm_flush(m), CUDA_SUCCESS, "the next flush");
  is(pstats(m).used_bytes, 0, "returns it");
  CHECK_CU(cuemm_destroy(m));
  check_clean(live0, "cuCtxSynchronize");

  /* The driver out of memory for good: flush, trim, retry, then the message. */
  CHECK_CU(cuemm_manager_create(NULL, &c, &m));
  sim.fail_from("cuMemCreate", 1, CUDA_ERROR_OUT_OF_MEMORY);
  is(cuemm_allocate(m, 3 * MiB, &p), CUDA_ERROR_OUT_OF_MEMORY, "cuMemCreate out of memory for good");
  sim.fail_clear();
  like(cuemm_last_error(), "out of pool memory for 3145728 bytes (0 bytes mapped, 0 used, largest free block 0 bytes)",
       "the message names size, mapped, used, largest free block");
  like(cuemm_last_error(), "cuMemCreate", "and the call that failed");
  is(test_stats(m).oom_retries, 1, "after one retry");
  CHECK_CU(cuemm_destroy(m));
  check_clean(live0, "out of memory");
}

/* ---- peers ------------------------------------------------------------------- */

static void peers(void)
{
  enum { CHECKS = 7, ROLLBACK_CHECKS = 4 };
  int count = 0;
  CHECK_CU(cuDeviceGetCount(&count));
  int can = 0;
  if (count >= 2)
    CHECK_CU(cuDeviceCanAccessPeer(&can, 1, 0));
  if (!can) {
    skip(CHECKS + ROLLBACK_CHECKS, "needs a second device with peer access to device 0");
    return;
  }
  cuemm_manager *m = make_pool(4 * MiB, 256 * MiB, (size_t)1 << 40, 0, 10);
  CUdeviceptr a, b;
  CHECK_CU(cuemm_allocate(m, MiB, &a));
  CHECK_CU(cuemm_allocate(m, 8 * MiB, &b)); /* a second chunk, adjacent: one run */
  unsigned long access0 = sim_calls("cuMemSetAccess");
  is(cuemm_pool_grant_access(m, 1), CUDA_SUCCESS, "grant device 1");
  if (sim_present)
    is(sim_calls("cuMemSetAccess") - access0, 1, "one cuMemSetAccess for the one mapped run");
  else
    skip(1, SIM_REASON);
  CUmemLocation loc = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 1 };
  unsigned long long flags = 0;
  CHECK_CU(cuMemGetAccess(&flags, &loc, a));
  is(flags, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, "device 1 may read and write present memory");
  CUdeviceptr c;
  CHECK_CU(cuemm_allocate(m, 64 * MiB, &c)); /* grows */
  CHECK_CU(cuMemGetAccess(&flags, &loc, c));
  is(flags, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, "and memory mapped later");
  is(pstats(m).peers, 1, "one peer counted");
  is(cuemm_pool_grant_access(m, 1), CUDA_SUCCESS, "granting again does nothing");
  is(cuemm_pool_grant_access(m, 99), CUDA_ERROR_INVALID_DEVICE, "a device that does not exist is refused");
  CHECK_CU(cuemm_destroy(m));

  /* A grant failing on the second of two runs takes back the first. */
  if (!sim_present) {
    skip(ROLLBACK_CHECKS, SIM_REASON);
    return;
  }
  m = make_pool(4 * MiB, 256 * MiB, (size_t)1 << 40, 0, 0);
  CUdeviceptr x, y, z;
  CHECK_CU(cuemm_allocate(m, 4 * MiB, &x));
  CHECK_CU(cuemm_allocate(m, 4 * MiB, &y));
  CHECK_CU(cuemm_allocate(m, 4 * MiB, &z));
  CHECK_CU(cuemm_free(m, y));
  CHECK_CU(cuemm_pool_trim(m)); /* two runs: x's chunk and z's */
  sim.fail("cuMemSetAccess", 2, CUDA_ERROR_UNKNOWN);
  is(cuemm_pool_grant_access(m, 1), CUDA_ERROR_UNKNOWN, "a grant failing on the second run fails");
  like(cuemm_last_error(), "cuMemSetAccess", "naming the call");
  CHECK_CU(cuMemGetAccess(&flags, &loc, x));
  is(flags, CU_MEM_ACCESS_FLAGS_PROT_NONE, "the first run's access was taken back");
  is(pstats(m).peers, 0, "no peer recorded");
  CHECK_CU(cuemm_destroy(m));
}

/* ---- threads ------------------------------------------------------------------ */

typedef struct worker { cuemm_manager *m; CUcontext ctx; unsigned seed; int bad; } worker;

static void *work(void *arg)
{
  worker *w = arg;
  unsigned char buf[512];
  if (cuCtxSetCurrent(w->ctx) != CUDA_SUCCESS) {
    w->bad++;
    return NULL;
  }
  for (int i = 0; i < 1500; i++) {
    size_t size = 256 + (size_t)(rand_r(&w->seed) % (256 * 1024));
    unsigned char tag = (unsigned char)(1 + rand_r(&w->seed) % 250);
    CUdeviceptr p;
    if (cuemm_allocate(w->m, size, &p) != CUDA_SUCCESS || cuMemsetD8(p, tag, size) != CUDA_SUCCESS) {
      w->bad++;
      continue;
    }
    size_t n = size < sizeof buf ? size : sizeof buf;
    if (cuMemcpyDtoH(buf, p + size - n, n) != CUDA_SUCCESS)
      w->bad++;
    for (size_t k = 0; k < n; k++)
      w->bad += buf[k] != tag;
    if (cuemm_free(w->m, p) != CUDA_SUCCESS)
      w->bad++;
  }
  return NULL;
}

static void threads(void)
{
  enum { N = 4 };
  cuemm_manager *m = make_pool(4 * MiB, 1024 * MiB, 8 * MiB, 0, 10);
  CUcontext ctx;
  CHECK_CU(cuCtxGetCurrent(&ctx));
  pthread_t t[N];
  worker w[N];
  for (int i = 0; i < N; i++) {
    w[i] = (worker){ m, ctx, 1234u + (unsigned)i, 0 };
    pthread_create(&t[i], NULL, work, &w[i]);
  }
  int bad = 0;
  for (int i = 0; i < N; i++) {
    pthread_join(t[i], NULL);
    bad += w[i].bad;
  }
  is(bad, 0, "four threads allocating, writing, reading back and freeing: no failure, no foreign data");
  CHECK_CU(cuemm_flush(m));
  cuemm_pool_stats s = pstats(m);
  ok(s.used_bytes == 0 && s.mapped_bytes == s.free_bytes, "all blocks back afterwards");
  CHECK_CU(cuemm_destroy(m));
}

/* ---- configuration ----------------------------------------------------------- */

static void configuration(void)
{
  cuemm_config c = pool_config(3 * MiB, 256 * MiB, 0, 0, 10);
  cuemm_manager *m = NULL;
  is(cuemm_manager_create(NULL, &c, &m), CUDA_ERROR_INVALID_VALUE, "a chunk that is not a multiple of the granularity");
  like(cuemm_last_error(), "CUEMM_POOL_CHUNK", "the message names the variable");
  c = pool_config(4 * MiB, 256 * MiB, 0, MiB, 10);
  is(cuemm_manager_create(NULL, &c, &m), CUDA_ERROR_INVALID_VALUE, "a limit below one chunk");
  like(cuemm_last_error(), "CUEMM_POOL_LIMIT", "the message names the variable");
  setenv("CUEMM_POOL", "vmm", 1);
  setenv("CUEMM_POOL_CHUNK", "8MiB", 1);
  setenv("CUEMM_POOL_RESERVE", "512M", 1);
  CHECK_CU(cuemm_manager_create(NULL, NULL, &m));
  cuemm_pool_stats s = pstats(m);
  ok(s.enabled && s.chunk_bytes == 8 * MiB && s.reserved_bytes == 512 * MiB,
     "CUEMM_POOL=vmm, CUEMM_POOL_CHUNK=8MiB, CUEMM_POOL_RESERVE=512M");
  CHECK_CU(cuemm_destroy(m));
  unsetenv("CUEMM_POOL");
  unsetenv("CUEMM_POOL_CHUNK");
  unsetenv("CUEMM_POOL_RESERVE");
}

/* Hysteresis: memory a recent growth needed stays mapped past the threshold
 * for the release delay; and when enough is free but not in one piece, the
 * wholly free chunks go back before the pool grows. */
static void hysteresis(void)
{
  cuemm_config c = pool_config(2 * MiB, 256 * MiB, 0, 0, 0);
  c.pool_release_delay_ms = 60000;
  cuemm_manager *m = NULL;
  CHECK_CU(cuemm_manager_create(NULL, &c, &m));
  CUdeviceptr v[8];
  for (int i = 0; i < 8; i++)
    CHECK_CU(cuemm_allocate(m, 4 * MiB, &v[i]));
  for (int i = 0; i < 8; i++)
    CHECK_CU(cuemm_free(m, v[i])); /* max_pending_count 0: each free flushes */
  is(pstats(m).mapped_bytes, 32 * MiB, "threshold 0, delay 60 s: the memory the last growths needed stays mapped");
  is(pstats(m).chunks_released, 0, "nothing released");
  CHECK_CU(cuemm_pool_trim(m));
  is(pstats(m).mapped_bytes, 0, "trim releases it all the same");
  CHECK_CU(cuemm_destroy(m));

  /* Fragmented: 4 MiB blocks with every other one freed leave 16 MiB free
   * in 4 MiB pieces; a 6 MiB request releases those before it grows. */
  c = pool_config(2 * MiB, 256 * MiB, 64 * MiB, 0, 0);
  c.pool_release_delay_ms = 60000;
  CHECK_CU(cuemm_manager_create(NULL, &c, &m));
  for (int i = 0; i < 8; i++)
    CHECK_CU(cuemm_allocate(m, 4 * MiB, &v[i]));
  for (int i = 0; i < 8; i += 2)
    CHECK_CU(cuemm_free(m, v[i]));
  cuemm_pool_stats ps = pstats(m);
  ok(ps.mapped_bytes == 32 * MiB && ps.free_bytes == 16 * MiB && ps.largest_free_block == 4 * MiB,
     "16 MiB free in 4 MiB pieces (largest %zu)", ps.largest_free_block);
  CUdeviceptr big;
  CHECK_CU(cuemm_allocate(m, 6 * MiB, &big));
  ps = pstats(m);
  is(ps.mapped_bytes, 22 * MiB, "a 6 MiB request: the four free pieces went back, 6 MiB were mapped for it");
  ok(ps.chunks_released >= 4, "their chunks were released (%llu)", (unsigned long long)ps.chunks_released);
  for (int i = 1; i < 8; i += 2)
    CHECK_CU(cuemm_free(m, v[i]));
  CHECK_CU(cuemm_free(m, big));
  CHECK_CU(cuemm_destroy(m));
}

/* CUEMM_POOL_SLAB: the reservation is one cuMemAlloc; growth, release and
 * trim make no driver call, blocks hold data, the slab is held whole and
 * freed at destruction. */
static void slab(void)
{
  if (!sim_present) {
    skip(15, SIM_REASON);
    return;
  }
  cuemm_config c = pool_config(2 * MiB, 16 * MiB, 0, 0, 10);
  c.pool_slab = 1;
  sim.calls_reset();
  cuemm_manager *m = NULL;
  CHECK_CU(cuemm_manager_create(NULL, &c, &m));
  is(sim.calls("cuMemAlloc_v2") + sim.calls("cuMemAlloc"), 1, "creation: one cuMemAlloc, the slab");
  is(sim.calls("cuMemAddressReserve"), 0, "and no address reservation");
  cuemm_pool_stats ps = pstats(m);
  ok(ps.slab == 1 && ps.reserved_bytes == 16 * MiB && ps.mapped_bytes == 0, "the pool says slab, 16 MiB, none in use");
  CUdeviceptr a, b;
  CHECK_CU(cuemm_allocate(m, 1000, &a));
  CHECK_CU(cuemm_allocate_async(m, 5 * MiB, NULL, &b));
  ps = pstats(m);
  ok(ps.grow_steps >= 2 && ps.mapped_bytes >= 6 * MiB, "growth steps counted (%llu), %zu bytes in use",
     (unsigned long long)ps.grow_steps, ps.mapped_bytes);
  is(sim.calls("cuMemCreate") + sim.calls("cuMemMap") + sim.calls("cuMemSetAccess"), 0,
     "growth makes no cuMemCreate, cuMemMap or cuMemSetAccess");
  ok(a >= ps.base && b + 5 * MiB <= ps.base + 16 * MiB, "the blocks lie in the slab");
  unsigned char back[4] = { 0 };
  CHECK_CU(cuMemsetD8(b + 5 * MiB - 4, 0x7e, 4));
  CHECK_CU(cuMemcpyDtoH(back, b + 5 * MiB - 4, 4));
  is(back[3], 0x7e, "a block's last bytes hold data");
  is(test_stats(m).held_bytes, 16 * MiB, "held: the whole slab, from creation");
  CHECK_CU(cuemm_free(m, a));
  CHECK_CU(cuemm_free_async(m, b, NULL));
  CHECK_CU(cuemm_pool_trim(m));
  is(pstats(m).mapped_bytes, 0, "trim: nothing in use");
  is(sim.calls("cuMemUnmap") + sim.calls("cuMemRelease"), 0, "and no cuMemUnmap or cuMemRelease");
  is(cuemm_pool_grant_access(m, 0), CUDA_SUCCESS, "granting the owning device does nothing");
  is(cuemm_pool_grant_access(m, 1), CUDA_ERROR_NOT_SUPPORTED, "a peer is refused: cuMemSetAccess does not apply");
  CHECK_CU(cuemm_destroy(m));
  is(sim.calls("cuMemFree_v2") + sim.calls("cuMemFree"), 1, "destruction frees the slab, one cuMemFree");
  c.pool_ipc = 1;
  m = NULL;
  is(cuemm_manager_create(NULL, &c, &m), CUDA_ERROR_INVALID_VALUE, "a slab with CUEMM_POOL_IPC=1 is refused");
  like(cuemm_last_error(), "CUEMM_POOL_SLAB=1 and CUEMM_POOL_IPC=1 do not go together", "saying why");
}

/* Maps one chunk of `bytes` into an empty pool that keeps what it maps
 * (a threshold above it), free: an allocation of that size, freed. */
static void pregrow(cuemm_manager *m, size_t bytes)
{
  CUdeviceptr p;
  CHECK_CU(cuemm_allocate(m, bytes, &p));
  CHECK_CU(cuemm_free(m, p));
  CHECK_CU(cuemm_flush(m));
}

static int near(double got, double want)
{
  return got - want < 1e-12 && want - got < 1e-12;
}

/* cuemm_pool_stats.fragmentation measures the free space, not the blocks
 * it is cut into: cached blocks side by side are one free extent. */
static void fragmentation(void)
{
  cuemm_config c = pool_config(32 * MiB, 256 * MiB, (size_t)1 << 40, 0, 0); /* every free flushes */
  cuemm_manager *m = NULL;
  CHECK_CU(cuemm_manager_create(NULL, &c, &m));
  pregrow(m, 32 * MiB);
  CUdeviceptr v[64];
  for (int i = 0; i < 60; i++)
    CHECK_CU(cuemm_allocate(m, 4096, &v[i]));
  for (int i = 60; i < 64; i++)
    CHECK_CU(cuemm_allocate(m, 32 * 1024, &v[i])); /* large ones the pool caches by size (below CUEMM__SA_LOW_FIT) */
  for (int i = 0; i < 64; i++)
    CHECK_CU(cuemm_free(m, v[i]));
  cuemm_pool_stats ps = pstats(m);
  ok(ps.chunks == 1 && ps.used_bytes == 0 && ps.free_bytes == 32 * MiB, "one chunk, wholly free (%zu used)",
     ps.used_bytes);
  ok(ps.free_blocks > 2 && ps.largest_free_block < ps.free_bytes,
     "in %zu blocks, cached unmerged (largest %zu bytes)", ps.free_blocks, ps.largest_free_block);
  ok(ps.fragmentation == 0.0, "fragmentation 0: the free space is one run of addresses (%g)", ps.fragmentation);
  FILE *f = tmpfile();
  CHECK_CU(cuemm_stats_print(m, f));
  char text[4096] = "";
  rewind(f);
  text[fread(text, 1, sizeof text - 1, f)] = '\0';
  fclose(f);
  like(text, "fragmentation 0.00;", "and the statistics table says so");
  CHECK_CU(cuemm_destroy(m));

  /* Free space apart: 4 MiB blocks, every other one freed. */
  CHECK_CU(cuemm_manager_create(NULL, &c, &m));
  pregrow(m, 32 * MiB);
  for (int i = 0; i < 8; i++)
    CHECK_CU(cuemm_allocate(m, 4 * MiB, &v[i]));
  ps = pstats(m);
  ok(ps.chunks == 1 && ps.free_bytes == 0, "32 MiB in eight blocks fill one chunk");
  for (int i = 0; i < 8; i += 2)
    CHECK_CU(cuemm_free(m, v[i]));
  ps = pstats(m);
  ok(ps.free_bytes == 16 * MiB && near(ps.fragmentation, 0.75),
     "16 MiB free in four runs of 4 MiB: fragmentation 1 - 4/16 = 0.75 (%g)", ps.fragmentation);
  CHECK_CU(cuemm_free(m, v[1]));
  ps = pstats(m);
  ok(ps.free_bytes == 20 * MiB && near(ps.fragmentation, 0.4),
     "block 1 freed joins blocks 0 and 2 into 12 MiB: 1 - 12/20 = 0.4 (%g)", ps.fragmentation);
  for (int i = 3; i < 8; i += 2)
    CHECK_CU(cuemm_free(m, v[i]));
  ps = pstats(m);
  ok(ps.free_bytes == 32 * MiB && ps.fragmentation == 0.0, "all freed: 0 (%g)", ps.fragmentation);
  CHECK_CU(cuemm_destroy(m));
}

/* cuemm_get_held: what cuemm_get_stats says is held, without the lock, as
 * the pool grows, a fallback allocation comes and goes, and a trim gives
 * memory back. */
static void held_gauge(void)
{
  cuemm_manager *m = make_pool(32 * MiB, 64 * MiB, 0, 0, 1000);
  size_t held = 1;
  CHECK_CU(cuemm_get_held(m, &held));
  is(held, 0, "cuemm_get_held: nothing held at creation");
  CUdeviceptr a = 0, big = 0;
  CHECK_CU(cuemm_allocate(m, 3 * MiB, &a));
  CHECK_CU(cuemm_get_held(m, &held));
  ok(held == pstats(m).mapped_bytes && held == test_stats(m).held_bytes && held >= 3 * MiB,
     "after a growth: the pool's mapped bytes, as cuemm_get_stats says (%zu)", held);
  CHECK_CU(cuemm_allocate(m, 80 * MiB, &big)); /* past the reservation: cuMemAlloc */
  CHECK_CU(cuemm_get_held(m, &held));
  is(held, test_stats(m).held_bytes, "with a cuMemAlloc allocation beside the pool, as cuemm_get_stats says");
  ok(held >= pstats(m).mapped_bytes + 80 * MiB, "which counts it (%zu)", held);
  CHECK_CU(cuemm_free(m, a));
  CHECK_CU(cuemm_free(m, big));
  CHECK_CU(cuemm_pool_trim(m));
  CHECK_CU(cuemm_get_held(m, &held));
  is(held, 0, "after the frees and a trim: nothing held");
  CHECK_CU(cuemm_destroy(m));
}

int main(void)
{
  sim_init();
  test_primary_context(0);
  size_t live0 = sim_live_baseline();
  basics();
  randomized();
  release();
  queued_reuse();
  scopes();
  out_of_memory();
  faults();
  peers();
  threads();
  configuration();
  hysteresis();
  slab();
  fragmentation();
  held_gauge();
  sim_check_nothing_left(live0);
  test_release_primary(0);
  return tap_done();
}
