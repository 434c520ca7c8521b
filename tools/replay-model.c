/* replay-model.c: the reference allocators of replay-model.h.
 *
 * Free space is kept in treaps (randomized balanced trees, split and
 * merged), so that a log of millions of events with thousands of free
 * blocks takes seconds, not hours: one keyed by address, each node knowing
 * the largest block below it, which finds the lowest-addressed fit in one
 * descent and a freed block's neighbours for merging; for best fit, one
 * more keyed by (size, address).
 *
 * Foresight places whole lifetimes, not events, and needs no free space
 * kept: each block, in its plan's order, looks at the blocks already
 * placed whose lives overlap its own (a scan of them all: quadratic, about
 * a second for the corpus's largest log).
 */
#include "replay-model.h"

#include <stdint.h>
#include <stdlib.h>

#define NIL 0u /* node 0 is no node: its max is 0, so no search enters it */

typedef struct node {
  uint64_t a, b;    /* the key: (address, 0), or (size, address) */
  uint64_t size;    /* the free block's size */
  uint64_t max;     /* the largest size in the subtree */
  uint32_t pri, l, r;
} node;

typedef struct treap {
  node *n;
  uint32_t cap, used, spare, root;
  uint64_t seed;
} treap;

static int treap_init(treap *t)
{
  t->cap = 64;
  t->used = 1;
  t->spare = NIL;
  t->root = NIL;
  t->seed = 0x9e3779b97f4a7c15ull;
  t->n = calloc(t->cap, sizeof *t->n);
  return t->n ? 0 : -1;
}

static uint64_t max3(uint64_t x, uint64_t y, uint64_t z)
{
  uint64_t m = x > y ? x : y;
  return m > z ? m : z;
}

static void pull(node *n, uint32_t i)
{
  n[i].max = max3(n[i].size, n[n[i].l].max, n[n[i].r].max);
}

static int less(const node *x, uint64_t a, uint64_t b)
{
  return x->a < a || (x->a == a && x->b < b);
}

/* Splits subtree i into the keys below (a, b) and the rest. */
static void split(node *n, uint32_t i, uint64_t a, uint64_t b, uint32_t *lo, uint32_t *hi)
{
  if (i == NIL) {
    *lo = *hi = NIL;
    return;
  }
  if (less(&n[i], a, b)) {
    split(n, n[i].r, a, b, &n[i].r, hi);
    *lo = i;
  } else {
    split(n, n[i].l, a, b, lo, &n[i].l);
    *hi = i;
  }
  pull(n, i);
}

/* Joins two subtrees, every key of x below every key of y. */
static uint32_t join(node *n, uint32_t x, uint32_t y)
{
  if (x == NIL || y == NIL)
    return x != NIL ? x : y;
  if (n[x].pri > n[y].pri) {
    n[x].r = join(n, n[x].r, y);
    pull(n, x);
    return x;
  }
  n[y].l = join(n, x, n[y].l);
  pull(n, y);
  return y;
}

static int treap_insert(treap *t, uint64_t a, uint64_t b, uint64_t size)
{
  uint32_t i = t->spare;
  if (i != NIL)
    t->spare = t->n[i].l;
  else {
    if (t->used == t->cap) {
      if (t->cap > UINT32_MAX / 2)
        return -1;
      node *g = realloc(t->n, 2 * (size_t)t->cap * sizeof *g);
      if (!g)
        return -1;
      t->n = g;
      t->cap *= 2;
    }
    i = t->used++;
  }
  t->seed ^= t->seed << 13, t->seed ^= t->seed >> 7, t->seed ^= t->seed << 17;
  t->n[i] = (node){ .a = a, .b = b, .size = size, .max = size, .pri = (uint32_t)(t->seed >> 32) };
  uint32_t lo, hi;
  split(t->n, t->root, a, b, &lo, &hi);
  t->root = join(t->n, join(t->n, lo, i), hi);
  return 0;
}

static void treap_remove(treap *t, uint64_t a, uint64_t b)
{
  uint32_t lo, mid, hi;
  split(t->n, t->root, a, b, &lo, &hi);
  split(t->n, hi, a, b + 1, &mid, &hi);
  if (mid != NIL) { /* one node: keys are unique */
    t->n[mid].l = t->spare;
    t->spare = mid;
  }
  t->root = join(t->n, lo, hi);
}

