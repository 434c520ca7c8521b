/* stream.c: owns the stream-ordered path's public calls, cuemm_alloc_async,
 * cuemm_free_async, cuemm_record_stream and cuemm_stream_release, the
 * alloc and free paths they take through a thread's heap, and the
 * manager's hooks (the extension).  What they rest on has a file each: the
 * threads' heaps and how a thread finds and enters one (thread-heap.c, the
 * heap itself heap.c), the events that tell which frees are done
 * (event.c), and the exchange of blocks between the heaps and the
 * pool: what a heap keeps, stealing, giving back (exchange.c), and the
 * pool's tags for the blocks freed on a stream (tags.c).  Calls go
 * that way only: stream.c -> exchange.c -> tags.c -> event.c,
 * thread-heap.c.
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
 * each block it gave out).  Before it grows, the pool takes back the idle
 * blocks of the calling thread's cache; other threads' only when it cannot
 * grow (cuemm__exchange_reclaim), since raiding them costs handshakes and
 * events on every miss.  Each thread's cache keeps its share of the cap
 * instead (cuemm__thread_heap_cap).
 * A thread that exits leaves its heap to the manager; the next new thread
 * adopts it.
 *
 * A thread's cache keeps small blocks, and of a larger size the few each
 * stream freed last (cuemm__exchange_admits): a block whose size recurs soon stays on
 * the fast path, and the others go back to the pool, where blocks freed on
 * one stream merge and serve that stream at once (see "blocks freed on a
 * stream, in the pool" below).  So large blocks coalesce as they would in
 * a pool without streams, and such a free needs no event.  A block of a
 * size the cache keeps enters it when the pool hands it out, LIVE, so that
 * its free takes the fast path too.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/internal.h"
#include "stream/exchange.h"
#include "trace/internal.h"
#include "stream/event.h"
#include "stream/span.h"
#include "stream/free.h"
#include "stream/tags.h"
#include "stream/stream.h"
#include "stream/thread-heap.h"

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
  atomic_store_explicit(&m->keep_large, (uint32_t)m->cfg.stream_keep_large, memory_order_relaxed);
  if (m->pool) {
    cuemm__pool_set_span_give(m->pool, cuemm__span_give_idle, m);
  }
  return CUDA_SUCCESS;
}

static inline stream_path path_of(const cuemm_manager *m, const char *fn, CUresult *why)
{
  if (__builtin_expect(m && m->stream_ready, 1))
    return PATH_STREAM;
  return path_checked(m, fn, why);
}

/* The newest block of stream hs's bin for `size` when it is of that very
 * size, LIVE now, or NIL: the fast path's hit.  Heap entered by its owner. */
static inline __attribute__((always_inline)) uint32_t heap_hit(cuemm__heap *h, uint32_t hs, size_t size,
                                                               uint32_t *binp)
{
  size_t rs = cuemm__pool_round(size);
  uint32_t bin = cuemm__heap_bin(h, hs, rs), head;
  *binp = bin;
  if (bin == CUEMM__HEAP_NIL || (head = h->bins[bin].head) == CUEMM__HEAP_NIL || h->b[head].size != rs)
    return CUEMM__HEAP_NIL;
  return cuemm__heap_pop(h, bin, hs, size);
}

/* A block of stream hs's bin `bin` for `size` (cuemm__heap_bin's answer for
 * it: its size class; for a large size, or the next class's within an
 * eighth) large enough, LIVE now, or NIL: past the fast path's hit, which
 * found the bin already.  Heap entered or locked. */
static uint32_t heap_hit_in(cuemm__heap *h, uint32_t hs, size_t size, uint32_t bin)
{
  size_t rs = cuemm__pool_round(size);
  if (rs < CUEMM__HEAP_LARGE && (bin == CUEMM__HEAP_NIL || h->bins[bin].head == CUEMM__HEAP_NIL))
    return CUEMM__HEAP_NIL; /* a large request may still find the next class's */
  return cuemm__heap_pop_fit(h, bin, hs, rs, size);
}

/* heap_hit_in for a caller that has not looked the bin up (the slow path). */
static uint32_t heap_hit_class(cuemm__heap *h, uint32_t hs, size_t size)
{
  return heap_hit_in(h, hs, size, cuemm__heap_bin(h, hs, cuemm__pool_round(size)));
}

/* Whether h cuts a request of rs bytes on stream hs from a span (span.h):
 * it takes spans, the size is a large one a heap keeps, and the stream is
 * neither the per-thread default stream nor retired. */
