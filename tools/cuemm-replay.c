/* cuemm-replay.c: allocation logs replayed on the GPU through cuemm and
 * through the driver's allocators, for the memory each holds and its time;
 * the logs are read by replay-parse.c.
 *
 * NAME
 *   cuemm-replay - replay an allocation log through cuemm and the driver
 *
 * SYNOPSIS
 *   cuemm-replay [--backends LIST] [--manager N] [--reps R | --quick]
 *                [--threads] [--lag N] [--snapshot FILE] [--quiet]
 *                [--progress-interval S] LOG...
 *   cuemm-replay --help | --version
 *
 * DESCRIPTION
 *   Replays each LOG (a file, or - for standard input) on device 0 through
 *   each backend, in the order --backends names them (default all four):
 *     cuMemAlloc       cuMemAlloc / cuMemFree (streams ignored)
 *     cuMemAllocAsync  cuMemAllocAsync / cuMemFreeAsync on the device's
 *                      default memory pool, release threshold at UINT64_MAX
 *     cuemm-async      cuemm_allocate_async / cuemm_free_async
 *     cuemm-deferred   cuemm_allocate / cuemm_free
 *   ("cuemm" names both cuemm backends, "all" those four.)  Four models
 *   place the log on paper, with no GPU and no time, as a yardstick for
 *   the allocators' footprints (only when named; "models" names the four):
 *     model-first-fit  the lowest-addressed free block that fits
 *     model-best-fit   the smallest free block that fits
 *     model-pages      first fit's placement, holding only the 2 MiB pages
 *                      live blocks touch (as an allocator that mapped and
 *                      unmapped every page at once would); its line says
 *                      how often a page came into use, each a mapping
 *                      (cuMemMap and cuMemSetAccess) on a GPU
 *     model-foresight  a placement that knows from the log when every
 *                      block is freed: blocks largest (or heaviest, size
 *                      times life) first, each at the lowest address free
 *                      during all its life (as static memory planners
 *                      place a graph's tensors), or as either fit does
 *                      where that holds less; not the optimum, a bound on
 *                      it from above
 *   They ignore streams and threads, merge every free at once, cache
 *   nothing, round sizes to 256 bytes and grow one address space exactly as
 *   far as the highest block reaches (held: that end, rounded up to 2 MiB).
 *   A log whose first-fit footprint is high fragments any allocator that
 *   keeps blocks where it put them; the pages model shows what moving
 *   physical memory under them could save, foresight what knowing the
 *   future could.  A log whose blocks would reach past 16 TiB of address
 *   space (sizes no GPU holds) is skipped by the models, saying so.
 *   `none` (only when named) allocates nothing:
 *   it hands out addresses nobody uses and its frees do nothing, so its
 *   time per event is the replay's own (the loop, and with --threads the
 *   hand-overs between threads), the floor under every allocator's
 *   figure.  Each stream of
 *   the log gets a stream of its own, created for the replay (non-blocking,
 *   as PyTorch's side streams are); streams 0 and 0x1 (cudaStreamLegacy)
 *   are the legacy default stream, 0x2 the per-thread one.  Pointers are
 *   remapped: each allocation of the log is numbered and a free finds what
 *   the backend handed out for it.
 *
 *   For each log and backend it prints the events replayed, the log's peak
 *   of live bytes, the peak of bytes held from the driver, their ratio
 *   (the footprint), the time per event (the median of the timed passes)
 *   and the allocations that failed out of memory; a table of them all ends
 *   the run.
 *
 * LOG FORMAT
 *   A CSV log as RMM's logging_resource_adaptor writes it, or as cuemm
 *   writes it (CUEMM_LOG, see cuemm.h): a header naming the columns, then a
 *   row per event.  Columns are found by name: RMM's Thread, Time, Action,
 *   Pointer, Size and Stream are required, anywhere in the header; cuemm's
 *   Seq, Manager and Held are read when present; others are ignored.
 *   Action is allocate, free or "allocate failure" (skipped, counted);
 *   other actions are skipped and counted by name.  Pointer and Stream are
 *   hex with or without 0x, Size, Seq, Manager and Held decimal.
 *     Seq      the rows are replayed in Seq order (cuemm buffers rows per
 *              thread: its file is in order only within a thread)
 *     Manager  with several managers in one log, one manager's rows are
 *              replayed: --manager N, by default the first in replay order;
 *              the rows of the others are counted
 *     Held     its highest figure (the recording manager's own peak held
 *              bytes) is printed beside the replay's
 *   Frees of pointers not live, allocations of size 0, allocations at a
 *   pointer still live (whose free is missing: the earlier one stays live)
 *   are counted and said.  A gzip-compressed log is refused, saying so:
 *   zcat LOG.gz | cuemm-replay - reads it.
 *
 * OPTIONS
 *   --backends LIST        comma-separated backends, in the order to run
 *   --manager N            the manager of a cuemm log to replay
 *   --reps R               timed passes, 1 to 64 (default 5); --quick: 1;
 *                          the median is the figure, and with more than one
 *                          a comment line lists each pass's, in order,
 *                          another the same passes on the replaying
 *                          thread's CPU clock (a pass slow on the wall
 *                          clock alone lost its time to the host), and for
 *                          cuemm backends another the driver work each made
 *                          (pool growths, releases, stream events, reclaims
 *                          of thread caches)
 *   --threads              each thread of the log (its Thread column)
 *                          replays its rows on a thread of its own, one
 *                          row at a time in the log's order (a turn passed
 *                          from thread to thread), so that the threads'
 *                          caches and their frees of each other's blocks
 *                          happen as in the program; the time per event
 *                          then counts the turns and says little (the CPU
 *                          figure is the wall's).  At most 64 threads: a
 *                          log's further threads share those
 *   --lag N                the GPU runs N allocations behind the program,
 *                          as a program's GPU does when its kernels take
 *                          longer than their launches: after each
 *                          allocation a fill of the block is queued on its
 *                          stream (the kernel that uses it; one byte on
 *                          simcuda) and an event recorded there, and the
 *                          replay waits for the event of N allocations
 *                          before (on a GPU the lag is at most N, as the
 *                          fills finish).  Blocks then
 *                          come back while work on their streams is still
 *                          queued, so reuse across streams needs events as
 *                          in the program; with 0 (the default) every
 *                          stream is idle whenever the allocator asks.  On
 *                          simcuda the replay turns its queue mode on (work
 *                          waits for a synchronization).  1 to 4096; the
 *                          time per event then counts the waits and says
 *                          little
 *   --snapshot FILE        the first cuemm backend's cuemm_snapshot_take,
 *                          written by cuemm_snapshot_write_json into FILE
 *                          after the event where live bytes reach the log's
 *                          peak (in the pass measuring bytes held); one LOG
 *   --progress-interval S  seconds before the first progress line and
 *                          between lines (0: at every check)
 *   -q, --quiet            no progress line
 *   -h, --help             what the options are, then exit 0
 *   --version              the program's and libcuemm's versions, then
 *                          exit 0
 *   Options take their value as the next argument or after "="; "--" ends
 *   them.
 *
 * PASSES AND FIGURES
 *   Each log is parsed into an array first (pointers resolved to slots,
 *   streams to indices), so the timed passes do no parsing and no lookups.
 *   Per backend: one untimed pass on the fresh allocator measuring the
 *   bytes held, one untimed warm-up pass, then R timed passes; a pass ends
 *   by synchronizing the context (cuemm-deferred flushes first), and that
 *   is timed; what the log leaves live is freed after the clock stops.
 *   Bytes held:
 *     cuMemAlloc       the device's used memory (cuMemGetInfo) above what
 *                      it was before the pass, read after every event
 *     cuMemAllocAsync  CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH over the pass (the
 *                      pool trimmed and the mark reset first); n/a when the
 *                      driver has no pool attributes
 *     cuemm            cuemm_get_held after every event: the pool's
 *                      mapped bytes and the requests it gave to
 *                      cuMemAlloc (freed ones until their flush)
 *   Footprint is held / the log's peak of live bytes.  That figure is the
 *   first pass's, on an allocator that held nothing before it.  Each later
 *   pass starts from what the ones before left (caches, blocks kept,
 *   memory mapped and not given back), as a program that runs the same
 *   work again and again does; a line "#   every pass (N)" gives the most
 *   held over all N passes of the backend, where it can say: cuemm's
 *   peak_held_bytes (cuemm_get_stats), the driver pool's high-water mark.
 *
 *   A run longer than a second shows where it is on stderr: one line
 *   redrawn in place on a terminal (every 0.2 s), else a line every 5 s.
 *
 * ENVIRONMENT
 *   The cuemm backends use the CUEMM_* settings (cuemm_config_init), with
 *   two exceptions, both said in the output: the pool is always on (as
 *   CUEMM_POOL=vmm), and CUEMM_LOG is not applied (each backend's manager
 *   would truncate the file).  The driver is the one cuemm loads
 *   (CUEMM_LIBCUDA, else libcuda.so.1): the program's own driver calls are
 *   resolved from that file at run time, so it links libcuemm alone.
 *
 *   On simcuda, the suite's simulated driver, a device has 1 GiB unless
 *   SIMCUDA_CAPACITY says more (SIMCUDA_CAPACITY=80G: an H100's 80 GiB; K,
 *   M, G and T are units).  Its memory is backed only where written, and a
 *   replay writes none, so a large device costs no host memory.
 *
 * EXIT STATUS
 *   0 done; 1 a log unreadable or malformed (file and line named), a
 *   driver or cuemm call failed, or the snapshot could not be taken or
 *   written; 2 a usage error (an unknown option or backend, a bad value); 3
 *   done, but allocations failed out of memory (stderr says how many, of
 *   which log and backend, and how large the device is): the figures of
 *   those replays leave them out.
 *
 *   Messages that quote a log, an argument, a file name or the environment
 *   show each byte outside printable ASCII as \xNN and a backslash as \\,
 *   so that no control sequence in them reaches the terminal; a field of a
 *   log is quoted to its first 64 bytes.
 *
 * SEE ALSO
 *   cuemm(3), cuemm(7).  scripts/torch-trace.py writes RMM logs from
 *   PyTorch's own allocator; scripts/gpu-traces.sh records and replays them
 *   on a GPU.
 *
 * man/cuemm-replay.1 is made from this comment, NAME to SEE ALSO, by
 * man/gen-cuemm-replay1.py: keep it in that form.
 */
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>
#include <cuemm.h>

