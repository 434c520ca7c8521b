/* exchange.c: owns the exchange of blocks between the threads' heaps and
 * the pool: a block taken from the pool for a stream, into the thread's
 * heap or a span; taking blocks another stream of the heap freed
 * (stealing); a heap's cached blocks given back (trims, the pool's reclaim
 * before it grows, the hold of a suspension); and the blocks moved to the
 * deferred queue when the manager resets or a stream block is freed with
 * cuemm_free.  Which blocks a heap keeps is in exchange.h; the pool's tags
 * for the blocks freed on a stream, and the pick among them, are
 * tags.c's.
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>

#include "base/internal.h"
#include "stream/exchange.h"
#include "trace/internal.h"
#include "stream/tags.h"
#include "stream/thread-heap.h"

/* ---- cross-stream reuse ------------------------------------------------------------ */

/* A block of size rs that another stream freed and whose event is known
 * complete: no driver call, so the owner's fast path may look.  *others
 * tells whether another stream holds blocks of that size at all (the slow
 * path may then learn with an event whether one is free to take). */
__attribute__((noinline)) uint32_t cuemm__exchange_steal_idle(cuemm__heap *h, uint32_t hs, size_t rs, size_t req,
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
    if (t != CUEMM__HEAP_NIL && h->st[k].done && h->b[t].seq <= h->st[k].done && h->b[t].size >= rs) {
      h->st[hs].steal_bin = bin;
      cuemm__exchange_take_cached(h, t, hs, req);
      return t;
    }
  }
  return CUEMM__HEAP_NIL;
}

/* Finds a block of size rs that another stream of this heap freed and that
 * stream hs may use now.  Owner's thread, heap locked.  Returns the record
 * or NIL; a driver failure is NIL too (the caller falls back to the pool),
 * with the message kept. */
uint32_t cuemm__exchange_steal(cuemm_manager *m, cuemm__heap *h, uint32_t hs, size_t rs, size_t req)
{
  int entered = 0;
  cuemm__ctx_guard g;
  uint32_t got = CUEMM__HEAP_NIL;
  for (uint32_t k = 0; k < h->nst && got == CUEMM__HEAP_NIL; k++) {
    if (k == hs)
      continue;
    uint32_t bin = cuemm__heap_bin(h, k, rs);
    if (bin == CUEMM__HEAP_NIL || h->bins[bin].tail == CUEMM__HEAP_NIL || h->b[h->bins[bin].tail].size < rs)
      continue;
    cuemm__hstream *a = &h->st[k];
    uint32_t t = h->bins[bin].tail; /* the oldest: the first an event covers */
    if (h->b[t].seq > a->done) {
      if (!entered) {
        if (cuemm__ctx_enter(m, &g) != CUDA_SUCCESS)
          return CUEMM__HEAP_NIL;
        entered = 1;
      }
      if (cuemm__event_learn(m, h, a, h->b[t].seq) != CUDA_SUCCESS)
        continue;
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
    cuemm__exchange_take_cached(h, got, hs, req);
  if (entered)
    cuemm__ctx_leave(m, &g, CUDA_SUCCESS);
  return got;
}

/* ---- giving cached blocks back ------------------------------------------------------- */

static size_t spans_trim(cuemm_manager *m, cuemm__heap *h, uint32_t hs);

/* Cached record r of h (at `ptr`), whose block the pool has taken, leaves
 * the heap and the owned table.  Both locks held. */
static void heap_forget(cuemm_manager *m, cuemm__heap *h, uint32_t r, uintptr_t ptr)
{
  cuemm__heap_unbin(h, r);
  cuemm__heap_remove(h, r);
  cuemm__owned_drop(&m->owned, ptr);
}

/* Returns cached blocks of h to the pool, oldest first, until at most
 * `keep` bytes stay cached: idle ones (their stream's `done` passed them),
 * and the others as freed on their stream (cuemm__exchange_give_on), except those of
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
    if (want && !all && !cuemm__event_own_only(a->s))
      cuemm__event_learn(m, h, a, a->freed);
    else
      cuemm__event_query(m, h, a);
  }
  for (uint32_t r = h->oldest, next; r != CUEMM__HEAP_NIL && (all || h->cached_bytes > keep); r = next) {
    cuemm__hblock *b = &h->b[r];
    next = b->newer;
    const cuemm__hstream *a = &h->st[b->hs];
    int idle = b->seq <= a->done;
    if (!idle && !all && (want || a->retired || cuemm__event_own_only(a->s)))
      continue;
    uintptr_t ptr = cuemm__hb_ptr(b);
    size_t size = b->size;
    uint32_t blk = b->blk;
    if (!idle && all) {
      if (cuemm__manager_defer_block(m, ptr, size, blk) != 0)
        continue; /* stays cached: nothing is lost */
    } else if (!idle) {
      if (cuemm__exchange_give_on(m, blk, a->s) != 0)
        continue;
    } else if (cuemm__span_blk(blk))
      cuemm__exchange_span_give(m, blk, a->s, 1);
    else
      cuemm__pool_give_tagged(m->pool, blk, 0, 0);
    heap_forget(m, h, r, ptr);
    given += size;
  }
  return given;
}

