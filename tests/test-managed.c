/* test-managed.c: managed and system-allocated memory (CUEMM_MEMORY).
 *
 * Managed blocks come from segments, one cuMemAllocManaged per segment (not
 * per request); data written by the host reads back through the driver and
 * the other way round; frees go through the deferred queue, defer scopes and
 * reset, with one cuCtxSynchronize per flush; segments go back past the
 * release threshold and with cuemm_managed_trim; prefetch and advice, at
 * allocation and through cuemm_prefetch / cuemm_advise, reach the driver
 * with the right arguments, and every bad range is refused with a message;
 * the oversubscription warning, the cap, IPC refusal; the system kind,
 * refused where the device cannot use pageable memory; configuration.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define MiB ((size_t)1 << 20)

static int (*sim_managed_get)(CUdeviceptr, simcuda_managed_range *);
static void (*sim_managed_totals)(simcuda_managed_totals *);
static int (*sim_set_pageable)(int);

static cuemm_config managed_config(size_t chunk, size_t threshold, size_t count)
{
  cuemm_config c = test_config(count, 1.0);
  c.memory = CUEMM_MEMORY_MANAGED;
  c.pool_chunk = chunk;
  c.pool_release_threshold = threshold;
  return c;
}

static cuemm_manager *make(const cuemm_config *c)
{
  cuemm_manager *m = NULL;
  CHECK_CU(cuemm_manager_create(NULL, c, &m));
  return m;
}

static cuemm_managed_stats mstats(cuemm_manager *m)
{
  cuemm_managed_stats s;
  CHECK_CU(cuemm_managed_get_stats(m, &s));
  return s;
}

/* ---- segments, data, the queue ------------------------------------------------ */

static void basics(void)
{
  cuemm_config c = managed_config(4 * MiB, (size_t)1 << 40, 10);
  cuemm_manager *m = make(&c);
  cuemm_managed_stats s = mstats(m);
  is(s.memory, CUEMM_MEMORY_MANAGED, "a managed-memory manager");
  is(s.held_bytes, 0, "no segment before the first allocation");
  is(s.segment_bytes, 4 * MiB, "segments of pool_chunk bytes");

  unsigned long allocs0 = sim_calls("cuMemAllocManaged"), frees0 = sim_calls("cuMemFree");
  CUdeviceptr p[11];
  CHECK_CU(cuemm_allocate(m, 1000, &p[0]));
  is(p[0] % 256, 0, "256-byte aligned");
  int managed = 0;
  CHECK_CU(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p[0]));
  is(managed, 1, "the driver says the block is managed memory");
  for (int i = 1; i < 11; i++) {
    CHECK_CU(cuemm_allocate(m, 4096, &p[i]));
    ok(p[i] == p[i - 1] + (i == 1 ? 1024 : 4096), "block %d follows the previous one in the segment", i);
  }
  s = mstats(m);
  is(s.segments, 1, "eleven requests, one segment");
  is(s.held_bytes, 4 * MiB, "4 MiB held");
  is(s.used_bytes, 1024 + 10 * 4096, "used bytes, 256-byte rounded");
  is(s.segments_allocated, 1, "one segment allocated");
  if (sim_present)
    is(sim_calls("cuMemAllocManaged") - allocs0, 1, "one cuMemAllocManaged for eleven requests");
  else
    skip(1, SIM_REASON);
  is(test_stats(m).live_count, 11, "eleven live allocations");
  CUdeviceptr base = 0;
  size_t size = 0;
  is(cuemm_address_range(m, p[3] + 100, &base, &size), CUDA_SUCCESS, "the address range of a block's "
     "interior");
  ok(base == p[3] && size == 4096, "is the block (0x%llx, %zu bytes)", (unsigned long long)base, size);

  /* The host writes, the driver reads; the driver writes, the host reads. */
  unsigned char *h = (unsigned char *)(uintptr_t)p[1];
  for (int i = 0; i < 4096; i++)
    h[i] = (unsigned char)(i * 7);
  unsigned char back[4096];
  CHECK_CU(cuMemcpyDtoH(back, p[1], sizeof back));
  int same = 1;
  for (int i = 0; i < 4096; i++)
    same &= back[i] == (unsigned char)(i * 7);
  ok(same, "bytes written by the host read back with cuMemcpyDtoH");
  CHECK_CU(cuMemsetD32(p[2], 0xA5A5A5A5u, 1024));
  CHECK_CU(cuCtxSynchronize());
  const uint32_t *w = (const uint32_t *)(uintptr_t)p[2];
  ok(w[0] == 0xA5A5A5A5u && w[1023] == 0xA5A5A5A5u, "words set by cuMemsetD32 read on the host");

  unsigned long syncs0 = sim_calls("cuCtxSynchronize");
  for (int i = 0; i < 10; i++)
    CHECK_CU(cuemm_free(m, p[i]));
  is(test_stats(m).pending_count, 10, "ten managed frees pending");
  is(cuemm_address_range(m, p[3] + 100, &base, &size), CUDA_ERROR_NOT_FOUND, "a pending block has no range");
  like(cuemm_last_error(), "freed already and waits in the pending queue", "and the message says why");
  is(mstats(m).used_bytes, 1024 + 10 * 4096, "pending blocks still count as used");
  CHECK_CU(cuemm_free(m, p[10]));
  cuemm_stats st = test_stats(m);
  is(st.pending_count, 0, "the eleventh flushes");
  is(st.flushes, 1, "one flush");
  is(st.driver_frees, 0, "no driver free for managed blocks");
  is(st.live_count, 0, "nothing live");
  if (sim_present) {
    is(sim_calls("cuCtxSynchronize") - syncs0, 1, "one cuCtxSynchronize for the batch");
    is(sim_calls("cuMemFree") - frees0, 0, "the segment stays (threshold not passed)");
  } else
    skip(2, SIM_REASON);
  is(mstats(m).used_bytes, 0, "all blocks back in the segment");

  /* Bad frees. */
  CUdeviceptr q;
  CHECK_CU(cuemm_allocate(m, 512, &q));
  is(cuemm_free(m, q + 256), CUDA_ERROR_INVALID_VALUE, "interior pointer refused");
  is(cuemm_host_free(m, (void *)(uintptr_t)q), CUDA_ERROR_INVALID_VALUE, "host free of a managed block refused");
  like(cuemm_last_error(), "managed memory (cuemm_alloc)", "the message says what it is");
  CHECK_CU(cuemm_free(m, q));
  is(cuemm_free(m, q), CUDA_ERROR_INVALID_VALUE, "double free refused");
  like(cuemm_last_error(), "double free", "and named");
  is(test_stats(m).pending_count, 1, "the queue holds it once");
  is(cuemm_allocate(m, 0, &q), CUDA_ERROR_INVALID_VALUE, "size 0 refused");
  like(cuemm_last_error(), "size is 0", "with a message");
  q = 0;
  is(cuemm_allocate(m, SIZE_MAX - 100, &q), CUDA_ERROR_OUT_OF_MEMORY, "a request of nearly SIZE_MAX bytes refused");
  like(cuemm_last_error(), "more than the managed pool can place", "with a message");
  is(q, 0, "p untouched");

  /* A request larger than a segment gets a segment of its own. */
  CUdeviceptr big;
  allocs0 = sim_calls("cuMemAllocManaged");
  CHECK_CU(cuemm_allocate(m, 9 * MiB, &big));
  s = mstats(m);
  is(s.segments, 2, "a second segment");
  is(s.held_bytes, 4 * MiB + 12 * MiB, "9 MiB rounded up to three chunks");
  if (sim_present)
    is(sim_calls("cuMemAllocManaged") - allocs0, 1, "one more cuMemAllocManaged");
  else
    skip(1, SIM_REASON);
  memset((void *)(uintptr_t)big, 0x5A, 9 * MiB); /* the whole block is usable from the host */
  unsigned char last = 0;
  CHECK_CU(cuMemcpyDtoH(&last, big + 9 * MiB - 1, 1));
  is(last, 0x5A, "its last byte reads back through the driver");
  CHECK_CU(cuemm_free(m, big));

  /* Trim gives every wholly free segment back. */
  frees0 = sim_calls("cuMemFree");
  CHECK_CU(cuemm_managed_trim(m));
  s = mstats(m);
  is(s.segments, 0, "trim released both segments");
  is(s.held_bytes, 0, "nothing held");
  is(s.segments_released, 2, "two segments released");
  if (sim_present)
    is(sim_calls("cuMemFree") - frees0, 2, "two cuMemFree");
  else
    skip(1, SIM_REASON);
  is(cuemm_pool_trim(m), CUDA_ERROR_INVALID_VALUE, "cuemm_pool_trim is for the device pool");
  CHECK_CU(cuemm_destroy(m));
}

