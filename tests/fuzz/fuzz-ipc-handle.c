/* fuzz-ipc-handle.c: cuemm_ipc_handle_parse on arbitrary bytes, then
 * cuemm_ipc_open on whatever it accepts, on simcuda.
 *
 * What must hold: a refused input leaves *h as it was, with
 * CUDA_ERROR_INVALID_VALUE or CUDA_ERROR_NOT_SUPPORTED and a message naming
 * the function; an accepted one is exactly 128 bytes copied unchanged whose
 * checksum is the FNV-1a that cuemm.h documents (computed here, apart from
 * the library), with a valid magic, version, kind, pid and range.  Opening
 * an accepted handle either fails or gives a pointer that closes again; a
 * handle naming this process is refused as the header says.
 *
 * A 128-byte input is tried twice: as it is, and resealed with a checksum
 * computed here, so that the fuzzer gets past the checksum to the checks
 * behind it and to cuemm_ipc_open.
 */
#include <string.h>
#include <unistd.h>

#include <cuda.h>

#include "cuemm.h"
#include "fuzz.h"
#include "testproc.h"

static cuemm_manager *manager(void)
{
  static cuemm_manager *m;
  if (m)
    return m;
  CUdevice dev;
  CUcontext ctx;
  cuemm_config c;
  cuemm_config_init(&c);
  FUZZ_ASSERT(cuInit(0) == CUDA_SUCCESS && cuDeviceGet(&dev, 0) == CUDA_SUCCESS &&
              cuDevicePrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS && cuCtxSetCurrent(ctx) == CUDA_SUCCESS,
              "no context on the driver");
  FUZZ_ASSERT(cuemm_manager_create(NULL, &c, &m) == CUDA_SUCCESS, "cuemm_create: %s", cuemm_last_error());
  return m;
}

static void one(const uint8_t *data, size_t size)
{
  cuemm_manager *m = manager();
  cuemm_ipc_handle h, before;
  memset(&h, 0xA5, sizeof h);
  before = h;
  CUresult r = cuemm_ipc_handle_parse(data, size, &h);
  if (r != CUDA_SUCCESS) {
    FUZZ_ASSERT(r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_NOT_SUPPORTED, "refused with %d", (int)r);
    FUZZ_ASSERT(memcmp(&h, &before, sizeof h) == 0, "a refused input changed *h");
    FUZZ_ASSERT(strstr(cuemm_last_error(), "cuemm_ipc_handle_from_bytes") != NULL, "message: %s",
                cuemm_last_error());
    return;
  }
  FUZZ_ASSERT(size == CUEMM_IPC_HANDLE_SIZE, "accepted %zu bytes", size);
  FUZZ_ASSERT(memcmp(&h, data, sizeof h) == 0, "the accepted handle differs from its bytes");
  FUZZ_ASSERT(h.checksum == fnv1a(&h), "accepted checksum 0x%08x, FNV-1a of the bytes is 0x%08x", h.checksum,
              fnv1a(&h));
  FUZZ_ASSERT(memcmp(h.magic, CUEMM_IPC_MAGIC, 4) == 0 && h.version == CUEMM_IPC_HANDLE_VERSION,
              "accepted magic or version %u", h.version);
  FUZZ_ASSERT(h.kind == CUEMM_IPC_KIND_DEVICE || h.kind == CUEMM_IPC_KIND_POOL, "accepted kind %u", h.kind);
  FUZZ_ASSERT(h.source_pid != 0 && h.size != 0 && h.offset <= h.alloc_size && h.size <= h.alloc_size - h.offset,
              "accepted pid %u, offset %llu, size %llu, alloc_size %llu", h.source_pid,
              (unsigned long long)h.offset, (unsigned long long)h.size, (unsigned long long)h.alloc_size);
  if (h.kind == CUEMM_IPC_KIND_POOL) {
    uint64_t total = 0;
    FUZZ_ASSERT(h.pieces.count >= 1 && h.pieces.count <= CUEMM_IPC_POOL_MAX_PIECES, "accepted %u pieces",
                h.pieces.count);
    for (unsigned i = 0; i < CUEMM_IPC_POOL_MAX_PIECES; i++) {
      FUZZ_ASSERT((i < h.pieces.count) == (h.pieces.bytes[i] != 0), "piece %u of %u has %llu bytes", i,
                  h.pieces.count, (unsigned long long)h.pieces.bytes[i]);
      total += h.pieces.bytes[i];
    }
    FUZZ_ASSERT(total == h.alloc_size, "pieces add up to %llu, alloc_size %llu", (unsigned long long)total,
                (unsigned long long)h.alloc_size);
  }

  CUdeviceptr p = 0;
  r = cuemm_ipc_open(m, &h, &p);
  if (h.source_pid == (uint32_t)getpid())
    FUZZ_ASSERT(r == CUDA_ERROR_INVALID_CONTEXT, "own handle opened: %d", (int)r);
  if (r == CUDA_SUCCESS)
    FUZZ_ASSERT(cuemm_ipc_close(m, p) == CUDA_SUCCESS, "close after open: %s", cuemm_last_error());
  else
    FUZZ_ASSERT(cuemm_last_error()[0] != '\0', "open failed with %d and no message", (int)r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  one(data, size);
  if (size == CUEMM_IPC_HANDLE_SIZE) {
    cuemm_ipc_handle h;
    memcpy(&h, data, sizeof h);
    reseal(&h);
    one((const uint8_t *)&h, sizeof h);
  }
  return 0;
}
