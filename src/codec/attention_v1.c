/* attention_v1.c - the /v1/attention JSON format: decoding into an
 * attn_infer_request for the built-in "sdpa" or "mha" model or a resident
 * model, and encoding the answer.  docs/api.md is the public contract of the
 * field names.
 *
 * Design
 *  - A v1 body is one JSON object of nested arrays ("query": [[..],[..]]).
 *    A nested array's shape is read from its first elements, checked against
 *    the element limit, and only then allocated and filled; the fill checks
 *    every row so ragged input is an error with the index path
 *    ("query[3]: row has 63 numbers, expected 64").
 *  - Mapping (names are what the models take; see codec.h):
 *      no weights, no model -> "sdpa": query/key/value [.., L, H*D] are cut
 *        into heads [.., H, L, D] (column block h -> head h; one copy, none
 *        when H = 1) and key/value are always present (self-attention's
 *        key is a view of the query, value defaults to a view of the key:
 *        no copies);
 *      "weights" -> "mha": tensors as sent plus w_q..w_o and b_q..b_o;
 *      "model" -> that resident model: tensors as sent.
 *    attn_v1_info records what was done so attn_v1_encode can undo it: the
 *    sdpa answer [.., H, Lq, Dv] is written as [.., Lq, H*Dv] (output_layout),
 *    each row of H*Dv numbers one list; with H > 1 the heads are first
 *    gathered side by side into one copy (gather_heads: a list per head and
 *    row printed 3x slower).
 *  - Decoding in stages: the keys (match_keys), the cheap checks of the
 *    fields that are not tensors (check_options), the tensors
 *    (parse_tensors), for sdpa the shapes in the request's own words
 *    (check_sdpa_shapes: the model only ever sees the 4-d cut), then the
 *    request (add_inputs, add_options).
 *  - The variants (causal alignment, window, alibi, alibi_slopes, softcap,
 *    rotary) become the model's parameters (docs/api.md), each labelled as
 *    the user wrote it ("window[1]", "rotary.dims") so that the model's
 *    messages name the /v1 field; num_kv_heads cuts key and value into
 *    that many heads; key_lengths becomes an INT64 input.
 *  - Unknown fields are errors with a "did you mean" (edit distance <= 2).
 *  - GET /v1/models's list is written here too (attn_v1_encode_models),
 *    from plain rows the server fills from the registry.
 *  - Any failure frees everything decoded so far; *out ends zeroed.
 *
 * Threads: reentrant; no state.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/tensor.h" /* attn_f32_in_range */
#include "attn/codec.h"
#include "attn/f32fmt.h"
#include "attn/json.h"
#include "internal.h"

/* ---- helpers ------------------------------------------------------------ */

static char *dupstr(const char *s) {
  size_t n = strlen(s) + 1;
  char *p = malloc(n);
  if (p) memcpy(p, s, n);
  return p;
}

/* ---- nested arrays -> tensors ------------------------------------------- */

enum { LEAF_NUM = 1, LEAF_BOOL = 2 };

typedef struct nest_ctx {
  const char *field;
  attn_dtype dt; /* FP32 or BOOL */
  int rank;
  int64_t shape[ATTN_MAX_RANK];
  void *dst;
  size_t pos;
  int64_t idx[ATTN_MAX_RANK];
  attn_diag *d;
} nest_ctx;

/* "query[3][1]" for the first `depth` indices. */
static const char *nest_path(const nest_ctx *c, int depth, char *buf,
                             size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "%s", c->field);
  for (int k = 0; k < depth && n < cap; k++)
    n += (size_t)snprintf(buf + n, cap - n, "[%lld]", (long long)c->idx[k]);
  return buf;
}

/* A BOOL tensor's leaf that is `kind` instead of a boolean. */
static attn_status nest_not_bool(nest_ctx *c, const char *kind, int depth) {
  char p[128];
  return attn_diag_set(c->d, ATTN_EINVAL,
                       "%s: expected true or false (like the first "
                       "element), got %s",
                       nest_path(c, depth, p, sizeof p), kind);
}

/* A number outside the FP32 range. */
static attn_status nest_out_of_range(nest_ctx *c, double v, int depth) {
  char p[128];
  return attn_diag_set(c->d, ATTN_ENONFINITE,
                       "%s: %.9g is outside the FP32 range",
                       nest_path(c, depth, p, sizeof p), v);
}

static attn_status nest_leaf(nest_ctx *c, const cJSON *e, int depth) {
  char p[128];
  if (c->dt == ATTN_DT_BOOL) {
    if (!cJSON_IsBool(e)) return nest_not_bool(c, attn_json_kind(e), depth);
    ((uint8_t *)c->dst)[c->pos++] = cJSON_IsTrue(e) ? 1 : 0;
    return ATTN_OK;
  }
  if (!cJSON_IsNumber(e))
    return attn_diag_set(c->d, ATTN_EINVAL, "%s: expected a number, got %s",
                         nest_path(c, depth, p, sizeof p), attn_json_kind(e));
  if (!attn_f32_in_range(e->valuedouble))
    return nest_out_of_range(c, e->valuedouble, depth);
  ((float *)c->dst)[c->pos++] = (float)e->valuedouble;
  return ATTN_OK;
}

/* A packed row (see attn_json_parse_ex) at the leaf level. */
static attn_status nest_packed(nest_ctx *c, const double *v, size_t n,
                               int depth) {
  if (c->dt == ATTN_DT_BOOL) {
    c->idx[depth] = 0;
    return nest_not_bool(c, "a number", depth + 1);
  }
  size_t k = attn_json_f64_to_f32(v, n, (float *)c->dst + c->pos);
  if (k < n) {
    c->idx[depth] = (int64_t)k;
    return nest_out_of_range(c, v[k], depth + 1);
  }
  c->pos += n;
  return ATTN_OK;
}

static attn_status nest_fill(nest_ctx *c, const cJSON *arr, int depth) {
  char p[128];
  size_t n = attn_json_len(arr);
  if ((int64_t)n != c->shape[depth]) {
    if (depth == c->rank - 1)
      return attn_diag_set(c->d, ATTN_EINVAL,
                           "%s: row has %zu %s, expected %lld",
                           nest_path(c, depth, p, sizeof p), n,
                           c->dt == ATTN_DT_BOOL ? "values" : "numbers",
                           (long long)c->shape[depth]);
    return attn_diag_set(c->d, ATTN_EINVAL, "%s: has %zu arrays, expected %lld",
                         nest_path(c, depth, p, sizeof p), n,
                         (long long)c->shape[depth]);
  }
  const double *v = attn_json_packed(arr, &n);
  if (v && depth + 1 < c->rank) {
    c->idx[depth] = 0;
    return attn_diag_set(
        c->d, ATTN_EINVAL, "%s: expected an array of %lld, got a number",
        nest_path(c, depth + 1, p, sizeof p), (long long)c->shape[depth + 1]);
  }
  if (v) return nest_packed(c, v, n, depth);
  const cJSON *e;
  int64_t k = 0;
  cJSON_ArrayForEach(e, arr) {
    attn_status s;
    c->idx[depth] = k++;
    if (depth + 1 < c->rank) {
      if (!cJSON_IsArray(e))
        return attn_diag_set(c->d, ATTN_EINVAL,
                             "%s: expected an array of %lld, got %s",
                             nest_path(c, depth + 1, p, sizeof p),
                             (long long)c->shape[depth + 1], attn_json_kind(e));
      s = nest_fill(c, e, depth + 1);
    } else {
      s = nest_leaf(c, e, depth + 1);
    }
    if (s != ATTN_OK) return s;
  }
  return ATTN_OK;
}

