/* cgroup.c - how much memory and how many CPUs this process may use, for
 * settings whose default scales with them (max_total_body_bytes = 0,
 * workers = 0, blas_threads_per_worker = 0).
 *
 * A container's limits are not the machine's: Docker's --memory and --cpus
 * and a Kubernetes pod's resources.limits set cgroup limits.  Passing the
 * memory limit gets the process killed, not refused; running more busy
 * threads than the CPU quota gets them all throttled (each period, once the
 * quota is spent, every thread waits for the next one).  So the answer is
 * the smallest of the machine's value and every limit found:
 *  - cgroup v2: the line "0::/path" of /proc/self/cgroup, and
 *    /sys/fs/cgroup/<path>/memory.max (cpu.max) for the path and each
 *    ancestor;
 *  - cgroup v1: the line "N:...memory...:/path" ("cpu"), and
 *    /sys/fs/cgroup/memory/<path>/memory.limit_in_bytes
 *    (/sys/fs/cgroup/cpu/<path>/cpu.cfs_quota_us over cpu.cfs_period_us,
 *    and the same under cpu,cpuacct where that is no symlink) likewise;
 *  - the top of each mount as well, because inside a container the mount
 *    is the container's own cgroup while /proc/self/cgroup may still show
 *    the host's path (v1, or v2 without a cgroup namespace).
 * "max" (v2) is skipped, and v1's "unlimited" (a memory value near 2^63, a
 * quota of -1) by taking the minimum.  Nothing here fails: unreadable files
 * are skipped.  One walk (each_cgroup) serves both; a visitor reads the
 * files of one directory.  The affinity mask and the RAM are the caller's:
 * they are not files under root.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/config.h"

#define PATH_CAP 4096

/* Reads the limit files of directory root/dir into acc. */
typedef void (*visit_fn)(const char *root, const char *dir, void *acc);

/* The text of file root/dir/name into text[size]; 0 when unreadable. */
static int read_text(const char *root, const char *dir, const char *name,
                     char *text, size_t size) {
  char path[PATH_CAP];
  if (snprintf(path, sizeof path, "%s%s/%s", root, dir, name) >=
      (int)sizeof path)
    return 0;
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(text, 1, size - 1, f);
  fclose(f);
  text[n] = '\0';
  return 1;
}

/* Visit mount/path and each of its ancestors, mount itself the last. */
static void walk_up(const char *root, const char *mount, const char *path,
                    visit_fn visit, void *acc) {
  char dir[PATH_CAP];
  if (snprintf(dir, sizeof dir, "%s%s", mount, path) >= (int)sizeof dir) return;
  size_t top = strlen(mount);
  for (;;) {
    visit(root, dir, acc);
    char *slash = strrchr(dir + top, '/');
    if (!slash) break;
    *slash = '\0'; /* the parent; the last one is the mount's top */
  }
}

/* Does the v1 controller list "a,b,c" name controller? */
static int has_controller(const char *list, size_t n, const char *controller) {
  size_t want = strlen(controller);
  while (n) {
    const char *comma = memchr(list, ',', n);
    size_t len = comma ? (size_t)(comma - list) : n;
    if (len == want && memcmp(list, controller, want) == 0) return 1;
    if (!comma) break;
    n -= len + 1;
    list = comma + 1;
  }
  return 0;
}

/* Visit the cgroups of this process (see the top of this file): v2 with
 * visit_v2; v1 hierarchies whose controllers include controller with
 * visit_v1, under each of the NULL-terminated v1_mounts. */
static void each_cgroup(const char *root, visit_fn visit_v2,
                        const char *controller, const char *const *v1_mounts,
                        visit_fn visit_v1, void *acc) {
  char path[PATH_CAP], line[PATH_CAP];
  if (snprintf(path, sizeof path, "%s/proc/self/cgroup", root) >=
      (int)sizeof path)
    return;
  FILE *f = fopen(path, "r");
  if (!f) return;
  while (fgets(line, sizeof line, f)) {
    /* hierarchy-id:controllers:path */
    char *c1 = strchr(line, ':');
    char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2) continue;
    char *p = c2 + 1;
    p[strcspn(p, "\n")] = '\0';
    if (p[0] != '/') continue;
    if (p[1] == '\0') p++; /* "/": the top only */
    if (c2 == c1 + 1 && strncmp(line, "0:", 2) == 0)
      walk_up(root, "/sys/fs/cgroup", p, visit_v2, acc);
    else if (has_controller(c1 + 1, (size_t)(c2 - c1 - 1), controller))
      for (const char *const *m = v1_mounts; *m; m++)
        walk_up(root, *m, p, visit_v1, acc);
  }
  fclose(f);
}

