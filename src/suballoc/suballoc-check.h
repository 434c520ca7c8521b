/* suballoc-check.h: the invariant check of the pool's sub-allocator
 * (suballoc-check.c), which the tests run.
 */
#ifndef CUEMM_SUBALLOC_CHECK_H
#define CUEMM_SUBALLOC_CHECK_H

#include "suballoc/suballoc.h"

/* Checks every invariant (tiling, links, counters, no two adjacent FREE
 * blocks or holes; CACHED blocks may have free neighbours).  Returns NULL, or a description of the first violation. */
const char *cuemm__sa_check(const cuemm__sa *s);

#endif
