/* driver.c: the only code that loads libcuda.
 *
 * cuemm links neither libcuda nor libcudart: a program that uses cuemm must
 * start (and print a useful message) on a machine without a GPU driver, and
 * an operator must be able to point cuemm at another driver file without
 * relinking.  So libcuda.so.1 (the runtime soname; libcuda.so exists only
 * with development packages) is opened with dlopen, or the file that
 * CUEMM_LIBCUDA names, with no fallback from one to the other.  Every entry
 * point is then resolved through cuGetProcAddress at a pinned API version, so
 * the ABI variant matches the prototype cuemm was compiled against whatever
 * the installed driver's newest variant is.  A load either completes or
 * leaves nothing behind: a half-resolved table is never published.
 */

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuemm.h"
#include "base/driver.h"
#include "base/error.h"

typedef CUresult (*get_proc_address_fn)(const char *, void **, int, cuuint64_t,
                                        CUdriverProcAddressQueryResult *);
typedef CUresult (*driver_get_version_fn)(int *);

static cuemm__driver_table table;
static void *table_handle;
static _Atomic(const cuemm__driver_table *) loaded;
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *driver_file(void)
{
  const char *env = getenv("CUEMM_LIBCUDA");
  return (env && *env) ? env : "libcuda.so.1";
}

static void unload(void *handle)
{
  memset(&table, 0, sizeof table);
  if (handle)
    dlclose(handle);
}

/* Resolves one entry point.  Returns 0, or -1 with the message set when the
 * entry is required and the driver lacks it. */
static int resolve(get_proc_address_fn gpa, const char *name, void **slot, int required)
{
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  void *fn = NULL;
  CUresult r = gpa(name, &fn, CUEMM__DRIVER_API_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status);
  if (r == CUDA_SUCCESS && status == CU_GET_PROC_ADDRESS_SUCCESS && fn) {
    *slot = fn;
    return 0;
  }
  *slot = NULL;
  if (!required)
    return 0;
  cuemm__error(CUDA_ERROR_NOT_SUPPORTED,
               "the CUDA driver %s lacks %s at API version %d (cuGetProcAddress: result %d, symbolStatus %d); "
               "cuemm needs a driver for CUDA %d.%d or newer",
               table.path, name, CUEMM__DRIVER_API_VERSION, (int)r, (int)status,
               CUEMM__DRIVER_API_VERSION / 1000, CUEMM__DRIVER_API_VERSION % 1000 / 10);
  return -1;
}

static CUresult load(void)
{
  const char *file = driver_file();
  int from_env = file != NULL && strcmp(file, "libcuda.so.1") != 0;
  void *handle = dlopen(file, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *why = dlerror();
    return cuemm__error(CUDA_ERROR_NOT_FOUND,
                        "no CUDA driver could be loaded: tried %s%s (%s); %s",
                        file, from_env ? " (from CUEMM_LIBCUDA)" : " through the dynamic loader's search path",
                        why ? why : "dlopen failed",
                        from_env ? "fix or unset CUEMM_LIBCUDA"
                                 : "install the NVIDIA driver, or set CUEMM_LIBCUDA to the path of libcuda.so.1");
  }

  memset(&table, 0, sizeof table);
  struct link_map *lm = NULL;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && *lm->l_name)
    snprintf(table.path, sizeof table.path, "%s", lm->l_name);
  else
    snprintf(table.path, sizeof table.path, "%s", file);

  /* cuGetProcAddress_v2 (with symbolStatus) exists from CUDA 12.0 on: its
   * absence means either not a driver at all or one too old. */
  get_proc_address_fn gpa = (get_proc_address_fn)dlsym(handle, "cuGetProcAddress_v2");
  driver_get_version_fn get_version = (driver_get_version_fn)dlsym(handle, "cuDriverGetVersion");
  if (!gpa) {
    CUresult r = get_version ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_NOT_FOUND;
    int version = 0;
    if (get_version)
      get_version(&version);
    if (get_version)
      cuemm__error(r, "the CUDA driver %s (version %d) is too old: it lacks cuGetProcAddress_v2; "
                   "cuemm needs a driver for CUDA 12.0 or newer", table.path, version);
    else
      cuemm__error(r, "%s%s is not a CUDA driver: it exports neither cuGetProcAddress_v2 nor cuDriverGetVersion",
                   table.path, from_env ? " (named by CUEMM_LIBCUDA)" : "");
    unload(handle);
    return r;
  }

