/* variants.c - the attention variants of a request (issue 34): causal
 * alignment, sliding window, ALiBi, softcap and rotary positions, read from
 * the request's parameters, from a resident model's fixed settings, merged,
 * checked, and written into the engine's attn_attend_opts.
 *
 * Design: one table of variant settings (attn__variant_id), each a value
 * with a "given" flag, so that a request and a model's file fill the same
 * struct and the merge is one loop.  The parameter names are the KServe v2
 * request parameters (docs/api.md); /v1 sends the same parameters with the
 * user's own spelling in attn_param.label ("window[1]", "rotary.dims"),
 * which every message here uses, so an error speaks the protocol the user
 * wrote.  Checks happen before anything is allocated: attn__variants_check
 * validates every combination against the problem's heads and head dim;
 * only the standard ALiBi slopes (H floats, H bounded by the request's
 * tensors) are allocated afterwards, by attn__variants_slopes.
 *
 * Threads: reentrant; no state.
 */
#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/tensor.h" /* attn_f32_in_range */
#include "internal.h"

#define LL(x) ((long long)(x))

/* d's message prefixed with the model file's path. */
static attn_status in_file(attn_diag *d, attn_status s, const char *path) {
  char m[ATTN_DIAG_MAX];
  if (!d) return s;
  snprintf(m, sizeof m, "%s", d->msg);
  return attn_diag_set(d, s, "%s: %s", path, m);
}

static const char *const v_names[ATTN__V_N] = {"causal",
                                               "window_left",
                                               "window_right",
                                               "softcap",
                                               "alibi",
                                               "rotary",
                                               "rotary_base",
                                               "rotary_dims",
                                               "rotary_interleaved",
                                               "rotary_query_offset"};

const char attn__variant_names[] =
    "causal, window_left, window_right, softcap, alibi, rotary, rotary_base, "
    "rotary_dims, rotary_interleaved, rotary_query_offset";

/* The name the user wrote for setting id. */
static const char *who(const attn__variants *v, int id) {
  return v->label[id] ? v->label[id] : v_names[id];
}

static const char *kind_of(const attn_param *p) {
  switch (p->type) {
    case ATTN_PARAM_BOOL:
      return p->b ? "true" : "false";
    case ATTN_PARAM_STRING:
      return "a string";
    default:
      return "a number";
  }
}

/* An integer in [lo, hi] from an INT or an integral DOUBLE parameter. */
static attn_status want_int(const attn_param *p, const char *name, int64_t lo,
                            int64_t hi, const char *what, int64_t *v,
                            attn_diag *d) {
  double x = p->type == ATTN_PARAM_INT ? (double)p->i : p->d;
  bool num = p->type == ATTN_PARAM_INT || p->type == ATTN_PARAM_DOUBLE;
  if (!num || x != floor(x) || x < (double)lo || x > (double)hi) {
    if (num)
      return attn_diag_set(d, ATTN_EINVAL, "'%s' must be %s, got %.15g", name,
                           what, x);
    return attn_diag_set(d, ATTN_EINVAL, "'%s' must be %s, got %s", name, what,
                         kind_of(p));
  }
  *v = p->type == ATTN_PARAM_INT ? p->i : (int64_t)x;
  return ATTN_OK;
}

static attn_status want_flag(const attn_param *p, const char *name, int64_t *v,
                             attn_diag *d) {
  if (p->type != ATTN_PARAM_BOOL)
    return attn_diag_set(d, ATTN_EINVAL, "'%s' must be true or false, got %s",
                         name, kind_of(p));
  *v = p->b;
  return ATTN_OK;
}

static attn_status want_causal(const attn_param *p, const char *name,
                               int64_t *v, attn_diag *d) {
  if (p->type == ATTN_PARAM_BOOL) {
    *v = p->b ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE;
    return ATTN_OK;
  }
  if (p->type == ATTN_PARAM_STRING && p->s &&
      strcmp(p->s, "bottom_right") == 0) {
    *v = ATTN_CAUSAL_BOTTOM_RIGHT;
    return ATTN_OK;
  }
  if (p->type == ATTN_PARAM_STRING && p->s && strcmp(p->s, "top_left") == 0) {
    *v = ATTN_CAUSAL_TOP_LEFT;
    return ATTN_OK;
  }
  if (p->type == ATTN_PARAM_STRING)
    return attn_diag_set(d, ATTN_EINVAL,
                         "'%s' must be true, false, \"bottom_right\" or "
                         "\"top_left\", got \"%.40s\"",
                         name, p->s ? p->s : "");
  return attn_diag_set(d, ATTN_EINVAL,
                       "'%s' must be true, false, \"bottom_right\" or "
                       "\"top_left\", got %s",
                       name, kind_of(p));
}

