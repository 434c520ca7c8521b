/* nvtx.c: owns the annotations of pool blocks for tools that read NVTX's
 * memory API, compute-sanitizer's memcheck above all: the client side of
 * NVTX's injection protocol and the registrations themselves.
 *
 * NVTX is a header-only library whose functions do nothing until a tool
 * attaches; cuemm builds without the CUDA toolkit's NVTX headers, so this
 * file speaks the protocol itself, with declarations written from the
 * published NVTX 3 headers (c/include/nvtx3 in github.com/NVIDIA/NVTX, the
 * version the CUDA 13 toolkit ships as include/nvtx3):
 *
 *   - The tool is the shared library NVTX_INJECTION64_PATH names
 *     (NVTX_INJECTION32_PATH in a 32-bit process); nothing else is searched
 *     (the headers' process-wide lookup is disabled, and a static injection
 *     cannot apply to a library that declares none).
 *   - Core: its InitializeInjectionNvtx2(getExportTable) is called with a
 *     function that answers export table 1 (callbacks: the function table
 *     of each callback module, an array of pointers to function-pointer
 *     slots indexed by callback id, entry 0 and a trailing entry NULL) and
 *     3 (version info, NVTX_VERSION 3).  The tool fills the slots it
 *     implements; cuemm uses only CORE2's nvtxDomainCreateA (id 12) and
 *     nvtxInitialize (id 15).  Returning 0 means the tool refused.
 *   - Memory extension: its InitializeInjectionNvtxExtension(moduleInfo)
 *     is called with NVTX version 3, module id 1 (NVTX_EXT_MODULEID_MEM),
 *     compatibility id 0x0102 (NVTX_EXT_COMPATID_MEM) and one segment, id
 *     1, of 63 slots (NVTX_EXT_MEM_SLOT_COUNT), in which the tool stores
 *     the function of callback id k in slot k: nvtxMemHeapRegister 0,
 *     nvtxMemHeapUnregister 1, nvtxMemHeapReset 2, nvtxMemRegionsRegister
 *     3, nvtxMemRegionsUnregister 5 (NVTX3EXT_CBID_*).  A slot left 0 (or
 *     set to 1, "disabled") has no function.  Returning 0 means the tool
 *     refused.  This is the layout of nvtxDetail/nvtxExtImplMem_v1.h in
 *     that toolkit, which its tools read; some NVTX sources had one
 *     segment, id 0, of 17 slots numbered from 1 instead.  A tool that
 *     fills the slots from 1 leaves slot 0 empty, and is left alone.
 *
 * The calls come in the order an NVTX program makes them: core
 * initialization, nvtxDomainCreateA("cuemm"), nvtxInitialize(NULL), then
 * the extension's initialization (the headers' extension loader calls
 * nvtxInitialize first), and only then heaps and regions; compute-sanitizer
 * wants a domain for every call and a CUDA context before any, and the
 * first pool is created in one.  A failure anywhere leaves annotations off
 * for the process, silently: cuemm's calls never fail because of a tool.
 *
 * What is registered (compute-sanitizer's sub-allocation API): each mapped
 * chunk of the pool (one cuMemCreate and one cuMemMap each, the unit the
 * driver and the tool know as an allocation) is a heap of usage
 * NVTX_MEM_HEAP_USAGE_TYPE_SUB_ALLOCATOR over NVTX_MEM_TYPE_VIRTUAL_ADDRESS,
 * inside which only registered regions may be accessed; each block handed
 * to the program is a region of the bytes it asked for.  A block that
 * spans chunks (growths are mapped side by side, and free space joins
 * across them) is registered as one region per chunk it covers, each in
 * its chunk's heap; accesses never straddle a chunk boundary, which is
 * aligned to the allocation granularity.  Regions are unregistered by
 * pointer when the block stops being the program's; heaps when their
 * chunk is unmapped or the pool destroyed.  The live regions are kept in a
 * table so that each is unregistered exactly once whatever path the block
 * takes back to the pool.
 *
 * The pool (pool.c) sits above this file and is not read here: it gives
 * its address range when it is created and each chunk's address and size
 * as the chunk is mapped and unmapped, and the per-pool state keeps its
 * own record of which chunk each unit lies in, enough to cut a block into
 * its per-chunk regions.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "trace/nvtx.h"

/* ---- the NVTX ABI ------------------------------------------------------------------ */

