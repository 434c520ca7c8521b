/* pool.c: owns the growable pool on CUDA virtual memory: the address
 * reservation, the physical chunks mapped into it (their growth, rollback
 * and release), and the statistics; sub-allocation inside the mapped space
 * is suballoc.c's, what a suspension does to the chunks (their release and
 * remapping, the ranges sent to other processes) is vacate.c's, and
 * what the pool shares with other devices and processes (peer access to
 * its chunks, the pieces an IPC export names) is share.c's.
 *
 * The pool reserves one range of virtual addresses at creation and maps
 * physical memory into it only when a request does not fit.  Its unit is
 * the device's allocation granularity (2 MiB on an H100), the smallest
 * mapping the driver makes.  A growth step maps what the request needs
 * beyond the free space that already ends where the memory goes, up to the
 * next multiple of the pool's step: an eighth of the bytes mapped, rounded
 * up to the unit, at most CUEMM_POOL_CHUNK.  A fixed step of 32 MiB alone
 * set the footprint of small programs (a peak of 63 MiB held as 64 or 96
 * MiB, 2.04x its live bytes in a CuPy trace); a fixed step of 8 MiB
 * made the large training traces' driver calls 1.4 to 3.1 times as many
 * (2 MiB: 1.7 to 9 times).  Growing by
 * an eighth keeps the memory a step adds under 1/8 of the pool and the
 * number of steps to reach N bytes near log(N)/log(9/8) until the cap,
 * then N/32 MiB as before; ending each step on a multiple of the step
 * keeps a large pool's chunks where whole 32 MiB steps would put them,
 * whatever its first small steps left (rounding sizes instead moved every
 * later chunk, and the placement of large traces moved with it, some
 * worse).  With pool_ipc the step is CUEMM_POOL_CHUNK, so that a block
 * spans few chunks (a handle names at most CUEMM_IPC_POOL_MAX_PIECES); a
 * slab's too (its steps are bookkeeping only).  Up to
 * CUEMM__PIECE_SPLIT that is one chunk: one cuMemCreate, one cuMemMap and
 * one cuMemSetAccess naming every device with access, so growing by N bytes
 * costs about what one cuMemAlloc of N bytes costs, rather than N/unit
 * times the ~50 us a small mapping costs (cuMemSetAccess dominates).  A
 * larger step is made of pieces, one chunk each, of the size piece.c finds
 * cheapest per byte on the device (or CUEMM_POOL_PIECE), created and
 * mapped side by side; one cuMemSetAccess then covers the whole run, since
 * the driver accepts one over adjacent mappings.  A single cuMemCreate of
 * several GiB costs far more than its size would say (3 ms for 8 GiB on an
 * H100, against 67 us for 1 GiB), which pieces avoid.  Every chunk keeps
 * exactly one physical handle, which is what cuMemUnmap needs (it cannot
 * unmap part of a mapping) and what an export of the chunk would need.
 * Each chunk's state (created, mapped, accessible) is recorded as it
 * advances, and a failing step undoes every piece it made, so the
 * sub-allocator only ever sees memory that is mapped and accessible.
 * Chunks go back to the driver only when wholly free, highest addresses
 * first; live pointers never move.
 *
 * With pool_ipc, chunks are created exportable as POSIX file descriptors,
 * and each carries a serial number never reused by the pool, so that a
 * handle naming a chunk (ipc.c) can tell, when it is sent, whether that
 * chunk is still the one it was exported from.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <time.h>

#include "base/internal.h"
#include "trace/internal.h"
#include "pool/piece.h"
#include "pool/pool.h"
#include "suballoc/internal.h"

CUmemAllocationProp cuemm__pool_chunk_prop(CUdevice dev, int ipc)
{
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = (int)dev;
  /* With IPC, every chunk can be exported as a POSIX file descriptor
   * (cuMemExportToShareableHandle), which another process imports. */
  prop.requestedHandleTypes = ipc ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
  return prop;
}

/* ---- creation ---------------------------------------------------------------- */

/* Starts a new epoch when the current one is over. */
static void roll_epoch(cuemm__pool *p)
{
  uint64_t now = cuemm__now_ns();
  if (now - p->epoch_start_ns < p->delay_ns)
    return;
  p->recent_need[1] = now - p->epoch_start_ns < 2 * p->delay_ns ? p->recent_need[0] : 0;
  p->recent_need[0] = 0;
  p->epoch_start_ns = now;
}

/* What the pool needs of the driver and the device, for the configuration
 * asked: refused before anything is made, naming the knob to change. */
