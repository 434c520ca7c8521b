/* config.c: owns cuemm's knobs: their defaults, the CUEMM_* environment
 * variables that set them, and what values are accepted.
 *
 * One table lists every knob (variable, type, unit, default, range, what
 * it acts with, what it does), so the parser, the validation of a
 * program-edited struct, the messages, the note about settings a manager
 * ignores and the cuemm(7) page (tools/cuemm-man7 prints it from here) all
 * read the same facts, and a new knob is one row.  Parsing is strict: an
 * operator who writes CUEMM_MAX_PENDING_DEALLOCS_RATIO=20% must hear about it
 * rather than run with a default they did not choose, and one who made three
 * mistakes hears about all three at once.  The variables read elsewhere
 * (the driver file, ...) are listed here too, for the page.
 */

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuemm.h"
#include "base/error.h"
#include "base/config.h"

typedef enum {
  KNOB_COUNT, KNOB_RATIO, KNOB_SIZE, KNOB_POOL, KNOB_FLAG, KNOB_REUSE, KNOB_SPANS, KNOB_MEMORY, KNOB_LOCATION,
  KNOB_PATH  /* a file name, kept as the environment's string */
} knob_type;

/* What a manager must have for a knob to act on it (see needs_met). */
typedef enum { NEEDS_NOTHING, NEEDS_POOL, NEEDS_POOL_OR_MANAGED, NEEDS_MANAGED } knob_needs;

static const char *const needs_text[] = {
  [NEEDS_NOTHING] = "",
  [NEEDS_POOL] = "CUEMM_POOL=vmm",
  [NEEDS_POOL_OR_MANAGED] = "CUEMM_POOL=vmm or CUEMM_MEMORY=managed",
  [NEEDS_MANAGED] = "CUEMM_MEMORY=managed",
};

/* The names of the enumerated knobs' values, in the order of their values. */
static const char *const pool_names[] = { "none", "vmm" };
static const char *const memory_names[] = { "device", "managed", "system" };
static const char *const location_names[] = { "none", "device", "cpu" };
static const char *const reuse_names[] = { "event", "wait", "internal" };
static const char *const spans_names[] = { "never", "auto", "always" };

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
  knob_needs needs;     /* what the knob acts on */
  const char *desc;     /* what it does, one sentence (the cuemm(7) page) */
} knob;

