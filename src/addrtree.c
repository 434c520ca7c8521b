/* addrtree.c: the address-ordered tree of free blocks (see addrtree.h).
 *
 * A treap: in key order by offset, in heap order by a priority that is a
 * bijective hash of the node's index (so no two nodes inserted tie), which
 * keeps it balanced in expectation whatever order blocks come and go in.
 * The priority is stored, so that a node taking another's place
 * (cuemm__at_replace) takes its priority with it and the order holds.
 * Insertion descends to where the new node's priority belongs, raising
 * the maxima on the way (they only grow), and splits the subtree there
 * under it.  Removal joins the node's two subtrees in its place and
 * recomputes the maxima on the path back up, the only ones that change.
 */
#include "addrtree.h"

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

/* Splits subtree t into the nodes of offset below `off` (*l) and the rest
 * (*r). */
static void split(cuemm__at_node *n, uint32_t t, size_t off, uint32_t *l, uint32_t *r)
{
  while (t != NIL) {
    if (n[t].off < off) {
      *l = t;
      l = &n[t].right;
      t = n[t].right;
    } else {
      *r = t;
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

/* Joins subtrees a and b, every offset of a below every one of b. */
static uint32_t join(cuemm__at_node *n, uint32_t a, uint32_t b)
{
  if (a == NIL)
    return b;
  if (b == NIL)
    return a;
  if (n[a].prio > n[b].prio) {
    n[a].right = join(n, n[a].right, b);
    pull(n, a);
    return a;
  }
  n[b].left = join(n, a, n[b].left);
  pull(n, b);
  return b;
}

void cuemm__at_insert(cuemm__at_node *n, uint32_t *root, uint32_t i, size_t off, size_t size)
{
  uint32_t p = hash(i), *link = root, t;
  n[i].off = off;
  n[i].size = size;
  n[i].prio = p;
  while ((t = *link) != NIL && n[t].prio > p) {
    if (n[t].max < size)
      n[t].max = size;
    link = off < n[t].off ? &n[t].left : &n[t].right;
  }
  split(n, t, off, &n[i].left, &n[i].right);
  pull_edge(n, n[i].left, 1);
  pull_edge(n, n[i].right, 0);
  pull(n, i);
  *link = i;
}

/* The path from the root down to a node: the nodes above it, so that
 * their maxima can be recomputed bottom up, stopping at the first that
 * does not change (those above it do not either).  A treap deeper than
 * PATH_MAX is astronomically unlikely; past it, every maximum on the way
 * is recomputed by a second descent. */
#ifndef PATH_MAX_DEPTH
#define PATH_MAX_DEPTH 96
#endif

/* The link that points at node i (in the tree rooted at *root); the nodes
 * above it go into path[0 .. *depth), *depth set past PATH_MAX_DEPTH when
 * they did not fit. */
static uint32_t *descend(cuemm__at_node *n, uint32_t *root, uint32_t i, uint32_t *path, unsigned *depth)
{
  uint32_t *link = root, t;
  size_t key = n[i].off;
  unsigned d = 0;
  while ((t = *link) != i) {
    if (d < PATH_MAX_DEPTH)
      path[d] = t;
    d++;
    link = key < n[t].off ? &n[t].left : &n[t].right;
  }
  *depth = d;
  return link;
}

static void pull_path(cuemm__at_node *n, uint32_t root, size_t key, const uint32_t *path, unsigned depth)
{
  if (depth > PATH_MAX_DEPTH) {
    /* Each node above, deepest first, found by a descent of its own. */
    while (depth--) {
      uint32_t t = root;
      for (unsigned d = 0; d < depth; d++)
        t = key < n[t].off ? n[t].left : n[t].right;
      pull(n, t);
    }
    return;
  }
  while (depth--) {
    uint32_t t = path[depth];
    size_t was = n[t].max;
    pull(n, t);
    if (n[t].max == was)
      return;
  }
}

void cuemm__at_remove(cuemm__at_node *n, uint32_t *root, uint32_t i)
{
  uint32_t path[PATH_MAX_DEPTH];
  unsigned depth;
  uint32_t *link = descend(n, root, i, path, &depth);
  *link = join(n, n[i].left, n[i].right);
  pull_path(n, *root, n[i].off, path, depth);
}

void cuemm__at_resize(cuemm__at_node *n, uint32_t root, uint32_t i, size_t size)
{
  cuemm__at_replace(n, &root, i, i, n[i].off, size);
}

void cuemm__at_replace(cuemm__at_node *n, uint32_t *root, uint32_t old, uint32_t i, size_t off, size_t size)
{
  uint32_t path[PATH_MAX_DEPTH];
  unsigned depth;
  uint32_t *link = descend(n, root, old, path, &depth);
  uint32_t l = n[old].left, r = n[old].right, p = n[old].prio;
  size_t was = n[old].max;
  n[i].off = off;
  n[i].size = size;
  n[i].left = l;
  n[i].right = r;
  n[i].prio = p;
  *link = i;
  pull(n, i);
  if (n[i].max != was)
    pull_path(n, *root, off, path, depth);
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
  return check_in(n, cap, root, 0, 1, 0, 1, count);
}
