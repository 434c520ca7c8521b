/* nvtx-tool.c: a stand-in for a tool that reads NVTX's memory API (what
 * compute-sanitizer loads through NVTX_INJECTION64_PATH), for
 * tests/test-nvtx.c.
 *
 * It exports the two entry points the NVTX 3 headers look up in an
 * injection library, answers them as a tool would (the core's function
 * table for nvtxDomainCreateA and nvtxInitialize, the memory extension's
 * slots for heaps and regions), and writes every call it receives, one
 * line each, to the file NVTX_TOOL_LOG names:
 *
 *   core                        InitializeInjectionNvtx2 was called
 *   domain NAME                 nvtxDomainCreateA
 *   initialize                  nvtxInitialize
 *   ext                         InitializeInjectionNvtxExtension
 *   heap ID BASE SIZE           nvtxMemHeapRegister (BASE in hex; ID from 1)
 *   unheap ID                   nvtxMemHeapUnregister
 *   reset ID                    nvtxMemHeapReset
 *   region ID PTR SIZE          nvtxMemRegionsRegister, one line a region
 *   unregion PTR                nvtxMemRegionsUnregister, one line a reference
 *   error TEXT                  anything a tool would refuse: a structure of
 *                               the wrong size or compatibility id, a table
 *                               of the wrong shape, a region outside its heap
 *                               or over another, a heap over another, an
 *                               unknown heap, domain or region, a call with
 *                               no CUDA context current
 *
 * The layouts below are written from the NVTX headers on their own and
 * checked against the sizes those headers give on LP64, so that cuemm's
 * declarations (src/trace/nvtx.c) are checked by a second reading.
 *
 * NVTX_TOOL_FAIL makes it misbehave as a broken or foreign tool would:
 * "core" (InitializeInjectionNvtx2 returns 0), "ext" (the extension's
 * returns 0), "from1" (it numbers the memory extension's slots from 1, as
 * some NVTX sources did, so that nvtxMemHeapRegister lands in slot 1),
 * "noregion" (it leaves nvtxMemRegionsRegister empty), "heap" (it refuses
 * every heap, as compute-sanitizer 2025.3 does on memory mapped with
 * cuMemMap: the call returns NULL and the tool logs "heap refused").
 */
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOOL_EXPORT __attribute__((visibility("default")))

typedef void (*fnptr)(void);
typedef const void *(*get_export_table_fn)(uint32_t id);

typedef struct callbacks_table {
  size_t struct_size;
  int (*get_module_function_table)(int module, fnptr ***table, unsigned *size);
} callbacks_table;

typedef struct version_table {
  size_t struct_size;
  uint32_t version;
  uint32_t reserved0;
  void (*set_injection_version)(uint32_t);
} version_table;

typedef struct module_segment {
  size_t segment_id;
  size_t slot_count;
  intptr_t *function_slots;
} module_segment;

typedef struct module_info {
  uint16_t nvtx_ver;
  uint16_t struct_size;
  uint16_t module_id;
  uint16_t compat_id;
  size_t segments_count;
  module_segment *segments;
  intptr_t (*get_export_function)(uint32_t);
  const void *ext_info;
} module_info;

typedef struct virtual_range {
  size_t size;
  const void *ptr;
} virtual_range;

typedef struct heap_desc {
  uint16_t ext_compat_id;
  uint16_t struct_size;
  uint32_t reserved0;
  uint32_t usage;
  uint32_t type;
  size_t type_specific_desc_size;
  const void *type_specific_desc;
  uint32_t category;
  uint32_t message_type;
  const void *message;
} heap_desc;

typedef struct regions_register_batch {
  uint16_t ext_compat_id;
  uint16_t struct_size;
  uint32_t region_type;
  void *heap;
  size_t region_count;
  size_t region_desc_element_size;
  const void *region_desc_elements;
  void **region_handle_elements_out;
} regions_register_batch;

typedef struct regions_unregister_batch {
  uint16_t ext_compat_id;
  uint16_t struct_size;
  uint32_t ref_type;
  size_t ref_count;
  size_t ref_element_size;
  const void *const *ref_elements;
} regions_unregister_batch;