/* Parse a nested array of numbers (FP32) or of booleans (BOOL), as `allow`
 * permits; the first leaf decides.  On success *t owns new data; on failure
 * *t is zeroed. */
static attn_status parse_nested(const cJSON *item, const char *field,
                                unsigned allow, const attn_codec_limits *lim,
                                attn_tensor *t, attn_diag *d) {
  nest_ctx c = {.field = field, .d = d};
  const cJSON *leaf = item;
  char p[128], sh[160];
  size_t numel;
  memset(t, 0, sizeof *t);
  if (!cJSON_IsArray(item))
    return attn_diag_set(
        d, ATTN_EINVAL, "'%s' must be a nested array of %s, got %s", field,
        allow & LEAF_NUM ? "numbers" : "booleans", attn_json_kind(item));
  bool packed = false; /* the first leaf is a number in a packed row */
  while (leaf && cJSON_IsArray(leaf)) {
    size_t nv;
    if (c.rank == ATTN_MAX_RANK)
      return attn_diag_set(d, ATTN_EINVAL, "%s: nested deeper than %d levels",
                           field, ATTN_MAX_RANK);
    c.idx[c.rank] = 0;
    c.shape[c.rank++] = (int64_t)attn_json_len(leaf);
    if (attn_json_packed(leaf, &nv)) {
      packed = true;
      break;
    }
    leaf = leaf->child;
  }
  if (packed && (allow & LEAF_NUM))
    c.dt = ATTN_DT_FP32;
  else if (packed)
    return attn_diag_set(d, ATTN_EINVAL,
                         "%s: expected true or false, got "
                         "a number",
                         nest_path(&c, c.rank, p, sizeof p));
  else if (!leaf)
    c.dt = allow & LEAF_NUM ? ATTN_DT_FP32 : ATTN_DT_BOOL;
  else if ((allow & LEAF_BOOL) && cJSON_IsBool(leaf))
    c.dt = ATTN_DT_BOOL;
  else if ((allow & LEAF_NUM) && cJSON_IsNumber(leaf))
    c.dt = ATTN_DT_FP32;
  else
    return attn_diag_set(d, ATTN_EINVAL, "%s: expected %s, got %s",
                         nest_path(&c, c.rank, p, sizeof p),
                         allow == LEAF_BOOL  ? "true or false"
                         : allow == LEAF_NUM ? "a number"
                                             : "a number or true/false",
                         attn_json_kind(leaf));
  if (!attn_shape_numel(c.rank, c.shape, &numel))
    return attn_diag_set(d, ATTN_ETOOBIG, "%s: shape %s is too large", field,
                         attn_shape_format(sh, sizeof sh, c.rank, c.shape));
  if (numel > lim->max_tensor_elements)
    return attn_diag_set(
        d, ATTN_ETOOBIG,
        "%s: shape %s has %zu elements, above the limit of %zu", field,
        attn_shape_format(sh, sizeof sh, c.rank, c.shape), numel,
        lim->max_tensor_elements);
  size_t bytes = numel * attn_dtype_size(c.dt);
  if (!(c.dst = malloc(bytes ? bytes : 1))) return ATTN_ENOMEM;
  attn_status s = nest_fill(&c, item, 0);
  if (s != ATTN_OK) {
    free(c.dst);
    return s;
  }
  t->dtype = c.dt;
  t->rank = c.rank;
  memcpy(t->shape, c.shape, sizeof c.shape);
  t->data = c.dst;
  t->owns = true;
  return ATTN_OK;
}

static attn_status want_rank(const attn_tensor *t, const char *field, int r1,
                             int r2, const char *layouts, attn_diag *d) {
  char sh[160];
  if (t->rank == r1 || t->rank == r2) return ATTN_OK;
  return attn_diag_set(d, ATTN_EINVAL, "'%s' must be %s, got shape %s", field,
                       layouts,
                       attn_shape_format(sh, sizeof sh, t->rank, t->shape));
}

static const char *plural(long long n) {
  return n == 1 ? "" : "s";
}

/* Labels of the positions of x ([L,D] or [B,L,D], named what): one label
 * per position, or for a batch, B lists of L labels each (read so when
 * there are B entries and the first is a list).  A label may be any JSON
 * value; only the counts are checked. */
static attn_status check_labels(const cJSON *labels, const char *field,
                                const attn_tensor *x, const char *what,
                                attn_diag *d) {
  if (!labels) return ATTN_OK;
  long long L = (long long)x->shape[x->rank - 2];
  long long B = x->rank == 3 ? (long long)x->shape[0] : 0;
  long long n = cJSON_GetArraySize(labels);
  if (B > 0 && n == B && cJSON_IsArray(labels->child)) {
    long long i = 0;
    for (const cJSON *row = labels->child; row; row = row->next, i++) {
      long long m = cJSON_IsArray(row) ? cJSON_GetArraySize(row) : -1;
      if (m < 0)
        return attn_diag_set(d, ATTN_EINVAL,
                             "'%s'[%lld] must be an array of the labels of "
                             "batch %lld of '%s', got %s",
                             field, i, i, what, attn_json_kind(row));
      if (m != L)
        return attn_diag_set(d, ATTN_EINVAL,
                             "'%s'[%lld] has %lld label%s, but '%s' has %lld "
                             "position%s",
                             field, i, m, plural(m), what, L, plural(L));
    }
    return ATTN_OK;
  }
  if (n == L) return ATTN_OK;
  if (B)
    return attn_diag_set(d, ATTN_EINVAL,
                         "'%s' has %lld entr%s, but '%s' is %lld batch%s of "
                         "%lld position%s: give %lld label%s, or %lld "
                         "list%s of them",
                         field, n, n == 1 ? "y" : "ies", what, B,
                         B == 1 ? "" : "es", L, plural(L), L, plural(L), B,
                         plural(B));
  return attn_diag_set(d, ATTN_EINVAL,
                       "'%s' has %lld label%s, but '%s' has %lld position%s",
                       field, n, plural(n), what, L, plural(L));
}

/* [.., L, H*D] -> [.., H, L, D]; consumes *src (zeroed on return). */
static attn_status split_heads(attn_tensor *src, int64_t H, const char *field,
                               attn_tensor *dst, attn_diag *d) {
  int r = src->rank;
  int64_t B = r == 3 ? src->shape[0] : 1, L = src->shape[r - 2],
          D = src->shape[r - 1];
  memset(dst, 0, sizeof *dst);
  if (D % H != 0)
    return attn_diag_set(d, ATTN_EINVAL,
                         "'%s': last dimension %lld is not divisible by "
                         "num_heads %lld",
                         field, (long long)D, (long long)H);
  int64_t Dh = D / H;
  *dst = *src;
  dst->rank = r + 1;
  dst->shape[r - 2] = H;
  dst->shape[r - 1] = L;
  dst->shape[r] = Dh;
  if (H == 1) { /* same bytes, one more dimension: move, do not copy */
    memset(src, 0, sizeof *src);
    return ATTN_OK;
  }
  size_t bytes = (size_t)(B * L * D) * sizeof(float);
  float *out = malloc(bytes ? bytes : 1);
  if (!out) {
    memset(dst, 0, sizeof *dst);
    return ATTN_ENOMEM;
  }
  const float *in = src->data;
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t i = 0; i < L; i++)
        memcpy(out + ((b * H + h) * L + i) * Dh, in + (b * L + i) * D + h * Dh,
               (size_t)Dh * sizeof(float));
  dst->data = out;
  dst->owns = true;
  attn_tensor_free(src);
  return ATTN_OK;
}

