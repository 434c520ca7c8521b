/* owned.h: the set of allocations a manager owns, keyed by start address.
 *
 * It answers the question every free must ask first: is this pointer ours,
 * of which kind, how big, and is it already waiting in the pending queue?
 * That is how a foreign pointer or a double free is refused before anything
 * changes.  Open addressing with linear probing: one probe on the common
 * path, no allocation per entry.  Not thread-safe: the manager's lock guards
 * it.
 */
#ifndef CUEMM_OWNED_H
#define CUEMM_OWNED_H

#include <stddef.h>
#include <stdint.h>

#include "pending.h"

typedef struct cuemm__owned_entry {
  uintptr_t key;        /* start address; 0 empty, 1 deleted */
  size_t size;
  uint8_t kind;         /* cuemm__kind */
  uint8_t pending;      /* freed by the program, queued for release */
  uint32_t aux;         /* the kind's own word (a pool block's descriptor) */
} cuemm__owned_entry;

typedef struct cuemm__owned {
  cuemm__owned_entry *slots;
  size_t cap;            /* power of two */
  size_t used;           /* live entries */
  size_t filled;         /* live + deleted (what probing walks over) */
} cuemm__owned;

void cuemm__owned_init(cuemm__owned *t);
void cuemm__owned_fini(cuemm__owned *t);

/* The entry for `key`, or NULL. */
cuemm__owned_entry *cuemm__owned_find(cuemm__owned *t, uintptr_t key);

/* Adds an entry (the key must not be present).  Returns -1 when memory for
 * the table ran out, leaving it unchanged. */
int cuemm__owned_add(cuemm__owned *t, uintptr_t key, size_t size, cuemm__kind kind, uint32_t aux);

/* Removes an entry found with cuemm__owned_find. */
void cuemm__owned_remove(cuemm__owned *t, cuemm__owned_entry *e);

/* Calls fn on every entry (fn must not add or remove). */
void cuemm__owned_each(cuemm__owned *t, void (*fn)(cuemm__owned_entry *, void *), void *arg);

#endif