/* Past the release threshold, wholly free segments go back, highest first,
 * until about the threshold stays. */
static void release_threshold(void)
{
  cuemm_config c = managed_config(4 * MiB, 4 * MiB, 0);
  cuemm_manager *m = make(&c);
  CUdeviceptr p[3];
  CHECK_CU(cuemm_defer_cleanup_begin(m));
  for (int i = 0; i < 3; i++)
    CHECK_CU(cuemm_allocate(m, 4 * MiB, &p[i]));
  is(mstats(m).segments, 3, "three segments of one block each");
  for (int i = 0; i < 3; i++)
    CHECK_CU(cuemm_free(m, p[i]));
  is(mstats(m).segments, 3, "inside a defer scope nothing is released");
  CHECK_CU(cuemm_defer_cleanup_end(m));
  unsigned long frees0 = sim_calls("cuMemFree");
  CHECK_CU(cuemm_flush(m));
  cuemm_managed_stats s = mstats(m);
  is(s.segments, 1, "two segments released, the threshold's worth stays");
  is(s.free_bytes, 4 * MiB, "4 MiB free held");
  if (sim_present)
    is(sim_calls("cuMemFree") - frees0, 2, "two cuMemFree");
  else
    skip(1, SIM_REASON);
  CUdeviceptr again;
  CHECK_CU(cuemm_allocate(m, 4 * MiB, &again));
  is(mstats(m).segments_allocated, 3, "the segment kept serves the next request");
  CHECK_CU(cuemm_free(m, again));
  CHECK_CU(cuemm_destroy(m));
}

/* Defer scopes, reset, destroy with live blocks, and a block freed while
 * queued work still writes it. */
