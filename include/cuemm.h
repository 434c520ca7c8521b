/* cuemm.h: device memory management for CUDA driver-API programs.
 *
 * cuemm manages a program's CUDA device memory through the driver API alone
 * (it loads libcuda at run time and links neither libcuda nor libcudart).
 * A manager per context hands memory out on two paths: the deferred path,
 * whose frees are queued and released in batches so that a free never
 * stalls the GPU (Numba's policy), and the stream-ordered path, with
 * cuMemAllocAsync's semantics, over a growable pool on CUDA virtual memory
 * that can be suspended and resumed in place.  It also serves managed,
 * system and pinned host memory, shares memory between processes, counts,
 * logs and snapshots what it does, and plugs into PyTorch, CuPy and Numba.
 * cuemm(3) explains every part at length; cuemm(7) lists every CUEMM_*
 * variable.
 *
 * Index
 *   Start and configure
 *     cuemm_driver_load            load the CUDA driver now (optional)
 *     cuemm_driver_get_info        what the loaded driver offers
 *     cuemm_config_init            a configuration: defaults + CUEMM_* variables
 *   Create a manager
 *     cuemm_manager_create         the manager of a context
 *     cuemm_get                    the current context's manager, made on first use
 *     cuemm_context                the context a manager serves
 *     cuemm_reset                  free everything a manager owns
 *     cuemm_destroy                destroy a manager
 *     cuemm_abandon                drop a manager whose context is gone
 *   Allocate and free (deferred path)
 *     cuemm_allocate               device memory, at once
 *     cuemm_free                   queue a free; a flush releases the queue
 *     cuemm_flush                  release every queued free now
 *     cuemm_defer_cleanup_begin    hold every free back ...
 *     cuemm_defer_cleanup_end      ... until the scopes close
 *     cuemm_address_range          the allocation that holds a pointer
 *   Stream-ordered allocation
 *     cuemm_allocate_async         a pool block for work on a stream
 *     cuemm_free_async             free it in stream order
 *     cuemm_record_stream          another stream uses a block
 *     cuemm_stream_release         call before destroying a stream
 *   Pool, growth and suspension
 *     cuemm_pool_trim              give every wholly free chunk back
 *     cuemm_pool_grant_access      let a peer device use the pool
 *     cuemm_pool_suspend           give all physical memory back, keep addresses
 *     cuemm_pool_resume            map it again
 *   Managed and host memory
 *     cuemm_managed_trim           give free managed segments back
 *     cuemm_prefetch               migrate managed memory
 *     cuemm_advise                 advise the driver about managed memory
 *     cuemm_host_allocate          pinned host memory
 *     cuemm_host_free              free it (deferred)
 *     cuemm_host_device_pointer    the device address of mapped host memory
 *     cuemm_host_pin               page-lock existing host memory
 *     cuemm_host_unpin             unpin it
 *   Sharing memory between processes (IPC)
 *     cuemm_ipc_export             a handle for a pointer
 *     cuemm_ipc_handle_parse       check bytes received, as a handle
 *     cuemm_ipc_handle_send        send a handle (and its descriptors) on a socket
 *     cuemm_ipc_recv               receive one
 *     cuemm_ipc_open               map a handle in this process
 *     cuemm_ipc_close              unmap it
 *     cuemm_ipc_discard            drop descriptors received but not opened
 *   Statistics, logs and snapshots
 *     cuemm_get_stats              the manager's counters
 *     cuemm_get_held               bytes held from the driver, lock-free
 *     cuemm_get_memory_info        the device's free and total memory
 *     cuemm_pool_get_stats         the pool's state
 *     cuemm_managed_get_stats      managed and system memory's state
 *     cuemm_stats_print            the counters as a table
 *     cuemm_log_flush              write the event log's buffered rows
 *     cuemm_snapshot_take          every chunk and block at one moment
 *     cuemm_snapshot_free          free a snapshot
 *     cuemm_snapshot_write_json    a snapshot as JSON
 *   Drop-ins for cuMemAlloc / cuMemFree
 *     cuemm_mem_alloc              cuemm_allocate on the current context
 *     cuemm_mem_free               cuemm_free on the current context
 *   Framework adapter entry points
 *     cuemm_device_manager         the manager of a device's primary context
 *     cuemm_adapter_get_stats      the adapters' failures
 *     cuemm_torch_*                PyTorch's pluggable allocator and its hooks
 *     cuemm_torch_segment_*        segments of a torch.cuda.MemPool (MemPool mode)
 *     cuemm_adapter_set_tag        choose the tag (a manager per purpose)
 *     cuemm_adapter_get_tag        the current tag
 *     cuemm_adapter_tag_manager    a tag's manager on a device
 *     cuemm_adapter_suspend        suspend a tag's manager ...
 *     cuemm_adapter_resume         ... and resume it
 *     cuemm_adapter_stream_release cuemm_stream_release on every tag's manager
 *   Errors and version
 *     cuemm_last_error             why the thread's last call failed
 *     cuemm_version_string         the library's version
 *   Deprecated names               the names before the argument convention
 *
 * Conventions
 *   Arguments: the object first (the manager), inputs next, outputs last:
 *   cuemm_allocate(m, size, &p).  The drop-ins cuemm_mem_alloc(&p, size)
 *   and cuemm_mem_free(p) keep cuMemAlloc's and cuMemFree's signatures on
 *   purpose (a program swaps the calls one for one), and the cuemm_torch_*
 *   entry points the signatures PyTorch calls them with.
 *   Returns: a CUresult, CUDA_SUCCESS or the driver's code for the failure,
 *   from every function except these fifteen, which cannot fail by design
 *   or whose signature is not cuemm's to choose:
 *     cuemm_version_string, cuemm_last_error  a string, always valid
 *     cuemm_context, cuemm_adapter_get_tag    a value read, nothing to fail
 *     cuemm_snapshot_free                     void, as free()
 *     cuemm_torch_alloc, cuemm_torch_free, cuemm_torch_record_stream,
 *     cuemm_torch_empty_cache, cuemm_torch_init,
 *     cuemm_torch_begin_allocate_to_pool, cuemm_torch_end_allocate_to_pool,
 *     cuemm_torch_release_pool,
 *     cuemm_torch_segment_alloc, cuemm_torch_segment_free
 *                                             PyTorch fixes their signatures
 *                                             (void, or a pointer); their
 *                                             failures are counted in
 *                                             cuemm_adapter_stats
 *   Errors: after a failure, cuemm_last_error() says what failed and why
 *   (which variable, which pointer, which driver call).  A failed call
 *   changes nothing: no memory is lost, no statistic moves except the
 *   failure counters.
 *   Threads: every function may be called from any thread.  Calls on one
 *   manager are serialized by its lock; driver calls run with the
 *   manager's context current, and the caller's current context is left
 *   as it was.
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

/* ------------------------------------------------------------------------ */
/* Start and configure                                                      */

