/* ipc/internal.h: what ipc/ offers the folders above it.
 *
 * Sharing memory with other processes: exporting and opening handles and
 * the process-wide table of opened ones (ipc.c), the handle's bytes and
 * checks (ipc-handle.c), and pool memory sent as file descriptors
 * (ipc-fd.c).  To the manager it is an extension (ipc.h).  Prefix:
 * cuemm__ipc.  Above core/ and pool/.
 */
#ifndef CUEMM_IPC_INTERNAL_H
#define CUEMM_IPC_INTERNAL_H

#include "ipc/ipc.h"

#endif
