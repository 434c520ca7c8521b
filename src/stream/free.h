/* free.h: the general free of the stream-ordered path
 * (free.c), where the owner's fast paths send a block they cannot
 * keep.
 */
#ifndef CUEMM_STREAM_FREE_H
#define CUEMM_STREAM_FREE_H

#include "stream/heap.h"
#include "core/internal.h"

/* The general free, any thread, any block: see free.c.  `looked`:
 * the caller found no record of dp in h, its own heap. */
CUresult cuemm__free_async_slow(cuemm_manager *m, cuemm__heap *h, CUdeviceptr dp, CUstream stream, size_t *freed,
                         int looked);

#endif
