/* jit_launch.c: the shape of a JIT runtime's launch loop.
 *
 * A runtime that compiles and launches kernels allocates temporaries for
 * each launch (scratch buffers, argument staging) and drops them as soon as
 * the launch is queued.  Freeing with cuMemFree there would wait for the GPU
 * at every launch; with cuemm the frees are queued, and a defer scope around
 * the loop guarantees none of them is released while the stream still runs.
 * Here asynchronous copies and memsets stand in for the kernels.
 *
 * Uses the drop-in calls (cuemm_mem_alloc / cuemm_mem_free), which find the
 * manager of the current context, so a runtime can swap them for
 * cuMemAlloc / cuMemFree one for one.
 */
#include <stdio.h>

#include <cuda.h>
#include <cuemm.h>

#define CHECK(call)                                                            \
  do {                                                                         \
    CUresult r_ = (call);                                                      \
    if (r_ != CUDA_SUCCESS) {                                                  \
      fprintf(stderr, "jit_launch: %s failed (%d): %s\n", #call, (int)r_,      \
              cuemm_last_error());                                             \
      return 1;                                                                \
    }                                                                          \
  } while (0)

enum { LAUNCHES = 200, N = 1 << 16 };

/* One "kernel launch": stage the input, scratch, output; temporaries freed at
 * once, as a runtime's argument marshalling would. */
static CUresult launch(CUdeviceptr in, CUdeviceptr out, int step, CUstream s)
{
  CUdeviceptr scratch, staged;
  CUresult r;
  if ((r = cuemm_mem_alloc(&scratch, N)) != CUDA_SUCCESS)
    return r;
  if ((r = cuemm_mem_alloc(&staged, N)) != CUDA_SUCCESS) {
    cuemm_mem_free(scratch);
    return r;
  }
  if ((r = cuMemcpyDtoDAsync(staged, in, N, s)) == CUDA_SUCCESS &&
      (r = cuMemsetD8Async(scratch, (unsigned char)step, N, s)) == CUDA_SUCCESS)
    r = cuMemcpyDtoDAsync(out, scratch, N, s);
  cuemm_mem_free(staged);   /* queued behind the work that uses it */
  cuemm_mem_free(scratch);
  return r;
}

int main(void)
{
  CUdevice dev;
  CUcontext ctx;
  CHECK(cuemm_driver_load());
  CHECK(cuDeviceGet(&dev, 0));
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  cuemm_manager *m;
  CHECK(cuemm_get(&m)); /* the current context's manager, from the environment */

  CUstream s;
  CUdeviceptr in, out;
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CHECK(cuemm_mem_alloc(&in, N));
  CHECK(cuemm_mem_alloc(&out, N));
  CHECK(cuMemsetD8(in, 1, N));

  cuemm_stats before, inside, after;
  cuemm_get_stats(m, &before);
  CHECK(cuemm_defer_cleanup_begin(m));
  CUresult r = CUDA_SUCCESS;
  for (int i = 0; i < LAUNCHES && r == CUDA_SUCCESS; i++)
    r = launch(in, out, i, s);
  cuemm_get_stats(m, &inside);
  cuemm_defer_cleanup_end(m); /* on every path, the failing one too */
  CHECK(r);
  CHECK(cuStreamSynchronize(s));
  CHECK(cuemm_flush(m));
  cuemm_get_stats(m, &after);

  unsigned char last[4];
  CHECK(cuMemcpyDtoH(last, out, sizeof last));
  printf("%d launches, %d temporaries: %llu released inside the loop, %llu after it; output byte %u (expected %u)\n",
         LAUNCHES, 2 * LAUNCHES, (unsigned long long)(inside.driver_frees - before.driver_frees),
         (unsigned long long)(after.driver_frees - inside.driver_frees), last[0], (LAUNCHES - 1) & 0xFF);

  CHECK(cuemm_mem_free(in));
  CHECK(cuemm_mem_free(out));
  CHECK(cuStreamDestroy(s));
  CHECK(cuemm_destroy(m));
  CHECK(cuCtxSetCurrent(NULL));
  CHECK(cuDevicePrimaryCtxRelease(dev));
  return last[0] == ((LAUNCHES - 1) & 0xFF) && inside.driver_frees == before.driver_frees ? 0 : 1;
}
