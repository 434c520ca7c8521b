/* ipc.c: owns sharing device memory between processes: the handle format
 * (its checks and checksum), exporting a pointer of a manager's allocation,
 * and the process-wide table of mappings opened from handles.
 *
 * The driver's legacy IPC handle names a whole cuMemAlloc allocation, while
 * a program wants to share a slice, and to send the handle through a pipe to
 * a reader that must tell a handle from garbage before the driver sees it.
 * So cuemm's handle wraps the driver's with the slice (offset, size), the
 * allocation's size, the source device and a checksum.
 *
 * The driver maps an allocation once per context, yet a process may open it
 * several times (two slices, or one slice from two parts of the program).
 * The table maps each allocation once per context and counts the opens of
 * each pointer, so the last close unmaps, not the first, and a close of a
 * pointer that was never opened is refused instead of unmapping someone
 * else's view.  One lock guards the table and is held across the driver's
 * open and close, so two threads opening one handle cannot map it twice.
 * That lock is never held while taking a manager's lock.
 *
 * Pool blocks are cuMemCreate memory, which legacy IPC cannot export.  A
 * pool created with pool_ipc makes its chunks exportable as POSIX file
 * descriptors, and a pool handle names the chunks a range overlaps (their
 * sizes in address order, the first one's serial, the range's offset in the
 * first) instead of carrying a driver handle.  The descriptors cannot ride in
 * the bytes: cuemm_ipc_send exports them at the last moment and passes them
 * with the bytes in one sendmsg (SCM_RIGHTS), and cuemm_ipc_recv keeps what
 * arrives in a table of received descriptors keyed by the handle's bytes, so
 * that cuemm_ipc_open keeps its signature for both kinds.  The open that maps
 * a pool handle imports the descriptors, reserves a range, maps the chunks
 * one after another, sets access, and only then closes the descriptors and
 * drops its own references to the imported handles (the mapping holds the
 * memory); any failing step undoes the earlier ones and leaves the
 * descriptors in the table, so a failed open changes nothing.  Pool
 * mappings join the table of mappings, keyed by exporter, device and chunk
 * list, so opening one block twice maps it once.
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "error.h"
#include "manager.h"
#include "pool.h"

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

#define MAX_PIECES CUEMM_IPC_POOL_MAX_PIECES

/* ---- the handle ------------------------------------------------------------ */

static uint32_t checksum_of(const cuemm_ipc_handle *h)
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

static void uuid_hex(const uint8_t *u, char out[33])
{
  static const char digits[] = "0123456789abcdef";
  for (int i = 0; i < 16; i++) {
    out[2 * i] = digits[u[i] >> 4];
    out[2 * i + 1] = digits[u[i] & 15];
  }
  out[32] = 0;
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
static CUresult check_handle(const cuemm_ipc_handle *h, const char *fn)
{
  if (memcmp(h->magic, CUEMM_IPC_MAGIC, sizeof h->magic) != 0)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "%s: not a cuemm IPC handle (the magic is not \"%s\")", fn,
                        CUEMM_IPC_MAGIC);
  if (h->version != CUEMM_IPC_HANDLE_VERSION)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "%s: handle version %u; this cuemm reads version %d", fn,
                        (unsigned)h->version, CUEMM_IPC_HANDLE_VERSION);
  uint32_t sum = checksum_of(h);
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

CUEMM_EXTERN CUresult cuemm_ipc_handle_from_bytes(cuemm_ipc_handle *h, const void *bytes, size_t len)
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
  CUresult r = check_handle(&copy, "cuemm_ipc_handle_from_bytes");
  if (r == CUDA_SUCCESS)
    *h = copy;
  return r;
}

/* ---- export ------------------------------------------------------------------ */

/* The live pool block of m holding p: its start and the manager's entry.
 * Lock held. */
static CUresult pool_block_locked(cuemm_manager *m, CUdeviceptr p, const char *fn, CUdeviceptr *start,
                                  cuemm__owned_entry **entry)
{
  cuemm__pool *pool = m->pool;
  uint32_t i = cuemm__sa_find(&pool->sa, (size_t)(p - pool->base));
  if (i == CUEMM__SA_NIL || pool->sa.b[i].state != CUEMM__SA_USED)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "%s: 0x%llx lies in no live block of the pool (never allocated, "
                        "or freed and returned to the pool)", fn, (unsigned long long)p);
  *start = pool->base + (CUdeviceptr)pool->sa.b[i].off;
  cuemm__owned_entry *e = cuemm__owned_find(&m->owned, (uintptr_t)*start);
  if (!e || e->kind != CUEMM__KIND_POOL)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "%s: 0x%llx lies in a pool block at 0x%llx that the program has "
                        "freed already (it waits in the pending queue)", fn, (unsigned long long)p,
                        (unsigned long long)*start);
  *entry = e;
  return CUDA_SUCCESS;
}

/* Fills what a pool handle says of the block holding p: the chunks that
 * [p, p + size) overlaps.  Lock held. */
