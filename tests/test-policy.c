/* test-policy.c: Numba's deferred-deallocation scenarios, counted.
 *
 * Thresholds (strict, after the append), defer scopes (nesting, holding back
 * threshold, explicit and out-of-memory flushes, balanced on early exits),
 * the out-of-memory flush and single retry, reset, and the statistics that
 * report all of it.  Driver calls are counted with the manager's own
 * statistics (so the checks run on a GPU too) and, on simcuda, with the
 * driver's call counters as well.
 */
#include <stdint.h>

#include "testutil.h"

static cuemm_manager *make(size_t count, double ratio)
{
  cuemm_config c = test_config(count, ratio);
  cuemm_manager *m = NULL;
  CHECK_CU(cuemm_manager_create(NULL, &c, &m));
  return m;
}

static void alloc_n(cuemm_manager *m, CUdeviceptr *p, int n, size_t size)
{
  for (int i = 0; i < n; i++)
    CHECK_CU(cuemm_allocate(m, size, &p[i]));
}

static void count_threshold(void)
{
  cuemm_manager *m = make(10, 0.2);
  CUdeviceptr p[11];
  alloc_n(m, p, 11, 4096);
  unsigned long frees0 = sim_calls("cuMemFree");
  for (int i = 0; i < 10; i++)
    CHECK_CU(cuemm_free(m, p[i]));
  cuemm_stats s = test_stats(m);
  is(s.pending_count, 10, "ten frees stay pending");
  is(s.pending_bytes, 10 * 4096, "pending bytes are the ten sizes");
  is(s.driver_frees, 0, "no driver free yet");
  if (sim_present)
    is(sim_calls("cuMemFree") - frees0, 0, "simcuda saw no cuMemFree");
  else
    skip(1, SIM_REASON);
  CHECK_CU(cuemm_free(m, p[10]));
  s = test_stats(m);
  is(s.pending_count, 0, "the eleventh free flushes the queue");
  is(s.driver_frees, 11, "all eleven released");
  is(s.flushes, 1, "in exactly one batch");
  if (sim_present)
    is(sim_calls("cuMemFree") - frees0, 11, "simcuda saw eleven cuMemFree calls");
  else
    skip(1, SIM_REASON);
  is(s.live_count, 0, "nothing live");
  CUdeviceptr base;
  size_t size;
  is(cuMemGetAddressRange(&base, &size, p[0]), CUDA_ERROR_NOT_FOUND, "the driver no longer knows the first pointer");
  CHECK_CU(cuemm_destroy(m));
}

static void byte_threshold(void)
{
  cuemm_manager *m = make(1000, 0.01);
  cuemm_stats s = test_stats(m);
  size_t limit = (size_t)(0.01 * (double)s.total_bytes);
  is(s.max_pending_bytes, limit, "byte limit is floor(ratio x total)");
  if (s.total_bytes == ((size_t)1 << 30))
    is(s.max_pending_bytes, 10737418, "1 GiB x 0.01 = 10737418 bytes");
  else
    skip(1, "device is not simcuda's 1 GiB one");
  size_t half = limit / 2;
  CUdeviceptr a, b, c;
  CHECK_CU(cuemm_allocate(m, half, &a));
  CHECK_CU(cuemm_allocate(m, limit - half, &b));
  CHECK_CU(cuemm_allocate(m, 1, &c));
  CHECK_CU(cuemm_free(m, a));
  CHECK_CU(cuemm_free(m, b));
  s = test_stats(m);
  is(s.pending_bytes, limit, "pending exactly at the limit");
  is(s.driver_frees, 0, "stays pending");
  CHECK_CU(cuemm_free(m, c));
  s = test_stats(m);
  is(s.driver_frees, 3, "one byte more flushes all three");
  is(s.pending_bytes, 0, "queue empty");
  CHECK_CU(cuemm_destroy(m));
}

static void zero_count(void)
{
  cuemm_manager *m = make(0, 1.0);
  CUdeviceptr p;
  CHECK_CU(cuemm_allocate(m, 256, &p));
  CHECK_CU(cuemm_free(m, p));
  cuemm_stats s = test_stats(m);
  is(s.driver_frees, 1, "max_pending_count 0: every free releases at once");
  CHECK_CU(cuemm_destroy(m));
}

