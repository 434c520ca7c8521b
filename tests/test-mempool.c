/* test-mempool.c: the segment entry points of PyTorch's MemPool mode
 * (cuemm_torch_segment_alloc, cuemm_torch_segment_alloc_fn,
 * cuemm_torch_segment_free), called through pointers of PyTorch's
 * pluggable types as torch.cuda.MemPool's allocator calls them: a function
 * per tag, whatever tag is current and on any thread; segments on the
 * stream-ordered path of the tag's pool; suspending a tag while its pool
 * has segments (contents kept with CUEMM_SUSPEND_KEEP, discarded without),
 * resuming it; exporting a segment and a tensor inside it over IPC; the
 * deferred free, which never names the (perhaps destroyed) stream; and the
 * refusals.  CUEMM_POOL_IPC=1 is set before the first manager is made, so
 * that pool blocks can be exported.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define MIB ((size_t)1 << 20)

/* What torch.cuda.memory.CUDAPluggableAllocator takes. */
typedef void *(*alloc_fn)(size_t, int, CUstream);
typedef void (*free_fn)(void *, size_t, int, CUstream);
static free_fn seg_free = cuemm_torch_segment_free;

static cuemm_adapter_stats astats(void)
{
  cuemm_adapter_stats s;
  CHECK_CU(cuemm_adapter_get_stats(&s));
  return s;
}

static cuemm_manager *tag_mgr(const char *tag)
{
  cuemm_manager *m = NULL;
  CHECK_CU(cuemm_adapter_tag_manager(tag, 0, &m));
  return m;
}

static int holds(cuemm_manager *m, void *p)
{
  CUdeviceptr base = 0;
  return cuemm_address_range(m, (CUdeviceptr)(uintptr_t)p, &base, NULL) == CUDA_SUCCESS &&
         base == (CUdeviceptr)(uintptr_t)p;
}

static alloc_fn fn_of(const char *tag)
{
  cuemm_torch_alloc_fn fn = NULL;
  CHECK_CU(cuemm_torch_segment_alloc_fn(tag, &fn));
  return fn;
}

/* Fills n bytes at p with a pattern that depends on the seed and the offset. */
static void fill(void *p, size_t n, unsigned seed)
{
  unsigned char *h = malloc(n);
  for (size_t i = 0; i < n; i++)
    h[i] = (unsigned char)(seed + i * 7 + (i >> 12));
  CHECK_CU(cuMemcpyHtoD((CUdeviceptr)(uintptr_t)p, h, n));
  free(h);
}

static int same(void *p, size_t n, unsigned seed)
{
  unsigned char *h = malloc(n);
  CHECK_CU(cuCtxSynchronize());
  CHECK_CU(cuMemcpyDtoH(h, (CUdeviceptr)(uintptr_t)p, n));
  int good = 1;
  for (size_t i = 0; i < n && good; i++)
    good = h[i] == (unsigned char)(seed + i * 7 + (i >> 12));
  free(h);
  return good;
}

static void test_functions(void)
{
  cuemm_torch_alloc_fn fn = NULL;
  CHECK_CU(cuemm_torch_segment_alloc_fn(NULL, &fn));
  ok(fn == cuemm_torch_segment_alloc, "the default tag's function is cuemm_torch_segment_alloc");
  CHECK_CU(cuemm_torch_segment_alloc_fn("", &fn));
  ok(fn == cuemm_torch_segment_alloc, "\"\" names the default tag too");
  is(cuemm_torch_segment_alloc_fn("kv", NULL), CUDA_ERROR_INVALID_VALUE, "fn NULL is refused");
  fn = NULL;
  is(cuemm_torch_segment_alloc_fn("kv cache", &fn), CUDA_ERROR_INVALID_VALUE, "a tag with a space is refused");
  like(cuemm_last_error(), "cuemm_torch_segment_alloc_fn: the tag \"kv cache\" has the character 0x20",
       "the message names the call and the character");
  ok(fn == NULL, "and nothing is written");
  alloc_fn kv = fn_of("kv"), w = fn_of("weights");
  ok(kv && w && kv != w && kv != (alloc_fn)cuemm_torch_segment_alloc, "each tag has a function of its own");
  ok(fn_of("kv") == kv, "asked again, the same function");
  ok(cuemm_adapter_get_tag() == NULL, "naming a tag's function does not make it current");
}

