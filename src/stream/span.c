/* span.c: owns the spans (span.h): their table in the manager, the cutting
 * of blocks from them and the taking back, and the owned entry a span
 * block gets once another thread reaches it.  It never calls the driver and
 * never enters the pool's sub-allocator: a span's own pool block is made
 * and given back by exchange.c.
 */
#include <stdlib.h>

#include "stream/heap.h"
#include "core/internal.h"
#include "pool/internal.h"
#include "stream/span.h"
#include "suballoc/internal.h"

static inline uint32_t make_blk(uint32_t id, uint32_t d)
{
  return CUEMM__SPAN_BIT | id << CUEMM__SPAN_ID_SHIFT | d;
}

static inline cuemm__span *span_of(const cuemm_manager *m, uint32_t blk)
{
  return m->spans[cuemm__span_id(blk)];
}

uint32_t cuemm__span_cut(cuemm__heap *h, uint32_t hs, size_t rs, size_t req)
{
  cuemm__span *sp = h->st[hs].span;
  if (!sp)
    return CUEMM__HEAP_NIL;
  uint32_t d = cuemm__sa_alloc(&sp->sa, rs);
  if (d == CUEMM__SA_NIL)
    return CUEMM__HEAP_NIL;
  if (d > CUEMM__SPAN_DESC_MASK) {
    cuemm__sa_free(&sp->sa, d); /* more descriptors than a block can name: cannot happen at these sizes */
    return CUEMM__HEAP_NIL;
  }
  size_t got = sp->sa.b[d].size;
  uint32_t r = cuemm__heap_insert(h, sp->base + sp->sa.b[d].off, got, make_blk(sp->id, d), hs, req);
  if (r == CUEMM__HEAP_NIL) {
    cuemm__sa_free(&sp->sa, d);
    return CUEMM__HEAP_NIL;
  }
  sp->live += got;
  h->allocs++;
  return r;
}

cuemm__span *cuemm__span_make(cuemm_manager *m, cuemm__heap *h, uint32_t hs, uintptr_t base, size_t size,
                              uint32_t pblk, cuemm__span **old)
{
  *old = NULL;
  if (!m->spans && !(m->spans = calloc(CUEMM__SPAN_MAX, sizeof *m->spans)))
    return NULL;
  uint32_t id = m->span_next;
  for (uint32_t k = 0; k < CUEMM__SPAN_MAX && m->spans[id]; k++)
    id = (id + 1) % CUEMM__SPAN_MAX;
  if (m->spans[id])
    return NULL;
  cuemm__span *sp = calloc(1, sizeof *sp);
  if (!sp)
    return NULL;
  if (cuemm__sa_init(&sp->sa, size) != 0 || cuemm__sa_reserve(&sp->sa, 4) != 0) {
    cuemm__sa_fini(&sp->sa);
    free(sp);
    return NULL;
  }
  cuemm__sa_fill(&sp->sa, 0, size);
  sp->base = base;
  sp->size = size;
  sp->pblk = pblk;
  sp->id = id;
  sp->h = h;
  sp->s = h->st[hs].s;
  sp->hs = hs;
  sp->current = 1;
  m->spans[id] = sp;
  m->span_next = (id + 1) % CUEMM__SPAN_MAX;
  m->nspans++;
  cuemm__span *was = h->st[hs].span;
  if (was) {
    was->current = 0;
    if (!was->live)
      *old = was;
  }
  h->st[hs].span = sp;
  return sp;
}

cuemm__span *cuemm__span_at(const cuemm_manager *m, uint32_t id)
{
  return m->spans && id < CUEMM__SPAN_MAX ? m->spans[id] : NULL;
}

/* Block d of span sp back into it. */
static int take_back(cuemm__span *sp, uint32_t d)
{
  sp->live -= sp->sa.b[d].size;
  cuemm__sa_free(&sp->sa, d);
  return !sp->live && !sp->current;
}

