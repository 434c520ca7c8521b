/* test-suspend.c: cuemm_pool_suspend and cuemm_pool_resume: contents kept
 * byte for byte at the same addresses, memory given back, the calls refused
 * while suspended, a failure of every driver call of both (nothing lost,
 * nothing leaked, a retry succeeds), out of memory at resumption, threads
 * allocating while another suspends, two managers on one context (the
 * context's and secondary ones), and the refusal of blocks sent to another
 * process.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#include "testutil.h"

#define MiB ((size_t)1 << 20)
#define KiB ((size_t)1 << 10)

static cuemm_manager *make_pool(size_t limit, int ipc)
{
  cuemm_config c = test_config(10, 1.0);
  c.pool = CUEMM_POOL_VMM;
  c.pool_chunk = 2 * MiB;
  c.pool_piece = 2 * MiB; /* several chunks per run, so that a step can fail halfway */
  c.pool_reserve = 512 * MiB;
  c.pool_release_threshold = 0;
  c.pool_release_delay_ms = 0;
  c.pool_limit = limit;
  c.pool_ipc = ipc;
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

static void fill(CUdeviceptr p, size_t n, unsigned seed)
{
  unsigned char *h = malloc(n);
  for (size_t i = 0; i < n; i++)
    h[i] = (unsigned char)(seed * 131u + i * 7u + (i >> 9));
  CHECK_CU(cuMemcpyHtoD(p, h, n));
  free(h);
}

/* Whether the n bytes at p hold fill's pattern for seed. */
static int holds(CUdeviceptr p, size_t n, unsigned seed)
{
  unsigned char *h = malloc(n);
  int same = cuMemcpyDtoH(h, p, n) == CUDA_SUCCESS;
  for (size_t i = 0; same && i < n; i++)
    same = h[i] == (unsigned char)(seed * 131u + i * 7u + (i >> 9));
  free(h);
  return same;
}

/* A set of live blocks over several chunks, with freed ones between. */
enum { NB = 12 };
typedef struct blocks {
  CUdeviceptr p[NB];
  size_t n[NB];
  int live[NB];
} blocks;

static void make_blocks(cuemm_manager *m, blocks *b, CUstream s)
{
  for (int i = 0; i < NB; i++) {
    b->n[i] = i % 3 == 0 ? 3 * MiB + 512 : i % 3 == 1 ? 64 * KiB : 700 * KiB;
    if (i % 2)
      CHECK_CU(cuemm_allocate_async(m, b->n[i], s, &b->p[i]));
    else
      CHECK_CU(cuemm_allocate(m, b->n[i], &b->p[i]));
    fill(b->p[i], b->n[i], (unsigned)i + 1);
    b->live[i] = 1;
  }
  CHECK_CU(cuCtxSynchronize());
  /* Every fourth goes, so live runs are split. */
  for (int i = 2; i < NB; i += 4) {
    if (i % 2)
      CHECK_CU(cuemm_free_async(m, b->p[i], s));
    else
      CHECK_CU(cuemm_free(m, b->p[i]));
    b->live[i] = 0;
  }
}

static int blocks_intact(const blocks *b)
{
  for (int i = 0; i < NB; i++)
    if (b->live[i] && !holds(b->p[i], b->n[i], (unsigned)i + 1))
      return 0;
  return 1;
}

static void free_blocks(cuemm_manager *m, blocks *b, CUstream s)
{
  for (int i = 0; i < NB; i++)
    if (b->live[i]) {
      if (i % 2)
        CHECK_CU(cuemm_free_async(m, b->p[i], s));
      else
        CHECK_CU(cuemm_free(m, b->p[i]));
      b->live[i] = 0;
    }
}

static size_t vmm_bytes(void)
{
  simcuda_live l;
  if (!sim_present)
    return 0;
  sim.live_get(&l);
  return l.vmm_handle_bytes;
}

/* ---- the basic cycle ---------------------------------------------------------- */

