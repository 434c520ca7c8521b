/* manager.h: the manager structure and the internal calls its files share.
 *
 * Where each policy lives, bottom up: driver.c loads libcuda, config.c reads
 * the CUEMM_* settings, error.c keeps the thread's message; ctx.c makes a
 * manager's context current around its driver calls, account.c counts what
 * its allocators hand out and hold; pending.c is the deferred-free queue,
 * owned.c the table of live allocations, pool.c (on suballoc.c, with piece.c
 * choosing how large growths are cut) the VMM pool, and nvtx.c tells a tool
 * attached through NVTX (compute-sanitizer) which of its memory is handed
 * out (its chunks as heaps, its blocks as regions; pool.c, vacate.c,
 * manager.c and stream.c call it where memory changes hands); managed.c
 * the pool of managed segments and system memory; manager.c owns the
 * alloc/free/flush policy over them (lifecycle.c creating and destroying a
 * manager, stats.c what it reports), and host.c adds pinned host memory on
 * the same paths.  Above the manager, and never called by it by name:
 * registry.c maps contexts to managers and holds the drop-ins (cuemm_get,
 * cuemm_mem_alloc, cuemm_mem_free); ipc.c (the handle, legacy device IPC,
 * the table of opened mappings) and ipc-fd.c (pool memory passed as file
 * descriptors) share allocations with other processes; stream.c (on heap.c,
 * the threads' caches) is the stream-ordered path; range.c answers which
 * block holds a pointer.  What a user sees of it all: log.c writes the event
 * log (CUEMM_LOG), report.c the statistics table (CUEMM_STATS), snapshot.c
 * lists every block.  Those that keep state per manager hear of its creation
 * and end, and the stream-ordered path of the pool's need for its cached
 * blocks, as extensions (below), which extensions.c lists in the order they
 * run.
 *
 * Locking rule: m->lock guards everything below it in the struct and is
 * held across the driver calls of one operation (a flush included), so a
 * pointer is never in the table and the driver's free list at once.
 */
#ifndef CUEMM_MANAGER_H
#define CUEMM_MANAGER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/account.h"
#include "core/ctx.h"
#include "cuemm.h"
#include "base/internal.h"
#include "trace/internal.h"
#include "core/owned.h"
#include "core/pending.h"
#include "pool/internal.h"

struct cuemm__heap; /* stream/heap.h: the stream path's, which the manager only holds */

struct cuemm_manager {
  const struct cuemm__extension *const *ext; /* the layers above, next_count of them, in the order lifecycle.c gives */
  size_t next_count;
  const cuemm__driver_table *drv;
  CUcontext ctx;
  unsigned long long ctx_id;  /* cuCtxGetId: never reused by the driver */
  CUdevice dev;
  cuemm_config cfg;

