/* test-piece.c: the choice of piece size for the pool's large growths, on
 * its own (src/pool/piece.c compiled in): size classes, the record of measured
 * costs, the chooser driven by made-up costs (uniform costs, costs shaped
 * like an H100's, the bounded exploration next to the best size, the floor
 * IPC sets, units that are not powers of two), and the process-wide
 * per-device record under concurrent use.  No driver, no clock.
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "pool/piece.h"
#include "tap.h"

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

static void classes(void)
{
  is(cuemm__piece_class(MiB), -1, "1 MiB: below the table");
  is(cuemm__piece_class(2 * MiB), 0, "2 MiB: class 0");
  is(cuemm__piece_class(3 * MiB), 0, "3 MiB: class 0");
  is(cuemm__piece_class(4 * MiB), 1, "4 MiB: class 1");
  is(cuemm__piece_class(GiB), 9, "1 GiB: class 9");
  is(cuemm__piece_class(8 * GiB), 12, "8 GiB: class 12");
  is(cuemm__piece_class((size_t)2 << (20 + CUEMM__PIECE_CLASSES - 1)), CUEMM__PIECE_CLASSES - 1,
     "the last class");
  is(cuemm__piece_class((size_t)2 << (20 + CUEMM__PIECE_CLASSES)), -1, "beyond the last class");
}

static void record(void)
{
  cuemm__piece_table t;
  memset(&t, 0, sizeof t);
  cuemm__piece_record(&t, 64 * MiB, 75e3, 1);
  ok(t.ns_per_byte[5] == 75e3 / (double)(64 * MiB), "64 MiB in 75 us: its cost per byte");
  is(t.samples[5], 1, "one sample");
  cuemm__piece_record(&t, 64 * MiB, 90e3, 3);
  ok(t.ns_per_byte[5] == 75e3 / (double)(64 * MiB), "two growths: the lower middle one, 75 us");
  is(t.samples[5], 4, "and the pieces counted");
  cuemm__piece_record(&t, 64 * MiB, 60e3, 1);
  ok(t.ns_per_byte[5] == 75e3 / (double)(64 * MiB), "60, 75, 90 us: the median, 75 us");
  /* The driver handing back memory it just took back: a few very fast
   * creations among ordinary ones do not make the size look cheap. */
  memset(&t, 0, sizeof t);
  for (int i = 0; i < 4; i++)
    cuemm__piece_record(&t, 256 * MiB, 100e3 + i * 1e3, 8);
  for (int i = 0; i < 3; i++)
    cuemm__piece_record(&t, 256 * MiB, 9e3, 8);
  ok(t.ns_per_byte[7] == 100e3 / (double)(256 * MiB), "4 growths at 100..103 us and 3 at 9 us: 100 us, not 9");
  for (int i = 0; i < 4; i++)
    cuemm__piece_record(&t, 256 * MiB, 9e3, 8);
  ok(t.ns_per_byte[7] == 9e3 / (double)(256 * MiB), "once most recent growths are fast, fast it is");
  memset(&t, 0, sizeof t);
  cuemm__piece_record(&t, 64 * MiB, 75e3, 5);
  cuemm__piece_record(&t, MiB, 1e3, 1);
  cuemm__piece_record(&t, 64 * MiB, 0, 1);
  cuemm__piece_record(&t, 64 * MiB, 10, 0);
  is(t.samples[5], 5, "below the table, no time or no count: nothing recorded");
}

/* Every class measured `samples` times at `ns` per piece of its lower bound. */
static void fill(cuemm__piece_table *t, const double *us_per_class, uint32_t samples)
{
  memset(t, 0, sizeof *t);
  for (int k = 0; k < CUEMM__PIECE_CLASSES; k++)
    if (us_per_class[k] > 0)
      cuemm__piece_record(t, (size_t)2 * MiB << k, us_per_class[k] * 1e3, samples);
}

