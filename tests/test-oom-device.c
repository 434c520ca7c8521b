/* test-oom-device.c: an out-of-memory message says where and how much.
 *
 * When one rank of many runs out of memory, its log line is all an operator
 * has: the message of every device out-of-memory failure names the device
 * (ordinal and PCI bus id) and gives the bytes requested, the bytes the
 * manager holds and what the driver says is free on the device.  Checked on
 * the last device (device 1 where there are two) and on device 0, for each
 * way a device allocation runs out: a request larger than the device, the
 * pool's hard limit, the pool out of room after its flush and retry (on the
 * deferred and the stream-ordered path), managed memory past its limit, and
 * (on simcuda) cuMemAlloc failing; the free figure is the manager's device's even
 * while another device's context is current, and that context is current
 * again afterwards; driver calls failing while the message is made leave
 * their figure out and keep the rest.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"

#define MiB ((size_t)1 << 20)
#define PER_DEVICE 21
#define SIM_ONLY 12

static char msg[2048];

static void grab(void)
{
  snprintf(msg, sizeof msg, "%s", cuemm_last_error());
}

/* "device D (PCI BUS)" for the device, as the driver names its bus. */
static void where(int ordinal, char *out, size_t n)
{
  CUdevice dev;
  char bus[32];
  CHECK_CU(cuDeviceGet(&dev, ordinal));
  CHECK_CU(cuDeviceGetPCIBusId(bus, (int)sizeof bus, dev));
  snprintf(out, n, "device %d (PCI %s): ", ordinal, bus);
}

static cuemm_manager *make(CUcontext ctx, int pool, size_t limit, int hard)
{
  cuemm_config c = test_config(1000, 1.0);
  if (pool) {
    c.pool = CUEMM_POOL_VMM;
    c.pool_chunk = 2 * MiB;
    c.pool_reserve = 256 * MiB;
    c.pool_limit = limit;
    c.pool_limit_hard = hard;
  }
  cuemm_manager *m;
  CHECK_CU(cuemm_manager_create(ctx, &c, &m));
  return m;
}

static size_t device_total(CUcontext ctx)
{
  size_t f, t;
  CHECK_CU(cuCtxPushCurrent(ctx));
  CHECK_CU(cuMemGetInfo(&f, &t));
  CHECK_CU(cuCtxPopCurrent(NULL));
  return t;
}

