/* session_v1.c - the JSON of /v1/sessions (docs/api.md "Sessions"): a
 * session's spec (PUT), a step (POST .../attend), truncate and fork
 * bodies in; the session object, the list and a step's answer out.  The
 * plain types are session.h's; nothing of the store is called here.
 *
 * Design
 *  - Syntax and types only.  Each field is checked for its JSON type and
 *    the range its own encoding needs (a count >= 1, window[1] = 0, a
 *    rotary base > 1 since 0 means "not given"); what fields mean together
 *    (num_kv_heads divides num_heads, the slopes' count, max_tokens
 *    against the server's) is the store's to check, in the same words.
 *  - Unknown fields are refused with a "did you mean" (attn__match_keys,
 *    shared with /v1/attention), at the top and inside "rotary".
 *  - A step's rows are read against the session's shape, known before
 *    the body is: every row of "query" is either num_heads x head_dim
 *    numbers in one list or num_heads lists of head_dim (each row on its
 *    own: [t][H*D], [t][H][D], or both mixed), key and value likewise
 *    with num_kv_heads.  So a wrong row is named with what the session
 *    takes ("query[3] has 256 numbers; this session takes num_heads x
 *    head_dim = 8 x 64 = 512") rather than against the first row, and the
 *    element limit is checked from the row count before anything is
 *    allocated.  Number arrays reach this file packed (attn_json_parse_ex).
 *  - Messages name the fields as the client wrote them, unquoted
 *    ("num_heads is missing", "window[1] is 3; ...").
 *  - Encoders append to an attn_buf and restore its length on failure;
 *    floats in shortest round-trip form (attn_f32_append and friends),
 *    non-finite ones as null.
 *  - Any failed decode frees what it made and leaves its output zeroed.
 *
 * Threads: reentrant; no state.
 */
#include <cjson/cJSON.h>
#include <float.h>
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

/* The largest integer a JSON number holds exactly (2^53 - 1). */
#define MAX_EXACT_INT 9007199254740991.0

/* ---- helpers ------------------------------------------------------------ */

/* The kv_dtype names, by attn_kv_dtype (kv.h's attn_kv_dtype_name is in
 * attn_kv, a library the codecs do not link: docs/architecture.md). */
static const char *const dtype_names[] = {"fp32", "bf16", "fp16"};
#define N_DTYPES (sizeof dtype_names / sizeof *dtype_names)

/* 1 when body[0, len) is empty or only JSON whitespace. */
static int blank(const char *body, size_t len) {
  for (size_t i = 0; i < len; i++)
    if (!strchr(" \t\r\n", body[i]) || !body[i]) return 0;
  return 1;
}

/* Parse a body that must be one JSON object; `needs` says what an empty
 * one lacks ("a session needs ..."). */
static attn_status parse_object(const char *body, size_t len, size_t depth,
                                const char *const *pack, const char *needs,
                                cJSON **root, attn_diag *d) {
  *root = NULL;
  if (!body || blank(body, len))
    return attn_diag_set(d, ATTN_EINVAL, "the body is empty: %s", needs);
  attn_status s = attn_json_parse_ex(body, len, depth, ATTN_JSON_MAX_NODES,
                                     pack, "", root, d);
  if (s) return s;
  if (cJSON_IsObject(*root)) return ATTN_OK;
  s = attn_diag_set(d, ATTN_EINVAL, "the body must be a JSON object, got %s",
                    attn_json_kind(*root));
  attn_json_free(*root);
  *root = NULL;
  return s;
}

/* it (named name) as an integer >= min into *v; an absent it leaves *v. */
static attn_status get_int(const cJSON *it, const char *name, int64_t min,
                           int64_t *v, attn_diag *d) {
  if (!it) return ATTN_OK;
  if (!cJSON_IsNumber(it))
    return attn_diag_set(d, ATTN_EINVAL,
                         "%s must be an integer >= %lld, got %s", name,
                         (long long)min, attn_json_kind(it));
  double x = it->valuedouble;
  if (!(x >= (double)min && x <= MAX_EXACT_INT) || x != floor(x))
    return attn_diag_set(d, ATTN_EINVAL,
                         "%s must be an integer >= %lld, got %.15g", name,
                         (long long)min, x);
  *v = (int64_t)x;
  return ATTN_OK;
}