static void test_cycle(void)
{
  size_t live0 = sim_live_baseline();
  cuemm_manager *m = make_pool(0, 0);
  CUstream s;
  CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  blocks b;
  make_blocks(m, &b, s);
  blocks before = b;
  cuemm_pool_stats p0 = pstats(m);
  if (sim_present)
    sim.calls_reset();
  is(cuemm_pool_suspend(m, CUEMM_SUSPEND_KEEP), CUDA_SUCCESS, "suspend with KEEP: %s", cuemm_last_error());
  cuemm_pool_stats p1 = pstats(m);
  is(p1.suspended, 1, "the statistics say suspended");
  is(p1.mapped_bytes, 0, "nothing mapped while suspended (%zu before)", p0.mapped_bytes);
  is(vmm_bytes(), 0, "simcuda: no physical memory held");
  ok(p1.suspended_need_bytes > 0 && p1.suspended_need_bytes <= p0.mapped_bytes, "resume needs %zu bytes (%zu mapped "
     "before)", p1.suspended_need_bytes, p0.mapped_bytes);
  size_t live_bytes = 0;
  for (int i = 0; i < NB; i++)
    live_bytes += b.live[i] ? ((b.n[i] + 255) & ~(size_t)255) : 0;
  ok(p1.kept_bytes >= live_bytes && p1.kept_bytes < live_bytes + NB * 512 * KiB,
     "kept %zu bytes of contents for %zu live bytes", p1.kept_bytes, live_bytes);
  if (sim_present) {
    ok(sim_calls("cuMemcpyDtoH") >= 1 && sim_calls("cuMemcpyDtoH") <= (unsigned long)NB,
       "copies by runs: %lu cuMemcpyDtoH", sim_calls("cuMemcpyDtoH"));
    is(sim_calls("cuCtxSynchronize") >= 1, 1, "the context was synchronized");
  } else
    skip(2, SIM_REASON);

  /* While suspended. */
  CUdeviceptr q = 0;
  is(cuemm_allocate(m, 4096, &q), CUDA_ERROR_ILLEGAL_STATE, "cuemm_alloc refused");
  like(cuemm_last_error(), "suspended", "the message says suspended: %s", cuemm_last_error());
  is(cuemm_allocate_async(m, 4096, s, &q), CUDA_ERROR_ILLEGAL_STATE, "cuemm_alloc_async refused");
  is(cuemm_allocate_async(m, 64 * KiB, s, &q), CUDA_ERROR_ILLEGAL_STATE, "cuemm_alloc_async refused (a cached size)");
  is(cuemm_allocate(m, 600 * MiB, &q), CUDA_ERROR_ILLEGAL_STATE, "a request beyond the pool refused");
  is(cuemm_pool_trim(m), CUDA_ERROR_ILLEGAL_STATE, "cuemm_pool_trim refused");
  int ndev = 0;
  cuDeviceGetCount(&ndev);
  if (ndev > 1)
    is(cuemm_pool_grant_access(m, 1), CUDA_ERROR_ILLEGAL_STATE, "cuemm_pool_grant_access refused");
  else
    skip(1, "cuemm_pool_grant_access while suspended: one device only (no peer to grant)");
  cuemm_ipc_handle ih;
  is(cuemm_ipc_export(m, b.p[0], 0, &ih), CUDA_ERROR_ILLEGAL_STATE, "cuemm_ipc_export refused");
  is(q, 0, "no pointer handed out");
  is(cuemm_pool_suspend(m, 0), CUDA_ERROR_ILLEGAL_STATE, "a second suspend refused");
  like(cuemm_last_error(), "suspended already", "and says so: %s", cuemm_last_error());
  /* A free is accepted: its contents are not restored. */
  is(cuemm_free(m, b.p[0]), CUDA_SUCCESS, "cuemm_free accepted while suspended");
  is(cuemm_free_async(m, b.p[1], s), CUDA_SUCCESS, "cuemm_free_async accepted while suspended");
  b.live[0] = b.live[1] = 0;
  CHECK_CU(cuemm_flush(m));
  cuemm_stats st;
  is(cuemm_get_stats(m, &st), CUDA_SUCCESS, "statistics work while suspended");
  cuemm_snapshot *snap = NULL;
  is(cuemm_snapshot_take(m, &snap), CUDA_SUCCESS, "a snapshot works while suspended");
  if (snap) {
    is(snap->pool.suspended, 1, "the snapshot says suspended");
    is(snap->pool.suspended_need_bytes, p1.suspended_need_bytes, "and the bytes resume needs");
    is(snap->nchunks, 0, "no chunk mapped");
    size_t nlive = 0;
    for (size_t i = 0; i < snap->nblocks; i++)
      nlive += snap->blocks[i].state == CUEMM_BLOCK_LIVE;
    ok(nlive >= NB - 3 - 2, "the live blocks are listed (%zu)", nlive);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cuemm_snapshot_write_json(snap, f);
    fclose(f);
    like(buf, "\"suspended\":true", "the JSON says suspended");
    free(buf);
    cuemm_snapshot_free(snap);
  }
  CUdeviceptr base = 0;
  size_t range = 0;
  is(cuemm_address_range(m, b.p[3] + 100, &base, &range), CUDA_SUCCESS, "the address range of a block "
     "works while suspended");
  ok(base == b.p[3] && range >= b.n[3], "and names the block (0x%llx, %zu bytes)", (unsigned long long)base, range);
  {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cuemm_stats_print(m, f);
    fclose(f);
    like(buf, "suspended   the pool's memory is released", "the statistics table says suspended: %s", buf);
    free(buf);
  }
  is(pstats(m).suspended, 1, "still suspended");

  if (sim_present)
    sim.calls_reset();
  is(cuemm_pool_resume(m), CUDA_SUCCESS, "resume: %s", cuemm_last_error());
  cuemm_pool_stats p2 = pstats(m);
  is(p2.suspended, 0, "not suspended after resume");
  is(p2.kept_bytes, 0, "no host copy left");
  is(p2.suspends, 1, "one suspension counted");
  is(p2.resumes, 1, "one resumption counted");
  if (sim_present)
    ok(sim_calls("cuMemSetAccess") >= 1 && sim_calls("cuMemSetAccess") <= sim_calls("cuMemCreate"),
       "access set by runs: %lu cuMemSetAccess for %lu cuMemCreate", sim_calls("cuMemSetAccess"),
       sim_calls("cuMemCreate"));
  else
    skip(1, SIM_REASON);
  int same = 1;
  for (int i = 0; i < NB; i++)
    same &= b.p[i] == before.p[i];
  ok(same, "addresses unchanged");
  ok(blocks_intact(&b), "every live block's contents intact");
  is(cuemm_pool_resume(m), CUDA_ERROR_ILLEGAL_STATE, "resume of a manager not suspended refused");
  like(cuemm_last_error(), "not suspended", "and says so");
  is(cuemm_allocate(m, 4096, &q), CUDA_SUCCESS, "allocation works again");
  is(cuemm_allocate_async(m, 64 * KiB, s, &q), CUDA_SUCCESS, "stream allocation works again");
  CHECK_CU(cuemm_free_async(m, q, s));

  /* Without KEEP: no copy at all. */
  if (sim_present)
    sim.calls_reset();
  is(cuemm_pool_suspend(m, 0), CUDA_SUCCESS, "suspend without KEEP");
  if (sim_present)
    is(sim_calls("cuMemcpyDtoH") + sim_calls("cuMemHostAlloc"), 0, "no copy and no host memory without KEEP");
  else
    skip(1, SIM_REASON);
  is(pstats(m).kept_bytes, 0, "nothing kept");
  is(cuemm_pool_resume(m), CUDA_SUCCESS, "resume");
  if (sim_present)
    is(sim_calls("cuMemcpyHtoD"), 0, "nothing copied back");
  else
    skip(1, SIM_REASON);

  /* Destroy while suspended, with contents kept: everything goes. */
  CHECK_CU(cuemm_pool_suspend(m, CUEMM_SUSPEND_KEEP));
  is(cuemm_destroy(m), CUDA_SUCCESS, "destroy of a suspended manager: %s", cuemm_last_error());
  CHECK_CU(cuStreamDestroy(s));
  sim_check_nothing_left(live0);
}

