/* ipc.h: what ipc.c, ipc-fd.c and ipc-handle.c, the parts of sharing memory
 * between processes, share.
 *
 * ipc.c owns device memory shared through the driver's legacy IPC
 * (cuIpcGetMemHandle, cuIpcOpenMemHandle), and the process-wide table of
 * mappings opened from handles of either kind, with cuemm_ipc_open and
 * cuemm_ipc_close over it.  ipc-fd.c owns pool memory shared as POSIX file
 * descriptors: what a pool handle says of a block, exporting its chunks
 * (cuMemExportToShareableHandle), passing them over a Unix domain socket
 * (SCM_RIGHTS), the table of received descriptors, and mapping and
 * unmapping another process's pool memory.  ipc-handle.c, below both, owns
 * the handle's bytes: its layout, checks and checksum.  ipc.c calls into
 * ipc-fd.c, never the other way.
 *
 * cuemm__ipc_lock (defined in ipc-fd.c, the lower of the two) guards both
 * tables.  It may be taken while a manager's
 * lock is held (cuemm_destroy closes the manager's mappings that way), so
 * it is never held while taking a manager's lock.
 */
#ifndef CUEMM_IPC_H
#define CUEMM_IPC_H

#include "core/internal.h"

/* The most chunks one pool handle names. */
#define MAX_PIECES CUEMM_IPC_POOL_MAX_PIECES

/* One pointer cuemm_ipc_open returned, and how many opens it has. */
typedef struct cuemm__ipc_user {
  CUdeviceptr p;      /* what cuemm_ipc_open returned */
  size_t opens;       /* not yet closed */
} cuemm__ipc_user;

typedef struct cuemm__ipc_mapping {
  struct cuemm__ipc_mapping *next;
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
  /* Imported handles whose cuMemRelease failed at the open: each would keep
   * its chunk's memory alive in this process after the unmap, so the close
   * releases them, and a close that cannot stays open to be tried again. */
  CUmemGenericAllocationHandle unreleased[MAX_PIECES];
  unsigned nunreleased;
  unsigned long long ctx_id;      /* the importing context */
  cuemm_manager *m;
  CUdeviceptr base;
  uint64_t alloc_size;
  /* cuIpcOpenMemHandle calls that returned this base, each to be closed:
   * normally 1, more if the driver gave two handles for one allocation. */
  unsigned driver_opens;
  cuemm__ipc_user *users;
  size_t nusers, capusers;
} cuemm__ipc_mapping;

extern pthread_mutex_t cuemm__ipc_lock;

/* ipc-handle.c: the checks of cuemm_ipc_handle_from_bytes, for every handle
 * that comes in; a failure names `fn`. */
CUresult cuemm__ipc_check_handle(const cuemm_ipc_handle *h, const char *fn);

/* ipc-handle.c: the checksum a handle carries, of all its other bytes. */
uint32_t cuemm__ipc_checksum(const cuemm_ipc_handle *h);

/* ipc-fd.c: fills the pool part of a handle for [p, p + size) of m's pool
 * (size 0: to the block's end).  m's lock held. */
CUresult cuemm__ipc_describe_pool(cuemm_manager *m, CUdeviceptr p, size_t size, cuemm_ipc_handle *h);

/* ipc-fd.c: the descriptors cuemm_ipc_recv kept for a handle, found by
 * the handle's bytes (NULL if none), and dropped (closed) once mapped.
 * cuemm__ipc_lock held. */
typedef struct cuemm__ipc_fds cuemm__ipc_fds;
cuemm__ipc_fds **cuemm__ipc_find_fds(const cuemm_ipc_handle *h);
void cuemm__ipc_drop_fds(cuemm__ipc_fds **at);

/* ipc-fd.c: maps and unmaps pool memory of another process in m's
 * context.  cuemm__ipc_lock held, context entered. */
CUresult cuemm__ipc_map_pool(cuemm_manager *m, const cuemm_ipc_handle *h, const cuemm__ipc_fds *fs,
                             cuemm__ipc_mapping **out);
CUresult cuemm__ipc_pool_unmap(const cuemm__driver_table *d, cuemm__ipc_mapping *mp);

/* The manager's extension (manager.h): cuemm_destroy closes the mappings
 * opened in its manager and says how many; cuemm_abandon forgets them. */
extern const cuemm__extension cuemm__ipc_extension;

#endif
