/* pool.h: the growable pool on CUDA virtual memory, internal interface.
 *
 * The manager owns at most one pool and calls it with its lock held.  The
 * fast calls (take, give) never reach the driver; the others run with the
 * manager's context current.  Blocks are named by their sub-allocator
 * descriptor index, which the manager keeps beside the pointer (in its
 * owned table while live, in the pending queue once freed), so a free never
 * searches for its block.
 */
#ifndef CUEMM_POOL_H
#define CUEMM_POOL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "cuemm.h"
#include "base/internal.h"
#include "suballoc/internal.h"

#define CUEMM__POOL_MAX_DEVICES 64

typedef enum cuemm__chunk_state {
  CUEMM__CHUNK_EMPTY = 0,       /* nothing there */
  CUEMM__CHUNK_CREATED = 1,     /* physical handle, not mapped */
  CUEMM__CHUNK_MAPPED = 2,      /* mapped, no access set */
  CUEMM__CHUNK_ACCESSIBLE = 3,  /* mapped and accessible: its space is the sub-allocator's */
  CUEMM__CHUNK_SUSPENDED = 4,   /* released by a suspension: its blocks are recorded, its memory gone
                                 * until a resumption creates and maps it again */
} cuemm__chunk_state;

/* The chunk table: one entry per unit (the device's allocation
 * granularity) of the reservation in `runs` (base/runs.h), and beside it,
 * by the same unit, what the pool knows of the chunk in `units`: 32 bytes
 * a unit in all, 1.25 MiB for an 80 GiB reservation in 2 MiB units
 * (calloc'd, so the pages of the part never mapped stay untouched).  A
 * chunk is one physical handle covering one run of units; its entry here
 * is the one at its head. */
typedef struct cuemm__pool_unit {
  CUmemGenericAllocationHandle handle;  /* at the head; valid while has_handle */
  uint8_t state;                        /* cuemm__chunk_state, at the head */
  uint8_t has_handle;                   /* cuMemRelease not yet called */
  uint64_t serial;                      /* at the head: the chunk's number, unique for the pool's life */
} cuemm__pool_unit;

typedef struct cuemm__pool {
  const cuemm__driver_table *drv;
  CUdevice dev;
  CUdeviceptr base;
  size_t reserved;        /* bytes of virtual address space */
  size_t unit;            /* the smallest mapping, and the unit of `units`: the driver's granularity */
  size_t step;            /* cfg->pool_chunk: the most a growth maps beyond what its request needs */
  uint8_t pressed;        /* cached blocks were taken back again and again since the last growth */
  size_t granularity;     /* the driver's minimum granularity */
  size_t threshold;       /* free bytes kept mapped */
  size_t limit;           /* cap on mapped bytes (== reserved when none) */
  int limit_hard;         /* CUEMM_POOL_LIMIT_HARD: nothing past the limit goes to cuMemAlloc */
  size_t piece;           /* CUEMM_POOL_PIECE: pinned piece size; 0: chosen by measurement (piece.c) */
  size_t last_piece;      /* the piece size of the last growth */
  _Atomic size_t mapped;  /* the event log reads it without the lock */
  struct cuemm__log *log; /* the manager's event log, for notes of growth and release; NULL: none */
  size_t chunks;
  size_t release_floor;   /* free bytes at their low point since the last release attempt */
  /* Hysteresis: the most bytes mapped after a growth, in this epoch and
   * the one before; the pool keeps that much mapped past the threshold for
   * one to two epochs of `delay_ns` (CUEMM_POOL_RELEASE_DELAY), so a program
   * that frees and allocates again every iteration does not release and map
   * its memory every iteration.  (Keeping only the bytes in use at the peak
   * is not enough: free space in pieces then needs a growth at every peak,
   * 11 growths and 6 releases a pass of a ResNet-50 trace.) */
  size_t recent_need[2];
  uint64_t epoch_start_ns, delay_ns;
  cuemm__run *runs;       /* the chunks: a run of units each */
  cuemm__pool_unit *units;
  size_t nunits;
  /* Handles whose cuMemRelease failed while a failed growth was undone:
   * released again at the next release of pool memory and at destruction,
   * so that two failures in a row lose nothing. */
  CUmemGenericAllocationHandle *orphans;
  size_t norphans;
  cuemm__sa sa;
  CUmemAccessDesc access[CUEMM__POOL_MAX_DEVICES];
  unsigned naccess;       /* [0] is the owning device; peers are added by share.c */
  int ipc;                /* chunks are exportable as POSIX file descriptors */
  int slab;               /* CUEMM_POOL_SLAB: base is one cuMemAlloc of `reserved` bytes; chunks are bookkeeping */
  uint64_t next_serial;
  uint64_t chunks_mapped, chunks_released, grow_steps, grow_failures, releases;
  struct cuemm__nvtx_pool *nvtx;  /* the annotations for a tool (nvtx.c), NULL without one */
  /* Suspension (suspend.c decides, vacate.c moves the chunks).
   * `suspended` is written under the manager's lock and read atomically
   * by the slow paths that refuse to hand out blocks while it is set. */
  _Atomic int suspended;
  size_t kept_bytes;      /* block contents held in host memory (CUEMM_SUSPEND_KEEP) */
  uint64_t suspends, resumes;
  /* Ranges whose chunks were sent to other processes (ipc-fd.c), which a
   * suspension refuses to release while they are live (vacate.h). */
  struct cuemm__pool_sent *sent;
  size_t nsent, capsent;
  /* Where descriptors with CUEMM__POOL_SPAN_BIT go back (span.h's blocks,
   * cut from the pool's blocks by the threads): set by the stream path. */
  void (*span_give)(void *arg, uint32_t blk);
  void *span_arg;
} cuemm__pool;

