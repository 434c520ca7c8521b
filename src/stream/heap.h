/* heap.h: a thread's cache of pool blocks for the stream-ordered path.
 *
 * Each thread that calls cuemm_alloc_async or cuemm_free_async on a manager
 * gets a heap of its own (mimalloc's thread-local heap): the pool blocks it
 * handed out (LIVE) and those freed on a stream and kept for reuse
 * (CACHED), in bins keyed by (stream, size).  The owner's alloc and free
 * touch only its heap, and enter it by setting a flag, `busy`, on a line no
 * other thread writes while nobody else wants the heap, and clearing it to
 * leave.  Other threads enter it only on slow paths (a free of a block this
 * heap holds, the pool taking idle blocks back, statistics): they take the
 * heap's mutex, raise `want` and wait for `busy` to fall; an owner that sees
 * `want` raised takes the mutex like them.  Both sides store, then load the
 * other's flag (Dekker), so they never both proceed.  16 threads on 16
 * streams do not serialize.
 *
 * The fences that handshake needs are asymmetric where the system allows
 * (fence.h): the owner's store and load are separated by a compiler
 * barrier only, and another thread pays a heavy fence for both sides.  That
 * takes two locked instructions, a third of a pair, off the owner's path.
 * A heap other threads keep entering (a thread freeing what another
 * allocated, as PyTorch's autograd thread does) would make them pay a
 * heavy fence each time: after HEAP_HEAVY_MAX of them they ask the owner
 * to enter with a full fence of its own (an atomic exchange) from then on,
 * which it switches to at its next entry.  The mode is the owner's to
 * change, under the mutex; others read it under the mutex.
 *
 * A cached block is reusable at once by its own stream (stream order), and
 * by any stream once its stream's `done` sequence has passed the block's
 * `seq`: frees on a stream are numbered, an event recorded on the stream
 * covers every free numbered up to `covered`, and a completed event moves
 * `done` forward (see event.c).  This file is the data structure only:
 * it never calls the driver.  Lock order: the manager's lock before a
 * heap's lock, never the reverse.
 */
#ifndef CUEMM_HEAP_H
#define CUEMM_HEAP_H

#include <stddef.h>
#include <stdint.h>

#include <cuda.h>

#include <stdatomic.h>

#include "base/internal.h"

#define CUEMM__HEAP_NIL UINT32_MAX
/* Blocks of this size or more are large: a heap keeps few of them, and
 * none larger than CUEMM__HEAP_LARGE_MAX (see exchange.h's cuemm__exchange_admits). */
#define CUEMM__HEAP_LARGE ((size_t)256 << 10)
#define CUEMM__HEAP_LARGE_MAX ((size_t)16 << 20)
/* The most large blocks a heap keeps per stream (cuemm_config's
 * stream_keep_large, at most this; see exchange.h's cuemm__exchange_admits).  A power
 * of two: their list is a ring. */
#define CUEMM__HEAP_LARGE_KEEP_MAX 32u
/* Sizes of a stream's latest large requests its kept blocks could not
 * serve: a freed block of such a size is worth keeping in place of an
 * older one (stream.c's free_evicting). */
#define CUEMM__HEAP_WANTED 4u
/* Events a stream keeps recorded and not yet seen complete. */
#define CUEMM__HEAP_BATCHES 8

typedef enum cuemm__hblock_state {
  CUEMM__HB_UNUSED = 0,
  CUEMM__HB_LIVE = 1,
  CUEMM__HB_CACHED = 2,
} cuemm__hblock_state;