static attn_status get_bool(const cJSON *it, const char *name, bool *v,
                            attn_diag *d) {
  if (!it) return ATTN_OK;
  if (!cJSON_IsBool(it))
    return attn_diag_set(d, ATTN_EINVAL, "%s must be true or false, got %s",
                         name, attn_json_kind(it));
  *v = cJSON_IsTrue(it);
  return ATTN_OK;
}

/* it (named name) as a finite number within fp32's range. */
static attn_status get_f32(const cJSON *it, const char *name, float *v,
                           attn_diag *d) {
  if (!cJSON_IsNumber(it))
    return attn_diag_set(d, ATTN_EINVAL, "%s must be a number, got %s", name,
                         attn_json_kind(it));
  if (!attn_f32_in_range(it->valuedouble))
    return attn_diag_set(d, ATTN_ENONFINITE,
                         "%s is %.9g, outside the fp32 range", name,
                         it->valuedouble);
  *v = (float)it->valuedouble;
  return ATTN_OK;
}

/* The numbers of array a (its length checked by the caller) into dst;
 * path names a ("query[3]", "alibi"). */
static attn_status read_numbers(const cJSON *a, const char *path, float *dst,
                                attn_diag *d) {
  size_t n, k = 0;
  const double *v = attn_json_packed(a, &n);
  if (v) {
    k = attn_json_f64_to_f32(v, n, dst);
    if (k == n) return ATTN_OK;
    return attn_diag_set(d, ATTN_ENONFINITE,
                         "%s[%zu] is %.9g, outside the fp32 range", path, k,
                         v[k]);
  }
  for (const cJSON *e = a->child; e; e = e->next, k++) {
    if (!cJSON_IsNumber(e))
      return attn_diag_set(d, ATTN_EINVAL, "%s[%zu] must be a number, got %s",
                           path, k, attn_json_kind(e));
    if (!attn_f32_in_range(e->valuedouble))
      return attn_diag_set(d, ATTN_ENONFINITE,
                           "%s[%zu] is %.9g, outside the fp32 range", path, k,
                           e->valuedouble);
    dst[k] = (float)e->valuedouble;
  }
  return ATTN_OK;
}

/* ---- the spec (PUT /v1/sessions/{id}) ----------------------------------- */

enum {
  S_LAYERS,
  S_NUM_HEADS,
  S_NUM_KV,
  S_HEAD_DIM,
  S_MAX_TOKENS,
  S_KV_DTYPE,
  S_SCALE,
  S_WINDOW,
  S_ALIBI,
  S_SOFTCAP,
  S_ROTARY,
  S_COUNT
};
static const char *const spec_names[S_COUNT] = {
    "layers", "num_heads", "num_kv_heads", "head_dim", "max_tokens", "kv_dtype",
    "scale",  "window",    "alibi",        "softcap",  "rotary"};

enum { R_BASE, R_DIMS, R_INTERLEAVED, R_COUNT };
static const char *const rotary_names[R_COUNT] = {"base", "dims",
                                                  "interleaved"};

/* "alibi" is the one spec field that may be an array of numbers. */
static const char *const spec_packed[] = {"alibi", NULL};

static attn_status spec_dtype(const cJSON *it, attn_session_spec *o,
                              attn_diag *d) {
  if (!it) return ATTN_OK;
  for (size_t i = 0; cJSON_IsString(it) && i < N_DTYPES; i++)
    if (strcmp(it->valuestring, dtype_names[i]) == 0) {
      o->kv_dtype = (attn_kv_dtype)i;
      return ATTN_OK;
    }
  if (cJSON_IsString(it))
    return attn_diag_set(d, ATTN_EINVAL,
                         "kv_dtype '%.32s' is not one of \"fp32\", \"bf16\", "
                         "\"fp16\"",
                         it->valuestring);
  return attn_diag_set(
      d, ATTN_EINVAL, "kv_dtype must be \"fp32\", \"bf16\" or \"fp16\", got %s",
      attn_json_kind(it));
}

