/* notify.h - the systemd notification protocol (sd_notify(3)) without
 * libsystemd: datagrams such as "READY=1" to the socket NOTIFY_SOCKET
 * names.  Only main reads the environment; it hands the socket's name
 * here.  No HTTP, no threads of its own. */
#ifndef ATTN_NOTIFY_H
#define ATTN_NOTIFY_H

#include "attn/status.h"

/* Send msg (one or more "KEY=value" lines, such as "READY=1\nSTATUS=...")
 * as one datagram to socket, NOTIFY_SOCKET's value: an absolute path of a
 * unix datagram socket, or "@name" for one in the abstract namespace.
 * Returns ATTN_OK, ATTN_EINVAL for a socket name that is neither (or too
 * long for sockaddr_un), or ATTN_EIO when it could not be sent (the
 * reason in *d); nothing is left open either way.  Does not block: a
 * full socket is ATTN_EIO.  Any thread. */
attn_status attn_notify_send(const char *socket, const char *msg, attn_diag *d);

#endif
