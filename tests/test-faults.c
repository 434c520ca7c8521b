/* test-faults.c: every driver call of whole scenarios failing in turn.
 *
 * Each scenario (a manager's life with host memory and defer scopes; the
 * pool's growth, frees, release and trim; IPC export, send, open and close
 * of cuMemAlloc memory and of pool blocks between two processes) runs once
 * with simcuda's counters to learn how many calls of each entry point it
 * makes; then, for every entry point E called c times and every N in 1..c,
 * again with the Nth call of E failing.  At every such fault point: nothing
 * crashes; the call that fails returns an error with a message of its own
 * (not left over from an earlier call); with the fault cleared, the manager
 * still allocates and frees; and once it is destroyed, simcuda holds no more
 * objects than before (except what cuemm_destroy documents as leaked when a
 * driver free fails during the destroy itself: that its message says so).
 *
 * The importing side of IPC runs in a second process (fork and exec of this
 * program with --child): cuemm_ipc_open refuses a handle of its own
 * process.  Its calls are swept there, the child arming the fault and
 * reporting its own counts.  One check per entry point and scenario, naming
 * the failing N of any point that went wrong.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sim-internal.h"
#include "testproc.h"
#include "testutil.h"

#define MiB ((size_t)1 << 20)
#define NENTRIES SIM_EP_COUNT

static const char *entries[NENTRIES] = {
#define ENTRY_NAME(n, since, fl) #n,
  SIM_ENTRY_POINTS(ENTRY_NAME)
#undef ENTRY_NAME
};

/* ---- one run of a scenario ---------------------------------------------------- */

typedef struct run {
  cuemm_manager *m;        /* left for the cleanup (NULL: none, or destroyed) */
  CUresult failed;         /* the first failure, or CUDA_SUCCESS */
  char step[96];           /* which step failed */
  char msg[320];           /* cuemm_last_error() after it */
  int msg_ok;              /* the message is the failing call's own */
  int leak_documented;     /* cuemm_destroy said a driver free failed and leaked */
  int own;                 /* the failing step was the test's own driver call */
} run;

static char sentinel_msg[128];

/* Leaves a known message, so that a failing call that sets none shows. */
static void sentinel(void)
{
  cuemm_defer_cleanup_end(NULL);
}

static void failed_at(run *r, const char *step, CUresult res, int cuemm_call)
{
  r->failed = res;
  snprintf(r->step, sizeof r->step, "%s", step);
  snprintf(r->msg, sizeof r->msg, "%s", cuemm_last_error());
  r->own = !cuemm_call;
  r->msg_ok = !cuemm_call || (r->msg[0] != '\0' && strcmp(r->msg, sentinel_msg) != 0);
}

