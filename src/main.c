/* main.c - attnd: build everything from the config, serve, drain, tear down.
 *
 * main is its stages in order (at the end of this file): configure (argv
 * and the environment; --help, --version, --check-config and
 * --healthcheck end there), prepare_process (heap, signals, log, limits,
 * scheduling policy), start (models, queue, workers, server), serve (wait
 * for a signal; the shutdown delay), drain, teardown.
 * The only file that reads argv, the environment and signals.  SIGTERM and
 * SIGINT are blocked in every thread (threads inherit the mask) and taken
 * synchronously here with sigwait, so no handler does real work in a random
 * thread; the threads OpenBLAS started before main only forward them here
 * (forward_to_main).
 * Shutdown: with shutdown_delay_ms, readiness turns 503 first while every
 * request is still served, for that long (load balancers stop sending);
 * a second signal ends that delay early.  Then the drain: new requests are
 * refused; the bodies of those begun before it are read to their end and
 * queued, queued and running requests finish, all within
 * drain_timeout_ms; the answers are sent; then everything is destroyed in
 * reverse order of creation and attnd exits 0.  A signal during the drain is
 * ignored.  If the drain runs out of time attnd writes the sessions no
 * step holds (session_dir) and exits 0 without waiting further. SIGHUP (blocked
 * and forwarded like them) re-reads api_keys_file and admin_api_keys_file and
 * reloads every model file (reload_keys, reload_models; whatever model_control
 * says) while serving; at other times it waits, blocked.  A SIGHUP sent with
 * sigqueue (attnd --reload, src/probe/reload.c) is answered after the reload,
 * to its sender, with a real-time signal (reload); models_poll_s reloads the
 * models when models_dir's files change (poll_models).  ATTND_API_KEY and
 * ATTND_ADMIN_API_KEY are read here, never config keys: --check-config
 * must not print them.
 * systemd (Type=notify): when NOTIFY_SOCKET is set, main tells it
 * READY=1 once attnd listens with its models loaded, RELOADING=1 and
 * READY=1 around each SIGHUP's reload, STOPPING=1 when the shutdown
 * begins (notify(); a failure is logged once, then ignored).
 * `attnd --healthcheck` is a client instead (src/probe/healthcheck.c): it
 * asks a running attnd whether it is ready and exits 0 or 1 (in attnd's
 * container, with PID 1's settings: pid1_config).  `attnd --reload` is a
 * client too (reload_cmd): it finds the running attnd in /proc and asks
 * it to reload.
 * workers = 0 and blas_threads_per_worker = 0 count the CPUs attnd may use
 * (online, affinity mask, cgroup CPU quota: allowed_cpus).
 * Before any of that, when OpenBLAS chose kernels far below the CPU (it is
 * older than the CPU), attnd executes itself again once with
 * OPENBLAS_CORETYPE set (fix_blas_core).
 */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* SCHED_BATCH, sched_getaffinity */
#endif
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attn/config.h"
#include "attn/engine.h"
#include "attn/healthcheck.h"
#include "attn/log.h"
#include "attn/model.h"
#include "attn/notify.h"
#include "attn/reload.h"
#include "attn/queue.h"
#include "attn/server.h"
#include "attn/session.h"
#include "attn_version.h"

extern char **environ;

/* A Kubernetes service link: a Service named attnd gives every pod of its
 * namespace ATTND_PORT=tcp://10.0.0.1:8080, ATTND_SERVICE_HOST and more
 * (unless the pod sets enableServiceLinks: false). */
static int k8s_link_value(const char *v) {
  return strncmp(v, "tcp://", 6) == 0 || strncmp(v, "udp://", 6) == 0 ||
         strncmp(v, "sctp://", 7) == 0;
}

static int k8s_link_name(const char *name, size_t len) {
  /* after ATTND_, or after ATTND_METRICS_ (a Service named attnd-metrics,
   * for metrics_port, links the same way) */
  size_t at = len > 14 && strncmp(name, "ATTND_METRICS_", 14) == 0 ? 14 : 6;
  const char *r = name + at;
  len -= at;
  return (len > 8 && strncmp(r, "SERVICE_", 8) == 0) ||
         (len > 5 && strncmp(r, "PORT_", 5) == 0 && r[5] >= '0' && r[5] <= '9');
}

/* ATTND_PORT, and ATTND_METRICS_PORT (a Service named attnd-metrics):
 * the variables a service link may take. */
static int port_var(const char *name) {
  return strcmp(name, "ATTND_PORT") == 0 ||
         strcmp(name, "ATTND_METRICS_PORT") == 0;
}

/* The environment as the config sees it: a port variable holding a
 * service link is not a port, and is left out (env_warnings says so). */
static const char *env(const char *name) {
  const char *v = getenv(name);
  if (v && port_var(name) && k8s_link_value(v)) return NULL;
  return v;
}

/* Say which ATTND_* variables were not used: typos (with the closest
 * variable attnd reads) and an ATTND_PORT that is a service link.  Service
 * links' other names are not mentioned.  emit gets one message each. */
static void env_warnings(void (*emit)(const char *msg)) {
  char msg[320];
  for (char **e = environ; e && *e; e++) {
    const char *eq = strchr(*e, '=');
    size_t len = eq ? (size_t)(eq - *e) : strlen(*e);
    char name[96];
    if (len < 6 || strncmp(*e, "ATTND_", 6) != 0 || k8s_link_name(*e, len))
      continue;
    if (len >= sizeof name) len = sizeof name - 1;
    memcpy(name, *e, len);
    name[len] = '\0';
    if (eq && port_var(name) && k8s_link_value(eq + 1)) {
      snprintf(msg, sizeof msg,
               "%s=%.64s is a Kubernetes service link (a Service named %s), "
               "not a port: ignored (set enableServiceLinks: false in the "
               "pod, or name the Service otherwise)",
               name, eq + 1,
               strcmp(name, "ATTND_PORT") == 0 ? "attnd" : "attnd-metrics");
      emit(msg);
      continue;
    }
    const char *near = attn_config_env_unknown(name);
    if (!near) continue;
    snprintf(msg, sizeof msg,
             "environment variable %s is not a setting of attnd: ignored%s%s%s",
             name, *near ? " (did you mean " : "", near, *near ? "?)" : "");
    emit(msg);
  }
}

/* Set for the process fix_blas_core() executes: the kernels OpenBLAS had
 * chosen before.  main reads and removes it first thing. */
#define BLAS_BEFORE_VAR "ATTND_BLAS_CORE_BEFORE"

/* OpenBLAS picks its kernels when it loads, from the CPU model, and reads
 * OPENBLAS_CORETYPE only then.  Before 0.3.25 (Debian 12 has 0.3.21) a
 * model newer than the library gets the "Prescott" (SSE3) kernels: sgemm
 * at 18.7 GFLOP/s on one core of an Emerald Rapids Xeon against 110 with
 * OPENBLAS_CORETYPE=SkylakeX.  So when the engine names a better core and
 * the operator has not chosen one, execute attnd again with it.  Returns
 * only if that is not needed or the exec failed (then nothing changed). */