/* dst reads src's data without owning it: self-attention's key is the query,
 * a missing value is the key.  The request frees src (its owner) along with
 * dst, and nothing writes to inputs, so one buffer serves both. */
static void alias_tensor(const attn_tensor *src, attn_tensor *dst) {
  *dst = *src;
  dst->owns = false;
}

/* ---- building the request ----------------------------------------------- */

enum {
  K_QUERY,
  K_KEY,
  K_VALUE,
  K_NUM_HEADS,
  K_WEIGHTS,
  K_MODEL,
  K_CAUSAL,
  K_SCALE,
  K_ATTN_MASK,
  K_KPM,
  K_NEED_WEIGHTS,
  K_AVG,
  K_TOKENS,
  K_KEY_TOKENS,
  K_WINDOW, /* the variants (issue 34) and the v2 parity fields */
  K_ALIBI,
  K_SLOPES,
  K_SOFTCAP,
  K_ROTARY,
  K_NUM_KV,
  K_KLEN,
  K_PRECISION, /* issue 35 */
  K_COUNT
};
static const char *const top_names[K_COUNT] = {
    "query",        "key",
    "value",        "num_heads",
    "weights",      "model",
    "causal",       "scale",
    "attn_mask",    "key_padding_mask",
    "need_weights", "average_attn_weights",
    "tokens",       "key_tokens",
    "window",       "alibi",
    "alibi_slopes", "softcap",
    "rotary",       "num_kv_heads",
    "key_lengths",  "precision"};

/* Members whose arrays of numbers reach this file packed: exactly the ones
 * read by parse_nested. */
static const char *const packed_keys[] = {
    "query", "key", "value", "attn_mask",    "key_padding_mask",
    "w_q",   "w_k", "w_v",   "w_o",          "b_q",
    "b_k",   "b_v", "b_o",   "alibi_slopes", NULL};

#define N_WEIGHTS 8 /* the first four are required */
static const char *const weight_names[N_WEIGHTS] = {"w_q", "w_k", "w_v", "w_o",
                                                    "b_q", "b_k", "b_v", "b_o"};

#define MAX_V1_INPUTS (7 + N_WEIGHTS)
#define MAX_V1_PARAMS 17

/* The members of 'rotary', as the rotary_* parameters they become. */
#define N_ROTARY 4
static const char *const rotary_names[N_ROTARY] = {
    "base", "dims", "interleaved", "query_offset"};

/* Moves *t into a new input named `name`; *t is consumed (zeroed) even on
 * failure. */
static attn_status add_input(attn_infer_request *r, const char *name,
                             attn_tensor *t) {
  attn_infer_input *in = &r->inputs[r->n_inputs];
  if (!(in->name = dupstr(name))) {
    attn_tensor_free(t);
    return ATTN_ENOMEM;
  }
  in->wire_dtype = t->dtype;
  in->tensor = *t;
  memset(t, 0, sizeof *t);
  r->n_inputs++;
  return ATTN_OK;
}

static attn_status add_param(attn_infer_request *r, const char *name,
                             attn_param_type type, bool b, int64_t i,
                             double dv) {
  if (r->n_params == MAX_V1_PARAMS) return ATTN_EINTERNAL;
  attn_param *p = &r->params[r->n_params];
  if (!(p->name = dupstr(name))) return ATTN_ENOMEM;
  p->type = type;
  p->b = b;
  p->i = i;
  p->d = dv;
  r->n_params++;
  return ATTN_OK;
}

static attn_status add_echo(attn_infer_request *r, const char *name,
                            const cJSON *item) {
  attn_echo *e = &r->echo[r->n_echo];
  if (!(e->name = dupstr(name))) return ATTN_ENOMEM;
  if (!(e->json = cJSON_PrintUnformatted(item))) {
    free(e->name);
    e->name = NULL;
    return ATTN_ENOMEM;
  }
  r->n_echo++;
  return ATTN_OK;
}

/* Tensors parsed from the body before they move into the request. */
typedef struct v1_tensors {
  attn_tensor q, k, v, mask, kpm, w[N_WEIGHTS], slopes, klen;
} v1_tensors;

static void v1_tensors_free(v1_tensors *t) {
  attn_tensor_free(&t->slopes);
  attn_tensor_free(&t->klen);
  attn_tensor_free(&t->q);
  attn_tensor_free(&t->k);
  attn_tensor_free(&t->v);
  attn_tensor_free(&t->mask);
  attn_tensor_free(&t->kpm);
  for (int i = 0; i < N_WEIGHTS; i++) attn_tensor_free(&t->w[i]);
}

static attn_status check_bool(const cJSON *it, const char *name, attn_diag *d) {
  if (!it || cJSON_IsBool(it)) return ATTN_OK;
  return attn_diag_set(d, ATTN_EINVAL, "'%s' must be true or false, got %s",
                       name, attn_json_kind(it));
}

/* 'model': a resident model's name, not with 'weights', not a built-in. */
static attn_status check_model(const cJSON *const *f, attn_diag *d) {
  const cJSON *m = f[K_MODEL];
  if (!cJSON_IsString(m) || !m->valuestring[0] ||
      strlen(m->valuestring) > ATTN_MAX_NAME_LEN)
    return attn_diag_set(d, ATTN_EINVAL,
                         "'model' must be a model name (1..%d bytes), got %s",
                         ATTN_MAX_NAME_LEN, attn_json_kind(m));
  if (f[K_WEIGHTS])
    return attn_diag_set(d, ATTN_EINVAL,
                         "give either 'model' (a resident model) or "
                         "'weights', not both");
  if (strcmp(m->valuestring, "sdpa") == 0 || strcmp(m->valuestring, "mha") == 0)
    return attn_diag_set(d, ATTN_EINVAL,
                         "'model': '%s' is chosen automatically (omit "
                         "'model'%s)",
                         m->valuestring,
                         m->valuestring[0] == 'm' ? " and send 'weights'" : "");
  return ATTN_OK;
}

/* An integer count field (num_heads, num_kv_heads) in 1..65536. */
static attn_status check_count(const cJSON *it, const char *name,
                               attn_diag *d) {
  double x = cJSON_IsNumber(it) ? it->valuedouble : 0;
  if (!it || ((x >= 1 && x <= 65536) && x == floor(x))) return ATTN_OK;
  if (cJSON_IsNumber(it))
    return attn_diag_set(d, ATTN_EINVAL,
                         "'%s' must be an integer in 1..65536, got %.15g", name,
                         x);
  return attn_diag_set(d, ATTN_EINVAL,
                       "'%s' must be an integer in 1..65536, got %s", name,
                       attn_json_kind(it));
}

/* The variant fields' JSON types (their values are checked by the model,
 * which names them as written here): causal, window, alibi, softcap,
 * rotary (its members into rf), num_kv_heads, key_lengths; and is_causal,
 * PyTorch's name, answered with the alignment it means. */
