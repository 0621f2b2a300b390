/* queue.c - bounded FIFO of intrusive jobs (include/attn/queue.h).
 *
 * Design
 *   A singly linked list (head, tail) of attn_job threaded through job->next,
 *   so a push allocates nothing and can fail only for being full or closed.
 *   One mutex guards the list, its length and the closed flag; one condition
 *   variable (nonempty) wakes poppers.  Push never waits: the HTTP side must
 *   answer "busy" at once rather than block a libmicrohttpd callback.
 *   Deadlines: attn_queue_pop_expired (the pool's reaper) sleeps on a second
 *   condition variable (expiry, CLOCK_MONOTONIC) until the head's deadline
 *   and then takes the head, so that a job times out when its time is up
 *   even while every worker is busy.  It watches the head only: deadlines
 *   that grow along the queue (the server's: push time + queue_timeout_ms)
 *   are all met on time.  A job pushed with a deadline earlier than the
 *   tail's (a request's own, shorter timeout) makes the queue `unordered`
 *   until it empties: the reaper then looks through the whole list for the
 *   earliest deadline (at most capacity jobs, under mu, once per wake), so
 *   that job too times out on time instead of waiting to become the head.
 *   Removing jobs keeps an ordered queue ordered.  reaper_wake is when
 *   the reaper will look next (UINT64_MAX: not before a signal); a push
 *   signals expiry only when its job has an earlier deadline than that
 *   (and a pop when the new head has one), which under
 *   load is once per queue_timeout_ms or so, not once per request.  After
 *   close the reaper goes on until the queue is empty (a drain still times
 *   requests out on time); the pop that empties a closed queue wakes it to
 *   leave.
 *   attn_queue_pop_timed is pop with a bound on the wait (nonempty, like
 *   expiry, runs on CLOCK_MONOTONIC): the pool's workers use it to notice
 *   that they have been idle for a while (pool.c, on_idle).
 *
 * Threads
 *   Producers (HTTP threads) push; pool workers pop; main closes and, once
 *   no thread uses the queue, destroys it.  All entry points but destroy are
 *   safe from any thread.
 *
 * Invariants (under mu)
 *   - count == length of the list <= capacity; head == NULL iff count == 0;
 *     tail->next == NULL.
 *   - closed only goes false -> true.  Once closed, no job enters; pop
 *     returns queued jobs, then ATTN_ESHUTDOWN.
 *   - Every waiter in pop re-checks (count > 0 || closed) after waking, so
 *     spurious wake-ups are harmless; close broadcasts, push signals one.
 *   - depth mirrors count for lock-free readers; it is written only under mu.
 *   - reaper_wake >= the head's deadline whenever the reaper waits with a
 *     head that has one (it would otherwise sleep through it).
 *
 * Locks
 *   mu is a leaf: no callback and no other module's lock runs under it.
 */
#include "attn/queue.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

struct attn_queue {
  pthread_mutex_t mu;
  pthread_cond_t nonempty;
  pthread_cond_t expiry; /* CLOCK_MONOTONIC; wakes the reaper */
  uint64_t reaper_wake;  /* under mu; see DESIGN */
  attn_job *head, *tail; /* under mu */
  size_t count;          /* under mu */
  bool closed;           /* under mu; mirrored in closed_flag */
  size_t capacity;       /* fixed */
  size_t unordered;      /* under mu; jobs pushed out of deadline order */

  atomic_bool closed_flag;
  atomic_uint_fast64_t depth;
  atomic_uint_fast64_t pushed;
  atomic_uint_fast64_t rejected_full;
  atomic_uint_fast64_t rejected_closed;
};

