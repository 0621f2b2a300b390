/* reload.c - `attnd --reload`: find the running attnd in /proc, send it
 * SIGHUP with sigqueue() and wait for its answer (include/attn/reload.h).
 *
 * DESIGN
 *  - Found by identity, not by name: a process runs this binary when its
 *    /proc/PID/exe is the same file (device and inode) as /proc/self/exe.
 *    Another build of attnd on the machine is not taken for this one.
 *    stat() of another user's exe fails (EACCES): such a process named
 *    attnd is reported (attn_reload_denied), so the caller can say
 *    "permission denied" instead of "none found".
 *  - The answer: attnd (main.c, serve) replies to the si_pid of a SIGHUP
 *    whose si_code is SI_QUEUE with ATTN_RELOAD_REPLY_SIGNAL, after the
 *    reload.  The reply signal is blocked here before the SIGHUP goes, and
 *    taken with sigtimedwait; OpenBLAS's threads, started before main, do
 *    not block it, and one of them may take it instead: a handler
 *    (on_reply) keeps its sender and value for the wait, which looks
 *    every 50 ms.
 *  - Bounded: the wait ends at the deadline, or as soon as the attnd is
 *    gone (looked at every 50 ms).  At the deadline /proc/PID/status
 *    says whether the SIGHUP is still pending (attnd not serving yet, or
 *    shutting down) or was taken (the reload itself is slow).
 *  - Writes nothing: runs as any uid on a read-only root file system.
 *
 * THREADS: a single-threaded client (changes the signal mask), except
 * attn_reload_confirm, which is async-signal-safe and any thread's.
 */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* setgroups */
#endif
#include "attn/reload.h"

#include "attn/clock.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The answer when a thread other than the caller took it (a library's
 * thread started before main, which does not block the reply signal):
 * who sent it and its value; reply_from 0 until then. */
static volatile sig_atomic_t reply_from, reply_value;

static void on_reply(int sig, siginfo_t *si, void *ctx) {
  (void)sig;
  (void)ctx;
  if (si->si_code != SI_QUEUE) return;
  reply_value = si->si_value.sival_int;
  reply_from = si->si_pid;
}

/* With no answer yet, SIGHUP is sent again after 1 s, then 2, 4, ... s
 * (unless one is still pending).  Two SIGHUPs pending at once are one for
 * the kernel: when several ask together, attnd may reload once, not
 * knowing each asker; the one it did not answer asks again, and is
 * answered by a reload that began after it asked.  A reload slower than
 * that gets one more reload after it, no more (pending SIGHUPs merge). */
#define RESEND_FIRST_NS 1000000000u

/* Bytes read of a command line or an environment. */
#define PROC_TEXT_MAX (256u << 10)

/* The whole of /proc/PID/name, up to PROC_TEXT_MAX bytes, into a new
 * NUL-terminated buffer (*len: the bytes read).  NULL when unreadable. */
static char *read_proc(int pid, const char *name, size_t *len) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/%s", pid, name);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NULL;
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap + 1);
  while (buf) {
    if (n == cap) {
      if (cap >= PROC_TEXT_MAX) break;
      char *b = realloc(buf, cap * 2 + 1);
      if (!b) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = b;
      cap *= 2;
    }
    ssize_t r = read(fd, buf + n, cap - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      free(buf);
      buf = NULL;
    }
    if (r <= 0) break;
    n += (size_t)r;
  }
  close(fd);
  if (buf) buf[n] = '\0';
  if (len) *len = n;
  return buf;
}

/* The hex mask of field ("SigCgt:", "ShdPnd:") of /proc/PID/status, and
 * the real uid and gid; 0 when absent. */
static unsigned long long status_mask(const char *status, const char *field) {
  const char *l = status ? strstr(status, field) : NULL;
  return l ? strtoull(l + strlen(field), NULL, 16) : 0;
}

static unsigned status_id(const char *status, const char *field) {
  const char *l = status ? strstr(status, field) : NULL;
  return l ? (unsigned)strtoul(l + strlen(field), NULL, 10) : 0;
}

/* Is SIGHUP in mask (bit SIGHUP - 1)? */
static int has_hup(unsigned long long mask) {
  return (int)((mask >> (SIGHUP - 1)) & 1u);
}

/* Is a SIGHUP pending in the process pid (shared, or its main thread's),
 * not yet taken by a reload? */
static int hup_pending(int pid) {
  char *status = read_proc(pid, "status", NULL);
  int pending = has_hup(status_mask(status, "\nShdPnd:")) ||
                has_hup(status_mask(status, "\nSigPnd:"));
  free(status);
  return pending;
}

