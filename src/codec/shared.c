/* shared.c - what the v2 and v1 codecs share: the {"error": ...} body,
 * the effective decoder limits, an object's keys matched against the
 * fields a body takes (with a "did you mean"), tensor shapes, nested float
 * arrays and lists of items as JSON arrays, undoing a failed encoder's
 * appends.
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
#include <cjson/cJSON.h>
#include <stdint.h>
#include <string.h>

#include "attn/codec.h"
#include "attn/f32fmt.h"
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

/* Levenshtein distance, for "did you mean"; strings longer than 63 bytes
 * count as far from everything. */
static size_t edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b), row[64], prev, tmp;
  if (la > 63 || lb > 63) return SIZE_MAX;
  for (size_t j = 0; j <= lb; j++) row[j] = j;
  for (size_t i = 1; i <= la; i++) {
    prev = row[0];
    row[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t best = prev + (a[i - 1] != b[j - 1]);
      if (row[j] + 1 < best) best = row[j] + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      tmp = row[j];
      row[j] = best;
      prev = tmp;
    }
  }
  return row[lb];
}

attn_status attn__match_keys(const cJSON *obj, const char *const *names,
                             size_t n, const cJSON **slots, const char *where,
                             attn_diag *d) {
  const cJSON *c;
  cJSON_ArrayForEach(c, obj) {
    size_t i = 0;
    while (i < n && strcmp(c->string, names[i]) != 0) i++;
    if (i == n) {
      size_t best = SIZE_MAX, bi = 0;
      for (size_t j = 0; j < n; j++) {
        size_t e = edit_distance(c->string, names[j]);
        if (e < best) best = e, bi = j;
      }
      if (best <= 2)
        return attn_diag_set(d, ATTN_EINVAL,
                             "%sunknown field '%.64s' (did you mean '%s'?)",
                             where, c->string, names[bi]);
      return attn_diag_set(d, ATTN_EINVAL, "%sunknown field '%.64s'", where,
                           c->string);
    }
    if (slots[i])
      return attn_diag_set(d, ATTN_EINVAL, "%sduplicate field '%s'", where,
                           names[i]);
    slots[i] = c;
  }
  return ATTN_OK;
}

attn_status attn__json_nested(attn_buf *b, const float *base,
                              const attn__dimspec *outer, int n_outer,
                              const attn__dimspec *inner) {
  attn_status s = attn_buf_append(b, "[", 1);
  if (n_outer == 1 && inner->stride == 1 &&
      outer[0].stride >= 0) { /* rows of a matrix: one call */
    if (s == ATTN_OK)
      s = attn_f32_append_rows(b, base, (size_t)outer[0].n, (size_t)inner->n,
                               (size_t)outer[0].stride);
  } else if (n_outer > 0) {
    for (int64_t i = 0; s == ATTN_OK && i < outer[0].n; i++) {
      if (i) s = attn_buf_append(b, ",", 1);
      if (s == ATTN_OK)
        s = attn__json_nested(b, base + i * outer[0].stride, outer + 1,
                              n_outer - 1, inner);
    }
  } else if (s == ATTN_OK) {
    s = attn_f32_append_list(b, base, (size_t)inner->n, inner->stride, false);
  }
  return s == ATTN_OK ? attn_buf_append(b, "]", 1) : s;
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
