/* sim-stream.c: streams, events and the work queue.
 *
 * Every asynchronous operation becomes a work item on its stream's FIFO.  Out
 * of queue mode the stream is run as soon as an item is added, so work
 * happens before the call returns.  In queue mode (SIMCUDA_QUEUE=1) items wait
 * until something synchronizes: cuStreamSynchronize, cuEventSynchronize on an
 * event recorded after them, cuCtxSynchronize, and the calls that synchronize
 * implicitly on a real GPU (cuMemFree, the non-async copies and fills).  That
 * is what lets a test see memory being reused while work on it is still
 * pending: such work runs late, exactly as it would on a GPU.
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
  unsigned long long done_seq;    /* records that have run */
  struct sim_stream *stream;      /* stream of the latest record */
  struct timespec when;
};

static struct sim_stream *stream_list;
static struct sim_event *event_list;

/* ---- registry ---- */

struct sim_stream *sim_stream_new(struct sim_ctx *ctx, unsigned flags, int is_null)
{
  struct sim_stream *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  s->ctx = ctx;
  s->flags = flags;
  s->is_null = is_null;
  s->next = stream_list;
  stream_list = s;
  return s;
}

static struct sim_stream *stream_find(CUstream h)
{
  for (struct sim_stream *s = stream_list; s; s = s->next)
    if ((CUstream)s == h && !s->is_null)
      return s;
  return NULL;
}

struct sim_stream *sim_stream_resolve(CUstream h, CUresult *err)
{
  if (h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
    struct sim_ctx *c = sim_ctx_current(err);
    if (!c)
      return NULL;
    if (!c->null_stream) {
      *err = CUDA_ERROR_OUT_OF_MEMORY;
      return NULL;
    }
    return c->null_stream;
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
  return NULL;
}

size_t sim_stream_live(void)
{
  size_t n = 0;
  for (struct sim_stream *s = stream_list; s; s = s->next)
    n += !s->is_null;
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
    if (!s->is_null)
      fprintf(f, "simcuda:   stream %p device %d, %zu item%s queued\n", (void *)s, s->ctx->dev, s->queued,
              s->queued == 1 ? "" : "s");
  for (struct sim_event *e = event_list; e; e = e->next)
    fprintf(f, "simcuda:   event %p device %d\n", (void *)e, e->ctx->dev);
}

/* ---- running work ---- */

static void run_one(struct sim_stream *s);

static void run_until_recorded(struct sim_event *e, unsigned long long seq)
{
  while (e->done_seq < seq && e->stream && e->stream->head)
    run_one(e->stream);
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
    if (w->event && w->event->stream != s)
      run_until_recorded(w->event, w->seq);
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
 * function) sees a consistent queue. */
static void run_one(struct sim_stream *s)
{
  struct sim_work *w = s->head;
  s->head = w->next;
  if (!s->head)
    s->tail = NULL;
  s->queued--;
  CUresult r = work_run(s, w);
  if (r != CUDA_SUCCESS && s->error == CUDA_SUCCESS)
    s->error = r;
  free(w);
}

static void run_all(struct sim_stream *s)
{
  while (s->head)
    run_one(s);
}

void sim_stream_submit(struct sim_stream *s, struct sim_work *w)
{
  w->next = NULL;
  if (s->tail)
    s->tail->next = w;
  else
    s->head = w;
  s->tail = w;
  s->queued++;
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
  for (struct sim_event *e = event_list; e; e = e->next)
    if (e->stream == s)
      e->stream = NULL;
  for (struct sim_stream **p = &stream_list; *p; p = &(*p)->next)
    if (*p == s) {
      *p = s->next;
      break;
    }
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
  free(e);
}

void sim_ctx_release_objects(struct sim_ctx *ctx)
{
  for (struct sim_stream *s = stream_list, *next; s; s = next) {
    next = s->next;
    if (s->ctx == ctx)
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

/* The real driver lets queued work finish after cuStreamDestroy returns; here
 * it runs first, which is the same as far as memory contents go. */
static CUresult stream_destroy(CUstream h)
{
  struct sim_stream *s = h ? stream_find(h) : NULL;
  if (!s)
    return CUDA_ERROR_INVALID_HANDLE;
  stream_free(s);
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

static CUresult stream_query(CUstream h)
{
  CUresult r;
  struct sim_stream *s = sim_stream_resolve(h, &r);
  if (!s)
    return r;
  return s->queued ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

SIM_API CUresult cuStreamQuery(CUstream hStream)
{
  SIM_BEGIN(cuStreamQuery);
  return SIM_END(stream_query(hStream));
}

static struct sim_work *work_new(enum sim_work_kind kind)
{
  struct sim_work *w = calloc(1, sizeof *w);
  if (w)
    w->kind = kind;
  return w;
}

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
  if (e->done_seq >= e->rec_seq)
    return CUDA_SUCCESS;
  struct sim_work *w = work_new(SIM_W_WAIT);
  if (!w)
    return CUDA_ERROR_OUT_OF_MEMORY;
  w->event = e;
  w->seq = e->rec_seq;
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
  if (!w)
    return CUDA_ERROR_OUT_OF_MEMORY;
  w->event = e;
  w->seq = ++e->rec_seq;
  e->stream = s;
  sim_stream_submit(s, w);
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
  run_until_recorded(e, e->rec_seq);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuEventSynchronize(CUevent hEvent)
{
  SIM_BEGIN(cuEventSynchronize);
  return SIM_END(event_sync(hEvent));
}

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
