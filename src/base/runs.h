/* runs.h: the chunk table, written once.
 *
 * An address range cut into units of a fixed size, and runs of adjacent
 * units that each stand for one thing: the pool's chunks (pool/), the
 * managed segments (core/managed.c), the heaps NVTX was told of
 * (trace/nvtx.c).  The table is an array of cuemm__run, one per unit:
 * every unit of a run names the run's head unit, and the head holds the
 * run's length in units (0: no run starts there any more).  Only the head's
 * length is ever cleared, so a unit outside every run may still name the
 * head of a run long gone; a run counts only while its head holds a length
 * that reaches the unit, and runs never overlap, so the lookups below are
 * exact all the same.
 *
 * What each table says of a run (the pool's handle and state, a segment's
 * address, a heap) is its own: it keeps that in an array of its own beside
 * the cuemm__run array, indexed by the same unit, and reads it at the head
 * these functions return.  Two arrays rather than a run embedded in each
 * table's entries: the functions then take one type, need no macro or
 * stride, and stay inline on the pool's paths.  A table holds at most
 * UINT32_MAX units (the pool refuses a larger reservation).
 */
#ifndef CUEMM_RUNS_H
#define CUEMM_RUNS_H

#include <stddef.h>
#include <stdint.h>

typedef struct cuemm__run {
  uint32_t head;   /* the unit where this unit's run starts */
  uint32_t units;  /* at the head: the run's length in units; 0: none */
} cuemm__run;

/* What cuemm__runs_covering returns for a unit in no run. */
#define CUEMM__RUNS_NONE SIZE_MAX

/* Makes units [head, head + n) one run. */
static inline void cuemm__runs_mark(cuemm__run *r, size_t head, size_t n)
{
  for (size_t u = head; u < head + n; u++)
    r[u].head = (uint32_t)head;
  r[head].units = (uint32_t)n;
}

/* Ends the run whose head is `head`: its units belong to none. */
static inline void cuemm__runs_clear(cuemm__run *r, size_t head)
{
  r[head].units = 0;
}

/* Whether a run starts at unit u. */
static inline int cuemm__runs_is_head(const cuemm__run *r, size_t u)
{
  return r[u].head == u && r[u].units;
}

/* The length in units of the run at head `head` (0: none). */
static inline size_t cuemm__runs_units(const cuemm__run *r, size_t head)
{
  return r[head].units;
}

/* The head of the run covering unit u, or CUEMM__RUNS_NONE. */
static inline size_t cuemm__runs_covering(const cuemm__run *r, size_t u)
{
  size_t head = r[u].head;
  return head <= u && u - head < r[head].units ? head : CUEMM__RUNS_NONE;
}

/* A walk in address order over the units [0, n) visits every head: from a
 * head, the unit past its run; from any other unit, the next one. */
static inline size_t cuemm__runs_next(const cuemm__run *r, size_t u)
{
  return cuemm__runs_is_head(r, u) ? u + r[u].units : u + 1;
}

#endif