int cuemm__span_free(cuemm_manager *m, cuemm__heap *h, uint32_t r)
{
  cuemm__span *sp = span_of(m, h->b[r].blk);
  uint32_t d = cuemm__span_desc(h->b[r].blk);
  h->frees++;
  cuemm__heap_remove(h, r);
  return take_back(sp, d);
}

int cuemm__span_take_back(cuemm_manager *m, uint32_t blk, CUstream stream, int idle)
{
  cuemm__span *sp = span_of(m, blk);
  if (!idle && (sp->retired || (stream ? stream : CU_STREAM_LEGACY) != sp->s))
    return -1;
  return take_back(sp, cuemm__span_desc(blk)) ? (int)sp->id + 1 : 0;
}

cuemm__span *cuemm__span_unregister(cuemm_manager *m, uint32_t id)
{
  cuemm__span *sp = m->spans[id];
  m->spans[id] = NULL;
  m->nspans--;
  if (sp->current && sp->h->st[sp->hs].span == sp)
    sp->h->st[sp->hs].span = NULL;
  return sp;
}

void cuemm__span_destroy(cuemm__span *sp)
{
  cuemm__sa_fini(&sp->sa);
  free(sp);
}

void cuemm__span_give_idle(void *arg, uint32_t blk)
{
  cuemm_manager *m = arg;
  cuemm__span *sp = m->spans ? span_of(m, blk) : NULL;
  if (!sp)
    return; /* the manager is being destroyed: its spans went with the heaps, their memory goes with the pool */
  cuemm__heap *h = sp->h;
  cuemm__heap_lock(h);
  take_back(sp, cuemm__span_desc(blk));
  if (!sp->live) {
    /* After the flush's synchronization the span's memory is idle too.
     * Blocks come back this way seldom (a trim, cuemm_free, frees on
     * other streams): an empty span goes, current or not. */
    cuemm__span_unregister(m, sp->id);
    cuemm__pool_give(m->pool, sp->pblk);
    cuemm__span_destroy(sp);
  }
  cuemm__heap_unlock(h);
}

size_t cuemm__span_detach(cuemm_manager *m, cuemm__heap *h, uint32_t hs, cuemm__span **empty, size_t cap,
                          size_t *n)
{
  size_t bytes = 0;
  *n = 0;
  if (!m->spans)
    return 0;
  for (uint32_t id = 0; id < CUEMM__SPAN_MAX; id++) {
    cuemm__span *sp = m->spans[id];
    if (!sp || sp->h != h || (hs != CUEMM__HEAP_NIL && sp->hs != hs))
      continue;
    if (hs != CUEMM__HEAP_NIL) {
      /* Its stream is retired: no more blocks from it, and it goes back
       * through a flush. */
      sp->retired = 1;
      if (sp->current)
        h->st[hs].span = NULL;
      sp->current = 0;
    }
    if (!sp->live && *n < cap) {
      if (sp->current)
        h->st[sp->hs].span = NULL;
      sp->current = 0;
      empty[(*n)++] = sp;
      bytes += sp->size;
    }
  }
  return bytes;
}

cuemm__owned_entry *cuemm__span_own(cuemm_manager *m, uintptr_t p)
{
  if (!m->spans || !m->nspans)
    return NULL;
  for (uint32_t id = 0; id < CUEMM__SPAN_MAX; id++) {
    cuemm__span *sp = m->spans[id];
    if (!sp || p < sp->base || p - sp->base >= sp->size)
      continue;
    cuemm__heap *h = sp->h;
    cuemm__heap_lock(h);
    uint32_t d = cuemm__sa_find(&sp->sa, p - sp->base);
    uintptr_t start = d == CUEMM__SA_NIL || sp->sa.b[d].state != CUEMM__SA_USED ? 0 : sp->base + sp->sa.b[d].off;
    uint32_t r = start ? cuemm__heap_find(h, start) : CUEMM__HEAP_NIL;
    cuemm__owned_entry *e = NULL;
    if (r != CUEMM__HEAP_NIL && cuemm__span_blk(h->b[r].blk)) {
      e = cuemm__owned_find(&m->owned, start);
      if (!e && cuemm__owned_add(&m->owned, start, h->b[r].size, CUEMM__KIND_STREAM, h->index) == 0) {
        h->b[r].blk |= CUEMM__SPAN_OWNED;
        e = cuemm__owned_find(&m->owned, start);
      }
    }
    cuemm__heap_unlock(h);
    return e;
  }
  return NULL;
}

