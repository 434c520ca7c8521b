/* test-span.c: the threads' spans (src/stream/span.h, CUEMM_STREAM_SPANS): large
 * blocks cut from a span and given back into it on its stream with no
 * driver call and no pool visit; blocks freed on another stream, by
 * another thread, with cuemm_free, after cuemm_record_stream; address
 * ranges, IPC export, snapshots and a suspension of span blocks; empty
 * spans back to the pool; "auto" taking spans only where threads queue on
 * the manager's lock.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "testutil.h"

#define MIB ((size_t)1 << 20)
#define KIB ((size_t)1 << 10)

static CUcontext ctx;

static cuemm_manager *span_manager(cuemm_stream_spans spans, int ipc)
{
  cuemm_config c = test_config(10, 0.2);
  c.pool = CUEMM_POOL_VMM;
  c.pool_reserve = 512 * MIB;
  c.pool_chunk = 32 * MIB;
  c.pool_ipc = ipc;
  c.stream_spans = spans;
  cuemm_manager *m = NULL;
  CHECK_CU(cuemm_manager_create(ctx, &c, &m));
  return m;
}

static cuemm_stats stats_of(cuemm_manager *m)
{
  cuemm_stats s;
  CHECK_CU(cuemm_get_stats(m, &s));
  return s;
}

static size_t pool_used(cuemm_manager *m)
{
  cuemm_pool_stats ps;
  CHECK_CU(cuemm_pool_get_stats(m, &ps));
  return ps.used_bytes;
}

/* The end of a test: every block freed, every span back in the pool, the
 * manager destroyed. */
static void all_back(cuemm_manager *m, const char *what)
{
  cuemm_stats st = stats_of(m);
  is(st.live_count, 0, "%s: nothing live", what);
  is(st.stream_spans, 0, "%s: every span went back once its blocks did", what);
  is(pool_used(m), 0, "%s: the pool holds nothing used", what);
  CHECK_CU(cuemm_destroy(m));
}

static void test_cut_and_back(void)
{
  cuemm_manager *m = span_manager(CUEMM_STREAM_SPANS_ALWAYS, 0);
  CUstream s;
  CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr p = 0;
  CHECK_CU(cuemm_allocate_async(m, 1 * MIB, s, &p));
  cuemm_stats st = stats_of(m);
  is(st.stream_spans, 1, "a large request opened a span");
  is(st.stream_span_bytes, 16 * MIB, "of 16 MiB (the least a span is)");
  is(st.stream_span_free_bytes, 15 * MIB, "15 MiB of it not handed out");
  is(pool_used(m), 16 * MIB, "the pool counts the span as one used block");

  /* Pairs of sizes from 256 KiB to 4 MiB, on the span's stream: all cut
   * from the span, with no driver call and nothing of the pool's moving. */
  unsigned long work = sim_driver_work();
  size_t used = pool_used(m);
  CUdeviceptr q[3] = { 0 };
  size_t sizes[] = { 256 * KIB, 4 * MIB, 700 * KIB, 3 * MIB + 256, 1 * MIB, 2 * MIB };
  int inside = 1;
  for (int i = 0; i < 60; i++) {
    int k = i % 3;
    if (q[k])
      CHECK_CU(cuemm_free_async(m, q[k], s));
    CHECK_CU(cuemm_allocate_async(m, sizes[i % 6], s, &q[k]));
    inside &= q[k] >= p - 16 * MIB && q[k] < p + 16 * MIB;
  }
  is(sim_driver_work(), work, "60 pairs of 256 KiB .. 4 MiB: no driver call");
  is(pool_used(m), used, "and the pool's used bytes never moved");
  ok(inside, "every block lies in the span");
  is(stats_of(m).stream_spans, 1, "still one span");

  /* Freed on the span's stream, a block is back in the span at once: the
   * bytes free in the span rise by its size, and the next request of its
   * size takes them again. */
  CUdeviceptr r = q[0];
  size_t rsz = sizes[57 % 6];
  size_t before = stats_of(m).stream_span_free_bytes;
  CHECK_CU(cuemm_free_async(m, r, s));
  is(stats_of(m).stream_span_free_bytes, before + rsz, "a block freed on the span's stream is back in it at once");
  CUdeviceptr again = 0;
  CHECK_CU(cuemm_allocate_async(m, rsz, s, &again));
  is(stats_of(m).stream_span_free_bytes, before, "and serves the stream's next request");
  q[0] = again;
  /* Contents written are read back. */
  CHECK_CU(cuMemsetD8(again, 0x5a, rsz));
  CHECK_CU(cuMemsetD8(p, 0x11, 1 * MIB));
  is(device_byte_at(again, rsz - 1), 0x5a, "a span block holds what was written to it");
  is(device_byte_at(p, 0), 0x11, "and its neighbour its own");

  for (int k = 0; k < 3; k++)
    CHECK_CU(cuemm_free_async(m, q[k], s));
  CHECK_CU(cuemm_free_async(m, p, s));
  st = stats_of(m);
  is(st.live_count, 0, "nothing live");
  is(st.stream_span_free_bytes, st.stream_span_bytes, "every block is back in the span");
  CHECK_CU(cuStreamSynchronize(s));
  CHECK_CU(cuemm_pool_trim(m));
  st = stats_of(m);
  is(st.stream_spans, 0, "cuemm_pool_trim gives the empty span back");
  is(pool_used(m), 0, "the pool has it back");
  CHECK_CU(cuemm_destroy(m));
  CHECK_CU(cuStreamDestroy(s));
}