typedef struct cuemm__hblock {
  _Atomic uintptr_t ptr; /* read by other threads (cuemm__heap_remote_free): cuemm__hb_ptr */
  size_t size;          /* the pool block's size (a multiple of 256) */
  size_t req;           /* LIVE: the bytes the program asked for */
  uint64_t seq;         /* CACHED: its stream's free number */
  uint32_t blk;         /* the sub-allocator's descriptor */
  uint32_t hs;          /* LIVE: stream allocated on; CACHED: stream freed on */
  uint32_t prev, next;  /* CACHED: its bin, newest first; UNUSED: the spare stack */
  uint32_t bin;         /* CACHED: its bin's slot */
  uint32_t older, newer;  /* CACHED: the heap's list of cached blocks in the order they were freed */
  uint8_t state;
  uint8_t uses;         /* LIVE: streams named by cuemm_record_stream wait in the heap's `uses` */
  uint8_t lpos;         /* CACHED and large: its slot in its stream's `large`, or CUEMM__HEAP_UNLISTED */
  _Atomic uint8_t remote; /* LIVE: freed by another thread, waiting in the heap's remote list */
} cuemm__hblock;

/* A record's address.  The fields other threads read while the owner
 * writes them (`ptr`, `remote`, the map's slots) are C11 atomics, read and
 * written with explicit orders; the owner's reads are relaxed loads,
 * plain moves on x86-64 and arm64. */
static inline uintptr_t cuemm__hb_ptr(const cuemm__hblock *b)
{
  return atomic_load_explicit(&b->ptr, memory_order_relaxed);
}

/* A stream besides its own that used a live block (cuemm_record_stream).
 * Once the stream is released (cuemm_stream_release), `ev`, recorded on it
 * then, stands for its use: the handle may be destroyed and is never
 * named again. */
typedef struct cuemm__huse {
  uint32_t r;
  CUstream s;
  CUevent ev;
} cuemm__huse;

typedef struct cuemm__hbatch {
  CUevent ev;
  uint64_t seq;         /* frees numbered up to this are covered by ev */
} cuemm__hbatch;

/* A stream as one heap knows it. */
typedef struct cuemm__hstream {
  CUstream s;           /* NULL is stored as CU_STREAM_LEGACY; retired streams get a key no stream has */
  uint64_t freed;       /* frees numbered so far */
  uint64_t covered;     /* the newest recorded event covers frees up to this */
  uint64_t done;        /* frees up to this are known complete */
  cuemm__hbatch batch[CUEMM__HEAP_BATCHES];  /* recorded, oldest first */
  unsigned nbatch;
  size_t cached_count;
  /* its cached blocks of CUEMM__HEAP_LARGE bytes or more, oldest first: a
   * ring of nspan slots from large0 (cuemm__heap_large_at), nlarge of them
   * holding one, the others (NIL) left by blocks taken out of the middle;
   * the first and the last slot always hold one */
  uint32_t large[CUEMM__HEAP_LARGE_KEEP_MAX];
  uint32_t large0, nlarge, nspan;
  size_t wanted[CUEMM__HEAP_WANTED];  /* the sizes of its latest large requests the cache could not serve */
  uint32_t nwanted;     /* requests recorded there so far (the next goes to nwanted % CUEMM__HEAP_WANTED) */
  uint32_t steal_bin;   /* the bin (of another stream) its latest steal came from: looked at first */
  uint8_t retired;      /* no further same-stream reuse; blocks wait for `done` or a flush */
  struct cuemm__span *span;  /* the span its large blocks are cut from now (span.h), or NULL */
  uint8_t idle_skip;    /* learnings left before the stream is asked whether it is idle again */
} cuemm__hstream;

/* A bin: the cached blocks of one (stream, size), newest at head. */
typedef struct cuemm__hbin {
  uint64_t key;         /* 0: empty slot */
  uint32_t head, tail;
} cuemm__hbin;

/* `want`'s bits. */
#define CUEMM__HEAP_WANT_LOCK 1   /* a thread holding `mutex` wants the heap: the owner takes the mutex too */
#define CUEMM__HEAP_WANT_FULL 2   /* other threads ask the owner to enter with a full fence */
#define CUEMM__HEAP_WANT_HOLD 4   /* the pool is suspended: the owner takes the slow paths, which refuse to
                                   * hand out blocks (suspend.c through cuemm__exchange_hold) */
/* Heavy fences other threads pay before they ask for CUEMM__HEAP_WANT_FULL. */
#define CUEMM__HEAP_HEAVY_MAX 16u