static const knob knobs[] = {
  { "CUEMM_MAX_PENDING_DEALLOCS_COUNT", "max_pending_count", KNOB_COUNT,
    offsetof(cuemm_config, max_pending_count), 10, 0, (double)UINT32_MAX, 0,
    "a whole number of frees from 0 to 4294967295", NEEDS_NOTHING,
    "A flush of the deferred frees runs when, after a free is queued, more than this many frees are pending "
    "(0: every free flushes)." },
  { "CUEMM_MAX_PENDING_DEALLOCS_RATIO", "max_pending_ratio", KNOB_RATIO,
    offsetof(cuemm_config, max_pending_ratio), 0.2, 0.0, 1.0, 1,
    "a decimal fraction of device memory greater than 0 and at most 1, such as 0.2", NEEDS_NOTHING,
    "A flush of the deferred frees runs when the pending bytes exceed this fraction of the device's total "
    "memory." },
  { "CUEMM_POOL", "pool", KNOB_POOL,
    offsetof(cuemm_config, pool), CUEMM_POOL_NONE, CUEMM_POOL_NONE, CUEMM_POOL_VMM, 0,
    "\"none\" or \"vmm\"", NEEDS_NOTHING,
    "\"vmm\" serves cuemm_alloc from a growable pool on CUDA virtual memory management; \"none\" gives every "
    "allocation to cuMemAlloc (the framework adapters turn the pool on when this is unset)." },
  { "CUEMM_POOL_RESERVE", "pool_reserve", KNOB_SIZE,
    offsetof(cuemm_config, pool_reserve), 0, 0, SIZE_MAX_ACCEPTED, 0,
    "a size in bytes up to 256TiB, such as 80GiB, 512M or 1073741824 (0: the device's memory)", NEEDS_POOL,
    "The virtual address space the pool reserves at creation, and so the largest it can grow; larger requests "
    "go to cuMemAlloc." },
  { "CUEMM_POOL_CHUNK", "pool_chunk", KNOB_SIZE,
    offsetof(cuemm_config, pool_chunk), 32 * MIB, 0, SIZE_MAX_ACCEPTED, 1,
    "a size in bytes greater than 0, a multiple of the device's allocation granularity (2MiB), such as 32MiB",
    NEEDS_POOL_OR_MANAGED,
    "The largest step the pool grows by (an empty pool grows by 2MiB, one of 8 times this size or more by this "
    "size), and the size of a managed memory segment." },
  { "CUEMM_POOL_RELEASE_THRESHOLD", "pool_release_threshold", KNOB_SIZE,
    offsetof(cuemm_config, pool_release_threshold), 1024 * MIB, 0, SIZE_MAX_ACCEPTED, 0,
    "a size in bytes up to 256TiB, such as 1GiB, 256M or 0", NEEDS_POOL_OR_MANAGED,
    "The free bytes the pool (or the managed segments) keeps mapped; wholly free chunks past it go back to the "
    "driver." },
  { "CUEMM_POOL_RELEASE_DELAY", "pool_release_delay_ms", KNOB_COUNT,
    offsetof(cuemm_config, pool_release_delay_ms), 1000, 0, 86400000, 0,
    "a whole number of milliseconds from 0 to 86400000", NEEDS_POOL,
    "How long memory that a growth needed stays mapped past the release threshold, so that a program freeing "
    "and taking it back each iteration does not unmap and map it each time." },
  { "CUEMM_POOL_LIMIT", "pool_limit", KNOB_SIZE,
    offsetof(cuemm_config, pool_limit), 0, 0, SIZE_MAX_ACCEPTED, 0,
    "a size in bytes up to 256TiB, such as 16GiB (0: no limit)", NEEDS_POOL,
    "A cap on the pool's mapped bytes: a request the pool could serve only by growing past it fails with "
    "CUDA_ERROR_OUT_OF_MEMORY." },
  { "CUEMM_POOL_IPC", "pool_ipc", KNOB_FLAG,
    offsetof(cuemm_config, pool_ipc), 0, 0, 1, 0,
    "0 or 1", NEEDS_POOL,
    "1 creates the pool's chunks exportable as POSIX file descriptors, so that pool blocks can be shared with "
    "other processes." },
  { "CUEMM_POOL_SLAB", "pool_slab", KNOB_FLAG,
    offsetof(cuemm_config, pool_slab), 0, 0, 1, 0,
    "0 or 1", NEEDS_POOL,
    "1 makes the pool's reservation one cuMemAlloc allocation held from creation (a slab), for memory checkers "
    "that do not take annotations on memory mapped with cuMemMap." },
  { "CUEMM_POOL_LIMIT_HARD", "pool_limit_hard", KNOB_FLAG,
    offsetof(cuemm_config, pool_limit_hard), 0, 0, 1, 0,
    "0 or 1", NEEDS_POOL,
    "1 makes the pool's limit bound all of cuemm_alloc's device memory: a request larger than the limit fails "
    "instead of going to cuMemAlloc." },
  { "CUEMM_POOL_PIECE", "pool_piece", KNOB_SIZE,
    offsetof(cuemm_config, pool_piece), 0, 0, SIZE_MAX_ACCEPTED, 0,
    "a size in bytes, a multiple of the allocation granularity (2MiB), such as 1GiB "
    "(0: chosen by measurement)", NEEDS_POOL,
    "The size of the physical allocations a large growth is made of (0: the size the pool measures cheapest "
    "per byte on the device)." },
  { "CUEMM_STREAM_REUSE", "stream_reuse", KNOB_REUSE,
    offsetof(cuemm_config, stream_reuse), CUEMM_STREAM_REUSE_INTERNAL, CUEMM_STREAM_REUSE_EVENT,
    CUEMM_STREAM_REUSE_INTERNAL, 0, "\"event\", \"wait\" or \"internal\"", NEEDS_POOL,
    "How a block freed on one stream (cuemm_free_async) serves a request on another: once an event shows the "
    "freeing stream's work done, at once with a wait on that event, or with such a wait only where the pool "
    "would otherwise grow." },
  /* At most heap.h's CUEMM__HEAP_LARGE_KEEP_MAX. */
  { "CUEMM_STREAM_KEEP_LARGE", "stream_keep_large", KNOB_COUNT,
    offsetof(cuemm_config, stream_keep_large), 24, 0, 32, 0,
    "a whole number of blocks from 0 to 32", NEEDS_POOL,
    "How many blocks of 256KiB to 16MiB freed on a stream a thread keeps for that stream's next requests of "
    "the same sizes; with several threads, each keeps its share (at least 1).  None while the pool grows past "
    "its peak for want of free space in one piece, until 16384 allocations from the pool pass without such a "
    "growth." },
  { "CUEMM_STREAM_SPANS", "stream_spans", KNOB_SPANS,
    offsetof(cuemm_config, stream_spans), CUEMM_STREAM_SPANS_AUTO, CUEMM_STREAM_SPANS_NEVER,
    CUEMM_STREAM_SPANS_ALWAYS, 0, "\"never\", \"auto\" or \"always\"", NEEDS_POOL,
    "When a thread cuts its blocks of 256KiB to 16MiB from spans of pool memory of its own, with no lock: "
    "never, once 64 of its visits to the pool found the manager's lock held by another thread, or always." },
  { "CUEMM_MEMORY", "memory", KNOB_MEMORY,
    offsetof(cuemm_config, memory), CUEMM_MEMORY_DEVICE, CUEMM_MEMORY_DEVICE, CUEMM_MEMORY_SYSTEM, 0,
    "\"device\", \"managed\" or \"system\"", NEEDS_NOTHING,
    "What cuemm_alloc hands out: device memory, unified memory from a pool of cuMemAllocManaged segments, or "
    "plain host memory the GPU reads through HMM or ATS." },
  { "CUEMM_MANAGED_PREFETCH", "managed_prefetch", KNOB_FLAG,
    offsetof(cuemm_config, managed_prefetch), 0, 0, 1, 0,
    "0 or 1", NEEDS_MANAGED,
    "1 prefetches every managed allocation to the manager's device before cuemm_alloc returns." },
  { "CUEMM_MANAGED_PREFERRED_LOCATION", "managed_preferred_location", KNOB_LOCATION,
    offsetof(cuemm_config, managed_preferred_location), CUEMM_LOCATION_NONE, CUEMM_LOCATION_NONE,
    CUEMM_LOCATION_CPU, 0,
    "\"none\", \"device\" or \"cpu\"", NEEDS_MANAGED,
    "The preferred location advised for every managed segment (CU_MEM_ADVISE_SET_PREFERRED_LOCATION)." },
  { "CUEMM_MANAGED_ACCESSED_BY", "managed_accessed_by", KNOB_LOCATION,
    offsetof(cuemm_config, managed_accessed_by), CUEMM_LOCATION_NONE, CUEMM_LOCATION_NONE, CUEMM_LOCATION_CPU, 0,
    "\"none\", \"device\" or \"cpu\"", NEEDS_MANAGED,
    "The processor advised to access every managed segment (CU_MEM_ADVISE_SET_ACCESSED_BY)." },
  { "CUEMM_STATS", "stats_at_exit", KNOB_FLAG,
    offsetof(cuemm_config, stats_at_exit), 0, 0, 1, 0, "0 or 1", NEEDS_NOTHING,
    "1 prints each manager's statistics table to stderr when it is destroyed or when the process exits." },
  { "CUEMM_MANAGED_LIMIT", "managed_limit", KNOB_SIZE,
    offsetof(cuemm_config, managed_limit), 0, 0, SIZE_MAX_ACCEPTED, 0,
    "a size in bytes up to 256TiB, such as 64GiB (0: no limit)", NEEDS_MANAGED,
    "A cap on the managed bytes the manager holds from the driver, to forbid oversubscribing the device." },
  { "CUEMM_NVTX", "nvtx", KNOB_FLAG,
    offsetof(cuemm_config, nvtx), 1, 0, 1, 0,
    "0 or 1", NEEDS_POOL,
    "1 annotates pool blocks through NVTX's memory API for a tool attached through NVTX (compute-sanitizer); "
    "0 annotates nothing." },
  { "CUEMM_LOG", "log_file", KNOB_PATH,
    offsetof(cuemm_config, log_file), 0, 0, 0, 0,
    "a file name (\"%p\" becomes the process id)", NEEDS_NOTHING,
    "Writes every device allocation and free of a manager to this file, in the CSV format of RMM's "
    "logging_resource_adaptor (cuemm-replay replays it)." },
};

