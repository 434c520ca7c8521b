/* test-stream-release.c: a stream given up with cuemm_stream_release and
 * then destroyed is never named to the driver again, whatever of it the
 * manager still holds: blocks freed on it with work queued (cached by the
 * freeing thread, by another thread, in the pool as that stream's free
 * space, in a span of it), live blocks allocated on it, a live block that
 * cuemm_record_stream said it uses.  The simulated driver stops the
 * program when a call names a destroyed stream (the real driver's
 * behaviour there is undefined: it crashed in cuStreamIsCapturing), so
 * each step below would end the test if cuemm named it; the checks count
 * what comes back, and when.
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "testutil.h"

#define MIB ((size_t)1 << 20)
#define KIB ((size_t)1 << 10)

static CUcontext ctx;

static cuemm_manager *manager(cuemm_stream_spans spans)
{
  cuemm_config c = test_config(10, 0.2);
  c.pool = CUEMM_POOL_VMM;
  c.pool_reserve = 512 * MIB;
  c.pool_chunk = 32 * MIB;
  c.stream_spans = spans;
  cuemm_manager *m = NULL;
  CHECK_CU(cuemm_manager_create(ctx, &c, &m));
  return m;
}

typedef struct remote {
  cuemm_manager *m;
  CUdeviceptr p;
  CUstream s;
  int phase; /* 0: free p on s; 1: allocate and free on s (its heap had the released stream's block) */
  CUresult r;
} remote;

static void *remote_work(void *arg)
{
  remote *w = arg;
  w->r = cuCtxSetCurrent(ctx);
  if (w->r != CUDA_SUCCESS)
    return NULL;
  if (w->phase == 0) {
    w->r = cuemm_free_async(w->m, w->p, w->s);
    return NULL;
  }
  for (int i = 0; i < 64 && w->r == CUDA_SUCCESS; i++) {
    CUdeviceptr q = 0;
    w->r = cuemm_allocate_async(w->m, (size_t)(i % 8 + 1) * 3000, w->s, &q);
    if (w->r == CUDA_SUCCESS)
      w->r = cuemm_free_async(w->m, q, w->s);
  }
  return NULL;
}

static CUresult on_thread(remote *w)
{
  pthread_t t;
  if (pthread_create(&t, NULL, remote_work, w) != 0)
    return CUDA_ERROR_UNKNOWN;
  pthread_join(t, NULL);
  return w->r;
}

static void run(cuemm_stream_spans spans, const char *what)
{
  cuemm_manager *m = manager(spans);
  CUstream s, t;
  CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CHECK_CU(cuStreamCreate(&t, CU_STREAM_NON_BLOCKING));
  if (sim_present)
    sim.set_queue_mode(1); /* work queued on s stays queued until a synchronization */

  /* On s: small and large blocks, some freed with work still queued. */
  enum { N = 12 };
  static const size_t sizes[N] = { 512, 3000, 40 * KIB, 200 * KIB, 1 * MIB, 3 * MIB,
                                   700, 9000, 64 * KIB, 300 * KIB, 2 * MIB, 5 * MIB };
  CUdeviceptr b[N];
  for (int i = 0; i < N; i++) {
    CHECK_CU(cuemm_allocate_async(m, sizes[i], s, &b[i]));
    CHECK_CU(cuMemsetD8Async(b[i], (unsigned char)(i + 1), 64, s));
  }
  for (int i = 0; i < 6; i++)
    CHECK_CU(cuemm_free_async(m, b[i], s));
  /* One freed on s by another thread (its cache keeps it, tagged s). */
  remote w = { m, b[6], s, 0, CUDA_SUCCESS };
  is(on_thread(&w), CUDA_SUCCESS, "%s: another thread frees a block of s on s", what);
  /* One live block that t uses too (an event on t at its free), one that s
   * uses while it belongs to t. */
  CUdeviceptr u = 0;
  CHECK_CU(cuemm_allocate_async(m, 100 * KIB, t, &u));
  CHECK_CU(cuemm_record_stream(m, u, s));
  CHECK_CU(cuemm_record_stream(m, b[7], t));

  is(cuemm_stream_release(m, s), CUDA_SUCCESS, "%s: s released with blocks of it cached, live and recorded", what);
  CHECK_CU(cuStreamDestroy(s));
  pass("%s: s destroyed", what);

  /* Everything that walks the streams the manager knows. */
  if (sim_present)
    sim.calls_reset();
  CHECK_CU(cuemm_free_async(m, u, t)); /* it was used by s: the event recorded at the release stands for it */
  if (sim_present) {
    is(sim_calls("cuEventRecord"), 0, "%s: the free of a block s used records no event", what);
    is(sim_calls("cuStreamWaitEvent"), 1, "%s: t waits on the event recorded on s at its release", what);
  } else {
    skip(2, SIM_REASON);
  }
  for (int i = 7; i < N; i++)
    CHECK_CU(cuemm_free_async(m, b[i], t)); /* live blocks of s, freed on t */
  CUdeviceptr x[N];
  for (int i = 0; i < N; i++)
    CHECK_CU(cuemm_allocate_async(m, sizes[i], t, &x[i]));
  cuemm_snapshot *snap = NULL;
  CHECK_CU(cuemm_snapshot_take(m, &snap));
  cuemm_snapshot_free(snap);
  w = (remote){ m, 0, t, 1, CUDA_SUCCESS };
  is(on_thread(&w), CUDA_SUCCESS, "%s: the other thread allocates and frees on t", what);
  CHECK_CU(cuemm_pool_trim(m));
  CHECK_CU(cuemm_flush(m));
  cuemm_stats st = test_stats(m);
  is(st.live_count, N, "%s: the twelve blocks on t are all that is live", what);

  /* The queued work of s runs; its blocks serve anyone then. */
  if (sim_present) {
    CHECK_CU(cuCtxSynchronize());
    sim.set_queue_mode(0);
  }
  for (int i = 0; i < N; i++)
    CHECK_CU(cuemm_free_async(m, x[i], t));
  CHECK_CU(cuStreamSynchronize(t));
  CHECK_CU(cuemm_pool_suspend(m, 0));
  CHECK_CU(cuemm_pool_resume(m));
  CUdeviceptr y = 0;
  CHECK_CU(cuemm_allocate_async(m, 5 * MIB, t, &y));
  CHECK_CU(cuemm_free_async(m, y, t));
  CHECK_CU(cuemm_pool_trim(m));
  st = test_stats(m);
  is(st.live_count, 0, "%s: nothing live at the end", what);
  cuemm_pool_stats ps;
  CHECK_CU(cuemm_pool_get_stats(m, &ps));
  is(ps.used_bytes, 0, "%s: every block of the released stream came back to the pool", what);
  CHECK_CU(cuemm_destroy(m));
  CHECK_CU(cuStreamDestroy(t));
}

