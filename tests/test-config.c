/* test-config.c: defaults, the CUEMM_* environment variables, validation of
 * values a program sets, and what creation does with an invalid one.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

#define COUNT "CUEMM_MAX_PENDING_DEALLOCS_COUNT"
#define RATIO "CUEMM_MAX_PENDING_DEALLOCS_RATIO"

static const char *pool_vars[] = { "CUEMM_POOL", "CUEMM_POOL_RESERVE", "CUEMM_POOL_CHUNK",
                                   "CUEMM_POOL_RELEASE_THRESHOLD", "CUEMM_POOL_LIMIT", "CUEMM_POOL_IPC",
                                   "CUEMM_POOL_LIMIT_HARD", "CUEMM_POOL_PIECE", "CUEMM_POOL_RELEASE_DELAY",
                                   "CUEMM_STREAM_REUSE", "CUEMM_NVTX", "CUEMM_POOL_SLAB",
                                   "CUEMM_STREAM_KEEP_LARGE" };
static const char *other_vars[] = { "CUEMM_MEMORY", "CUEMM_MANAGED_PREFETCH", "CUEMM_MANAGED_PREFERRED_LOCATION",
                                    "CUEMM_MANAGED_ACCESSED_BY", "CUEMM_MANAGED_LIMIT", "CUEMM_STATS",
                                    "CUEMM_LOG" };

static void clear_env(void)
{
  unsetenv(COUNT);
  unsetenv(RATIO);
  for (size_t i = 0; i < sizeof pool_vars / sizeof pool_vars[0]; i++)
    unsetenv(pool_vars[i]);
  for (size_t i = 0; i < sizeof other_vars / sizeof other_vars[0]; i++)
    unsetenv(other_vars[i]);
}

static void invalid(const char *var, const char *value)
{
  clear_env();
  setenv(var, value, 1);
  cuemm_config c;
  is(cuemm_config_init(&c), CUDA_ERROR_INVALID_VALUE, "%s=\"%s\" refused", var, value);
  char want[128];
  snprintf(want, sizeof want, "%s=\"%s\" is invalid: expected ", var, value);
  like(cuemm_last_error(), want, "message names variable and value");
  cuemm_manager *m = NULL;
  is(cuemm_manager_create(NULL, NULL, &m), CUDA_ERROR_INVALID_VALUE, "creation from the environment fails");
  ok(m == NULL, "and creates nothing");
  is(cuemm_manager_create(NULL, &c, &m), CUDA_ERROR_INVALID_VALUE, "a config carrying the error is refused too");
}

/* A number past the knob's range or its type's: "too large", with the
 * largest accepted value and, as for any refusal, what is accepted. */
static void too_large(const char *var, const char *value, const char *most)
{
  clear_env();
  setenv(var, value, 1);
  cuemm_config c;
  is(cuemm_config_init(&c), CUDA_ERROR_INVALID_VALUE, "%s=\"%s\" refused", var, value);
  char want[192];
  snprintf(want, sizeof want, "%s=\"%s\" is too large (at most %s): expected ", var, value, most);
  like(cuemm_last_error(), want, "the message says too large, and the largest accepted");
  ok(strstr(cuemm_last_error(), "is invalid") == NULL, "and not that the form is wrong: %s", cuemm_last_error());
  cuemm_manager *m = NULL;
  is(cuemm_manager_create(NULL, &c, &m), CUDA_ERROR_INVALID_VALUE, "a config carrying the error is refused");
  like(cuemm_last_error(), want, "with the same message");
}

/* A size with letters after its number that are no unit: said as an
 * unknown unit, with the units the parser accepts, not as the knob's
 * whole grammar (a chunk's granularity says nothing of "Mib"). */
static void unknown_unit(const char *var, const char *value, const char *unit)
{
  clear_env();
  setenv(var, value, 1);
  cuemm_config c;
  is(cuemm_config_init(&c), CUDA_ERROR_INVALID_VALUE, "%s=\"%s\" refused", var, value);
  char want[256];
  snprintf(want, sizeof want, "%s=\"%s\" is invalid: unknown unit '%s' (units: K, KiB, M, MiB, G, GiB, T, TiB; "
           "none for bytes)", var, value, unit);
  is_str(cuemm_last_error(), want, "the message names the unknown unit '%s' and the units accepted", unit);
  cuemm_manager *m = NULL;
  is(cuemm_manager_create(NULL, NULL, &m), CUDA_ERROR_INVALID_VALUE, "creation from the environment fails");
  like(cuemm_last_error(), want, "with the same message");
}

/* A size knob: the value parsed into the field at `offset`. */
static void valid_size(const char *var, const char *value, size_t offset, size_t want)
{
  clear_env();
  setenv(var, value, 1);
  cuemm_config c;
  CUresult r = cuemm_config_init(&c);
  size_t got = *(size_t *)(void *)((char *)&c + offset);
  ok(r == CUDA_SUCCESS && got == want, "%s=\"%s\" accepted as %zu (got %zu)", var, value, want, got);
}

