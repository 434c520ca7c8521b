/* lock.h: the lock of a manager.
 *
 * A futex mutex with three states (free, held, held with sleepers):
 * uncontended, taking and dropping it is one atomic instruction each and no
 * call, which matters because an alloc+free pair takes it twice and a pooled
 * pair is meant to cost what a CPU malloc costs.  A thread that finds it held
 * spins briefly, then sleeps in the kernel: the holder may be inside a flush
 * that waits for the GPU for milliseconds, which a pure spinlock would burn
 * a core on.  Linux only, as the rest of cuemm.
 */
#ifndef CUEMM_LOCK_H
#define CUEMM_LOCK_H

#include <stdatomic.h>

typedef struct cuemm__lock {
  atomic_int state; /* 0 free, 1 held, 2 held and someone may sleep on it */
} cuemm__lock;

static inline void cuemm__lock_init(cuemm__lock *l)
{
  atomic_init(&l->state, 0);
}

/* The slow halves, in lock.c. */
void cuemm__lock_contended(cuemm__lock *l);
void cuemm__lock_wake(cuemm__lock *l);

static inline void cuemm__lock_acquire(cuemm__lock *l)
{
  int expected = 0;
  if (__builtin_expect(atomic_compare_exchange_strong_explicit(&l->state, &expected, 1, memory_order_acquire,
                                                               memory_order_relaxed), 1))
    return;
  cuemm__lock_contended(l);
}

/* Takes the lock if it is free; returns whether it did. */
static inline int cuemm__lock_try(cuemm__lock *l)
{
  int expected = 0;
  return atomic_compare_exchange_strong_explicit(&l->state, &expected, 1, memory_order_acquire,
                                                 memory_order_relaxed);
}

static inline void cuemm__lock_release(cuemm__lock *l)
{
  /* From 1 to 0: nobody waits.  From 2: somebody may sleep; wake one. */
  if (__builtin_expect(atomic_fetch_sub_explicit(&l->state, 1, memory_order_release) != 1, 0))
    cuemm__lock_wake(l);
}

#endif
