/* lifecycle/internal.h: what lifecycle/ offers the folders above it.
 *
 * Creating and destroying a manager (lifecycle.c): the one place that
 * names every layer, the extensions in the order their hooks run among
 * them; and the registry of managers by context with the drop-in calls
 * that find one (registry.c).  Prefix: cuemm__registry.  Above every
 * folder but compat/ and adapter/.
 */
#ifndef CUEMM_LIFECYCLE_INTERNAL_H
#define CUEMM_LIFECYCLE_INTERNAL_H

#include "lifecycle/registry.h"

#endif