static void queue_and_scopes(void)
{
  cuemm_config c = managed_config(4 * MiB, (size_t)1 << 40, 10);
  cuemm_manager *m = make(&c);
  CUdeviceptr p[20];
  unsigned long syncs0 = sim_calls("cuCtxSynchronize");
  CHECK_CU(cuemm_defer_cleanup_begin(m));
  for (int i = 0; i < 20; i++) {
    CHECK_CU(cuemm_allocate(m, 1 << 16, &p[i]));
    CHECK_CU(cuemm_free(m, p[i]));
  }
  CHECK_CU(cuemm_flush(m));
  is(test_stats(m).pending_count, 20, "a defer scope holds twenty frees, flush or not");
  if (sim_present)
    is(sim_calls("cuCtxSynchronize") - syncs0, 0, "no synchronization inside the scope");
  else
    skip(1, SIM_REASON);
  CHECK_CU(cuemm_defer_cleanup_end(m));
  CHECK_CU(cuemm_flush(m));
  is(test_stats(m).pending_count, 0, "released after the scope");
  is(mstats(m).used_bytes, 0, "every block back");

  for (int i = 0; i < 3; i++)
    CHECK_CU(cuemm_allocate(m, 1000, &p[i]));
  CHECK_CU(cuemm_reset(m));
  cuemm_stats st = test_stats(m);
  is(st.live_count, 0, "reset freed the live managed blocks");
  is(st.pending_count, 0, "and released them");
  is(mstats(m).used_bytes, 0, "the segment is whole again");
  CHECK_CU(cuemm_allocate(m, 1000, &p[0]));
  CHECK_CU(cuemm_allocate(m, 2000, &p[1]));
  CHECK_CU(cuemm_destroy(m));
  like(cuemm_last_error(), "freed 2 outstanding allocations (3000 bytes)", "destroy reports the live blocks");

  if (sim_present) {
    /* Queued work writes a block after its free: the flush must wait for it
     * before the block is handed out again. */
    sim.set_queue_mode(1);
    cuemm_config c0 = managed_config(4 * MiB, (size_t)1 << 40, 0);
    cuemm_manager *m0 = make(&c0);
    CUdeviceptr a, b;
    CHECK_CU(cuemm_allocate(m0, 4096, &a));
    CHECK_CU(cuMemsetD32Async(a, 0x11111111u, 1024, NULL));
    is(sim.queued_work(), 1, "the write is queued");
    CHECK_CU(cuemm_free(m0, a));
    is(sim.queued_work(), 0, "the flush ran it (one synchronization)");
    CHECK_CU(cuemm_allocate(m0, 4096, &b));
    is(b, a, "the block is reused");
    is(*(const uint32_t *)(uintptr_t)b, 0x11111111u, "after the old write completed, not before");
    CHECK_CU(cuemm_free(m0, b));
    sim.set_queue_mode(0);
    CHECK_CU(cuemm_destroy(m0));
  } else
    skip(4, SIM_REASON);

}

/* ---- prefetch and advice ---------------------------------------------------------- */

