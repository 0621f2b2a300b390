/* shared.c - what the v2 and v1 codecs share: the {"error": ...} body,
 * the effective decoder limits, tensor shapes and lists of items as JSON
 * arrays, undoing a failed encoder's appends.
 *
 * Design
 *  - Limits: NULL means the defaults; a zero, or a value above its ceiling
 *    in include/attn/limits.h, becomes that ceiling.
 *  - Floats are printed by src/fmt/ (attn_f32_append and the like,
 *    include/attn/f32fmt.h); request bodies are parsed by src/json/
 *    (include/attn/json.h).
 *
 * Threads: stateless and reentrant.
 */
#include "attn/codec.h"
#include "internal.h"

void attn_codec_limits_default(attn_codec_limits *l) {
  l->max_tensor_elements = ATTN_CODEC_DEFAULT_MAX_TENSOR_ELEMENTS;
  l->max_inputs = ATTN_MAX_INPUTS;
  l->max_depth = ATTN_MAX_JSON_DEPTH;
}

static size_t clamp_limit(size_t v, size_t ceiling) {
  return v == 0 || v > ceiling ? ceiling : v;
}

void attn__codec_limits_eff(const attn_codec_limits *in,
                            attn_codec_limits *out) {
  attn_codec_limits l;
  if (in)
    l = *in;
  else
    attn_codec_limits_default(&l);
  out->max_tensor_elements =
      clamp_limit(l.max_tensor_elements, (size_t)ATTN_MAX_ELEMENTS);
  out->max_inputs = clamp_limit(l.max_inputs, ATTN_MAX_INPUTS);
  out->max_depth = clamp_limit(l.max_depth, ATTN_MAX_JSON_DEPTH);
}

void attn__buf_restore(attn_buf *b, size_t start) {
  if (b->data) {
    b->len = start;
    b->data[start] = '\0';
  }
}

attn_status attn__json_list(attn_buf *out, const char *open, const void *items,
                            size_t size, size_t n, attn__put_item put,
                            const char *close) {
  size_t start = out->len;
  attn_status s = attn_buf_puts(out, open);
  for (size_t i = 0; !s && i < n; i++)
    if (!i || !(s = attn_buf_append(out, ",", 1)))
      s = put(out, (const char *)items + i * size);
  if (!s) s = attn_buf_puts(out, close);
  if (s) attn__buf_restore(out, start);
  return s;
}

attn_status attn__json_shape(attn_buf *b, int rank, const int64_t *shape) {
  attn_status s = attn_buf_append(b, "[", 1);
  for (int i = 0; s == ATTN_OK && i < rank; i++)
    if (!i || (s = attn_buf_append(b, ",", 1)) == ATTN_OK)
      s = attn_buf_i64(b, shape[i]);
  return s == ATTN_OK ? attn_buf_append(b, "]", 1) : s;
}

attn_status attn_error_json(attn_buf *out, const char *msg) {
  size_t start = out->len;
  attn_status s = attn_buf_puts(out, "{\"error\":");
  if (s == ATTN_OK) s = attn_buf_json_string(out, msg);
  if (s == ATTN_OK) s = attn_buf_puts(out, "}");
  if (s != ATTN_OK) attn__buf_restore(out, start);
  return s;
}
