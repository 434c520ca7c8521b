/* stream.c: owns the stream-ordered path: cuemm_alloc_async,
 * cuemm_free_async, cuemm_record_stream and cuemm_stream_release, the
 * thread heaps they run on (heap.h), when a block freed on one stream may
 * serve another, and giving cached blocks back to the pool.
 *
 * The rule is the driver's own (cuMemAllocAsync / cuMemFreeAsync): a block
 * freed on stream S is reusable at once by later work on S, since stream
 * order runs that work after everything queued before the free; another
 * stream may take it only once an event recorded on S after the free has
 * completed, or after it was made to wait on that event (cuStreamWaitEvent,
 * CUEMM_STREAM_REUSE=wait).  Events are recorded lazily, one per batch: only
 * when another stream (or the pool) wants blocks that S freed after its last
 * event, and then one event covers every such free.  They are queried, never
 * waited on by the host, and come from a small cache per heap.
 *
 * Threads: each thread has a heap per manager, found through a thread-local
 * slot, so the common alloc and free take no shared lock.  A free from a
 * thread that does not hold the block moves it into the freeing thread's
 * heap (through the manager's owned table, which records which heap holds
 * each block it gave out).  The pool takes idle cached blocks back before
 * it grows (cuemm__stream_reclaim), so a heap never makes the pool map more.
 * A thread that exits leaves its heap to the manager; the next new thread
 * adopts it.
 *
 * A thread's cache keeps small blocks, and of a larger size the few each
 * stream freed last (heap_admits): a block whose size recurs soon stays on
 * the fast path, and the others go back to the pool, where blocks freed on
 * one stream merge and serve that stream at once (see "blocks freed on a
 * stream, in the pool" below).  So large blocks coalesce as they would in
 * a pool without streams, and such a free needs no event.  A block of a
 * size the cache keeps enters it when the pool hands it out, LIVE, so that
 * its free takes the fast path too.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "nvtx.h"
#include "stream.h"

#define STREAM_TLS_SLOTS 8

/* ---- the thread's heaps ------------------------------------------------------- */

typedef struct tls_slot {
  const cuemm_manager *m;
  uint64_t serial;
  cuemm__heap *h;
} tls_slot;

/* initial-exec: the fast paths read it with one fs-relative load instead of
 * a call to __tls_get_addr (a tenth of a pooled pair).  Its 192 bytes fit
 * the static TLS space glibc keeps for libraries loaded later (dlopen, as
 * Python's ctypes does). */
static _Thread_local tls_slot tls[STREAM_TLS_SLOTS] __attribute__((tls_model("initial-exec")));

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
static CUstream retired_key(void)
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
  for (int i = 0; i < STREAM_TLS_SLOTS; i++) {
    cuemm__heap *h = tls[i].h;
    tls[i] = (tls_slot){ 0 };
    if (!h || !heap_registered(h))
      continue;
    cuemm__heap_lock(h);
    for (uint32_t k = 0; k < h->nst; k++)
      if (h->st[k].s == CU_STREAM_PER_THREAD) {
        h->st[k].s = retired_key();
        h->st[k].retired = 1;
      }
    cuemm__heap_forget_last(h);
    atomic_store(&h->orphan, 1);
    cuemm__heap_unlock(h);
  }
  pthread_mutex_unlock(&g_lock);
}

static __attribute__((noinline)) cuemm__heap *heap_of_slow(const cuemm_manager *m)
{
  for (int i = 1; i < STREAM_TLS_SLOTS; i++)
    if (tls[i].m == m && tls[i].serial == m->serial) {
      tls_slot t = tls[i];
      tls[i] = tls[0];
      tls[0] = t;
      return t.h;
    }
  return NULL;
}

/* The bytes a thread's cache keeps before it gives idle blocks back: a
 * quarter of the pool's mapped bytes, at least CACHE_CAP, at most the
 * release threshold.  Cached blocks keep their places and sizes, so a
 * cache large against the pool scatters blocks over it that merged free
 * space would serve better (a two-stream serving trace, 1.2 GB live, held
 * 1.49x its live bytes with 1 GiB caches, 1.18x with 256 MiB ones); one
 * small against the pool gives back at nearly every free of a large
 * training step (a GPT-2 trace, 10 GB live: 970 trims a pass with 256 MiB,
 * each an event and a walk of the pool, 230 with a quarter). */
#define CACHE_CAP ((size_t)256 << 20)

static size_t cache_cap(const cuemm_manager *m)
{
  size_t quarter = __atomic_load_n(&m->pool->mapped, __ATOMIC_RELAXED) / 4;
  size_t cap = quarter > CACHE_CAP ? quarter : CACHE_CAP;
  return m->pool->threshold < cap ? m->pool->threshold : cap;
}

/* Whether the calling thread's first slot is m's (its heap may still be
 * NULL). */
static inline int heap_slot_first(const cuemm_manager *m)
{
  return tls[0].m == m && tls[0].serial == m->serial;
}

/* The calling thread's heap for m, or NULL when it has none yet. */
static inline cuemm__heap *heap_of(const cuemm_manager *m)
{
  if (__builtin_expect(heap_slot_first(m), 1))
    return tls[0].h;
  return heap_of_slow(m);
}

/* Gives the calling thread a heap for m: an orphan's, or a new one.
 * m's lock held. */
static CUresult heap_attach_locked(cuemm_manager *m, cuemm__heap **out)
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
    m->heaps[m->nheaps++] = h;
    pthread_mutex_lock(&g_lock);
    h->gnext = g_heaps;
    if (g_heaps)
      g_heaps->gprev = h;
    g_heaps = h;
    pthread_mutex_unlock(&g_lock);
  }
  /* The slot it takes: a free one, one of a manager that is gone, or the
   * last (whose heap is left to be adopted). */
  int i = STREAM_TLS_SLOTS - 1;
  for (int k = 0; k < STREAM_TLS_SLOTS; k++)
    if (!tls[k].h) {
      i = k;
      break;
    }
  if (tls[i].h) {
    pthread_mutex_lock(&g_lock);
    if (heap_registered(tls[i].h))
      atomic_store(&tls[i].h->orphan, 1);
    pthread_mutex_unlock(&g_lock);
  }
  h->trim_mark = cache_cap(m);
  if (cuemm__pool_is_suspended(m->pool))
    atomic_fetch_or_explicit(&h->want, CUEMM__HEAP_WANT_HOLD, memory_order_seq_cst);
  tls[i] = tls[0];
  tls[0] = (tls_slot){ m, m->serial, h };
  pthread_setspecific(g_key, (void *)1);
  *out = h;
  return CUDA_SUCCESS;
}

/* ---- events --------------------------------------------------------------------- */

static int stream_is_own_only(CUstream s)
{
  /* The per-thread default stream names a different stream on every thread:
   * only the heap's own thread may record on it. */
  return s == CU_STREAM_PER_THREAD;
}

/* Asks the driver which of stream a's recorded events have completed, and
 * moves its `done` forward.  Context current. */
static CUresult stream_query(cuemm_manager *m, cuemm__heap *h, cuemm__hstream *a)
{
  unsigned k = 0;
  CUresult r = CUDA_SUCCESS;
  while (k < a->nbatch) {
    r = m->drv->EventQuery(a->batch[k].ev);
    if (r == CUDA_ERROR_NOT_READY) {
      r = CUDA_SUCCESS;
      break;
    }
    if (r != CUDA_SUCCESS) {
      cuemm__driver_error(r, "cuEventQuery (the event of a batch of frees on stream %p)", (void *)a->s);
      break;
    }
    a->done = a->batch[k].seq;
    h->evcache[h->nev++] = a->batch[k].ev;
    k++;
  }
  if (k) {
    memmove(a->batch, a->batch + k, (a->nbatch - k) * sizeof a->batch[0]);
    a->nbatch -= k;
  }
  return r;
}

/* Records one event on stream a covering every free on it so far.  Context
 * current; `a` must not be retired, and a per-thread stream only by its own
 * thread. */
/* An idle event of the heap's cache, or a new one (room made in the cache
 * first, so that it can always go back).  Context current. */
static CUresult event_get(cuemm_manager *m, cuemm__heap *h, CUevent *ev, const char *why)
{
  if (h->nev) {
    *ev = h->evcache[--h->nev];
    return CUDA_SUCCESS;
  }
  if (h->events_made == h->capev) {
    unsigned cap = h->capev ? h->capev * 2 : 8;
    CUevent *g = realloc(h->evcache, cap * sizeof *g);
    if (!g)
      return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "no host memory for an event (%s)", why);
    h->evcache = g;
    h->capev = cap;
  }
  CUresult r = m->drv->EventCreate(ev, CU_EVENT_DISABLE_TIMING);
  if (r != CUDA_SUCCESS)
    return cuemm__driver_error(r, "cuEventCreate (%s)", why);
  h->events_made++;
  return CUDA_SUCCESS;
}

static CUresult stream_record(cuemm_manager *m, cuemm__heap *h, cuemm__hstream *a)
{
  if (a->covered == a->freed || a->nbatch == CUEMM__HEAP_BATCHES)
    return CUDA_SUCCESS;
  CUevent ev;
  CUresult r = event_get(m, h, &ev, "for a batch of frees");
  if (r != CUDA_SUCCESS)
    return r;
  r = m->drv->EventRecord(ev, a->s);
  if (r != CUDA_SUCCESS) {
    h->evcache[h->nev++] = ev;
    return cuemm__driver_error(r, "cuEventRecord on stream %p (after %" PRIu64 " frees)", (void *)a->s,
                               a->freed - a->covered);
  }
  a->batch[a->nbatch++] = (cuemm__hbatch){ ev, a->freed };
  a->covered = a->freed;
  h->events_recorded++;
  return CUDA_SUCCESS;
}

/* Destroys the heap's events (with `use_driver`); returns how many the
 * driver refused to destroy (leaked), the first failure's message kept. */
static size_t heap_drop_events(cuemm_manager *m, cuemm__heap *h, int use_driver)
{
  size_t failed = 0;
  for (uint32_t k = 0; k < h->nst; k++) {
    cuemm__hstream *a = &h->st[k];
    for (unsigned i = 0; i < a->nbatch; i++)
      h->evcache[h->nev++] = a->batch[i].ev;
    a->nbatch = 0;
  }
  for (unsigned i = 0; use_driver && i < h->nev; i++) {
    CUresult r = m->drv->EventDestroy(h->evcache[i]);
    if (r != CUDA_SUCCESS && failed++ == 0)
      cuemm__driver_error(r, "cuEventDestroy");
  }
  h->nev = 0;
  return failed;
}

