/* test-adapter.c: the per-device managers (cuemm_device_manager) and the
 * entry points PyTorch's pluggable allocator calls (cuemm_torch_*), called
 * with the signatures PyTorch calls them with: sizes (0, ordinary, huge,
 * negative as ssize_t), streams (the legacy one and created ones), device
 * ordinals in and out of range, frees of NULL, foreign and freed pointers,
 * record_stream, empty_cache, the graph pools, the deferred path when
 * CUEMM_POOL=none is set explicitly, two devices, frees from other
 * threads, and tags (a manager per tag and device, current process-wide).  The managers live as long as the process, as they do under a
 * framework, so the cases follow each other on the same two managers.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#include "testutil.h"

typedef void *(*alloc_fn)(size_t, int, CUstream);
typedef void (*free_fn)(void *, size_t, int, CUstream);

static int ndev; /* devices the driver sees */

/* Called through pointers of PyTorch's types, as its std::function does. */
static alloc_fn torch_alloc = cuemm_torch_alloc;
static free_fn torch_free = cuemm_torch_free;

#define MIB ((size_t)1 << 20)

static cuemm_adapter_stats astats(void)
{
  cuemm_adapter_stats s;
  CHECK_CU(cuemm_adapter_get_stats(&s));
  return s;
}

static cuemm_manager *dev_manager(int device)
{
  cuemm_manager *m = NULL;
  CHECK_CU(cuemm_device_manager(device, &m));
  return m;
}

static unsigned char byte_at(void *p)
{
  unsigned char b = 0;
  CHECK_CU(cuCtxSynchronize());
  CHECK_CU(cuMemcpyDtoH(&b, (CUdeviceptr)(uintptr_t)p, 1));
  return b;
}

static void test_ordinals(void)
{
  cuemm_manager *m = NULL;
  int count = 0;
  CHECK_CU(cuDeviceGetCount(&count));
  is(cuemm_device_manager(0, NULL), CUDA_ERROR_INVALID_VALUE, "a NULL out pointer is refused");
  is(cuemm_device_manager(-1, &m), CUDA_ERROR_INVALID_DEVICE, "device -1 is refused");
  like(cuemm_last_error(), "device -1 does not exist", "the message names the ordinal");
  is(cuemm_device_manager(count, &m), CUDA_ERROR_INVALID_DEVICE, "device %d (the count) is refused", count);
  char want[64];
  snprintf(want, sizeof want, "the driver sees %d device", count);
  like(cuemm_last_error(), want, "the message gives the device count");
  ok(m == NULL, "nothing is written on failure");

  cuemm_adapter_stats before = astats();
  ok(torch_alloc(256, 7, NULL) == NULL, "alloc on device 7 (absent) returns NULL");
  like(cuemm_last_error(), "device 7", "the thread's message names the device");
  cuemm_adapter_stats after = astats();
  is(after.alloc_failures, before.alloc_failures + 1, "the failure is counted");
  like(after.last_failure, "cuemm_torch_alloc(256 bytes, device 7", "last_failure says which call");
  is(after.devices, 0, "no manager was made");
}

/* An invalid variable fails the manager's creation with its name, and
 * leaves the primary context as it was. */
static void test_bad_environment(void)
{
  /* The last device: on one GPU, device 0, whose primary context the test
   * holds; the check is that the failed creation leaves it as it was. */
  int last = ndev - 1;
  CUdevice dev;
  unsigned flags = 0;
  int active0 = -1, active = -1;
  CHECK_CU(cuDeviceGet(&dev, last));
  CHECK_CU(cuDevicePrimaryCtxGetState(dev, &flags, &active0));
  setenv("CUEMM_MAX_PENDING_DEALLOCS_RATIO", "20%", 1);
  setenv("CUEMM_POOL", "banana", 1);
  cuemm_manager *m = NULL;
  is(cuemm_device_manager(last, &m), CUDA_ERROR_INVALID_VALUE, "an invalid CUEMM_* variable fails the creation");
  like(cuemm_last_error(), "CUEMM_MAX_PENDING_DEALLOCS_RATIO=\"20%\" is invalid: expected ",
       "the message names the variable");
  like(cuemm_last_error(), "CUEMM_POOL=\"banana\" is invalid: expected \"none\" or \"vmm\"",
       "and the other invalid one, whole");
  unsetenv("CUEMM_MAX_PENDING_DEALLOCS_RATIO");
  unsetenv("CUEMM_POOL");
  CHECK_CU(cuDevicePrimaryCtxGetState(dev, &flags, &active));
  is(active, active0, "device %d's primary context is as it was (%s)", last, active0 ? "held" : "released");
  is(astats().devices, 0, "no manager was made");
}

