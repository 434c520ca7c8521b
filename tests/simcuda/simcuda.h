/* simcuda.h: the control interface of the simulated driver.
 *
 * simcuda (libcuda.so.1 built from tests/simcuda) implements in host memory
 * the part of the CUDA driver API that cuemm and its tests call.  Besides the
 * driver entry points it exports the functions below, which tests resolve with
 * dlsym(RTLD_DEFAULT, ...) so that the same test program runs against the real
 * driver too (where the symbols are absent and such checks skip).
 *
 * Entry points are named by their base name, as passed to cuGetProcAddress:
 * "cuMemAlloc" covers cuMemAlloc_v2, "cuCtxCreate" every cuCtxCreate_vN.
 *
 * Environment read when the library loads (and again by simcuda_reset):
 *   SIMCUDA_DEVICES   number of devices (default 2, at most 8)
 *   SIMCUDA_CAPACITY  bytes of memory per device (default 1 GiB); suffixes
 *                     K, M, G (powers of 1024) accepted
 *   SIMCUDA_QUEUE     1: asynchronous work (cu*Async, cuLaunchHostFunc) is
 *                     queued on its stream until a synchronization instead of
 *                     running at once
 *   SIMCUDA_REPORT    1: print the live-allocation report to stderr at exit
 *   SIMCUDA_DRIVER_VERSION  what cuDriverGetVersion reports (default 13000)
 *   SIMCUDA_HIDE      comma-separated base names cuGetProcAddress reports as
 *                     not found (posing as a driver that lacks them)
 *   SIMCUDA_PAGEABLE  0 (default): devices cannot access pageable host
 *                     memory; 1: they can (CU_DEVICE_ATTRIBUTE_PAGEABLE_
 *                     MEMORY_ACCESS, as with HMM), and copies and fills then
 *                     accept any host address; 2: also through the host's
 *                     page tables (..._USES_HOST_PAGE_TABLES, as with ATS)
 *   SIMCUDA_MANAGED_CAPACITY  bytes of managed memory cuMemAllocManaged
 *                     gives out in all before CUDA_ERROR_OUT_OF_MEMORY
 *                     (default 8 x SIMCUDA_CAPACITY): managed memory is
 *                     host-backed and may exceed a device's capacity
 *
 * Read at each use:
 *   SIMCUDA_DEAD_HANDLES  unset: a call naming a stream or an event
 *                     after its destruction (cuStreamDestroy,
 *                     cuEventDestroy, its context's) stops the program
 *                     (abort), with a message naming the call: the real
 *                     driver's behaviour there is undefined (it crashed in
 *                     cuStreamIsCapturing), so an error code would let a
 *                     test pass that crashes on a GPU; "error": the call
 *                     returns CUDA_ERROR_INVALID_HANDLE instead
 */
#ifndef SIMCUDA_H
#define SIMCUDA_H

#include <stddef.h>
#include <stdio.h>
#include <cuda.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Make the nth call from now (nth = 1: the very next call) of the named entry
 * point return `result` without doing anything.  Several rules may be armed at
 * once, one per entry point (arming again replaces the rule).  Returns 0, or
 * -1 when the name is not an entry point simcuda implements. */
int simcuda_fail(const char *entry, unsigned nth, CUresult result);

/* Like simcuda_fail, but every call from the nth on fails until cleared. */
int simcuda_fail_from(const char *entry, unsigned nth, CUresult result);

/* Disarm every rule. */
void simcuda_fail_clear(void);

/* Calls of the named entry point since load or the last simcuda_calls_reset,
 * failed ones included. Unknown name: 0. */
unsigned long simcuda_calls(const char *entry);
void simcuda_calls_reset(void);

/* Live objects: device allocations, pinned host allocations, registered host
 * ranges, VMM physical handles, VMM address reservations, VMM mappings, IPC
 * mappings opened, streams, events, and contexts created with cuCtxCreate
 * (primary contexts not counted).  simcuda_live_count sums them all. */