typedef struct cuemm__heap {
  atomic_int busy;      /* the owner is inside on its fast path */
  atomic_int want;      /* CUEMM__HEAP_WANT_* */
  uint8_t asym;         /* the owner enters with a compiler barrier only; others pay a heavy fence */
  unsigned heavy;       /* heavy fences others paid since the owner took the heap */
  const void *owner;    /* the owning thread's cuemm__fence_self(); changed under `mutex` */
  cuemm__lock mutex;
  struct cuemm_manager *m;
  uint32_t index;       /* in the manager's heap table: owned entries of its blocks name it */
  atomic_int orphan;    /* its thread exited (or let go of it): another may adopt it */

  /* Records; index 0 unused.  Where the system lends the address space,
   * they never move (`fixed`): another thread may then find a block's
   * record and hand it back without taking the heap (cuemm__heap_remote_free). */
  cuemm__hblock *b;
  uint8_t fixed;
  uint32_t nb, capb, spare;
  /* pointer -> record, for every block the heap holds (open addressing) */
  _Atomic uint32_t *map;
  size_t mapcap, mapused;
  /* The map as other threads read it (its slots and their count in one
   * allocation), and the maps it replaced, freed with the heap: a thread
   * looking up a block may still be reading one. */
  struct cuemm__hmap *_Atomic pubmap;
  struct cuemm__hmap *oldmaps;
  /* Blocks other threads freed, a list through their records' `next`,
   * newest first; the owner takes them all at once into its bins
   * (cuemm__heap_drain_remote).  Alone on its cache line: those threads
   * write it, and the owner's fast path never reads it. */
  char rpad0[64];
  _Atomic uint32_t rhead;
  char rpad1[60];
  uint32_t newest, oldest;   /* the list of every cached block, by the time it was freed */
  cuemm__hbin *bins;
  size_t bincap, binused;
  cuemm__hstream *st;
  uint32_t nst, capst, last;   /* `last`: the stream of the previous call, named last_s by it */
  CUstream last_s;      /* as the caller passed it (NULL too); CUEMM__HEAP_NO_STREAM: `last` names none */

  cuemm__huse *uses;
  uint32_t nuses, capuses;
  /* events created and idle, for the next batch */
  CUevent *evcache;     /* room for every event the heap made, so one always goes back */
  unsigned nev, capev;

  /* counters; read under the lock by cuemm_get_stats */
  size_t live_bytes, live_count, cached_bytes, cached_count;
  /* Cached blocks of CUEMM__HEAP_LARGE bytes or more, every stream's: with
   * none, a large request that missed its bin knows no bin can serve it
   * and goes to the pool without looking (stream.c's alloc_async_miss). */
  size_t cached_large;
  size_t trim_mark;     /* cached bytes past which a free gives idle blocks back (cuemm__thread_heap_cap) */
  uint64_t allocs, frees, events_recorded, event_waits, steals;
  unsigned events_made;
  struct cuemm__heap *gnext, *gprev;   /* process-wide list of live heaps (thread-heap.c) */
  /* The heap that held the block this thread last freed for another
   * thread: its next such free looks there first (free.c's
   * free_remote).  The owner's alone; heaps live as long as their manager. */
  struct cuemm__heap *remote;
  /* Large blocks come from spans (span.h): set by the owner once its pool
   * visits found the manager's lock taken `contended` times, or from the
   * start with CUEMM_STREAM_SPANS=always. */
  uint8_t spanning;
  uint32_t contended;
} cuemm__heap;

/* Whether the owner may cache LIVE-or-not record r as its free: LIVE,
 * with no stream recorded on it and not freed by another thread already
 * (that free waits in the remote list: this one is a double free, which
 * the general way reports once the list is drained). */
static inline int cuemm__heap_freeable(const cuemm__heap *h, uint32_t r)
{
  const cuemm__hblock *b = &h->b[r];
  return b->state == CUEMM__HB_LIVE && !b->uses && !atomic_load_explicit(&b->remote, memory_order_relaxed);
}