#define NV_VERSION 3
#define NV_ETID_CALLBACKS 1
#define NV_ETID_VERSIONINFO 3

/* Callback modules and the number of ids of each (NVTX_CBID_*_SIZE), id 0
 * invalid. */
enum { NV_MOD_CORE = 1, NV_MOD_CUDA, NV_MOD_OPENCL, NV_MOD_CUDART, NV_MOD_CORE2, NV_MOD_SYNC, NV_MODS };
static const unsigned nv_mod_ids[NV_MODS] = { 0, 16, 9, 15, 7, 16, 7 };
#define NV_MAX_IDS 16
#define NV_CORE2_DOMAIN_CREATE_A 12
#define NV_CORE2_INITIALIZE 15

typedef void (*nv_fn)(void);
typedef const void *(*nv_get_export_table_fn)(uint32_t id);
typedef int (*nv_init_core_fn)(nv_get_export_table_fn get);
typedef void *(*nv_domain_create_a_fn)(const char *name);
typedef void (*nv_initialize_fn)(const void *reserved);

typedef struct nv_etbl_callbacks {
  size_t struct_size;
  int (*get_module_function_table)(int module, nv_fn ***out_table, unsigned *out_size);
} nv_etbl_callbacks;

typedef struct nv_etbl_version {
  size_t struct_size;
  uint32_t version;
  uint32_t reserved0;
  void (*set_injection_version)(uint32_t version);
} nv_etbl_version;

/* The memory extension. */
#define NV_MEM_MODULE_ID 1
#define NV_MEM_COMPAT_ID 0x0102
#define NV_MEM_SEGMENT_ID 1
#define NV_MEM_SLOTS 63
#define NV_EXT_FRESH 0
#define NV_EXT_DISABLED 1
enum {
  NV_MEM_HEAP_REGISTER = 0,
  NV_MEM_HEAP_UNREGISTER = 1,
  NV_MEM_HEAP_RESET = 2,
  NV_MEM_REGIONS_REGISTER = 3,
  NV_MEM_REGIONS_UNREGISTER = 5,
};
#define NV_MEM_HEAP_USAGE_SUB_ALLOCATOR 1
#define NV_MEM_TYPE_VIRTUAL_ADDRESS 1
#define NV_MEM_REF_POINTER 1
#define NV_MEM_HEAP_NO_TOOL ((void *)(intptr_t)-1)

typedef struct nv_ext_segment {
  size_t segment_id;
  size_t slot_count;
  intptr_t *slots;
} nv_ext_segment;

typedef struct nv_ext_module {
  uint16_t nvtx_ver;
  uint16_t struct_size;
  uint16_t module_id;
  uint16_t compat_id;
  size_t segments_count;
  nv_ext_segment *segments;
  intptr_t (*get_export_function)(uint32_t id);
  const void *ext_info;
} nv_ext_module;

typedef int (*nv_init_ext_fn)(nv_ext_module *module);

/* nvtxMemVirtualRangeDesc_v1: size first. */
typedef struct nv_range {
  size_t size;
  const void *ptr;
} nv_range;

/* nvtxMemHeapDesc_v1 */
typedef struct nv_heap_desc {
  uint16_t ext_compat_id;
  uint16_t struct_size;
  uint32_t reserved0;
  uint32_t usage;
  uint32_t type;
  size_t type_desc_size;
  const void *type_desc;
  uint32_t category;
  uint32_t message_type;
  const void *message;  /* nvtxMessageValue_t, a union of pointers */
} nv_heap_desc;

