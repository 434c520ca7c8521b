/* sim-stream.c: streams, events, the work queue and the ordering between
 * streams.
 *
 * Every asynchronous operation becomes a work item on its stream's FIFO.  Out
 * of queue mode the stream is run as soon as an item is added, so work
 * happens before the call returns.  In queue mode (SIMCUDA_QUEUE=1) items wait
 * until something synchronizes: cuStreamSynchronize, cuEventSynchronize on an
 * event recorded after them, cuCtxSynchronize, the calls that synchronize
 * implicitly on a real GPU (cuMemFree, the non-async copies and fills), or a
 * test stepping a stream with simcuda_stream_run.  That is what lets a test
 * see memory being reused while work on it is still pending: such work runs
 * late, exactly as it would on a GPU.
 *
 * Items carry their position in their stream, and each stream keeps a vector
 * clock of what its next item is ordered after: cuStreamWaitEvent joins the
 * clock the waited record was issued under, and the legacy default stream's
 * rules join the legacy stream into every blocking stream of its context and
 * the other way round.  Running an item first runs what those rules put
 * before it on other streams; simcuda_reuse_check compares pending items
 * against a stream's clock to tell a correct cross-stream reuse of memory
 * from an early one.
 *
 * Because queued work may outlive what it points at, each item is checked
 * again when it runs; a copy or fill whose memory is gone is skipped and
 * recorded as CUDA_ERROR_ILLEGAL_ADDRESS, which the next synchronization of
 * that stream returns (once: errors are not sticky here).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim-internal.h"

struct sim_event {
  struct sim_event *next;
  struct sim_ctx *ctx;
  unsigned flags;
  unsigned long long rec_seq;     /* records issued */
  unsigned long long done_seq;    /* newest record that has run */
  struct sim_point rec;           /* where the latest record sits; stream 0: never recorded */
  struct sim_clock rec_clock;     /* what the latest record is ordered after */
  struct timespec when;
};

static struct sim_stream *stream_list;
static struct sim_event *event_list;
static unsigned long long stream_next_id;
/* Nesting of run_one: destroyed streams are reaped only outside it. */
static int run_depth;

/* ---- vector clocks ---- */

static unsigned long long clock_get(const struct sim_clock *c, unsigned long long id)
{
  for (size_t i = 0; i < c->n; i++)
    if (c->p[i].stream == id)
      return c->p[i].seq;
  return 0;
}

/* Out of memory loses the point, which can only make a later reuse check
 * report too much, never too little. */
static void clock_raise(struct sim_clock *c, unsigned long long id, unsigned long long seq)
{
  if (seq == 0)
    return;
  for (size_t i = 0; i < c->n; i++)
    if (c->p[i].stream == id) {
      if (c->p[i].seq < seq)
        c->p[i].seq = seq;
      return;
    }
  if (c->n == c->cap) {
    size_t cap = c->cap ? 2 * c->cap : 4;
    struct sim_point *p = realloc(c->p, cap * sizeof *p);
    if (!p)
      return;
    c->p = p;
    c->cap = cap;
  }
  c->p[c->n].stream = id;
  c->p[c->n].seq = seq;
  c->n++;
}

static void clock_join(struct sim_clock *c, const struct sim_clock *o)
{
  for (size_t i = 0; i < o->n; i++)
    clock_raise(c, o->p[i].stream, o->p[i].seq);
}

/* Ids are never reused, so a gone stream's points only take room. */
static void clock_forget(struct sim_clock *c, unsigned long long id)
{
  for (size_t i = 0; i < c->n; i++)
    if (c->p[i].stream == id) {
      c->p[i] = c->p[--c->n];
      return;
    }
}

static void clock_free(struct sim_clock *c)
{
  free(c->p);
  c->p = NULL;
  c->n = c->cap = 0;
}

/* ---- registry ---- */

struct sim_stream *sim_stream_new(struct sim_ctx *ctx, unsigned flags, int is_null)
{
  struct sim_stream *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  s->ctx = ctx;
  s->id = ++stream_next_id;
  s->flags = flags;
  s->is_null = is_null;
  s->next = stream_list;
  stream_list = s;
  return s;
}

static int is_legacy(const struct sim_stream *s) { return s->is_null && !s->per_thread; }
static int is_blocking(const struct sim_stream *s) { return !(s->flags & CU_STREAM_NON_BLOCKING); }

