/* cuemm.h: device memory management for CUDA driver-API programs.
 *
 * cuemm manages CUDA device memory through the driver API only.  It brings
 * Numba's memory policy to C: allocations go to the driver at once, frees
 * are deferred and released in batches (so a free does not stall the GPU
 * work queued before it), and defer-cleanup scopes hold every free back
 * around asynchronous regions.
 *
 * The library loads libcuda.so.1 at run time (or the file CUEMM_LIBCUDA
 * names); it links neither libcuda nor libcudart.
 *
 * Conventions
 *   - Every function returns a CUresult: CUDA_SUCCESS, or the driver's code
 *     for the failure.  cuemm_last_error() then gives a message that says what
 *     failed and why (which variable, which pointer, which driver call).
 *   - Every function may be called from any thread.  Calls on one manager
 *     are serialized by its lock; driver calls run with the manager's context
 *     current, whatever context the calling thread has current, and the
 *     caller's current context is left as it was.
 *   - A failed call changes nothing: no memory is lost, no statistic moves
 *     except the failure counters.
 *
 * Environment (read by cuemm_config_init; every variable in cuemm(7), which
 * is generated from the library's own table, and docs/configuration.md)
 *   CUEMM_MAX_PENDING_DEALLOCS_COUNT  frees held before a flush (default 10)
 *   CUEMM_MAX_PENDING_DEALLOCS_RATIO  bytes held before a flush, as a
 *                                     fraction of device memory (default 0.2)
 *   CUEMM_LIBCUDA                     the driver file to load instead of
 *                                     libcuda.so.1
 *   CUEMM_POOL                        "vmm": serve cuemm_alloc from a growable
 *                                     pool on CUDA virtual memory (default
 *                                     "none"); CUEMM_POOL_RESERVE,
 *                                     CUEMM_POOL_CHUNK,
 *                                     CUEMM_POOL_RELEASE_THRESHOLD,
 *                                     CUEMM_POOL_LIMIT,
 *                                     CUEMM_POOL_LIMIT_HARD and
 *                                     CUEMM_POOL_PIECE tune it (see
 *                                     cuemm_config)
 *   CUEMM_POOL_IPC                    1: pool blocks can be shared with other
 *                                     processes (default 0)
 *   CUEMM_NVTX                        0: no annotations of pool blocks for a
 *                                     tool attached through NVTX
 *                                     (compute-sanitizer; default 1, see
 *                                     cuemm_config.nvtx)
 *   CUEMM_STREAM_REUSE                "event", "wait" or "internal": how a
 *                                     block freed on one stream serves
 *                                     another (default "internal"; see
 *                                     cuemm_alloc_async)
 *   CUEMM_MEMORY                      what cuemm_alloc hands out: "device"
 *                                     (default), "managed" (unified memory
 *                                     from a segment pool) or "system"
 *                                     (plain host memory the GPU reads
 *                                     through HMM or ATS);
 *                                     CUEMM_MANAGED_PREFETCH,
 *                                     CUEMM_MANAGED_PREFERRED_LOCATION,
 *                                     CUEMM_MANAGED_ACCESSED_BY and
 *                                     CUEMM_MANAGED_LIMIT tune it (see
 *                                     cuemm_config)
 */
#ifndef CUEMM_H
#define CUEMM_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include <cuda.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(CUEMM_BUILDING) && defined(__GNUC__)
#define CUEMM_EXTERN __attribute__((visibility("default")))
#else
#define CUEMM_EXTERN
#endif

#define CUEMM_VERSION_MAJOR 0
#define CUEMM_VERSION_MINOR 1
#define CUEMM_VERSION_PATCH 0
#define CUEMM_VERSION_HEX                                                      \
  ((CUEMM_VERSION_MAJOR << 16) | (CUEMM_VERSION_MINOR << 8) | CUEMM_VERSION_PATCH)

/* The version of the library linked at run time, e.g. "0.1.0". */
CUEMM_EXTERN const char *cuemm_version_string(void);

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */

/* The message explaining the calling thread's last failed cuemm call ("" if
 * none failed yet).  Thread-local; valid until the thread's next cuemm call.
 * A successful call does not clear it, except where a function documents
 * that it leaves a note there (cuemm_destroy). */
CUEMM_EXTERN const char *cuemm_last_error(void);

/* ------------------------------------------------------------------------ */
/* The driver                                                                */

typedef struct cuemm_driver_info {
  int version;        /* cuDriverGetVersion, e.g. 13000 for CUDA 13.0 */
  int api_version;    /* the API version cuemm resolves entry points at */
  int vmm;            /* virtual memory management entry points present */
  int ipc;            /* legacy IPC entry points present */
  int async;          /* stream-ordered allocation entry points present */
  char path[4096];    /* the driver file that was loaded */
  /* Managed and system-allocated memory, as device 0 reports it (see
   * "Managed and system memory" below): */
  int managed;        /* cuMemAllocManaged present and
                       * CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY set */
  int concurrent_managed;  /* CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS:
                            * prefetch and advice work */
  int prefetch;       /* cuMemPrefetchAsync and cuMemAdvise present */
  int pageable;       /* CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS: the GPU
                       * may use plain malloc memory (CUEMM_MEMORY=system) */
  int pageable_host_page_tables;  /* CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_
                                   * USES_HOST_PAGE_TABLES: through the host's
                                   * page tables (ATS, Grace Hopper) rather
                                   * than HMM's mirrored ones */
} cuemm_driver_info;

/* Loads the CUDA driver and calls cuInit(0).  Every other function loads it
 * on first use, so calling this is optional; it is the way to learn early
 * (and with a message) that no driver is usable.
 *
 * Loads CUEMM_LIBCUDA when set, else "libcuda.so.1" through the dynamic
 * loader's search path; there is no fallback from one to the other.
 * Errors:
 *   CUDA_ERROR_NOT_FOUND      no file could be loaded, or the file is not a
 *                             CUDA driver
 *   CUDA_ERROR_NOT_SUPPORTED  the driver is older than CUDA 12.0 or lacks an
 *                             entry point cuemm needs
 *   anything cuInit returns   (CUDA_ERROR_NO_DEVICE, ...)
 * The message names the file tried.  After a failure nothing stays loaded and
 * the next call tries again. */
CUEMM_EXTERN CUresult cuemm_driver_load(void);

/* Fills *info about the loaded driver (loading it if needed). */
CUEMM_EXTERN CUresult cuemm_driver_get_info(cuemm_driver_info *info);

/* ------------------------------------------------------------------------ */
/* Configuration                                                             */

/* Where cuemm_alloc takes device memory from. */
typedef enum cuemm_pool_kind {
  CUEMM_POOL_NONE = 0,  /* cuMemAlloc for every allocation */
  CUEMM_POOL_VMM = 1,   /* a growable pool on CUDA virtual memory management */
} cuemm_pool_kind;

/* How the stream-ordered path lets a block freed on one stream serve
 * another (see cuemm_alloc_async). */
typedef enum cuemm_stream_reuse {
  /* Only once an event recorded on the freeing stream after the free has
   * completed (queried, never waited on), or once the freeing stream is
   * found to have no work left at all (cuStreamQuery, asked instead of
   * recording an event; never of a stream being captured). */
  CUEMM_STREAM_REUSE_EVENT = 0,
  /* Also before: the allocating stream is made to wait on that event
   * (cuStreamWaitEvent), as the driver pool's
   * CU_MEMPOOL_ATTR_REUSE_ALLOW_EVENT_DEPENDENCIES does.  Fewer blocks, a
   * dependency between the streams. */
  CUEMM_STREAM_REUSE_WAIT = 1,
  /* As EVENT, but where the pool would otherwise grow (after taking back
   * blocks known idle), the allocating stream waits on another stream's
   * event instead, when a block freed on that stream fits: as the driver
   * pool's CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES does.  The
   * pool holds about what is live even while streams lag behind the host;
   * streams become dependent only where memory would grow.  The default. */
  CUEMM_STREAM_REUSE_INTERNAL = 2,
} cuemm_stream_reuse;

/* When a thread cuts its blocks of 256 KiB to 16 MiB from spans of its own
 * (cuemm_config.stream_spans, CUEMM_STREAM_SPANS). */
typedef enum cuemm_stream_spans {
  CUEMM_STREAM_SPANS_NEVER = 0,   /* from the pool, under the manager's lock, as one thread does */
  CUEMM_STREAM_SPANS_AUTO = 1,    /* once its visits to the pool found the lock taken by other threads */
  CUEMM_STREAM_SPANS_ALWAYS = 2,  /* from its first large request */
} cuemm_stream_spans;
/* What cuemm_alloc hands out (cuemm_config.memory, CUEMM_MEMORY). */
typedef enum cuemm_memory_kind {
  CUEMM_MEMORY_DEVICE = 0,   /* device memory (cuMemAlloc, or the pool) */
  CUEMM_MEMORY_MANAGED = 1,  /* unified memory from a pool of cuMemAllocManaged segments */
  CUEMM_MEMORY_SYSTEM = 2,   /* aligned host memory (posix_memalign) the GPU uses through HMM or ATS */
} cuemm_memory_kind;

/* Where advice points managed memory (cuemm_config.managed_preferred_location
 * and managed_accessed_by). */
typedef enum cuemm_location {
  CUEMM_LOCATION_NONE = 0,    /* no advice */
  CUEMM_LOCATION_DEVICE = 1,  /* the manager's device */
  CUEMM_LOCATION_CPU = 2,     /* the host (CU_DEVICE_CPU) */
} cuemm_location;

