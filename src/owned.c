/* owned.c: the address-keyed table of a manager's allocations (see owned.h).
 * Keys are hashed with a multiplicative hash because device addresses share
 * their low bits (allocations are 256-byte aligned or more).
 */
#include "owned.h"

#include <stdlib.h>
#include <string.h>

#define EMPTY ((uintptr_t)0)
#define DELETED ((uintptr_t)1)

static size_t slot_of(uintptr_t key, size_t cap)
{
  uint64_t h = (uint64_t)key * UINT64_C(0x9E3779B97F4A7C15);
  return (size_t)(h >> 32) & (cap - 1);
}

void cuemm__owned_init(cuemm__owned *t)
{
  memset(t, 0, sizeof *t);
}

void cuemm__owned_fini(cuemm__owned *t)
{
  free(t->slots);
  memset(t, 0, sizeof *t);
}

cuemm__owned_entry *cuemm__owned_find(cuemm__owned *t, uintptr_t key)
{
  if (t->cap == 0 || key <= DELETED)
    return NULL;
  for (size_t i = slot_of(key, t->cap);; i = (i + 1) & (t->cap - 1)) {
    cuemm__owned_entry *e = &t->slots[i];
    if (e->key == key)
      return e;
    if (e->key == EMPTY)
      return NULL;
  }
}

static void place(cuemm__owned_entry *slots, size_t cap, const cuemm__owned_entry *e)
{
  size_t i = slot_of(e->key, cap);
  while (slots[i].key > DELETED)
    i = (i + 1) & (cap - 1);
  slots[i] = *e;
}

/* Rehashes into a table sized for `used` (dropping deleted slots). */
static int rehash(cuemm__owned *t, size_t cap)
{
  cuemm__owned_entry *slots = calloc(cap, sizeof *slots);
  if (!slots)
    return -1;
  for (size_t i = 0; i < t->cap; i++)
    if (t->slots[i].key > DELETED)
      place(slots, cap, &t->slots[i]);
  free(t->slots);
  t->slots = slots;
  t->cap = cap;
  t->filled = t->used;
  return 0;
}

int cuemm__owned_add(cuemm__owned *t, uintptr_t key, size_t size, cuemm__kind kind, uint32_t aux)
{
  /* Keep probing short: at most 3/4 of the slots filled, deleted included. */
  if ((t->filled + 1) * 4 > t->cap * 3) {
    size_t cap = t->cap ? t->cap : 64;
    while ((t->used + 1) * 2 > cap)
      cap *= 2;
    if (rehash(t, cap) != 0)
      return -1;
  }
  size_t i = slot_of(key, t->cap);
  while (t->slots[i].key > DELETED)
    i = (i + 1) & (t->cap - 1);
  if (t->slots[i].key == EMPTY)
    t->filled++;
  t->slots[i] = (cuemm__owned_entry){ .key = key, .size = size, .kind = (uint8_t)kind, .aux = aux };
  t->used++;
  return 0;
}

void cuemm__owned_remove(cuemm__owned *t, cuemm__owned_entry *e)
{
  e->key = DELETED;
  t->used--;
}

void cuemm__owned_each(cuemm__owned *t, void (*fn)(cuemm__owned_entry *, void *), void *arg)
{
  for (size_t i = 0; i < t->cap; i++)
    if (t->slots[i].key > DELETED)
      fn(&t->slots[i], arg);
}
