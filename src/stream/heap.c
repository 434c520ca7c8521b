/* heap.c: owns the thread heap's tables (see heap.h): records, the pointer
 * map, bins and streams, their growth, and the invariant check the tests
 * run; and the other threads' side of the entry handshake: taking a heap
 * from its owner (cuemm__heap_lock, which takes the heap's mutex, raises
 * `want` and waits for `busy` to fall), giving it back
 * (cuemm__heap_unlock), and a new owner's adoption (cuemm__heap_own).
 * Those three are the only code here that takes a lock.  Nothing here is
 * on the fast path except through the inline calls of heap.h, and nothing
 * calls the driver.
 */
#include "stream/heap.h"
#include "base/internal.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* The most records a heap holds where they never move: the address space
 * is reserved once (256 MiB of it) and the system backs the pages used. */
#define FIXED_RECORDS ((uint32_t)1 << 22)

const char cuemm__heap_no_stream;

void cuemm__heap_init(cuemm__heap *h, struct cuemm_manager *m, uint32_t index)
{
  memset(h, 0, sizeof *h);
  cuemm__heap_forget_last(h); /* zero would name the first stream */
  atomic_init(&h->busy, 0);
  atomic_init(&h->want, 0);
  cuemm__lock_init(&h->mutex);
  atomic_init(&h->orphan, 0);
  h->m = m;
  h->index = index;
  h->spare = CUEMM__HEAP_NIL;
  h->newest = h->oldest = CUEMM__HEAP_NIL;
  h->owner = cuemm__fence_self();
  h->asym = (uint8_t)cuemm__fence_asymmetric();
  atomic_init(&h->pubmap, NULL);
  atomic_init(&h->rhead, CUEMM__HEAP_NIL);
}

void cuemm__heap_own(cuemm__heap *h)
{
  cuemm__lock_acquire(&h->mutex);
  /* A new owner starts as a new heap does: the last one's callers are gone. */
  h->owner = cuemm__fence_self();
  h->asym = (uint8_t)cuemm__fence_asymmetric();
  h->heavy = 0;
  atomic_fetch_and_explicit(&h->want, ~CUEMM__HEAP_WANT_FULL, memory_order_relaxed);
  cuemm__lock_release(&h->mutex);
}

void cuemm__heap_lock(cuemm__heap *h)
{
  cuemm__lock_acquire(&h->mutex);
  if (h->owner == cuemm__fence_self()) {
    /* The owner itself: not on its fast path, which is this thread.  Asked
     * to, it gives up the compiler barrier for a full fence here, where no
     * entry of its own is under way. */
    if (atomic_load_explicit(&h->want, memory_order_relaxed) & CUEMM__HEAP_WANT_FULL) {
      h->asym = 0;
      atomic_fetch_and_explicit(&h->want, ~CUEMM__HEAP_WANT_FULL, memory_order_relaxed);
    }
    cuemm__heap_drain_remote(h);
    return;
  }
  atomic_fetch_or_explicit(&h->want, CUEMM__HEAP_WANT_LOCK, memory_order_seq_cst);
  if (h->asym) {
    cuemm__fence_heavy();
    if (++h->heavy == CUEMM__HEAP_HEAVY_MAX)
      atomic_fetch_or_explicit(&h->want, CUEMM__HEAP_WANT_FULL, memory_order_relaxed);
  }
  /* The owner is at most a few dozen instructions from leaving, unless the
   * system took its processor away: then let it run. */
  for (unsigned spins = 0; atomic_load_explicit(&h->busy, memory_order_seq_cst); spins++)
    if (spins > 64)
      sched_yield();
  /* Whoever takes the heap finds no block freed by another thread still
   * waiting: every walk of its records sees LIVE blocks the program holds. */
  cuemm__heap_drain_remote(h);
}

void cuemm__heap_unlock(cuemm__heap *h)
{
  /* The owner raised no `want`; `owner` cannot change while the mutex is held. */
  if (h->owner != cuemm__fence_self())
    atomic_fetch_and_explicit(&h->want, ~CUEMM__HEAP_WANT_LOCK, memory_order_release);
  cuemm__lock_release(&h->mutex);
}

