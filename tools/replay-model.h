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
 *     microseconds);
 *   - foresight: a placement that knows the whole log, when every block
 *     is freed as well as its size: the lowest of four plans, blocks
 *     placed largest first or heaviest (size times life) first, each at
 *     the lowest address free during all its life (as static memory
 *     planners place a graph's tensors, whose lives they know), and the
 *     two fits' own placements.  Not the optimum, a bound on it from above: a
 *     log that foresight holds within some figure can be placed within it
 *     by an allocator that knew the future; one it holds above may or may
 *     not be.
 *
 * Sizes are rounded to REPLAY_MODEL_ALIGN, held bytes to
 * REPLAY_MODEL_PAGE.  The models never call the driver.
 */
#ifndef CUEMM_REPLAY_MODEL_H
#define CUEMM_REPLAY_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "replay-parse.h"

/* The sub-allocator's alignment (cuemm's pool blocks), and the device's
 * allocation granularity on an H100, the unit of every mapping. */
#define REPLAY_MODEL_ALIGN ((size_t)256)
#define REPLAY_MODEL_PAGE ((size_t)2 << 20)
/* The most address space a model places blocks in: far more than any
 * GPU's memory, and it bounds the pages model's table (8 Mi pages, 32
 * MiB) whatever sizes a log claims. */
#define REPLAY_MODEL_SPAN ((uint64_t)1 << 44)

typedef enum replay_model {
  REPLAY_MODEL_FIRST_FIT = 0,
  REPLAY_MODEL_BEST_FIT,
  REPLAY_MODEL_PAGES,
  REPLAY_MODEL_FORESIGHT,
} replay_model;
#define REPLAY_MODELS 4

typedef struct replay_model_result {
  size_t held;      /* the peak of the bytes held: the highest block's end, or
                     * the pages touched, rounded up to REPLAY_MODEL_PAGE */
  size_t page_maps; /* pages: how often a page came into use (0 for the fits):
                     * what an allocator holding only those would map */
} replay_model_result;

/* What replay_model_run returns. */
enum { REPLAY_MODEL_OK = 0, REPLAY_MODEL_NO_MEMORY = -1, REPLAY_MODEL_TOO_LARGE = -2 };

/* Places t's events with model `which` into *r.  Returns REPLAY_MODEL_OK;
 * REPLAY_MODEL_NO_MEMORY when host memory ran out; REPLAY_MODEL_TOO_LARGE
 * when the blocks would reach past REPLAY_MODEL_SPAN (a log whose sizes
 * are not a GPU's). */
int replay_model_run(const replay_trace *t, replay_model which, replay_model_result *r);

#endif
