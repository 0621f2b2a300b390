/* echo.c - a bare libmicrohttpd server: the ceiling for attnd's HTTP layer.
 *
 * DESIGN
 *  Purpose.  bench/load.sh drives this server and attnd with the same wrk
 *  scripts; the ratio of their request rates says how much of the available
 *  HTTP throughput attnd keeps.  The server does the least an MHD server can
 *  do for a POST: it reads the whole body (counting the bytes, which it does
 *  not keep), then answers 200 with a fixed JSON body of --reply-bytes bytes
 *  (default 300; load.sh sets it to the size of attnd's answer).  Any method
 *  and any path get the same answer.
 *
 *  Threads.  libmicrohttpd's internal polling thread with epoll, and a
 *  thread pool of --threads threads (default 2; 1 means the single polling
 *  thread and no pool, as attnd does with http_threads = 1).  The main
 *  thread blocks SIGTERM and SIGINT before the daemon starts (so MHD's
 *  threads inherit the mask), prints the port, and waits in sigwait; on
 *  either signal it stops the --handoff workers (they first answer what
 *  they hold), then the daemon, and exits 0.
 *
 *  --handoff N adds what attnd's architecture adds and nothing else: the
 *  last access call suspends the connection and pushes it on a FIFO
 *  (mutex + condition variable); one of N worker threads pops it, marks it
 *  done and resumes it; the access handler then runs again and queues the
 *  fixed answer.  The rate of this mode against the plain one is the cost
 *  of suspend -> queue -> worker -> resume, the floor under attnd's
 *  request rate before any decoding or computing.
 *
 *  --delay-ms F (with --handoff) makes each worker sleep F milliseconds
 *  before it resumes the connection: a request that "computes" for F ms
 *  without using the CPU.  With F = the engine-only time of load.sh's large
 *  request, latency - F is the transport floor of a request whose answer
 *  comes after a pause; on a virtual machine that floor is higher than the
 *  back-to-back one (idle virtual CPUs are halted and wake slowly, see
 *  docs/performance-history.md, "Server load").
 *
 *  --work-us U (with --handoff) makes each worker burn U microseconds of
 *  its own CPU time before it resumes: a request that computes for U us
 *  on the CPU.  Its rate against the plain echo says what attnd could reach
 *  if decoding, computing and encoding cost U us per request in all;
 *  load.sh runs it with --work-sweep "U ..." (docs/performance-history.md,
 *  "What the worker may cost").
 *
 *  Invariants.  The reply is built once before the daemon starts and is
 *  never written again, so every thread may hand it to MHD as persistent
 *  memory.  A per-connection request context lives from the first access
 *  callback to the completion callback, which frees it.
 *
 *  Build:  gcc -O2 -std=c11 -D_DEFAULT_SOURCE bench/echo.c -o /tmp/echo \
 *            $(pkg-config --cflags --libs libmicrohttpd)
 *  Run:    /tmp/echo --port 0 --threads 2 --reply-bytes 300
 *          prints "echo: listening on 127.0.0.1:PORT" on stderr.
 */
#include <microhttpd.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>

/* Options from argv. */
typedef struct echo_opts {
  int port;         /* 0 = ephemeral */
  int threads;      /* MHD thread pool size; 1 = polling thread only */
  long reply_bytes; /* size of the JSON answer */
  int connection_limit;
  int handoff;     /* worker threads; 0 = answer on the MHD thread */
  double delay_ms; /* --handoff: sleep before resuming */
  double work_us;  /* --handoff: CPU to burn before resuming */
} echo_opts;

/* Per-request state: the body's size so far; in --handoff mode, whether the
 * connection waits for a worker, whether one has finished with it, and the
 * FIFO link. */
typedef struct echo_req {
  size_t bytes_in;
  int suspended;
  atomic_int done;
  struct MHD_Connection *conn;
  struct echo_req *next;
} echo_req;

/* --handoff: the FIFO of suspended connections and its workers. */
static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  echo_req *head, *tail;
  int stop;
} fifo = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL, 0};
static int handoff;
static struct timespec delay; /* --delay-ms */
static long long work_ns;     /* --work-us */

/* Burn ns nanoseconds of this thread's CPU time: a stand-in for decoding,
 * computing and encoding that uses the CPU as they do.  Thread CPU time,
 * not wall time, so that a preempted worker does not count the time it was
 * not running.  The clock read is a system call (~0.3 us here); it is part
 * of the CPU burnt. */
static void burn(long long ns) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  long long end = (long long)t.tv_sec * 1000000000LL + t.tv_nsec + ns;
  volatile unsigned sink = 0;
  do {
    for (unsigned i = 0; i < 64; i++) sink = sink * 1664525u + 1013904223u;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  } while ((long long)t.tv_sec * 1000000000LL + t.tv_nsec < end);
}

/* Queue rq for a worker.  Returns 0, queueing nothing, once the server is
 * stopping: the workers may have left, and libmicrohttpd aborts if it is
 * stopped with a connection still suspended. */
