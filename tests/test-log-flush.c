/* test-log-flush.c: cuemm_log_flush writes the rows other threads still
 * hold while they run, which is what lets a tool collect the logs of
 * processes that go on working (cuemm.dask.gather_logs).
 *
 * A thread allocates and frees on a manager with a log and then waits, alive,
 * with its rows in its buffer: the file holds the header alone; after
 * cuemm_log_flush from the main thread it holds every row, in the thread's
 * order; a second flush adds nothing; rows written after it arrive with the
 * next flush.  A manager without a log and a NULL manager.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

static cuemm_manager *m;
static CUcontext ctx;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int stage; /* 1: the thread's rows are made; 2: the main thread is done */

static void *worker(void *arg)
{
  (void)arg;
  CHECK_CU(cuCtxSetCurrent(ctx));
  CUdeviceptr p[3];
  for (int i = 0; i < 3; i++)
    CHECK_CU(cuemm_allocate(m, 4096 * (size_t)(i + 1), &p[i]));
  CHECK_CU(cuemm_free(m, p[1]));
  pthread_mutex_lock(&mu);
  stage = 1;
  pthread_cond_broadcast(&cv);
  while (stage != 2)
    pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
  CHECK_CU(cuemm_free(m, p[0]));
  CHECK_CU(cuemm_free(m, p[2]));
  return NULL;
}

/* Lines of the file, and the Call column of each row (after the header). */
static int read_rows(const char *path, char calls[][16], int max)
{
  FILE *f = fopen(path, "r");
  if (!f)
    return -1;
  char line[512];
  int n = 0;
  while (fgets(line, sizeof line, f)) {
    if (n > 0 && n - 1 < max) {
      /* Thread,Time,Action,Pointer,Size,Stream,Seq,Manager,Call,... */
      char *c = line;
      for (int k = 0; k < 8 && c; k++)
        c = strchr(c, ',') ? strchr(c, ',') + 1 : NULL;
      char *end = c ? strchr(c, ',') : NULL;
      if (c && end && end - c < 16) {
        memcpy(calls[n - 1], c, (size_t)(end - c));
        calls[n - 1][end - c] = 0;
      } else {
        calls[n - 1][0] = 0;
      }
    }
    n++;
  }
  fclose(f);
  return n;
}

int main(void)
{
  sim_init();
  tap_plan(11);
  ctx = test_primary_context(0);
  char path[] = "/tmp/cuemm-test-log-flush-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) {
    printf("Bail out! mkstemp failed\n");
    return 1;
  }
  close(fd);
  cuemm_config c = test_config(1000, 1.0);
  c.log_file = path;
  CHECK_CU(cuemm_manager_create(NULL, &c, &m));

  pthread_t t;
  pthread_create(&t, NULL, worker, NULL);
  pthread_mutex_lock(&mu);
  while (stage != 1)
    pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);

  char calls[8][16];
  is(read_rows(path, calls, 8), 1, "while the thread runs, its rows are in its buffer: the header alone");
  is(cuemm_log_flush(m), CUDA_SUCCESS, "cuemm_log_flush from another thread");
  is(read_rows(path, calls, 8), 5, "then the file holds the header and the thread's 4 rows");
  ok(strcmp(calls[0], "alloc") == 0 && strcmp(calls[2], "alloc") == 0 && strcmp(calls[3], "free") == 0,
     "in the thread's order (%s, %s, %s, %s)", calls[0], calls[1], calls[2], calls[3]);
  is(cuemm_log_flush(m), CUDA_SUCCESS, "a second flush");
  is(read_rows(path, calls, 8), 5, "adds nothing");

  pthread_mutex_lock(&mu);
  stage = 2;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
  pthread_join(t, NULL);
  CHECK_CU(cuemm_log_flush(m));
  is(read_rows(path, calls, 8), 7, "the rows written after it arrive with the next");

  is(cuemm_log_flush(NULL), CUDA_ERROR_INVALID_VALUE, "a NULL manager refused");
  like(cuemm_last_error(), "cuemm_log_flush: manager is NULL", "with a message");
  CHECK_CU(cuemm_destroy(m));
  is(read_rows(path, calls, 8), 7, "destroy leaves the same file");
  cuemm_manager *plain;
  cuemm_config pc = test_config(1000, 1.0);
  pc.log_file = NULL;
  CHECK_CU(cuemm_manager_create(NULL, &pc, &plain));
  is(cuemm_log_flush(plain), CUDA_SUCCESS, "a manager without a log: nothing to do");
  CHECK_CU(cuemm_destroy(plain));
  unlink(path);
  test_release_primary(0);
  return tap_done();
}
