/* sim-core.c: the entry table and everything that is about entry points as
 * such rather than about what they do.
 *
 * It owns the table built from SIM_ENTRY_POINTS (base name, function, call
 * counter, fault rule), the hook every entry point starts with, the global
 * lock, the configuration read from the environment, cuInit and
 * cuDriverGetVersion, the error names and strings, cuGetProcAddress, and the
 * simcuda_* control functions including the live-object report (those that
 * step streams and check their ordering are in sim-stream.c).  Keeping
 * counting and fault injection in this one hook is what makes every entry
 * point behave the same way under the controls.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "sim-internal.h"

/* ---- lock ---- */

static pthread_mutex_t sim_mutex = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;

void sim_lock(void) { pthread_mutex_lock(&sim_mutex); }
void sim_unlock(void) { pthread_mutex_unlock(&sim_mutex); }

/* Tests fork (IPC).  Holding the lock across fork keeps the child's copy of
 * the state consistent; the child gets a fresh mutex because a recursive
 * mutex remembers its owner's thread id, which the child's thread lacks. */
static void fork_prepare(void) { sim_lock(); }
static void fork_parent(void) { sim_unlock(); }
static void fork_child(void)
{
  pthread_mutex_t fresh = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
  sim_mutex = fresh;
}

/* ---- configuration ---- */

int sim_device_count = 2;
int sim_queue_mode;
int sim_pageable;
size_t sim_managed_capacity;
static int sim_initialized;
static int sim_report_at_exit;
/* SIMCUDA_DRIVER_VERSION and SIMCUDA_HIDE let a test pose as an older or
 * incomplete driver, to check how a program handles one. */
static int sim_driver_version = SIM_VERSION;
static char sim_hidden[1024];

size_t sim_round_up(size_t v, size_t to) { return (v + to - 1) / to * to; }

static size_t parse_size(const char *s, size_t dflt)
{
  if (!s || !*s)
    return dflt;
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  switch (toupper((unsigned char)*end)) {
  case 'K': v <<= 10; break;
  case 'M': v <<= 20; break;
  case 'G': v <<= 30; break;
  case 'T': v <<= 40; break;
  default: break;
  }
  return v ? (size_t)v : dflt;
}

static void read_environment(void)
{
  const char *d = getenv("SIMCUDA_DEVICES");
  int n = d && *d ? atoi(d) : 2;
  if (n < 0)
    n = 0;
  if (n > SIM_MAX_DEVICES)
    n = SIM_MAX_DEVICES;
  sim_device_count = n;
  size_t cap = parse_size(getenv("SIMCUDA_CAPACITY"), (size_t)1 << 30);
  for (int i = 0; i < SIM_MAX_DEVICES; i++)
    sim_devices[i].capacity = cap;
  sim_managed_capacity = parse_size(getenv("SIMCUDA_MANAGED_CAPACITY"), 8 * cap);
  const char *pg = getenv("SIMCUDA_PAGEABLE");
  sim_pageable = pg && *pg ? atoi(pg) : 0;
  if (sim_pageable < 0 || sim_pageable > 2)
    sim_pageable = 0;
  const char *q = getenv("SIMCUDA_QUEUE");
  sim_queue_mode = q && *q && strcmp(q, "0") != 0;
  const char *r = getenv("SIMCUDA_REPORT");
  sim_report_at_exit = r && *r && strcmp(r, "0") != 0;
  const char *v = getenv("SIMCUDA_DRIVER_VERSION");
  sim_driver_version = v && *v ? atoi(v) : SIM_VERSION;
  const char *h = getenv("SIMCUDA_HIDE");
  snprintf(sim_hidden, sizeof sim_hidden, ",%s,", h ? h : "");
}

/* Whether SIMCUDA_HIDE (comma-separated base names) hides an entry point
 * from cuGetProcAddress. */