static void fix_blas_core(char **argv) {
  const char *better = attn_engine_blas_better_core();
  if (!better || getenv("OPENBLAS_CORETYPE")) return;
  if (setenv(BLAS_BEFORE_VAR, attn_engine_blas_core(), 1) == 0 &&
      setenv("OPENBLAS_CORETYPE", better, 1) == 0)
    execv("/proc/self/exe", argv);
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv(BLAS_BEFORE_VAR);
}

/* Say what fix_blas_core() did (before: the kernels chosen before it, or
 * ""), or that the kernels are still far below the CPU. */
static void report_blas_core(const char *before) {
  const char *better = attn_engine_blas_better_core();
  if (*before)
    attn_log(ATTN_LOG_INFO,
             "OpenBLAS did not know this CPU and chose its %s kernels: "
             "attnd restarted itself with OPENBLAS_CORETYPE=%s (set "
             "OPENBLAS_CORETYPE to choose yourself)",
             before, attn_engine_blas_core());
  else if (better)
    attn_log(ATTN_LOG_WARN,
             "OpenBLAS runs its %s kernels, far below this CPU: "
             "OPENBLAS_CORETYPE=%s would make its calls several times "
             "faster",
             attn_engine_blas_core(), better);
}

/* File descriptors attnd needs beside its client connections: stdio, the
 * listening socket, each HTTP thread's epoll and wake-up descriptors, model
 * files while they load; with room to spare. */
#define FDS_BESIDE_CONNECTIONS 64

/* Make the open-files limit fit max_connections.  Each connection is a
 * descriptor, and past the limit libmicrohttpd cannot accept (systemd's
 * default soft limit is 1024, the same as max_connections' default).  Like
 * Redis and nginx, raise the soft limit toward the hard one; say so, or
 * warn when even the hard limit is short. */
static void fit_open_files(int max_connections) {
  struct rlimit rl;
  rlim_t need = (rlim_t)max_connections + FDS_BESIDE_CONNECTIONS;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
      rl.rlim_cur >= need)
    return;
  rlim_t was = rl.rlim_cur;
  rlim_t want =
      rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need ? rl.rlim_max : need;
  struct rlimit nr = {want, rl.rlim_max};
  if (want > was && setrlimit(RLIMIT_NOFILE, &nr) == 0) {
    rl.rlim_cur = want;
    attn_log(ATTN_LOG_INFO,
             "raised the open-files limit from %llu to %llu for "
             "max_connections=%d",
             (unsigned long long)was, (unsigned long long)want,
             max_connections);
  }
  if (rl.rlim_cur < need)
    attn_log(ATTN_LOG_WARN,
             "the open-files limit is %llu (hard limit %llu), less than "
             "max_connections=%d + %d: once the descriptors run out, new "
             "connections are not accepted (they wait, unanswered); raise "
             "the limit (ulimit -n, systemd LimitNOFILE=, docker --ulimit "
             "nofile=) or lower max_connections",
             (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max,
             max_connections, FDS_BESIDE_CONNECTIONS);
}

static pthread_t main_thread;

/* The processes that asked for a reload with sigqueue (attnd --reload)
 * whose SIGHUP reached an OpenBLAS thread, which passes it on to main
 * without its sender (forward_to_main): their pids, 0 in a free slot.
 * Written by the handler, taken by serve() (reload) before it reloads;
 * lock-free atomics, so async-signal-safe.  Past HUP_ASKERS waiting at
 * once, an asker is not noted: it sends SIGHUP again (reload.c). */
#define HUP_ASKERS 32
static atomic_int hup_askers[HUP_ASKERS];

/* OpenBLAS starts its threads when the library loads, before main() can
 * block SIGTERM and SIGINT for them.  A signal sent to the process while
 * main is not in sigwait (just before it, or while draining) went to such a
 * thread and, with no handler, killed attnd.  Only those threads run this
 * handler (every other thread blocks both signals): it passes the signal
 * on to main, where it waits for sigwait. */
static void forward_to_main(int sig, siginfo_t *si, void *ctx) {
  int saved = errno;
  (void)ctx;
  for (int i = 0;
       sig == SIGHUP && si && si->si_code == SI_QUEUE && i < HUP_ASKERS; i++) {
    int none = 0;
    if (atomic_compare_exchange_strong(&hup_askers[i], &none, si->si_pid))
      break;
  }
  pthread_kill(main_thread, sig); /* async-signal-safe */
  errno = saved;
}

static void warn_stderr(const char *msg) {
  fprintf(stderr, "attnd: warning: %s\n", msg);
}

static void warn_log(const char *msg) {
  attn_log(ATTN_LOG_WARN, "%s", msg);
}

/* The files of models_dir that hold no model after the start: the ones
 * attn_registry_create passed over (not regular files: a FIFO, a folder),
 * each warned about with the index's reason. */
static void warn_unloaded(attn_registry *models, const char *dir,
                          void (*warn)(const char *msg)) {
  attn_registry_entry *v;
  size_t n;
  attn_diag d = {{0}};
  if (attn_registry_index(models, &v, &n, &d) != ATTN_OK) return;
  for (size_t i = 0; i < n; i++) {
    char msg[ATTN_DIAG_MAX + 1200];
    if (v[i].ready) continue;
    snprintf(msg, sizeof msg,
             "%s: skipped (models/ is models_dir '%s'; "
             "POST /v2/repository/index lists it as '%s')",
             v[i].reason, dir, v[i].name);
    warn(msg);
  }
  free(v);
}

/* The resident models of models_dir.  A models_dir that was configured
 * (file, environment, flag) and is not a directory stops the start: a
 * misspelt path would otherwise go unseen, attnd serving only the built-in
 * models.  The built-in default (config/models, relative to the working
 * directory) may be absent: that is only warned about. */
static attn_status load_models(const attn_config *cfg, attn_registry **out,
                               attn_diag *d, void (*warn)(const char *msg)) {
  attn_status st = attn_config_check_models_dir(cfg, d);
  if (st == ATTN_ENOTFOUND)
    warn(d->msg); /* built-ins only; a load or SIGHUP may find it later */
  else if (st != ATTN_OK)
    return st;
  st = attn_registry_create_named(cfg->models_dir, cfg->model_name, out, d);
  if (st == ATTN_OK) warn_unloaded(*out, cfg->models_dir, warn);
  const char *from, *to;
  if (st == ATTN_OK) attn_registry_renamed(*out, &from, &to);
  if (st == ATTN_OK && from && strcmp(from, to) != 0)
    attn_log(ATTN_LOG_INFO,
             "model_name: the model '%s' of models_dir is served as '%s' "
             "(its metadata, readiness, index and metrics say '%s'; '%s' is "
             "unknown)",
             from, to, to, from);
  return st;
}

/* The CPUs attnd may use (attn_cpus_allowed), what they are made of into
 * why. */