typedef struct cuemm_driver_info {
  int version;        /* cuDriverGetVersion, e.g. 13000 for CUDA 13.0 */
  int api_version;    /* the API version cuemm resolves entry points at */
  int vmm;            /* virtual memory management entry points present */
  int ipc;            /* legacy IPC entry points present */
  int async;          /* stream-ordered allocation entry points present */
  char path[4096];    /* the driver file that was loaded */
  /* Managed and system memory, as device 0 reports it: */
  int managed;        /* cuMemAllocManaged and CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY */
  int concurrent_managed;  /* ..._CONCURRENT_MANAGED_ACCESS: prefetch and advice work */
  int prefetch;       /* cuMemPrefetchAsync and cuMemAdvise present */
  int pageable;       /* ..._PAGEABLE_MEMORY_ACCESS: the GPU may use malloc memory */
  int pageable_host_page_tables;  /* ... through the host's page tables (ATS), not HMM's */
} cuemm_driver_info;

/* Loads the CUDA driver (CUEMM_LIBCUDA, else libcuda.so.1; no fallback
 * from one to the other) and calls cuInit(0).  Optional: every function
 * loads it on first use; this is how to learn early that none is usable.
 * Errors: CUDA_ERROR_NOT_FOUND (no file, or not a CUDA driver: the message
 * names the file), CUDA_ERROR_NOT_SUPPORTED (older than CUDA 12.0, or an
 * entry point missing), cuInit's errors.  A failure leaves nothing loaded;
 * the next call tries again. */
CUEMM_EXTERN CUresult cuemm_driver_load(void);

/* Fills *info about the loaded driver (loading it if needed). */
CUEMM_EXTERN CUresult cuemm_driver_get_info(cuemm_driver_info *info);

/* Where cuemm_allocate takes device memory from (cuemm_config.pool). */
typedef enum cuemm_pool_kind {
  CUEMM_POOL_NONE = 0,  /* cuMemAlloc for every allocation */
  CUEMM_POOL_VMM = 1,   /* a growable pool on CUDA virtual memory management */
} cuemm_pool_kind;

/* How a block freed on one stream serves another (cuemm_config.stream_reuse;
 * cuemm(3), STREAM-ORDERED ALLOCATION). */
typedef enum cuemm_stream_reuse {
  CUEMM_STREAM_REUSE_EVENT = 0,     /* once an event after the free has completed */
  CUEMM_STREAM_REUSE_WAIT = 1,      /* at once, the allocating stream waiting on that event */
  CUEMM_STREAM_REUSE_INTERNAL = 2,  /* as EVENT, waiting only where the pool would grow (default) */
} cuemm_stream_reuse;

/* When a thread cuts its blocks of 256 KiB to 16 MiB from spans of its own
 * (cuemm_config.stream_spans). */
typedef enum cuemm_stream_spans {
  CUEMM_STREAM_SPANS_NEVER = 0,   /* from the pool, under the manager's lock, as one thread does */
  CUEMM_STREAM_SPANS_AUTO = 1,    /* once its visits to the pool found the lock taken by other threads */
  CUEMM_STREAM_SPANS_ALWAYS = 2,  /* from its first large request */
} cuemm_stream_spans;

/* What cuemm_allocate hands out (cuemm_config.memory). */
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

/* A manager's settings.  Fill it with cuemm_config_init, then change fields.
 * Each field's variable, range and default: cuemm(7); what each does at
 * length: cuemm(3), CONFIGURATION.  New fields are added at the end: `size`
 * tells cuemm_manager_create how much of the struct the program has. */
