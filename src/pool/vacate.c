/* vacate.c: owns the pool's side of a suspension: the walk of the
 * blocks handed out that suspend.c's host copy follows, the unmapping and
 * release of every chunk, the chunks forgotten because their blocks were
 * all freed meanwhile, the remapping at resumption, and the ranges sent to
 * other processes, which a suspension must not release unasked.  The order
 * of the steps, the calls a suspension refuses and the host copy are
 * suspend.c's; the chunk table and the growth whose pieces a resumption
 * repeats are pool.c's.
 *
 * A suspended chunk keeps its units and its blocks in the sub-allocator:
 * only its physical memory goes, so live pointers keep their addresses and
 * a resumption maps memory under them again.  Adjacent suspended chunks
 * come back as one run, cut into pieces as a growth would cut it now and
 * opened with one cuMemSetAccess per run, for the reasons pool.c gives for
 * growth.  The memory a resumption creates is new: each chunk gets a new
 * serial, so that a handle sent of the old memory no longer names it.
 */
#include <stdio.h>
#include <stdlib.h>

#include "base/internal.h"
#include "trace/internal.h"
#include "pool/piece.h"
#include "pool/share.h"
#include "pool/vacate.h"
#include "suballoc/internal.h"

/* ---- the blocks handed out --------------------------------------------------- */

void cuemm__vacate_each_live_in(const cuemm__pool *p, size_t off, size_t size,
                              void (*fn)(void *arg, size_t off, size_t size), void *arg)
{
  const cuemm__sa *sa = &p->sa;
  size_t end = off + size, run = 0, run_end = 0;
  int open = 0;
  uint32_t i = off ? cuemm__sa_find(sa, off) : 0;
  for (; i != CUEMM__SA_NIL && sa->b[i].off < end; i = sa->b[i].next) {
    const cuemm__sa_block *b = &sa->b[i];
    if (b->state != CUEMM__SA_USED) {
      if (open)
        fn(arg, run, run_end - run);
      open = 0;
      continue;
    }
    size_t s = b->off > off ? b->off : off, e = b->off + b->size < end ? b->off + b->size : end;
    if (open && s == run_end)
      run_end = e;
    else {
      if (open)
        fn(arg, run, run_end - run);
      run = s, run_end = e, open = 1;
    }
  }
  if (open)
    fn(arg, run, run_end - run);
}

void cuemm__vacate_each_live_run(const cuemm__pool *p, void (*fn)(void *arg, size_t off, size_t size), void *arg)
{
  cuemm__vacate_each_live_in(p, 0, p->reserved, fn, arg);
}

/* ---- the chunks -------------------------------------------------------------- */

static int holds_memory(const cuemm__pool_unit *h)
{
  return h->state == CUEMM__CHUNK_CREATED || h->state == CUEMM__CHUNK_MAPPED || h->state == CUEMM__CHUNK_ACCESSIBLE;
}

CUresult cuemm__vacate_unmap_all(cuemm__pool *p)
{
  const cuemm__driver_table *d = p->drv;
  cuemm__first_error first = CUEMM__FIRST_ERROR_INIT;
  size_t held = 0, held_chunks = 0;
  for (size_t u = 0; u < p->nunits; u = cuemm__runs_next(p->runs, u)) {
    cuemm__pool_unit *h = &p->units[u];
    if (!cuemm__runs_is_head(p->runs, u) || !holds_memory(h))
      continue;
    size_t bytes = cuemm__runs_units(p->runs, u) * p->unit;
    CUdeviceptr at = cuemm__pool_unit_addr(p, u);
    CUresult r = CUDA_SUCCESS;
    if (h->state == CUEMM__CHUNK_MAPPED || h->state == CUEMM__CHUNK_ACCESSIBLE) {
      cuemm__nvtx_chunk_unmapping(p->nvtx, at);
      r = d->MemUnmap(at, bytes);
      if (r != CUDA_SUCCESS) {
        if (h->state == CUEMM__CHUNK_ACCESSIBLE)
          cuemm__pool_nvtx_mapped(p, u, cuemm__runs_units(p->runs, u));
        cuemm__driver_error(r, "cuMemUnmap(0x%llx, %zu bytes) suspending the pool", (unsigned long long)at, bytes);
      } else
        h->state = CUEMM__CHUNK_CREATED;
    }
    if (r == CUDA_SUCCESS && h->has_handle) {
      r = d->MemRelease(h->handle);
      if (r != CUDA_SUCCESS)
        cuemm__driver_error(r, "cuMemRelease(chunk at 0x%llx, %zu bytes) suspending the pool",
                            (unsigned long long)at, bytes);
      else {
        h->has_handle = 0;
        cuemm__piece_released((int)p->dev, (double)cuemm__now_ns());
      }
    }
    if (r != CUDA_SUCCESS) {
      held += bytes;
      held_chunks++;
      cuemm__first_note(&first, r);
      continue;
    }
    h->state = CUEMM__CHUNK_SUSPENDED;
    atomic_fetch_sub_explicit(&p->mapped, bytes, memory_order_relaxed);
    p->chunks--;
    p->chunks_released++;
    cuemm__log_note(p->log, "suspend-release", bytes);
  }
  CUresult r = cuemm__first_end(&first);
  if (r != CUDA_SUCCESS)
    cuemm__error_append("; %zu chunks (%zu bytes) still hold memory: cuemm_pool_suspend tries them again, "
                        "cuemm_pool_resume maps them back", held_chunks, held);
  return r;
}

