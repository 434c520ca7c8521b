/* managed.c: owns managed (unified) and system-allocated memory: the pool of
 * cuMemAllocManaged segments that cuemm_alloc sub-allocates from under
 * CUEMM_MEMORY=managed, the aligned host allocations of CUEMM_MEMORY=system,
 * prefetch and advice, the oversubscription warning and cap, and their
 * statistics.
 *
 * Why a segment pool: cuMemAllocManaged costs about what cuMemAlloc costs
 * (tens of microseconds, more for large sizes), and cuMemFree of managed
 * memory synchronizes the device; one driver call per request would make
 * managed memory the slow kind for reasons that have nothing to do with
 * migration.  So requests are carved out of segments with the pool's
 * sub-allocator (suballoc.c).  The segments are separate allocations at
 * addresses the driver chooses, while the sub-allocator tiles one span of
 * offsets: each segment gets a run of whole units of that span, and any two
 * segments are kept at least one unmapped unit (a hole) apart, so that free
 * space never merges across two segments and no block straddles them.  A
 * block's address is its segment's base plus its offset in the segment.
 *
 * Frees go through the manager's deferred queue like any other (manager.c);
 * the flush synchronizes the context once before handing blocks out again,
 * as for pool blocks, and then, with more than the release threshold free,
 * wholly free segments go back to the driver, highest first.
 *
 * Oversubscription is allowed (it is the point of managed memory for some
 * pipelines) but made visible: the first growth that takes the held bytes
 * past the device's memory leaves a warning, and managed_limit turns it into
 * a refusal.  System memory needs no pool (malloc is cheap); it needs only
 * the platform check at creation and the deferred release.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/account.h"
#include "core/ctx.h"
#include "base/internal.h"
#include "core/managed.h"
#include "core/manager.h"
#include "suballoc/internal.h"

#define SYSTEM_ALIGN ((size_t)256)

static const char *kind_env(cuemm_memory_kind k)
{
  return k == CUEMM_MEMORY_MANAGED ? "CUEMM_MEMORY=managed" : "CUEMM_MEMORY=system";
}

/* ---- creation ----------------------------------------------------------------- */

static CUresult attribute(const cuemm__driver_table *d, CUdevice dev, CUdevice_attribute a, const char *name,
                          int *v)
{
  CUresult r = d->DeviceGetAttribute(v, a, dev);
  return r == CUDA_SUCCESS ? r : cuemm__driver_error(r, "cuDeviceGetAttribute(%s, device %d)", name, (int)dev);
}