static CUresult describe_pool_locked(cuemm_manager *m, CUdeviceptr p, size_t size, cuemm_ipc_handle *h)
{
  cuemm__pool *pool = m->pool;
  if (!pool->ipc)
    return cuemm__error(CUDA_ERROR_NOT_SUPPORTED,
                        "cuemm_ipc_export: 0x%llx is pool memory (CUEMM_POOL=vmm), made with cuMemCreate, which "
                        "legacy CUDA IPC cannot export, and this pool's chunks were not made exportable; enable "
                        "pool IPC with CUEMM_POOL_IPC=1 (or cuemm_config.pool_ipc = 1) when the manager is created, "
                        "or allocate the buffer through a manager without the pool", (unsigned long long)p);
  CUdeviceptr start;
  cuemm__owned_entry *e;
  CUresult r = pool_block_locked(m, p, "cuemm_ipc_export", &start, &e);
  if (r != CUDA_SUCCESS)
    return r;
  size_t off = (size_t)(p - start);
  if (off >= e->size)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_export: 0x%llx is past the end of its pool block "
                        "(0x%llx, %zu bytes)", (unsigned long long)p, (unsigned long long)start, e->size);
  if (size == 0)
    size = e->size - off;
  else if (size > e->size - off)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_export: %zu bytes from offset %zu run past the end of "
                        "the pool block (%zu bytes)", size, off, e->size);
  cuemm__pool_piece pc[MAX_PIECES];
  size_t n = 0;
  int got = cuemm__pool_pieces(pool, p, size, pc, MAX_PIECES, &n);
  if (got == -2)
    return cuemm__error(CUDA_ERROR_NOT_SUPPORTED, "cuemm_ipc_export: the %zu bytes at 0x%llx overlap %zu of the "
                        "pool's physical allocations (chunks); a handle holds at most %d: export a smaller range, or "
                        "make the pool grow in larger steps (CUEMM_POOL_CHUNK)", size, (unsigned long long)p, n,
                        MAX_PIECES);
  if (got != 0)
    return cuemm__error(CUDA_ERROR_UNKNOWN, "internal: the pool block at 0x%llx is not wholly in exportable chunks",
                        (unsigned long long)start);
  uint64_t total = 0;
  for (size_t i = 0; i < n; i++) {
    h->pieces.bytes[i] = pc[i].bytes;
    total += pc[i].bytes;
  }
  h->pieces.count = (uint32_t)n;
  h->pieces.serial = pc[0].serial;
  h->offset = p - pc[0].addr;
  h->size = size;
  h->alloc_size = total;
  h->kind = CUEMM_IPC_KIND_POOL;
  return CUDA_SUCCESS;
}

/* Finds the live device allocation of m holding p, and fills what the
 * handle says of it.  Lock held, context entered. */
static CUresult describe_locked(cuemm_manager *m, CUdeviceptr p, size_t size, cuemm_ipc_handle *h, CUdeviceptr *base)
{
  const cuemm__driver_table *d = m->drv;
  if (m->pool && cuemm__pool_contains(m->pool, p))
    return describe_pool_locked(m, p, size, h);
  if (!d->IpcGetMemHandle)
    return cuemm__error(CUDA_ERROR_NOT_SUPPORTED, "cuemm_ipc_export: the CUDA driver %s has no cuIpcGetMemHandle",
                        d->path);
  size_t range = 0;
  CUresult r = d->MemGetAddressRange(base, &range, p);
  if (r != CUDA_SUCCESS)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_export: 0x%llx is not device memory the driver knows "
                        "in this manager's context (cuMemGetAddressRange answered %d)", (unsigned long long)p, (int)r);
  cuemm__owned_entry *e = cuemm__owned_find(&m->owned, (uintptr_t)*base);
  if (!e || e->kind != CUEMM__KIND_DEVICE)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_export: 0x%llx lies in an allocation at 0x%llx that this "
                        "manager does not own (another manager's, or allocated without cuemm)",
                        (unsigned long long)p, (unsigned long long)*base);
  if (e->pending)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_export: 0x%llx lies in an allocation at 0x%llx that "
                        "the program has freed already (it waits in the pending queue)",
                        (unsigned long long)p, (unsigned long long)*base);
  size_t offset = (size_t)(p - *base);
  if (offset >= e->size)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_export: 0x%llx is past the end of its allocation "
                        "(0x%llx, %zu bytes)", (unsigned long long)p, (unsigned long long)*base, e->size);
  if (size == 0)
    size = e->size - offset;
  else if (size > e->size - offset)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_export: %zu bytes from offset %zu run past the end of "
                        "the allocation (%zu bytes)", size, offset, e->size);
  h->offset = offset;
  h->size = size;
  h->alloc_size = e->size;
  h->kind = CUEMM_IPC_KIND_DEVICE;
  if ((r = d->IpcGetMemHandle(&h->driver, *base)) != CUDA_SUCCESS)
    return cuemm__driver_error(r, "cuIpcGetMemHandle(0x%llx)", (unsigned long long)*base);
  return CUDA_SUCCESS;
}

