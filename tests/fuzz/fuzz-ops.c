/* fuzz-ops.c: arbitrary sequences of allocation calls on one manager (with
 * a pool, without one, or of managed memory) and several streams, against
 * a shadow model; on simcuda in queue mode, where work queued on a stream
 * runs only when the sequence says so.
 *
 * Input: two bytes of configuration (reuse rule, blocks kept per stream,
 * spans always or not,
 * flush threshold, release threshold, a pool limit, hard or not; or no
 * pool, where the stream calls are refused and frees are deferred; or
 * managed memory, where the stream calls are the deferred ones), then
 * operations, one byte each plus their arguments: cuemm_allocate_async and
 * cuemm_allocate of sizes from 1 byte to past the pool's reservation;
 * cuemm_free_async on the block's stream or, after that stream's work is
 * done, on another, by this thread or by a second one (the block then goes
 * back to this thread's cache without a lock, or the general way);
 * cuemm_free; writes queued on the block's stream or on
 * another after cuemm_record_stream; running some or all of a stream's
 * queued work; checks of a block's data; trims, flushes and defer scopes;
 * cuemm_stream_release and a new stream in the old one's place (the driver
 * may give the same handle); frees and records of pointers cuemm does not
 * own (interior, freed already, never allocated); cuemm_pool_suspend (with
 * CUEMM_SUSPEND_KEEP or without) and cuemm_pool_resume, between which
 * allocations are refused, frees accepted, and the program touches no
 * block; and, on simcuda, driver calls of the library made to fail
 * (cuMemCreate, cuEventRecord, cuMemcpyDtoH, ...) until the sequence
 * clears them.
 *
 * The sequence keeps the program's side of the rules (a stream's work on a
 * block is done, or named with cuemm_record_stream, before another stream
 * frees it), so that whatever goes wrong is cuemm's.  What must hold:
 *  - every call succeeds, except an allocation that runs out of memory and,
 *    while driver calls are made to fail, any call (with a message); a call
 *    that failed left its block as cuemm_address_range says;
 *  - no two live blocks overlap; every block is 256-byte aligned;
 *  - no block is handed out while work queued before its free, on a stream
 *    the new owner is not ordered after, is pending (simcuda_reuse_check;
 *    for cuemm_allocate, any such work);
 *  - every block reads back the last value written to it (after a
 *    suspension without CUEMM_SUSPEND_KEEP, the next one; a suspension with
 *    it keeps every live block's contents);
 *  - while suspended, every allocation is refused with
 *    CUDA_ERROR_ILLEGAL_STATE;
 *  - a bad pointer is refused with CUDA_ERROR_INVALID_VALUE (a stream call
 *    without a pool: CUDA_ERROR_NOT_SUPPORTED) and changes no count;
 *  - the live count of cuemm_get_stats is the model's after every step; a
 *    snapshot lists the model's live blocks, and the address range of a
 *    block's interior is the block;
 *  - at the end, with everything freed, the streams released and the
 *    manager destroyed, simcuda holds nothing more than before.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include <cuda.h>

#include "cuemm.h"
#include "fuzz.h"

#define MIB ((size_t)1 << 20)
#define RESERVE (32 * MIB)
#define NSTREAMS 5 /* 0: legacy, 1: per-thread, 2..4: created */
#define MAXLIVE 48
#define FREED 8

typedef struct blk {
  CUdeviceptr p;
  size_t size;
  int async;         /* from cuemm_allocate_async */
  int own;           /* its stream's index; -1: none (cuemm_allocate), -2: destroyed */
  int writer;        /* the stream of the last write, -1: none pending (written by the host or done) */
  unsigned used;     /* streams named with cuemm_record_stream, a bit each */
  unsigned char tag; /* the last value written */
  int lost;          /* its contents went with a suspension without CUEMM_SUSPEND_KEEP */
} blk;

static struct {
  void (*set_queue_mode)(int);
  size_t (*reuse_check)(CUstream, CUdeviceptr, size_t);
  const char *(*reuse_explain)(void);
  size_t (*stream_run)(CUstream, size_t);
  int (*fail)(const char *, unsigned, CUresult);
  void (*fail_clear)(void);
  size_t (*live_count)(void);
  void (*live_report)(FILE *);
} sim;

static CUcontext ctx;
static int tracing; /* FUZZ_OPS_TRACE set: the calls made to fail, and what failed, on stderr */

static struct {
  const uint8_t *d;
  size_t n, i;
} in;

static unsigned next(void)
{
  return in.i < in.n ? in.d[in.i++] : 0;
}

enum { MODE_POOL, MODE_NONE, MODE_MANAGED };