static CUresult check_support(cuemm_manager *m)
{
  const cuemm__driver_table *d = m->drv;
  const cuemm_config *c = &m->cfg;
  const char *env = kind_env(c->memory);
  int v = 0;
  CUresult r;
  if (c->pool == CUEMM_POOL_VMM)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "%s cannot be combined with CUEMM_POOL=vmm (the pool serves "
                        "device memory only); unset one of them", env);
  if (c->memory == CUEMM_MEMORY_SYSTEM) {
    if ((r = attribute(d, m->dev, CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, "PAGEABLE_MEMORY_ACCESS", &v)))
      return r;
    if (!v)
      return cuemm__error(CUDA_ERROR_NOT_SUPPORTED, "%s: device %d cannot access pageable host memory "
                          "(CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS is 0: no HMM or ATS on this system); use "
                          "CUEMM_MEMORY=managed or device", env, (int)m->dev);
    return CUDA_SUCCESS;
  }
  if (!d->MemAllocManaged)
    return cuemm__error(CUDA_ERROR_NOT_SUPPORTED, "%s: the CUDA driver %s has no cuMemAllocManaged", env, d->path);
  if ((r = attribute(d, m->dev, CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, "MANAGED_MEMORY", &v)))
    return r;
  if (!v)
    return cuemm__error(CUDA_ERROR_NOT_SUPPORTED, "%s: device %d cannot allocate managed memory "
                        "(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY is 0)", env, (int)m->dev);
  int advice = c->managed_preferred_location != CUEMM_LOCATION_NONE || c->managed_accessed_by != CUEMM_LOCATION_NONE;
  if ((c->managed_prefetch && !d->MemPrefetchAsync) || (advice && !d->MemAdvise))
    return cuemm__error(CUDA_ERROR_NOT_SUPPORTED, "%s: the CUDA driver %s lacks %s, which %s asks for", env, d->path,
                        c->managed_prefetch && !d->MemPrefetchAsync ? "cuMemPrefetchAsync" : "cuMemAdvise",
                        c->managed_prefetch && !d->MemPrefetchAsync ? "CUEMM_MANAGED_PREFETCH=1"
                                                                     : "CUEMM_MANAGED_PREFERRED_LOCATION or "
                                                                       "CUEMM_MANAGED_ACCESSED_BY");
  if (c->managed_prefetch) {
    if ((r = attribute(d, m->dev, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, "CONCURRENT_MANAGED_ACCESS", &v)))
      return r;
    if (!v)
      return cuemm__error(CUDA_ERROR_NOT_SUPPORTED, "CUEMM_MANAGED_PREFETCH=1: device %d cannot prefetch managed "
                          "memory (CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS is 0); unset it", (int)m->dev);
  }
  if (c->pool_chunk % SYSTEM_ALIGN != 0)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "CUEMM_POOL_CHUNK (cuemm_config.pool_chunk) = %zu bytes, the "
                        "managed segment size, is not a multiple of 256", c->pool_chunk);
  return CUDA_SUCCESS;
}

CUresult cuemm__managed_create(cuemm_manager *m, cuemm__managed_flush_fn flush)
{
  CUresult r = check_support(m);
  if (r != CUDA_SUCCESS)
    return r;
  cuemm__managed *mp = calloc(1, sizeof *mp);
  if (!mp)
    return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "cuemm_manager_create: no host memory for the managed pool");
  mp->drv = m->drv;
  mp->flush = flush;
  mp->log = m->log;
  mp->dev = m->dev;
  mp->kind = m->cfg.memory;
  mp->prefetch = m->cfg.managed_prefetch;
  mp->preferred = m->cfg.managed_preferred_location;
  mp->accessed_by = m->cfg.managed_accessed_by;
  mp->threshold = m->cfg.pool_release_threshold;
  mp->limit = m->cfg.managed_limit;
  mp->total = m->st.total_bytes;
  if (mp->kind == CUEMM_MEMORY_MANAGED) {
    /* Room for eight times the device's memory (or the limit), gaps
     * included: oversubscription past that is out of memory here.  At
     * least 4096 units, at most 2^20 (16 MiB of bookkeeping; with 32 MiB
     * segments, 32 TiB of managed memory), and no more than the address
     * space holds. */
    mp->unit = m->cfg.pool_chunk;
    size_t cap = mp->limit > mp->total ? mp->limit : mp->total;
    size_t n = cap / mp->unit + 1, most = (size_t)1 << 20;
    mp->nunits = n > most / 8 ? most : n * 8 < 4096 ? 4096 : n * 8;
    if (mp->nunits > SIZE_MAX / 2 / mp->unit)
      mp->nunits = SIZE_MAX / 2 / mp->unit;
    mp->span = mp->nunits * mp->unit;
    mp->runs = calloc(mp->nunits, sizeof *mp->runs);
    mp->units = calloc(mp->nunits, sizeof *mp->units);
    if (!mp->runs || !mp->units || cuemm__sa_init(&mp->sa, mp->span) != 0) {
      free(mp->runs);
      free(mp->units);
      free(mp);
      return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "cuemm_manager_create: no host memory for the managed pool's "
                          "bookkeeping");
    }
  }
  m->managed = mp;
  return CUDA_SUCCESS;
}

static void free_system_one(cuemm__owned_entry *e, void *arg)
{
  (void)arg;
  if (e->kind == CUEMM__KIND_SYSTEM)
    free((void *)e->key);
}

