/* pending.h: the queue of deferred frees and the defer-scope counter.
 *
 * A pure data structure: it decides when a flush is due but never frees
 * anything itself.  Each entry carries its kind and the manager releases it,
 * so the queue does not know where memory came from and a new kind of memory
 * adds no dependency here.  Not thread-safe: the manager's lock guards it.
 */
#ifndef CUEMM_PENDING_H
#define CUEMM_PENDING_H

#include <stddef.h>
#include <stdint.h>

typedef enum cuemm__kind {
  CUEMM__KIND_DEVICE = 1,   /* cuMemAlloc */
  CUEMM__KIND_HOST = 2,     /* cuMemHostAlloc */
  CUEMM__KIND_PINNED = 3,   /* cuMemHostRegister: never queued, unpinned at once */
  CUEMM__KIND_POOL = 4,     /* a block of the manager's pool */
  CUEMM__KIND_STREAM = 5,   /* a pool block held by a thread heap (stream.c); aux names the heap */
  CUEMM__KIND_MANAGED = 6,  /* a block of a managed segment (managed.c); aux: its sub-allocator descriptor */
  CUEMM__KIND_SYSTEM = 7,   /* a system allocation (managed.c) */
} cuemm__kind;

typedef struct cuemm__pending_entry {
  uintptr_t ptr;
  size_t size;
  cuemm__kind kind;
  uint32_t aux;             /* the kind's own word, given back at release */
} cuemm__pending_entry;

typedef struct cuemm__pending {
  cuemm__pending_entry *ring;  /* FIFO, capacity a power of two */
  size_t cap, head, count;
  size_t bytes;
  size_t max_count, max_bytes;
  unsigned int defer_depth;
} cuemm__pending;

void cuemm__pending_init(cuemm__pending *q, size_t max_count, size_t max_bytes);
void cuemm__pending_fini(cuemm__pending *q);

/* Makes room for `need` entries.  Returns 0, or -1 when memory ran out. */
int cuemm__pending_reserve(cuemm__pending *q, size_t need);

/* Appends at the tail.  Returns 0, or -1 when memory for the queue ran out
 * (the queue is unchanged then). */
static inline int cuemm__pending_push(cuemm__pending *q, uintptr_t ptr, size_t size, cuemm__kind kind,
                                      uint32_t aux)
{
  if (q->count == q->cap && cuemm__pending_reserve(q, q->count + 1) != 0)
    return -1;
  q->ring[(q->head + q->count) & (q->cap - 1)] = (cuemm__pending_entry){ ptr, size, kind, aux };
  q->count++;
  q->bytes += size;
  return 0;
}

/* The queued entry that starts at `ptr` or, with `inside`, whose range
 * holds it; NULL if none.  A walk of the queue: for error messages and
 * snapshots only. */
const cuemm__pending_entry *cuemm__pending_find(const cuemm__pending *q, uintptr_t ptr, int inside);

/* After a push: whether the thresholds ask for a flush (strictly more than
 * max_count entries or max_bytes bytes).  Deferral is not considered here. */
static inline int cuemm__pending_over(const cuemm__pending *q)
{
  return q->count > q->max_count || q->bytes > q->max_bytes;
}

/* Whether a flush may run now (no defer scope open). */
static inline int cuemm__pending_may_flush(const cuemm__pending *q) { return q->defer_depth == 0; }

/* The oldest entry, or NULL when the queue is empty. */
static inline const cuemm__pending_entry *cuemm__pending_front(const cuemm__pending *q)
{
  return q->count ? &q->ring[q->head] : NULL;
}

/* Removes the oldest entry (the queue must not be empty). */
static inline void cuemm__pending_pop(cuemm__pending *q)
{
  q->bytes -= q->ring[q->head].size;
  q->head = (q->head + 1) & (q->cap - 1);
  q->count--;
}

#endif