/* "window": [left, 0], left >= -1 (-1: unbounded). */
static attn_status spec_window(const cJSON *w, attn_session_spec *o,
                               attn_diag *d) {
  if (!w) return ATTN_OK;
  size_t n = attn_json_len(w);
  const double *v = attn_json_packed(w, &n);
  if (!cJSON_IsArray(w) || n != 2 ||
      (!v && (!cJSON_IsNumber(w->child) || !cJSON_IsNumber(w->child->next))))
    return attn_diag_set(
        d, ATTN_EINVAL,
        "window must be [left, 0]: two integers, left -1 for "
        "unbounded (got %s)",
        cJSON_IsArray(w) ? "another array" : attn_json_kind(w));
  double left = v ? v[0] : w->child->valuedouble,
         right = v ? v[1] : w->child->next->valuedouble;
  if (!(left >= -1 && left <= MAX_EXACT_INT) || left != floor(left))
    return attn_diag_set(d, ATTN_EINVAL,
                         "window[0] is %.15g; it must be an integer >= 0 (the "
                         "tokens before each one it sees), or -1 for unbounded",
                         left);
  if (right != 0)
    return attn_diag_set(d, ATTN_EINVAL,
                         "window[1] is %.15g; a session's window must end at "
                         "the token itself: [left, 0]",
                         right);
  o->has_window = true;
  o->window_left = (int64_t)left;
  return ATTN_OK;
}

/* "alibi": true, false, or a non-empty list of slopes (their count is the
 * store's check, against num_heads). */
static attn_status spec_alibi(const cJSON *a, attn_session_spec *o,
                              attn_diag *d) {
  if (!a || cJSON_IsBool(a)) {
    o->alibi =
        cJSON_IsTrue(a) ? ATTN_SESSION_ALIBI_STANDARD : ATTN_SESSION_ALIBI_OFF;
    return ATTN_OK;
  }
  if (!cJSON_IsArray(a))
    return attn_diag_set(d, ATTN_EINVAL,
                         "alibi must be true, false or a list of slopes (one "
                         "per query head), got %s",
                         attn_json_kind(a));
  size_t n = attn_json_len(a);
  if (n == 0)
    return attn_diag_set(d, ATTN_EINVAL,
                         "alibi is an empty list: give one slope per query "
                         "head (num_heads of them), or true for the standard "
                         "slopes");
  if (!(o->alibi_slopes = malloc(n * sizeof *o->alibi_slopes)))
    return ATTN_ENOMEM;
  o->alibi = ATTN_SESSION_ALIBI_SLOPES;
  o->alibi_count = (int64_t)n;
  return read_numbers(a, "alibi", o->alibi_slopes, d);
}

/* "softcap": > 0, as on /v1/attention (leave it out for none). */
static attn_status spec_softcap(const cJSON *it, attn_session_spec *o,
                                attn_diag *d) {
  attn_status s;
  if (!it) return ATTN_OK;
  if ((s = get_f32(it, "softcap", &o->softcap, d))) return s;
  if (!(o->softcap > 0))
    return attn_diag_set(d, ATTN_EINVAL,
                         "softcap is %g; it must be > 0 (the cap on the "
                         "logits; leave it out for none)",
                         it->valuedouble);
  return ATTN_OK;
}

/* "rotary": true (the defaults), false, or {"base", "dims",
 * "interleaved"}, each optional. */
static attn_status spec_rotary(const cJSON *r, attn_session_spec *o,
                               attn_diag *d) {
  const cJSON *rf[R_COUNT] = {0};
  attn_status s;
  if (!r || cJSON_IsBool(r)) {
    o->has_rotary = cJSON_IsTrue(r);
    return ATTN_OK;
  }
  if (!cJSON_IsObject(r))
    return attn_diag_set(d, ATTN_EINVAL,
                         "rotary must be true, false or an object {\"base\", "
                         "\"dims\", \"interleaved\"}, got %s",
                         attn_json_kind(r));
  if ((s = attn__match_keys(r, rotary_names, R_COUNT, rf, "rotary: ", d)))
    return s;
  o->has_rotary = true;
  if (rf[R_BASE]) {
    const cJSON *b = rf[R_BASE];
    if (!cJSON_IsNumber(b))
      return attn_diag_set(d, ATTN_EINVAL,
                           "rotary.base must be a number, got %s",
                           attn_json_kind(b));
    if (!(b->valuedouble > 1 && b->valuedouble <= DBL_MAX))
      return attn_diag_set(d, ATTN_EINVAL,
                           "rotary.base is %.15g; it must be > 1 (10000 when "
                           "not given)",
                           b->valuedouble);
    o->rotary_base = b->valuedouble;
  }
  if ((s = get_int(rf[R_DIMS], "rotary.dims", 1, &o->rotary_dims, d))) return s;
  return get_bool(rf[R_INTERLEAVED], "rotary.interleaved",
                  &o->rotary_interleaved, d);
}