static struct {
  cuemm_manager *m;
  int mode;
  CUstream made[NSTREAMS]; /* the created ones, at 2..4 */
  CUstream probe;          /* never given work: cuemm_allocate's blocks are checked against it */
  blk live[MAXLIVE];
  size_t nlive;
  CUdeviceptr freed[FREED];
  unsigned nfreed;
  int faults;  /* driver calls are being made to fail */
  int faulted; /* and have been, in this input: a chunk may be out of use, mapped */
  int defer;
  int suspended; /* cuemm_pool_suspend took effect, no cuemm_pool_resume since */
} s;

static CUstream stream_of(int k)
{
  return k == 0 ? NULL : k == 1 ? CU_STREAM_PER_THREAD : s.made[k];
}

static void setup(void)
{
  if (ctx)
    return;
#define SYM(f, name) sim.f = (__typeof__(sim.f))dlsym(RTLD_DEFAULT, name)
  SYM(set_queue_mode, "simcuda_set_queue_mode");
  SYM(reuse_check, "simcuda_reuse_check");
  SYM(reuse_explain, "simcuda_reuse_explain");
  SYM(stream_run, "simcuda_stream_run");
  SYM(fail, "simcuda_fail");
  SYM(fail_clear, "simcuda_fail_clear");
  SYM(live_count, "simcuda_live_count");
  SYM(live_report, "simcuda_live_report");
#undef SYM
  CUdevice dev;
  FUZZ_ASSERT(cuInit(0) == CUDA_SUCCESS && cuDeviceGet(&dev, 0) == CUDA_SUCCESS &&
              cuDevicePrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS && cuCtxSetCurrent(ctx) == CUDA_SUCCESS,
              "no context on the driver");
  if (sim.set_queue_mode)
    sim.set_queue_mode(1);
  tracing = getenv("FUZZ_OPS_TRACE") != NULL;
}

static void check_ok(CUresult r, const char *what)
{
  if (tracing && r != CUDA_SUCCESS)
    fprintf(stderr, "fuzz-ops: %s: %d (%s)\n", what, (int)r, cuemm_last_error());
  FUZZ_ASSERT(r == CUDA_SUCCESS || s.faults, "%s: %d (%s)", what, (int)r, cuemm_last_error());
  FUZZ_ASSERT(r == CUDA_SUCCESS || cuemm_last_error()[0], "%s failed (%d) with no message", what, (int)r);
}

/* A stream call on a manager without a pool: refused, saying so. */
static void check_refused(CUresult r, const char *what)
{
  FUZZ_ASSERT(r == CUDA_ERROR_NOT_SUPPORTED, "%s without a pool: %d (%s)", what, (int)r, cuemm_last_error());
  FUZZ_ASSERT(strstr(cuemm_last_error(), what) != NULL, "the message does not name %s: %s", what,
              cuemm_last_error());
}

static size_t live_count(void)
{
  cuemm_stats st;
  FUZZ_ASSERT(cuemm_get_stats(s.m, &st) == CUDA_SUCCESS, "cuemm_get_stats: %s", cuemm_last_error());
  return st.live_count;
}

static size_t pick_size(void)
{
  static const size_t sizes[] = { 1,          200,          256,          1000,     4096,     16384,
                                  65536,      262143,       262144,       300000,   MIB,      3 * MIB,
                                  8 * MIB,    12 * MIB,     RESERVE + MIB, 2 * MIB };
  unsigned b = next();
  size_t n = sizes[b % (sizeof sizes / sizeof sizes[0])];
  return n >= 256 ? n + (b >> 4) % 4 * 256 : n;
}

static int sync_stream(int k)
{
  CUresult r = cuStreamSynchronize(stream_of(k));
  FUZZ_ASSERT(r == CUDA_SUCCESS || s.faults, "cuStreamSynchronize(stream %d): %d", k, (int)r);
  return r == CUDA_SUCCESS;
}

/* Queues a write of a new tag into b on stream k: the whole block, or its
 * first and last 4 KiB when it is larger than 64 KiB (simcuda's memory is
 * the host's: touching every byte would make the fuzzer crawl). */
static void write_on(blk *b, int k, unsigned char tag)
{
  CUstream st = stream_of(k);
  size_t head = b->size <= 64 * 1024 ? b->size : 4096;
  CUresult r = cuMemsetD8Async(b->p, tag, head, st);
  if (r == CUDA_SUCCESS && head < b->size)
    r = cuMemsetD8Async(b->p + b->size - head, tag, head, st);
  FUZZ_ASSERT(r == CUDA_SUCCESS, "cuMemsetD8Async on stream %d: %d", k, (int)r);
  b->tag = tag;
  b->writer = k;
  b->lost = 0;
}