CUresult cuemm__managed_destroy(cuemm_manager *m, int use_driver)
{
  cuemm__managed *mp = m->managed;
  if (!mp)
    return CUDA_SUCCESS;
  CUresult first = CUDA_SUCCESS;
  if (!use_driver)
    cuemm__owned_each(&m->owned, free_system_one, NULL);
  for (size_t u = 0; use_driver && u < mp->nunits; u++) {
    cuemm__managed_unit *h = &mp->units[u];
    if (!h->base || !cuemm__runs_is_head(mp->runs, u))
      continue;
    CUresult r = mp->drv->MemFree(h->base);
    if (r != CUDA_SUCCESS && first == CUDA_SUCCESS)
      first = cuemm__driver_error(r, "cuMemFree(managed segment 0x%llx, %zu bytes)", (unsigned long long)h->base,
                                  cuemm__runs_units(mp->runs, u) * mp->unit);
  }
  if (mp->kind == CUEMM_MEMORY_MANAGED)
    cuemm__sa_fini(&mp->sa);
  free(mp->runs);
  free(mp->units);
  free(mp);
  m->managed = NULL;
  return first;
}

/* ---- segments ------------------------------------------------------------------ */

static CUresult advise_segment(cuemm__managed *mp, CUdeviceptr base, size_t bytes, CUmem_advise advice,
                               cuemm_location where, const char *what)
{
  if (where == CUEMM_LOCATION_NONE)
    return CUDA_SUCCESS;
  CUdevice dev = where == CUEMM_LOCATION_CPU ? CU_DEVICE_CPU : mp->dev;
  CUresult r = mp->drv->MemAdvise(base, bytes, advice, dev);
  mp->advises++;
  if (r != CUDA_SUCCESS)
    return cuemm__driver_error(r, "cuMemAdvise(0x%llx, %zu bytes, %s, %s) for a new managed segment",
                               (unsigned long long)base, bytes, what,
                               where == CUEMM_LOCATION_CPU ? "CU_DEVICE_CPU" : "the manager's device");
  return CUDA_SUCCESS;
}

static void describe(const cuemm__managed *mp, char *buf, size_t n)
{
  snprintf(buf, n, "%zu managed bytes held in %zu segments, %zu used, device memory %zu bytes", mp->held,
           mp->segments, mp->sa.used_bytes, mp->total);
}

/* Adds a segment where a request of `size` bytes fits: one
 * cuMemAllocManaged, then the configured advice.  Context entered. */
