/* testproc.h: for the tests that run an importer in a second process and
 * talk to it: starting this program again as that process, whole reads and
 * writes on pipes and sockets, and the IPC handle's checksum to reseal a
 * handle a test has altered. */
#ifndef CUEMM_TESTPROC_H
#define CUEMM_TESTPROC_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include <cuemm.h>

/* Runs this program again as a child: `argv0 --child FD...` with the
 * descriptors `pass` (which it inherits), after closing `shut` (the
 * parent's ends) there.  Under `make check` argv[0] may be libtool's wrapper
 * script; either one runs the program again.  argv[0] is tried first: under
 * valgrind /proc/self/exe is valgrind's own tool.  Bails the test out when
 * the fork fails; returns the child's pid. */
static inline pid_t spawn_self(const char *argv0, const int *pass, int npass, const int *shut, int nshut)
{
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) {
    printf("Bail out! fork: %s\n", strerror(errno));
    exit(1);
  }
  if (pid > 0)
    return pid;
  for (int i = 0; i < nshut; i++)
    close(shut[i]);
  char num[4][16];
  char *args[8] = { (char *)argv0, (char *)"--child" };
  for (int i = 0; i < npass && i < 4; i++) {
    snprintf(num[i], sizeof num[i], "%d", pass[i]);
    args[2 + i] = num[i];
  }
  args[2 + (npass < 4 ? npass : 4)] = NULL;
  execv(argv0, args);
  execv("/proc/self/exe", args);
  _exit(127);
}

/* 0 once all n bytes are read, -1 on end of file or error. */
static inline int read_full(int fd, void *buf, size_t n)
{
  unsigned char *b = buf;
  while (n) {
    ssize_t got = read(fd, b, n);
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0)
      return -1;
    b += got;
    n -= (size_t)got;
  }
  return 0;
}

/* 0 once all n bytes are written, -1 on error. */
static inline int write_full(int fd, const void *buf, size_t n)
{
  const unsigned char *b = buf;
  while (n) {
    ssize_t put = write(fd, b, n);
    if (put < 0 && errno == EINTR)
      continue;
    if (put <= 0)
      return -1;
    b += put;
    n -= (size_t)put;
  }
  return 0;
}

/* The checksum as include/cuemm.h documents it, computed independently. */
static inline uint32_t fnv1a(const cuemm_ipc_handle *h)
{
  cuemm_ipc_handle c = *h;
  c.checksum = 0;
  const unsigned char *b = (const unsigned char *)&c;
  uint32_t x = 2166136261u;
  for (size_t i = 0; i < sizeof c; i++) {
    x ^= b[i];
    x *= 16777619u;
  }
  return x;
}

static inline void reseal(cuemm_ipc_handle *h)
{
  h->checksum = fnv1a(h);
}

#endif