#include "replay-model.h"
#include "replay-parse.h"

#define PROG "cuemm-replay"
#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "unknown"
#endif

/* Text from outside (a log's bytes, an argument, a file name, the
 * environment, and cuemm's messages, which may quote the environment) as
 * messages show it: bytes outside printable ASCII as \xNN (replay_escape),
 * so that none reaches the terminal as a control sequence; cut at 1024
 * bytes.  Four buffers, for up to four in one message. */
static const char *shown(const char *s)
{
  static char buf[4][4 * 1024 + 8];
  static unsigned next;
  char *b = buf[next++ % 4];
  replay_escape(b, sizeof buf[0], s ? s : "(null)", s ? strlen(s) : 6, 1024);
  return b;
}

/* ---- the driver ----------------------------------------------------------- */

/* The program links libcuemm only.  Its own driver calls go to the file
 * cuemm loaded (CUEMM_LIBCUDA, else libcuda.so.1 through the loader's
 * search path), resolved through cuGetProcAddress at the API version the
 * library pins, so one driver serves both and the installed program needs
 * no libcuda at link time.  O(): entries an older driver (or simcuda) may
 * lack. */
#define DRIVER_API_VERSION 12000
#define DRIVER_ENTRIES(X, O)                                                   \
  X(GetErrorName) X(DeviceGet) X(DeviceGetName) X(DevicePrimaryCtxRetain)      \
  X(DevicePrimaryCtxRelease) X(CtxSetCurrent) X(CtxSynchronize)                \
  X(MemGetInfo) X(MemAlloc) X(MemFree) X(StreamCreate) X(StreamDestroy)        \
  O(MemAllocAsync) O(MemFreeAsync) O(DeviceGetDefaultMemPool)                  \
  O(MemPoolSetAttribute) O(MemPoolGetAttribute) O(MemPoolTrimTo)              \
  O(MemsetD8Async) O(EventCreate) O(EventRecord) O(EventSynchronize)          \
  O(EventDestroy)

static struct {
#define DRIVER_FIELD(name) __typeof__(cu##name) *name;
  DRIVER_ENTRIES(DRIVER_FIELD, DRIVER_FIELD)
#undef DRIVER_FIELD
} drv;

/* --lag: how many allocations the GPU runs behind (0: none); on simcuda,
 * whether its queue mode was turned on for it. */
static unsigned opt_lag;
static int lag_simulated;
/* Whether the driver is simcuda (which says how to give it more memory),
 * and the device's memory. */
static int on_simcuda;
static size_t device_total;

static void progress_clear(void);

static const char *error_name(CUresult r)
{
  const char *name = NULL;
  if (!drv.GetErrorName || drv.GetErrorName(r, &name) != CUDA_SUCCESS || !name)
    return "unknown error";
  return name;
}

/* Stops the run: a driver or cuemm call failed.  The message is cuemm's
 * for cuemm's calls, the error's name for the driver's. */
static void call_failed(const char *call, CUresult r)
{
  int ours = strncmp(call, "cuemm_", 6) == 0, driver = strncmp(call, "drv.", 4) == 0;
  progress_clear();
  fprintf(stderr, PROG ": %s%s failed (%s)%s%s\n", driver ? "cu" : "", driver ? call + 4 : call, error_name(r),
          ours ? ": " : "", ours ? shown(cuemm_last_error()) : "");
  exit(1);
}

