/* pool.c - worker threads that run the jobs of one attn_queue
 * (include/attn/queue.h).
 *
 * Design
 *   N threads loop on attn_queue_pop.  For each job a worker compares the
 *   clock with the job's deadline and calls expire (deadline passed) or run,
 *   on its own thread, then forgets the job.  The queue's close is the only
 *   stop signal: pop keeps handing out queued jobs after close and answers
 *   ATTN_ESHUTDOWN once it is empty, and that is when a worker exits.  So
 *   "every worker has exited" means "the queue was closed, is empty, and no
 *   job is in a worker's hands" - which is exactly what drain waits for, with
 *   no window between a pop and the running count.
 *
 *   With on_idle, a worker that has run a job waits for the next one at
 *   most idle_ms (attn_queue_pop_timed); when that passes it calls on_idle
 *   and waits again without limit.  So on_idle runs once per idle spell,
 *   never while a job waits for it (main.c gives memory back there).
 *
 *   One more thread, the reaper, loops on attn_queue_pop_expired and calls
 *   expire for each job whose deadline passes while it waits in the queue;
 *   it leaves its loop when the queue is closed and empty.  It counts in `live`
 * like a worker, so drain also waits for an expire call it is in.
 *
 *   Start-up gate: the threads wait on the pool's cv until create has
 *   started all of them.  If one pthread_create fails, create opens the gate
 * with "aborted"; the started workers exit without touching the queue, which is
 *   the caller's and stays open.  on_worker_start runs only after the gate
 *   opens normally.
 *
 * Threads
 *   main: create, drain, destroy (not concurrently with each other).
 *   workers: worker_main; they run job callbacks and on_idle.
 *   reaper: reaper_main; it runs expire callbacks.
 *   any thread: attn_pool_busy, attn_pool_get_stats (atomics only).
 *
 * Invariants
 *   - Under mu: state goes STARTING -> RUNNING or STARTING -> ABORTED, once.
 *     live = threads (workers and the reaper, of a RUNNING pool) that have
 *     not left their loop; it only falls, and cv is broadcast when it
 *     reaches 0.
 *   - A worker touches a job only between its pop and the call to run or
 *     expire; after that call the job is its owner's again.
 *   - running is incremented after a pop and decremented after the callback
 *     returns, so it never counts a job twice; it may briefly miss a job that
 *     was just popped (a gauge, not a lock).
 *
 * Locks
 *   mu (pool) and the queue's mutex never nest: drain closes the queue before
 *   taking mu, workers pop without holding mu.  No callback runs under mu.
 */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* pthread_setname_np */
#endif
#include "attn/queue.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "attn/limits.h"
#include "internal.h"

enum pool_state { POOL_STARTING, POOL_RUNNING, POOL_ABORTED };

struct worker {
  attn_pool *pool;
  int index;
  pthread_t tid;
};

struct attn_pool {
  attn_queue *queue; /* borrowed */
  void (*on_worker_start)(int worker, void *user);
  void (*on_idle)(int worker, void *user);
  uint64_t idle_ns; /* 0: no on_idle */
  void *user;
  int nworkers;
  struct worker *w; /* [nworkers + 1]: the workers, then the reaper */

  pthread_mutex_t mu;
  pthread_cond_t cv;     /* CLOCK_MONOTONIC; gate opened, live reached 0 */
  enum pool_state state; /* under mu */
  int live;              /* under mu */

  atomic_uint_fast64_t expired;
  atomic_uint_fast64_t started;
  atomic_uint_fast64_t completed;
  atomic_uint_fast64_t running;
};

/* Test seam: worker index whose pthread_create is made to fail, or -1. */
static atomic_int fail_thread_at = -1;

void attn__pool_fail_thread_at(int nth) {
  atomic_store(&fail_thread_at, nth);
}

void attn_pool_default_opts(attn_pool_opts *o) {
  if (!o) return;
  *o = (attn_pool_opts){.workers = 1};
}

/* Any pool thread: wait for the start-up gate; false when create aborted. */
static bool pass_gate(attn_pool *p) {
  pthread_mutex_lock(&p->mu);
  while (p->state == POOL_STARTING) pthread_cond_wait(&p->cv, &p->mu);
  enum pool_state st = p->state;
  pthread_mutex_unlock(&p->mu);
  return st != POOL_ABORTED;
}

