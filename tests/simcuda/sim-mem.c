/* sim-mem.c: device and pinned host memory, and the copies and fills on it.
 *
 * It owns the registry of address regions: every range of addresses simcuda
 * hands out or knows about (cuMemAlloc allocations, pinned and registered
 * host memory, and the VMM and IPC mappings that sim-vmm.c and sim-ipc.c
 * add).  Device pointers are host addresses, so a test can look at device
 * memory with memcpy, but every device pointer passed to simcuda is checked
 * against this registry first, which is how a stray, interior or freed
 * pointer is caught.
 *
 * Each cuMemAlloc allocation is its own memfd mapped MAP_SHARED, so that
 * cuIpcGetMemHandle can hand the very same pages to another process.
 * Accounting: an allocation counts against its device's capacity rounded up
 * to SIM_ALLOC_ROUND (512) bytes; cuMemCreate handles count their exact size,
 * a multiple of the 2 MiB granularity.  Pinned host memory does not count.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sim-internal.h"

static struct sim_region *region_list;
static unsigned long long next_buffer_id;

static size_t page_size(void)
{
  static size_t ps;
  if (!ps)
    ps = (size_t)sysconf(_SC_PAGESIZE);
  return ps;
}

unsigned long long sim_next_buffer_id(void) { return ++next_buffer_id; }

struct sim_region *sim_region_first(void) { return region_list; }

struct sim_region *sim_region_new(enum sim_region_kind kind, uintptr_t base, size_t size)
{
  struct sim_region *r = calloc(1, sizeof *r);
  if (!r)
    return NULL;
  r->kind = kind;
  r->base = base;
  r->size = size;
  r->fd = -1;
  r->buffer_id = sim_next_buffer_id();
  r->next = region_list;
  region_list = r;
  return r;
}

struct sim_region *sim_region_mapped(enum sim_region_kind kind, size_t size)
{
  size_t map_size = sim_round_up(size, page_size());
  void *p = mmap(NULL, map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return NULL;
  struct sim_region *reg = sim_region_new(kind, (uintptr_t)p, size);
  if (!reg) {
    munmap(p, map_size);
    return NULL;
  }
  reg->map_size = map_size;
  return reg;
}

void sim_region_unlink(struct sim_region *r)
{
  for (struct sim_region **p = &region_list; *p; p = &(*p)->next)
    if (*p == r) {
      *p = r->next;
      return;
    }
}

struct sim_region *sim_region_find(uintptr_t addr)
{
  for (struct sim_region *r = region_list; r; r = r->next)
    if (addr >= r->base && addr - r->base < r->size)
      return r;
  return NULL;
}

struct sim_region *sim_region_overlap(uintptr_t addr, size_t size, int kind_mask)
{
  for (struct sim_region *r = region_list; r; r = r->next)
    if ((kind_mask & SIM_KIND(r->kind)) && addr < r->base + r->size && r->base < addr + size)
      return r;
  return NULL;
}

CUresult sim_check_device_range(uintptr_t addr, size_t size, int write, int dev)
{
  if (size == 0)
    return CUDA_SUCCESS;
  if (addr + size < addr)
    return CUDA_ERROR_INVALID_VALUE;
  uintptr_t cur = addr, end = addr + size;
  while (cur < end) {
    struct sim_region *r = sim_region_find(cur);
    if (!r)
      return sim_pageable ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; /* HMM/ATS: any host address */
    if (r->kind == SIM_R_VMM) {
      int ok = 0;
      for (int d = 0; d < SIM_MAX_DEVICES; d++)
        if (dev < 0 || d == dev) {
          unsigned a = r->access[d];
          if (write ? a == CU_MEM_ACCESS_FLAGS_PROT_READWRITE : a != CU_MEM_ACCESS_FLAGS_PROT_NONE)
            ok = 1;
        }
      if (!ok)
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    if (r->kind == SIM_R_REGISTERED && write && (r->flags & CU_MEMHOSTREGISTER_READ_ONLY))
      return CUDA_ERROR_ILLEGAL_ADDRESS;
    cur = r->base + r->size;
  }
  return CUDA_SUCCESS;
}

