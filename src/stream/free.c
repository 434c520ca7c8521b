/* free.c: owns the general free of the stream-ordered path, where
 * a block goes that the owner's fast paths (stream.c) cannot keep: any
 * block, freed by any thread.  Its steps are named and called in order
 * from free_async_slow: kept by the calling thread's own heap; found in
 * the owned table, or freed the deferred way; taken out of whoever holds
 * it; admitted to this thread's heap, or given to the pool.  Which blocks
 * a heap keeps is exchange.h's.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/internal.h"
#include "stream/exchange.h"
#include "trace/internal.h"
#include "stream/event.h"
#include "stream/free.h"
#include "stream/thread-heap.h"

/* Caches LIVE record r of h (the caller's own heap) on `stream`.  Heap
 * locked. */
static CUresult cache_on(cuemm_manager *m, cuemm__heap *h, uint32_t r, CUstream stream, const char *fn)
{
  uint32_t hs = cuemm__heap_stream(h, stream);
  if (hs == CUEMM__HEAP_NIL && (hs = cuemm__heap_add_stream(h, stream)) == CUEMM__HEAP_NIL)
    return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "%s: no host memory to track stream %p", fn, (void *)stream);
  CUresult res;
  if (h->b[r].uses && (res = cuemm__event_wait_recorded(m, h, r, h->st[hs].s)) != CUDA_SUCCESS)
    return res;
  if (cuemm__heap_cache(h, r, hs) != 0)
    return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "%s: no host memory to cache the freed block", fn);
  return CUDA_SUCCESS;
}

/* ---- the free path past the fast ones ----------------------------------------------- */

/* A block cuemm__free_async_slow has found under the manager's lock, on its way
 * to its place. */
typedef struct freeing {
  uintptr_t p;
  cuemm__owned_entry *e; /* its owned entry (removals may move it: looked up again after them) */
  size_t size;           /* the pool block's size */
  size_t req;            /* the bytes asked for */
  uint32_t blk;
  cuemm__heap *o;        /* the heap that held it, locked until the block has found its place; NULL: the pool */
} freeing;

/* Step 1: a block of h, the calling thread's own heap, that h may keep:
 * cached on `stream` (or refused as a double free).  Returns whether it
 * was, with its result in *r; else the block is not h's to keep, and the
 * general way follows. */
static int free_own_kept(cuemm_manager *m, cuemm__heap *h, uintptr_t p, CUstream stream, size_t *freed, CUresult *r)
{
  cuemm__heap_lock(h);
  uint32_t rec = cuemm__heap_find(h, p);
  if (rec != CUEMM__HEAP_NIL && (h->b[rec].state == CUEMM__HB_CACHED ||
                                 !cuemm__exchange_surplus(h, h->b[rec].size, cuemm__heap_stream(h, stream), stream))) {
    if (h->b[rec].state == CUEMM__HB_CACHED)
      *r = cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_free_async: double free of 0x%" PRIxPTR " (%zu bytes): "
                        "it was freed on stream %p already", p, h->b[rec].size, (void *)h->st[h->b[rec].hs].s);
    else {
      size_t req = h->b[rec].req;
      if ((*r = cache_on(m, h, rec, stream, "cuemm_free_async")) == CUDA_SUCCESS) {
        cuemm__nvtx_dead(cuemm__pool_nvtx(m->pool), p);
        if (freed)
          *freed = req;
      }
    }
    cuemm__heap_unlock(h);
    return 1;
  }
  cuemm__heap_unlock(h);
  return 0;
}

/* Step 1b: a small block of another thread's heap, the one that held the
 * block this thread freed for another thread last (a consumer frees what
 * one producer allocated: PyTorch's autograd thread, a server's workers):
 * handed back to that heap without taking it or the manager's lock
 * (cuemm__heap_remote_free), to be cached on `stream` as if its owner had
 * freed it there, reusable on that stream at once with no event.  Returns
 * whether it was, with its result in *r; a guess that misses (another
 * heap, a block streams were recorded on, a large one) goes the general
 * way, which learns the right heap for the next time.  Never on the
 * per-thread default stream, which names another stream in the owner. */
