/* adapter.c: owns what frameworks on the CUDA runtime need of cuemm: one
 * manager per device over its primary context (cuemm_device_manager), the
 * entry points of PyTorch's pluggable allocator (cuemm_torch_*), the pools
 * of CUDA graphs captured through them, the count of their failures, and
 * the tags: named managers of their own over the same primary context, one
 * per (tag, device), which new allocations go to while their tag is
 * current, so that each can be suspended and resumed on its own; and the
 * segments of PyTorch's MemPool mode, each tag's pool taking its segments
 * from that tag's manager.
 *
 * It sits above the manager, like registry.c: it calls the public
 * functions (and reads which path a manager's blocks take), and no layer
 * below calls it.  The managers it makes are never destroyed: frameworks
 * free memory from their last destructors, after any exit handler of ours.
 *
 * Locking: dev_lock serializes making managers and naming tags (readers
 * load the slots atomically); fail_lock guards the failure counts and
 * message; graph_lock guards the graph pools and the table of blocks that
 * belong to them, which the fast paths consult only while a pool is open
 * on the device or a block of a pool is live (two atomic counters).  The
 * current tag and the count of tag managers are atomics the fast paths
 * read once.
 */
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "base/internal.h"
#include "core/internal.h"

#define MAX_DEVICES CUEMM__POOL_MAX_DEVICES

/* ---- the managers of the devices ------------------------------------------- */

static pthread_mutex_t dev_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(cuemm_manager *) dev_mgr[MAX_DEVICES];
static _Atomic int ndevices;

static CUresult device_manager_slow(int device, cuemm_manager **out)
{
  static const char fn[] = "cuemm_device_manager";
  CUresult r;
  const cuemm__driver_table *d = cuemm__driver(&r);
  if (!d)
    return r;
  int count = 0;
  if ((r = d->DeviceGetCount(&count)) != CUDA_SUCCESS)
    return cuemm__driver_error(r, "%s: cuDeviceGetCount", fn);
  if (device < 0 || device >= count)
    return cuemm__error(CUDA_ERROR_INVALID_DEVICE, "%s: device %d does not exist: the driver sees %d device%s%s "
                        "(CUDA_VISIBLE_DEVICES applies)", fn, device, count, count == 1 ? "" : "s",
                        count ? (count == 1 ? ", ordinal 0" : ", ordinals from 0") : "");
  if (device >= MAX_DEVICES)
    return cuemm__error(CUDA_ERROR_NOT_SUPPORTED, "%s: device %d: cuemm serves devices 0 to %d", fn, device,
                        MAX_DEVICES - 1);

  pthread_mutex_lock(&dev_lock);
  cuemm_manager *m = atomic_load_explicit(&dev_mgr[device], memory_order_acquire);
  if (m) {
    pthread_mutex_unlock(&dev_lock);
    *out = m;
    return CUDA_SUCCESS;
  }
  cuemm_config cfg;
  if ((r = cuemm_config_init(&cfg)) != CUDA_SUCCESS) {
    pthread_mutex_unlock(&dev_lock);
    cuemm__error_append(" (%s %d)", fn, device);
    return r;
  }
  /* The frameworks free in stream order: the pool, unless chosen away. */
  if (!cuemm__config_env_set(&cfg, offsetof(cuemm_config, pool)) && cfg.memory == CUEMM_MEMORY_DEVICE)
    cfg.pool = CUEMM_POOL_VMM;
  CUdevice dev;
  CUcontext ctx = NULL;
  if ((r = d->DeviceGet(&dev, device)) != CUDA_SUCCESS) {
    pthread_mutex_unlock(&dev_lock);
    return cuemm__driver_error(r, "%s: cuDeviceGet(%d)", fn, device);
  }
  if ((r = d->DevicePrimaryCtxRetain(&ctx, dev)) != CUDA_SUCCESS) {
    pthread_mutex_unlock(&dev_lock);
    return cuemm__driver_error(r, "%s: cuDevicePrimaryCtxRetain(device %d)", fn, device);
  }
  r = cuemm_manager_create(ctx, &cfg, &m);
  if (r == CUDA_ERROR_ALREADY_ACQUIRED) {
    /* The program made the primary context's manager itself: use it. */
    CUcontext popped;
    if ((r = d->CtxPushCurrent(ctx)) == CUDA_SUCCESS) {
      r = cuemm_get(&m);
      d->CtxPopCurrent(&popped);
    } else
      cuemm__driver_error(r, "%s: cuCtxPushCurrent(primary context of device %d)", fn, device);
  }
  if (r != CUDA_SUCCESS) {
    cuemm__saved_error why;
    cuemm__error_save(&why);
    d->DevicePrimaryCtxRelease(dev);
    pthread_mutex_unlock(&dev_lock);
    cuemm__error_restore(&why, r);
    return cuemm__error_prefix(r, "%s: the manager of device %d's primary context", fn, device);
  }
  atomic_store_explicit(&dev_mgr[device], m, memory_order_release);
  atomic_fetch_add(&ndevices, 1);
  pthread_mutex_unlock(&dev_lock);
  *out = m;
  return CUDA_SUCCESS;
}