/* ---- blocks freed on a stream, in the pool ---------------------------------------------- */

/* A block freed on stream S goes back to the pool at once, although work
 * queued on S before the free may still use it: the pool tags it with S
 * (cuemm__sa_free_tagged), merges it with blocks freed on S and with idle
 * space beside it, and serves S's requests from it, which stream order
 * makes safe.  Other requests get it once an event recorded on S after the
 * free has completed (pool_pick, when it would be their best fit;
 * pool_settle, before the pool grows and past the release threshold).  The streams and their events are
 * kept as a heap keeps its own, in m->pstreams, under m's lock; a tag is a
 * stream's index there plus one.  The per-thread default stream never gets
 * a tag: only its own thread may record on it, so its blocks stay in that
 * thread's cache. */

static inline size_t round_block(size_t size)
{
  return (size + CUEMM__SA_ALIGN - 1) & ~(CUEMM__SA_ALIGN - 1);
}

static cuemm__heap *pool_streams(cuemm_manager *m)
{
  if (!m->pstreams) {
    cuemm__heap *ps = malloc(sizeof *ps);
    if (!ps)
      return NULL;
    cuemm__heap_init(ps, m, UINT32_MAX);
    m->pstreams = ps;
  }
  return m->pstreams;
}

/* The tag of `stream`'s blocks in the pool, 0 when it has none.  m's lock
 * held. */
static uint32_t pool_tag(const cuemm_manager *m, CUstream stream)
{
  cuemm__heap *ps = m->pstreams;
  if (!ps || stream_is_own_only(stream))
    return 0;
  uint32_t k = cuemm__heap_stream(ps, stream);
  return k == CUEMM__HEAP_NIL ? 0 : k + 1;
}

/* The pool's stream table's place for a stream it has not met: a released
 * stream's place, once nothing of it is left, serves anew, so the table
 * stays as small as the streams in use.  NIL when host memory ran out. */
static __attribute__((noinline)) uint32_t pool_stream_add(cuemm_manager *m, CUstream stream)
{
  cuemm__heap *ps = pool_streams(m);
  if (!ps)
    return CUEMM__HEAP_NIL;
  for (uint32_t j = 0; j < ps->nst; j++)
    if (ps->st[j].retired && !ps->st[j].nbatch && !cuemm__sa_tag_bytes(&m->pool->sa, j + 1)) {
      memset(&ps->st[j], 0, sizeof ps->st[j]);
      ps->st[j].s = stream ? stream : CU_STREAM_LEGACY;
      cuemm__heap_forget_last(ps);
      return j;
    }
  return cuemm__heap_add_stream(ps, stream);
}

/* Gives pool block blk back as freed on `stream` (never the per-thread
 * default stream).  Returns 0, or -1 when host memory ran out (nothing
 * changed).  m's lock held. */
static inline __attribute__((always_inline)) int pool_give_on(cuemm_manager *m, uint32_t blk, CUstream stream)
{
  cuemm__heap *ps = m->pstreams;
  uint32_t k = ps ? cuemm__heap_stream(ps, stream) : CUEMM__HEAP_NIL;
  if (k == CUEMM__HEAP_NIL && (k = pool_stream_add(m, stream)) == CUEMM__HEAP_NIL)
    return -1;
  ps = m->pstreams;
  cuemm__hstream *a = &ps->st[k];
  if (cuemm__sa_free_tagged(&m->pool->sa, blk, k + 1, a->freed + 1) != 0)
    return -1;
  a->freed++;
  return 0;
}

/* pool_give_on, or where host memory ran out, the pending queue (whose
 * flush synchronizes): never lost.  m's lock held. */
static inline __attribute__((always_inline)) void pool_return_on(cuemm_manager *m, uintptr_t ptr, size_t size,
                                                                 uint32_t blk, CUstream stream)
{
  if (__builtin_expect(pool_give_on(m, blk, stream) == 0, 1))
    return;
  if (cuemm__pending_push(&m->pending, ptr, size, CUEMM__KIND_POOL, blk) == 0)
    m->pool_pending++;
  else
    cuemm__sa_free_tagged(&m->pool->sa, blk, 0, 0); /* no memory for either: cannot happen in practice */
}

/* The settle hook: makes idle what the pool holds of streams whose work is
 * done.  m's lock held, context current. */
static void pool_settle(cuemm_manager *m, int synced)
{
  cuemm__heap *ps = m->pstreams;
  if (!ps)
    return;
  cuemm__sa *sa = &m->pool->sa;
  for (uint32_t k = 0; k < ps->nst && sa->tagged_bytes; k++) {
    cuemm__hstream *a = &ps->st[k];
    if (!cuemm__sa_tag_bytes(sa, k + 1))
      continue;
    if (synced) {
      cuemm__sa_untag(sa, k + 1, a->freed);
      continue;
    }
    stream_query(m, ps, a);
    if (a->covered < a->freed && !a->retired && stream_record(m, ps, a) == CUDA_SUCCESS)
      stream_query(m, ps, a);
    if (a->done)
      cuemm__sa_untag(sa, k + 1, a->done);
  }
}

/* The release threshold covers the blocks freed on streams too: past it,
 * an event on each of their streams tells which are done; those become
 * idle, and what is then wholly free beyond the threshold is released.
 * Tried again only once another quarter of the threshold has been freed so
 * (the pool's stream table keeps the mark), so that a stream whose work
 * lags does not cost an event per free.  m's lock held. */
static __attribute__((noinline)) void pool_trim_tagged_now(cuemm_manager *m)
{
  cuemm__pool *pool = m->pool;
  cuemm__heap *ps = m->pstreams;
  if (!cuemm__pool_release_due(pool)) {
    ps->trim_mark = pool->sa.tagged_bytes + pool->threshold / 4 + pool->unit;
    return;
  }
  char keep[512];
  snprintf(keep, sizeof keep, "%s", cuemm_last_error());
  cuemm__ctx_guard g;
  if (cuemm__ctx_enter(m, &g) == CUDA_SUCCESS) {
    pool_settle(m, 0);
    if (cuemm__pool_release_due(pool))
      cuemm__pool_release(pool, cuemm__pool_keep(pool));
    cuemm__ctx_leave(m, &g, CUDA_SUCCESS);
  }
  ps->trim_mark = pool->sa.tagged_bytes + pool->threshold / 4 + pool->unit;
  cuemm__error(CUDA_SUCCESS, "%s", keep); /* the free succeeded either way */
}

static inline void pool_trim_tagged(cuemm_manager *m)
{
  if (__builtin_expect(m->pstreams && m->pool->sa.tagged_bytes >= m->pstreams->trim_mark, 0))
    pool_trim_tagged_now(m);
}

/* Takes the best fit for `size` bytes among the pool's idle blocks, those
 * freed on the requesting stream (tag `own`), and those freed on other
 * streams whose work is done.  When another stream's block fits best, an
 * event tells whether its work is done: recorded on that stream if none
 * covers the free yet, then queried, never waited on by the host; with
 * `wait` (CUEMM_STREAM_REUSE=wait, or =internal where the pool would grow
 * otherwise) the requesting stream waits on it instead.  Its
 * stream's blocks that are done become idle (and merge) on the way.
 * Returns 0 with the block, or -1 when none fits (the caller's slow path
 * settles, reclaims, grows).  m's lock held. */
static __attribute__((noinline)) int pool_pick_across(cuemm_manager *m, size_t size, uint32_t own, CUstream stream,
                                                      int wait, uint32_t best, uintptr_t *ptr, uint32_t *blk)
{
  cuemm__sa *sa = &m->pool->sa;
  cuemm__heap *ps = m->pstreams;
  size_t rs = round_block(size);
  uint64_t busy = 0; /* tags (the first 64) whose blocks this request found in use */
  int entered = 0, first = 1;
  cuemm__ctx_guard g;
  for (;; first = 0) {
    if (!first) /* the first round's is the caller's */
      best = cuemm__sa_fit_for(sa, rs, own);
    uint32_t bt = best != CUEMM__SA_NIL ? sa->b[best].tag : 0;
    /* Other streams' blocks only when this stream's and the idle ones fit
     * badly (an eighth or more to spare) or not at all: asking an event for
     * every close fit would cost more than the fit saves. */
    int close = best != CUEMM__SA_NIL && sa->b[best].size - rs < rs / 8;
    for (uint32_t t = 1; !close && ps && sa->tagged_bytes && t <= ps->nst; t++) {
      if (t == own || t > 64 || (busy >> (t - 1) & 1))
        continue;
      uint32_t c = cuemm__sa_fit_below(sa, rs, t, best == CUEMM__SA_NIL ? SIZE_MAX : sa->b[best].size);
      if (c != CUEMM__SA_NIL)
        best = c, bt = t;
    }
    if (best == CUEMM__SA_NIL || bt == 0 || bt == own)
      break;
    cuemm__hstream *a = &ps->st[bt - 1];
    uint64_t seq = sa->b[best].seq;
    if (!entered && cuemm__ctx_enter(m, &g) == CUDA_SUCCESS)
      entered = 1;
    if (entered) {
      stream_query(m, ps, a);
      if (a->covered < seq && !a->retired && stream_record(m, ps, a) == CUDA_SUCCESS)
        stream_query(m, ps, a);
    }
    if (a->done >= seq) {
      cuemm__sa_untag(sa, bt, a->done); /* idle now, merged: choose again */
      ps->steals++;
      continue;
    }
    if (entered && wait && a->covered >= seq) {
      unsigned i = 0;
      while (a->batch[i].seq < seq)
        i++;
      CUresult r = m->drv->StreamWaitEvent(stream ? stream : CU_STREAM_LEGACY, a->batch[i].ev, 0);
      if (r == CUDA_SUCCESS) {
        ps->event_waits++;
        ps->steals++;
        break;
      }
      cuemm__driver_error(r, "cuStreamWaitEvent(stream %p, the event of stream %p)", (void *)stream, (void *)a->s);
    }
    busy |= (uint64_t)1 << (bt - 1);
  }
  if (entered)
    cuemm__ctx_leave(m, &g, CUDA_SUCCESS);
  if (best == CUEMM__SA_NIL)
    return -1;
  cuemm__sa_take(sa, best, rs);
  *ptr = (uintptr_t)m->pool->base + sa->b[best].off;
  *blk = best;
  return 0;
}

/* pool_pick's common case inline: the stream's own or an idle block fits
 * closely, or no other stream has blocks in the pool. */