static int allowed_cpus(char *why, size_t why_size) {
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  int affinity = 0;
#ifdef __linux__
  cpu_set_t set; /* 1024 CPUs; more: EINVAL, the count stays unknown */
  if (sched_getaffinity(0, sizeof set, &set) == 0) affinity = CPU_COUNT(&set);
#endif
  return attn_cpus_allowed(online > 0 ? (int)online : 1, affinity,
                           attn_cpu_quota(""), why, why_size);
}

/* SIGALRM during --healthcheck: the probe outlived its time limit in a
 * step poll() does not bound (resolving a host name).  Async-signal-safe. */
static void healthcheck_timeout(int sig) {
  static const char msg[] =
      "attnd: healthcheck: no answer within the time limit (stuck resolving "
      "the host name?)\n";
  (void)sig;
  if (write(STDERR_FILENO, msg, sizeof msg - 1) < 0) _exit(1);
  _exit(1);
}

/* attnd --healthcheck [URL]: exit 0 when url (by default this config's
 * readiness URL on this machine) answers 200, else 1 with one line on
 * stderr saying why.  Docker reserves exit code 2, so every failure is 1. */
static int healthcheck(const attn_config *cfg, const char *url) {
  char def[ATTN_MAX_HOST_LEN + 64];
  attn_diag d = {{0}};
  int status;
  if (!url && *cfg->tls_cert_file) {
    fprintf(stderr,
            "attnd: healthcheck: this attnd serves HTTPS (tls_cert_file is "
            "set) and --healthcheck speaks plain HTTP only: probe it with an "
            "HTTPS client (curl -fsS --cacert CA.pem "
            "https://HOST:%d/v2/health/ready; Kubernetes: an httpGet probe "
            "with scheme: HTTPS%s)\n",
            cfg->port,
            *cfg->tls_client_ca_file
                ? ", which mutual TLS refuses: use curl with --cert and --key"
                : "");
    return 1;
  }
  if (!url) {
    if (attn_healthcheck_url(cfg->host, cfg->port, def, sizeof def, &d) !=
        ATTN_OK) {
      fprintf(stderr, "attnd: healthcheck: %s\n", d.msg);
      return 1;
    }
    url = def;
  }
  signal(SIGALRM, healthcheck_timeout);
  alarm(ATTN_HEALTHCHECK_TIMEOUT_MS / 1000 + 2);
  attn_status st =
      attn_healthcheck(url, ATTN_HEALTHCHECK_TIMEOUT_MS, &status, &d);
  alarm(0);
  if (st != ATTN_OK) {
    fprintf(stderr, "attnd: healthcheck: %s\n", d.msg);
    return 1;
  }
  printf("attnd: healthcheck: %s: ready (HTTP 200)\n", url);
  return 0;
}

/* The environment of the attnd that --reload looks at (its
 * /proc/PID/environ, NUL-separated), for cand_env.  The client is one
 * thread. */
static const char *cand_environ;
static size_t cand_environ_len;

/* getenv over cand_environ, as env() over ours (a service link is not a
 * port). */
static const char *cand_env(const char *name) {
  size_t n = strlen(name);
  const char *end = cand_environ + cand_environ_len;
  for (const char *e = cand_environ; e && e < end; e += strlen(e) + 1)
    if (strncmp(e, name, n) == 0 && e[n] == '=')
      return port_var(name) && k8s_link_value(e + n + 1) ? NULL : e + n + 1;
  return NULL;
}

/* The settings of the attnd of p into *c, as its command line and
 * environment resolve (with the config file they name, a relative path
 * from its working directory: /proc/PID/cwd, entered for the while).
 * Returns 0 when they cannot be known (its environment unreadable,
 * settings that do not resolve here), *c then unchanged. */
static int proc_config(const attn_reload_proc *p, attn_config *c) {
  if (!p->environ) return 0;
  int argc = 0;
  for (size_t i = 0; i < p->cmdline_len; i++) argc += p->cmdline[i] == '\0';
  char **argv = calloc((size_t)argc + 1, sizeof *argv);
  if (!argv) return 0;
  const char *a = p->cmdline;
  for (int i = 0; i < argc; i++, a += strlen(a) + 1) argv[i] = (char *)a;
  attn_cli_action act;
  char cwd[64];
  snprintf(cwd, sizeof cwd, "/proc/%d/cwd", p->pid);
  int here = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int moved = here >= 0 && chdir(cwd) == 0;
  cand_environ = p->environ;
  cand_environ_len = p->environ_len;
  attn_status st = attn_config_from_cli(c, argc, argv, cand_env, &act, NULL);
  cand_environ = NULL;
  if (moved && fchdir(here) != 0) st = ATTN_EIO; /* cannot happen */
  if (here >= 0) close(here);
  free(argv);
  return st == ATTN_OK;
}

/* The port the attnd of p listens on (proc_config), -1 when unknown. */
static int proc_port(const attn_reload_proc *p) {
  attn_config c;
  return proc_config(p, &c) ? c.port : -1;
}

/* The settings of PID 1 into *c when PID 1 is a server of this binary
 * (attnd in its container) whose settings resolve (proc_config); else 0.
 * `docker run IMAGE --port 9000` gives the flag to PID 1 only, not to
 * the HEALTHCHECK's `attnd --healthcheck`, which takes them from here. */
static int pid1_config(attn_config *c) {
  attn_reload_proc *v;
  size_t n;
  int ok = attn_reload_find(1, &v, &n, NULL, NULL) == ATTN_OK && n == 1 &&
           proc_config(&v[0], c);
  attn_reload_procs_free(v, n);
  return ok;
}

/* "pid 12 on port 8080, pid 40 on port ?" into buf. */
static void list_procs(const attn_reload_proc *v, const int *ports, size_t n,
                       char *buf, size_t size) {
  size_t at = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < n && at + 1 < size; i++) {
    int w = ports[i] >= 0 ? snprintf(buf + at, size - at, "%spid %d on port %d",
                                     i ? ", " : "", v[i].pid, ports[i])
                          : snprintf(buf + at, size - at, "%spid %d on port ?",
                                     i ? ", " : "", v[i].pid);
    if (w < 0) break;
    at += (size_t)w;
  }
}

/* The attnd --reload is for, of the n found (ports: theirs): the only one,
 * or the one listening on cfg's port.  Returns its index, or -1 after
 * saying on stderr why none could be chosen. */
static int choose_proc(const attn_config *cfg, const attn_reload_proc *v,
                       const int *ports, size_t n) {
  if (n == 1) return 0;
  int pick = -1, same = 0;
  for (size_t i = 0; i < n; i++)
    if (ports[i] == cfg->port) pick = (int)i, same++;
  if (same == 1) return pick;
  char list[600];
  list_procs(v, ports, n, list, sizeof list);
  fprintf(stderr,
          "attnd: reload: %zu attnd of this binary are running (%s), and %s "
          "on port %d (the port of these settings): give the one to reload "
          "by its port (--port PORT, ATTND_PORT) or its pid (--reload=PID)\n",
          n, list, same ? "several listen" : "none listens", cfg->port);
  return -1;
}

/* No attnd of this binary was found (pid: the one asked for, or 0): say
 * why on stderr. */
