/* test-log.c: the event log (CUEMM_LOG).  A known sequence of calls, read
 * back field by field against RMM's header and cuemm's columns; the notes
 * of growth, flush, release and out-of-memory; rows of several threads
 * (Seq orders them); two managers on one file; "%p"; the rows of a process
 * that exits without destroying its manager, and of one that forks; a file
 * that cannot be opened (cuemm_manager_create fails, saying why) and one that
 * fills up (rows lost and counted, allocations unharmed).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testproc.h"
#include "testutil.h"

#define MIB ((size_t)1 << 20)

static CUcontext ctx;
static char dir[] = "/tmp/test-log.XXXXXX";

typedef struct row {
  char f[12][128];
  int n;
} row;

/* The file's lines after the header, split on commas (at most 512). */
typedef struct logfile {
  char header[256];
  row *rows;
  int n;
} logfile;

static void log_read(logfile *lf, const char *path)
{
  memset(lf, 0, sizeof *lf);
  lf->rows = calloc(20000, sizeof *lf->rows);
  FILE *f = fopen(path, "r");
  if (!f)
    return;
  char line[1024];
  if (fgets(line, sizeof line, f))
    snprintf(lf->header, sizeof lf->header, "%.200s", line);
  while (lf->n < 20000 && fgets(line, sizeof line, f)) {
    row *r = &lf->rows[lf->n++];
    line[strcspn(line, "\n")] = 0;
    char *s = line;
    for (r->n = 0; r->n < 12; r->n++) {
      char *c = strchr(s, ',');
      size_t len = c ? (size_t)(c - s) : strlen(s);
      snprintf(r->f[r->n], sizeof r->f[r->n], "%.*s", (int)len, s);
      if (!c) {
        r->n++;
        break;
      }
      s = c + 1;
    }
  }
  fclose(f);
}

static void log_free(logfile *lf)
{
  free(lf->rows);
}

enum { THREAD, TIME, ACTION, POINTER, SIZE, STREAM, SEQ, MANAGER, CALL, HELD, EVENTS };

static unsigned long long hex(const char *s)
{
  return strncmp(s, "0x", 2) == 0 ? strtoull(s + 2, NULL, 16) : ~0ull;
}

static int time_ok(const char *t)
{
  /* HH:MM:SS.uuuuuu */
  if (strlen(t) != 15 || t[2] != ':' || t[5] != ':' || t[8] != '.')
    return 0;
  for (int i = 0; i < 15; i++)
    if (i != 2 && i != 5 && i != 8 && (t[i] < '0' || t[i] > '9'))
      return 0;
  return 1;
}

static cuemm_config log_config(const char *path, int pool)
{
  cuemm_config c = test_config(1000, 1.0);
  c.log_file = path;
  if (pool) {
    c.pool = CUEMM_POOL_VMM;
    c.pool_reserve = 256 * MIB;
    c.pool_chunk = 32 * MIB;
    c.pool_release_threshold = 0;
    c.pool_release_delay_ms = 0;
  }
  return c;
}