static inline int heap_spans(const cuemm__heap *h, uint32_t hs, size_t rs, CUstream stream)
{
  return h->spanning && rs >= CUEMM__HEAP_LARGE && rs <= CUEMM__HEAP_LARGE_MAX && !cuemm__event_own_only(stream) &&
         !h->st[hs].retired;
}

static __attribute__((noinline)) CUresult alloc_async_slow(cuemm_manager *m, cuemm__heap *h, CUdeviceptr *p,
                                                           size_t size, CUstream stream)
{
  if (size == 0)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_allocate_async: size is 0 (cuMemAllocAsync refuses "
                        "zero-byte allocations)");
  if (size > cuemm__pool_capacity(m->pool)) {
    /* Too large for the pool: cuemm_alloc's way (cuMemAlloc, whose memory
     * is idle from the start and so serves any stream, its free deferred;
     * or the refusal of a hard limit). */
    CUresult r = cuemm_allocate(m, size, p);
    if (r != CUDA_SUCCESS)
      cuemm__error_append(" (cuemm_alloc_async on stream %p)", (void *)stream);
    return r;
  }
  CUresult r;
  size_t rs = cuemm__pool_round(size);
  if (!h) {
    cuemm__lock_acquire(&m->lock);
    r = cuemm__thread_heap_attach_locked(m, &h);
    cuemm__lock_release(&m->lock);
    if (r != CUDA_SUCCESS)
      return r;
  }
  cuemm__heap_lock(h);
  if (cuemm__pool_is_suspended(m->pool)) {
    /* The heap's cache may hold blocks freed since the suspension, in
     * memory that is gone: none is handed out. */
    cuemm__heap_unlock(h);
    return cuemm__pool_refuse_suspended(m->pool, "cuemm_allocate_async");
  }
  uint32_t hs = cuemm__heap_stream(h, stream);
  if (hs == CUEMM__HEAP_NIL && (hs = cuemm__heap_add_stream(h, stream)) == CUEMM__HEAP_NIL) {
    cuemm__heap_unlock(h);
    return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "cuemm_allocate_async: no host memory to track stream %p",
                        (void *)stream);
  }
  uint32_t got = heap_hit_class(h, hs, size);
  if (got == CUEMM__HEAP_NIL)
    got = cuemm__exchange_steal(m, h, hs, rs, size);
  int span = got == CUEMM__HEAP_NIL && heap_spans(h, hs, rs, stream);
  if (span)
    got = cuemm__span_cut(h, hs, rs, size);
  if (got != CUEMM__HEAP_NIL) {
    *p = (CUdeviceptr)cuemm__hb_ptr(&h->b[got]);
    cuemm__heap_unlock(h);
    cuemm__nvtx_live(cuemm__pool_nvtx(m->pool), (uintptr_t)*p, size);
    return CUDA_SUCCESS;
  }
  cuemm__heap_unlock(h);
  if (span) {
    cuemm__result res = cuemm__exchange_span_open(m, h, p, size, stream);
    if (res != CUEMM__NEXT)
      return (CUresult)res;
  }

  return cuemm__exchange_alloc_from_pool(m, h, p, size, stream);
}

/* Hands record r, taken on the owner's fast path, to the program. */
static inline __attribute__((always_inline)) CUresult heap_served(cuemm_manager *m, cuemm__heap *h, uint32_t r,
                                                                 CUdeviceptr *p, size_t size)
{
  *p = (CUdeviceptr)cuemm__hb_ptr(&h->b[r]);
  cuemm__heap_leave(h);
  cuemm__nvtx_live(cuemm__pool_nvtx(m->pool), (uintptr_t)*p, size);
  return CUDA_SUCCESS;
}

/* The owner's way past a hit: blocks of this size other streams of the
 * heap freed, else the pool.  Heap entered, stream hs met; leaves it. */
