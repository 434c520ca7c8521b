/* test-threads.c: one manager used from many threads at once.
 *
 * Allocation, writing and freeing from 8 threads, half of them with no
 * context current and half with another context current (cuemm must push
 * its own and leave theirs as it was); a defer scope opened by one thread
 * holding back the frees of all the others; and the drop-in calls finding
 * one shared manager for a context from every thread.  The counts are read
 * from cuemm_get_stats, so the checks run on a GPU too; simcuda's call
 * counters confirm them where present.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define NTHREADS 8
#define ITERATIONS 2000
#define SCOPE_FREES 500
#define DROPIN_ITERATIONS 500

static CUcontext primary;

static void start_threads(pthread_t *t, void *(*fn)(void *), void *args, size_t argsize)
{
  for (int i = 0; i < NTHREADS; i++)
    if (pthread_create(&t[i], NULL, fn, (char *)args + (size_t)i * argsize) != 0) {
      printf("Bail out! pthread_create failed\n");
      exit(1);
    }
}

static void join_threads(pthread_t *t)
{
  for (int i = 0; i < NTHREADS; i++)
    pthread_join(t[i], NULL);
}

static CUcontext current_context(void)
{
  CUcontext c = NULL;
  if (cuCtxGetCurrent(&c) != CUDA_SUCCESS)
    return (CUcontext)(uintptr_t)-1;
  return c;
}

static uint32_t next_random(uint32_t *s)
{
  *s = *s * 1664525u + 1013904223u;
  return *s >> 8;
}

/* ---- 8 threads x 2000 alloc / write / free ------------------------------------ */

typedef struct churn {
  int index;
  cuemm_manager *m;
  CUcontext mctx;      /* the manager's context */
  CUcontext own;       /* what the thread keeps current; NULL: nothing */
  unsigned long errors, ctx_mismatches, pattern_errors;
  char first_error[320];
} churn;

static void churn_error(churn *c, const char *what, CUresult r)
{
  if (c->errors++ == 0)
    snprintf(c->first_error, sizeof c->first_error, "thread %d: %s returned %d: %s", c->index, what, (int)r,
             cuemm_last_error());
}

static void *churn_thread(void *arg)
{
  churn *c = arg;
  if (c->own && cuCtxSetCurrent(c->own) != CUDA_SUCCESS) {
    churn_error(c, "cuCtxSetCurrent", CUDA_ERROR_UNKNOWN);
    return NULL;
  }
  uint32_t seed = 2654435761u * (uint32_t)(c->index + 1);
  for (int i = 0; i < ITERATIONS; i++) {
    size_t size = 256 + next_random(&seed) % (64 * 1024 - 256 + 1);
    CUdeviceptr p = 0;
    CUresult r = cuemm_allocate(c->m, size, &p);
    c->ctx_mismatches += current_context() != c->own;
    if (r != CUDA_SUCCESS) {
      churn_error(c, "cuemm_alloc", r);
      continue;
    }
    /* Write a pattern, in the manager's context: memory of one context is
     * not for another context's work (on a GPU a memset issued from the
     * other context may fault, and cuMemFree in the manager's context would
     * not wait for it). */
    unsigned char v = (unsigned char)(c->index * 31 + i), back[2] = {0, 0};
    if ((r = cuCtxPushCurrent(c->mctx)) != CUDA_SUCCESS)
      churn_error(c, "cuCtxPushCurrent", r);
    if ((r = cuMemsetD8(p, v, size)) != CUDA_SUCCESS)
      churn_error(c, "cuMemsetD8", r);
    else if (i % 64 == 0) {
      if ((r = cuMemcpyDtoH(&back[0], p, 1)) != CUDA_SUCCESS || (r = cuMemcpyDtoH(&back[1], p + size - 1, 1)) != CUDA_SUCCESS)
        churn_error(c, "cuMemcpyDtoH", r);
      else
        c->pattern_errors += back[0] != v || back[1] != v;
    }
    if ((r = cuCtxPopCurrent(NULL)) != CUDA_SUCCESS)
      churn_error(c, "cuCtxPopCurrent", r);
    r = cuemm_free(c->m, p);
    c->ctx_mismatches += current_context() != c->own;
    if (r != CUDA_SUCCESS)
      churn_error(c, "cuemm_free", r);
  }
  if (c->own)
    cuCtxSetCurrent(NULL);
  return NULL;
}