/* The block's first and last bytes, once its last write is done. */
static void check_data(blk *b)
{
  if (s.suspended || b->lost)
    return; /* no memory behind it now; or contents dropped, as asked */
  if (b->writer >= 0 && !sync_stream(b->writer))
    return;
  b->writer = -1;
  unsigned char first = 0, last = 0;
  CUresult r = cuMemcpyDtoH(&first, b->p, 1);
  if (r == CUDA_SUCCESS)
    r = cuMemcpyDtoH(&last, b->p + b->size - 1, 1);
  if (r != CUDA_SUCCESS && s.faults)
    return; /* cuMemcpyDtoH is among the calls made to fail */
  FUZZ_ASSERT(r == CUDA_SUCCESS, "reading a block back: %d", (int)r);
  FUZZ_ASSERT(first == b->tag && last == b->tag, "block 0x%llx (%zu bytes) reads %u .. %u, its last write was %u",
              (unsigned long long)b->p, b->size, first, last, b->tag);
}

static void add_live(CUdeviceptr p, size_t size, int async, int own, CUstream user)
{
  FUZZ_ASSERT(p != 0 && p % 256 == 0, "block 0x%llx is not 256-byte aligned", (unsigned long long)p);
  for (size_t i = 0; i < s.nlive; i++)
    FUZZ_ASSERT(p + size <= s.live[i].p || s.live[i].p + s.live[i].size <= p,
                "new block 0x%llx (%zu bytes) overlaps live block 0x%llx (%zu bytes)", (unsigned long long)p, size,
                (unsigned long long)s.live[i].p, s.live[i].size);
  if (sim.reuse_check) {
    size_t early = sim.reuse_check(user, p, size);
    FUZZ_ASSERT(early == 0, "block 0x%llx (%zu bytes) handed out %s while work on it is pending: %s",
                (unsigned long long)p, size, async ? "for a stream" : "by cuemm_alloc", sim.reuse_explain());
  }
  blk b = { .p = p, .size = size, .async = async, .own = own, .writer = -1 };
  s.live[s.nlive++] = b;
}

static void remove_live(size_t i)
{
  s.freed[s.nfreed++ % FREED] = s.live[i].p;
  s.live[i] = s.live[--s.nlive];
}

/* After a free that failed: whether cuemm still counts the block live. */
static int still_live(const blk *b)
{
  CUdeviceptr base = 0;
  size_t size = 0;
  return cuemm_address_range(s.m, b->p, &base, &size) == CUDA_SUCCESS && base == b->p;
}

static void op_alloc(int async)
{
  size_t size = pick_size();
  int k = (int)(next() % NSTREAMS);
  unsigned char tag = (unsigned char)(next() | 1);
  size_t large = 0;
  for (size_t i = 0; i < s.nlive; i++)
    large += s.live[i].size > RESERVE;
  if (s.nlive == MAXLIVE || (size > RESERVE && large >= 2))
    return;
  CUdeviceptr p = 0;
  CUresult r = async ? cuemm_allocate_async(s.m, size, stream_of(k), &p) : cuemm_allocate(s.m, size, &p);
  if (s.suspended) {
    FUZZ_ASSERT(r == CUDA_ERROR_ILLEGAL_STATE && strstr(cuemm_last_error(), "suspended") && p == 0,
                "%s of %zu bytes while suspended: %d (%s)", async ? "cuemm_alloc_async" : "cuemm_alloc", size,
                (int)r, cuemm_last_error());
    return;
  }
  if (async && s.mode == MODE_NONE) {
    check_refused(r, "cuemm_allocate_async");
    return;
  }
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    FUZZ_ASSERT(cuemm_last_error()[0], "out of memory with no message");
    return;
  }
  check_ok(r, async ? "cuemm_alloc_async" : "cuemm_alloc");
  if (r != CUDA_SUCCESS)
    return;
  /* Managed memory's cuemm_allocate_async is cuemm_allocate: the block is idle. */
  if (s.mode == MODE_MANAGED)
    async = 0;
  add_live(p, size, async, async ? k : -1, async ? stream_of(k) : s.probe);
  blk *b = &s.live[s.nlive - 1];
  if (async) {
    write_on(b, k, tag);
  } else {
    FUZZ_ASSERT(cuMemsetD8(p, tag, size) == CUDA_SUCCESS, "cuMemsetD8");
    b->tag = tag;
    /* cuMemsetD8 of device memory returns before it is done: it is work on
     * the legacy default stream, which the non-blocking streams do not wait
     * for, so a write on one of them must wait for it first (on a GPU the
     * memset could otherwise land after that write). */
    b->writer = 0;
  }
}

/* A second thread that frees what this one hands it and waits until the
 * free is done: the frees of another thread, in a deterministic order. */
