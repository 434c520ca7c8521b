/* test-simcuda.c: checks simcuda, the simulated driver cuemm's tests run on.
 *
 * cuemm's tests trust simcuda to fail where the real driver fails and to
 * count, inject faults and report leaks exactly; a simulator that silently
 * succeeds would make every one of them pass for nothing.  So this program
 * links simcuda directly and pins down each behaviour they rely on with the
 * real values expected.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "simcuda.h"
#include "tap.h"

/* A call naming a destroyed stream or event stops the program (the real
 * driver's behaviour there is undefined: it crashed in
 * cuStreamIsCapturing), with a message naming the call; shown in a child
 * for three calls, two of which the stream path makes on streams it
 * knows.  3 checks. */
static void dead_handles_stop(CUstream dead, CUevent dead_ev)
{
  static const char *calls[] = { "cuStreamIsCapturing", "cuStreamQuery", "cuEventQuery" };
  static const char *kinds[] = { "stream", "stream", "event" };
  int ok = 1;
  char msg[512] = "";
  for (int k = 0; k < 3; k++) {
    int err[2];
    if (pipe(err) != 0) {
      ok = 0;
      continue;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
      dup2(err[1], 2);
      CUstreamCaptureStatus cs;
      if (k == 0)
        cuStreamIsCapturing(dead, &cs);
      else if (k == 1)
        cuStreamQuery(dead);
      else
        cuEventQuery(dead_ev);
      _exit(0); /* not stopped: the parent sees status 0 */
    }
    close(err[1]);
    ssize_t n = read(err[0], msg, sizeof msg - 1);
    msg[n > 0 ? n : 0] = 0;
    close(err[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    char want[128];
    snprintf(want, sizeof want, "simcuda: %s named %s %p after its destruction", calls[k], kinds[k],
             k == 2 ? (void *)dead_ev : (void *)dead);
    if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGABRT || !strstr(msg, want)) {
      tap_diag("%s: status %d, message: %s", calls[k], st, msg);
      ok = 0;
    }
  }
  ok(ok, "a call on a destroyed stream or event stops the program, naming the call and the handle");
  ok(strstr(msg, "SIMCUDA_DEAD_HANDLES=error") != NULL, "the message says how to get the error code instead");
  int st = 0;
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0)
    _exit(setenv("SIMCUDA_DEAD_HANDLES", "error", 1) == 0 && cuStreamQuery(dead) == CUDA_ERROR_INVALID_HANDLE ? 0 : 1);
  waitpid(pid, &st, 0);
  ok(WIFEXITED(st) && WEXITSTATUS(st) == 0, "with SIMCUDA_DEAD_HANDLES=error it returns CUDA_ERROR_INVALID_HANDLE");
}

#define MiB ((size_t)1 << 20)
#define CK(call) is((call), CUDA_SUCCESS, "%s", #call)

static CUdevice dev0 = 0, dev1 = 1;
static CUcontext pctx0, pctx1;

static int all_bytes(const void *p, int v, size_t n)
{
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    if (b[i] != (unsigned char)v)
      return 0;
  return 1;
}

static size_t free_mem(void)
{
  size_t f = 0, t = 0;
  cuMemGetInfo(&f, &t);
  return f;
}

/* ---- init, errors, cuGetProcAddress ---- */

static void test_init(void)
{
  CUdeviceptr p;
  int v = 0;
  is(cuMemAlloc(&p, 16), CUDA_ERROR_NOT_INITIALIZED, "cuMemAlloc before cuInit: NOT_INITIALIZED");
  is(cuDeviceGetCount(&v), CUDA_ERROR_NOT_INITIALIZED, "cuDeviceGetCount before cuInit: NOT_INITIALIZED");
  CK(cuDriverGetVersion(&v));
  is(v, 13000, "cuDriverGetVersion reports 13000, even before cuInit");
  is(cuInit(1), CUDA_ERROR_INVALID_VALUE, "cuInit(1): INVALID_VALUE");
  CK(cuInit(0));
  is(cuDriverGetVersion(NULL), CUDA_ERROR_INVALID_VALUE, "cuDriverGetVersion(NULL): INVALID_VALUE");
}

static void test_errors(void)
{
  const char *s = NULL;
  CK(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &s));
  is_str(s, "CUDA_ERROR_OUT_OF_MEMORY", "error name of OOM");
  CK(cuGetErrorName(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, &s));
  is_str(s, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", "error name of HOST_MEMORY_ALREADY_REGISTERED");
  CK(cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &s));
  is_str(s, "invalid argument", "error string of INVALID_VALUE");
  s = "x";
  is(cuGetErrorName((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE, "unknown code: INVALID_VALUE");
  ok(s == NULL, "unknown code: name set to NULL");
  is(cuGetErrorString((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE, "unknown code string: INVALID_VALUE");
}

typedef CUresult (*gpa_v1_fn)(const char *, void **, int, cuuint64_t);
typedef CUresult (*version_fn)(int *);

/* cuGetProcAddress and dlsym hand out functions as void *, which ISO C cannot
 * cast; POSIX guarantees the representations match, so copy the bits. */
static int same_fn(void *got, void (*want)(void))
{
  return memcmp(&got, &want, sizeof got) == 0;
}
#define FN(f) ((void (*)(void))&(f))

static void test_proc_address(void)
{
  void *fn = NULL;
  CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
  CK(cuGetProcAddress("cuMemAlloc", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
  is(st, CU_GET_PROC_ADDRESS_SUCCESS, "cuMemAlloc: status SUCCESS");
  ok(same_fn(fn, FN(cuMemAlloc)), "cuMemAlloc resolves to cuMemAlloc_v2");
  fn = (void *)1;
  is(cuGetProcAddress("cuNoSuchEntry", &fn, 13000, 0, &st), CUDA_ERROR_NOT_FOUND, "unknown symbol: NOT_FOUND");
  is(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, "unknown symbol: status SYMBOL_NOT_FOUND");
  ok(fn == NULL, "unknown symbol: pfn NULL");
  is(cuGetProcAddress("cuMemAlloc_v2", &fn, 13000, 0, &st), CUDA_ERROR_NOT_FOUND, "versioned name is not a base name");
  is(cuGetProcAddress("cuMemAlloc", NULL, 13000, 0, &st), CUDA_ERROR_INVALID_VALUE, "pfn NULL: INVALID_VALUE");

  CK(cuGetProcAddress("cuCtxCreate", &fn, 13000, 0, &st));
  ok(same_fn(fn, FN(cuCtxCreate)), "cuCtxCreate at 13000: cuCtxCreate_v4");
  CK(cuGetProcAddress("cuCtxCreate", &fn, 12000, 0, &st));
  ok(fn == dlsym(RTLD_DEFAULT, "cuCtxCreate_v2"), "cuCtxCreate at 12000: the 3-argument cuCtxCreate_v2");
  CK(cuGetProcAddress("cuGetProcAddress", &fn, 13000, 0, &st));
  ok(same_fn(fn, FN(cuGetProcAddress)), "cuGetProcAddress at 13000: cuGetProcAddress_v2");

  CK(cuGetProcAddress("cuDriverGetVersion", &fn, 12000, 0, &st));
  int v = 0;
  version_fn get_version;
  memcpy(&get_version, &fn, sizeof fn);
  CK(get_version(&v));
  is(v, 13000, "the resolved cuDriverGetVersion works");

  void *sym = dlsym(RTLD_DEFAULT, "cuGetProcAddress");
  gpa_v1_fn v1;
  memcpy(&v1, &sym, sizeof sym);
  ok(v1 != NULL, "the 4-argument cuGetProcAddress is exported");
  if (v1) {
    fn = NULL;
    CK(v1("cuMemFree", &fn, 12000, 0));
    ok(same_fn(fn, FN(cuMemFree)), "old cuGetProcAddress resolves cuMemFree to cuMemFree_v2");
    is(v1("cuNope", &fn, 12000, 0), CUDA_ERROR_NOT_FOUND, "old cuGetProcAddress: unknown is NOT_FOUND");
  } else {
    skip(3, "no cuGetProcAddress");
  }
}

/* ---- devices ---- */

static void test_devices(void)
{
  int n = 0, v = 0;
  CUdevice d;
  CK(cuDeviceGetCount(&n));
  is(n, 2, "two devices by default");
  CK(cuDeviceGet(&d, 1));
  is(d, 1, "cuDeviceGet(1)");
  is(cuDeviceGet(&d, 2), CUDA_ERROR_INVALID_DEVICE, "cuDeviceGet(2): INVALID_DEVICE");
  is(cuDeviceGet(NULL, 0), CUDA_ERROR_INVALID_VALUE, "cuDeviceGet(NULL): INVALID_VALUE");
  CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0));
  is(v, 1, "VMM supported");
  CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 0));
  is(v, 1, "unified addressing");
  CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 1));
  is(v, 1, "POSIX fd handles supported");
  CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0));
  is(v, 9, "compute capability 9.x");
  CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 1));
  int bus1 = v;
  is(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 5), CUDA_ERROR_INVALID_DEVICE,
     "attribute of device 5: INVALID_DEVICE");
  char buf[64];
  CK(cuDeviceGetPCIBusId(buf, sizeof buf, 1));
  char want[64];
  snprintf(want, sizeof want, "0000:%02x:00.0", bus1);
  is_str(buf, want, "PCI bus id string matches the PCI_BUS_ID attribute");
  CK(cuDeviceGetByPCIBusId(&d, buf));
  is(d, 1, "cuDeviceGetByPCIBusId finds device 1");
  CK(cuDeviceGetName(buf, sizeof buf, 0));
  like(buf, "simcuda", "device name");
  size_t total = 0;
  CK(cuDeviceTotalMem(&total, 0));
  is(total, 1 << 30, "1 GiB per device by default");
  CUuuid u0, u1, u0b;
  CK(cuDeviceGetUuid(&u0, 0));
  CK(cuDeviceGetUuid(&u1, 1));
  CK(cuDeviceGetUuid(&u0b, 0));
  ok(memcmp(&u0, &u1, sizeof u0) != 0, "UUIDs differ between devices");
  ok(memcmp(&u0, &u0b, sizeof u0) == 0, "UUID is stable");
  CK(cuDeviceCanAccessPeer(&v, 0, 1));
  is(v, 1, "device 0 can access device 1");
  CK(cuDeviceCanAccessPeer(&v, 0, 0));
  is(v, 0, "a device is not its own peer");
}

/* ---- counters and faults ---- */

