/* stream/internal.h: what stream/ offers the folders above it.
 *
 * The stream-ordered path (cuemm_allocate_async, cuemm_free_async): the
 * public calls and their fast paths (stream.c), a thread's cache of pool
 * blocks (heap.c) and how a thread finds it (thread-heap.c), spans a
 * thread cuts its large blocks from (span.c), the exchange of blocks
 * between the heaps and the pool (exchange.c), the pool's stream tags
 * (tags.c), events (event.c) and the general free (free.c).  To the
 * manager it is an extension (stream.h).  Prefixes: cuemm__stream,
 * cuemm__heap, cuemm__hb, cuemm__thread_heap, cuemm__span,
 * cuemm__exchange, cuemm__tags, cuemm__event, cuemm__free.  Above core/
 * and everything below it.
 */
#ifndef CUEMM_STREAM_INTERNAL_H
#define CUEMM_STREAM_INTERNAL_H

#include "stream/exchange.h"
#include "stream/heap.h"
#include "stream/span.h"
#include "stream/stream.h"

#endif