static void prefetch_and_advice(void)
{
  cuemm_config c = managed_config(4 * MiB, (size_t)1 << 40, 10);
  c.managed_prefetch = 1;
  c.managed_preferred_location = CUEMM_LOCATION_DEVICE;
  c.managed_accessed_by = CUEMM_LOCATION_CPU;
  cuemm_manager *m = make(&c);
  unsigned long pf0 = sim_calls("cuMemPrefetchAsync"), adv0 = sim_calls("cuMemAdvise");
  CUdeviceptr p, q;
  CHECK_CU(cuemm_allocate(m, 100000, &p));
  CHECK_CU(cuemm_allocate(m, 5000, &q));
  cuemm_managed_stats s = mstats(m);
  is(s.prefetches, 2, "two prefetches at allocation");
  is(s.advises, 2, "two pieces of advice for the one segment");
  if (sim_present && sim_managed_get) {
    is(sim_calls("cuMemPrefetchAsync") - pf0, 2, "one cuMemPrefetchAsync per allocation");
    is(sim_calls("cuMemAdvise") - adv0, 2, "two cuMemAdvise per segment, not per allocation");
    simcuda_managed_range r;
    CHECK_CU(sim_managed_get(q, &r) == 0 ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN);
    is(r.last_prefetch_dst, 0, "prefetched to device 0");
    is(r.last_prefetch_ptr, q, "the block's start");
    is(r.last_prefetch_size, 5000, "its size");
    ok(r.last_prefetch_stream == CU_STREAM_LEGACY, "on the legacy default stream");
    is(r.preferred_location, 0, "preferred location: the device");
    is(r.accessed_by, 1u << 31, "accessed by: the CPU");
    is(r.size, 4 * MiB, "the advice covers the whole segment");
  } else
    skip(9, SIM_REASON);

  /* cuemm_prefetch and cuemm_advise on ranges inside a block. */
  unsigned long pf1 = sim_calls("cuMemPrefetchAsync");
  CHECK_CU(cuemm_prefetch(m, p + 4096, 8192, CU_DEVICE_CPU, NULL));
  if (sim_present && sim_managed_get) {
    simcuda_managed_range r;
    sim_managed_get(p, &r);
    is(r.last_prefetch_dst, CU_DEVICE_CPU, "prefetched to the host");
    is(r.last_prefetch_ptr, p + 4096, "from the interior pointer");
    is(r.last_prefetch_size, 8192, "8192 bytes");
  } else
    skip(3, SIM_REASON);
  CHECK_CU(cuemm_prefetch(m, p + 1000, 0, 0, NULL));
  if (sim_present && sim_managed_get) {
    simcuda_managed_range r;
    sim_managed_get(p, &r);
    is(r.last_prefetch_size, 100000 - 1000, "size 0: up to the block's end");
    is(sim_calls("cuMemPrefetchAsync") - pf1, 2, "one driver call each");
  } else
    skip(2, SIM_REASON);
  CHECK_CU(cuemm_advise(m, q, 5000, CU_MEM_ADVISE_SET_READ_MOSTLY, 0));
  if (sim_present && sim_managed_get) {
    simcuda_managed_range r;
    sim_managed_get(q, &r);
    is(r.last_advice, CU_MEM_ADVISE_SET_READ_MOSTLY, "read-mostly advice given");
    is(r.read_mostly, 1, "and in force");
  } else
    skip(2, SIM_REASON);

  /* Bad inputs: each refused, nothing reaches the driver. */
  CUdeviceptr gone;
  CHECK_CU(cuemm_allocate(m, 256, &gone));
  CHECK_CU(cuemm_free(m, gone));
  unsigned long pf2 = sim_calls("cuMemPrefetchAsync"), adv2 = sim_calls("cuMemAdvise");
  is(cuemm_prefetch(NULL, p, 16, 0, NULL), CUDA_ERROR_INVALID_VALUE, "NULL manager");
  is(cuemm_prefetch(m, 0, 16, 0, NULL), CUDA_ERROR_INVALID_VALUE, "NULL pointer");
  like(cuemm_last_error(), "p is NULL", "named");
  is(cuemm_prefetch(m, p + 99000, 2000, 0, NULL), CUDA_ERROR_INVALID_VALUE, "a range crossing the block's end");
  like(cuemm_last_error(), "runs past the end of its block", "the message says so");
  CUdeviceptr dev;
  CHECK_CU(cuMemAlloc(&dev, 4096));
  is(cuemm_prefetch(m, dev, 16, 0, NULL), CUDA_ERROR_INVALID_VALUE, "device memory from cuMemAlloc");
  like(cuemm_last_error(), "lies in no live managed block of this manager", "the message says whose it is not");
  CHECK_CU(cuMemFree(dev));
  is(cuemm_prefetch(m, p, 16, 7, NULL), CUDA_ERROR_INVALID_DEVICE, "a device that does not exist");
  like(cuemm_last_error(), "dst 7 is neither a device", "named");
  is(cuemm_prefetch(m, p, 16, -5, NULL), CUDA_ERROR_INVALID_DEVICE, "a negative device other than CU_DEVICE_CPU");
  is(cuemm_advise(m, p, 16, (CUmem_advise)0, 0), CUDA_ERROR_INVALID_VALUE, "advice 0");
  is(cuemm_advise(m, p, 16, (CUmem_advise)99, 0), CUDA_ERROR_INVALID_VALUE, "advice 99");
  like(cuemm_last_error(), "advice 99 is not one of", "named");
  is(cuemm_advise(m, q + 5000, 1, CU_MEM_ADVISE_SET_READ_MOSTLY, 0), CUDA_ERROR_INVALID_VALUE,
     "one byte past the block's end");
  is(cuemm_advise(m, p, 16, CU_MEM_ADVISE_SET_ACCESSED_BY, 9), CUDA_ERROR_INVALID_DEVICE, "advice about no device");
  is(cuemm_prefetch(m, gone, 16, 0, NULL), CUDA_ERROR_INVALID_VALUE, "a block freed (pending)");
  like(cuemm_last_error(), "was freed", "named");
  cuemm_config dc = test_config(10, 1.0);
  cuemm_manager *plain = NULL;
  CUcontext ctx;
  CHECK_CU(cuCtxGetCurrent(&ctx));
  CUcontext other;
  CUdevice d1;
  int ndev = 0;
  CHECK_CU(cuDeviceGetCount(&ndev));
  if (ndev > 1) {
    /* Another context for a device-memory manager (one manager per context). */
    CHECK_CU(cuDeviceGet(&d1, 1));
    CHECK_CU(cuDevicePrimaryCtxRetain(&other, d1));
    CHECK_CU(cuemm_manager_create(other, &dc, &plain));
    is(cuemm_prefetch(plain, p, 16, 0, NULL), CUDA_ERROR_INVALID_VALUE, "a device-memory manager");
    like(cuemm_last_error(), "this manager hands out device memory", "the message says why");
    is(cuemm_prefetch(plain, p, 16, 0, NULL), CUDA_ERROR_INVALID_VALUE, "another manager's block");
    CHECK_CU(cuemm_destroy(plain));
    CHECK_CU(cuDevicePrimaryCtxRelease(d1));
  } else
    skip(3, "needs a second device");
  if (sim_present) {
    is(sim_calls("cuMemPrefetchAsync") - pf2, 0, "no refused prefetch reached the driver");
    is(sim_calls("cuMemAdvise") - adv2, 0, "no refused advice reached the driver");
    /* A driver failure is passed on with the call named. */
    sim.fail("cuMemPrefetchAsync", 1, CUDA_ERROR_INVALID_DEVICE);
    is(cuemm_prefetch(m, p, 16, 0, NULL), CUDA_ERROR_INVALID_DEVICE, "the driver's error");
    like(cuemm_last_error(), "cuMemPrefetchAsync(", "names the call");
    /* A prefetch at allocation that fails undoes the allocation. */
    cuemm_stats before = test_stats(m);
    size_t used = mstats(m).used_bytes;
    sim.fail("cuMemPrefetchAsync", 1, CUDA_ERROR_INVALID_DEVICE);
    CUdeviceptr x = 0;
    is(cuemm_allocate(m, 4096, &x), CUDA_ERROR_INVALID_DEVICE, "an allocation whose prefetch fails fails");
    like(cuemm_last_error(), "the allocation was undone", "and says so");
    is(x, 0, "p untouched");
    is(test_stats(m).live_count, before.live_count, "nothing more live");
    is(mstats(m).used_bytes, used, "the block went back");
  } else
    skip(9, SIM_REASON);
  CHECK_CU(cuemm_free(m, p));
  CHECK_CU(cuemm_free(m, q));
  CHECK_CU(cuemm_destroy(m));
}

