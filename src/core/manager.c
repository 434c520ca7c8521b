/* manager.c: owns the per-context manager's allocation path with its
 * out-of-memory retry, the deferred free path and the flush that releases
 * queued frees, defer scopes, the pool's trim and peer access, and reset;
 * its creation and destruction are lifecycle.c's, what it reports
 * stats.c's.
 *
 * The policy is Numba's: allocate at once; queue every free; when, after an
 * append, more than max_pending_count frees or more than
 * floor(ratio x total memory) bytes are queued, release the whole queue in
 * order -- unless a defer scope is open.  Releasing in batches matters
 * because cuMemFree waits for all queued GPU work: one free per kernel
 * launch would serialize the pipeline.
 *
 * With a pool (pool.c), device requests up to the pool's capacity are
 * sub-allocated from it under the same lock, without a driver call unless it
 * must grow; a pool block's descriptor rides along in the owned table and
 * then in the pending queue, so neither the free nor the flush looks it up.
 * A freed pool block leaves the owned table at once (the queue holds it), and
 * a flush that holds pool blocks synchronizes the context once before
 * returning them, which is what cuMemFree would have waited for.
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/internal.h"
#include "core/managed.h"
#include "core/manager.h"
#include "trace/internal.h"
#include "pool/internal.h"

CUEMM_EXTERN const char *cuemm_version_string(void)
{
  return PACKAGE_VERSION;
}

/* ---- per-kind driver calls ----------------------------------------------- */

static const char *kind_name(cuemm__kind kind)
{
  switch (kind) {
  case CUEMM__KIND_DEVICE: return "device memory (cuemm_alloc)";
  case CUEMM__KIND_HOST: return "pinned host memory (cuemm_host_alloc)";
  case CUEMM__KIND_PINNED: return "a pinned host range (cuemm_host_pin)";
  case CUEMM__KIND_POOL: return "device memory (cuemm_alloc, from the pool)";
  case CUEMM__KIND_STREAM: return "device memory (cuemm_alloc_async)";
  case CUEMM__KIND_MANAGED: return "managed memory (cuemm_alloc)";
  case CUEMM__KIND_SYSTEM: return "system memory (cuemm_alloc)";
  }
  return "unknown memory";
}

static CUresult kind_alloc(cuemm_manager *m, cuemm__kind kind, size_t size, unsigned int flags, uintptr_t *out)
{
  if (kind == CUEMM__KIND_DEVICE) {
    CUdeviceptr p = 0;
    CUresult r = m->drv->MemAlloc(&p, size);
    *out = (uintptr_t)p;
    if (r == CUDA_SUCCESS) {
      atomic_fetch_add_explicit(&m->driver_bytes, size, memory_order_relaxed);
      cuemm__account_note_held(m);
    }
    return r;
  }
  void *h = NULL;
  CUresult r = m->drv->MemHostAlloc(&h, size, flags);
  *out = (uintptr_t)h;
  return r;
}

CUresult cuemm__manager_kind_release(cuemm_manager *m, cuemm__kind kind, uintptr_t p, size_t size)
{
  CUresult r;
  switch (kind) {
  case CUEMM__KIND_DEVICE:
    r = m->drv->MemFree((CUdeviceptr)p);
    if (r == CUDA_SUCCESS)
      atomic_fetch_sub_explicit(&m->driver_bytes, size, memory_order_relaxed);
    return r == CUDA_SUCCESS ? r : cuemm__driver_error(r, "cuMemFree(0x%" PRIxPTR ", %zu bytes)", p, size);
  case CUEMM__KIND_HOST:
    r = m->drv->MemFreeHost((void *)p);
    return r == CUDA_SUCCESS ? r : cuemm__driver_error(r, "cuMemFreeHost(%p, %zu bytes)", (void *)p, size);
  case CUEMM__KIND_PINNED:
    r = m->drv->MemHostUnregister((void *)p);
    return r == CUDA_SUCCESS ? r : cuemm__driver_error(r, "cuMemHostUnregister(%p, %zu bytes)", (void *)p, size);
  case CUEMM__KIND_POOL:
  case CUEMM__KIND_STREAM:
    break; /* returned by the flush, or with the whole pool */
  case CUEMM__KIND_MANAGED:
  case CUEMM__KIND_SYSTEM:
    return cuemm__managed_release(m, kind, p, size); /* managed.c */
  }
  return cuemm__error(CUDA_ERROR_INVALID_VALUE, "internal: unknown allocation kind %d", (int)kind);
}

/* Whether releasing an entry of this kind is a driver free. */
static int kind_is_driver(cuemm__kind kind)
{
  return kind != CUEMM__KIND_MANAGED && kind != CUEMM__KIND_SYSTEM;
}

static void account_released(cuemm_manager *m, const cuemm__owned_entry *e)
{
  if (e->kind == CUEMM__KIND_PINNED) {
    m->st.pinned_bytes -= e->size;
    m->st.pinned_count--;
  }
}

