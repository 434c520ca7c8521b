/* account.h: the manager's memory accounting (account.c), internal
 * interface.  Below the manager and managed.c: manager.h includes it for
 * its users.
 */
#ifndef CUEMM_ACCOUNT_H
#define CUEMM_ACCOUNT_H

#include <stddef.h>

#include "cuemm.h"

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

#endif
