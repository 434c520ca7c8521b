/* suballoc.c: owns the pool's sub-allocator (interface in suballoc.h): the
 * placement of blocks in the pool's address space (managed.c's segments
 * too), over offsets only, never the driver: free lists and their bins,
 * splitting and merging, the caches of freed sizes, stream tags, holes for
 * unmapped space, and the invariant check the tests run.
 *
 * Segregated free lists with bitmaps, in the manner of TLSF: a free block
 * sits in the bin of its size; small sizes (below 16 KiB) have a bin per
 * 256-byte size class; larger sizes have sixteen bins per power of two.  A
 * small request looks first at the head of its own bin, then at the first
 * non-empty bin whose every block is large enough (one bitmap scan), then,
 * before giving up, at the rest of its own bin.  A request from 16 KiB
 * up to CUEMM__SA_LOW_FIT (64 KiB) takes the best fit instead (lowest
 * address among equals): in its own bin, else in the first non-empty bin
 * above.  A request of CUEMM__SA_LOW_FIT or more takes the free block of
 * lowest address that fits, found in one descent of a tree of the tag's
 * free blocks of that size or more (addrtree.c), kept beside the bins,
 * so that live blocks pack towards low addresses and free space gathers
 * in large runs at the top.  It helps where large sizes come and go at
 * random (CuPy-like logs) and in the deferred path; with the threads'
 * kept large blocks (stream.c) it changes little (docs/performance.md has
 * the footprints measured).  Whatever a chosen block has beyond the request is
 * split off and stays free, in the block's place in the tree, and a freed
 * large block merges with free neighbours at once, the merged block taking
 * the place of a neighbour's node.
 *
 * Tags: a block freed on a stream whose work may still use it is FREE with
 * that stream's tag, in bins of its tag (see suballoc.h); idle free blocks
 * have tag 0.  The caller (stream-tags.c) decides which tags a request may
 * take from and when a tag's blocks become idle (cuemm__sa_untag).
 *
 * Small blocks are different: a freed one goes, whole and unmerged, to a
 * cache per size class (deferred coalescing), and a small request pops its
 * class's cache before anything else, so steady small traffic neither splits
 * nor merges.  The caches are coalesced lazily, all at once: when a request
 * finds no free block large enough (before the pool grows), and before the
 * pool releases memory (a chunk goes back only when wholly free, which a
 * cached block inside it hides).  A class whose cache holds cache_limit bytes
 * takes no more: further frees of its size merge at once.  Cached blocks
 * count as free in every counter.
 *
 * Large blocks below CUEMM__SA_LOW_FIT are cached the same way, by exact
 * size: a small open-addressing map from size to a LIFO list, so that
 * steady traffic of those sizes pops what it pushed.  Larger ones are not:
 * a cache by size hands a block back wherever it lies, which undoes the
 * lowest-address placement.  Besides the occasions above, the large caches are coalesced
 * when their bytes would pass max(large_limit, a quarter of the mapped
 * bytes), which bounds the free space kept in pieces, and when the map runs
 * out of slots for new sizes (coalescing empties it).
 *
 * Blocks are descriptors in one array linked in address order; the array
 * grows by doubling and freed descriptors are reused, so steady traffic
 * allocates no host memory.  Unmapped space is kept as HOLE blocks in the
 * same order, which lets growth and release reuse the same splitting and
 * merging.
 */
#include "suballoc.h"

#include <stdlib.h>
#include <string.h>

#define NIL CUEMM__SA_NIL

/* ---- bins ----------------------------------------------------------------- */

static inline unsigned bin_of(size_t size)
{
  size_t u = size / CUEMM__SA_ALIGN;
  if (u < 64)
    return (unsigned)u;
  unsigned fl = 63u - (unsigned)__builtin_clzll((unsigned long long)u);
  unsigned sl = (unsigned)(u >> (fl - 4)) & 15u;
  unsigned bin = 64 + (fl - 6) * 16 + sl;
  return bin < CUEMM__SA_NBINS ? bin : CUEMM__SA_NBINS - 1;
}