typedef struct cuemm_config {
  size_t size;                       /* sizeof(cuemm_config), set by cuemm_config_init */

  /* The deferred path: a flush runs when, after a free, more frees than
   * max_pending_count or more bytes than max_pending_ratio x device memory
   * are pending. */
  size_t max_pending_count;          /* CUEMM_MAX_PENDING_DEALLOCS_COUNT (10) */
  double max_pending_ratio;          /* CUEMM_MAX_PENDING_DEALLOCS_RATIO, in (0, 1] (0.2) */

  /* The pool. */
  cuemm_pool_kind pool;              /* CUEMM_POOL (none) */
  size_t pool_reserve;               /* CUEMM_POOL_RESERVE: address space (0: device memory) */
  size_t pool_chunk;                 /* CUEMM_POOL_CHUNK: largest growth step (32 MiB) */
  size_t pool_release_threshold;     /* CUEMM_POOL_RELEASE_THRESHOLD: free bytes kept (1 GiB) */
  size_t pool_release_delay_ms;      /* CUEMM_POOL_RELEASE_DELAY: a growth's memory kept (1000) */
  size_t pool_limit;                 /* CUEMM_POOL_LIMIT: cap on mapped bytes (0: none) */
  int pool_ipc;                      /* CUEMM_POOL_IPC: blocks shareable with processes (0) */
  int pool_limit_hard;               /* CUEMM_POOL_LIMIT_HARD: the limit bounds all memory (0) */
  size_t pool_piece;                 /* CUEMM_POOL_PIECE: physical allocation size (0: measured) */
  int pool_slab;                     /* CUEMM_POOL_SLAB: one cuMemAlloc, for memory checkers (0) */

  /* The stream-ordered path. */
  cuemm_stream_reuse stream_reuse;   /* CUEMM_STREAM_REUSE (internal) */
  size_t stream_keep_large;          /* CUEMM_STREAM_KEEP_LARGE: blocks kept per stream, 0..32 (24) */
  cuemm_stream_spans stream_spans;   /* CUEMM_STREAM_SPANS (auto) */

  /* Managed and system memory. */
  cuemm_memory_kind memory;          /* CUEMM_MEMORY (device) */
  int managed_prefetch;              /* CUEMM_MANAGED_PREFETCH: prefetch each allocation (0) */
  cuemm_location managed_preferred_location;  /* CUEMM_MANAGED_PREFERRED_LOCATION (none) */
  cuemm_location managed_accessed_by;         /* CUEMM_MANAGED_ACCESSED_BY (none) */
  size_t managed_limit;              /* CUEMM_MANAGED_LIMIT: cap on managed bytes (0: none) */

  /* Observability. */
  const char *log_file;              /* CUEMM_LOG: the event log ("%p": the pid; NULL: none) */
  int stats_at_exit;                 /* CUEMM_STATS: statistics to stderr at the end (0) */
  int nvtx;                          /* CUEMM_NVTX: annotate pool blocks for compute-sanitizer (1) */

  /* Set by cuemm_config_init; programs leave them alone.  A configuration
   * whose env_status is not CUDA_SUCCESS is refused by cuemm_manager_create
   * with cuemm_config_init's message (env_invalid says which variables). */
  CUresult env_status;
  uint64_t env_set;                  /* variables applied, one bit each in cuemm(7)'s order */
  uint64_t env_invalid;              /* variables refused, likewise */

  int secondary;                     /* 1: not the context's registered manager (0) */
} cuemm_config;

/* Fills *cfg: its size, the defaults, then the CUEMM_* variables of the
 * environment (unset or empty: the default).  Errors:
 * CUDA_ERROR_INVALID_VALUE when variables are invalid; the message names
 * every one, its value and what is accepted, env_invalid has their bits,
 * and the other fields are filled all the same.  Thread-safety: reads the
 * environment; safe while no thread changes it. */
CUEMM_EXTERN CUresult cuemm_config_init(cuemm_config *cfg);

/* ------------------------------------------------------------------------ */
/* Create a manager                                                         */

/* One manager per CUDA context: it owns every allocation made through it
 * and the queue of frees waiting to be released. */
typedef struct cuemm_manager cuemm_manager;

/* *m = a new manager of context `ctx` (NULL: the current context) with
 * configuration `cfg` (NULL: cuemm_config_init's), registered as the
 * context's manager unless cfg->secondary.  Errors:
 * CUDA_ERROR_INVALID_VALUE (m NULL, an invalid field or variable, or
 * cfg->size: the message names it), CUDA_ERROR_INVALID_CONTEXT (no
 * context), CUDA_ERROR_ALREADY_ACQUIRED (the context has a manager),
 * CUDA_ERROR_NOT_SUPPORTED (a memory kind or pool IPC the device lacks),
 * driver errors.  A variable this manager does not act on is said once on
 * stderr, not refused (cuemm(3), CONFIGURATION). */
CUEMM_EXTERN CUresult cuemm_manager_create(CUcontext ctx, const cuemm_config *cfg, cuemm_manager **m);

/* *m = the manager of the calling thread's current context, created with
 * cuemm_config_init's configuration on first use (keyed by cuCtxGetId, so
 * a context made again at the same address never finds the old one). */
CUEMM_EXTERN CUresult cuemm_get(cuemm_manager **m);

/* The context m serves (NULL for m NULL). */
CUEMM_EXTERN CUcontext cuemm_context(const cuemm_manager *m);

/* Frees everything m owns: queued frees, live device and pinned host
 * allocations, pinned ranges.  Every pointer from m becomes invalid.
 * Inside a defer scope the allocations join the queue instead. */
CUEMM_EXTERN CUresult cuemm_reset(cuemm_manager *m);

/* Destroys m: releases the queue, frees what is still live (the message
 * then says how much, and the call still succeeds), unpins, unregisters.
 * Destroy it before its context.  Errors: CUDA_ERROR_INVALID_VALUE for m
 * NULL; the context cannot be made current (nothing changes).  A failing
 * driver free is skipped and reported after m is gone. */
CUEMM_EXTERN CUresult cuemm_destroy(cuemm_manager *m);

/* Drops m, whose context was destroyed already, without a driver call
 * (the driver freed the context's memory with it).  The message says what
 * was dropped.  Do not use m afterwards. */
CUEMM_EXTERN CUresult cuemm_abandon(cuemm_manager *m);

/* ------------------------------------------------------------------------ */
/* Allocate and free (deferred path)                                        */

/* *p = `size` bytes of device memory (or of the manager's memory kind),
 * from cuMemAlloc at once, or from the pool (256-byte aligned, no driver
 * call unless it grows).  Out of memory, the queued frees are flushed (no
 * defer scope open) and the request retried once.  Errors:
 * CUDA_ERROR_INVALID_VALUE (p NULL, size 0), CUDA_ERROR_OUT_OF_MEMORY (the
 * message gives the size, the device and its figures), the pool's growth
 * errors, CUDA_ERROR_ILLEGAL_STATE while suspended. */
CUEMM_EXTERN CUresult cuemm_allocate(cuemm_manager *m, size_t size, CUdeviceptr *p);

/* Queues the free of p (the start of an allocation of m), then flushes the
 * queue if a threshold is passed.  Errors: CUDA_ERROR_INVALID_VALUE for a
 * pointer m does not own (the message says why); a failing flush's error
 * (the free is queued all the same). */
CUEMM_EXTERN CUresult cuemm_free(cuemm_manager *m, CUdeviceptr p);

/* Releases every queued free now, in order.  A no-op inside a defer scope.
 * On a driver error the frees not released stay queued. */
CUEMM_EXTERN CUresult cuemm_flush(cuemm_manager *m);

