/* fuzz-ipc-recv.c: cuemm_ipc_recv on a socket pair fed with arbitrary bytes
 * and an arbitrary number of file descriptors.
 *
 * Input: byte 0 is the number of descriptors (0 to 31; copies of /dev/null)
 * sent as SCM_RIGHTS, byte 1 where the payload is split into two writes
 * (the descriptors go with the first), the rest is the payload, after which
 * the sender shuts its side.  What must hold: no descriptor stays open
 * after the input, whatever happened (counted in /proc/self/fd); a refused
 * message leaves *h as it was; an accepted one is a handle that
 * cuemm_ipc_handle_parse accepts too, came with one descriptor per
 * chunk for a pool handle (kept: cuemm_ipc_discard closes them) or none for
 * a device handle.
 */
#include <dirent.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cuemm.h"
#include "fuzz.h"

#define MAX_FDS 31
#define MAX_PAYLOAD 4096

static int open_fds(void)
{
  DIR *d = opendir("/proc/self/fd");
  FUZZ_ASSERT(d != NULL, "cannot list /proc/self/fd");
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

static void send_part(int sock, const uint8_t *p, size_t n, const int *fds, unsigned nfds)
{
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int) * MAX_FDS)];
  } ctl;
  struct iovec iov = { (void *)p, n };
  struct msghdr msg;
  memset(&msg, 0, sizeof msg);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (nfds) {
    memset(&ctl, 0, sizeof ctl);
    msg.msg_control = ctl.buf;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
  }
  FUZZ_ASSERT(sendmsg(sock, &msg, 0) == (ssize_t)n, "sendmsg of %zu bytes", n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size < 2 || size - 2 > MAX_PAYLOAD)
    return 0;
  unsigned nfds = data[0] % (MAX_FDS + 1);
  const uint8_t *payload = data + 2;
  size_t n = size - 2, split = n ? data[1] % (n + 1) : 0;
  int before = open_fds();

  int sv[2];
  FUZZ_ASSERT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
  int fds[MAX_FDS];
  for (unsigned i = 0; i < nfds; i++)
    FUZZ_ASSERT((fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0, "open /dev/null");
  /* sendmsg with no bytes carries no descriptors: send one byte at least. */
  if (split == 0 && n > 0 && nfds)
    split = 1;
  if (split > 0 || nfds == 0) {
    if (split > 0)
      send_part(sv[0], payload, split, fds, nfds);
    if (n > split)
      send_part(sv[0], payload + split, n - split, NULL, 0);
  }
  for (unsigned i = 0; i < nfds; i++)
    close(fds[i]);
  shutdown(sv[0], SHUT_WR);

  cuemm_ipc_handle h, before_h;
  memset(&h, 0x5A, sizeof h);
  before_h = h;
  CUresult r = cuemm_ipc_recv(sv[1], &h);
  if (r != CUDA_SUCCESS) {
    FUZZ_ASSERT(memcmp(&h, &before_h, sizeof h) == 0, "a refused message changed *h");
    FUZZ_ASSERT(strstr(cuemm_last_error(), "cuemm_ipc_recv") != NULL, "message: %s", cuemm_last_error());
  } else {
    cuemm_ipc_handle again;
    FUZZ_ASSERT(n >= CUEMM_IPC_HANDLE_SIZE && memcmp(&h, payload, sizeof h) == 0, "received bytes differ");
    FUZZ_ASSERT(cuemm_ipc_handle_parse(&h, sizeof h, &again) == CUDA_SUCCESS, "recv accepted what "
                "from_bytes refuses: %s", cuemm_last_error());
    if (h.kind == CUEMM_IPC_KIND_POOL) {
      FUZZ_ASSERT(nfds == h.pieces.count, "a pool handle of %u chunks accepted with %u descriptors",
                  h.pieces.count, nfds);
      FUZZ_ASSERT(cuemm_ipc_discard(&h) == CUDA_SUCCESS, "discard: %s", cuemm_last_error());
    } else {
      FUZZ_ASSERT(nfds == 0, "a device handle accepted with %u descriptors", nfds);
      FUZZ_ASSERT(cuemm_ipc_discard(&h) == CUDA_ERROR_INVALID_VALUE, "a device handle kept descriptors");
    }
  }
  close(sv[0]);
  close(sv[1]);
  int after = open_fds();
  FUZZ_ASSERT(after == before, "%d descriptors open before, %d after (%u sent, result %d)", before, after, nfds,
              (int)r);
  return 0;
}