/* Streams cuStreamDestroy'ed whose work has all run, and destroyed
 * events: their memory is kept and their handles never handed out again,
 * so that a later call naming one is told apart from a wrong handle. */
static void **graveyard;
static size_t ngrave, capgrave;

/* Keeps x's memory as a dead handle; 0 when there is no room (the caller
 * frees it, and its handle may come back: a later use goes unseen). */
static int bury(void *x)
{
  if (ngrave == capgrave) {
    size_t cap = capgrave ? capgrave * 2 : 64;
    void **g = realloc(graveyard, cap * sizeof *g);
    if (!g)
      return 0;
    graveyard = g;
    capgrave = cap;
  }
  graveyard[ngrave++] = x;
  return 1;
}

static int buried(const void *h)
{
  for (size_t i = 0; i < ngrave; i++)
    if (graveyard[i] == h)
      return 1;
  return 0;
}

/* A call named a destroyed stream or event.  The real driver's behaviour
 * is then undefined: it crashed in cuStreamIsCapturing on such a stream,
 * where an error code would let a test pass.  So the simulator stops the
 * program, naming the call, unless SIMCUDA_DEAD_HANDLES=error asks for
 * the error. */
static void dead_handle(const char *kind, const void *h)
{
  const char *e = getenv("SIMCUDA_DEAD_HANDLES"); /* read here: a test turns it on and off */
  if (e && strcmp(e, "error") == 0)
    return;
  fprintf(stderr, "simcuda: %s named %s %p after its destruction; the real driver's behaviour is undefined there "
          "(it may crash), so the simulator stops (SIMCUDA_DEAD_HANDLES=error returns CUDA_ERROR_INVALID_HANDLE "
          "instead)\n", sim_current_entry(), kind, h);
  fflush(stderr);
  abort();
}

static struct sim_stream *stream_find(CUstream h)
{
  for (struct sim_stream *s = stream_list; s; s = s->next)
    if ((CUstream)s == h && !s->is_null) {
      if (!s->destroyed)
        return s;
      dead_handle("stream", h);
      return NULL;
    }
  if (buried(h))
    dead_handle("stream", h);
  return NULL;
}

/* Destroyed streams included: their queued work still runs. */
static struct sim_stream *stream_by_id(unsigned long long id)
{
  for (struct sim_stream *s = stream_list; s; s = s->next)
    if (s->id == id)
      return s;
  return NULL;
}

/* The per-thread default stream is a stream of its own for each thread and
 * context.  A thread that exits leaves it to its context, which frees it when
 * destroyed; a later thread given the same pthread_t inherits it, which no
 * ordering a live thread can observe tells apart from a fresh one. */
static struct sim_stream *per_thread_stream(struct sim_ctx *c)
{
  pthread_t self = pthread_self();
  for (struct sim_stream *s = stream_list; s; s = s->next)
    if (s->per_thread && s->ctx == c && pthread_equal(s->owner, self))
      return s;
  struct sim_stream *s = sim_stream_new(c, 0, 1);
  if (s) {
    s->per_thread = 1;
    s->owner = self;
  }
  return s;
}

struct sim_stream *sim_stream_resolve(CUstream h, CUresult *err)
{
  if (h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
    struct sim_ctx *c = sim_ctx_current(err);
    if (!c)
      return NULL;
    struct sim_stream *s = c->null_stream && h == CU_STREAM_PER_THREAD ? per_thread_stream(c) : c->null_stream;
    if (!s) {
      *err = CUDA_ERROR_OUT_OF_MEMORY;
      return NULL;
    }
    return s;
  }
  struct sim_stream *s = stream_find(h);
  *err = s ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
  return s;
}

static struct sim_event *event_find(CUevent h)
{
  for (struct sim_event *e = event_list; e; e = e->next)
    if ((CUevent)e == h)
      return e;
  if (buried(h))
    dead_handle("event", h);
  return NULL;
}

size_t sim_stream_live(void)
{
  size_t n = 0;
  for (struct sim_stream *s = stream_list; s; s = s->next)
    n += !s->is_null && !s->destroyed;
  return n;
}

size_t sim_event_live(void)
{
  size_t n = 0;
  for (struct sim_event *e = event_list; e; e = e->next)
    n++;
  return n;
}

size_t sim_queued_total(void)
{
  size_t n = 0;
  for (struct sim_stream *s = stream_list; s; s = s->next)
    n += s->queued;
  return n;
}