typedef struct cuemm_config {
  /* A flush runs when, after a free is queued, more than this many frees are
   * pending.  0 frees at once (every free flushes). Default 10. */
  size_t max_pending_count;
  /* A flush runs when, after a free is queued, the pending bytes exceed
   * floor(max_pending_ratio x total device memory).  In (0, 1]. Default 0.2. */
  double max_pending_ratio;

  /* The pool (see "The pool" below).  CUEMM_POOL: "none" or "vmm".
   * Default CUEMM_POOL_NONE. */
  cuemm_pool_kind pool;
  /* Bytes of virtual address space reserved for the pool at creation
   * (CUEMM_POOL_RESERVE); 0: the device's total memory.  Rounded up to a
   * multiple of the device's allocation granularity.  Requests larger than the reservation (or the
   * limit) are not served by the pool but by cuMemAlloc. */
  size_t pool_reserve;
  /* The largest growth step in bytes (CUEMM_POOL_CHUNK).  The pool maps
   * physical memory in multiples of the device's allocation granularity
   * (2 MiB on current GPUs), one physical allocation per growth step
   * (several for a large one, see pool_piece); a step maps what its
   * request needs up to the next multiple of an eighth of the bytes mapped
   * (rounded up to the granularity), and that eighth never exceeds
   * pool_chunk: an empty pool grows by 2 MiB, one of 64 MiB by 8 MiB, one
   * of 256 MiB or more by pool_chunk, so a small program holds little more
   * than it uses and a large one grows in few steps.  With pool_ipc or
   * pool_slab the step is pool_chunk.  Also the size of a
   * managed memory segment.  Must be a multiple of the device's allocation
   * granularity (checked at creation).  Default 32 MiB. */
  size_t pool_chunk;
  /* Free bytes the pool keeps mapped (CUEMM_POOL_RELEASE_THRESHOLD): when
   * more is free after frees were released, wholly free chunks go back to
   * the driver until at most about this much stays.  Default 1 GiB. */
  size_t pool_release_threshold;
  /* How long, in milliseconds, memory that a growth needed stays mapped
   * past the release threshold (CUEMM_POOL_RELEASE_DELAY): a release keeps
   * what the largest growth of the last one to two such periods served, so
   * a program that frees most of its memory and takes it again every
   * iteration does not unmap and map it every iteration.  0: only the
   * threshold counts.  Default 1000. */
  size_t pool_release_delay_ms;
  /* A cap on the pool's mapped bytes (CUEMM_POOL_LIMIT); 0: none (the
   * reservation is the cap).  Rounded down to a multiple of the device's
   * allocation granularity.  A request the
   * pool could serve only by growing past it fails with
   * CUDA_ERROR_OUT_OF_MEMORY (after the flush, trim and retry); a request
   * larger than it goes to cuMemAlloc, unless pool_limit_hard.  Default 0. */
  size_t pool_limit;
  /* 1: the pool's chunks are created exportable as POSIX file descriptors,
   * so that pool blocks can be shared with other processes (see "Sharing
   * device memory between processes" below); CUEMM_POOL_IPC, 0 or 1.
   * Creation then fails with CUDA_ERROR_NOT_SUPPORTED on a device without
   * CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED.  No
   * effect without a pool.  Default 0. */
  int pool_ipc;
  /* 1: the limit is hard (CUEMM_POOL_LIMIT_HARD, 0 or 1): a request larger
   * than pool_limit fails at once with CUDA_ERROR_OUT_OF_MEMORY instead of
   * going to cuMemAlloc (no flush could make room for it), so the pool's
   * limit bounds all of cuemm_alloc's device memory; the message gives the
   * size requested, the pool's mapped and used bytes, its limit and its
   * largest free block.  Operators sharing a GPU use it to bound a process.
   * With pool_limit 0 the limit is the reservation.  No effect without a
   * pool.  Default 0. */
  int pool_limit_hard;
  /* The size of the pieces a large growth is made of (CUEMM_POOL_PIECE), in
   * bytes: a growth larger than it is created as several physical
   * allocations of this size (the last one smaller), mapped side by side,
   * so that no single cuMemCreate is of a size the driver is slow at.
   * Must be a multiple of the device's allocation granularity (checked at
   * creation).  0: chosen per device by
   * measurement: the pool times its own cuMemCreate and cuMemMap calls and
   * takes the power-of-two size cheapest per byte, from 4 GiB up (growths
   * up to 512 MiB stay one piece, those up to 4 GiB start from their
   * largest power-of-two size; see cuemm_pool_stats.piece_cost_us).  With
   * pool_ipc, a growth chosen so
   * is at most four pieces, so that a block fits a handle
   * (CUEMM_IPC_POOL_MAX_PIECES); a pinned size is used as it is.
   * Default 0. */
  size_t pool_piece;
  /* 1: the pool's reservation is one cuMemAlloc allocation made at creation
   * (a slab) instead of virtual memory mapped as the pool grows
   * (CUEMM_POOL_SLAB, 0 or 1).  For memory checkers that do not take
   * annotations on memory mapped with cuMemMap (compute-sanitizer 2025.3):
   * with a slab, the NVTX annotations (nvtx) are one heap over the slab and
   * a region per live block, which such a checker does take, so it reports
   * an access past a block.  The slab is held from the driver from creation
   * to destruction: growth and release only change what the pool counts as
   * mapped (cuemm_stats.held_bytes counts the whole slab), and no piece is
   * created.  pool_reserve is the slab's size (0: a quarter of the
   * device's memory).  Not combinable with pool_ipc; peers are not given
   * access (cuemm_pool_grant_access refuses).  Default 0. */
  int pool_slab;
  /* CUEMM_STREAM_REUSE: "event", "wait" or "internal".  Default
   * CUEMM_STREAM_REUSE_INTERNAL. */
  cuemm_stream_reuse stream_reuse;
  /* How many blocks of 256 KiB to 16 MiB freed on a stream a thread keeps
   * for that stream's next requests of the same sizes
   * (CUEMM_STREAM_KEEP_LARGE, 0 to 32): the newest freed stay.  With
   * several threads on the stream path, each keeps its share (this divided
   * by the number of threads' caches, at least 1), so that together they
   * keep about what one thread would.  Once the
   * stream keeps as many as it may, a block freed of a size among its last
   * four requests that none of them served takes the oldest one's place
   * (which goes back to the pool); any other goes back itself.  Kept blocks serve
   * on the fast path with no lock (a layer's activations come back at the
   * same sizes in the next layer); the pool's blocks merge and serve any
   * size.  The pool takes idle kept blocks back before it grows.  When
   * the pool grows past the most the manager has held although its free
   * bytes would have covered the request (only not in one piece), no
   * thread keeps any for the next 16,384 allocations from the pool: their
   * frees merge in the pool until it stops growing that way.  0: such
   * blocks always go back to the pool at their free.  Blocks under
   * 256 KiB are kept whatever this says (up to the cache's bytes), larger
   * ones never.  Default 24 (against 16: 4% fewer instructions per event
   * on a GPT-2 training trace and on a serving one, the footprint within
   * 1.07x; 32 made the training trace grow and release in its passes). */
  size_t stream_keep_large;
  /* CUEMM_STREAM_SPANS: "never", "auto" or "always".  Threads that ask
   * for blocks of 256 KiB to 16 MiB at sizes their caches do not hold go
   * to the pool, whose tree, owned table and counts one lock guards: with
   * several such threads they queue there, and their pairs went slower
   * than one thread's (docs/performance.md).  With spans, a thread takes
   * a run of pool memory (a span: 16 MiB, or four times the request, or
   * twice its span bytes in use, at most 256 MiB) in one visit and cuts
   * its large blocks on one stream from it with no lock; a block freed on
   * that stream goes back into the span at once, one freed on another
   * stream once no work uses it; an empty span goes back to the pool.
   * Another thread's free, cuemm_free, cuemm_record_stream and IPC export
   * of such a block work as for any block.  Spans hold free space only
   * their thread and stream use, so "auto" takes them only after
   * 64 of the thread's visits to the pool found the manager's lock held by
   * another thread; one thread alone never does.  Default
   * CUEMM_STREAM_SPANS_AUTO. */
  cuemm_stream_spans stream_spans;

  /* What cuemm_alloc hands out (see "Managed and system memory" below).
   * CUEMM_MEMORY: "device", "managed" or "system".  Managed memory comes
   * from segments of pool_chunk bytes (or larger, for larger requests) that
   * go back to the driver as the pool's chunks do (pool_release_threshold,
   * cuemm_managed_trim).  Not combinable with pool = CUEMM_POOL_VMM.
   * Default CUEMM_MEMORY_DEVICE. */
  cuemm_memory_kind memory;
  /* 1: every managed allocation is prefetched to the manager's device
   * (cuMemPrefetchAsync on the legacy default stream) before cuemm_alloc
   * returns, so the GPU's first use does not fault the pages in one by one.
   * CUEMM_MANAGED_PREFETCH, 0 or 1.  Default 0. */
  int managed_prefetch;
  /* Advice given to every managed segment when it is created (cuMemAdvise):
   * CU_MEM_ADVISE_SET_PREFERRED_LOCATION and CU_MEM_ADVISE_SET_ACCESSED_BY
   * to the manager's device or the host.  CUEMM_MANAGED_PREFERRED_LOCATION
   * and CUEMM_MANAGED_ACCESSED_BY: "none", "device" or "cpu".  Default
   * CUEMM_LOCATION_NONE (the driver's own placement). */
  cuemm_location managed_preferred_location;
  cuemm_location managed_accessed_by;
  /* A cap on the managed bytes the manager holds from the driver (its
   * segments), CUEMM_MANAGED_LIMIT; 0: none.  Managed memory may exceed the
   * device's memory (the driver evicts pages to the host); the cap is how an
   * operator forbids that.  Default 0. */
  size_t managed_limit;

  /* The event log (see "Seeing what the allocator does" below): a file
   * that every device allocation and free of the manager is written to, in
   * the CSV format of RMM's logging_resource_adaptor.  CUEMM_LOG.  "%p" in
   * the name becomes the process id.  cuemm_create copies the string.
   * NULL or "": no log.  Default NULL. */
  const char *log_file;
  /* 1: the manager's statistics table (cuemm_stats_print) goes to stderr
   * when the manager is destroyed, or at the process's exit for a manager
   * still alive then.  CUEMM_STATS, 0 or 1.  Default 0. */
  int stats_at_exit;
  /* Pool blocks annotated for compute-sanitizer through NVTX's memory API
   * (CUEMM_NVTX, 0 or 1).  With 1, when a tool is attached through NVTX
   * (NVTX_INJECTION64_PATH names its library, as compute-sanitizer sets
   * it; the library is loaded when the first such pool is created), each
   * chunk the pool maps is registered as a sub-allocator heap and each
   * block it hands out (cuemm_alloc, cuemm_alloc_async) as a region of
   * exactly the bytes asked for, so that memcheck reports an access
   * outside the live blocks, past a block's end (its rounding to 256
   * bytes included) or into free pool memory, that stays inside mapped
   * pool memory and would otherwise pass.  A block given up by cuemm_free
   * stays registered until the flush that returns it (queued work may
   * still use it); one given up by cuemm_free_async is unregistered at
   * once and registered again when a later request reuses it.  An access
   * that lands in another live block is not reported.  Managed and system
   * memory, and allocations too large for the pool (cuMemAlloc memory,
   * which the tool checks on its own), are not annotated.  Without a tool,
   * or when its library fails to load or refuses the memory extension,
   * nothing is annotated and nothing fails; the cost is one predicted
   * branch per allocation and free.  compute-sanitizer 2025.3.1 refuses
   * every annotation on memory mapped with cuMemMap (the usual pool's), with
   * one warning (a tool that refuses a heap is asked for no more), and so
   * checks no block of such a pool: under it, use pool_slab
   * (CUEMM_POOL_SLAB=1), whose one cuMemAlloc it takes as a heap.
   * Default 1. */
  int nvtx;

  /* Set by cuemm_config_init: CUDA_SUCCESS, or CUDA_ERROR_INVALID_VALUE when
   * an environment variable was invalid, with env_error saying which (every
   * invalid one, each in the sentence cuemm_config_init's errors describe,
   * separated by "; ").  cuemm_create refuses a configuration that carries
   * an error, so an invalid variable cannot pass unnoticed even when the
   * result of cuemm_config_init is ignored. */
  CUresult env_status;
  char env_error[8192];
  /* Set by cuemm_config_init: which knobs the environment set (one bit per
   * variable, in the order of cuemm(7)'s table).  cuemm_create reads it to
   * tell which settings a manager ignores; programs leave it alone. */
  uint64_t env_set;

  /* Not read from the environment; cuemm_config_init sets 0.  1: the
   * manager is not its context's manager (cuemm_get and the drop-ins do not
   * find it; it is reached through its pointer alone), so it may share the
   * context with that one and with other such managers, each with its own
   * pool and statistics.  Memory of one purpose (model weights, a KV cache)
   * kept in a manager of its own is suspended and resumed on its own
   * (cuemm_pool_suspend, docs/suspend.md). */
  int secondary;
} cuemm_config;

/* Fills *cfg with the defaults, then applies the CUEMM_* variables of the
 * environment (the cuemm(7) manual page lists them all, with their
 * defaults and ranges).  A program may change fields afterwards: its values
 * win.  An unset or empty variable keeps the default.
 * Errors: CUDA_ERROR_INVALID_VALUE when a variable is not a valid value (not
 * a number, negative, out of range, trailing characters); the message names
 * the variable, its value and what is accepted:
 *   CUEMM_POOL="banana" is invalid: expected "none" or "vmm"
 * and, for a number past the knob's range or too large for its type,
 *   CUEMM_POOL_LIMIT="300TiB" is too large (at most 256TiB (281474976710656
 *   bytes)): expected ...
 * Every invalid variable is reported, not only the first: their sentences
 * follow one another, separated by "; ", in cuemm_last_error() and in
 * cfg->env_error.  The other fields are still filled (an invalid variable's
 * field keeps its default).
 * A valid variable is applied whatever else is set: whether a manager acts
 * on it is cuemm_create's to say (a pool knob without a pool, ...).
 * Thread-safety: reads the environment; safe from any thread as long as no
 * thread changes the environment meanwhile. */
CUEMM_EXTERN CUresult cuemm_config_init(cuemm_config *cfg);

/* ------------------------------------------------------------------------ */
/* Managers                                                                  */

/* One manager per CUDA context.  It owns every allocation made through it
 * and the queue of frees waiting to be released. */
typedef struct cuemm_manager cuemm_manager;

/* Creates the manager of context `ctx` (NULL: the calling thread's current
 * context) with configuration `cfg` (NULL: cuemm_config_init's).  Reads the
 * device's total memory once, to turn the ratio into a byte threshold.
 * The manager is registered as its context's manager: cuemm_get and the
 * drop-in calls find it (unless cfg->secondary: see there).
 * Errors: CUDA_ERROR_INVALID_VALUE for m == NULL or an invalid configuration
 * (message names the field or variable); CUDA_ERROR_INVALID_CONTEXT when ctx
 * is NULL and no context is current; CUDA_ERROR_ALREADY_ACQUIRED when the
 * context already has a manager (and cfg->secondary is 0); CUDA_ERROR_NOT_SUPPORTED for
 * CUEMM_MEMORY=managed where the driver or device has no managed memory (or
 * no prefetch when managed_prefetch is set), and for CUEMM_MEMORY=system on
 * a device without CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS (the message
 * names the attribute); CUDA_ERROR_INVALID_VALUE for CUEMM_MEMORY=managed
 * with CUEMM_POOL=vmm; driver errors as reported.
 * Settings a manager does not act on: a variable of the environment that
 * cfg took (cuemm_config.env_set) but that this manager ignores is not an
 * error, since the environment reaches every manager of the process and a
 * program may give each its own pool and memory kind.  Instead, the first
 * manager that ignores it prints one line to stderr, once per variable and
 * process, naming the variable, its value, what it needs and what the
 * manager has:
 *   cuemm: CUEMM_POOL_CHUNK is set (cuemm_config.pool_chunk = 3) but
 *   ignored: it acts only with CUEMM_POOL=vmm or CUEMM_MEMORY=managed, and
 *   this manager has no pool and device memory
 * The families: CUEMM_POOL_RESERVE, CUEMM_POOL_RELEASE_DELAY,
 * CUEMM_POOL_LIMIT, CUEMM_POOL_IPC, CUEMM_POOL_SLAB, CUEMM_POOL_LIMIT_HARD,
 * CUEMM_POOL_PIECE, CUEMM_STREAM_REUSE, CUEMM_STREAM_KEEP_LARGE and
 * CUEMM_NVTX act only with a pool (CUEMM_POOL=vmm, or the framework
 * adapters' pool, or cuemm_config.pool); CUEMM_POOL_CHUNK and
 * CUEMM_POOL_RELEASE_THRESHOLD with a pool or CUEMM_MEMORY=managed (the
 * managed segments' size and release); CUEMM_MANAGED_* only with
 * CUEMM_MEMORY=managed.  The others always act.  Values a program sets in
 * the struct itself are its own choice and are not reported. */
