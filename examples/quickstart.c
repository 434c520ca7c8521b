/* quickstart.c: cuemm in a driver-API program, end to end.
 *
 *   1. a manager for the primary context, configured from the environment
 *   2. frees held back, then released together when the threshold passes
 *   3. a defer-cleanup scope around asynchronous work, so no free waits for
 *      the GPU inside the loop
 *   4. the statistics that show what happened
 *
 * Build: cc quickstart.c -lcuemm -lcuda (libcuemm loads the driver itself;
 * -lcuda is for the program's own driver calls).
 * `quickstart --probe` only checks that a driver and a device are usable and
 * exits 0, or prints why not and exits 3.
 */
#include <stdio.h>
#include <string.h>

#include <cuda.h>
#include <cuemm.h>

#define CHECK(call)                                                            \
  do {                                                                         \
    CUresult r_ = (call);                                                      \
    if (r_ != CUDA_SUCCESS) {                                                  \
      fprintf(stderr, "quickstart: %s failed (%d): %s\n", #call, (int)r_,      \
              cuemm_last_error());                                             \
      return 1;                                                                \
    }                                                                          \
  } while (0)

static void print_stats(const char *when, cuemm_manager *m)
{
  cuemm_stats s;
  cuemm_get_stats(m, &s);
  printf("  %-34s live %2zu (%8zu B)  pending %2zu (%8zu B)  driver frees %3llu  flushes %2llu\n", when,
         s.live_count, s.live_bytes, s.pending_count, s.pending_bytes, (unsigned long long)s.driver_frees,
         (unsigned long long)s.flushes);
}

int main(int argc, char **argv)
{
  int probe = argc > 1 && strcmp(argv[1], "--probe") == 0;
  CUresult r = cuemm_driver_load();
  int ndev = 0;
  if (r == CUDA_SUCCESS && (r = cuDeviceGetCount(&ndev)) == CUDA_SUCCESS && ndev == 0)
    r = CUDA_ERROR_NO_DEVICE;
  if (r != CUDA_SUCCESS) {
    fprintf(stderr, "quickstart: no usable CUDA driver or device: %s\n",
            *cuemm_last_error() ? cuemm_last_error() : "no device");
    return 3;
  }
  if (probe)
    return 0;

  CUdevice dev;
  CUcontext ctx;
  char name[128];
  cuemm_driver_info info;
  CHECK(cuDeviceGet(&dev, 0));
  CHECK(cuDeviceGetName(name, sizeof name, dev));
  CHECK(cuemm_driver_get_info(&info));
  printf("cuemm %s on %s (driver %d.%d, %s)\n", cuemm_version_string(), name, info.version / 1000,
         info.version % 1000 / 10, info.path);
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));

  /* 1. A manager; CUEMM_MAX_PENDING_DEALLOCS_COUNT/_RATIO tune it. */
  cuemm_config cfg;
  CHECK(cuemm_config_init(&cfg));
  cuemm_manager *m;
  CHECK(cuemm_manager_create(ctx, &cfg, &m));
  cuemm_stats s;
  cuemm_get_stats(m, &s);
  printf("manager: %zu bytes of device memory; flush after %zu pending frees or %zu pending bytes\n",
         s.total_bytes, s.max_pending_count, s.max_pending_bytes);

  /* 2. Frees are queued; the one that passes the count threshold flushes. */
  enum { N = 64 };
  CUdeviceptr buf[N];
  size_t n = s.max_pending_count + 1 < N ? s.max_pending_count + 1 : N;
  for (size_t i = 0; i < n; i++)
    CHECK(cuemm_allocate(m, 1 << 20, &buf[i]));
  print_stats("after allocating:", m);
  for (size_t i = 0; i + 1 < n; i++)
    CHECK(cuemm_free(m, buf[i]));
  print_stats("after freeing all but one:", m);
  CHECK(cuemm_free(m, buf[n - 1]));
  print_stats("after the free past the threshold:", m);

  /* 3. Asynchronous work: inside the scope no free synchronizes, so the
   *    work queued on the stream runs back to back. */
  CUstream stream;
  CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CHECK(cuemm_defer_cleanup_begin(m));
  for (int i = 0; i < 32; i++) {
    CUdeviceptr tmp;
    CHECK(cuemm_allocate(m, 1 << 20, &tmp));
    CHECK(cuMemsetD8Async(tmp, (unsigned char)i, 1 << 20, stream));
    CHECK(cuemm_free(m, tmp)); /* queued: the memset may still be running */
  }
  print_stats("inside the defer scope:", m);
  CHECK(cuemm_defer_cleanup_end(m));
  CHECK(cuStreamSynchronize(stream));
  CHECK(cuemm_flush(m)); /* closing a scope does not flush by itself */
  print_stats("after the scope and a flush:", m);
  CHECK(cuStreamDestroy(stream));

  /* 4. Everything the manager saw. */
  cuemm_get_stats(m, &s);
  printf("totals: %llu allocations, %llu frees, %llu driver frees in %llu flushes, peak %zu live (%zu bytes)\n",
         (unsigned long long)s.allocs, (unsigned long long)s.frees, (unsigned long long)s.driver_frees,
         (unsigned long long)s.flushes, s.peak_count, s.peak_bytes);
  CHECK(cuemm_destroy(m));
  CHECK(cuCtxSetCurrent(NULL));
  CHECK(cuDevicePrimaryCtxRelease(dev));
  printf("done\n");
  return 0;
}