/* A positive finite number into *v (softcap; rotary_base must be > 1). */
static attn_status want_number(const attn_param *p, const char *name,
                               double above, const char *why, double *v,
                               attn_diag *d) {
  double x = p->type == ATTN_PARAM_INT ? (double)p->i : p->d;
  if (p->type != ATTN_PARAM_INT && p->type != ATTN_PARAM_DOUBLE)
    return attn_diag_set(d, ATTN_EINVAL, "'%s' must be a number, got %s", name,
                         kind_of(p));
  if (!(x > above && x < ATTN_F32_LIMIT))
    return attn_diag_set(
        d, ATTN_EINVAL, "'%s' is %.15g: %s", name, x,
        x > above ? "above float32's largest value, 3.4028235e+38" : why);
  *v = x;
  return ATTN_OK;
}

int attn__variant_find(const char *name) {
  for (int i = 0; name && i < ATTN__V_N; i++)
    if (strcmp(name, v_names[i]) == 0) return i;
  return -1;
}

attn_status attn__variant_param(const attn_param *p, int id, attn__variants *v,
                                attn_diag *d) {
  const char *nm = p->label ? p->label : p->name;
  attn_status s = ATTN_OK;
  if (v->given[id])
    return attn_diag_set(d, ATTN_EINVAL, "parameter '%s' given twice", nm);
  switch (id) {
    case ATTN__V_CAUSAL:
      s = want_causal(p, nm, &v->i[id], d);
      break;
    case ATTN__V_WL:
    case ATTN__V_WR:
      s = want_int(p, nm, -1, INT32_MAX,
                   "an integer >= -1 (-1: unbounded on that side)", &v->i[id],
                   d);
      break;
    case ATTN__V_SOFTCAP:
      s = want_number(p, nm, 0,
                      "it must be > 0 (each scaled score s becomes c * "
                      "tanh(s / c); leave it out for no capping)",
                      &v->d[id], d);
      break;
    case ATTN__V_RBASE:
      s = want_number(p, nm, 1, "the rotary base must be > 1", &v->d[id], d);
      break;
    case ATTN__V_RDIMS:
      s = want_int(p, nm, 2, INT32_MAX, "a positive even integer", &v->i[id],
                   d);
      break;
    case ATTN__V_ROFF:
      s = want_int(p, nm, -INT32_MAX, INT32_MAX, "an integer within +-2^31",
                   &v->i[id], d);
      break;
    default: /* alibi, rotary, rotary_interleaved */
      s = want_flag(p, nm, &v->i[id], d);
  }
  if (s) return s;
  v->given[id] = true;
  v->label[id] = p->label;
  return ATTN_OK;
}

/* ---- a resident model's fixed settings ----------------------------------- */

static attn_status json_param(const char *path, const char *key, const cJSON *j,
                              int id, attn__variants *v, attn_diag *d) {
  attn_param p = {.name = (char *)v_names[id], .label = (char *)key};
  if (cJSON_IsBool(j)) {
    p.type = ATTN_PARAM_BOOL, p.b = cJSON_IsTrue(j);
  } else if (cJSON_IsString(j)) {
    p.type = ATTN_PARAM_STRING, p.s = j->valuestring;
  } else if (cJSON_IsNumber(j)) {
    p.type = ATTN_PARAM_DOUBLE, p.d = j->valuedouble;
  } else {
    p.type = ATTN_PARAM_STRING, p.s = "";
  }
  attn_status s = attn__variant_param(&p, id, v, d);
  return s ? in_file(d, s, path) : ATTN_OK;
}

/* "window": [left, right] of a model file. */
static attn_status json_window(const char *path, const cJSON *w,
                               attn__variants *v, attn_diag *d) {
  attn_status s;
  if (!cJSON_IsArray(w) || cJSON_GetArraySize(w) != 2)
    return attn_diag_set(d, ATTN_EINVAL,
                         "%s: \"window\" must be [left, right] (-1: "
                         "unbounded)",
                         path);
  if ((s = json_param(path, "window[0]", w->child, ATTN__V_WL, v, d)) ||
      (s = json_param(path, "window[1]", w->child->next, ATTN__V_WR, v, d)))
    return s;
  return ATTN_OK;
}