CUEMM_EXTERN CUresult cuemm_ipc_export(cuemm_manager *m, CUdeviceptr p, size_t size, cuemm_ipc_handle *h)
{
  if (!m)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_export: manager is NULL");
  if (!h)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_export: h is NULL");
  if (!p)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_export: p is NULL");
  /* Managed and system memory: CUDA IPC shares neither, and the driver's
   * own error for it would not say why. */
  if (m->cfg.memory != CUEMM_MEMORY_DEVICE)
    return cuemm__error(CUDA_ERROR_NOT_SUPPORTED, "cuemm_ipc_export: this manager hands out %s memory "
                        "(CUEMM_MEMORY=%s), which cannot be shared between processes through CUDA IPC; allocate "
                        "buffers to be shared from a manager of device memory (CUEMM_MEMORY=device, the default, "
                        "with or without CUEMM_POOL=vmm and CUEMM_POOL_IPC=1)",
                        m->cfg.memory == CUEMM_MEMORY_MANAGED ? "managed" : "system",
                        m->cfg.memory == CUEMM_MEMORY_MANAGED ? "managed" : "system");

  cuemm_ipc_handle out;
  memset(&out, 0, sizeof out);
  CUdeviceptr base = 0;
  CUuuid uuid;
  cuemm__lock_acquire(&m->lock);
  cuemm__ctx_guard g;
  CUresult r = cuemm__ctx_enter(m, &g);
  if (r == CUDA_SUCCESS) {
    r = describe_locked(m, p, size, &out, &base);
    if (r == CUDA_SUCCESS && (r = m->drv->DeviceGetUuid(&uuid, m->dev)) != CUDA_SUCCESS)
      cuemm__driver_error(r, "cuDeviceGetUuid(device %d)", (int)m->dev);
    r = cuemm__ctx_leave(m, &g, r);
  }
  cuemm__lock_release(&m->lock);
  if (r != CUDA_SUCCESS)
    return r;

  memcpy(out.magic, CUEMM_IPC_MAGIC, sizeof out.magic);
  out.version = CUEMM_IPC_HANDLE_VERSION;
  out.source_pid = (uint32_t)getpid();
  memcpy(out.device_uuid, uuid.bytes, sizeof out.device_uuid);
  out.checksum = checksum_of(&out);
  *h = out;
  return CUDA_SUCCESS;
}

/* ---- the table of opened mappings -------------------------------------------- */

typedef struct ipc_user {
  CUdeviceptr p;      /* what cuemm_ipc_open returned */
  size_t opens;       /* not yet closed */
} ipc_user;

typedef struct ipc_mapping {
  struct ipc_mapping *next;
  uint16_t kind;                  /* CUEMM_IPC_KIND_DEVICE or _POOL */
  CUipcMemHandle key;             /* device: the driver's handle of the allocation */
  /* pool: the exporter, its device and the chunks (the key), how many
   * chunks are still mapped from `base` on, and whether the address range
   * is still reserved. */
  uint32_t pid;
  uint8_t uuid[16];
  cuemm_ipc_pieces pieces;
  unsigned pmapped;
  int reserved;
  unsigned long long ctx_id;      /* the importing context */
  cuemm_manager *m;
  CUdeviceptr base;
  uint64_t alloc_size;
  /* cuIpcOpenMemHandle calls that returned this base, each to be closed:
   * normally 1, more if the driver gave two handles for one allocation. */
  unsigned driver_opens;
  ipc_user *users;
  size_t nusers, capusers;
} ipc_mapping;

static pthread_mutex_t ipc_lock = PTHREAD_MUTEX_INITIALIZER;
static ipc_mapping *mappings;

static ipc_mapping *find_by_key(const cuemm_ipc_handle *h, unsigned long long ctx_id)
{
  for (ipc_mapping *mp = mappings; mp; mp = mp->next) {
    if (mp->ctx_id != ctx_id || mp->kind != h->kind)
      continue;
    if (h->kind == CUEMM_IPC_KIND_DEVICE && memcmp(&mp->key, &h->driver, sizeof h->driver) == 0)
      return mp;
    if (h->kind == CUEMM_IPC_KIND_POOL && mp->pid == h->source_pid &&
        memcmp(mp->uuid, h->device_uuid, sizeof mp->uuid) == 0 && memcmp(&mp->pieces, &h->pieces, sizeof mp->pieces) == 0)
      return mp;
  }
  return NULL;
}

static ipc_mapping *find_by_base(CUdeviceptr base, unsigned long long ctx_id)
{
  for (ipc_mapping *mp = mappings; mp; mp = mp->next)
    if (mp->ctx_id == ctx_id && mp->kind == CUEMM_IPC_KIND_DEVICE && mp->base == base)
      return mp;
  return NULL;
}

/* The mapping of ctx_id that handed out p, and p's user entry. */
static ipc_mapping *find_user(CUdeviceptr p, unsigned long long ctx_id, ipc_user **user)
{
  for (ipc_mapping *mp = mappings; mp; mp = mp->next) {
    if (mp->ctx_id != ctx_id || p < mp->base || p - mp->base >= mp->alloc_size)
      continue;
    for (size_t i = 0; i < mp->nusers; i++)
      if (mp->users[i].p == p) {
        *user = &mp->users[i];
        return mp;
      }
  }
  return NULL;
}

static int add_user(ipc_mapping *mp, CUdeviceptr p)
{
  for (size_t i = 0; i < mp->nusers; i++)
    if (mp->users[i].p == p) {
      mp->users[i].opens++;
      return 0;
    }
  if (mp->nusers == mp->capusers) {
    size_t cap = mp->capusers ? mp->capusers * 2 : 4;
    ipc_user *grown = realloc(mp->users, cap * sizeof *grown);
    if (!grown)
      return -1;
    mp->users = grown;
    mp->capusers = cap;
  }
  mp->users[mp->nusers++] = (ipc_user){ p, 1 };
  return 0;
}

static void unlink_mapping(ipc_mapping *mp)
{
  for (ipc_mapping **at = &mappings; *at; at = &(*at)->next)
    if (*at == mp) {
      *at = mp->next;
      break;
    }
  free(mp->users);
  free(mp);
}

