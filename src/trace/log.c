/* log.c: owns the event log (CUEMM_LOG, log.h): the file, the rows' format,
 * and the buffers that keep logging cheap.
 *
 * Rows are formatted by hand into a buffer of the calling thread (no stdio,
 * no lock shared with other threads on the way: formatting one with
 * snprintf would cost more than the allocation it records) and reach the
 * file a buffer at a time.  The price is order: with several threads, the
 * file is in order only within each thread, so every row carries its place
 * in the process's order (Seq) and the replay tool sorts by it.
 *
 * The buffers are listed so that cuemm_destroy and the process's exit can
 * write out the rows of threads that are still running; each buffer has a
 * lock of its own for that, taken by its thread for every row (uncontended
 * but for those moments).  A file that cannot be written stops the log:
 * the program's allocations matter more than their record, so a full disk
 * costs rows, counted and announced once, never an allocation.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/internal.h"
#include "trace/log.h"

#define LOG_BUFFER (64 * 1024)
#define ROW_MAX 256    /* a row without its notes fits in this */
#define NOTES_MAX 240  /* the Events column of one row, at most */

static const char header[] = "Thread,Time,Action,Pointer,Size,Stream,Seq,Manager,Call,Held,Events\n";

/* Every row takes a number from `seq`, so that line is written by every
 * thread; what each row only reads (failed) lives on another. */
struct cuemm__log {
  _Alignas(64) _Atomic uint64_t seq;  /* numbers taken */
  _Alignas(64) atomic_int failed;     /* a write failed: the log has stopped */
  char *path;
  int fd;
  cuemm__log *next;
  _Alignas(64) pthread_mutex_t wlock; /* one buffer's write() at a time */
  off_t size;             /* bytes the file holds, every one a whole row (under wlock) */
  _Atomic uint64_t lost;  /* rows that never reached the file */
  _Atomic uint64_t unused;  /* numbers taken for a free that then failed */
};

typedef struct tbuf {
  atomic_flag lock;   /* its thread takes it for every row: a spin lock, as it is all but never contended */
  cuemm__log *log;    /* whose rows `data` holds */
  size_t len;
  uint64_t rows;      /* rows in `data` */
  char tid[24];       /* the thread's id and a comma */
  size_t tidlen;
  time_t sec;         /* the second `hms` shows */
  char hms[9];
  char earlier[NOTES_MAX];  /* notes of calls that wrote no row */
  size_t elen;
  char notes[NOTES_MAX];    /* notes of the call under way */
  size_t nlen;
  struct tbuf *next, *prev;
  char data[LOG_BUFFER];
} tbuf;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;  /* the two lists */
static cuemm__log *g_logs;
static tbuf *g_bufs;
static pthread_key_t g_key;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static _Thread_local tbuf *tls_buf;

/* ---- writing buffers -------------------------------------------------------- */

static inline void buf_lock(tbuf *b)
{
  while (atomic_flag_test_and_set_explicit(&b->lock, memory_order_acquire))
    sched_yield();
}

static inline void buf_unlock(tbuf *b)
{
  atomic_flag_clear_explicit(&b->lock, memory_order_release);
}

/* Writes b's rows to its log.  b's lock held. */
static void buffer_write(tbuf *b)
{
  cuemm__log *log = b->log;
  if (!log || !b->len)
    return;
  int failed = atomic_load_explicit(&log->failed, memory_order_relaxed);
  int err = 0;
  size_t off = 0;
  pthread_mutex_lock(&log->wlock);
  while (!failed && off < b->len) {
    ssize_t k = write(log->fd, b->data + off, b->len - off);
    if (k > 0)
      off += (size_t)k;
    else if (k < 0 && errno == EINTR)
      continue;
    else {
      err = k < 0 ? errno : EIO;
      failed = 1;
    }
  }
  uint64_t kept = b->rows;
  if (failed) {
    /* The file ends with whole rows: a row cut short is taken back, so that
     * what was written stays a log every reader parses. */
    size_t whole = off;
    while (whole && b->data[whole - 1] != '\n')
      whole--;
    if (whole < off && ftruncate(log->fd, log->size + (off_t)whole) == 0)
      off = whole;
    kept = 0;
    for (size_t i = 0; i < off; i++)
      kept += b->data[i] == '\n';
  }
  log->size += (off_t)off;
  pthread_mutex_unlock(&log->wlock);
  if (failed) {
    uint64_t lost = atomic_fetch_add(&log->lost, b->rows - kept) + (b->rows - kept);
    if (err && atomic_exchange(&log->failed, 1) == 0) {
      fprintf(stderr, "cuemm: the event log \"%s\" could not be written (%s); logging stopped, %llu rows lost "
              "so far\n", log->path, strerror(err), (unsigned long long)lost);
      fflush(stderr);
    }
  }
  b->len = 0;
  b->rows = 0;
}

