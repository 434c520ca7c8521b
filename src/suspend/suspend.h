/* suspend.h: the suspension of a pool manager (suspend.c) as the manager
 * sees it: an extension whose destroy hook frees the host copy. */
#ifndef CUEMM_SUSPEND_H
#define CUEMM_SUSPEND_H

#include "core/internal.h"

extern const cuemm__extension cuemm__suspend_extension;

#endif
