/* exchange.h: what exchange.c offers, and the inline parts of the
 * exchange of blocks between the threads' heaps and the pool that the
 * fast paths and the pool's hot path use: giving a block back as freed on
 * a stream, the release threshold's check, the steal hint, and what a heap
 * keeps (cuemm__exchange_surplus, cuemm__exchange_takes_large, cuemm__exchange_admits).
 */
#ifndef CUEMM_EXCHANGE_H
#define CUEMM_EXCHANGE_H

#include "stream/heap.h"
#include "core/internal.h"
#include "stream/span.h"
#include "stream/event.h"
#include "stream/tags.h"

/* A span's block given back as freed on `stream` (cuemm__exchange_give_on): into
 * the span when freed on the span's stream or `idle`, an empty span back
 * to the pool; -1 when it must wait for a flush.  m's lock held, the
 * span's heap held. */
int cuemm__exchange_span_give(cuemm_manager *m, uint32_t blk, CUstream stream, int idle);

/* Gives pool block blk back as freed on `stream` (never the per-thread
 * default stream).  Returns 0, or -1 when host memory ran out (nothing
 * changed), or for a span's block (span.h, whose heap the caller holds)
 * freed on another stream than its span's, which must wait for a flush.
 * m's lock held. */
static inline __attribute__((always_inline)) int cuemm__exchange_give_on(cuemm_manager *m, uint32_t blk, CUstream stream)
{
  if (__builtin_expect(cuemm__span_blk(blk), 0))
    return cuemm__exchange_span_give(m, blk, stream, 0);
  cuemm__heap *ps = m->pstreams;
  uint32_t k = ps ? cuemm__heap_stream(ps, stream) : CUEMM__HEAP_NIL;
  if (k == CUEMM__HEAP_NIL && (k = cuemm__tags_stream_add(m, stream)) == CUEMM__HEAP_NIL)
    return -1;
  ps = m->pstreams;
  cuemm__hstream *a = &ps->st[k];
  if (cuemm__pool_give_tagged(m->pool, blk, k + 1, a->freed + 1) != 0)
    return -1;
  a->freed++;
  return 0;
}

/* cuemm__exchange_give_on, or where host memory ran out, the pending queue (whose
 * flush synchronizes): never lost.  m's lock held. */
static inline __attribute__((always_inline)) void cuemm__exchange_return_on(cuemm_manager *m, uintptr_t ptr, size_t size,
                                                                 uint32_t blk, CUstream stream)
{
  if (__builtin_expect(cuemm__exchange_give_on(m, blk, stream) == 0, 1))
    return;
  if (cuemm__manager_defer_block(m, ptr, size, blk) == 0)
    return;
  if (cuemm__span_blk(blk))
    cuemm__exchange_span_give(m, blk, stream, 1); /* no memory for either: cannot happen in practice */
  else
    cuemm__pool_give_tagged(m->pool, blk, 0, 0); /* no memory for either: cannot happen in practice */
}

/* The release threshold's check after blocks went to the pool as freed on
 * a stream: inline a compare against the mark, the work (an event on each
 * of their streams, a release) in cuemm__tags_trim_now.  m's
 * lock held. */
static inline void cuemm__exchange_trim_tagged(cuemm_manager *m)
{
  if (__builtin_expect(m->pstreams && cuemm__pool_tagged_bytes(m->pool) >= m->pstreams->trim_mark, 0))
    cuemm__tags_trim_now(m);
}

/* Moves cached block r (of another stream) to LIVE on hs. */
static inline void cuemm__exchange_take_cached(cuemm__heap *h, uint32_t r, uint32_t hs, size_t req)
{
  cuemm__heap_take(h, r, hs, req);
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
      h->b[t].seq > h->st[k].done || h->b[t].size < rs)
    return CUEMM__HEAP_NIL;
  cuemm__exchange_take_cached(h, t, hs, req);
  return t;
}

/* The large blocks a thread's heap keeps for one stream (its share of
 * cfg.stream_keep_large, thread-heap.c). */
static inline uint32_t cuemm__keep_large(const cuemm_manager *m)
{
  return atomic_load_explicit(&m->keep_large, memory_order_relaxed);
}

/* Whether h keeps a block of `size` bytes freed on `stream` rather than
 * the pool taking it at once.  Small blocks stay while the cache has room.
 * Of large ones (up to CUEMM__HEAP_LARGE_MAX), each stream keeps the
 * cuemm__keep_large (its thread's share of cuemm_config.stream_keep_large)
 * it freed last, the oldest going back to
 * the pool as a newer one of a size in demand comes (free_evicting): the
 * activations of a layer come back in the next layer at the same sizes,
 * while blocks freed long before merge in the pool, where they serve any
 * size.  Kept large blocks are few, since each one splits the free space
 * around it (a serving trace held 1.21x its live bytes with every block up
 * to 1 MiB kept by size, 1.05x with none; the pool takes kept blocks back
 * before it grows).  The per-thread default stream's blocks always stay
 * (the pool cannot record on that stream).  Heap locked. */