static void scopes(void)
{
  cuemm_manager *m = make(10, 0.2);
  CUdeviceptr p[30];
  alloc_n(m, p, 30, 1024);
  CHECK_CU(cuemm_defer_cleanup_begin(m));
  CHECK_CU(cuemm_defer_cleanup_begin(m));
  is(test_stats(m).defer_depth, 2, "two scopes open");
  for (int i = 0; i < 20; i++)
    CHECK_CU(cuemm_free(m, p[i]));
  cuemm_stats s = test_stats(m);
  is(s.pending_count, 20, "twenty frees past the count threshold stay queued");
  is(s.driver_frees, 0, "threshold flush held back");
  is(cuemm_flush(m), CUDA_SUCCESS, "explicit flush inside the scopes succeeds");
  is(test_stats(m).driver_frees, 0, "but releases nothing");

  /* Out of memory inside the scopes: the retry happens, the flush does not. */
  if (sim_present) {
    sim.fail_from("cuMemAlloc", 1, CUDA_ERROR_OUT_OF_MEMORY);
    CUdeviceptr q = 0;
    is(cuemm_allocate(m, 4096, &q), CUDA_ERROR_OUT_OF_MEMORY, "allocation failing twice reports out of memory");
    sim.fail_clear();
    like(cuemm_last_error(), "defer scope is open", "message says frees were held back");
    s = test_stats(m);
    is(s.oom_retries, 1, "retried once");
    is(s.driver_frees, 0, "no flush inside the scope");
    is(s.pending_count, 20, "queue intact");
  } else
    skip(5, SIM_REASON);

  CHECK_CU(cuemm_defer_cleanup_end(m));
  CHECK_CU(cuemm_free(m, p[20]));
  is(test_stats(m).driver_frees, 0, "one scope still open: still held");
  CHECK_CU(cuemm_defer_cleanup_end(m));
  s = test_stats(m);
  is(s.defer_depth, 0, "scopes closed");
  is(s.driver_frees, 0, "closing the outermost scope does not flush by itself");
  CHECK_CU(cuemm_free(m, p[21]));
  s = test_stats(m);
  is(s.driver_frees, 22, "the next free past the threshold releases all 22");
  is(s.flushes, 1, "in one batch");
  for (int i = 22; i < 30; i++)
    CHECK_CU(cuemm_free(m, p[i]));
  CHECK_CU(cuemm_flush(m));
  is(test_stats(m).driver_frees, 30, "explicit flush releases the rest");
  CHECK_CU(cuemm_destroy(m));
}

/* A function shaped like error-handling code: it leaves its scope on every
 * path, the early one included. */
static CUresult scoped_work(cuemm_manager *m, int fail_early)
{
  CUresult r = cuemm_defer_cleanup_begin(m);
  if (r != CUDA_SUCCESS)
    return r;
  CUdeviceptr p;
  r = cuemm_allocate(m, fail_early ? 0 : 512, &p); /* size 0 fails */
  if (r != CUDA_SUCCESS)
    goto out;
  r = cuemm_free(m, p);
out:
  cuemm_defer_cleanup_end(m);
  return r;
}

static void early_exit(void)
{
  cuemm_manager *m = make(10, 0.2);
  is(scoped_work(m, 1), CUDA_ERROR_INVALID_VALUE, "early exit path returns its error");
  is(test_stats(m).defer_depth, 0, "counter balanced after the early exit");
  is(scoped_work(m, 0), CUDA_SUCCESS, "normal path");
  is(test_stats(m).defer_depth, 0, "counter balanced after the normal path");
  is(cuemm_defer_cleanup_end(m), CUDA_ERROR_INVALID_VALUE, "end without begin is an error");
  like(cuemm_last_error(), "no defer scope is open", "and says so");
  is(test_stats(m).defer_depth, 0, "never an underflow");
  CHECK_CU(cuemm_destroy(m));
}

/* Out of memory for real: frees pending in the queue hold the memory a new
 * allocation needs; the flush before the retry makes room. */