static CUresult grow(cuemm__managed *mp, size_t size)
{
  char state[200];
  size_t need = cuemm__round_up(size, CUEMM__SA_ALIGN);
  size_t bytes = cuemm__round_up(need, mp->unit);
  if (mp->limit && (bytes > mp->limit || mp->held > mp->limit - bytes)) {
    mp->limit_refusals++;
    describe(mp, state, sizeof state);
    return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "a managed segment of %zu bytes (for a request of %zu) would take "
                        "the managed memory held to %zu bytes, past CUEMM_MANAGED_LIMIT (cuemm_config.managed_limit) "
                        "= %zu bytes: %s", bytes, size, mp->held + bytes, mp->limit, state);
  }
  /* The lowest hole with room for the segment and a hole unit on each side
   * (none needed at offset 0). */
  size_t at = SIZE_MAX;
  const cuemm__sa *sa = &mp->sa;
  for (uint32_t i = sa->holes; i != CUEMM__SA_NIL; i = sa->b[i].lnext) {
    const cuemm__sa_block *h = &sa->b[i];
    size_t start = h->off ? h->off + mp->unit : 0;
    if (start + bytes + mp->unit <= h->off + h->size && start < at)
      at = start;
  }
  if (at == SIZE_MAX) {
    describe(mp, state, sizeof state);
    return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "the managed pool has no room left in its span (%zu bytes) for a "
                        "segment of %zu bytes: %s", mp->span, bytes, state);
  }
  if (cuemm__sa_reserve(&mp->sa, 2) != 0)
    return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "no host memory for the managed pool's bookkeeping");
  CUdeviceptr base = 0;
  CUresult r = mp->drv->MemAllocManaged(&base, bytes, CU_MEM_ATTACH_GLOBAL);
  if (r != CUDA_SUCCESS)
    return cuemm__driver_error(r, "cuMemAllocManaged(%zu bytes, CU_MEM_ATTACH_GLOBAL) for a managed segment", bytes);
  if ((r = advise_segment(mp, base, bytes, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, mp->preferred,
                          "CU_MEM_ADVISE_SET_PREFERRED_LOCATION")) != CUDA_SUCCESS ||
      (r = advise_segment(mp, base, bytes, CU_MEM_ADVISE_SET_ACCESSED_BY, mp->accessed_by,
                          "CU_MEM_ADVISE_SET_ACCESSED_BY")) != CUDA_SUCCESS) {
    if (mp->drv->MemFree(base) != CUDA_SUCCESS)
      cuemm__error_append("; freeing the segment again failed too: %zu bytes are lost to the driver", bytes);
    return r;
  }
  size_t head = at / mp->unit;
  cuemm__runs_mark(mp->runs, head, bytes / mp->unit);
  mp->units[head].base = base;
  cuemm__sa_fill(&mp->sa, at, bytes);
  atomic_fetch_add_explicit(&mp->held, bytes, memory_order_relaxed);
  cuemm__log_note(mp->log, "grow", bytes);
  mp->segments++;
  mp->segments_allocated++;
  if (mp->held > mp->peak_held)
    mp->peak_held = mp->held;
  if (mp->held > mp->total) {
    mp->oversubscribed_grows++;
    if (!mp->warning[0])
      snprintf(mp->warning, sizeof mp->warning, "cuemm_allocate: warning: managed memory held (%zu bytes) now exceeds "
               "device %d's memory (%zu bytes); the driver may evict pages to the host, which can make GPU access "
               "much slower (CUEMM_MANAGED_LIMIT caps it)", mp->held, (int)mp->dev, mp->total);
  }
  return CUDA_SUCCESS;
}

/* Gives wholly free segments back, highest first, while at least `keep`
 * free bytes stay.  Context entered; every free block is idle. */
static CUresult release(cuemm__managed *mp, size_t keep)
{
  cuemm__sa_coalesce(&mp->sa);
  CUresult r = CUDA_SUCCESS;
  /* Segments are hole-separated, so a wholly free one is exactly one FREE
   * block; walk down from the top, one segment at a time. */
  for (size_t u = mp->nunits; u-- > 0;) {
    cuemm__managed_unit *h = &mp->units[u];
    if (!h->base || !cuemm__runs_is_head(mp->runs, u))
      continue;
    size_t off = u * mp->unit, bytes = cuemm__runs_units(mp->runs, u) * mp->unit;
    if (mp->sa.free_bytes < keep + bytes)
      continue;
    uint32_t b = cuemm__sa_find(&mp->sa, off);
    if (b == CUEMM__SA_NIL || mp->sa.b[b].state != CUEMM__SA_FREE || mp->sa.b[b].off != off ||
        mp->sa.b[b].size != bytes)
      continue;
    if (cuemm__sa_reserve(&mp->sa, 2) != 0)
      return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "no host memory to release managed memory");
    r = mp->drv->MemFree(h->base);
    if (r != CUDA_SUCCESS) {
      cuemm__driver_error(r, "cuMemFree(managed segment 0x%llx, %zu bytes); the segment stays and is used again",
                          (unsigned long long)h->base, bytes);
      break;
    }
    cuemm__sa_drain(&mp->sa, off, bytes);
    h->base = 0;
    cuemm__runs_clear(mp->runs, u);
    atomic_fetch_sub_explicit(&mp->held, bytes, memory_order_relaxed);
    cuemm__log_note(mp->log, "release", bytes);
    mp->segments--;
    mp->segments_released++;
  }
  mp->release_floor = mp->sa.free_bytes;
  return r;
}