static void churn_test(void)
{
  CUdevice dev;
  CUcontext other;
  CHECK_CU(cuCtxGetDevice(&dev));
  CHECK_CU(cuCtxCreate(&other, NULL, 0, dev));
  CHECK_CU(cuCtxPopCurrent(NULL));

  cuemm_config cfg = test_config(10, 0.2);
  cuemm_manager *m = NULL;
  CHECK_CU(cuemm_manager_create(primary, &cfg, &m));
  unsigned long frees0 = sim_calls("cuMemFree"), allocs0 = sim_calls("cuMemAlloc");

  churn c[NTHREADS];
  memset(c, 0, sizeof c);
  for (int i = 0; i < NTHREADS; i++) {
    c[i].index = i;
    c[i].m = m;
    c[i].mctx = primary;
    c[i].own = i % 2 ? other : NULL;
  }
  pthread_t t[NTHREADS];
  start_threads(t, churn_thread, c, sizeof c[0]);
  join_threads(t);

  unsigned long errors = 0, mismatches = 0, pattern = 0;
  const char *first = NULL;
  for (int i = 0; i < NTHREADS; i++) {
    errors += c[i].errors;
    mismatches += c[i].ctx_mismatches;
    pattern += c[i].pattern_errors;
    if (!first && c[i].errors)
      first = c[i].first_error;
  }
  is(errors, 0, "%d threads x %d alloc/write/free: no call failed", NTHREADS, ITERATIONS);
  if (first)
    tap_diag("first failure: %s", first);
  is(mismatches, 0, "every thread's current context (none, or another context) unchanged after every cuemm call");
  is(pattern, 0, "the written patterns read back");

  cuemm_stats s = test_stats(m);
  const long long total = (long long)NTHREADS * ITERATIONS;
  is(s.live_count, 0, "live_count 0");
  is(s.live_bytes, 0, "live_bytes 0");
  is(s.allocs, total, "allocs == %lld", total);
  is(s.frees, total, "frees == %lld", total);
  is(s.driver_frees + s.pending_count, total, "driver_frees + pending_count == %lld", total);
  ok(s.pending_count <= 10, "pending_count %zu within max_pending_count after the last free", s.pending_count);
  ok(s.peak_count >= 1 && s.peak_count <= NTHREADS, "peak_count %zu: at most one live allocation per thread",
     s.peak_count);
  is(s.flushes * 11, s.driver_frees, "every flush released exactly 11 frees (%llu flushes)",
     (unsigned long long)s.flushes);
  is(s.free_failures + s.alloc_failures, 0, "no failure counted");
  if (sim_present) {
    is(sim_calls("cuMemFree") - frees0, s.driver_frees, "simcuda's cuMemFree count equals driver_frees");
    is(sim_calls("cuMemAlloc") - allocs0, total, "simcuda saw one cuMemAlloc per allocation");
  } else
    skip(2, SIM_REASON);
  is(current_context(), primary, "main thread's context untouched");
  CHECK_CU(cuemm_destroy(m));
  CHECK_CU(cuCtxDestroy(other));
}

/* ---- a defer scope of one thread holds back the frees of all ---------------- */

typedef struct scope_shared {
  cuemm_manager *m;
  pthread_barrier_t allocated, opened, freed;
  cuemm_stats before, during, after;
  unsigned long sim_frees_during;
  CUresult begin_r, end_r, flush_r;
} scope_shared;

typedef struct scope_arg {
  int index;
  scope_shared *sh;
  unsigned long errors;
} scope_arg;

