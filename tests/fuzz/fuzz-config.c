/* fuzz-config.c: the parsing of every CUEMM_* environment variable that
 * cuemm_config_init reads (src/base/config.c's table), through setenv.
 *
 * Input: byte 0 picks the variable, the rest (up to a NUL) is its value;
 * the other variables are unset.  What must hold: the result agrees with a
 * parser written here from the documented grammar (whole numbers, sizes
 * with K/KiB/M/MiB/G/GiB/T/TiB, "none"/"vmm", 0/1, a fraction in (0, 1]);
 * an accepted value lands in its field exactly and leaves every other field
 * at its default; a refused one sets env_status, a bit in env_invalid and
 * a message naming the variable in cuemm_last_error, and leaves every field at
 * its default.  A refusal says "is too large" exactly when the value is a
 * number of the right form past the knob's range or 64 bits, "is invalid:
 * unknown unit" when a size's digits are followed by letters that are no
 * unit, and "is invalid: expected" otherwise.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuemm.h"
#include "fuzz.h"

enum kind { COUNT, RATIO, POOL, SIZE, FLAG };

static const struct var {
  const char *name;
  enum kind kind;
  size_t offset;
  int zero_ok;
} vars[] = {
  { "CUEMM_MAX_PENDING_DEALLOCS_COUNT", COUNT, offsetof(cuemm_config, max_pending_count), 1 },
  { "CUEMM_MAX_PENDING_DEALLOCS_RATIO", RATIO, offsetof(cuemm_config, max_pending_ratio), 0 },
  { "CUEMM_POOL", POOL, offsetof(cuemm_config, pool), 1 },
  { "CUEMM_POOL_RESERVE", SIZE, offsetof(cuemm_config, pool_reserve), 1 },
  { "CUEMM_POOL_CHUNK", SIZE, offsetof(cuemm_config, pool_chunk), 0 },
  { "CUEMM_POOL_RELEASE_THRESHOLD", SIZE, offsetof(cuemm_config, pool_release_threshold), 1 },
  { "CUEMM_POOL_LIMIT", SIZE, offsetof(cuemm_config, pool_limit), 1 },
  { "CUEMM_POOL_IPC", FLAG, offsetof(cuemm_config, pool_ipc), 1 },
};
#define NVARS (sizeof vars / sizeof vars[0])

#define MAX_SIZE ((uint64_t)256 << 40) /* 256 TiB */

/* Digits only, into *v; 0 when there is no digit; with *over set when
 * they overflow 64 bits (*end still past them). */