void cuemm__heap_fini(cuemm__heap *h)
{
  if (h->fixed)
    munmap(h->b, (size_t)FIXED_RECORDS * sizeof *h->b);
  else
    free(h->b);
  for (cuemm__hmap *hm = atomic_load_explicit(&h->pubmap, memory_order_relaxed), *older; hm; hm = older) {
    older = hm->older;
    free(hm);
  }
  atomic_store_explicit(&h->pubmap, NULL, memory_order_relaxed);
  h->fixed = 0;
  h->capb = h->nb = 0;
  free(h->bins);
  free(h->st);
  free(h->evcache);
  h->evcache = NULL;
  h->b = NULL;
  h->map = NULL;
  h->bins = NULL;
  h->st = NULL;
  cuemm__heap_forget_last(h);
}

uint32_t cuemm__heap_add_stream(cuemm__heap *h, CUstream s)
{
  if (!s)
    s = CU_STREAM_LEGACY;
  if (h->nst == h->capst) {
    uint32_t cap = h->capst ? h->capst * 2 : 4;
    cuemm__hstream *g = realloc(h->st, cap * sizeof *g);
    if (!g)
      return CUEMM__HEAP_NIL;
    h->st = g;
    h->capst = cap;
  }
  memset(&h->st[h->nst], 0, sizeof h->st[h->nst]);
  h->st[h->nst].s = s;
  h->last_s = s; /* the legacy stream's own handle: a later NULL looks it up once */
  return h->last = h->nst++;
}

static int map_grow(cuemm__heap *h)
{
  size_t cap = h->mapcap ? h->mapcap * 2 : 64;
  cuemm__hmap *hm = malloc(sizeof *hm + cap * sizeof hm->slot[0]);
  if (!hm)
    return -1;
  _Atomic uint32_t *map = hm->slot;
  hm->cap = cap;
  memset(map, 0xff, cap * sizeof *map);
  for (size_t i = 0; i < h->mapcap; i++) {
    uint32_t r = atomic_load_explicit(&h->map[i], memory_order_relaxed);
    if (r == CUEMM__HEAP_NIL)
      continue;
    size_t j = cuemm__heap_hash(cuemm__hb_ptr(&h->b[r]), cap);
    while (atomic_load_explicit(&map[j], memory_order_relaxed) != CUEMM__HEAP_NIL)
      j = (j + 1) & (cap - 1);
    atomic_store_explicit(&map[j], r, memory_order_relaxed);
  }
  /* The old map stays until the heap goes: a thread freeing one of its
   * blocks may be reading it.  Their sizes halve down the chain. */
  hm->older = atomic_load_explicit(&h->pubmap, memory_order_relaxed);
  atomic_store_explicit(&h->pubmap, hm, memory_order_release);
  h->map = map;
  h->mapcap = cap;
  return 0;
}

/* Room for records: fixed where the address space can be reserved, so that
 * another thread may read and hand back a record while the owner adds more;
 * else a growing array, and no other thread reads it without the lock. */