/* The first bin whose every block holds `size`. */
static inline unsigned bin_above(size_t size)
{
  size_t u = size / CUEMM__SA_ALIGN;
  if (u < 64)
    return (unsigned)u;
  unsigned fl = 63u - (unsigned)__builtin_clzll((unsigned long long)u);
  size_t step = (size_t)1 << (fl - 4);
  if ((u & (step - 1)) == 0)
    return bin_of(size);
  return bin_of((u + step) * CUEMM__SA_ALIGN) ;
}

static inline unsigned first_nonempty(const cuemm__sa_bins *bs, unsigned from)
{
  unsigned w = from / 64;
  if (w >= CUEMM__SA_NBINS / 64)
    return CUEMM__SA_NBINS;
  uint64_t bits = bs->bitmap[w] & (~(uint64_t)0 << (from % 64));
  while (!bits) {
    if (++w == CUEMM__SA_NBINS / 64)
      return CUEMM__SA_NBINS;
    bits = bs->bitmap[w];
  }
  return w * 64 + (unsigned)__builtin_ctzll(bits);
}

static void bins_init(cuemm__sa_bins *bs)
{
  memset(bs, 0, sizeof *bs);
  bs->tree = NIL;
  for (unsigned k = 0; k < CUEMM__SA_NBINS; k++)
    bs->heads[k] = NIL;
}

/* The bins of a FREE block's tag (which exist: the block is in them). */
static inline cuemm__sa_bins *bins_of(const cuemm__sa *s, uint32_t tag)
{
  return tag ? s->tagged[tag - 1] : (cuemm__sa_bins *)&s->idle;
}

/* Makes sure tag's bins exist.  Returns -1 when host memory ran out. */
static int bins_make(cuemm__sa *s, uint32_t tag)
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
  bins_init(bs);
  s->tagged[tag - 1] = bs;
  return 0;
}

/* ---- lists ---------------------------------------------------------------- */

/* FREE block i joins the bins of its tag (not its tree).  The free and
 * alloc paths' own helper, kept apart from list_add so that they inline it
 * whole. */
