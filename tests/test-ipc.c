/* test-ipc.c: sharing device memory between two real processes.
 *
 * The program runs twice: as the exporter (the TAP producer) and, started by
 * it with fork and exec of itself (`--child RFD WFD`), as the importer.  The
 * exporter sends requests with handles as bytes over one pipe; the importer
 * answers each with a fixed-size reply over another, and the exporter turns
 * the replies into checks, so only one process prints TAP.  Data goes both
 * ways: the exporter writes a pattern the importer must read, the importer
 * writes a fill byte the exporter must see.
 *
 * Covered: the handle's layout and fields; export of start, interior and
 * last-byte pointers; every malformed handle; export of foreign, host and
 * freed pointers; opening in the exporting process; opening twice and slices
 * of one allocation (one driver mapping, counted on simcuda); closing what
 * was not opened; destroying a manager with mappings open; a peer device;
 * a source device this process cannot see.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testproc.h"
#include "testutil.h"

enum { N = 1 << 20, MID = N / 2, SLICE = 4096 };

enum op { OP_EXIT, OP_USE, OP_TWICE, OP_DESTROY };

typedef struct request {
  int32_t op;
  int32_t device;                          /* the importer's context's device */
  uint8_t fill;                            /* OP_USE: what the importer writes */
  uint8_t pad[7];
  unsigned char handle[CUEMM_IPC_HANDLE_SIZE];
  unsigned char handle2[CUEMM_IPC_HANDLE_SIZE];  /* OP_TWICE: another slice */
} request;

typedef struct reply {
  int32_t r[8];
  int64_t v[8];
  char msg[512];
} reply;

static uint8_t pattern(size_t i)
{
  return (uint8_t)(i * 7 + 3);
}

static long sim_live_ipc(void)
{
  if (!sim_present || !sim.live_get)
    return -1;
  simcuda_live l;
  sim.live_get(&l);
  return (long)l.ipc_opened;
}

/* ---- the importer ------------------------------------------------------------ */

static void child_use(const request *q, reply *a)
{
  cuemm_ipc_handle h;
  CUdeviceptr p = 0;
  unsigned long peer0 = sim_calls("cuDeviceCanAccessPeer");
  a->r[0] = cuemm_ipc_handle_parse(q->handle, sizeof q->handle, &h);
  if (a->r[0] != CUDA_SUCCESS)
    return;
  a->r[1] = cuemm_ipc_open(NULL, &h, &p);
  a->v[2] = (int64_t)(sim_calls("cuDeviceCanAccessPeer") - peer0);
  if (a->r[1] != CUDA_SUCCESS) {
    snprintf(a->msg, sizeof a->msg, "%s", cuemm_last_error());
    return;
  }
  unsigned char *buf = malloc(h.size);
  CHECK_CU(cuMemcpyDtoH(buf, p, h.size));
  for (size_t i = 0; i < h.size; i++)
    a->v[0] += buf[i] != pattern(h.offset + i);
  free(buf);
  a->r[2] = cuMemsetD8(p, q->fill, h.size);
  a->r[3] = cuCtxSynchronize();
  a->r[4] = cuemm_ipc_close(NULL, p);
  a->v[1] = sim_live_ipc();
  a->r[5] = cuemm_ipc_close(NULL, p);
  snprintf(a->msg, sizeof a->msg, "%s", cuemm_last_error());
}