/* The pointer map's published form (pubmap). */
typedef struct cuemm__hmap {
  struct cuemm__hmap *older;
  size_t cap;
  _Atomic uint32_t slot[]; /* written while other threads may read them */
} cuemm__hmap;

void cuemm__heap_init(cuemm__heap *h, struct cuemm_manager *m, uint32_t index);

/* Another thread's free of the block at p, which heap h (not the caller's)
 * holds LIVE and is smaller than CUEMM__HEAP_LARGE, with no stream recorded
 * on it: pushed onto h's remote list with one atomic exchange of the
 * record's `remote` and one of the list's head, without taking h; its
 * owner caches it on `stream` at its next miss or whoever takes h next.
 * Returns 1 when pushed (*req: the bytes it was asked for), 0 when h
 * holds no such block now (the caller goes the general way), -1 when it
 * was freed by another thread already and not taken back since. */
int cuemm__heap_remote_free(cuemm__heap *h, uintptr_t p, CUstream stream, size_t *req);

/* Caches the blocks other threads freed on the streams they named.  The
 * owner, entered or locked, or a thread that locked h. */
void cuemm__heap_drain_remote_list(cuemm__heap *h);
static inline void cuemm__heap_drain_remote(cuemm__heap *h)
{
  if (__builtin_expect(atomic_load_explicit(&h->rhead, memory_order_relaxed) != CUEMM__HEAP_NIL, 0))
    cuemm__heap_drain_remote_list(h);
}

/* The owner's entry on its fast path: 1 when it is in (leave with
 * cuemm__heap_leave), 0 when someone else wants the heap (use
 * cuemm__heap_lock instead). */
static inline int cuemm__heap_enter(cuemm__heap *h)
{
  if (__builtin_expect(h->asym, 1)) {
    atomic_store_explicit(&h->busy, 1, memory_order_relaxed);
    /* The hardware may still let the load pass the store: the other
     * side's heavy fence covers that (fence.h). */
    atomic_signal_fence(memory_order_seq_cst);
    if (__builtin_expect(atomic_load_explicit(&h->want, memory_order_acquire) == 0, 1))
      return 1;
  } else {
    atomic_exchange_explicit(&h->busy, 1, memory_order_seq_cst);
    if (__builtin_expect(atomic_load_explicit(&h->want, memory_order_seq_cst) == 0, 1))
      return 1;
  }
  atomic_store_explicit(&h->busy, 0, memory_order_release);
  return 0;
}

static inline void cuemm__heap_leave(cuemm__heap *h)
{
  atomic_store_explicit(&h->busy, 0, memory_order_release);
}

/* Anyone's entry (the owner's slow paths too): exclusive against every
 * other entry.  In lock order after the manager's lock. */
void cuemm__heap_lock(cuemm__heap *h);
void cuemm__heap_unlock(cuemm__heap *h);
/* The calling thread takes h as its own (a new heap, or an orphan it
 * adopts); h is not locked. */
void cuemm__heap_own(cuemm__heap *h);
/* Frees the heap's host memory (its events must be gone already). */
void cuemm__heap_fini(cuemm__heap *h);

static inline size_t cuemm__heap_hash(uint64_t k, size_t cap)
{
  return (size_t)((k * UINT64_C(0x9E3779B97F4A7C15)) >> 32) & (cap - 1);
}

/* The record of the block at `p`, or NIL. */
static inline uint32_t cuemm__heap_find(const cuemm__heap *h, uintptr_t p)
{
  if (!h->mapcap)
    return CUEMM__HEAP_NIL;
  for (size_t i = cuemm__heap_hash(p, h->mapcap);; i = (i + 1) & (h->mapcap - 1)) {
    uint32_t r = atomic_load_explicit(&h->map[i], memory_order_relaxed);
    if (r == CUEMM__HEAP_NIL)
      return CUEMM__HEAP_NIL;
    if (cuemm__hb_ptr(&h->b[r]) == p)
      return r;
  }
}

