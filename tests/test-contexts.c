/* test-contexts.c: managers, contexts and the registry.
 *
 * Two contexts with a manager each (on two devices where there are two):
 * their allocations are foreign to each other and their statistics
 * independent.  A flush triggered while another context is current, or from
 * a thread with none, frees in the manager's context and leaves the caller's
 * context alone.  One manager per context (CUDA_ERROR_ALREADY_ACQUIRED), the
 * registry keyed by context id (a context destroyed and created again at the
 * same address gets a new manager), and calls that need a current context
 * when there is none.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static CUcontext primary;   /* current on the main thread throughout */

static CUcontext current_context(void)
{
  CUcontext c = NULL;
  if (cuCtxGetCurrent(&c) != CUDA_SUCCESS)
    return (CUcontext)(uintptr_t)-1;
  return c;
}

/* A new context on `dev`, not left current. */
static CUcontext new_context(CUdevice dev)
{
  CUcontext c;
  CHECK_CU(cuCtxCreate(&c, NULL, 0, dev));
  CHECK_CU(cuCtxPopCurrent(NULL));
  return c;
}

static cuemm_manager *make_on(CUcontext ctx, size_t count, double ratio)
{
  cuemm_config c = test_config(count, ratio);
  cuemm_manager *m = NULL;
  CHECK_CU(cuemm_manager_create(ctx, &c, &m));
  return m;
}

/* ---- two contexts, two managers ------------------------------------------------ */

static void two_contexts(void)
{
  int ndev = 0;
  CHECK_CU(cuDeviceGetCount(&ndev));
  CUdevice da, db;
  CHECK_CU(cuDeviceGet(&da, 0));
  CHECK_CU(cuDeviceGet(&db, ndev >= 2 ? 1 : 0));
  tap_diag("%d device(s): the two contexts are on devices %d and %d", ndev, (int)da, (int)db);
  CUcontext a = new_context(da), b = new_context(db);
  cuemm_manager *ma = make_on(a, 10, 0.2), *mb = make_on(b, 5, 0.1);
  ok(cuemm_context(ma) == a, "manager A serves context A");
  ok(cuemm_context(mb) == b, "manager B serves context B");

  CUdeviceptr pa[2], pb[3];
  CHECK_CU(cuemm_allocate(ma, 1000, &pa[0]));
  CHECK_CU(cuemm_allocate(ma, 2000, &pa[1]));
  for (int i = 0; i < 3; i++)
    CHECK_CU(cuemm_allocate(mb, 4096, &pb[i]));
  is(current_context(), primary, "allocating through both left the primary context current");

  /* Each allocation was made in its manager's context. */
  CUcontext owner = NULL;
  int ordinal = -1;
  CHECK_CU(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, pa[0]));
  ok(owner == a, "A's allocation belongs to context A");
  CHECK_CU(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, pb[0]));
  ok(owner == b, "B's allocation belongs to context B");
  CHECK_CU(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, pb[0]));
  is(ordinal, (int)db, "B's allocation is on B's device");

  cuemm_stats sa0 = test_stats(ma), sb0 = test_stats(mb);
  is(cuemm_free(ma, pb[0]), CUDA_ERROR_INVALID_VALUE, "A refuses B's allocation");
  like(cuemm_last_error(), "not the start of an allocation of this manager", "message: not ours");
  is(cuemm_free(mb, pa[0]), CUDA_ERROR_INVALID_VALUE, "B refuses A's allocation");
  cuemm_stats sa = test_stats(ma), sb = test_stats(mb);
  ok(sa.frees == sa0.frees && sa.live_count == sa0.live_count && sa.pending_count == sa0.pending_count &&
     sb.frees == sb0.frees && sb.live_count == sb0.live_count && sb.pending_count == sb0.pending_count,
     "the refused frees changed neither manager");

  is(sa.allocs, 2, "A: 2 allocations");
  is(sa.live_bytes, 3000, "A: 3000 live bytes");
  is(sb.allocs, 3, "B: 3 allocations");
  is(sb.live_bytes, 3 * 4096, "B: 12288 live bytes");
  CHECK_CU(cuemm_free(ma, pa[0]));
  sa = test_stats(ma);
  sb = test_stats(mb);
  ok(sa.frees == 1 && sa.pending_count == 1 && sa.live_count == 1, "A: one free pending, one live");
  ok(sb.frees == 0 && sb.pending_count == 0 && sb.live_count == 3, "B: untouched by A's free");

  size_t ta = 0, tb = 0, tma = 0, tmb = 0;
  CHECK_CU(cuDeviceTotalMem(&ta, da));
  CHECK_CU(cuDeviceTotalMem(&tb, db));
  CHECK_CU(cuemm_get_memory_info(ma, NULL, &tma));
  CHECK_CU(cuemm_get_memory_info(mb, NULL, &tmb));
  is(sa.total_bytes, tma, "A: total_bytes is cuMemGetInfo's total in A's context");
  is(sb.total_bytes, tmb, "B: total_bytes is cuMemGetInfo's total in B's context");
  is(sa.total_bytes, ta, "A: total_bytes is A's device memory (cuDeviceTotalMem)");
  is(sb.total_bytes, tb, "B: total_bytes is B's device memory (cuDeviceTotalMem)");
  is(sa.max_pending_bytes, (size_t)(0.2 * (double)sa.total_bytes), "A: byte threshold from A's device and ratio");
  is(sb.max_pending_bytes, (size_t)(0.1 * (double)sb.total_bytes), "B: byte threshold from B's device and ratio");

  CHECK_CU(cuemm_destroy(ma));
  CHECK_CU(cuemm_destroy(mb));
  CHECK_CU(cuCtxDestroy(a));
  CHECK_CU(cuCtxDestroy(b));
}