static attn_status spec_fields(const cJSON *const *f, attn_session_spec *o,
                               attn_diag *d) {
  attn_status s;
  if (!f[S_NUM_HEADS])
    return attn_diag_set(d, ATTN_EINVAL,
                         "num_heads is missing: a session needs num_heads and "
                         "head_dim (integers >= 1)");
  if (!f[S_HEAD_DIM])
    return attn_diag_set(d, ATTN_EINVAL,
                         "head_dim is missing: a session needs num_heads and "
                         "head_dim (integers >= 1)");
  if ((s = get_int(f[S_LAYERS], "layers", 1, &o->layers, d)) ||
      (s = get_int(f[S_NUM_HEADS], "num_heads", 1, &o->num_heads, d)) ||
      (s = get_int(f[S_NUM_KV], "num_kv_heads", 1, &o->num_kv_heads, d)) ||
      (s = get_int(f[S_HEAD_DIM], "head_dim", 1, &o->head_dim, d)) ||
      (s = get_int(f[S_MAX_TOKENS], "max_tokens", 1, &o->max_tokens, d)) ||
      (s = spec_dtype(f[S_KV_DTYPE], o, d)))
    return s;
  if (f[S_SCALE]) {
    if ((s = get_f32(f[S_SCALE], "scale", &o->scale, d))) return s;
    o->has_scale = true;
  }
  if ((s = spec_window(f[S_WINDOW], o, d)) ||
      (s = spec_alibi(f[S_ALIBI], o, d)) ||
      (s = spec_softcap(f[S_SOFTCAP], o, d)))
    return s;
  return spec_rotary(f[S_ROTARY], o, d);
}

attn_status attn_v1_decode_session_spec(const char *body, size_t len,
                                        const attn_codec_limits *lim,
                                        attn_session_spec *out, attn_diag *d) {
  attn_codec_limits l;
  const cJSON *f[S_COUNT] = {0};
  cJSON *root;
  memset(out, 0, sizeof *out);
  attn__codec_limits_eff(lim, &l);
  attn_status s = parse_object(
      body, len, l.max_depth, spec_packed,
      "a session needs a JSON object with num_heads and head_dim", &root, d);
  if (s) return s;
  s = attn__match_keys(root, spec_names, S_COUNT, f, "", d);
  if (!s) s = spec_fields(f, out, d);
  attn_json_free(root);
  if (s == ATTN_ENOMEM) attn_diag_set(d, s, "out of memory decoding a session");
  if (s) {
    attn_session_spec_clear(out);
    memset(out, 0, sizeof *out);
  }
  return s;
}

/* ---- a step (POST /v1/sessions/{id}/attend) ----------------------------- */

enum { T_LAYER, T_POSITION, T_QUERY, T_KEY, T_VALUE, T_NEED_WEIGHTS, T_COUNT };
static const char *const step_names[T_COUNT] = {
    "layer", "position", "query", "key", "value", "need_weights"};
static const char *const step_packed[] = {"query", "key", "value", NULL};

/* What each row of a step's tensor holds: heads x D numbers. */
typedef struct rows_spec {
  const char *field;      /* "query", "key", "value" */
  const char *heads_name; /* "num_heads", "num_kv_heads" */
  int64_t heads, D;
} rows_spec;

/* Row i of r's tensor into dst: heads x D numbers in one list, or heads
 * lists of D. */