/* A handle no stream has: the address of an object of this library. */
extern const char cuemm__heap_no_stream;
#define CUEMM__HEAP_NO_STREAM ((CUstream)(uintptr_t)&cuemm__heap_no_stream)

/* The stream index of `s`, or NIL when the heap has not met it.  Every
 * fast path asks: the previous call's answer is checked against the handle
 * it was asked with alone (NULL, the legacy stream, as well), without
 * reaching into the stream table. */
static inline uint32_t cuemm__heap_stream(cuemm__heap *h, CUstream s)
{
  if (__builtin_expect(h->last_s == s, 1))
    return h->last;
  CUstream key = s ? s : CU_STREAM_LEGACY;
  for (uint32_t i = 0; i < h->nst; i++)
    if (h->st[i].s == key) {
      h->last_s = s;
      return h->last = i;
    }
  return CUEMM__HEAP_NIL;
}

/* After a stream's key changed (retired, or its place reused). */
static inline void cuemm__heap_forget_last(cuemm__heap *h)
{
  h->last = CUEMM__HEAP_NIL;
  h->last_s = CUEMM__HEAP_NO_STREAM;
}

/* A bin holds the blocks of one size class: below CUEMM__HEAP_EXACT each
 * 256-byte size is a class of its own, above it eight classes share each
 * power of two (a class's sizes lie within 1/8 of its smallest).  Requests
 * of sizes that repeat exactly (a training step's tensors) find their own
 * size at a bin's head; requests of sizes drawn from a range (a server's
 * varying lengths, array code) find a block of their class, whose size
 * they may exceed by at most an eighth: with exact keys, a thread that
 * kept sixteen blocks of sizes drawn between 256 B and 128 KiB found its
 * own size almost never and went to the pool at nearly every request.
 * A large request (CUEMM__HEAP_LARGE and up) also takes a block of the
 * next class within an eighth of its size: one near the top of its class
 * finds few blocks above it in its own, and a stream keeps few large
 * blocks.  With sixteen blocks of 256 B to 2 MiB (8 MiB), the pool served
 * 13,000 (24,000) of 100,000 replacements without that, 5,800 (14,600)
 * with it, and a replacement cost 689 (861) instructions against 613
 * (761), on simcuda past the pool's growth.  Below CUEMM__HEAP_LARGE, the
 * same reach held more on the CuPy array log of the corpus (1.49x its
 * live bytes against 1.46x), as blocks kept for their own class went to
 * the next one's requests. */
#define CUEMM__HEAP_EXACT ((size_t)16 << 10)

static inline uint64_t cuemm__heap_class(size_t size)
{
  if (size < CUEMM__HEAP_EXACT)
    return size >> 8;
  unsigned e = 63u - (unsigned)__builtin_clzll((unsigned long long)size);
  return 64u + ((uint64_t)(e - 14) << 3) + ((size >> (e - 3)) & 7u);
}

/* The largest size of size's class (size at least CUEMM__HEAP_EXACT). */
static inline size_t cuemm__heap_class_top(size_t size)
{
  unsigned e = 63u - (unsigned)__builtin_clzll((unsigned long long)size);
  size_t step = (size_t)1 << (e - 3);
  return (size | (step - 1));
}

static inline uint64_t cuemm__heap_binkey(uint32_t hs, size_t size)
{
  return ((uint64_t)(hs + 1) << 40) | cuemm__heap_class(size);
}

/* The bin of (hs, size), or NIL. */
static inline uint32_t cuemm__heap_bin(const cuemm__heap *h, uint32_t hs, size_t size)
{
  if (!h->bincap)
    return CUEMM__HEAP_NIL;
  uint64_t k = cuemm__heap_binkey(hs, size);
  for (size_t i = cuemm__heap_hash(k, h->bincap);; i = (i + 1) & (h->bincap - 1)) {
    if (h->bins[i].key == k)
      return (uint32_t)i;
    if (h->bins[i].key == 0)
      return CUEMM__HEAP_NIL;
  }
}