int sim_memfd(const char *name, size_t size)
{
  int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0)
    return -1;
  if (ftruncate(fd, (off_t)size) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* ---- device allocations ---- */

static CUresult device_alloc(struct sim_ctx *c, CUdeviceptr *dptr, size_t size, int async)
{
  struct sim_device *d = &sim_devices[c->dev];
  size_t acc = sim_round_up(size, SIM_ALLOC_ROUND);
  if (acc < size || acc > d->capacity - d->used)
    return CUDA_ERROR_OUT_OF_MEMORY;
  size_t map_size = sim_round_up(size, page_size());
  int fd = sim_memfd("simcuda-alloc", map_size);
  if (fd < 0)
    return CUDA_ERROR_OUT_OF_MEMORY;
  void *p = mmap(NULL, map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  struct stat st;
  if (p == MAP_FAILED || fstat(fd, &st) != 0) {
    if (p != MAP_FAILED)
      munmap(p, map_size);
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  struct sim_region *r = sim_region_new(SIM_R_DEVICE, (uintptr_t)p, size);
  if (!r) {
    munmap(p, map_size);
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  r->map_size = map_size;
  r->accounted = acc;
  r->dev = c->dev;
  r->ctx = c;
  r->ctx_id = c->id;
  r->fd = fd;
  r->ino = st.st_ino;
  r->async = async;
  d->used += acc;
  *dptr = (CUdeviceptr)(uintptr_t)p;
  return CUDA_SUCCESS;
}

void sim_device_free(struct sim_region *r)
{
  sim_region_unlink(r);
  sim_devices[r->dev].used -= r->accounted;
  munmap((void *)r->base, r->map_size);
  if (r->fd >= 0)
    close(r->fd);
  free(r);
}

static CUresult mem_get_info(size_t *free_bytes, size_t *total)
{
  if (!free_bytes || !total)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r;
  struct sim_ctx *c = sim_ctx_current(&r);
  if (!c)
    return r;
  struct sim_device *d = &sim_devices[c->dev];
  *total = d->capacity;
  *free_bytes = d->capacity - d->used;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemGetInfo(size_t *free, size_t *total)
{
  SIM_BEGIN(cuMemGetInfo);
  return SIM_END(mem_get_info(free, total));
}

static CUresult mem_alloc(CUdeviceptr *dptr, size_t size)
{
  if (!dptr)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r;
  struct sim_ctx *c = sim_ctx_current(&r);
  if (!c)
    return r;
  if (size == 0)
    return CUDA_ERROR_INVALID_VALUE;
  return device_alloc(c, dptr, size, 0);
}

SIM_API CUresult cuMemAlloc(CUdeviceptr *dptr, size_t bytesize)
{
  SIM_BEGIN(cuMemAlloc);
  return SIM_END(mem_alloc(dptr, bytesize));
}

/* The real cuMemFree waits for the device before freeing, so work queued on
 * the allocation's device runs first. */
static CUresult mem_free(CUdeviceptr dptr)
{
  CUresult r;
  struct sim_ctx *c = sim_ctx_current(&r);
  if (!c)
    return r;
  struct sim_region *reg = sim_region_find((uintptr_t)dptr);
  if (!reg || (reg->kind != SIM_R_DEVICE && reg->kind != SIM_R_MANAGED) || reg->base != (uintptr_t)dptr ||
      reg->free_pending)
    return CUDA_ERROR_INVALID_VALUE;
  unsigned long long id = reg->buffer_id;
  sim_device_run(reg->dev);
  reg = sim_region_find((uintptr_t)dptr);
  if (!reg || reg->buffer_id != id)
    return CUDA_ERROR_INVALID_VALUE;
  sim_device_free(reg);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemFree(CUdeviceptr dptr)
{
  SIM_BEGIN(cuMemFree);
  return SIM_END(mem_free(dptr));
}

static CUresult mem_alloc_async(CUdeviceptr *dptr, size_t size, CUstream h)
{
  if (!dptr)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r;
  struct sim_stream *s = sim_stream_resolve(h, &r);
  if (!s)
    return r;
  if (size == 0)
    return CUDA_ERROR_INVALID_VALUE;
  return device_alloc(s->ctx, dptr, size, 1);
}

SIM_API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
  SIM_BEGIN(cuMemAllocAsync);
  return SIM_END(mem_alloc_async(dptr, bytesize, hStream));
}

static CUresult mem_free_async(CUdeviceptr dptr, CUstream h)
{
  CUresult r;
  struct sim_stream *s = sim_stream_resolve(h, &r);
  if (!s)
    return r;
  struct sim_region *reg = sim_region_find((uintptr_t)dptr);
  if (!reg || reg->kind != SIM_R_DEVICE || reg->base != (uintptr_t)dptr || reg->free_pending)
    return CUDA_ERROR_INVALID_VALUE;
  struct sim_work *w = calloc(1, sizeof *w);
  if (!w)
    return CUDA_ERROR_OUT_OF_MEMORY;
  w->kind = SIM_W_FREE;
  w->dst = reg->base;
  w->seq = reg->buffer_id;
  reg->free_pending = 1;
  sim_stream_submit(s, w);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
  SIM_BEGIN(cuMemFreeAsync);
  return SIM_END(mem_free_async(dptr, hStream));
}

static CUresult mem_get_address_range(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
  struct sim_region *r = sim_region_find((uintptr_t)dptr);
  if (!r || r->kind == SIM_R_REGISTERED)
    return CUDA_ERROR_NOT_FOUND;
  if (pbase)
    *pbase = (CUdeviceptr)r->base;
  if (psize)
    *psize = r->size;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemGetAddressRange(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
  SIM_BEGIN(cuMemGetAddressRange);
  return SIM_END(mem_get_address_range(pbase, psize, dptr));
}

/* ---- pointer attributes ---- */

static struct sim_ctx *region_ctx(const struct sim_region *r)
{
  struct sim_ctx *c = r->ctx ? sim_ctx_lookup((CUcontext)r->ctx) : NULL;
  return c && c->id == r->ctx_id ? c : NULL;
}

static CUresult pointer_attribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr)
{
  if (!data)
    return CUDA_ERROR_INVALID_VALUE;
  uintptr_t p = (uintptr_t)ptr;
  struct sim_region *r = sim_region_find(p);
  uintptr_t rbase;
  size_t rsize;
  if (!r) {
    /* Reserved but unmapped VMM addresses still answer these two. */
    if (sim_vmm_resv_range(p, &rbase, &rsize)) {
      if (attr == CU_POINTER_ATTRIBUTE_MAPPED) {
        *(int *)data = 0;
        return CUDA_SUCCESS;
      }
      if (attr == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR) {
        *(CUdeviceptr *)data = (CUdeviceptr)rbase;
        return CUDA_SUCCESS;
      }
      if (attr == CU_POINTER_ATTRIBUTE_RANGE_SIZE) {
        *(size_t *)data = rsize;
        return CUDA_SUCCESS;
      }
    }
    return CUDA_ERROR_INVALID_VALUE;
  }
  int is_host = r->kind == SIM_R_HOST || r->kind == SIM_R_REGISTERED;
  CUresult err;
  switch (attr) {
  case CU_POINTER_ATTRIBUTE_CONTEXT:
    *(CUcontext *)data = (CUcontext)region_ctx(r);
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
    *(unsigned *)data = is_host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    if (!sim_ctx_current(&err))
      return err;
    *(CUdeviceptr *)data = ptr;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_HOST_POINTER:
    if (!is_host)
      return CUDA_ERROR_INVALID_VALUE;
    *(void **)data = (void *)p;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_IS_MANAGED:
    *(int *)data = r->kind == SIM_R_MANAGED;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
  case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
  case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
    *(int *)data = 0;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_MAPPED:
    *(int *)data = 1;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_BUFFER_ID:
  case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
    *(unsigned long long *)data = r->buffer_id;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
    *(int *)data = r->dev;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    *(int *)data = r->kind == SIM_R_DEVICE && !r->async;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
  case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    rbase = r->base;
    rsize = r->size;
    if (r->kind == SIM_R_VMM)
      sim_vmm_resv_range(p, &rbase, &rsize);
    if (attr == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR)
      *(CUdeviceptr *)data = (CUdeviceptr)rbase;
    else
      *(size_t *)data = rsize;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
    *(void **)data = (void *)r->base;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
    *(size_t *)data = r->size;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
    *(unsigned long long *)data = r->kind == SIM_R_VMM ? sim_vmm_handle_types(r) : 0;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: {
    struct sim_ctx *c = sim_ctx_current(&err);
    if (!c)
      return err;
    unsigned a = CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
    if (r->kind == SIM_R_VMM)
      a = r->access[c->dev];
    else if (r->kind == SIM_R_REGISTERED && (r->flags & CU_MEMHOSTREGISTER_READ_ONLY))
      a = CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READ;
    *(int *)data = (int)a;
    return CUDA_SUCCESS;
  }
  case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
    *(CUmemoryPool *)data = NULL;
    return CUDA_SUCCESS;
  default:
    return CUDA_ERROR_INVALID_VALUE;
  }
}

SIM_API CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
  SIM_BEGIN(cuPointerGetAttribute);
  return SIM_END(pointer_attribute(data, attribute, ptr));
}

/* ---- copies and fills ---- */

/* Which sides of a copy are device memory to be checked. */
enum { SIDE_HOST, SIDE_DEVICE, SIDE_UNIFIED };

static int side_is_device(int side, uintptr_t p)
{
  if (side == SIDE_UNIFIED)
    return sim_region_find(p) != NULL;
  return side == SIDE_DEVICE;
}

/* Checks and queues (or, for the synchronous calls, runs) one copy.  A
 * synchronous call first waits for the blocking streams of the context, as a
 * copy on the legacy default stream does. */
static CUresult copy(uintptr_t dst, int dst_side, uintptr_t src, int src_side, size_t n, CUstream h, int async)
{
  CUresult r;
  struct sim_stream *s = sim_stream_resolve(h, &r);
  if (!s)
    return r;
  if (n == 0)
    return CUDA_SUCCESS;
  if (!dst || !src)
    return CUDA_ERROR_INVALID_VALUE;
  int dst_dev = side_is_device(dst_side, dst), src_dev = side_is_device(src_side, src);
  if (dst_dev && (r = sim_check_device_range(dst, n, 1, s->ctx->dev)) != CUDA_SUCCESS)
    return r;
  if (src_dev && (r = sim_check_device_range(src, n, 0, s->ctx->dev)) != CUDA_SUCCESS)
    return r;
  struct sim_work *w = calloc(1, sizeof *w);
  if (!w)
    return CUDA_ERROR_OUT_OF_MEMORY;
  w->kind = SIM_W_MEMCPY;
  w->dst = dst;
  w->src = src;
  w->count = n;
  w->dst_dev = dst_dev ? s->ctx->dev : -2;
  w->src_dev = src_dev ? s->ctx->dev : -2;
  if (async) {
    sim_stream_submit(s, w);
    return CUDA_SUCCESS;
  }
  sim_ctx_run(s->ctx, 1);
  sim_stream_submit(s, w);
  return sim_stream_drain(s);
}

static CUresult fill(CUdeviceptr dst, unsigned value, int elem, size_t count, CUstream h, int async)
{
  CUresult r;
  struct sim_stream *s = sim_stream_resolve(h, &r);
  if (!s)
    return r;
  if ((uintptr_t)dst % (size_t)elem != 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (count == 0)
    return CUDA_SUCCESS;
  if (count > SIZE_MAX / (size_t)elem)
    return CUDA_ERROR_INVALID_VALUE;
  if ((r = sim_check_device_range((uintptr_t)dst, count * (size_t)elem, 1, s->ctx->dev)) != CUDA_SUCCESS)
    return r;
  struct sim_work *w = calloc(1, sizeof *w);
  if (!w)
    return CUDA_ERROR_OUT_OF_MEMORY;
  w->kind = SIM_W_MEMSET;
  w->dst = (uintptr_t)dst;
  w->value = value;
  w->elem = elem;
  w->count = count;
  if (async) {
    sim_stream_submit(s, w);
    return CUDA_SUCCESS;
  }
  sim_ctx_run(s->ctx, 1);
  sim_stream_submit(s, w);
  return sim_stream_drain(s);
}

#define U(p) ((uintptr_t)(p))

SIM_API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
  SIM_BEGIN(cuMemcpy);
  return SIM_END(copy(U(dst), SIDE_UNIFIED, U(src), SIDE_UNIFIED, ByteCount, NULL, 0));
}

SIM_API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
  SIM_BEGIN(cuMemcpyAsync);
  return SIM_END(copy(U(dst), SIDE_UNIFIED, U(src), SIDE_UNIFIED, ByteCount, hStream, 1));
}

SIM_API CUresult cuMemcpyHtoD(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
  SIM_BEGIN(cuMemcpyHtoD);
  return SIM_END(copy(U(dstDevice), SIDE_DEVICE, U(srcHost), SIDE_HOST, ByteCount, NULL, 0));
}

SIM_API CUresult cuMemcpyDtoH(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
  SIM_BEGIN(cuMemcpyDtoH);
  return SIM_END(copy(U(dstHost), SIDE_HOST, U(srcDevice), SIDE_DEVICE, ByteCount, NULL, 0));
}

SIM_API CUresult cuMemcpyDtoD(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
  SIM_BEGIN(cuMemcpyDtoD);
  return SIM_END(copy(U(dstDevice), SIDE_DEVICE, U(srcDevice), SIDE_DEVICE, ByteCount, NULL, 0));
}

SIM_API CUresult cuMemcpyHtoDAsync(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream)
{
  SIM_BEGIN(cuMemcpyHtoDAsync);
  return SIM_END(copy(U(dstDevice), SIDE_DEVICE, U(srcHost), SIDE_HOST, ByteCount, hStream, 1));
}

SIM_API CUresult cuMemcpyDtoHAsync(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
  SIM_BEGIN(cuMemcpyDtoHAsync);
  return SIM_END(copy(U(dstHost), SIDE_HOST, U(srcDevice), SIDE_DEVICE, ByteCount, hStream, 1));
}

SIM_API CUresult cuMemcpyDtoDAsync(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
  SIM_BEGIN(cuMemcpyDtoDAsync);
  return SIM_END(copy(U(dstDevice), SIDE_DEVICE, U(srcDevice), SIDE_DEVICE, ByteCount, hStream, 1));
}

SIM_API CUresult cuMemsetD8(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
  SIM_BEGIN(cuMemsetD8);
  return SIM_END(fill(dstDevice, uc, 1, N, NULL, 0));
}

SIM_API CUresult cuMemsetD16(CUdeviceptr dstDevice, unsigned short us, size_t N)
{
  SIM_BEGIN(cuMemsetD16);
  return SIM_END(fill(dstDevice, us, 2, N, NULL, 0));
}

SIM_API CUresult cuMemsetD32(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
  SIM_BEGIN(cuMemsetD32);
  return SIM_END(fill(dstDevice, ui, 4, N, NULL, 0));
}

SIM_API CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
  SIM_BEGIN(cuMemsetD8Async);
  return SIM_END(fill(dstDevice, uc, 1, N, hStream, 1));
}

SIM_API CUresult cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream)
{
  SIM_BEGIN(cuMemsetD16Async);
  return SIM_END(fill(dstDevice, us, 2, N, hStream, 1));
}

SIM_API CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
{
  SIM_BEGIN(cuMemsetD32Async);
  return SIM_END(fill(dstDevice, ui, 4, N, hStream, 1));
}

/* ---- pinned host memory ---- */

static CUresult host_alloc(void **pp, size_t size, unsigned flags)
{
  if (!pp)
    return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED))
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r;
  struct sim_ctx *c = sim_ctx_current(&r);
  if (!c)
    return r;
  if (size == 0)
    return CUDA_ERROR_INVALID_VALUE;
  struct sim_region *reg = sim_region_mapped(SIM_R_HOST, size);
  if (!reg)
    return CUDA_ERROR_OUT_OF_MEMORY;
  void *p = (void *)reg->base;
  reg->flags = flags;
  reg->dev = c->dev;
  reg->ctx = c;
  reg->ctx_id = c->id;
  *pp = p;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
  SIM_BEGIN(cuMemHostAlloc);
  return SIM_END(host_alloc(pp, bytesize, Flags));
}