static void test_counters_faults(void)
{
  int n;
  simcuda_calls_reset();
  is(simcuda_calls("cuDeviceGetCount"), 0, "counter reset");
  cuDeviceGetCount(&n);
  cuDeviceGetCount(&n);
  cuDeviceGetCount(NULL);
  is(simcuda_calls("cuDeviceGetCount"), 3, "three calls counted, the failed one included");
  is(simcuda_calls("cuNoSuchEntry"), 0, "unknown entry: 0 calls");
  cuDeviceTotalMem(NULL, 0);
  is(simcuda_calls("cuDeviceTotalMem"), 1, "counted by base name (cuDeviceTotalMem_v2)");

  is(simcuda_fail("cuNoSuchEntry", 1, CUDA_ERROR_UNKNOWN), -1, "arming an unknown entry fails");
  is(simcuda_fail("cuDeviceGetCount", 2, CUDA_ERROR_UNKNOWN), 0, "arm the 2nd call");
  n = -1;
  CK(cuDeviceGetCount(&n));
  n = -1;
  is(cuDeviceGetCount(&n), CUDA_ERROR_UNKNOWN, "2nd call fails with the chosen result");
  is(n, -1, "the failed call had no side effect");
  CK(cuDeviceGetCount(&n));
  is(n, 2, "3rd call works again: nth fails once");

  CUdeviceptr p;
  simcuda_live l0, l1;
  simcuda_live_get(&l0);
  size_t f0 = free_mem();
  is(simcuda_fail_from("cuMemAlloc", 1, CUDA_ERROR_OUT_OF_MEMORY), 0, "arm cuMemAlloc from the next call on");
  is(cuMemAlloc(&p, 4096), CUDA_ERROR_OUT_OF_MEMORY, "fail_from: 1st call fails");
  is(cuMemAlloc(&p, 4096), CUDA_ERROR_OUT_OF_MEMORY, "fail_from: 2nd call fails");
  is(cuMemAlloc(&p, 4096), CUDA_ERROR_OUT_OF_MEMORY, "fail_from: 3rd call fails");
  simcuda_live_get(&l1);
  is(l1.device_allocs, l0.device_allocs, "failed calls allocated nothing");
  is(free_mem(), f0, "failed calls used no capacity");
  simcuda_fail_clear();
  CK(cuMemAlloc(&p, 4096));
  CK(cuMemFree(p));
  simcuda_fail("cuMemFree", 1, CUDA_ERROR_INVALID_VALUE);
  CK(cuMemAlloc(&p, 4096));
  is(cuMemFree(p), CUDA_ERROR_INVALID_VALUE, "injected cuMemFree failure");
  CK(cuMemFree(p));
  is(simcuda_calls("cuMemFree"), 3, "cuMemFree calls counted");
  is(simcuda_fail("cuInit", 1, CUDA_ERROR_NO_DEVICE), 0, "faults apply to cuInit too");
  is(cuInit(0), CUDA_ERROR_NO_DEVICE, "injected cuInit failure");
}

/* ---- contexts ---- */

struct thread_arg {
  CUcontext ctx;
  pthread_barrier_t *bar;
  CUcontext seen;
  CUresult alloc_r, set_r, dev_r, after_destroy_r;
  CUdevice dev;
};

static void *thread_ctx(void *p)
{
  struct thread_arg *a = p;
  CUdeviceptr d;
  cuCtxGetCurrent(&a->seen);
  a->alloc_r = cuMemAlloc(&d, 64);
  a->set_r = cuCtxSetCurrent(a->ctx);
  a->dev_r = cuCtxGetDevice(&a->dev);
  pthread_barrier_wait(a->bar); /* main checks it still has its own context */
  pthread_barrier_wait(a->bar); /* main destroyed a->ctx */
  CUdevice dd;
  a->after_destroy_r = cuCtxGetDevice(&dd);
  return NULL;
}

static void test_contexts(void)
{
  CUcontext c = NULL, cur = NULL, popped = NULL;
  int active = 0;
  unsigned flags = 0;
  CK(cuDevicePrimaryCtxGetState(0, &flags, &active));
  is(active, 0, "primary context inactive before retain");
  CK(cuDevicePrimaryCtxRetain(&pctx0, dev0));
  CK(cuDevicePrimaryCtxRetain(&pctx1, dev1));
  CK(cuDevicePrimaryCtxGetState(0, &flags, &active));
  is(active, 1, "primary context active after retain");
  CK(cuCtxGetCurrent(&cur));
  ok(cur == NULL, "retain does not make it current");
  CUdeviceptr p;
  is(cuMemAlloc(&p, 16), CUDA_ERROR_INVALID_CONTEXT, "cuMemAlloc without a context: INVALID_CONTEXT");
  CK(cuCtxSetCurrent(pctx0));
  CK(cuCtxGetCurrent(&cur));
  ok(cur == pctx0, "primary context is current");

  unsigned long long id_a = 0, id_b = 0, id_p = 0;
  CK(cuCtxCreate(&c, NULL, 0, dev1));
  CK(cuCtxGetCurrent(&cur));
  ok(cur == c, "cuCtxCreate makes the new context current");
  CUdevice d = -1;
  CK(cuCtxGetDevice(&d));
  is(d, 1, "new context is on device 1");
  CK(cuCtxGetId(c, &id_a));
  CK(cuCtxGetId(NULL, &id_p));
  is(id_p, id_a, "cuCtxGetId(NULL) is the current context's");
  CK(cuCtxPopCurrent(&popped));
  ok(popped == c, "pop returns the created context");
  CK(cuCtxGetCurrent(&cur));
  ok(cur == pctx0, "primary context current again after pop");
  CK(cuCtxPushCurrent(c));
  CK(cuCtxGetCurrent(&cur));
  ok(cur == c, "push makes it current");
  CK(cuCtxDestroy(c));
  CK(cuCtxGetCurrent(&cur));
  ok(cur == pctx0, "destroying the current context pops it");
  is(cuCtxDestroy(c), CUDA_ERROR_INVALID_CONTEXT, "destroy twice: INVALID_CONTEXT");
  is(cuCtxPushCurrent(c), CUDA_ERROR_INVALID_CONTEXT, "push a destroyed context: INVALID_CONTEXT");
  is(cuCtxGetId(c, &id_b), CUDA_ERROR_INVALID_CONTEXT, "id of a destroyed context: INVALID_CONTEXT");
  is(cuCtxDestroy(pctx0), CUDA_ERROR_INVALID_CONTEXT, "cuCtxDestroy of a primary context: INVALID_CONTEXT");

  CUcontext c2;
  CK(cuCtxCreate(&c2, NULL, 0, dev1));
  CK(cuCtxGetId(c2, &id_b));
  ok(c2 == c, "the new context has the destroyed one's address");
  ok(id_b != id_a, "but a new id");
  CK(cuCtxGetId(pctx0, &id_p));
  ok(id_p != id_a && id_p != id_b, "primary context id differs too");

  /* Another thread starts with no context, and its current context is its own. */
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, 2);
  struct thread_arg a;
  memset(&a, 0, sizeof a);
  a.ctx = c2;
  a.bar = &bar;
  a.seen = (CUcontext)1;
  pthread_t t;
  pthread_create(&t, NULL, thread_ctx, &a);
  pthread_barrier_wait(&bar);
  ok(a.seen == NULL, "a new thread has no current context");
  is(a.alloc_r, CUDA_ERROR_INVALID_CONTEXT, "a new thread cannot allocate");
  is(a.set_r, CUDA_SUCCESS, "the thread sets c2 current");
  is(a.dev, 1, "in the thread the context is on device 1");
  CK(cuCtxPopCurrent(&popped));
  ok(popped == c2, "main thread still has c2 on top");
  CK(cuCtxGetCurrent(&cur));
  ok(cur == pctx0, "main thread's stack below is untouched by the other thread");
  CK(cuCtxDestroy(c2));
  pthread_barrier_wait(&bar);
  pthread_join(t, NULL);
  pthread_barrier_destroy(&bar);
  is(a.after_destroy_r, CUDA_ERROR_CONTEXT_IS_DESTROYED, "a thread whose current context was destroyed: CONTEXT_IS_DESTROYED");

  is(cuCtxPopCurrent(NULL), CUDA_SUCCESS, "pop the primary context");
  is(cuCtxPopCurrent(&popped), CUDA_ERROR_INVALID_CONTEXT, "pop an empty stack: INVALID_CONTEXT");
  CK(cuCtxSetCurrent(pctx0));
}

/* ---- device memory ---- */

