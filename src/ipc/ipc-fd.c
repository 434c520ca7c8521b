/* ipc-fd.c: owns sharing pool memory between processes as POSIX file
 * descriptors: what a pool handle says of a block, exporting the block's
 * chunks with cuMemExportToShareableHandle, sending and receiving them with
 * the handle over a Unix domain socket (SCM_RIGHTS), the table of received
 * descriptors, and mapping and unmapping the chunks in the importer; and
 * cuemm__ipc_lock, which guards that table and ipc.c's table of mappings
 * (ipc.c calls down into this file, so the lock both take lives here).
 *
 * Pool blocks are cuMemCreate memory, which legacy IPC cannot export.  A
 * pool created with pool_ipc makes its chunks exportable as POSIX file
 * descriptors, and a pool handle names the chunks a range overlaps (their
 * sizes in address order, the first one's serial, the range's offset in the
 * first) instead of carrying a driver handle.  The descriptors cannot ride in
 * the bytes: cuemm_ipc_send exports them at the last moment and passes them
 * with the bytes in one sendmsg (SCM_RIGHTS), and cuemm_ipc_recv keeps what
 * arrives in a table of received descriptors keyed by the handle's bytes, so
 * that cuemm_ipc_open (ipc.c) keeps its signature for both kinds.  The open
 * that maps a pool handle imports the descriptors, reserves a range, maps
 * the chunks one after another, sets access, and only then closes the
 * descriptors and drops its own references to the imported handles (the
 * mapping holds the memory); any failing step undoes the earlier ones and
 * leaves the descriptors in the table, so a failed open changes nothing.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/internal.h"
#include "ipc/ipc.h"
#include "pool/internal.h"

pthread_mutex_t cuemm__ipc_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- export ------------------------------------------------------------------ */

/* The live pool block of m holding p: its start and the manager's entry.
 * Lock held. */
static CUresult pool_block_locked(cuemm_manager *m, CUdeviceptr p, const char *fn, CUdeviceptr *start,
                                  size_t *bytes)
{
  /* A block of a thread's span (span.h) lies inside the span's pool block:
   * its own entry gives its start. */
  cuemm__owned_entry *e = cuemm__extensions_owned_lookup(m, (uintptr_t)p, 1);
  if (e && e->kind == CUEMM__KIND_STREAM && (uintptr_t)p - e->key < e->size)
    *start = (CUdeviceptr)e->key;
  else if (cuemm__pool_used_at(m->pool, p, start) != 0)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "%s: 0x%llx lies in no live block of the pool (never allocated, "
                        "or freed and returned to the pool)", fn, (unsigned long long)p);
  else
    e = cuemm__owned_find(&m->owned, (uintptr_t)*start);
  if (e && e->kind == CUEMM__KIND_STREAM && (*bytes = cuemm__extensions_live_size(m, e)) == 0)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "%s: 0x%llx lies in a pool block at 0x%llx that the program has "
                        "freed already (cuemm_free_async)", fn, (unsigned long long)p, (unsigned long long)*start);
  if (!e || (e->kind != CUEMM__KIND_POOL && e->kind != CUEMM__KIND_STREAM))
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "%s: 0x%llx lies in a pool block at 0x%llx that the program has "
                        "freed already (it waits in the pending queue)", fn, (unsigned long long)p,
                        (unsigned long long)*start);
  if (e->kind == CUEMM__KIND_POOL)
    *bytes = e->size;
  return CUDA_SUCCESS;
}

/* Fills what a pool handle says of the block holding p: the chunks that
 * [p, p + size) overlaps.  Lock held. */