static void test_sequence(void)
{
  char path[256];
  snprintf(path, sizeof path, "%s/seq.csv", dir);
  cuemm_config c = log_config(path, 1);
  cuemm_manager *m = NULL;
  CHECK_CU(cuemm_manager_create(ctx, &c, &m));
  CUstream s;
  CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr a, b, q;
  CHECK_CU(cuemm_allocate(m, 1000, &a));                 /* row 0: grows the pool */
  CHECK_CU(cuemm_allocate_async(m, 4096, s, &b));        /* row 1 */
  CHECK_CU(cuemm_free_async(m, b, s));                /* row 2 */
  CHECK_CU(cuemm_free(m, a));                         /* row 3: pending */
  CHECK_CU(cuemm_flush(m));                           /* no row: its notes go to row 4 */
  CHECK_CU(cuemm_allocate(m, 512 * MIB, &q));            /* row 4: larger than the pool: cuMemAlloc */
  CHECK_CU(cuemm_free(m, q));                         /* row 5 */
  is(cuemm_free(m, q), CUDA_ERROR_INVALID_VALUE, "a double free is refused");
  cuemm_stats st = test_stats(m);
  is(st.log_rows, 6, "six rows made (the refused free makes none)");
  is(st.log_lost, 0, "none lost");
  CHECK_CU(cuemm_destroy(m));
  CHECK_CU(cuStreamDestroy(s));

  logfile lf;
  log_read(&lf, path);
  is_str(lf.header, "Thread,Time,Action,Pointer,Size,Stream,Seq,Manager,Call,Held,Events\n",
         "the header: RMM's six columns, then cuemm's");
  is(lf.n, 6, "six rows in the file after cuemm_destroy");
  if (lf.n != 6) {
    skip(26, "the rows are not there");
    log_free(&lf);
    return;
  }
  row *r = lf.rows;
  char tid[32];
  snprintf(tid, sizeof tid, "%ld", (long)syscall(SYS_gettid));
  int fields = 1, thread = 1, times = 1, seq = 1, mgr = 1;
  for (int i = 0; i < 6; i++) {
    fields &= r[i].n == 11;
    thread &= strcmp(r[i].f[THREAD], tid) == 0;
    times &= time_ok(r[i].f[TIME]);
    seq &= strtoull(r[i].f[SEQ], NULL, 10) == (unsigned long long)i;
    mgr &= strcmp(r[i].f[MANAGER], r[0].f[MANAGER]) == 0 && atoi(r[0].f[MANAGER]) > 0;
  }
  ok(fields, "every row has 11 fields");
  ok(thread, "Thread is the OS thread id (%s)", tid);
  ok(times, "Time is HH:MM:SS.microseconds (%s)", r[0].f[TIME]);
  ok(seq, "Seq numbers the rows 0..5");
  ok(mgr, "Manager is one positive number (%s)", r[0].f[MANAGER]);

  is_str(r[0].f[ACTION], "allocate", "row 0: allocate");
  is(hex(r[0].f[POINTER]), a, "row 0: the pointer returned, 0x-hex");
  is_str(r[0].f[SIZE], "1000", "row 0: the size asked for");
  is_str(r[0].f[STREAM], "0x0", "row 0: stream 0x0 for cuemm_alloc");
  is_str(r[0].f[CALL], "alloc", "row 0: call alloc");
  is_str(r[0].f[EVENTS], "grow=2097152", "row 0: the pool grew by one granule (an empty pool's step)");
  is_str(r[0].f[HELD], "2097152", "row 0: held 2 MiB after it");

  is_str(r[1].f[ACTION], "allocate", "row 1: allocate");
  is(hex(r[1].f[STREAM]), (uintptr_t)s, "row 1: the stream, 0x-hex");
  is_str(r[1].f[CALL], "alloc_async", "row 1: call alloc_async");
  is_str(r[2].f[ACTION], "free", "row 2: free");
  is(hex(r[2].f[POINTER]), b, "row 2: the block freed");
  is_str(r[2].f[SIZE], "4096", "row 2: the size it was allocated with");
  is_str(r[2].f[CALL], "free_async", "row 2: call free_async");
  is_str(r[3].f[SIZE], "1000", "row 3: cuemm_free's size is the allocation's");
  is_str(r[3].f[EVENTS], "", "row 3: a queued free does nothing more");
  like(r[4].f[EVENTS], "earlier:flush=1", "row 4 carries cuemm_flush's notes, marked earlier");
  like(r[4].f[EVENTS], "fallback", "row 4: the request went to cuMemAlloc");
  like(r[4].f[EVENTS], "earlier:release=2097152", "and its release of the pool's chunk, now wholly free");
  is(strtoull(r[4].f[HELD], NULL, 10), 512 * MIB, "row 4: held counts the cuMemAlloc memory (and the chunk is gone)");
  is_str(r[5].f[SIZE], "536870912", "row 5: the free of the large block");
  is_str(r[5].f[EVENTS], "", "row 5: no notes (the free is queued)");
  log_free(&lf);
}

static void test_failure_rows(void)
{
  if (!sim_present) {
    skip(5, SIM_REASON);
    return;
  }
  char path[256];
  snprintf(path, sizeof path, "%s/oom.csv", dir);
  cuemm_config c = log_config(path, 0);
  cuemm_manager *m = NULL;
  CHECK_CU(cuemm_manager_create(ctx, &c, &m));
  sim.fail_from("cuMemAlloc", 1, CUDA_ERROR_OUT_OF_MEMORY);
  CUdeviceptr p = 0;
  is(cuemm_allocate(m, 3 * MIB, &p), CUDA_ERROR_OUT_OF_MEMORY, "an allocation the driver refuses fails");
  sim.fail_clear();
  CHECK_CU(cuemm_destroy(m));
  logfile lf;
  log_read(&lf, path);
  is(lf.n, 1, "one row");
  is_str(lf.rows[0].f[ACTION], "allocate failure", "Action: allocate failure, as RMM writes it");
  ok(strcmp(lf.rows[0].f[POINTER], "0x0") == 0 && strcmp(lf.rows[0].f[SIZE], "3145728") == 0,
     "pointer 0x0, the size asked for");
  like(lf.rows[0].f[EVENTS], "oom-retry", "the note says it was retried after a flush");
  log_free(&lf);
}

