/* range.c: owns cuemm_mem_get_address_range, the answer to "which block
 * does this device pointer belong to" for memory a manager handed out.
 *
 * The driver's cuMemGetAddressRange knows allocations, not blocks: on a pool
 * block it answers with the whole mapping around it (a chunk, or a run of
 * chunks), and a program that sizes a copy or a memset from that answer
 * runs into its neighbours' blocks or off the mapping's end.  The manager
 * knows every block it handed out -- the owned table holds each live one,
 * keyed by its start -- so the answer comes from there, without a driver
 * call.  An exact start is one hash probe; an interior pointer needs a walk
 * of the table, which is acceptable for a query that programs make once per
 * array, not once per access.
 */
#include <inttypes.h>

#include "base/internal.h"
#include "core/manager.h"

/* The live entry whose [key, key + size) holds p, or NULL.  Lock held. */
static cuemm__owned_entry *find_containing(cuemm__owned *t, uintptr_t p)
{
  cuemm__owned_entry *e = cuemm__owned_find(t, p);
  if (e)
    return e;
  for (size_t i = 0; i < t->cap; i++) {
    e = &t->slots[i];
    if (e->key != 0 && p > e->key && p - e->key < e->size)
      return e;
  }
  return NULL;
}

/* Why p is not a live allocation of m that cuemm_alloc handed out, as the
 * message's tail.  Lock held. */
static CUresult not_found(cuemm_manager *m, uintptr_t p, const cuemm__owned_entry *e)
{
  const char *fn = "cuemm_mem_get_address_range";
  if (e && (e->kind == CUEMM__KIND_HOST || e->kind == CUEMM__KIND_PINNED))
    return cuemm__error(CUDA_ERROR_NOT_FOUND, "%s: 0x%" PRIxPTR " is pinned host memory of this manager "
                        "(%s at 0x%" PRIxPTR ", %zu bytes), not device memory", fn, p,
                        e->kind == CUEMM__KIND_HOST ? "cuemm_host_allocate" : "cuemm_host_pin", e->key, e->size);
  if (e) /* pending */
    return cuemm__error(CUDA_ERROR_NOT_FOUND, "%s: 0x%" PRIxPTR " lies in an allocation of this manager "
                        "(0x%" PRIxPTR ", %zu bytes) that was freed already and waits in the pending queue", fn,
                        p, e->key, e->size);
  if (m->pool && cuemm__pool_contains(m->pool, (CUdeviceptr)p)) {
    const cuemm__pending_entry *q = cuemm__pending_find(&m->pending, p, 1);
    if (q)
      return cuemm__error(CUDA_ERROR_NOT_FOUND, "%s: 0x%" PRIxPTR " lies in a pool block of this manager "
                          "(0x%" PRIxPTR ", %zu bytes) that was freed already and waits in the pending queue", fn,
                          p, q->ptr, q->size);
    return cuemm__error(CUDA_ERROR_NOT_FOUND, "%s: 0x%" PRIxPTR " lies in this manager's pool but in no live "
                        "block (freed, or never handed out)", fn, p);
  }
  return cuemm__error(CUDA_ERROR_NOT_FOUND, "%s: 0x%" PRIxPTR " is not inside any live device allocation of "
                      "this manager (allocated elsewhere, host memory, or freed and released already)", fn, p);
}

CUEMM_EXTERN CUresult cuemm_address_range(cuemm_manager *m, CUdeviceptr p, CUdeviceptr *base, size_t *size)
{
  if (!m) {
    CUresult r = cuemm_get(&m);
    if (r != CUDA_SUCCESS)
      return r;
  }
  uintptr_t a = (uintptr_t)p;
  if (a == 0)
    return cuemm__error(CUDA_ERROR_NOT_FOUND, "cuemm_mem_get_address_range: the pointer is 0");
  cuemm__lock_acquire(&m->lock);
  cuemm__owned_entry *e = find_containing(&m->owned, a);
  if (!e)
    e = cuemm__extensions_owned_lookup(m, a, 1); /* a block of a thread's span (span.h) */
  size_t live = e && e->kind == CUEMM__KIND_STREAM ? cuemm__extensions_live_size(m, e) : 0;
  if (e && e->kind == CUEMM__KIND_STREAM && a - e->key >= live) {
    CUresult r = cuemm__error(CUDA_ERROR_NOT_FOUND, "cuemm_mem_get_address_range: 0x%" PRIxPTR " lies in a block of "
                              "this manager (0x%" PRIxPTR ") that was freed already (cuemm_free_async), or past "
                              "its end", a, e->key);
    cuemm__lock_release(&m->lock);
    return r;
  }
  if (!e || e->pending || e->kind == CUEMM__KIND_HOST || e->kind == CUEMM__KIND_PINNED) {
    CUresult r = not_found(m, a, e);
    cuemm__lock_release(&m->lock);
    return r;
  }
  uintptr_t start = e->key;
  size_t bytes = e->kind == CUEMM__KIND_STREAM ? live : e->size;
  cuemm__lock_release(&m->lock);
  if (base)
    *base = (CUdeviceptr)start;
  if (size)
    *size = bytes;
  return CUDA_SUCCESS;
}