static void test_refusals(void)
{
  is(cuemm_pool_suspend(NULL, 0), CUDA_ERROR_INVALID_VALUE, "NULL manager");
  is(cuemm_pool_resume(NULL), CUDA_ERROR_INVALID_VALUE, "NULL manager (resume)");
  cuemm_config c = test_config(10, 1.0);
  cuemm_manager *m;
  CHECK_CU(cuemm_manager_create(NULL, &c, &m));
  is(cuemm_pool_suspend(m, 0), CUDA_ERROR_NOT_SUPPORTED, "a manager without a pool");
  like(cuemm_last_error(), "CUEMM_POOL=vmm", "the message says what is needed: %s", cuemm_last_error());
  is(cuemm_pool_resume(m), CUDA_ERROR_ILLEGAL_STATE, "resume of a manager without a pool");
  CHECK_CU(cuemm_destroy(m));
  c.pool = CUEMM_POOL_VMM;
  c.pool_slab = 1;
  c.pool_reserve = 64 * MiB;
  CHECK_CU(cuemm_manager_create(NULL, &c, &m));
  is(cuemm_pool_suspend(m, 0), CUDA_ERROR_NOT_SUPPORTED, "a slab pool");
  like(cuemm_last_error(), "CUEMM_POOL_SLAB", "the message names the slab: %s", cuemm_last_error());
  CHECK_CU(cuemm_destroy(m));
  m = make_pool(0, 0);
  is(cuemm_pool_suspend(m, 0x80), CUDA_ERROR_INVALID_VALUE, "unknown flags");
  is(pstats(m).suspended, 0, "not suspended by a refused call");
  CHECK_CU(cuemm_destroy(m));
}

/* ---- failures of each driver call ---------------------------------------------- */

typedef struct fault {
  const char *entry;
  unsigned nth;
  int at_resume;
  int suspended_after; /* what a failing suspend leaves */
} fault;