/* Takes cached block r off the heap's list of cached blocks. */
static inline void cuemm__heap_unlist(cuemm__heap *h, uint32_t r)
{
  cuemm__hblock *b = &h->b[r];
  if (b->older != CUEMM__HEAP_NIL)
    h->b[b->older].newer = b->newer;
  else
    h->oldest = b->newer;
  if (b->newer != CUEMM__HEAP_NIL)
    h->b[b->newer].older = b->older;
  else
    h->newest = b->older;
}

/* Takes the newest block of a bin (it must not be empty): it becomes LIVE on
 * stream `hs` with `req` bytes asked for.  The caller has checked that it
 * is large enough (a bin holds a size class). */
static inline __attribute__((always_inline)) uint32_t cuemm__heap_pop(cuemm__heap *h, uint32_t bin, uint32_t hs,
                                                                       size_t req);

#define CUEMM__HEAP_UNLISTED 0xffu

/* The slot i places after the oldest of a stream's large cached blocks
 * (i = 0: the oldest itself, never a hole). */
static inline uint32_t *cuemm__heap_large_at(cuemm__hstream *st, uint32_t i)
{
  return &st->large[(st->large0 + i) & (CUEMM__HEAP_LARGE_KEEP_MAX - 1)];
}

/* Record b (r) leaves its stream's list of large cached blocks.  Its slot
 * is known, so a block taken from the middle (a request took it: mostly a
 * recent one) leaves a hole and nothing is searched or moved; holes at
 * either end go at once, so the oldest is always in the first slot. */
static inline void cuemm__heap_large_drop(cuemm__hstream *st, cuemm__hblock *b)
{
  if (b->lpos == CUEMM__HEAP_UNLISTED)
    return; /* past the list's room */
  st->large[b->lpos] = CUEMM__HEAP_NIL;
  b->lpos = CUEMM__HEAP_UNLISTED;
  st->nlarge--;
  while (st->nspan && *cuemm__heap_large_at(st, st->nspan - 1) == CUEMM__HEAP_NIL)
    st->nspan--;
  while (st->nspan && *cuemm__heap_large_at(st, 0) == CUEMM__HEAP_NIL) {
    st->large0 = (st->large0 + 1) & (CUEMM__HEAP_LARGE_KEEP_MAX - 1);
    st->nspan--;
  }
}

/* Squeezes the holes out of a stream's full ring (heap.c). */
void cuemm__heap_large_compact(struct cuemm__heap *h, cuemm__hstream *st);

static inline void cuemm__heap_account_cached(cuemm__heap *h, uint32_t r, int sign)
{
  cuemm__hblock *b = &h->b[r];
  cuemm__hstream *st = &h->st[b->hs];
  if (b->size >= CUEMM__HEAP_LARGE) {
    /* Whoever caches one past the list's room evicts the oldest first
     * (cuemm__exchange_evict_large).  The per-thread default stream keeps
     * all its blocks: its list holds the first ones, and nothing reads it. */
    h->cached_large += (size_t)(ptrdiff_t)sign;
    if (sign < 0)
      cuemm__heap_large_drop(st, b);
    else if (st->nlarge < CUEMM__HEAP_LARGE_KEEP_MAX) {
      if (__builtin_expect(st->nspan == CUEMM__HEAP_LARGE_KEEP_MAX, 0))
        cuemm__heap_large_compact(h, st);
      uint32_t *slot = cuemm__heap_large_at(st, st->nspan++);
      *slot = r;
      b->lpos = (uint8_t)(slot - st->large);
      st->nlarge++;
    } else
      b->lpos = CUEMM__HEAP_UNLISTED;
  }
  if (sign > 0) {
    st->cached_count++;
    h->cached_bytes += b->size;
    h->cached_count++;
  } else {
    st->cached_count--;
    h->cached_bytes -= b->size;
    h->cached_count--;
  }
}

/* Record r, out of its bin and its lists, becomes LIVE on stream `hs` with
 * `req` bytes asked for: every way a request takes a cached block ends
 * here. */