static attn_status check_variant_fields(const cJSON *const *f, const cJSON **rf,
                                        attn_diag *d) {
  const cJSON *c = f[K_CAUSAL], *w = f[K_WINDOW], *r = f[K_ROTARY];
  attn_status s;
  if (c && !cJSON_IsBool(c) && !cJSON_IsString(c))
    return attn_diag_set(d, ATTN_EINVAL,
                         "'causal' must be true, false, \"bottom_right\" or "
                         "\"top_left\", got %s",
                         attn_json_kind(c));
  if (w && (!cJSON_IsArray(w) || cJSON_GetArraySize(w) != 2 ||
            !cJSON_IsNumber(w->child) || !cJSON_IsNumber(w->child->next)))
    return attn_diag_set(
        d, ATTN_EINVAL,
        "'window' must be [left, right]: two integers, -1 "
        "for unbounded (got %s)",
        cJSON_IsArray(w) ? "another array" : attn_json_kind(w));
  if ((s = check_bool(f[K_ALIBI], "alibi", d)) ||
      (s = check_count(f[K_NUM_KV], "num_kv_heads", d)))
    return s;
  if (f[K_SOFTCAP] && !cJSON_IsNumber(f[K_SOFTCAP]))
    return attn_diag_set(d, ATTN_EINVAL, "'softcap' must be a number, got %s",
                         attn_json_kind(f[K_SOFTCAP]));
  if (r && !cJSON_IsObject(r) && !cJSON_IsBool(r))
    return attn_diag_set(d, ATTN_EINVAL,
                         "'rotary' must be an object {\"base\", \"dims\", "
                         "\"interleaved\", \"query_offset\"} (or true for "
                         "the defaults), got %s",
                         attn_json_kind(r));
  if (cJSON_IsObject(r) &&
      (s = attn__match_keys(r, rotary_names, N_ROTARY, rf, "rotary: ", d)))
    return s;
  for (int i = 0; i < N_ROTARY; i++) {
    bool flag = i == 2;
    if (rf[i] && (flag ? !cJSON_IsBool(rf[i]) : !cJSON_IsNumber(rf[i])))
      return attn_diag_set(d, ATTN_EINVAL, "'rotary.%s' must be %s, got %s",
                           rotary_names[i], flag ? "true or false" : "a number",
                           attn_json_kind(rf[i]));
  }
  if (f[K_KLEN] && !cJSON_IsArray(f[K_KLEN]))
    return attn_diag_set(d, ATTN_EINVAL,
                         "'key_lengths' must be an array of integers, one per "
                         "batch entry, got %s",
                         attn_json_kind(f[K_KLEN]));
  return ATTN_OK;
}

/* The cheap checks, before any tensor is parsed: the fields that are not
 * tensors, which fields need which, and the keys of 'weights' (their
 * members into wf). */
static attn_status check_options(const cJSON *const *f, const cJSON **wf,
                                 const cJSON **rf, attn_diag *d) {
  attn_status s;
  if ((s = check_count(f[K_NUM_HEADS], "num_heads", d)) ||
      (s = check_variant_fields(f, rf, d)) ||
      (s = check_bool(f[K_NEED_WEIGHTS], "need_weights", d)) ||
      (s = check_bool(f[K_AVG], "average_attn_weights", d)))
    return s;
  if (f[K_SCALE] &&
      (!cJSON_IsNumber(f[K_SCALE]) || !isfinite(f[K_SCALE]->valuedouble)))
    return attn_diag_set(d, ATTN_EINVAL,
                         "'scale' must be a finite number, got %s",
                         attn_json_kind(f[K_SCALE]));
  if (f[K_MODEL] && (s = check_model(f, d))) return s;
  if (f[K_PRECISION] && !cJSON_IsString(f[K_PRECISION]))
    return attn_diag_set(d, ATTN_EINVAL,
                         "'precision' must be \"fp32\" or \"bf16\", got %s",
                         attn_json_kind(f[K_PRECISION]));
  if (f[K_TOKENS] && !cJSON_IsArray(f[K_TOKENS]))
    return attn_diag_set(d, ATTN_EINVAL, "'tokens' must be an array, got %s",
                         attn_json_kind(f[K_TOKENS]));
  if (f[K_KEY_TOKENS] && !cJSON_IsArray(f[K_KEY_TOKENS]))
    return attn_diag_set(d, ATTN_EINVAL,
                         "'key_tokens' must be an array, got %s",
                         attn_json_kind(f[K_KEY_TOKENS]));
  if (!f[K_QUERY]) return attn_diag_set(d, ATTN_EINVAL, "missing 'query'");
  if (f[K_VALUE] && !f[K_KEY])
    return attn_diag_set(d, ATTN_EINVAL, "'value' given without 'key'");
  if (f[K_WEIGHTS]) {
    if (!cJSON_IsObject(f[K_WEIGHTS]))
      return attn_diag_set(d, ATTN_EINVAL,
                           "'weights' must be an object, got %s",
                           attn_json_kind(f[K_WEIGHTS]));
    if ((s = attn__match_keys(f[K_WEIGHTS], weight_names, N_WEIGHTS, wf,
                              "weights: ", d)))
      return s;
    for (int i = 0; i < 4; i++)
      if (!wf[i])
        return attn_diag_set(d, ATTN_EINVAL, "weights: missing '%s'",
                             weight_names[i]);
  }
  return ATTN_OK;
}

/* 'key_lengths': [B] integers into an INT64 tensor (their range against
 * the key's length is the model's check). */
static attn_status parse_lengths(const cJSON *a, const attn_codec_limits *lim,
                                 attn_tensor *t, attn_diag *d) {
  size_t n = attn_json_len(a), k = 0;
  if (n > lim->max_tensor_elements)
    return attn_diag_set(d, ATTN_ETOOBIG,
                         "'key_lengths' has %zu entries, above the limit of "
                         "%zu",
                         n, lim->max_tensor_elements);
  int64_t *v = malloc(n ? n * sizeof *v : 1);
  if (!v) return ATTN_ENOMEM;
  for (const cJSON *e = a->child; e; e = e->next, k++) {
    double x = cJSON_IsNumber(e) ? e->valuedouble : -1;
    if (!(x >= 0 && x <= 9007199254740991.0) || x != floor(x)) {
      free(v);
      return attn_diag_set(d, ATTN_EINVAL,
                           "key_lengths[%zu]: expected a key count (an "
                           "integer >= 0), got %s",
                           k, attn_json_kind(e));
    }
    v[k] = (int64_t)x;
  }
  t->dtype = ATTN_DT_INT64;
  t->rank = 1;
  t->shape[0] = (int64_t)n;
  t->data = v;
  t->owns = true;
  return ATTN_OK;
}

/* The tensors into *t, each of a rank its layout allows (wf: the members
 * of 'weights'), then the token labels against them. */