static void test_faults(void)
{
  if (!sim_present) {
    skip(1, SIM_REASON);
    return;
  }
  static const fault faults[] = {
    { "cuCtxSynchronize", 1, 0, 0 },
    { "cuMemHostAlloc", 1, 0, 0 },
    { "cuMemcpyDtoH", 1, 0, 0 },
    { "cuMemcpyDtoH", 2, 0, 0 },
    { "cuMemUnmap", 1, 0, 1 },
    { "cuMemUnmap", 2, 0, 1 },
    { "cuMemRelease", 1, 0, 1 },
    { "cuMemRelease", 3, 0, 1 },
    { "cuMemCreate", 1, 1, 1 },
    { "cuMemCreate", 2, 1, 1 },
    { "cuMemMap", 1, 1, 1 },
    { "cuMemMap", 2, 1, 1 },
    { "cuMemSetAccess", 1, 1, 1 },
    { "cuMemcpyHtoD", 1, 1, 1 },
    { "cuMemcpyHtoD", 2, 1, 1 },
  };
  for (size_t f = 0; f < sizeof faults / sizeof faults[0]; f++) {
    const fault *ft = &faults[f];
    size_t live0 = sim_live_baseline();
    cuemm_manager *m = make_pool(0, 0);
    CUstream s;
    CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    blocks b;
    make_blocks(m, &b, s);
    /* A first cycle, so the staging buffer exists when only the copy is to fail. */
    if (strcmp(ft->entry, "cuMemHostAlloc") != 0) {
      CHECK_CU(cuemm_pool_suspend(m, CUEMM_SUSPEND_KEEP));
      CHECK_CU(cuemm_pool_resume(m));
    }
    if (ft->at_resume)
      CHECK_CU(cuemm_pool_suspend(m, CUEMM_SUSPEND_KEEP));
    size_t pinned_before = 0;
    simcuda_live l;
    sim.live_get(&l);
    pinned_before = l.host_allocs;
    sim.fail(ft->entry, ft->nth, CUDA_ERROR_UNKNOWN);
    CUresult r = ft->at_resume ? cuemm_pool_resume(m) : cuemm_pool_suspend(m, CUEMM_SUSPEND_KEEP);
    sim.fail_clear();
    char msg[600];
    snprintf(msg, sizeof msg, "%s", cuemm_last_error());
    is(r, CUDA_ERROR_UNKNOWN, "%s #%u failing at %s: the call fails", ft->entry, ft->nth,
       ft->at_resume ? "resume" : "suspend");
    like(msg, ft->entry, "the message names %s: %s", ft->entry, msg);
    cuemm_pool_stats ps = pstats(m);
    is(ps.suspended, ft->suspended_after, "%s: suspended is %d after the failure", ft->entry, ft->suspended_after);
    if (ft->at_resume) {
      is(ps.mapped_bytes, 0, "%s: what the resumption mapped is released again", ft->entry);
      ok(ps.kept_bytes > 0, "%s: the contents stay in host memory", ft->entry);
      sim.live_get(&l);
      is(l.vmm_handle_bytes, 0, "%s: simcuda holds no physical memory of the pool", ft->entry);
    } else if (!ft->suspended_after) {
      CUdeviceptr q;
      is(cuemm_allocate(m, 4096, &q), CUDA_SUCCESS, "%s: the manager still serves", ft->entry);
      CHECK_CU(cuemm_free(m, q));
      ok(blocks_intact(&b), "%s: nothing lost", ft->entry);
    } else
      ok(ps.mapped_bytes > 0, "%s: the chunks it could not release are counted (%zu bytes)", ft->entry,
         ps.mapped_bytes);
    /* The retry. */
    if (ft->at_resume || ft->suspended_after) {
      if (!ft->at_resume && ft->nth == 1 && !strcmp(ft->entry, "cuMemUnmap"))
        is(cuemm_pool_suspend(m, CUEMM_SUSPEND_KEEP), CUDA_SUCCESS, "%s: a second suspend finishes: %s", ft->entry,
           cuemm_last_error());
      else
        pass("%s: resume straight away", ft->entry);
      is(cuemm_pool_resume(m), CUDA_SUCCESS, "%s: a retried resume succeeds: %s", ft->entry, cuemm_last_error());
    } else {
      is(cuemm_pool_suspend(m, CUEMM_SUSPEND_KEEP), CUDA_SUCCESS, "%s: a retried suspend succeeds", ft->entry);
      is(cuemm_pool_resume(m), CUDA_SUCCESS, "%s: and resume", ft->entry);
    }
    ok(blocks_intact(&b), "%s: every live block intact after the retry", ft->entry);
    is(pstats(m).suspended, 0, "%s: not suspended", ft->entry);
    sim.live_get(&l);
    ok(l.host_allocs <= pinned_before + 1, "%s: at most the one staging buffer pinned (%zu, %zu before)", ft->entry,
       l.host_allocs, pinned_before);
    free_blocks(m, &b, s);
    CHECK_CU(cuemm_destroy(m));
    CHECK_CU(cuStreamDestroy(s));
    sim_check_nothing_left(live0);
  }
}

/* A manager left half suspended (a chunk whose cuMemUnmap or cuMemRelease
 * failed) or half resumed is destroyed with nothing left behind. */
