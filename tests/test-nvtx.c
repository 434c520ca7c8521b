/* test-nvtx.c: pool blocks annotated for tools through NVTX's memory API
 * (src/trace/nvtx.c), against tests/nvtx-tool.c, a stand-in tool that logs the
 * calls it receives and refuses what a tool would refuse.
 *
 * In this process, with the tool attached: it is loaded when the first
 * pool is created, in NVTX's order (core, domain, initialize, extension);
 * each mapped chunk becomes a heap and each block handed out a region of
 * exactly its address and requested size (a block over two chunks one
 * region in each); a deferred free unregisters at the flush, a free on a
 * stream at once, and a block cached by the stream-ordered path registers
 * again when it is handed out; trimming and destroying unregister the
 * heaps; a manager with nvtx = 0 registers nothing; the tool saw no call
 * it would refuse (a call with no context current among them).  In child
 * processes (the tool loads once per process): a missing file, a file
 * that is no library, a library without the entry points, a tool whose
 * extension refuses, one that numbers the slots from 1 or leaves a
 * function out, and CUEMM_NVTX=0 all leave the allocations working and
 * nothing registered; a tool whose core refuses still takes the extension.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testproc.h"
#include "testutil.h"

#define MiB ((size_t)1 << 20)
#define CHUNK (2 * MiB)

static char dir[64], main_log[128];
static size_t seen;  /* bytes of main_log already read */

static char *slurp(const char *path)
{
  FILE *f = fopen(path, "r");
  if (!f)
    return NULL;
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  size_t got;
  while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
    n += got;
    if (cap - n - 1 == 0) {
      char *g = realloc(buf, cap * 2);
      if (!g) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = g;
      cap *= 2;
    }
  }
  fclose(f);
  if (buf)
    buf[n] = '\0';
  return buf;
}

/* The heaps the tool announced, by id. */
#define MAX_HEAPS 64
static uintptr_t heap_base[MAX_HEAPS + 1];
static size_t heap_size[MAX_HEAPS + 1];

/* What the tool logged since the last call (the caller frees it). */
static char *fresh(void)
{
  char *all = slurp(main_log);
  if (!all)
    return strdup("");
  char *r = strdup(all + seen);
  seen = strlen(all);
  free(all);
  for (const char *l = r; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : "") {
    int id;
    uintptr_t base;
    size_t size;
    if (sscanf(l, "heap %d %" SCNxPTR " %zu", &id, &base, &size) == 3 && id > 0 && id <= MAX_HEAPS) {
      heap_base[id] = base;
      heap_size[id] = size;
    }
  }
  return r;
}