static void test_memory(void)
{
  size_t f0, f1, t;
  CK(cuMemGetInfo(&f0, &t));
  is(t, 1 << 30, "total is the capacity");
  is(f0, t, "nothing used yet");
  CUdeviceptr a, b;
  CK(cuMemAlloc(&a, 1100));
  CK(cuMemGetInfo(&f1, &t));
  is(f0 - f1, 1536, "1100 bytes use 1536 (512-byte rounding)");
  is(a % 256, 0, "pointer 256-byte aligned");
  is(cuMemAlloc(&b, 0), CUDA_ERROR_INVALID_VALUE, "size 0: INVALID_VALUE");
  is(cuMemAlloc(NULL, 16), CUDA_ERROR_INVALID_VALUE, "NULL out-pointer: INVALID_VALUE");
  is(cuMemAlloc(&b, f1 + 1), CUDA_ERROR_OUT_OF_MEMORY, "more than free: OUT_OF_MEMORY");
  CK(cuMemAlloc(&b, 3 * MiB));
  CK(cuMemGetInfo(&f1, &t));
  is(f0 - f1, 1536 + 3 * MiB, "capacity tracks both allocations");

  /* Device pointers are host addresses. */
  memset((void *)(uintptr_t)a, 0x11, 1000);
  unsigned char host[1000];
  memset(host, 0x5a, sizeof host);
  CK(cuMemcpyHtoD(a, host, sizeof host));
  ok(all_bytes((void *)(uintptr_t)a, 0x5a, 1000), "HtoD copied");
  CK(cuMemsetD8(a + 10, 0x7, 20));
  memset(host, 0, sizeof host);
  CK(cuMemcpyDtoH(host, a, sizeof host));
  ok(all_bytes(host + 10, 7, 20) && host[9] == 0x5a && host[30] == 0x5a, "memset D8 and DtoH");
  CK(cuMemsetD32(b, 0xdeadbeef, 4));
  is(((uint32_t *)(uintptr_t)b)[3], 0xdeadbeef, "memset D32");
  is(cuMemsetD32(b + 2, 0, 1), CUDA_ERROR_INVALID_VALUE, "misaligned memset D32: INVALID_VALUE");
  CK(cuMemcpyDtoD(b + 100, a, 1000));
  ok(all_bytes((void *)(uintptr_t)(b + 110), 7, 20), "DtoD copied");
  is(cuMemsetD8(a + 1000, 0, 200), CUDA_ERROR_INVALID_VALUE, "memset past the end: INVALID_VALUE");
  is(cuMemcpyHtoD(a + 101, host, 1000), CUDA_ERROR_INVALID_VALUE, "copy past the end: INVALID_VALUE");
  is(cuMemcpyDtoH(host, (CUdeviceptr)(uintptr_t)host, 10), CUDA_ERROR_INVALID_VALUE, "host address as device source: INVALID_VALUE");

  CUdeviceptr base = 0;
  size_t size = 0;
  CK(cuMemGetAddressRange(&base, &size, b + 12345));
  is(base, b, "address range base of an interior pointer");
  is(size, 3 * MiB, "address range size");
  is(cuMemGetAddressRange(&base, &size, (CUdeviceptr)(uintptr_t)host), CUDA_ERROR_NOT_FOUND,
     "address range of a host address: NOT_FOUND");

  unsigned mt = 0;
  CUcontext pc = NULL;
  CUdeviceptr dp = 0;
  CK(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, b + 5));
  is(mt, CU_MEMORYTYPE_DEVICE, "memory type DEVICE");
  CK(cuPointerGetAttribute(&pc, CU_POINTER_ATTRIBUTE_CONTEXT, b));
  ok(pc == pctx0, "pointer context is the allocating context");
  CK(cuPointerGetAttribute(&dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, b + 5));
  is(dp, b + 5, "device pointer");
  CK(cuPointerGetAttribute(&dp, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, b + 5));
  is(dp, b, "range start");
  CK(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, b + 5));
  is(size, 3 * MiB, "range size");
  is(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)host),
     CUDA_ERROR_INVALID_VALUE, "memory type of pageable host memory: INVALID_VALUE");

  is(cuMemFree(b + 16), CUDA_ERROR_INVALID_VALUE, "free an interior pointer: INVALID_VALUE");
  is(cuMemFree((CUdeviceptr)(uintptr_t)host), CUDA_ERROR_INVALID_VALUE, "free a foreign pointer: INVALID_VALUE");
  CK(cuMemFree(b));
  is(cuMemFree(b), CUDA_ERROR_INVALID_VALUE, "double free: INVALID_VALUE");
  is(cuMemsetD8(b, 0, 1), CUDA_ERROR_INVALID_VALUE, "memset of freed memory: INVALID_VALUE");
  CK(cuMemFree(a));
  is(free_mem(), f0, "all capacity back after freeing");

  /* Capacity is per device and settable while nothing is allocated. */
  is(simcuda_set_capacity(64 * MiB), 0, "capacity set to 64 MiB");
  CK(cuMemGetInfo(&f1, &t));
  is(t, 64 * MiB, "cuMemGetInfo total follows");
  CK(cuMemAlloc(&a, 40 * MiB));
  is(cuMemAlloc(&b, 40 * MiB), CUDA_ERROR_OUT_OF_MEMORY, "second 40 MiB does not fit in 64 MiB");
  is(simcuda_set_capacity(128 * MiB), -1, "capacity cannot change while allocated");
  CK(cuCtxSetCurrent(pctx1));
  CK(cuMemAlloc(&b, 40 * MiB));
  pass("device 1 has its own capacity");
  CK(cuMemFree(b));
  CK(cuCtxSetCurrent(pctx0));
  CK(cuMemFree(a));
  is(simcuda_set_capacity((size_t)1 << 30), 0, "capacity back to 1 GiB");
}

/* ---- queue mode ---- */

static int host_fn_runs;
static void host_fn(void *p) { host_fn_runs += (int)(intptr_t)p; }

static void test_queue(void)
{
  CUstream s;
  CUevent e;
  CUdeviceptr a, b, c;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  is(cuStreamCreate(&s, 0x10), CUDA_ERROR_INVALID_VALUE, "unknown stream flag: INVALID_VALUE");
  CK(cuEventCreate(&e, 0));
  CK(cuMemAlloc(&a, 4096));
  CK(cuMemAlloc(&b, 4096));
  memset((void *)(uintptr_t)a, 0, 4096);

  simcuda_set_queue_mode(0);
  CK(cuMemsetD8Async(a, 1, 4096, s));
  is(simcuda_queued_work(), 0, "out of queue mode work runs at once");
  ok(all_bytes((void *)(uintptr_t)a, 1, 4096), "the memset ran");

  simcuda_set_queue_mode(1);
  CK(cuMemsetD8Async(a, 2, 4096, s));
  is(simcuda_queued_work(), 1, "queued");
  ok(all_bytes((void *)(uintptr_t)a, 1, 4096), "a queued memset has not run");
  is(cuStreamQuery(s), CUDA_ERROR_NOT_READY, "cuStreamQuery: NOT_READY");
  CK(cuStreamSynchronize(s));
  ok(all_bytes((void *)(uintptr_t)a, 2, 4096), "cuStreamSynchronize ran it");
  CK(cuStreamQuery(s));

  /* cuMemFree synchronizes, as the real one does. */
  CK(cuMemsetD8Async(a, 3, 4096, s));
  CK(cuMemFree(b));
  is(simcuda_queued_work(), 0, "cuMemFree ran the queue");
  ok(all_bytes((void *)(uintptr_t)a, 3, 4096), "the memset queued before cuMemFree ran");

  /* Events: synchronizing on one runs what came before it, not after. */
  CK(cuMemsetD8Async(a, 4, 2048, s));
  CK(cuEventRecord(e, s));
  CK(cuMemsetD8Async(a + 2048, 5, 2048, s));
  is(cuEventQuery(e), CUDA_ERROR_NOT_READY, "event not reached: NOT_READY");
  CK(cuEventSynchronize(e));
  CK(cuEventQuery(e));
  ok(all_bytes((void *)(uintptr_t)a, 4, 2048), "work before the event ran");
  ok(all_bytes((void *)(uintptr_t)(a + 2048), 3, 2048), "work after the event did not");
  is(simcuda_queued_work(), 1, "one item left");
  CK(cuCtxSynchronize());
  ok(all_bytes((void *)(uintptr_t)(a + 2048), 5, 2048), "cuCtxSynchronize ran the rest");

  /* Host functions, a wait between streams, the default stream. */
  host_fn_runs = 0;
  CK(cuLaunchHostFunc(s, host_fn, (void *)(intptr_t)1));
  is(host_fn_runs, 0, "queued host function has not run");
  CK(cuEventRecord(e, s));
  CK(cuStreamWaitEvent(NULL, e, 0));
  CK(cuMemsetD8Async(a, 6, 16, NULL));
  CK(cuStreamSynchronize(NULL));
  is(host_fn_runs, 1, "default stream waited on the event: the host function ran");
  ok(all_bytes((void *)(uintptr_t)a, 6, 16), "default stream work ran");

  /* A synchronous copy waits for blocking streams only. */
  CK(cuMemsetD8Async(a, 7, 16, s));
  unsigned char h[16];
  CK(cuMemcpyDtoH(h, a, 16));
  ok(all_bytes(h, 6, 16), "cuMemcpyDtoH does not wait for a non-blocking stream");
  CK(cuStreamSynchronize(s));

  /* Stream-ordered allocation. */
  simcuda_live l;
  CK(cuMemAllocAsync(&c, 8192, s));
  size_t f = free_mem();
  CK(cuMemFreeAsync(c, s));
  simcuda_live_get(&l);
  is(l.device_allocs, 2, "cuMemFreeAsync queued: allocation still live");
  is(cuMemFreeAsync(c, s), CUDA_ERROR_INVALID_VALUE, "second cuMemFreeAsync: INVALID_VALUE");
  CK(cuStreamSynchronize(s));
  simcuda_live_get(&l);
  is(l.device_allocs, 1, "freed at the synchronization");
  is(free_mem() - f, 8192, "its capacity is back");
  is(cuMemAllocAsync(&c, 0, s), CUDA_ERROR_INVALID_VALUE, "cuMemAllocAsync of 0: INVALID_VALUE");

  /* Work whose memory is unmapped before it runs: cuMemUnmap does not
   * synchronize, the work is skipped and the stream reports it. */
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemGenericAllocationHandle hnd;
  CUdeviceptr va;
  CK(cuMemAddressReserve(&va, 2 * MiB, 0, 0, 0));
  CK(cuMemCreate(&hnd, 2 * MiB, &prop, 0));
  CK(cuMemMap(va, 2 * MiB, 0, hnd, 0));
  CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  CK(cuMemSetAccess(va, 2 * MiB, &acc, 1));
  CK(cuMemsetD32Async(va, 0x01020304, 1024, s));
  CK(cuMemUnmap(va, 2 * MiB));
  is(simcuda_queued_work(), 1, "cuMemUnmap did not run the queued memset");
  is(cuStreamSynchronize(s), CUDA_ERROR_ILLEGAL_ADDRESS, "the memset on unmapped memory: ILLEGAL_ADDRESS at sync");
  CK(cuStreamSynchronize(s));
  CK(cuMemRelease(hnd));
  CK(cuMemAddressFree(va, 2 * MiB));

  simcuda_set_queue_mode(0);
  CK(cuEventDestroy(e));
  setenv("SIMCUDA_DEAD_HANDLES", "error", 1);
  is(cuEventDestroy(e), CUDA_ERROR_INVALID_HANDLE, "SIMCUDA_DEAD_HANDLES=error: destroy an event twice: INVALID_HANDLE");
  unsetenv("SIMCUDA_DEAD_HANDLES");
  CK(cuStreamDestroy(s));
  dead_handles_stop(s, e);
  setenv("SIMCUDA_DEAD_HANDLES", "error", 1);
  is(cuStreamDestroy(s), CUDA_ERROR_INVALID_HANDLE, "SIMCUDA_DEAD_HANDLES=error: destroy a stream twice: INVALID_HANDLE");
  unsetenv("SIMCUDA_DEAD_HANDLES");
  CK(cuMemFree(a));

  CUevent t0, t1;
  float ms = -1;
  CK(cuEventCreate(&t0, 0));
  CK(cuEventCreate(&t1, 0));
  is(cuEventElapsedTime(&ms, t0, t1), CUDA_ERROR_INVALID_HANDLE, "elapsed time of unrecorded events: INVALID_HANDLE");
  CK(cuEventRecord(t0, NULL));
  CK(cuEventRecord(t1, NULL));
  CK(cuEventElapsedTime(&ms, t0, t1));
  ok(ms >= 0, "elapsed time non-negative");
  CK(cuEventDestroy(t0));
  CK(cuEventDestroy(t1));
}

