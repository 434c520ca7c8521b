/* testproc.h: for the tests that run an importer in a second process and
 * talk to it: whole reads and writes on pipes and sockets, and the IPC
 * handle's checksum to reseal a handle a test has altered. */
#ifndef CUEMM_TESTPROC_H
#define CUEMM_TESTPROC_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include <cuemm.h>

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