CUresult cuemm__ipc_describe_pool(cuemm_manager *m, CUdeviceptr p, size_t size, cuemm_ipc_handle *h)
{
  cuemm__pool *pool = m->pool;
  if (!cuemm__pool_is_ipc(pool))
    return cuemm__error(CUDA_ERROR_NOT_SUPPORTED,
                        "cuemm_ipc_export: 0x%llx is pool memory (CUEMM_POOL=vmm), made with cuMemCreate, which "
                        "legacy CUDA IPC cannot export, and this pool's chunks were not made exportable; enable "
                        "pool IPC with CUEMM_POOL_IPC=1 (or cuemm_config.pool_ipc = 1) when the manager is created, "
                        "or allocate the buffer through a manager without the pool", (unsigned long long)p);
  CUdeviceptr start;
  size_t bytes = 0;
  CUresult r = pool_block_locked(m, p, "cuemm_ipc_export", &start, &bytes);
  if (r != CUDA_SUCCESS)
    return r;
  size_t off = (size_t)(p - start);
  if (off >= bytes)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_export: 0x%llx is past the end of its pool block "
                        "(0x%llx, %zu bytes)", (unsigned long long)p, (unsigned long long)start, bytes);
  if (size == 0)
    size = bytes - off;
  else if (size > bytes - off)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_export: %zu bytes from offset %zu run past the end of "
                        "the pool block (%zu bytes)", size, off, bytes);
  cuemm__pool_piece pc[MAX_PIECES];
  size_t n = 0;
  int got = cuemm__share_pieces(pool, p, size, pc, MAX_PIECES, &n);
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

/* ---- received file descriptors ------------------------------------------------ */

/* One set of descriptors cuemm_ipc_recv received with a handle, waiting for
 * the open that maps it.  cuemm__ipc_lock guards the list. */
struct cuemm__ipc_fds {
  struct cuemm__ipc_fds *next;
  cuemm_ipc_handle h;
  int fds[MAX_PIECES];
  unsigned n;
};

static cuemm__ipc_fds *received;

cuemm__ipc_fds **cuemm__ipc_find_fds(const cuemm_ipc_handle *h)
{
  for (cuemm__ipc_fds **at = &received; *at; at = &(*at)->next)
    if (memcmp(&(*at)->h, h, sizeof *h) == 0)
      return at;
  return NULL;
}

static void close_fds(const int *fds, unsigned n)
{
  for (unsigned i = 0; i < n; i++)
    close(fds[i]);
}

/* Unlinks and frees a set, closing its descriptors.  cuemm__ipc_lock held. */
void cuemm__ipc_drop_fds(cuemm__ipc_fds **at)
{
  cuemm__ipc_fds *e = *at;
  *at = e->next;
  close_fds(e->fds, e->n);
  free(e);
}

/* ---- mapping in the importer ------------------------------------------------- */

/* Maps a pool handle's chunks in m's context from the descriptors of `fs`:
 * import each, reserve the range, map each in order, give m's device
 * access, then drop the imported handles (the mappings keep the memory).
 * A failing step undoes the earlier ones; the descriptors stay open.
 * The caller links the new mapping into the table.  cuemm__ipc_lock held,
 * context entered. */
CUresult cuemm__ipc_map_pool(cuemm_manager *m, const cuemm_ipc_handle *h, const cuemm__ipc_fds *fs,
                             cuemm__ipc_mapping **out)
{
  const cuemm__driver_table *d = m->drv;
  const cuemm_ipc_pieces *pc = &h->pieces;
  CUmemGenericAllocationHandle imported[MAX_PIECES];
  unsigned nimported = 0;
  CUresult r = CUDA_SUCCESS;
  cuemm__ipc_mapping *mp = calloc(1, sizeof *mp);
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
  /* The mappings hold the memory now.  A failing release does not fail
   * the open, but the handle is kept for the close to release: left alone
   * it would hold the chunk's memory until this process exits. */
  for (unsigned i = 0; i < nimported; i++)
    if (d->MemRelease(imported[i]) != CUDA_SUCCESS)
      mp->unreleased[mp->nunreleased++] = imported[i];
  *out = mp;
  return CUDA_SUCCESS;

undo:
  cuemm__ipc_pool_unmap(d, mp);
  for (unsigned i = 0; i < nimported; i++)
    d->MemRelease(imported[i]);
  free(mp);
  return r;
}

/* Unmaps a pool mapping's chunks, last first, then frees its range.
 * Context entered.  On failure what is not yet undone stays recorded, for
 * a later close to finish. */
