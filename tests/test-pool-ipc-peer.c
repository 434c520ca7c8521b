/* test-pool-ipc-peer.c: a pool block of device 0 opened by a process
 * working on device 1.
 *
 * The exporter (the TAP producer) makes a pool with IPC on device 0's
 * primary context and starts the importer (itself, `--child SOCK`), which
 * works on device 1's primary context only: its cuemm_ipc_open of the pool
 * handle maps device 0's memory for device 1 as a peer.  The importer reads
 * the exporter's pattern from the host, copies the block into memory of its
 * own device with a device-to-device copy and reads that back (device 1's
 * work on the peer memory), then writes a fill byte the exporter must see,
 * in the block and nowhere beside it.  Two blocks: one inside a chunk and
 * one spanning two growth steps.  On simcuda (two simulated devices) it runs
 * in CI; on the system driver it needs two devices that are peers
 * (make check CUEMM_TEST_DRIVER=system on a two-GPU machine) and skips with
 * the reason otherwise.
 */
#include <errno.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testproc.h"
#include "testutil.h"

#define MiB ((size_t)1 << 20)
#define PER_BLOCK 12
#define PLAN (2 * PER_BLOCK + 3)

typedef struct request {
  int32_t op; /* 1: open, check and write; 0: exit */
  uint8_t fill;
  uint8_t pad[3];
} request;

typedef struct reply {
  int32_t r[8];
  int64_t v[8];
  char msg[512];
} reply;

static int sock = -1;

static uint8_t pattern(size_t i)
{
  return (uint8_t)(i * 11 + 1);
}

static size_t count_pattern_misses(const unsigned char *b, size_t n)
{
  size_t bad = 0;
  for (size_t i = 0; i < n; i++)
    bad += b[i] != pattern(i);
  return bad;
}

/* ---- the importer, on device 1 -------------------------------------------- */

static void child_use(const request *q, reply *a)
{
  cuemm_ipc_handle h;
  CUdeviceptr p = 0, local = 0;
  unsigned long peer0 = sim_calls("cuDeviceCanAccessPeer");
  a->r[0] = cuemm_ipc_recv(sock, &h);
  if (a->r[0] != CUDA_SUCCESS) {
    snprintf(a->msg, sizeof a->msg, "%s", cuemm_last_error());
    return;
  }
  a->r[1] = cuemm_ipc_open(NULL, &h, &p);
  a->v[5] = (int64_t)(sim_calls("cuDeviceCanAccessPeer") - peer0);
  if (a->r[1] != CUDA_SUCCESS) {
    snprintf(a->msg, sizeof a->msg, "%s", cuemm_last_error());
    cuemm_ipc_discard(&h);
    return;
  }
  CUdevice dev = -1;
  CHECK_CU(cuCtxGetDevice(&dev));
  a->v[1] = dev;
  CUmemLocation loc = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev };
  unsigned long long flags = 0;
  a->r[2] = cuMemGetAccess(&flags, &loc, p);
  a->v[2] = (int64_t)flags;
  unsigned char *buf = malloc(h.size);
  CHECK_CU(cuMemcpyDtoH(buf, p, h.size));
  a->v[0] = (int64_t)count_pattern_misses(buf, h.size);
  /* Device 1's own memory, from its manager, filled from the peer block. */
  cuemm_manager *m;
  CHECK_CU(cuemm_get(&m));
  a->r[3] = cuemm_allocate(m, h.size, &local);
  if (a->r[3] == CUDA_SUCCESS) {
    memset(buf, 0, h.size);
    CHECK_CU(cuMemsetD8(local, 0, h.size));
    a->r[4] = cuMemcpyDtoD(local, p, h.size);
    CHECK_CU(cuCtxSynchronize());
    CHECK_CU(cuMemcpyDtoH(buf, local, h.size));
    a->v[3] = (int64_t)count_pattern_misses(buf, h.size);
    CHECK_CU(cuemm_free(m, local));
  }
  free(buf);
  a->r[5] = cuMemsetD8(p, q->fill, h.size);
  a->r[6] = cuCtxSynchronize();
  a->r[7] = cuemm_ipc_close(NULL, p);
  snprintf(a->msg, sizeof a->msg, "%s", cuemm_last_error());
}