#define CHECK(call)                                                            \
  do {                                                                         \
    CUresult r_ = (call);                                                      \
    if (r_ != CUDA_SUCCESS)                                                    \
      call_failed(#call, r_);                                                  \
  } while (0)

/* Loads the driver through cuemm, then resolves the entries above from the
 * same file. */
static void driver_load(cuemm_driver_info *info)
{
  CUresult r = cuemm_driver_load();
  if (r != CUDA_SUCCESS) {
    fprintf(stderr, PROG ": no usable CUDA driver: %s\n", shown(cuemm_last_error()));
    exit(1);
  }
  CHECK(cuemm_driver_get_info(info));
  void *h = dlopen(info->path, RTLD_NOW | RTLD_LOCAL);
  typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
  gpa_fn gpa = h ? (gpa_fn)dlsym(h, "cuGetProcAddress_v2") : NULL;
  if (!gpa) {
    fprintf(stderr, PROG ": %s: %s\n", shown(info->path), h ? "no cuGetProcAddress_v2" : shown(dlerror()));
    exit(1);
  }
#define DRIVER_RESOLVE(name, required)                                                                 \
  do {                                                                                                 \
    CUdriverProcAddressQueryResult st_ = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;                         \
    void *fn_ = NULL;                                                                                  \
    if (gpa("cu" #name, &fn_, DRIVER_API_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &st_) == CUDA_SUCCESS && \
        st_ == CU_GET_PROC_ADDRESS_SUCCESS)                                                            \
      drv.name = (__typeof__(drv.name))fn_;                                                            \
    else if (required) {                                                                               \
      fprintf(stderr, PROG ": the CUDA driver %s lacks cu" #name "\n", shown(info->path));             \
      exit(1);                                                                                         \
    }                                                                                                  \
  } while (0);
#define DRIVER_REQ(name) DRIVER_RESOLVE(name, 1)
#define DRIVER_OPT(name) DRIVER_RESOLVE(name, 0)
  DRIVER_ENTRIES(DRIVER_REQ, DRIVER_OPT)
#undef DRIVER_REQ
#undef DRIVER_OPT
#undef DRIVER_RESOLVE
  on_simcuda = dlsym(h, "simcuda_set_queue_mode") != NULL;
  if (opt_lag) {
    if (!drv.MemsetD8Async || !drv.EventCreate || !drv.EventRecord || !drv.EventSynchronize || !drv.EventDestroy) {
      fprintf(stderr, PROG ": --lag: the CUDA driver %s lacks cuMemsetD8Async or the cuEvent calls\n",
              shown(info->path));
      exit(1);
    }
    /* simcuda runs queued work at once unless told to queue it: without
     * that, its streams would never be behind. */
    void (*queue_mode)(int) = (void (*)(int))dlsym(h, "simcuda_set_queue_mode");
    if (queue_mode) {
      queue_mode(1);
      lag_simulated = 1;
    }
  }
}

/* ---- time ----------------------------------------------------------------- */

static double now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* The calling thread's own time on a processor: beside the wall clock,
 * it tells a pass the host slowed (the thread kept off the processor, by
 * the hypervisor or other processes) from one that did more work. */
static double cpu_ns(void)
{
  struct timespec ts;
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
    return 0;
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Sorts v in place. */
static double median(double *v, int n)
{
  qsort(v, n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#define MiB ((size_t)1 << 20)
/* The allocators, then the models (replay-model.h). */
#define ALLOCATORS 4
#define MODELS REPLAY_MODELS
/* Then `none`, the replay's own cost. */
#define MAX_BACKENDS (ALLOCATORS + MODELS + 1)

/* ---- the progress line ---------------------------------------------------- */

/* Where a long run is, on stderr: on a terminal one line redrawn in place,
 * elsewhere a line at most every PROGRESS_EVERY_S seconds.  The first comes
 * after PROGRESS_WAIT_S; --progress-interval S sets both the wait and the
 * interval (0: at every check, about every 1024 events); --quiet: none. */
#define PROGRESS_WAIT_S 1.0
#define PROGRESS_EVERY_S 5.0
#define PROGRESS_EVERY_TTY_S 0.2

static struct {
  int on, tty;
  double start, wait, every, last; /* ns */
  size_t shown;                    /* the length of the line on the terminal; 0: none */
} progress_line;

static void progress_init(int quiet, double interval_s)
{
  progress_line.on = !quiet;
  progress_line.tty = isatty(STDERR_FILENO);
  progress_line.start = now_ns();
  progress_line.wait = (interval_s >= 0 ? interval_s : PROGRESS_WAIT_S) * 1e9;
  progress_line.every =
      (interval_s >= 0 ? interval_s : progress_line.tty ? PROGRESS_EVERY_TTY_S : PROGRESS_EVERY_S) * 1e9;
}

/* Whether a line is due now. */
static int progress_due(void)
{
  if (!progress_line.on)
    return 0;
  double now = now_ns();
  if (now - progress_line.start < progress_line.wait ||
      (progress_line.last > 0 && now - progress_line.last < progress_line.every))
    return 0;
  progress_line.last = now;
  return 1;
}

static __attribute__((format(printf, 1, 2))) void progress_show(const char *fmt, ...)
{
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  int len = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (len < 0)
    return;
  size_t n = (size_t)len < sizeof buf ? (size_t)len : sizeof buf - 1;
  n += (size_t)snprintf(buf + n, sizeof buf - n, ", %.0f s", (now_ns() - progress_line.start) / 1e9);
  if (n >= sizeof buf)
    n = sizeof buf - 1;
  if (progress_line.tty) {
    /* Blank what a longer line before left. */
    int pad = progress_line.shown > n ? (int)(progress_line.shown - n) : 0;
    fprintf(stderr, "\r%s%*s", buf, pad, "");
    progress_line.shown = n;
  } else {
    fprintf(stderr, "%s\n", buf);
  }
  fflush(stderr);
}

/* Takes the line off the terminal, before other output. */
static void progress_clear(void)
{
  if (!progress_line.shown)
    return;
  fprintf(stderr, "\r%*s\r", (int)progress_line.shown, "");
  fflush(stderr);
  progress_line.shown = 0;
}

/* ---- the trace ------------------------------------------------------------ */

/* The log is read by replay-parse.c, which returns its errors; a bad log
 * stops the run here, before the device is touched. */
typedef replay_trace trace;

/* --threads: each thread of the log replays its own rows on a thread of
 * its own. */
static int opt_threads;
typedef replay_event event;

static void read_progress(const trace *t)
{
  if (progress_due())
    progress_show(PROG ": reading %s: %zu lines", t->shown, t->lines);
}

/* Reads the log at `path` (- : standard input); a log it cannot read stops
 * the run with the parser's message. */
static void trace_load(trace *t, const char *path, uint32_t want)
{
  int from_stdin = strcmp(path, "-") == 0;
  FILE *fp = from_stdin ? stdin : fopen(path, "r");
  if (!fp) {
    fprintf(stderr, PROG ": %s: %s\n", shown(path), strerror(errno));
    exit(1);
  }
  char msg[REPLAY_MSG_MAX];
  replay_status st = replay_parse_file(t, fp, path, want, read_progress, msg, sizeof msg);
  if (!from_stdin)
    fclose(fp);
  if (st != REPLAY_OK) {
    progress_clear();
    fprintf(stderr, PROG ": %s\n", msg);
    exit(1);
  }
}

static void *xcalloc(size_t n, size_t size)
{
  void *p = calloc(n ? n : 1, size);
  if (!p) {
    fprintf(stderr, PROG ": out of host memory\n");
    exit(1);
  }
  return p;
}



static void trace_print(const trace *t)
{
  progress_clear();
  printf("\n## %s\n", t->shown);
  printf("# %zu lines: %zu allocate, %zu free; %zu events replayed on %zu stream%s; peak live %zu bytes "
         "(%.1f MiB); %zu bytes in %zu allocations live at the end\n",
         t->lines, t->allocs, t->frees, t->n, t->streams, t->streams == 1 ? "" : "s", t->peak_live,
         (double)t->peak_live / MiB, t->live_at_end, t->live_count_at_end);
  if (opt_threads && t->threads > 1)
    printf("# --threads: the log's %zu threads replay on a thread each, in turn\n", t->threads);
  if (t->has_seq)
    printf("# rows replayed in Seq order: %zu were out of file order\n", t->seq_out_of_order);
  if (t->seq_duplicates)
    printf("# %zu rows share a Seq with another row (kept in file order)\n", t->seq_duplicates);
  if (t->has_manager && (t->nmanagers > 1 || t->manager_chosen)) {
    char list[256];
    size_t used = 0;
    list[0] = '\0';
    for (size_t i = 0; i < t->nmanagers && used < sizeof list; i++)
      used += (size_t)snprintf(list + used, sizeof list - used, "%s%" PRIu32 " (%zu rows)", i ? ", " : "",
                               t->managers[i].id, t->managers[i].rows);
    printf("# managers in the log: %s; replaying manager %" PRIu32 " (%s); skipped: %zu rows of other managers\n",
           list, t->manager, t->manager_chosen ? "--manager" : "the first in replay order, --manager N for another",
           t->other_manager_rows);
  }
  if (t->has_held)
    printf("# the log's Held column: the manager that wrote it held at most %zu bytes (%.2fx live)\n", t->held_peak,
           t->peak_live ? (double)t->held_peak / (double)t->peak_live : 0.0);
  if (t->alloc_failures)
    printf("# skipped: %zu 'allocate failure' lines\n", t->alloc_failures);
  if (t->unknown_frees)
    printf("# skipped: %zu frees of a pointer not live (allocated before the log began, or freed twice)\n",
           t->unknown_frees);
  if (t->null_allocs)
    printf("# skipped: %zu allocations of size 0 or at pointer 0\n", t->null_allocs);
  if (t->reallocated)
    printf("# %zu allocations at a pointer still live: the earlier one stays live to the end\n", t->reallocated);
  if (t->free_size_mismatch)
    printf("# %zu frees name another size than their allocation (the allocation's is used)\n",
           t->free_size_mismatch);
  for (size_t i = 0; i <= REPLAY_MAX_UNKNOWN_ACTIONS; i++)
    if (t->unknown_action_count[i])
      printf("# skipped: %zu lines of unknown action '%s'\n", t->unknown_action_count[i],
             i < t->unknown_actions ? shown(t->unknown_action[i]) : "(others)");
}

/* ---- the backends --------------------------------------------------------- */

typedef CUresult (*alloc_async_fn)(cuemm_manager *, size_t, CUstream, CUdeviceptr *);
typedef CUresult (*free_async_fn)(cuemm_manager *, CUdeviceptr, CUstream);
static const alloc_async_fn alloc_async = cuemm_allocate_async;
static const free_async_fn free_async = cuemm_free_async;

static CUcontext ctx;
static CUdevice dev;
static cuemm_manager *mgr;
static size_t info_base_used;

static CUmemoryPool dpool;
static int dpool_attrs;

static CUresult raw_alloc(CUdeviceptr *p, size_t size, CUstream s)
{
  (void)s;
  return drv.MemAlloc(p, size);
}

static CUresult raw_free(CUdeviceptr p, size_t size, CUstream s)
{
  (void)size, (void)s;
  return drv.MemFree(p);
}

static CUresult ctx_sync(void)
{
  return drv.CtxSynchronize();
}

static size_t used_now(void)
{
  size_t free_b, total;
  CHECK(drv.MemGetInfo(&free_b, &total));
  return total - free_b;
}

static void raw_held_begin(void)
{
  info_base_used = used_now();
}

static size_t raw_held_sample(void)
{
  size_t u = used_now();
  return u > info_base_used ? u - info_base_used : 0;
}

static const char *drv_setup(void)
{
  if (!drv.MemAllocAsync || !drv.MemFreeAsync)
    return "the driver has no cuMemAllocAsync / cuMemFreeAsync";
  dpool_attrs = 0;
  if (drv.DeviceGetDefaultMemPool && drv.MemPoolSetAttribute && drv.MemPoolGetAttribute && drv.MemPoolTrimTo &&
      drv.DeviceGetDefaultMemPool(&dpool, dev) == CUDA_SUCCESS) {
    cuuint64_t max = UINT64_MAX;
    CHECK(drv.MemPoolSetAttribute(dpool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &max));
    dpool_attrs = 1;
  } else {
    printf("# cuMemAllocAsync: the driver has no memory-pool attributes: release threshold left as it is, "
           "bytes held not measured\n");
  }
  return NULL;
}

static CUresult drv_alloc(CUdeviceptr *p, size_t size, CUstream s)
{
  return drv.MemAllocAsync(p, size, s);
}

static CUresult drv_free(CUdeviceptr p, size_t size, CUstream s)
{
  (void)size;
  return drv.MemFreeAsync(p, s);
}

/* The pool emptied and its high-water mark reset, so the pass measures the
 * trace alone. */
static void drv_held_begin(void)
{
  if (!dpool_attrs)
    return;
  CHECK(drv.CtxSynchronize());
  CHECK(drv.MemPoolTrimTo(dpool, 0));
  cuuint64_t zero = 0;
  CHECK(drv.MemPoolSetAttribute(dpool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &zero));
}

static int drv_held_peak(size_t *peak)
{
  if (!dpool_attrs)
    return 0;
  cuuint64_t high = 0;
  CHECK(drv.MemPoolGetAttribute(dpool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &high));
  *peak = (size_t)high;
  return 1;
}

static void drv_teardown(void)
{
  CHECK(drv.CtxSynchronize());
  if (dpool_attrs)
    CHECK(drv.MemPoolTrimTo(dpool, 0)); /* what it kept is not the next backend's to lack */
}

/* The cuemm backends' configuration: the CUEMM_* environment, read once,
 * with the pool on and no event log (cuemm_config_read). */
static cuemm_config cuemm_cfg;

static void cuemm_config_read(void)
{
  if (cuemm_config_init(&cuemm_cfg) != CUDA_SUCCESS) {
    fprintf(stderr, PROG ": the CUEMM_* environment: %s\n", shown(cuemm_last_error()));
    exit(1);
  }
  if (cuemm_cfg.pool != CUEMM_POOL_VMM) {
    const char *env = getenv("CUEMM_POOL");
    printf("# cuemm backends: CUEMM_POOL is %s%s%s; the replay turns the pool on (as CUEMM_POOL=vmm), "
           "with the other CUEMM_* settings as they are\n",
           env && *env ? "'" : "unset", env && *env ? shown(env) : "", env && *env ? "'" : "");
    cuemm_cfg.pool = CUEMM_POOL_VMM;
  }
  /* Every backend's manager would truncate the log, the replayed one too
   * when it is the same file. */
  const char *log = cuemm_cfg.log_file && *cuemm_cfg.log_file ? cuemm_cfg.log_file : getenv("CUEMM_LOG");
  if (log && *log)
    printf("# cuemm backends: CUEMM_LOG (%s) is not applied: the replay's managers write no log\n", shown(log));
  cuemm_cfg.log_file = NULL;
}

static const char *cuemm_setup(void)
{
  CHECK(cuemm_manager_create(ctx, &cuemm_cfg, &mgr));
  cuemm_pool_stats ps;
  CHECK(cuemm_pool_get_stats(mgr, &ps));
  printf("# cuemm pool: %zu MiB reserved, chunk %zu MiB, release threshold %zu MiB%s\n", ps.reserved_bytes / MiB,
         ps.chunk_bytes / MiB, ps.release_threshold / MiB, ps.limit_bytes != ps.reserved_bytes ? ", limited" : "");
  return NULL;
}

static const char *cuemm_async_setup(void)
{
  return cuemm_setup();
}

static CUresult cuemm_async_alloc(CUdeviceptr *p, size_t size, CUstream s)
{
  return alloc_async(mgr, size, s, p);
}

static CUresult cuemm_async_free(CUdeviceptr p, size_t size, CUstream s)
{
  (void)size;
  return free_async(mgr, p, s);
}

static CUresult cuemm_deferred_alloc(CUdeviceptr *p, size_t size, CUstream s)
{
  (void)s;
  return cuemm_allocate(mgr, size, p);
}

static CUresult cuemm_deferred_free(CUdeviceptr p, size_t size, CUstream s)
{
  (void)s, (void)size;
  return cuemm_free(mgr, p);
}

/* The deferred path's pass ends with its queue released, as the stream
 * ordered ones end with their frees done. */
static CUresult cuemm_deferred_finish(void)
{
  CUresult r = cuemm_flush(mgr);
  return r ? r : drv.CtxSynchronize();
}

/* cuemm_get_held, a few loads: cuemm_pool_get_stats walks the pool's
 * blocks, and this runs after every event of the held pass. */
static size_t cuemm_held_sample(void)
{
  size_t held = 0;
  CHECK(cuemm_get_held(mgr, &held));
  return held;
}

/* The most the manager held since its creation, every pass so far: a
 * program that runs the same work again and again holds this, not the
 * first pass's figure, once its pool has settled. */
static int cuemm_held_all(size_t *peak)
{
  cuemm_stats st;
  CHECK(cuemm_get_stats(mgr, &st));
  *peak = st.peak_held_bytes;
  return 1;
}

/* What a cuemm backend's manager did that costs driver calls: pool growth
 * steps, release passes, events recorded on streams, reclaims of thread
 * caches (since its creation). */
enum { COUNTERS = 4 };
static void cuemm_counters(uint64_t c[COUNTERS])
{
  cuemm_pool_stats ps;
  cuemm_stats st;
  CHECK(cuemm_pool_get_stats(mgr, &ps));
  CHECK(cuemm_get_stats(mgr, &st));
  c[0] = ps.grow_steps;
  c[1] = ps.releases;
  c[2] = st.stream_events;
  c[3] = st.stream_reclaims;
}

static void cuemm_teardown(void)
{
  CHECK(cuemm_destroy(mgr));
  mgr = NULL;
}

/* `none`: addresses nobody uses (never 0, never repeated within a run),
 * and frees that do nothing, so that its time per event is the replay's
 * own: the loop over the events, and with --threads the hand-overs between
 * the threads, which every allocator's figure includes too.  Calls are
 * ordered by the turn (--threads), so the counter needs no atomics. */
static CUdeviceptr none_next;

static const char *none_setup(void)
{
  if (opt_lag)
    return "--lag queues work on each block, and none's blocks are not memory";
  none_next = (CUdeviceptr)1 << 40;
  return NULL;
}

static CUresult none_alloc(CUdeviceptr *p, size_t size, CUstream s)
{
  (void)size, (void)s;
  *p = none_next;
  none_next += 256;
  return CUDA_SUCCESS;
}

static CUresult none_free(CUdeviceptr p, size_t size, CUstream s)
{
  (void)p, (void)size, (void)s;
  return CUDA_SUCCESS;
}

static CUresult none_finish(void)
{
  return CUDA_SUCCESS;
}

typedef struct backend {
  const char *name;
  int is_cuemm;
  int model;                          /* a replay_model placing the log on paper; -1: an allocator */
  const char *(*setup)(void); /* NULL: ready; else why the backend is skipped */
  CUresult (*alloc)(CUdeviceptr *p, size_t size, CUstream s);
  CUresult (*free)(CUdeviceptr p, size_t size, CUstream s);
  CUresult (*finish)(void);           /* ends a pass, timed */
  void (*held_begin)(void);           /* before the measuring pass; may be NULL */
  size_t (*held_sample)(void);        /* bytes held now, after every event; may be NULL */
  int (*held_peak)(size_t *peak);     /* the peak after the pass, when no samples; may be NULL */
  int (*held_all)(size_t *peak);      /* the peak over every pass so far; may be NULL */
  void (*teardown)(void);             /* may be NULL */
} backend;

static const backend backends[MAX_BACKENDS] = {
  { "cuMemAlloc", 0, -1, NULL, raw_alloc, raw_free, ctx_sync, raw_held_begin, raw_held_sample, NULL, NULL, NULL },
  { "cuMemAllocAsync", 0, -1, drv_setup, drv_alloc, drv_free, ctx_sync, drv_held_begin, NULL, drv_held_peak,
    drv_held_peak, drv_teardown },
  { "cuemm-async", 1, -1, cuemm_async_setup, cuemm_async_alloc, cuemm_async_free, ctx_sync, NULL, cuemm_held_sample,
    NULL, cuemm_held_all, cuemm_teardown },
  { "cuemm-deferred", 1, -1, cuemm_setup, cuemm_deferred_alloc, cuemm_deferred_free, cuemm_deferred_finish, NULL,
    cuemm_held_sample, NULL, cuemm_held_all, cuemm_teardown },
  { "model-first-fit", 0, REPLAY_MODEL_FIRST_FIT, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL },
  { "model-best-fit", 0, REPLAY_MODEL_BEST_FIT, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL },
  { "model-pages", 0, REPLAY_MODEL_PAGES, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL },
  { "model-foresight", 0, REPLAY_MODEL_FORESIGHT, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL },
  { "none", 0, -1, none_setup, none_alloc, none_free, none_finish, NULL, NULL, NULL, NULL, NULL },
};

/* ---- the snapshot at the peak (--snapshot FILE) --------------------------- */

static const char *snapshot_path; /* NULL: none asked for */
static FILE *snapshot_file;       /* open until the snapshot is written */
static int snapshot_created;      /* the file did not exist before: removed again on failure */

/* cuemm_snapshot_take of the backend's manager, written as JSON to the
 * snapshot file; a failure stops the run (the file removed). */
static void snapshot_write(const trace *t, const backend *b, size_t events_done)
{
  cuemm_snapshot *s = NULL;
  const char *call = "cuemm_snapshot_take";
  CUresult r = cuemm_snapshot_take(mgr, &s);
  if (r == CUDA_SUCCESS) {
    call = "cuemm_snapshot_write_json";
    r = cuemm_snapshot_write_json(s, snapshot_file);
  }
  const char *why = r != CUDA_SUCCESS ? shown(cuemm_last_error()) : NULL;
  if (r == CUDA_SUCCESS && (fputc('\n', snapshot_file) == EOF || fflush(snapshot_file) != 0)) {
    call = "writing";
    why = strerror(errno);
  }
  if (fclose(snapshot_file) != 0 && !why) {
    call = "closing";
    why = strerror(errno);
  }
  snapshot_file = NULL;
  if (why) {
    progress_clear();
    if (r != CUDA_SUCCESS)
      fprintf(stderr, PROG ": --snapshot %s: %s failed (%s): %s\n", shown(snapshot_path), call, error_name(r), why);
    else
      fprintf(stderr, PROG ": --snapshot %s: %s: %s\n", shown(snapshot_path), call, why);
    if (snapshot_created)
      unlink(snapshot_path);
    cuemm_snapshot_free(s);
    exit(1);
  }
  size_t live = 0, bytes = 0;
  for (size_t i = 0; i < s->nblocks; i++)
    if (s->blocks[i].state == CUEMM_BLOCK_LIVE)
      live++, bytes += s->blocks[i].requested;
  progress_clear();
  printf("# snapshot of %s after event %zu of %zu, where live bytes reach the trace's peak: %s: %zu chunks, "
         "%zu blocks, %zu of them live (%zu bytes)\n",
         b->name, events_done, t->n, shown(snapshot_path), s->nchunks, s->nblocks, live, bytes);
  cuemm_snapshot_free(s);
}

/* ---- the replay ----------------------------------------------------------- */

typedef struct result {
  const trace *t;
  const backend *b;
  const char *skipped;
  double ns_per_event;
  int held_known;
  size_t held;
  int held_all_known;
  size_t held_all; /* the peak over every pass (held_all) */
  size_t oom;
} result;

/* Where the replay is, for the progress line. */
typedef struct position {
  const char *backend;
  int backend_no, backends;
  char pass[48];
} position;

/* What one pass shares between the events (and, with --threads, between
 * the replaying threads, one of which holds the turn at a time). */
typedef struct pass_state {
  const trace *t;
  const backend *b;
  CUdeviceptr *slot;
  const CUstream *streams;
  const position *pos;
  size_t peak, ooms;
  int sample, snapshot, progress;
  CUevent *lag_ev;        /* --lag: a ring of opt_lag events, recorded after allocations */
  size_t lag_next, lag_used;
  _Atomic size_t turn;    /* --threads: the event whose turn it is */
  unsigned spin;          /* --threads: checks of the turn before a waiting thread sleeps on `wake` */
  sem_t wake[REPLAY_MAX_THREADS]; /* posted when the turn passes to that thread */
  size_t *order;          /* --threads: the events of thread k at order[start[k]..start[k+1]) */
  size_t start[REPLAY_MAX_THREADS + 1];
} pass_state;

/* --lag: the work that uses the block just allocated at p (`size` bytes),
 * queued on its stream, and an event after it; the program runs on once
 * the GPU has finished the work of opt_lag allocations before.  On a GPU
 * the work fills the whole block, so that it takes time as a kernel using
 * it would (a fill of one byte is done before the next allocation comes);
 * simcuda holds queued work back whatever its size, and would commit host
 * memory for every byte filled, so there one byte.  One thread at a time
 * (the turn, with --threads). */
static void lag_after_alloc(pass_state *ps, CUdeviceptr p, size_t size, CUstream s)
{
  CHECK(drv.MemsetD8Async(p, 0, lag_simulated ? 1 : size, s));
  CUevent ev = ps->lag_ev[ps->lag_next];
  if (ps->lag_used == opt_lag)
    CHECK(drv.EventSynchronize(ev));
  else
    ps->lag_used++;
  CHECK(drv.EventRecord(ev, s));
  ps->lag_next = (ps->lag_next + 1) % opt_lag;
}

static void replay_one(pass_state *ps, size_t i)
{
  const trace *t = ps->t;
  const backend *b = ps->b;
  const event *e = &t->ev[i];
  if (!e->is_free) {
    CUresult r = b->alloc(&ps->slot[e->slot], (size_t)e->size, ps->streams[e->stream]);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
      ps->slot[e->slot] = 0;
      ps->ooms++;
    } else if (r != CUDA_SUCCESS) {
      progress_clear();
      fprintf(stderr, PROG ": %s: %s: allocating %llu bytes (event %zu) failed (%s)%s%s\n", t->shown, b->name,
              (unsigned long long)e->size, i + 1, error_name(r), b->is_cuemm ? ": " : "",
              b->is_cuemm ? shown(cuemm_last_error()) : "");
      exit(1);
    }
    if (ps->lag_ev && ps->slot[e->slot])
      lag_after_alloc(ps, ps->slot[e->slot], (size_t)e->size, ps->streams[e->stream]);
  } else if (ps->slot[e->slot]) {
    CHECK(b->free(ps->slot[e->slot], (size_t)e->size, ps->streams[e->stream]));
    ps->slot[e->slot] = 0;
  }
  if (ps->sample) {
    size_t h = b->held_sample();
    if (h > ps->peak)
      ps->peak = h;
  }
  if (ps->snapshot && i == t->peak_event)
    snapshot_write(t, b, i + 1);
  if (ps->progress && (i & 1023) == 1023 && progress_due())
    progress_show(PROG ": %s: %s (%d of %d), %s: %zu of %zu events (%zu%%)", t->shown, ps->pos->backend,
                  ps->pos->backend_no, ps->pos->backends, ps->pos->pass, i + 1, t->n, (i + 1) * 100 / t->n);
}

typedef struct replay_thread_arg {
  pass_state *ps;
  unsigned k;
} replay_thread_arg;

static inline void spin_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* A replaying thread: waits for the turn of each of its events, replays it
 * and passes the turn on.  The turn's release and acquire order the
 * threads' calls as the log orders them. */
static void *replay_thread(void *arg)
{
  const replay_thread_arg *a = arg;
  pass_state *ps = a->ps;
  CHECK(drv.CtxSetCurrent(ctx));
  size_t first = ps->start[a->k], end = ps->start[a->k + 1];
  for (size_t j = first; j < end; j++) {
    size_t i = ps->order[j];
    /* The turn is passed only to another thread: a run of this thread's
     * own events goes on without it, and without a store to the line that
     * every waiting thread reads (stored at every event, it cost each event
     * a transfer of that line). */
    if (j == first || ps->order[j - 1] + 1 != i)
      for (unsigned spins = 0; atomic_load_explicit(&ps->turn, memory_order_acquire) != i;) {
        if (spins < ps->spin) {
          spins++;
          spin_pause();
        } else {
          sem_wait(&ps->wake[a->k]); /* a post left from a turn found while spinning only loops again */
        }
      }
    replay_one(ps, i);
    if (j + 1 == end || ps->order[j + 1] != i + 1) {
      atomic_store_explicit(&ps->turn, i + 1, memory_order_release);
      if (i + 1 < ps->t->n)
        sem_post(&ps->wake[ps->t->ev[i + 1].thread]); /* no system call while nobody sleeps on it */
    }
  }
  return NULL;
}

/* The events of the pass on a thread per thread of the log. */
static void replay_threaded(pass_state *ps)
{
  const trace *t = ps->t;
  unsigned nt = (unsigned)t->threads;
  ps->order = xcalloc(t->n ? t->n : 1, sizeof *ps->order);
  memset(ps->start, 0, sizeof ps->start);
  for (size_t i = 0; i < t->n; i++)
    ps->start[t->ev[i].thread + 1]++;
  for (unsigned k = 0; k < nt; k++)
    ps->start[k + 1] += ps->start[k];
  size_t fill[REPLAY_MAX_THREADS];
  memcpy(fill, ps->start, sizeof fill);
  for (size_t i = 0; i < t->n; i++)
    ps->order[fill[t->ev[i].thread]++] = i;
  atomic_store(&ps->turn, 0);
  /* With a CPU for each replaying thread, a waiting thread first checks
   * the turn for a while, which passes in the time a cache line crosses
   * between cores, then sleeps on its semaphore, posted when the turn
   * passes to it: other programs may want the CPUs too.  With fewer CPUs
   * than threads it sleeps at once: spinning would hold the CPU the thread
   * whose turn it is waits for, and yielding it leaves that thread to the
   * scheduler's next slice (a log of six threads replayed on two CPUs at
   * about 1 ms an event so). */
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
#ifdef CPU_COUNT
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    cpus = CPU_COUNT(&set); /* the CPUs this process may run on */
#endif
  ps->spin = cpus > 0 && (long)nt <= cpus ? 1u << 14 : 0;
  for (unsigned k = 0; k < nt; k++)
    sem_init(&ps->wake[k], 0, 0);
  ps->progress = 0; /* the progress line is one thread's */
  pthread_t th[REPLAY_MAX_THREADS];
  replay_thread_arg arg[REPLAY_MAX_THREADS];
  for (unsigned k = 0; k < nt; k++) {
    arg[k] = (replay_thread_arg){ ps, k };
    if (pthread_create(&th[k], NULL, replay_thread, &arg[k]) != 0) {
      fprintf(stderr, PROG ": %s: no thread to replay the log's thread %u of %u on\n", t->shown, k + 1, nt);
      exit(1);
    }
  }
  for (unsigned k = 0; k < nt; k++)
    pthread_join(th[k], NULL);
  for (unsigned k = 0; k < nt; k++)
    sem_destroy(&ps->wake[k]);
  free(ps->order);
  ps->order = NULL;
}

/* One pass of the whole trace; returns its time in ns (the finish included,
 * the cleanup of what the trace leaves live excluded).  With `held`, samples
 * the backend's bytes held after every event into *held.  With `snapshot`,
 * writes the snapshot file after the event where live bytes reach the
 * trace's peak.  With --threads and a log of several threads, the events
 * run on a thread per thread of the log, and *cpu is the wall time (the
 * threads' CPU time would count their waiting for the turn). */
static double replay_pass(const trace *t, const backend *b, CUdeviceptr *slot, const CUstream *streams,
                          CUevent *lag_ev, const position *pos, size_t *oom, size_t *held, int snapshot,
                          double *cpu)
{
  pass_state ps = { .t = t, .b = b, .slot = slot, .streams = streams, .lag_ev = lag_ev, .pos = pos,
                    .sample = held && b->held_sample, .snapshot = snapshot, .progress = 1 };
  int threaded = opt_threads && t->threads > 1;
  if (snapshot && t->n == 0)
    snapshot_write(t, b, 0);
  double t0 = now_ns(), c0 = cpu_ns(); /* the CPU interval inside the wall clock's */
  if (threaded)
    replay_threaded(&ps);
  else
    for (size_t i = 0; i < t->n; i++)
      replay_one(&ps, i);
  CHECK(b->finish());
  double c1 = cpu_ns(), ns = now_ns() - t0;
  if (cpu)
    *cpu = threaded ? ns : c1 - c0;
  if (held)
    *held = ps.peak;
  *oom = ps.ooms;
  /* What the trace leaves live, freed in the order it was allocated. */
  for (size_t i = 0; i < t->n; i++) {
    const event *e = &t->ev[i];
    if (!e->is_free && slot[e->slot]) {
      CHECK(b->free(slot[e->slot], (size_t)e->size, streams[e->stream]));
      slot[e->slot] = 0;
    }
  }
  CHECK(b->finish());
  return ns;
}

/* A model backend: the log placed on paper, no pass on the GPU, no time. */
static result replay_on_paper(const trace *t, const backend *b)
{
  result res = { .t = t, .b = b, .ns_per_event = -1, .held_known = 1 };
  replay_model_result mr;
  int rc = replay_model_run(t, (replay_model)b->model, &mr);
  if (rc == REPLAY_MODEL_TOO_LARGE) {
    progress_clear();
    res.skipped = "its blocks reach past 16 TiB of address space";
    printf("%-16s skipped: %s placed so (sizes no GPU holds)\n", b->name, res.skipped);
    return res;
  }
  if (rc != REPLAY_MODEL_OK) {
    fprintf(stderr, PROG ": out of host memory placing %s with %s\n", t->shown, b->name);
    exit(1);
  }
  res.held = mr.held;
  printf("%-16s %zu events, placed on paper (no GPU, no time); peak live %zu bytes, peak held %zu, footprint ",
         b->name, t->n, t->peak_live, res.held);
  if (t->peak_live)
    printf("%.2f", (double)res.held / (double)t->peak_live);
  else
    printf("n/a");
  /* What holding only those pages would cost: each page coming into use
   * is a mapping (cuMemMap and cuMemSetAccess, tens of microseconds on a
   * GPU), made while the program waits for its block. */
  if (b->model == REPLAY_MODEL_PAGES)
    printf("; pages mapped %zu times", mr.page_maps);
  printf("\n");
  fflush(stdout);
  return res;
}

static result replay(const trace *t, const backend *b, int backend_no, int nbackends, int reps, int snapshot)
{
  if (b->model >= 0)
    return replay_on_paper(t, b);
  result res = { .t = t, .b = b };
  position pos = { .backend = b->name, .backend_no = backend_no, .backends = nbackends };
  if (b->setup && (res.skipped = b->setup()) != NULL) {
    progress_clear();
    printf("%-16s skipped: %s\n", b->name, res.skipped);
    return res;
  }
  CUstream streams[REPLAY_MAX_STREAMS];
  for (size_t i = 0; i < t->streams; i++) {
    if (t->stream_ids[i] == 0)
      streams[i] = NULL; /* the legacy default stream */
    else if (t->stream_ids[i] == 2)
      streams[i] = CU_STREAM_PER_THREAD;
    else
      CHECK(drv.StreamCreate(&streams[i], CU_STREAM_NON_BLOCKING));
  }
  CUdeviceptr *slot = xcalloc(t->slots, sizeof *slot);
  CUevent *lag_ev = NULL;
  if (opt_lag) {
    lag_ev = xcalloc(opt_lag, sizeof *lag_ev);
    for (unsigned k = 0; k < opt_lag; k++)
      CHECK(drv.EventCreate(&lag_ev[k], CU_EVENT_DISABLE_TIMING));
  }
  size_t oom = 0, held = 0;
  if (b->held_begin)
    b->held_begin();
  snprintf(pos.pass, sizeof pos.pass, "the pass measuring bytes held");
  replay_pass(t, b, slot, streams, lag_ev, &pos, &oom, &held, snapshot, NULL);
  res.held_known = b->held_sample != NULL;
  if (b->held_peak)
    res.held_known = b->held_peak(&held);
  res.held = held;
  res.oom = oom;
  snprintf(pos.pass, sizeof pos.pass, "the warm-up pass");
  replay_pass(t, b, slot, streams, lag_ev, &pos, &oom, NULL, 0, NULL);
  double v[64], cpu[64];
  uint64_t cnt[65][COUNTERS]; /* before each timed pass, and after the last */
  for (int r = 0; r < reps; r++) {
    snprintf(pos.pass, sizeof pos.pass, "timed pass %d of %d", r + 1, reps);
    if (b->is_cuemm)
      cuemm_counters(cnt[r]);
    v[r] = replay_pass(t, b, slot, streams, lag_ev, &pos, &oom, NULL, 0, &cpu[r]);
    if (oom > res.oom)
      res.oom = oom;
  }
  if (b->is_cuemm)
    cuemm_counters(cnt[reps]);
  if (b->held_all)
    res.held_all_known = b->held_all(&res.held_all);
  double each[64]; /* in the order run: median() sorts v */
  memcpy(each, v, (size_t)reps * sizeof each[0]);
  res.ns_per_event = t->n ? median(v, reps) / (double)t->n : 0;
  free(slot);
  for (unsigned k = 0; lag_ev && k < opt_lag; k++)
    CHECK(drv.EventDestroy(lag_ev[k]));
  free(lag_ev);
  /* The manager first: its caches name the streams. */
  if (b->teardown)
    b->teardown();
  for (size_t i = 0; i < t->streams; i++)
    if (t->stream_ids[i] != 0 && t->stream_ids[i] != 2)
      CHECK(drv.StreamDestroy(streams[i]));
  progress_clear();
  char held_s[32] = "n/a", foot_s[32] = "n/a";
  if (res.held_known) {
    snprintf(held_s, sizeof held_s, "%zu", res.held);
    if (t->peak_live)
      snprintf(foot_s, sizeof foot_s, "%.2f", (double)res.held / (double)t->peak_live);
  }
  printf("%-16s %zu events, %.1f ns/event; peak live %zu bytes, peak held %s, footprint %s; out of memory %zu\n",
         b->name, t->n, res.ns_per_event, t->peak_live, held_s, foot_s, res.oom);
  if (reps > 1 && t->n) {
    /* Each pass, in order: whether a figure is the host's spell or the
     * allocator's own shows in how the passes spread. */
    printf("#   timed passes, ns/event:");
    for (int r = 0; r < reps; r++)
      printf(" %.1f", each[r] / (double)t->n);
    printf("\n");
    /* The same passes on the thread's CPU clock: a pass slow on the wall
     * clock but not on this one lost its time to the host, not to the
     * backend (the driver's own threads are not counted here). */
    printf("#   the same passes' CPU time of the replaying thread, ns/event:");
    for (int r = 0; r < reps; r++)
      printf(" %.1f", cpu[r] / (double)t->n);
    printf("\n");
    if (b->is_cuemm) {
      /* The driver calls a pass made, by kind: a slow pass that made some
       * is the allocator's; one that made none, the host's. */
      static const char *const what[COUNTERS] = { "pool growths", "releases", "stream events", "reclaims" };
      printf("#   the same passes' driver work:");
      for (int k = 0; k < COUNTERS; k++) {
        printf("%s %s", k ? ";" : "", what[k]);
        for (int r = 0; r < reps; r++)
          printf(" %llu", (unsigned long long)(cnt[r + 1][k] - cnt[r][k]));
      }
      printf("\n");
    }
  }
  /* The figure above is the first pass's, from a backend that held
   * nothing; each later pass starts from what the ones before left. */
  if (res.held_all_known && t->peak_live)
    printf("#   every pass (%d): peak held %zu, footprint %.2f\n", reps + 2, res.held_all,
           (double)res.held_all / (double)t->peak_live);
  fflush(stdout);
  return res;
}

/* Allocations that failed out of memory make the figures of their replays
 * leave them out: said on stderr, each log and backend with its count, and
 * the exit status 3.  Returns the exit status. */
static int oom_report(const result *res, int n)
{
  size_t total = 0, peak = 0;
  for (int i = 0; i < n; i++)
    if (!res[i].skipped && res[i].oom) {
      total += res[i].oom;
      if (res[i].t->peak_live > peak)
        peak = res[i].t->peak_live;
      fprintf(stderr, PROG ": %s: %s: %zu allocation%s failed out of memory (the log's peak of live bytes is "
              "%.0f MiB, the device has %.0f MiB)\n", res[i].t->shown, res[i].b->name, res[i].oom,
              res[i].oom == 1 ? "" : "s", (double)res[i].t->peak_live / MiB, (double)device_total / MiB);
    }
  if (!total)
    return 0;
  fprintf(stderr, PROG ": %zu allocation%s failed out of memory in all: the figures of those replays leave them "
          "out\n", total, total == 1 ? "" : "s");
  if (on_simcuda) {
    size_t gib = ((peak >> 30) + 1) * 2; /* twice the peak, and an H100's 80 GiB at least */
    fprintf(stderr, PROG ": on simcuda a device has the memory SIMCUDA_CAPACITY says (1 GiB when unset): run "
            "again with SIMCUDA_CAPACITY=%zuG, say (simcuda backs only the memory written, and a replay writes none)\n",
            gib > 80 ? gib : 80);
  }
  return 3;
}

static __attribute__((format(printf, 1, 2), noreturn)) void bad_usage(const char *fmt, ...);

/* Parses --backends LIST into sel (indices into backends, in the order
 * named); returns how many. */
static int parse_backends(const char *list, int *sel)
{
  int n = 0;
  char *copy = strdup(list), *save = NULL;
  if (!copy) {
    fprintf(stderr, PROG ": out of host memory\n");
    exit(1);
  }
  if (!*list)
    bad_usage("--backends needs a list of names: cuMemAlloc, cuMemAllocAsync, cuemm-async, cuemm-deferred, "
              "cuemm (both cuemm-*), all (those four), model-first-fit, model-best-fit, model-pages, "
              "model-foresight, models (those four), none");
  for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    int first = -1, last = -1;
    for (int k = 0; k < MAX_BACKENDS; k++)
      if (strcasecmp(tok, backends[k].name) == 0)
        first = last = k;
    if (strcasecmp(tok, "cuemm") == 0)
      first = 2, last = 3;
    else if (strcasecmp(tok, "all") == 0)
      first = 0, last = ALLOCATORS - 1;
    else if (strcasecmp(tok, "models") == 0)
      first = ALLOCATORS, last = ALLOCATORS + MODELS - 1;
    if (first < 0)
      bad_usage("--backends: no backend '%s' (the backends: cuMemAlloc, cuMemAllocAsync, cuemm-async, "
                "cuemm-deferred; cuemm for both cuemm-*, all for those four; the models model-first-fit, "
                "model-best-fit, model-pages, model-foresight; models for those four; none)", shown(tok));
    for (int k = first; k <= last; k++) {
      for (int j = 0; j < n; j++)
        if (sel[j] == k)
          bad_usage("--backends: %s is named twice", backends[k].name);
      sel[n++] = k;
    }
  }
  free(copy);
  if (n == 0)
    bad_usage("--backends needs at least one name, not '%s'", shown(list));
  return n;
}

static const char help_text[] =
    "Usage: " PROG " [OPTION]... LOG...\n"
    "Replays allocation logs on the GPU through cuemm, with the CUEMM_* settings of\n"
    "the environment, and through the driver's cuMemAlloc/cuMemFree and\n"
    "cuMemAllocAsync/cuMemFreeAsync for comparison.  For each log and backend it\n"
    "prints the events replayed, the log's peak of live bytes, the peak of bytes\n"
    "held from the driver, their ratio (the footprint), the time per event (the\n"
    "median of the timed passes) and the allocations that failed out of memory; a\n"
    "table of them all ends the run.\n"
    "\n"
    "LOG is a CSV file (- for standard input) as RMM's logging_resource_adaptor\n"
    "writes it (Thread,Time,Action,Pointer,Size,Stream) or as cuemm writes it\n"
    "(CUEMM_LOG: the same, then Seq,Manager,Call,Held,Events).  Columns are found by\n"
    "name; RMM's six are required.  With a Seq column the rows are replayed in Seq\n"
    "order; with several managers in the Manager column, one manager's rows.  Each\n"
    "stream of the log is replayed on a stream of its own (0 and 0x1: the legacy\n"
    "default stream, 0x2: the per-thread one); pointers are remapped.\n"
    "\n"
    "Options:\n"
    "  --backends LIST        the backends to run, comma-separated, in that order:\n"
    "                         cuMemAlloc, cuMemAllocAsync, cuemm-async\n"
    "                         (cuemm_allocate_async/cuemm_free_async), cuemm-deferred\n"
    "                         (cuemm_allocate/cuemm_free); cuemm: both cuemm ones;\n"
    "                         all: those four (the default); the models, which\n"
    "                         place the log on paper (no GPU, no time), ignoring\n"
    "                         streams: model-first-fit (lowest address),\n"
    "                         model-best-fit (smallest fit), model-pages (first\n"
    "                         fit holding only the 2 MiB pages live blocks\n"
    "                         touch), model-foresight (every block's life known:\n"
    "                         largest or heaviest first, each at the lowest\n"
    "                         address free all its life, or as a fit does);\n"
    "                         models: those four; none: no allocator\n"
    "                         (addresses nobody uses, frees that do nothing): the\n"
    "                         replay's own time per event\n"
    "  --manager N            replay manager N's rows of a cuemm log (default: the\n"
    "                         first manager in replay order)\n"
    "  --reps R               timed passes per backend, 1 to 64 (default 5): the\n"
    "                         median, and each pass's on a line of its own, by\n"
    "                         the wall clock and by the thread's CPU clock\n"
    "  --quick                one timed pass (--reps 1)\n"
    "  --threads              replay each thread of the log (Thread column) on a\n"
    "                         thread of its own, one row at a time in the log's\n"
    "                         order, so that thread caches and frees of other\n"
    "                         threads' blocks happen as in the program (the time\n"
    "                         per event then counts the hand-overs)\n"
    "  --lag N                the GPU runs N allocations (1 to 4096) behind the\n"
    "                         program: each allocation queues a fill of its block\n"
    "                         (1 byte on simcuda) on its stream and an event, and\n"
    "                         the replay waits for the event of N allocations\n"
    "                         before, so blocks come back while their streams\n"
    "                         still have work queued (on simcuda its queue mode\n"
    "                         is turned on); the time per event then counts the\n"
    "                         waits\n"
    "  --snapshot FILE        write the first cuemm backend's snapshot\n"
    "                         (cuemm_snapshot_take, as JSON) into FILE at the event\n"
    "                         where live bytes reach the log's peak; one LOG only\n"
    "  --progress-interval S  seconds before the first progress line and between\n"
    "                         lines (default: 1 s, then every 0.2 s in place on a\n"
    "                         terminal, else every 5 s); 0: at every check\n"
    "  -q, --quiet            no progress line\n"
    "  -h, --help             this text, then exit\n"
    "  --version              the versions of " PROG " and of its libcuemm\n"
    "\n"
    "Each backend makes one untimed pass measuring the bytes held, one warm-up pass,\n"
    "then the timed passes, each ended by a synchronization of the context.  Bytes\n"
    "held: cuMemAlloc: device memory used above the start (cuMemGetInfo after every\n"
    "event); cuMemAllocAsync: the default pool's reserved high-water mark; cuemm:\n"
    "the pool's mapped bytes plus the requests it gave to cuMemAlloc.  Those are the\n"
    "first pass's; a line \"#   every pass (N)\" gives the most cuemm and the\n"
    "driver's pool held over all N passes, each starting from what the ones before\n"
    "left, as a program that repeats its work does.\n"
    "\n"
    "The cuemm backends always use the pool (as CUEMM_POOL=vmm) and write no log\n"
    "(CUEMM_LOG is not applied); the output says so when the environment differs.\n"
    "The driver is the one cuemm loads: CUEMM_LIBCUDA, else libcuda.so.1.  On\n"
    "simcuda, the suite's simulated driver, a device has 1 GiB unless\n"
    "SIMCUDA_CAPACITY says more: SIMCUDA_CAPACITY=80G gives it an H100's 80 GiB (its\n"
    "memory is backed only where written, and a replay writes none).\n"
    "\n"
    "Exit status: 0 done; 1 a log unreadable or malformed (the file and line are\n"
    "named), a driver or cuemm call failed, or the snapshot failed; 2 a usage error;\n"
    "3 done, but allocations failed out of memory (stderr says how many, where).\n"
    "Messages show bytes outside printable ASCII of what they quote as \\xNN.\n";

static void usage(void)
{
  fprintf(stderr, "Usage: " PROG " [OPTION]... LOG...\nTry '" PROG " --help' for more.\n");
  exit(2);
}

/* A usage error: the message, then exit 2. */
static void bad_usage(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, PROG ": ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  exit(2);
}

/* The value of option argv[*i] (--opt VALUE or --opt=VALUE), or NULL when
 * argv[*i] is not that option. */
static const char *option_value(int argc, char **argv, int *i, const char *opt)
{
  size_t n = strlen(opt);
  if (strncmp(argv[*i], opt, n) != 0)
    return NULL;
  if (argv[*i][n] == '=')
    return argv[*i] + n + 1;
  if (argv[*i][n] != '\0')
    return NULL;
  if (*i + 1 >= argc)
    bad_usage("%s needs a value", opt);
  return argv[++*i];
}

int main(int argc, char **argv)
{
  int quick = 0, reps = -1, nlogs = 0, options_done = 0, quiet = 0;
  double interval = -1;
  uint32_t want_manager = 0;
  int sel[MAX_BACKENDS] = { 0, 1, 2, 3 }, nsel = ALLOCATORS;
  char **logs = xcalloc((size_t)argc, sizeof *logs);
  for (int i = 1; i < argc; i++) {
    const char *v;
    if (options_done || argv[i][0] != '-' || argv[i][1] == '\0')
      logs[nlogs++] = argv[i];
    else if (strcmp(argv[i], "--") == 0)
      options_done = 1;
    else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      fputs(help_text, stdout);
      free(logs);
      return 0;
    } else if (strcmp(argv[i], "--version") == 0) {
      printf(PROG " (cuemm) %s, on libcuemm %s\n", PACKAGE_VERSION, cuemm_version_string());
      free(logs);
      return 0;
    } else if (strcmp(argv[i], "--quick") == 0)
      quick = 1;
    else if (strcmp(argv[i], "--threads") == 0)
      opt_threads = 1;
    else if ((v = option_value(argc, argv, &i, "--lag")) != NULL) {
      char *end;
      errno = 0;
      long n = strtol(v, &end, 10);
      if (end == v || *end || errno || n < 1 || n > 4096)
        bad_usage("--lag takes 1 to 4096 allocations, not '%s'", shown(v));
      opt_lag = (unsigned)n;
    }
    else if (strcmp(argv[i], "--quiet") == 0 || strcmp(argv[i], "-q") == 0)
      quiet = 1;
    else if ((v = option_value(argc, argv, &i, "--progress-interval")) != NULL) {
      char *end;
      errno = 0;
      interval = strtod(v, &end);
      if (end == v || *end || errno || !(interval >= 0 && interval <= 86400))
        bad_usage("--progress-interval takes seconds, 0 to 86400, not '%s'", shown(v));
    }
    else if ((v = option_value(argc, argv, &i, "--reps")) != NULL) {
      char *end;
      long r = strtol(v, &end, 10);
      if (end == v || *end || r < 1 || r > 64)
        bad_usage("--reps takes 1 to 64, not '%s'", shown(v));
      reps = (int)r;
    } else if ((v = option_value(argc, argv, &i, "--snapshot")) != NULL) {
      if (!*v)
        bad_usage("--snapshot needs a file name");
      snapshot_path = v;
    } else if ((v = option_value(argc, argv, &i, "--backends")) != NULL) {
      nsel = parse_backends(v, sel);
    } else if ((v = option_value(argc, argv, &i, "--manager")) != NULL) {
      uint64_t id;
      int why = replay_parse_dec(v, &id);
      if (why == REPLAY_TOO_LARGE || (why == REPLAY_NUMBER && id > UINT32_MAX))
        bad_usage("--manager %s is too large (at most 4294967295)", shown(v));
      if (why != REPLAY_NUMBER || id < 1)
        bad_usage("--manager takes a manager's number (1, 2, ...), not '%s'", shown(v));
      want_manager = (uint32_t)id;
    } else {
      fprintf(stderr, PROG ": unknown option '%s'\n", shown(argv[i]));
      usage();
    }
  }
  if (nlogs == 0) {
    fprintf(stderr, PROG ": no LOG to replay\n");
    usage();
  }
  int snapshot_backend = -1; /* the index in sel of the backend that writes it */
  if (snapshot_path) {
    if (nlogs > 1)
      bad_usage("--snapshot writes one file: give one LOG, not %d", nlogs);
    for (int k = 0; k < nsel && snapshot_backend < 0; k++)
      if (backends[sel[k]].is_cuemm)
        snapshot_backend = k;
    if (snapshot_backend < 0)
      bad_usage("--snapshot needs a cuemm backend (cuemm-async or cuemm-deferred) in --backends");
  }
  if (reps < 0)
    reps = quick ? 1 : 5;
  progress_init(quiet, interval);
  /* Every log is read before the device is touched: a bad line stops the
   * run at once. */
  trace *traces = xcalloc((size_t)nlogs, sizeof *traces);
  for (int i = 0; i < nlogs; i++)
    trace_load(&traces[i], logs[i], want_manager);

  if (snapshot_path) {
    struct stat st;
    snapshot_created = stat(snapshot_path, &st) != 0 && errno == ENOENT;
    if (!(snapshot_file = fopen(snapshot_path, "w"))) {
      fprintf(stderr, PROG ": --snapshot %s: %s\n", shown(snapshot_path), strerror(errno));
      exit(1);
    }
  }

  cuemm_driver_info info;
  char devname[128];
  driver_load(&info);
  CHECK(drv.DeviceGet(&dev, 0));
  CHECK(drv.DeviceGetName(devname, sizeof devname, dev));
  CHECK(drv.DevicePrimaryCtxRetain(&ctx, dev));
  CHECK(drv.CtxSetCurrent(ctx));
  size_t free_now;
  CHECK(drv.MemGetInfo(&free_now, &device_total));
  printf("# " PROG ": cuemm %s, %s, driver %d (%s)\n", cuemm_version_string(), devname, info.version, shown(info.path));
  printf("# each backend: one pass measuring bytes held, one warm-up pass, then the median of %d timed pass%s\n",
         reps, reps == 1 ? "" : "es");
  if (opt_lag)
    printf("# --lag %u: the GPU runs %u allocations behind (a fill of the block and an event queued after each)%s; "
           "the time per event counts the waits\n", opt_lag, opt_lag,
           lag_simulated ? ", simcuda's queue mode on, fills of 1 byte" : "");
  for (int k = 0; k < nsel; k++)
    if (backends[sel[k]].is_cuemm) {
      cuemm_config_read();
      break;
    }
  result *res = xcalloc((size_t)nlogs * (size_t)nsel, sizeof *res);
  for (int i = 0; i < nlogs; i++) {
    trace_print(&traces[i]);
    for (int k = 0; k < nsel; k++)
      res[i * nsel + k] = replay(&traces[i], &backends[sel[k]], k + 1, nsel, reps, k == snapshot_backend);
  }

  printf("\n## summary (held: cuMemAlloc = device memory used above the start, cuMemGetInfo; cuMemAllocAsync = "
         "the pool's reserved high-water mark; cuemm = cuemm_get_held: the pool's mapped bytes and cuMemAlloc "
         "allocations, freed ones until their flush)\n");
  printf("%-28s %-16s %10s %8s %12s %14s %14s %9s %5s\n", "trace", "backend", "events", "streams", "ns/event",
         "peak live", "peak held", "footprint", "oom");
  for (int i = 0; i < nlogs * nsel; i++) {
    const result *r = &res[i];
    const char *name = strrchr(r->t->shown, '/');
    name = name ? name + 1 : r->t->shown;
    if (r->skipped) {
      printf("%-28s %-16s %10s %8s %12s %14zu %14s %9s %5s\n", name, r->b->name, "skipped", "-", "-", r->t->peak_live,
             "-", "-", "-");
      continue;
    }
    char held[32] = "n/a", foot[32] = "n/a";
    if (r->held_known) {
      snprintf(held, sizeof held, "%zu", r->held);
      if (r->t->peak_live)
        snprintf(foot, sizeof foot, "%.2f", (double)r->held / (double)r->t->peak_live);
    }
    char ns[32] = "-";
    if (r->ns_per_event >= 0)
      snprintf(ns, sizeof ns, "%.1f", r->ns_per_event);
    printf("%-28s %-16s %10zu %8zu %12s %14zu %14s %9s %5zu\n", name, r->b->name, r->t->n, r->t->streams, ns,
           r->t->peak_live, held, foot, r->oom);
  }
  fflush(stdout);
  int status = oom_report(res, nlogs * nsel);
  for (int i = 0; i < nlogs; i++)
    replay_trace_free(&traces[i]);
  free(traces), free(res), free(logs);
  CHECK(drv.CtxSetCurrent(NULL));
  CHECK(drv.DevicePrimaryCtxRelease(dev));
  return status;
}
