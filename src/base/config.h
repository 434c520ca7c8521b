/* config.h: config.c as the rest of the library sees it: checking a
 * configuration a program may have edited (cuemm_create), which fields the
 * environment set and which of those a manager does not act on, and the
 * options table's text, row by row, for the cuemm(7) page.  The public
 * half (cuemm_config, cuemm_config_init) is in cuemm.h.
 */
#ifndef CUEMM_CONFIG_H
#define CUEMM_CONFIG_H

#include <stddef.h>
#include <stdio.h>

#include "cuemm.h"

/* Copies the program's configuration cfg into *out, a whole cuemm_config
 * of this library: the cfg->size bytes the program's struct has, the fields
 * past them at their defaults (a struct of an older cuemm.h).  Returns
 * CUDA_ERROR_INVALID_VALUE, naming cuemm_config.size, for a size no
 * version of the struct has (0, garbage, larger than this library's). */
CUresult cuemm__config_copy(const cuemm_config *cfg, cuemm_config *out);

/* Checks every field of a configuration a program may have edited, and the
 * environment error cuemm_config_init recorded in it.  Returns
 * CUDA_ERROR_INVALID_VALUE with a message naming the field, or CUDA_SUCCESS. */
CUresult cuemm__config_validate(const cuemm_config *cfg);

/* Whether cuemm_config_init took the field at `offset` (offsetof
 * cuemm_config) from its environment variable. */
int cuemm__config_env_set(const cuemm_config *cfg, size_t offset);

/* Writes to `out` one line for each variable the environment set that a
 * manager with configuration cfg does not act on (a pool knob without a
 * pool, ...), the first time in the process that variable is found so. */
void cuemm__config_warn_ignored(const cuemm_config *cfg, FILE *out);

/* One knob of the table, as the cuemm(7) page shows it. */
typedef struct cuemm__config_doc {
  const char *env, *field, *accepts;
  const char *needs;  /* what must be set for it to act ("" : always acts) */
  const char *desc;   /* what it does, one sentence */
  char def[64];       /* the default, as the variable would be written */
} cuemm__config_doc;

size_t cuemm__config_knob_count(void);
void cuemm__config_knob_doc(size_t i, cuemm__config_doc *d);

/* A variable read outside the table (the driver file, ...). */
typedef struct cuemm__config_other {
  const char *env;
  const char *where;  /* the files that read it */
  const char *desc;
} cuemm__config_other;

/* The variables read outside the table; *n gets their number. */
const cuemm__config_other *cuemm__config_others(size_t *n);

#endif
