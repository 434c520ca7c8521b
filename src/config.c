/* config.c: owns cuemm's knobs: their defaults, the CUEMM_* environment
 * variables that set them, and what values are accepted.
 *
 * One table lists every knob (variable, type, unit, default, range), so the
 * parser, the validation of a program-edited struct, and the messages all
 * read the same facts, and a new knob is one row.  Parsing is strict: an
 * operator who writes CUEMM_MAX_PENDING_DEALLOCS_RATIO=20% must hear about it
 * rather than run with a default they did not choose.
 */

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuemm.h"
#include "error.h"
#include "config.h"

typedef enum { KNOB_COUNT, KNOB_RATIO, KNOB_SIZE, KNOB_POOL, KNOB_FLAG, KNOB_REUSE, KNOB_MEMORY, KNOB_LOCATION } knob_type;

/* The names of the enumerated knobs' values, in the order of their values. */
static const char *const memory_names[] = { "device", "managed", "system" };
static const char *const location_names[] = { "none", "device", "cpu" };
static const char *const reuse_names[] = { "event", "wait", "internal" };

/* Sizes are checked in doubles: every bound below is exact in one. */
#define MIB (1024.0 * 1024.0)
#define SIZE_MAX_ACCEPTED (256.0 * 1024 * 1024 * MIB) /* 256 TiB */

typedef struct knob {
  const char *env;      /* environment variable */
  const char *field;    /* cuemm_config field, for messages */
  knob_type type;
  size_t offset;        /* of the field in cuemm_config */
  double def;           /* default */
  double min, max;      /* accepted range */
  int min_open;         /* min itself excluded */
  const char *accepts;  /* what a message says is accepted */
} knob;

static const knob knobs[] = {
  { "CUEMM_MAX_PENDING_DEALLOCS_COUNT", "max_pending_count", KNOB_COUNT,
    offsetof(cuemm_config, max_pending_count), 10, 0, (double)UINT32_MAX, 0,
    "a whole number of frees from 0 to 4294967295" },
  { "CUEMM_MAX_PENDING_DEALLOCS_RATIO", "max_pending_ratio", KNOB_RATIO,
    offsetof(cuemm_config, max_pending_ratio), 0.2, 0.0, 1.0, 1,
    "a decimal fraction of device memory greater than 0 and at most 1, such as 0.2" },
  { "CUEMM_POOL", "pool", KNOB_POOL,
    offsetof(cuemm_config, pool), CUEMM_POOL_NONE, CUEMM_POOL_NONE, CUEMM_POOL_VMM, 0,
    "\"none\" or \"vmm\"" },
  { "CUEMM_POOL_RESERVE", "pool_reserve", KNOB_SIZE,
    offsetof(cuemm_config, pool_reserve), 0, 0, SIZE_MAX_ACCEPTED, 0,
    "a size in bytes up to 256TiB, such as 80GiB, 512M or 1073741824 (0: the device's memory)" },
  { "CUEMM_POOL_CHUNK", "pool_chunk", KNOB_SIZE,
    offsetof(cuemm_config, pool_chunk), 32 * MIB, 0, SIZE_MAX_ACCEPTED, 1,
    "a size in bytes greater than 0, a multiple of the device's allocation granularity (2MiB), such as 32MiB" },
  { "CUEMM_POOL_RELEASE_THRESHOLD", "pool_release_threshold", KNOB_SIZE,
    offsetof(cuemm_config, pool_release_threshold), 1024 * MIB, 0, SIZE_MAX_ACCEPTED, 0,
    "a size in bytes up to 256TiB, such as 1GiB, 256M or 0" },
  { "CUEMM_POOL_RELEASE_DELAY", "pool_release_delay_ms", KNOB_COUNT,
    offsetof(cuemm_config, pool_release_delay_ms), 1000, 0, 86400000, 0,
    "a whole number of milliseconds from 0 to 86400000" },
  { "CUEMM_POOL_LIMIT", "pool_limit", KNOB_SIZE,
    offsetof(cuemm_config, pool_limit), 0, 0, SIZE_MAX_ACCEPTED, 0,
    "a size in bytes up to 256TiB, such as 16GiB (0: no limit)" },
  { "CUEMM_POOL_IPC", "pool_ipc", KNOB_FLAG,
    offsetof(cuemm_config, pool_ipc), 0, 0, 1, 0,
    "0 or 1" },
  { "CUEMM_POOL_SLAB", "pool_slab", KNOB_FLAG,
    offsetof(cuemm_config, pool_slab), 0, 0, 1, 0,
    "0 or 1" },
  { "CUEMM_POOL_LIMIT_HARD", "pool_limit_hard", KNOB_FLAG,
    offsetof(cuemm_config, pool_limit_hard), 0, 0, 1, 0,
    "0 or 1" },
  { "CUEMM_POOL_PIECE", "pool_piece", KNOB_SIZE,
    offsetof(cuemm_config, pool_piece), 0, 0, SIZE_MAX_ACCEPTED, 0,
    "a size in bytes, a multiple of CUEMM_POOL_CHUNK and of the allocation granularity (2MiB), such as 1GiB "
    "(0: chosen by measurement)" },
  { "CUEMM_STREAM_REUSE", "stream_reuse", KNOB_REUSE,
    offsetof(cuemm_config, stream_reuse), CUEMM_STREAM_REUSE_INTERNAL, CUEMM_STREAM_REUSE_EVENT,
    CUEMM_STREAM_REUSE_INTERNAL, 0, "\"event\", \"wait\" or \"internal\"" },
  /* At most heap.h's CUEMM__HEAP_LARGE_KEEP_MAX. */
  { "CUEMM_STREAM_KEEP_LARGE", "stream_keep_large", KNOB_COUNT,
    offsetof(cuemm_config, stream_keep_large), 24, 0, 32, 0,
    "a whole number of blocks from 0 to 32" },
  { "CUEMM_MEMORY", "memory", KNOB_MEMORY,
    offsetof(cuemm_config, memory), CUEMM_MEMORY_DEVICE, CUEMM_MEMORY_DEVICE, CUEMM_MEMORY_SYSTEM, 0,
    "\"device\", \"managed\" or \"system\"" },
  { "CUEMM_MANAGED_PREFETCH", "managed_prefetch", KNOB_FLAG,
    offsetof(cuemm_config, managed_prefetch), 0, 0, 1, 0,
    "0 or 1" },
  { "CUEMM_MANAGED_PREFERRED_LOCATION", "managed_preferred_location", KNOB_LOCATION,
    offsetof(cuemm_config, managed_preferred_location), CUEMM_LOCATION_NONE, CUEMM_LOCATION_NONE,
    CUEMM_LOCATION_CPU, 0,
    "\"none\", \"device\" or \"cpu\"" },
  { "CUEMM_MANAGED_ACCESSED_BY", "managed_accessed_by", KNOB_LOCATION,
    offsetof(cuemm_config, managed_accessed_by), CUEMM_LOCATION_NONE, CUEMM_LOCATION_NONE, CUEMM_LOCATION_CPU, 0,
    "\"none\", \"device\" or \"cpu\"" },
  { "CUEMM_STATS", "stats_at_exit", KNOB_FLAG,
    offsetof(cuemm_config, stats_at_exit), 0, 0, 1, 0, "0 or 1" },
  { "CUEMM_MANAGED_LIMIT", "managed_limit", KNOB_SIZE,
    offsetof(cuemm_config, managed_limit), 0, 0, SIZE_MAX_ACCEPTED, 0,
    "a size in bytes up to 256TiB, such as 64GiB (0: no limit)" },
  { "CUEMM_NVTX", "nvtx", KNOB_FLAG,
    offsetof(cuemm_config, nvtx), 1, 0, 1, 0,
    "0 or 1" },
};

