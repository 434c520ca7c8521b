/* stats.h: what a manager reports of itself (stats.c), as report.c and
 * snapshot.c read it. */
#ifndef CUEMM_STATS_H
#define CUEMM_STATS_H

#include "core/internal.h"

/* cuemm_get_stats and cuemm_pool_get_stats with the lock held. */
void cuemm__stats_locked(cuemm_manager *m, cuemm_stats *s);
void cuemm__stats_pool_locked(cuemm_manager *m, cuemm_pool_stats *s);

#endif