static inline __attribute__((always_inline)) int pool_pick(cuemm_manager *m, size_t size, uint32_t own,
                                                           CUstream stream, int wait, uintptr_t *ptr, uint32_t *blk)
{
  cuemm__sa *sa = &m->pool->sa;
  size_t rs = round_block(size);
  uint32_t best = cuemm__sa_fit_for(sa, rs, own);
  int close = best != CUEMM__SA_NIL && sa->b[best].size - rs < rs / 8;
  if (!close && sa->tagged_bytes > cuemm__sa_tag_bytes(sa, own))
    return pool_pick_across(m, size, own, stream, wait, best, ptr, blk);
  if (best == CUEMM__SA_NIL)
    return -1;
  cuemm__sa_take(sa, best, rs);
  *ptr = (uintptr_t)m->pool->base + sa->b[best].off;
  *blk = best;
  return 0;
}

/* ---- cross-stream reuse ------------------------------------------------------------ */

/* Moves cached block r (of another stream) to LIVE on hs. */
static void take_cached(cuemm__heap *h, uint32_t r, uint32_t hs, size_t req)
{
  cuemm__heap_unbin(h, r);
  cuemm__hblock *b = &h->b[r];
  b->state = CUEMM__HB_LIVE;
  b->hs = hs;
  b->req = req;
  h->live_bytes += req;
  h->live_count++;
  h->allocs++;
  h->steals++;
}

/* A stream fed by another (a consumer of a producer's frees) steals from
 * the same bin again and again: that bin first, with no walk of the
 * streams and no lookup, on the owner's fast path.  NIL when it has no
 * such block now. */
static inline __attribute__((always_inline)) uint32_t steal_hint(cuemm__heap *h, uint32_t hs, size_t rs, size_t req)
{
  uint32_t sb = h->st[hs].steal_bin;
  if (sb >= h->bincap)
    return CUEMM__HEAP_NIL;
  uint64_t key = h->bins[sb].key;
  uint32_t k = (uint32_t)(key >> 40) - 1, t = h->bins[sb].tail;
  if (k == hs || k >= h->nst || key != cuemm__heap_binkey(k, rs) || t == CUEMM__HEAP_NIL || !h->st[k].done ||
      h->b[t].seq > h->st[k].done)
    return CUEMM__HEAP_NIL;
  take_cached(h, t, hs, req);
  return t;
}

/* A block of size rs that another stream freed and whose event is known
 * complete: no driver call, so the owner's fast path may look.  *others
 * tells whether another stream holds blocks of that size at all (the slow
 * path may then learn with an event whether one is free to take). */
static __attribute__((noinline)) uint32_t steal_idle(cuemm__heap *h, uint32_t hs, size_t rs, size_t req,
                                                     int *others)
{
  if (h->cached_count == h->st[hs].cached_count)
    return CUEMM__HEAP_NIL; /* no other stream keeps anything */
  for (uint32_t k = 0; k < h->nst; k++) {
    if (k == hs || !h->st[k].cached_count)
      continue;
    uint32_t bin = cuemm__heap_bin(h, k, rs);
    if (bin == CUEMM__HEAP_NIL)
      continue;
    uint32_t t = h->bins[bin].tail;
    *others |= t != CUEMM__HEAP_NIL;
    if (t != CUEMM__HEAP_NIL && h->st[k].done && h->b[t].seq <= h->st[k].done) {
      h->st[hs].steal_bin = bin;
      take_cached(h, t, hs, req);
      return t;
    }
  }
  return CUEMM__HEAP_NIL;
}

/* Finds a block of size rs that another stream of this heap freed and that
 * stream hs may use now.  Owner's thread, heap locked.  Returns the record
 * or NIL; a driver failure is NIL too (the caller falls back to the pool),
 * with the message kept. */
static uint32_t steal(cuemm_manager *m, cuemm__heap *h, uint32_t hs, size_t rs, size_t req)
{
  int entered = 0;
  cuemm__ctx_guard g;
  uint32_t got = CUEMM__HEAP_NIL;
  for (uint32_t k = 0; k < h->nst && got == CUEMM__HEAP_NIL; k++) {
    if (k == hs)
      continue;
    uint32_t bin = cuemm__heap_bin(h, k, rs);
    if (bin == CUEMM__HEAP_NIL || h->bins[bin].tail == CUEMM__HEAP_NIL)
      continue;
    cuemm__hstream *a = &h->st[k];
    uint32_t t = h->bins[bin].tail; /* the oldest: the first an event covers */
    if (h->b[t].seq > a->done) {
      if (!entered) {
        if (cuemm__ctx_enter(m, &g) != CUDA_SUCCESS)
          return CUEMM__HEAP_NIL;
        entered = 1;
      }
      if (stream_query(m, h, a) != CUDA_SUCCESS)
        continue;
      if (h->b[t].seq > a->done && a->covered < h->b[t].seq && !a->retired)
        if (stream_record(m, h, a) == CUDA_SUCCESS)
          stream_query(m, h, a);
    }
    if (h->b[t].seq <= a->done) {
      got = t;
      break;
    }
    if (m->cfg.stream_reuse == CUEMM_STREAM_REUSE_WAIT && a->covered >= h->b[t].seq) {
      /* The first batch that covers it: make the allocating stream wait. */
      unsigned i = 0;
      while (a->batch[i].seq < h->b[t].seq)
        i++;
      CUresult r = m->drv->StreamWaitEvent(h->st[hs].s, a->batch[i].ev, 0);
      if (r == CUDA_SUCCESS) {
        h->event_waits++;
        got = t;
      } else
        cuemm__driver_error(r, "cuStreamWaitEvent(stream %p, the event of stream %p)", (void *)h->st[hs].s,
                            (void *)a->s);
    }
  }
  if (got != CUEMM__HEAP_NIL)
    take_cached(h, got, hs, req);
  if (entered)
    cuemm__ctx_leave(m, &g, CUDA_SUCCESS);
  return got;
}

/* ---- giving cached blocks back ------------------------------------------------------- */

/* Returns cached blocks of h to the pool, oldest first, until at most
 * `keep` bytes stay cached: idle ones (their stream's `done` passed them),
 * and the others as freed on their stream (pool_give_on), except those of
 * the per-thread default stream or a released one, which wait.  With
 * `want` (the pool would grow for a request of `want` bytes otherwise),
 * idle blocks only (an event is recorded to learn which), every one of
 * them: stopping once the request fits left the rest in place, where they
 * split the free space the pool then placed the request and the next ones
 * around (the trace corpus's multi-thread server held 1.71x its live bytes
 * so, 1.58x with all given back).  With `all`, every cached
 * block, those that may still be in use through the pending queue (whose
 * flush synchronizes the context).  Idle blocks merge with their free
 * neighbours at once: the pool's own cache of exact sizes would keep them
 * where they are, and the heap was that cache already.  Both locks held,
 * context current.  Returns the bytes given back. */
static size_t heap_give_back(cuemm_manager *m, cuemm__heap *h, int all, size_t keep, size_t want)
{
  size_t given = 0;
  for (uint32_t k = 0; k < h->nst; k++) {
    cuemm__hstream *a = &h->st[k];
    if (!a->cached_count)
      continue;
    stream_query(m, h, a);
    if (want && !all && a->covered < a->freed && !a->retired && !stream_is_own_only(a->s)) {
      stream_record(m, h, a);
      stream_query(m, h, a);
    }
  }
  for (uint32_t r = h->oldest, next; r != CUEMM__HEAP_NIL && (all || h->cached_bytes > keep); r = next) {
    cuemm__hblock *b = &h->b[r];
    next = b->newer;
    const cuemm__hstream *a = &h->st[b->hs];
    int idle = b->seq <= a->done;
    if (!idle && !all && (want || a->retired || stream_is_own_only(a->s)))
      continue;
    uintptr_t ptr = b->ptr;
    size_t size = b->size;
    uint32_t blk = b->blk;
    if (!idle && all) {
      if (cuemm__pending_push(&m->pending, ptr, size, CUEMM__KIND_POOL, blk) != 0)
        continue; /* stays cached: nothing is lost */
      m->pool_pending++;
    } else if (!idle) {
      if (pool_give_on(m, blk, a->s) != 0)
        continue;
    } else
      cuemm__sa_free_tagged(&m->pool->sa, blk, 0, 0);
    cuemm__heap_unbin(h, r);
    cuemm__heap_remove(h, r);
    cuemm__owned_entry *e = cuemm__owned_find(&m->owned, ptr);
    if (e)
      cuemm__owned_remove(&m->owned, e);
    given += size;
  }
  return given;
}

void cuemm__stream_hold(cuemm_manager *m, int on)
{
  for (uint32_t i = 0; i < m->nheaps; i++) {
    cuemm__heap *h = m->heaps[i];
    if (!on) {
      atomic_fetch_and_explicit(&h->want, ~CUEMM__HEAP_WANT_HOLD, memory_order_release);
      continue;
    }
    atomic_fetch_or_explicit(&h->want, CUEMM__HEAP_WANT_HOLD, memory_order_seq_cst);
    /* Taking the heap waits, with the handshake's fence, for an owner
     * inside its fast path to leave; its next entry sees the flag. */
    cuemm__heap_lock(h);
    cuemm__heap_unlock(h);
  }
}

static size_t stream_reclaim(cuemm_manager *m, int all, size_t want)
{
  if (!m->nheaps)
    return 0;
  size_t given = 0;
  cuemm__ctx_guard g;
  if (cuemm__ctx_enter(m, &g) != CUDA_SUCCESS)
    return 0;
  for (uint32_t i = 0; i < m->nheaps; i++) {
    cuemm__heap *h = m->heaps[i];
    cuemm__heap_lock(h);
    if (h->cached_count)
      given += heap_give_back(m, h, all, 0, all ? 0 : want);
    cuemm__heap_unlock(h);
  }
  cuemm__ctx_leave(m, &g, CUDA_SUCCESS);
  if (given)
    m->stream_reclaims++;
  return given;
}

/* ---- the public calls ------------------------------------------------------------------ */

/* Managed and system memory (managed.c) have no stream-ordered pool: a
 * block of theirs is idle when it is handed out, so it serves any stream,
 * and its free takes the deferred way, whose flush synchronizes the
 * context.  `r` is what the deferred call returned; a failure's message
 * says which stream call it stood for. */
static CUresult deferred_instead(CUresult r, const char *fn, CUstream stream)
{
  if (r != CUDA_SUCCESS)
    cuemm__error_append(" (%s on stream %p, a manager of managed or system memory: its blocks follow the deferred "
                        "path)", fn, (void *)stream);
  return r;
}

/* cuemm_record_stream on a manager of managed or system memory: nothing to
 * do for a live block of it, and an error for anything else. */
