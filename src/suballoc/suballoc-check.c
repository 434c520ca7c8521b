/* suballoc-check.c: owns the invariant check of the pool's sub-allocator
 * (cuemm__sa_check, interface in suballoc-check.h), which the tests run
 * after every step: a walk of the blocks, lists, bins, caches and trees
 * against the counters.  No allocation or free calls it.
 */
#include "suballoc/suballoc-check.h"

#include "suballoc/shared.h"

/* The sums of the walk of the blocks, which is the reference: the
 * counters, the caches and the bins are each checked against them. */
typedef struct tally {
  size_t fb, ub, hb, fc, uc, hc, cb, cc, lb, lc, tb;
} tally;

/* Free block i: its bin, its tag's bins, and its tag's tree when large. */
static const char *check_free(const cuemm__sa *s, uint32_t i, tally *t)
{
  const cuemm__sa_block *b = &s->b[i];
  t->fb += b->size, t->fc++;
  if (b->tag)
    t->tb += b->size;
  if (b->bin != cuemm__sa_bin_of(b->size))
    return "a free block is in the wrong bin";
  if (b->tag && (b->tag > s->ntags || !s->tagged[b->tag - 1]))
    return "a free block has a tag with no bins";
  if (!b->tag && b->seq)
    return "an idle free block has a free number";
  if (b->size >= CUEMM__SA_LOW_FIT && b->tag <= s->ntags && (!b->tag || s->tagged[b->tag - 1])) {
    const cuemm__sa_bins *bs = b->tag ? s->tagged[b->tag - 1] : &s->idle;
    if (cuemm__at_find(s->at, bs->tree, b->off) != i || s->at[i].size != b->size)
      return "a large free block is not in its tag's tree, or with another size";
  }
  return NULL;
}

/* Cached block b: the small cache of its size class, or the large map's
 * slot of its size. */
static const char *check_cached(const cuemm__sa *s, const cuemm__sa_block *b, tally *t)
{
  t->fb += b->size, t->fc++, t->cb += b->size, t->cc++;
  if (b->size >= CUEMM__SA_SMALL) {
    t->lb += b->size, t->lc++;
    if (b->bin >= CUEMM__SA_LSLOTS || s->lkey[b->bin] != b->size)
      return "a cached large block is not in the slot of its size";
  } else if (b->bin != b->size / CUEMM__SA_ALIGN)
    return "a cached block is not of its size class";
  return NULL;
}

/* Block i, reached from `prev` at offset `off` of the span. */
static const char *check_block(const cuemm__sa *s, uint32_t i, uint32_t prev, size_t off, tally *t)
{
  const cuemm__sa_block *b = &s->b[i];
  if (b->off != off)
    return "blocks do not tile the span";
  if (b->prev != prev)
    return "a prev link is wrong";
  if (b->size == 0 || b->size % CUEMM__SA_ALIGN || b->off % CUEMM__SA_ALIGN)
    return "a block is empty or not aligned";
  if (prev != NIL && (b->state == CUEMM__SA_FREE || b->state == CUEMM__SA_HOLE) &&
      s->b[prev].state == b->state && (b->state == CUEMM__SA_HOLE || s->b[prev].tag == b->tag))
    return "two adjacent free blocks of one tag, or holes, were not merged";
  if (b->state == CUEMM__SA_FREE)
    return check_free(s, i, t);
  if (b->state == CUEMM__SA_CACHED)
    return check_cached(s, b, t);
  if (b->state == CUEMM__SA_USED)
    t->ub += b->size, t->uc++;
  else if (b->state == CUEMM__SA_HOLE)
    t->hb += b->size, t->hc++;
  else
    return "a spare descriptor is linked in address order";
  return NULL;
}

/* The blocks in address order, and the counters against their sums. */
static const char *check_blocks(const cuemm__sa *s, tally *t)
{
  size_t off = 0;
  uint32_t prev = NIL;
  for (uint32_t i = 0; i != NIL; prev = i, i = s->b[i].next) {
    const char *e = check_block(s, i, prev, off, t);
    if (e)
      return e;
    off += s->b[i].size;
  }
  if (off != s->span)
    return "blocks do not cover the span";
  if (t->fb != s->free_bytes || t->ub != s->used_bytes || t->hb != s->hole_bytes)
    return "byte counters disagree with the blocks";
  if (t->fc != s->free_count || t->uc != s->used_count || t->hc != s->hole_count)
    return "block counters disagree with the blocks";
  if (t->cb != s->cached_bytes || t->lb != s->lcached_bytes || t->lc != s->lcached_count)
    return "cache counters disagree with the blocks";
  return NULL;
}