/* Unmaps a pool mapping's chunks, last first, then frees its range.
 * Context entered.  On failure what is not yet undone stays recorded, for
 * a later close to finish. */
static CUresult pool_unmap(const cuemm__driver_table *d, ipc_mapping *mp)
{
  while (mp->pmapped > 0) {
    CUdeviceptr at = mp->base;
    for (unsigned i = 0; i + 1 < mp->pmapped; i++)
      at += mp->pieces.bytes[i];
    size_t bytes = mp->pieces.bytes[mp->pmapped - 1];
    CUresult r = d->MemUnmap(at, bytes);
    if (r != CUDA_SUCCESS)
      return cuemm__driver_error(r, "cuMemUnmap(0x%llx, %zu bytes) closing pool memory from pid %" PRIu32,
                                 (unsigned long long)at, bytes, mp->pid);
    mp->pmapped--;
  }
  if (mp->reserved) {
    CUresult r = d->MemAddressFree(mp->base, mp->alloc_size);
    if (r != CUDA_SUCCESS)
      return cuemm__driver_error(r, "cuMemAddressFree(0x%llx, %" PRIu64 " bytes) closing pool memory from pid %"
                                 PRIu32, (unsigned long long)mp->base, mp->alloc_size, mp->pid);
    mp->reserved = 0;
  }
  return CUDA_SUCCESS;
}

/* Unmaps with as many driver closes as there were driver opens.  Context
 * entered.  On failure the opens not yet undone stay counted. */
static CUresult driver_close(ipc_mapping *mp)
{
  if (mp->kind == CUEMM_IPC_KIND_POOL)
    return pool_unmap(mp->m->drv, mp);
  while (mp->driver_opens > 0) {
    CUresult r = mp->m->drv->IpcCloseMemHandle(mp->base);
    if (r != CUDA_SUCCESS)
      return cuemm__driver_error(r, "cuIpcCloseMemHandle(0x%llx)", (unsigned long long)mp->base);
    mp->driver_opens--;
  }
  return CUDA_SUCCESS;
}

/* ---- open and close ----------------------------------------------------------- */

/* Whether m's device can map memory of the handle's device.  The same
 * device needs nothing; another one must be visible here and reachable as a
 * peer, since cuemm does no staged copy. */
static CUresult check_reach(cuemm_manager *m, const cuemm_ipc_handle *h)
{
  const cuemm__driver_table *d = m->drv;
  char hex[33];
  CUuuid mine;
  CUresult r = d->DeviceGetUuid(&mine, m->dev);
  if (r != CUDA_SUCCESS)
    return cuemm__driver_error(r, "cuDeviceGetUuid(device %d)", (int)m->dev);
  if (memcmp(mine.bytes, h->device_uuid, sizeof h->device_uuid) == 0)
    return CUDA_SUCCESS;
  int count = 0;
  if ((r = d->DeviceGetCount(&count)) != CUDA_SUCCESS)
    return cuemm__driver_error(r, "cuDeviceGetCount");
  for (int i = 0; i < count; i++) {
    CUdevice dev;
    CUuuid u;
    if ((r = d->DeviceGet(&dev, i)) != CUDA_SUCCESS)
      return cuemm__driver_error(r, "cuDeviceGet(%d)", i);
    if ((r = d->DeviceGetUuid(&u, dev)) != CUDA_SUCCESS)
      return cuemm__driver_error(r, "cuDeviceGetUuid(device %d)", i);
    if (memcmp(u.bytes, h->device_uuid, sizeof h->device_uuid) != 0)
      continue;
    if (!d->DeviceCanAccessPeer)
      return cuemm__error(CUDA_ERROR_NOT_SUPPORTED, "cuemm_ipc_open: the CUDA driver %s has no cuDeviceCanAccessPeer "
                          "to tell whether device %d can reach the source device %d", d->path, (int)m->dev, i);
    int can = 0;
    if ((r = d->DeviceCanAccessPeer(&can, m->dev, dev)) != CUDA_SUCCESS)
      return cuemm__driver_error(r, "cuDeviceCanAccessPeer(device %d, device %d)", (int)m->dev, i);
    if (!can)
      return cuemm__error(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, "cuemm_ipc_open: the memory is on device %d, which "
                          "device %d (this manager's) cannot access as a peer; open the handle in a context on "
                          "device %d (cuemm does no staged copy through host memory)", i, (int)m->dev, i);
    return CUDA_SUCCESS;
  }
  uuid_hex(h->device_uuid, hex);
  return cuemm__error(CUDA_ERROR_INVALID_DEVICE, "cuemm_ipc_open: the memory is on device %s, which is not visible "
                      "in this process (check CUDA_VISIBLE_DEVICES)", hex);
}

/* Maps the handle's allocation in m's context for the first time (*created
 * = 1), or joins the mapping when the driver answers with a base this
 * context has mapped under another handle (*created = 0).  ipc_lock held,
 * context entered. */
