/* sim-ctx.c: devices and contexts.
 *
 * It owns the device table (capacity and bytes in use per device, which
 * sim-mem.c and sim-vmm.c update), the device queries, the registry of live
 * contexts, each thread's context stack, and the primary contexts.
 *
 * A context handle is the address of its struct.  Destroyed contexts are
 * freed, so a later context may get the same address, exactly the situation
 * cuCtxGetId exists for; handles are therefore only ever looked up in the
 * registry, never dereferenced on trust, and a thread's stack remembers the
 * id next to each handle so a stale entry is recognised even when its address
 * was reused.  Freed context structs are kept for reuse, last freed first,
 * so that the next cuCtxCreate does get the destroyed context's address and a
 * program that trusts a stale handle is caught.  Primary contexts live as long as the process (their handle is
 * stable across release and retain, as with the real driver) but get a new id
 * each time they become active.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim-internal.h"

struct sim_device sim_devices[SIM_MAX_DEVICES];
static struct sim_ctx *ctx_list;
static struct sim_ctx *ctx_free_list;   /* destroyed, kept for reuse */
static unsigned long long ctx_next_id;

#define STACK_MAX 64
static __thread struct { struct sim_ctx *ctx; unsigned long long id; } tls_stack[STACK_MAX];
static __thread int tls_depth;

int sim_valid_device(CUdevice dev) { return dev >= 0 && dev < sim_device_count; }

static int ctx_active(const struct sim_ctx *c) { return !c->primary || c->primary_refs > 0; }

static struct sim_ctx *ctx_find(CUcontext h)
{
  for (struct sim_ctx *c = ctx_list; c; c = c->next)
    if ((CUcontext)c == h)
      return c;
  return NULL;
}

struct sim_ctx *sim_ctx_lookup(CUcontext h)
{
  struct sim_ctx *c = h ? ctx_find(h) : NULL;
  return c && ctx_active(c) ? c : NULL;
}

struct sim_ctx *sim_ctx_current(CUresult *err)
{
  if (tls_depth == 0 || !tls_stack[tls_depth - 1].ctx) {
    *err = CUDA_ERROR_INVALID_CONTEXT;
    return NULL;
  }
  struct sim_ctx *c = ctx_find((CUcontext)tls_stack[tls_depth - 1].ctx);
  if (!c || !ctx_active(c) || (!c->primary && c->id != tls_stack[tls_depth - 1].id)) {
    *err = CUDA_ERROR_CONTEXT_IS_DESTROYED;
    return NULL;
  }
  *err = CUDA_SUCCESS;
  return c;
}

void sim_ctx_each(void (*fn)(struct sim_ctx *, void *), void *arg)
{
  for (struct sim_ctx *c = ctx_list, *next; c; c = next) {
    next = c->next;
    if (ctx_active(c))
      fn(c, arg);
  }
}

size_t sim_ctx_live_user(void)
{
  size_t n = 0;
  for (struct sim_ctx *c = ctx_list; c; c = c->next)
    n += !c->primary;
  return n;
}

void sim_ctx_report(FILE *f)
{
  for (struct sim_ctx *c = ctx_list; c; c = c->next)
    if (!c->primary)
      fprintf(f, "simcuda:   context %p id %llu device %d\n", (void *)c, c->id, c->dev);
}

static void activate(struct sim_ctx *c)
{
  c->id = ++ctx_next_id;
  c->peer_mask = 0;
  c->null_stream = sim_stream_new(c, 0, 1);
}

/* Ends a context's life as far as its streams and events go.  Device memory
 * it allocated stays allocated (and listed by the live report), so a test can
 * still see what a program leaked before destroying its context. */
static void deactivate(struct sim_ctx *c)
{
  sim_ctx_run(c, 0);
  sim_ctx_release_objects(c);
  c->null_stream = NULL;
}

/* ---- devices ---- */

static CUresult device_get(CUdevice *d, int ordinal)
{
  if (!d)
    return CUDA_ERROR_INVALID_VALUE;
  if (!sim_valid_device(ordinal))
    return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
  SIM_BEGIN(cuDeviceGet);
  return SIM_END(device_get(device, ordinal));
}