/* Open and close a defer-cleanup scope: while one is open, nothing is
 * freed (no threshold, explicit or out-of-memory flush).  Scopes nest and
 * belong to the manager, shared by all threads.  Closing the last one does
 * not flush.  cuemm_defer_cleanup_end: CUDA_ERROR_INVALID_VALUE when none
 * is open. */
CUEMM_EXTERN CUresult cuemm_defer_cleanup_begin(cuemm_manager *m);
CUEMM_EXTERN CUresult cuemm_defer_cleanup_end(cuemm_manager *m);

/* *base, *size (either may be NULL) = the allocation of m that holds p (its
 * start or any byte inside), as cuemm_allocate was asked, from m's own
 * records (m NULL: cuemm_get's).  Ask this, not cuMemGetAddressRange, for
 * pool memory: the driver answers with the whole mapping around a block.
 * Errors: CUDA_ERROR_NOT_FOUND for a pointer in no live allocation of m.
 * Thread-safety: holds m's lock. */
CUEMM_EXTERN CUresult cuemm_address_range(cuemm_manager *m, CUdeviceptr p, CUdeviceptr *base, size_t *size);

/* ------------------------------------------------------------------------ */
/* Stream-ordered allocation                                                */

/* The pool's blocks in stream order, with cuMemAllocAsync/cuMemFreeAsync's
 * semantics: a block freed on a stream serves that stream's later work at
 * once, other streams once the work before the free is done.  Needs a pool
 * (else CUDA_ERROR_NOT_SUPPORTED), except on a manager of managed or system
 * memory, where these are the deferred calls.  Per-thread caches make the
 * common path lock-free and driver-free.  Streams, graph capture, mixing
 * with the deferred path: cuemm(3), STREAM-ORDERED ALLOCATION. */

/* *p = `size` bytes of the pool for work on `stream` (and the host).
 * Errors: CUDA_ERROR_INVALID_VALUE (m or p NULL, size 0),
 * CUDA_ERROR_NOT_SUPPORTED (no pool, no events), CUDA_ERROR_OUT_OF_MEMORY
 * as cuemm_allocate (the message names the stream). */
CUEMM_EXTERN CUresult cuemm_allocate_async(cuemm_manager *m, size_t size, CUstream stream, CUdeviceptr *p);

/* Frees p in stream order on `stream` (any block of m, from either path).
 * Errors: CUDA_ERROR_INVALID_VALUE (a pointer m does not own, or freed
 * already), CUDA_ERROR_NOT_SUPPORTED (no pool). */
CUEMM_EXTERN CUresult cuemm_free_async(cuemm_manager *m, CUdeviceptr p, CUstream stream);

/* Work on `stream` also uses the live block p (PyTorch's record_stream):
 * its free makes the freeing stream wait for `stream`.  Errors:
 * CUDA_ERROR_INVALID_VALUE (not a live block's start), CUDA_ERROR_NOT_SUPPORTED. */
CUEMM_EXTERN CUresult cuemm_record_stream(cuemm_manager *m, CUdeviceptr p, CUstream stream);

/* Call before cuStreamDestroy(stream): the blocks freed on it get a last
 * event and the handle is forgotten.  CU_STREAM_PER_THREAD: the calling
 * thread's.  Errors: CUDA_ERROR_INVALID_VALUE (NULL, CU_STREAM_LEGACY),
 * CUDA_ERROR_NOT_SUPPORTED, cuEventRecord's error. */
CUEMM_EXTERN CUresult cuemm_stream_release(cuemm_manager *m, CUstream stream);

/* ------------------------------------------------------------------------ */
/* Pool, growth and suspension                                              */

/* With cuemm_config.pool = CUEMM_POOL_VMM a manager reserves addresses and
 * maps memory into them as requests need it, in steps that grow with the
 * pool; blocks never move; memory past the release threshold goes back to
 * the driver.  cuemm(3), THE POOL. */

/* Flushes the queue (no defer scope open), then releases every wholly free
 * chunk.  Errors: CUDA_ERROR_INVALID_VALUE without a pool; the driver's
 * (the chunks not released stay usable). */
CUEMM_EXTERN CUresult cuemm_pool_trim(cuemm_manager *m);

/* Gives device `peer` read-write access to all the pool's memory, now and
 * later.  Errors: CUDA_ERROR_INVALID_VALUE (no pool),
 * CUDA_ERROR_INVALID_DEVICE, CUDA_ERROR_PEER_ACCESS_UNSUPPORTED,
 * cuMemSetAccess's (undone). */
CUEMM_EXTERN CUresult cuemm_pool_grant_access(cuemm_manager *m, CUdevice peer);

/* cuemm_pool_suspend's flags. */
#define CUEMM_SUSPEND_KEEP 0x1u        /* keep live blocks' contents (in pinned host memory) */
#define CUEMM_SUSPEND_IGNORE_IPC 0x2u  /* suspend although blocks were sent to other processes */

/* Synchronizes m's context, then gives every byte of the pool's physical
 * memory back while keeping its addresses; allocations are refused
 * (CUDA_ERROR_ILLEGAL_STATE) until cuemm_pool_resume, frees accepted.
 * Errors: CUDA_ERROR_INVALID_VALUE (m NULL, unknown flags),
 * CUDA_ERROR_NOT_SUPPORTED (no VMM pool, or a slab), CUDA_ERROR_ILLEGAL_STATE
 * (suspended already, or blocks sent to other processes), the driver's.
 * Thread-safety: while other threads use m.  cuemm(3), SUSPEND AND RESUME. */
CUEMM_EXTERN CUresult cuemm_pool_suspend(cuemm_manager *m, unsigned flags);

/* Maps memory again at the suspended addresses (and copies kept contents
 * back).  Errors: CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_ILLEGAL_STATE (not
 * suspended), CUDA_ERROR_OUT_OF_MEMORY (the message gives the bytes), the
 * driver's; on failure m stays suspended and a later call can succeed. */
CUEMM_EXTERN CUresult cuemm_pool_resume(cuemm_manager *m);

/* ------------------------------------------------------------------------ */
/* Managed and host memory                                                  */