/* nvtxMemRegionsRegisterBatch_v1 */
typedef struct nv_regions_register {
  uint16_t ext_compat_id;
  uint16_t struct_size;
  uint32_t region_type;
  void *heap;
  size_t region_count;
  size_t region_desc_size;
  const void *region_descs;
  void **handles_out;
} nv_regions_register;

/* nvtxMemRegionsUnregisterBatch_v1; the references are nvtxMemRegionRef_t,
 * a union of pointers. */
typedef struct nv_regions_unregister {
  uint16_t ext_compat_id;
  uint16_t struct_size;
  uint32_t ref_type;
  size_t ref_count;
  size_t ref_size;
  const void *refs;
} nv_regions_unregister;

_Static_assert(sizeof(nv_ext_segment) == 3 * sizeof(void *), "nvtxExtModuleSegment_t");
_Static_assert(sizeof(nv_ext_module) == 8 + 4 * sizeof(void *), "nvtxExtModuleInfo_t");
_Static_assert(sizeof(nv_range) == 2 * sizeof(void *), "nvtxMemVirtualRangeDesc_v1");
_Static_assert(sizeof(void *) != 8 || sizeof(nv_heap_desc) == 48, "nvtxMemHeapDesc_v1");
_Static_assert(sizeof(void *) != 8 || sizeof(nv_regions_register) == 48, "nvtxMemRegionsRegisterBatch_v1");
_Static_assert(sizeof(void *) != 8 || sizeof(nv_regions_unregister) == 32, "nvtxMemRegionsUnregisterBatch_v1");

typedef void *(*nv_heap_register_fn)(void *domain, const nv_heap_desc *desc);
typedef void (*nv_heap_unregister_fn)(void *domain, void *heap);
typedef void (*nv_regions_register_fn)(void *domain, const nv_regions_register *desc);
typedef void (*nv_regions_unregister_fn)(void *domain, const nv_regions_unregister *desc);

/* ---- the client's side of the core protocol ---------------------------------------- */

/* Every module's function slots and tables, for the life of the process:
 * a tool may keep the table pointers. */
static nv_fn nv_slots[NV_MODS][NV_MAX_IDS];
static nv_fn *nv_tables[NV_MODS][NV_MAX_IDS + 1];

static int nv_get_module_function_table(int module, nv_fn ***out_table, unsigned *out_size)
{
  if (module <= 0 || module >= NV_MODS)
    return 0;
  if (out_size)
    *out_size = nv_mod_ids[module];
  if (out_table)
    *out_table = nv_tables[module];
  return 1;
}

static void nv_set_injection_version(uint32_t version)
{
  (void)version;
}

static const nv_etbl_callbacks nv_callbacks = { sizeof(nv_etbl_callbacks), nv_get_module_function_table };
static const nv_etbl_version nv_version = { sizeof(nv_etbl_version), NV_VERSION, 0, nv_set_injection_version };

static const void *nv_get_export_table(uint32_t id)
{
  if (id == NV_ETID_CALLBACKS)
    return &nv_callbacks;
  if (id == NV_ETID_VERSIONINFO)
    return &nv_version;
  return NULL;
}

/* ---- the tool ---------------------------------------------------------------------- */

static struct {
  pthread_once_t once;
  int on;
  atomic_int refused;   /* the tool refused a heap: it cannot check such memory, ask it no more */
  void *domain;
  intptr_t mem[NV_MEM_SLOTS];  /* the extension's segment: the tool's functions by callback id */
  nv_heap_register_fn heap_register;
  nv_heap_unregister_fn heap_unregister;
  nv_regions_register_fn regions_register;
  nv_regions_unregister_fn regions_unregister;
} tool = { .once = PTHREAD_ONCE_INIT };

static int slot_set(intptr_t v)
{
  return v != NV_EXT_FRESH && v != NV_EXT_DISABLED;
}

