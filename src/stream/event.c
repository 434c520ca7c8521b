/* event.c: owns the events of the stream-ordered path: asking
 * which recorded events have completed (a stream's `done`), recording one
 * event for a batch of frees, the heap's cache of idle events, and making
 * a stream wait for the streams cuemm_record_stream named.  The rule they
 * serve, and when an event is asked for, are stream.c's and exchange.c's.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/internal.h"
#include "stream/event.h"

/* Asks the driver which of stream a's recorded events have completed, and
 * moves its `done` forward.  Context current. */
CUresult cuemm__event_query(cuemm_manager *m, cuemm__heap *h, cuemm__hstream *a)
{
  unsigned k = 0;
  CUresult r = CUDA_SUCCESS;
  while (k < a->nbatch) {
    r = m->drv->EventQuery(a->batch[k].ev);
    if (r == CUDA_ERROR_NOT_READY) {
      r = CUDA_SUCCESS;
      break;
    }
    if (r != CUDA_SUCCESS) {
      cuemm__driver_error(r, "cuEventQuery (the event of a batch of frees on stream %p)", (void *)a->s);
      break;
    }
    a->done = a->batch[k].seq;
    h->evcache[h->nev++] = a->batch[k].ev;
    k++;
  }
  if (k) {
    memmove(a->batch, a->batch + k, (a->nbatch - k) * sizeof a->batch[0]);
    a->nbatch -= k;
  }
  return r;
}

/* An idle event of the heap's cache, or a new one (room made in the cache
 * first, so that it can always go back).  Context current. */
CUresult cuemm__event_get(cuemm_manager *m, cuemm__heap *h, CUevent *ev, const char *why)
{
  if (h->nev) {
    *ev = h->evcache[--h->nev];
    return CUDA_SUCCESS;
  }
  if (h->events_made == h->capev) {
    unsigned cap = h->capev ? h->capev * 2 : 8;
    CUevent *g = realloc(h->evcache, cap * sizeof *g);
    if (!g)
      return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "no host memory for an event (%s)", why);
    h->evcache = g;
    h->capev = cap;
  }
  CUresult r = m->drv->EventCreate(ev, CU_EVENT_DISABLE_TIMING);
  if (r != CUDA_SUCCESS)
    return cuemm__driver_error(r, "cuEventCreate (%s)", why);
  h->events_made++;
  return CUDA_SUCCESS;
}

/* Records one event on stream a covering every free on it so far.  Context
 * current; `a` must not be retired, and a per-thread stream only by its own
 * thread. */
CUresult cuemm__event_record(cuemm_manager *m, cuemm__heap *h, cuemm__hstream *a)
{
  if (a->covered == a->freed || a->nbatch == CUEMM__HEAP_BATCHES)
    return CUDA_SUCCESS;
  CUevent ev;
  CUresult r = cuemm__event_get(m, h, &ev, "for a batch of frees");
  if (r != CUDA_SUCCESS)
    return r;
  r = m->drv->EventRecord(ev, a->s);
  if (r != CUDA_SUCCESS) {
    h->evcache[h->nev++] = ev;
    return cuemm__driver_error(r, "cuEventRecord on stream %p (after %" PRIu64 " frees)", (void *)a->s,
                               a->freed - a->covered);
  }
  a->batch[a->nbatch++] = (cuemm__hbatch){ ev, a->freed };
  a->covered = a->freed;
  h->events_recorded++;
  return CUDA_SUCCESS;
}

/* A stream found busy is asked again only after this many learnings have
 * recorded events instead: in a program whose streams are always busy the
 * question costs a driver call on one take in this many + 1. */
#define IDLE_SKIP 8

/* Whether stream a has no work queued (so every free on it so far is
 * complete), asked only where that cannot disturb a capture: a stream being
 * captured must not be queried (the query would invalidate the capture),
 * nor the legacy stream while a blocking stream captures (the driver then
 * refuses cuStreamIsCapturing on it), nor another thread's per-thread
 * stream.  On yes, `done` and `covered` move to every free so far and the
 * recorded events go back to the cache. */