static void pool_knobs(void)
{
  cuemm_config c;
  clear_env();
  cuemm_config_init(&c);
  is(c.pool, CUEMM_POOL_NONE, "the pool is off by default");
  is(c.pool_chunk, (size_t)32 << 20, "default chunk 32 MiB");
  is(c.pool_reserve, 0, "default reservation: the device's memory");
  is(c.pool_release_threshold, (size_t)1 << 30, "default release threshold 1 GiB");
  is(c.pool_limit, 0, "no limit by default");
  setenv("CUEMM_POOL", "vmm", 1);
  is(cuemm_config_init(&c), CUDA_SUCCESS, "CUEMM_POOL=vmm");
  is(c.pool, CUEMM_POOL_VMM, "turns the pool on");
  setenv("CUEMM_POOL", "none", 1);
  cuemm_config_init(&c);
  is(c.pool, CUEMM_POOL_NONE, "CUEMM_POOL=none turns it off");
  valid_size("CUEMM_POOL_RESERVE", "4GiB", offsetof(cuemm_config, pool_reserve), (size_t)4 << 30);
  valid_size("CUEMM_POOL_RESERVE", "512M", offsetof(cuemm_config, pool_reserve), (size_t)512 << 20);
  valid_size("CUEMM_POOL_CHUNK", "2097152", offsetof(cuemm_config, pool_chunk), (size_t)2 << 20);
  valid_size("CUEMM_POOL_CHUNK", "64MiB", offsetof(cuemm_config, pool_chunk), (size_t)64 << 20);
  valid_size("CUEMM_POOL_RELEASE_THRESHOLD", "0", offsetof(cuemm_config, pool_release_threshold), 0);
  valid_size("CUEMM_POOL_LIMIT", "16G", offsetof(cuemm_config, pool_limit), (size_t)16 << 30);
  valid_size("CUEMM_POOL_LIMIT", "1TiB", offsetof(cuemm_config, pool_limit), (size_t)1 << 40);
  invalid("CUEMM_POOL", "VMM");
  invalid("CUEMM_POOL", "yes");
  unknown_unit("CUEMM_POOL_RESERVE", "4GB", "GB");
  unknown_unit("CUEMM_POOL_CHUNK", "64Mib", "Mib");
  unknown_unit("CUEMM_POOL_LIMIT", "16g", "g");
  invalid("CUEMM_POOL_RESERVE", "-1");
  invalid("CUEMM_POOL_RESERVE", "1.5G");
  invalid("CUEMM_POOL_RESERVE", "4 GiB");
  too_large("CUEMM_POOL_RESERVE", "300TiB", "256TiB (281474976710656 bytes)");
  too_large("CUEMM_POOL_RESERVE", "99999999999999999999999", "256TiB (281474976710656 bytes)");
  too_large("CUEMM_POOL_LIMIT", "18446744073709551615K", "256TiB (281474976710656 bytes)");
  too_large("CUEMM_POOL_CHUNK", "281474976710657", "256TiB (281474976710656 bytes)");
  unknown_unit("CUEMM_POOL_RESERVE", "99999999999999999999999GB", "GB");
  invalid("CUEMM_POOL_CHUNK", "0");
  invalid("CUEMM_POOL_LIMIT", "lots");
  like(cuemm_last_error(), "CUEMM_POOL_LIMIT=\"lots\" is invalid: expected a size in bytes", "message says sizes are expected");
  clear_env();
  cuemm_config_init(&c);
  c.pool = (cuemm_pool_kind)7;
  cuemm_manager *m = NULL;
  is(cuemm_manager_create(NULL, &c, &m), CUDA_ERROR_INVALID_VALUE, "an unknown pool kind is refused");
  like(cuemm_last_error(), "cuemm_config.pool ", "naming the field");

  clear_env();
  cuemm_config_init(&c);
  is(c.pool_ipc, 0, "pool IPC is off by default");
  setenv("CUEMM_POOL_IPC", "1", 1);
  is(cuemm_config_init(&c), CUDA_SUCCESS, "CUEMM_POOL_IPC=1 accepted");
  is(c.pool_ipc, 1, "and turns pool IPC on");
  setenv("CUEMM_POOL_IPC", "0", 1);
  cuemm_config_init(&c);
  is(c.pool_ipc, 0, "CUEMM_POOL_IPC=0 turns it off");
  invalid("CUEMM_POOL_IPC", "yes");
  invalid("CUEMM_POOL_IPC", "2");
  like(cuemm_last_error(), "CUEMM_POOL_IPC=\"2\" is invalid: expected 0 or 1", "message says 0 or 1");
  clear_env();
  cuemm_config_init(&c);
  c.pool_ipc = 2;
  is(cuemm_manager_create(NULL, &c, &m), CUDA_ERROR_INVALID_VALUE, "cuemm_config.pool_ipc = 2 refused");
  like(cuemm_last_error(), "cuemm_config.pool_ipc", "naming the field");

  clear_env();
  cuemm_config_init(&c);
  is(c.pool_limit_hard, 0, "the limit is soft by default");
  is(c.pool_piece, 0, "the piece size is measured by default");
  setenv("CUEMM_POOL_LIMIT_HARD", "1", 1);
  is(cuemm_config_init(&c), CUDA_SUCCESS, "CUEMM_POOL_LIMIT_HARD=1 accepted");
  is(c.pool_limit_hard, 1, "and makes the limit hard");
  invalid("CUEMM_POOL_LIMIT_HARD", "yes");
  like(cuemm_last_error(), "CUEMM_POOL_LIMIT_HARD=\"yes\" is invalid: expected 0 or 1", "message says 0 or 1");
  clear_env();
  cuemm_config_init(&c);
  c.pool_limit_hard = -1;
  is(cuemm_manager_create(NULL, &c, &m), CUDA_ERROR_INVALID_VALUE, "cuemm_config.pool_limit_hard = -1 refused");
  like(cuemm_last_error(), "cuemm_config.pool_limit_hard", "naming the field");
  valid_size("CUEMM_POOL_PIECE", "1GiB", offsetof(cuemm_config, pool_piece), (size_t)1 << 30);
  valid_size("CUEMM_POOL_PIECE", "0", offsetof(cuemm_config, pool_piece), 0);
  invalid("CUEMM_POOL_PIECE", "1.5GiB");
  like(cuemm_last_error(), "CUEMM_POOL_PIECE=\"1.5GiB\" is invalid: expected a size in bytes, a multiple of "
       "the allocation granularity", "message says what sizes are accepted");
  invalid("CUEMM_POOL_PIECE", "-64M");
  invalid("CUEMM_POOL_PIECE", "0.5G");

  clear_env();
  cuemm_config_init(&c);
  is(c.pool_release_delay_ms, 1000, "the release delay is 1000 ms by default");
  is(c.stream_reuse, CUEMM_STREAM_REUSE_INTERNAL,
     "cross-stream reuse: events, and waits where the pool would grow, by default");
  setenv("CUEMM_POOL_RELEASE_DELAY", "0", 1);
  setenv("CUEMM_STREAM_REUSE", "wait", 1);
  is(cuemm_config_init(&c), CUDA_SUCCESS, "CUEMM_POOL_RELEASE_DELAY=0 and CUEMM_STREAM_REUSE=wait accepted");
  ok(c.pool_release_delay_ms == 0 && c.stream_reuse == CUEMM_STREAM_REUSE_WAIT, "and set");
  clear_env();
  invalid("CUEMM_POOL_RELEASE_DELAY", "1s");
  like(cuemm_last_error(), "CUEMM_POOL_RELEASE_DELAY=\"1s\" is invalid: expected a whole number of milliseconds",
       "the delay's message says milliseconds");
  too_large("CUEMM_POOL_RELEASE_DELAY", "86400001", "86400000");
  invalid("CUEMM_STREAM_REUSE", "Wait");
  like(cuemm_last_error(), "CUEMM_STREAM_REUSE=\"Wait\" is invalid: expected \"event\", \"wait\" or \"internal\"",
       "the reuse rule's message lists all three");
  setenv("CUEMM_STREAM_REUSE", "internal", 1);
  c.stream_reuse = CUEMM_STREAM_REUSE_EVENT;
  is(cuemm_config_init(&c), CUDA_SUCCESS, "CUEMM_STREAM_REUSE=internal accepted");
  is(c.stream_reuse, CUEMM_STREAM_REUSE_INTERNAL, "and set");
  unsetenv("CUEMM_STREAM_REUSE");
  clear_env();
  cuemm_config_init(&c);
  is(c.stream_keep_large, 24, "a thread keeps 24 large blocks per stream by default");
  setenv("CUEMM_STREAM_KEEP_LARGE", "0", 1);
  is(cuemm_config_init(&c), CUDA_SUCCESS, "CUEMM_STREAM_KEEP_LARGE=0 accepted");
  is(c.stream_keep_large, 0, "and set");
  setenv("CUEMM_STREAM_KEEP_LARGE", "32", 1);
  is(cuemm_config_init(&c), CUDA_SUCCESS, "CUEMM_STREAM_KEEP_LARGE=32 accepted");
  is(c.stream_keep_large, 32, "and set");
  too_large("CUEMM_STREAM_KEEP_LARGE", "33", "32");
  like(cuemm_last_error(), "CUEMM_STREAM_KEEP_LARGE=\"33\" is too large (at most 32): expected a whole number of "
       "blocks from 0 to 32", "the keep count's message gives the range");
  invalid("CUEMM_STREAM_KEEP_LARGE", "-1");
  invalid("CUEMM_STREAM_KEEP_LARGE", "8 blocks");
  clear_env();
  cuemm_config_init(&c);
  c.stream_keep_large = 33;
  is(cuemm_manager_create(NULL, &c, &m), CUDA_ERROR_INVALID_VALUE, "cuemm_config.stream_keep_large = 33 refused");
  like(cuemm_last_error(), "cuemm_config.stream_keep_large", "naming the field");
  cuemm_config_init(&c);
  c.stream_reuse = (cuemm_stream_reuse)7;
  is(cuemm_manager_create(NULL, &c, &m), CUDA_ERROR_INVALID_VALUE, "cuemm_config.stream_reuse = 7 refused");
  like(cuemm_last_error(), "cuemm_config.stream_reuse", "naming the field");
  clear_env();
}

