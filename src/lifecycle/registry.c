/* registry.c: owns the map from CUDA contexts to their managers, and the
 * drop-in calls (cuemm_get, cuemm_mem_alloc, cuemm_mem_free) that find the
 * manager of the calling thread's current context through it.  It sits above
 * the manager: it calls the manager's public functions, and learns of
 * managers created and destroyed as an extension (manager.h), so the
 * manager never calls it.
 *
 * Keys are the driver's context ids, not CUcontext handles: a handle is an
 * address, and a context destroyed and created again may reuse it, while an
 * id is never reused in a process.  A thread remembers the last manager it
 * found; the registry's generation (bumped whenever a manager leaves) tells
 * it when that memory may be stale.
 */
#include <stdatomic.h>
#include <stdlib.h>

#include "base/internal.h"
#include "lifecycle/registry.h"

typedef struct slot {
  unsigned long long ctx_id;
  cuemm_manager *m;
} slot;

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static slot *slots;
static size_t nslots, capslots;
static _Atomic unsigned long generation = 1;

static _Thread_local struct {
  unsigned long long ctx_id;
  unsigned long generation;
  cuemm_manager *m;
} cache;

static cuemm_manager *find_locked(unsigned long long id)
{
  for (size_t i = 0; i < nslots; i++)
    if (slots[i].ctx_id == id)
      return slots[i].m;
  return NULL;
}

static CUresult registry_add(cuemm_manager *m)
{
  if (m->cfg.secondary)
    return CUDA_SUCCESS; /* one of several on its context, found through its pointer alone */
  CUresult r = CUDA_SUCCESS;
  pthread_mutex_lock(&reg_lock);
  if (find_locked(m->ctx_id)) {
    r = cuemm__error(CUDA_ERROR_ALREADY_ACQUIRED,
                     "cuemm_manager_create: context %p (id %llu) already has a manager; use cuemm_get, "
                     "or cuemm_destroy the other first", (void *)m->ctx, m->ctx_id);
  } else if (nslots == capslots) {
    size_t cap = capslots ? capslots * 2 : 8;
    slot *grown = realloc(slots, cap * sizeof *grown);
    if (!grown)
      r = cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "cuemm_manager_create: no host memory for the registry");
    else {
      slots = grown;
      capslots = cap;
    }
  }
  if (r == CUDA_SUCCESS)
    slots[nslots++] = (slot){ m->ctx_id, m };
  pthread_mutex_unlock(&reg_lock);
  return r;
}

static void registry_remove(cuemm_manager *m)
{
  pthread_mutex_lock(&reg_lock);
  for (size_t i = 0; i < nslots; i++)
    if (slots[i].m == m) {
      slots[i] = slots[--nslots];
      break;
    }
  atomic_fetch_add(&generation, 1);
  pthread_mutex_unlock(&reg_lock);
}

static void registry_destroy(cuemm_manager *m, char *note, size_t cap)
{
  (void)note, (void)cap; /* leaving the registry leaves nothing open */
  registry_remove(m);
}

const cuemm__extension cuemm__registry_extension = {
  .attach = registry_add,
  .destroy = registry_destroy,
  .abandon = registry_remove,
};

CUEMM_EXTERN CUresult cuemm_get(cuemm_manager **out)
{
  if (!out)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_get: m is NULL");
  CUresult r;
  const cuemm__driver_table *d = cuemm__driver(&r);
  if (!d)
    return r;
  CUcontext ctx = NULL;
  if ((r = d->CtxGetCurrent(&ctx)) != CUDA_SUCCESS)
    return cuemm__driver_error(r, "cuCtxGetCurrent");
  if (!ctx)
    return cuemm__error(CUDA_ERROR_INVALID_CONTEXT, "no CUDA context is current on this thread "
                        "(make one current with cuCtxSetCurrent or cuDevicePrimaryCtxRetain first)");
  unsigned long long id;
  if ((r = d->CtxGetId(ctx, &id)) != CUDA_SUCCESS)
    return cuemm__driver_error(r, "cuCtxGetId(%p)", (void *)ctx);
  unsigned long gen = atomic_load(&generation);
  if (cache.m && cache.ctx_id == id && cache.generation == gen) {
    *out = cache.m;
    return CUDA_SUCCESS;
  }

  /* Create outside the registry lock (creation makes driver calls); if
   * another thread registered one meanwhile, cuemm_create says so and the
   * winner is used. */
  pthread_mutex_lock(&reg_lock);
  cuemm_manager *m = find_locked(id);
  pthread_mutex_unlock(&reg_lock);
  if (!m) {
    r = cuemm_manager_create(ctx, NULL, &m);
    if (r == CUDA_ERROR_ALREADY_ACQUIRED) {
      pthread_mutex_lock(&reg_lock);
      m = find_locked(id);
      pthread_mutex_unlock(&reg_lock);
      r = m ? CUDA_SUCCESS : r;
    }
    if (r != CUDA_SUCCESS)
      return r;
  }
  cache.ctx_id = id;
  cache.generation = gen;
  cache.m = m;
  *out = m;
  return CUDA_SUCCESS;
}

CUEMM_EXTERN CUresult cuemm_mem_alloc(CUdeviceptr *p, size_t size)
{
  if (!p)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_mem_alloc: p is NULL");
  cuemm_manager *m;
  CUresult r = cuemm_get(&m);
  return r == CUDA_SUCCESS ? cuemm_allocate(m, size, p) : r;
}

CUEMM_EXTERN CUresult cuemm_mem_free(CUdeviceptr p)
{
  cuemm_manager *m;
  CUresult r = cuemm_get(&m);
  return r == CUDA_SUCCESS ? cuemm_free(m, p) : r;
}