static void none_found(int pid, const attn_reload_denied *den) {
  char self[512];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  self[len > 0 ? len : 0] = '\0';
  if (den->n) {
    fprintf(stderr,
            "attnd: reload: attnd (pid %d) runs as uid %u: permission denied "
            "to look at it from uid %u (run --reload as uid %u, or as "
            "root)\n",
            den->pid[0], den->uid[0], (unsigned)geteuid(), den->uid[0]);
  } else if (pid > 0) {
    fprintf(stderr,
            "attnd: reload: process %d is not a running attnd of this binary "
            "(%s)\n",
            pid, self);
  } else {
    fprintf(stderr,
            "attnd: reload: no running attnd found (no other process runs "
            "this binary, %s)\n",
            self);
  }
}

/* attnd --reload[=PID]: find the running attnd (the one of pid, when
 * pid > 0), make it reload, and wait for it to say it has.  Exit status 0
 * when it reloaded everything; else 1 with one line on stderr. */
static int reload_cmd(const attn_config *cfg, int pid) {
  attn_reload_proc *v;
  attn_reload_denied den;
  attn_diag d = {{0}};
  size_t n;
  int ports[ATTN_RELOAD_FOUND_MAX], failures = 0;
  if (attn_reload_find(pid, &v, &n, &den, &d) != ATTN_OK) {
    fprintf(stderr, "attnd: reload: %s\n", d.msg);
    return 1;
  }
  if (n == 0) {
    none_found(pid, &den);
    attn_reload_procs_free(v, n);
    return 1;
  }
  for (size_t i = 0; i < n; i++) ports[i] = proc_port(&v[i]);
  int i = choose_proc(cfg, v, ports, n);
  attn_status st = ATTN_EINVAL;
  if (i >= 0 && !v[i].takes_hup)
    fprintf(stderr,
            "attnd: reload: attnd (pid %d) is still starting (it does not "
            "take SIGHUP yet, which would end it): try again in a moment\n",
            v[i].pid);
  else if (i >= 0 && (st = attn_reload_signal(&v[i], ATTN_RELOAD_TIMEOUT_MS,
                                              &failures, &d)) != ATTN_OK)
    fprintf(stderr, "attnd: reload: %s\n", d.msg);
  else if (i >= 0 && failures)
    fprintf(stderr,
            "attnd: reload: attnd (pid %d) reloaded, but %d of its files "
            "failed and kept what was in force: its log says which "
            "(\"received SIGHUP: ...\")\n",
            v[i].pid, failures);
  else if (i >= 0)
    printf(
        "attnd: reload: attnd (pid %d, port %d) reloaded its keys and "
        "models\n",
        v[i].pid, ports[i]);
  attn_reload_procs_free(v, n);
  return i >= 0 && st == ATTN_OK && !failures ? 0 : 1;
}

#ifdef SCHED_BATCH
/* The name of a kernel scheduling policy, as the start-up line shows it. */
static const char *policy_name(int policy) {
  switch (policy) {
    case SCHED_OTHER:
      return "other";
    case SCHED_BATCH:
      return "batch";
    case SCHED_IDLE:
      return "idle";
    case SCHED_FIFO:
      return "fifo";
    case SCHED_RR:
      return "rr";
    default:
      return "unknown";
  }
}
#endif

/* Give this thread, and so every thread started after it (clone copies
 * the policy; glibc's pthread_create inherits it by default), the policy of
 * cpu_scheduling_policy.  Under SCHED_BATCH a thread that wakes up waits
 * for the running one's slice instead of preempting it: the HTTP thread
 * that queues a request, and the worker that resumes its connection, go on
 * with their next request instead of switching at once: fewer than half
 * the involuntary context switches, and more small requests per second
 * (docs/performance.md, "Design choices": the scheduling policy).  Only the
 * default policy is replaced: a policy the operator started attnd with (chrt,
 * systemd's CPUSchedulingPolicy=) is kept.  Not fatal when refused: attnd then
 * runs on.  Returns the name of the policy in effect, for the start-up line. */
static const char *set_sched_policy(attn_sched_policy p) {
#ifdef SCHED_BATCH
  int cur = sched_getscheduler(0);
  if (p == ATTN_SCHED_BATCH && cur == SCHED_OTHER) {
    struct sched_param sp = {.sched_priority = 0};
    if (sched_setscheduler(0, SCHED_BATCH, &sp) == 0) return "batch";
    attn_log(ATTN_LOG_WARN,
             "cpu_scheduling_policy=batch refused (%s); running with the "
             "default policy",
             strerror(errno));
  } else if (p == ATTN_SCHED_BATCH && cur != SCHED_BATCH) {
    attn_log(ATTN_LOG_INFO,
             "cpu_scheduling_policy=batch: keeping the policy attnd was "
             "started with (%s)",
             policy_name(cur));
  }
  return policy_name(cur);
#else
  if (p == ATTN_SCHED_BATCH)
    attn_log(ATTN_LOG_WARN,
             "cpu_scheduling_policy=batch is Linux only; running with the "
             "default policy");
  return "other";
#endif
}

/* Tell systemd (sd_notify(3)'s protocol) msg, when it asked to be told
 * (NOTIFY_SOCKET is set).  The first failure is logged; later ones are
 * not (the socket will not come back).  Main thread. */
static void notify(const char *msg) {
  static int failed;
  const char *sock = getenv("NOTIFY_SOCKET");
  attn_diag d = {{0}};
  if (!sock || !*sock || failed) return;
  if (attn_notify_send(sock, msg, &d) != ATTN_OK) {
    failed = 1;
    attn_log(ATTN_LOG_WARN, "systemd notification: %s (not sent again)", d.msg);
  }
}

/* READY=1 with a STATUS= line naming where attnd serves. */
static void notify_ready(const attn_config *cfg, const attn_server *server) {
  char msg[400];
  snprintf(msg, sizeof msg, "READY=1\nSTATUS=serving on %s:%d", cfg->host,
           attn_server_port(server));
  notify(msg);
}

/* "SIGTERM" or "SIGINT", as the log names it. */
static const char *sig_name(int sig) {
  return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "a signal";
}

/* The first phase of a shutdown (shutdown_delay_ms): readiness 503, every
 * request still served, for delay_ms or until a second signal of sigs,
 * which ends the delay early (someone wants attnd gone now; the drain
 * after it is still clean).  sig is the signal that started it. */
static void shutdown_delay(attn_server *server, const sigset_t *sigs, int sig,
                           int64_t delay_ms) {
  attn_server_set_unready(server);
  notify("STOPPING=1\nSTATUS=shutdown delay: readiness 503, still serving");
  attn_log(ATTN_LOG_INFO,
           "received %s: readiness is 503, still serving every request for "
           "shutdown_delay_ms=%lld ms, then the drain (a second signal ends "
           "the delay now)",
           sig_name(sig), (long long)delay_ms);
  uint64_t end = attn_now_ns() + (uint64_t)delay_ms * 1000000u;
  for (;;) {
    uint64_t now = attn_now_ns();
    if (now >= end) {
      attn_log(ATTN_LOG_INFO, "shutdown delay over after %lld ms",
               (long long)delay_ms);
      return;
    }
    uint64_t left = end - now;
    struct timespec ts = {(time_t)(left / 1000000000u),
                          (long)(left % 1000000000u)};
    int got = sigtimedwait(sigs, NULL, &ts);
    if (got > 0) {
      attn_log(ATTN_LOG_INFO,
               "received %s during the shutdown delay: ending it %.0f ms "
               "early",
               sig_name(got), (double)(end - attn_now_ns()) / 1e6);
      return;
    }
    /* EAGAIN: the time is up (checked above); EINTR: wait again */
  }
}