static CUresult check_support(const cuemm__driver_table *d, CUdevice dev, const cuemm_config *cfg)
{
  if (!d->MemAddressReserve || !d->MemAddressFree || !d->MemCreate || !d->MemRelease || !d->MemMap ||
      !d->MemUnmap || !d->MemSetAccess || !d->MemGetAllocationGranularity)
    return cuemm__error(CUDA_ERROR_NOT_SUPPORTED, "CUEMM_POOL=vmm: the CUDA driver %s lacks the virtual memory "
                        "management entry points (cuMemCreate and friends); unset CUEMM_POOL", d->path);
  int vmm = 0;
  CUresult r = d->DeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev);
  if (r != CUDA_SUCCESS)
    return cuemm__driver_error(r, "cuDeviceGetAttribute(VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device %d)", (int)dev);
  if (!vmm)
    return cuemm__error(CUDA_ERROR_NOT_SUPPORTED, "CUEMM_POOL=vmm: device %d does not support virtual memory "
                        "management; unset CUEMM_POOL", (int)dev);
  if (cfg->pool_slab && cfg->pool_ipc)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "CUEMM_POOL_SLAB=1 and CUEMM_POOL_IPC=1 do not go together: a "
                        "slab is one cuMemAlloc allocation, which has no file descriptors to share; unset one "
                        "(cuemm_config.pool_slab, pool_ipc)");
  if (cfg->pool_ipc) {
    if (!d->MemExportToShareableHandle)
      return cuemm__error(CUDA_ERROR_NOT_SUPPORTED, "CUEMM_POOL_IPC=1: the CUDA driver %s has no "
                          "cuMemExportToShareableHandle; unset CUEMM_POOL_IPC (cuemm_config.pool_ipc = 0)", d->path);
    int fds = 0;
    r = d->DeviceGetAttribute(&fds, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev);
    if (r != CUDA_SUCCESS)
      return cuemm__driver_error(r, "cuDeviceGetAttribute(HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, device %d)",
                                 (int)dev);
    if (!fds)
      return cuemm__error(CUDA_ERROR_NOT_SUPPORTED, "CUEMM_POOL_IPC=1: device %d cannot export memory as POSIX file "
                          "descriptors (CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED is 0), so "
                          "pool blocks cannot be shared; unset CUEMM_POOL_IPC (cuemm_config.pool_ipc = 0)", (int)dev);
  }
  return CUDA_SUCCESS;
}

/* The granularity of the chunks the pool will create, and the reservation
 * and the limit in whole units of it, since the driver maps nothing
 * smaller: the reservation rounds up and the limit down, while the step
 * and the piece, sizes the user chose for mappings, must be multiples. */
static CUresult pool_sizes(const cuemm__driver_table *d, CUdevice dev, const cuemm_config *cfg, size_t total,
                           size_t *gran_out, size_t *reserved_out, size_t *limit_out)
{
  CUmemAllocationProp prop = cuemm__pool_chunk_prop(dev, cfg->pool_ipc);
  size_t gran = 0;
  CUresult r = d->MemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (r != CUDA_SUCCESS)
    return cuemm__driver_error(r, "cuMemGetAllocationGranularity(device %d)", (int)dev);
  if (gran == 0 || cfg->pool_chunk % gran != 0)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "CUEMM_POOL_CHUNK (cuemm_config.pool_chunk) = %zu bytes is not a "
                        "multiple of device %d's allocation granularity, %zu bytes", cfg->pool_chunk, (int)dev, gran);
  size_t unit = gran;
  size_t reserved = cuemm__round_up(cfg->pool_reserve ? cfg->pool_reserve : cfg->pool_slab ? total / 4 : total, unit);
  size_t limit = cfg->pool_limit ? cfg->pool_limit / unit * unit : reserved;
  if (limit == 0)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "CUEMM_POOL_LIMIT (cuemm_config.pool_limit) = %zu bytes is "
                        "smaller than device %d's allocation granularity, %zu bytes", cfg->pool_limit, (int)dev, unit);
  if (limit > reserved)
    limit = reserved;
  if (cfg->pool_piece % gran != 0)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "CUEMM_POOL_PIECE (cuemm_config.pool_piece) = %zu bytes is not a "
                        "multiple of device %d's allocation granularity, %zu bytes", cfg->pool_piece, (int)dev, gran);
  if (reserved / unit > UINT32_MAX)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "CUEMM_POOL_RESERVE / the allocation granularity = %zu units: "
                        "too many; reserve less", reserved / unit);
  *gran_out = gran;
  *reserved_out = reserved;
  *limit_out = limit;
  return CUDA_SUCCESS;
}

/* The pool and its host tables, sized for the whole reservation so that
 * growth never allocates a unit's record; NULL without host memory. */
static cuemm__pool *new_pool(size_t reserved, size_t unit)
{
  cuemm__pool *p = calloc(1, sizeof *p);
  if (p) {
    p->runs = calloc(reserved / unit, sizeof *p->runs);
    p->units = calloc(reserved / unit, sizeof *p->units);
  }
  if (!p || !p->runs || !p->units || cuemm__sa_init(&p->sa, reserved) != 0) {
    if (p) {
      free(p->runs);
      free(p->units);
    }
    free(p);
    return NULL;
  }
  return p;
}

/* The pool's range of addresses: reserved only, memory to come by growth;
 * with CUEMM_POOL_SLAB, allocated whole at once. */
static CUresult reserve_range(cuemm__pool *p)
{
  const cuemm__driver_table *d = p->drv;
  CUresult r = p->slab ? d->MemAlloc(&p->base, p->reserved) : d->MemAddressReserve(&p->base, p->reserved, 0, 0, 0);
  if (r != CUDA_SUCCESS) {
    if (p->slab)
      cuemm__driver_error(r, "cuMemAlloc(%zu bytes) for the pool's slab (CUEMM_POOL_SLAB=1; CUEMM_POOL_RESERVE "
                          "sets its size)", p->reserved);
    else
      cuemm__driver_error(r, "cuMemAddressReserve(%zu bytes) for the pool (CUEMM_POOL_RESERVE)", p->reserved);
  }
  return r;
}

