/* owned.c: the address-keyed table of a manager's allocations (see owned.h):
 * growth, removal by backward shift, and the walk.
 */
#include "core/owned.h"

#include <stdlib.h>
#include <string.h>

void cuemm__owned_init(cuemm__owned *t)
{
  memset(t, 0, sizeof *t);
}

void cuemm__owned_fini(cuemm__owned *t)
{
  free(t->slots);
  memset(t, 0, sizeof *t);
}

int cuemm__owned_grow(cuemm__owned *t)
{
  size_t cap = t->cap ? t->cap : 64;
  while ((t->used + 1) * 4 > cap)
    cap *= 2;
  cuemm__owned_entry *slots = calloc(cap, sizeof *slots);
  if (!slots)
    return -1;
  for (size_t i = 0; i < t->cap; i++) {
    if (t->slots[i].key == 0)
      continue;
    size_t j = cuemm__owned_slot(t->slots[i].key, cap);
    while (slots[j].key != 0)
      j = (j + 1) & (cap - 1);
    slots[j] = t->slots[i];
  }
  free(t->slots);
  t->slots = slots;
  t->cap = cap;
  return 0;
}

void cuemm__owned_remove_shift(cuemm__owned *t, cuemm__owned_entry *e)
{
  size_t mask = t->cap - 1, hole = (size_t)(e - t->slots);
  /* Move back every later entry of the run whose home slot does not lie
   * cyclically in (hole, j]: otherwise a lookup from its home would stop at
   * the hole before reaching it. */
  for (size_t j = (hole + 1) & mask; t->slots[j].key != 0; j = (j + 1) & mask) {
    size_t home = cuemm__owned_slot(t->slots[j].key, t->cap);
    if (((j - home) & mask) >= ((j - hole) & mask)) {
      t->slots[hole] = t->slots[j];
      hole = j;
    }
  }
  t->slots[hole].key = 0;
  t->used--;
}

void cuemm__owned_each(cuemm__owned *t, void (*fn)(cuemm__owned_entry *, void *), void *arg)
{
  if (t->used == 0)
    return;
  /* Walk downwards from an empty slot, round to it.  A removal only moves
   * entries that sit after the removed one and before the next empty slot,
   * all of which this order has visited already; the starting slot stays
   * empty, so nothing moves across it.  So every entry is seen once. */
  size_t mask = t->cap - 1, start = 0;
  while (t->slots[start].key != 0)
    start++;
  for (size_t k = 1; k < t->cap; k++) {
    cuemm__owned_entry *e = &t->slots[(start - k) & mask];
    if (e->key != 0)
      fn(e, arg);
  }
}