static int child(void)
{
  sim_init();
  test_primary_context(1);
  request q;
  while (read_full(sock, &q, sizeof q) == 0 && q.op != 0) {
    reply a;
    memset(&a, 0, sizeof a);
    child_use(&q, &a);
    if (write_full(sock, &a, sizeof a) != 0)
      return 2;
  }
  cuemm_manager *m;
  if (cuemm_get(&m) == CUDA_SUCCESS)
    cuemm_destroy(m);
  if (sim_present && sim.live_get) {
    simcuda_live l;
    sim.live_get(&l);
    if (l.vmm_handles + l.vmm_reservations + l.vmm_mappings != 0)
      return 3;
  }
  return 0;
}

/* ---- the exporter, on device 0 -------------------------------------------- */

static size_t count_not(CUdeviceptr p, size_t n, uint8_t want)
{
  unsigned char *host = malloc(n);
  CHECK_CU(cuMemcpyDtoH(host, p, n));
  size_t bad = 0;
  for (size_t i = 0; i < n; i++)
    bad += host[i] != want;
  free(host);
  return bad;
}

int main(int argc, char **argv)
{
  if (argc == 3 && strcmp(argv[1], "--child") == 0) {
    sock = atoi(argv[2]);
    return child();
  }
  sim_init();
  CHECK_CU(cuInit(0));
  int ndev = 0;
  CHECK_CU(cuDeviceGetCount(&ndev));
  if (ndev < 2) {
    tap_skip_all("needs two devices (this driver shows %d): a pool block of device 0 is opened by a process on "
                 "device 1", ndev);
    return 0;
  }
  CUdevice d0, d1;
  CHECK_CU(cuDeviceGet(&d0, 0));
  CHECK_CU(cuDeviceGet(&d1, 1));
  int can = 0;
  CHECK_CU(cuDeviceCanAccessPeer(&can, d1, d0));
  if (!can) {
    tap_skip_all("device 1 cannot access device 0 as a peer (cuDeviceCanAccessPeer), which opening device 0's "
                 "memory there needs");
    return 0;
  }
  tap_plan(PLAN);
  test_primary_context(0);

  cuemm_config c = test_config(1000, 1.0);
  c.pool = CUEMM_POOL_VMM;
  c.pool_chunk = 2 * MiB;
  c.pool_reserve = 256 * MiB;
  c.pool_release_threshold = (size_t)1 << 30;
  c.pool_ipc = 1;
  cuemm_manager *m;
  CUresult cr = cuemm_manager_create(NULL, &c, &m);
  if (cr == CUDA_ERROR_NOT_SUPPORTED) {
    printf("Bail out! device 0 cannot make exportable pool memory: %s\n", cuemm_last_error());
    return 1;
  }
  CHECK_CU(cr);
  CUdeviceptr before, mid, after, big;
  CHECK_CU(cuemm_allocate(m, 64 * 1024, &before));
  CHECK_CU(cuemm_allocate(m, 256 * 1024, &mid));
  CHECK_CU(cuemm_allocate(m, 64 * 1024, &after));
  CHECK_CU(cuemm_allocate(m, 3 * MiB, &big)); /* past the first 2 MiB chunk: a second growth */

  int sp[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp) != 0) {
    printf("Bail out! socketpair: %s\n", strerror(errno));
    return 1;
  }
  pid_t pid = spawn_self(argv[0], &sp[1], 1, &sp[0], 1);
  close(sp[1]);
  sock = sp[0];

  struct { const char *name; CUdeviceptr p; size_t n; uint8_t fill; } uses[2] = {
    { "block inside a chunk", mid, 256 * 1024, 0xC3 }, { "block over two chunks", big, 3 * MiB, 0x3C } };
  for (int i = 0; i < 2; i++) {
    size_t n = uses[i].n;
    CHECK_CU(cuMemsetD8(before, 0x77, 64 * 1024));
    CHECK_CU(cuMemsetD8(after, 0x77, 64 * 1024));
    unsigned char *host = malloc(n);
    for (size_t k = 0; k < n; k++)
      host[k] = pattern(k);
    CHECK_CU(cuMemcpyHtoD(uses[i].p, host, n));
    free(host);
    cuemm_ipc_handle h;
    CHECK_CU(cuemm_ipc_export(m, uses[i].p, 0, &h));
    request q = { .op = 1, .fill = uses[i].fill };
    if (write_full(sock, &q, sizeof q) != 0 || cuemm_ipc_handle_send(m, &h, sock) != CUDA_SUCCESS) {
      printf("Bail out! could not send to the importer: %s\n", cuemm_last_error());
      return 1;
    }
    reply a;
    if (read_full(sock, &a, sizeof a) != 0) {
      printf("Bail out! the importer stopped answering\n");
      return 1;
    }
    const char *nm = uses[i].name;
    is(a.r[0], CUDA_SUCCESS, "%s: the process on device 1 receives the handle", nm);
    is(a.r[1], CUDA_SUCCESS, "%s: and opens device 0's pool memory", nm);
    if (a.r[1] != CUDA_SUCCESS)
      tap_diag("%s", a.msg);
    is(a.v[1], 1, "%s: working on device 1", nm);
    ok(a.r[2] == CUDA_SUCCESS && a.v[2] == CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
       "%s: device 1 may read and write the mapping (cuMemGetAccess %d, flags %lld)", nm, a.r[2], (long long)a.v[2]);
    is(a.v[0], 0, "%s: the importer reads the exporter's %zu bytes", nm, n);
    ok(a.r[3] == CUDA_SUCCESS && a.r[4] == CUDA_SUCCESS, "%s: device 1 copies the block into its own memory", nm);
    is(a.v[3], 0, "%s: and the copy holds the exporter's bytes", nm);
    is(a.r[5], CUDA_SUCCESS, "%s: device 1 writes the block", nm);
    is(a.r[7], CUDA_SUCCESS, "%s: the importer closes", nm);
    is(count_not(uses[i].p, n, uses[i].fill), 0, "%s: device 0 sees the importer's bytes", nm);
    is(count_not(before, 64 * 1024, 0x77) + count_not(after, 64 * 1024, 0x77), 0,
       "%s: and the blocks beside it are untouched", nm);
    if (sim_present)
      is(a.v[5], 1, "%s: the open asked cuDeviceCanAccessPeer once", nm);
    else
      skip(1, SIM_REASON);
  }

  request bye = { .op = 0 };
  write_full(sock, &bye, sizeof bye);
  int status = 0;
  waitpid(pid, &status, 0);
  is(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), 0,
     "the importer exits 0, its mappings of device 0's memory all gone");
  close(sock);

  cuemm_pool_stats ps;
  CHECK_CU(cuemm_pool_get_stats(m, &ps));
  is(ps.grow_steps, 2, "the exporter's pool grew twice (the large block spans both chunks)");
  CHECK_CU(cuemm_free(m, before));
  CHECK_CU(cuemm_free(m, mid));
  CHECK_CU(cuemm_free(m, after));
  CHECK_CU(cuemm_free(m, big));
  CHECK_CU(cuemm_destroy(m));
  if (sim_present) {
    simcuda_live l;
    sim.live_get(&l);
    is(l.vmm_handles + l.vmm_reservations + l.vmm_mappings, 0, "no VMM object left in the exporter");
  } else {
    skip(1, SIM_REASON);
  }
  test_release_primary(0);
  return tap_done();
}