static attn_status parse_tensors(const cJSON *const *f, const cJSON *const *wf,
                                 v1_tensors *t, const attn_codec_limits *lim,
                                 attn_diag *d) {
  attn_status s;
  if ((s = parse_nested(f[K_QUERY], "query", LEAF_NUM, lim, &t->q, d)) ||
      (s = want_rank(&t->q, "query", 2, 3, "[Lq,D] or [B,Lq,D]", d)))
    return s;
  const char *qlay =
      t->q.rank == 2 ? "[L,D] like 'query'" : "[B,L,D] like 'query'";
  if (f[K_KEY] &&
      ((s = parse_nested(f[K_KEY], "key", LEAF_NUM, lim, &t->k, d)) ||
       (s = want_rank(&t->k, "key", t->q.rank, t->q.rank, qlay, d))))
    return s;
  if (f[K_VALUE] &&
      ((s = parse_nested(f[K_VALUE], "value", LEAF_NUM, lim, &t->v, d)) ||
       (s = want_rank(&t->v, "value", t->q.rank, t->q.rank, qlay, d))))
    return s;
  if (f[K_ATTN_MASK] &&
      ((s = parse_nested(f[K_ATTN_MASK], "attn_mask", LEAF_NUM | LEAF_BOOL, lim,
                         &t->mask, d)) ||
       (s = want_rank(&t->mask, "attn_mask", 2, 4, "[Lq,Lk] or [B,H,Lq,Lk]",
                      d))))
    return s;
  if (f[K_KPM]) {
    if ((s = parse_nested(f[K_KPM], "key_padding_mask", LEAF_BOOL, lim, &t->kpm,
                          d)) ||
        (s = want_rank(&t->kpm, "key_padding_mask", 1, 2, "[Lk] or [B,Lk]", d)))
      return s;
    if (t->kpm.rank == 1) { /* [Lk] -> [1,Lk] */
      t->kpm.shape[1] = t->kpm.shape[0];
      t->kpm.shape[0] = 1;
      t->kpm.rank = 2;
    }
  }
  for (int i = 0; i < N_WEIGHTS; i++) {
    char field[16];
    if (!wf[i]) continue;
    snprintf(field, sizeof field, "weights.%s", weight_names[i]);
    if ((s = parse_nested(wf[i], field, LEAF_NUM, lim, &t->w[i], d)) ||
        (s = want_rank(&t->w[i], field, i < 4 ? 2 : 1, i < 4 ? 2 : 1,
                       i < 4 ? "[in,out]" : "[out]", d)))
      return s;
  }
  if (f[K_SLOPES] &&
      ((s = parse_nested(f[K_SLOPES], "alibi_slopes", LEAF_NUM, lim, &t->slopes,
                         d)) ||
       (s = want_rank(&t->slopes, "alibi_slopes", 1, 1,
                      "a list of numbers, one per query head", d))))
    return s;
  if (f[K_KLEN] && (s = parse_lengths(f[K_KLEN], lim, &t->klen, d))) return s;
  /* self-attention: the keys are the query's positions */
  const attn_tensor *keys = f[K_KEY] ? &t->k : &t->q;
  if ((s = check_labels(f[K_TOKENS], "tokens", &t->q, "query", d)) ||
      (s = check_labels(f[K_KEY_TOKENS], "key_tokens", keys,
                        f[K_KEY] ? "key" : "query", d)))
    return s;
  return ATTN_OK;
}

/* The fields of the body (f, by K_*): cheap checks first, then the
 * tensors. */
static attn_status parse_fields(const cJSON *const *f, const cJSON **rf,
                                v1_tensors *t, const attn_codec_limits *lim,
                                attn_diag *d) {
  const cJSON *wf[N_WEIGHTS] = {0};
  attn_status s = check_options(f, wf, rf, d);
  return s ? s : parse_tensors(f, wf, t, lim, d);
}

static const char *v1_shape(const attn_tensor *t, char *buf, size_t cap) {
  return attn_shape_format(buf, cap, t->rank, t->shape);
}

/* The masks, key_lengths and alibi_slopes of the sdpa mapping against its
 * B, H, Lq and Lk, in the request's words. */
static attn_status check_v1_masks(const v1_tensors *t, long long B, long long H,
                                  long long Lq, long long Lk, attn_diag *d) {
  const attn_tensor *m = &t->mask, *p = &t->kpm;
  char sh[96];
  if (m->data) {
    const int64_t *x = m->shape;
    bool ok = m->rank == 2
                  ? x[0] == Lq && x[1] == Lk
                  : (x[0] == 1 || x[0] == B) && (x[1] == 1 || x[1] == H) &&
                        x[2] == Lq && x[3] == Lk;
    if (!ok)
      return attn_diag_set(d, ATTN_ESHAPE,
                           "'attn_mask' is %s, expected [Lq, Lk] = [%lld, "
                           "%lld] (a row per query position, a column per "
                           "key) or [B, H, Lq, Lk] = [%lld, %lld, %lld, "
                           "%lld] (B and H may be 1)",
                           v1_shape(m, sh, sizeof sh), Lq, Lk, B, H, Lq, Lk);
  }
  if (p->data && (p->shape[1] != Lk || (p->shape[0] != B && p->shape[0] != 1)))
    return attn_diag_set(d, ATTN_ESHAPE,
                         "'key_padding_mask' has %lld column%s, expected [Lk] "
                         "= [%lld] or [B, Lk] = [%lld, %lld]: one per key",
                         (long long)p->shape[1], plural(p->shape[1]), Lk, B,
                         Lk);
  if (p->data && p->shape[0] != B)
    return attn_diag_set(d, ATTN_ESHAPE,
                         "'key_padding_mask' has %lld rows, but 'query' has "
                         "a batch of %lld",
                         (long long)p->shape[0], B);
  if (t->klen.data && t->klen.shape[0] != B)
    return attn_diag_set(
        d, ATTN_ESHAPE,
        "'key_lengths' has %lld entr%s, but 'query' has %s "
        "%lld: one per batch entry",
        (long long)t->klen.shape[0], t->klen.shape[0] == 1 ? "y" : "ies",
        t->q.rank == 3 ? "a batch of" : "no batch: expected", B);
  if (t->slopes.data && t->slopes.shape[0] != H)
    return attn_diag_set(d, ATTN_ESHAPE,
                         "'alibi_slopes' has %lld value%s, but num_heads is "
                         "%lld: give one slope per query head",
                         (long long)t->slopes.shape[0],
                         plural(t->slopes.shape[0]), H);
  return ATTN_OK;
}

/* The shapes of the sdpa mapping ([.., L, H*D] cut into heads) checked in
 * the request's own rank and words, before the cut: batches, rows,
 * columns against num_heads and num_kv_heads, and the masks. */
static attn_status check_sdpa_shapes(const v1_tensors *t, int64_t H,
                                     int64_t Hkv, attn_diag *d) {
  const attn_tensor *q = &t->q, *k = t->k.data ? &t->k : q,
                    *v = t->v.data ? &t->v : k;
  const char *kn = t->k.data ? "'key'" : "'key' (the query: none given)";
  const char *vn = t->v.data ? "'value'" : "'value' (the key: none given)";
  const int r = q->rank;
  const char *rows = r == 3 ? "positions" : "rows";
  const long long B = r == 3 ? q->shape[0] : 1, Dq = q->shape[r - 1],
                  Lq = q->shape[r - 2], Lk = k->shape[r - 2],
                  Dk = k->shape[r - 1], Dv = v->shape[r - 1];
  if (r == 3 && (k->shape[0] != B || v->shape[0] != B))
    return attn_diag_set(d, ATTN_ESHAPE,
                         "%s has a batch of %lld where "
                         "'query' has %lld",
                         k->shape[0] != B ? kn : vn,
                         (long long)(k->shape[0] != B ? k : v)->shape[0], B);
  if (v->shape[r - 2] != Lk)
    return attn_diag_set(d, ATTN_ESHAPE, "%s has %lld %s where %s has %lld", vn,
                         (long long)v->shape[r - 2], rows, kn, Lk);
  if (Dq % H != 0)
    return attn_diag_set(d, ATTN_ESHAPE,
                         "'query' has %lld columns, not a multiple of "
                         "num_heads %lld (each head takes an equal block)",
                         Dq, (long long)H);
  if (H % Hkv != 0)
    return attn_diag_set(d, ATTN_EINVAL,
                         "num_heads %lld is not a multiple of num_kv_heads "
                         "%lld",
                         (long long)H, (long long)Hkv);
  if (Dk != Hkv * (Dq / H) && Hkv == H)
    return attn_diag_set(d, ATTN_ESHAPE,
                         "%s has %lld columns where 'query' "
                         "has %lld",
                         kn, Dk, Dq);
  if (Dk != Hkv * (Dq / H))
    return attn_diag_set(d, ATTN_ESHAPE,
                         "%s has %lld columns, but num_kv_heads %lld heads of "
                         "the query's head size %lld make %lld",
                         kn, Dk, (long long)Hkv, Dq / H,
                         (long long)Hkv * (Dq / H));
  if (Dv % Hkv != 0)
    return attn_diag_set(
        d, ATTN_ESHAPE, "%s has %lld columns, not a multiple of %s %lld", vn,
        Dv, Hkv == H ? "num_heads" : "num_kv_heads", (long long)Hkv);
  return check_v1_masks(t, B, H, Lq, Lk, d);
}