/* The lowest key at or above (a, b); NIL when none. */
static uint32_t treap_ceil(const treap *t, uint64_t a, uint64_t b)
{
  uint32_t best = NIL;
  for (uint32_t i = t->root; i != NIL;)
    if (less(&t->n[i], a, b))
      i = t->n[i].r;
    else
      best = i, i = t->n[i].l;
  return best;
}

/* The highest key below (a, b); NIL when none. */
static uint32_t treap_floor_below(const treap *t, uint64_t a, uint64_t b)
{
  uint32_t best = NIL;
  for (uint32_t i = t->root; i != NIL;)
    if (less(&t->n[i], a, b))
      best = i, i = t->n[i].r;
    else
      i = t->n[i].l;
  return best;
}

/* The lowest-keyed node of at least `size`; NIL when none. */
static uint32_t treap_first_fit(const treap *t, uint64_t size)
{
  const node *n = t->n;
  uint32_t i = t->root;
  if (n[i].max < size)
    return NIL;
  for (;;) {
    if (n[n[i].l].max >= size)
      i = n[i].l;
    else if (n[i].size >= size)
      return i;
    else
      i = n[i].r;
  }
}

/* ---- the models ------------------------------------------------------------ */

typedef struct space {
  treap addr;  /* free blocks by address */
  treap size;  /* free blocks by (size, address): best fit only */
  int best;
  uint64_t top; /* where the address space ends */
} space;

static int space_add(space *s, uint64_t off, uint64_t size)
{
  if (treap_insert(&s->addr, off, 0, size) != 0)
    return -1;
  return s->best ? treap_insert(&s->size, size, off, size) : 0;
}

static void space_del(space *s, uint64_t off, uint64_t size)
{
  treap_remove(&s->addr, off, 0);
  if (s->best)
    treap_remove(&s->size, size, off);
}

/* Places `size` bytes (at most REPLAY_MODEL_SPAN); REPLAY_MODEL_NO_MEMORY
 * or REPLAY_MODEL_TOO_LARGE when the space would pass REPLAY_MODEL_SPAN. */
static int space_take(space *s, uint64_t size, uint64_t *off)
{
  uint32_t i = s->best ? treap_ceil(&s->size, size, 0) : treap_first_fit(&s->addr, size);
  if (i == NIL) {
    /* Nothing fits: the space grows, from the free block at its end if
     * there is one. */
    uint32_t l = treap_floor_below(&s->addr, UINT64_MAX, 0);
    int joins = l != NIL && s->addr.n[l].a + s->addr.n[l].size == s->top;
    uint64_t o = joins ? s->addr.n[l].a : s->top;
    if (size > REPLAY_MODEL_SPAN - o)
      return REPLAY_MODEL_TOO_LARGE;
    if (joins)
      space_del(s, o, s->addr.n[l].size);
    *off = o;
    s->top = o + size;
    return 0;
  }
  const node *n = s->best ? &s->size.n[i] : &s->addr.n[i];
  uint64_t o = s->best ? n->b : n->a, fs = n->size;
  space_del(s, o, fs);
  *off = o;
  return fs > size ? space_add(s, o + size, fs - size) : 0;
}

/* Frees [off, off+size), merged with its free neighbours. */
static int space_give(space *s, uint64_t off, uint64_t size)
{
  uint32_t p = treap_floor_below(&s->addr, off, 0);
  if (p != NIL && s->addr.n[p].a + s->addr.n[p].size == off) {
    uint64_t po = s->addr.n[p].a, ps = s->addr.n[p].size;
    space_del(s, po, ps);
    off = po;
    size += ps;
  }
  uint32_t n = treap_ceil(&s->addr, off + size, 0);
  if (n != NIL && s->addr.n[n].a == off + size) {
    uint64_t ns = s->addr.n[n].size;
    space_del(s, off + size, ns);
    size += ns;
  }
  return space_add(s, off, size);
}

/* Live blocks a page holds (a block's first and last pages only), for the
 * pages model. */
typedef struct pages {
  uint32_t *count;
  size_t cap, touched, peak, maps;
} pages;