static attn_status read_row(const cJSON *row, const rows_spec *r, size_t i,
                            float *dst, attn_diag *d) {
  char path[48], sub[64];
  long long H = r->heads, D = r->D;
  snprintf(path, sizeof path, "%s[%zu]", r->field, i);
  if (!cJSON_IsArray(row))
    return attn_diag_set(d, ATTN_EINVAL,
                         "%s must be a list of %s x head_dim = %lld x %lld = "
                         "%lld numbers (or %lld lists of %lld), got %s",
                         path, r->heads_name, H, D, H * D, H, D,
                         attn_json_kind(row));
  size_t n = attn_json_len(row), k = 0;
  if (n == 0 || attn_json_packed(row, &n) || !cJSON_IsArray(row->child)) {
    if ((long long)n != H * D)
      return attn_diag_set(d, ATTN_ESHAPE,
                           "%s has %zu number%s; this session takes %s x "
                           "head_dim = %lld x %lld = %lld",
                           path, n, n == 1 ? "" : "s", r->heads_name, H, D,
                           H * D);
    return read_numbers(row, path, dst, d);
  }
  if ((long long)n != H)
    return attn_diag_set(d, ATTN_ESHAPE,
                         "%s has %zu list%s; this session takes %s = %lld "
                         "lists of head_dim = %lld numbers (or one list of "
                         "%lld)",
                         path, n, n == 1 ? "" : "s", r->heads_name, H, D,
                         H * D);
  for (const cJSON *h = row->child; h; h = h->next, k++) {
    attn_status s;
    snprintf(sub, sizeof sub, "%s[%zu]", path, k);
    if (!cJSON_IsArray(h))
      return attn_diag_set(d, ATTN_EINVAL,
                           "%s must be a list of head_dim = %lld numbers, got "
                           "%s",
                           sub, D, attn_json_kind(h));
    if ((long long)attn_json_len(h) != D)
      return attn_diag_set(d, ATTN_ESHAPE,
                           "%s has %zu number%s; this session takes "
                           "head_dim = %lld",
                           sub, attn_json_len(h),
                           attn_json_len(h) == 1 ? "" : "s", D);
    if ((s = read_numbers(h, sub, dst + k * (size_t)D, d))) return s;
  }
  return ATTN_OK;
}

/* r's tensor, a list of rows, into a new *out (*t rows; t_want > 0: the
 * query's row count, which it must have). */
static attn_status read_rows(const cJSON *a, const rows_spec *r, int64_t t_want,
                             const attn_codec_limits *lim, float **out,
                             int64_t *t, attn_diag *d) {
  long long H = r->heads, D = r->D;
  size_t n = attn_json_len(a), numel, i = 0;
  if (!cJSON_IsArray(a))
    return attn_diag_set(d, ATTN_EINVAL,
                         "%s must be a list of rows, each %s x head_dim = "
                         "%lld x %lld = %lld numbers, got %s",
                         r->field, r->heads_name, H, D, H * D,
                         attn_json_kind(a));
  if (attn_json_packed(a, &n))
    return attn_diag_set(d, ATTN_EINVAL,
                         "%s is one list of %zu numbers; it must be a list of "
                         "rows (one per token), each %s x head_dim = %lld x "
                         "%lld = %lld numbers: [[...]] for one token",
                         r->field, n, r->heads_name, H, D, H * D);
  if (n == 0)
    return attn_diag_set(d, ATTN_EINVAL,
                         "%s has no rows; a step takes at least one token",
                         r->field);
  if (t_want > 0 && (int64_t)n != t_want)
    return attn_diag_set(d, ATTN_ESHAPE,
                         "%s has %zu rows; query has %lld: a step appends one "
                         "key and value per query row",
                         r->field, n, (long long)t_want);
  const int64_t shape[3] = {(int64_t)n, r->heads, r->D};
  if (!attn_shape_numel(3, shape, &numel) || numel > lim->max_tensor_elements)
    return attn_diag_set(d, ATTN_ETOOBIG,
                         "%s has %zu rows of %s x head_dim = %lld x %lld = "
                         "%lld numbers, above the limit of %zu numbers a "
                         "tensor",
                         r->field, n, r->heads_name, H, D, H * D,
                         lim->max_tensor_elements);
  float *v = malloc(numel * sizeof *v);
  if (!v) return ATTN_ENOMEM;
  for (const cJSON *row = a->child; row; row = row->next, i++) {
    attn_status s = read_row(row, r, i, v + i * (size_t)(H * D), d);
    if (s) {
      free(v);
      return s;
    }
  }
  *out = v;
  *t = (int64_t)n;
  return ATTN_OK;
}