#define NKNOBS (sizeof knobs / sizeof knobs[0])
_Static_assert(NKNOBS <= 64, "cuemm_config.env_set and env_invalid have one bit per knob");

/* Variables read outside the table: not knobs of cuemm_config, each read
 * where it acts.  Listed here so that the cuemm(7) page names them too. */
static const cuemm__config_other others[] = {
  { "CUEMM_LIBCUDA", "src/base/driver.c",
    "The CUDA driver to load instead of libcuda.so.1: a path, or a name the dynamic loader searches for; there "
    "is no fallback from one to the other." },
  { "CUEMM_LIBRARY", "the Python package cuemm (python/cuemm/_lib.py)",
    "The libcuemm file the Python modules (the Numba plugin, the PyTorch and CuPy adapters) load instead of the "
    "installed one." },
  { "NVTX_INJECTION64_PATH", "src/trace/nvtx.c",
    "Set by a tool such as compute-sanitizer: the library cuemm loads, when the first pool with CUEMM_NVTX=1 is "
    "created, to annotate pool blocks (NVTX_INJECTION32_PATH in a 32-bit process)." },
};

#define NOTHERS (sizeof others / sizeof others[0])

/* CUEMM_ variables that the library does not read but the test suite, its
 * scripts and the GPU scripts do (docs/configuration.md lists them, with
 * what reads each): a shell that runs `make check` or a script has them
 * set, and its programs must not hear of them as misspellings.  simcuda's
 * own variables are SIMCUDA_*.  With the two tables above, this says what
 * a CUEMM_ name may be. */
