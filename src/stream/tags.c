/* tags.c: owns the pool's stream tags: a block freed on a stream
 * goes back to the pool tagged with that stream (cuemm__exchange_give_on, exchange.h)
 * and serves that stream at once; this file keeps the pool's table of
 * those streams and their events, makes their blocks idle once their work
 * is done (settle, the release threshold), picks a block from the pool for
 * a stream among its own, the idle and other streams' done ones (the
 * common case inline in tags.h, for the allocation's path in
 * exchange.c), and under CUEMM_STREAM_REUSE=internal lets a stream adopt
 * other streams' free space.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/internal.h"
#include "stream/tags.h"

/* A block freed on stream S goes back to the pool at once, although work
 * queued on S before the free may still use it: the pool tags it with S
 * (cuemm__sa_free_tagged), merges it with blocks freed on S and with idle
 * space beside it, and serves S's requests from it, which stream order
 * makes safe.  Other requests get it once an event recorded on S after the
 * free has completed (cuemm__tags_pick, when it would be their best fit;
 * cuemm__tags_settle, before the pool grows and past the release threshold).  The streams and their events are
 * kept as a heap keeps its own, in m->pstreams, under m's lock; a tag is a
 * stream's index there plus one.  The per-thread default stream never gets
 * a tag: only its own thread may record on it, so its blocks stay in that
 * thread's cache. */


static cuemm__heap *pool_streams(cuemm_manager *m)
{
  if (!m->pstreams) {
    cuemm__heap *ps = malloc(sizeof *ps);
    if (!ps)
      return NULL;
    cuemm__heap_init(ps, m, UINT32_MAX);
    m->pstreams = ps;
  }
  return m->pstreams;
}

/* The pool's stream table's place for a stream it has not met: a released
 * stream's place, once nothing of it is left, serves anew, so the table
 * stays as small as the streams in use.  NIL when host memory ran out. */
__attribute__((noinline)) uint32_t cuemm__tags_stream_add(cuemm_manager *m, CUstream stream)
{
  cuemm__heap *ps = pool_streams(m);
  if (!ps)
    return CUEMM__HEAP_NIL;
  for (uint32_t j = 0; j < ps->nst; j++)
    if (ps->st[j].retired && !ps->st[j].nbatch && !cuemm__pool_tag_bytes(m->pool, j + 1)) {
      memset(&ps->st[j], 0, sizeof ps->st[j]);
      ps->st[j].s = stream ? stream : CU_STREAM_LEGACY;
      cuemm__heap_forget_last(ps);
      return j;
    }
  return cuemm__heap_add_stream(ps, stream);
}

/* The settle hook: makes idle what the pool holds of streams whose work is
 * done.  m's lock held, context current. */
void cuemm__tags_settle(cuemm_manager *m, int synced)
{
  cuemm__heap *ps = m->pstreams;
  if (!ps)
    return;
  cuemm__pool *pool = m->pool;
  for (uint32_t k = 0; k < ps->nst && cuemm__pool_tagged_bytes(pool); k++) {
    cuemm__hstream *a = &ps->st[k];
    if (!cuemm__pool_tag_bytes(pool, k + 1))
      continue;
    if (synced) {
      cuemm__pool_untag(pool, k + 1, a->freed);
      continue;
    }
    cuemm__event_learn(m, ps, a, a->freed);
    if (a->done)
      cuemm__pool_untag(pool, k + 1, a->done);
  }
}

/* The release threshold covers the blocks freed on streams too: past it,
 * an event on each of their streams tells which are done; those become
 * idle, and what is then wholly free beyond the threshold is released.
 * Tried again only once another quarter of the threshold has been freed so
 * (the pool's stream table keeps the mark), so that a stream whose work
 * lags does not cost an event per free.  m's lock held. */
