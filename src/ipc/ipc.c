/* ipc.c: owns sharing device memory between processes, all but the handle's
 * bytes (ipc-handle.c) and the pool's file-descriptor transport (ipc-fd.c):
 * exporting a pointer of a manager's allocation, legacy device IPC
 * (cuIpcGetMemHandle / cuIpcOpenMemHandle), and the process-wide table of
 * mappings opened from handles of either kind, with open and close.
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
 * That lock is never held while taking a manager's lock.  Pool mappings
 * (ipc-fd.c maps them) join the same table, keyed by exporter, device and
 * chunk list, so opening one block twice maps it once.  The mappings a
 * manager still holds are closed by cuemm_destroy and forgotten by
 * cuemm_abandon, through the manager's extension hooks (manager.h).
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/internal.h"
#include "ipc/ipc.h"

/* A device's UUID as the driver's tools print it, for messages. */
static void uuid_hex(const uint8_t *u, char out[33])
{
  static const char digits[] = "0123456789abcdef";
  for (int i = 0; i < 16; i++) {
    out[2 * i] = digits[u[i] >> 4];
    out[2 * i + 1] = digits[u[i] & 15];
  }
  out[32] = 0;
}

/* ---- export ------------------------------------------------------------------ */

/* Finds the live device allocation of m holding p, and fills what the
 * handle says of it.  Lock held, context entered. */
static CUresult describe_locked(cuemm_manager *m, CUdeviceptr p, size_t size, cuemm_ipc_handle *h, CUdeviceptr *base)
{
  const cuemm__driver_table *d = m->drv;
  if (m->pool && cuemm__pool_is_suspended(m->pool))
    return cuemm__pool_refuse_suspended(m->pool, "cuemm_ipc_export");
  if (m->pool && cuemm__pool_contains(m->pool, p))
    return cuemm__ipc_describe_pool(m, p, size, h);
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
  out.checksum = cuemm__ipc_checksum(&out);
  *h = out;
  return CUDA_SUCCESS;
}

/* ---- the table of opened mappings -------------------------------------------- */

static cuemm__ipc_mapping *mappings;

static cuemm__ipc_mapping *find_by_key(const cuemm_ipc_handle *h, unsigned long long ctx_id)
{
  for (cuemm__ipc_mapping *mp = mappings; mp; mp = mp->next) {
    if (mp->ctx_id != ctx_id || mp->kind != h->kind)
      continue;
    if (h->kind == CUEMM_IPC_KIND_DEVICE && memcmp(&mp->key, &h->driver, sizeof h->driver) == 0)
      return mp;
    if (h->kind == CUEMM_IPC_KIND_POOL && mp->pid == h->source_pid &&
        memcmp(mp->uuid, h->device_uuid, sizeof mp->uuid) == 0 &&
        memcmp(&mp->pieces, &h->pieces, sizeof mp->pieces) == 0)
      return mp;
  }
  return NULL;
}

static cuemm__ipc_mapping *find_by_base(CUdeviceptr base, unsigned long long ctx_id)
{
  for (cuemm__ipc_mapping *mp = mappings; mp; mp = mp->next)
    if (mp->ctx_id == ctx_id && mp->kind == CUEMM_IPC_KIND_DEVICE && mp->base == base)
      return mp;
  return NULL;
}

