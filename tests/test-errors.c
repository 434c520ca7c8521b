/* test-errors.c: bad input and driver failures.
 *
 * NULL managers and out-pointers on every public function; frees of memory a
 * manager does not own (raw driver memory, interior pointers, 0, host memory,
 * another manager's memory, double frees); impossible sizes; and, on
 * simcuda, every driver entry point cuemm calls failing in turn at each of
 * its calls in a workload, a cuMemFree failing inside a threshold flush, and
 * cuemm_destroy leaking what the driver refuses to free.  Checks that need
 * simcuda's fault injection or counters skip on the system driver, so the
 * number of checks is the same on both.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static CUcontext primary;   /* current on the main thread throughout */

static cuemm_manager *make_on(CUcontext ctx, size_t count, double ratio)
{
  cuemm_config c = test_config(count, ratio);
  cuemm_manager *m = NULL;
  CHECK_CU(cuemm_manager_create(ctx, &c, &m));
  return m;
}

/* Compares two snapshots field by field; the differing fields go to diag. */
static int same_stats(const cuemm_stats *a, const cuemm_stats *b)
{
  int diff = 0;
#define SAME(f)                                                                \
  if (a->f != b->f) {                                                          \
    tap_diag("stats." #f " changed: %llu before, %llu after",                 \
             (unsigned long long)a->f, (unsigned long long)b->f);              \
    diff++;                                                                    \
  }
  SAME(total_bytes) SAME(max_pending_bytes) SAME(max_pending_count)
  SAME(live_bytes) SAME(live_count) SAME(peak_bytes) SAME(peak_count)
  SAME(host_live_bytes) SAME(host_live_count) SAME(pinned_bytes) SAME(pinned_count)
  SAME(pending_bytes) SAME(pending_count) SAME(defer_depth)
  SAME(allocs) SAME(frees) SAME(flushes) SAME(driver_frees)
  SAME(oom_retries) SAME(alloc_failures) SAME(free_failures)
#undef SAME
  return diff == 0;
}

static CUcontext current_context(void)
{
  CUcontext c = NULL;
  /* An armed fault on cuCtxGetCurrent may hit this call: it fires once, so a
   * second call answers. */
  for (int i = 0; i < 3; i++)
    if (cuCtxGetCurrent(&c) == CUDA_SUCCESS)
      return c;
  return (CUcontext)(uintptr_t)-1;
}

/* ---- NULL arguments --------------------------------------------------------- */