/* ---- oversubscription, the cap, IPC ------------------------------------------------- */

static void oversubscription(void)
{
  if (!sim_present) {
    skip(8, "oversubscribing a real GPU takes more memory than a test should (bench-managed shows it)");
    return;
  }
  size_t total = 0;
  CHECK_CU(cuMemGetInfo(&(size_t){ 0 }, &total));
  size_t chunk = total / 16;
  cuemm_config c = managed_config(chunk, (size_t)1 << 40, 10);
  cuemm_manager *m = make(&c);
  CUdeviceptr p[18];
  for (int i = 0; i < 16; i++)
    CHECK_CU(cuemm_allocate(m, chunk, &p[i]));
  is(mstats(m).warning[0], 0, "exactly the device's memory held: no warning");
  is(cuemm_free(m, 0), CUDA_ERROR_INVALID_VALUE, "(a known message before)");
  CHECK_CU(cuemm_allocate(m, chunk, &p[16]));
  like(cuemm_last_error(), "warning: managed memory held (", "the allocation that crosses leaves a warning");
  char want[160];
  snprintf(want, sizeof want, "exceeds device 0's memory (%zu bytes)", total);
  like(cuemm_last_error(), want, "with the device's figure");
  cuemm_managed_stats s = mstats(m);
  is(s.oversubscribed_grows, 1, "counted");
  like(s.warning, "may evict pages", "kept in the statistics");
  ok(s.oversubscription > 1.0, "held / device memory = %.3f", s.oversubscription);
  is(cuemm_free(m, 0), CUDA_ERROR_INVALID_VALUE, "(a known message before)");
  CHECK_CU(cuemm_allocate(m, chunk, &p[17]));
  like(cuemm_last_error(), "not the start of an allocation", "the warning is given once");
  is(mstats(m).oversubscribed_grows, 2, "but every growth past the device is counted");
  /* simcuda's model: prefetching more than fits evicts. */
  simcuda_managed_totals t0, t1;
  sim_managed_totals(&t0);
  for (int i = 0; i < 18; i++)
    CHECK_CU(cuemm_prefetch(m, p[i], 0, 0, NULL));
  sim_managed_totals(&t1);
  ok(t1.evictions > t0.evictions, "simcuda evicted %lu times to make room", t1.evictions - t0.evictions);
  ok(t1.resident <= total, "no more resident than the device holds (%zu of %zu)", t1.resident, total);
  for (int i = 0; i < 18; i++)
    CHECK_CU(cuemm_free(m, p[i]));
  CHECK_CU(cuemm_destroy(m));
}

static void cap(void)
{
  cuemm_config c = managed_config(4 * MiB, (size_t)1 << 40, 10);
  c.managed_limit = 8 * MiB;
  cuemm_manager *m = make(&c);
  CUdeviceptr a, b, x = 0;
  CHECK_CU(cuemm_allocate(m, 4 * MiB, &a));
  CHECK_CU(cuemm_allocate(m, 4 * MiB, &b));
  unsigned long allocs0 = sim_calls("cuMemAllocManaged");
  cuemm_stats before = test_stats(m);
  is(cuemm_allocate(m, 1000, &x), CUDA_ERROR_OUT_OF_MEMORY, "past CUEMM_MANAGED_LIMIT: refused");
  like(cuemm_last_error(), "past CUEMM_MANAGED_LIMIT (cuemm_config.managed_limit) = 8388608 bytes", "with the limit");
  like(cuemm_last_error(), "would take the managed memory held to 12582912 bytes", "and the figure it would reach");
  is(x, 0, "p untouched");
  is(test_stats(m).live_count, before.live_count, "nothing more live");
  is(test_stats(m).alloc_failures, before.alloc_failures + 1, "one failure counted");
  ok(mstats(m).limit_refusals >= 1, "refusals counted");
  if (sim_present)
    is(sim_calls("cuMemAllocManaged") - allocs0, 0, "the driver was not asked");
  else
    skip(1, SIM_REASON);
  /* A pending free makes room: the refusal flushes and retries. */
  CHECK_CU(cuemm_free(m, b));
  CHECK_CU(cuemm_allocate(m, 1000, &x));
  is(test_stats(m).pending_count, 0, "the retry flushed the pending free");
  is(x, b, "and reused its memory");
  CHECK_CU(cuemm_free(m, a));
  CHECK_CU(cuemm_free(m, x));
  CHECK_CU(cuemm_destroy(m));
}

