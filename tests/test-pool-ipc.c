/* test-pool-ipc.c: sharing pool blocks between two real processes.
 *
 * The exporter (the TAP producer) creates a pool with IPC enabled, starts
 * the importer with fork and exec of itself (`--child SOCK`) over a Unix
 * socket pair made before the fork, and sends it requests as plain bytes
 * followed, when the request needs one, by a handle with cuemm_ipc_handle_send (its
 * chunks' file descriptors ride as SCM_RIGHTS).  The importer answers each
 * request with a fixed-size reply and the exporter turns replies into
 * checks.  Data goes both ways: the exporter writes a pattern the importer
 * reads, the importer writes a fill byte the exporter must see.
 *
 * Covered: export refused without pool IPC; the pool handle's fields; a
 * block in the middle of a chunk, a block spanning two growth steps and an
 * interior slice across the chunk boundary; opening twice; an open without
 * received descriptors; a range over more chunks than a handle holds;
 * send and receive errors in one process (garbage, truncated, descriptors
 * missing or unexpected, a freed block), with the process's descriptors
 * counted; device handles through the same calls; and, on simcuda, every
 * driver call of the import failing in turn without leaks.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testproc.h"
#include "testutil.h"

#define MiB ((size_t)1 << 20)
#define PLAN 156

enum op { OP_EXIT, OP_USE, OP_TWICE, OP_NOFD, OP_FAIL };

typedef struct request {
  int32_t op;
  uint8_t fill;
  uint8_t pad[3];
  unsigned char handle[CUEMM_IPC_HANDLE_SIZE]; /* OP_NOFD: the handle as bytes */
} request;

typedef struct reply {
  int32_t r[16];
  int64_t v[16];
  char msg[512];
} reply;

static uint8_t pattern(size_t i)
{
  return (uint8_t)(i * 13 + 5);
}

/* Open descriptors of this process. */
static long count_fds(void)
{
  DIR *d = opendir("/proc/self/fd");
  if (!d)
    return -1;
  long n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    n += e->d_name[0] != '.';
  closedir(d);
  return n - 1; /* the directory's own */
}

/* The simulated driver's VMM objects (handles + reservations + mappings);
 * -1 on the system driver. */
static long sim_vmm_live(void)
{
  if (!sim_present || !sim.live_get)
    return -1;
  simcuda_live l;
  sim.live_get(&l);
  return (long)(l.vmm_handles + l.vmm_reservations + l.vmm_mappings);
}

/* ---- the importer ------------------------------------------------------------ */

static int sock = -1;

static void child_use(const request *q, reply *a)
{
  long fds0 = count_fds(), live0 = sim_vmm_live();
  cuemm_ipc_handle h;
  CUdeviceptr p = 0;
  a->r[0] = cuemm_ipc_recv(sock, &h);
  if (a->r[0] != CUDA_SUCCESS) {
    snprintf(a->msg, sizeof a->msg, "%s", cuemm_last_error());
    return;
  }
  a->v[3] = count_fds() - fds0;
  a->r[1] = cuemm_ipc_open(NULL, &h, &p);
  if (a->r[1] != CUDA_SUCCESS) {
    snprintf(a->msg, sizeof a->msg, "%s", cuemm_last_error());
    cuemm_ipc_discard(&h);
    return;
  }
  a->v[4] = count_fds() - fds0;
  unsigned char *buf = malloc(h.size);
  CHECK_CU(cuMemcpyDtoH(buf, p, h.size));
  for (size_t i = 0; i < h.size; i++)
    a->v[0] += buf[i] != pattern(i);
  free(buf);
  a->r[2] = cuMemsetD8(p, q->fill, h.size);
  a->r[3] = cuCtxSynchronize();
  a->r[4] = cuemm_ipc_close(NULL, p);
  a->v[1] = sim_vmm_live() - live0;
  a->r[5] = cuemm_ipc_close(NULL, p);
  a->v[2] = count_fds() - fds0;
  snprintf(a->msg, sizeof a->msg, "%s", cuemm_last_error());
}

