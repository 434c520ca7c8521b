/* addrtree.c: the address-ordered tree of free blocks (see addrtree.h).
 *
 * A treap: in key order by offset, in heap order by a priority that is a
 * bijective hash of the node's index (so no two nodes inserted tie), which
 * keeps it balanced in expectation whatever order blocks come and go in.
 * The priority is stored, so that a node taking another's place
 * (cuemm__at_replace) takes its priority with it and the order holds.
 * Insertion descends to where the new node's priority belongs, raising
 * the maxima on the way (they only grow), and splits the subtree there
 * under it.  Every node knows its parent, so that removal and replacement
 * start at the node itself, with no descent: removal joins the node's two
 * subtrees in its place, and both recompute the maxima on the way up, the
 * only ones that change, stopping at the first that stays.
 */
#include "suballoc/addrtree.h"

#define NIL CUEMM__AT_NIL

static inline uint32_t hash(uint32_t i)
{
  uint32_t x = i;
  x ^= x >> 16;
  x *= 0x85EBCA6Bu;
  x ^= x >> 13;
  x *= 0xC2B2AE35u;
  x ^= x >> 16;
  return x;
}

static inline void pull(cuemm__at_node *n, uint32_t t)
{
  size_t m = n[t].size;
  uint32_t l = n[t].left, r = n[t].right;
  if (l != NIL && n[l].max > m)
    m = n[l].max;
  if (r != NIL && n[r].max > m)
    m = n[r].max;
  n[t].max = m;
}

/* Splits subtree t into the nodes of offset below `off` (*l, a link of
 * node lp) and the rest (*r, a link of node rp). */
static void split(cuemm__at_node *n, uint32_t t, size_t off, uint32_t *l, uint32_t lp, uint32_t *r, uint32_t rp)
{
  while (t != NIL) {
    if (n[t].off < off) {
      *l = t;
      n[t].parent = lp;
      lp = t;
      l = &n[t].right;
      t = n[t].right;
    } else {
      *r = t;
      n[t].parent = rp;
      rp = t;
      r = &n[t].left;
      t = n[t].left;
    }
  }
  *l = *r = NIL;
}

/* The maxima of split's nodes: those on the paths it cut along. */
static void pull_edge(cuemm__at_node *n, uint32_t t, int right)
{
  if (t == NIL)
    return;
  pull_edge(n, right ? n[t].right : n[t].left, right);
  pull(n, t);
}

/* Joins subtrees a and b, every offset of a below every one of b; the
 * caller sets the parent of the root returned. */
static uint32_t join(cuemm__at_node *n, uint32_t a, uint32_t b)
{
  if (a == NIL)
    return b;
  if (b == NIL)
    return a;
  if (n[a].prio > n[b].prio) {
    uint32_t c = join(n, n[a].right, b);
    n[a].right = c;
    n[c].parent = a;
    pull(n, a);
    return a;
  }
  uint32_t c = join(n, a, n[b].left);
  n[b].left = c;
  n[c].parent = b;
  pull(n, b);
  return b;
}

/* The link that points at node i: its parent's child field, or the root. */
static inline uint32_t *link_of(cuemm__at_node *n, uint32_t *root, uint32_t i)
{
  uint32_t p = n[i].parent;
  return p == NIL ? root : n[p].left == i ? &n[p].left : &n[p].right;
}

/* Recomputes the maxima from node t up, stopping at the first that does
 * not change: those above it do not either. */
static inline void pull_up(cuemm__at_node *n, uint32_t t)
{
  for (; t != NIL; t = n[t].parent) {
    size_t was = n[t].max;
    pull(n, t);
    if (n[t].max == was)
      return;
  }
}

void cuemm__at_insert(cuemm__at_node *n, uint32_t *root, uint32_t i, size_t off, size_t size)
{
  uint32_t p = hash(i), *link = root, t, up = NIL;
  n[i].off = off;
  n[i].size = size;
  n[i].prio = p;
  while ((t = *link) != NIL && n[t].prio > p) {
    if (n[t].max < size)
      n[t].max = size;
    up = t;
    link = off < n[t].off ? &n[t].left : &n[t].right;
  }
  split(n, t, off, &n[i].left, i, &n[i].right, i);
  pull_edge(n, n[i].left, 1);
  pull_edge(n, n[i].right, 0);
  pull(n, i);
  n[i].parent = up;
  *link = i;
}

void cuemm__at_remove(cuemm__at_node *n, uint32_t *root, uint32_t i)
{
  uint32_t p = n[i].parent, c = join(n, n[i].left, n[i].right);
  *link_of(n, root, i) = c;
  if (c != NIL)
    n[c].parent = p;
  pull_up(n, p);
}

void cuemm__at_resize(cuemm__at_node *n, uint32_t root, uint32_t i, size_t size)
{
  cuemm__at_replace(n, &root, i, i, n[i].off, size);
}

void cuemm__at_replace(cuemm__at_node *n, uint32_t *root, uint32_t old, uint32_t i, size_t off, size_t size)
{
  uint32_t *link = link_of(n, root, old);
  uint32_t l = n[old].left, r = n[old].right, p = n[old].prio, up = n[old].parent;
  size_t was = n[old].max;
  n[i].off = off;
  n[i].size = size;
  n[i].left = l;
  n[i].right = r;
  n[i].prio = p;
  n[i].parent = up;
  if (l != NIL)
    n[l].parent = i;
  if (r != NIL)
    n[r].parent = i;
  *link = i;
  pull(n, i);
  if (n[i].max != was)
    pull_up(n, up);
}

/* check's walk of subtree t, every offset in (lo, hi) (lo excluded unless
 * `first`). */
static const char *check_in(const cuemm__at_node *n, uint32_t cap, uint32_t t, size_t lo, int first, size_t hi,
                            int last, size_t *count)
{
  if (t == NIL)
    return NULL;
  if (t >= cap)
    return "a link leads past the nodes";
  if (++*count > cap)
    return "a node is reached twice";
  if ((!first && n[t].off <= lo) || (!last && n[t].off >= hi))
    return "offsets are not in order";
  uint32_t l = n[t].left, r = n[t].right;
  if ((l != NIL && l < cap && n[l].parent != t) || (r != NIL && r < cap && n[r].parent != t))
    return "a child's parent link is wrong";
  if ((l != NIL && l < cap && n[l].prio > n[t].prio) || (r != NIL && r < cap && n[r].prio > n[t].prio))
    return "priorities are not in heap order";
  const char *e = check_in(n, cap, l, lo, first, n[t].off, 0, count);
  if (!e)
    e = check_in(n, cap, r, n[t].off, 0, hi, last, count);
  if (e)
    return e;
  size_t m = n[t].size;
  if (l != NIL && n[l].max > m)
    m = n[l].max;
  if (r != NIL && n[r].max > m)
    m = n[r].max;
  return m != n[t].max ? "a subtree's largest size is wrong" : NULL;
}

const char *cuemm__at_check(const cuemm__at_node *n, uint32_t cap, uint32_t root, size_t *count)
{
  *count = 0;
  if (root != NIL && root < cap && n[root].parent != NIL)
    return "the root has a parent";
  return check_in(n, cap, root, 0, 1, 0, 1, count);
}