/* The caches of small size classes; *listed grows by their members. */
static const char *check_small_caches(const cuemm__sa *s, size_t *listed)
{
  for (unsigned k = 0; k < CUEMM__SA_SMALL / CUEMM__SA_ALIGN; k++) {
    size_t in_class = 0;
    for (uint32_t i = s->cache[k], p = NIL; i != NIL; p = i, i = s->b[i].lnext, in_class++)
      if (s->b[i].state != CUEMM__SA_CACHED || s->b[i].bin != k || s->b[i].lprev != p)
        return "a cache holds a block that is not cached, not of its class, or badly linked";
    if (in_class != s->ncached[k])
      return "a cache's count disagrees with its list";
    *listed += in_class;
  }
  return NULL;
}

/* The map of large cached sizes, its slots and their caches; *listed grows
 * by their members. */
static const char *check_large_caches(const cuemm__sa *s, size_t *listed)
{
  uint32_t keys = 0;
  for (unsigned k = 0; k < CUEMM__SA_LSLOTS; k++) {
    if (s->lkey[k] == 0) {
      if (s->lhead[k] != NIL)
        return "an empty map slot has a cache";
      continue;
    }
    keys++;
    if (s->lkey[k] < CUEMM__SA_SMALL || s->lkey[k] % CUEMM__SA_ALIGN || cuemm__sa_lslot(s, s->lkey[k]) != k)
      return "a map slot's size is not large, not aligned or not found by a lookup";
    for (uint32_t i = s->lhead[k], p = NIL; i != NIL; p = i, i = s->b[i].lnext, (*listed)++)
      if (s->b[i].state != CUEMM__SA_CACHED || s->b[i].bin != k || s->b[i].size != s->lkey[k] || s->b[i].lprev != p)
        return "a large cache holds a block that is not cached, not of its size, or badly linked";
  }
  if (keys != s->lkeys || keys > CUEMM__SA_LKEYS)
    return "the map's count of sizes is wrong";
  return NULL;
}

/* The bins and tree of tag t (0: idle); *listed grows by the bins'
 * members. */
static const char *check_tag(const cuemm__sa *s, uint32_t t, const cuemm__sa_bins *bs, size_t *listed)
{
  size_t bytes = 0, count = 0, large = 0;
  for (unsigned k = 0; k < CUEMM__SA_NBINS; k++) {
    int bit = (bs->bitmap[k / 64] >> (k % 64)) & 1;
    if (bit != (bs->heads[k] != NIL))
      return "a bitmap bit disagrees with its bin";
    for (uint32_t i = bs->heads[k]; i != NIL; i = s->b[i].lnext, (*listed)++, count++) {
      if (s->b[i].state != CUEMM__SA_FREE || s->b[i].bin != k)
        return "a bin holds a block that is not free or not of its size";
      if (s->b[i].tag != t)
        return "a bin holds a block of another tag";
      bytes += s->b[i].size;
      large += s->b[i].size >= CUEMM__SA_LOW_FIT;
    }
  }
  if (bytes != bs->bytes || count != bs->count)
    return "a tag's counters disagree with its bins";
  size_t in_tree;
  const char *e = cuemm__at_check(s->at, s->cap, bs->tree, &in_tree);
  if (e)
    return e;
  /* Every large free block of the tag is in the tree (checked above), so
   * equal counts leave no other node in it. */
  if (in_tree != bs->tree_count || in_tree != large)
    return "a tag's tree holds other nodes than its large free blocks";
  return NULL;
}

/* Every tag's bins together hold the free blocks the caches do not. */
static const char *check_bins(const cuemm__sa *s, const tally *t)
{
  size_t listed = 0;
  for (uint32_t tag = 0; tag <= s->ntags; tag++) {
    const cuemm__sa_bins *bs = tag ? s->tagged[tag - 1] : &s->idle;
    if (!bs)
      continue;
    const char *e = check_tag(s, tag, bs, &listed);
    if (e)
      return e;
  }
  if (listed != t->fc - t->cc)
    return "bins do not hold every free block";
  return NULL;
}

static const char *check_holes(const cuemm__sa *s, const tally *t)
{
  size_t listed = 0;
  for (uint32_t i = s->holes; i != NIL; i = s->b[i].lnext, listed++)
    if (s->b[i].state != CUEMM__SA_HOLE)
      return "the hole list holds a block that is not a hole";
  if (listed != t->hc)
    return "the hole list does not hold every hole";
  return NULL;
}

const char *cuemm__sa_check(const cuemm__sa *s)
{
  tally t = { 0 };
  size_t cached = 0;
  const char *e;
  if ((e = check_blocks(s, &t)) || (e = check_small_caches(s, &cached)) || (e = check_large_caches(s, &cached)))
    return e;
  if (cached != t.cc)
    return "the caches do not hold every cached block";
  if (t.tb != s->tagged_bytes)
    return "the tagged bytes disagree with the blocks";
  if ((e = check_bins(s, &t)) || (e = check_holes(s, &t)))
    return e;
  return NULL;
}
