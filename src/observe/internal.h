/* observe/internal.h: what observe/ offers the folders above it.
 *
 * What a manager reports of itself, read from every layer below: its
 * statistics (stats.c), the table CUEMM_STATS prints (report.c, an
 * extension) and snapshots of its memory (snapshot.c).  Recording as the
 * work happens is trace/'s.  Prefixes: cuemm__stats, cuemm__report.
 * Above stream/ and everything below it.
 */
#ifndef CUEMM_OBSERVE_INTERNAL_H
#define CUEMM_OBSERVE_INTERNAL_H

#include "observe/report.h"
#include "observe/stats.h"

#endif
