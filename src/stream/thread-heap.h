/* thread-heap.h: how a thread finds its heap for a manager (the slots of
 * thread-local storage the fast paths read inline), enters it off the fast
 * path, and what thread-heap.c offers about the threads' heaps: attaching
 * one, the cache's cap, their totals and their teardown.
 */
#ifndef CUEMM_THREAD_HEAP_H
#define CUEMM_THREAD_HEAP_H

#include "stream/heap.h"
#include "core/internal.h"

#define CUEMM__TLS_SLOTS 8

typedef struct cuemm__tls_slot {
  const cuemm_manager *m;
  uint64_t serial;
  cuemm__heap *h;
} cuemm__tls_slot;

/* The calling thread's slots, the first the one last used (thread-heap.c). */
extern _Thread_local cuemm__tls_slot cuemm__tls[CUEMM__TLS_SLOTS] __attribute__((tls_model("initial-exec")));

cuemm__heap *cuemm__thread_heap_of_slow(const cuemm_manager *m);

/* Whether the calling thread's first slot is m's (its heap may still be
 * NULL). */
static inline int cuemm__thread_heap_slot_first(const cuemm_manager *m)
{
  return cuemm__tls[0].m == m && cuemm__tls[0].serial == m->serial;
}

/* The calling thread's heap for m, or NULL when it has none yet. */
static inline cuemm__heap *cuemm__thread_heap_of(const cuemm_manager *m)
{
  if (__builtin_expect(cuemm__thread_heap_slot_first(m), 1))
    return cuemm__tls[0].h;
  return cuemm__thread_heap_of_slow(m);
}

/* The owner's entry into its heap off the fast path: entered, or locked
 * when another thread wants it.  Returns whether it entered (leave with
 * cuemm__thread_heap_exit). */
static inline int cuemm__thread_heap_get(cuemm__heap *h)
{
  if (cuemm__heap_enter(h))
    return 1;
  cuemm__heap_lock(h);
  return 0;
}

static inline void cuemm__thread_heap_exit(cuemm__heap *h, int entered)
{
  if (entered)
    cuemm__heap_leave(h);
  else
    cuemm__heap_unlock(h);
}

/* A key no stream handle has, for a stream that is gone. */
CUstream cuemm__thread_heap_retired_key(void);

/* Sets m->keep_large, each thread's share of cfg.stream_keep_large: none
 * while the pool grows past its peak (m->keep_quiet, CUEMM__KEEP_QUIET).
 * m's lock held. */
void cuemm__thread_heap_keep_share(cuemm_manager *m);

/* The bytes a thread's cache keeps before it gives idle blocks back. */
size_t cuemm__thread_heap_cap(const cuemm_manager *m);

/* Gives the calling thread a heap for m: an orphan's, or a new one.
 * m's lock held. */
CUresult cuemm__thread_heap_attach_locked(cuemm_manager *m, cuemm__heap **out);

/* Takes every heap of m off the process-wide list and frees it, its
 * events destroyed with `use_driver`; returns how many events the driver
 * refused to destroy.  m's lock held or m unreachable. */
size_t cuemm__thread_heaps_fini(cuemm_manager *m, int use_driver);

/* The manager's hooks that read the heaps' totals (manager.h). */
void cuemm__thread_heaps_stats(cuemm_manager *m, cuemm_stats *s);
size_t cuemm__thread_heaps_live(cuemm_manager *m, size_t *bytes);
int cuemm__thread_heaps_live_size(cuemm_manager *m, const cuemm__owned_entry *e, size_t *bytes);
/* The manager's hook after a growth past its peak (manager.h): when the
 * caches held at least `want` bytes, their bound halves
 * (CUEMM__CACHE_HALVINGS) for every cache's next trim on.  m's lock held. */
void cuemm__thread_heaps_grown(cuemm_manager *m, size_t want);

#endif
