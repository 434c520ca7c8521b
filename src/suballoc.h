/* suballoc.h: the pool's sub-allocator, a pure data structure over offsets.
 *
 * It tiles an address span [0, span) with blocks, each FREE (mapped and
 * available), USED (handed out) or HOLE (not backed by physical memory).
 * The pool (pool.c) turns holes into free space when it maps memory and free
 * space back into holes when it releases memory; the sub-allocator never
 * calls the driver and never learns the base address.  Not thread-safe: the
 * manager's lock guards it.
 */
#ifndef CUEMM_SUBALLOC_H
#define CUEMM_SUBALLOC_H

#include <stddef.h>
#include <stdint.h>

/* Every offset and size is a multiple of this. */
#define CUEMM__SA_ALIGN ((size_t)256)
#define CUEMM__SA_NIL UINT32_MAX
/* Bins: sizes below 64 x 256 B (16 KiB) have one bin each (exact size
 * classes); above, 16 bins per power of two. */
#define CUEMM__SA_NBINS 640
/* Blocks below this size are exact size classes, cached when freed. */
#define CUEMM__SA_SMALL ((size_t)64 * CUEMM__SA_ALIGN)
/* The default bound on the bytes one class's cache holds. */
#define CUEMM__SA_CACHE_LIMIT ((size_t)32 << 20)

typedef enum cuemm__sa_state {
  CUEMM__SA_SPARE = 0,   /* descriptor not in use */
  CUEMM__SA_FREE = 1,
  CUEMM__SA_USED = 2,
  CUEMM__SA_HOLE = 3,
  CUEMM__SA_CACHED = 4,  /* free, of an exact size class, kept whole in its class's cache */
} cuemm__sa_state;

typedef struct cuemm__sa_block {
  size_t off, size;
  uint32_t prev, next;    /* neighbours in address order (NIL at the ends) */
  uint32_t lprev, lnext;  /* links in its bin (FREE), its class's cache (CACHED), the hole list
                           * (HOLE) or the spare stack */
  uint16_t bin;
  uint8_t state;
} cuemm__sa_block;

typedef struct cuemm__sa {
  cuemm__sa_block *b;     /* descriptors; index 0 always starts at offset 0 */
  uint32_t cap;
  uint32_t spare;         /* stack of unused descriptors (through lnext) */
  uint32_t nspare;
  uint32_t holes;         /* list of HOLE blocks */
  uint32_t heads[CUEMM__SA_NBINS];
  uint64_t bitmap[CUEMM__SA_NBINS / 64];
  uint32_t cache[CUEMM__SA_SMALL / CUEMM__SA_ALIGN];   /* CACHED blocks, by size class */
  uint32_t ncached[CUEMM__SA_SMALL / CUEMM__SA_ALIGN];
  size_t cache_limit;     /* bytes a class's cache may hold; beyond, frees merge at once */
  size_t span;
  size_t free_bytes, used_bytes, hole_bytes;   /* free_* count CACHED blocks too */
  size_t free_count, used_count, hole_count;
  size_t cached_bytes;    /* ncached[] counts the cached blocks */
} cuemm__sa;

/* One hole covering [0, span).  Returns 0, or -1 when host memory ran out. */
int cuemm__sa_init(cuemm__sa *s, size_t span);
void cuemm__sa_fini(cuemm__sa *s);

/* Ensures `n` spare descriptors, so that the next fill or drain cannot fail.
 * Returns 0, or -1 when host memory ran out. */
int cuemm__sa_reserve(cuemm__sa *s, uint32_t n);

/* Takes a block of at least `size` bytes (a multiple of CUEMM__SA_ALIGN)
 * and returns its index, or NIL when no free block is large enough even
 * after coalescing the caches.  A small request is first popped from its
 * class's cache; otherwise a FREE block is split to size.  O(1) except when
 * only a block of the request's own bin fits, which is searched, or when
 * the caches must be coalesced.  Never fails for lack of host memory:
 * without a spare descriptor the whole block is handed out. */
