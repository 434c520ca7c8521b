/* gpu-nvtx-oob.c: the GPU proof of the NVTX annotations (src/trace/nvtx.c), run
 * by scripts/gpu-nvtx.sh under compute-sanitizer's memcheck.
 *
 * A manager with the pool (CUEMM_POOL=vmm; CUEMM_NVTX from the
 * environment) hands out a block of 1000 bytes; a kernel, loaded from the
 * PTX below with cuModuleLoadDataEx, writes one 4-byte element at offset
 * 1000: past the block, but inside its 256-byte rounding and inside the
 * mapped chunk, so memcheck, which knows the chunk as an allocation,
 * reports it only when the block is registered as a region of 1000 bytes.
 *
 * With --control the block comes from cuMemAlloc instead (1000 bytes, no
 * manager): memcheck reports that write by itself, which shows that this
 * kernel's writes are checked at all when the pool's are not reported.
 *
 * Prints what it did (the block, the chunk, the address written, the
 * NVTX_INJECTION64_PATH the tool set) and the result of the
 * synchronization (under memcheck, a reported error may make it fail,
 * which is expected).  Exit status: 0 once the kernel was
 * launched and waited for, whatever the synchronization returned; 77 when
 * the driver cannot load modules (simcuda: the suite builds the program,
 * it cannot run it); 1 when something before the launch failed.  The
 * module entry points are looked up at run time, so the program starts on
 * a driver without them.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>
#include <cuemm.h>

/* out[offset / 4] = 42, in one thread; offset in bytes. */
static const char ptx[] =
  ".version 7.0\n"
  ".target sm_75\n"
  ".address_size 64\n"
  "\n"
  ".visible .entry oob_write(\n"
  "  .param .u64 p_out,\n"
  "  .param .u64 p_offset\n"
  ")\n"
  "{\n"
  "  .reg .b32 %r<2>;\n"
  "  .reg .b64 %rd<4>;\n"
  "  ld.param.u64 %rd1, [p_out];\n"
  "  ld.param.u64 %rd2, [p_offset];\n"
  "  cvta.to.global.u64 %rd1, %rd1;\n"
  "  add.s64 %rd3, %rd1, %rd2;\n"
  "  mov.u32 %r1, 42;\n"
  "  st.global.u32 [%rd3], %r1;\n"
  "  ret;\n"
  "}\n";

#define BLOCK 1000

typedef CUresult (*load_fn)(CUmodule *, const void *, unsigned int, CUjit_option *, void **);
typedef CUresult (*get_function_fn)(CUfunction *, CUmodule, const char *);
typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void **, void **);
typedef CUresult (*unload_fn)(CUmodule);

static int fail(const char *what, CUresult r)
{
  fprintf(stderr, "gpu-nvtx-oob: %s failed (%d): %s\n", what, (int)r, cuemm_last_error());
  return 1;
}

int main(int argc, char **argv)
{
  int control = argc > 1 && strcmp(argv[1], "--control") == 0;
  CUresult r;
  if ((r = cuemm_driver_load()) != CUDA_SUCCESS)
    return fail("cuemm_driver_load", r);
  load_fn load = (load_fn)dlsym(RTLD_DEFAULT, "cuModuleLoadDataEx");
  get_function_fn get_function = (get_function_fn)dlsym(RTLD_DEFAULT, "cuModuleGetFunction");
  launch_fn launch = (launch_fn)dlsym(RTLD_DEFAULT, "cuLaunchKernel");
  unload_fn unload = (unload_fn)dlsym(RTLD_DEFAULT, "cuModuleUnload");
  if (!load || !get_function || !launch || !unload) {
    printf("gpu-nvtx-oob: skipped: the driver cannot load modules (no cuModuleLoadDataEx or cuLaunchKernel)\n");
    return 77;
  }

  CUdevice dev;
  CUcontext ctx;
  if ((r = cuDeviceGet(&dev, 0)) != CUDA_SUCCESS)
    return fail("cuDeviceGet", r);
  if ((r = cuDevicePrimaryCtxRetain(&ctx, dev)) != CUDA_SUCCESS)
    return fail("cuDevicePrimaryCtxRetain", r);
  if ((r = cuCtxSetCurrent(ctx)) != CUDA_SUCCESS)
    return fail("cuCtxSetCurrent", r);

  cuemm_config c;
  if ((r = cuemm_config_init(&c)) != CUDA_SUCCESS)
    return fail("cuemm_config_init", r);
  c.pool = CUEMM_POOL_VMM;
  cuemm_manager *m = NULL;
  CUdeviceptr p;
  cuemm_pool_stats ps = { 0 };
  if (control) {
    if ((r = cuMemAlloc(&p, BLOCK)) != CUDA_SUCCESS)
      return fail("cuMemAlloc", r);
  } else {
    if ((r = cuemm_manager_create(NULL, &c, &m)) != CUDA_SUCCESS)
      return fail("cuemm_create", r);
    if ((r = cuemm_allocate(m, BLOCK, &p)) != CUDA_SUCCESS)
      return fail("cuemm_alloc", r);
    if ((r = cuemm_pool_get_stats(m, &ps)) != CUDA_SUCCESS)
      return fail("cuemm_pool_get_stats", r);
  }

  char log[4096] = "";
  CUjit_option opts[] = { CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES };
  void *vals[] = { log, (void *)(uintptr_t)sizeof log };
  CUmodule mod;
  if ((r = load(&mod, ptx, 2, opts, vals)) != CUDA_SUCCESS) {
    fprintf(stderr, "gpu-nvtx-oob: the JIT said: %s\n", log);
    return fail("cuModuleLoadDataEx", r);
  }
  CUfunction f;
  if ((r = get_function(&f, mod, "oob_write")) != CUDA_SUCCESS)
    return fail("cuModuleGetFunction(oob_write)", r);

  unsigned long long offset = BLOCK;
  const char *inj = getenv("NVTX_INJECTION64_PATH");
  printf("gpu-nvtx-oob: NVTX_INJECTION64_PATH=%s\n", inj ? inj : "(unset)");
  if (control)
    printf("gpu-nvtx-oob: control: block 0x%llx of %d bytes from cuMemAlloc; writing 4 bytes at 0x%llx (block + "
           "%llu)\n", (unsigned long long)p, BLOCK, (unsigned long long)(p + offset), offset);
  else
    printf("gpu-nvtx-oob: CUEMM_NVTX=%d; block 0x%llx of %d bytes in a pool of %zu mapped bytes at 0x%llx; "
           "writing 4 bytes at 0x%llx (block + %llu)\n", c.nvtx, (unsigned long long)p, BLOCK, ps.mapped_bytes,
           (unsigned long long)ps.base, (unsigned long long)(p + offset), offset);
  fflush(stdout);
  void *args[] = { &p, &offset };
  if ((r = launch(f, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL)) != CUDA_SUCCESS)
    return fail("cuLaunchKernel", r);
  CUresult sync = cuCtxSynchronize();
  printf("gpu-nvtx-oob: launched; cuCtxSynchronize returned %d\n", (int)sync);
  fflush(stdout);

  /* After an error memcheck reported the context may be unusable: the rest
   * is reported, not judged. */
  if ((r = unload(mod)) != CUDA_SUCCESS ||
      (r = control ? cuMemFree(p) : cuemm_free(m, p)) != CUDA_SUCCESS ||
      (m && (r = cuemm_destroy(m)) != CUDA_SUCCESS))
    printf("gpu-nvtx-oob: cleaning up returned %d: %s\n", (int)r, cuemm_last_error());
  cuDevicePrimaryCtxRelease(dev);
  return 0;
}
