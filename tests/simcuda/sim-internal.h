/* sim-internal.h: what the files of simcuda share.
 *
 * simcuda is split by concern: sim-core.c (entry table, counters, faults,
 * init, errors, cuGetProcAddress, live report), sim-ctx.c (devices and
 * contexts), sim-mem.c (the address-region registry, device and pinned host
 * memory, copies and fills), sim-stream.c (streams, events, the work queue,
 * the ordering between streams and the controls about it), sim-vmm.c
 * (virtual memory management), sim-ipc.c (legacy IPC) and sim-managed.c
 * (managed memory, prefetch and advice).  This header holds the list of
 * entry points, from which sim-core.c builds its table and every file its
 * entry hook, and the few data structures that more than one file has to
 * see.
 *
 * Locking: one recursive mutex guards all state.  It is recursive because a
 * host function run from a queue may call back into the driver, and a
 * synchronizing entry point runs queued work while holding the lock.
 */
#ifndef SIMCUDA_SIM_INTERNAL_H
#define SIMCUDA_SIM_INTERNAL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Every declaration cuda.h makes is an entry point simcuda may define, so
 * they are all given default visibility; the library itself is built with
 * -fvisibility=hidden so only these and the simcuda_* controls are exported. */
#pragma GCC visibility push(default)
#include <cuda.h>
#include "simcuda.h"
#pragma GCC visibility pop

#define SIM_API __attribute__((visibility("default")))

#define SIM_MAX_DEVICES 8
#define SIM_VERSION 13000
/* Granularity of cuMemCreate/cuMemMap, as on current GPUs. */
#define SIM_VMM_GRANULARITY ((size_t)2 << 20)
/* Device allocations are accounted in units of this many bytes. */
#define SIM_ALLOC_ROUND ((size_t)512)

/* The entry points: X(base name, version it appeared in, flags).  The base
 * name is what cuGetProcAddress and the simcuda_* controls take; the symbol
 * defined for it is whatever cuda.h maps the name to (cuMemAlloc ->
 * cuMemAlloc_v2), i.e. the newest variant.  SIM_NOINIT: callable before
 * cuInit, as with the real driver. */
