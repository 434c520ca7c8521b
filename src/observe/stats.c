/* stats.c: owns what a manager reports of itself: its statistics
 * (cuemm_get_stats, with the stream-ordered path's figures added and the
 * peaks brought up to them), its pool's (cuemm_pool_get_stats), the bytes
 * it holds (cuemm_get_held), the device's free memory
 * (cuemm_get_memory_info) and its context.  The counters are kept where
 * what they count happens (manager.c, account.c, pool.c, the extensions);
 * report.c and snapshot.c read them through the _locked calls here.
 */
#include <string.h>

#include "base/internal.h"
#include "observe/stats.h"

/* ---- the manager ---------------------------------------------------------- */

CUEMM_EXTERN CUresult cuemm_get_memory_info(cuemm_manager *m, size_t *free_bytes, size_t *total_bytes)
{
  CUEMM__CHECK_MANAGER(m, "cuemm_get_memory_info");
  size_t f = 0, t = 0;
  cuemm__ctx_guard g;
  CUresult r = cuemm__ctx_enter(m, &g);
  if (r != CUDA_SUCCESS)
    return r;
  r = m->drv->MemGetInfo(&f, &t);
  if (r != CUDA_SUCCESS)
    cuemm__driver_error(r, "cuMemGetInfo");
  r = cuemm__ctx_leave(m, &g, r);
  if (r != CUDA_SUCCESS)
    return r;
  if (free_bytes)
    *free_bytes = f;
  if (total_bytes)
    *total_bytes = t;
  return CUDA_SUCCESS;
}

CUEMM_EXTERN CUresult cuemm_get_stats(cuemm_manager *m, cuemm_stats *s)
{
  CUEMM__CHECK_MANAGER(m, "cuemm_get_stats");
  if (!s)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_get_stats: s is NULL");
  cuemm__lock_acquire(&m->lock);
  cuemm__stats_locked(m, s);
  cuemm__lock_release(&m->lock);
  return CUDA_SUCCESS;
}

CUEMM_EXTERN CUresult cuemm_get_held(const cuemm_manager *m, size_t *held)
{
  CUEMM__CHECK_MANAGER(m, "cuemm_get_held");
  if (!held)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_get_held: held is NULL");
  *held = cuemm__account_held_bytes(m);
  return CUDA_SUCCESS;
}

void cuemm__stats_locked(cuemm_manager *m, cuemm_stats *s)
{
  *s = m->st;
  if (m->nheaps) {
    cuemm__extensions_stats(m, s);
    if (s->live_bytes > m->st.peak_bytes)
      m->st.peak_bytes = s->peak_bytes = s->live_bytes;
    if (s->live_count > m->st.peak_count)
      m->st.peak_count = s->peak_count = s->live_count;
  }
  s->pending_bytes = m->pending.bytes;
  s->pending_count = m->pending.count;
  s->defer_depth = m->pending.defer_depth;
  s->held_bytes = cuemm__account_held_bytes(m);
  if (s->held_bytes > s->peak_held_bytes)
    s->peak_held_bytes = s->held_bytes;
  cuemm__log_counts(m->log, &s->log_rows, &s->log_lost);
}

CUEMM_EXTERN CUcontext cuemm_context(const cuemm_manager *m)
{
  return m ? m->ctx : NULL;
}

/* ---- the pool ------------------------------------------------------------- */

void cuemm__stats_pool_locked(cuemm_manager *m, cuemm_pool_stats *s)
{
  if (m->pool) {
    cuemm__pool_get_stats(m->pool, s);
    s->fallback_allocs = m->fallback_allocs;
  } else
    memset(s, 0, sizeof *s);
}

CUEMM_EXTERN CUresult cuemm_pool_get_stats(cuemm_manager *m, cuemm_pool_stats *s)
{
  CUEMM__CHECK_MANAGER(m, "cuemm_pool_get_stats");
  if (!s)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_pool_get_stats: s is NULL");
  cuemm__lock_acquire(&m->lock);
  cuemm__stats_pool_locked(m, s);
  cuemm__lock_release(&m->lock);
  return CUDA_SUCCESS;
}