CUresult cuemm__pool_create(cuemm__pool **out, const cuemm__driver_table *d, CUdevice dev,
                            const cuemm_config *cfg, size_t total)
{
  *out = NULL;
  CUresult r = check_support(d, dev, cfg);
  if (r != CUDA_SUCCESS)
    return r;
  size_t gran = 0, reserved = 0, limit = 0;
  r = pool_sizes(d, dev, cfg, total, &gran, &reserved, &limit);
  if (r != CUDA_SUCCESS)
    return r;
  size_t unit = gran;
  cuemm__pool *p = new_pool(reserved, unit);
  if (!p)
    return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "cuemm_manager_create: no host memory for the pool's bookkeeping");
  p->drv = d;
  p->dev = dev;
  p->reserved = reserved;
  p->unit = unit;
  p->step = cfg->pool_chunk;
  p->granularity = gran;
  p->threshold = cfg->pool_release_threshold;
  p->delay_ns = (uint64_t)cfg->pool_release_delay_ms * 1000000u;
  p->epoch_start_ns = cuemm__now_ns();
  p->limit = limit;
  p->limit_hard = cfg->pool_limit_hard != 0;
  p->piece = cfg->pool_piece;
  p->nunits = reserved / unit;
  p->ipc = cfg->pool_ipc != 0;
  p->slab = cfg->pool_slab != 0;
  p->access[0].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p->access[0].location.id = (int)dev;
  p->access[0].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  p->naccess = 1;
  r = reserve_range(p);
  if (r != CUDA_SUCCESS) {
    cuemm__sa_fini(&p->sa);
    free(p->runs);
    free(p->units);
    free(p);
    return r;
  }
  p->nvtx = cfg->nvtx ? cuemm__nvtx_pool_new(d, p->base, reserved, unit, p->slab) : NULL;
  *out = p;
  return CUDA_SUCCESS;
}

/* ---- chunks ------------------------------------------------------------------ */

static CUdeviceptr unit_addr(const cuemm__pool *p, size_t u)
{
  return p->base + (CUdeviceptr)(u * p->unit);
}

void cuemm__pool_nvtx_mapped(cuemm__pool *p, size_t head, size_t n)
{
  if (__builtin_expect(p->nvtx == NULL, 1))
    return;
  for (size_t u = head; u < head + n; u = cuemm__runs_next(p->runs, u))
    if (cuemm__runs_is_head(p->runs, u))
      cuemm__nvtx_chunk_mapped(p->nvtx, unit_addr(p, u), cuemm__runs_units(p->runs, u) * p->unit);
}

static int keep_orphan(cuemm__pool *p, CUmemGenericAllocationHandle handle)
{
  CUmemGenericAllocationHandle *g = realloc(p->orphans, (p->norphans + 1) * sizeof *g);
  if (!g)
    return 0;
  p->orphans = g;
  p->orphans[p->norphans++] = handle;
  return 1;
}

/* Tries again to release the handles kept by rollback; the first failure
 * is returned, and what failed stays kept. */
static CUresult release_orphans(cuemm__pool *p)
{
  CUresult first = CUDA_SUCCESS;
  for (size_t i = p->norphans; i-- > 0;) {
    CUresult r = p->drv->MemRelease(p->orphans[i]);
    if (r == CUDA_SUCCESS)
      p->orphans[i] = p->orphans[--p->norphans];
    else if (first == CUDA_SUCCESS)
      first = cuemm__driver_error(r, "cuMemRelease of a handle kept from a failed growth of the pool (%zu kept)",
                                  p->norphans);
  }
  return first;
}

/* Undoes a growth step at unit `head` that reached `state`.  When undoing
 * itself fails, the chunk stays where it is, recorded, out of the
 * sub-allocator's reach, for destruction to try again; a handle whose
 * release fails is kept for the next release to try again. */
static void rollback(cuemm__pool *p, size_t head, size_t n)
{
  const cuemm__driver_table *d = p->drv;
  cuemm__pool_unit *h = &p->units[head];
  size_t bytes = n * p->unit;
  if (h->state >= CUEMM__CHUNK_MAPPED && !p->slab) {
    if (d->MemUnmap(unit_addr(p, head), bytes) != CUDA_SUCCESS) {
      cuemm__error_append("; undoing it, cuMemUnmap failed too: the chunk (%zu bytes) stays mapped, unused, "
                          "until the manager is destroyed", bytes);
      cuemm__sa_quarantine(&p->sa, head * p->unit, bytes);
      atomic_fetch_add_explicit(&p->mapped, bytes, memory_order_relaxed);
      p->chunks++;
      return;
    }
    h->state = CUEMM__CHUNK_CREATED;
  }
  if (h->has_handle && d->MemRelease(h->handle) != CUDA_SUCCESS) {
    if (keep_orphan(p, h->handle))
      cuemm__error_append("; undoing it, cuMemRelease failed too: the pool keeps the handle (%zu bytes) and "
                          "releases it at its next release of memory or its destruction", bytes);
    else
      cuemm__error_append("; undoing it, cuMemRelease failed too, and with no host memory to keep the handle, %zu "
                          "bytes are lost to the driver", bytes);
  }
  h->has_handle = 0;
  h->state = CUEMM__CHUNK_EMPTY;
  cuemm__runs_clear(p->runs, head);
}