/* With cuemm_config.memory, cuemm_allocate hands out managed memory (from
 * cuMemAllocManaged segments; oversubscription is allowed and reported,
 * managed_limit caps it) or system memory the GPU reads through HMM or
 * ATS; frees are deferred as for device memory.  cuemm(3), MANAGED AND
 * SYSTEM MEMORY. */

/* Flushes, then gives every wholly free managed segment back.  Errors:
 * CUDA_ERROR_INVALID_VALUE (m NULL, not a managed-memory manager), the
 * driver's. */
CUEMM_EXTERN CUresult cuemm_managed_trim(cuemm_manager *m);

/* cuMemPrefetchAsync of [p, p + size) (size 0: to the block's end) to
 * device `dst` (or CU_DEVICE_CPU) on `stream`; the range must lie in one
 * live managed or system block of m.  Errors: CUDA_ERROR_INVALID_VALUE
 * (the message gives the ranges), CUDA_ERROR_INVALID_DEVICE,
 * CUDA_ERROR_NOT_SUPPORTED, the driver's.  Holds m's lock. */
CUEMM_EXTERN CUresult cuemm_prefetch(cuemm_manager *m, CUdeviceptr p, size_t size, CUdevice dst, CUstream stream);

/* cuMemAdvise of [p, p + size) about `device`, the range checked as for
 * cuemm_prefetch.  Errors: as cuemm_prefetch; CUDA_ERROR_INVALID_VALUE for
 * an unknown advice. */
CUEMM_EXTERN CUresult cuemm_advise(cuemm_manager *m, CUdeviceptr p, size_t size, CUmem_advise advice,
                                   CUdevice device);

/* *p = `size` bytes of page-locked host memory (cuMemHostAlloc; flags
 * CU_MEMHOSTALLOC_PORTABLE, _DEVICEMAP, _WRITECOMBINED or 0).  Out of
 * memory as cuemm_allocate.  Errors: CUDA_ERROR_INVALID_VALUE (p NULL,
 * size 0, unknown flags). */
CUEMM_EXTERN CUresult cuemm_host_allocate(cuemm_manager *m, size_t size, unsigned int flags, void **p);

/* Frees memory of cuemm_host_allocate, deferred like device memory.
 * Errors: CUDA_ERROR_INVALID_VALUE for a pointer m did not allocate so. */
CUEMM_EXTERN CUresult cuemm_host_free(cuemm_manager *m, void *p);

/* *dptr = the device address of host memory m mapped (DEVICEMAP), p any
 * byte of it. */
CUEMM_EXTERN CUresult cuemm_host_device_pointer(cuemm_manager *m, void *p, CUdeviceptr *dptr);

/* cuMemHostRegister of [p, p + size) (flags CU_MEMHOSTREGISTER_*).  Errors:
 * CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED. */
CUEMM_EXTERN CUresult cuemm_host_pin(cuemm_manager *m, void *p, size_t size, unsigned int flags);

/* Unpins a range of cuemm_host_pin at once (never deferred).  Errors:
 * CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED. */
CUEMM_EXTERN CUresult cuemm_host_unpin(cuemm_manager *m, void *p);

/* ------------------------------------------------------------------------ */
/* Sharing memory between processes (IPC)                                   */

/* A process exports a pointer as a 128-byte handle; another opens it and
 * maps the same bytes.  A cuMemAlloc block's handle is plain bytes; a pool
 * block's (CUEMM_POOL_IPC=1) travels with file descriptors over a Unix
 * socket.  The exporter keeps the memory alive until every importer closed
 * it.  Byte layout, lifetime, devices: cuemm(3), SHARING DEVICE MEMORY
 * BETWEEN PROCESSES. */

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

/* *h = a handle for `size` bytes (0: to the end) from p, any byte of a live
 * allocation of m.  Errors: CUDA_ERROR_INVALID_VALUE (NULL, a pointer of no
 * live allocation of m, a size past its end), CUDA_ERROR_NOT_SUPPORTED (no
 * legacy IPC; a pool block without pool_ipc or over too many chunks;
 * managed or system memory), the driver's.  Holds m's lock. */
CUEMM_EXTERN CUresult cuemm_ipc_export(cuemm_manager *m, CUdeviceptr p, size_t size, cuemm_ipc_handle *h);

/* Checks `len` bytes received and, if they are a handle, copies them to
 * *h.  Errors: CUDA_ERROR_INVALID_VALUE for anything malformed (*h
 * untouched, the message says which check failed), CUDA_ERROR_NOT_SUPPORTED
 * for a kind this version cannot open.  Touches no shared state. */
CUEMM_EXTERN CUresult cuemm_ipc_handle_parse(const void *bytes, size_t len, cuemm_ipc_handle *h);

/* Sends *h on the connected Unix socket `sock`: its 128 bytes and, for a
 * pool handle, a descriptor per chunk, exported under m's lock (m: the
 * exporter; NULL: cuemm_get's; unused for a device handle).  Errors:
 * CUDA_ERROR_INVALID_VALUE (malformed, another manager's, a block no longer
 * live), CUDA_ERROR_OPERATING_SYSTEM (the socket's reason), the driver's.
 * No descriptor stays open here, whatever the result. */
CUEMM_EXTERN CUresult cuemm_ipc_handle_send(cuemm_manager *m, const cuemm_ipc_handle *h, int sock);

/* Receives one message of cuemm_ipc_handle_send from `sock` into *h and
 * keeps its descriptors for cuemm_ipc_open.  Errors:
 * CUDA_ERROR_INVALID_VALUE (truncated, malformed, descriptors missing),
 * CUDA_ERROR_NOT_SUPPORTED, CUDA_ERROR_OPERATING_SYSTEM; on any error *h
 * is untouched and the descriptors closed. */
CUEMM_EXTERN CUresult cuemm_ipc_recv(int sock, cuemm_ipc_handle *h);