static CUresult map_new(cuemm_manager *m, const cuemm_ipc_handle *h, ipc_mapping **out, int *created)
{
  CUdeviceptr base = 0;
  CUresult r = m->drv->IpcOpenMemHandle(&base, h->driver, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
  if (r != CUDA_SUCCESS) {
    cuemm__driver_error(r, "cuIpcOpenMemHandle(handle from pid %" PRIu32 ", %" PRIu64 " bytes)", h->source_pid,
                        h->alloc_size);
    cuemm__error_append(" (has the exporter freed the memory or exited?)");
    return r;
  }
  ipc_mapping *mp = find_by_base(base, m->ctx_id);
  if (mp) {
    mp->driver_opens++;
    *out = mp;
    *created = 0;
    return CUDA_SUCCESS;
  }
  mp = calloc(1, sizeof *mp);
  if (!mp) {
    m->drv->IpcCloseMemHandle(base);
    return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "cuemm_ipc_open: no host memory to record the mapping");
  }
  mp->kind = CUEMM_IPC_KIND_DEVICE;
  mp->key = h->driver;
  mp->ctx_id = m->ctx_id;
  mp->m = m;
  mp->base = base;
  mp->alloc_size = h->alloc_size;
  mp->driver_opens = 1;
  mp->next = mappings;
  mappings = mp;
  *out = mp;
  *created = 1;
  return CUDA_SUCCESS;
}

/* ---- received file descriptors ------------------------------------------------ */

/* One set of descriptors cuemm_ipc_recv received with a handle, waiting for
 * the open that maps it.  ipc_lock guards the list. */
typedef struct fd_set_entry {
  struct fd_set_entry *next;
  cuemm_ipc_handle h;
  int fds[MAX_PIECES];
  unsigned n;
} fd_set_entry;

static fd_set_entry *received;

static fd_set_entry **find_fds(const cuemm_ipc_handle *h)
{
  for (fd_set_entry **at = &received; *at; at = &(*at)->next)
    if (memcmp(&(*at)->h, h, sizeof *h) == 0)
      return at;
  return NULL;
}

static void close_fds(const int *fds, unsigned n)
{
  for (unsigned i = 0; i < n; i++)
    close(fds[i]);
}

/* Unlinks and frees a set, closing its descriptors.  ipc_lock held. */
static void drop_fds(fd_set_entry **at)
{
  fd_set_entry *e = *at;
  *at = e->next;
  close_fds(e->fds, e->n);
  free(e);
}

/* Maps a pool handle's chunks in m's context from the descriptors of `fs`:
 * import each, reserve the range, map each in order, give m's device
 * access, then drop the imported handles (the mappings keep the memory).
 * A failing step undoes the earlier ones; the descriptors stay open.
 * ipc_lock held, context entered. */
static CUresult map_pool(cuemm_manager *m, const cuemm_ipc_handle *h, const fd_set_entry *fs, ipc_mapping **out)
{
  const cuemm__driver_table *d = m->drv;
  const cuemm_ipc_pieces *pc = &h->pieces;
  CUmemGenericAllocationHandle imported[MAX_PIECES];
  unsigned nimported = 0;
  CUresult r = CUDA_SUCCESS;
  ipc_mapping *mp = calloc(1, sizeof *mp);
  if (!mp)
    return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "cuemm_ipc_open: no host memory to record the mapping");
  mp->kind = CUEMM_IPC_KIND_POOL;
  mp->pid = h->source_pid;
  memcpy(mp->uuid, h->device_uuid, sizeof mp->uuid);
  mp->pieces = *pc;
  mp->ctx_id = m->ctx_id;
  mp->m = m;
  mp->alloc_size = h->alloc_size;
  mp->driver_opens = 1;

  for (; nimported < pc->count; nimported++) {
    r = d->MemImportFromShareableHandle(&imported[nimported], (void *)(uintptr_t)fs->fds[nimported],
                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (r != CUDA_SUCCESS) {
      cuemm__driver_error(r, "cuMemImportFromShareableHandle(descriptor %d, chunk %u of %" PRIu32 ", from pid %"
                          PRIu32 ")", fs->fds[nimported], nimported + 1, pc->count, h->source_pid);
      goto undo;
    }
  }
  r = d->MemAddressReserve(&mp->base, (size_t)h->alloc_size, 0, 0, 0);
  if (r != CUDA_SUCCESS) {
    cuemm__driver_error(r, "cuMemAddressReserve(%" PRIu64 " bytes) for pool memory from pid %" PRIu32,
                        h->alloc_size, h->source_pid);
    goto undo;
  }
  mp->reserved = 1;
  CUdeviceptr at = mp->base;
  for (; mp->pmapped < pc->count; mp->pmapped++) {
    size_t bytes = (size_t)pc->bytes[mp->pmapped];
    r = d->MemMap(at, bytes, 0, imported[mp->pmapped], 0);
    if (r != CUDA_SUCCESS) {
      cuemm__driver_error(r, "cuMemMap(0x%llx, %zu bytes, chunk %u of %" PRIu32 ") of pool memory from pid %" PRIu32,
                          (unsigned long long)at, bytes, mp->pmapped + 1, pc->count, h->source_pid);
      goto undo;
    }
    at += bytes;
  }
  CUmemAccessDesc access;
  memset(&access, 0, sizeof access);
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = (int)m->dev;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  r = d->MemSetAccess(mp->base, (size_t)h->alloc_size, &access, 1);
  if (r != CUDA_SUCCESS) {
    cuemm__driver_error(r, "cuMemSetAccess(0x%llx, %" PRIu64 " bytes, device %d) of pool memory from pid %" PRIu32,
                        (unsigned long long)mp->base, h->alloc_size, (int)m->dev, h->source_pid);
    goto undo;
  }
  /* The mappings hold the memory now; a failing release would only leave
   * the driver a reference to drop at exit, so it does not fail the open. */
  for (unsigned i = 0; i < nimported; i++)
    d->MemRelease(imported[i]);
  mp->next = mappings;
  mappings = mp;
  *out = mp;
  return CUDA_SUCCESS;

undo:
  pool_unmap(d, mp);
  for (unsigned i = 0; i < nimported; i++)
    d->MemRelease(imported[i]);
  free(mp);
  return r;
}

