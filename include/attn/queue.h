/* queue.h - a bounded FIFO of jobs and the worker pool that runs them.
 *
 * The queue and the pool know nothing of what a job does: a job is an
 * intrusive attn_job embedded in the caller's own struct, with a run callback
 * and an optional deadline with an expire callback.  No HTTP, no JSON.
 *
 *   producer (any thread)          workers (pool threads)
 *   attn_queue_push ──► [ FIFO, capacity N ] ──► pop ─► run(job) or expire(job)
 *
 *  - Push never blocks: a full queue answers ATTN_EBUSY at once ("full queue
 *    means 503 now"), a closed one ATTN_ESHUTDOWN.
 *  - Closing refuses new pushes; jobs already queued still pop and run.
 *  - A job whose deadline passes is handed to expire instead of run, so its
 *    owner can answer "timed out": by the pool's reaper thread the moment it
 *    passes while the job waits in the queue (so even while every worker is
 *    busy; wherever it stands, also when its deadline is earlier than those
 *    of jobs ahead of it), or by the worker that takes it late.
 *  - attn_pool_drain closes the queue and waits, with a timeout, until every
 *    queued and running job has finished: the graceful-shutdown step.
 *
 * Ownership of a job: the caller allocates it and fills run, expire and
 * deadline_ns.  From a successful push until the worker calls run or expire
 * the job belongs to the queue (next and enqueued_ns are the queue's).  The
 * call to run or expire hands it back: the callback may free it, and no queue
 * or pool code touches the job after that call.  A failed push leaves the job
 * untouched and still the caller's.
 *
 * Counters are C11 atomics read without locks (for /metrics): each is exact,
 * but a snapshot of several is not taken at one instant.
 */
#ifndef ATTN_QUEUE_H
#define ATTN_QUEUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attn/clock.h"
#include "attn/status.h"

typedef struct attn_job attn_job;

/* Embed in the caller's struct and recover it with offsetof. */
struct attn_job {
  attn_job *next;       /* the queue's while queued */
  uint64_t enqueued_ns; /* set by a successful push, attn_now_ns() clock */
  /* 0 = none; otherwise the absolute attn_now_ns() time after which the job
   * is expired instead of run.  Set by the caller before push. */
  uint64_t deadline_ns;
  /* Runs the job on a worker thread.  worker is the pool's worker index
   * (0 .. workers-1); waited_ns is the time spent queued.  Required. */
  void (*run)(attn_job *job, int worker, uint64_t waited_ns);
  /* Called instead of run once the deadline has passed: on the pool's
   * reaper thread when it passes at the head of the queue, else on the
   * worker that takes the job late.  Required when deadline_ns != 0. */
  void (*expire)(attn_job *job, uint64_t waited_ns);
};

/* Counters of a queue and of the pool that serves it.  attn_queue_get_stats
 * fills the queue's part and zeroes the pool's; attn_pool_get_stats fills
 * both.  Once everything has drained,
 *   pushed == expired + completed   and   started == completed. */
typedef struct attn_queue_stats {
  /* queue */
  uint64_t depth;           /* jobs queued now (gauge) */
  uint64_t capacity;        /* fixed at create */
  uint64_t pushed;          /* successful pushes */
  uint64_t rejected_full;   /* pushes refused with ATTN_EBUSY */
  uint64_t rejected_closed; /* pushes refused with ATTN_ESHUTDOWN */
  /* pool */
  uint64_t expired;   /* expire calls that returned */
  uint64_t started;   /* run calls begun */
  uint64_t completed; /* run calls that returned */
  uint64_t running;   /* jobs taken by a worker whose run/expire has not
                         returned (gauge) */
} attn_queue_stats;

/* enqueued_ns and deadline_ns are on attn_now_ns's clock (clock.h). */

/* ---- queue ------------------------------------------------------------ */

typedef struct attn_queue attn_queue;

/* A queue holding at most capacity jobs (capacity >= 1).
 * On success *out owns a new open queue (free with attn_queue_destroy); on
 * error (ATTN_EINVAL for capacity 0 or out NULL, ATTN_ENOMEM) *out is NULL
 * and nothing is left allocated.  Any thread. */
attn_status attn_queue_create(size_t capacity, attn_queue **out);

/* Frees the queue; NULL is a no-op.  No thread may be using it (destroy the
 * pool first).  Jobs still queued are not touched: they stay the caller's,
 * who should have drained them.  Owner thread. */
void attn_queue_destroy(attn_queue *q);

/* Appends job at the tail; never blocks.
 * Returns ATTN_OK (the job is now the queue's, enqueued_ns set),
 * ATTN_EBUSY when the queue is full, ATTN_ESHUTDOWN once it is closed,
 * ATTN_EINVAL for a NULL queue or job, a job without run, or one with a
 * deadline but no expire.  On any error the job is untouched.  Any thread. */