/* ---- main's stages: set-up, serve, drain -------------------------------- */

/* Everything main builds, torn down in reverse order by teardown(). */
typedef struct attnd {
  attn_registry *models;
  attn_queue *queue;
  attn_pool *pool;
  attn_session_store *sessions;
  attn_server *server;
} attnd;

/* Whether BF16 kernels are available, for --version and the start-up
 * line: "avx512bf16 (AVX512-BF16)" or "portable (no AVX512-BF16 on this
 * CPU: same results, no speed-up)". */
static const char *bf16_kernels(void) {
  return strcmp(attn_engine_bf16_kernel_name(), "avx512bf16") == 0
             ? "avx512bf16 (AVX512-BF16)"
             : "portable (no AVX512-BF16 on this CPU: same results, no "
               "speed-up)";
}

/* Read the configuration from argv and the environment into *cfg, and
 * carry out a command other than serving (--help, --version,
 * --check-config, --healthcheck).  Returns 1 with *exit_code set when
 * main is to exit now, 0 when it is to serve. */
static int configure(int argc, char **argv, attn_config *cfg, int *exit_code) {
  attn_cli_action action;
  attn_diag d = {{0}};
  const char *probe_url = NULL;
  bool probe = attn_config_healthcheck_arg(argc, argv, &probe_url);
  int reload_pid = attn_config_reload_arg(argc, argv);
  attn_config_defaults(cfg);
  if (attn_config_from_cli(cfg, argc, argv, env, &action, &d) != ATTN_OK) {
    fprintf(stderr, "attnd: %s%s\n",
            probe             ? "healthcheck: "
            : reload_pid >= 0 ? "reload: "
                              : "",
            d.msg);
    *exit_code = probe || reload_pid >= 0 ? 1 : 2;
    return 1;
  }
  switch (action) {
    case ATTN_CLI_HELP:
      attn_config_usage(stdout, "attnd");
      *exit_code = 0;
      return 1;
    case ATTN_CLI_VERSION:
      printf(
          "attnd %s (engine kernel: %s, OpenBLAS kernels: %s, bf16 "
          "kernel: %s)\n",
          ATTN_VERSION, attn_engine_kernel_name(), attn_engine_blas_core(),
          bf16_kernels());
      *exit_code = 0;
      return 1;
    case ATTN_CLI_CHECK: {
      /* the models too: a model that would not load stops the start */
      attn_registry *models = NULL;
      env_warnings(warn_stderr);
      if (load_models(cfg, &models, &d, warn_stderr) != ATTN_OK) {
        fprintf(stderr, "attnd: models: %s\n", d.msg);
        *exit_code = 1;
        return 1;
      }
      attn_registry_destroy(models);
      *exit_code = attn_config_write_json(cfg, stdout) == ATTN_OK ? 0 : 1;
      return 1;
    }
    case ATTN_CLI_HEALTHCHECK: {
      /* `attnd --healthcheck` alone, in attnd's container: the settings
       * of the server, PID 1, flags included */
      attn_config pid1;
      int own = probe_url || argc > 2 || !pid1_config(&pid1);
      *exit_code = healthcheck(own ? cfg : &pid1, probe_url);
      return 1;
    }
    case ATTN_CLI_RELOAD:
      *exit_code = reload_cmd(cfg, reload_pid > 0 ? reload_pid : 0);
      return 1;
    case ATTN_CLI_RUN:
      break;
  }
  return 0;
}

/* What prepare_process keeps at the top of a heap, and lets pile up there
 * before glibc gives the top back (trim_arena lowers both for a moment). */
#define HEAP_TOP_PAD (64 << 20)
#define HEAP_TRIM_THRESHOLD (256 << 20)

/* The process around the server, before any thread starts: the heap's
 * habits, the signals (*sigs: the ones sigwait takes), the log, the
 * open-files limit, the scheduling policy (its name is returned) and
 * OpenBLAS's own threads (none: the engine owns parallelism). */
static const char *prepare_process(const attn_config *cfg,
                                   const char *blas_before, sigset_t *sigs) {
  /* Keep multi-megabyte request buffers in the heap between requests:
   * otherwise glibc maps and unmaps each one and every large request pays
   * thousands of page faults.  The top pad does the same for the worker
   * threads' own arenas, which otherwise give the top of their heap back
   * after each request and fault it in again (docs/performance.md,
   * "Design choices", has both measurements).  The cost: memory freed after a
   * peak stays mapped while requests keep coming (idle_trim and trim_arena give
   * it back after an idle second), and an arena's heap grows in steps of up to
   * 64 MB of address space (pages count towards RSS only once touched). */
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, HEAP_TRIM_THRESHOLD);
  mallopt(M_TOP_PAD, HEAP_TOP_PAD);

  signal(SIGPIPE, SIG_IGN);
  sigemptyset(sigs);
  sigaddset(sigs, SIGTERM);
  sigaddset(sigs, SIGINT);
  sigset_t hup = *sigs;
  sigaddset(&hup, SIGHUP); /* taken in serve(); blocked everywhere */
  pthread_sigmask(SIG_BLOCK, &hup, NULL);
  main_thread = pthread_self();
  struct sigaction sa = {.sa_sigaction = forward_to_main,
                         .sa_flags = SA_RESTART | SA_SIGINFO};
  sigfillset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);

  attn_log_init(cfg->log_level, cfg->log_format);
  attn_log_set_priority_prefix(
      cfg->log_priority_prefix == ATTN_LOG_PREFIX_ALWAYS ||
      (cfg->log_priority_prefix == ATTN_LOG_PREFIX_AUTO &&
       attn_log_stream_is_journal(getenv("JOURNAL_STREAM"), STDERR_FILENO)));
  report_blas_core(blas_before);
  env_warnings(warn_log);
  fit_open_files(cfg->max_connections);
  /* before any thread starts */
  const char *policy = set_sched_policy(cfg->cpu_scheduling_policy);
  attn_engine_set_blas_threads(1); /* the engine owns parallelism */
  return policy;
}

