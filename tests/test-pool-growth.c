/* test-pool-growth.c: large growths of the pool made of pieces, and the
 * hard limit.
 *
 * The first two automatic large growths of the process (the per-device
 * record starts empty in a fresh process, so the choice does not depend on
 * any time measured: the guess, then the guess again, since no piece
 * below it is tried); a
 * pinned piece size counted in driver calls (one cuMemCreate and cuMemMap
 * per piece, one cuMemSetAccess per growth), data written across piece
 * boundaries read back, pieces released one by one; the k-th piece's
 * cuMemCreate or cuMemMap failing, the closing cuMemSetAccess failing, and
 * an unmap failing while undoing, each rolled back with nothing leaked; a
 * pool IPC export of a large block; the hard limit refusing with the
 * figures and no cuMemAlloc call, where the soft one falls back.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define MiB ((size_t)1 << 20)

static cuemm_config growth_config(size_t chunk, size_t reserve, size_t piece)
{
  cuemm_config c = test_config(1000, 1.0);
  c.pool = CUEMM_POOL_VMM;
  c.pool_chunk = chunk;
  c.pool_reserve = reserve;
  c.pool_release_threshold = (size_t)1 << 40;
  c.pool_piece = piece;
  return c;
}

static cuemm_manager *make(const cuemm_config *c)
{
  cuemm_manager *m = NULL;
  CHECK_CU(cuemm_manager_create(NULL, c, &m));
  return m;
}

static cuemm_pool_stats pstats(cuemm_manager *m)
{
  cuemm_pool_stats s;
  CHECK_CU(cuemm_pool_get_stats(m, &s));
  return s;
}

static void reset_calls(void)
{
  if (sim_present)
    sim.calls_reset();
}

/* One check of the driver calls a growth made, or a skip. */
static void check_calls(unsigned long creates, unsigned long maps, unsigned long access, const char *what)
{
  if (!sim_present) {
    skip(1, SIM_REASON);
    return;
  }
  unsigned long c = sim.calls("cuMemCreate"), mp = sim.calls("cuMemMap"), a = sim.calls("cuMemSetAccess");
  ok(c == creates && mp == maps && a == access, "%s: %lu cuMemCreate, %lu cuMemMap, %lu cuMemSetAccess "
     "(want %lu, %lu, %lu)", what, c, mp, a, creates, maps, access);
}

/* ---- the first automatic growths of the process -------------------------------- */

static void automatic(void)
{
  cuemm_config c = growth_config(4 * MiB, 1024 * MiB, 0);
  cuemm_manager *m = make(&c);
  cuemm_pool_stats s = pstats(m);
  ok(s.piece_pinned == 0 && s.piece_bytes == 0, "automatic, no growth yet");
  is(s.piece_samples[8], 0, "nothing measured on the device yet");

  CUdeviceptr p;
  reset_calls();
  CHECK_CU(cuemm_allocate(m, 600 * MiB, &p));
  s = pstats(m);
  is(s.piece_bytes, 512 * MiB, "600 MiB, nothing measured: the largest piece up to the guess (4 GiB) that fits, 512 MiB");
  ok(s.chunks == 2 && s.mapped_bytes == 600 * MiB, "two chunks, 512 + 88 MiB (%zu chunks, %zu bytes)", s.chunks,
     s.mapped_bytes);
  check_calls(2, 2, 1, "first growth");
  is(s.piece_samples[8], 1, "the 512 MiB piece was timed (class 8)");
  ok(s.piece_cost_us[8] > 0, "at %.1f us", s.piece_cost_us[8]);
  is(s.piece_samples[5], 0, "the 88 MiB rest was not (class 5)");

  CHECK_CU(cuemm_free(m, p));
  CHECK_CU(cuemm_pool_trim(m));
  is(pstats(m).mapped_bytes, 0, "trimmed");
  reset_calls();
  CHECK_CU(cuemm_allocate(m, 600 * MiB, &p));
  s = pstats(m);
  is(s.piece_bytes, 512 * MiB, "the next: the guess's piece again (nothing below the guess is tried), 512 MiB");
  is(s.chunks, 2, "two chunks, 512 + 88 MiB");
  check_calls(2, 2, 1, "second growth");
  ok(s.piece_samples[8] == 1 && s.piece_samples[7] == 0, "the trim released memory just before: the 512 MiB piece "
     "made but not timed again (the driver may hand back what was released), no 256 MiB piece made");
  CHECK_CU(cuMemsetD32(p + 511 * MiB, 0x5a5a5a5a, 2 * MiB / 4));
  uint32_t w[2];
  CHECK_CU(cuMemcpyDtoH(w, p + 512 * MiB - 4, 8));
  ok(w[0] == 0x5a5a5a5a && w[1] == 0x5a5a5a5a, "a memset over the pieces reaches both sides of a boundary");
  CHECK_CU(cuemm_free(m, p));
  CHECK_CU(cuemm_destroy(m));
}