/* ---- streams and events stepped one item at a time ---- */

/* A device block of `n` bytes set to `v`, with nothing queued on it. */
static CUdeviceptr block(size_t n, int v)
{
  CUdeviceptr p = 0;
  CK(cuMemAlloc(&p, n));
  memset((void *)(uintptr_t)p, v, n);
  return p;
}

#define BYTES(p) ((void *)(uintptr_t)(p))

static void test_stream_run(void)
{
  CUstream s, s2;
  CUevent e;
  CUdeviceptr a = block(4096, 0);
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  CK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  simcuda_set_queue_mode(1);

  CK(cuMemsetD8Async(a, 1, 4096, s));
  CK(cuMemsetD8Async(a, 2, 1024, s));
  CK(cuEventRecord(e, s));
  CK(cuMemsetD8Async(a + 1024, 3, 1024, s));
  is(simcuda_stream_queued(s), 4, "four items queued on the stream");
  is(simcuda_stream_queued(s2), 0, "none on the other");
  is(cuEventQuery(e), CUDA_ERROR_NOT_READY, "record queued: NOT_READY");
  is(simcuda_stream_run(s, 1), 1, "run 1: one item ran");
  ok(all_bytes(BYTES(a), 1, 4096), "the first memset ran, the second not");
  is(simcuda_stream_queued(s), 3, "three left");
  is(cuStreamQuery(s), CUDA_ERROR_NOT_READY, "cuStreamQuery: NOT_READY with work left");
  is(cuEventQuery(e), CUDA_ERROR_NOT_READY, "record not reached: still NOT_READY");
  is(simcuda_stream_run(s, 2), 2, "run 2: two items ran");
  ok(all_bytes(BYTES(a), 2, 1024) && all_bytes(BYTES(a + 1024), 1, 3072), "the second memset ran, the third not");
  CK(cuEventQuery(e));
  is(simcuda_stream_queued(s), 1, "one left");
  is(simcuda_stream_run(s, 0), 1, "run 0: the one left ran");
  ok(all_bytes(BYTES(a + 1024), 3, 1024), "the third memset ran");
  is(simcuda_stream_run(s, 0), 0, "run of an empty stream: 0");
  CK(cuStreamQuery(s));
  is(simcuda_stream_run((CUstream)&e, 0), 0, "run of a non-stream: 0");
  is(simcuda_stream_queued((CUstream)&e), 0, "queued of a non-stream: 0");

  /* A wait runs, on the other stream, only what the record needs. */
  CK(cuMemsetD8Async(a, 4, 16, s));
  CK(cuEventRecord(e, s));
  CK(cuMemsetD8Async(a + 16, 5, 16, s));
  CK(cuStreamWaitEvent(s2, e, 0));
  CK(cuMemsetD8Async(a + 32, 6, 16, s2));
  is(simcuda_stream_queued(s2), 2, "the wait is an item of s2");
  is(simcuda_stream_run(s2, 1), 1, "run 1 of s2: the wait, counted as one");
  ok(all_bytes(BYTES(a), 4, 16), "the wait ran s's work up to the record");
  ok(all_bytes(BYTES(a + 16), 2, 16), "but not beyond it");
  is(simcuda_stream_queued(s), 1, "s has its last item left");
  CK(cuEventQuery(e));
  ok(all_bytes(BYTES(a + 32), 2, 16), "s2's memset after the wait has not run");
  is(simcuda_stream_run(s2, 5), 1, "run 5 of s2 runs the one left");
  ok(all_bytes(BYTES(a + 32), 6, 16), "s2's memset ran");
  is(simcuda_stream_run(s, 0), 1, "s's last item");

  /* The default streams by their three names. */
  CK(cuMemsetD8Async(a, 7, 16, NULL));
  is(simcuda_stream_queued(NULL), 1, "queued on the legacy stream by 0");
  is(simcuda_stream_queued(CU_STREAM_LEGACY), 1, "the same stream as CU_STREAM_LEGACY");
  is(simcuda_stream_queued(CU_STREAM_PER_THREAD), 0, "the per-thread stream is another");
  CK(cuMemsetD8Async(a + 16, 8, 16, CU_STREAM_PER_THREAD));
  is(simcuda_stream_queued(CU_STREAM_PER_THREAD), 1, "one queued on the per-thread stream");
  is(simcuda_stream_run(CU_STREAM_LEGACY, 0), 1, "run of CU_STREAM_LEGACY");
  ok(all_bytes(BYTES(a), 7, 16), "the legacy memset ran");
  is(simcuda_stream_run(CU_STREAM_PER_THREAD, 0), 1, "run of CU_STREAM_PER_THREAD");
  ok(all_bytes(BYTES(a + 16), 8, 16), "the per-thread memset ran");
  is(simcuda_queued_work(), 0, "nothing queued");

  simcuda_set_queue_mode(0);
  CK(cuEventDestroy(e));
  CK(cuStreamDestroy(s));
  CK(cuStreamDestroy(s2));
  CK(cuMemFree(a));
}

static void test_event_query(void)
{
  CUstream s1, s2;
  CUevent e, never;
  CUdeviceptr a = block(64, 0);
  CK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  CK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  CK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  CK(cuEventCreate(&never, CU_EVENT_DISABLE_TIMING));
  simcuda_set_queue_mode(1);

  CK(cuEventQuery(never));
  CK(cuEventSynchronize(never));
  CK(cuStreamWaitEvent(s1, never, 0));
  is(simcuda_stream_queued(s1), 0, "a wait on a never recorded event queues nothing");

  /* Re-recorded: the query follows the latest record. */
  CK(cuEventRecord(e, s1));
  is(cuEventQuery(e), CUDA_ERROR_NOT_READY, "recorded, not run: NOT_READY");
  simcuda_stream_run(s1, 0);
  CK(cuEventQuery(e));
  CK(cuMemsetD8Async(a, 1, 64, s1));
  CK(cuEventRecord(e, s1));
  is(cuEventQuery(e), CUDA_ERROR_NOT_READY, "re-recorded behind a memset: NOT_READY again");
  simcuda_stream_run(s1, 1);
  is(cuEventQuery(e), CUDA_ERROR_NOT_READY, "memset ran, record not: NOT_READY");
  simcuda_stream_run(s1, 1);
  CK(cuEventQuery(e));

  /* Two records pending on two streams: only the latest one counts. */
  CK(cuEventRecord(e, s1));
  CK(cuEventRecord(e, s2));
  simcuda_stream_run(s1, 0);
  is(cuEventQuery(e), CUDA_ERROR_NOT_READY, "the earlier record ran, the latest not: NOT_READY");
  simcuda_stream_run(s2, 0);
  CK(cuEventQuery(e));
  CK(cuEventRecord(e, s1));
  CK(cuEventRecord(e, s2));
  simcuda_stream_run(s2, 0);
  CK(cuEventQuery(e));
  simcuda_stream_run(s1, 0);
  CK(cuEventQuery(e));

  /* A wait takes the record current at the call, not a later one. */
  CK(cuMemsetD8Async(a, 2, 64, s1));
  CK(cuEventRecord(e, s1));
  CK(cuStreamWaitEvent(s2, e, 0));
  CK(cuEventRecord(e, s2));
  simcuda_stream_run(s2, 1);
  ok(all_bytes(BYTES(a), 2, 64), "the wait ran s1's memset although the event was re-recorded on s2");
  simcuda_stream_run(s2, 0);
  CK(cuEventQuery(e));

  /* cuEventSynchronize runs the latest record's stream that far. */
  CK(cuMemsetD8Async(a, 3, 64, s1));
  CK(cuEventRecord(e, s1));
  CK(cuMemsetD8Async(a, 4, 64, s1));
  CK(cuEventSynchronize(e));
  CK(cuEventQuery(e));
  ok(all_bytes(BYTES(a), 3, 64), "cuEventSynchronize ran up to the record only");
  is(simcuda_stream_queued(s1), 1, "the memset after it is still queued");
  float ms;
  is(cuEventElapsedTime(&ms, e, e), CUDA_ERROR_INVALID_HANDLE, "CU_EVENT_DISABLE_TIMING: no elapsed time");

  simcuda_set_queue_mode(0);
  CK(cuStreamSynchronize(s1));
  CK(cuEventDestroy(e));
  CK(cuEventDestroy(never));
  CK(cuStreamDestroy(s1));
  CK(cuStreamDestroy(s2));
  CK(cuMemFree(a));
}

/* ---- early-reuse detection ---- */

