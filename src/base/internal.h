/* base/internal.h: what base/ offers every folder above it.
 *
 * The bottom layer: it knows no manager.  driver.c loads libcuda at run
 * time and is the only code that knows how (driver.h's table); error.c
 * carries a failure's code and message one way (error.h); config.c owns
 * the CUEMM_* settings (config.h); lock.c and fence.c are the manager's
 * lock and the asymmetric fences of the thread heaps; util.h the one
 * rounding and the one clock; runs.h the chunk table, units of a range
 * grouped into runs (the pool's chunks, the managed segments, NVTX's
 * heaps).  Prefixes: cuemm__driver, cuemm__error, cuemm__first,
 * cuemm__config, cuemm__lock, cuemm__fence, cuemm__round_up, cuemm__now_ns,
 * cuemm__runs (its type cuemm__run).
 */
#ifndef CUEMM_BASE_INTERNAL_H
#define CUEMM_BASE_INTERNAL_H

#include "base/config.h"
#include "base/driver.h"
#include "base/error.h"
#include "base/fence.h"
#include "base/lock.h"
#include "base/runs.h"
#include "base/util.h"

#endif