/* ---- Memory ------------------------------------------------------------- */

/* The number in file root/dir/name, if it holds one; else leaves *min. */
static void min_from_file(const char *root, const char *dir, const char *name,
                          uint64_t *min) {
  char text[64];
  if (!read_text(root, dir, name, text, sizeof text)) return;
  if (text[0] < '0' || text[0] > '9') return; /* "max", empty */
  char *end;
  unsigned long long v = strtoull(text, &end, 10);
  if (*end != '\0' && *end != '\n') return;
  if (v > 0 && v < *min) *min = v;
}

static void memory_v2(const char *root, const char *dir, void *acc) {
  min_from_file(root, dir, "memory.max", acc);
}

static void memory_v1(const char *root, const char *dir, void *acc) {
  min_from_file(root, dir, "memory.limit_in_bytes", acc);
}

uint64_t attn_memory_limit(const char *root, uint64_t phys) {
  static const char *const mounts[] = {"/sys/fs/cgroup/memory", NULL};
  uint64_t min = phys ? phys : UINT64_MAX;
  each_cgroup(root ? root : "", memory_v2, "memory", mounts, memory_v1, &min);
  return min;
}

/* ---- CPU ---------------------------------------------------------------- */

/* A quota of q microseconds per period of p, in CPUs, into *min (0: none
 * yet).  Non-positive quotas (v1's -1) and periods are no limit. */
static void min_quota(long long q, long long p, double *min) {
  if (q <= 0 || p <= 0) return;
  double cpus = (double)q / (double)p;
  if (*min == 0 || cpus < *min) *min = cpus;
}

/* cpu.max: "QUOTA PERIOD" or "max PERIOD". */
static void cpu_v2(const char *root, const char *dir, void *acc) {
  char text[64];
  long long q, p;
  if (read_text(root, dir, "cpu.max", text, sizeof text) &&
      sscanf(text, "%lld %lld", &q, &p) == 2)
    min_quota(q, p, acc);
}

/* v1: cpu.cfs_quota_us and cpu.cfs_period_us. */
static void cpu_v1(const char *root, const char *dir, void *acc) {
  char text[32];
  long long q, p;
  if (read_text(root, dir, "cpu.cfs_quota_us", text, sizeof text) &&
      sscanf(text, "%lld", &q) == 1 &&
      read_text(root, dir, "cpu.cfs_period_us", text, sizeof text) &&
      sscanf(text, "%lld", &p) == 1)
    min_quota(q, p, acc);
}

double attn_cpu_quota(const char *root) {
  /* Most systems mount cpu,cpuacct with a "cpu" symlink; some only one of
   * the two names.  Reading both counts one limit twice: harmless. */
  static const char *const mounts[] = {"/sys/fs/cgroup/cpu",
                                       "/sys/fs/cgroup/cpu,cpuacct", NULL};
  double min = 0;
  each_cgroup(root ? root : "", cpu_v2, "cpu", mounts, cpu_v1, &min);
  return min;
}

int attn_cpus_allowed(int online, int affinity, double quota, char *why,
                      size_t why_size) {
  int n = online > 0 ? online : 1;
  if (affinity > 0 && affinity < n) n = affinity;
  /* 1.5 CPUs of quota keep 2 threads busy 75% of the time: still more
   * than 1 can do.  The epsilon keeps 2.0000001 (a period that does not
   * divide the quota) at 2. */
  if (quota > 0 && quota < n) {
    int up = (int)quota;
    if (quota - up > 1e-6) up++;
    n = up;
  }
  if (n < 1) n = 1;
  if (why && why_size) {
    char q[48] = "no cgroup CPU quota";
    if (quota > 0) snprintf(q, sizeof q, "cgroup CPU quota %.3g CPUs", quota);
    char a[40] = "";
    if (affinity > 0)
      snprintf(a, sizeof a, ", %d in the affinity mask", affinity);
    snprintf(why, why_size, "%d CPU%s allowed: %s%s, %d online", n,
             n == 1 ? "" : "s", q, a, online);
  }
  return n;
}