static int stream_idle(cuemm_manager *m, cuemm__heap *h, cuemm__hstream *a)
{
  if (a->idle_skip) {
    a->idle_skip--;
    return 0;
  }
  if (!m->drv->StreamQuery || !m->drv->StreamIsCapturing ||
      (cuemm__event_own_only(a->s) && h->owner != cuemm__fence_self()))
    return 0;
  CUstreamCaptureStatus cs;
  if (m->drv->StreamIsCapturing(a->s, &cs) != CUDA_SUCCESS || cs != CU_STREAM_CAPTURE_STATUS_NONE) {
    a->idle_skip = IDLE_SKIP;
    return 0;
  }
  uint64_t freed = a->freed; /* the frees queued before the question */
  if (m->drv->StreamQuery(a->s) != CUDA_SUCCESS) {
    a->idle_skip = IDLE_SKIP; /* busy (or a failure: an event decides) */
    return 0;
  }
  for (unsigned k = 0; k < a->nbatch; k++)
    h->evcache[h->nev++] = a->batch[k].ev;
  a->nbatch = 0;
  a->done = a->covered = freed;
  return 1;
}

CUresult cuemm__event_learn(cuemm_manager *m, cuemm__heap *h, cuemm__hstream *a, uint64_t upto)
{
#ifdef CUEMM_BREAK_DELAYED_FREE
  /* Only in the copy of the library tests/test-broken-rule.sh builds:
   * every free on the stream counts as done at once, so blocks freed on
   * one stream serve others while its work may still use them.  The suite
   * must catch that; a build where it does not proves nothing. */
  (void)m, (void)h, (void)upto;
  a->done = a->freed;
  return CUDA_SUCCESS;
#endif
  CUresult r = cuemm__event_query(m, h, a);
  if (r != CUDA_SUCCESS || a->done >= upto || a->retired || a->covered >= upto)
    return r;
  /* An event still pending says the stream is busy without asking. */
  if ((a->nbatch || !stream_idle(m, h, a)) && cuemm__event_record(m, h, a) == CUDA_SUCCESS)
    cuemm__event_query(m, h, a);
  return CUDA_SUCCESS;
}

CUresult cuemm__event_release_uses(cuemm_manager *m, cuemm__heap *h, CUstream stream)
{
  uint32_t n = 0;
  for (uint32_t i = 0; i < h->nuses; i++)
    n += h->uses[i].s == stream && !h->uses[i].ev;
  if (!n)
    return CUDA_SUCCESS;
  /* Every event is recorded before any use changes: a failure leaves the
   * uses naming the stream, which the caller keeps as it was. */
  CUevent *evs = malloc(n * sizeof *evs);
  if (!evs)
    return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "cuemm_stream_release: no host memory");
  CUresult r = CUDA_SUCCESS;
  uint32_t made = 0;
  while (made < n && r == CUDA_SUCCESS) {
    if ((r = cuemm__event_get(m, h, &evs[made], "for a released stream's use of a block")) != CUDA_SUCCESS)
      break;
    if ((r = m->drv->EventRecord(evs[made], stream)) != CUDA_SUCCESS) {
      cuemm__driver_error(r, "cuEventRecord on stream %p (released, named by cuemm_record_stream for a live "
                          "block)", (void *)stream);
      h->evcache[h->nev++] = evs[made];
      break;
    }
    made++;
  }
  if (r != CUDA_SUCCESS) {
    while (made)
      h->evcache[h->nev++] = evs[--made];
  } else {
    for (uint32_t i = 0; i < h->nuses; i++)
      if (h->uses[i].s == stream && !h->uses[i].ev)
        h->uses[i].ev = evs[--made];
  }
  free(evs);
  return r;
}

/* Destroys the heap's events (with `use_driver`); returns how many the
 * driver refused to destroy (leaked), the first failure's message kept. */