static CUresult live_deferred_block(cuemm_manager *m, CUdeviceptr dp)
{
  cuemm__lock_acquire(&m->lock);
  cuemm__owned_entry *e = cuemm__owned_find(&m->owned, (uintptr_t)dp);
  int live = e && !e->pending;
  cuemm__lock_release(&m->lock);
  if (live)
    return CUDA_SUCCESS;
  return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_record_stream: 0x%llx is not the start of a live allocation of "
                      "this manager (allocated elsewhere, an interior pointer, or freed already)",
                      (unsigned long long)dp);
}

/* Which way the stream calls go on a manager: its stream-ordered pool; the
 * deferred path (managed or system memory, see deferred_instead); or a
 * refusal, whose CUresult goes to *why with the message set. */
typedef enum { PATH_STREAM, PATH_DEFERRED, PATH_REFUSED } stream_path;

static __attribute__((noinline)) stream_path path_checked(const cuemm_manager *m, const char *fn, CUresult *why)
{
  if (!m) {
    *why = cuemm__error(CUDA_ERROR_INVALID_VALUE, "%s: manager is NULL", fn);
    return PATH_REFUSED;
  }
  if (!m->pool && m->managed)
    return PATH_DEFERRED;
  if (!m->pool) {
    *why = cuemm__error(CUDA_ERROR_NOT_SUPPORTED, "%s: this manager has no pool; the stream-ordered path serves pool "
                 "blocks only (create the manager with CUEMM_POOL=vmm or cuemm_config.pool = CUEMM_POOL_VMM)", fn);
    return PATH_REFUSED;
  }
  if (!m->drv->EventRecord || !m->drv->EventQuery || !m->drv->StreamWaitEvent) {
    *why = cuemm__error(CUDA_ERROR_NOT_SUPPORTED, "%s: the driver lacks the event entry points (cuEventRecord, "
                 "cuEventQuery, cuStreamWaitEvent) the stream-ordered path needs", fn);
    return PATH_REFUSED;
  }
  return PATH_STREAM;
}

/* path_checked's answer for the common case, one load on the fast paths:
 * the pool and the driver's entry points are fixed for a manager's life. */
static CUresult stream_attach(cuemm_manager *m)
{
  m->stream_ready = m->pool && m->drv->EventRecord && m->drv->EventQuery && m->drv->StreamWaitEvent;
  m->stream_inline = m->stream_ready && !m->log;
  return CUDA_SUCCESS;
}

static inline stream_path path_of(const cuemm_manager *m, const char *fn, CUresult *why)
{
  if (__builtin_expect(m && m->stream_ready, 1))
    return PATH_STREAM;
  return path_checked(m, fn, why);
}

static void heap_evict_large(cuemm_manager *m, cuemm__heap *h, uint32_t hs);

/* Record r of h (LIVE, or out of its bin) leaves the heap and its owned
 * entry goes: the block returns to the pool as freed on `stream`.  Both
 * locks held (or h entered by its owner, with the manager's lock). */
static void heap_to_pool(cuemm_manager *m, cuemm__heap *h, uint32_t r, CUstream stream)
{
  uintptr_t ptr = h->b[r].ptr;
  size_t size = h->b[r].size;
  uint32_t blk = h->b[r].blk;
  cuemm__heap_remove(h, r);
  cuemm__owned_entry *e = cuemm__owned_find(&m->owned, ptr);
  if (e)
    cuemm__owned_remove(&m->owned, e);
  pool_return_on(m, ptr, size, blk, stream);
}

/* The owner's entry into its heap off the fast path: entered, or locked
 * when another thread wants it.  Returns whether it entered (leave with
 * heap_exit). */
static inline int heap_get(cuemm__heap *h)
{
  if (cuemm__heap_enter(h))
    return 1;
  cuemm__heap_lock(h);
  return 0;
}

static inline void heap_exit(cuemm__heap *h, int entered)
{
  if (entered)
    cuemm__heap_leave(h);
  else
    cuemm__heap_unlock(h);
}

/* A block from the pool, under the manager's lock.  With `h` (the calling
 * thread's heap), a block of a size the heap keeps goes into it at once,
 * LIVE, so that its free takes the fast path; a large one first makes room
 * among the stream's kept large blocks (heap_evict_large), whose oldest
 * returns to the pool before the pick and may serve it.  Without, or where
 * host memory for the record ran out, it is the pool's, as cuemm_alloc's
 * are (its owned entry says so), until its free decides whether a thread's
 * cache keeps it. */
static __attribute__((noinline)) CUresult alloc_from_pool(cuemm_manager *m, cuemm__heap *h, CUdeviceptr *p,
                                                          size_t size, CUstream stream)
{
  size_t rs = round_block(size);
  uintptr_t ptr;
  uint32_t blk;
  int kept = rs < CUEMM__HEAP_LARGE || stream_is_own_only(stream) || m->cfg.stream_keep_large;
  if (rs > CUEMM__HEAP_LARGE_MAX || !kept)
    h = NULL; /* a block no thread's cache keeps */
  cuemm__lock_acquire(&m->lock);
  if (cuemm__pool_is_suspended(m->pool)) {
    m->st.alloc_failures++;
    cuemm__lock_release(&m->lock);
    return cuemm__pool_refuse_suspended(m->pool, "cuemm_alloc_async");
  }
  /* The heap is entered twice, around the pick and not across it: where
   * the pool must grow, it first takes idle blocks back from every
   * thread's heap (stream_reclaim), this one's too. */
  if (h && rs >= CUEMM__HEAP_LARGE && !stream_is_own_only(stream)) {
    int in = heap_get(h);
    heap_evict_large(m, h, cuemm__heap_stream(h, stream));
    heap_exit(h, in);
  }
  uint32_t tag = pool_tag(m, stream);
  cuemm_stream_reuse reuse = m->cfg.stream_reuse;
  CUresult r = pool_pick(m, size, tag, stream, reuse == CUEMM_STREAM_REUSE_WAIT, &ptr, &blk) == 0
                   ? CUDA_SUCCESS
                   : cuemm__pool_take_locked(m, size, tag, &ptr, &blk, reuse != CUEMM_STREAM_REUSE_INTERNAL);
  if (r == CUDA_ERROR_NOT_READY) {
    /* CUEMM_STREAM_REUSE=internal: the pool would grow, and no other way
     * served (blocks of streams known done, the threads' idle ones).  The
     * stream waits on another stream's event instead, where a block of
     * that stream fits; pool_take_locked's settle recorded the events.
     * Its reclaim may have given this stream its first blocks in the pool:
     * the tag is looked up again. */
    tag = pool_tag(m, stream);
    r = pool_pick(m, size, tag, stream, 1, &ptr, &blk) == 0 ? CUDA_SUCCESS
                                                          : cuemm__pool_take_locked(m, size, tag, &ptr, &blk, 1);
  }
  if (r == CUDA_SUCCESS) {
    /* The block remembers its stream (its descriptor's word): for
     * cuemm_record_stream and snapshots while the pool holds it. */
    m->pool->sa.b[blk].seq = (uint64_t)(uintptr_t)(stream ? stream : CU_STREAM_LEGACY);
    uint32_t rec = CUEMM__HEAP_NIL;
    int in = 0;
    if (h) {
      in = heap_get(h);
      uint32_t hs = cuemm__heap_stream(h, stream);
      if (hs == CUEMM__HEAP_NIL)
        hs = cuemm__heap_add_stream(h, stream);
      if (hs != CUEMM__HEAP_NIL && (rec = cuemm__heap_insert(h, ptr, rs, blk, hs, size)) != CUEMM__HEAP_NIL) {
        h->allocs++;
        if (rs >= CUEMM__HEAP_LARGE)
          h->st[hs].wanted[h->st[hs].nwanted++ % CUEMM__HEAP_WANTED] = rs;
      }
      heap_exit(h, in);
    }
    if (rec != CUEMM__HEAP_NIL ? cuemm__owned_add(&m->owned, ptr, rs, CUEMM__KIND_STREAM, h->index) == 0
                               : cuemm__owned_add(&m->owned, ptr, size, CUEMM__KIND_POOL, blk) == 0) {
      if (rec == CUEMM__HEAP_NIL)
        cuemm__account_alloc(m, size);
      else if (m->st.live_bytes + size > m->st.peak_bytes)
        m->st.peak_bytes = m->st.live_bytes + size; /* as cuemm__account_alloc, the block counted in its heap */
    } else {
      if (rec != CUEMM__HEAP_NIL) {
        in = heap_get(h);
        h->allocs--;
        cuemm__heap_remove(h, rec);
        heap_exit(h, in);
      }
      if (tag)
        pool_return_on(m, ptr, rs, blk, stream);
      else
        cuemm__pool_give(m->pool, blk);
      r = cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "cuemm_alloc_async: no host memory left to record the allocation");
    }
  }
  if (r != CUDA_SUCCESS)
    m->st.alloc_failures++;
  cuemm__lock_release(&m->lock);
  if (r == CUDA_SUCCESS) {
    *p = (CUdeviceptr)ptr;
    cuemm__nvtx_live(m->pool->nvtx, ptr, size);
  } else
    cuemm__error_append(" (cuemm_alloc_async of %zu bytes on stream %p)", size, (void *)stream);
  return r;
}

static __attribute__((noinline)) CUresult alloc_async_slow(cuemm_manager *m, cuemm__heap *h, CUdeviceptr *p,
                                                           size_t size, CUstream stream)
{
  if (size == 0)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_alloc_async: size is 0 (cuMemAllocAsync refuses "
                        "zero-byte allocations)");
  if (size > cuemm__pool_capacity(m->pool)) {
    /* Too large for the pool: cuemm_alloc's way (cuMemAlloc, whose memory
     * is idle from the start and so serves any stream, its free deferred;
     * or the refusal of a hard limit). */
    CUresult r = cuemm_alloc(m, p, size);
    if (r != CUDA_SUCCESS)
      cuemm__error_append(" (cuemm_alloc_async on stream %p)", (void *)stream);
    return r;
  }
  CUresult r;
  size_t rs = round_block(size);
  if (!h) {
    cuemm__lock_acquire(&m->lock);
    r = heap_attach_locked(m, &h);
    cuemm__lock_release(&m->lock);
    if (r != CUDA_SUCCESS)
      return r;
  }
  cuemm__heap_lock(h);
  if (cuemm__pool_is_suspended(m->pool)) {
    /* The heap's cache may hold blocks freed since the suspension, in
     * memory that is gone: none is handed out. */
    cuemm__heap_unlock(h);
    return cuemm__pool_refuse_suspended(m->pool, "cuemm_alloc_async");
  }
  uint32_t hs = cuemm__heap_stream(h, stream);
  if (hs == CUEMM__HEAP_NIL && (hs = cuemm__heap_add_stream(h, stream)) == CUEMM__HEAP_NIL) {
    cuemm__heap_unlock(h);
    return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "cuemm_alloc_async: no host memory to track stream %p",
                        (void *)stream);
  }
  uint32_t bin = cuemm__heap_bin(h, hs, rs);
  uint32_t got = bin != CUEMM__HEAP_NIL && h->bins[bin].head != CUEMM__HEAP_NIL ? cuemm__heap_pop(h, bin, hs, size)
                                                                              : steal(m, h, hs, rs, size);
  if (got != CUEMM__HEAP_NIL) {
    *p = (CUdeviceptr)h->b[got].ptr;
    cuemm__heap_unlock(h);
    cuemm__nvtx_live(m->pool->nvtx, (uintptr_t)*p, size);
    return CUDA_SUCCESS;
  }
  cuemm__heap_unlock(h);

  return alloc_from_pool(m, h, p, size, stream);
}