/* ---- the size of a growth ------------------------------------------------------ */

/* Fills the pool's free space with one block, then asks for 256 bytes more,
 * which grows the pool; returns the bytes mapped after that growth. */
static size_t grow_once(cuemm_manager *m, CUdeviceptr *fill, CUdeviceptr *small)
{
  cuemm_pool_stats s = pstats(m);
  *fill = 0;
  if (s.free_bytes)
    CHECK_CU(cuemm_allocate(m, s.free_bytes, fill));
  CHECK_CU(cuemm_allocate(m, 256, small));
  return pstats(m).mapped_bytes;
}

/* The pool's mapped bytes after each growth from empty, each forced by a
 * request of 256 bytes when no byte is free: an empty pool maps one granule
 * (2 MiB on simcuda and an H100), and a growth ends at the next multiple of
 * the step, an eighth of the mapped bytes rounded up to the granule, at
 * most CUEMM_POOL_CHUNK. */
static void steps(void)
{
  static const unsigned want32[] = { 2,  4,  6,  8,   10,  12,  14,  16,  18,  20,  24,  28,  32,  36,
                                     42, 48, 54, 56,  64,  72,  80,  90,  96,  108, 112, 126, 128, 144,
                                     162, 176, 198, 208, 234, 240, 270, 288, 320, 352, 384, 416 };
  enum { N32 = sizeof want32 / sizeof want32[0] };
  static const unsigned want8[] = { 2,  4,  6,  8,  10, 12, 14, 16, 18, 20, 24, 28,
                                    32, 36, 42, 48, 54, 56, 64, 72, 80, 88, 96, 104 };
  enum { N8 = sizeof want8 / sizeof want8[0] };
  CUdeviceptr v[2 * N32 + 4];
  size_t nv = 0;

  cuemm_config c = growth_config(32 * MiB, 2048 * MiB, 0);
  cuemm_manager *m = make(&c);
  cuemm_pool_stats s = pstats(m);
  if (s.granularity != 2 * MiB) {
    skip(8, "the device's granularity is not 2 MiB");
    CHECK_CU(cuemm_destroy(m));
    return;
  }
  is(s.chunk_bytes, 32 * MiB, "chunk_bytes says the largest step, CUEMM_POOL_CHUNK");
  reset_calls();
  char got[512] = "";
  int same = 1;
  for (size_t i = 0; i < N32; i++) {
    size_t mapped = grow_once(m, &v[nv], &v[nv + 1]);
    nv += v[nv] ? 2 : 1;
    if (!v[nv - 1])
      v[nv - 1] = v[nv];
    same &= mapped == (size_t)want32[i] * MiB;
    snprintf(got + strlen(got), sizeof got - strlen(got), " %zu", mapped / MiB);
  }
  ok(same, "mapped MiB after each growth from empty, chunk 32 MiB:%s", got);
  s = pstats(m);
  ok(s.grow_steps == N32 && s.chunks == N32, "one chunk a growth (%llu steps, %zu chunks)",
     (unsigned long long)s.grow_steps, s.chunks);
  check_calls(N32, N32, N32, "a cuMemCreate, a cuMemMap and a cuMemSetAccess a growth");
  CUdeviceptr fill = 0, big;
  if (s.free_bytes)
    CHECK_CU(cuemm_allocate(m, s.free_bytes, &fill));
  CHECK_CU(cuemm_allocate(m, 100 * MiB, &big));
  is(pstats(m).mapped_bytes, 544 * MiB, "100 MiB at 416 MiB mapped: up to the next multiple of 32 MiB, 544 MiB");
  CHECK_CU(cuemm_free(m, big));
  if (fill)
    CHECK_CU(cuemm_free(m, fill));
  for (size_t i = 0; i < nv; i++)
    if (v[i])
      CHECK_CU(cuemm_free(m, v[i]));
  CHECK_CU(cuemm_destroy(m));

  /* CUEMM_POOL_CHUNK caps the step. */
  c = growth_config(8 * MiB, 1024 * MiB, 0);
  m = make(&c);
  got[0] = '\0';
  same = 1;
  nv = 0;
  for (size_t i = 0; i < N8; i++) {
    CUdeviceptr f, t;
    size_t mapped = grow_once(m, &f, &t);
    if (f)
      v[nv++] = f;
    v[nv++] = t;
    same &= mapped == (size_t)want8[i] * MiB;
    snprintf(got + strlen(got), sizeof got - strlen(got), " %zu", mapped / MiB);
  }
  ok(same, "chunk 8 MiB: the step stops at 8 MiB (80 MiB mapped grows by 8, not 10):%s", got);
  for (size_t i = 0; i < nv; i++)
    CHECK_CU(cuemm_free(m, v[i]));
  CHECK_CU(cuemm_destroy(m));

  /* With pool IPC every growth is a whole CUEMM_POOL_CHUNK, so that a
   * block spans few chunks (an IPC handle lists at most six). */
  c = growth_config(4 * MiB, 1024 * MiB, 0);
  c.pool_ipc = 1;
  m = make(&c);
  CUdeviceptr p;
  CHECK_CU(cuemm_allocate(m, 256, &p));
  s = pstats(m);
  ok(s.mapped_bytes == 4 * MiB && s.chunks == 1, "pool IPC: 256 bytes map a whole chunk of 4 MiB (%zu bytes)",
     s.mapped_bytes);
  CHECK_CU(cuemm_free(m, p));
  CHECK_CU(cuemm_destroy(m));
}