/* Creates and maps one piece, a chunk of n units at unit `head` (a hole);
 * *ns is what its cuMemCreate and cuMemMap took together.  A failure is
 * undone before returning. */
static CUresult map_piece(cuemm__pool *p, size_t head, size_t n, double *ns)
{
  const cuemm__driver_table *d = p->drv;
  size_t bytes = n * p->unit;
  if (p->slab) { /* the slab's memory is there already: bookkeeping only */
    cuemm__pool_chunk_mark(p, head, n, CUEMM__CHUNK_MAPPED);
    p->units[head].has_handle = 0;
    p->units[head].serial = ++p->next_serial;
    *ns = 0;
    return CUDA_SUCCESS;
  }
  CUdeviceptr at = unit_addr(p, head);
  CUmemAllocationProp prop = cuemm__pool_chunk_prop(p->dev, p->ipc);
  cuemm__pool_unit *h = &p->units[head];
  CUmemGenericAllocationHandle handle;
  double t0 = (double)cuemm__now_ns();
  CUresult r = d->MemCreate(&handle, bytes, &prop, 0);
  double created = (double)cuemm__now_ns() - t0;
  if (r != CUDA_SUCCESS)
    return cuemm__driver_error(r, "cuMemCreate(%zu bytes on device %d) growing the pool", bytes, (int)p->dev);
  cuemm__pool_chunk_mark(p, head, n, CUEMM__CHUNK_CREATED);
  h->handle = handle;
  h->has_handle = 1;
  h->serial = ++p->next_serial;
  t0 = (double)cuemm__now_ns();
  r = d->MemMap(at, bytes, 0, handle, 0);
  if (r != CUDA_SUCCESS) {
    cuemm__driver_error(r, "cuMemMap(0x%llx, %zu bytes) growing the pool", (unsigned long long)at, bytes);
    rollback(p, head, n);
    return r;
  }
  *ns = created + ((double)cuemm__now_ns() - t0);
  h->state = CUEMM__CHUNK_MAPPED;
  return CUDA_SUCCESS;
}

/* Undoes the pieces made in [head, end). */
static void rollback_run(cuemm__pool *p, size_t head, size_t end)
{
  for (size_t u = head; u < end;) {
    size_t n = cuemm__runs_units(p->runs, u);
    rollback(p, u, n);
    u += n;
  }
}


/* The size of block i when it is free space a growth beside it for a
 * request of tag `tag` joins (idle, or freed on that request's stream),
 * else 0. */
static size_t joinable_size(const cuemm__sa *sa, uint32_t i, uint32_t tag)
{
  return i != CUEMM__SA_NIL && sa->b[i].state == CUEMM__SA_FREE && (!sa->b[i].tag || sa->b[i].tag == tag)
             ? sa->b[i].size
             : 0;
}

/* Whether block i is free space of tag `tag` (not 0). */
static int tagged_free(const cuemm__sa *sa, uint32_t i, uint32_t tag)
{
  return tag && i != CUEMM__SA_NIL && sa->b[i].state == CUEMM__SA_FREE && sa->b[i].tag == tag;
}

size_t cuemm__pool_piece_size(const cuemm__pool *p, size_t bytes)
{
  /* With IPC a block's handle lists at most CUEMM_IPC_POOL_MAX_PIECES
   * chunks: at most four pieces per growth leave room for the chunk of the
   * free space below and one more. */
  size_t min_piece = p->ipc ? cuemm__round_up((bytes + 3) / 4, p->unit) : 0;
  size_t piece = p->slab ? bytes : p->piece ? p->piece : cuemm__piece_pick((int)p->dev, p->unit, bytes, min_piece);
  return piece == 0 || piece > bytes ? bytes : piece;
}

/* Creates, maps and opens n units at unit `head` (a hole), in pieces of the
 * size piece.c chooses; *pieces says how many chunks that made. */
static CUresult map_run(cuemm__pool *p, size_t head, size_t n, size_t *pieces)
{
  const cuemm__driver_table *d = p->drv;
  size_t bytes = n * p->unit;
  size_t piece = cuemm__pool_piece_size(p, bytes);
  size_t pu = piece / p->unit, count = (n + pu - 1) / pu;
  if (count > (UINT32_MAX - 2) / 2 || cuemm__sa_reserve(&p->sa, (uint32_t)(2 * count + 2)) != 0)
    return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "no host memory for the pool's bookkeeping");
  int fresh = cuemm__piece_fresh((int)p->dev, (double)cuemm__now_ns()); /* else its pieces are made, not timed */
  /* The growth's median piece (of the first PIECE_TIMES whole pieces). */
  enum { PIECE_TIMES = 32 };
  double times[PIECE_TIMES];
  uint32_t timed = 0;
  size_t end = head + n;
  for (size_t u = head; u < end;) {
    size_t k = end - u < pu ? end - u : pu;
    double ns = 0;
    CUresult r = map_piece(p, u, k, &ns);
    if (r != CUDA_SUCCESS) {
      rollback_run(p, head, u);
      return r;
    }
    if (k == pu && timed < PIECE_TIMES)
      times[timed++] = ns;
    u += k;
  }
  for (uint32_t i = 1; i < timed; i++) /* a few values: insertion sort */
    for (uint32_t j = i; j > 0 && times[j - 1] > times[j]; j--) {
      double t = times[j];
      times[j] = times[j - 1];
      times[j - 1] = t;
    }
  double median = timed ? times[(timed - 1) / 2] : 0;
  CUdeviceptr at = unit_addr(p, head);
  CUresult r = p->slab ? CUDA_SUCCESS : d->MemSetAccess(at, bytes, p->access, p->naccess);
  if (r != CUDA_SUCCESS) {
    cuemm__driver_error(r, "cuMemSetAccess(0x%llx, %zu bytes, %u devices) growing the pool",
                        (unsigned long long)at, bytes, p->naccess);
    rollback_run(p, head, end);
    return r;
  }
  for (size_t u = head; u < end; u += cuemm__runs_units(p->runs, u))
    p->units[u].state = CUEMM__CHUNK_ACCESSIBLE;
  /* Only sizes of unit << j are recorded: the rest of a growth, an odd
   * size, would make its class look cheaper than its candidates are. */
  if (timed && (pu & (pu - 1)) == 0 && !p->slab)
    cuemm__piece_note((int)p->dev, piece, fresh ? median : 0, timed);
  p->last_piece = piece;
  *pieces = count;
  return CUDA_SUCCESS;
}