static void nvtx_knob(void)
{
  cuemm_config c;
  cuemm_manager *m = NULL;
  clear_env();
  cuemm_config_init(&c);
  is(c.nvtx, 1, "NVTX annotations are on by default (they act only when a tool is attached)");
  setenv("CUEMM_NVTX", "0", 1);
  is(cuemm_config_init(&c), CUDA_SUCCESS, "CUEMM_NVTX=0 accepted");
  is(c.nvtx, 0, "and turns them off");
  setenv("CUEMM_NVTX", "1", 1);
  cuemm_config_init(&c);
  is(c.nvtx, 1, "CUEMM_NVTX=1 turns them on");
  invalid("CUEMM_NVTX", "yes");
  like(cuemm_last_error(), "CUEMM_NVTX=\"yes\" is invalid: expected 0 or 1", "message says 0 or 1");
  invalid("CUEMM_NVTX", "2");
  clear_env();
  cuemm_config_init(&c);
  is(c.pool_slab, 0, "the pool is virtual memory by default");
  setenv("CUEMM_POOL_SLAB", "1", 1);
  is(cuemm_config_init(&c), CUDA_SUCCESS, "CUEMM_POOL_SLAB=1 accepted");
  is(c.pool_slab, 1, "and asks for a slab");
  invalid("CUEMM_POOL_SLAB", "on");
  like(cuemm_last_error(), "CUEMM_POOL_SLAB=\"on\" is invalid: expected 0 or 1", "message says 0 or 1");
  clear_env();
  cuemm_config_init(&c);
  c.nvtx = 2;
  is(cuemm_manager_create(NULL, &c, &m), CUDA_ERROR_INVALID_VALUE, "cuemm_config.nvtx = 2 refused");
  like(cuemm_last_error(), "cuemm_config.nvtx", "naming the field");
  clear_env();
}