/* ---- a pinned piece size ------------------------------------------------------- */

static void pinned(void)
{
  cuemm_config c = growth_config(4 * MiB, 1024 * MiB, 64 * MiB);
  cuemm_manager *m = make(&c);
  CUdeviceptr p;
  reset_calls();
  CHECK_CU(cuemm_allocate(m, 600 * MiB, &p));
  cuemm_pool_stats s = pstats(m);
  ok(s.piece_pinned == 64 * MiB && s.piece_bytes == 64 * MiB, "CUEMM_POOL_PIECE=64MiB: pieces of 64 MiB");
  ok(s.chunks == 10 && s.chunks_mapped == 10 && s.grow_steps == 1 && s.mapped_bytes == 600 * MiB,
     "600 MiB in one step of 10 chunks, 9 x 64 + 24 MiB (chunks %zu, steps %llu)", s.chunks,
     (unsigned long long)s.grow_steps);
  check_calls(10, 10, 1, "pinned growth");
  is(p, s.base, "the block starts the reservation");

  /* A window across each boundary, each with its own pattern, all written
   * before any is read back. */
  enum { WIN = 256 * 1024, NB = 9 };
  uint32_t *buf = malloc(WIN * 2), *back = malloc(WIN * 2);
  for (int k = 1; k <= NB; k++) {
    for (size_t i = 0; i < WIN * 2 / 4; i++)
      buf[i] = (uint32_t)(i * 2654435761u) ^ (uint32_t)k;
    CHECK_CU(cuMemcpyHtoD(p + (size_t)k * 64 * MiB - WIN, buf, WIN * 2));
  }
  int good = 1;
  for (int k = 1; k <= NB; k++) {
    CHECK_CU(cuMemcpyDtoH(back, p + (size_t)k * 64 * MiB - WIN, WIN * 2));
    for (size_t i = 0; i < WIN * 2 / 4; i++)
      good &= back[i] == ((uint32_t)(i * 2654435761u) ^ (uint32_t)k);
  }
  ok(good, "data written across the 9 piece boundaries reads back");
  free(buf);
  free(back);

  CHECK_CU(cuemm_free(m, p));
  CHECK_CU(cuemm_flush(m));
  reset_calls();
  CHECK_CU(cuemm_pool_trim(m));
  s = pstats(m);
  ok(s.mapped_bytes == 0 && s.chunks == 0 && s.chunks_released == 10, "a trim releases the 10 pieces");
  if (sim_present)
    ok(sim.calls("cuMemUnmap") == 10 && sim.calls("cuMemRelease") == 10, "one cuMemUnmap and cuMemRelease each");
  else
    skip(1, SIM_REASON);

  /* A growth no larger than the piece is one piece. */
  reset_calls();
  CHECK_CU(cuemm_allocate(m, 40 * MiB, &p));
  ok(pstats(m).chunks == 1 && pstats(m).piece_bytes == 40 * MiB, "40 MiB: one piece");
  check_calls(1, 1, 1, "small growth");
  CHECK_CU(cuemm_free(m, p));
  CHECK_CU(cuemm_destroy(m));

  c = growth_config(4 * MiB, 1024 * MiB, 5 * MiB);
  m = NULL;
  is(cuemm_manager_create(NULL, &c, &m), CUDA_ERROR_INVALID_VALUE, "a piece that is not a multiple of the granularity");
  like(cuemm_last_error(), "CUEMM_POOL_PIECE (cuemm_config.pool_piece) = 5242880 bytes is not a multiple of "
       "device 0's allocation granularity", "the message names the knob, its value and the granularity");
  ok(m == NULL, "and nothing is created");
}