void sim_stream_report(FILE *f)
{
  for (struct sim_stream *s = stream_list; s; s = s->next)
    if (!s->is_null && !s->destroyed)
      fprintf(f, "simcuda:   stream %p device %d, %zu item%s queued\n", (void *)s, s->ctx->dev, s->queued,
              s->queued == 1 ? "" : "s");
  for (struct sim_event *e = event_list; e; e = e->next)
    fprintf(f, "simcuda:   event %p device %d\n", (void *)e, e->ctx->dev);
}

/* ---- ordering ---- */

static void work_add_dep(struct sim_work *w, unsigned long long id, unsigned long long seq)
{
  struct sim_point *d = realloc(w->deps, (w->ndeps + 1) * sizeof *d);
  if (!d)
    return;
  d[w->ndeps].stream = id;
  d[w->ndeps].seq = seq;
  w->deps = d;
  w->ndeps++;
}

/* The legacy default stream's rules for a new item on s: on the legacy
 * stream it comes after all work already queued on the blocking streams of
 * its context (the per-thread default streams included); on a blocking
 * stream, after all work already queued on the legacy stream.  Non-blocking
 * streams are outside this.  Joins that into *clock; with w, also lists as
 * w's dependencies the streams whose such work has not all run yet. */
static void legacy_order(const struct sim_stream *s, struct sim_clock *clock, struct sim_work *w)
{
  if (!is_blocking(s))
    return;
  for (struct sim_stream *t = stream_list; t; t = t->next) {
    if (t == s || t->ctx != s->ctx || !is_blocking(t) || t->last_pos == 0)
      continue;
    if (!is_legacy(s) && !is_legacy(t))
      continue;
    clock_join(clock, &t->clock);
    clock_raise(clock, t->id, t->last_pos);
    if (w && t->done_pos < t->last_pos)
      work_add_dep(w, t->id, t->last_pos);
  }
}

/* ---- running work ---- */

static void run_one(struct sim_stream *s);

/* Runs the stream named `id` until its item at position `seq` has run. */
static void run_through(unsigned long long id, unsigned long long seq)
{
  struct sim_stream *t;
  while ((t = stream_by_id(id)) && t->done_pos < seq && t->head)
    run_one(t);
}

static CUresult work_run(struct sim_stream *s, struct sim_work *w)
{
  int dev = s->ctx->dev;
  switch (w->kind) {
  case SIM_W_MEMSET: {
    size_t bytes = w->count * (size_t)w->elem;
    if (sim_check_device_range(w->dst, bytes, 1, dev) != CUDA_SUCCESS)
      return CUDA_ERROR_ILLEGAL_ADDRESS;
    if (w->elem == 1) {
      memset((void *)w->dst, (int)(w->value & 0xff), w->count);
    } else if (w->elem == 2) {
      uint16_t v = (uint16_t)w->value, *p = (uint16_t *)w->dst;
      for (size_t i = 0; i < w->count; i++)
        p[i] = v;
    } else {
      uint32_t v = w->value, *p = (uint32_t *)w->dst;
      for (size_t i = 0; i < w->count; i++)
        p[i] = v;
    }
    return CUDA_SUCCESS;
  }
  case SIM_W_MEMCPY:
    if (w->dst_dev != -2 && sim_check_device_range(w->dst, w->count, 1, dev) != CUDA_SUCCESS)
      return CUDA_ERROR_ILLEGAL_ADDRESS;
    if (w->src_dev != -2 && sim_check_device_range(w->src, w->count, 0, dev) != CUDA_SUCCESS)
      return CUDA_ERROR_ILLEGAL_ADDRESS;
    memmove((void *)w->dst, (const void *)w->src, w->count);
    return CUDA_SUCCESS;
  case SIM_W_HOSTFN:
    w->fn(w->user);
    return CUDA_SUCCESS;
  case SIM_W_RECORD:
    if (w->event && w->event->done_seq < w->seq) {
      w->event->done_seq = w->seq;
      clock_gettime(CLOCK_MONOTONIC, &w->event->when);
    }
    return CUDA_SUCCESS;
  case SIM_W_WAIT:
    run_through(w->wait.stream, w->wait.seq);
    return CUDA_SUCCESS;
  case SIM_W_FREE:
    for (struct sim_region *r = sim_region_first(); r; r = r->next)
      if (r->kind == SIM_R_DEVICE && r->base == w->dst && r->buffer_id == w->seq) {
        sim_device_free(r);
        return CUDA_SUCCESS;
      }
    return CUDA_ERROR_ILLEGAL_ADDRESS;
  }
  return CUDA_ERROR_UNKNOWN;
}

