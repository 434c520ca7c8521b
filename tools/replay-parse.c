/* replay-parse.c: owns cuemm-replay's reading of an allocation log: the CSV
 * as RMM's logging_resource_adaptor and cuemm (CUEMM_LOG) write it, its
 * columns found by name, rows put in Seq order and one manager's chosen,
 * pointers resolved to numbered allocations and streams to indices; and the
 * escaping of every byte of a log that a message quotes.
 *
 * The log is anyone's file, so each failure returns with a message instead
 * of ending the program, and frees what it built: the fuzz target
 * (tests/fuzz/fuzz-replay.c) feeds it arbitrary bytes.  A quoted field is
 * escaped and cut short, since a log's bytes reach a terminal through the
 * message (a header holding ESC [2J would clear the screen).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "replay-parse.h"

/* The columns the replay knows, found in the header by name.  The first
 * six are RMM's and required; the others are cuemm's own (see cuemm.h)
 * and optional.  Columns of other names are ignored. */
enum { COL_THREAD, COL_TIME, COL_ACTION, COL_POINTER, COL_SIZE, COL_STREAM, COL_SEQ, COL_MANAGER, COL_HELD, NCOLS };
#define NREQUIRED 6
#define MAX_FIELDS 64

static const char *const col_name[NCOLS] = { "Thread", "Time", "Action", "Pointer", "Size",
                                             "Stream", "Seq", "Manager", "Held" };

/* One row of the log as read, before the rows are put in order. */
enum { ROW_ALLOC, ROW_FREE, ROW_FAILURE, ROW_UNKNOWN /* + the index of its name */ };
typedef struct row {
  uint64_t seq, ptr, size, stream, held, thread;
  size_t line;
  uint32_t manager;
  uint8_t action;
  uint8_t has_held;
} row;

/* A thread's key: its number, or for a Thread field that is no decimal
 * number (loggers write what they like there) a hash of its text; only
 * equality matters. */
static uint64_t thread_key(const char *field)
{
  uint64_t v;
  if (replay_parse_dec(field, &v) == REPLAY_NUMBER)
    return v;
  v = UINT64_C(0xcbf29ce484222325);
  for (const unsigned char *c = (const unsigned char *)field; *c; c++)
    v = (v ^ *c) * UINT64_C(0x100000001b3);
  return v;
}

/* ---- escaping --------------------------------------------------------------- */

size_t replay_escape(char *out, size_t cap, const char *s, size_t len, size_t limit)
{
  static const char hex[] = "0123456789abcdef";
  size_t o = 0;
  if (cap == 0)
    return 0;
  size_t n = len > limit ? limit : len;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    char e[5];
    size_t k = 0;
    if (c == '\\')
      e[k++] = '\\', e[k++] = '\\';
    else if (c >= 0x20 && c < 0x7f)
      e[k++] = (char)c;
    else
      e[k++] = '\\', e[k++] = 'x', e[k++] = hex[c >> 4], e[k++] = hex[c & 15];
    if (o + k >= cap)
      break; /* a sequence is written whole or not at all */
    memcpy(out + o, e, k);
    o += k;
  }
  if (len > limit && o + 3 < cap) {
    memcpy(out + o, "...", 3);
    o += 3;
  }
  out[o] = '\0';
  return o;
}

/* ---- numbers ---------------------------------------------------------------- */

/* Hex with or without 0x: digits and nothing else, at most 64 bits once
 * leading zeros are dropped. */
static int parse_hex(const char *s, uint64_t *v)
{
  if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
    s += 2;
  size_t n = strlen(s);
  if (n == 0 || strspn(s, "0123456789abcdefABCDEF") != n)
    return REPLAY_NOT_NUMBER;
  while (n > 1 && *s == '0') {
    s++;
    n--;
  }
  if (n > 16)
    return REPLAY_TOO_LARGE;
  *v = strtoull(s, NULL, 16);
  return REPLAY_NUMBER;
}