/* The bit of a descriptor that names a span's block, not the pool's
 * (span.h's CUEMM__SPAN_BIT). */
#define CUEMM__POOL_SPAN_BIT 0x80000000u

/* Reserves the address range and prepares the pool; maps nothing yet.
 * `total` is the device's memory (the default reservation).  The manager's
 * context is current.  The message names the knob or the driver call. */
CUresult cuemm__pool_create(cuemm__pool **out, const cuemm__driver_table *drv, CUdevice dev,
                            const cuemm_config *cfg, size_t total);

/* Unmaps and releases every chunk and frees the reservation (when
 * `use_driver`; the caller has synchronized), then the host bookkeeping.
 * Returns the first driver failure, with its message; the pool is gone in
 * any case. */
CUresult cuemm__pool_destroy(cuemm__pool *p, int use_driver);

/* Whether an address lies in the pool's reservation. */
static inline int cuemm__pool_contains(const cuemm__pool *p, CUdeviceptr a)
{
  return a >= p->base && a - p->base < p->reserved;
}

/* The largest request the pool serves; larger ones go to cuMemAlloc, or
 * are refused when the limit is hard. */
static inline size_t cuemm__pool_capacity(const cuemm__pool *p) { return p->limit; }
/* The start of the pool's reserved range: a block's offset is from here. */
static inline CUdeviceptr cuemm__pool_base(const cuemm__pool *p) { return p->base; }

/* Takes a block of at least `size` bytes (256-byte aligned) from mapped free
 * space.  Returns 0, or -1 when no free block is large enough. */
static inline int cuemm__pool_take(cuemm__pool *p, size_t size, uintptr_t *ptr, uint32_t *blk)
{
  uint32_t i = cuemm__sa_alloc(&p->sa, cuemm__round_up(size, CUEMM__SA_ALIGN));
  if (i == CUEMM__SA_NIL)
    return -1;
  *ptr = (uintptr_t)p->base + p->sa.b[i].off;
  *blk = i;
  return 0;
}

/* cuemm__pool_take for work on the stream of `tag` (cuemm__sa_alloc_tagged:
 * the better fit of blocks freed on that stream and idle ones, the
 * stream's on a tie); tag 0 is cuemm__pool_take. */
static inline int cuemm__pool_take_tagged(cuemm__pool *p, size_t size, uint32_t tag, uintptr_t *ptr, uint32_t *blk)
{
  if (!tag)
    return cuemm__pool_take(p, size, ptr, blk);
  uint32_t i = cuemm__sa_alloc_tagged(&p->sa, cuemm__round_up(size, CUEMM__SA_ALIGN), tag);
  if (i == CUEMM__SA_NIL)
    return -1;
  *ptr = (uintptr_t)p->base + p->sa.b[i].off;
  *blk = i;
  return 0;
}

/* Returns a block.  The caller guarantees no GPU work still uses it. */
static inline void cuemm__pool_give(cuemm__pool *p, uint32_t blk)
{
  if (__builtin_expect(blk & CUEMM__POOL_SPAN_BIT, 0))
    p->span_give(p->span_arg, blk);
  else
    cuemm__sa_free(&p->sa, blk);
}

/* ---- the sub-allocator, as the stream-ordered path (exchange.c,
 * tags.c) and the manager see it.  Nothing but pool.c,
 * vacate.c and the sub-allocator's files (suballoc*.c) reaches into
 * `sa`: these read and change it, so that its layout stays the pool's own. */