static void write_all(cuemm__log *only)
{
  pthread_mutex_lock(&g_lock);
  for (tbuf *b = g_bufs; b; b = b->next) {
    buf_lock(b);
    if (!only || b->log == only)
      buffer_write(b);
    buf_unlock(b);
  }
  pthread_mutex_unlock(&g_lock);
}

static void at_exit(void)
{
  write_all(NULL);
}

static void thread_exit(void *arg)
{
  tbuf *b = arg;
  pthread_mutex_lock(&g_lock);
  if (b->prev)
    b->prev->next = b->next;
  else
    g_bufs = b->next;
  if (b->next)
    b->next->prev = b->prev;
  pthread_mutex_unlock(&g_lock);
  buf_lock(b);
  buffer_write(b);
  buf_unlock(b);
  if (tls_buf == b)
    tls_buf = NULL;
  free(b);
}

/* fork: the child must not write the rows its parent will write, nor wait
 * on locks held by threads it does not have. */
static void fork_prepare(void)
{
  pthread_mutex_lock(&g_lock);
}

static void fork_parent(void)
{
  pthread_mutex_unlock(&g_lock);
}

static void fork_child(void)
{
  for (tbuf *b = g_bufs; b; b = b->next) {
    atomic_flag_clear(&b->lock);
    b->len = 0;
    b->rows = 0;
  }
  for (cuemm__log *l = g_logs; l; l = l->next)
    pthread_mutex_init(&l->wlock, NULL);
  pthread_mutex_init(&g_lock, NULL);
}

static void once_init(void)
{
  pthread_key_create(&g_key, thread_exit);
  atexit(at_exit);
  pthread_atfork(fork_prepare, fork_parent, fork_child);
}

static tbuf *buffer_get(void)
{
  tbuf *b = tls_buf;
  if (__builtin_expect(b != NULL, 1))
    return b;
  b = calloc(1, sizeof *b);
  if (!b)
    return NULL;
  atomic_flag_clear(&b->lock);
  int n = snprintf(b->tid, sizeof b->tid, "%ld,", (long)syscall(SYS_gettid));
  b->tidlen = n > 0 ? (size_t)n : 0;
  b->sec = (time_t)-1;
  pthread_setspecific(g_key, b);
  pthread_mutex_lock(&g_lock);
  b->next = g_bufs;
  if (g_bufs)
    g_bufs->prev = b;
  g_bufs = b;
  pthread_mutex_unlock(&g_lock);
  tls_buf = b;
  return b;
}

/* ---- opening ---------------------------------------------------------------- */

/* path with "%p" replaced by the process id, "%%" by "%". */
static char *expand(const char *path)
{
  size_t cap = strlen(path) + 64, n = 0;
  char *out = malloc(cap);
  if (!out)
    return NULL;
  for (const char *s = path; *s; s++) {
    if (n + 24 >= cap) {
      char *bigger = realloc(out, cap *= 2);
      if (!bigger) {
        free(out);
        return NULL;
      }
      out = bigger;
    }
    if (s[0] == '%' && s[1] == 'p') {
      n += (size_t)snprintf(out + n, cap - n, "%ld", (long)getpid());
      s++;
    } else if (s[0] == '%' && s[1] == '%') {
      out[n++] = '%';
      s++;
    } else
      out[n++] = *s;
  }
  out[n] = 0;
  return out;
}