/* ---- flush ---------------------------------------------------------------- */

/* Releases queued frees oldest first.  With `force`, open defer scopes are
 * ignored (destroy).  Stops at the first driver failure, leaving that entry
 * and the rest queued.  Lock held. */
static CUresult flush_locked(cuemm_manager *m, int force)
{
  if (!force && !cuemm__pending_may_flush(&m->pending))
    return CUDA_SUCCESS;
  if (!cuemm__pending_front(&m->pending))
    return CUDA_SUCCESS;
  cuemm__ctx_guard g = { 0 };
  CUresult r = force ? CUDA_SUCCESS : cuemm__ctx_enter(m, &g); /* destroy has entered it */
  if (r != CUDA_SUCCESS)
    return r;
  /* One synchronization makes every queued pool block idle: work queued
   * before the frees is done.  (cuMemFree waits by itself.)  When forced
   * (destruction), a failure is reported but the blocks go back anyway:
   * the pool is about to go. */
  CUresult sync_r = CUDA_SUCCESS;
  size_t returned = 0;
  if (cuemm__managed_flush_begin(m->managed) | (m->pool_pending != 0)) {
    if (m->pool_pending)
      cuemm__pool_note_low(m->pool);
    sync_r = m->drv->CtxSynchronize();
    if (sync_r != CUDA_SUCCESS) {
      cuemm__driver_error(sync_r, "cuCtxSynchronize before returning %zu freed pool blocks and %zu managed or "
                          "system blocks", m->pool_pending, m->managed ? m->managed->pending : 0);
      if (!force) {
        cuemm__ctx_leave(m, &g, sync_r);
        m->st.free_failures++;
        cuemm__error_append("; %zu frees stay queued for the next flush", m->pending.count);
        return sync_r;
      }
    } else if (m->pool_pending && cuemm__pool_tagged_bytes(m->pool))
      cuemm__extensions_settle(m, 1); /* blocks freed on streams are idle too now */
  }
  size_t released = 0;
  const cuemm__pending_entry *e;
  while ((e = cuemm__pending_front(&m->pending)) != NULL) {
    if (e->kind == CUEMM__KIND_POOL) {
      cuemm__nvtx_dead(cuemm__pool_nvtx(m->pool), e->ptr);
      cuemm__pool_give(m->pool, e->aux);
      cuemm__pending_pop(&m->pending);
      m->pool_pending--;
      returned++;
      continue;
    }
    int driver_free = kind_is_driver(e->kind);
    r = cuemm__manager_kind_release(m, e->kind, e->ptr, e->size);
    if (r != CUDA_SUCCESS) {
      m->st.free_failures++;
      break;
    }
    cuemm__owned_drop(&m->owned, e->ptr);
    cuemm__pending_pop(&m->pending);
    m->st.driver_frees += driver_free;
    released++;
  }
  if (r != CUDA_SUCCESS)
    cuemm__error_append("; %zu frees stay queued for the next flush", m->pending.count);
  else if (returned && cuemm__pool_release_due(m->pool))
    r = cuemm__pool_release(m->pool, cuemm__pool_keep(m->pool));
  else if (m->managed && released)
    r = cuemm__managed_flush_end(m->managed);
  r = cuemm__ctx_leave(m, &g, r);
  if (released || returned) {
    m->st.flushes++;
    cuemm__log_note(m->log, "flush", released + returned);
  }
  return r != CUDA_SUCCESS ? r : sync_r;
}

CUresult cuemm__manager_flush_locked(cuemm_manager *m)
{
  return flush_locked(m, 0);
}

CUresult cuemm__manager_flush_all_locked(cuemm_manager *m)
{
  return flush_locked(m, 1);
}

CUEMM_EXTERN CUresult cuemm_flush(cuemm_manager *m)
{
  CUEMM__CHECK_MANAGER(m, "cuemm_flush");
  cuemm__lock_acquire(&m->lock);
  CUresult r = flush_locked(m, 0);
  cuemm__lock_release(&m->lock);
  cuemm__log_settle(m->log);
  return r;
}

/* ---- allocation ----------------------------------------------------------- */

/* The stream-ordered path's live bytes count in the peak, sampled: its
 * threads keep their counts apart.  Lock held. */
static void note_stream_peak(cuemm_manager *m)
{
  cuemm_stats s; /* the stream path's figures alone, read under its heaps' locks */
  memset(&s, 0, sizeof s);
  cuemm__extensions_stats(m, &s);
  if (m->st.live_bytes + s.live_bytes > m->st.peak_bytes)
    m->st.peak_bytes = m->st.live_bytes + s.live_bytes;
  if (m->st.live_count + s.live_count > m->st.peak_count)
    m->st.peak_count = m->st.live_count + s.live_count;
}