static __attribute__((noinline)) CUresult alloc_async_miss(cuemm_manager *m, cuemm__heap *h, CUdeviceptr *p,
                                                           size_t size, CUstream stream, uint32_t hs, uint32_t bin)
{
  size_t rs = cuemm__pool_round(size);
  int others = 0;
  uint32_t r = CUEMM__HEAP_NIL;
  if (atomic_load_explicit(&h->rhead, memory_order_relaxed) != CUEMM__HEAP_NIL) {
    /* Blocks other threads freed for this one: into the bins first (which
     * may move the bins: `bin` is found again). */
    cuemm__heap_drain_remote_list(h);
    r = heap_hit(h, hs, size, &bin);
  }
  /* The bins, unless the request is large and no stream of the heap keeps
   * a large block (a training step's tensors while the threads keep none,
   * CUEMM__KEEP_QUIET, or sizes past CUEMM__HEAP_LARGE_MAX): then none of
   * them can serve it. */
  if (r == CUEMM__HEAP_NIL && (rs < CUEMM__HEAP_LARGE || h->cached_large)) {
    r = heap_hit_in(h, hs, size, bin);
    if (r == CUEMM__HEAP_NIL)
      r = steal_hint(h, hs, rs, size);
    if (r == CUEMM__HEAP_NIL)
      r = cuemm__exchange_steal_idle(h, hs, rs, size, &others);
  }
  /* A thread whose pool visits queue on the manager's lock: its own span,
   * or a new one (span.h; CUEMM__NEXT where none can be made). */
  int span = r == CUEMM__HEAP_NIL && heap_spans(h, hs, rs, stream);
  if (span)
    r = cuemm__span_cut(h, hs, rs, size);
  if (r != CUEMM__HEAP_NIL)
    return heap_served(m, h, r, p, size);
  cuemm__heap_leave(h);
  cuemm__result res;
  if (span && (res = cuemm__exchange_span_open(m, h, p, size, stream)) != CUEMM__NEXT)
    return (CUresult)res;
  if (!others && size <= cuemm__pool_capacity(m->pool))
    return cuemm__exchange_alloc_from_pool(m, h, p, size, stream); /* no stream of this heap has a block of this size */
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
  uint32_t bin;
  if ((r = heap_hit(h, hs, size, &bin)) != CUEMM__HEAP_NIL)
    return heap_served(m, h, r, p, size);
  return alloc_async_miss(m, h, p, size, stream, hs, bin);
}

static inline __attribute__((always_inline)) CUresult alloc_async(cuemm_manager *m, CUdeviceptr *p, size_t size,
                                                                 CUstream stream)
{
  CUresult why = CUDA_SUCCESS;
  stream_path way = path_of(m, "cuemm_allocate_async", &why);
  if (__builtin_expect(way != PATH_STREAM, 0))
    return way == PATH_REFUSED ? why
                               : deferred_instead(cuemm__manager_alloc_device(m, p, size), "cuemm_allocate_async", stream);
  if (!p)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_allocate_async: p is NULL");
  cuemm__heap *h = cuemm__thread_heap_of(m);
  if (size > CUEMM__HEAP_LARGE_MAX && h && size <= cuemm__pool_capacity(m->pool) && !cuemm__event_own_only(stream))
    return cuemm__exchange_alloc_from_pool(m, NULL, p, size, stream); /* a size no thread's cache keeps */
  if (__builtin_expect(h && size - 1 < cuemm__pool_capacity(m->pool), 1))
    return alloc_async_owner(m, h, p, size, stream);
  return alloc_async_slow(m, h, p, size, stream);
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
  int in = cuemm__thread_heap_get(h);
  uint32_t r = cuemm__heap_find(h, (uintptr_t)dp), hs = cuemm__heap_stream(h, stream);
  if (r == CUEMM__HEAP_NIL || !cuemm__heap_freeable(h, r) || hs == CUEMM__HEAP_NIL) {
    cuemm__thread_heap_exit(h, in);
    cuemm__lock_release(&m->lock);
    return cuemm__free_async_slow(m, h, dp, stream, freed, 0);
  }
  size_t req = h->b[r].req;
  if (!cuemm__exchange_takes_large(m, h, hs, h->b[r].size)) {
    h->frees++;
    cuemm__nvtx_dead(cuemm__pool_nvtx(m->pool), (uintptr_t)dp);
    cuemm__exchange_to_pool(m, h, r, stream);
    cuemm__thread_heap_exit(h, in);
    cuemm__exchange_trim_tagged(m);
    cuemm__lock_release(&m->lock);
    if (freed)
      *freed = req;
    return CUDA_SUCCESS;
  }
  cuemm__exchange_evict_large(m, h, hs);
  if (cuemm__heap_cache(h, r, hs) != 0) {
    cuemm__thread_heap_exit(h, in);
    cuemm__lock_release(&m->lock);
    return cuemm__free_async_slow(m, h, dp, stream, freed, 0);
  }
  int over = h->cached_bytes > h->trim_mark;
  cuemm__nvtx_dead(cuemm__pool_nvtx(m->pool), (uintptr_t)dp);
  cuemm__thread_heap_exit(h, in);
  cuemm__exchange_trim_tagged(m); /* the evicted block counts toward the release threshold */
  cuemm__lock_release(&m->lock);
  if (freed)
    *freed = req;
  if (__builtin_expect(over, 0))
    cuemm__exchange_trim_heap(m, h);
  return CUDA_SUCCESS;
}