#define NKNOBS (sizeof knobs / sizeof knobs[0])

static void set_field(cuemm_config *cfg, const knob *k, double v)
{
  char *base = (char *)cfg + k->offset;
  if (k->type == KNOB_COUNT || k->type == KNOB_SIZE)
    *(size_t *)(void *)base = (size_t)v;
  else if (k->type == KNOB_POOL)
    *(cuemm_pool_kind *)(void *)base = (cuemm_pool_kind)(int)v;
  else if (k->type == KNOB_REUSE)
    *(cuemm_stream_reuse *)(void *)base = (cuemm_stream_reuse)(int)v;
  else if (k->type == KNOB_FLAG)
    *(int *)(void *)base = (int)v;
  else if (k->type == KNOB_MEMORY)
    *(cuemm_memory_kind *)(void *)base = (cuemm_memory_kind)(int)v;
  else if (k->type == KNOB_LOCATION)
    *(cuemm_location *)(void *)base = (cuemm_location)(int)v;
  else
    *(double *)(void *)base = v;
}

static double get_field(const cuemm_config *cfg, const knob *k)
{
  const char *base = (const char *)cfg + k->offset;
  if (k->type == KNOB_COUNT || k->type == KNOB_SIZE)
    return (double)*(const size_t *)(const void *)base;
  if (k->type == KNOB_POOL)
    return (double)*(const cuemm_pool_kind *)(const void *)base;
  if (k->type == KNOB_REUSE)
    return (double)*(const cuemm_stream_reuse *)(const void *)base;
  if (k->type == KNOB_FLAG)
    return (double)*(const int *)(const void *)base;
  if (k->type == KNOB_MEMORY)
    return (double)*(const cuemm_memory_kind *)(const void *)base;
  if (k->type == KNOB_LOCATION)
    return (double)*(const cuemm_location *)(const void *)base;
  return *(const double *)(const void *)base;
}

