/* account.h: the manager's memory accounting (account.c), internal
 * interface.  Below the manager and managed.c: manager.h includes it for
 * its users.
 */
#ifndef CUEMM_ACCOUNT_H
#define CUEMM_ACCOUNT_H

#include <stddef.h>

#include "cuemm.h"
#include "base/internal.h"

/* Counts a device allocation of `size` bytes in the statistics (live, peak,
 * allocs).  Lock held. */
void cuemm__account_alloc(cuemm_manager *m, size_t size);

/* Device memory the manager holds from the driver now: the pool's mapped
 * bytes, managed segments, cuMemAlloc allocations.  Any thread, no lock
 * (the figures are read atomically; the sum is not one moment's). */
size_t cuemm__account_held_bytes(const cuemm_manager *m);
/* Raises peak_held_bytes to what is held now.  Lock held. */
void cuemm__account_note_held(cuemm_manager *m);
/* Appends to the thread's message what an out-of-memory failure of m needs
 * said: the device (ordinal, PCI bus id), the bytes requested, held by m
 * and free of total on the device.  Lock held. */
void cuemm__account_oom_where(cuemm_manager *m, size_t size);

/* The out-of-memory retry that every allocator makes once (Numba's rule:
 * flush, give back, try again), as one story in the statistics, the log
 * and the message.  cuemm__account_oom_retry counts and logs it and keeps
 * what the message will need: the pending queue before its flush and,
 * with CUEMM__OOM_KEEP_WHY, the first failure's words.  Device memory
 * (CUEMM__OOM_DEVICE) is logged and its message says the device's
 * figures; pinned host memory's is counted only.  When the retry fails too,
 * the caller sets the message's head and cuemm__account_oom_failed adds
 * " after flushing N pending frees (B bytes), <steps>and retrying" (or,
 * with a defer scope open, that the frees were held back), the first
 * failure's words and the device's figures; it returns r.  Either way the
 * retry ends with cuemm__account_oom_failed or cuemm__account_oom_served.
 * Lock held. */
typedef struct cuemm__oom_retry {
  size_t count, bytes;
  unsigned how;
  cuemm__saved_error why;
} cuemm__oom_retry;

#define CUEMM__OOM_KEEP_WHY 1u
#define CUEMM__OOM_DEVICE 2u

void cuemm__account_oom_retry(cuemm_manager *m, cuemm__oom_retry *o, unsigned how);
CUresult cuemm__account_oom_failed(cuemm_manager *m, cuemm__oom_retry *o, CUresult r, size_t size, const char *steps);
void cuemm__account_oom_served(cuemm__oom_retry *o);

#endif