static inline __attribute__((always_inline)) void bins_link(cuemm__sa *s, uint32_t i)
{
  cuemm__sa_block *b = &s->b[i];
  cuemm__sa_bins *bs = bins_of(s, b->tag);
  unsigned bin = bin_of(b->size);
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
static inline __attribute__((always_inline)) void bins_unlink(cuemm__sa *s, uint32_t i)
{
  cuemm__sa_block *b = &s->b[i];
  cuemm__sa_bins *bs = bins_of(s, b->tag);
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
static inline void tree_del(cuemm__sa *s, cuemm__sa_bins *bs, uint32_t i)
{
  cuemm__at_remove(s->at, &bs->tree, i);
  bs->tree_count--;
}

/* FREE block i joins the bins of its tag, and its tree when large. */
static inline __attribute__((always_inline)) void free_link(cuemm__sa *s, uint32_t i)
{
  bins_link(s, i);
  cuemm__sa_block *b = &s->b[i];
  if (b->size >= CUEMM__SA_LOW_FIT) {
    cuemm__sa_bins *bs = bins_of(s, b->tag);
    cuemm__at_insert(s->at, &bs->tree, i, b->off, b->size);
    bs->tree_count++;
  }
}

/* FREE block i leaves its bin, and its tree when large. */
static inline __attribute__((always_inline)) void free_unlink(cuemm__sa *s, uint32_t i)
{
  bins_unlink(s, i);
  if (s->b[i].size >= CUEMM__SA_LOW_FIT)
    tree_del(s, bins_of(s, s->b[i].tag), i);
}

static inline void list_add(cuemm__sa *s, uint32_t i)
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

static inline void list_del(cuemm__sa *s, uint32_t i)
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

/* ---- descriptors ---------------------------------------------------------- */

int cuemm__sa_reserve(cuemm__sa *s, uint32_t n)
{
  if (s->nspare >= n)
    return 0;
  uint32_t cap = s->cap ? s->cap * 2 : 64;
  while (cap - s->cap + s->nspare < n)
    cap *= 2;
  /* The tree nodes first: if the descriptors cannot follow, the nodes'
   * array is only larger than it needs be. */
  cuemm__at_node *at = realloc(s->at, (size_t)cap * sizeof *at);
  if (!at)
    return -1;
  s->at = at;
  cuemm__sa_block *b = realloc(s->b, (size_t)cap * sizeof *b);
  if (!b)
    return -1;
  s->b = b;
  for (uint32_t i = cap; i-- > s->cap;) {
    memset(&b[i], 0, sizeof b[i]);
    b[i].lnext = s->spare;
    s->spare = i;
    s->nspare++;
  }
  s->cap = cap;
  return 0;
}

static inline uint32_t desc_new(cuemm__sa *s)
{
  if (s->spare == NIL && cuemm__sa_reserve(s, 1) != 0)
    return NIL;
  uint32_t i = s->spare;
  s->spare = s->b[i].lnext;
  s->nspare--;
  return i;
}

static inline void desc_put(cuemm__sa *s, uint32_t i)
{
  s->b[i].state = CUEMM__SA_SPARE;
  s->b[i].lnext = s->spare;
  s->spare = i;
  s->nspare++;
}

/* Cuts block i (unlinked) at `at` bytes from its start; the upper part gets
 * a new descriptor with the same state, unlinked, and is returned (NIL when
 * no descriptor could be had: nothing changes then). */
static uint32_t split(cuemm__sa *s, uint32_t i, size_t at)
{
  uint32_t j = desc_new(s);
  if (j == NIL)
    return NIL;
  cuemm__sa_block *a = &s->b[i], *c = &s->b[j];
  c->off = a->off + at;
  c->size = a->size - at;
  c->state = a->state;
  c->tag = a->tag;
  c->seq = a->seq;
  c->prev = i;
  c->next = a->next;
  if (a->next != NIL)
    s->b[a->next].prev = j;
  a->next = j;
  a->size = at;
  return j;
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
  if (b->state != CUEMM__SA_FREE || b->size < CUEMM__SA_LOW_FIT) {
    list_del(s, x);
    return;
  }
  cuemm__sa_bins *bs = bins_of(s, b->tag);
  bins_unlink(s, x);
  if (st->n < MERGE_STALE) {
    st->i[st->n] = x;
    st->bs[st->n++] = bs;
  } else
    tree_del(s, bs, x);
}

/* Block i (unlinked, final state set) absorbs its mergeable neighbours
 * (runs of them on both sides), and the surviving block (the lowest), with
 * the tag of any tagged part and the newest free number, joins its lists. */
static void merge_link(cuemm__sa *s, uint32_t i, int mix)
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
    list_add(s, i); /* nothing stale: only free blocks merge with free ones */
    return;
  }
  bins_link(s, i);
  cuemm__sa_bins *bs = bins_of(s, b->tag);
  uint32_t keep = st.n;
  if (b->size >= CUEMM__SA_LOW_FIT)
    for (keep = 0; keep < st.n && st.bs[keep] != bs; keep++)
      ;
  /* The others leave first: within the merged range, their keys would
   * stand beside the merged block's. */
  for (uint32_t k = 0; k < st.n; k++)
    if (k != keep)
      tree_del(s, st.bs[k], st.i[k]);
  if (keep < st.n)
    cuemm__at_replace(s->at, &bs->tree, st.i[keep], i, b->off, b->size);
  else if (b->size >= CUEMM__SA_LOW_FIT) {
    cuemm__at_insert(s->at, &bs->tree, i, b->off, b->size);
    bs->tree_count++;
  }
}

/* ---- the interface ---------------------------------------------------------- */