static struct {
  pthread_once_t once;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int job;          /* 1: a free to do, 0: done */
  CUdeviceptr p;
  CUstream stream;
  CUresult r;
  char why[512];
} other = { PTHREAD_ONCE_INIT, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, NULL, CUDA_SUCCESS, "" };

static void *other_thread(void *unused)
{
  (void)unused;
  pthread_mutex_lock(&other.lock);
  for (;;) {
    while (other.job != 1)
      pthread_cond_wait(&other.cond, &other.lock);
    cuCtxSetCurrent(ctx);
    other.r = cuemm_free_async(s.m, other.p, other.stream);
    snprintf(other.why, sizeof other.why, "%s", cuemm_last_error());
    other.job = 0;
    pthread_cond_broadcast(&other.cond);
  }
  return NULL;
}

static void other_start(void)
{
  pthread_t t;
  FUZZ_ASSERT(pthread_create(&t, NULL, other_thread, NULL) == 0, "pthread_create");
  pthread_detach(t);
}

static CUresult free_by_other(CUdeviceptr p, CUstream stream)
{
  pthread_once(&other.once, other_start);
  pthread_mutex_lock(&other.lock);
  other.p = p;
  other.stream = stream;
  other.job = 1;
  pthread_cond_broadcast(&other.cond);
  while (other.job != 0)
    pthread_cond_wait(&other.cond, &other.lock);
  CUresult r = other.r;
  pthread_mutex_unlock(&other.lock);
  return r;
}

static void op_free_async(void)
{
  unsigned bi = next(), how = next();
  if (!s.nlive)
    return;
  size_t i = bi % s.nlive;
  blk *b = &s.live[i];
  /* Mostly on the block's own stream; else on another, which the program
   * may do once the block's work there is done (or recorded). */
  int f = b->own >= 0 && how % 4 ? b->own : (int)((how >> 2) % NSTREAMS);
  if (b->writer >= 0 && b->writer != f && !(b->used & 1u << b->writer)) {
    if (!sync_stream(b->writer))
      return;
    b->writer = -1;
  }
  if (how & 0x80)
    check_data(b);
  size_t before = live_count();
  /* By the second thread, on any stream but the per-thread one (which is
   * another stream there). */
  int by_other = how & 0x40 && f != 1;
  CUresult r = by_other ? free_by_other(b->p, stream_of(f)) : cuemm_free_async(s.m, b->p, stream_of(f));
  if (by_other) {
    /* Its message is the other thread's. */
    FUZZ_ASSERT(s.mode != MODE_NONE || r == CUDA_ERROR_NOT_SUPPORTED, "cuemm_free_async without a pool: %d (%s)",
                (int)r, other.why);
    FUZZ_ASSERT(r == CUDA_SUCCESS || s.faults || s.mode == MODE_NONE, "cuemm_free_async by another thread: %d (%s)",
                (int)r, other.why);
    FUZZ_ASSERT(r == CUDA_SUCCESS || other.why[0], "cuemm_free_async by another thread failed (%d) with no message",
                (int)r);
    if (s.mode == MODE_NONE)
      return;
  } else if (s.mode == MODE_NONE) {
    check_refused(r, "cuemm_free_async");
    return;
  } else
    check_ok(r, "cuemm_free_async");
  if (r == CUDA_SUCCESS || !still_live(b))
    remove_live(i);
  else
    FUZZ_ASSERT(live_count() == before, "a failed cuemm_free_async changed the live count");
}

static void op_free(void)
{
  unsigned bi = next();
  if (!s.nlive)
    return;
  size_t i = bi % s.nlive;
  if (bi & 0x80)
    check_data(&s.live[i]);
  CUresult r = cuemm_free(s.m, s.live[i].p);
  check_ok(r, "cuemm_free");
  /* A flush that fails returns its error with the free queued all the same. */
  if (r == CUDA_SUCCESS || !still_live(&s.live[i]))
    remove_live(i);
}

static void op_write(void)
{
  unsigned bi = next(), k = next() % NSTREAMS;
  unsigned char tag = (unsigned char)(next() | 1);
  if (!s.nlive || s.suspended)
    return;
  blk *b = &s.live[bi % s.nlive];
  if (s.mode == MODE_NONE) {
    check_refused(cuemm_record_stream(s.m, b->p, stream_of((int)k)), "cuemm_record_stream");
  } else if (s.mode == MODE_MANAGED) {
    /* Nothing to record: its free, on any path, synchronizes first. */
    check_ok(cuemm_record_stream(s.m, b->p, stream_of((int)k)), "cuemm_record_stream");
  } else if ((int)k != b->own && !(b->used & 1u << k)) {
    CUresult r = cuemm_record_stream(s.m, b->p, stream_of((int)k));
    check_ok(r, "cuemm_record_stream");
    if (r != CUDA_SUCCESS)
      return;
    b->used |= 1u << k;
  }
  /* One writer at a time, so that the last value is known. */
  if (b->writer >= 0 && b->writer != (int)k) {
    if (!sync_stream(b->writer))
      return;
    b->writer = -1;
  }
  write_on(b, (int)k, tag);
}