/* ---- rollback ------------------------------------------------------------------ */

static void rollback(void)
{
  enum { CHECKS = 52 };
  if (!sim_present) {
    skip(CHECKS, SIM_REASON);
    return;
  }
  size_t live0 = sim.live_count();
  cuemm_config c = growth_config(4 * MiB, 1024 * MiB, 64 * MiB);
  static const struct {
    const char *call;
    unsigned nth;
    unsigned long creates, maps, unmaps, releases;
  } cases[] = {
    { "cuMemCreate", 4, 4, 3, 3, 3 },     /* three pieces made before the fourth fails */
    { "cuMemMap", 4, 4, 4, 3, 4 },        /* the fourth created, not mapped */
    { "cuMemCreate", 10, 10, 9, 9, 9 },   /* the last, short piece */
    { "cuMemSetAccess", 1, 10, 10, 10, 10 },
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    cuemm_manager *m = make(&c);
    CUdeviceptr p = 0;
    sim.calls_reset();
    sim.fail(cases[k].call, cases[k].nth, CUDA_ERROR_UNKNOWN);
    is(cuemm_allocate(m, 600 * MiB, &p), CUDA_ERROR_UNKNOWN, "%s failing on call %u fails the growth", cases[k].call,
       cases[k].nth);
    like(cuemm_last_error(), cases[k].call, "naming the call");
    ok(sim.calls("cuMemCreate") == cases[k].creates && sim.calls("cuMemMap") == cases[k].maps &&
       sim.calls("cuMemUnmap") == cases[k].unmaps && sim.calls("cuMemRelease") == cases[k].releases,
       "every piece made is undone: create %lu, map %lu, unmap %lu, release %lu", sim.calls("cuMemCreate"),
       sim.calls("cuMemMap"), sim.calls("cuMemUnmap"), sim.calls("cuMemRelease"));
    cuemm_pool_stats s = pstats(m);
    ok(s.mapped_bytes == 0 && s.chunks == 0 && s.used_bytes == 0 && s.grow_failures == 1 && s.chunks_mapped == 0,
       "the pool is as before (mapped %zu, chunks %zu)", s.mapped_bytes, s.chunks);
    simcuda_live l;
    sim.live_get(&l);
    is(l.vmm_handles + l.vmm_mappings, 0, "nothing left in the driver");
    is(cuemm_allocate(m, 600 * MiB, &p), CUDA_SUCCESS, "the next allocation grows the pool");
    is(pstats(m).chunks, 10, "in 10 pieces");
    CHECK_CU(cuemm_free(m, p));
    CHECK_CU(cuemm_destroy(m));
    is(sim.live_count(), live0, "after %s: nothing left after destroy", cases[k].call);
  }

  /* Undoing fails too: the second piece cannot be unmapped, and stays,
   * out of use, until the manager goes. */
  cuemm_manager *m = make(&c);
  CUdeviceptr p = 0;
  sim.fail("cuMemSetAccess", 1, CUDA_ERROR_UNKNOWN);
  sim.fail("cuMemUnmap", 2, CUDA_ERROR_UNKNOWN);
  is(cuemm_allocate(m, 600 * MiB, &p), CUDA_ERROR_UNKNOWN, "cuMemSetAccess failing, then one cuMemUnmap");
  like(cuemm_last_error(), "cuMemUnmap failed too", "the message says so");
  cuemm_pool_stats s = pstats(m);
  ok(s.mapped_bytes == 64 * MiB && s.chunks == 1 && s.used_bytes == 64 * MiB && s.free_bytes == 0,
     "that piece stays, counted and never handed out (mapped %zu, chunks %zu, used %zu)", s.mapped_bytes, s.chunks,
     s.used_bytes);
  simcuda_live l;
  sim.live_get(&l);
  ok(l.vmm_handles == 1 && l.vmm_mappings == 1, "one handle and one mapping left (%zu, %zu)", l.vmm_handles,
     l.vmm_mappings);
  is(cuemm_allocate(m, 128 * MiB, &p), CUDA_SUCCESS, "the pool still grows around it");
  ok(p != s.base + 64 * MiB, "elsewhere");
  CHECK_CU(cuemm_free(m, p));
  CHECK_CU(cuemm_destroy(m));
  is(sim.live_count(), live0, "destroy releases it");

  /* Undoing fails at the release: the handle is kept, and released by the
   * next release of pool memory, or else by destroy. */
  for (int by_trim = 1; by_trim >= 0; by_trim--) {
    m = make(&c);
    sim.fail("cuMemMap", 2, CUDA_ERROR_UNKNOWN);
    sim.fail("cuMemRelease", 2, CUDA_ERROR_UNKNOWN);
    is(cuemm_allocate(m, 600 * MiB, &p), CUDA_ERROR_UNKNOWN, "cuMemMap failing, then one cuMemRelease");
    like(cuemm_last_error(), "cuMemRelease failed too: the pool keeps the handle (67108864 bytes)",
         "the message says the handle is kept");
    sim.live_get(&l);
    ok(l.vmm_handles == 1 && l.vmm_mappings == 0, "one handle left, unmapped (%zu, %zu)", l.vmm_handles,
       l.vmm_mappings);
    s = pstats(m);
    ok(s.mapped_bytes == 0 && s.chunks == 0, "the pool maps nothing (mapped %zu, chunks %zu)", s.mapped_bytes,
       s.chunks);
    if (by_trim) {
      sim.calls_reset();
      is(cuemm_pool_trim(m), CUDA_SUCCESS, "a trim");
      is(sim.calls("cuMemRelease"), 1, "releases the kept handle");
      sim.live_get(&l);
      is(l.vmm_handles, 0, "and no handle is left");
    }
    CHECK_CU(cuemm_destroy(m));
    is(sim.live_count(), live0, by_trim ? "nothing left after destroy" : "destroy releases the kept handle");
  }
}