/* Restores the caller's context after a block was taken; if that fails the
 * block goes back, so the failed call changes nothing. */
static CUresult leave_after_take(cuemm_manager *m, cuemm__ctx_guard *g, const uint32_t *blk)
{
  CUresult r = cuemm__ctx_leave(m, g, CUDA_SUCCESS);
  if (r != CUDA_SUCCESS)
    cuemm__pool_give(m->pool, *blk);
  return r;
}

/* Takes cached blocks back from the stream path's caches (`how`) until a
 * free block of `want` bytes exists, then the request's block.  Returns 1
 * when it got one.  m's lock held, context current. */
static int pool_reclaim_take(cuemm_manager *m, int how, size_t want, size_t size, uint32_t tag, uintptr_t *p,
                             uint32_t *blk)
{
  size_t reclaimed = cuemm__extensions_reclaim(m, how, want);
  if (!reclaimed)
    return 0;
  cuemm__log_note(m->log, "reclaim", reclaimed);
  return cuemm__pool_take_tagged(m->pool, size, tag, p, blk) == 0;
}

/* Blocks the pool can have back without growing: those freed on streams
 * whose work is done, the calling thread's idle ones, and before a growth
 * past the most the manager has held, the thread's blocks of busy streams
 * (as freed on them, with events to learn when they are done).  Other
 * threads' caches stay: taking them costs a handshake with each thread
 * (docs/design.md, "Reclaim before growth").  1 when the request's block
 * was taken.  Lock held, context entered. */
static int pool_take_back(cuemm_manager *m, size_t size, size_t want, uint32_t tag, uintptr_t *p, uint32_t *blk)
{
  if (cuemm__pool_tagged_bytes(m->pool)) {
    cuemm__extensions_settle(m, 0);
    if (cuemm__pool_take_tagged(m->pool, size, tag, p, blk) == 0)
      return 1;
  }
  if (!cuemm__reclaims_churn(m) && pool_reclaim_take(m, CUEMM__RECLAIM_OWN, want, size, tag, p, blk))
    return 1;
  /* The reclaim just made may be the one that makes the caches churn. */
  if (cuemm__reclaims_churn(m) || cuemm__account_held_bytes(m) + want <= m->st.peak_held_bytes)
    return 0;
  size_t given = cuemm__extensions_reclaim(m, CUEMM__RECLAIM_QUEUED, 0);
  if (!given)
    return 0;
  cuemm__log_note(m->log, "reclaim", given);
  cuemm__extensions_settle(m, 0);
  return cuemm__pool_take_tagged(m->pool, size, tag, p, blk) == 0;
}

/* Out of device memory at a growth: every thread's idle blocks, then all
 * the caches, the pending frees and the streams' queued work give back,
 * and the pool grows once more.  1 when the request's block was taken;
 * else *r is the second growth's result, with the whole story in the
 * message when it failed.  Lock held, context entered. */
static int pool_oom_retry(cuemm_manager *m, size_t size, size_t want, uint32_t tag, uintptr_t *p, uint32_t *blk,
                          CUresult *r)
{
  if (pool_reclaim_take(m, CUEMM__RECLAIM_IDLE, want, size, tag, p, blk))
    return 1;
  cuemm__oom_retry o;
  cuemm__account_oom_retry(m, &o, CUEMM__OOM_KEEP_WHY | CUEMM__OOM_DEVICE);
  cuemm__extensions_reclaim(m, CUEMM__RECLAIM_ALL, 0);
  (void)flush_locked(m, 0); /* a failed flush leaves its frees queued; the retry decides */
  /* Blocks freed on streams whose work is still queued: once it is done,
   * which a synchronization makes sure of, they serve any request. */
  if (cuemm__pool_tagged_bytes(m->pool) && m->drv->CtxSynchronize() == CUDA_SUCCESS)
    cuemm__extensions_settle(m, 1);
  if (cuemm__pool_take_tagged(m->pool, size, tag, p, blk) == 0) {
    cuemm__account_oom_served(&o);
    return 1;
  }
  cuemm__pool_release(m->pool, 0);
  *r = cuemm__pool_grow(m->pool, size, tag);
  if (*r != CUDA_ERROR_OUT_OF_MEMORY) {
    cuemm__account_oom_served(&o);
    return 0;
  }
  char state[160];
  cuemm__pool_describe(m->pool, state, sizeof state);
  cuemm__error(*r, "cuemm_allocate: out of pool memory for %zu bytes (%s)", size, state);
  cuemm__account_oom_failed(m, &o, *r, size, "trimming ");
  return 0;
}

/* The pool grew: past the peak, the caches may keep less
 * (CUEMM__CACHE_HALVINGS), and after a growth for want of free space in
 * one piece the threads stop keeping large blocks for a while
 * (CUEMM__KEEP_QUIET); the footprint's figures follow.  Lock held. */