int attn_reload_is_client(const attn_reload_proc *p) {
  static const char *const exact[] = {"--check-config", "--help", "-h",
                                      "--version", "-V"};
  static const char *const prefix[] = {"--healthcheck", "--reload"};
  const char *a = p->cmdline, *end = p->cmdline + p->cmdline_len;
  if (a < end) a += strlen(a) + 1; /* argv[0] */
  for (; a < end; a += strlen(a) + 1) {
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
      if (strcmp(a, exact[i]) == 0) return 1;
    for (size_t i = 0; i < sizeof prefix / sizeof prefix[0]; i++) {
      size_t n = strlen(prefix[i]);
      if (strncmp(a, prefix[i], n) == 0 && (a[n] == '\0' || a[n] == '='))
        return 1;
    }
  }
  return 0;
}

/* Process pid: one of this binary (*self: its device and inode) into *p
 * (1), not one (0), or named attnd but not examinable (-1). */
static int examine(int pid, const struct stat *self, attn_reload_proc *p) {
  char path[64];
  struct stat st;
  snprintf(path, sizeof path, "/proc/%d/exe", pid);
  if (stat(path, &st) != 0) {
    if (errno != EACCES && errno != EPERM) return 0;
    char *comm = read_proc(pid, "comm", NULL);
    int named = comm && strcmp(comm, "attnd\n") == 0;
    free(comm);
    return named ? -1 : 0;
  }
  if (st.st_dev != self->st_dev || st.st_ino != self->st_ino) return 0;
  memset(p, 0, sizeof *p);
  p->pid = pid;
  char *status = read_proc(pid, "status", NULL);
  p->cmdline = read_proc(pid, "cmdline", &p->cmdline_len);
  if (!status || !p->cmdline) { /* exited meanwhile */
    free(status);
    free(p->cmdline);
    return 0;
  }
  p->uid = status_id(status, "\nUid:");
  p->gid = status_id(status, "\nGid:");
  p->takes_hup = has_hup(status_mask(status, "\nSigCgt:"));
  free(status);
  p->environ = read_proc(pid, "environ", &p->environ_len);
  return 1;
}

void attn_reload_procs_free(attn_reload_proc *v, size_t n) {
  for (size_t i = 0; v && i < n; i++) {
    free(v[i].cmdline);
    free(v[i].environ);
  }
  free(v);
}

attn_status attn_reload_find(int pid, attn_reload_proc **out, size_t *n,
                             attn_reload_denied *denied, attn_diag *d) {
  struct stat self;
  *out = NULL;
  *n = 0;
  if (denied) denied->n = 0;
  if (stat("/proc/self/exe", &self) != 0)
    return attn_diag_set(d, ATTN_EIO,
                         "cannot read /proc/self/exe (%s): is /proc mounted?",
                         strerror(errno));
  DIR *dir = opendir("/proc");
  if (!dir)
    return attn_diag_set(d, ATTN_EIO, "cannot read /proc: %s", strerror(errno));
  attn_reload_proc *v = calloc(ATTN_RELOAD_FOUND_MAX, sizeof *v);
  if (!v) {
    closedir(dir);
    return attn_diag_set(d, ATTN_ENOMEM, "out of memory");
  }
  size_t k = 0;
  int me = (int)getpid();
  for (struct dirent *e;
       (e = readdir(dir)) != NULL && k < ATTN_RELOAD_FOUND_MAX;) {
    char *end;
    long p = strtol(e->d_name, &end, 10);
    if (*end || p <= 0 || p == me || (pid > 0 && p != pid)) continue;
    int r = examine((int)p, &self, &v[k]);
    if (r > 0 && attn_reload_is_client(&v[k])) {
      free(v[k].cmdline);
      free(v[k].environ);
    } else if (r > 0) {
      k++;
    } else if (r < 0 && denied && denied->n < 4) {
      char path[64];
      struct stat st;
      snprintf(path, sizeof path, "/proc/%ld", p);
      denied->pid[denied->n] = (int)p;
      denied->uid[denied->n++] = stat(path, &st) == 0 ? st.st_uid : 0;
    }
  }
  closedir(dir);
  *out = v;
  *n = k;
  return ATTN_OK;
}

/* Take p's group and user when running as root and it is not (so that it
 * may signal back).  Failing that, nothing changes (the answer may then be
 * refused: the wait says so). */
