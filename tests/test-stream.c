/* test-stream.c: the stream-ordered path (cuemm_allocate_async and friends):
 * refusals, same-stream reuse without a driver call, cross-stream reuse only
 * after the freeing stream's event (or with a wait), record_stream, mixing
 * with the deferred path, frees from other threads, the pool taking cached
 * blocks back before growing, trim, stream release, statistics.  In queue
 * mode (simcuda) work runs late, as on a GPU, so data checks prove that no
 * block is reused before the work queued on it is done.
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "testutil.h"

#define MIB ((size_t)1 << 20)

static CUcontext ctx;

/* The suite's configuration with a VMM pool of `reserve` bytes growing by
 * `chunk`. */
static cuemm_config vmm_config(size_t reserve, size_t chunk)
{
  cuemm_config c = test_config(10, 0.2);
  c.pool = CUEMM_POOL_VMM;
  c.pool_reserve = reserve;
  c.pool_chunk = chunk;
  return c;
}

/* A pool manager with stream reuse `reuse`, keeping `keep_large` large
 * blocks a stream. */
static cuemm_manager *pool_manager_keeping(cuemm_stream_reuse reuse, int keep_large)
{
  cuemm_config c = vmm_config(256 * MIB, 32 * MIB);
  c.stream_reuse = reuse;
  c.stream_keep_large = keep_large;
  cuemm_manager *m = NULL;
  CHECK_CU(cuemm_manager_create(ctx, &c, &m));
  return m;
}

static cuemm_manager *pool_manager(cuemm_stream_reuse reuse)
{
  return pool_manager_keeping(reuse, 1); /* the tests of the pool's part count on one kept large block */
}

static unsigned long calls(const char *e)
{
  return sim_present ? sim.calls(e) : 0;
}

static void test_refusals(void)
{
  cuemm_config c = test_config(10, 0.2);
  cuemm_manager *plain = NULL;
  CHECK_CU(cuemm_manager_create(ctx, &c, &plain));
  CUdeviceptr p = 0;
  is(cuemm_allocate_async(plain, 256, NULL, &p), CUDA_ERROR_NOT_SUPPORTED, "no pool: alloc_async refused");
  like(cuemm_last_error(), "no pool", "the message says the manager has no pool");
  like(cuemm_last_error(), "CUEMM_POOL=vmm", "and how to get one");
  is(cuemm_free_async(plain, 0x1000, NULL), CUDA_ERROR_NOT_SUPPORTED, "no pool: free_async refused");
  is(cuemm_record_stream(plain, 0x1000, NULL), CUDA_ERROR_NOT_SUPPORTED, "no pool: record_stream refused");
  CHECK_CU(cuemm_destroy(plain));

  cuemm_manager *m = pool_manager(CUEMM_STREAM_REUSE_EVENT);
  is(cuemm_allocate_async(NULL, 256, NULL, &p), CUDA_ERROR_INVALID_VALUE, "NULL manager refused");
  is(cuemm_allocate_async(m, 256, NULL, NULL), CUDA_ERROR_INVALID_VALUE, "NULL out pointer refused");
  is(cuemm_allocate_async(m, 0, NULL, &p), CUDA_ERROR_INVALID_VALUE, "size 0 refused");
  like(cuemm_last_error(), "size is 0", "the message says why");
  is(cuemm_free_async(m, 0, NULL), CUDA_ERROR_INVALID_VALUE, "freeing 0 refused");
  is(cuemm_free_async(m, 0xdead0000, NULL), CUDA_ERROR_INVALID_VALUE, "a foreign pointer refused");
  like(cuemm_last_error(), "cuemm_free_async: 0x", "the message names the call and the pointer");
  CHECK_CU(cuemm_allocate_async(m, 1000, NULL, &p));
  is(cuemm_free_async(m, p + 256, NULL), CUDA_ERROR_INVALID_VALUE, "an interior pointer refused");
  CHECK_CU(cuemm_free_async(m, p, NULL));
  is(cuemm_free_async(m, p, NULL), CUDA_ERROR_INVALID_VALUE, "a double free refused");
  like(cuemm_last_error(), "double free", "the message says double free");
  is(cuemm_free(m, p), CUDA_ERROR_INVALID_VALUE, "cuemm_free after cuemm_free_async refused");
  like(cuemm_last_error(), "double free", "as a double free");
  is(cuemm_record_stream(m, p, NULL), CUDA_ERROR_INVALID_VALUE, "record_stream of a freed block refused");
  is(cuemm_stream_release(m, NULL), CUDA_ERROR_INVALID_VALUE, "releasing the legacy stream refused");
  cuemm_stats s = test_stats(m);
  is(s.live_count, 0, "nothing live after the refusals");
  is(s.stream_cached_count, 1, "the one good free is cached");
  CHECK_CU(cuemm_destroy(m));
}

static void test_same_stream(void)
{
  cuemm_manager *m = pool_manager(CUEMM_STREAM_REUSE_EVENT);
  CUstream s;
  CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  static const size_t sizes[] = { 256, 4096, 65536, MIB, 16 * MIB };
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    CUdeviceptr p = 0, q = 0;
    CHECK_CU(cuemm_allocate_async(m, sizes[i], s, &p));
    CHECK_CU(cuemm_free_async(m, p, s));
    if (sim_present)
      sim.calls_reset();
    int same = 1;
    for (int k = 0; k < 100; k++) {
      CHECK_CU(cuemm_allocate_async(m, sizes[i], s, &q));
      same &= q == p;
      CHECK_CU(cuemm_free_async(m, q, s));
    }
    ok(same, "%zu bytes: 100 pairs on one stream reuse the same block", sizes[i]);
    if (sim_present)
      is(sim_driver_work(), 0, "%zu bytes: and make no driver call", sizes[i]);
    else
      skip(1, SIM_REASON);
  }
  /* NULL and CU_STREAM_LEGACY are one stream. */
  CUdeviceptr a, b;
  CHECK_CU(cuemm_allocate_async(m, 3000, NULL, &a));
  CHECK_CU(cuemm_free_async(m, a, NULL));
  CHECK_CU(cuemm_allocate_async(m, 3000, CU_STREAM_LEGACY, &b));
  is(b, a, "a block freed on NULL serves CU_STREAM_LEGACY at once");
  CHECK_CU(cuemm_free_async(m, b, CU_STREAM_LEGACY));
  cuemm_stats st = test_stats(m);
  is(st.allocs, 507, "allocs counted on the stream path");
  is(st.frees, 507, "frees counted");
  is(st.live_bytes, 0, "nothing live");
  is(st.stream_heaps, 1, "one thread, one heap");
  CHECK_CU(cuemm_destroy(m));
  CHECK_CU(cuStreamDestroy(s));
}

/* Queue mode (work held back until a synchronization), a pool manager and
 * two non-blocking streams, for the tests that need simcuda to run work
 * late; without it, `n` checks are skipped and 0 returned. */
typedef struct held {
  cuemm_manager *m;
  CUstream s1, s2;
} held;

static int held_begin(held *t, cuemm_stream_reuse reuse, int n)
{
  if (!sim_present || !sim.set_queue_mode) {
    skip(n, "needs simcuda's queue mode to hold work back");
    return 0;
  }
  sim.set_queue_mode(1);
  t->m = pool_manager(reuse);
  CHECK_CU(cuStreamCreate(&t->s1, CU_STREAM_NON_BLOCKING));
  CHECK_CU(cuStreamCreate(&t->s2, CU_STREAM_NON_BLOCKING));
  return 1;
}

static void held_end(held *t)
{
  CHECK_CU(cuemm_destroy(t->m));
  CHECK_CU(cuStreamDestroy(t->s1));
  CHECK_CU(cuStreamDestroy(t->s2));
  sim.set_queue_mode(0);
}

/* Queue mode: a block freed on s1 while s1 still has work on it must not
 * serve s2 until that work is done. */
static void test_cross_stream(void)
{
  held t;
  if (!held_begin(&t, CUEMM_STREAM_REUSE_EVENT, 9))
    return;
  cuemm_manager *m = t.m;
  CUstream s1 = t.s1, s2 = t.s2;
  CUdeviceptr p, q;
  CHECK_CU(cuemm_allocate_async(m, 8192, s1, &p));
  CHECK_CU(cuMemsetD8Async(p, 0xAA, 8192, s1));
  CHECK_CU(cuemm_free_async(m, p, s1));
  sim.calls_reset();
  CHECK_CU(cuemm_allocate_async(m, 8192, s2, &q));
  ok(q != p, "s2 does not get s1's block while s1's work on it is queued");
  is(calls("cuEventRecord"), 1, "one event recorded on s1 for its batch");
  CHECK_CU(cuStreamSynchronize(s1));
  is(device_byte_at(p, 8191), 0xAA, "s1's work wrote the block");
  CUdeviceptr r;
  sim.calls_reset();
  CHECK_CU(cuemm_allocate_async(m, 8192, s2, &r));
  is(r, p, "once s1's event completed, s2 takes the block");
  is(calls("cuEventRecord"), 0, "no new event for the same batch");

  /* A batch of ten frees: one event. */
  CUdeviceptr v[10];
  for (int i = 0; i < 10; i++) {
    CHECK_CU(cuemm_allocate_async(m, 512, s1, &v[i]));
    CHECK_CU(cuMemsetD8Async(v[i], (unsigned char)i, 512, s1));
  }
  for (int i = 0; i < 10; i++)
    CHECK_CU(cuemm_free_async(m, v[i], s1));
  sim.calls_reset();
  CUdeviceptr w[10];
  CHECK_CU(cuemm_allocate_async(m, 512, s2, &w[0])); /* records the batch's event, not ready */
  CHECK_CU(cuStreamSynchronize(s1));
  int from_s1 = 0;
  for (int i = 1; i < 10; i++) {
    CHECK_CU(cuemm_allocate_async(m, 512, s2, &w[i]));
    for (int k = 0; k < 10; k++)
      from_s1 += w[i] == v[k];
  }
  is(calls("cuEventRecord"), 1, "ten frees on s1, one event");
  is(from_s1, 9, "after it completed, s2 reused s1's blocks");
  cuemm_stats st = test_stats(m);
  ok(st.stream_steals >= 10, "steals counted (%llu)", (unsigned long long)st.stream_steals);
  held_end(&t);
}

/* A block of `size` bytes allocated on s1, written there (the write
 * queued), freed on s1 (*freed), then a request of the same size on s2,
 * the driver's call counters reset just before it: s2's block. */
static CUdeviceptr take_from_busy(cuemm_manager *m, CUstream s1, CUstream s2, size_t size, unsigned char tag,
                                  CUdeviceptr *freed)
{
  CUdeviceptr r;
  CHECK_CU(cuemm_allocate_async(m, size, s1, freed));
  CHECK_CU(cuMemsetD8Async(*freed, tag, size, s1));
  CHECK_CU(cuemm_free_async(m, *freed, s1));
  sim.calls_reset();
  CHECK_CU(cuemm_allocate_async(m, size, s2, &r));
  return r;
}

