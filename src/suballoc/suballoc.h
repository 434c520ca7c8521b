/* suballoc.h: the pool's sub-allocator, a pure data structure over offsets.
 *
 * It tiles an address span [0, span) with blocks, each FREE (mapped and
 * available), USED (handed out) or HOLE (not backed by physical memory).
 * The pool (pool.c) turns holes into free space when it maps memory and free
 * space back into holes when it releases memory; the sub-allocator never
 * calls the driver and never learns the base address.  Not thread-safe: the
 * manager's lock guards it.
 *
 * Its files are listed in shared.h.  Growth and release are
 * declared in suballoc-hole.h and the invariant check in suballoc-check.h:
 * they call this header's functions, which call none of theirs.
 */
#ifndef CUEMM_SUBALLOC_H
#define CUEMM_SUBALLOC_H

#include <stddef.h>
#include <stdint.h>

#include "suballoc/addrtree.h"

/* Every offset and size is a multiple of this. */
#define CUEMM__SA_ALIGN ((size_t)256)
#define CUEMM__SA_NIL UINT32_MAX
/* Bins: sizes below 64 x 256 B (16 KiB) have one bin each (exact size
 * classes); above, 16 bins per power of two. */
#define CUEMM__SA_NBINS 640
/* Requests of this size or more take the best fit (see find_free). */
#define CUEMM__SA_BEST_FIT ((size_t)16 << 10)
/* Requests of this size or more take the lowest-address fit instead, from
 * a tree of the free blocks of this size or more (addrtree.h), and freed
 * blocks of this size or more are never cached by size: they merge at once,
 * where the lowest-address fit sees them.  On the trace corpus 16, 64
 * and 256 KiB gave footprints within a pool chunk of one another
 * (docs/design.md); 64 KiB leaves the smaller traffic to the bins. */
#define CUEMM__SA_LOW_FIT ((size_t)64 << 10)
/* Blocks below this size are exact size classes, cached when freed. */
#define CUEMM__SA_SMALL ((size_t)64 * CUEMM__SA_ALIGN)
/* The default bound on the bytes one class's cache holds. */
#define CUEMM__SA_CACHE_LIMIT ((size_t)32 << 20)
/* Slots of the map from exact size to the cache of freed large blocks of
 * that size (open addressing, linear probing; a power of two), and how many
 * sizes it takes before it is emptied by coalescing. */
#define CUEMM__SA_LSLOTS 128u
#define CUEMM__SA_LKEYS 96u
/* The default fixed part of the bound on cached large bytes: they may reach
 * this or a quarter of the mapped bytes, whichever is more. */
#define CUEMM__SA_LARGE_LIMIT ((size_t)256 << 20)

typedef enum cuemm__sa_state {
  CUEMM__SA_SPARE = 0,   /* descriptor not in use */
  CUEMM__SA_FREE = 1,
  CUEMM__SA_USED = 2,
  CUEMM__SA_HOLE = 3,
  CUEMM__SA_CACHED = 4,  /* free, kept whole and unmerged in the cache of its size */
} cuemm__sa_state;

typedef struct cuemm__sa_block {
  size_t off, size;
  uint32_t prev, next;    /* neighbours in address order (NIL at the ends) */
  uint32_t lprev, lnext;  /* links in its bin (FREE), its size's cache (CACHED), the hole list
                           * (HOLE) or the spare stack */
  uint16_t bin;           /* FREE: its bin; CACHED: its class (small) or map slot (large) */
  uint8_t state;
  uint32_t tag;           /* FREE: 0 when idle, else the stream whose work may still use it */
  uint64_t seq;           /* FREE and tagged: the newest of its stream's frees it holds; USED: a
                           * word of the caller's (0 when handed out) */
} cuemm__sa_block;

/* Segregated bins of FREE blocks: those of one tag; those of
 * CUEMM__SA_LOW_FIT bytes or more are in its tree as well. */
typedef struct cuemm__sa_bins {
  uint32_t heads[CUEMM__SA_NBINS];
  uint64_t bitmap[CUEMM__SA_NBINS / 64];
  size_t bytes, count;
  uint32_t tree;          /* root of its tree in cuemm__sa.at */
  uint32_t tree_count;
} cuemm__sa_bins;