static void tool_load(void)
{
  const char *path = getenv(sizeof(void *) == 4 ? "NVTX_INJECTION32_PATH" : "NVTX_INJECTION64_PATH");
  if (!path || !*path)
    return;
  void *lib = dlopen(path, RTLD_LAZY);
  if (!lib)
    return;
  nv_init_core_fn init_core = (nv_init_core_fn)dlsym(lib, "InitializeInjectionNvtx2");
  nv_init_ext_fn init_ext = (nv_init_ext_fn)dlsym(lib, "InitializeInjectionNvtxExtension");
  if (!init_ext) {
    dlclose(lib);
    return;
  }
  /* From here on the library stays loaded, whatever it answers: it may
   * keep pointers into this process (NVTX's own loader keeps it too). */
  for (int m = 1; m < NV_MODS; m++) {
    for (unsigned i = 1; i < nv_mod_ids[m]; i++)
      nv_tables[m][i] = &nv_slots[m][i];
  }
  if (init_core && init_core(nv_get_export_table)) {
    nv_domain_create_a_fn create = (nv_domain_create_a_fn)nv_slots[NV_MOD_CORE2][NV_CORE2_DOMAIN_CREATE_A];
    nv_initialize_fn initialize = (nv_initialize_fn)nv_slots[NV_MOD_CORE2][NV_CORE2_INITIALIZE];
    if (create)
      tool.domain = create("cuemm");
    if (initialize)
      initialize(NULL);
  }
  nv_ext_segment segment = { NV_MEM_SEGMENT_ID, NV_MEM_SLOTS, tool.mem };
  nv_ext_module module = { NV_VERSION, sizeof(nv_ext_module), NV_MEM_MODULE_ID, NV_MEM_COMPAT_ID, 1, &segment,
                           NULL, NULL };
  if (!init_ext(&module))
    return;
  /* Every function used must be there; a tool numbering the slots from 1
   * leaves slot 0 (nvtxMemHeapRegister) empty and stops here. */
  if (!slot_set(tool.mem[NV_MEM_HEAP_REGISTER]) || !slot_set(tool.mem[NV_MEM_HEAP_UNREGISTER]) ||
      !slot_set(tool.mem[NV_MEM_REGIONS_REGISTER]) || !slot_set(tool.mem[NV_MEM_REGIONS_UNREGISTER]))
    return;
  tool.heap_register = (nv_heap_register_fn)tool.mem[NV_MEM_HEAP_REGISTER];
  tool.heap_unregister = (nv_heap_unregister_fn)tool.mem[NV_MEM_HEAP_UNREGISTER];
  tool.regions_register = (nv_regions_register_fn)tool.mem[NV_MEM_REGIONS_REGISTER];
  tool.regions_unregister = (nv_regions_unregister_fn)tool.mem[NV_MEM_REGIONS_UNREGISTER];
  tool.on = 1;
}

int cuemm__nvtx_start(void)
{
  pthread_once(&tool.once, tool_load);
  return tool.on;
}

static void *heap_register(uintptr_t base, size_t bytes)
{
  nv_range range = { bytes, (const void *)base };
  nv_heap_desc desc;
  memset(&desc, 0, sizeof desc);
  desc.ext_compat_id = NV_MEM_COMPAT_ID;
  desc.struct_size = sizeof desc;
  desc.usage = NV_MEM_HEAP_USAGE_SUB_ALLOCATOR;
  desc.type = NV_MEM_TYPE_VIRTUAL_ADDRESS;
  desc.type_desc_size = sizeof range;
  desc.type_desc = &range;
  void *h = tool.heap_register(tool.domain, &desc);
  if (!h) /* compute-sanitizer 2025.3 on memory mapped with cuMemMap: one warning, not one per chunk */
    atomic_store(&tool.refused, 1);
  return h == NV_MEM_HEAP_NO_TOOL ? NULL : h;
}

static void region_register(void *heap, uintptr_t ptr, size_t size)
{
  nv_range range = { size, (const void *)ptr };
  nv_regions_register batch;
  memset(&batch, 0, sizeof batch);
  batch.ext_compat_id = NV_MEM_COMPAT_ID;
  batch.struct_size = sizeof batch;
  batch.region_type = NV_MEM_TYPE_VIRTUAL_ADDRESS;
  batch.heap = heap;
  batch.region_count = 1;
  batch.region_desc_size = sizeof range;
  batch.region_descs = &range;
  tool.regions_register(tool.domain, &batch);
}

