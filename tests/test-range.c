/* test-range.c: cuemm_address_range, the start and size of the
 * allocation that holds a device pointer, for cuMemAlloc memory and pool
 * blocks: exact starts, interior pointers, the last byte, one past the end,
 * freed memory (pending and released), foreign and host memory, NULL outs,
 * m NULL, and a cuMemsetD8 over the answer that touches nothing else --
 * where the driver's cuMemGetAddressRange on a pool block answers with the
 * whole mapping.
 */
#include <stdint.h>
#include <string.h>

#include "testutil.h"

#define MiB ((size_t)1 << 20)
#define SENT ((CUdeviceptr)0x5e5e)

/* The range of p through cuemm: result, and base/size (SENT when not written). */
static CUresult range(cuemm_manager *m, CUdeviceptr p, CUdeviceptr *base, size_t *size)
{
  *base = SENT;
  *size = (size_t)SENT;
  return cuemm_address_range(m, p, base, size);
}

static void refused(cuemm_manager *m, CUdeviceptr p, const char *why, const char *what)
{
  CUdeviceptr b;
  size_t n;
  CUresult r = range(m, p, &b, &n);
  is(r, CUDA_ERROR_NOT_FOUND, "%s: CUDA_ERROR_NOT_FOUND", what);
  ok(b == SENT && n == (size_t)SENT, "%s: the outs are untouched", what);
  like(cuemm_last_error(), why, "%s: the message says so", what);
}

static void found(cuemm_manager *m, CUdeviceptr p, CUdeviceptr want_base, size_t want_size, const char *what)
{
  CUdeviceptr b;
  size_t n;
  CUresult r = range(m, p, &b, &n);
  ok(r == CUDA_SUCCESS && b == want_base && n == want_size,
     "%s: base 0x%llx size %zu (want 0x%llx, %zu; result %d)", what, (unsigned long long)b, n,
     (unsigned long long)want_base, want_size, (int)r);
}

static void common(cuemm_manager *m, const char *kind, const char *released)
{
  char what[128];
  CUdeviceptr p;
  CHECK_CU(cuemm_allocate(m, 1000, &p));
  snprintf(what, sizeof what, "%s: exact start", kind);
  found(m, p, p, 1000, what);
  snprintf(what, sizeof what, "%s: interior", kind);
  found(m, p + 333, p, 1000, what);
  snprintf(what, sizeof what, "%s: last byte", kind);
  found(m, p + 999, p, 1000, what);
  snprintf(what, sizeof what, "%s: one past the end", kind);
  refused(m, p + 1000, released, what);

  CUdeviceptr b = SENT;
  size_t n = (size_t)SENT;
  ok(cuemm_address_range(m, p + 1, NULL, NULL) == CUDA_SUCCESS, "%s: both outs NULL", kind);
  ok(cuemm_address_range(m, p + 2, &b, NULL) == CUDA_SUCCESS && b == p, "%s: size NULL, base given", kind);
  ok(cuemm_address_range(m, p + 3, NULL, &n) == CUDA_SUCCESS && n == 1000, "%s: base NULL, size given",
     kind);
  snprintf(what, sizeof what, "%s: the pointer 0", kind);
  refused(m, 0, "the pointer is 0", what);

  /* m NULL: the current context's manager, which m is. */
  b = SENT;
  ok(cuemm_address_range(NULL, p + 10, &b, &n) == CUDA_SUCCESS && b == p && n == 1000,
     "%s: m NULL finds the current context's manager", kind);

  /* Host memory of the same manager. */
  void *h;
  CHECK_CU(cuemm_host_allocate(m, 4096, 0, &h));
  snprintf(what, sizeof what, "%s: cuemm_host_alloc memory", kind);
  refused(m, (CUdeviceptr)(uintptr_t)h + 8, "pinned host memory of this manager", what);
  CHECK_CU(cuemm_host_free(m, h));
  static char stack_like[64];
  snprintf(what, sizeof what, "%s: plain host memory", kind);
  refused(m, (CUdeviceptr)(uintptr_t)stack_like, "not inside any live device allocation", what);

  /* Foreign: cuMemAlloc directly. */
  CUdeviceptr f;
  CHECK_CU(cuMemAlloc(&f, 4096));
  snprintf(what, sizeof what, "%s: cuMemAlloc memory not from cuemm", kind);
  refused(m, f + 16, "not inside any live device allocation", what);
  CHECK_CU(cuMemFree(f));

  /* The extent is good for a memset. */
  CHECK_CU(cuemm_address_range(m, p + 500, &b, &n));
  is(cuMemsetD8(b, 0x5a, n), CUDA_SUCCESS, "%s: cuMemsetD8 over the answer succeeds", kind);
  unsigned char back[1000];
  CHECK_CU(cuMemcpyDtoH(back, p, sizeof back));
  int all = 1;
  for (size_t i = 0; i < sizeof back; i++)
    all &= back[i] == 0x5a;
  ok(all, "%s: and wrote all 1000 bytes", kind);

  /* Freed: pending, then released. */
  CHECK_CU(cuemm_defer_cleanup_begin(m));
  CHECK_CU(cuemm_free(m, p));
  snprintf(what, sizeof what, "%s: freed, pending", kind);
  refused(m, p + 4, "waits in the pending queue", what);
  CHECK_CU(cuemm_defer_cleanup_end(m));
  CHECK_CU(cuemm_flush(m));
  snprintf(what, sizeof what, "%s: freed and released", kind);
  refused(m, p + 4, released, what);
}

