/* test-loadfail.c: loading the driver when it is missing or wrong.
 *
 * This program links libcuemm only (not libcuda), as an application on a
 * machine without a GPU would: every failure must come back as a CUresult and
 * a message naming the file tried, nothing half-loaded, and a later attempt
 * must succeed once the environment names a real driver.
 */
#include <stdlib.h>

#include "cuemm.h"
#include "tap.h"

int main(void)
{
  const char *simdir = getenv("CUEMM_SIM_DIR");
  const char *mode = getenv("CUEMM_TEST_DRIVER");
  int on_sim = simdir && (!mode || strcmp(mode, "system") != 0);

  setenv("CUEMM_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
  is(cuemm_driver_load(), CUDA_ERROR_NOT_FOUND, "a missing file: CUDA_ERROR_NOT_FOUND");
  like(cuemm_last_error(), "/nonexistent/libcuda.so.1", "message names the file");
  like(cuemm_last_error(), "CUEMM_LIBCUDA", "and the variable that named it");

  cuemm_manager *m = NULL;
  is(cuemm_manager_create(NULL, NULL, &m), CUDA_ERROR_NOT_FOUND, "creating a manager fails the same way");
  is(cuemm_mem_alloc(&(CUdeviceptr){0}, 16), CUDA_ERROR_NOT_FOUND, "so does the drop-in allocation");

  setenv("CUEMM_LIBCUDA", "libm.so.6", 1);
  is(cuemm_driver_load(), CUDA_ERROR_NOT_FOUND, "a library that is not a driver: refused");
  like(cuemm_last_error(), "is not a CUDA driver", "message says it is not a driver");

  cuemm_driver_info info;
  is(cuemm_driver_get_info(&info), CUDA_ERROR_NOT_FOUND, "no info while nothing is loaded");

  /* The simulated driver can pose as an old or incomplete driver. */
  char path[4096] = "";
  if (on_sim) {
    snprintf(path, sizeof path, "%s/libcuda.so.1", simdir);
    setenv("CUEMM_LIBCUDA", path, 1);
    setenv("SIMCUDA_DRIVER_VERSION", "11080", 1);
    is(cuemm_driver_load(), CUDA_ERROR_NOT_SUPPORTED, "a driver for CUDA 11.8: CUDA_ERROR_NOT_SUPPORTED");
    like(cuemm_last_error(), "reports version 11080; cuemm needs 12000", "message gives both versions");
    unsetenv("SIMCUDA_DRIVER_VERSION");
    setenv("SIMCUDA_HIDE", "cuMemAlloc", 1);
    is(cuemm_driver_load(), CUDA_ERROR_NOT_SUPPORTED, "a driver lacking cuMemAlloc: CUDA_ERROR_NOT_SUPPORTED");
    like(cuemm_last_error(), "lacks cuMemAlloc", "message names the entry point");
    /* Optional entry points missing: the driver still loads. */
    setenv("SIMCUDA_HIDE", "cuIpcGetMemHandle,cuMemCreate,cuMemAllocAsync,cuMemAllocManaged,cuMemPrefetchAsync", 1);
  } else {
    unsetenv("CUEMM_LIBCUDA");
    skip(4, "posing as an old driver needs the simulated driver");
  }
  is(cuemm_driver_load(), CUDA_SUCCESS, "a later attempt with a driver succeeds");
  is(cuemm_driver_get_info(&info), CUDA_SUCCESS, "driver info");
  ok(info.version >= 12000, "driver version %d >= 12000", info.version);
  like(info.path, "libcuda.so.1", "loaded file: %s", info.path);
  if (on_sim)
    ok(!info.vmm && !info.ipc && !info.async, "a driver without the optional entry points loads, without them "
       "(vmm %d, ipc %d, async %d)", info.vmm, info.ipc, info.async);
  else
    ok(info.vmm && info.ipc && info.async, "optional entry points present (vmm %d, ipc %d, async %d)", info.vmm,
       info.ipc, info.async);
  if (on_sim)
    ok(!info.managed && !info.prefetch && info.concurrent_managed, "without cuMemAllocManaged and "
       "cuMemPrefetchAsync: managed %d, prefetch %d (the device would: concurrent_managed %d)", info.managed,
       info.prefetch, info.concurrent_managed);
  else
    ok(info.managed && info.prefetch, "managed memory and prefetch present (managed %d, prefetch %d)",
       info.managed, info.prefetch);
  is(cuemm_driver_get_info(NULL), CUDA_ERROR_INVALID_VALUE, "NULL info refused");
  return tap_done();
}