/* The input tensors request `map` makes of t. */
static size_t count_inputs(attn_v1_mapping map, const v1_tensors *t) {
  size_t n_in = 1 + (t->mask.data != NULL) + (t->kpm.data != NULL);
  if (map == ATTN_V1_SDPA)
    n_in += 2;
  else
    n_in += (t->k.data != NULL) + (t->v.data != NULL);
  for (int i = 0; i < N_WEIGHTS; i++) n_in += t->w[i].data != NULL;
  return n_in + (t->slopes.data != NULL) + (t->klen.data != NULL);
}

/* t's tensors move into out's inputs: for sdpa, query, key and value cut
 * into H heads (self-attention's key a view of the query, a missing value
 * one of the key); for the others, as sent; then the masks. */
static attn_status add_inputs(attn_v1_mapping map, int64_t H, int64_t Hkv,
                              v1_tensors *t, attn_infer_request *out,
                              attn_diag *d) {
  attn_status s;
  if (map == ATTN_V1_SDPA) {
    attn_tensor q, k, v;
    bool self = !t->k.data, has_v = t->v.data != NULL;
    if ((s = split_heads(&t->q, H, "query", &q, d))) return s;
    s = add_input(out, "query", &q);
    if (s == ATTN_OK && !self) s = split_heads(&t->k, Hkv, "key", &k, d);
    if (s == ATTN_OK && self) alias_tensor(&out->inputs[0].tensor, &k);
    if (s == ATTN_OK) s = add_input(out, "key", &k);
    if (s == ATTN_OK && has_v) s = split_heads(&t->v, Hkv, "value", &v, d);
    if (s == ATTN_OK && !has_v) /* value defaults to key */
      alias_tensor(&out->inputs[1].tensor, &v);
    if (s == ATTN_OK) s = add_input(out, "value", &v);
    if (s) return s;
  } else {
    if ((s = add_input(out, "query", &t->q))) return s;
    if (t->k.data && (s = add_input(out, "key", &t->k))) return s;
    if (t->v.data && (s = add_input(out, "value", &t->v))) return s;
    for (int i = 0; i < N_WEIGHTS; i++)
      if (t->w[i].data && (s = add_input(out, weight_names[i], &t->w[i])))
        return s;
  }
  if (t->mask.data && (s = add_input(out, "attn_mask", &t->mask))) return s;
  if (t->kpm.data && (s = add_input(out, "key_padding_mask", &t->kpm)))
    return s;
  if (t->klen.data && (s = add_input(out, "key_lengths", &t->klen))) return s;
  if (t->slopes.data && (s = add_input(out, "alibi_slopes", &t->slopes)))
    return s;
  return ATTN_OK;
}

/* A parameter the user wrote as `label` ("window[0]", "rotary.dims"), from
 * the JSON value j (bool, string or number). */
static attn_status add_labelled(attn_infer_request *r, const char *name,
                                const char *label, const cJSON *j) {
  attn_status s;
  if (cJSON_IsBool(j))
    s = add_param(r, name, ATTN_PARAM_BOOL, cJSON_IsTrue(j), 0, 0);
  else if (cJSON_IsString(j))
    s = add_param(r, name, ATTN_PARAM_STRING, false, 0, 0);
  else
    s = add_param(r, name, ATTN_PARAM_DOUBLE, false, 0, j->valuedouble);
  if (s) return s;
  attn_param *p = &r->params[r->n_params - 1];
  if (cJSON_IsString(j) && !(p->s = dupstr(j->valuestring))) return ATTN_ENOMEM;
  if (label && !(p->label = dupstr(label))) return ATTN_ENOMEM;
  return ATTN_OK;
}

/* The variants as the model's parameters (causal, window_left/right,
 * alibi, softcap, rotary and rotary_* from rf), each labelled as the
 * user wrote it. */
static attn_status add_variants(const cJSON *const *f, const cJSON *const *rf,
                                attn_infer_request *out) {
  static const char *const rp[N_ROTARY] = {"rotary_base", "rotary_dims",
                                           "rotary_interleaved",
                                           "rotary_query_offset"};
  attn_status s;
  const cJSON *w = f[K_WINDOW];
  if ((f[K_CAUSAL] && (s = add_labelled(out, "causal", NULL, f[K_CAUSAL]))) ||
      (w && (s = add_labelled(out, "window_left", "window[0]", w->child))) ||
      (w &&
       (s = add_labelled(out, "window_right", "window[1]", w->child->next))) ||
      (f[K_ALIBI] && (s = add_labelled(out, "alibi", NULL, f[K_ALIBI]))) ||
      (f[K_SOFTCAP] && (s = add_labelled(out, "softcap", NULL, f[K_SOFTCAP]))))
    return s;
  if (!f[K_ROTARY]) return ATTN_OK;
  if (cJSON_IsBool(f[K_ROTARY]))
    return add_labelled(out, "rotary", NULL, f[K_ROTARY]);
  if ((s = add_param(out, "rotary", ATTN_PARAM_BOOL, true, 0, 0))) return s;
  for (int i = 0; i < N_ROTARY; i++) {
    char label[32];
    snprintf(label, sizeof label, "rotary.%s", rotary_names[i]);
    if (rf[i] && (s = add_labelled(out, rp[i], label, rf[i]))) return s;
  }
  return ATTN_OK;
}

/* The parameters for the model (num_heads when it takes one), then the
 * labels echoed in the answer. */
static attn_status add_options(const cJSON *const *f, const cJSON *const *rf,
                               attn_v1_mapping map, int64_t H,
                               attn_infer_request *out) {
  attn_status s;
  if ((s = add_variants(f, rf, out))) return s;
  if (map == ATTN_V1_MHA || (map == ATTN_V1_RESIDENT && f[K_NUM_HEADS]))
    if ((s = add_param(out, "num_heads", ATTN_PARAM_INT, false, H, (double)H)))
      return s;
  if (map != ATTN_V1_SDPA && f[K_NUM_KV] &&
      (s = add_param(out, "num_kv_heads", ATTN_PARAM_INT, false,
                     (int64_t)f[K_NUM_KV]->valuedouble,
                     f[K_NUM_KV]->valuedouble)))
    return s;
  if (f[K_SCALE] && (s = add_param(out, "scale", ATTN_PARAM_DOUBLE, false, 0,
                                   f[K_SCALE]->valuedouble)))
    return s;
  if ((s = add_param(out, "need_weights", ATTN_PARAM_BOOL,
                     !f[K_NEED_WEIGHTS] || cJSON_IsTrue(f[K_NEED_WEIGHTS]), 0,
                     0)) ||
      (s = add_param(out, "average_attn_weights", ATTN_PARAM_BOOL,
                     f[K_AVG] && cJSON_IsTrue(f[K_AVG]), 0, 0)))
    return s;
  if (f[K_PRECISION] &&
      (s = add_labelled(out, "precision", NULL, f[K_PRECISION])))
    return s;
  if (f[K_TOKENS] && (s = add_echo(out, "tokens", f[K_TOKENS]))) return s;
  if (f[K_KEY_TOKENS] && (s = add_echo(out, "key_tokens", f[K_KEY_TOKENS])))
    return s;
  return ATTN_OK;
}

/* The body: its fields parsed, the model chosen (the mapping), then the
 * request built: inputs, parameters, echoed labels. */
