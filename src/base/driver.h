/* driver.h: the table of libcuda entry points the rest of cuemm calls.
 *
 * driver.c is the only code that knows how libcuda was found.  Everything
 * else reaches the driver through cuemm__driver(), which loads it on first
 * use.  Entries listed with CUEMM__OPT may be NULL on an old driver; callers
 * check them and answer CUDA_ERROR_NOT_SUPPORTED.
 */
#ifndef CUEMM_DRIVER_H
#define CUEMM_DRIVER_H

#include <cuda.h>

/* The driver API version every entry point is resolved at: the oldest driver
 * cuemm supports.  Pinning it means a newer cuda.h never silently selects a
 * newer ABI variant than the one the prototypes below describe. */
#define CUEMM__DRIVER_API_VERSION 12000

/* cuMemPrefetchAsync and cuMemAdvise took a CUdevice until CUDA 12.2 added
 * variants taking a CUmemLocation (cuMemPrefetchAsync_v2, cuMemAdvise_v2);
 * since CUDA 13.0, cuda.h gives the plain names to those.  cuGetProcAddress
 * hands out the variant that was current at the version asked for, so at
 * 12000 it gives the CUdevice ones (the CUDA 13 driver still has them, for
 * programs built against 12.x).  Inside cuemm the two names therefore mean
 * the 12.0 prototypes, declared here (never defined: only their types are
 * used), whatever cuda.h the build found. */
CUresult CUDAAPI cuemm__cuMemPrefetchAsync_v8000(CUdeviceptr devPtr, size_t count, CUdevice dstDevice,
                                                 CUstream hStream);
CUresult CUDAAPI cuemm__cuMemAdvise_v8000(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUdevice device);
#undef cuMemPrefetchAsync
#undef cuMemAdvise
#define cuMemPrefetchAsync cuemm__cuMemPrefetchAsync_v8000
#define cuMemAdvise cuemm__cuMemAdvise_v8000

/* X(name): required, O(name): optional.  `name` is the entry point without
 * its "cu" prefix; its type is the prototype cuda.h gives cu##name. */
#define CUEMM__DRIVER_ENTRIES(X, O)                                            \
  X(Init) X(DriverGetVersion) X(GetErrorName) X(GetErrorString)                \
  X(CtxGetCurrent) X(CtxSetCurrent) X(CtxPushCurrent) X(CtxPopCurrent)         \
  X(CtxGetDevice) X(CtxGetId) X(CtxSynchronize)                                \
  X(DevicePrimaryCtxRetain) X(DevicePrimaryCtxRelease)                         \
  X(DeviceGet) X(DeviceGetCount) X(DeviceGetAttribute) X(DeviceGetName)        \
  X(DeviceTotalMem) X(DeviceGetUuid) X(DeviceGetPCIBusId)                      \
  X(MemGetInfo) X(MemAlloc) X(MemFree) X(MemGetAddressRange)                   \
  X(MemHostAlloc) X(MemFreeHost) X(MemHostGetDevicePointer)                    \
  X(MemHostRegister) X(MemHostUnregister) X(PointerGetAttribute)               \
  O(IpcGetMemHandle) O(IpcOpenMemHandle) O(IpcCloseMemHandle)                  \
  O(DeviceCanAccessPeer)                                                       \
  O(MemAddressReserve) O(MemAddressFree) O(MemCreate) O(MemRelease)            \
  O(MemMap) O(MemUnmap) O(MemSetAccess) O(MemGetAllocationGranularity)         \
  O(MemExportToShareableHandle) O(MemImportFromShareableHandle)                \
  O(MemAllocAsync) O(MemFreeAsync) O(StreamSynchronize)                       \
  O(EventCreate) O(EventDestroy) O(EventRecord) O(EventQuery)                  \
  O(StreamWaitEvent) O(ThreadExchangeStreamCaptureMode)                       \
  O(StreamQuery) O(StreamIsCapturing)                                         \
  O(MemAllocManaged) O(MemPrefetchAsync) O(MemAdvise)                        \
  O(MemcpyDtoH) O(MemcpyHtoD)

typedef struct cuemm__driver_table {
#define CUEMM__ENTRY(name) __typeof__(cu##name) *name;
  CUEMM__DRIVER_ENTRIES(CUEMM__ENTRY, CUEMM__ENTRY)
#undef CUEMM__ENTRY
  int version;        /* cuDriverGetVersion, e.g. 13000 */
  char path[4096];    /* the file the loader actually mapped */
} cuemm__driver_table;

/* The loaded table, loading libcuda (and calling cuInit) on first use.  On
 * failure returns NULL with *err set and the thread's message describing every
 * path tried; a later call tries again, so a program may fix its environment
 * and retry. */
const cuemm__driver_table *cuemm__driver(CUresult *err);

/* Records "what(...) failed: CUDA_ERROR_X (description)" as the thread's
 * message and returns r.  `what` names the driver call and its arguments. */
CUresult cuemm__driver_error(CUresult r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
