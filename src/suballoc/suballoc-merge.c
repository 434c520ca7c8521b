/* suballoc-merge.c: owns merging in the pool's sub-allocator (interface in
 * suballoc.h): a block that becomes free absorbs its free neighbours, and
 * the frees that merge at once (cuemm__sa_free_merge, for a block the
 * caches do not keep, and cuemm__sa_free_tagged, a stream's), with the
 * bins a tag is given when its first block comes.  Coalescing the caches,
 * growth, release and the moves between tags merge through here too.
 *
 * A freed large block merges with free neighbours at once, the merged
 * block taking the place of a neighbour's node in its tag's tree.
 */
#include "suballoc/suballoc-merge.h"

#include <stdlib.h>

#include "suballoc/shared.h"

/* ---- merging -------------------------------------------------------------- */

/* Only a merge gives a descriptor back; the spare stack is suballoc.c's. */
static inline void desc_put(cuemm__sa *s, uint32_t i)
{
  s->b[i].state = CUEMM__SA_SPARE;
  s->b[i].lnext = s->spare;
  s->spare = i;
  s->nspare++;
}

/* Whether block a absorbs its neighbour n: blocks of one state, free ones
 * of one tag, and a free block cached ones (idle: the caches hold blocks of
 * the deferred path).  With `mix`, free blocks of a tag and idle ones merge
 * too, into a block of that tag: idle space beside a stream's freed blocks
 * joins them rather than stay apart in pieces, and becomes idle again with
 * them (cuemm__sa_untag).  Growth and release do not mix: what they map or
 * unmap stays idle. */
static inline int mergeable(const cuemm__sa_block *a, const cuemm__sa_block *n, int mix)
{
  if (a->state != CUEMM__SA_FREE)
    return n->state == a->state;
  if (n->state == CUEMM__SA_CACHED)
    return a->tag == 0 || mix;
  return n->state == CUEMM__SA_FREE && (n->tag == a->tag || (mix && (!n->tag || !a->tag)));
}

/* Large FREE blocks a merge absorbed, out of their bins but still in their
 * trees: the merged block takes the place of one of its own tree there,
 * one descent where a removal and an insertion would cost two. */
#define MERGE_STALE 4
typedef struct stale {
  uint32_t n;
  uint32_t i[MERGE_STALE];
  cuemm__sa_bins *bs[MERGE_STALE];
} stale;

/* Neighbour x leaves its lists for a merge. */
static inline void merge_unlink(cuemm__sa *s, uint32_t x, stale *st)
{
  cuemm__sa_block *b = &s->b[x];
  if (b->state == CUEMM__SA_FREE && b->bin == DETACHED)
    return; /* out of every list already (move_tag) */
  if (b->state != CUEMM__SA_FREE || b->size < CUEMM__SA_LOW_FIT) {
    cuemm__sa_list_del(s, x);
    return;
  }
  cuemm__sa_bins *bs = cuemm__sa_bins_at(s, b->tag);
  cuemm__sa_bins_unlink(s, x);
  if (st->n < MERGE_STALE) {
    st->i[st->n] = x;
    st->bs[st->n++] = bs;
  } else
    cuemm__sa_tree_del(s, bs, x);
}

/* Block i (unlinked, final state set) absorbs its mergeable neighbours
 * (runs of them on both sides), and the surviving block (the lowest), with
 * the tag of any tagged part and the newest free number, joins its lists. */
void cuemm__sa_merge_link(cuemm__sa *s, uint32_t i, int mix)
{
  stale st = { .n = 0 };
  uint8_t st_state = s->b[i].state;
  uint64_t seq = s->b[i].seq;
  uint32_t n;
  while ((n = s->b[i].next) != NIL && mergeable(&s->b[i], &s->b[n], mix)) {
    merge_unlink(s, n, &st);
    if (s->b[n].state == CUEMM__SA_FREE && s->b[n].tag) {
      s->b[i].tag = s->b[n].tag;
      if (s->b[n].seq > seq)
        seq = s->b[n].seq;
    }
    s->b[i].size += s->b[n].size;
    s->b[i].next = s->b[n].next;
    if (s->b[n].next != NIL)
      s->b[s->b[n].next].prev = i;
    desc_put(s, n);
  }
  uint32_t p;
  while ((p = s->b[i].prev) != NIL && mergeable(&s->b[i], &s->b[p], mix)) {
    merge_unlink(s, p, &st);
    uint32_t tag = s->b[i].tag;
    if (s->b[p].state == CUEMM__SA_FREE && s->b[p].tag) {
      tag = s->b[p].tag;
      if (s->b[p].seq > seq)
        seq = s->b[p].seq;
    }
    s->b[p].size += s->b[i].size;
    s->b[p].next = s->b[i].next;
    if (s->b[i].next != NIL)
      s->b[s->b[i].next].prev = p;
    desc_put(s, i);
    s->b[p].state = st_state;
    s->b[p].tag = tag;
    i = p;
  }
  cuemm__sa_block *b = &s->b[i];
  b->seq = b->tag ? seq : 0;
  if (b->state != CUEMM__SA_FREE) {
    cuemm__sa_list_add(s, i); /* nothing stale: only free blocks merge with free ones */
    return;
  }
  cuemm__sa_bins_link(s, i);
  cuemm__sa_bins *bs = cuemm__sa_bins_at(s, b->tag);
  uint32_t keep = st.n;
  if (b->size >= CUEMM__SA_LOW_FIT)
    for (keep = 0; keep < st.n && st.bs[keep] != bs; keep++)
      ;
  /* The others leave first: within the merged range, their keys would
   * stand beside the merged block's. */
  for (uint32_t k = 0; k < st.n; k++)
    if (k != keep)
      cuemm__sa_tree_del(s, st.bs[k], st.i[k]);
  if (keep < st.n)
    cuemm__at_replace(s->at, &bs->tree, st.i[keep], i, b->off, b->size);
  else if (b->size >= CUEMM__SA_LOW_FIT) {
    cuemm__at_insert(s->at, &bs->tree, i, b->off, b->size);
    bs->tree_count++;
  }
}

/* ---- the frees that merge ------------------------------------------------- */

int cuemm__sa_bins_make(cuemm__sa *s, uint32_t tag)
{
  if (tag <= s->ntags && s->tagged[tag - 1])
    return 0;
  if (tag > s->ntags) {
    uint32_t n = s->ntags ? s->ntags : 4;
    while (n < tag)
      n *= 2;
    cuemm__sa_bins **t = realloc(s->tagged, n * sizeof *t);
    if (!t)
      return -1;
    for (uint32_t k = s->ntags; k < n; k++)
      t[k] = NULL;
    s->tagged = t;
    s->ntags = n;
  }
  cuemm__sa_bins *bs = malloc(sizeof *bs);
  if (!bs)
    return -1;
  cuemm__sa_bins_init(bs);
  s->tagged[tag - 1] = bs;
  return 0;
}

int cuemm__sa_free_tagged(cuemm__sa *s, uint32_t i, uint32_t tag, uint64_t seq)
{
  if (tag && cuemm__sa_bins_make(s, tag) != 0)
    return -1;
  size_t size = s->b[i].size;
  s->used_bytes -= size;
  s->free_bytes += size;
  s->used_count--;
  s->b[i].state = CUEMM__SA_FREE;
  s->b[i].tag = tag;
  s->b[i].seq = seq;
  cuemm__sa_merge_link(s, i, 1);
  return 0;
}

void cuemm__sa_free_merge(cuemm__sa *s, uint32_t i)
{
  cuemm__sa_merge_idle(s, i);
}
