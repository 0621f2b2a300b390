/* memlimit.c - how much memory this process may use, for settings whose
 * default scales with it (max_total_body_bytes = 0).
 *
 * A container's limit is not the machine's RAM: Docker's --memory and a
 * Kubernetes pod's resources.limits.memory set a cgroup limit, and passing
 * it gets the process killed, not refused.  So the answer is the smallest of
 * the RAM and every limit found:
 *  - cgroup v2: the line "0::/path" of /proc/self/cgroup, and
 *    /sys/fs/cgroup/<path>/memory.max for the path and each ancestor;
 *  - cgroup v1: the line "N:...memory...:/path", and
 *    /sys/fs/cgroup/memory/<path>/memory.limit_in_bytes likewise;
 *  - the top of each mount as well, because inside a container the mount
 *    is the container's own cgroup while /proc/self/cgroup may still show
 *    the host's path (v1, or v2 without a cgroup namespace).
 * "max" (v2) and v1's "unlimited" (a value near 2^63) are skipped by taking
 * the minimum.  Nothing here fails: unreadable files are skipped.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/config.h"

#define PATH_CAP 4096

/* The number in file root/dir/name, if it holds one; else leaves *min. */
static void min_from_file(const char *root, const char *dir, const char *name,
                          uint64_t *min) {
  char path[PATH_CAP], text[64];
  if (snprintf(path, sizeof path, "%s%s/%s", root, dir, name) >=
      (int)sizeof path)
    return;
  FILE *f = fopen(path, "r");
  if (!f) return;
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = '\0';
  if (text[0] < '0' || text[0] > '9') return; /* "max", empty */
  char *end;
  unsigned long long v = strtoull(text, &end, 10);
  if (*end != '\0' && *end != '\n') return;
  if (v > 0 && v < *min) *min = v;
}

/* Limits of mount/path and each of its ancestors, mount itself the last. */
static void min_along(const char *root, const char *mount, const char *path,
                      const char *name, uint64_t *min) {
  char dir[PATH_CAP];
  if (snprintf(dir, sizeof dir, "%s%s", mount, path) >= (int)sizeof dir) return;
  size_t top = strlen(mount);
  for (;;) {
    min_from_file(root, dir, name, min);
    char *slash = strrchr(dir + top, '/');
    if (!slash) break;
    *slash = '\0'; /* the parent; the last one is the mount's top */
  }
}

/* Does the v1 controller list "a,b,c" name memory? */
static int has_memory(const char *list, size_t n) {
  while (n) {
    const char *comma = memchr(list, ',', n);
    size_t len = comma ? (size_t)(comma - list) : n;
    if (len == 6 && memcmp(list, "memory", 6) == 0) return 1;
    if (!comma) break;
    n -= len + 1;
    list = comma + 1;
  }
  return 0;
}

uint64_t attn_memory_limit(const char *root, uint64_t phys) {
  uint64_t min = phys ? phys : UINT64_MAX;
  char path[PATH_CAP], line[PATH_CAP];
  if (!root) root = "";
  if (snprintf(path, sizeof path, "%s/proc/self/cgroup", root) >=
      (int)sizeof path)
    return min;
  FILE *f = fopen(path, "r");
  if (!f) return min;
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
      min_along(root, "/sys/fs/cgroup", p, "memory.max", &min);
    else if (has_memory(c1 + 1, (size_t)(c2 - c1 - 1)))
      min_along(root, "/sys/fs/cgroup/memory", p, "memory.limit_in_bytes",
                &min);
  }
  fclose(f);
  return min;
}
