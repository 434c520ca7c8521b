/* suspend.c: owns the suspension of a pool manager (cuemm_pool_suspend,
 * cuemm_pool_resume): the order of a suspension's steps, which calls it
 * refuses, the host copy of the live blocks' contents (the pinned staging
 * buffer, kept from one suspension to the next, and the runs copied into
 * it), and what is undone when a step fails.  The chunks themselves (their
 * unmapping, release and remapping, and the walk of the live blocks) are
 * vacate.c's, reached through its functions; the thread caches are
 * held off their fast paths by exchange.c (cuemm__exchange_hold).
 *
 * Why it is safe against threads working on the manager meanwhile: both
 * calls hold the manager's lock throughout, so no slow path runs; the
 * pool's `suspended` flag is raised before any block is taken back, and
 * every slow path that hands out a block reads it under a lock the
 * suspension took after raising it (the manager's, or the thread heap's);
 * and each thread heap is flagged (CUEMM__HEAP_WANT_HOLD) with the same
 * handshake the pool uses to take blocks back from it, so its owner's
 * inline paths are left before anything is released, and are not entered
 * again until the resumption lowers the flag.  A block is handed out either
 * before the suspension (it is then live, and kept) or not at all.
 *
 * Contents (CUEMM_SUSPEND_KEEP) are copied by runs of adjacent live blocks,
 * one cuMemcpyDtoH each, into one pinned buffer: a merged run copies at a
 * plain pinned copy's bandwidth, and the buffer stays allocated for later
 * suspensions (cuMemHostAlloc of many GiB costs far more than the copy),
 * until cuemm_destroy.  At resumption only the parts of each run still
 * live are copied back: a block freed while suspended has no contents.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/internal.h"
#include "stream/internal.h"
#include "pool/internal.h"
#include "suspend/suspend.h"

typedef struct kept_run {
  size_t off, size;  /* in the pool, from its base */
  size_t at;         /* in the staging buffer */
} kept_run;

struct cuemm__suspend {
  void *stage;       /* pinned host memory (cuMemHostAlloc), kept between suspensions */
  size_t stage_bytes;
  kept_run *runs;    /* the current suspension's host copy; none without CUEMM_SUSPEND_KEEP */
  size_t nruns, capruns;
  size_t kept;       /* bytes in runs */
  int oom;           /* host memory ran out while collecting runs */
};

static struct cuemm__suspend *state_of(cuemm_manager *m)
{
  if (!m->suspend)
    m->suspend = calloc(1, sizeof *m->suspend);
  return m->suspend;
}

static void add_run(void *arg, size_t off, size_t size)
{
  struct cuemm__suspend *s = arg;
  if (s->oom)
    return;
  if (s->nruns == s->capruns) {
    size_t c = s->capruns ? s->capruns * 2 : 16;
    kept_run *g = realloc(s->runs, c * sizeof *g);
    if (!g) {
      s->oom = 1;
      return;
    }
    s->runs = g;
    s->capruns = c;
  }
  s->runs[s->nruns++] = (kept_run){ off, size, s->kept };
  s->kept += size;
}

/* A run of live pool blocks: inside a thread's span (span.h) only the
 * blocks cut from it hold contents. */
static void add_live(void *arg, size_t off, size_t size)
{
  void **a = arg;
  const cuemm_manager *m = a[0];
  cuemm__span_live_runs(m, m->pool->base, off, size, add_run, a[1]);
}

static void drop_runs(struct cuemm__suspend *s)
{
  free(s->runs);
  s->runs = NULL;
  s->nruns = s->capruns = 0;
  s->kept = 0;
  s->oom = 0;
}