typedef struct cuemm__sa {
  cuemm__sa_block *b;     /* descriptors; index 0 always starts at offset 0 */
  cuemm__at_node *at;     /* the tree node of each descriptor, by its index */
  uint32_t cap;
  uint32_t spare;         /* stack of unused descriptors (through lnext) */
  uint32_t nspare;
  uint32_t holes;         /* list of HOLE blocks */
  cuemm__sa_bins idle;    /* FREE blocks no work uses */
  cuemm__sa_bins **tagged;   /* tagged[t - 1]: FREE blocks of tag t (NULL until used) */
  uint32_t ntags;
  size_t tagged_bytes;    /* FREE bytes of every tag */
  uint32_t *scratch;      /* cuemm__sa_untag's list */
  uint32_t nscratch;
  uint32_t cache[CUEMM__SA_SMALL / CUEMM__SA_ALIGN];   /* CACHED blocks, by size class */
  uint32_t ncached[CUEMM__SA_SMALL / CUEMM__SA_ALIGN];
  size_t cache_limit;     /* bytes a class's cache may hold; beyond, frees merge at once */
  size_t span;
  size_t free_bytes, used_bytes, hole_bytes;   /* free_* count CACHED blocks too */
  size_t free_count, used_count, hole_count;
  size_t cached_bytes;    /* all cached bytes; ncached[] counts the small cached blocks */
  /* Cached large blocks: lkey[k] is a size (0: slot empty), lhead[k] the
   * LIFO list of cached blocks of that size (possibly empty). */
  size_t lkey[CUEMM__SA_LSLOTS];
  uint32_t lhead[CUEMM__SA_LSLOTS];
  uint32_t lkeys;         /* slots in use */
  size_t lcached_bytes, lcached_count;
  size_t large_limit;     /* cached large bytes may reach max(large_limit, mapped / 4) */
} cuemm__sa;

/* One hole covering [0, span).  Returns 0, or -1 when host memory ran out. */
int cuemm__sa_init(cuemm__sa *s, size_t span);
void cuemm__sa_fini(cuemm__sa *s);

/* Ensures `n` spare descriptors, so that the next fill or drain cannot fail.
 * Returns 0, or -1 when host memory ran out. */
int cuemm__sa_reserve(cuemm__sa *s, uint32_t n);

/* Takes a block of at least `size` bytes (a multiple of CUEMM__SA_ALIGN)
 * and returns its index, or NIL when no free block is large enough even
 * after coalescing the caches.  A request is first popped from the cache
 * of its exact size; otherwise a FREE block is split to size.  O(1) except when
 * only a block of the request's own bin fits, which is searched, or when
 * the caches must be coalesced.  Never fails for lack of host memory:
 * without a spare descriptor the whole block is handed out. */
static inline uint32_t cuemm__sa_alloc(cuemm__sa *s, size_t size);

/* Returns a USED block: it goes to the cache of its size as it is (a
 * small one while its class holds less than cache_limit bytes; a large one
 * while the cached large bytes stay within their bound, past which the
 * large caches are coalesced), or else merges with free neighbours. */
static inline void cuemm__sa_free(cuemm__sa *s, uint32_t i);

/* cuemm__sa_alloc past the caches. */
uint32_t cuemm__sa_alloc_slow(cuemm__sa *s, size_t size);

/* cuemm__sa_free of a block that is not cached: merges it.  Its counters
 * are already moved. */
void cuemm__sa_free_merge(cuemm__sa *s, uint32_t i);

/* Whether a FREE block (not a cached one) of at least `size` bytes exists,
 * idle or of `tag`. */
int cuemm__sa_fits(const cuemm__sa *s, size_t size, uint32_t tag);

/* cuemm__sa_free of a large block past the fast path: a size new to the
 * map, or cached bytes past their bound.  Its counters are already moved. */
void cuemm__sa_free_large(cuemm__sa *s, uint32_t i);

/* The map slot of large size `size`, or NIL when it has none. */
static inline uint32_t cuemm__sa_lslot(const cuemm__sa *s, size_t size)
{
  unsigned k = (unsigned)(((unsigned long long)(size / CUEMM__SA_ALIGN) * 0x9E3779B97F4A7C15ull) >> 57);
  for (;; k = (k + 1) & (CUEMM__SA_LSLOTS - 1)) {
    if (s->lkey[k] == size)
      return k;
    if (s->lkey[k] == 0)
      return CUEMM__SA_NIL;
  }
}