static void ipc_refused(void)
{
  cuemm_config c = managed_config(4 * MiB, (size_t)1 << 40, 10);
  cuemm_manager *m = make(&c);
  CUdeviceptr p;
  CHECK_CU(cuemm_allocate(m, 4096, &p));
  unsigned long ipc0 = sim_calls("cuIpcGetMemHandle");
  cuemm_ipc_handle h;
  memset(&h, 0x77, sizeof h);
  is(cuemm_ipc_export(m, p, 0, &h), CUDA_ERROR_NOT_SUPPORTED, "exporting managed memory is refused");
  like(cuemm_last_error(), "cannot be shared between processes through CUDA IPC", "saying why");
  like(cuemm_last_error(), "from a manager of device memory", "and what to use instead");
  is(h.magic[0], 0x77, "the handle is untouched");
  if (sim_present)
    is(sim_calls("cuIpcGetMemHandle") - ipc0, 0, "the driver was not asked");
  else
    skip(1, SIM_REASON);
  CHECK_CU(cuemm_free(m, p));
  CHECK_CU(cuemm_destroy(m));
}

/* ---- driver failures ------------------------------------------------------------------ */

static void faults(void)
{
  if (!sim_present) {
    skip(9, SIM_REASON);
    return;
  }
  cuemm_config c = managed_config(4 * MiB, (size_t)1 << 40, 10);
  c.managed_preferred_location = CUEMM_LOCATION_DEVICE;
  cuemm_manager *m = make(&c);
  simcuda_live l0;
  sim.live_get(&l0);
  CUdeviceptr p = 0;
  sim.fail("cuMemAllocManaged", 1, CUDA_ERROR_INVALID_VALUE);
  is(cuemm_allocate(m, 1000, &p), CUDA_ERROR_INVALID_VALUE, "a failing cuMemAllocManaged");
  like(cuemm_last_error(), "cuMemAllocManaged(4194304 bytes, CU_MEM_ATTACH_GLOBAL)", "named with its size");
  is(mstats(m).held_bytes, 0, "nothing held");
  unsigned long frees0 = sim_calls("cuMemFree");
  sim.fail("cuMemAdvise", 1, CUDA_ERROR_INVALID_DEVICE);
  is(cuemm_allocate(m, 1000, &p), CUDA_ERROR_INVALID_DEVICE, "failing advice on a new segment");
  like(cuemm_last_error(), "CU_MEM_ADVISE_SET_PREFERRED_LOCATION", "named");
  is(sim_calls("cuMemFree") - frees0, 1, "the segment was freed again");
  simcuda_live l1;
  sim.live_get(&l1);
  is(l1.managed_allocs, l0.managed_allocs, "no managed allocation left behind");
  /* Out of memory once: flush, release, retry. */
  uint64_t retries = test_stats(m).oom_retries;
  sim.fail("cuMemAllocManaged", 1, CUDA_ERROR_OUT_OF_MEMORY);
  CHECK_CU(cuemm_allocate(m, 1000, &p));
  is(test_stats(m).oom_retries, retries + 1, "one retry after out of memory");
  CHECK_CU(cuemm_free(m, p));
  sim.fail_clear();
  CHECK_CU(cuemm_destroy(m));
}

/* ---- system-allocated memory ------------------------------------------------------------ */

static void system_memory(void)
{
  cuemm_driver_info info;
  CHECK_CU(cuemm_driver_get_info(&info));
  ok(info.managed, "the driver and device 0 have managed memory");
  ok(info.prefetch, "prefetch and advice entry points present");
  cuemm_config c = test_config(10, 1.0);
  c.memory = CUEMM_MEMORY_SYSTEM;
  cuemm_manager *m = NULL;
  if (sim_present && sim_set_pageable) {
    sim_set_pageable(0);
    CHECK_CU(cuemm_driver_get_info(&info));
    is(info.pageable, 0, "SIMCUDA_PAGEABLE=0: no pageable access");
    is(cuemm_manager_create(NULL, &c, &m), CUDA_ERROR_NOT_SUPPORTED, "the system kind is refused there");
    like(cuemm_last_error(), "CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS is 0", "naming the attribute");
    ok(m == NULL, "no manager");
    sim_set_pageable(2);
    CHECK_CU(cuemm_driver_get_info(&info));
    ok(info.pageable && info.pageable_host_page_tables, "SIMCUDA_PAGEABLE=2: through the host's page tables");
    sim_set_pageable(1);
    CHECK_CU(cuemm_driver_get_info(&info));
    ok(info.pageable && !info.pageable_host_page_tables, "SIMCUDA_PAGEABLE=1: HMM");
  } else {
    skip(6, SIM_REASON);
    if (!info.pageable) {
      is(cuemm_manager_create(NULL, &c, &m), CUDA_ERROR_NOT_SUPPORTED, "this device cannot use pageable memory: refused");
      skip(15, "the device cannot access pageable memory");
      return;
    }
  }
  m = make(&c);
  CUdeviceptr p[11];
  for (int i = 0; i < 11; i++) {
    CHECK_CU(cuemm_allocate(m, 1000 + (size_t)i, &p[i]));
    ok(p[i] % 256 == 0, "system block %d aligned", i);
  }
  CUdeviceptr base = 0;
  size_t size = 0;
  ok(cuemm_address_range(m, p[4] + 999, &base, &size) == CUDA_SUCCESS && base == p[4] && size == 1004,
     "the address range of a system block's last byte is the block");
  cuemm_managed_stats s = mstats(m);
  is(s.memory, CUEMM_MEMORY_SYSTEM, "a system-memory manager");
  is(s.system_count, 11, "eleven host allocations");
  memset((void *)(uintptr_t)p[0], 0x3C, 1000);
  CHECK_CU(cuMemsetD8(p[1], 0x42, 1001));
  CHECK_CU(cuCtxSynchronize());
  unsigned char b0 = 0;
  CHECK_CU(cuMemcpyDtoH(&b0, p[0] + 999, 1));
  ok(b0 == 0x3C && ((unsigned char *)(uintptr_t)p[1])[1000] == 0x42, "host and device see the same bytes");
  CHECK_CU(cuemm_prefetch(m, p[0], 0, 0, NULL));
  pass("cuemm_prefetch accepts a system block");
  unsigned long syncs0 = sim_calls("cuCtxSynchronize");
  for (int i = 0; i < 11; i++)
    CHECK_CU(cuemm_free(m, p[i]));
  cuemm_stats st = test_stats(m);
  is(st.pending_count, 0, "the eleventh free flushed");
  is(st.driver_frees, 0, "no driver free");
  is(mstats(m).system_count, 0, "every host allocation released");
  if (sim_present)
    is(sim_calls("cuCtxSynchronize") - syncs0, 1, "after one synchronization");
  else
    skip(1, SIM_REASON);
  cuemm_ipc_handle h;
  CHECK_CU(cuemm_allocate(m, 64, &p[0]));
  is(cuemm_ipc_export(m, p[0], 0, &h), CUDA_ERROR_NOT_SUPPORTED, "system memory cannot be exported either");
  CHECK_CU(cuemm_destroy(m));
  like(cuemm_last_error(), "freed 1 outstanding allocations", "destroy frees the live one");
  /* Abandoning a system-memory manager still frees its host memory: it is
   * the process's, not the context's (a leak checker would say otherwise). */
  m = make(&c);
  CHECK_CU(cuemm_allocate(m, 4096, &p[0]));
  CHECK_CU(cuemm_allocate(m, 4096, &p[1]));
  CHECK_CU(cuemm_free(m, p[1]));
  CHECK_CU(cuemm_abandon(m));
  like(cuemm_last_error(), "dropped 1 live allocations and 1 pending frees", "abandon drops the system blocks");
  if (sim_set_pageable)
    sim_set_pageable(0);
}

