/* sim-managed.c: managed memory (cuMemAllocManaged) and what is asked of
 * it: prefetches (cuMemPrefetchAsync) and advice (cuMemAdvise), in both
 * ABI variants, and the controls that read them back.
 *
 * Managed memory is host memory here, so the CPU and the "GPU" see the same
 * bytes without any migration; what simcuda adds is a record per allocation
 * (the last prefetch, the advice in force, the bytes prefetched to a
 * device) and a model of the device's memory as a budget, so that a test
 * can see oversubscription: bytes prefetched to a device stay resident while
 * they fit beside its device allocations, and a prefetch that does not fit
 * evicts other allocations' resident bytes first, counting what it evicted.
 * Pageable host memory (SIMCUDA_PAGEABLE) is accepted by prefetch and advice
 * too, with nothing recorded, as HMM and ATS platforms accept it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "sim-internal.h"

static unsigned long total_prefetches, total_advises, evictions;
static size_t evicted_bytes;

static size_t managed_bytes(void)
{
  size_t n = 0;
  for (struct sim_region *r = sim_region_first(); r; r = r->next)
    if (r->kind == SIM_R_MANAGED)
      n += r->size;
  return n;
}

static size_t resident_on(int dev)
{
  size_t n = 0;
  for (struct sim_region *r = sim_region_first(); r; r = r->next)
    if (r->kind == SIM_R_MANAGED && r->m.resident_dev == dev)
      n += r->m.resident;
  return n;
}

static CUresult alloc_managed(CUdeviceptr *dptr, size_t size, unsigned flags)
{
  if (!dptr)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r;
  struct sim_ctx *c = sim_ctx_current(&r);
  if (!c)
    return r;
  if (size == 0 || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
    return CUDA_ERROR_INVALID_VALUE;
  size_t held = managed_bytes();
  if (size > sim_managed_capacity || held > sim_managed_capacity - size)
    return CUDA_ERROR_OUT_OF_MEMORY;
  struct sim_region *reg = sim_region_mapped(SIM_R_MANAGED, size);
  if (!reg)
    return CUDA_ERROR_OUT_OF_MEMORY;
  void *p = (void *)reg->base;
  reg->dev = c->dev;
  reg->ctx = c;
  reg->ctx_id = c->id;
  reg->m.base = (CUdeviceptr)(uintptr_t)p;
  reg->m.size = size;
  reg->m.attach_flags = flags;
  reg->m.last_prefetch_dst = SIMCUDA_NONE;
  reg->m.preferred_location = SIMCUDA_NONE;
  reg->m.resident_dev = SIMCUDA_NONE;
  *dptr = (CUdeviceptr)(uintptr_t)p;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
  SIM_BEGIN(cuMemAllocManaged);
  return SIM_END(alloc_managed(dptr, bytesize, flags));
}

/* The managed region holding all of [p, p + count), or NULL with *err:
 * CUDA_ERROR_INVALID_VALUE for count 0, an unknown range or one crossing
 * the region's end.  With pageable access, a range in no region at all is
 * pageable memory: *err is CUDA_SUCCESS and NULL is returned. */
static struct sim_region *managed_range(CUdeviceptr p, size_t count, CUresult *err)
{
  *err = CUDA_ERROR_INVALID_VALUE;
  if (count == 0 || p == 0 || (uintptr_t)p + count < (uintptr_t)p)
    return NULL;
  struct sim_region *r = sim_region_find((uintptr_t)p);
  if (!r) {
    if (sim_pageable && !sim_region_overlap((uintptr_t)p, count, ~0))
      *err = CUDA_SUCCESS;
    return NULL;
  }
  if (r->kind != SIM_R_MANAGED || (uintptr_t)p - r->base + count > r->size)
    return NULL;
  *err = CUDA_SUCCESS;
  return r;
}

