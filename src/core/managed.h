/* managed.h: managed (unified) and system-allocated memory, internal
 * interface.
 *
 * A manager created with cuemm_config.memory = CUEMM_MEMORY_MANAGED or
 * CUEMM_MEMORY_SYSTEM owns one cuemm__managed, and cuemm_alloc hands its
 * requests here.  Blocks then live in the manager's owned table and its
 * pending queue like any other allocation, with their own kinds
 * (CUEMM__KIND_MANAGED, whose aux word is the block's sub-allocator
 * descriptor, and CUEMM__KIND_SYSTEM); the manager's flush asks
 * cuemm__managed_flush_begin whether it must synchronize first and gives
 * every block back through cuemm__managed_release.  All calls are made with
 * the manager's lock held.
 *
 * managed.c sits below manager.c: it enters the context (ctx.c) and counts
 * its allocations (account.c) itself, and the one manager policy it needs,
 * the flush of the pending queue (before an out-of-memory retry and in
 * cuemm_managed_trim), reaches it as the hook given to
 * cuemm__managed_create, so it calls nothing of manager.c by name.
 */
#ifndef CUEMM_MANAGED_H
#define CUEMM_MANAGED_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "cuemm.h"
#include "base/internal.h"
#include "core/pending.h"
#include "suballoc/internal.h"

/* The segments' table: one entry per unit (pool_chunk bytes) of the
 * sub-allocator's span in `runs` (base/runs.h), and beside it, by the same
 * unit, the segment's address in `units`.  A segment is one
 * cuMemAllocManaged allocation covering one run of units; its entry here is
 * the one at its head. */
typedef struct cuemm__managed_unit {
  CUdeviceptr base;   /* at the head: the segment's address (0: no segment) */
} cuemm__managed_unit;

struct cuemm_manager;

/* The manager's flush of its pending frees (cuemm__manager_flush_locked).  Lock
 * held. */
typedef CUresult (*cuemm__managed_flush_fn)(struct cuemm_manager *m);

typedef struct cuemm__managed {
  const cuemm__driver_table *drv;
  cuemm__managed_flush_fn flush;
  struct cuemm__log *log;   /* the manager's event log, for notes of growth and release; NULL: none */
  CUdevice dev;
  cuemm_memory_kind kind;
  int prefetch;
  cuemm_location preferred, accessed_by;
  size_t unit;              /* segment size: pool_chunk */
  size_t threshold;         /* free bytes kept: pool_release_threshold */
  size_t limit;             /* managed_limit, 0: none */
  size_t total;             /* the device's memory */
  size_t span, nunits;
  cuemm__sa sa;             /* over [0, span): segments, with a hole unit between any two */
  cuemm__run *runs;         /* the segments: a run of units each */
  cuemm__managed_unit *units;
  _Atomic size_t held;      /* the event log reads it without the lock */
  size_t peak_held, segments;
  size_t release_floor;
  size_t pending;           /* managed and system blocks in the pending queue */
  size_t system_bytes, system_count;
  uint64_t segments_allocated, segments_released, oversubscribed_grows, limit_refusals;
  uint64_t prefetches, advises;
  char warning[256];
} cuemm__managed;

/* Creates m->managed for m->cfg.memory (MANAGED or SYSTEM); checks that the
 * driver and the device support it; `flush` is the manager's flush of its
 * pending frees.  Allocates nothing from the driver. */
CUresult cuemm__managed_create(struct cuemm_manager *m, cuemm__managed_flush_fn flush);

/* Gives the segments back (when `use_driver`; the caller has entered the
 * context and released or abandoned every block) and frees m->managed.
 * Without the driver, system blocks still owned are freed (they are the
 * process's memory, not the context's).  Returns the first driver
 * failure. */
CUresult cuemm__managed_destroy(struct cuemm_manager *m, int use_driver);

/* cuemm_alloc for a managed or system manager. */
CUresult cuemm__managed_alloc(struct cuemm_manager *m, CUdeviceptr *p, size_t size);

/* Releases one queued (or, at destruction, live) block of kind MANAGED or
 * SYSTEM: a managed block back to its segment, a system block to free().
 * Never fails: the flush synchronized before. */
CUresult cuemm__managed_release(struct cuemm_manager *m, cuemm__kind kind, uintptr_t p, size_t size);

/* Called by a flush before it releases anything: whether managed or system
 * blocks are queued (the flush then synchronizes the context once). */
static inline int cuemm__managed_flush_begin(cuemm__managed *mp)
{
  if (!mp || !mp->pending)
    return 0;
  if (mp->sa.free_bytes < mp->release_floor)
    mp->release_floor = mp->sa.free_bytes;
  return 1;
}

/* Called by a flush after it released blocks: gives wholly free segments
 * back when more than the threshold is free. */
CUresult cuemm__managed_flush_end(cuemm__managed *mp);

#endif