/* "4GiB", "512M", "4096": a whole number with an optional binary suffix. */
static int parse_size(const char *text, double *out)
{
  static const struct { const char *suffix; unsigned shift; } units[] = {
    { "", 0 }, { "K", 10 }, { "KiB", 10 }, { "M", 20 }, { "MiB", 20 },
    { "G", 30 }, { "GiB", 30 }, { "T", 40 }, { "TiB", 40 },
  };
  if (*text < '0' || *text > '9')
    return -1;
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno)
    return -1;
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
    if (strcmp(end, units[i].suffix) != 0)
      continue;
    if (units[i].shift && v > (ULLONG_MAX >> units[i].shift))
      return -1;
    *out = (double)(v << units[i].shift);
    return 0;
  }
  return -1;
}

static int in_range(const knob *k, double v)
{
  if (isnan(v) || v > k->max)
    return 0;
  return k->min_open ? v > k->min : v >= k->min;
}

/* Parses text into *out.  Returns 0, or -1 when the text is not exactly one
 * value of the knob's type in its range. */
static int parse(const knob *k, const char *text, double *out)
{
  char *end = NULL;
  errno = 0;
  if (k->type == KNOB_POOL) {
    if (strcmp(text, "none") == 0)
      *out = CUEMM_POOL_NONE;
    else if (strcmp(text, "vmm") == 0)
      *out = CUEMM_POOL_VMM;
    else
      return -1;
    return 0;
  }
  if (k->type == KNOB_MEMORY || k->type == KNOB_LOCATION || k->type == KNOB_REUSE) {
    const char *const *names = k->type == KNOB_MEMORY ? memory_names
                               : k->type == KNOB_LOCATION ? location_names : reuse_names;
    for (int i = 0; i <= (int)k->max; i++)
      if (strcmp(text, names[i]) == 0) {
        *out = i;
        return 0;
      }
    return -1;
  }
  if (k->type == KNOB_FLAG) {
    if (strcmp(text, "0") != 0 && strcmp(text, "1") != 0)
      return -1;
    *out = text[0] == '1';
    return 0;
  }
  if (k->type == KNOB_SIZE)
    return parse_size(text, out) == 0 && in_range(k, *out) ? 0 : -1;
  if (k->type == KNOB_COUNT) {
    /* strtoull would accept "-1" (wrapping) and leading blanks: refuse both. */
    if (*text < '0' || *text > '9')
      return -1;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || *end != '\0' || (double)v > k->max)
      return -1;
    *out = (double)v;
    return 0;
  }
  if (!((*text >= '0' && *text <= '9') || *text == '.'))
    return -1;
  double v = strtod(text, &end);
  if (errno || *end != '\0' || !isfinite(v) || !in_range(k, v))
    return -1;
  *out = v;
  return 0;
}

CUEMM_EXTERN CUresult cuemm_config_init(cuemm_config *cfg)
{
  if (!cfg)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_config_init: cfg is NULL");
  memset(cfg, 0, sizeof *cfg);
  for (size_t i = 0; i < NKNOBS; i++)
    set_field(cfg, &knobs[i], knobs[i].def);
  cfg->env_status = CUDA_SUCCESS;
  /* The one knob that is a string: any name is accepted here; opening the
   * file is cuemm_create's test of it. */
  const char *log = getenv("CUEMM_LOG");
  cfg->log_file = log && *log ? log : NULL;
  for (size_t i = 0; i < NKNOBS; i++) {
    const char *text = getenv(knobs[i].env);
    double v;
    if (!text || !*text)
      continue;
    if (parse(&knobs[i], text, &v) == 0) {
      set_field(cfg, &knobs[i], v);
      continue;
    }
    if (cfg->env_status == CUDA_SUCCESS) {
      cfg->env_status = CUDA_ERROR_INVALID_VALUE;
      snprintf(cfg->env_error, sizeof cfg->env_error, "%s=\"%.64s\" is invalid: expected %s",
               knobs[i].env, text, knobs[i].accepts);
    }
  }
  if (cfg->env_status != CUDA_SUCCESS)
    return cuemm__error(cfg->env_status, "%s", cfg->env_error);
  return CUDA_SUCCESS;
}

CUresult cuemm__config_validate(const cuemm_config *cfg)
{
  if (cfg->env_status != CUDA_SUCCESS)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "%s",
                        cfg->env_error[0] ? cfg->env_error : "the configuration carries an environment error");
  for (size_t i = 0; i < NKNOBS; i++) {
    double v = get_field(cfg, &knobs[i]);
    if (!in_range(&knobs[i], v))
      return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_config.%s = %g is invalid: expected %s",
                          knobs[i].field, v, knobs[i].accepts);
  }
  return CUDA_SUCCESS;
}
