/* reload.h - `attnd --reload`: make a running attnd reload, where no shell
 * or kill(1) exists (the image has neither).
 *
 * The running attnd is found in /proc: the processes whose executable is
 * this very binary (same device and inode as /proc/self/exe), other than
 * clients of it (--healthcheck, --reload, --check-config, --help,
 * --version).  In a container that is PID 1.  main chooses one (by its
 * settings: the port its command line and environment resolve to) and
 * asks it with SIGHUP sent by sigqueue(); attnd reloads (keys, admin keys,
 * every model file) and answers the sender with ATTN_RELOAD_REPLY_SIGNAL,
 * whose value is the count of reloads that failed.  So the asker knows
 * the reload happened, and whether all of it did, without HTTP (no key,
 * no TLS, no metrics port needed).  A plain SIGHUP (kill -HUP, systemctl
 * reload) reloads as before and is answered by no one.
 *
 * THREADS: the client functions are for a single-threaded process (they
 * change its signal mask).  attn_reload_confirm is async-signal-safe. */
#ifndef ATTN_RELOAD_H
#define ATTN_RELOAD_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "attn/status.h"

/* The answer attnd sends to whoever asked for a reload with sigqueue():
 * a real-time signal, so it carries its value and is queued. */
#define ATTN_RELOAD_REPLY_SIGNAL (SIGRTMIN)

/* The most processes attn_reload_find returns. */
#define ATTN_RELOAD_FOUND_MAX 64

/* One running attnd found in /proc. */
typedef struct attn_reload_proc {
  int pid;
  unsigned uid, gid; /* real ids, from /proc/PID/status */
  int takes_hup;     /* 1 once it catches SIGHUP (its handler is set: it
                        is past its start-up; before, SIGHUP ends it) */
  char *cmdline;     /* its argv, NUL-separated (owned) */
  size_t cmdline_len;
  char *environ; /* its environment, NUL-separated; NULL when unreadable */
  size_t environ_len;
} attn_reload_proc;

/* Processes named attnd that could not be examined (another user's). */
typedef struct attn_reload_denied {
  size_t n;
  int pid[4];
  unsigned uid[4];
} attn_reload_denied;

/* Every running attnd of this binary but this process into *out (*n of
 * them; free with attn_reload_procs_free), or only the one of pid when
 * pid > 0.  *denied (may be NULL) gets the processes whose command name
 * is attnd but whose executable this user may not look at.  Returns
 * ATTN_OK (also when none is found: *n is 0), ATTN_EIO when /proc cannot
 * be read, ATTN_ENOMEM; on error *out is NULL and *n 0. */
attn_status attn_reload_find(int pid, attn_reload_proc **out, size_t *n,
                             attn_reload_denied *denied, attn_diag *d);

void attn_reload_procs_free(attn_reload_proc *v, size_t n);

/* Whether p is a client of attnd rather than a server: its arguments
 * ask for --healthcheck, --reload, --check-config, --help or --version. */
int attn_reload_is_client(const attn_reload_proc *p);

/* Ask the attnd of p to reload and wait, at most timeout_ms, for its
 * answer.  Run as root, this process first takes p's user and group (so
 * that attnd, unprivileged, may answer it).  Returns
 *   ATTN_OK        it reloaded; *failures is the count of parts (the key
 *                  files, model files) that failed and kept what was in
 *                  force (its log says which);
 *   ATTN_EINVAL    permission denied (d names the uid to run as);
 *   ATTN_ENOTFOUND it is gone;
 *   ATTN_ETIMEDOUT no answer in time (d says whether it took the signal).
 * d always begins with "attnd (pid N)". */
attn_status attn_reload_signal(const attn_reload_proc *p, int64_t timeout_ms,
                               int *failures, attn_diag *d);

/* attnd's side: answer asker (the si_pid of a SIGHUP sent with sigqueue)
 * with the count of failed parts.  Returns 0, or -1 with errno (the asker
 * is gone, or may not be signalled). */
int attn_reload_confirm(int asker, int failures);

#endif /* ATTN_RELOAD_H */
