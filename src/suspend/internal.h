/* suspend/internal.h: what suspend/ offers the folders above it.
 *
 * The suspension of a pool manager (cuemm_pool_suspend, cuemm_pool_resume):
 * the order of its steps, the host copy of the live blocks' contents, and
 * the threads' caches emptied first; what happens to the chunks is
 * pool/vacate.c's.  To the manager it is an extension (suspend.h).
 * Prefix: cuemm__suspend.  Above stream/ and everything below it.
 */
#ifndef CUEMM_SUSPEND_INTERNAL_H
#define CUEMM_SUSPEND_INTERNAL_H

#include "suspend/suspend.h"

#endif
