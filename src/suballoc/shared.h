/* shared.h: what the files of the pool's sub-allocator share.
 *
 * The sub-allocator (interface in suballoc.h) is split by concern:
 * suballoc.c owns placement (the fits, splitting a block to size, the
 * descriptors, stream tags, the queries); suballoc-merge.c merging a freed
 * block with its free neighbours, and the frees that merge at once;
 * suballoc-coalesce.c the deferred coalescing of the caches of freed
 * sizes; suballoc-hole.c holes, the unmapped space that growth fills and
 * release drains; suballoc-check.c the invariant check the tests run.
 * This header holds the bins and lists that all of them link blocks into,
 * inline because the allocation and free paths take them at every block.
 * What one file calls in another is declared in the callee's header, and
 * calls go one way: allocation coalesces the caches when it finds no
 * block, and coalescing merges, so merging sits below both and calls
 * neither; growth, release and the check sit above them all.
 *
 * Segregated free lists with bitmaps, in the manner of TLSF: a free block
 * sits in the bin of its size; small sizes (below 16 KiB) have a bin per
 * 256-byte size class; larger sizes have sixteen bins per power of two.
 * Each tag has bins of its own, and its free blocks of CUEMM__SA_LOW_FIT
 * or more are in its tree as well (addrtree.c).
 */
#ifndef CUEMM_SUBALLOC_SHARED_H
#define CUEMM_SUBALLOC_SHARED_H

#include <string.h>

#include "suballoc/suballoc.h"

#define NIL CUEMM__SA_NIL

/* The `bin` of a FREE block out of every list for a moment: one that
 * move_tag (suballoc.c) has taken out of its tag's lists and not yet
 * merged.  A merge that absorbs it has nothing to unlink. */
#define DETACHED 0xffffu

/* ---- bins ----------------------------------------------------------------- */

static inline unsigned cuemm__sa_bin_of(size_t size)
{
  size_t u = size / CUEMM__SA_ALIGN;
  if (u < 64)
    return (unsigned)u;
  unsigned fl = 63u - (unsigned)__builtin_clzll((unsigned long long)u);
  unsigned sl = (unsigned)(u >> (fl - 4)) & 15u;
  unsigned bin = 64 + (fl - 6) * 16 + sl;
  return bin < CUEMM__SA_NBINS ? bin : CUEMM__SA_NBINS - 1;
}

static inline void cuemm__sa_bins_init(cuemm__sa_bins *bs)
{
  memset(bs, 0, sizeof *bs);
  bs->tree = NIL;
  for (unsigned k = 0; k < CUEMM__SA_NBINS; k++)
    bs->heads[k] = NIL;
}

/* The bins of a FREE block's tag (which exist: the block is in them). */
static inline cuemm__sa_bins *cuemm__sa_bins_at(const cuemm__sa *s, uint32_t tag)
{
  return tag ? s->tagged[tag - 1] : (cuemm__sa_bins *)&s->idle;
}

/* ---- lists ---------------------------------------------------------------- */

/* FREE block i joins the bins of its tag (not its tree).  The free and
 * alloc paths' own helper, kept apart from cuemm__sa_list_add so that they inline it
 * whole. */
static inline __attribute__((always_inline)) void cuemm__sa_bins_link(cuemm__sa *s, uint32_t i)
{
  cuemm__sa_block *b = &s->b[i];
  cuemm__sa_bins *bs = cuemm__sa_bins_at(s, b->tag);
  unsigned bin = cuemm__sa_bin_of(b->size);
  b->bin = (uint16_t)bin;
  uint32_t *head = &bs->heads[bin];
  bs->bitmap[bin / 64] |= (uint64_t)1 << (bin % 64);
  bs->bytes += b->size;
  bs->count++;
  if (b->tag)
    s->tagged_bytes += b->size;
  s->free_count++;
  b->lprev = NIL;
  b->lnext = *head;
  if (*head != NIL)
    s->b[*head].lprev = i;
  *head = i;
}

/* FREE block i leaves its bin (not its tree). */
static inline __attribute__((always_inline)) void cuemm__sa_bins_unlink(cuemm__sa *s, uint32_t i)
{
  cuemm__sa_block *b = &s->b[i];
  cuemm__sa_bins *bs = cuemm__sa_bins_at(s, b->tag);
  uint32_t *head = &bs->heads[b->bin];
  if (b->lprev != NIL)
    s->b[b->lprev].lnext = b->lnext;
  else if ((*head = b->lnext) == NIL)
    bs->bitmap[b->bin / 64] &= ~((uint64_t)1 << (b->bin % 64));
  if (b->lnext != NIL)
    s->b[b->lnext].lprev = b->lprev;
  bs->bytes -= b->size;
  bs->count--;
  if (b->tag)
    s->tagged_bytes -= b->size;
  s->free_count--;
}

/* Node i leaves the tree of bins bs. */
static inline void cuemm__sa_tree_del(cuemm__sa *s, cuemm__sa_bins *bs, uint32_t i)
{
  cuemm__at_remove(s->at, &bs->tree, i);
  bs->tree_count--;
}

/* FREE block i joins the bins of its tag, and its tree when large. */
static inline __attribute__((always_inline)) void free_link(cuemm__sa *s, uint32_t i)
{
  cuemm__sa_bins_link(s, i);
  cuemm__sa_block *b = &s->b[i];
  if (b->size >= CUEMM__SA_LOW_FIT) {
    cuemm__sa_bins *bs = cuemm__sa_bins_at(s, b->tag);
    cuemm__at_insert(s->at, &bs->tree, i, b->off, b->size);
    bs->tree_count++;
  }
}

/* FREE block i leaves its bin, and its tree when large. */
static inline __attribute__((always_inline)) void free_unlink(cuemm__sa *s, uint32_t i)
{
  cuemm__sa_bins_unlink(s, i);
  if (s->b[i].size >= CUEMM__SA_LOW_FIT)
    cuemm__sa_tree_del(s, cuemm__sa_bins_at(s, s->b[i].tag), i);
}

static inline void cuemm__sa_list_add(cuemm__sa *s, uint32_t i)
{
  cuemm__sa_block *b = &s->b[i];
  if (b->state == CUEMM__SA_FREE) {
    free_link(s, i);
    return;
  }
  uint32_t *head = &s->holes;
  s->hole_count++;
  b->lprev = NIL;
  b->lnext = *head;
  if (*head != NIL)
    s->b[*head].lprev = i;
  *head = i;
}

static inline void cuemm__sa_list_del(cuemm__sa *s, uint32_t i)
{
  cuemm__sa_block *b = &s->b[i];
  if (b->state == CUEMM__SA_FREE) {
    free_unlink(s, i);
    return;
  }
  uint32_t *head = b->state != CUEMM__SA_CACHED ? &s->holes
                   : b->size < CUEMM__SA_SMALL  ? &s->cache[b->bin]
                                                : &s->lhead[b->bin];
  if (b->lprev != NIL)
    s->b[b->lprev].lnext = b->lnext;
  else
    *head = b->lnext;
  if (b->lnext != NIL)
    s->b[b->lnext].lprev = b->lprev;
  if (b->state == CUEMM__SA_CACHED) {
    if (b->size < CUEMM__SA_SMALL)
      s->ncached[b->bin]--;
    else {
      s->lcached_bytes -= b->size;
      s->lcached_count--;
    }
    s->cached_bytes -= b->size;
    s->free_count--;
  } else
    s->hole_count--;
}

#endif