CUEMM_EXTERN CUresult cuemm_create(cuemm_manager **m, CUcontext ctx, const cuemm_config *cfg);

/* Destroys a manager: releases every pending free (defer scopes or not),
 * frees every allocation it still owns, unpins what it pinned, and
 * unregisters it.  If allocations were still live, they are freed and the
 * thread's message (cuemm_last_error) says how many and how many bytes, while
 * the call returns CUDA_SUCCESS.  The context must still exist: destroy the
 * manager before its context (for a context already destroyed, see
 * cuemm_abandon).  If the manager's context cannot be made current, nothing
 * changes and the error is returned (the manager stays usable).  A driver
 * free that fails is skipped and reported after the manager is gone (that
 * memory is then leaked in the driver, never reused).  Do not use `m` after a
 * successful call; m == NULL is CUDA_ERROR_INVALID_VALUE. */
CUEMM_EXTERN CUresult cuemm_destroy(cuemm_manager *m);

/* Drops a manager whose context was destroyed already, without calling the
 * driver: the driver released the context's memory with the context, and a
 * destroyed context's handle must not be used again (a new context may even
 * have its address).  The message says how many allocations and pending frees
 * were dropped.  Do not use `m` afterwards. */
CUEMM_EXTERN CUresult cuemm_abandon(cuemm_manager *m);

/* *m = the manager of the calling thread's current context, created with
 * cuemm_config_init's configuration on first use.  Registry keys are the
 * driver's context ids (cuCtxGetId), so a context destroyed and created again
 * at the same address never finds the old manager. */
CUEMM_EXTERN CUresult cuemm_get(cuemm_manager **m);

/* The context a manager serves. */
CUEMM_EXTERN CUcontext cuemm_context(const cuemm_manager *m);

/* ------------------------------------------------------------------------ */
/* Device memory                                                             */

/* Allocates `size` bytes of device memory with cuMemAlloc at once.  When the
 * driver answers CUDA_ERROR_OUT_OF_MEMORY, the pending frees are flushed
 * (unless a defer scope is open) and the allocation is tried once more.
 * With a pool (cuemm_config.pool), requests up to the pool's capacity (its
 * reservation, or its limit when set) come from the pool instead: 256-byte
 * aligned, no driver call unless the pool has to grow; out of pool memory,
 * the pending frees are flushed, the pool trimmed and the request retried
 * once.  Larger requests go to cuMemAlloc as without a pool, unless the
 * pool's limit is hard (pool_limit_hard): they then fail with
 * CUDA_ERROR_OUT_OF_MEMORY and no driver call.
 * Errors: CUDA_ERROR_INVALID_VALUE for p == NULL or size == 0 (as cuMemAlloc);
 * CUDA_ERROR_OUT_OF_MEMORY when the retry failed too, or size exceeds the
 * device's memory; the message names the size (and, for the pool, its
 * mapped and used bytes and its largest free block), then the device (its
 * ordinal and PCI bus id), the bytes requested, the bytes the manager holds
 * and the device's free and total bytes as cuMemGetInfo gives them
 * ("; device 1 (PCI 0000:3b:00.0): 4096 bytes requested, 3145728 held by
 * this manager, 1048576 free of 85017755648 on the device (cuMemGetInfo)";
 * a figure the driver cannot give is left out); a driver error of the
 * pool's growth (cuMemCreate, cuMemMap, cuMemSetAccess) as reported, with
 * the call named, after the growth step was undone.
 * With cuemm_config.memory = CUEMM_MEMORY_MANAGED or CUEMM_MEMORY_SYSTEM,
 * the memory is managed or system memory instead (see "Managed and system
 * memory" below, for its errors too: managed_limit, a failing prefetch, the
 * oversubscription warning left as the thread's message on success). */
CUEMM_EXTERN CUresult cuemm_alloc(cuemm_manager *m, CUdeviceptr *p, size_t size);

/* Frees device memory allocated by cuemm_alloc on this manager: queues it,
 * then flushes the whole queue when a threshold is passed (see
 * cuemm_config).  The pointer must be the start of the allocation.
 * Errors: CUDA_ERROR_INVALID_VALUE for a pointer this manager does not own
 * (never allocated here, interior, host memory, or already freed: the
 * message says which); nothing changes then.  A flush that this free
 * triggers and that fails returns the driver's error; the free itself is
 * queued all the same and the failed frees stay queued for the next flush. */
CUEMM_EXTERN CUresult cuemm_free(cuemm_manager *m, CUdeviceptr p);

/* *base and *size = the start and size of the allocation of m that holds
 * device pointer p (its start, or any byte inside it): a cuMemAlloc
 * allocation, a pool block, or a block of managed or system memory
 * (cuemm_config.memory), with the size cuemm_alloc was asked for.
 * Either out pointer may be NULL.  m NULL: the manager of the calling
 * thread's current context (cuemm_get, which may create it).  The answer
 * comes from the manager's own records, without a driver call.
 *
 * Warning: the driver's cuMemGetAddressRange does not know pool blocks.  On
 * pool memory it answers with the whole mapping around the block (one or
 * more chunks, many blocks), so a copy or memset sized from its answer
 * overwrites other blocks or runs off the mapping.  Ask cuemm for memory
 * cuemm handed out; for other memory, ask the driver.
 *
 * Errors: CUDA_ERROR_NOT_FOUND (what cuMemGetAddressRange answers for an
 * unknown pointer) for a p inside no live device allocation of m: 0, another
 * manager's or cuMemAlloc's memory, host memory (cuemm_host_alloc and
 * cuemm_host_pin memory included), a pointer opened with cuemm_ipc_open, or
 * an allocation freed already (pending release or released); the message
 * says which.  Errors of cuemm_get when m is NULL.  *base and *size are
 * written only on success.
 * Thread-safety: holds m's lock; an interior pointer costs a walk of m's
 * table of live allocations, a start one lookup. */
CUEMM_EXTERN CUresult cuemm_mem_get_address_range(cuemm_manager *m, CUdeviceptr *base, size_t *size, CUdeviceptr p);

/* Releases every pending free now, in the order they were queued, with the
 * manager's context current.  A no-op while a defer scope is open.  If a
 * driver free fails, the frees not yet released (the failed one first) stay
 * queued and the error is returned. */
CUEMM_EXTERN CUresult cuemm_flush(cuemm_manager *m);

/* Opens a defer-cleanup scope: while at least one is open, nothing is freed
 * (no threshold flush, no explicit flush, no out-of-memory flush).  Scopes
 * nest.  The count belongs to the manager and is shared by all threads, as
 * Numba's is per context: a scope opened by one thread holds back the frees
 * of every thread.  Leaving the outermost scope does not flush by itself;
 * the next free past a threshold does, or call cuemm_flush. */
CUEMM_EXTERN CUresult cuemm_defer_cleanup_begin(cuemm_manager *m);

/* Closes a scope.  CUDA_ERROR_INVALID_VALUE when none is open (the count
 * never goes below zero). */
CUEMM_EXTERN CUresult cuemm_defer_cleanup_end(cuemm_manager *m);

/* ------------------------------------------------------------------------ */
/* The pool                                                                  */

/* With cuemm_config.pool = CUEMM_POOL_VMM (CUEMM_POOL=vmm), a manager
 * reserves pool_reserve bytes of virtual addresses at creation and maps
 * physical memory into them (cuMemCreate, cuMemMap, cuMemSetAccess) only
 * when a request does not fit, in steps that grow with the pool up to
 * pool_chunk bytes (see pool_chunk).  A
 * large growth is made of several physical allocations (pieces, see
 * pool_piece) mapped side by side, with one cuMemSetAccess for the whole;
 * each piece is a chunk, released on its own once wholly free.  Blocks
 * are sub-allocated from the mapped memory and never move.  Frees of pool
 * blocks are deferred like any other (same queue, same thresholds, same
 * defer scopes); a flush that holds pool blocks calls cuCtxSynchronize once
 * for the batch before any of them can be handed out again, so a block is
 * never reused while work queued before its free may still use it.  Work
 * queued on pool memory from other contexts (peers) is the program's to
 * finish before the free.  After such a flush, when more than
 * pool_release_threshold bytes are free, wholly free chunks go back to the
 * driver; an automatic release that fails returns the driver's error from
 * the call that caused it, and the memory stays mapped and usable. */

/* Piece size classes measured (cuemm_pool_stats.piece_cost_us): 2 MiB << k
 * for k below this, 2 MiB .. 512 GiB. */
#define CUEMM_POOL_PIECE_CLASSES 19

typedef struct cuemm_pool_stats {
  int enabled;                 /* 0: the manager has no pool (all else 0) */
  CUdeviceptr base;            /* start of the reservation */
  size_t reserved_bytes;       /* virtual address space reserved */
  size_t chunk_bytes;          /* the largest growth step (pool_chunk) */
  size_t granularity;          /* the driver's allocation granularity */
  size_t release_threshold;    /* free bytes kept mapped */
  size_t limit_bytes;          /* cap on mapped bytes (the reservation when none) */
  size_t mapped_bytes;         /* physical memory mapped now */
  size_t used_bytes;           /* in blocks handed out (live or pending free) */
  size_t free_bytes;           /* mapped_bytes - used_bytes */
  size_t largest_free_block;   /* the largest free block as it stands: served without growing (merging
                                * cached small blocks may serve more) */
  size_t used_blocks;
  size_t free_blocks;          /* free blocks, small ones cached unmerged included */
  size_t chunks;               /* physical chunks mapped now */
  uint64_t chunks_mapped;      /* chunks mapped since creation */
  uint64_t chunks_released;    /* chunks unmapped and released since creation */
  uint64_t grow_steps;         /* growth steps that succeeded */
  uint64_t grow_failures;      /* growth steps that failed (and were undone) */
  uint64_t releases;           /* release passes that released a chunk */
  uint64_t fallback_allocs;    /* requests larger than the pool, given to cuMemAlloc */
  unsigned int peers;          /* devices granted access besides the owner */
  /* How cut up the free space is: 1 - (largest free extent / free_bytes),
   * 0 when nothing is free.  A free extent is a run of adjacent addresses
   * that are all free: free blocks and cached ones (small blocks kept whole
   * in the caches of their sizes, which largest_free_block does not merge)
   * side by side count as one, and so do blocks freed on streams whose
   * work may still be queued.  So a pool whose free space is one run of
   * addresses reads 0 however many cached blocks it is split into (a chunk
   * wholly free, say), and one whose free bytes are in many runs apart
   * reads close to 1.  Blocks a thread keeps for a stream
   * (cuemm_stats.stream_cached_bytes) are used here, as in used_bytes. */
  double fragmentation;
  int limit_hard;              /* pool_limit_hard */
  size_t piece_pinned;         /* pool_piece: 0 when the piece size is chosen by measurement */
  size_t piece_bytes;          /* the piece size of the last growth (0 before the first) */
  /* What growth has measured on this device, process-wide (every manager of
   * the device adds to it): for pieces of 2 MiB << k bytes, the cost of
   * one piece's cuMemCreate + cuMemMap, in microseconds (the median cost
   * per byte of the class's last seven growths, each growth counting with
   * its median piece; 0: never timed), and how many pieces were timed. */
  double piece_cost_us[CUEMM_POOL_PIECE_CLASSES];
  unsigned int piece_samples[CUEMM_POOL_PIECE_CLASSES];
  int slab;                    /* pool_slab: the reservation is one cuMemAlloc, held whole */
  /* Suspension (cuemm_pool_suspend); appended, so the fields above keep
   * their offsets. */
  int suspended;               /* 1 while suspended (between cuemm_pool_suspend and cuemm_pool_resume) */
  size_t suspended_need_bytes; /* while suspended: the bytes cuemm_pool_resume will map */
  size_t kept_bytes;           /* bytes of block contents held in host memory (CUEMM_SUSPEND_KEEP) */
  uint64_t suspends, resumes;  /* suspensions and resumptions that succeeded */
} cuemm_pool_stats;

/* A consistent snapshot of the pool's state.  A manager without a pool
 * fills *s with zeros (enabled = 0) and succeeds. */
CUEMM_EXTERN CUresult cuemm_pool_get_stats(cuemm_manager *m, cuemm_pool_stats *s);

/* Releases all the pool memory it can: flushes the pending frees (unless a
 * defer scope is open), then unmaps and releases every wholly free chunk,
 * whatever the release threshold.  Live blocks stay where they are.
 * Errors: CUDA_ERROR_INVALID_VALUE without a pool (the message says how to
 * enable one); the driver's error of a failing flush, cuMemRelease or
 * cuMemUnmap, with the call named (the chunks not released stay usable). */