static inline __attribute__((always_inline)) void cuemm__heap_mark_live(cuemm__heap *h, uint32_t r, uint32_t hs,
                                                                         size_t req)
{
  cuemm__hblock *b = &h->b[r];
  b->state = CUEMM__HB_LIVE;
  b->hs = hs;
  b->req = req;
  h->live_bytes += req;
  h->live_count++;
  h->allocs++;
}

/* Takes block r out of its bin (any position). */
static inline void cuemm__heap_unbin(cuemm__heap *h, uint32_t r)
{
  cuemm__hblock *b = &h->b[r];
  cuemm__hbin *bn = &h->bins[b->bin];
  if (b->prev != CUEMM__HEAP_NIL)
    h->b[b->prev].next = b->next;
  else
    bn->head = b->next;
  if (b->next != CUEMM__HEAP_NIL)
    h->b[b->next].prev = b->prev;
  else
    bn->tail = b->prev;
  cuemm__heap_unlist(h, r);
  cuemm__heap_account_cached(h, r, -1);
  b->prev = b->next = CUEMM__HEAP_NIL;
}

static inline __attribute__((always_inline)) uint32_t cuemm__heap_pop(cuemm__heap *h, uint32_t bin, uint32_t hs,
                                                                       size_t req)
{
  cuemm__hbin *bn = &h->bins[bin];
  uint32_t r = bn->head;
  cuemm__hblock *b = &h->b[r];
  bn->head = b->next;
  if (b->next != CUEMM__HEAP_NIL)
    h->b[b->next].prev = CUEMM__HEAP_NIL;
  else
    bn->tail = CUEMM__HEAP_NIL;
  cuemm__heap_unlist(h, r);
  cuemm__heap_account_cached(h, r, -1);
  cuemm__heap_mark_live(h, r, hs, req);
  return r;
}

/* Takes cached block r out of its bin (any position): it becomes LIVE on
 * stream `hs` with `req` bytes asked for. */
static inline void cuemm__heap_take(cuemm__heap *h, uint32_t r, uint32_t hs, size_t req)
{
  cuemm__heap_unbin(h, r);
  cuemm__heap_mark_live(h, r, hs, req);
}

/* How far into a bin a request looks past its head: the newest blocks
 * are those its stream freed last, the likeliest to be warm and of the
 * sizes now in use; a bin longer than this is a cache of one class, whose
 * deeper blocks the next requests of the class find once these are taken. */
#define CUEMM__HEAP_POP_FIT_LOOK 8

/* The smallest of the newest CUEMM__HEAP_POP_FIT_LOOK blocks of `bin` of rs
 * to `most` bytes (one of rs at once), or NIL. */
static inline uint32_t cuemm__heap_bin_fit(const cuemm__heap *h, uint32_t bin, size_t rs, size_t most)
{
  uint32_t best = CUEMM__HEAP_NIL;
  unsigned n = 0;
  for (uint32_t r = h->bins[bin].head; r != CUEMM__HEAP_NIL && n < CUEMM__HEAP_POP_FIT_LOOK; r = h->b[r].next, n++) {
    size_t size = h->b[r].size;
    if (size == rs)
      return r;
    if (size > rs && size <= most && (best == CUEMM__HEAP_NIL || size < h->b[best].size))
      best = r;
  }
  return best;
}

/* A block of bin `bin` (NIL: none) of stream hs of at least `rs` bytes,
 * taken as cuemm__heap_pop takes the head, when the head is not of size
 * rs: one of size rs among the newest few, else the smallest of them that
 * is large enough, else (from CUEMM__HEAP_LARGE up) the smallest of the
 * next class's newest few within an eighth of rs; NIL when none of them
 * is.  Inline: a request of a size drawn from a range (a server's
 * lengths, array code) comes here at about every other allocation. */