CUresult cuemm__ipc_pool_unmap(const cuemm__driver_table *d, cuemm__ipc_mapping *mp)
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
  while (mp->nunreleased > 0) {
    CUresult r = d->MemRelease(mp->unreleased[mp->nunreleased - 1]);
    if (r != CUDA_SUCCESS)
      return cuemm__driver_error(r, "cuMemRelease of a chunk imported from pid %" PRIu32 " (its release at the open "
                                 "had failed too)", mp->pid);
    mp->nunreleased--;
  }
  return CUDA_SUCCESS;
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
  if (!pool || !cuemm__pool_is_ipc(pool))
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_send: the handle is pool memory, but this manager has "
                        "%s: send it with the manager that exported it", pool ? "a pool without IPC" : "no pool");
  if (!m->drv->MemExportToShareableHandle)
    return cuemm__error(CUDA_ERROR_NOT_SUPPORTED, "cuemm_ipc_send: the CUDA driver %s has no "
                        "cuMemExportToShareableHandle", m->drv->path);
  if (cuemm__pool_is_suspended(pool))
    return cuemm__pool_refuse_suspended(pool, "cuemm_ipc_send");
  long head = cuemm__share_find_serial(pool, pc->serial);
  if (head < 0)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_send: the pool no longer has the chunk this handle "
                        "names (number %" PRIu64 "): the block was freed and the chunk released, or another manager "
                        "exported it", pc->serial);
  CUdeviceptr a = cuemm__pool_unit_addr(pool, (size_t)head) + (CUdeviceptr)h->offset;
  CUdeviceptr start;
  size_t bytes = 0;
  CUresult r = pool_block_locked(m, a, "cuemm_ipc_send", &start, &bytes);
  if (r != CUDA_SUCCESS)
    return r;
  cuemm__pool_piece now[MAX_PIECES];
  size_t count = 0;
  int same = a + h->size <= start + bytes &&
             cuemm__share_pieces(pool, a, (size_t)h->size, now, MAX_PIECES, &count) == 0 && count == pc->count;
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
  /* The chunks may now be open in another process: a suspension must not
   * release them unasked (cuemm_pool_suspend). */
  if (cuemm__vacate_note_sent(pool, a, (size_t)h->size, pc->serial) != 0) {
    close_fds(fds, *n);
    *n = 0;
    return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "cuemm_ipc_send: no host memory to record the range sent");
  }
  return CUDA_SUCCESS;
}

static CUresult os_error(int err, const char *what)
{
  return cuemm__error(CUDA_ERROR_OPERATING_SYSTEM, "%s: %s", what, strerror(err));
}

CUEMM_EXTERN CUresult cuemm_ipc_handle_send(cuemm_manager *m, const cuemm_ipc_handle *h, int sock)
{
  if (!h)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_send: h is NULL");
  if (sock < 0)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_send: socket %d is not a descriptor", sock);
  CUresult r = cuemm__ipc_check_handle(h, "cuemm_ipc_send");
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
    r = cuemm__ipc_check_handle(&in, "cuemm_ipc_recv");
  unsigned want = in.kind == CUEMM_IPC_KIND_POOL ? in.pieces.count : 0;
  if (r == CUDA_SUCCESS && (cut || extra))
    r = cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_recv: more file descriptors came than a handle can need "
                     "(or they were cut off); all closed");
  else if (r == CUDA_SUCCESS && n != want)
    r = cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_recv: the handle came with %u file descriptors; a %s "
                     "handle needs %u (send it with cuemm_ipc_send)", n,
                     in.kind == CUEMM_IPC_KIND_POOL ? "pool" : "device", want);
  cuemm__ipc_fds *e = NULL;
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
    pthread_mutex_lock(&cuemm__ipc_lock);
    e->next = received;
    received = e;
    pthread_mutex_unlock(&cuemm__ipc_lock);
  }
  *h = in;
  return CUDA_SUCCESS;
}

CUEMM_EXTERN CUresult cuemm_ipc_discard(const cuemm_ipc_handle *h)
{
  if (!h)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_discard: h is NULL");
  pthread_mutex_lock(&cuemm__ipc_lock);
  cuemm__ipc_fds **at = cuemm__ipc_find_fds(h);
  if (at)
    cuemm__ipc_drop_fds(at);
  pthread_mutex_unlock(&cuemm__ipc_lock);
  if (!at)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_ipc_discard: no file descriptors are kept for this handle "
                        "(never received with cuemm_ipc_recv, or opened or discarded already)");
  return CUDA_SUCCESS;
}