/* The newest block of stream hs's bin for `size`, LIVE now, or NIL when
 * the bin is empty or absent.  Heap entered by its owner. */
static inline __attribute__((always_inline)) uint32_t heap_hit(cuemm__heap *h, uint32_t hs, size_t size)
{
  uint32_t bin = cuemm__heap_bin(h, hs, round_block(size));
  return bin != CUEMM__HEAP_NIL && h->bins[bin].head != CUEMM__HEAP_NIL ? cuemm__heap_pop(h, bin, hs, size)
                                                                        : CUEMM__HEAP_NIL;
}

/* Hands record r, taken on the owner's fast path, to the program. */
static inline __attribute__((always_inline)) CUresult heap_served(cuemm_manager *m, cuemm__heap *h, uint32_t r,
                                                                 CUdeviceptr *p, size_t size)
{
  *p = (CUdeviceptr)h->b[r].ptr;
  cuemm__heap_leave(h);
  cuemm__nvtx_live(m->pool->nvtx, (uintptr_t)*p, size);
  return CUDA_SUCCESS;
}

/* The owner's way past a hit: blocks of this size other streams of the
 * heap freed, else the pool.  Heap entered, stream hs met; leaves it. */
static __attribute__((noinline)) CUresult alloc_async_miss(cuemm_manager *m, cuemm__heap *h, CUdeviceptr *p,
                                                           size_t size, CUstream stream, uint32_t hs)
{
  size_t rs = round_block(size);
  int others = 0;
  uint32_t r = steal_hint(h, hs, rs, size);
  if (r == CUEMM__HEAP_NIL)
    r = steal_idle(h, hs, rs, size, &others);
  if (r != CUEMM__HEAP_NIL)
    return heap_served(m, h, r, p, size);
  cuemm__heap_leave(h);
  if (!others && size <= cuemm__pool_capacity(m->pool))
    return alloc_from_pool(m, h, p, size, stream); /* no stream of this heap has a block of this size */
  return alloc_async_slow(m, h, p, size, stream);
}

/* The calling thread's own heap h serves a request of 1 byte up to the
 * pool's capacity or CUEMM__HEAP_LARGE_MAX: a hit inline, anything else
 * by a call (alloc_async_miss sends a request past the capacity the slow
 * way, to cuMemAlloc). */
static inline __attribute__((always_inline)) CUresult alloc_async_owner(cuemm_manager *m, cuemm__heap *h,
                                                                       CUdeviceptr *p, size_t size, CUstream stream)
{
  if (__builtin_expect(!cuemm__heap_enter(h), 0))
    return alloc_async_slow(m, h, p, size, stream);
  uint32_t hs = cuemm__heap_stream(h, stream), r;
  if (__builtin_expect(hs == CUEMM__HEAP_NIL, 0)) {
    cuemm__heap_leave(h);
    return alloc_async_slow(m, h, p, size, stream);
  }
  if ((r = heap_hit(h, hs, size)) != CUEMM__HEAP_NIL)
    return heap_served(m, h, r, p, size);
  return alloc_async_miss(m, h, p, size, stream, hs);
}

static inline __attribute__((always_inline)) CUresult alloc_async(cuemm_manager *m, CUdeviceptr *p, size_t size,
                                                                 CUstream stream)
{
  CUresult why = CUDA_SUCCESS;
  stream_path way = path_of(m, "cuemm_alloc_async", &why);
  if (__builtin_expect(way != PATH_STREAM, 0))
    return way == PATH_REFUSED ? why
                               : deferred_instead(cuemm__alloc_device(m, p, size), "cuemm_alloc_async", stream);
  if (!p)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_alloc_async: p is NULL");
  cuemm__heap *h = heap_of(m);
  if (size > CUEMM__HEAP_LARGE_MAX && h && size <= cuemm__pool_capacity(m->pool) && !stream_is_own_only(stream))
    return alloc_from_pool(m, NULL, p, size, stream); /* a size no thread's cache keeps */
  if (__builtin_expect(h && size - 1 < cuemm__pool_capacity(m->pool), 1))
    return alloc_async_owner(m, h, p, size, stream);
  return alloc_async_slow(m, h, p, size, stream);
}

/* Before a block with streams named by cuemm_record_stream is cached on
 * `hs`: one event on each of those streams, and `hs` waits for them, so
 * stream order on `hs` covers their work too.  Heap locked, owner's thread
 * or the manager's lock held. */
static CUresult wait_recorded(cuemm_manager *m, cuemm__heap *h, uint32_t r, CUstream freeing)
{
  CUresult res = CUDA_SUCCESS;
  cuemm__ctx_guard g;
  if ((res = cuemm__ctx_enter(m, &g)) != CUDA_SUCCESS)
    return res;
  /* A use is dropped once `freeing` waits for it; after a failure the
   * rest stay, so that the free, tried again, waits for them. */
  for (uint32_t i = 0; i < h->nuses;) {
    if (h->uses[i].r != r || res != CUDA_SUCCESS) {
      i++;
      continue;
    }
    CUevent ev;
    if ((res = event_get(m, h, &ev, "for cuemm_record_stream")) != CUDA_SUCCESS)
      continue;
    if ((res = m->drv->EventRecord(ev, h->uses[i].s)) != CUDA_SUCCESS)
      cuemm__driver_error(res, "cuEventRecord on stream %p (named by cuemm_record_stream)", (void *)h->uses[i].s);
    else if ((res = m->drv->StreamWaitEvent(freeing, ev, 0)) != CUDA_SUCCESS)
      cuemm__driver_error(res, "cuStreamWaitEvent(stream %p, the event of stream %p)", (void *)freeing,
                          (void *)h->uses[i].s);
    else
      h->event_waits++;
    h->evcache[h->nev++] = ev; /* a wait takes the event's state when it is queued: reusable now */
    if (res == CUDA_SUCCESS)
      h->uses[i] = h->uses[--h->nuses];
  }
  if (res == CUDA_SUCCESS)
    h->b[r].uses = 0;
  return cuemm__ctx_leave(m, &g, res);
}

static void drop_uses(cuemm__heap *h, uint32_t r)
{
  for (uint32_t i = 0; i < h->nuses;)
    if (h->uses[i].r == r)
      h->uses[i] = h->uses[--h->nuses];
    else
      i++;
  h->b[r].uses = 0;
}

/* Caches LIVE record r of h (the caller's own heap) on `stream`.  Heap
 * locked. */
static CUresult cache_on(cuemm_manager *m, cuemm__heap *h, uint32_t r, CUstream stream, const char *fn)
{
  uint32_t hs = cuemm__heap_stream(h, stream);
  if (hs == CUEMM__HEAP_NIL && (hs = cuemm__heap_add_stream(h, stream)) == CUEMM__HEAP_NIL)
    return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "%s: no host memory to track stream %p", fn, (void *)stream);
  CUresult res;
  if (h->b[r].uses && (res = wait_recorded(m, h, r, h->st[hs].s)) != CUDA_SUCCESS)
    return res;
  if (cuemm__heap_cache(h, r, hs) != 0)
    return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "%s: no host memory to cache the freed block", fn);
  return CUDA_SUCCESS;
}

/* The owned entry of a block now held by heap h (its rounded size `rs`).
 * `from_pool`: the pool held it (cuemm_alloc's block, or cuemm_alloc_async's
 * not kept by a thread), whose counts it leaves for the heap's.  m's lock
 * held. */
static void entry_to_heap(cuemm_manager *m, cuemm__owned_entry *e, const cuemm__heap *h, size_t rs, int from_pool)
{
  if (from_pool) {
    m->st.live_bytes -= e->size;
    m->st.live_count--;
    m->st.allocs--;
  }
  e->kind = CUEMM__KIND_STREAM;
  e->aux = h->index;
  e->size = rs;
}

/* Whether h keeps a block of `size` bytes freed on `stream` rather than
 * the pool taking it at once.  Small blocks stay while the cache has room.
 * Of large ones (up to CUEMM__HEAP_LARGE_MAX), each stream keeps the
 * cuemm_config.stream_keep_large it freed last, the oldest going back to
 * the pool as a newer one of a size in demand comes (free_evicting): the
 * activations of a layer come back in the next layer at the same sizes,
 * while blocks freed long before merge in the pool, where they serve any
 * size.  Kept large blocks are few, since each one splits the free space
 * around it (a serving trace held 1.21x its live bytes with every block up
 * to 1 MiB kept by size, 1.05x with none; the pool takes kept blocks back
 * before it grows).  The per-thread default stream's blocks always stay
 * (the pool cannot record on that stream).  Heap locked. */
static int heap_admits(cuemm__heap *h, CUstream stream, size_t size)
{
  if (stream_is_own_only(stream))
    return 1;
  if (h->cached_bytes + size > h->trim_mark)
    return 0;
  return size < CUEMM__HEAP_LARGE || (size <= CUEMM__HEAP_LARGE_MAX && h->m->cfg.stream_keep_large);
}

/* Whether a LIVE block of h of `size` bytes, freed on `stream` (hs in h,
 * or NIL), cannot go into the cache on the fast path: larger than a heap
 * keeps at all (a block that came to it through cuemm_record_stream, which
 * goes to the pool), or a large one while the stream keeps as many as it
 * may (the slow path evicts the oldest first).  Heap entered or locked. */
