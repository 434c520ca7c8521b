/* report.c: owns the statistics table (cuemm_stats_print) and CUEMM_STATS,
 * which prints it when a manager ends or the process exits.
 *
 * The table answers the two questions a user tuning the allocator asks
 * first: how much did my program use, and how much did the allocator hold
 * to serve it (the footprint).  The rest says where the difference went:
 * pending frees, the pool's growth and fragmentation, the stream caches.
 *
 * Printing at exit is an extension (manager.h): it hears of each manager's
 * creation, so that the exit handler can find those still alive, and of its
 * destruction, to print the table then, while the manager is still whole.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/internal.h"
#include "observe/report.h"
#include "observe/stats.h"
#include "stream/internal.h"

/* "1.50 MiB": binary units, two decimals; bytes below 1 KiB as they are. */
static const char *human(char *buf, size_t cap, size_t n)
{
  static const char *const units[] = { "KiB", "MiB", "GiB", "TiB" };
  if (n < 1024) {
    snprintf(buf, cap, "%zu B", n);
    return buf;
  }
  double v = (double)n / 1024;
  int u = 0;
  while (v >= 1024 && u < 3) {
    v /= 1024;
    u++;
  }
  snprintf(buf, cap, "%.2f %s", v, units[u]);
  return buf;
}

#define MAX_STREAMS_SHOWN 8

typedef struct per_stream {
  struct { CUstream s; size_t bytes, count; } v[MAX_STREAMS_SHOWN];
  size_t n;
  size_t other_bytes, other_streams;
} per_stream;

static void add_cached(void *arg, const cuemm__stream_block *b)
{
  per_stream *ps = arg;
  if (!b->cached)
    return;
  for (size_t i = 0; i < ps->n; i++)
    if (ps->v[i].s == b->stream) {
      ps->v[i].bytes += b->size;
      ps->v[i].count++;
      return;
    }
  if (ps->n < MAX_STREAMS_SHOWN) {
    ps->v[ps->n].s = b->stream;
    ps->v[ps->n].bytes = b->size;
    ps->v[ps->n].count = 1;
    ps->n++;
    return;
  }
  ps->other_bytes += b->size;
  ps->other_streams++; /* blocks, strictly: streams past the shown ones are not told apart */
}

static CUresult print_locked(cuemm_manager *m, FILE *f)
{
  cuemm_stats s;
  cuemm_pool_stats ps;
  cuemm__stats_locked(m, &s);
  cuemm__stats_pool_locked(m, &ps);
  per_stream cached = { 0 };
  if (s.stream_cached_count)
    cuemm__stream_each(m, add_cached, &cached);
  char a[32], b[32], c[32];
  static const char *const memory[] = { "device", "managed", "system" };
  clearerr(f);
  fprintf(f, "cuemm: manager %" PRIu64 " (device %d, context %p, %s memory, %s)\n", m->serial, (int)m->dev,
          (void *)m->ctx, memory[m->cfg.memory <= CUEMM_MEMORY_SYSTEM ? m->cfg.memory : 0],
          m->pool ? "pool vmm" : "no pool");
  fprintf(f, "  live        %s now in %zu allocations; %s at peak in %zu\n", human(a, sizeof a, s.live_bytes),
          s.live_count, human(b, sizeof b, s.peak_bytes), s.peak_count);
  fprintf(f, "  held        %s now; %s at peak", human(a, sizeof a, s.held_bytes),
          human(b, sizeof b, s.peak_held_bytes));
  if (s.peak_bytes)
    fprintf(f, "; footprint %.2fx (peak held / peak live)\n", (double)s.peak_held_bytes / (double)s.peak_bytes);
  else
    fputs("; footprint - (nothing was allocated)\n", f);
  fprintf(f, "  calls       %" PRIu64 " allocations, %" PRIu64 " frees, %" PRIu64 " failed allocations\n", s.allocs,
          s.frees, s.alloc_failures);
  fprintf(f, "  deferred    %" PRIu64 " flushes, %zu frees pending (%s), %" PRIu64 " out-of-memory retries\n",
          s.flushes, s.pending_count, human(a, sizeof a, s.pending_bytes), s.oom_retries);
  if (ps.enabled)
    fprintf(f, "  pool        %s mapped in %zu chunks, %s used, largest free block %s, fragmentation %.2f; %" PRIu64
            " growth steps, %" PRIu64 " releases, %" PRIu64 " requests given to cuMemAlloc\n",
            human(a, sizeof a, ps.mapped_bytes), ps.chunks, human(b, sizeof b, ps.used_bytes),
            human(c, sizeof c, ps.largest_free_block), ps.fragmentation, ps.grow_steps, ps.releases,
            ps.fallback_allocs);
  if (ps.enabled && ps.suspended)
    fprintf(f, "  suspended   the pool's memory is released; resuming maps %s, %s of contents kept in host memory\n",
            human(a, sizeof a, ps.suspended_need_bytes), human(b, sizeof b, ps.kept_bytes));
  if (ps.enabled && (ps.suspends || ps.resumes))
    fprintf(f, "  suspension  %" PRIu64 " suspensions, %" PRIu64 " resumptions\n", ps.suspends, ps.resumes);
  if (s.stream_heaps) {
    fprintf(f, "  stream      %s cached in %zu blocks by %zu threads; %" PRIu64 " events, %" PRIu64
            " blocks taken across streams, %" PRIu64 " reclaims by the pool\n",
            human(a, sizeof a, s.stream_cached_bytes), s.stream_cached_count, s.stream_heaps, s.stream_events,
            s.stream_steals, s.stream_reclaims);
    if (s.stream_spans)
      fprintf(f, "    spans %zu of %s, %s of them not handed out\n", s.stream_spans,
              human(a, sizeof a, s.stream_span_bytes), human(b, sizeof b, s.stream_span_free_bytes));
    for (size_t i = 0; i < cached.n; i++)
      fprintf(f, "    stream %p: %s cached in %zu blocks\n", (void *)cached.v[i].s,
              human(a, sizeof a, cached.v[i].bytes), cached.v[i].count);
    if (cached.other_streams)
      fprintf(f, "    other streams: %s cached in %zu blocks\n", human(a, sizeof a, cached.other_bytes),
              cached.other_streams);
  }
  if (m->log)
    fprintf(f, "  log         %s: %" PRIu64 " rows, %" PRIu64 " lost\n", cuemm__log_path(m->log), s.log_rows,
            s.log_lost);
  if (ferror(f) || fflush(f) != 0)
    return cuemm__error(CUDA_ERROR_UNKNOWN, "cuemm_stats_print: writing the table failed: %s", strerror(errno));
  return CUDA_SUCCESS;
}