CUEMM_EXTERN CUresult cuemm_pool_trim(cuemm_manager *m);

/* Gives device `peer` read-write access to all the pool's memory, mapped
 * now and later (one cuMemSetAccess per contiguous mapped run, naming every
 * device with access).  Granting the owning device or a device granted
 * already does nothing.
 * Errors: CUDA_ERROR_INVALID_VALUE without a pool; CUDA_ERROR_INVALID_DEVICE
 * for a device that does not exist; CUDA_ERROR_PEER_ACCESS_UNSUPPORTED when
 * the driver says the peer cannot access this device's memory; a driver
 * error of cuMemSetAccess (access given to runs before the failing one is
 * taken back). */
CUEMM_EXTERN CUresult cuemm_pool_grant_access(cuemm_manager *m, CUdevice peer);

/* ------------------------------------------------------------------------ */
/* Suspend and resume (docs/suspend.md)                                      */

/* Copy the contents of the live pool blocks to pinned host memory at
 * suspension, and back at resumption. */
#define CUEMM_SUSPEND_KEEP 0x1u
/* Suspend although pool blocks were sent to other processes
 * (cuemm_ipc_send) and may be open there. */
#define CUEMM_SUSPEND_IGNORE_IPC 0x2u

/* Gives every byte of the pool's physical memory back to the driver while
 * keeping its addresses: every pointer the manager handed out stays
 * reserved, and works again after cuemm_pool_resume.
 *
 * In order: cuCtxSynchronize of the manager's context (so the work of
 * every stream of that context, not only of the streams the manager
 * served, is done); the pending deferred frees are carried out (even inside
 * a defer scope: nothing can use them after the synchronization); the
 * cached blocks of the stream-ordered path's thread caches, and the pool's
 * caches of sizes, return to the pool, so that only the blocks the program
 * holds are live; wholly free chunks are released for good; with
 * CUEMM_SUSPEND_KEEP the contents of the live blocks (adjacent ones merged
 * into runs) are copied to pinned host memory (one cuMemHostAlloc buffer
 * the manager keeps from one suspension to the next, so that later
 * suspensions pay no pinning); then every remaining chunk is unmapped and
 * released.  The reservation, the record of every block, the stream tags
 * and cuMemAlloc blocks beyond the pool stay: those (requests larger than
 * the pool's limit) keep their memory, and cuemm_get_stats counts them as
 * before.
 *
 * While suspended: cuemm_alloc, cuemm_alloc_async (and the drop-ins on the
 * manager), cuemm_ipc_export and cuemm_ipc_send of its blocks,
 * cuemm_pool_grant_access and cuemm_pool_trim fail with
 * CUDA_ERROR_ILLEGAL_STATE and a message saying the manager is suspended;
 * frees (cuemm_free, cuemm_free_async) are accepted (host bookkeeping only;
 * the contents of a block freed so are not copied back); statistics,
 * snapshots and cuemm_mem_get_address_range work; the program must not
 * touch the blocks' memory from the GPU.  cuemm_destroy frees everything,
 * the host copy too.
 *
 * Errors: CUDA_ERROR_INVALID_VALUE for a NULL manager or unknown flags;
 * CUDA_ERROR_NOT_SUPPORTED for a manager without a VMM pool or with a slab
 * pool (CUEMM_POOL_SLAB); CUDA_ERROR_ILLEGAL_STATE when already suspended,
 * or when pool blocks were sent to another process (the message names
 * them, address and size) and CUEMM_SUSPEND_IGNORE_IPC is not given; the
 * driver's error of cuCtxSynchronize, cuMemHostAlloc or a copy (nothing was
 * released: the manager is as before); of cuMemUnmap or cuMemRelease (the
 * manager is then suspended, holding the chunks named in the message, and
 * both cuemm_pool_resume and another cuemm_pool_suspend, which tries those
 * chunks again, work).
 * Thread-safety: any thread, while others allocate, free and record
 * streams on the manager; a thread allocating from its own cache at that
 * moment either gets its block before the suspension or the refusal. */
CUEMM_EXTERN CUresult cuemm_pool_suspend(cuemm_manager *m, unsigned flags);

/* Maps physical memory again at the addresses the suspension released
 * (created in pieces of the size the pool's growth would choose, one
 * cuMemSetAccess per run for the device and every peer granted access),
 * and with CUEMM_SUSPEND_KEEP copies the kept contents back, then frees
 * the host copy's bookkeeping (the pinned buffer stays for the next
 * suspension).  Every pointer handed out before works again.
 * Errors: CUDA_ERROR_INVALID_VALUE for a NULL manager;
 * CUDA_ERROR_ILLEGAL_STATE when the manager is not suspended;
 * CUDA_ERROR_OUT_OF_MEMORY when the device lacks the memory (the message
 * gives the bytes needed and cuMemGetInfo's free bytes); the driver's error
 * of cuMemCreate, cuMemMap, cuMemSetAccess or a copy.  On any failure what
 * the call mapped is released again, the manager stays suspended, the kept
 * contents stay in host memory, and a later call can succeed.
 * Thread-safety: as cuemm_pool_suspend. */
CUEMM_EXTERN CUresult cuemm_pool_resume(cuemm_manager *m);

/* ------------------------------------------------------------------------ */
/* Stream-ordered allocation                                                 */

/* The pool's blocks can also be allocated and freed in stream order, with
 * the semantics of cuMemAllocAsync / cuMemFreeAsync and no synchronization:
 * a block freed on a stream is reusable at once by work queued later on
 * that stream, and by other streams once the work queued on the freeing
 * stream before the free is known to be done.  This path needs a pool
 * (CUEMM_POOL=vmm): on a manager without one, these calls fail with
 * CUDA_ERROR_NOT_SUPPORTED and say so.  The exception is a manager of
 * managed or system memory (CUEMM_MEMORY), whose blocks are idle when
 * handed out and so serve any stream: there cuemm_alloc_async is
 * cuemm_alloc, cuemm_free_async is cuemm_free (deferred: the flush
 * synchronizes the context), and cuemm_record_stream and
 * cuemm_stream_release do nothing.
 *
 * How it works, and what it costs.  Every thread that calls these on a
 * manager gets a cache of its own, in front of the pool, keyed by stream
 * and size: an alloc that finds a block freed on the same stream, and a
 * free, touch only that cache (no driver call, no lock shared with other
 * threads).  The cache keeps blocks below 256 KiB, and of blocks up to
 * 16 MiB the ones each stream freed last (cuemm_config.stream_keep_large,
 * 24 by default; a layer's activations come back at the same sizes in the
 * next layer); a block the pool hands out of a size the cache keeps
 * enters it at once, so that its free takes the fast path.
 * Other frees give the block back to the pool at once, under the manager's
 * lock, even while work queued on the stream may still use it: the pool
 * marks it with the stream, merges it with free space beside it, and serves
 * that stream's requests from it at once (stream order makes that safe), at
 * any size.  So the pool's free space coalesces across sizes as without
 * streams, and a training step's memory is placed as without streams: a
 * block of 64 KiB or more at the lowest address that fits, a smaller one
 * best-fit.
 *
 * A request on stream B takes a block freed on stream A (in the cache or
 * the pool) only once A's work before that free is known done: one event
 * is recorded on A for the whole batch of its frees since the last one
 * (from a small cache of events) and queried without blocking; when it has
 * completed, every block of that batch serves any stream.  The pool asks
 * so only when A's block is the best fit and the stream's own and idle
 * blocks fit badly or not at all, and before it grows.  With
 * CUEMM_STREAM_REUSE=wait (cuemm_config.stream_reuse) B takes the block at
 * once and is made to wait on A's event with cuStreamWaitEvent.  With
 * CUEMM_STREAM_REUSE=event the block comes from idle memory, and the pool
 * grows only when neither suffices.  With "internal", the default, B waits
 * on A's event only where the pool would grow otherwise (after settling
 * and taking back what the threads hold idle): a stream whose work lags
 * behind the host then costs a dependency, not memory, as with the
 * driver's own pool.  The release threshold covers all of it: past
 * pool_release_threshold, the blocks whose events have completed become
 * idle and what is wholly free beyond the threshold is released (the
 * pool keeps the memory of its recent peak for pool_release_delay_ms).
 * cuemm_pool_trim, cuemm_reset and the pool's out-of-memory retry give
 * every block back (after a synchronization of the context, for those
 * whose stream may still be busy).
 *
 * Streams.
 *   - NULL and CU_STREAM_LEGACY name the legacy default stream (one stream).
 *     cuemm does not rely on its implicit synchronization with blocking
 *     streams: a block moves between it and another stream by the event
 *     rule like between any two streams.
 *   - CU_STREAM_PER_THREAD names the calling thread's per-thread default
 *     stream, a different stream on every thread, and is treated so: a
 *     block freed on it by one thread is never taken as "the same stream"
 *     by another.  When the thread exits, the blocks freed on its
 *     per-thread stream wait for their events (or for a flush).
 *   - A stream that is destroyed while blocks freed on it are cached: call
 *     cuemm_stream_release(m, s) before cuStreamDestroy(s).  Without it, a
 *     stream created later that the driver gives the same handle would
 *     reuse those blocks as its own while the destroyed stream's last work
 *     may still run (the driver reuses handles; cuemm cannot tell).
 *   - CUDA graph capture: the calls make no driver call on their fast paths
 *     and are safe to call while a stream is captured, but a block freed
 *     inside a capture becomes reusable by the capturing stream's later
 *     (captured) work only; use the driver's own graph memory nodes for
 *     memory whose life is the graph's.
 *
 * Mixing the paths.  A block from cuemm_alloc_async may be freed with
 * cuemm_free: it joins the deferred queue, whose flush synchronizes the
 * context, which covers every stream.  A block from cuemm_alloc may be freed
 * with cuemm_free_async: it then follows the stream rules from that free on
 * (the program must not have work pending on it on other streams, just as
 * for cuMemFreeAsync).  A request larger than the pool's capacity is served
 * by cuMemAlloc like cuemm_alloc's, and its cuemm_free_async is deferred
 * like cuemm_free.
 *
 * Threads: any thread may free a block another thread allocated; the block
 * then moves to the freeing thread's cache (a slower path through the
 * manager's lock).  Frees of one block from two threads at once are a
 * double free the program must not make (one of them is refused). */

/* Allocates `size` bytes from the pool for use by work queued on `stream`
 * after this call (and by the host).  No driver call unless the cache and
 * the pool have no fitting block (then as cuemm_alloc: growth, flush and
 * retry), or a block freed on another stream needs its event checked.
 * Errors: CUDA_ERROR_INVALID_VALUE for m or p NULL or size 0;
 * CUDA_ERROR_NOT_SUPPORTED without a pool, or on a driver without events;
 * CUDA_ERROR_OUT_OF_MEMORY as cuemm_alloc, the message naming the stream. */
CUEMM_EXTERN CUresult cuemm_alloc_async(cuemm_manager *m, CUdeviceptr *p, size_t size, CUstream stream);

/* Frees a block of this manager (from cuemm_alloc_async or cuemm_alloc) in
 * stream order: work queued on `stream` before this call may still use it;
 * later work on `stream` may get it again at once, other streams once that
 * work is done (see above).  No driver call on the common path.
 * Errors: CUDA_ERROR_INVALID_VALUE for m NULL, a pointer this manager does
 * not own (foreign, interior, host memory), or one freed already (on any
 * path, by any thread: the message says which); CUDA_ERROR_NOT_SUPPORTED
 * without a pool; nothing changes then. */
CUEMM_EXTERN CUresult cuemm_free_async(cuemm_manager *m, CUdeviceptr p, CUstream stream);

/* Says that work on `stream`, besides the block's own stream, uses the live
 * block p (PyTorch's record_stream): when p is freed with cuemm_free_async,
 * an event is recorded on `stream` and the freeing stream waits on it
 * before anything can reuse the block.  Naming the block's own stream, or a
 * stream named already, does nothing.  A block from cuemm_alloc, which has
 * no stream of its own, is remembered likewise: freed with cuemm_free it
 * needs nothing (the flush synchronizes the context), freed with
 * cuemm_free_async its freeing stream waits for `stream`.
 * A block beyond the pool's capacity (served by cuMemAlloc) needs nothing
 * either: its free, on any path, is deferred like cuemm_free's.
 * Errors: CUDA_ERROR_INVALID_VALUE for a pointer that is not the start of a
 * live device allocation of m; CUDA_ERROR_NOT_SUPPORTED without a pool. */
CUEMM_EXTERN CUresult cuemm_record_stream(cuemm_manager *m, CUdeviceptr p, CUstream stream);

