/* suballoc-check.c: owns the invariant check of the pool's sub-allocator
 * (cuemm__sa_check, interface in suballoc-check.h), which the tests run
 * after every step: a walk of the blocks, lists, bins, caches and trees
 * against the counters.  No allocation or free calls it.
 */
#include "suballoc/suballoc-check.h"

#include "suballoc/shared.h"

const char *cuemm__sa_check(const cuemm__sa *s)
{
  size_t off = 0, fb = 0, ub = 0, hb = 0, fc = 0, uc = 0, hc = 0, cb = 0, cc = 0, lb = 0, lc = 0, tb = 0;
  uint32_t prev = NIL;
  for (uint32_t i = 0; i != NIL; prev = i, i = s->b[i].next) {
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
    if (b->state == CUEMM__SA_FREE) {
      fb += b->size, fc++;
      if (b->tag)
        tb += b->size;
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
    } else if (b->state == CUEMM__SA_CACHED) {
      fb += b->size, fc++, cb += b->size, cc++;
      if (b->size >= CUEMM__SA_SMALL) {
        lb += b->size, lc++;
        if (b->bin >= CUEMM__SA_LSLOTS || s->lkey[b->bin] != b->size)
          return "a cached large block is not in the slot of its size";
      } else if (b->bin != b->size / CUEMM__SA_ALIGN)
        return "a cached block is not of its size class";
    } else if (b->state == CUEMM__SA_USED)
      ub += b->size, uc++;
    else if (b->state == CUEMM__SA_HOLE)
      hb += b->size, hc++;
    else
      return "a spare descriptor is linked in address order";
    off += b->size;
  }
  if (off != s->span)
    return "blocks do not cover the span";
  if (fb != s->free_bytes || ub != s->used_bytes || hb != s->hole_bytes)
    return "byte counters disagree with the blocks";
  if (fc != s->free_count || uc != s->used_count || hc != s->hole_count)
    return "block counters disagree with the blocks";
  if (cb != s->cached_bytes || lb != s->lcached_bytes || lc != s->lcached_count)
    return "cache counters disagree with the blocks";
  size_t listed = 0;
  for (unsigned k = 0; k < CUEMM__SA_SMALL / CUEMM__SA_ALIGN; k++) {
    size_t in_class = 0;
    for (uint32_t i = s->cache[k], p = NIL; i != NIL; p = i, i = s->b[i].lnext, in_class++)
      if (s->b[i].state != CUEMM__SA_CACHED || s->b[i].bin != k || s->b[i].lprev != p)
        return "a cache holds a block that is not cached, not of its class, or badly linked";
    if (in_class != s->ncached[k])
      return "a cache's count disagrees with its list";
    listed += in_class;
  }
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
    for (uint32_t i = s->lhead[k], p = NIL; i != NIL; p = i, i = s->b[i].lnext, listed++)
      if (s->b[i].state != CUEMM__SA_CACHED || s->b[i].bin != k || s->b[i].size != s->lkey[k] || s->b[i].lprev != p)
        return "a large cache holds a block that is not cached, not of its size, or badly linked";
  }
  if (keys != s->lkeys || keys > CUEMM__SA_LKEYS)
    return "the map's count of sizes is wrong";
  if (listed != cc)
    return "the caches do not hold every cached block";
  if (tb != s->tagged_bytes)
    return "the tagged bytes disagree with the blocks";
  listed = 0;
  for (uint32_t t = 0; t <= s->ntags; t++) {
    const cuemm__sa_bins *bs = t ? s->tagged[t - 1] : &s->idle;
    if (!bs)
      continue;
    size_t bytes = 0, count = 0, large = 0;
    for (unsigned k = 0; k < CUEMM__SA_NBINS; k++) {
      int bit = (bs->bitmap[k / 64] >> (k % 64)) & 1;
      if (bit != (bs->heads[k] != NIL))
        return "a bitmap bit disagrees with its bin";
      for (uint32_t i = bs->heads[k]; i != NIL; i = s->b[i].lnext, listed++, count++) {
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
  }
  if (listed != fc - cc)
    return "bins do not hold every free block";
  listed = 0;
  for (uint32_t i = s->holes; i != NIL; i = s->b[i].lnext, listed++)
    if (s->b[i].state != CUEMM__SA_HOLE)
      return "the hole list holds a block that is not a hole";
  if (listed != hc)
    return "the hole list does not hold every hole";
  return NULL;
}
