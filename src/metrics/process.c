/* process.c - the standard process_* metrics, read from /proc/self.
 *
 * DESIGN
 * The names, types and units of Prometheus' client libraries (their
 * "process collector"), so dashboards made for any exporter work:
 *   process_cpu_seconds_total      utime + stime of /proc/self/stat
 *   process_resident_memory_bytes  rss (pages) * page size
 *   process_virtual_memory_bytes   vsize
 *   process_open_fds               the entries of /proc/self/fd
 *   process_max_fds                RLIMIT_NOFILE's soft limit
 *   process_start_time_seconds     starttime (ticks after boot) + btime
 *                                  of /proc/stat
 * Read at each scrape (a few hundred microseconds); a value that cannot
 * be read is left out rather than made up.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "attn/metrics.h"

typedef struct proc_stat {
  unsigned long long utime, stime, starttime, vsize;
  long long rss;
} proc_stat;

/* The fields of /proc/self/stat we use; 0 when it cannot be read.  The
 * command (field 2) may hold spaces and parentheses: parse after its last
 * ')'. */
static int read_stat(proc_stat *ps) {
  char line[1024];
  FILE *f = fopen("/proc/self/stat", "r");
  if (!f) return 0;
  size_t n = fread(line, 1, sizeof line - 1, f);
  fclose(f);
  line[n] = '\0';
  const char *p = strrchr(line, ')');
  if (!p) return 0;
  /* fields 3.. : state ppid pgrp session tty tpgid flags minflt cminflt
   * majflt cmajflt utime stime cutime cstime priority nice threads
   * itrealvalue starttime vsize rss */
  return sscanf(p + 2,
                "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d "
                "%*d %*d %*d %*d %*d %llu %llu %lld",
                &ps->utime, &ps->stime, &ps->starttime, &ps->vsize,
                &ps->rss) == 5;
}

/* The boot time, seconds since the epoch (btime of /proc/stat); 0 when
 * unknown. */
static unsigned long long boot_time(void) {
  char line[256];
  unsigned long long bt = 0;
  FILE *f = fopen("/proc/stat", "r");
  if (!f) return 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "btime %llu", &bt) == 1) break;
  fclose(f);
  return bt;
}

/* Open descriptors: /proc/self/fd's entries, less the one reading it. */
static long open_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  long n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n - 1;
}

static void metric(attn_buf *b, const char *name, const char *type,
                   const char *help, const char *value) {
  attn_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %s\n", name, help, name,
                  type, name, value);
}

attn_status attn_metrics_process(attn_buf *out) {
  char v[64];
  proc_stat ps;
  long tick = sysconf(_SC_CLK_TCK);
  long page = sysconf(_SC_PAGESIZE);
  attn_status st = ATTN_OK;
  if (read_stat(&ps) && tick > 0) {
    snprintf(v, sizeof v, "%.2f", (double)(ps.utime + ps.stime) / tick);
    metric(out, "process_cpu_seconds_total", "counter",
           "Total user and system CPU time spent in seconds.", v);
    snprintf(v, sizeof v, "%lld", ps.rss * (page > 0 ? page : 4096));
    metric(out, "process_resident_memory_bytes", "gauge",
           "Resident memory size in bytes.", v);
    snprintf(v, sizeof v, "%llu", ps.vsize);
    metric(out, "process_virtual_memory_bytes", "gauge",
           "Virtual memory size in bytes.", v);
    unsigned long long bt = boot_time();
    if (bt) {
      snprintf(v, sizeof v, "%.2f", (double)bt + (double)ps.starttime / tick);
      metric(out, "process_start_time_seconds", "gauge",
             "Start time of the process since unix epoch in seconds.", v);
    }
  }
  long fds = open_fds();
  if (fds >= 0) {
    snprintf(v, sizeof v, "%ld", fds);
    metric(out, "process_open_fds", "gauge", "Number of open file descriptors.",
           v);
  }
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    snprintf(v, sizeof v, "%llu",
             rl.rlim_cur == RLIM_INFINITY ? (unsigned long long)-1
                                          : (unsigned long long)rl.rlim_cur);
    metric(out, "process_max_fds", "gauge",
           "Maximum number of open file descriptors.", v);
  }
  return st;
}