#define SIM_NOINIT 1
#define SIM_ENTRY_POINTS(X)                                                    \
  X(cuInit, 2000, SIM_NOINIT)                                                  \
  X(cuDriverGetVersion, 2020, SIM_NOINIT)                                      \
  X(cuGetErrorName, 6000, SIM_NOINIT)                                          \
  X(cuGetErrorString, 6000, SIM_NOINIT)                                        \
  X(cuGetProcAddress, 11030, SIM_NOINIT)                                       \
  X(cuDeviceGet, 2000, 0)                                                      \
  X(cuDeviceGetCount, 2000, 0)                                                 \
  X(cuDeviceGetName, 2000, 0)                                                  \
  X(cuDeviceGetAttribute, 2000, 0)                                             \
  X(cuDeviceTotalMem, 3020, 0)                                                 \
  X(cuDeviceGetUuid, 9020, 0)                                                  \
  X(cuDeviceGetPCIBusId, 4010, 0)                                              \
  X(cuDeviceGetByPCIBusId, 4010, 0)                                            \
  X(cuDeviceCanAccessPeer, 4000, 0)                                            \
  X(cuCtxCreate, 3020, 0)                                                      \
  X(cuCtxDestroy, 4000, 0)                                                     \
  X(cuCtxGetCurrent, 4000, 0)                                                  \
  X(cuCtxSetCurrent, 4000, 0)                                                  \
  X(cuCtxPushCurrent, 4000, 0)                                                 \
  X(cuCtxPopCurrent, 4000, 0)                                                  \
  X(cuCtxGetDevice, 2000, 0)                                                   \
  X(cuCtxGetId, 12000, 0)                                                      \
  X(cuCtxGetFlags, 7000, 0)                                                    \
  X(cuCtxSynchronize, 2000, 0)                                                 \
  X(cuCtxEnablePeerAccess, 4000, 0)                                            \
  X(cuCtxDisablePeerAccess, 4000, 0)                                           \
  X(cuDevicePrimaryCtxRetain, 7000, 0)                                         \
  X(cuDevicePrimaryCtxRelease, 11000, 0)                                       \
  X(cuDevicePrimaryCtxGetState, 7000, 0)                                       \
  X(cuDevicePrimaryCtxReset, 11000, 0)                                         \
  X(cuDevicePrimaryCtxSetFlags, 11000, 0)                                      \
  X(cuMemGetInfo, 3020, 0)                                                     \
  X(cuMemAlloc, 3020, 0)                                                       \
  X(cuMemFree, 3020, 0)                                                        \
  X(cuMemGetAddressRange, 3020, 0)                                             \
  X(cuPointerGetAttribute, 4000, 0)                                            \
  X(cuMemcpy, 4000, 0)                                                         \
  X(cuMemcpyAsync, 4000, 0)                                                    \
  X(cuMemcpyHtoD, 3020, 0)                                                     \
  X(cuMemcpyDtoH, 3020, 0)                                                     \
  X(cuMemcpyDtoD, 3020, 0)                                                     \
  X(cuMemcpyHtoDAsync, 3020, 0)                                                \
  X(cuMemcpyDtoHAsync, 3020, 0)                                                \
  X(cuMemcpyDtoDAsync, 3020, 0)                                                \
  X(cuMemsetD8, 3020, 0)                                                       \
  X(cuMemsetD16, 3020, 0)                                                      \
  X(cuMemsetD32, 3020, 0)                                                      \
  X(cuMemsetD8Async, 3020, 0)                                                  \
  X(cuMemsetD16Async, 3020, 0)                                                 \
  X(cuMemsetD32Async, 3020, 0)                                                 \
  X(cuMemAllocAsync, 11020, 0)                                                 \
  X(cuMemFreeAsync, 11020, 0)                                                  \
  X(cuMemHostAlloc, 2020, 0)                                                   \
  X(cuMemAllocHost, 3020, 0)                                                   \
  X(cuMemFreeHost, 2000, 0)                                                    \
  X(cuMemHostGetDevicePointer, 3020, 0)                                        \
  X(cuMemHostRegister, 6050, 0)                                                \
  X(cuMemHostUnregister, 4000, 0)                                              \
  X(cuMemHostGetFlags, 2030, 0)                                                \
  X(cuStreamCreate, 2000, 0)                                                   \
  X(cuStreamDestroy, 4000, 0)                                                  \
  X(cuStreamSynchronize, 2000, 0)                                              \
  X(cuStreamQuery, 2000, 0)                                                    \
  X(cuStreamIsCapturing, 10000, 0)                                             \
  X(cuStreamWaitEvent, 3020, 0)                                                \
  X(cuStreamGetCtx, 9020, 0)                                                   \
  X(cuStreamGetFlags, 5050, 0)                                                 \
  X(cuThreadExchangeStreamCaptureMode, 10010, 0)                              \
  X(cuEventCreate, 2000, 0)                                                    \
  X(cuEventDestroy, 4000, 0)                                                   \
  X(cuEventRecord, 2000, 0)                                                    \
  X(cuEventSynchronize, 2000, 0)                                               \
  X(cuEventQuery, 2000, 0)                                                     \
  X(cuEventElapsedTime, 2000, 0)                                               \
  X(cuLaunchHostFunc, 10000, 0)                                                \
  X(cuIpcGetMemHandle, 4010, 0)                                                \
  X(cuIpcOpenMemHandle, 4010, 0)                                               \
  X(cuIpcCloseMemHandle, 4010, 0)                                              \
  X(cuMemGetAllocationGranularity, 10020, 0)                                   \
  X(cuMemAddressReserve, 10020, 0)                                             \
  X(cuMemAddressFree, 10020, 0)                                                \
  X(cuMemCreate, 10020, 0)                                                     \
  X(cuMemRelease, 10020, 0)                                                    \
  X(cuMemMap, 10020, 0)                                                        \
  X(cuMemUnmap, 10020, 0)                                                      \
  X(cuMemSetAccess, 10020, 0)                                                  \
  X(cuMemGetAccess, 10020, 0)                                                  \
  X(cuMemExportToShareableHandle, 10020, 0)                                    \
  X(cuMemImportFromShareableHandle, 10020, 0)                                  \
  X(cuMemGetAllocationPropertiesFromHandle, 10020, 0)                          \
  X(cuMemRetainAllocationHandle, 11000, 0)                                     \
  X(cuMemAllocManaged, 6000, 0)                                                \
  X(cuMemPrefetchAsync, 8000, 0)                                               \
  X(cuMemAdvise, 8000, 0)