__attribute__((noinline)) void cuemm__tags_trim_now(cuemm_manager *m)
{
  cuemm__pool *pool = m->pool;
  cuemm__heap *ps = m->pstreams;
  if (!cuemm__pool_release_due(pool)) {
    ps->trim_mark = cuemm__pool_tagged_bytes(pool) + cuemm__pool_threshold(pool) / 4 + cuemm__pool_unit_bytes(pool);
    return;
  }
  cuemm__saved_error keep;
  cuemm__error_save(&keep);
  cuemm__ctx_guard g;
  if (cuemm__ctx_enter(m, &g) == CUDA_SUCCESS) {
    cuemm__tags_settle(m, 0);
    if (cuemm__pool_release_due(pool))
      cuemm__pool_release(pool, cuemm__pool_keep(pool));
    cuemm__ctx_leave(m, &g, CUDA_SUCCESS);
  }
  ps->trim_mark = cuemm__pool_tagged_bytes(pool) + cuemm__pool_threshold(pool) / 4 + cuemm__pool_unit_bytes(pool);
  cuemm__error_restore(&keep, CUDA_SUCCESS); /* the free succeeded either way */
}

/* Takes the best fit for `size` bytes among the pool's idle blocks, those
 * freed on the requesting stream (tag `own`), and those freed on other
 * streams whose work is done.  When another stream's block fits best, an
 * event tells whether its work is done: recorded on that stream if none
 * covers the free yet, then queried, never waited on by the host; with
 * `wait` (CUEMM_STREAM_REUSE=wait, or =internal where the pool would grow
 * otherwise) the requesting stream waits on it instead.  Its
 * stream's blocks that are done become idle (and merge) on the way.
 * Returns 0 with the block, or -1 when none fits (the caller's slow path
 * settles, reclaims, grows).  m's lock held. */
__attribute__((noinline)) int cuemm__tags_pick_across(cuemm_manager *m, size_t size, uint32_t own,
                                                         CUstream stream, int wait, uint32_t best, uintptr_t *ptr,
                                                         uint32_t *blk)
{
  cuemm__pool *pool = m->pool;
  cuemm__heap *ps = m->pstreams;
  size_t rs = cuemm__pool_round(size);
  uint64_t busy = 0; /* tags (the first 64) whose blocks this request found in use */
  int entered = 0, first = 1;
  cuemm__ctx_guard g;
  for (;; first = 0) {
    if (!first) /* the first round's is the caller's */
      best = cuemm__pool_fit_for(pool, rs, own);
    uint32_t bt = best != CUEMM__SA_NIL ? cuemm__pool_block_tag(pool, best) : 0;
    /* Other streams' blocks only when this stream's and the idle ones fit
     * badly (an eighth or more to spare) or not at all: asking an event for
     * every close fit would cost more than the fit saves. */
    int close = best != CUEMM__SA_NIL && cuemm__pool_block_size(pool, best) - rs < rs / 8;
    for (uint32_t t = 1; !close && ps && cuemm__pool_tagged_bytes(pool) && t <= ps->nst; t++) {
      if (t == own || t > 64 || (busy >> (t - 1) & 1))
        continue;
      size_t below = best == CUEMM__SA_NIL ? SIZE_MAX : cuemm__pool_block_size(pool, best);
      uint32_t c = cuemm__pool_fit_below(pool, rs, t, below);
      if (c != CUEMM__SA_NIL)
        best = c, bt = t;
    }
    if (best == CUEMM__SA_NIL || bt == 0 || bt == own)
      break;
    cuemm__hstream *a = &ps->st[bt - 1];
    uint64_t seq = cuemm__pool_block_word(pool, best);
    if (!entered && cuemm__ctx_enter(m, &g) == CUDA_SUCCESS)
      entered = 1;
    if (entered)
      cuemm__event_learn(m, ps, a, seq);
    if (a->done >= seq) {
      cuemm__pool_untag(pool, bt, a->done); /* idle now, merged: choose again */
      ps->steals++;
      continue;
    }
    if (entered && wait && a->covered >= seq) {
      unsigned i = 0;
      while (a->batch[i].seq < seq)
        i++;
      CUresult r = m->drv->StreamWaitEvent(stream ? stream : CU_STREAM_LEGACY, a->batch[i].ev, 0);
      if (r == CUDA_SUCCESS) {
        ps->event_waits++;
        ps->steals++;
        break;
      }
      cuemm__driver_error(r, "cuStreamWaitEvent(stream %p, the event of stream %p)", (void *)stream, (void *)a->s);
    }
    busy |= (uint64_t)1 << (bt - 1);
  }
  if (entered)
    cuemm__ctx_leave(m, &g, CUDA_SUCCESS);
  if (best == CUEMM__SA_NIL)
    return -1;
  *ptr = cuemm__pool_take_fit(pool, best, rs);
  *blk = best;
  return 0;
}