static void *thread_alloc(void *arg)
{
  void **io = arg;
  CUcontext c;
  CUdevice dev;
  CHECK_CU(cuDeviceGet(&dev, 0));
  CHECK_CU(cuDevicePrimaryCtxRetain(&c, dev));
  CHECK_CU(cuCtxSetCurrent(c));
  io[1] = ((alloc_fn)io[0])(2 * MIB, 0, NULL);
  CHECK_CU(cuCtxSetCurrent(NULL));
  CHECK_CU(cuDevicePrimaryCtxRelease(dev));
  return NULL;
}

/* Segments go to the function's tag, whatever is current, on any thread. */
static void test_binding(CUstream s)
{
  alloc_fn kv = fn_of("kv");
  cuemm_manager *m0 = NULL;
  CHECK_CU(cuemm_device_manager(0, &m0));
  cuemm_manager *mkv = tag_mgr("kv"), *mother = tag_mgr("other");

  void *d = ((alloc_fn)cuemm_torch_segment_alloc)(2 * MIB, 0, s);
  ok(d && holds(m0, d) && !holds(mkv, d), "cuemm_torch_segment_alloc: a 2 MiB segment of the device's manager");
  CHECK_CU(cuemm_adapter_set_tag("other", NULL));
  void *k = kv(20 * MIB, 0, s);
  void *d2 = ((alloc_fn)cuemm_torch_segment_alloc)(2 * MIB, 0, s);
  CHECK_CU(cuemm_adapter_set_tag(NULL, NULL));
  ok(k && holds(mkv, k) && !holds(mother, k) && !holds(m0, k),
     "kv's function while tag other is current: a 20 MiB segment of kv's manager");
  ok(d2 && holds(m0, d2), "the default's function while other is current: the device's manager");
  is(test_stats(mother).live_count, 0, "the current tag got nothing");

  void *io[2] = { (void *)kv, NULL };
  pthread_t th;
  pthread_create(&th, NULL, thread_alloc, io);
  pthread_join(th, NULL);
  ok(io[1] && holds(mkv, io[1]), "kv's function on another thread: kv's manager");

  cuemm_snapshot *snap = NULL;
  CHECK_CU(cuemm_snapshot_take(mkv, &snap));
  int found = 0, ordered = 0;
  for (size_t i = 0; i < snap->nblocks; i++)
    if (snap->blocks[i].ptr == (CUdeviceptr)(uintptr_t)k) {
      found = 1;
      ordered = snap->blocks[i].stream_ordered && snap->blocks[i].chunk >= 0 && snap->blocks[i].stream == s;
    }
  cuemm_snapshot_free(snap);
  ok(found && ordered, "the segment is a block of kv's pool, on the stream-ordered path of the stream PyTorch named");

  cuemm_adapter_stats a0 = astats();
  is(test_stats(mkv).live_bytes, 22 * MIB, "kv's statistics show its two segments (22 MiB live)");
  seg_free(k, 20 * MIB, 0, s);
  seg_free(io[1], 2 * MIB, 0, NULL);
  seg_free(d, 2 * MIB, 0, s);
  seg_free(d2, 2 * MIB, 0, s);
  cuemm_stats st = test_stats(mkv);
  ok(st.live_bytes == 0 && st.pending_count == 2, "the frees are deferred: nothing live in kv, two pending");
  is(astats().free_failures, a0.free_failures, "no free failed");
  CHECK_CU(cuemm_flush(mkv));
  is(test_stats(mkv).pending_count, 0, "a flush carries them out");
}

/* Suspend and resume while PyTorch's pools hold segments: what lives in
 * kv's segments is discarded, what lives in weights' comes back. */