static void choose(void)
{
  cuemm__piece_table t;
  memset(&t, 0, sizeof t);
  is(cuemm__piece_choose(&t, 32 * MiB, 512 * MiB, 0), 512 * MiB, "512 MiB: one piece");
  is(cuemm__piece_choose(&t, 32 * MiB, 96 * MiB, 0), 96 * MiB, "96 MiB: one piece");
  is(cuemm__piece_choose(&t, 32 * MiB, 8 * GiB, 0), 4 * GiB, "nothing measured: 8 GiB in pieces of the 4 GiB guess");
  is(cuemm__piece_choose(&t, 32 * MiB, 768 * MiB, 0), 512 * MiB, "768 MiB: the largest candidate below the guess");
  is(cuemm__piece_choose(&t, 3 * GiB, 6 * GiB, 0), 3 * GiB, "units above the guess: one unit");

  /* Uniform costs per byte: all equal, ties go to the larger piece; every
   * class has samples, so nothing is explored and the answer never moves. */
  double uniform[CUEMM__PIECE_CLASSES];
  for (int k = 0; k < CUEMM__PIECE_CLASSES; k++)
    uniform[k] = (double)(2 << k); /* 1 us per MiB */
  fill(&t, uniform, 10);
  int same = 1;
  for (int i = 0; i < 100; i++)
    same &= cuemm__piece_choose(&t, 32 * MiB, 8 * GiB, 0) == 8 * GiB;
  ok(same, "uniform costs per byte: 8 GiB in one piece, every time");
  is(cuemm__piece_choose(&t, 32 * MiB, 3 * GiB, 0), 2 * GiB, "3 GiB: 2 GiB pieces (and the rest)");

  /* Uniform costs per call (what simcuda's times are, about): the largest
   * piece wins, as the fewest calls. */
  double per_call[CUEMM__PIECE_CLASSES];
  for (int k = 0; k < CUEMM__PIECE_CLASSES; k++)
    per_call[k] = 70;
  fill(&t, per_call, 10);
  is(cuemm__piece_choose(&t, 32 * MiB, 8 * GiB, 0), 8 * GiB, "uniform costs per call: one piece");

  /* Shaped like the H100's: 75 us up to 1 GiB, superlinear beyond. */
  double h100[CUEMM__PIECE_CLASSES] = { 0 };
  for (int k = 0; k <= 9; k++)
    h100[k] = 75 - (k == 9 ? 8 : 0);
  h100[10] = 150;  /* 2 GiB */
  h100[11] = 700;  /* 4 GiB */
  h100[12] = 3011; /* 8 GiB */
  fill(&t, h100, 10);
  is(cuemm__piece_choose(&t, 32 * MiB, 8 * GiB, 0), 4 * GiB,
     "costs cheapest per byte at 1 GiB, rising past it: 4 GiB pieces, nothing below the guess for 8 GiB");
  is(cuemm__piece_choose(&t, 2 * MiB, 16 * GiB, 0), 4 * GiB, "and for 16 GiB");
  is(cuemm__piece_choose(&t, 32 * MiB, 8 * GiB, 4 * GiB), 4 * GiB, "a floor (IPC) is respected");
  is(cuemm__piece_choose(&t, 32 * MiB, 8 * GiB, 16 * GiB), 8 * GiB, "a floor above the growth: one piece");

  /* Bounded exploration, for growths of 12 GiB (candidates up to 8 GiB):
   * only the guess, 4 GiB, known, once. */
  memset(&t, 0, sizeof t);
  cuemm__piece_record(&t, 4 * GiB, 800e3, 1);
  is(cuemm__piece_choose(&t, 32 * MiB, 12 * GiB, 0), 8 * GiB, "the untried larger neighbour is tried");
  cuemm__piece_record(&t, 8 * GiB, 4000e3, 1); /* worse per byte */
  is(cuemm__piece_choose(&t, 32 * MiB, 12 * GiB, 0), 4 * GiB,
     "then the best, 4 GiB: the smaller neighbour is below the guess, not tried");
  cuemm__piece_record(&t, GiB, 67e3, 16); /* recycled memory: far cheaper per byte */
  is(cuemm__piece_choose(&t, 32 * MiB, 12 * GiB, 0), 4 * GiB,
     "1 GiB pieces timed on recycled memory do not pull a 12 GiB growth below the guess");
  is(cuemm__piece_choose(&t, 32 * MiB, 768 * MiB, 0), 512 * MiB,
     "768 MiB: its largest candidate up to the guess, whatever smaller ones cost");
  same = 1;
  for (int i = 0; i < 100; i++)
    same &= cuemm__piece_choose(&t, 32 * MiB, 12 * GiB, 0) == 4 * GiB;
  ok(same, "and nothing more is explored");
  is(cuemm__piece_choose(&t, 32 * MiB, 3 * GiB, 0), 2 * GiB,
     "a growth of 3 GiB: 2 GiB pieces, its largest candidate up to the guess");
  cuemm__piece_record(&t, 8 * GiB, 1000e3, 1); /* now better per byte (the median of two: the lower) */
  is(cuemm__piece_choose(&t, 32 * MiB, 12 * GiB, 0), 8 * GiB, "a better 8 GiB wins");

  /* Pieces made but not timed (a growth right after a release) count as
   * tried: the neighbour is not tried again, and is no candidate. */
  memset(&t, 0, sizeof t);
  cuemm__piece_record(&t, 4 * GiB, 800e3, 1);
  is(cuemm__piece_choose(&t, 32 * MiB, 12 * GiB, 0), 8 * GiB, "the untried 8 GiB is tried");
  cuemm__piece_record(&t, 8 * GiB, 0, 1);
  ok(t.made[12] == 1 && t.samples[12] == 0 && t.ns_per_byte[12] == 0, "made once, not timed (made %u, timed %u)",
     t.made[12], t.samples[12]);
  is(cuemm__piece_choose(&t, 32 * MiB, 12 * GiB, 0), 4 * GiB, "not tried again: the timed 4 GiB");
  is(t.made[11], 1, "the 4 GiB growth counted as made too");

  /* A unit that is not a power of two: pieces are unit << j. */
  memset(&t, 0, sizeof t);
  size_t p = cuemm__piece_choose(&t, 6 * MiB, 6 * GiB, 0);
  ok(p % (6 * MiB) == 0 && p == 3 * GiB, "6 MiB units: %zu-byte pieces, 6 MiB << 9, the largest up to the guess", p);
}