size_t cuemm__event_drop_all(cuemm_manager *m, cuemm__heap *h, int use_driver)
{
  size_t failed = 0;
  for (uint32_t k = 0; k < h->nst; k++) {
    cuemm__hstream *a = &h->st[k];
    for (unsigned i = 0; i < a->nbatch; i++)
      h->evcache[h->nev++] = a->batch[i].ev;
    a->nbatch = 0;
  }
  for (uint32_t i = 0; i < h->nuses; i++)
    if (h->uses[i].ev) {
      h->evcache[h->nev++] = h->uses[i].ev;
      h->uses[i].ev = NULL;
    }
  for (unsigned i = 0; use_driver && i < h->nev; i++) {
    CUresult r = m->drv->EventDestroy(h->evcache[i]);
    if (r != CUDA_SUCCESS && failed++ == 0)
      cuemm__driver_error(r, "cuEventDestroy");
  }
  h->nev = 0;
  return failed;
}

/* Before a block with streams named by cuemm_record_stream is cached on
 * `hs`: one event on each of those streams, and `hs` waits for them, so
 * stream order on `hs` covers their work too.  Heap locked, owner's thread
 * or the manager's lock held. */
CUresult cuemm__event_wait_recorded(cuemm_manager *m, cuemm__heap *h, uint32_t r, CUstream freeing)
{
  CUresult res = CUDA_SUCCESS;
  cuemm__ctx_guard g;
  if ((res = cuemm__ctx_enter(m, &g)) != CUDA_SUCCESS)
    return res;
  /* The per-thread default stream named by the heap's owner is another
   * stream in any other thread, which cannot record an event on it: a free
   * from another thread waits for the whole context instead (a fuzzed
   * sequence had a block reused while the owner's per-thread stream still
   * wrote it). */
  int foreign = h->owner != cuemm__fence_self();
  for (uint32_t i = 0; foreign && i < h->nuses; i++)
    if (h->uses[i].r == r && h->uses[i].s == CU_STREAM_PER_THREAD && !h->uses[i].ev) {
      if ((res = m->drv->CtxSynchronize()) != CUDA_SUCCESS) {
        cuemm__driver_error(res, "cuCtxSynchronize (for a block another thread's per-thread default stream used, "
                            "named by cuemm_record_stream)");
        return cuemm__ctx_leave(m, &g, res);
      }
      break;
    }
  /* A use is dropped once `freeing` waits for it; after a failure the
   * rest stay, so that the free, tried again, waits for them. */
  for (uint32_t i = 0; i < h->nuses;) {
    if (h->uses[i].r != r || res != CUDA_SUCCESS) {
      i++;
      continue;
    }
    if (h->uses[i].ev) { /* its stream was released: the event recorded then stands for it */
      if ((res = m->drv->StreamWaitEvent(freeing, h->uses[i].ev, 0)) != CUDA_SUCCESS) {
        cuemm__driver_error(res, "cuStreamWaitEvent(stream %p, the event of released stream %p)", (void *)freeing,
                            (void *)h->uses[i].s);
        continue;
      }
      h->event_waits++;
      h->evcache[h->nev++] = h->uses[i].ev;
      h->uses[i] = h->uses[--h->nuses];
      continue;
    }
    if (foreign && h->uses[i].s == CU_STREAM_PER_THREAD) {
      h->uses[i] = h->uses[--h->nuses]; /* the synchronization above covered it */
      continue;
    }
    CUevent ev;
    if ((res = cuemm__event_get(m, h, &ev, "for cuemm_record_stream")) != CUDA_SUCCESS)
      continue;
    if ((res = m->drv->EventRecord(ev, h->uses[i].s)) != CUDA_SUCCESS)
      cuemm__driver_error(res, "cuEventRecord on stream %p (named by cuemm_record_stream)", (void *)h->uses[i].s);
    else if ((res = m->drv->StreamWaitEvent(freeing, ev, 0)) != CUDA_SUCCESS)
      cuemm__driver_error(res, "cuStreamWaitEvent(stream %p, the event of stream %p)", (void *)freeing,
                          (void *)h->uses[i].s);
    else
      h->event_waits++;
    h->evcache[h->nev++] = ev; /* a wait takes the event's state when it is queued: reusable now */
    if (res == CUDA_SUCCESS)
      h->uses[i] = h->uses[--h->nuses];
  }
  if (res == CUDA_SUCCESS)
    h->b[r].uses = 0;
  return cuemm__ctx_leave(m, &g, res);
}
