/* span.h: a thread's spans of the pool, which its large blocks are cut
 * from without the manager's lock.
 *
 * Where threads allocate blocks of 256 KiB to 16 MiB at sizes drawn from a
 * range, the threads' caches seldom hold a block of the size asked for,
 * and every miss went to the pool under the manager's one lock: the pool's
 * tree, its owned table and its counts are shared, and their cache lines
 * crossed between cores at every pair (two threads did a quarter of one
 * thread's pairs at a 2 MiB maximum; docs/design.md).  A span is a
 * run of pool memory that one thread's heap takes from the pool in one
 * visit and cuts, with a sub-allocator of its own (suballoc.h), into the
 * large blocks it hands out on one stream: the span's stream.  A block
 * freed by its owner on that stream goes back into the span at once (the
 * stream's order makes it reusable there); one freed on another stream
 * waits in the heap's cache as any block does, and reaches the span only
 * once no work can use it (through the pending queue, whose flush
 * synchronizes).  A span whose blocks are all back is given to the pool
 * as freed on its stream.
 *
 * Spans cost memory: their free space serves only their thread and
 * stream.  So a heap takes them only where the manager's lock was found
 * taken at its pool visits (CUEMM__SPAN_CONTENDED times), or always with
 * CUEMM_STREAM_SPANS=always (cuemm_config.stream_spans).
 *
 * A span's block has no owned entry while only its owner's thread touches
 * it: its record in the heap is all there is, and its descriptor (the
 * record's `blk`) names the span and the block in the span's
 * sub-allocator.  Another thread's free, cuemm_free, cuemm_record_stream,
 * IPC export and the like find it through the manager (cuemm__span_own),
 * which gives it an owned entry from then on, as a heap's block has; the
 * heap then treats it as one, and only the place it goes back to differs.
 *
 * Locks: spans are made and given back under the manager's lock with the
 * heap held; a span's sub-allocator changes only with its heap held
 * (entered by its owner, or locked).
 */
#ifndef CUEMM_SPAN_H
#define CUEMM_SPAN_H

#include <stddef.h>
#include <stdint.h>

#include <cuda.h>

#include "stream/heap.h"
#include "suballoc/internal.h"

/* A span block's descriptor: this bit, the span's number and the block's
 * descriptor in the span; CUEMM__SPAN_OWNED once it has an owned entry. */
#define CUEMM__SPAN_BIT 0x80000000u
#define CUEMM__SPAN_OWNED 0x40000000u
#define CUEMM__SPAN_ID_SHIFT 18
#define CUEMM__SPAN_MAX 4096u
#define CUEMM__SPAN_DESC_MASK ((1u << CUEMM__SPAN_ID_SHIFT) - 1)

/* Pool visits that found the manager's lock taken before a heap takes
 * spans (cuemm_config.stream_spans "auto"). */
#define CUEMM__SPAN_CONTENDED 64u
/* A span's size: room for this many requests like the one that opened it,
 * or twice the stream's span bytes in use, at least CUEMM__SPAN_MIN and at
 * most CUEMM__SPAN_MAX_BYTES. */
#define CUEMM__SPAN_REQUESTS 4u
#define CUEMM__SPAN_MIN ((size_t)16 << 20)
#define CUEMM__SPAN_MAX_BYTES ((size_t)256 << 20)

struct cuemm_manager;
struct cuemm__heap;

typedef struct cuemm__span {
  cuemm__sa sa;          /* offsets within the span */
  uintptr_t base;
  size_t size;
  size_t live;           /* bytes of its blocks not back in it */
  uint32_t pblk;         /* its block in the pool */
  uint32_t id;           /* its number: the manager's spans[id] */
  struct cuemm__heap *h; /* the heap that owns it */
  CUstream s;            /* its stream, as the heap stores it */
  uint32_t hs;           /* that stream in h */
  uint8_t current;       /* h->st[hs].span: new blocks are cut from it */
  uint8_t retired;       /* its stream was retired: it goes back through a flush */
} cuemm__span;

static inline int cuemm__span_blk(uint32_t blk) { return (blk & CUEMM__SPAN_BIT) != 0; }
static inline uint32_t cuemm__span_id(uint32_t blk)
{
  return (blk & ~(CUEMM__SPAN_BIT | CUEMM__SPAN_OWNED)) >> CUEMM__SPAN_ID_SHIFT;
}
static inline uint32_t cuemm__span_desc(uint32_t blk) { return blk & CUEMM__SPAN_DESC_MASK; }

/* Calls fn on every block of span sp in address order: those cut from it
 * (`cut`) and its free space, under its owner's heap lock (its owner cuts
 * and takes back blocks under the heap alone).  m's lock held. */