int replay_parse_dec(const char *s, uint64_t *v)
{
  size_t n = strlen(s);
  if (n == 0 || strspn(s, "0123456789") != n)
    return REPLAY_NOT_NUMBER;
  errno = 0;
  *v = strtoull(s, NULL, 10);
  return errno == ERANGE ? REPLAY_TOO_LARGE : REPLAY_NUMBER;
}

/* ---- the parser's state ------------------------------------------------------ */

/* Where lines come from: a stream, or bytes in memory. */
typedef struct reader {
  FILE *fp;
  const char *data;
  size_t n, pos;
  char *line;
  size_t cap;
} reader;

typedef struct parser {
  replay_trace *t;
  char *msg;
  size_t msgcap;
  replay_progress_fn progress;
  row *rows;
  size_t nrows, caprows;
  int header, col[NCOLS], need;
  uint64_t max_seq;
} parser;

/* The next line into r->line (its newline kept), and its length; -1 at
 * the end or on a read error (ferror tells), -2 out of memory. */
static ssize_t next_line(reader *r)
{
  if (r->fp) {
    errno = 0;
    ssize_t len = getline(&r->line, &r->cap, r->fp);
    return len < 0 && errno == ENOMEM ? -2 : len;
  }
  if (r->pos >= r->n)
    return -1;
  const char *start = r->data + r->pos, *nl = memchr(start, '\n', r->n - r->pos);
  size_t len = nl ? (size_t)(nl - start) + 1 : r->n - r->pos;
  if (len + 1 > r->cap) {
    char *more = realloc(r->line, len + 1);
    if (!more)
      return -2;
    r->line = more, r->cap = len + 1;
  }
  memcpy(r->line, start, len);
  r->line[len] = '\0';
  r->pos += len;
  return (ssize_t)len;
}

/* Writes "PATH: " and the message; returns st. */
static __attribute__((format(printf, 3, 4))) replay_status say(parser *p, replay_status st, const char *fmt, ...)
{
  if (!p->msg || !p->msgcap)
    return st;
  int n = snprintf(p->msg, p->msgcap, "%s: ", p->t->shown ? p->t->shown : "(log)");
  if (n < 0 || (size_t)n >= p->msgcap)
    return st;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p->msg + n, p->msgcap - (size_t)n, fmt, ap);
  va_end(ap);
  return st;
}

/* A data error at line `line`: "PATH:LINE: what 'field'", the field
 * escaped (NULL: none). */
static replay_status fail_at(parser *p, size_t line, const char *what, const char *field)
{
  char q[REPLAY_QUOTE_MAX * 4 + 8] = "";
  if (field)
    replay_escape(q, sizeof q, field, strlen(field), REPLAY_QUOTE_MAX);
  if (p->msg && p->msgcap)
    snprintf(p->msg, p->msgcap, "%s:%zu: %s%s%s%s", p->t->shown, line, what, field ? " '" : "", q,
             field ? "'" : "");
  return REPLAY_BAD_LOG;
}

static replay_status fail(parser *p, const char *what, const char *field)
{
  return fail_at(p, p->t->lines, what, field);
}

/* A field that parse_hex or replay_parse_dec refused: what it is not, or
 * that it is too large (a number past its field is said as such, not as a
 * malformed field). */
static replay_status number_fail(parser *p, int why, const char *name, const char *expected, const char *most,
                                 const char *field)
{
  char what[160];
  if (why == REPLAY_TOO_LARGE)
    snprintf(what, sizeof what, "%s is too large (at most %s)", name, most);
  else
    snprintf(what, sizeof what, "%s is not %s", name, expected);
  return fail(p, what, field);
}

static replay_status no_memory(parser *p)
{
  return say(p, REPLAY_NO_MEMORY, "out of host memory");
}

/* ---- lines ---------------------------------------------------------------------- */

/* Splits line in place at commas; returns the number of fields (at most max;
 * the last keeps any commas past it). */