static int records_grow(cuemm__heap *h)
{
  if (!h->capb) {
    void *fixed = mmap(NULL, (size_t)FIXED_RECORDS * sizeof *h->b, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (fixed != MAP_FAILED) {
      h->b = fixed;
      h->capb = FIXED_RECORDS;
      h->fixed = 1;
      return 0;
    }
  }
  if (h->fixed)
    return -1; /* FIXED_RECORDS blocks in one heap: the rest go the pool's way */
  uint32_t cap = h->capb ? h->capb * 2 : 64;
  cuemm__hblock *g = realloc(h->b, cap * sizeof *g);
  if (!g)
    return -1;
  h->b = g;
  h->capb = cap;
  return 0;
}

static int bins_grow(cuemm__heap *h)
{
  /* Empty bins are dropped on the way: streams come and go, sizes vary, and
   * a bin costs nothing to make again. */
  size_t live = 0;
  for (size_t i = 0; i < h->bincap; i++)
    live += h->bins[i].key && h->bins[i].head != CUEMM__HEAP_NIL;
  size_t cap = 64;
  while ((live + 1) * 4 > cap)
    cap *= 2;
  cuemm__hbin *bins = calloc(cap, sizeof *bins);
  if (!bins)
    return -1;
  for (size_t i = 0; i < h->bincap; i++) {
    cuemm__hbin *o = &h->bins[i];
    if (!o->key || o->head == CUEMM__HEAP_NIL)
      continue;
    size_t j = cuemm__heap_hash(o->key, cap);
    while (bins[j].key)
      j = (j + 1) & (cap - 1);
    bins[j] = *o;
    for (uint32_t r = o->head; r != CUEMM__HEAP_NIL; r = h->b[r].next)
      h->b[r].bin = (uint32_t)j;
  }
  free(h->bins);
  h->bins = bins;
  h->bincap = cap;
  h->binused = live;
  return 0;
}

int cuemm__heap_cache_newbin(cuemm__heap *h, uint32_t r, uint32_t hs)
{
  /* At most half full: most lookups on the fast path miss (sizes the heap
   * does not keep), and a miss probes to the next empty slot. */
  if ((h->binused + 1) * 2 > h->bincap && bins_grow(h) != 0)
    return -1;
  uint64_t k = cuemm__heap_binkey(hs, h->b[r].size);
  size_t i = cuemm__heap_hash(k, h->bincap);
  while (h->bins[i].key && h->bins[i].key != k)
    i = (i + 1) & (h->bincap - 1);
  if (!h->bins[i].key) {
    h->bins[i] = (cuemm__hbin){ k, CUEMM__HEAP_NIL, CUEMM__HEAP_NIL };
    h->binused++;
  }
  return cuemm__heap_cache(h, r, hs);
}

uint32_t cuemm__heap_insert(cuemm__heap *h, uintptr_t ptr, size_t size, uint32_t blk, uint32_t hs, size_t req)
{
  /* At most a quarter full: every free looks here first, and one of a
   * block the pool holds (any over CUEMM__HEAP_LARGE_MAX) misses, probing
   * to the next empty slot (GPT-2 trace: 424 -> 421 instructions per
   * event against half full). */
  if ((h->mapused + 1) * 4 > h->mapcap && map_grow(h) != 0)
    return CUEMM__HEAP_NIL;
  uint32_t r = h->spare;
  if (r != CUEMM__HEAP_NIL)
    h->spare = h->b[r].next;
  else {
    if (h->nb + 1 >= h->capb && records_grow(h) != 0)
      return CUEMM__HEAP_NIL;
    if (h->nb == 0)
      h->nb = 1; /* record 0 stays unused, so that no valid index is 0 */
    r = h->nb++;
  }
  /* Field by field: another thread looking up a block may read `ptr` of
   * any record at any time (cuemm__heap_remote_free), never the rest of
   * one that is not its block's. */
  cuemm__hblock *b = &h->b[r];
  b->size = size;
  b->req = req;
  b->seq = 0;
  b->blk = blk;
  b->hs = hs;
  b->prev = b->next = b->bin = CUEMM__HEAP_NIL;
  b->older = b->newer = 0;
  b->state = CUEMM__HB_LIVE;
  b->uses = b->lpos = 0;
  atomic_store_explicit(&b->remote, 0, memory_order_relaxed);
  atomic_store_explicit(&b->ptr, ptr, memory_order_relaxed);
  size_t i = cuemm__heap_hash(ptr, h->mapcap);
  while (atomic_load_explicit(&h->map[i], memory_order_relaxed) != CUEMM__HEAP_NIL)
    i = (i + 1) & (h->mapcap - 1);
  atomic_store_explicit(&h->map[i], r, memory_order_relaxed);
  h->mapused++;
  h->live_bytes += req;
  h->live_count++;
  return r;
}

void cuemm__heap_remove(cuemm__heap *h, uint32_t r)
{
  cuemm__hblock *b = &h->b[r];
  if (b->state == CUEMM__HB_LIVE) {
    h->live_bytes -= b->req;
    h->live_count--;
  }
  /* Backward-shift deletion from the pointer map (no tombstones). */
  size_t mask = h->mapcap - 1, hole = cuemm__heap_hash(cuemm__hb_ptr(b), h->mapcap);
  while (atomic_load_explicit(&h->map[hole], memory_order_relaxed) != r)
    hole = (hole + 1) & mask;
  for (size_t j = (hole + 1) & mask; atomic_load_explicit(&h->map[j], memory_order_relaxed) != CUEMM__HEAP_NIL;
       j = (j + 1) & mask) {
    uint32_t rj = atomic_load_explicit(&h->map[j], memory_order_relaxed);
    size_t home = cuemm__heap_hash(cuemm__hb_ptr(&h->b[rj]), h->mapcap);
    if (((j - home) & mask) >= ((j - hole) & mask)) {
      atomic_store_explicit(&h->map[hole], rj, memory_order_relaxed);
      hole = j;
    }
  }
  atomic_store_explicit(&h->map[hole], CUEMM__HEAP_NIL, memory_order_relaxed);
  h->mapused--;
  b->state = CUEMM__HB_UNUSED;
  atomic_store_explicit(&b->ptr, 0, memory_order_relaxed);
  b->next = h->spare;
  h->spare = r;
}

int cuemm__heap_remote_free(cuemm__heap *h, uintptr_t p, CUstream stream, size_t *req)
{
  /* The owner may be adding and moving entries of the map meanwhile: an
   * entry missed is the general way's to find, and an entry found names a
   * record whose `ptr` says whether it is p's. */
  const cuemm__hmap *hm = h->fixed ? atomic_load_explicit(&h->pubmap, memory_order_acquire) : NULL;
  if (!hm)
    return 0;
  uint32_t r = CUEMM__HEAP_NIL;
  for (size_t i = cuemm__heap_hash(p, hm->cap), n = 0; n < hm->cap; i = (i + 1) & (hm->cap - 1), n++) {
    uint32_t c = atomic_load_explicit(&hm->slot[i], memory_order_relaxed);
    if (c == CUEMM__HEAP_NIL)
      break;
    if (c < FIXED_RECORDS && cuemm__hb_ptr(&h->b[c]) == p) {
      r = c;
      break;
    }
  }
  if (r == CUEMM__HEAP_NIL)
    return 0;
  /* p is the program's to free, so the owner changed nothing of its record
   * since the program got it: these reads are ordered by the program's own
   * hand-over of p. */
  cuemm__hblock *b = &h->b[r];
  if (b->state != CUEMM__HB_LIVE || b->uses || b->size >= CUEMM__HEAP_LARGE)
    return 0;
  uint8_t was = 0;
  if (!atomic_compare_exchange_strong_explicit(&b->remote, &was, 1, memory_order_acq_rel, memory_order_relaxed))
    return -1;
  *req = b->req;
  b->seq = (uint64_t)(uintptr_t)stream;
  uint32_t head = atomic_load_explicit(&h->rhead, memory_order_relaxed);
  do
    b->next = head;
  while (!atomic_compare_exchange_weak_explicit(&h->rhead, &head, r, memory_order_release, memory_order_relaxed));
  return 1;
}

void cuemm__heap_drain_remote_list(cuemm__heap *h)
{
  uint32_t r = atomic_exchange_explicit(&h->rhead, CUEMM__HEAP_NIL, memory_order_acquire), kept = CUEMM__HEAP_NIL;
  /* Newest first as pushed: cached oldest first, so that the last freed is
   * at its bin's head, as the owner's own frees leave it. */
  uint32_t rev = CUEMM__HEAP_NIL;
  while (r != CUEMM__HEAP_NIL) {
    uint32_t next = h->b[r].next;
    h->b[r].next = rev;
    rev = r;
    r = next;
  }
  r = rev;
  while (r != CUEMM__HEAP_NIL) {
    cuemm__hblock *b = &h->b[r];
    uint32_t next = b->next;
    CUstream s = (CUstream)(uintptr_t)b->seq;
    b->next = CUEMM__HEAP_NIL;
    uint32_t hs = cuemm__heap_stream(h, s);
    if (hs == CUEMM__HEAP_NIL)
      hs = cuemm__heap_add_stream(h, s);
    if (hs != CUEMM__HEAP_NIL && cuemm__heap_cache(h, r, hs) == 0)
      atomic_store_explicit(&b->remote, 0, memory_order_relaxed);
    else {
      b->next = kept; /* no host memory for a stream or a bin: it waits for the next drain */
      kept = r;
    }
    r = next;
  }
  while (kept != CUEMM__HEAP_NIL) {
    uint32_t next = h->b[kept].next, head = atomic_load_explicit(&h->rhead, memory_order_relaxed);
    do
      h->b[kept].next = head;
    while (!atomic_compare_exchange_weak_explicit(&h->rhead, &head, kept, memory_order_release,
                                                  memory_order_relaxed));
    kept = next;
  }
}

void cuemm__heap_large_compact(cuemm__heap *h, cuemm__hstream *st)
{
  uint32_t n = 0;
  for (uint32_t i = 0; i < st->nspan; i++) {
    uint32_t r = *cuemm__heap_large_at(st, i);
    if (r == CUEMM__HEAP_NIL)
      continue;
    uint32_t *slot = cuemm__heap_large_at(st, n++);
    *slot = r;
    h->b[r].lpos = (uint8_t)(slot - st->large);
  }
  st->nspan = n;
}

/* Every record in use, against the pointer map and the counters; *cached
 * is how many are cached, for the lists to be checked against. */
static const char *check_records(const cuemm__heap *h, size_t *cached_out)
{
  size_t live = 0, livebytes = 0, cached = 0, cachedbytes = 0, cachedlarge = 0, mapped = 0;
  for (uint32_t r = 1; r < h->nb; r++) {
    const cuemm__hblock *b = &h->b[r];
    if (b->state == CUEMM__HB_UNUSED)
      continue;
    mapped++;
    if (cuemm__heap_find(h, cuemm__hb_ptr(b)) != r)
      return "a record is not found through the pointer map";
    if (b->hs >= h->nst)
      return "a record names a stream the heap does not have";
    if (b->state == CUEMM__HB_LIVE) {
      live++;
      livebytes += b->req;
    } else {
      cached++;
      cachedbytes += b->size;
      cachedlarge += b->size >= CUEMM__HEAP_LARGE;
      if (b->bin >= h->bincap || h->bins[b->bin].key != cuemm__heap_binkey(b->hs, b->size))
        return "a cached block is in the wrong bin";
      if (b->seq == 0 || b->seq > h->st[b->hs].freed)
        return "a cached block's free number is out of range";
    }
  }
  if (mapped != h->mapused)
    return "the pointer map's count is wrong";
  if (live != h->live_count || livebytes != h->live_bytes)
    return "the live counters are wrong";
  if (cached != h->cached_count || cachedbytes != h->cached_bytes)
    return "the cached counters are wrong";
  if (cachedlarge != h->cached_large)
    return "the count of cached large blocks is wrong";
  *cached_out = cached;
  return NULL;
}

/* The bins' lists, which together hold the `cached` blocks. */
static const char *check_bins(const cuemm__heap *h, size_t cached)
{
  size_t inbins = 0;
  for (size_t i = 0; i < h->bincap; i++) {
    const cuemm__hbin *bn = &h->bins[i];
    if (!bn->key)
      continue;
    uint32_t prev = CUEMM__HEAP_NIL;
    for (uint32_t r = bn->head; r != CUEMM__HEAP_NIL; r = h->b[r].next) {
      if (h->b[r].state != CUEMM__HB_CACHED || h->b[r].prev != prev)
        return "a bin's list is broken";
      if (h->b[r].next == CUEMM__HEAP_NIL && bn->tail != r)
        return "a bin's tail is wrong";
      if (prev != CUEMM__HEAP_NIL && h->b[prev].seq < h->b[r].seq)
        return "a bin is not newest first";
      prev = r;
      inbins++;
    }
    if (bn->head == CUEMM__HEAP_NIL && bn->tail != CUEMM__HEAP_NIL)
      return "an empty bin has a tail";
  }
  if (inbins != cached)
    return "cached blocks and bin members differ";
  return NULL;
}

/* Stream k's ring of large cached blocks. */
static const char *check_large_list(const cuemm__heap *h, uint32_t k)
{
  const cuemm__hstream *st = &h->st[k];
  size_t large = 0;
  for (uint32_t r = 1; r < h->nb; r++)
    large += h->b[r].state == CUEMM__HB_CACHED && h->b[r].hs == k && h->b[r].size >= CUEMM__HEAP_LARGE;
  /* Fewer listed than cached only past the list's room (a stream that
   * evicts nothing: the per-thread default stream). */
  if (st->nlarge > CUEMM__HEAP_LARGE_KEEP_MAX || st->nlarge > large || st->nspan > CUEMM__HEAP_LARGE_KEEP_MAX ||
      st->nspan < st->nlarge)
    return "a stream's list of large cached blocks has too many";
  if (st->nspan && (st->large[st->large0 & (CUEMM__HEAP_LARGE_KEEP_MAX - 1)] == CUEMM__HEAP_NIL ||
                    st->large[(st->large0 + st->nspan - 1) & (CUEMM__HEAP_LARGE_KEEP_MAX - 1)] == CUEMM__HEAP_NIL))
    return "a stream's list of large cached blocks starts or ends with a hole";
  uint32_t listed = 0, prev = CUEMM__HEAP_NIL;
  for (uint32_t i = 0; i < st->nspan; i++) {
    uint32_t pos = (st->large0 + i) & (CUEMM__HEAP_LARGE_KEEP_MAX - 1), r = st->large[pos];
    if (r == CUEMM__HEAP_NIL)
      continue;
    const cuemm__hblock *b = &h->b[r];
    if (r == 0 || r >= h->nb || b->state != CUEMM__HB_CACHED || b->hs != k || b->size < CUEMM__HEAP_LARGE)
      return "a stream's list of large cached blocks names another block";
    if (b->lpos != pos)
      return "a large cached block does not know its slot";
    if (prev != CUEMM__HEAP_NIL && h->b[prev].seq >= b->seq)
      return "a stream's list of large cached blocks is not oldest first";
    prev = r;
    listed++;
  }
  if (listed != st->nlarge)
    return "a stream's list of large cached blocks holds another count";
  return NULL;
}

/* Every stream's ring, then every listed block's slot from the block's
 * side: a slot that names the block and a block that names the slot. */
static const char *check_large(const cuemm__heap *h)
{
  for (uint32_t k = 0; k < h->nst; k++) {
    const char *e = check_large_list(h, k);
    if (e)
      return e;
  }
  for (uint32_t r = 1; r < h->nb; r++) {
    const cuemm__hblock *b = &h->b[r];
    if (b->state == CUEMM__HB_CACHED && b->size >= CUEMM__HEAP_LARGE && b->lpos != CUEMM__HEAP_UNLISTED &&
        (b->hs >= h->nst || b->lpos >= CUEMM__HEAP_LARGE_KEEP_MAX || h->st[b->hs].large[b->lpos] != r))
      return "a large cached block names a slot that holds another";
  }
  return NULL;
}

/* The list of every cached block by the time it was freed, which holds the
 * `cached` blocks; the count bounds the walk should the list loop. */
static const char *check_age_list(const cuemm__heap *h, size_t cached)
{
  size_t listed = 0;
  for (uint32_t r = h->oldest, prev = CUEMM__HEAP_NIL; r != CUEMM__HEAP_NIL; prev = r, r = h->b[r].newer) {
    if (h->b[r].state != CUEMM__HB_CACHED || h->b[r].older != prev || ++listed > cached)
      return "the list of cached blocks is broken";
    if (h->b[r].newer == CUEMM__HEAP_NIL && h->newest != r)
      return "the list of cached blocks ends in the wrong place";
  }
  if (listed != cached)
    return "the list of cached blocks misses some";
  return NULL;
}

/* The streams' free numbers and their share of the cached blocks. */
static const char *check_streams(const cuemm__heap *h)
{
  size_t st_count = 0;
  for (uint32_t i = 0; i < h->nst; i++) {
    const cuemm__hstream *st = &h->st[i];
    st_count += st->cached_count;
    if (st->done > st->covered || st->covered > st->freed)
      return "a stream's free numbers are out of order";
  }
  if (st_count != h->cached_count)
    return "the streams' cached blocks do not add up";
  return NULL;
}

const char *cuemm__heap_check(const cuemm__heap *h)
{
  size_t cached = 0;
  const char *e;
  if ((e = check_records(h, &cached)) || (e = check_bins(h, cached)) || (e = check_large(h)) ||
      (e = check_age_list(h, cached)) || (e = check_streams(h)))
    return e;
  return NULL;
}
