/* fuzz-replay.c: cuemm-replay's log parser (tools/replay-parse.c) on any
 * bytes, as a log and as a stream of one (fmemopen).
 *
 * Input: the whole of it is the log.  What must hold: the parser returns
 * (never exits) with a known status; both ways of reading give the same
 * status, message and trace; a refused log gets a message that names the
 * file, holds printable ASCII only (the file's name here holds ESC [2J, and
 * the log's bytes may hold anything) and leaves nothing to free; an accepted
 * log is a replayable trace: allocations numbered in order, each free frees
 * a live allocation at its size, streams distinct and in range, and the
 * counts, the peak of live bytes, the event reaching it and what stays live
 * at the end are what the events say.  With a Manager column, each manager
 * can be chosen and one absent is refused; without, any choice is refused.
 * And replay_escape of the input writes printable ASCII that reads back as
 * the input.  Every accepted trace is placed by cuemm-replay's models
 * (tools/replay-model.c): each holds at least the peak of live bytes and
 * at most what all its allocations sum to; first fit at least what its own
 * placement's pages hold; both fits at least what foresight holds; the
 * pages model maps each page it holds at its peak at least once; sizes
 * past the models' span are refused, not placed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "replay-model.h"
#include "replay-parse.h"

#define PATH "log\033[2J.csv"
#define PATH_SHOWN "log\\x1b[2J.csv"

static void check_message(const char *msg, replay_status st)
{
  FUZZ_ASSERT(st > REPLAY_OK && st <= REPLAY_BAD_MANAGER, "status %d", (int)st);
  FUZZ_ASSERT(strncmp(msg, PATH_SHOWN ":", strlen(PATH_SHOWN ":")) == 0, "the message names the file: %s", msg);
  for (const unsigned char *c = (const unsigned char *)msg; *c; c++)
    FUZZ_ASSERT(*c >= 0x20 && *c < 0x7f, "byte 0x%02x at %zu of the message", *c, (size_t)(c - (const unsigned char *)msg));
}

/* The trace is what its events say. */
static void check_trace(const replay_trace *t, size_t nlines)
{
  FUZZ_ASSERT(t->lines <= nlines, "%zu lines counted of %zu", t->lines, nlines);
  FUZZ_ASSERT(t->streams <= REPLAY_MAX_STREAMS, "%zu streams", t->streams);
  for (size_t i = 0; i < t->streams; i++) {
    FUZZ_ASSERT(t->stream_ids[i] != 1, "stream 0x1 is the default stream, 0");
    for (size_t j = 0; j < i; j++)
      FUZZ_ASSERT(t->stream_ids[i] != t->stream_ids[j], "stream %zu twice", i);
  }
  FUZZ_ASSERT(t->unknown_actions <= REPLAY_MAX_UNKNOWN_ACTIONS, "%zu action names", t->unknown_actions);
  uint64_t *size = calloc(t->slots ? t->slots : 1, sizeof *size);
  unsigned char *live = calloc(t->slots ? t->slots : 1, 1);
  FUZZ_ASSERT(size && live, "out of memory");
  size_t next = 0, allocs = 0, frees = 0, peak_event = 0, nlive = 0;
  uint64_t cur = 0, peak = 0;
  for (size_t i = 0; i < t->n; i++) {
    const replay_event *e = &t->ev[i];
    FUZZ_ASSERT(e->stream < t->streams, "event %zu on stream %u of %zu", i, e->stream, t->streams);
    if (!e->is_free) {
      FUZZ_ASSERT(e->slot == next, "allocation %zu numbered %u", next, e->slot);
      FUZZ_ASSERT(e->size > 0, "allocation %zu of 0 bytes replayed", next);
      FUZZ_ASSERT(e->size <= UINT64_MAX - cur, "live bytes past 2^64 at event %zu", i);
      size[next] = e->size, live[next] = 1;
      next++, allocs++, nlive++;
      cur += e->size;
      if (cur > peak)
        peak = cur, peak_event = i;
    } else {
      FUZZ_ASSERT(e->slot < next && live[e->slot], "event %zu frees allocation %u, not live", i, e->slot);
      FUZZ_ASSERT(e->size == size[e->slot], "event %zu frees %llu bytes of %llu", i, (unsigned long long)e->size,
                  (unsigned long long)size[e->slot]);
      live[e->slot] = 0;
      frees++, nlive--;
      cur -= e->size;
    }
  }
  free(size), free(live);
  FUZZ_ASSERT(next == t->slots, "%zu allocations, %zu slots", next, t->slots);
  FUZZ_ASSERT(allocs + t->null_allocs == t->allocs, "%zu + %zu allocations of %zu", allocs, t->null_allocs, t->allocs);
  FUZZ_ASSERT(frees + t->unknown_frees == t->frees, "%zu + %zu frees of %zu", frees, t->unknown_frees, t->frees);
  FUZZ_ASSERT(peak == t->peak_live, "peak %llu, said %zu", (unsigned long long)peak, t->peak_live);
  FUZZ_ASSERT(!peak || peak_event == t->peak_event, "peak at event %zu, said %zu", peak_event, t->peak_event);
  FUZZ_ASSERT(cur == t->live_at_end, "%llu bytes live at the end, said %zu", (unsigned long long)cur, t->live_at_end);
  FUZZ_ASSERT(nlive == t->live_count_at_end, "%zu live at the end, said %zu", nlive, t->live_count_at_end);
}