static int pages_mark(pages *pg, uint64_t off, uint64_t size, int up)
{
  size_t first = off / REPLAY_MODEL_PAGE, last = (off + size - 1) / REPLAY_MODEL_PAGE;
  if (last >= pg->cap) {
    size_t c = pg->cap ? pg->cap : 64;
    while (c <= last)
      c *= 2;
    uint32_t *g = realloc(pg->count, c * sizeof *g);
    if (!g)
      return -1;
    for (size_t k = pg->cap; k < c; k++)
      g[k] = 0;
    pg->count = g;
    pg->cap = c;
  }
  /* Only a block's first and last pages can hold other blocks too: the
   * pages between are its alone, in use exactly while it is live, so they
   * are counted without a walk (a block of 16 TiB is one step). */
  size_t inner = last - first > 1 ? last - first - 1 : 0;
  size_t ends[2] = { first, last };
  for (int e = 0; e < (first == last ? 1 : 2); e++) {
    size_t k = ends[e];
    if (up && pg->count[k]++ == 0)
      pg->touched++, pg->maps++;
    else if (!up && --pg->count[k] == 0)
      pg->touched--;
  }
  if (up)
    pg->touched += inner, pg->maps += inner;
  else
    pg->touched -= inner;
  if (pg->touched > pg->peak)
    pg->peak = pg->touched;
  return 0;
}

/* ---- foresight ------------------------------------------------------------- */

/* One allocation of the log as foresight sees it: the events between which
 * it lives, [from, to), and its rounded size. */
typedef struct life {
  uint64_t from, to, size;
} life;

static int larger_first(const void *x, const void *y)
{
  const life *a = *(const life *const *)x, *b = *(const life *const *)y;
  if (a->size != b->size)
    return a->size > b->size ? -1 : 1;
  return a->from < b->from ? -1 : a->from > b->from; /* the same log, the same placement */
}

/* Size times life: a block that holds much memory for long goes first. */
static int heavier_first(const void *x, const void *y)
{
  const life *a = *(const life *const *)x, *b = *(const life *const *)y;
  double wa = (double)a->size * (double)(a->to - a->from), wb = (double)b->size * (double)(b->to - b->from);
  if (wa != wb)
    return wa > wb ? -1 : 1;
  return a->from < b->from ? -1 : a->from > b->from;
}

/* Where a placed block lies. */
typedef struct seg {
  uint64_t off, end;
} seg;

/* The blocks placed so far, in the order placed, a field to an array so
 * that the scan for those alive with a new one reads only lives. */
typedef struct plan {
  uint64_t *from, *to;
  seg *at, *near; /* where each placed block lies; those alive with a new one */
} plan;

static int lower_first(const void *x, const void *y)
{
  const seg *a = x, *b = y;
  return a->off < b->off ? -1 : a->off > b->off;
}

/* The blocks of `order`, each at the lowest address that no block placed
 * before it and alive at the same time covers; *top: the highest end.
 * REPLAY_MODEL_TOO_LARGE where a block would pass REPLAY_MODEL_SPAN. */
static int plan_place(plan *p, life *const *order, size_t n, uint64_t *top)
{
  *top = 0;
  for (size_t k = 0; k < n; k++) {
    const life *b = order[k];
    size_t m = 0;
    for (size_t j = 0; j < k; j++)
      if (p->from[j] < b->to && b->from < p->to[j])
        p->near[m++] = p->at[j];
    qsort(p->near, m, sizeof *p->near, lower_first);
    uint64_t off = 0;
    for (size_t j = 0; j < m && p->near[j].off < off + b->size; j++)
      if (p->near[j].end > off)
        off = p->near[j].end;
    if (b->size > REPLAY_MODEL_SPAN - off)
      return REPLAY_MODEL_TOO_LARGE;
    p->from[k] = b->from;
    p->to[k] = b->to;
    p->at[k] = (seg){ off, off + b->size };
    if (off + b->size > *top)
      *top = off + b->size;
  }
  return REPLAY_MODEL_OK;
}

/* The lowest of the highest ends that the placements knowing the log
 * reach: largest blocks first, heaviest (size times life) first, and
 * `fits_top`, the lower of first and best fit's (foresight may always
 * place as they do).  Static memory planners place a graph's tensors by
 * the first order; no one order is best on every log (a log of caches
 * grown by concatenation does better the second way), and none is the
 * optimum: the figure bounds it from above. */
