/* share.h: what the pool shares with other devices and processes
 * (share.c), internal interface.
 *
 * The manager grants peer access with its lock held and its context
 * current; ipc-fd.c lists a block's chunks for an export and finds a chunk
 * again by its serial, and vacate.c does the latter for the ranges
 * sent, with the lock held.  Growth opens every new chunk to the devices
 * already granted (pool.h's `access`), so pool.c needs nothing of this
 * file.
 */
#ifndef CUEMM_POOL_SHARE_H
#define CUEMM_POOL_SHARE_H

#include "pool/pool.h"

/* Gives `peer` read-write access to every chunk mapped now and to come. */
CUresult cuemm__share_grant(cuemm__pool *p, CUdevice peer);

/* One physical allocation (chunk) of the pool, as IPC describes it. */
typedef struct cuemm__pool_piece {
  CUdeviceptr addr;
  size_t bytes;
  uint64_t serial;
  CUmemGenericAllocationHandle handle;
} cuemm__pool_piece;

/* Fills out[0..*n) with the chunks that [a, a + size) overlaps, in address
 * order, at most `max`.  Returns 0; -1 when part of the range is not mapped;
 * -2 when it overlaps more than `max` chunks (*n then says how many). */
int cuemm__share_pieces(const cuemm__pool *p, CUdeviceptr a, size_t size, cuemm__pool_piece *out, size_t max,
                       size_t *n);

/* The head unit of the chunk numbered `serial`, or -1 when the pool has no
 * such chunk (never made, or released since). */
long cuemm__share_find_serial(const cuemm__pool *p, uint64_t serial);

#endif
