/* extensions.c: owns running the hooks of a manager's extensions
 * (manager.h), the layers above the manager that keep state per manager:
 * each runner calls one hook of every extension, in the order lifecycle.c
 * gave when it created the manager.  It names none of them, so the manager
 * calls up into no other file.
 */
#include <stdio.h>

#include "base/internal.h"
#include "core/manager.h"

CUresult cuemm__extensions_attach(cuemm_manager *m, const struct cuemm__extension *const *ext, size_t n)
{
  m->ext = ext;
  m->next_count = n;
  for (size_t i = 0; i < n; i++) {
    CUresult r = m->ext[i]->attach ? m->ext[i]->attach(m) : CUDA_SUCCESS;
    if (r == CUDA_SUCCESS)
      continue;
    while (i-- > 0)
      if (m->ext[i]->abandon)
        m->ext[i]->abandon(m);
    return r;
  }
  return CUDA_SUCCESS;
}

void cuemm__extensions_destroy(cuemm_manager *m, char *note, size_t cap)
{
  size_t used = 0;
  note[0] = 0;
  for (size_t i = 0; i < m->next_count; i++) {
    if (!m->ext[i]->destroy)
      continue;
    char one[256] = "";
    m->ext[i]->destroy(m, one, sizeof one);
    if (one[0] && used < cap) {
      int k = snprintf(note + used, cap - used, "%s%s", used ? "; " : "", one);
      used = k < 0 ? used : used + (size_t)k;
    }
  }
}

void cuemm__extensions_abandon(cuemm_manager *m)
{
  for (size_t i = 0; i < m->next_count; i++)
    if (m->ext[i]->abandon)
      m->ext[i]->abandon(m);
}

size_t cuemm__extensions_live(cuemm_manager *m, size_t *bytes)
{
  size_t n = 0, b = 0;
  for (size_t i = 0; i < m->next_count; i++)
    if (m->ext[i]->live) {
      size_t one = 0;
      n += m->ext[i]->live(m, &one);
      b += one;
    }
  if (bytes)
    *bytes = b;
  return n;
}

size_t cuemm__extensions_reclaim(cuemm_manager *m, int how, size_t want)
{
  size_t given = 0;
  for (size_t i = 0; i < m->next_count; i++)
    if (m->ext[i]->reclaim)
      given += m->ext[i]->reclaim(m, how, want);
  return given;
}

void cuemm__extensions_settle(cuemm_manager *m, int synced)
{
  for (size_t i = 0; i < m->next_count; i++)
    if (m->ext[i]->settle)
      m->ext[i]->settle(m, synced);
}

CUresult cuemm__extensions_give_up(cuemm_manager *m, cuemm__owned_entry *e)
{
  for (size_t i = 0; i < m->next_count; i++)
    if (m->ext[i]->give_up)
      return m->ext[i]->give_up(m, e);
  return cuemm__error(CUDA_ERROR_INVALID_VALUE, "internal: no extension holds the block at 0x%llx",
                      (unsigned long long)e->key);
}

void cuemm__extensions_reset(cuemm_manager *m)
{
  for (size_t i = 0; i < m->next_count; i++)
    if (m->ext[i]->reset)
      m->ext[i]->reset(m);
}

void cuemm__extensions_stats(cuemm_manager *m, cuemm_stats *s)
{
  for (size_t i = 0; i < m->next_count; i++)
    if (m->ext[i]->stats)
      m->ext[i]->stats(m, s);
}

void cuemm__extensions_grown(cuemm_manager *m, size_t want)
{
  for (size_t i = 0; i < m->next_count; i++)
    if (m->ext[i]->grown)
      m->ext[i]->grown(m, want);
}

size_t cuemm__extensions_live_size(cuemm_manager *m, const cuemm__owned_entry *e)
{
  if (e->kind != CUEMM__KIND_STREAM)
    return e->pending ? 0 : e->size;
  size_t bytes = 0;
  for (size_t i = 0; i < m->next_count; i++)
    if (m->ext[i]->live_size)
      return m->ext[i]->live_size(m, e, &bytes) ? bytes : 0;
  return 0;
}

cuemm__owned_entry *cuemm__extensions_owned_lookup(cuemm_manager *m, uintptr_t p, int inside)
{
  cuemm__owned_entry *e = cuemm__owned_find(&m->owned, p);
  for (size_t i = 0; !e && i < m->next_count; i++)
    if (m->ext[i]->own)
      e = m->ext[i]->own(m, p);
  return e && (inside || e->key == p) ? e : NULL;
}
