/* nvtx.h: pool blocks annotated for tools that read NVTX's memory API
 * (compute-sanitizer's memcheck), internal interface.
 *
 * With a tool attached and cuemm_config.nvtx set, every mapped chunk of the
 * pool is registered with the tool as a sub-allocator heap, and every block
 * the pool hands out as a region of the bytes the program asked for, so
 * that the tool reports an access outside the live blocks even when it
 * stays inside mapped pool memory.  Without a tool a pool's `nvtx` is NULL
 * and each hook below costs one predicted branch on it.
 *
 * The hooks are called where the pool's memory changes hands: chunks
 * mapped, released and the pool destroyed (pool.c, and vacate.c
 * around a suspension), a block handed to the program and given up by it
 * (manager.c for cuemm_alloc and the flush, stream.c for the
 * stream-ordered path).  Giving up a block that is not
 * registered (a cached block of the stream-ordered path that a flush
 * returns, or one given up twice) is a no-op, so every place where a block
 * stops being the program's may call it.  They may be called concurrently
 * for one pool (the stream-ordered fast paths hold no manager lock): the
 * per-pool state has a lock of its own.
 *
 * This file sits below the pool and knows nothing of its records: the
 * pool describes its address range once (base, unit, size) and then each
 * chunk as it is mapped and unmapped, and the per-pool state keeps what
 * it needs of that (the chunk each unit lies in, and its heap), so that a
 * block is split into per-chunk regions without asking the pool.
 */
#ifndef CUEMM_NVTX_H
#define CUEMM_NVTX_H

#include <stddef.h>
#include <stdint.h>

#include "base/internal.h"

struct cuemm__nvtx_pool;

/* Loads the tool once per process: the library NVTX_INJECTION64_PATH
 * names, through the entry points the NVTX 3 headers call
 * (InitializeInjectionNvtx2, InitializeInjectionNvtxExtension).  Returns 1
 * when a tool took the memory extension, 0 otherwise (nothing set, the file
 * does not load, an entry point is missing or returns 0, or the tool left
 * a function cuemm needs empty); nothing is reported, and a failed load is
 * not tried again. */
int cuemm__nvtx_start(void);

/* The per-pool state for a new pool, or NULL without a tool (then the
 * pool is never annotated).  The pool's address range is `reserved` bytes
 * from `base`, in units of `unit` bytes (whole units only), each chunk a
 * run of units; with `slab` the range is one allocation already and
 * becomes one heap now.  Called by cuemm__pool_create in the pool's
 * context, which the state keeps: the tool is told of memory with it
 * current (through `drv`). */
struct cuemm__nvtx_pool *cuemm__nvtx_pool_new(const cuemm__driver_table *drv, CUdeviceptr base, size_t reserved,
                                              size_t unit, int slab);

/* The slow halves of the hooks; call the inline ones. */
void cuemm__nvtx_chunk_mapped_(struct cuemm__nvtx_pool *np, CUdeviceptr at, size_t bytes);
void cuemm__nvtx_chunk_unmapping_(struct cuemm__nvtx_pool *np, CUdeviceptr at);
void cuemm__nvtx_pool_gone_(struct cuemm__nvtx_pool *np, int tell_tool);
void cuemm__nvtx_live_(struct cuemm__nvtx_pool *np, uintptr_t ptr, size_t size);
void cuemm__nvtx_dead_(struct cuemm__nvtx_pool *np, uintptr_t ptr);

/* The chunk of `bytes` at `at` (whole units from a unit boundary) is
 * mapped and accessible: it becomes a heap, unless it is one already. */
static inline void cuemm__nvtx_chunk_mapped(struct cuemm__nvtx_pool *np, CUdeviceptr at, size_t bytes)
{
  if (__builtin_expect(np != NULL, 0))
    cuemm__nvtx_chunk_mapped_(np, at, bytes);
}

/* The chunk at `at`, wholly free, is about to be unmapped: its heap goes
 * (cuemm__nvtx_chunk_mapped brings it back if the unmap fails). */
static inline void cuemm__nvtx_chunk_unmapping(struct cuemm__nvtx_pool *np, CUdeviceptr at)
{
  if (__builtin_expect(np != NULL, 0))
    cuemm__nvtx_chunk_unmapping_(np, at);
}

/* The pool is being destroyed: every heap goes (told to the tool only with
 * `tell_tool`: an abandoned manager's memory went with its context), and
 * the state is freed; the caller forgets it. */
static inline void cuemm__nvtx_pool_gone(struct cuemm__nvtx_pool *np, int tell_tool)
{
  if (__builtin_expect(np != NULL, 0))
    cuemm__nvtx_pool_gone_(np, tell_tool);
}

/* The block at `ptr` is handed to the program for `size` bytes (what it
 * asked for, not the block's rounded size). */
static inline void cuemm__nvtx_live(struct cuemm__nvtx_pool *np, uintptr_t ptr, size_t size)
{
  if (__builtin_expect(np != NULL, 0))
    cuemm__nvtx_live_(np, ptr, size);
}

/* The block at `ptr` is no longer the program's. */
static inline void cuemm__nvtx_dead(struct cuemm__nvtx_pool *np, uintptr_t ptr)
{
  if (__builtin_expect(np != NULL, 0))
    cuemm__nvtx_dead_(np, ptr);
}

#endif