/* Any pool thread, leaving its loop. */
static void leave(attn_pool *p) {
  pthread_mutex_lock(&p->mu);
  if (--p->live == 0) pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
}

/* Reaper thread: expire the jobs whose deadline passes in the queue, until
 * the queue is closed. */
static void *reaper_main(void *arg) {
  struct worker *w = arg;
  attn_pool *p = w->pool;
  if (!pass_gate(p)) return NULL;
  attn_job *job;
  while (attn_queue_pop_expired(p->queue, &job) == ATTN_OK) {
    atomic_fetch_add(&p->running, 1);
    uint64_t now = attn_now_ns();
    job->expire(job, now > job->enqueued_ns ? now - job->enqueued_ns : 0);
    atomic_fetch_add(&p->expired, 1); /* job is its owner's from here */
    atomic_fetch_sub(&p->running, 1);
  }
  leave(p);
  return NULL;
}

/* Worker thread: wait for the gate, then pop and run until the queue is
 * closed and empty. */
static void *worker_main(void *arg) {
  struct worker *w = arg;
  attn_pool *p = w->pool;
  if (!pass_gate(p)) return NULL;

  if (p->on_worker_start) p->on_worker_start(w->index, p->user);

  attn_job *job;
  bool armed = false; /* a job ran since on_idle was last called */
  for (;;) {
    attn_status st = attn_queue_pop_timed(
        p->queue, armed && p->idle_ns ? p->idle_ns : UINT64_MAX, &job);
    if (st == ATTN_ETIMEDOUT) {
      p->on_idle(w->index, p->user);
      armed = false;
      continue;
    }
    if (st != ATTN_OK) break;
    armed = true;
    atomic_fetch_add(&p->running, 1);
    uint64_t now = attn_now_ns();
    uint64_t waited = now > job->enqueued_ns ? now - job->enqueued_ns : 0;
    if (job->deadline_ns != 0 && now >= job->deadline_ns) {
      job->expire(job, waited); /* job is its owner's from here */
      atomic_fetch_add(&p->expired, 1);
    } else {
      atomic_fetch_add(&p->started, 1);
      job->run(job, w->index, waited); /* job is its owner's from here */
      atomic_fetch_add(&p->completed, 1);
    }
    atomic_fetch_sub(&p->running, 1);
  }
  leave(p);
  return NULL;
}

static attn_status thread_status(int err) {
  return (err == EAGAIN || err == ENOMEM) ? ATTN_ENOMEM : ATTN_EINTERNAL;
}

/* Frees what create built; the threads must all have been joined. */
static void pool_free(attn_pool *p) {
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
  free(p->w);
  free(p);
}

/* Initialises mu and a CLOCK_MONOTONIC cv; on failure nothing is left. */
static attn_status pool_sync_init(attn_pool *p) {
  pthread_condattr_t ca;
  if (pthread_condattr_init(&ca) != 0) return ATTN_ENOMEM;
  if (pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) != 0) {
    pthread_condattr_destroy(&ca);
    return ATTN_EINTERNAL;
  }
  int rc = pthread_cond_init(&p->cv, &ca);
  pthread_condattr_destroy(&ca);
  if (rc != 0) return ATTN_ENOMEM;
  if (pthread_mutex_init(&p->mu, NULL) != 0) {
    pthread_cond_destroy(&p->cv);
    return ATTN_ENOMEM;
  }
  return ATTN_OK;
}