/* Returns every block h cached on stream `s` to the pool as freed on it:
 * they are that stream's at once (stream order), so no event is needed,
 * where heap_give_back with `want` records one on every stream to learn
 * which blocks are idle (a thread replacing blocks of sizes up to 2 MiB on
 * one stream recorded 45,000 events in 300 ms so).  All of them, not only
 * enough for the request: those left would split the free space the pool
 * places the request and the next ones in (heap_give_back says how much).
 * Both locks held.  Returns the bytes given back. */
static size_t heap_give_back_stream(cuemm_manager *m, cuemm__heap *h, CUstream s)
{
  uint32_t hs = cuemm__heap_stream(h, s);
  if (hs == CUEMM__HEAP_NIL || !h->st[hs].cached_count || h->st[hs].retired)
    return 0;
  size_t given = 0;
  for (uint32_t r = h->oldest, next; r != CUEMM__HEAP_NIL; r = next) {
    cuemm__hblock *b = &h->b[r];
    next = b->newer;
    if (b->hs != hs)
      continue;
    uintptr_t ptr = cuemm__hb_ptr(b);
    size_t size = b->size;
    if (cuemm__exchange_give_on(m, b->blk, s) != 0)
      break;
    heap_forget(m, h, r, ptr);
    given += size;
  }
  return given;
}

void cuemm__exchange_hold(cuemm_manager *m, int on)
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

size_t cuemm__exchange_reclaim(cuemm_manager *m, int how, size_t want)
{
  if (!m->nheaps)
    return 0;
  int all = how == CUEMM__RECLAIM_ALL;
  if (how == CUEMM__RECLAIM_QUEUED)
    want = 0; /* every block, the busy ones tagged: see heap_give_back */
  const cuemm__heap *own = how == CUEMM__RECLAIM_OWN || how == CUEMM__RECLAIM_QUEUED ? cuemm__thread_heap_of(m) : NULL;
  size_t given = 0;
  cuemm__ctx_guard g;
  if (cuemm__ctx_enter(m, &g) != CUDA_SUCCESS)
    return 0;
  for (uint32_t i = 0; i < m->nheaps; i++) {
    cuemm__heap *h = m->heaps[i];
    if ((how == CUEMM__RECLAIM_OWN || how == CUEMM__RECLAIM_QUEUED) && h != own &&
        !atomic_load_explicit(&h->orphan, memory_order_acquire))
      continue; /* another thread's: raided only when the pool cannot grow */
    cuemm__heap_lock(h);
    if (h->cached_count)
      given += heap_give_back(m, h, all, 0, all ? 0 : want);
    given += spans_trim(m, h, CUEMM__HEAP_NIL);
    cuemm__heap_unlock(h);
  }
  cuemm__ctx_leave(m, &g, CUDA_SUCCESS);
  if (given)
    m->stream_reclaims++;
  return given;
}

/* Record r of h (LIVE, or out of its bin) leaves the heap and its owned
 * entry goes: the block returns to the pool as freed on `stream`.  Both
 * locks held (or h entered by its owner, with the manager's lock). */
void cuemm__exchange_to_pool(cuemm_manager *m, cuemm__heap *h, uint32_t r, CUstream stream)
{
  uintptr_t ptr = cuemm__hb_ptr(&h->b[r]);
  size_t size = h->b[r].size;
  uint32_t blk = h->b[r].blk;
  cuemm__heap_remove(h, r);
  cuemm__owned_drop(&m->owned, ptr);
  cuemm__exchange_return_on(m, ptr, size, blk, stream);
}