size_t cuemm__pool_step(const cuemm__pool *p)
{
  if (p->ipc || p->slab)
    return p->step;
  size_t s = cuemm__round_up(p->mapped / CUEMM__POOL_STEP_DIV, p->unit);
  size_t least = !p->pressed ? p->unit : CUEMM__POOL_STEP_MIN < p->step ? cuemm__round_up(CUEMM__POOL_STEP_MIN, p->unit)
                                                                          : p->step;
  return s > p->step ? p->step : s < least ? least : s;
}

/* A place for a growth: where the new memory starts, how much it maps, and
 * whether it touches free space of the request's tag. */
typedef struct growth {
  size_t off, bytes;
  int joins;
} growth;

/* Hole h's place for a growth of `need` bytes of tag `tag` whose new
 * memory ends or starts on a multiple of q; 0 where the hole cannot serve
 * it. */
static inline int hole_place(const cuemm__pool *p, const cuemm__sa_block *h, size_t need, uint32_t tag, size_t q,
                             growth *g)
{
  const cuemm__sa *sa = &p->sa;
  size_t before = joinable_size(sa, h->prev, tag), after = joinable_size(sa, h->next, tag);
  size_t up = cuemm__round_up(need > before ? need - before : p->unit, p->unit);
  size_t down = cuemm__round_up(need > after ? need - after : p->unit, p->unit);
  /* The new memory ends (grows up) or starts (grows down) on a
   * multiple of the step: a large pool keeps the layout of whole steps
   * whatever its first small growths left. */
  size_t qu = cuemm__round_up(h->off + up, q) - h->off;
  size_t qd = h->off + h->size - (h->off + h->size - down) / q * q;
  if (up <= h->size && up <= down) {
    g->bytes = qu < h->size ? qu : h->size;
    g->off = h->off;                                /* from the hole's start, joining the block before */
    g->joins = tagged_free(sa, h->prev, tag) || (g->bytes == h->size && tagged_free(sa, h->next, tag));
  } else if (down <= h->size) {
    g->bytes = qd < h->size ? qd : h->size;
    g->off = h->off + h->size - g->bytes;           /* up to the hole's end, joining the block after */
    g->joins = tagged_free(sa, h->next, tag) || (g->bytes == h->size && tagged_free(sa, h->prev, tag));
  } else if (before + h->size + after >= need) {
    g->bytes = h->size, g->off = h->off;            /* the whole hole: free space on both sides joins */
    g->joins = tagged_free(sa, h->prev, tag) || tagged_free(sa, h->next, tag);
  } else {
    return 0;
  }
  return 1;
}

/* Where to map: the place that needs the least new memory.  Mapped
 * against a free block at one end of a hole, the growth joins it, and
 * only the rest of the request is new; a hole whose free neighbours
 * together nearly serve the request is filled.  Placing by address alone
 * would map a whole request while a large free block waits beside
 * another hole (a serving trace held 1.21x its live bytes so).  Free
 * space the requesting stream freed counts as idle space does: that
 * stream may use it at once, and where its work runs behind (as a
 * program's GPU does), waiting for it to become idle would map the whole
 * request anew (a training trace with the GPU 16 allocations behind held
 * 1.11x its live bytes so, 1.02x with it idle).  What is
 * new is rounded up to the pool's step (cuemm__pool_step), as far as the
 * hole allows; where the limit leaves no room for that, to the
 * granularity only.  best->off is SIZE_MAX where no place fits; the
 * result says whether the limit excluded one. */
static inline int grow_place(const cuemm__pool *p, size_t need, uint32_t tag, growth *best)
{
  const cuemm__sa *sa = &p->sa;
  best->off = SIZE_MAX, best->bytes = 0, best->joins = 0;
  int capped = 0;
  size_t quanta[2] = { cuemm__pool_step(p), p->unit };
  for (int qi = 0; qi < 2 && best->off == SIZE_MAX; qi++) {
    size_t q = quanta[qi];
    for (uint32_t i = sa->holes; i != CUEMM__SA_NIL; i = sa->b[i].lnext) {
      growth g;
      if (!hole_place(p, &sa->b[i], need, tag, q, &g))
        continue;
      if (p->mapped + g.bytes > p->limit) {
        capped = 1;
        continue;
      }
      if (g.bytes < best->bytes || (g.bytes == best->bytes && g.off < best->off) || best->off == SIZE_MAX)
        *best = g;
    }
    if (q == p->unit)
      break;
  }
  return capped;
}

