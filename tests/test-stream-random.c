/* test-stream-random.c: randomized multi-thread, multi-stream runs of the
 * stream-ordered path against a shadow model.
 *
 * Threads allocate on their own streams, the legacy stream and their
 * per-thread stream, queue writes of a tag into every block, free blocks on
 * the stream that used them, and hand blocks to other threads (after
 * synchronizing the stream that used them, as the driver's rules ask) to be
 * freed there.  Checked at every step: no two live blocks overlap (a shared
 * interval list); on simcuda in queue mode, where work runs only when
 * something synchronizes, no block is handed out while work queued before
 * its free on another stream is still pending (simcuda_reuse_check, when the
 * simulator has it); and every block's data is intact when its owner reads
 * it back before freeing (an early reuse lets an older write land late).
 * Each configuration runs with both reuse rules.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define MIB ((size_t)1 << 20)
#define THREADS 4
#define STEPS 1500

typedef struct blk {
  CUdeviceptr p;
  size_t size;
  unsigned char tag;
  CUstream s;
} blk;

static CUcontext ctx;
static cuemm_manager *mgr;
static size_t (*reuse_check)(CUstream, CUdeviceptr, size_t);

static pthread_mutex_t shadow_lock = PTHREAD_MUTEX_INITIALIZER;
static blk shadow[THREADS * 256];
static size_t nshadow;
static blk handoff[64];
static size_t nhandoff;
static int overlaps_seen, early_reuses, corrupt, errors;
static char first_error[512];

static void note_error(const char *what, CUresult r)
{
  pthread_mutex_lock(&shadow_lock);
  if (errors++ == 0)
    snprintf(first_error, sizeof first_error, "%s: %d (%s)", what, (int)r, cuemm_last_error());
  pthread_mutex_unlock(&shadow_lock);
}

static void shadow_add(const blk *b)
{
  pthread_mutex_lock(&shadow_lock);
  for (size_t i = 0; i < nshadow; i++)
    if (b->p < shadow[i].p + shadow[i].size && shadow[i].p < b->p + b->size)
      overlaps_seen++;
  shadow[nshadow++] = *b;
  pthread_mutex_unlock(&shadow_lock);
}

static void shadow_remove(CUdeviceptr p)
{
  pthread_mutex_lock(&shadow_lock);
  for (size_t i = 0; i < nshadow; i++)
    if (shadow[i].p == p) {
      shadow[i] = shadow[--nshadow];
      break;
    }
  pthread_mutex_unlock(&shadow_lock);
}

static uint64_t xorshift(uint64_t *s)
{
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* Synchronizes the block's stream and reads its first and last bytes. */
static int intact(const blk *b)
{
  unsigned char first = 0, last = 0;
  if (cuStreamSynchronize(b->s) != CUDA_SUCCESS || cuMemcpyDtoH(&first, b->p, 1) != CUDA_SUCCESS ||
      cuMemcpyDtoH(&last, b->p + b->size - 1, 1) != CUDA_SUCCESS)
    return 0;
  return first == b->tag && last == b->tag;
}

static void *run(void *arg)
{
  uint64_t seed = 0x9E3779B97F4A7C15ull * (uintptr_t)arg + 1;
  cuCtxSetCurrent(ctx);
  CUstream own[2];
  cuStreamCreate(&own[0], CU_STREAM_NON_BLOCKING);
  cuStreamCreate(&own[1], 0);
  CUstream streams[4] = { own[0], own[1], CU_STREAM_LEGACY, CU_STREAM_PER_THREAD };
  static const size_t sizes[] = { 256, 1000, 4096, 65536, 300000, MIB, 3 * MIB };
  blk live[64];
  size_t n = 0;
  for (int step = 0; step < STEPS; step++) {
    uint64_t r = xorshift(&seed);
    if (n < 64 && (r % 100 < 55 || n == 0)) {
      blk b = { .size = sizes[(r >> 8) % 7] + (r >> 16) % 3 * 256, .tag = (unsigned char)(r >> 24),
                .s = streams[(r >> 32) % 4] };
      CUresult cr = cuemm_allocate_async(mgr, b.size, b.s, &b.p);
      if (cr != CUDA_SUCCESS) {
        note_error("cuemm_alloc_async", cr);
        continue;
      }
      if (reuse_check && reuse_check(b.s, b.p, b.size)) {
        pthread_mutex_lock(&shadow_lock);
        early_reuses++;
        pthread_mutex_unlock(&shadow_lock);
      }
      shadow_add(&b);
      cuMemsetD8Async(b.p, b.tag, b.size, b.s);
      live[n++] = b;
    } else if (r % 100 < 90 && n) {
      size_t i = (r >> 8) % n;
      blk b = live[i];
      live[i] = live[--n];
      if ((r >> 20) % 8 == 0 && !intact(&b)) {
        pthread_mutex_lock(&shadow_lock);
        corrupt++;
        pthread_mutex_unlock(&shadow_lock);
      }
      shadow_remove(b.p);
      CUresult cr = cuemm_free_async(mgr, b.p, b.s);
      if (cr != CUDA_SUCCESS)
        note_error("cuemm_free_async", cr);
    } else if (n) {
      /* Hand a block to another thread, or free one handed over. */
      pthread_mutex_lock(&shadow_lock);
      int give = (r >> 8) % 2 && nhandoff < 64;
      blk got = { 0 };
      if (!give && nhandoff)
        got = handoff[--nhandoff];
      pthread_mutex_unlock(&shadow_lock);
      if (give) {
        size_t i = (r >> 12) % n;
        blk b = live[i];
        live[i] = live[--n];
        cuStreamSynchronize(b.s); /* its work done before it changes hands */
        pthread_mutex_lock(&shadow_lock);
        handoff[nhandoff++] = b;
        pthread_mutex_unlock(&shadow_lock);
      } else if (got.p) {
        got.s = own[r % 2];
        if (!intact(&got)) {
          pthread_mutex_lock(&shadow_lock);
          corrupt++;
          pthread_mutex_unlock(&shadow_lock);
        }
        shadow_remove(got.p);
        /* Work of this thread's on the block, queued on its stream before
         * the free there: the allocating thread may reuse it only once
         * that work is done (the free is another thread's, whether it goes
         * back to the allocating thread's heap or this one's). */
        cuMemsetD8Async(got.p, (unsigned char)(got.tag + 1), got.size, got.s);
        CUresult cr = cuemm_free_async(mgr, got.p, got.s);
        if (cr != CUDA_SUCCESS)
          note_error("cuemm_free_async (handed over)", cr);
      }
    }
  }
  for (size_t i = 0; i < n; i++) {
    if (!intact(&live[i])) {
      pthread_mutex_lock(&shadow_lock);
      corrupt++;
      pthread_mutex_unlock(&shadow_lock);
    }
    shadow_remove(live[i].p);
    cuemm_free_async(mgr, live[i].p, live[i].s);
  }
  cuStreamSynchronize(own[0]);
  cuStreamSynchronize(own[1]);
  cuemm_stream_release(mgr, own[0]);
  cuemm_stream_release(mgr, own[1]);
  cuStreamDestroy(own[0]);
  cuStreamDestroy(own[1]);
  return NULL;
}