static void child_twice(const request *q, reply *a)
{
  cuemm_ipc_handle h, h2;
  CHECK_CU(cuemm_ipc_handle_parse(q->handle, sizeof q->handle, &h));
  CHECK_CU(cuemm_ipc_handle_parse(q->handle2, sizeof q->handle2, &h2));
  unsigned long open0 = sim_calls("cuIpcOpenMemHandle"), close0 = sim_calls("cuIpcCloseMemHandle");
  CUdeviceptr p1 = 0, p2 = 0, s = 0;
  a->r[0] = cuemm_ipc_open(NULL, &h, &p1);
  a->r[1] = cuemm_ipc_open(NULL, &h, &p2);
  a->v[0] = p1 == p2 && p1 != 0;
  a->r[2] = cuemm_ipc_open(NULL, &h2, &s);
  a->v[1] = (int64_t)(s - p1);
  a->v[2] = (int64_t)(sim_calls("cuIpcOpenMemHandle") - open0);
  unsigned char b = 0;
  CHECK_CU(cuMemcpyDtoH(&b, s, 1));
  a->v[3] = b == pattern(h2.offset);
  a->r[3] = cuemm_ipc_close(NULL, p1);
  a->r[4] = cuemm_ipc_close(NULL, s);
  a->v[4] = (int64_t)(sim_calls("cuIpcCloseMemHandle") - close0);
  a->v[5] = sim_live_ipc();
  a->r[5] = cuemm_ipc_close(NULL, p2);
  a->v[6] = (int64_t)(sim_calls("cuIpcCloseMemHandle") - close0);
  a->v[7] = sim_live_ipc();
  a->r[6] = cuemm_ipc_close(NULL, p2);
  a->r[7] = cuemm_ipc_close(NULL, (CUdeviceptr)0x1234);
  snprintf(a->msg, sizeof a->msg, "%s", cuemm_last_error());
}

static void child_destroy(const request *q, reply *a)
{
  cuemm_ipc_handle h;
  CHECK_CU(cuemm_ipc_handle_parse(q->handle, sizeof q->handle, &h));
  cuemm_manager *m;
  CHECK_CU(cuemm_get(&m));
  unsigned long close0 = sim_calls("cuIpcCloseMemHandle");
  CUdeviceptr p = 0, p2 = 0;
  a->r[0] = cuemm_ipc_open(m, &h, &p);
  a->r[1] = cuemm_ipc_open(m, &h, &p2);
  a->r[2] = cuemm_destroy(m);
  snprintf(a->msg, sizeof a->msg, "%s", cuemm_last_error());
  a->v[0] = (int64_t)(sim_calls("cuIpcCloseMemHandle") - close0);
  a->v[1] = sim_live_ipc();
  a->r[3] = cuemm_ipc_close(NULL, p);
}

static int child(int rfd, int wfd)
{
  sim_init();
  CHECK_CU(cuInit(0));
  request q;
  while (read_full(rfd, &q, sizeof q) == 0 && q.op != OP_EXIT) {
    reply a;
    memset(&a, 0, sizeof a);
    test_primary_context(q.device);
    if (q.op == OP_USE)
      child_use(&q, &a);
    else if (q.op == OP_TWICE)
      child_twice(&q, &a);
    else if (q.op == OP_DESTROY)
      child_destroy(&q, &a);
    if (write_full(wfd, &a, sizeof a) != 0)
      return 2;
  }
  return 0;
}

/* ---- the exporter ------------------------------------------------------------ */

static int to_child = -1, from_child = -1;
static pid_t child_pid;

static void start_child(const char *argv0)
{
  int down[2], up[2];
  if (pipe(down) != 0 || pipe(up) != 0) {
    printf("Bail out! pipe: %s\n", strerror(errno));
    exit(1);
  }
  int pass[2] = { down[0], up[1] }, shut[2] = { down[1], up[0] };
  child_pid = spawn_self(argv0, pass, 2, shut, 2);
  close(down[0]);
  close(up[1]);
  to_child = down[1];
  from_child = up[0];
}

static reply ask(int op, int device, uint8_t fill, const cuemm_ipc_handle *h, const cuemm_ipc_handle *h2)
{
  request q;
  memset(&q, 0, sizeof q);
  q.op = op;
  q.device = device;
  q.fill = fill;
  if (h)
    memcpy(q.handle, h, sizeof *h);
  if (h2)
    memcpy(q.handle2, h2, sizeof *h2);
  reply a;
  if (write_full(to_child, &q, sizeof q) != 0 || read_full(from_child, &a, sizeof a) != 0) {
    printf("Bail out! the importing process stopped answering\n");
    exit(1);
  }
  return a;
}

