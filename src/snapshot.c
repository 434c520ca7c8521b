/* snapshot.c: a manager's memory at one moment (cuemm_snapshot_take) and
 * its JSON form. */
#include <stdlib.h>

#include "error.h"
#include "manager.h"

CUEMM_EXTERN CUresult cuemm_snapshot_take(cuemm_manager *m, cuemm_snapshot **out)
{
  (void)m;
  (void)out;
  return cuemm__error(CUDA_ERROR_NOT_SUPPORTED, "cuemm_snapshot_take: not built yet");
}

CUEMM_EXTERN void cuemm_snapshot_free(cuemm_snapshot *s)
{
  if (!s)
    return;
  free(s->chunks);
  free(s->blocks);
  free(s);
}

CUEMM_EXTERN CUresult cuemm_snapshot_write_json(const cuemm_snapshot *s, FILE *f)
{
  (void)s;
  (void)f;
  return cuemm__error(CUDA_ERROR_NOT_SUPPORTED, "cuemm_snapshot_write_json: not built yet");
}

CUEMM_EXTERN CUresult cuemm_stats_print(cuemm_manager *m, FILE *f)
{
  (void)m;
  (void)f;
  return cuemm__error(CUDA_ERROR_NOT_SUPPORTED, "cuemm_stats_print: not built yet");
}