/* ---- IPC ----------------------------------------------------------------------- */

static void ipc(void)
{
  cuemm_config c = growth_config(4 * MiB, 1024 * MiB, 0);
  c.pool_ipc = 1;
  cuemm_manager *m = NULL;
  if (cuemm_manager_create(NULL, &c, &m) == CUDA_ERROR_NOT_SUPPORTED) {
    skip(2, "the device cannot export memory as POSIX file descriptors");
    return;
  }
  CUdeviceptr p;
  CHECK_CU(cuemm_allocate(m, 900 * MiB, &p));
  cuemm_pool_stats s = pstats(m);
  ok(s.chunks >= 1 && s.chunks <= 4, "with IPC a growth is at most 4 pieces (%zu of %zu bytes)", s.chunks,
     s.piece_bytes);
  cuemm_ipc_handle h;
  CUresult r = cuemm_ipc_export(m, p, 0, &h);
  ok(r == CUDA_SUCCESS && h.kind == CUEMM_IPC_KIND_POOL && h.pieces.count == s.chunks,
     "so the block exports (%d, %u chunks: %s)", (int)r, (unsigned)h.pieces.count, r ? cuemm_last_error() : "");
  CHECK_CU(cuemm_free(m, p));
  CHECK_CU(cuemm_destroy(m));
}