/* Leaves the heap after the owner's fast path cached the block at dp. */
static inline __attribute__((always_inline)) CUresult heap_kept(cuemm_manager *m, cuemm__heap *h, CUdeviceptr dp)
{
  int over = h->cached_bytes > h->trim_mark;
  cuemm__nvtx_dead(cuemm__pool_nvtx(m->pool), (uintptr_t)dp); /* before another thread may take the block */
  cuemm__heap_leave(h);
  if (__builtin_expect(over, 0))
    cuemm__exchange_trim_heap(m, h);
  return CUDA_SUCCESS;
}

/* The owner's way past a hit: record r (NIL: dp is not in h) freed on
 * `stream` goes into a bin made for it, or in place of the oldest kept
 * block (free_evicting), or the general way.  Heap entered; leaves it. */
static __attribute__((noinline)) CUresult free_async_rest(cuemm_manager *m, cuemm__heap *h, CUdeviceptr dp,
                                                          CUstream stream, size_t *freed, uint32_t r)
{
  if (r != CUEMM__HEAP_NIL && cuemm__heap_freeable(h, r)) {
    uint32_t hs = cuemm__heap_stream(h, stream);
    if (freed)
      *freed = h->b[r].req;
    if (hs != CUEMM__HEAP_NIL && !cuemm__exchange_surplus(h, h->b[r].size, hs, stream) && cuemm__heap_cache(h, r, hs) == 0)
      return heap_kept(m, h, dp);
    if (hs != CUEMM__HEAP_NIL && h->b[r].size <= CUEMM__HEAP_LARGE_MAX && m->cfg.stream_keep_large &&
        cuemm__exchange_surplus(h, h->b[r].size, hs, stream)) {
      cuemm__heap_leave(h);
      return free_evicting(m, h, dp, stream, freed);
    }
  }
  cuemm__heap_leave(h);
  return cuemm__free_async_slow(m, h, dp, stream, freed, r == CUEMM__HEAP_NIL);
}

/* The owner's free of record r, a span's block with no owned entry (span.h):
 * on the span's stream, back into the span, an empty span back to the
 * pool; on another stream, the way of any block (cached on that stream
 * until its work is done).  Heap entered; leaves it. */
static __attribute__((noinline)) CUresult free_span(cuemm_manager *m, cuemm__heap *h, CUdeviceptr dp,
                                                    CUstream stream, size_t *freed, uint32_t r)
{
  uint32_t hs = cuemm__heap_stream(h, stream), id = cuemm__span_id(h->b[r].blk);
  const cuemm__span *sp = cuemm__span_at(m, id);
  if (hs == CUEMM__HEAP_NIL || hs != sp->hs || sp->retired || cuemm__event_own_only(stream))
    return free_async_rest(m, h, dp, stream, freed, r);
  if (freed)
    *freed = h->b[r].req;
  int empty = cuemm__span_free(m, h, r);
  cuemm__nvtx_dead(cuemm__pool_nvtx(m->pool), (uintptr_t)dp);
  cuemm__heap_leave(h);
  if (empty)
    cuemm__exchange_span_close(m, h, id);
  return CUDA_SUCCESS;
}

/* The calling thread's own heap h: a block it holds, freed into an
 * existing bin, inline; anything else by a call. */