static int split(char *line, char **f, int max)
{
  int n = 0;
  for (char *p = line; n < max;) {
    f[n++] = p;
    p = strchr(p, ',');
    if (!p)
      break;
    *p++ = '\0';
  }
  return n;
}

/* Finds the columns by name.  p->col[k] = the field index of column k, or -1. */
static replay_status parse_header(parser *p, char **f, int nf)
{
  for (int k = 0; k < NCOLS; k++)
    p->col[k] = -1;
  for (int i = 0; i < nf; i++)
    for (int k = 0; k < NCOLS; k++)
      if (strcmp(f[i], col_name[k]) == 0) {
        if (p->col[k] >= 0)
          return fail(p, "the header names a column twice:", col_name[k]);
        p->col[k] = i;
      }
  for (int k = 0; k < NREQUIRED; k++)
    if (p->col[k] < 0) {
      /* The header as found: split's NULs made commas again. */
      char *end = f[nf - 1] + strlen(f[nf - 1]);
      for (char *c = f[0]; c < end; c++)
        if (*c == '\0')
          *c = ',';
      char found[4 * 256 + 8];
      replay_escape(found, sizeof found, f[0], (size_t)(end - f[0]), 256);
      if (p->msg && p->msgcap)
        snprintf(p->msg, p->msgcap, "%s:%zu: not an RMM log: the header lacks the column '%s' (it needs "
                 "Thread,Time,Action,Pointer,Size,Stream); found '%s'", p->t->shown, p->t->lines, col_name[k], found);
      return REPLAY_BAD_LOG;
    }
  p->need = 0;
  for (int k = 0; k < NCOLS; k++)
    if (p->col[k] + 1 > p->need)
      p->need = p->col[k] + 1;
  p->t->has_seq = p->col[COL_SEQ] >= 0;
  p->t->has_manager = p->col[COL_MANAGER] >= 0;
  p->header = 1;
  return REPLAY_OK;
}

/* The code of an action no replay knows: ROW_UNKNOWN + the index of its
 * name (the last index counts all names past REPLAY_MAX_UNKNOWN_ACTIONS). */
static uint8_t unknown_action(replay_trace *t, const char *a)
{
  /* Names are kept to 31 bytes: longer ones that agree that far are one. */
  char name[sizeof t->unknown_action[0]];
  snprintf(name, sizeof name, "%s", a);
  size_t i;
  for (i = 0; i < t->unknown_actions; i++)
    if (strcmp(t->unknown_action[i], name) == 0)
      break;
  if (i == t->unknown_actions && i < REPLAY_MAX_UNKNOWN_ACTIONS) {
    memcpy(t->unknown_action[i], name, sizeof name);
    t->unknown_actions++;
  }
  return (uint8_t)(ROW_UNKNOWN + i);
}