static void pool_grown(cuemm_manager *m, size_t want, int fragmented)
{
  if (cuemm__account_held_bytes(m) > m->st.peak_held_bytes) {
    if (fragmented) {
      m->keep_quiet = CUEMM__KEEP_QUIET;
      atomic_store_explicit(&m->keep_large, 0, memory_order_relaxed);
    }
    cuemm__extensions_grown(m, want);
  }
  cuemm__account_note_held(m);
  if (m->nheaps) /* the footprint's other half, at the moment it matters */
    note_stream_peak(m);
}

/* The pool had no free block for `size`: what it can have back, else
 * growth, out of memory the retry.  Without `grow`, it stops before
 * growing with CUEMM__NEXT (the caller has another way first).  Lock
 * held. */
static __attribute__((noinline)) cuemm__result pool_alloc_slow(cuemm_manager *m, size_t size, uint32_t tag,
                                                               uintptr_t *p, uint32_t *blk, int grow)
{
  cuemm__ctx_guard g;
  CUresult r = cuemm__ctx_enter(m, &g);
  if (r != CUDA_SUCCESS)
    return r;
  size_t want = cuemm__round_up(size, CUEMM__SA_ALIGN);
  if (pool_take_back(m, size, want, tag, p, blk))
    return leave_after_take(m, &g, blk);
  if (!grow) {
    if ((r = cuemm__ctx_leave(m, &g, CUDA_SUCCESS)) != CUDA_SUCCESS)
      return r;
    return CUEMM__NEXT;
  }
  /* Enough is free, only not in one piece: what is wholly free goes back
   * first, so that the growth replaces it rather than adds to it.  Free
   * space of busy streams counts: with the GPU behind, that is most of what
   * fails to serve a request (CUEMM__KEEP_QUIET). */
  int fragmented = cuemm__pool_free_bytes(m->pool) >= size;
  if (fragmented)
    cuemm__pool_release(m->pool, 0);
  /* A pool whose caches gave back again and again since its last growth
   * fills between growths: it grows by a larger step (cuemm__pool_press). */
  cuemm__pool_press(m->pool, cuemm__reclaims_churn(m));
  r = cuemm__pool_grow(m->pool, size, tag);
  m->reclaims_at_growth = m->stream_reclaims;
  if (r == CUDA_ERROR_OUT_OF_MEMORY && pool_oom_retry(m, size, want, tag, p, blk, &r))
    return leave_after_take(m, &g, blk);
  if (r == CUDA_SUCCESS)
    pool_grown(m, want, fragmented);
  if (r == CUDA_SUCCESS && cuemm__pool_take_tagged(m->pool, size, tag, p, blk) != 0)
    r = cuemm__error(CUDA_ERROR_UNKNOWN, "internal: the pool grew but has no block of %zu bytes", size);
  else if (r != CUDA_SUCCESS && r != CUDA_ERROR_OUT_OF_MEMORY)
    cuemm__error_append("; cuemm_allocate(%zu bytes) failed and the pool is as it was", size);
  if (r == CUDA_SUCCESS)
    return leave_after_take(m, &g, blk);
  return cuemm__ctx_leave(m, &g, r);
}

cuemm__result cuemm__manager_pool_take_locked(cuemm_manager *m, size_t size, uint32_t tag, uintptr_t *p, uint32_t *blk,
                                            int grow)
{
  if (cuemm__pool_is_suspended(m->pool))
    return cuemm__pool_refuse_suspended(m->pool, "cuemm_allocate_async");
  if (cuemm__pool_take_tagged(m->pool, size, tag, p, blk) == 0)
    return CUDA_SUCCESS;
  return pool_alloc_slow(m, size, tag, p, blk, grow);
}

static inline CUresult pool_alloc(cuemm_manager *m, cuemm__pool *pool, size_t size, uintptr_t *out)
{
  uintptr_t p;
  uint32_t blk;
  CUresult r;
  cuemm__lock_acquire(&m->lock);
  if (__builtin_expect(cuemm__pool_is_suspended(pool), 0)) {
    r = cuemm__pool_refuse_suspended(pool, "cuemm_allocate");
    goto failed;
  }
  if (cuemm__pool_take(pool, size, &p, &blk) != 0 && (r = pool_alloc_slow(m, size, 0, &p, &blk, 1)) != CUDA_SUCCESS)
    goto failed;
  if (cuemm__owned_add(&m->owned, p, size, CUEMM__KIND_POOL, blk) != 0) {
    cuemm__pool_give(pool, blk);
    r = cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "cuemm_allocate: no host memory left to record the allocation");
    goto failed;
  }
  cuemm__account_alloc(m, size);
  cuemm__nvtx_live(cuemm__pool_nvtx(pool), p, size);
  cuemm__lock_release(&m->lock);
  *out = p;
  return CUDA_SUCCESS;
failed:
  m->st.alloc_failures++;
  cuemm__lock_release(&m->lock);
  return r;
}

