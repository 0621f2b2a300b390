/* inflate.h - inflate.c's interface: compressed request bodies.
 * Private to src/server/ (docs/architecture.md). */
#ifndef ATTN_SERVER_INFLATE_H
#define ATTN_SERVER_INFLATE_H

#include "internal.h"

/* inflate.c: *out from a Content-Encoding header (NULL: identity); 0 when
 * it is not one of identity, gzip, x-gzip, deflate (case-insensitive). */
int attn__encoding_parse(const char *ce, attn__encoding *out);
const char *attn__encoding_name(attn__encoding e);
/* Inflate in[0, n) (gzip, or deflate: zlib or raw) into a new 64-byte
 * aligned block *mem (free() it) holding the body from byte pad (< 64) on,
 * *len bytes.  Errors: ATTN_ETOOBIG (more than max bytes, or, when ratio
 * is not 0, more than ratio x n and ATTN_INFLATE_FLOOR_BYTES), ATTN_EPARSE
 * (corrupt or truncated stream, bytes after it), ATTN_ENOMEM; nothing is
 * left allocated then.  Any thread; meant for workers. */
attn_status attn__inflate(const char *in, size_t n, attn__encoding e,
                          size_t max, unsigned ratio, size_t pad, char **mem,
                          size_t *len, attn_diag *d);

#endif
