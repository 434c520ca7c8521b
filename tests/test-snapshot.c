/* test-snapshot.c: cuemm_snapshot_take and its JSON, the held and peak held
 * figures, cuemm_stats_print, and CUEMM_STATS.  A pool manager is brought
 * to a known state (a live block, a pending one, a live and a cached
 * stream-ordered block, a request given to cuMemAlloc) and the snapshot
 * must list exactly that: the chunk, every block with its state, stream and
 * size, the blocks tiling the chunk.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testproc.h"
#include "testutil.h"

#define MIB ((size_t)1 << 20)

static CUcontext ctx;

static cuemm_manager *pool_manager(int stats_at_exit)
{
  cuemm_config c = test_config(1000, 1.0);
  c.pool = CUEMM_POOL_VMM;
  c.pool_reserve = 256 * MIB;
  c.pool_chunk = 32 * MIB;
  c.stats_at_exit = stats_at_exit;
  cuemm_manager *m = NULL;
  CHECK_CU(cuemm_manager_create(ctx, &c, &m));
  return m;
}

static const cuemm_snapshot_block *find(const cuemm_snapshot *s, CUdeviceptr p)
{
  for (size_t i = 0; i < s->nblocks; i++)
    if (s->blocks[i].ptr == p)
      return &s->blocks[i];
  return NULL;
}

static char *slurp(FILE *f)
{
  static char buf[1 << 16];
  rewind(f);
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = 0;
  return buf;
}

static int count(const char *hay, const char *needle)
{
  int n = 0;
  for (const char *p = hay; (p = strstr(p, needle)) != NULL; p++)
    n++;
  return n;
}

static void test_snapshot(void)
{
  cuemm_manager *m = pool_manager(0);
  CUstream s;
  CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr live, pend, slive, scached, big;
  CHECK_CU(cuemm_allocate(m, 1000, &live));
  CHECK_CU(cuemm_allocate(m, 5000, &pend));
  CHECK_CU(cuemm_free(m, pend)); /* stays pending: max_pending_count is 1000 */
  CHECK_CU(cuemm_allocate_async(m, 4096, s, &slive));
  CHECK_CU(cuemm_allocate_async(m, 8192, s, &scached));
  CHECK_CU(cuemm_free_async(m, scached, s));
  CHECK_CU(cuemm_allocate(m, 300 * MIB, &big)); /* past the reservation: cuMemAlloc */

  cuemm_snapshot *snap = NULL;
  is(cuemm_snapshot_take(m, &snap), CUDA_SUCCESS, "a snapshot of the manager");
  if (!snap) {
    skip(24, "no snapshot");
    return;
  }
  is(snap->nchunks, 1, "one chunk mapped");
  is(snap->chunks[0].size, 2 * MIB, "of 2 MiB, one granule: an empty pool grows by the least it can");
  ok(snap->chunks[0].base == snap->pool.base, "at the pool's base");
  const cuemm_snapshot_block *b = find(snap, live);
  ok(b && b->state == CUEMM_BLOCK_LIVE && b->requested == 1000 && b->size == 1024 && b->chunk == 0 &&
     !b->stream_ordered, "the live block: 1000 bytes asked, 1024 spanned, in chunk 0");
  b = find(snap, pend);
  ok(b && b->state == CUEMM_BLOCK_PENDING && b->requested == 5000, "the freed block: pending, 5000 bytes");
  b = find(snap, slive);
  ok(b && b->state == CUEMM_BLOCK_LIVE && b->stream_ordered && b->stream == s && b->requested == 4096,
     "the stream-ordered live block, with its stream");
  b = find(snap, scached);
  ok(b && b->state == CUEMM_BLOCK_CACHED && b->stream_ordered && b->stream == s && b->size == 8192,
     "the block freed on the stream: cached, with its stream");
  b = find(snap, big);
  ok(b && b->state == CUEMM_BLOCK_LIVE && b->chunk == -1 && b->size == 300 * MIB,
     "the cuMemAlloc allocation: outside the pool (chunk -1)");
  ok(snap->nblocks > 0 && snap->blocks[snap->nblocks - 1].ptr == big, "listed after the pool's blocks");

  /* The pool's blocks tile its chunk, in address order, without overlap. */
  size_t covered = 0, free_bytes = 0;
  int order = 1;
  CUdeviceptr next = snap->chunks[0].base;
  for (size_t i = 0; i < snap->nblocks; i++) {
    const cuemm_snapshot_block *x = &snap->blocks[i];
    if (x->chunk < 0)
      continue;
    order &= x->ptr == next;
    next = x->ptr + x->size;
    covered += x->size;
    if (x->state == CUEMM_BLOCK_FREE)
      free_bytes += x->size;
  }
  ok(order, "the pool's blocks follow each other in address order");
  is(covered, 2 * MIB, "and cover the chunk exactly");
  is(free_bytes, snap->pool.free_bytes, "the free ones are the pool's free bytes");
  is(snap->stats.live_bytes, 1000 + 4096 + 300 * MIB, "the statistics of the same moment: live bytes");
  is(snap->stats.held_bytes, 2 * MIB + 300 * MIB, "held: the chunk and the cuMemAlloc memory");

  FILE *f = tmpfile();
  is(cuemm_snapshot_write_json(snap, f), CUDA_SUCCESS, "written as JSON");
  char *json = slurp(f);
  fclose(f);
  like(json, "{\"version\":1,", "a versioned object");
  is(count(json, "\"ptr\":"), (int)snap->nblocks, "one object per block");
  is(count(json, "\"state\":\"pending\""), 1, "one pending block");
  is(count(json, "\"state\":\"cached\""), 1, "one cached block");
  char want[96];
  snprintf(want, sizeof want, "\"stream\":\"0x%llx\"", (unsigned long long)(uintptr_t)s);
  is(count(json, want), 2, "the stream named on its two blocks");
  like(json, "\"chunks\":[\n {\"base\":\"0x", "the chunks listed");
  ok(json[strlen(json) - 2] == '}', "the object is closed");

  f = fopen("/dev/full", "w");
  if (f) {
    is(cuemm_snapshot_write_json(snap, f), CUDA_ERROR_UNKNOWN, "a write that fails is reported");
    fclose(f);
  } else
    skip(1, "no /dev/full");
  cuemm_snapshot_free(snap);

  is(cuemm_snapshot_take(NULL, &snap), CUDA_ERROR_INVALID_VALUE, "no manager: refused");
  is(cuemm_snapshot_take(m, NULL), CUDA_ERROR_INVALID_VALUE, "no out pointer: refused");
  cuemm_snapshot_free(NULL); /* does nothing */
  CHECK_CU(cuemm_free(m, live));
  CHECK_CU(cuemm_free_async(m, slive, s));
  CHECK_CU(cuemm_free(m, big));
  CHECK_CU(cuemm_destroy(m));
  CHECK_CU(cuStreamDestroy(s));
}

