/* suballoc-hole.c: owns holes in the pool's sub-allocator (interface in
 * suballoc-hole.h): unmapped space, which the pool's growth turns into free
 * space (cuemm__sa_fill) and its release back into holes
 * (cuemm__sa_drain), and space it mapped but could neither set up nor
 * unmap again (cuemm__sa_quarantine).
 *
 * Unmapped space is kept as HOLE blocks, linked in address order with the
 * others, which lets growth and release reuse the same splitting and
 * merging.
 */
#include "suballoc/suballoc-hole.h"

#include "suballoc/shared.h"
#include "suballoc/suballoc-merge.h"

/* Gives the part [off, off + size) of the linked block containing it the
 * state `to` (FREE ones the tag `tag`), then merges it.  2 spare
 * descriptors must be at hand. */
static void recolor_tagged(cuemm__sa *s, size_t off, size_t size, uint8_t to, uint32_t tag)
{
  uint32_t i = cuemm__sa_find(s, off);
  cuemm__sa_list_del(s, i);
  if (s->b[i].off < off) {
    uint32_t j = cuemm__sa_split(s, i, off - s->b[i].off);
    cuemm__sa_list_add(s, i);
    i = j;
  }
  if (s->b[i].size > size)
    cuemm__sa_list_add(s, cuemm__sa_split(s, i, size));
  s->b[i].state = to;
  s->b[i].tag = tag;
  s->b[i].seq = 0;
  if (to == CUEMM__SA_USED)
    s->used_count++;
  else
    cuemm__sa_merge_link(s, i, tag != 0);
}

static void recolor(cuemm__sa *s, size_t off, size_t size, uint8_t to)
{
  recolor_tagged(s, off, size, to, 0);
}

void cuemm__sa_fill(cuemm__sa *s, size_t off, size_t size)
{
  recolor(s, off, size, CUEMM__SA_FREE);
  s->hole_bytes -= size;
  s->free_bytes += size;
}

void cuemm__sa_fill_tagged(cuemm__sa *s, size_t off, size_t size, uint32_t tag)
{
  recolor_tagged(s, off, size, CUEMM__SA_FREE, tag);
  s->hole_bytes -= size;
  s->free_bytes += size;
}

void cuemm__sa_drain(cuemm__sa *s, size_t off, size_t size)
{
  recolor(s, off, size, CUEMM__SA_HOLE);
  s->free_bytes -= size;
  s->hole_bytes += size;
}

void cuemm__sa_quarantine(cuemm__sa *s, size_t off, size_t size)
{
  recolor(s, off, size, CUEMM__SA_USED);
  s->hole_bytes -= size;
  s->used_bytes += size;
}
