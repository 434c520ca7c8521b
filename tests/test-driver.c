/* test-driver.c: how cuemm loads and resolves the driver: a failing
 * cuGetProcAddress or cuInit is reported with the entry point's name and
 * leaves nothing loaded, a later attempt succeeds, and the table resolved
 * is the driver the program itself talks to.
 */
#include "testutil.h"

int main(void)
{
  sim_init();
  if (sim_present) {
    sim.calls_reset();
    /* The third entry point cuemm resolves is cuGetErrorName. */
    sim.fail("cuGetProcAddress", 3, CUDA_ERROR_NOT_FOUND);
    is(cuemm_driver_load(), CUDA_ERROR_NOT_SUPPORTED, "a required entry point missing: CUDA_ERROR_NOT_SUPPORTED");
    like(cuemm_last_error(), "lacks cuGetErrorName", "message names the entry point");
    is(sim.calls("cuGetProcAddress"), 3, "resolution stopped at the missing entry");
    is(sim.calls("cuInit"), 0, "cuInit was not called on a half-resolved driver");

    sim.fail("cuInit", 1, CUDA_ERROR_NO_DEVICE);
    is(cuemm_driver_load(), CUDA_ERROR_NO_DEVICE, "cuInit failing: its CUresult");
    like(cuemm_last_error(), "cuInit(0) failed", "message names cuInit");
    like(cuemm_last_error(), "CUDA_ERROR_NO_DEVICE", "and the error's name");
    sim.fail_clear();
  } else
    skip(7, SIM_REASON);

  is(cuemm_driver_load(), CUDA_SUCCESS, "the driver loads");
  cuemm_driver_info info;
  CHECK_CU(cuemm_driver_get_info(&info));
  int version = 0;
  CHECK_CU(cuDriverGetVersion(&version));
  is(info.version, version, "cuemm sees the driver the program sees (version %d)", version);
  is(info.api_version, 12000, "entry points resolved at API version 12000");
  if (sim_present) {
    unsigned long n = sim.calls("cuGetProcAddress");
    CHECK_CU(cuemm_driver_load());
    is(sim.calls("cuGetProcAddress"), n, "a second load resolves nothing again");
  } else
    skip(1, SIM_REASON);

  /* The resolved table works: an allocation through cuemm is one the driver
   * the program links knows. */
  test_primary_context(0);
  CUdeviceptr p, base;
  size_t size;
  CHECK_CU(cuemm_mem_alloc(&p, 1000));
  is(cuMemGetAddressRange(&base, &size, p), CUDA_SUCCESS, "the program's driver knows cuemm's allocation");
  ok(base == p && size >= 1000, "at the same address, %zu bytes", size);
  CHECK_CU(cuemm_mem_free(p));
  cuemm_manager *m;
  CHECK_CU(cuemm_get(&m));
  CHECK_CU(cuemm_destroy(m));
  test_release_primary(0);
  like(cuemm_version_string(), "0.", "version string %s", cuemm_version_string());
  return tap_done();
}
