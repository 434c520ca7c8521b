/* piece.h: the size of the pieces a large growth of the pool is made of,
 * internal interface (see piece.c for the policy and why). */
#ifndef CUEMM_PIECE_H
#define CUEMM_PIECE_H

#include <stddef.h>
#include <stdint.h>

#include "cuemm.h"

/* Size classes: class k holds piece sizes in [2 MiB << k, 4 MiB << k). */
#define CUEMM__PIECE_MIN_SHIFT 21
#define CUEMM__PIECE_CLASSES CUEMM_POOL_PIECE_CLASSES

/* Growths up to this many bytes are one piece: below it a cuMemCreate costs
 * about the same whatever its size, so splitting only adds calls. */
#define CUEMM__PIECE_SPLIT ((size_t)512 << 20)
/* The piece size tried first on a device nothing was measured on yet, and
 * the smallest a growth it fits is made of (piece.c says why). */
#define CUEMM__PIECE_GUESS ((size_t)4 << 30)
/* Pieces a neighbouring class must have been timed on before the chooser
 * stops trying it: one, so that trying a size costs at most one growth
 * (a single cuMemCreate of 8 GiB costs 3 ms on an H100). */
#define CUEMM__PIECE_EXPLORE 1

/* Growths each class remembers the cost of. */
#define CUEMM__PIECE_RECENT 7

/* A growth this soon (ns) after the process released pool memory on the
 * device is made but not timed: the driver may hand back the memory just
 * released, many times faster than fresh memory (piece.c). */
#define CUEMM__PIECE_QUIET_NS 1e9

/* What was measured on one device: for each class, the cost per byte of
 * its recent growths (each growth's median cuMemCreate + cuMemMap of one
 * piece, in ns per byte), their median (0: never timed), how many pieces
 * were timed and how many were made (timed or not: exploration counts
 * these); and when pool memory was last released. */
typedef struct cuemm__piece_table {
  double ns_per_byte[CUEMM__PIECE_CLASSES];
  uint32_t samples[CUEMM__PIECE_CLASSES];
  uint32_t made[CUEMM__PIECE_CLASSES];
  double recent[CUEMM__PIECE_CLASSES][CUEMM__PIECE_RECENT];
  uint32_t nrecent[CUEMM__PIECE_CLASSES], next[CUEMM__PIECE_CLASSES];
  double released_ns;   /* CLOCK_MONOTONIC of the latest release; 0: none */
} cuemm__piece_table;

/* The class of a piece of `bytes` (>= 2 MiB), or -1 when beyond the table. */
int cuemm__piece_class(size_t bytes);

/* Notes a growth of `count` pieces of `bytes` each that took `ns` each
 * (their median); with `ns` 0, pieces made but not timed. */
void cuemm__piece_record(cuemm__piece_table *t, size_t bytes, double ns, uint32_t count);

/* The piece size for a growth of `bytes` (a multiple of `unit`), a pure
 * function of the table: `bytes` itself for a growth up to
 * CUEMM__PIECE_SPLIT; otherwise unit << j for some j, at most `bytes` and
 * at least `min_piece` (`bytes` itself when no such size exists).  The
 * growth is then floor(bytes / piece) pieces of that size and one of the
 * rest. */
size_t cuemm__piece_choose(const cuemm__piece_table *t, size_t unit, size_t bytes, size_t min_piece);

/* The same on the process-wide table of device `dev`, under its lock. */
size_t cuemm__piece_pick(int dev, size_t unit, size_t bytes, size_t min_piece);

/* cuemm__piece_record on the process-wide table of `dev`, under its lock;
 * devices beyond CUEMM__POOL_MAX_DEVICES are not recorded. */
void cuemm__piece_note(int dev, size_t bytes, double ns, uint32_t count);

/* Pool memory of `dev` was released at `now` (CLOCK_MONOTONIC, ns). */
void cuemm__piece_released(int dev, double now);

/* Whether a growth of `dev` starting at `now` gets fresh memory, as far
 * as the process knows: nothing released on the device within
 * CUEMM__PIECE_QUIET_NS before.  Its pieces are timed only then. */
int cuemm__piece_fresh(int dev, double now);

/* A copy of the process-wide table of `dev` (zeros when none). */
void cuemm__piece_snapshot(int dev, cuemm__piece_table *out);

#endif