static void test_reuse_check(void)
{
  CUstream s1, s2, s3, s4;
  CUevent e, e3;
  CUdeviceptr a = block(4096, 0), b = block(4096, 0);
  CK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  CK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  CK(cuStreamCreate(&s3, CU_STREAM_NON_BLOCKING));
  CK(cuStreamCreate(&s4, CU_STREAM_NON_BLOCKING));
  CK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  CK(cuEventCreate(&e3, CU_EVENT_DISABLE_TIMING));
  simcuda_set_queue_mode(1);

  is(simcuda_reuse_check(s2, a, 4096), 0, "nothing queued: no early reuse");
  is_str(simcuda_reuse_explain(), "no early reuse", "explain says so");

  /* Work pending on another stream. */
  CK(cuMemsetD8Async(a + 1024, 1, 1024, s1));
  is(simcuda_reuse_check(s2, a, 4096), 1, "a memset pending on s1: early reuse on s2");
  like(simcuda_reuse_explain(), "non-blocking stream", "explain names the stream's kind");
  like(simcuda_reuse_explain(), "memset writing", "explain names what the item does");
  char want[64];
  snprintf(want, sizeof want, "[0x%llx, 0x%llx)", (unsigned long long)(a + 1024), (unsigned long long)(a + 2048));
  like(simcuda_reuse_explain(), want, "explain gives the item's range");
  is(simcuda_reuse_check(s1, a, 4096), 0, "on the stream that queued it: stream order, not counted");
  is(simcuda_reuse_check(s2, a, 1024), 0, "a range below it: not counted");
  is(simcuda_reuse_check(s2, a + 2048, 2048), 0, "a range above it: not counted");
  is(simcuda_reuse_check(s2, a + 2047, 1), 1, "its last byte: counted");
  is(simcuda_reuse_check(s2, a, 0), 0, "an empty range: not counted");

  /* A copy counts on both sides; each pending item counts. */
  CK(cuMemcpyDtoDAsync(b, a, 512, s1));
  is(simcuda_reuse_check(s2, b, 4096), 1, "a copy writing b: counted");
  like(simcuda_reuse_explain(), "memcpy writing", "explain: the copy writes it");
  is(simcuda_reuse_check(s2, a, 512), 1, "a copy reading a: counted");
  like(simcuda_reuse_explain(), "memcpy reading", "explain: the copy reads it");
  is(simcuda_reuse_check(s2, a, 4096), 2, "the memset and the copy on a: two");
  is(simcuda_reuse_check((CUstream)&e, a, 4096), (size_t)-1, "an unknown stream: (size_t)-1");
  like(simcuda_reuse_explain(), "does not resolve", "explain says the stream did not resolve");

  /* A wait on an event recorded after the work orders it, queued or run. */
  CK(cuEventRecord(e, s1));
  CK(cuStreamWaitEvent(s2, e, 0));
  is(simcuda_reuse_check(s2, a, 4096), 0, "s2 waits on a record after the work: ordered");
  is(simcuda_reuse_check(s3, a, 4096), 2, "s3 does not wait: still two");
  /* Through another stream's wait: s3 waits on s1, s4 on s3. */
  CK(cuStreamWaitEvent(s3, e, 0));
  CK(cuEventRecord(e3, s3));
  CK(cuStreamWaitEvent(s4, e3, 0));
  is(simcuda_reuse_check(s4, a, 4096), 0, "s4 waits on s3, which waits on s1: ordered");
  CK(cuEventDestroy(e3));
  is(simcuda_reuse_check(s4, a, 4096), 0, "a wait stands when its event is destroyed");
  CK(cuEventCreate(&e3, CU_EVENT_DISABLE_TIMING));
  /* Work queued after the record is not ordered by it. */
  CK(cuMemsetD8Async(a, 2, 16, s1));
  is(simcuda_reuse_check(s2, a, 4096), 1, "a memset after the record: counted");
  is(simcuda_reuse_check(s2, a + 16, 4080), 0, "but not outside its range");
  is(simcuda_stream_run(s2, 0), 1, "s2's wait runs");
  is(simcuda_stream_queued(s1), 1, "only the memset after the record is left on s1");
  is(simcuda_reuse_check(s2, a, 4096), 1, "the wait having run changes nothing: still one");
  CK(cuEventRecord(e, s1));
  is(simcuda_reuse_check(s2, a, 4096), 1, "a record s2 does not wait on orders nothing");
  CK(cuStreamWaitEvent(s2, e, 0));
  is(simcuda_reuse_check(s2, a, 4096), 0, "waiting on it does");

  /* A record before the work orders nothing after it. */
  simcuda_stream_run(s1, 0);
  simcuda_stream_run(s2, 0);
  CK(cuEventRecord(e, s1));
  CK(cuMemsetD8Async(a, 3, 16, s1));
  CK(cuStreamWaitEvent(s2, e, 0));
  is(simcuda_reuse_check(s2, a, 4096), 1, "wait on a record before the work: counted");
  CK(cuStreamSynchronize(s1));
  is(simcuda_reuse_check(s2, a, 4096), 0, "after cuStreamSynchronize of s1: nothing pending");

  /* The pattern an allocator follows: free on s1, record, hand out on s2 after a wait. */
  CK(cuMemsetD8Async(a, 4, 4096, s1));
  CK(cuEventRecord(e, s1));
  is(simcuda_reuse_check(s2, a, 4096), 1, "handed to s2 with no wait: early reuse");
  CK(cuStreamWaitEvent(s2, e, 0));
  is(simcuda_reuse_check(s2, a, 4096), 0, "handed to s2 after cuStreamWaitEvent: correct");
  CK(cuEventSynchronize(e));
  is(simcuda_reuse_check(s3, a, 4096), 0, "handed to s3 once the event completed: correct");

  simcuda_set_queue_mode(0);
  CK(cuCtxSynchronize());
  is(simcuda_queued_work(), 0, "all ran");
  CK(cuEventDestroy(e));
  CK(cuEventDestroy(e3));
  CK(cuStreamDestroy(s1));
  CK(cuStreamDestroy(s2));
  CK(cuStreamDestroy(s3));
  CK(cuStreamDestroy(s4));
  CK(cuMemFree(a));
  CK(cuMemFree(b));
}

/* ---- the default streams ---- */

struct pt_arg {
  CUcontext ctx;
  CUdeviceptr p;
  CUresult r;
  size_t queued_seen;
  pthread_barrier_t *bar;
};

/* Queues on its own per-thread stream, then waits for the main thread's
 * checks before running it. */
static void *thread_per_thread(void *p)
{
  struct pt_arg *a = p;
  a->r = cuCtxSetCurrent(a->ctx);
  a->queued_seen = simcuda_stream_queued(CU_STREAM_PER_THREAD);
  if (a->r == CUDA_SUCCESS)
    a->r = cuMemsetD8Async(a->p, 9, 64, CU_STREAM_PER_THREAD);
  pthread_barrier_wait(a->bar);
  pthread_barrier_wait(a->bar);
  simcuda_stream_run(CU_STREAM_PER_THREAD, 0);
  return NULL;
}

static void test_legacy_order(void)
{
  CUstream b1, b2, nb;
  CUdeviceptr a = block(4096, 0), c = block(64, 0);
  CK(cuStreamCreate(&b1, 0));
  CK(cuStreamCreate(&b2, 0));
  CK(cuStreamCreate(&nb, CU_STREAM_NON_BLOCKING));
  simcuda_set_queue_mode(1);

  /* Work pending on a blocking stream. */
  CK(cuMemsetD8Async(a, 1, 4096, b1));
  is(simcuda_reuse_check(NULL, a, 4096), 0, "blocking stream's work, reused on the legacy stream: ordered");
  is(simcuda_reuse_check(CU_STREAM_LEGACY, a, 4096), 0, "the same by CU_STREAM_LEGACY");
  is(simcuda_reuse_check(nb, a, 4096), 1, "reused on a non-blocking stream: counted");
  is(simcuda_reuse_check(b2, a, 4096), 1, "reused on another blocking stream: counted");
  like(simcuda_reuse_explain(), "blocking stream", "explain names a blocking stream");
  is(simcuda_reuse_check(CU_STREAM_PER_THREAD, a, 4096), 1, "reused on the per-thread stream: counted");
  /* Legacy work queued after it orders it before every blocking stream. */
  CK(cuMemsetD8Async(c, 2, 64, NULL));
  is(simcuda_reuse_check(b2, a, 4096), 0, "b1, then the legacy stream, then b2: ordered");
  is(simcuda_reuse_check(CU_STREAM_PER_THREAD, a, 4096), 0, "and the per-thread stream: ordered");
  is(simcuda_reuse_check(nb, a, 4096), 1, "not the non-blocking stream");
  is(simcuda_stream_run(NULL, 0), 1, "run the legacy stream: one item of its own");
  ok(all_bytes(BYTES(a), 1, 4096), "b1's memset ran before it");
  ok(all_bytes(BYTES(c), 2, 64), "then the legacy memset");
  is(simcuda_stream_queued(b1), 0, "b1 is empty");

  /* Work pending on the legacy stream. */
  CK(cuMemsetD8Async(a, 3, 4096, NULL));
  is(simcuda_reuse_check(b1, a, 4096), 0, "legacy work, reused on a blocking stream: ordered");
  is(simcuda_reuse_check(CU_STREAM_PER_THREAD, a, 4096), 0, "reused on the per-thread stream: ordered");
  is(simcuda_reuse_check(nb, a, 4096), 1, "reused on a non-blocking stream: counted");
  like(simcuda_reuse_explain(), "legacy default stream", "explain names the legacy stream");
  CK(cuMemsetD8Async(c, 4, 64, b1));
  is(simcuda_stream_run(b1, 1), 1, "run b1's memset");
  ok(all_bytes(BYTES(a), 3, 4096), "the legacy memset queued before it ran first");
  ok(all_bytes(BYTES(c), 4, 64), "then b1's");

  /* Non-blocking streams neither wait nor are waited for. */
  CK(cuMemsetD8Async(a, 5, 4096, nb));
  CK(cuMemsetD8Async(c, 6, 64, NULL));
  is(simcuda_reuse_check(NULL, a, 4096), 1, "non-blocking work, reused on the legacy stream: counted");
  is(simcuda_stream_run(NULL, 0), 1, "run the legacy stream");
  is(simcuda_stream_queued(nb), 1, "the non-blocking stream's memset did not run");
  ok(all_bytes(BYTES(a), 3, 4096), "its memory is untouched");
  CK(cuMemsetD8Async(c, 7, 64, nb));
  CK(cuMemsetD8Async(a, 8, 64, NULL));
  is(simcuda_stream_run(nb, 0), 2, "run the non-blocking stream");
  ok(all_bytes(BYTES(a), 5, 4096), "the legacy memset queued before did not run");
  is(simcuda_stream_run(NULL, 0), 1, "run the legacy stream");

  /* Per-thread streams: one per thread, each blocking. */
  unsigned fl = 1;
  CK(cuStreamGetFlags(CU_STREAM_PER_THREAD, &fl));
  is(fl, 0, "cuStreamGetFlags of the per-thread stream: 0");
  fl = 1;
  CK(cuStreamGetFlags(NULL, &fl));
  is(fl, 0, "cuStreamGetFlags of the legacy stream: 0");
  CK(cuStreamGetFlags(nb, &fl));
  is(fl, CU_STREAM_NON_BLOCKING, "cuStreamGetFlags of a non-blocking stream");
  CUcontext cur, sc = NULL;
  CK(cuCtxGetCurrent(&cur));
  CK(cuStreamGetCtx(CU_STREAM_PER_THREAD, &sc));
  ok(sc == cur, "cuStreamGetCtx of the per-thread stream: the current context");

  CK(cuMemsetD8Async(a, 10, 64, CU_STREAM_PER_THREAD));
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, 2);
  struct pt_arg arg = {cur, a + 64, CUDA_ERROR_UNKNOWN, 99, &bar};
  pthread_t th;
  pthread_create(&th, NULL, thread_per_thread, &arg);
  pthread_barrier_wait(&bar);
  is(arg.r, CUDA_SUCCESS, "the thread queued on its per-thread stream");
  is(arg.queued_seen, 0, "it saw nothing queued there: not the main thread's stream");
  is(simcuda_stream_queued(CU_STREAM_PER_THREAD), 1, "the main thread's per-thread stream holds its own item only");
  is(simcuda_queued_work(), 2, "two items in all");
  is(simcuda_reuse_check(CU_STREAM_PER_THREAD, a + 64, 64), 1, "the other thread's work, reused on ours: counted");
  like(simcuda_reuse_explain(), "per-thread default stream", "explain names a per-thread stream");
  is(simcuda_reuse_check(NULL, a + 64, 64), 0, "reused on the legacy stream: ordered");
  pthread_barrier_wait(&bar);
  pthread_join(th, NULL);
  pthread_barrier_destroy(&bar);
  ok(all_bytes(BYTES(a + 64), 9, 64), "the thread ran its stream");
  is(simcuda_stream_run(CU_STREAM_PER_THREAD, 0), 1, "ours still had its item");
  ok(all_bytes(BYTES(a), 10, 64), "and it ran");

  /* Another context's legacy stream orders nothing here. */
  CUcontext other;
  CK(cuCtxCreate(&other, NULL, 0, dev0));
  CK(cuMemsetD8Async(a, 11, 64, NULL));
  CK(cuCtxSetCurrent(cur));
  is(simcuda_reuse_check(NULL, a, 64), 1, "work on another context's legacy stream: counted");
  like(simcuda_reuse_explain(), "legacy default stream", "explain names that legacy stream");
  CK(cuCtxDestroy(other));
  ok(all_bytes(BYTES(a), 11, 64), "destroying that context ran its work");

  simcuda_set_queue_mode(0);
  CK(cuCtxSynchronize());
  CK(cuStreamDestroy(b1));
  CK(cuStreamDestroy(b2));
  CK(cuStreamDestroy(nb));
  CK(cuMemFree(a));
  CK(cuMemFree(c));
}