CUresult cuemm__manager_alloc(cuemm_manager *m, cuemm__kind kind, size_t size, unsigned int flags, uintptr_t *out)
{
  const char *fn = kind == CUEMM__KIND_DEVICE ? "cuemm_allocate" : "cuemm_host_allocate";
  const char *call = kind == CUEMM__KIND_DEVICE ? "cuMemAlloc" : "cuMemHostAlloc";
  if (size == 0) {
    cuemm__lock_acquire(&m->lock);
    m->st.alloc_failures++;
    cuemm__lock_release(&m->lock);
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "%s: size is 0 (%s refuses zero-byte allocations)", fn, call);
  }

  cuemm__lock_acquire(&m->lock);
  if (kind == CUEMM__KIND_DEVICE && m->pool) {
    m->fallback_allocs++;
    cuemm__log_note(m->log, "fallback", 0);
  }
  CUresult r;
  uintptr_t p = 0;
  if (kind == CUEMM__KIND_DEVICE && m->pool && cuemm__pool_is_suspended(m->pool)) {
    /* A block beyond the pool could be served, but a suspended manager
     * is giving its memory away: refused like the pool's. */
    r = cuemm__pool_refuse_suspended(m->pool, fn);
    goto failed;
  }
  if (kind == CUEMM__KIND_DEVICE && size > m->st.total_bytes) {
    r = cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "%s: %zu bytes requested, more than the device's %zu bytes of memory",
                     fn, size, m->st.total_bytes);
    cuemm__account_oom_where(m, size);
    goto failed;
  }
  cuemm__ctx_guard g;
  r = cuemm__ctx_enter(m, &g);
  if (r != CUDA_SUCCESS)
    goto failed;
  r = kind_alloc(m, kind, size, flags, &p);
  cuemm__oom_retry o = { .how = 0 };
  int retried = r == CUDA_ERROR_OUT_OF_MEMORY;
  if (retried) {
    /* Numba's rule: flush what is pending (a no-op inside a defer scope) and
     * try exactly once more. */
    cuemm__account_oom_retry(m, &o, kind == CUEMM__KIND_DEVICE ? CUEMM__OOM_DEVICE : 0);
    (void)flush_locked(m, 0); /* a failed flush leaves its frees queued; the retry decides */
    if (m->pool)
      cuemm__pool_release(m->pool, 0); /* the pool's free memory is the driver's again */
    r = kind_alloc(m, kind, size, flags, &p);
  }
  if (r == CUDA_SUCCESS && cuemm__owned_add(&m->owned, p, size, kind, 0) != 0) {
    cuemm__manager_kind_release(m, kind, p, size);
    r = cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "%s: no host memory left to record the allocation", fn);
    cuemm__ctx_leave(m, &g, r);
    goto failed;
  }
  if (r != CUDA_SUCCESS) {
    cuemm__ctx_leave(m, &g, r);
    cuemm__driver_error(r, "%s(%zu bytes)", call, size);
    if (retried && r == CUDA_ERROR_OUT_OF_MEMORY)
      cuemm__account_oom_failed(m, &o, r, size, "");
    goto failed;
  }
  /* The allocation is recorded; a failed restore is reported, and the
   * memory stays owned (the caller's p is set) so that nothing is lost. */
  r = cuemm__ctx_leave(m, &g, r);

  if (kind == CUEMM__KIND_DEVICE)
    cuemm__account_alloc(m, size);
  else {
    m->st.allocs++;
    m->st.host_live_bytes += size;
    m->st.host_live_count++;
  }
  cuemm__lock_release(&m->lock);
  *out = p;
  return r;

failed:
  m->st.alloc_failures++;
  cuemm__lock_release(&m->lock);
  return r;
}

/* ---- the hard limit (CUEMM_POOL_LIMIT_HARD) -------------------------------- */

/* A request larger than a hard limit: refused, never given to cuMemAlloc.
 * No flush and retry, as no freed memory could make the pool serve it. */
static __attribute__((noinline)) CUresult pool_refuse(cuemm_manager *m, cuemm__pool *pool, size_t size)
{
  cuemm__lock_acquire(&m->lock);
  m->st.alloc_failures++;
  CUresult r;
  if (cuemm__pool_is_suspended(pool)) {
    r = cuemm__pool_refuse_suspended(pool, "cuemm_allocate");
  } else {
    r = cuemm__pool_refuse(pool, size);
    cuemm__account_oom_where(m, size);
  }
  cuemm__lock_release(&m->lock);
  return r;
}