static void regions_unregister(const void *const *refs, size_t n)
{
  nv_regions_unregister batch;
  memset(&batch, 0, sizeof batch);
  batch.ext_compat_id = NV_MEM_COMPAT_ID;
  batch.struct_size = sizeof batch;
  batch.ref_type = NV_MEM_REF_POINTER;
  batch.ref_count = n;
  batch.ref_size = sizeof *refs;
  batch.refs = refs;
  tool.regions_unregister(tool.domain, &batch);
}

/* ---- a pool's annotations ------------------------------------------------------------ */

typedef struct live_region {
  uintptr_t ptr;  /* 0: empty */
  size_t size;
} live_region;

/* What the state knows of the pool's range, from the chunks the pool
 * reported mapped: a run (base/runs.h) for each chunk while it is a heap,
 * in `runs`, and beside it, by the same unit, the heap in `units`. */
typedef struct nv_unit {
  void *heap;     /* at a chunk's head: the tool's heap, NULL when none */
} nv_unit;

struct cuemm__nvtx_pool {
  pthread_mutex_t lock;
  const cuemm__driver_table *drv;
  CUcontext ctx;        /* the pool's context, current around the tool's calls */
  uintptr_t base;       /* the pool's range: nunits units of `unit` bytes */
  size_t unit, nunits;
  int slab;             /* the range is one allocation: one heap, which every chunk's entry names */
  int off;              /* annotations stopped (no host memory for the table): every heap is gone */
  cuemm__run *runs;     /* the chunks that are heaps: a run of units each */
  nv_unit *units;
  void *slab_heap;
  live_region *live;    /* the registered blocks, open addressing on the address */
  size_t cap, used;
};

struct cuemm__nvtx_pool *cuemm__nvtx_pool_new(const cuemm__driver_table *drv, CUdeviceptr base, size_t reserved,
                                              size_t unit, int slab)
{
  if (!cuemm__nvtx_start() || unit == 0 || reserved / unit > UINT32_MAX)
    return NULL;
  struct cuemm__nvtx_pool *np = calloc(1, sizeof *np);
  if (!np)
    return NULL;
  np->drv = drv;
  np->base = (uintptr_t)base;
  np->unit = unit;
  np->nunits = reserved / unit;
  np->slab = slab;
  np->runs = calloc(np->nunits ? np->nunits : 1, sizeof *np->runs);
  np->units = calloc(np->nunits ? np->nunits : 1, sizeof *np->units);
  np->cap = 256;
  np->live = calloc(np->cap, sizeof *np->live);
  if (!np->runs || !np->units || !np->live) {
    free(np->runs);
    free(np->units);
    free(np->live);
    free(np);
    return NULL;
  }
  pthread_mutex_init(&np->lock, NULL);
  if (drv->CtxGetCurrent(&np->ctx) != CUDA_SUCCESS) /* cuemm__pool_create runs in the manager's context */
    np->ctx = NULL;
  /* A slab is one allocation from the start: one heap, which a tool that
   * refuses memory mapped with cuMemMap takes. */
  if (slab && !atomic_load(&tool.refused))
    np->slab_heap = heap_register((uintptr_t)base, reserved);
  return np;
}

/* The tool is told of memory with the pool's context current, as a
 * program using NVTX would be in its own: cuemm_alloc and the
 * stream-ordered fast paths run in whatever context the caller has
 * current.  Best effort: a failing driver call leaves the context as it
 * is.  Returns whether it pushed. */
static int ctx_in(const struct cuemm__nvtx_pool *np)
{
  CUcontext cur = NULL;
  if (!np->ctx || np->drv->CtxGetCurrent(&cur) != CUDA_SUCCESS || cur == np->ctx)
    return 0;
  return np->drv->CtxPushCurrent(np->ctx) == CUDA_SUCCESS;
}