/* ---- destroyed streams ---- */

static void test_destroyed_stream(void)
{
  CUstream s, s2;
  CUevent e;
  CUdeviceptr a = block(64, 0);
  simcuda_live l0, l;
  simcuda_live_get(&l0);
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  CK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  simcuda_set_queue_mode(1);

  CK(cuMemsetD8Async(a, 1, 64, s));
  CK(cuEventRecord(e, s));
  CK(cuStreamDestroy(s));
  setenv("SIMCUDA_DEAD_HANDLES", "error", 1);
  is(cuStreamDestroy(s), CUDA_ERROR_INVALID_HANDLE, "its handle is dead at once");
  is(cuStreamQuery(s), CUDA_ERROR_INVALID_HANDLE, "cuStreamQuery of it: INVALID_HANDLE");
  unsetenv("SIMCUDA_DEAD_HANDLES");
  simcuda_live_get(&l);
  is(l.streams, l0.streams + 1, "it no longer counts as live");
  is(simcuda_queued_work(), 2, "its work is still queued");
  ok(all_bytes(BYTES(a), 0, 64), "and has not run");
  is(cuEventQuery(e), CUDA_ERROR_NOT_READY, "its event: NOT_READY");
  is(simcuda_reuse_check(s2, a, 64), 1, "its pending memset still counts as early reuse");
  like(simcuda_reuse_explain(), "destroyed non-blocking stream", "explain says it was destroyed");
  CK(cuStreamWaitEvent(s2, e, 0));
  is(simcuda_reuse_check(s2, a, 64), 0, "a wait on its event orders it");
  CK(cuEventSynchronize(e));
  CK(cuEventQuery(e));
  ok(all_bytes(BYTES(a), 1, 64), "cuEventSynchronize ran its work");
  is(simcuda_stream_queued(s2), 1, "s2's wait is queued still");
  is(simcuda_stream_run(s2, 0), 1, "and runs");

  /* A wait of another stream runs it too; so does cuCtxSynchronize. */
  CUstream t;
  CK(cuStreamCreate(&t, 0));
  CK(cuMemsetD8Async(a, 2, 64, t));
  CK(cuEventRecord(e, t));
  CK(cuStreamDestroy(t));
  CK(cuStreamWaitEvent(s2, e, 0));
  is(simcuda_stream_run(s2, 0), 1, "s2's wait on the destroyed stream's event");
  CK(cuEventQuery(e));
  ok(all_bytes(BYTES(a), 2, 64), "ran the destroyed stream's work");
  CK(cuStreamCreate(&t, 0));
  CK(cuMemsetD8Async(a, 3, 64, t));
  CK(cuEventRecord(e, t));
  CK(cuStreamDestroy(t));
  CK(cuCtxSynchronize());
  CK(cuEventQuery(e));
  ok(all_bytes(BYTES(a), 3, 64), "cuCtxSynchronize ran it");
  is(simcuda_queued_work(), 0, "nothing queued");

  simcuda_set_queue_mode(0);
  CK(cuEventDestroy(e));
  CK(cuStreamDestroy(s2));
  CK(cuMemFree(a));
  simcuda_live_get(&l);
  is(l.streams, l0.streams, "no stream left");
}

/* ---- the stream and event entry points under the controls ---- */

static CUresult call_entry(const char *name, CUstream s, CUevent e)
{
  CUstream ns;
  CUevent ne;
  CUcontext c;
  unsigned fl;
  if (!strcmp(name, "cuStreamCreate"))
    return cuStreamCreate(&ns, 0);
  if (!strcmp(name, "cuStreamDestroy"))
    return cuStreamDestroy(s);
  if (!strcmp(name, "cuStreamQuery"))
    return cuStreamQuery(s);
  if (!strcmp(name, "cuStreamSynchronize"))
    return cuStreamSynchronize(s);
  if (!strcmp(name, "cuStreamWaitEvent"))
    return cuStreamWaitEvent(s, e, 0);
  if (!strcmp(name, "cuStreamGetCtx"))
    return cuStreamGetCtx(s, &c);
  if (!strcmp(name, "cuStreamGetFlags"))
    return cuStreamGetFlags(s, &fl);
  if (!strcmp(name, "cuEventCreate"))
    return cuEventCreate(&ne, CU_EVENT_DISABLE_TIMING);
  if (!strcmp(name, "cuEventRecord"))
    return cuEventRecord(e, s);
  if (!strcmp(name, "cuEventQuery"))
    return cuEventQuery(e);
  if (!strcmp(name, "cuEventSynchronize"))
    return cuEventSynchronize(e);
  if (!strcmp(name, "cuEventDestroy"))
    return cuEventDestroy(e);
  return CUDA_ERROR_NOT_FOUND;
}

typedef CUresult (*get_ctx_v2_fn)(CUstream, CUcontext *, CUgreenCtx *);

static void test_stream_entries(void)
{
  static const char *names[] = {"cuStreamCreate", "cuStreamDestroy", "cuStreamQuery", "cuStreamSynchronize",
                                "cuStreamWaitEvent", "cuStreamGetCtx", "cuStreamGetFlags", "cuEventCreate",
                                "cuEventRecord", "cuEventQuery", "cuEventSynchronize", "cuEventDestroy"};
  CUstream s;
  CUevent e;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  simcuda_live l0, l;
  simcuda_live_get(&l0);
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    simcuda_calls_reset();
    is(simcuda_fail(names[i], 1, CUDA_ERROR_LAUNCH_FAILED), 0, "%s can be failed", names[i]);
    is(call_entry(names[i], s, e), CUDA_ERROR_LAUNCH_FAILED, "%s: the injected error", names[i]);
    is(simcuda_calls(names[i]), 1, "%s: counted", names[i]);
  }
  simcuda_live_get(&l);
  ok(l.streams == l0.streams && l.events == l0.events, "the failed calls created and destroyed nothing");

  CUcontext cur, c = NULL;
  unsigned fl = 0;
  CK(cuCtxGetCurrent(&cur));
  CK(cuStreamGetCtx(s, &c));
  ok(c == cur, "cuStreamGetCtx: the context the stream was created in");
  c = NULL;
  CK(cuStreamGetCtx(NULL, &c));
  ok(c == cur, "cuStreamGetCtx of the legacy stream: the current context");
  is(cuStreamGetCtx(s, NULL), CUDA_ERROR_INVALID_VALUE, "cuStreamGetCtx(s, NULL): INVALID_VALUE");
  is(cuStreamGetCtx((CUstream)&fl, &c), CUDA_ERROR_INVALID_HANDLE, "cuStreamGetCtx of a non-stream: INVALID_HANDLE");
  CK(cuStreamGetFlags(s, &fl));
  is(fl, CU_STREAM_NON_BLOCKING, "cuStreamGetFlags: the flags it was created with");
  is(cuStreamGetFlags(s, NULL), CUDA_ERROR_INVALID_VALUE, "cuStreamGetFlags(s, NULL): INVALID_VALUE");
  is(cuStreamGetFlags((CUstream)&fl, &fl), CUDA_ERROR_INVALID_HANDLE, "cuStreamGetFlags of a non-stream: INVALID_HANDLE");

  void *fn = NULL;
  CUdriverProcAddressQueryResult st;
  CK(cuGetProcAddress("cuStreamGetCtx", &fn, 12000, 0, &st));
  ok(same_fn(fn, FN(cuStreamGetCtx)), "cuStreamGetCtx at 12000: the 2-argument function");
  CK(cuGetProcAddress("cuStreamGetCtx", &fn, 13000, 0, &st));
  ok(same_fn(fn, FN(cuStreamGetCtx_v2)), "cuStreamGetCtx at 13000: cuStreamGetCtx_v2");
  get_ctx_v2_fn v2;
  memcpy(&v2, &fn, sizeof fn);
  CUgreenCtx g = (CUgreenCtx)&fl;
  c = NULL;
  CK(v2(s, &c, &g));
  ok(c == cur && g == NULL, "cuStreamGetCtx_v2: the context, no green context");
  CK(cuGetProcAddress("cuStreamGetFlags", &fn, 13000, 0, &st));
  ok(same_fn(fn, FN(cuStreamGetFlags)), "cuStreamGetFlags resolves");
  simcuda_calls_reset();
  CK(cuEventDestroy(e));
  CK(cuStreamDestroy(s));
}

/* Threads stepping streams, events and the detector at once: the lock must
 * hold on every path, and everything must come out run and freed. */
struct churn_arg {
  CUcontext ctx;
  CUdeviceptr p;
  int bad;
};