/* One line of the log, its newline taken off. */
static replay_status parse_line(parser *p, char *line, size_t len)
{
  replay_trace *t = p->t;
  char *text = line;
  if (t->lines == 1 && len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0) /* a byte-order mark */
    text += 3;
  if (t->lines == 1 && len >= 2 && (unsigned char)line[0] == 0x1f && (unsigned char)line[1] == 0x8b)
    return fail(p, "this log is gzip-compressed: gunzip it first, or give it on standard input "
                "(zcat LOG.gz | cuemm-replay -)", NULL);
  if (memchr(line, '\0', len))
    return fail(p, "a NUL byte in the line: not a CSV log", NULL);
  if (*text == '\0')
    return REPLAY_OK;
  char *f[MAX_FIELDS];
  int nf = split(text, f, MAX_FIELDS);
  if (!p->header)
    return parse_header(p, f, nf);
  const int *col = p->col;
  if (nf < p->need) {
    char what[160];
    int k = 0;
    while (col[k] < nf)
      k++;
    snprintf(what, sizeof what, "%d columns, fewer than the header's: its column %s is column %d", nf,
             col_name[k], col[k] + 1);
    return fail(p, what, NULL);
  }
  row r = { .line = t->lines };
  const char *action = f[col[COL_ACTION]];
  if (strcmp(action, "allocate") == 0)
    r.action = ROW_ALLOC;
  else if (strcmp(action, "free") == 0)
    r.action = ROW_FREE;
  else if (strcmp(action, "allocate failure") == 0)
    r.action = ROW_FAILURE;
  else
    r.action = unknown_action(t, action);
  int why;
  if (t->has_seq) {
    if ((why = replay_parse_dec(f[col[COL_SEQ]], &r.seq)) != REPLAY_NUMBER)
      return number_fail(p, why, "Seq", "a decimal number", "18446744073709551615", f[col[COL_SEQ]]);
    if (r.seq < p->max_seq)
      t->seq_out_of_order++;
    else
      p->max_seq = r.seq;
  }
  if (t->has_manager) {
    uint64_t id;
    if ((why = replay_parse_dec(f[col[COL_MANAGER]], &id)) == REPLAY_NUMBER && id > UINT32_MAX)
      why = REPLAY_TOO_LARGE;
    if (why != REPLAY_NUMBER)
      return number_fail(p, why, "Manager", "a manager's number", "4294967295", f[col[COL_MANAGER]]);
    r.manager = (uint32_t)id;
  }
  if (r.action == ROW_ALLOC || r.action == ROW_FREE) {
    r.thread = thread_key(f[col[COL_THREAD]]);
    if ((why = parse_hex(f[col[COL_POINTER]], &r.ptr)) != REPLAY_NUMBER)
      return number_fail(p, why, "Pointer", "hex", "0xffffffffffffffff", f[col[COL_POINTER]]);
    if ((why = replay_parse_dec(f[col[COL_SIZE]], &r.size)) != REPLAY_NUMBER)
      return number_fail(p, why, "Size", "a decimal number of bytes", "18446744073709551615 bytes",
                         f[col[COL_SIZE]]);
    if ((why = parse_hex(f[col[COL_STREAM]], &r.stream)) != REPLAY_NUMBER)
      return number_fail(p, why, "Stream", "hex", "0xffffffffffffffff", f[col[COL_STREAM]]);
    if (col[COL_HELD] >= 0 && f[col[COL_HELD]][0]) {
      if ((why = replay_parse_dec(f[col[COL_HELD]], &r.held)) != REPLAY_NUMBER)
        return number_fail(p, why, "Held", "a decimal number of bytes", "18446744073709551615 bytes",
                           f[col[COL_HELD]]);
      r.has_held = 1;
    }
  }
  if (p->nrows == p->caprows) {
    size_t cap = p->caprows ? p->caprows * 2 : 4096;
    row *more = cap <= SIZE_MAX / sizeof *more ? realloc(p->rows, cap * sizeof *more) : NULL;
    if (!more)
      return no_memory(p);
    p->rows = more, p->caprows = cap;
  }
  p->rows[p->nrows++] = r;
  return REPLAY_OK;
}

/* Reads the rows of the log, in file order. */
static replay_status read_rows(parser *p, reader *rd)
{
  replay_trace *t = p->t;
  ssize_t len;
  while ((len = next_line(rd)) >= 0) {
    t->lines++;
    if ((t->lines & 4095) == 0 && p->progress)
      p->progress(t);
    char *line = rd->line;
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
      line[--len] = '\0';
    replay_status st = parse_line(p, line, (size_t)len);
    if (st != REPLAY_OK)
      return st;
  }
  if (len == -2)
    return no_memory(p);
  if (rd->fp && ferror(rd->fp))
    return say(p, REPLAY_READ_ERROR, "read error: %s", strerror(errno ? errno : EIO));
  if (!p->header)
    return say(p, REPLAY_BAD_LOG, "empty: no header line");
  return REPLAY_OK;
}

/* ---- the trace --------------------------------------------------------------- */

/* The map from trace pointers to live slots: open addressing, deletions by
 * backward shift so probes stay short. */
