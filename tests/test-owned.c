/* test-owned.c: the owned table on its own, against a shadow model: random
 * adds, finds and removes on a table kept small and nearly full, so probe
 * runs are long and wrap around its end, which is where removal by
 * backward shift can lose an entry.  Built from src/core/owned.c directly: no
 * driver involved.
 */
#include <stdint.h>
#include <stdlib.h>

#include "core/owned.h"
#include "tap.h"

#define KEYS 100   /* distinct keys: 256-byte aligned addresses */
#define MAXLIVE 31 /* under half of 64 slots: the table never grows */

static uint64_t rng = 0x2545F4914F6CDD1Du;
static uint64_t next_rand(void)
{
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static uintptr_t key_of(unsigned k) { return (uintptr_t)0x7f0000000000u + (uintptr_t)(k + 1) * 256; }

/* Every key of the model is found with its size and word, every other key
 * is not, and the count agrees.  Returns the first disagreement, or -1. */
static long disagreement(cuemm__owned *t, const int *live, size_t nlive)
{
  if (t->used != nlive)
    return KEYS;
  for (unsigned k = 0; k < KEYS; k++) {
    cuemm__owned_entry *e = cuemm__owned_find(t, key_of(k));
    if (live[k] ? !e || e->size != 1000 + k || e->aux != k || e->kind != CUEMM__KIND_POOL : e != NULL)
      return k;
  }
  return -1;
}

int main(void)
{
  cuemm__owned t;
  cuemm__owned_init(&t);
  ok(cuemm__owned_find(&t, key_of(0)) == NULL, "an empty table finds nothing");

  int live[KEYS] = { 0 };
  size_t nlive = 0, steps = 0, removals = 0, shifted = 0, at_end = 0;
  long bad = -1;
  for (int i = 0; i < 200000 && bad < 0; i++, steps++) {
    unsigned k = (unsigned)(next_rand() % KEYS);
    if (!live[k] && nlive < MAXLIVE) {
      if (cuemm__owned_add(&t, key_of(k), 1000 + k, CUEMM__KIND_POOL, k) != 0)
        break;
      live[k] = 1;
      nlive++;
    } else if (live[k]) {
      cuemm__owned_entry *e = cuemm__owned_find(&t, key_of(k));
      if (!e)
        break;
      cuemm__owned_entry *next = e + 1 == t.slots + t.cap ? t.slots : e + 1;
      shifted += next->key != 0;
      at_end += e == t.slots + t.cap - 1 && t.slots[0].key != 0;
      cuemm__owned_remove(&t, e);
      live[k] = 0;
      nlive--;
      removals++;
    }
    bad = disagreement(&t, live, nlive);
  }
  is(steps, 200000, "200000 random steps ran");
  ok(bad < 0, "the table agrees with the model after every step (first disagreement: key %ld)", bad);
  is(t.cap, 64, "it never grew: the runs stayed long");
  ok(removals > 50000, "%zu removals", removals);
  ok(shifted > 10000, "%zu removals with entries after them in their run (the shifting path)", shifted);
  ok(at_end > 100, "%zu removals from the last slot with the run going on at slot 0", at_end);

  /* Growth keeps every entry. */
  size_t failed_adds = 0;
  for (unsigned k = 0; k < KEYS; k++)
    if (!live[k]) {
      failed_adds += cuemm__owned_add(&t, key_of(k), 1000 + k, CUEMM__KIND_POOL, k) != 0;
      live[k] = 1;
      nlive++;
    }
  is(failed_adds, 0, "every key added");
  ok(t.cap >= 256, "the table grew to %zu slots for %zu entries", t.cap, nlive);
  is(disagreement(&t, live, nlive), -1, "every entry is found after growing");
  cuemm__owned_fini(&t);
  return tap_done();
}