/* The refusal of pool blocks sent to other processes, naming them. */
static CUresult refuse_sent(cuemm__pool *pool)
{
  cuemm__pool_sent sent[4];
  size_t n = cuemm__vacate_sent_live(pool, sent, 4);
  if (!n)
    return CUDA_SUCCESS;
  char list[400] = "";
  size_t used = 0;
  for (size_t i = 0; i < n && i < 4 && used < sizeof list; i++) {
    int k = snprintf(list + used, sizeof list - used, "%s0x%llx (%zu bytes)", i ? ", " : "",
                     (unsigned long long)sent[i].addr, sent[i].size);
    used = k < 0 ? used : used + (size_t)k;
  }
  return cuemm__error(CUDA_ERROR_ILLEGAL_STATE, "cuemm_pool_suspend: %zu live pool block%s sent to other processes "
                      "(cuemm_ipc_send) may be open there, and their memory would be released under them: %s%s; "
                      "free them, or pass CUEMM_SUSPEND_IGNORE_IPC", n, n == 1 ? " was" : "s were", list,
                      n > 4 ? ", ..." : "");
}

/* Copies the live runs to the staging buffer.  Lock held, context current. */
static CUresult keep_contents(cuemm_manager *m, struct cuemm__suspend *s)
{
  const cuemm__driver_table *d = m->drv;
  cuemm__pool *pool = m->pool;
  drop_runs(s);
  void *a[2] = { m, s };
  cuemm__vacate_each_live_run(pool, add_live, a);
  if (s->oom) {
    drop_runs(s);
    return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "cuemm_pool_suspend: no host memory for the list of live blocks");
  }
  if (!s->kept)
    return CUDA_SUCCESS;
  if (!d->MemcpyDtoH || !d->MemcpyHtoD) {
    drop_runs(s);
    return cuemm__error(CUDA_ERROR_NOT_SUPPORTED, "cuemm_pool_suspend: the CUDA driver %s lacks cuMemcpyDtoH or "
                        "cuMemcpyHtoD, which CUEMM_SUSPEND_KEEP needs", d->path);
  }
  if (s->stage_bytes < s->kept) {
    if (s->stage) {
      CUresult r = d->MemFreeHost(s->stage);
      if (r != CUDA_SUCCESS) {
        drop_runs(s);
        return cuemm__driver_error(r, "cuMemFreeHost(the staging buffer, %zu bytes) to make a larger one",
                                   s->stage_bytes);
      }
      s->stage = NULL;
      s->stage_bytes = 0;
    }
    void *h = NULL;
    CUresult r = d->MemHostAlloc(&h, s->kept, 0);
    if (r != CUDA_SUCCESS) {
      size_t kept = s->kept;
      drop_runs(s);
      return cuemm__driver_error(r, "cuMemHostAlloc(%zu bytes) for the contents of the live blocks "
                                 "(CUEMM_SUSPEND_KEEP)", kept);
    }
    s->stage = h;
    s->stage_bytes = s->kept;
  }
  for (size_t i = 0; i < s->nruns; i++) {
    kept_run *k = &s->runs[i];
    CUresult r = d->MemcpyDtoH((char *)s->stage + k->at, pool->base + (CUdeviceptr)k->off, k->size);
    if (r != CUDA_SUCCESS) {
      cuemm__driver_error(r, "cuMemcpyDtoH(%zu bytes from 0x%llx) keeping the contents of live blocks", k->size,
                          (unsigned long long)(pool->base + k->off));
      drop_runs(s);
      return r;
    }
  }
  return CUDA_SUCCESS;
}