static const char *const not_read_here[] = {
  "CUEMM_TEST_DRIVER", "CUEMM_TOP_BUILDDIR", "CUEMM_SIM_DIR", "CUEMM_PYTHON", "CUEMM_PYTHON_INSTALLED",
  "CUEMM_PLUGIN_SKIP", "CUEMM_STRESS_SEED", "CUEMM_STRESS_OPS", "CUEMM_FUZZ_SECONDS", "CUEMM_CORPUS_RECORD",
  "CUEMM_BUILDDIR", "CUEMM_USE",
};

#define NNOT_READ_HERE (sizeof not_read_here / sizeof not_read_here[0])

static const char *const *names_of(knob_type t)
{
  return t == KNOB_POOL ? pool_names : t == KNOB_MEMORY ? memory_names : t == KNOB_LOCATION ? location_names
         : t == KNOB_REUSE ? reuse_names : t == KNOB_SPANS ? spans_names : NULL;
}

static void set_field(cuemm_config *cfg, const knob *k, double v)
{
  char *base = (char *)cfg + k->offset;
  if (k->type == KNOB_COUNT || k->type == KNOB_SIZE)
    *(size_t *)(void *)base = (size_t)v;
  else if (k->type == KNOB_POOL)
    *(cuemm_pool_kind *)(void *)base = (cuemm_pool_kind)(int)v;
  else if (k->type == KNOB_REUSE)
    *(cuemm_stream_reuse *)(void *)base = (cuemm_stream_reuse)(int)v;
  else if (k->type == KNOB_SPANS)
    *(cuemm_stream_spans *)(void *)base = (cuemm_stream_spans)(int)v;
  else if (k->type == KNOB_FLAG)
    *(int *)(void *)base = (int)v;
  else if (k->type == KNOB_MEMORY)
    *(cuemm_memory_kind *)(void *)base = (cuemm_memory_kind)(int)v;
  else if (k->type == KNOB_LOCATION)
    *(cuemm_location *)(void *)base = (cuemm_location)(int)v;
  else if (k->type == KNOB_RATIO)
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
  if (k->type == KNOB_SPANS)
    return (double)*(const cuemm_stream_spans *)(const void *)base;
  if (k->type == KNOB_FLAG)
    return (double)*(const int *)(const void *)base;
  if (k->type == KNOB_MEMORY)
    return (double)*(const cuemm_memory_kind *)(const void *)base;
  if (k->type == KNOB_LOCATION)
    return (double)*(const cuemm_location *)(const void *)base;
  if (k->type == KNOB_RATIO)
    return *(const double *)(const void *)base;
  return 0;
}

/* A size as the table's texts write it: "32MiB", "256TiB", or bytes. */
static void format_size(char *buf, size_t cap, double v)
{
  static const char *const units[] = { "KiB", "MiB", "GiB", "TiB" };
  unsigned long long b = (unsigned long long)v;
  int u = -1;
  while (u < 3 && b && b % 1024 == 0) {
    b /= 1024;
    u++;
  }
  snprintf(buf, cap, "%llu%s", b, u < 0 ? "" : units[u]);
}

/* Value v of knob k as its variable would be written. */
static void format_value(const knob *k, double v, char *buf, size_t cap)
{
  const char *const *names = names_of(k->type);
  if (names && v >= k->min && v <= k->max)
    snprintf(buf, cap, "%s", names[(int)v]);
  else if (k->type == KNOB_SIZE)
    format_size(buf, cap, v);
  else if (k->type == KNOB_RATIO)
    snprintf(buf, cap, "%g", v);
  else if (k->type == KNOB_PATH)
    snprintf(buf, cap, "unset");
  else
    snprintf(buf, cap, "%.0f", v);
}