#define CUEMM__RESOLVE(name, req)                                              \
  if (resolve(gpa, "cu" #name, (void **)&table.name, req) != 0) {              \
    unload(handle);                                                            \
    return CUDA_ERROR_NOT_SUPPORTED;                                           \
  }
#define CUEMM__REQ(name) CUEMM__RESOLVE(name, 1)
#define CUEMM__OPT(name) CUEMM__RESOLVE(name, 0)
  CUEMM__DRIVER_ENTRIES(CUEMM__REQ, CUEMM__OPT)
#undef CUEMM__REQ
#undef CUEMM__OPT
#undef CUEMM__RESOLVE

  CUresult r = table.DriverGetVersion(&table.version);
  if (r == CUDA_SUCCESS && table.version < CUEMM__DRIVER_API_VERSION)
    r = cuemm__error(CUDA_ERROR_NOT_SUPPORTED,
                     "the CUDA driver %s reports version %d; cuemm needs %d (CUDA 12.0) or newer",
                     table.path, table.version, CUEMM__DRIVER_API_VERSION);
  else if (r != CUDA_SUCCESS)
    cuemm__error(r, "cuDriverGetVersion failed on %s: result %d", table.path, (int)r);
  if (r == CUDA_SUCCESS) {
    r = table.Init(0);
    if (r != CUDA_SUCCESS) {
      const char *name = NULL, *desc = NULL;
      table.GetErrorName(r, &name);
      table.GetErrorString(r, &desc);
      cuemm__error(r, "cuInit(0) failed on the CUDA driver %s: %s (%s)", table.path,
                   name ? name : "unknown error", desc ? desc : "no description");
    }
  }
  if (r != CUDA_SUCCESS) {
    unload(handle);
    return r;
  }
  table_handle = handle;
  return CUDA_SUCCESS;
}

const cuemm__driver_table *cuemm__driver(CUresult *err)
{
  const cuemm__driver_table *t = atomic_load_explicit(&loaded, memory_order_acquire);
  if (t) {
    if (err)
      *err = CUDA_SUCCESS;
    return t;
  }
  pthread_mutex_lock(&load_lock);
  CUresult r = CUDA_SUCCESS;
  t = atomic_load_explicit(&loaded, memory_order_relaxed);
  if (!t) {
    r = load();
    if (r == CUDA_SUCCESS) {
      t = &table;
      atomic_store_explicit(&loaded, t, memory_order_release);
    }
  }
  pthread_mutex_unlock(&load_lock);
  if (err)
    *err = r;
  return t;
}

CUresult cuemm__driver_error(CUresult r, const char *fmt, ...)
{
  char what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  const cuemm__driver_table *t = atomic_load_explicit(&loaded, memory_order_acquire);
  const char *name = NULL, *desc = NULL;
  if (t) {
    t->GetErrorName(r, &name);
    t->GetErrorString(r, &desc);
  }
  if (name)
    return cuemm__error(r, "%s failed: %s (%s)", what, name, desc ? desc : "no description");
  return cuemm__error(r, "%s failed: CUresult %d", what, (int)r);
}

CUEMM_EXTERN CUresult cuemm_driver_load(void)
{
  CUresult r;
  cuemm__driver(&r);
  return r;
}

CUEMM_EXTERN CUresult cuemm_driver_get_info(cuemm_driver_info *info)
{
  if (!info)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_driver_get_info: info is NULL");
  CUresult r;
  const cuemm__driver_table *t = cuemm__driver(&r);
  if (!t)
    return r;
  cuemm_driver_info out, *dst = info;
  info = &out; /* filled whole, then copied: a failed call writes nothing */
  memset(info, 0, sizeof *info);
  info->version = t->version;
  info->api_version = CUEMM__DRIVER_API_VERSION;
  snprintf(info->path, sizeof info->path, "%s", t->path);
  info->vmm = t->MemCreate && t->MemMap && t->MemSetAccess && t->MemAddressReserve;
  info->ipc = t->IpcGetMemHandle != NULL;
  info->async = t->MemAllocAsync != NULL;
  info->prefetch = t->MemPrefetchAsync && t->MemAdvise;
  /* Device 0's answers: what a program on a one-GPU machine asks. */
  CUdevice dev;
  int managed = 0;
  r = t->DeviceGet(&dev, 0);
  if (r != CUDA_SUCCESS)
    return cuemm__driver_error(r, "cuDeviceGet(0)");
  static const struct { CUdevice_attribute attr; const char *name; } attrs[] = {
    { CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, "MANAGED_MEMORY" },
    { CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, "CONCURRENT_MANAGED_ACCESS" },
    { CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, "PAGEABLE_MEMORY_ACCESS" },
    { CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES,
      "PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES" },
  };
  int *vals[] = { &managed, &info->concurrent_managed, &info->pageable, &info->pageable_host_page_tables };
  for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++) {
    r = t->DeviceGetAttribute(vals[i], attrs[i].attr, dev);
    if (r != CUDA_SUCCESS)
      return cuemm__driver_error(r, "cuDeviceGetAttribute(%s, device 0)", attrs[i].name);
  }
  info->managed = t->MemAllocManaged != NULL && managed;
  *dst = out;
  return CUDA_SUCCESS;
}