CUresult cuemm__managed_flush_end(cuemm__managed *mp)
{
  if (mp->kind != CUEMM_MEMORY_MANAGED)
    return CUDA_SUCCESS;
  size_t f = mp->sa.free_bytes;
  if (f > mp->threshold && f >= mp->release_floor + mp->unit)
    return release(mp, mp->threshold);
  return CUDA_SUCCESS;
}

/* ---- allocation ------------------------------------------------------------------ */

static int take(cuemm__managed *mp, size_t size, CUdeviceptr *p, uint32_t *blk)
{
  uint32_t i = cuemm__sa_alloc(&mp->sa, cuemm__round_up(size, CUEMM__SA_ALIGN));
  if (i == CUEMM__SA_NIL)
    return -1;
  size_t off = mp->sa.b[i].off, head = cuemm__runs_covering(mp->runs, off / mp->unit);
  *p = mp->units[head].base + (CUdeviceptr)(off - head * mp->unit);
  *blk = i;
  return 0;
}

/* No free block fits: grow; out of memory, flush, trim, and try once more.
 * Lock held, context entered. */
static CUresult take_slow(cuemm_manager *m, size_t size, CUdeviceptr *p, uint32_t *blk)
{
  cuemm__managed *mp = m->managed;
  CUresult r = grow(mp, size);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    cuemm__oom_retry o;
    cuemm__account_oom_retry(m, &o, CUEMM__OOM_KEEP_WHY | CUEMM__OOM_DEVICE);
    (void)mp->flush(m); /* a failed flush leaves its frees queued; the retry decides */
    if (take(mp, size, p, blk) == 0) {
      cuemm__account_oom_served(&o);
      return CUDA_SUCCESS;
    }
    release(mp, 0);
    r = grow(mp, size);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
      cuemm__error(r, "cuemm_allocate: out of managed memory for %zu bytes", size);
      cuemm__account_oom_failed(m, &o, r, size, "releasing free segments ");
    } else
      cuemm__account_oom_served(&o);
  }
  if (r == CUDA_SUCCESS)
    cuemm__account_note_held(m);
  if (r == CUDA_SUCCESS && take(mp, size, p, blk) != 0)
    r = cuemm__error(CUDA_ERROR_UNKNOWN, "internal: a managed segment was added but has no block of %zu bytes", size);
  return r;
}

static CUresult system_alloc(cuemm_manager *m, size_t size, CUdeviceptr *out)
{
  cuemm__managed *mp = m->managed;
  void *h = NULL;
  if (posix_memalign(&h, SYSTEM_ALIGN, size) != 0 || !h)
    return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "cuemm_allocate: posix_memalign(%zu bytes) failed: no host memory "
                        "left (CUEMM_MEMORY=system)", size);
  if (cuemm__owned_add(&m->owned, (uintptr_t)h, size, CUEMM__KIND_SYSTEM, 0) != 0) {
    free(h);
    return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "cuemm_allocate: no host memory left to record the allocation");
  }
  mp->system_bytes += size;
  mp->system_count++;
  *out = (CUdeviceptr)(uintptr_t)h;
  return CUDA_SUCCESS;
}

