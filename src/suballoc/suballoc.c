/* suballoc.c: owns the pool's sub-allocator (interface in suballoc.h), but
 * for the parts with files of their own (shared.h lists them):
 * the placement of blocks in the pool's address space (managed.c's
 * segments too), over offsets only, never the driver: the fits, splitting,
 * the descriptors, stream tags, the frees of large sizes the caches' fast
 * path does not take, and the queries.
 *
 * Segregated free lists with bitmaps, in the manner of TLSF (the bins are
 * shared.h's).  A small request looks first at the head of its
 * own bin, then at the first non-empty bin whose every block is large
 * enough (one bitmap scan), then, before giving up, at the rest of its own
 * bin.  A request from 16 KiB up to CUEMM__SA_LOW_FIT (64 KiB) takes the
 * best fit instead (lowest address among equals): in its own bin, else in
 * the first non-empty bin above.  A request of CUEMM__SA_LOW_FIT or more
 * takes the free block of lowest address that fits, found in one descent
 * of a tree of the tag's free blocks of that size or more (addrtree.c),
 * kept beside the bins, so that live blocks pack towards low addresses and
 * free space gathers in large runs at the top.  It helps where large sizes
 * come and go at random (CuPy-like logs) and in the deferred path; with the
 * threads' kept large blocks (stream.c) it changes little
 * (docs/design.md has the footprints measured).  Whatever a chosen
 * block has beyond the request is split off and stays free, in the block's
 * place in the tree.
 *
 * Tags: a block freed on a stream whose work may still use it is FREE with
 * that stream's tag, in bins of its tag (see suballoc.h); idle free blocks
 * have tag 0.  The caller (tags.c) decides which tags a request may
 * take from and when a tag's blocks become idle (cuemm__sa_untag).
 *
 * Blocks are descriptors in one array linked in address order; the array
 * grows by doubling and freed descriptors are reused, so steady traffic
 * allocates no host memory.
 */
#include "suballoc/suballoc.h"

#include <stdlib.h>
#include <string.h>

#include "suballoc/suballoc-coalesce.h"
#include "suballoc/shared.h"
#include "suballoc/suballoc-merge.h"

/* ---- bins ----------------------------------------------------------------- */

/* The first bin whose every block holds `size`. */
static inline unsigned bin_above(size_t size)
{
  size_t u = size / CUEMM__SA_ALIGN;
  if (u < 64)
    return (unsigned)u;
  unsigned fl = 63u - (unsigned)__builtin_clzll((unsigned long long)u);
  size_t step = (size_t)1 << (fl - 4);
  if ((u & (step - 1)) == 0)
    return cuemm__sa_bin_of(size);
  return cuemm__sa_bin_of((u + step) * CUEMM__SA_ALIGN) ;
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

/* Cuts block i (unlinked) at `at` bytes from its start; the upper part gets
 * a new descriptor with the same state, unlinked, and is returned (NIL when
 * no descriptor could be had: nothing changes then). */
uint32_t cuemm__sa_split(cuemm__sa *s, uint32_t i, size_t at)
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

/* ---- the interface ---------------------------------------------------------- */

int cuemm__sa_init(cuemm__sa *s, size_t span)
{
  memset(s, 0, sizeof *s);
  s->spare = s->holes = NIL;
  cuemm__sa_bins_init(&s->idle);
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
  cuemm__sa_list_add(s, i);
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
    uint32_t i = best_in(s, bs->heads[cuemm__sa_bin_of(size)], size);
    if (i != NIL)
      return i;
    unsigned k = first_nonempty(bs, cuemm__sa_bin_of(size) + 1);
    return k <= top ? best_in(s, bs->heads[k], size) : NIL;
  }
  unsigned own = cuemm__sa_bin_of(size);
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
      uint32_t rest = cuemm__sa_split(s, i, size);
      if (rest != NIL)
        free_link(s, rest);
    }
    return i;
  }
  /* In its tree, the rest takes the block's place. */
  cuemm__sa_bins *bs = cuemm__sa_bins_at(s, s->b[i].tag);
  cuemm__sa_bins_unlink(s, i);
  uint32_t rest = s->b[i].size > size ? cuemm__sa_split(s, i, size) : NIL;
  if (rest == NIL) {
    cuemm__sa_tree_del(s, bs, i);
    return i;
  }
  cuemm__sa_bins_link(s, rest);
  if (s->b[rest].size >= CUEMM__SA_LOW_FIT)
    cuemm__at_replace(s->at, &bs->tree, i, rest, s->b[rest].off, s->b[rest].size);
  else
    cuemm__sa_tree_del(s, bs, i);
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

