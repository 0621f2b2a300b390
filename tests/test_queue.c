/* test_queue.c - the bounded job queue and the worker pool.
 *
 * No test asserts on timing.  Workers are held and released with latches
 * (mutex + condition variable); the only sleeps are in a helper thread that
 * releases a latch "a little later", and the assertion after it holds for
 * any delay.  Assertions run on the test's own thread; job callbacks only
 * record what happened. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <time.h>

#include "attn/limits.h"
#include "attn/queue.h"
#include "../src/queue/internal.h"
#include "unit.h"

/* ---- latch: a counter one can wait on ---------------------------------- */

typedef struct latch {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int n;
} latch;

static void latch_init(latch *l, int n) {
  pthread_mutex_init(&l->mu, NULL);
  pthread_cond_init(&l->cv, NULL);
  l->n = n;
}

static void latch_fini(latch *l) {
  pthread_cond_destroy(&l->cv);
  pthread_mutex_destroy(&l->mu);
}

static void latch_add(latch *l, int d) {
  pthread_mutex_lock(&l->mu);
  l->n += d;
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
}

/* Waits until the counter is at least n. */
static void latch_wait_ge(latch *l, int n) {
  pthread_mutex_lock(&l->mu);
  while (l->n < n) pthread_cond_wait(&l->cv, &l->mu);
  pthread_mutex_unlock(&l->mu);
}

/* ---- test jobs ----------------------------------------------------------- */

typedef struct tctx {
  latch started; /* +1 when a blocking job begins */
  latch gate;    /* blocking jobs wait until this is >= 1 */
  pthread_mutex_t mu;
  int order[256]; /* ids in the order run saw them */
  int norder;
} tctx;

typedef struct tjob {
  attn_job job; /* first member is not required; container_of is used */
  tctx *ctx;
  int id;
  bool block; /* wait on ctx->gate inside run */
  atomic_int runs, expires;
  atomic_int worker;
} tjob;

/* (clang-format 14 would write "(j)-offsetof", taking (j) for a cast) */
/* clang-format off */
#define TJOB(j) ((tjob *)((char *)(j) - offsetof(tjob, job)))
/* clang-format on */

static void tjob_run(attn_job *j, int worker, uint64_t waited_ns) {
  tjob *t = TJOB(j);
  (void)waited_ns;
  atomic_store(&t->worker, worker);
  if (t->block) {
    latch_add(&t->ctx->started, 1);
    latch_wait_ge(&t->ctx->gate, 1);
  }
  if (t->ctx) {
    pthread_mutex_lock(&t->ctx->mu);
    if (t->ctx->norder < 256) t->ctx->order[t->ctx->norder++] = t->id;
    pthread_mutex_unlock(&t->ctx->mu);
  }
  atomic_fetch_add(&t->runs, 1);
}

static void tjob_expire(attn_job *j, uint64_t waited_ns) {
  (void)waited_ns;
  atomic_fetch_add(&TJOB(j)->expires, 1);
}

static void tjob_init(tjob *t, tctx *ctx, int id, bool block) {
  t->job = (attn_job){.run = tjob_run, .expire = tjob_expire};
  t->ctx = ctx;
  t->id = id;
  t->block = block;
  atomic_init(&t->runs, 0);
  atomic_init(&t->expires, 0);
  atomic_init(&t->worker, -1);
}

static void tctx_init(tctx *c) {
  latch_init(&c->started, 0);
  latch_init(&c->gate, 0);
  pthread_mutex_init(&c->mu, NULL);
  c->norder = 0;
}

static void tctx_fini(tctx *c) {
  latch_fini(&c->started);
  latch_fini(&c->gate);
  pthread_mutex_destroy(&c->mu);
}

static attn_pool *start_pool(attn_queue *q, int workers) {
  attn_pool_opts o;
  attn_pool_default_opts(&o);
  o.queue = q;
  o.workers = workers;
  attn_pool *p = NULL;
  ck_assert_int_eq(attn_pool_create(&o, &p), ATTN_OK);
  ck_assert_ptr_nonnull(p);
  return p;
}

/* What most pool tests start from: a context, a queue of `cap` jobs, a pool
 * of `workers`, and a blocking job (id -1) already running on one of them
 * until the test opens c.gate.  rig_stop destroys what is left (set p to
 * NULL after destroying the pool in a test). */
typedef struct rig {
  tctx c;
  attn_queue *q;
  attn_pool *p;
  tjob blocker;
} rig;

static void rig_start(rig *r, size_t cap, int workers) {
  tctx_init(&r->c);
  ck_assert_int_eq(attn_queue_create(cap, &r->q), ATTN_OK);
  r->p = start_pool(r->q, workers);
  tjob_init(&r->blocker, &r->c, -1, true);
  ck_assert_int_eq(attn_queue_push(r->q, &r->blocker.job), ATTN_OK);
  latch_wait_ge(&r->c.started, 1);
}

static void rig_stop(rig *r) {
  if (r->p) attn_pool_destroy(r->p);
  attn_queue_destroy(r->q);
  tctx_fini(&r->c);
}

/* ---- tests --------------------------------------------------------------- */