static inline int heap_surplus(const cuemm__heap *h, size_t size, uint32_t hs, CUstream stream)
{
  if (size < CUEMM__HEAP_LARGE || stream_is_own_only(stream))
    return 0;
  if (size > CUEMM__HEAP_LARGE_MAX)
    return 1;
  return hs != CUEMM__HEAP_NIL && h->st[hs].nlarge >= h->m->cfg.stream_keep_large;
}

/* Whether stream hs of h (NIL: one it has not met) keeps a large block of
 * `size` bytes freed on it: while it keeps fewer than it may, or in place
 * of the oldest kept when the size is among its latest requests that no
 * kept block served (free_evicting says why). */
static inline int heap_takes_large(const cuemm_manager *m, const cuemm__heap *h, uint32_t hs, size_t size)
{
  if (hs == CUEMM__HEAP_NIL || h->st[hs].nlarge < m->cfg.stream_keep_large)
    return 1;
  for (unsigned i = 0; i < CUEMM__HEAP_WANTED; i++)
    if (h->st[hs].wanted[i] == size)
      return 1;
  return 0;
}

/* Gives the pool the oldest large block h keeps for stream hs when the
 * stream keeps as many as it may, to make room for a newer one.  Both
 * locks held. */
static void heap_evict_large(cuemm_manager *m, cuemm__heap *h, uint32_t hs)
{
  if (hs == CUEMM__HEAP_NIL || !h->st[hs].nlarge || h->st[hs].nlarge < m->cfg.stream_keep_large)
    return;
  uint32_t r = *cuemm__heap_large_at(&h->st[hs], 0);
  cuemm__heap_unbin(h, r);
  heap_to_pool(m, h, r, h->st[hs].s);
}

/* `looked`: the caller found no record of dp in h, its own heap (a finding
 * that stands: only h's thread adds records to h). */
static __attribute__((noinline)) CUresult free_async_slow(cuemm_manager *m, cuemm__heap *h, CUdeviceptr dp,
                                                          CUstream stream, size_t *freed, int looked)
{
  uintptr_t p = (uintptr_t)dp;
  CUresult r;
  if (!p)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_free_async: the pointer is 0");
  if (h && !looked) {
    cuemm__heap_lock(h);
    uint32_t rec = cuemm__heap_find(h, p);
    if (rec != CUEMM__HEAP_NIL && (h->b[rec].state == CUEMM__HB_CACHED ||
                                   !heap_surplus(h, h->b[rec].size, cuemm__heap_stream(h, stream), stream))) {
      if (h->b[rec].state == CUEMM__HB_CACHED)
        r = cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_free_async: double free of 0x%" PRIxPTR " (%zu bytes): "
                         "it was freed on stream %p already", p, h->b[rec].size, (void *)h->st[h->b[rec].hs].s);
      else {
        size_t req = h->b[rec].req;
        if ((r = cache_on(m, h, rec, stream, "cuemm_free_async")) == CUDA_SUCCESS) {
          cuemm__nvtx_dead(m->pool->nvtx, p);
          if (freed)
            *freed = req;
        }
      }
      cuemm__heap_unlock(h);
      return r;
    }
    cuemm__heap_unlock(h);
  }

  /* Another thread's block, one the pool holds, or one this thread's heap
   * should not keep: under the manager's lock, which the pool needs. */
  cuemm__lock_acquire(&m->lock);
  if (!h && (r = heap_attach_locked(m, &h)) != CUDA_SUCCESS) {
    cuemm__lock_release(&m->lock);
    return r;
  }
  cuemm__owned_entry *e = cuemm__owned_find(&m->owned, p);
  if (!e || (e->kind != CUEMM__KIND_STREAM && e->kind != CUEMM__KIND_POOL)) {
    /* cuMemAlloc memory (too large for the pool), or nothing of ours: the
     * deferred path frees the one and explains the other. */
    cuemm__lock_release(&m->lock);
    r = cuemm__free(m, CUEMM__KIND_DEVICE, p, freed);
    if (r != CUDA_SUCCESS && strncmp(cuemm_last_error(), "cuemm_free: ", 12) == 0) {
      char why[512];
      snprintf(why, sizeof why, "%s", cuemm_last_error() + 12);
      cuemm__error(r, "cuemm_free_async: %s", why);
    }
    return r;
  }
  size_t size, req = e->size;
  uint32_t blk;
  cuemm__heap *o = NULL; /* the heap that held it, locked until the block has found its place */
  if (e->kind == CUEMM__KIND_STREAM) {
    o = m->heaps[e->aux];
    cuemm__heap_lock(o);
    uint32_t rec = cuemm__heap_find(o, p);
    if (o->b[rec].state == CUEMM__HB_CACHED) {
      r = cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_free_async: double free of 0x%" PRIxPTR " (%zu bytes): it "
                       "was freed already (on stream %p, by another thread)", p, o->b[rec].size,
                       (void *)o->st[o->b[rec].hs].s);
      cuemm__heap_unlock(o);
      cuemm__lock_release(&m->lock);
      return r;
    }
    if (o->b[rec].uses && (r = wait_recorded(m, o, rec, stream ? stream : CU_STREAM_LEGACY)) != CUDA_SUCCESS) {
      cuemm__heap_unlock(o);
      cuemm__lock_release(&m->lock);
      return r;
    }
    size = o->b[rec].size;
    blk = o->b[rec].blk;
    req = o->b[rec].req;
    cuemm__heap_remove(o, rec);
  } else
    size = round_block(e->size), blk = e->aux;
  /* h is the calling thread's: it enters as on its fast path, or locks
   * when another thread wants the heap. */
  int entered = 0, admit = 0;
  if (size <= CUEMM__HEAP_LARGE_MAX || stream_is_own_only(stream)) { /* else no heap keeps it */
    if (o != h)
      entered = heap_get(h);
    admit = heap_admits(h, stream, size);
    if (admit && size >= CUEMM__HEAP_LARGE && !stream_is_own_only(stream)) {
      uint32_t hs = cuemm__heap_stream(h, stream);
      if (!heap_takes_large(m, h, hs, size))
        admit = 0;
      else {
        heap_evict_large(m, h, hs);
        e = cuemm__owned_find(&m->owned, p); /* removals may move entries */
      }
    }
    if (o != h)
      heap_exit(h, entered);
  }
  if (!admit) {
    /* To the pool, as freed on `stream`: the allocation and its free are
     * counted where it was allocated. */
    if (o) {
      o->frees++;
      cuemm__heap_unlock(o);
    } else {
      m->st.live_bytes -= e->size;
      m->st.live_count--;
      m->st.frees++;
    }
    cuemm__owned_remove(&m->owned, e);
    cuemm__nvtx_dead(m->pool->nvtx, p);
    pool_return_on(m, p, size, blk, stream);
    pool_trim_tagged(m);
    cuemm__lock_release(&m->lock);
    if (freed)
      *freed = req;
    return CUDA_SUCCESS;
  }
  if (o) {
    o->allocs--; /* counted again below, where the block now lives */
    cuemm__heap_unlock(o);
  }
  entry_to_heap(m, e, h, size, o == NULL);
  entered = heap_get(h);
  uint32_t hs = cuemm__heap_stream(h, stream);
  if (hs == CUEMM__HEAP_NIL)
    hs = cuemm__heap_add_stream(h, stream);
  uint32_t rec = hs == CUEMM__HEAP_NIL ? CUEMM__HEAP_NIL : cuemm__heap_insert(h, p, size, blk, hs, req);
  cuemm__nvtx_dead(m->pool->nvtx, p);
  if (rec == CUEMM__HEAP_NIL || cuemm__heap_cache(h, rec, hs) != 0) {
    /* No host memory for the record: the block goes back through the
     * deferred queue instead, which is always correct. */
    if (rec != CUEMM__HEAP_NIL)
      cuemm__heap_remove(h, rec);
    cuemm__owned_remove(&m->owned, e);
    if (cuemm__pending_push(&m->pending, p, size, CUEMM__KIND_POOL, blk) == 0)
      m->pool_pending++;
    else
      cuemm__pool_give(m->pool, blk); /* cannot happen in practice; never leak */
  } else
    h->allocs++;
  heap_exit(h, entered);
  pool_trim_tagged(m); /* a block evicted for this one counts toward the release threshold */
  cuemm__lock_release(&m->lock);
  if (freed)
    *freed = req;
  return CUDA_SUCCESS;
}

/* The release threshold covers the caches: a heap holding more than it
 * gives its idle blocks back, and the pool releases what is then wholly
 * free beyond the threshold.  A release that fails leaves the memory mapped
 * and usable; the free that got here has succeeded either way. */
static __attribute__((noinline)) void trim_heap(cuemm_manager *m, cuemm__heap *h)
{
  char keep[512];
  snprintf(keep, sizeof keep, "%s", cuemm_last_error());
  cuemm__lock_acquire(&m->lock);
  cuemm__ctx_guard g;
  if (cuemm__ctx_enter(m, &g) == CUDA_SUCCESS) {
    cuemm__pool_note_low(m->pool);
    cuemm__heap_lock(h);
    /* Every idle block, the oldest first: each trim costs an event, so the
     * next one should be a whole cap of frees away.  Blocks whose streams
     * are still busy stay: try again only after the cache has grown by
     * another part of the cap. */
    size_t t = cache_cap(m);
    size_t given = heap_give_back(m, h, 0, 0, 0);
    h->trim_mark = h->cached_bytes > t ? h->cached_bytes + t / 4 + 1 : t;
    cuemm__heap_unlock(h);
    if (given) {
      m->stream_reclaims++;
      if (cuemm__pool_release_due(m->pool))
        cuemm__pool_release(m->pool, cuemm__pool_keep(m->pool));
    }
    cuemm__ctx_leave(m, &g, CUDA_SUCCESS);
  }
  pool_trim_tagged(m);
  cuemm__lock_release(&m->lock);
  cuemm__error(CUDA_SUCCESS, "%s", keep);
}

/* The fast path's free of a large block of the thread's own heap when its
 * stream keeps as many as it may, under the manager's lock (which the pool
 * needs, and which comes before the heap's).  A block of a size the stream
 * lately asked for and found none kept takes the place of the oldest kept
 * one, which goes back to the pool; any other goes back itself (while its
 * descriptor and neighbours are still in the processor's cache, where the
 * oldest kept block's are not: in a training step's backward pass, every
 * free would otherwise return a cold block).  Anything unexpected found
 * once the locks are held (the block freed meanwhile by another thread)
 * goes the general way. */
