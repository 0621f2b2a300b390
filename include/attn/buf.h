/* buf.h - a growable byte buffer that responses are written into.
 *
 * Encoders append straight into it (no intermediate cJSON tree).  A buffer
 * with a cap refuses to grow past it (ATTN_ETOOBIG) so a response can never
 * exceed what the server allows.  Not thread-safe; one owner at a time. */
#ifndef ATTN_BUF_H
#define ATTN_BUF_H

#include <stddef.h>
#include <stdint.h>

#include "attn/status.h"

typedef struct attn_buf {
  char *data;
  size_t len, cap;
  size_t max; /* 0 = unlimited */
} attn_buf;

/* Empty buffer; no allocation until the first append. */
void attn_buf_init(attn_buf *b, size_t max);
void attn_buf_free(attn_buf *b);
/* Make room for n more bytes; returns ATTN_ENOMEM or ATTN_ETOOBIG, leaving
 * the buffer unchanged on failure. */
attn_status attn_buf_reserve(attn_buf *b, size_t n);
attn_status attn_buf_append(attn_buf *b, const void *p, size_t n);
attn_status attn_buf_puts(attn_buf *b, const char *s);
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
attn_status
attn_buf_printf(attn_buf *b, const char *fmt, ...);

/* v in decimal, as "%lld" would print it, without the printf machinery. */
attn_status attn_buf_i64(attn_buf *b, int64_t v);
/* The same for unsigned, as "%llu". */
attn_status attn_buf_u64(attn_buf *b, uint64_t v);

/* v with exactly three decimals, the same text as "%.3f" (printf itself
 * for large, non-finite or nearly-tied values). */
attn_status attn_buf_fixed3(attn_buf *b, double v);
/* Append s as a JSON string literal (quotes and escapes included). */
attn_status attn_buf_json_string(attn_buf *b, const char *s);
/* Hand the bytes to the caller (who frees them with free()); the buffer is
 * left empty. */
char *attn_buf_steal(attn_buf *b, size_t *len);

#endif