typedef struct simcuda_live {
  size_t device_allocs, device_bytes;
  size_t host_allocs, host_bytes;
  size_t host_registered;
  size_t vmm_handles, vmm_handle_bytes;
  size_t vmm_reservations, vmm_mappings;
  size_t ipc_opened;
  size_t streams, events, contexts;
  size_t managed_allocs, managed_bytes;
} simcuda_live;
void   simcuda_live_get(simcuda_live *out);
size_t simcuda_live_count(void);
/* One line per live object, to `f`. */
void   simcuda_live_report(FILE *f);

/* Device memory capacity in bytes of every device (what cuMemGetInfo and
 * cuDeviceTotalMem report as total). Only while nothing is allocated on the
 * device; returns 0 or -1. */
int  simcuda_set_capacity(size_t bytes);
/* Turn queue mode on (1) or off (0) at run time. */
void simcuda_set_queue_mode(int on);
/* Work items queued on all streams and not yet run (streams destroyed with
 * work still queued included). */
size_t simcuda_queued_work(void);

/* ---- streams in queue mode ----
 *
 * What simcuda models, as the driver defines it:
 *  - Each stream runs its items in order.  cuStreamWaitEvent makes the
 *    stream's later items wait for the event's latest record as of the call
 *    (no record, or one already run: nothing to wait for).
 *  - The legacy default stream (0 or CU_STREAM_LEGACY) synchronizes with the
 *    blocking streams of its context (created without
 *    CU_STREAM_NON_BLOCKING): an item on it waits for all work queued before
 *    it on those streams, and an item on a blocking stream for all work
 *    queued before it on the legacy stream.  Non-blocking streams are outside
 *    this.
 *  - CU_STREAM_PER_THREAD is a stream of its own for each thread and context,
 *    blocking with respect to the legacy stream; cuStreamGetFlags reports 0
 *    for both default streams.
 *  - Running an item first runs, on other streams, whatever these rules put
 *    before it.
 *  - cuEventQuery is CUDA_ERROR_NOT_READY exactly while the event's latest
 *    record has not run; an event never recorded is complete.
 *  - cuStreamDestroy does not run queued work: the handle is invalid at once
 *    and the stream no longer counts as live, but its work runs later, at a
 *    synchronization (cuCtxSynchronize, cuMemFree, cuEventSynchronize of an
 *    event recorded on it, a wait of another stream on such an event), and
 *    events recorded on it complete then.  Destroying its context runs it.
 *
 * The functions below take a stream as the entry points do (0,
 * CU_STREAM_LEGACY and CU_STREAM_PER_THREAD resolve in the calling thread's
 * current context) and are thread-safe. */

/* Run the n oldest queued items of stream s (n = 0: until its queue is
 * empty), each after what it waits for on other streams (cuStreamWaitEvent,
 * the legacy stream's rules), which runs too but is not counted.  Returns how
 * many items of s ran; 0 when s does not resolve. */
size_t simcuda_stream_run(CUstream s, size_t n);
/* Items queued on stream s and not yet run; 0 when s does not resolve. */
size_t simcuda_stream_queued(CUstream s);
/* Stream capture, as far as cuStreamIsCapturing and cuStreamQuery see it
 * (simcuda captures nothing): with `on`, s reports
 * CU_STREAM_CAPTURE_STATUS_ACTIVE; a cuStreamQuery of it then fails with
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and marks it INVALIDATED, as the
 * driver's invalidates the capture; while a blocking stream captures, the
 * legacy stream's cuStreamIsCapturing fails with
 * CUDA_ERROR_STREAM_CAPTURE_IMPLICIT and its cuStreamQuery invalidates that
 * capture.  Returns the state before (0 none, 1 capturing, 2 invalidated),
 * -1 when s does not resolve. */
int simcuda_stream_set_capturing(CUstream s, int on);

