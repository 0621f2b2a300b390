/* error_json.c - the {"error": ...} body and the JSON plumbing that the v2
 * and v1 codecs share: effective limits, float printing.
 *
 * Design
 *  - Floats: every float a codec prints goes through attn__json_f32,
 *    attn__json_f32_list or attn__json_f32_rows, which use the shortest
 *    round-trip text of include/attn/f32fmt.h.  Non-finite values become
 *    null: JSON has no NaN or Infinity, and a response must stay parseable.
 *  - Request bodies are parsed by src/json/ (include/attn/json.h): a strict
 *    parser building arena-backed cJSON trees.
 *
 * Threads: stateless and reentrant.
 */
#include <math.h>
#include <string.h>

#include "attn/codec.h"

#include "attn/f32fmt.h"

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

attn_status attn__json_f32(attn_buf *b, float v) {
  if (!isfinite(v)) return attn_buf_append(b, "null", 4);
  attn_status s = attn_buf_reserve(b, ATTN_F32_MAX_CHARS + 1);
  if (s != ATTN_OK) return s;
  size_t n = attn_f32_shortest(v, b->data + b->len);
  b->len += n;
  b->data[b->len] = '\0'; /* buf.c keeps data NUL-terminated */
  return ATTN_OK;
}

attn_status attn__json_f32_list(attn_buf *b, const float *v, size_t n,
                                int64_t stride, bool lead_comma) {
  /* Room for a chunk at a time: one reserve per 1024 numbers instead of one
   * per number; the buffer still grows geometrically.  A contiguous chunk
   * goes to attn_f32_shortest_list (same bytes, vectorised where the CPU
   * allows), which needs no more room than the loop below. */
  enum { CHUNK = 1024 };
  for (size_t i = 0; i < n;) {
    size_t m = n - i < CHUNK ? n - i : CHUNK;
    attn_status s = attn_buf_reserve(b, m * (ATTN_F32_MAX_CHARS + 1) + 1);
    if (s != ATTN_OK) return s;
    char *p = b->data + b->len;
    if (stride == 1) {
      if (i || lead_comma) *p++ = ',';
      p += attn_f32_shortest_list(v + i, m, p);
      i += m;
      b->len = (size_t)(p - b->data);
      b->data[b->len] = '\0'; /* buf.c keeps data NUL-terminated */
      continue;
    }
    for (size_t k = 0; k < m; k++, i++) {
      float x = v[(int64_t)i * stride];
      if (i || lead_comma) *p++ = ',';
      if (isfinite(x)) {
        p += attn_f32_shortest(x, p);
      } else {
        memcpy(p, "null", 4);
        p += 4;
      }
    }
    b->len = (size_t)(p - b->data);
    b->data[b->len] = '\0'; /* buf.c keeps data NUL-terminated */
  }
  return ATTN_OK;
}

attn_status attn__json_f32_rows(attn_buf *b, const float *v, size_t rows,
                                size_t cols, size_t ld) {
  /* As many rows at a time as make about one list chunk (the room reserved
   * stays as small as attn__json_f32_list's); longer rows go one by one
   * through it. */
  enum { CHUNK = 1024 };
  for (size_t r = 0; r < rows;) {
    attn_status s;
    if (cols > CHUNK) {
      if ((s = attn_buf_append(b, r ? ",[" : "[", r ? 2 : 1)) != ATTN_OK ||
          (s = attn__json_f32_list(b, v + r * ld, cols, 1, false)) !=
              ATTN_OK ||
          (s = attn_buf_append(b, "]", 1)) != ATTN_OK)
        return s;
      r++;
      continue;
    }
    size_t m = cols ? CHUNK / cols : CHUNK;
    if (m > rows - r) m = rows - r;
    s = attn_buf_reserve(b, ATTN_F32_ROWS_MAX_CHARS(m, cols) + 2);
    if (s != ATTN_OK) return s;
    char *p = b->data + b->len;
    if (r) *p++ = ',';
    p += attn_f32_shortest_rows(v + r * ld, m, cols, ld, p);
    r += m;
    b->len = (size_t)(p - b->data);
    b->data[b->len] = '\0'; /* buf.c keeps data NUL-terminated */
  }
  return ATTN_OK;
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
  if (s != ATTN_OK && out->data) {
    out->len = start;
    out->data[start] = '\0';
  }
  return s;
}