void cuemm__vacate_forget_free(cuemm__pool *p)
{
  uint32_t *cand;
  size_t n;
  cuemm__pool_free_chunks(p, &cand, &n); /* out of host memory: the chunks not listed are mapped again */
  for (size_t k = 0; k < n; k++) {
    cuemm__pool_unit *h = &p->units[cand[k]];
    if (h->state != CUEMM__CHUNK_SUSPENDED || cuemm__sa_reserve(&p->sa, 2) != 0)
      continue;
    cuemm__sa_drain(&p->sa, (size_t)cand[k] * p->unit, cuemm__runs_units(p->runs, cand[k]) * p->unit);
    h->state = CUEMM__CHUNK_EMPTY;
    cuemm__runs_clear(p->runs, cand[k]);
  }
  free(cand);
}

/* Creates and maps the pieces of run [head, head + n) of suspended units,
 * now one record. */
static CUresult remap_run(cuemm__pool *p, size_t head, size_t n)
{
  const cuemm__driver_table *d = p->drv;
  size_t bytes = n * p->unit;
  size_t pu = cuemm__pool_piece_size(p, bytes) / p->unit;
  if (!pu)
    pu = n;
  CUmemAllocationProp prop = cuemm__pool_chunk_prop(p->dev, p->ipc);
  for (size_t u = head, end = head + n; u < end;) {
    size_t k = end - u < pu ? end - u : pu, kb = k * p->unit;
    CUdeviceptr at = cuemm__pool_unit_addr(p, u);
    /* The rest of the run stays one suspended record, so that a failure
     * leaves every unit in a chunk. */
    if (u + k < end)
      cuemm__pool_chunk_mark(p, u + k, end - u - k, CUEMM__CHUNK_SUSPENDED);
    cuemm__pool_chunk_mark(p, u, k, CUEMM__CHUNK_SUSPENDED);
    cuemm__pool_unit *h = &p->units[u];
    CUresult r = d->MemCreate(&h->handle, kb, &prop, 0);
    if (r != CUDA_SUCCESS)
      return cuemm__driver_error(r, "cuMemCreate(%zu bytes on device %d) resuming the pool", kb, (int)p->dev);
    h->has_handle = 1;
    h->state = CUEMM__CHUNK_CREATED;
    h->serial = ++p->next_serial; /* new memory: what was sent of the old is no longer it */
    atomic_fetch_add_explicit(&p->mapped, kb, memory_order_relaxed);
    p->chunks++;
    p->chunks_mapped++;
    r = d->MemMap(at, kb, 0, h->handle, 0);
    if (r != CUDA_SUCCESS)
      return cuemm__driver_error(r, "cuMemMap(0x%llx, %zu bytes) resuming the pool", (unsigned long long)at, kb);
    h->state = CUEMM__CHUNK_MAPPED;
    u += k;
  }
  return CUDA_SUCCESS;
}

/* The end of the run of adjacent chunks from head unit u that are all in
 * `state`: one driver call covers such a run. */
static size_t chunk_run_end(const cuemm__pool *p, size_t u, uint8_t state)
{
  size_t end = u;
  while (end < p->nunits && cuemm__runs_is_head(p->runs, end) && p->units[end].state == state)
    end += cuemm__runs_units(p->runs, end);
  return end;
}

