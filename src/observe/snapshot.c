/* snapshot.c: owns cuemm_snapshot_take, a manager's memory at one moment
 * (the pool's chunks, every block and what it is), and its JSON form.
 *
 * The pool's sub-allocator knows where the blocks are and whether they are
 * handed out; only the layers above it know to whom: the owned table has
 * the program's live blocks, the pending queue the ones freed and waiting,
 * the threads' heaps the stream-ordered ones (live or cached).  A snapshot
 * walks the sub-allocator in address order and asks each of them, all
 * under the manager's lock, so the picture is one moment's.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/internal.h"
#include "core/internal.h"
#include "stream/internal.h"
#include "observe/stats.h"

typedef struct blocks {
  cuemm_snapshot_block *v;
  size_t n, cap;
  int oom;
} blocks;

static void push(blocks *b, cuemm_snapshot_block x)
{
  if (b->n == b->cap) {
    size_t cap = b->cap ? 2 * b->cap : 256;
    cuemm_snapshot_block *v = realloc(b->v, cap * sizeof *v);
    if (!v) {
      b->oom = 1;
      return;
    }
    b->v = v;
    b->cap = cap;
  }
  b->v[b->n++] = x;
}

/* The stream-ordered blocks, sorted by address for lookups. */
typedef struct sblocks {
  cuemm__stream_block *v;
  size_t n, cap;
  int oom;
} sblocks;

static void collect_stream(void *arg, const cuemm__stream_block *b)
{
  sblocks *s = arg;
  if (s->n == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 256;
    cuemm__stream_block *v = realloc(s->v, cap * sizeof *v);
    if (!v) {
      s->oom = 1;
      return;
    }
    s->v = v;
    s->cap = cap;
  }
  s->v[s->n++] = *b;
}

static int by_ptr(const void *a, const void *b)
{
  uintptr_t x = ((const cuemm__stream_block *)a)->ptr, y = ((const cuemm__stream_block *)b)->ptr;
  return x < y ? -1 : x > y;
}

static int by_block_ptr(const void *a, const void *b)
{
  CUdeviceptr x = ((const cuemm_snapshot_block *)a)->ptr, y = ((const cuemm_snapshot_block *)b)->ptr;
  return x < y ? -1 : x > y;
}

static const cuemm__stream_block *stream_find(const sblocks *s, uintptr_t p)
{
  size_t lo = 0, hi = s->n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (s->v[mid].ptr < p)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < s->n && s->v[lo].ptr == p ? &s->v[lo] : NULL;
}

static int chunk_of(const cuemm_snapshot *s, CUdeviceptr p)
{
  size_t lo = 0, hi = s->nchunks;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (s->chunks[mid].base + s->chunks[mid].size <= p)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < s->nchunks && s->chunks[lo].base <= p ? (int)lo : -1;
}

/* What cuemm__span_each's walk of one span needs. */
typedef struct span_walk {
  cuemm_manager *m;
  const cuemm_snapshot *s;
  blocks *out;
  const sblocks *sb;
  CUstream stream;
} span_walk;

static void span_block(uintptr_t ptr, size_t size, int cut, void *arg)
{
  span_walk *w = arg;
  cuemm_snapshot_block x = { .ptr = (CUdeviceptr)ptr, .size = size, .stream_ordered = 1 };
  x.chunk = chunk_of(w->s, x.ptr);
  const cuemm__stream_block *sbk = cut ? stream_find(w->sb, ptr) : NULL;
  const cuemm__pending_entry *q;
  if (!cut) {
    x.state = CUEMM_BLOCK_CACHED;
    x.stream = w->stream;
  } else if (sbk) {
    x.stream = sbk->stream;
    x.requested = sbk->req;
    x.state = sbk->cached ? CUEMM_BLOCK_CACHED : CUEMM_BLOCK_LIVE;
  } else if ((q = cuemm__pending_find(&w->m->pending, ptr, 0)) != NULL) {
    x.requested = q->size;
    x.state = CUEMM_BLOCK_PENDING;
  } else
    x.state = CUEMM_BLOCK_LIVE;
  push(w->out, x);
}

/* The blocks of a thread's span (span.h), which the pool holds as one
 * block: those cut from it as the thread's records say, and its free
 * space as cached (the thread keeps it for the span's stream).  Lock
 * held. */
static void take_span(cuemm_manager *m, cuemm_snapshot *s, blocks *out, const sblocks *sb, const cuemm__span *sp)
{
  span_walk w = { m, s, out, sb, cuemm__span_stream(sp) };
  cuemm__span_each(sp, span_block, &w);
}