#define THREADS 4
#define PAIRS 1000

typedef struct worker {
  cuemm_manager *m;
  long tid;
  int failures;
} worker;

static void *work(void *arg)
{
  worker *w = arg;
  w->tid = (long)syscall(SYS_gettid);
  CUstream s;
  if (cuCtxSetCurrent(ctx) != CUDA_SUCCESS || cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
    w->failures++;
    return NULL;
  }
  for (int i = 0; i < PAIRS; i++) {
    CUdeviceptr p;
    if (cuemm_allocate_async(w->m, 256 + (size_t)i % 7 * 256, s, &p) != CUDA_SUCCESS ||
        cuemm_free_async(w->m, p, s) != CUDA_SUCCESS)
      w->failures++;
  }
  cuStreamSynchronize(s);
  cuemm_stream_release(w->m, s);
  cuStreamDestroy(s);
  return NULL;
}

static void test_threads(void)
{
  char path[256];
  snprintf(path, sizeof path, "%s/threads.csv", dir);
  cuemm_config c = log_config(path, 1);
  cuemm_manager *m = NULL;
  CHECK_CU(cuemm_manager_create(ctx, &c, &m));
  pthread_t t[THREADS];
  worker w[THREADS] = { 0 };
  for (int i = 0; i < THREADS; i++) {
    w[i].m = m;
    pthread_create(&t[i], NULL, work, &w[i]);
  }
  int failures = 0;
  for (int i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    failures += w[i].failures;
  }
  is(failures, 0, "%d threads did %d pairs each", THREADS, PAIRS);
  CHECK_CU(cuemm_destroy(m));
  logfile lf;
  log_read(&lf, path);
  is(lf.n, THREADS * PAIRS * 2, "every row is in the file (the threads' buffers were written when they exited)");
  static unsigned char seen[THREADS * PAIRS * 2];
  memset(seen, 0, sizeof seen);
  int perm = 1, ordered = 1, owners = 1;
  long last_tid = 0;
  unsigned long long last_seq = 0;
  for (int i = 0; i < lf.n; i++) {
    unsigned long long q = strtoull(lf.rows[i].f[SEQ], NULL, 10);
    if (q >= sizeof seen || seen[q]++)
      perm = 0;
    long tid = atol(lf.rows[i].f[THREAD]);
    int known = 0;
    for (int k = 0; k < THREADS; k++)
      known |= tid == w[k].tid;
    owners &= known;
    /* within one thread's run of rows, Seq rises */
    if (tid == last_tid && q <= last_seq)
      ordered = 0;
    last_tid = tid;
    last_seq = q;
  }
  ok(perm, "Seq is a permutation of 0..%d", THREADS * PAIRS * 2 - 1);
  ok(owners, "every row names one of the threads");
  ok(ordered, "each thread's rows are in its order");
  log_free(&lf);
}

static void test_shared_file_and_pid(void)
{
  char path[256], want[256];
  snprintf(path, sizeof path, "%s/pid-%%p.csv", dir);
  snprintf(want, sizeof want, "%s/pid-%ld.csv", dir, (long)getpid());
  cuemm_config c = log_config(path, 0);
  CUdevice dev;
  CHECK_CU(cuCtxGetDevice(&dev));
  CUcontext other;
  CHECK_CU(cuCtxCreate(&other, NULL, 0, dev));
  CHECK_CU(cuCtxSetCurrent(ctx));
  cuemm_manager *m1 = NULL, *m2 = NULL;
  CHECK_CU(cuemm_manager_create(ctx, &c, &m1));
  CHECK_CU(cuemm_manager_create(other, &c, &m2));
  CUdeviceptr p1, p2;
  CHECK_CU(cuemm_allocate(m1, 4096, &p1));
  CHECK_CU(cuemm_allocate(m2, 8192, &p2));
  CHECK_CU(cuemm_free(m1, p1));
  CHECK_CU(cuemm_destroy(m1));
  CHECK_CU(cuemm_free(m2, p2));
  CHECK_CU(cuemm_destroy(m2));
  CHECK_CU(cuCtxDestroy(other));
  CHECK_CU(cuCtxSetCurrent(ctx));
  logfile lf;
  log_read(&lf, want);
  is(lf.n, 4, "\"%%p\" became the process id, and both managers wrote to the one file");
  if (lf.n == 4)
    ok(strcmp(lf.rows[0].f[MANAGER], lf.rows[1].f[MANAGER]) != 0 &&
       strcmp(lf.rows[0].f[MANAGER], lf.rows[2].f[MANAGER]) == 0 &&
       strcmp(lf.rows[1].f[MANAGER], lf.rows[3].f[MANAGER]) == 0 && strcmp(lf.rows[1].f[SIZE], "8192") == 0,
       "the Manager column tells the two apart");
  else
    skip(1, "rows missing");
  log_free(&lf);
}