static int fifo_push(echo_req *rq) {
  pthread_mutex_lock(&fifo.mu);
  if (fifo.stop) {
    pthread_mutex_unlock(&fifo.mu);
    return 0;
  }
  rq->next = NULL;
  if (fifo.tail)
    fifo.tail->next = rq;
  else
    fifo.head = rq;
  fifo.tail = rq;
  pthread_cond_signal(&fifo.cv);
  pthread_mutex_unlock(&fifo.mu);
  return 1;
}

/* Worker: pop, mark done, resume.  Named echo-worker, so that load.sh can
 * tell its CPU time from the MHD threads' (MHD-worker). */
static void *fifo_worker(void *arg) {
  (void)arg;
  prctl(PR_SET_NAME, "echo-worker", 0, 0, 0);
  for (;;) {
    pthread_mutex_lock(&fifo.mu);
    while (!fifo.head && !fifo.stop) pthread_cond_wait(&fifo.cv, &fifo.mu);
    echo_req *rq = fifo.head;
    if (!rq) { /* stopping and empty */
      pthread_mutex_unlock(&fifo.mu);
      return NULL;
    }
    fifo.head = rq->next;
    if (!fifo.head) fifo.tail = NULL;
    pthread_mutex_unlock(&fifo.mu);
    if (delay.tv_sec || delay.tv_nsec) {
      struct timespec left = delay;
      while (nanosleep(&left, &left) != 0 && errno == EINTR) {
      }
    }
    if (work_ns) burn(work_ns);
    atomic_store(&rq->done, 1);
    MHD_resume_connection(rq->conn);
  }
}

static char *reply;
static size_t reply_len;

/* Build the answer: {"output":[0.5,0.5,...]} padded with spaces to exactly
 * n bytes (n >= 16).  Returns NULL when out of memory. */
static char *make_reply(size_t n, size_t *len) {
  static const char head[] = "{\"output\":[";
  char *r = malloc(n + 1);
  if (!r) return NULL;
  size_t p = sizeof head - 1;
  memcpy(r, head, p);
  int first = 1;
  while (p + 6 <= n - 2) { /* room for ",0.5" or "0.5" and the "]}" */
    if (!first) r[p++] = ',';
    memcpy(r + p, "0.5", 3);
    p += 3;
    first = 0;
  }
  r[p++] = ']';
  r[p++] = '}';
  while (p < n) r[p++] = ' ';
  r[p] = '\0';
  *len = p;
  return r;
}

/* Access handler, on an MHD thread.  First call: allocate the context.
 * Calls with data: count it.  Last call: queue the fixed answer. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
                                  const char *url, const char *method,
                                  const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
  echo_req *rq = *con_cls;
  (void)cls;
  (void)url;
  (void)method;
  (void)version;
  (void)upload;
  if (!rq) {
    rq = calloc(1, sizeof *rq);
    if (!rq) return MHD_NO;
    *con_cls = rq;
    return MHD_YES;
  }
  if (*upload_size > 0) {
    rq->bytes_in += *upload_size;
    *upload_size = 0;
    return MHD_YES;
  }
  if (handoff && !atomic_load(&rq->done)) {
    if (rq->suspended) return MHD_YES; /* called again while queued */
    rq->suspended = 1; /* before the push: rq is a worker's after it */
    rq->conn = conn;
    MHD_suspend_connection(conn);
    if (fifo_push(rq)) return MHD_YES;
    MHD_resume_connection(conn); /* stopping: answer on the next call */
    atomic_store(&rq->done, 1);
    return MHD_YES;
  }
  struct MHD_Response *r =
      MHD_create_response_from_buffer(reply_len, reply, MHD_RESPMEM_PERSISTENT);
  if (!r) return MHD_NO;
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
  enum MHD_Result ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
  MHD_destroy_response(r);
  return ret;
}

/* Completion callback, on an MHD thread: free the request context. */
static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  (void)cls;
  (void)conn;
  (void)toe;
  free(*con_cls);
  *con_cls = NULL;
}

static int parse_int(const char *s, long lo, long hi, long *out) {
  char *end;
  if (!s) return -1;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

/* A delay in milliseconds: finite, 0 to 60000. */
static int parse_ms(const char *s, double *out) {
  char *end;
  if (!s) return -1;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !(v >= 0 && v <= 60000)) return -1;
  *out = v;
  return 0;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: echo [--port N] [--threads N] [--reply-bytes N] "
          "[--connection-limit N] [--handoff N] [--delay-ms F] "
          "[--work-us U]\n"
          "  --port N          127.0.0.1 port, 0 = ephemeral (default 0)\n"
          "  --threads N       MHD thread pool size, 1 = polling thread only "
          "(default 2)\n"
          "  --reply-bytes N   size of the JSON answer (default 300)\n"
          "  --connection-limit N  open connections (default 1024)\n"
          "  --handoff N       answer through N worker threads (suspend, "
          "FIFO,\n"
          "                    resume), as attnd does; 0 = on the MHD thread "
          "(default)\n"
          "  --delay-ms F      with --handoff: each worker sleeps F ms "
          "before resuming\n"
          "  --work-us U       with --handoff: each worker burns U us of CPU "
          "before resuming\n"
          "Listens on 127.0.0.1 only; SIGTERM or SIGINT stops it.\n");
}