/* cuEventRecord failing while the release records the events of the
 * blocks the stream used: the release fails and changes nothing of them
 * (the free still records on the stream, which lives on); tried again, it
 * succeeds, and the free waits on the event it recorded. */
static void release_fails(void)
{
  if (!sim_present) {
    skip(6, SIM_REASON);
    return;
  }
  cuemm_manager *m = manager(CUEMM_STREAM_SPANS_NEVER);
  CUstream s, t;
  CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CHECK_CU(cuStreamCreate(&t, CU_STREAM_NON_BLOCKING));
  CUdeviceptr u = 0, v = 0;
  CHECK_CU(cuemm_allocate_async(m, 100 * KIB, t, &u));
  CHECK_CU(cuemm_allocate_async(m, 200 * KIB, t, &v));
  CHECK_CU(cuemm_record_stream(m, u, s));
  CHECK_CU(cuemm_record_stream(m, v, s));
  sim.fail_from("cuEventRecord", 2, CUDA_ERROR_LAUNCH_FAILED); /* the second of the two events fails */
  is(cuemm_stream_release(m, s), CUDA_ERROR_LAUNCH_FAILED, "release: cuEventRecord failing is reported");
  sim.fail_clear();
  like(cuemm_last_error(), "cuEventRecord on stream", "the message names the call");
  sim.calls_reset();
  CHECK_CU(cuemm_free_async(m, u, t));
  is(sim_calls("cuEventRecord"), 1, "after the failed release the free records on the stream, which lives on");
  is(cuemm_stream_release(m, s), CUDA_SUCCESS, "tried again, the release succeeds");
  CHECK_CU(cuStreamDestroy(s));
  sim.calls_reset();
  CHECK_CU(cuemm_free_async(m, v, t));
  is(sim_calls("cuEventRecord"), 0, "then the free records nothing on the destroyed stream");
  is(sim_calls("cuStreamWaitEvent"), 1, "and waits on the event the release recorded");
  CHECK_CU(cuStreamSynchronize(t));
  CHECK_CU(cuemm_destroy(m));
  CHECK_CU(cuStreamDestroy(t));
}

int main(void)
{
  sim_init();
  ctx = test_primary_context(0);
  size_t live0 = sim_live_baseline();
  run(CUEMM_STREAM_SPANS_NEVER, "without spans");
  run(CUEMM_STREAM_SPANS_ALWAYS, "with spans");
  release_fails();
  sim_check_nothing_left(live0);
  test_release_primary(0);
  return tap_done();
}