static CUresult device_count(int *n)
{
  if (!n)
    return CUDA_ERROR_INVALID_VALUE;
  *n = sim_device_count;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetCount(int *count)
{
  SIM_BEGIN(cuDeviceGetCount);
  return SIM_END(device_count(count));
}

static CUresult device_name(char *name, int len, CUdevice dev)
{
  if (!name || len <= 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (!sim_valid_device(dev))
    return CUDA_ERROR_INVALID_DEVICE;
  snprintf(name, (size_t)len, "simcuda simulated GPU %d", dev);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
  SIM_BEGIN(cuDeviceGetName);
  return SIM_END(device_name(name, len, dev));
}

static int attribute_value(CUdevice_attribute a, CUdevice dev)
{
  switch (a) {
  case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
  case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
  case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: return 1755000;
  case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return 132;
  case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: return 1;
  case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return 0x10 + dev;
  case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: return 0;
  case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: return 0;
  case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: return 2619000;
  case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: return 5120;
  case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: return 50 << 20;
  case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: return 2;
  case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return 9;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return 0;
  case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM: return 1;
  case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED: return 1;
  case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: return 1;
  case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: return 1;
  case CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED: return 1;
  case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: return 1;
  case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES: return CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: return 1;
  case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: return 1;
  case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS: return sim_pageable >= 1;
  case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES: return sim_pageable >= 2;
  default: return 0;
  }
}

static CUresult device_attribute(int *pi, CUdevice_attribute a, CUdevice dev)
{
  if (!pi)
    return CUDA_ERROR_INVALID_VALUE;
  if (!sim_valid_device(dev))
    return CUDA_ERROR_INVALID_DEVICE;
  if ((int)a <= 0 || a >= CU_DEVICE_ATTRIBUTE_MAX)
    return CUDA_ERROR_INVALID_VALUE;
  *pi = attribute_value(a, dev);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
  SIM_BEGIN(cuDeviceGetAttribute);
  return SIM_END(device_attribute(pi, attrib, dev));
}

static CUresult device_total_mem(size_t *bytes, CUdevice dev)
{
  if (!bytes)
    return CUDA_ERROR_INVALID_VALUE;
  if (!sim_valid_device(dev))
    return CUDA_ERROR_INVALID_DEVICE;
  *bytes = sim_devices[dev].capacity;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceTotalMem(size_t *bytes, CUdevice dev)
{
  SIM_BEGIN(cuDeviceTotalMem);
  return SIM_END(device_total_mem(bytes, dev));
}

/* Derived from the ordinal alone, so every process sees the same UUID for the
 * same device, which is what lets processes match devices up. */
static CUresult device_uuid(CUuuid *uuid, CUdevice dev)
{
  if (!uuid)
    return CUDA_ERROR_INVALID_VALUE;
  if (!sim_valid_device(dev))
    return CUDA_ERROR_INVALID_DEVICE;
  static const unsigned char prefix[12] = {'s', 'i', 'm', 'c', 'u', 'd', 'a', 0x5a, 0x13, 0x00, 0xc0, 0xde};
  memcpy(uuid->bytes, prefix, sizeof prefix);
  uuid->bytes[12] = 0;
  uuid->bytes[13] = 0;
  uuid->bytes[14] = 0;
  uuid->bytes[15] = (char)(0x10 + dev);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
  SIM_BEGIN(cuDeviceGetUuid);
  return SIM_END(device_uuid(uuid, dev));
}

static CUresult device_pci_bus_id(char *s, int len, CUdevice dev)
{
  if (!s || len <= 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (!sim_valid_device(dev))
    return CUDA_ERROR_INVALID_DEVICE;
  snprintf(s, (size_t)len, "0000:%02x:00.0", 0x10 + dev);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
  SIM_BEGIN(cuDeviceGetPCIBusId);
  return SIM_END(device_pci_bus_id(pciBusId, len, dev));
}

static CUresult device_by_pci_bus_id(CUdevice *dev, const char *s)
{
  if (!dev || !s)
    return CUDA_ERROR_INVALID_VALUE;
  unsigned domain = 0, bus = 0, device = 0, fn = 0;
  if (sscanf(s, "%x:%x:%x.%x", &domain, &bus, &device, &fn) != 4) {
    domain = 0;
    if (sscanf(s, "%x:%x.%x", &bus, &device, &fn) != 3)
      return CUDA_ERROR_INVALID_VALUE;
  }
  int ord = (int)bus - 0x10;
  if (domain != 0 || device != 0 || !sim_valid_device(ord))
    return CUDA_ERROR_INVALID_DEVICE;
  *dev = ord;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId)
{
  SIM_BEGIN(cuDeviceGetByPCIBusId);
  return SIM_END(device_by_pci_bus_id(dev, pciBusId));
}

static CUresult can_access_peer(int *can, CUdevice dev, CUdevice peer)
{
  if (!can)
    return CUDA_ERROR_INVALID_VALUE;
  if (!sim_valid_device(dev) || !sim_valid_device(peer))
    return CUDA_ERROR_INVALID_DEVICE;
  *can = dev != peer;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)
{
  SIM_BEGIN(cuDeviceCanAccessPeer);
  return SIM_END(can_access_peer(canAccessPeer, dev, peerDev));
}

/* ---- the thread's context stack ---- */

static CUresult stack_push(struct sim_ctx *c)
{
  if (tls_depth == STACK_MAX)
    return CUDA_ERROR_OUT_OF_MEMORY;
  tls_stack[tls_depth].ctx = c;
  tls_stack[tls_depth].id = c ? c->id : 0;
  tls_depth++;
  return CUDA_SUCCESS;
}

/* Drops every entry naming c from the calling thread's stack. */
static void stack_forget(struct sim_ctx *c)
{
  int j = 0;
  for (int i = 0; i < tls_depth; i++)
    if (tls_stack[i].ctx != c || (!c->primary && tls_stack[i].id != c->id))
      tls_stack[j++] = tls_stack[i];
  tls_depth = j;
}

/* ---- contexts ---- */

static CUresult ctx_create(CUcontext *pctx, const CUctxCreateParams *params, unsigned flags, CUdevice dev)
{
  if (!pctx)
    return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~(unsigned)CU_CTX_FLAGS_MASK)
    return CUDA_ERROR_INVALID_VALUE;
  if (params && (params->numExecAffinityParams > 0 || params->cigParams))
    return CUDA_ERROR_NOT_SUPPORTED;
  if (!sim_valid_device(dev))
    return CUDA_ERROR_INVALID_DEVICE;
  if (tls_depth == STACK_MAX)
    return CUDA_ERROR_OUT_OF_MEMORY;
  struct sim_ctx *c = ctx_free_list;
  if (c) {
    ctx_free_list = c->next;
    memset(c, 0, sizeof *c);
  } else if (!(c = calloc(1, sizeof *c))) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  c->dev = dev;
  c->flags = flags;
  activate(c);
  c->next = ctx_list;
  ctx_list = c;
  stack_push(c);
  *pctx = (CUcontext)c;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxCreate(CUcontext *pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags, CUdevice dev)
{
  SIM_BEGIN(cuCtxCreate);
  return SIM_END(ctx_create(pctx, ctxCreateParams, flags, dev));
}

SIM_API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
  SIM_BEGIN(cuCtxCreate);
  return SIM_END(ctx_create(pctx, NULL, flags, dev));
}

static CUresult ctx_destroy(CUcontext h)
{
  struct sim_ctx *c = h ? ctx_find(h) : NULL;
  if (!c || c->primary)
    return CUDA_ERROR_INVALID_CONTEXT;
  deactivate(c);
  stack_forget(c);
  for (struct sim_ctx **p = &ctx_list; *p; p = &(*p)->next)
    if (*p == c) {
      *p = c->next;
      break;
    }
  c->next = ctx_free_list;
  ctx_free_list = c;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxDestroy(CUcontext ctx)
{
  SIM_BEGIN(cuCtxDestroy);
  return SIM_END(ctx_destroy(ctx));
}

static CUresult ctx_get_current(CUcontext *pctx)
{
  if (!pctx)
    return CUDA_ERROR_INVALID_VALUE;
  *pctx = tls_depth ? (CUcontext)tls_stack[tls_depth - 1].ctx : NULL;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetCurrent(CUcontext *pctx)
{
  SIM_BEGIN(cuCtxGetCurrent);
  return SIM_END(ctx_get_current(pctx));
}

static CUresult ctx_set_current(CUcontext h)
{
  struct sim_ctx *c = NULL;
  if (h) {
    c = ctx_find(h);
    if (!c)
      return CUDA_ERROR_INVALID_CONTEXT;
    if (!ctx_active(c))
      return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  }
  if (!c) {
    if (tls_depth)
      tls_depth--;
    return CUDA_SUCCESS;
  }
  if (tls_depth == 0)
    return stack_push(c);
  tls_stack[tls_depth - 1].ctx = c;
  tls_stack[tls_depth - 1].id = c->id;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxSetCurrent(CUcontext ctx)
{
  SIM_BEGIN(cuCtxSetCurrent);
  return SIM_END(ctx_set_current(ctx));
}

static CUresult ctx_push(CUcontext h)
{
  struct sim_ctx *c = sim_ctx_lookup(h);
  if (!c)
    return CUDA_ERROR_INVALID_CONTEXT;
  return stack_push(c);
}

SIM_API CUresult cuCtxPushCurrent(CUcontext ctx)
{
  SIM_BEGIN(cuCtxPushCurrent);
  return SIM_END(ctx_push(ctx));
}

static CUresult ctx_pop(CUcontext *pctx)
{
  if (tls_depth == 0)
    return CUDA_ERROR_INVALID_CONTEXT;
  tls_depth--;
  if (pctx)
    *pctx = (CUcontext)tls_stack[tls_depth].ctx;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxPopCurrent(CUcontext *pctx)
{
  SIM_BEGIN(cuCtxPopCurrent);
  return SIM_END(ctx_pop(pctx));
}

static CUresult ctx_get_device(CUdevice *dev)
{
  if (!dev)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r;
  struct sim_ctx *c = sim_ctx_current(&r);
  if (!c)
    return r;
  *dev = c->dev;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetDevice(CUdevice *device)
{
  SIM_BEGIN(cuCtxGetDevice);
  return SIM_END(ctx_get_device(device));
}

static struct sim_ctx *ctx_or_current(CUcontext h, CUresult *err)
{
  if (!h)
    return sim_ctx_current(err);
  struct sim_ctx *c = sim_ctx_lookup(h);
  *err = c ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
  return c;
}

static CUresult ctx_get_id(CUcontext h, unsigned long long *id)
{
  if (!id)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r;
  struct sim_ctx *c = ctx_or_current(h, &r);
  if (!c)
    return r;
  *id = c->id;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetId(CUcontext ctx, unsigned long long *ctxId)
{
  SIM_BEGIN(cuCtxGetId);
  return SIM_END(ctx_get_id(ctx, ctxId));
}

static CUresult ctx_get_flags(unsigned *flags)
{
  if (!flags)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r;
  struct sim_ctx *c = sim_ctx_current(&r);
  if (!c)
    return r;
  *flags = c->flags;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetFlags(unsigned int *flags)
{
  SIM_BEGIN(cuCtxGetFlags);
  return SIM_END(ctx_get_flags(flags));
}

static CUresult ctx_synchronize(void)
{
  CUresult r;
  struct sim_ctx *c = sim_ctx_current(&r);
  if (!c)
    return r;
  return sim_ctx_drain(c, 0);
}

SIM_API CUresult cuCtxSynchronize(void)
{
  SIM_BEGIN(cuCtxSynchronize);
  return SIM_END(ctx_synchronize());
}

static CUresult peer_access(CUcontext peer_h, unsigned flags, int enable)
{
  if (enable && flags != 0)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r;
  struct sim_ctx *c = sim_ctx_current(&r);
  if (!c)
    return r;
  struct sim_ctx *peer = sim_ctx_lookup(peer_h);
  if (!peer)
    return CUDA_ERROR_INVALID_CONTEXT;
  if (peer->dev == c->dev)
    return CUDA_ERROR_INVALID_DEVICE;
  unsigned bit = 1u << peer->dev;
  if (enable) {
    if (c->peer_mask & bit)
      return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
    c->peer_mask |= bit;
  } else {
    if (!(c->peer_mask & bit))
      return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
    c->peer_mask &= ~bit;
  }
  return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags)
{
  SIM_BEGIN(cuCtxEnablePeerAccess);
  return SIM_END(peer_access(peerContext, Flags, 1));
}

SIM_API CUresult cuCtxDisablePeerAccess(CUcontext peerContext)
{
  SIM_BEGIN(cuCtxDisablePeerAccess);
  return SIM_END(peer_access(peerContext, 0, 0));
}

/* ---- primary contexts ---- */

static struct sim_ctx *primary_of(CUdevice dev)
{
  struct sim_device *d = &sim_devices[dev];
  if (!d->primary) {
    struct sim_ctx *c = calloc(1, sizeof *c);
    if (!c)
      return NULL;
    c->dev = dev;
    c->primary = 1;
    c->next = ctx_list;
    ctx_list = c;
    d->primary = c;
  }
  return d->primary;
}

static CUresult primary_retain(CUcontext *pctx, CUdevice dev)
{
  if (!pctx)
    return CUDA_ERROR_INVALID_VALUE;
  if (!sim_valid_device(dev))
    return CUDA_ERROR_INVALID_DEVICE;
  struct sim_ctx *c = primary_of(dev);
  if (!c)
    return CUDA_ERROR_OUT_OF_MEMORY;
  if (c->primary_refs++ == 0)
    activate(c);
  *pctx = (CUcontext)c;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
  SIM_BEGIN(cuDevicePrimaryCtxRetain);
  return SIM_END(primary_retain(pctx, dev));
}

static CUresult primary_release(CUdevice dev)
{
  if (!sim_valid_device(dev))
    return CUDA_ERROR_INVALID_DEVICE;
  struct sim_ctx *c = sim_devices[dev].primary;
  if (!c || c->primary_refs == 0)
    return CUDA_ERROR_INVALID_CONTEXT;
  if (c->primary_refs == 1)
    deactivate(c);
  c->primary_refs--;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
  SIM_BEGIN(cuDevicePrimaryCtxRelease);
  return SIM_END(primary_release(dev));
}

static CUresult primary_state(CUdevice dev, unsigned *flags, int *active)
{
  if (!flags || !active)
    return CUDA_ERROR_INVALID_VALUE;
  if (!sim_valid_device(dev))
    return CUDA_ERROR_INVALID_DEVICE;
  struct sim_ctx *c = sim_devices[dev].primary;
  *flags = c ? c->flags : 0;
  *active = c && c->primary_refs > 0;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
  SIM_BEGIN(cuDevicePrimaryCtxGetState);
  return SIM_END(primary_state(dev, flags, active));
}

/* Unlike release, reset frees the context's device allocations, as the real
 * one destroys all its resources. */
static CUresult primary_reset(CUdevice dev)
{
  if (!sim_valid_device(dev))
    return CUDA_ERROR_INVALID_DEVICE;
  struct sim_ctx *c = sim_devices[dev].primary;
  if (!c || c->primary_refs == 0)
    return CUDA_SUCCESS;
  deactivate(c);
  for (struct sim_region *r = sim_region_first(), *next; r; r = next) {
    next = r->next;
    if ((r->kind == SIM_R_DEVICE || r->kind == SIM_R_MANAGED) && r->ctx == c && r->ctx_id == c->id)
      sim_device_free(r);
  }
  c->primary_refs = 0;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
  SIM_BEGIN(cuDevicePrimaryCtxReset);
  return SIM_END(primary_reset(dev));
}

static CUresult primary_set_flags(CUdevice dev, unsigned flags)
{
  if (!sim_valid_device(dev))
    return CUDA_ERROR_INVALID_DEVICE;
  if (flags & ~(unsigned)CU_CTX_FLAGS_MASK)
    return CUDA_ERROR_INVALID_VALUE;
  struct sim_ctx *c = primary_of(dev);
  if (!c)
    return CUDA_ERROR_OUT_OF_MEMORY;
  c->flags = flags;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
  SIM_BEGIN(cuDevicePrimaryCtxSetFlags);
  return SIM_END(primary_set_flags(dev, flags));
}