static __attribute__((noinline)) CUresult free_evicting(cuemm_manager *m, cuemm__heap *h, CUdeviceptr dp,
                                                        CUstream stream, size_t *freed)
{
  cuemm__lock_acquire(&m->lock);
  int in = heap_get(h);
  uint32_t r = cuemm__heap_find(h, (uintptr_t)dp), hs = cuemm__heap_stream(h, stream);
  if (r == CUEMM__HEAP_NIL || h->b[r].state != CUEMM__HB_LIVE || h->b[r].uses || hs == CUEMM__HEAP_NIL) {
    heap_exit(h, in);
    cuemm__lock_release(&m->lock);
    return free_async_slow(m, h, dp, stream, freed, 0);
  }
  size_t req = h->b[r].req;
  if (!heap_takes_large(m, h, hs, h->b[r].size)) {
    h->frees++;
    cuemm__nvtx_dead(m->pool->nvtx, (uintptr_t)dp);
    heap_to_pool(m, h, r, stream);
    heap_exit(h, in);
    pool_trim_tagged(m);
    cuemm__lock_release(&m->lock);
    if (freed)
      *freed = req;
    return CUDA_SUCCESS;
  }
  heap_evict_large(m, h, hs);
  if (cuemm__heap_cache(h, r, hs) != 0) {
    heap_exit(h, in);
    cuemm__lock_release(&m->lock);
    return free_async_slow(m, h, dp, stream, freed, 0);
  }
  int over = h->cached_bytes > h->trim_mark;
  cuemm__nvtx_dead(m->pool->nvtx, (uintptr_t)dp);
  heap_exit(h, in);
  pool_trim_tagged(m); /* the evicted block counts toward the release threshold */
  cuemm__lock_release(&m->lock);
  if (freed)
    *freed = req;
  if (__builtin_expect(over, 0))
    trim_heap(m, h);
  return CUDA_SUCCESS;
}

/* Leaves the heap after the owner's fast path cached the block at dp. */
static inline __attribute__((always_inline)) CUresult heap_kept(cuemm_manager *m, cuemm__heap *h, CUdeviceptr dp)
{
  int over = h->cached_bytes > h->trim_mark;
  cuemm__nvtx_dead(m->pool->nvtx, (uintptr_t)dp); /* before another thread may take the block */
  cuemm__heap_leave(h);
  if (__builtin_expect(over, 0))
    trim_heap(m, h);
  return CUDA_SUCCESS;
}

/* The owner's way past a hit: record r (NIL: dp is not in h) freed on
 * `stream` goes into a bin made for it, or in place of the oldest kept
 * block (free_evicting), or the general way.  Heap entered; leaves it. */
static __attribute__((noinline)) CUresult free_async_rest(cuemm_manager *m, cuemm__heap *h, CUdeviceptr dp,
                                                          CUstream stream, size_t *freed, uint32_t r)
{
  if (r != CUEMM__HEAP_NIL && h->b[r].state == CUEMM__HB_LIVE && !h->b[r].uses) {
    uint32_t hs = cuemm__heap_stream(h, stream);
    if (freed)
      *freed = h->b[r].req;
    if (hs != CUEMM__HEAP_NIL && !heap_surplus(h, h->b[r].size, hs, stream) && cuemm__heap_cache(h, r, hs) == 0)
      return heap_kept(m, h, dp);
    if (hs != CUEMM__HEAP_NIL && h->b[r].size <= CUEMM__HEAP_LARGE_MAX && m->cfg.stream_keep_large &&
        heap_surplus(h, h->b[r].size, hs, stream)) {
      cuemm__heap_leave(h);
      return free_evicting(m, h, dp, stream, freed);
    }
  }
  cuemm__heap_leave(h);
  return free_async_slow(m, h, dp, stream, freed, r == CUEMM__HEAP_NIL);
}

/* The calling thread's own heap h: a block it holds, freed into an
 * existing bin, inline; anything else by a call. */
static inline __attribute__((always_inline)) CUresult free_async_owner(cuemm_manager *m, cuemm__heap *h,
                                                                      CUdeviceptr dp, CUstream stream, size_t *freed)
{
  if (__builtin_expect(!cuemm__heap_enter(h), 0))
    return free_async_slow(m, h, dp, stream, freed, 0);
  uint32_t r = cuemm__heap_find(h, (uintptr_t)dp);
  if (r != CUEMM__HEAP_NIL && h->b[r].state == CUEMM__HB_LIVE && !h->b[r].uses) {
    uint32_t hs = cuemm__heap_stream(h, stream);
    if (hs != CUEMM__HEAP_NIL && !heap_surplus(h, h->b[r].size, hs, stream) &&
        cuemm__heap_cache_in(h, r, hs, 0) == 0) {
      if (freed)
        *freed = h->b[r].req;
      return heap_kept(m, h, dp);
    }
  }
  return free_async_rest(m, h, dp, stream, freed, r);
}

/* `freed`, when not NULL (the event log's call), gets the size the freed
 * block was asked for; with NULL the compiler drops the stores. */
static inline __attribute__((always_inline)) CUresult free_async(cuemm_manager *m, CUdeviceptr dp, CUstream stream,
                                                                size_t *freed)
{
  CUresult why = CUDA_SUCCESS;
  stream_path way = path_of(m, "cuemm_free_async", &why);
  if (__builtin_expect(way != PATH_STREAM, 0))
    return way == PATH_REFUSED ? why
                               : deferred_instead(cuemm__free_device(m, dp, freed), "cuemm_free_async", stream);
  cuemm__heap *h = heap_of(m);
  if (__builtin_expect(h != NULL, 1))
    return free_async_owner(m, h, dp, stream, freed);
  return free_async_slow(m, h, dp, stream, freed, 0);
}

/* The event log's rows, out of the fast paths' way. */
static __attribute__((noinline)) CUresult alloc_async_logged(cuemm_manager *m, CUdeviceptr *p, size_t size,
                                                             CUstream stream)
{
  if (!p)
    return alloc_async(m, p, size, stream);
  *p = 0;
  CUresult r = alloc_async(m, p, size, stream);
  cuemm__log_alloc(m, r, *p, size, stream, "alloc_async");
  return r;
}

static __attribute__((noinline)) CUresult free_async_logged(cuemm_manager *m, CUdeviceptr dp, CUstream stream)
{
  size_t size = 0;
  uint64_t seq = cuemm__log_take(m->log);
  CUresult r = free_async(m, dp, stream, &size);
  if (r == CUDA_SUCCESS)
    cuemm__log_free(m, seq, dp, size, stream, "free_async");
  else {
    cuemm__log_untake(m->log);
    cuemm__log_settle(m->log);
  }
  return r;
}

static __attribute__((noinline)) CUresult alloc_async_any(cuemm_manager *m, CUdeviceptr *p, size_t size,
                                                          CUstream stream)
{
  if (__builtin_expect(m && m->log, 0))
    return alloc_async_logged(m, p, size, stream);
  return alloc_async(m, p, size, stream);
}

static __attribute__((noinline)) CUresult free_async_any(cuemm_manager *m, CUdeviceptr dp, CUstream stream)
{
  if (__builtin_expect(m && m->log, 0))
    return free_async_logged(m, dp, stream);
  return free_async(m, dp, stream, NULL);
}

/* The two entry points go straight to the calling thread's heap when it
 * has one for m and no event log is kept: the checks the whole way makes
 * first (the manager, its path, the thread's slot) fold into a few loads. */
CUEMM_EXTERN CUresult cuemm_alloc_async(cuemm_manager *m, CUdeviceptr *p, size_t size, CUstream stream)
{
  if (__builtin_expect(m && m->stream_inline && p && size - 1 < CUEMM__HEAP_LARGE_MAX && heap_slot_first(m) &&
                       tls[0].h, 1))
    return alloc_async_owner(m, tls[0].h, p, size, stream);
  return alloc_async_any(m, p, size, stream);
}

CUEMM_EXTERN CUresult cuemm_free_async(cuemm_manager *m, CUdeviceptr dp, CUstream stream)
{
  if (__builtin_expect(m && m->stream_inline && heap_slot_first(m) && tls[0].h, 1))
    return free_async_owner(m, tls[0].h, dp, stream, NULL);
  return free_async_any(m, dp, stream);
}

/* Adds to h's uses that `stream` used record rec.  Heap locked. */
static CUresult use_add(cuemm__heap *h, uint32_t rec, CUstream stream)
{
  for (uint32_t i = 0; i < h->nuses; i++)
    if (h->uses[i].r == rec && h->uses[i].s == stream)
      return CUDA_SUCCESS;
  if (h->nuses == h->capuses) {
    uint32_t cap = h->capuses ? h->capuses * 2 : 16;
    void *g = realloc(h->uses, cap * sizeof *h->uses);
    if (!g)
      return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "cuemm_record_stream: no host memory");
    h->uses = g;
    h->capuses = cap;
  }
  h->uses[h->nuses++] = (cuemm__huse){ rec, stream };
  h->b[rec].uses = 1;
  return CUDA_SUCCESS;
}

/* cuemm_record_stream of a live block the pool holds: it moves into the
 * caller's heap, LIVE on the stream it was allocated on, with `stream` as
 * a use unless that is the same stream.  A block of cuemm_alloc has no
 * stream of its own: any free on a stream then waits for `stream`.  m's
 * lock held. */
static CUresult adopt_used(cuemm_manager *m, cuemm__owned_entry *e, CUstream stream)
{
  cuemm__heap *h = heap_of(m);
  CUresult r;
  if (!h && (r = heap_attach_locked(m, &h)) != CUDA_SUCCESS)
    return r;
  size_t rs = round_block(e->size);
  CUstream own = (CUstream)(uintptr_t)m->pool->sa.b[e->aux].seq;
  cuemm__heap_lock(h);
  uint32_t hs = cuemm__heap_stream(h, own ? own : stream);
  if (hs == CUEMM__HEAP_NIL)
    hs = cuemm__heap_add_stream(h, own ? own : stream);
  uint32_t rec = hs == CUEMM__HEAP_NIL ? CUEMM__HEAP_NIL : cuemm__heap_insert(h, e->key, rs, e->aux, hs, e->size);
  if (rec == CUEMM__HEAP_NIL) {
    cuemm__heap_unlock(h);
    return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "cuemm_record_stream: no host memory");
  }
  if ((own != stream || stream_is_own_only(stream)) && (r = use_add(h, rec, stream)) != CUDA_SUCCESS) {
    cuemm__heap_remove(h, rec);
    cuemm__heap_unlock(h);
    return r;
  }
  h->allocs++;
  cuemm__heap_unlock(h);
  entry_to_heap(m, e, h, rs, 1);
  return CUDA_SUCCESS;
}