static void test_sizes_and_streams(void)
{
  cuemm_adapter_stats a0 = astats();
  ok(torch_alloc(0, 0, NULL) == NULL, "size 0 returns NULL (as cudaMalloc, for empty tensors)");
  is(astats().alloc_failures, a0.alloc_failures, "and is no failure");
  torch_free(NULL, 0, 0, NULL);
  is(astats().free_failures, a0.free_failures, "a free of NULL does nothing");

  void *p = torch_alloc(1000, 0, NULL);
  ok(p != NULL, "1000 bytes on device 0, legacy stream");
  cuemm_manager *m = dev_manager(0);
  cuemm_manager *cur = NULL;
  CHECK_CU(cuemm_get(&cur));
  ok(cur == m, "the device manager is the primary context's registered manager");
  cuemm_pool_stats ps;
  CHECK_CU(cuemm_pool_get_stats(m, &ps));
  is(ps.enabled, 1, "with CUEMM_POOL unset the manager has the pool");
  is(astats().devices, 1, "one manager made");
  CHECK_CU(cuMemsetD8((CUdeviceptr)(uintptr_t)p, 0x5a, 1000));
  is(byte_at(p), 0x5a, "the memory is usable");
  cuemm_stats st = test_stats(m);
  is(st.live_count, 1, "one live block");
  is(st.live_bytes, 1000, "of the size asked");

  torch_free(p, 1000, 0, NULL);
  st = test_stats(m);
  is(st.live_count, 0, "freed");
  is(st.stream_cached_count, 1, "cached for the stream");
  unsigned long grows = sim_calls("cuMemCreate"), events = sim_calls("cuEventRecord");
  void *q = torch_alloc(1000, 0, NULL);
  ok(q == p, "the same stream gets the block again");
  if (sim_present)
    ok(sim_calls("cuMemCreate") == grows && sim_calls("cuEventRecord") == events, "without a driver call");
  else
    skip(1, SIM_REASON);
  torch_free(q, 1000, 0, NULL);

  CUstream s1, s2;
  CHECK_CU(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  CHECK_CU(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  void *a = torch_alloc(3 * MIB, 0, s1);
  ok(a != NULL, "3 MiB on a created stream");
  CHECK_CU(cuMemsetD8Async((CUdeviceptr)(uintptr_t)a, 7, 3 * MIB, s1));
  torch_free(a, 3 * MIB, 0, s1);
  void *b = torch_alloc(3 * MIB, 0, s1);
  ok(b == a, "the freeing stream reuses it at once");
  CHECK_CU(cuMemsetD8Async((CUdeviceptr)(uintptr_t)b, 9, 3 * MIB, s1));

  /* record_stream: the block's use on s2 is waited for when it is freed. */
  st = test_stats(m);
  cuemm_torch_record_stream(b, s2);
  is(astats().record_stream_failures, a0.record_stream_failures, "record_stream of a live block is accepted");
  torch_free(b, 3 * MIB, 0, s1);
  cuemm_stats st2 = test_stats(m);
  is(st2.stream_event_waits, st.stream_event_waits + 1, "its free made s1 wait for s2 (one event wait)");

  cuemm_torch_record_stream((void *)(uintptr_t)0x1000, s2);
  cuemm_adapter_stats a1 = astats();
  is(a1.record_stream_failures, a0.record_stream_failures + 1, "record_stream of a foreign pointer is counted");
  like(a1.last_failure, "no device's manager holds", "and explained");

  CHECK_CU(cuStreamSynchronize(s1));
  CHECK_CU(cuStreamSynchronize(s2));
  CHECK_CU(cuemm_stream_release(m, s1));
  CHECK_CU(cuemm_stream_release(m, s2));
  CHECK_CU(cuStreamDestroy(s1));
  CHECK_CU(cuStreamDestroy(s2));
}

static void test_refusals(void)
{
  cuemm_adapter_stats a0 = astats();
  void *p = torch_alloc((size_t)1 << 40, 0, NULL);
  ok(p == NULL, "1 TiB: NULL");
  like(cuemm_last_error(), "1099511627776", "the message gives the size");
  like(cuemm_last_error(), "more than the device's", "and that the device has less");
  is(astats().alloc_failures, a0.alloc_failures + 1, "counted");

  if (sim_present) { /* simcuda's device has 1 GiB: a second 700 MiB runs out */
    void *big = torch_alloc(700 * MIB, 0, NULL);
    ok(big != NULL, "700 MiB of the device's 1 GiB");
    p = torch_alloc(700 * MIB, 0, NULL);
    ok(p == NULL, "700 MiB more: NULL");
    like(cuemm_last_error(), "out of pool memory for 734003200 bytes", "the message says out of memory, and for what");
    torch_free(big, 700 * MIB, 0, NULL);
    torch_free(p, 700 * MIB, 0, NULL);
    is(astats().alloc_failures, a0.alloc_failures + 2, "counted");
  } else
    skip(4, "running a device out of memory needs simcuda's 1 GiB device");

  p = torch_alloc((size_t)(ssize_t)-5, 0, NULL);
  ok(p == NULL, "size -5 (as ssize_t): NULL");
  like(cuemm_last_error(), "negative", "the message says the size is negative");

  torch_free((void *)(uintptr_t)0x1234, 64, 0, NULL);
  cuemm_adapter_stats a1 = astats();
  is(a1.free_failures, a0.free_failures + 1, "a free of a foreign pointer is refused, not a crash");
  like(a1.last_failure, "cuemm_torch_free(0x1234", "last_failure names the pointer");

  void *q = torch_alloc(512, 0, NULL);
  torch_free(q, 512, 0, NULL);
  torch_free(q, 512, 0, NULL);
  a1 = astats();
  is(a1.free_failures, a0.free_failures + 2, "a double free is refused");
  like(a1.last_failure, "double free", "as such");

  torch_free((void *)(uintptr_t)0x1234, 64, 5, NULL);
  a1 = astats();
  is(a1.free_failures, a0.free_failures + 3, "a free on a device without a manager is refused");
  like(a1.last_failure, "device 5 has no manager", "and says why");
}

static void test_empty_cache(void)
{
  cuemm_manager *m = dev_manager(0);
  void *p[4];
  for (int i = 0; i < 4; i++)
    p[i] = torch_alloc(8 * MIB, 0, NULL);
  for (int i = 0; i < 4; i++)
    torch_free(p[i], 8 * MIB, 0, NULL);
  cuemm_pool_stats ps;
  CHECK_CU(cuemm_pool_get_stats(m, &ps));
  ok(ps.mapped_bytes >= 32 * MIB, "the pool holds the freed blocks' memory (%zu bytes mapped)", ps.mapped_bytes);
  size_t kept = test_stats(m).stream_cached_bytes;
  ok(kept >= 4 * 8 * MIB && kept < 4 * 8 * MIB + MIB, "the thread keeps the four for the stream's next requests "
     "(%zu bytes kept)", kept);
  cuemm_adapter_stats a0 = astats();
  cuemm_torch_empty_cache();
  CHECK_CU(cuemm_pool_get_stats(m, &ps));
  is(ps.mapped_bytes, 0, "empty_cache gives every chunk back");
  is(test_stats(m).stream_cached_bytes, 0, "and empties the stream caches");
  cuemm_adapter_stats a1 = astats();
  is(a1.empty_caches, a0.empty_caches + 1, "counted");
  is(a1.empty_cache_failures, a0.empty_cache_failures, "without failure");
}

/* Device 1's manager made with CUEMM_POOL=none: the deferred path. */
static void test_deferred_device(void)
{
  if (ndev < 2) {
    skip(10, "needs a second device (simcuda has two; this driver sees %d)", ndev);
    return;
  }
  setenv("CUEMM_POOL", "none", 1);
  void *p = torch_alloc(4096, 1, NULL);
  unsetenv("CUEMM_POOL");
  ok(p != NULL, "device 1 (CUEMM_POOL=none): an allocation");
  cuemm_manager *m1 = dev_manager(1);
  ok(m1 != dev_manager(0), "device 1 has a manager of its own");
  is(astats().devices, 2, "two managers made");
  cuemm_pool_stats ps;
  CHECK_CU(cuemm_pool_get_stats(m1, &ps));
  is(ps.enabled, 0, "CUEMM_POOL=none is obeyed");
  CUdevice dev = -1;
  CUcontext c1 = cuemm_context(m1);
  CHECK_CU(cuCtxPushCurrent(c1));
  CHECK_CU(cuCtxGetDevice(&dev));
  CUcontext popped;
  CHECK_CU(cuCtxPopCurrent(&popped));
  is(dev, 1, "its context is device 1's");
  cuemm_adapter_stats a0 = astats();
  cuemm_torch_record_stream(p, NULL);
  is(astats().record_stream_failures, a0.record_stream_failures, "record_stream on the deferred path is accepted");
  torch_free(p, 4096, 1, NULL);
  cuemm_stats st = test_stats(m1);
  is(st.pending_count, 1, "the free is deferred");
  is(st.live_count, 0, "and nothing is live");
  torch_free(p, 4096, 0, NULL);
  is(astats().free_failures, a0.free_failures + 1, "a free naming the wrong device is refused");
  cuemm_torch_empty_cache();
  is(test_stats(m1).pending_count, 0, "empty_cache flushes the deferred frees");
}

static void test_graph_pools(void)
{
  cuemm_manager *m = dev_manager(0);
  cuemm_torch_pool_id id = { 1, 2 };
  cuemm_adapter_stats a0 = astats();
  unsigned long exchanges = sim_calls("cuThreadExchangeStreamCaptureMode");
  cuemm_torch_begin_allocate_to_pool(0, id, NULL);
  void *p = torch_alloc(2048, 0, NULL);
  cuemm_torch_end_allocate_to_pool(0, id);
  ok(p != NULL, "an allocation inside the pool's window");
  if (sim_present) {
    is(sim_calls("cuThreadExchangeStreamCaptureMode"), exchanges + 2, "it ran in relaxed capture mode, restored after");
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    CHECK_CU(cuThreadExchangeStreamCaptureMode(&mode));
    is(mode, CU_STREAM_CAPTURE_MODE_GLOBAL, "the thread's mode is global again");
    CHECK_CU(cuThreadExchangeStreamCaptureMode(&mode));
  } else
    skip(2, SIM_REASON);
  exchanges = sim_calls("cuThreadExchangeStreamCaptureMode");
  void *outside = torch_alloc(2048, 0, NULL);
  torch_free(outside, 2048, 0, NULL);
  is(sim_calls("cuThreadExchangeStreamCaptureMode"), exchanges, "outside a pool's window, no exchange");
  is(astats().graph_pools, a0.graph_pools + 1, "the pool is counted");
  torch_free(p, 2048, 0, NULL);
  cuemm_adapter_stats a1 = astats();
  is(a1.graph_blocks_held, a0.graph_blocks_held + 1, "its free holds the block for the pool");
  is(a1.free_failures, a0.free_failures, "without failure");
  is(test_stats(m).live_count, 1, "the block stays allocated");
  void *q = torch_alloc(2048, 0, NULL);
  ok(q != NULL && q != p, "a later allocation does not get the pool's block");
  torch_free(q, 2048, 0, NULL);
  cuemm_torch_release_pool(0, id);
  cuemm_stats st = test_stats(m);
  is(st.live_count, 0, "releasing the pool frees it");
  ok(st.pending_count >= 1, "through the deferred path (its flush synchronizes)");

  /* A block still live when its pool is released is freed by its own free,
   * deferred too. */
  cuemm_torch_begin_allocate_to_pool(0, id, NULL);
  void *r = torch_alloc(4096, 0, NULL);
  cuemm_torch_end_allocate_to_pool(0, id);
  cuemm_torch_release_pool(0, id);
  CHECK_CU(cuemm_flush(m));
  torch_free(r, 4096, 0, NULL);
  st = test_stats(m);
  is(st.pending_count, 1, "a block of a released pool is freed deferred");
  is(astats().graph_blocks_held, a1.graph_blocks_held, "not held");
  cuemm_torch_begin_allocate_to_pool(-3, id, NULL);
  is(astats().graph_failures, a0.graph_failures + 1, "a pool on device -3 is refused");
  void *s = torch_alloc(4096, 0, NULL);
  torch_free(s, 4096, 0, NULL);
  is(test_stats(m).stream_cached_count >= 1, 1, "afterwards blocks are ordinary again");
}

#define NTHREADS 4
#define ROUNDS 300

static void *volatile handoff[NTHREADS][ROUNDS];

static void *worker(void *arg)
{
  int t = (int)(intptr_t)arg;
  CUcontext c;
  CUdevice dev;
  CHECK_CU(cuDeviceGet(&dev, 0));
  CHECK_CU(cuDevicePrimaryCtxRetain(&c, dev));
  CHECK_CU(cuCtxSetCurrent(c));
  for (int i = 0; i < ROUNDS; i++) {
    size_t size = 256 + (size_t)((i * 7919 + t * 104729) % 65536);
    void *p = torch_alloc(size, 0, NULL);
    if (p && i % 2)
      torch_free(p, size, 0, NULL);
    else
      handoff[t][i] = p; /* freed by another thread */
  }
  CHECK_CU(cuCtxSetCurrent(NULL));
  CHECK_CU(cuDevicePrimaryCtxRelease(dev));
  return NULL;
}

static void test_threads(void)
{
  cuemm_adapter_stats a0 = astats();
  pthread_t th[NTHREADS];
  for (int t = 0; t < NTHREADS; t++)
    pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t);
  for (int t = 0; t < NTHREADS; t++)
    pthread_join(th[t], NULL);
  int nulls = 0;
  for (int t = 0; t < NTHREADS; t++)
    for (int i = 0; i < ROUNDS; i += 2) {
      nulls += handoff[t][i] == NULL;
      torch_free(handoff[t][i], 0, 0, NULL); /* this thread frees the others' blocks */
    }
  is(nulls, 0, "%d threads allocated %d blocks each, none refused", NTHREADS, ROUNDS);
  cuemm_adapter_stats a1 = astats();
  is(a1.alloc_failures, a0.alloc_failures, "no allocation failed");
  is(a1.free_failures, a0.free_failures, "no free failed, frees from other threads included");
  is(test_stats(dev_manager(0)).live_count, 0, "nothing is live afterwards");
}

/* Tags: named managers over the same primary context. */
static void *tag_worker(void *arg)
{
  void **out = arg;
  CUcontext c;
  CUdevice dev;
  CHECK_CU(cuDeviceGet(&dev, 0));
  CHECK_CU(cuDevicePrimaryCtxRetain(&c, dev));
  CHECK_CU(cuCtxSetCurrent(c));
  *out = torch_alloc(8192, 0, NULL); /* as an autograd thread would */
  CHECK_CU(cuCtxSetCurrent(NULL));
  CHECK_CU(cuDevicePrimaryCtxRelease(dev));
  return NULL;
}

static int holds_block(cuemm_manager *m, void *p)
{
  CUdeviceptr base = 0;
  return cuemm_address_range(m, (CUdeviceptr)(uintptr_t)p, &base, NULL) == CUDA_SUCCESS &&
         base == (CUdeviceptr)(uintptr_t)p;
}

static void test_tags(void)
{
  cuemm_adapter_stats a0 = astats();
  cuemm_manager *m0 = dev_manager(0);
  const char *prev = "unset";
  ok(cuemm_adapter_get_tag() == NULL, "the default tag is current at first");
  char longname[80];
  memset(longname, 'x', 64);
  longname[64] = 0;
  is(cuemm_adapter_set_tag(longname, &prev), CUDA_ERROR_INVALID_VALUE, "a 64-character tag is refused");
  like(cuemm_last_error(), "64 characters long; at most 63", "the message gives the length");
  is(cuemm_adapter_set_tag("kv cache", &prev), CUDA_ERROR_INVALID_VALUE, "a tag with a space is refused");
  like(cuemm_last_error(), "character 0x20 at 2", "the message names the character");
  ok(cuemm_adapter_get_tag() == NULL && !strcmp(prev, "unset"), "the current tag stays, *previous untouched");

  CHECK_CU(cuemm_adapter_set_tag("weights", &prev));
  ok(prev == NULL, "set_tag says the default was current");
  ok(cuemm_adapter_get_tag() && !strcmp(cuemm_adapter_get_tag(), "weights"), "weights is current");
  void *w = torch_alloc(1 << 20, 0, NULL);
  ok(w != NULL, "1 MiB in tag weights");
  cuemm_manager *mw = NULL;
  CHECK_CU(cuemm_adapter_tag_manager("weights", 0, &mw));
  ok(mw != NULL && mw != m0, "tag weights has a manager of its own");
  ok(cuemm_context(mw) == cuemm_context(m0), "over the device's primary context");
  cuemm_manager *cur = NULL;
  CHECK_CU(cuemm_get(&cur));
  ok(cur == m0, "cuemm_get still finds the default manager");
  cuemm_pool_stats ps;
  CHECK_CU(cuemm_pool_get_stats(mw, &ps));
  is(ps.enabled, 1, "the tag's manager has a pool");
  ok(holds_block(mw, w) && !holds_block(m0, w), "the block is the tag's, not the default manager's");
  CHECK_CU(cuMemsetD8((CUdeviceptr)(uintptr_t)w, 0x3c, 1 << 20));
  is(byte_at(w), 0x3c, "the tag's memory is usable");

  /* Process-wide: another thread's allocation goes to the tag too. */
  void *fromthread = NULL;
  pthread_t th;
  pthread_create(&th, NULL, tag_worker, &fromthread);
  pthread_join(th, NULL);
  ok(fromthread && holds_block(mw, fromthread), "another thread's allocation joins the current tag");

  /* A second tag, and a block beyond its pool. */
  CHECK_CU(cuemm_adapter_set_tag("act", &prev));
  ok(prev && !strcmp(prev, "weights"), "set_tag returns the previous tag");
  void *a = torch_alloc(4096, 0, NULL);
  cuemm_manager *ma = NULL;
  CHECK_CU(cuemm_adapter_tag_manager("act", 0, &ma));
  ok(ma != mw && ma != m0 && holds_block(ma, a), "tag act: a third manager, holding its block");
  CHECK_CU(cuemm_adapter_set_tag(NULL, &prev));
  ok(prev && !strcmp(prev, "act"), "back to the default");
  void *d = torch_alloc(4096, 0, NULL);
  ok(holds_block(m0, d), "the default tag allocates from the device's manager again");

  /* Frees and record_stream find the owner from the pointer, whatever tag
   * is current. */
  CHECK_CU(cuemm_adapter_set_tag("act", NULL));
  size_t livew = test_stats(mw).live_count;
  cuemm_torch_record_stream(w, NULL);
  torch_free(w, 1 << 20, 0, NULL);
  torch_free(fromthread, 8192, 0, NULL);
  is(test_stats(mw).live_count, livew - 2, "freed in tag weights's manager while act is current");
  torch_free(d, 4096, 0, NULL);
  CHECK_CU(cuemm_adapter_set_tag(NULL, NULL));
  torch_free(a, 4096, 0, NULL);
  is(test_stats(ma).live_count, 0, "act's block freed under the default tag");
  cuemm_adapter_stats a1 = astats();
  is(a1.free_failures, a0.free_failures, "no free failed");
  is(a1.record_stream_failures, a0.record_stream_failures, "record_stream of a tag's block is accepted");
  torch_free(w, 1 << 20, 0, NULL);
  is(astats().free_failures, a0.free_failures + 1, "a second free of a tag's block is refused");

  /* Beyond the pool: a tag made with a small pool limit. */
  setenv("CUEMM_POOL_LIMIT", "64MiB", 1);
  CHECK_CU(cuemm_adapter_set_tag("big", NULL));
  void *b = torch_alloc(96 * MIB, 0, NULL);
  unsetenv("CUEMM_POOL_LIMIT");
  cuemm_manager *mb = NULL;
  CHECK_CU(cuemm_adapter_tag_manager("big", 0, &mb));
  CHECK_CU(cuemm_pool_get_stats(mb, &ps));
  ok(b && holds_block(mb, b) && ps.fallback_allocs == 1 && ps.limit_bytes == 64 * MIB,
     "96 MiB in tag big, beyond its pool (64 MiB): cuMemAlloc");
  CHECK_CU(cuemm_adapter_set_tag(NULL, NULL));
  torch_free(b, 96 * MIB, 0, NULL);
  ok(!holds_block(mb, b), "freed from its manager under the default tag");
  is(astats().free_failures, a0.free_failures + 1, "without failure");

  /* A CUDA graph's pool captured inside a tag. */
  cuemm_torch_pool_id id = { 7, 7 };
  CHECK_CU(cuemm_adapter_set_tag("weights", NULL));
  cuemm_torch_begin_allocate_to_pool(0, id, NULL);
  void *g = torch_alloc(2048, 0, NULL);
  cuemm_torch_end_allocate_to_pool(0, id);
  CHECK_CU(cuemm_adapter_set_tag(NULL, NULL));
  ok(g && holds_block(mw, g), "a graph's block allocated in tag weights is the tag's");
  torch_free(g, 2048, 0, NULL);
  ok(holds_block(mw, g), "its free holds it for the graph");
  cuemm_torch_release_pool(0, id);
  ok(!holds_block(mw, g), "releasing the pool frees it in the tag's manager");
  is(astats().free_failures, a0.free_failures + 1, "without failure");

  /* The stream release reaches every tag's manager. */
  CUstream s;
  CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CHECK_CU(cuemm_adapter_set_tag("act", NULL));
  void *x = torch_alloc(4096, 0, s);
  CHECK_CU(cuemm_adapter_set_tag(NULL, NULL));
  torch_free(x, 4096, 0, s);
  is(test_stats(ma).stream_cached_count, 1, "act caches a block for the created stream");
  CHECK_CU(cuStreamSynchronize(s));
  unsigned long events = sim_calls("cuEventRecord");
  CHECK_CU(cuemm_adapter_stream_release(0, s));
  if (sim_present)
    is(sim_calls("cuEventRecord"), events + 1, "cuemm_adapter_stream_release gave act's block its last event");
  else
    skip(1, SIM_REASON);
  is(cuemm_adapter_stream_release(0, NULL), CUDA_ERROR_INVALID_VALUE, "the NULL stream is refused");
  like(cuemm_last_error(), "cuemm_adapter_stream_release(device 0, stream", "the message names the call");
  CHECK_CU(cuStreamDestroy(s));

  /* Managers past the limit of tags. */
  char name[16];
  int refused = 0, made = 0;
  for (int i = 0; i < 70 && !refused; i++) {
    snprintf(name, sizeof name, "t%d", i);
    CUresult r = cuemm_adapter_set_tag(name, NULL);
    refused = r == CUDA_ERROR_OUT_OF_MEMORY;
    made += r == CUDA_SUCCESS;
  }
  ok(refused, "tags past the limit are refused");
  like(cuemm_last_error(), "at most 63 tags", "the message gives the limit");
  is(made, 63 - 6, "63 tags in all (kw, kv, graph, weights, act, big, and these)");
  CHECK_CU(cuemm_adapter_set_tag(NULL, NULL));
  cuemm_manager *none = NULL;
  is(cuemm_adapter_tag_manager("weights", 99, &none), CUDA_ERROR_INVALID_DEVICE, "a tag's manager on device 99 is refused");
  is(cuemm_adapter_tag_manager("weights", 0, NULL), CUDA_ERROR_INVALID_VALUE, "a NULL out pointer is refused");
  is(astats().alloc_failures, a0.alloc_failures, "no allocation failed");
}

/* Suspending one tag keeps the other tags and the default working; with
 * KEEP the tag's contents come back at the same addresses. */
static void test_tag_suspend(void)
{
  cuemm_adapter_stats a0 = astats();
  is(cuemm_adapter_resume("never-suspended", 0), CUDA_ERROR_ILLEGAL_STATE, "resume of a tag with no manager is refused");
  like(cuemm_last_error(), "nothing was suspended", "and says why");
  is(cuemm_adapter_suspend("bad tag", 0, 0), CUDA_ERROR_INVALID_VALUE, "suspend of a bad name is refused");

  CHECK_CU(cuemm_adapter_set_tag("kw", NULL));
  void *w = torch_alloc(3 * MIB, 0, NULL);
  CHECK_CU(cuemm_adapter_set_tag("kv", NULL));
  void *k = torch_alloc(5 * MIB, 0, NULL);
  void *k2 = torch_alloc(MIB, 0, NULL);
  CHECK_CU(cuemm_adapter_set_tag(NULL, NULL));
  void *d = torch_alloc(MIB, 0, NULL);
  ok(w && k && d, "blocks in tags kw, kv and the default");
  CHECK_CU(cuMemsetD8((CUdeviceptr)(uintptr_t)w, 0x11, 3 * MIB));
  CHECK_CU(cuMemsetD8((CUdeviceptr)(uintptr_t)w + MIB, 0x22, 1));
  CHECK_CU(cuMemsetD8((CUdeviceptr)(uintptr_t)d, 0x33, MIB));
  cuemm_manager *mw = NULL, *mk = NULL;
  CHECK_CU(cuemm_adapter_tag_manager("kw", 0, &mw));
  CHECK_CU(cuemm_adapter_tag_manager("kv", 0, &mk));

  CHECK_CU(cuemm_adapter_suspend("kv", 0, 0));
  CHECK_CU(cuemm_adapter_suspend("kw", 0, CUEMM_SUSPEND_KEEP));
  cuemm_pool_stats ps;
  CHECK_CU(cuemm_pool_get_stats(mw, &ps));
  ok(ps.suspended && ps.mapped_bytes == 0 && ps.kept_bytes >= 3 * MIB, "kw suspended: nothing mapped, 3 MiB kept");
  CHECK_CU(cuemm_pool_get_stats(mk, &ps));
  ok(ps.suspended && ps.mapped_bytes == 0 && ps.kept_bytes == 0, "kv suspended: nothing mapped, nothing kept");
  is(cuemm_adapter_suspend("kw", 0, 0), CUDA_ERROR_ILLEGAL_STATE, "a second suspend is refused");
  like(cuemm_last_error(), "cuemm_adapter_suspend(tag \"kw\", device 0)", "the message names the tag");

  size_t kv_live = test_stats(mk).live_count;
  cuemm_torch_free(k2, MIB, 0, NULL);
  is(test_stats(mk).live_count, kv_live - 1, "a block of suspended kv freed while the default tag is current");
  is(astats().free_failures, a0.free_failures, "the free is accepted");

  /* The default tag still works, and a suspended tag refuses. */
  void *d2 = torch_alloc(MIB, 0, NULL);
  ok(d2 != NULL, "the default tag allocates while kw and kv are suspended");
  torch_free(d2, MIB, 0, NULL);
  is(byte_at(d), 0x33, "the default tag's contents are untouched");
  CHECK_CU(cuemm_adapter_set_tag("kv", NULL));
  ok(torch_alloc(4096, 0, NULL) == NULL, "an allocation in suspended kv returns NULL");
  CHECK_CU(cuemm_adapter_set_tag(NULL, NULL));
  cuemm_adapter_stats a1 = astats();
  is(a1.alloc_failures, a0.alloc_failures + 1, "counted as a failure");
  like(a1.last_failure, "suspended", "saying the manager is suspended");
  cuemm_torch_empty_cache();
  is(astats().empty_cache_failures, a0.empty_cache_failures, "empty_cache skips suspended tags");

  CHECK_CU(cuemm_adapter_resume("kw", 0));
  CHECK_CU(cuemm_adapter_resume("kv", 0));
  is(byte_at(w), 0x11, "kw's contents are back at the same address");
  is(byte_at((char *)w + MIB), 0x22, "byte for byte");
  CHECK_CU(cuMemsetD8((CUdeviceptr)(uintptr_t)k, 0x44, 5 * MIB));
  is(byte_at((char *)k + 5 * MIB - 1), 0x44, "kv's block is usable again (contents discarded)");
  is(cuemm_adapter_resume("kw", 0), CUDA_ERROR_ILLEGAL_STATE, "a resume of a resumed tag is refused");
  torch_free(w, 3 * MIB, 0, NULL);
  torch_free(k, 5 * MIB, 0, NULL);
  torch_free(d, MIB, 0, NULL);
  is(astats().free_failures, a0.free_failures, "every block freed");
}

/* A graph's pool captured in a tag: its blocks, held for the graph after
 * their free, keep their contents through a suspension with KEEP, as a
 * replay after the resume needs. */
static void test_tag_graph(void)
{
  cuemm_adapter_stats a0 = astats();
  cuemm_torch_pool_id id = { 9, 1 };
  CHECK_CU(cuemm_adapter_set_tag("graph", NULL));
  cuemm_torch_begin_allocate_to_pool(0, id, NULL);
  void *in = torch_alloc(MIB, 0, NULL);
  void *tmp = torch_alloc(2 * MIB, 0, NULL);
  cuemm_torch_end_allocate_to_pool(0, id);
  CHECK_CU(cuemm_adapter_set_tag(NULL, NULL));
  ok(in && tmp, "two blocks of a graph's pool in tag graph");
  CHECK_CU(cuMemsetD8((CUdeviceptr)(uintptr_t)in, 0x61, MIB));
  CHECK_CU(cuMemsetD8((CUdeviceptr)(uintptr_t)tmp, 0x62, 2 * MIB));
  torch_free(tmp, 2 * MIB, 0, NULL); /* freed during the capture: held for the graph */
  is(astats().graph_blocks_held, a0.graph_blocks_held + 1, "the freed one is held for the graph");
  CHECK_CU(cuemm_adapter_suspend("graph", 0, CUEMM_SUSPEND_KEEP));
  cuemm_manager *mg = NULL;
  CHECK_CU(cuemm_adapter_tag_manager("graph", 0, &mg));
  cuemm_pool_stats ps;
  CHECK_CU(cuemm_pool_get_stats(mg, &ps));
  ok(ps.suspended && ps.mapped_bytes == 0 && ps.kept_bytes >= 3 * MIB, "suspended with both blocks' contents kept");
  CHECK_CU(cuemm_adapter_resume("graph", 0));
  ok(byte_at(in) == 0x61 && byte_at((char *)in + MIB - 1) == 0x61, "the graph's input is back");
  ok(byte_at(tmp) == 0x62 && byte_at((char *)tmp + 2 * MIB - 1) == 0x62, "and the block held for it");
  cuemm_torch_release_pool(0, id);
  torch_free(in, MIB, 0, NULL);
  CHECK_CU(cuemm_flush(mg));
  is(test_stats(mg).live_count, 0, "releasing the graph frees both in the tag's manager");
  is(astats().free_failures, a0.free_failures, "without failure");
}

/* Tags suspended and resumed from one thread while others allocate and
 * free on the default tag. */
#define SUSPEND_ROUNDS 20
static _Atomic int stop_workers;

static void *default_worker(void *arg)
{
  _Atomic long *count = arg;
  CUcontext c;
  CUdevice dev;
  CHECK_CU(cuDeviceGet(&dev, 0));
  CHECK_CU(cuDevicePrimaryCtxRetain(&c, dev));
  CHECK_CU(cuCtxSetCurrent(c));
  while (!atomic_load(&stop_workers)) {
    void *p = torch_alloc(4096 + (size_t)(atomic_load(count) % 7) * 65536, 0, NULL);
    if (p) {
      CHECK_CU(cuMemsetD8((CUdeviceptr)(uintptr_t)p, 1, 4096));
      torch_free(p, 0, 0, NULL);
      atomic_fetch_add(count, 1);
    }
  }
  CHECK_CU(cuCtxSetCurrent(NULL));
  CHECK_CU(cuDevicePrimaryCtxRelease(dev));
  return NULL;
}

static void test_tag_suspend_threads(void)
{
  cuemm_adapter_stats a0 = astats();
  CHECK_CU(cuemm_adapter_set_tag("kw", NULL));
  void *w = torch_alloc(2 * MIB, 0, NULL);
  CHECK_CU(cuemm_adapter_set_tag(NULL, NULL));
  CHECK_CU(cuMemsetD8((CUdeviceptr)(uintptr_t)w, 0x5c, 2 * MIB));
  _Atomic long counts[2] = { 0, 0 };
  pthread_t th[2];
  atomic_store(&stop_workers, 0);
  for (int i = 0; i < 2; i++)
    pthread_create(&th[i], NULL, default_worker, &counts[i]);
  int kept = 1;
  /* At least SUSPEND_ROUNDS rounds, and on until both workers have run
   * (a loaded machine may not schedule one for a while), for 30 s at most. */
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int r = 0;; r++) {
    clock_gettime(CLOCK_MONOTONIC, &t);
    if (r >= SUSPEND_ROUNDS &&
        ((atomic_load(&counts[0]) > 0 && atomic_load(&counts[1]) > 0) || t.tv_sec - t0.tv_sec > 30))
      break;
    CHECK_CU(cuemm_adapter_suspend("kw", 0, CUEMM_SUSPEND_KEEP));
    CHECK_CU(cuemm_adapter_suspend("kv", 0, 0));
    CHECK_CU(cuemm_adapter_resume("kv", 0));
    CHECK_CU(cuemm_adapter_resume("kw", 0));
    kept &= byte_at((char *)w + (size_t)(r % SUSPEND_ROUNDS) * 4096) == 0x5c;
  }
  atomic_store(&stop_workers, 1);
  for (int i = 0; i < 2; i++)
    pthread_join(th[i], NULL);
  ok(kept, "at least %d suspensions of kw (kept) and kv while two threads allocate on the default tag: contents intact",
     SUSPEND_ROUNDS);
  ok(atomic_load(&counts[0]) > 0 && atomic_load(&counts[1]) > 0, "both threads allocated meanwhile (%ld and %ld pairs)",
     atomic_load(&counts[0]), atomic_load(&counts[1]));
  cuemm_adapter_stats a1 = astats();
  is(a1.alloc_failures, a0.alloc_failures, "none of their allocations failed");
  is(a1.free_failures, a0.free_failures, "nor a free");
  torch_free(w, 2 * MIB, 0, NULL);
}

int main(void)
{
  sim_init();
  test_primary_context(0);
  CHECK_CU(cuDeviceGetCount(&ndev));
  cuemm_torch_init(2);
  is(astats().alloc_failures, 0, "init loads the driver");

  test_ordinals();
  test_bad_environment();
  test_sizes_and_streams();
  test_refusals();
  test_empty_cache();
  test_deferred_device();
  test_graph_pools();
  test_threads();
  test_tag_suspend();
  test_tag_graph();
  test_tag_suspend_threads();
  test_tags();
  cuemm_torch_empty_cache();
  is(astats().empty_cache_failures, 0, "the last empty_cache succeeded too");
  return tap_done();
}