enum sim_ep {
#define SIM_X_ENUM(name, since, flags) SIM_EP_##name,
  SIM_ENTRY_POINTS(SIM_X_ENUM)
#undef SIM_X_ENUM
  SIM_EP_COUNT
};

/* The entry hook.  Counts the call, applies an armed fault, checks cuInit,
 * and on success returns with the lock held. */
CUresult sim_enter(enum sim_ep ep);
void sim_lock(void);
void sim_unlock(void);
static inline CUresult sim_unlock_ret(CUresult r) { sim_unlock(); return r; }

/* Every entry point is `SIM_BEGIN(name); return SIM_END(body(...));` so the
 * hook and the lock are uniform. */
#define SIM_BEGIN(name)                                                        \
  do {                                                                         \
    CUresult sim_r_ = sim_enter(SIM_EP_##name);                                \
    if (sim_r_ != CUDA_SUCCESS)                                                \
      return sim_r_;                                                           \
  } while (0)
#define SIM_END(expr) sim_unlock_ret(expr)

/* Older ABI variants, exported under their own symbol names (the C names
 * cuda.h uses for them are the newest variants). */
CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult sim_cuEventElapsedTime_v1(float *ms, CUevent start, CUevent end) __asm__("cuEventElapsedTime");
CUresult sim_cuGetProcAddress_v1(const char *symbol, void **pfn, int cudaVersion,
                                 cuuint64_t flags) __asm__("cuGetProcAddress");
#if CUDA_VERSION >= 13000
/* cuda.h 13 gives the plain names to the CUmemLocation variants; the
 * CUdevice ones of CUDA 8.0 .. 12.1 keep their symbols (sim-managed.c). */
CUresult sim_cuMemPrefetchAsync_v1(CUdeviceptr p, size_t count, CUdevice dst,
                                   CUstream s) __asm__("cuMemPrefetchAsync");
CUresult sim_cuMemAdvise_v1(CUdeviceptr p, size_t count, CUmem_advise advice,
                            CUdevice dev) __asm__("cuMemAdvise");
#endif

/* ---- configuration (sim-core.c) ---- */
extern int sim_device_count;
extern int sim_queue_mode;
extern int sim_pageable;             /* SIMCUDA_PAGEABLE: 0, 1 (HMM), 2 (ATS) */
extern size_t sim_managed_capacity;  /* SIMCUDA_MANAGED_CAPACITY */
size_t sim_round_up(size_t v, size_t to);

/* ---- devices and contexts (sim-ctx.c) ---- */
struct sim_stream;

struct sim_ctx {
  struct sim_ctx *next;           /* registry of live contexts */
  unsigned long long id;          /* never reused, see cuCtxGetId */
  int dev;
  int primary;                    /* the device's primary context */
  int primary_refs;               /* retain count of a primary context */
  unsigned flags;
  unsigned peer_mask;             /* devices peer access was enabled to */
  struct sim_stream *null_stream; /* the context's default stream */
};

struct sim_device {
  size_t capacity;
  size_t used;
  struct sim_ctx *primary;
};
extern struct sim_device sim_devices[SIM_MAX_DEVICES];

int sim_valid_device(CUdevice dev);
/* The context current to the calling thread; NULL with *err set when there
 * is none or it was destroyed. */
struct sim_ctx *sim_ctx_current(CUresult *err);
/* `c` when it is a live, active context, else NULL. */
struct sim_ctx *sim_ctx_lookup(CUcontext c);
void sim_ctx_each(void (*fn)(struct sim_ctx *, void *), void *arg);
size_t sim_ctx_live_user(void);
void sim_ctx_report(FILE *f);

/* ---- address regions (sim-mem.c) ---- */
enum sim_region_kind {
  SIM_R_DEVICE,    /* cuMemAlloc / cuMemAllocAsync */
  SIM_R_HOST,      /* cuMemHostAlloc / cuMemAllocHost */
  SIM_R_REGISTERED,/* cuMemHostRegister */
  SIM_R_VMM,       /* a cuMemMap mapping */
  SIM_R_IPC,       /* a cuIpcOpenMemHandle mapping */
  SIM_R_MANAGED    /* cuMemAllocManaged */
};

struct sim_phys;
struct sim_resv;

struct sim_region {
  struct sim_region *next;
  enum sim_region_kind kind;
  uintptr_t base;
  size_t size;                    /* what the caller asked for */
  size_t map_size;                /* bytes mmapped (page multiple), 0: none */
  size_t accounted;               /* bytes counted in the device's used */
  int dev;
  struct sim_ctx *ctx;            /* owner; compare ctx_id before trusting */
  unsigned long long ctx_id;
  unsigned long long buffer_id;
  unsigned flags;                 /* host alloc/register flags */
  int fd;                         /* backing memfd of SIM_R_DEVICE, or -1 */
  ino_t ino;                      /* its inode: identifies it in IPC handles */
  int async;                      /* from cuMemAllocAsync */
  int free_pending;               /* cuMemFreeAsync queued */
  /* SIM_R_VMM */
  struct sim_phys *phys;
  struct sim_resv *resv;
  unsigned char access[SIM_MAX_DEVICES];
  /* SIM_R_IPC */
  int refs;
  pid_t ipc_pid;
  /* SIM_R_MANAGED (sim-managed.c) */
  simcuda_managed_range m;
};

unsigned long long sim_next_buffer_id(void);
struct sim_region *sim_region_new(enum sim_region_kind kind, uintptr_t base, size_t size);
/* A region of fresh anonymous pages (host-backed memory of any kind), its
 * map_size set; NULL when memory ran out. */
struct sim_region *sim_region_mapped(enum sim_region_kind kind, size_t size);
void sim_region_unlink(struct sim_region *r);
/* The region containing addr, of any kind. */
struct sim_region *sim_region_find(uintptr_t addr);
/* The first region overlapping [addr, addr+size). */
struct sim_region *sim_region_overlap(uintptr_t addr, size_t size, int kind_mask);
struct sim_region *sim_region_first(void);
#define SIM_KIND(k) (1 << (k))
/* Checks [addr, addr+size) is device-accessible memory from device `dev`
 * (-1: any device): CUDA_SUCCESS, CUDA_ERROR_INVALID_VALUE when some byte is
 * in no region, CUDA_ERROR_ILLEGAL_ADDRESS when a VMM mapping lacks access. */
CUresult sim_check_device_range(uintptr_t addr, size_t size, int write, int dev);
/* Frees a device allocation region (not IPC/VMM). */
void sim_device_free(struct sim_region *r);
int sim_memfd(const char *name, size_t size);

/* ---- streams and the work queue (sim-stream.c) ---- */
enum sim_work_kind { SIM_W_MEMSET, SIM_W_MEMCPY, SIM_W_HOSTFN, SIM_W_RECORD, SIM_W_WAIT, SIM_W_FREE };

struct sim_event;

/* A point in one stream's order: the items of stream `stream` (an id, see
 * sim_stream.id) up to and including position `seq`. */
struct sim_point {
  unsigned long long stream, seq;
};

/* What a stream's next item is ordered after, as one point per other stream
 * (a vector clock): an item X of stream T comes before it when X's position
 * is at most the point kept for T.  Built from cuStreamWaitEvent and the
 * legacy default stream's rules; an item's own stream orders it implicitly. */
struct sim_clock {
  struct sim_point *p;
  size_t n, cap;
};

struct sim_work {
  struct sim_work *next;
  enum sim_work_kind kind;
  uintptr_t dst, src;             /* src: a host or device address */
  size_t count;                   /* bytes, or elements for a memset */
  unsigned value;
  int elem;                       /* memset element size */
  int dst_dev, src_dev;           /* -2: host side, not checked */
  CUhostFn fn;
  void *user;
  struct sim_event *event;
  unsigned long long seq;         /* record: event's record count; free: buffer id */
  unsigned long long pos;         /* position in its stream, from 1 */
  struct sim_point wait;          /* SIM_W_WAIT: the record waited for */
  struct sim_point *deps;         /* legacy-stream ordering: run these first */
  size_t ndeps;
};

struct sim_stream {
  struct sim_stream *next;        /* registry */
  struct sim_ctx *ctx;
  unsigned long long id;          /* never reused; names the stream in points */
  unsigned flags;
  int is_null;                    /* a default stream, not created by the user */
  int per_thread;                 /* the per-thread default stream of `owner` */
  int destroyed;                  /* cuStreamDestroy'ed, queued work still to run */
  pthread_t owner;
  struct sim_work *head, *tail;
  size_t queued;
  unsigned long long last_pos;    /* position of the newest item queued */
  unsigned long long done_pos;    /* position of the newest item run */
  struct sim_clock clock;         /* what its next item is ordered after */
  CUresult error;                 /* first error of work run since last sync */
  int capturing;                  /* simcuda_stream_set_capturing: 1 capturing, 2 invalidated */
};

struct sim_stream *sim_stream_new(struct sim_ctx *ctx, unsigned flags, int is_null);
/* The name of the entry point the calling thread is in. */
const char *sim_current_entry(void);
/* Resolves a CUstream: 0 and CU_STREAM_LEGACY give the current context's
 * legacy default stream, CU_STREAM_PER_THREAD the calling thread's default
 * stream of the current context (created on first use). */
struct sim_stream *sim_stream_resolve(CUstream h, CUresult *err);
/* Queues w (taking ownership); out of queue mode, runs the stream at once. */
void sim_stream_submit(struct sim_stream *s, struct sim_work *w);
/* Runs all queued work of s; returns and clears its recorded error. */
CUresult sim_stream_drain(struct sim_stream *s);
/* Runs all queued work of every stream of ctx (the synchronizing calls). */
CUresult sim_ctx_drain(struct sim_ctx *ctx, int blocking_only);
/* Runs queued work without collecting errors (implicit synchronization). */
void sim_ctx_run(struct sim_ctx *ctx, int blocking_only);
void sim_device_run(int dev);
void sim_ctx_release_objects(struct sim_ctx *ctx);
size_t sim_stream_live(void);
size_t sim_event_live(void);
void sim_stream_report(FILE *f);
size_t sim_queued_total(void);

/* ---- VMM (sim-vmm.c) ---- */
void sim_vmm_live(simcuda_live *l);
void sim_vmm_report(FILE *f);
/* The reservation containing addr, as (base, size); 0 if none. */
int sim_vmm_resv_range(uintptr_t addr, uintptr_t *base, size_t *size);
unsigned long long sim_vmm_handle_types(const struct sim_region *r);

#endif
