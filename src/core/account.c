/* account.c: owns the manager's memory accounting that its allocators share:
 * the count of a new allocation in the statistics, the bytes held from the
 * driver and their peak, and what an out-of-memory message says of the
 * device.  manager.c, managed.c and exchange.c call it; it calls none of
 * them, only reads the manager's figures (the pool's and the managed pool's
 * held bytes among them).
 */
#include "core/account.h"
#include "base/internal.h"
#include "core/managed.h"
#include "core/manager.h"
#include "trace/internal.h"

void cuemm__account_alloc(cuemm_manager *m, size_t size)
{
  m->st.allocs++;
  m->st.live_bytes += size;
  m->st.live_count++;
  if (m->st.live_bytes > m->st.peak_bytes)
    m->st.peak_bytes = m->st.live_bytes;
  if (m->st.live_count > m->st.peak_count)
    m->st.peak_count = m->st.live_count;
}

size_t cuemm__account_held_bytes(const cuemm_manager *m)
{
  size_t h = atomic_load_explicit(&m->driver_bytes, memory_order_relaxed);
  if (m->pool)
    h += cuemm__pool_held_from_driver(m->pool);
  if (m->managed)
    h += atomic_load_explicit(&m->managed->held, memory_order_relaxed); /* core/managed.h: written atomically */
  return h;
}

void cuemm__account_note_held(cuemm_manager *m)
{
  size_t h = cuemm__account_held_bytes(m);
  if (h > m->st.peak_held_bytes)
    m->st.peak_held_bytes = h;
}

/* What an operator needs first when one rank of many runs out of memory:
 * which device (ordinal, and the PCI bus id that nvidia-smi prints), and the
 * figures (what was asked, what this manager holds, what the driver says is
 * free), appended to the message already set.  Driver calls made here only
 * add to the message: one that fails leaves its figure out, never replaces
 * the message.  Lock held; the caller's context is restored. */
void cuemm__account_oom_where(cuemm_manager *m, size_t size)
{
  const cuemm__driver_table *d = m->drv;
  char bus[32] = "";
  if (d->DeviceGetPCIBusId && d->DeviceGetPCIBusId(bus, (int)sizeof bus, m->dev) != CUDA_SUCCESS)
    bus[0] = 0;
  size_t f = 0, t = 0;
  int have_free = 0, pushed = 0;
  CUcontext cur = NULL, popped = NULL;
  if (d->CtxGetCurrent(&cur) == CUDA_SUCCESS && (cur == m->ctx || (pushed = d->CtxPushCurrent(m->ctx) == CUDA_SUCCESS)))
    have_free = d->MemGetInfo(&f, &t) == CUDA_SUCCESS;
  if (pushed)
    d->CtxPopCurrent(&popped);
  cuemm__error_append("; device %d%s%s%s: %zu bytes requested, %zu held by this manager", (int)m->dev,
                      bus[0] ? " (PCI " : "", bus, bus[0] ? ")" : "", size, cuemm__account_held_bytes(m));
  if (have_free)
    cuemm__error_append(", %zu free of %zu on the device (cuMemGetInfo)", f, t);
}

void cuemm__account_oom_retry(cuemm_manager *m, cuemm__oom_retry *o, unsigned how)
{
  m->st.oom_retries++;
  if (how & CUEMM__OOM_DEVICE)
    cuemm__log_note(m->log, "oom-retry", 0);
  o->count = m->pending.count;
  o->bytes = m->pending.bytes;
  o->how = how;
  if (how & CUEMM__OOM_KEEP_WHY)
    cuemm__error_save(&o->why);
}

CUresult cuemm__account_oom_failed(cuemm_manager *m, cuemm__oom_retry *o, CUresult r, size_t size, const char *steps)
{
  if (m->pending.defer_depth)
    cuemm__error_append(" after %sretrying; a defer scope is open, so %zu pending frees (%zu bytes) were held back",
                        steps, m->pending.count, m->pending.bytes);
  else
    cuemm__error_append(" after flushing %zu pending frees (%zu bytes)%s%sand retrying", o->count, o->bytes,
                        *steps ? ", " : " ", steps);
  if (o->how & CUEMM__OOM_KEEP_WHY)
    cuemm__error_append_saved("; ", &o->why);
  o->how &= ~CUEMM__OOM_KEEP_WHY;
  if (o->how & CUEMM__OOM_DEVICE)
    cuemm__account_oom_where(m, size);
  return r;
}

void cuemm__account_oom_served(cuemm__oom_retry *o)
{
  if (o->how & CUEMM__OOM_KEEP_WHY)
    cuemm__error_discard(&o->why);
  o->how = 0;
}
