/* thread-heap.c: owns the threads' heaps as a whole: the thread-local
 * slots through which a thread finds its heap for a manager, giving a
 * thread a heap (adopting an orphan's, or a new one), what happens to a
 * heap when its thread exits, the process-wide list of heaps that tells a
 * thread's exit which heaps still exist, the cap on a thread's cache, and
 * the heaps' totals and teardown for the manager.  What a heap holds is
 * heap.c's; which blocks it keeps and gives back is exchange.c's.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "base/internal.h"
#include "stream/event.h"
#include "stream/span.h"
#include "stream/thread-heap.h"

/* initial-exec: the fast paths read it with one fs-relative load instead of
 * a call to __tls_get_addr (a tenth of a pooled pair).  Its 192 bytes fit
 * the static TLS space glibc keeps for libraries loaded later (dlopen, as
 * Python's ctypes does). */
_Thread_local cuemm__tls_slot cuemm__tls[CUEMM__TLS_SLOTS] __attribute__((tls_model("initial-exec")));

/* Every heap of every live manager, so a thread's exit can tell whether the
 * heaps its slots name still exist.  Innermost lock: nothing else is taken
 * while it is held, except a heap's lock at thread exit. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static cuemm__heap *g_heaps;
static pthread_key_t g_key;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static _Atomic uint64_t g_retired = 1;

static void thread_exit(void *unused);

static void once_init(void)
{
  pthread_key_create(&g_key, thread_exit);
}

static int heap_registered(const cuemm__heap *h)
{
  for (cuemm__heap *x = g_heaps; x; x = x->gnext)
    if (x == h)
      return 1;
  return 0;
}

/* A key no stream handle has: handles are aligned pointers, and the driver's
 * special streams are 0x1 and 0x2. */
CUstream cuemm__thread_heap_retired_key(void)
{
  return (CUstream)(uintptr_t)((atomic_fetch_add(&g_retired, 1) << 4) | 0x5);
}

/* The thread is gone: its heap stays with the manager for another thread to
 * adopt.  Its per-thread default stream is gone with it (no later work can
 * follow its frees in order), so that stream's blocks are retired: other
 * streams take them once their events complete, the pool once a flush
 * synchronizes. */
static void thread_exit(void *unused)
{
  (void)unused;
  pthread_mutex_lock(&g_lock);
  for (int i = 0; i < CUEMM__TLS_SLOTS; i++) {
    cuemm__heap *h = cuemm__tls[i].h;
    cuemm__tls[i] = (cuemm__tls_slot){ 0 };
    if (!h || !heap_registered(h))
      continue;
    cuemm__heap_lock(h);
    for (uint32_t k = 0; k < h->nst; k++)
      if (h->st[k].s == CU_STREAM_PER_THREAD) {
        h->st[k].s = cuemm__thread_heap_retired_key();
        h->st[k].retired = 1;
      }
    cuemm__heap_forget_last(h);
    atomic_store(&h->orphan, 1);
    cuemm__heap_unlock(h);
  }
  pthread_mutex_unlock(&g_lock);
}

__attribute__((noinline)) cuemm__heap *cuemm__thread_heap_of_slow(const cuemm_manager *m)
{
  for (int i = 1; i < CUEMM__TLS_SLOTS; i++)
    if (cuemm__tls[i].m == m && cuemm__tls[i].serial == m->serial) {
      cuemm__tls_slot t = cuemm__tls[i];
      cuemm__tls[i] = cuemm__tls[0];
      cuemm__tls[0] = t;
      return t.h;
    }
  return NULL;
}

/* The bytes a thread's cache keeps before it gives idle blocks back: a
 * quarter of the pool's mapped bytes, at least CACHE_CAP, halved for each
 * growth past the peak that the caches could have served
 * (CUEMM__CACHE_HALVINGS), at most the release threshold.  Cached blocks
 * keep their places and sizes, so a cache large against the pool scatters
 * blocks over it that merged free space would serve better (a two-stream
 * serving trace, 1.2 GB live, held 1.49x its live bytes with 1 GiB caches,
 * 1.18x with 256 MiB ones); one small against the pool gives back at
 * nearly every free of a large training step (a GPT-2 trace, 10 GB live:
 * 970 trims a pass with 256 MiB, each an event and a walk of the pool, 230
 * with a quarter). */
#define CACHE_CAP ((size_t)256 << 20)

/* Shared by the threads' caches, each keeping at least this much (a
 * block of the largest size a cache keeps): together they hold what one
 * thread's would, since the pool grows before it takes another thread's
 * idle blocks back (manager.c's pool_alloc_slow). */
