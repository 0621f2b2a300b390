/* file.c - attn_read_file (file.h): a whole regular file into memory,
 * opened without blocking, for every file attnd reads while it serves
 * (model and weights files on a load or SIGHUP, api_keys_file on SIGHUP):
 * a FIFO would wait for a writer for ever, /dev/zero never end, and
 * either would hold a worker or the main thread, and so the drain. */
#include "attn/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* What a file that is not a regular one is, for messages. */
static const char *file_kind(mode_t m) {
  return S_ISFIFO(m)   ? "a FIFO"
         : S_ISDIR(m)  ? "a directory"
         : S_ISCHR(m)  ? "a character device"
         : S_ISBLK(m)  ? "a block device"
         : S_ISSOCK(m) ? "a socket"
                       : "not a file";
}

/* n bytes of fd into b: 0, or -1 (errno) on an error or an early end. */
static int read_all(int fd, char *b, size_t n, size_t *got) {
  *got = 0;
  while (*got < n) {
    ssize_t r = read(fd, b + *got, n - *got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    *got += (size_t)r;
  }
  return 0;
}

attn_status attn_read_file(const char *path, const char *label,
                           size_t max_bytes, char **buf, size_t *len,
                           attn_diag *d) {
  *buf = NULL;
  /* O_NONBLOCK: opening a FIFO must not wait for a writer (fstat then
   * refuses it); it changes nothing for a regular file's reads */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0)
    return attn_diag_set(d, ATTN_EIO, "%s: cannot open: %s", label,
                         strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    int e = errno;
    close(fd);
    return attn_diag_set(d, ATTN_EIO, "%s: cannot stat: %s", label,
                         strerror(e));
  }
  if (!S_ISREG(sb.st_mode)) {
    close(fd);
    return attn_diag_set(d, ATTN_EIO, "%s: not a regular file (%s)", label,
                         file_kind(sb.st_mode));
  }
  if (sb.st_size < 0 || (uint64_t)sb.st_size > max_bytes ||
      (uint64_t)sb.st_size >= SIZE_MAX / 2) {
    close(fd);
    return attn_diag_set(d, ATTN_ETOOBIG, "%s: %lld bytes, limit %zu", label,
                         (long long)sb.st_size, max_bytes);
  }
  size_t n = (size_t)sb.st_size, got;
  char *b = malloc(n + 1);
  if (!b) {
    close(fd);
    return attn_diag_set(d, ATTN_ENOMEM, "%s: out of memory (%zu bytes)", label,
                         n);
  }
  int err = read_all(fd, b, n, &got);
  close(fd);
  if (err) {
    free(b);
    return attn_diag_set(d, ATTN_EIO, "%s: short read (%zu of %zu bytes)",
                         label, got, n);
  }
  b[n] = '\0';
  *buf = b;
  *len = n;
  return ATTN_OK;
}