/* A request's size as the pool's blocks have it (the sub-allocator's
 * alignment). */
static inline size_t cuemm__pool_round(size_t size)
{
  return cuemm__round_up(size, CUEMM__SA_ALIGN);
}

/* Free bytes, and those of them freed on streams whose work may still use
 * them (tagged), in all and of one tag. */
static inline size_t cuemm__pool_free_bytes(const cuemm__pool *p) { return p->sa.free_bytes; }
static inline size_t cuemm__pool_tagged_bytes(const cuemm__pool *p) { return p->sa.tagged_bytes; }
static inline size_t cuemm__pool_tag_bytes(const cuemm__pool *p, uint32_t tag)
{
  return cuemm__sa_tag_bytes(&p->sa, tag);
}

/* Whether a free block of `size` bytes, idle or of `tag`, is there
 * (cuemm__sa_fits). */
static inline int cuemm__pool_fits(const cuemm__pool *p, size_t size, uint32_t tag)
{
  return cuemm__sa_fits(&p->sa, size, tag);
}

/* The best fit for `size` bytes (rounded) among idle blocks and those of
 * `tag` (cuemm__sa_fit_for), or among blocks of `tag` smaller than `limit`
 * (cuemm__sa_fit_below); CUEMM__SA_NIL when none. */
static inline uint32_t cuemm__pool_fit_for(const cuemm__pool *p, size_t size, uint32_t tag)
{
  return cuemm__sa_fit_for(&p->sa, size, tag);
}
static inline uint32_t cuemm__pool_fit_below(const cuemm__pool *p, size_t size, uint32_t tag, size_t limit)
{
  return cuemm__sa_fit_below(&p->sa, size, tag, limit);
}

/* Takes `size` bytes (rounded) of free block blk, a fit found above;
 * returns their address. */
static inline uintptr_t cuemm__pool_take_fit(cuemm__pool *p, uint32_t blk, size_t size)
{
  cuemm__sa_take(&p->sa, blk, size);
  return (uintptr_t)p->base + p->sa.b[blk].off;
}

/* Returns USED block blk as FREE with `tag` (0: idle) and `seq`, the
 * newest of its stream's frees (cuemm__sa_free_tagged); -1 when host
 * memory ran out, nothing changed. */
static inline int cuemm__pool_give_tagged(cuemm__pool *p, uint32_t blk, uint32_t tag, uint64_t seq)
{
  return cuemm__sa_free_tagged(&p->sa, blk, tag, seq);
}

/* Makes idle, and merges, the blocks of `tag` numbered up to `done`
 * (cuemm__sa_untag); returns their bytes. */
static inline size_t cuemm__pool_untag(cuemm__pool *p, uint32_t tag, uint64_t done)
{
  return cuemm__sa_untag(&p->sa, tag, done);
}

/* The blocks of tag `from` become `to`'s, numbered `seq`, and merge
 * (cuemm__sa_retag); returns their bytes. */
static inline size_t cuemm__pool_retag(cuemm__pool *p, uint32_t from, uint32_t to, uint64_t seq)
{
  return cuemm__sa_retag(&p->sa, from, to, seq);
}

/* A block's size and tag; its word: FREE and tagged, the newest of its
 * stream's frees it holds; USED, the caller's (the stream it was handed
 * out for, exchange.c). */
static inline size_t cuemm__pool_block_size(const cuemm__pool *p, uint32_t blk) { return p->sa.b[blk].size; }
static inline uint32_t cuemm__pool_block_tag(const cuemm__pool *p, uint32_t blk) { return p->sa.b[blk].tag; }
static inline uint64_t cuemm__pool_block_word(const cuemm__pool *p, uint32_t blk) { return p->sa.b[blk].seq; }
static inline void cuemm__pool_set_block_word(cuemm__pool *p, uint32_t blk, uint64_t w) { p->sa.b[blk].seq = w; }

/* The start of the USED block that holds address a of the pool, for
 * IPC export: 0, or -1 when a lies in no live block. */
static inline int cuemm__pool_used_at(const cuemm__pool *p, CUdeviceptr a, CUdeviceptr *start)
{
  uint32_t i = cuemm__sa_find(&p->sa, (size_t)(a - p->base));
  if (i == CUEMM__SA_NIL || p->sa.b[i].state != CUEMM__SA_USED)
    return -1;
  *start = p->base + (CUdeviceptr)p->sa.b[i].off;
  return 0;
}

/* The pool's block descriptors, for snapshots: how many there are, and
 * descriptor i (its `next` the following block in address order). */