/* Call before destroying `stream`: the blocks freed on it and cached by any
 * thread get one last event (recorded now, on the still-living stream) and
 * from then on serve other streams once it completes; each live block that
 * cuemm_record_stream said `stream` uses gets an event recorded now too,
 * which the block's free makes the freeing stream wait on.  The handle is
 * forgotten and never named to the driver again, so the stream may be
 * destroyed at once, and a new stream that gets the handle starts with
 * nothing.
 * CU_STREAM_PER_THREAD releases the calling thread's per-thread stream.
 * Errors: CUDA_ERROR_INVALID_VALUE for NULL or CU_STREAM_LEGACY (never
 * destroyed); CUDA_ERROR_NOT_SUPPORTED without a pool; the driver's error of
 * cuEventRecord (the stream's blocks then stay as they were). */
CUEMM_EXTERN CUresult cuemm_stream_release(cuemm_manager *m, CUstream stream);
/* Managed and system memory                                                 */

/* cuemm_config.memory chooses what cuemm_alloc hands out; cuemm_free,
 * cuemm_flush, defer scopes and cuemm_reset work on it as on device memory
 * (the same queue, the same thresholds).
 *
 * CUEMM_MEMORY_MANAGED: unified memory, which the CPU and the GPU both use
 * through one pointer and which the driver migrates page by page, and may
 * evict from the GPU to the host when the GPU's memory is full, so a
 * program may hold more than the device has (oversubscription).  Requests
 * are sub-allocated from segments of pool_chunk bytes (a larger request
 * gets a segment of its own size, rounded up to whole chunks), each one
 * cuMemAllocManaged(..., CU_MEM_ATTACH_GLOBAL), 256-byte aligned; the
 * advice in the configuration is given to each segment as it is created.
 * A flush holding managed blocks calls cuCtxSynchronize once before handing
 * them out again; wholly free segments go back to the driver (cuMemFree)
 * when more than pool_release_threshold bytes are free after a flush, or
 * all at once with cuemm_managed_trim.  Out of memory (or past
 * managed_limit), the pending frees are flushed, free segments released
 * and the request tried once more.
 *
 * Oversubscription is made visible, not refused: when the managed bytes the
 * manager holds first exceed the device's total memory, the allocation
 * succeeds and leaves a warning as the thread's message (cuemm_last_error,
 * "warning: managed memory held ... exceeds ...") which
 * cuemm_managed_get_stats keeps too, with a counter.  cuemm writes nothing
 * to stderr: a library does not print into a program's output; print the
 * warning where the program reports.  To refuse instead, set
 * managed_limit (CUEMM_MANAGED_LIMIT).
 * Managed memory cannot be shared between processes with CUDA IPC:
 * cuemm_ipc_export refuses it (CUDA_ERROR_NOT_SUPPORTED).
 *
 * CUEMM_MEMORY_SYSTEM: plain host memory (posix_memalign, 256-byte aligned)
 * that the GPU reads and writes directly, where the platform allows it:
 * HMM on x86 with a recent kernel and driver, or ATS on Grace Hopper
 * (cuemm_driver_info.pageable and pageable_host_page_tables say which).
 * cuemm_create refuses it (CUDA_ERROR_NOT_SUPPORTED) on a device whose
 * CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS is 0.  Each request is one
 * host allocation; frees are queued and released (free()) after the
 * flush's synchronization, as for managed blocks. */

typedef struct cuemm_managed_stats {
  cuemm_memory_kind memory;    /* the manager's kind; for CUEMM_MEMORY_DEVICE all else is 0 */
  size_t device_total;         /* the device's memory, against which oversubscription is measured */
  size_t held_bytes;           /* managed bytes held from the driver (all segments) */
  size_t peak_held_bytes;      /* highest held_bytes seen */
  size_t segments;             /* segments held now */
  size_t segment_bytes;        /* the segment size (pool_chunk) */
  size_t used_bytes;           /* in blocks handed out (live or pending free), 256-byte rounded */
  size_t free_bytes;           /* held_bytes - used_bytes */
  size_t limit;                /* managed_limit (0: none) */
  size_t system_bytes;         /* CUEMM_MEMORY_SYSTEM: bytes allocated (live or pending free) */
  size_t system_count;
  uint64_t segments_allocated; /* cuMemAllocManaged calls that succeeded */
  uint64_t segments_released;  /* segments given back with cuMemFree */
  uint64_t oversubscribed_grows;  /* segments added while held_bytes exceeded device_total */
  uint64_t limit_refusals;     /* allocations refused by managed_limit */
  uint64_t prefetches;         /* cuMemPrefetchAsync calls made (at allocation and cuemm_prefetch) */
  uint64_t advises;            /* cuMemAdvise calls made (per segment and cuemm_advise) */
  double oversubscription;     /* held_bytes / device_total */
  char warning[256];           /* the oversubscription warning once given, else "" */
} cuemm_managed_stats;

/* A consistent snapshot of the manager's managed or system memory.  A
 * device-memory manager fills zeros (memory = CUEMM_MEMORY_DEVICE) and
 * succeeds.  Errors: CUDA_ERROR_INVALID_VALUE for m or s NULL. */
CUEMM_EXTERN CUresult cuemm_managed_get_stats(cuemm_manager *m, cuemm_managed_stats *s);

/* Flushes the pending frees (unless a defer scope is open), then gives every
 * wholly free managed segment back to the driver, whatever the release
 * threshold.  Errors: CUDA_ERROR_INVALID_VALUE when m is NULL or not a
 * managed-memory manager; the driver's error of the flush or of cuMemFree
 * (the segments not released stay usable). */
CUEMM_EXTERN CUresult cuemm_managed_trim(cuemm_manager *m);

/* Prefetches [p, p + size) to device `dst` (a CUdevice, or CU_DEVICE_CPU for
 * the host) on `stream`, with cuMemPrefetchAsync.  The range must lie inside
 * one live block of this manager's managed (or system) memory; size 0 means
 * up to the block's end.
 * Errors: CUDA_ERROR_INVALID_VALUE for m NULL, p NULL (or 0), a manager of
 * device memory, a range that lies in no live block of m (another manager's
 * memory, device memory, a block already freed) or that runs past its
 * block's end (the message gives both ranges); CUDA_ERROR_INVALID_DEVICE
 * for a dst that is neither CU_DEVICE_CPU nor a device;
 * CUDA_ERROR_NOT_SUPPORTED when the driver lacks cuMemPrefetchAsync; driver
 * errors as reported (for instance on a device without concurrent managed
 * access).  Thread-safe; holds the manager's lock for the check and the
 * call. */
CUEMM_EXTERN CUresult cuemm_prefetch(cuemm_manager *m, CUdeviceptr p, size_t size, CUdevice dst, CUstream stream);

/* Gives advice `advice` (CU_MEM_ADVISE_SET_READ_MOSTLY ..
 * CU_MEM_ADVISE_UNSET_ACCESSED_BY) for [p, p + size) about `device` (a
 * CUdevice or CU_DEVICE_CPU), with cuMemAdvise.  The range is checked as for
 * cuemm_prefetch.  Errors: as cuemm_prefetch, and CUDA_ERROR_INVALID_VALUE
 * for an unknown advice. */
CUEMM_EXTERN CUresult cuemm_advise(cuemm_manager *m, CUdeviceptr p, size_t size, CUmem_advise advice,
                                   CUdevice device);

/* ------------------------------------------------------------------------ */
/* Pinned host memory                                                        */

/* Allocates `size` bytes of page-locked host memory with cuMemHostAlloc.
 * flags: CU_MEMHOSTALLOC_PORTABLE, CU_MEMHOSTALLOC_DEVICEMAP (mapped into the
 * device address space; see cuemm_host_get_device_pointer),
 * CU_MEMHOSTALLOC_WRITECOMBINED, or 0.  Out of memory is handled as for
 * cuemm_alloc.  Errors: CUDA_ERROR_INVALID_VALUE for p == NULL, size 0 or
 * unknown flags. */
CUEMM_EXTERN CUresult cuemm_host_alloc(cuemm_manager *m, void **p, size_t size, unsigned int flags);

/* Frees memory from cuemm_host_alloc.  Deferred like device memory: the
 * pointer joins the same queue and counts toward the same thresholds.
 * Errors: CUDA_ERROR_INVALID_VALUE for a pointer this manager did not
 * allocate with cuemm_host_alloc, or one already freed. */
CUEMM_EXTERN CUresult cuemm_host_free(cuemm_manager *m, void *p);

/* *dptr = the device address of host memory mapped by this manager
 * (cuemm_host_alloc with CU_MEMHOSTALLOC_DEVICEMAP, or cuemm_host_pin with
 * CU_MEMHOSTREGISTER_DEVICEMAP).  Interior pointers are accepted. */
CUEMM_EXTERN CUresult cuemm_host_get_device_pointer(cuemm_manager *m, CUdeviceptr *dptr, void *p);

/* Page-locks existing host memory [p, p + size) with cuMemHostRegister.
 * flags: CU_MEMHOSTREGISTER_PORTABLE, _DEVICEMAP, _IOMEMORY, _READ_ONLY, 0.
 * Errors: CUDA_ERROR_INVALID_VALUE for NULL, size 0 or unknown flags;
 * CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED when it overlaps memory pinned
 * already. */
CUEMM_EXTERN CUresult cuemm_host_pin(cuemm_manager *m, void *p, size_t size, unsigned int flags);

/* Unpins memory pinned with cuemm_host_pin, at once (never deferred, so the
 * same buffer can be pinned again inside a defer scope).
 * Errors: CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED when p is not the start of a
 * range this manager pinned. */
CUEMM_EXTERN CUresult cuemm_host_unpin(cuemm_manager *m, void *p);

/* ------------------------------------------------------------------------ */
/* Information and statistics                                                */

/* The device's free and total memory now (cuMemGetInfo in the manager's
 * context).  Either pointer may be NULL. */
CUEMM_EXTERN CUresult cuemm_get_memory_info(cuemm_manager *m, size_t *free_bytes, size_t *total_bytes);

typedef struct cuemm_stats {
  size_t total_bytes;        /* device memory, read at creation */
  size_t max_pending_bytes;  /* floor(ratio x total_bytes) */
  size_t max_pending_count;
  size_t live_bytes;         /* device allocations not yet freed by the program */
  size_t live_count;
  size_t peak_bytes;         /* highest live_bytes seen (the stream-ordered path's share is sampled, when
                              * the statistics are read and when the pool grows: its threads keep their
                              * counts apart; the event log and cuemm-replay give the exact peak) */
  size_t peak_count;         /* highest live_count seen */
  size_t host_live_bytes;    /* pinned host allocations (cuemm_host_alloc) */
  size_t host_live_count;
  size_t pinned_bytes;       /* host ranges pinned with cuemm_host_pin */
  size_t pinned_count;
  size_t pending_bytes;      /* frees queued, not yet released (device + host) */
  size_t pending_count;
  unsigned int defer_depth;  /* open defer-cleanup scopes */
  uint64_t allocs;           /* successful allocations (device + host) */
  uint64_t frees;            /* frees accepted (device + host) */
  uint64_t flushes;          /* flushes that released at least one free */
  uint64_t driver_frees;     /* cuMemFree / cuMemFreeHost calls that succeeded */
  uint64_t oom_retries;      /* allocations retried after out of memory */
  uint64_t alloc_failures;   /* allocations that returned an error */
  uint64_t free_failures;    /* driver frees that failed (and stayed queued) */
  /* The stream-ordered path (cuemm_alloc_async): its live blocks are counted
   * in live_bytes and live_count, its calls in allocs and frees. */
  size_t stream_cached_bytes;   /* freed on a stream, kept by the threads' caches for reuse */
  size_t stream_cached_count;
  size_t stream_heaps;          /* threads' caches (one per thread that used the path) */
  uint64_t stream_events;       /* events recorded, one per batch of frees another stream wanted */
  uint64_t stream_event_waits;  /* cuStreamWaitEvent calls (CUEMM_STREAM_REUSE=wait, cuemm_record_stream) */
  uint64_t stream_steals;       /* blocks freed on one stream that served another (in the pool: batches) */
  uint64_t stream_reclaims;     /* times the pool took idle cached blocks back instead of growing */
  /* Device memory held from the driver: the pool's mapped bytes, the
   * managed segments, and the cuMemAlloc allocations not yet given back
   * (live or pending a flush); the highest figure seen.  peak_held_bytes /
   * peak_bytes is the manager's footprint. */
  size_t held_bytes;
  size_t peak_held_bytes;
  /* The event log (log_file): rows written for this manager, and rows lost
   * because the file could not be written (a full disk: the log stops,
   * with one message on stderr, and the program goes on). */
  uint64_t log_rows;
  uint64_t log_lost;
  /* The threads' spans (cuemm_config.stream_spans): how many there are,
   * their bytes, and the bytes of them not handed out (kept by their
   * threads for their streams; used_bytes of the pool counts whole
   * spans). */
  size_t stream_spans;
  size_t stream_span_bytes;
  size_t stream_span_free_bytes;
} cuemm_stats;

/* A consistent snapshot of the manager's counters. */
CUEMM_EXTERN CUresult cuemm_get_stats(cuemm_manager *m, cuemm_stats *s);

