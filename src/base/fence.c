/* fence.c: owns the rare side of the asymmetric fences (fence.h): whether
 * this process can have them (membarrier registered, once, and the
 * fallback's page mapped up front, so that a heavy fence never fails; none
 * under ThreadSanitizer), the heavy fence itself (membarrier, or the TLB
 * shootdown of a page whose write access is taken away), and the token
 * that names the calling thread (cuemm__fence_self).  The frequent side
 * is a compiler barrier, inline in its callers.
 */
#include "base/fence.h"

#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__SANITIZE_THREAD__)
#define FENCE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FENCE_TSAN 1
#endif
#endif

/* From linux/membarrier.h, which older headers lack. */
#define MB_QUERY 0
#define MB_PRIVATE_EXPEDITED (1 << 3)
#define MB_REGISTER_PRIVATE_EXPEDITED (1 << 4)

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int available;
static void *page;  /* the fallback's page */
static long page_size;
static pthread_mutex_t page_lock = PTHREAD_MUTEX_INITIALIZER;

static long membarrier(int cmd)
{
#ifdef SYS_membarrier
  return syscall(SYS_membarrier, cmd, 0, 0);
#else
  (void)cmd;
  return -1;
#endif
}

static void init(void)
{
#ifdef FENCE_TSAN
  return;
#else
  page_size = sysconf(_SC_PAGESIZE);
  if (page_size <= 0)
    return;
  /* The fallback's page is made up front, so that a heavy fence never fails. */
  void *p = mmap(NULL, (size_t)page_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return;
  long q = membarrier(MB_QUERY);
  if (q < 0 || !(q & MB_PRIVATE_EXPEDITED) || membarrier(MB_REGISTER_PRIVATE_EXPEDITED) != 0) {
    munmap(p, (size_t)page_size);
    return;
  }
  page = p;
  available = 1;
#endif
}

int cuemm__fence_asymmetric(void)
{
  pthread_once(&once, init);
  return available;
}

void cuemm__fence_heavy(void)
{
  if (membarrier(MB_PRIVATE_EXPEDITED) == 0)
    return;
  /* Refused: register (a forked child starts unregistered) and try again. */
  if (membarrier(MB_REGISTER_PRIVATE_EXPEDITED) == 0 && membarrier(MB_PRIVATE_EXPEDITED) == 0)
    return;
  /* Taking write access from a page every processor may hold in its TLB
   * interrupts each processor running the process: a full fence there. */
  pthread_mutex_lock(&page_lock);
  mprotect(page, (size_t)page_size, PROT_READ | PROT_WRITE);
  *(volatile char *)page = 1;
  mprotect(page, (size_t)page_size, PROT_READ);
  pthread_mutex_unlock(&page_lock);
}

static _Thread_local char token;

const void *cuemm__fence_self(void)
{
  return &token;
}
