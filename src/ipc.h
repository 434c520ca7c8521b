/* ipc.h: inter-process sharing (ipc.c) as the manager sees it: an
 * extension whose destroy hook closes the mappings opened through a manager
 * and says how many, and whose abandon hook forgets them.  ipc.c takes its
 * own lock inside the manager's, never the other way round.
 */
#ifndef CUEMM_IPC_H
#define CUEMM_IPC_H

#include "manager.h"

extern const cuemm__extension cuemm__ipc_extension;

#endif