/* Pops before running so that work which calls back into the driver (a host
 * function) sees a consistent queue.  What the legacy rules put before the
 * item runs first; it was all queued before the item, so it never needs the
 * item's own stream to advance. */
static void run_one(struct sim_stream *s)
{
  struct sim_work *w = s->head;
  s->head = w->next;
  if (!s->head)
    s->tail = NULL;
  s->queued--;
  run_depth++;
  for (size_t i = 0; i < w->ndeps; i++)
    run_through(w->deps[i].stream, w->deps[i].seq);
  CUresult r = work_run(s, w);
  run_depth--;
  s->done_pos = w->pos;
  if (r != CUDA_SUCCESS && s->error == CUDA_SUCCESS)
    s->error = r;
  free(w->deps);
  free(w);
}

static void run_all(struct sim_stream *s)
{
  while (s->head)
    run_one(s);
}

static void stream_free(struct sim_stream *s);

/* Destroyed streams whose work has all run; only outside run_one, whose
 * callers still hold the stream. */
static void reap(void)
{
  if (run_depth)
    return;
  for (struct sim_stream *s = stream_list, *next; s; s = next) {
    next = s->next;
    if (s->destroyed && !s->head)
      stream_free(s);
  }
}

/* Appends w to s, placing it in s's order and the legacy rules'; returns
 * its position. */
static unsigned long long enqueue(struct sim_stream *s, struct sim_work *w)
{
  legacy_order(s, &s->clock, w);
  w->pos = ++s->last_pos;
  w->next = NULL;
  if (s->tail)
    s->tail->next = w;
  else
    s->head = w;
  s->tail = w;
  s->queued++;
  return w->pos;
}

void sim_stream_submit(struct sim_stream *s, struct sim_work *w)
{
  reap();
  enqueue(s, w);
  if (!sim_queue_mode)
    run_all(s);
}

CUresult sim_stream_drain(struct sim_stream *s)
{
  run_all(s);
  CUresult r = s->error;
  s->error = CUDA_SUCCESS;
  return r;
}

static int eligible(const struct sim_stream *s, const struct sim_ctx *ctx, int dev, int blocking_only)
{
  if (ctx && s->ctx != ctx)
    return 0;
  if (dev >= 0 && s->ctx->dev != dev)
    return 0;
  return !(blocking_only && !s->is_null && (s->flags & CU_STREAM_NON_BLOCKING));
}

/* Streams may be created or destroyed by host functions run on the way, so
 * the registry is searched afresh after each stream is run.  `clear`: also
 * collect and clear the streams' recorded errors (an explicit
 * synchronization); the implicit ones leave them for the next. */
static CUresult drain_matching(struct sim_ctx *ctx, int dev, int blocking_only, int clear)
{
  for (;;) {
    struct sim_stream *s = stream_list;
    while (s && !(s->head && eligible(s, ctx, dev, blocking_only)))
      s = s->next;
    if (!s)
      break;
    run_all(s);
  }
  CUresult first = CUDA_SUCCESS;
  if (clear)
    for (struct sim_stream *s = stream_list; s; s = s->next)
      if (eligible(s, ctx, dev, blocking_only) && s->error != CUDA_SUCCESS) {
        if (first == CUDA_SUCCESS)
          first = s->error;
        s->error = CUDA_SUCCESS;
      }
  reap();
  return first;
}

CUresult sim_ctx_drain(struct sim_ctx *ctx, int blocking_only) { return drain_matching(ctx, -1, blocking_only, 1); }
void sim_ctx_run(struct sim_ctx *ctx, int blocking_only) { drain_matching(ctx, -1, blocking_only, 0); }
void sim_device_run(int dev) { drain_matching(NULL, dev, 0, 0); }

static void forget_event(struct sim_event *e)
{
  for (struct sim_stream *s = stream_list; s; s = s->next)
    for (struct sim_work *w = s->head; w; w = w->next)
      if (w->event == e)
        w->event = NULL;
}