/* A block of `size` bytes from the pool for work on `stream`: the stream's
 * own and idle free space, else (with `own`, the calling thread's heap) the
 * blocks that heap cached on the stream, else the pool's way of growing,
 * settling and waiting (cuemm__manager_pool_take_locked, and under
 * CUEMM_STREAM_REUSE=internal a wait on another stream's event).  *tag:
 * the stream's tag in the pool at the end.  m's lock held, no heap held. */
static inline __attribute__((always_inline)) CUresult pool_take_for(cuemm_manager *m, cuemm__heap *own, size_t size,
                                                                   CUstream stream, uintptr_t *out, uint32_t *outblk,
                                                                   uint32_t *outtag)
{
  uintptr_t ptr = 0;
  uint32_t blk = CUEMM__SA_NIL;
  uint32_t tag = cuemm__tags_tag(m, stream);
  size_t rs = cuemm__pool_round(size);
  cuemm_stream_reuse reuse = m->cfg.stream_reuse;
  int wait = reuse == CUEMM_STREAM_REUSE_WAIT;
  cuemm__result r = cuemm__tags_pick(m, size, tag, stream, wait, &ptr, &blk) == 0 ? CUDA_SUCCESS : CUEMM__NEXT;
  if (r != CUDA_SUCCESS && own && !cuemm__event_own_only(stream) && !cuemm__reclaims_churn(m)) {
    /* Before the pool settles, reclaims or grows, the blocks this thread
     * cached on this very stream: no event is needed for them. */
    int in = cuemm__thread_heap_get(own);
    size_t given = heap_give_back_stream(m, own, stream);
    cuemm__thread_heap_exit(own, in);
    if (given) {
      m->stream_reclaims++;
      tag = cuemm__tags_tag(m, stream);
      if (cuemm__tags_pick(m, size, tag, stream, wait, &ptr, &blk) == 0)
        r = CUDA_SUCCESS;
    }
  }
  if (r != CUDA_SUCCESS)
    r = cuemm__manager_pool_take_locked(m, size, tag, &ptr, &blk, reuse != CUEMM_STREAM_REUSE_INTERNAL);
  if (r == CUEMM__NEXT) {
    /* CUEMM_STREAM_REUSE=internal: the pool would grow, and no other way
     * served (blocks of streams known done, the threads' idle ones).  The
     * stream waits on another stream's event instead, where a block of
     * that stream fits; pool_take_locked's settle recorded the events.
     * Its reclaim may have given this stream its first blocks in the pool:
     * the tag is looked up again. */
    tag = cuemm__tags_tag(m, stream);
    r = cuemm__tags_pick(m, size, tag, stream, 1, &ptr, &blk) == 0 ? CUDA_SUCCESS : CUEMM__NEXT;
    if (r != CUDA_SUCCESS && cuemm__tags_adopt(m, stream, &tag, rs) &&
        cuemm__tags_pick(m, size, tag, stream, 1, &ptr, &blk) == 0)
      r = CUDA_SUCCESS;
    if (r != CUDA_SUCCESS)
      r = cuemm__manager_pool_take_locked(m, size, tag, &ptr, &blk, 1);
  }
  *out = ptr;
  *outblk = blk;
  *outtag = tag;
  return (CUresult)r; /* the last way grows: never CUEMM__NEXT */
}

/* ---- spans (span.h): their pool blocks ----------------------------------------------------- */

/* Span `id`, empty, leaves the manager's table and its pool block goes
 * back: as freed on its stream, or through a flush when that stream was
 * retired (its handle may name another stream now).  m's lock held, its
 * heap held. */
static void span_back(cuemm_manager *m, uint32_t id)
{
  cuemm__span *sp = cuemm__span_unregister(m, id);
  if (!sp->retired)
    cuemm__exchange_return_on(m, sp->base, sp->size, sp->pblk, sp->s);
  else if (cuemm__manager_defer_block(m, sp->base, sp->size, sp->pblk) != 0)
    cuemm__pool_give(m->pool, sp->pblk); /* no memory to queue it: cannot happen in practice */
  cuemm__span_destroy(sp);
}