static void test_suspend(CUstream s)
{
  alloc_fn kv = fn_of("kv"), wf = fn_of("weights");
  cuemm_manager *mkv = tag_mgr("kv"), *mw = tag_mgr("weights");
  cuemm_adapter_stats a0 = astats();
  void *w1 = wf(20 * MIB, 0, s), *w2 = wf(2 * MIB, 0, s);
  void *k1 = kv(20 * MIB, 0, s), *k2 = kv(2 * MIB, 0, s);
  void *d = ((alloc_fn)cuemm_torch_segment_alloc)(2 * MIB, 0, s);
  ok(w1 && w2 && k1 && k2 && d, "segments in weights, kv and the default tag");
  fill(w1, 20 * MIB, 1);
  fill(w2, 2 * MIB, 2);
  fill(k1, 20 * MIB, 3);
  fill(d, 2 * MIB, 4);

  CHECK_CU(cuemm_adapter_suspend("kv", 0, 0));
  CHECK_CU(cuemm_adapter_suspend("weights", 0, CUEMM_SUSPEND_KEEP));
  cuemm_pool_stats ps;
  CHECK_CU(cuemm_pool_get_stats(mw, &ps));
  ok(ps.suspended && ps.mapped_bytes == 0 && ps.kept_bytes >= 22 * MIB,
     "weights suspended with KEEP: nothing mapped, its 22 MiB of segments kept");
  CHECK_CU(cuemm_pool_get_stats(mkv, &ps));
  ok(ps.suspended && ps.mapped_bytes == 0 && ps.kept_bytes == 0, "kv suspended: nothing mapped, nothing kept");
  ok(holds(mw, w1) && holds(mkv, k1), "the segments keep their addresses (PyTorch's blocks stay valid)");

  ok(kv(2 * MIB, 0, s) == NULL, "a new segment in suspended kv: NULL (PyTorch raises out of memory)");
  cuemm_adapter_stats a1 = astats();
  is(a1.alloc_failures, a0.alloc_failures + 1, "counted as a failure");
  like(a1.last_failure, "cuemm_torch_segment_alloc(2097152 bytes, device 0", "naming the call");
  like(a1.last_failure, "tag \"kv\"", "and the tag");
  like(a1.last_failure, "suspended", "and saying the manager is suspended");
  void *d2 = ((alloc_fn)cuemm_torch_segment_alloc)(2 * MIB, 0, s);
  ok(d2 != NULL, "the default tag takes segments meanwhile");
  seg_free(k2, 2 * MIB, 0, s);
  is(astats().free_failures, a0.free_failures, "a segment of suspended kv is given back (empty_cache)");
  cuemm_ipc_handle h;
  is(cuemm_ipc_export(mkv, (CUdeviceptr)(uintptr_t)k1, 0, &h), CUDA_ERROR_ILLEGAL_STATE,
     "a suspended tag's segment cannot be exported");
  cuemm_torch_empty_cache();
  is(astats().empty_cache_failures, a0.empty_cache_failures, "empty_cache skips the suspended tags");

  CHECK_CU(cuemm_adapter_resume("weights", 0));
  CHECK_CU(cuemm_adapter_resume("kv", 0));
  ok(same(w1, 20 * MIB, 1) && same(w2, 2 * MIB, 2), "weights' segments come back bit for bit");
  ok(same(d, 2 * MIB, 4), "the default tag's segment was never touched");
  fill(k1, 20 * MIB, 5);
  ok(same(k1, 20 * MIB, 5), "kv's segment is usable again at the same address");
  for (void **p = (void *[]){ w1, w2, k1, d, d2, NULL }; *p; p++)
    seg_free(*p, 0, 0, s);
  is(astats().free_failures, a0.free_failures, "every segment given back");
}