static void without_pool(void)
{
  cuemm_config c = test_config(10, 0.2);
  cuemm_manager *m = NULL;
  CHECK_CU(cuemm_manager_create(NULL, &c, &m));
  common(m, "no pool", "not inside any live device allocation");
  /* Another manager's memory. */
  CUcontext other;
  CUdevice dev;
  CHECK_CU(cuCtxGetDevice(&dev));
  CHECK_CU(cuCtxCreate(&other, NULL, 0, dev));
  CHECK_CU(cuCtxPopCurrent(NULL));
  cuemm_manager *m2 = NULL;
  CHECK_CU(cuemm_manager_create(other, &c, &m2));
  CUdeviceptr q;
  CHECK_CU(cuemm_allocate(m2, 2048, &q));
  refused(m, q + 100, "not inside any live device allocation", "no pool: another manager's memory");
  found(m2, q + 100, q, 2048, "no pool: the same pointer on its own manager");
  CHECK_CU(cuemm_free(m2, q));
  CHECK_CU(cuemm_destroy(m2));
  CHECK_CU(cuCtxDestroy(other));
  CHECK_CU(cuemm_destroy(m));
}

static void with_pool(void)
{
  cuemm_config c = test_config(10, 0.2);
  c.pool = CUEMM_POOL_VMM;
  c.pool_chunk = 4 * MiB;
  c.pool_reserve = 64 * MiB;
  c.pool_limit = 16 * MiB;
  cuemm_manager *m = NULL;
  CHECK_CU(cuemm_manager_create(NULL, &c, &m));
  common(m, "pool", "in no live block");

  /* Three neighbours: the middle one's answer is itself, the driver's is
   * the whole mapping. */
  CUdeviceptr a, b, d;
  CHECK_CU(cuemm_allocate(m, 4096, &a));
  CHECK_CU(cuemm_allocate(m, 5000, &b));
  CHECK_CU(cuemm_allocate(m, 4096, &d));
  cuemm_pool_stats ps;
  CHECK_CU(cuemm_pool_get_stats(m, &ps));
  ok(b > a && b < ps.base + ps.reserved_bytes && d > b, "three pool blocks in a row");
  found(m, b, b, 5000, "pool: the middle block's start");
  found(m, b + 4999, b, 5000, "pool: its last byte");
  refused(m, b + 5000, "in no live block", "pool: one past its end (inside its 256-byte rounding)");
  CUdeviceptr db = 0;
  size_t dn = 0;
  CHECK_CU(cuMemGetAddressRange(&db, &dn, b + 10));
  ok(db <= a && db + dn >= d + 4096 && dn > 5000,
     "the driver's cuMemGetAddressRange answers with the mapping (0x%llx, %zu bytes), not the block",
     (unsigned long long)db, dn);

  unsigned char pat[4096], back[4096];
  memset(pat, 0x11, sizeof pat);
  CHECK_CU(cuMemcpyHtoD(a, pat, sizeof pat));
  CHECK_CU(cuMemcpyHtoD(d, pat, sizeof pat));
  CUdeviceptr base;
  size_t n;
  CHECK_CU(cuemm_address_range(m, b + 1234, &base, &n));
  is(cuMemsetD8(base, 0xab, n), CUDA_SUCCESS, "pool: cuMemsetD8 over cuemm's answer succeeds");
  CHECK_CU(cuMemcpyDtoH(back, a, sizeof back));
  ok(memcmp(back, pat, sizeof pat) == 0, "pool: the block before is intact");
  CHECK_CU(cuMemcpyDtoH(back, d, sizeof back));
  ok(memcmp(back, pat, sizeof pat) == 0, "pool: the block after is intact");

  /* Pending and released pool blocks. */
  CHECK_CU(cuemm_defer_cleanup_begin(m));
  CHECK_CU(cuemm_free(m, b));
  refused(m, b, "waits in the pending queue", "pool: a freed block, pending");
  refused(m, b + 100, "waits in the pending queue", "pool: inside a freed block, pending");
  CHECK_CU(cuemm_defer_cleanup_end(m));
  CHECK_CU(cuemm_flush(m));
  refused(m, b, "in no live block", "pool: a freed block, released");
  found(m, a + 4095, a, 4096, "pool: its neighbour still answers");

  /* Too large for the pool: cuMemAlloc behind it. */
  CUdeviceptr big;
  CHECK_CU(cuemm_allocate(m, 20 * MiB, &big));
  ok(!(big >= ps.base && big < ps.base + ps.reserved_bytes), "20 MiB comes from cuMemAlloc, past the limit");
  found(m, big + 10 * MiB, big, 20 * MiB, "pool manager: a cuMemAlloc fallback, interior");
  CHECK_CU(cuemm_free(m, big));
  CHECK_CU(cuemm_free(m, a));
  CHECK_CU(cuemm_free(m, d));
  CHECK_CU(cuemm_destroy(m));
}

static void no_context(void)
{
  CUcontext cur;
  CHECK_CU(cuCtxGetCurrent(&cur));
  CHECK_CU(cuCtxSetCurrent(NULL));
  CUdeviceptr b = SENT;
  CUresult r = cuemm_address_range(NULL, 0x1000, &b, NULL);
  is(r, CUDA_ERROR_INVALID_CONTEXT, "m NULL and no current context: cuemm_get's error");
  ok(b == SENT && cuemm_last_error()[0] != '\0', "with a message, nothing written");
  CHECK_CU(cuCtxSetCurrent(cur));
}

int main(void)
{
  sim_init();
  test_primary_context(0);
  size_t live0 = sim_live_baseline();
  without_pool();
  with_pool();
  no_context();
  sim_check_nothing_left(live0);
  test_release_primary(0);
  return tap_done();
}