/* The outcome of parsing one variable: UNKNOWN_UNIT is a size whose
 * number is followed by letters that are no unit (64Mib, 4GB). */
enum { PARSED, INVALID, TOO_LARGE, UNKNOWN_UNIT };

/* The units of a size, as parse_size accepts them (and the message about
 * an unknown one lists them). */
static const struct { const char *suffix; unsigned shift; } size_units[] = {
  { "", 0 }, { "K", 10 }, { "KiB", 10 }, { "M", 20 }, { "MiB", 20 },
  { "G", 30 }, { "GiB", 30 }, { "T", 40 }, { "TiB", 40 },
};
#define NSIZE_UNITS (sizeof size_units / sizeof size_units[0])

/* The suffix of a size after its digits, when it is made of letters only
 * (a unit, known or not), else NULL. */
static const char *size_unit(const char *text)
{
  while (*text >= '0' && *text <= '9')
    text++;
  if (!*text)
    return NULL;
  for (const char *c = text; *c; c++)
    if (!((*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z')))
      return NULL;
  return text;
}

/* "4GiB", "512M", "4096": a whole number with an optional binary suffix. */
static int parse_size(const char *text, double *out)
{
  if (*text < '0' || *text > '9')
    return INVALID;
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  int overflow = errno == ERANGE;
  for (size_t i = 0; i < NSIZE_UNITS; i++) {
    if (strcmp(end, size_units[i].suffix) != 0)
      continue;
    if (overflow || (size_units[i].shift && v > (ULLONG_MAX >> size_units[i].shift)))
      return TOO_LARGE;
    *out = (double)(v << size_units[i].shift);
    return PARSED;
  }
  return size_unit(text) ? UNKNOWN_UNIT : INVALID;
}

static int in_range(const knob *k, double v)
{
  if (isnan(v) || v > k->max)
    return 0;
  return k->min_open ? v > k->min : v >= k->min;
}

/* Parses text into *out: PARSED, or INVALID when the text is not exactly
 * one value of the knob's type in its range, or TOO_LARGE when it is a
 * number of the right form past the range (or past what its type holds). */
static int parse(const knob *k, const char *text, double *out)
{
  char *end = NULL;
  const char *const *names = names_of(k->type);
  if (names) {
    for (int i = 0; i <= (int)k->max; i++)
      if (strcmp(text, names[i]) == 0) {
        *out = i;
        return PARSED;
      }
    return INVALID;
  }
  if (k->type == KNOB_FLAG) {
    if (strcmp(text, "0") != 0 && strcmp(text, "1") != 0)
      return INVALID;
    *out = text[0] == '1';
    return PARSED;
  }
  if (k->type == KNOB_SIZE) {
    int r = parse_size(text, out);
    if (r != PARSED)
      return r;
    return *out > k->max ? TOO_LARGE : in_range(k, *out) ? PARSED : INVALID;
  }
  errno = 0;
  if (k->type == KNOB_COUNT) {
    /* strtoull would accept "-1" (wrapping) and leading blanks: refuse both. */
    if (*text < '0' || *text > '9')
      return INVALID;
    unsigned long long v = strtoull(text, &end, 10);
    if (*end != '\0')
      return INVALID;
    if (errno == ERANGE || (double)v > k->max)
      return TOO_LARGE;
    *out = (double)v;
    return PARSED;
  }
  if (!((*text >= '0' && *text <= '9') || *text == '.'))
    return INVALID;
  double v = strtod(text, &end);
  if (*end != '\0' || isnan(v))
    return INVALID;
  if ((errno == ERANGE && v > 1) || v > k->max)
    return TOO_LARGE;
  if (errno || !in_range(k, v))
    return INVALID;
  *out = v;
  return PARSED;
}

/* Appends one refused variable's sentence to the text at *buf (of *len
 * bytes, grown as needed), after "; " when another came before.  why is
 * INVALID or TOO_LARGE for the value `text`; PARSED for a variable refused
 * earlier whose value is no longer at hand. */
static void refusal(char **buf, size_t *len, const knob *k, const char *text, int why)
{
  char most[96] = "", units[128] = "";
  if (why == TOO_LARGE) {
    format_value(k, k->max, most, sizeof most);
    if (k->type == KNOB_SIZE)
      snprintf(most + strlen(most), sizeof most - strlen(most), " (%.0f bytes)", k->max);
  } else if (why == UNKNOWN_UNIT) {
    /* Said as such, not as the knob's whole grammar: 64Mib is a unit away
     * from a valid value. */
    for (size_t i = 1, n = 0; i < NSIZE_UNITS && n < sizeof units; i++)
      n += (size_t)snprintf(units + n, sizeof units - n, "%s%s", i > 1 ? ", " : "", size_units[i].suffix);
  }
  const char *sep = *len ? "; " : "";
#define REFUSAL(to, cap)                                                                                    \
  (why == TOO_LARGE ? snprintf(to, cap, "%s%s=\"%.64s\" is too large (at most %s): expected %s", sep, k->env,  \
                               text, most, k->accepts)                                                     \
   : why == UNKNOWN_UNIT ? snprintf(to, cap, "%s%s=\"%.64s\" is invalid: unknown unit '%.16s' (units: %s; none for " \
                                    "bytes)", sep, k->env, text, size_unit(text), units)                      \
   : why == INVALID ? snprintf(to, cap, "%s%s=\"%.64s\" is invalid: expected %s", sep, k->env, text, k->accepts) \
                    : snprintf(to, cap, "%s%s was refused by cuemm_config_init: expected %s", sep, k->env,       \
                               k->accepts))
  int n = REFUSAL(NULL, 0);
  char *grown = n < 0 ? NULL : realloc(*buf, *len + (size_t)n + 1);
  if (!grown)
    return; /* the bits still say which; the message is shorter */
  *buf = grown;
  REFUSAL(*buf + *len, (size_t)n + 1);
#undef REFUSAL
  *len += (size_t)n;
}

/* Sets the thread's message to the sentences of the variables cfg->env_invalid
 * names, as the environment has them now (the same text cuemm_config_init
 * gave, unless the environment changed since). */
static CUresult refused(const cuemm_config *cfg)
{
  char *buf = NULL;
  size_t len = 0;
  double v;
  for (size_t i = 0; i < NKNOBS; i++) {
    if (!((cfg->env_invalid >> i) & 1))
      continue;
    const char *text = getenv(knobs[i].env);
    int r = text && *text ? parse(&knobs[i], text, &v) : PARSED;
    refusal(&buf, &len, &knobs[i], r == PARSED ? "" : text, r);
  }
  CUresult r = cuemm__error(CUDA_ERROR_INVALID_VALUE, "%s",
                            buf ? buf : "the configuration carries an environment error (cuemm_config.env_status)");
  free(buf);
  return r;
}

/* ---- CUEMM_ variables nobody reads ------------------------------------------ */

extern char **environ;

static int is_name(const char *name, size_t n, const char *known)
{
  return strncmp(name, known, n) == 0 && known[n] == '\0';
}

/* The edit distance of a and b, case aside (optimal string alignment: an
 * insertion, a deletion, a change or two letters swapped is one edit), up to
 * names of 63 bytes; larger is "far". */
static unsigned distance(const char *a, size_t na, const char *b)
{
  size_t nb = strlen(b);
  if (na > 63 || nb > 63)
    return UINT_MAX;
  unsigned char d[64][64]; /* at most 63 edits */
  for (size_t i = 0; i <= na; i++)
    d[i][0] = (unsigned char)i;
  for (size_t j = 0; j <= nb; j++)
    d[0][j] = (unsigned char)j;
  for (size_t i = 1; i <= na; i++)
    for (size_t j = 1; j <= nb; j++) {
      int ca = toupper((unsigned char)a[i - 1]), cb = toupper((unsigned char)b[j - 1]);
      unsigned best = d[i - 1][j - 1] + (ca != cb);
      if (d[i - 1][j] + 1u < best)
        best = d[i - 1][j] + 1u;
      if (d[i][j - 1] + 1u < best)
        best = d[i][j - 1] + 1u;
      if (i > 1 && j > 1 && ca == toupper((unsigned char)b[j - 2]) && toupper((unsigned char)a[i - 2]) == cb &&
          d[i - 2][j - 2] + 1u < best)
        best = d[i - 2][j - 2] + 1u;
      d[i][j] = (unsigned char)best;
    }
  return d[na][nb];
}

/* The variable the library reads that is nearest name, within two edits;
 * NULL when none is. */
static const char *nearest(const char *name, size_t n)
{
  const char *best = NULL;
  unsigned best_d = 3;
  for (size_t i = 0; i < NKNOBS + NOTHERS; i++) {
    const char *known = i < NKNOBS ? knobs[i].env : others[i - NKNOBS].env;
    unsigned d = distance(name, n, known);
    if (d < best_d) {
      best_d = d;
      best = known;
    }
  }
  return best;
}

/* Whether the variable `name` (n bytes) is said for the first time in the
 * process: each is remembered by a hash, the first 32 names said. */
static int first_time(const char *name, size_t n)
{
  static _Atomic uint64_t said[32];
  uint64_t h = 14695981039346656037ull; /* FNV-1a */
  for (size_t i = 0; i < n; i++)
    h = (h ^ (unsigned char)name[i]) * 1099511628211ull;
  h |= 1; /* never 0, an empty slot */
  for (size_t i = 0; i < sizeof said / sizeof said[0]; i++) {
    uint64_t cur = 0;
    if (atomic_compare_exchange_strong(&said[i], &cur, h))
      return 1;
    if (cur == h)
      return 0;
  }
  return 0;
}

/* Says on stderr, once per variable and process, each CUEMM_ variable of
 * the environment that neither the library nor its tests read: parsing is
 * strict, and a misspelled name (CUEMM_STAT=1) would otherwise be ignored
 * without a word.  An empty one counts as unset, as a knob's does. */
static void warn_unknown(void)
{
  for (char **e = environ; e && *e; e++) {
    const char *v = *e, *eq = strchr(v, '=');
    if (strncmp(v, "CUEMM_", 6) != 0 || !eq || !eq[1])
      continue;
    size_t n = (size_t)(eq - v), i;
    for (i = 0; i < NKNOBS && !is_name(v, n, knobs[i].env); i++)
      ;
    if (i < NKNOBS)
      continue;
    for (i = 0; i < NOTHERS && !is_name(v, n, others[i].env); i++)
      ;
    if (i < NOTHERS)
      continue;
    for (i = 0; i < NNOT_READ_HERE && !is_name(v, n, not_read_here[i]); i++)
      ;
    if (i < NNOT_READ_HERE || !first_time(v, n))
      continue;
    const char *near = nearest(v, n);
    fprintf(stderr, "cuemm: %.*s is set but cuemm reads no such variable: ignored%s%s%s; cuemm(7) lists those "
            "it reads\n", (int)(n < 64 ? n : 64), v, near ? " (did you mean " : "", near ? near : "", near ? "?)" : "");
  }
}

CUEMM_EXTERN CUresult cuemm_config_init(cuemm_config *cfg)
{
  if (!cfg)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_config_init: cfg is NULL");
  warn_unknown();
  memset(cfg, 0, sizeof *cfg);
  cfg->size = sizeof *cfg;
  for (size_t i = 0; i < NKNOBS; i++)
    set_field(cfg, &knobs[i], knobs[i].def);
  cfg->env_status = CUDA_SUCCESS;
  for (size_t i = 0; i < NKNOBS; i++) {
    const char *text = getenv(knobs[i].env);
    double v;
    if (!text || !*text)
      continue;
    if (knobs[i].type == KNOB_PATH) {
      /* Any name is accepted here; opening the file is cuemm_create's test of it. */
      *(const char **)(void *)((char *)cfg + knobs[i].offset) = text;
      cfg->env_set |= 1ull << i;
      continue;
    }
    int r = parse(&knobs[i], text, &v);
    if (r == PARSED) {
      set_field(cfg, &knobs[i], v);
      cfg->env_set |= 1ull << i;
    } else {
      cfg->env_invalid |= 1ull << i;
      cfg->env_status = CUDA_ERROR_INVALID_VALUE;
    }
  }
  if (cfg->env_status != CUDA_SUCCESS)
    return refused(cfg);
  return CUDA_SUCCESS;
}

/* The bytes of a knob's field. */
static size_t knob_width(const knob *k)
{
  return k->type == KNOB_COUNT || k->type == KNOB_SIZE ? sizeof(size_t)
         : k->type == KNOB_RATIO ? sizeof(double)
         : k->type == KNOB_PATH ? sizeof(const char *)
         : k->type == KNOB_FLAG ? sizeof(int)
         : sizeof(cuemm_pool_kind); /* the enums */
}

CUresult cuemm__config_copy(const cuemm_config *cfg, cuemm_config *out)
{
  /* The smallest struct a cuemm.h with the size field declares: the size
   * and the first setting. */
  const size_t least = offsetof(cuemm_config, max_pending_count) + sizeof cfg->max_pending_count;
  if (cfg->size < least || cfg->size > sizeof *cfg)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE,
                        "cuemm_config.size = %zu is invalid: expected the size of the program's cuemm_config "
                        "(%zu bytes in this library's cuemm.h, at least %zu in any), which cuemm_config_init sets: "
                        "fill the struct with cuemm_config_init before changing fields", cfg->size, sizeof *cfg,
                        least);
  /* Defaults first, then the program's bytes; a field that does not lie
   * wholly within them (a struct of an older cuemm.h) keeps its default. */
  memset(out, 0, sizeof *out);
  for (size_t i = 0; i < NKNOBS; i++)
    set_field(out, &knobs[i], knobs[i].def);
  cuemm_config defaults = *out;
  memcpy(out, cfg, cfg->size);
  for (size_t i = 0; i < NKNOBS; i++)
    if (knobs[i].offset + knob_width(&knobs[i]) > cfg->size)
      set_field(out, &knobs[i], knobs[i].def);
  static const struct { size_t offset, width; } others_fields[] = {
    { offsetof(cuemm_config, env_status), sizeof(CUresult) },
    { offsetof(cuemm_config, env_set), sizeof(uint64_t) },
    { offsetof(cuemm_config, env_invalid), sizeof(uint64_t) },
    { offsetof(cuemm_config, secondary), sizeof(int) },
  };
  for (size_t i = 0; i < sizeof others_fields / sizeof others_fields[0]; i++)
    if (others_fields[i].offset + others_fields[i].width > cfg->size)
      memcpy((char *)out + others_fields[i].offset, (const char *)&defaults + others_fields[i].offset,
             others_fields[i].width);
  out->size = sizeof *out;
  return CUDA_SUCCESS;
}

CUresult cuemm__config_validate(const cuemm_config *cfg)
{
  if (cfg->env_status != CUDA_SUCCESS)
    return refused(cfg);
  for (size_t i = 0; i < NKNOBS; i++) {
    if (knobs[i].type == KNOB_PATH)
      continue;
    double v = get_field(cfg, &knobs[i]);
    if (!in_range(&knobs[i], v))
      return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_config.%s = %g is invalid: expected %s",
                          knobs[i].field, v, knobs[i].accepts);
  }
  return CUDA_SUCCESS;
}

int cuemm__config_env_set(const cuemm_config *cfg, size_t offset)
{
  for (size_t i = 0; i < NKNOBS; i++)
    if (knobs[i].offset == offset)
      return (cfg->env_set >> i) & 1;
  return 0;
}

static int needs_met(knob_needs n, const cuemm_config *cfg)
{
  int pool = cfg->pool == CUEMM_POOL_VMM, managed = cfg->memory == CUEMM_MEMORY_MANAGED;
  return n == NEEDS_NOTHING || (n == NEEDS_POOL && pool) || (n == NEEDS_POOL_OR_MANAGED && (pool || managed)) ||
         (n == NEEDS_MANAGED && managed);
}

void cuemm__config_warn_ignored(const cuemm_config *cfg, FILE *out)
{
  /* Once per variable and process: a program with a manager per device
   * hears it once. */
  static atomic_uchar warned[NKNOBS];
  for (size_t i = 0; i < NKNOBS; i++) {
    const knob *k = &knobs[i];
    if (!((cfg->env_set >> i) & 1) || needs_met(k->needs, cfg) || atomic_exchange(&warned[i], 1))
      continue;
    char v[64];
    format_value(k, get_field(cfg, k), v, sizeof v);
    fprintf(out, "cuemm: %s is set (cuemm_config.%s = %s) but ignored: it acts only with %s, and this manager "
            "has %s and %s memory\n", k->env, k->field, v, needs_text[k->needs],
            cfg->pool == CUEMM_POOL_VMM ? "a pool" : "no pool",
            memory_names[cfg->memory <= CUEMM_MEMORY_SYSTEM ? cfg->memory : 0]);
  }
}

size_t cuemm__config_knob_count(void)
{
  return NKNOBS;
}

void cuemm__config_knob_doc(size_t i, cuemm__config_doc *d)
{
  const knob *k = &knobs[i];
  d->env = k->env;
  d->field = k->field;
  d->accepts = k->accepts;
  d->needs = needs_text[k->needs];
  d->desc = k->desc;
  format_value(k, k->def, d->def, sizeof d->def);
}

const cuemm__config_other *cuemm__config_others(size_t *n)
{
  *n = NOTHERS;
  return others;
}
