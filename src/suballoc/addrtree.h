/* addrtree.h: free blocks in address order, searchable by size.
 *
 * A treap keyed by offset whose every node also carries the largest size
 * in its subtree, so that the lowest-address block of at least a given
 * size is found by one descent: O(log n) to find, insert and remove,
 * expected.  The sub-allocator (suballoc.c) keeps one per tag for its
 * large free blocks, so that large requests take the lowest-address fit
 * without a scan.  A pure data structure: nodes live in an array the
 * caller owns and grows (one per descriptor, by the same index), the tree
 * is only a root index, and nothing here allocates.  A node's priority is
 * a hash of its index, given at insertion and passed on when another node
 * takes its place (cuemm__at_replace), so the shape is reproducible.  Not
 * thread-safe.
 */
#ifndef CUEMM_ADDRTREE_H
#define CUEMM_ADDRTREE_H

#include <stddef.h>
#include <stdint.h>

#define CUEMM__AT_NIL UINT32_MAX

typedef struct cuemm__at_node {
  size_t off;     /* the key: offsets in one tree are distinct */
  size_t size;
  size_t max;     /* the largest size in the subtree rooted here */
  uint32_t left, right;
  uint32_t prio;  /* heap order: no child's is higher */
  uint32_t parent;        /* NIL at the root */
} cuemm__at_node;

/* Node i, not in the tree, joins it with key `off` and `size`. */
void cuemm__at_insert(cuemm__at_node *n, uint32_t *root, uint32_t i, size_t off, size_t size);

/* Node i, in the tree, leaves it. */
void cuemm__at_remove(cuemm__at_node *n, uint32_t *root, uint32_t i);

/* Node i, in the tree, takes `size` (its key unchanged).  O(depth) at
 * most, its maxima recomputed upwards. */
void cuemm__at_resize(cuemm__at_node *n, uint32_t root, uint32_t i, size_t size);

/* Node i (not in the tree, or `old` itself) takes the place of node `old`,
 * with key `off` and `size`: one descent, where a removal and an insertion
 * would cost two.  The caller guarantees that `off` lies strictly between
 * the keys of old's neighbours in key order, as when a block is cut or
 * grows into free space beside it.  No descent: O(1) and the maxima
 * above that change. */
void cuemm__at_replace(cuemm__at_node *n, uint32_t *root, uint32_t old, uint32_t i, size_t off, size_t size);

/* The node of lowest offset whose size is at least `size`, or NIL.  One
 * descent, guided by the subtrees' largest sizes. */
static inline uint32_t cuemm__at_lowest_fit(const cuemm__at_node *n, uint32_t root, size_t size)
{
  uint32_t t = root;
  if (t == CUEMM__AT_NIL || n[t].max < size)
    return CUEMM__AT_NIL;
  for (;;) {
    uint32_t l = n[t].left;
    if (l != CUEMM__AT_NIL && n[l].max >= size)
      t = l;
    else if (n[t].size >= size)
      return t;
    else
      t = n[t].right; /* its subtree holds the fit: t's max says so */
  }
}

/* The node of key `off`, or NIL. */
static inline uint32_t cuemm__at_find(const cuemm__at_node *n, uint32_t root, size_t off)
{
  uint32_t t = root;
  while (t != CUEMM__AT_NIL && n[t].off != off)
    t = off < n[t].off ? n[t].left : n[t].right;
  return t;
}

/* The largest size in the tree (0 when empty). */
static inline size_t cuemm__at_largest(const cuemm__at_node *n, uint32_t root)
{
  return root == CUEMM__AT_NIL ? 0 : n[root].max;
}

/* Checks the tree rooted at `root`: offsets strictly increasing in order,
 * priorities ordered as a heap, every max right, no node reached twice
 * (within `cap` nodes).  Sets *count to the nodes.  Returns NULL, or a
 * description of the first violation. */
const char *cuemm__at_check(const cuemm__at_node *n, uint32_t cap, uint32_t root, size_t *count);

#endif