void cuemm__span_each(const cuemm__span *sp, void (*fn)(uintptr_t ptr, size_t size, int cut, void *arg), void *arg);

/* The stream whose requests sp serves, as a program names it: NULL for
 * the legacy stream and once the stream was retired. */
static inline CUstream cuemm__span_stream(const cuemm__span *sp)
{
  return sp->retired || sp->s == CU_STREAM_LEGACY ? NULL : sp->s;
}

/* A block of `rs` bytes (rounded) cut from stream hs's current span of h,
 * recorded LIVE in h for `req` bytes, or NIL (no span, no room, no host
 * memory for the record).  Heap entered by its owner or locked. */
uint32_t cuemm__span_cut(struct cuemm__heap *h, uint32_t hs, size_t rs, size_t req);

/* A new span over pool block `pblk` ([base, base + size)) for stream hs of
 * h, which becomes the stream's current one; NULL when host memory or
 * span numbers ran out.  *old: the span it replaces when that one is empty
 * (the caller gives it back), else NULL.  m's lock held, h held. */
cuemm__span *cuemm__span_make(struct cuemm_manager *m, struct cuemm__heap *h, uint32_t hs, uintptr_t base,
                              size_t size, uint32_t pblk, cuemm__span **old);

/* Span number `id`, or NULL. */
cuemm__span *cuemm__span_at(const struct cuemm_manager *m, uint32_t id);

/* Record r of h, LIVE, a span block (without an owned entry) freed by its
 * owner on its span's stream: back into the span, the record gone.
 * Returns 1 when the span is now empty and not current (the caller gives
 * it back), else 0.  Heap entered by its owner. */
int cuemm__span_free(struct cuemm_manager *m, struct cuemm__heap *h, uint32_t r);

/* Span block `blk` given back as freed on `stream` (or `idle`: no work
 * uses it): into its span when idle or freed on the span's stream
 * (returns 0, or the span's number + 1 when the span is now empty and not
 * current: the caller gives it back); -1 when it must wait for a
 * synchronizing flush (the caller queues it).  m's lock held, the span's
 * heap held. */
int cuemm__span_take_back(struct cuemm_manager *m, uint32_t blk, CUstream stream, int idle);

/* The pool's hook for span blocks given back idle (the pending queue's
 * flush, cuemm__pool_give): into the span, taking its heap; a span left
 * empty goes back to the pool, current or not.  m's lock held. */
void cuemm__span_give_idle(void *m, uint32_t blk);

/* Takes span `id` out of the manager's table (and out of its stream's
 * current place); the caller gives its pool block back and destroys it.
 * m's lock held, its heap held. */
cuemm__span *cuemm__span_unregister(struct cuemm_manager *m, uint32_t id);
void cuemm__span_destroy(cuemm__span *sp);

/* h's spans of stream hs (NIL: of every stream): with hs, its stream is
 * retired, so they serve no more blocks and go back through a flush.  The
 * empty ones, current or not, are listed in `empty` (at most `cap`, *n of
 * them) for the caller to give back; returns their bytes.  m's lock held,
 * h held. */
size_t cuemm__span_detach(struct cuemm_manager *m, struct cuemm__heap *h, uint32_t hs, cuemm__span **empty,
                          size_t cap, size_t *n);

/* The owned entry of the span block that holds address p (a live or
 * cached one of any heap), made now where it had none; NULL when p lies
 * in no span block.  m's lock held, no heap held. */
struct cuemm__owned_entry *cuemm__span_own(struct cuemm_manager *m, uintptr_t p);

/* The span whose pool block starts at `base`, or NULL.  m's lock held. */
const cuemm__span *cuemm__span_based(const struct cuemm_manager *m, uintptr_t base);

/* Calls fn for the parts of [off, off + size) of the pool (offsets from
 * its base, a run of live pool blocks) that hold live data: the run as it
 * is outside spans, only the blocks cut from them inside (for a
 * suspension's copy of live contents).  m's lock held. */
void cuemm__span_live_runs(const struct cuemm_manager *m, uintptr_t base, size_t off, size_t size,
                           void (*fn)(void *arg, size_t off, size_t size), void *arg);

/* Adds h's spans to the statistics: their number, bytes, and bytes not
 * handed out.  m's lock held, h held (its owner changes `live`). */
void cuemm__span_stats(const struct cuemm_manager *m, const struct cuemm__heap *h, size_t *count, size_t *bytes,
                       size_t *free_b);

/* Frees every span's host memory (the pool and the heaps are going). */
void cuemm__span_fini_all(struct cuemm_manager *m);

#endif