static void *thread_churn(void *p)
{
  struct churn_arg *a = p;
  if (cuCtxSetCurrent(a->ctx) != CUDA_SUCCESS)
    a->bad++;
  for (int i = 0; i < 200; i++) {
    CUstream s, s2;
    CUevent e;
    a->bad += cuStreamCreate(&s, i % 2 ? CU_STREAM_NON_BLOCKING : 0) != CUDA_SUCCESS;
    a->bad += cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS;
    a->bad += cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS;
    a->bad += cuMemsetD8Async(a->p, (unsigned char)i, 256, s) != CUDA_SUCCESS;
    a->bad += cuEventRecord(e, s) != CUDA_SUCCESS;
    a->bad += cuStreamWaitEvent(s2, e, 0) != CUDA_SUCCESS;
    a->bad += simcuda_reuse_check(s2, a->p, 256) != 0;
    a->bad += cuMemsetD8Async(a->p, (unsigned char)i, 256, CU_STREAM_PER_THREAD) != CUDA_SUCCESS;
    if (i % 3 == 0)
      simcuda_stream_run(s, 1);
    a->bad += cuStreamDestroy(s) != CUDA_SUCCESS;
    simcuda_stream_run(s2, 0);
    a->bad += cuEventQuery(e) != CUDA_SUCCESS;
    a->bad += cuEventDestroy(e) != CUDA_SUCCESS;
    a->bad += cuStreamDestroy(s2) != CUDA_SUCCESS;
    simcuda_stream_run(CU_STREAM_PER_THREAD, 0);
  }
  return NULL;
}

static void test_stream_threads(void)
{
  enum { N = 4 };
  CUcontext cur;
  CK(cuCtxGetCurrent(&cur));
  CUdeviceptr p;
  CK(cuMemAlloc(&p, N * 256));
  simcuda_live l0, l;
  simcuda_live_get(&l0);
  simcuda_set_queue_mode(1);
  struct churn_arg args[N];
  pthread_t th[N];
  for (int i = 0; i < N; i++) {
    args[i].ctx = cur;
    args[i].p = p + (CUdeviceptr)i * 256;
    args[i].bad = 0;
    pthread_create(&th[i], NULL, thread_churn, &args[i]);
  }
  int bad = 0;
  for (int i = 0; i < N; i++) {
    pthread_join(th[i], NULL);
    bad += args[i].bad;
  }
  is(bad, 0, "%d threads x 200 rounds of streams, events, waits and checks: no unexpected result", N);
  is(simcuda_queued_work(), 0, "all their work ran");
  simcuda_live_get(&l);
  ok(l.streams == l0.streams && l.events == l0.events, "no stream or event left");
  ok(all_bytes(BYTES(p), 199, 256) && all_bytes(BYTES(p + 3 * 256), 199, 256), "each thread's last memset landed");
  simcuda_set_queue_mode(0);
  CK(cuMemFree(p));
}

/* ---- pinned host memory ---- */