typedef struct long_args {
  size_t length, named;
  int after;
} long_args;

/* In a thread of its own: the environment's long message, then a short
 * one (the thread's buffers go at its exit: valgrind sees a leak if not). */
static void *long_error_thread(void *arg)
{
  long_args *a = arg;
  cuemm_config c;
  cuemm_config_init(&c);
  a->length = strlen(cuemm_last_error());
  const char *m = cuemm_last_error();
  for (const char *p = m; (p = strstr(p, "=\"99999")) != NULL; p++)
    a->named++;
  cuemm_config_init(NULL);
  a->after = strcmp(cuemm_last_error(), "cuemm_config_init: cfg is NULL");
  return NULL;
}

/* Every invalid variable is reported, each with the sentence it has alone. */
static void all_reported(void)
{
  clear_env();
  setenv("CUEMM_POOL", "banana", 1);
  setenv("CUEMM_STATS", "7", 1);
  setenv(COUNT, "99999999999999999999", 1);
  setenv("CUEMM_POOL_CHUNK", "64MiB", 1); /* valid: applied */
  cuemm_config c;
  is(cuemm_config_init(&c), CUDA_ERROR_INVALID_VALUE, "three invalid variables: refused");
  const char *want[] = { "CUEMM_POOL=\"banana\" is invalid: expected \"none\" or \"vmm\"",
                         "CUEMM_STATS=\"7\" is invalid: expected 0 or 1",
                         COUNT "=\"99999999999999999999\" is too large (at most 4294967295): expected a whole number "
                         "of frees from 0 to 4294967295" };
  for (size_t i = 0; i < 3; i++) {
    like(cuemm_last_error(), want[i], "cuemm_last_error has the whole sentence of variable %zu", i);
  }
  ok(c.env_invalid != 0 && __builtin_popcountll(c.env_invalid) == 3, "env_invalid has their three bits");
  ok((c.env_invalid & c.env_set) == 0, "and env_set none of them");
  like(cuemm_last_error(), "\"; CUEMM_STATS=", "one after the other, separated by \"; \"");
  is(c.pool_chunk, (size_t)64 << 20, "the valid one is applied");
  is(c.pool, CUEMM_POOL_NONE, "an invalid one keeps its default");
  cuemm_manager *m = NULL;
  is(cuemm_manager_create(NULL, NULL, &m), CUDA_ERROR_INVALID_VALUE, "creation from the environment fails");
  for (size_t i = 0; i < 3; i++)
    like(cuemm_last_error(), want[i], "naming every variable (%zu)", i);
  is(cuemm_manager_create(NULL, &c, &m), CUDA_ERROR_INVALID_VALUE, "so does creation from the config");
  for (size_t i = 0; i < 3; i++)
    like(cuemm_last_error(), want[i], "naming every variable (%zu)", i);

  /* Every variable at once, each with a long value: nothing is cut. */
  const char *all[] = { COUNT, RATIO, "CUEMM_POOL", "CUEMM_POOL_RESERVE", "CUEMM_POOL_CHUNK",
                        "CUEMM_POOL_RELEASE_THRESHOLD", "CUEMM_POOL_RELEASE_DELAY", "CUEMM_POOL_LIMIT",
                        "CUEMM_POOL_IPC", "CUEMM_POOL_SLAB", "CUEMM_POOL_LIMIT_HARD", "CUEMM_POOL_PIECE",
                        "CUEMM_STREAM_REUSE", "CUEMM_STREAM_KEEP_LARGE", "CUEMM_MEMORY", "CUEMM_MANAGED_PREFETCH",
                        "CUEMM_MANAGED_PREFERRED_LOCATION", "CUEMM_MANAGED_ACCESSED_BY", "CUEMM_STATS",
                        "CUEMM_MANAGED_LIMIT", "CUEMM_NVTX" };
  const size_t nall = sizeof all / sizeof all[0];
  for (size_t i = 0; i < nall; i++)
    setenv(all[i], "999999999999999999999999999999999999999999999999999999999999999999999999", 1);
  is(cuemm_config_init(&c), CUDA_ERROR_INVALID_VALUE, "all %zu numeric and named knobs invalid: refused", nall);
  size_t named = 0;
  for (size_t i = 0; i < nall; i++) {
    char key[96];
    snprintf(key, sizeof key, "%s=\"99999", all[i]);
    named += strstr(cuemm_last_error(), key) != NULL;
  }
  is(named, nall, "every one is named in the message");
  is(__builtin_popcountll(c.env_invalid), (int)nall, "and has its bit in env_invalid");
  const char *tail = "expected a whole number of frees from 0 to 4294967295"; /* the first knob's sentence */
  like(cuemm_last_error(), tail, "the first sentence is whole");
  size_t n = strlen(cuemm_last_error());
  char *whole = malloc(n + 1);
  memcpy(whole, cuemm_last_error(), n + 1);
  ok(n > 1024, "the message is long (%zu bytes)", n);
  like(whole + n - 12, "0 or 1", "the last knob's sentence ends the text: %s", whole + n - 40);
  cuemm_manager *cm = NULL;
  is(cuemm_manager_create(NULL, &c, &cm), CUDA_ERROR_INVALID_VALUE, "creation from that config is refused");
  ok(strcmp(whole, cuemm_last_error()) == 0, "with the very message cuemm_config_init gave");
  free(whole);

  /* Context appended to such a message is kept whole too. */
  cuemm_manager *dm = NULL;
  is(cuemm_device_manager(0, &dm), CUDA_ERROR_INVALID_VALUE, "the framework adapters' manager: refused");
  named = 0;
  for (size_t i = 0; i < nall; i++) {
    char key[96];
    snprintf(key, sizeof key, "%s=\"99999", all[i]);
    named += strstr(cuemm_last_error(), key) != NULL;
  }
  is(named, nall, "naming every variable");
  n = strlen(cuemm_last_error());
  const char *ctx = " (cuemm_device_manager 0)";
  ok(n > strlen(ctx) && strcmp(cuemm_last_error() + n - strlen(ctx), ctx) == 0,
     "and the device after them: ...%s", cuemm_last_error() + (n > 40 ? n - 40 : 0));

  /* Each thread has its own long message; the main thread's stays. */
  char before[64];
  snprintf(before, sizeof before, "%s", cuemm_last_error());
  pthread_t t;
  long_args la = { 0 };
  pthread_create(&t, NULL, long_error_thread, &la);
  pthread_join(t, NULL);
  ok(la.named == nall && la.length > 1024, "a thread's long message is its own, whole (%zu bytes, %zu named)",
     la.length, la.named);
  is(la.after, 0, "a short message after it is the thread's message alone");
  ok(strncmp(cuemm_last_error(), before, strlen(before)) == 0, "the main thread's message is untouched");
  for (size_t i = 0; i < nall; i++)
    unsetenv(all[i]);
  clear_env();
  cuemm_config_init(NULL);
  is_str(cuemm_last_error(), "cuemm_config_init: cfg is NULL", "a short message after a long one is short");
}

