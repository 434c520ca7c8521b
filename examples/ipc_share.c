/* ipc_share.c: two processes share one device buffer, with no copy.
 *
 * The producer allocates 1 MiB, fills it, and exports a slice in the middle
 * (an interior pointer, as Numba exports slices).  It starts the consumer --
 * this same program, run again with fork and exec -- and sends it the handle
 * as 128 bytes over a pipe.  The consumer checks the bytes it received,
 * opens the handle, reads the producer's data through its own pointer, adds 1
 * to every byte of the slice, closes the handle and answers over a second
 * pipe.  The producer then reads the consumer's writes from its own pointer.
 *
 * The producer keeps its allocation alive until the consumer has answered:
 * cuemm cannot see into another process, so that ordering is the program's.
 *
 * Build: cc ipc_share.c -lcuemm -lcuda.  Run: ./ipc_share (no arguments).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda.h>
#include <cuemm.h>

#define CHECK(call)                                                            \
  do {                                                                         \
    CUresult r_ = (call);                                                      \
    if (r_ != CUDA_SUCCESS) {                                                  \
      fprintf(stderr, "ipc_share[%s]: %s failed (%d): %s\n", role, #call,      \
              (int)r_, cuemm_last_error());                                    \
      return 1;                                                                \
    }                                                                          \
  } while (0)

enum { BYTES = 1 << 20, OFFSET = 4096 * 3 + 100, SLICE = 64 * 1024 };

static const char *role = "producer";

static int read_full(int fd, void *buf, size_t n)
{
  for (unsigned char *b = buf; n;) {
    ssize_t got = read(fd, b, n);
    if (got <= 0)
      return -1;
    b += got;
    n -= (size_t)got;
  }
  return 0;
}

static int write_full(int fd, const void *buf, size_t n)
{
  for (const unsigned char *b = buf; n;) {
    ssize_t put = write(fd, b, n);
    if (put <= 0)
      return -1;
    b += put;
    n -= (size_t)put;
  }
  return 0;
}

static uint8_t value_at(size_t i)
{
  return (uint8_t)(i % 251);
}

static int primary_context(void)
{
  CUdevice dev;
  CUcontext ctx;
  CHECK(cuemm_driver_load());
  CHECK(cuDeviceGet(&dev, 0));
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  return 0;
}

static int consumer(int rfd, int wfd)
{
  role = "consumer";
  if (primary_context() != 0)
    return 1;
  unsigned char bytes[CUEMM_IPC_HANDLE_SIZE];
  if (read_full(rfd, bytes, sizeof bytes) != 0) {
    fprintf(stderr, "ipc_share[consumer]: the handle did not arrive\n");
    return 1;
  }
  cuemm_ipc_handle h;
  CHECK(cuemm_ipc_handle_parse(bytes, sizeof bytes, &h));
  CUdeviceptr p;
  CHECK(cuemm_ipc_open(NULL, &h, &p)); /* NULL: the current context's manager */

  unsigned char *host = malloc(h.size);
  CHECK(cuMemcpyDtoH(host, p, h.size));
  size_t wrong = 0;
  for (size_t i = 0; i < h.size; i++) {
    wrong += host[i] != value_at(h.offset + i);
    host[i]++;
  }
  CHECK(cuMemcpyHtoD(p, host, h.size));
  free(host);
  CHECK(cuemm_ipc_close(NULL, p)); /* unmaps at once; the memory stays the producer's */
  printf("consumer: opened %llu bytes at offset %llu from pid %u, %zu wrong, added 1 to each\n",
         (unsigned long long)h.size, (unsigned long long)h.offset, (unsigned)h.source_pid, wrong);
  fflush(stdout);
  int32_t answer = wrong == 0 ? 0 : 1;
  return write_full(wfd, &answer, sizeof answer) == 0 && answer == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
  if (argc == 4 && strcmp(argv[1], "--consumer") == 0)
    return consumer(atoi(argv[2]), atoi(argv[3]));

  if (primary_context() != 0)
    return 1;
  cuemm_manager *m;
  CHECK(cuemm_get(&m));
  CUdeviceptr buf;
  CHECK(cuemm_allocate(m, BYTES, &buf));
  unsigned char *host = malloc(BYTES);
  for (size_t i = 0; i < BYTES; i++)
    host[i] = value_at(i);
  CHECK(cuMemcpyHtoD(buf, host, BYTES));

  cuemm_ipc_handle h;
  CHECK(cuemm_ipc_export(m, buf + OFFSET, SLICE, &h));
  printf("producer: exported %d bytes at offset %d of a %d-byte allocation\n", SLICE, OFFSET, BYTES);
  fflush(stdout);

  int down[2], up[2];
  if (pipe(down) != 0 || pipe(up) != 0)
    return 1;
  pid_t pid = fork();
  if (pid == 0) {
    close(down[1]);
    close(up[0]);
    char rfd[16], wfd[16];
    snprintf(rfd, sizeof rfd, "%d", down[0]);
    snprintf(wfd, sizeof wfd, "%d", up[1]);
    execl("/proc/self/exe", argv[0], "--consumer", rfd, wfd, (char *)NULL);
    execl(argv[0], argv[0], "--consumer", rfd, wfd, (char *)NULL);
    _exit(127);
  }
  close(down[0]);
  close(up[1]);
  int32_t answer = -1;
  if (pid < 0 || write_full(down[1], &h, sizeof h) != 0 || read_full(up[0], &answer, sizeof answer) != 0) {
    fprintf(stderr, "ipc_share[producer]: the consumer did not answer\n");
    return 1;
  }
  int status = 0;
  waitpid(pid, &status, 0);

  CHECK(cuMemcpyDtoH(host, buf, BYTES));
  size_t changed = 0, wrong = 0;
  for (size_t i = 0; i < BYTES; i++) {
    int in_slice = i >= OFFSET && i < OFFSET + SLICE;
    uint8_t want = (uint8_t)(value_at(i) + (in_slice ? 1 : 0));
    wrong += host[i] != want;
    changed += in_slice && host[i] == want;
  }
  free(host);
  printf("producer: the consumer changed %zu bytes of the slice, %zu bytes are not as expected\n", changed, wrong);
  CHECK(cuemm_free(m, buf)); /* only now: the consumer has closed its mapping */
  CHECK(cuemm_destroy(m));
  int ok = answer == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0 && wrong == 0 && changed == SLICE;
  printf("%s\n", ok ? "shared both ways: OK" : "FAILED");
  return ok ? 0 : 1;
}