#define NULL_CASE(call, needle)                                                \
  do {                                                                         \
    is((call), CUDA_ERROR_INVALID_VALUE, "%s: CUDA_ERROR_INVALID_VALUE", #call); \
    like(cuemm_last_error(), needle, "%s: the message says what is NULL", #call); \
  } while (0)

static void null_arguments(void)
{
  cuemm_manager *m = make_on(NULL, 10, 0.2);
  cuemm_stats before = test_stats(m), s;
  CUdeviceptr d = 0;
  void *h = NULL;
  size_t f = 0, t = 0;
  static char buf[8192];

  NULL_CASE(cuemm_manager_create(NULL, NULL, NULL), "cuemm_manager_create: m is NULL");
  NULL_CASE(cuemm_destroy(NULL), "cuemm_destroy: manager is NULL");
  NULL_CASE(cuemm_get(NULL), "cuemm_get: m is NULL");
  NULL_CASE(cuemm_allocate(NULL, 256, &d), "cuemm_allocate: manager is NULL");
  NULL_CASE(cuemm_allocate(m, 256, NULL), "cuemm_allocate: p is NULL");
  NULL_CASE(cuemm_free(NULL, 0x1000), "cuemm_free: manager is NULL");
  NULL_CASE(cuemm_flush(NULL), "cuemm_flush: manager is NULL");
  NULL_CASE(cuemm_defer_cleanup_begin(NULL), "cuemm_defer_cleanup_begin: manager is NULL");
  NULL_CASE(cuemm_defer_cleanup_end(NULL), "cuemm_defer_cleanup_end: manager is NULL");
  NULL_CASE(cuemm_host_allocate(NULL, 256, 0, &h), "cuemm_host_allocate: manager is NULL");
  NULL_CASE(cuemm_host_allocate(m, 256, 0, NULL), "cuemm_host_allocate: p is NULL");
  NULL_CASE(cuemm_host_free(NULL, buf), "cuemm_host_free: manager is NULL");
  NULL_CASE(cuemm_host_device_pointer(NULL, buf, &d), "cuemm_host_get_device_pointer: manager is NULL");
  NULL_CASE(cuemm_host_device_pointer(m, buf, NULL), "cuemm_host_get_device_pointer: dptr is NULL");
  NULL_CASE(cuemm_host_device_pointer(m, NULL, &d), "cuemm_host_get_device_pointer: p is NULL");
  NULL_CASE(cuemm_host_pin(NULL, buf, sizeof buf, 0), "cuemm_host_pin: manager is NULL");
  NULL_CASE(cuemm_host_pin(m, NULL, sizeof buf, 0), "cuemm_host_pin: p is NULL");
  NULL_CASE(cuemm_host_unpin(NULL, buf), "cuemm_host_unpin: manager is NULL");
  NULL_CASE(cuemm_get_memory_info(NULL, &f, &t), "cuemm_get_memory_info: manager is NULL");
  NULL_CASE(cuemm_get_stats(NULL, &s), "cuemm_get_stats: manager is NULL");
  NULL_CASE(cuemm_get_stats(m, NULL), "cuemm_get_stats: s is NULL");
  NULL_CASE(cuemm_get_held(NULL, &f), "cuemm_get_held: manager is NULL");
  NULL_CASE(cuemm_get_held(m, NULL), "cuemm_get_held: held is NULL");
  NULL_CASE(cuemm_reset(NULL), "cuemm_reset: manager is NULL");
  NULL_CASE(cuemm_config_init(NULL), "cuemm_config_init: cfg is NULL");
  NULL_CASE(cuemm_driver_get_info(NULL), "cuemm_driver_get_info: info is NULL");
  /* The drop-in finds m (the current context's manager), then refuses. */
  NULL_CASE(cuemm_mem_alloc(NULL, 256), "cuemm_mem_alloc: p is NULL");
  NULL_CASE(cuemm_host_free(m, NULL), "is not the start of an allocation of this manager");
  ok(cuemm_context(NULL) == NULL, "cuemm_context(NULL) is NULL");
  is(cuemm_get_memory_info(m, NULL, NULL), CUDA_SUCCESS, "cuemm_get_memory_info with both out-pointers NULL is allowed");
  is(cuemm_host_unpin(m, NULL), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "cuemm_host_unpin(m, NULL): not registered");
  is(d, 0, "no out-pointer was written");
  ok(h == NULL, "no host out-pointer was written");
  s = test_stats(m);
  ok(same_stats(&before, &s), "NULL arguments changed no statistic");
  is(current_context(), primary, "the current context is untouched");
  CHECK_CU(cuemm_destroy(m));
}

/* ---- frees of memory the manager does not own ---------------------------------- */

static void foreign_frees(void)
{
  cuemm_manager *m = make_on(NULL, 10, 0.2);
  CUdeviceptr p;
  CHECK_CU(cuemm_allocate(m, 4096, &p));
  void *hp = NULL;
  CHECK_CU(cuemm_host_allocate(m, 4096, 0, &hp));

  /* A second manager, on a second context. */
  CUdevice dev;
  CUcontext ctx2;
  CHECK_CU(cuCtxGetDevice(&dev));
  CHECK_CU(cuCtxCreate(&ctx2, NULL, 0, dev));
  CHECK_CU(cuCtxPopCurrent(NULL));
  cuemm_manager *m2 = make_on(ctx2, 10, 0.2);
  CUdeviceptr p2;
  CHECK_CU(cuemm_allocate(m2, 4096, &p2));

  cuemm_stats before = test_stats(m), before2 = test_stats(m2), s;

  /* Raw driver memory: refused, and left alone. */
  CUdeviceptr raw;
  CHECK_CU(cuMemAlloc(&raw, 8192));
  is(cuemm_free(m, raw), CUDA_ERROR_INVALID_VALUE, "free of a raw cuMemAlloc pointer is refused");
  like(cuemm_last_error(), "is not the start of an allocation of this manager", "message: not ours");
  s = test_stats(m);
  ok(same_stats(&before, &s), "stats unchanged after the raw pointer");
  is(cuMemsetD8(raw, 0x5a, 8192), CUDA_SUCCESS, "the raw allocation is still usable (cuMemsetD8)");
  unsigned char back[2] = {0, 0};
  CHECK_CU(cuMemcpyDtoH(&back[0], raw + 8191, 1));
  is(back[0], 0x5a, "and holds what was written");
  is(cuMemFree(raw), CUDA_SUCCESS, "the owner frees it with cuMemFree");

  is(cuemm_free(m, p + 256), CUDA_ERROR_INVALID_VALUE, "interior pointer (p + 256) refused");
  like(cuemm_last_error(), "interior pointer", "message mentions interior pointers");
  s = test_stats(m);
  ok(same_stats(&before, &s), "stats unchanged after the interior pointer");

  is(cuemm_free(m, 0), CUDA_ERROR_INVALID_VALUE, "free of 0 refused");
  like(cuemm_last_error(), "0x0 is not the start", "message names 0x0");
  s = test_stats(m);
  ok(same_stats(&before, &s), "stats unchanged after 0");

  is(cuemm_free(m, (CUdeviceptr)(uintptr_t)hp), CUDA_ERROR_INVALID_VALUE, "cuemm_free of cuemm_host_alloc memory refused");
  like(cuemm_last_error(), "is pinned host memory (cuemm_host_alloc), not device memory", "message names the kind mismatch");
  is(cuemm_host_free(m, (void *)(uintptr_t)p), CUDA_ERROR_INVALID_VALUE, "cuemm_host_free of device memory refused");
  like(cuemm_last_error(), "is device memory (cuemm_alloc), not pinned host memory", "message names the kind mismatch");
  s = test_stats(m);
  ok(same_stats(&before, &s), "stats unchanged after the kind mismatches");

  is(cuemm_free(m, p2), CUDA_ERROR_INVALID_VALUE, "another manager's pointer refused");
  is(cuemm_free(m2, p), CUDA_ERROR_INVALID_VALUE, "and the other way round");
  s = test_stats(m);
  ok(same_stats(&before, &s), "stats of the first manager unchanged");
  s = test_stats(m2);
  ok(same_stats(&before2, &s), "stats of the second manager unchanged");
  is(current_context(), primary, "the current context is untouched");

  CHECK_CU(cuemm_free(m2, p2));
  CHECK_CU(cuemm_destroy(m2));
  CHECK_CU(cuCtxDestroy(ctx2));

  /* Double free while pending, then after release. */
  is(cuemm_free(m, p), CUDA_SUCCESS, "first free accepted");
  before = test_stats(m);
  is(before.pending_count, 1, "and pending");
  is(cuemm_free(m, p), CUDA_ERROR_INVALID_VALUE, "second free while pending refused");
  like(cuemm_last_error(), "double free", "message: double free");
  s = test_stats(m);
  ok(same_stats(&before, &s), "stats unchanged by the double free");
  CHECK_CU(cuemm_flush(m));
  before = test_stats(m);
  is(before.pending_count, 0, "flushed");
  is(cuemm_free(m, p), CUDA_ERROR_INVALID_VALUE, "free after release refused");
  like(cuemm_last_error(), "freed and released already", "message mentions released pointers");
  s = test_stats(m);
  ok(same_stats(&before, &s), "stats unchanged by the free after release");

  CHECK_CU(cuemm_host_free(m, hp));
  is(cuemm_host_free(m, hp), CUDA_ERROR_INVALID_VALUE, "double host free refused");
  like(cuemm_last_error(), "double free", "message: double free");
  CHECK_CU(cuemm_destroy(m));
}

/* ---- sizes ------------------------------------------------------------------ */

static void sizes(void)
{
  cuemm_manager *m = make_on(NULL, 10, 0.2);
  cuemm_stats s0 = test_stats(m), s;
  CUdeviceptr p = 0;
  char want[64];

  is(cuemm_allocate(m, 0, &p), CUDA_ERROR_INVALID_VALUE, "size 0: CUDA_ERROR_INVALID_VALUE");
  like(cuemm_last_error(), "size is 0", "message: size is 0");
  s = test_stats(m);
  is(s.alloc_failures, s0.alloc_failures + 1, "counted as an allocation failure");
  is(s.allocs, s0.allocs, "no allocation counted");

  void *h = NULL;
  is(cuemm_host_allocate(m, 0, 0, &h), CUDA_ERROR_INVALID_VALUE, "host size 0: CUDA_ERROR_INVALID_VALUE");
  is(test_stats(m).alloc_failures, s0.alloc_failures + 2, "counted too");

  is(cuemm_allocate(m, SIZE_MAX, &p), CUDA_ERROR_OUT_OF_MEMORY, "SIZE_MAX: CUDA_ERROR_OUT_OF_MEMORY");
  snprintf(want, sizeof want, "%zu bytes", (size_t)SIZE_MAX);
  like(cuemm_last_error(), want, "message names the size");
  is(test_stats(m).alloc_failures, s0.alloc_failures + 3, "counted");

  size_t over = s0.total_bytes + 1;
  is(cuemm_allocate(m, over, &p), CUDA_ERROR_OUT_OF_MEMORY, "total + 1 bytes: CUDA_ERROR_OUT_OF_MEMORY");
  snprintf(want, sizeof want, "%zu bytes", over);
  like(cuemm_last_error(), want, "message names the size");
  s = test_stats(m);
  is(s.alloc_failures, s0.alloc_failures + 4, "counted");
  is(s.live_count, 0, "nothing live");
  is(p, 0, "out-pointer untouched by the failures");
  ok(h == NULL, "host out-pointer untouched");

  is(cuemm_allocate(m, 4096, &p), CUDA_SUCCESS, "the manager is still usable: alloc");
  is(cuemm_free(m, p), CUDA_SUCCESS, "and free");
  is(cuemm_flush(m), CUDA_SUCCESS, "and flush");
  s = test_stats(m);
  is(s.driver_frees, s0.driver_frees + 1, "the allocation was released");
  is(s.allocs, s0.allocs + 1, "one allocation in all");
  CHECK_CU(cuemm_destroy(m));
}

/* ---- defer scope underflow -------------------------------------------------- */

static void end_without_begin(void)
{
  cuemm_manager *m = make_on(NULL, 10, 0.2);
  is(cuemm_defer_cleanup_end(m), CUDA_ERROR_INVALID_VALUE, "end without begin: CUDA_ERROR_INVALID_VALUE");
  like(cuemm_last_error(), "no defer scope is open", "message says so");
  is(test_stats(m).defer_depth, 0, "defer_depth stays 0");
  CHECK_CU(cuemm_defer_cleanup_begin(m));
  CHECK_CU(cuemm_defer_cleanup_end(m));
  is(cuemm_defer_cleanup_end(m), CUDA_ERROR_INVALID_VALUE, "a second end after a balanced pair is refused");
  is(test_stats(m).defer_depth, 0, "defer_depth never wraps");
  CHECK_CU(cuemm_destroy(m));
}

/* ---- every driver entry point failing in turn (simcuda) ---------------------- */

typedef struct workload {
  CUcontext home;       /* the calling thread's context */
  const char *entry;    /* the entry point armed to fail */
  CUresult injected;
  unsigned nth;
  int bad;              /* violations seen */
  char first[640];      /* the first one, described */
  unsigned reported;    /* cuemm calls that returned the injected error */
} workload;

__attribute__((format(printf, 2, 3))) static void wl_bad(workload *w, const char *fmt, ...)
{
  if (w->bad++)
    return;
  int n = snprintf(w->first, sizeof w->first, "nth=%u: ", w->nth);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(w->first + n, sizeof w->first - (size_t)n, fmt, ap);
  va_end(ap);
}

/* Every cuemm call of the workload: returns CUDA_SUCCESS or the injected code,
 * a failure names the driver call, and the caller's context is unchanged. */
static CUresult wl_step(workload *w, CUresult r, const char *what)
{
  if (r != CUDA_SUCCESS) {
    if (r != w->injected)
      wl_bad(w, "%s returned %d, neither CUDA_SUCCESS nor the injected %d: %s", what, (int)r, (int)w->injected,
             cuemm_last_error());
    else if (!strstr(cuemm_last_error(), w->entry))
      wl_bad(w, "%s returned the injected error but its message does not name %s: \"%s\"", what, w->entry,
             cuemm_last_error());
    else
      w->reported++;
  }
  CUcontext c = current_context();
  if (c != w->home) {
    /* Only a call that reports a failing cuCtxPopCurrent may leave the
     * manager's context behind: it could not pop it, and it says so. */
    if (!(r == w->injected && strcmp(w->entry, "cuCtxPopCurrent") == 0 && strstr(cuemm_last_error(), w->entry)))
      wl_bad(w, "after %s (returned %d) the thread's current context is %p, not %p as before", what, (int)r,
             (void *)c, (void *)w->home);
    for (int i = 0; i < 8 && c != w->home; i++) {
      cuCtxPopCurrent(NULL);
      c = current_context();
    }
  }
  return r;
}
#define STEP(w, call) wl_step((w), (call), #call)

/* A manager on `target` (not current here) used the ways that reach each
 * driver entry point cuemm calls. */
static cuemm_manager *run_workload(workload *w, CUcontext target, void *pinbuf, size_t pinsize)
{
  cuemm_config cfg = test_config(2, 0.5);
  cuemm_manager *m = NULL;
  if (STEP(w, cuemm_manager_create(target, &cfg, &m)) != CUDA_SUCCESS) {
    if (m)
      wl_bad(w, "a failed cuemm_create left *m = %p", (void *)m);
    return NULL;
  }
  CUdeviceptr p[5] = {0};
  for (int i = 0; i < 5; i++)
    if (STEP(w, cuemm_allocate(m, 4096 * (size_t)(i + 1), &p[i])) != CUDA_SUCCESS)
      p[i] = 0;
  for (int i = 0; i < 3; i++) /* the third crosses max_pending_count 2 */
    if (p[i])
      STEP(w, cuemm_free(m, p[i]));
  void *h = NULL;
  if (STEP(w, cuemm_host_allocate(m, 8192, CU_MEMHOSTALLOC_DEVICEMAP, &h)) == CUDA_SUCCESS) {
    CUdeviceptr hd = 0;
    if (STEP(w, cuemm_host_device_pointer(m, h, &hd)) == CUDA_SUCCESS && hd == 0)
      wl_bad(w, "cuemm_host_get_device_pointer succeeded with a 0 device pointer");
    STEP(w, cuemm_host_free(m, h));
  }
  if (STEP(w, cuemm_host_pin(m, pinbuf, pinsize, 0)) == CUDA_SUCCESS)
    STEP(w, cuemm_host_unpin(m, pinbuf));
  size_t f = 0, t = 0;
  if (STEP(w, cuemm_get_memory_info(m, &f, &t)) == CUDA_SUCCESS && (t == 0 || f > t))
    wl_bad(w, "cuemm_get_memory_info: free %zu, total %zu", f, t);
  if (p[3])
    STEP(w, cuemm_free(m, p[3]));
  STEP(w, cuemm_flush(m));
  STEP(w, cuemm_reset(m));
  return m;
}

static void fail_each_entry_point(void)
{
  static const char *const entries[] = {
    "cuCtxGetCurrent", "cuCtxPushCurrent", "cuCtxPopCurrent", "cuCtxGetId", "cuCtxGetDevice",
    "cuMemGetInfo", "cuMemAlloc", "cuMemFree", "cuMemHostAlloc", "cuMemFreeHost",
    "cuMemHostGetDevicePointer", "cuMemHostRegister", "cuMemHostUnregister",
  };
  const int n = (int)(sizeof entries / sizeof entries[0]);
  if (!sim_present) {
    skip(n, SIM_REASON);
    return;
  }
  /* The workload's context: not current on this thread. */
  CUdevice dev;
  CUcontext target;
  CHECK_CU(cuCtxGetDevice(&dev));
  CHECK_CU(cuCtxCreate(&target, NULL, 0, dev));
  CHECK_CU(cuCtxPopCurrent(NULL));
  size_t pinsize = 3 * 4096;
  void *pinbuf = malloc(pinsize);
  if (!pinbuf) {
    printf("Bail out! no host memory\n");
    exit(1);
  }

  for (int e = 0; e < n; e++) {
    const char *entry = entries[e];
    CUresult code = strcmp(entry, "cuMemAlloc") == 0 ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_UNKNOWN;
    int bad_iterations = 0;
    char first[768] = "";
    unsigned iterations = 0, reported = 0;
    for (unsigned nth = 1; nth <= 1000; nth++) {
      simcuda_live base, after;
      sim.live_get(&base);
      workload w = { .home = primary, .entry = entry, .injected = code, .nth = nth };
      if (sim.fail(entry, nth, code) != 0) {
        wl_bad(&w, "simcuda does not know the entry point %s", entry);
        bad_iterations++;
        snprintf(first, sizeof first, "%s", w.first);
        break;
      }
      unsigned long c0 = sim.calls(entry);
      cuemm_manager *m = run_workload(&w, target, pinbuf, pinsize);
      unsigned long made = sim.calls(entry) - c0;
      sim.fail_clear();
      if (nth == 1 && made == 0)
        wl_bad(&w, "the workload never called %s", entry);
      if (m) {
        CUresult r;
        if ((r = cuemm_flush(m)) != CUDA_SUCCESS)
          wl_bad(&w, "cleanup cuemm_flush failed (%d): %s", (int)r, cuemm_last_error());
        if ((r = cuemm_reset(m)) != CUDA_SUCCESS)
          wl_bad(&w, "cleanup cuemm_reset failed (%d): %s", (int)r, cuemm_last_error());
        if ((r = cuemm_destroy(m)) != CUDA_SUCCESS)
          wl_bad(&w, "cleanup cuemm_destroy failed (%d): %s", (int)r, cuemm_last_error());
      }
      CUcontext c = current_context();
      if (c != primary)
        wl_bad(&w, "after cleanup the current context is %p, not %p", (void *)c, (void *)primary);
      sim.live_get(&after);
      if (!sim_live_same(&base, &after))
        wl_bad(&w, "simcuda live objects changed: device allocations %zu -> %zu, host allocations %zu -> %zu, "
               "registered ranges %zu -> %zu, contexts %zu -> %zu",
               base.device_allocs, after.device_allocs, base.host_allocs, after.host_allocs,
               base.host_registered, after.host_registered, base.contexts, after.contexts);
      iterations++;
      reported += w.reported;
      if (w.bad && bad_iterations++ == 0)
        snprintf(first, sizeof first, "%s", w.first);
      if (made < nth)
        break; /* the armed failure did not fire: every call was covered */
    }
    ok(bad_iterations == 0, "%s failing at each of its calls in turn: tolerated, reported, nothing leaked", entry);
    tap_diag("%s: %u iterations, %u cuemm calls returned the injected error, %d iterations went wrong",
             entry, iterations, reported, bad_iterations);
    if (bad_iterations)
      tap_diag("%s: first problem: %s", entry, first);
  }
  CHECK_CU(cuCtxDestroy(target));
  free(pinbuf);
}

/* ---- a cuMemFree failing inside a threshold flush (simcuda) ------------------ */

static void failing_threshold_flush(void)
{
  if (!sim_present) {
    skip(9, SIM_REASON);
    return;
  }
  cuemm_manager *m = make_on(NULL, 3, 0.5);
  CUdeviceptr p[4];
  for (int i = 0; i < 4; i++)
    CHECK_CU(cuemm_allocate(m, 1024, &p[i]));
  for (int i = 0; i < 3; i++)
    CHECK_CU(cuemm_free(m, p[i]));
  is(test_stats(m).pending_count, 3, "three frees pending at the threshold");
  sim.fail("cuMemFree", 2, CUDA_ERROR_UNKNOWN);
  unsigned long frees0 = sim.calls("cuMemFree");
  is(cuemm_free(m, p[3]), CUDA_ERROR_UNKNOWN, "the free that triggers the flush returns the driver's error");
  like(cuemm_last_error(), "cuMemFree", "message names cuMemFree");
  sim.fail_clear();
  cuemm_stats s = test_stats(m);
  is(sim.calls("cuMemFree") - frees0, 2, "the flush stopped at the failing cuMemFree");
  is(s.pending_count, 3, "the failed free and the two after it stay pending");
  is(s.free_failures, 1, "free_failures == 1");
  is(s.driver_frees, 1, "one was released before the failure");
  is(s.frees, 4, "all four frees were accepted");
  uint64_t df = s.driver_frees;
  CHECK_CU(cuemm_flush(m));
  s = test_stats(m);
  ok(s.driver_frees - df == 3 && s.pending_count == 0,
     "the next cuemm_flush releases exactly the three (driver_frees +%llu, pending %zu)",
     (unsigned long long)(s.driver_frees - df), s.pending_count);
  CHECK_CU(cuemm_destroy(m));
}

/* ---- cuemm_destroy while cuMemFree fails (simcuda) --------------------------- */

static void destroy_leaks(void)
{
  if (!sim_present) {
    skip(8, SIM_REASON);
    return;
  }
  simcuda_live base, after;
  sim.live_get(&base);
  size_t count0 = sim.live_count();
  cuemm_manager *m = make_on(NULL, 10, 0.5);
  CUdeviceptr p[3];
  for (int i = 0; i < 3; i++)
    CHECK_CU(cuemm_allocate(m, 2048, &p[i]));
  CHECK_CU(cuemm_free(m, p[0])); /* one pending, two live */
  sim.fail_from("cuMemFree", 1, CUDA_ERROR_UNKNOWN);
  CUresult r = cuemm_destroy(m);
  sim.fail_clear();
  is(r, CUDA_ERROR_UNKNOWN, "cuemm_destroy returns the driver's error");
  like(cuemm_last_error(), "leaked", "message says the memory is leaked");
  like(cuemm_last_error(), "3 driver frees failed", "message counts the three failures");

  char *report = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&report, &len);
  if (!f) {
    printf("Bail out! open_memstream failed\n");
    exit(1);
  }
  sim.live_report(f);
  fclose(f);
  int seen = 0;
  for (int i = 0; i < 3; i++) {
    char addr[32];
    snprintf(addr, sizeof addr, "0x%llx ", (unsigned long long)p[i]);
    seen += strstr(report, addr) != NULL;
  }
  is(seen, 3, "the three leaked allocations are in simcuda's live report");
  tap_diag("simcuda's live report after the failed destroy (the leak, as documented):");
  for (char *line = strtok(report, "\n"); line; line = strtok(NULL, "\n"))
    tap_diag("  %s", line);
  free(report);
  sim.live_get(&after);
  is(after.device_allocs, base.device_allocs + 3, "simcuda counts three leaked device allocations");

  int freed = 0;
  for (int i = 0; i < 3; i++)
    freed += cuMemFree(p[i]) == CUDA_SUCCESS;
  is(freed, 3, "freed by hand with cuMemFree");
  sim.live_get(&after);
  is(after.device_allocs, base.device_allocs, "device allocations back to the baseline");
  is(sim.live_count(), count0, "simcuda: every live object back to the baseline");
}

int main(void)
{
  sim_init();
  primary = test_primary_context(0);
  simcuda_live live0;
  if (sim_present)
    sim.live_get(&live0);

  null_arguments();
  foreign_frees();
  sizes();
  end_without_begin();
  fail_each_entry_point();
  failing_threshold_flush();
  destroy_leaks();

  is(current_context(), primary, "the main thread's context is still the primary context");
  sim_check_live_same(&live0);
  test_release_primary(0);
  return tap_done();
}