  cuemm__lock lock;
  cuemm__owned owned;
  cuemm__pending pending;
  cuemm_stats st;             /* pending_* and defer_depth read from `pending` */
  cuemm__pool *pool;          /* NULL without a pool */
  size_t pool_pending;        /* pool blocks in `pending` */
  uint64_t fallback_allocs;   /* requests too large for the pool */
  uint64_t serial;            /* unique for the process's life: thread slots tell managers apart by it */
  struct cuemm__heap **heaps;        /* the threads' heaps of the stream-ordered path (thread-heap.c) */
  struct cuemm__heap *pstreams;      /* the streams whose frees the pool holds, and their events (tags.c;
                               * guarded by `lock`, holds no blocks) */
  uint32_t nheaps, capheaps;
  /* Each thread's share of cfg.stream_keep_large: the large blocks a heap
   * keeps for a stream (thread-heap.c's keep_large_share); written under
   * `lock`, read by the heaps' owners without it. */
  _Atomic uint32_t keep_large;
  /* Allocations from the pool left before the threads keep large blocks
   * again: a growth past the manager's peak held for want of free space in
   * one piece sets it to CUEMM__KEEP_QUIET and keep_large to 0
   * (manager.c), the stream path counts it down under `lock` (exchange.c)
   * and gives the share back at zero (thread-heap.c). */
  uint32_t keep_quiet;
  /* Times the threads' caches' bound was halved (thread-heap.c's
   * cuemm__thread_heap_cap), at most CUEMM__CACHE_HALVINGS; written under
   * `lock`. */
  uint8_t cache_halvings;
  uint64_t stream_reclaims;
  uint64_t reclaims_at_growth;  /* stream_reclaims at the pool's last growth (manager.c's pool_alloc_slow) */
  /* The threads' spans (span.h): a fixed table of CUEMM__SPAN_MAX, made at
   * the first span and never moved, so that an owner reads its own spans
   * without `lock`; changed under `lock`. */
  struct cuemm__span **spans;
  uint32_t nspans, span_next;  /* stream_reclaims at the pool's last growth (manager.c's pool_alloc_slow) */
  uint8_t stream_ready;       /* the stream calls take the pool's path (set once at creation, stream.c) */
  uint8_t stream_inline;      /* stream_ready and no event log: their inline hit paths may serve (stream.c) */
  struct cuemm__managed *managed;  /* managed.c: CUEMM_MEMORY=managed|system, else NULL */
  cuemm__log *log;            /* the event log (log.c), NULL: none; set at creation, read without the lock */
  _Atomic size_t driver_bytes; /* cuMemAlloc memory held (live or pending); the log reads it without the lock */
  struct cuemm__suspend *suspend;  /* suspend.c: the host copy of a suspension, NULL until the first */
};

/* The public calls' refusal of a NULL manager; `fn` is a string literal. */
#define CUEMM__CHECK_MANAGER(m, fn)                                            \
  do {                                                                         \
    if (!(m))                                                                  \
      return cuemm__error(CUDA_ERROR_INVALID_VALUE, fn ": manager is NULL");   \
  } while (0)

/* Allocates with the out-of-memory flush-and-retry policy and records the
 * allocation.  `flags` go to cuMemHostAlloc for CUEMM__KIND_HOST. */
CUresult cuemm__manager_alloc(cuemm_manager *m, cuemm__kind kind, size_t size, unsigned int flags, uintptr_t *out);

/* Releases the pending frees unless a defer scope is open (cuemm_flush with
 * the lock held). */
CUresult cuemm__manager_flush_locked(cuemm_manager *m);
/* Releases every pending free, defer scopes or not: the caller (a
 * suspension, which has synchronized the context, or cuemm_destroy) has
 * entered the context.  Lock held. */
CUresult cuemm__manager_flush_all_locked(cuemm_manager *m);

/* Releases one allocation to the driver (pool blocks go back with the
 * flush or the whole pool).  Lock held, context entered. */
CUresult cuemm__manager_kind_release(cuemm_manager *m, cuemm__kind kind, uintptr_t p, size_t size);

/* cuemm_alloc and cuemm_free without their row in the event log: for the
 * stream-ordered calls that fall back to them (their callers log).
 * `freed`, when not NULL, gets the size the freed block was asked for. */
CUresult cuemm__manager_alloc_device(cuemm_manager *m, CUdeviceptr *p, size_t size);
CUresult cuemm__manager_free_device(cuemm_manager *m, CUdeviceptr p, size_t *freed);
/* The event log's rows of a device allocation (r: its result) and of a free
 * of `size` bytes that succeeded (`seq` taken before the free, log.h). */
void cuemm__manager_log_alloc(cuemm_manager *m, CUresult r, CUdeviceptr p, size_t size, CUstream s, const char *call);
void cuemm__manager_log_free(cuemm_manager *m, uint64_t seq, CUdeviceptr p, size_t size, CUstream s, const char *call);

/* Pool block blk (at ptr, `size` bytes) joins the pending queue, whose
 * flush gives it back to the pool, counted in pool_pending.  0, or -1 when
 * host memory ran out (nothing changed).  Lock held. */
static inline int cuemm__manager_defer_block(cuemm_manager *m, uintptr_t ptr, size_t size, uint32_t blk)
{
  if (cuemm__pending_push(&m->pending, ptr, size, CUEMM__KIND_POOL, blk) != 0)
    return -1;
  m->pool_pending++;
  return 0;
}