static inline __attribute__((always_inline)) CUresult free_async_owner(cuemm_manager *m, cuemm__heap *h,
                                                                      CUdeviceptr dp, CUstream stream, size_t *freed)
{
  if (__builtin_expect(!cuemm__heap_enter(h), 0))
    return cuemm__free_async_slow(m, h, dp, stream, freed, 0);
  uint32_t r = cuemm__heap_find(h, (uintptr_t)dp);
  if (r != CUEMM__HEAP_NIL && cuemm__heap_freeable(h, r)) {
    if (__builtin_expect((h->b[r].blk & (CUEMM__SPAN_BIT | CUEMM__SPAN_OWNED)) == CUEMM__SPAN_BIT, 0))
      return free_span(m, h, dp, stream, freed, r);
    uint32_t hs = cuemm__heap_stream(h, stream);
    if (hs != CUEMM__HEAP_NIL && !cuemm__exchange_surplus(h, h->b[r].size, hs, stream) &&
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
                               : deferred_instead(cuemm__manager_free_device(m, dp, freed), "cuemm_free_async", stream);
  cuemm__heap *h = cuemm__thread_heap_of(m);
  if (__builtin_expect(h != NULL, 1))
    return free_async_owner(m, h, dp, stream, freed);
  return cuemm__free_async_slow(m, h, dp, stream, freed, 0);
}

/* The event log's rows, out of the fast paths' way. */
static __attribute__((noinline)) CUresult alloc_async_logged(cuemm_manager *m, CUdeviceptr *p, size_t size,
                                                             CUstream stream)
{
  if (!p)
    return alloc_async(m, p, size, stream);
  *p = 0;
  CUresult r = alloc_async(m, p, size, stream);
  cuemm__manager_log_alloc(m, r, *p, size, stream, "alloc_async");
  return r;
}

static __attribute__((noinline)) CUresult free_async_logged(cuemm_manager *m, CUdeviceptr dp, CUstream stream)
{
  size_t size = 0;
  uint64_t seq = cuemm__log_take(m->log);
  CUresult r = free_async(m, dp, stream, &size);
  if (r == CUDA_SUCCESS)
    cuemm__manager_log_free(m, seq, dp, size, stream, "free_async");
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
CUEMM_EXTERN CUresult cuemm_allocate_async(cuemm_manager *m, size_t size, CUstream stream, CUdeviceptr *p)
{
  if (__builtin_expect(m && m->stream_inline && p && size - 1 < CUEMM__HEAP_LARGE_MAX && cuemm__thread_heap_slot_first(m) &&
                       cuemm__tls[0].h, 1))
    return alloc_async_owner(m, cuemm__tls[0].h, p, size, stream);
  return alloc_async_any(m, p, size, stream);
}

CUEMM_EXTERN CUresult cuemm_free_async(cuemm_manager *m, CUdeviceptr dp, CUstream stream)
{
  if (__builtin_expect(m && m->stream_inline && cuemm__thread_heap_slot_first(m) && cuemm__tls[0].h, 1))
    return free_async_owner(m, cuemm__tls[0].h, dp, stream, NULL);
  return free_async_any(m, dp, stream);
}

/* Adds to h's uses that `stream` used record rec.  Heap locked. */
static CUresult use_add(cuemm__heap *h, uint32_t rec, CUstream stream)
{
  for (uint32_t i = 0; i < h->nuses; i++)
    if (h->uses[i].r == rec && h->uses[i].s == stream && !h->uses[i].ev)
      return CUDA_SUCCESS;
  if (h->nuses == h->capuses) {
    uint32_t cap = h->capuses ? h->capuses * 2 : 16;
    void *g = realloc(h->uses, cap * sizeof *h->uses);
    if (!g)
      return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "cuemm_record_stream: no host memory");
    h->uses = g;
    h->capuses = cap;
  }
  h->uses[h->nuses++] = (cuemm__huse){ rec, stream, NULL };
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
  cuemm__heap *h = cuemm__thread_heap_of(m);
  CUresult r;
  if (!h && (r = cuemm__thread_heap_attach_locked(m, &h)) != CUDA_SUCCESS)
    return r;
  size_t rs = cuemm__pool_round(e->size);
  CUstream own = (CUstream)(uintptr_t)cuemm__pool_block_word(m->pool, e->aux);
  cuemm__heap_lock(h);
  uint32_t hs = cuemm__heap_stream(h, own ? own : stream);
  if (hs == CUEMM__HEAP_NIL)
    hs = cuemm__heap_add_stream(h, own ? own : stream);
  uint32_t rec = hs == CUEMM__HEAP_NIL ? CUEMM__HEAP_NIL : cuemm__heap_insert(h, e->key, rs, e->aux, hs, e->size);
  if (rec == CUEMM__HEAP_NIL) {
    cuemm__heap_unlock(h);
    return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "cuemm_record_stream: no host memory");
  }
  if ((own != stream || cuemm__event_own_only(stream)) && (r = use_add(h, rec, stream)) != CUDA_SUCCESS) {
    cuemm__heap_remove(h, rec);
    cuemm__heap_unlock(h);
    return r;
  }
  h->allocs++;
  cuemm__heap_unlock(h);
  cuemm__exchange_entry_to_heap(m, e, h, rs, 1);
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
  cuemm__owned_entry *e = cuemm__extensions_owned_lookup(m, p, 0);
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
    else if (stream != o->st[b->hs].s || cuemm__event_own_only(stream))
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
  cuemm__heap *mine = cuemm__thread_heap_of(m);
  for (uint32_t i = 0; i < m->nheaps && r == CUDA_SUCCESS; i++) {
    cuemm__heap *h = m->heaps[i];
    if (cuemm__event_own_only(stream) && h != mine)
      continue;
    cuemm__heap_lock(h);
    for (uint32_t k = 0; k < h->nst && r == CUDA_SUCCESS; k++) {
      cuemm__hstream *a = &h->st[k];
      if (a->s != stream)
        continue;
      /* One last event covers its frees; then the stream is known by a key
       * no new stream can have. */
      r = cuemm__event_record(m, h, a);
      if (r == CUDA_SUCCESS && a->covered < a->freed) {
        /* No room for another event: the blocks go through a flush. */
        for (uint32_t rr = 1; rr < h->nb; rr++)
          if (h->b[rr].state == CUEMM__HB_CACHED && h->b[rr].hs == k && h->b[rr].seq > a->covered)
            (void)cuemm__exchange_defer_record(m, h, rr); /* no host memory: it stays cached */
      }
      if (r == CUDA_SUCCESS) {
        cuemm__exchange_spans_retire(m, h, k); /* its spans serve no more, and go back through a flush */
        a->s = cuemm__thread_heap_retired_key();
        a->retired = 1;
      }
    }
    /* The uses last, all or none: should recording their events fail, they
     * name the stream still, and a free waits for all of its work. */
    if (r == CUDA_SUCCESS)
      r = cuemm__event_release_uses(m, h, stream);
    cuemm__heap_forget_last(h);
    cuemm__heap_unlock(h);
  }
  /* The pool's blocks freed on it: one last event, then the same new key;
   * they become idle when the event completes (cuemm__tags_settle), or at the
   * next synchronizing flush where no event could be recorded. */
  cuemm__heap *ps = m->pstreams;
  uint32_t k = ps && r == CUDA_SUCCESS && !cuemm__event_own_only(stream) ? cuemm__heap_stream(ps, stream)
                                                                       : CUEMM__HEAP_NIL;
  if (k != CUEMM__HEAP_NIL) {
    cuemm__hstream *a = &ps->st[k];
    cuemm__event_query(m, ps, a);
    r = cuemm__event_record(m, ps, a);
    if (r == CUDA_SUCCESS) {
      a->s = cuemm__thread_heap_retired_key();
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
        .ptr = cuemm__hb_ptr(b), .size = b->size, .req = b->state == CUEMM__HB_LIVE ? b->req : 0,
        .stream = st->retired || st->s == CU_STREAM_LEGACY ? NULL : st->s,
        .cached = b->state == CUEMM__HB_CACHED, .retired = st->retired,
      };
      fn(arg, &out);
    }
    cuemm__heap_unlock(h);
  }
}

/* ---- the manager's hooks (the extension)  ----------------------------------------------------------------- */

static void stream_destroy(cuemm_manager *m, char *note, size_t cap)
{
  size_t leaked = cuemm__thread_heaps_fini(m, 1);
  if (leaked)
    snprintf(note, cap, "%zu events of the stream-ordered path could not be destroyed and are leaked in the driver "
             "(%s)", leaked, cuemm_last_error());
}

static void stream_abandon(cuemm_manager *m)
{
  cuemm__thread_heaps_fini(m, 0);
}

const cuemm__extension cuemm__stream_extension = {
  .attach = stream_attach,
  .destroy = stream_destroy,
  .abandon = stream_abandon,
  .live = cuemm__thread_heaps_live,
  .reclaim = cuemm__exchange_reclaim,
  .settle = cuemm__tags_settle,
  .give_up = cuemm__exchange_give_up,
  .reset = cuemm__exchange_reset,
  .stats = cuemm__thread_heaps_stats,
  .grown = cuemm__thread_heaps_grown,
  .live_size = cuemm__thread_heaps_live_size,
  .own = cuemm__span_own,
};