CUEMM_EXTERN CUresult cuemm_device_manager(int device, cuemm_manager **out)
{
  if (!out)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_device_manager: m is NULL");
  if (__builtin_expect(device >= 0 && device < MAX_DEVICES, 1)) {
    cuemm_manager *m = atomic_load_explicit(&dev_mgr[device], memory_order_acquire);
    if (__builtin_expect(m != NULL, 1)) {
      *out = m;
      return CUDA_SUCCESS;
    }
  }
  return device_manager_slow(device, out);
}

/* The manager of a device if it was made, else NULL (no driver call). */
static cuemm_manager *existing(int device)
{
  if (device < 0 || device >= MAX_DEVICES)
    return NULL;
  return atomic_load_explicit(&dev_mgr[device], memory_order_acquire);
}

/* Whether m's blocks take the deferred path: no pool, and not managed or
 * system memory (whose stream calls go deferred by themselves). */
static inline int deferred_only(const cuemm_manager *m)
{
  return !m->pool && !m->managed;
}

/* ---- tags ------------------------------------------------------------------------ */

/* Tag 0 is the default: the device's manager above.  A name, once given a
 * number, keeps it for the process's life, so a number read without the
 * lock always names the same tag. */
#define MAX_TAGS 64
#define TAG_NAME_MAX 63

static char tag_names[MAX_TAGS][TAG_NAME_MAX + 1];
static _Atomic int ntag_names = 1;
/* The current tag, process-wide and not per thread: PyTorch's backward
 * pass allocates gradients on its autograd threads, which a tag of the
 * thread that set it would miss. */
static _Atomic int cur_tag;
static _Atomic(cuemm_manager *) tag_mgr[MAX_TAGS][MAX_DEVICES];
/* Tag managers made: while 0, every block is the default manager's and the
 * frees take today's path. */
static _Atomic int tag_mgrs;

static const char *tag_name(int t)
{
  return t ? tag_names[t] : NULL;
}

/* *t = the number of `tag` (NULL or "": 0, the default), given one when
 * `create` and it has none.  -1 with create 0 for a name never given. */
static CUresult tag_number(const char *fn, const char *tag, int create, int *t)
{
  *t = 0;
  if (!tag || !*tag)
    return CUDA_SUCCESS;
  size_t n = strlen(tag);
  if (n > TAG_NAME_MAX)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "%s: the tag \"%.20s...\" is %zu characters long; at most %d",
                        fn, tag, n, TAG_NAME_MAX);
  for (size_t i = 0; i < n; i++) {
    char c = tag[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '-' || c == '.'))
      return cuemm__error(CUDA_ERROR_INVALID_VALUE, "%s: the tag \"%s\" has the character 0x%02x at %zu: "
                          "a tag is made of letters, digits, '_', '-' and '.'", fn, tag, (unsigned char)c, i);
  }
  int k = atomic_load_explicit(&ntag_names, memory_order_acquire);
  for (int i = 1; i < k; i++)
    if (!strcmp(tag_names[i], tag)) {
      *t = i;
      return CUDA_SUCCESS;
    }
  if (!create) {
    *t = -1;
    return CUDA_SUCCESS;
  }
  pthread_mutex_lock(&dev_lock);
  k = atomic_load_explicit(&ntag_names, memory_order_relaxed);
  for (int i = 1; i < k; i++)
    if (!strcmp(tag_names[i], tag)) {
      pthread_mutex_unlock(&dev_lock);
      *t = i;
      return CUDA_SUCCESS;
    }
  if (k == MAX_TAGS) {
    pthread_mutex_unlock(&dev_lock);
    return cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "%s: the tag \"%s\" would be the %dth: cuemm keeps at most %d "
                        "tags besides the default", fn, tag, MAX_TAGS, MAX_TAGS - 1);
  }
  memcpy(tag_names[k], tag, n + 1);
  atomic_store_explicit(&ntag_names, k + 1, memory_order_release);
  pthread_mutex_unlock(&dev_lock);
  *t = k;
  return CUDA_SUCCESS;
}