static void op_run(void)
{
  unsigned k = next() % NSTREAMS, n = next() % 4;
  if (sim.stream_run)
    sim.stream_run(stream_of((int)k), n);
  else
    sync_stream((int)k);
}

static void op_sync(void)
{
  unsigned k = next() % (NSTREAMS + 1);
  if (k == NSTREAMS) {
    CUresult r = cuCtxSynchronize();
    FUZZ_ASSERT(r == CUDA_SUCCESS || s.faults, "cuCtxSynchronize: %d", (int)r);
    if (r == CUDA_SUCCESS)
      for (size_t i = 0; i < s.nlive; i++)
        s.live[i].writer = -1;
    return;
  }
  if (!sync_stream((int)k))
    return;
  for (size_t i = 0; i < s.nlive; i++)
    if (s.live[i].writer == (int)k)
      s.live[i].writer = -1;
}

static void op_check(void)
{
  unsigned bi = next();
  if (s.nlive)
    check_data(&s.live[bi % s.nlive]);
}

/* What the manager reports of itself agrees with the model: a snapshot
 * lists every live block once, as it was handed out, and the pool's blocks
 * tile its mapped memory; the address range of a block's interior is the
 * block. */
static void inspect(void)
{
  cuemm_snapshot *snap = NULL;
  FUZZ_ASSERT(cuemm_snapshot_take(s.m, &snap) == CUDA_SUCCESS, "cuemm_snapshot_take: %s", cuemm_last_error());
  size_t live = 0, pool_bytes = 0;
  for (size_t j = 0; j < snap->nblocks; j++) {
    const cuemm_snapshot_block *x = &snap->blocks[j];
    if (x->chunk >= 0) {
      pool_bytes += x->size;
      FUZZ_ASSERT((size_t)x->chunk < snap->nchunks, "block 0x%llx names chunk %d of %zu", (unsigned long long)x->ptr,
                  x->chunk, snap->nchunks);
      if (j > 0 && snap->blocks[j - 1].chunk >= 0)
        FUZZ_ASSERT(snap->blocks[j - 1].ptr + snap->blocks[j - 1].size <= x->ptr,
                    "the pool's blocks at 0x%llx and 0x%llx are out of order or overlap",
                    (unsigned long long)snap->blocks[j - 1].ptr, (unsigned long long)x->ptr);
    }
    if (x->state != CUEMM_BLOCK_LIVE)
      continue;
    size_t i = 0;
    while (i < s.nlive && s.live[i].p != x->ptr)
      i++;
    /* A chunk that a failed growth could not unmap stays, out of use, as a
     * live block that nobody asked for. */
    FUZZ_ASSERT(i < s.nlive || (s.faulted && x->requested == 0),
                "the snapshot lists 0x%llx live (%zu bytes asked), which the program freed or never had",
                (unsigned long long)x->ptr, x->requested);
    if (i == s.nlive)
      continue;
    live++;
    /* While suspended no chunk is mapped: the pool's blocks name none. */
    int ordered = (x->chunk >= 0 || (s.suspended && s.mode == MODE_POOL && x->ptr >= snap->pool.base &&
                                     x->ptr - snap->pool.base < snap->pool.reserved_bytes)) &&
                  (s.live[i].async || s.live[i].used);
    FUZZ_ASSERT(x->requested == s.live[i].size && x->size >= s.live[i].size && x->stream_ordered == ordered,
                "live block 0x%llx: requested %zu (asked %zu), spans %zu, stream-ordered %d (%d)",
                (unsigned long long)x->ptr, x->requested, s.live[i].size, x->size, x->stream_ordered, ordered);
  }
  FUZZ_ASSERT(live == s.nlive, "the snapshot lists %zu live blocks, the program holds %zu", live, s.nlive);
  if (!s.faulted)
    FUZZ_ASSERT(pool_bytes == snap->pool.mapped_bytes, "the pool's blocks span %zu bytes, it maps %zu", pool_bytes,
                snap->pool.mapped_bytes);
  FUZZ_ASSERT(snap->pool.mapped_bytes <= RESERVE, "the pool maps %zu bytes of a %zu-byte reservation",
              snap->pool.mapped_bytes, (size_t)RESERVE);
  cuemm_snapshot_free(snap);
  if (s.nlive) {
    const blk *b = &s.live[in.i % s.nlive];
    CUdeviceptr base = 0;
    size_t size = 0;
    CUresult r = cuemm_address_range(s.m, b->p + b->size / 2, &base, &size);
    FUZZ_ASSERT(r == CUDA_SUCCESS && base == b->p && size == b->size,
                "the address range of 0x%llx + %zu is 0x%llx, %zu bytes (%d: %s)", (unsigned long long)b->p,
                b->size / 2, (unsigned long long)base, size, (int)r, r ? cuemm_last_error() : "");
  }
}