typedef struct ptrmap {
  uint64_t *key; /* 0: empty (pointer 0 is never live) */
  uint32_t *slot;
  uint64_t *size;
  size_t cap, n;
} ptrmap;

static size_t ptr_hash(uint64_t k, size_t cap)
{
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return (size_t)k & (cap - 1);
}

static void ptrmap_free(ptrmap *m)
{
  free(m->key), free(m->slot), free(m->size);
}

/* Doubles the table; -1 (the table as it was) out of memory. */
static int ptrmap_grow(ptrmap *m)
{
  ptrmap old = *m, nm = { 0 };
  nm.cap = old.cap ? old.cap * 2 : 1024;
  nm.key = calloc(nm.cap, sizeof *nm.key);
  nm.slot = calloc(nm.cap, sizeof *nm.slot);
  nm.size = calloc(nm.cap, sizeof *nm.size);
  if (!nm.key || !nm.slot || !nm.size) {
    ptrmap_free(&nm);
    return -1;
  }
  for (size_t i = 0; i < old.cap; i++)
    if (old.key[i]) {
      size_t j = ptr_hash(old.key[i], nm.cap);
      while (nm.key[j])
        j = (j + 1) & (nm.cap - 1);
      nm.key[j] = old.key[i], nm.slot[j] = old.slot[i], nm.size[j] = old.size[i];
      nm.n++;
    }
  ptrmap_free(&old);
  *m = nm;
  return 0;
}

/* The index holding k, or the empty index where it would go. */
static size_t ptrmap_find(const ptrmap *m, uint64_t k)
{
  size_t j = ptr_hash(k, m->cap);
  while (m->key[j] && m->key[j] != k)
    j = (j + 1) & (m->cap - 1);
  return j;
}

static void ptrmap_remove(ptrmap *m, size_t i)
{
  size_t mask = m->cap - 1;
  m->key[i] = 0;
  m->n--;
  for (size_t j = (i + 1) & mask; m->key[j]; j = (j + 1) & mask) {
    size_t home = ptr_hash(m->key[j], m->cap);
    /* Move j back into the hole unless its home lies cyclically in (i, j]. */
    if (((j - home) & mask) >= ((j - i) & mask)) {
      m->key[i] = m->key[j], m->slot[i] = m->slot[j], m->size[i] = m->size[j];
      m->key[j] = 0;
      i = j;
    }
  }
}

static int trace_push(replay_trace *t, replay_event e)
{
  if (t->n == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 4096;
    replay_event *more = cap <= SIZE_MAX / sizeof *more ? realloc(t->ev, cap * sizeof *more) : NULL;
    if (!more)
      return -1;
    t->ev = more, t->cap = cap;
  }
  t->ev[t->n++] = e;
  return 0;
}

/* The index of thread `id`, added if new; past REPLAY_MAX_THREADS a new
 * thread shares the index of thread (id mod REPLAY_MAX_THREADS), so that a
 * log of a thread per request still replays (on at most that many). */
static int thread_index(replay_trace *t, uint64_t id)
{
  for (size_t i = 0; i < t->threads; i++)
    if (t->thread_ids[i] == id)
      return (int)i;
  if (t->threads == REPLAY_MAX_THREADS)
    return (int)(id % REPLAY_MAX_THREADS);
  t->thread_ids[t->threads] = id;
  return (int)t->threads++;
}

/* The index of stream `id`, added if new; -1 past REPLAY_MAX_STREAMS. */
static int stream_index(replay_trace *t, uint64_t id)
{
  if (id == 1) /* cudaStreamLegacy is the default stream by another name */
    id = 0;
  for (size_t i = 0; i < t->streams; i++)
    if (t->stream_ids[i] == id)
      return (int)i;
  if (t->streams == REPLAY_MAX_STREAMS)
    return -1;
  t->stream_ids[t->streams] = id;
  return (int)t->streams++;
}

static int manager_index(const replay_trace *t, uint32_t id)
{
  for (size_t i = 0; i < t->nmanagers; i++)
    if (t->managers[i].id == id)
      return (int)i;
  return -1;
}