CUEMM_EXTERN CUresult cuemm_ipc_open(cuemm_manager *m, const cuemm_ipc_handle *h, CUdeviceptr *p)
{
  if (!h)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_open: h is NULL");
  if (!p)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_open: p is NULL");
  CUresult r = check_handle(h, "cuemm_ipc_open");
  if (r != CUDA_SUCCESS)
    return r;
  if (h->source_pid == (uint32_t)getpid())
    return cuemm__error(CUDA_ERROR_INVALID_CONTEXT, "cuemm_ipc_open: the handle was exported by this process "
                        "(pid %" PRIu32 "); the driver opens handles only in other processes: use the exporter's "
                        "pointer (its allocation + %" PRIu64 ") directly", h->source_pid, h->offset);
  if (!m && (r = cuemm_get(&m)) != CUDA_SUCCESS)
    return r;
  const cuemm__driver_table *d = m->drv;
  int pool = h->kind == CUEMM_IPC_KIND_POOL;
  if (!pool && (!d->IpcOpenMemHandle || !d->IpcCloseMemHandle))
    return cuemm__error(CUDA_ERROR_NOT_SUPPORTED, "cuemm_ipc_open: the CUDA driver %s has no cuIpcOpenMemHandle",
                        d->path);
  if (pool && (!d->MemImportFromShareableHandle || !d->MemAddressReserve || !d->MemAddressFree || !d->MemMap ||
               !d->MemUnmap || !d->MemSetAccess || !d->MemRelease))
    return cuemm__error(CUDA_ERROR_NOT_SUPPORTED, "cuemm_ipc_open: the CUDA driver %s lacks the virtual memory "
                        "management entry points (cuMemImportFromShareableHandle and friends) that pool memory "
                        "from another process needs", d->path);

  pthread_mutex_lock(&ipc_lock);
  ipc_mapping *mp = find_by_key(h, m->ctx_id);
  int mapped = 0, created = 0;
  fd_set_entry **fds = NULL;
  CUresult restore = CUDA_SUCCESS; /* a failed restore of the caller's context, reported after the open */
  if (!mp && pool && !(fds = find_fds(h)))
    r = cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_open: no file descriptors were received for this pool "
                     "handle (from pid %" PRIu32 "), and this context has it open nowhere: receive it with "
                     "cuemm_ipc_recv (it comes from cuemm_ipc_send), once per open that maps it", h->source_pid);
  if (!mp && r == CUDA_SUCCESS) {
    cuemm__ctx_guard g;
    r = cuemm__ctx_enter(m, &g);
    if (r == CUDA_SUCCESS) {
      r = check_reach(m, h);
      if (r == CUDA_SUCCESS && pool && (r = map_pool(m, h, *fds, &mp)) == CUDA_SUCCESS)
        mapped = created = 1;
      else if (r == CUDA_SUCCESS && !pool && (r = map_new(m, h, &mp, &created)) == CUDA_SUCCESS)
        mapped = 1;
      restore = cuemm__ctx_leave(m, &g, CUDA_SUCCESS);
    }
  }
  CUdeviceptr q = 0;
  if (r == CUDA_SUCCESS) {
    q = mp->base + (CUdeviceptr)h->offset;
    if (add_user(mp, q) != 0) {
      /* Undo what this call mapped, so a failed open changes nothing. */
      if (mapped) {
        cuemm__ctx_guard g;
        if (cuemm__ctx_enter(m, &g) == CUDA_SUCCESS) {
          if (pool)
            pool_unmap(d, mp);
          else
            d->IpcCloseMemHandle(mp->base);
          cuemm__ctx_leave(m, &g, CUDA_SUCCESS);
        }
        mp->driver_opens--;
        if (created)
          unlink_mapping(mp);
      }
      r = cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "cuemm_ipc_open: no host memory to record the open");
    } else if (fds && mapped) {
      drop_fds(fds); /* the mapping holds the memory: the descriptors are done */
    }
  }
  pthread_mutex_unlock(&ipc_lock);
  if (r == CUDA_SUCCESS)
    *p = q;
  return r == CUDA_SUCCESS ? restore : r;
}

CUEMM_EXTERN CUresult cuemm_ipc_close(cuemm_manager *m, CUdeviceptr p)
{
  CUresult r;
  if (!m && (r = cuemm_get(&m)) != CUDA_SUCCESS)
    return r;
  pthread_mutex_lock(&ipc_lock);
  ipc_user *u = NULL;
  ipc_mapping *mp = find_user(p, m->ctx_id, &u);
  if (!mp) {
    pthread_mutex_unlock(&ipc_lock);
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_close: 0x%llx is not open in this manager's context "
                        "(never returned by cuemm_ipc_open here, or closed as many times as it was opened)",
                        (unsigned long long)p);
  }
  r = CUDA_SUCCESS;
  if (mp->nusers == 1 && u->opens == 1) {
    cuemm__ctx_guard g;
    r = cuemm__ctx_enter(m, &g);
    CUresult restore = CUDA_SUCCESS;
    if (r == CUDA_SUCCESS) {
      r = driver_close(mp);
      restore = cuemm__ctx_leave(m, &g, CUDA_SUCCESS);
    }
    if (r == CUDA_SUCCESS)
      unlink_mapping(mp);
    if (r == CUDA_SUCCESS)
      r = restore;
  } else if (--u->opens == 0) {
    *u = mp->users[--mp->nusers];
  }
  pthread_mutex_unlock(&ipc_lock);
  return r;
}

