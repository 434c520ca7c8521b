/* lifecycle.c: owns the creation and destruction of a manager:
 * cuemm_create (the context and device it serves, then the event log,
 * managed memory, the pool and the extensions), cuemm_destroy (the pending
 * frees flushed whatever the defer scopes, the allocations the program
 * left freed, the pool unmapped, the first failure reported while the rest
 * still go) and cuemm_abandon, which forgets a manager whose context is
 * gone without a driver call.  What a manager does between the two is
 * manager.c's.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/internal.h"
#include "core/internal.h"
#include "suspend/internal.h"
#include "stream/internal.h"
#include "observe/internal.h"
#include "lifecycle/registry.h"
#include "ipc/internal.h"

/* The layers above the manager that keep state per manager, in the order
 * their hooks run.  The registry comes first: once a manager's teardown
 * has begun, cuemm_get must no longer hand it out.  The statistics table
 * (CUEMM_STATS) comes next, so that it shows the manager as the program
 * left it.  The stream-ordered path's caches come next: their blocks go
 * with the pool.  A suspension's host copy comes last. */
static const cuemm__extension *const extensions[] = {
  &cuemm__registry_extension,
  &cuemm__report_extension,
  &cuemm__ipc_extension,
  &cuemm__stream_extension,
  &cuemm__suspend_extension,
};

/* ---- creation ------------------------------------------------------------- */

static CUresult read_context(cuemm_manager *m, CUcontext ctx)
{
  const cuemm__driver_table *d = m->drv;
  CUresult r;
  if (!ctx) {
    r = d->CtxGetCurrent(&ctx);
    if (r != CUDA_SUCCESS)
      return cuemm__driver_error(r, "cuCtxGetCurrent");
    if (!ctx)
      return cuemm__error(CUDA_ERROR_INVALID_CONTEXT,
                          "cuemm_manager_create: no context given and none is current on this thread");
  }
  m->ctx = ctx;
  r = d->CtxGetId(ctx, &m->ctx_id);
  if (r != CUDA_SUCCESS)
    return cuemm__driver_error(r, "cuCtxGetId(%p)", (void *)ctx);
  cuemm__ctx_guard g;
  r = cuemm__ctx_enter(m, &g);
  if (r != CUDA_SUCCESS)
    return r;
  size_t free_bytes = 0;
  r = d->CtxGetDevice(&m->dev);
  if (r != CUDA_SUCCESS)
    cuemm__driver_error(r, "cuCtxGetDevice");
  else if ((r = d->MemGetInfo(&free_bytes, &m->st.total_bytes)) != CUDA_SUCCESS)
    cuemm__driver_error(r, "cuMemGetInfo");
  return cuemm__ctx_leave(m, &g, r);
}

/* The pool of a manager created with CUEMM_POOL=vmm, made in its context;
 * on a failure none is left.  Its growth and release are noted in `log`. */
static CUresult create_pool(cuemm_manager *m, cuemm__log *log)
{
  cuemm__ctx_guard g;
  CUresult r = cuemm__ctx_enter(m, &g);
  if (r == CUDA_SUCCESS) {
    r = cuemm__pool_create(&m->pool, m->drv, m->dev, &m->cfg, m->st.total_bytes);
    if (m->pool)
      cuemm__pool_set_log(m->pool, log);
    r = cuemm__ctx_leave(m, &g, r);
  }
  if (r != CUDA_SUCCESS && m->pool) { /* created, but the caller's context could not be restored */
    cuemm__pool_destroy(m->pool, 1);
    m->pool = NULL;
  }
  return r;
}

/* A creation refused after the pool was made: it goes, and m, with the
 * refusal's message (r) kept. */
static void unmake(cuemm_manager *m, CUresult r)
{
  if (m->pool) {
    cuemm__saved_error why;
    cuemm__error_save(&why);
    cuemm__ctx_guard g;
    int entered = cuemm__ctx_enter(m, &g) == CUDA_SUCCESS;
    cuemm__pool_destroy(m->pool, entered);
    if (entered)
      cuemm__ctx_leave(m, &g, CUDA_SUCCESS);
    cuemm__error_restore(&why, r);
  }
  cuemm__managed_destroy(m, 0); /* holds no segment yet */
  free(m);
}