CUresult cuemm__log_open(const char *path, cuemm__log **out)
{
  pthread_once(&g_once, once_init);
  char *full = expand(path);
  if (!full)
    return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "CUEMM_LOG: no host memory for the log's name");
  pthread_mutex_lock(&g_lock);
  for (cuemm__log *l = g_logs; l; l = l->next)
    if (strcmp(l->path, full) == 0) {
      pthread_mutex_unlock(&g_lock);
      free(full);
      *out = l;
      return CUDA_SUCCESS;
    }
  CUresult r = CUDA_SUCCESS;
  cuemm__log *l = calloc(1, sizeof *l);
  int fd = -1;
  if (!l) {
    r = cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "CUEMM_LOG: no host memory for the log \"%s\"", full);
    goto fail;
  }
  fd = open(full, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    r = cuemm__error(CUDA_ERROR_INVALID_VALUE, "CUEMM_LOG: cannot open the event log \"%s\" for writing: %s", full,
                     strerror(errno));
    goto fail;
  }
  for (size_t off = 0; off < sizeof header - 1;) {
    ssize_t k = write(fd, header + off, sizeof header - 1 - off);
    if (k > 0)
      off += (size_t)k;
    else if (!(k < 0 && errno == EINTR)) {
      r = cuemm__error(CUDA_ERROR_INVALID_VALUE, "CUEMM_LOG: cannot write the event log \"%s\": %s", full,
                       k < 0 ? strerror(errno) : "nothing written");
      goto fail;
    }
  }
  l->path = full;
  l->fd = fd;
  l->size = (off_t)(sizeof header - 1);
  pthread_mutex_init(&l->wlock, NULL);
  l->next = g_logs;
  g_logs = l;
  pthread_mutex_unlock(&g_lock);
  *out = l;
  return CUDA_SUCCESS;
fail:
  pthread_mutex_unlock(&g_lock);
  if (fd >= 0)
    close(fd);
  free(l);
  free(full);
  return r;
}

/* ---- rows ------------------------------------------------------------------ */

static inline char *put_str(char *o, const char *s)
{
  while (*s)
    *o++ = *s++;
  return o;
}

static const char two_digits[] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

/* Two digits at a time: rows are mostly numbers, and this is their cost. */
static inline char *put_dec(char *o, uint64_t v)
{
  char t[20];
  int n = 20;
  while (v >= 100) {
    unsigned d = (unsigned)(v % 100) * 2;
    v /= 100;
    t[--n] = two_digits[d + 1];
    t[--n] = two_digits[d];
  }
  if (v >= 10) {
    t[--n] = two_digits[v * 2 + 1];
    t[--n] = two_digits[v * 2];
  } else
    t[--n] = (char)('0' + v);
  memcpy(o, t + n, (size_t)(20 - n));
  return o + (20 - n);
}

static inline char *put_hex(char *o, uint64_t v)
{
  static const char digits[] = "0123456789abcdef";
  int n = v ? (67 - __builtin_clzll(v)) / 4 : 1;
  *o++ = '0';
  *o++ = 'x';
  for (int i = n - 1; i >= 0; i--, v >>= 4)
    o[i] = digits[v & 15];
  return o + n;
}

/* HH:MM:SS.uuuuuu, local time, as RMM's logger writes it. */
static char *put_time(tbuf *b, char *o)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (ts.tv_sec != b->sec) {
    struct tm tm;
    localtime_r(&ts.tv_sec, &tm);
    int f[3] = { tm.tm_hour, tm.tm_min, tm.tm_sec };
    for (int i = 0; i < 3; i++) {
      b->hms[3 * i] = (char)('0' + f[i] / 10 % 10);
      b->hms[3 * i + 1] = (char)('0' + f[i] % 10);
      if (i < 2)
        b->hms[3 * i + 2] = ':';
    }
    b->sec = ts.tv_sec;
  }
  memcpy(o, b->hms, 8);
  o += 8;
  *o++ = '.';
  long us = ts.tv_nsec / 1000;
  for (int d = 5; d >= 0; d--) {
    o[d] = (char)('0' + us % 10);
    us /= 10;
  }
  return o + 6;
}

static const char *const action_names[] = { "allocate", "free", "allocate failure" };

uint64_t cuemm__log_take(cuemm__log *log)
{
  return atomic_fetch_add_explicit(&log->seq, 1, memory_order_relaxed);
}

