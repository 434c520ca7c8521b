/* vacate.h: the pool's side of a suspension (vacate.c),
 * internal interface.
 *
 * suspend.c calls these with the manager's lock held and its context
 * current; ipc-fd.c notes the ranges it sends with the lock held.  The
 * suspended state that the allocation paths read (the flag, the refusal,
 * the bytes a resumption needs) stays in pool.h, so that those paths need
 * nothing of this file.
 */
#ifndef CUEMM_POOL_VACATE_H
#define CUEMM_POOL_VACATE_H

#include "pool/pool.h"

/* Calls fn(arg, off, size) for every run of adjacent blocks handed out
 * (live, or pending a free), in address order; offsets from the base. */
void cuemm__vacate_each_live_run(const cuemm__pool *p, void (*fn)(void *arg, size_t off, size_t size), void *arg);

/* Calls fn for every run of blocks handed out inside [off, off + size),
 * clipped to it: the parts of a kept run still live at resumption. */
void cuemm__vacate_each_live_in(const cuemm__pool *p, size_t off, size_t size,
                              void (*fn)(void *arg, size_t off, size_t size), void *arg);

/* Unmaps and releases every chunk that still holds physical memory
 * (unmap first: a chunk whose cuMemUnmap fails keeps everything and stays
 * usable; one whose cuMemRelease fails keeps its handle, which a
 * resumption maps again), marking each CUEMM__CHUNK_SUSPENDED.  Goes on
 * past a failure, returns the first, and the message names how many
 * chunks and bytes are still held. */
CUresult cuemm__vacate_unmap_all(cuemm__pool *p);

/* Forgets the suspended chunks that hold no block handed out: they become
 * unmapped space, which a resumption does not map. */
void cuemm__vacate_forget_free(cuemm__pool *p);

/* Maps physical memory again for every chunk a suspension released:
 * adjacent ones as one run, created in pieces of the size growth would
 * choose, mapped, then one cuMemSetAccess per run for every device with
 * access.  A failure lowers every chunk again (cuemm__vacate_unmap_all),
 * so the pool stays wholly suspended; its message names the call. */
CUresult cuemm__vacate_remap_all(cuemm__pool *p);

/* A range sent to another process (cuemm_ipc_send): its first chunk's
 * serial tells whether the memory is still the one sent. */
typedef struct cuemm__pool_sent {
  CUdeviceptr addr;
  size_t size;
  uint64_t serial;
} cuemm__pool_sent;

/* Remembers a range sent.  Returns 0, or -1 when host memory ran out. */
int cuemm__vacate_note_sent(cuemm__pool *p, CUdeviceptr addr, size_t size, uint64_t serial);

/* Drops the ranges whose chunk is gone or whose block was freed, and
 * returns the ranges still sent and live (at most `max` in out[], the
 * count in any case). */
size_t cuemm__vacate_sent_live(cuemm__pool *p, cuemm__pool_sent *out, size_t max);

#endif