static void *scope_thread(void *arg)
{
  scope_arg *a = arg;
  scope_shared *sh = a->sh;
  if (a->index == 0) {
    pthread_barrier_wait(&sh->allocated);
    sh->begin_r = cuemm_defer_cleanup_begin(sh->m);
    sh->before = test_stats(sh->m);
    unsigned long f0 = sim_calls("cuMemFree");
    pthread_barrier_wait(&sh->opened);   /* signal: the scope is open */
    pthread_barrier_wait(&sh->freed);    /* the others are done */
    sh->during = test_stats(sh->m);
    sh->sim_frees_during = sim_calls("cuMemFree") - f0;
    sh->end_r = cuemm_defer_cleanup_end(sh->m);
    sh->flush_r = cuemm_flush(sh->m);
    sh->after = test_stats(sh->m);
    return NULL;
  }
  /* No context current on these threads: cuemm pushes the manager's. */
  CUdeviceptr p[SCOPE_FREES];
  int n = 0;
  for (int i = 0; i < SCOPE_FREES; i++)
    if (cuemm_allocate(sh->m, 1024 + 256 * (size_t)(i % 8), &p[n]) == CUDA_SUCCESS)
      n++;
    else
      a->errors++;
  pthread_barrier_wait(&sh->allocated);
  pthread_barrier_wait(&sh->opened);
  for (int i = 0; i < n; i++)
    if (cuemm_free(sh->m, p[i]) != CUDA_SUCCESS)
      a->errors++;
  pthread_barrier_wait(&sh->freed);
  return NULL;
}

static void scope_test(void)
{
  cuemm_config cfg = test_config(10, 0.2);
  scope_shared sh;
  memset(&sh, 0, sizeof sh);
  CHECK_CU(cuemm_manager_create(primary, &cfg, &sh.m));
  pthread_barrier_init(&sh.allocated, NULL, NTHREADS);
  pthread_barrier_init(&sh.opened, NULL, NTHREADS);
  pthread_barrier_init(&sh.freed, NULL, NTHREADS);
  scope_arg a[NTHREADS];
  memset(a, 0, sizeof a);
  for (int i = 0; i < NTHREADS; i++) {
    a[i].index = i;
    a[i].sh = &sh;
  }
  pthread_t t[NTHREADS];
  start_threads(t, scope_thread, a, sizeof a[0]);
  join_threads(t);

  unsigned long errors = 0;
  for (int i = 0; i < NTHREADS; i++)
    errors += a[i].errors;
  const size_t nfree = (size_t)(NTHREADS - 1) * SCOPE_FREES;
  is(errors, 0, "%d threads allocated and freed %d each without error", NTHREADS - 1, SCOPE_FREES);
  is(sh.begin_r, CUDA_SUCCESS, "one thread opened a scope");
  is(sh.before.defer_depth, 1, "defer_depth 1 while open");
  is(sh.during.driver_frees, sh.before.driver_frees, "driver_frees did not move while the scope was open");
  is(sh.during.pending_count, sh.before.pending_count + nfree, "all %zu frees of the other threads are pending", nfree);
  is(sh.during.frees, sh.before.frees + nfree, "and were accepted");
  if (sim_present)
    is(sh.sim_frees_during, 0, "simcuda saw no cuMemFree while the scope was open");
  else
    skip(1, SIM_REASON);
  is(sh.end_r, CUDA_SUCCESS, "the scope closed");
  is(sh.flush_r, CUDA_SUCCESS, "cuemm_flush after it succeeded");
  is(sh.after.driver_frees - sh.during.driver_frees, sh.during.pending_count,
     "driver_frees grew by exactly the pending count (%zu)", sh.during.pending_count);
  is(sh.after.pending_count, 0, "nothing pending afterwards");
  is(sh.after.defer_depth, 0, "defer_depth back to 0");
  is(sh.after.live_count, 0, "nothing live");
  pthread_barrier_destroy(&sh.allocated);
  pthread_barrier_destroy(&sh.opened);
  pthread_barrier_destroy(&sh.freed);
  CHECK_CU(cuemm_destroy(sh.m));
}