static int free_remote(cuemm_manager *m, cuemm__heap *h, uintptr_t p, CUstream stream, size_t *freed, CUresult *r)
{
  if (!h->remote || h->remote == h || stream == CU_STREAM_PER_THREAD)
    return 0;
  size_t req = 0;
  int done = cuemm__heap_remote_free(h->remote, p, stream, &req);
  if (done == 0)
    return 0;
  if (done < 0)
    *r = cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_free_async: double free of 0x%" PRIxPTR ": it was freed "
                      "already, by another thread", p);
  else {
    cuemm__nvtx_dead(cuemm__pool_nvtx(m->pool), p);
    if (freed)
      *freed = req;
    *r = CUDA_SUCCESS;
  }
  return 1;
}

/* Step 2: cuMemAlloc memory (too large for the pool), or nothing of ours:
 * the deferred path frees the one and explains the other, in
 * cuemm_free_async's name. */
static CUresult free_not_pooled(cuemm_manager *m, uintptr_t p, size_t *freed)
{
  return cuemm__manager_free(m, "cuemm_free_async", CUEMM__KIND_DEVICE, p, freed);
}

/* Step 3: the block leaves whoever holds it.  A thread's heap (f->o, left
 * locked) gives up its record, once the streams cuemm_record_stream named
 * are waited for; a block of the pool's only has its size and descriptor
 * read.  A double free, or a wait that fails, changes nothing.  m's lock
 * held. */
static CUresult free_take_out(cuemm_manager *m, freeing *f, CUstream stream)
{
  CUresult r;
  f->req = f->e->size;
  f->o = NULL;
  if (f->e->kind != CUEMM__KIND_STREAM) {
    f->size = cuemm__pool_round(f->e->size), f->blk = f->e->aux;
    return CUDA_SUCCESS;
  }
  cuemm__heap *o = m->heaps[f->e->aux];
  cuemm__heap_lock(o);
  uint32_t rec = cuemm__heap_find(o, f->p);
  if (o->b[rec].state == CUEMM__HB_CACHED) {
    r = cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_free_async: double free of 0x%" PRIxPTR " (%zu bytes): it "
                     "was freed already (on stream %p, by another thread)", f->p, o->b[rec].size,
                     (void *)o->st[o->b[rec].hs].s);
    cuemm__heap_unlock(o);
    return r;
  }
  if (o->b[rec].uses && (r = cuemm__event_wait_recorded(m, o, rec, stream ? stream : CU_STREAM_LEGACY)) !=
                            CUDA_SUCCESS) {
    cuemm__heap_unlock(o);
    return r;
  }
  f->size = o->b[rec].size;
  f->blk = o->b[rec].blk;
  f->req = o->b[rec].req;
  cuemm__heap_remove(o, rec);
  f->o = o;
  return CUDA_SUCCESS;
}

/* Step 4: admission: whether h, the calling thread's heap, keeps the block
 * (cuemm__exchange_admits, cuemm__exchange_takes_large), making room among the stream's kept
 * large blocks first where it takes a large one.  h is entered as on its
 * fast path, or locked when another thread wants it.  m's lock held. */
static int free_admitted(cuemm_manager *m, cuemm__heap *h, freeing *f, CUstream stream)
{
  if (cuemm__span_blk(f->blk))
    return 0; /* a span's block goes back to its span, never into another heap */
  /* A large block no heap takes, known without entering one: past what a
   * heap keeps, or while the threads keep none (CUEMM__KEEP_QUIET).  The
   * per-thread default stream keeps all its blocks. */
  int large = f->size >= CUEMM__HEAP_LARGE && !cuemm__event_own_only(stream);
  if (large && (f->size > CUEMM__HEAP_LARGE_MAX || !cuemm__keep_large(m)))
    return 0;
  int entered = f->o != h ? cuemm__thread_heap_get(h) : 0;
  int admit = cuemm__exchange_admits(h, stream, f->size);
  if (admit && large) {
    uint32_t hs = cuemm__heap_stream(h, stream);
    if (!cuemm__exchange_takes_large(m, h, hs, f->size))
      admit = 0;
    else {
      cuemm__exchange_evict_large(m, h, hs);
      f->e = cuemm__owned_find(&m->owned, f->p); /* removals may move entries */
    }
  }
  if (f->o != h)
    cuemm__thread_heap_exit(h, entered);
  return admit;
}

/* Step 5, not admitted: to the pool, as freed on `stream`: the allocation
 * and its free are counted where it was allocated.  m's lock held. */