/* Early-reuse detector.  Call it right after an allocator hands out [p, p+n)
 * for use on stream s.  Returns how many queued, not yet run copies and fills
 * on streams other than s touch [p, p+n) (writing it, or reading it as a
 * copy's source) and are not ordered before the next work queued on s, i.e.
 * work that could still run on the device while s already uses the memory.
 * An item X of stream A is ordered before it when s has waited (queued or
 * already run, directly or through other streams' waits) on an event whose
 * record came after X on A, or when the legacy stream's rules put X first.
 * Work on s itself never counts: stream order covers it.  Nonzero means an
 * early reuse; (size_t)-1 means s does not resolve.  Host functions and
 * cuMemFreeAsync are not counted: simcuda does not know what memory they
 * touch.  Typical use, in queue mode:
 *
 *   cuMemsetD8Async(p, 1, n, a);          // work on the block, left pending
 *   free_on_stream(p, a);                 // the allocator under test
 *   q = alloc_on_stream(n, b);            // may hand p out again
 *   is(simcuda_reuse_check(b, q, n), 0, "%s", simcuda_reuse_explain());
 */
size_t simcuda_reuse_check(CUstream s, CUdeviceptr p, size_t n);
/* For a failure message: the first offending item of the calling thread's
 * latest simcuda_reuse_check (stream and its kind, device, what the item
 * does, its address range, its position in its stream), or "no early
 * reuse".  The text is per thread and valid until its next check. */
const char *simcuda_reuse_explain(void);

/* Managed memory (cuMemAllocManaged) is host memory with a record of what
 * was asked of it: the prefetches and advice given for each allocation, and
 * which bytes were prefetched to a device.  A device holds the managed
 * bytes prefetched to it as long as they fit beside its device allocations
 * (its capacity); a prefetch that does not fit evicts bytes that other
 * managed allocations had on that device (counted), as the driver evicts
 * pages to the host under oversubscription. */
#define SIMCUDA_NONE (-2)   /* no prefetch or advice recorded */
typedef struct simcuda_managed_range {
  CUdeviceptr base;
  size_t size;
  unsigned attach_flags;        /* cuMemAllocManaged's flags */
  unsigned long prefetches, advises;
  CUdevice last_prefetch_dst;   /* a device, CU_DEVICE_CPU or SIMCUDA_NONE */
  CUdeviceptr last_prefetch_ptr;
  size_t last_prefetch_size;
  CUstream last_prefetch_stream;
  int last_advice;              /* CUmem_advise, or 0 */
  CUdevice last_advice_device;
  CUdevice preferred_location;  /* SET_PREFERRED_LOCATION's device, or SIMCUDA_NONE */
  unsigned accessed_by;         /* SET_ACCESSED_BY: bit d for device d, bit 31 for the CPU */
  int read_mostly;
  int resident_dev;             /* the device the resident bytes are on, or SIMCUDA_NONE */
  size_t resident;              /* bytes prefetched to that device and not evicted */
} simcuda_managed_range;

/* Fills *out for the managed allocation containing p; returns 0, or -1 when
 * p lies in no managed allocation. */
int simcuda_managed_get(CUdeviceptr p, simcuda_managed_range *out);

typedef struct simcuda_managed_totals {
  size_t allocs, bytes;       /* live managed allocations */
  size_t resident;            /* bytes resident on devices */
  unsigned long prefetches, advises, evictions;
  size_t evicted_bytes;
} simcuda_managed_totals;
void simcuda_managed_totals_get(simcuda_managed_totals *out);

/* SIMCUDA_PAGEABLE at run time (0, 1 or 2); returns 0 or -1. */
int simcuda_set_pageable(int level);

/* Re-read the environment (SIMCUDA_DEVICES, _CAPACITY, _QUEUE, _REPORT,
 * _PAGEABLE, _MANAGED_CAPACITY),
 * disarm every fault rule and zero the call counters.  Only while no object
 * is live (simcuda_live_count() == 0); returns 0 or -1. */
int simcuda_reset(void);

#ifdef __cplusplus
}
#endif
#endif