/* ---- drop-ins from many threads sharing one context -------------------------- */

typedef struct dropin {
  int index;
  pthread_barrier_t *start;
  cuemm_manager *first, *last;
  CUresult get_r;
  unsigned long errors, ctx_mismatches;
  char first_error[320];
} dropin;

static void *dropin_thread(void *arg)
{
  dropin *d = arg;
  CUresult r;
  if ((r = cuCtxSetCurrent(primary)) != CUDA_SUCCESS) {
    d->get_r = r;
    return NULL;
  }
  pthread_barrier_wait(d->start); /* all threads ask for the manager at once */
  d->get_r = cuemm_get(&d->first);
  uint32_t seed = 7919u * (uint32_t)(d->index + 1);
  for (int i = 0; i < DROPIN_ITERATIONS; i++) {
    CUdeviceptr p = 0;
    size_t size = 256 + next_random(&seed) % 8192;
    if ((r = cuemm_mem_alloc(&p, size)) != CUDA_SUCCESS || (r = cuemm_mem_free(p)) != CUDA_SUCCESS) {
      if (d->errors++ == 0)
        snprintf(d->first_error, sizeof d->first_error, "thread %d: %d: %s", d->index, (int)r, cuemm_last_error());
    }
    d->ctx_mismatches += current_context() != primary;
  }
  if (cuemm_get(&d->last) != CUDA_SUCCESS)
    d->last = NULL;
  cuCtxSetCurrent(NULL);
  return NULL;
}

static void dropin_test(void)
{
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, NTHREADS);
  dropin d[NTHREADS];
  memset(d, 0, sizeof d);
  for (int i = 0; i < NTHREADS; i++) {
    d[i].index = i;
    d[i].start = &start;
  }
  pthread_t t[NTHREADS];
  start_threads(t, dropin_thread, d, sizeof d[0]);
  join_threads(t);
  pthread_barrier_destroy(&start);

  int get_failed = 0, same = 0;
  unsigned long errors = 0, mismatches = 0;
  const char *first = NULL;
  for (int i = 0; i < NTHREADS; i++) {
    get_failed += d[i].get_r != CUDA_SUCCESS;
    same += d[i].first == d[0].first && d[i].last == d[0].first;
    errors += d[i].errors;
    mismatches += d[i].ctx_mismatches;
    if (!first && d[i].errors)
      first = d[i].first_error;
  }
  is(get_failed, 0, "cuemm_get succeeded in all %d threads at once", NTHREADS);
  is(same, NTHREADS, "every thread got the same manager, before and after its work");
  cuemm_manager *m = NULL;
  CHECK_CU(cuemm_get(&m));
  ok(m == d[0].first && m != NULL, "the main thread gets it too");
  ok(cuemm_context(m) == primary, "it serves the shared context");
  is(errors, 0, "%d x %d cuemm_mem_alloc / cuemm_mem_free without error", NTHREADS, DROPIN_ITERATIONS);
  if (first)
    tap_diag("first failure: %s", first);
  is(mismatches, 0, "the threads' current context stayed the shared one");
  cuemm_stats s = test_stats(m);
  const long long total = (long long)NTHREADS * DROPIN_ITERATIONS;
  is(s.allocs, total, "allocs == %lld", total);
  is(s.frees, total, "frees == %lld", total);
  is(s.live_count, 0, "nothing live");
  is(s.driver_frees + s.pending_count, total, "driver_frees + pending_count == %lld", total);
  CHECK_CU(cuemm_destroy(m));
}

int main(void)
{
  sim_init();
  primary = test_primary_context(0);
  size_t live0 = sim_live_baseline();

  churn_test();
  scope_test();
  dropin_test();

  sim_check_nothing_left(live0);
  test_release_primary(0);
  return tap_done();
}
