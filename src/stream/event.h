/* event.h: the events of the stream-ordered path: which of a
 * stream's frees are known complete (event.c).  An event is
 * recorded on a stream only when another stream or the pool wants its
 * blocks, one for a batch of frees, and is queried, never waited on by the
 * host.
 */
#ifndef CUEMM_STREAM_EVENT_H
#define CUEMM_STREAM_EVENT_H

#include "stream/heap.h"
#include "core/internal.h"

static inline int cuemm__event_own_only(CUstream s)
{
  /* The per-thread default stream names a different stream on every thread:
   * only the heap's own thread may record on it. */
  return s == CU_STREAM_PER_THREAD;
}

/* Asks the driver which of stream a's recorded events have completed, and
 * moves its `done` forward.  Context current. */
CUresult cuemm__event_query(cuemm_manager *m, cuemm__heap *h, cuemm__hstream *a);

/* An idle event of the heap's cache, or a new one.  Context current. */
CUresult cuemm__event_get(cuemm_manager *m, cuemm__heap *h, CUevent *ev, const char *why);

/* Records one event on stream a covering every free on it so far.  Context
 * current; `a` must not be retired, and a per-thread stream only by its own
 * thread. */
CUresult cuemm__event_record(cuemm_manager *m, cuemm__heap *h, cuemm__hstream *a);

/* Finds out whether stream a's frees up to `upto` are complete, the
 * cheapest way the driver allows: its recorded events first; then, when
 * none covers them, whether the stream has no work left at all
 * (cuStreamQuery: every free on it so far is then complete, with no event);
 * else one event recorded for its frees so far, queried at once.  Returns
 * the first driver failure of the recorded events' queries (`done` then
 * stays); a failed record or idleness query only leaves `done` short.
 * Context current; the same conditions as cuemm__event_record. */
CUresult cuemm__event_learn(cuemm_manager *m, cuemm__heap *h, cuemm__hstream *a, uint64_t upto);

/* Destroys the heap's events (with `use_driver`); returns how many the
 * driver refused to destroy (leaked). */
size_t cuemm__event_drop_all(cuemm_manager *m, cuemm__heap *h, int use_driver);

/* cuemm_stream_release of `stream`, for h's live blocks that
 * cuemm_record_stream said it uses: an event recorded on it now stands for
 * its use from then on, so that the free waits on that event and never
 * names the stream, which may be destroyed by then.  All or none: on a
 * failure every use still names the stream.  Heap locked, the manager's
 * lock held, context current. */
CUresult cuemm__event_release_uses(cuemm_manager *m, cuemm__heap *h, CUstream stream);

/* Makes stream `freeing` wait for the streams cuemm_record_stream named
 * for record r of h.  Heap locked, owner's thread or the manager's lock
 * held. */
CUresult cuemm__event_wait_recorded(cuemm_manager *m, cuemm__heap *h, uint32_t r, CUstream freeing);

#endif