static void test_destroy_half(void)
{
  if (!sim_present) {
    skip(6, SIM_REASON);
    return;
  }
  static const char *const entries[] = { "cuMemUnmap", "cuMemRelease", "cuMemMap" };
  for (int e = 0; e < 3; e++) {
    size_t live0 = sim_live_baseline();
    cuemm_manager *m = make_pool(0, 0);
    CUstream s;
    CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    blocks b;
    make_blocks(m, &b, s);
    if (e == 2)
      CHECK_CU(cuemm_pool_suspend(m, CUEMM_SUSPEND_KEEP));
    sim.fail(entries[e], 2, CUDA_ERROR_UNKNOWN);
    CUresult r = e == 2 ? cuemm_pool_resume(m) : cuemm_pool_suspend(m, CUEMM_SUSPEND_KEEP);
    sim.fail_clear();
    is(r, CUDA_ERROR_UNKNOWN, "%s #2 fails the call", entries[e]);
    CHECK_CU(cuemm_destroy(m));
    CHECK_CU(cuStreamDestroy(s));
    is(sim.live_count(), live0, "destroyed after %s failed halfway: nothing left", entries[e]);
  }
}

/* Work queued before a suspension, on blocks freed on its stream before
 * or while suspended: after the resumption no block is handed out to
 * another stream while that work could still run (simcuda's detector, in
 * queue mode). */
