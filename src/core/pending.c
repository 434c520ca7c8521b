/* pending.c: owns the FIFO of deferred frees and its thresholds (Numba's
 * _PendingDeallocs).  The ring grows by doubling; it never shrinks, because a
 * program that once held many frees back (a long defer scope) will likely do
 * so again, and the ring costs 24 bytes an entry.
 */
#include "core/pending.h"

#include <stdlib.h>
#include <string.h>

void cuemm__pending_init(cuemm__pending *q, size_t max_count, size_t max_bytes)
{
  memset(q, 0, sizeof *q);
  q->max_count = max_count;
  q->max_bytes = max_bytes;
}

void cuemm__pending_fini(cuemm__pending *q)
{
  free(q->ring);
  memset(q, 0, sizeof *q);
}

int cuemm__pending_reserve(cuemm__pending *q, size_t need)
{
  if (need <= q->cap)
    return 0;
  size_t cap = q->cap ? q->cap : 16;
  while (cap < need)
    cap *= 2;
  cuemm__pending_entry *ring = malloc(cap * sizeof *ring);
  if (!ring)
    return -1;
  for (size_t i = 0; i < q->count; i++)
    ring[i] = q->ring[(q->head + i) & (q->cap - 1)];
  free(q->ring);
  q->ring = ring;
  q->cap = cap;
  q->head = 0;
  return 0;
}

const cuemm__pending_entry *cuemm__pending_find(const cuemm__pending *q, uintptr_t ptr, int inside)
{
  for (size_t i = 0; i < q->count; i++) {
    const cuemm__pending_entry *e = &q->ring[(q->head + i) & (q->cap - 1)];
    if (e->ptr == ptr || (inside && ptr > e->ptr && ptr - e->ptr < e->size))
      return e;
  }
  return NULL;
}
