/* fence.h: asymmetric memory fences, for a flag one thread sets on every
 * call and others look at rarely (the thread heap's `busy`, heap.h).
 *
 * A Dekker handshake needs a full fence on both sides between the store of
 * one's own flag and the load of the other's: on x86 a locked instruction,
 * some 12 ns on a Xeon, two of them in every alloc+free pair of the
 * stream-ordered path.  The asymmetric form moves both onto the rare side:
 * the frequent side keeps only a compiler barrier, and the rare side, after
 * its store, makes every running thread of the process execute a full
 * fence (cuemm__fence_heavy), so either the frequent side's store is
 * visible to its load, or the frequent side's load comes after the fence
 * and sees the rare side's store.  Linux's membarrier(2) does that
 * (MEMBARRIER_CMD_PRIVATE_EXPEDITED, since 4.14); where the kernel refuses
 * it at a later call (a forked child that has not registered), the TLB
 * shootdown that downgrading a page's protection sends to every processor
 * running the process serves as the fence instead.  A heavy fence costs
 * microseconds, so users bound how often they pay it.
 */
#ifndef CUEMM_FENCE_H
#define CUEMM_FENCE_H

/* Whether heavy fences can be had in this process (asked once: membarrier
 * registered and the fallback's page mapped).  0 under ThreadSanitizer,
 * which cannot see the order a heavy fence gives. */
int cuemm__fence_asymmetric(void);

/* A full fence on every running thread of the process, the caller's too.
 * Only after cuemm__fence_asymmetric() returned 1. */
void cuemm__fence_heavy(void);

/* A token unique to the calling thread among live threads. */
const void *cuemm__fence_self(void);

#endif