/* Rows in Seq order; rows of one Seq keep their order in the file. */
static int cmp_row_seq(const void *a, const void *b)
{
  const row *x = a, *y = b;
  if (x->seq != y->seq)
    return x->seq < y->seq ? -1 : 1;
  return x->line < y->line ? -1 : x->line > y->line;
}

/* Counts the rows of each manager and picks the one replayed. */
static replay_status choose_manager(parser *p, uint32_t want)
{
  replay_trace *t = p->t;
  if (!t->has_manager) {
    if (want)
      return say(p, REPLAY_BAD_MANAGER, "--manager %" PRIu32 ": the log has no Manager column", want);
    return REPLAY_OK;
  }
  for (size_t i = 0; i < p->nrows; i++) {
    int k = manager_index(t, p->rows[i].manager);
    if (k < 0) {
      replay_manager_count *more = realloc(t->managers, (t->nmanagers + 1) * sizeof *more);
      if (!more)
        return no_memory(p);
      t->managers = more;
      t->managers[t->nmanagers] = (replay_manager_count){ .id = p->rows[i].manager };
      k = (int)t->nmanagers++;
    }
    t->managers[k].rows++;
  }
  t->manager_chosen = want != 0;
  t->manager = want ? want : t->nmanagers ? t->managers[0].id : 0;
  if (want && manager_index(t, want) < 0) {
    char list[256] = "none";
    size_t used = 0;
    for (size_t i = 0; i < t->nmanagers && used < sizeof list; i++)
      used += (size_t)snprintf(list + used, sizeof list - used, "%s%" PRIu32, i ? ", " : "", t->managers[i].id);
    return say(p, REPLAY_BAD_MANAGER, "no rows of manager %" PRIu32 " (the log's managers: %s)", want, list);
  }
  return REPLAY_OK;
}

/* Turns the rows, in replay order, into events. */
static replay_status build_events(parser *p)
{
  replay_trace *t = p->t;
  ptrmap live = { 0 };
  replay_status st = REPLAY_OK;
  if (ptrmap_grow(&live) != 0)
    return no_memory(p);
  uint64_t cur = 0;
  for (size_t k = 0; k < p->nrows && st == REPLAY_OK; k++) {
    const row *r = &p->rows[k];
    if (t->has_manager && r->manager != t->manager) {
      t->other_manager_rows++;
      continue;
    }
    if (r->action == ROW_FAILURE) {
      t->alloc_failures++;
      continue;
    }
    if (r->action >= ROW_UNKNOWN) {
      t->unknown_action_count[r->action - ROW_UNKNOWN]++;
      continue;
    }
    if (r->has_held) {
      t->has_held = 1;
      if (r->held > t->held_peak)
        t->held_peak = r->held;
    }
    uint64_t ptr = r->ptr, size = r->size;
    int s = stream_index(t, r->stream);
    if (s < 0) {
      st = fail_at(p, r->line, "more distinct streams than cuemm-replay replays (256)", NULL);
      break;
    }
    if (r->action == ROW_ALLOC) {
      t->allocs++;
      if (size == 0 || ptr == 0) {
        t->null_allocs++;
        continue;
      }
      if (live.n * 2 >= live.cap && ptrmap_grow(&live) != 0) {
        st = no_memory(p);
        break;
      }
      size_t i = ptrmap_find(&live, ptr);
      if (live.key[i]) { /* its free is missing: it stays live to the end */
        t->reallocated++;
        ptrmap_remove(&live, i);
        i = ptrmap_find(&live, ptr);
      }
      if (t->slots == UINT32_MAX) {
        st = fail_at(p, r->line, "more allocations than cuemm-replay replays", NULL);
        break;
      }
      /* Live bytes that no address space holds: not a log of real memory
       * (cur counts the allocations whose free is missing too). */
      if (size > UINT64_MAX - cur) {
        st = fail_at(p, r->line, "the live allocations add up past 2^64 bytes", NULL);
        break;
      }
      live.key[i] = ptr, live.slot[i] = (uint32_t)t->slots, live.size[i] = size;
      live.n++;
      if (trace_push(t, (replay_event){ .size = size, .slot = (uint32_t)t->slots++, .stream = (uint16_t)s,
                                        .thread = (uint8_t)thread_index(t, r->thread) }) != 0) {
        st = no_memory(p);
        break;
      }
      cur += size;
      if (cur > t->peak_live) {
        t->peak_live = cur;
        t->peak_event = t->n - 1;
      }
    } else {
      t->frees++;
      size_t i = ptrmap_find(&live, ptr);
      if (ptr == 0 || !live.key[i]) {
        t->unknown_frees++;
        continue;
      }
      if (live.size[i] != size)
        t->free_size_mismatch++;
      if (trace_push(t, (replay_event){ .size = live.size[i], .slot = live.slot[i], .stream = (uint16_t)s,
                                        .is_free = 1, .thread = (uint8_t)thread_index(t, r->thread) }) != 0) {
        st = no_memory(p);
        break;
      }
      cur -= live.size[i];
      ptrmap_remove(&live, i);
    }
  }
  t->live_count_at_end = live.n;
  ptrmap_free(&live);
  if (st != REPLAY_OK)
    return st;
  /* What stays live at the end, counting allocations whose free is missing. */
  t->live_at_end = cur;
  if (t->reallocated) {
    unsigned char *seen = calloc(t->slots ? t->slots : 1, 1);
    if (!seen)
      return no_memory(p);
    size_t n = 0;
    for (size_t i = 0; i < t->n; i++)
      seen[t->ev[i].slot] ^= 1;
    for (size_t i = 0; i < t->slots; i++)
      n += seen[i];
    t->live_count_at_end = n;
    free(seen);
  }
  return REPLAY_OK;
}