static CUresult managed_alloc(cuemm_manager *m, size_t size, CUdeviceptr *out)
{
  cuemm__managed *mp = m->managed;
  CUdeviceptr p = 0;
  uint32_t blk;
  cuemm__ctx_guard g = { 0 };
  int entered = 0;
  CUresult r = CUDA_SUCCESS;
  const char *warned = mp->warning[0] ? mp->warning : NULL;
  if (size > mp->span / 2) { /* also keeps the rounding below from overflowing */
    char state[200];
    describe(mp, state, sizeof state);
    return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "cuemm_allocate: %zu bytes requested, more than the managed pool can "
                        "place (its span is %zu bytes): %s", size, mp->span, state);
  }
  if (take(mp, size, &p, &blk) != 0) {
    if ((r = cuemm__ctx_enter(m, &g)) != CUDA_SUCCESS)
      return r;
    entered = 1;
    if ((r = take_slow(m, size, &p, &blk)) != CUDA_SUCCESS)
      return cuemm__ctx_leave(m, &g, r);
  }
  if (cuemm__owned_add(&m->owned, (uintptr_t)p, size, CUEMM__KIND_MANAGED, blk) != 0) {
    cuemm__sa_free(&mp->sa, blk);
    r = cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "cuemm_allocate: no host memory left to record the allocation");
    return entered ? cuemm__ctx_leave(m, &g, r) : r;
  }
  if (mp->prefetch) {
    if (!entered && (r = cuemm__ctx_enter(m, &g)) == CUDA_SUCCESS)
      entered = 1;
    if (r == CUDA_SUCCESS) {
      mp->prefetches++;
      r = mp->drv->MemPrefetchAsync(p, size, mp->dev, CU_STREAM_LEGACY);
      if (r != CUDA_SUCCESS)
        cuemm__driver_error(r, "cuMemPrefetchAsync(0x%llx, %zu bytes, device %d) of a new managed block "
                            "(CUEMM_MANAGED_PREFETCH=1); the allocation was undone", (unsigned long long)p, size,
                            (int)mp->dev);
    }
    if (r != CUDA_SUCCESS) {
      cuemm__owned_drop(&m->owned, (uintptr_t)p);
      cuemm__sa_free(&mp->sa, blk);
      return entered ? cuemm__ctx_leave(m, &g, r) : r;
    }
  }
  if (entered && (r = cuemm__ctx_leave(m, &g, CUDA_SUCCESS)) != CUDA_SUCCESS) {
    cuemm__owned_drop(&m->owned, (uintptr_t)p);
    cuemm__sa_free(&mp->sa, blk);
    return r;
  }
  /* The warning is given once, by the allocation that crossed the line:
   * the call succeeds and leaves it as the thread's message. */
  if (!warned && mp->warning[0])
    cuemm__error(CUDA_SUCCESS, "%s", mp->warning);
  *out = p;
  return CUDA_SUCCESS;
}

CUresult cuemm__managed_alloc(cuemm_manager *m, CUdeviceptr *p, size_t size)
{
  cuemm__lock_acquire(&m->lock);
  CUresult r;
  CUdeviceptr out = 0;
  if (size == 0)
    r = cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_allocate: size is 0 (%s refuses zero-byte allocations)",
                     m->managed->kind == CUEMM_MEMORY_MANAGED ? "cuMemAllocManaged" : "the system allocator");
  else if (m->managed->kind == CUEMM_MEMORY_MANAGED)
    r = managed_alloc(m, size, &out);
  else
    r = system_alloc(m, size, &out);
  if (r == CUDA_SUCCESS) {
    cuemm__account_alloc(m, size);
    *p = out;
  } else
    m->st.alloc_failures++;
  cuemm__lock_release(&m->lock);
  return r;
}

CUresult cuemm__managed_release(cuemm_manager *m, cuemm__kind kind, uintptr_t p, size_t size)
{
  cuemm__managed *mp = m->managed;
  cuemm__owned_entry *e = cuemm__owned_find(&m->owned, p);
  if (e && e->pending)
    mp->pending--;
  if (kind == CUEMM__KIND_SYSTEM) {
    free((void *)p);
    mp->system_bytes -= size;
    mp->system_count--;
  } else if (e)
    cuemm__sa_free(&mp->sa, e->aux);
  return CUDA_SUCCESS;
}

/* ---- prefetch and advice ------------------------------------------------------------ */

typedef struct find_walk {
  uintptr_t p;
  const cuemm__owned_entry *hit;
} find_walk;

static void find_one(cuemm__owned_entry *e, void *arg)
{
  find_walk *w = arg;
  if ((e->kind == CUEMM__KIND_MANAGED || e->kind == CUEMM__KIND_SYSTEM) && w->p >= e->key &&
      w->p - e->key < e->size)
    w->hit = e;
}

/* Checks that [p, p + *size) lies in one live managed or system block of m
 * (size 0: up to its end).  Lock held. */
