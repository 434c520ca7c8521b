/* ctx.c: owns the entering and leaving of a manager's context: every driver
 * call a manager makes runs with its context current on the calling thread,
 * and the caller's context is restored afterwards.  It sits below every file
 * that makes driver calls for a manager (manager.c, lifecycle.c, stats.c,
 * managed.c, host.c, the stream path's stream.c, event.c,
 * tags.c and exchange.c, suspend.c, ipc.c, ipc-fd.c) and calls none
 * of them.
 */
#include "core/ctx.h"
#include "base/internal.h"
#include "core/manager.h"

CUresult cuemm__ctx_enter(cuemm_manager *m, cuemm__ctx_guard *g)
{
  CUcontext cur = NULL;
  g->pushed = 0;
  CUresult r = m->drv->CtxGetCurrent(&cur);
  if (r != CUDA_SUCCESS)
    return cuemm__driver_error(r, "cuCtxGetCurrent");
  if (cur == m->ctx)
    return CUDA_SUCCESS;
  r = m->drv->CtxPushCurrent(m->ctx);
  if (r != CUDA_SUCCESS)
    return cuemm__driver_error(r, "cuCtxPushCurrent(manager's context %p)", (void *)m->ctx);
  g->pushed = 1;
  return CUDA_SUCCESS;
}

CUresult cuemm__ctx_leave(cuemm_manager *m, cuemm__ctx_guard *g, CUresult r)
{
  if (!g->pushed)
    return r;
  g->pushed = 0;
  CUcontext popped = NULL;
  CUresult pr = m->drv->CtxPopCurrent(&popped);
  if (pr == CUDA_SUCCESS || r != CUDA_SUCCESS)
    return r;
  cuemm__driver_error(pr, "cuCtxPopCurrent (restoring the caller's context after the manager's work)");
  cuemm__error_append("; the work itself succeeded, but the manager's context %p may still be current on this "
                      "thread", (void *)m->ctx);
  return pr;
}