void cuemm__log_untake(cuemm__log *log)
{
  atomic_fetch_add(&log->unused, 1);
}

void cuemm__log_row(cuemm__log *log, uint64_t seq, cuemm__log_action action, uintptr_t ptr, size_t size,
                    CUstream stream, unsigned manager, const char *call, size_t held)
{
  if (seq == CUEMM__LOG_NOW)
    seq = cuemm__log_take(log);
  tbuf *b = buffer_get();
  if (!b || atomic_load_explicit(&log->failed, memory_order_relaxed)) {
    atomic_fetch_add(&log->lost, 1);
    if (b)
      b->nlen = b->elen = 0;
    return;
  }
  buf_lock(b);
  if (b->log != log || b->len + ROW_MAX + 2 * NOTES_MAX > LOG_BUFFER) {
    buffer_write(b);
    b->log = log;
    if (atomic_load_explicit(&log->failed, memory_order_relaxed)) {
      atomic_fetch_add(&log->lost, 1);
      b->nlen = b->elen = 0;
      buf_unlock(b);
      return;
    }
  }
  char *o = b->data + b->len;
  memcpy(o, b->tid, b->tidlen);
  o += b->tidlen;
  o = put_time(b, o);
  *o++ = ',';
  o = put_str(o, action_names[action]);
  *o++ = ',';
  o = put_hex(o, ptr);
  *o++ = ',';
  o = put_dec(o, size);
  *o++ = ',';
  o = put_hex(o, (uint64_t)(uintptr_t)stream);
  *o++ = ',';
  o = put_dec(o, seq);
  *o++ = ',';
  o = put_dec(o, manager);
  *o++ = ',';
  o = put_str(o, call);
  *o++ = ',';
  o = put_dec(o, held);
  *o++ = ',';
  memcpy(o, b->earlier, b->elen);
  o += b->elen;
  if (b->elen && b->nlen)
    *o++ = ' ';
  memcpy(o, b->notes, b->nlen);
  o += b->nlen;
  *o++ = '\n';
  b->elen = b->nlen = 0;
  b->len = (size_t)(o - b->data);
  b->rows++;
  buf_unlock(b);
}

/* Appends one note to `to` (a note that does not fit is left out: the
 * column is bounded, the row must stay one line). */
static void note_add(char *to, size_t *len, const char *prefix, const char *what, size_t n)
{
  char one[96];
  int k = n ? snprintf(one, sizeof one, "%s%s%s=%zu", *len ? " " : "", prefix, what, n)
            : snprintf(one, sizeof one, "%s%s%s", *len ? " " : "", prefix, what);
  if (k <= 0 || *len + (size_t)k > NOTES_MAX)
    return;
  memcpy(to + *len, one, (size_t)k);
  *len += (size_t)k;
}

void cuemm__log_note(cuemm__log *log, const char *what, size_t n)
{
  if (!log)
    return;
  tbuf *b = buffer_get();
  if (b)
    note_add(b->notes, &b->nlen, "", what, n);
}

void cuemm__log_settle(cuemm__log *log)
{
  if (!log)
    return;
  tbuf *b = tls_buf;
  if (!b || !b->nlen)
    return;
  /* Re-add each note with its prefix. */
  char cur[NOTES_MAX + 1];
  memcpy(cur, b->notes, b->nlen);
  cur[b->nlen] = 0;
  b->nlen = 0;
  char *save = NULL;
  for (char *t = strtok_r(cur, " ", &save); t; t = strtok_r(NULL, " ", &save))
    note_add(b->earlier, &b->elen, "earlier:", t, 0);
}

void cuemm__log_flush(cuemm__log *log)
{
  if (log)
    write_all(log);
}

void cuemm__log_counts(const cuemm__log *log, uint64_t *rows, uint64_t *lost)
{
  *rows = log ? atomic_load(&((cuemm__log *)log)->seq) - atomic_load(&((cuemm__log *)log)->unused) : 0;
  *lost = log ? atomic_load(&((cuemm__log *)log)->lost) : 0;
}

const char *cuemm__log_path(const cuemm__log *log)
{
  return log ? log->path : "";
}
