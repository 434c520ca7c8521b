/* compat.c: the deprecated names, each a wrapper of the function that
 * replaced it with the arguments in the order of cuemm.h's convention (the
 * manager first, inputs next, outputs last).  They stay exported so that
 * programs built against an older cuemm.h keep linking and running; new
 * code uses the names their deprecation messages give.
 */
#include "cuemm.h"

CUEMM_EXTERN CUresult cuemm_create(cuemm_manager **m, CUcontext ctx, const cuemm_config *cfg)
{
  return cuemm_manager_create(ctx, cfg, m);
}

CUEMM_EXTERN CUresult cuemm_alloc(cuemm_manager *m, CUdeviceptr *p, size_t size)
{
  return cuemm_allocate(m, size, p);
}

CUEMM_EXTERN CUresult cuemm_alloc_async(cuemm_manager *m, CUdeviceptr *p, size_t size, CUstream stream)
{
  return cuemm_allocate_async(m, size, stream, p);
}

CUEMM_EXTERN CUresult cuemm_host_alloc(cuemm_manager *m, void **p, size_t size, unsigned int flags)
{
  return cuemm_host_allocate(m, size, flags, p);
}

CUEMM_EXTERN CUresult cuemm_mem_get_address_range(cuemm_manager *m, CUdeviceptr *base, size_t *size, CUdeviceptr p)
{
  return cuemm_address_range(m, p, base, size);
}

CUEMM_EXTERN CUresult cuemm_host_get_device_pointer(cuemm_manager *m, CUdeviceptr *dptr, void *p)
{
  return cuemm_host_device_pointer(m, p, dptr);
}

CUEMM_EXTERN CUresult cuemm_ipc_handle_from_bytes(cuemm_ipc_handle *h, const void *bytes, size_t len)
{
  return cuemm_ipc_handle_parse(bytes, len, h);
}

CUEMM_EXTERN CUresult cuemm_ipc_send(int sock, cuemm_manager *m, const cuemm_ipc_handle *h)
{
  return cuemm_ipc_handle_send(m, h, sock);
}