/* The children below are this program run again (testproc.h): CUDA is not
 * to be used in a forked child on the real driver, so each starts its own.
 * TEST_LOG_CHILD says what it does, CUEMM_LOG where it logs. */
static int child_main(void)
{
  const char *what = getenv("TEST_LOG_CHILD");
  if (!what)
    return 90;
  CUcontext c = test_primary_context(0);
  cuemm_config cfg = test_config(1000, 1.0);
  cfg.log_file = getenv("CUEMM_LOG");
  if (strcmp(what, "full") == 0) {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = { 16384, 16384 };
    setrlimit(RLIMIT_FSIZE, &rl);
  }
  cuemm_manager *m = NULL;
  if (cuemm_manager_create(c, &cfg, &m) != CUDA_SUCCESS)
    return 3;
  if (strcmp(what, "exit") == 0) {
    /* Each freed and the frees flushed, so that no device memory outlives the
     * process (memory checkers would call it a leak). */
    CUdeviceptr q;
    for (int i = 0; i < 10; i++)
      if (cuemm_allocate(m, 12345, &q) != CUDA_SUCCESS || cuemm_free(m, q) != CUDA_SUCCESS)
        return 4;
    if (cuemm_flush(m) != CUDA_SUCCESS)
      return 4;
    exit(0); /* no destroy: the exit handler writes the rows */
  }
  for (int i = 0; i < 1000; i++) { /* 2000 rows, some 180 KB: past the cap, not slow under a sanitizer */
    CUdeviceptr p;
    if (cuemm_allocate(m, 4096, &p) != CUDA_SUCCESS || cuemm_free(m, p) != CUDA_SUCCESS)
      return 4;
  }
  cuemm_stats s;
  cuemm_get_stats(m, &s);
  if (cuemm_destroy(m) != CUDA_SUCCESS)
    return 5;
  printf("# rows %llu lost %llu\n", (unsigned long long)s.log_rows, (unsigned long long)s.log_lost);
  fflush(stdout);
  fflush(stderr);
  return s.log_lost > 1700 && s.log_lost < 2000 && s.log_rows == 2000 ? 0 : 6;
}

static const char *argv0;

/* Runs child_main as `what`, logging to `log`, its stderr to `err` (NULL:
 * the test's); returns its exit status. */
static int run_child(const char *what, const char *log, const char *err)
{
  setenv("TEST_LOG_CHILD", what, 1);
  setenv("CUEMM_LOG", log, 1);
  int saved = -1;
  if (err) {
    fflush(stderr);
    saved = dup(2);
    int fd = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    close(fd);
  }
  pid_t pid = spawn_self(argv0, NULL, 0, NULL, 0);
  if (err) {
    dup2(saved, 2);
    close(saved);
  }
  unsetenv("TEST_LOG_CHILD");
  unsetenv("CUEMM_LOG");
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* A process that exits without cuemm_destroy: its rows are in the file (the
 * exit handler wrote them).  A fork: the rows the parent had buffered are
 * not written by the child too. */
static void test_exit_and_fork(void)
{
  char path[256];
  snprintf(path, sizeof path, "%s/exit.csv", dir);
  is(run_child("exit", path, NULL), 0, "a child process logged 10 allocations and exited without destroying");
  logfile lf;
  log_read(&lf, path);
  int child_rows = 0;
  for (int i = 0; i < lf.n; i++)
    child_rows += strcmp(lf.rows[i].f[ACTION], "allocate") == 0 && strcmp(lf.rows[i].f[SIZE], "12345") == 0;
  is(child_rows, 10, "its 10 allocation rows reached the file");
  log_free(&lf);

  snprintf(path, sizeof path, "%s/fork.csv", dir);
  cuemm_config c = log_config(path, 0);
  cuemm_manager *m = NULL;
  CHECK_CU(cuemm_manager_create(ctx, &c, &m));
  CUdeviceptr p;
  CHECK_CU(cuemm_allocate(m, 4096, &p)); /* buffered in the parent */
  /* A CUDA tool attached to the process (compute-sanitizer sets these) makes
   * a forked child's exit wait on the tool, which never answers it. */
  if (getenv("CUDA_INJECTION64_PATH") || getenv("NVTX_INJECTION64_PATH")) {
    skip(1, "a CUDA tool is attached: a forked child's exit would wait on it");
  } else {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0)
      exit(0); /* no CUDA here; its exit handler runs */
    int status = 0;
    waitpid(pid, &status, 0);
    log_read(&lf, path);
    is(lf.n, 0, "a forked child that exits writes none of the rows its parent buffered");
    log_free(&lf);
  }
  CHECK_CU(cuemm_free(m, p));
  CHECK_CU(cuemm_destroy(m));
  log_read(&lf, path);
  int parent_rows = 0;
  for (int i = 0; i < lf.n; i++)
    parent_rows += strcmp(lf.rows[i].f[SIZE], "4096") == 0;
  is(parent_rows, 2, "the parent's rows, written at its destroy, once each");
  log_free(&lf);
}