static inline int cuemm__exchange_admits(cuemm__heap *h, CUstream stream, size_t size)
{
  if (cuemm__event_own_only(stream))
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
static inline int cuemm__exchange_surplus(const cuemm__heap *h, size_t size, uint32_t hs, CUstream stream)
{
  if (size < CUEMM__HEAP_LARGE || cuemm__event_own_only(stream))
    return 0;
  if (size > CUEMM__HEAP_LARGE_MAX)
    return 1;
  return hs != CUEMM__HEAP_NIL && h->st[hs].nlarge >= cuemm__keep_large(h->m);
}

/* Whether stream hs of h (NIL: one it has not met) keeps a large block of
 * `size` bytes freed on it: while it keeps fewer than it may, or in place
 * of the oldest kept when the size is among its latest requests that no
 * kept block served (free_evicting says why); never while the threads
 * keep none. */
static inline int cuemm__exchange_takes_large(const cuemm_manager *m, const cuemm__heap *h, uint32_t hs, size_t size)
{
  uint32_t keep = cuemm__keep_large(m);
  if (!keep)
    return 0; /* none while the pool grows past its peak (CUEMM__KEEP_QUIET) */
  if (hs == CUEMM__HEAP_NIL || h->st[hs].nlarge < keep)
    return 1;
  for (unsigned i = 0; i < CUEMM__HEAP_WANTED; i++)
    if (h->st[hs].wanted[i] == size)
      return 1;
  return 0;
}

/* A block of size rs, freed by another stream of h, that stream hs may use
 * now: known complete, with no driver call (*others: whether another
 * stream holds blocks of that size at all).  Heap entered by its owner. */
uint32_t cuemm__exchange_steal_idle(cuemm__heap *h, uint32_t hs, size_t rs, size_t req, int *others);

/* The same, asking the driver with events where needed.  Owner's thread,
 * heap locked. */
uint32_t cuemm__exchange_steal(cuemm_manager *m, cuemm__heap *h, uint32_t hs, size_t rs, size_t req);

/* With `on`, raises CUEMM__HEAP_WANT_HOLD on every thread's heap (and on
 * heaps made later, while the pool is suspended), waiting for each owner
 * to leave its fast path: from then on the owners take the slow paths,
 * which see the pool's `suspended` flag.  Without, lowers it.  m's lock
 * held; the pool's flag is set before (and cleared after) this call. */
void cuemm__exchange_hold(cuemm_manager *m, int on);

/* The reclaim hook (manager.h): cached blocks of every heap back to the
 * pool. */
size_t cuemm__exchange_reclaim(cuemm_manager *m, int how, size_t want);

/* Record r of h leaves the heap, the block back to the pool as freed on
 * `stream`.  Both locks held. */
void cuemm__exchange_to_pool(cuemm_manager *m, cuemm__heap *h, uint32_t r, CUstream stream);

/* The oldest large block h keeps for stream hs back to the pool, when the
 * stream keeps as many as it may.  Both locks held. */
void cuemm__exchange_evict_large(cuemm_manager *m, cuemm__heap *h, uint32_t hs);

/* A block of `size` bytes from the pool for `stream`, into h (may be NULL)
 * when it keeps the size.  Takes the manager's lock. */
CUresult cuemm__exchange_alloc_from_pool(cuemm_manager *m, cuemm__heap *h, CUdeviceptr *p, size_t size,
                                         CUstream stream);

/* The owner's large request on `stream` when its span had no room: a new
 * span taken from the pool, and the block cut from it
 * (CUEMM__NEXT where none could be made: the caller goes to the pool).
 * Takes the manager's lock; heap not held. */
cuemm__result cuemm__exchange_span_open(cuemm_manager *m, cuemm__heap *h, CUdeviceptr *p, size_t size, CUstream stream);

/* Stream hs of h is being retired: its spans serve no more blocks, and go
 * back to the pool through a flush once empty (the empty ones now).  m's
 * lock held, h held. */
void cuemm__exchange_spans_retire(cuemm_manager *m, cuemm__heap *h, uint32_t hs);

/* Gives span `id` of h back to the pool, now empty: takes the manager's
 * lock (the owner's free found it empty).  Heap not held. */
void cuemm__exchange_span_close(cuemm_manager *m, cuemm__heap *h, uint32_t id);

/* Gives h's idle blocks back when it holds more than its cap.  Takes the
 * manager's lock. */
void cuemm__exchange_trim_heap(cuemm_manager *m, cuemm__heap *h);

/* Record r of h (live or cached) leaves the heap and the owned table for
 * the pending queue, whose flush synchronizes before the pool reuses it.
 * 0, or -1 when host memory ran out (nothing changed).  m's lock held, h
 * held. */
int cuemm__exchange_defer_record(cuemm_manager *m, cuemm__heap *h, uint32_t r);

/* Forgets the streams cuemm_record_stream named for record r.  Heap
 * locked. */
void cuemm__exchange_drop_uses(cuemm__heap *h, uint32_t r);

/* The owned entry of a block now held by heap h (its rounded size `rs`);
 * `from_pool`: the pool held it, whose counts it leaves for the heap's.
 * m's lock held. */
void cuemm__exchange_entry_to_heap(cuemm_manager *m, cuemm__owned_entry *e, const cuemm__heap *h, size_t rs,
                                   int from_pool);

/* The give_up and reset hooks (manager.h). */
CUresult cuemm__exchange_give_up(cuemm_manager *m, cuemm__owned_entry *e);
void cuemm__exchange_reset(cuemm_manager *m);

#endif
