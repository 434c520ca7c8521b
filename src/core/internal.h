/* core/internal.h: what core/ offers the folders above it.
 *
 * The per-context manager (manager.h's struct cuemm_manager): allocation
 * with Numba's out-of-memory retry and the deferred free path with its
 * flush (manager.c), the pending queue (pending.c), the table of what a
 * manager owns (owned.c), its accounting and out-of-memory story
 * (account.c), entering its context (ctx.c), the allocation kinds besides
 * the pool's (pinned host memory, host.c; managed and system memory,
 * managed.c), address ranges (range.c), and the runners of the hooks of
 * the layers above (extensions.c), which it calls by no name.  Prefixes:
 * cuemm__manager, cuemm__pending, cuemm__owned, cuemm__account, cuemm__ctx,
 * cuemm__managed, cuemm__extensions.  Above base/, suballoc/, trace/ and
 * pool/.
 */
#ifndef CUEMM_CORE_INTERNAL_H
#define CUEMM_CORE_INTERNAL_H

#include "core/account.h"
#include "core/ctx.h"
#include "core/managed.h"
#include "core/manager.h"
#include "core/owned.h"
#include "core/pending.h"

#endif
