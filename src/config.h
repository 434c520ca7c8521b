/* config.h: internal half of configuration (validation shared by create). */
#ifndef CUEMM_CONFIG_H
#define CUEMM_CONFIG_H

#include "cuemm.h"

/* Checks every field of a configuration a program may have edited, and the
 * environment error cuemm_config_init recorded in it.  Returns
 * CUDA_ERROR_INVALID_VALUE with a message naming the field, or CUDA_SUCCESS. */
CUresult cuemm__config_validate(const cuemm_config *cfg);

#endif