static void test_no_early_reuse(void)
{
  size_t (*reuse_check)(CUstream, CUdeviceptr, size_t) =
      (size_t (*)(CUstream, CUdeviceptr, size_t))dlsym(RTLD_DEFAULT, "simcuda_reuse_check");
  const char *(*explain)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "simcuda_reuse_explain");
  if (!sim_present || !reuse_check || !explain || !sim.set_queue_mode) {
    skip(4, SIM_REASON);
    return;
  }
  size_t live0 = sim_live_baseline();
  cuemm_manager *m = make_pool(0, 0);
  CUstream a, b;
  CHECK_CU(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
  CHECK_CU(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
  sim.set_queue_mode(1);
  enum { N = 6 };
  CUdeviceptr p[N];
  for (int i = 0; i < N; i++) {
    CHECK_CU(cuemm_allocate_async(m, 64 * KiB, a, &p[i]));
    CHECK_CU(cuMemsetD8Async(p[i], (unsigned char)i, 64 * KiB, a));
  }
  for (int i = 0; i < N / 2; i++)
    CHECK_CU(cuemm_free_async(m, p[i], a)); /* its work still queued */
  is(cuemm_pool_suspend(m, CUEMM_SUSPEND_KEEP), CUDA_SUCCESS, "suspend with work queued on freed blocks");
  is(sim.queued_work(), 0, "the suspension ran the queued work (cuCtxSynchronize)");
  for (int i = N / 2; i < N; i++)
    CHECK_CU(cuemm_free_async(m, p[i], a)); /* freed while suspended */
  CHECK_CU(cuemm_pool_resume(m));
  size_t early = 0;
  CUdeviceptr q[N];
  for (int i = 0; i < N; i++) {
    CHECK_CU(cuemm_allocate_async(m, 64 * KiB, b, &q[i]));
    early += reuse_check(b, q[i], 64 * KiB);
  }
  is(early, 0, "no block reused early by another stream after the resumption: %s", explain());
  for (int i = 0; i < N; i++)
    CHECK_CU(cuemm_free_async(m, q[i], b));
  CHECK_CU(cuCtxSynchronize());
  sim.set_queue_mode(0);
  CHECK_CU(cuemm_stream_release(m, a));
  CHECK_CU(cuemm_stream_release(m, b));
  CHECK_CU(cuStreamDestroy(a));
  CHECK_CU(cuStreamDestroy(b));
  CHECK_CU(cuemm_destroy(m));
  sim_check_nothing_left(live0);
}

/* ---- out of memory at resumption ----------------------------------------------- */

static void test_oom(void)
{
  size_t live0 = sim_live_baseline();
  cuemm_manager *m = make_pool(0, 0);
  CUstream s;
  CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  blocks b;
  make_blocks(m, &b, s);
  CHECK_CU(cuemm_pool_suspend(m, CUEMM_SUSPEND_KEEP));
  size_t need = pstats(m).suspended_need_bytes;
  size_t fr = 0, total = 0;
  CHECK_CU(cuMemGetInfo(&fr, &total));
  /* Another allocation takes all but a little.  (A real driver may not
   * hand out every byte it calls free: smaller until one fits.) */
  CUdeviceptr hog = 0;
  size_t hog_bytes = fr - need / 2;
  while (cuMemAlloc(&hog, hog_bytes) != CUDA_SUCCESS && hog_bytes > 64 * MiB)
    hog_bytes -= 64 * MiB;
  CHECK_CU(cuMemGetInfo(&fr, &total));
  if (!hog || fr >= need) {
    skip(9, "the device kept %zu bytes free past another allocation; resume needs %zu", fr, need);
    if (hog)
      CHECK_CU(cuMemFree(hog));
    CHECK_CU(cuemm_pool_resume(m));
    free_blocks(m, &b, s);
    CHECK_CU(cuemm_destroy(m));
    CHECK_CU(cuStreamDestroy(s));
    return;
  }
  CUresult r = cuemm_pool_resume(m);
  is(r, CUDA_ERROR_OUT_OF_MEMORY, "resume without the memory: out of memory");
  char want[64];
  snprintf(want, sizeof want, "%zu bytes needed", need);
  like(cuemm_last_error(), want, "the message gives the bytes needed: %s", cuemm_last_error());
  like(cuemm_last_error(), "free of", "and the free bytes");
  is(pstats(m).suspended, 1, "the manager stays suspended");
  ok(pstats(m).kept_bytes > 0, "its contents stay in host memory");
  is(pstats(m).mapped_bytes, 0, "nothing stays mapped");
  CHECK_CU(cuMemFree(hog));
  is(cuemm_pool_resume(m), CUDA_SUCCESS, "resume once the memory is free");
  ok(blocks_intact(&b), "contents intact");
  free_blocks(m, &b, s);
  CHECK_CU(cuemm_destroy(m));
  CHECK_CU(cuStreamDestroy(s));
  sim_check_nothing_left(live0);
}

/* ---- the pool's rules after a resumption --------------------------------------- */

static void test_limits(void)
{
  size_t live0 = sim_live_baseline();
  cuemm_manager *m = make_pool(32 * MiB, 0);
  CUdeviceptr big, a, c2;
  CHECK_CU(cuemm_allocate(m, 40 * MiB, &big)); /* past the limit: cuMemAlloc */
  fill(big, 40 * MiB, 77);
  CHECK_CU(cuemm_allocate(m, 8 * MiB, &a));
  fill(a, 8 * MiB, 5);
  CHECK_CU(cuemm_allocate(m, 8 * MiB, &c2));
  simcuda_live l0, l1;
  if (sim_present)
    sim.live_get(&l0);
  CHECK_CU(cuemm_pool_suspend(m, CUEMM_SUSPEND_KEEP));
  if (sim_present) {
    sim.live_get(&l1);
    is(l1.device_allocs, l0.device_allocs, "a block beyond the pool keeps its cuMemAlloc memory");
  } else
    skip(1, SIM_REASON);
  ok(holds(big, 40 * MiB, 77), "and its contents, without a copy");
  ok(pstats(m).kept_bytes < 40 * MiB, "the block beyond the pool is not copied (%zu kept)", pstats(m).kept_bytes);
  CHECK_CU(cuemm_free(m, c2)); /* its chunk may become wholly free while suspended */
  CHECK_CU(cuemm_flush(m));
  CHECK_CU(cuemm_pool_resume(m));
  ok(holds(a, 8 * MiB, 5), "the pool block's contents back");
  cuemm_pool_stats ps = pstats(m);
  is(ps.limit_bytes, 32 * MiB, "the limit stands");
  ok(ps.mapped_bytes <= 32 * MiB, "mapped %zu bytes, within the limit", ps.mapped_bytes);
  CUdeviceptr x[4];
  int n = 0;
  while (n < 4 && cuemm_allocate(m, 8 * MiB, &x[n]) == CUDA_SUCCESS)
    n++;
  ok(pstats(m).mapped_bytes <= 32 * MiB, "growth after a resumption keeps the limit (%zu mapped)",
     pstats(m).mapped_bytes);
  for (int i = 0; i < n; i++)
    CHECK_CU(cuemm_free(m, x[i]));
  CHECK_CU(cuemm_free(m, a));
  CHECK_CU(cuemm_pool_trim(m));
  is(pstats(m).mapped_bytes, 0, "a trim after a resumption releases what is wholly free");
  CHECK_CU(cuemm_allocate(m, 8 * MiB, &a));
  ok(pstats(m).mapped_bytes >= 8 * MiB, "the pool grows again");
  CHECK_CU(cuemm_free(m, a));
  CHECK_CU(cuemm_flush(m));
  is(pstats(m).mapped_bytes, 0, "and with a release threshold of 0, a flush releases what its frees made wholly "
     "free");
  CHECK_CU(cuemm_free(m, big));
  CHECK_CU(cuemm_destroy(m));
  sim_check_nothing_left(live0);
}

/* ---- two managers on one context ---------------------------------------------- */

/* The context's manager holds the weights; a secondary one on the same
 * context (cuemm_config.secondary) holds the KV cache.  Each suspends and
 * resumes on its own. */
static void test_two_managers(void)
{
  size_t live0 = sim_live_baseline();
  cuemm_manager *w = make_pool(0, 0), *kv = NULL, *third = NULL, *got = NULL;
  cuemm_config c = test_config(10, 1.0);
  c.pool = CUEMM_POOL_VMM;
  c.pool_reserve = 256 * MiB;
  is(cuemm_manager_create(NULL, &c, &kv), CUDA_ERROR_ALREADY_ACQUIRED, "a second manager of the context is refused");
  c.secondary = 1;
  is(cuemm_manager_create(NULL, &c, &kv), CUDA_SUCCESS, "a secondary one is made: %s", cuemm_last_error());
  is(cuemm_manager_create(NULL, &c, &third), CUDA_SUCCESS, "and another");
  is(cuemm_get(&got), CUDA_SUCCESS, "cuemm_get");
  ok(got == w, "cuemm_get finds the context's manager, not a secondary one");
  is(cuemm_context(kv), cuemm_context(w), "both on one context");
  CUdeviceptr pw, pk, pt;
  CHECK_CU(cuemm_allocate(w, 6 * MiB, &pw));
  CHECK_CU(cuemm_allocate(kv, 10 * MiB, &pk));
  CHECK_CU(cuemm_allocate(third, MiB, &pt));
  fill(pw, 6 * MiB, 9);
  fill(pk, 10 * MiB, 10);
  fill(pt, MiB, 11);
  is(cuemm_pool_suspend(kv, 0), CUDA_SUCCESS, "the KV manager suspends, contents discarded");
  is(pstats(w).suspended, 0, "the weights' manager is not suspended");
  is(pstats(third).suspended, 0, "nor the third");
  CUdeviceptr q;
  is(cuemm_allocate(w, MiB, &q), CUDA_SUCCESS, "the weights' manager still serves");
  CHECK_CU(cuemm_free(w, q));
  is(cuemm_mem_alloc(&q, MiB), CUDA_SUCCESS, "so do the drop-ins, on the context's manager");
  CHECK_CU(cuemm_mem_free(q));
  is(cuemm_allocate(kv, MiB, &q), CUDA_ERROR_ILLEGAL_STATE, "the KV manager refuses");
  is(cuemm_pool_suspend(w, CUEMM_SUSPEND_KEEP), CUDA_SUCCESS, "the weights' manager suspends, contents kept");
  ok(holds(pt, MiB, 11), "the third manager's block is untouched");
  is(cuemm_pool_resume(w), CUDA_SUCCESS, "the weights come back");
  ok(holds(pw, 6 * MiB, 9), "weights intact");
  is(pstats(kv).suspended, 1, "the KV manager is still suspended");
  is(cuemm_pool_resume(kv), CUDA_SUCCESS, "the KV manager resumes");
  unsigned char byte = 0;
  is(cuMemcpyDtoH(&byte, pk, 1), CUDA_SUCCESS, "its block is usable again at the same address");
  CHECK_CU(cuemm_free(w, pw));
  CHECK_CU(cuemm_free(kv, pk));
  CHECK_CU(cuemm_free(third, pt));
  CHECK_CU(cuemm_destroy(kv));
  is(cuemm_get(&got), CUDA_SUCCESS, "cuemm_get after a secondary manager went");
  ok(got == w, "still the context's manager");
  CHECK_CU(cuemm_destroy(third));
  CHECK_CU(cuemm_destroy(w));
  sim_check_nothing_left(live0);
}

/* ---- IPC ------------------------------------------------------------------------ */

static void test_ipc(void)
{
  size_t live0 = sim_live_baseline();
  cuemm_manager *m = make_pool(0, 1);
  CUdeviceptr p;
  CHECK_CU(cuemm_allocate(m, 4 * MiB, &p));
  fill(p, 4 * MiB, 3);
  cuemm_ipc_handle h;
  CHECK_CU(cuemm_ipc_export(m, p, 0, &h));
  is(cuemm_pool_suspend(m, 0), CUDA_SUCCESS, "an exported handle never sent does not stop a suspension");
  CHECK_CU(cuemm_pool_resume(m));
  fill(p, 4 * MiB, 3); /* suspended without KEEP: the contents were dropped */
  CHECK_CU(cuemm_ipc_export(m, p, 0, &h)); /* the chunks are new: export again */
  int sp[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp) != 0) {
    printf("Bail out! socketpair\n");
    exit(1);
  }
  CUresult r = cuemm_ipc_handle_send(m, &h, sp[0]);
  is(r, CUDA_SUCCESS, "the handle is sent: %s", cuemm_last_error());
  cuemm_ipc_handle got;
  CHECK_CU(cuemm_ipc_recv(sp[1], &got));
  CHECK_CU(cuemm_ipc_discard(&got));
  close(sp[0]);
  close(sp[1]);
  is(cuemm_pool_suspend(m, CUEMM_SUSPEND_KEEP), CUDA_ERROR_ILLEGAL_STATE, "a suspension refuses a block sent");
  char want[64];
  snprintf(want, sizeof want, "0x%llx (%zu bytes)", (unsigned long long)p, (size_t)4 * MiB);
  like(cuemm_last_error(), want, "the message names it: %s", cuemm_last_error());
  like(cuemm_last_error(), "CUEMM_SUSPEND_IGNORE_IPC", "and the flag");
  is(pstats(m).suspended, 0, "not suspended");
  is(cuemm_pool_suspend(m, CUEMM_SUSPEND_KEEP | CUEMM_SUSPEND_IGNORE_IPC), CUDA_SUCCESS, "with IGNORE_IPC it suspends");
  CHECK_CU(cuemm_pool_resume(m));
  ok(holds(p, 4 * MiB, 3), "contents intact");
  is(cuemm_pool_suspend(m, 0), CUDA_SUCCESS, "the memory sent is gone: the next suspension goes ahead");
  CHECK_CU(cuemm_pool_resume(m));
  CHECK_CU(cuemm_free(m, p));
  CHECK_CU(cuemm_destroy(m));
  sim_check_nothing_left(live0);
}