static void child_twice(reply *a)
{
  long fds0 = count_fds(), live0 = sim_vmm_live();
  unsigned long imports0 = sim_calls("cuMemImportFromShareableHandle"), reserves0 = sim_calls("cuMemAddressReserve");
  cuemm_ipc_handle h;
  CUdeviceptr p1 = 0, p2 = 0;
  a->r[0] = cuemm_ipc_recv(sock, &h);
  a->r[1] = cuemm_ipc_open(NULL, &h, &p1);
  a->r[2] = cuemm_ipc_open(NULL, &h, &p2);
  a->v[0] = p1 == p2 && p1 != 0;
  a->v[1] = (int64_t)(sim_calls("cuMemImportFromShareableHandle") - imports0);
  a->v[2] = (int64_t)(sim_calls("cuMemAddressReserve") - reserves0);
  a->r[3] = cuemm_ipc_close(NULL, p1);
  a->v[3] = sim_vmm_live() - live0;
  a->r[4] = cuemm_ipc_close(NULL, p2);
  a->v[4] = sim_vmm_live() - live0;
  a->r[5] = cuemm_ipc_close(NULL, p2);
  a->v[5] = count_fds() - fds0;
  a->r[6] = cuemm_ipc_discard(&h);
}

static void child_nofd(const request *q, reply *a)
{
  cuemm_ipc_handle h;
  CUdeviceptr p = 0;
  a->r[0] = cuemm_ipc_handle_parse(q->handle, sizeof q->handle, &h);
  a->r[1] = cuemm_ipc_open(NULL, &h, &p);
  a->v[0] = (int64_t)p;
  snprintf(a->msg, sizeof a->msg, "%s", cuemm_last_error());
}

/* Each driver call of the import fails in turn; nothing may leak, and the
 * descriptors stay for the next try. */
static const struct { const char *entry; unsigned nth; } failing[] = {
  { "cuMemImportFromShareableHandle", 1 }, { "cuMemImportFromShareableHandle", 2 },
  { "cuMemAddressReserve", 1 }, { "cuMemMap", 1 }, { "cuMemMap", 2 }, { "cuMemSetAccess", 1 },
};
#define NFAILING ((int)(sizeof failing / sizeof failing[0]))

static void child_fail(reply *a)
{
  long fds0 = count_fds(), live0 = sim_vmm_live();
  cuemm_ipc_handle h;
  CHECK_CU(cuemm_ipc_recv(sock, &h));
  long fds1 = count_fds();
  a->v[15] = fds1 - fds0;
  for (int i = 0; i < NFAILING; i++) {
    CUdeviceptr p = 0;
    sim.fail(failing[i].entry, failing[i].nth, CUDA_ERROR_OUT_OF_MEMORY);
    a->r[i] = cuemm_ipc_open(NULL, &h, &p);
    sim.fail_clear();
    a->v[i] = (sim_vmm_live() == live0) + 2 * (count_fds() == fds1) + 4 * (p == 0);
    if (i == 0)
      snprintf(a->msg, sizeof a->msg, "%s", cuemm_last_error());
  }
  CUdeviceptr p = 0;
  a->r[NFAILING] = cuemm_ipc_open(NULL, &h, &p);
  a->r[NFAILING + 1] = cuemm_ipc_close(NULL, p);
  a->v[NFAILING] = (sim_vmm_live() == live0) + 2 * (count_fds() == fds0);
}

static int child(void)
{
  sim_init();
  test_primary_context(0);
  request q;
  while (read_full(sock, &q, sizeof q) == 0 && q.op != OP_EXIT) {
    reply a;
    memset(&a, 0, sizeof a);
    if (q.op == OP_USE)
      child_use(&q, &a);
    else if (q.op == OP_TWICE)
      child_twice(&a);
    else if (q.op == OP_NOFD)
      child_nofd(&q, &a);
    else if (q.op == OP_FAIL)
      child_fail(&a);
    if (write_full(sock, &a, sizeof a) != 0)
      return 2;
  }
  cuemm_manager *m;
  if (cuemm_get(&m) == CUDA_SUCCESS)
    cuemm_destroy(m);
  return sim_present && sim_vmm_live() != 0 ? 3 : 0;
}

