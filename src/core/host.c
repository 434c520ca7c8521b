/* host.c: owns pinned host memory: page-locked allocations (mapped,
 * portable, write-combined) whose frees are deferred like device memory, and
 * pinning of existing host ranges, whose unpinning is immediate.
 *
 * Why the asymmetry: memory from cuMemHostAlloc may be the source or target
 * of copies still queued on a stream, so releasing it waits like a device
 * free.  An unpin gives nothing back to the driver's allocator and a program
 * commonly pins, copies, unpins and pins the same buffer again, which must
 * work inside a defer scope (Numba unpins at once for the same reason).
 */
#include <inttypes.h>

#include "base/internal.h"
#include "core/manager.h"

#define HOST_ALLOC_FLAGS (CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED)
#define HOST_REGISTER_FLAGS                                                    \
  (CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |                \
   CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY)

CUEMM_EXTERN CUresult cuemm_host_allocate(cuemm_manager *m, size_t size, unsigned int flags, void **p)
{
  if (!m || !p)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_host_allocate: %s is NULL", m ? "p" : "manager");
  if (flags & ~(unsigned int)HOST_ALLOC_FLAGS)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE,
                        "cuemm_host_allocate: unknown flags 0x%x (accepted: CU_MEMHOSTALLOC_PORTABLE, "
                        "CU_MEMHOSTALLOC_DEVICEMAP, CU_MEMHOSTALLOC_WRITECOMBINED)",
                        flags & ~(unsigned int)HOST_ALLOC_FLAGS);
  uintptr_t out = 0;
  CUresult r = cuemm__manager_alloc(m, CUEMM__KIND_HOST, size, flags, &out);
  if (out) /* also when only restoring the caller's context failed */
    *p = (void *)out;
  return r;
}

CUEMM_EXTERN CUresult cuemm_host_free(cuemm_manager *m, void *p)
{
  if (!m)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_host_free: manager is NULL");
  return cuemm__manager_free(m, "cuemm_host_free", CUEMM__KIND_HOST, (uintptr_t)p, NULL);
}

CUEMM_EXTERN CUresult cuemm_host_device_pointer(cuemm_manager *m, void *p, CUdeviceptr *dptr)
{
  if (!m || !dptr || !p)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_host_get_device_pointer: %s is NULL",
                        !m ? "manager" : !dptr ? "dptr" : "p");
  cuemm__ctx_guard g;
  CUresult r = cuemm__ctx_enter(m, &g);
  if (r != CUDA_SUCCESS)
    return r;
  r = m->drv->MemHostGetDevicePointer(dptr, p, 0);
  if (r != CUDA_SUCCESS)
    cuemm__driver_error(r, "cuMemHostGetDevicePointer(%p) (is it mapped memory, allocated with "
                        "CU_MEMHOSTALLOC_DEVICEMAP or pinned with CU_MEMHOSTREGISTER_DEVICEMAP?)", p);
  return cuemm__ctx_leave(m, &g, r);
}

CUEMM_EXTERN CUresult cuemm_host_pin(cuemm_manager *m, void *p, size_t size, unsigned int flags)
{
  if (!m || !p)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_host_pin: %s is NULL", m ? "p" : "manager");
  if (size == 0)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_host_pin: size is 0");
  if (flags & ~(unsigned int)HOST_REGISTER_FLAGS)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE,
                        "cuemm_host_pin: unknown flags 0x%x (accepted: CU_MEMHOSTREGISTER_PORTABLE, _DEVICEMAP, "
                        "_IOMEMORY, _READ_ONLY)", flags & ~(unsigned int)HOST_REGISTER_FLAGS);
  cuemm__lock_acquire(&m->lock);
  cuemm__ctx_guard g;
  CUresult r = cuemm__ctx_enter(m, &g);
  if (r == CUDA_SUCCESS) {
    r = m->drv->MemHostRegister(p, size, flags);
    if (r != CUDA_SUCCESS)
      cuemm__driver_error(r, "cuMemHostRegister(%p, %zu bytes, flags 0x%x)", p, size, flags);
    else if (cuemm__owned_add(&m->owned, (uintptr_t)p, size, CUEMM__KIND_PINNED, 0) != 0) {
      m->drv->MemHostUnregister(p);
      r = cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "cuemm_host_pin: no host memory left to record the range");
    } else {
      m->st.pinned_bytes += size;
      m->st.pinned_count++;
    }
    r = cuemm__ctx_leave(m, &g, r);
  }
  cuemm__lock_release(&m->lock);
  return r;
}

CUEMM_EXTERN CUresult cuemm_host_unpin(cuemm_manager *m, void *p)
{
  if (!m)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_host_unpin: manager is NULL");
  cuemm__lock_acquire(&m->lock);
  CUresult r;
  cuemm__owned_entry *e = cuemm__owned_find(&m->owned, (uintptr_t)p);
  if (!e || e->kind != CUEMM__KIND_PINNED) {
    r = cuemm__error(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
                     "cuemm_host_unpin: %p is not the start of a range this manager pinned%s", p,
                     e ? " (it is memory from cuemm_host_alloc or cuemm_alloc)" : "");
  } else {
    cuemm__ctx_guard g;
    r = cuemm__ctx_enter(m, &g);
    if (r == CUDA_SUCCESS) {
      r = m->drv->MemHostUnregister(p);
      if (r != CUDA_SUCCESS)
        cuemm__driver_error(r, "cuMemHostUnregister(%p)", p);
      else {
        m->st.pinned_bytes -= e->size;
        m->st.pinned_count--;
        cuemm__owned_remove(&m->owned, e);
      }
      r = cuemm__ctx_leave(m, &g, r);
    }
  }
  cuemm__lock_release(&m->lock);
  return r;
}