static void oom_retry(void)
{
  cuemm_manager *m = make(1000, 1.0);
  size_t free_b, total_b;
  CHECK_CU(cuemm_get_memory_info(m, &free_b, &total_b));
  size_t chunk = (free_b / 10) * 4;          /* two of them: 80% of free */
  chunk &= ~(size_t)0xFFFFF;
  CUdeviceptr a, b, c = 0;
  CHECK_CU(cuemm_allocate(m, chunk, &a));
  CHECK_CU(cuemm_allocate(m, chunk, &b));
  CHECK_CU(cuemm_free(m, a));
  CHECK_CU(cuemm_free(m, b));
  is(test_stats(m).pending_count, 2, "both frees pending");

  /* Inside a scope the same request fails cleanly. */
  CHECK_CU(cuemm_defer_cleanup_begin(m));
  is(cuemm_allocate(m, chunk + chunk / 2, &c), CUDA_ERROR_OUT_OF_MEMORY, "inside a defer scope: out of memory");
  like(cuemm_last_error(), "bytes", "message names the size");
  cuemm_stats s = test_stats(m);
  is(s.pending_count, 2, "the pending frees were held back");
  is(s.alloc_failures, 1, "failure counted");
  CHECK_CU(cuemm_defer_cleanup_end(m));

  is(cuemm_allocate(m, chunk + chunk / 2, &c), CUDA_SUCCESS, "outside: flush and retry succeed");
  s = test_stats(m);
  is(s.oom_retries, 2, "two retries in all");
  is(s.driver_frees, 2, "the retry's flush released both");
  is(s.live_bytes, chunk + chunk / 2, "the new allocation is live");
  CHECK_CU(cuemm_free(m, c));
  CHECK_CU(cuemm_destroy(m));
}

static void reset(void)
{
  cuemm_manager *m = make(10, 0.2);
  CUdeviceptr p[4];
  alloc_n(m, p, 4, 2048);
  CHECK_CU(cuemm_free(m, p[0]));
  CHECK_CU(cuemm_defer_cleanup_begin(m));
  is(cuemm_reset(m), CUDA_SUCCESS, "reset inside a scope");
  cuemm_stats s = test_stats(m);
  is(s.live_count, 0, "everything left the program's hands");
  is(s.pending_count, 4, "and waits in the queue");
  is(s.driver_frees, 0, "nothing freed inside the scope");
  CHECK_CU(cuemm_defer_cleanup_end(m));
  CHECK_CU(cuemm_reset(m));
  s = test_stats(m);
  is(s.driver_frees, 4, "reset outside the scope releases everything");
  is(s.pending_count, 0, "queue empty");
  is(cuemm_free(m, p[1]), CUDA_ERROR_INVALID_VALUE, "a pointer from before the reset is no longer owned");
  CHECK_CU(cuemm_destroy(m));
}

static void peak_and_destroy_note(void)
{
  cuemm_manager *m = make(10, 0.2);
  CUdeviceptr p[3];
  alloc_n(m, p, 3, 1000);
  CHECK_CU(cuemm_free(m, p[0]));
  cuemm_stats s = test_stats(m);
  is(s.peak_count, 3, "peak count");
  is(s.peak_bytes, 3000, "peak bytes");
  is(s.live_bytes, 2000, "live bytes");
  is(s.allocs, 3, "allocs");
  is(s.frees, 1, "frees");
  unsigned long frees0 = sim_calls("cuMemFree");
  is(cuemm_destroy(m), CUDA_SUCCESS, "destroy with two outstanding allocations");
  like(cuemm_last_error(), "freed 2 outstanding allocations (2000 bytes)", "destroy reports what was outstanding");
  if (sim_present)
    is(sim_calls("cuMemFree") - frees0, 3, "destroy released the pending one and the two outstanding");
  else
    skip(1, SIM_REASON);
}

int main(void)
{
  sim_init();
  test_primary_context(0);
  size_t live0 = sim_live_baseline();
  count_threshold();
  byte_threshold();
  zero_count();
  scopes();
  early_exit();
  oom_retry();
  reset();
  peak_and_destroy_note();
  sim_check_nothing_left(live0);
  test_release_primary(0);
  return tap_done();
}