/* No place fits `need` bytes: the step counts as failed, and the message
 * names what stood in the way, the limit or the reservation. */
static CUresult grow_refused(cuemm__pool *p, size_t need, int capped)
{
  p->grow_failures++;
  char what[160];
  cuemm__pool_describe(p, what, sizeof what);
  if (capped)
    return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "the pool cannot grow by the %zu bytes a request needs without "
                        "passing its %slimit (CUEMM_POOL_LIMIT, %zu bytes): %s", need,
                        p->limit_hard ? "hard " : "", p->limit, what);
  return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "the pool's reservation (CUEMM_POOL_RESERVE, %zu bytes) has no "
                      "unmapped range where %zu bytes fit: %s", p->reserved, need, what);
}

/* The mapped growth g becomes free space, under the request's tag where it
 * joins that tag's, and counts in the statistics. */
static inline void grow_account(cuemm__pool *p, const growth *g, uint32_t tag, size_t pieces)
{
  if (g->joins)
    cuemm__sa_fill_tagged(&p->sa, g->off, g->bytes, tag);
  else
    cuemm__sa_fill(&p->sa, g->off, g->bytes);
  atomic_fetch_add_explicit(&p->mapped, g->bytes, memory_order_relaxed);
  if (p->mapped > p->recent_need[0])
    p->recent_need[0] = p->mapped;
  cuemm__log_note(p->log, "grow", g->bytes);
  p->chunks += pieces;
  p->chunks_mapped += pieces;
  p->grow_steps++;
}

CUresult cuemm__pool_grow(cuemm__pool *p, size_t size, uint32_t tag)
{
  size_t need = cuemm__round_up(size, CUEMM__SA_ALIGN);
  if (cuemm__pool_is_suspended(p))
    return cuemm__error(CUDA_ERROR_ILLEGAL_STATE, "the pool is suspended (cuemm_pool_suspend): it maps no memory "
                        "until cuemm_pool_resume");
  growth g;
  int capped = grow_place(p, need, tag, &g);
  if (g.off == SIZE_MAX)
    return grow_refused(p, need, capped);
  roll_epoch(p);
  size_t head = g.off / p->unit, n = g.bytes / p->unit, pieces = 0;
  CUresult r = map_run(p, head, n, &pieces);
  if (r != CUDA_SUCCESS) {
    p->grow_failures++;
    return r;
  }
  cuemm__pool_nvtx_mapped(p, head, n);
  grow_account(p, &g, tag, pieces);
  return CUDA_SUCCESS;
}

/* ---- release ----------------------------------------------------------------- */

/* Releases the chunk at unit `head`, which lies in free space. */
static CUresult release_chunk(cuemm__pool *p, size_t head)
{
  const cuemm__driver_table *d = p->drv;
  cuemm__pool_unit *h = &p->units[head];
  size_t bytes = cuemm__runs_units(p->runs, head) * p->unit;
  CUdeviceptr at = unit_addr(p, head);
  if (cuemm__sa_reserve(&p->sa, 2) != 0)
    return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "no host memory for the pool's bookkeeping");
  /* Releasing the handle first is allowed (the memory lives until it is also
   * unmapped) and leaves the chunk usable if the unmap then fails. */
  if (h->has_handle) {
    CUresult r = d->MemRelease(h->handle);
    if (r != CUDA_SUCCESS)
      return cuemm__driver_error(r, "cuMemRelease(chunk at 0x%llx, %zu bytes) releasing pool memory",
                                 (unsigned long long)at, bytes);
    h->has_handle = 0;
    cuemm__piece_released((int)p->dev, (double)cuemm__now_ns());
  }
  cuemm__nvtx_chunk_unmapping(p->nvtx, at);
  CUresult r = p->slab ? CUDA_SUCCESS : d->MemUnmap(at, bytes);
  if (r != CUDA_SUCCESS) {
    cuemm__pool_nvtx_mapped(p, head, cuemm__runs_units(p->runs, head));
    return cuemm__driver_error(r, "cuMemUnmap(0x%llx, %zu bytes) releasing pool memory; the chunk stays mapped "
                               "and in use by the pool", (unsigned long long)at, bytes);
  }
  cuemm__sa_drain(&p->sa, head * p->unit, bytes);
  h->state = CUEMM__CHUNK_EMPTY;
  cuemm__runs_clear(p->runs, head);
  atomic_fetch_sub_explicit(&p->mapped, bytes, memory_order_relaxed);
  cuemm__log_note(p->log, "release", bytes);
  p->chunks--;
  p->chunks_released++;
  return CUDA_SUCCESS;
}

/* The wholly free chunks found so far, by their first unit. */
typedef struct release_scan {
  const cuemm__pool *p;
  uint32_t *cand;
  size_t n, cap;
  int oom;
} release_scan;