/* One line on how clients get in: keys, TLS, CORS (never a key). */
static void log_access_settings(const attn_config *cfg, attn_server *server) {
  size_t keys = attn_server_key_count(server);
  size_t admin = attn_server_admin_key_count(server);
  const char *env = getenv("ATTND_API_KEY");
  if (!keys && !admin && !*cfg->tls_cert_file && !*cfg->cors_allow_origins)
    return;
  attn_log(ATTN_LOG_INFO,
           "access: %zu API keys%s%s, %zu admin keys, %s%s, CORS %s%s", keys,
           keys    ? " (from "
           : admin ? ""
                   : " (every route open)",
           keys ? (*cfg->api_keys_file && env && *env
                       ? "api_keys_file and ATTND_API_KEY)"
                   : *cfg->api_keys_file ? "api_keys_file)"
                                         : "ATTND_API_KEY)")
                : "",
           admin, *cfg->tls_cert_file ? "HTTPS" : "plain HTTP",
           *cfg->tls_client_ca_file ? " with client certificates" : "",
           *cfg->cors_allow_origins ? "for " : "off", cfg->cors_allow_origins);
}

/* Workers give their malloc arena back after this long without a job. */
#define WORKER_IDLE_TRIM_MS 1000

/* A worker's pool on_idle, once it has waited WORKER_IDLE_TRIM_MS for a
 * job: give back the free top of the malloc arena it allocates from.
 * malloc_trim (idle_trim) cannot: glibc trims only the main arena's top;
 * of a thread's arena (a heap of at most 64 MB) it only returns the whole
 * free pages of its free lists, and the top, where a request's buffers
 * return when freed, stays mapped.  glibc shrinks a thread's heap only
 * when a free of 64 KiB or more leaves more than M_TRIM_THRESHOLD at its
 * top, and then down to M_TOP_PAD, which prepare_process sets to 256 and
 * 64 MB: never (glibc 2.36, heap_trim).  So with both at 0, the worker
 * frees 128 KiB of its own arena, which shrinks that arena's last heap to
 * what is in use (and unmaps the empty heaps behind it), then sets them
 * back (docs/performance.md, "Design choices": RSS after a burst, before
 * and after this).  mallopt is thread-safe;
 * trim_mu keeps two workers from restoring the settings under each other.
 * While they are lowered (microseconds), a large free on another thread
 * gives its arena's top back too: it may fault those pages in again,
 * nothing worse.  The answers a worker made were freed into its arena by
 * the HTTP threads as they were sent, before the idle second ended.  Not
 * reached: the HTTP threads' own arenas, where bodies are received (one
 * heap, at most 64 MB, per HTTP thread). */
static void trim_arena(int worker, void *user) {
  static pthread_mutex_t trim_mu = PTHREAD_MUTEX_INITIALIZER;
  (void)worker;
  (void)user;
  pthread_mutex_lock(&trim_mu);
  mallopt(M_TOP_PAD, 0);
  mallopt(M_TRIM_THRESHOLD, 0);
  void *volatile probe = malloc(128 << 10); /* volatile: not elided */
  free(probe);
  mallopt(M_TRIM_THRESHOLD, HEAP_TRIM_THRESHOLD);
  mallopt(M_TOP_PAD, HEAP_TOP_PAD);
  pthread_mutex_unlock(&trim_mu);
}

/* Set-up: the models, the queue, the workers and the server, into *a;
 * logs the start-up line.  On error logs why and returns 0 (what was
 * built is in *a, for teardown). */
/* The sessions' store (session.h): kv_cache_bytes, or when that is 0 a
 * quarter of memory (the memory attnd may use), at least 64 MiB. */
static int make_sessions(const attn_config *cfg, uint64_t memory,
                         attn_session_store **out) {
  attn_diag d = {{0}};
  uint64_t bytes =
      cfg->kv_cache_bytes > 0 ? (uint64_t)cfg->kv_cache_bytes : memory / 4;
  if (!cfg->kv_cache_bytes && bytes < (64u << 20)) bytes = 64u << 20;
  attn_session_limits lim = {
      .cache_bytes = (size_t)bytes,
      .max_sessions = cfg->max_sessions,
      .idle_timeout_ns = (uint64_t)cfg->session_idle_timeout_s * 1000000000u,
      .max_tokens = cfg->max_seq_len,
      .max_weights_elements = cfg->max_weights_elements};
  if (attn_session_store_create(&lim, out, &d) != ATTN_OK) {
    attn_log(ATTN_LOG_ERROR, "sessions: %s", d.msg);
    return 0;
  }
  attn_log(ATTN_LOG_INFO,
           "sessions: kv_cache_bytes=%llu%s, max_sessions=%lld, "
           "session_idle_timeout_s=%lld",
           (unsigned long long)bytes, cfg->kv_cache_bytes ? "" : " (auto)",
           (long long)cfg->max_sessions,
           (long long)cfg->session_idle_timeout_s);
  return 1;
}

static int start(const attn_config *cfg, const char *policy, attnd *a) {
  attn_diag d = {{0}};
  if (load_models(cfg, &a->models, &d, warn_log) != ATTN_OK) {
    attn_log(ATTN_LOG_ERROR, "models: %s", d.msg);
    return 0;
  }
  if (attn_queue_create((size_t)cfg->queue_capacity, &a->queue) != ATTN_OK) {
    attn_log(ATTN_LOG_ERROR, "cannot create the queue");
    return 0;
  }
  char why[160];
  int cpus = allowed_cpus(why, sizeof why);
  int workers = cfg->workers;
  if (!workers) {
    workers = cpus < ATTN_MAX_WORKERS ? cpus : ATTN_MAX_WORKERS;
    attn_log(ATTN_LOG_INFO, "workers=%d (auto: %s)", workers, why);
  }
  attn_pool_opts po;
  attn_pool_default_opts(&po);
  po.workers = workers;
  po.queue = a->queue;
  po.on_idle = trim_arena;
  po.idle_ms = WORKER_IDLE_TRIM_MS;
  if (attn_pool_create(&po, &a->pool) != ATTN_OK) {
    attn_log(ATTN_LOG_ERROR, "cannot start %d workers", workers);
    return 0;
  }
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  /* only the auto budgets need the memory limit (cgroup files are read) */
  uint64_t memory =
      cfg->max_total_body_bytes && cfg->kv_cache_bytes
          ? 0
          : attn_memory_limit("", pages > 0 && page > 0
                                      ? (uint64_t)pages * (uint64_t)page
                                      : 0);
  int64_t budget = attn_config_body_budget(cfg, memory);
  if (!make_sessions(cfg, memory, &a->sessions)) return 0;
  if (*cfg->session_dir) attn_sessions_load(a->sessions, cfg->session_dir);
  attn_server_deps deps = {cfg,         a->models,
                           a->queue,    a->pool,
                           budget,      cpus,
                           workers,     getenv("ATTND_API_KEY"),
                           a->sessions, getenv("ATTND_ADMIN_API_KEY")};
  if (attn_server_create(&deps, &a->server, &d) != ATTN_OK) {
    attn_log(ATTN_LOG_ERROR, "%s", d.msg);
    return 0;
  }
  if (attn_server_metrics_port(a->server))
    attn_log(ATTN_LOG_INFO,
             "metrics on %s:%d (GET /metrics, /v2/health/live and "
             "/v2/health/ready only)",
             cfg->host, attn_server_metrics_port(a->server));
  attn_log(ATTN_LOG_INFO,
           "attnd %s listening on %s:%d (workers=%d%s, cpus=%d, "
           "blas_threads_per_worker=%d, http_threads=%d, queue_capacity=%d, "
           "cpu_scheduling_policy=%s, max_total_body_bytes=%lld%s, "
           "models=%zu, bf16=%s, kernel=%s, blas=%s)",
           ATTN_VERSION, cfg->host, attn_server_port(a->server), workers,
           cfg->workers ? "" : " (auto)", cpus, cfg->blas_threads_per_worker,
           cfg->http_threads, cfg->queue_capacity, policy, (long long)budget,
           cfg->max_total_body_bytes ? "" : " (auto)",
           attn_registry_count(a->models), bf16_kernels(),
           attn_engine_kernel_name(), attn_engine_blas_core());
  log_access_settings(cfg, a->server);
  return 1;
}