static int parse_args(int argc, char **argv, echo_opts *o) {
  o->port = 0;
  o->threads = 2;
  o->reply_bytes = 300;
  o->connection_limit = 1024;
  o->handoff = 0;
  o->delay_ms = 0;
  o->work_us = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    long x;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      exit(0);
    } else if (strcmp(a, "--port") == 0 && !parse_int(v, 0, 65535, &x)) {
      o->port = (int)x;
    } else if (strcmp(a, "--threads") == 0 && !parse_int(v, 1, 64, &x)) {
      o->threads = (int)x;
    } else if (strcmp(a, "--reply-bytes") == 0 &&
               !parse_int(v, 16, 64L << 20, &x)) {
      o->reply_bytes = x;
    } else if (strcmp(a, "--connection-limit") == 0 &&
               !parse_int(v, 1, 65536, &x)) {
      o->connection_limit = (int)x;
    } else if (strcmp(a, "--handoff") == 0 && !parse_int(v, 0, 64, &x)) {
      o->handoff = (int)x;
    } else if (strcmp(a, "--delay-ms") == 0 && !parse_ms(v, &o->delay_ms)) {
      /* stored */
    } else if (strcmp(a, "--work-us") == 0 && !parse_ms(v, &o->work_us)) {
      /* stored (the same range check: 0 to 60000) */
    } else {
      fprintf(stderr, "echo: bad option or value: %s %s\n", a, v ? v : "");
      usage(stderr);
      return -1;
    }
    i++;
  }
  if ((o->delay_ms > 0 || o->work_us > 0) && !o->handoff) {
    fprintf(stderr, "echo: --delay-ms and --work-us need --handoff\n");
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  echo_opts o;
  if (parse_args(argc, argv, &o)) return 2;
  reply = make_reply((size_t)o.reply_bytes, &reply_len);
  if (!reply) {
    fprintf(stderr, "echo: out of memory\n");
    return 1;
  }

  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, NULL);

  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)o.port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

  handoff = o.handoff;
  delay.tv_sec = (time_t)(o.delay_ms / 1000);
  delay.tv_nsec = (long)((o.delay_ms - 1000.0 * (double)delay.tv_sec) * 1e6);
  work_ns = (long long)(o.work_us * 1000.0);
  pthread_t workers[64];
  for (int i = 0; i < o.handoff; i++)
    if (pthread_create(&workers[i], NULL, fifo_worker, NULL)) {
      fprintf(stderr, "echo: cannot start worker threads\n");
      return 1;
    }
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL |
                   MHD_USE_ERROR_LOG |
                   (o.handoff ? MHD_ALLOW_SUSPEND_RESUME : 0);
  unsigned pool = o.threads > 1 ? (unsigned)o.threads : 0;
  struct MHD_Daemon *d = MHD_start_daemon(
      flags, 0, NULL, NULL, on_request, NULL, MHD_OPTION_SOCK_ADDR,
      (struct sockaddr *)&sa, MHD_OPTION_THREAD_POOL_SIZE, pool,
      MHD_OPTION_CONNECTION_LIMIT, (unsigned)o.connection_limit,
      MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)60, MHD_OPTION_NOTIFY_COMPLETED,
      on_completed, NULL, MHD_OPTION_END);
  if (!d) {
    fprintf(stderr, "echo: cannot listen on 127.0.0.1:%d\n", o.port);
    free(reply);
    return 1;
  }
  const union MHD_DaemonInfo *info =
      MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
  fprintf(stderr,
          "echo: listening on 127.0.0.1:%u (threads=%d, reply_bytes=%zu, "
          "handoff=%d, delay_ms=%.3f, work_us=%.1f)\n",
          info ? (unsigned)info->port : (unsigned)o.port, o.threads, reply_len,
          o.handoff, o.delay_ms, o.work_us);
  fflush(stderr);

  int sig = 0;
  sigwait(&sigs, &sig);
  /* Workers first: they resume every connection still queued (a request
   * in its --delay-ms when wrk stopped), and libmicrohttpd aborts if it is
   * stopped with one still suspended. */
  pthread_mutex_lock(&fifo.mu);
  fifo.stop = 1;
  pthread_cond_broadcast(&fifo.cv);
  pthread_mutex_unlock(&fifo.mu);
  for (int i = 0; i < o.handoff; i++) pthread_join(workers[i], NULL);
  MHD_stop_daemon(d);
  free(reply);
  return 0;
}