CUEMM_EXTERN CUresult cuemm_pool_suspend(cuemm_manager *m, unsigned flags)
{
  if (!m)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_pool_suspend: manager is NULL");
  if (flags & ~(CUEMM_SUSPEND_KEEP | CUEMM_SUSPEND_IGNORE_IPC))
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_pool_suspend: unknown flags 0x%x (CUEMM_SUSPEND_KEEP, "
                        "CUEMM_SUSPEND_IGNORE_IPC)", flags & ~(CUEMM_SUSPEND_KEEP | CUEMM_SUSPEND_IGNORE_IPC));
  cuemm__pool *pool = m->pool;
  if (!pool)
    return cuemm__error(CUDA_ERROR_NOT_SUPPORTED, "cuemm_pool_suspend: this manager has no pool; only a pool on "
                        "virtual memory (CUEMM_POOL=vmm) can release its memory and keep its addresses");
  if (cuemm__pool_is_slab(pool))
    return cuemm__error(CUDA_ERROR_NOT_SUPPORTED, "cuemm_pool_suspend: this pool is a slab (CUEMM_POOL_SLAB=1), "
                        "one cuMemAlloc allocation, whose memory cannot be released while keeping its addresses");
  cuemm__lock_acquire(&m->lock);
  struct cuemm__suspend *s = state_of(m);
  CUresult r = CUDA_SUCCESS;
  cuemm__ctx_guard g;
  if (!s) {
    r = cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "cuemm_pool_suspend: no host memory");
    goto out;
  }
  if (cuemm__pool_is_suspended(pool)) {
    if (cuemm__pool_held(pool) == 0) {
      r = cuemm__error(CUDA_ERROR_ILLEGAL_STATE, "cuemm_pool_suspend: the manager is suspended already "
                       "(cuemm_pool_resume first)");
      goto out;
    }
    /* A suspension that could not release every chunk: those again. */
    if ((r = cuemm__ctx_enter(m, &g)) == CUDA_SUCCESS) {
      r = cuemm__vacate_unmap_all(pool);
      r = cuemm__ctx_leave(m, &g, r);
    }
    goto out;
  }
  if (!(flags & CUEMM_SUSPEND_IGNORE_IPC) && (r = refuse_sent(pool)) != CUDA_SUCCESS)
    goto out;
  if ((r = cuemm__ctx_enter(m, &g)) != CUDA_SUCCESS)
    goto out;
  /* Every stream of the context: the work of those the manager served
   * among them, which may still use any block. */
  r = m->drv->CtxSynchronize();
  if (r != CUDA_SUCCESS) {
    cuemm__driver_error(r, "cuCtxSynchronize suspending the pool; nothing was released");
    r = cuemm__ctx_leave(m, &g, r);
    goto out;
  }
  cuemm__pool_set_suspended(pool, 1);
  cuemm__exchange_hold(m, 1);
  /* Only the blocks the program holds stay: the threads' caches, the
   * pending frees (synchronized: none is in use), the blocks freed on
   * streams (idle now) and the pool's caches of sizes go back, and what is
   * then wholly free is released for good. */
  cuemm__extensions_reclaim(m, CUEMM__RECLAIM_ALL, 0);
  cuemm__manager_flush_all_locked(m); /* a cuMemFree that fails leaves its entry queued; pool blocks go back anyway */
  cuemm__extensions_settle(m, 1);
  cuemm__pool_release(pool, 0); /* a chunk it cannot release is released below */
  if (flags & CUEMM_SUSPEND_KEEP) {
    r = keep_contents(m, s);
    if (r != CUDA_SUCCESS) {
      cuemm__error_append("; nothing was released and the manager is not suspended");
      cuemm__exchange_hold(m, 0);
      cuemm__pool_set_suspended(pool, 0);
      r = cuemm__ctx_leave(m, &g, r);
      goto out;
    }
  } else
    drop_runs(s);
  cuemm__pool_set_kept(pool, s->kept);
  r = cuemm__vacate_unmap_all(pool);
  cuemm__pool_count(pool, 0); /* suspended from here on, wholly or not */
  cuemm__log_note(m->log, "suspend", s->kept);
  r = cuemm__ctx_leave(m, &g, r);
out:
  cuemm__lock_release(&m->lock);
  return r;
}

static void copy_back(void *arg, size_t off, size_t size)
{
  void **a = arg;
  cuemm_manager *m = a[0];
  const kept_run *k = a[1];
  CUresult *r = a[2];
  if (*r != CUDA_SUCCESS)
    return;
  struct cuemm__suspend *s = m->suspend;
  *r = m->drv->MemcpyHtoD(m->pool->base + (CUdeviceptr)off, (const char *)s->stage + k->at + (off - k->off), size);
  if (*r != CUDA_SUCCESS)
    cuemm__driver_error(*r, "cuMemcpyHtoD(%zu bytes to 0x%llx) restoring the contents of live blocks", size,
                        (unsigned long long)(m->pool->base + off));
}