int cuemm__exchange_span_give(cuemm_manager *m, uint32_t blk, CUstream stream, int idle)
{
  int k = cuemm__span_take_back(m, blk, stream, idle);
  if (k > 0)
    span_back(m, (uint32_t)k - 1);
  return k < 0 ? -1 : 0;
}

/* h's empty spans (of stream hs, or NIL: every stream) back to the pool.
 * m's lock held, h held. */
static size_t spans_trim(cuemm_manager *m, cuemm__heap *h, uint32_t hs)
{
  cuemm__span *empty[64];
  size_t n, bytes = 0;
  do {
    bytes += cuemm__span_detach(m, h, hs, empty, 64, &n);
    for (size_t k = 0; k < n; k++)
      span_back(m, empty[k]->id);
  } while (n == 64);
  return bytes;
}

void cuemm__exchange_spans_retire(cuemm_manager *m, cuemm__heap *h, uint32_t hs)
{
  spans_trim(m, h, hs);
}

void cuemm__exchange_span_close(cuemm_manager *m, cuemm__heap *h, uint32_t id)
{
  cuemm__lock_acquire(&m->lock);
  int in = cuemm__thread_heap_get(h);
  cuemm__span *sp = cuemm__span_at(m, id);
  if (sp && sp->h == h && !sp->live && !sp->current)
    span_back(m, id);
  cuemm__thread_heap_exit(h, in);
  cuemm__lock_release(&m->lock);
}

/* The size of a new span for a request of `rs` bytes on stream hs of h:
 * room for CUEMM__SPAN_REQUESTS such requests, or twice what the
 * stream's current span hands out, within CUEMM__SPAN_MIN and
 * CUEMM__SPAN_MAX_BYTES, in whole units of the pool's granularity. */
static size_t span_size(const cuemm_manager *m, const cuemm__heap *h, uint32_t hs, size_t rs)
{
  size_t want = rs * CUEMM__SPAN_REQUESTS;
  const cuemm__span *cur = h->st[hs].span;
  if (cur && cur->live * 2 > want)
    want = cur->live * 2;
  if (want < CUEMM__SPAN_MIN)
    want = CUEMM__SPAN_MIN;
  if (want > CUEMM__SPAN_MAX_BYTES)
    want = CUEMM__SPAN_MAX_BYTES;
  /* A pool under a limit (CUEMM_POOL_LIMIT) spends at most an eighth of
   * it on one span. */
  size_t capacity = cuemm__pool_capacity(m->pool) / 8;
  if (want > capacity)
    want = capacity > rs ? capacity : rs;
  size_t unit = cuemm__pool_granule(m->pool);
  want = (want + unit - 1) / unit * unit;
  return want <= cuemm__pool_capacity(m->pool) / 8 || want == rs ? want : rs;
}

__attribute__((noinline)) cuemm__result cuemm__exchange_span_open(cuemm_manager *m, cuemm__heap *h, CUdeviceptr *p,
                                                             size_t size, CUstream stream)
{
  size_t rs = cuemm__pool_round(size);
  uintptr_t base;
  uint32_t pblk, tag, rec = CUEMM__HEAP_NIL;
  cuemm__lock_acquire(&m->lock);
  if (cuemm__pool_is_suspended(m->pool)) {
    m->st.alloc_failures++;
    cuemm__lock_release(&m->lock);
    return cuemm__pool_refuse_suspended(m->pool, "cuemm_allocate_async");
  }
  int in = cuemm__thread_heap_get(h);
  uint32_t hs = cuemm__heap_stream(h, stream);
  size_t want = hs == CUEMM__HEAP_NIL ? 0 : span_size(m, h, hs, rs);
  cuemm__thread_heap_exit(h, in);
  cuemm__result r = CUEMM__NEXT;
  if (want && want <= cuemm__pool_capacity(m->pool))
    r = pool_take_for(m, h, want, stream, &base, &pblk, &tag);
  if (r == CUDA_SUCCESS) {
    in = cuemm__thread_heap_get(h);
    hs = cuemm__heap_stream(h, stream);
    cuemm__span *old = NULL, *sp = hs == CUEMM__HEAP_NIL || h->st[hs].retired
                                       ? NULL : cuemm__span_make(m, h, hs, base, want, pblk, &old);
    if (sp) {
      cuemm__pool_set_block_word(m->pool, pblk, (uint64_t)(uintptr_t)(stream ? stream : CU_STREAM_LEGACY));
      if (old)
        span_back(m, old->id);
      rec = cuemm__span_cut(h, hs, rs, size);
    } else
      cuemm__exchange_return_on(m, base, want, pblk, stream);
    cuemm__thread_heap_exit(h, in);
    if (rec == CUEMM__HEAP_NIL)
      r = CUEMM__NEXT;
    else {
      *p = (CUdeviceptr)cuemm__hb_ptr(&h->b[rec]);
      if (m->st.live_bytes + size > m->st.peak_bytes)
        m->st.peak_bytes = m->st.live_bytes + size; /* as cuemm__account_alloc, the block counted in its heap */
    }
  } else
    r = CUEMM__NEXT; /* the pool's own way says why, if it fails too */
  cuemm__lock_release(&m->lock);
  if (r == CUDA_SUCCESS)
    cuemm__nvtx_live(cuemm__pool_nvtx(m->pool), (uintptr_t)*p, size);
  return r;
}