static char *line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *line(const char *fmt, ...)
{
  static char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

typedef struct part {
  int heap;
  uintptr_t ptr;
  size_t size;
} part;

/* The region lines of `text`, in order. */
static int regions_in(const char *text, part *out, int max)
{
  int n = 0;
  for (const char *l = text; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : "") {
    part p;
    if (sscanf(l, "region %d %" SCNxPTR " %zu", &p.heap, &p.ptr, &p.size) == 3 && n < max)
      out[n++] = p;
  }
  return n;
}

/* The unregion lines of `text`, in order. */
static int unregions_in(const char *text, uintptr_t *out, int max)
{
  int n = 0;
  for (const char *l = text; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : "") {
    uintptr_t p;
    if (sscanf(l, "unregion %" SCNxPTR, &p) == 1 && n < max)
      out[n++] = p;
  }
  return n;
}

/* Whether parts[0..n) are [ptr, ptr + size) cut at heap boundaries, in
 * order, each inside the heap it names. */
static int covers(const part *parts, int n, uintptr_t ptr, size_t size)
{
  uintptr_t at = ptr;
  for (int i = 0; i < n; i++) {
    const part *q = &parts[i];
    if (q->heap <= 0 || q->heap > MAX_HEAPS || q->ptr != at || q->ptr < heap_base[q->heap] ||
        q->ptr + q->size > heap_base[q->heap] + heap_size[q->heap])
      return 0;
    if (i + 1 < n && q->ptr + q->size != heap_base[q->heap] + heap_size[q->heap])
      return 0; /* cut where the heap does not end */
    at += q->size;
  }
  return at == ptr + size;
}

static cuemm_manager *make(int nvtx, CUcontext ctx)
{
  cuemm_config c = test_config(10, 1.0);
  c.pool = CUEMM_POOL_VMM;
  c.pool_chunk = CHUNK;
  c.pool_reserve = 64 * MiB;
  c.pool_release_threshold = (size_t)1 << 40;
  c.pool_release_delay_ms = 0;
  if (nvtx >= 0)
    c.nvtx = nvtx;
  cuemm_manager *m = NULL;
  CHECK_CU(cuemm_manager_create(ctx, &c, &m));
  return m;
}

/* ---- a child: the allocations work, whatever the tool ------------------------------- */

static int child(void)
{
  test_primary_context(0);
  cuemm_manager *m = make(-1, NULL);
  CUdeviceptr p, q;
  unsigned char back[1000];
  if (cuemm_allocate(m, 1000, &p) != CUDA_SUCCESS || cuMemsetD8(p, 0x5a, 1000) != CUDA_SUCCESS ||
      cuMemcpyDtoH(back, p, 1000) != CUDA_SUCCESS || back[0] != 0x5a || back[999] != 0x5a)
    return 2;
  if (cuemm_free(m, p) != CUDA_SUCCESS || cuemm_flush(m) != CUDA_SUCCESS)
    return 3;
  /* A second growth: a tool that refused the first heap is not asked again. */
  CUdeviceptr big;
  if (cuemm_allocate(m, 48u << 20, &big) != CUDA_SUCCESS || cuemm_free(m, big) != CUDA_SUCCESS)
    return 6;
  if (cuemm_allocate_async(m, 700, NULL, &q) != CUDA_SUCCESS || cuemm_free_async(m, q, NULL) != CUDA_SUCCESS ||
      cuemm_allocate_async(m, 700, NULL, &q) != CUDA_SUCCESS || cuemm_free_async(m, q, NULL) != CUDA_SUCCESS)
    return 4;
  if (cuemm_pool_trim(m) != CUDA_SUCCESS || cuemm_destroy(m) != CUDA_SUCCESS)
    return 5;
  test_release_primary(0);
  return 0;
}

/* Runs a child with the tool at `path` (NULL: unset), NVTX_TOOL_FAIL
 * `fail` and CUEMM_NVTX `nvtx` (NULL: unset), logging to `log`; returns
 * its exit status (-1 if it did not exit). */
static int run_child(const char *argv0, const char *path, const char *fail, const char *nvtx, const char *log)
{
  if (path)
    setenv("NVTX_INJECTION64_PATH", path, 1);
  else
    unsetenv("NVTX_INJECTION64_PATH");
  if (fail)
    setenv("NVTX_TOOL_FAIL", fail, 1);
  if (nvtx)
    setenv("CUEMM_NVTX", nvtx, 1);
  setenv("NVTX_TOOL_LOG", log, 1);
  pid_t pid = spawn_self(argv0, NULL, 0, NULL, 0);
  unsetenv("NVTX_TOOL_FAIL");
  unsetenv("CUEMM_NVTX");
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
    return -1;
  return WEXITSTATUS(status);
}

static void children(const char *argv0, const char *tool, const char *lib)
{
  static const char *const init = "core\ndomain cuemm\ninitialize\next\n";
  struct {
    const char *what, *path, *fail, *nvtx;
    const char *log;  /* what the tool logs; NULL: no log at all (never loaded) */
  } cases[] = {
    { "NVTX_INJECTION64_PATH names a missing file", "/nonexistent/nvtx-tool.so", NULL, NULL, NULL },
    { "NVTX_INJECTION64_PATH names a file that is no library", "/dev/null", NULL, NULL, NULL },
    { "a library without the entry points (libcuemm itself)", lib, NULL, NULL, NULL },
    { "the tool's extension initialization returns 0", tool, "ext", NULL, init },
    { "the tool numbers the extension's slots from 1", tool, "from1", NULL, init },
    { "the tool leaves nvtxMemRegionsRegister out", tool, "noregion", NULL, init },
    { "CUEMM_NVTX=0", tool, NULL, "0", NULL },
  };
  char refused[512];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char log[160];
    snprintf(log, sizeof log, "%s/child%zu.log", dir, i);
    int st = run_child(argv0, cases[i].path, cases[i].fail, cases[i].nvtx, log);
    is(st, 0, "%s: allocations, frees and the stream calls work", cases[i].what);
    char *got = slurp(log);
    if (cases[i].log)
      is_str(got, cases[i].log, "%s: the tool is initialized, then hears of no heap or region", cases[i].what);
    else
      ok(got == NULL, "%s: no tool hears of anything (the stand-in is never loaded)", cases[i].what);
    free(got);
    unlink(log);
  }

  /* A tool that refuses the pool's heaps (compute-sanitizer on memory
   * mapped with cuMemMap): asked once, then left alone. */
  char log[160];
  snprintf(log, sizeof log, "%s/child-heap.log", dir);
  is(run_child(argv0, tool, "heap", NULL, log), 0, "a tool that refuses heaps: allocations work");
  char *told = slurp(log);
  snprintf(refused, sizeof refused, "%sheap refused ", init);
  int asked = 0;
  for (const char *at = told; at && (at = strstr(at, "heap refused")) != NULL; at++)
    asked++;
  ok(told && strncmp(told, refused, strlen(refused)) == 0 && asked == 1 && !strstr(told, "region"),
     "it is asked for one heap, over two growths, and for no region (asked %d times)", asked);
  free(told);
  unlink(log);

  /* A tool whose core refuses: NVTX's loader still initializes the
   * extension, and cuemm annotates without a domain. */
  snprintf(log, sizeof log, "%s/child-core.log", dir);
  int st = run_child(argv0, tool, "core", NULL, log);
  is(st, 0, "the tool's core initialization returns 0: allocations work");
  char *got = slurp(log);
  like(got, "core\next\nheap 1 ", "the extension is still initialized, without domain or nvtxInitialize");
  ok(got && strstr(got, "region 1 ") && !strstr(got, "error"), "and the blocks are annotated, no call refused");
  free(got);
  unlink(log);
  unsetenv("NVTX_TOOL_LOG");
}