static attn_status v1_decode(const cJSON *root, const attn_codec_limits *lim,
                             attn_infer_request *out, attn_v1_info *info,
                             attn_diag *d) {
  const cJSON *f[K_COUNT] = {0};
  v1_tensors t;
  attn_status s;
  memset(&t, 0, sizeof t);
  if (!cJSON_IsObject(root))
    return attn_diag_set(d, ATTN_EINVAL,
                         "request must be a JSON object, got %s",
                         attn_json_kind(root));
  if (cJSON_GetObjectItemCaseSensitive(root, "is_causal"))
    return attn_diag_set(d, ATTN_EINVAL,
                         "unknown field 'is_causal': use \"causal\": "
                         "\"top_left\" for PyTorch's is_causal (query i sees "
                         "keys j <= i); \"causal\": true aligns bottom-right "
                         "(j <= i + Lk - Lq), which differs when Lq != Lk");
  if ((s = attn__match_keys(root, top_names, K_COUNT, f, "", d))) return s;
  const cJSON *rf[N_ROTARY] = {0};
  if ((s = parse_fields(f, rf, &t, lim, d))) goto done;

  int64_t H = f[K_NUM_HEADS] ? (int64_t)f[K_NUM_HEADS]->valuedouble : 1;
  int64_t Hkv = f[K_NUM_KV] ? (int64_t)f[K_NUM_KV]->valuedouble : H;
  attn_v1_mapping map = f[K_WEIGHTS] ? ATTN_V1_MHA
                        : f[K_MODEL] ? ATTN_V1_RESIDENT
                                     : ATTN_V1_SDPA;
  if (map == ATTN_V1_SDPA && (s = check_sdpa_shapes(&t, H, Hkv, d))) goto done;
  size_t n_in = count_inputs(map, &t);
  if (n_in > lim->max_inputs) {
    s = attn_diag_set(d, ATTN_ETOOBIG,
                      "request makes %zu input tensors, above the limit of %zu",
                      n_in, lim->max_inputs);
    goto done;
  }
  out->model = dupstr(map == ATTN_V1_MHA    ? "mha"
                      : map == ATTN_V1_SDPA ? "sdpa"
                                            : f[K_MODEL]->valuestring);
  out->inputs = calloc(MAX_V1_INPUTS, sizeof *out->inputs);
  out->params = calloc(MAX_V1_PARAMS, sizeof *out->params);
  out->echo = calloc(2, sizeof *out->echo);
  if (!out->model || !out->inputs || !out->params || !out->echo) {
    s = ATTN_ENOMEM;
    goto done;
  }
  if ((s = add_inputs(map, H, Hkv, &t, out, d)) ||
      (s = add_options(f, rf, map, H, out)))
    goto done;

  info->mapping = map;
  info->heads_sliced = map == ATTN_V1_SDPA;
  info->B_given = out->inputs[0].tensor.rank == (map == ATTN_V1_SDPA ? 4 : 3)
                      ? out->inputs[0].tensor.shape[0]
                      : 0;
  info->H = H;
done:
  v1_tensors_free(&t);
  return s;
}

attn_status attn_v1_decode(const char *body, size_t len,
                           const attn_codec_limits *lim,
                           attn_infer_request *out, attn_v1_info *info,
                           attn_diag *d) {
  attn_codec_limits l;
  attn_v1_info inf;
  cJSON *root = NULL;
  attn_status s;
  memset(out, 0, sizeof *out);
  memset(&inf, 0, sizeof inf);
  if (info) memset(info, 0, sizeof *info);
  attn__codec_limits_eff(lim, &l);
  s = attn_json_parse_ex(body, len, l.max_depth, ATTN_JSON_MAX_NODES,
                         packed_keys, "", &root, d);
  if (s != ATTN_OK) return s;
  out->binary_data_output = -1;
  out->timeout_us = -1;
  s = v1_decode(root, &l, out, &inf, d);
  if (s == ATTN_ENOMEM) attn_diag_set(d, s, "out of memory decoding request");
  attn_json_free(root);
  if (s != ATTN_OK)
    attn_infer_request_free(out);
  else if (info)
    *info = inf;
  return s;
}

/* ---- encoding ----------------------------------------------------------- */

#define TRY(x)                           \
  do {                                   \
    if ((s = (x)) != ATTN_OK) goto fail; \
  } while (0)

/* A contiguous tensor as nested arrays (a rank-0 tensor as one number). */
static attn_status put_tensor(attn_buf *b, const attn_tensor *t) {
  attn__dimspec dims[ATTN_MAX_RANK];
  int64_t stride = 1;
  if (t->rank == 0) return attn_f32_append(b, *(const float *)t->data);
  for (int i = t->rank - 1; i >= 0; i--) {
    dims[i].n = t->shape[i];
    dims[i].stride = stride;
    stride *= t->shape[i];
  }
  return attn__json_nested(b, t->data, dims, t->rank - 1, dims + t->rank - 1);
}

/* "key":v with v in milliseconds, 3 decimals.  key is one of ours (no
 * escaping needed); no printf: this runs for every /v1 answer. */
static attn_status put_ms(attn_buf *b, const char *key, double v) {
  attn_status s = attn_buf_append(b, "\"", 1);
  if (s == ATTN_OK) s = attn_buf_puts(b, key);
  if (s == ATTN_OK) s = attn_buf_append(b, "\":", 2);
  if (s != ATTN_OK) return s;
  return isfinite(v) ? attn_buf_fixed3(b, v) : attn_buf_puts(b, "null");
}

static const attn_infer_output *find_output(const attn_infer_response *r,
                                            const char *name) {
  for (size_t i = 0; i < r->n_outputs; i++)
    if (r->outputs[i].name && strcmp(r->outputs[i].name, name) == 0)
      return &r->outputs[i];
  return NULL;
}

static attn_status usable(const attn_infer_output *o, attn_diag *d) {
  size_t n;
  if (o->tensor.dtype != ATTN_DT_FP32 ||
      !attn_shape_numel(o->tensor.rank, o->tensor.shape, &n) ||
      (n && !o->tensor.data) || (o->tensor.rank == 0 && !o->tensor.data))
    return attn_diag_set(d, ATTN_EINVAL,
                         "response output '%s' is not a valid FP32 tensor",
                         o->name);
  return ATTN_OK;
}

/* [B,H,Lq,Dv] -> [B,Lq,H*Dv] in a new buffer, so that each row of the
 * answer is one list (a list per head and row printed 3x slower for
 * Dv = 8); NULL when out of memory (one byte more, so an empty tensor
 * never asks malloc for 0).  The sizes are those of a tensor that
 * exists, so they do not overflow. */
static float *gather_heads(const float *src, int64_t B, int64_t H, int64_t Lq,
                           int64_t Dv) {
  float *dst = malloc((size_t)(B * H * Lq * Dv) * sizeof *dst + 1);
  if (!dst) return NULL;
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t i = 0; i < Lq; i++)
        memcpy(dst + ((b * Lq + i) * H + h) * Dv,
               src + ((b * H + h) * Lq + i) * Dv, (size_t)Dv * sizeof *dst);
  return dst;
}

/* How the answer's "output" is written.  With heads sliced (sdpa), the
 * model's [B?,H,Lq,Dv] is written as [B?,Lq,H*Dv]: nested arrays over
 * `outer`, rows of `inner`, printed in one call per matrix; with H > 1 from
 * a copy with the heads side by side (gather_heads).  Otherwise the tensor
 * as it is.  rank and shape are the "shape" the answer gives. */
typedef struct out_layout {
  bool sliced;
  int64_t B, H, Lq, Dv; /* sliced: the model's dims (B = 1 when not given) */
  attn__dimspec outer[2], inner;
  int n_outer;
  int rank;
  int64_t shape[ATTN_MAX_RANK];
} out_layout;