static int foresight_place(const replay_trace *t, uint64_t fits_top, uint64_t *top)
{
  size_t n = t->slots, c = n ? n : 1;
  life *l = calloc(c, sizeof *l);
  life **order = calloc(c, sizeof *order);
  plan p = { calloc(c, sizeof *p.from), calloc(c, sizeof *p.to), calloc(c, sizeof *p.at), calloc(c, sizeof *p.near) };
  int rc = REPLAY_MODEL_NO_MEMORY;
  if (!l || !order || !p.from || !p.to || !p.at || !p.near)
    goto out;
  for (size_t k = 0; k < n; k++)
    l[k].to = t->n; /* a block the log never frees lives to its end */
  for (size_t k = 0; k < t->n; k++) {
    const replay_event *e = &t->ev[k];
    if (e->is_free)
      l[e->slot].to = k;
    else {
      l[e->slot].from = k;
      l[e->slot].size = (e->size + REPLAY_MODEL_ALIGN - 1) / REPLAY_MODEL_ALIGN * REPLAY_MODEL_ALIGN;
    }
  }
  int (*const orders[])(const void *, const void *) = { larger_first, heavier_first };
  *top = fits_top;
  for (size_t o = 0; o < sizeof orders / sizeof *orders; o++) {
    for (size_t k = 0; k < n; k++)
      order[k] = &l[k];
    qsort(order, n, sizeof *order, orders[o]);
    uint64_t got;
    /* A plan that would pass the span is one foresight does not take. */
    if (plan_place(&p, order, n, &got) == REPLAY_MODEL_OK && got < *top)
      *top = got;
  }
  rc = REPLAY_MODEL_OK;
out:
  free(l);
  free(order);
  free(p.from);
  free(p.to);
  free(p.at);
  free(p.near);
  return rc;
}

int replay_model_run(const replay_trace *t, replay_model which, replay_model_result *r)
{
  if (which == REPLAY_MODEL_FORESIGHT) {
    /* The fits' placements first: foresight may choose either. */
    replay_model_result ff, bf;
    int rc = replay_model_run(t, REPLAY_MODEL_FIRST_FIT, &ff);
    if (rc == REPLAY_MODEL_OK)
      rc = replay_model_run(t, REPLAY_MODEL_BEST_FIT, &bf);
    uint64_t top = 0;
    if (rc == REPLAY_MODEL_OK)
      rc = foresight_place(t, ff.held < bf.held ? ff.held : bf.held, &top);
    if (rc == REPLAY_MODEL_OK) {
      r->held = (size_t)((top + REPLAY_MODEL_PAGE - 1) / REPLAY_MODEL_PAGE * REPLAY_MODEL_PAGE);
      r->page_maps = 0;
    }
    return rc;
  }
  space s = { .best = which == REPLAY_MODEL_BEST_FIT };
  pages pg = { 0 };
  uint64_t *at = calloc(t->slots ? t->slots : 1, sizeof *at);
  int rc = REPLAY_MODEL_NO_MEMORY;
  if (!at || treap_init(&s.addr) != 0 || (s.best && treap_init(&s.size) != 0))
    goto out;
  uint64_t peak_top = 0;
  for (size_t k = 0; k < t->n; k++) {
    const replay_event *e = &t->ev[k];
    if (e->size > REPLAY_MODEL_SPAN) {
      rc = REPLAY_MODEL_TOO_LARGE;
      goto out;
    }
    /* The parser replays no allocation of 0 bytes: every size rounds to
     * one alignment at least. */
    uint64_t size = (e->size + REPLAY_MODEL_ALIGN - 1) / REPLAY_MODEL_ALIGN * REPLAY_MODEL_ALIGN;
    if (!e->is_free) {
      int took = space_take(&s, size, &at[e->slot]);
      if (took != 0) {
        rc = took;
        goto out;
      }
      if (s.top > peak_top)
        peak_top = s.top;
      if (which == REPLAY_MODEL_PAGES && pages_mark(&pg, at[e->slot], size, 1) != 0)
        goto out;
    } else {
      if (which == REPLAY_MODEL_PAGES && pages_mark(&pg, at[e->slot], size, 0) != 0)
        goto out;
      if (space_give(&s, at[e->slot], size) != 0)
        goto out;
    }
  }
  r->held = which == REPLAY_MODEL_PAGES
                ? pg.peak * REPLAY_MODEL_PAGE
                : (size_t)((peak_top + REPLAY_MODEL_PAGE - 1) / REPLAY_MODEL_PAGE * REPLAY_MODEL_PAGE);
  r->page_maps = pg.maps;
  rc = REPLAY_MODEL_OK;
out:
  free(at);
  free(s.addr.n);
  free(s.size.n);
  free(pg.count);
  return rc;
}