START_TEST(test_destroy_null) {
  attn_queue_destroy(NULL);
  attn_pool_destroy(NULL);
  ck_assert_uint_eq(attn_pool_busy(NULL), 0);
  ck_assert(!attn_queue_is_closed(NULL));
}
END_TEST

START_TEST(test_create_einval) {
  attn_queue *q = (attn_queue *)&q; /* must be reset to NULL */
  ck_assert_int_eq(attn_queue_create(0, &q), ATTN_EINVAL);
  ck_assert_ptr_null(q);
  ck_assert_int_eq(attn_queue_create(4, NULL), ATTN_EINVAL);
  ck_assert_int_eq(attn_queue_create(4, &q), ATTN_OK);

  attn_pool_opts o;
  attn_pool_default_opts(&o);
  ck_assert_int_eq(o.workers, 1);
  attn_pool *p = (attn_pool *)&p;
  ck_assert_int_eq(attn_pool_create(&o, &p), ATTN_EINVAL); /* no queue */
  ck_assert_ptr_null(p);
  o.queue = q;
  o.workers = 0;
  ck_assert_int_eq(attn_pool_create(&o, &p), ATTN_EINVAL);
  o.workers = ATTN_MAX_WORKERS + 1;
  ck_assert_int_eq(attn_pool_create(&o, &p), ATTN_EINVAL);
  ck_assert_int_eq(attn_pool_create(NULL, &p), ATTN_EINVAL);
  o.workers = 1;
  ck_assert_int_eq(attn_pool_create(&o, NULL), ATTN_EINVAL);
  ck_assert(!attn_queue_is_closed(q)); /* failures leave the queue alone */
  ck_assert_int_eq(attn_pool_drain(NULL, 0), ATTN_EINVAL);
  attn_queue_destroy(q);
}
END_TEST

/* The queue alone, one thread: order, capacity, close, bad jobs. */
START_TEST(test_queue_single_thread) {
  attn_queue *q;
  ck_assert_int_eq(attn_queue_create(3, &q), ATTN_OK);
  tjob t[5];
  for (int i = 0; i < 5; i++) tjob_init(&t[i], NULL, i, false);

  tjob bad;
  tjob_init(&bad, NULL, 99, false);
  bad.job.run = NULL;
  ck_assert_int_eq(attn_queue_push(q, &bad.job), ATTN_EINVAL);
  bad.job.run = tjob_run;
  bad.job.expire = NULL;
  bad.job.deadline_ns = 1;
  ck_assert_int_eq(attn_queue_push(q, &bad.job), ATTN_EINVAL);
  ck_assert_int_eq(attn_queue_push(q, NULL), ATTN_EINVAL);

  for (int i = 0; i < 3; i++)
    ck_assert_int_eq(attn_queue_push(q, &t[i].job), ATTN_OK);
  t[3].job.enqueued_ns = 12345;
  ck_assert_int_eq(attn_queue_push(q, &t[3].job), ATTN_EBUSY);
  ck_assert_uint_eq(t[3].job.enqueued_ns, 12345); /* failure touched nothing */

  attn_job *j;
  ck_assert_int_eq(attn_queue_pop(q, &j), ATTN_OK);
  ck_assert_ptr_eq(j, &t[0].job);
  ck_assert_int_eq(attn_queue_push(q, &t[3].job), ATTN_OK);

  attn_queue_close(q);
  ck_assert(attn_queue_is_closed(q));
  ck_assert_int_eq(attn_queue_push(q, &t[4].job), ATTN_ESHUTDOWN);

  attn_queue_stats st;
  attn_queue_get_stats(q, &st);
  ck_assert_uint_eq(st.capacity, 3);
  ck_assert_uint_eq(st.depth, 3);
  ck_assert_uint_eq(st.pushed, 4);
  ck_assert_uint_eq(st.rejected_full, 1);
  ck_assert_uint_eq(st.rejected_closed, 1);
  ck_assert_uint_eq(st.started + st.completed + st.expired + st.running, 0);

  for (int i = 1; i <= 3; i++) {
    ck_assert_int_eq(attn_queue_pop(q, &j), ATTN_OK);
    ck_assert_ptr_eq(j, &t[i].job);
    ck_assert_ptr_null(j->next);
  }
  ck_assert_int_eq(attn_queue_pop(q, &j), ATTN_ESHUTDOWN);
  ck_assert_ptr_null(j);
  ck_assert_int_eq(attn_queue_pop(q, NULL), ATTN_EINVAL);
  attn_queue_destroy(q);
}
END_TEST

static void *popper(void *arg) {
  attn_job *j;
  return (void *)(intptr_t)attn_queue_pop(arg, &j);
}

/* close must wake every blocked pop, not just one. */
START_TEST(test_close_wakes_all_poppers) {
  attn_queue *q;
  ck_assert_int_eq(attn_queue_create(2, &q), ATTN_OK);
  pthread_t th[4];
  for (int i = 0; i < 4; i++)
    ck_assert_int_eq(pthread_create(&th[i], NULL, popper, q), 0);
  attn_queue_close(q);
  for (int i = 0; i < 4; i++) {
    void *rv;
    pthread_join(th[i], &rv);
    ck_assert_int_eq((int)(intptr_t)rv, ATTN_ESHUTDOWN);
  }
  attn_queue_destroy(q);
}
END_TEST