static void ctx_out(const struct cuemm__nvtx_pool *np, int pushed)
{
  CUcontext popped;
  if (pushed)
    np->drv->CtxPopCurrent(&popped);
}

static size_t slot_of(uintptr_t ptr, size_t cap)
{
  return (size_t)(((uint64_t)ptr * UINT64_C(0x9E3779B97F4A7C15)) >> 32) & (cap - 1);
}

static live_region *live_find(struct cuemm__nvtx_pool *np, uintptr_t ptr)
{
  for (size_t i = slot_of(ptr, np->cap);; i = (i + 1) & (np->cap - 1)) {
    if (np->live[i].ptr == ptr)
      return &np->live[i];
    if (np->live[i].ptr == 0)
      return NULL;
  }
}

static void live_put(live_region *t, size_t cap, uintptr_t ptr, size_t size)
{
  size_t i = slot_of(ptr, cap);
  while (t[i].ptr)
    i = (i + 1) & (cap - 1);
  t[i] = (live_region){ ptr, size };
}

/* Removes an entry, moving later entries of its run back (linear probing
 * without tombstones). */
static void live_remove(struct cuemm__nvtx_pool *np, live_region *e)
{
  size_t i = (size_t)(e - np->live), mask = np->cap - 1;
  np->live[i].ptr = 0;
  np->used--;
  for (size_t j = (i + 1) & mask; np->live[j].ptr; j = (j + 1) & mask) {
    size_t home = slot_of(np->live[j].ptr, np->cap);
    /* The entry at j stays unless its home lies cyclically outside (i, j]. */
    if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
      np->live[i] = np->live[j];
      np->live[j].ptr = 0;
      i = j;
    }
  }
}

static int live_grow(struct cuemm__nvtx_pool *np)
{
  size_t cap = np->cap * 2;
  live_region *t = calloc(cap, sizeof *t);
  if (!t)
    return -1;
  for (size_t i = 0; i < np->cap; i++)
    if (np->live[i].ptr)
      live_put(t, cap, np->live[i].ptr, np->live[i].size);
  free(np->live);
  np->live = t;
  np->cap = cap;
  return 0;
}

/* The part of [a, stop) that lies in a's chunk: returns where it ends, and
 * the chunk's heap in *heap (NULL when the chunk is none).  A unit in no
 * chunk that is a heap is a part of its own, with no heap; an address
 * outside the range ends the walk rather than loop. */
static uintptr_t part_end(const struct cuemm__nvtx_pool *np, uintptr_t a, uintptr_t stop, void **heap)
{
  *heap = NULL;
  if (a < np->base || (a - np->base) / np->unit >= np->nunits)
    return stop;
  size_t u = (a - np->base) / np->unit, head = cuemm__runs_covering(np->runs, u), n = 1;
  if (head != CUEMM__RUNS_NONE) {
    n = cuemm__runs_units(np->runs, head);
    *heap = np->units[head].heap;
  } else
    head = u;
  uintptr_t end = np->base + (head + n) * np->unit;
  return end < stop ? end : stop;
}

#define REFS_PER_CALL 16

static void unregister_locked(struct cuemm__nvtx_pool *np, live_region *e)
{
  const void *refs[REFS_PER_CALL];
  size_t n = 0;
  void *heap;
  for (uintptr_t a = e->ptr, stop = e->ptr + e->size, end; a < stop; a = end) {
    end = part_end(np, a, stop, &heap);
    if (!heap)
      continue;
    refs[n++] = (const void *)a;
    if (n == REFS_PER_CALL) {
      regions_unregister(refs, n);
      n = 0;
    }
  }
  if (n)
    regions_unregister(refs, n);
  live_remove(np, e);
}

/* Tells the tool every heap is gone (their regions with them) and forgets
 * the regions. */