/* ---- the exporter ------------------------------------------------------------ */

static pid_t child_pid;

static void start_child(const char *argv0)
{
  int sp[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp) != 0) {
    printf("Bail out! socketpair: %s\n", strerror(errno));
    exit(1);
  }
  child_pid = spawn_self(argv0, &sp[1], 1, &sp[0], 1);
  close(sp[1]);
  sock = sp[0];
}

/* Sends a request, then the handle with cuemm_ipc_handle_send when one is given. */
static reply ask(cuemm_manager *m, int op, uint8_t fill, const cuemm_ipc_handle *send, const cuemm_ipc_handle *bytes)
{
  request q;
  memset(&q, 0, sizeof q);
  q.op = op;
  q.fill = fill;
  if (bytes)
    memcpy(q.handle, bytes, sizeof *bytes);
  reply a;
  if (write_full(sock, &q, sizeof q) != 0) {
    printf("Bail out! the importing process stopped listening\n");
    exit(1);
  }
  if (send && cuemm_ipc_handle_send(m, send, sock) != CUDA_SUCCESS) {
    printf("Bail out! cuemm_ipc_send: %s\n", cuemm_last_error());
    exit(1);
  }
  if (read_full(sock, &a, sizeof a) != 0) {
    printf("Bail out! the importing process stopped answering\n");
    exit(1);
  }
  return a;
}

static cuemm_manager *make_pool(int ipc)
{
  cuemm_config c = test_config(1000, 1.0);
  c.pool = CUEMM_POOL_VMM;
  c.pool_chunk = 2 * MiB;
  c.pool_reserve = 256 * MiB;
  c.pool_release_threshold = (size_t)1 << 30;
  c.pool_ipc = ipc;
  cuemm_manager *m;
  CHECK_CU(cuemm_manager_create(NULL, &c, &m));
  return m;
}

static void fill_pattern(CUdeviceptr p, size_t n)
{
  unsigned char *host = malloc(n);
  for (size_t i = 0; i < n; i++)
    host[i] = pattern(i);
  CHECK_CU(cuMemcpyHtoD(p, host, n));
  free(host);
}

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

static void without_ipc(void)
{
  cuemm_manager *m = make_pool(0);
  CUdeviceptr p;
  CHECK_CU(cuemm_allocate(m, 4096, &p));
  cuemm_ipc_handle h;
  is(cuemm_ipc_export(m, p, 0, &h), CUDA_ERROR_NOT_SUPPORTED, "without pool IPC, exporting a pool block is refused");
  like(cuemm_last_error(), "enable pool IPC with CUEMM_POOL_IPC=1 (or cuemm_config.pool_ipc = 1)",
       "the message says how to enable it");
  CHECK_CU(cuemm_free(m, p));
  CHECK_CU(cuemm_destroy(m));
}