CUEMM_EXTERN CUresult cuemm_pool_resume(cuemm_manager *m)
{
  if (!m)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_pool_resume: manager is NULL");
  cuemm__pool *pool = m->pool;
  if (!pool)
    return cuemm__error(CUDA_ERROR_ILLEGAL_STATE, "cuemm_pool_resume: the manager is not suspended (it has no "
                        "pool to suspend)");
  cuemm__lock_acquire(&m->lock);
  CUresult r;
  cuemm__ctx_guard g;
  struct cuemm__suspend *s = m->suspend;
  if (!cuemm__pool_is_suspended(pool)) {
    r = cuemm__error(CUDA_ERROR_ILLEGAL_STATE, "cuemm_pool_resume: the manager is not suspended");
    goto out;
  }
  if ((r = cuemm__ctx_enter(m, &g)) != CUDA_SUCCESS)
    goto out;
  cuemm__vacate_forget_free(pool); /* chunks whose blocks were all freed meanwhile are not mapped again */
  size_t need = cuemm__pool_suspended_need(pool);
  r = cuemm__vacate_remap_all(pool);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    cuemm__saved_error why;
    cuemm__error_save(&why);
    size_t free_b = 0, total = 0;
    CUresult q = m->drv->MemGetInfo(&free_b, &total);
    if (q == CUDA_SUCCESS)
      cuemm__error(r, "cuemm_pool_resume: out of device memory: %zu bytes needed, %zu free of %zu (cuMemGetInfo); "
                   "the manager stays suspended (%zu bytes of contents kept in host memory) and can be resumed "
                   "once memory is free", need, free_b, total, s ? s->kept : 0);
    else
      cuemm__error(r, "cuemm_pool_resume: out of device memory: %zu bytes needed (cuMemGetInfo failed too: %d); "
                   "the manager stays suspended and can be resumed once memory is free", need, (int)q);
    cuemm__error_append_saved("; ", &why);
  } else if (r != CUDA_SUCCESS)
    cuemm__error_append("; the manager stays suspended (cuemm_pool_resume)");
  for (size_t i = 0; r == CUDA_SUCCESS && s && i < s->nruns; i++) {
    void *a[3] = { m, &s->runs[i], &r };
    cuemm__vacate_each_live_in(pool, s->runs[i].off, s->runs[i].size, copy_back, a);
    if (r != CUDA_SUCCESS) {
      cuemm__saved_error why;
      cuemm__error_save(&why);
      if (cuemm__vacate_unmap_all(pool) != CUDA_SUCCESS) {
        cuemm__error_prefix(r, "%s; the manager stays suspended, its contents kept in host memory; undoing the "
                            "mapping", cuemm__error_saved_text(&why));
        cuemm__error_discard(&why);
      } else {
        cuemm__error_restore(&why, r);
        cuemm__error_append("; the manager stays suspended, its contents kept in host memory, its memory released "
                            "again");
      }
    }
  }
  if (r == CUDA_SUCCESS) {
    if (s)
      drop_runs(s);
    cuemm__pool_set_kept(pool, 0);
    cuemm__pool_count(pool, 1);
    cuemm__pool_set_suspended(pool, 0);
    cuemm__exchange_hold(m, 0);
    cuemm__account_note_held(m);
    cuemm__log_note(m->log, "resume", need);
  }
  r = cuemm__ctx_leave(m, &g, r);
out:
  cuemm__lock_release(&m->lock);
  return r;
}

/* ---- the extension ------------------------------------------------------------ */

static void suspend_destroy(cuemm_manager *m, char *note, size_t cap)
{
  struct cuemm__suspend *s = m->suspend;
  if (!s)
    return;
  if (s->stage && m->drv->MemFreeHost(s->stage) != CUDA_SUCCESS)
    snprintf(note, cap, "cuMemFreeHost of the suspension's staging buffer (%zu bytes) failed", s->stage_bytes);
  drop_runs(s);
  free(s);
  m->suspend = NULL;
}

static void suspend_abandon(cuemm_manager *m)
{
  /* No driver call: the pinned buffer goes with the process. */
  struct cuemm__suspend *s = m->suspend;
  if (!s)
    return;
  drop_runs(s);
  free(s);
  m->suspend = NULL;
}

const cuemm__extension cuemm__suspend_extension = {
  .destroy = suspend_destroy,
  .abandon = suspend_abandon,
};