static void become(const attn_reload_proc *p) {
  if (geteuid() != 0 || p->uid == 0) return;
  if (setgroups(0, NULL) != 0 && errno != EPERM) return;
  if (setgid(p->gid) == 0) (void)!setuid(p->uid);
}

/* Why the answer did not come by the deadline, from /proc/PID/status. */
static attn_status no_answer(const attn_reload_proc *p, int64_t timeout_ms,
                             attn_diag *d) {
  if (hup_pending(p->pid))
    return attn_diag_set(d, ATTN_ETIMEDOUT,
                         "attnd (pid %d) has not taken SIGHUP within %lld ms: "
                         "it is not serving (starting up, or shutting down)",
                         p->pid, (long long)timeout_ms);
  return attn_diag_set(
      d, ATTN_ETIMEDOUT,
      "attnd (pid %d) took SIGHUP but did not confirm within %lld ms: the "
      "reload may still be running (see its log)%s",
      p->pid, (long long)timeout_ms,
      geteuid() != getuid() || (getuid() == 0 && p->uid != 0)
          ? "; it may not signal this process back: run --reload as its user"
          : "");
}

attn_status attn_reload_signal(const attn_reload_proc *p, int64_t timeout_ms,
                               int *failures, attn_diag *d) {
  sigset_t reply, old;
  sigemptyset(&reply);
  sigaddset(&reply, ATTN_RELOAD_REPLY_SIGNAL);
  become(p);
  /* blocked here, where sigtimedwait takes it; caught in other threads */
  struct sigaction sa = {.sa_sigaction = on_reply, .sa_flags = SA_SIGINFO};
  sigfillset(&sa.sa_mask);
  reply_from = 0;
  sigaction(ATTN_RELOAD_REPLY_SIGNAL, &sa, NULL);
  sigprocmask(SIG_BLOCK, &reply, &old);
  union sigval v = {.sival_int = 0};
  attn_status st = ATTN_OK;
  if (sigqueue(p->pid, SIGHUP, v) != 0) {
    int e = errno;
    sigprocmask(SIG_SETMASK, &old, NULL); /* nothing can be pending */
    if (e == ESRCH)
      return attn_diag_set(d, ATTN_ENOTFOUND, "attnd (pid %d) is gone", p->pid);
    if (e == EPERM)
      return attn_diag_set(d, ATTN_EINVAL,
                           "attnd (pid %d) runs as uid %u: permission "
                           "denied to signal it (run --reload as uid %u, "
                           "or as root)",
                           p->pid, p->uid, p->uid);
    return attn_diag_set(d, ATTN_EIO, "attnd (pid %d): sigqueue: %s", p->pid,
                         strerror(e));
  }
  uint64_t t0 = attn_now_ns(), deadline = t0 + (uint64_t)timeout_ms * 1000000u;
  uint64_t again = t0 + RESEND_FIRST_NS, gap = RESEND_FIRST_NS;
  for (;;) {
    uint64_t now = attn_now_ns();
    if (now >= deadline) {
      st = no_answer(p, timeout_ms, d);
      break;
    }
    if (now >= again) { /* ours may have been merged with another's */
      if (!hup_pending(p->pid)) (void)sigqueue(p->pid, SIGHUP, v);
      gap *= 2;
      again = now + gap;
    }
    if (reply_from == p->pid) {
      *failures = reply_value;
      break;
    }
    uint64_t left = deadline - now, step = 50000000u;
    if (left > step) left = step;
    struct timespec ts = {(time_t)(left / 1000000000u),
                          (long)(left % 1000000000u)};
    siginfo_t si;
    int got = sigtimedwait(&reply, &si, &ts);
    if (got == ATTN_RELOAD_REPLY_SIGNAL && si.si_code == SI_QUEUE &&
        si.si_pid == p->pid) {
      *failures = si.si_value.sival_int;
      break;
    }
    if (got < 0 && errno == EAGAIN && kill(p->pid, 0) != 0 && errno == ESRCH) {
      st = attn_diag_set(d, ATTN_ENOTFOUND,
                         "attnd (pid %d) exited before confirming the "
                         "reload",
                         p->pid);
      break;
    }
  }
  /* a late answer is dropped, not taken with its default action (the end
   * of this process) */
  signal(ATTN_RELOAD_REPLY_SIGNAL, SIG_IGN);
  sigprocmask(SIG_SETMASK, &old, NULL);
  return st;
}

int attn_reload_confirm(int asker, int failures) {
  union sigval v = {.sival_int = failures};
  return sigqueue(asker, ATTN_RELOAD_REPLY_SIGNAL, v);
}