/* The mapping of ctx_id that handed out p, and p's user entry. */
static cuemm__ipc_mapping *find_user(CUdeviceptr p, unsigned long long ctx_id, cuemm__ipc_user **user)
{
  for (cuemm__ipc_mapping *mp = mappings; mp; mp = mp->next) {
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

static int add_user(cuemm__ipc_mapping *mp, CUdeviceptr p)
{
  for (size_t i = 0; i < mp->nusers; i++)
    if (mp->users[i].p == p) {
      mp->users[i].opens++;
      return 0;
    }
  if (mp->nusers == mp->capusers) {
    size_t cap = mp->capusers ? mp->capusers * 2 : 4;
    cuemm__ipc_user *grown = realloc(mp->users, cap * sizeof *grown);
    if (!grown)
      return -1;
    mp->users = grown;
    mp->capusers = cap;
  }
  mp->users[mp->nusers++] = (cuemm__ipc_user){ p, 1 };
  return 0;
}

static void link_mapping(cuemm__ipc_mapping *mp)
{
  mp->next = mappings;
  mappings = mp;
}

static void unlink_mapping(cuemm__ipc_mapping *mp)
{
  for (cuemm__ipc_mapping **at = &mappings; *at; at = &(*at)->next)
    if (*at == mp) {
      *at = mp->next;
      break;
    }
  free(mp->users);
  free(mp);
}

/* Unmaps with as many driver closes as there were driver opens.  Context
 * entered.  On failure the opens not yet undone stay counted. */
static CUresult driver_close(cuemm__ipc_mapping *mp)
{
  if (mp->kind == CUEMM_IPC_KIND_POOL)
    return cuemm__ipc_pool_unmap(mp->m->drv, mp);
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
 * context has mapped under another handle (*created = 0).
 * cuemm__ipc_lock held, context entered. */
static CUresult map_new(cuemm_manager *m, const cuemm_ipc_handle *h, cuemm__ipc_mapping **out, int *created)
{
  CUdeviceptr base = 0;
  CUresult r = m->drv->IpcOpenMemHandle(&base, h->driver, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
  if (r != CUDA_SUCCESS) {
    cuemm__driver_error(r, "cuIpcOpenMemHandle(handle from pid %" PRIu32 ", %" PRIu64 " bytes)", h->source_pid,
                        h->alloc_size);
    cuemm__error_append(" (has the exporter freed the memory or exited?)");
    return r;
  }
  cuemm__ipc_mapping *mp = find_by_base(base, m->ctx_id);
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
  link_mapping(mp);
  *out = mp;
  *created = 1;
  return CUDA_SUCCESS;
}

CUEMM_EXTERN CUresult cuemm_ipc_open(cuemm_manager *m, const cuemm_ipc_handle *h, CUdeviceptr *p)
{
  if (!h)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_open: h is NULL");
  if (!p)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_open: p is NULL");
  CUresult r = cuemm__ipc_check_handle(h, "cuemm_ipc_open");
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

  pthread_mutex_lock(&cuemm__ipc_lock);
  cuemm__ipc_mapping *mp = find_by_key(h, m->ctx_id);
  int mapped = 0, created = 0;
  cuemm__ipc_fds **fds = NULL;
  CUresult restore = CUDA_SUCCESS; /* a failed restore of the caller's context, reported after the open */
  if (!mp && pool && !(fds = cuemm__ipc_find_fds(h)))
    r = cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_open: no file descriptors were received for this pool "
                     "handle (from pid %" PRIu32 "), and this context has it open nowhere: receive it with "
                     "cuemm_ipc_recv (it comes from cuemm_ipc_send), once per open that maps it", h->source_pid);
  if (!mp && r == CUDA_SUCCESS) {
    cuemm__ctx_guard g;
    r = cuemm__ctx_enter(m, &g);
    if (r == CUDA_SUCCESS) {
      r = check_reach(m, h);
      if (r == CUDA_SUCCESS && pool && (r = cuemm__ipc_map_pool(m, h, *fds, &mp)) == CUDA_SUCCESS) {
        link_mapping(mp);
        mapped = created = 1;
      }
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
            cuemm__ipc_pool_unmap(d, mp);
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
      cuemm__ipc_drop_fds(fds); /* the mapping holds the memory: the descriptors are done */
    }
  }
  pthread_mutex_unlock(&cuemm__ipc_lock);
  if (r == CUDA_SUCCESS)
    *p = q;
  return r == CUDA_SUCCESS ? restore : r;
}

CUEMM_EXTERN CUresult cuemm_ipc_close(cuemm_manager *m, CUdeviceptr p)
{
  CUresult r;
  if (!m && (r = cuemm_get(&m)) != CUDA_SUCCESS)
    return r;
  pthread_mutex_lock(&cuemm__ipc_lock);
  cuemm__ipc_user *u = NULL;
  cuemm__ipc_mapping *mp = find_user(p, m->ctx_id, &u);
  if (!mp) {
    pthread_mutex_unlock(&cuemm__ipc_lock);
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
  pthread_mutex_unlock(&cuemm__ipc_lock);
  return r;
}

/* ---- the manager goes away ----------------------------------------------------- */

/* Unlinks every mapping opened through m, closing it first when
 * `close`; returns how many there were.  m's lock held. */
static size_t drop_all(cuemm_manager *m, int close)
{
  size_t closed = 0;
  pthread_mutex_lock(&cuemm__ipc_lock);
  cuemm__ipc_mapping **at = &mappings;
  while (*at) {
    cuemm__ipc_mapping *mp = *at;
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
  pthread_mutex_unlock(&cuemm__ipc_lock);
  return closed;
}

static void ipc_destroy(cuemm_manager *m, char *note, size_t cap)
{
  size_t closed = drop_all(m, 1);
  if (closed)
    snprintf(note, cap, "closed %zu IPC mappings the program had not closed", closed);
}

static void ipc_abandon(cuemm_manager *m)
{
  drop_all(m, 0);
}

const cuemm__extension cuemm__ipc_extension = {
  .destroy = ipc_destroy,
  .abandon = ipc_abandon,
};