/* What the pool says of its suspension, and the model after a call that
 * may have changed it (one that failed on a driver call may have). */
static int pool_suspended(void)
{
  cuemm_pool_stats ps;
  FUZZ_ASSERT(cuemm_pool_get_stats(s.m, &ps) == CUDA_SUCCESS, "cuemm_pool_get_stats");
  return ps.suspended;
}

static void op_suspend(void)
{
  unsigned how = next();
  unsigned flags = how & 1 ? CUEMM_SUSPEND_KEEP : 0;
  int was = s.suspended;
  CUresult r = cuemm_pool_suspend(s.m, flags);
  if (s.mode != MODE_POOL) {
    FUZZ_ASSERT(r == CUDA_ERROR_NOT_SUPPORTED, "cuemm_pool_suspend without a pool: %d (%s)", (int)r,
                cuemm_last_error());
    return;
  }
  if (was) {
    /* Again: refused, or (after one that could not release every chunk)
     * the rest released. */
    FUZZ_ASSERT(r == CUDA_ERROR_ILLEGAL_STATE || s.faulted, "a second cuemm_pool_suspend: %d (%s)", (int)r,
                cuemm_last_error());
    FUZZ_ASSERT(pool_suspended(), "a second cuemm_pool_suspend ended the suspension");
    return;
  }
  check_ok(r, "cuemm_pool_suspend");
  s.suspended = pool_suspended();
  FUZZ_ASSERT(r != CUDA_SUCCESS || s.suspended, "cuemm_pool_suspend succeeded and the pool is not suspended");
  if (!s.suspended)
    return; /* failed before releasing anything: nothing changed */
  for (size_t i = 0; i < s.nlive; i++) {
    s.live[i].writer = -1; /* it synchronized the context */
    if (!(flags & CUEMM_SUSPEND_KEEP))
      s.live[i].lost = 1;
  }
}

static void op_resume(void)
{
  CUresult r = cuemm_pool_resume(s.m);
  if (!s.suspended) {
    FUZZ_ASSERT(r == CUDA_ERROR_ILLEGAL_STATE, "cuemm_pool_resume of a manager not suspended: %d (%s)", (int)r,
                cuemm_last_error());
    return;
  }
  check_ok(r, "cuemm_pool_resume");
  s.suspended = pool_suspended();
  FUZZ_ASSERT((r == CUDA_SUCCESS) == !s.suspended, "cuemm_pool_resume returned %d and the pool is %ssuspended",
              (int)r, s.suspended ? "" : "not ");
}

static void op_control(void)
{
  switch (next() % 7) {
  case 0:
    if (s.mode == MODE_POOL && s.suspended)
      FUZZ_ASSERT(cuemm_pool_trim(s.m) == CUDA_ERROR_ILLEGAL_STATE, "cuemm_pool_trim while suspended");
    else if (s.mode == MODE_POOL)
      check_ok(cuemm_pool_trim(s.m), "cuemm_pool_trim");
    else if (s.mode == MODE_MANAGED)
      check_ok(cuemm_managed_trim(s.m), "cuemm_managed_trim");
    else
      FUZZ_ASSERT(cuemm_pool_trim(s.m) != CUDA_SUCCESS, "cuemm_pool_trim without a pool succeeded");
    break;
  case 1:
    check_ok(cuemm_flush(s.m), "cuemm_flush");
    break;
  case 2:
    if (s.defer < 3) {
      FUZZ_ASSERT(cuemm_defer_cleanup_begin(s.m) == CUDA_SUCCESS, "cuemm_defer_cleanup_begin");
      s.defer++;
    }
    break;
  case 3:
    FUZZ_ASSERT(cuemm_defer_cleanup_end(s.m) == (s.defer ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE),
                "cuemm_defer_cleanup_end with %d scopes open", s.defer);
    if (s.defer)
      s.defer--;
    break;
  case 5:
    op_suspend();
    break;
  case 6:
    op_resume();
    break;
  default:
    inspect();
    break;
  }
}

/* cuemm_stream_release, then (for a created stream) a new stream in its
 * place.  Not while a live block names it with cuemm_record_stream: its
 * free would record an event on a stream that no longer exists. */