static void scan_free_block(void *arg, const cuemm__sa_block *b)
{
  release_scan *rs = arg;
  const cuemm__pool *p = rs->p;
  size_t u = cuemm__round_up(b->off, p->unit) / p->unit, end = b->off + b->size;
  while ((u + 1) * p->unit <= end && !rs->oom) {
    /* Free space is always in a chunk; a unit in none is stepped over. */
    size_t head = cuemm__runs_covering(p->runs, u);
    size_t next = head == CUEMM__RUNS_NONE ? u + 1 : head + cuemm__runs_units(p->runs, head);
    if (head == u && next * p->unit <= end) {
      if (rs->n == rs->cap) {
        size_t c = rs->cap ? rs->cap * 2 : 16;
        uint32_t *g = realloc(rs->cand, c * sizeof *g);
        if (!g) {
          rs->oom = 1;
          return;
        }
        rs->cand = g;
        rs->cap = c;
      }
      rs->cand[rs->n++] = (uint32_t)u;
    }
    u = next;
  }
}

int cuemm__pool_free_chunks(cuemm__pool *p, uint32_t **cand, size_t *n)
{
  /* A cached block keeps its chunk from looking wholly free: merge them
   * all first.  The free blocks of a unit or more are found through the
   * bins, not a walk of every block. */
  cuemm__sa_coalesce(&p->sa);
  release_scan rs = { p, NULL, 0, 0, 0 };
  cuemm__sa_each_free(&p->sa, p->unit, scan_free_block, &rs);
  *cand = rs.cand;
  *n = rs.n;
  return rs.oom ? -1 : 0;
}

static int by_unit_descending(const void *a, const void *b)
{
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

CUresult cuemm__pool_release(cuemm__pool *p, size_t keep)
{
  /* The wholly free chunks, released from the top.  Releasing one never
   * merges it with another candidate's block in a way that matters:
   * candidates are found by unit, not by block. */
  CUresult kept = p->norphans ? release_orphans(p) : CUDA_SUCCESS;
  uint32_t *cand;
  size_t n;
  if (cuemm__pool_free_chunks(p, &cand, &n) != 0) {
    free(cand);
    return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "no host memory to release pool memory");
  }
  if (n > 1) /* qsort takes no NULL, even for nothing */
    qsort(cand, n, sizeof *cand, by_unit_descending);
  CUresult r = CUDA_SUCCESS;
  size_t released = 0;
  for (size_t k = 0; k < n; k++) {
    size_t bytes = cuemm__runs_units(p->runs, cand[k]) * p->unit;
    if (p->sa.free_bytes < keep + bytes || p->units[cand[k]].state != CUEMM__CHUNK_ACCESSIBLE)
      continue; /* a suspension's chunks wait for the resumption (cuemm__vacate_forget_free) */
    if ((r = release_chunk(p, cand[k])) != CUDA_SUCCESS)
      break;
    released++;
  }
  free(cand);
  if (released)
    p->releases++;
  p->release_floor = p->sa.free_bytes;
  return r != CUDA_SUCCESS ? r : kept; /* kept's message stands: nothing after it failed */
}

size_t cuemm__pool_keep(cuemm__pool *p)
{
  roll_epoch(p);
  size_t peak = p->recent_need[0] > p->recent_need[1] ? p->recent_need[0] : p->recent_need[1];
  size_t used = p->sa.used_bytes;
  size_t need = peak > used ? peak - used : 0;
  return need > p->threshold ? need : p->threshold;
}

int cuemm__pool_release_due(cuemm__pool *p)
{
  size_t f = p->sa.free_bytes;
  return f > p->threshold && f >= p->release_floor + p->unit && f > cuemm__pool_keep(p);
}

/* ---- information ----------------------------------------------------------- */

void cuemm__pool_get_stats(const cuemm__pool *p, cuemm_pool_stats *s)
{
  memset(s, 0, sizeof *s);
  s->enabled = 1;
  s->base = p->base;
  s->reserved_bytes = p->reserved;
  s->chunk_bytes = p->step;
  s->granularity = p->granularity;
  s->release_threshold = p->threshold;
  s->limit_bytes = p->limit;
  s->mapped_bytes = p->mapped;
  s->used_bytes = p->sa.used_bytes;
  s->free_bytes = p->sa.free_bytes;
  s->largest_free_block = cuemm__sa_largest_free(&p->sa);
  s->used_blocks = p->sa.used_count;
  s->free_blocks = p->sa.free_count;
  s->chunks = p->chunks;
  s->chunks_mapped = p->chunks_mapped;
  s->chunks_released = p->chunks_released;
  s->grow_steps = p->grow_steps;
  s->grow_failures = p->grow_failures;
  s->releases = p->releases;
  s->peers = p->naccess - 1;
  s->limit_hard = p->limit_hard;
  s->piece_pinned = p->piece;
  s->piece_bytes = p->last_piece;
  s->slab = p->slab;
  s->suspended = cuemm__pool_is_suspended(p);
  s->suspended_need_bytes = s->suspended ? cuemm__pool_suspended_need(p) : 0;
  s->kept_bytes = p->kept_bytes;
  s->suspends = p->suspends;
  s->resumes = p->resumes;
  cuemm__piece_table t;
  cuemm__piece_snapshot((int)p->dev, &t);
  for (int k = 0; k < CUEMM_POOL_PIECE_CLASSES; k++) {
    s->piece_cost_us[k] = t.ns_per_byte[k] * (double)((size_t)1 << (CUEMM__PIECE_MIN_SHIFT + k)) / 1e3;
    s->piece_samples[k] = t.samples[k];
  }
  /* Of the free space, not of the blocks it is cut into: cached blocks
   * side by side are one run of addresses (see cuemm_pool_stats). */
  s->fragmentation = s->free_bytes ? 1.0 - (double)cuemm__sa_largest_extent(&p->sa) / (double)s->free_bytes : 0.0;
}

