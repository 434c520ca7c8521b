/* lock.c: owns what the manager's lock (lock.h) does when it is
 * contended: taking a lock another thread holds (a brief spin, then sleep
 * on a futex) and waking a sleeper at release.  The uncontended halves are
 * inline in lock.h.  After the classic three-state futex mutex: a sleeper
 * marks the lock 2 before it sleeps, so the holder's release knows to wake
 * someone.
 */
#include "base/lock.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

static void pause_briefly(void)
{
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

void cuemm__lock_contended(cuemm__lock *l)
{
  /* Most holders are on the alloc/free fast path and gone in tens of
   * nanoseconds: a short spin avoids two system calls. */
  for (int i = 0; i < 100; i++) {
    int expected = 0;
    if (atomic_compare_exchange_weak_explicit(&l->state, &expected, 1, memory_order_acquire, memory_order_relaxed))
      return;
    if (expected == 2)
      break;
    pause_briefly();
  }
  int c = atomic_exchange_explicit(&l->state, 2, memory_order_acquire);
  while (c != 0) {
    syscall(SYS_futex, &l->state, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
    c = atomic_exchange_explicit(&l->state, 2, memory_order_acquire);
  }
}

void cuemm__lock_wake(cuemm__lock *l)
{
  atomic_store_explicit(&l->state, 0, memory_order_release);
  syscall(SYS_futex, &l->state, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}