static void op_restream(void)
{
  int k = 1 + (int)(next() % (NSTREAMS - 1));
  for (size_t i = 0; i < s.nlive; i++)
    if (s.live[i].used & 1u << k)
      return;
  if (!sync_stream(k))
    return;
  CUresult r = cuemm_stream_release(s.m, stream_of(k));
  if (s.mode == MODE_NONE)
    check_refused(r, "cuemm_stream_release");
  else
    check_ok(r, "cuemm_stream_release");
  if (r != CUDA_SUCCESS && s.mode != MODE_NONE)
    return;
  for (size_t i = 0; i < s.nlive; i++) {
    if (s.live[i].writer == k)
      s.live[i].writer = -1;
    if (s.live[i].own == k && k >= 2)
      s.live[i].own = -2;
  }
  if (k >= 2) {
    FUZZ_ASSERT(cuStreamDestroy(s.made[k]) == CUDA_SUCCESS, "cuStreamDestroy");
    FUZZ_ASSERT(cuStreamCreate(&s.made[k], k == 3 ? 0 : CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS, "cuStreamCreate");
  }
}

/* A pointer cuemm did not hand out, or handed out and took back. */
static void op_bad_pointer(void)
{
  unsigned how = next(), which = next();
  CUdeviceptr q;
  if (how % 3 == 0 && s.nlive) {
    blk *b = &s.live[which % s.nlive];
    if (b->size <= 256)
      return;
    q = b->p + 256;
  } else if (how % 3 == 1 && s.nfreed) {
    q = s.freed[which % (s.nfreed < FREED ? s.nfreed : FREED)];
    for (size_t i = 0; i < s.nlive; i++)
      if (s.live[i].p == q)
        return; /* handed out again */
  } else {
    q = 0xdead0000ull + (CUdeviceptr)which * 256;
  }
  cuemm_stats a, z;
  FUZZ_ASSERT(cuemm_get_stats(s.m, &a) == CUDA_SUCCESS, "cuemm_get_stats");
  CUresult r = (how >> 2) % 3 == 0   ? cuemm_free(s.m, q)
               : (how >> 2) % 3 == 1 ? cuemm_free_async(s.m, q, stream_of((int)(which % NSTREAMS)))
                                     : cuemm_record_stream(s.m, q, stream_of((int)(which % NSTREAMS)));
  CUresult want = s.mode == MODE_NONE && (how >> 2) % 3 ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
  FUZZ_ASSERT(r == want, "a bad pointer 0x%llx: %d (%s)", (unsigned long long)q, (int)r, cuemm_last_error());
  FUZZ_ASSERT(strstr(cuemm_last_error(), "cuemm_") != NULL, "the message does not name the call: %s",
              cuemm_last_error());
  FUZZ_ASSERT(cuemm_get_stats(s.m, &z) == CUDA_SUCCESS, "cuemm_get_stats");
  FUZZ_ASSERT(z.live_count == a.live_count && z.frees == a.frees && z.pending_count == a.pending_count,
              "a refused pointer changed the counts");
}

static void op_fault(void)
{
  static const char *const entries[] = { "cuMemCreate",   "cuMemMap",      "cuMemSetAccess", "cuEventCreate",
                                         "cuEventRecord", "cuEventQuery",  "cuStreamWaitEvent", "cuMemAlloc",
                                         "cuMemFree",     "cuMemUnmap",    "cuMemRelease", "cuCtxSynchronize",
                                         "cuMemAllocManaged", "cuMemcpyDtoH", "cuMemcpyHtoD", "cuMemHostAlloc" };
  unsigned e = next(), nth = next() % 4 + 1, how = next();
  if (!sim.fail)
    return;
  CUresult result = how & 1 ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_UNKNOWN;
  const char *entry = entries[e % (sizeof entries / sizeof entries[0])];
  FUZZ_ASSERT(sim.fail(entry, nth, result) == 0, "simcuda_fail");
  s.faulted = 1;
  if (tracing)
    fprintf(stderr, "fuzz-ops: call %u of %s from now fails with %d\n", nth, entry, (int)result);
  s.faults = 1;
}

static void clear_faults(void)
{
  if (s.faults && sim.fail_clear)
    sim.fail_clear();
  s.faults = 0;
}

/* Frees what is left, the program's way, and takes everything down. */
static void finish(size_t sim_before)
{
  clear_faults();
  if (s.suspended) {
    FUZZ_ASSERT(cuemm_pool_resume(s.m) == CUDA_SUCCESS, "cuemm_pool_resume at the end: %s", cuemm_last_error());
    s.suspended = 0;
  }
  while (s.defer) {
    FUZZ_ASSERT(cuemm_defer_cleanup_end(s.m) == CUDA_SUCCESS, "cuemm_defer_cleanup_end");
    s.defer--;
  }
  while (s.nlive) {
    blk *b = &s.live[s.nlive - 1];
    check_data(b);
    CUresult r = b->async && b->own >= 0 ? cuemm_free_async(s.m, b->p, stream_of(b->own)) : cuemm_free(s.m, b->p);
    FUZZ_ASSERT(r == CUDA_SUCCESS, "freeing at the end: %d (%s)", (int)r, cuemm_last_error());
    s.nlive--;
  }
  FUZZ_ASSERT(live_count() == 0, "the manager counts live blocks after all were freed");
  FUZZ_ASSERT(cuCtxSynchronize() == CUDA_SUCCESS, "cuCtxSynchronize");
  for (int k = 1; k < NSTREAMS && s.mode != MODE_NONE; k++)
    FUZZ_ASSERT(cuemm_stream_release(s.m, stream_of(k)) == CUDA_SUCCESS, "cuemm_stream_release: %s",
                cuemm_last_error());
  for (int k = 2; k < NSTREAMS; k++)
    FUZZ_ASSERT(cuStreamDestroy(s.made[k]) == CUDA_SUCCESS, "cuStreamDestroy");
  FUZZ_ASSERT(cuStreamDestroy(s.probe) == CUDA_SUCCESS, "cuStreamDestroy");
  FUZZ_ASSERT(cuemm_destroy(s.m) == CUDA_SUCCESS, "cuemm_destroy: %s", cuemm_last_error());
  if (sim.live_count && sim.live_count() != sim_before && sim.live_report)
    sim.live_report(stderr);
  if (sim.live_count)
    FUZZ_ASSERT(sim.live_count() == sim_before, "simcuda holds %zu objects, %zu before", sim.live_count(),
                sim_before);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  setup();
  in.d = data, in.n = size, in.i = 0;
  memset(&s, 0, sizeof s);
  size_t sim_before = sim.live_count ? sim.live_count() : 0;

  unsigned c0 = next(), c1 = next();
  cuemm_config c;
  FUZZ_ASSERT(cuemm_config_init(&c) == CUDA_SUCCESS, "cuemm_config_init: %s", cuemm_last_error());
  s.mode = c1 >> 6 == 2 ? MODE_NONE : c1 >> 6 == 3 ? MODE_MANAGED : MODE_POOL;
  c.pool = s.mode == MODE_POOL ? CUEMM_POOL_VMM : CUEMM_POOL_NONE;
  if (s.mode == MODE_MANAGED)
    c.memory = CUEMM_MEMORY_MANAGED;
  c.pool_reserve = RESERVE;
  c.pool_chunk = 2 * MIB;
  c.stream_reuse = c0 % 3 == 0 ? CUEMM_STREAM_REUSE_EVENT
                   : c0 % 3 == 1 ? CUEMM_STREAM_REUSE_WAIT
                                 : CUEMM_STREAM_REUSE_INTERNAL;
  c.stream_keep_large = (c0 >> 2) % 5;
  c.stream_spans = c0 & 0x80 ? CUEMM_STREAM_SPANS_ALWAYS : CUEMM_STREAM_SPANS_AUTO;
  c.max_pending_count = (c1 % 4) * 3;
  c.pool_release_threshold = (c1 >> 2) & 1 ? 0 : 8 * MIB;
  c.pool_release_delay_ms = (c1 >> 3) & 1 ? 0 : 1000;
  c.pool_limit = (c1 >> 4) & 1 ? RESERVE / 2 : 0;
  c.pool_limit_hard = (c1 >> 5) & 1;
  FUZZ_ASSERT(cuemm_manager_create(ctx, &c, &s.m) == CUDA_SUCCESS, "cuemm_create: %s", cuemm_last_error());
  for (int k = 2; k < NSTREAMS; k++)
    FUZZ_ASSERT(cuStreamCreate(&s.made[k], k == 3 ? 0 : CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS, "cuStreamCreate");
  FUZZ_ASSERT(cuStreamCreate(&s.probe, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS, "cuStreamCreate");

  while (in.i < in.n) {
    unsigned op = next() % 16;
    if (tracing)
      fprintf(stderr, "fuzz-ops: op %u at byte %zu, %zu live\n", op, in.i - 1, s.nlive);
    switch (op) {
    case 0: case 1: case 2: op_alloc(1); break;
    case 3: op_alloc(0); break;
    case 4: case 5: op_free_async(); break;
    case 6: op_free(); break;
    case 7: op_write(); break;
    case 8: op_run(); break;
    case 9: op_sync(); break;
    case 10: op_check(); break;
    case 11: op_control(); break;
    case 12: op_restream(); break;
    case 13: op_bad_pointer(); break;
    case 14: op_fault(); break;
    default: clear_faults(); break;
    }
    if (!s.faults)
      FUZZ_ASSERT(live_count() == s.nlive, "cuemm counts %zu live blocks, the model %zu", live_count(), s.nlive);
  }
  finish(sim_before);
  return 0;
}