/* Sessions unused for session_idle_timeout_s are freed (looked at once a
 * second, from serve; the store's sweep costs the sessions that expire). */
static void expire_sessions(attn_session_store *sessions) {
  size_t n = sessions ? attn_session_sweep(sessions, attn_now_ns()) : 0;
  if (n)
    attn_log(ATTN_LOG_INFO, "%zu session%s expired (session_idle_timeout_s)", n,
             n == 1 ? "" : "s");
}

/* Free heap memory held past this, once idle, is given back. */
#define TRIM_ABOVE_BYTES (16u << 20)

/* Give freed heap memory back to the system once attnd has been idle for a
 * second (looked at once a second, from serve).  prepare_process keeps
 * freed memory mapped for speed (M_TRIM_THRESHOLD, M_TOP_PAD, the mmap
 * threshold), so after a burst of large requests, or a gzip bomb refused
 * with 413, RSS stayed at its peak though every block was freed.  When no job
 * is queued or running and none was queued in the last second, and the arenas
 * hold more than TRIM_ABOVE_BYTES free, malloc_trim(0) returns the main arena's
 * free top and the whole free pages inside every arena (the free tops of the
 * workers' arenas are trim_arena's).  A busy server never trims, so the hot
 * path is as before; the first large request after an idle second faults its
 * pages in again. */
static void idle_trim(const attn_pool *pool, uint64_t *last_pushed) {
  attn_queue_stats st;
  attn_pool_get_stats(pool, &st);
  int idle =
      st.pushed == *last_pushed && st.depth == 0 && attn_pool_busy(pool) == 0;
  *last_pushed = st.pushed;
  if (!idle) return;
  struct mallinfo2 mi = mallinfo2();
  if (mi.fordblks > TRIM_ABOVE_BYTES) malloc_trim(0);
}

/* SIGHUP: the API keys again from api_keys_file, the admin keys from
 * admin_api_keys_file.  Returns how many of the two files failed (their
 * keys in force stay). */
static int reload_keys(attn_server *server) {
  int failed = 0;
  attn_diag d = {{0}};
  size_t n;
  attn_status st = attn_server_reload_keys(server, &n, &d);
  if (st == ATTN_OK)
    attn_log(ATTN_LOG_INFO, "received SIGHUP: %zu API keys in force", n);
  else if (st == ATTN_ENOTFOUND)
    attn_log(ATTN_LOG_INFO, "received SIGHUP: %s", d.msg);
  else {
    attn_log(ATTN_LOG_ERROR, "received SIGHUP: %s; the keys in force stay",
             d.msg);
    failed++;
  }
  d = (attn_diag){{0}};
  st = attn_server_reload_admin_keys(server, &n, &d);
  if (st == ATTN_OK)
    attn_log(ATTN_LOG_INFO, "received SIGHUP: %zu admin keys in force", n);
  else if (st != ATTN_ENOTFOUND) {
    attn_log(ATTN_LOG_ERROR,
             "received SIGHUP: %s; the admin keys in force stay", d.msg);
    failed++;
  }
  return failed;
}

/* arg: the int count of models that failed. */
static void report_model(void *arg, const char *name, const char *path,
                         attn_status s, const char *msg) {
  if (s != ATTN_OK) ++*(int *)arg;
  if (s == ATTN_OK)
    attn_log(ATTN_LOG_INFO, "received SIGHUP: model '%s' %s (%s)", name,
             msg[0] ? msg : "loaded", path);
  else
    attn_log(ATTN_LOG_ERROR,
             "received SIGHUP: %s; model '%s' keeps what it served", msg,
             name[0] ? name : "?");
}

/* SIGHUP: every model file of models_dir loaded again (attn_registry_
 * reload: a file that fails leaves its model serving the old weights;
 * requests in flight finish on what they started with).  Returns how many
 * failed (models_dir unreadable counts one). */
static int reload_models(attn_registry *models) {
  attn_diag d = {{0}};
  int failed = 0;
  attn_status st = attn_registry_reload(models, report_model, &failed, &d);
  if (st != ATTN_OK) {
    attn_log(ATTN_LOG_ERROR, "received SIGHUP: models: %s", d.msg);
    failed++;
  }
  return failed;
}

/* SIGHUP, as si says it came: the keys and the models reloaded; then
 * every process that asked with sigqueue (attnd --reload) before the
 * reload began, the sender of si and those forward_to_main noted, is told
 * how many parts failed (attn_reload_confirm). */
static void reload(attn_server *server, attn_registry *models,
                   const siginfo_t *si) {
  int askers[HUP_ASKERS + 1], n = 0;
  if (si->si_code == SI_QUEUE && si->si_pid > 0) askers[n++] = si->si_pid;
  for (int i = 0; i < HUP_ASKERS; i++) {
    int pid = atomic_exchange(&hup_askers[i], 0);
    if (pid > 0) askers[n++] = pid;
  }
  int failed = reload_keys(server) + reload_models(models);
  for (int i = 0; i < n; i++) {
    if (attn_reload_confirm(askers[i], failed) == 0)
      attn_log(ATTN_LOG_INFO,
               "received SIGHUP: reload done (%d failed), confirmed to pid "
               "%d (attnd --reload)",
               failed, askers[i]);
    else
      attn_log(ATTN_LOG_WARN,
               "received SIGHUP: reload done (%d failed), but pid %d, which "
               "asked, cannot be told: %s",
               failed, askers[i], strerror(errno));
  }
}

/* models_poll_s: where the polling of models_dir stands. */
typedef struct models_poll {
  uint64_t stamp;   /* of the files the models were last loaded from */
  uint64_t seen;    /* at the last look, when it differed from stamp */
  uint64_t next_ns; /* when to look again */
} models_poll;

/* models_poll_s, looked at once a second from serve: every poll_s
 * seconds the stamp of models_dir (attn_registry_dir_stamp) is compared
 * with that of the last load; a change is reloaded (reload_models, as
 * SIGHUP does) once it has held still for one period (a file still being
 * copied is not loaded half-written), as Triton's poll mode. */