static void bad_pieces(const cuemm_ipc_handle *good)
{
  cuemm_ipc_handle out, b;
  b = *good;
  b.pieces.count = 0;
  reseal(&b);
  is(cuemm_ipc_handle_parse(&b, sizeof b, &out), CUDA_ERROR_INVALID_VALUE, "pool handle: 0 chunks refused");
  b = *good;
  b.pieces.count = 7;
  reseal(&b);
  is(cuemm_ipc_handle_parse(&b, sizeof b, &out), CUDA_ERROR_INVALID_VALUE, "pool handle: 7 chunks refused");
  like(cuemm_last_error(), "a handle holds 1 to 6", "message gives the range");
  b = *good;
  b.pieces.bytes[0] += 2 * MiB;
  reseal(&b);
  is(cuemm_ipc_handle_parse(&b, sizeof b, &out), CUDA_ERROR_INVALID_VALUE, "pool handle: sizes not adding up");
  like(cuemm_last_error(), "the chunks add up to", "message says so");
  b = *good;
  b.pieces.bytes[5] = 1;
  reseal(&b);
  is(cuemm_ipc_handle_parse(&b, sizeof b, &out), CUDA_ERROR_INVALID_VALUE, "pool handle: a size past the count");
  b = *good;
  b.pieces.reserved = 1;
  reseal(&b);
  is(cuemm_ipc_handle_parse(&b, sizeof b, &out), CUDA_ERROR_INVALID_VALUE, "pool handle: reserved word set");
  b = *good; /* two chunks; a range wholly in the second */
  b.offset = b.pieces.bytes[0];
  b.size = 1;
  reseal(&b);
  is(cuemm_ipc_handle_parse(&b, sizeof b, &out), CUDA_ERROR_INVALID_VALUE,
     "pool handle: a range not starting in the first chunk");
  b = *good;
  b.offset = 0;
  b.size = 1;
  reseal(&b);
  is(cuemm_ipc_handle_parse(&b, sizeof b, &out), CUDA_ERROR_INVALID_VALUE,
     "pool handle: a range not ending in the last chunk");
  like(cuemm_last_error(), "start in the first chunk and end in the last", "message says so");
}

/* Raw sendmsg of `len` bytes with `nfd` descriptors. */
static void raw_send(int s, const void *bytes, size_t len, const int *fds, int nfd)
{
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int) * 8)];
  } ctl;
  memset(&ctl, 0, sizeof ctl);
  struct iovec iov = { (void *)bytes, len };
  struct msghdr msg;
  memset(&msg, 0, sizeof msg);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (nfd) {
    msg.msg_control = ctl.buf;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfd);
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfd);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfd);
  }
  if (sendmsg(s, &msg, 0) != (ssize_t)len) {
    printf("Bail out! sendmsg: %s\n", strerror(errno));
    exit(1);
  }
}

static void local_pair(int sp[2])
{
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0) {
    printf("Bail out! socketpair: %s\n", strerror(errno));
    exit(1);
  }
}

/* Sending and receiving within this process: what arrives, what is
 * refused, and that no descriptor is left behind. */
