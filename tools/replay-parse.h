/* replay-parse.h: cuemm-replay's reading of an allocation log (replay-parse.c)
 * into the array of events the replay runs, apart from the program so that
 * tests/fuzz/fuzz-replay.c can feed it any bytes.
 *
 * The parser never exits and never prints: a log it cannot read gives a
 * status and a message naming the file and the line, with every byte of the
 * input it quotes escaped (replay_escape), so that a log cannot write to
 * the terminal through the program's messages.
 */
#ifndef CUEMM_REPLAY_PARSE_H
#define CUEMM_REPLAY_PARSE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define REPLAY_MAX_STREAMS 256
/* Threads told apart; a log's further threads share these (see thread_index). */
#define REPLAY_MAX_THREADS 64
#define REPLAY_MAX_UNKNOWN_ACTIONS 8

/* What replay_parse_file and replay_parse_bytes return. */
typedef enum replay_status {
  REPLAY_OK = 0,
  REPLAY_BAD_LOG,    /* not a log the replay reads: the message names the line */
  REPLAY_READ_ERROR, /* the stream failed */
  REPLAY_NO_MEMORY,  /* out of host memory */
  REPLAY_BAD_MANAGER /* the manager asked for is not in the log, or the log has none */
} replay_status;

/* The room a message needs: quoted fields are cut to REPLAY_QUOTE_MAX
 * input bytes (4 output bytes each at most). */
#define REPLAY_QUOTE_MAX 64
#define REPLAY_MSG_MAX 1536

typedef struct replay_event {
  uint64_t size;   /* for a free: the size of the allocation it frees */
  uint32_t slot;   /* the allocation, numbered in trace order */
  uint16_t stream; /* index into the trace's streams */
  uint8_t is_free;
  uint8_t thread;  /* index into the trace's threads */
} replay_event;

typedef struct replay_manager_count {
  uint32_t id;
  size_t rows;
} replay_manager_count;

typedef struct replay_trace {
  const char *path;                  /* as given, for opening; not for printing */
  char *shown;                       /* the path escaped, for every message */
  replay_event *ev;
  size_t n, cap;
  size_t slots;                      /* allocations replayed */
  uint64_t stream_ids[REPLAY_MAX_STREAMS]; /* the trace's stream values, by index */
  size_t streams;
  uint64_t thread_ids[REPLAY_MAX_THREADS]; /* the Thread column's values, by index (see thread_index) */
  size_t threads;
  size_t lines;
  size_t allocs, frees;
  size_t alloc_failures;             /* `allocate failure` lines, skipped */
  size_t unknown_frees;              /* frees of a pointer not live: skipped */
  size_t null_allocs;                /* allocations of size 0 or at 0: skipped */
  size_t reallocated;                /* allocations of a pointer still live (its free is missing) */
  size_t free_size_mismatch;         /* frees whose size differs from the allocation's */
  size_t unknown_action_count[REPLAY_MAX_UNKNOWN_ACTIONS + 1];
  char unknown_action[REPLAY_MAX_UNKNOWN_ACTIONS][32]; /* as in the log: escape before printing */
  size_t unknown_actions;
  size_t peak_live, live_at_end, live_count_at_end;
  size_t peak_event;                 /* the event after which live bytes first reach peak_live */
  int has_seq;                       /* a Seq column: replayed in Seq order */
  size_t seq_out_of_order;           /* rows whose Seq is below one earlier in the file */
  size_t seq_duplicates;             /* rows whose Seq another row has too (kept in file order) */
  int has_manager;                   /* a Manager column */
  replay_manager_count *managers;    /* the managers of the log, in the order first replayed */
  size_t nmanagers;
  uint32_t manager;                  /* the manager replayed, with has_manager */
  int manager_chosen;                /* named by --manager */
  size_t other_manager_rows;         /* rows of the other managers, skipped */
  int has_held;                      /* a Held column with figures */
  size_t held_peak;                  /* the highest Held of the manager replayed */
} replay_trace;

/* Called every 4096 lines read, with the lines so far; may be NULL. */
typedef void (*replay_progress_fn)(const replay_trace *t);

/* Reads the log from fp (read to its end, not closed) into *t; `path`
 * names it in messages.  With a Manager column, the rows of manager `want`
 * are replayed (0: the first manager in replay order).  On REPLAY_OK, *t
 * holds the trace (replay_trace_free releases it); otherwise msg holds
 * "PATH:LINE: what" or "PATH: what" (no program name, no newline) and *t
 * holds nothing to free. */
replay_status replay_parse_file(replay_trace *t, FILE *fp, const char *path, uint32_t want,
                                replay_progress_fn progress, char *msg, size_t msgcap);

/* The same from the n bytes at data (no NUL needed after them). */
replay_status replay_parse_bytes(replay_trace *t, const void *data, size_t n, const char *path, uint32_t want,
                                 char *msg, size_t msgcap);

void replay_trace_free(replay_trace *t);

/* Writes s[0..len) into out (cap bytes, NUL-terminated, cut at cap) with
 * every byte outside printable ASCII written as \xNN and a backslash as \\;
 * with more than `limit` bytes, the first `limit` and "...".  Returns the
 * length written. */
size_t replay_escape(char *out, size_t cap, const char *s, size_t len, size_t limit);

/* What replay_parse_dec finds: a number, no number, or a number past 64
 * bits. */
enum { REPLAY_NUMBER = 0, REPLAY_NOT_NUMBER = -1, REPLAY_TOO_LARGE = -2 };

/* A whole decimal number: digits and nothing else, at most UINT64_MAX.
 * REPLAY_NUMBER, REPLAY_NOT_NUMBER or REPLAY_TOO_LARGE. */
int replay_parse_dec(const char *s, uint64_t *v);

#endif