/* Reads what fn writes to stderr. */
static void capture_stderr(void (*fn)(void *), void *arg, char *out, size_t cap)
{
  char path[] = "/tmp/test-config-XXXXXX";
  int fd = mkstemp(path);
  fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);
  fn(arg);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  ssize_t n = pread(fd, out, cap - 1, 0);
  out[n > 0 ? n : 0] = '\0';
  close(fd);
  unlink(path);
}

typedef struct create_args {
  const cuemm_config *cfg;
  CUresult r;
  size_t pool_chunk;
  int pool;
} create_args;

static void create_destroy(void *arg)
{
  create_args *a = arg;
  cuemm_manager *m = NULL;
  a->r = cuemm_manager_create(NULL, a->cfg, &m);
  if (a->r == CUDA_SUCCESS) {
    cuemm_pool_stats ps;
    cuemm_pool_get_stats(m, &ps);
    a->pool = ps.enabled;
    a->pool_chunk = ps.chunk_bytes;
    cuemm_destroy(m);
  }
}

/* Settings a manager does not act on: created, and said once on stderr. */
static void ignored(void)
{
  char err[4096];
  create_args a = { 0 };
  clear_env();
  setenv("CUEMM_POOL_CHUNK", "3", 1);
  setenv("CUEMM_POOL_LIMIT", "1GiB", 1);
  setenv("CUEMM_MANAGED_LIMIT", "1GiB", 1);
  setenv(COUNT, "4", 1);
  capture_stderr(create_destroy, &a, err, sizeof err);
  is(a.r, CUDA_SUCCESS, "a manager without a pool is created with pool and managed knobs set");
  is(a.pool, 0, "without a pool");
  like(err, "cuemm: CUEMM_POOL_CHUNK is set (cuemm_config.pool_chunk = 3) but ignored: it acts only with "
       "CUEMM_POOL=vmm or CUEMM_MEMORY=managed, and this manager has no pool and device memory\n",
       "stderr names the chunk, its value, what it needs and what the manager has");
  like(err, "cuemm: CUEMM_POOL_LIMIT is set (cuemm_config.pool_limit = 1GiB) but ignored: it acts only with "
       "CUEMM_POOL=vmm, and", "the limit");
  like(err, "cuemm: CUEMM_MANAGED_LIMIT is set (cuemm_config.managed_limit = 1GiB) but ignored: it acts only with "
       "CUEMM_MEMORY=managed, and", "the managed limit");
  ok(strstr(err, COUNT) == NULL, "not the count, which every manager acts on");
  size_t lines = 0;
  for (const char *p = err; (p = strchr(p, '\n')) != NULL; p++)
    lines++;
  is(lines, 3, "three lines, no more");

  capture_stderr(create_destroy, &a, err, sizeof err);
  is(a.r, CUDA_SUCCESS, "a second such manager");
  is_str(err, "", "hears nothing more: once per variable and process");

  /* A knob the manager acts on says nothing; one not said before is said. */
  clear_env();
  setenv("CUEMM_POOL", "vmm", 1);
  setenv("CUEMM_POOL_RESERVE", "64MiB", 1);
  setenv("CUEMM_POOL_CHUNK", "4MiB", 1);
  capture_stderr(create_destroy, &a, err, sizeof err);
  ok(a.r == CUDA_SUCCESS && a.pool && a.pool_chunk == (size_t)4 << 20, "with CUEMM_POOL=vmm the chunk applies");
  is_str(err, "", "and nothing is said");
  clear_env();
  setenv("CUEMM_STREAM_KEEP_LARGE", "8", 1);
  cuemm_config c;
  cuemm_config_init(&c);
  c.pool = CUEMM_POOL_VMM; /* the program's choice: its pool takes the knob */
  a.cfg = &c;
  capture_stderr(create_destroy, &a, err, sizeof err);
  ok(a.r == CUDA_SUCCESS && a.pool, "a program-chosen pool");
  is_str(err, "", "acts on CUEMM_STREAM_KEEP_LARGE: nothing said");
  c.pool = CUEMM_POOL_NONE;
  capture_stderr(create_destroy, &a, err, sizeof err);
  like(err, "cuemm: CUEMM_STREAM_KEEP_LARGE is set (cuemm_config.stream_keep_large = 8) but ignored: it acts only "
       "with CUEMM_POOL=vmm", "without one, it is said");
  clear_env();
  cuemm_config_init(&c);
  c.pool_reserve = (size_t)1 << 30; /* the program's own value is its choice */
  capture_stderr(create_destroy, &a, err, sizeof err);
  ok(a.r == CUDA_SUCCESS, "a program's own pool field without a pool");
  is_str(err, "", "is not reported");
  clear_env();
}