/* A cuemm call: stop the scenario at its failure. */
#define STEP(r, call)                                                          \
  do {                                                                         \
    sentinel();                                                                \
    CUresult step_r = (call);                                                  \
    if (step_r != CUDA_SUCCESS) {                                              \
      failed_at((r), #call, step_r, 1);                                        \
      return;                                                                  \
    }                                                                          \
  } while (0)

/* The test's own driver call (no cuemm message to check). */
#define DSTEP(r, call)                                                         \
  do {                                                                         \
    CUresult step_r = (call);                                                  \
    if (step_r != CUDA_SUCCESS) {                                              \
      failed_at((r), #call, step_r, 0);                                        \
      return;                                                                  \
    }                                                                          \
  } while (0)

/* The scenario's own destroy: on failure the manager is intact (the context
 * could not be entered: the message says it changed nothing) or gone, with
 * any leak named in the message. */
static void destroy_step(run *r)
{
  sentinel();
  CUresult res = cuemm_destroy(r->m);
  if (res == CUDA_SUCCESS) {
    r->m = NULL;
    /* A leak the destroy could only report (an event it could not destroy). */
    r->leak_documented = strstr(cuemm_last_error(), "leaked") != NULL;
    if (r->leak_documented)
      snprintf(r->msg, sizeof r->msg, "%s", cuemm_last_error());
    return;
  }
  failed_at(r, "cuemm_destroy(m)", res, 1);
  if (strstr(r->msg, "cuemm_destroy changed nothing"))
    return;
  r->m = NULL;
  r->leak_documented = strstr(r->msg, "leaked") != NULL;
}

/* ---- scenarios -------------------------------------------------------------- */

static unsigned char pin_buf[256 * 1024] __attribute__((aligned(4096)));

static CUcontext primary;

/* (a) A manager's life: device and host memory, pinned ranges, defer scopes,
 * threshold flushes, reset, destroy with memory still live.  No context is
 * current on the thread, so that every call pushes the manager's and pops
 * it again. */
static void scen_life(run *r)
{
  cuemm_config c = test_config(2, 1.0);
  DSTEP(r, cuCtxSetCurrent(NULL));
  STEP(r, cuemm_manager_create(primary, &c, &r->m));
  CUdeviceptr d1, d2, d3, d4, dp;
  void *h1, *h2;
  STEP(r, cuemm_allocate(r->m, 4096, &d1));
  STEP(r, cuemm_allocate(r->m, 8192, &d2));
  STEP(r, cuemm_host_allocate(r->m, 4096, CU_MEMHOSTALLOC_DEVICEMAP, &h1));
  STEP(r, cuemm_host_device_pointer(r->m, h1, &dp));
  STEP(r, cuemm_host_pin(r->m, pin_buf, sizeof pin_buf, 0));
  STEP(r, cuemm_host_unpin(r->m, pin_buf));
  STEP(r, cuemm_host_pin(r->m, pin_buf, sizeof pin_buf, CU_MEMHOSTREGISTER_DEVICEMAP));
  STEP(r, cuemm_defer_cleanup_begin(r->m));
  STEP(r, cuemm_free(r->m, d1));
  STEP(r, cuemm_host_free(r->m, h1));
  STEP(r, cuemm_flush(r->m));
  STEP(r, cuemm_defer_cleanup_end(r->m));
  STEP(r, cuemm_free(r->m, d2)); /* the third pending: a flush */
  STEP(r, cuemm_allocate(r->m, 1000, &d3));
  STEP(r, cuemm_reset(r->m));
  STEP(r, cuemm_allocate(r->m, 3000, &d4));
  STEP(r, cuemm_host_allocate(r->m, 100, 0, &h2));
  size_t fr, tot;
  STEP(r, cuemm_get_memory_info(r->m, &fr, &tot));
  STEP(r, cuemm_free(r->m, d4));
  destroy_step(r); /* h2 still live */
}

static cuemm_config pool_config(int ipc)
{
  cuemm_config c = test_config(2, 1.0);
  c.pool = CUEMM_POOL_VMM;
  c.pool_chunk = 2 * MiB;
  c.pool_reserve = 64 * MiB;
  c.pool_release_threshold = 0;
  c.pool_limit = 16 * MiB;
  c.pool_ipc = ipc;
  return c;
}

/* (b) The pool: growth in two steps, frees, the release after a flush, the
 * cuMemAlloc fallback, trim, destroy with a block live. */
static void scen_pool(run *r)
{
  cuemm_config c = pool_config(0);
  STEP(r, cuemm_manager_create(NULL, &c, &r->m));
  CUdeviceptr a, b, d, e, big;
  STEP(r, cuemm_allocate(r->m, 1 * MiB, &a));
  STEP(r, cuemm_allocate(r->m, 3 * MiB, &b));
  STEP(r, cuemm_allocate(r->m, 100, &d));
  STEP(r, cuemm_free(r->m, a));
  STEP(r, cuemm_free(r->m, b));
  STEP(r, cuemm_free(r->m, d)); /* flush: synchronize, give back, release */
  STEP(r, cuemm_allocate(r->m, 5 * MiB, &e));
  STEP(r, cuemm_allocate(r->m, 20 * MiB, &big));
  STEP(r, cuemm_free(r->m, big));
  STEP(r, cuemm_flush(r->m));
  STEP(r, cuemm_pool_trim(r->m));
  STEP(r, cuemm_allocate(r->m, 1 * MiB, &a));
  STEP(r, cuemm_free(r->m, e));
  destroy_step(r); /* a still live */
}

/* (d) The stream-ordered path: same-stream reuse, a block taken by another
 * stream after its event (created, recorded, queried), record_stream's
 * wait, a growth, a free through the deferred path, a stream released,
 * trim, destroy with a block live.  The streams are the test's, made once
 * outside the sweep. */
static CUstream fs1, fs2;

static void scen_stream(run *r)
{
  cuemm_config c = pool_config(0);
  c.pool_release_delay_ms = 0;
  STEP(r, cuemm_manager_create(NULL, &c, &r->m));
  CUdeviceptr a, b, d, e;
  STEP(r, cuemm_allocate_async(r->m, 1 * MiB, fs1, &a));
  STEP(r, cuemm_allocate_async(r->m, 3 * MiB, fs1, &b));
  STEP(r, cuemm_free_async(r->m, a, fs1));
  STEP(r, cuemm_allocate_async(r->m, 1 * MiB, fs1, &a));
  STEP(r, cuemm_free_async(r->m, a, fs1));
  STEP(r, cuemm_free_async(r->m, b, fs1));
  STEP(r, cuemm_allocate_async(r->m, 1 * MiB, fs2, &d)); /* s1's batch: an event */
  STEP(r, cuemm_record_stream(r->m, d, fs1));
  STEP(r, cuemm_free_async(r->m, d, fs2));           /* s2 waits for s1 */
  STEP(r, cuemm_allocate_async(r->m, 6 * MiB, fs2, &e));
  STEP(r, cuemm_free(r->m, e));
  STEP(r, cuemm_flush(r->m));
  STEP(r, cuemm_stream_release(r->m, fs1));
  STEP(r, cuemm_pool_trim(r->m));
  STEP(r, cuemm_allocate_async(r->m, 1 * MiB, fs2, &a));
  destroy_step(r); /* a still live */
}

/* ---- IPC: the exporter here, the importer in a child -------------------------- */

typedef struct request {
  int op;                 /* OP_ROUND or OP_EXIT */
  char fault[40];         /* the child's fault: entry point ("" none) */
  unsigned nth;
  CUresult result;
} request;

enum { OP_ROUND = 1, OP_EXIT = 2 };

typedef struct report {
  CUresult failed;
  char step[96];
  char msg[320];
  int msg_ok, live_ok, usable_ok;
  unsigned long calls[NENTRIES];
} report;

static int sock = -1;
static pid_t child_pid;
static request cur_req;  /* what the parent asks of the child this round */
static report last_report;
static int child_lost;

/* One slot: a marker byte, then (marker 1) a message of cuemm_ipc_handle_send, or
 * 128 zero bytes where that send failed, which the child refuses.  The
 * failed send's message stays the thread's last error. */
static CUresult send_slot(cuemm_manager *m, const cuemm_ipc_handle *h)
{
  unsigned char mark = h != NULL;
  if (write_full(sock, &mark, 1) != 0)
    return CUDA_ERROR_OPERATING_SYSTEM;
  if (!h)
    return CUDA_SUCCESS;
  CUresult res = cuemm_ipc_handle_send(m, h, sock);
  if (res != CUDA_SUCCESS) {
    static const unsigned char zero[CUEMM_IPC_HANDLE_SIZE];
    write_full(sock, zero, sizeof zero);
  }
  return res;
}

/* Asks the child for a round, sends it the handles (NULL: none) and reads
 * its report.  The result is the first failed send's. */
static CUresult exchange(cuemm_manager *m, const cuemm_ipc_handle *h1, const cuemm_ipc_handle *h2)
{
  if (write_full(sock, &cur_req, sizeof cur_req) != 0) {
    child_lost = 1;
    return CUDA_SUCCESS;
  }
  sentinel();
  CUresult res = send_slot(m, h1);
  CUresult res2 = send_slot(m, res == CUDA_SUCCESS ? h2 : NULL);
  if (res == CUDA_SUCCESS)
    res = res2;
  if (read_full(sock, &last_report, sizeof last_report) != 0)
    child_lost = 1;
  return res;
}

/* The exporter's first half: memory with known bytes, and its handles. */
static void ipc_export(run *r, CUdeviceptr *p, CUdeviceptr *dv, cuemm_ipc_handle *hp, cuemm_ipc_handle *hd)
{
  cuemm_config c = pool_config(1);
  STEP(r, cuemm_manager_create(NULL, &c, &r->m));
  STEP(r, cuemm_allocate(r->m, 1 * MiB, p));
  STEP(r, cuemm_allocate(r->m, 20 * MiB, dv)); /* past the pool's limit: cuMemAlloc */
  DSTEP(r, cuMemsetD8(*p, 0xa5, 4096));
  DSTEP(r, cuMemsetD8(*dv, 0x5a, 4096));
  STEP(r, cuemm_ipc_export(r->m, *p, 0, hp));
  STEP(r, cuemm_ipc_export(r->m, *dv, 0, hd));
}

/* (c) The exporter: a pool block and a cuMemAlloc allocation, exported,
 * sent, opened and read by the child, freed after it has closed them. */
static void scen_ipc(run *r)
{
  CUdeviceptr p = 0, dv = 0;
  cuemm_ipc_handle hp, hd;
  ipc_export(r, &p, &dv, &hp, &hd);
  if (r->failed != CUDA_SUCCESS) {
    exchange(r->m, NULL, NULL);
    return;
  }
  CUresult res = exchange(r->m, &hp, &hd);
  if (res != CUDA_SUCCESS) {
    failed_at(r, "cuemm_ipc_send", res, 1);
    return;
  }
  STEP(r, cuemm_free(r->m, p));
  STEP(r, cuemm_free(r->m, dv));
  destroy_step(r);
}

/* The importer's round: receive, open, read, close; then report. */
static void child_round(const request *q)
{
  report a;
  memset(&a, 0, sizeof a);
  run r;
  memset(&r, 0, sizeof r);
  size_t live0 = sim.live_count();
  sim.calls_reset();
  if (q->fault[0])
    sim.fail(q->fault, q->nth, q->result);
  cuemm_ipc_handle h[2];
  int have[2] = { 0, 0 };
  for (int i = 0; i < 2; i++) {
    unsigned char mark = 0;
    if (read_full(sock, &mark, 1) != 0)
      _exit(2);
    if (mark)
      have[i] = cuemm_ipc_recv(sock, &h[i]) == CUDA_SUCCESS;
  }
  static const unsigned char want[2] = { 0xa5, 0x5a };
  int opened[2] = { 0, 0 };
  CUdeviceptr p[2];
  for (int i = 0; i < 2 && r.failed == CUDA_SUCCESS; i++) {
    if (!have[i])
      continue;
    sentinel();
    CUresult res = cuemm_ipc_open(NULL, &h[i], &p[i]);
    if (res != CUDA_SUCCESS) {
      failed_at(&r, i ? "cuemm_ipc_open(device handle)" : "cuemm_ipc_open(pool handle)", res, 1);
      break;
    }
    opened[i] = 1;
    unsigned char back[64];
    res = cuMemcpyDtoH(back, p[i], sizeof back);
    if (res != CUDA_SUCCESS) {
      failed_at(&r, "cuMemcpyDtoH", res, 0);
      break;
    }
    if (back[0] != want[i] || back[63] != want[i]) {
      failed_at(&r, "the bytes read back", CUDA_ERROR_UNKNOWN, 0);
      r.msg_ok = 0;
      break;
    }
    sentinel();
    res = cuemm_ipc_close(NULL, p[i]);
    if (res != CUDA_SUCCESS) {
      failed_at(&r, "cuemm_ipc_close", res, 1);
      break;
    }
    opened[i] = 0;
  }
  for (int i = 0; i < NENTRIES; i++)
    a.calls[i] = sim.calls(entries[i]);
  sim.fail_clear();
  /* Cleanup: close what stays open, drop descriptors never used. */
  for (int i = 0; i < 2; i++) {
    if (opened[i])
      cuemm_ipc_close(NULL, p[i]);
    else if (have[i] && h[i].kind == CUEMM_IPC_KIND_POOL)
      cuemm_ipc_discard(&h[i]);
  }
  cuemm_manager *m = NULL;
  CUdeviceptr t;
  a.usable_ok = cuemm_get(&m) == CUDA_SUCCESS && cuemm_allocate(m, 4096, &t) == CUDA_SUCCESS &&
                cuemm_free(m, t) == CUDA_SUCCESS && cuemm_flush(m) == CUDA_SUCCESS;
  if (m)
    cuemm_destroy(m);
  a.live_ok = sim.live_count() == live0;
  a.failed = r.failed;
  /* The message is the failing call's own, and names the entry point. */
  a.msg_ok = r.failed == CUDA_SUCCESS || (r.msg_ok && (r.own || !q->fault[0] || strstr(r.msg, q->fault)));
  snprintf(a.step, sizeof a.step, "%s", r.step);
  snprintf(a.msg, sizeof a.msg, "%s", r.msg);
  if (write_full(sock, &a, sizeof a) != 0)
    _exit(2);
}

static int child(void)
{
  sim_init();
  test_primary_context(0);
  sentinel();
  snprintf(sentinel_msg, sizeof sentinel_msg, "%s", cuemm_last_error());
  request q;
  while (read_full(sock, &q, sizeof q) == 0 && q.op == OP_ROUND)
    child_round(&q);
  return 0;
}

static void start_child(const char *argv0)
{
  int sp[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp) != 0) {
    printf("Bail out! socketpair: %s\n", strerror(errno));
    exit(1);
  }
  child_pid = spawn_self(argv0, &sp[1], 1, &sp[0], 1);
  close(sp[1]);
  sock = sp[0];
}

static void stop_child(void)
{
  request q = { .op = OP_EXIT };
  write_full(sock, &q, sizeof q);
  close(sock);
  int status = 0;
  waitpid(child_pid, &status, 0);
  ok(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the importing process exits cleanly (status 0x%x)", status);
}

/* ---- the sweep ----------------------------------------------------------------- */

typedef void (*scenario_fn)(run *);

/* The calls of each entry point in the last run, up to the scenario's end. */
static unsigned long scen_calls[NENTRIES];

/* The entry points whose failure cuemm_destroy documents as a leak: a
 * driver free (or unmap) that fails is skipped, the manager being gone. */
static int releasing(const char *entry)
{
  static const char *const names[] = { "cuMemFree", "cuMemFreeHost", "cuMemHostUnregister", "cuMemRelease",
                                        "cuMemUnmap", "cuMemAddressFree", "cuIpcCloseMemHandle", "cuEventDestroy" };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strcmp(entry, names[i]) == 0)
      return 1;
  return 0;
}

/* One run; returns a description of what went wrong ("" when all is well). */
static void run_point(scenario_fn fn, const char *entry, unsigned nth, CUresult err, char *bad, size_t n)
{
  bad[0] = '\0';
  size_t live0 = sim.live_count();
  run r;
  memset(&r, 0, sizeof r);
  r.failed = CUDA_SUCCESS;
  child_lost = 0;
  if (entry)
    sim.fail(entry, nth, err);
  fn(&r);
  for (int i = 0; i < NENTRIES; i++)
    scen_calls[i] = sim.calls(entries[i]);
  sim.fail_clear();
  CHECK_CU(cuCtxSetCurrent(primary));
  if (child_lost) {
    snprintf(bad, n, "the importing process is gone");
    return;
  }
  if (r.failed != CUDA_SUCCESS && !r.msg_ok) {
    snprintf(bad, n, "%s returned %d with the message \"%s\"", r.step, (int)r.failed, r.msg);
    return;
  }
  if (r.failed != CUDA_SUCCESS && entry && r.msg_ok && !r.own && !strstr(r.msg, entry)) {
    snprintf(bad, n, "%s returned %d with a message that does not name %s: \"%s\"", r.step, (int)r.failed, entry,
             r.msg);
    return;
  }
  /* Usable again: one good allocation and free, then the destroy. */
  if (r.m) {
    CUdeviceptr t;
    CUresult a = cuemm_allocate(r.m, 4096, &t), f = a == CUDA_SUCCESS ? cuemm_free(r.m, t) : a;
    CUresult fl = f == CUDA_SUCCESS ? cuemm_flush(r.m) : f;
    if (fl != CUDA_SUCCESS) {
      snprintf(bad, n, "after %s failed, the manager no longer allocates and frees: %s", r.step, cuemm_last_error());
      cuemm_destroy(r.m);
      return;
    }
    CUresult d = cuemm_destroy(r.m);
    if (d != CUDA_SUCCESS) {
      snprintf(bad, n, "after %s failed, the cleanup's destroy failed: %s", r.step, cuemm_last_error());
      return;
    }
  } else if (r.failed != CUDA_SUCCESS && strstr(r.step, "create")) {
    cuemm_config c = test_config(10, 0.2);
    cuemm_manager *m2 = NULL;
    if (cuemm_manager_create(NULL, &c, &m2) != CUDA_SUCCESS) {
      snprintf(bad, n, "after a failed create, no manager can be created: %s", cuemm_last_error());
      return;
    }
    cuemm_destroy(m2);
  }
  size_t live = sim.live_count();
  if (live != live0 && !(r.leak_documented && entry && releasing(entry))) {
    snprintf(bad, n, "%zu simcuda objects left (%zu before; the failure: %s, \"%s\")", live, live0, r.step, r.msg);
    return;
  }
  if (live != live0)
    tap_diag("%s call %u failing: %zu simcuda objects leaked as cuemm_destroy reported: %s", entry, nth,
             live - live0, r.msg);
  if (fn == scen_ipc) {
    /* the importer's side, as it reported it */
    if (!last_report.msg_ok)
      snprintf(bad, n, "importer: %s returned %d with the message \"%s\"", last_report.step,
               (int)last_report.failed, last_report.msg);
    else if (!last_report.usable_ok)
      snprintf(bad, n, "importer: no longer allocates after %s failed", last_report.step);
    else if (!last_report.live_ok)
      snprintf(bad, n, "importer: simcuda objects left after %s failed (\"%s\")", last_report.step,
               last_report.msg);
  }
}

static unsigned long points, documented_leaks;

/* Counts a scenario's calls, then fails each in turn.  `side`: "" for this
 * process, "importer" for the child's calls. */
static void sweep(const char *name, scenario_fn fn, int child_side)
{
  unsigned long calls[NENTRIES];
  char bad[512];
  memset(&cur_req, 0, sizeof cur_req);
  cur_req.op = OP_ROUND;
  sim.calls_reset();
  run_point(fn, NULL, 0, CUDA_SUCCESS, bad, sizeof bad);
  ok(bad[0] == '\0', "%s: the scenario runs clean without faults%s%s", name, bad[0] ? ": " : "", bad);
  for (int i = 0; i < NENTRIES; i++)
    calls[i] = child_side ? last_report.calls[i] : scen_calls[i];
  for (int i = 0; i < NENTRIES; i++) {
    if (!calls[i])
      continue;
    static const CUresult errs[2] = { CUDA_ERROR_UNKNOWN, CUDA_ERROR_OUT_OF_MEMORY };
    int nerr = strcmp(entries[i], "cuMemAlloc") == 0 || strcmp(entries[i], "cuMemHostAlloc") == 0 ||
                       strcmp(entries[i], "cuMemCreate") == 0 ? 2 : 1;
    char first_bad[600] = "";
    unsigned nbad = 0;
    for (int k = 0; k < nerr; k++) {
      for (unsigned nth = 1; nth <= calls[i]; nth++) {
        size_t live_before = sim.live_count();
        if (child_side) {
          snprintf(cur_req.fault, sizeof cur_req.fault, "%s", entries[i]);
          cur_req.nth = nth;
          cur_req.result = errs[k];
          run_point(fn, NULL, 0, CUDA_SUCCESS, bad, sizeof bad);
        } else
          run_point(fn, entries[i], nth, errs[k], bad, sizeof bad);
        points++;
        if (sim.live_count() != live_before)
          documented_leaks += sim.live_count() - live_before;
        if (bad[0] && nbad++ == 0)
          snprintf(first_bad, sizeof first_bad, "call %u failing with %d: %s", nth, (int)errs[k], bad);
      }
    }
    memset(cur_req.fault, 0, sizeof cur_req.fault);
    ok(nbad == 0, "%s: %s failing, each of its %lu calls%s%s%s", name, entries[i], calls[i],
       nerr == 2 ? " (unknown error, then out of memory)" : "", nbad ? "; the first bad point: " : "", first_bad);
    if (nbad > 1)
      tap_diag("%u bad points in all for %s", nbad, entries[i]);
  }
}

/* Found by the sweep: the flush inside cuemm_destroy entered the context a
 * second time, and when that cuCtxGetCurrent failed, destroy dropped the
 * pending frees it had never tried, leaking their memory. */
static void destroy_regression(void)
{
  size_t live0 = sim.live_count();
  cuemm_config c = test_config(10, 0.2);
  cuemm_manager *m;
  CUdeviceptr p;
  CHECK_CU(cuemm_manager_create(NULL, &c, &m));
  CHECK_CU(cuemm_allocate(m, 4096, &p));
  CHECK_CU(cuemm_free(m, p));
  is(test_stats(m).pending_count, 1, "regression: one free pending before the destroy");
  sim.calls_reset();
  sim.fail("cuCtxGetCurrent", 2, CUDA_ERROR_UNKNOWN);
  is(cuemm_destroy(m), CUDA_SUCCESS, "regression: destroy succeeds with cuCtxGetCurrent failing on a second call");
  is(sim.calls("cuCtxGetCurrent"), 1, "regression: destroy enters the context once");
  is(sim.calls("cuMemFree"), 1, "regression: the pending free is released");
  sim.fail_clear();
  is(sim.live_count(), live0, "regression: nothing leaked");
}

int main(int argc, char **argv)
{
  if (argc == 3 && strcmp(argv[1], "--child") == 0) {
    sock = atoi(argv[2]);
    return child();
  }
  if (!sim_init())
    tap_skip_all(SIM_REASON);
  primary = test_primary_context(0);
  CHECK_CU(cuemm_driver_load());
  sentinel();
  snprintf(sentinel_msg, sizeof sentinel_msg, "%s", cuemm_last_error());
  size_t live0 = sim.live_count();

  destroy_regression();
  sweep("life cycle", scen_life, 0);
  sweep("pool", scen_pool, 0);
  CHECK_CU(cuStreamCreate(&fs1, CU_STREAM_NON_BLOCKING));
  CHECK_CU(cuStreamCreate(&fs2, CU_STREAM_NON_BLOCKING));
  sweep("stream-ordered", scen_stream, 0);
  CHECK_CU(cuStreamDestroy(fs1));
  CHECK_CU(cuStreamDestroy(fs2));
  start_child(argv[0]);
  sweep("IPC exporter", scen_ipc, 0);
  sweep("IPC importer", scen_ipc, 1);
  stop_child();

  tap_diag("%lu fault points", points);
  if (documented_leaks)
    tap_diag("%lu simcuda objects leaked where cuemm_destroy said so", documented_leaks);
  is(sim.live_count() - documented_leaks, live0, "simcuda: nothing left but what destroy reported as leaked");
  test_release_primary(0);
  return tap_done();
}