/* ---- configuration ------------------------------------------------------------------------ */

static void configuration(void)
{
  cuemm_config c;
  setenv("CUEMM_MEMORY", "managed", 1);
  setenv("CUEMM_MANAGED_PREFETCH", "1", 1);
  setenv("CUEMM_MANAGED_PREFERRED_LOCATION", "cpu", 1);
  setenv("CUEMM_MANAGED_ACCESSED_BY", "device", 1);
  setenv("CUEMM_MANAGED_LIMIT", "3GiB", 1);
  CHECK_CU(cuemm_config_init(&c));
  is(c.memory, CUEMM_MEMORY_MANAGED, "CUEMM_MEMORY=managed");
  is(c.managed_prefetch, 1, "CUEMM_MANAGED_PREFETCH=1");
  is(c.managed_preferred_location, CUEMM_LOCATION_CPU, "CUEMM_MANAGED_PREFERRED_LOCATION=cpu");
  is(c.managed_accessed_by, CUEMM_LOCATION_DEVICE, "CUEMM_MANAGED_ACCESSED_BY=device");
  is(c.managed_limit, (size_t)3 << 30, "CUEMM_MANAGED_LIMIT=3GiB");
  setenv("CUEMM_MEMORY", "system", 1);
  CHECK_CU(cuemm_config_init(&c));
  is(c.memory, CUEMM_MEMORY_SYSTEM, "CUEMM_MEMORY=system");
  setenv("CUEMM_MEMORY", "Managed", 1);
  is(cuemm_config_init(&c), CUDA_ERROR_INVALID_VALUE, "CUEMM_MEMORY=Managed refused (strict)");
  like(cuemm_last_error(), "CUEMM_MEMORY=\"Managed\" is invalid: expected \"device\", \"managed\" or \"system\"",
       "the message names the values");
  unsetenv("CUEMM_MEMORY");
  setenv("CUEMM_MANAGED_PREFETCH", "yes", 1);
  is(cuemm_config_init(&c), CUDA_ERROR_INVALID_VALUE, "CUEMM_MANAGED_PREFETCH=yes refused");
  unsetenv("CUEMM_MANAGED_PREFETCH");
  setenv("CUEMM_MANAGED_ACCESSED_BY", "gpu", 1);
  is(cuemm_config_init(&c), CUDA_ERROR_INVALID_VALUE, "CUEMM_MANAGED_ACCESSED_BY=gpu refused");
  like(cuemm_last_error(), "expected \"none\", \"device\" or \"cpu\"", "named");
  unsetenv("CUEMM_MANAGED_ACCESSED_BY");
  setenv("CUEMM_MANAGED_LIMIT", "-1", 1);
  is(cuemm_config_init(&c), CUDA_ERROR_INVALID_VALUE, "CUEMM_MANAGED_LIMIT=-1 refused");
  unsetenv("CUEMM_MANAGED_LIMIT");
  unsetenv("CUEMM_MANAGED_PREFERRED_LOCATION");
  CHECK_CU(cuemm_config_init(&c));
  is(c.memory, CUEMM_MEMORY_DEVICE, "default: device memory");
  is(c.managed_prefetch, 0, "default: no prefetch");
  is(c.managed_limit, 0, "default: no limit");

  cuemm_manager *m = NULL;
  c = test_config(10, 1.0);
  c.memory = (cuemm_memory_kind)7;
  is(cuemm_manager_create(NULL, &c, &m), CUDA_ERROR_INVALID_VALUE, "cuemm_config.memory = 7 refused");
  like(cuemm_last_error(), "cuemm_config.memory = 7 is invalid", "named");
  c = test_config(10, 1.0);
  c.managed_accessed_by = (cuemm_location)3;
  is(cuemm_manager_create(NULL, &c, &m), CUDA_ERROR_INVALID_VALUE, "cuemm_config.managed_accessed_by = 3 refused");
  c = managed_config(4 * MiB, 0, 10);
  c.pool = CUEMM_POOL_VMM;
  is(cuemm_manager_create(NULL, &c, &m), CUDA_ERROR_INVALID_VALUE, "managed memory with the VMM pool refused");
  like(cuemm_last_error(), "cannot be combined with CUEMM_POOL=vmm", "the message says so");
  c = managed_config(4 * MiB + 100, 0, 10);
  is(cuemm_manager_create(NULL, &c, &m), CUDA_ERROR_INVALID_VALUE, "a segment size not a multiple of 256 refused");
  ok(m == NULL, "no manager after a refusal");
  cuemm_managed_stats s;
  is(cuemm_managed_get_stats(NULL, &s), CUDA_ERROR_INVALID_VALUE, "stats of NULL");
  is(cuemm_managed_trim(NULL), CUDA_ERROR_INVALID_VALUE, "trim of NULL");
  c = test_config(10, 1.0);
  m = make(&c);
  CHECK_CU(cuemm_managed_get_stats(m, &s));
  is(s.memory, CUEMM_MEMORY_DEVICE, "a device-memory manager's managed stats are zeros");
  is(s.held_bytes, 0, "nothing held");
  is(cuemm_managed_trim(m), CUDA_ERROR_INVALID_VALUE, "trim of a device-memory manager refused");
  like(cuemm_last_error(), "has no managed memory", "saying why");
  CHECK_CU(cuemm_destroy(m));
}