static void test_held(void)
{
  cuemm_config c = test_config(1000, 1.0);
  cuemm_manager *m = NULL;
  CHECK_CU(cuemm_manager_create(ctx, &c, &m));
  CUdeviceptr p;
  CHECK_CU(cuemm_allocate(m, 3 * MIB, &p));
  is(test_stats(m).held_bytes, 3 * MIB, "without a pool, held is what cuMemAlloc gave");
  CHECK_CU(cuemm_free(m, p));
  is(test_stats(m).held_bytes, 3 * MIB, "a pending free is still held");
  CHECK_CU(cuemm_flush(m));
  cuemm_stats st = test_stats(m);
  is(st.held_bytes, 0, "released by the flush");
  is(st.peak_held_bytes, 3 * MIB, "the peak stays");
  CHECK_CU(cuemm_destroy(m));
}

static void test_print(void)
{
  cuemm_manager *m = pool_manager(0);
  CUstream s;
  CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr a, b, c;
  CHECK_CU(cuemm_allocate(m, 2 * MIB, &a));
  CHECK_CU(cuemm_allocate(m, MIB, &c));
  CHECK_CU(cuemm_free(m, c));
  CHECK_CU(cuemm_flush(m));
  CHECK_CU(cuemm_allocate_async(m, 8192, s, &b));
  CHECK_CU(cuemm_free_async(m, b, s));
  FILE *f = tmpfile();
  is(cuemm_stats_print(m, f), CUDA_SUCCESS, "the table printed");
  char *t = slurp(f);
  fclose(f);
  like(t, "live        2.00 MiB now in 1 allocations; 3.00 MiB at peak in 2", "live and peak");
  like(t, "held        4.00 MiB now; 4.00 MiB at peak; footprint 1.33x", "held and the footprint");
  like(t, "3 allocations, 2 frees", "the calls");
  like(t, "1 flushes, 0 frees pending", "the flush");
  like(t, "pool        4.00 MiB mapped in 2 chunks", "the pool");
  like(t, "2 growth steps", "its growth: 2 MiB, then a granule more for the 1 MiB");
  char want[96];
  snprintf(want, sizeof want, "stream %p: 8.00 KiB cached in 1 blocks", (void *)s);
  like(t, want, "the cached bytes of the stream");
  f = fopen("/dev/full", "w");
  if (f) {
    is(cuemm_stats_print(m, f), CUDA_ERROR_UNKNOWN, "a full disk: an error");
    like(cuemm_last_error(), "No space left on device", "with the reason");
    fclose(f);
  } else
    skip(2, "no /dev/full");
  is(cuemm_stats_print(NULL, stderr), CUDA_ERROR_INVALID_VALUE, "no manager: refused");
  CHECK_CU(cuemm_free(m, a));
  CHECK_CU(cuemm_destroy(m));
  CHECK_CU(cuStreamDestroy(s));
}