/* Queue mode: whether another stream's blocks are done is asked of the
 * stream itself when no event covers them: an idle stream gives them at
 * once with no event; a busy one gets an event, and is not asked again for
 * the next few takes; a stream being captured (or the legacy stream while
 * a blocking stream captures) is never queried, since the query would
 * invalidate the capture. */
static void test_idle_stream(void)
{
  held t;
  if (!held_begin(&t, CUEMM_STREAM_REUSE_EVENT, 20))
    return;
  cuemm_manager *m = t.m;
  CUstream s1 = t.s1, s2 = t.s2;
  CUdeviceptr p, q, r;
  CHECK_CU(cuemm_allocate_async(m, 8192, s1, &p));
  CHECK_CU(cuemm_free_async(m, p, s1));
  sim.calls_reset();
  CHECK_CU(cuemm_allocate_async(m, 8192, s2, &q));
  is(q, p, "s1 has no work: s2 takes its block at once");
  is(calls("cuEventRecord"), 0, "no event recorded");
  is(calls("cuStreamQuery"), 1, "one cuStreamQuery of s1");
  is(calls("cuStreamIsCapturing"), 1, "after asking whether s1 is captured");

  /* Busy: an event decides, and s1 is not asked again for a while. */
  CHECK_CU(cuMemsetD8Async(q, 0x5A, 8192, s2));
  CHECK_CU(cuStreamSynchronize(s2));
  r = take_from_busy(m, s1, s2, 8192, 0x11, &p);
  ok(r != p, "s1's work on its block is queued: s2 gets another");
  is(calls("cuStreamQuery"), 1, "s1 was asked once");
  is(calls("cuEventRecord"), 1, "it was busy: one event for its frees");
  CHECK_CU(cuStreamSynchronize(s1)); /* its event is done: the next take must ask again or skip */
  is(device_byte_at(p, 8191), 0x11, "s1's work wrote its block");
  CUdeviceptr p2, r2 = take_from_busy(m, s1, s2, 4096, 0x22, &p2);
  ok(r2 != p2, "still busy: s2 gets another block of 4 KiB");
  is(calls("cuStreamQuery"), 0, "a stream found busy is not asked at the next take");
  is(calls("cuEventRecord"), 1, "an event is recorded instead");
  CHECK_CU(cuStreamSynchronize(s1));
  CHECK_CU(cuemm_free_async(m, r, s2));
  CHECK_CU(cuemm_free_async(m, r2, s2));
  CHECK_CU(cuemm_free_async(m, q, s2));
  CHECK_CU(cuStreamSynchronize(s2));

  /* Captured: never queried, the capture stays valid. */
  CUstream s3;
  CHECK_CU(cuStreamCreate(&s3, CU_STREAM_NON_BLOCKING));
  CUdeviceptr c, d;
  CHECK_CU(cuemm_allocate_async(m, 16384, s3, &c));
  CHECK_CU(cuemm_free_async(m, c, s3));
  is(sim.stream_set_capturing(s3, 1), 0, "s3 starts capturing");
  sim.calls_reset();
  CHECK_CU(cuemm_allocate_async(m, 16384, s2, &d));
  is(calls("cuStreamQuery"), 0, "a capturing stream is never queried");
  is(calls("cuStreamIsCapturing"), 1, "its capture status was asked");
  is(sim.stream_set_capturing(s3, 0), 1, "and its capture was not invalidated");
  CHECK_CU(cuemm_free_async(m, d, s2));

  /* The legacy stream while a blocking stream captures. */
  CUstream s4;
  CHECK_CU(cuStreamCreate(&s4, CU_STREAM_DEFAULT));
  CUdeviceptr e, f;
  CHECK_CU(cuemm_allocate_async(m, 24576, NULL, &e));
  CHECK_CU(cuemm_free_async(m, e, NULL));
  sim.stream_set_capturing(s4, 1);
  sim.calls_reset();
  CHECK_CU(cuemm_allocate_async(m, 24576, s2, &f));
  is(calls("cuStreamQuery"), 0, "the legacy stream is not queried while a blocking stream captures");
  is(sim.stream_set_capturing(s4, 0), 1, "that capture stays valid");
  CHECK_CU(cuemm_free_async(m, f, s2));
  CHECK_CU(cuCtxSynchronize());
  CHECK_CU(cuemm_destroy(m));
  t.m = pool_manager(CUEMM_STREAM_REUSE_EVENT);
  CHECK_CU(cuStreamDestroy(s3));
  CHECK_CU(cuStreamDestroy(s4));
  held_end(&t);
}

/* Queue mode, large blocks: the thread keeps one, the pool takes the rest
 * at their free, tagged with the stream.  They serve that stream at once
 * (merged, at any size), another only after an event says s1's work is
 * done. */
static void test_pool_tagged(void)
{
  held t;
  if (!held_begin(&t, CUEMM_STREAM_REUSE_EVENT, 13))
    return;
  cuemm_manager *m = t.m;
  CUstream s1 = t.s1, s2 = t.s2;
  CUdeviceptr v[4];
  for (int i = 0; i < 4; i++) {
    CHECK_CU(cuemm_allocate_async(m, MIB, s1, &v[i]));
    CHECK_CU(cuMemsetD8Async(v[i], (unsigned char)(0x40 + i), MIB, s1));
  }
  ok(v[1] == v[0] + MIB && v[2] == v[1] + MIB && v[3] == v[2] + MIB, "four 1 MiB blocks side by side");
  for (int i = 3; i >= 0; i--)
    CHECK_CU(cuemm_free_async(m, v[i], s1));
  cuemm_stats st = test_stats(m);
  is(st.stream_cached_bytes, MIB, "the thread keeps one of them, the pool the others");
  sim.calls_reset();
  CUdeviceptr a;
  CHECK_CU(cuemm_allocate_async(m, 3 * MIB, s1, &a));
  ok(a >= v[0] && a + 3 * MIB <= v[3] + MIB, "s1 gets 3 MiB at once from its own freed blocks, merged");
  ok(calls("cuMemCreate") == 0 && calls("cuEventRecord") == 0 && calls("cuEventQuery") == 0,
     "with no driver call: stream order makes it safe");
  CHECK_CU(cuMemsetD8Async(a, 0x55, 3 * MIB, s1));
  CHECK_CU(cuemm_free_async(m, a, s1));
  sim.calls_reset();
  CUdeviceptr b;
  CHECK_CU(cuemm_allocate_async(m, 3 * MIB, s2, &b));
  ok(b + 3 * MIB <= v[0] || b >= v[3] + MIB, "s2 does not get them while s1's work on them is queued");
  tap_diag("events recorded: %lu", calls("cuEventRecord"));
  ok(calls("cuEventRecord") >= 1 && calls("cuEventRecord") <= 3 && calls("cuEventSynchronize") == 0,
     "events on s1 asked (for the pool's blocks, for the block the thread keeps, for that block back in the "
     "pool before a growth past the peak), none waited on");
  ok(calls("cuMemCreate") >= 1, "the pool grew instead");
  CHECK_CU(cuStreamSynchronize(s1));
  is(device_byte_at(v[3], MIB - 1), 0x43, "s1's work ran on the block the thread kept (the first freed)");
  is(device_byte_at(a, 0), 0x55, "and on the 3 MiB");
  sim.calls_reset();
  CUdeviceptr c;
  CHECK_CU(cuemm_allocate_async(m, 3 * MIB, s2, &c));
  ok(c >= v[0] && c + 3 * MIB <= v[3] + MIB, "once the event completed, s2 takes s1's blocks");
  is(calls("cuMemCreate"), 0, "without growing");
  st = test_stats(m);
  ok(st.stream_steals >= 1, "counted as taken across streams (%llu)", (unsigned long long)st.stream_steals);
  CHECK_CU(cuemm_free_async(m, b, s2));
  CHECK_CU(cuemm_free_async(m, c, s2));
  CHECK_CU(cuStreamSynchronize(s2));
  CHECK_CU(cuemm_pool_trim(m));
  cuemm_pool_stats ps;
  CHECK_CU(cuemm_pool_get_stats(m, &ps));
  ok(ps.mapped_bytes <= 2 * MIB, "trim releases what streams freed (%zu bytes left mapped)", ps.mapped_bytes);
  held_end(&t);
}

/* CUEMM_STREAM_REUSE=wait: s2 takes the block at once and waits on s1's
 * event: s1's write lands first, s2's after. */
static void test_wait_mode(void)
{
  held t;
  if (!held_begin(&t, CUEMM_STREAM_REUSE_WAIT, 4))
    return;
  cuemm_manager *m = t.m;
  CUstream s1 = t.s1, s2 = t.s2;
  CUdeviceptr p, q;
  CHECK_CU(cuemm_allocate_async(m, 4096, s1, &p));
  CHECK_CU(cuMemsetD8Async(p, 0x11, 4096, s1));
  CHECK_CU(cuemm_free_async(m, p, s1));
  sim.calls_reset();
  CHECK_CU(cuemm_allocate_async(m, 4096, s2, &q));
  is(q, p, "wait mode: s2 takes s1's block at once");
  is(calls("cuStreamWaitEvent"), 1, "and waits on s1's event");
  CHECK_CU(cuMemsetD8Async(q, 0x22, 4096, s2));
  CHECK_CU(cuStreamSynchronize(s2));
  is(device_byte_at(q, 0), 0x22, "s2's write is the last: s1's ran before it");
  cuemm_stats st = test_stats(m);
  is(st.stream_event_waits, 1, "the wait is counted");
  CHECK_CU(cuemm_free_async(m, q, s2));
  held_end(&t);
}

/* CUEMM_STREAM_REUSE=internal: where the pool would grow, s2 waits on s1's
 * event and takes s1's blocks instead; once s1's work is done, it takes
 * them without a wait. */
