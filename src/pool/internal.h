/* pool/internal.h: what pool/ offers the folders above it.
 *
 * The growable pool on CUDA virtual memory (CUEMM_POOL=vmm): the address
 * reservation and the physical chunks mapped into it, their growth and
 * release (pool.c), the size of a growth's pieces (piece.c), peer access
 * and the pieces an IPC export names (share.c), and the chunks released
 * and mapped again around a suspension (vacate.c).  Placement inside it is
 * suballoc/'s.  It knows no manager: its callers hold the manager's lock.
 * Prefixes: cuemm__pool, cuemm__piece, cuemm__share, cuemm__vacate.
 * Above base/, suballoc/ and trace/.
 */
#ifndef CUEMM_POOL_INTERNAL_H
#define CUEMM_POOL_INTERNAL_H

#include "pool/piece.h"
#include "pool/pool.h"
#include "pool/share.h"
#include "pool/vacate.h"

#endif