/* ---- the hard limit ------------------------------------------------------------ */

static void hard_limit(void)
{
  cuemm_config c = growth_config(4 * MiB, 256 * MiB, 0);
  c.pool_limit = 64 * MiB;
  c.pool_limit_hard = 1;
  cuemm_manager *m = make(&c);
  ok(pstats(m).limit_hard == 1 && pstats(m).limit_bytes == 64 * MiB, "a hard limit of 64 MiB");
  CUdeviceptr a, b = 0;
  CHECK_CU(cuemm_allocate(m, 40 * MiB, &a));
  reset_calls();
  is(cuemm_allocate(m, 100 * MiB, &b), CUDA_ERROR_OUT_OF_MEMORY, "a request larger than the limit is refused");
  const char *msg = cuemm_last_error();
  like(msg, "104857600 bytes requested", "the message names the size");
  like(msg, "hard limit (CUEMM_POOL_LIMIT, 67108864 bytes, with CUEMM_POOL_LIMIT_HARD=1", "the limit");
  like(msg, "41943040 bytes mapped, 41943040 used, largest free block 0 bytes", "mapped, used, largest free block");
  ok(b == 0, "p untouched");
  is(sim_calls("cuMemAlloc"), 0, "no cuMemAlloc");
  cuemm_pool_stats s = pstats(m);
  is(s.fallback_allocs, 0, "no fallback");
  is(test_stats(m).alloc_failures, 1, "one failure counted");

  is(cuemm_allocate(m, 40 * MiB, &b), CUDA_ERROR_OUT_OF_MEMORY, "a request that would pass the limit is refused");
  msg = cuemm_last_error();
  like(msg, "out of pool memory for 41943040 bytes (41943040 bytes mapped, 41943040 used, largest free block 0 "
       "bytes)", "the message names size, mapped, used, largest free block");
  like(msg, "passing its hard limit (CUEMM_POOL_LIMIT, 67108864 bytes)", "and the limit");
  is(test_stats(m).oom_retries, 1, "after the flush and retry");
  is(sim_calls("cuMemAlloc"), 0, "no cuMemAlloc either");
  CHECK_CU(cuemm_free(m, a));
  CHECK_CU(cuemm_destroy(m));

  /* The same from the environment. */
  setenv("CUEMM_POOL", "vmm", 1);
  setenv("CUEMM_POOL_LIMIT", "64M", 1);
  setenv("CUEMM_POOL_LIMIT_HARD", "1", 1);
  CHECK_CU(cuemm_manager_create(NULL, NULL, &m));
  reset_calls();
  is(cuemm_allocate(m, 100 * MiB, &b), CUDA_ERROR_OUT_OF_MEMORY, "CUEMM_POOL_LIMIT_HARD=1: refused");
  is(sim_calls("cuMemAlloc"), 0, "no cuMemAlloc");
  CHECK_CU(cuemm_destroy(m));
  unsetenv("CUEMM_POOL");
  unsetenv("CUEMM_POOL_LIMIT");
  unsetenv("CUEMM_POOL_LIMIT_HARD");

  /* The soft default: the same request goes to cuMemAlloc. */
  c.pool_limit_hard = 0;
  m = make(&c);
  reset_calls();
  is(cuemm_allocate(m, 100 * MiB, &b), CUDA_SUCCESS, "with a soft limit the request is served");
  s = pstats(m);
  ok(b < s.base || b >= s.base + s.reserved_bytes, "outside the pool");
  is(s.fallback_allocs, 1, "by the fallback");
  if (sim_present)
    is(sim.calls("cuMemAlloc"), 1, "one cuMemAlloc");
  else
    skip(1, SIM_REASON);
  CHECK_CU(cuemm_free(m, b));
  CHECK_CU(cuemm_destroy(m));
}

int main(void)
{
  sim_init();
  test_primary_context(0);
  size_t live0 = sim_live_baseline();
  automatic(); /* first: it needs the device's record empty */
  steps();
  pinned();
  rollback();
  ipc();
  hard_limit();
  sim_check_nothing_left(live0);
  test_release_primary(0);
  return tap_done();
}