static void poll_models(attn_registry *models, int poll_s, models_poll *p) {
  uint64_t now = attn_now_ns();
  if (poll_s <= 0 || now < p->next_ns) return;
  p->next_ns = now + (uint64_t)poll_s * 1000000000u;
  uint64_t stamp = attn_registry_dir_stamp(models);
  if (stamp == p->stamp) {
    p->seen = 0;
  } else if (stamp != p->seen) {
    p->seen = stamp; /* changed: wait for it to hold still */
  } else {
    attn_log(ATTN_LOG_INFO,
             "models_poll_s: models_dir changed; reloading every model file");
    int failed = reload_models(models);
    p->stamp = stamp;
    p->seen = 0;
    attn_log(ATTN_LOG_INFO, "models_poll_s: reload done (%d failed)", failed);
  }
}

/* Serve: the server's threads do the work; main waits for SIGTERM or
 * SIGINT, re-reading the keys and the models on each SIGHUP, giving
 * memory back once a second when idle (idle_trim) and writing the counts
 * of repeated log lines whose time has come (attn_log_flush_repeats),
 * then runs the shutdown delay (when there is one). */
static void serve(attn_server *server, attn_registry *models,
                  const attn_pool *pool, attn_session_store *sessions,
                  const attn_config *cfg, const sigset_t *sigs) {
  int sig = 0;
  uint64_t last_pushed = UINT64_MAX;
  models_poll poll = {
      attn_registry_dir_stamp(models), 0,
      attn_now_ns() + (uint64_t)cfg->models_poll_s * 1000000000u};
  sigset_t with_hup = *sigs;
  sigaddset(&with_hup, SIGHUP);
  for (;;) {
    struct timespec tick = {1, 0};
    siginfo_t si;
    sig = sigtimedwait(&with_hup, &si, &tick);
    if (sig == SIGHUP) {
      char msg[160];
      snprintf(msg, sizeof msg,
               "RELOADING=1\nMONOTONIC_USEC=%llu\nSTATUS=reloading keys "
               "and models (SIGHUP)",
               (unsigned long long)(attn_now_ns() / 1000u));
      notify(msg);
      /* what this reload reads: the polling starts from it */
      uint64_t stamp = cfg->models_poll_s ? attn_registry_dir_stamp(models) : 0;
      reload(server, models, &si);
      poll.stamp = stamp;
      poll.seen = 0;
      notify_ready(cfg, server);
    } else if (sig > 0)
      break;
    else if (errno == EAGAIN) {
      expire_sessions(sessions);
      poll_models(models, cfg->models_poll_s, &poll);
      idle_trim(pool, &last_pushed);
      attn_log_flush_repeats(0);
    }
  }
  if (cfg->shutdown_delay_ms > 0) {
    shutdown_delay(server, sigs, sig, cfg->shutdown_delay_ms);
    attn_log(ATTN_LOG_INFO, "draining (up to %lld ms)",
             (long long)cfg->drain_timeout_ms);
  } else {
    attn_log(ATTN_LOG_INFO, "received %s: draining (up to %lld ms)",
             sig_name(sig), (long long)cfg->drain_timeout_ms);
  }
}

/* Drain: refuse new requests, read the bodies of those begun before the
 * signal to their end and queue them, let the queued and running ones
 * finish and their answers go out, within drain_timeout_ms.  A body
 * still arriving when it passes is cut at exit (teardown closes its
 * connection: 499, "closed":"shutdown").  Past it with work queued or
 * running, attnd writes the sessions no step holds (session_dir) and
 * exits 0 here and now (_exit: the workers still hold what teardown
 * would free); otherwise returns, for teardown. */
static void drain(const attnd *a, const attn_config *cfg) {
  uint64_t t0 = attn_now_ns();
  /* after a shutdown delay, which sent STOPPING=1 already: the status */
  notify(cfg->shutdown_delay_ms > 0 ? "STATUS=draining"
                                    : "STOPPING=1\nSTATUS=draining");
  int arriving = 0;
  attn_server_begin_drain(a->server);
  if (attn_server_wait_arrivals(a->server, cfg->drain_timeout_ms, &arriving) !=
      ATTN_OK)
    attn_log(ATTN_LOG_WARN,
             "drain_timeout_ms=%lld passed with %d request bod%s still "
             "arriving; cutting %s at exit (access line status 499, "
             "\"closed\":\"shutdown\")",
             (long long)cfg->drain_timeout_ms, arriving,
             arriving == 1 ? "y" : "ies", arriving == 1 ? "it" : "them");
  int64_t spent = (int64_t)((attn_now_ns() - t0) / 1000000u);
  /* at least a moment for workers to see an empty queue closed */
  int64_t rest = cfg->drain_timeout_ms - spent;
  if (attn_pool_drain(a->pool, rest > 50 ? rest : 50) != ATTN_OK) {
    attn_queue_stats st;
    attn_pool_get_stats(a->pool, &st);
    int cut = attn_server_abandon(a->server);
    attn_log(ATTN_LOG_WARN,
             "drain_timeout_ms=%lld passed with requests still running; "
             "exiting without them (%d cut off: %llu queued, %llu running; "
             "each has an access line with \"closed\":\"shutdown\")",
             (long long)cfg->drain_timeout_ms, cut,
             (unsigned long long)st.depth, (unsigned long long)st.running);
    /* the sessions no step holds, so that a restart loses only those */
    if (*cfg->session_dir) attn_sessions_save(a->sessions, cfg->session_dir, 1);
    _exit(0);
  }
  int64_t left =
      cfg->drain_timeout_ms - (int64_t)((attn_now_ns() - t0) / 1000000u);
  if (attn_server_wait_idle(a->server, left > 1000 ? left : 1000) != ATTN_OK)
    attn_log(ATTN_LOG_WARN, "some responses were still being sent at exit");
  attn_log(ATTN_LOG_INFO, "drained in %.0f ms; bye",
           (double)(attn_now_ns() - t0) / 1e6);
}

/* Destroy what start() built, in reverse order; NULLs are skipped. */
static void teardown(attnd *a) {
  attn_server_destroy(a->server);
  attn_log_flush_repeats(1); /* what was left unsaid */
  attn_pool_destroy(a->pool);
  attn_queue_destroy(a->queue);
  attn_session_store_destroy(a->sessions);
  attn_registry_destroy(a->models);
}

int main(int argc, char **argv) {
  attn_config cfg;
  sigset_t sigs;
  char blas_before[32] = "";
  int rc;

  const char *b = getenv(BLAS_BEFORE_VAR);
  if (b) {
    snprintf(blas_before, sizeof blas_before, "%s", b);
    unsetenv(BLAS_BEFORE_VAR);
  }
  if (configure(argc, argv, &cfg, &rc)) return rc;
  if (!*blas_before) fix_blas_core(argv);
  const char *policy = prepare_process(&cfg, blas_before, &sigs);

  attnd a = {0};
  rc = 1;
  if (start(&cfg, policy, &a)) {
    notify_ready(&cfg, a.server);
    serve(a.server, a.models, a.pool, a.sessions, &cfg, &sigs);
    drain(&a, &cfg);
    if (*cfg.session_dir) attn_sessions_save(a.sessions, cfg.session_dir, 0);
    rc = 0;
  }
  teardown(&a);
  return rc;
}