SIM_API CUresult cuMemAllocHost(void **pp, size_t bytesize)
{
  SIM_BEGIN(cuMemAllocHost);
  return SIM_END(host_alloc(pp, bytesize, 0));
}

static CUresult host_free(void *p)
{
  struct sim_region *r = sim_region_find((uintptr_t)p);
  if (!p || !r || r->kind != SIM_R_HOST || r->base != (uintptr_t)p)
    return CUDA_ERROR_INVALID_VALUE;
  /* Queued copies may still read or write it, as on a GPU. */
  sim_device_run(r->dev);
  r = sim_region_find((uintptr_t)p);
  if (!r || r->kind != SIM_R_HOST)
    return CUDA_ERROR_INVALID_VALUE;
  sim_region_unlink(r);
  munmap((void *)r->base, r->map_size);
  free(r);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemFreeHost(void *p)
{
  SIM_BEGIN(cuMemFreeHost);
  return SIM_END(host_free(p));
}

/* With unified addressing every pinned or registered host range is mapped at
 * its own address, so no DEVICEMAP flag is needed, as with the real driver. */
static CUresult host_device_pointer(CUdeviceptr *pdptr, void *p, unsigned flags)
{
  if (!pdptr || flags != 0)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r;
  if (!sim_ctx_current(&r))
    return r;
  struct sim_region *reg = sim_region_find((uintptr_t)p);
  if (!reg || (reg->kind != SIM_R_HOST && reg->kind != SIM_R_REGISTERED))
    return CUDA_ERROR_INVALID_VALUE;
  *pdptr = (CUdeviceptr)(uintptr_t)p;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemHostGetDevicePointer(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
  SIM_BEGIN(cuMemHostGetDevicePointer);
  return SIM_END(host_device_pointer(pdptr, p, Flags));
}

static CUresult host_get_flags(unsigned *flags, void *p)
{
  if (!flags)
    return CUDA_ERROR_INVALID_VALUE;
  struct sim_region *r = sim_region_find((uintptr_t)p);
  if (!r || r->kind != SIM_R_HOST)
    return CUDA_ERROR_INVALID_VALUE;
  *flags = r->flags;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemHostGetFlags(unsigned int *pFlags, void *p)
{
  SIM_BEGIN(cuMemHostGetFlags);
  return SIM_END(host_get_flags(pFlags, p));
}

/* Whether [a, a + size) is mapped host memory: mincore reports holes as
 * ENOMEM.  (msync would too, but memory checkers take its range for bytes
 * read, and the buffer being pinned may well be uninitialised.) */
static int host_mapped(uintptr_t a, size_t size)
{
  size_t page = page_size();
  uintptr_t at = a & ~(uintptr_t)(page - 1), end = a + size;
  unsigned char vec[256];
  while (at < end) {
    size_t len = end - at < sizeof vec * page ? end - at : sizeof vec * page;
    if (mincore((void *)at, len, vec) != 0 && errno == ENOMEM)
      return 0;
    at += sim_round_up(len, page);
  }
  return 1;
}

static CUresult host_register(void *p, size_t size, unsigned flags)
{
  unsigned known = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_IOMEMORY |
                   CU_MEMHOSTREGISTER_READ_ONLY;
  if (!p || size == 0 || (flags & ~known))
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r;
  struct sim_ctx *c = sim_ctx_current(&r);
  if (!c)
    return r;
  uintptr_t a = (uintptr_t)p;
  if (a + size < a)
    return CUDA_ERROR_INVALID_VALUE;
  if (sim_region_overlap(a, size, SIM_KIND(SIM_R_HOST) | SIM_KIND(SIM_R_REGISTERED)))
    return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  if (sim_region_overlap(a, size, SIM_KIND(SIM_R_DEVICE) | SIM_KIND(SIM_R_VMM) | SIM_KIND(SIM_R_IPC)))
    return CUDA_ERROR_INVALID_VALUE;
  if (!host_mapped(a, size))
    return CUDA_ERROR_INVALID_VALUE;
  struct sim_region *reg = sim_region_new(SIM_R_REGISTERED, a, size);
  if (!reg)
    return CUDA_ERROR_OUT_OF_MEMORY;
  reg->flags = flags;
  reg->dev = c->dev;
  reg->ctx = c;
  reg->ctx_id = c->id;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags)
{
  SIM_BEGIN(cuMemHostRegister);
  return SIM_END(host_register(p, bytesize, Flags));
}

static CUresult host_unregister(void *p)
{
  struct sim_region *r = sim_region_find((uintptr_t)p);
  if (!p || !r || r->kind != SIM_R_REGISTERED || r->base != (uintptr_t)p)
    return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  sim_device_run(r->dev);
  r = sim_region_find((uintptr_t)p);
  if (!r || r->kind != SIM_R_REGISTERED)
    return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  sim_region_unlink(r);
  free(r);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemHostUnregister(void *p)
{
  SIM_BEGIN(cuMemHostUnregister);
  return SIM_END(host_unregister(p));
}