/* *p = the exported pointer, mapped in m's context (m NULL: cuemm_get's);
 * a handle open already shares its mapping.  Errors:
 * CUDA_ERROR_INVALID_VALUE (malformed; a pool handle with no descriptors
 * received), CUDA_ERROR_INVALID_CONTEXT (this process's own handle),
 * CUDA_ERROR_INVALID_DEVICE, CUDA_ERROR_PEER_ACCESS_UNSUPPORTED,
 * CUDA_ERROR_NOT_SUPPORTED, the driver's (every step undone). */
CUEMM_EXTERN CUresult cuemm_ipc_open(cuemm_manager *m, const cuemm_ipc_handle *h, CUdeviceptr *p);

/* Closes a pointer of cuemm_ipc_open, once per open; the last close unmaps
 * at once.  Errors: CUDA_ERROR_INVALID_VALUE (not open in m's context), the
 * driver's (the pointer stays open). */
CUEMM_EXTERN CUresult cuemm_ipc_close(cuemm_manager *m, CUdeviceptr p);

/* Closes one set of descriptors received for *h but not to be opened.
 * Errors: CUDA_ERROR_INVALID_VALUE (h NULL, no set kept). */
CUEMM_EXTERN CUresult cuemm_ipc_discard(const cuemm_ipc_handle *h);

/* ------------------------------------------------------------------------ */
/* Statistics, logs and snapshots                                           */

typedef struct cuemm_stats {
  size_t total_bytes;        /* device memory, read at creation */
  size_t max_pending_bytes;  /* floor(ratio x total_bytes) */
  size_t max_pending_count;
  size_t live_bytes;         /* device allocations not yet freed by the program */
  size_t live_count;
  size_t peak_bytes;         /* highest live_bytes seen (the stream path's share sampled: cuemm(3)) */
  size_t peak_count;         /* highest live_count seen */
  size_t host_live_bytes;    /* pinned host allocations (cuemm_host_allocate) */
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
  /* The stream-ordered path (its live blocks and calls count above too). */
  size_t stream_cached_bytes;   /* freed on a stream, kept by the threads' caches for reuse */
  size_t stream_cached_count;
  size_t stream_heaps;          /* threads' caches (one per thread that used the path) */
  uint64_t stream_events;       /* events recorded, one per batch of frees another stream wanted */
  uint64_t stream_event_waits;  /* cuStreamWaitEvent calls (CUEMM_STREAM_REUSE=wait, cuemm_record_stream) */
  uint64_t stream_steals;       /* blocks freed on one stream that served another (in the pool: batches) */
  uint64_t stream_reclaims;     /* times the pool took idle cached blocks back instead of growing */
  /* Memory held from the driver (pool, managed segments, cuMemAlloc blocks
   * live or pending), now and at most; peak_held_bytes / peak_bytes is the
   * manager's footprint. */
  size_t held_bytes;
  size_t peak_held_bytes;
  /* The event log: rows written, rows lost (the file could not be written). */
  uint64_t log_rows;
  uint64_t log_lost;
  /* The threads' spans (cuemm_config.stream_spans): count, bytes, bytes not
   * handed out. */
  size_t stream_spans;
  size_t stream_span_bytes;
  size_t stream_span_free_bytes;
} cuemm_stats;

/* A consistent snapshot of m's counters (takes its lock and every thread
 * cache's). */
CUEMM_EXTERN CUresult cuemm_get_stats(cuemm_manager *m, cuemm_stats *s);

/* *held = cuemm_stats.held_bytes, read with a few loads and no lock, for a
 * gauge sampled often.  Errors: CUDA_ERROR_INVALID_VALUE for m or held
 * NULL. */
CUEMM_EXTERN CUresult cuemm_get_held(const cuemm_manager *m, size_t *held);

/* The device's free and total memory now (cuMemGetInfo in m's context).
 * Either pointer may be NULL. */
CUEMM_EXTERN CUresult cuemm_get_memory_info(cuemm_manager *m, size_t *free_bytes, size_t *total_bytes);

/* The piece sizes cuemm_pool_stats.piece_cost_us measures: 2 MiB << k, k below this. */
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
  double fragmentation;        /* 1 - largest free extent / free_bytes (cuemm(3), THE POOL) */
  int limit_hard;              /* pool_limit_hard */
  size_t piece_pinned;         /* pool_piece: 0 when the piece size is chosen by measurement */
  size_t piece_bytes;          /* the piece size of the last growth (0 before the first) */
  /* Per piece size 2 MiB << k, process-wide: one piece's measured cost
   * (cuMemCreate + cuMemMap, microseconds; 0: never timed), pieces timed. */
  double piece_cost_us[CUEMM_POOL_PIECE_CLASSES];
  unsigned int piece_samples[CUEMM_POOL_PIECE_CLASSES];
  int slab;                    /* pool_slab: the reservation is one cuMemAlloc, held whole */
  /* Suspension (cuemm_pool_suspend). */
  int suspended;               /* 1 while suspended (between cuemm_pool_suspend and cuemm_pool_resume) */
  size_t suspended_need_bytes; /* while suspended: the bytes cuemm_pool_resume will map */
  size_t kept_bytes;           /* bytes of block contents held in host memory (CUEMM_SUSPEND_KEEP) */
  uint64_t suspends, resumes;  /* suspensions and resumptions that succeeded */
} cuemm_pool_stats;

/* A consistent snapshot of the pool (zeros, enabled = 0, without one). */
CUEMM_EXTERN CUresult cuemm_pool_get_stats(cuemm_manager *m, cuemm_pool_stats *s);

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

/* A consistent snapshot of m's managed or system memory (zeros for a
 * device-memory manager).  Errors: CUDA_ERROR_INVALID_VALUE for NULL. */
CUEMM_EXTERN CUresult cuemm_managed_get_stats(cuemm_manager *m, cuemm_managed_stats *s);

/* Writes m's statistics as a short table to `f` (NULL: stderr).  Errors:
 * CUDA_ERROR_INVALID_VALUE (m NULL), CUDA_ERROR_UNKNOWN (writing failed). */
CUEMM_EXTERN CUresult cuemm_stats_print(cuemm_manager *m, FILE *f);

