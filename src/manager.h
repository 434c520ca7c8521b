/* manager.h: the manager structure and the internal calls its files share.
 *
 * manager.c owns the lifecycle and the alloc/free/flush policy; host.c adds
 * pinned host memory on top of the same paths; registry.c maps contexts to
 * managers; ipc.c shares allocations with other processes.  Locking rule: m->lock guards everything below it in the struct
 * and is held across the driver calls of one operation (a flush included),
 * so a pointer is never in the table and the driver's free list at once.
 */
#ifndef CUEMM_MANAGER_H
#define CUEMM_MANAGER_H

#include <pthread.h>
#include <stdint.h>

#include "cuemm.h"
#include "driver.h"
#include "lock.h"
#include "owned.h"
#include "pending.h"
#include "pool.h"

struct cuemm_manager {
  const cuemm__driver_table *drv;
  CUcontext ctx;
  unsigned long long ctx_id;  /* cuCtxGetId: never reused by the driver */
  CUdevice dev;
  cuemm_config cfg;

  cuemm__lock lock;
  cuemm__owned owned;
  cuemm__pending pending;
  cuemm_stats st;             /* pending_* and defer_depth read from `pending` */
  cuemm__pool *pool;          /* NULL without a pool */
  size_t pool_pending;        /* pool blocks in `pending` */
  uint64_t fallback_allocs;   /* requests too large for the pool */
  struct cuemm__managed *managed;  /* managed.c: CUEMM_MEMORY=managed|system, else NULL */
};

/* Makes m's context current for the calling thread if it is not, remembering
 * whether it pushed.  Every driver call of a manager runs between these.
 * cuemm__ctx_leave restores the caller's context and returns `r`, or, when
 * `r` is CUDA_SUCCESS and the restore failed, that failure: an operation
 * whose work succeeded must still say so when it leaves the wrong context
 * current on the caller's thread. */
typedef struct cuemm__ctx_guard { int pushed; } cuemm__ctx_guard;
CUresult cuemm__ctx_enter(cuemm_manager *m, cuemm__ctx_guard *g);
CUresult cuemm__ctx_leave(cuemm_manager *m, cuemm__ctx_guard *g, CUresult r);

/* Allocates with the out-of-memory flush-and-retry policy and records the
 * allocation.  `flags` go to cuMemHostAlloc for CUEMM__KIND_HOST. */
CUresult cuemm__alloc(cuemm_manager *m, cuemm__kind kind, size_t size, unsigned int flags, uintptr_t *out);

/* Releases the pending frees unless a defer scope is open (cuemm_flush with
 * the lock held). */
CUresult cuemm__flush_locked(cuemm_manager *m);

/* Queues the free of an allocation of the given kind, flushing when due. */
CUresult cuemm__free(cuemm_manager *m, cuemm__kind kind, uintptr_t p);

/* Registry (registry.c). */
CUresult cuemm__registry_add(cuemm_manager *m);
void cuemm__registry_remove(cuemm_manager *m);

/* IPC (ipc.c): closes every mapping opened with cuemm_ipc_open on m and
 * returns how many there were.  cuemm_destroy calls it with m's lock held:
 * ipc.c never takes a manager's lock while it holds its own. */
size_t cuemm__ipc_close_all(cuemm_manager *m);
/* The same without driver calls, for a manager whose context is gone. */
size_t cuemm__ipc_forget_all(cuemm_manager *m);

#endif
