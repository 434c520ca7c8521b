/* piece.c: owns the choice of piece size for the pool's large growths, and
 * the process-wide record of what cuMemCreate costs on each device that
 * the choice rests on.
 *
 * One cuMemCreate of N bytes may not cost in proportion to N: a fixed
 * cost per call, and on some GPUs and drivers a cost per byte that rises
 * past some size, would make a large growth cheapest in pieces of the size
 * in between, mapped side by side (the pool then sets access once for the
 * whole run).  Where that optimum lies depends on the GPU and the driver,
 * so it is measured, not written down.  On an H100 (driver 580) fresh
 * memory cost about the same per byte from 1 GiB to 8 GiB pieces (220 to
 * 400 us for 1 GiB, 1.5 ms for 8 GiB), so fewer, larger pieces did best.
 * The driver hands memory out zeroed, and writing it is most of what a
 * fresh cuMemCreate costs (on an H200, 8 GiB took 2.5 ms, cuMemsetD8 of
 * 8 GiB 1.9 ms): a floor that cuMemAlloc shares and no piece size gets
 * under, so the choice can only avoid sizes that cost more than that.
 *
 * The measurement is the pool's own work: each piece's cuMemCreate and
 * cuMemMap are timed (clock_gettime) as the pool grows, and for each size
 * class (a power of two) the median cost per byte of its last few growths
 * is kept (each growth counting with the median of its pieces).  The
 * median, not the best: a measurement is spoiled both ways.  Upwards by a
 * preempted thread or a driver busy scrubbing what was just freed;
 * downwards, and far more, by the driver handing back memory it was just
 * given back: on an H100 a cuMemCreate of 256 MiB right after the release
 * of one took 9 us, against 60 to 110 us otherwise, and a table of minimums
 * chose 256 MiB pieces for an 8 GiB growth that 1 GiB pieces made three
 * times faster.  So a growth that starts within CUEMM__PIECE_QUIET_NS of
 * a release of pool memory on the device, by any manager of the process,
 * is made but not timed: on an H200 one 8 GiB piece timed on recycled
 * memory (97 to 157 us, fresh 1.6 ms) won the choice, and later 8 GiB
 * growths in one piece took 1.79x the time of cuMemAlloc where 4 GiB
 * pieces took 0.73x.  The process cannot see the driver's own recycling
 * (a cuMemFree of the program's), so the median still matters.
 * Nothing is timed that the pool would not do anyway; a one-time
 * calibration would instead charge its first large growth with creating
 * and releasing memory it does not keep, and would be as noisy as one
 * sample of each size.  The record is per device and process-wide, behind
 * one lock: every manager of a device (each context has its own) sees the
 * same driver, so what one learns serves all.
 *
 * The choice is a pure function of the record (cuemm__piece_choose, which
 * the tests drive with made-up costs): among the candidate sizes (the
 * pool's unit times a power of two, up to the growth), the class with the
 * lowest cost per byte wins, ties to the larger piece (fewer calls).  With
 * nothing measured it starts from a guess of 4 GiB (the largest candidate
 * up to it), and it never goes below that, for the growths it fits: the
 * median guards against a few samples of recycled memory, not against a
 * class timed mostly on it, which is what a program (or a benchmark) that
 * grows and releases the same sizes does, and the pool's timing cannot
 * tell recycled memory from fresh.  On the H100, with a guess of 1 GiB and
 * the search free to go lower, the choice settled on 256 and 512 MiB
 * pieces and grew by 8 GiB in 1.1x to 2.1x the time of cuMemAlloc; with
 * 1 GiB as the floor, 1.3x to 1.6x; with 4 GiB, 0.73x to 0.97x.
 * Exploration is
 * bounded hill climbing: while a neighbour of the winner (twice or half its
 * size) that fits the growth has been made of fewer than
 * CUEMM__PIECE_EXPLORE pieces, timed or not, that neighbour is used
 * instead, so each class is tried at most once (one growth) over the life
 * of the process,
 * and only next to the best one so far, where the optimum may lie.  A
 * growth up to CUEMM__PIECE_SPLIT is always one piece: there every
 * creation costs about the same fixed time, and splitting could only add
 * calls.  CUEMM_POOL_PIECE pins the size instead (pool.c); pinned growths
 * are still timed and recorded.
 */
#include <stdlib.h>
#include <string.h>

#include "base/internal.h"
#include "pool/piece.h"

#define PIECE_MAX_DEVICES 64

static cuemm__lock piece_lock;
static cuemm__piece_table tables[PIECE_MAX_DEVICES];