static void device_manager(void *arg)
{
  create_args *a = arg;
  cuemm_manager *m = NULL;
  a->r = cuemm_device_manager(0, &m);
  if (a->r == CUDA_SUCCESS) {
    cuemm_pool_stats ps;
    cuemm_pool_get_stats(m, &ps);
    a->pool = ps.enabled;
  }
}

/* The framework adapters turn the pool on when CUEMM_POOL is unset: a pool
 * knob then applies and nothing is said.  Last, since the device's manager
 * lives to the process's end. */
static void adapters_pool(void)
{
  char err[4096];
  create_args a = { 0 };
  clear_env();
  setenv("CUEMM_POOL_RELEASE_DELAY", "5", 1);
  capture_stderr(device_manager, &a, err, sizeof err);
  ok(a.r == CUDA_SUCCESS && a.pool, "the adapters' manager of device 0 has the pool with CUEMM_POOL unset");
  is_str(err, "", "so CUEMM_POOL_RELEASE_DELAY applies: nothing said");
  /* A manager without a pool in the same process does say it: it was not
   * said before. */
  CUdevice dev;
  CUcontext ctx, prev;
  CHECK_CU(cuCtxGetCurrent(&prev));
  CHECK_CU(cuDeviceGet(&dev, 0));
  CHECK_CU(cuCtxCreate(&ctx, NULL, 0, dev));
  a.cfg = NULL;
  capture_stderr(create_destroy, &a, err, sizeof err);
  is(a.r, CUDA_SUCCESS, "a manager of another context from the same environment");
  like(err, "cuemm: CUEMM_POOL_RELEASE_DELAY is set (cuemm_config.pool_release_delay_ms = 5) but ignored: it acts "
       "only with CUEMM_POOL=vmm, and this manager has no pool and device memory", "is told it ignores the delay");
  CHECK_CU(cuCtxDestroy(ctx));
  CHECK_CU(cuCtxSetCurrent(prev));
  clear_env();
}

static void config_init(void *arg)
{
  cuemm_config c;
  *(CUresult *)arg = cuemm_config_init(&c);
}

/* A CUEMM_ variable that nobody reads is said on stderr, with the nearest
 * name the library reads, once per variable and process; the library's own,
 * those read where they act and the test suite's are not. */