static void free_to_pool(cuemm_manager *m, freeing *f, CUstream stream)
{
  if (f->o)
    f->o->frees++;
  else {
    m->st.live_bytes -= f->e->size;
    m->st.live_count--;
    m->st.frees++;
  }
  cuemm__owned_remove(&m->owned, f->e);
  cuemm__nvtx_dead(cuemm__pool_nvtx(m->pool), f->p);
  cuemm__exchange_return_on(m, f->p, f->size, f->blk, stream); /* a span's block needs its heap, f->o, held */
  if (f->o)
    cuemm__heap_unlock(f->o);
  cuemm__exchange_trim_tagged(m);
}

/* Step 5, admitted: into h, cached on `stream`.  Where host memory for the
 * record runs out, the block goes back through the deferred queue instead,
 * which is always correct.  m's lock held. */
static void free_into_heap(cuemm_manager *m, cuemm__heap *h, freeing *f, CUstream stream)
{
  if (f->o) {
    f->o->allocs--; /* counted again below, where the block now lives */
    cuemm__heap_unlock(f->o);
  }
  cuemm__exchange_entry_to_heap(m, f->e, h, f->size, f->o == NULL);
  int entered = cuemm__thread_heap_get(h);
  uint32_t hs = cuemm__heap_stream(h, stream);
  if (hs == CUEMM__HEAP_NIL)
    hs = cuemm__heap_add_stream(h, stream);
  uint32_t rec = hs == CUEMM__HEAP_NIL ? CUEMM__HEAP_NIL : cuemm__heap_insert(h, f->p, f->size, f->blk, hs, f->req);
  cuemm__nvtx_dead(cuemm__pool_nvtx(m->pool), f->p);
  if (rec == CUEMM__HEAP_NIL || cuemm__heap_cache(h, rec, hs) != 0) {
    if (rec != CUEMM__HEAP_NIL)
      cuemm__heap_remove(h, rec);
    cuemm__owned_remove(&m->owned, f->e);
    if (cuemm__manager_defer_block(m, f->p, f->size, f->blk) != 0)
      cuemm__pool_give(m->pool, f->blk); /* cannot happen in practice; never leak */
  } else
    h->allocs++;
  cuemm__thread_heap_exit(h, entered);
  cuemm__exchange_trim_tagged(m); /* a block evicted for this one counts toward the release threshold */
}

/* The general free, in the order a block meets its checks: kept by the
 * calling thread's own heap (step 1); handed back to another thread's heap
 * without a lock (1b); else, under the manager's lock, found in the owned
 * table, or freed the deferred way when the pool never held it (2); taken
 * out of the heap or pool that holds it (3); and either kept by this
 * thread's heap, or given to the pool (4, 5).  `looked`: the
 * caller found no record of dp in h, its own heap (a finding that stands:
 * only h's thread adds records to h). */
__attribute__((noinline)) CUresult cuemm__free_async_slow(cuemm_manager *m, cuemm__heap *h, CUdeviceptr dp,
                                                          CUstream stream, size_t *freed, int looked)
{
  freeing f = { .p = (uintptr_t)dp };
  CUresult r;
  if (!f.p)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_free_async: the pointer is 0");
  if (h && !looked && free_own_kept(m, h, f.p, stream, freed, &r))
    return r;
  if (h && free_remote(m, h, f.p, stream, freed, &r))
    return r;
  /* Another thread's block, one the pool holds, or one this thread's heap
   * should not keep: under the manager's lock, which the pool needs. */
  cuemm__lock_acquire(&m->lock);
  if (!h && (r = cuemm__thread_heap_attach_locked(m, &h)) != CUDA_SUCCESS) {
    cuemm__lock_release(&m->lock);
    return r;
  }
  f.e = cuemm__extensions_owned_lookup(m, f.p, 0); /* a span's block too, reached by another thread */
  if (!f.e || (f.e->kind != CUEMM__KIND_STREAM && f.e->kind != CUEMM__KIND_POOL)) {
    cuemm__lock_release(&m->lock);
    return free_not_pooled(m, f.p, freed);
  }
  if ((r = free_take_out(m, &f, stream)) != CUDA_SUCCESS) {
    cuemm__lock_release(&m->lock);
    return r;
  }
  if (f.o && f.o != h)
    h->remote = f.o;
  if (free_admitted(m, h, &f, stream))
    free_into_heap(m, h, &f, stream);
  else
    free_to_pool(m, &f, stream);
  cuemm__lock_release(&m->lock);
  if (freed)
    *freed = f.req;
  return CUDA_SUCCESS;
}