CUresult cuemm__manager_alloc_device(cuemm_manager *m, CUdeviceptr *p, size_t size)
{
  if (!p)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_allocate: p is NULL");
  if (m->managed) /* CUEMM_MEMORY=managed|system: managed.c */
    return cuemm__managed_alloc(m, p, size);
  uintptr_t out = 0;
  CUresult r;
  /* The pool's requests first, on a path of their own: 0 < size <= capacity
   * in one comparison. */
  cuemm__pool *pool = m->pool;
  if (pool && size - 1 < cuemm__pool_capacity(pool))
    r = pool_alloc(m, pool, size, &out);
  else if (pool && cuemm__pool_limit_is_hard(pool) && size) /* CUEMM_POOL_LIMIT_HARD */
    r = pool_refuse(m, pool, size);
  else
    r = cuemm__manager_alloc(m, CUEMM__KIND_DEVICE, size, 0, &out);
  if (out) /* also when only restoring the caller's context failed */
    *p = (CUdeviceptr)out;
  return r;
}

/* ---- free ----------------------------------------------------------------- */

/* Moves a live allocation into the pending queue.  Lock held. */
static inline CUresult queue_locked(cuemm_manager *m, cuemm__owned_entry *e)
{
  if (cuemm__pending_push(&m->pending, e->key, e->size, (cuemm__kind)e->kind, e->aux) != 0)
    return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "no host memory left to queue the free of 0x%" PRIxPTR, e->key);
  e->pending = 1;
  if (e->kind == CUEMM__KIND_POOL) {
    /* The queue holds the block from now on: its entry leaves the table. */
    m->pool_pending++;
    m->st.live_bytes -= e->size;
    m->st.live_count--;
    cuemm__owned_remove(&m->owned, e);
  } else if (e->kind != CUEMM__KIND_HOST) {
    m->st.live_bytes -= e->size;
    m->st.live_count--;
    if (e->kind != CUEMM__KIND_DEVICE)
      m->managed->pending++; /* managed or system: the flush synchronizes first */
  } else {
    m->st.host_live_bytes -= e->size;
    m->st.host_live_count--;
  }
  return CUDA_SUCCESS;
}

/* A free was queued: count it and flush when a threshold is crossed.  Lock
 * held. */
static inline CUresult after_queue(cuemm_manager *m)
{
  m->st.frees++;
  return cuemm__pending_over(&m->pending) ? flush_locked(m, 0) : CUDA_SUCCESS;
}

/* Every free but that of a live pool block: the checks that refuse a
 * foreign pointer, a double free or a mismatched kind, in the name of fn,
 * the public call.  Lock held. */
static __attribute__((noinline)) CUresult free_checked(cuemm_manager *m, const char *fn, cuemm__kind kind,
                                                       uintptr_t p, cuemm__owned_entry *e)
{
  if (e && e->kind == CUEMM__KIND_STREAM && kind == CUEMM__KIND_DEVICE) {
    CUresult r = cuemm__extensions_give_up(m, e);
    return r == CUDA_SUCCESS ? after_queue(m) : r;
  }
  if (!e && m->pool && cuemm__pending_find(&m->pending, p, 0))
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "%s: double free of 0x%" PRIxPTR ": it is already freed and "
                        "waiting in the pending queue", fn, p);
  if (!e)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE,
                        "%s: 0x%" PRIxPTR " is not the start of an allocation of this manager "
                        "(allocated elsewhere, an interior pointer, or freed and released already)", fn, p);
  if (e->kind != (uint8_t)kind && !(kind == CUEMM__KIND_DEVICE && (e->kind == CUEMM__KIND_POOL ||
                                                                    e->kind == CUEMM__KIND_MANAGED ||
                                                                    e->kind == CUEMM__KIND_SYSTEM)))
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "%s: 0x%" PRIxPTR " is %s, not %s", fn, p,
                        kind_name((cuemm__kind)e->kind), kind_name(kind));
  if (e->pending)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "%s: double free of 0x%" PRIxPTR " (%zu bytes): it is already "
                        "freed and waiting in the pending queue", fn, p, e->size);
  CUresult r = queue_locked(m, e);
  return r == CUDA_SUCCESS ? after_queue(m) : r;
}

CUresult cuemm__manager_free(cuemm_manager *m, const char *fn, cuemm__kind kind, uintptr_t p, size_t *freed)
{
  cuemm__lock_acquire(&m->lock);
  CUresult r;
  cuemm__owned_entry *e = cuemm__extensions_owned_lookup(m, p, 0);
  if (__builtin_expect(freed != NULL, 0) && e && !e->pending) /* the event log's row wants the size */
    *freed = e->kind == CUEMM__KIND_STREAM ? cuemm__extensions_live_size(m, e) : e->size;
  /* The common case, checked first: a pool entry is never pending, since
   * it leaves the table when queued. */
  if (__builtin_expect(e && e->kind == CUEMM__KIND_POOL && kind == CUEMM__KIND_DEVICE, 1)) {
    r = queue_locked(m, e);
    if (r == CUDA_SUCCESS)
      r = after_queue(m);
  } else
    r = free_checked(m, fn, kind, p, e);
  cuemm__lock_release(&m->lock);
  return r;
}