/* ---- flushes from elsewhere ----------------------------------------------------- */

typedef struct remote_free {
  cuemm_manager *m;
  CUdeviceptr p[3];
  CUresult r[3];
  CUcontext before, after;
} remote_free;

static void *free_without_context(void *arg)
{
  remote_free *rf = arg;
  rf->before = current_context();
  for (int i = 0; i < 3; i++)
    rf->r[i] = cuemm_free(rf->m, rf->p[i]);
  rf->after = current_context();
  return NULL;
}

static int all_gone(const CUdeviceptr *p, int n)
{
  int gone = 0;
  for (int i = 0; i < n; i++) {
    CUdeviceptr base;
    size_t size;
    gone += cuMemGetAddressRange(&base, &size, p[i]) != CUDA_SUCCESS;
  }
  return gone;
}

static void flush_elsewhere(void)
{
  CUdevice dev;
  CHECK_CU(cuCtxGetDevice(&dev));
  CUcontext a = new_context(dev), other = new_context(dev);
  cuemm_manager *m = make_on(a, 2, 0.5);

  /* Another context current: the third free crosses the count threshold. */
  CHECK_CU(cuCtxPushCurrent(other));
  CUdeviceptr p[3];
  for (int i = 0; i < 3; i++)
    CHECK_CU(cuemm_allocate(m, 8192, &p[i]));
  unsigned long push0 = sim_calls("cuCtxPushCurrent");
  for (int i = 0; i < 3; i++)
    CHECK_CU(cuemm_free(m, p[i]));
  unsigned long pushes = sim_calls("cuCtxPushCurrent") - push0;
  is(current_context(), other, "after the flush the caller's context is the one it had");
  cuemm_stats s = test_stats(m);
  is(s.driver_frees, 3, "the flush released all three");
  is(s.flushes, 1, "in one flush");
  is(all_gone(p, 3), 3, "cuMemGetAddressRange no longer finds the three pointers");
  if (sim_present)
    is(pushes, 1, "cuemm pushed its context once, for the flush (simcuda's cuCtxPushCurrent count)");
  else
    skip(1, SIM_REASON);
  CHECK_CU(cuCtxPopCurrent(NULL));
  is(current_context(), primary, "back to the primary context");

  /* From a thread with no context at all. */
  remote_free rf = { .m = m };
  for (int i = 0; i < 3; i++)
    CHECK_CU(cuemm_allocate(m, 8192, &rf.p[i]));
  pthread_t t;
  if (pthread_create(&t, NULL, free_without_context, &rf) != 0) {
    printf("Bail out! pthread_create failed\n");
    exit(1);
  }
  pthread_join(t, NULL);
  ok(rf.r[0] == CUDA_SUCCESS && rf.r[1] == CUDA_SUCCESS && rf.r[2] == CUDA_SUCCESS,
     "three frees from a thread without a context succeed (%d %d %d)", (int)rf.r[0], (int)rf.r[1], (int)rf.r[2]);
  ok(rf.before == NULL && rf.after == NULL, "that thread still has no context afterwards");
  s = test_stats(m);
  is(s.driver_frees, 6, "its flush released the three");
  is(all_gone(rf.p, 3), 3, "cuMemGetAddressRange no longer finds them");
  is(s.live_count + s.pending_count, 0, "nothing live or pending");

  CHECK_CU(cuemm_destroy(m));
  CHECK_CU(cuCtxDestroy(a));
  CHECK_CU(cuCtxDestroy(other));
}

/* ---- one manager per context ------------------------------------------------------ */

