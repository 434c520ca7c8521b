/* sim-vmm.c: the virtual memory management API (cuMemCreate and friends).
 *
 * It owns physical handles, their backing memory and address reservations;
 * mappings are address regions (sim-mem.c's registry) so that copies, fills
 * and pointer queries see them like any other device memory.
 *
 * A reservation is an mmap of PROT_NONE pages, which keeps the kernel from
 * putting anything else there.  Physical memory is a memfd ("backing");
 * cuMemMap maps it MAP_SHARED|MAP_FIXED over the reservation, still
 * PROT_NONE, and cuMemSetAccess makes it readable or writable, so a program
 * that forgets cuMemSetAccess faults on the host just as its kernels would on
 * a GPU.  Mapping the same handle twice therefore shows the same bytes twice.
 *
 * Lifetimes follow the real driver: a handle lives until it has been released
 * (as often as it was created or retained) and unmapped everywhere; a backing
 * lives while any handle refers to it, so a handle imported in the same
 * process shares the exporter's backing and capacity is counted once.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sim-internal.h"

struct sim_backing {
  int refs;
  int fd;
  ino_t ino;
  size_t size;
  int dev;
  int counted;                    /* created here: counts against capacity */
};

struct sim_phys {
  struct sim_phys *next;
  struct sim_backing *b;
  int refs;                       /* create/import/retain minus release */
  int maps;                       /* live mappings */
  unsigned long long id;
  CUmemAllocationProp prop;
};

struct sim_resv {
  struct sim_resv *next;
  uintptr_t base;
  size_t size;
};

static struct sim_phys *phys_list;
static struct sim_resv *resv_list;

static struct sim_phys *phys_find(CUmemGenericAllocationHandle h)
{
  for (struct sim_phys *p = phys_list; p; p = p->next)
    if ((CUmemGenericAllocationHandle)(uintptr_t)p == h)
      return p;
  return NULL;
}

/* A handle the caller may still use: not yet released. */
static struct sim_phys *phys_lookup(CUmemGenericAllocationHandle h)
{
  struct sim_phys *p = phys_find(h);
  return p && p->refs > 0 ? p : NULL;
}

static void backing_put(struct sim_backing *b)
{
  if (--b->refs > 0)
    return;
  if (b->counted)
    sim_devices[b->dev].used -= b->size;
  close(b->fd);
  free(b);
}

static void phys_maybe_free(struct sim_phys *p)
{
  if (p->refs > 0 || p->maps > 0)
    return;
  for (struct sim_phys **pp = &phys_list; *pp; pp = &(*pp)->next)
    if (*pp == p) {
      *pp = p->next;
      break;
    }
  backing_put(p->b);
  free(p);
}

static struct sim_phys *phys_new(struct sim_backing *b, const CUmemAllocationProp *prop)
{
  static unsigned long long next_id;
  struct sim_phys *p = calloc(1, sizeof *p);
  if (!p)
    return NULL;
  p->b = b;
  b->refs++;
  p->refs = 1;
  p->id = ++next_id;
  p->prop = *prop;
  p->next = phys_list;
  phys_list = p;
  return p;
}

void sim_vmm_live(simcuda_live *l)
{
  for (struct sim_phys *p = phys_list; p; p = p->next) {
    l->vmm_handles++;
    l->vmm_handle_bytes += p->b->size;
  }
  for (struct sim_resv *r = resv_list; r; r = r->next)
    l->vmm_reservations++;
}

void sim_vmm_report(FILE *f)
{
  for (struct sim_phys *p = phys_list; p; p = p->next)
    fprintf(f, "simcuda:   VMM handle %p size %zu device %d, %d reference%s, %d mapping%s\n", (void *)p,
            p->b->size, p->b->dev, p->refs, p->refs == 1 ? "" : "s", p->maps, p->maps == 1 ? "" : "s");
  for (struct sim_resv *r = resv_list; r; r = r->next)
    fprintf(f, "simcuda:   VMM reservation 0x%llx size %zu\n", (unsigned long long)r->base, r->size);
}

