/* test-stress.c: every public entry point from 16 threads at once, in a
 * random order, on one manager: first without a pool, then with the VMM pool
 * (pool IPC on, so pool blocks can be exported and sent too).
 *
 * Each thread keeps its own blocks (device, drop-in, pinned host, pinned
 * ranges of its own buffers) and writes a pattern into every block it gets
 * (cuMemcpyHtoD or cuMemsetD8); it reads the pattern back before it frees
 * the block, so two threads handed overlapping memory, or memory freed under
 * a thread, shows up as a pattern error.  Exported handles are checked
 * byte for byte (from_bytes, a corrupted copy refused, send and recv over a
 * socket pair, discard of the received descriptors).  Opening needs another
 * process; here open must refuse the exporter's own handle, which runs the
 * open path's checks and lock concurrently with everything else.
 *
 * Every few hundred operations the threads meet at a barrier: one thread
 * resets the manager while the others read statistics and open and close
 * defer scopes, then all of them forget the blocks the reset freed.
 *
 * The operation sequence of each thread comes from a seed printed first (the
 * interleaving does not); CUEMM_STRESS_SEED repeats a run's sequences, and
 * CUEMM_STRESS_OPS sets the operations per thread per pass (default 1500).
 * Built with ThreadSanitizer (configure --enable-tsan) this is the race
 * detector's main workload.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "testproc.h"
#include "testutil.h"

#define NTHREADS 16
#define MAX_BLOCKS 12
#define MAX_HOST 4
#define MAX_PINS 2
#define RESET_EVERY 500
#define MiB ((size_t)1 << 20)

typedef struct block {
  CUdeviceptr p;
  size_t size;
  unsigned char v;
  int dropin;       /* from cuemm_mem_alloc: freed with cuemm_mem_free */
  CUstream s;       /* from cuemm_allocate_async on this stream (NULL: cuemm_allocate) */
} block;

typedef struct hblock {
  unsigned char *p;
  size_t size;
  unsigned char v;
} hblock;

typedef struct worker {
  int index;
  int pool;
  cuemm_manager *m;
  CUcontext ctx;
  pthread_barrier_t *bar;
  uint64_t rng;
  long ops;
  block b[MAX_BLOCKS];
  int nb;
  hblock h[MAX_HOST];
  int nh;
  hblock pin[MAX_PINS];   /* the thread's own buffers, pinned */
  int npin;
  int scopes;             /* defer scopes this thread has open */
  int sv[2];              /* a socket pair for send and recv */
  CUstream st[2];         /* the thread's streams for the stream-ordered path (pool only); blocking, so
                           * that the synchronous fills and reads are ordered with them */
  /* outcome */
  unsigned long allocs, errors, pattern_errors, ipc_errors, exports, resets;
  char first_error[384];
} worker;