static void one_per_context(void)
{
  cuemm_manager *m1 = make_on(NULL, 3, 0.3), *m2 = (cuemm_manager *)(uintptr_t)1;
  cuemm_config c = test_config(4, 0.4);
  is(cuemm_manager_create(NULL, &c, &m2), CUDA_ERROR_ALREADY_ACQUIRED, "a second manager for the current context: ALREADY_ACQUIRED");
  like(cuemm_last_error(), "already has a manager", "message says so");
  ok(m2 == NULL, "*m is NULL after the failure");
  m2 = (cuemm_manager *)(uintptr_t)1;
  is(cuemm_manager_create(primary, &c, &m2), CUDA_ERROR_ALREADY_ACQUIRED, "the same context named explicitly: ALREADY_ACQUIRED");
  ok(m2 == NULL, "*m is NULL");

  cuemm_manager *g = NULL;
  is(cuemm_get(&g), CUDA_SUCCESS, "cuemm_get");
  ok(g == m1, "cuemm_get returns the registered manager");
  CUdeviceptr p;
  CHECK_CU(cuemm_allocate(m1, 4096, &p)); /* left outstanding: destroy frees it */
  is(test_stats(g).allocs, 1, "it is the same manager (its allocation counted)");
  is(cuemm_destroy(m1), CUDA_SUCCESS, "cuemm_destroy with one outstanding allocation");
  like(cuemm_last_error(), "freed 1 outstanding allocations (4096 bytes)", "destroy reports the outstanding allocation");

  cuemm_manager *n = NULL;
  is(cuemm_get(&n), CUDA_SUCCESS, "cuemm_get after the destroy");
  cuemm_config def;
  cuemm_config_init(&def);
  cuemm_stats s = test_stats(n);
  ok(s.allocs == 0 && s.live_count == 0 && s.max_pending_count == def.max_pending_count,
     "it created a new manager with the default configuration (allocs %llu, max_pending_count %zu, want %zu)",
     (unsigned long long)s.allocs, s.max_pending_count, def.max_pending_count);
  cuemm_manager *n2 = NULL;
  CHECK_CU(cuemm_get(&n2));
  ok(n2 == n, "and returns that one from then on");
  m2 = NULL;
  is(cuemm_manager_create(NULL, &c, &m2), CUDA_ERROR_ALREADY_ACQUIRED, "cuemm_create now collides with the one cuemm_get made");
  CHECK_CU(cuemm_destroy(n));
}

/* ---- the registry is keyed by context id ------------------------------------------- */

static void registry_by_id(void)
{
  CUdevice dev;
  CHECK_CU(cuCtxGetDevice(&dev));
  CUcontext c1;
  CHECK_CU(cuCtxCreate(&c1, NULL, 0, dev)); /* current */
  unsigned long long id1 = 0, id2 = 0;
  CHECK_CU(cuCtxGetId(c1, &id1));
  cuemm_manager *a = NULL, *b = NULL;
  is(cuemm_get(&a), CUDA_SUCCESS, "cuemm_get in a new context");
  ok(cuemm_context(a) == c1, "manager A serves it");
  CUdeviceptr p;
  CHECK_CU(cuemm_allocate(a, 4096, &p));
  CHECK_CU(cuemm_free(a, p));
  is(test_stats(a).pending_count, 1, "A holds one pending free");
  /* Freed by hand behind A's back (A still counts it pending): the driver
   * would free it with the context, but memory checkers call that a leak. */
  CHECK_CU(cuMemFree(p));

  CHECK_CU(cuCtxDestroy(c1)); /* the manager is left behind */
  CUcontext c2;
  CHECK_CU(cuCtxCreate(&c2, NULL, 0, dev)); /* current */
  tap_diag("the new context %p %s the destroyed one's address (%p)", (void *)c2,
           c2 == c1 ? "reuses" : "does not reuse", (void *)c1);
  CHECK_CU(cuCtxGetId(c2, &id2));
  ok(id2 != id1, "the new context has a new id (%llu, was %llu)", id2, id1);
  is(cuemm_get(&b), CUDA_SUCCESS, "cuemm_get in the new context");
  ok(b != a && b != NULL, "returns a different manager B, not A");
  ok(cuemm_context(b) == c2, "B serves the new context");
  cuemm_stats sb = test_stats(b);
  ok(sb.allocs == 0 && sb.pending_count == 0, "B starts empty");

  unsigned long frees0 = sim_calls("cuMemFree");
  CUresult r = cuemm_abandon(a);
  is(r, CUDA_SUCCESS, "cuemm_abandon(A) after its context was destroyed succeeds");
  like(cuemm_last_error(), "dropped 0 live allocations and 1 pending frees", "and says what it dropped");
  is(sim_calls("cuMemFree") - frees0, 0, "without a driver free (on the driver the memory went with the context)");
  sb = test_stats(b);
  ok(sb.driver_frees == 0 && sb.free_failures == 0 && sb.live_count == 0, "B was not touched by A's destruction");

  CHECK_CU(cuemm_destroy(b));
  CHECK_CU(cuCtxDestroy(c2));
  is(current_context(), primary, "the primary context is current again");
}