static CUresult tag_manager_slow(int t, int device, cuemm_manager **out)
{
  static const char fn[] = "cuemm_adapter_tag_manager";
  cuemm_manager *m0;
  /* The default manager first: it checks the ordinal and retains the
   * primary context, and the frees look there first. */
  CUresult r = cuemm_device_manager(device, &m0);
  if (r != CUDA_SUCCESS)
    return r;
  pthread_mutex_lock(&dev_lock);
  cuemm_manager *m = atomic_load_explicit(&tag_mgr[t][device], memory_order_acquire);
  if (m) {
    pthread_mutex_unlock(&dev_lock);
    *out = m;
    return CUDA_SUCCESS;
  }
  cuemm_config cfg;
  if ((r = cuemm_config_init(&cfg)) != CUDA_SUCCESS) {
    pthread_mutex_unlock(&dev_lock);
    cuemm__error_append(" (%s \"%s\", device %d)", fn, tag_names[t], device);
    return r;
  }
  /* A tag exists to be suspended, which needs the pool; it shares the
   * context with the default manager, which stays the registered one. */
  if (cfg.memory == CUEMM_MEMORY_DEVICE)
    cfg.pool = CUEMM_POOL_VMM;
  cfg.secondary = 1;
  /* Its own event log beside the default's, which opening the same file
   * would truncate. */
  char log[4096];
  if (cfg.log_file && *cfg.log_file) {
    snprintf(log, sizeof log, "%s.%s", cfg.log_file, tag_names[t]);
    cfg.log_file = log;
  }
  r = cuemm_manager_create(cuemm_context(m0), &cfg, &m);
  if (r != CUDA_SUCCESS) {
    pthread_mutex_unlock(&dev_lock);
    return cuemm__error_prefix(r, "%s: the manager of tag \"%s\" on device %d", fn, tag_names[t], device);
  }
  atomic_store_explicit(&tag_mgr[t][device], m, memory_order_release);
  atomic_fetch_add_explicit(&tag_mgrs, 1, memory_order_release);
  pthread_mutex_unlock(&dev_lock);
  *out = m;
  return CUDA_SUCCESS;
}

/* *m = the manager of tag number t on `device`, made on first use. */
static inline CUresult tag_manager(int t, int device, cuemm_manager **out)
{
  if (!t)
    return cuemm_device_manager(device, out);
  if (device >= 0 && device < MAX_DEVICES) {
    cuemm_manager *m = atomic_load_explicit(&tag_mgr[t][device], memory_order_acquire);
    if (m) {
      *out = m;
      return CUDA_SUCCESS;
    }
  }
  return tag_manager_slow(t, device, out);
}

/* The manager of tag t on a device if it was made, else NULL. */
static cuemm_manager *tag_existing(int t, int device)
{
  if (!t)
    return existing(device);
  if (device < 0 || device >= MAX_DEVICES)
    return NULL;
  return atomic_load_explicit(&tag_mgr[t][device], memory_order_acquire);
}

/* Whether m handed out p, still live: a block of its pool's reservation,
 * or a block it holds outside the pool. */
static int holds(cuemm_manager *m, CUdeviceptr p, int in_pool_only)
{
  if (m->pool)
    if (cuemm__pool_contains(m->pool, p))
      return 1;
  if (in_pool_only)
    return 0;
  CUdeviceptr base = 0;
  return cuemm_address_range(m, p, &base, NULL) == CUDA_SUCCESS && base == p;
}

/* The manager of `device` that handed out p, the default one first; NULL
 * when none did. */
static __attribute__((noinline)) cuemm_manager *claim(int device, CUdeviceptr p)
{
  cuemm_manager *m0 = existing(device);
  if (!m0)
    return NULL;
  int k = atomic_load_explicit(&ntag_names, memory_order_acquire);
  /* Pool reservations first: one comparison each. */
  if (holds(m0, p, 1))
    return m0;
  for (int t = 1; t < k; t++) {
    cuemm_manager *m = tag_existing(t, device);
    if (m && holds(m, p, 1))
      return m;
  }
  /* Blocks beyond the pools, and managers without one. */
  if (holds(m0, p, 0))
    return m0;
  for (int t = 1; t < k; t++) {
    cuemm_manager *m = tag_existing(t, device);
    if (m && holds(m, p, 0))
      return m;
  }
  return NULL;
}

/* The manager a free of p on `device` goes to: the one that handed it out,
 * else the default one (which refuses it with its message). */
static inline cuemm_manager *owner(int device, CUdeviceptr p)
{
  cuemm_manager *m0 = existing(device);
  if (__builtin_expect(atomic_load_explicit(&tag_mgrs, memory_order_acquire) == 0, 1))
    return m0;
  if (m0 && m0->pool && cuemm__pool_contains(m0->pool, p))
    return m0; /* the default manager's pool: no call */
  cuemm_manager *m = claim(device, p);
  return m ? m : m0;
}

CUEMM_EXTERN CUresult cuemm_adapter_set_tag(const char *tag, const char **previous)
{
  int t;
  CUresult r = tag_number("cuemm_adapter_set_tag", tag, 1, &t);
  if (r != CUDA_SUCCESS)
    return r;
  int before = atomic_exchange(&cur_tag, t);
  if (previous)
    *previous = tag_name(before);
  return CUDA_SUCCESS;
}

CUEMM_EXTERN const char *cuemm_adapter_get_tag(void)
{
  return tag_name(atomic_load(&cur_tag));
}

CUEMM_EXTERN CUresult cuemm_adapter_tag_manager(const char *tag, int device, cuemm_manager **m)
{
  if (!m)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_adapter_tag_manager: m is NULL");
  int t;
  CUresult r = tag_number("cuemm_adapter_tag_manager", tag, 1, &t);
  return r == CUDA_SUCCESS ? tag_manager(t, device, m) : r;
}