/* The pool: its chunks, then its blocks in address order.  Lock held. */
static int take_pool(cuemm_manager *m, cuemm_snapshot *s, blocks *out, const sblocks *sb)
{
  const cuemm__pool *p = m->pool;
  size_t n = cuemm__pool_list_chunks(p, NULL, NULL, 0);
  s->chunks = calloc(n ? n : 1, sizeof *s->chunks);
  CUdeviceptr *base = calloc(n ? n : 1, sizeof *base);
  size_t *size = calloc(n ? n : 1, sizeof *size);
  if (!s->chunks || !base || !size) {
    free(base);
    free(size);
    return -1;
  }
  cuemm__pool_list_chunks(p, base, size, n);
  for (size_t k = 0; k < n; k++)
    s->chunks[s->nchunks++] = (cuemm_snapshot_chunk){ base[k], size[k] };
  free(base);
  free(size);

  for (uint32_t i = 0; i != CUEMM__SA_NIL && i < cuemm__pool_descriptors(p); i = cuemm__pool_block(p, i)->next) {
    const cuemm__sa_block *b = cuemm__pool_block(p, i);
    if (b->state == CUEMM__SA_HOLE || b->state == CUEMM__SA_SPARE || !b->size)
      continue;
    cuemm_snapshot_block x = { .ptr = (CUdeviceptr)(cuemm__pool_base(p) + b->off), .size = b->size };
    x.chunk = chunk_of(s, x.ptr);
    if (b->state != CUEMM__SA_USED) {
      x.state = CUEMM_BLOCK_FREE;
      push(out, x);
      continue;
    }
    const cuemm__span *sp = cuemm__span_based(m, (uintptr_t)x.ptr);
    if (sp) {
      take_span(m, s, out, sb, sp);
      continue;
    }
    const cuemm__owned_entry *e = cuemm__owned_find(&m->owned, (uintptr_t)x.ptr);
    const cuemm__stream_block *sbk = stream_find(sb, (uintptr_t)x.ptr);
    const cuemm__pending_entry *q;
    if (sbk) {
      x.stream_ordered = 1;
      x.stream = sbk->stream;
      x.requested = sbk->req;
      x.state = sbk->cached ? CUEMM_BLOCK_CACHED : CUEMM_BLOCK_LIVE;
    } else if (e && !e->pending) {
      x.requested = e->size;
      x.state = CUEMM_BLOCK_LIVE;
      if (e->kind == CUEMM__KIND_POOL && b->seq) {
        /* cuemm_alloc_async's, not cached by a thread: its descriptor
         * keeps the stream (CU_STREAM_LEGACY for the legacy one). */
        x.stream_ordered = 1;
        x.stream = (CUstream)(uintptr_t)b->seq == CU_STREAM_LEGACY ? NULL : (CUstream)(uintptr_t)b->seq;
      }
    } else if ((q = cuemm__pending_find(&m->pending, (uintptr_t)x.ptr, 0)) != NULL) {
      x.requested = q->size;
      x.state = CUEMM_BLOCK_PENDING;
    } else
      x.state = CUEMM_BLOCK_LIVE; /* handed out to a layer that keeps no record here (a stream block in transit) */
    push(out, x);
  }
  return 0;
}

typedef struct outside_walk {
  blocks *out;
} outside_walk;

static void take_outside(cuemm__owned_entry *e, void *arg)
{
  outside_walk *w = arg;
  if (e->kind != CUEMM__KIND_DEVICE && e->kind != CUEMM__KIND_MANAGED && e->kind != CUEMM__KIND_SYSTEM)
    return;
  cuemm_snapshot_block x = {
    .ptr = (CUdeviceptr)e->key, .size = e->size, .requested = e->size,
    .state = e->pending ? CUEMM_BLOCK_PENDING : CUEMM_BLOCK_LIVE, .chunk = -1,
  };
  push(w->out, x);
}