static int same_trace(const replay_trace *a, const replay_trace *b)
{
  return a->n == b->n && a->slots == b->slots && a->streams == b->streams && a->lines == b->lines &&
         a->peak_live == b->peak_live && a->nmanagers == b->nmanagers && a->manager == b->manager &&
         (a->n == 0 || memcmp(a->ev, b->ev, a->n * sizeof *a->ev) == 0) &&
         memcmp(a->stream_ids, b->stream_ids, a->streams * sizeof *a->stream_ids) == 0;
}

/* Parses the log both ways; returns the status, *t filled on success. */
static replay_status parse_both(replay_trace *t, const uint8_t *data, size_t size, uint32_t want, size_t nlines)
{
  char msg[REPLAY_MSG_MAX], fmsg[REPLAY_MSG_MAX];
  replay_status st = replay_parse_bytes(t, data, size, PATH, want, msg, sizeof msg);
  if (st != REPLAY_OK) {
    check_message(msg, st);
    FUZZ_ASSERT(!t->ev && !t->managers && !t->shown, "a refused log left memory behind");
  } else {
    FUZZ_ASSERT(msg[0] == '\0', "a message for an accepted log: %s", msg);
    check_trace(t, nlines);
  }
  if (size == 0)
    return st;
  FILE *fp = fmemopen((void *)data, size, "r");
  FUZZ_ASSERT(fp, "fmemopen");
  replay_trace ft;
  replay_status fst = replay_parse_file(&ft, fp, PATH, want, NULL, fmsg, sizeof fmsg);
  fclose(fp);
  FUZZ_ASSERT(fst == st, "status %d from the stream, %d from the bytes", (int)fst, (int)st);
  if (st != REPLAY_OK)
    FUZZ_ASSERT(strcmp(msg, fmsg) == 0, "messages differ: '%s', '%s'", msg, fmsg);
  else {
    FUZZ_ASSERT(same_trace(t, &ft), "the stream gave another trace");
    replay_trace_free(&ft);
  }
  return st;
}

/* The models on an accepted trace. */
static void check_models(const replay_trace *t)
{
  uint64_t total = 0; /* every allocation's bytes as the models round them */
  int too_large = 0;
  for (size_t i = 0; i < t->n; i++)
    if (t->ev[i].size > REPLAY_MODEL_SPAN)
      too_large = 1;
    else if (!t->ev[i].is_free)
      total += (t->ev[i].size + REPLAY_MODEL_ALIGN - 1) / REPLAY_MODEL_ALIGN * REPLAY_MODEL_ALIGN;
  replay_model_result r[REPLAY_MODELS];
  int rc[REPLAY_MODELS];
  for (int k = 0; k < REPLAY_MODELS; k++) {
    rc[k] = replay_model_run(t, (replay_model)k, &r[k]);
    FUZZ_ASSERT(rc[k] == REPLAY_MODEL_OK || rc[k] == REPLAY_MODEL_TOO_LARGE, "model %d returned %d", k, rc[k]);
    FUZZ_ASSERT(!too_large || rc[k] == REPLAY_MODEL_TOO_LARGE, "model %d placed a size past its span", k);
    if (rc[k] != REPLAY_MODEL_OK)
      continue;
    uint64_t most = (total + REPLAY_MODEL_PAGE - 1) / REPLAY_MODEL_PAGE * REPLAY_MODEL_PAGE;
    FUZZ_ASSERT(r[k].held >= t->peak_live, "model %d holds %zu, below the peak of %zu live", k, r[k].held,
                t->peak_live);
    FUZZ_ASSERT(r[k].held <= most, "model %d holds %zu, more than all %llu allocated", k, r[k].held,
                (unsigned long long)most);
    FUZZ_ASSERT(r[k].held % REPLAY_MODEL_PAGE == 0, "model %d holds %zu, not whole pages", k, r[k].held);
    FUZZ_ASSERT(k == REPLAY_MODEL_PAGES ? r[k].page_maps >= r[k].held / REPLAY_MODEL_PAGE : r[k].page_maps == 0,
                "model %d: %zu page mappings for %zu held", k, r[k].page_maps, r[k].held);
  }
  if (rc[REPLAY_MODEL_FIRST_FIT] == REPLAY_MODEL_OK && rc[REPLAY_MODEL_PAGES] == REPLAY_MODEL_OK)
    FUZZ_ASSERT(r[REPLAY_MODEL_FIRST_FIT].held >= r[REPLAY_MODEL_PAGES].held,
                "first fit holds %zu, less than the %zu of its pages", r[REPLAY_MODEL_FIRST_FIT].held,
                r[REPLAY_MODEL_PAGES].held);
  /* Foresight may always place as either fit does. */
  for (int k = REPLAY_MODEL_FIRST_FIT; k <= REPLAY_MODEL_BEST_FIT; k++) {
    FUZZ_ASSERT((rc[k] == REPLAY_MODEL_OK) == (rc[REPLAY_MODEL_FORESIGHT] == REPLAY_MODEL_OK),
                "model %d returned %d, foresight %d", k, rc[k], rc[REPLAY_MODEL_FORESIGHT]);
    if (rc[k] == REPLAY_MODEL_OK && rc[REPLAY_MODEL_FORESIGHT] == REPLAY_MODEL_OK)
      FUZZ_ASSERT(r[REPLAY_MODEL_FORESIGHT].held <= r[k].held, "foresight holds %zu, more than model %d's %zu",
                  r[REPLAY_MODEL_FORESIGHT].held, k, r[k].held);
  }
}