CUEMM_EXTERN CUresult cuemm_record_stream(cuemm_manager *m, CUdeviceptr dp, CUstream stream)
{
  CUresult why = CUDA_SUCCESS;
  stream_path way = path_of(m, "cuemm_record_stream", &why);
  if (way != PATH_STREAM) /* deferred: the free synchronizes the context, nothing to record */
    return way == PATH_REFUSED ? why : live_deferred_block(m, dp);
  uintptr_t p = (uintptr_t)dp;
  if (!stream)
    stream = CU_STREAM_LEGACY;
  CUresult r = CUDA_SUCCESS;
  cuemm__lock_acquire(&m->lock);
  cuemm__owned_entry *e = cuemm__owned_find(&m->owned, p);
  if (e && e->kind == CUEMM__KIND_POOL)
    /* A block the pool holds (cuemm_alloc's, or cuemm_alloc_async's not
     * yet cached): freed with cuemm_free it would need nothing (the flush
     * synchronizes), but freed on a stream it must wait for `stream`, so
     * it joins this thread's heap, which keeps the use. */
    r = adopt_used(m, e, stream);
  else if (e && e->kind == CUEMM__KIND_DEVICE && !e->pending) {
    /* Beyond the pool (cuMemAlloc): its free, on any path, is deferred and
     * the flush synchronizes the context, so there is nothing to record. */
  } else if (!e || e->kind != CUEMM__KIND_STREAM) {
    r = cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_record_stream: 0x%" PRIxPTR " is not the start of a live "
                     "device allocation of this manager (allocated elsewhere, an interior pointer, host memory, or "
                     "freed already)", p);
  } else {
    cuemm__heap *o = m->heaps[e->aux];
    cuemm__heap_lock(o);
    uint32_t rec = cuemm__heap_find(o, p);
    cuemm__hblock *b = &o->b[rec];
    if (b->state != CUEMM__HB_LIVE)
      r = cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_record_stream: 0x%" PRIxPTR " was freed already", p);
    else if (stream != o->st[b->hs].s || stream_is_own_only(stream))
      r = use_add(o, rec, stream);
    cuemm__heap_unlock(o);
  }
  cuemm__lock_release(&m->lock);
  return r;
}

CUEMM_EXTERN CUresult cuemm_stream_release(cuemm_manager *m, CUstream stream)
{
  CUresult why = CUDA_SUCCESS;
  stream_path way = path_of(m, "cuemm_stream_release", &why);
  if (way != PATH_STREAM) /* deferred: no block is kept for a stream */
    return way == PATH_REFUSED ? why : CUDA_SUCCESS;
  if (!stream || stream == CU_STREAM_LEGACY)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_stream_release: the legacy default stream is never "
                        "destroyed; its cached blocks stay");
  CUresult r = CUDA_SUCCESS;
  cuemm__lock_acquire(&m->lock);
  cuemm__ctx_guard g;
  if ((r = cuemm__ctx_enter(m, &g)) != CUDA_SUCCESS) {
    cuemm__lock_release(&m->lock);
    return r;
  }
  cuemm__heap *mine = heap_of(m);
  for (uint32_t i = 0; i < m->nheaps && r == CUDA_SUCCESS; i++) {
    cuemm__heap *h = m->heaps[i];
    if (stream_is_own_only(stream) && h != mine)
      continue;
    cuemm__heap_lock(h);
    for (uint32_t k = 0; k < h->nst; k++) {
      cuemm__hstream *a = &h->st[k];
      if (a->s != stream)
        continue;
      /* One last event covers its frees; then the stream is known by a key
       * no new stream can have. */
      r = stream_record(m, h, a);
      if (r == CUDA_SUCCESS && a->covered < a->freed) {
        /* No room for another event: the blocks go through a flush. */
        for (uint32_t rr = 1; rr < h->nb; rr++)
          if (h->b[rr].state == CUEMM__HB_CACHED && h->b[rr].hs == k && h->b[rr].seq > a->covered &&
              cuemm__pending_push(&m->pending, h->b[rr].ptr, h->b[rr].size, CUEMM__KIND_POOL, h->b[rr].blk) == 0) {
            cuemm__owned_entry *e = cuemm__owned_find(&m->owned, h->b[rr].ptr);
            if (e)
              cuemm__owned_remove(&m->owned, e);
            m->pool_pending++;
            cuemm__heap_unbin(h, rr);
            cuemm__heap_remove(h, rr);
          }
      }
      if (r == CUDA_SUCCESS) {
        a->s = retired_key();
        a->retired = 1;
      }
    }
    cuemm__heap_forget_last(h);
    cuemm__heap_unlock(h);
  }
  /* The pool's blocks freed on it: one last event, then the same new key;
   * they become idle when the event completes (pool_settle), or at the
   * next synchronizing flush where no event could be recorded. */
  cuemm__heap *ps = m->pstreams;
  uint32_t k = ps && r == CUDA_SUCCESS && !stream_is_own_only(stream) ? cuemm__heap_stream(ps, stream)
                                                                       : CUEMM__HEAP_NIL;
  if (k != CUEMM__HEAP_NIL) {
    cuemm__hstream *a = &ps->st[k];
    stream_query(m, ps, a);
    r = stream_record(m, ps, a);
    if (r == CUDA_SUCCESS) {
      a->s = retired_key();
      a->retired = 1;
      cuemm__heap_forget_last(ps);
    }
  }
  r = cuemm__ctx_leave(m, &g, r);
  cuemm__lock_release(&m->lock);
  return r;
}

void cuemm__stream_each(cuemm_manager *m, void (*fn)(void *arg, const cuemm__stream_block *b), void *arg)
{
  for (uint32_t i = 0; i < m->nheaps; i++) {
    cuemm__heap *h = m->heaps[i];
    cuemm__heap_lock(h);
    for (uint32_t r = 1; r < h->nb; r++) {
      const cuemm__hblock *b = &h->b[r];
      if (b->state != CUEMM__HB_LIVE && b->state != CUEMM__HB_CACHED)
        continue;
      const cuemm__hstream *st = &h->st[b->hs];
      cuemm__stream_block out = {
        .ptr = b->ptr, .size = b->size, .req = b->state == CUEMM__HB_LIVE ? b->req : 0,
        .stream = st->retired || st->s == CU_STREAM_LEGACY ? NULL : st->s,
        .cached = b->state == CUEMM__HB_CACHED, .retired = st->retired,
      };
      fn(arg, &out);
    }
    cuemm__heap_unlock(h);
  }
}

/* ---- the manager's hooks (the extension)  ----------------------------------------------------------------- */

static CUresult stream_give_up(cuemm_manager *m, cuemm__owned_entry *e)
{
  cuemm__heap *o = m->heaps[e->aux];
  cuemm__heap_lock(o);
  uint32_t rec = cuemm__heap_find(o, e->key);
  cuemm__hblock *b = &o->b[rec];
  if (b->state == CUEMM__HB_CACHED) {
    CUresult r = cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_free: double free of 0x%" PRIxPTR " (%zu bytes): it was "
                              "freed on stream %p already (cuemm_free_async)", e->key, b->size, (void *)o->st[b->hs].s);
    cuemm__heap_unlock(o);
    return r;
  }
  /* The queue's flush synchronizes the whole context: every stream that
   * used it, recorded or not, is done before the block is reused. */
  drop_uses(o, rec);
  size_t size = b->size;
  uint32_t blk = b->blk;
  uintptr_t p = e->key;
  if (cuemm__pending_push(&m->pending, p, size, CUEMM__KIND_POOL, blk) != 0) {
    cuemm__heap_unlock(o);
    return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "no host memory left to queue the free of 0x%" PRIxPTR, p);
  }
  o->allocs--;
  m->st.allocs++;
  cuemm__heap_remove(o, rec);
  cuemm__heap_unlock(o);
  m->pool_pending++;
  cuemm__owned_remove(&m->owned, e);
  return CUDA_SUCCESS;
}

static void stream_reset(cuemm_manager *m)
{
  for (uint32_t i = 0; i < m->nheaps; i++) {
    cuemm__heap *h = m->heaps[i];
    cuemm__heap_lock(h);
    for (uint32_t r = 1; r < h->nb; r++) {
      cuemm__hblock *b = &h->b[r];
      if (b->state == CUEMM__HB_UNUSED)
        continue;
      if (cuemm__pending_push(&m->pending, b->ptr, b->size, CUEMM__KIND_POOL, b->blk) != 0)
        continue;
      m->pool_pending++;
      cuemm__owned_entry *e = cuemm__owned_find(&m->owned, b->ptr);
      if (e)
        cuemm__owned_remove(&m->owned, e);
      if (b->state == CUEMM__HB_CACHED)
        cuemm__heap_unbin(h, r);
      drop_uses(h, r);
      cuemm__heap_remove(h, r);
    }
    cuemm__heap_unlock(h);
  }
}

static void stream_stats(cuemm_manager *m, cuemm_stats *s)
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

static size_t stream_live(cuemm_manager *m, size_t *bytes)
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

static size_t stream_fini(cuemm_manager *m, int use_driver)
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
    leaked += heap_drop_events(m, h, use_driver);
    free(h->uses);
    cuemm__heap_fini(h);
    free(h);
  }
  free(m->heaps);
  m->heaps = NULL;
  m->nheaps = m->capheaps = 0;
  if (m->pstreams) {
    leaked += heap_drop_events(m, m->pstreams, use_driver);
    cuemm__heap_fini(m->pstreams);
    free(m->pstreams);
    m->pstreams = NULL;
  }
  /* This thread's slot must not outlive the manager (a later manager may
   * get its address; the serial tells them apart for other threads). */
  for (int i = 0; i < STREAM_TLS_SLOTS; i++)
    if (tls[i].m == m)
      tls[i] = (tls_slot){ 0 };
  return leaked;
}

static int stream_live_size(cuemm_manager *m, const cuemm__owned_entry *e, size_t *bytes)
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

static void stream_destroy(cuemm_manager *m, char *note, size_t cap)
{
  size_t leaked = stream_fini(m, 1);
  if (leaked)
    snprintf(note, cap, "%zu events of the stream-ordered path could not be destroyed and are leaked in the driver "
             "(%s)", leaked, cuemm_last_error());
}

static void stream_abandon(cuemm_manager *m)
{
  stream_fini(m, 0);
}

const cuemm__extension cuemm__stream_extension = {
  .attach = stream_attach,
  .destroy = stream_destroy,
  .abandon = stream_abandon,
  .live = stream_live,
  .reclaim = stream_reclaim,
  .settle = pool_settle,
  .give_up = stream_give_up,
  .reset = stream_reset,
  .stats = stream_stats,
  .live_size = stream_live_size,
};