static void on_device(int ordinal, CUcontext ctx, CUcontext other)
{
  char dev[96], want[256];
  where(ordinal, dev, sizeof dev);
  size_t total = device_total(ctx);
  CUdeviceptr p = 0;

  /* More than the device has; another device's context current. */
  cuemm_manager *m = make(ctx, 0, 0, 0);
  CHECK_CU(cuCtxSetCurrent(other));
  is(cuemm_allocate(m, total + 1, &p), CUDA_ERROR_OUT_OF_MEMORY, "device %d: total + 1 bytes refused", ordinal);
  grab();
  like(msg, dev, "device %d: the message names the device and its PCI bus", ordinal);
  snprintf(want, sizeof want, "%zu bytes requested, 0 held by this manager, ", total + 1);
  like(msg, want, "device %d: the bytes requested and held", ordinal);
  snprintf(want, sizeof want, " free of %zu on the device (cuMemGetInfo)", total);
  like(msg, want, "device %d: the free bytes of the device's total", ordinal);
  CUcontext cur = NULL;
  CHECK_CU(cuCtxGetCurrent(&cur));
  ok(cur == other, "device %d: the caller's context is current again", ordinal);
  CHECK_CU(cuCtxSetCurrent(ctx));
  CHECK_CU(cuemm_destroy(m));

  /* The pool's hard limit. */
  m = make(ctx, 1, 64 * MiB, 1);
  CUdeviceptr a;
  CHECK_CU(cuemm_allocate(m, 6 * MiB, &a));
  is(cuemm_allocate(m, 65 * MiB, &p), CUDA_ERROR_OUT_OF_MEMORY, "device %d: past the hard limit, refused", ordinal);
  grab();
  like(msg, "hard limit (CUEMM_POOL_LIMIT, 67108864 bytes", "device %d: the limit, as before", ordinal);
  like(msg, dev, "device %d: and the device", ordinal);
  snprintf(want, sizeof want, "68157440 bytes requested, %zu held by this manager, ", 6 * MiB);
  like(msg, want, "device %d: what was asked and what the pool holds", ordinal);
  CHECK_CU(cuemm_free(m, a));
  CHECK_CU(cuemm_destroy(m));

  /* The pool out of room under a soft limit, after the flush and retry. */
  m = make(ctx, 1, 64 * MiB, 0);
  CHECK_CU(cuemm_allocate(m, 40 * MiB, &a));
  is(cuemm_allocate(m, 40 * MiB, &p), CUDA_ERROR_OUT_OF_MEMORY, "device %d: the pool out of room", ordinal);
  grab();
  like(msg, "out of pool memory for 41943040 bytes (41943040 bytes mapped", "device %d: the pool's figures, as before",
       ordinal);
  like(msg, dev, "device %d: and the device", ordinal);
  like(msg, "41943040 bytes requested, 41943040 held by this manager, ", "device %d: requested and held", ordinal);
  snprintf(want, sizeof want, " free of %zu on the device", total);
  like(msg, want, "device %d: and the free bytes", ordinal);
  /* The same through the stream-ordered path. */
  CUstream s;
  CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  is(cuemm_allocate_async(m, 40 * MiB, s, &p), CUDA_ERROR_OUT_OF_MEMORY, "device %d: alloc_async out of room too",
     ordinal);
  grab();
  like(msg, dev, "device %d: alloc_async's message names the device", ordinal);
  like(msg, "41943040 bytes requested, 41943040 held by this manager, ", "device %d: and the figures", ordinal);
  CHECK_CU(cuemm_free(m, a));
  CHECK_CU(cuemm_destroy(m));
  CHECK_CU(cuStreamDestroy(s));

  /* Managed memory past its limit (CUEMM_MANAGED_LIMIT). */
  cuemm_config mc = test_config(1000, 1.0);
  mc.memory = CUEMM_MEMORY_MANAGED;
  mc.managed_limit = 64 * MiB;
  CHECK_CU(cuemm_manager_create(ctx, &mc, &m));
  CHECK_CU(cuemm_allocate(m, 40 * MiB, &a));
  is(cuemm_allocate(m, 40 * MiB, &p), CUDA_ERROR_OUT_OF_MEMORY, "device %d: managed memory past its limit", ordinal);
  grab();
  like(msg, "out of managed memory for 41943040 bytes", "device %d: the managed pool's message, as before", ordinal);
  like(msg, dev, "device %d: and the device", ordinal);
  cuemm_managed_stats ms;
  CHECK_CU(cuemm_managed_get_stats(m, &ms));
  snprintf(want, sizeof want, "41943040 bytes requested, %zu held by this manager, ", ms.held_bytes);
  like(msg, want, "device %d: requested and held (%zu bytes of segments)", ordinal, ms.held_bytes);
  CHECK_CU(cuemm_free(m, a));
  CHECK_CU(cuemm_destroy(m));

  if (!sim_present) {
    skip(SIM_ONLY, SIM_REASON);
    return;
  }

  /* cuMemAlloc out of memory (no pool), with some memory held; the free
   * figure is the one cuMemGetInfo gives right after. */
  m = make(ctx, 0, 0, 0);
  CHECK_CU(cuemm_allocate(m, 3 * MiB, &a));
  sim.fail_from("cuMemAlloc", 1, CUDA_ERROR_OUT_OF_MEMORY);
  CHECK_CU(cuCtxSetCurrent(other));
  is(cuemm_allocate(m, 4096, &p), CUDA_ERROR_OUT_OF_MEMORY, "device %d: cuMemAlloc out of memory", ordinal);
  sim.fail_clear();
  grab();
  like(msg, "cuMemAlloc(4096 bytes) failed", "device %d: the failed call, as before", ordinal);
  like(msg, "after flushing 0 pending frees (0 bytes) and retrying", "device %d: and the retry", ordinal);
  like(msg, dev, "device %d: the device", ordinal);
  snprintf(want, sizeof want, "4096 bytes requested, %zu held by this manager, ", 3 * MiB);
  like(msg, want, "device %d: the figures", ordinal);
  size_t f, t;
  CHECK_CU(cuCtxPushCurrent(ctx));
  CHECK_CU(cuMemGetInfo(&f, &t));
  CHECK_CU(cuCtxPopCurrent(NULL));
  snprintf(want, sizeof want, ", %zu free of %zu on the device (cuMemGetInfo)", f, t);
  like(msg, want, "device %d: free bytes of the manager's device, not the current one's", ordinal);
  CHECK_CU(cuCtxGetCurrent(&cur));
  ok(cur == other, "device %d: the caller's context is current again", ordinal);

  /* The message's own driver calls failing: their figures left out. */
  sim.fail_from("cuMemAlloc", 1, CUDA_ERROR_OUT_OF_MEMORY);
  sim.fail("cuMemGetInfo", 1, CUDA_ERROR_UNKNOWN);
  sim.fail("cuDeviceGetPCIBusId", 1, CUDA_ERROR_UNKNOWN);
  is(cuemm_allocate(m, 4096, &p), CUDA_ERROR_OUT_OF_MEMORY, "device %d: out of memory again", ordinal);
  sim.fail_clear();
  grab();
  like(msg, "cuMemAlloc(4096 bytes) failed", "device %d: the failure is still what the message says", ordinal);
  snprintf(want, sizeof want, "; device %d: 4096 bytes requested, %zu held by this manager", ordinal, 3 * MiB);
  like(msg, want, "device %d: the device without its bus, the figures", ordinal);
  ok(strstr(msg, "free of") == NULL && strstr(msg, "cuMemGetInfo") == NULL,
     "device %d: no free figure when cuMemGetInfo failed (%s)", ordinal, msg);
  CHECK_CU(cuCtxGetCurrent(&cur));
  ok(cur == other, "device %d: the caller's context is current again", ordinal);
  CHECK_CU(cuCtxSetCurrent(ctx));
  CHECK_CU(cuemm_free(m, a));
  CHECK_CU(cuemm_destroy(m));
}