/* ---- the manager goes away ----------------------------------------------------- */

static size_t drop_all(cuemm_manager *m, int close);

size_t cuemm__ipc_close_all(cuemm_manager *m)
{
  return drop_all(m, 1);
}

size_t cuemm__ipc_forget_all(cuemm_manager *m)
{
  return drop_all(m, 0);
}

static size_t drop_all(cuemm_manager *m, int close)
{
  size_t closed = 0;
  pthread_mutex_lock(&ipc_lock);
  ipc_mapping **at = &mappings;
  while (*at) {
    ipc_mapping *mp = *at;
    if (mp->m != m) {
      at = &mp->next;
      continue;
    }
    /* Best effort: when the context is gone the mapping went with it, and
     * a failing close cannot be retried by anyone once the manager is gone. */
    cuemm__ctx_guard g;
    if (close && cuemm__ctx_enter(m, &g) == CUDA_SUCCESS) {
      driver_close(mp);
      cuemm__ctx_leave(m, &g, CUDA_SUCCESS);
    }
    closed++;
    *at = mp->next;
    free(mp->users);
    free(mp);
  }
  pthread_mutex_unlock(&ipc_lock);
  return closed;
}

/* ---- handles and descriptors over a Unix domain socket ---------------------------- */

/* Exports a descriptor for every chunk of pool handle h, which m's pool must
 * still hold as the handle describes it, inside a live block.  m's lock
 * held, context entered.  On failure no descriptor stays open. */
static CUresult export_fds_locked(cuemm_manager *m, const cuemm_ipc_handle *h, int *fds, unsigned *n)
{
  cuemm__pool *pool = m->pool;
  const cuemm_ipc_pieces *pc = &h->pieces;
  *n = 0;
  if (!pool || !pool->ipc)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_send: the handle is pool memory, but this manager has "
                        "%s: send it with the manager that exported it", pool ? "a pool without IPC" : "no pool");
  if (!m->drv->MemExportToShareableHandle)
    return cuemm__error(CUDA_ERROR_NOT_SUPPORTED, "cuemm_ipc_send: the CUDA driver %s has no "
                        "cuMemExportToShareableHandle", m->drv->path);
  long head = cuemm__pool_find_serial(pool, pc->serial);
  if (head < 0)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_send: the pool no longer has the chunk this handle "
                        "names (number %" PRIu64 "): the block was freed and the chunk released, or another manager "
                        "exported it", pc->serial);
  CUdeviceptr a = cuemm__pool_unit_addr(pool, (size_t)head) + (CUdeviceptr)h->offset;
  CUdeviceptr start;
  cuemm__owned_entry *e;
  CUresult r = pool_block_locked(m, a, "cuemm_ipc_send", &start, &e);
  if (r != CUDA_SUCCESS)
    return r;
  cuemm__pool_piece now[MAX_PIECES];
  size_t count = 0;
  int same = a + h->size <= start + e->size &&
             cuemm__pool_pieces(pool, a, (size_t)h->size, now, MAX_PIECES, &count) == 0 && count == pc->count;
  for (size_t i = 0; same && i < count; i++)
    same = now[i].bytes == pc->bytes[i];
  if (!same)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_send: the handle's range (0x%llx, %" PRIu64 " bytes) "
                        "is no longer what was exported: the block was freed and its memory reused",
                        (unsigned long long)a, h->size);
  for (; *n < count; ++*n) {
    int fd = -1;
    r = m->drv->MemExportToShareableHandle(&fd, now[*n].handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (r != CUDA_SUCCESS) {
      cuemm__driver_error(r, "cuMemExportToShareableHandle(chunk at 0x%llx, %zu bytes, POSIX file descriptor)",
                          (unsigned long long)now[*n].addr, now[*n].bytes);
      close_fds(fds, *n);
      *n = 0;
      return r;
    }
    fds[*n] = fd;
  }
  return CUDA_SUCCESS;
}

static CUresult os_error(int err, const char *what)
{
  return cuemm__error(CUDA_ERROR_OPERATING_SYSTEM, "%s: %s", what, strerror(err));
}