/* The plain case: a context destroyed under its manager, no new context made
 * in between.  cuemm_abandon drops the manager without touching the stale
 * handle (a real driver may accept it for a push and then corrupt itself). */
static void destroyed_context(void)
{
  CUdevice dev;
  CHECK_CU(cuCtxGetDevice(&dev));
  CUcontext c1;
  CHECK_CU(cuCtxCreate(&c1, NULL, 0, dev)); /* current */
  cuemm_manager *a = NULL;
  CHECK_CU(cuemm_get(&a));
  CUdeviceptr p, q;
  CHECK_CU(cuemm_allocate(a, 4096, &p));
  CHECK_CU(cuemm_allocate(a, 4096, &q));
  CHECK_CU(cuemm_free(a, p)); /* p pending, q live */
  /* The driver would free both with the context; freeing them by hand first
   * keeps memory checkers from calling them leaks, and changes nothing for
   * cuemm, which still counts them as its own. */
  CHECK_CU(cuMemFree(p));
  CHECK_CU(cuMemFree(q));
  CHECK_CU(cuCtxDestroy(c1));
  is(current_context(), primary, "destroying the current context made the primary current again");
  unsigned long calls0 = sim_calls("cuCtxPushCurrent") + sim_calls("cuMemFree");
  CUresult r = cuemm_abandon(a);
  is(r, CUDA_SUCCESS, "cuemm_abandon of a manager whose context is gone succeeds");
  like(cuemm_last_error(), "dropped 1 live allocations and 1 pending frees", "and says what it dropped");
  is(sim_calls("cuCtxPushCurrent") + sim_calls("cuMemFree") - calls0, 0, "no driver call with the stale handle");
}

/* ---- no current context ------------------------------------------------------------- */

typedef struct no_context {
  CUcontext cur;
  CUresult create_r, get_r, alloc_r, free_r;
  char create_msg[512], get_msg[512], alloc_msg[512];
  cuemm_manager *m;
  CUdeviceptr p;
} no_context;

static void *without_context(void *arg)
{
  no_context *nc = arg;
  nc->cur = current_context();
  cuemm_config c = test_config(10, 0.2);
  nc->m = (cuemm_manager *)(uintptr_t)1;
  nc->create_r = cuemm_manager_create(NULL, &c, &nc->m);
  snprintf(nc->create_msg, sizeof nc->create_msg, "%s", cuemm_last_error());
  cuemm_manager *g = NULL;
  nc->get_r = cuemm_get(&g);
  snprintf(nc->get_msg, sizeof nc->get_msg, "%s", cuemm_last_error());
  nc->alloc_r = cuemm_mem_alloc(&nc->p, 256);
  snprintf(nc->alloc_msg, sizeof nc->alloc_msg, "%s", cuemm_last_error());
  nc->free_r = cuemm_mem_free((CUdeviceptr)0x100000);
  return NULL;
}

static void no_current_context(void)
{
  no_context nc;
  memset(&nc, 0, sizeof nc);
  pthread_t t;
  if (pthread_create(&t, NULL, without_context, &nc) != 0) {
    printf("Bail out! pthread_create failed\n");
    exit(1);
  }
  pthread_join(t, NULL);
  ok(nc.cur == NULL, "a new thread has no current context");
  is(nc.create_r, CUDA_ERROR_INVALID_CONTEXT, "cuemm_create(&m, NULL, cfg) without a context: CUDA_ERROR_INVALID_CONTEXT");
  like(nc.create_msg, "none is current", "message says no context is current");
  ok(nc.m == NULL, "*m is NULL");
  is(nc.get_r, CUDA_ERROR_INVALID_CONTEXT, "cuemm_get without a context: CUDA_ERROR_INVALID_CONTEXT");
  like(nc.get_msg, "no CUDA context is current", "with a message");
  is(nc.alloc_r, CUDA_ERROR_INVALID_CONTEXT, "cuemm_mem_alloc without a context: CUDA_ERROR_INVALID_CONTEXT");
  like(nc.alloc_msg, "no CUDA context is current", "with a message");
  is(nc.p, 0, "no pointer returned");
  is(nc.free_r, CUDA_ERROR_INVALID_CONTEXT, "cuemm_mem_free without a context: CUDA_ERROR_INVALID_CONTEXT");
}

int main(void)
{
  sim_init();
  primary = test_primary_context(0);
  simcuda_live live0;
  if (sim_present)
    sim.live_get(&live0);

  two_contexts();
  flush_elsewhere();
  one_per_context();
  registry_by_id();
  no_current_context();
  destroyed_context();

  is(current_context(), primary, "the main thread's context is still the primary context");
  sim_check_live_same(&live0);
  test_release_primary(0);
  return tap_done();
}