/* Moves the FREE blocks of tag `from` numbered up to `done` to tag `to`
 * (0: idle) with the number `seq`, then merges them. */
static size_t move_tag(cuemm__sa *s, uint32_t from, uint64_t done, uint32_t to, uint64_t seq)
{
  if (!from || from > s->ntags || !s->tagged[from - 1])
    return 0;
  if (to && cuemm__sa_bins_make(s, to) != 0)
    return 0;
  cuemm__sa_bins *bs = s->tagged[from - 1];
  /* First out of the tag's bins, then merged: a merge may absorb another
   * block of the tag, which must not be in the middle of a walk of its bin.
   * Between the two they are in no list (DETACHED), so a merge that absorbs
   * one unlinks nothing; linking them to their new tag's lists and taking
   * them out again before their merge cost two tree operations a block. */
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
      cuemm__sa_list_del(s, i);
      s->b[i].tag = to;
      s->b[i].seq = to ? seq : 0;
      s->b[i].bin = DETACHED;
      s->scratch[n++] = i;
      moved += s->b[i].size;
    }
  for (uint32_t j = 0; j < n; j++) {
    uint32_t i = s->scratch[j];
    /* Absorbed by an earlier merge (its descriptor is spare now: merging
     * takes no descriptor, so none is reused meanwhile), or the survivor
     * of one, merged on both sides and linked already. */
    if (s->b[i].state != CUEMM__SA_FREE || s->b[i].bin != DETACHED)
      continue;
    cuemm__sa_merge_link(s, i, 1);
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

uint32_t cuemm__sa_fit_below(const cuemm__sa *s, size_t size, uint32_t tag, size_t limit)
{
  const cuemm__sa_bins *bs = cuemm__sa_bins_of(s, tag);
  if (!bs || bs->bytes < size || limit <= size)
    return NIL;
  uint32_t i = find_free(s, bs, size, cuemm__sa_bin_of(limit - 1));
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

/* The large caches' slow push stays here rather than with their
 * coalescing: it finds slots through suballoc.h's inline lookups, and
 * suballoc-coalesce.c, which this file calls, calls nothing of this
 * file's. */
void cuemm__sa_free_large(cuemm__sa *s, uint32_t i)
{
  size_t size = s->b[i].size;
  uint32_t k = cuemm__sa_lslot(s, size);
  if (k == NIL && s->lkeys >= CUEMM__SA_LKEYS)
    cuemm__sa_coalesce_large(s);
  else if (!cuemm__sa_large_room(s, size)) {
    cuemm__sa_coalesce_large(s);
    k = NIL;
  }
  if (k == NIL && !cuemm__sa_large_room(s, size)) {
    /* Alone past the bound: not worth caching. */
    cuemm__sa_merge_idle(s, i);
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

void cuemm__sa_each_free(const cuemm__sa *s, size_t min, void (*fn)(void *arg, const cuemm__sa_block *b), void *arg)
{
  for (unsigned k = first_nonempty(&s->idle, cuemm__sa_bin_of(min)); k < CUEMM__SA_NBINS; k = first_nonempty(&s->idle, k + 1))
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