static void stream_free(struct sim_stream *s)
{
  run_all(s);
  for (struct sim_stream **p = &stream_list; *p; p = &(*p)->next)
    if (*p == s) {
      *p = s->next;
      break;
    }
  for (struct sim_stream *t = stream_list; t; t = t->next)
    clock_forget(&t->clock, s->id);
  for (struct sim_event *e = event_list; e; e = e->next)
    clock_forget(&e->rec_clock, s->id);
  clock_free(&s->clock);
  if (!bury(s))
    free(s);
}

static void event_free(struct sim_event *e)
{
  forget_event(e);
  for (struct sim_event **p = &event_list; *p; p = &(*p)->next)
    if (*p == e) {
      *p = e->next;
      break;
    }
  clock_free(&e->rec_clock);
  if (!bury(e))
    free(e);
}

void sim_ctx_release_objects(struct sim_ctx *ctx)
{
  for (;;) {
    struct sim_stream *s = stream_list;
    while (s && s->ctx != ctx)
      s = s->next;
    if (!s)
      break;
    stream_free(s);
  }
  for (struct sim_event *e = event_list, *next; e; e = next) {
    next = e->next;
    if (e->ctx == ctx)
      event_free(e);
  }
}

/* ---- streams ---- */

static CUresult stream_create(CUstream *ph, unsigned flags)
{
  if (!ph)
    return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~(unsigned)CU_STREAM_NON_BLOCKING)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r;
  struct sim_ctx *c = sim_ctx_current(&r);
  if (!c)
    return r;
  reap();
  struct sim_stream *s = sim_stream_new(c, flags, 0);
  if (!s)
    return CUDA_ERROR_OUT_OF_MEMORY;
  *ph = (CUstream)s;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
  SIM_BEGIN(cuStreamCreate);
  return SIM_END(stream_create(phStream, Flags));
}

/* As with the real driver, work queued on the stream still runs after
 * cuStreamDestroy returns: the handle is dead at once, the stream lives on
 * (out of the live count) until a synchronization, an event or a wait on
 * another stream has run its last item, and events recorded on it complete
 * then. */