static void fill_pattern(CUdeviceptr buf)
{
  unsigned char *host = malloc(N);
  for (size_t i = 0; i < N; i++)
    host[i] = pattern(i);
  CHECK_CU(cuMemcpyHtoD(buf, host, N));
  free(host);
}

/* Counts bytes of [from, to) that are not `want`, and bytes elsewhere in the
 * buffer that are not the pattern. */
static void count_fill(CUdeviceptr buf, size_t from, size_t to, uint8_t want, size_t *bad_in, size_t *bad_out)
{
  unsigned char *host = malloc(N);
  CHECK_CU(cuMemcpyDtoH(host, buf, N));
  *bad_in = *bad_out = 0;
  for (size_t i = 0; i < N; i++) {
    if (i >= from && i < to)
      *bad_in += host[i] != want;
    else
      *bad_out += host[i] != pattern(i);
  }
  free(host);
}

static void layout(void)
{
  is(sizeof(cuemm_ipc_handle), 128, "a handle is 128 bytes");
  is(offsetof(cuemm_ipc_handle, version), 4, "version at 4");
  is(offsetof(cuemm_ipc_handle, kind), 6, "kind at 6");
  is(offsetof(cuemm_ipc_handle, source_pid), 8, "source_pid at 8");
  is(offsetof(cuemm_ipc_handle, checksum), 12, "checksum at 12");
  is(offsetof(cuemm_ipc_handle, offset), 16, "offset at 16");
  is(offsetof(cuemm_ipc_handle, size), 24, "size at 24");
  is(offsetof(cuemm_ipc_handle, alloc_size), 32, "alloc_size at 32");
  is(offsetof(cuemm_ipc_handle, device_uuid), 40, "device_uuid at 40");
  is(offsetof(cuemm_ipc_handle, reserved), 56, "reserved at 56");
  is(offsetof(cuemm_ipc_handle, driver), 64, "driver handle at 64");
}

static void export_errors(cuemm_manager *m, CUdeviceptr buf)
{
  cuemm_ipc_handle h, before;
  memset(&h, 0x77, sizeof h);
  before = h;
  is(cuemm_ipc_export(NULL, buf, 0, &h), CUDA_ERROR_INVALID_VALUE, "export: NULL manager refused");
  is(cuemm_ipc_export(m, buf, 0, NULL), CUDA_ERROR_INVALID_VALUE, "export: NULL handle refused");
  is(cuemm_ipc_export(m, 0, 0, &h), CUDA_ERROR_INVALID_VALUE, "export: NULL pointer refused");
  is(cuemm_ipc_export(m, buf + 16, N, &h), CUDA_ERROR_INVALID_VALUE, "export: a size past the end refused");
  like(cuemm_last_error(), "run past the end", "message says the size runs past the end");

  CUdeviceptr raw;
  CHECK_CU(cuMemAlloc(&raw, 4096));
  is(cuemm_ipc_export(m, raw + 8, 0, &h), CUDA_ERROR_INVALID_VALUE, "export: memory allocated without cuemm refused");
  like(cuemm_last_error(), "does not own", "message says the manager does not own it");
  CHECK_CU(cuMemFree(raw));
  int on_stack = 0;
  is(cuemm_ipc_export(m, (CUdeviceptr)(uintptr_t)&on_stack, 0, &h), CUDA_ERROR_INVALID_VALUE,
     "export: a host address refused");
  like(cuemm_last_error(), "not device memory", "message says it is not device memory");

  CUdeviceptr gone;
  CHECK_CU(cuemm_allocate(m, 8192, &gone));
  CHECK_CU(cuemm_free(m, gone));
  is(test_stats(m).pending_count, 1, "the freed allocation waits in the queue");
  is(cuemm_ipc_export(m, gone, 0, &h), CUDA_ERROR_INVALID_VALUE, "export: a freed (pending) allocation refused");
  like(cuemm_last_error(), "freed already", "message says it was freed");
  is(cuemm_ipc_export(m, gone + 100, 0, &h), CUDA_ERROR_INVALID_VALUE, "export: inside a freed allocation refused");
  CHECK_CU(cuemm_flush(m));
  ok(memcmp(&h, &before, sizeof h) == 0, "failed exports left the handle untouched");
}

