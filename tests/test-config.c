/* test-config.c: defaults, the CUEMM_* environment variables, validation of
 * values a program sets, and what creation does with an invalid one.
 */
#include <stddef.h>
#include <stdlib.h>

#include "testutil.h"

#define COUNT "CUEMM_MAX_PENDING_DEALLOCS_COUNT"
#define RATIO "CUEMM_MAX_PENDING_DEALLOCS_RATIO"

static const char *pool_vars[] = { "CUEMM_POOL", "CUEMM_POOL_RESERVE", "CUEMM_POOL_CHUNK",
                                   "CUEMM_POOL_RELEASE_THRESHOLD", "CUEMM_POOL_LIMIT", "CUEMM_POOL_IPC",
                                   "CUEMM_POOL_LIMIT_HARD", "CUEMM_POOL_PIECE", "CUEMM_POOL_RELEASE_DELAY",
                                   "CUEMM_STREAM_REUSE", "CUEMM_NVTX", "CUEMM_POOL_SLAB",
                                   "CUEMM_STREAM_KEEP_LARGE" };

static void clear_env(void)
{
  unsetenv(COUNT);
  unsetenv(RATIO);
  for (size_t i = 0; i < sizeof pool_vars / sizeof pool_vars[0]; i++)
    unsetenv(pool_vars[i]);
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
  is(cuemm_create(&m, NULL, NULL), CUDA_ERROR_INVALID_VALUE, "creation from the environment fails");
  ok(m == NULL, "and creates nothing");
  is(cuemm_create(&m, NULL, &c), CUDA_ERROR_INVALID_VALUE, "a config carrying the error is refused too");
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
  invalid("CUEMM_POOL_RESERVE", "4GB");
  invalid("CUEMM_POOL_RESERVE", "-1");
  invalid("CUEMM_POOL_RESERVE", "1.5G");
  invalid("CUEMM_POOL_RESERVE", "4 GiB");
  invalid("CUEMM_POOL_RESERVE", "300TiB");
  invalid("CUEMM_POOL_CHUNK", "0");
  invalid("CUEMM_POOL_LIMIT", "lots");
  like(cuemm_last_error(), "CUEMM_POOL_LIMIT=\"lots\" is invalid: expected a size in bytes", "message says sizes are expected");
  clear_env();
  cuemm_config_init(&c);
  c.pool = (cuemm_pool_kind)7;
  cuemm_manager *m = NULL;
  is(cuemm_create(&m, NULL, &c), CUDA_ERROR_INVALID_VALUE, "an unknown pool kind is refused");
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
  is(cuemm_create(&m, NULL, &c), CUDA_ERROR_INVALID_VALUE, "cuemm_config.pool_ipc = 2 refused");
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
  is(cuemm_create(&m, NULL, &c), CUDA_ERROR_INVALID_VALUE, "cuemm_config.pool_limit_hard = -1 refused");
  like(cuemm_last_error(), "cuemm_config.pool_limit_hard", "naming the field");
  valid_size("CUEMM_POOL_PIECE", "1GiB", offsetof(cuemm_config, pool_piece), (size_t)1 << 30);
  valid_size("CUEMM_POOL_PIECE", "0", offsetof(cuemm_config, pool_piece), 0);
  invalid("CUEMM_POOL_PIECE", "1GB");
  like(cuemm_last_error(), "CUEMM_POOL_PIECE=\"1GB\" is invalid: expected a size in bytes, a multiple of "
       "CUEMM_POOL_CHUNK", "message says what sizes are accepted");
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
  invalid("CUEMM_POOL_RELEASE_DELAY", "86400001");
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
  invalid("CUEMM_STREAM_KEEP_LARGE", "33");
  like(cuemm_last_error(), "CUEMM_STREAM_KEEP_LARGE=\"33\" is invalid: expected a whole number of blocks from 0 to 32",
       "the keep count's message gives the range");
  invalid("CUEMM_STREAM_KEEP_LARGE", "-1");
  invalid("CUEMM_STREAM_KEEP_LARGE", "8 blocks");
  clear_env();
  cuemm_config_init(&c);
  c.stream_keep_large = 33;
  is(cuemm_create(&m, NULL, &c), CUDA_ERROR_INVALID_VALUE, "cuemm_config.stream_keep_large = 33 refused");
  like(cuemm_last_error(), "cuemm_config.stream_keep_large", "naming the field");
  cuemm_config_init(&c);
  c.stream_reuse = (cuemm_stream_reuse)7;
  is(cuemm_create(&m, NULL, &c), CUDA_ERROR_INVALID_VALUE, "cuemm_config.stream_reuse = 7 refused");
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
  is(cuemm_create(&m, NULL, &c), CUDA_ERROR_INVALID_VALUE, "cuemm_config.nvtx = 2 refused");
  like(cuemm_last_error(), "cuemm_config.nvtx", "naming the field");
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
  invalid(COUNT, "4294967296");
  invalid(COUNT, "1e3");
  invalid(RATIO, "0");
  invalid(RATIO, "1.5");
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
  CHECK_CU(cuemm_create(&m, NULL, &c));
  cuemm_stats s = test_stats(m);
  is(s.max_pending_count, 3, "program's count wins over the environment");
  is(s.max_pending_bytes, (size_t)(0.5 * (double)s.total_bytes), "environment's ratio applied");
  CHECK_CU(cuemm_destroy(m));

  /* Environment-created manager uses the environment. */
  CHECK_CU(cuemm_create(&m, NULL, NULL));
  s = test_stats(m);
  is(s.max_pending_count, 5, "created from the environment: count 5");
  CHECK_CU(cuemm_destroy(m));
  clear_env();

  /* Values a program sets are validated at creation. */
  cuemm_config_init(&c);
  c.max_pending_ratio = 0.0;
  is(cuemm_create(&m, NULL, &c), CUDA_ERROR_INVALID_VALUE, "ratio 0 refused");
  like(cuemm_last_error(), "max_pending_ratio", "message names the field");
  c.max_pending_ratio = 1.01;
  is(cuemm_create(&m, NULL, &c), CUDA_ERROR_INVALID_VALUE, "ratio above 1 refused");
  cuemm_config_init(&c);
  c.max_pending_count = (size_t)1 << 40;
  is(cuemm_create(&m, NULL, &c), CUDA_ERROR_INVALID_VALUE, "count beyond range refused");
  like(cuemm_last_error(), "max_pending_count", "message names the field");

  pool_knobs();
  nvtx_knob();
  clear_env();
  test_release_primary(0);
  return tap_done();
}