void replay_trace_free(replay_trace *t)
{
  free(t->ev), free(t->managers), free(t->shown);
  t->ev = NULL, t->managers = NULL, t->shown = NULL;
}

static replay_status parse(replay_trace *t, reader *rd, const char *path, uint32_t want, replay_progress_fn progress,
                           char *msg, size_t msgcap)
{
  memset(t, 0, sizeof *t);
  t->path = path;
  parser p = { .t = t, .msg = msg, .msgcap = msgcap, .progress = progress };
  if (msg && msgcap)
    msg[0] = '\0';
  size_t plen = strlen(path);
  replay_status st;
  if (plen > (SIZE_MAX - 1) / 4 || !(t->shown = malloc(plen * 4 + 1))) {
    st = no_memory(&p);
  } else {
    replay_escape(t->shown, plen * 4 + 1, path, plen, plen);
    st = read_rows(&p, rd);
  }
  free(rd->line);
  if (st == REPLAY_OK && t->has_seq) {
    if (p.nrows > 1) /* a header alone has no rows to sort, and qsort no NULL */
      qsort(p.rows, p.nrows, sizeof *p.rows, cmp_row_seq);
    for (size_t i = 1; i < p.nrows; i++)
      t->seq_duplicates += p.rows[i].seq == p.rows[i - 1].seq;
  }
  if (st == REPLAY_OK)
    st = choose_manager(&p, want);
  if (st == REPLAY_OK)
    st = build_events(&p);
  free(p.rows);
  if (st != REPLAY_OK)
    replay_trace_free(t);
  return st;
}

replay_status replay_parse_file(replay_trace *t, FILE *fp, const char *path, uint32_t want,
                                replay_progress_fn progress, char *msg, size_t msgcap)
{
  reader rd = { .fp = fp };
  return parse(t, &rd, path, want, progress, msg, msgcap);
}

replay_status replay_parse_bytes(replay_trace *t, const void *data, size_t n, const char *path, uint32_t want,
                                 char *msg, size_t msgcap)
{
  reader rd = { .data = data, .n = n };
  return parse(t, &rd, path, want, NULL, msg, msgcap);
}