/* Takes m's lock for a pool block.  A heap whose large requests keep
 * finding it held turns to spans (span.h), which take it once for many
 * such requests; only where that may happen is a try made first. */
static inline __attribute__((always_inline)) void pool_lock(cuemm_manager *m, cuemm__heap *own, size_t rs)
{
  if (!own || own->spanning || rs < CUEMM__HEAP_LARGE || rs > CUEMM__HEAP_LARGE_MAX ||
      m->cfg.stream_spans != CUEMM_STREAM_SPANS_AUTO)
    cuemm__lock_acquire(&m->lock);
  else if (!cuemm__lock_try(&m->lock)) {
    /* Another thread holds the lock: this one's large requests queue here
     * (span.h). */
    if (++own->contended >= CUEMM__SPAN_CONTENDED)
      own->spanning = 1;
    cuemm__lock_acquire(&m->lock);
  }
}

/* Block ptr (pool block blk, rs bytes for a request of `size`) into h,
 * LIVE, so that its free takes the fast path.  The record, or NIL where h
 * has no host memory for the stream or the record: the block then stays
 * the pool's.  m's lock held. */
static inline __attribute__((always_inline)) uint32_t heap_record(cuemm__heap *h, uintptr_t ptr, size_t rs,
                                                                 uint32_t blk, size_t size, CUstream stream)
{
  uint32_t rec = CUEMM__HEAP_NIL;
  int in = cuemm__thread_heap_get(h);
  uint32_t hs = cuemm__heap_stream(h, stream);
  if (hs == CUEMM__HEAP_NIL)
    hs = cuemm__heap_add_stream(h, stream);
  if (hs != CUEMM__HEAP_NIL && (rec = cuemm__heap_insert(h, ptr, rs, blk, hs, size)) != CUEMM__HEAP_NIL) {
    h->allocs++;
    if (rs >= CUEMM__HEAP_LARGE)
      h->st[hs].wanted[h->st[hs].nwanted++ % CUEMM__HEAP_WANTED] = rs;
  }
  cuemm__thread_heap_exit(h, in);
  return rec;
}

/* No host memory for the owned entry of the block just taken: it leaves h
 * (record rec, or NIL) and goes back to the pool, as freed on its stream
 * where the stream has a tag there, else idle. */
static CUresult unrecorded(cuemm_manager *m, cuemm__heap *h, uint32_t rec, uintptr_t ptr, size_t rs, uint32_t blk,
                           uint32_t tag, CUstream stream)
{
  if (rec != CUEMM__HEAP_NIL) {
    int in = cuemm__thread_heap_get(h);
    h->allocs--;
    cuemm__heap_remove(h, rec);
    cuemm__thread_heap_exit(h, in);
  }
  if (tag)
    cuemm__exchange_return_on(m, ptr, rs, blk, stream);
  else
    cuemm__pool_give(m->pool, blk);
  return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "cuemm_allocate_async: no host memory left to record the allocation");
}

/* The block's owned entry, as h's (record rec) or as the pool's, and the
 * manager's statistics.  m's lock held. */
