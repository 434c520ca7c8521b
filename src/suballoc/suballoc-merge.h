/* suballoc-merge.h: merging in the pool's sub-allocator (suballoc-merge.c),
 * as its other files call it.  Its users' frees (cuemm__sa_free_merge,
 * cuemm__sa_free_tagged) are declared in suballoc.h.
 */
#ifndef CUEMM_SUBALLOC_MERGE_H
#define CUEMM_SUBALLOC_MERGE_H

#include "suballoc/suballoc.h"

/* Block i, unlinked, merges with its neighbours and joins its lists; with
 * `mix`, free blocks of a tag and idle ones merge too. */
void cuemm__sa_merge_link(cuemm__sa *s, uint32_t i, int mix);

/* Makes sure tag's bins exist.  Returns -1 when host memory ran out. */
int cuemm__sa_bins_make(cuemm__sa *s, uint32_t tag);

/* cuemm__sa_free_merge's work, inline for suballoc.c's frees past the
 * caches, which would otherwise pass through one more function: block i
 * becomes idle free space, merged. */
static inline void cuemm__sa_merge_idle(cuemm__sa *s, uint32_t i)
{
  s->b[i].state = CUEMM__SA_FREE;
  s->b[i].tag = 0;
  s->b[i].seq = 0;
  cuemm__sa_merge_link(s, i, 1);
}

#endif