CUEMM_EXTERN CUresult cuemm_adapter_suspend(const char *tag, int device, unsigned flags)
{
  static const char fn[] = "cuemm_adapter_suspend";
  int t;
  cuemm_manager *m;
  CUresult r = tag_number(fn, tag, 1, &t);
  if (r == CUDA_SUCCESS)
    r = tag_manager(t, device, &m);
  if (r != CUDA_SUCCESS)
    return r;
  if ((r = cuemm_pool_suspend(m, flags)) != CUDA_SUCCESS)
    return cuemm__error_prefix(r, "%s(tag \"%s\", device %d)", fn, t ? tag_names[t] : "", device);
  return CUDA_SUCCESS;
}

CUEMM_EXTERN CUresult cuemm_adapter_resume(const char *tag, int device)
{
  static const char fn[] = "cuemm_adapter_resume";
  int t;
  CUresult r = tag_number(fn, tag, 0, &t);
  if (r != CUDA_SUCCESS)
    return r;
  cuemm_manager *m = t < 0 ? NULL : tag_existing(t, device);
  if (!m)
    return cuemm__error(CUDA_ERROR_ILLEGAL_STATE, "%s(tag \"%s\", device %d): the tag has no manager on the "
                        "device: nothing was suspended", fn, tag ? tag : "", device);
  if ((r = cuemm_pool_resume(m)) != CUDA_SUCCESS)
    return cuemm__error_prefix(r, "%s(tag \"%s\", device %d)", fn, t ? tag_names[t] : "", device);
  return CUDA_SUCCESS;
}

CUEMM_EXTERN CUresult cuemm_adapter_stream_release(int device, CUstream stream)
{
  int k = atomic_load_explicit(&ntag_names, memory_order_acquire);
  cuemm__first_error first = CUEMM__FIRST_ERROR_INIT;
  for (int t = 0; t < k; t++) {
    cuemm_manager *m = tag_existing(t, device);
    if (!m || !m->pool)
      continue; /* without a pool no block waits for a stream */
    cuemm__first_note(&first, cuemm_stream_release(m, stream));
  }
  if (first.r != CUDA_SUCCESS)
    return cuemm__error_prefix(cuemm__first_end(&first), "cuemm_adapter_stream_release(device %d, stream %p)",
                               device, (void *)stream);
  return CUDA_SUCCESS;
}

/* ---- failures ------------------------------------------------------------------ */

typedef enum { F_ALLOC, F_FREE, F_RECORD, F_EMPTY, F_GRAPH } fail_kind;

static pthread_mutex_t fail_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t fails[5];
static uint64_t empty_caches, graph_pools, graph_held;
static char last_failure[512];

/* Counts a failure; its message is what `fmt` says followed by the thread's
 * message (which stays the thread's message too). */