static void unknown_variables(void)
{
  static const char *ours[] = { "CUEMM_LIBCUDA", "CUEMM_LIBRARY", "CUEMM_TEST_DRIVER", "CUEMM_TOP_BUILDDIR",
                                "CUEMM_SIM_DIR", "CUEMM_PYTHON", "CUEMM_PYTHON_INSTALLED", "CUEMM_PLUGIN_SKIP",
                                "CUEMM_STRESS_SEED", "CUEMM_STRESS_OPS", "CUEMM_FUZZ_SECONDS",
                                "CUEMM_CORPUS_RECORD", "CUEMM_BUILDDIR", "CUEMM_USE" };
  char err[4096], *kept[sizeof ours / sizeof ours[0]];
  CUresult r;
  clear_env();
  for (size_t i = 0; i < sizeof ours / sizeof ours[0]; i++) {
    const char *v = getenv(ours[i]);
    kept[i] = v ? strdup(v) : NULL;
    if (!v && strcmp(ours[i], "CUEMM_LIBCUDA") != 0) /* the driver file must stay the one the test runs on */
      setenv(ours[i], "1", 1);
  }
  setenv("CUEMM_STATS", "1", 1);
  setenv(COUNT, "5", 1);
  capture_stderr(config_init, &r, err, sizeof err);
  ok(r == CUDA_SUCCESS, "known variables: accepted");
  is_str(err, "", "the library's variables, those read where they act and the test suite's: nothing said");

  setenv("CUEMM_STAT", "1", 1);
  capture_stderr(config_init, &r, err, sizeof err);
  ok(r == CUDA_SUCCESS, "CUEMM_STAT=1 beside them: accepted (a warning, not an error)");
  is_str(err, "cuemm: CUEMM_STAT is set but cuemm reads no such variable: ignored (did you mean CUEMM_STATS?); "
         "cuemm(7) lists those it reads\n", "stderr names CUEMM_STAT and suggests CUEMM_STATS");
  capture_stderr(config_init, &r, err, sizeof err);
  is_str(err, "", "once per variable and process: nothing the second time");
  setenv("CUEMM_POOL_CHUNKS", "4MiB", 1);
  setenv("CUEMM_BANANA", "1", 1);
  setenv("CUEMM_EMPTY_ONE", "", 1);
  capture_stderr(config_init, &r, err, sizeof err);
  like(err, "cuemm: CUEMM_POOL_CHUNKS is set but cuemm reads no such variable: ignored (did you mean "
       "CUEMM_POOL_CHUNK?)", "another misspelling is said when it is new");
  like(err, "cuemm: CUEMM_BANANA is set but cuemm reads no such variable: ignored; cuemm(7)",
       "a name near none: no suggestion");
  ok(strstr(err, "CUEMM_STAT ") == NULL && strstr(err, "CUEMM_EMPTY_ONE") == NULL,
     "not CUEMM_STAT again, nor an empty variable (unset, as a knob's)");
  unsetenv("CUEMM_STAT");
  unsetenv("CUEMM_POOL_CHUNKS");
  unsetenv("CUEMM_BANANA");
  unsetenv("CUEMM_EMPTY_ONE");
  unsetenv("CUEMM_STATS"); /* no statistics table at the manager's end */
  setenv("CUEMM_NVTXX", "0", 1);
  create_args a = { 0 };
  capture_stderr(create_destroy, &a, err, sizeof err);
  is(a.r, CUDA_SUCCESS, "cuemm_create from the environment");
  is_str(err, "cuemm: CUEMM_NVTXX is set but cuemm reads no such variable: ignored (did you mean CUEMM_NVTX?); "
         "cuemm(7) lists those it reads\n", "says it too");
  unsetenv("CUEMM_NVTXX");
  for (size_t i = 0; i < sizeof ours / sizeof ours[0]; i++) {
    if (kept[i])
      setenv(ours[i], kept[i], 1);
    else
      unsetenv(ours[i]);
    free(kept[i]);
  }
  clear_env();
}

static void valid(const char *var, const char *value, size_t want_count, double want_ratio)
{
  clear_env();
  setenv(var, value, 1);
  cuemm_config c;
  CUresult r = cuemm_config_init(&c);
  ok(r == CUDA_SUCCESS && c.max_pending_count == want_count && c.max_pending_ratio == want_ratio,
     "%s=\"%s\" accepted (count %zu, ratio %g)", var, value, c.max_pending_count, c.max_pending_ratio);
}

/* cuemm_config.size: a struct of an older cuemm.h (smaller) takes defaults
 * for the fields it lacks; a size no struct has is refused, naming it. */