/* "rotary": {...} of a model file: on, with base, dims and interleaved
 * fixed (defaults when absent) and query_offset only when named. */
static attn_status json_rotary(const char *path, const cJSON *r, int64_t Dh,
                               attn__variants *v, attn_diag *d) {
  static const char *const keys[] = {"base", "dims", "interleaved",
                                     "query_offset"};
  static const char *const labels[] = {"rotary.base", "rotary.dims",
                                       "rotary.interleaved",
                                       "rotary.query_offset"};
  const cJSON *c;
  attn_status s;
  if (cJSON_IsBool(r))
    return json_param(path, "rotary", r, ATTN__V_ROTARY, v, d);
  if (!cJSON_IsObject(r))
    return attn_diag_set(d, ATTN_EINVAL,
                         "%s: \"rotary\" must be an object {\"base\", "
                         "\"dims\", \"interleaved\", \"query_offset\"}",
                         path);
  cJSON_ArrayForEach(c, r) {
    int k = 0;
    while (k < 4 && strcmp(c->string, keys[k]) != 0) k++;
    if (k == 4)
      return attn_diag_set(d, ATTN_EINVAL,
                           "%s: unknown key 'rotary.%.40s' (expected "
                           "rotary.base, .dims, .interleaved, .query_offset)",
                           path, c->string);
    if ((s = json_param(path, labels[k], c, ATTN__V_RBASE + k, v, d))) return s;
  }
  v->given[ATTN__V_ROTARY] = true, v->i[ATTN__V_ROTARY] = 1;
  if (!v->given[ATTN__V_RBASE])
    v->given[ATTN__V_RBASE] = true, v->d[ATTN__V_RBASE] = 10000;
  if (!v->given[ATTN__V_RDIMS])
    v->given[ATTN__V_RDIMS] = true, v->i[ATTN__V_RDIMS] = Dh;
  if (!v->given[ATTN__V_RINTER]) v->given[ATTN__V_RINTER] = true;
  return ATTN_OK;
}

/* "alibi_slopes": [H numbers] of a model file, into v->slopes (owned). */
static attn_status json_slopes(const char *path, const cJSON *a, int64_t H,
                               attn__variants *v, attn_diag *d) {
  if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != H)
    return attn_diag_set(d, ATTN_EINVAL,
                         "%s: \"alibi_slopes\" must be a list of num_heads = "
                         "%lld numbers (one per query head)",
                         path, LL(H));
  if (!(v->slopes = calloc((size_t)H, sizeof *v->slopes)))
    return attn_diag_set(d, ATTN_ENOMEM, "%s: out of memory", path);
  int64_t h = 0;
  for (const cJSON *c = a->child; c; c = c->next, h++) {
    if (!cJSON_IsNumber(c) || !attn_f32_in_range(c->valuedouble))
      return attn_diag_set(d, ATTN_EINVAL,
                           "%s: \"alibi_slopes\"[%lld] must be a finite "
                           "number",
                           path, LL(h));
    v->slopes[h] = (float)c->valuedouble;
  }
  v->n_slopes = H;
  v->given[ATTN__V_ALIBI] = true, v->i[ATTN__V_ALIBI] = 1;
  return ATTN_OK;
}

attn_status attn__variants_from_json(const char *path, const cJSON *root,
                                     int64_t H, int64_t Dh, attn__variants *v,
                                     attn_diag *d) {
  const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "causal"),
              *w = cJSON_GetObjectItemCaseSensitive(root, "window"),
              *a = cJSON_GetObjectItemCaseSensitive(root, "alibi"),
              *sl = cJSON_GetObjectItemCaseSensitive(root, "alibi_slopes"),
              *sc = cJSON_GetObjectItemCaseSensitive(root, "softcap"),
              *r = cJSON_GetObjectItemCaseSensitive(root, "rotary");
  attn_status s;
  memset(v, 0, sizeof *v);
  if (a && sl)
    return attn_diag_set(d, ATTN_EINVAL,
                         "%s: give \"alibi\" (the standard slopes) or "
                         "\"alibi_slopes\", not both",
                         path);
  if ((c && (s = json_param(path, "causal", c, ATTN__V_CAUSAL, v, d))) ||
      (w && (s = json_window(path, w, v, d))) ||
      (a && (s = json_param(path, "alibi", a, ATTN__V_ALIBI, v, d))) ||
      (sl && (s = json_slopes(path, sl, H, v, d))) ||
      (sc && (s = json_param(path, "softcap", sc, ATTN__V_SOFTCAP, v, d))) ||
      (r && (s = json_rotary(path, r, Dh, v, d))))
    return s;
  attn__variants f = *v;
  f.slopes = NULL;
  s = attn__variants_check(&f, NULL, H, Dh, NULL, d);
  memset(v->label, 0, sizeof v->label); /* the file's words: not after */
  return s ? in_file(d, s, path) : ATTN_OK;
}