static void __attribute__((format(printf, 2, 3))) note_failure(fail_kind k, const char *fmt, ...)
{
  char what[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  cuemm__error_prefix(CUDA_SUCCESS, "%s", what);
  pthread_mutex_lock(&fail_lock);
  fails[k]++;
  snprintf(last_failure, sizeof last_failure, "%s", cuemm_last_error());
  pthread_mutex_unlock(&fail_lock);
}

/* ---- graph pools ---------------------------------------------------------------- */

typedef struct gpool {
  cuemm_torch_pool_id id;
  int device;
  int open;               /* between begin and end */
  int released;           /* releasePool came */
  size_t live;            /* its blocks not yet freed */
  CUdeviceptr *held;      /* its blocks freed while it lives */
  size_t nheld, capheld;
} gpool;

typedef struct gtag {
  CUdeviceptr p;
  gpool *pool;
} gtag;

static pthread_mutex_t graph_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int graph_open[MAX_DEVICES];  /* pools open on the device */
static _Atomic size_t ntags;                 /* blocks of pools, live */
static gpool **pools;
static size_t npools, cappools;
static gtag *tags;                           /* sorted by p */
static size_t captags;

static int same_id(cuemm_torch_pool_id a, cuemm_torch_pool_id b)
{
  return a.first == b.first && a.second == b.second;
}

static gpool *pool_find(int device, cuemm_torch_pool_id id)
{
  for (size_t i = 0; i < npools; i++)
    if (pools[i]->device == device && same_id(pools[i]->id, id))
      return pools[i];
  return NULL;
}

/* The pool new blocks of the device join: the latest one open. */
static gpool *pool_open_on(int device)
{
  for (size_t i = npools; i-- > 0;)
    if (pools[i]->device == device && pools[i]->open)
      return pools[i];
  return NULL;
}

static void pool_drop_if_done(gpool *g)
{
  if (!g->released || g->live || g->nheld)
    return;
  for (size_t i = 0; i < npools; i++)
    if (pools[i] == g) {
      memmove(pools + i, pools + i + 1, (npools - i - 1) * sizeof *pools);
      npools--;
      break;
    }
  free(g->held);
  free(g);
}

/* The index where p is or would go in `tags`. */
static size_t tag_slot(CUdeviceptr p)
{
  size_t lo = 0, hi = atomic_load_explicit(&ntags, memory_order_relaxed);
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (tags[mid].p < p)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* Records that p belongs to the pool open on `device`.  0, or -1 when no
 * host memory is left (the block is then an ordinary one). */
static int tag_block(int device, CUdeviceptr p)
{
  int rc = -1;
  pthread_mutex_lock(&graph_lock);
  gpool *g = pool_open_on(device);
  size_t n = atomic_load_explicit(&ntags, memory_order_relaxed);
  if (g && n == captags) {
    size_t cap = captags ? captags * 2 : 64;
    gtag *t = realloc(tags, cap * sizeof *t);
    if (t) {
      tags = t;
      captags = cap;
    }
  }
  if (g && n < captags) {
    size_t i = tag_slot(p);
    memmove(tags + i + 1, tags + i, (n - i) * sizeof *tags);
    tags[i] = (gtag){ p, g };
    g->live++;
    atomic_store_explicit(&ntags, n + 1, memory_order_release);
    rc = 0;
  }
  pthread_mutex_unlock(&graph_lock);
  return rc;
}

/* A free of p: when p belongs to a pool, takes it over (held for the pool,
 * or freed with cuemm_free when its pool is released) and returns 1, with
 * *r the result; 0 when p is an ordinary block. */
static int pool_take_free(cuemm_manager *m, CUdeviceptr p, CUresult *r)
{
  pthread_mutex_lock(&graph_lock);
  size_t n = atomic_load_explicit(&ntags, memory_order_relaxed);
  size_t i = tag_slot(p);
  if (i == n || tags[i].p != p) {
    pthread_mutex_unlock(&graph_lock);
    return 0;
  }
  gpool *g = tags[i].pool;
  memmove(tags + i, tags + i + 1, (n - i - 1) * sizeof *tags);
  atomic_store_explicit(&ntags, n - 1, memory_order_release);
  g->live--;
  *r = CUDA_SUCCESS;
  int now = g->released;
  if (!now) {
    if (g->nheld == g->capheld) {
      size_t cap = g->capheld ? g->capheld * 2 : 16;
      CUdeviceptr *h = realloc(g->held, cap * sizeof *h);
      if (h) {
        g->held = h;
        g->capheld = cap;
      }
    }
    if (g->nheld < g->capheld) {
      g->held[g->nheld++] = p;
      pthread_mutex_lock(&fail_lock);
      graph_held++;
      pthread_mutex_unlock(&fail_lock);
    } else
      now = 1; /* no host memory to hold it: the deferred free is safe too */
  }
  pool_drop_if_done(g);
  pthread_mutex_unlock(&graph_lock);
  if (now)
    *r = cuemm_free(m, p);
  return 1;
}

CUEMM_EXTERN void cuemm_torch_begin_allocate_to_pool(int device, cuemm_torch_pool_id id, void *filter)
{
  (void)filter; /* a C++ std::function: not callable from here */
  if (device < 0 || device >= MAX_DEVICES) {
    cuemm__error(CUDA_ERROR_INVALID_DEVICE, "device %d is not one cuemm serves", device);
    note_failure(F_GRAPH, "cuemm_torch_begin_allocate_to_pool(device %d, pool (%llu, %llu))", device, id.first,
                 id.second);
    return;
  }
  pthread_mutex_lock(&graph_lock);
  gpool *g = pool_find(device, id);
  if (!g && npools == cappools) {
    size_t cap = cappools ? cappools * 2 : 8;
    gpool **p = realloc(pools, cap * sizeof *p);
    if (p) {
      pools = p;
      cappools = cap;
    }
  }
  if (!g && npools < cappools && (g = calloc(1, sizeof *g)) != NULL) {
    g->id = id;
    g->device = device;
    pools[npools++] = g;
  }
  if (g) {
    g->released = 0;
    if (!g->open++)
      atomic_fetch_add(&graph_open[device], 1);
  }
  pthread_mutex_unlock(&graph_lock);
  if (!g) {
    cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "no host memory for the pool's record");
    note_failure(F_GRAPH, "cuemm_torch_begin_allocate_to_pool(device %d, pool (%llu, %llu))", device, id.first,
                 id.second);
    return;
  }
  pthread_mutex_lock(&fail_lock);
  graph_pools++;
  pthread_mutex_unlock(&fail_lock);
}

CUEMM_EXTERN void cuemm_torch_end_allocate_to_pool(int device, cuemm_torch_pool_id id)
{
  pthread_mutex_lock(&graph_lock);
  gpool *g = pool_find(device, id);
  if (g && g->open && !--g->open)
    atomic_fetch_sub(&graph_open[device], 1);
  pthread_mutex_unlock(&graph_lock);
}

CUEMM_EXTERN void cuemm_torch_release_pool(int device, cuemm_torch_pool_id id)
{
  pthread_mutex_lock(&graph_lock);
  gpool *g = pool_find(device, id);
  if (!g) {
    pthread_mutex_unlock(&graph_lock);
    return;
  }
  if (g->open) {
    g->open = 0;
    atomic_fetch_sub(&graph_open[device], 1);
  }
  g->released = 1;
  CUdeviceptr *held = g->held;
  size_t nheld = g->nheld;
  g->held = NULL;
  g->nheld = g->capheld = 0;
  pool_drop_if_done(g);
  pthread_mutex_unlock(&graph_lock);
  for (size_t i = 0; existing(device) && i < nheld; i++)
    if (cuemm_free(owner(device, held[i]), held[i]) != CUDA_SUCCESS)
      note_failure(F_FREE, "cuemm_torch_release_pool(device %d): the free of 0x%llx", device,
                   (unsigned long long)held[i]);
  free(held);
}

/* ---- PyTorch's entry points ----------------------------------------------------- */

/* While a pool is open on a device a stream of it may be captured: the
 * calls that may reach the driver (growth, events of other streams) run in
 * relaxed capture mode, which allows them during a global-mode capture. */
typedef struct relaxed {
  CUstreamCaptureMode mode;
  int exchanged;
} relaxed;

static void relaxed_enter(cuemm_manager *m, relaxed *x)
{
  x->mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  x->exchanged = m->drv->ThreadExchangeStreamCaptureMode &&
                 m->drv->ThreadExchangeStreamCaptureMode(&x->mode) == CUDA_SUCCESS;
}

static void relaxed_leave(cuemm_manager *m, relaxed *x)
{
  if (x->exchanged)
    m->drv->ThreadExchangeStreamCaptureMode(&x->mode);
}

/* An allocation while a pool is open on the device: in relaxed capture
 * mode, and recorded as the pool's. */
static __attribute__((noinline)) CUresult alloc_for_pool(cuemm_manager *m, int device, CUdeviceptr *p, size_t size,
                                                         CUstream stream)
{
  relaxed x;
  relaxed_enter(m, &x);
  CUresult r = deferred_only(m) ? cuemm_allocate(m, size, p) : cuemm_allocate_async(m, size, stream, p);
  relaxed_leave(m, &x);
  if (r == CUDA_SUCCESS && tag_block(device, *p) != 0) {
    /* Unrecorded, the block would be reused while the graph lives. */
    if (deferred_only(m))
      cuemm_free(m, *p);
    else
      cuemm_free_async(m, *p, stream);
    r = cuemm__error(CUDA_ERROR_OUT_OF_MEMORY, "no host memory to record a block of a graph's pool");
  }
  return r;
}

CUEMM_EXTERN void *cuemm_torch_alloc(size_t size, int device, CUstream stream)
{
  if (size == 0)
    return NULL;
  cuemm_manager *m;
  int t = atomic_load_explicit(&cur_tag, memory_order_relaxed);
  CUresult r = __builtin_expect(t == 0, 1) ? cuemm_device_manager(device, &m) : tag_manager(t, device, &m);
  if (r == CUDA_SUCCESS && size > (size_t)SSIZE_MAX)
    r = cuemm__error(CUDA_ERROR_INVALID_VALUE, "the size is negative (%zd as ssize_t)", (ssize_t)size);
  CUdeviceptr p = 0;
  if (r == CUDA_SUCCESS) {
    if (__builtin_expect(atomic_load_explicit(&graph_open[device], memory_order_relaxed) != 0, 0))
      r = alloc_for_pool(m, device, &p, size, stream);
    else if (__builtin_expect(deferred_only(m), 0))
      r = cuemm_allocate(m, size, &p);
    else
      r = cuemm_allocate_async(m, size, stream, &p);
  }
  if (r != CUDA_SUCCESS) {
    note_failure(F_ALLOC, "cuemm_torch_alloc(%zu bytes, device %d, stream %p%s%s%s)", size, device, (void *)stream,
                 t ? ", tag \"" : "", t ? tag_names[t] : "", t ? "\"" : "");
    return NULL;
  }
  return (void *)(uintptr_t)p;
}

CUEMM_EXTERN void cuemm_torch_free(void *ptr, size_t size, int device, CUstream stream)
{
  (void)size;
  if (!ptr)
    return;
  CUdeviceptr p = (CUdeviceptr)(uintptr_t)ptr;
  cuemm_manager *m = owner(device, p);
  CUresult r;
  if (!m)
    r = cuemm__error(CUDA_ERROR_INVALID_VALUE, "device %d has no manager: cuemm handed out nothing there", device);
  else if (__builtin_expect(atomic_load_explicit(&ntags, memory_order_acquire) != 0, 0) &&
           pool_take_free(m, p, &r)) {
    /* A block of a graph's pool: held or freed for it. */
  } else if (__builtin_expect(deferred_only(m), 0))
    r = cuemm_free(m, p);
  else if (__builtin_expect(atomic_load_explicit(&graph_open[device], memory_order_relaxed) != 0, 0)) {
    relaxed x;
    relaxed_enter(m, &x);
    r = cuemm_free_async(m, p, stream);
    relaxed_leave(m, &x);
  } else
    r = cuemm_free_async(m, p, stream);
  if (r != CUDA_SUCCESS)
    note_failure(F_FREE, "cuemm_torch_free(%p, %zu bytes, device %d, stream %p)", ptr, size, device,
                 (void *)stream);
}

CUEMM_EXTERN void cuemm_torch_record_stream(void *ptr, CUstream stream)
{
  CUdeviceptr p = (CUdeviceptr)(uintptr_t)ptr;
  int tagged = atomic_load_explicit(&tag_mgrs, memory_order_acquire) != 0;
  for (int i = 0; i < MAX_DEVICES; i++) {
    cuemm_manager *m = tagged ? claim(i, p) : existing(i);
    if (!m)
      continue;
    CUresult r = deferred_only(m) ? cuemm_address_range(m, p, NULL, NULL)
                                  : cuemm_record_stream(m, p, stream);
    if (r == CUDA_SUCCESS)
      return; /* on the deferred path the free synchronizes: nothing to record */
  }
  cuemm__error(CUDA_ERROR_INVALID_VALUE, "no device's manager holds a live block starting there");
  note_failure(F_RECORD, "cuemm_torch_record_stream(%p, stream %p)", ptr, (void *)stream);
}

CUEMM_EXTERN void cuemm_torch_empty_cache(void)
{
  pthread_mutex_lock(&fail_lock);
  empty_caches++;
  pthread_mutex_unlock(&fail_lock);
  int k = atomic_load_explicit(&ntag_names, memory_order_acquire);
  for (int i = 0; i < MAX_DEVICES; i++)
    for (int t = 0; t < k; t++) {
      cuemm_manager *m = tag_existing(t, i);
      if (!m)
        continue;
      cuemm_pool_stats ps;
      if (m->pool && cuemm_pool_get_stats(m, &ps) == CUDA_SUCCESS && ps.suspended)
        continue; /* holds no memory to give back, and refuses the trim */
      CUresult r = m->pool ? cuemm_pool_trim(m) : m->managed ? cuemm_managed_trim(m) : cuemm_flush(m);
      if (r != CUDA_SUCCESS)
        note_failure(F_EMPTY, "cuemm_torch_empty_cache (device %d%s%s%s)", i, t ? ", tag \"" : "",
                     t ? tag_names[t] : "", t ? "\"" : "");
    }
}

CUEMM_EXTERN void cuemm_torch_init(int device_count)
{
  (void)device_count;
  if (cuemm_driver_load() != CUDA_SUCCESS)
    note_failure(F_ALLOC, "cuemm_torch_init");
}

/* ---- PyTorch's MemPool mode: segments ------------------------------------------- */

/* torch.cuda.MemPool(allocator) keeps PyTorch's caching allocator in charge
 * of tensors and asks the pluggable allocator for whole segments only: when
 * its pool has no cached block that fits (raw_alloc, with the device and
 * the current stream), and when it releases a wholly free segment
 * (raw_delete: torch.cuda.empty_cache, its out-of-memory retry, the pool's
 * destruction), with the stream the segment was allocated on.
 *
 * The pluggable signature carries no user data, and a segment allocation
 * happens wherever PyTorch needs one: inside the `with` of one pool or
 * another, on whatever thread, during a CUDA graph's capture into the pool,
 * in an out-of-memory retry.  A "current tag for segments" set around those
 * would be wrong in all the cases it does not see, so each tag number has a
 * function of its own (seg_allocs[t], made below), handed to PyTorch when
 * the tag's pool is made: the pool's segments always go to its tag.  The
 * free needs no such binding: the manager that holds a block is found from
 * its address, as cuemm_torch_free finds it.
 *
 * A segment is taken with cuemm_alloc_async on the stream PyTorch names:
 * the caching allocator hands a segment's blocks to that stream only (other
 * streams' uses it orders itself, with events), so the stream-ordered path
 * is right and costs no synchronization; during a capture PyTorch calls it
 * in relaxed capture mode, as cudaMalloc.  A segment is given back with
 * cuemm_free, deferred: its flush synchronizes the context, as the
 * cudaFree PyTorch calls otherwise does.  PyTorch frees a segment while
 * work queued on its stream may still use it (a tensor freed in stream
 * order), and the stream it names may have been destroyed since (an
 * external stream): a stream-ordered free would have to trust that handle,
 * the deferred one needs none, and it happens rarely enough (empty_cache,
 * an out-of-memory retry) to cost nothing that matters.  Segments are
 * never part of the graph pools above: PyTorch keeps a MemPool's graph
 * blocks itself. */

static void *segment_alloc(int t, size_t size, int device, CUstream stream)
{
  if (size == 0)
    return NULL;
  cuemm_manager *m;
  CUresult r = tag_manager(t, device, &m);
  if (r == CUDA_SUCCESS && size > (size_t)SSIZE_MAX)
    r = cuemm__error(CUDA_ERROR_INVALID_VALUE, "the size is negative (%zd as ssize_t)", (ssize_t)size);
  CUdeviceptr p = 0;
  if (r == CUDA_SUCCESS)
    r = deferred_only(m) ? cuemm_allocate(m, size, &p) : cuemm_allocate_async(m, size, stream, &p);
  if (r != CUDA_SUCCESS) {
    note_failure(F_ALLOC, "cuemm_torch_segment_alloc(%zu bytes, device %d, stream %p%s%s%s)", size, device,
                 (void *)stream, t ? ", tag \"" : "", t ? tag_names[t] : "", t ? "\"" : "");
    return NULL;
  }
  return (void *)(uintptr_t)p;
}

CUEMM_EXTERN void *cuemm_torch_segment_alloc(size_t size, int device, CUstream stream)
{
  return segment_alloc(0, size, device, stream);
}

/* seg_allocs[t]: the segment allocation of tag number t (0: the default,
 * cuemm_torch_segment_alloc itself). */
#define SEG_FN(h, l)                                                                   \
  static void *seg_alloc_##h##l(size_t size, int device, CUstream stream)             \
  {                                                                                    \
    return segment_alloc((h) * 8 + (l), size, device, stream);                        \
  }
#define SEG_ROW(h) SEG_FN(h, 0) SEG_FN(h, 1) SEG_FN(h, 2) SEG_FN(h, 3) SEG_FN(h, 4) SEG_FN(h, 5) SEG_FN(h, 6) SEG_FN(h, 7)
SEG_ROW(1) SEG_ROW(2) SEG_ROW(3) SEG_ROW(4) SEG_ROW(5) SEG_ROW(6) SEG_ROW(7)
SEG_FN(0, 1) SEG_FN(0, 2) SEG_FN(0, 3) SEG_FN(0, 4) SEG_FN(0, 5) SEG_FN(0, 6) SEG_FN(0, 7)
#define SEG_REF(h) seg_alloc_##h##0, seg_alloc_##h##1, seg_alloc_##h##2, seg_alloc_##h##3, \
                   seg_alloc_##h##4, seg_alloc_##h##5, seg_alloc_##h##6, seg_alloc_##h##7
static const cuemm_torch_alloc_fn seg_allocs[MAX_TAGS] = {
  cuemm_torch_segment_alloc, seg_alloc_01, seg_alloc_02, seg_alloc_03, seg_alloc_04, seg_alloc_05, seg_alloc_06,
  seg_alloc_07, SEG_REF(1), SEG_REF(2), SEG_REF(3), SEG_REF(4), SEG_REF(5), SEG_REF(6), SEG_REF(7),
};
_Static_assert(sizeof seg_allocs / sizeof *seg_allocs == MAX_TAGS, "one segment allocation per tag number");

CUEMM_EXTERN CUresult cuemm_torch_segment_alloc_fn(const char *tag, cuemm_torch_alloc_fn *fn)
{
  if (!fn)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_torch_segment_alloc_fn: fn is NULL");
  int t;
  CUresult r = tag_number("cuemm_torch_segment_alloc_fn", tag, 1, &t);
  if (r != CUDA_SUCCESS)
    return r;
  *fn = seg_allocs[t];
  return CUDA_SUCCESS;
}

CUEMM_EXTERN void cuemm_torch_segment_free(void *ptr, size_t size, int device, CUstream stream)
{
  if (!ptr)
    return;
  CUdeviceptr p = (CUdeviceptr)(uintptr_t)ptr;
  cuemm_manager *m = owner(device, p);
  CUresult r = m ? cuemm_free(m, p)
                 : cuemm__error(CUDA_ERROR_INVALID_VALUE, "device %d has no manager: cuemm handed out nothing there",
                                device);
  if (r != CUDA_SUCCESS)
    note_failure(F_FREE, "cuemm_torch_segment_free(%p, %zu bytes, device %d, stream %p)", ptr, size, device,
                 (void *)stream);
}

CUEMM_EXTERN CUresult cuemm_adapter_get_stats(cuemm_adapter_stats *s)
{
  if (!s)
    return cuemm__error(CUDA_ERROR_INVALID_VALUE, "cuemm_adapter_get_stats: s is NULL");
  memset(s, 0, sizeof *s);
  s->devices = atomic_load(&ndevices);
  pthread_mutex_lock(&fail_lock);
  s->alloc_failures = fails[F_ALLOC];
  s->free_failures = fails[F_FREE];
  s->record_stream_failures = fails[F_RECORD];
  s->empty_cache_failures = fails[F_EMPTY];
  s->graph_failures = fails[F_GRAPH];
  s->empty_caches = empty_caches;
  s->graph_pools = graph_pools;
  s->graph_blocks_held = graph_held;
  snprintf(s->last_failure, sizeof s->last_failure, "%s", last_failure);
  pthread_mutex_unlock(&fail_lock);
  return CUDA_SUCCESS;
}