static void sizes(void)
{
  clear_env();
  cuemm_config c;
  cuemm_manager *m = NULL, *g = NULL;
  cuemm_config_init(&c);
  is(c.size, sizeof(cuemm_config), "cuemm_config_init sets size to sizeof(cuemm_config)");

  /* An older struct ending before `memory`: what lies past it is not the
   * program's, and would be refused (memory, log_file) or change the
   * manager (secondary) if it were read. */
  c.pool = CUEMM_POOL_VMM;
  c.pool_chunk = (size_t)4 << 20;
  c.size = offsetof(cuemm_config, memory);
  c.memory = (cuemm_memory_kind)99;
  c.log_file = "/nonexistent/dir/cuemm.csv";
  c.secondary = 1;
  c.env_status = CUDA_ERROR_INVALID_VALUE;
  is(cuemm_manager_create(NULL, &c, &m), CUDA_SUCCESS, "size = offsetof(cuemm_config, memory): accepted");
  if (m) {
    cuemm_pool_stats ps;
    CHECK_CU(cuemm_pool_get_stats(m, &ps));
    ok(ps.enabled && ps.chunk_bytes == (size_t)4 << 20, "the fields within it are the program's (pool, 4 MiB chunk)");
    cuemm_managed_stats ms;
    CHECK_CU(cuemm_managed_get_stats(m, &ms));
    is(ms.memory, CUEMM_MEMORY_DEVICE, "memory past it takes its default (device)");
    CHECK_CU(cuemm_get(&g));
    ok(g == m, "secondary past it takes its default (0: the context's manager)");
    CHECK_CU(cuemm_destroy(m));
    m = NULL;
  }

  /* A late field alone missing. */
  cuemm_config_init(&c);
  c.secondary = 1;
  c.size = offsetof(cuemm_config, secondary);
  is(cuemm_manager_create(NULL, &c, &m), CUDA_SUCCESS, "size = offsetof(cuemm_config, secondary): accepted");
  if (m) {
    CHECK_CU(cuemm_get(&g));
    ok(g == m, "secondary takes its default");
    CHECK_CU(cuemm_destroy(m));
    m = NULL;
  }

  cuemm_config_init(&c);
  c.size = 0;
  is(cuemm_manager_create(NULL, &c, &m), CUDA_ERROR_INVALID_VALUE, "size 0 refused");
  like(cuemm_last_error(), "cuemm_config.size = 0 is invalid", "naming the field: %s", cuemm_last_error());
  ok(m == NULL, "and creates nothing");
  c.size = sizeof c + 8;
  is(cuemm_manager_create(NULL, &c, &m), CUDA_ERROR_INVALID_VALUE, "a size larger than this library's refused");
  like(cuemm_last_error(), "cuemm_config.size", "naming the field");
  c.size = (size_t)0xdeadbeefcafe;
  is(cuemm_manager_create(NULL, &c, &m), CUDA_ERROR_INVALID_VALUE, "a garbage size refused");
}

int main(void)
{
  sim_init();
  test_primary_context(0);
  clear_env();

  cuemm_config c;
  is(cuemm_config_init(&c), CUDA_SUCCESS, "defaults");
  is(c.max_pending_count, 10, "default count 10");
  ok(c.max_pending_ratio == 0.2, "default ratio 0.2");
  is(cuemm_config_init(NULL), CUDA_ERROR_INVALID_VALUE, "NULL config refused");

  valid(COUNT, "5", 5, 0.2);
  valid(COUNT, "0", 0, 0.2);
  valid(COUNT, "4294967295", 4294967295u, 0.2);
  valid(RATIO, "0.5", 10, 0.5);
  valid(RATIO, "1", 10, 1.0);
  valid(RATIO, ".25", 10, 0.25);
  valid(RATIO, "", 10, 0.2); /* empty: unset */

  invalid(COUNT, "abc");
  invalid(COUNT, "-1");
  invalid(COUNT, "10x");
  invalid(COUNT, " 10");
  too_large(COUNT, "4294967296", "4294967295");
  too_large(COUNT, "99999999999999999999999", "4294967295");
  invalid(COUNT, "1e3");
  invalid(RATIO, "0");
  too_large(RATIO, "1.5", "1");
  too_large(RATIO, "1e999", "1");
  like(cuemm_last_error(), "greater than 0 and at most 1", "the ratio's message gives the range");
  invalid(RATIO, "-0.2");
  invalid(RATIO, "0.2x");
  invalid(RATIO, "nan");
  invalid(RATIO, "inf");
  invalid(RATIO, "20%");
  like(cuemm_last_error(), "greater than 0 and at most 1", "message says what is accepted");

  /* The environment sets, the program's values win. */
  clear_env();
  setenv(COUNT, "5", 1);
  setenv(RATIO, "0.5", 1);
  cuemm_config_init(&c);
  c.max_pending_count = 3;
  cuemm_manager *m = NULL;
  CHECK_CU(cuemm_manager_create(NULL, &c, &m));
  cuemm_stats s = test_stats(m);
  is(s.max_pending_count, 3, "program's count wins over the environment");
  is(s.max_pending_bytes, (size_t)(0.5 * (double)s.total_bytes), "environment's ratio applied");
  CHECK_CU(cuemm_destroy(m));

  /* Environment-created manager uses the environment. */
  CHECK_CU(cuemm_manager_create(NULL, NULL, &m));
  s = test_stats(m);
  is(s.max_pending_count, 5, "created from the environment: count 5");
  CHECK_CU(cuemm_destroy(m));
  clear_env();

  /* Values a program sets are validated at creation. */
  cuemm_config_init(&c);
  c.max_pending_ratio = 0.0;
  is(cuemm_manager_create(NULL, &c, &m), CUDA_ERROR_INVALID_VALUE, "ratio 0 refused");
  like(cuemm_last_error(), "max_pending_ratio", "message names the field");
  c.max_pending_ratio = 1.01;
  is(cuemm_manager_create(NULL, &c, &m), CUDA_ERROR_INVALID_VALUE, "ratio above 1 refused");
  cuemm_config_init(&c);
  c.max_pending_count = (size_t)1 << 40;
  is(cuemm_manager_create(NULL, &c, &m), CUDA_ERROR_INVALID_VALUE, "count beyond range refused");
  like(cuemm_last_error(), "max_pending_count", "message names the field");

  unknown_variables();
  pool_knobs();
  nvtx_knob();
  all_reported();
  sizes();
  ignored();
  adapters_pool();
  clear_env();
  test_release_primary(0);
  return tap_done();
}
