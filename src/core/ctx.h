/* ctx.h: entering and leaving a manager's context (ctx.c), internal
 * interface.  Below the manager: manager.h includes it for its users.
 */
#ifndef CUEMM_CTX_H
#define CUEMM_CTX_H

#include "cuemm.h"

/* Makes m's context current for the calling thread if it is not, remembering
 * whether it pushed.  Every driver call of a manager runs between these.
 * cuemm__ctx_leave restores the caller's context and returns `r`, or, when
 * `r` is CUDA_SUCCESS and the restore failed, that failure: an operation
 * whose work succeeded must still say so when it leaves the wrong context
 * current on the caller's thread. */
typedef struct cuemm__ctx_guard { int pushed; } cuemm__ctx_guard;
CUresult cuemm__ctx_enter(cuemm_manager *m, cuemm__ctx_guard *g);
CUresult cuemm__ctx_leave(cuemm_manager *m, cuemm__ctx_guard *g, CUresult r);

#endif