/* CUEMM_STATS's child (this program run again, testproc.h: CUDA is not to
 * be used in a forked child on the real driver): its stderr is the pipe
 * named by its first argument. */
static int child_main(int fd)
{
  dup2(fd, 2);
  close(fd);
  CUcontext c = test_primary_context(0);
  cuemm_config cfg;
  cuemm_config_init(&cfg); /* CUEMM_STATS=1 from the environment */
  cuemm_manager *m1 = NULL, *m2 = NULL;
  if (!cfg.stats_at_exit || cuemm_manager_create(c, &cfg, &m1) != CUDA_SUCCESS)
    return 3;
  CUdeviceptr p;
  cuemm_allocate(m1, 4096, &p);
  if (cuemm_destroy(m1) != CUDA_SUCCESS || !strstr(cuemm_last_error(), "outstanding"))
    return 4;
  if (cuemm_manager_create(c, &cfg, &m2) != CUDA_SUCCESS)
    return 5;
  /* Freed and flushed, so that no device memory outlives the process (memory
   * checkers would call it a leak); the table at exit still shows the peak. */
  if (cuemm_allocate(m2, 12345, &p) != CUDA_SUCCESS || cuemm_free(m2, p) != CUDA_SUCCESS ||
      cuemm_flush(m2) != CUDA_SUCCESS)
    return 6;
  exit(0); /* m2 never destroyed */
}

/* CUEMM_STATS: the table on stderr at destroy (destroy's own message kept),
 * and at exit for a manager never destroyed. */
static void test_at_exit(const char *argv0)
{
  int fds[2];
  if (pipe(fds) != 0) {
    printf("Bail out! pipe: %s\n", strerror(errno));
    exit(1);
  }
  setenv("CUEMM_STATS", "1", 1);
  pid_t pid = spawn_self(argv0, &fds[1], 1, &fds[0], 1);
  unsetenv("CUEMM_STATS");
  close(fds[1]);
  static char out[8192];
  size_t n = 0;
  ssize_t k;
  while (n < sizeof out - 1 && (k = read(fds[0], out + n, sizeof out - 1 - n)) > 0)
    n += (size_t)k;
  out[n] = 0;
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  is(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 0,
     "CUEMM_STATS=1 is read; destroy still says what it freed");
  is(count(out, "cuemm: manager "), 2, "two tables: one at destroy, one at exit");
  like(out, "4.00 KiB now in 1 allocations", "the first, at destroy, as the program left it");
  like(out, "0 B now in 0 allocations; 12.06 KiB at peak in 1", "the second, at exit");
  setenv("CUEMM_STATS", "yes", 1);
  cuemm_config c;
  is(cuemm_config_init(&c), CUDA_ERROR_INVALID_VALUE, "CUEMM_STATS=yes is refused");
  like(cuemm_last_error(), "CUEMM_STATS=\"yes\" is invalid: expected 0 or 1", "saying what is accepted");
  unsetenv("CUEMM_STATS");
}

int main(int argc, char **argv)
{
  if (argc > 2 && strcmp(argv[1], "--child") == 0)
    return child_main(atoi(argv[2]));
  tap_plan(47);
  sim_init();
  ctx = test_primary_context(0);
  test_snapshot();
  test_held();
  test_print();
  test_at_exit(argv[0]);
  test_release_primary(0);
  return tap_done();
}