void cuemm__span_stats(const cuemm_manager *m, const cuemm__heap *h, size_t *count, size_t *bytes, size_t *free_b)
{
  if (m->spans)
    for (uint32_t id = 0; id < CUEMM__SPAN_MAX; id++) {
      const cuemm__span *sp = m->spans[id];
      if (sp && sp->h == h) {
        *count += 1;
        *bytes += sp->size;
        *free_b += sp->size - sp->live;
      }
    }
}

void cuemm__span_fini_all(cuemm_manager *m)
{
  if (!m->spans)
    return;
  for (uint32_t id = 0; id < CUEMM__SPAN_MAX; id++)
    if (m->spans[id])
      cuemm__span_destroy(m->spans[id]);
  free(m->spans);
  m->spans = NULL;
  m->nspans = 0;
}

const cuemm__span *cuemm__span_based(const cuemm_manager *m, uintptr_t base)
{
  if (m->spans && m->nspans)
    for (uint32_t id = 0; id < CUEMM__SPAN_MAX; id++)
      if (m->spans[id] && m->spans[id]->base == base)
        return m->spans[id];
  return NULL;
}

void cuemm__span_live_runs(const cuemm_manager *m, uintptr_t base, size_t off, size_t size,
                           void (*fn)(void *arg, size_t off, size_t size), void *arg)
{
  size_t at = off, end = off + size;
  while (at < end) {
    const cuemm__span *next = NULL;
    if (m->spans && m->nspans)
      for (uint32_t id = 0; id < CUEMM__SPAN_MAX; id++) {
        const cuemm__span *sp = m->spans[id];
        if (sp && sp->base + sp->size > base + at && sp->base < base + end && (!next || sp->base < next->base))
          next = sp;
      }
    if (!next) {
      fn(arg, at, end - at);
      return;
    }
    size_t s0 = next->base - base, run = 0, run_end = 0;
    if (s0 > at)
      fn(arg, at, s0 - at);
    int open = 0;
    for (uint32_t i = 0; i != CUEMM__SA_NIL && i < next->sa.cap; i = next->sa.b[i].next) {
      const cuemm__sa_block *b = &next->sa.b[i];
      if (b->state != CUEMM__SA_USED) {
        if (open)
          fn(arg, run, run_end - run);
        open = 0;
        continue;
      }
      if (open && s0 + b->off == run_end)
        run_end += b->size;
      else {
        if (open)
          fn(arg, run, run_end - run);
        run = s0 + b->off, run_end = run + b->size, open = 1;
      }
    }
    if (open)
      fn(arg, run, run_end - run);
    at = s0 + next->size;
  }
}

void cuemm__span_each(const cuemm__span *sp, void (*fn)(uintptr_t ptr, size_t size, int cut, void *arg), void *arg)
{
  cuemm__heap_lock(sp->h);
  for (uint32_t i = 0; i != CUEMM__SA_NIL && i < sp->sa.cap; i = sp->sa.b[i].next) {
    const cuemm__sa_block *b = &sp->sa.b[i];
    if (b->state != CUEMM__SA_HOLE && b->state != CUEMM__SA_SPARE && b->size)
      fn(sp->base + b->off, b->size, b->state == CUEMM__SA_USED, arg);
  }
  cuemm__heap_unlock(sp->h);
}