static void test_other_stream(void)
{
  cuemm_manager *m = span_manager(CUEMM_STREAM_SPANS_ALWAYS, 0);
  CUstream s, s2;
  CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CHECK_CU(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  if (sim_present)
    sim.set_queue_mode(1);
  CUdeviceptr p = 0, q = 0, x = 0;
  CHECK_CU(cuemm_allocate_async(m, 2 * MIB, s, &p));
  CHECK_CU(cuemm_allocate_async(m, 512 * KIB, s, &x));
  size_t free_before = stats_of(m).stream_span_free_bytes;
  CHECK_CU(cuMemsetD8Async(p, 0x77, 2 * MIB, s2)); /* work on another stream, still queued */
  CHECK_CU(cuemm_free_async(m, p, s2));
  is(stats_of(m).stream_span_free_bytes, free_before, "freed on another stream: not back in the span");
  CHECK_CU(cuemm_allocate_async(m, 2 * MIB, s, &q));
  ok(q != p, "the span's stream does not get it while the other stream's work may use it");
  CUdeviceptr on2 = 0;
  CHECK_CU(cuemm_allocate_async(m, 2 * MIB, s2, &on2));
  ok(on2 == p, "the stream it was freed on takes it at once (stream order)");
  CHECK_CU(cuemm_free_async(m, on2, s2));
  if (sim_present)
    sim.set_queue_mode(0);
  CHECK_CU(cuCtxSynchronize());
  CHECK_CU(cuemm_free_async(m, q, s));
  CHECK_CU(cuemm_free_async(m, x, s));
  CHECK_CU(cuemm_pool_trim(m)); /* the cached block goes back, through a flush */
  CHECK_CU(cuemm_flush(m));
  all_back(m, "freed on another stream");
  CHECK_CU(cuStreamDestroy(s));
  CHECK_CU(cuStreamDestroy(s2));
}

typedef struct freer {
  cuemm_manager *m;
  CUdeviceptr p;
  CUstream s;
  CUresult r;
} freer;

static void *free_there(void *arg)
{
  freer *f = arg;
  CHECK_CU(cuCtxSetCurrent(ctx));
  f->r = cuemm_free_async(f->m, f->p, f->s);
  return NULL;
}

static void test_other_ways(void)
{
  cuemm_manager *m = span_manager(CUEMM_STREAM_SPANS_ALWAYS, 0);
  CUstream s, s2;
  CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CHECK_CU(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  CUdeviceptr a = 0, b = 0, c = 0, d = 0;
  CHECK_CU(cuemm_allocate_async(m, 1 * MIB, s, &a));
  CHECK_CU(cuemm_allocate_async(m, 1 * MIB + 1000, s, &b));
  CHECK_CU(cuemm_allocate_async(m, 300 * KIB, s, &c));
  CHECK_CU(cuemm_allocate_async(m, 2 * MIB, s, &d));
  size_t free0 = stats_of(m).stream_span_free_bytes;

  /* Another thread frees one on the span's stream: it is back in the span. */
  freer f = { m, a, s, CUDA_ERROR_UNKNOWN };
  pthread_t t;
  pthread_create(&t, NULL, free_there, &f);
  pthread_join(t, NULL);
  is(f.r, CUDA_SUCCESS, "another thread frees a span block");
  is(stats_of(m).stream_span_free_bytes, free0 + 1 * MIB, "and it is back in the span");
  is(cuemm_free_async(m, a, s), CUDA_ERROR_INVALID_VALUE, "freeing it again is refused");

  /* Its address range, from inside it. */
  CUdeviceptr base = 0;
  size_t size = 0;
  is(cuemm_address_range(m, b + 4096, &base, &size), CUDA_SUCCESS, "the address range of a span block");
  ok(base == b && size == 1 * MIB + 1000, "is the block's (0x%llx, %zu bytes)", (unsigned long long)base, size);

  /* A snapshot lists it, live, with what was asked for. */
  cuemm_snapshot *snap = NULL;
  CHECK_CU(cuemm_snapshot_take(m, &snap));
  int seen = 0, cached = 0;
  for (size_t i = 0; i < snap->nblocks; i++) {
    const cuemm_snapshot_block *k = &snap->blocks[i];
    if (k->ptr == b && k->state == CUEMM_BLOCK_LIVE && k->requested == 1 * MIB + 1000 && k->stream == s)
      seen = 1;
    if (k->state == CUEMM_BLOCK_CACHED && k->ptr == a)
      cached = 1;
  }
  cuemm_snapshot_free(snap);
  ok(seen, "a snapshot lists the span block, live, on its stream, with the bytes asked for");
  ok(cached, "and the span's free space as kept for the stream");

  /* cuemm_record_stream, then the free: the free waits for the other
   * stream (the block is not back in the span until then). */
  is(cuemm_record_stream(m, b, s2), CUDA_SUCCESS, "cuemm_record_stream on a span block");
  CHECK_CU(cuemm_free_async(m, b, s));
  CHECK_CU(cuCtxSynchronize());

  /* cuemm_free: queued, back in the span at the flush. */
  is(cuemm_free(m, c), CUDA_SUCCESS, "cuemm_free of a span block");
  is(cuemm_free(m, c), CUDA_ERROR_INVALID_VALUE, "twice is refused");
  CHECK_CU(cuemm_flush(m));
  CHECK_CU(cuemm_free_async(m, d, s));
  CHECK_CU(cuemm_pool_trim(m));
  CHECK_CU(cuemm_flush(m));
  all_back(m, "every kind of free");
  CHECK_CU(cuStreamDestroy(s));
  CHECK_CU(cuStreamDestroy(s2));
}

static void test_ipc_and_suspend(void)
{
  cuemm_manager *m = span_manager(CUEMM_STREAM_SPANS_ALWAYS, 1);
  CUstream s;
  CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr a = 0, b = 0;
  CHECK_CU(cuemm_allocate_async(m, 1 * MIB, s, &a));
  CHECK_CU(cuemm_allocate_async(m, 3 * MIB, s, &b));
  cuemm_ipc_handle h;
  CUresult r = cuemm_ipc_export(m, b + 4096, 8192, &h);
  is(r, CUDA_SUCCESS, "IPC export of a part of a span block (%s)", r ? cuemm_last_error() : "ok");
  if (r == CUDA_SUCCESS)
    ok(h.size == 8192 && h.offset + h.size <= h.alloc_size, "the handle names those bytes (%llu at %llu of the "
       "%llu exported)", (unsigned long long)h.size, (unsigned long long)h.offset, (unsigned long long)h.alloc_size);
  else
    ok(0, "the handle names that part of the block");
  is(cuemm_ipc_export(m, b + 3 * MIB + 4096, 256, &h), CUDA_ERROR_INVALID_VALUE,
     "past the block, in the span's free space: refused");

  CHECK_CU(cuMemsetD8(a, 0x21, 1 * MIB));
  CHECK_CU(cuMemsetD8(b, 0x43, 3 * MIB));
  CHECK_CU(cuCtxSynchronize());
  r = cuemm_pool_suspend(m, CUEMM_SUSPEND_KEEP | CUEMM_SUSPEND_IGNORE_IPC);
  is(r, CUDA_SUCCESS, "suspended with contents kept (%s)", r ? cuemm_last_error() : "ok");
  cuemm_pool_stats ps;
  CHECK_CU(cuemm_pool_get_stats(m, &ps));
  is(ps.kept_bytes, 4 * MIB, "only the span's blocks were copied (4 MiB), not its free space");
  is(ps.mapped_bytes, 0, "no memory mapped while suspended");
  CHECK_CU(cuemm_pool_resume(m));
  is(device_byte_at(a, 1 * MIB - 1), 0x21, "after the resumption the first block holds its contents");
  is(device_byte_at(b, 0), 0x43, "and the second its own");
  CUdeviceptr c = 0;
  CHECK_CU(cuemm_allocate_async(m, 1 * MIB, s, &c));
  ok(c > b, "the span serves again after the resumption");
  CHECK_CU(cuemm_free_async(m, a, s));
  CHECK_CU(cuemm_free_async(m, b, s));
  CHECK_CU(cuemm_free_async(m, c, s));
  CHECK_CU(cuemm_destroy(m));
  CHECK_CU(cuStreamDestroy(s));
}

static void test_new_span(void)
{
  cuemm_manager *m = span_manager(CUEMM_STREAM_SPANS_ALWAYS, 0);
  CUstream s;
  CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  /* The lowest free address of the span serves: a block freed at the
   * span's start is the next request's, on the same stream, with no wait. */
  CUdeviceptr lo = 0, hi = 0, back = 0;
  CHECK_CU(cuemm_allocate_async(m, 1 * MIB, s, &lo));
  CHECK_CU(cuemm_allocate_async(m, 1 * MIB, s, &hi));
  CHECK_CU(cuemm_free_async(m, lo, s));
  CHECK_CU(cuemm_allocate_async(m, 1 * MIB, s, &back));
  ok(back == lo, "a block freed on the span's stream is that stream's next block (0x%llx)", (unsigned long long)back);
  CHECK_CU(cuemm_free_async(m, back, s));
  CHECK_CU(cuemm_free_async(m, hi, s));
  CUdeviceptr first[4] = { 0 }, more = 0;
  for (int i = 0; i < 4; i++)
    CHECK_CU(cuemm_allocate_async(m, 4 * MIB, s, &first[i]));
  is(stats_of(m).stream_spans, 1, "four blocks of 4 MiB fill one span of 16 MiB");
  CHECK_CU(cuemm_allocate_async(m, 4 * MIB, s, &more));
  cuemm_stats st = stats_of(m);
  is(st.stream_spans, 2, "the fifth opens a second span");
  is(st.stream_span_bytes, 16 * MIB + 32 * MIB, "twice the bytes the stream's span hands out (32 MiB)");
  for (int i = 0; i < 4; i++)
    CHECK_CU(cuemm_free_async(m, first[i], s));
  st = stats_of(m);
  is(st.stream_spans, 1, "the first span, empty and no longer cut from, went back to the pool");
  is(pool_used(m), 32 * MIB, "the pool has its 16 MiB back");
  CHECK_CU(cuemm_free_async(m, more, s));
  CHECK_CU(cuemm_destroy(m));
  CHECK_CU(cuStreamDestroy(s));
}

static void test_stream_release(void)
{
  cuemm_manager *m = span_manager(CUEMM_STREAM_SPANS_ALWAYS, 0);
  CUstream s, s2;
  CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CHECK_CU(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  CUdeviceptr a = 0, b = 0, c = 0;
  CHECK_CU(cuemm_allocate_async(m, 1 * MIB, s, &a));
  CHECK_CU(cuemm_allocate_async(m, 1 * MIB, s, &b));
  CHECK_CU(cuemm_free_async(m, b, s));
  is(cuemm_stream_release(m, s), CUDA_SUCCESS, "a stream with a live span block is released");
  is(stats_of(m).stream_spans, 1, "its span stays while a block of it is live");
  CHECK_CU(cuemm_allocate_async(m, 1 * MIB, s2, &c));
  ok(c < a - 15 * MIB || c >= a + 16 * MIB, "another stream's request is cut from a span of its own");
  CHECK_CU(cuemm_free_async(m, a, s2));
  CHECK_CU(cuemm_free_async(m, c, s2));
  CHECK_CU(cuemm_pool_trim(m));
  all_back(m, "a released stream");
  CHECK_CU(cuStreamDestroy(s));
  CHECK_CU(cuStreamDestroy(s2));
}

/* ---- "auto" ---------------------------------------------------------------------------- */

typedef struct worker {
  cuemm_manager *m;
  atomic_int *stop;
  atomic_long pairs;
} worker;

static void *large_pairs(void *arg)
{
  worker *w = arg;
  CHECK_CU(cuCtxSetCurrent(ctx));
  CUstream s;
  CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr live[8] = { 0 };
  unsigned x = 7;
  while (!atomic_load(w->stop)) {
    x = x * 1103515245u + 12345u;
    int k = (x >> 16) & 7;
    size_t size = 256 * KIB + ((x >> 8) % 2048) * 1024;
    if (live[k])
      CHECK_CU(cuemm_free_async(w->m, live[k], s));
    CHECK_CU(cuemm_allocate_async(w->m, size, s, &live[k]));
    atomic_fetch_add(&w->pairs, 1);
  }
  for (int k = 0; k < 8; k++)
    if (live[k])
      CHECK_CU(cuemm_free_async(w->m, live[k], s));
  CHECK_CU(cuStreamSynchronize(s));
  CHECK_CU(cuemm_stream_release(w->m, s)); /* the manager lives on: it must forget the handle */
  CHECK_CU(cuStreamDestroy(s));
  return NULL;
}

static void test_auto(void)
{
  cuemm_manager *m = span_manager(CUEMM_STREAM_SPANS_AUTO, 0);
  atomic_int stop = 0;
  worker one = { m, &stop, 0 };
  /* One thread alone: its visits to the pool never find the lock taken. */
  atomic_store(&stop, 0);
  pthread_t t;
  pthread_create(&t, NULL, large_pairs, &one);
  while (atomic_load(&one.pairs) < 20000)
    ;
  atomic_store(&stop, 1);
  pthread_join(t, NULL);
  is(stats_of(m).stream_spans, 0, "auto: one thread's 20,000 large pairs take no span");

  /* Two threads of large pairs, and a third taking the manager's lock
   * (statistics) all the while: their visits queue, and they take spans. */
  worker two[2] = { { m, &stop, 0 }, { m, &stop, 0 } };
  atomic_store(&stop, 0);
  pthread_t tt[2];
  for (int i = 0; i < 2; i++)
    pthread_create(&tt[i], NULL, large_pairs, &two[i]);
  /* Snapshots hold the lock longer than statistics do; at most a minute
   * (valgrind runs one thread at a time). */
  size_t spans = 0;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do {
    cuemm_snapshot *snap = NULL;
    CHECK_CU(cuemm_snapshot_take(m, &snap));
    cuemm_snapshot_free(snap);
    spans = stats_of(m).stream_spans;
    clock_gettime(CLOCK_MONOTONIC, &t1);
  } while (!spans && t1.tv_sec - t0.tv_sec < 60);
  atomic_store(&stop, 1);
  for (int i = 0; i < 2; i++)
    pthread_join(tt[i], NULL);
  ok(spans > 0, "auto: threads whose pool visits find the lock taken cut from spans (%zu spans; %ld and %ld pairs)",
     spans, atomic_load(&two[0].pairs), atomic_load(&two[1].pairs));
  CHECK_CU(cuemm_pool_trim(m));
  cuemm_stats st = stats_of(m);
  is(st.live_count, 0, "nothing live at the end");
  CHECK_CU(cuemm_destroy(m));
}

static void test_config_knob(void)
{
  setenv("CUEMM_STREAM_SPANS", "always", 1);
  cuemm_config c;
  is(cuemm_config_init(&c), CUDA_SUCCESS, "CUEMM_STREAM_SPANS=always is taken");
  is(c.stream_spans, CUEMM_STREAM_SPANS_ALWAYS, "and set");
  setenv("CUEMM_STREAM_SPANS", "sometimes", 1);
  is(cuemm_config_init(&c), CUDA_ERROR_INVALID_VALUE, "CUEMM_STREAM_SPANS=sometimes is refused");
  like(cuemm_last_error(), "CUEMM_STREAM_SPANS", "the message names the variable");
  like(cuemm_last_error(), "\"never\", \"auto\" or \"always\"", "and what it takes");
  unsetenv("CUEMM_STREAM_SPANS");
  CHECK_CU(cuemm_config_init(&c));
  is(c.stream_spans, CUEMM_STREAM_SPANS_AUTO, "the default is auto");
}

int main(void)
{
  sim_init();
  ctx = test_primary_context(0);
  size_t live0 = sim_live_baseline();
  test_config_knob();
  test_cut_and_back();
  test_other_stream();
  test_other_ways();
  test_ipc_and_suspend();
  test_new_span();
  test_stream_release();
  test_auto();
  sim_check_nothing_left(live0);
  test_release_primary(0);
  return tap_done();
}