CUresult cuemm__manager_free_device(cuemm_manager *m, CUdeviceptr p, size_t *freed)
{
  return cuemm__manager_free(m, "cuemm_free", CUEMM__KIND_DEVICE, (uintptr_t)p, freed);
}

/* ---- the event log's rows ------------------------------------------------------ */

void cuemm__manager_log_alloc(cuemm_manager *m, CUresult r, CUdeviceptr p, size_t size, CUstream s, const char *call)
{
  int ok = r == CUDA_SUCCESS || p;
  cuemm__log_row(m->log, CUEMM__LOG_NOW, ok ? CUEMM__LOG_ALLOCATE : CUEMM__LOG_ALLOCATE_FAILURE, ok ? (uintptr_t)p : 0,
                 size, s, (unsigned)m->serial, call, cuemm__account_held_bytes(m));
}

void cuemm__manager_log_free(cuemm_manager *m, uint64_t seq, CUdeviceptr p, size_t size, CUstream s, const char *call)
{
  cuemm__log_row(m->log, seq, CUEMM__LOG_FREE, (uintptr_t)p, size, s, (unsigned)m->serial, call,
                 cuemm__account_held_bytes(m));
}

static __attribute__((noinline)) CUresult alloc_logged(cuemm_manager *m, CUdeviceptr *p, size_t size)
{
  if (!p)
    return cuemm__manager_alloc_device(m, p, size);
  *p = 0;
  CUresult r = cuemm__manager_alloc_device(m, p, size);
  cuemm__manager_log_alloc(m, r, *p, size, NULL, "alloc");
  return r;
}

static __attribute__((noinline)) CUresult free_logged(cuemm_manager *m, CUdeviceptr p)
{
  size_t size = 0;
  uint64_t seq = cuemm__log_take(m->log);
  CUresult r = cuemm__manager_free_device(m, p, &size);
  if (r == CUDA_SUCCESS)
    cuemm__manager_log_free(m, seq, p, size, NULL, "free");
  else {
    cuemm__log_untake(m->log);
    cuemm__log_settle(m->log);
  }
  return r;
}

CUEMM_EXTERN CUresult cuemm_allocate(cuemm_manager *m, size_t size, CUdeviceptr *p)
{
  CUEMM__CHECK_MANAGER(m, "cuemm_allocate");
  if (__builtin_expect(m->log != NULL, 0))
    return alloc_logged(m, p, size);
  return cuemm__manager_alloc_device(m, p, size);
}

CUEMM_EXTERN CUresult cuemm_free(cuemm_manager *m, CUdeviceptr p)
{
  CUEMM__CHECK_MANAGER(m, "cuemm_free");
  if (__builtin_expect(m->log != NULL, 0))
    return free_logged(m, p);
  return cuemm__manager_free_device(m, p, NULL);
}

/* ---- the event log ---------------------------------------------------------- */

CUEMM_EXTERN CUresult cuemm_log_flush(cuemm_manager *m)
{
  CUEMM__CHECK_MANAGER(m, "cuemm_log_flush");
  cuemm__log_flush(m->log);
  return CUDA_SUCCESS;
}

/* ---- defer scopes --------------------------------------------------------- */

CUEMM_EXTERN CUresult cuemm_defer_cleanup_begin(cuemm_manager *m)
{
  CUEMM__CHECK_MANAGER(m, "cuemm_defer_cleanup_begin");
  CUresult r = CUDA_SUCCESS;
  cuemm__lock_acquire(&m->lock);
  if (m->pending.defer_depth == UINT32_MAX)
    r = cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_defer_cleanup_begin: %u scopes are open already",
                     m->pending.defer_depth);
  else
    m->pending.defer_depth++;
  cuemm__lock_release(&m->lock);
  return r;
}

CUEMM_EXTERN CUresult cuemm_defer_cleanup_end(cuemm_manager *m)
{
  CUEMM__CHECK_MANAGER(m, "cuemm_defer_cleanup_end");
  CUresult r = CUDA_SUCCESS;
  cuemm__lock_acquire(&m->lock);
  if (m->pending.defer_depth == 0)
    r = cuemm__error(CUDA_ERROR_INVALID_VALUE,
                     "cuemm_defer_cleanup_end: no defer scope is open (an end without its begin)");
  else
    m->pending.defer_depth--;
  cuemm__lock_release(&m->lock);
  return r;
}

/* ---- the pool ---------------------------------------------------------------- */

#define CHECK_POOL(m, fn)                                                      \
  do {                                                                         \
    CUEMM__CHECK_MANAGER(m, fn);                                               \
    if (!(m)->pool)                                                            \
      return cuemm__error(CUDA_ERROR_INVALID_VALUE, fn ": this manager has no pool (create it with " \
                          "CUEMM_POOL=vmm or cuemm_config.pool = CUEMM_POOL_VMM)");             \
  } while (0)