attn_status attn_queue_create(size_t capacity, attn_queue **out) {
  if (!out) return ATTN_EINVAL;
  *out = NULL;
  if (capacity == 0) return ATTN_EINVAL;

  attn_queue *q = calloc(1, sizeof *q);
  if (!q) return ATTN_ENOMEM;
  if (pthread_mutex_init(&q->mu, NULL) != 0) {
    free(q);
    return ATTN_ENOMEM;
  }
  /* both on CLOCK_MONOTONIC, the clock of attn_now_ns */
  pthread_condattr_t ca;
  int rc = pthread_condattr_init(&ca);
  if (rc == 0) {
    rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (rc == 0) rc = pthread_cond_init(&q->nonempty, &ca);
    if (rc == 0 && (rc = pthread_cond_init(&q->expiry, &ca)) != 0)
      pthread_cond_destroy(&q->nonempty);
    pthread_condattr_destroy(&ca);
  }
  if (rc != 0) {
    pthread_mutex_destroy(&q->mu);
    free(q);
    return ATTN_ENOMEM;
  }
  q->reaper_wake = UINT64_MAX;
  q->capacity = capacity;
  atomic_init(&q->closed_flag, false);
  atomic_init(&q->depth, 0);
  atomic_init(&q->pushed, 0);
  atomic_init(&q->rejected_full, 0);
  atomic_init(&q->rejected_closed, 0);
  *out = q;
  return ATTN_OK;
}

void attn_queue_destroy(attn_queue *q) {
  if (!q) return;
  pthread_cond_destroy(&q->expiry);
  pthread_cond_destroy(&q->nonempty);
  pthread_mutex_destroy(&q->mu);
  free(q);
}

attn_status attn_queue_push(attn_queue *q, attn_job *job) {
  if (!q || !job || !job->run || (job->deadline_ns != 0 && !job->expire))
    return ATTN_EINVAL;

  pthread_mutex_lock(&q->mu);
  if (q->closed) {
    pthread_mutex_unlock(&q->mu);
    atomic_fetch_add(&q->rejected_closed, 1);
    return ATTN_ESHUTDOWN;
  }
  if (q->count == q->capacity) {
    pthread_mutex_unlock(&q->mu);
    atomic_fetch_add(&q->rejected_full, 1);
    return ATTN_EBUSY;
  }
  job->next = NULL;
  job->enqueued_ns = attn_now_ns();
  /* no deadline counts as the latest one */
  if (q->tail && job->deadline_ns &&
      (!q->tail->deadline_ns || job->deadline_ns < q->tail->deadline_ns))
    q->unordered++;
  if (q->tail)
    q->tail->next = job;
  else
    q->head = job;
  q->tail = job;
  q->count++;
  atomic_store(&q->depth, q->count);
  atomic_fetch_add(&q->pushed, 1);
  pthread_cond_signal(&q->nonempty);
  if (job->deadline_ns && job->deadline_ns < q->reaper_wake &&
      (job == q->head || q->unordered))
    pthread_cond_signal(&q->expiry);
  pthread_mutex_unlock(&q->mu);
  return ATTN_OK;
}

/* Waits on nonempty until the queue holds a job or is closed, or (when
 * timeout_ns is not UINT64_MAX) until timeout_ns have passed: 0 then, else
 * 1.  The clock is read only when the queue is open and empty.  Under mu. */
static int wait_nonempty(attn_queue *q, uint64_t timeout_ns) {
  if (q->count || q->closed) return 1;
  if (timeout_ns == UINT64_MAX) {
    while (q->count == 0 && !q->closed) pthread_cond_wait(&q->nonempty, &q->mu);
    return 1;
  }
  uint64_t now = attn_now_ns();
  uint64_t at = timeout_ns > UINT64_MAX - now ? UINT64_MAX : now + timeout_ns;
  struct timespec ts = {.tv_sec = (time_t)(at / 1000000000u),
                        .tv_nsec = (long)(at % 1000000000u)};
  while (q->count == 0 && !q->closed)
    if (pthread_cond_timedwait(&q->nonempty, &q->mu, &ts) == ETIMEDOUT)
      return q->count || q->closed;
  return 1;
}

attn_status attn_queue_pop(attn_queue *q, attn_job **out) {
  return attn_queue_pop_timed(q, UINT64_MAX, out);
}