static CUresult check_range(cuemm_manager *m, const char *fn, CUdeviceptr p, size_t *size)
{
  if (!m->managed)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "%s: this manager hands out device memory; prefetch and advice "
                        "apply to managed memory (create the manager with CUEMM_MEMORY=managed, or "
                        "cuemm_config.memory = CUEMM_MEMORY_MANAGED)", fn);
  find_walk w = { (uintptr_t)p, NULL };
  cuemm__owned_each(&m->owned, find_one, &w);
  if (!w.hit)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "%s: 0x%llx lies in no live managed block of this manager "
                        "(another manager's or the driver's memory, or a block already freed)", fn,
                        (unsigned long long)p);
  if (w.hit->pending)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "%s: 0x%llx lies in a block that was freed (0x%" PRIxPTR ", %zu "
                        "bytes, waiting in the pending queue)", fn, (unsigned long long)p, w.hit->key, w.hit->size);
  size_t off = (size_t)((uintptr_t)p - w.hit->key);
  if (*size == 0)
    *size = w.hit->size - off;
  else if (*size > w.hit->size - off)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "%s: [0x%llx, +%zu bytes) runs past the end of its block "
                        "[0x%" PRIxPTR ", +%zu bytes) by %zu bytes", fn, (unsigned long long)p, *size, w.hit->key,
                        w.hit->size, *size - (w.hit->size - off));
  return CUDA_SUCCESS;
}

static CUresult check_device(cuemm_manager *m, const char *fn, const char *arg, CUdevice dev)
{
  if (dev == CU_DEVICE_CPU)
    return CUDA_SUCCESS;
  int count = 0;
  CUresult r = m->drv->DeviceGetCount(&count);
  if (r != CUDA_SUCCESS)
    return cuemm__driver_error(r, "cuDeviceGetCount");
  if (dev < 0 || dev >= count)
    return cuemm__error(CUDA_ERROR_INVALID_DEVICE, "%s: %s %d is neither a device (%d devices) nor CU_DEVICE_CPU",
                        fn, arg, (int)dev, count);
  return CUDA_SUCCESS;
}

static void device_name(CUdevice dev, char *buf, size_t n)
{
  if (dev == CU_DEVICE_CPU)
    snprintf(buf, n, "CU_DEVICE_CPU");
  else
    snprintf(buf, n, "device %d", (int)dev);
}

CUEMM_EXTERN CUresult cuemm_prefetch(cuemm_manager *m, CUdeviceptr p, size_t size, CUdevice dst, CUstream stream)
{
  if (!m)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_prefetch: manager is NULL");
  if (!p)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_prefetch: p is NULL");
  if (!m->drv->MemPrefetchAsync)
    return cuemm__error(CUDA_ERROR_NOT_SUPPORTED, "cuemm_prefetch: the CUDA driver %s has no cuMemPrefetchAsync",
                        m->drv->path);
  CUresult r = check_device(m, "cuemm_prefetch", "dst", dst);
  if (r != CUDA_SUCCESS)
    return r;
  cuemm__lock_acquire(&m->lock);
  if ((r = check_range(m, "cuemm_prefetch", p, &size)) == CUDA_SUCCESS) {
    cuemm__ctx_guard g;
    if ((r = cuemm__ctx_enter(m, &g)) == CUDA_SUCCESS) {
      m->managed->prefetches++;
      r = m->drv->MemPrefetchAsync(p, size, dst, stream);
      if (r != CUDA_SUCCESS) {
        char where[32];
        device_name(dst, where, sizeof where);
        cuemm__driver_error(r, "cuMemPrefetchAsync(0x%llx, %zu bytes, %s)", (unsigned long long)p, size, where);
      }
      r = cuemm__ctx_leave(m, &g, r);
    }
  }
  cuemm__lock_release(&m->lock);
  return r;
}

