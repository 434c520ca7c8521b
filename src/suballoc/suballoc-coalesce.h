/* suballoc-coalesce.h: coalescing the caches of the pool's sub-allocator
 * (suballoc-coalesce.c), as suballoc.c calls it.  cuemm__sa_coalesce, for
 * its users, is declared in suballoc.h.
 */
#ifndef CUEMM_SUBALLOC_COALESCE_H
#define CUEMM_SUBALLOC_COALESCE_H

#include "suballoc/suballoc.h"

/* Empties the large caches and their map. */
void cuemm__sa_coalesce_large(cuemm__sa *s);

#endif