attn_status attn_queue_push(attn_queue *q, attn_job *job);

/* Takes the job at the head, blocking while the queue is open and empty.
 * Returns ATTN_OK with *out set (the job is now the caller's), or
 * ATTN_ESHUTDOWN with *out NULL once the queue is closed and empty.  Queued
 * jobs still pop after close.  ATTN_EINVAL for NULL arguments.  Any thread;
 * normally the pool's workers. */
attn_status attn_queue_pop(attn_queue *q, attn_job **out);

/* attn_queue_pop, waiting at most timeout_ns (UINT64_MAX: without limit)
 * while the queue is open and empty: ATTN_ETIMEDOUT with *out NULL when
 * that time passes without a job.  The clock is read only when it has to
 * wait.  Any thread; normally the pool's workers. */
attn_status attn_queue_pop_timed(attn_queue *q, uint64_t timeout_ns,
                                 attn_job **out);

/* Blocks until a queued job has a deadline that has passed, then takes it:
 * ATTN_OK with *out set (the job is the caller's, to expire).  The earliest
 * deadline is watched, wherever its job stands (see queue.c).  It goes on after
 * close (a draining queue still times out) and answers ATTN_ESHUTDOWN with *out
 * NULL once the queue is closed and empty.
 * ATTN_EINVAL for NULL arguments.  One thread at a time: the pool's
 * reaper. */
attn_status attn_queue_pop_expired(attn_queue *q, attn_job **out);

/* Refuses further pushes and wakes every blocked pop; idempotent.  Jobs
 * already queued stay and still pop.  Any thread. */
void attn_queue_close(attn_queue *q);

/* True once attn_queue_close has been called.  Any thread. */
bool attn_queue_is_closed(const attn_queue *q);

/* Fills the queue's counters and zeroes the pool's.  Any thread. */
void attn_queue_get_stats(const attn_queue *q, attn_queue_stats *st);

/* ---- pool ------------------------------------------------------------- */

typedef struct attn_pool attn_pool;

typedef struct attn_pool_opts {
  int workers;       /* 1 .. ATTN_MAX_WORKERS (attn/limits.h) */
  attn_queue *queue; /* borrowed; must outlive the pool */
  /* Optional; called once on each worker thread before it takes its first
   * job (e.g. to set per-thread BLAS options).  Not called when create
   * fails. */
  void (*on_worker_start)(int worker, void *user);
  /* Optional; called on a worker thread that has run a job and then
   * waited idle_ms (> 0) for the next one, once per such wait: its next
   * wait is without limit until a job comes.  Never while the worker holds
   * a job, so no request waits for it (e.g. to give memory back). */
  void (*on_idle)(int worker, void *user);
  int idle_ms;
  void *user; /* of both hooks */
} attn_pool_opts;

/* workers = 1, everything else NULL or 0. */
void attn_pool_default_opts(attn_pool_opts *o);

/* Starts o->workers threads that pop jobs from o->queue and run or expire
 * them, and one reaper thread that expires jobs whose deadline passes while
 * they wait (attn_queue_pop_expired).  All start with every signal blocked,
 * so signals go to the threads of main.
 * On success *out owns a new pool (free with attn_pool_destroy).  On error
 * *out is NULL, no thread is left running, nothing is allocated and the queue
 * is untouched (still open): ATTN_EINVAL for bad opts, ATTN_ENOMEM when
 * memory or threads ran out, ATTN_EINTERNAL for other thread failures.
 * Owner thread (main). */
attn_status attn_pool_create(const attn_pool_opts *o, attn_pool **out);

/* Closes the queue, then waits until every queued and running job has
 * finished (all workers have run out of work and stopped).
 * timeout_ms < 0 waits without limit, 0 only checks.
 * Returns ATTN_OK when all is done, ATTN_ETIMEDOUT when the time ran out
 * first: the workers carry on, and drain may be called again; destroy waits
 * for them.  ATTN_EINVAL for a NULL pool.  Owner thread (main); never from a
 * job callback (it would wait for itself). */
attn_status attn_pool_drain(attn_pool *p, int64_t timeout_ms);

/* Closes the queue, lets the workers finish every queued job (run or
 * expire), joins them and frees the pool.  Blocks as long as jobs take: call
 * attn_pool_drain first to bound the wait.  NULL is a no-op.  The queue is
 * left closed and is still the caller's to destroy.  Owner thread (main);
 * never from a job callback. */
void attn_pool_destroy(attn_pool *p);

/* Jobs being run or expired right now.  Any thread. */
uint64_t attn_pool_busy(const attn_pool *p);

/* Fills all counters: the queue's and this pool's.  Any thread. */
void attn_pool_get_stats(const attn_pool *p, attn_queue_stats *st);

#endif /* ATTN_QUEUE_H */