/* Queues the free of an allocation of the given kind, flushing when due;
 * a refusal speaks in the name of fn, the public call. */
CUresult cuemm__manager_free(cuemm_manager *m, const char *fn, cuemm__kind kind, uintptr_t p, size_t *freed);

/* Takes a pool block of at least `size` bytes: from free space, else by
 * growing (after cached stream blocks went back), else after flushing and
 * trimming.  Without `grow`, CUEMM__NEXT where it would grow.  Lock
 * held. */
cuemm__result cuemm__manager_pool_take_locked(cuemm_manager *m, size_t size, uint32_t tag, uintptr_t *p, uint32_t *blk,
                                            int grow);


/* An extension: a layer above the manager that keeps state of its own per
 * manager (the registry, the IPC mappings) and must hear when a manager
 * starts and ends.  The manager calls no extension by name: lifecycle.c
 * lists them when it creates a manager, and the runners below
 * (extensions.c) call each one's hook in that order (any hook may be
 * NULL). */
typedef struct cuemm__extension {
  /* cuemm_create, once m is whole and before anyone else can see it (m's
   * lock not held).  A failure refuses the creation: the extensions attached
   * before it are abandoned again, and the message is the failure's. */
  CUresult (*attach)(cuemm_manager *m);
  /* cuemm_destroy, with m's lock held and its context current: release
   * what the extension holds for m.  What the program had left open goes
   * into `note` (empty if nothing), for cuemm_destroy's message. */
  void (*destroy)(cuemm_manager *m, char *note, size_t cap);
  /* cuemm_abandon, with m's lock held: forget m without a driver call. */
  void (*abandon)(cuemm_manager *m);

  /* An extension that holds pool blocks of its own (the stream-ordered
   * path's thread caches, stream.c) answers these, all with m's lock held
   * and its context current. */
  /* Its allocations still live, and their bytes (for destroy's count). */
  size_t (*live)(cuemm_manager *m, size_t *bytes);
  /* Gives the pool back the blocks it caches that no work can still use:
   * with CUEMM__RECLAIM_OWN, those of the calling thread's cache (and of
   * caches no thread owns any more); with CUEMM__RECLAIM_IDLE, those of
   * every thread's; with CUEMM__RECLAIM_ALL, every block it caches (those
   * that may still be in use through the pending queue, whose flush
   * synchronizes); with CUEMM__RECLAIM_QUEUED, the calling thread's cached
   * blocks (and those of caches no thread owns), those whose stream's work
   * may still use them given back as freed on that stream (the pool then
   * serves that stream from them, and others once an event shows the work
   * done, or after a wait on it).
   * With `want` (and not ALL or QUEUED), it stops as soon as the pool
   * has a free block of that many bytes, giving back the blocks it cached
   * longest first.  Returns the bytes given back. */
  size_t (*reclaim)(cuemm_manager *m, int how, size_t want);
  /* Makes idle the pool's blocks freed on streams whose work is known
   * done (queried, and with events recorded where none covers the latest
   * frees); with `synced`, all of them: the context was just
   * synchronized. */
  void (*settle)(cuemm_manager *m, int synced);
  /* cuemm_free of a block the owned table says it holds
   * (CUEMM__KIND_STREAM): the block joins the pending queue, or a double
   * free is refused. */
  CUresult (*give_up)(cuemm_manager *m, cuemm__owned_entry *e);
  /* cuemm_reset: every block it holds, live or cached, joins the pending
   * queue. */
  void (*reset)(cuemm_manager *m);
  /* Adds its figures to the manager's statistics. */
  void (*stats)(cuemm_manager *m, cuemm_stats *s);
  /* The pool just grew past the most the manager had held, for a request
   * of `want` bytes: an extension whose caches held that much may have
   * cost the growth, and may keep less from now on. */
  void (*grown)(cuemm_manager *m, size_t want);
  /* For the owned entry of a block it holds (CUEMM__KIND_STREAM, whose size
   * is the block's rounded size): whether the program still holds the block
   * (not freed on a stream), and the bytes it last asked for. */
  int (*live_size)(cuemm_manager *m, const cuemm__owned_entry *e, size_t *bytes);
  /* The owned entry of a block it holds without one, that holds address p
   * (a span's block, span.h), made now; NULL when it holds none there. */
  cuemm__owned_entry *(*own)(cuemm_manager *m, uintptr_t p);
} cuemm__extension;