static attn_status step_fields(const cJSON *const *f,
                               const attn_codec_limits *lim,
                               const attn_v1_step_shape *sh, attn_v1_step *o,
                               attn_diag *d) {
  attn_status s;
  if ((s = get_int(f[T_LAYER], "layer", 0, &o->layer, d)) ||
      (s = get_int(f[T_POSITION], "position", 0, &o->position, d)) ||
      (s = get_bool(f[T_NEED_WEIGHTS], "need_weights", &o->need_weights, d)))
    return s;
  o->has_position = f[T_POSITION] != NULL;
  if (!f[T_QUERY])
    return attn_diag_set(d, ATTN_EINVAL,
                         "query is missing: a step takes t rows of num_heads "
                         "x head_dim = %lld x %lld numbers",
                         (long long)sh->H, (long long)sh->D);
  if (f[T_KEY] && !f[T_VALUE])
    return attn_diag_set(d, ATTN_EINVAL, "key is given without value");
  if (f[T_VALUE] && !f[T_KEY])
    return attn_diag_set(d, ATTN_EINVAL, "value is given without key");
  if (f[T_KEY] && !f[T_POSITION])
    return attn_diag_set(d, ATTN_EINVAL,
                         "position is missing: a step that appends keys and "
                         "values says where (the layer's length)");
  const rows_spec q = {"query", "num_heads", sh->H, sh->D},
                  k = {"key", "num_kv_heads", sh->Hkv, sh->D},
                  v = {"value", "num_kv_heads", sh->Hkv, sh->D};
  int64_t tk;
  if ((s = read_rows(f[T_QUERY], &q, 0, lim, &o->q, &o->t, d))) return s;
  if (!f[T_KEY]) return ATTN_OK;
  if ((s = read_rows(f[T_KEY], &k, o->t, lim, &o->k, &tk, d))) return s;
  return read_rows(f[T_VALUE], &v, o->t, lim, &o->v, &tk, d);
}

void attn_v1_step_clear(attn_v1_step *s) {
  if (!s) return;
  free(s->q);
  free(s->k);
  free(s->v);
  memset(s, 0, sizeof *s);
}

attn_status attn_v1_decode_session_step(const char *body, size_t len,
                                        const attn_codec_limits *lim,
                                        const attn_v1_step_shape *shape,
                                        attn_v1_step *out, attn_diag *d) {
  attn_codec_limits l;
  const cJSON *f[T_COUNT] = {0};
  cJSON *root;
  memset(out, 0, sizeof *out);
  if (!shape || shape->H < 1 || shape->Hkv < 1 || shape->D < 1)
    return attn_diag_set(d, ATTN_EINVAL, "a step needs the session's shape");
  attn__codec_limits_eff(lim, &l);
  attn_status s =
      parse_object(body, len, l.max_depth, step_packed,
                   "a step needs a JSON object with query", &root, d);
  if (s) return s;
  s = attn__match_keys(root, step_names, T_COUNT, f, "", d);
  if (!s) s = step_fields(f, &l, shape, out, d);
  attn_json_free(root);
  if (s == ATTN_ENOMEM) attn_diag_set(d, s, "out of memory decoding a step");
  if (s) attn_v1_step_clear(out);
  return s;
}

/* ---- truncate and fork -------------------------------------------------- */

attn_status attn_v1_decode_session_truncate(const char *body, size_t len,
                                            int64_t *length, attn_diag *d) {
  static const char *const names[] = {"length"};
  const cJSON *f[1] = {0};
  cJSON *root;
  *length = 0;
  attn_status s = parse_object(
      body, len, ATTN_MAX_JSON_DEPTH, NULL,
      "truncate needs a JSON object with length (the tokens to keep)", &root,
      d);
  if (s) return s;
  s = attn__match_keys(root, names, 1, f, "", d);
  if (!s && !f[0])
    s = attn_diag_set(d, ATTN_EINVAL,
                      "length is missing: truncate keeps the first length "
                      "tokens of every layer");
  if (!s) s = get_int(f[0], "length", 0, length, d);
  attn_json_free(root);
  if (s) *length = 0;
  return s;
}