_Static_assert(sizeof(void *) != 8 || sizeof(module_info) == 40, "nvtxExtModuleInfo_t is 40 bytes on LP64");
_Static_assert(sizeof(void *) != 8 || sizeof(heap_desc) == 48, "nvtxMemHeapDesc_v1 is 48 bytes on LP64");
_Static_assert(sizeof(void *) != 8 || sizeof(regions_register_batch) == 48, "nvtxMemRegionsRegisterBatch_v1: 48");
_Static_assert(sizeof(void *) != 8 || sizeof(regions_unregister_batch) == 32, "nvtxMemRegionsUnregisterBatch_v1: 32");

/* The exported entry points (prototypes for -Wmissing-prototypes). */
TOOL_EXPORT int InitializeInjectionNvtx2(get_export_table_fn get);
TOOL_EXPORT int InitializeInjectionNvtxExtension(module_info *info);

/* ---- the log ----------------------------------------------------------------- */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void say(const char *fmt, ...)
{
  const char *path = getenv("NVTX_TOOL_LOG");
  if (!path)
    return;
  FILE *f = fopen(path, "a");
  if (!f)
    return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fputc('\n', f);
  fclose(f);
}

static int failing(const char *what)
{
  const char *f = getenv("NVTX_TOOL_FAIL");
  return f && strcmp(f, what) == 0;
}

/* ---- what the tool knows ------------------------------------------------------ */

#define MAX_HEAPS 256
#define MAX_REGIONS 4096

static struct heap {
  uintptr_t base;
  size_t size;
  int live;
} heaps[MAX_HEAPS];
static int nheaps;

static struct region {
  uintptr_t ptr;
  size_t size;
  int heap;  /* 0: unused */
} regions[MAX_REGIONS];

static char domain_object;  /* the domain handle this tool gives out */
static void *domain_handle;  /* NULL until nvtxDomainCreateA: then calls must name it */

/* A tool finds the memory it is told of through the calling thread's
 * CUDA context: one must be current (checked when the process has the
 * driver loaded). */
static void check_context(const char *call)
{
  typedef int (*get_current_fn)(void **);
  get_current_fn get = (get_current_fn)dlsym(RTLD_DEFAULT, "cuCtxGetCurrent");
  void *ctx = NULL;
  if (get && (get(&ctx) != 0 || !ctx))
    say("error %s with no CUDA context current", call);
}

static int check_domain(void *domain)
{
  if (domain != domain_handle) {
    say("error domain %p is not the one created (%p)", domain, domain_handle);
    return 0;
  }
  return 1;
}

/* The heap a handle names (1-based), 0 for none. */
static int heap_id(void *handle)
{
  uintptr_t h = (uintptr_t)handle, first = (uintptr_t)heaps;
  if (h < first || (h - first) % sizeof heaps[0] != 0)
    return 0;
  size_t i = (h - first) / sizeof heaps[0];
  if (i >= (size_t)nheaps || !heaps[i].live)
    return 0;
  return (int)i + 1;
}

static int overlaps(uintptr_t a, size_t as, uintptr_t b, size_t bs)
{
  return a < b + bs && b < a + as;
}

/* ---- the core ------------------------------------------------------------------ */

static void *domain_create_a(const char *name)
{
  pthread_mutex_lock(&lock);
  say("domain %s", name ? name : "(null)");
  domain_handle = &domain_object;
  pthread_mutex_unlock(&lock);
  return domain_handle;
}

static void initialize(const void *reserved)
{
  pthread_mutex_lock(&lock);
  say(reserved ? "error initialize with a reserved argument" : "initialize");
  pthread_mutex_unlock(&lock);
}

TOOL_EXPORT int InitializeInjectionNvtx2(get_export_table_fn get)
{
  /* Callback modules 1..6 and their sizes (NVTX_CBID_*_SIZE). */
  static const unsigned sizes[7] = { 0, 16, 9, 15, 7, 16, 7 };
  pthread_mutex_lock(&lock);
  say("core");
  int good = 1;
  const callbacks_table *cb = get ? get(1) : NULL;
  const version_table *vt = get ? get(3) : NULL;
  if (!cb || cb->struct_size != sizeof *cb || !cb->get_module_function_table) {
    say("error export table 1 (callbacks) missing or of the wrong size");
    good = 0;
  }
  if (!vt || vt->struct_size != sizeof *vt || vt->version != 3 || !vt->set_injection_version) {
    say("error export table 3 (version info) missing, of the wrong size or not version 3");
    good = 0;
  } else
    vt->set_injection_version(3);
  if (get && (get(0) != NULL || get(2) != NULL || get(4) != NULL)) {
    say("error export tables 0, 2 and 4 do not exist");
    good = 0;
  }
  for (int m = 0; good && m <= 7; m++) {
    fnptr **table = NULL;
    unsigned size = 0;
    int r = cb->get_module_function_table(m, &table, &size);
    if (m == 0 || m == 7) {
      if (r != 0) {
        say("error module %d exists", m);
        good = 0;
      }
      continue;
    }
    if (r != 1 || !table || size != sizes[m] || table[0] != NULL || table[size] != NULL) {
      say("error module %d: result %d, %u entries (want %u), entry 0 and the one past the end must be NULL", m, r,
          size, sizes[m]);
      good = 0;
      continue;
    }
    for (unsigned i = 1; i < size; i++)
      if (!table[i]) {
        say("error module %d: slot %u missing", m, i);
        good = 0;
      }
    if (good && m == 5) { /* CORE2 */
      *table[12] = (fnptr)domain_create_a;
      *table[15] = (fnptr)initialize;
    }
  }
  int ok = good && !failing("core");
  pthread_mutex_unlock(&lock);
  return ok;
}