static inline uint32_t cuemm__pool_descriptors(const cuemm__pool *p) { return p->sa.cap; }
static inline const cuemm__sa_block *cuemm__pool_block(const cuemm__pool *p, uint32_t i) { return &p->sa.b[i]; }

/* The pool's annotations for a tool (nvtx.c), NULL without one. */
static inline struct cuemm__nvtx_pool *cuemm__pool_nvtx(const cuemm__pool *p) { return p->nvtx; }

/* The release threshold (free bytes kept mapped), and the full growth step
 * (cfg->pool_chunk), which a pool of 8 of them or more maps at a time. */
static inline size_t cuemm__pool_threshold(const cuemm__pool *p) { return p->threshold; }
static inline size_t cuemm__pool_unit_bytes(const cuemm__pool *p) { return p->step; }

/* A growth maps at least 1/CUEMM__POOL_STEP_DIV of what is mapped. */
#define CUEMM__POOL_STEP_DIV 8
/* The smallest growth step of a pool whose threads' caches had blocks
 * taken back again and again since its last growth (manager.h's
 * CUEMM__RECLAIMS_BEFORE_GROWTH; CUEMM_POOL_CHUNK when that is smaller): small steps keep a small pool's footprint near its live bytes,
 * but one that fills between growths makes its caches give back at nearly
 * every miss (a thread keeping sixteen blocks of up to 128 KiB, 1 MiB
 * live, in a 2 MiB pool: 2.3x the instructions an operation of an 8 MiB
 * pool). */
#define CUEMM__POOL_STEP_MIN ((size_t)8 << 20)

/* Says whether cached blocks were taken back again and again since the
 * last growth (the manager's lock held): the next growth's step is then at
 * least CUEMM__POOL_STEP_MIN. */
static inline void cuemm__pool_press(cuemm__pool *p, int pressed) { p->pressed = (uint8_t)pressed; }

/* The least a growth maps now (more when its request needs more): an
 * eighth of the mapped bytes rounded up to the granularity, at least one
 * granule (CUEMM__POOL_STEP_MIN when pressed) and at most cfg->pool_chunk; with pool_ipc or pool_slab,
 * cfg->pool_chunk. */
size_t cuemm__pool_step(const cuemm__pool *p);

/* Maps new memory at the lowest place where it lets a request of `size`
 * bytes fit (extending free space beside it when there is some: idle, or
 * freed on the requesting stream, tag `tag`, which that stream may use at
 * once and which the new memory then joins under the tag): one chunk
 * per piece (one cuMemCreate and one cuMemMap each, piece.c chooses their
 * size), side by side, then one cuMemSetAccess over the whole run for every
 * device with access.  A failed step rolls back every piece of it.
 * CUDA_ERROR_OUT_OF_MEMORY when the limit or the reservation leaves no
 * room, or the driver's error. */
CUresult cuemm__pool_grow(cuemm__pool *p, size_t size, uint32_t tag);

/* Unmaps and releases wholly free chunks, highest address first, as long as
 * at least `keep` free bytes stay mapped.  Every free block is idle (blocks
 * come back only after a synchronization), so no synchronization is needed
 * here.  Stops at the first driver failure (the chunk stays mapped and
 * usable) and returns it. */
CUresult cuemm__pool_release(cuemm__pool *p, size_t keep);

/* Called by a flush before it returns blocks: between flushes free space
 * only shrinks (or grows by growth), so this sees its low point. */
static inline void cuemm__pool_note_low(cuemm__pool *p)
{
  if (p->sa.free_bytes < p->release_floor)
    p->release_floor = p->sa.free_bytes;
}

/* Free bytes an automatic release keeps mapped: the threshold, or what
 * keeps the recent peak mapped (see recent_need), whichever is more. */
size_t cuemm__pool_keep(cuemm__pool *p);

/* Whether an automatic release is due after blocks came back: more than
 * cuemm__pool_keep is free, and at least a unit more than at the low point
 * since the last attempt (otherwise no chunk can have become wholly free
 * that was not already, and the walk is skipped). */
int cuemm__pool_release_due(cuemm__pool *p);

/* The address of a unit. */
static inline CUdeviceptr cuemm__pool_unit_addr(const cuemm__pool *p, size_t u)
{
  return p->base + (CUdeviceptr)(u * p->unit);
}

void cuemm__pool_get_stats(const cuemm__pool *p, cuemm_pool_stats *s);

/* ---- the chunk table, as pool.c and vacate.c share it: a
 * suspension releases and remaps the chunks a growth made, the same way. */

/* What every chunk is created with, at growth and at resumption. */
CUmemAllocationProp cuemm__pool_chunk_prop(CUdevice dev, int ipc);

