/* extensions.c: owns the list of extensions (manager.h), the layers above
 * the manager that keep state per manager, and the order the manager's
 * lifecycle runs them in.  It is the one place that names them, so the
 * manager calls up into no other file.
 *
 * The registry comes first: once a manager's teardown has begun, cuemm_get
 * must no longer hand it out.  The statistics table (CUEMM_STATS) comes
 * next, so that it shows the manager as the program left it.  The
 * stream-ordered path's caches come next: their blocks go with the pool.
 * A suspension's host copy comes last.
 */
#include <stdio.h>

#include "base/error.h"
#include "ipc/ipc.h"
#include "lifecycle/registry.h"
#include "observe/report.h"
#include "stream/stream.h"
#include "suspend/suspend.h"

static const cuemm__extension *const extensions[] = {
  &cuemm__registry_extension,
  &cuemm__report_extension,
  &cuemm__ipc_extension,
  &cuemm__stream_extension,
  &cuemm__suspend_extension,
};
enum { NEXT = sizeof extensions / sizeof extensions[0] };

CUresult cuemm__extensions_attach(cuemm_manager *m)
{
  for (size_t i = 0; i < NEXT; i++) {
    CUresult r = extensions[i]->attach ? extensions[i]->attach(m) : CUDA_SUCCESS;
    if (r == CUDA_SUCCESS)
      continue;
    while (i-- > 0)
      if (extensions[i]->abandon)
        extensions[i]->abandon(m);
    return r;
  }
  return CUDA_SUCCESS;
}

void cuemm__extensions_destroy(cuemm_manager *m, char *note, size_t cap)
{
  size_t used = 0;
  note[0] = 0;
  for (size_t i = 0; i < NEXT; i++) {
    if (!extensions[i]->destroy)
      continue;
    char one[256] = "";
    extensions[i]->destroy(m, one, sizeof one);
    if (one[0] && used < cap) {
      int k = snprintf(note + used, cap - used, "%s%s", used ? "; " : "", one);
      used = k < 0 ? used : used + (size_t)k;
    }
  }
}

void cuemm__extensions_abandon(cuemm_manager *m)
{
  for (size_t i = 0; i < NEXT; i++)
    if (extensions[i]->abandon)
      extensions[i]->abandon(m);
}

size_t cuemm__extensions_live(cuemm_manager *m, size_t *bytes)
{
  size_t n = 0, b = 0;
  for (size_t i = 0; i < NEXT; i++)
    if (extensions[i]->live) {
      size_t one = 0;
      n += extensions[i]->live(m, &one);
      b += one;
    }
  if (bytes)
    *bytes = b;
  return n;
}

size_t cuemm__extensions_reclaim(cuemm_manager *m, int how, size_t want)
{
  size_t given = 0;
  for (size_t i = 0; i < NEXT; i++)
    if (extensions[i]->reclaim)
      given += extensions[i]->reclaim(m, how, want);
  return given;
}

void cuemm__extensions_settle(cuemm_manager *m, int synced)
{
  for (size_t i = 0; i < NEXT; i++)
    if (extensions[i]->settle)
      extensions[i]->settle(m, synced);
}

CUresult cuemm__extensions_give_up(cuemm_manager *m, cuemm__owned_entry *e)
{
  for (size_t i = 0; i < NEXT; i++)
    if (extensions[i]->give_up)
      return extensions[i]->give_up(m, e);
  return cuemm__error(CUDA_ERROR_INVALID_VALUE, "internal: no extension holds the block at 0x%llx",
                      (unsigned long long)e->key);
}

void cuemm__extensions_reset(cuemm_manager *m)
{
  for (size_t i = 0; i < NEXT; i++)
    if (extensions[i]->reset)
      extensions[i]->reset(m);
}

void cuemm__extensions_stats(cuemm_manager *m, cuemm_stats *s)
{
  for (size_t i = 0; i < NEXT; i++)
    if (extensions[i]->stats)
      extensions[i]->stats(m, s);
}

void cuemm__extensions_grown(cuemm_manager *m, size_t want)
{
  for (size_t i = 0; i < NEXT; i++)
    if (extensions[i]->grown)
      extensions[i]->grown(m, want);
}

size_t cuemm__extensions_live_size(cuemm_manager *m, const cuemm__owned_entry *e)
{
  if (e->kind != CUEMM__KIND_STREAM)
    return e->pending ? 0 : e->size;
  size_t bytes = 0;
  for (size_t i = 0; i < NEXT; i++)
    if (extensions[i]->live_size)
      return extensions[i]->live_size(m, e, &bytes) ? bytes : 0;
  return 0;
}

cuemm__owned_entry *cuemm__extensions_owned_lookup(cuemm_manager *m, uintptr_t p, int inside)
{
  cuemm__owned_entry *e = cuemm__owned_find(&m->owned, p);
  for (size_t i = 0; !e && i < NEXT; i++)
    if (extensions[i]->own)
      e = extensions[i]->own(m, p);
  return e && (inside || e->key == p) ? e : NULL;
}