static void test_internal_mode(void)
{
  held t;
  if (!held_begin(&t, CUEMM_STREAM_REUSE_INTERNAL, 10))
    return;
  cuemm_manager *m = t.m;
  CUstream s1 = t.s1, s2 = t.s2;
  CUdeviceptr v[4], b, c;
  for (int i = 0; i < 4; i++) {
    CHECK_CU(cuemm_allocate_async(m, 8 * MIB, s1, &v[i]));
    CHECK_CU(cuMemsetD8Async(v[i], (unsigned char)(0x40 + i), 8 * MIB, s1));
  }
  cuemm_pool_stats ps;
  CHECK_CU(cuemm_pool_get_stats(m, &ps));
  is(ps.mapped_bytes, 32 * MIB, "s1's four blocks fill the pool's one chunk");
  for (int i = 3; i >= 0; i--)
    CHECK_CU(cuemm_free_async(m, v[i], s1));
  sim.calls_reset();
  CHECK_CU(cuemm_allocate_async(m, 16 * MIB, s2, &b));
  ok(b >= v[0] && b + 16 * MIB <= v[3] + 8 * MIB, "where the pool would grow, s2 takes s1's freed blocks");
  is(calls("cuMemCreate"), 0, "without growing");
  is(calls("cuStreamWaitEvent"), 1, "s2 waits on s1's event");
  is(calls("cuEventSynchronize") + calls("cuStreamSynchronize") + calls("cuCtxSynchronize"), 0,
     "and the host does not");
  CHECK_CU(cuMemsetD8Async(b, 0x66, 16 * MIB, s2));
  CHECK_CU(cuStreamSynchronize(s2));
  is(device_byte_at(b, 0), 0x66, "s2's write is the last: s1's ran before it");
  cuemm_stats st = test_stats(m);
  is(st.stream_event_waits, 1, "the wait is counted");
  CHECK_CU(cuStreamSynchronize(s1));
  sim.calls_reset();
  CHECK_CU(cuemm_allocate_async(m, 8 * MIB, s2, &c));
  is(calls("cuStreamWaitEvent") + calls("cuMemCreate"), 0, "once s1's work is done, s2 takes the rest as it is");
  ok(c + 8 * MIB <= b || c >= b + 16 * MIB, "apart from s2's first block");
  CHECK_CU(cuemm_pool_get_stats(m, &ps));
  is(ps.mapped_bytes, 32 * MIB, "the pool never grew");
  CHECK_CU(cuemm_free_async(m, b, s2));
  CHECK_CU(cuemm_free_async(m, c, s2));
  held_end(&t);
}

static void test_record_stream(void)
{
  held t;
  if (!held_begin(&t, CUEMM_STREAM_REUSE_EVENT, 10))
    return;
  cuemm_manager *m = t.m;
  CUstream s1 = t.s1, s2 = t.s2;
  CUdeviceptr p, q;
  CHECK_CU(cuemm_allocate_async(m, 4096, s1, &p));
  CHECK_CU(cuemm_record_stream(m, p, s2));
  CHECK_CU(cuemm_record_stream(m, p, s2)); /* twice: once is kept */
  CHECK_CU(cuemm_record_stream(m, p, s1)); /* its own stream: nothing */
  CHECK_CU(cuMemsetD8Async(p, 0x33, 4096, s2));
  sim.calls_reset();
  CHECK_CU(cuemm_free_async(m, p, s1));
  is(calls("cuStreamWaitEvent"), 1, "the free makes s1 wait for s2's work, once");
  CHECK_CU(cuemm_allocate_async(m, 4096, s1, &q));
  is(q, p, "s1 reuses the block in its own order");
  CHECK_CU(cuMemsetD8Async(q, 0x44, 4096, s1));
  CHECK_CU(cuStreamSynchronize(s1));
  is(device_byte_at(q, 100), 0x44, "s1's new write came after s2's old one");
  is(cuemm_record_stream(m, 0xdead0000, s2), CUDA_ERROR_INVALID_VALUE, "record_stream of a foreign pointer refused");
  CHECK_CU(cuemm_free_async(m, q, s1));

  /* A block of s1's freed with cuemm_free goes back to the pool's cache of
   * its size, and cuemm_allocate takes it from there: it must not come out
   * still naming s1, or record_stream(s1) would take s1 for its own stream
   * and a free on s2 would not wait for s1's work. */
  CUdeviceptr a, b;
  CHECK_CU(cuemm_allocate_async(m, 512, s1, &a));
  CHECK_CU(cuemm_free(m, a));
  CHECK_CU(cuemm_flush(m));
  CHECK_CU(cuemm_allocate(m, 512, &b));
  is(b, a, "cuemm_alloc takes the block back from the pool's cache");
  cuemm_snapshot *snap = NULL;
  CHECK_CU(cuemm_snapshot_take(m, &snap));
  int seen = 0;
  for (size_t i = 0; i < snap->nblocks; i++)
    if (snap->blocks[i].ptr == b)
      seen = snap->blocks[i].state == CUEMM_BLOCK_LIVE && !snap->blocks[i].stream_ordered ? 1 : -1;
  cuemm_snapshot_free(snap);
  is(seen, 1, "the snapshot shows it live and not stream-ordered");
  CHECK_CU(cuemm_record_stream(m, b, s1));
  CHECK_CU(cuMemsetD8Async(b, 0x55, 512, s1)); /* held back */
  sim.calls_reset();
  CHECK_CU(cuemm_free_async(m, b, s2));
  is(calls("cuStreamWaitEvent"), 1, "its free on s2 waits for s1's work");
  CHECK_CU(cuCtxSynchronize());

  /* A free that fails to wait for a named stream keeps that stream named:
   * tried again, it waits. */
  CHECK_CU(cuemm_allocate_async(m, 4096, s1, &p));
  CHECK_CU(cuemm_record_stream(m, p, s2));
  CHECK_CU(cuMemsetD8Async(p, 0x66, 4096, s2)); /* held back */
  sim.calls_reset();
  sim.fail("cuEventRecord", 1, CUDA_ERROR_UNKNOWN);
  is(cuemm_free_async(m, p, s1), CUDA_ERROR_UNKNOWN, "a free whose cuEventRecord fails fails");
  sim.fail_clear();
  is(cuemm_free_async(m, p, s1), CUDA_SUCCESS, "tried again, it succeeds");
  is(calls("cuStreamWaitEvent"), 1, "and s1 waits for s2's work then");
  CHECK_CU(cuCtxSynchronize());
  held_end(&t);
}

static void test_mixing(void)
{
  cuemm_manager *m = pool_manager(CUEMM_STREAM_REUSE_EVENT);
  CUstream s;
  CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr p, q;
  /* cuemm_allocate, then cuemm_free_async: the block follows the stream. */
  CHECK_CU(cuemm_allocate(m, 5000, &p));
  CHECK_CU(cuemm_free_async(m, p, s));
  cuemm_stats st = test_stats(m);
  is(st.live_count, 0, "cuemm_alloc's block freed on a stream: not live");
  is(st.stream_cached_count, 1, "it is cached for its stream");
  is(st.pending_count, 0, "and not queued");
  CHECK_CU(cuemm_allocate_async(m, 5000, s, &q));
  is(q, p, "the stream reuses it");
  /* cuemm_allocate_async, then cuemm_free: deferred like any free. */
  CHECK_CU(cuemm_free(m, q));
  st = test_stats(m);
  is(st.pending_count, 1, "cuemm_alloc_async's block freed with cuemm_free: queued");
  is(st.live_count, 0, "not live");
  is(cuemm_free_async(m, q, s), CUDA_ERROR_INVALID_VALUE, "freeing it again on a stream is a double free");
  like(cuemm_last_error(), "cuemm_free_async", "named as the stream call");
  if (sim_present)
    sim.calls_reset();
  CHECK_CU(cuemm_flush(m));
  if (sim_present)
    is(calls("cuCtxSynchronize"), 1, "its flush synchronizes the context");
  else
    skip(1, SIM_REASON);
  /* Larger than the pool: cuMemAlloc, and a deferred free. */
  CUdeviceptr big;
  if (sim_present)
    sim.calls_reset();
  CHECK_CU(cuemm_allocate_async(m, 300 * MIB, s, &big));
  if (sim_present)
    is(calls("cuMemAlloc"), 1, "a request past the pool's capacity goes to cuMemAlloc");
  else
    skip(1, SIM_REASON);
  /* record_stream of it: nothing to record, since its free synchronizes. */
  if (sim_present)
    sim.calls_reset();
  is(cuemm_record_stream(m, big, CU_STREAM_LEGACY), CUDA_SUCCESS, "record_stream of a cuMemAlloc block: accepted");
  if (sim_present)
    is(calls("cuEventCreate") + calls("cuEventRecord") + calls("cuStreamWaitEvent"), 0, "with no driver call");
  else
    skip(1, SIM_REASON);
  is(cuemm_record_stream(m, big + 256, CU_STREAM_LEGACY), CUDA_ERROR_INVALID_VALUE, "its interior is refused");
  like(cuemm_last_error(), "not the start of a live device allocation", "the message says why");
  if (sim_present)
    sim.calls_reset();
  CHECK_CU(cuemm_free_async(m, big, s));
  is(cuemm_record_stream(m, big, CU_STREAM_LEGACY), CUDA_ERROR_INVALID_VALUE, "once freed, refused");
  if (sim_present)
    is(calls("cuMemFree"), 1, "and its stream free goes the deferred way (300 MiB is past the byte threshold: "
       "flushed at once)");
  else
    skip(1, SIM_REASON);
  CHECK_CU(cuemm_destroy(m));

  /* A hard limit holds on this path too. */
  cuemm_config c = test_config(10, 0.2);
  c.pool = CUEMM_POOL_VMM;
  c.pool_reserve = 256 * MIB;
  c.pool_limit = 64 * MIB;
  c.pool_limit_hard = 1;
  CHECK_CU(cuemm_manager_create(ctx, &c, &m));
  if (sim_present)
    sim.calls_reset();
  is(cuemm_allocate_async(m, 65 * MIB, s, &big), CUDA_ERROR_OUT_OF_MEMORY, "past a hard limit: refused");
  like(cuemm_last_error(), "hard limit", "the message names the hard limit");
  like(cuemm_last_error(), "cuemm_alloc_async", "and the stream call");
  if (sim_present)
    is(calls("cuMemAlloc"), 0, "nothing went to cuMemAlloc");
  else
    skip(1, SIM_REASON);
  CHECK_CU(cuemm_destroy(m));

  /* A size a thread's cache keeps, past a pool's soft limit, from a thread
   * whose cache knows the stream (the entry point's inline way): cuMemAlloc. */
  c = test_config(10, 0.2);
  c.pool = CUEMM_POOL_VMM;
  c.pool_reserve = 256 * MIB;
  c.pool_chunk = 2 * MIB;
  c.pool_limit = 8 * MIB;
  CHECK_CU(cuemm_manager_create(ctx, &c, &m));
  CUdeviceptr known, mid;
  CHECK_CU(cuemm_allocate_async(m, 4096, s, &known));
  CHECK_CU(cuemm_free_async(m, known, s));
  if (sim_present)
    sim.calls_reset();
  is(cuemm_allocate_async(m, 12 * MIB, s, &mid), CUDA_SUCCESS, "12 MiB past a soft limit of 8 MiB: served");
  if (sim_present)
    is(calls("cuMemAlloc"), 1, "by cuMemAlloc");
  else
    skip(1, SIM_REASON);
  is(cuemm_free_async(m, mid, s), CUDA_SUCCESS, "and freed on the stream");
  CHECK_CU(cuemm_destroy(m));
  CHECK_CU(cuStreamDestroy(s));
}

typedef struct xthread {
  cuemm_manager *m;
  CUdeviceptr p;
  CUstream s;
  CUdeviceptr again;
  CUresult r1, r2;
} xthread;