/* cuemm__extension's reclaim: whose cached blocks go back.  Taking another
 * thread's costs a handshake with it and events on its streams, so the
 * pool grows before it raids (manager.c's pool_alloc_slow). */
#define CUEMM__RECLAIM_IDLE 0
#define CUEMM__RECLAIM_ALL 1
#define CUEMM__RECLAIM_OWN 2
#define CUEMM__RECLAIM_QUEUED 3

/* Takings back of cached blocks since the pool's last growth past which
 * the pool grows instead (by at least CUEMM__POOL_STEP_MIN): a pool that
 * its caches fill between growths would otherwise have them give back at
 * nearly every miss.  The number's evidence: docs/design.md, "The policy's
 * constants". */
#define CUEMM__RECLAIMS_BEFORE_GROWTH 64

/* When the pool grows past the most the manager has held although its
 * free bytes would cover the request (only not in one piece), the threads
 * keep no blocks of 256 KiB to 16 MiB in their caches for this many
 * allocations from the pool: a kept block is whole and unmerged and splits
 * the free space around it, so the pool would place the next requests
 * elsewhere and grow again.  A program whose memory has stopped growing
 * keeps large blocks; one growing through fragmentation gets a pool whose
 * free space merges.  The number's evidence and cost: docs/design.md,
 * "The policy's constants". */
#define CUEMM__KEEP_QUIET 16384

/* Each time the pool grows past the most the manager has held while the
 * threads' caches hold at least the request, the bound on what the caches
 * keep halves, this many times at most (thread-heap.c): the memory was
 * there, only cached, and a program that repeats its work would grow so
 * again in a later round.  The number's evidence and cost: docs/design.md,
 * "The policy's constants". */
#define CUEMM__CACHE_HALVINGS 3

/* Whether the pool should grow rather than take cached blocks back again. */
static inline int cuemm__reclaims_churn(const cuemm_manager *m)
{
  return m->stream_reclaims - m->reclaims_at_growth >= CUEMM__RECLAIMS_BEFORE_GROWTH;
}

/* m's extensions become ext[0..n), in the order their hooks run, and each
 * one's attach hook runs; a failure abandons those attached before it. */
CUresult cuemm__extensions_attach(cuemm_manager *m, const struct cuemm__extension *const *ext, size_t n);
/* Runs every destroy hook; `note` gets their notes joined with "; ". */
void cuemm__extensions_destroy(cuemm_manager *m, char *note, size_t cap);
void cuemm__extensions_abandon(cuemm_manager *m);
size_t cuemm__extensions_live(cuemm_manager *m, size_t *bytes);
size_t cuemm__extensions_reclaim(cuemm_manager *m, int how, size_t want);
void cuemm__extensions_settle(cuemm_manager *m, int synced);
CUresult cuemm__extensions_give_up(cuemm_manager *m, cuemm__owned_entry *e);
void cuemm__extensions_reset(cuemm_manager *m);
void cuemm__extensions_stats(cuemm_manager *m, cuemm_stats *s);
void cuemm__extensions_grown(cuemm_manager *m, size_t want);
/* An owned entry's live size: its size, or for a block an extension holds
 * what that extension says (0 when the block is freed). */
size_t cuemm__extensions_live_size(cuemm_manager *m, const cuemm__owned_entry *e);
/* The owned entry of the block starting at p, else of a block an
 * extension holds without an entry (a span's, span.h) that starts at p
 * or, with `inside`, holds address p: given one now.  NULL when none.
 * Lock held. */
cuemm__owned_entry *cuemm__extensions_owned_lookup(cuemm_manager *m, uintptr_t p, int inside);

#endif