static void *noter(void *arg)
{
  (void)arg;
  for (int i = 0; i < 10000; i++)
    cuemm__piece_note(7, 64 * MiB, 75e3 + i, 1);
  return NULL;
}

static void process_wide(void)
{
  cuemm__piece_table t;
  cuemm__piece_snapshot(7, &t);
  is(t.samples[5], 0, "device 7: nothing measured yet");
  is(cuemm__piece_pick(7, 32 * MiB, 8 * GiB, 0), 4 * GiB, "so the guess");
  pthread_t th[8];
  for (int i = 0; i < 8; i++)
    pthread_create(&th[i], NULL, noter, NULL);
  for (int i = 0; i < 8; i++)
    pthread_join(th[i], NULL);
  cuemm__piece_snapshot(7, &t);
  is(t.samples[5], 80000, "8 threads x 10000 notes, none lost");
  ok(t.ns_per_byte[5] >= 75e3 / (double)(64 * MiB) && t.ns_per_byte[5] < 85e3 / (double)(64 * MiB),
     "the median of the last of them kept");
  cuemm__piece_snapshot(6, &t);
  is(t.samples[5], 0, "another device's record is its own");
  cuemm__piece_note(64, 64 * MiB, 75e3, 1);
  cuemm__piece_note(-1, 64 * MiB, 75e3, 1);
  cuemm__piece_snapshot(64, &t);
  is(t.samples[5], 0, "devices beyond the table are not recorded");
  is(cuemm__piece_pick(64, 32 * MiB, 8 * GiB, 0), 4 * GiB, "and get the guess");

  /* A release makes the device's next growths, for a while, untimed. */
  ok(cuemm__piece_fresh(5, 1e12), "device 5, nothing released: a growth is fresh");
  cuemm__piece_released(5, 1e12);
  ok(!cuemm__piece_fresh(5, 1e12 + CUEMM__PIECE_QUIET_NS / 2), "half the quiet time after a release: not fresh");
  ok(cuemm__piece_fresh(5, 1e12 + CUEMM__PIECE_QUIET_NS), "the whole quiet time after: fresh again");
  ok(cuemm__piece_fresh(4, 1e12 + 1), "another device's release is its own");
  cuemm__piece_released(64, 1e12);
  ok(cuemm__piece_fresh(64, 1e12 + 1), "devices beyond the table: always fresh (nothing is recorded for them)");
}

int main(void)
{
  classes();
  record();
  choose();
  process_wide();
  return tap_done();
}