int cuemm__sa_init(cuemm__sa *s, size_t span)
{
  memset(s, 0, sizeof *s);
  s->spare = s->holes = NIL;
  bins_init(&s->idle);
  for (unsigned k = 0; k < CUEMM__SA_SMALL / CUEMM__SA_ALIGN; k++)
    s->cache[k] = NIL;
  for (unsigned k = 0; k < CUEMM__SA_LSLOTS; k++)
    s->lhead[k] = NIL;
  s->cache_limit = CUEMM__SA_CACHE_LIMIT;
  s->large_limit = CUEMM__SA_LARGE_LIMIT;
  if (cuemm__sa_reserve(s, 1) != 0)
    return -1;
  uint32_t i = desc_new(s); /* descriptor 0: the stack hands out the lowest first */
  s->b[i] = (cuemm__sa_block){ .off = 0, .size = span, .prev = NIL, .next = NIL, .state = CUEMM__SA_HOLE };
  list_add(s, i);
  s->span = span;
  s->hole_bytes = span;
  return 0;
}

void cuemm__sa_fini(cuemm__sa *s)
{
  for (uint32_t t = 0; t < s->ntags; t++)
    free(s->tagged[t]);
  free(s->tagged);
  free(s->scratch);
  free(s->at);
  free(s->b);
  memset(s, 0, sizeof *s);
}

/* The smallest block of at least `size` bytes in list i (lowest address
 * among equals), or NIL. */
static inline uint32_t best_in(const cuemm__sa *s, uint32_t i, size_t size)
{
  uint32_t best = NIL;
  for (; i != NIL; i = s->b[i].lnext)
    if (s->b[i].size >= size &&
        (best == NIL || s->b[i].size < s->b[best].size ||
         (s->b[i].size == s->b[best].size && s->b[i].off < s->b[best].off)))
      best = i;
  return best;
}

/* A FREE block of at least `size` bytes in bins bs, or NIL.  Requests of
 * CUEMM__SA_LOW_FIT or more take the lowest-address fit from the tree.
 * Small requests take the head of the first bin that serves them (good fit, O(1)).
 * Those between take the best fit: in their own bin, else in the first bin
 * above, lowest address among equals; their bins are short, and a good
 * fit's choice of whatever block heads a larger bin splits large free
 * blocks for requests a smaller one would serve (a serving trace with
 * requests of 300 MB held 1.8x its live bytes so).  A large request looks
 * at no bin above `top` (CUEMM__SA_NBINS - 1: all of them), so that a
 * caller that only wants a block under some size is often answered by the
 * bitmap alone. */
static uint32_t find_free(const cuemm__sa *s, const cuemm__sa_bins *bs, size_t size, unsigned top)
{
  if (size >= CUEMM__SA_LOW_FIT)
    return cuemm__at_lowest_fit(s->at, bs->tree, size);
  if (size >= CUEMM__SA_BEST_FIT) {
    uint32_t i = best_in(s, bs->heads[bin_of(size)], size);
    if (i != NIL)
      return i;
    unsigned k = first_nonempty(bs, bin_of(size) + 1);
    return k <= top ? best_in(s, bs->heads[k], size) : NIL;
  }
  unsigned own = bin_of(size);
  uint32_t i = bs->heads[own];
  if (i == NIL || s->b[i].size < size) {
    unsigned k = first_nonempty(bs, bin_above(size));
    if (k < CUEMM__SA_NBINS)
      i = bs->heads[k];
    else {
      /* Only a block of the request's own bin may still fit. */
      for (i = i == NIL ? NIL : s->b[i].lnext; i != NIL && s->b[i].size < size; i = s->b[i].lnext)
        ;
    }
  }
  return i;
}

/* Unlinks FREE block i and splits it to `size`; the rest stays free, with
 * its tag. */
static uint32_t cut(cuemm__sa *s, uint32_t i, size_t size)
{
  if (s->b[i].size < CUEMM__SA_LOW_FIT) {
    free_unlink(s, i);
    if (s->b[i].size > size) {
      uint32_t rest = split(s, i, size);
      if (rest != NIL)
        free_link(s, rest);
    }
    return i;
  }
  /* In its tree, the rest takes the block's place. */
  cuemm__sa_bins *bs = bins_of(s, s->b[i].tag);
  bins_unlink(s, i);
  uint32_t rest = s->b[i].size > size ? split(s, i, size) : NIL;
  if (rest == NIL) {
    tree_del(s, bs, i);
    return i;
  }
  bins_link(s, rest);
  if (s->b[rest].size >= CUEMM__SA_LOW_FIT)
    cuemm__at_replace(s->at, &bs->tree, i, rest, s->b[rest].off, s->b[rest].size);
  else
    tree_del(s, bs, i);
  return i;
}