struct other_free {
  cuemm_manager *m;
  CUdeviceptr p;
  CUstream s;
  CUresult r;
};

static void *free_elsewhere(void *arg)
{
  struct other_free *o = arg;
  o->r = cuemm_free_async(o->m, o->p, o->s);
  return NULL;
}

/* ---- this process: what is registered, and when -------------------------------------- */

int main(int argc, char **argv)
{
  if (argc > 1 && strcmp(argv[1], "--child") == 0)
    return child();
  tap_plan(50);
  sim_init();

  const char *top = getenv("CUEMM_TOP_BUILDDIR");
  char tool[1024], lib[1024];
  snprintf(tool, sizeof tool, "%s/tests/.libs/nvtx-tool.so", top ? top : ".");
  snprintf(lib, sizeof lib, "%s/.libs/libcuemm.so.0", top ? top : ".");
  struct stat sb;
  if (stat(tool, &sb) != 0) {
    printf("Bail out! the stand-in tool %s is not built (make check builds it)\n", tool);
    return 1;
  }
  snprintf(dir, sizeof dir, "/tmp/cuemm-nvtx.XXXXXX");
  if (!mkdtemp(dir)) {
    printf("Bail out! mkdtemp failed\n");
    return 1;
  }
  snprintf(main_log, sizeof main_log, "%s/main.log", dir);
  unsetenv("CUEMM_NVTX");
  unsetenv("NVTX_TOOL_FAIL");
  setenv("NVTX_INJECTION64_PATH", tool, 1);
  setenv("NVTX_TOOL_LOG", main_log, 1);

  test_primary_context(0);
  cuemm_config c;
  cuemm_config_init(&c);
  is(c.nvtx, 1, "annotations are on by default");
  char *got = fresh();
  is_str(got, "", "nothing is loaded before a pool exists");
  free(got);

  cuemm_manager *m = make(-1, NULL);
  got = fresh();
  is_str(got, "core\ndomain cuemm\ninitialize\next\n",
         "the first pool loads the tool: core, domain \"cuemm\", nvtxInitialize, then the memory extension");
  free(got);
  cuemm_pool_stats ps;
  CHECK_CU(cuemm_pool_get_stats(m, &ps));

  /* cuemm_allocate: the chunk is a heap, the block a region. */
  CUdeviceptr p1, p2, p3;
  CHECK_CU(cuemm_allocate(m, 1000, &p1));
  got = fresh();
  char want[512];
  snprintf(want, sizeof want, "heap 1 0x%llx %zu\nregion 1 0x%llx 1000\n", (unsigned long long)ps.base, CHUNK,
           (unsigned long long)p1);
  is_str(got, want, "the first block maps a chunk: one heap over the chunk, one region of exactly the 1000 bytes");
  free(got);
  CHECK_CU(cuemm_allocate(m, 5000, &p2));
  got = fresh();
  is_str(got, line("region 1 0x%llx 5000\n", (unsigned long long)p2), "a second block: its region, in the same heap");
  free(got);

  /* The deferred path: registered until the flush returns the block. */
  CHECK_CU(cuemm_free(m, p1));
  got = fresh();
  is_str(got, "", "cuemm_free queues the block: its region stays while queued work may use it");
  free(got);
  CHECK_CU(cuemm_flush(m));
  got = fresh();
  is_str(got, line("unregion 0x%llx\n", (unsigned long long)p1), "the flush unregisters it");
  free(got);

  /* A block over two chunks: one region in each chunk's heap. */
  CHECK_CU(cuemm_allocate(m, 3 * MiB, &p3));
  got = fresh();
  part parts[8];
  int n = regions_in(got, parts, 8);
  like(got, line("heap 2 0x%llx %zu\n", (unsigned long long)(ps.base + CHUNK), CHUNK),
       "a growth: the new chunk is a heap of its own");
  ok(p3 < ps.base + CHUNK && p3 + 3 * MiB > ps.base + CHUNK, "the 3 MiB block starts in the first chunk and ends in "
     "the second (free space joins across chunks)");
  is(n, 2, "it is registered as two regions");
  ok(covers(parts, n, (uintptr_t)p3, 3 * MiB), "which cover exactly its 3 MiB, cut where the first heap ends");
  free(got);
  CHECK_CU(cuemm_free(m, p3));
  CHECK_CU(cuemm_flush(m));
  got = fresh();
  uintptr_t un[8];
  int nu = unregions_in(got, un, 8);
  ok(nu == n && n == 2 && un[0] == parts[0].ptr && un[1] == parts[1].ptr,
     "freed and flushed: both regions unregistered by their addresses");
  free(got);

  /* The stream-ordered path. */
  CUstream s;
  CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr q, q2, q3;
  CHECK_CU(cuemm_allocate_async(m, 700, s, &q));
  got = fresh();
  is_str(got, line("region 1 0x%llx 700\n", (unsigned long long)q), "cuemm_alloc_async: a region of 700 bytes");
  free(got);
  CHECK_CU(cuemm_free_async(m, q, s));
  got = fresh();
  is_str(got, line("unregion 0x%llx\n", (unsigned long long)q),
         "cuemm_free_async: unregistered at once (the block is cached for the stream)");
  free(got);
  CHECK_CU(cuemm_allocate_async(m, 600, s, &q2));
  got = fresh();
  ok(q2 == q, "the cached block serves the next request on the stream");
  is_str(got, line("region 1 0x%llx 600\n", (unsigned long long)q2), "and is registered again, for the 600 bytes");
  free(got);
  CHECK_CU(cuemm_free(m, q2));
  got = fresh();
  is_str(got, "", "cuemm_free of a stream block: queued, still registered");
  free(got);
  CHECK_CU(cuemm_flush(m));
  got = fresh();
  is_str(got, line("unregion 0x%llx\n", (unsigned long long)q2), "the flush unregisters it");
  free(got);
  CHECK_CU(cuemm_allocate_async(m, 700, s, &q3));
  CHECK_CU(cuemm_free_async(m, q3, s));
  CHECK_CU(cuStreamSynchronize(s));
  got = fresh();
  /* Whichever chunk (heap) it lies in: the pool places it. */
  char *tail = line(" 0x%llx 700\nunregion 0x%llx\n", (unsigned long long)q3, (unsigned long long)q3);
  const char *sp = got ? strchr(got + (strncmp(got, "region ", 7) == 0 ? 7 : 0), ' ') : NULL;
  ok(got && strncmp(got, "region ", 7) == 0 && sp && strcmp(sp, tail) == 0,
     "another block on the stream, freed on it: registered, then unregistered (%s)", got ? got : "nothing");
  free(got);

  /* The slow path of cuemm_free_async: a block of cuemm_allocate freed on a
   * stream, and a block another thread allocated. */
  CUdeviceptr p4;
  CHECK_CU(cuemm_allocate(m, 800, &p4));
  free(fresh()); /* what came before */
  CHECK_CU(cuemm_free_async(m, p4, s));
  got = fresh();
  is_str(got, line("unregion 0x%llx\n", (unsigned long long)p4),
         "cuemm_free_async of a cuemm_alloc block: unregistered at once");
  free(got);
  CUdeviceptr q4;
  CHECK_CU(cuemm_allocate_async(m, 900, s, &q4));
  free(fresh()); /* what came before */
  struct other_free of = { m, q4, s, CUDA_ERROR_UNKNOWN };
  pthread_t t;
  pthread_create(&t, NULL, free_elsewhere, &of);
  pthread_join(t, NULL);
  CHECK_CU(of.r);
  got = fresh();
  is_str(got, line("unregion 0x%llx\n", (unsigned long long)q4),
         "cuemm_free_async from another thread: unregistered at once");
  free(got);
  CHECK_CU(cuStreamSynchronize(s));

  /* Trimming: the cached block goes back (nothing more to unregister),
   * the wholly free chunk is unmapped and its heap unregistered. */
  CHECK_CU(cuemm_pool_trim(m));
  got = fresh();
  is_str(got, "unheap 2\n", "cuemm_pool_trim: the second chunk is released and its heap unregistered, nothing else");
  free(got);
  CHECK_CU(cuemm_pool_get_stats(m, &ps));
  is(ps.chunks, 1, "the first chunk stays (a block is live in it)");

  /* A manager with nvtx = 0, the tool loaded: nothing registered. */
  {
    CUdevice dev;
    CUcontext ctx2;
    CHECK_CU(cuDeviceGet(&dev, 0));
    CHECK_CU(cuCtxCreate(&ctx2, NULL, 0, dev));
    CHECK_CU(cuCtxPopCurrent(NULL));
    cuemm_manager *m0 = make(0, ctx2);
    CUdeviceptr z;
    CHECK_CU(cuemm_allocate(m0, 4096, &z));
    CHECK_CU(cuemm_allocate_async(m0, 4096, NULL, &z));
    CHECK_CU(cuemm_free_async(m0, z, NULL));
    CHECK_CU(cuemm_pool_trim(m0));
    CHECK_CU(cuemm_destroy(m0));
    CHECK_CU(cuCtxDestroy(ctx2));
    got = fresh();
    is_str(got, "", "a manager created with nvtx = 0 registers nothing, though the tool is loaded");
    free(got);
  }

  /* Destroying the manager with a block still live: every heap goes. */
  CHECK_CU(cuStreamDestroy(s));
  CHECK_CU(cuemm_destroy(m));
  got = fresh();
  is_str(got, "unheap 1\n", "cuemm_destroy with a block live: the heap is unregistered (its region with it)");
  free(got);

  /* A slab (CUEMM_POOL_SLAB): one heap over the whole slab from the start,
   * growth and trim tell the tool nothing, regions as ever. */
  {
    cuemm_config sc = test_config(10, 1.0);
    sc.pool = CUEMM_POOL_VMM;
    sc.pool_chunk = CHUNK;
    sc.pool_reserve = 8 * MiB;
    sc.pool_release_threshold = 0;
    sc.pool_release_delay_ms = 0;
    sc.pool_slab = 1;
    cuemm_manager *ms = NULL;
    CHECK_CU(cuemm_manager_create(NULL, &sc, &ms));
    cuemm_pool_stats sps;
    CHECK_CU(cuemm_pool_get_stats(ms, &sps));
    got = fresh();
    ok(sps.slab == 1 && got && strstr(got, line("heap 3 0x%llx %zu\n", (unsigned long long)sps.base, 8 * MiB)) &&
       !strstr(got, "region"), "a slab: one heap over all its 8 MiB at creation (%s)", got ? got : "");
    free(got);
    CUdeviceptr a, b;
    CHECK_CU(cuemm_allocate(ms, 1000, &a));
    CHECK_CU(cuemm_allocate(ms, 3 * MiB, &b));
    got = fresh();
    ok(got && strstr(got, line("region 3 0x%llx 1000\n", (unsigned long long)a)) && !strstr(got, "heap "),
       "blocks are regions of the slab's heap; growth registers no heap");
    free(got);
    CHECK_CU(cuemm_free(ms, a));
    CHECK_CU(cuemm_free(ms, b));
    CHECK_CU(cuemm_pool_trim(ms));
    got = fresh();
    ok(got && strstr(got, "unregion") && !strstr(got, "unheap"), "freed and trimmed: the regions go, the heap stays");
    free(got);
    CHECK_CU(cuemm_destroy(ms));
    got = fresh();
    is_str(got, "unheap 3\n", "destroyed: the slab's heap is unregistered");
    free(got);
  }

  /* A new pool in the same process: the tool is not loaded again. */
  m = make(-1, NULL);
  CHECK_CU(cuemm_allocate(m, 256, &p1));
  CHECK_CU(cuemm_free(m, p1));
  CHECK_CU(cuemm_destroy(m));
  got = fresh();
  ok(strncmp(got, "heap 4 ", 7) == 0 && !strstr(got, "core") && !strstr(got, "ext"),
     "a second pool: new heaps, the tool loaded once for the process");
  free(got);

  char *all = slurp(main_log);
  ok(all && !strstr(all, "error"), "the tool refused no call (sizes, ids, heaps, regions, unregistrations)");
  if (all && strstr(all, "error"))
    tap_diag("%s", all);
  free(all);
  unlink(main_log);

  children(argv[0], tool, lib);
  rmdir(dir);
  test_release_primary(0);
  return tap_done();
}
