/* ipc-handle.c: owns cuemm's IPC handle as bytes: its layout, its checksum,
 * the checks every handle that comes in must pass (cuemm_ipc_open,
 * cuemm_ipc_send, cuemm_ipc_recv) and cuemm_ipc_handle_from_bytes.
 *
 * A handle travels through pipes and sockets to a reader that must tell a
 * handle from garbage before the driver sees it; both halves of sharing
 * (ipc.c for opening, ipc-fd.c for the descriptor transport) hold handles to
 * these rules, so they live below both.
 */
#include <inttypes.h>
#include <stddef.h>
#include <string.h>

#include "base/internal.h"
#include "ipc/ipc.h"

_Static_assert(sizeof(cuemm_ipc_handle) == CUEMM_IPC_HANDLE_SIZE, "handle is 128 bytes");
_Static_assert(offsetof(cuemm_ipc_handle, version) == 4, "layout: version");
_Static_assert(offsetof(cuemm_ipc_handle, kind) == 6, "layout: kind");
_Static_assert(offsetof(cuemm_ipc_handle, source_pid) == 8, "layout: source_pid");
_Static_assert(offsetof(cuemm_ipc_handle, checksum) == 12, "layout: checksum");
_Static_assert(offsetof(cuemm_ipc_handle, offset) == 16, "layout: offset");
_Static_assert(offsetof(cuemm_ipc_handle, size) == 24, "layout: size");
_Static_assert(offsetof(cuemm_ipc_handle, alloc_size) == 32, "layout: alloc_size");
_Static_assert(offsetof(cuemm_ipc_handle, device_uuid) == 40, "layout: device_uuid");
_Static_assert(offsetof(cuemm_ipc_handle, reserved) == 56, "layout: reserved");
_Static_assert(offsetof(cuemm_ipc_handle, driver) == 64, "layout: driver");
_Static_assert(sizeof(CUipcMemHandle) == 64, "the driver's handle is 64 bytes");
_Static_assert(sizeof(cuemm_ipc_pieces) == 64, "the pieces table is 64 bytes");
_Static_assert(offsetof(cuemm_ipc_handle, pieces) == 64, "layout: pieces");
_Static_assert(offsetof(cuemm_ipc_pieces, serial) == 8, "layout: pieces.serial");
_Static_assert(offsetof(cuemm_ipc_pieces, bytes) == 16, "layout: pieces.bytes");

/* ---- the handle ------------------------------------------------------------ */

/* FNV-1a over the handle's bytes, its checksum field read as zeros. */
uint32_t cuemm__ipc_checksum(const cuemm_ipc_handle *h)
{
  const unsigned char *b = (const unsigned char *)h;
  uint32_t x = 2166136261u;
  for (size_t i = 0; i < sizeof *h; i++) {
    int in_field = i >= offsetof(cuemm_ipc_handle, checksum) &&
                   i < offsetof(cuemm_ipc_handle, checksum) + sizeof h->checksum;
    x ^= in_field ? 0u : b[i];
    x *= 16777619u;
  }
  return x;
}

/* The pieces table of a pool handle: a count in range, sizes that add up to
 * alloc_size, zeros elsewhere, and a range that starts in the first piece
 * and ends in the last (so that every piece is needed). */
static CUresult check_pieces(const cuemm_ipc_handle *h, const char *fn)
{
  const cuemm_ipc_pieces *pc = &h->pieces;
  if (pc->count == 0 || pc->count > MAX_PIECES)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "%s: pool handle with %" PRIu32 " chunks; a handle holds 1 to %d",
                        fn, pc->count, MAX_PIECES);
  if (pc->reserved)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "%s: the pieces table's reserved word is not zero", fn);
  uint64_t sum = 0;
  for (unsigned i = 0; i < MAX_PIECES; i++) {
    if (i >= pc->count) {
      if (pc->bytes[i])
        return cuemm__error(CUDA_ERROR_INVALID_VALUE, "%s: chunk size %u is set past the count (%" PRIu32 ")", fn, i,
                            pc->count);
      continue;
    }
    if (pc->bytes[i] == 0 || pc->bytes[i] > UINT64_MAX - sum)
      return cuemm__error(CUDA_ERROR_INVALID_VALUE, "%s: chunk %u has an impossible size (%" PRIu64 " bytes)", fn, i,
                          pc->bytes[i]);
    sum += pc->bytes[i];
  }
  if (sum != h->alloc_size)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "%s: the chunks add up to %" PRIu64 " bytes, the handle says %"
                        PRIu64, fn, sum, h->alloc_size);
  if (h->offset >= pc->bytes[0] || h->offset + h->size <= h->alloc_size - pc->bytes[pc->count - 1])
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "%s: the range (offset %" PRIu64 ", size %" PRIu64 ") does not "
                        "start in the first chunk and end in the last", fn, h->offset, h->size);
  return CUDA_SUCCESS;
}