/* Takes an idle FREE block of at least `size` bytes from the bins, or NIL. */
static uint32_t take_free(cuemm__sa *s, size_t size)
{
  uint32_t i = find_free(s, &s->idle, size, CUEMM__SA_NBINS - 1);
  return i == NIL ? NIL : cut(s, i, size);
}

uint32_t cuemm__sa_alloc_slow(cuemm__sa *s, size_t size)
{
  uint32_t i = take_free(s, size);
  if (i == NIL) {
    /* Even when the cached bytes alone are too few: merged with free
     * neighbours they may be enough, and growth sees only FREE blocks. */
    if (s->cached_bytes == 0)
      return NIL;
    cuemm__sa_coalesce(s);
    if ((i = take_free(s, size)) == NIL)
      return NIL;
  }
  cuemm__sa_mark_used(s, i);
  return i;
}

uint32_t cuemm__sa_alloc_tagged(cuemm__sa *s, size_t size, uint32_t tag)
{
  uint32_t i = tag ? cuemm__sa_fit_for(s, size, tag) : NIL;
  if (i == NIL)
    return cuemm__sa_alloc(s, size);
  cut(s, i, size);
  cuemm__sa_mark_used(s, i);
  return i;
}

int cuemm__sa_free_tagged(cuemm__sa *s, uint32_t i, uint32_t tag, uint64_t seq)
{
  if (tag && bins_make(s, tag) != 0)
    return -1;
  size_t size = s->b[i].size;
  s->used_bytes -= size;
  s->free_bytes += size;
  s->used_count--;
  s->b[i].state = CUEMM__SA_FREE;
  s->b[i].tag = tag;
  s->b[i].seq = seq;
  merge_link(s, i, 1);
  return 0;
}

/* Moves the FREE blocks of tag `from` numbered up to `done` to tag `to`
 * (0: idle) with the number `seq`, then merges them. */
static size_t move_tag(cuemm__sa *s, uint32_t from, uint64_t done, uint32_t to, uint64_t seq)
{
  if (!from || from > s->ntags || !s->tagged[from - 1])
    return 0;
  if (to && bins_make(s, to) != 0)
    return 0;
  cuemm__sa_bins *bs = s->tagged[from - 1];
  /* First out of the tag's bins, then merged: a merge may absorb another
   * block of the tag, which must not be in the middle of a walk of its bin. */
  if (s->nscratch < bs->count) {
    uint32_t *g = realloc(s->scratch, bs->count * sizeof *g);
    if (!g)
      return 0; /* they stay tagged: later, or a synchronization, frees them */
    s->scratch = g;
    s->nscratch = (uint32_t)bs->count;
  }
  uint32_t n = 0;
  size_t moved = 0;
  for (unsigned k = first_nonempty(bs, 0); k < CUEMM__SA_NBINS; k = first_nonempty(bs, k + 1))
    for (uint32_t i = bs->heads[k], next; i != NIL; i = next) {
      next = s->b[i].lnext;
      if (s->b[i].seq > done)
        continue;
      list_del(s, i);
      s->b[i].tag = to;
      s->b[i].seq = to ? seq : 0;
      list_add(s, i);
      s->scratch[n++] = i;
      moved += s->b[i].size;
    }
  for (uint32_t j = 0; j < n; j++) {
    uint32_t i = s->scratch[j];
    /* Absorbed by an earlier merge: its descriptor is spare now (merging
     * takes no descriptor, so none is reused meanwhile). */
    if (s->b[i].state != CUEMM__SA_FREE)
      continue;
    list_del(s, i);
    merge_link(s, i, 1);
  }
  return moved;
}

size_t cuemm__sa_untag(cuemm__sa *s, uint32_t tag, uint64_t done)
{
  return move_tag(s, tag, done, 0, 0);
}

size_t cuemm__sa_retag(cuemm__sa *s, uint32_t from, uint32_t to, uint64_t seq)
{
  return from == to ? 0 : move_tag(s, from, UINT64_MAX, to, seq);
}

