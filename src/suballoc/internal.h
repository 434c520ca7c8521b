/* suballoc/internal.h: what suballoc/ offers the folders above it.
 *
 * The pool's sub-allocator, a pure data structure over offsets that never
 * calls the driver: placement (suballoc.c), merging (suballoc-merge.c),
 * the caches of freed sizes (suballoc-coalesce.c), holes of unmapped space
 * (suballoc-hole.c), the free blocks in address order (addrtree.c) and the
 * invariant check the tests run (suballoc-check.c).  Its files share
 * shared.h among themselves.  Prefixes: cuemm__sa (cuemm__at for the
 * tree).  Above base/ only.
 */
#ifndef CUEMM_SUBALLOC_INTERNAL_H
#define CUEMM_SUBALLOC_INTERNAL_H

#include "suballoc/suballoc-hole.h"
#include "suballoc/suballoc.h"

#endif
