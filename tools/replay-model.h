/* replay-model.h: reference allocators that place a log's blocks on paper
 * (replay-model.c), for cuemm-replay's model backends.
 *
 * A footprint means little alone: a log of many temporaries of many sizes
 * fragments any allocator that keeps its blocks where it put them.  These
 * models say what textbook placements hold on the same log, with nothing
 * that a GPU allocator must add: no streams (a freed block serves the next
 * request at once, whatever its stream), no caches, no growth steps, every
 * free merged at once with its free neighbours, one address space grown
 * exactly as far as the highest block reaches.
 *
 *   - first fit: the lowest-addressed free block that fits;
 *   - best fit: the smallest free block that fits (the lowest of those);
 *   - pages: first fit's placement, holding only the pages that live
 *     blocks touch, as an allocator that mapped and unmapped every page
 *     at once would (no GPU allocator does: a page mapped costs tens of
 *     microseconds).
 *
 * Sizes are rounded to REPLAY_MODEL_ALIGN, held bytes to
 * REPLAY_MODEL_PAGE.  The models never call the driver.
 */
#ifndef CUEMM_REPLAY_MODEL_H
#define CUEMM_REPLAY_MODEL_H

#include <stddef.h>

#include "replay-parse.h"

/* The sub-allocator's alignment (cuemm's pool blocks), and the device's
 * allocation granularity on an H100, the unit of every mapping. */
#define REPLAY_MODEL_ALIGN ((size_t)256)
#define REPLAY_MODEL_PAGE ((size_t)2 << 20)

typedef enum replay_model {
  REPLAY_MODEL_FIRST_FIT = 0,
  REPLAY_MODEL_BEST_FIT,
  REPLAY_MODEL_PAGES,
} replay_model;

typedef struct replay_model_result {
  size_t held;      /* the peak of the bytes held: the highest block's end, or
                     * the pages touched, rounded up to REPLAY_MODEL_PAGE */
  size_t page_maps; /* pages: how often a page came into use (0 for the fits):
                     * what an allocator holding only those would map */
} replay_model_result;

/* Places t's events with model `which` into *r.  Returns 0, or -1 when
 * host memory ran out. */
int replay_model_run(const replay_trace *t, replay_model which, replay_model_result *r);

#endif