#define CACHE_SHARE_MIN CUEMM__HEAP_LARGE_MAX

size_t cuemm__thread_heap_cap(const cuemm_manager *m)
{
  size_t quarter = cuemm__pool_held(m->pool) / 4;
  size_t cap = (quarter > CACHE_CAP ? quarter : CACHE_CAP) >> m->cache_halvings;
  if (m->nheaps > 1)
    cap /= m->nheaps;
  if (cap < CACHE_SHARE_MIN)
    cap = CACHE_SHARE_MIN;
  return cuemm__pool_threshold(m->pool) < cap ? cuemm__pool_threshold(m->pool) : cap;
}

/* Each thread's share of CUEMM_STREAM_KEEP_LARGE, for the same reason as
 * the cap's: the threads together keep about what one thread would.  A
 * kept large block is whole and unmerged, and a thread that misses grows
 * the pool before it takes another's; with a full ring on every thread,
 * a server of 5 and 9 threads (the corpus's mt-server logs, replayed on
 * their threads) held 1.74x and 1.75x its live bytes, 1.46x and 1.63x with
 * the share.  At least one a stream: a request of the size freed last
 * stays a pair in the cache.  None while the pool grows past its peak
 * (CUEMM__KEEP_QUIET). */
static uint32_t keep_large_share(const cuemm_manager *m)
{
  uint32_t keep = (uint32_t)m->cfg.stream_keep_large;
  if (m->keep_quiet)
    return 0;
  if (m->nheaps > 1 && keep) {
    keep /= m->nheaps;
    if (keep < 1)
      keep = 1;
  }
  return keep;
}

void cuemm__thread_heap_keep_share(cuemm_manager *m)
{
  atomic_store_explicit(&m->keep_large, keep_large_share(m), memory_order_relaxed);
}

/* Gives the calling thread a heap for m: an orphan's, or a new one.
 * m's lock held. */
CUresult cuemm__thread_heap_attach_locked(cuemm_manager *m, cuemm__heap **out)
{
  pthread_once(&g_once, once_init);
  cuemm__heap *h = NULL;
  for (uint32_t i = 0; i < m->nheaps && !h; i++) {
    int one = 1;
    if (atomic_compare_exchange_strong(&m->heaps[i]->orphan, &one, 0)) {
      h = m->heaps[i];
      cuemm__heap_own(h);
    }
  }
  if (!h) {
    if (m->nheaps == m->capheaps) {
      uint32_t cap = m->capheaps ? m->capheaps * 2 : 8;
      cuemm__heap **g = realloc(m->heaps, cap * sizeof *g);
      if (!g)
        return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "no host memory for a thread's stream cache");
      m->heaps = g;
      m->capheaps = cap;
    }
    if (!(h = malloc(sizeof *h)))
      return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "no host memory for a thread's stream cache");
    cuemm__heap_init(h, m, m->nheaps);
    h->spanning = m->cfg.stream_spans == CUEMM_STREAM_SPANS_ALWAYS;
    m->heaps[m->nheaps++] = h;
    cuemm__thread_heap_keep_share(m);
    pthread_mutex_lock(&g_lock);
    h->gnext = g_heaps;
    if (g_heaps)
      g_heaps->gprev = h;
    g_heaps = h;
    pthread_mutex_unlock(&g_lock);
  }
  /* The slot it takes: a free one, one of a manager that is gone, or the
   * last (whose heap is left to be adopted). */
  int i = CUEMM__TLS_SLOTS - 1;
  for (int k = 0; k < CUEMM__TLS_SLOTS; k++)
    if (!cuemm__tls[k].h) {
      i = k;
      break;
    }
  if (cuemm__tls[i].h) {
    pthread_mutex_lock(&g_lock);
    if (heap_registered(cuemm__tls[i].h))
      atomic_store(&cuemm__tls[i].h->orphan, 1);
    pthread_mutex_unlock(&g_lock);
  }
  h->trim_mark = cuemm__thread_heap_cap(m);
  if (cuemm__pool_is_suspended(m->pool))
    atomic_fetch_or_explicit(&h->want, CUEMM__HEAP_WANT_HOLD, memory_order_seq_cst);
  cuemm__tls[i] = cuemm__tls[0];
  cuemm__tls[0] = (cuemm__tls_slot){ m, m->serial, h };
  pthread_setspecific(g_key, (void *)1);
  *out = h;
  return CUDA_SUCCESS;
}

