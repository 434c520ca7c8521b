/* suspend.c: owns the suspension of a pool manager (cuemm_pool_suspend,
 * cuemm_pool_resume): the order of a suspension's steps, the host copy of
 * the live blocks' contents, and what is undone when a step fails.  The
 * chunks themselves (their unmapping, release and remapping) are pool.c's,
 * reached through its functions.
 */
#include "error.h"
#include "manager.h"

CUEMM_EXTERN CUresult cuemm_pool_suspend(cuemm_manager *m, unsigned flags)
{
  (void)flags;
  if (!m)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_pool_suspend: manager is NULL");
  return cuemm__error(CUDA_ERROR_NOT_SUPPORTED, "cuemm_pool_suspend: not built yet");
}

CUEMM_EXTERN CUresult cuemm_pool_resume(cuemm_manager *m)
{
  if (!m)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_pool_resume: manager is NULL");
  return cuemm__error(CUDA_ERROR_NOT_SUPPORTED, "cuemm_pool_resume: not built yet");
}