/* Makes units [head, head + n) one chunk, in `state`. */
static inline void cuemm__pool_chunk_mark(cuemm__pool *p, size_t head, size_t n, uint8_t state)
{
  cuemm__runs_mark(p->runs, head, n);
  p->units[head].state = state;
}

/* Tells the annotations (nvtx.c) that the chunks whose heads lie in units
 * [head, head + n) are mapped and accessible. */
void cuemm__pool_nvtx_mapped(cuemm__pool *p, size_t head, size_t n);

/* The size of the pieces a growth of `bytes` is made of now (piece.c's
 * choice, or CUEMM_POOL_PIECE); a resumption cuts its runs the same way. */
size_t cuemm__pool_piece_size(const cuemm__pool *p, size_t bytes);

/* Merges the cached blocks, then lists the head units of the wholly free
 * chunks in *cand (the caller frees it), *n of them.  Returns 0, or -1
 * when host memory ran out, the list then holding those found before. */
int cuemm__pool_free_chunks(cuemm__pool *p, uint32_t **cand, size_t *n);

/* The pool's chunks that are mapped and accessible, in address order:
 * their starts and sizes into base[] and size[] (at most cap of them;
 * NULL arrays: only counted).  Returns how many there are.  Lock held. */
size_t cuemm__pool_list_chunks(const cuemm__pool *p, CUdeviceptr *base, size_t *size, size_t cap);

/* ---- the suspended state, which every path that hands out pool memory
 * reads (suspend.c sets it with the manager's lock held); what a
 * suspension does to the chunks is vacate.h's ---- */

static inline int cuemm__pool_is_suspended(const cuemm__pool *p)
{
  return atomic_load_explicit(&p->suspended, memory_order_acquire);
}
static inline void cuemm__pool_set_suspended(cuemm__pool *p, int on)
{
  atomic_store_explicit(&p->suspended, on, memory_order_release);
}
static inline void cuemm__pool_set_kept(cuemm__pool *p, size_t bytes) { p->kept_bytes = bytes; }
/* Bytes of physical memory the pool holds (0 once wholly suspended).  Any
 * thread, no lock. */
static inline size_t cuemm__pool_held(const cuemm__pool *p) { return atomic_load_explicit(&p->mapped, memory_order_relaxed); }
/* Device memory the pool holds from the driver: a slab whole from its
 * creation, else what is mapped.  Any thread, no lock. */
static inline size_t cuemm__pool_held_from_driver(const cuemm__pool *p) { return p->slab ? p->reserved : cuemm__pool_held(p); }
/* Whether the hard limit (CUEMM_POOL_LIMIT_HARD) keeps requests past it
 * from cuMemAlloc; chunks exportable to other processes. */
static inline int cuemm__pool_limit_is_hard(const cuemm__pool *p) { return p->limit_hard; }
static inline int cuemm__pool_is_ipc(const cuemm__pool *p) { return p->ipc; }
/* The allocation granularity every mapping is a multiple of. */
static inline size_t cuemm__pool_granule(const cuemm__pool *p) { return p->unit; }
/* Where growth and release are noted (the manager's event log). */
static inline void cuemm__pool_set_log(cuemm__pool *p, struct cuemm__log *log) { p->log = log; }
/* Where descriptors of blocks cut by the threads (span.h) go back. */
static inline void cuemm__pool_set_span_give(cuemm__pool *p, void (*give)(void *, uint32_t), void *arg)
{
  p->span_give = give;
  p->span_arg = arg;
}
static inline int cuemm__pool_is_slab(const cuemm__pool *p) { return p->slab; }
static inline void cuemm__pool_count(cuemm__pool *p, int resumed)
{
  if (resumed)
    p->resumes++;
  else
    p->suspends++;
}

/* The refusal of a call that needs the pool's memory while it is
 * suspended: CUDA_ERROR_ILLEGAL_STATE, the message naming `fn`. */
CUresult cuemm__pool_refuse_suspended(const cuemm__pool *p, const char *fn);

/* Bytes a resumption maps: the chunks without physical memory, and those
 * (after failures) with memory but no mapping or no access. */
size_t cuemm__pool_suspended_need(const cuemm__pool *p);

/* With a hard limit, the refusal of a request larger than the limit:
 * CUDA_ERROR_OUT_OF_MEMORY with the figures in the message. */
CUresult cuemm__pool_refuse(const cuemm__pool *p, size_t size);

/* "N bytes mapped, N used, largest free block N" for messages. */
void cuemm__pool_describe(const cuemm__pool *p, char *buf, size_t n);

#endif
