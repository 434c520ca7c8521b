/* test-heap-entry.c: how threads enter a thread heap (src/stream/heap.h, with the
 * asymmetric fences of src/base/fence.c): the owner's entry and others' locks
 * exclude each other under load, in both of the owner's modes; the owner's
 * own lock raises no flag; other threads' heavy fences are counted and,
 * past CUEMM__HEAP_HEAVY_MAX, make the owner switch to a full fence at its
 * next entry; a thread that adopts the heap starts afresh.  Built from
 * src/stream/heap.c, src/base/fence.c and src/base/lock.c directly: no driver involved.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/fence.h"
#include "stream/heap.h"
#include "tap.h"

static cuemm__heap h;

/* ---- mutual exclusion under load ------------------------------------------ */

#define OWNER_ROUNDS 2000000L
#define OTHER_ROUNDS 10000L

/* Plain, unsynchronized counters: only one side is ever inside.  Each round
 * reads, then writes back one more, with a moment between, so that two
 * sides inside at once lose counts. */
static volatile long inside_count;
static volatile int inside;
static int overlap;
static int keep_asym; /* the other side resets the heavy count, so the mode stays asymmetric */

static void critical(void)
{
  if (inside)
    overlap = 1;
  inside = 1;
  long v = inside_count;
  for (volatile int k = 0; k < 3; k++)
    ;
  inside_count = v + 1;
  inside = 0;
}

static void owner_loop(void)
{
  for (long i = 0; i < OWNER_ROUNDS; i++) {
    if (cuemm__heap_enter(&h)) {
      critical();
      cuemm__heap_leave(&h);
    } else {
      cuemm__heap_lock(&h);
      critical();
      cuemm__heap_unlock(&h);
    }
  }
}

static void *other_main(void *arg)
{
  (void)arg;
  for (long i = 0; i < OTHER_ROUNDS; i++) {
    cuemm__heap_lock(&h);
    critical();
    if (keep_asym)
      h.heavy = 0;
    cuemm__heap_unlock(&h);
  }
  return NULL;
}

/* The main thread owns the heap and runs the owner's side. */
static void exclusion(int asym)
{
  cuemm__heap_init(&h, NULL, 0);
  keep_asym = asym;
  inside_count = 0;
  overlap = 0;
  if (!asym)
    h.asym = 0;
  pthread_t x;
  pthread_create(&x, NULL, other_main, NULL);
  owner_loop();
  pthread_join(x, NULL);
  const char *mode = asym ? "compiler barrier on the owner's side, heavy fences on the other's" : "full fences on both";
  is(inside_count, OWNER_ROUNDS + OTHER_ROUNDS, "%s: no entry lost (%ld of %ld)", mode, (long)inside_count,
     OWNER_ROUNDS + OTHER_ROUNDS);
  ok(!overlap, "%s: never both inside", mode);
  is(h.asym, asym && cuemm__fence_asymmetric(), "%s: the mode held", mode);
  cuemm__heap_fini(&h);
}

/* ---- the counting and the switch ---------------------------------------- */

static void *lock_once(void *arg)
{
  cuemm__heap *x = arg;
  cuemm__heap_lock(x);
  cuemm__heap_unlock(x);
  return NULL;
}

static void other_locks(cuemm__heap *x, unsigned n)
{
  for (unsigned i = 0; i < n; i++) {
    pthread_t t;
    pthread_create(&t, NULL, lock_once, x);
    pthread_join(t, NULL);
  }
}

static void *adopt(void *arg)
{
  cuemm__heap *x = arg;
  cuemm__heap_own(x);
  return NULL;
}

static void switching(void)
{
  cuemm__heap_init(&h, NULL, 0);
  ok(h.owner == cuemm__fence_self(), "the thread that makes a heap owns it");
  cuemm__heap_lock(&h);
  is(atomic_load(&h.want), 0, "the owner's own lock raises no want");
  ok(cuemm__heap_enter(&h), "so its fast path would not be turned away (it is the same thread)");
  cuemm__heap_leave(&h);
  cuemm__heap_unlock(&h);
  is(h.heavy, 0, "the owner's lock paid no heavy fence");

  if (!cuemm__fence_asymmetric()) {
    /* ThreadSanitizer builds, old kernels: full fences from the start. */
    skip(10, "no asymmetric fences here: nothing to count or switch");
  } else {
    other_locks(&h, CUEMM__HEAP_HEAVY_MAX - 1);
    is(h.heavy, CUEMM__HEAP_HEAVY_MAX - 1, "each other thread's lock paid a heavy fence (%u)", h.heavy);
    is(atomic_load(&h.want), 0, "below the bound: no request, no want left raised");
    ok(cuemm__heap_enter(&h), "the owner enters on its fast path");
    cuemm__heap_leave(&h);
    other_locks(&h, 1);
    is(atomic_load(&h.want), CUEMM__HEAP_WANT_FULL, "at the bound the owner is asked for full fences");
    ok(!cuemm__heap_enter(&h), "which turns its fast path away once");
    ok(h.asym, "still asymmetric until the owner takes the lock");
    cuemm__heap_lock(&h);
    ok(!h.asym, "the owner's lock switches it to full fences");
    cuemm__heap_unlock(&h);
    is(atomic_load(&h.want), 0, "and clears the request");
    ok(cuemm__heap_enter(&h), "its fast path enters again, with an exchange now");
    cuemm__heap_leave(&h);
    unsigned heavy = h.heavy;
    other_locks(&h, 3);
    is(h.heavy, heavy, "other threads pay no heavy fence any more");
  }

  pthread_t t;
  pthread_create(&t, NULL, adopt, &h);
  pthread_join(t, NULL);
  ok(h.owner != cuemm__fence_self(), "a thread that adopts the heap owns it");
  is(h.asym, cuemm__fence_asymmetric(), "and starts in the mode a new heap has");
  is(h.heavy, 0, "with no heavy fences counted");
  cuemm__heap_lock(&h); /* the main thread is another thread now */
  is(atomic_load(&h.want), CUEMM__HEAP_WANT_LOCK, "the former owner's lock raises want like anyone's");
  cuemm__heap_unlock(&h);
  is(h.heavy, cuemm__fence_asymmetric() ? 1u : 0u, "and pays a heavy fence where the fences are asymmetric");
  cuemm__heap_fini(&h);
}

/* A forked child starts without the membarrier registration: a heavy fence
 * there registers again, or falls back to the page's protection. */
static void forked(void)
{
  if (!cuemm__fence_asymmetric()) {
    skip(1, "no asymmetric fences here");
    return;
  }
  pid_t pid = fork();
  if (pid == 0) {
    for (int i = 0; i < 3; i++)
      cuemm__fence_heavy();
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ok(WIFEXITED(status) && WEXITSTATUS(status) == 0, "heavy fences in a forked child return");
}

int main(void)
{
  tap_plan(26);
  tap_diag("asymmetric fences %s", cuemm__fence_asymmetric() ? "available (membarrier)" : "not available: full fences");
  switching();
  exclusion(1);
  exclusion(0);
  forked();
  return tap_done();
}