CUEMM_EXTERN CUresult cuemm_ipc_send(int sock, cuemm_manager *m, const cuemm_ipc_handle *h)
{
  if (!h)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_send: h is NULL");
  if (sock < 0)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_send: socket %d is not a descriptor", sock);
  CUresult r = check_handle(h, "cuemm_ipc_send");
  if (r != CUDA_SUCCESS)
    return r;
  int fds[MAX_PIECES];
  unsigned n = 0;
  if (h->kind == CUEMM_IPC_KIND_POOL) {
    if (h->source_pid != (uint32_t)getpid())
      return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_send: the pool handle was exported by pid %" PRIu32
                          ", not by this process: only the exporter can send its chunks", h->source_pid);
    if (!m && (r = cuemm_get(&m)) != CUDA_SUCCESS)
      return r;
    cuemm__lock_acquire(&m->lock);
    cuemm__ctx_guard g;
    r = cuemm__ctx_enter(m, &g);
    if (r == CUDA_SUCCESS) {
      r = export_fds_locked(m, h, fds, &n);
      CUresult restore = cuemm__ctx_leave(m, &g, CUDA_SUCCESS);
      if (r == CUDA_SUCCESS && restore != CUDA_SUCCESS) {
        close_fds(fds, n);
        r = restore;
      }
    }
    cuemm__lock_release(&m->lock);
    if (r != CUDA_SUCCESS)
      return r;
  }

  const unsigned char *bytes = (const unsigned char *)h;
  size_t sent = 0;
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int) * MAX_PIECES)];
  } ctl;
  memset(&ctl, 0, sizeof ctl);
  while (sent < sizeof *h) {
    struct iovec iov = { (void *)(bytes + sent), sizeof *h - sent };
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (sent == 0 && n > 0) {
      msg.msg_control = ctl.buf;
      msg.msg_controllen = CMSG_SPACE(sizeof(int) * n);
      struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * n);
      memcpy(CMSG_DATA(c), fds, sizeof(int) * n);
    }
    ssize_t put = sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (put < 0 && errno == EINTR)
      continue;
    if (put <= 0) {
      r = os_error(put < 0 ? errno : EPIPE, "cuemm_ipc_send: sendmsg on the socket failed");
      if (sent)
        cuemm__error_append(" after %zu of the handle's %d bytes", sent, CUEMM_IPC_HANDLE_SIZE);
      break;
    }
    sent += (size_t)put;
  }
  close_fds(fds, n);
  return r;
}

/* Descriptors a message brought, taken from its control data; any past
 * `cap` are closed at once. */
static void take_fds(struct msghdr *msg, int *fds, unsigned cap, unsigned *n, unsigned *extra)
{
  for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
      continue;
    size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < k; i++) {
      int fd;
      memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      if (*n < cap)
        fds[(*n)++] = fd;
      else {
        close(fd);
        ++*extra;
      }
    }
  }
}

CUEMM_EXTERN CUresult cuemm_ipc_recv(int sock, cuemm_ipc_handle *h)
{
  if (!h)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_recv: h is NULL");
  if (sock < 0)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_recv: socket %d is not a descriptor", sock);
  cuemm_ipc_handle in;
  memset(&in, 0, sizeof in);
  unsigned char *bytes = (unsigned char *)&in;
  size_t got = 0;
  int fds[MAX_PIECES];
  unsigned n = 0, extra = 0;
  int cut = 0;
  CUresult r = CUDA_SUCCESS;
  enum { SLOTS = 16 }; /* room to see, and refuse, more descriptors than a handle can need */
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int) * SLOTS)];
  } ctl;
  while (got < sizeof in) {
    struct iovec iov = { bytes + got, sizeof in - got };
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl.buf;
    msg.msg_controllen = sizeof ctl.buf;
    ssize_t k = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0) {
      r = os_error(errno, "cuemm_ipc_recv: recvmsg on the socket failed");
      break;
    }
    take_fds(&msg, fds, MAX_PIECES, &n, &extra);
    cut |= (msg.msg_flags & MSG_CTRUNC) != 0;
    if (k == 0) {
      r = cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_recv: the socket was closed after %zu bytes; a handle "
                       "is %d bytes (truncated)", got, CUEMM_IPC_HANDLE_SIZE);
      break;
    }
    got += (size_t)k;
  }
  if (r == CUDA_SUCCESS)
    r = check_handle(&in, "cuemm_ipc_recv");
  unsigned want = in.kind == CUEMM_IPC_KIND_POOL ? in.pieces.count : 0;
  if (r == CUDA_SUCCESS && (cut || extra))
    r = cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_recv: more file descriptors came than a handle can need "
                     "(or they were cut off); all closed");
  else if (r == CUDA_SUCCESS && n != want)
    r = cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_recv: the handle came with %u file descriptors; a %s "
                     "handle needs %u (send it with cuemm_ipc_send)", n,
                     in.kind == CUEMM_IPC_KIND_POOL ? "pool" : "device", want);
  fd_set_entry *e = NULL;
  if (r == CUDA_SUCCESS && n > 0 && !(e = calloc(1, sizeof *e)))
    r = cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "cuemm_ipc_recv: no host memory to keep the descriptors");
  if (r != CUDA_SUCCESS) {
    close_fds(fds, n);
    return r;
  }
  if (e) {
    e->h = in;
    memcpy(e->fds, fds, sizeof(int) * n);
    e->n = n;
    pthread_mutex_lock(&ipc_lock);
    e->next = received;
    received = e;
    pthread_mutex_unlock(&ipc_lock);
  }
  *h = in;
  return CUDA_SUCCESS;
}

CUEMM_EXTERN CUresult cuemm_ipc_discard(const cuemm_ipc_handle *h)
{
  if (!h)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_discard: h is NULL");
  pthread_mutex_lock(&ipc_lock);
  fd_set_entry **at = find_fds(h);
  if (at)
    drop_fds(at);
  pthread_mutex_unlock(&ipc_lock);
  if (!at)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_discard: no file descriptors are kept for this handle "
                        "(never received with cuemm_ipc_recv, or opened or discarded already)");
  return CUDA_SUCCESS;
}
