/* test-suballoc.c: the pool's sub-allocator on its own, against a shadow
 * model: tens of thousands of random allocations, frees, fills (mapping) and
 * drains (release), with every invariant checked after each step.  Built
 * from src/suballoc*.c directly: no driver involved.
 */
#include <stdint.h>
#include <stdlib.h>

#include "suballoc/suballoc-check.h"
#include "suballoc/suballoc-hole.h"
#include "suballoc/suballoc.h"
#include "tap.h"

#define SPAN ((size_t)1 << 30)
#define UNIT ((size_t)4 << 20)
#define MAXLIVE 512

typedef struct live { uint32_t blk; size_t off, size; } live;

static uint64_t rng = 0x9E3779B97F4A7C15u;
static uint64_t next_rand(void)
{
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* The number of cached blocks. */
static size_t cached(const cuemm__sa *s)
{
  size_t n = s->lcached_count;
  for (size_t k = 0; k < CUEMM__SA_SMALL / CUEMM__SA_ALIGN; k++)
    n += s->ncached[k];
  return n;
}

/* Sizes from 256 B to 8 MiB, log-uniform. */
static size_t random_size(void)
{
  unsigned bits = 8 + (unsigned)(next_rand() % 16);
  size_t size = ((size_t)1 << bits) + (next_rand() % ((size_t)1 << bits));
  return (size + 255) & ~(size_t)255;
}

/* The model of the lowest-address fit: the first FREE block of `tag`, in
 * address order, of at least `size` bytes (NIL if none). */
static uint32_t lowest_model(const cuemm__sa *s, size_t size, uint32_t tag)
{
  for (uint32_t i = 0; i != CUEMM__SA_NIL; i = s->b[i].next)
    if (s->b[i].state == CUEMM__SA_FREE && s->b[i].tag == tag && s->b[i].size >= size)
      return i;
  return CUEMM__SA_NIL;
}

static void count_free(void *arg, const cuemm__sa_block *b)
{
  (void)b;
  ++*(size_t *)arg;
}

/* A sub-allocator with one unit mapped and cut into four blocks of 1 MiB,
 * q[0] to q[3] in address order, all in use. */
static void four_blocks(cuemm__sa *t, uint32_t q[4])
{
  cuemm__sa_init(t, SPAN);
  cuemm__sa_reserve(t, 2);
  cuemm__sa_fill(t, 0, UNIT);
  for (int k = 0; k < 4; k++)
    q[k] = cuemm__sa_alloc(t, (size_t)1 << 20);
}

int main(void)
{
  cuemm__sa s;
  ok(cuemm__sa_init(&s, SPAN) == 0, "init");
  ok(cuemm__sa_check(&s) == NULL, "a fresh span is one hole");
  is(s.hole_bytes, SPAN, "all of it a hole");
  is(cuemm__sa_alloc(&s, 256), CUEMM__SA_NIL, "nothing to allocate before a fill");

  /* Fill the middle of the hole, then its neighbours: they merge. */
  ok(cuemm__sa_reserve(&s, 2) == 0, "reserve descriptors");
  cuemm__sa_fill(&s, UNIT, UNIT);
  ok(cuemm__sa_check(&s) == NULL, "fill inside a hole: %s", cuemm__sa_check(&s) ? cuemm__sa_check(&s) : "ok");
  is(s.free_count, 1, "one free block");
  is(s.hole_count, 2, "two holes around it");
  cuemm__sa_reserve(&s, 2);
  cuemm__sa_fill(&s, 0, UNIT);
  cuemm__sa_reserve(&s, 2);
  cuemm__sa_fill(&s, 2 * UNIT, UNIT);
  ok(cuemm__sa_check(&s) == NULL, "adjacent fills");
  is(s.free_count, 1, "merged into one free block");
  is(cuemm__sa_largest_free(&s), 3 * UNIT, "of three units");

  uint32_t a = cuemm__sa_alloc(&s, 256), b = cuemm__sa_alloc(&s, 512), c = cuemm__sa_alloc(&s, 256);
  ok(a != CUEMM__SA_NIL && b != CUEMM__SA_NIL && c != CUEMM__SA_NIL, "three small blocks");
  is(s.b[a].off, 0, "first at 0");
  is(s.b[b].off, 256, "second after it");
  is(s.b[c].off, 768, "third after that");
  cuemm__sa_free(&s, b);
  uint32_t d = cuemm__sa_alloc(&s, 512);
  is(s.b[d].off, 256, "an exact-size hole is reused first");
  cuemm__sa_free(&s, a);
  cuemm__sa_free(&s, c);
  cuemm__sa_free(&s, d);
  ok(cuemm__sa_check(&s) == NULL, "small frees are cached");
  is(cached(&s), 3, "three cached blocks");
  is(s.free_count, 4, "cached blocks count as free");
  is(s.free_bytes, 3 * UNIT, "and so do their bytes");
  cuemm__sa_coalesce(&s);
  ok(cuemm__sa_check(&s) == NULL, "coalescing merges them");
  is(s.free_count, 1, "back to one free block");
  is(cuemm__sa_alloc(&s, 3 * UNIT + 256), CUEMM__SA_NIL, "a request larger than all free space fails");

  /* The small-block caches, on a span of their own. */
  {
    cuemm__sa c2;
    cuemm__sa_init(&c2, SPAN);
    cuemm__sa_reserve(&c2, 2);
    cuemm__sa_fill(&c2, UNIT, UNIT);
    uint32_t x = cuemm__sa_alloc(&c2, 4096);
    size_t x_off = c2.b[x].off;
    cuemm__sa_free(&c2, x);
    is(c2.b[x].state, CUEMM__SA_CACHED, "a freed 4 KiB block is cached");
    is(cached(&c2), 1, "one cached block");
    uint32_t nspare = c2.nspare, bins = (uint32_t)(c2.free_count - cached(&c2));
    uint32_t y = cuemm__sa_alloc(&c2, 4096);
    ok(y == x && c2.b[y].off == x_off, "the next 4 KiB request gets it back");
    ok(c2.nspare == nspare && c2.free_count == bins, "without a split: no descriptor taken, the free block untouched");
    cuemm__sa_free(&c2, y);

    /* Cut the whole unit into 4 KiB blocks, return them all: all cached. */
    uint32_t *blk = malloc((UNIT / 4096 + 1) * sizeof *blk); /* room for the failing call's NIL */
    size_t nb = 0;
    while ((blk[nb] = cuemm__sa_alloc(&c2, 4096)) != CUEMM__SA_NIL)
      nb++;
    is(nb, UNIT / 4096, "the unit holds %zu blocks of 4 KiB", UNIT / 4096);
    for (size_t k = 0; k < nb; k += 2)
      cuemm__sa_free(&c2, blk[k]);
    for (size_t k = 1; k < nb; k += 2)
      cuemm__sa_free(&c2, blk[k]);
    ok(cuemm__sa_check(&c2) == NULL, "all cached: %s", cuemm__sa_check(&c2) ? cuemm__sa_check(&c2) : "ok");
    is(cached(&c2), nb, "every block cached, none merged");
    is(c2.free_bytes, UNIT, "the whole unit free");
    is(cuemm__sa_largest_free(&c2), 4096, "the largest free block is a cached one");
    uint32_t big = cuemm__sa_alloc(&c2, UNIT);
    ok(big != CUEMM__SA_NIL && c2.b[big].off == UNIT, "a request of the whole unit is served by coalescing the caches");
    is(cached(&c2), 0, "the caches are empty afterwards");
    ok(cuemm__sa_check(&c2) == NULL, "coalesced state is sound");
    is(c2.hole_bytes, SPAN - UNIT, "without any fill");

    /* Cache it all again, then release the unit the way a trim does. */
    cuemm__sa_free(&c2, big);
    nb = 0;
    while ((blk[nb] = cuemm__sa_alloc(&c2, 4096)) != CUEMM__SA_NIL)
      nb++;
    while (nb > 0)
      cuemm__sa_free(&c2, blk[--nb]);
    is(cached(&c2), UNIT / 4096, "all cached again");
    cuemm__sa_coalesce(&c2);
    ok(cuemm__sa_check(&c2) == NULL && c2.free_count == 1, "coalescing leaves one free block");
    cuemm__sa_reserve(&c2, 2);
    cuemm__sa_drain(&c2, UNIT, UNIT);
    ok(cuemm__sa_check(&c2) == NULL, "the unit drains");
    is(c2.hole_bytes, SPAN, "everything is a hole again");
    is(c2.free_bytes, 0, "nothing free");

    /* A full cache takes no more: further frees merge. */
    cuemm__sa_reserve(&c2, 2);
    cuemm__sa_fill(&c2, 0, UNIT);
    c2.cache_limit = 2 * 4096;
    uint32_t t[5];
    for (int k = 0; k < 5; k++)
      t[k] = cuemm__sa_alloc(&c2, 4096);
    cuemm__sa_free(&c2, t[0]);
    cuemm__sa_free(&c2, t[2]);
    cuemm__sa_free(&c2, t[4]);
    is(cached(&c2), 2, "a class holds at most cache_limit bytes");
    ok(cuemm__sa_check(&c2) == NULL, "the third merged with the free rest");
    is(c2.free_count, 3, "two cached blocks and one free");
    cuemm__sa_free(&c2, t[1]);
    ok(cuemm__sa_check(&c2) == NULL && c2.free_count == 2 && cached(&c2) == 0,
       "a merging free takes the cached blocks beside it");
    cuemm__sa_free(&c2, t[3]);
    is(cached(&c2), 1, "with room again, the next is cached");
    cuemm__sa_coalesce(&c2);
    ok(cuemm__sa_check(&c2) == NULL && c2.free_count == 1, "coalescing joins all");
    free(blk);
    cuemm__sa_fini(&c2);
  }

  /* The large-block caches. */
  {
    cuemm__sa c3;
    /* Sizes the large caches take: from CUEMM__SA_SMALL up to below
     * CUEMM__SA_LOW_FIT (larger ones merge at once); the first 128 KiB of
     * the unit mapped. */
    const size_t L32 = (size_t)32 << 10, L48 = (size_t)48 << 10, CU = (size_t)128 << 10;
    cuemm__sa_init(&c3, SPAN);
    cuemm__sa_reserve(&c3, 2);
    cuemm__sa_fill(&c3, 0, CU);
    uint32_t x = cuemm__sa_alloc(&c3, L32);
    size_t x_off = c3.b[x].off;
    cuemm__sa_free(&c3, x);
    is(c3.b[x].state, CUEMM__SA_CACHED, "a freed 32 KiB block is cached");
    ok(c3.lcached_count == 1 && c3.lcached_bytes == L32, "counted as a cached large block");
    ok(cuemm__sa_check(&c3) == NULL, "cached large state is sound: %s", cuemm__sa_check(&c3) ? cuemm__sa_check(&c3) : "ok");
    is(c3.free_bytes, CU, "cached bytes count as free");
    uint32_t nspare = c3.nspare, bins = (uint32_t)(c3.free_count - cached(&c3));
    uint32_t y = cuemm__sa_alloc(&c3, L32);
    ok(y == x && c3.b[y].off == x_off, "the next 32 KiB request gets it back");
    ok(c3.nspare == nspare && c3.free_count == bins, "without a split: no descriptor taken, the free block untouched");
    uint32_t z = cuemm__sa_alloc(&c3, L48);
    cuemm__sa_free(&c3, z);
    cuemm__sa_free(&c3, y);
    ok(cuemm__sa_check(&c3) == NULL && cached(&c3) == 2, "two sizes cached side by side");
    is(cuemm__sa_largest_free(&c3), CU - L32 - L48, "the largest free block is the rest");

    /* Cut the unit into 32 KiB blocks and free them all: cached, so that a
     * request of the whole unit is served only by coalescing. */
    c3.large_limit = CU;
    cuemm__sa_coalesce(&c3);
    uint32_t q[4];
    for (int k = 0; k < 4; k++)
      q[k] = cuemm__sa_alloc(&c3, CU / 4);
    ok(q[3] != CUEMM__SA_NIL && c3.free_count == 0, "the unit holds four 32 KiB blocks");
    for (int k = 0; k < 4; k++)
      cuemm__sa_free(&c3, q[k]);
    ok(cuemm__sa_check(&c3) == NULL && cached(&c3) == 4 && c3.free_count == 4, "all four cached, none merged");
    is(cuemm__sa_largest_free(&c3), CU / 4, "the largest free block is a cached one");
    uint32_t big = cuemm__sa_alloc(&c3, CU);
    ok(big != CUEMM__SA_NIL && c3.b[big].off == 0, "a request of the whole unit is served by coalescing the large caches");
    ok(cuemm__sa_check(&c3) == NULL && cached(&c3) == 0 && c3.lkeys == 0, "the caches and the map are empty afterwards");
    is(c3.hole_bytes, SPAN - CU, "without any fill");
    cuemm__sa_free(&c3, big);

    /* The bound: past max(large_limit, mapped / 4) the large caches merge. */
    c3.large_limit = CU / 2;
    for (int k = 0; k < 4; k++)
      q[k] = cuemm__sa_alloc(&c3, CU / 4);
    cuemm__sa_free(&c3, q[0]);
    cuemm__sa_free(&c3, q[1]);
    ok(cached(&c3) == 2 && c3.lcached_bytes == CU / 2, "two 32 KiB blocks cached, at the bound");
    cuemm__sa_free(&c3, q[2]);
    ok(cuemm__sa_check(&c3) == NULL, "a free past the bound: %s", cuemm__sa_check(&c3) ? cuemm__sa_check(&c3) : "ok");
    ok(c3.free_count == 2 && cuemm__sa_largest_free(&c3) == CU / 2,
       "the bound triggers merging: the first two are one free block");
    ok(cached(&c3) == 1 && c3.b[q[2]].state == CUEMM__SA_CACHED, "with room again, the third is cached");
    cuemm__sa_free(&c3, q[3]);
    ok(cached(&c3) == 2 && c3.free_count == 3, "and so is the fourth");

    /* Many sizes: the map never overflows, it is coalesced when full. */
    c3.large_limit = UNIT;
    cuemm__sa_coalesce(&c3);
    cuemm__sa_reserve(&c3, 2);
    cuemm__sa_fill(&c3, CU, UNIT - CU);
    uint32_t many[120];
    size_t nm = 0;
    for (size_t k = 0; k < 120; k++)
      if ((many[nm] = cuemm__sa_alloc(&c3, CUEMM__SA_SMALL + k * CUEMM__SA_ALIGN)) != CUEMM__SA_NIL)
        nm++;
    is(nm, 120, "120 blocks of 120 sizes");
    const char *bad3 = NULL;
    for (size_t k = 0; k < nm && !bad3; k++) {
      cuemm__sa_free(&c3, many[k]);
      bad3 = cuemm__sa_check(&c3);
    }
    ok(bad3 == NULL, "freeing them keeps every invariant%s%s", bad3 ? ": " : "", bad3 ? bad3 : "");
    ok(c3.lkeys <= CUEMM__SA_LKEYS && cached(&c3) < 120, "the map was emptied when it ran out of slots");

    /* Trim after caching: coalescing frees everything for release. */
    cuemm__sa_coalesce(&c3);
    ok(cuemm__sa_check(&c3) == NULL && c3.free_count == 1 && cached(&c3) == 0, "coalescing leaves one free block");
    cuemm__sa_reserve(&c3, 2);
    cuemm__sa_drain(&c3, 0, UNIT);
    ok(cuemm__sa_check(&c3) == NULL && c3.hole_bytes == SPAN && c3.free_bytes == 0 && c3.hole_count == 1,
       "the whole unit drains: everything is one hole again");
    cuemm__sa_fini(&c3);
  }

  /* Placement: requests of CUEMM__SA_LOW_FIT or more take the free block
   * of lowest address that fits, not the best fit; smaller ones the best. */
  {
    const size_t K = 1024;
    cuemm__sa pl;
    cuemm__sa_init(&pl, SPAN);
    cuemm__sa_reserve(&pl, 2);
    cuemm__sa_fill(&pl, 0, UNIT);
    /* Free 512 KiB at 0, 256 KiB and 1 MiB above, each behind a live block. */
    size_t sizes[6] = { 512 * K, 64 * K, 256 * K, 64 * K, 1024 * K, 64 * K };
    uint32_t blk[6];
    for (int k = 0; k < 6; k++)
      blk[k] = cuemm__sa_alloc(&pl, sizes[k]);
    size_t off256 = pl.b[blk[2]].off, off1m = pl.b[blk[4]].off;
    ok(pl.b[blk[0]].off == 0 && off256 == 576 * K && off1m == 896 * K, "six blocks in address order");
    cuemm__sa_free(&pl, blk[0]);
    cuemm__sa_free(&pl, blk[2]);
    cuemm__sa_free(&pl, blk[4]);
    ok(cuemm__sa_check(&pl) == NULL && pl.cached_bytes == 0, "freed, merged at once: none cached (%s)",
       cuemm__sa_check(&pl) ? cuemm__sa_check(&pl) : "ok");
    uint32_t a1 = cuemm__sa_alloc(&pl, 200 * K);
    is(a1 != CUEMM__SA_NIL ? pl.b[a1].off : SIZE_MAX, 0,
       "200 KiB goes to the lowest block that fits (512 KiB at 0), not the best fit (256 KiB)");
    uint32_t a2 = cuemm__sa_alloc(&pl, 300 * K);
    is(a2 != CUEMM__SA_NIL ? pl.b[a2].off : SIZE_MAX, 200 * K, "300 KiB takes the rest of it, at 200 KiB");
    uint32_t a3 = cuemm__sa_alloc(&pl, 256 * K);
    is(a3 != CUEMM__SA_NIL ? pl.b[a3].off : SIZE_MAX, off256, "256 KiB: the 12 KiB left at 500 KiB is too small, "
       "the 256 KiB block next");
    uint32_t a4 = cuemm__sa_alloc(&pl, CUEMM__SA_LOW_FIT);
    is(a4 != CUEMM__SA_NIL ? pl.b[a4].off : SIZE_MAX, off1m, "CUEMM__SA_LOW_FIT bytes: the 1 MiB block, the lowest "
       "that fits");
    cuemm__sa_free(&pl, a4);
    /* Below the threshold, best fit: a 12 KiB block at 500 KiB and the
     * 1 MiB one are free; 8 KiB takes the smaller. */
    uint32_t a5 = cuemm__sa_alloc(&pl, 8 * K);
    is(a5 != CUEMM__SA_NIL ? pl.b[a5].off : SIZE_MAX, 500 * K, "8 KiB takes the 12 KiB block (a good fit)");
    /* Among a stream's blocks too: the lowest of its tag. */
    cuemm__sa_free_tagged(&pl, a3, 1, 1);  /* 256 KiB at 576 KiB, of stream 1 */
    cuemm__sa_free_tagged(&pl, a1, 1, 2);  /* 200 KiB at 0, of stream 1 */
    uint32_t f = cuemm__sa_fit(&pl, 100 * K, 1);
    is(f != CUEMM__SA_NIL ? pl.b[f].off : SIZE_MAX, 0, "a stream's request fits at the lowest of its blocks");
    f = cuemm__sa_fit(&pl, 210 * K, 1);
    is(f != CUEMM__SA_NIL ? pl.b[f].off : SIZE_MAX, off256, "and past a block too small, at the next");
    ok(cuemm__sa_check(&pl) == NULL, "placement state is sound: %s", cuemm__sa_check(&pl) ? cuemm__sa_check(&pl) : "ok");
    cuemm__sa_fini(&pl);
  }

  /* Tags: blocks freed on a stream whose work may still use them. */
  {
    cuemm__sa t;
    const size_t M = (size_t)1 << 20;
    uint32_t q[4];
    four_blocks(&t, q);
    ok(cuemm__sa_free_tagged(&t, q[0], 1, 5) == 0, "a block freed on stream 1 (its 5th free)");
    ok(cuemm__sa_check(&t) == NULL, "tagged state is sound: %s", cuemm__sa_check(&t) ? cuemm__sa_check(&t) : "ok");
    is(t.b[q[0]].state, CUEMM__SA_FREE, "it is free");
    ok(t.b[q[0]].tag == 1 && t.b[q[0]].seq == 5, "with its tag and number");
    is(cuemm__sa_tag_bytes(&t, 1), M, "the tag's bytes");
    is(t.tagged_bytes, M, "and all tagged bytes");
    is(cuemm__sa_alloc(&t, M), CUEMM__SA_NIL, "an untagged request does not get it");
    is(cuemm__sa_alloc_tagged(&t, M, 2), CUEMM__SA_NIL, "nor does another stream's");
    is(cuemm__sa_fits(&t, M, 2), 0, "nothing fits for stream 2");
    is(cuemm__sa_fits(&t, M, 1), 1, "stream 1's request fits");
    uint32_t r1 = cuemm__sa_alloc_tagged(&t, M, 1);
    ok(r1 == q[0] && t.b[r1].state == CUEMM__SA_USED && t.b[r1].tag == 0 && t.b[r1].seq == 0,
       "stream 1 gets it back at once, untagged while in use");
    cuemm__sa_free_tagged(&t, r1, 1, 6);
    cuemm__sa_free_tagged(&t, q[1], 2, 1);
    ok(cuemm__sa_check(&t) == NULL && t.free_count == 2, "blocks of two streams side by side stay apart");
    cuemm__sa_free_tagged(&t, q[3], 0, 0);
    cuemm__sa_free_tagged(&t, q[2], 0, 0);
    ok(cuemm__sa_check(&t) == NULL, "idle frees beside them: %s", cuemm__sa_check(&t) ? cuemm__sa_check(&t) : "ok");
    is(t.free_count, 2, "idle space joins the tagged block beside it");
    is(cuemm__sa_tag_bytes(&t, 2), 3 * M, "stream 2's block took the two idle ones");
    is(cuemm__sa_tag_bytes(&t, 1), M, "stream 1's is unchanged");
    is(cuemm__sa_untag(&t, 2, 0), 0, "untagging up to a number below its frees changes nothing");
    is(cuemm__sa_untag(&t, 1, 6), M, "stream 1's work done: its block becomes idle");
    ok(cuemm__sa_check(&t) == NULL, "untagged state: %s", cuemm__sa_check(&t) ? cuemm__sa_check(&t) : "ok");
    is(t.free_count, 1, "and merges into stream 2's neighbour");
    is(cuemm__sa_tag_bytes(&t, 2), UNIT, "which now holds the whole unit");
    is(cuemm__sa_alloc(&t, 256), CUEMM__SA_NIL, "so nothing is idle");
    is(cuemm__sa_untag(&t, 2, 1), UNIT, "stream 2 done too");
    ok(cuemm__sa_check(&t) == NULL && t.free_count == 1 && t.tagged_bytes == 0 && cuemm__sa_largest_free(&t) == UNIT,
       "one idle free block again");

    /* The better fit wins, tagged or idle. */
    for (int k = 0; k < 4; k++)
      q[k] = cuemm__sa_alloc(&t, M);
    cuemm__sa_free_tagged(&t, q[0], 1, 7);                  /* 1 MiB of stream 1 */
    uint32_t half = cuemm__sa_alloc(&t, 0);                 /* nothing: all used */
    (void)half;
    cuemm__sa_free_tagged(&t, q[2], 0, 0);                  /* 1 MiB idle */
    uint32_t small = cuemm__sa_alloc_tagged(&t, 4096, 1);
    ok(small != CUEMM__SA_NIL, "a small request of stream 1");
    cuemm__sa_free_tagged(&t, small, 1, 8);
    cuemm__sa_free_tagged(&t, q[1], 1, 9);
    cuemm__sa_free_tagged(&t, q[3], 0, 0);
    ok(cuemm__sa_check(&t) == NULL, "mixed frees: %s", cuemm__sa_check(&t) ? cuemm__sa_check(&t) : "ok");
    uint32_t f0 = cuemm__sa_fit(&t, 3 * M, 0), f1 = cuemm__sa_fit(&t, 3 * M, 1);
    ok(f0 == CUEMM__SA_NIL && f1 != CUEMM__SA_NIL, "3 MiB fit only among stream 1's blocks (idle space joined them)");
    cuemm__sa_take(&t, f1, 3 * M);
    ok(cuemm__sa_check(&t) == NULL && t.b[f1].state == CUEMM__SA_USED, "taken: %s",
       cuemm__sa_check(&t) ? cuemm__sa_check(&t) : "ok");
    cuemm__sa_free_tagged(&t, f1, 1, 10);
    cuemm__sa_untag(&t, 1, 10);

    /* Growth and release do not mix: mapped space stays idle. */
    cuemm__sa_reserve(&t, 2);
    cuemm__sa_fill(&t, UNIT, UNIT);
    uint32_t all = cuemm__sa_alloc(&t, 2 * UNIT);
    ok(all != CUEMM__SA_NIL, "the two units are one idle block");
    cuemm__sa_free_tagged(&t, all, 3, 1);
    cuemm__sa_reserve(&t, 2);
    cuemm__sa_fill(&t, 2 * UNIT, UNIT);
    ok(cuemm__sa_check(&t) == NULL && t.free_count == 2, "a fill beside a tagged block stays apart from it");
    is(cuemm__sa_fits(&t, UNIT, 0), 1, "and serves untagged requests");
    size_t ones = 0;
    cuemm__sa_each_free(&t, UNIT, count_free, &ones);
    is(ones, 1, "only the idle block is seen by release's scan");
    cuemm__sa_untag(&t, 3, 1);
    ok(cuemm__sa_check(&t) == NULL && t.free_count == 1, "untagged, everything is one block");
    cuemm__sa_fini(&t);
  }

  /* Retagging: a stream that waited for another's work takes its pieces,
   * merged with its own; a growth beside a stream's free space joins it. */
  {
    cuemm__sa t;
    const size_t M = (size_t)1 << 20;
    uint32_t q[4];
    four_blocks(&t, q);
    cuemm__sa_free_tagged(&t, q[0], 4, 2);
    cuemm__sa_free_tagged(&t, q[1], 5, 7);
    cuemm__sa_free_tagged(&t, q[2], 4, 3);
    ok(cuemm__sa_check(&t) == NULL && t.free_count == 3, "pieces of streams 4, 5 and 4 side by side stay apart");
    is(cuemm__sa_fits(&t, 3 * M, 4), 0, "3 MiB fit for neither stream");
    is(cuemm__sa_retag(&t, 4, 4, 8), 0, "retagging a stream to itself moves nothing");
    is(cuemm__sa_retag(&t, 9, 4, 8), 0, "nor does retagging a stream with no blocks");
    is(cuemm__sa_retag(&t, 5, 4, 8), M, "stream 5's piece becomes stream 4's");
    ok(cuemm__sa_check(&t) == NULL, "retagged state: %s", cuemm__sa_check(&t) ? cuemm__sa_check(&t) : "ok");
    ok(t.free_count == 1 && cuemm__sa_tag_bytes(&t, 4) == 3 * M && cuemm__sa_tag_bytes(&t, 5) == 0,
       "merged into one block of stream 4 of 3 MiB");
    uint32_t f = cuemm__sa_fit(&t, 3 * M, 4);
    ok(f != CUEMM__SA_NIL && t.b[f].off == 0 && t.b[f].seq == 8, "which fits 3 MiB, numbered 8 (its newest part)");
    is(cuemm__sa_fits(&t, 3 * M, 5), 0, "stream 5 no longer gets it");
    is(cuemm__sa_untag(&t, 4, 7), 0, "nor does anyone before stream 4's work reaches 8");
    is(cuemm__sa_untag(&t, 4, 8), 3 * M, "then it is idle");
    cuemm__sa_free_tagged(&t, q[3], 6, 1);
    ok(t.free_count == 1 && cuemm__sa_tag_bytes(&t, 6) == UNIT, "stream 6's block took the idle space beside it");
    cuemm__sa_reserve(&t, 2);
    cuemm__sa_fill_tagged(&t, UNIT, UNIT, 6);
    ok(cuemm__sa_check(&t) == NULL && t.free_count == 1 && cuemm__sa_tag_bytes(&t, 6) == 2 * UNIT,
       "a growth beside it for stream 6 joins it: %s", cuemm__sa_check(&t) ? cuemm__sa_check(&t) : "ok");
    cuemm__sa_reserve(&t, 2);
    cuemm__sa_fill(&t, 2 * UNIT, UNIT);
    ok(cuemm__sa_check(&t) == NULL && t.free_count == 2 && cuemm__sa_tag_bytes(&t, 6) == 2 * UNIT,
       "a plain growth beside it stays idle and apart");
    cuemm__sa_fini(&t);
  }

  /* Random tagged traffic against a shadow map of what each 256-byte
   * granule may still be used by: a block handed to stream T must hold only
   * idle granules or T's. */
  {
    const size_t TSPAN = (size_t)64 << 20, TUNIT = (size_t)1 << 20, G = CUEMM__SA_ALIGN;
    static uint8_t gtag[((size_t)64 << 20) / CUEMM__SA_ALIGN];
    static uint64_t gseq[((size_t)64 << 20) / CUEMM__SA_ALIGN];
    uint64_t freed[4] = { 0 }, done[4] = { 0 };
    cuemm__sa t;
    cuemm__sa_init(&t, TSPAN);
    for (size_t u = 0; u < TSPAN / TUNIT / 2; u++) {
      cuemm__sa_reserve(&t, 2);
      cuemm__sa_fill(&t, u * 2 * TUNIT, TUNIT);
    }
    struct { uint32_t blk; size_t off, size; } TL[256];
    size_t tn = 0, early = 0, takes = 0, untags = 0, tagged_takes = 0;
    size_t below_bad = 0, below_found = 0, below_none = 0, low_bad = 0, low_hit = 0;
    const char *tbad = NULL;
    for (int step = 0; step < 30000 && !tbad && !early; step++) {
      unsigned op = (unsigned)(next_rand() % 100);
      uint32_t tag = (uint32_t)(next_rand() % 4);
      if (op < 48 && tn < 256) {
        size_t size = (((size_t)256 << (next_rand() % 13)) + 255) & ~(size_t)255;
        /* cuemm__sa_fit_below is cuemm__sa_fit's choice under a limit. */
        uint32_t f = cuemm__sa_fit(&t, size, tag);
        if (size >= CUEMM__SA_LOW_FIT) {
          low_bad += f != lowest_model(&t, size, tag);
          low_hit += f != CUEMM__SA_NIL;
        }
        size_t lim = size + (size_t)(next_rand() % 5) * size / 2;
        uint32_t fb = cuemm__sa_fit_below(&t, size, tag, lim);
        below_bad += fb != (f != CUEMM__SA_NIL && t.b[f].size < lim ? f : CUEMM__SA_NIL);
        below_found += fb != CUEMM__SA_NIL;
        below_none += fb == CUEMM__SA_NIL && f != CUEMM__SA_NIL;
        uint32_t i = op < 24 ? cuemm__sa_alloc_tagged(&t, size, tag) : cuemm__sa_fit(&t, size, tag);
        if (op >= 24 && i == CUEMM__SA_NIL && tag)
          i = cuemm__sa_fit(&t, size, 0);
        if (i == CUEMM__SA_NIL)
          continue;
        if (op >= 24)
          cuemm__sa_take(&t, i, size);
        takes++;
        for (size_t g = t.b[i].off / G; g < (t.b[i].off + t.b[i].size) / G; g++) {
          if (gtag[g] && gtag[g] != tag && gseq[g] > done[gtag[g]])
            early++;
          tagged_takes += gtag[g] == tag && tag;
          gtag[g] = 0;
        }
        TL[tn].blk = i, TL[tn].off = t.b[i].off, TL[tn].size = t.b[i].size, tn++;
      } else if (op < 92 && tn > 0) {
        size_t k = (size_t)(next_rand() % tn);
        uint64_t seq = tag ? ++freed[tag] : 0;
        for (size_t g = TL[k].off / G; g < (TL[k].off + TL[k].size) / G; g++)
          gtag[g] = (uint8_t)tag, gseq[g] = seq;
        if (cuemm__sa_free_tagged(&t, TL[k].blk, tag, seq) != 0)
          tbad = "a tagged free failed";
        TL[k] = TL[--tn];
      } else if (tag) {
        /* Some of the tag's work is done. */
        done[tag] += (freed[tag] - done[tag] + 1) / 2;
        cuemm__sa_untag(&t, tag, done[tag]);
        untags++;
        for (size_t g = 0; g < TSPAN / G; g++)
          if (gtag[g] == tag && gseq[g] <= done[tag])
            gtag[g] = 0;
      }
      if (!tbad)
        tbad = cuemm__sa_check(&t);
    }
    ok(tbad == NULL, "30000 random tagged steps keep every invariant%s%s", tbad ? ": " : "", tbad ? tbad : "");
    is(early, 0, "no block was handed to a stream while another stream's work could still use part of it");
    ok(below_bad == 0 && below_found > 100 && below_none > 100, "under a limit, the fit is cuemm__sa_fit's when "
       "smaller, else none (%zu differed; %zu found, %zu over the limit)", below_bad, below_found, below_none);
    ok(low_bad == 0 && low_hit > 100, "requests of CUEMM__SA_LOW_FIT or more fit at the lowest address of their "
       "tag's free blocks, as a walk in address order finds (%zu differed, %zu found)", low_bad, low_hit);
    ok(takes > 1000 && untags > 100 && tagged_takes > 0, "the run took %zu blocks (%zu granules of their own stream's), "
       "untagged %zu times", takes, tagged_takes, untags);
    cuemm__sa_fini(&t);
  }

  /* Random traffic against a shadow list. */
  live L[MAXLIVE];
  size_t n = 0, fails = 0, fills = 3, drains = 0, low_checked = 0, low_wrong = 0;
  const char *bad = NULL;
  int overlap = 0;
  for (int step = 0; step < 40000 && !bad && !overlap; step++) {
    unsigned op = (unsigned)(next_rand() % 100);
    if (op < 50 && n < MAXLIVE) {
      size_t size = random_size();
      uint32_t low = size >= CUEMM__SA_LOW_FIT ? lowest_model(&s, size, 0) : CUEMM__SA_NIL;
      size_t low_off = low != CUEMM__SA_NIL ? s.b[low].off : 0;
      uint32_t i = cuemm__sa_alloc(&s, size);
      if (low != CUEMM__SA_NIL) {
        low_checked++;
        if (i == CUEMM__SA_NIL || s.b[i].off != low_off)
          low_wrong++;
      }
      if (i == CUEMM__SA_NIL) {
        fails++;
        if (cuemm__sa_largest_free(&s) >= size)
          bad = "an allocation failed although a free block was large enough";
        /* Map more: the first hole, one unit or the request rounded up. */
        for (uint32_t h = s.holes; h != CUEMM__SA_NIL; h = s.b[h].lnext) {
          size_t want = (size + UNIT - 1) / UNIT * UNIT;
          if (s.b[h].size >= want) {
            cuemm__sa_reserve(&s, 2);
            cuemm__sa_fill(&s, s.b[h].off, want);
            fills++;
            break;
          }
        }
        continue;
      }
      if (s.b[i].size < size || s.b[i].state != CUEMM__SA_USED)
        bad = "a block is smaller than asked or not marked used";
      for (size_t k = 0; k < n; k++)
        if (s.b[i].off < L[k].off + L[k].size && L[k].off < s.b[i].off + s.b[i].size)
          overlap = 1;
      L[n++] = (live){ i, s.b[i].off, s.b[i].size };
    } else if (op < 95 && n > 0) {
      size_t k = (size_t)(next_rand() % n);
      if (s.b[L[k].blk].off != L[k].off || s.b[L[k].blk].size != L[k].size)
        bad = "a live block moved or changed size";
      cuemm__sa_free(&s, L[k].blk);
      L[k] = L[--n];
    } else {
      /* Release a wholly free unit, as the pool does. */
      for (uint32_t i = 0; i != CUEMM__SA_NIL; i = s.b[i].next) {
        if (s.b[i].state != CUEMM__SA_FREE)
          continue;
        size_t lo = (s.b[i].off + UNIT - 1) / UNIT * UNIT;
        if (lo + UNIT <= s.b[i].off + s.b[i].size) {
          cuemm__sa_reserve(&s, 2);
          cuemm__sa_drain(&s, lo, UNIT);
          drains++;
          break;
        }
      }
    }
    if (!bad)
      bad = cuemm__sa_check(&s);
  }
  ok(bad == NULL, "40000 random steps keep every invariant%s%s", bad ? ": " : "", bad ? bad : "");
  ok(!overlap, "no two live blocks overlap");
  ok(low_wrong == 0 && low_checked > 1000, "every request of CUEMM__SA_LOW_FIT or more got the lowest-address free "
     "block that fits (%zu of %zu did not)", low_wrong, low_checked);
  ok(fills > 3 && drains > 0 && fails > 0, "the run mapped (%zu), released (%zu) and ran out (%zu)", fills, drains, fails);
  size_t used = 0;
  for (size_t k = 0; k < n; k++)
    used += L[k].size;
  is(s.used_bytes, used, "used bytes are the live blocks' sizes");
  while (n > 0)
    cuemm__sa_free(&s, L[--n].blk);
  ok(cuemm__sa_check(&s) == NULL, "all freed");
  is(s.used_bytes, 0, "nothing used");
  is(s.free_bytes + s.hole_bytes, SPAN, "free and holes tile the span");
  cuemm__sa_fini(&s);
  return tap_done();
}