CUEMM_EXTERN CUresult cuemm_snapshot_take(cuemm_manager *m, cuemm_snapshot **out)
{
  if (!m || !out)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_snapshot_take: %s is NULL", m ? "out" : "manager");
  *out = NULL;
  cuemm_snapshot *s = calloc(1, sizeof *s);
  if (!s)
    return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "cuemm_snapshot_take: no host memory for the snapshot");
  blocks b = { 0 };
  sblocks sb = { 0 };
  int failed = 0;
  cuemm__lock_acquire(&m->lock);
  cuemm__stats_locked(m, &s->stats);
  cuemm__stats_pool_locked(m, &s->pool);
  cuemm__stream_each(m, collect_stream, &sb);
  if (!sb.oom) {
    if (sb.n) /* qsort takes no NULL array, even empty */
      qsort(sb.v, sb.n, sizeof *sb.v, by_ptr);
    if (m->pool)
      failed = take_pool(m, s, &b, &sb);
    size_t first_outside = b.n;
    outside_walk w = { &b };
    cuemm__owned_each(&m->owned, take_outside, &w);
    if (!b.oom && b.n > first_outside)
      qsort(b.v + first_outside, b.n - first_outside, sizeof *b.v, by_block_ptr);
  }
  cuemm__lock_release(&m->lock);
  free(sb.v);
  if (failed || b.oom || sb.oom) {
    free(b.v);
    cuemm_snapshot_free(s);
    return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "cuemm_snapshot_take: no host memory for the snapshot's blocks");
  }
  s->blocks = b.v;
  s->nblocks = b.n;
  *out = s;
  return CUDA_SUCCESS;
}

CUEMM_EXTERN void cuemm_snapshot_free(cuemm_snapshot *s)
{
  if (!s)
    return;
  free(s->chunks);
  free(s->blocks);
  free(s);
}

/* ---- JSON ------------------------------------------------------------------- */

static const char *const state_names[] = { "live", "pending", "cached", "free" };

CUEMM_EXTERN CUresult cuemm_snapshot_write_json(const cuemm_snapshot *s, FILE *f)
{
  if (!s || !f)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_snapshot_write_json: %s is NULL", s ? "f" : "s");
  const cuemm_stats *st = &s->stats;
  const cuemm_pool_stats *ps = &s->pool;
  clearerr(f);
  fprintf(f, "{\"version\":1,\n\"stats\":{\"live_bytes\":%zu,\"live_count\":%zu,\"peak_bytes\":%zu,"
          "\"held_bytes\":%zu,\"peak_held_bytes\":%zu,\"pending_bytes\":%zu,\"pending_count\":%zu,"
          "\"stream_cached_bytes\":%zu,\"allocs\":%" PRIu64 ",\"frees\":%" PRIu64 ",\"flushes\":%" PRIu64
          ",\"oom_retries\":%" PRIu64 "},\n",
          st->live_bytes, st->live_count, st->peak_bytes, st->held_bytes, st->peak_held_bytes, st->pending_bytes,
          st->pending_count, st->stream_cached_bytes, st->allocs, st->frees, st->flushes, st->oom_retries);
  fprintf(f, "\"pool\":{\"enabled\":%s,\"base\":\"0x%llx\",\"reserved_bytes\":%zu,\"mapped_bytes\":%zu,"
          "\"used_bytes\":%zu,\"free_bytes\":%zu,\"largest_free_block\":%zu,\"fragmentation\":%.6f,"
          "\"grow_steps\":%" PRIu64 ",\"releases\":%" PRIu64 ",\"suspended\":%s,\"suspended_need_bytes\":%zu,"
          "\"kept_bytes\":%zu},\n",
          ps->enabled ? "true" : "false", (unsigned long long)ps->base, ps->reserved_bytes, ps->mapped_bytes,
          ps->used_bytes, ps->free_bytes, ps->largest_free_block, ps->fragmentation, ps->grow_steps, ps->releases,
          ps->suspended ? "true" : "false", ps->suspended_need_bytes, ps->kept_bytes);
  fputs("\"chunks\":[", f);
  for (size_t i = 0; i < s->nchunks; i++)
    fprintf(f, "%s\n {\"base\":\"0x%llx\",\"size\":%zu}", i ? "," : "", (unsigned long long)s->chunks[i].base,
            s->chunks[i].size);
  fputs("],\n\"blocks\":[", f);
  for (size_t i = 0; i < s->nblocks; i++) {
    const cuemm_snapshot_block *b = &s->blocks[i];
    fprintf(f, "%s\n {\"ptr\":\"0x%llx\",\"size\":%zu,\"requested\":%zu,\"stream\":\"0x%llx\",\"state\":\"%s\","
            "\"chunk\":%d,\"stream_ordered\":%s}", i ? "," : "", (unsigned long long)b->ptr, b->size, b->requested,
            (unsigned long long)(uintptr_t)b->stream, (unsigned)b->state < 4 ? state_names[b->state] : "unknown",
            b->chunk, b->stream_ordered ? "true" : "false");
  }
  fputs("]}\n", f);
  if (ferror(f) || fflush(f) != 0)
    return cuemm__error(CUDA_ERROR_UNKNOWN, "cuemm_snapshot_write_json: writing failed");
  return CUDA_SUCCESS;
}
