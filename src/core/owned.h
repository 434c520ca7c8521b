/* owned.h: the set of allocations a manager owns, keyed by start address.
 *
 * It answers the question every free must ask first: is this pointer ours,
 * of which kind, how big, and is it already waiting in the pending queue?
 * That is how a foreign pointer or a double free is refused before anything
 * changes.  Open addressing with linear probing: one probe on the common
 * path, no allocation per entry.  Removal shifts the entries after it back
 * (no tombstones), so steady traffic never rehashes.  Not thread-safe: the
 * manager's lock guards it.
 */
#ifndef CUEMM_OWNED_H
#define CUEMM_OWNED_H

#include <stddef.h>
#include <stdint.h>

#include "core/pending.h"

typedef struct cuemm__owned_entry {
  uintptr_t key;        /* start address; 0 empty */
  size_t size;
  uint8_t kind;         /* cuemm__kind */
  uint8_t pending;      /* freed by the program, queued for release */
  uint32_t aux;         /* the kind's own word (a pool block's descriptor) */
} cuemm__owned_entry;

typedef struct cuemm__owned {
  cuemm__owned_entry *slots;
  size_t cap;            /* power of two (or 0) */
  size_t used;           /* live entries */
} cuemm__owned;

void cuemm__owned_init(cuemm__owned *t);
void cuemm__owned_fini(cuemm__owned *t);

/* Device addresses share their low bits: a multiplicative hash spreads them. */
static inline size_t cuemm__owned_slot(uintptr_t key, size_t cap)
{
  uint64_t h = (uint64_t)key * UINT64_C(0x9E3779B97F4A7C15);
  return (size_t)(h >> 32) & (cap - 1);
}

/* The entry for `key`, or NULL. */
static inline cuemm__owned_entry *cuemm__owned_find(cuemm__owned *t, uintptr_t key)
{
  if (t->cap == 0 || key == 0)
    return NULL;
  for (size_t i = cuemm__owned_slot(key, t->cap);; i = (i + 1) & (t->cap - 1)) {
    cuemm__owned_entry *e = &t->slots[i];
    if (e->key == key)
      return e;
    if (e->key == 0)
      return NULL;
  }
}

/* Grows the table so that one more entry fits.  Returns -1 when memory ran
 * out, leaving it unchanged. */
int cuemm__owned_grow(cuemm__owned *t);

/* Adds an entry (the key must not be present).  Returns -1 when memory for
 * the table ran out, leaving it unchanged. */
static inline int cuemm__owned_add(cuemm__owned *t, uintptr_t key, size_t size, cuemm__kind kind, uint32_t aux)
{
  /* Keep probe runs short: at most half the slots filled.  Every removal
   * shifts the rest of its run back, and blocks enter and leave the table
   * at each pool round trip of the stream path: at 3/4 a training trace
   * spent 4% more instructions per event (448 against 430). */
  if ((t->used + 1) * 2 > t->cap && cuemm__owned_grow(t) != 0)
    return -1;
  size_t i = cuemm__owned_slot(key, t->cap);
  while (t->slots[i].key != 0)
    i = (i + 1) & (t->cap - 1);
  t->slots[i] = (cuemm__owned_entry){ .key = key, .size = size, .kind = (uint8_t)kind, .aux = aux };
  t->used++;
  return 0;
}

/* cuemm__owned_remove when entries follow it in its probe run. */
void cuemm__owned_remove_shift(cuemm__owned *t, cuemm__owned_entry *e);

/* Removes an entry found with cuemm__owned_find; entries after it in its
 * probe run may move (pointers to them go stale).  At half load at most,
 * the next slot is usually empty and nothing moves: that case is inline. */
static inline void cuemm__owned_remove(cuemm__owned *t, cuemm__owned_entry *e)
{
  const cuemm__owned_entry *next = e + 1 == t->slots + t->cap ? t->slots : e + 1;
  if (next->key != 0) {
    cuemm__owned_remove_shift(t, e);
    return;
  }
  e->key = 0;
  t->used--;
}

/* The entry of `key` leaves the table, if there is one.  Returns whether
 * there was. */
static inline int cuemm__owned_drop(cuemm__owned *t, uintptr_t key)
{
  cuemm__owned_entry *e = cuemm__owned_find(t, key);
  if (e)
    cuemm__owned_remove(t, e);
  return e != NULL;
}

/* Calls fn on every entry once.  fn must not add entries; it may remove the
 * entry it was given (and no other). */
void cuemm__owned_each(cuemm__owned *t, void (*fn)(cuemm__owned_entry *, void *), void *arg);

#endif