/* replay_escape writes printable ASCII that reads back as its input. */
static void check_escape(const uint8_t *data, size_t size)
{
  size_t limit = size > 48 ? 48 : size;
  char out[48 * 4 + 4];
  size_t n = replay_escape(out, sizeof out, (const char *)data, size, limit);
  FUZZ_ASSERT(n == strlen(out), "length %zu, wrote %zu", n, strlen(out));
  size_t i = 0, o = 0;
  while (o < n && !(size > limit && o + 3 == n)) {
    unsigned char c = (unsigned char)out[o];
    FUZZ_ASSERT(c >= 0x20 && c < 0x7f, "byte 0x%02x escaped as itself", c);
    unsigned v;
    if (c != '\\')
      v = c, o++;
    else if (out[o + 1] == '\\')
      v = '\\', o += 2;
    else {
      FUZZ_ASSERT(out[o + 1] == 'x' && sscanf(out + o + 2, "%2x", &v) == 1, "a bad escape at %zu: %s", o, out);
      o += 4;
    }
    FUZZ_ASSERT(i < limit && v == data[i], "byte %zu reads back as 0x%02x, was 0x%02x", i, v, i < size ? data[i] : 0);
    i++;
  }
  FUZZ_ASSERT(i == limit, "%zu bytes of %zu escaped", i, limit);
  FUZZ_ASSERT(size <= limit || strcmp(out + n - 3, "...") == 0, "a cut is marked: %s", out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  check_escape(data, size);
  size_t nlines = 0;
  for (size_t i = 0; i < size; i++)
    nlines += data[i] == '\n';
  nlines += size && data[size - 1] != '\n';
  replay_trace t;
  replay_status st = parse_both(&t, data, size, 0, nlines);
  if (st != REPLAY_OK)
    return 0;
  check_models(&t);
  if (!t.has_manager) {
    replay_trace u;
    FUZZ_ASSERT(parse_both(&u, data, size, 1, nlines) == REPLAY_BAD_MANAGER, "--manager without a Manager column");
  } else if (t.nmanagers > 0) {
    /* Each manager by name: its rows, the others' skipped. */
    uint32_t top = 0;
    size_t rows = 0;
    for (size_t k = 0; k < t.nmanagers && k < 4; k++) {
      uint32_t id = t.managers[k].id;
      replay_trace u;
      if (id == 0) /* 0 asks for the default */
        continue;
      FUZZ_ASSERT(parse_both(&u, data, size, id, nlines) == REPLAY_OK, "manager %u of the log refused", id);
      FUZZ_ASSERT(u.manager == id && u.manager_chosen, "manager %u asked, %u replayed", id, u.manager);
      FUZZ_ASSERT(u.other_manager_rows + t.managers[k].rows == t.other_manager_rows + t.managers[0].rows,
                  "rows of manager %u", id);
      replay_trace_free(&u);
    }
    for (size_t k = 0; k < t.nmanagers; k++) {
      if (t.managers[k].id > top)
        top = t.managers[k].id;
      rows += t.managers[k].rows;
    }
    FUZZ_ASSERT(rows == t.other_manager_rows + t.managers[0].rows, "%zu rows of all managers", rows);
    if (top < UINT32_MAX) {
      replay_trace u;
      FUZZ_ASSERT(parse_both(&u, data, size, top + 1, nlines) == REPLAY_BAD_MANAGER, "manager %u is not in the log",
                  top + 1);
    }
  }
  replay_trace_free(&t);
  return 0;
}