static void drop_all_locked(struct cuemm__nvtx_pool *np, int tell_tool)
{
  for (size_t u = 0; u < np->nunits; u++)
    if (np->units[u].heap) {
      if (tell_tool && !np->slab_heap)
        tool.heap_unregister(tool.domain, np->units[u].heap);
      np->units[u].heap = NULL;
      cuemm__runs_clear(np->runs, u);
    }
  if (np->slab_heap && tell_tool)
    tool.heap_unregister(tool.domain, np->slab_heap);
  np->slab_heap = NULL;
  memset(np->live, 0, np->cap * sizeof *np->live);
  np->used = 0;
}

/* The unit at which `at` starts, or nunits when it is not a unit boundary
 * of the range. */
static size_t unit_of(const struct cuemm__nvtx_pool *np, CUdeviceptr at)
{
  uintptr_t a = (uintptr_t)at;
  if (a < np->base || (a - np->base) % np->unit)
    return np->nunits;
  size_t u = (a - np->base) / np->unit;
  return u < np->nunits ? u : np->nunits;
}

void cuemm__nvtx_chunk_mapped_(struct cuemm__nvtx_pool *np, CUdeviceptr at, size_t bytes)
{
  size_t head = unit_of(np, at), n = bytes / np->unit;
  pthread_mutex_lock(&np->lock);
  if (!np->off && !atomic_load(&tool.refused) && head < np->nunits && n && n <= np->nunits - head &&
      !np->units[head].heap) {
    void *heap = np->slab ? np->slab_heap : heap_register((uintptr_t)at, n * np->unit);
    if (heap) {
      cuemm__runs_mark(np->runs, head, n);
      np->units[head].heap = heap;
    }
  }
  pthread_mutex_unlock(&np->lock);
}

void cuemm__nvtx_chunk_unmapping_(struct cuemm__nvtx_pool *np, CUdeviceptr at)
{
  size_t head = unit_of(np, at);
  pthread_mutex_lock(&np->lock);
  if (head < np->nunits && np->units[head].heap) {
    if (!np->slab) /* the slab's heap stays: the chunk is free memory of it */
      tool.heap_unregister(tool.domain, np->units[head].heap);
    np->units[head].heap = NULL;
    cuemm__runs_clear(np->runs, head);
  }
  pthread_mutex_unlock(&np->lock);
}

void cuemm__nvtx_pool_gone_(struct cuemm__nvtx_pool *np, int tell_tool)
{
  drop_all_locked(np, tell_tool);
  pthread_mutex_destroy(&np->lock);
  free(np->runs);
  free(np->units);
  free(np->live);
  free(np);
}

void cuemm__nvtx_live_(struct cuemm__nvtx_pool *np, uintptr_t ptr, size_t size)
{
  int pushed = ctx_in(np);
  pthread_mutex_lock(&np->lock);
  if (np->off)
    goto out;
  live_region *e = live_find(np, ptr);
  if (e) /* not given up on some path: registered afresh */
    unregister_locked(np, e);
  if (2 * (np->used + 1) > np->cap && live_grow(np) != 0) {
    /* Without the table a region could not be unregistered: rather than
     * leave the tool a wrong picture, it hears of no pool at all. */
    drop_all_locked(np, 1);
    np->off = 1;
    goto out;
  }
  live_put(np->live, np->cap, ptr, size);
  np->used++;
  void *heap;
  for (uintptr_t a = ptr, stop = ptr + size, end; a < stop; a = end) {
    end = part_end(np, a, stop, &heap);
    if (heap)
      region_register(heap, a, end - a);
  }
out:
  pthread_mutex_unlock(&np->lock);
  ctx_out(np, pushed);
}

void cuemm__nvtx_dead_(struct cuemm__nvtx_pool *np, uintptr_t ptr)
{
  int pushed = ctx_in(np);
  pthread_mutex_lock(&np->lock);
  live_region *e = np->off ? NULL : live_find(np, ptr);
  if (e)
    unregister_locked(np, e);
  pthread_mutex_unlock(&np->lock);
  ctx_out(np, pushed);
}