/* The bytes m holds from the driver now (cuemm_stats.held_bytes: pool
 * memory mapped, cuMemAlloc allocations, managed memory), read without the
 * manager's lock and without asking the threads' caches: a few loads, for
 * a gauge sampled at every allocation or step.  cuemm_get_stats takes the
 * lock and every thread's cache; cuemm_pool_get_stats walks the pool's
 * blocks.  Errors: CUDA_ERROR_INVALID_VALUE for m or held NULL. */
CUEMM_EXTERN CUresult cuemm_get_held(const cuemm_manager *m, size_t *held);

/* Frees everything this manager owns: the pending queue and every live device
 * and pinned host allocation, and unpins every pinned range.  All pointers the
 * program holds from this manager become invalid.  Inside a defer scope,
 * nothing is freed yet: the live allocations join the pending queue and are
 * released by the first flush after the scopes close (pinned ranges are
 * unpinned at once, as unpinning always is). */
CUEMM_EXTERN CUresult cuemm_reset(cuemm_manager *m);

/* ------------------------------------------------------------------------ */
/* Seeing what the allocator does                                            */

/* The event log.  With log_file (CUEMM_LOG) set, every device allocation
 * and free of the manager (cuemm_alloc, cuemm_free, the stream-ordered
 * calls with their stream, the drop-ins; not pinned host memory) is a row
 * of a CSV file in the format of RMM's logging_resource_adaptor, so that
 * RMM's tools read it, with columns of cuemm's own after RMM's six:
 *
 *   Thread,Time,Action,Pointer,Size,Stream,Seq,Manager,Call,Held,Events
 *
 *   Thread   the OS thread id (gettid)
 *   Time     local wall-clock time, HH:MM:SS.microseconds
 *   Action   allocate, free, or "allocate failure" (Pointer 0x0)
 *   Pointer  hex, 0x-prefixed; Size decimal bytes (for a free, the size
 *            the allocation was made with); Stream hex, 0x0 for the legacy
 *            default stream and for the calls that take no stream
 *   Seq      the event's place in the process's order of events: rows are
 *            buffered per thread, so with several threads the file is in
 *            order within each thread and Seq gives the order across them
 *   Manager  which manager (one per context; numbered from 1 in creation
 *            order), when several share one file
 *   Call     alloc, free, alloc_async, free_async
 *   Held     device bytes the manager held from the driver after the
 *            event (cuemm_stats.held_bytes)
 *   Events   what the call made the manager do, space-separated:
 *            grow=BYTES (the pool mapped more), release=BYTES (the pool gave
 *            chunks back), flush=N (N pending frees released), oom-retry
 *            (out of memory, flushed and retried), reclaim=BYTES (cached
 *            stream blocks taken back by the pool), fallback (a request too
 *            large for the pool, given to cuMemAlloc).  A flush, trim or
 *            release of a call that neither allocates nor frees
 *            (cuemm_flush, cuemm_pool_trim, the end of a defer scope) is
 *            listed on the next row the same thread writes, prefixed
 *            "earlier:", so that every row stays one RMM reads.
 *
 * Rows go to a buffer per thread and reach the file when it fills, when
 * the thread exits, on cuemm_destroy and at the process's exit; the file is
 * truncated and its header written at creation.  Managers naming the same
 * file share it.  A file that cannot be opened fails cuemm_create
 * (CUDA_ERROR_INVALID_VALUE, with the path and the system's reason); one
 * that cannot be written later (a full disk) stops the log with one
 * message on stderr, counted in cuemm_stats.log_lost, and the program's
 * allocations go on. */

/* Writes every row of the manager's event log still buffered (by any of
 * its threads, running or not) to the file now, so that a program, or a
 * tool collecting the logs of many processes (cuemm.dask.gather_logs),
 * reads a complete file while the program runs.  Does nothing when the
 * manager has no log.  Thread-safe; the threads writing rows wait for the
 * moment their buffer is written.
 * Errors: CUDA_ERROR_INVALID_VALUE for m == NULL.  A file that cannot be
 * written stops the log as described above (cuemm_stats.log_lost). */
CUEMM_EXTERN CUresult cuemm_log_flush(cuemm_manager *m);

/* Writes the manager's statistics as a short table to `f` (NULL: stderr):
 * live and peak bytes, held and peak held bytes and the footprint (peak
 * held / peak live), allocations, frees, flushes, growth steps, releases,
 * out-of-memory retries, the pool's fragmentation, and the bytes the
 * stream-ordered path caches per stream.  CUEMM_STATS=1 prints it when
 * the manager is destroyed, or at exit.
 * Errors: CUDA_ERROR_INVALID_VALUE for m == NULL; CUDA_ERROR_UNKNOWN when
 * writing to `f` failed (errno's reason in the message). */
CUEMM_EXTERN CUresult cuemm_stats_print(cuemm_manager *m, FILE *f);

/* What a block of a snapshot is. */
typedef enum cuemm_block_state {
  CUEMM_BLOCK_LIVE = 0,     /* held by the program */
  CUEMM_BLOCK_PENDING = 1,  /* freed by the program, waiting for a flush (the deferred path) */
  CUEMM_BLOCK_CACHED = 2,   /* freed on a stream, kept in a thread's cache for reuse on it */
  CUEMM_BLOCK_FREE = 3,     /* free pool memory */
} cuemm_block_state;

typedef struct cuemm_snapshot_chunk {
  CUdeviceptr base;  /* a physical allocation mapped into the pool */
  size_t size;
} cuemm_snapshot_chunk;

typedef struct cuemm_snapshot_block {
  CUdeviceptr ptr;
  size_t size;              /* the bytes the block spans (rounded) */
  size_t requested;         /* what the program asked for (0 for free memory, and for a chunk that a
                             * failed growth could not unmap: live, out of use until destruction) */
  CUstream stream;          /* the stream of a stream-ordered block (its last one when cached) */
  cuemm_block_state state;
  int chunk;                /* index into chunks; -1 for memory outside the pool (cuMemAlloc, managed) */
  int stream_ordered;       /* 1: a pool block on the stream-ordered path: from cuemm_alloc_async, or from
                             * cuemm_alloc and named since with cuemm_record_stream (stream is then the
                             * stream named); 0 for blocks outside the pool, cuemm_alloc_async's too */
} cuemm_snapshot_block;

/* A manager's memory at one moment: the pool's chunks, in address order,
 * and every block, live, pending, cached and free, in address order (the
 * pool's first, then those outside it). */
typedef struct cuemm_snapshot {
  size_t nchunks;
  cuemm_snapshot_chunk *chunks;
  size_t nblocks;
  cuemm_snapshot_block *blocks;
  cuemm_stats stats;          /* the manager's statistics at the same moment */
  cuemm_pool_stats pool;      /* and the pool's (enabled = 0 without one) */
} cuemm_snapshot;

/* Takes a snapshot of the manager (its lock held for the copy, so it is
 * consistent; the threads' caches are read under their own locks).  Free
 * it with cuemm_snapshot_free.
 * Errors: CUDA_ERROR_INVALID_VALUE for a NULL argument;
 * CUDA_ERROR_OUT_OF_MEMORY when host memory for the copy ran out. */
CUEMM_EXTERN CUresult cuemm_snapshot_take(cuemm_manager *m, cuemm_snapshot **out);
CUEMM_EXTERN void cuemm_snapshot_free(cuemm_snapshot *s);

/* Writes a snapshot as one JSON object to `f`:
 *   {"version":1,"stats":{...},"pool":{...},
 *    "chunks":[{"base":"0x...","size":N},...],
 *    "blocks":[{"ptr":"0x...","size":N,"requested":N,"stream":"0x...",
 *               "state":"live|pending|cached|free","chunk":I,
 *               "stream_ordered":true|false},...]}
 * Errors: CUDA_ERROR_INVALID_VALUE for a NULL argument; CUDA_ERROR_UNKNOWN
 * when writing failed. */
CUEMM_EXTERN CUresult cuemm_snapshot_write_json(const cuemm_snapshot *s, FILE *f);

/* ------------------------------------------------------------------------ */
/* Sharing device memory between processes (IPC)                             */

/* A process exports a pointer into one of its manager's allocations as a
 * handle; another process opens the handle and gets a device pointer to the
 * same bytes, with no copy.  Two kinds of memory are shared two ways:
 *
 *   - cuMemAlloc memory (managers without a pool, and requests too large for
 *     the pool): the handle (CUEMM_IPC_KIND_DEVICE) wraps the driver's legacy
 *     IPC handle and is plain bytes: send it through a pipe, a socket or a
 *     file (write(fd, &h, sizeof h)) and check what arrives with
 *     cuemm_ipc_handle_from_bytes.
 *   - pool blocks (CUEMM_POOL=vmm with CUEMM_POOL_IPC=1): legacy IPC cannot
 *     export cuMemCreate memory.  The pool then creates its chunks (its
 *     physical allocations) exportable as POSIX file descriptors, and the
 *     handle (CUEMM_IPC_KIND_POOL) describes the chunks the exported range
 *     overlaps.  File descriptors are not bytes: they travel beside the
 *     handle over a Unix domain socket, as SCM_RIGHTS ancillary data, with
 *     cuemm_ipc_send and cuemm_ipc_recv.  cuemm_ipc_open imports them,
 *     reserves an address range, maps the chunks into it in order and gives
 *     this process's device read-write access.  Without CUEMM_POOL_IPC,
 *     exporting a pool block fails with CUDA_ERROR_NOT_SUPPORTED and a
 *     message that says how to enable it.
 *
 * cuemm_ipc_send and cuemm_ipc_recv carry handles of both kinds (a device
 * handle with no descriptors), so a program may use them for everything.
 * Create the socket with socketpair(AF_UNIX, ...) before fork, or connect to
 * a named one; SCM_RIGHTS needs no privilege (unlike pidfd_getfd, which
 * containers often forbid).
 *
 * Byte layout (CUEMM_IPC_HANDLE_SIZE = 128 bytes, no padding; integers in the
 * host's byte order, since IPC never leaves the machine):
 *
 *   offset size field
 *        0    4 magic        "cuem" (no terminating NUL)
 *        4    2 version      CUEMM_IPC_HANDLE_VERSION (1)
 *        6    2 kind         CUEMM_IPC_KIND_DEVICE (1): cuMemAlloc memory
 *                            shared with the driver's legacy IPC;
 *                            CUEMM_IPC_KIND_POOL (2): pool blocks shared as
 *                            file descriptors of their chunks; other values
 *                            are kept for memory that needs another
 *                            mechanism (stream-ordered pools)
 *        8    4 source_pid   the exporting process
 *       12    4 checksum     32-bit FNV-1a (offset basis 2166136261, prime
 *                            16777619) of all 128 bytes, the checksum's own
 *                            four bytes counted as zero
 *       16    8 offset       of the exported pointer from the allocation's
 *                            start (pool: from the first chunk's start)
 *       24    8 size         bytes the importer may use from that pointer
 *       32    8 alloc_size   bytes of the whole allocation (pool: of all the
 *                            chunks listed, added up)
 *       40   16 device_uuid  cuDeviceGetUuid of the exporting device
 *       56    8 reserved     zero
 *       64   64 driver       kind 1: cuIpcGetMemHandle of the allocation's
 *                            start.  kind 2: `pieces`, the chunks the range
 *                            overlaps:
 *                              64  4 count    chunks, 1 to
 *                                             CUEMM_IPC_POOL_MAX_PIECES (6)
 *                              68  4 reserved zero
 *                              72  8 serial   the exporter's number of the
 *                                             first chunk (never reused by
 *                                             its pool)
 *                              80 48 bytes    each chunk's size, in address
 *                                             order (6 x 8 bytes; those past
 *                                             count are zero)
 *                            The range starts in the first chunk and ends in
 *                            the last.  A range overlapping more chunks than
 *                            fit cannot be exported (a larger CUEMM_POOL_CHUNK
 *                            makes fewer, larger chunks).
 *
 * Lifetime.  The exporting process owns the memory: it must keep the
 * allocation alive (not free it, not reset or destroy its manager) until
 * every importer has closed it, since cuemm cannot see into other processes.
 * Freeing an exported allocation is deferred like any other free, and the
 * memory goes back to the driver at the next flush; an importer still using
 * it then has undefined behaviour (the driver's rule for cuMemFree before
 * cuIpcCloseMemHandle).  A pool block follows the same rule: after the
 * flush that returns it, the exporter's pool hands its bytes out again, and
 * an importer still mapping them sees (and corrupts) the new owner's data.
 * The physical memory of a pool chunk, though, stays alive as long as an
 * importer maps it, even when the exporter's pool has released the chunk
 * (the driver counts the importer's mapping as a reference), so a late
 * close never touches memory that the driver gave to someone else.
 * In the importer, a handle's mapping is a view that owns no memory, so
 * closing it is immediate (never queued, defer scopes or not), and
 * cuemm_destroy of an importing manager closes the mappings still open in its
 * context (its message says how many).  cuemm_reset leaves them open.
 *
 * Devices.  A handle opened on the device it came from maps the memory
 * directly.  Opened on another device, the source device is found by its
 * UUID and must be reachable as a peer (cuDeviceCanAccessPeer); for a device
 * handle the driver then enables peer access lazily
 * (CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), a pool handle's mapping is made
 * accessible to the importing device with cuMemSetAccess.
 * cuemm never falls back to a staged copy through host memory: where the
 * memory cannot be mapped, the open fails and says why.
 *
 * Thread-safety: cuemm_ipc_export holds the manager's lock (the allocation
 * cannot be freed meanwhile), and so does cuemm_ipc_send while it exports
 * the file descriptors (not while it writes to the socket); cuemm_ipc_open,
 * cuemm_ipc_close, cuemm_ipc_recv and cuemm_ipc_discard serialize on one
 * process-wide lock; cuemm_ipc_handle_from_bytes touches no shared state.
 */

