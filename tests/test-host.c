/* test-host.c: pinned host memory.  Allocations (plain, mapped, portable,
 * write-combined) are freed through the same deferred queue as device
 * memory; pinning existing memory is undone at once, so a buffer can be
 * pinned, unpinned and pinned again inside a defer scope.
 */
#include <stdint.h>

#include "testutil.h"

int main(void)
{
  sim_init();
  test_primary_context(0);
  cuemm_config c = test_config(2, 0.2);
  cuemm_manager *m;
  CHECK_CU(cuemm_manager_create(NULL, &c, &m));

  /* Allocation flags. */
  void *h[4] = { 0 };
  unsigned flags[4] = { 0, CU_MEMHOSTALLOC_DEVICEMAP, CU_MEMHOSTALLOC_PORTABLE,
                        CU_MEMHOSTALLOC_WRITECOMBINED | CU_MEMHOSTALLOC_PORTABLE };
  for (int i = 0; i < 4; i++) {
    is(cuemm_host_allocate(m, 8192, flags[i], &h[i]), CUDA_SUCCESS, "host alloc with flags 0x%x", flags[i]);
    /* A driver with unified addressing may leave PORTABLE out of what it
     * reports (all pinned memory is portable then): compare the rest. */
    unsigned got = 0, want = flags[i] & ~(unsigned)CU_MEMHOSTALLOC_PORTABLE;
    CHECK_CU(cuMemHostGetFlags(&got, h[i]));
    ok((got & want) == want, "driver reports flags 0x%x for 0x%x", got, flags[i]);
  }
  is(cuemm_host_allocate(m, 16, 0x100, &h[0]), CUDA_ERROR_INVALID_VALUE, "unknown flag refused");
  like(cuemm_last_error(), "unknown flags 0x100", "message names the bad flags");
  is(cuemm_host_allocate(m, 0, 0, &h[0]), CUDA_ERROR_INVALID_VALUE, "size 0 refused");

  /* Mapped memory: the device sees the host's bytes. */
  CUdeviceptr d = 0;
  is(cuemm_host_device_pointer(m, h[1], &d), CUDA_SUCCESS, "device pointer of mapped memory");
  memset(h[1], 0x5A, 8192);
  unsigned char back[64];
  CHECK_CU(cuMemcpyDtoH(back, d + 100, sizeof back));
  ok(back[0] == 0x5A && back[63] == 0x5A, "device reads what the host wrote");
  CUdeviceptr dd;
  CHECK_CU(cuemm_allocate(m, 4096, &dd));
  CHECK_CU(cuMemsetD8(dd, 0x11, 4096));
  CHECK_CU(cuMemcpyDtoD(d, dd, 4096));
  ok(((unsigned char *)h[1])[0] == 0x11 && ((unsigned char *)h[1])[4095] == 0x11, "host sees what the device wrote");
  CHECK_CU(cuemm_free(m, dd));
  CHECK_CU(cuemm_flush(m));

  /* Frees of host allocations are deferred and count toward the thresholds. */
  cuemm_stats s0 = test_stats(m);
  is(s0.host_live_count, 4, "four host allocations live");
  is(s0.host_live_bytes, 4 * 8192, "their bytes");
  unsigned long fh0 = sim_calls("cuMemFreeHost");
  CHECK_CU(cuemm_host_free(m, h[0]));
  cuemm_stats s = test_stats(m);
  is(s.pending_count, s0.pending_count + 1, "host free queued");
  is(s.driver_frees, s0.driver_frees, "not released yet");
  if (sim_present)
    is(sim_calls("cuMemFreeHost") - fh0, 0, "no cuMemFreeHost yet");
  else
    skip(1, SIM_REASON);
  is(cuemm_host_free(m, h[0]), CUDA_ERROR_INVALID_VALUE, "double host free refused");
  is(cuemm_free(m, (CUdeviceptr)(uintptr_t)h[1]), CUDA_ERROR_INVALID_VALUE, "host memory to cuemm_free refused");
  like(cuemm_last_error(), "pinned host memory", "message says what it is");
  CHECK_CU(cuemm_host_free(m, h[1]));
  CHECK_CU(cuemm_host_free(m, h[2]));
  s = test_stats(m);
  is(s.pending_count, 0, "third pending free passes max 2 and flushes");
  if (sim_present)
    is(sim_calls("cuMemFreeHost") - fh0, 3, "three cuMemFreeHost in the batch");
  else
    skip(1, SIM_REASON);
  CHECK_CU(cuemm_host_free(m, h[3]));

  /* Pinning existing memory. */
  size_t len = 1 << 16;
  char *buf = aligned_alloc(4096, len);
  CHECK_CU(cuemm_defer_cleanup_begin(m));
  is(cuemm_host_pin(m, buf, len, CU_MEMHOSTREGISTER_DEVICEMAP), CUDA_SUCCESS, "pin inside a defer scope");
  is(test_stats(m).pinned_bytes, len, "pinned bytes");
  is(cuemm_host_pin(m, buf, len, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "pinning twice refused");
  unsigned long un0 = sim_calls("cuMemHostUnregister");
  is(cuemm_host_unpin(m, buf), CUDA_SUCCESS, "unpin inside the scope");
  if (sim_present)
    is(sim_calls("cuMemHostUnregister") - un0, 1, "unpinned at once, not deferred");
  else
    skip(1, SIM_REASON);
  is(cuemm_host_pin(m, buf, len, 0), CUDA_SUCCESS, "the same buffer pins again inside the scope");
  is(cuemm_host_unpin(m, buf), CUDA_SUCCESS, "and unpins");
  is(test_stats(m).pinned_count, 0, "nothing pinned");
  CHECK_CU(cuemm_defer_cleanup_end(m));
  is(cuemm_host_unpin(m, buf), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "unpin of memory not pinned");
  like(cuemm_last_error(), "not the start of a range this manager pinned", "message says so");
  is(cuemm_host_pin(m, buf, 0, 0), CUDA_ERROR_INVALID_VALUE, "pin of size 0 refused");
  is(cuemm_host_pin(m, buf, len, 0x80), CUDA_ERROR_INVALID_VALUE, "pin with unknown flags refused");

  /* Reset unpins at once. */
  CHECK_CU(cuemm_host_pin(m, buf, len, 0));
  CHECK_CU(cuemm_reset(m));
  is(test_stats(m).pinned_count, 0, "reset unpinned the buffer");
  is(cuemm_host_pin(m, buf, len, 0), CUDA_SUCCESS, "so it can be pinned again");
  CHECK_CU(cuemm_host_unpin(m, buf));
  free(buf);

  size_t live0 = 0;
  CHECK_CU(cuemm_destroy(m));
  if (sim_present) {
    simcuda_live l;
    sim.live_get(&l);
    is(l.host_allocs + l.host_registered + live0, 0, "simcuda: no host memory left allocated or registered");
  } else
    skip(1, SIM_REASON);
  test_release_primary(0);
  return tap_done();
}