static void test_host(void)
{
  void *p = NULL, *q = NULL;
  is(cuMemHostAlloc(&p, 4096, 0x100), CUDA_ERROR_INVALID_VALUE, "unknown cuMemHostAlloc flag: INVALID_VALUE");
  CK(cuMemHostAlloc(&p, 10000, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
  memset(p, 1, 10000);
  unsigned flags = 0;
  CK(cuMemHostGetFlags(&flags, p));
  is(flags, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE, "flags as allocated");
  CUdeviceptr dp = 0;
  CK(cuMemHostGetDevicePointer(&dp, (char *)p + 8, 0));
  is(dp, (uintptr_t)p + 8, "device pointer of mapped host memory");
  CK(cuMemsetD8(dp, 9, 16));
  ok(all_bytes((char *)p + 8, 9, 16), "device memset through the mapped pointer");
  unsigned mt = 0;
  CK(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)p));
  is(mt, CU_MEMORYTYPE_HOST, "memory type HOST");
  CK(cuMemAllocHost(&q, 100));
  simcuda_live l;
  simcuda_live_get(&l);
  is(l.host_allocs, 2, "two pinned allocations live");
  is(cuMemFreeHost((char *)p + 1), CUDA_ERROR_INVALID_VALUE, "cuMemFreeHost of an interior pointer: INVALID_VALUE");
  CK(cuMemFreeHost(p));
  is(cuMemFreeHost(p), CUDA_ERROR_INVALID_VALUE, "cuMemFreeHost twice: INVALID_VALUE");
  CK(cuMemFreeHost(q));

  size_t n = 3 * 4096;
  char *buf = aligned_alloc(4096, n);
  is(cuMemHostRegister(buf, n, 0x40), CUDA_ERROR_INVALID_VALUE, "unknown register flag: INVALID_VALUE");
  is(cuMemHostRegister(NULL, n, 0), CUDA_ERROR_INVALID_VALUE, "register NULL: INVALID_VALUE");
  CK(cuMemHostRegister(buf, n, CU_MEMHOSTREGISTER_DEVICEMAP));
  is(cuMemHostRegister(buf + 4096, 100, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
     "registering an overlapping range: HOST_MEMORY_ALREADY_REGISTERED");
  CK(cuMemHostGetDevicePointer(&dp, buf + 4, 0));
  is(dp, (uintptr_t)buf + 4, "device pointer of registered memory");
  simcuda_live_get(&l);
  is(l.host_registered, 1, "one registered range live");
  is(cuMemHostUnregister(buf + 4096), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
     "unregister an interior pointer: HOST_MEMORY_NOT_REGISTERED");
  CK(cuMemHostUnregister(buf));
  is(cuMemHostUnregister(buf), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "unregister twice: HOST_MEMORY_NOT_REGISTERED");
  CK(cuMemHostRegister(buf, n, CU_MEMHOSTREGISTER_READ_ONLY));
  is(cuMemsetD8((CUdeviceptr)(uintptr_t)buf, 0, 1), CUDA_ERROR_ILLEGAL_ADDRESS, "device write to read-only registered memory: ILLEGAL_ADDRESS");
  CK(cuMemHostUnregister(buf));
  free(buf);
}

/* ---- VMM ---- */

static void vmm_prop(CUmemAllocationProp *prop, int dev, int fd_handles)
{
  memset(prop, 0, sizeof *prop);
  prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop->location.id = dev;
  if (fd_handles)
    prop->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
}

static void test_vmm(void)
{
  CUmemAllocationProp prop;
  vmm_prop(&prop, 0, 1);
  size_t g = 0;
  CK(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  is(g, 2 * MiB, "minimum granularity 2 MiB");
  CK(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  is(g, 2 * MiB, "recommended granularity 2 MiB");

  CUdeviceptr va, va2;
  is(cuMemAddressReserve(&va, MiB, 0, 0, 0), CUDA_ERROR_INVALID_VALUE, "reserve 1 MiB: INVALID_VALUE");
  is(cuMemAddressReserve(&va, 8 * MiB, 3 * MiB, 0, 0), CUDA_ERROR_INVALID_VALUE, "alignment not a power of two: INVALID_VALUE");
  CK(cuMemAddressReserve(&va, 8 * MiB, 4 * MiB, 0, 0));
  is(va % (4 * MiB), 0, "reservation honours the alignment");

  size_t f0 = free_mem();
  CUmemGenericAllocationHandle h, h_nofd, h_imp, h_ret;
  is(cuMemCreate(&h, MiB, &prop, 0), CUDA_ERROR_INVALID_VALUE, "cuMemCreate of 1 MiB: INVALID_VALUE");
  prop.location.id = 7;
  is(cuMemCreate(&h, 2 * MiB, &prop, 0), CUDA_ERROR_INVALID_DEVICE, "cuMemCreate on device 7: INVALID_DEVICE");
  prop.location.id = 0;
  is(cuMemCreate(&h, (size_t)2 << 30, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY, "cuMemCreate beyond capacity: OUT_OF_MEMORY");
  CK(cuMemCreate(&h, 2 * MiB, &prop, 0));
  is(f0 - free_mem(), 2 * MiB, "a handle counts against capacity");

  is(cuMemMap(va + MiB, 2 * MiB, 0, h, 0), CUDA_ERROR_INVALID_VALUE, "map at an unaligned address: INVALID_VALUE");
  is(cuMemMap(va, 2 * MiB, 4096, h, 0), CUDA_ERROR_INVALID_VALUE, "map with an offset: INVALID_VALUE");
  is(cuMemMap(va + 8 * MiB, 2 * MiB, 0, h, 0), CUDA_ERROR_INVALID_VALUE, "map outside the reservation: INVALID_VALUE");
  CK(cuMemMap(va, 2 * MiB, 0, h, 0));
  CK(cuMemMap(va + 2 * MiB, 2 * MiB, 0, h, 0));
  is(cuMemMap(va, 2 * MiB, 0, h, 0), CUDA_ERROR_INVALID_VALUE, "map over an existing mapping: INVALID_VALUE");
  is(cuMemsetD8(va, 1, 16), CUDA_ERROR_ILLEGAL_ADDRESS, "memset before cuMemSetAccess: ILLEGAL_ADDRESS");
  CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  is(cuMemSetAccess(va, 6 * MiB, &acc, 1), CUDA_ERROR_INVALID_VALUE, "set access on a partly unmapped range: INVALID_VALUE");
  CK(cuMemSetAccess(va, 4 * MiB, &acc, 1));
  unsigned long long af = 0;
  CK(cuMemGetAccess(&af, &acc.location, va + 3 * MiB));
  is(af, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, "cuMemGetAccess: READWRITE");
  CUmemLocation loc1 = {CU_MEM_LOCATION_TYPE_DEVICE, 1};
  CK(cuMemGetAccess(&af, &loc1, va));
  is(af, CU_MEM_ACCESS_FLAGS_PROT_NONE, "no access granted to device 1");

  memset((void *)(uintptr_t)va, 0x3c, 4096);
  ok(all_bytes((void *)(uintptr_t)(va + 2 * MiB), 0x3c, 4096), "the handle mapped twice shows the same bytes");
  CK(cuMemsetD8(va + 2 * MiB + 100, 0x77, 1));
  is(((unsigned char *)(uintptr_t)va)[100], 0x77, "and writes through either mapping");
  CK(cuMemsetD32(va, 0xabababab, 2 * MiB / 4 * 2));
  pass("a memset spanning two adjacent mappings works");

  CUdeviceptr base = 0;
  size_t size = 0;
  CK(cuMemGetAddressRange(&base, &size, va + 3 * MiB));
  is(base, va + 2 * MiB, "address range of a VMM mapping: its base");
  is(size, 2 * MiB, "address range of a VMM mapping: its size");
  CK(cuPointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, va + 3 * MiB));
  is(base, va, "RANGE_START_ADDR of VMM memory is the reservation");
  CUipcMemHandle ih;
  is(cuIpcGetMemHandle(&ih, va), CUDA_ERROR_INVALID_VALUE, "legacy IPC of VMM memory: INVALID_VALUE");

  is(cuMemUnmap(va, MiB), CUDA_ERROR_INVALID_VALUE, "unmap part of a mapping: INVALID_VALUE");
  is(cuMemAddressFree(va, 8 * MiB), CUDA_ERROR_INVALID_VALUE, "free a reservation with mappings: INVALID_VALUE");

  /* Retain and properties. */
  CK(cuMemRetainAllocationHandle(&h_ret, (void *)(uintptr_t)(va + 5)));
  ok(h_ret == h, "retain gives the same handle");
  CK(cuMemRelease(h_ret));
  CUmemAllocationProp got;
  CK(cuMemGetAllocationPropertiesFromHandle(&got, h));
  is(got.location.id, 0, "properties: device 0");
  is(got.requestedHandleTypes, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, "properties: handle types");

  /* Released while still mapped: the memory stays until unmapped. */
  CUmemGenericAllocationHandle h3;
  CUdeviceptr va3;
  vmm_prop(&prop, 0, 0);
  size_t fb = free_mem();
  CK(cuMemAddressReserve(&va3, 2 * MiB, 0, 0, 0));
  CK(cuMemCreate(&h3, 2 * MiB, &prop, 0));
  CK(cuMemMap(va3, 2 * MiB, 0, h3, 0));
  CK(cuMemRelease(h3));
  is(fb - free_mem(), 2 * MiB, "a released handle that is still mapped keeps its memory");
  CK(cuMemSetAccess(va3, 2 * MiB, &acc, 1));
  CK(cuMemsetD8(va3, 5, 64));
  ok(all_bytes((void *)(uintptr_t)va3, 5, 64), "and stays usable");
  CK(cuMemUnmap(va3, 2 * MiB));
  is(free_mem(), fb, "unmapping the released handle frees it");
  CK(cuMemAddressFree(va3, 2 * MiB));

  /* Export and import. */
  vmm_prop(&prop, 1, 0);
  CK(cuMemCreate(&h_nofd, 2 * MiB, &prop, 0));
  int fd = -1;
  is(cuMemExportToShareableHandle(&fd, h_nofd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
     CUDA_ERROR_INVALID_VALUE, "export without requesting the handle type: INVALID_VALUE");
  CK(cuMemRelease(h_nofd));
  CK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  ok(fd >= 0, "exported a file descriptor");
  size_t f1 = free_mem();
  CK(cuMemImportFromShareableHandle(&h_imp, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  close(fd);
  ok(h_imp != h, "import gives a new handle");
  is(free_mem(), f1, "importing in the same process does not count twice");
  CK(cuMemAddressReserve(&va2, 2 * MiB, 0, 0, 0));
  CK(cuMemMap(va2, 2 * MiB, 0, h_imp, 0));
  CK(cuMemSetAccess(va2, 2 * MiB, &acc, 1));
  is(((unsigned char *)(uintptr_t)va2)[100], 0xab, "the imported handle shows the exporter's bytes");

  /* Physical memory lives until released and unmapped everywhere. */
  simcuda_live l;
  CK(cuMemRelease(h));
  is(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE, "release twice: INVALID_VALUE");
  is(f0 - free_mem(), 2 * MiB, "released but mapped: still used");
  ok(((unsigned char *)(uintptr_t)va)[0] == 0xab, "still readable");
  CK(cuMemUnmap(va, 2 * MiB));
  CK(cuMemUnmap(va + 2 * MiB, 2 * MiB));
  is(f0 - free_mem(), 2 * MiB, "imported handle keeps the memory");
  CK(cuMemUnmap(va2, 2 * MiB));
  simcuda_live_get(&l);
  is(l.vmm_handles, 1, "one handle left (the imported one)");
  CK(cuMemRelease(h_imp));
  is(free_mem(), f0, "released and unmapped everywhere: capacity back");
  CK(cuMemAddressFree(va, 8 * MiB));
  CK(cuMemAddressFree(va2, 2 * MiB));
  is(cuMemAddressFree(va2, 2 * MiB), CUDA_ERROR_INVALID_VALUE, "free a reservation twice: INVALID_VALUE");
  simcuda_live_get(&l);
  ok(l.vmm_handles == 0 && l.vmm_mappings == 0 && l.vmm_reservations == 0, "no VMM objects left");
}

/* ---- IPC ---- */

static void test_ipc(void)
{
  CUdeviceptr a, opened;
  CK(cuMemAlloc(&a, 100000));
  memset((void *)(uintptr_t)a, 0x21, 100000);
  CUipcMemHandle h, h2;
  CK(cuIpcGetMemHandle(&h, a));
  CK(cuIpcGetMemHandle(&h2, a + 4000));
  ok(memcmp(&h, &h2, sizeof h) == 0, "an interior pointer gives the allocation's handle");
  is(cuIpcOpenMemHandle(&opened, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_ERROR_INVALID_CONTEXT,
     "opening in the exporting process: INVALID_CONTEXT");
  CUipcMemHandle junk;
  memset(&junk, 0x42, sizeof junk);
  is(cuIpcOpenMemHandle(&opened, junk, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_ERROR_INVALID_VALUE,
     "garbage handle: INVALID_VALUE");
  CUdeviceptr pool;
  CK(cuMemAllocAsync(&pool, 4096, NULL));
  is(cuIpcGetMemHandle(&h2, pool), CUDA_ERROR_INVALID_VALUE, "legacy IPC of pool memory: INVALID_VALUE");
  CK(cuMemFreeAsync(pool, NULL));
  CK(cuStreamSynchronize(NULL));

  int to_child[2], from_child[2];
  if (pipe(to_child) != 0 || pipe(from_child) != 0) {
    skip(6, "pipe failed");
    return;
  }
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    /* Child: bit i of the result reports check i failed. */
    int bad = 0;
    CUipcMemHandle ch;
    CUdeviceptr p = 0, p2 = 0;
    if (read(to_child[0], &ch, sizeof ch) != (ssize_t)sizeof ch)
      _exit(100);
    if (cuIpcOpenMemHandle(&p, ch, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != CUDA_SUCCESS)
      bad |= 1;
    else {
      if (!all_bytes((void *)(uintptr_t)p, 0x21, 100000))
        bad |= 2;
      if (cuMemsetD8(p + 50000, 0x99, 50000) != CUDA_SUCCESS)
        bad |= 4;
      if (cuIpcOpenMemHandle(&p2, ch, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != CUDA_SUCCESS || p2 != p)
        bad |= 8;
      size_t sz = 0;
      if (cuMemGetAddressRange(NULL, &sz, p + 10) != CUDA_SUCCESS || sz != 100000)
        bad |= 16;
      if (cuIpcCloseMemHandle(p) != CUDA_SUCCESS || cuIpcCloseMemHandle(p) != CUDA_SUCCESS)
        bad |= 32;
      if (cuIpcCloseMemHandle(p) != CUDA_ERROR_INVALID_VALUE)
        bad |= 64;
    }
    if (write(from_child[1], &bad, sizeof bad) != (ssize_t)sizeof bad)
      _exit(101);
    _exit(0);
  }
  ssize_t wn = write(to_child[1], &h, sizeof h);
  int bad = -1;
  ssize_t rn = read(from_child[0], &bad, sizeof bad);
  int status = 0;
  waitpid(pid, &status, 0);
  close(to_child[0]);
  close(to_child[1]);
  close(from_child[0]);
  close(from_child[1]);
  ok(wn == (ssize_t)sizeof h && rn == (ssize_t)sizeof bad && WIFEXITED(status) && WEXITSTATUS(status) == 0,
     "child ran");
  is(bad & 1, 0, "child opened the handle");
  is(bad & 2, 0, "child read what the parent wrote");
  is(bad & (4 | 16), 0, "child wrote through its mapping; its address range is the allocation's");
  is(bad & (8 | 32 | 64), 0, "child: second open returns the same pointer; each open needs a close");
  ok(all_bytes((void *)(uintptr_t)(a + 50000), 0x99, 50000) && all_bytes((void *)(uintptr_t)a, 0x21, 50000),
     "parent sees the child's write");
  CK(cuMemFree(a));
}

/* ---- the end ---- */

static void test_live_report(void)
{
  simcuda_live l;
  simcuda_live_get(&l);
  CUdeviceptr p;
  CK(cuMemAlloc(&p, 100));
  is(simcuda_live_count(), 1, "one live object");
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  simcuda_live_report(f);
  fclose(f);
  like(text, "device allocation", "report lists the allocation");
  free(text);
  CK(cuMemFree(p));

  /* Reset destroys the primary context with its allocations. */
  CK(cuCtxSetCurrent(pctx1));
  CK(cuMemAlloc(&p, 100));
  CK(cuDevicePrimaryCtxReset(dev1));
  int active = 1;
  unsigned flags;
  CK(cuDevicePrimaryCtxGetState(dev1, &flags, &active));
  is(active, 0, "primary context inactive after reset");
  is(simcuda_live_count(), 0, "reset freed the allocation");
  is(cuMemAlloc(&p, 100), CUDA_ERROR_CONTEXT_IS_DESTROYED, "the reset context, still current: CONTEXT_IS_DESTROYED");
  is(cuDevicePrimaryCtxRelease(dev1), CUDA_ERROR_INVALID_CONTEXT, "release an inactive primary context: INVALID_CONTEXT");
  CK(cuCtxSetCurrent(NULL));
  CK(cuDevicePrimaryCtxRelease(dev0));
  is(simcuda_live_count(), 0, "nothing live at the end");
  text = NULL;
  f = open_memstream(&text, &len);
  simcuda_live_report(f);
  fclose(f);
  like(text, "0 live objects", "report says so");
  free(text);
  is(simcuda_reset(), 0, "simcuda_reset with nothing live");
}

int main(void)
{
  if (dlsym(RTLD_DEFAULT, "simcuda_calls") == NULL)
    tap_skip_all("not running on simcuda");
  /* The checks below assume the defaults, whatever the harness exports. */
  unsetenv("SIMCUDA_DEVICES");
  unsetenv("SIMCUDA_CAPACITY");
  unsetenv("SIMCUDA_QUEUE");
  if (simcuda_reset() != 0)
    tap_skip_all("simcuda_reset failed: objects live at start");
  tap_plan(788);
  test_init();
  test_errors();
  test_proc_address();
  test_devices();
  test_contexts();
  test_counters_faults();
  test_memory();
  test_queue();
  test_stream_run();
  test_event_query();
  test_reuse_check();
  test_legacy_order();
  test_destroyed_stream();
  test_stream_entries();
  test_stream_threads();
  test_host();
  test_vmm();
  test_ipc();
  test_live_report();
  return tap_done();
}