START_TEST(test_fifo_one_worker) {
  enum { N = 100 };
  tctx c;
  tctx_init(&c);
  attn_queue *q;
  ck_assert_int_eq(attn_queue_create(N + 1, &q), ATTN_OK);
  attn_pool *p = start_pool(q, 1);

  /* Hold the worker so that all N jobs are really queued together. */
  tjob blocker, *t = calloc(N, sizeof *t);
  tjob_init(&blocker, &c, -1, true);
  ck_assert_int_eq(attn_queue_push(q, &blocker.job), ATTN_OK);
  latch_wait_ge(&c.started, 1);
  for (int i = 0; i < N; i++) {
    tjob_init(&t[i], &c, i, false);
    ck_assert_int_eq(attn_queue_push(q, &t[i].job), ATTN_OK);
  }
  attn_queue_stats st;
  attn_pool_get_stats(p, &st);
  ck_assert_uint_eq(st.depth, N);
  latch_add(&c.gate, 1);

  ck_assert_int_eq(attn_pool_drain(p, -1), ATTN_OK);
  ck_assert_int_eq(c.norder, N + 1);
  ck_assert_int_eq(c.order[0], -1);
  for (int i = 0; i < N; i++) {
    ck_assert_int_eq(c.order[i + 1], i);
    ck_assert_int_eq(atomic_load(&t[i].runs), 1);
    ck_assert_int_eq(atomic_load(&t[i].worker), 0);
  }
  attn_pool_destroy(p);
  attn_queue_destroy(q);
  free(t);
  tctx_fini(&c);
}
END_TEST

START_TEST(test_capacity_busy) {
  enum { W = 2, CAP = 3 };
  tctx c;
  tctx_init(&c);
  attn_queue *q;
  ck_assert_int_eq(attn_queue_create(CAP, &q), ATTN_OK);
  attn_pool *p = start_pool(q, W);

  tjob blk[W], fill[CAP + 2];
  for (int i = 0; i < W; i++) {
    tjob_init(&blk[i], &c, 100 + i, true);
    ck_assert_int_eq(attn_queue_push(q, &blk[i].job), ATTN_OK);
  }
  latch_wait_ge(&c.started, W); /* both workers are now held */
  ck_assert_uint_eq(attn_pool_busy(p), W);

  for (int i = 0; i < CAP + 2; i++) {
    tjob_init(&fill[i], &c, i, false);
    ck_assert_int_eq(attn_queue_push(q, &fill[i].job),
                     i < CAP ? ATTN_OK : ATTN_EBUSY);
  }
  attn_queue_stats st;
  attn_pool_get_stats(p, &st);
  ck_assert_uint_eq(st.capacity, CAP);
  ck_assert_uint_eq(st.depth, CAP);
  ck_assert_uint_eq(st.pushed, W + CAP);
  ck_assert_uint_eq(st.rejected_full, 2);
  ck_assert_uint_eq(st.rejected_closed, 0);
  ck_assert_uint_eq(st.running, W);
  ck_assert_uint_eq(st.started, W);
  ck_assert_uint_eq(st.completed, 0);

  latch_add(&c.gate, 1);
  ck_assert_int_eq(attn_pool_drain(p, -1), ATTN_OK);
  attn_pool_get_stats(p, &st);
  ck_assert_uint_eq(st.depth, 0);
  ck_assert_uint_eq(st.running, 0);
  ck_assert_uint_eq(st.started, W + CAP);
  ck_assert_uint_eq(st.completed, W + CAP);
  for (int i = 0; i < CAP + 2; i++)
    ck_assert_int_eq(atomic_load(&fill[i].runs), i < CAP ? 1 : 0);
  attn_pool_destroy(p);
  attn_queue_destroy(q);
  tctx_fini(&c);
}
END_TEST

/* Close refuses pushes, yet what was queued runs; destroy finishes it. */
START_TEST(test_close_runs_queued) {
  rig r;
  rig_start(&r, 8, 1);
  tjob t[5], late;
  for (int i = 0; i < 5; i++) {
    tjob_init(&t[i], &r.c, i, false);
    ck_assert_int_eq(attn_queue_push(r.q, &t[i].job), ATTN_OK);
  }
  attn_queue_close(r.q);
  tjob_init(&late, &r.c, 99, false);
  ck_assert_int_eq(attn_queue_push(r.q, &late.job), ATTN_ESHUTDOWN);

  latch_add(&r.c.gate, 1);
  attn_pool_destroy(r.p); /* closes (again), runs the rest, joins */
  r.p = NULL;
  for (int i = 0; i < 5; i++) ck_assert_int_eq(atomic_load(&t[i].runs), 1);
  ck_assert_int_eq(atomic_load(&r.blocker.runs), 1);
  ck_assert_int_eq(atomic_load(&late.runs), 0);
  attn_queue_stats st;
  attn_queue_get_stats(r.q, &st);
  ck_assert_uint_eq(st.rejected_closed, 1);
  ck_assert_uint_eq(st.depth, 0);
  rig_stop(&r);
}
END_TEST