static int hidden(const char *symbol)
{
  char key[128];
  snprintf(key, sizeof key, ",%s,", symbol);
  return strstr(sim_hidden, key) != NULL;
}

static void report_at_exit(void)
{
  if (sim_report_at_exit)
    simcuda_live_report(stderr);
}

__attribute__((constructor)) static void sim_load(void)
{
  read_environment();
  atexit(report_at_exit);
  pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* ---- the entry table ---- */

enum { RULE_NONE, RULE_ONCE, RULE_FROM };

struct sim_entry {
  const char *name;
  void (*fn)(void);         /* the newest variant */
  int since;                /* CUDA version the entry point appeared in */
  int flags;
  unsigned long calls;
  struct { int mode; unsigned countdown; CUresult result; } fault;
};

static struct sim_entry sim_entries[SIM_EP_COUNT] = {
#define SIM_X_TABLE(n, since, fl) [SIM_EP_##n] = {#n, (void (*)(void))&n, since, fl, 0, {RULE_NONE, 0, CUDA_SUCCESS}},
  SIM_ENTRY_POINTS(SIM_X_TABLE)
#undef SIM_X_TABLE
};

/* Older ABI variants still handed out to callers asking for an older API
 * version, as the real cuGetProcAddress does: a program built against CUDA
 * 12.0 asking for "cuCtxCreate" must get the 3-argument function. */
static const struct { enum sim_ep ep; int newest_since; void (*older)(void); } sim_older[] = {
  {SIM_EP_cuCtxCreate, 12050, (void (*)(void))&cuCtxCreate_v2},
  {SIM_EP_cuEventElapsedTime, 12080, (void (*)(void))&sim_cuEventElapsedTime_v1},
  {SIM_EP_cuGetProcAddress, 12000, (void (*)(void))&sim_cuGetProcAddress_v1},
#if CUDA_VERSION >= 13000
  {SIM_EP_cuMemPrefetchAsync, 12020, (void (*)(void))&sim_cuMemPrefetchAsync_v1},
  {SIM_EP_cuMemAdvise, 12020, (void (*)(void))&sim_cuMemAdvise_v1},
#endif
};

/* Newer ABI variants with a name of their own in cuda.h, handed out from the
 * version they appeared in under the base name, as the real cuGetProcAddress
 * does. */
static const struct { enum sim_ep ep; int since; void (*newer)(void); } sim_newer[] = {
  {SIM_EP_cuStreamGetCtx, 12050, (void (*)(void))&cuStreamGetCtx_v2},
};

static int entry_index(const char *name)
{
  if (!name)
    return -1;
  for (int i = 0; i < SIM_EP_COUNT; i++)
    if (strcmp(sim_entries[i].name, name) == 0)
      return i;
  return -1;
}

/* The entry point the calling thread is in, for messages. */
static _Thread_local enum sim_ep current_ep;

const char *sim_current_entry(void)
{
  return sim_entries[current_ep].name;
}

CUresult sim_enter(enum sim_ep ep)
{
  struct sim_entry *e = &sim_entries[ep];
  sim_lock();
  current_ep = ep;
  e->calls++;
  if (e->fault.mode != RULE_NONE) {
    if (e->fault.countdown > 1) {
      e->fault.countdown--;
    } else {
      CUresult r = e->fault.result;
      if (e->fault.mode == RULE_ONCE)
        e->fault.mode = RULE_NONE;
      sim_unlock();
      return r;
    }
  }
  if (!(e->flags & SIM_NOINIT) && !sim_initialized) {
    sim_unlock();
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  return CUDA_SUCCESS;
}

/* ---- init and version ---- */

static CUresult do_init(unsigned flags)
{
  if (flags != 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (!sim_initialized) {
    /* Each device allocation keeps its memfd open so that it can be exported;
     * the default soft limit of 1024 descriptors would cap a test at about a
     * thousand live allocations. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
      rl.rlim_cur = rl.rlim_max;
      setrlimit(RLIMIT_NOFILE, &rl);
    }
  }
  /* Like the real driver, a failed cuInit leaves the driver uninitialized. */
  if (sim_device_count == 0)
    return CUDA_ERROR_NO_DEVICE;
  sim_initialized = 1;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuInit(unsigned int Flags)
{
  SIM_BEGIN(cuInit);
  return SIM_END(do_init(Flags));
}

static CUresult do_driver_version(int *v)
{
  if (!v)
    return CUDA_ERROR_INVALID_VALUE;
  *v = sim_driver_version;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDriverGetVersion(int *driverVersion)
{
  SIM_BEGIN(cuDriverGetVersion);
  return SIM_END(do_driver_version(driverVersion));
}

/* ---- errors ---- */

static const struct { CUresult code; const char *name, *desc; } sim_errors[] = {
#define E(c, d) {c, #c, d},
  E(CUDA_SUCCESS, "no error")
  E(CUDA_ERROR_INVALID_VALUE, "invalid argument")
  E(CUDA_ERROR_OUT_OF_MEMORY, "out of memory")
  E(CUDA_ERROR_NOT_INITIALIZED, "initialization error")
  E(CUDA_ERROR_DEINITIALIZED, "driver shutting down")
  E(CUDA_ERROR_PROFILER_DISABLED, "This indicates profiler is not initialized for this run.")
  E(CUDA_ERROR_PROFILER_NOT_INITIALIZED, "This error return is deprecated as of CUDA 5.0.")
  E(CUDA_ERROR_PROFILER_ALREADY_STARTED, "This error return is deprecated as of CUDA 5.0.")
  E(CUDA_ERROR_PROFILER_ALREADY_STOPPED, "This error return is deprecated as of CUDA 5.0.")
  E(CUDA_ERROR_STUB_LIBRARY, "This indicates that the CUDA driver that the application has loaded is a stub library.")
  E(CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER, "This indicates that the API call requires a newer CUDA driver than the one currently installed.")
  E(CUDA_ERROR_DEVICE_UNAVAILABLE, "This indicates that requested CUDA device is unavailable at the current time.")
  E(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected")
  E(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal")
  E(CUDA_ERROR_DEVICE_NOT_LICENSED, "This error indicates that the Grid license is not applied.")
  E(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid")
  E(CUDA_ERROR_INVALID_CONTEXT, "invalid device context")
  E(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "This indicated that the context being supplied as a parameter to the API call was already the active context.")
  E(CUDA_ERROR_MAP_FAILED, "mapping of buffer object failed")
  E(CUDA_ERROR_UNMAP_FAILED, "This indicates that an unmap or unregister operation has failed.")
  E(CUDA_ERROR_ARRAY_IS_MAPPED, "This indicates that the specified array is currently mapped and thus cannot be destroyed.")
  E(CUDA_ERROR_ALREADY_MAPPED, "resource already mapped")
  E(CUDA_ERROR_NO_BINARY_FOR_GPU, "This indicates that there is no kernel image available that is suitable for the device.")
  E(CUDA_ERROR_ALREADY_ACQUIRED, "This indicates that a resource has already been acquired.")
  E(CUDA_ERROR_NOT_MAPPED, "This indicates that a resource is not mapped.")
  E(CUDA_ERROR_NOT_MAPPED_AS_ARRAY, "This indicates that a mapped resource is not available for access as an array.")
  E(CUDA_ERROR_NOT_MAPPED_AS_POINTER, "This indicates that a mapped resource is not available for access as a pointer.")
  E(CUDA_ERROR_ECC_UNCORRECTABLE, "This indicates that an uncorrectable ECC error was detected during execution.")
  E(CUDA_ERROR_UNSUPPORTED_LIMIT, "This indicates that the CUlimit passed to the API call is not supported by the active device.")
  E(CUDA_ERROR_CONTEXT_ALREADY_IN_USE, "This indicates that the CUcontext passed to the API call can only be bound to a single CPU thread at a time but is already bound to a CPU thread.")
  E(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, "This indicates that peer access is not supported across the given devices.")
  E(CUDA_ERROR_INVALID_PTX, "This indicates that a PTX JIT compilation failed.")
  E(CUDA_ERROR_INVALID_GRAPHICS_CONTEXT, "This indicates an error with OpenGL or DirectX context.")
  E(CUDA_ERROR_NVLINK_UNCORRECTABLE, "This indicates that an uncorrectable NVLink error was detected during the execution.")
  E(CUDA_ERROR_JIT_COMPILER_NOT_FOUND, "This indicates that the PTX JIT compiler library was not found.")
  E(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, "This indicates that the provided PTX was compiled with an unsupported toolchain.")
  E(CUDA_ERROR_JIT_COMPILATION_DISABLED, "This indicates that the PTX JIT compilation was disabled.")
  E(CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY, "This indicates that the CUexecAffinityType passed to the API call is not supported by the active device.")
  E(CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC, "This indicates that the code to be compiled by the PTX JIT contains unsupported call to cudaDeviceSynchronize.")
  E(CUDA_ERROR_CONTAINED, "This indicates that an exception occurred on the device that is now contained by the GPU's error containment capability.")
  E(CUDA_ERROR_INVALID_SOURCE, "This indicates that the device kernel source is invalid.")
  E(CUDA_ERROR_FILE_NOT_FOUND, "This indicates that the file specified was not found.")
  E(CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND, "This indicates that a link to a shared object failed to resolve.")
  E(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, "This indicates that initialization of a shared object failed.")
  E(CUDA_ERROR_OPERATING_SYSTEM, "This indicates that an OS call failed.")
  E(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle")
  E(CUDA_ERROR_ILLEGAL_STATE, "This indicates that a resource required by the API call is not in a valid state to perform the requested operation.")
  E(CUDA_ERROR_LOSSY_QUERY, "This indicates an attempt was made to introspect an object in a way that would discard semantically important information.")
  E(CUDA_ERROR_NOT_FOUND, "named symbol not found")
  E(CUDA_ERROR_NOT_READY, "device not ready")
  E(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered")
  E(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "This indicates that a launch did not occur because it did not have appropriate resources.")
  E(CUDA_ERROR_LAUNCH_TIMEOUT, "This indicates that the device kernel took too long to execute.")
  E(CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING, "This error indicates a kernel launch that uses an incompatible texturing mode.")
  E(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "peer access is already enabled")
  E(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "peer access has not been enabled")
  E(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "This error indicates that the primary context for the specified device has already been initialized.")
  E(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed")
  E(CUDA_ERROR_ASSERT, "A device-side assert triggered during kernel execution.")
  E(CUDA_ERROR_TOO_MANY_PEERS, "This error indicates that the hardware resources required to enable peer access have been exhausted for one or more of the devices passed to cuCtxEnablePeerAccess().")
  E(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "part or all of the requested memory range is already mapped")
  E(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "pointer does not correspond to a registered memory region")
  E(CUDA_ERROR_HARDWARE_STACK_ERROR, "While executing a kernel, the device encountered a stack error.")
  E(CUDA_ERROR_ILLEGAL_INSTRUCTION, "While executing a kernel, the device encountered an illegal instruction.")
  E(CUDA_ERROR_MISALIGNED_ADDRESS, "While executing a kernel, the device encountered a load or store instruction on a memory address which is not aligned.")
  E(CUDA_ERROR_INVALID_ADDRESS_SPACE, "While executing a kernel, the device encountered an instruction which can only operate on memory locations in certain address spaces (global, shared, or local), but was supplied a memory address not belonging to an allowed address space.")
  E(CUDA_ERROR_INVALID_PC, "While executing a kernel, the device program counter wrapped its address space.")
  E(CUDA_ERROR_LAUNCH_FAILED, "An exception occurred on the device while executing a kernel.")
  E(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "This error indicates that the number of blocks launched per grid for a kernel that was launched via either cuLaunchCooperativeKernel or cuLaunchCooperativeKernelMultiDevice exceeds the maximum number of blocks as allowed by cuOccupancyMaxActiveBlocksPerMultiprocessor or cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags times the number of multiprocessors as specified by the device attribute CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT.")
  E(CUDA_ERROR_TENSOR_MEMORY_LEAK, "An exception occurred on the device while exiting a kernel using tensor memory: the tensor memory was not completely deallocated.")
  E(CUDA_ERROR_NOT_PERMITTED, "operation not permitted")
  E(CUDA_ERROR_NOT_SUPPORTED, "operation not supported")
  E(CUDA_ERROR_SYSTEM_NOT_READY, "This error indicates that the system is not yet ready to start any CUDA work.")
  E(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "This error indicates that there is a mismatch between the versions of the display driver and the CUDA driver.")
  E(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, "This error indicates that the system was upgraded to run with forward compatibility but the visible hardware detected by CUDA does not support this configuration.")
  E(CUDA_ERROR_MPS_CONNECTION_FAILED, "This error indicates that the MPS client failed to connect to the MPS control daemon or the MPS server.")
  E(CUDA_ERROR_MPS_RPC_FAILURE, "This error indicates that the remote procedural call between the MPS server and the MPS client failed.")
  E(CUDA_ERROR_MPS_SERVER_NOT_READY, "This error indicates that the MPS server is not ready to accept new MPS client requests.")
  E(CUDA_ERROR_MPS_MAX_CLIENTS_REACHED, "This error indicates that the hardware resources required to create MPS client have been exhausted.")
  E(CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED, "This error indicates the the hardware resources required to support device connections have been exhausted.")
  E(CUDA_ERROR_MPS_CLIENT_TERMINATED, "This error indicates that the MPS client has been terminated by the server.")
  E(CUDA_ERROR_CDP_NOT_SUPPORTED, "This error indicates that the module is using CUDA Dynamic Parallelism, but the current configuration, like MPS, does not support it.")
  E(CUDA_ERROR_CDP_VERSION_MISMATCH, "This error indicates that a module contains an unsupported interaction between different versions of CUDA Dynamic Parallelism.")
  E(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "This error indicates that the operation is not permitted when the stream is capturing.")
  E(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "This error indicates that the current capture sequence on the stream has been invalidated due to a previous error.")
  E(CUDA_ERROR_STREAM_CAPTURE_MERGE, "This error indicates that the operation would have resulted in a merge of two independent capture sequences.")
  E(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "This error indicates that the capture was not initiated in this stream.")
  E(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "This error indicates that the capture sequence contains a fork that was not joined to the primary stream.")
  E(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "This error indicates that a dependency would have been created which crosses the capture sequence boundary.")
  E(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "This error indicates a disallowed implicit dependency on a current capture sequence from cudaStreamLegacy.")
  E(CUDA_ERROR_CAPTURED_EVENT, "This error indicates that the operation is not permitted on an event which was last recorded in a capturing stream.")
  E(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "A stream capture sequence not initiated with the CU_STREAM_CAPTURE_MODE_RELAXED argument to cuStreamBeginCapture was passed to cuStreamEndCapture in a different thread.")
  E(CUDA_ERROR_TIMEOUT, "This error indicates that the timeout specified for the wait operation has lapsed.")
  E(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, "This error indicates that the graph update was not performed because it included changes which violated constraints specific to instantiated graph update.")
  E(CUDA_ERROR_EXTERNAL_DEVICE, "This indicates that an async error has occurred in a device outside of CUDA.")
  E(CUDA_ERROR_INVALID_CLUSTER_SIZE, "Indicates a kernel launch error due to cluster misconfiguration.")
  E(CUDA_ERROR_FUNCTION_NOT_LOADED, "Indiciates a function handle is not loaded when calling an API that requires a loaded function.")
  E(CUDA_ERROR_INVALID_RESOURCE_TYPE, "This error indicates one or more resources passed in are not valid resource types for the operation.")
  E(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, "This error indicates one or more resources are insufficient or non-applicable for the operation.")
  E(CUDA_ERROR_KEY_ROTATION, "This error indicates that an error happened during the key rotation sequence.")
  E(CUDA_ERROR_UNKNOWN, "unknown error")
#undef E
};

static CUresult error_lookup(CUresult error, const char **pStr, int want_name)
{
  if (!pStr)
    return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < sizeof sim_errors / sizeof sim_errors[0]; i++)
    if (sim_errors[i].code == error) {
      *pStr = want_name ? sim_errors[i].name : sim_errors[i].desc;
      return CUDA_SUCCESS;
    }
  *pStr = NULL;
  return CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuGetErrorName(CUresult error, const char **pStr)
{
  SIM_BEGIN(cuGetErrorName);
  return SIM_END(error_lookup(error, pStr, 1));
}

SIM_API CUresult cuGetErrorString(CUresult error, const char **pStr)
{
  SIM_BEGIN(cuGetErrorString);
  return SIM_END(error_lookup(error, pStr, 0));
}

/* ---- cuGetProcAddress ---- */

static CUresult get_proc(const char *symbol, void **pfn, int version, cuuint64_t flags,
                         CUdriverProcAddressQueryResult *status)
{
  if (!symbol || !pfn)
    return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
    return CUDA_ERROR_INVALID_VALUE;
  int i = entry_index(symbol);
  *pfn = NULL;
  if (i < 0 || hidden(symbol)) {
    if (status)
      *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
  }
  if (version < sim_entries[i].since) {
    if (status)
      *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
    return CUDA_ERROR_NOT_FOUND;
  }
  void (*fn)(void) = sim_entries[i].fn;
  for (size_t k = 0; k < sizeof sim_older / sizeof sim_older[0]; k++)
    if ((int)sim_older[k].ep == i && version < sim_older[k].newest_since)
      fn = sim_older[k].older;
  for (size_t k = 0; k < sizeof sim_newer / sizeof sim_newer[0]; k++)
    if ((int)sim_newer[k].ep == i && version >= sim_newer[k].since)
      fn = sim_newer[k].newer;
  /* The API hands functions out as void *; POSIX makes that work, ISO C
   * has no cast for it. */
  memcpy(pfn, &fn, sizeof *pfn);
  if (status)
    *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                  CUdriverProcAddressQueryResult *symbolStatus)
{
  SIM_BEGIN(cuGetProcAddress);
  return SIM_END(get_proc(symbol, pfn, cudaVersion, flags, symbolStatus));
}

SIM_API CUresult sim_cuGetProcAddress_v1(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
  SIM_BEGIN(cuGetProcAddress);
  return SIM_END(get_proc(symbol, pfn, cudaVersion, flags, NULL));
}

/* ---- controls ---- */

static int arm(const char *entry, unsigned nth, CUresult result, int mode)
{
  int i = entry_index(entry);
  if (i < 0)
    return -1;
  sim_lock();
  sim_entries[i].fault.mode = mode;
  sim_entries[i].fault.countdown = nth ? nth : 1;
  sim_entries[i].fault.result = result;
  sim_unlock();
  return 0;
}

SIM_API int simcuda_fail(const char *entry, unsigned nth, CUresult result)
{
  return arm(entry, nth, result, RULE_ONCE);
}

SIM_API int simcuda_fail_from(const char *entry, unsigned nth, CUresult result)
{
  return arm(entry, nth, result, RULE_FROM);
}

SIM_API void simcuda_fail_clear(void)
{
  sim_lock();
  for (int i = 0; i < SIM_EP_COUNT; i++)
    sim_entries[i].fault.mode = RULE_NONE;
  sim_unlock();
}

SIM_API unsigned long simcuda_calls(const char *entry)
{
  int i = entry_index(entry);
  if (i < 0)
    return 0;
  sim_lock();
  unsigned long n = sim_entries[i].calls;
  sim_unlock();
  return n;
}

SIM_API void simcuda_calls_reset(void)
{
  sim_lock();
  for (int i = 0; i < SIM_EP_COUNT; i++)
    sim_entries[i].calls = 0;
  sim_unlock();
}

SIM_API void simcuda_live_get(simcuda_live *out)
{
  if (!out)
    return;
  memset(out, 0, sizeof *out);
  sim_lock();
  for (struct sim_region *r = sim_region_first(); r; r = r->next) {
    switch (r->kind) {
    case SIM_R_DEVICE: out->device_allocs++; out->device_bytes += r->size; break;
    case SIM_R_MANAGED: out->managed_allocs++; out->managed_bytes += r->size; break;
    case SIM_R_HOST: out->host_allocs++; out->host_bytes += r->size; break;
    case SIM_R_REGISTERED: out->host_registered++; break;
    case SIM_R_VMM: out->vmm_mappings++; break;
    case SIM_R_IPC: out->ipc_opened++; break;
    }
  }
  sim_vmm_live(out);
  out->streams = sim_stream_live();
  out->events = sim_event_live();
  out->contexts = sim_ctx_live_user();
  sim_unlock();
}

SIM_API size_t simcuda_live_count(void)
{
  simcuda_live l;
  simcuda_live_get(&l);
  return l.device_allocs + l.managed_allocs + l.host_allocs + l.host_registered + l.vmm_handles + l.vmm_reservations +
         l.vmm_mappings + l.ipc_opened + l.streams + l.events + l.contexts;
}

static const char *region_kind_name(enum sim_region_kind k)
{
  switch (k) {
  case SIM_R_DEVICE: return "device allocation";
  case SIM_R_MANAGED: return "managed allocation";
  case SIM_R_HOST: return "pinned host allocation";
  case SIM_R_REGISTERED: return "registered host range";
  case SIM_R_VMM: return "VMM mapping";
  case SIM_R_IPC: return "IPC mapping";
  }
  return "?";
}

SIM_API void simcuda_live_report(FILE *f)
{
  if (!f)
    return;
  sim_lock();
  size_t n = simcuda_live_count();
  fprintf(f, "simcuda: %zu live object%s\n", n, n == 1 ? "" : "s");
  for (struct sim_region *r = sim_region_first(); r; r = r->next)
    fprintf(f, "simcuda:   %s 0x%llx size %zu device %d buffer %llu%s\n", region_kind_name(r->kind),
            (unsigned long long)r->base, r->size, r->dev, r->buffer_id,
            r->async ? " (cuMemAllocAsync)" : "");
  sim_vmm_report(f);
  sim_stream_report(f);
  sim_ctx_report(f);
  sim_unlock();
}

SIM_API int simcuda_set_capacity(size_t bytes)
{
  sim_lock();
  for (int i = 0; i < SIM_MAX_DEVICES; i++)
    if (sim_devices[i].used) {
      sim_unlock();
      return -1;
    }
  for (int i = 0; i < SIM_MAX_DEVICES; i++)
    sim_devices[i].capacity = bytes;
  sim_unlock();
  return 0;
}

SIM_API void simcuda_set_queue_mode(int on)
{
  sim_lock();
  sim_queue_mode = on != 0;
  sim_unlock();
}

SIM_API size_t simcuda_queued_work(void)
{
  sim_lock();
  size_t n = sim_queued_total();
  sim_unlock();
  return n;
}

SIM_API int simcuda_reset(void)
{
  sim_lock();
  if (simcuda_live_count() != 0) {
    sim_unlock();
    return -1;
  }
  simcuda_fail_clear();
  simcuda_calls_reset();
  read_environment();
  sim_unlock();
  return 0;
}