static CUresult stream_destroy(CUstream h)
{
  struct sim_stream *s = h ? stream_find(h) : NULL;
  if (!s)
    return CUDA_ERROR_INVALID_HANDLE;
  s->destroyed = 1;
  reap();
  return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamDestroy(CUstream hStream)
{
  SIM_BEGIN(cuStreamDestroy);
  return SIM_END(stream_destroy(hStream));
}

static CUresult stream_sync(CUstream h)
{
  CUresult r;
  struct sim_stream *s = sim_stream_resolve(h, &r);
  if (!s)
    return r;
  return sim_stream_drain(s);
}

SIM_API CUresult cuStreamSynchronize(CUstream hStream)
{
  SIM_BEGIN(cuStreamSynchronize);
  return SIM_END(stream_sync(hStream));
}

/* Whether a blocking stream of the legacy stream's context is capturing:
 * the legacy stream is then unusable, as the driver has it. */
static int legacy_blocked(const struct sim_stream *s)
{
  if (!s->is_null || s->per_thread)
    return 0;
  for (const struct sim_stream *o = stream_list; o; o = o->next)
    if (o->ctx == s->ctx && o->capturing && !(o->flags & CU_STREAM_NON_BLOCKING))
      return 1;
  return 0;
}

/* A query of a capturing stream is illegal and invalidates its capture, as
 * the driver's is; the legacy stream's invalidates the blocking streams'. */
static CUresult stream_query(CUstream h)
{
  CUresult r;
  struct sim_stream *s = sim_stream_resolve(h, &r);
  if (!s)
    return r;
  if (s->capturing || legacy_blocked(s)) {
    for (struct sim_stream *o = stream_list; o; o = o->next)
      if (o == s || (o->ctx == s->ctx && o->capturing && !(o->flags & CU_STREAM_NON_BLOCKING) && s->is_null))
        o->capturing = o->capturing ? 2 : 0;
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  return s->queued ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

static CUresult stream_is_capturing(CUstream h, CUstreamCaptureStatus *status)
{
  if (!status)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r;
  struct sim_stream *s = sim_stream_resolve(h, &r);
  if (!s)
    return r;
  if (legacy_blocked(s))
    return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  *status = s->capturing == 2 ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
            : s->capturing    ? CU_STREAM_CAPTURE_STATUS_ACTIVE
                              : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
  SIM_BEGIN(cuStreamIsCapturing);
  return SIM_END(stream_is_capturing(hStream, captureStatus));
}

SIM_API CUresult cuStreamQuery(CUstream hStream)
{
  SIM_BEGIN(cuStreamQuery);
  return SIM_END(stream_query(hStream));
}

static CUresult stream_get_ctx(CUstream h, CUcontext *pctx, CUgreenCtx *pgreen)
{
  if (!pctx)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r;
  struct sim_stream *s = sim_stream_resolve(h, &r);
  if (!s)
    return r;
  *pctx = (CUcontext)s->ctx;
  if (pgreen)
    *pgreen = NULL;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamGetCtx(CUstream hStream, CUcontext *pctx)
{
  SIM_BEGIN(cuStreamGetCtx);
  return SIM_END(stream_get_ctx(hStream, pctx, NULL));
}

/* What cuGetProcAddress hands out for "cuStreamGetCtx" from 12.5 on. */
SIM_API CUresult cuStreamGetCtx_v2(CUstream hStream, CUcontext *pCtx, CUgreenCtx *pGreenCtx)
{
  SIM_BEGIN(cuStreamGetCtx);
  return SIM_END(pGreenCtx ? stream_get_ctx(hStream, pCtx, pGreenCtx) : CUDA_ERROR_INVALID_VALUE);
}

static CUresult stream_get_flags(CUstream h, unsigned *flags)
{
  if (!flags)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r;
  struct sim_stream *s = sim_stream_resolve(h, &r);
  if (!s)
    return r;
  *flags = s->flags;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamGetFlags(CUstream hStream, unsigned int *flags)
{
  SIM_BEGIN(cuStreamGetFlags);
  return SIM_END(stream_get_flags(hStream, flags));
}

/* Stream capture is not simulated: the thread's capture mode is kept, so
 * that a caller's exchanges can be checked (the first exchange finds
 * CU_STREAM_CAPTURE_MODE_GLOBAL, the driver's default). */
static _Thread_local CUstreamCaptureMode capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

static CUresult exchange_capture_mode(CUstreamCaptureMode *mode)
{
  if (!mode || (*mode != CU_STREAM_CAPTURE_MODE_GLOBAL && *mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
                *mode != CU_STREAM_CAPTURE_MODE_RELAXED))
    return CUDA_ERROR_INVALID_VALUE;
  CUstreamCaptureMode old = capture_mode;
  capture_mode = *mode;
  *mode = old;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
  SIM_BEGIN(cuThreadExchangeStreamCaptureMode);
  return SIM_END(exchange_capture_mode(mode));
}

static struct sim_work *work_new(enum sim_work_kind kind)
{
  struct sim_work *w = calloc(1, sizeof *w);
  if (w)
    w->kind = kind;
  return w;
}

/* The wait takes the event's latest record as of this call, as the driver
 * does; a record already run (or none at all) leaves nothing to wait for. */
static CUresult stream_wait_event(CUstream h, CUevent eh, unsigned flags)
{
  if (flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r;
  struct sim_stream *s = sim_stream_resolve(h, &r);
  if (!s)
    return r;
  struct sim_event *e = eh ? event_find(eh) : NULL;
  if (!e)
    return CUDA_ERROR_INVALID_HANDLE;
  if (e->done_seq >= e->rec_seq || e->rec.stream == s->id)
    return CUDA_SUCCESS;
  struct sim_work *w = work_new(SIM_W_WAIT);
  if (!w)
    return CUDA_ERROR_OUT_OF_MEMORY;
  w->wait = e->rec;
  clock_join(&s->clock, &e->rec_clock);
  clock_raise(&s->clock, e->rec.stream, e->rec.seq);
  sim_stream_submit(s, w);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
  SIM_BEGIN(cuStreamWaitEvent);
  return SIM_END(stream_wait_event(hStream, hEvent, Flags));
}

static CUresult launch_host_func(CUstream h, CUhostFn fn, void *user)
{
  if (!fn)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r;
  struct sim_stream *s = sim_stream_resolve(h, &r);
  if (!s)
    return r;
  struct sim_work *w = work_new(SIM_W_HOSTFN);
  if (!w)
    return CUDA_ERROR_OUT_OF_MEMORY;
  w->fn = fn;
  w->user = user;
  sim_stream_submit(s, w);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
  SIM_BEGIN(cuLaunchHostFunc);
  return SIM_END(launch_host_func(hStream, fn, userData));
}

/* ---- events ---- */

static CUresult event_create(CUevent *ph, unsigned flags)
{
  if (!ph)
    return CUDA_ERROR_INVALID_VALUE;
  unsigned known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if ((flags & ~known) || ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING)))
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r;
  struct sim_ctx *c = sim_ctx_current(&r);
  if (!c)
    return r;
  struct sim_event *e = calloc(1, sizeof *e);
  if (!e)
    return CUDA_ERROR_OUT_OF_MEMORY;
  e->ctx = c;
  e->flags = flags;
  e->next = event_list;
  event_list = e;
  *ph = (CUevent)e;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
  SIM_BEGIN(cuEventCreate);
  return SIM_END(event_create(phEvent, Flags));
}

/* A record still queued keeps running (its item forgets the event); waits
 * already queued on it stand, as they name the record, not the event. */
static CUresult event_destroy(CUevent h)
{
  struct sim_event *e = h ? event_find(h) : NULL;
  if (!e)
    return CUDA_ERROR_INVALID_HANDLE;
  event_free(e);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuEventDestroy(CUevent hEvent)
{
  SIM_BEGIN(cuEventDestroy);
  return SIM_END(event_destroy(hEvent));
}

static CUresult event_record(CUevent h, CUstream sh)
{
  struct sim_event *e = h ? event_find(h) : NULL;
  if (!e)
    return CUDA_ERROR_INVALID_HANDLE;
  CUresult r;
  struct sim_stream *s = sim_stream_resolve(sh, &r);
  if (!s)
    return r;
  if (s->ctx != e->ctx)
    return CUDA_ERROR_INVALID_HANDLE;
  struct sim_work *w = work_new(SIM_W_RECORD);
  struct sim_clock snap = {0};
  if (!w)
    return CUDA_ERROR_OUT_OF_MEMORY;
  reap();
  w->event = e;
  w->seq = ++e->rec_seq;
  e->rec.stream = s->id;
  e->rec.seq = enqueue(s, w);
  clock_join(&snap, &s->clock);
  clock_free(&e->rec_clock);
  e->rec_clock = snap;
  if (!sim_queue_mode)
    run_all(s);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
  SIM_BEGIN(cuEventRecord);
  return SIM_END(event_record(hEvent, hStream));
}

static CUresult event_sync(CUevent h)
{
  struct sim_event *e = h ? event_find(h) : NULL;
  if (!e)
    return CUDA_ERROR_INVALID_HANDLE;
  if (e->done_seq < e->rec_seq)
    run_through(e->rec.stream, e->rec.seq);
  reap();
  return CUDA_SUCCESS;
}

SIM_API CUresult cuEventSynchronize(CUevent hEvent)
{
  SIM_BEGIN(cuEventSynchronize);
  return SIM_END(event_sync(hEvent));
}

/* NOT_READY exactly while the latest record has not run; an event never
 * recorded is complete, as with the driver. */
static CUresult event_query(CUevent h)
{
  struct sim_event *e = h ? event_find(h) : NULL;
  if (!e)
    return CUDA_ERROR_INVALID_HANDLE;
  return e->done_seq >= e->rec_seq ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

SIM_API CUresult cuEventQuery(CUevent hEvent)
{
  SIM_BEGIN(cuEventQuery);
  return SIM_END(event_query(hEvent));
}

static CUresult event_elapsed(float *ms, CUevent hs, CUevent he)
{
  if (!ms)
    return CUDA_ERROR_INVALID_VALUE;
  struct sim_event *a = hs ? event_find(hs) : NULL, *b = he ? event_find(he) : NULL;
  if (!a || !b)
    return CUDA_ERROR_INVALID_HANDLE;
  if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING)
    return CUDA_ERROR_INVALID_HANDLE;
  if (a->rec_seq == 0 || b->rec_seq == 0)
    return CUDA_ERROR_INVALID_HANDLE;
  if (a->done_seq < a->rec_seq || b->done_seq < b->rec_seq)
    return CUDA_ERROR_NOT_READY;
  double d = (double)(b->when.tv_sec - a->when.tv_sec) * 1e3 + (double)(b->when.tv_nsec - a->when.tv_nsec) / 1e6;
  *ms = (float)d;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
  SIM_BEGIN(cuEventElapsedTime);
  return SIM_END(event_elapsed(pMilliseconds, hStart, hEnd));
}

SIM_API CUresult sim_cuEventElapsedTime_v1(float *ms, CUevent start, CUevent end)
{
  SIM_BEGIN(cuEventElapsedTime);
  return SIM_END(event_elapsed(ms, start, end));
}

/* ---- controls ---- */

SIM_API size_t simcuda_stream_run(CUstream h, size_t n)
{
  size_t ran = 0;
  sim_lock();
  CUresult r;
  struct sim_stream *s = sim_stream_resolve(h, &r);
  if (s) {
    unsigned long long id = s->id;
    while ((n == 0 || ran < n) && (s = stream_by_id(id)) && s->head) {
      run_one(s);
      ran++;
    }
  }
  reap();
  sim_unlock();
  return ran;
}

SIM_API int simcuda_stream_set_capturing(CUstream h, int on)
{
  sim_lock();
  CUresult r;
  struct sim_stream *s = sim_stream_resolve(h, &r);
  int was = s ? s->capturing : -1;
  if (s)
    s->capturing = on ? 1 : 0;
  sim_unlock();
  return was;
}

SIM_API size_t simcuda_stream_queued(CUstream h)
{
  sim_lock();
  CUresult r;
  struct sim_stream *s = sim_stream_resolve(h, &r);
  size_t n = s ? s->queued : 0;
  sim_unlock();
  return n;
}

static __thread char reuse_text[512];

static const char *stream_kind(const struct sim_stream *s)
{
  if (s->per_thread)
    return "per-thread default stream";
  if (s->is_null)
    return "legacy default stream";
  if (s->destroyed)
    return is_blocking(s) ? "destroyed blocking stream" : "destroyed non-blocking stream";
  return is_blocking(s) ? "blocking stream" : "non-blocking stream";
}

static int overlaps(uintptr_t a, size_t an, uintptr_t b, size_t bn)
{
  return an && bn && a < b + bn && b < a + an;
}

/* Which part of [p, p+n) the item reads or writes: "" when none. */
static const char *work_touches(const struct sim_work *w, uintptr_t p, size_t n, uintptr_t *lo, size_t *len)
{
  if (w->kind == SIM_W_MEMSET && overlaps(w->dst, w->count * (size_t)w->elem, p, n)) {
    *lo = w->dst;
    *len = w->count * (size_t)w->elem;
    return "memset writing";
  }
  if (w->kind == SIM_W_MEMCPY && overlaps(w->dst, w->count, p, n)) {
    *lo = w->dst;
    *len = w->count;
    return "memcpy writing";
  }
  if (w->kind == SIM_W_MEMCPY && overlaps(w->src, w->count, p, n)) {
    *lo = w->src;
    *len = w->count;
    return "memcpy reading";
  }
  return "";
}

SIM_API size_t simcuda_reuse_check(CUstream h, CUdeviceptr dptr, size_t n)
{
  size_t found = 0;
  sim_lock();
  snprintf(reuse_text, sizeof reuse_text, "no early reuse");
  CUresult r;
  struct sim_stream *s = sim_stream_resolve(h, &r);
  if (!s) {
    snprintf(reuse_text, sizeof reuse_text, "stream %p does not resolve: CUresult %d", (void *)h, (int)r);
    sim_unlock();
    return (size_t)-1;
  }
  /* What s's next item will be ordered after: its clock, plus what the
   * legacy rules add when that item is queued. */
  struct sim_clock next = {0};
  clock_join(&next, &s->clock);
  legacy_order(s, &next, NULL);
  for (struct sim_stream *t = stream_list; t; t = t->next) {
    if (t == s)
      continue;
    unsigned long long before = clock_get(&next, t->id);
    for (struct sim_work *w = t->head; w; w = w->next) {
      uintptr_t lo;
      size_t len;
      const char *what = work_touches(w, (uintptr_t)dptr, n, &lo, &len);
      if (!*what || w->pos <= before)
        continue;
      if (found++ == 0)
        snprintf(reuse_text, sizeof reuse_text,
                 "%s %p (device %d) has a %s [0x%llx, 0x%llx) queued as its item %llu, not ordered before "
                 "the next work of %s %p",
                 stream_kind(t), (void *)t, t->ctx->dev, what, (unsigned long long)lo,
                 (unsigned long long)(lo + len), w->pos, stream_kind(s), (void *)s);
    }
  }
  clock_free(&next);
  sim_unlock();
  return found;
}

SIM_API const char *simcuda_reuse_explain(void) { return reuse_text[0] ? reuse_text : "no early reuse"; }