/* ---- threads ------------------------------------------------------------------- */

typedef struct worker {
  cuemm_manager *m;
  atomic_int *stop;
  unsigned long served, refused, early;
  int index;
} worker;

static void *work(void *arg)
{
  worker *w = arg;
  CUcontext ctx;
  ctx = cuemm_context(w->m);
  CHECK_CU(cuCtxSetCurrent(ctx));
  CUstream s;
  CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr held[4] = { 0 };
  unsigned k = 0;
  while (!atomic_load(w->stop)) {
    size_t n = (k % 3 == 0) ? 4 * KiB : (k % 3 == 1) ? 64 * KiB : 512 * KiB;
    cuemm_pool_stats a, b;
    CHECK_CU(cuemm_pool_get_stats(w->m, &a));
    CUdeviceptr p = 0;
    CUresult r = cuemm_allocate_async(w->m, n, s, &p);
    CHECK_CU(cuemm_pool_get_stats(w->m, &b));
    if (r == CUDA_SUCCESS) {
      w->served++;
      /* Handed out while the manager was suspended, with no resumption
       * since: a block in memory that is gone. */
      if (a.suspended && b.resumes == a.resumes)
        w->early++;
      if (k % 5 == 0)
        cuemm_record_stream(w->m, p, NULL);
      unsigned slot = k % 4;
      if (held[slot])
        CHECK_CU(cuemm_free_async(w->m, held[slot], s));
      held[slot] = p;
    } else if (r == CUDA_ERROR_ILLEGAL_STATE)
      w->refused++;
    else {
      printf("Bail out! cuemm_alloc_async: %d %s\n", (int)r, cuemm_last_error());
      exit(1);
    }
    k++;
    /* Under valgrind, which runs one thread at a time, a worker that takes
     * the manager's lock again at once kept the suspending thread waiting
     * for it through 14 million allocations (18 minutes). */
    sched_yield();
  }
  for (unsigned i = 0; i < 4; i++)
    if (held[i])
      CHECK_CU(cuemm_free_async(w->m, held[i], s));
  CHECK_CU(cuStreamSynchronize(s));
  CHECK_CU(cuemm_stream_release(w->m, s));
  CHECK_CU(cuStreamDestroy(s));
  return NULL;
}