CUEMM_EXTERN CUresult cuemm_manager_create(CUcontext ctx, const cuemm_config *cfg, cuemm_manager **out)
{
  if (!out)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_manager_create: m is NULL");
  *out = NULL;
  cuemm_config envcfg, whole;
  CUresult r;
  if (!cfg) {
    r = cuemm_config_init(&envcfg);
    if (r != CUDA_SUCCESS)
      return r;
    cfg = &envcfg;
  }
  if ((r = cuemm__config_copy(cfg, &whole)) != CUDA_SUCCESS)
    return r;
  cfg = &whole;
  if ((r = cuemm__config_validate(cfg)) != CUDA_SUCCESS)
    return r;
  const cuemm__driver_table *d = cuemm__driver(&r);
  if (!d)
    return r;

  cuemm__log *log = NULL;
  if (cfg->log_file && cfg->log_file[0] && (r = cuemm__log_open(cfg->log_file, &log)) != CUDA_SUCCESS)
    return r;

  cuemm_manager *m = calloc(1, sizeof *m);
  if (!m)
    return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "cuemm_manager_create: no host memory for the manager");
  m->log = log;
  static _Atomic uint64_t serials = 1;
  m->drv = d;
  m->cfg = *cfg;
  m->cfg.log_file = log ? cuemm__log_path(log) : NULL; /* the program's string may not outlive the call */
  m->serial = atomic_fetch_add(&serials, 1);
  if ((r = read_context(m, ctx)) != CUDA_SUCCESS) {
    free(m);
    return r;
  }
  m->st.max_pending_count = cfg->max_pending_count;
  m->st.max_pending_bytes = (size_t)(cfg->max_pending_ratio * (double)m->st.total_bytes);
  if (cfg->memory != CUEMM_MEMORY_DEVICE && (r = cuemm__managed_create(m, cuemm__manager_flush_locked)) != CUDA_SUCCESS) {
    free(m);
    return r;
  }
  if (cfg->pool == CUEMM_POOL_VMM && (r = create_pool(m, log)) != CUDA_SUCCESS) {
    free(m);
    return r;
  }
  cuemm__lock_init(&m->lock);
  cuemm__owned_init(&m->owned);
  cuemm__pending_init(&m->pending, m->st.max_pending_count, m->st.max_pending_bytes);
  if ((r = cuemm__extensions_attach(m, extensions, sizeof extensions / sizeof extensions[0])) != CUDA_SUCCESS) {
    unmake(m, r);
    return r;
  }
  cuemm__config_warn_ignored(&m->cfg, stderr);
  *out = m;
  return CUDA_SUCCESS;
}

/* ---- destruction ---------------------------------------------------------- */

typedef struct destroy_walk {
  cuemm_manager *m;
  size_t outstanding, outstanding_bytes, failed;
  cuemm__first_error first;
} destroy_walk;

static void note_failure(destroy_walk *w, CUresult r)
{
  w->failed++;
  cuemm__first_note(&w->first, r);
}

static void destroy_one(cuemm__owned_entry *e, void *arg)
{
  destroy_walk *w = arg;
  if (e->pending || e->kind == CUEMM__KIND_STREAM)
    return; /* still queued (the forced flush failed on it), or a heap's: counted and dropped with the heaps */
  w->outstanding++;
  w->outstanding_bytes += e->size;
  if (e->kind == CUEMM__KIND_POOL)
    return; /* goes with the pool */
  CUresult r = cuemm__manager_kind_release(w->m, (cuemm__kind)e->kind, e->key, e->size);
  if (r != CUDA_SUCCESS)
    note_failure(w, r);
}

static void free_manager(cuemm_manager *m)
{
  if (m->pool) /* destroy gave it back already; abandon drops it without driver calls */
    cuemm__pool_destroy(m->pool, 0);
  cuemm__managed_destroy(m, 0); /* likewise */
  cuemm__owned_fini(&m->owned);
  cuemm__pending_fini(&m->pending);
  cuemm__lock_release(&m->lock);
  
  free(m);
}

