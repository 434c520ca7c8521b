/* tags.h: the pool's stream tags (tags.c): the table of the
 * streams whose frees the pool holds, when their blocks become idle, and
 * the pick of a block for a stream.  The stream's tag and the pick's
 * common case are inline here: the allocation's path (exchange.c) runs
 * them on every request that reaches the pool.
 */
#ifndef CUEMM_STREAM_TAGS_H
#define CUEMM_STREAM_TAGS_H

#include "stream/heap.h"
#include "core/internal.h"
#include "stream/event.h"

/* The pool's stream table's place for a stream it has not met; NIL when
 * host memory ran out.  m's lock held. */
uint32_t cuemm__tags_stream_add(cuemm_manager *m, CUstream stream);

/* The settle hook (manager.h): makes idle what the pool holds of streams
 * whose work is done.  m's lock held, context current. */
void cuemm__tags_settle(cuemm_manager *m, int synced);

/* The release threshold's work once the blocks freed on streams passed
 * its mark (cuemm__exchange_trim_tagged, exchange.h): an event on each of their
 * streams, a release.  m's lock held. */
void cuemm__tags_trim_now(cuemm_manager *m);

/* The tag of `stream`'s blocks in the pool, 0 when it has none.  m's lock
 * held. */
static inline uint32_t cuemm__tags_tag(const cuemm_manager *m, CUstream stream)
{
  cuemm__heap *ps = m->pstreams;
  if (!ps || cuemm__event_own_only(stream))
    return 0;
  uint32_t k = cuemm__heap_stream(ps, stream);
  return k == CUEMM__HEAP_NIL ? 0 : k + 1;
}

/* Takes the best fit for `size` bytes among the pool's idle blocks, those
 * of tag `own`, and those of other streams whose work is done, asking
 * their events (`wait`: or making `stream` wait on one); `best`, the fit
 * among the first two.  0 with the block, -1 when none fits.  m's lock
 * held. */
int cuemm__tags_pick_across(cuemm_manager *m, size_t size, uint32_t own, CUstream stream, int wait, uint32_t best,
                                uintptr_t *ptr, uint32_t *blk);

/* The pick, its common case inline: the stream's own or an idle block
 * fits closely, or no other stream has blocks in the pool. */
static inline __attribute__((always_inline)) int cuemm__tags_pick(cuemm_manager *m, size_t size, uint32_t own,
                                                           CUstream stream, int wait, uintptr_t *ptr, uint32_t *blk)
{
  cuemm__pool *pool = m->pool;
  size_t rs = cuemm__pool_round(size);
  uint32_t best = cuemm__pool_fit_for(pool, rs, own);
  int close = best != CUEMM__SA_NIL && cuemm__pool_block_size(pool, best) - rs < rs / 8;
  if (!close && cuemm__pool_tagged_bytes(pool) > cuemm__pool_tag_bytes(pool, own))
    return cuemm__tags_pick_across(m, size, own, stream, wait, best, ptr, blk);
  if (best == CUEMM__SA_NIL)
    return -1;
  *ptr = cuemm__pool_take_fit(pool, best, rs);
  *blk = best;
  return 0;
}

/* CUEMM_STREAM_REUSE=internal, where the pool would grow and no block of
 * another stream fits whole: `stream` waits on other streams' events and
 * their free space becomes its own, until a block of `rs` bytes fits.
 * Returns whether any space moved; *own gets the stream's tag.  m's lock
 * held. */
int cuemm__tags_adopt(cuemm_manager *m, CUstream stream, uint32_t *own, size_t rs);

#endif