/* The settings v gives, as /v1 and model files spell them, into obj. */
static bool add_json(const attn__variants *v, cJSON *obj) {
  static const char *const causal[] = {"false", "bottom_right", "top_left"};
  const bool *g = v->given;
  bool ok = true;
  if (g[ATTN__V_CAUSAL])
    ok &= (v->i[ATTN__V_CAUSAL] == ATTN_CAUSAL_NONE
               ? cJSON_AddFalseToObject(obj, "causal")
               : cJSON_AddStringToObject(
                     obj, "causal", causal[v->i[ATTN__V_CAUSAL] % 3])) != NULL;
  if (g[ATTN__V_WL] || g[ATTN__V_WR]) {
    cJSON *w = cJSON_AddArrayToObject(obj, "window");
    ok &=
        w && cJSON_AddItemToArray(
                 w, cJSON_CreateNumber(g[ATTN__V_WL] ? v->i[ATTN__V_WL] : -1));
    ok &=
        w && cJSON_AddItemToArray(
                 w, cJSON_CreateNumber(g[ATTN__V_WR] ? v->i[ATTN__V_WR] : -1));
  }
  if (v->slopes)
    ok &= cJSON_AddItemToObject(
        obj, "alibi_slopes",
        cJSON_CreateFloatArray(v->slopes, (int)v->n_slopes));
  else if (g[ATTN__V_ALIBI])
    ok &= cJSON_AddBoolToObject(obj, "alibi", v->i[ATTN__V_ALIBI] != 0) != NULL;
  if (g[ATTN__V_SOFTCAP])
    ok &=
        cJSON_AddNumberToObject(obj, "softcap", v->d[ATTN__V_SOFTCAP]) != NULL;
  if (g[ATTN__V_ROTARY] && !v->i[ATTN__V_ROTARY])
    ok &= cJSON_AddFalseToObject(obj, "rotary") != NULL;
  else if (g[ATTN__V_ROTARY]) {
    cJSON *r = cJSON_AddObjectToObject(obj, "rotary");
    ok &= r != NULL;
    if (r && g[ATTN__V_RBASE])
      ok &= cJSON_AddNumberToObject(r, "base", v->d[ATTN__V_RBASE]) != NULL;
    if (r && g[ATTN__V_RDIMS])
      ok &= cJSON_AddNumberToObject(r, "dims", (double)v->i[ATTN__V_RDIMS]) !=
            NULL;
    if (r && g[ATTN__V_RINTER])
      ok &=
          cJSON_AddBoolToObject(r, "interleaved", v->i[ATTN__V_RINTER]) != NULL;
    if (r && g[ATTN__V_ROFF])
      ok &= cJSON_AddNumberToObject(r, "query_offset",
                                    (double)v->i[ATTN__V_ROFF]) != NULL;
  }
  return ok;
}

/* The settings v gives as v2 request parameters spell them (scalars only,
 * as the protocol's $parameters allows): causal false or its alignment,
 * window_left/right, softcap, alibi (true also for fixed slopes), rotary_*. */
static bool add_v2(const attn__variants *v, cJSON *obj) {
  static const char *const causal[] = {"false", "bottom_right", "top_left"};
  bool ok = true;
  for (int id = 0; id < ATTN__V_N && ok; id++) {
    if (!v->given[id]) continue;
    const char *k = v_names[id];
    if (id == ATTN__V_CAUSAL && v->i[id] != ATTN_CAUSAL_NONE)
      ok = cJSON_AddStringToObject(obj, k, causal[v->i[id] % 3]) != NULL;
    else if (id == ATTN__V_CAUSAL || id == ATTN__V_ALIBI ||
             id == ATTN__V_ROTARY || id == ATTN__V_RINTER)
      ok = cJSON_AddBoolToObject(obj, k, v->i[id] != 0) != NULL;
    else if (id == ATTN__V_SOFTCAP || id == ATTN__V_RBASE)
      ok = cJSON_AddNumberToObject(obj, k, v->d[id]) != NULL;
    else
      ok = cJSON_AddNumberToObject(obj, k, (double)v->i[id]) != NULL;
  }
  if (ok && v->slopes && !v->given[ATTN__V_ALIBI])
    ok = cJSON_AddTrueToObject(obj, "alibi") != NULL;
  return ok;
}