START_TEST(test_deadline_expired) {
  rig r;
  rig_start(&r, 8, 1);
  tjob past, queued_out, future, none;
  tjob_init(&past, &r.c, 1, false);
  tjob_init(&queued_out, &r.c, 2, false);
  tjob_init(&future, &r.c, 3, false);
  tjob_init(&none, &r.c, 4, false);

  uint64_t now = attn_now_ns();
  past.job.deadline_ns = now; /* already over when a worker looks */
  queued_out.job.deadline_ns = now + 1000000; /* runs out while queued */
  future.job.deadline_ns = now + 3600ull * 1000000000ull;
  ck_assert_int_eq(attn_queue_push(r.q, &past.job), ATTN_OK);
  ck_assert_int_eq(attn_queue_push(r.q, &queued_out.job), ATTN_OK);
  ck_assert_int_eq(attn_queue_push(r.q, &future.job), ATTN_OK);
  ck_assert_int_eq(attn_queue_push(r.q, &none.job), ATTN_OK);
  /* Sequencing, not an assertion: release the worker only once the second
   * deadline is behind us. */
  while (attn_now_ns() <= queued_out.job.deadline_ns) sched_yield();
  latch_add(&r.c.gate, 1);

  ck_assert_int_eq(attn_pool_drain(r.p, -1), ATTN_OK);
  ck_assert_int_eq(atomic_load(&past.expires), 1);
  ck_assert_int_eq(atomic_load(&past.runs), 0);
  ck_assert_int_eq(atomic_load(&queued_out.expires), 1);
  ck_assert_int_eq(atomic_load(&queued_out.runs), 0);
  ck_assert_int_eq(atomic_load(&future.runs), 1);
  ck_assert_int_eq(atomic_load(&future.expires), 0);
  ck_assert_int_eq(atomic_load(&none.runs), 1);
  ck_assert_int_eq(atomic_load(&none.expires), 0);

  attn_queue_stats st;
  attn_pool_get_stats(r.p, &st);
  ck_assert_uint_eq(st.pushed, 5);
  ck_assert_uint_eq(st.expired, 2);
  ck_assert_uint_eq(st.started, 3);
  ck_assert_uint_eq(st.completed, 3);
  rig_stop(&r);
}
END_TEST

/* A job whose deadline passes while every worker is busy is expired by the
 * reaper then, not when a worker finally takes it: with the one worker held
 * by a blocker, the queued jobs (deadlines growing along the queue, as the
 * server's) are expired in queue order while the blocker still runs; a job
 * without a deadline behind them stays queued and runs later. */
START_TEST(test_deadline_reaped_while_busy) {
  rig r;
  rig_start(&r, 8, 1);
  tjob a, b, none;
  tjob_init(&a, &r.c, 1, false);
  tjob_init(&b, &r.c, 2, false);
  tjob_init(&none, &r.c, 3, false);

  uint64_t now = attn_now_ns();
  a.job.deadline_ns = now + 20 * 1000000ull;
  b.job.deadline_ns = now + 40 * 1000000ull;
  ck_assert_int_eq(attn_queue_push(r.q, &a.job), ATTN_OK);
  ck_assert_int_eq(attn_queue_push(r.q, &b.job), ATTN_OK);
  ck_assert_int_eq(attn_queue_push(r.q, &none.job), ATTN_OK);
  /* Bounded wait (sequencing only): the reaper gets up to 3 s (the test
   * case's timeout is longer), the blocker holds the worker throughout. */
  for (int i = 0; i < 3000 && atomic_load(&b.expires) == 0; i++)
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  ck_assert_int_eq(atomic_load(&a.expires), 1);
  ck_assert_int_eq(atomic_load(&b.expires), 1);
  ck_assert_int_eq(atomic_load(&r.blocker.runs), 0); /* still blocked */
  attn_queue_stats st;
  attn_pool_get_stats(r.p, &st);
  ck_assert_uint_eq(st.expired, 2);
  ck_assert_uint_eq(st.depth, 1); /* `none` waits for the worker */
  ck_assert_int_eq(atomic_load(&none.runs), 0);

  latch_add(&r.c.gate, 1);
  ck_assert_int_eq(attn_pool_drain(r.p, -1), ATTN_OK);
  ck_assert_int_eq(atomic_load(&none.runs), 1);
  ck_assert_int_eq(atomic_load(&a.runs) + atomic_load(&b.runs), 0);
  attn_pool_get_stats(r.p, &st);
  ck_assert_uint_eq(st.pushed, st.completed + st.expired);
  rig_stop(&r);
}
END_TEST

/* A drain (close, then wait) still times queued jobs out on time: with the
 * one worker blocked, a job whose deadline passes after the close is
 * expired by the reaper before the worker is free. */
START_TEST(test_deadline_reaped_while_draining) {
  rig r;
  rig_start(&r, 4, 1);
  tjob a;
  tjob_init(&a, &r.c, 1, false);
  a.job.deadline_ns = attn_now_ns() + 20 * 1000000ull;
  ck_assert_int_eq(attn_queue_push(r.q, &a.job), ATTN_OK);
  attn_queue_close(r.q); /* what attn_pool_drain does first */
  for (int i = 0; i < 3000 && atomic_load(&a.expires) == 0; i++)
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  ck_assert_int_eq(atomic_load(&a.expires), 1);
  ck_assert_int_eq(atomic_load(&r.blocker.runs), 0); /* still blocked */
  latch_add(&r.c.gate, 1);
  ck_assert_int_eq(attn_pool_drain(r.p, -1), ATTN_OK);
  ck_assert_int_eq(atomic_load(&a.runs), 0);
  rig_stop(&r);
}
END_TEST

