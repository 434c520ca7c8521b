/* testutil.h: what cuemm's test programs share: a context to work in, and
 * access to the simulated driver's counters and fault injection.
 *
 * Test programs link libcuda.so.1 by soname; under `make check` the loader
 * finds simcuda (tests/simcuda) unless CUEMM_TEST_DRIVER=system, and the
 * simcuda_* control functions are then looked up at run time.  On the real
 * driver they are absent and the checks that need them skip with a reason.
 */
#ifndef CUEMM_TESTUTIL_H
#define CUEMM_TESTUTIL_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

#include "cuemm.h"
#include "simcuda.h"
#include "tap.h"

typedef struct sim_api {
  int (*fail)(const char *, unsigned, CUresult);
  int (*fail_from)(const char *, unsigned, CUresult);
  void (*fail_clear)(void);
  unsigned long (*calls)(const char *);
  void (*calls_reset)(void);
  size_t (*live_count)(void);
  void (*live_get)(simcuda_live *);
  void (*live_report)(FILE *);
  int (*set_capacity)(size_t);
  void (*set_queue_mode)(int);
  size_t (*queued_work)(void);
  int (*stream_set_capturing)(CUstream, int);
} sim_api;

static sim_api sim;
static int sim_present;

/* Resolves the simcuda control functions; 1 when running on simcuda. */
static inline int sim_init(void)
{
#define SIM_SYM(field, name) sim.field = (__typeof__(sim.field))dlsym(RTLD_DEFAULT, name)
  SIM_SYM(fail, "simcuda_fail");
  SIM_SYM(fail_from, "simcuda_fail_from");
  SIM_SYM(fail_clear, "simcuda_fail_clear");
  SIM_SYM(calls, "simcuda_calls");
  SIM_SYM(calls_reset, "simcuda_calls_reset");
  SIM_SYM(live_count, "simcuda_live_count");
  SIM_SYM(live_get, "simcuda_live_get");
  SIM_SYM(live_report, "simcuda_live_report");
  SIM_SYM(set_capacity, "simcuda_set_capacity");
  SIM_SYM(set_queue_mode, "simcuda_set_queue_mode");
  SIM_SYM(queued_work, "simcuda_queued_work");
  SIM_SYM(stream_set_capturing, "simcuda_stream_set_capturing");
#undef SIM_SYM
  sim_present = sim.fail && sim.calls && sim.live_count;
  return sim_present;
}

#define SIM_REASON "needs the simulated driver's counters and fault injection (running on the system driver)"

#define CHECK_CU(call)                                                         \
  do {                                                                         \
    CUresult check_cu_r = (call);                                              \
    if (check_cu_r != CUDA_SUCCESS) {                                          \
      printf("Bail out! %s failed with %d (%s) at %s:%d\n", #call,             \
             (int)check_cu_r, cuemm_last_error(), __FILE__, __LINE__);         \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

/* cuInit and the primary context of device `ordinal`, made current. */
static inline CUcontext test_primary_context(int ordinal)
{
  CUdevice dev;
  CUcontext ctx;
  CHECK_CU(cuInit(0));
  CHECK_CU(cuDeviceGet(&dev, ordinal));
  CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK_CU(cuCtxSetCurrent(ctx));
  return ctx;
}

static inline void test_release_primary(int ordinal)
{
  CUdevice dev;
  CHECK_CU(cuCtxSetCurrent(NULL));
  CHECK_CU(cuDeviceGet(&dev, ordinal));
  CHECK_CU(cuDevicePrimaryCtxRelease(dev));
}

/* A configuration with the defaults and no environment. */
static inline cuemm_config test_config(size_t max_count, double ratio)
{
  cuemm_config c;
  cuemm_config_init(&c);
  c.max_pending_count = max_count;
  c.max_pending_ratio = ratio;
  return c;
}

static inline cuemm_stats test_stats(cuemm_manager *m)
{
  cuemm_stats s;
  CHECK_CU(cuemm_get_stats(m, &s));
  return s;
}

/* The baseline for sim_check_nothing_left: simcuda's live objects now (0 on
 * the real driver). */
static inline size_t sim_live_baseline(void)
{
  return sim_present ? sim.live_count() : 0;
}

/* One check: on simcuda, as many live driver objects as at `live0`;
 * skipped on the real driver. */
static inline void sim_check_nothing_left(size_t live0)
{
  if (sim_present)
    is(sim.live_count(), live0, "simcuda: nothing left allocated");
  else
    skip(1, SIM_REASON);
}

/* Whether simcuda holds as many objects of each kind in `b` as in `a`. */
static inline int sim_live_same(const simcuda_live *a, const simcuda_live *b)
{
  return a->device_allocs == b->device_allocs && a->host_allocs == b->host_allocs &&
         a->host_registered == b->host_registered && a->contexts == b->contexts;
}

/* One check, kind by kind: on simcuda, as many live objects as at `live0`
 * (from sim.live_get); skipped on the real driver. */
static inline void sim_check_live_same(const simcuda_live *live0)
{
  if (!sim_present) {
    skip(1, SIM_REASON);
    return;
  }
  simcuda_live live;
  sim.live_get(&live);
  ok(sim_live_same(live0, &live), "simcuda: device allocations %zu, host allocations %zu, registered %zu, "
     "contexts %zu (baseline %zu, %zu, %zu, %zu)", live.device_allocs, live.host_allocs, live.host_registered,
     live.contexts, live0->device_allocs, live0->host_allocs, live0->host_registered, live0->contexts);
}

static inline unsigned long sim_calls(const char *entry)
{
  return sim_present ? sim.calls(entry) : 0;
}

/* Calls to simcuda's entry points of the kinds a fast path must never
 * make (0 on the real driver). */
static inline unsigned long sim_driver_work(void)
{
  static const char *const names[] = { "cuEventRecord", "cuEventQuery", "cuEventCreate", "cuStreamWaitEvent",
                                       "cuCtxSynchronize", "cuMemCreate", "cuMemMap", "cuMemAlloc",
                                       "cuStreamSynchronize", "cuCtxGetCurrent", "cuStreamQuery" };
  unsigned long n = 0;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    n += sim_calls(names[i]);
  return n;
}

/* The byte at p + off of device memory, once the context's work is done. */
static inline unsigned char device_byte_at(CUdeviceptr p, size_t off)
{
  unsigned char b = 0;
  CHECK_CU(cuCtxSynchronize());
  CHECK_CU(cuMemcpyDtoH(&b, p + off, 1));
  return b;
}

#endif