int main(void)
{
  sim_init();
  CHECK_CU(cuInit(0));
  int ndev = 0;
  CHECK_CU(cuDeviceGetCount(&ndev));
  tap_plan(2 * (PER_DEVICE + SIM_ONLY));
  int last = ndev - 1;
  CUcontext c0 = test_primary_context(0);
  CUcontext cl = last ? test_primary_context(last) : c0;
  /* With one device, the "other" context is a second context of device 0. */
  CUcontext spare = NULL;
  if (!last) {
    CUdevice d0;
    CHECK_CU(cuDeviceGet(&d0, 0));
    CHECK_CU(cuCtxCreate(&spare, NULL, 0, d0));
    CHECK_CU(cuCtxSetCurrent(c0));
  }
  /* Some memory taken on device 0, so its free figure differs from the
   * last device's. */
  CUdeviceptr hold;
  CHECK_CU(cuCtxSetCurrent(c0));
  CHECK_CU(cuMemAlloc(&hold, 8 * MiB));
  CHECK_CU(cuCtxSetCurrent(cl));
  on_device(last, cl, last ? c0 : spare);
  CHECK_CU(cuCtxSetCurrent(c0));
  on_device(0, c0, last ? cl : spare);
  CHECK_CU(cuMemFree(hold));
  if (spare)
    CHECK_CU(cuCtxDestroy(spare));
  if (last)
    test_release_primary(last);
  test_release_primary(0);
  return tap_done();
}