/* Whether `more` cached large bytes stay within their bound. */
static inline int cuemm__sa_large_room(const cuemm__sa *s, size_t more)
{
  size_t after = s->lcached_bytes + more;
  return after <= s->large_limit || after <= (s->span - s->hole_bytes) / 4;
}

/* Block i, FREE or CACHED and out of its lists, is handed out: USED, with
 * its words cleared (a cached block keeps its last owner's tag and stream
 * word otherwise), and its bytes move from free to used.  Every way a
 * block is handed out goes through here. */
static inline void cuemm__sa_mark_used(cuemm__sa *s, uint32_t i)
{
  cuemm__sa_block *b = &s->b[i];
  b->state = CUEMM__SA_USED;
  b->tag = 0;
  b->seq = 0;
  s->free_bytes -= b->size;
  s->used_bytes += b->size;
  s->used_count++;
}

static inline uint32_t cuemm__sa_alloc(cuemm__sa *s, size_t size)
{
  uint32_t i, *head;
  if (size < CUEMM__SA_SMALL)
    head = &s->cache[size / CUEMM__SA_ALIGN];
  else if (size < CUEMM__SA_LOW_FIT && (i = cuemm__sa_lslot(s, size)) != CUEMM__SA_NIL)
    head = &s->lhead[i];
  else
    return cuemm__sa_alloc_slow(s, size);
  if ((i = *head) == CUEMM__SA_NIL)
    return cuemm__sa_alloc_slow(s, size);
  cuemm__sa_block *b = &s->b[i];
  uint32_t n = b->lnext;
  *head = n;
  if (n != CUEMM__SA_NIL)
    s->b[n].lprev = CUEMM__SA_NIL;
  if (size < CUEMM__SA_SMALL)
    s->ncached[b->bin]--;
  else {
    s->lcached_bytes -= size;
    s->lcached_count--;
  }
  s->cached_bytes -= size;
  s->free_count--;
  cuemm__sa_mark_used(s, i);
  return i;
}

static inline void cuemm__sa_free(cuemm__sa *s, uint32_t i)
{
  cuemm__sa_block *b = &s->b[i];
  size_t size = b->size;
  s->used_bytes -= size;
  s->free_bytes += size;
  s->used_count--;
  uint32_t k, *head;
  if (size < CUEMM__SA_SMALL) {
    k = (uint32_t)(size / CUEMM__SA_ALIGN);
    if ((size_t)s->ncached[k] * size >= s->cache_limit) {
      cuemm__sa_free_merge(s, i);
      return;
    }
    head = &s->cache[k];
    s->ncached[k]++;
  } else {
    if (size >= CUEMM__SA_LOW_FIT) {
      cuemm__sa_free_merge(s, i);
      return;
    }
    if ((k = cuemm__sa_lslot(s, size)) == CUEMM__SA_NIL || !cuemm__sa_large_room(s, size)) {
      cuemm__sa_free_large(s, i);
      return;
    }
    head = &s->lhead[k];
    s->lcached_bytes += size;
    s->lcached_count++;
  }
  uint32_t h = *head;
  b->state = CUEMM__SA_CACHED;
  b->bin = (uint16_t)k;
  b->lprev = CUEMM__SA_NIL;
  b->lnext = h;
  if (h != CUEMM__SA_NIL)
    s->b[h].lprev = i;
  *head = i;
  s->cached_bytes += size;
  s->free_count++;
}

/* Tags: a block freed on a stream whose queued work may still use it
 * (cuemm_free_async) is FREE with that stream's tag (1 and up, chosen by
 * the caller) and the number of its free there.  It merges with free
 * neighbours of its tag and with idle ones (the whole then has its tag and
 * the newest number), serves requests of that tag, others only once
 * cuemm__sa_untag made it idle (the stream's work up to that number is
 * done), and is never released.  Idle FREE blocks carry tag 0. */

/* Returns a USED block as FREE with `tag` and `seq`, never caching it,
 * merged with free neighbours of its tag and idle ones (tag 0: idle, for a
 * caller that needs contiguous free space; it cannot fail).  Returns -1,
 * changing nothing, when host memory for the tag's bins ran out. */
int cuemm__sa_free_tagged(cuemm__sa *s, uint32_t i, uint32_t tag, uint64_t seq);

/* A block for a request of tag `tag`: the better fit of the tag's own
 * blocks and the idle ones (cuemm__sa_alloc when the tag has none).  NIL
 * when neither has one. */
