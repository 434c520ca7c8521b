/* sim-ipc.c: legacy CUDA IPC (cuIpcGetMemHandle / cuIpcOpenMemHandle).
 *
 * A device allocation is a memfd that its process keeps open, so the 64-byte
 * handle only has to say where to find it: the exporter's pid and descriptor
 * number.  The importer opens /proc/<pid>/fd/<n> (allowed between processes
 * of one user) and maps it MAP_SHARED, so both processes see the same pages.
 * The handle also carries the memfd's inode, which tells a stale handle (the
 * allocation was freed and the descriptor number reused) from a live one, and
 * a magic that tells garbage from a handle.
 *
 * Opening follows the real driver: the exporting process itself cannot open
 * its own handle (CUDA_ERROR_INVALID_CONTEXT), and opening a handle the
 * current context already opened returns the same pointer with a reference
 * count that cuIpcCloseMemHandle decrements.  Imported memory does not count
 * against the importer's capacity: it is the exporter's.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sim-internal.h"

#define IPC_MAGIC "SIMCUIPC"

struct ipc_wire {
  char magic[8];
  int32_t pid;
  int32_t fd;
  int32_t dev;
  int32_t reserved;
  uint64_t ino;
  uint64_t size;
  uint64_t map_size;
  uint64_t buffer_id;
};

_Static_assert(sizeof(struct ipc_wire) <= CU_IPC_HANDLE_SIZE, "IPC handle too large");

static CUresult ipc_get(CUipcMemHandle *handle, CUdeviceptr dptr)
{
  if (!handle)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r;
  if (!sim_ctx_current(&r))
    return r;
  struct sim_region *reg = sim_region_find((uintptr_t)dptr);
  /* Pool (cuMemAllocAsync) and VMM memory have their own sharing APIs; the
   * real driver refuses them here too. */
  if (!reg || reg->kind != SIM_R_DEVICE || reg->async)
    return CUDA_ERROR_INVALID_VALUE;
  struct ipc_wire w;
  memset(&w, 0, sizeof w);
  memcpy(w.magic, IPC_MAGIC, sizeof w.magic);
  w.pid = (int32_t)getpid();
  w.fd = reg->fd;
  w.dev = reg->dev;
  w.ino = (uint64_t)reg->ino;
  w.size = reg->size;
  w.map_size = reg->map_size;
  w.buffer_id = reg->buffer_id;
  memset(handle, 0, sizeof *handle);
  memcpy(handle->reserved, &w, sizeof w);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
  SIM_BEGIN(cuIpcGetMemHandle);
  return SIM_END(ipc_get(pHandle, dptr));
}

static CUresult ipc_open(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned flags)
{
  if (!pdptr || (flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r;
  struct sim_ctx *c = sim_ctx_current(&r);
  if (!c)
    return r;
  struct ipc_wire w;
  memcpy(&w, handle.reserved, sizeof w);
  if (memcmp(w.magic, IPC_MAGIC, sizeof w.magic) != 0 || w.pid <= 0 || w.fd < 0 || w.size == 0 ||
      w.map_size < w.size || !sim_valid_device(w.dev))
    return CUDA_ERROR_INVALID_VALUE;
  if (w.pid == (int32_t)getpid())
    return CUDA_ERROR_INVALID_CONTEXT;
  for (struct sim_region *reg = sim_region_first(); reg; reg = reg->next)
    if (reg->kind == SIM_R_IPC && reg->ipc_pid == w.pid && (uint64_t)reg->ino == w.ino &&
        reg->dev == w.dev) {
      if (reg->ctx != c || reg->ctx_id != c->id)
        return CUDA_ERROR_INVALID_CONTEXT;
      reg->refs++;
      *pdptr = (CUdeviceptr)reg->base;
      return CUDA_SUCCESS;
    }
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)w.pid, (int)w.fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0)
    return CUDA_ERROR_INVALID_VALUE;
  struct stat st;
  if (fstat(fd, &st) != 0 || (uint64_t)st.st_ino != w.ino || (uint64_t)st.st_size < w.map_size) {
    close(fd);
    return CUDA_ERROR_INVALID_VALUE;
  }
  void *p = mmap(NULL, w.map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED)
    return CUDA_ERROR_MAP_FAILED;
  struct sim_region *reg = sim_region_new(SIM_R_IPC, (uintptr_t)p, w.size);
  if (!reg) {
    munmap(p, w.map_size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  reg->map_size = w.map_size;
  reg->dev = w.dev;
  reg->ctx = c;
  reg->ctx_id = c->id;
  reg->ino = (ino_t)w.ino;
  reg->ipc_pid = w.pid;
  reg->refs = 1;
  *pdptr = (CUdeviceptr)reg->base;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
  SIM_BEGIN(cuIpcOpenMemHandle);
  return SIM_END(ipc_open(pdptr, handle, Flags));
}

static CUresult ipc_close(CUdeviceptr dptr)
{
  CUresult r;
  if (!sim_ctx_current(&r))
    return r;
  struct sim_region *reg = sim_region_find((uintptr_t)dptr);
  if (!reg || reg->kind != SIM_R_IPC || reg->base != (uintptr_t)dptr)
    return CUDA_ERROR_INVALID_VALUE;
  if (--reg->refs > 0)
    return CUDA_SUCCESS;
  sim_region_unlink(reg);
  munmap((void *)reg->base, reg->map_size);
  free(reg);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
  SIM_BEGIN(cuIpcCloseMemHandle);
  return SIM_END(ipc_close(dptr));
}