static void test_open_failures(void)
{
  cuemm_manager *m = (cuemm_manager *)0x1;
  char path[256];
  snprintf(path, sizeof path, "%s/no/such/dir/x.csv", dir);
  cuemm_config c = log_config(path, 0);
  is(cuemm_manager_create(ctx, &c, &m), CUDA_ERROR_INVALID_VALUE, "a log in a missing directory: creation fails");
  ok(m == NULL, "and no manager is handed out");
  ok(strstr(cuemm_last_error(), "CUEMM_LOG: cannot open the event log") && strstr(cuemm_last_error(), path) &&
     strstr(cuemm_last_error(), "No such file or directory"),
     "the message names the file and the reason: %s", cuemm_last_error());
  c.log_file = dir; /* a directory */
  is(cuemm_manager_create(ctx, &c, &m), CUDA_ERROR_INVALID_VALUE, "a directory as the log: creation fails");
  like(cuemm_last_error(), "Is a directory", "saying so");
  c.log_file = "/dev/full";
  CUresult r = cuemm_manager_create(ctx, &c, &m);
  is(r, CUDA_ERROR_INVALID_VALUE, "a device that takes no bytes: creation fails (the header cannot be written)");
  like(cuemm_last_error(), "No space left on device", "saying the disk is full");
  if (r == CUDA_SUCCESS)
    cuemm_destroy(m);
  /* The variable. */
  setenv("CUEMM_LOG", path, 1);
  cuemm_config e;
  is(cuemm_config_init(&e), CUDA_SUCCESS, "CUEMM_LOG is read by cuemm_config_init");
  ok(e.log_file && strcmp(e.log_file, path) == 0, "into log_file");
  setenv("CUEMM_LOG", "", 1);
  cuemm_config_init(&e);
  ok(e.log_file == NULL, "an empty CUEMM_LOG: no log");
  unsetenv("CUEMM_LOG");
}

/* A file that fills up after the header: rows are lost and counted, one
 * message says so, and every allocation still succeeds. */
static void test_disk_full(void)
{
  char path[256], err[256];
  snprintf(path, sizeof path, "%s/full.csv", dir);
  snprintf(err, sizeof err, "%s/full.err", dir);
  is(run_child("full", path, err), 0,
     "with the file capped at 16 KiB: 2000 allocations and frees succeed, rows are counted lost");
  FILE *f = fopen(err, "r");
  char line[512] = "";
  int lines = 0;
  while (f && fgets(line, sizeof line, f))
    if (strstr(line, "event log"))
      lines++;
  if (f)
    fclose(f);
  is(lines, 1, "one message on stderr");
  f = fopen(err, "r");
  if (f && fgets(line, sizeof line, f)) {
    like(line, "could not be written (File too large); logging stopped", "it gives the reason");
  } else
    ok(0, "the message is there");
  if (f)
    fclose(f);
  logfile lf;
  log_read(&lf, path);
  int whole = lf.n > 100;
  for (int i = 0; i < lf.n; i++)
    whole &= lf.rows[i].n == 11 && strtoull(lf.rows[i].f[SEQ], NULL, 10) == (unsigned long long)i;
  ok(whole, "the file keeps %d whole rows, the one cut short taken back", lf.n);
  log_free(&lf);
}

int main(int argc, char **argv)
{
  if (argc > 1 && strcmp(argv[1], "--child") == 0)
    return child_main();
  argv0 = argv[0];
  tap_plan(62);
  sim_init();
  ctx = test_primary_context(0);
  if (!mkdtemp(dir)) {
    printf("Bail out! mkdtemp: %s\n", strerror(errno));
    return 1;
  }
  test_sequence();
  test_failure_rows();
  test_threads();
  test_shared_file_and_pid();
  test_exit_and_fork();
  test_open_failures();
  test_disk_full();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0)
    tap_diag("could not remove %s", dir);
  test_release_primary(0);
  return tap_done();
}