/* ---- the driver's two ABI variants (simcuda) ---------------------------------------------- */

/* cuemm resolves cuMemPrefetchAsync and cuMemAdvise at API version 12000,
 * where they take a CUdevice; cuda.h 13 names the CUmemLocation variants.
 * Both reach simcuda's one implementation with the same meaning. */
static void driver_variants(void)
{
#if CUDA_VERSION >= 13000
  if (!sim_present || !sim_managed_get) {
    skip(7, SIM_REASON);
    return;
  }
  CUdeviceptr p, q;
  CHECK_CU(cuMemAllocManaged(&p, 8192, CU_MEM_ATTACH_GLOBAL));
  CUmemLocation host = { .type = CU_MEM_LOCATION_TYPE_HOST, .id = 0 };
  CHECK_CU(cuMemPrefetchAsync(p, 4096, host, 0, NULL));
  simcuda_managed_range r;
  sim_managed_get(p, &r);
  is(r.last_prefetch_dst, CU_DEVICE_CPU, "the CUmemLocation variant prefetches to the host");
  void *fn = NULL;
  CUdriverProcAddressQueryResult st;
  CHECK_CU(cuGetProcAddress("cuMemPrefetchAsync", &fn, 12000, 0, &st));
  CUresult (*v1)(CUdeviceptr, size_t, CUdevice, CUstream);
  memcpy(&v1, &fn, sizeof fn);
  CHECK_CU(v1(p, 4096, 1, NULL));
  sim_managed_get(p, &r);
  is(r.last_prefetch_dst, 1, "the variant of version 12000 takes a CUdevice");
  is(v1(p + 4096, 4097, 0, NULL), CUDA_ERROR_INVALID_VALUE, "a range past the allocation's end refused");
  is(v1(p, 0, 0, NULL), CUDA_ERROR_INVALID_VALUE, "0 bytes refused");
  is(v1(p, 16, 5, NULL), CUDA_ERROR_INVALID_DEVICE, "a device that does not exist refused");
  is(cuMemAllocManaged(&q, 0, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_INVALID_VALUE, "cuMemAllocManaged of 0 bytes");
  is(cuMemAllocManaged(&q, 16, 7), CUDA_ERROR_INVALID_VALUE, "cuMemAllocManaged with unknown flags");
  CHECK_CU(cuMemFree(p));
#else
  skip(7, "cuda.h before 13.0 names the CUdevice variants itself");
#endif
}

int main(void)
{
  sim_init();
  sim_managed_get = (__typeof__(sim_managed_get))dlsym(RTLD_DEFAULT, "simcuda_managed_get");
  sim_managed_totals = (__typeof__(sim_managed_totals))dlsym(RTLD_DEFAULT, "simcuda_managed_totals_get");
  sim_set_pageable = (__typeof__(sim_set_pageable))dlsym(RTLD_DEFAULT, "simcuda_set_pageable");
  test_primary_context(0);
  size_t live0 = sim_live_baseline();
  basics();
  release_threshold();
  queue_and_scopes();
  prefetch_and_advice();
  oversubscription();
  cap();
  ipc_refused();
  faults();
  system_memory();
  configuration();
  driver_variants();
  sim_check_nothing_left(live0);
  test_release_primary(0);
  return tap_done();
}