#define CUEMM_IPC_HANDLE_SIZE 128
#define CUEMM_IPC_HANDLE_VERSION 1
#define CUEMM_IPC_MAGIC "cuem"
#define CUEMM_IPC_KIND_DEVICE 1
#define CUEMM_IPC_KIND_POOL 2
#define CUEMM_IPC_POOL_MAX_PIECES 6

/* The chunks of a pool handle (kind CUEMM_IPC_KIND_POOL), in place of the
 * driver's handle. */
typedef struct cuemm_ipc_pieces {
  uint32_t count;
  uint32_t reserved;
  uint64_t serial;
  uint64_t bytes[CUEMM_IPC_POOL_MAX_PIECES];
} cuemm_ipc_pieces;

typedef struct cuemm_ipc_handle {
  char magic[4];
  uint16_t version;
  uint16_t kind;
  uint32_t source_pid;
  uint32_t checksum;
  uint64_t offset;
  uint64_t size;
  uint64_t alloc_size;
  uint8_t device_uuid[16];
  uint8_t reserved[8];
  union {
    CUipcMemHandle driver;     /* kind CUEMM_IPC_KIND_DEVICE */
    cuemm_ipc_pieces pieces;   /* kind CUEMM_IPC_KIND_POOL */
  };
} cuemm_ipc_handle;

/* Fills *h for the device pointer p, which may be the start of an allocation
 * of this manager or any byte inside it.  The importer may use `size` bytes
 * from p; 0 means up to the end of the allocation.  A pool block gives a
 * handle of kind CUEMM_IPC_KIND_POOL, to be sent with cuemm_ipc_send.
 * Errors: CUDA_ERROR_INVALID_VALUE for m, h or p NULL; for a pointer inside no
 * live allocation of this manager (another manager's or cuMemAlloc's memory,
 * host memory, an allocation already freed, pending release or not); for
 * size running past the allocation's end.  CUDA_ERROR_NOT_SUPPORTED when the
 * driver has no legacy IPC (for cuMemAlloc memory); for a pool block when
 * the pool was created without CUEMM_POOL_IPC=1 (cuemm_config.pool_ipc = 1;
 * the message says so), or when the range overlaps more than
 * CUEMM_IPC_POOL_MAX_PIECES chunks; for any pointer of a manager of managed
 * or system memory (CUEMM_MEMORY=managed|system: CUDA IPC cannot share it;
 * the message says to allocate shared buffers from a device-memory
 * manager); driver errors of cuIpcGetMemHandle as reported.  *h is written
 * only on success. */
CUEMM_EXTERN CUresult cuemm_ipc_export(cuemm_manager *m, CUdeviceptr p, size_t size, cuemm_ipc_handle *h);

/* Checks `len` bytes received from another process and, when they are a
 * handle, copies them to *h.
 * Errors (all CUDA_ERROR_INVALID_VALUE, *h untouched, the message says which
 * check failed): h or bytes NULL; len other than CUEMM_IPC_HANDLE_SIZE; a
 * wrong magic, a version other than CUEMM_IPC_HANDLE_VERSION, a checksum
 * that does not match, reserved bytes not zero, a zero pid, size 0, or
 * offset + size beyond alloc_size; for a pool handle, a chunk count outside
 * 1..CUEMM_IPC_POOL_MAX_PIECES, a chunk of size 0, sizes that do not add up
 * to alloc_size, nonzero bytes past the count, or a range that does not
 * start in the first chunk and end in the last.  CUDA_ERROR_NOT_SUPPORTED
 * for a well-formed handle of a kind this version of cuemm cannot open. */
CUEMM_EXTERN CUresult cuemm_ipc_handle_from_bytes(cuemm_ipc_handle *h, const void *bytes, size_t len);

/* *p = the exported pointer (the allocation's start + offset), mapped in m's
 * context; m NULL: the manager of the calling thread's current context
 * (cuemm_get).  The handle is checked first as cuemm_ipc_handle_from_bytes
 * checks bytes, so reading it straight into a cuemm_ipc_handle is safe too.
 * Opening a handle of an allocation that this context has open already maps
 * nothing new: the pointer shares that mapping, which stays until the last of
 * its users is closed.  See "Devices" above for handles from another device.
 * A pool handle is opened with the file descriptors cuemm_ipc_recv received
 * with it: the open that maps it imports them (cuMemImportFromShareableHandle),
 * reserves an address range (cuMemAddressReserve), maps the chunks
 * (cuMemMap), sets access (cuMemSetAccess) and then closes them; an open
 * that shares an existing mapping leaves them for a later one.  A failed
 * open undoes every step and keeps the descriptors, so the open can be
 * tried again (or the descriptors closed with cuemm_ipc_discard).
 * Errors: CUDA_ERROR_INVALID_VALUE for h or p NULL and every malformed handle;
 * CUDA_ERROR_INVALID_CONTEXT for a handle exported by this very process (its
 * source_pid is this process's pid; the driver cannot open it either: use the
 * exporter's pointer directly);
 * CUDA_ERROR_INVALID_DEVICE when no device of this process has the source's
 * UUID; CUDA_ERROR_PEER_ACCESS_UNSUPPORTED when m's device cannot reach the
 * source device; CUDA_ERROR_NOT_SUPPORTED when the driver has no legacy IPC;
 * driver errors of cuIpcOpenMemHandle as reported (for instance when the
 * exporter has freed the memory or exited).  For a pool handle:
 * CUDA_ERROR_INVALID_VALUE when no file descriptors were received for it
 * (cuemm_ipc_recv) and this context has it open nowhere;
 * CUDA_ERROR_NOT_SUPPORTED when the driver lacks the virtual memory entry
 * points; the error of the failing driver call, named in the message. */
CUEMM_EXTERN CUresult cuemm_ipc_open(cuemm_manager *m, const cuemm_ipc_handle *h, CUdeviceptr *p);

/* Closes a pointer from cuemm_ipc_open on the same manager (m NULL: the
 * current context's), once per open.  The last close of a mapping unmaps it
 * at once: cuIpcCloseMemHandle, or for a pool handle cuMemUnmap and
 * cuMemAddressFree.
 * Errors: CUDA_ERROR_INVALID_VALUE for a pointer that is not open in m's
 * context (never opened, closed as many times as opened, or opened with
 * another manager); driver errors of the unmapping, after which the
 * pointer stays open and the close may be tried again. */
CUEMM_EXTERN CUresult cuemm_ipc_close(cuemm_manager *m, CUdeviceptr p);

/* Sends handle *h over the connected Unix domain socket `sock` as one
 * message: its 128 bytes, with, for a pool handle, one file descriptor per
 * chunk as SCM_RIGHTS ancillary data.  The descriptors are exported from
 * the chunks (cuMemExportToShareableHandle) under m's lock, then sent, then
 * closed here (the receiver holds its own copies).  m is the manager that
 * exported a pool handle (NULL: the current context's, cuemm_get); for a
 * device handle it is not used and may be NULL.  A stream socket may take
 * the bytes in several writes; the descriptors go with the first.
 * Errors: CUDA_ERROR_INVALID_VALUE for h NULL, sock negative, a malformed
 * handle (checked as cuemm_ipc_handle_from_bytes does), a pool handle
 * exported by another process or another manager, or whose range is no
 * longer a live block of m's pool (freed, or its chunk released);
 * CUDA_ERROR_OPERATING_SYSTEM when the socket refuses the message (the
 * message gives the system's reason; part of the bytes may have gone);
 * driver errors of cuMemExportToShareableHandle.  No descriptor stays open
 * in this process after the call, whatever its result. */
CUEMM_EXTERN CUresult cuemm_ipc_send(int sock, cuemm_manager *m, const cuemm_ipc_handle *h);

/* Receives one message of cuemm_ipc_send from `sock` into *h: reads exactly
 * 128 bytes (waiting for all of them) and the file descriptors sent with
 * them, checks the handle as cuemm_ipc_handle_from_bytes does and the
 * number of descriptors against it (one per chunk for a pool handle, none
 * for a device handle), and keeps the descriptors in this process's table
 * of received descriptors, for cuemm_ipc_open.  Receiving the same handle
 * again keeps another set.
 * Errors: CUDA_ERROR_INVALID_VALUE for h NULL, sock negative, a message
 * that ends before 128 bytes (the peer closed the socket: "truncated"),
 * bytes that are not a valid handle, descriptors cut off (MSG_CTRUNC) or
 * not as many as the handle needs; CUDA_ERROR_NOT_SUPPORTED for a handle of
 * an unknown kind; CUDA_ERROR_OPERATING_SYSTEM when reading the socket
 * fails.  On any error *h is untouched and every descriptor that arrived
 * is closed. */
CUEMM_EXTERN CUresult cuemm_ipc_recv(int sock, cuemm_ipc_handle *h);

/* Closes one set of descriptors cuemm_ipc_recv kept for *h, for a handle
 * received but not to be opened (an open that maps consumes one set itself).
 * Errors: CUDA_ERROR_INVALID_VALUE for h NULL or when no set is kept for
 * this handle. */
CUEMM_EXTERN CUresult cuemm_ipc_discard(const cuemm_ipc_handle *h);

/* ------------------------------------------------------------------------ */
/* Drop-ins for cuMemAlloc / cuMemFree                                       */

/* cuemm_alloc / cuemm_free on the manager of the calling thread's current
 * context (cuemm_get), for programs that swap the driver calls one for one. */
CUEMM_EXTERN CUresult cuemm_mem_alloc(CUdeviceptr *p, size_t size);
CUEMM_EXTERN CUresult cuemm_mem_free(CUdeviceptr p);

/* ------------------------------------------------------------------------ */
/* Framework adapters: one manager per device, PyTorch's pluggable allocator  */

/* Frameworks that run on the CUDA runtime (PyTorch, CuPy) use each device's
 * primary context and name devices by ordinal.  The calls below give them
 * one manager per device, made on first use over the device's primary
 * context, and the C entry points PyTorch's
 * torch.cuda.memory.CUDAPluggableAllocator calls.  python/cuemm_torch.py
 * and python/cuemm_cupy.py switch the frameworks to them.
 *
 * Configuration.  The manager is created with cuemm_config_init's
 * configuration (the CUEMM_* environment), with one change: when CUEMM_POOL
 * is unset or empty and CUEMM_MEMORY is "device" (its default), the pool is
 * on (CUEMM_POOL=vmm), since the frameworks free in stream order and the
 * stream-ordered path serves pool blocks.  CUEMM_POOL=none set explicitly
 * is obeyed: the adapters then take the deferred path (cuemm_alloc and
 * cuemm_free, whose flush synchronizes the context), as they do for
 * CUEMM_MEMORY=managed or system (see "Stream-ordered allocation").
 * CUEMM_LOG, CUEMM_STATS and the pool's knobs apply as to any manager.
 *
 * Lifetime.  The primary context is retained when the manager is made and
 * both stay until the process ends (frameworks free memory until their last
 * destructor runs).  The manager is registered as the primary context's,
 * so cuemm_get on a thread where that context is current finds it; a
 * manager the program had made already for the primary context is used as
 * it is (its configuration unchanged).
 *
 * Errors.  The PyTorch entry points return void or a pointer, so a failure
 * leaves the calling thread's message (cuemm_last_error) and is counted,
 * with its message, in cuemm_adapter_stats, which any thread can read (a
 * framework often frees on another thread than the one that asks). */

/* *m = the manager of device `device`'s primary context (a driver ordinal,
 * as the CUDA runtime numbers devices: CUDA_VISIBLE_DEVICES applies to
 * both), made on first use as described above.  Thread-safe; after the
 * first call for a device, one atomic load.
 * Errors: CUDA_ERROR_INVALID_VALUE for m NULL, or an invalid CUEMM_*
 * variable (the message names it); CUDA_ERROR_INVALID_DEVICE for an ordinal
 * that is negative or not below the driver's device count (the message
 * gives the count); errors of loading the driver, of
 * cuDevicePrimaryCtxRetain and of cuemm_create as reported. */
CUEMM_EXTERN CUresult cuemm_device_manager(int device, cuemm_manager **m);