/* With cuemm_config.log_file, every device allocation and free of m is a
 * row of a CSV file in RMM's logging_resource_adaptor format, with
 * cuemm's columns after RMM's (cuemm(3), THE EVENT LOG); cuemm-replay(1)
 * replays it.  Writes every row still buffered, by any thread, now.
 * Errors: CUDA_ERROR_INVALID_VALUE for m NULL. */
CUEMM_EXTERN CUresult cuemm_log_flush(cuemm_manager *m);

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
  size_t requested;         /* what the program asked for (0: free memory, or a chunk a failed growth kept) */
  CUstream stream;          /* the stream of a stream-ordered block (its last one when cached) */
  cuemm_block_state state;
  int chunk;                /* index into chunks; -1 for memory outside the pool (cuMemAlloc, managed) */
  int stream_ordered;       /* 1: a pool block of the stream-ordered path (cuemm_allocate_async's, or one
                             * named with cuemm_record_stream: stream is then that stream) */
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

/* *out = a consistent snapshot of m (its lock held for the copy); free it
 * with cuemm_snapshot_free.  Errors: CUDA_ERROR_INVALID_VALUE (NULL),
 * CUDA_ERROR_OUT_OF_MEMORY (host memory). */
CUEMM_EXTERN CUresult cuemm_snapshot_take(cuemm_manager *m, cuemm_snapshot **out);

/* Frees a snapshot (NULL: nothing). */
CUEMM_EXTERN void cuemm_snapshot_free(cuemm_snapshot *s);

/* Writes s as one JSON object to `f` ({"version":1,"stats":..., "pool":...,
 * "chunks":[...], "blocks":[...]}; cuemm(3) gives the keys).  Errors:
 * CUDA_ERROR_INVALID_VALUE (NULL), CUDA_ERROR_UNKNOWN (writing failed). */
CUEMM_EXTERN CUresult cuemm_snapshot_write_json(const cuemm_snapshot *s, FILE *f);

/* ------------------------------------------------------------------------ */
/* Drop-ins for cuMemAlloc / cuMemFree                                      */

/* cuemm_allocate and cuemm_free on the current context's manager
 * (cuemm_get), with cuMemAlloc's and cuMemFree's own signatures (the
 * output first), on purpose: a program swaps the driver calls one for one. */
CUEMM_EXTERN CUresult cuemm_mem_alloc(CUdeviceptr *p, size_t size);
CUEMM_EXTERN CUresult cuemm_mem_free(CUdeviceptr p);

/* ------------------------------------------------------------------------ */
/* Framework adapter entry points                                           */

/* One manager per device, over its primary context, made on first use
 * with cuemm_config_init's configuration and the pool on (unless CUEMM_POOL
 * says otherwise or CUEMM_MEMORY is not "device"); it lives as long as the
 * process.  python/cuemm switches PyTorch, CuPy and Numba to it.
 * Configuration, lifetime, graphs and tags: cuemm(3), FRAMEWORK ADAPTERS. */

/* *m = the manager of device `device` (a driver ordinal) over its primary
 * context.  Thread-safe; one atomic load after the first call.  Errors:
 * CUDA_ERROR_INVALID_VALUE (m NULL, an invalid CUEMM_* variable),
 * CUDA_ERROR_INVALID_DEVICE (the message gives the count), the driver's
 * and cuemm_manager_create's. */
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

/* PyTorch's pluggable allocator (torch.cuda.memory.CUDAPluggableAllocator)
 * and its hooks, with the signatures PyTorch calls them with: they cannot
 * return a CUresult, so a failure leaves the thread's message and is
 * counted in cuemm_adapter_stats.
 *   cuemm_torch_alloc          cuemm_allocate_async on the device's (or the
 *                              current tag's) manager; NULL for size 0 or
 *                              on failure
 *   cuemm_torch_free           cuemm_free_async on the manager that owns p
 *   cuemm_torch_record_stream  cuemm_record_stream (set_record_stream_fn)
 *   cuemm_torch_empty_cache    trims every device's managers (set_reset_fn)
 *   cuemm_torch_init           loads the driver (set_init_fn)
 *   cuemm_torch_*_pool         CUDA graph pools: blocks captured into a
 *                              graph stay its own until the pool is released
 * The pool-id hooks match the C++ signatures on the Itanium C++ ABI only
 * (x86-64 and AArch64 Linux).  cuemm(3), FRAMEWORK ADAPTERS. */
CUEMM_EXTERN void *cuemm_torch_alloc(size_t size, int device, CUstream stream);
CUEMM_EXTERN void cuemm_torch_free(void *p, size_t size, int device, CUstream stream);
CUEMM_EXTERN void cuemm_torch_record_stream(void *p, CUstream stream);
CUEMM_EXTERN void cuemm_torch_empty_cache(void);
CUEMM_EXTERN void cuemm_torch_init(int device_count);
typedef struct cuemm_torch_pool_id {
  unsigned long long first, second;
} cuemm_torch_pool_id;
CUEMM_EXTERN void cuemm_torch_begin_allocate_to_pool(int device, cuemm_torch_pool_id pool, void *filter);
CUEMM_EXTERN void cuemm_torch_end_allocate_to_pool(int device, cuemm_torch_pool_id pool);
CUEMM_EXTERN void cuemm_torch_release_pool(int device, cuemm_torch_pool_id pool);

/* PyTorch's MemPool mode (cuemm.torch.mempool): torch.cuda.MemPool takes
 * whole segments from these while PyTorch's caching allocator stays in
 * charge of tensors (its statistics and snapshots keep working).
 * cuemm_torch_segment_alloc: a segment for `stream` from the default tag's
 * manager of `device` (cuemm_allocate_async; cuemm_allocate without a
 * pool); NULL for size 0 or on failure (counted, with its message).
 * cuemm_torch_segment_alloc_fn: *fn = the same bound to `tag` (NULL or "":
 * cuemm_torch_segment_alloc), one function per tag since the pluggable
 * signature carries no user data.  cuemm_torch_segment_free: back to the
 * manager that holds it, deferred (the flush synchronizes, as PyTorch's
 * cudaFree of a segment does).  A segment is a pool block: suspending its
 * tag releases it, cuemm_ipc_export shares it.  Errors
 * (cuemm_torch_segment_alloc_fn): CUDA_ERROR_INVALID_VALUE for fn NULL, and
 * those of a tag's name. */