/* The checks of cuemm_ipc_handle_from_bytes, shared with cuemm_ipc_open so
 * that a handle read straight into the struct is held to the same rules.
 * Magic and version come before the checksum: under another version the
 * checksum may be computed differently, and "version 2" says more than
 * "checksum mismatch". */
CUresult cuemm__ipc_check_handle(const cuemm_ipc_handle *h, const char *fn)
{
  if (memcmp(h->magic, CUEMM_IPC_MAGIC, sizeof h->magic) != 0)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "%s: not a cuemm IPC handle (the magic is not \"%s\")", fn,
                        CUEMM_IPC_MAGIC);
  if (h->version != CUEMM_IPC_HANDLE_VERSION)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "%s: handle version %u; this cuemm reads version %d", fn,
                        (unsigned)h->version, CUEMM_IPC_HANDLE_VERSION);
  uint32_t sum = cuemm__ipc_checksum(h);
  if (sum != h->checksum)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "%s: checksum mismatch (the handle says 0x%08" PRIx32
                        ", its bytes give 0x%08" PRIx32 "): damaged in transit, or not a whole handle", fn,
                        h->checksum, sum);
  for (size_t i = 0; i < sizeof h->reserved; i++)
    if (h->reserved[i])
      return cuemm__error(CUDA_ERROR_INVALID_VALUE, "%s: reserved byte %zu is not zero", fn, i);
  if (h->source_pid == 0)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "%s: the handle names no exporting process (pid 0)", fn);
  if (h->size == 0 || h->alloc_size == 0 || h->offset >= h->alloc_size || h->size > h->alloc_size - h->offset)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "%s: the handle's slice (offset %" PRIu64 ", size %" PRIu64
                        ") does not lie inside its allocation of %" PRIu64 " bytes", fn, h->offset, h->size,
                        h->alloc_size);
  if (h->kind == CUEMM_IPC_KIND_POOL)
    return check_pieces(h, fn);
  if (h->kind != CUEMM_IPC_KIND_DEVICE)
    return cuemm__error(CUDA_ERROR_NOT_SUPPORTED, "%s: handle of kind %u; this cuemm opens kinds %d (device memory "
                        "shared with legacy IPC) and %d (pool memory shared as file descriptors)", fn,
                        (unsigned)h->kind, CUEMM_IPC_KIND_DEVICE, CUEMM_IPC_KIND_POOL);
  return CUDA_SUCCESS;
}

CUEMM_EXTERN CUresult cuemm_ipc_handle_parse(const void *bytes, size_t len, cuemm_ipc_handle *h)
{
  if (!h)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_handle_from_bytes: h is NULL");
  if (!bytes)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_handle_from_bytes: bytes is NULL");
  if (len != CUEMM_IPC_HANDLE_SIZE)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_handle_from_bytes: %zu bytes; a handle is %d bytes%s",
                        len, CUEMM_IPC_HANDLE_SIZE, len < CUEMM_IPC_HANDLE_SIZE ? " (truncated?)" : "");
  cuemm_ipc_handle copy;
  memcpy(&copy, bytes, sizeof copy);
  CUresult r = cuemm__ipc_check_handle(&copy, "cuemm_ipc_handle_from_bytes");
  if (r == CUDA_SUCCESS)
    *h = copy;
  return r;
}