/* A segment is a pool block: it, and a tensor inside it, can be exported. */
static void test_export(CUstream s)
{
  alloc_fn kv = fn_of("kv");
  cuemm_manager *mkv = tag_mgr("kv");
  void *k = kv(20 * MIB, 0, s);
  cuemm_ipc_handle h, back, t;
  CHECK_CU(cuemm_ipc_export(mkv, (CUdeviceptr)(uintptr_t)k, 0, &h));
  ok(h.kind == CUEMM_IPC_KIND_POOL && h.size == 20 * MIB && h.alloc_size >= 20 * MIB,
     "a 20 MiB segment exports as a pool handle of its whole size");
  is(cuemm_ipc_handle_parse(&h, sizeof h, &back), CUDA_SUCCESS, "the handle checks out");
  CHECK_CU(cuemm_ipc_export(mkv, (CUdeviceptr)(uintptr_t)k + 4 * MIB, MIB, &t));
  ok(t.kind == CUEMM_IPC_KIND_POOL && t.offset == h.offset + 4 * MIB && t.size == MIB,
     "a tensor inside it (1 MiB at 4 MiB) exports with its offset");
  cuemm_manager *m0 = NULL;
  CHECK_CU(cuemm_device_manager(0, &m0));
  is(cuemm_ipc_export(m0, (CUdeviceptr)(uintptr_t)k, 0, &h), CUDA_ERROR_INVALID_VALUE,
     "another manager refuses it");
  seg_free(k, 20 * MIB, 0, s);
}

/* The free never names the stream: one destroyed since is harmless. */
static void test_free(void)
{
  CUstream t;
  CHECK_CU(cuStreamCreate(&t, CU_STREAM_NON_BLOCKING));
  alloc_fn kv = fn_of("kv");
  void *k = kv(2 * MIB, 0, t);
  CHECK_CU(cuMemsetD8Async((CUdeviceptr)(uintptr_t)k, 0x5a, 2 * MIB, t));
  CHECK_CU(cuemm_adapter_stream_release(0, t));
  CHECK_CU(cuStreamDestroy(t));
  cuemm_adapter_stats a0 = astats();
  unsigned long rec = sim_present ? sim.calls("cuEventRecord") : 0;
  seg_free(k, 2 * MIB, 0, t);
  is(astats().free_failures, a0.free_failures, "a segment whose stream was destroyed is given back");
  if (sim_present)
    is(sim.calls("cuEventRecord"), rec, "with no call on that stream");
  else
    skip(1, SIM_REASON);
  CHECK_CU(cuemm_flush(tag_mgr("kv")));
  ok(!holds(tag_mgr("kv"), k), "and freed at the flush");

  seg_free(NULL, 0, 0, NULL);
  is(astats().free_failures, a0.free_failures, "freeing NULL does nothing");
  int x;
  seg_free(&x, 4, 0, NULL);
  cuemm_adapter_stats a1 = astats();
  is(a1.free_failures, a0.free_failures + 1, "a pointer no manager holds is refused and counted");
  like(a1.last_failure, "cuemm_torch_segment_free(", "naming the call");
  ok(((alloc_fn)cuemm_torch_segment_alloc)(0, 0, NULL) == NULL && astats().alloc_failures == a1.alloc_failures,
     "size 0: NULL, and no failure");
  ok(kv(MIB, 9, NULL) == NULL, "device 9: NULL");
  like(astats().last_failure, "device 9", "the message names the device");
}

int main(void)
{
  setenv("CUEMM_POOL_IPC", "1", 1); /* before the first manager */
  sim_init();
  test_primary_context(0);
  CUstream s;
  CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  test_functions();
  test_binding(s);
  test_suspend(s);
  test_export(s);
  test_free();
  cuemm_torch_empty_cache();
  is(astats().empty_cache_failures, 0, "empty_cache trims every tag");
  is(test_stats(tag_mgr("kv")).live_count + test_stats(tag_mgr("weights")).live_count, 0, "nothing is left live");
  CHECK_CU(cuemm_adapter_stream_release(0, s));
  CHECK_CU(cuStreamDestroy(s));
  return tap_done();
}