static inline uint32_t cuemm__sa_alloc(cuemm__sa *s, size_t size);

/* Returns a USED block: a small one goes to its class's cache as it is
 * (while the cache holds less than cache_limit bytes), any other merges
 * with free neighbours. */
static inline void cuemm__sa_free(cuemm__sa *s, uint32_t i);

/* cuemm__sa_alloc past the caches. */
uint32_t cuemm__sa_alloc_slow(cuemm__sa *s, size_t size);

/* cuemm__sa_free of a block that is not cached: merges it.  Its counters
 * are already moved. */
void cuemm__sa_free_merge(cuemm__sa *s, uint32_t i);

static inline uint32_t cuemm__sa_alloc(cuemm__sa *s, size_t size)
{
  uint32_t i;
  if (size >= CUEMM__SA_SMALL || (i = s->cache[size / CUEMM__SA_ALIGN]) == CUEMM__SA_NIL)
    return cuemm__sa_alloc_slow(s, size);
  cuemm__sa_block *b = &s->b[i];
  uint32_t n = b->lnext;
  s->cache[b->bin] = n;
  if (n != CUEMM__SA_NIL)
    s->b[n].lprev = CUEMM__SA_NIL;
  s->ncached[b->bin]--;
  s->cached_bytes -= size;
  s->free_count--;
  s->free_bytes -= size;
  b->state = CUEMM__SA_USED;
  s->used_bytes += size;
  s->used_count++;
  return i;
}

static inline void cuemm__sa_free(cuemm__sa *s, uint32_t i)
{
  cuemm__sa_block *b = &s->b[i];
  size_t size = b->size;
  s->used_bytes -= size;
  s->free_bytes += size;
  s->used_count--;
  if (size >= CUEMM__SA_SMALL) {
    cuemm__sa_free_merge(s, i);
    return;
  }
  unsigned k = (unsigned)(size / CUEMM__SA_ALIGN);
  if ((size_t)s->ncached[k] * size >= s->cache_limit) {
    cuemm__sa_free_merge(s, i);
    return;
  }
  uint32_t h = s->cache[k];
  b->state = CUEMM__SA_CACHED;
  b->bin = (uint16_t)k;
  b->lprev = CUEMM__SA_NIL;
  b->lnext = h;
  if (h != CUEMM__SA_NIL)
    s->b[h].lprev = i;
  s->cache[k] = i;
  s->ncached[k]++;
  s->cached_bytes += size;
  s->free_count++;
}

/* Empties the caches, merging every cached block with its free and cached
 * neighbours.  O(cached blocks). */
void cuemm__sa_coalesce(cuemm__sa *s);

/* Turns [off, off + size), which must lie inside one HOLE block, into free
 * space (merged with free neighbours).  Needs 2 spare descriptors
 * (cuemm__sa_reserve). */
void cuemm__sa_fill(cuemm__sa *s, size_t off, size_t size);

/* Turns [off, off + size), which must lie inside one FREE block (coalesce
 * the caches first: a cached block is not merged with its neighbours), into a hole
 * (merged with neighbouring holes).  Needs 2 spare descriptors. */
void cuemm__sa_drain(cuemm__sa *s, size_t off, size_t size);

/* Turns [off, off + size), inside one HOLE block, into a USED block that
 * is never handed out: memory the pool could map but not set up, nor
 * unmap again.  Needs 2 spare descriptors. */
void cuemm__sa_quarantine(cuemm__sa *s, size_t off, size_t size);

/* The block containing offset `off` (a walk in address order: slow path). */
uint32_t cuemm__sa_find(const cuemm__sa *s, size_t off);

/* The size of the largest FREE or CACHED block (0 if none). */
size_t cuemm__sa_largest_free(const cuemm__sa *s);

/* Checks every invariant (tiling, links, counters, no two adjacent FREE
 * blocks or holes; CACHED blocks may have free neighbours).  Returns NULL, or a description of the first violation. */
const char *cuemm__sa_check(const cuemm__sa *s);

#endif
