/* stream.h: the stream-ordered path as the manager sees it: an extension
 * (manager.h) whose thread caches hold pool blocks, which the pool asks
 * back before it grows.  Its public calls are in cuemm.h.
 */
#ifndef CUEMM_STREAM_H
#define CUEMM_STREAM_H

#include "core/internal.h"

extern const cuemm__extension cuemm__stream_extension;

/* A block a thread's heap holds, as snapshots and statistics see it. */
typedef struct cuemm__stream_block {
  uintptr_t ptr;
  size_t size;        /* the pool block's size */
  size_t req;         /* live: the bytes asked for; cached: 0 */
  CUstream stream;    /* live: allocated on; cached: freed on (NULL for the legacy stream) */
  int cached;
  int retired;        /* its stream is gone (the per-thread stream of an exited thread) */
} cuemm__stream_block;

/* Calls fn for every block the threads' heaps hold, live or cached, each
 * heap locked in turn.  m's lock held. */
void cuemm__stream_each(cuemm_manager *m, void (*fn)(void *arg, const cuemm__stream_block *b), void *arg);

#endif