/* The adapters' failures, process-wide. */
typedef struct cuemm_adapter_stats {
  int devices;                       /* managers made by cuemm_device_manager so far */
  uint64_t alloc_failures;           /* cuemm_torch_alloc calls that returned NULL for a nonzero size */
  uint64_t free_failures;            /* cuemm_torch_free calls refused (a pointer no device manager holds) */
  uint64_t record_stream_failures;   /* cuemm_torch_record_stream calls refused */
  uint64_t empty_cache_failures;     /* cuemm_torch_empty_cache passes that failed on some device */
  uint64_t empty_caches;             /* cuemm_torch_empty_cache calls */
  uint64_t graph_pools;              /* pools begun with cuemm_torch_begin_allocate_to_pool */
  uint64_t graph_blocks_held;        /* blocks freed while their pool was alive, held for it */
  uint64_t graph_failures;           /* graph pool hooks refused (a bad device, no host memory) */
  char last_failure[512];            /* the message of the latest failure counted above, "" if none */
} cuemm_adapter_stats;

/* Fills *s.  Errors: CUDA_ERROR_INVALID_VALUE for s NULL. */
CUEMM_EXTERN CUresult cuemm_adapter_get_stats(cuemm_adapter_stats *s);

/* PyTorch's pluggable allocator (torch.cuda.memory.CUDAPluggableAllocator,
 * PyTorch 2.x), whose C++ side calls these through function pointers:
 *
 *   alloc  void *(size_t size, int device, cudaStream_t stream)
 *   free   void (void *ptr, size_t size, int device, cudaStream_t stream)
 *
 * (its documentation spells size as ssize_t: the same bits.)  A
 * cudaStream_t is the driver's CUstream.  PyTorch calls alloc with the
 * current device and its current stream, and free with the device and
 * stream the block was allocated with, from any thread (autograd frees on
 * its own threads).
 *
 * cuemm_torch_alloc: `size` bytes for work on `stream` of device `device`,
 * with cuemm_alloc_async on the device's manager (cuemm_device_manager),
 * or on the current tag's manager of the device (see "Tags" below).
 * Size 0 returns NULL and is no failure: PyTorch asks for 0 bytes for empty
 * tensors and never frees a NULL pointer, as cudaMalloc gives NULL for 0
 * bytes.  Otherwise NULL means failure, the message saying why: out of
 * memory (after the flush, trim and retry every cuemm allocation makes), a
 * size above SSIZE_MAX (a negative ssize_t), a device that does not exist.
 * Note: PyTorch's pluggable allocator (2.4 to 2.9 at least) does not check
 * the pointer alloc returns, so a NULL for a nonzero size reaches its
 * kernels as a null tensor, and an out-of-memory shows as an illegal
 * address later; cuemm_adapter_stats.alloc_failures and last_failure say
 * what happened.
 *
 * cuemm_torch_free: cuemm_free_async of p on `stream` (the block's own
 * stream) on the manager of device `device` that handed it out (the
 * device's, or a tag's); NULL does nothing; `size` is not used.  A pointer
 * none of the device's managers holds is refused (counted, nothing
 * freed).  */
CUEMM_EXTERN void *cuemm_torch_alloc(size_t size, int device, CUstream stream);
CUEMM_EXTERN void cuemm_torch_free(void *p, size_t size, int device, CUstream stream);

/* The hooks PyTorch's _CUDAPluggableAllocator object takes (set_*_fn):
 *
 * cuemm_torch_record_stream (set_record_stream_fn, void(void *, cudaStream_t)):
 *   Tensor.record_stream: cuemm_record_stream on the manager that holds p
 *   (every device's managers are asked, tags' included).
 * cuemm_torch_empty_cache (set_reset_fn, void(void)): torch.cuda.empty_cache:
 *   on every device's managers (tags' included, suspended ones skipped),
 *   cuemm_pool_trim (flushes, gives every cached
 *   block back, releases every wholly free chunk; it synchronizes each
 *   context, as PyTorch's own empty_cache does), or cuemm_managed_trim,
 *   or cuemm_flush for a manager of neither.
 * cuemm_torch_init (set_init_fn, void(int)): PyTorch's lazy CUDA
 *   initialization; loads the driver, so that a missing one is counted
 *   early (managers are still made per device on first use). */
CUEMM_EXTERN void cuemm_torch_record_stream(void *p, CUstream stream);
CUEMM_EXTERN void cuemm_torch_empty_cache(void);
CUEMM_EXTERN void cuemm_torch_init(int device_count);

/* CUDA graphs.  While PyTorch captures a graph (torch.cuda.graph,
 * CUDAGraph.capture_begin) it calls beginAllocateToPool and
 * endAllocateToPool around the capture and releasePool when the graph is
 * reset or destroyed; the pluggable allocator passes them to the hooks
 * set_begin_allocate_to_pool, set_end_allocate_to_pool_fn and
 * set_release_pool.  Blocks handed out between begin and end on the device
 * belong to the graph's pool: the graph's replays use their addresses, so
 * cuemm must not give them to anyone else while the graph lives.  A free of
 * such a block before the pool is released holds it (counted in
 * graph_blocks_held); releasing the pool frees the held blocks, and a block
 * of a released pool freed later is freed at once, both with cuemm_free,
 * whose flush synchronizes the context (a replay may still run).  Between
 * begin and end the device's allocations and frees run with the thread's
 * stream capture mode relaxed (cuThreadExchangeStreamCaptureMode, where the
 * driver has it), so that a pool growth (cuMemCreate, cuMemMap) or an
 * event of another stream is allowed during a global-mode capture, as
 * PyTorch's own allocator relaxes it around cudaMalloc.  Every allocation on
 * the device in that window joins the pool, from any stream or thread
 * (PyTorch's filter, a C++ std::function, cannot be called from C): at
 * worst memory is held longer than PyTorch would hold it.
 *
 * A pool id is PyTorch's MempoolId_t, a std::pair of two unsigned long
 * long, passed by value; the begin hook's third argument is the filter, a
 * std::function passed by reference to a temporary under the Itanium C++
 * ABI (x86-64 and AArch64 Linux), which cuemm takes as an opaque pointer
 * and never uses.  These signatures match the C++ ones on those ABIs
 * only. */
typedef struct cuemm_torch_pool_id {
  unsigned long long first, second;
} cuemm_torch_pool_id;
CUEMM_EXTERN void cuemm_torch_begin_allocate_to_pool(int device, cuemm_torch_pool_id pool, void *filter);
CUEMM_EXTERN void cuemm_torch_end_allocate_to_pool(int device, cuemm_torch_pool_id pool);
CUEMM_EXTERN void cuemm_torch_release_pool(int device, cuemm_torch_pool_id pool);

/* PyTorch's MemPool mode (cuemm.torch.mempool): torch.cuda.MemPool with a
 * pluggable allocator takes whole segments from these, while PyTorch's
 * caching allocator stays the process's allocator and carves the segments
 * into tensors (so memory_stats() and memory snapshots keep working).
 *
 * cuemm_torch_segment_alloc: a segment of `size` bytes for `stream` of
 * device `device`, with cuemm_alloc_async on the default tag's manager of
 * the device (cuemm_alloc where that manager has no pool), whatever tag is
 * current.  NULL for size 0, or on failure, counted as an alloc failure with
 * its message (PyTorch raises its out-of-memory error on NULL here).
 * cuemm_torch_segment_alloc_fn: *fn = the same function bound to `tag` (NULL
 * or "": cuemm_torch_segment_alloc itself; a tag is named and numbered as by
 * cuemm_adapter_set_tag, see "Tags" below): one function per tag, since the
 * pluggable signature carries no user data, for a MemPool whose segments
 * must go to that tag's manager wherever PyTorch asks for them (inside
 * another pool's scope, on another thread, during a graph capture).  Errors:
 * CUDA_ERROR_INVALID_VALUE for fn NULL, and those of cuemm_adapter_set_tag's
 * name.
 * cuemm_torch_segment_free: gives a segment back to the manager of the
 * device that holds it (any tag's) with cuemm_free, deferred: the flush
 * synchronizes the context, as PyTorch's own cudaFree of a segment does, so
 * the stream named (the segment's, perhaps destroyed since) is not used.
 * NULL does nothing; a pointer no manager holds is counted as a free
 * failure.  A segment is a pool block: cuemm_adapter_suspend of its tag
 * releases its memory under PyTorch's tensors, and cuemm_ipc_export of its
 * manager shares it (with CUEMM_POOL_IPC=1). */
typedef void *(*cuemm_torch_alloc_fn)(size_t size, int device, CUstream stream);
CUEMM_EXTERN void *cuemm_torch_segment_alloc(size_t size, int device, CUstream stream);
CUEMM_EXTERN CUresult cuemm_torch_segment_alloc_fn(const char *tag, cuemm_torch_alloc_fn *fn);
CUEMM_EXTERN void cuemm_torch_segment_free(void *p, size_t size, int device, CUstream stream);

/* Tags.  A program that shares a GPU over time (an inference engine and a
 * trainer taking turns, a service going idle) gives back the memory of one
 * purpose while keeping another's: the KV cache discarded, the weights
 * kept.  Each purpose is a tag: a name that gets its own manager on each
 * device, over the same primary context as the device's manager, with its
 * own pool, so that it can be suspended and resumed on its own
 * (cuemm_adapter_suspend, cuemm_adapter_resume).  The device's manager
 * (cuemm_device_manager) is the default tag, named NULL or "".
 *
 * cuemm_torch_alloc (and so CuPy's allocator, which calls it) allocates
 * from the current tag's manager on the device.  The current tag is one
 * for the whole process, not one per thread: PyTorch's backward pass
 * allocates gradients on its autograd threads, which a tag set on the
 * thread that runs the training step would not reach.  Two threads that
 * want different tags at once cannot have them: the last one set holds.
 * cuemm_torch_free, cuemm_torch_record_stream and the graph pools find the
 * manager that handed a block out from the pointer, whatever the current
 * tag (the default manager is asked first; while no tag has a manager, a
 * free costs what it cost before tags).  cuemm_torch_empty_cache trims
 * every tag's manager, skipping suspended ones.  A block captured into a
 * CUDA graph's pool while a tag was current belongs to that tag's manager.
 *
 * A tag's manager is made on first use, with cuemm_config_init's
 * configuration and the pool always on (CUEMM_POOL=vmm: suspending needs
 * it) when CUEMM_MEMORY is "device"; its event log, when CUEMM_LOG is set,
 * goes to that file name followed by "." and the tag.  It is a secondary
 * manager (cuemm_config.secondary): cuemm_get finds the default one.  It lives
 * as long as the process.  A tag is a name of 1 to 63 letters, digits,
 * '_', '-' and '.'; a process has at most 63 tags besides the default. */

/* Makes `tag` (NULL or "": the default) the current tag of the process;
 * *previous (when not NULL) gets the tag current before, NULL for the
 * default (the string lives as long as the process).  No manager is made
 * until an allocation needs it.  Thread-safe (one atomic exchange).
 * Errors: CUDA_ERROR_INVALID_VALUE for a name too long or with other
 * characters (the message says which), CUDA_ERROR_OUT_OF_MEMORY past 63
 * tags; the current tag then stays. */
CUEMM_EXTERN CUresult cuemm_adapter_set_tag(const char *tag, const char **previous);
/* The current tag; NULL for the default. */
CUEMM_EXTERN const char *cuemm_adapter_get_tag(void);
/* *m = the manager of `tag` (NULL or "": the default, as
 * cuemm_device_manager) on device `device`, made on first use: for its
 * statistics (cuemm_get_stats, cuemm_pool_get_stats), a snapshot, or a
 * plugin that allocates from it (Numba's).  Thread-safe.  Errors: those of
 * cuemm_adapter_set_tag's name, and of cuemm_device_manager, for the
 * device, as reported. */
CUEMM_EXTERN CUresult cuemm_adapter_tag_manager(const char *tag, int device, cuemm_manager **m);
/* cuemm_pool_suspend(m, flags) of `tag`'s manager on `device` (NULL or "":
 * the default manager), made first if the tag has none there yet, so that
 * the tag's allocations are refused until it is resumed; and
 * cuemm_pool_resume of it.  Everything cuemm_pool_suspend says holds: the
 * context is synchronized, the tag's live blocks keep their addresses, and
 * their contents survive only with CUEMM_SUSPEND_KEEP.  While a tag is
 * suspended, cuemm_torch_alloc with the tag current returns NULL (counted
 * as a failure, with the message saying the manager is suspended); frees of
 * its blocks are accepted.
 * Errors: those of the tag's name and of cuemm_adapter_tag_manager;
 * cuemm_pool_suspend's and cuemm_pool_resume's, with the message prefixed
 * by the call, tag and device; cuemm_adapter_resume of a tag that has no
 * manager on the device: CUDA_ERROR_ILLEGAL_STATE.
 * Thread-safety: as cuemm_pool_suspend. */
CUEMM_EXTERN CUresult cuemm_adapter_suspend(const char *tag, int device, unsigned flags);
CUEMM_EXTERN CUresult cuemm_adapter_resume(const char *tag, int device);
/* cuemm_stream_release on every tag's manager of the device (CuPy calls it
 * before it destroys a stream).  Errors: the first manager's failure, with
 * its message; the other managers are still asked. */
CUEMM_EXTERN CUresult cuemm_adapter_stream_release(int device, CUstream stream);

#ifdef __cplusplus
}
#endif
#endif /* CUEMM_H */