CUEMM_EXTERN CUresult cuemm_pool_trim(cuemm_manager *m)
{
  CHECK_POOL(m, "cuemm_pool_trim");
  cuemm__lock_acquire(&m->lock);
  if (cuemm__pool_is_suspended(m->pool)) {
    CUresult r = cuemm__pool_refuse_suspended(m->pool, "cuemm_pool_trim");
    cuemm__lock_release(&m->lock);
    return r;
  }
  cuemm__extensions_reclaim(m, CUEMM__RECLAIM_ALL, 0);
  CUresult r = flush_locked(m, 0);
  if (r == CUDA_SUCCESS) {
    cuemm__ctx_guard g;
    if ((r = cuemm__ctx_enter(m, &g)) == CUDA_SUCCESS) {
      /* Blocks freed on streams whose work may still be queued: after a
       * synchronization they are idle, and free to go too. */
      if (cuemm__pool_tagged_bytes(m->pool)) {
        r = m->drv->CtxSynchronize();
        if (r == CUDA_SUCCESS)
          cuemm__extensions_settle(m, 1);
        else
          cuemm__driver_error(r, "cuCtxSynchronize before trimming blocks freed on streams");
      }
      if (r == CUDA_SUCCESS)
        r = cuemm__pool_release(m->pool, 0);
      r = cuemm__ctx_leave(m, &g, r);
    }
  }
  cuemm__lock_release(&m->lock);
  cuemm__log_settle(m->log);
  return r;
}

CUEMM_EXTERN CUresult cuemm_pool_grant_access(cuemm_manager *m, CUdevice peer)
{
  CHECK_POOL(m, "cuemm_pool_grant_access");
  int count = 0;
  CUresult r = m->drv->DeviceGetCount(&count);
  if (r != CUDA_SUCCESS)
    return cuemm__driver_error(r, "cuDeviceGetCount");
  if (peer < 0 || peer >= count)
    return cuemm__error(CUDA_ERROR_INVALID_DEVICE, "cuemm_pool_grant_access: device %d does not exist (%d devices)",
                        (int)peer, count);
  if (peer == m->dev)
    return CUDA_SUCCESS;
  if (m->drv->DeviceCanAccessPeer) {
    int can = 0;
    r = m->drv->DeviceCanAccessPeer(&can, peer, m->dev);
    if (r != CUDA_SUCCESS)
      return cuemm__driver_error(r, "cuDeviceCanAccessPeer(device %d, device %d)", (int)peer, (int)m->dev);
    if (!can)
      return cuemm__error(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, "cuemm_pool_grant_access: device %d cannot access "
                          "the memory of device %d (cuDeviceCanAccessPeer says no)", (int)peer, (int)m->dev);
  }
  cuemm__lock_acquire(&m->lock);
  if (cuemm__pool_is_suspended(m->pool)) {
    r = cuemm__pool_refuse_suspended(m->pool, "cuemm_pool_grant_access");
    cuemm__lock_release(&m->lock);
    return r;
  }
  cuemm__ctx_guard g;
  if ((r = cuemm__ctx_enter(m, &g)) == CUDA_SUCCESS) {
    r = cuemm__share_grant(m->pool, peer);
    r = cuemm__ctx_leave(m, &g, r);
  }
  cuemm__lock_release(&m->lock);
  return r;
}

/* ---- reset ------------------------------------------------------------------ */

typedef struct reset_walk {
  cuemm_manager *m;
  CUresult r;
} reset_walk;

/* Queues every live allocation; unpins pinned ranges at once. */
static void reset_one(cuemm__owned_entry *e, void *arg)
{
  reset_walk *w = arg;
  if (w->r != CUDA_SUCCESS || e->pending)
    return;
  if (e->kind == CUEMM__KIND_PINNED) {
    CUresult r = cuemm__manager_kind_release(w->m, CUEMM__KIND_PINNED, e->key, e->size);
    if (r != CUDA_SUCCESS) {
      w->r = r;
      return;
    }
    account_released(w->m, e);
    cuemm__owned_remove(&w->m->owned, e);
    return;
  }
  w->r = queue_locked(w->m, e);
}

CUEMM_EXTERN CUresult cuemm_reset(cuemm_manager *m)
{
  CUEMM__CHECK_MANAGER(m, "cuemm_reset");
  cuemm__lock_acquire(&m->lock);
  cuemm__ctx_guard g;
  CUresult r = cuemm__ctx_enter(m, &g);
  if (r == CUDA_SUCCESS) {
    reset_walk w = { m, CUDA_SUCCESS };
    cuemm__extensions_reset(m);
    cuemm__owned_each(&m->owned, reset_one, &w);
    r = cuemm__ctx_leave(m, &g, w.r);
  }
  if (r == CUDA_SUCCESS)
    r = flush_locked(m, 0);
  cuemm__lock_release(&m->lock);
  cuemm__log_settle(m->log);
  return r;
}