static void bad_bytes(const cuemm_ipc_handle *good)
{
  cuemm_ipc_handle out, b;
  memset(&out, 0x33, sizeof out);
  cuemm_ipc_handle before = out;
  is(cuemm_ipc_handle_parse(good, sizeof *good, NULL), CUDA_ERROR_INVALID_VALUE, "from_bytes: NULL handle");
  is(cuemm_ipc_handle_parse(NULL, sizeof *good, &out), CUDA_ERROR_INVALID_VALUE, "from_bytes: NULL bytes");
  is(cuemm_ipc_handle_parse(good, 127, &out), CUDA_ERROR_INVALID_VALUE, "from_bytes: 127 bytes (truncated)");
  like(cuemm_last_error(), "127 bytes; a handle is 128 bytes (truncated?)", "message gives both lengths");
  is(cuemm_ipc_handle_parse(good, 0, &out), CUDA_ERROR_INVALID_VALUE, "from_bytes: 0 bytes");
  unsigned char longer[CUEMM_IPC_HANDLE_SIZE + 1] = { 0 };
  memcpy(longer, good, sizeof *good);
  is(cuemm_ipc_handle_parse(longer, sizeof longer, &out), CUDA_ERROR_INVALID_VALUE, "from_bytes: 129 bytes");

  b = *good;
  b.magic[0] ^= 0x20;
  reseal(&b);
  is(cuemm_ipc_handle_parse(&b, sizeof b, &out), CUDA_ERROR_INVALID_VALUE, "from_bytes: bad magic");
  like(cuemm_last_error(), "not a cuemm IPC handle", "message says the magic is wrong");

  b = *good;
  b.version = 2;
  reseal(&b);
  is(cuemm_ipc_handle_parse(&b, sizeof b, &out), CUDA_ERROR_INVALID_VALUE, "from_bytes: version 2");
  like(cuemm_last_error(), "handle version 2; this cuemm reads version 1", "message names both versions");

  b = *good;
  b.driver.reserved[10] ^= 1;
  is(cuemm_ipc_handle_parse(&b, sizeof b, &out), CUDA_ERROR_INVALID_VALUE, "from_bytes: a flipped bit");
  like(cuemm_last_error(), "checksum mismatch", "message says the checksum does not match");
  b = *good;
  b.checksum ^= 0x100;
  is(cuemm_ipc_handle_parse(&b, sizeof b, &out), CUDA_ERROR_INVALID_VALUE, "from_bytes: a wrong checksum");

  unsigned char garbage[CUEMM_IPC_HANDLE_SIZE];
  uint32_t x = 12345;
  int refused = 0;
  for (int round = 0; round < 100; round++) {
    for (size_t i = 0; i < sizeof garbage; i++) {
      x = x * 1103515245u + 12345u;
      garbage[i] = (unsigned char)(x >> 16);
    }
    if (round % 2)
      memcpy(garbage, CUEMM_IPC_MAGIC, 4); /* get past the magic now and then */
    refused += cuemm_ipc_handle_parse(garbage, sizeof garbage, &out) == CUDA_ERROR_INVALID_VALUE;
  }
  is(refused, 100, "from_bytes: 100 buffers of random bytes all refused");

  b = *good;
  b.reserved[3] = 9;
  reseal(&b);
  is(cuemm_ipc_handle_parse(&b, sizeof b, &out), CUDA_ERROR_INVALID_VALUE, "from_bytes: reserved byte set");

  b = *good;
  b.size = b.alloc_size - b.offset + 1;
  reseal(&b);
  is(cuemm_ipc_handle_parse(&b, sizeof b, &out), CUDA_ERROR_INVALID_VALUE, "from_bytes: offset + size beyond alloc_size");
  like(cuemm_last_error(), "does not lie inside its allocation", "message says the slice is outside");
  b = *good;
  b.offset = UINT64_MAX;
  b.size = 2;
  reseal(&b);
  is(cuemm_ipc_handle_parse(&b, sizeof b, &out), CUDA_ERROR_INVALID_VALUE, "from_bytes: offset overflowing");
  b = *good;
  b.size = 0;
  reseal(&b);
  is(cuemm_ipc_handle_parse(&b, sizeof b, &out), CUDA_ERROR_INVALID_VALUE, "from_bytes: size 0");
  b = *good;
  b.source_pid = 0;
  reseal(&b);
  is(cuemm_ipc_handle_parse(&b, sizeof b, &out), CUDA_ERROR_INVALID_VALUE, "from_bytes: pid 0");
  b = *good;
  b.kind = 3;
  reseal(&b);
  is(cuemm_ipc_handle_parse(&b, sizeof b, &out), CUDA_ERROR_NOT_SUPPORTED, "from_bytes: an unknown kind");
  like(cuemm_last_error(), "kind 3", "message names the kind");
  ok(memcmp(&out, &before, sizeof out) == 0, "refused bytes left the handle untouched");

  is(cuemm_ipc_handle_parse(good, sizeof *good, &out), CUDA_SUCCESS, "from_bytes: a good handle accepted");
  ok(memcmp(&out, good, sizeof out) == 0, "and copied byte for byte");

  /* cuemm_ipc_open holds a handle to the same checks, before anything else. */
  b = *good;
  b.version = 7;
  reseal(&b);
  CUdeviceptr p = 0;
  is(cuemm_ipc_open(NULL, &b, &p), CUDA_ERROR_INVALID_VALUE, "open: a handle of another version refused");
  b = *good;
  b.alloc_size ^= 0x10;
  is(cuemm_ipc_open(NULL, &b, &p), CUDA_ERROR_INVALID_VALUE, "open: a damaged handle refused");
  is(p, 0, "and *p untouched");
}