static void *free_elsewhere(void *arg)
{
  xthread *x = arg;
  cuCtxSetCurrent(ctx);
  x->r1 = cuemm_free_async(x->m, x->p, x->s);
  x->r2 = cuemm_allocate_async(x->m, 6000, x->s, &x->again);
  if (x->r2 == CUDA_SUCCESS)
    cuemm_free_async(x->m, x->again, x->s);
  return NULL;
}

static void test_threads(void)
{
  cuemm_manager *m = pool_manager(CUEMM_STREAM_REUSE_EVENT);
  CUstream s;
  CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  xthread x = { .m = m, .s = s };
  CHECK_CU(cuemm_allocate_async(m, 6000, s, &x.p));
  pthread_t t;
  pthread_create(&t, NULL, free_elsewhere, &x);
  pthread_join(t, NULL);
  is(x.r1, CUDA_SUCCESS, "another thread frees a block this one allocated");
  is(x.r2, CUDA_SUCCESS, "and allocates again");
  is(x.again, x.p, "its own cache serves it the block it freed");
  is(cuemm_free_async(m, x.p, s), CUDA_ERROR_INVALID_VALUE, "the allocating thread's free is now a double free");
  like(cuemm_last_error(), "double free", "said so");
  cuemm_stats st = test_stats(m);
  is(st.stream_heaps, 2, "two threads, two heaps");
  is(st.allocs, 2, "two allocations");
  is(st.frees, 2, "two frees");
  is(st.live_count, 0, "nothing live");
  /* The exited thread's heap is adopted by the next thread. */
  x.p = 0;
  CHECK_CU(cuemm_allocate_async(m, 6000, s, &x.p));
  pthread_create(&t, NULL, free_elsewhere, &x);
  pthread_join(t, NULL);
  st = test_stats(m);
  is(st.stream_heaps, 2, "a new thread adopts the heap the first one left");
  /* A block another thread frees waits, as its owner's free would, for
   * the streams cuemm_record_stream named. */
  CUstream s2;
  CHECK_CU(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  x.p = 0;
  CHECK_CU(cuemm_allocate_async(m, 6000, s, &x.p));
  CHECK_CU(cuemm_record_stream(m, x.p, s2));
  if (sim_present)
    sim.calls_reset();
  pthread_create(&t, NULL, free_elsewhere, &x);
  pthread_join(t, NULL);
  is(x.r1, CUDA_SUCCESS, "another thread frees a block a second stream used");
  if (sim_present)
    is(calls("cuStreamWaitEvent"), 1, "its free makes the freeing stream wait for the second one's work");
  else
    skip(1, "needs the simulated driver's counters (running on the system driver)");
  CHECK_CU(cuemm_destroy(m));
  CHECK_CU(cuStreamDestroy(s2));
  CHECK_CU(cuStreamDestroy(s));
}

/* A request the pool cannot serve, on a stream whose own cached blocks
 * would: they go back to the pool as freed on that stream and serve it,
 * with no event recorded and no growth. */
static void test_give_back_own_stream(void)
{
  cuemm_config c = vmm_config(256 * MIB, 32 * MIB);
  c.pool_release_threshold = 256 * MIB;
  c.stream_reuse = CUEMM_STREAM_REUSE_EVENT;
  cuemm_manager *m = NULL;
  CHECK_CU(cuemm_manager_create(ctx, &c, &m));
  CUstream s;
  CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  enum { N = 150 };
  CUdeviceptr p[N];
  for (int i = 0; i < N; i++)
    CHECK_CU(cuemm_allocate_async(m, 200 << 10, s, &p[i]));
  for (int i = 0; i < N; i++)
    CHECK_CU(cuemm_free_async(m, p[i], s));
  cuemm_stats before = test_stats(m);
  unsigned long records = calls("cuEventRecord"), creates = calls("cuMemCreate");
  CUdeviceptr big;
  is(cuemm_allocate_async(m, 8 * MIB, s, &big), CUDA_SUCCESS, "8 MiB on a stream whose thread caches 29 MiB on it");
  cuemm_stats after = test_stats(m);
  is(calls("cuEventRecord") - records, 0, "no event was recorded for it");
  is(calls("cuMemCreate") - creates, 0, "the pool did not grow");
  ok(after.held_bytes == before.held_bytes && after.stream_cached_bytes + 6 * MIB <= before.stream_cached_bytes,
     "the stream's own cached blocks served it (%zu cached bytes, %zu before)", after.stream_cached_bytes,
     before.stream_cached_bytes);
  CHECK_CU(cuemm_free_async(m, big, s));
  CHECK_CU(cuemm_destroy(m));
  CHECK_CU(cuStreamDestroy(s));
}

/* A pool its caches fill between growths: after 64 takings back it grows,
 * by 8 MiB at least, instead of taking back at nearly every miss. */
static void test_churn_grows(void)
{
  cuemm_config c = test_config(10, 0.2);
  c.pool = CUEMM_POOL_VMM;
  c.pool_reserve = 256 * MIB;
  c.pool_release_threshold = 256 * MIB;
  cuemm_manager *m = NULL;
  CHECK_CU(cuemm_manager_create(ctx, &c, &m));
  CUstream s;
  CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr live[16];
  uint64_t x = 88172645463325252ull;
  for (int i = 0; i < 16; i++)
    CHECK_CU(cuemm_allocate_async(m, 256, s, &live[i]));
  for (int k = 0; k < 20000; k++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    int i = (int)(x % 16);
    CHECK_CU(cuemm_free_async(m, live[i], s));
    CHECK_CU(cuemm_allocate_async(m, 256 + (size_t)(x >> 20) % (128 << 10), s, &live[i]));
  }
  cuemm_stats st = test_stats(m);
  cuemm_pool_stats ps;
  CHECK_CU(cuemm_pool_get_stats(m, &ps));
  ok(st.stream_reclaims <= 100 && ps.mapped_bytes >= 8 * MIB,
     "16 blocks of up to 128 KiB replaced 20,000 times: %llu takings back, %zu MiB mapped",
     (unsigned long long)st.stream_reclaims, ps.mapped_bytes >> 20);
  for (int i = 0; i < 16; i++)
    CHECK_CU(cuemm_free_async(m, live[i], s));
  CHECK_CU(cuemm_destroy(m));
  CHECK_CU(cuStreamDestroy(s));
}

typedef struct remote {
  cuemm_manager *m;
  CUstream s;
  CUdeviceptr p[3];
  CUresult r[4];
  unsigned long records;
  char why[256];
} remote;

static void *free_for_another(void *arg)
{
  remote *x = arg;
  cuCtxSetCurrent(ctx);
  unsigned long ev = calls("cuEventRecord");
  for (int i = 0; i < 3; i++)
    x->r[i] = cuemm_free_async(x->m, x->p[i], x->s);
  x->records = calls("cuEventRecord") - ev;
  x->r[3] = cuemm_free_async(x->m, x->p[2], x->s);
  snprintf(x->why, sizeof x->why, "%s", cuemm_last_error());
  return NULL;
}

/* A thread that frees blocks another allocated, on the allocating stream:
 * after the first (which finds their heap through the manager), each goes
 * back to the allocating thread's bins, where its next request on that
 * stream takes it, with no event recorded. */
static void test_remote_free(void)
{
  cuemm_manager *m = pool_manager(CUEMM_STREAM_REUSE_EVENT);
  CUstream s;
  CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  remote x = { .m = m, .s = s };
  for (int i = 0; i < 3; i++)
    CHECK_CU(cuemm_allocate_async(m, 6000, s, &x.p[i]));
  pthread_t t;
  pthread_create(&t, NULL, free_for_another, &x);
  pthread_join(t, NULL);
  ok(x.r[0] == CUDA_SUCCESS && x.r[1] == CUDA_SUCCESS && x.r[2] == CUDA_SUCCESS,
     "another thread frees three blocks this one allocated");
  is(x.records, 0, "no event was recorded for them");
  is(x.r[3], CUDA_ERROR_INVALID_VALUE, "its second free of the third is refused");
  like(x.why, "was freed already, by another thread", "as a double free");
  unsigned long work = sim_driver_work();
  CUdeviceptr a = 0, b = 0;
  CHECK_CU(cuemm_allocate_async(m, 6000, s, &a));
  CHECK_CU(cuemm_allocate_async(m, 6100, s, &b));
  tap_diag("got 0x%llx 0x%llx, freed 0x%llx 0x%llx 0x%llx", (unsigned long long)a, (unsigned long long)b,
           (unsigned long long)x.p[0], (unsigned long long)x.p[1], (unsigned long long)x.p[2]);
  ok(a == x.p[2] && b == x.p[1], "this thread's next requests on the stream take the last two back, newest first");
  is(sim_driver_work() - work, 0, "with no driver call");
  cuemm_stats st = test_stats(m);
  is(st.live_count, 2, "two blocks live");
  is(st.frees, 3, "three frees counted");

  /* Freed by the other thread on a stream of its own with its work still
   * queued there: the allocating thread's next request on its stream must
   * not get it (it waits in this heap for that stream's event). */
  if (!sim_present || !sim.set_queue_mode)
    skip(1, "needs simcuda's queue mode to hold work back");
  else {
    CUstream s2;
    CHECK_CU(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    x.s = s2;
    x.p[0] = a;
    x.p[1] = b;
    CHECK_CU(cuemm_allocate_async(m, 6000, s, &x.p[2]));
    CHECK_CU(cuCtxSynchronize());
    sim.set_queue_mode(1);
    for (int i = 0; i < 3; i++)
      CHECK_CU(cuMemsetD8Async(x.p[i], 7, 6000, s2));
    pthread_create(&t, NULL, free_for_another, &x);
    pthread_join(t, NULL);
    CUdeviceptr c[3];
    for (int i = 0; i < 3; i++)
      CHECK_CU(cuemm_allocate_async(m, 6000, s, &c[i]));
    int taken = 0;
    for (int i = 0; i < 3; i++)
      for (int j = 0; j < 3; j++)
        taken += c[i] == x.p[j];
    ok(x.r[0] == CUDA_SUCCESS && x.r[1] == CUDA_SUCCESS && x.r[2] == CUDA_SUCCESS && taken == 0,
       "blocks another thread freed on its stream, its work queued there, do not serve this thread's stream "
       "(%d of 3 did)", taken);
    CHECK_CU(cuCtxSynchronize());
    sim.set_queue_mode(0);
    for (int i = 0; i < 3; i++)
      CHECK_CU(cuemm_free_async(m, c[i], s));
    CHECK_CU(cuStreamSynchronize(s));
    CHECK_CU(cuemm_stream_release(m, s2));
    CHECK_CU(cuStreamDestroy(s2));
    a = b = 0;
  }
  if (a)
    CHECK_CU(cuemm_free_async(m, a, s));
  if (b)
    CHECK_CU(cuemm_free_async(m, b, s));
  CHECK_CU(cuemm_destroy(m));
  CHECK_CU(cuStreamDestroy(s));
}

typedef struct growth {
  cuemm_manager *m;
  CUstream s;
  size_t size;
  CUdeviceptr p;
  CUresult r;
} growth;

static void *alloc_elsewhere(void *arg)
{
  growth *g = arg;
  cuCtxSetCurrent(ctx);
  g->r = cuemm_allocate_async(g->m, g->size, g->s, &g->p);
  if (g->r == CUDA_SUCCESS)
    g->r = cuemm_free_async(g->m, g->p, g->s);
  return NULL;
}

static void *alloc_only(void *arg)
{
  growth *g = arg;
  cuCtxSetCurrent(ctx);
  g->r = cuemm_allocate_async(g->m, g->size, g->s, &g->p);
  return NULL;
}

/* A growth past the pool's peak while the threads' caches hold what would
 * have served the request halves the caches' bound (CUEMM__CACHE_HALVINGS):
 * a cache that trims from then on trims to the halved bound.  Growths the
 * caches could not have served change nothing. */
static void test_cache_bound_halves(void)
{
  static const char *const how[] = { "no growth past the peak", "growths past the peak, the cache holding less",
                                     "growths past the peak the cache could have served" };
  enum { BLK = 192 << 10, N = 256 }; /* N blocks: 48 MiB */
  for (int mode = 0; mode < 3; mode++) {
    cuemm_config c = vmm_config(512 * MIB, 32 * MIB);
    c.pool_release_threshold = 64 * MIB; /* the caches' bound, below a quarter of the pool or 256 MiB */
    cuemm_manager *m = NULL;
    CHECK_CU(cuemm_manager_create(ctx, &c, &m));
    CUstream s, s2;
    CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK_CU(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    static CUdeviceptr p[2 * N];
    int cached = mode == 1 ? 16 : N; /* 3 MiB, or 48 MiB */
    for (int i = 0; i < cached; i++)
      CHECK_CU(cuemm_allocate_async(m, BLK, s, &p[i]));
    for (int i = 0; i < cached; i++)
      CHECK_CU(cuemm_free_async(m, p[i], s));
    CHECK_CU(cuStreamSynchronize(s));
    /* Another thread asks three times for 24 MiB that the pool has not:
     * it grows past its peak each time, other threads' caches untouched. */
    CUdeviceptr far[3] = { 0, 0, 0 };
    int grew = 0;
    for (int k = 0; k < 3 && mode > 0; k++) {
      size_t before = test_stats(m).held_bytes;
      growth g = { .m = m, .s = s2, .size = 24 * MIB };
      pthread_t t;
      pthread_create(&t, NULL, alloc_only, &g);
      pthread_join(t, NULL);
      CHECK_CU(g.r);
      far[k] = g.p;
      cuemm_stats st = test_stats(m);
      grew += st.held_bytes > before && st.held_bytes == st.peak_held_bytes;
    }
    if (mode > 0)
      is(grew, 3, "%s: the pool grew past its peak for each request", how[mode]);
    /* This thread caches 96 MiB more, idle at once: past its cache's mark
     * (64 MiB when it began) it gives its idle blocks back, and keeps
     * caching up to the bound. */
    for (int i = 0; i < 2 * N; i++)
      CHECK_CU(cuemm_allocate_async(m, BLK, s, &p[i]));
    for (int i = 0; i < 2 * N; i++)
      CHECK_CU(cuemm_free_async(m, p[i], s));
    cuemm_stats st = test_stats(m);
    tap_diag("%s: %zu bytes cached in %zu blocks, %llu reclaims, held %zu", how[mode], st.stream_cached_bytes,
             st.stream_cached_count, (unsigned long long)st.stream_reclaims, st.held_bytes);
    if (mode < 2)
      ok(st.stream_cached_bytes >= 24 * MIB, "%s: the cache keeps up to its bound of 64 MiB (%zu MiB cached)",
         how[mode], st.stream_cached_bytes >> 20);
    else
      ok(st.stream_cached_bytes <= 16 * MIB + BLK,
         "%s: the bound halved to 16 MiB a thread and the cache trims to it (%zu MiB cached)", how[mode],
         st.stream_cached_bytes >> 20);
    for (int k = 0; k < 3; k++)
      if (far[k])
        CHECK_CU(cuemm_free_async(m, far[k], s2));
    CHECK_CU(cuemm_destroy(m));
    CHECK_CU(cuStreamDestroy(s));
    CHECK_CU(cuStreamDestroy(s2));
  }
}

/* A thread that misses grows the pool before it takes another thread's
 * idle cached blocks (a raid costs a handshake with that thread and events
 * on its streams; sixteen threads on an H100 did 1/20 of one thread's
 * pairs when every growth past the peak raided them), below the most the
 * pool has held and past it; only a pool that may not grow is served by a
 * raid. */
static void test_grow_before_raid(void)
{
  static const char *const how[] = { "below its peak", "past its peak", "at its limit" };
  for (int mode = 0; mode < 3; mode++) {
    cuemm_config c = vmm_config(256 * MIB, 32 * MIB);
    c.pool_release_threshold = 256 * MIB;
    c.pool_limit = mode == 2 ? 32 * MIB : 0;
    cuemm_manager *m = NULL;
    CHECK_CU(cuemm_manager_create(ctx, &c, &m));
    CUstream s;
    CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    if (mode == 0) {
      /* The pool held 64 MiB once, then gave them back. */
      CUdeviceptr big;
      CHECK_CU(cuemm_allocate_async(m, 64 * MIB, s, &big));
      CHECK_CU(cuemm_free_async(m, big, s));
      CHECK_CU(cuStreamSynchronize(s));
      CHECK_CU(cuemm_pool_trim(m));
    }
    /* This thread caches 24 MiB of 192 KiB blocks, idle once the stream is done. */
    enum { N = 128 };
    CUdeviceptr p[N];
    for (int i = 0; i < N; i++)
      CHECK_CU(cuemm_allocate_async(m, 192 << 10, s, &p[i]));
    for (int i = 0; i < N; i++)
      CHECK_CU(cuemm_free_async(m, p[i], s));
    CHECK_CU(cuStreamSynchronize(s));
    cuemm_stats before = test_stats(m);
    unsigned long creates = calls("cuMemCreate");
    /* Another thread wants 12 MiB; 8 MiB are free in the pool. */
    growth g = { .m = m, .s = s, .size = 12 * MIB };
    pthread_t t;
    pthread_create(&t, NULL, alloc_elsewhere, &g);
    pthread_join(t, NULL);
    is(g.r, CUDA_SUCCESS, "%s: another thread's request that does not fit is served", how[mode]);
    cuemm_stats after = test_stats(m);
    tap_diag("held %zu -> %zu (peak %zu), cached %zu -> %zu, reclaims %llu -> %llu", before.held_bytes,
             after.held_bytes, before.peak_held_bytes, before.stream_cached_bytes, after.stream_cached_bytes,
             (unsigned long long)before.stream_reclaims, (unsigned long long)after.stream_reclaims);
    if (mode < 2) {
      ok(calls("cuMemCreate") > creates || !sim_present, "the pool grew for it (%lu creations)",
         calls("cuMemCreate") - creates);
      is(after.stream_reclaims, before.stream_reclaims, "no cached block was taken back");
      ok(after.stream_cached_bytes >= before.stream_cached_bytes,
         "the first thread's cache kept its %zu bytes (%zu now)", before.stream_cached_bytes,
         after.stream_cached_bytes);
    } else {
      is(calls("cuMemCreate"), creates, "the pool did not grow");
      is(after.stream_reclaims, before.stream_reclaims + 1, "the first thread's idle blocks served it");
      is(after.held_bytes, before.held_bytes, "the pool held what it held");
    }
    CHECK_CU(cuemm_destroy(m));
    CHECK_CU(cuStreamDestroy(s));
  }
}

/* simcuda's queue mode and a pool manager for the tests of a GPU that runs
 * behind the program (pool_manager_keeping).  NULL, with the n checks
 * skipped, without the queue mode.  queued_end undoes it. */
static cuemm_manager *queued_manager(cuemm_stream_reuse reuse, int keep_large, int n)
{
  if (!sim_present || !sim.set_queue_mode) {
    skip(n, "needs simcuda's queue mode to hold work back");
    return NULL;
  }
  sim.set_queue_mode(1);
  return pool_manager_keeping(reuse, keep_large);
}

static void queued_end(cuemm_manager *m)
{
  CHECK_CU(cuCtxSynchronize());
  CHECK_CU(cuemm_destroy(m));
  sim.set_queue_mode(0);
}

/* Queue mode: a growth for a stream beside space that stream freed, with
 * its work on it still queued, joins that space (stream order lets the
 * stream use it at once): the pool maps only what is missing, and the
 * request starts at the freed block. */
static void test_growth_joins_own_stream(void)
{
  /* Kept large blocks 0: a freed large block goes back to the pool at once. */
  cuemm_manager *m = queued_manager(CUEMM_STREAM_REUSE_EVENT, 0, 5);
  if (!m)
    return;
  CUstream s;
  CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr a, b;
  CHECK_CU(cuemm_allocate_async(m, 4 * MIB, s, &a));
  cuemm_pool_stats ps;
  CHECK_CU(cuemm_pool_get_stats(m, &ps));
  size_t mapped = ps.mapped_bytes;
  CHECK_CU(cuMemsetD8Async(a, 0x5A, 4 * MIB, s)); /* s's work on the block, still queued at its free */
  CHECK_CU(cuemm_free_async(m, a, s));
  sim.calls_reset();
  CHECK_CU(cuemm_allocate_async(m, 6 * MIB, s, &b));
  CHECK_CU(cuemm_pool_get_stats(m, &ps));
  is(b, a, "the 6 MiB request on s starts at the 4 MiB block s freed");
  is(ps.mapped_bytes, mapped + 2 * MIB, "the pool mapped only the 2 MiB missing (%zu MiB before, %zu now)",
     mapped >> 20, ps.mapped_bytes >> 20);
  is(calls("cuStreamWaitEvent") + calls("cuEventSynchronize") + calls("cuStreamSynchronize"), 0,
     "nothing waited: stream order covers the queued work");
  ok(sim.queued_work() >= 1, "s's work on the block is still queued (%zu items)", sim.queued_work());
  CHECK_CU(cuStreamSynchronize(s));
  is(device_byte_at(b, 4 * MIB - 1), 0x5A, "and ran where it was queued");
  CHECK_CU(cuemm_free_async(m, b, s));
  queued_end(m);
  CHECK_CU(cuStreamDestroy(s));
}

/* Queue mode, CUEMM_STREAM_REUSE=internal: a request that would take the
 * pool past the most it has held first gives back what the calling
 * thread caches, blocks whose streams still have work queued included (as
 * freed on those streams), and waits on an event of such a stream rather
 * than grow. */
static void test_own_cache_past_peak(void)
{
  cuemm_manager *m = queued_manager(CUEMM_STREAM_REUSE_INTERNAL, 24, 6);
  if (!m)
    return;
  CUstream s1, s2;
  CHECK_CU(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  CHECK_CU(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  CUdeviceptr p, q;
  CHECK_CU(cuemm_allocate_async(m, 4 * MIB, s2, &p));
  CHECK_CU(cuMemsetD8Async(p, 0x3C, 4 * MIB, s2));
  CHECK_CU(cuemm_free_async(m, p, s2));
  cuemm_stats before = test_stats(m);
  is(before.stream_cached_bytes, 4 * MIB, "the thread caches its 4 MiB block, s2's work on it queued");
  sim.calls_reset();
  CHECK_CU(cuemm_allocate_async(m, 4 * MIB, s1, &q));
  cuemm_stats after = test_stats(m);
  is(q, p, "a request on s1 that would grow the pool past its peak gets that block");
  is(calls("cuMemCreate"), 0, "the pool did not grow");
  is(calls("cuStreamWaitEvent"), 1, "s1 waits on an event of s2 instead");
  is(after.stream_cached_bytes, 0, "the thread's cache went back to the pool");
  CHECK_CU(cuMemsetD8Async(q, 0x77, 4 * MIB, s1));
  CHECK_CU(cuStreamSynchronize(s1));
  is(device_byte_at(q, 0), 0x77, "s2's work ran first, s1's after it");
  CHECK_CU(cuemm_free_async(m, q, s1));
  queued_end(m);
  CHECK_CU(cuStreamDestroy(s1));
  CHECK_CU(cuStreamDestroy(s2));
}

/* Queue mode, CUEMM_STREAM_REUSE=internal: where the pool would grow and
 * the free space lies in pieces freed on different streams, still in use
 * by their work, the requesting stream waits on each of those streams'
 * events and takes the pieces, merged. */
static void test_adopt_pieces(void)
{
  cuemm_manager *m = queued_manager(CUEMM_STREAM_REUSE_INTERNAL, 0, 6); /* freed large blocks go to the pool */
  if (!m)
    return;
  CUstream s[3];
  for (int i = 0; i < 3; i++)
    CHECK_CU(cuStreamCreate(&s[i], CU_STREAM_NON_BLOCKING));
  CUdeviceptr a, b, q;
  CHECK_CU(cuemm_allocate_async(m, 2 * MIB, s[0], &a));
  CHECK_CU(cuemm_allocate_async(m, 2 * MIB, s[1], &b));
  ok(b == a + 2 * MIB, "two 2 MiB blocks side by side, on s0 and s1");
  CHECK_CU(cuMemsetD8Async(a, 0x11, 2 * MIB, s[0]));
  CHECK_CU(cuMemsetD8Async(b, 0x22, 2 * MIB, s[1]));
  CHECK_CU(cuemm_free_async(m, a, s[0]));
  CHECK_CU(cuemm_free_async(m, b, s[1]));
  cuemm_pool_stats ps;
  CHECK_CU(cuemm_pool_get_stats(m, &ps));
  size_t mapped = ps.mapped_bytes;
  sim.calls_reset();
  CHECK_CU(cuemm_allocate_async(m, 4 * MIB, s[2], &q));
  CHECK_CU(cuemm_pool_get_stats(m, &ps));
  is(q, a, "a 4 MiB request on s2 gets the two pieces, merged");
  is(ps.mapped_bytes, mapped, "the pool did not grow");
  is(calls("cuStreamWaitEvent"), 2, "s2 waits on an event of s0 and one of s1");
  CHECK_CU(cuMemsetD8Async(q, 0x33, 4 * MIB, s[2]));
  CHECK_CU(cuStreamSynchronize(s[2]));
  ok(device_byte_at(q, 0) == 0x33 && device_byte_at(q, 4 * MIB - 1) == 0x33, "s2's work ran after s0's and s1's");
  CHECK_CU(cuemm_free_async(m, q, s[2]));
  CHECK_CU(cuCtxSynchronize());
  CHECK_CU(cuemm_pool_trim(m));
  CHECK_CU(cuemm_pool_get_stats(m, &ps));
  is(ps.mapped_bytes, 0, "once the work is done, trim gives everything back");
  queued_end(m);
  for (int i = 0; i < 3; i++)
    CHECK_CU(cuStreamDestroy(s[i]));
}

/* Blocks freed on one stream go to the pool (all but the one the thread
 * keeps); a request on another stream takes them once an event says their
 * work is done, before the pool grows; trim gives back everything. */
static void test_reclaim(void)
{
  cuemm_manager *m = pool_manager(CUEMM_STREAM_REUSE_EVENT);
  CUstream s1, s2;
  CHECK_CU(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  CHECK_CU(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  CUdeviceptr v[64];
  for (int i = 0; i < 64; i++)
    CHECK_CU(cuemm_allocate_async(m, MIB, s1, &v[i]));
  for (int i = 0; i < 64; i++)
    CHECK_CU(cuemm_free_async(m, v[i], s1));
  CHECK_CU(cuStreamSynchronize(s1));
  cuemm_pool_stats ps;
  CHECK_CU(cuemm_pool_get_stats(m, &ps));
  size_t mapped = ps.mapped_bytes;
  is(mapped, 64 * MIB, "64 blocks of 1 MiB mapped 64 MiB");
  CUdeviceptr big;
  CHECK_CU(cuemm_allocate_async(m, 48 * MIB, s2, &big));
  CHECK_CU(cuemm_pool_get_stats(m, &ps));
  is(ps.mapped_bytes, mapped, "a 48 MiB request on another stream is served by the cached blocks, no growth");
  cuemm_stats st = test_stats(m);
  is(st.stream_cached_bytes, MIB, "the thread kept one block of the 64, the pool took the others at their free");
  ok(st.stream_steals >= 1, "s2 took blocks freed on s1 (%llu)", (unsigned long long)st.stream_steals);
  is(st.stream_events, 0, "s1 had no work left, which cuStreamQuery told without an event (%llu events)",
     (unsigned long long)st.stream_events);
  CHECK_CU(cuemm_free_async(m, big, s2));
  CHECK_CU(cuemm_pool_trim(m));
  CHECK_CU(cuemm_pool_get_stats(m, &ps));
  is(ps.mapped_bytes, 0, "trim gives every cached block back and releases the memory");
  st = test_stats(m);
  is(st.stream_cached_bytes, 0, "nothing cached after trim");
  CHECK_CU(cuemm_destroy(m));
  CHECK_CU(cuStreamDestroy(s1));
  CHECK_CU(cuStreamDestroy(s2));
}

/* A manager whose pool reserves 64 MiB and grows by 8 MiB, keeping
 * `keep_large` large blocks a stream, and a non-blocking stream *s. */
static cuemm_manager *small_pool(int keep_large, CUstream *s)
{
  cuemm_config c = vmm_config(64 * MIB, 8 * MIB);
  c.stream_keep_large = keep_large;
  cuemm_manager *m = NULL;
  CHECK_CU(cuemm_manager_create(ctx, &c, &m));
  CHECK_CU(cuStreamCreate(s, CU_STREAM_NON_BLOCKING));
  return m;
}

/* Before the pool grows, every idle block the threads keep goes back to
 * it, not only as many as the request needs: those left would split the
 * free space around the request. */
static void test_reclaim_all(void)
{
  CUstream s;
  cuemm_manager *m = small_pool(5, &s);
  CUdeviceptr v[4], r;
  for (int i = 0; i < 4; i++)
    CHECK_CU(cuemm_allocate_async(m, 2 * MIB, s, &v[i]));
  for (int i = 0; i < 4; i++)
    CHECK_CU(cuemm_free_async(m, v[i], s));
  CHECK_CU(cuStreamSynchronize(s));
  cuemm_stats st = test_stats(m);
  cuemm_pool_stats ps;
  CHECK_CU(cuemm_pool_get_stats(m, &ps));
  ok(st.stream_cached_bytes == 8 * MIB && ps.mapped_bytes == 8 * MIB,
     "the stream keeps all four 2 MiB blocks, the whole 8 MiB chunk (%zu cached)", (size_t)st.stream_cached_bytes);
  /* 3 MiB: no kept block serves it and the pool has nothing free; the two
   * oldest kept blocks, merged, would do. */
  CHECK_CU(cuemm_allocate_async(m, 3 * MIB, s, &r));
  st = test_stats(m);
  CHECK_CU(cuemm_pool_get_stats(m, &ps));
  is(ps.mapped_bytes, 8 * MIB, "a 3 MiB request is served without growing");
  is(r, v[0], "at the lowest address");
  is(st.stream_cached_bytes, 0, "every kept block went back to the pool first, not only the two it needed");
  is(ps.used_bytes, 3 * MIB, "the request is the pool's only used block, the rest free");
  CHECK_CU(cuemm_free_async(m, r, s));
  CHECK_CU(cuemm_destroy(m));
  CHECK_CU(cuStreamDestroy(s));
}

/* CUEMM_STREAM_KEEP_LARGE: a stream keeps the large blocks it freed last,
 * as many as it says; a newer one sends the oldest back to the pool, at
 * its free or where a request goes to the pool; 0 keeps none. */
static void *small_pair(void *arg)
{
  cuemm_manager *m = arg;
  CUdeviceptr p;
  CHECK_CU(cuCtxSetCurrent(ctx));
  CHECK_CU(cuemm_allocate_async(m, 4096, CU_STREAM_PER_THREAD, &p));
  CHECK_CU(cuemm_free_async(m, p, CU_STREAM_PER_THREAD));
  return NULL;
}

/* With a second thread's cache, each thread keeps half of
 * stream_keep_large for a stream: together they keep what one would. */
static void test_keep_large_share(void)
{
  CUstream s;
  cuemm_manager *m = small_pool(4, &s);
  CUdeviceptr v[4];
  for (int i = 0; i < 4; i++)
    CHECK_CU(cuemm_allocate_async(m, MIB, s, &v[i]));
  for (int i = 0; i < 4; i++)
    CHECK_CU(cuemm_free_async(m, v[i], s));
  cuemm_stats st = test_stats(m);
  is(st.stream_cached_bytes, 4 * MIB, "one thread: the stream keeps all four large blocks");
  pthread_t t;
  pthread_create(&t, NULL, small_pair, m);
  pthread_join(t, NULL);
  st = test_stats(m);
  is(st.stream_heaps, 2, "a second thread made a cache of its own");
  for (int i = 0; i < 4; i++)
    CHECK_CU(cuemm_allocate_async(m, MIB, s, &v[i]));
  for (int i = 0; i < 4; i++)
    CHECK_CU(cuemm_free_async(m, v[i], s));
  st = test_stats(m);
  ok(st.stream_cached_bytes >= 2 * MIB && st.stream_cached_bytes < 3 * MIB,
     "two threads: the stream keeps two of the four (%zu bytes cached, the other thread's 4 KiB block among them)",
     st.stream_cached_bytes);
  CHECK_CU(cuemm_destroy(m));
  CHECK_CU(cuStreamDestroy(s));
}

static void test_keep_large(void)
{
  cuemm_config c = vmm_config(64 * MIB, 8 * MIB);
  c.stream_keep_large = 3;
  cuemm_manager *m = NULL;
  CHECK_CU(cuemm_manager_create(ctx, &c, &m));
  CUstream s;
  CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr v[5], p, q;
  /* One chunk of 8 MiB, idle, that the blocks below come from (a pool
   * this small grows by less). */
  CHECK_CU(cuemm_allocate(m, 8 * MIB, &p));
  CHECK_CU(cuemm_free(m, p));
  CHECK_CU(cuemm_flush(m));
  for (int i = 0; i < 5; i++) {
    CHECK_CU(cuemm_allocate_async(m, MIB, s, &v[i]));
    CHECK_CU(cuMemsetD8Async(v[i], (unsigned char)(0x30 + i), MIB, s));
  }
  ok(v[1] == v[0] + MIB && v[4] == v[0] + 4 * MIB, "five 1 MiB blocks side by side");
  for (int i = 0; i < 5; i++)
    CHECK_CU(cuemm_free_async(m, v[i], s));
  cuemm_stats st = test_stats(m);
  is(st.stream_cached_bytes, 3 * MIB, "the stream keeps the three it freed last");
  cuemm_pool_stats ps;
  CHECK_CU(cuemm_pool_get_stats(m, &ps));
  is(ps.used_bytes, 3 * MIB, "the pool has the two oldest back");
  is(ps.free_blocks, 2, "merged: one free block of the two, and the chunk's untouched 3 MiB");
  if (sim_present)
    sim.calls_reset();
  CHECK_CU(cuemm_allocate_async(m, MIB, s, &p));
  is(p, v[4], "a request of that size on the stream gets the newest kept block");
  is(sim_driver_work(), 0, "with no driver call");
  CHECK_CU(cuemm_allocate_async(m, 2 * MIB, s, &q));
  is(q, v[0], "a size it keeps none of comes from the pool: the two oldest, merged");
  CHECK_CU(cuemm_free_async(m, q, s));
  CHECK_CU(cuemm_free_async(m, p, s));
  st = test_stats(m);
  is(st.stream_cached_bytes, 4 * MIB, "two more freed: the oldest kept block (1 MiB) went back to make room");
  CHECK_CU(cuemm_pool_get_stats(m, &ps));
  is(ps.used_bytes, 4 * MIB, "and the pool has it");
  CUdeviceptr r;
  CHECK_CU(cuemm_allocate_async(m, 3 * MIB, s, &r));
  st = test_stats(m);
  is(st.stream_cached_bytes, 2 * MIB + MIB,
     "a request that goes to the pool with three kept sends the oldest back first");
  is(r, v[0] + 5 * MIB, "the best fit serves it: the chunk's untouched 3 MiB, not the two evicted blocks (2 MiB)");
  CHECK_CU(cuemm_pool_get_stats(m, &ps));
  is(ps.mapped_bytes, 8 * MIB, "without growing");
  CHECK_CU(cuemm_free_async(m, r, s));
  /* Kept now: p (1 MiB), q (2 MiB), r (3 MiB).  A request the kept blocks
   * cannot serve makes room first (q goes back); four more sizes are asked
   * for after x's. */
  CUdeviceptr x, y[4];
  CHECK_CU(cuemm_allocate_async(m, MIB / 4, s, &x));
  for (int i = 0; i < 4; i++)
    CHECK_CU(cuemm_allocate_async(m, (size_t)(5 + i) * MIB / 16, s, &y[i]));
  CHECK_CU(cuemm_free_async(m, y[0], s));
  is(test_stats(m).stream_cached_bytes, MIB + 3 * MIB + 5 * MIB / 16, "kept: p, r and y[0] (q went back for x)");
  CHECK_CU(cuemm_free_async(m, x, s));
  st = test_stats(m);
  is(st.stream_cached_bytes, MIB + 3 * MIB + 5 * MIB / 16,
     "with as many kept as it may, a block of a size not lately asked for goes back itself");
  CHECK_CU(cuemm_pool_get_stats(m, &ps));
  is(ps.used_bytes, st.stream_cached_bytes + (6 + 7 + 8) * MIB / 16, "the pool has it (used: the kept blocks and "
     "y[1..3])");
  CHECK_CU(cuemm_free_async(m, y[1], s));
  is(test_stats(m).stream_cached_bytes, 3 * MIB + (5 + 6) * MIB / 16,
     "one of a size lately asked for takes the oldest kept block's place (p went back)");
  for (int i = 2; i < 4; i++)
    CHECK_CU(cuemm_free_async(m, y[i], s));
  CHECK_CU(cuemm_destroy(m));

  c.stream_keep_large = 0;
  CHECK_CU(cuemm_manager_create(ctx, &c, &m));
  for (int i = 0; i < 5; i++)
    CHECK_CU(cuemm_allocate_async(m, MIB, s, &v[i]));
  for (int i = 0; i < 5; i++)
    CHECK_CU(cuemm_free_async(m, v[i], s));
  CHECK_CU(cuemm_allocate_async(m, 256, s, &p));
  CHECK_CU(cuemm_free_async(m, p, s));
  st = test_stats(m);
  is(st.stream_cached_bytes, 256, "CUEMM_STREAM_KEEP_LARGE=0: the large blocks all went back, a small one stays");
  CHECK_CU(cuemm_pool_get_stats(m, &ps));
  is(ps.free_blocks, 1, "the large ones merged whole with the rest");
  CHECK_CU(cuemm_destroy(m));
  CHECK_CU(cuStreamDestroy(s));
}

/* src/core/manager.h's CUEMM__KEEP_QUIET: the pool allocations without a
 * growth past the peak before the threads keep large blocks again. */
#define KEEP_QUIET 16384

/* One cuemm_allocate_async + cuemm_free_async pair of `size` on s; returns
 * the bytes the threads' caches keep afterwards. */
static size_t pair_cached(cuemm_manager *m, size_t size, CUstream s)
{
  CUdeviceptr p;
  CHECK_CU(cuemm_allocate_async(m, size, s, &p));
  CHECK_CU(cuemm_free_async(m, p, s));
  return test_stats(m).stream_cached_bytes;
}

/* While the pool grows past its peak for want of free space in one piece,
 * the threads keep no large blocks, so that those freed merge in the pool;
 * they keep them again after KEEP_QUIET pool allocations without such a
 * growth.  A growth for want of free bytes changes nothing. */
static void test_keep_quiet(void)
{
  CUstream s;
  cuemm_manager *m = small_pool(4, &s);
  is(pair_cached(m, MIB, s), MIB, "a growth with nothing free: the stream keeps the large block it freed");
  CHECK_CU(cuemm_destroy(m));
  CHECK_CU(cuStreamDestroy(s));

  m = small_pool(4, &s);
  CUdeviceptr p, q[4], x;
  CHECK_CU(cuemm_allocate(m, 8 * MIB, &p));
  CHECK_CU(cuemm_free(m, p));
  CHECK_CU(cuemm_flush(m));
  for (int i = 0; i < 4; i++)
    CHECK_CU(cuemm_allocate(m, 2 * MIB, &q[i]));
  CHECK_CU(cuemm_free(m, q[0]));
  CHECK_CU(cuemm_free(m, q[2]));
  CHECK_CU(cuemm_flush(m));
  cuemm_pool_stats ps;
  CHECK_CU(cuemm_pool_get_stats(m, &ps));
  ok(ps.mapped_bytes == 8 * MIB && ps.free_bytes == 4 * MIB && ps.largest_free_block == 2 * MIB,
     "8 MiB mapped, 4 MiB free in two holes of 2 MiB");
  CHECK_CU(cuemm_allocate_async(m, 3 * MIB, s, &x));
  CHECK_CU(cuemm_pool_get_stats(m, &ps));
  ok(ps.mapped_bytes > 8 * MIB, "3 MiB fit in no hole: the pool grew past its peak (%zu bytes mapped)",
     ps.mapped_bytes);
  is(pair_cached(m, MIB, s), 0, "then a large block freed on the stream goes back to the pool");
  size_t cached = 0;
  for (int i = 2; i < KEEP_QUIET; i++)
    cached += pair_cached(m, MIB, s);
  is(cached, 0, "and so does every one of the next %d, each allocated from the pool", KEEP_QUIET - 2);
  is(pair_cached(m, MIB, s), MIB, "the %dth allocation from the pool since the growth: the stream keeps it again",
     KEEP_QUIET);
  CHECK_CU(cuemm_free_async(m, x, s));
  CHECK_CU(cuemm_free(m, q[1]));
  CHECK_CU(cuemm_free(m, q[3]));
  CHECK_CU(cuemm_destroy(m));
  CHECK_CU(cuStreamDestroy(s));
}

/* A request from the pool whose block no thread's cache will keep (here
 * CUEMM_STREAM_KEEP_LARGE=0) still has the stream's cached blocks back
 * before the pool goes further: stream order makes them the stream's at
 * once, with no driver call. */
static void test_unkept_takes_own_stream(void)
{
  CUstream s;
  cuemm_manager *m = small_pool(0, &s);
  CUdeviceptr p, v[32], x;
  CHECK_CU(cuemm_allocate(m, 8 * MIB, &p));
  CHECK_CU(cuemm_free(m, p));
  CHECK_CU(cuemm_flush(m));
  for (int i = 0; i < 32; i++)
    CHECK_CU(cuemm_allocate_async(m, 128 * 1024, s, &v[i]));
  for (int i = 0; i < 32; i++)
    CHECK_CU(cuemm_free_async(m, v[i], s));
  is(test_stats(m).stream_cached_bytes, 4 * MIB, "the stream's cache holds 32 blocks of 128 KiB");
  if (sim_present)
    sim.calls_reset();
  CHECK_CU(cuemm_allocate_async(m, 6 * MIB, s, &x));
  cuemm_pool_stats ps;
  CHECK_CU(cuemm_pool_get_stats(m, &ps));
  is(ps.mapped_bytes, 8 * MIB, "6 MiB served without growing");
  is(test_stats(m).stream_cached_bytes, 0, "from the cached blocks, given back first");
  if (sim_present)
    is(sim_driver_work(), 0, "with no driver call");
  CHECK_CU(cuemm_free_async(m, x, s));
  CHECK_CU(cuemm_destroy(m));
  CHECK_CU(cuStreamDestroy(s));
}

/* The release threshold covers the caches: a thread caching more than it
 * gives idle blocks back, and the pool releases what is wholly free. */
static void test_threshold(void)
{
  cuemm_config c = vmm_config(64 * MIB, 2 * MIB);
  c.pool_release_threshold = 4 * MIB;
  c.pool_release_delay_ms = 0;
  c.stream_keep_large = 1;
  cuemm_manager *m = NULL;
  CHECK_CU(cuemm_manager_create(ctx, &c, &m));
  CUstream s;
  CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr v[16];
  for (int i = 0; i < 16; i++)
    CHECK_CU(cuemm_allocate_async(m, MIB, s, &v[i]));
  cuemm_pool_stats ps;
  CHECK_CU(cuemm_pool_get_stats(m, &ps));
  is(ps.mapped_bytes, 16 * MIB, "16 blocks of 1 MiB mapped");
  CHECK_CU(cuStreamSynchronize(s));
  for (int i = 0; i < 16; i++)
    CHECK_CU(cuemm_free_async(m, v[i], s));
  cuemm_stats st = test_stats(m);
  ok(st.stream_cached_bytes <= MIB, "the thread kept at most one block, the pool took the others (%zu cached)",
     st.stream_cached_bytes);
  is(st.stream_events, 0, "past the threshold, s had no work left: all were done, no event (%llu)",
     (unsigned long long)st.stream_events);
  CHECK_CU(cuemm_pool_get_stats(m, &ps));
  ok(ps.mapped_bytes <= 10 * MIB, "and the pool released chunks (%zu mapped)", ps.mapped_bytes);
  CHECK_CU(cuemm_destroy(m));
  CHECK_CU(cuStreamDestroy(s));
}

static void test_release_and_reset(void)
{
  cuemm_manager *m = pool_manager(CUEMM_STREAM_REUSE_EVENT);
  CUstream s;
  CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr p, q;
  CHECK_CU(cuemm_allocate_async(m, 7000, s, &p));
  CHECK_CU(cuemm_free_async(m, p, s));
  if (sim_present) {
    sim.set_queue_mode(1);
    CHECK_CU(cuMemsetD8Async(p, 1, 16, s)); /* work still "using" it */
    sim.calls_reset();
  }
  CHECK_CU(cuemm_stream_release(m, s));
  if (sim_present)
    is(calls("cuEventRecord"), 1, "release records one last event on the stream");
  else
    skip(1, SIM_REASON);
  CHECK_CU(cuemm_allocate_async(m, 7000, s, &q));
  if (sim_present)
    ok(q != p, "the same handle afterwards is a new stream: it does not get the block while the old work is queued");
  else
    skip(1, SIM_REASON);
  if (sim_present) {
    CHECK_CU(cuStreamSynchronize(s));
    sim.set_queue_mode(0);
  }
  /* Reset frees everything, live and cached. */
  CHECK_CU(cuemm_reset(m));
  cuemm_stats st = test_stats(m);
  is(st.live_count, 0, "reset: nothing live");
  is(st.stream_cached_count, 0, "reset: nothing cached");
  is(st.pending_count, 0, "reset: flushed");
  is(cuemm_free_async(m, q, s), CUDA_ERROR_INVALID_VALUE, "a block freed by reset cannot be freed again");
  CHECK_CU(cuemm_allocate_async(m, 7000, s, &q));
  CHECK_CU(cuemm_destroy(m));
  like(cuemm_last_error(), "1 outstanding", "destroy counts the live stream block as outstanding");
  CHECK_CU(cuStreamDestroy(s));
}

/* The block's own range and IPC export, as for cuemm_allocate's blocks. */
static void test_range_and_ipc(void)
{
  cuemm_config c = test_config(10, 0.2);
  c.pool = CUEMM_POOL_VMM;
  c.pool_reserve = 256 * MIB;
  c.pool_ipc = 1;
  cuemm_manager *m = NULL;
  CUresult cr = cuemm_manager_create(ctx, &c, &m);
  if (cr == CUDA_ERROR_NOT_SUPPORTED) {
    skip(8, "the device cannot export pool memory as file descriptors");
    return;
  }
  CHECK_CU(cr);
  CUstream s;
  CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr p, base = 0;
  size_t size = 0;
  CHECK_CU(cuemm_allocate_async(m, 3000, s, &p));
  CHECK_CU(cuemm_address_range(m, p + 2999, &base, &size));
  ok(base == p && size == 3000, "the range of a stream block, from its last byte: its start and size (%zu)", size);
  is(cuemm_address_range(m, p + 3000, &base, &size), CUDA_ERROR_NOT_FOUND, "one past its end: not found");
  cuemm_ipc_handle h;
  CHECK_CU(cuemm_ipc_export(m, p + 1000, 0, &h));
  ok(h.kind == CUEMM_IPC_KIND_POOL && h.size == 2000, "a stream block exports as a pool handle (%llu bytes)",
     (unsigned long long)h.size);
  CHECK_CU(cuemm_free_async(m, p, s));
  is(cuemm_address_range(m, p, &base, &size), CUDA_ERROR_NOT_FOUND, "freed on its stream: not found");
  like(cuemm_last_error(), "freed already", "the message says it was freed");
  is(cuemm_ipc_export(m, p, 0, &h), CUDA_ERROR_INVALID_VALUE, "and its export is refused");
  /* Reused for a larger request of the same rounded size: the range follows. */
  CUdeviceptr q;
  CHECK_CU(cuemm_allocate_async(m, 3070, s, &q));
  CHECK_CU(cuemm_address_range(m, q + 3050, &base, &size));
  ok(q == p && base == q && size == 3070, "reused for 3070 bytes: the range is the new request's");
  CHECK_CU(cuemm_free_async(m, q, s));
  CHECK_CU(cuemm_destroy(m));
  pass("destroyed with the exported block freed");
  CHECK_CU(cuStreamDestroy(s));
}

/* On a GPU (and on simcuda in queue mode): stream A keeps writing a block
 * through queued work while stream B allocates; B writes its own pattern;
 * after both are done B's block holds B's pattern only, in both reuse
 * modes. */
static void test_busy_stream(cuemm_stream_reuse reuse)
{
  const size_t size = 64 * MIB, words = size / 4;
  if (sim_present && sim.set_queue_mode)
    sim.set_queue_mode(1);
  cuemm_manager *m = pool_manager(reuse);
  CUstream a, b;
  CHECK_CU(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
  CHECK_CU(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
  CUdeviceptr p, q;
  CHECK_CU(cuemm_allocate_async(m, size, a, &p));
  for (unsigned i = 0; i < 40; i++) /* tens of milliseconds of writes on a GPU */
    CHECK_CU(cuMemsetD32Async(p, 0xA0000000u + i, words, a));
  CHECK_CU(cuemm_free_async(m, p, a));
  CHECK_CU(cuemm_allocate_async(m, size, b, &q));
  CHECK_CU(cuMemsetD32Async(q, 0xB0B0B0B0u, words, b));
  CHECK_CU(cuStreamSynchronize(b));
  CHECK_CU(cuStreamSynchronize(a));
  static uint32_t host[64 * MIB / 4];
  CHECK_CU(cuMemcpyDtoH(host, q, size));
  size_t bad = 0;
  for (size_t i = 0; i < words; i++)
    bad += host[i] != 0xB0B0B0B0u;
  const char *mode = reuse == CUEMM_STREAM_REUSE_WAIT ? "wait" : "event";
  is(bad, 0, "%s mode: B's block holds B's data only after A's queued writes (%s)", mode,
     q == p ? "same block: B waited for A" : "another block");
  if (reuse == CUEMM_STREAM_REUSE_EVENT)
    ok(q != p, "event mode: B did not take the block A was still writing");
  else
    pass("wait mode: B may take A's block");
  CHECK_CU(cuemm_free_async(m, q, b));
  CHECK_CU(cuemm_destroy(m));
  CHECK_CU(cuStreamDestroy(a));
  CHECK_CU(cuStreamDestroy(b));
  if (sim_present && sim.set_queue_mode)
    sim.set_queue_mode(0);
}

/* Managed memory has no stream-ordered pool: the calls take the deferred
 * path. */
static void test_managed(void)
{
  cuemm_config c = test_config(10, 0.2);
  c.memory = CUEMM_MEMORY_MANAGED;
  cuemm_manager *m = NULL;
  CUresult cr = cuemm_manager_create(ctx, &c, &m);
  if (cr == CUDA_ERROR_NOT_SUPPORTED) {
    skip(6, "no managed memory on this device");
    return;
  }
  CHECK_CU(cr);
  CUstream s;
  CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr p;
  is(cuemm_allocate_async(m, 5000, s, &p), CUDA_SUCCESS, "managed memory: cuemm_alloc_async is cuemm_alloc");
  CHECK_CU(cuMemsetD8Async(p, 7, 5000, s));
  is(cuemm_record_stream(m, p, CU_STREAM_LEGACY), CUDA_SUCCESS, "record_stream of a live block does nothing");
  is(cuemm_record_stream(m, p + 256, CU_STREAM_LEGACY), CUDA_ERROR_INVALID_VALUE,
     "record_stream of an interior pointer is refused");
  is(cuemm_free_async(m, p, s), CUDA_SUCCESS, "cuemm_free_async is the deferred free");
  is(test_stats(m).pending_count, 1, "the block waits in the pending queue");
  is(cuemm_free_async(m, p, s), CUDA_ERROR_INVALID_VALUE, "a second free is refused as cuemm_free refuses it");
  CHECK_CU(cuemm_destroy(m));
  CHECK_CU(cuStreamDestroy(s));
}

static void test_exit_per_thread(void)
{
  cuemm_manager *m = pool_manager(CUEMM_STREAM_REUSE_EVENT);
  xthread x = { .m = m, .s = CU_STREAM_PER_THREAD };
  CHECK_CU(cuemm_allocate_async(m, 6000, CU_STREAM_PER_THREAD, &x.p));
  pthread_t t;
  pthread_create(&t, NULL, free_elsewhere, &x); /* frees on its own per-thread stream, then exits */
  pthread_join(t, NULL);
  is(x.r1, CUDA_SUCCESS, "freed on another thread's per-thread stream");
  CUdeviceptr q;
  CHECK_CU(cuemm_allocate_async(m, 6000, CU_STREAM_PER_THREAD, &q));
  ok(q != x.p, "this thread's per-thread stream is another stream: it does not take that block as its own");
  CHECK_CU(cuemm_free_async(m, q, CU_STREAM_PER_THREAD));
  CHECK_CU(cuemm_destroy(m));
}

int main(void)
{
  sim_init();
  ctx = test_primary_context(0);
  size_t live0 = sim_live_baseline();

  test_refusals();
  test_same_stream();
  test_cross_stream();
  test_idle_stream();
  test_pool_tagged();
  test_wait_mode();
  test_internal_mode();
  test_record_stream();
  test_mixing();
  test_threads();
  test_reclaim();
  test_grow_before_raid();
  test_cache_bound_halves();
  test_growth_joins_own_stream();
  test_own_cache_past_peak();
  test_adopt_pieces();
  test_give_back_own_stream();
  test_churn_grows();
  test_remote_free();
  test_threshold();
  test_keep_large();
  test_keep_large_share();
  test_keep_quiet();
  test_unkept_takes_own_stream();
  test_reclaim_all();
  test_release_and_reset();
  test_exit_per_thread();
  test_range_and_ipc();
  test_managed();
  test_busy_stream(CUEMM_STREAM_REUSE_EVENT);
  test_busy_stream(CUEMM_STREAM_REUSE_WAIT);
  sim_check_nothing_left(live0);
  test_release_primary(0);
  return tap_done();
}