void cuemm__sa_free_merge(cuemm__sa *s, uint32_t i)
{
  s->b[i].state = CUEMM__SA_FREE;
  s->b[i].tag = 0;
  s->b[i].seq = 0;
  merge_link(s, i, 1);
}

uint32_t cuemm__sa_fit_below(const cuemm__sa *s, size_t size, uint32_t tag, size_t limit)
{
  const cuemm__sa_bins *bs = cuemm__sa_bins_of(s, tag);
  if (!bs || bs->bytes < size || limit <= size)
    return NIL;
  uint32_t i = find_free(s, bs, size, bin_of(limit - 1));
  return i != NIL && s->b[i].size < limit ? i : NIL;
}

/* The pool's path asks this at every request: the limit's tests stay out. */
uint32_t cuemm__sa_fit(const cuemm__sa *s, size_t size, uint32_t tag)
{
  const cuemm__sa_bins *bs = cuemm__sa_bins_of(s, tag);
  return bs && bs->bytes >= size ? find_free(s, bs, size, CUEMM__SA_NBINS - 1) : NIL;
}

void cuemm__sa_take(cuemm__sa *s, uint32_t i, size_t size)
{
  cut(s, i, size);
  cuemm__sa_mark_used(s, i);
}

int cuemm__sa_fits(const cuemm__sa *s, size_t size, uint32_t tag)
{
  return cuemm__sa_fit(s, size, 0) != NIL || (tag && cuemm__sa_fit(s, size, tag) != NIL);
}

/* Empties the large caches and the map. */
static void coalesce_large(cuemm__sa *s)
{
  for (unsigned k = 0; k < CUEMM__SA_LSLOTS && s->lkeys; k++) {
    if (s->lkey[k] == 0)
      continue;
    uint32_t i;
    while ((i = s->lhead[k]) != NIL) {
      list_del(s, i);
      s->b[i].state = CUEMM__SA_FREE;
      s->b[i].tag = 0;
      merge_link(s, i, 1);
    }
    s->lkey[k] = 0;
    s->lkeys--;
  }
}

void cuemm__sa_free_large(cuemm__sa *s, uint32_t i)
{
  size_t size = s->b[i].size;
  uint32_t k = cuemm__sa_lslot(s, size);
  if (k == NIL && s->lkeys >= CUEMM__SA_LKEYS)
    coalesce_large(s);
  else if (!cuemm__sa_large_room(s, size)) {
    coalesce_large(s);
    k = NIL;
  }
  if (k == NIL && !cuemm__sa_large_room(s, size)) {
    /* Alone past the bound: not worth caching. */
    cuemm__sa_free_merge(s, i);
    return;
  }
  if (k == NIL) {
    k = (uint32_t)(((unsigned long long)(size / CUEMM__SA_ALIGN) * 0x9E3779B97F4A7C15ull) >> 57);
    while (s->lkey[k] != 0)
      k = (k + 1) & (CUEMM__SA_LSLOTS - 1);
    s->lkey[k] = size;
    s->lhead[k] = NIL;
    s->lkeys++;
  }
  cuemm__sa_block *b = &s->b[i];
  uint32_t h = s->lhead[k];
  b->state = CUEMM__SA_CACHED;
  b->bin = (uint16_t)k;
  b->lprev = NIL;
  b->lnext = h;
  if (h != NIL)
    s->b[h].lprev = i;
  s->lhead[k] = i;
  s->lcached_bytes += size;
  s->lcached_count++;
  s->cached_bytes += size;
  s->free_count++;
}

void cuemm__sa_coalesce(cuemm__sa *s)
{
  coalesce_large(s);
  for (unsigned k = 1; k < CUEMM__SA_SMALL / CUEMM__SA_ALIGN && s->cached_bytes; k++) {
    uint32_t i;
    while ((i = s->cache[k]) != NIL) {
      list_del(s, i);
      s->b[i].state = CUEMM__SA_FREE;
      s->b[i].tag = 0;
      merge_link(s, i, 1);
    }
  }
}