typedef void *(*cuemm_torch_alloc_fn)(size_t size, int device, CUstream stream);
CUEMM_EXTERN void *cuemm_torch_segment_alloc(size_t size, int device, CUstream stream);
CUEMM_EXTERN CUresult cuemm_torch_segment_alloc_fn(const char *tag, cuemm_torch_alloc_fn *fn);
CUEMM_EXTERN void cuemm_torch_segment_free(void *p, size_t size, int device, CUstream stream);

/* Tags: a name (1 to 63 of [A-Za-z0-9_.-], at most 63 besides the default,
 * NULL or "") that gets its own manager and pool on each device, so that
 * one purpose's memory is suspended and resumed on its own.  The current
 * tag is one for the whole process; frees find their manager from the
 * pointer. */

/* Makes `tag` current; *previous (if not NULL) = the tag before (NULL: the
 * default).  One atomic exchange.  Errors: CUDA_ERROR_INVALID_VALUE (a bad
 * name), CUDA_ERROR_OUT_OF_MEMORY (past 63 tags). */
CUEMM_EXTERN CUresult cuemm_adapter_set_tag(const char *tag, const char **previous);

/* The current tag; NULL for the default. */
CUEMM_EXTERN const char *cuemm_adapter_get_tag(void);

/* *m = `tag`'s manager on `device`, made on first use.  Errors: those of
 * the name and of cuemm_device_manager. */
CUEMM_EXTERN CUresult cuemm_adapter_tag_manager(const char *tag, int device, cuemm_manager **m);

/* cuemm_pool_suspend(flags) and cuemm_pool_resume of `tag`'s manager on
 * `device`; while suspended, cuemm_torch_alloc under the tag returns NULL.
 * Errors: those of the name and of the calls (the message names the tag and
 * device); resuming a tag with no manager: CUDA_ERROR_ILLEGAL_STATE. */
CUEMM_EXTERN CUresult cuemm_adapter_suspend(const char *tag, int device, unsigned flags);
CUEMM_EXTERN CUresult cuemm_adapter_resume(const char *tag, int device);

/* cuemm_stream_release on every tag's manager of `device` (CuPy calls it
 * before destroying a stream).  Errors: the first failure; the others are
 * still asked. */
CUEMM_EXTERN CUresult cuemm_adapter_stream_release(int device, CUstream stream);

/* ------------------------------------------------------------------------ */
/* Errors and version                                                       */

/* The message explaining the calling thread's last failed call ("" if
 * none), whole, whatever its length.  Thread-local; valid until the
 * thread's next cuemm call.  A success does not clear it, except where a
 * call leaves a note there (cuemm_destroy, a managed oversubscription). */
CUEMM_EXTERN const char *cuemm_last_error(void);

#define CUEMM_VERSION_MAJOR 0
#define CUEMM_VERSION_MINOR 1
#define CUEMM_VERSION_PATCH 0
#define CUEMM_VERSION_HEX                                                      \
  ((CUEMM_VERSION_MAJOR << 16) | (CUEMM_VERSION_MINOR << 8) | CUEMM_VERSION_PATCH)

/* The version of the library linked at run time, e.g. "0.1.0". */
CUEMM_EXTERN const char *cuemm_version_string(void);

/* ------------------------------------------------------------------------ */
/* Deprecated names                                                         */

/* The names before the argument convention.  Each does what the function
 * its message names does, with the arguments in the old order; they stay
 * exported for programs built against older headers.  A compiler that knows
 * the attribute warns at each use; define CUEMM_NO_DEPRECATION_WARNINGS to
 * use them without a warning. */
#if defined(CUEMM_NO_DEPRECATION_WARNINGS)
#define CUEMM_DEPRECATED(msg)
#elif defined(__GNUC__) || defined(__clang__)
#define CUEMM_DEPRECATED(msg) __attribute__((deprecated(msg)))
#else
#define CUEMM_DEPRECATED(msg)
#endif

CUEMM_EXTERN CUresult cuemm_create(cuemm_manager **m, CUcontext ctx, const cuemm_config *cfg)
    CUEMM_DEPRECATED("use cuemm_manager_create(ctx, cfg, &m)");
CUEMM_EXTERN CUresult cuemm_alloc(cuemm_manager *m, CUdeviceptr *p, size_t size)
    CUEMM_DEPRECATED("use cuemm_allocate(m, size, &p)");
CUEMM_EXTERN CUresult cuemm_alloc_async(cuemm_manager *m, CUdeviceptr *p, size_t size, CUstream stream)
    CUEMM_DEPRECATED("use cuemm_allocate_async(m, size, stream, &p)");
CUEMM_EXTERN CUresult cuemm_host_alloc(cuemm_manager *m, void **p, size_t size, unsigned int flags)
    CUEMM_DEPRECATED("use cuemm_host_allocate(m, size, flags, &p)");
CUEMM_EXTERN CUresult cuemm_mem_get_address_range(cuemm_manager *m, CUdeviceptr *base, size_t *size, CUdeviceptr p)
    CUEMM_DEPRECATED("use cuemm_address_range(m, p, &base, &size)");
CUEMM_EXTERN CUresult cuemm_host_get_device_pointer(cuemm_manager *m, CUdeviceptr *dptr, void *p)
    CUEMM_DEPRECATED("use cuemm_host_device_pointer(m, p, &dptr)");
CUEMM_EXTERN CUresult cuemm_ipc_handle_from_bytes(cuemm_ipc_handle *h, const void *bytes, size_t len)
    CUEMM_DEPRECATED("use cuemm_ipc_handle_parse(bytes, len, &h)");
CUEMM_EXTERN CUresult cuemm_ipc_send(int sock, cuemm_manager *m, const cuemm_ipc_handle *h)
    CUEMM_DEPRECATED("use cuemm_ipc_handle_send(m, h, sock)");

#ifdef __cplusplus
}
#endif
#endif /* CUEMM_H */