/* CUEMM_STREAM_REUSE=internal, where the pool would grow and no block of
 * another stream fits whole: the free space other streams left in the
 * pool lies in pieces of different streams, which do not merge while each
 * stream's work may still use its own.  The requesting stream waits on
 * each such stream's newest event, once one covers all that stream's
 * frees (recorded here where none does yet); stream order then makes that
 * stream's free space safe for it, and the space becomes its own (its tag,
 * numbered as a free on it now, so that other streams take it once an
 * event on it says so) and merges with its own and idle space.  A stream
 * known idle gives its space to all, without a wait.  It stops once a
 * block of `rs` bytes fits: the streams it did not reach keep their space,
 * and the requesting stream waits on no more of them than it needs (taking
 * every stream's at once held the corpus's 5-thread server at 1.68x its
 * live bytes with the GPU 16 allocations behind, 1.58x so).  Returns
 * whether any space moved; *own gets the requesting stream's tag.  m's
 * lock held. */
int cuemm__tags_adopt(cuemm_manager *m, CUstream stream, uint32_t *own, size_t rs)
{
  if (cuemm__event_own_only(stream) || !cuemm__pool_tagged_bytes(m->pool) ||
      cuemm__pool_tagged_bytes(m->pool) == cuemm__pool_tag_bytes(m->pool, *own))
    return 0;
  if (!*own) {
    uint32_t k = cuemm__tags_stream_add(m, stream);
    if (k == CUEMM__HEAP_NIL)
      return 0;
    *own = k + 1;
  }
  cuemm__heap *ps = m->pstreams;
  cuemm__ctx_guard g;
  if (cuemm__ctx_enter(m, &g) != CUDA_SUCCESS)
    return 0;
  int moved = 0;
  for (uint32_t t = 1; t <= ps->nst; t++) {
    if (moved && cuemm__pool_fit_for(m->pool, rs, *own) != CUEMM__SA_NIL)
      break; /* enough: the other streams keep theirs */
    if (t == *own || !cuemm__pool_tag_bytes(m->pool, t))
      continue;
    cuemm__hstream *a = &ps->st[t - 1];
    cuemm__event_learn(m, ps, a, a->freed);
    if (a->done >= a->freed) {
      moved |= cuemm__pool_untag(m->pool, t, a->done) != 0;
      continue;
    }
    if (a->covered < a->freed || !a->nbatch)
      continue;
    CUresult r = m->drv->StreamWaitEvent(stream ? stream : CU_STREAM_LEGACY, a->batch[a->nbatch - 1].ev, 0);
    if (r != CUDA_SUCCESS) {
      cuemm__driver_error(r, "cuStreamWaitEvent(stream %p, the event of stream %p)", (void *)stream, (void *)a->s);
      continue;
    }
    ps->event_waits++;
    cuemm__hstream *me = &ps->st[*own - 1];
    if (cuemm__pool_retag(m->pool, t, *own, me->freed + 1)) {
      me->freed++;
      ps->steals++;
      moved = 1;
    }
  }
  cuemm__ctx_leave(m, &g, CUDA_SUCCESS);
  return moved;
}
