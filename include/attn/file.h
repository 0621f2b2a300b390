/* file.h - reading a whole file attnd is told to read. */
#ifndef ATTN_FILE_H
#define ATTN_FILE_H

#include <stddef.h>

#include "attn/status.h"

/* Read a whole regular file of at most max_bytes into a new buffer
 * (NUL-terminated: *buf has len + 1 bytes).  The file is opened without
 * blocking and refused unread unless it is a regular file (a FIFO would
 * wait for a writer for ever, /dev/zero never end).  Errors, naming the
 * file by `label`: ATTN_EIO (cannot open, not a regular file: "label: not
 * a regular file (a FIFO)", short read), ATTN_ETOOBIG (larger than
 * max_bytes, before reading: "label: N bytes, limit M"), ATTN_ENOMEM; on
 * error *buf is NULL and nothing is allocated.  Any thread. */
attn_status attn_read_file(const char *path, const char *label,
                           size_t max_bytes, char **buf, size_t *len,
                           attn_diag *d);

#endif