/* attn_queue_pop_expired alone: it returns the head once its deadline has
 * passed, ignores a head without one, and answers ATTN_ESHUTDOWN once the
 * queue is closed and empty. */
static void *reap_one(void *arg) {
  attn_queue *q = arg;
  attn_job *j = NULL;
  attn_status s = attn_queue_pop_expired(q, &j);
  return s == ATTN_OK ? (void *)j : NULL;
}

START_TEST(test_pop_expired) {
  attn_queue *q;
  ck_assert_int_eq(attn_queue_create(4, &q), ATTN_OK);
  attn_job *out = (attn_job *)1;
  ck_assert_int_eq(attn_queue_pop_expired(NULL, &out), ATTN_EINVAL);
  ck_assert_ptr_null(out);
  ck_assert_int_eq(attn_queue_pop_expired(q, NULL), ATTN_EINVAL);

  tjob t;
  tjob_init(&t, NULL, 1, false);
  t.job.deadline_ns = attn_now_ns(); /* already due */
  ck_assert_int_eq(attn_queue_push(q, &t.job), ATTN_OK);
  ck_assert_int_eq(attn_queue_pop_expired(q, &out), ATTN_OK);
  ck_assert_ptr_eq(out, &t.job);
  attn_queue_stats st;
  attn_queue_get_stats(q, &st);
  ck_assert_uint_eq(st.depth, 0);

  /* a head without a deadline is never reaped; after close the reaper
   * still watches the queue until the pop that empties it */
  tjob u;
  tjob_init(&u, NULL, 2, false);
  ck_assert_int_eq(attn_queue_push(q, &u.job), ATTN_OK);
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, reap_one, q), 0);
  nanosleep(&(struct timespec){0, 20 * 1000000}, NULL);
  attn_queue_close(q);
  ck_assert_int_eq(attn_queue_pop(q, &out), ATTN_OK); /* still queued */
  ck_assert_ptr_eq(out, &u.job);
  void *r = (void *)1;
  pthread_join(th, &r); /* the emptying pop woke it: ESHUTDOWN */
  ck_assert_ptr_null(r);
  ck_assert_int_eq(attn_queue_pop_expired(q, &out), ATTN_ESHUTDOWN);
  attn_queue_destroy(q);
}
END_TEST

/* A job whose deadline is earlier than those ahead of it (a request's own
 * short timeout) is reaped where it stands, not once it reaches the head;
 * the rest keep their order.  Deterministic: every deadline but its own is
 * far away or absent. */
START_TEST(test_pop_expired_out_of_order) {
  attn_queue *q;
  ck_assert_int_eq(attn_queue_create(8, &q), ATTN_OK);
  tjob a, b, c, d;
  tjob_init(&a, NULL, 1, false);
  tjob_init(&b, NULL, 2, false);
  tjob_init(&c, NULL, 3, false);
  tjob_init(&d, NULL, 4, false);
  a.job.deadline_ns = attn_now_ns() + 3600ull * 1000000000u;
  c.job.deadline_ns = attn_now_ns() + 20 * 1000000u; /* due in 20 ms */
  d.job.deadline_ns = attn_now_ns();                 /* the tail: due */
  ck_assert_int_eq(attn_queue_push(q, &a.job), ATTN_OK);
  ck_assert_int_eq(attn_queue_push(q, &b.job), ATTN_OK); /* none */
  ck_assert_int_eq(attn_queue_push(q, &c.job), ATTN_OK);
  attn_job *out = NULL;
  ck_assert_int_eq(attn_queue_pop_expired(q, &out), ATTN_OK); /* waits */
  ck_assert_ptr_eq(out, &c.job);
  ck_assert_int_eq(attn_queue_push(q, &d.job), ATTN_OK);
  ck_assert_int_eq(attn_queue_pop_expired(q, &out), ATTN_OK); /* the tail */
  ck_assert_ptr_eq(out, &d.job);
  attn_queue_stats st;
  attn_queue_get_stats(q, &st);
  ck_assert_uint_eq(st.depth, 2);
  ck_assert_int_eq(attn_queue_pop(q, &out), ATTN_OK);
  ck_assert_ptr_eq(out, &a.job);
  ck_assert_int_eq(attn_queue_pop(q, &out), ATTN_OK);
  ck_assert_ptr_eq(out, &b.job);
  /* the tail pointer survived the removals: pushes still append */
  ck_assert_int_eq(attn_queue_push(q, &a.job), ATTN_OK);
  ck_assert_int_eq(attn_queue_push(q, &b.job), ATTN_OK);
  ck_assert_int_eq(attn_queue_pop(q, &out), ATTN_OK);
  ck_assert_ptr_eq(out, &a.job);
  ck_assert_int_eq(attn_queue_pop(q, &out), ATTN_OK);
  ck_assert_ptr_eq(out, &b.job);
  attn_queue_destroy(q);
}
END_TEST