attn_status attn_pool_create(const attn_pool_opts *o, attn_pool **out) {
  if (!out) return ATTN_EINVAL;
  *out = NULL;
  if (!o || !o->queue || o->workers < 1 || o->workers > ATTN_MAX_WORKERS)
    return ATTN_EINVAL;

  attn_pool *p = calloc(1, sizeof *p);
  if (!p) return ATTN_ENOMEM;
  p->w = calloc((size_t)o->workers + 1, sizeof *p->w);
  if (!p->w) {
    free(p);
    return ATTN_ENOMEM;
  }
  attn_status s = pool_sync_init(p);
  if (s != ATTN_OK) {
    free(p->w);
    free(p);
    return s;
  }
  p->queue = o->queue;
  p->on_worker_start = o->on_worker_start;
  p->on_idle = o->on_idle;
  p->idle_ns =
      o->on_idle && o->idle_ms > 0 ? (uint64_t)o->idle_ms * 1000000u : 0;
  p->user = o->user;
  p->nworkers = o->workers;
  p->state = POOL_STARTING;
  p->live = o->workers + 1;
  atomic_init(&p->expired, 0);
  atomic_init(&p->started, 0);
  atomic_init(&p->completed, 0);
  atomic_init(&p->running, 0);

  /* Workers inherit a fully blocked mask: signals are main's business. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int fail_at = atomic_load(&fail_thread_at);
  int nstarted = 0, err = 0;
  for (; nstarted <= p->nworkers; nstarted++) { /* the reaper last */
    struct worker *w = &p->w[nstarted];
    w->pool = p;
    w->index = nstarted;
    err = nstarted == fail_at
              ? EAGAIN
              : pthread_create(
                    &w->tid, NULL,
                    nstarted < p->nworkers ? worker_main : reaper_main, w);
    if (err != 0) break;
#ifdef __linux__
    /* for top -H, ps -L and perf: attn-worker-N, attn-reaper (at most 15
     * bytes; a failure only leaves the inherited name) */
    char name[16];
    if (nstarted < p->nworkers)
      snprintf(name, sizeof name, "attn-worker-%u", (unsigned)nstarted % 1000u);
    else
      snprintf(name, sizeof name, "attn-reaper");
    pthread_setname_np(w->tid, name);
#endif
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);

  pthread_mutex_lock(&p->mu);
  p->state = err == 0 ? POOL_RUNNING : POOL_ABORTED;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);

  if (err != 0) {
    for (int i = 0; i < nstarted; i++) pthread_join(p->w[i].tid, NULL);
    pool_free(p);
    return thread_status(err);
  }
  *out = p;
  return ATTN_OK;
}

/* ns -> absolute timespec for pthread_cond_timedwait on CLOCK_MONOTONIC. */
static struct timespec ns_to_timespec(uint64_t ns) {
  struct timespec ts;
  ts.tv_sec = (time_t)(ns / 1000000000u);
  ts.tv_nsec = (long)(ns % 1000000000u);
  return ts;
}

attn_status attn_pool_drain(attn_pool *p, int64_t timeout_ms) {
  if (!p) return ATTN_EINVAL;
  attn_queue_close(p->queue);

  /* A deadline past what uint64_t holds (~584 years) means "no limit". */
  bool bounded = timeout_ms >= 0;
  uint64_t deadline = 0;
  if (bounded) {
    uint64_t now = attn_now_ns();
    uint64_t span = (uint64_t)timeout_ms;
    if (span > (UINT64_MAX - now) / 1000000u)
      bounded = false;
    else
      deadline = now + span * 1000000u;
  }

  attn_status s = ATTN_OK;
  pthread_mutex_lock(&p->mu);
  if (bounded) {
    struct timespec ts = ns_to_timespec(deadline);
    while (p->live > 0) {
      if (pthread_cond_timedwait(&p->cv, &p->mu, &ts) == ETIMEDOUT) {
        if (p->live > 0) s = ATTN_ETIMEDOUT;
        break;
      }
    }
  } else {
    while (p->live > 0) pthread_cond_wait(&p->cv, &p->mu);
  }
  pthread_mutex_unlock(&p->mu);
  return s;
}

void attn_pool_destroy(attn_pool *p) {
  if (!p) return;
  attn_queue_close(p->queue);
  for (int i = 0; i <= p->nworkers; i++) pthread_join(p->w[i].tid, NULL);
  pool_free(p);
}

uint64_t attn_pool_busy(const attn_pool *p) {
  return p ? atomic_load(&p->running) : 0;
}

void attn_pool_get_stats(const attn_pool *p, attn_queue_stats *st) {
  if (!st) return;
  if (!p) {
    *st = (attn_queue_stats){0};
    return;
  }
  attn_queue_get_stats(p->queue, st);
  /* Read "finished" counters before "begun" ones so that a scrape never
   * shows completed > started. */
  st->completed = atomic_load(&p->completed);
  st->expired = atomic_load(&p->expired);
  st->running = atomic_load(&p->running);
  st->started = atomic_load(&p->started);
}