static void one_process(cuemm_manager *m, const cuemm_ipc_handle *good, CUdeviceptr device_buf)
{
  int sp[2];
  local_pair(sp);
  cuemm_ipc_handle got, b;
  long fds0 = count_fds();
  is(cuemm_ipc_handle_send(m, good, -1), CUDA_ERROR_INVALID_VALUE, "send: a negative socket refused");
  is(cuemm_ipc_handle_send(m, NULL, sp[0]), CUDA_ERROR_INVALID_VALUE, "send: NULL handle refused");
  b = *good;
  b.size ^= 4;
  is(cuemm_ipc_handle_send(m, &b, sp[0]), CUDA_ERROR_INVALID_VALUE, "send: a damaged handle refused");
  is(cuemm_ipc_recv(-1, &got), CUDA_ERROR_INVALID_VALUE, "recv: a negative socket refused");
  is(cuemm_ipc_recv(sp[1], NULL), CUDA_ERROR_INVALID_VALUE, "recv: NULL handle refused");

  is(cuemm_ipc_handle_send(m, good, sp[0]), CUDA_SUCCESS, "send within the process");
  is(count_fds(), fds0, "send leaves no descriptor open here");
  is(cuemm_ipc_recv(sp[1], &got), CUDA_SUCCESS, "recv within the process");
  ok(memcmp(&got, good, sizeof got) == 0, "the handle arrives byte for byte");
  is(count_fds() - fds0, good->pieces.count, "recv keeps one descriptor per chunk");
  CUdeviceptr p = 0;
  is(cuemm_ipc_open(m, &got, &p), CUDA_ERROR_INVALID_CONTEXT, "open in the exporting process refused");
  is(cuemm_ipc_discard(&got), CUDA_SUCCESS, "discard closes the descriptors");
  is(count_fds(), fds0, "and none stays open");
  is(cuemm_ipc_discard(&got), CUDA_ERROR_INVALID_VALUE, "a second discard refused");

  /* Garbage with a descriptor attached. */
  unsigned char garbage[CUEMM_IPC_HANDLE_SIZE];
  for (size_t i = 0; i < sizeof garbage; i++)
    garbage[i] = (unsigned char)(i * 31 + 7);
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  long fds1 = count_fds();
  raw_send(sp[0], garbage, sizeof garbage, &devnull, 1);
  memset(&got, 0x5a, sizeof got);
  b = got;
  is(cuemm_ipc_recv(sp[1], &got), CUDA_ERROR_INVALID_VALUE, "recv: garbage refused");
  like(cuemm_last_error(), "not a cuemm IPC handle", "message says it is not a handle");
  is(count_fds(), fds1, "recv: the garbage's descriptor is closed");
  ok(memcmp(&got, &b, sizeof got) == 0, "recv: the handle untouched");

  /* A pool handle without its descriptors, and with one too many. */
  raw_send(sp[0], good, sizeof *good, NULL, 0);
  is(cuemm_ipc_recv(sp[1], &got), CUDA_ERROR_INVALID_VALUE, "recv: a pool handle without descriptors refused");
  like(cuemm_last_error(), "came with 0 file descriptors", "message counts them");
  int three[3] = { devnull, devnull, devnull };
  raw_send(sp[0], good, sizeof *good, three, 3);
  is(cuemm_ipc_recv(sp[1], &got), CUDA_ERROR_INVALID_VALUE, "recv: a pool handle with 3 descriptors for 2 refused");
  is(count_fds(), fds1, "recv: they are all closed");

  /* A device handle: through the same calls, with no descriptor; one that
   * brings a descriptor is refused. */
  cuemm_ipc_handle dh;
  CHECK_CU(cuemm_ipc_export(m, device_buf, 0, &dh));
  is(dh.kind, CUEMM_IPC_KIND_DEVICE, "memory beyond the pool exports as a device handle");
  is(cuemm_ipc_handle_send(NULL, &dh, sp[0]), CUDA_SUCCESS, "send: a device handle, no manager needed");
  is(cuemm_ipc_recv(sp[1], &got), CUDA_SUCCESS, "recv: the device handle");
  ok(memcmp(&got, &dh, sizeof got) == 0, "arrives byte for byte");
  is(count_fds(), fds1, "with no descriptor");
  is(cuemm_ipc_discard(&got), CUDA_ERROR_INVALID_VALUE, "nothing kept for a device handle");
  raw_send(sp[0], &dh, sizeof dh, &devnull, 1);
  is(cuemm_ipc_recv(sp[1], &got), CUDA_ERROR_INVALID_VALUE, "recv: a device handle with a descriptor refused");
  is(count_fds(), fds1, "recv: its descriptor closed");

  /* A message cut short: the peer closes after 60 bytes. */
  raw_send(sp[0], good, 60, &devnull, 1);
  close(sp[0]);
  is(cuemm_ipc_recv(sp[1], &got), CUDA_ERROR_INVALID_VALUE, "recv: a truncated handle refused");
  like(cuemm_last_error(), "after 60 bytes; a handle is 128 bytes (truncated)", "message says how many bytes came");
  close(sp[1]);
  close(devnull);
  is(count_fds(), fds0 - 2, "recv: nothing left open after the errors (the pair closed)");

  /* A freed block's handle cannot be sent. */
  local_pair(sp);
  CUdeviceptr tmp;
  cuemm_ipc_handle th;
  CHECK_CU(cuemm_allocate(m, 8192, &tmp));
  CHECK_CU(cuemm_ipc_export(m, tmp, 0, &th));
  CHECK_CU(cuemm_free(m, tmp));
  is(cuemm_ipc_handle_send(m, &th, sp[0]), CUDA_ERROR_INVALID_VALUE, "send: a freed block's handle refused");
  like(cuemm_last_error(), "freed already", "message says it was freed");
  CHECK_CU(cuemm_flush(m));
  is(cuemm_ipc_handle_send(m, &th, sp[0]), CUDA_ERROR_INVALID_VALUE, "send: after the flush too");
  b = th;
  b.source_pid ^= 0x4000;
  reseal(&b);
  is(cuemm_ipc_handle_send(m, &b, sp[0]), CUDA_ERROR_INVALID_VALUE, "send: another process's pool handle refused");
  close(sp[0]);
  close(sp[1]);
  is(count_fds(), fds0 - 2, "no descriptor left open (the pair closed)");
}