static void one_run(cuemm_stream_reuse reuse, int queue)
{
  cuemm_config c = test_config(10, 0.2);
  c.pool = CUEMM_POOL_VMM;
  c.pool_reserve = 512 * MIB;
  c.pool_chunk = 8 * MIB;
  c.pool_release_threshold = 64 * MIB;
  c.stream_reuse = reuse;
  /* Internal mode keeps one large block per stream, so that the pool fills
   * and streams must wait on each other's events; the others keep the
   * default number, whose evictions then run on every thread. */
  if (reuse == CUEMM_STREAM_REUSE_INTERNAL)
    c.stream_keep_large = 1;
  CHECK_CU(cuemm_manager_create(ctx, &c, &mgr));
  if (sim_present && sim.set_queue_mode)
    sim.set_queue_mode(queue);
  overlaps_seen = early_reuses = corrupt = errors = 0;
  nshadow = nhandoff = 0;
  pthread_t t[THREADS];
  for (uintptr_t i = 0; i < THREADS; i++)
    pthread_create(&t[i], NULL, run, (void *)(i + 1 + 10 * (uintptr_t)reuse + 100 * (uintptr_t)queue));
  for (int i = 0; i < THREADS; i++)
    pthread_join(t[i], NULL);
  const char *mode = reuse == CUEMM_STREAM_REUSE_WAIT       ? "wait"
                     : reuse == CUEMM_STREAM_REUSE_INTERNAL ? "internal"
                                                            : "event";
  const char *q = queue ? ", work held back" : "";
  is(errors, 0, "%s%s: every call succeeded%s%s", mode, q, errors ? ": " : "", first_error);
  is(overlaps_seen, 0, "%s%s: no two live blocks overlapped", mode, q);
  is(corrupt, 0, "%s%s: every block read back its own data", mode, q);
  if (reuse_check && queue)
    is(early_reuses, 0, "%s%s: no block was handed out while another stream's work on it was queued", mode, q);
  else
    skip(1, "needs simcuda's queue mode and simcuda_reuse_check");
  /* Blocks handed over and never freed. */
  for (size_t i = 0; i < nhandoff; i++)
    cuemm_free_async(mgr, handoff[i].p, NULL);
  CHECK_CU(cuCtxSynchronize());
  cuemm_stats st = test_stats(mgr);
  is(st.live_count, 0, "%s%s: nothing live at the end", mode, q);
  is(st.allocs, st.frees, "%s%s: as many frees as allocs (%llu)", mode, q, (unsigned long long)st.allocs);
  if (reuse_check && queue && reuse == CUEMM_STREAM_REUSE_INTERNAL)
    ok(st.stream_event_waits > 0, "internal, work held back: where the pool would grow, streams waited on events "
       "instead (%llu)", (unsigned long long)st.stream_event_waits);
  else if (reuse_check && queue && reuse == CUEMM_STREAM_REUSE_EVENT)
    is(st.stream_event_waits, 0, "event, work held back: no stream waited on another");
  else
    skip(1, "the waits are counted where simcuda holds work back");
  tap_diag("%s%s: %llu steals, %llu events, %llu waits, %zu heaps, %llu reclaims", mode, q,
       (unsigned long long)st.stream_steals, (unsigned long long)st.stream_events,
       (unsigned long long)st.stream_event_waits, st.stream_heaps, (unsigned long long)st.stream_reclaims);
  CHECK_CU(cuemm_destroy(mgr));
  if (sim_present && sim.set_queue_mode)
    sim.set_queue_mode(0);
}

int main(void)
{
  sim_init();
  reuse_check = (size_t(*)(CUstream, CUdeviceptr, size_t))dlsym(RTLD_DEFAULT, "simcuda_reuse_check");
  ctx = test_primary_context(0);
  size_t live0 = sim_live_baseline();
  for (int queue = 0; queue < (sim_present ? 2 : 1); queue++) {
    one_run(CUEMM_STREAM_REUSE_EVENT, queue);
    one_run(CUEMM_STREAM_REUSE_WAIT, queue);
    one_run(CUEMM_STREAM_REUSE_INTERNAL, queue);
  }
  sim_check_nothing_left(live0);
  test_release_primary(0);
  return tap_done();
}