attn_status attn_v1_decode_session_fork(const char *body, size_t len, char *id,
                                        attn_diag *d) {
  static const char *const names[] = {"id"};
  const cJSON *f[1] = {0};
  cJSON *root;
  id[0] = '\0';
  attn_status s = parse_object(
      body, len, ATTN_MAX_JSON_DEPTH, NULL,
      "fork needs a JSON object with id (the new session's)", &root, d);
  if (s) return s;
  s = attn__match_keys(root, names, 1, f, "", d);
  if (!s && !f[0])
    s = attn_diag_set(d, ATTN_EINVAL,
                      "id is missing: fork makes a new session of that id");
  else if (!s && !cJSON_IsString(f[0]))
    s = attn_diag_set(d, ATTN_EINVAL, "id must be a string, got %s",
                      attn_json_kind(f[0]));
  if (!s) {
    const char *v = f[0]->valuestring;
    size_t n = strlen(v);
    if (n > ATTN_SESSION_ID_MAX)
      s = attn_diag_set(d, ATTN_EINVAL,
                        "id is %zu bytes; a session id is 1 to %d of A-Z a-z "
                        "0-9 . _ : -",
                        n, ATTN_SESSION_ID_MAX);
    else if (!attn_session_id_ok(v, n))
      s = attn_diag_set(d, ATTN_EINVAL,
                        "id '%s' is not a session id: 1 to %d of A-Z a-z 0-9 "
                        ". _ : -",
                        v, ATTN_SESSION_ID_MAX);
    else
      memcpy(id, v, n + 1);
  }
  attn_json_free(root);
  return s;
}

/* ---- encoding ----------------------------------------------------------- */

#define TRY(x)                           \
  do {                                   \
    if ((s = (x)) != ATTN_OK) goto fail; \
  } while (0)

/* key (one of ours: ",\"name\":") then v. */
static attn_status put_int(attn_buf *b, const char *key, int64_t v) {
  attn_status s = attn_buf_puts(b, key);
  return s ? s : attn_buf_i64(b, v);
}

static attn_status put_f32(attn_buf *b, const char *key, float v) {
  attn_status s = attn_buf_puts(b, key);
  return s ? s : attn_f32_append(b, v);
}

/* A double in the fewest of 15 to 17 significant digits that read back to
 * it (rotary.base); non-finite as null. */
static attn_status put_double(attn_buf *b, double v) {
  char t[32];
  if (!isfinite(v)) return attn_buf_puts(b, "null");
  for (int p = 15; p <= 17; p++) {
    snprintf(t, sizeof t, "%.*g", p, v);
    if (strtod(t, NULL) == v) break;
  }
  return attn_buf_puts(b, t);
}

/* The variants a session was given, in the object's order. */
static attn_status put_variants(attn_buf *out, const attn_session_spec *p) {
  attn_status s;
  if (p->has_scale) TRY(put_f32(out, ",\"scale\":", p->scale));
  if (p->has_window) {
    TRY(put_int(out, ",\"window\":[", p->window_left));
    TRY(attn_buf_puts(out, ",0]"));
  }
  if (p->alibi == ATTN_SESSION_ALIBI_STANDARD)
    TRY(attn_buf_puts(out, ",\"alibi\":true"));
  if (p->alibi == ATTN_SESSION_ALIBI_SLOPES && p->alibi_slopes) {
    TRY(attn_buf_puts(out, ",\"alibi\":["));
    TRY(attn_f32_append_list(out, p->alibi_slopes, (size_t)p->num_heads, 1,
                             false));
    TRY(attn_buf_puts(out, "]"));
  }
  if (p->softcap > 0) TRY(put_f32(out, ",\"softcap\":", p->softcap));
  if (p->has_rotary) {
    TRY(attn_buf_puts(out, ",\"rotary\":{\"base\":"));
    TRY(put_double(out, p->rotary_base));
    TRY(put_int(out, ",\"dims\":", p->rotary_dims));
    TRY(attn_buf_puts(out, p->rotary_interleaved ? ",\"interleaved\":true}"
                                                 : ",\"interleaved\":false}"));
  }
  return ATTN_OK;
fail:
  return s;
}

