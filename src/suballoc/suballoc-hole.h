/* suballoc-hole.h: growth and release in the pool's sub-allocator
 * (suballoc-hole.c): turning holes, its unmapped space, into free space
 * and back.
 */
#ifndef CUEMM_SUBALLOC_HOLE_H
#define CUEMM_SUBALLOC_HOLE_H

#include "suballoc/suballoc.h"

/* Turns [off, off + size), which must lie inside one HOLE block, into free
 * space (merged with free neighbours).  Needs 2 spare descriptors
 * (cuemm__sa_reserve). */
void cuemm__sa_fill(cuemm__sa *s, size_t off, size_t size);

/* cuemm__sa_fill for a growth beside free space of tag `tag` (not 0, its
 * bins made): the new space takes the tag and merges with that space (and
 * with idle space), so that the tag's stream, which stream order lets use
 * its own freed blocks at once, finds them and the new memory in one
 * block. */
void cuemm__sa_fill_tagged(cuemm__sa *s, size_t off, size_t size, uint32_t tag);

/* Turns [off, off + size), which must lie inside one FREE block (coalesce
 * the caches first: a cached block is not merged with its neighbours), into a hole
 * (merged with neighbouring holes).  Needs 2 spare descriptors. */
void cuemm__sa_drain(cuemm__sa *s, size_t off, size_t size);

/* Turns [off, off + size), inside one HOLE block, into a USED block that
 * is never handed out: memory the pool could map but not set up, nor
 * unmap again.  Needs 2 spare descriptors. */
void cuemm__sa_quarantine(cuemm__sa *s, size_t off, size_t size);

#endif
