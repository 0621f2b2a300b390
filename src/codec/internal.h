/* internal.h - what the codecs (kserve_v2.c, kserve_v2_ext.c,
 * attention_v1.c, session_v1.c) share, defined in shared.c (attn__ prefix). Not
 * a public header: only src/codec/ includes it. */
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

/* Match the keys of obj (a JSON object) against names[0, n); slots[i]
 * gets the item for names[i] (slots zeroed by the caller).  An unknown key
 * is ATTN_EINVAL "unknown field 'x'", with "(did you mean 'y'?)" when a
 * name is within 2 edits; a key given twice is "duplicate field 'x'";
 * both prefixed by `where` ("" at the top, "rotary: " inside). */
struct cJSON;
attn_status attn__match_keys(const struct cJSON *obj, const char *const *names,
                             size_t n, const struct cJSON **slots,
                             const char *where, attn_diag *d);

/* One dimension of a strided read: n elements, stride in floats. */
typedef struct attn__dimspec {
  int64_t n, stride;
} attn__dimspec;

/* Floats at base as nested JSON arrays: one level per outer dimension
 * (outer[0, n_outer)), then the innermost arrays over `inner`; a matrix's
 * rows in one call of attn_f32_append_rows.  Non-finite as null.  On
 * failure out may hold a partial text: callers restore its length. */
attn_status attn__json_nested(attn_buf *b, const float *base,
                              const attn__dimspec *outer, int n_outer,
                              const attn__dimspec *inner);

/* A session's spec as the JSON object PUT /v1/sessions/{id} takes:
 * {"layers", "num_heads", "num_kv_heads", "head_dim", "max_tokens",
 * "kv_dtype", then the variants as the session object writes them}
 * (session_v1.c; session_file.c puts it in a file's metadata).  On
 * failure out->len is restored. */
attn_status attn__session_spec_json(attn_buf *out, const attn_session_spec *p);

#endif /* ATTN_CODEC_INTERNAL_H */