int cuemm__piece_class(size_t bytes)
{
  if (bytes < ((size_t)1 << CUEMM__PIECE_MIN_SHIFT))
    return -1;
  int k = 0;
  while (k + 1 < CUEMM__PIECE_CLASSES && (bytes >> (CUEMM__PIECE_MIN_SHIFT + k + 1)) != 0)
    k++;
  /* Beyond the last class's range: not recorded rather than lumped in. */
  return (bytes >> (CUEMM__PIECE_MIN_SHIFT + k + 1)) != 0 ? -1 : k;
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

void cuemm__piece_record(cuemm__piece_table *t, size_t bytes, double ns, uint32_t count)
{
  int k = cuemm__piece_class(bytes);
  if (k < 0 || count == 0)
    return;
  t->made[k] = t->made[k] > UINT32_MAX - count ? UINT32_MAX : t->made[k] + count;
  if (!(ns > 0))
    return;
  t->recent[k][t->next[k]] = ns / (double)bytes;
  t->next[k] = (t->next[k] + 1) % CUEMM__PIECE_RECENT;
  if (t->nrecent[k] < CUEMM__PIECE_RECENT)
    t->nrecent[k]++;
  /* The median; of an even count, the lower middle one. */
  double v[CUEMM__PIECE_RECENT];
  memcpy(v, t->recent[k], t->nrecent[k] * sizeof v[0]);
  qsort(v, t->nrecent[k], sizeof v[0], cmp_double);
  t->ns_per_byte[k] = v[(t->nrecent[k] - 1) / 2];
  t->samples[k] = t->samples[k] > UINT32_MAX - count ? UINT32_MAX : t->samples[k] + count;
}

/* Whether `piece` is a candidate for a growth of `bytes`. */
static int candidate(size_t unit, size_t bytes, size_t min_piece, size_t piece)
{
  return piece >= unit && piece <= bytes && piece >= min_piece && piece % unit == 0 &&
         ((piece / unit) & (piece / unit - 1)) == 0;
}

static int explore(const cuemm__piece_table *t, size_t unit, size_t bytes, size_t min_piece, size_t piece)
{
  int k = cuemm__piece_class(piece);
  return candidate(unit, bytes, min_piece, piece) && k >= 0 && t->made[k] < CUEMM__PIECE_EXPLORE;
}

size_t cuemm__piece_choose(const cuemm__piece_table *t, size_t unit, size_t bytes, size_t min_piece)
{
  if (bytes <= CUEMM__PIECE_SPLIT || unit == 0)
    return bytes;
  /* The guess: the largest candidate up to CUEMM__PIECE_GUESS, else the
   * smallest candidate. */
  size_t guess = 0, smallest = 0;
  for (size_t piece = unit; piece <= bytes && piece >= unit; piece <<= 1) {
    if (piece >= min_piece) {
      if (!smallest)
        smallest = piece;
      if (piece <= CUEMM__PIECE_GUESS)
        guess = piece;
    }
    if (piece > SIZE_MAX / 2)
      break;
  }
  if (!smallest)
    return bytes;
  if (!guess)
    guess = smallest;
  /* Nothing smaller than the guess, chosen or explored: see the top. */
  size_t lo = guess > min_piece ? guess : min_piece;
  size_t best = 0;
  double best_cost = 0;
  for (size_t piece = guess; piece <= bytes && piece >= unit; piece <<= 1) {
    int k = cuemm__piece_class(piece);
    if (k >= 0 && t->samples[k] != 0) {
      double c = t->ns_per_byte[k];
      if (!best || c <= best_cost) { /* <=: ties to the larger piece */
        best = piece;
        best_cost = c;
      }
    }
    if (piece > SIZE_MAX / 2)
      break;
  }
  if (!best)
    return guess;
  if (best <= SIZE_MAX / 2 && explore(t, unit, bytes, lo, best * 2))
    return best * 2;
  if (explore(t, unit, bytes, lo, best / 2))
    return best / 2;
  return best;
}

size_t cuemm__piece_pick(int dev, size_t unit, size_t bytes, size_t min_piece)
{
  static const cuemm__piece_table none;
  if (dev < 0 || dev >= PIECE_MAX_DEVICES)
    return cuemm__piece_choose(&none, unit, bytes, min_piece);
  cuemm__lock_acquire(&piece_lock);
  size_t piece = cuemm__piece_choose(&tables[dev], unit, bytes, min_piece);
  cuemm__lock_release(&piece_lock);
  return piece;
}

void cuemm__piece_note(int dev, size_t bytes, double ns, uint32_t count)
{
  if (dev < 0 || dev >= PIECE_MAX_DEVICES)
    return;
  cuemm__lock_acquire(&piece_lock);
  cuemm__piece_record(&tables[dev], bytes, ns, count);
  cuemm__lock_release(&piece_lock);
}

void cuemm__piece_released(int dev, double now)
{
  if (dev < 0 || dev >= PIECE_MAX_DEVICES)
    return;
  cuemm__lock_acquire(&piece_lock);
  tables[dev].released_ns = now;
  cuemm__lock_release(&piece_lock);
}

int cuemm__piece_fresh(int dev, double now)
{
  if (dev < 0 || dev >= PIECE_MAX_DEVICES)
    return 1;
  cuemm__lock_acquire(&piece_lock);
  double at = tables[dev].released_ns;
  cuemm__lock_release(&piece_lock);
  return at == 0 || now - at >= CUEMM__PIECE_QUIET_NS;
}

void cuemm__piece_snapshot(int dev, cuemm__piece_table *out)
{
  memset(out, 0, sizeof *out);
  if (dev < 0 || dev >= PIECE_MAX_DEVICES)
    return;
  cuemm__lock_acquire(&piece_lock);
  *out = tables[dev];
  cuemm__lock_release(&piece_lock);
}