static void *release_later(void *arg) {
  struct timespec ts = {0, 20 * 1000000};
  nanosleep(&ts, NULL);
  latch_add(arg, 1);
  return NULL;
}

/* drain returns OK only after every queued and running job has finished. */
START_TEST(test_drain_waits) {
  enum { W = 3, N = 60 };
  tctx c;
  tctx_init(&c);
  attn_queue *q;
  ck_assert_int_eq(attn_queue_create(N + W, &q), ATTN_OK);
  attn_pool *p = start_pool(q, W);

  tjob blk[W], *t = calloc(N, sizeof *t);
  for (int i = 0; i < W; i++) {
    tjob_init(&blk[i], &c, -1, true);
    ck_assert_int_eq(attn_queue_push(q, &blk[i].job), ATTN_OK);
  }
  for (int i = 0; i < N; i++) {
    tjob_init(&t[i], &c, i, false);
    ck_assert_int_eq(attn_queue_push(q, &t[i].job), ATTN_OK);
  }
  pthread_t rel;
  ck_assert_int_eq(pthread_create(&rel, NULL, release_later, &c.gate), 0);
  ck_assert_int_eq(attn_pool_drain(p, -1), ATTN_OK);

  /* Read before joining the releaser or destroying the pool. */
  for (int i = 0; i < W; i++) ck_assert_int_eq(atomic_load(&blk[i].runs), 1);
  for (int i = 0; i < N; i++) ck_assert_int_eq(atomic_load(&t[i].runs), 1);
  ck_assert_uint_eq(attn_pool_busy(p), 0);
  attn_queue_stats st;
  attn_pool_get_stats(p, &st);
  ck_assert_uint_eq(st.completed, N + W);
  ck_assert_uint_eq(st.depth, 0);

  pthread_join(rel, NULL);
  ck_assert_int_eq(attn_queue_push(q, &t[0].job), ATTN_ESHUTDOWN);
  attn_pool_destroy(p);
  attn_queue_destroy(q);
  free(t);
  tctx_fini(&c);
}
END_TEST

START_TEST(test_drain_timeout) {
  rig r;
  rig_start(&r, 8, 1);
  tjob t[3];
  for (int i = 0; i < 3; i++) {
    tjob_init(&t[i], &r.c, i, false);
    ck_assert_int_eq(attn_queue_push(r.q, &t[i].job), ATTN_OK);
  }

  ck_assert_int_eq(attn_pool_drain(r.p, 0), ATTN_ETIMEDOUT);
  ck_assert_int_eq(attn_pool_drain(r.p, 20), ATTN_ETIMEDOUT);
  ck_assert(attn_queue_is_closed(r.q));
  ck_assert_uint_eq(attn_pool_busy(r.p), 1);
  for (int i = 0; i < 3; i++) ck_assert_int_eq(atomic_load(&t[i].runs), 0);

  latch_add(&r.c.gate, 1);
  ck_assert_int_eq(attn_pool_drain(r.p, -1), ATTN_OK);
  for (int i = 0; i < 3; i++) ck_assert_int_eq(atomic_load(&t[i].runs), 1);
  ck_assert_int_eq(attn_pool_drain(r.p, 0), ATTN_OK); /* idempotent */
  rig_stop(&r);
}
END_TEST

/* Timed-out drain, then destroy: destroy waits for the held job. */
START_TEST(test_drain_timeout_then_destroy) {
  rig r;
  rig_start(&r, 4, 2);
  tjob after;
  tjob_init(&after, &r.c, 1, false);
  ck_assert_int_eq(attn_queue_push(r.q, &after.job), ATTN_OK);
  ck_assert_int_eq(attn_pool_drain(r.p, 10), ATTN_ETIMEDOUT);

  pthread_t rel;
  ck_assert_int_eq(pthread_create(&rel, NULL, release_later, &r.c.gate), 0);
  attn_pool_destroy(r.p);
  r.p = NULL;
  ck_assert_int_eq(atomic_load(&r.blocker.runs), 1);
  ck_assert_int_eq(atomic_load(&after.runs), 1);
  pthread_join(rel, NULL);
  rig_stop(&r);
}
END_TEST

/* ---- on_worker_start and thread-creation failure ------------------------ */

typedef struct start_rec {
  atomic_int calls;
  atomic_int seen[8];
} start_rec;

static void on_start(int worker, void *user) {
  start_rec *r = user;
  atomic_fetch_add(&r->calls, 1);
  if (worker >= 0 && worker < 8) atomic_fetch_add(&r->seen[worker], 1);
}

START_TEST(test_worker_start_hook) {
  start_rec r = {0};
  attn_queue *q;
  ck_assert_int_eq(attn_queue_create(4, &q), ATTN_OK);
  attn_pool_opts o;
  attn_pool_default_opts(&o);
  o.queue = q;
  o.workers = 4;
  o.on_worker_start = on_start;
  o.user = &r;
  attn_pool *p;
  ck_assert_int_eq(attn_pool_create(&o, &p), ATTN_OK);
  ck_assert_int_eq(attn_pool_drain(p, -1), ATTN_OK);
  ck_assert_int_eq(atomic_load(&r.calls), 4);
  for (int i = 0; i < 4; i++) ck_assert_int_eq(atomic_load(&r.seen[i]), 1);
  attn_pool_destroy(p);
  attn_queue_destroy(q);
}
END_TEST

