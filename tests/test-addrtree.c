/* test-addrtree.c: the address-ordered tree of free blocks on its own,
 * against a brute-force model (a flat array scanned in full): a long random
 * run of inserts, removals, resizes and lowest-fit queries, the tree's
 * invariant checker after every step, and its depth on the orders that
 * unbalance a plain search tree.  Built from src/suballoc/addrtree.c directly.
 */
#include <stdint.h>
#include <stdlib.h>

#include "suballoc/addrtree.h"
#include "tap.h"

#define CAP 4096u
#define NIL CUEMM__AT_NIL

static uint64_t rng = 0x2545F4914F6CDD1Du;
static uint64_t next_rand(void)
{
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static cuemm__at_node nodes[CAP];
static int in[CAP];          /* the model: which nodes are in the tree */
static size_t moff[CAP], msize[CAP];

/* The model's answer: the lowest offset of size >= size, scanning all. */
static uint32_t model_fit(size_t size)
{
  uint32_t best = NIL;
  for (uint32_t i = 0; i < CAP; i++)
    if (in[i] && msize[i] >= size && (best == NIL || moff[i] < moff[best]))
      best = i;
  return best;
}

static size_t model_largest(void)
{
  size_t m = 0;
  for (uint32_t i = 0; i < CAP; i++)
    if (in[i] && msize[i] > m)
      m = msize[i];
  return m;
}

static int offset_taken(size_t off)
{
  for (uint32_t i = 0; i < CAP; i++)
    if (in[i] && moff[i] == off)
      return 1;
  return 0;
}

static unsigned depth(uint32_t t)
{
  if (t == NIL)
    return 0;
  unsigned l = depth(nodes[t].left), r = depth(nodes[t].right);
  return 1 + (l > r ? l : r);
}

int main(void)
{
  uint32_t root = NIL;
  size_t count = 99;
  ok(cuemm__at_check(nodes, CAP, root, &count) == NULL && count == 0, "an empty tree checks");
  is(cuemm__at_lowest_fit(nodes, root, 1), NIL, "an empty tree fits nothing");
  is(cuemm__at_largest(nodes, root), 0, "an empty tree's largest is 0");

  /* A small case by hand: the lowest address wins over the best size. */
  cuemm__at_insert(nodes, &root, 5, 3000, 100);
  cuemm__at_insert(nodes, &root, 7, 1000, 40);
  cuemm__at_insert(nodes, &root, 9, 2000, 60);
  ok(cuemm__at_check(nodes, CAP, root, &count) == NULL && count == 3, "three nodes check");
  is(cuemm__at_lowest_fit(nodes, root, 50), 9, "50 fits lowest at 2000 (size 60), not 3000 (size 100)");
  is(cuemm__at_lowest_fit(nodes, root, 40), 7, "40 fits lowest at 1000");
  is(cuemm__at_lowest_fit(nodes, root, 61), 5, "61 fits only at 3000");
  is(cuemm__at_lowest_fit(nodes, root, 101), NIL, "101 fits nowhere");
  cuemm__at_resize(nodes, root, 7, 80);
  is(cuemm__at_lowest_fit(nodes, root, 61), 7, "resized to 80, 1000 takes 61");
  cuemm__at_remove(nodes, &root, 7);
  is(cuemm__at_lowest_fit(nodes, root, 61), 5, "removed, 61 fits at 3000 again");
  is(cuemm__at_largest(nodes, root), 100, "largest 100");
  cuemm__at_replace(nodes, &root, 9, 11, 2500, 500);
  is(cuemm__at_lowest_fit(nodes, root, 101), 11, "node 11 took 9's place: 101 fits at 2500");
  is(cuemm__at_lowest_fit(nodes, root, 50), 11, "and 50 too, below 3000");
  ok(cuemm__at_check(nodes, CAP, root, &count) == NULL && count == 2, "two nodes check after the replacement");
  cuemm__at_remove(nodes, &root, 5);
  cuemm__at_remove(nodes, &root, 11);
  is(root, NIL, "all removed: empty");

  /* Long random run against the model. */
  const char *err = NULL;
  unsigned long steps = 0, fits = 0, hits = 0, mismatches = 0, sized = 0, replaced = 0;
  size_t n_in = 0;
  for (unsigned long step = 0; step < 120000 && !err; step++) {
    unsigned op = (unsigned)(next_rand() % 10);
    uint32_t i = (uint32_t)(next_rand() % CAP);
    /* Phases that fill and drain, so sizes from empty to thousands of nodes. */
    int grow = (step / 20000) % 2 == 0;
    if (op < (grow ? 4u : 2u)) {
      if (!in[i]) {
        size_t off;
        do
          off = (next_rand() % (1u << 24)) * 256;
        while (offset_taken(off));
        size_t size = (1 + next_rand() % ((next_rand() & 1) ? 64 : 65536)) * 256;
        cuemm__at_insert(nodes, &root, i, off, size);
        in[i] = 1, moff[i] = off, msize[i] = size, n_in++;
      }
    } else if (op < (grow ? 5u : 6u)) {
      if (in[i]) {
        cuemm__at_remove(nodes, &root, i);
        in[i] = 0, n_in--;
      }
    } else if (op < 7u) {
      if (in[i] && (next_rand() & 1)) {
        size_t size = (1 + next_rand() % 65536) * 256;
        cuemm__at_resize(nodes, root, i, size);
        msize[i] = size, sized++;
      } else if (in[i]) {
        /* Another node (or i itself) takes i's place with a key between
         * i's neighbours', as a cut block or a merge does. */
        size_t lo = 0, hi = (size_t)1 << 40;
        int has_lo = 0;
        for (uint32_t k = 0; k < CAP; k++)
          if (in[k] && k != i) {
            if (moff[k] < moff[i] && (!has_lo || moff[k] > lo))
              lo = moff[k], has_lo = 1;
            if (moff[k] > moff[i] && moff[k] < hi)
              hi = moff[k];
          }
        size_t first = has_lo ? lo + 256 : 0;
        size_t off = first + (next_rand() % ((hi - first) / 256)) * 256;
        uint32_t j = i;
        if (next_rand() & 1) {
          j = (uint32_t)(next_rand() % CAP);
          if (in[j])
            j = i;
        }
        size_t size = (1 + next_rand() % 65536) * 256;
        cuemm__at_replace(nodes, &root, i, j, off, size);
        in[i] = 0;
        in[j] = 1, moff[j] = off, msize[j] = size, replaced++;
      }
    } else {
      size_t want = (1 + next_rand() % ((next_rand() & 1) ? 128 : 70000)) * 256;
      uint32_t got = cuemm__at_lowest_fit(nodes, root, want), model = model_fit(want);
      fits++;
      if (got != model)
        mismatches++;
      if (model != NIL)
        hits++;
    }
    if (cuemm__at_largest(nodes, root) != model_largest())
      err = "the largest size disagrees with the model";
    else if (step % 7 == 0 || n_in < 64) {
      err = cuemm__at_check(nodes, CAP, root, &count);
      if (!err && count != n_in)
        err = "the tree does not hold the model's nodes";
    }
    steps++;
  }
  is_str(err, NULL, "every invariant holds through a long random run (%lu steps)", steps);
  is(mismatches, 0, "every lowest fit agrees with the brute-force model (%lu queries)", fits);
  ok(hits > fits / 4 && hits < fits, "the queries both hit and miss (%lu of %lu hit)", hits, fits);
  ok(sized > 1000, "resizes were exercised (%lu)", sized);
  ok(replaced > 1000, "replacements were exercised (%lu)", replaced);

  /* Empty it, then build it in address order, the order a plain search
   * tree degenerates on: the depth stays logarithmic. */
  for (uint32_t i = 0; i < CAP; i++)
    if (in[i]) {
      cuemm__at_remove(nodes, &root, i);
      in[i] = 0;
    }
  is(root, NIL, "emptied");
  for (uint32_t i = 0; i < CAP; i++)
    cuemm__at_insert(nodes, &root, i, (size_t)i * 256, 256 + (size_t)(i % 3) * 256);
  err = cuemm__at_check(nodes, CAP, root, &count);
  ok(err == NULL && count == CAP, "ascending inserts check (%s)", err ? err : "ok");
  unsigned d = depth(root);
  ok(d < 40, "ascending inserts of %u nodes: depth %u", CAP, d);
  is(cuemm__at_lowest_fit(nodes, root, 768), 2, "the first node of size 768 is the lowest fit");
  /* Remove from the lowest up: the lowest fit follows. */
  for (uint32_t i = 0; i < CAP / 2; i++)
    cuemm__at_remove(nodes, &root, i);
  uint32_t want768 = CAP / 2;
  while (want768 % 3 != 2)
    want768++;
  is(cuemm__at_lowest_fit(nodes, root, 768), want768,
     "after removing the lower half, the lowest fit moves up");
  err = cuemm__at_check(nodes, CAP, root, &count);
  ok(err == NULL && count == CAP / 2, "half removed checks");
  d = depth(root);
  ok(d < 40, "depth after removals %u", d);

  /* The checker catches a wrong maximum and a key out of order. */
  uint32_t r = root;
  size_t keep = nodes[r].max;
  nodes[r].max = keep + 256;
  ok(cuemm__at_check(nodes, CAP, root, &count) != NULL, "a wrong maximum is caught");
  nodes[r].max = keep;
  uint32_t l = nodes[r].left;
  size_t koff = nodes[l].off;
  nodes[l].off = nodes[r].off + 256;
  ok(cuemm__at_check(nodes, CAP, root, &count) != NULL, "a key out of order is caught");
  nodes[l].off = koff;
  ok(cuemm__at_check(nodes, CAP, root, &count) == NULL, "restored, it checks again");
  return tap_done();
}
