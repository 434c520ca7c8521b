/* suballoc-coalesce.c: owns the coalescing of the pool's sub-allocator's
 * caches of freed sizes (interface in suballoc.h, whose inline
 * cuemm__sa_alloc and cuemm__sa_free pop and push them; a large size new
 * to them goes through cuemm__sa_free_large in suballoc.c): emptying them,
 * every cached block merged with its neighbours.
 *
 * Small blocks do not merge when freed: a freed one goes, whole and
 * unmerged, to a cache per size class (deferred coalescing), and a small
 * request pops its class's cache before anything else, so steady small
 * traffic neither splits nor merges.  The caches are coalesced lazily, all
 * at once: when a request finds no free block large enough (before the
 * pool grows), and before the pool releases memory (a chunk goes back only
 * when wholly free, which a cached block inside it hides).  A class whose
 * cache holds cache_limit bytes takes no more: further frees of its size
 * merge at once.  Cached blocks count as free in every counter.
 *
 * Large blocks below CUEMM__SA_LOW_FIT are cached the same way, by exact
 * size: a small open-addressing map from size to a LIFO list, so that
 * steady traffic of those sizes pops what it pushed.  Larger ones are not:
 * a cache by size hands a block back wherever it lies, which undoes the
 * lowest-address placement.  Besides the occasions above, the large caches are coalesced
 * when their bytes would pass max(large_limit, a quarter of the mapped
 * bytes), which bounds the free space kept in pieces, and when the map runs
 * out of slots for new sizes (coalescing empties it).
 */
#include "suballoc/suballoc-coalesce.h"

#include "suballoc/shared.h"
#include "suballoc/suballoc-merge.h"

/* Every cached block of the list at *head becomes idle FREE space, merged
 * with its neighbours. */
static void uncache_all(cuemm__sa *s, const uint32_t *head)
{
  uint32_t i;
  while ((i = *head) != NIL) {
    cuemm__sa_list_del(s, i);
    s->b[i].state = CUEMM__SA_FREE;
    s->b[i].tag = 0;
    cuemm__sa_merge_link(s, i, 1);
  }
}

void cuemm__sa_coalesce_large(cuemm__sa *s)
{
  for (unsigned k = 0; k < CUEMM__SA_LSLOTS && s->lkeys; k++) {
    if (s->lkey[k] == 0)
      continue;
    uncache_all(s, &s->lhead[k]);
    s->lkey[k] = 0;
    s->lkeys--;
  }
}

void cuemm__sa_coalesce(cuemm__sa *s)
{
  cuemm__sa_coalesce_large(s);
  for (unsigned k = 1; k < CUEMM__SA_SMALL / CUEMM__SA_ALIGN && s->cached_bytes; k++) {
    uncache_all(s, &s->cache[k]);
  }
}