static inline uint32_t cuemm__heap_pop_fit(cuemm__heap *h, uint32_t bin, uint32_t hs, size_t rs, size_t req)
{
  uint32_t best = bin == CUEMM__HEAP_NIL ? CUEMM__HEAP_NIL : cuemm__heap_bin_fit(h, bin, rs, SIZE_MAX);
  if (best == CUEMM__HEAP_NIL && rs >= CUEMM__HEAP_LARGE) {
    /* A block of the next class within an eighth of rs: a request near
     * the top of its class finds few blocks above it in its own, and the
     * same waste is allowed across the boundary as within a class. */
    uint32_t up = cuemm__heap_bin(h, hs, cuemm__heap_class_top(rs) + 1);
    if (up != CUEMM__HEAP_NIL)
      best = cuemm__heap_bin_fit(h, up, rs, rs + (rs >> 3));
  }
  if (best == CUEMM__HEAP_NIL)
    return CUEMM__HEAP_NIL;
  cuemm__heap_take(h, best, hs, req);
  return best;
}

/* cuemm__heap_cache for a (stream, size) that has no bin yet. */
int cuemm__heap_cache_newbin(cuemm__heap *h, uint32_t r, uint32_t hs);

/* Links block r, whose state and stream are set, at the head of bin `bin`. */
static inline void cuemm__heap_link(cuemm__heap *h, uint32_t r, uint32_t bin)
{
  cuemm__hbin *bn = &h->bins[bin];
  cuemm__hblock *b = &h->b[r];
  b->bin = bin;
  b->prev = CUEMM__HEAP_NIL;
  b->next = bn->head;
  if (bn->head != CUEMM__HEAP_NIL)
    h->b[bn->head].prev = r;
  else
    bn->tail = r;
  bn->head = r;
  b->older = h->newest;
  b->newer = CUEMM__HEAP_NIL;
  if (h->newest != CUEMM__HEAP_NIL)
    h->b[h->newest].newer = r;
  else
    h->oldest = r;
  h->newest = r;
  cuemm__heap_account_cached(h, r, 1);
}

/* Makes LIVE block r CACHED on stream hs (numbered as that stream's next
 * free), at the head of its bin.  Returns 0; or -1, changing nothing, when
 * the bin does not exist and `make` is 0, or host memory for a new bin ran
 * out.  With `make` 0 it makes no call (the callers' inline fast path). */
static inline __attribute__((always_inline)) int cuemm__heap_cache_in(cuemm__heap *h, uint32_t r, uint32_t hs,
                                                                       int make)
{
  cuemm__hblock *b = &h->b[r];
  /* A block freed on the stream it came from goes back to the bin it was
   * taken from, which its record still names unless the bins were rebuilt
   * since (the key then differs): no hash lookup. */
  uint32_t bin = b->bin;
  if (bin >= h->bincap || h->bins[bin].key != cuemm__heap_binkey(hs, b->size))
    bin = cuemm__heap_bin(h, hs, b->size);
  if (bin == CUEMM__HEAP_NIL)
    return make ? cuemm__heap_cache_newbin(h, r, hs) : -1;
  h->live_bytes -= b->req;
  h->live_count--;
  h->frees++;
  b->state = CUEMM__HB_CACHED;
  b->hs = hs;
  b->seq = ++h->st[hs].freed;
  cuemm__heap_link(h, r, bin);
  return 0;
}

static inline __attribute__((always_inline)) int cuemm__heap_cache(cuemm__heap *h, uint32_t r, uint32_t hs)
{
  return cuemm__heap_cache_in(h, r, hs, 1);
}

/* Adds a stream; returns its index or NIL when host memory ran out. */
uint32_t cuemm__heap_add_stream(cuemm__heap *h, CUstream s);

/* Adds a record for a pool block (state LIVE on hs with `req` bytes, or
 * CACHED on hs when req is 0).  Returns its index or NIL when host memory
 * ran out (nothing changed). */
uint32_t cuemm__heap_insert(cuemm__heap *h, uintptr_t ptr, size_t size, uint32_t blk, uint32_t hs, size_t req);

/* Forgets record r (LIVE or already out of its bin): the block leaves the
 * heap. */
void cuemm__heap_remove(cuemm__heap *h, uint32_t r);

/* Checks the heap's invariants; NULL or the first violation. */
const char *cuemm__heap_check(const cuemm__heap *h);

#endif
