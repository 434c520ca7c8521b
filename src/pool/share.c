/* share.c: owns what the pool shares with other devices and
 * processes: peer access to its chunks (cuMemSetAccess over every run of
 * accessible chunks when a device is granted access) and the pieces an IPC
 * export names (the chunks a range overlaps, and a chunk found again by its
 * serial).  The chunk table, and the growth that opens each new chunk to
 * every device with access, are pool.c's; exporting, sending and mapping
 * the chunks in another process is ipc-fd.c's.
 */
#include <stdio.h>

#include "base/internal.h"
#include "pool/share.h"

/* ---- peers ------------------------------------------------------------------- */

/* Calls cuMemSetAccess with `desc` on every run of adjacent accessible
 * chunks, stopping at the first failure; *done counts the runs set. */
static CUresult access_runs(cuemm__pool *p, const CUmemAccessDesc *desc, unsigned count, size_t max_runs,
                            size_t *done)
{
  *done = 0;
  size_t u = 0;
  while (u < p->nunits && *done < max_runs) {
    if (p->units[u].state != CUEMM__CHUNK_ACCESSIBLE || !cuemm__runs_is_head(p->runs, u)) {
      u = cuemm__runs_next(p->runs, u);
      continue;
    }
    size_t start = u;
    while (u < p->nunits && cuemm__runs_is_head(p->runs, u) && p->units[u].state == CUEMM__CHUNK_ACCESSIBLE)
      u += cuemm__runs_units(p->runs, u);
    CUresult r = p->drv->MemSetAccess(cuemm__pool_unit_addr(p, start), (u - start) * p->unit, desc, count);
    if (r != CUDA_SUCCESS)
      return cuemm__driver_error(r, "cuMemSetAccess(0x%llx, %zu bytes, %u devices) granting pool access",
                                 (unsigned long long)cuemm__pool_unit_addr(p, start), (u - start) * p->unit, count);
    ++*done;
  }
  return CUDA_SUCCESS;
}

CUresult cuemm__share_grant(cuemm__pool *p, CUdevice peer)
{
  for (unsigned k = 0; k < p->naccess; k++)
    if (p->access[k].location.id == (int)peer)
      return CUDA_SUCCESS;
  if (p->slab)
    return cuemm__error(CUDA_ERROR_NOT_SUPPORTED, "cuemm_pool_grant_access: the pool is a slab of cuMemAlloc memory "
                        "(CUEMM_POOL_SLAB=1), whose access cuMemSetAccess does not set; peers reach it through "
                        "cuCtxEnablePeerAccess");
  if (p->naccess == CUEMM__POOL_MAX_DEVICES)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_pool_grant_access: %d devices have access already",
                        CUEMM__POOL_MAX_DEVICES);
  p->access[p->naccess] = p->access[0];
  p->access[p->naccess].location.id = (int)peer;
  size_t done;
  CUresult r = access_runs(p, p->access, p->naccess + 1, SIZE_MAX, &done);
  if (r != CUDA_SUCCESS) {
    /* Take back what the runs already set gave the peer. */
    CUmemAccessDesc none = p->access[p->naccess];
    none.flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    size_t undone;
    cuemm__saved_error why;
    cuemm__error_save(&why);
    access_runs(p, &none, 1, done, &undone);
    return cuemm__error_restore(&why, r);
  }
  p->naccess++;
  return CUDA_SUCCESS;
}

/* ---- IPC ---------------------------------------------------------------------- */

int cuemm__share_pieces(const cuemm__pool *p, CUdeviceptr a, size_t size, cuemm__pool_piece *out, size_t max,
                       size_t *n)
{
  *n = 0;
  if (!cuemm__pool_contains(p, a) || size == 0 || size > p->reserved - (a - p->base))
    return -1;
  size_t u = cuemm__runs_covering(p->runs, (a - p->base) / p->unit);
  if (u == CUEMM__RUNS_NONE)
    return -1;
  CUdeviceptr end = a + size;
  while (u < p->nunits && cuemm__pool_unit_addr(p, u) < end) {
    const cuemm__pool_unit *h = &p->units[u];
    if (!cuemm__runs_is_head(p->runs, u) || h->state != CUEMM__CHUNK_ACCESSIBLE || !h->has_handle)
      return -1;
    size_t units = cuemm__runs_units(p->runs, u);
    if (*n < max)
      out[*n] = (cuemm__pool_piece){ cuemm__pool_unit_addr(p, u), units * p->unit, h->serial, h->handle };
    ++*n;
    u += units;
  }
  if (cuemm__pool_unit_addr(p, u) < end)
    return -1;
  return *n > max ? -2 : 0;
}

long cuemm__share_find_serial(const cuemm__pool *p, uint64_t serial)
{
  for (size_t u = 0; u < p->nunits;) {
    const cuemm__pool_unit *h = &p->units[u];
    if (cuemm__runs_is_head(p->runs, u) && h->state == CUEMM__CHUNK_ACCESSIBLE && h->serial == serial)
      return (long)u;
    u = cuemm__runs_next(p->runs, u);
  }
  return -1;
}