int main(int argc, char **argv)
{
  if (argc == 4 && strcmp(argv[1], "--child") == 0)
    return child(atoi(argv[2]), atoi(argv[3]));

  sim_init();
  tap_plan(134);
  test_primary_context(0);
  int ndev = 0;
  CHECK_CU(cuDeviceGetCount(&ndev));
  cuemm_config c = test_config(1000, 1.0);
  cuemm_manager *m;
  CHECK_CU(cuemm_manager_create(NULL, &c, &m));

  layout();

  CUdeviceptr buf;
  CHECK_CU(cuemm_allocate(m, N, &buf));
  fill_pattern(buf);

  /* Export: start, interior, last byte. */
  cuemm_ipc_handle whole, mid, last;
  is(cuemm_ipc_export(m, buf, 0, &whole), CUDA_SUCCESS, "export the start, size 0 (to the end)");
  ok(memcmp(whole.magic, "cuem", 4) == 0, "magic \"cuem\"");
  is(whole.version, 1, "version 1");
  is(whole.kind, CUEMM_IPC_KIND_DEVICE, "kind: device memory");
  is(whole.source_pid, getpid(), "source_pid is this process");
  is(whole.offset, 0, "offset 0");
  is(whole.size, N, "size: the whole allocation");
  is(whole.alloc_size, N, "alloc_size");
  CUdevice dev0;
  CUuuid uuid0;
  CHECK_CU(cuDeviceGet(&dev0, 0));
  CHECK_CU(cuDeviceGetUuid(&uuid0, dev0));
  ok(memcmp(whole.device_uuid, uuid0.bytes, 16) == 0, "device_uuid is device 0's");
  is(whole.checksum, fnv1a(&whole), "checksum is the documented FNV-1a");
  uint8_t zero8[8] = { 0 };
  ok(memcmp(whole.reserved, zero8, 8) == 0, "reserved bytes zero");
  is(cuemm_ipc_export(m, buf + MID, SLICE, &mid), CUDA_SUCCESS, "export an interior pointer");
  is(mid.offset, MID, "offset of the interior pointer");
  is(mid.size, SLICE, "size as asked");
  ok(memcmp(&mid.driver, &whole.driver, sizeof mid.driver) == 0, "same driver handle: the allocation's start");
  is(cuemm_ipc_export(m, buf + N - 1, 0, &last), CUDA_SUCCESS, "export the last byte");
  is(last.offset, N - 1, "offset of the last byte");
  is(last.size, 1, "one byte to the end");

  export_errors(m, buf);
  bad_bytes(&mid);

  /* The exporting process itself. */
  CUdeviceptr p = 0;
  is(cuemm_ipc_open(m, &whole, &p), CUDA_ERROR_INVALID_CONTEXT, "open in the exporting process refused");
  like(cuemm_last_error(), "use the exporter's pointer", "message says to use the pointer directly");
  is(cuemm_ipc_open(m, NULL, &p), CUDA_ERROR_INVALID_VALUE, "open: NULL handle");
  is(cuemm_ipc_open(m, &whole, NULL), CUDA_ERROR_INVALID_VALUE, "open: NULL pointer");
  is(cuemm_ipc_close(m, buf), CUDA_ERROR_INVALID_VALUE, "close of a pointer never opened");
  like(cuemm_last_error(), "is not open in this manager's context", "message says it is not open");

  start_child(argv[0]);

  /* Twice, and two slices of one allocation: one driver mapping. */
  reply a = ask(OP_TWICE, 0, 0, &whole, &mid);
  is(a.r[0], CUDA_SUCCESS, "importer: first open");
  is(a.r[1], CUDA_SUCCESS, "importer: second open of the same handle");
  is(a.v[0], 1, "importer: both opens give the same pointer");
  is(a.r[2], CUDA_SUCCESS, "importer: open of an interior slice");
  is(a.v[1], MID, "importer: the slice's pointer is the mapping + its offset");
  is(a.v[3], 1, "importer: the slice reads the exporter's byte at its offset");
  is(a.r[3], CUDA_SUCCESS, "importer: first close");
  is(a.r[4], CUDA_SUCCESS, "importer: close of the slice");
  is(a.r[5], CUDA_SUCCESS, "importer: last close");
  is(a.r[6], CUDA_ERROR_INVALID_VALUE, "importer: a close more than opens refused");
  is(a.r[7], CUDA_ERROR_INVALID_VALUE, "importer: close of a pointer never opened refused");
  if (sim_present) {
    is(a.v[2], 1, "importer: three opens, one cuIpcOpenMemHandle");
    is(a.v[4], 0, "importer: no cuIpcCloseMemHandle while a user remains");
    is(a.v[5], 1, "importer: the mapping is still there");
    is(a.v[6], 1, "importer: the last close calls cuIpcCloseMemHandle once");
    is(a.v[7], 0, "importer: and nothing stays mapped");
  } else {
    skip(5, SIM_REASON);
  }

  /* Both directions, with the start, the middle and the last byte. */
  struct { const char *name; cuemm_ipc_handle *h; uint8_t fill; } uses[3] = {
    { "middle slice", &mid, 0xA5 }, { "last byte", &last, 0x5A }, { "whole allocation", &whole, 0x3C } };
  for (int i = 0; i < 3; i++) {
    fill_pattern(buf);
    a = ask(OP_USE, 0, uses[i].fill, uses[i].h, NULL);
    is(a.r[1], CUDA_SUCCESS, "%s: importer opens", uses[i].name);
    is(a.v[0], 0, "%s: importer reads the exporter's bytes", uses[i].name);
    is(a.r[2], CUDA_SUCCESS, "%s: importer writes", uses[i].name);
    is(a.r[4], CUDA_SUCCESS, "%s: importer closes", uses[i].name);
    is(a.r[5], CUDA_ERROR_INVALID_VALUE, "%s: importer's second close refused", uses[i].name);
    size_t bad_in, bad_out;
    count_fill(buf, uses[i].h->offset, uses[i].h->offset + uses[i].h->size, uses[i].fill, &bad_in, &bad_out);
    is(bad_in, 0, "%s: exporter sees the importer's %zu bytes", uses[i].name, (size_t)uses[i].h->size);
    is(bad_out, 0, "%s: and nothing outside the slice changed", uses[i].name);
  }
  if (sim_present)
    is(a.v[1], 0, "closing in the importer unmaps at once");
  else
    skip(1, SIM_REASON);

  /* A peer device. */
  if (ndev >= 2) {
    fill_pattern(buf);
    a = ask(OP_USE, 1, 0x99, &mid, NULL);
    is(a.r[1], CUDA_SUCCESS, "peer: device 1 opens device 0's memory");
    is(a.v[0], 0, "peer: reads the exporter's bytes");
    is(a.r[4], CUDA_SUCCESS, "peer: closes");
    size_t bad_in, bad_out;
    count_fill(buf, MID, MID + SLICE, 0x99, &bad_in, &bad_out);
    is(bad_in + bad_out, 0, "peer: exporter sees the write from device 1, and only it");
    if (sim_present)
      is(a.v[2], 1, "peer: cuDeviceCanAccessPeer asked once");
    else
      skip(1, SIM_REASON);
  } else {
    skip(5, "one device");
  }

  /* A source device this process does not have. */
  cuemm_ipc_handle alien = mid;
  memset(alien.device_uuid, 0xEE, sizeof alien.device_uuid);
  reseal(&alien);
  a = ask(OP_USE, 0, 0, &alien, NULL);
  is(a.r[1], CUDA_ERROR_INVALID_DEVICE, "unknown source device refused");
  like(a.msg, "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee, which is not visible", "message names the device's UUID");

  /* A manager destroyed with mappings open closes them. */
  a = ask(OP_DESTROY, 0, 0, &whole, NULL);
  is(a.r[0], CUDA_SUCCESS, "destroy: opened");
  is(a.r[1], CUDA_SUCCESS, "destroy: opened again");
  is(a.r[2], CUDA_SUCCESS, "destroy: the manager is destroyed");
  like(a.msg, "closed 1 IPC mappings the program had not closed", "destroy: message counts the mappings");
  is(a.r[3], CUDA_ERROR_INVALID_VALUE, "destroy: the pointer is no longer open");
  if (sim_present) {
    is(a.v[0], 1, "destroy: one cuIpcCloseMemHandle");
    is(a.v[1], 0, "destroy: nothing stays mapped");
  } else {
    skip(2, SIM_REASON);
  }

  /* A free of exported memory is deferred like any other: the importer can
   * still open it until the flush. */
  cuemm_ipc_handle held;
  CUdeviceptr other;
  CHECK_CU(cuemm_allocate(m, N, &other));
  fill_pattern(other);
  CHECK_CU(cuemm_ipc_export(m, other + 64, 64, &held));
  CHECK_CU(cuemm_free(m, other));
  is(test_stats(m).pending_count, 1, "the exported allocation's free is pending");
  a = ask(OP_USE, 0, 0x42, &held, NULL);
  is(a.r[1], CUDA_SUCCESS, "pending: the importer still opens it");
  is(a.v[0], 0, "pending: and reads its bytes");
  CHECK_CU(cuemm_flush(m));

  request bye = { .op = OP_EXIT };
  write_full(to_child, &bye, sizeof bye);
  close(to_child);
  int status = 0;
  waitpid(child_pid, &status, 0);
  is(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), 0, "the importing process exits 0");
  close(from_child);

  CHECK_CU(cuemm_free(m, buf));
  CHECK_CU(cuemm_destroy(m));
  if (sim_present)
    is(sim_live_ipc(), 0, "no IPC mapping left in the exporter");
  else
    skip(1, SIM_REASON);
  test_release_primary(0);
  return tap_done();
}
