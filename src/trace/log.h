/* log.h: the event log (CUEMM_LOG): rows in the CSV format of RMM's
 * logging_resource_adaptor, buffered per thread.
 *
 * A log is one open file, shared by every manager that names it and kept
 * open for the process's life (a thread's buffer may still hold its rows
 * when a manager goes).  The manager's entry points write one row per
 * allocation or free; the layers below them add what the call made them do
 * (growth, release, flush) as notes, which the calling thread's next row
 * carries.
 */
#ifndef CUEMM_LOG_H
#define CUEMM_LOG_H

#include <stddef.h>
#include <stdint.h>

#include <cuda.h>

typedef struct cuemm__log cuemm__log;

typedef enum cuemm__log_action {
  CUEMM__LOG_ALLOCATE = 0,
  CUEMM__LOG_FREE = 1,
  CUEMM__LOG_ALLOCATE_FAILURE = 2,
} cuemm__log_action;

/* Opens the log named by `path` ("%p" becomes the process id), or finds it
 * open already; the file is truncated and its header written when opened.
 * Fails with CUDA_ERROR_INVALID_VALUE and a message naming the path and the
 * system's reason. */
CUresult cuemm__log_open(const char *path, cuemm__log **out);

/* The row's place in the order of events (its Seq).  A free takes it before
 * the block goes back, an allocation once it has the block: whichever way
 * the threads race, a block's free then comes before its next allocation.
 * A number taken for a call that then writes no row is given back with
 * cuemm__log_untake (the rows' count leaves it out; Seq has a gap). */
uint64_t cuemm__log_take(cuemm__log *log);
void cuemm__log_untake(cuemm__log *log);
#define CUEMM__LOG_NOW UINT64_MAX

/* One row, numbered `seq` (CUEMM__LOG_NOW: take the next number now).
 * `manager` numbers the manager, `held` is what it holds from the driver
 * after the event.  The calling thread's notes go with it. */
void cuemm__log_row(cuemm__log *log, uint64_t seq, cuemm__log_action action, uintptr_t ptr, size_t size,
                    CUstream stream, unsigned manager, const char *call, size_t held);

/* Adds "what=n" (or "what" when n is 0) to the calling thread's notes for
 * its next row; nothing when log is NULL. */
void cuemm__log_note(cuemm__log *log, const char *what, size_t n);

/* A call that writes no row ends: its notes are kept for the thread's next
 * row, marked as earlier. */
void cuemm__log_settle(cuemm__log *log);

/* Writes every thread's buffered rows for this log to the file. */
void cuemm__log_flush(cuemm__log *log);

/* Rows made so far and rows lost to write failures. */
void cuemm__log_counts(const cuemm__log *log, uint64_t *rows, uint64_t *lost);

/* The path the log writes to (after "%p"). */
const char *cuemm__log_path(const cuemm__log *log);

#endif