/* Gives the part [off, off + size) of the linked block containing it the
 * state `to` (FREE ones the tag `tag`), then merges it.  2 spare
 * descriptors must be at hand. */
static void recolor_tagged(cuemm__sa *s, size_t off, size_t size, uint8_t to, uint32_t tag)
{
  uint32_t i = cuemm__sa_find(s, off);
  list_del(s, i);
  if (s->b[i].off < off) {
    uint32_t j = split(s, i, off - s->b[i].off);
    list_add(s, i);
    i = j;
  }
  if (s->b[i].size > size)
    list_add(s, split(s, i, size));
  s->b[i].state = to;
  s->b[i].tag = tag;
  s->b[i].seq = 0;
  if (to == CUEMM__SA_USED)
    s->used_count++;
  else
    merge_link(s, i, tag != 0);
}

static void recolor(cuemm__sa *s, size_t off, size_t size, uint8_t to)
{
  recolor_tagged(s, off, size, to, 0);
}

void cuemm__sa_fill(cuemm__sa *s, size_t off, size_t size)
{
  recolor(s, off, size, CUEMM__SA_FREE);
  s->hole_bytes -= size;
  s->free_bytes += size;
}

void cuemm__sa_fill_tagged(cuemm__sa *s, size_t off, size_t size, uint32_t tag)
{
  recolor_tagged(s, off, size, CUEMM__SA_FREE, tag);
  s->hole_bytes -= size;
  s->free_bytes += size;
}

void cuemm__sa_drain(cuemm__sa *s, size_t off, size_t size)
{
  recolor(s, off, size, CUEMM__SA_HOLE);
  s->free_bytes -= size;
  s->hole_bytes += size;
}

void cuemm__sa_quarantine(cuemm__sa *s, size_t off, size_t size)
{
  recolor(s, off, size, CUEMM__SA_USED);
  s->hole_bytes -= size;
  s->used_bytes += size;
}

void cuemm__sa_each_free(const cuemm__sa *s, size_t min, void (*fn)(void *arg, const cuemm__sa_block *b), void *arg)
{
  for (unsigned k = first_nonempty(&s->idle, bin_of(min)); k < CUEMM__SA_NBINS; k = first_nonempty(&s->idle, k + 1))
    for (uint32_t i = s->idle.heads[k]; i != NIL; i = s->b[i].lnext)
      if (s->b[i].size >= min)
        fn(arg, &s->b[i]);
}

uint32_t cuemm__sa_find(const cuemm__sa *s, size_t off)
{
  uint32_t i = 0;
  while (i != NIL && off >= s->b[i].off + s->b[i].size)
    i = s->b[i].next;
  return i;
}

size_t cuemm__sa_largest_free(const cuemm__sa *s)
{
  size_t best = 0;
  for (unsigned k = CUEMM__SA_SMALL / CUEMM__SA_ALIGN; k-- > 0;)
    if (s->cache[k] != NIL) {
      best = (size_t)k * CUEMM__SA_ALIGN;
      break;
    }
  for (unsigned k = 0; k < CUEMM__SA_LSLOTS; k++)
    if (s->lhead[k] != NIL && s->lkey[k] > best)
      best = s->lkey[k];
  for (unsigned w = CUEMM__SA_NBINS / 64; w-- > 0;) {
    if (!s->idle.bitmap[w])
      continue;
    unsigned k = w * 64 + 63u - (unsigned)__builtin_clzll(s->idle.bitmap[w]);
    for (uint32_t i = s->idle.heads[k]; i != NIL; i = s->b[i].lnext)
      if (s->b[i].size > best)
        best = s->b[i].size;
    break;
  }
  return best;
}

size_t cuemm__sa_largest_extent(const cuemm__sa *s)
{
  size_t best = 0, run = 0;
  for (uint32_t i = 0; i != NIL; i = s->b[i].next) {
    uint8_t st = s->b[i].state;
    run = st == CUEMM__SA_FREE || st == CUEMM__SA_CACHED ? run + s->b[i].size : 0;
    if (run > best)
      best = run;
  }
  return best;
}

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
      if (b->bin != bin_of(b->size))
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