static inline __attribute__((always_inline)) CUresult owned_record(cuemm_manager *m, cuemm__heap *h, uint32_t rec,
                                                                  uintptr_t ptr, size_t rs, size_t size, uint32_t blk,
                                                                  uint32_t tag, CUstream stream)
{
  if (rec != CUEMM__HEAP_NIL ? cuemm__owned_add(&m->owned, ptr, rs, CUEMM__KIND_STREAM, h->index) != 0
                             : cuemm__owned_add(&m->owned, ptr, size, CUEMM__KIND_POOL, blk) != 0)
    return unrecorded(m, h, rec, ptr, rs, blk, tag, stream);
  if (rec == CUEMM__HEAP_NIL)
    cuemm__account_alloc(m, size);
  else if (m->st.live_bytes + size > m->st.peak_bytes)
    m->st.peak_bytes = m->st.live_bytes + size; /* as cuemm__account_alloc, the block counted in its heap */
  return CUDA_SUCCESS;
}

/* A block from the pool, under the manager's lock.  With `h` (the calling
 * thread's heap), a block of a size the heap keeps goes into it at once,
 * LIVE, so that its free takes the fast path; a large one first makes room
 * among the stream's kept large blocks (cuemm__exchange_evict_large), whose oldest
 * returns to the pool before the pick and may serve it.  Without, or where
 * host memory for the record ran out, it is the pool's, as cuemm_alloc's
 * are (its owned entry says so), until its free decides whether a thread's
 * cache keeps it. */
__attribute__((noinline)) CUresult cuemm__exchange_alloc_from_pool(cuemm_manager *m, cuemm__heap *h, CUdeviceptr *p,
                                                          size_t size, CUstream stream)
{
  size_t rs = cuemm__pool_round(size);
  uintptr_t ptr;
  uint32_t blk;
  int kept = rs < CUEMM__HEAP_LARGE || cuemm__event_own_only(stream) || cuemm__keep_large(m);
  cuemm__heap *own = h; /* its blocks of this stream go back before the pool grows, kept or not */
  if (rs > CUEMM__HEAP_LARGE_MAX || !kept)
    h = NULL; /* a block no thread's cache keeps */
  pool_lock(m, own, rs);
  if (__builtin_expect(m->keep_quiet != 0, 0) && --m->keep_quiet == 0)
    cuemm__thread_heap_keep_share(m); /* the pool has stopped growing: the threads keep large blocks again */
  if (cuemm__pool_is_suspended(m->pool)) {
    m->st.alloc_failures++;
    cuemm__lock_release(&m->lock);
    return cuemm__pool_refuse_suspended(m->pool, "cuemm_allocate_async");
  }
  /* The heap is entered twice, around the pick and not across it: where
   * the pool must grow, it first takes idle blocks back from every
   * thread's heap (cuemm__exchange_reclaim), this one's too. */
  if (own && rs >= CUEMM__HEAP_LARGE && rs <= CUEMM__HEAP_LARGE_MAX && !cuemm__event_own_only(stream)) {
    int in = cuemm__thread_heap_get(own);
    cuemm__exchange_evict_large(m, own, cuemm__heap_stream(own, stream));
    cuemm__thread_heap_exit(own, in);
  }
  uint32_t tag;
  CUresult r = pool_take_for(m, own, size, stream, &ptr, &blk, &tag);
  if (r == CUDA_SUCCESS) {
    /* The block remembers its stream (its descriptor's word): for
     * cuemm_record_stream and snapshots while the pool holds it. */
    cuemm__pool_set_block_word(m->pool, blk, (uint64_t)(uintptr_t)(stream ? stream : CU_STREAM_LEGACY));
    uint32_t rec = h ? heap_record(h, ptr, rs, blk, size, stream) : CUEMM__HEAP_NIL;
    r = owned_record(m, h, rec, ptr, rs, size, blk, tag, stream);
  }
  if (r != CUDA_SUCCESS)
    m->st.alloc_failures++;
  cuemm__lock_release(&m->lock);
  if (r == CUDA_SUCCESS) {
    *p = (CUdeviceptr)ptr;
    cuemm__nvtx_live(cuemm__pool_nvtx(m->pool), ptr, size);
  } else
    cuemm__error_append(" (cuemm_alloc_async of %zu bytes on stream %p)", size, (void *)stream);
  return r;
}

/* Gives the pool the oldest large block h keeps for stream hs when the
 * stream keeps as many as it may, to make room for a newer one.  Both
 * locks held. */