/* A range over more chunks than a handle holds. */
static void too_many_pieces(void)
{
  cuemm_manager *m = make_pool(1);
  CUdeviceptr p[7], big;
  for (int i = 0; i < 7; i++)
    CHECK_CU(cuemm_allocate(m, 2 * MiB, &p[i]));
  for (int i = 0; i < 7; i++)
    CHECK_CU(cuemm_free(m, p[i]));
  CHECK_CU(cuemm_flush(m));
  cuemm_pool_stats s;
  CHECK_CU(cuemm_pool_get_stats(m, &s));
  is(s.chunks, 7, "seven growth steps: seven chunks");
  CHECK_CU(cuemm_allocate(m, 14 * MiB, &big));
  cuemm_ipc_handle h;
  is(cuemm_ipc_export(m, big, 0, &h), CUDA_ERROR_NOT_SUPPORTED, "a block over 7 chunks cannot be exported");
  like(cuemm_last_error(), "overlap 7 of the pool's physical allocations (chunks); a handle holds at most 6",
       "the message counts the chunks");
  is(cuemm_ipc_export(m, big, 12 * MiB, &h), CUDA_SUCCESS, "its first 12 MiB (6 chunks) can");
  is(h.pieces.count, 6, "six chunks");
  is(cuemm_ipc_export(m, big + 3 * MiB, 2 * MiB, &h), CUDA_SUCCESS, "a slice across one boundary");
  ok(h.pieces.count == 2 && h.offset == 1 * MiB, "two chunks, offset 1 MiB in the first");
  CHECK_CU(cuemm_free(m, big));
  CHECK_CU(cuemm_destroy(m));
}

