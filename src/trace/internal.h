/* trace/internal.h: what trace/ offers the folders above it.
 *
 * What the lower layers record as they work, for people and tools to
 * read: the event log in RMM's CSV format (log.c, CUEMM_LOG) and the NVTX
 * annotations of pool memory that compute-sanitizer reads (nvtx.c).  It
 * sits below the pool, which notes every growth and release, and knows no
 * manager.  Prefixes: cuemm__log, cuemm__nvtx.  Above base/ only.
 */
#ifndef CUEMM_TRACE_INTERNAL_H
#define CUEMM_TRACE_INTERNAL_H

#include "trace/log.h"
#include "trace/nvtx.h"

#endif