static attn_status output_layout(const attn_tensor *ot,
                                 const attn_v1_info *info, out_layout *l,
                                 attn_diag *d) {
  char sh[160];
  l->sliced = info && info->heads_sliced;
  l->n_outer = 0;
  l->inner = (attn__dimspec){0, 1};
  if (!l->sliced) {
    l->rank = ot->rank;
    memcpy(l->shape, ot->shape, sizeof l->shape);
    return ATTN_OK;
  }
  int b = info->B_given > 0;
  if (ot->rank != 3 + b || (b && ot->shape[0] != info->B_given) ||
      ot->shape[b] != info->H)
    return attn_diag_set(d, ATTN_ESHAPE,
                         "attn_output: expected [%sH=%lld,Lq,Dv], the model "
                         "returned %s",
                         b ? "B," : "", (long long)info->H,
                         attn_shape_format(sh, sizeof sh, ot->rank, ot->shape));
  int64_t H = ot->shape[b], Lq = ot->shape[b + 1], Dv = ot->shape[b + 2];
  l->B = b ? ot->shape[0] : 1, l->H = H, l->Lq = Lq, l->Dv = Dv;
  if (b) {
    l->outer[l->n_outer].n = ot->shape[0];
    l->outer[l->n_outer++].stride = H * Lq * Dv;
  }
  l->outer[l->n_outer].n = Lq;
  l->outer[l->n_outer++].stride = H * Dv;
  l->inner.n = H * Dv;
  l->rank = 2 + b;
  if (b) l->shape[0] = ot->shape[0];
  l->shape[b] = Lq;
  l->shape[b + 1] = H * Dv;
  return ATTN_OK;
}

/* The members after "shape": the request's echoed labels, then the
 * timing. */
static attn_status put_extras(attn_buf *out, const attn_infer_request *req,
                              const attn_infer_response *r,
                              const attn_v1_timing *t) {
  attn_status s;
  for (size_t i = 0; req && i < req->n_echo; i++) {
    if (!req->echo[i].name || !req->echo[i].json) continue;
    TRY(attn_buf_append(out, ",", 1));
    TRY(attn_buf_json_string(out, req->echo[i].name));
    TRY(attn_buf_append(out, ":", 1));
    TRY(attn_buf_puts(out, req->echo[i].json));
  }
  if (t) {
    TRY(attn_buf_puts(out, ",\"timing\":{"));
    TRY(put_ms(out, "queue_ms", t->queue_ms));
    TRY(attn_buf_append(out, ",", 1));
    TRY(put_ms(out, "compute_ms", t->compute_ms));
    TRY(attn_buf_append(out, ",", 1));
    TRY(put_ms(out, "total_ms", t->total_ms));
    if (r->precision) {
      TRY(attn_buf_puts(out, ",\"precision\":"));
      TRY(attn_buf_json_string(out, r->precision));
    }
    if (r->kernel) {
      TRY(attn_buf_puts(out, ",\"kernel\":"));
      TRY(attn_buf_json_string(out, r->kernel));
    }
    TRY(attn_buf_append(out, "}", 1));
  }
  return ATTN_OK;
fail:
  return s;
}

/* The answer: the outputs checked and laid out (output_layout), then
 * written: output, attn_weights, their shapes, the extras. */
attn_status attn_v1_encode(const attn_infer_response *r,
                           const attn_infer_request *req,
                           const attn_v1_info *info, const attn_v1_timing *t,
                           attn_buf *out, attn_diag *d) {
  const attn_infer_output *o = find_output(r, "attn_output"),
                          *w = find_output(r, "attn_weights");
  size_t start = out->len;
  attn_status s;
  out_layout l;
  if (!o) return attn_diag_set(d, ATTN_EINVAL, "response has no 'attn_output'");
  if ((s = usable(o, d)) || (w && (s = usable(w, d)))) return s;
  const attn_tensor *ot = &o->tensor;
  if ((s = output_layout(ot, info, &l, d))) return s;
  float *heads = NULL; /* the output's rows gathered, when H > 1 */
  if (l.sliced && l.H > 1 &&
      !(heads = gather_heads(ot->data, l.B, l.H, l.Lq, l.Dv))) {
    s = ATTN_ENOMEM;
    goto fail;
  }

  TRY(attn_buf_puts(out, "{\"output\":"));
  if (l.sliced)
    TRY(attn__json_nested(out, heads ? heads : ot->data, l.outer, l.n_outer,
                          &l.inner));
  else
    TRY(put_tensor(out, ot));
  free(heads);
  heads = NULL;
  if (w) {
    TRY(attn_buf_puts(out, ",\"attn_weights\":"));
    TRY(put_tensor(out, &w->tensor));
  }
  TRY(attn_buf_puts(out, ",\"shape\":{\"output\":"));
  TRY(attn__json_shape(out, l.rank, l.shape));
  if (w) {
    TRY(attn_buf_puts(out, ",\"attn_weights\":"));
    TRY(attn__json_shape(out, w->tensor.rank, w->tensor.shape));
  }
  TRY(attn_buf_append(out, "}", 1));
  TRY(put_extras(out, req, r, t));
  TRY(attn_buf_append(out, "}", 1));
  return ATTN_OK;
fail:
  free(heads);
  attn__buf_restore(out, start);
  return attn_diag_set(d, s, "encoding the answer: %s", attn_strerror(s));
}

/* ---- GET /v1/models ----------------------------------------------------- */

/* "key":v for the integers of a resident model. */
static attn_status put_dim(attn_buf *b, const char *key, int64_t v) {
  attn_status s = attn_buf_puts(b, key);
  return s ? s : attn_buf_i64(b, v);
}

static attn_status put_model(attn_buf *out, const void *item) {
  const attn_v1_model_entry *m = item;
  attn_status s;
  TRY(attn_buf_puts(out, "{\"name\":"));
  TRY(attn_buf_json_string(out, m->name));
  TRY(attn_buf_puts(out, ",\"version\":"));
  TRY(attn_buf_json_string(out, m->version ? m->version : "1"));
  TRY(attn_buf_puts(out, ",\"kind\":"));
  TRY(attn_buf_json_string(out, m->kind ? m->kind : ""));
  if (m->embed_dim > 0) {
    TRY(put_dim(out, ",\"embed_dim\":", m->embed_dim));
    TRY(put_dim(out, ",\"num_heads\":", m->num_heads));
    TRY(put_dim(out, ",\"num_kv_heads\":", m->num_kv_heads));
    TRY(put_dim(out, ",\"kdim\":", m->kdim));
    TRY(put_dim(out, ",\"vdim\":", m->vdim));
  }
  if (m->precision) {
    TRY(attn_buf_puts(out, ",\"precision\":"));
    TRY(attn_buf_json_string(out, m->precision));
    TRY(attn_buf_puts(out, ",\"weight_bytes\":"));
    TRY(attn_buf_u64(out, m->weight_bytes));
  }
  if (m->description) {
    TRY(attn_buf_puts(out, ",\"description\":"));
    TRY(attn_buf_json_string(out, m->description));
  }
  if (m->fixed) { /* a JSON object made by the model layer */
    TRY(attn_buf_puts(out, ",\"fixed\":"));
    TRY(attn_buf_puts(out, m->fixed));
  }
  return attn_buf_puts(out, "}");
fail:
  return s;
}

attn_status attn_v1_encode_models(attn_buf *out, const attn_v1_model_entry *m,
                                  size_t n) {
  return attn__json_list(out, "{\"models\":[", m, sizeof *m, n, put_model,
                         "]}");
}