attn_status attn__model_params_json(const char *names,
                                    const attn__variants *fixed,
                                    const char *precision, char **out) {
  *out = NULL;
  cJSON *obj = cJSON_CreateObject();
  bool ok = obj && cJSON_AddStringToObject(obj, "request_parameters", names);
  if (ok && precision)
    ok = cJSON_AddStringToObject(obj, "precision", precision) != NULL;
  if (ok && fixed) ok = add_v2(fixed, obj);
  if (ok) *out = cJSON_PrintUnformatted(obj);
  cJSON_Delete(obj);
  return *out ? ATTN_OK : ATTN_ENOMEM;
}

attn_status attn__variants_json(const attn__variants *v, char **out) {
  *out = NULL;
  bool any = v->slopes != NULL;
  for (int id = 0; id < ATTN__V_N; id++) any |= v->given[id];
  if (!any) return ATTN_OK;
  cJSON *obj = cJSON_CreateObject();
  if (obj && add_json(v, obj)) *out = cJSON_PrintUnformatted(obj);
  cJSON_Delete(obj);
  return *out ? ATTN_OK : ATTN_ENOMEM;
}

void attn__variants_free(attn__variants *v) {
  if (!v) return;
  free(v->slopes);
  memset(v, 0, sizeof *v);
}

/* ---- merging and checking ------------------------------------------------ */

static const char *value_str(const attn__variants *v, int id, char *buf,
                             size_t cap) {
  static const char *const causal[] = {"false", "\"bottom_right\"",
                                       "\"top_left\""};
  if (id == ATTN__V_CAUSAL) return causal[v->i[id] % 3];
  if (id == ATTN__V_SOFTCAP || id == ATTN__V_RBASE)
    snprintf(buf, cap, "%.9g", v->d[id]);
  else if (id == ATTN__V_ALIBI || id == ATTN__V_ROTARY || id == ATTN__V_RINTER)
    snprintf(buf, cap, "%s", v->i[id] ? "true" : "false");
  else
    snprintf(buf, cap, "%lld", LL(v->i[id]));
  return buf;
}

attn_status attn__variants_merge(const attn__variants *fixed, const char *model,
                                 bool slopes_input, attn__variants *req,
                                 attn_diag *d) {
  char a[40], b[40];
  if (slopes_input && fixed->given[ATTN__V_ALIBI])
    return attn_diag_set(d, ATTN_EINVAL,
                         "input 'alibi_slopes' given, but model '%s' fixes "
                         "alibi = %s%s",
                         model, value_str(fixed, ATTN__V_ALIBI, a, sizeof a),
                         fixed->slopes ? " with its own slopes" : "");
  for (int id = 0; id < ATTN__V_N; id++) {
    if (!fixed->given[id]) continue;
    bool same = id == ATTN__V_SOFTCAP || id == ATTN__V_RBASE
                    ? req->d[id] == fixed->d[id]
                    : req->i[id] == fixed->i[id];
    if (req->given[id] && !same)
      return attn_diag_set(d, ATTN_EINVAL,
                           "'%s' is %s, but model '%s' fixes %s = %s",
                           who(req, id), value_str(req, id, a, sizeof a), model,
                           v_names[id], value_str(fixed, id, b, sizeof b));
    req->given[id] = true;
    req->i[id] = fixed->i[id];
    req->d[id] = fixed->d[id];
  }
  req->slopes = fixed->slopes;
  req->n_slopes = fixed->n_slopes;
  return ATTN_OK;
}

static bool rotary_on(const attn__variants *v) {
  if (v->given[ATTN__V_ROTARY]) return v->i[ATTN__V_ROTARY] != 0;
  for (int id = ATTN__V_RBASE; id < ATTN__V_N; id++)
    if (v->given[id]) return true;
  return false;
}