static int digits(const char *s, const char **end, uint64_t *v, int *over)
{
  uint64_t x = 0;
  const char *p = s;
  *over = 0;
  for (; *p >= '0' && *p <= '9'; p++) {
    if (x > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
      *over = 1;
    x = x * 10 + (uint64_t)(*p - '0');
  }
  *end = p;
  *v = x;
  return p != s;
}

/* 1 and *want when the reference grammar accepts text for v; 0 when it
 * refuses it, 2 when it refuses it as too large, 3 as a size of an unknown
 * unit. */
static int reference(const struct var *v, const char *text, double *want)
{
  const char *end;
  uint64_t x;
  int over;
  switch (v->kind) {
  case POOL:
    if (!strcmp(text, "none") || !strcmp(text, "vmm")) {
      *want = strcmp(text, "vmm") == 0 ? CUEMM_POOL_VMM : CUEMM_POOL_NONE;
      return 1;
    }
    return 0;
  case FLAG:
    if (!strcmp(text, "0") || !strcmp(text, "1")) {
      *want = text[0] == '1';
      return 1;
    }
    return 0;
  case COUNT:
    if (!digits(text, &end, &x, &over) || *end)
      return 0;
    if (over || x > UINT32_MAX)
      return 2;
    *want = (double)x;
    return 1;
  case SIZE: {
    static const struct { const char *s; unsigned shift; } units[] = {
      { "", 0 }, { "K", 10 }, { "KiB", 10 }, { "M", 20 }, { "MiB", 20 },
      { "G", 30 }, { "GiB", 30 }, { "T", 40 }, { "TiB", 40 },
    };
    if (!digits(text, &end, &x, &over))
      return 0;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
      if (strcmp(end, units[i].s) != 0)
        continue;
      if (over || x > (MAX_SIZE >> units[i].shift))
        return 2;
      x <<= units[i].shift;
      if (x == 0 && !v->zero_ok)
        return 0;
      *want = (double)x;
      return 1;
    }
    /* Letters alone after the digits: a unit, not one of those. */
    if (!*end)
      return 0;
    for (const char *c = end; *c; c++)
      if (!((*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z')))
        return 0;
    return 3;
  }
  case RATIO:
    /* The grammar is C's strtod from a digit or a point; only the range and
     * the whole-string rule are checked apart from it. */
    return -1;
  }
  return 0;
}

static double field(const cuemm_config *c, const struct var *v)
{
  const char *b = (const char *)c + v->offset;
  switch (v->kind) {
  case COUNT:
  case SIZE: return (double)*(const size_t *)(const void *)b;
  case RATIO: return *(const double *)(const void *)b;
  case POOL: return (double)*(const cuemm_pool_kind *)(const void *)b;
  case FLAG: return (double)*(const int *)(const void *)b;
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size < 1)
    return 0;
  const struct var *v = &vars[data[0] % NVARS];
  char text[256];
  size_t n = size - 1 < sizeof text - 1 ? size - 1 : sizeof text - 1;
  memcpy(text, data + 1, n);
  text[n] = '\0';

  for (size_t i = 0; i < NVARS; i++)
    unsetenv(vars[i].name);
  cuemm_config def, c;
  FUZZ_ASSERT(cuemm_config_init(&def) == CUDA_SUCCESS, "defaults refused");
  setenv(v->name, text, 1);
  memset(&c, 0xEE, sizeof c);
  CUresult r = cuemm_config_init(&c);
  unsetenv(v->name);

  double want = 0;
  int ref = text[0] ? reference(v, text, &want) : 1;
  if (!text[0])
    want = field(&def, v);
  if (ref == -1) {
    /* The ratio: accepted means a finite value in (0, 1] made of the whole
     * string; refused means no such value. */
    char *end = NULL;
    errno = 0;
    double d = strtod(text, &end);
    int lead = (text[0] >= '0' && text[0] <= '9') || text[0] == '.';
    ref = lead && !errno && end && *end == '\0' && isfinite(d) && d > 0 && d <= 1;
    if (lead && end && *end == '\0' && !isnan(d) && d > 1)
      ref = 2; /* past 1, or past what a double holds (ERANGE, HUGE_VAL) */
    want = d;
  }
  FUZZ_ASSERT((r == CUDA_SUCCESS) == (ref == 1), "%s=\"%s\": cuemm says %d, the grammar says %s", v->name, text,
              (int)r, ref == 1 ? "valid" : "invalid");
  if (r == CUDA_SUCCESS) {
    FUZZ_ASSERT(c.env_status == CUDA_SUCCESS, "accepted with env_status %d", (int)c.env_status);
    FUZZ_ASSERT(field(&c, v) == want, "%s=\"%s\" gave %.17g, expected %.17g", v->name, text, field(&c, v), want);
  } else {
    FUZZ_ASSERT(r == CUDA_ERROR_INVALID_VALUE && c.env_status == r, "refused with %d, env_status %d", (int)r,
                (int)c.env_status);
    FUZZ_ASSERT(c.env_invalid != 0 && (c.env_invalid & (c.env_invalid - 1)) == 0,
                "env_invalid has not one bit: %#llx", (unsigned long long)c.env_invalid);
    FUZZ_ASSERT(strstr(cuemm_last_error(), v->name) != NULL, "message does not name %s: %s", v->name,
                cuemm_last_error());
    FUZZ_ASSERT(field(&c, v) == field(&def, v), "a refused %s changed its field", v->name);
    char head[160];
    snprintf(head, sizeof head, "%s=\"%.64s\" %s", v->name, text,
             ref == 2 ? "is too large (at most " : ref == 3 ? "is invalid: unknown unit '" : "is invalid: expected ");
    FUZZ_ASSERT(strncmp(cuemm_last_error(), head, strlen(head)) == 0,
                "%s=\"%s\": the grammar says %s, the message: %s", v->name, text,
                ref == 2 ? "too large" : ref == 3 ? "an unknown unit" : "malformed", cuemm_last_error());
  }
  for (size_t i = 0; i < NVARS; i++)
    if (&vars[i] != v)
      FUZZ_ASSERT(field(&c, &vars[i]) == field(&def, &vars[i]), "%s=\"%s\" changed %s", v->name, text,
                  vars[i].name);
  return 0;
}