static CUresult remap_steps(cuemm__pool *p)
{
  const cuemm__driver_table *d = p->drv;
  /* Runs of suspended chunks become one record each, cut again into pieces
   * of the size growth would choose now; chunks whose handle survived a
   * failed release are mapped as they are. */
  for (size_t u = 0; u < p->nunits;) {
    cuemm__pool_unit *h = &p->units[u];
    int is_head = cuemm__runs_is_head(p->runs, u);
    size_t bytes = cuemm__runs_units(p->runs, u) * p->unit;
    if (is_head && h->state == CUEMM__CHUNK_CREATED) {
      CUresult r = d->MemMap(cuemm__pool_unit_addr(p, u), bytes, 0, h->handle, 0);
      if (r != CUDA_SUCCESS)
        return cuemm__driver_error(r, "cuMemMap(0x%llx, %zu bytes) resuming the pool",
                                   (unsigned long long)cuemm__pool_unit_addr(p, u), bytes);
      h->state = CUEMM__CHUNK_MAPPED;
    }
    if (!is_head || h->state != CUEMM__CHUNK_SUSPENDED) {
      u = cuemm__runs_next(p->runs, u);
      continue;
    }
    size_t end = chunk_run_end(p, u, CUEMM__CHUNK_SUSPENDED);
    cuemm__pool_chunk_mark(p, u, end - u, CUEMM__CHUNK_SUSPENDED);
    CUresult r = remap_run(p, u, end - u);
    if (r != CUDA_SUCCESS)
      return r;
    u = end;
  }
  /* Access once per run of adjacent mapped chunks. */
  for (size_t u = 0; u < p->nunits;) {
    if (!cuemm__runs_is_head(p->runs, u) || p->units[u].state != CUEMM__CHUNK_MAPPED) {
      u = cuemm__runs_next(p->runs, u);
      continue;
    }
    size_t end = chunk_run_end(p, u, CUEMM__CHUNK_MAPPED);
    size_t bytes = (end - u) * p->unit;
    CUresult r = d->MemSetAccess(cuemm__pool_unit_addr(p, u), bytes, p->access, p->naccess);
    if (r != CUDA_SUCCESS)
      return cuemm__driver_error(r, "cuMemSetAccess(0x%llx, %zu bytes, %u devices) resuming the pool",
                                 (unsigned long long)cuemm__pool_unit_addr(p, u), bytes, p->naccess);
    for (size_t k = u; k < end; k = cuemm__runs_next(p->runs, k)) {
      p->units[k].state = CUEMM__CHUNK_ACCESSIBLE;
      cuemm__pool_nvtx_mapped(p, k, cuemm__runs_units(p->runs, k));
    }
    u = end;
  }
  return CUDA_SUCCESS;
}

CUresult cuemm__vacate_remap_all(cuemm__pool *p)
{
  CUresult r = remap_steps(p);
  if (r == CUDA_SUCCESS)
    return CUDA_SUCCESS;
  cuemm__saved_error why;
  cuemm__error_save(&why);
  CUresult undo = cuemm__vacate_unmap_all(p);
  if (undo != CUDA_SUCCESS) {
    cuemm__error_prefix(r, "%s; undoing the resumption", cuemm__error_saved_text(&why));
    cuemm__error_discard(&why);
    return r;
  }
  cuemm__error_restore(&why, r);
  cuemm__error_append("; what the resumption mapped is released again");
  return r;
}

/* ---- ranges sent to other processes ------------------------------------------ */

int cuemm__vacate_note_sent(cuemm__pool *p, CUdeviceptr addr, size_t size, uint64_t serial)
{
  for (size_t i = 0; i < p->nsent; i++)
    if (p->sent[i].addr == addr && p->sent[i].size == size && p->sent[i].serial == serial)
      return 0;
  if (p->nsent == p->capsent) {
    size_t c = p->capsent ? p->capsent * 2 : 8;
    cuemm__pool_sent *g = realloc(p->sent, c * sizeof *g);
    if (!g)
      return -1;
    p->sent = g;
    p->capsent = c;
  }
  p->sent[p->nsent++] = (cuemm__pool_sent){ addr, size, serial };
  return 0;
}

size_t cuemm__vacate_sent_live(cuemm__pool *p, cuemm__pool_sent *out, size_t max)
{
  size_t n = 0;
  for (size_t i = 0; i < p->nsent;) {
    cuemm__pool_sent *e = &p->sent[i];
    uint32_t b = cuemm__sa_find(&p->sa, (size_t)(e->addr - p->base));
    long head = cuemm__share_find_serial(p, e->serial);
    if (head < 0 || b == CUEMM__SA_NIL || p->sa.b[b].state != CUEMM__SA_USED) {
      *e = p->sent[--p->nsent];
      continue;
    }
    if (n < max)
      out[n] = *e;
    n++;
    i++;
  }
  return n;
}