CUEMM_EXTERN CUresult cuemm_stats_print(cuemm_manager *m, FILE *f)
{
  if (!m)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_stats_print: manager is NULL");
  cuemm__lock_acquire(&m->lock);
  CUresult r = print_locked(m, f ? f : stderr);
  cuemm__lock_release(&m->lock);
  return r;
}

/* ---- CUEMM_STATS: the managers to report on at exit ----------------------------- */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static cuemm_manager **g_managers;
static size_t g_n, g_cap;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void at_exit(void)
{
  pthread_mutex_lock(&g_lock);
  for (size_t i = 0; i < g_n; i++)
    cuemm_stats_print(g_managers[i], stderr);
  g_n = 0;
  pthread_mutex_unlock(&g_lock);
}

static void once_init(void)
{
  atexit(at_exit);
}

static void forget(cuemm_manager *m)
{
  pthread_mutex_lock(&g_lock);
  for (size_t i = 0; i < g_n; i++)
    if (g_managers[i] == m) {
      g_managers[i] = g_managers[--g_n];
      break;
    }
  pthread_mutex_unlock(&g_lock);
}

static CUresult report_attach(cuemm_manager *m)
{
  if (!m->cfg.stats_at_exit)
    return CUDA_SUCCESS;
  pthread_once(&g_once, once_init);
  pthread_mutex_lock(&g_lock);
  if (g_n == g_cap) {
    size_t cap = g_cap ? 2 * g_cap : 8;
    cuemm_manager **v = realloc(g_managers, cap * sizeof *v);
    if (!v) {
      pthread_mutex_unlock(&g_lock);
      return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "cuemm_manager_create: no host memory to list the manager for CUEMM_STATS");
    }
    g_managers = v;
    g_cap = cap;
  }
  g_managers[g_n++] = m;
  pthread_mutex_unlock(&g_lock);
  return CUDA_SUCCESS;
}

static void report_destroy(cuemm_manager *m, char *note, size_t cap)
{
  (void)note;
  (void)cap;
  if (!m->cfg.stats_at_exit)
    return;
  forget(m);
  cuemm__saved_error keep; /* the table must not change destroy's message */
  cuemm__error_save(&keep);
  print_locked(m, stderr);
  cuemm__error_restore(&keep, CUDA_SUCCESS);
}

static void report_abandon(cuemm_manager *m)
{
  if (m->cfg.stats_at_exit)
    forget(m);
}

const cuemm__extension cuemm__report_extension = {
  .attach = report_attach,
  .destroy = report_destroy,
  .abandon = report_abandon,
};