static void test_threads(void)
{
  size_t live0 = sim_live_baseline();
  cuemm_manager *m = make_pool(0, 0);
  CUdeviceptr keep;
  CHECK_CU(cuemm_allocate(m, 3 * MiB, &keep));
  fill(keep, 3 * MiB, 42);
  enum { NT = 4, ROUNDS = 40 };
  atomic_int stop;
  atomic_init(&stop, 0);
  worker w[NT];
  pthread_t t[NT];
  for (int i = 0; i < NT; i++) {
    w[i] = (worker){ m, &stop, 0, 0, 0, i };
    pthread_create(&t[i], NULL, work, &w[i]);
  }
  int all_ok = 1, intact = 1;
  for (int round = 0; round < ROUNDS; round++) {
    all_ok &= cuemm_pool_suspend(m, CUEMM_SUSPEND_KEEP) == CUDA_SUCCESS;
    usleep(200);
    all_ok &= cuemm_pool_resume(m) == CUDA_SUCCESS;
    intact &= holds(keep, 3 * MiB, 42);
    usleep(200);
  }
  atomic_store(&stop, 1);
  unsigned long served = 0, refused = 0, early = 0;
  for (int i = 0; i < NT; i++) {
    pthread_join(t[i], NULL);
    served += w[i].served;
    refused += w[i].refused;
    early += w[i].early;
  }
  ok(all_ok, "%d suspensions and resumptions while %d threads allocate, free and record streams", ROUNDS, NT);
  ok(intact, "the kept block intact after every resumption");
  is(early, 0, "no block handed out while suspended (%lu served, %lu refused)", served, refused);
  ok(served > 0, "the threads were served (%lu)", served);
  CHECK_CU(cuemm_free(m, keep));
  CHECK_CU(cuemm_destroy(m));
  sim_check_nothing_left(live0);
}

int main(void)
{
  sim_init();
  test_primary_context(0);
  test_refusals();
  test_cycle();
  test_faults();
  test_destroy_half();
  test_no_early_reuse();
  test_oom();
  test_limits();
  test_two_managers();
  test_ipc();
  test_threads();
  test_release_primary(0);
  return tap_done();
}
