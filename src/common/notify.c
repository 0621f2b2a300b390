/* notify.c - one datagram to the service manager's notification socket
 * (include/attn/notify.h; sd_notify(3) describes the protocol).
 *
 * A socket per message, closed at once: attnd sends a handful in its life
 * (READY=1 once it serves, RELOADING=1 and READY=1 around each SIGHUP,
 * STOPPING=1 at shutdown), so nothing is kept between them and no thread
 * shares one.  The names systemd hands out: a path ("/run/systemd/notify")
 * or an abstract socket ("@/org/freedesktop/systemd1/notify/...", whose
 * '@' becomes the leading NUL of sun_path and whose address length is
 * then exact, not NUL-terminated).  vsock addresses (systemd 254+, for
 * virtual machines) are not handled: ATTN_EINVAL. */
#include "attn/notify.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

attn_status attn_notify_send(const char *socket_name, const char *msg,
                             attn_diag *d) {
  struct sockaddr_un sa;
  size_t n = socket_name ? strlen(socket_name) : 0;
  if (!msg || n < 2 || (socket_name[0] != '/' && socket_name[0] != '@'))
    return attn_diag_set(d, ATTN_EINVAL,
                         "NOTIFY_SOCKET '%.100s' is not an absolute path or "
                         "an @abstract socket name",
                         socket_name ? socket_name : "");
  if (n >= sizeof sa.sun_path)
    return attn_diag_set(d, ATTN_EINVAL,
                         "NOTIFY_SOCKET '%.100s...' is longer than a unix "
                         "socket address (%zu bytes)",
                         socket_name, sizeof sa.sun_path - 1);
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  memcpy(sa.sun_path, socket_name, n);
  socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
  if (socket_name[0] == '@')
    sa.sun_path[0] = '\0'; /* abstract: exactly n bytes, no NUL after */
  else
    len++; /* a path: with its NUL */
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0)
    return attn_diag_set(d, ATTN_EIO, "NOTIFY_SOCKET: socket: %s",
                         strerror(errno));
  size_t m = strlen(msg);
  ssize_t r;
  do {
    r = sendto(fd, msg, m, MSG_NOSIGNAL, (const struct sockaddr *)&sa, len);
  } while (r < 0 && errno == EINTR);
  int err = errno;
  close(fd);
  if (r < 0)
    return attn_diag_set(d, ATTN_EIO, "NOTIFY_SOCKET %.100s: %s", socket_name,
                         strerror(err));
  if ((size_t)r != m)
    return attn_diag_set(d, ATTN_EIO,
                         "NOTIFY_SOCKET %.100s: sent %zd of %zu "
                         "bytes",
                         socket_name, r, m);
  return ATTN_OK;
}