/* ---- attn_queue_pop_timed and on_idle ----------------------------------- */

START_TEST(test_pop_timed) {
  attn_queue *q;
  ck_assert_int_eq(attn_queue_create(2, &q), ATTN_OK);
  attn_job *j = (attn_job *)&q;
  ck_assert_int_eq(attn_queue_pop_timed(q, 0, &j), ATTN_ETIMEDOUT);
  ck_assert_ptr_null(j);
  ck_assert_int_eq(attn_queue_pop_timed(q, 20000000u, &j), ATTN_ETIMEDOUT);
  tjob t;
  tjob_init(&t, NULL, 1, false);
  ck_assert_int_eq(attn_queue_push(q, &t.job), ATTN_OK);
  ck_assert_int_eq(attn_queue_pop_timed(q, 0, &j), ATTN_OK);
  ck_assert_ptr_eq(j, &t.job);
  ck_assert_int_eq(attn_queue_push(q, &t.job), ATTN_OK);
  attn_queue_close(q); /* a closed queue still hands out what it holds */
  ck_assert_int_eq(attn_queue_pop_timed(q, 0, &j), ATTN_OK);
  ck_assert_int_eq(attn_queue_pop_timed(q, 0, &j), ATTN_ESHUTDOWN);
  ck_assert_int_eq(attn_queue_pop_timed(q, UINT64_MAX, &j), ATTN_ESHUTDOWN);
  ck_assert_int_eq(attn_queue_pop_timed(NULL, 0, &j), ATTN_EINVAL);
  attn_queue_destroy(q);
}
END_TEST

typedef struct idle_rec {
  latch calls;
  atomic_int worker;
} idle_rec;

static void on_idle(int worker, void *user) {
  idle_rec *r = user;
  atomic_store(&r->worker, worker);
  latch_add(&r->calls, 1);
}

/* on_idle runs once per idle spell, only after a job: a worker that has
 * run nothing never calls it, and one that did calls it once, then waits
 * for the next job without limit. */
START_TEST(test_idle_hook) {
  idle_rec r = {.worker = -1};
  latch_init(&r.calls, 0);
  attn_queue *q;
  ck_assert_int_eq(attn_queue_create(4, &q), ATTN_OK);
  attn_pool_opts o;
  attn_pool_default_opts(&o);
  o.queue = q;
  o.workers = 1;
  o.on_idle = on_idle;
  o.idle_ms = 20;
  o.user = &r;
  attn_pool *p;
  ck_assert_int_eq(attn_pool_create(&o, &p), ATTN_OK);
  tctx c;
  tctx_init(&c);
  tjob t[2];
  for (int round = 0; round < 2; round++) {
    tjob_init(&t[round], &c, round, false);
    ck_assert_int_eq(attn_queue_push(q, &t[round].job), ATTN_OK);
    latch_wait_ge(&r.calls, round + 1); /* bounded by the unit's timeout */
    ck_assert_int_eq(atomic_load(&t[round].runs), 1);
  }
  /* five more idle_ms without a job: still no further call (a bug could
   * slip through a slow machine here, never fail a right pool) */
  struct timespec pause = {0, 100000000};
  nanosleep(&pause, NULL);
  ck_assert_int_eq(attn_pool_drain(p, -1), ATTN_OK);
  pthread_mutex_lock(&r.calls.mu);
  ck_assert_int_eq(r.calls.n, 2); /* not once per timeout */
  pthread_mutex_unlock(&r.calls.mu);
  ck_assert_int_eq(atomic_load(&r.worker), 0);
  attn_pool_destroy(p);
  attn_queue_destroy(q);
  tctx_fini(&c);
  latch_fini(&r.calls);
}
END_TEST

START_TEST(test_thread_create_failure) {
  start_rec r = {0};
  attn_queue *q;
  ck_assert_int_eq(attn_queue_create(4, &q), ATTN_OK);
  attn_pool_opts o;
  attn_pool_default_opts(&o);
  o.queue = q;
  o.workers = 4;
  o.on_worker_start = on_start;
  o.user = &r;

  for (int at = 0; at < 4; at++) {
    attn_pool *p = (attn_pool *)&p;
    attn__pool_fail_thread_at(at);
    ck_assert_int_eq(attn_pool_create(&o, &p), ATTN_ENOMEM);
    attn__pool_fail_thread_at(-1);
    ck_assert_ptr_null(p);
  }
  ck_assert_int_eq(atomic_load(&r.calls), 0);
  ck_assert(!attn_queue_is_closed(q));

  /* The queue is untouched and a later pool works. */
  tctx c;
  tctx_init(&c);
  tjob t;
  tjob_init(&t, &c, 7, false);
  ck_assert_int_eq(attn_queue_push(q, &t.job), ATTN_OK);
  attn_pool *p = start_pool(q, 2);
  ck_assert_int_eq(attn_pool_drain(p, -1), ATTN_OK);
  ck_assert_int_eq(atomic_load(&t.runs), 1);
  attn_pool_destroy(p);
  attn_queue_destroy(q);
  tctx_fini(&c);
}
END_TEST