/* The rotary settings against the head dim Dh. */
static attn_status check_rotary(const attn__variants *v, int64_t Dh,
                                attn_attend_opts *o, attn_diag *d) {
  if (v->given[ATTN__V_ROTARY] && !v->i[ATTN__V_ROTARY])
    for (int id = ATTN__V_RBASE; id < ATTN__V_N; id++)
      if (v->given[id])
        return attn_diag_set(d, ATTN_EINVAL,
                             "'%s' given with '%s' false: turn rotary on or "
                             "leave its settings out",
                             who(v, id), who(v, ATTN__V_ROTARY));
  if (!rotary_on(v)) return ATTN_OK;
  int64_t R = v->given[ATTN__V_RDIMS] ? v->i[ATTN__V_RDIMS] : Dh;
  if (!v->given[ATTN__V_RDIMS] && R % 2 != 0)
    return attn_diag_set(d, ATTN_EINVAL,
                         "rotary positions rotate pairs of values, and the "
                         "head dim %lld is odd: give rotary dims, even and "
                         "below it",
                         LL(Dh));
  if (R % 2 != 0 || R > Dh)
    return attn_diag_set(d, ATTN_EINVAL,
                         "'%s' is %lld, but rotary positions rotate pairs of "
                         "the head's values: it must be even and at most the "
                         "head dim %lld",
                         who(v, ATTN__V_RDIMS), LL(R), LL(Dh));
  o->rotary.on = 1;
  o->rotary.dims = R;
  o->rotary.base = v->given[ATTN__V_RBASE] ? v->d[ATTN__V_RBASE] : 10000;
  o->rotary.interleaved = (int)v->i[ATTN__V_RINTER];
  o->rotary.has_query_offset = v->given[ATTN__V_ROFF];
  o->rotary.query_offset = v->i[ATTN__V_ROFF];
  return ATTN_OK;
}

/* alibi, alibi_slopes (input or fixed) against H query heads. */
static attn_status check_alibi(const attn__variants *v,
                               const attn_tensor *slopes, int64_t H,
                               attn_attend_opts *o, attn_diag *d) {
  bool flag = v->given[ATTN__V_ALIBI];
  if (slopes && flag)
    return attn_diag_set(d, ATTN_EINVAL,
                         "input 'alibi_slopes' given with '%s' %s: give the "
                         "slopes, or \"alibi\": true for the standard ones",
                         who(v, ATTN__V_ALIBI),
                         v->i[ATTN__V_ALIBI] ? "true" : "false");
  if (slopes) {
    if (slopes->rank != 1 || slopes->shape[0] != H)
      return attn_diag_set(
          d, ATTN_ESHAPE,
          "input 'alibi_slopes' has %lld value%s, but the query has %lld "
          "head%s: give one slope per query head",
          LL(slopes->rank == 1 ? slopes->shape[0] : -1),
          slopes->rank == 1 && slopes->shape[0] == 1 ? "" : "s", LL(H),
          H == 1 ? "" : "s");
    o->alibi_slopes = slopes->data;
  } else if (v->slopes) {
    if (v->n_slopes != H)
      return attn_diag_set(d, ATTN_EINTERNAL, "fixed slopes for %lld heads",
                           LL(v->n_slopes));
    o->alibi_slopes = v->slopes;
  }
  return ATTN_OK;
}

attn_status attn__variants_check(const attn__variants *v,
                                 const attn_tensor *slopes, int64_t H,
                                 int64_t Dh, attn_attend_opts *out,
                                 attn_diag *d) {
  attn_attend_opts scratch = {0}, *o = out ? out : &scratch;
  attn_status s;
  o->causal = (int)v->i[ATTN__V_CAUSAL];
  if (v->given[ATTN__V_WL] || v->given[ATTN__V_WR]) {
    o->has_window = 1;
    o->window_left = v->given[ATTN__V_WL] ? v->i[ATTN__V_WL] : -1;
    o->window_right = v->given[ATTN__V_WR] ? v->i[ATTN__V_WR] : -1;
  }
  if (o->causal && o->has_window && o->window_right > 0)
    return attn_diag_set(
        d, ATTN_EINVAL,
        "'%s' is %lld with '%s' %s: causal already hides "
        "every key right of the diagonal, so a right bound "
        "above 0 means nothing; use 0 or -1",
        who(v, ATTN__V_WR), LL(o->window_right), who(v, ATTN__V_CAUSAL),
        o->causal == ATTN_CAUSAL_TOP_LEFT ? "\"top_left\"" : "true");
  if (v->given[ATTN__V_SOFTCAP]) o->softcap = (float)v->d[ATTN__V_SOFTCAP];
  if ((s = check_alibi(v, slopes, H, o, d)) || (s = check_rotary(v, Dh, o, d)))
    return s;
  return ATTN_OK;
}

bool attn__variants_standard_alibi(const attn__variants *v,
                                   const attn_attend_opts *o) {
  return v->given[ATTN__V_ALIBI] && v->i[ATTN__V_ALIBI] && !o->alibi_slopes;
}