attn_status attn_queue_pop_timed(attn_queue *q, uint64_t timeout_ns,
                                 attn_job **out) {
  if (!out) return ATTN_EINVAL;
  *out = NULL;
  if (!q) return ATTN_EINVAL;

  pthread_mutex_lock(&q->mu);
  if (!wait_nonempty(q, timeout_ns)) {
    pthread_mutex_unlock(&q->mu);
    return ATTN_ETIMEDOUT;
  }
  if (q->count == 0) { /* closed and empty */
    pthread_mutex_unlock(&q->mu);
    return ATTN_ESHUTDOWN;
  }
  attn_job *job = q->head;
  q->head = job->next;
  if (!q->head) q->tail = NULL;
  q->count--;
  if (!q->count) q->unordered = 0;
  atomic_store(&q->depth, q->count);
  if ((q->head && q->head->deadline_ns &&
       q->head->deadline_ns < q->reaper_wake) ||
      (q->closed && q->count == 0))
    pthread_cond_signal(&q->expiry); /* a new head to watch, or its end */
  pthread_mutex_unlock(&q->mu);

  job->next = NULL;
  *out = job;
  return ATTN_OK;
}

/* The job the reaper watches: the head, or in an unordered queue the one
 * with the earliest deadline (*prev: the job before it, NULL for the
 * head).  NULL when no queued job has a deadline.  Under mu. */
static attn_job *earliest(const attn_queue *q, attn_job **prev) {
  *prev = NULL;
  if (!q->unordered) return q->head && q->head->deadline_ns ? q->head : NULL;
  attn_job *best = NULL;
  for (attn_job *p = NULL, *j = q->head; j; p = j, j = j->next)
    if (j->deadline_ns && (!best || j->deadline_ns < best->deadline_ns))
      best = j, *prev = p;
  return best;
}

/* Take job (after prev, or the head) off the list.  Under mu. */
static void unlink_job(attn_queue *q, attn_job *prev, attn_job *job) {
  if (prev)
    prev->next = job->next;
  else
    q->head = job->next;
  if (q->tail == job) q->tail = prev;
  q->count--;
  if (!q->count) q->unordered = 0;
  atomic_store(&q->depth, q->count);
}

attn_status attn_queue_pop_expired(attn_queue *q, attn_job **out) {
  if (!out) return ATTN_EINVAL;
  *out = NULL;
  if (!q) return ATTN_EINVAL;

  pthread_mutex_lock(&q->mu);
  for (;;) {
    if (q->closed && q->count == 0) {
      q->reaper_wake = UINT64_MAX;
      pthread_mutex_unlock(&q->mu);
      return ATTN_ESHUTDOWN;
    }
    attn_job *prev, *h = earliest(q, &prev);
    uint64_t dl = h ? h->deadline_ns : 0;
    if (dl == 0) { /* nothing to watch until a push says so */
      q->reaper_wake = UINT64_MAX;
      pthread_cond_wait(&q->expiry, &q->mu);
      continue;
    }
    if (attn_now_ns() >= dl) {
      unlink_job(q, prev, h);
      pthread_mutex_unlock(&q->mu);
      h->next = NULL;
      *out = h;
      return ATTN_OK;
    }
    q->reaper_wake = dl;
    struct timespec ts = {.tv_sec = (time_t)(dl / 1000000000u),
                          .tv_nsec = (long)(dl % 1000000000u)};
    pthread_cond_timedwait(&q->expiry, &q->mu, &ts);
  }
}

void attn_queue_close(attn_queue *q) {
  if (!q) return;
  pthread_mutex_lock(&q->mu);
  q->closed = true;
  atomic_store(&q->closed_flag, true);
  pthread_cond_broadcast(&q->nonempty);
  pthread_cond_broadcast(&q->expiry);
  pthread_mutex_unlock(&q->mu);
}

bool attn_queue_is_closed(const attn_queue *q) {
  return q && atomic_load(&q->closed_flag);
}

void attn_queue_get_stats(const attn_queue *q, attn_queue_stats *st) {
  if (!st) return;
  *st = (attn_queue_stats){0};
  if (!q) return;
  st->capacity = q->capacity;
  st->depth = atomic_load(&q->depth);
  st->pushed = atomic_load(&q->pushed);
  st->rejected_full = atomic_load(&q->rejected_full);
  st->rejected_closed = atomic_load(&q->rejected_closed);
}
