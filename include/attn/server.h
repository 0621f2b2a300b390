/* server.h - the attnd HTTP front end: routes, the infer job, and the one
 * file that speaks libmicrohttpd.
 *
 * main builds the pieces (config, model registry, queue, pool) and hands
 * them to attn_server_create, which starts listening.  The server borrows
 * everything it is given; main tears down in reverse order. */
#ifndef ATTN_SERVER_H
#define ATTN_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "attn/config.h"
#include "attn/model.h"
#include "attn/queue.h"
#include "attn/status.h"

typedef struct attn_server attn_server;

typedef struct attn_server_deps {
  const attn_config *cfg;
  attn_registry *models;
  attn_queue *queue;
  attn_pool *pool;
  /* Bytes of request and response bodies the server may hold at once, all
   * connections together (attn_config_body_budget); a request or an answer
   * that would pass it is answered 503. */
  int64_t body_budget;
  /* CPUs attnd may use (attn_cpus_allowed): what blas_threads_per_worker
   * = 0 shares among the requests computing at once; 0 = the CPUs
   * online. */
  int cpus;
  /* The pool's worker threads (attnd_workers). */
  int workers;
  /* ATTND_API_KEY's value (main reads the environment), a key beside
   * those of cfg->api_keys_file; NULL or "" for none. */
  const char *api_key;
  /* The sessions' store (session.h), main's: made before the server,
   * destroyed after it; NULL: the session routes answer 503. */
  struct attn_session_store *sessions;
  /* ATTND_ADMIN_API_KEY's value, an admin key beside those of
   * cfg->admin_api_keys_file; NULL or "" for none. */
  const char *admin_api_key;
} attn_server_deps;

/* Bind and start serving.  On success *out owns a running server (stop it
 * with attn_server_destroy); on error *out is NULL, nothing is listening and
 * d says why (e.g. the port is taken). */
attn_status attn_server_create(const attn_server_deps *deps, attn_server **out,
                               attn_diag *d);

/* The port actually bound (useful with port 0). */
int attn_server_port(const attn_server *s);

/* metrics_port's port, where only GET /metrics and the health routes are
 * served; 0: none. */
int attn_server_metrics_port(const attn_server *s);

/* Readiness (/v2/health/ready and every model's .../ready) turns 503;
 * everything else, new inference requests included, is served as before,
 * and liveness stays 200.  For shutdown_delay_ms: load balancers see the
 * 503 and stop sending, while what they still send is answered.  Any
 * thread; idempotent. */
void attn_server_set_unready(attn_server *s);

/* Readiness turns 503 and new inference requests are refused with 503;
 * health, metadata and requests already accepted carry on, those whose
 * headers came before this call included: a body still arriving is read
 * to its end and the request answered as ever (see
 * attn_server_wait_arrivals).  Any thread. */
void attn_server_begin_drain(attn_server *s);

/* After attn_server_begin_drain: wait until every request whose headers
 * came before it is past its body (routed: queued, answered, or cut),
 * up to timeout_ms, so that the queue is closed only after they are in
 * it.  Returns ATTN_OK, or ATTN_ETIMEDOUT with *left (may be NULL) the
 * requests whose body was still arriving (attn_server_destroy closes
 * their connections: access line 499, "closed":"shutdown").  Main
 * thread. */
attn_status attn_server_wait_arrivals(attn_server *s, int64_t timeout_ms,
                                      int *left);

/* Wait until no request is in flight (its body received, its answer not yet
 * sent) and, for up to ATTN_DRAIN_LINGER_MS, until no request has begun for
 * ATTN_DRAIN_QUIET_MS (one a client wrote just before the drain, still in
 * its socket, is then answered 503 rather than cut), up to timeout_ms.  A
 * request whose body is still arriving is not waited for here
 * (attn_server_wait_arrivals does, for those begun before the drain):
 * attn_server_destroy closes its connection.  Returns ATTN_OK or
 * ATTN_ETIMEDOUT.  Main thread. */
attn_status attn_server_wait_idle(attn_server *s, int64_t timeout_ms);

/* For an exit before the drain is done (drain_timeout_ms passed): write the
 * access line of every request still in flight, as attn_server_wait_idle
 * counts them, with "closed":"shutdown" (status 499 unless a worker had
 * answered it), and stop the lines the server would write for them later.
 * Returns how many there were.  The server keeps running; the caller is
 * about to exit.  Main thread. */
int attn_server_abandon(attn_server *s);

/* API keys in force (0: none, every route open).  Any thread. */
size_t attn_server_key_count(attn_server *s);

/* Re-read api_keys_file (SIGHUP): ATTN_OK and *count keys now in force;
 * on any error (ATTN_ENOTFOUND: keys are off, nothing to re-read; the file
 * unreadable, a bad line, no key) the keys in force stay and d says why,
 * naming lines, never keys.  Main thread. */
attn_status attn_server_reload_keys(attn_server *s, size_t *count,
                                    attn_diag *d);

/* Admin keys in force (0: none).  Any thread. */
size_t attn_server_admin_key_count(attn_server *s);

/* Re-read admin_api_keys_file (SIGHUP), as attn_server_reload_keys does
 * api_keys_file (ATTN_ENOTFOUND: no admin keys).  Main thread. */
attn_status attn_server_reload_admin_keys(attn_server *s, size_t *count,
                                          attn_diag *d);

/* Requests refused for want of a valid API key so far (the metrics'
 * attnd_auth_failures_total).  Any thread. */
uint64_t attn_server_auth_failures(attn_server *s);

/* Stop listening and free.  Every suspended request must have been resumed
 * (the pool drained).  NULL is allowed. */
void attn_server_destroy(attn_server *s);

/* session_dir (docs/configuration.md; src/server/session_dir.c): restarts
 * that lose no session.  Both log what they did, and each file they skip
 * with why; neither fails. */

/* After the drain: every session of st written to dir (made when
 * missing), one session file (codec.h) each, "<owner>-<id>.safetensors":
 * under a temporary name, fsynced, renamed, then the folder fsynced.
 * running: steps may still run (the drain ran out of time); a session a
 * step holds is then not saved (logged), the others are, each between two
 * steps.  Returns how many were written. */
size_t attn_sessions_save(struct attn_session_store *st, const char *dir,
                          int running);

/* At start-up, before serving: every "*.safetensors" file of dir read
 * (attn_read_file, no larger than the store's cache could hold), decoded
 * strictly and imported with its owner and id, its idle clock starting
 * now; each file loaded is removed.  A file that is partial, corrupt,
 * foreign or refused by the store is skipped with a warning naming it and
 * why, and left in place.  A folder that does not exist holds nothing.
 * Returns how many sessions were loaded. */
size_t attn_sessions_load(struct attn_session_store *st, const char *dir);

#endif
