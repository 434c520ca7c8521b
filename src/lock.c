/* lock.c: owns what the manager's lock (lock.h) does when it is
 * contended: taking a lock another thread holds (a spin while the holder
 * works, then sleep on a futex) and waking a sleeper at release.  The
 * uncontended halves are inline in lock.h.  After the classic three-state
 * futex mutex: a sleeper marks the lock 2 before it sleeps, so the
 * holder's release knows to wake someone.
 *
 * The spin watches the lock with plain loads and tries to take it only
 * when it reads free, and keeps spinning when others sleep on it too
 * (state 2).  Breaking off to sleep as soon as one thread sleeps turns a
 * busy lock into a convoy: from then on every release wakes a sleeper
 * (a system call and a context switch, microseconds) to hand over a
 * critical section of a few hundred nanoseconds, and sixteen threads
 * sharing the pool did less together than one alone.
 */
#include "lock.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

/* About 10 to 40 us of pause instructions, depending on the processor:
 * longer than any critical section but a flush that waits for the GPU. */
#define SPINS 256

static void pause_briefly(void)
{
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* Spins while the lock is held; returns what it last read. */
static int spin(cuemm__lock *l)
{
  int c = atomic_load_explicit(&l->state, memory_order_relaxed);
  for (int i = 0; c != 0 && i < SPINS; i++) {
    pause_briefly();
    c = atomic_load_explicit(&l->state, memory_order_relaxed);
  }
  return c;
}

void cuemm__lock_contended(cuemm__lock *l)
{
  int c = spin(l);
  if (c == 0) {
    int expected = 0;
    if (atomic_compare_exchange_strong_explicit(&l->state, &expected, 1, memory_order_acquire, memory_order_relaxed))
      return;
  }
  /* Taken as 2 from here on: this thread cannot know whether others sleep. */
  for (;;) {
    if (atomic_exchange_explicit(&l->state, 2, memory_order_acquire) == 0)
      return;
    syscall(SYS_futex, &l->state, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
    spin(l);
  }
}

void cuemm__lock_wake(cuemm__lock *l)
{
  atomic_store_explicit(&l->state, 0, memory_order_release);
  syscall(SYS_futex, &l->state, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}