static struct sim_resv *resv_containing(uintptr_t addr, size_t size)
{
  for (struct sim_resv *r = resv_list; r; r = r->next)
    if (addr >= r->base && addr - r->base < r->size && size <= r->size - (addr - r->base))
      return r;
  return NULL;
}

int sim_vmm_resv_range(uintptr_t addr, uintptr_t *base, size_t *size)
{
  struct sim_resv *r = resv_containing(addr, 1);
  if (!r)
    return 0;
  *base = r->base;
  *size = r->size;
  return 1;
}

unsigned long long sim_vmm_handle_types(const struct sim_region *r)
{
  return r->phys ? (unsigned long long)r->phys->prop.requestedHandleTypes : 0;
}

static CUresult check_location(const CUmemLocation *loc)
{
  if (loc->type != CU_MEM_LOCATION_TYPE_DEVICE)
    return CUDA_ERROR_INVALID_VALUE;
  if (!sim_valid_device(loc->id))
    return CUDA_ERROR_INVALID_DEVICE;
  return CUDA_SUCCESS;
}

static CUresult check_prop(const CUmemAllocationProp *prop)
{
  if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
    return CUDA_ERROR_INVALID_VALUE;
  return check_location(&prop->location);
}

/* ---- granularity and reservations ---- */

static CUresult granularity(size_t *g, const CUmemAllocationProp *prop, CUmemAllocationGranularity_flags option)
{
  if (!g || !prop)
    return CUDA_ERROR_INVALID_VALUE;
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r = check_prop(prop);
  if (r != CUDA_SUCCESS)
    return r;
  *g = SIM_VMM_GRANULARITY;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemGetAllocationGranularity(size_t *granularity_out, const CUmemAllocationProp *prop,
                                               CUmemAllocationGranularity_flags option)
{
  SIM_BEGIN(cuMemGetAllocationGranularity);
  return SIM_END(granularity(granularity_out, prop, option));
}

static CUresult address_reserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                unsigned long long flags)
{
  if (!ptr || flags != 0 || size == 0 || size % SIM_VMM_GRANULARITY != 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (alignment & (alignment - 1))
    return CUDA_ERROR_INVALID_VALUE;
  size_t align = alignment > SIM_VMM_GRANULARITY ? alignment : SIM_VMM_GRANULARITY;
  const int mflags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  void *p = MAP_FAILED;
  /* The address is only a hint, as with the real driver. */
  if (addr && (uintptr_t)addr % align == 0) {
    p = mmap((void *)(uintptr_t)addr, size, PROT_NONE, mflags | MAP_FIXED_NOREPLACE, -1, 0);
    if (p != MAP_FAILED && p != (void *)(uintptr_t)addr) {
      munmap(p, size);
      p = MAP_FAILED;
    }
  }
  if (p == MAP_FAILED) {
    if (size + align < size)
      return CUDA_ERROR_OUT_OF_MEMORY;
    void *raw = mmap(NULL, size + align, PROT_NONE, mflags, -1, 0);
    if (raw == MAP_FAILED)
      return CUDA_ERROR_OUT_OF_MEMORY;
    uintptr_t start = sim_round_up((uintptr_t)raw, align);
    if (start > (uintptr_t)raw)
      munmap(raw, start - (uintptr_t)raw);
    uintptr_t tail = start + size, raw_end = (uintptr_t)raw + size + align;
    if (raw_end > tail)
      munmap((void *)tail, raw_end - tail);
    p = (void *)start;
  }
  struct sim_resv *r = calloc(1, sizeof *r);
  if (!r) {
    munmap(p, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  r->base = (uintptr_t)p;
  r->size = size;
  r->next = resv_list;
  resv_list = r;
  *ptr = (CUdeviceptr)r->base;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                     unsigned long long flags)
{
  SIM_BEGIN(cuMemAddressReserve);
  return SIM_END(address_reserve(ptr, size, alignment, addr, flags));
}

static CUresult address_free(CUdeviceptr ptr, size_t size)
{
  struct sim_resv **pp = &resv_list;
  while (*pp && !((*pp)->base == (uintptr_t)ptr && (*pp)->size == size))
    pp = &(*pp)->next;
  struct sim_resv *r = *pp;
  if (!r)
    return CUDA_ERROR_INVALID_VALUE;
  if (sim_region_overlap(r->base, r->size, SIM_KIND(SIM_R_VMM)))
    return CUDA_ERROR_INVALID_VALUE;
  *pp = r->next;
  munmap((void *)r->base, r->size);
  free(r);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
  SIM_BEGIN(cuMemAddressFree);
  return SIM_END(address_free(ptr, size));
}

/* ---- physical memory ---- */

static CUresult mem_create(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                           unsigned long long flags)
{
  if (!handle || !prop || flags != 0)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r = check_prop(prop);
  if (r != CUDA_SUCCESS)
    return r;
  if (prop->requestedHandleTypes & ~(unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
    return CUDA_ERROR_NOT_SUPPORTED;
  if (size == 0 || size % SIM_VMM_GRANULARITY != 0)
    return CUDA_ERROR_INVALID_VALUE;
  int dev = prop->location.id;
  struct sim_device *d = &sim_devices[dev];
  if (size > d->capacity - d->used)
    return CUDA_ERROR_OUT_OF_MEMORY;
  char name[32];
  snprintf(name, sizeof name, "simcuda-vmm-d%d", dev);
  struct sim_backing *b = calloc(1, sizeof *b);
  struct stat st;
  int fd = b ? sim_memfd(name, size) : -1;
  if (fd < 0 || fstat(fd, &st) != 0) {
    if (fd >= 0)
      close(fd);
    free(b);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  b->fd = fd;
  b->ino = st.st_ino;
  b->size = size;
  b->dev = dev;
  b->counted = 1;
  d->used += size;
  struct sim_phys *p = phys_new(b, prop);
  if (!p) {
    b->refs = 1;
    backing_put(b);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *handle = (CUmemGenericAllocationHandle)(uintptr_t)p;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                             unsigned long long flags)
{
  SIM_BEGIN(cuMemCreate);
  return SIM_END(mem_create(handle, size, prop, flags));
}

static CUresult mem_release(CUmemGenericAllocationHandle h)
{
  struct sim_phys *p = phys_lookup(h);
  if (!p)
    return CUDA_ERROR_INVALID_VALUE;
  p->refs--;
  phys_maybe_free(p);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
  SIM_BEGIN(cuMemRelease);
  return SIM_END(mem_release(handle));
}

/* ---- mappings ---- */

static CUresult mem_map(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                        unsigned long long flags)
{
  uintptr_t a = (uintptr_t)ptr;
  if (flags != 0 || offset != 0)
    return CUDA_ERROR_INVALID_VALUE;
  struct sim_phys *p = phys_lookup(h);
  if (!p)
    return CUDA_ERROR_INVALID_VALUE;
  if (size == 0 || size % SIM_VMM_GRANULARITY != 0 || a % SIM_VMM_GRANULARITY != 0 || size > p->b->size)
    return CUDA_ERROR_INVALID_VALUE;
  struct sim_resv *resv = resv_containing(a, size);
  if (!resv)
    return CUDA_ERROR_INVALID_VALUE;
  if (sim_region_overlap(a, size, SIM_KIND(SIM_R_VMM)))
    return CUDA_ERROR_INVALID_VALUE;
  void *m = mmap((void *)a, size, PROT_NONE, MAP_SHARED | MAP_FIXED, p->b->fd, 0);
  if (m == MAP_FAILED)
    return CUDA_ERROR_OUT_OF_MEMORY;
  struct sim_region *r = sim_region_new(SIM_R_VMM, a, size);
  if (!r) {
    mmap((void *)a, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  r->map_size = size;
  r->dev = p->b->dev;
  r->phys = p;
  r->resv = resv;
  r->buffer_id = p->id;
  p->maps++;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                          unsigned long long flags)
{
  SIM_BEGIN(cuMemMap);
  return SIM_END(mem_map(ptr, size, offset, handle, flags));
}

/* Collects into out[] the mappings overlapping [a, a+size); fails unless
 * each lies wholly inside and, with `covered`, they leave no gap. */
static CUresult whole_mappings(uintptr_t a, size_t size, int covered, struct sim_region ***out, size_t *n)
{
  *out = NULL;
  *n = 0;
  if (size == 0 || a + size < a)
    return CUDA_ERROR_INVALID_VALUE;
  size_t cap = 0, total = 0;
  for (struct sim_region *r = sim_region_first(); r; r = r->next) {
    if (r->kind != SIM_R_VMM || !(a < r->base + r->size && r->base < a + size))
      continue;
    if (r->base < a || r->base + r->size > a + size) {
      free(*out);
      *out = NULL;
      *n = 0;
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (*n == cap) {
      cap = cap ? cap * 2 : 8;
      struct sim_region **grown = realloc(*out, cap * sizeof **out);
      if (!grown) {
        free(*out);
        *out = NULL;
        *n = 0;
        return CUDA_ERROR_OUT_OF_MEMORY;
      }
      *out = grown;
    }
    (*out)[(*n)++] = r;
    total += r->size;
  }
  if (*n == 0 || (covered && total != size)) {
    free(*out);
    *out = NULL;
    *n = 0;
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

/* Deliberately does not run queued work: on a GPU, work still queued on the
 * range would fault, and tests must be able to catch a program that unmaps
 * before synchronizing. */
static CUresult mem_unmap(CUdeviceptr ptr, size_t size)
{
  struct sim_region **maps;
  size_t n;
  CUresult res = whole_mappings((uintptr_t)ptr, size, 0, &maps, &n);
  if (res != CUDA_SUCCESS)
    return res;
  for (size_t i = 0; i < n; i++) {
    struct sim_region *r = maps[i];
    mmap((void *)r->base, r->size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    sim_region_unlink(r);
    struct sim_phys *p = r->phys;
    p->maps--;
    free(r);
    phys_maybe_free(p);
  }
  free(maps);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
  SIM_BEGIN(cuMemUnmap);
  return SIM_END(mem_unmap(ptr, size));
}

static int host_prot(const struct sim_region *r)
{
  int prot = PROT_NONE;
  for (int d = 0; d < SIM_MAX_DEVICES; d++) {
    if (r->access[d] == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
      return PROT_READ | PROT_WRITE;
    if (r->access[d] == CU_MEM_ACCESS_FLAGS_PROT_READ)
      prot = PROT_READ;
  }
  return prot;
}

static CUresult set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
  if (!desc || count == 0)
    return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; i++) {
    CUresult r = check_location(&desc[i].location);
    if (r != CUDA_SUCCESS)
      return r;
    if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
        desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
      return CUDA_ERROR_INVALID_VALUE;
  }
  struct sim_region **maps;
  size_t n;
  CUresult res = whole_mappings((uintptr_t)ptr, size, 1, &maps, &n);
  if (res != CUDA_SUCCESS)
    return res;
  for (size_t k = 0; k < n; k++) {
    for (size_t i = 0; i < count; i++)
      maps[k]->access[desc[i].location.id] = (unsigned char)desc[i].flags;
    mprotect((void *)maps[k]->base, maps[k]->size, host_prot(maps[k]));
  }
  free(maps);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
  SIM_BEGIN(cuMemSetAccess);
  return SIM_END(set_access(ptr, size, desc, count));
}

static CUresult get_access(unsigned long long *flags, const CUmemLocation *loc, CUdeviceptr ptr)
{
  if (!flags || !loc)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r = check_location(loc);
  if (r != CUDA_SUCCESS)
    return r;
  struct sim_region *reg = sim_region_find((uintptr_t)ptr);
  if (!reg || reg->kind != SIM_R_VMM)
    return CUDA_ERROR_INVALID_VALUE;
  *flags = reg->access[loc->id];
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr)
{
  SIM_BEGIN(cuMemGetAccess);
  return SIM_END(get_access(flags, location, ptr));
}

/* ---- sharing ---- */

static CUresult export_handle(void *out, CUmemGenericAllocationHandle h, CUmemAllocationHandleType type,
                              unsigned long long flags)
{
  if (!out || flags != 0)
    return CUDA_ERROR_INVALID_VALUE;
  struct sim_phys *p = phys_lookup(h);
  if (!p)
    return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
    return CUDA_ERROR_NOT_SUPPORTED;
  if (!(p->prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
    return CUDA_ERROR_INVALID_VALUE;
  int fd = fcntl(p->b->fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0)
    return CUDA_ERROR_OUT_OF_MEMORY;
  *(int *)out = fd;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                              CUmemAllocationHandleType handleType, unsigned long long flags)
{
  SIM_BEGIN(cuMemExportToShareableHandle);
  return SIM_END(export_handle(shareableHandle, handle, handleType, flags));
}

/* The exporter's device is read back from the memfd's name, which is all an
 * importing process has to go on. */
static int fd_device(int fd)
{
  char link[64], target[256];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, target, sizeof target - 1);
  if (n <= 0)
    return -1;
  target[n] = 0;
  const char *s = strstr(target, "simcuda-vmm-d");
  if (!s)
    return -1;
  return atoi(s + strlen("simcuda-vmm-d"));
}

static CUresult import_handle(CUmemGenericAllocationHandle *handle, void *os_handle, CUmemAllocationHandleType type)
{
  if (!handle)
    return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
    return CUDA_ERROR_NOT_SUPPORTED;
  int fd = (int)(intptr_t)os_handle;
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  int dev = fd_device(fd);
  if (dev < 0 || !sim_valid_device(dev) || st.st_size <= 0 || (size_t)st.st_size % SIM_VMM_GRANULARITY != 0)
    return CUDA_ERROR_INVALID_VALUE;
  struct sim_backing *b = NULL;
  for (struct sim_phys *p = phys_list; p && !b; p = p->next)
    if (p->b->ino == st.st_ino)
      b = p->b;
  if (!b) {
    b = calloc(1, sizeof *b);
    if (!b)
      return CUDA_ERROR_OUT_OF_MEMORY;
    b->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (b->fd < 0) {
      free(b);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    b->ino = st.st_ino;
    b->size = (size_t)st.st_size;
    b->dev = dev;
  }
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  struct sim_phys *p = phys_new(b, &prop);
  if (!p) {
    if (b->refs == 0) {
      b->refs = 1;
      backing_put(b);
    }
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *handle = (CUmemGenericAllocationHandle)(uintptr_t)p;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                                CUmemAllocationHandleType shHandleType)
{
  SIM_BEGIN(cuMemImportFromShareableHandle);
  return SIM_END(import_handle(handle, osHandle, shHandleType));
}

static CUresult properties_from_handle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle h)
{
  if (!prop)
    return CUDA_ERROR_INVALID_VALUE;
  struct sim_phys *p = phys_lookup(h);
  if (!p)
    return CUDA_ERROR_INVALID_VALUE;
  *prop = p->prop;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                        CUmemGenericAllocationHandle handle)
{
  SIM_BEGIN(cuMemGetAllocationPropertiesFromHandle);
  return SIM_END(properties_from_handle(prop, handle));
}

static CUresult retain_handle(CUmemGenericAllocationHandle *handle, void *addr)
{
  if (!handle)
    return CUDA_ERROR_INVALID_VALUE;
  struct sim_region *r = sim_region_find((uintptr_t)addr);
  if (!r || r->kind != SIM_R_VMM)
    return CUDA_ERROR_INVALID_VALUE;
  r->phys->refs++;
  *handle = (CUmemGenericAllocationHandle)(uintptr_t)r->phys;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
  SIM_BEGIN(cuMemRetainAllocationHandle);
  return SIM_END(retain_handle(handle, addr));
}