uint32_t cuemm__sa_alloc_tagged(cuemm__sa *s, size_t size, uint32_t tag);

/* The block a request of `size` bytes would take among the FREE blocks of
 * `tag` (0: the idle ones), as cuemm__sa_alloc chooses; NIL when none is
 * large enough.  Changes nothing. */
uint32_t cuemm__sa_fit(const cuemm__sa *s, size_t size, uint32_t tag);

/* cuemm__sa_fit's choice when it is smaller than `limit` bytes, else NIL:
 * whether `tag` has a block that fits better than one of `limit` bytes,
 * often told by the bins' bitmap alone.  Changes nothing. */
uint32_t cuemm__sa_fit_below(const cuemm__sa *s, size_t size, uint32_t tag, size_t limit);

/* The better of cuemm__sa_fit for `tag` and for the idle blocks (the tag's
 * on a tie); NIL when neither has one.  Changes nothing. */
static inline uint32_t cuemm__sa_fit_for(const cuemm__sa *s, size_t size, uint32_t tag)
{
  uint32_t best = cuemm__sa_fit(s, size, 0);
  if (tag) {
    /* The tag's block on a tie: idle space stays for the other streams,
     * and a tagged block taken before an idle one that fits better would
     * split a large block for a small request. */
    uint32_t c = cuemm__sa_fit(s, size, tag);
    if (c != CUEMM__SA_NIL && (best == CUEMM__SA_NIL || s->b[c].size <= s->b[best].size))
      best = c;
  }
  return best;
}

/* Takes FREE block i (of cuemm__sa_fit) for a request of `size` bytes; the
 * rest stays free, with its tag. */
void cuemm__sa_take(cuemm__sa *s, uint32_t i, size_t size);

/* Makes the blocks of `tag` numbered up to `done` idle, merged with idle
 * neighbours.  Returns the bytes made idle.  O(blocks of the tag). */
size_t cuemm__sa_untag(cuemm__sa *s, uint32_t tag, uint64_t done);

/* Gives every FREE block of tag `from` the tag `to` (not 0) and the number
 * `seq`, and merges it with free space of `to` and idle space beside it:
 * the stream of `to` has waited for the work of `from`'s, so those blocks
 * are its own now.  Returns their bytes; 0 too when host memory ran out
 * (they stay as they were). */
size_t cuemm__sa_retag(cuemm__sa *s, uint32_t from, uint32_t to, uint64_t seq);

/* The bins of `tag` (0: the idle ones), or NULL when it never had any. */
static inline const cuemm__sa_bins *cuemm__sa_bins_of(const cuemm__sa *s, uint32_t tag)
{
  return !tag ? &s->idle : tag <= s->ntags ? s->tagged[tag - 1] : NULL;
}

/* The FREE bytes of `tag`. */
static inline size_t cuemm__sa_tag_bytes(const cuemm__sa *s, uint32_t tag)
{
  const cuemm__sa_bins *bs = tag ? cuemm__sa_bins_of(s, tag) : NULL;
  return bs ? bs->bytes : 0;
}

/* Calls fn(arg, block) for every idle FREE block (not CACHED nor tagged) of
 * at least `min` bytes, in no particular order, through the bins: O(bins + such blocks).
 * fn must not change the sub-allocator. */
void cuemm__sa_each_free(const cuemm__sa *s, size_t min, void (*fn)(void *arg, const cuemm__sa_block *b), void *arg);

/* Empties the caches, merging every cached block with its free and cached
 * neighbours.  O(cached blocks). */
void cuemm__sa_coalesce(cuemm__sa *s);

/* The block containing offset `off` (a walk in address order: slow path). */
uint32_t cuemm__sa_find(const cuemm__sa *s, size_t off);

/* The size of the largest idle FREE or CACHED block (0 if none). */
size_t cuemm__sa_largest_free(const cuemm__sa *s);

/* The largest run of free addresses: adjacent FREE and CACHED blocks (of
 * any tag) taken as one, as they would be once the caches were coalesced
 * and the streams' work done.  A walk in address order: O(blocks). */
size_t cuemm__sa_largest_extent(const cuemm__sa *s);

/* For the sub-allocator's own files, not its users: block i cut in two
 * (suballoc.c), which growth and release use as well. */
uint32_t cuemm__sa_split(cuemm__sa *s, uint32_t i, size_t at);

#endif