static CUresult check_target(CUdevice dev)
{
  return dev == CU_DEVICE_CPU || sim_valid_device(dev) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

/* Makes `want` bytes of r resident on `dev`, evicting other allocations'
 * bytes from it when the device's budget runs short. */
static void make_resident(struct sim_region *r, int dev, size_t want)
{
  if (r->m.resident_dev != dev) {
    r->m.resident = 0;
    r->m.resident_dev = dev;
  }
  if (want > r->size)
    want = r->size;
  if (want <= r->m.resident)
    return;
  struct sim_device *d = &sim_devices[dev];
  size_t more = want - r->m.resident;
  size_t room = d->capacity > d->used ? d->capacity - d->used : 0;
  size_t res = resident_on(dev);
  for (struct sim_region *o = sim_region_first(); o && res + more > room; o = o->next) {
    if (o == r || o->kind != SIM_R_MANAGED || o->m.resident_dev != dev || !o->m.resident)
      continue;
    size_t take = o->m.resident < res + more - room ? o->m.resident : res + more - room;
    o->m.resident -= take;
    res -= take;
    evictions++;
    evicted_bytes += take;
  }
  if (res + more > room) /* the request alone exceeds the device */
    more = room > res ? room - res : 0;
  r->m.resident += more;
}

static CUresult prefetch(CUdeviceptr p, size_t count, CUdevice dst, CUstream h)
{
  CUresult err;
  struct sim_stream *s = sim_stream_resolve(h, &err);
  if (!s)
    return err;
  if ((err = check_target(dst)) != CUDA_SUCCESS)
    return err;
  struct sim_region *r = managed_range(p, count, &err);
  if (err != CUDA_SUCCESS)
    return err;
  total_prefetches++;
  if (!r)
    return CUDA_SUCCESS;
  r->m.prefetches++;
  r->m.last_prefetch_dst = dst;
  r->m.last_prefetch_ptr = p;
  r->m.last_prefetch_size = count;
  r->m.last_prefetch_stream = h;
  if (dst == CU_DEVICE_CPU) {
    r->m.resident = 0;
    r->m.resident_dev = SIMCUDA_NONE;
  } else
    make_resident(r, dst, (r->m.resident_dev == dst ? r->m.resident : 0) + count);
  return CUDA_SUCCESS;
}

static CUresult advise(CUdeviceptr p, size_t count, CUmem_advise advice, CUdevice dev)
{
  if ((int)advice < CU_MEM_ADVISE_SET_READ_MOSTLY || (int)advice > CU_MEM_ADVISE_UNSET_ACCESSED_BY)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult err = check_target(dev);
  if (err != CUDA_SUCCESS)
    return err;
  struct sim_region *r = managed_range(p, count, &err);
  if (err != CUDA_SUCCESS)
    return err;
  total_advises++;
  if (!r)
    return CUDA_SUCCESS;
  unsigned bit = dev == CU_DEVICE_CPU ? 1u << 31 : 1u << dev;
  r->m.advises++;
  r->m.last_advice = (int)advice;
  r->m.last_advice_device = dev;
  switch (advice) {
  case CU_MEM_ADVISE_SET_READ_MOSTLY: r->m.read_mostly = 1; break;
  case CU_MEM_ADVISE_UNSET_READ_MOSTLY: r->m.read_mostly = 0; break;
  case CU_MEM_ADVISE_SET_PREFERRED_LOCATION: r->m.preferred_location = dev; break;
  case CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION: r->m.preferred_location = SIMCUDA_NONE; break;
  case CU_MEM_ADVISE_SET_ACCESSED_BY: r->m.accessed_by |= bit; break;
  case CU_MEM_ADVISE_UNSET_ACCESSED_BY: r->m.accessed_by &= ~bit; break;
  default: break;
  }
  return CUDA_SUCCESS;
}

/* The CUmemLocation variants (cuda.h 13's plain names). */
static CUresult location_device(CUmemLocation loc, CUdevice *dev)
{
  if (loc.type == CU_MEM_LOCATION_TYPE_DEVICE)
    *dev = loc.id;
  else if (loc.type == CU_MEM_LOCATION_TYPE_HOST)
    *dev = CU_DEVICE_CPU;
  else
    return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

#if CUDA_VERSION >= 13000
SIM_API CUresult cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUmemLocation location, unsigned int flags,
                                    CUstream hStream)
{
  SIM_BEGIN(cuMemPrefetchAsync);
  CUdevice dev = 0;
  CUresult r = flags != 0 ? CUDA_ERROR_INVALID_VALUE : location_device(location, &dev);
  return SIM_END(r != CUDA_SUCCESS ? r : prefetch(devPtr, count, dev, hStream));
}

SIM_API CUresult cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUmemLocation location)
{
  SIM_BEGIN(cuMemAdvise);
  CUdevice dev = 0;
  CUresult r = location_device(location, &dev);
  return SIM_END(r != CUDA_SUCCESS ? r : advise(devPtr, count, advice, dev));
}

SIM_API CUresult sim_cuMemPrefetchAsync_v1(CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream)
{
  SIM_BEGIN(cuMemPrefetchAsync);
  return SIM_END(prefetch(devPtr, count, dstDevice, hStream));
}

SIM_API CUresult sim_cuMemAdvise_v1(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUdevice device)
{
  SIM_BEGIN(cuMemAdvise);
  return SIM_END(advise(devPtr, count, advice, device));
}
#else
/* A cuda.h before 13.0 names the CUdevice variants plainly. */
SIM_API CUresult cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream)
{
  SIM_BEGIN(cuMemPrefetchAsync);
  return SIM_END(prefetch(devPtr, count, dstDevice, hStream));
}

SIM_API CUresult cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUdevice device)
{
  SIM_BEGIN(cuMemAdvise);
  return SIM_END(advise(devPtr, count, advice, device));
}
#endif

/* ---- controls ---- */

SIM_API int simcuda_managed_get(CUdeviceptr p, simcuda_managed_range *out)
{
  if (!out)
    return -1;
  sim_lock();
  struct sim_region *r = sim_region_find((uintptr_t)p);
  int ok = r && r->kind == SIM_R_MANAGED;
  if (ok)
    *out = r->m;
  sim_unlock();
  return ok ? 0 : -1;
}

SIM_API void simcuda_managed_totals_get(simcuda_managed_totals *out)
{
  if (!out)
    return;
  memset(out, 0, sizeof *out);
  sim_lock();
  for (struct sim_region *r = sim_region_first(); r; r = r->next)
    if (r->kind == SIM_R_MANAGED) {
      out->allocs++;
      out->bytes += r->size;
      out->resident += r->m.resident;
    }
  out->prefetches = total_prefetches;
  out->advises = total_advises;
  out->evictions = evictions;
  out->evicted_bytes = evicted_bytes;
  sim_unlock();
}

SIM_API int simcuda_set_pageable(int level)
{
  if (level < 0 || level > 2)
    return -1;
  sim_lock();
  sim_pageable = level;
  sim_unlock();
  return 0;
}
