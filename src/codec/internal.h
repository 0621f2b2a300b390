/* internal.h - what the codecs (kserve_v2.c, kserve_v2_ext.c,
 * attention_v1.c) share, defined in shared.c (attn__ prefix).  Not a public
 * header: only src/codec/ includes it. */
#ifndef ATTN_CODEC_INTERNAL_H
#define ATTN_CODEC_INTERNAL_H

#include <stdint.h>

#include "attn/buf.h"
#include "attn/codec.h"
#include "attn/status.h"

/* Effective limits: defaults for NULL, ceilings applied, zeros replaced. */
void attn__codec_limits_eff(const attn_codec_limits *in,
                            attn_codec_limits *out);

/* Undo a failed encoder's appends: b back to start bytes. */
void attn__buf_restore(attn_buf *b, size_t start);

/* open, then put(out, item) for the n items of size bytes each at items
 * (a comma between two), then close, appended to out; out->len restored
 * on failure. */
typedef attn_status (*attn__put_item)(attn_buf *out, const void *item);
attn_status attn__json_list(attn_buf *out, const char *open, const void *items,
                            size_t size, size_t n, attn__put_item put,
                            const char *close);

/* shape as a JSON array of integers, "[2,4]" ("[]" for rank 0). */
attn_status attn__json_shape(attn_buf *b, int rank, const int64_t *shape);

#endif /* ATTN_CODEC_INTERNAL_H */