/* ---- stress: many producers x many workers ------------------------------- */

enum { S_PRODUCERS = 4, S_PER = 10000, S_WORKERS = 4 };

typedef struct sjob {
  attn_job job;
  atomic_int runs;
  atomic_int bad_worker;
} sjob;

static void sjob_run(attn_job *j, int worker, uint64_t waited_ns) {
  sjob *s = (sjob *)((char *)j - offsetof(sjob, job));
  (void)waited_ns;
  if (worker < 0 || worker >= S_WORKERS) atomic_store(&s->bad_worker, 1);
  atomic_fetch_add(&s->runs, 1);
}

typedef struct producer {
  attn_queue *q;
  sjob *jobs;    /* [S_PER] */
  uint64_t busy; /* EBUSY answers seen */
  int errors;    /* anything but OK / EBUSY */
} producer;

static void *produce(void *arg) {
  producer *pr = arg;
  for (int i = 0; i < S_PER; i++) {
    attn_job *j = &pr->jobs[i].job;
    *j = (attn_job){.run = sjob_run};
    atomic_init(&pr->jobs[i].runs, 0);
    atomic_init(&pr->jobs[i].bad_worker, 0);
    for (;;) {
      attn_status s = attn_queue_push(pr->q, j);
      if (s == ATTN_OK) break;
      if (s != ATTN_EBUSY) {
        pr->errors++;
        break;
      }
      pr->busy++;
      sched_yield();
    }
  }
  return NULL;
}

START_TEST(test_stress) {
  attn_queue *q;
  ck_assert_int_eq(attn_queue_create(64, &q), ATTN_OK);
  attn_pool *p = start_pool(q, S_WORKERS);
  sjob *jobs = calloc((size_t)S_PRODUCERS * S_PER, sizeof *jobs);
  ck_assert_ptr_nonnull(jobs);
  producer pr[S_PRODUCERS];
  pthread_t th[S_PRODUCERS];
  for (int i = 0; i < S_PRODUCERS; i++) {
    pr[i] = (producer){.q = q, .jobs = jobs + (size_t)i * S_PER};
    ck_assert_int_eq(pthread_create(&th[i], NULL, produce, &pr[i]), 0);
  }
  uint64_t busy = 0;
  for (int i = 0; i < S_PRODUCERS; i++) {
    pthread_join(th[i], NULL);
    ck_assert_int_eq(pr[i].errors, 0);
    busy += pr[i].busy;
  }
  ck_assert_int_eq(attn_pool_drain(p, -1), ATTN_OK);

  int not_once = 0, bad = 0;
  for (size_t i = 0; i < (size_t)S_PRODUCERS * S_PER; i++) {
    not_once += atomic_load(&jobs[i].runs) != 1;
    bad += atomic_load(&jobs[i].bad_worker);
  }
  ck_assert_int_eq(not_once, 0);
  ck_assert_int_eq(bad, 0);

  attn_queue_stats st;
  attn_pool_get_stats(p, &st);
  const uint64_t total = (uint64_t)S_PRODUCERS * S_PER;
  ck_assert_uint_eq(st.pushed, total);
  ck_assert_uint_eq(st.rejected_full, busy);
  ck_assert_uint_eq(st.rejected_closed, 0);
  ck_assert_uint_eq(st.started, total);
  ck_assert_uint_eq(st.completed, total);
  ck_assert_uint_eq(st.expired, 0);
  ck_assert_uint_eq(st.running, 0);
  ck_assert_uint_eq(st.depth, 0);
  ck_assert_uint_eq(st.pushed, st.completed + st.expired);
  attn_pool_destroy(p);
  attn_queue_destroy(q);
  free(jobs);
}
END_TEST

Suite *queue_suite(void) {
  Suite *s = suite_create("queue");
  TCase *tc = tcase_create("queue");
  tcase_add_test(tc, test_destroy_null);
  tcase_add_test(tc, test_create_einval);
  tcase_add_test(tc, test_queue_single_thread);
  tcase_add_test(tc, test_close_wakes_all_poppers);
  suite_add_tcase(s, tc);

  tc = tcase_create("pool");
  tcase_set_timeout(tc, 60); /* sanitizer builds are slow; nothing is timed */
  tcase_add_test(tc, test_fifo_one_worker);
  tcase_add_test(tc, test_capacity_busy);
  tcase_add_test(tc, test_close_runs_queued);
  tcase_add_test(tc, test_deadline_expired);
  tcase_add_test(tc, test_deadline_reaped_while_busy);
  tcase_add_test(tc, test_deadline_reaped_while_draining);
  tcase_add_test(tc, test_pop_expired);
  tcase_add_test(tc, test_pop_expired_out_of_order);
  tcase_add_test(tc, test_drain_waits);
  tcase_add_test(tc, test_drain_timeout);
  tcase_add_test(tc, test_drain_timeout_then_destroy);
  tcase_add_test(tc, test_worker_start_hook);
  tcase_add_test(tc, test_pop_timed);
  tcase_add_test(tc, test_idle_hook);
  tcase_add_test(tc, test_thread_create_failure);
  tcase_add_test(tc, test_stress);
  suite_add_tcase(s, tc);
  return s;
}