void cuemm__thread_heaps_stats(cuemm_manager *m, cuemm_stats *s)
{
  for (uint32_t i = 0; i < m->nheaps; i++) {
    cuemm__heap *h = m->heaps[i];
    cuemm__heap_lock(h);
    s->live_bytes += h->live_bytes;
    s->live_count += h->live_count;
    s->allocs += h->allocs;
    s->frees += h->frees;
    s->stream_cached_bytes += h->cached_bytes;
    s->stream_cached_count += h->cached_count;
    s->stream_events += h->events_recorded;
    s->stream_event_waits += h->event_waits;
    s->stream_steals += h->steals;
    cuemm__span_stats(m, h, &s->stream_spans, &s->stream_span_bytes, &s->stream_span_free_bytes);
    cuemm__heap_unlock(h);
  }
  if (m->pstreams) {
    s->stream_events += m->pstreams->events_recorded;
    s->stream_event_waits += m->pstreams->event_waits;
    s->stream_steals += m->pstreams->steals;
  }
  s->stream_heaps = m->nheaps;
  s->stream_reclaims = m->stream_reclaims;
}

void cuemm__thread_heaps_grown(cuemm_manager *m, size_t want)
{
  if (m->cache_halvings >= CUEMM__CACHE_HALVINGS)
    return;
  size_t cached = 0;
  for (uint32_t i = 0; i < m->nheaps; i++) {
    cuemm__heap_lock(m->heaps[i]);
    cached += m->heaps[i]->cached_bytes;
    cuemm__heap_unlock(m->heaps[i]);
  }
  if (cached < want)
    return;
  /* A cache's mark is set when it trims and when its thread attaches
   * (cuemm__exchange_trim_heap): the halved bound takes effect at each
   * cache's next trim, and one that keeps within the mark it has keeps
   * what it keeps.  Lowering every mark at once took the one-thread loop
   * of bench-heap's mixed sizes, whose speed is its cache of some 60 MiB
   * of large blocks, from 549 to 718 instructions a replacement at 2 MiB
   * and from 729 to 1,432 at 8 MiB (simcuda, callgrind). */
  m->cache_halvings++;
}

size_t cuemm__thread_heaps_live(cuemm_manager *m, size_t *bytes)
{
  size_t n = 0, b = 0;
  for (uint32_t i = 0; i < m->nheaps; i++) {
    n += m->heaps[i]->live_count;
    b += m->heaps[i]->live_bytes;
  }
  if (bytes)
    *bytes = b;
  return n;
}

size_t cuemm__thread_heaps_fini(cuemm_manager *m, int use_driver)
{
  size_t leaked = 0;
  pthread_mutex_lock(&g_lock);
  for (uint32_t i = 0; i < m->nheaps; i++) {
    cuemm__heap *h = m->heaps[i];
    if (h->gprev)
      h->gprev->gnext = h->gnext;
    else
      g_heaps = h->gnext;
    if (h->gnext)
      h->gnext->gprev = h->gprev;
  }
  pthread_mutex_unlock(&g_lock);
  for (uint32_t i = 0; i < m->nheaps; i++) {
    cuemm__heap *h = m->heaps[i];
    leaked += cuemm__event_drop_all(m, h, use_driver);
    free(h->uses);
    cuemm__heap_fini(h);
    free(h);
  }
  free(m->heaps);
  m->heaps = NULL;
  m->nheaps = m->capheaps = 0;
  cuemm__span_fini_all(m);
  if (m->pstreams) {
    leaked += cuemm__event_drop_all(m, m->pstreams, use_driver);
    cuemm__heap_fini(m->pstreams);
    free(m->pstreams);
    m->pstreams = NULL;
  }
  /* This thread's slot must not outlive the manager (a later manager may
   * get its address; the serial tells them apart for other threads). */
  for (int i = 0; i < CUEMM__TLS_SLOTS; i++)
    if (cuemm__tls[i].m == m)
      cuemm__tls[i] = (cuemm__tls_slot){ 0 };
  return leaked;
}

int cuemm__thread_heaps_live_size(cuemm_manager *m, const cuemm__owned_entry *e, size_t *bytes)
{
  cuemm__heap *o = m->heaps[e->aux];
  cuemm__heap_lock(o);
  uint32_t rec = cuemm__heap_find(o, e->key);
  int live = rec != CUEMM__HEAP_NIL && o->b[rec].state == CUEMM__HB_LIVE;
  if (live)
    *bytes = o->b[rec].req;
  cuemm__heap_unlock(o);
  return live;
}