/* ---- the memory extension ------------------------------------------------------ */

static int check_struct(const char *what, uint16_t compat, uint16_t size, size_t want)
{
  if (compat != 0x0102 || size != want) {
    say("error %s: compatibility id 0x%x (want 0x102), size %u (want %zu)", what, (unsigned)compat, (unsigned)size,
        want);
    return 0;
  }
  return 1;
}

static void *heap_register(void *domain, const heap_desc *d)
{
  pthread_mutex_lock(&lock);
  check_context("heap");
  void *h = NULL;
  if (!check_domain(domain) || !check_struct("heap", d->ext_compat_id, d->struct_size, sizeof *d))
    goto out;
  if (d->usage != 1 || d->type != 1 || d->type_specific_desc_size != sizeof(virtual_range) ||
      !d->type_specific_desc || d->reserved0 || d->category || d->message_type || d->message) {
    say("error heap: usage %u (want 1, sub-allocator), type %u (want 1, virtual address), descriptor of %zu bytes "
        "(want %zu), reserved and message fields must be zero", d->usage, d->type, d->type_specific_desc_size,
        sizeof(virtual_range));
    goto out;
  }
  const virtual_range *r = d->type_specific_desc;
  uintptr_t base = (uintptr_t)r->ptr;
  if (failing("heap")) {
    say("heap refused 0x%" PRIxPTR " %zu", base, r->size);
    goto out;
  }
  for (int i = 0; i < nheaps; i++)
    if (heaps[i].live && overlaps(base, r->size, heaps[i].base, heaps[i].size)) {
      say("error heap 0x%" PRIxPTR " (%zu bytes) overlaps heap %d", base, r->size, i + 1);
      goto out;
    }
  if (nheaps == MAX_HEAPS || !r->size) {
    say("error heap: empty, or too many heaps");
    goto out;
  }
  heaps[nheaps] = (struct heap){ base, r->size, 1 };
  h = &heaps[nheaps++];
  say("heap %d 0x%" PRIxPTR " %zu", nheaps, base, r->size);
out:
  pthread_mutex_unlock(&lock);
  return h;
}

static void drop_regions_of(int id)
{
  for (int i = 0; i < MAX_REGIONS; i++)
    if (regions[i].heap == id)
      regions[i].heap = 0;
}

static void heap_unregister(void *domain, void *heap)
{
  pthread_mutex_lock(&lock);
  check_context("unheap");
  int id = heap_id(heap);
  if (check_domain(domain) && !id)
    say("error unheap of an unknown heap %p", heap);
  else if (id) {
    heaps[id - 1].live = 0;
    drop_regions_of(id);
    say("unheap %d", id);
  }
  pthread_mutex_unlock(&lock);
}

static void heap_reset(void *domain, void *heap)
{
  pthread_mutex_lock(&lock);
  int id = heap_id(heap);
  if (check_domain(domain) && !id)
    say("error reset of an unknown heap %p", heap);
  else if (id) {
    drop_regions_of(id);
    say("reset %d", id);
  }
  pthread_mutex_unlock(&lock);
}