size_t cuemm__pool_suspended_need(const cuemm__pool *p)
{
  size_t need = 0;
  for (size_t u = 0; u < p->nunits; u = cuemm__runs_next(p->runs, u)) {
    const cuemm__pool_unit *h = &p->units[u];
    if (cuemm__runs_is_head(p->runs, u) && h->state != CUEMM__CHUNK_EMPTY && h->state != CUEMM__CHUNK_ACCESSIBLE)
      need += cuemm__runs_units(p->runs, u) * p->unit;
  }
  return need;
}

CUresult cuemm__pool_refuse(const cuemm__pool *p, size_t size)
{
  char what[160];
  cuemm__pool_describe(p, what, sizeof what);
  return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "cuemm_allocate: %zu bytes requested, more than the pool's hard limit "
                      "(CUEMM_POOL_LIMIT, %zu bytes, with CUEMM_POOL_LIMIT_HARD=1: nothing goes to cuMemAlloc); %s",
                      size, p->limit, what);
}

CUresult cuemm__pool_refuse_suspended(const cuemm__pool *p, const char *fn)
{
  /* Called without the manager's lock on the stream path: reads no table. */
  (void)p;
  return cuemm__error(CUDA_ERROR_ILLEGAL_STATE, "%s: the manager is suspended (cuemm_pool_suspend): its pool holds "
                      "no memory until cuemm_pool_resume (cuemm_pool_get_stats says how much that needs)", fn);
}

void cuemm__pool_describe(const cuemm__pool *p, char *buf, size_t n)
{
  snprintf(buf, n, "%zu bytes mapped, %zu used, largest free block %zu bytes", p->mapped, p->sa.used_bytes,
           cuemm__sa_largest_free(&p->sa));
}

size_t cuemm__pool_list_chunks(const cuemm__pool *p, CUdeviceptr *base, size_t *size, size_t cap)
{
  size_t n = 0;
  for (size_t u = 0; u < p->nunits; u++) {
    if (!cuemm__runs_is_head(p->runs, u) || p->units[u].state != CUEMM__CHUNK_ACCESSIBLE)
      continue;
    if (base && n < cap) {
      base[n] = cuemm__pool_unit_addr(p, u);
      size[n] = cuemm__runs_units(p->runs, u) * p->unit;
    }
    n++;
  }
  return n;
}

/* ---- destruction ------------------------------------------------------------- */

CUresult cuemm__pool_destroy(cuemm__pool *p, int use_driver)
{
  cuemm__first_error first = CUEMM__FIRST_ERROR_INIT;
  const cuemm__driver_table *d = p->drv;
  cuemm__nvtx_pool_gone(p->nvtx, use_driver);
  p->nvtx = NULL;
  if (p->slab && use_driver) {
    CUresult r = d->MemFree(p->base);
    if (r != CUDA_SUCCESS)
      cuemm__first_note(&first, cuemm__driver_error(r, "cuMemFree(0x%llx, %zu bytes) freeing the pool's slab",
                                                    (unsigned long long)p->base, p->reserved));
  }
  if (use_driver && p->norphans)
    cuemm__first_note(&first, release_orphans(p));
  for (size_t u = 0; use_driver && !p->slab && u < p->nunits; u++) {
    cuemm__pool_unit *h = &p->units[u];
    if (!cuemm__runs_is_head(p->runs, u) || h->state == CUEMM__CHUNK_EMPTY)
      continue;
    size_t bytes = cuemm__runs_units(p->runs, u) * p->unit;
    CUresult r = CUDA_SUCCESS;
    if ((h->state == CUEMM__CHUNK_MAPPED || h->state == CUEMM__CHUNK_ACCESSIBLE) &&
        (r = d->MemUnmap(unit_addr(p, u), bytes)) != CUDA_SUCCESS)
      cuemm__driver_error(r, "cuMemUnmap(0x%llx, %zu bytes) destroying the pool", (unsigned long long)unit_addr(p, u),
                          bytes);
    else if (h->has_handle && (r = d->MemRelease(h->handle)) != CUDA_SUCCESS)
      cuemm__driver_error(r, "cuMemRelease(chunk at 0x%llx, %zu bytes) destroying the pool",
                          (unsigned long long)unit_addr(p, u), bytes);
    else if (h->has_handle)
      cuemm__piece_released((int)p->dev, (double)cuemm__now_ns());
    cuemm__first_note(&first, r);
  }
  if (use_driver && !p->slab) {
    CUresult r = d->MemAddressFree(p->base, p->reserved);
    if (r != CUDA_SUCCESS)
      cuemm__first_note(&first, cuemm__driver_error(r, "cuMemAddressFree(0x%llx, %zu bytes) destroying the pool",
                                                    (unsigned long long)p->base, p->reserved));
  }
  cuemm__sa_fini(&p->sa);
  free(p->sent);
  free(p->orphans);
  free(p->runs);
  free(p->units);
  free(p);
  return cuemm__first_end(&first);
}