CUEMM_EXTERN CUresult cuemm_destroy(cuemm_manager *m)
{
  CUEMM__CHECK_MANAGER(m, "cuemm_destroy");
  cuemm__lock_acquire(&m->lock);
  cuemm__ctx_guard g;
  CUresult r = cuemm__ctx_enter(m, &g);
  if (r != CUDA_SUCCESS) {
    /* Nothing can be freed without the context: keep the manager whole so
     * the program can retry, rather than leak its memory silently. */
    cuemm__lock_release(&m->lock);
    cuemm__error_append("; cuemm_destroy changed nothing (the manager and its memory are intact): retry it, or "
                        "use cuemm_abandon if the context was destroyed");
    return r;
  }
  char note[256];
  size_t live_bytes = 0, live = cuemm__extensions_live(m, &live_bytes);
  cuemm__extensions_destroy(m, note, sizeof note);

  /* Force: the manager is going away, scopes or not.  On a failing free,
   * skip it and go on: nothing may stay owned by a manager that no longer
   * exists. */
  destroy_walk w = { .m = m, .first = CUEMM__FIRST_ERROR_INIT };
  CUresult fr;
  while ((fr = cuemm__manager_flush_all_locked(m)) != CUDA_SUCCESS) {
    note_failure(&w, fr);
    const cuemm__pending_entry *e = cuemm__pending_front(&m->pending);
    if (!e)
      break;
    cuemm__owned_drop(&m->owned, e->ptr);
    if (e->kind == CUEMM__KIND_POOL)
      m->pool_pending--;
    cuemm__pending_pop(&m->pending);
  }
  w.outstanding = live;
  w.outstanding_bytes = live_bytes;
  cuemm__owned_each(&m->owned, destroy_one, &w);
  if (m->pool) {
    /* Live blocks may still be in use by queued work: finish it before
     * unmapping. */
    CUresult sr = m->drv->CtxSynchronize();
    if (sr != CUDA_SUCCESS)
      note_failure(&w, cuemm__driver_error(sr, "cuCtxSynchronize before unmapping the pool"));
    sr = cuemm__pool_destroy(m->pool, 1);
    if (sr != CUDA_SUCCESS)
      note_failure(&w, sr);
    m->pool = NULL;
  }
  if (m->managed && (fr = cuemm__managed_destroy(m, 1)) != CUDA_SUCCESS)
    note_failure(&w, fr);
  r = cuemm__ctx_leave(m, &g, CUDA_SUCCESS);
  cuemm__log *log = m->log;
  free_manager(m);
  cuemm__log_flush(log);

  if (w.failed)
    return cuemm__error_prefix(cuemm__first_end(&w.first), "cuemm_destroy: %zu driver frees failed and that memory "
                               "is leaked in the driver; the first", w.failed);
  if (r != CUDA_SUCCESS)
    return r;
  if (w.outstanding)
    cuemm__error(CUDA_SUCCESS, "cuemm_destroy: freed %zu outstanding allocations (%zu bytes) the program had not freed",
                 w.outstanding, w.outstanding_bytes);
  if (note[0] && w.outstanding)
    cuemm__error_append("; %s", note);
  else if (note[0])
    cuemm__error(CUDA_SUCCESS, "cuemm_destroy: %s", note);
  return CUDA_SUCCESS;
}

CUEMM_EXTERN CUresult cuemm_abandon(cuemm_manager *m)
{
  CUEMM__CHECK_MANAGER(m, "cuemm_abandon");
  cuemm__lock_acquire(&m->lock);
  size_t live = m->st.live_count + m->st.host_live_count + m->st.pinned_count + cuemm__extensions_live(m, NULL);
  cuemm__extensions_abandon(m);
  size_t pending = m->pending.count;
  cuemm__log *log = m->log;
  free_manager(m);
  cuemm__log_flush(log);
  cuemm__error(CUDA_SUCCESS, "cuemm_abandon: dropped %zu live allocations and %zu pending frees without a driver call",
               live, pending);
  return CUDA_SUCCESS;
}