static void regions_register(void *domain, const regions_register_batch *b)
{
  pthread_mutex_lock(&lock);
  check_context("region");
  int id = heap_id(b->heap);
  if (!check_domain(domain) || !check_struct("region batch", b->ext_compat_id, b->struct_size, sizeof *b))
    goto out;
  if (!id || b->region_type != 1 || b->region_desc_element_size != sizeof(virtual_range) || !b->region_count) {
    say("error region batch: heap %p (%s), type %u (want 1), element of %zu bytes (want %zu), %zu regions", b->heap,
        id ? "known" : "unknown", b->region_type, b->region_desc_element_size, sizeof(virtual_range),
        b->region_count);
    goto out;
  }
  const virtual_range *r = b->region_desc_elements;
  for (size_t k = 0; k < b->region_count; k++) {
    uintptr_t p = (uintptr_t)r[k].ptr;
    const struct heap *h = &heaps[id - 1];
    if (!r[k].size || p < h->base || p + r[k].size > h->base + h->size) {
      say("error region 0x%" PRIxPTR " (%zu bytes) not inside heap %d", p, r[k].size, id);
      continue;
    }
    int slot = -1, bad = 0;
    for (int i = 0; i < MAX_REGIONS; i++) {
      if (regions[i].heap && overlaps(p, r[k].size, regions[i].ptr, regions[i].size)) {
        say("error region 0x%" PRIxPTR " (%zu bytes) overlaps region 0x%" PRIxPTR, p, r[k].size, regions[i].ptr);
        bad = 1;
        break;
      }
      if (!regions[i].heap && slot < 0)
        slot = i;
    }
    if (bad)
      continue;
    if (slot < 0) {
      say("error too many regions");
      continue;
    }
    regions[slot] = (struct region){ p, r[k].size, id };
    if (b->region_handle_elements_out)
      b->region_handle_elements_out[k] = &regions[slot];
    say("region %d 0x%" PRIxPTR " %zu", id, p, r[k].size);
  }
out:
  pthread_mutex_unlock(&lock);
}

static void regions_unregister(void *domain, const regions_unregister_batch *b)
{
  pthread_mutex_lock(&lock);
  check_context("unregion");
  if (!check_domain(domain) || !check_struct("unregister batch", b->ext_compat_id, b->struct_size, sizeof *b))
    goto out;
  if (b->ref_type != 1 || b->ref_element_size != sizeof(void *) || !b->ref_count) {
    say("error unregister batch: reference type %u (want 1, pointer), element of %zu bytes, %zu references",
        b->ref_type, b->ref_element_size, b->ref_count);
    goto out;
  }
  for (size_t k = 0; k < b->ref_count; k++) {
    uintptr_t p = (uintptr_t)b->ref_elements[k];
    int found = 0;
    for (int i = 0; i < MAX_REGIONS && !found; i++)
      if (regions[i].heap && regions[i].ptr == p) {
        regions[i].heap = 0;
        found = 1;
      }
    if (found)
      say("unregion 0x%" PRIxPTR, p);
    else
      say("error unregion of 0x%" PRIxPTR ", not a registered region", p);
  }
out:
  pthread_mutex_unlock(&lock);
}

TOOL_EXPORT int InitializeInjectionNvtxExtension(module_info *info)
{
  pthread_mutex_lock(&lock);
  say("ext");
  int good = 1;
  if (!info || info->nvtx_ver != 3 || info->struct_size != sizeof *info || info->module_id != 1 ||
      info->compat_id != 0x0102 || info->segments_count != 1 || !info->segments) {
    say("error module info: version, size, module id 1 (memory), compatibility id 0x102 or one segment wrong");
    good = 0;
  } else {
    module_segment *s = info->segments;
    /* The layout of the CUDA 13 toolkit's headers: segment 1, 63 slots,
     * the function of callback id k (from 0) in slot k. */
    if (s->segment_id != 1 || s->slot_count != 63 || !s->function_slots) {
      say("error segment: id %zu (want 1), %zu slots (want 63)", s->segment_id, s->slot_count);
      good = 0;
    } else {
      for (size_t i = 0; i < s->slot_count; i++)
        if (s->function_slots[i] != 0) {
          say("error slot %zu not fresh", i);
          good = 0;
        }
      size_t k = failing("from1") ? 1 : 0;
      if (good) {
        s->function_slots[k + 0] = (intptr_t)heap_register;
        s->function_slots[k + 1] = (intptr_t)heap_unregister;
        s->function_slots[k + 2] = (intptr_t)heap_reset;
        s->function_slots[k + 3] = failing("noregion") ? 0 : (intptr_t)regions_register;
        s->function_slots[k + 5] = (intptr_t)regions_unregister;
      }
    }
  }
  int ok = good && !failing("ext");
  pthread_mutex_unlock(&lock);
  return ok;
}
