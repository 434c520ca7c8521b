/* report.h: the statistics table and CUEMM_STATS, as an extension
 * (manager.h) that prints it when a manager ends or the process exits. */
#ifndef CUEMM_REPORT_H
#define CUEMM_REPORT_H

#include "core/internal.h"

extern const cuemm__extension cuemm__report_extension;

#endif