CUEMM_EXTERN CUresult cuemm_advise(cuemm_manager *m, CUdeviceptr p, size_t size, CUmem_advise advice, CUdevice device)
{
  if (!m)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_advise: manager is NULL");
  if (!p)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_advise: p is NULL");
  if ((int)advice < CU_MEM_ADVISE_SET_READ_MOSTLY || (int)advice > CU_MEM_ADVISE_UNSET_ACCESSED_BY)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_advise: advice %d is not one of CU_MEM_ADVISE_SET_READ_MOSTLY "
                        "(1) .. CU_MEM_ADVISE_UNSET_ACCESSED_BY (6)", (int)advice);
  if (!m->drv->MemAdvise)
    return cuemm__error(CUDA_ERROR_NOT_SUPPORTED, "cuemm_advise: the CUDA driver %s has no cuMemAdvise", m->drv->path);
  CUresult r = check_device(m, "cuemm_advise", "device", device);
  if (r != CUDA_SUCCESS)
    return r;
  cuemm__lock_acquire(&m->lock);
  if ((r = check_range(m, "cuemm_advise", p, &size)) == CUDA_SUCCESS) {
    cuemm__ctx_guard g;
    if ((r = cuemm__ctx_enter(m, &g)) == CUDA_SUCCESS) {
      m->managed->advises++;
      r = m->drv->MemAdvise(p, size, advice, device);
      if (r != CUDA_SUCCESS) {
        char where[32];
        device_name(device, where, sizeof where);
        cuemm__driver_error(r, "cuMemAdvise(0x%llx, %zu bytes, advice %d, %s)", (unsigned long long)p, size,
                            (int)advice, where);
      }
      r = cuemm__ctx_leave(m, &g, r);
    }
  }
  cuemm__lock_release(&m->lock);
  return r;
}

/* ---- trim and statistics --------------------------------------------------------------- */

CUEMM_EXTERN CUresult cuemm_managed_trim(cuemm_manager *m)
{
  if (!m)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_managed_trim: manager is NULL");
  if (!m->managed || m->managed->kind != CUEMM_MEMORY_MANAGED)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_managed_trim: this manager has no managed memory (create "
                        "it with CUEMM_MEMORY=managed or cuemm_config.memory = CUEMM_MEMORY_MANAGED)");
  cuemm__lock_acquire(&m->lock);
  CUresult r = m->managed->flush(m);
  if (r == CUDA_SUCCESS) {
    cuemm__ctx_guard g;
    if ((r = cuemm__ctx_enter(m, &g)) == CUDA_SUCCESS) {
      r = release(m->managed, 0);
      r = cuemm__ctx_leave(m, &g, r);
    }
  }
  cuemm__lock_release(&m->lock);
  return r;
}

CUEMM_EXTERN CUresult cuemm_managed_get_stats(cuemm_manager *m, cuemm_managed_stats *s)
{
  if (!m || !s)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_managed_get_stats: %s is NULL", m ? "s" : "manager");
  cuemm__lock_acquire(&m->lock);
  memset(s, 0, sizeof *s);
  const cuemm__managed *mp = m->managed;
  if (mp) {
    s->memory = mp->kind;
    s->device_total = mp->total;
    s->held_bytes = mp->held;
    s->peak_held_bytes = mp->peak_held;
    s->segments = mp->segments;
    s->segment_bytes = mp->unit;
    s->used_bytes = mp->kind == CUEMM_MEMORY_MANAGED ? mp->sa.used_bytes : 0;
    s->free_bytes = mp->held - s->used_bytes;
    s->limit = mp->limit;
    s->system_bytes = mp->system_bytes;
    s->system_count = mp->system_count;
    s->segments_allocated = mp->segments_allocated;
    s->segments_released = mp->segments_released;
    s->oversubscribed_grows = mp->oversubscribed_grows;
    s->limit_refusals = mp->limit_refusals;
    s->prefetches = mp->prefetches;
    s->advises = mp->advises;
    s->oversubscription = mp->total ? (double)mp->held / (double)mp->total : 0;
    snprintf(s->warning, sizeof s->warning, "%s", mp->warning);
  }
  cuemm__lock_release(&m->lock);
  return CUDA_SUCCESS;
}