void cuemm__exchange_evict_large(cuemm_manager *m, cuemm__heap *h, uint32_t hs)
{
  if (hs == CUEMM__HEAP_NIL || !h->st[hs].nlarge || h->st[hs].nlarge < cuemm__keep_large(m))
    return;
  uint32_t r = *cuemm__heap_large_at(&h->st[hs], 0);
  cuemm__heap_unbin(h, r);
  cuemm__exchange_to_pool(m, h, r, h->st[hs].s);
}

/* The release threshold covers the caches: a heap holding more than it
 * gives its idle blocks back, and the pool releases what is then wholly
 * free beyond the threshold.  A release that fails leaves the memory mapped
 * and usable; the free that got here has succeeded either way. */
__attribute__((noinline)) void cuemm__exchange_trim_heap(cuemm_manager *m, cuemm__heap *h)
{
  cuemm__saved_error keep;
  cuemm__error_save(&keep);
  cuemm__lock_acquire(&m->lock);
  cuemm__ctx_guard g;
  if (cuemm__ctx_enter(m, &g) == CUDA_SUCCESS) {
    cuemm__pool_note_low(m->pool);
    cuemm__heap_lock(h);
    /* Every idle block, the oldest first: each trim costs an event, so the
     * next one should be a whole cap of frees away.  Blocks whose streams
     * are still busy stay: try again only after the cache has grown by
     * another part of the cap. */
    size_t t = cuemm__thread_heap_cap(m);
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
  cuemm__exchange_trim_tagged(m);
  cuemm__lock_release(&m->lock);
  cuemm__error_restore(&keep, CUDA_SUCCESS);
}

int cuemm__exchange_defer_record(cuemm_manager *m, cuemm__heap *h, uint32_t r)
{
  cuemm__hblock *b = &h->b[r];
  uintptr_t ptr = cuemm__hb_ptr(b);
  if (cuemm__manager_defer_block(m, ptr, b->size, b->blk) != 0)
    return -1;
  cuemm__owned_drop(&m->owned, ptr);
  if (b->state == CUEMM__HB_CACHED)
    cuemm__heap_unbin(h, r);
  if (b->uses)
    cuemm__exchange_drop_uses(h, r);
  cuemm__heap_remove(h, r);
  return 0;
}

void cuemm__exchange_drop_uses(cuemm__heap *h, uint32_t r)
{
  for (uint32_t i = 0; i < h->nuses;)
    if (h->uses[i].r == r) {
      if (h->uses[i].ev)
        h->evcache[h->nev++] = h->uses[i].ev;
      h->uses[i] = h->uses[--h->nuses];
    } else {
      i++;
    }
  h->b[r].uses = 0;
}

CUresult cuemm__exchange_give_up(cuemm_manager *m, cuemm__owned_entry *e)
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
  cuemm__exchange_drop_uses(o, rec);
  size_t size = b->size;
  uint32_t blk = b->blk;
  uintptr_t p = e->key;
  if (cuemm__manager_defer_block(m, p, size, blk) != 0) {
    cuemm__heap_unlock(o);
    return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "no host memory left to queue the free of 0x%" PRIxPTR, p);
  }
  o->allocs--;
  m->st.allocs++;
  cuemm__heap_remove(o, rec);
  cuemm__heap_unlock(o);
  cuemm__owned_remove(&m->owned, e);
  return CUDA_SUCCESS;
}

void cuemm__exchange_reset(cuemm_manager *m)
{
  for (uint32_t i = 0; i < m->nheaps; i++) {
    cuemm__heap *h = m->heaps[i];
    cuemm__heap_lock(h);
    for (uint32_t r = 1; r < h->nb; r++) {
      cuemm__hblock *b = &h->b[r];
      if (b->state == CUEMM__HB_UNUSED)
        continue;
      if (cuemm__exchange_defer_record(m, h, r) != 0)
        continue;
    }
    cuemm__heap_unlock(h);
  }
}

/* The owned entry of a block now held by heap h (its rounded size `rs`).
 * `from_pool`: the pool held it (cuemm_alloc's block, or cuemm_alloc_async's
 * not kept by a thread), whose counts it leaves for the heap's.  m's lock
 * held. */
void cuemm__exchange_entry_to_heap(cuemm_manager *m, cuemm__owned_entry *e, const cuemm__heap *h, size_t rs,
                                   int from_pool)
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
