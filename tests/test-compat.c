/* test-compat.c: the deprecated names (cuemm.h's last section) still link,
 * work and behave as the functions that replaced them: the same results,
 * the same errors, the arguments in their old order.
 */
#define CUEMM_NO_DEPRECATION_WARNINGS 1

#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "testutil.h"

int main(void)
{
  sim_init();
  CUcontext ctx = test_primary_context(0);
  cuemm_config c = test_config(1000, 1.0);

  /* cuemm_create(&m, ctx, cfg): cuemm_manager_create(ctx, cfg, &m) */
  cuemm_manager *m = NULL, *got = NULL;
  is(cuemm_create(NULL, ctx, &c), CUDA_ERROR_INVALID_VALUE, "cuemm_create: m NULL refused, as by the new name");
  is(cuemm_manager_create(ctx, &c, NULL), CUDA_ERROR_INVALID_VALUE, "(cuemm_manager_create: the same)");
  is(cuemm_create(&m, ctx, &c), CUDA_SUCCESS, "cuemm_create makes the context's manager");
  CHECK_CU(cuemm_get(&got));
  ok(m != NULL && got == m, "registered as cuemm_manager_create registers it");
  cuemm_manager *again = NULL;
  is(cuemm_create(&again, ctx, &c), CUDA_ERROR_ALREADY_ACQUIRED, "a second one refused, as by the new name");
  is(cuemm_manager_create(ctx, &c, &again), CUDA_ERROR_ALREADY_ACQUIRED, "(cuemm_manager_create: the same)");

  /* cuemm_alloc(m, &p, size): cuemm_allocate(m, size, &p) */
  CUdeviceptr p = 0, q = 0;
  is(cuemm_alloc(m, &p, 4096), CUDA_SUCCESS, "cuemm_alloc allocates");
  is(cuemm_allocate(m, 4096, &q), CUDA_SUCCESS, "(cuemm_allocate too)");
  ok(p != 0 && q != 0 && p != q, "two blocks");
  is(cuemm_alloc(m, &p, 0), cuemm_allocate(m, 0, &q), "size 0: the same error (%d)", (int)cuemm_alloc(m, &p, 0));
  is(cuemm_alloc(m, NULL, 8), cuemm_allocate(m, 8, NULL), "p NULL: the same error");

  /* cuemm_mem_get_address_range(m, &base, &size, p): cuemm_address_range(m, p, &base, &size) */
  CUdeviceptr b0 = 0, b1 = 1;
  size_t s0 = 0, s1 = 1;
  is(cuemm_mem_get_address_range(m, &b0, &s0, p + 100), CUDA_SUCCESS, "cuemm_mem_get_address_range of an interior pointer");
  is(cuemm_address_range(m, p + 100, &b1, &s1), CUDA_SUCCESS, "(cuemm_address_range too)");
  ok(b0 == p && b1 == p && s0 == 4096 && s1 == 4096, "the same start and size");
  is(cuemm_mem_get_address_range(m, &b0, &s0, 0), CUDA_ERROR_NOT_FOUND, "pointer 0: not found, as by the new name");

  /* cuemm_host_alloc(m, &h, size, flags): cuemm_host_allocate(m, size, flags, &h);
   * cuemm_host_get_device_pointer(m, &d, h): cuemm_host_device_pointer(m, h, &d) */
  void *h = NULL;
  is(cuemm_host_alloc(m, &h, 8192, CU_MEMHOSTALLOC_DEVICEMAP), CUDA_SUCCESS, "cuemm_host_alloc allocates");
  CUdeviceptr d0 = 0, d1 = 1;
  is(cuemm_host_get_device_pointer(m, &d0, (char *)h + 64), CUDA_SUCCESS, "cuemm_host_get_device_pointer");
  is(cuemm_host_device_pointer(m, (char *)h + 64, &d1), CUDA_SUCCESS, "(cuemm_host_device_pointer too)");
  ok(d0 != 0 && d0 == d1, "the same device address");
  is(cuemm_host_alloc(m, &h, 8, 0xdead0000u), cuemm_host_allocate(m, 8, 0xdead0000u, &h),
     "unknown flags: the same error");
  CHECK_CU(cuemm_host_free(m, h));

  /* cuemm_ipc_handle_from_bytes(&h, bytes, len): cuemm_ipc_handle_parse(bytes, len, &h);
   * cuemm_ipc_send(sock, m, h): cuemm_ipc_handle_send(m, h, sock) */
  cuemm_ipc_handle eh, h0, h1;
  CUresult er = cuemm_ipc_export(m, p, 0, &eh);
  if (er == CUDA_SUCCESS) {
    memset(&h0, 0, sizeof h0);
    memset(&h1, 1, sizeof h1);
    is(cuemm_ipc_handle_from_bytes(&h0, &eh, sizeof eh), CUDA_SUCCESS, "cuemm_ipc_handle_from_bytes takes a handle");
    is(cuemm_ipc_handle_parse(&eh, sizeof eh, &h1), CUDA_SUCCESS, "(cuemm_ipc_handle_parse too)");
    ok(memcmp(&h0, &eh, sizeof eh) == 0 && memcmp(&h1, &eh, sizeof eh) == 0, "the same handle");
    is(cuemm_ipc_handle_from_bytes(&h0, &eh, 3), CUDA_ERROR_INVALID_VALUE, "a short buffer refused");
    like(cuemm_last_error(), "128", "the message gives the handle's size");
    int sv[2];
    CHECK_CU(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0 ? CUDA_SUCCESS : CUDA_ERROR_OPERATING_SYSTEM);
    is(cuemm_ipc_send(sv[0], m, &eh), CUDA_SUCCESS, "cuemm_ipc_send sends a handle");
    memset(&h0, 0, sizeof h0);
    is(cuemm_ipc_recv(sv[1], &h0), CUDA_SUCCESS, "cuemm_ipc_recv receives it");
    ok(memcmp(&h0, &eh, sizeof eh) == 0, "the same bytes");
    is(cuemm_ipc_send(-1, m, &eh), cuemm_ipc_handle_send(m, &eh, -1), "a negative socket: the same error");
    close(sv[0]);
    close(sv[1]);
  } else {
    skip(7, "no legacy IPC here (cuemm_ipc_export: %s)", cuemm_last_error());
  }

  /* cuemm_alloc_async(m, &p, size, stream): cuemm_allocate_async(m, size, stream, &p),
   * on a manager with a pool, beside the first */
  cuemm_config pc = test_config(1000, 1.0);
  pc.pool = CUEMM_POOL_VMM;
  pc.secondary = 1;
  cuemm_manager *pm = NULL;
  CHECK_CU(cuemm_manager_create(ctx, &pc, &pm));
  CUdeviceptr a = 0, a2 = 0;
  is(cuemm_alloc_async(pm, &a, 1000, NULL), CUDA_SUCCESS, "cuemm_alloc_async allocates");
  CHECK_CU(cuemm_free_async(pm, a, NULL));
  is(cuemm_allocate_async(pm, 1000, NULL, &a2), CUDA_SUCCESS, "(cuemm_allocate_async too)");
  ok(a2 == a, "the new name gets the block the old one freed on the stream");
  is(cuemm_alloc_async(m, &a, 1000, NULL), cuemm_allocate_async(m, 1000, NULL, &a),
     "no pool: the same error (%d)", (int)CUDA_ERROR_NOT_SUPPORTED);
  CHECK_CU(cuemm_free_async(pm, a2, NULL));
  CHECK_CU(cuemm_destroy(pm));

  CHECK_CU(cuemm_free(m, p));
  CHECK_CU(cuemm_free(m, q));
  CHECK_CU(cuemm_destroy(m));
  test_release_primary(0);
  return tap_done();
}