/* The spec's fields in the object's order, after sep ("{" or ","). */
static attn_status put_spec(attn_buf *out, const char *sep,
                            const attn_session_spec *p) {
  attn_status s;
  size_t dt = (size_t)p->kv_dtype;
  TRY(attn_buf_puts(out, sep));
  TRY(put_int(out, "\"layers\":", p->layers));
  TRY(put_int(out, ",\"num_heads\":", p->num_heads));
  TRY(put_int(out, ",\"num_kv_heads\":", p->num_kv_heads));
  TRY(put_int(out, ",\"head_dim\":", p->head_dim));
  TRY(put_int(out, ",\"max_tokens\":", p->max_tokens));
  TRY(attn_buf_puts(out, ",\"kv_dtype\":"));
  TRY(attn_buf_json_string(out, dt < N_DTYPES ? dtype_names[dt] : ""));
  return put_variants(out, p);
fail:
  return s;
}

static attn_status put_session(attn_buf *out, const void *item) {
  const attn_session_info *i = item;
  const attn_session_spec *p = &i->spec;
  attn_status s;
  TRY(attn_buf_puts(out, "{\"id\":"));
  TRY(attn_buf_json_string(out, i->id));
  TRY(put_spec(out, ",", p));
  TRY(attn_buf_puts(out, ",\"length\":["));
  for (int64_t l = 0; i->length && l < p->layers; l++)
    TRY(put_int(out, l ? "," : "", i->length[l]));
  TRY(attn_buf_puts(out, "],\"bytes\":"));
  TRY(attn_buf_u64(out, i->bytes));
  TRY(attn_buf_puts(out, ",\"idle_s\":"));
  TRY(isfinite(i->idle_s) ? attn_buf_fixed3(out, i->idle_s)
                          : attn_buf_puts(out, "null"));
  return attn_buf_puts(out, "}");
fail:
  return s;
}

attn_status attn__session_spec_json(attn_buf *out, const attn_session_spec *p) {
  size_t start = out->len;
  attn_status s = put_spec(out, "{", p);
  if (!s) s = attn_buf_puts(out, "}");
  if (s) attn__buf_restore(out, start);
  return s;
}

attn_status attn_v1_encode_session(attn_buf *out, const attn_session_info *s) {
  return attn__json_list(out, "", s, sizeof *s, 1, put_session, "");
}

attn_status attn_v1_encode_sessions(attn_buf *out, const attn_session_info *s,
                                    size_t n) {
  return attn__json_list(out, "{\"sessions\":[", s, sizeof *s, n, put_session,
                         "]}");
}

attn_status attn_v1_encode_session_step(attn_buf *out,
                                        const attn_v1_step_shape *shape,
                                        int64_t t, const float *output,
                                        const float *lse, int64_t length,
                                        const float *weights) {
  const int64_t H = shape->H, D = shape->D;
  const attn__dimspec o_outer[2] = {{t, H * D}, {H, D}}, o_inner = {D, 1},
                      l_outer[1] = {{t, H}}, l_inner = {H, 1},
                      w_outer[2] = {{H, t * length}, {t, length}},
                      w_inner = {length, 1};
  size_t start = out->len;
  attn_status s;
  TRY(attn_buf_puts(out, "{\"output\":"));
  TRY(attn__json_nested(out, output, o_outer, 2, &o_inner));
  TRY(attn_buf_puts(out, ",\"lse\":"));
  TRY(attn__json_nested(out, lse, l_outer, 1, &l_inner));
  TRY(put_int(out, ",\"length\":", length));
  if (weights) {
    TRY(attn_buf_puts(out, ",\"attn_weights\":"));
    TRY(attn__json_nested(out, weights, w_outer, 2, &w_inner));
  }
  TRY(attn_buf_puts(out, "}"));
  return ATTN_OK;
fail:
  attn__buf_restore(out, start);
  return s;
}