int main(int argc, char **argv)
{
  if (argc == 3 && strcmp(argv[1], "--child") == 0) {
    sock = atoi(argv[2]);
    return child();
  }

  sim_init();
  tap_plan(PLAN);
  test_primary_context(0);

  without_ipc();

  cuemm_manager *m = make_pool(1);
  CUdeviceptr a, s1, s2, big, dev;
  CHECK_CU(cuemm_allocate(m, 1 * MiB, &a));
  CHECK_CU(cuemm_allocate(m, 4096, &s1));
  CHECK_CU(cuemm_allocate(m, 4096, &s2));
  CHECK_CU(cuemm_allocate(m, 3 * MiB, &big));
  CHECK_CU(cuemm_allocate(m, 300 * MiB, &dev)); /* beyond the pool: cuMemAlloc */
  cuemm_pool_stats ps;
  CHECK_CU(cuemm_pool_get_stats(m, &ps));
  is(ps.grow_steps, 2, "two growth steps");
  ok(s2 == a + MiB + 4096, "the small block lies in the middle of the first chunk");

  /* The handle of a block in the middle of a chunk. */
  cuemm_ipc_handle hm, hb, hs;
  is(cuemm_ipc_export(m, s2, 0, &hm), CUDA_SUCCESS, "export a block in the middle of a chunk");
  is(hm.kind, CUEMM_IPC_KIND_POOL, "kind: pool");
  ok(memcmp(hm.magic, "cuem", 4) == 0 && hm.version == 1, "magic and version");
  is(hm.source_pid, getpid(), "source_pid");
  is(hm.pieces.count, 1, "one chunk");
  is(hm.pieces.bytes[0], 2 * MiB, "the chunk's size");
  is(hm.offset, s2 - ps.base, "offset: the block's place in the chunk");
  is(hm.size, 4096, "size: the block");
  is(hm.alloc_size, 2 * MiB, "alloc_size: the chunk");
  ok(hm.pieces.serial > 0, "the chunk's serial");
  is(hm.checksum, fnv1a(&hm), "checksum is the documented FNV-1a");
  uint8_t zero[8] = { 0 };
  ok(memcmp(hm.reserved, zero, 8) == 0 && hm.pieces.reserved == 0, "reserved bytes zero");
  cuemm_ipc_handle copy;
  is(cuemm_ipc_handle_parse(&hm, sizeof hm, &copy), CUDA_SUCCESS, "from_bytes accepts it");

  /* A block over two growth steps. */
  is(cuemm_ipc_export(m, big, 0, &hb), CUDA_SUCCESS, "export a block over two chunks");
  is(hb.pieces.count, 2, "two chunks");
  is(hb.pieces.bytes[0], 2 * MiB, "the first chunk's size");
  is(hb.offset, big - ps.base, "offset in the first chunk");
  is(hb.size, 3 * MiB, "size: the block");
  is(hb.alloc_size, hb.pieces.bytes[0] + hb.pieces.bytes[1], "alloc_size: both chunks");
  ok(hb.pieces.serial != hm.pieces.serial || hb.offset != hm.offset, "another range than the small block's");
  is(hb.pieces.serial, hm.pieces.serial, "the same first chunk (serial)");
  ok(hb.pieces.bytes[2] == 0 && hb.pieces.bytes[5] == 0, "unused sizes zero");
  size_t to_edge = ps.base + 2 * MiB - big;
  is(cuemm_ipc_export(m, big + to_edge - 32768, 65536, &hs), CUDA_SUCCESS, "export a slice across the boundary");
  ok(hs.pieces.count == 2 && hs.offset == 2 * MiB - 32768 && hs.size == 65536, "its chunks and offset");
  is(cuemm_ipc_export(m, big, 3 * MiB + 1, &copy), CUDA_ERROR_INVALID_VALUE, "a size past the block refused");
  like(cuemm_last_error(), "run past the end of the pool block", "message says so");
  CUdeviceptr gone;
  CHECK_CU(cuemm_allocate(m, 4096, &gone));
  CHECK_CU(cuemm_free(m, gone));
  is(cuemm_ipc_export(m, gone, 0, &copy), CUDA_ERROR_INVALID_VALUE, "a pending pool block refused");
  like(cuemm_last_error(), "freed already", "message says it was freed");
  CHECK_CU(cuemm_flush(m));
  bad_pieces(&hb);

  one_process(m, &hb, dev);

  start_child(argv[0]);

  struct { const char *name; CUdeviceptr p; cuemm_ipc_handle *h; uint8_t fill; } uses[3] = {
    { "middle block", s2, &hm, 0xA5 }, { "block over two chunks", big, &hb, 0x5A },
    { "slice across the boundary", big + to_edge - 32768, &hs, 0x3C } };
  for (int i = 0; i < 3; i++) {
    size_t n = uses[i].h->size;
    CHECK_CU(cuMemsetD8(a, 0x11, MiB));
    fill_pattern(uses[i].p, n);
    reply r = ask(m, OP_USE, uses[i].fill, uses[i].h, NULL);
    is(r.r[0], CUDA_SUCCESS, "%s: importer receives", uses[i].name);
    is(r.v[3], uses[i].h->pieces.count, "%s: with one descriptor per chunk", uses[i].name);
    is(r.r[1], CUDA_SUCCESS, "%s: importer opens", uses[i].name);
    if (r.r[1] != CUDA_SUCCESS)
      tap_diag("%s", r.msg);
    is(r.v[0], 0, "%s: importer reads the exporter's bytes", uses[i].name);
    is(r.r[2], CUDA_SUCCESS, "%s: importer writes", uses[i].name);
    is(r.r[4], CUDA_SUCCESS, "%s: importer closes", uses[i].name);
    is(r.r[5], CUDA_ERROR_INVALID_VALUE, "%s: a second close refused", uses[i].name);
    is(count_not(uses[i].p, n, uses[i].fill), 0, "%s: exporter sees the importer's %zu bytes", uses[i].name, n);
    is(count_not(a, MiB, 0x11), 0, "%s: and the neighbouring block is untouched", uses[i].name);
    /* The system driver may open descriptors of its own on first use, so
     * the importer's count is compared on simcuda only. */
    if (sim_present) {
      is(r.v[1], 0, "%s: closing unmapped and freed everything", uses[i].name);
      is(r.v[2], 0, "%s: and no descriptor is left open", uses[i].name);
    } else {
      skip(2, SIM_REASON);
    }
  }

  reply r = ask(m, OP_TWICE, 0, &hb, NULL);
  is(r.r[0], CUDA_SUCCESS, "twice: received");
  is(r.r[1], CUDA_SUCCESS, "twice: first open");
  is(r.r[2], CUDA_SUCCESS, "twice: second open, with no descriptor left");
  is(r.v[0], 1, "twice: the same pointer");
  is(r.r[3], CUDA_SUCCESS, "twice: first close");
  is(r.r[4], CUDA_SUCCESS, "twice: second close");
  is(r.r[5], CUDA_ERROR_INVALID_VALUE, "twice: a third close refused");
  is(r.r[6], CUDA_ERROR_INVALID_VALUE, "twice: nothing left to discard");
  if (sim_present) {
    is(r.v[5], 0, "twice: no descriptor left");
    is(r.v[1], 2, "twice: the two chunks imported once");
    is(r.v[2], 1, "twice: one reservation");
    ok(r.v[3] > 0, "twice: still mapped after the first close");
    is(r.v[4], 0, "twice: all gone after the last");
  } else {
    skip(5, SIM_REASON);
  }

  r = ask(m, OP_NOFD, 0, NULL, &hb);
  is(r.r[0], CUDA_SUCCESS, "no descriptors: the bytes are a good handle");
  is(r.r[1], CUDA_ERROR_INVALID_VALUE, "no descriptors: open refused");
  like(r.msg, "receive it with cuemm_ipc_recv", "no descriptors: the message says how to get them");
  is(r.v[0], 0, "no descriptors: *p untouched");

  if (sim_present) {
    r = ask(m, OP_FAIL, 0, &hb, NULL);
    is(r.v[15], 2, "failures: two descriptors received");
    for (int i = 0; i < NFAILING; i++) {
      is(r.r[i], CUDA_ERROR_OUT_OF_MEMORY, "failures: %s (call %u) fails the open", failing[i].entry, failing[i].nth);
      is(r.v[i], 7, "failures: %s (call %u): nothing leaked, descriptors kept, *p untouched", failing[i].entry,
         failing[i].nth);
    }
    like(r.msg, "cuMemImportFromShareableHandle(descriptor", "failures: the message names the call");
    is(r.r[NFAILING], CUDA_SUCCESS, "failures: then the open succeeds");
    is(r.r[NFAILING + 1], CUDA_SUCCESS, "failures: and closes");
    is(r.v[NFAILING], 3, "failures: nothing left, descriptors closed");
  } else {
    skip(2 * NFAILING + 5, SIM_REASON);
  }

  request bye = { .op = OP_EXIT };
  write_full(sock, &bye, sizeof bye);
  int status = 0;
  waitpid(child_pid, &status, 0);
  is(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), 0, "the importing process exits 0, no leak");
  close(sock);

  CHECK_CU(cuemm_free(m, a));
  CHECK_CU(cuemm_free(m, s1));
  CHECK_CU(cuemm_free(m, s2));
  CHECK_CU(cuemm_free(m, big));
  CHECK_CU(cuemm_free(m, dev));
  CHECK_CU(cuemm_destroy(m));

  too_many_pieces();
  if (sim_present)
    is(sim_vmm_live(), 0, "no VMM object left in the exporter");
  else
    skip(1, SIM_REASON);
  test_release_primary(0);
  return tap_done();
}