static uint64_t next_rand(uint64_t *s)
{
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static void fail(worker *w, const char *what, CUresult r)
{
  if (w->errors++ == 0)
    snprintf(w->first_error, sizeof w->first_error, "thread %d, op %ld: %s returned %d: %s", w->index, w->ops,
             what, (int)r, cuemm_last_error());
}

static void ipc_fail(worker *w, const char *what)
{
  if (w->ipc_errors++ == 0 && w->errors == 0)
    snprintf(w->first_error, sizeof w->first_error, "thread %d, op %ld: %s (%s)", w->index, w->ops, what,
             cuemm_last_error());
}

#define TRY(w, call)                                                           \
  do {                                                                         \
    CUresult try_r = (call);                                                   \
    if (try_r != CUDA_SUCCESS)                                                 \
      fail((w), #call, try_r);                                                 \
  } while (0)

/* Writes v over the whole block: a memset, or a copy from a host buffer. */
static void fill(worker *w, CUdeviceptr p, size_t size, unsigned char v)
{
  if (size <= 4096 && (w->ops & 1)) {
    unsigned char buf[4096];
    memset(buf, v, size);
    TRY(w, cuMemcpyHtoD(p, buf, size));
  } else {
    TRY(w, cuMemsetD8(p, v, size));
  }
}

/* Reads the first, middle and last bytes back (the whole block when small). */
static void check(worker *w, CUdeviceptr p, size_t size, unsigned char v)
{
  unsigned char buf[512];
  size_t n = size < sizeof buf ? size : sizeof buf;
  CUresult r = cuMemcpyDtoH(buf, p, n);
  if (r != CUDA_SUCCESS) {
    fail(w, "cuMemcpyDtoH", r);
    return;
  }
  unsigned char mid = 0, last = 0;
  if ((r = cuMemcpyDtoH(&mid, p + size / 2, 1)) != CUDA_SUCCESS ||
      (r = cuMemcpyDtoH(&last, p + size - 1, 1)) != CUDA_SUCCESS) {
    fail(w, "cuMemcpyDtoH", r);
    return;
  }
  size_t bad = (mid != v) + (last != v);
  for (size_t i = 0; i < n; i++)
    bad += buf[i] != v;
  if (bad && w->pattern_errors++ == 0 && w->errors == 0)
    snprintf(w->first_error, sizeof w->first_error, "thread %d, op %ld: block 0x%llx (%zu bytes) lost pattern 0x%02x",
             w->index, w->ops, (unsigned long long)p, size, v);
}

static size_t random_size(worker *w)
{
  uint64_t x = next_rand(&w->rng);
  switch (x % 8) {
  case 0: return 1 + (x >> 8) % 255;
  case 1: return 4096;
  case 7: return 256 * 1024 + (x >> 8) % (768 * 1024);   /* up to 1 MiB */
  default: return 256 + (x >> 8) % (64 * 1024);
  }
}

static void op_alloc(worker *w, int dropin)
{
  if (w->nb == MAX_BLOCKS)
    return;
  block *b = &w->b[w->nb];
  b->size = random_size(w);
  b->v = (unsigned char)(w->index * 16 + (w->ops & 15) + 1);
  b->dropin = dropin;
  CUresult r = dropin ? cuemm_mem_alloc(&b->p, b->size) : cuemm_allocate(w->m, b->size, &b->p);
  if (r != CUDA_SUCCESS) {
    fail(w, dropin ? "cuemm_mem_alloc" : "cuemm_alloc", r);
    return;
  }
  w->allocs++;
  w->nb++;
  fill(w, b->p, b->size, b->v);
}

/* The stream-ordered path: a block for one of the thread's streams. */
static void op_alloc_async(worker *w)
{
  if (w->nb == MAX_BLOCKS)
    return;
  block *b = &w->b[w->nb];
  b->size = random_size(w);
  b->v = (unsigned char)(w->index * 16 + (w->ops & 15) + 1);
  b->dropin = 0;
  b->s = w->st[next_rand(&w->rng) % 2];
  CUresult r = cuemm_allocate_async(w->m, b->size, b->s, &b->p);
  if (r != CUDA_SUCCESS) {
    fail(w, "cuemm_alloc_async", r);
    return;
  }
  w->allocs++;
  w->nb++;
  fill(w, b->p, b->size, b->v);
}

static void op_free(worker *w)
{
  if (!w->nb)
    return;
  int i = (int)(next_rand(&w->rng) % (uint64_t)w->nb);
  block b = w->b[i];
  w->b[i] = w->b[--w->nb];
  check(w, b.p, b.size, b.v);
  uint64_t x = next_rand(&w->rng);
  if (b.dropin)
    TRY(w, cuemm_mem_free(b.p));
  else if (!w->pool || x % 4 == 0)
    TRY(w, cuemm_free(w->m, b.p)); /* any block, the stream path's too */
  else {
    CUstream on = w->st[(x >> 8) % 2];
    if (b.s && on != b.s && (x >> 16) % 2)
      TRY(w, cuemm_record_stream(w->m, b.p, on));
    TRY(w, cuemm_free_async(w->m, b.p, b.s && (x >> 24) % 2 ? b.s : on));
  }
}

static void op_host(worker *w)
{
  if (w->nh < MAX_HOST && (w->nh == 0 || next_rand(&w->rng) % 2)) {
    hblock *h = &w->h[w->nh];
    h->size = 64 + next_rand(&w->rng) % 16384;
    h->v = (unsigned char)(w->index + 100);
    void *p = NULL;
    CUresult r = cuemm_host_allocate(w->m, h->size, (w->ops & 2) ? CU_MEMHOSTALLOC_PORTABLE : 0, &p);
    if (r != CUDA_SUCCESS) {
      fail(w, "cuemm_host_alloc", r);
      return;
    }
    w->allocs++;
    h->p = p;
    memset(h->p, h->v, h->size);
    w->nh++;
    return;
  }
  hblock h = w->h[--w->nh];
  size_t bad = 0;
  for (size_t i = 0; i < h.size; i += 61)
    bad += h.p[i] != h.v;
  if (bad && w->pattern_errors++ == 0 && w->errors == 0)
    snprintf(w->first_error, sizeof w->first_error, "thread %d: pinned host block lost its pattern", w->index);
  TRY(w, cuemm_host_free(w->m, h.p));
}

/* Pins one of the thread's buffers and copies through it, or unpins one. */
static void op_pin(worker *w)
{
  if (w->npin < MAX_PINS && (w->npin == 0 || next_rand(&w->rng) % 2)) {
    hblock *h = &w->pin[w->npin];
    /* Whole pages of its own: the driver pins pages, and two threads'
     * buffers sharing one would overlap. */
    h->size = 4096 * (1 + next_rand(&w->rng) % 4);
    h->p = aligned_alloc(4096, h->size);
    if (!h->p) {
      fail(w, "aligned_alloc", CUDA_ERROR_OUT_OF_MEMORY);
      return;
    }
    CUresult r = cuemm_host_pin(w->m, h->p, h->size, 0);
    if (r != CUDA_SUCCESS) {
      fail(w, "cuemm_host_pin", r);
      free(h->p);
      return;
    }
    w->npin++;
    if (w->nb) {
      block *b = &w->b[0];
      size_t n = b->size < h->size ? b->size : h->size;
      memset(h->p, 0, n);
      TRY(w, cuMemcpyDtoH(h->p, b->p, n));
      if ((h->p[0] != b->v || h->p[n - 1] != b->v) && w->pattern_errors++ == 0 && w->errors == 0)
        snprintf(w->first_error, sizeof w->first_error, "thread %d: copy through a pinned buffer lost the pattern",
                 w->index);
    }
    return;
  }
  hblock h = w->pin[--w->npin];
  TRY(w, cuemm_host_unpin(w->m, h.p));
  free(h.p);
}

/* Export a random point inside a block and check the handle every way that
 * one process can. */
static void op_ipc(worker *w)
{
  if (!w->nb)
    return;
  block *b = &w->b[next_rand(&w->rng) % (uint64_t)w->nb];
  size_t off = (size_t)(next_rand(&w->rng) % b->size);
  cuemm_ipc_handle h, back;
  CUresult r = cuemm_ipc_export(w->m, b->p + off, 0, &h);
  if (r != CUDA_SUCCESS) {
    fail(w, "cuemm_ipc_export", r);
    return;
  }
  w->exports++;
  if (h.checksum != fnv1a(&h) || h.size < b->size - off ||
      (h.kind == CUEMM_IPC_KIND_DEVICE && h.offset != off))
    ipc_fail(w, "an exported handle is inconsistent");
  if (cuemm_ipc_handle_parse(&h, sizeof h, &back) != CUDA_SUCCESS || memcmp(&back, &h, sizeof h) != 0)
    ipc_fail(w, "cuemm_ipc_handle_from_bytes refused or changed a fresh handle");
  unsigned char bad[CUEMM_IPC_HANDLE_SIZE];
  memcpy(bad, &h, sizeof bad);
  bad[16 + next_rand(&w->rng) % 24] ^= 0x40; /* offset, size or alloc_size */
  if (cuemm_ipc_handle_parse(bad, sizeof bad, &back) != CUDA_ERROR_INVALID_VALUE)
    ipc_fail(w, "a corrupted handle was not refused");
  CUdeviceptr q = 0;
  if (cuemm_ipc_open(w->m, &h, &q) != CUDA_ERROR_INVALID_CONTEXT)
    ipc_fail(w, "opening this process's own handle was not refused");
  if (next_rand(&w->rng) % 2) {
    memset(&back, 0, sizeof back);
    if ((r = cuemm_ipc_handle_send(w->m, &h, w->sv[0])) != CUDA_SUCCESS)
      fail(w, "cuemm_ipc_send", r);
    else if ((r = cuemm_ipc_recv(w->sv[1], &back)) != CUDA_SUCCESS)
      fail(w, "cuemm_ipc_recv", r);
    else if (memcmp(&back, &h, sizeof h) != 0)
      ipc_fail(w, "the handle received is not the handle sent");
    else if (h.kind == CUEMM_IPC_KIND_POOL && (r = cuemm_ipc_discard(&back)) != CUDA_SUCCESS)
      fail(w, "cuemm_ipc_discard", r);
    else if (h.kind == CUEMM_IPC_KIND_DEVICE && cuemm_ipc_discard(&back) != CUDA_ERROR_INVALID_VALUE)
      ipc_fail(w, "a device handle came with descriptors to discard");
  }
}

/* `mine`: the thread's blocks count toward live_count (not while a reset
 * may be running). */
static void op_stats(worker *w, int mine)
{
  cuemm_stats s;
  cuemm_pool_stats ps;
  TRY(w, cuemm_get_stats(w->m, &s));
  if ((mine && s.live_count < (size_t)w->nb) || s.defer_depth > NTHREADS * 2u)
    ipc_fail(w, "statistics that cannot be");
  TRY(w, cuemm_pool_get_stats(w->m, &ps));
  if (ps.enabled != w->pool || ps.used_bytes > ps.mapped_bytes || ps.free_bytes != ps.mapped_bytes - ps.used_bytes)
    ipc_fail(w, "pool statistics that do not add up");
  size_t fb = 0, tb = 0;
  TRY(w, cuemm_get_memory_info(w->m, &fb, &tb));
}

static void op_scope(worker *w)
{
  if (w->scopes < 2 && (w->scopes == 0 || next_rand(&w->rng) % 2)) {
    TRY(w, cuemm_defer_cleanup_begin(w->m));
    w->scopes++;
  } else if (w->scopes) {
    TRY(w, cuemm_defer_cleanup_end(w->m));
    w->scopes--;
  }
}

/* The barrier's part: every thread closes its scopes and stops; thread 0
 * resets while the others read; then everyone forgets what the reset freed. */
static void reset_round(worker *w)
{
  while (w->scopes)
    op_scope(w);
  pthread_barrier_wait(w->bar);
  if (w->index == 0) {
    TRY(w, cuemm_reset(w->m));
    w->resets++;
  } else {
    op_stats(w, 0);
    TRY(w, cuemm_defer_cleanup_begin(w->m));
    TRY(w, cuemm_defer_cleanup_end(w->m));
  }
  pthread_barrier_wait(w->bar);
  w->nb = 0;
  w->nh = 0;
  for (int i = 0; i < w->npin; i++)
    free(w->pin[i].p);
  w->npin = 0;
  cuemm_stats s;
  TRY(w, cuemm_get_stats(w->m, &s));
  if (s.live_count != 0 || s.host_live_count != 0 || s.pinned_count != 0)
    ipc_fail(w, "a reset left something live");
  pthread_barrier_wait(w->bar);
}

static long ops_per_pass(void)
{
  const char *e = getenv("CUEMM_STRESS_OPS");
  long n = e ? atol(e) : 0;
  return n > 0 ? n : 1500;
}

static void *run_worker(void *arg)
{
  worker *w = arg;
  if (cuCtxSetCurrent(w->ctx) != CUDA_SUCCESS) {
    fail(w, "cuCtxSetCurrent", CUDA_ERROR_UNKNOWN);
    return NULL;
  }
  for (int i = 0; w->pool && i < 2; i++)
    TRY(w, cuStreamCreate(&w->st[i], 0));
  long total = ops_per_pass();
  for (w->ops = 0; w->ops < total; w->ops++) {
    if (w->ops > 0 && w->ops % RESET_EVERY == 0)
      reset_round(w);
    unsigned k = (unsigned)(next_rand(&w->rng) % 100);
    if (k < 16 && w->pool)
      op_alloc_async(w);
    else if (k < 28)
      op_alloc(w, 0);
    else if (k < 34)
      op_alloc(w, 1);
    else if (k < 62)
      op_free(w);
    else if (k < 68)
      op_host(w);
    else if (k < 72)
      op_pin(w);
    else if (k < 80)
      op_ipc(w);
    else if (k < 86)
      op_stats(w, 1);
    else if (k < 92)
      op_scope(w);
    else
      TRY(w, cuemm_flush(w->m));
  }
  /* Leave nothing behind. */
  while (w->scopes)
    op_scope(w);
  while (w->nb)
    op_free(w);
  while (w->nh)
    op_host(w);
  while (w->npin) {
    hblock h = w->pin[--w->npin];
    TRY(w, cuemm_host_unpin(w->m, h.p));
    free(h.p);
  }
  for (int i = 0; w->pool && i < 2; i++) {
    TRY(w, cuStreamSynchronize(w->st[i]));
    TRY(w, cuemm_stream_release(w->m, w->st[i]));
  }
  cuCtxSetCurrent(NULL);
  return NULL;
}

static void stress(int pool, uint64_t seed, CUcontext ctx)
{
  const char *name = pool ? "with the pool" : "without a pool";
  cuemm_config c = test_config(8, 0.2);
  if (pool) {
    c.pool = CUEMM_POOL_VMM;
    c.pool_chunk = 4 * MiB;
    c.pool_reserve = 512 * MiB;
    c.pool_release_threshold = 8 * MiB; /* chunks come and go */
    c.pool_ipc = 1;
  }
  cuemm_manager *m = NULL;
  CHECK_CU(cuemm_manager_create(ctx, &c, &m));
  cuemm_stats s0 = test_stats(m);

  static worker w[NTHREADS];
  pthread_t t[NTHREADS];
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, NTHREADS);
  for (int i = 0; i < NTHREADS; i++) {
    memset(&w[i], 0, sizeof w[i]);
    w[i].index = i;
    w[i].pool = pool;
    w[i].m = m;
    w[i].ctx = ctx;
    w[i].bar = &bar;
    w[i].rng = seed ^ (0x9E3779B97F4A7C15u * (uint64_t)(i + 1 + 16 * pool));
    if (!w[i].rng)
      w[i].rng = 1;
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, w[i].sv) != 0) {
      printf("Bail out! socketpair failed\n");
      exit(1);
    }
  }
  for (int i = 0; i < NTHREADS; i++)
    if (pthread_create(&t[i], NULL, run_worker, &w[i]) != 0) {
      printf("Bail out! pthread_create failed\n");
      exit(1);
    }
  unsigned long allocs = 0, errors = 0, pattern = 0, ipc = 0, exports = 0, resets = 0;
  const char *first = NULL;
  for (int i = 0; i < NTHREADS; i++) {
    pthread_join(t[i], NULL);
    for (int k = 0; pool && k < 2; k++)
      if (w[i].st[k])
        cuStreamDestroy(w[i].st[k]);
    allocs += w[i].allocs;
    errors += w[i].errors;
    pattern += w[i].pattern_errors;
    ipc += w[i].ipc_errors;
    exports += w[i].exports;
    resets += w[i].resets;
    if (!first && w[i].first_error[0])
      first = w[i].first_error;
    close(w[i].sv[0]);
    close(w[i].sv[1]);
  }
  pthread_barrier_destroy(&bar);
  if (first)
    tap_diag("%s: first problem: %s", name, first);
  is(errors, 0, "%s: %d threads x %ld operations, no call failed", name, NTHREADS, ops_per_pass());
  is(pattern, 0, "%s: every block read back its thread's pattern", name);
  is(ipc, 0, "%s: %lu exports checked (from_bytes, corruption, own-process open, send and recv)", name, exports);
  ok(exports > 0, "%s: handles were exported", name);
  is(resets, (unsigned long)((ops_per_pass() - 1) / RESET_EVERY), "%s: resets ran while the others read", name);

  cuemm_stats s = test_stats(m);
  is(s.allocs - s0.allocs, allocs, "%s: the manager counted every allocation (%lu)", name, allocs);
  ok(s.live_count == 0 && s.host_live_count == 0 && s.pinned_count == 0 && s.defer_depth == 0,
     "%s: nothing live, nothing pinned, no scope open at the end", name);
  CHECK_CU(cuemm_flush(m));
  is(test_stats(m).pending_count, 0, "%s: a flush empties the queue", name);
  if (pool) {
    /* Blocks freed on streams stay in the threads' caches until the pool
     * wants them or a trim. */
    CHECK_CU(cuemm_pool_trim(m));
    cuemm_pool_stats ps;
    CHECK_CU(cuemm_pool_get_stats(m, &ps));
    is(ps.used_bytes, 0, "%s: after a trim the pool has every block back", name);
    is(test_stats(m).stream_cached_bytes, 0, "%s: and the threads' caches hold nothing", name);
  }
  CHECK_CU(cuemm_destroy(m));
}

int main(void)
{
  sim_init();
  uint64_t seed = 20261123;
  const char *e = getenv("CUEMM_STRESS_SEED");
  if (e && *e)
    seed = strtoull(e, NULL, 0);
  tap_plan(8 + 10 + 2);
  tap_diag("seed %llu (CUEMM_STRESS_SEED=%llu repeats each thread's operations)", (unsigned long long)seed,
           (unsigned long long)seed);
  CUcontext ctx = test_primary_context(0);
  simcuda_live live0;
  if (sim_present)
    sim.live_get(&live0);
  CHECK_CU(cuCtxSetCurrent(NULL));

  stress(0, seed, ctx);
  stress(1, seed, ctx);

  if (sim_present) {
    simcuda_live l;
    sim.live_get(&l);
    ok(l.vmm_handles == 0 && l.vmm_mappings == 0 && l.vmm_reservations == 0,
       "simcuda: no VMM handle, mapping or reservation left (%zu, %zu, %zu)", l.vmm_handles, l.vmm_mappings,
       l.vmm_reservations);
    sim_check_live_same(&live0);
  } else {
    skip(2, SIM_REASON);
  }
  CHECK_CU(cuCtxSetCurrent(ctx));
  test_release_primary(0);
  return tap_done();
}
