/* resident.c - load one resident model description (<name>.json) and its
 * weights.
 *
 * Design: the json file is read whole (refused unread above
 * ATTN_MODEL_MAX_JSON_BYTES), every key is checked against one table
 * (read_keys), the dimensions are validated (read_dims) and the parameter
 * count is computed with overflow checks and compared with
 * ATTN_MODEL_MAX_PARAMS (count_params) - all before any weight memory
 * exists.  Weights come either from a .safetensors file with PyTorch
 * nn.MultiheadAttention state_dict names ([out, in] layout) or from a seeded
 * PRNG.  The engine receives ATTN_W_OUT_IN views: the q, k and v blocks of a
 * packed in_proj_weight [3E, E] are pointer offsets into that one tensor, the
 * q, k and v parts of in_proj_bias likewise.  Seeded weights use the same
 * packed layout in one block, so both kinds look alike to the engine.
 *
 * "precision": "bf16" makes the model's requests bf16 by default and loads
 * its file with F16 and BF16 tensors kept in bfloat16 (safetensors.h's
 * attn_safetensors_load_as): the engine's views then carry bf16 bits
 * (attn_weight.bf16), half the memory, and its biases are widened into
 * `mem`.  weight_bytes counts what the model holds.
 *
 * Seeded weights: splitmix64 from the seed, uniform in +-sqrt(6/(in+out))
 * (Xavier/Glorot) for each of the four projections in turn (q, k, v, out),
 * biases zero as PyTorch initialises them.  The bytes are the same on every
 * platform for the same seed.
 *
 * Messages name the json file by the label the registry gives
 * ("models/x.json") and the weights beside it ("models/w.safetensors"),
 * or, outside the models folder (an absolute "weights", or one with ".."),
 * only as "models/x.json's weights": a client reads them.  The log's copy
 * (attn__resident_load's detail) has the paths instead.
 *
 * Threads: called once per file at registry creation and on every load; a
 * loaded model is read-only afterwards.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/model.h"
#include "attn/safetensors.h"
#include "attn/file.h"
#include "internal.h"

#define LL(x) ((long long)(x))
#define SEED_MAX 9007199254740991.0 /* 2^53 - 1: exact in a JSON double */

void attn__resident_free(attn__resident *r) {
  if (!r) return;
  free(r->name);
  free(r->version);
  free(r->description);
  free(r->path);
  attn_safetensors_destroy(r->st);
  free(r->mem);
  attn__variants_free(&r->fixed);
  free(r->fixed_json);
  memset(r, 0, sizeof *r);
}

/* Names appear in URL paths: 1..ATTN_MODEL_MAX_NAME of [A-Za-z0-9_.-], no
 * leading dot. */
bool attn__model_name_ok(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > ATTN_MODEL_MAX_NAME || s[0] == '.') return false;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
          (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-'))
      return false;
  }
  return true;
}

/* The keys a description may hold. */
enum {
  K_NAME,
  K_E,
  K_H,
  K_HKV,
  K_KDIM,
  K_VDIM,
  K_BIAS,
  K_WEIGHTS,
  K_SEED,
  K_DESC,
  K_VERSION,
  K_CAUSAL, /* the variants: read by variants.c */
  K_WINDOW,
  K_ALIBI,
  K_SLOPES,
  K_SOFTCAP,
  K_ROTARY,
  K_PRECISION, /* issue 35 */
  K_N
};
static const char *const keys[K_N] = {
    "name",    "embed_dim", "num_heads", "num_kv_heads", "kdim",
    "vdim",    "bias",      "weights",   "seed",         "description",
    "version", "causal",    "window",    "alibi",        "alibi_slopes",
    "softcap", "rotary",    "precision"};

static attn_status json_dim(const cJSON *j, const char *path, const char *key,
                            int64_t *v, attn_diag *d) {
  if (!cJSON_IsNumber(j) || j->valuedouble != floor(j->valuedouble) ||
      j->valuedouble < 1 || j->valuedouble > (double)ATTN_MODEL_MAX_DIM)
    return attn_diag_set(d, ATTN_EINVAL,
                         "%s: \"%s\" must be an integer in 1..%lld", path, key,
                         LL(ATTN_MODEL_MAX_DIM));
  *v = (int64_t)j->valuedouble;
  return ATTN_OK;
}

static attn_status json_str(const cJSON *j, const char *path, const char *key,
                            attn_diag *d) {
  if (!cJSON_IsString(j))
    return attn_diag_set(d, ATTN_EINVAL, "%s: \"%s\" must be a string", path,
                         key);
  return ATTN_OK;
}

/* weights path relative to the folder of `at` (the json file's path or
 * label) unless absolute. */
static char *resolve(const char *at, const char *rel) {
  const char *slash = strrchr(at, '/');
  size_t dl = rel[0] == '/' || !slash ? 0 : (size_t)(slash - at) + 1;
  size_t rl = strlen(rel);
  char *p = malloc(dl + rl + 1);
  if (!p) return NULL;
  memcpy(p, at, dl);
  memcpy(p + dl, rel, rl + 1);
  return p;
}

/* Whether rel, a "weights" path, stays in the json file's folder: not
 * absolute, no ".." among its parts. */
static bool inside(const char *rel) {
  if (rel[0] == '/') return false;
  for (const char *p = rel;;) {
    if (p[0] == '.' && p[1] == '.' && (p[2] == '/' || p[2] == '\0'))
      return false;
    const char *slash = strchr(p, '/');
    if (!slash) return true;
    p = slash + 1;
  }
}

/* The weights file as messages a client may read name it: beside the
 * json file's label ("models/w.safetensors") when it is inside the models
 * folder, else only through the json file ("models/x.json's weights"), so
 * that no path of the server shows. */
static char *weights_label(const char *label, const char *rel) {
  if (inside(rel)) return resolve(label, rel);
  size_t n = strlen(label) + sizeof "'s weights";
  char *p = malloc(n);
  if (p) snprintf(p, n, "%s's weights", label);
  return p;
}

void attn__diag_unlabel(attn_diag *log, const attn_diag *d, const char *label,
                        const char *path) {
  if (!log) return;
  size_t n = strlen(label);
  if (strncmp(d->msg, label, n) == 0 && d->msg[n] == ':')
    snprintf(log->msg, sizeof log->msg, "%s%s", path, d->msg + n);
  else
    snprintf(log->msg, sizeof log->msg, "%s", d->msg);
}

/* ---- weights ------------------------------------------------------------ */

typedef struct dims {
  int64_t E, H, Hkv, kdim, vdim, kw; /* kw = Hkv * E / H */
} dims;

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* [out, in] block of Xavier-uniform values. */
static void fill_xavier(float *w, int64_t out, int64_t in, uint64_t *s) {
  const double a = sqrt(6.0 / (double)(out + in));
  const size_t n = (size_t)out * (size_t)in;
  for (size_t i = 0; i < n; i++) {
    double u = (double)(splitmix64(s) >> 40) * (1.0 / 16777216.0); /* [0,1) */
    w[i] = (float)((2.0 * u - 1.0) * a);
  }
}

/* Wire the views over a block laid out as q | k | v (OUT_IN) | out, and the
 * biases in | out, starting at w and b. */
static void set_views(attn__resident *r, const dims *z, const float *q,
                      const float *k, const float *v, const float *o,
                      const float *in_b, const float *out_b) {
  r->wq = (attn_weight){q, ATTN_W_OUT_IN, z->E, NULL};
  r->wk = (attn_weight){k, ATTN_W_OUT_IN, z->kdim, NULL};
  r->wv = (attn_weight){v, ATTN_W_OUT_IN, z->vdim, NULL};
  r->wo = (attn_weight){o, ATTN_W_OUT_IN, z->E, NULL};
  if (in_b) {
    r->bq = in_b;
    r->bk = in_b + z->E;
    r->bv = in_b + z->E + z->kw;
  }
  r->bo = out_b;
}

static size_t held_bytes(const attn__resident *r, size_t mem_floats);

static attn_status seed_weights(attn__resident *r, const char *label,
                                const dims *z, uint64_t seed, size_t total,
                                attn_diag *d) {
  r->mem = calloc(total, sizeof *r->mem);
  if (!r->mem)
    return attn_diag_set(d, ATTN_ENOMEM, "%s: out of memory for %zu weights",
                         label, total);
  uint64_t s = seed;
  float *q = r->mem, *k = q + z->E * z->E, *v = k + z->kw * z->kdim,
        *o = v + z->kw * z->vdim, *b = o + z->E * z->E;
  fill_xavier(q, z->E, z->E, &s);
  fill_xavier(k, z->kw, z->kdim, &s);
  fill_xavier(v, z->kw, z->vdim, &s);
  fill_xavier(o, z->E, z->E, &s);
  set_views(r, z, q, k, v, o, r->bias ? b : NULL,
            r->bias ? b + z->E + 2 * z->kw : NULL); /* zeros */
  r->seeded = true;
  r->weight_bytes = held_bytes(r, total);
  return ATTN_OK;
}

/* Tensor `name` of the file with exactly the given shape, finite; NULL data
 * with *s set on error (missing is ATTN_EINVAL unless `optional`). */
static const attn_tensor *tensor_of(const attn_safetensors *st,
                                    const char *file, const char *name,
                                    int rank, int64_t d0, int64_t d1,
                                    attn_status *s, attn_diag *d) {
  const attn_safetensors_entry *e = attn_safetensors_find(st, name);
  if (!e) {
    *s = attn_diag_set(d, ATTN_EINVAL, "%s: missing tensor '%s'", file, name);
    return NULL;
  }
  const attn_tensor *t = &e->tensor;
  if (t->rank != rank || t->shape[0] != d0 ||
      (rank == 2 && t->shape[1] != d1)) {
    char got[96] = "[", want[48];
    size_t at = 1;
    for (int i = 0; i < t->rank && at < sizeof got; i++) {
      int w = snprintf(got + at, sizeof got - at, "%s%lld", i ? ", " : "",
                       LL(t->shape[i]));
      if (w > 0) at += (size_t)w;
    }
    if (at < sizeof got) snprintf(got + at, sizeof got - at, "]");
    if (rank == 2)
      snprintf(want, sizeof want, "[%lld, %lld]", LL(d0), LL(d1));
    else
      snprintf(want, sizeof want, "[%lld]", LL(d0));
    *s = attn_diag_set(d, ATTN_ESHAPE,
                       "%s: tensor '%s' has shape %s, expected %s", file, name,
                       got, want);
    return NULL;
  }
  size_t n;
  attn_shape_numel(t->rank, t->shape, &n);
  const float *f = t->data;
  const uint16_t *h = t->data;
  bool half = t->dtype == ATTN_DT_BF16;
  for (size_t i = 0; i < n; i++)
    if (half ? (h[i] & 0x7f80u) == 0x7f80u : !isfinite(f[i])) {
      *s = attn_diag_set(d, ATTN_ENONFINITE,
                         "%s: tensor '%s' element %zu is not finite", file,
                         name, i);
      return NULL;
    }
  return t;
}

/* A bias held in bfloat16 (a bf16 model's BF16 or F16 file) widened into
 * r->mem at *at (the biases are added in fp32). */
static const float *bias_f32(attn__resident *r, const attn_tensor *t,
                             size_t *at) {
  if (!t || t->dtype != ATTN_DT_BF16) return t ? t->data : NULL;
  float *b = r->mem + *at;
  const uint16_t *h = t->data;
  for (int64_t i = 0; i < t->shape[0]; i++) b[i] = attn_bf16_to_f32(h[i]);
  *at += (size_t)t->shape[0];
  return b;
}

/* w's data (fp32) or bf16 bits (a tensor kept in bfloat16), element off
 * of tensor t. */
static void view_of(attn_weight *w, const attn_tensor *t, int64_t off) {
  bool half = t->dtype == ATTN_DT_BF16;
  w->data = half ? NULL : (const float *)t->data + off;
  w->bf16 = half ? (const uint16_t *)t->data + off : NULL;
}

/* The bytes r holds: every tensor of its file as stored, and r->mem. */
static size_t held_bytes(const attn__resident *r, size_t mem_floats) {
  size_t b = mem_floats * sizeof(float), n;
  for (size_t i = 0; r->st && i < attn_safetensors_count(r->st); i++) {
    const attn_tensor *t = &attn_safetensors_at(r->st, i)->tensor;
    if (attn_shape_numel(t->rank, t->shape, &n))
      b += n * attn_dtype_size(t->dtype);
  }
  return b;
}

/* The weights of the file at path (named `file` in messages). */
static attn_status file_weights(attn__resident *r, const dims *z,
                                const char *path, const char *file,
                                size_t total, attn_diag *d) {
  /* a bf16 model keeps F16 and BF16 tensors in bfloat16 */
  attn_status s = attn__safetensors_read(
      path, file, total, r->precision == ATTN_PRECISION_BF16, &r->st, d);
  if (s) return s;
  const attn_safetensors *st = r->st;
  const bool packable = z->kdim == z->E && z->vdim == z->E && z->Hkv == z->H;
  const bool packed = attn_safetensors_find(st, "in_proj_weight") != NULL;
  static const char *const packed_names[] = {
      "in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"};
  static const char *const split_names[] = {"q_proj_weight",   "k_proj_weight",
                                            "v_proj_weight",   "in_proj_bias",
                                            "out_proj.weight", "out_proj.bias"};
  const char *const *allowed = packed ? packed_names : split_names;
  size_t n_allowed = packed ? 4 : 6;
  if (packed && !packable)
    return attn_diag_set(d, ATTN_EINVAL,
                         "%s: tensor 'in_proj_weight' needs kdim == vdim == "
                         "embed_dim and num_kv_heads == num_heads; use "
                         "q_proj_weight, k_proj_weight, v_proj_weight",
                         file);
  for (size_t i = 0; i < attn_safetensors_count(st); i++) {
    const char *nm = attn_safetensors_at(st, i)->name;
    bool ok = false;
    for (size_t j = 0; j < n_allowed; j++) ok |= strcmp(nm, allowed[j]) == 0;
    if (ok && !r->bias &&
        (strcmp(nm, "in_proj_bias") == 0 || strcmp(nm, "out_proj.bias") == 0))
      return attn_diag_set(d, ATTN_EINVAL,
                           "%s: tensor '%s' present but the model says "
                           "\"bias\": false",
                           file, nm);
    if (!ok)
      return attn_diag_set(d, ATTN_EINVAL,
                           "%s: unexpected tensor '%s' (expected "
                           "nn.MultiheadAttention names: %s, "
                           "out_proj.weight%s)",
                           file, nm,
                           packed ? "in_proj_weight"
                                  : "q_proj_weight, k_proj_weight, "
                                    "v_proj_weight",
                           r->bias ? ", in_proj_bias, out_proj.bias" : "");
  }
  const attn_tensor *q, *k, *v, *o, *ib = NULL, *ob = NULL;
  int64_t ko = 0, vo = 0;
  s = ATTN_OK;
  if (packed) {
    if (!(q = tensor_of(st, file, "in_proj_weight", 2, 3 * z->E, z->E, &s, d)))
      return s;
    k = v = q;
    ko = z->E * z->E, vo = 2 * z->E * z->E;
  } else {
    if (!(q = tensor_of(st, file, "q_proj_weight", 2, z->E, z->E, &s, d)) ||
        !(k = tensor_of(st, file, "k_proj_weight", 2, z->kw, z->kdim, &s, d)) ||
        !(v = tensor_of(st, file, "v_proj_weight", 2, z->kw, z->vdim, &s, d)))
      return s;
  }
  if (!(o = tensor_of(st, file, "out_proj.weight", 2, z->E, z->E, &s, d)))
    return s;
  if (r->bias &&
      (!(ib = tensor_of(st, file, "in_proj_bias", 1, z->E + 2 * z->kw, 0, &s,
                        d)) ||
       !(ob = tensor_of(st, file, "out_proj.bias", 1, z->E, 0, &s, d))))
    return s;
  size_t at = 0, widen = (ib && ib->dtype == ATTN_DT_BF16 ? ib->shape[0] : 0) +
                         (ob && ob->dtype == ATTN_DT_BF16 ? ob->shape[0] : 0);
  if (widen && !(r->mem = calloc(widen, sizeof *r->mem)))
    return attn_diag_set(d, ATTN_ENOMEM, "%s: out of memory", file);
  const float *in_b = bias_f32(r, ib, &at), *out_b = bias_f32(r, ob, &at);
  set_views(r, z, NULL, NULL, NULL, NULL, in_b, out_b);
  view_of(&r->wq, q, 0);
  view_of(&r->wk, k, ko);
  view_of(&r->wv, v, vo);
  view_of(&r->wo, o, 0);
  r->weight_bytes = held_bytes(r, widen);
  return ATTN_OK;
}

/* ---- the description file ------------------------------------------------ */

/* The members of the description, by K_*, into k: each known and given at
 * most once. */
static attn_status read_keys(const char *path, const cJSON *root,
                             const cJSON **k, attn_diag *d) {
  const cJSON *c;
  if (!cJSON_IsObject(root))
    return attn_diag_set(d, ATTN_EPARSE, "%s: not a JSON object", path);
  cJSON_ArrayForEach(c, root) {
    int id = -1;
    for (int i = 0; i < K_N; i++)
      if (strcmp(c->string, keys[i]) == 0) id = i;
    if (id < 0)
      return attn_diag_set(d, ATTN_EINVAL,
                           "%s: unknown key '%.40s' (expected name, "
                           "embed_dim, num_heads, num_kv_heads, kdim, vdim, "
                           "bias, weights, seed, description, version, "
                           "causal, window, alibi, alibi_slopes, softcap, "
                           "rotary, precision)",
                           path, c->string);
    if (k[id])
      return attn_diag_set(d, ATTN_EINVAL, "%s: key '%s' given twice", path,
                           keys[id]);
    k[id] = c;
  }
  return ATTN_OK;
}

/* The dimensions: embed_dim and num_heads, the others defaulting to them,
 * divisible as the engine needs. */
static attn_status read_dims(const char *path, const cJSON *const *k, dims *z,
                             attn_diag *d) {
  attn_status s;
  if ((s = json_dim(k[K_E], path, "embed_dim", &z->E, d)) ||
      (s = json_dim(k[K_H], path, "num_heads", &z->H, d)))
    return s;
  z->Hkv = z->H, z->kdim = z->vdim = z->E;
  if ((k[K_HKV] &&
       (s = json_dim(k[K_HKV], path, "num_kv_heads", &z->Hkv, d))) ||
      (k[K_KDIM] && (s = json_dim(k[K_KDIM], path, "kdim", &z->kdim, d))) ||
      (k[K_VDIM] && (s = json_dim(k[K_VDIM], path, "vdim", &z->vdim, d))))
    return s;
  if (z->E % z->H != 0)
    return attn_diag_set(d, ATTN_EINVAL,
                         "%s: embed_dim %lld is not divisible by num_heads "
                         "%lld",
                         path, LL(z->E), LL(z->H));
  if (z->H % z->Hkv != 0)
    return attn_diag_set(d, ATTN_EINVAL,
                         "%s: num_heads %lld is not a multiple of "
                         "num_kv_heads %lld",
                         path, LL(z->H), LL(z->Hkv));
  z->kw = z->Hkv * (z->E / z->H);
  return ATTN_OK;
}

/* r->bias, and where the weights come from: exactly one of "weights" (a
 * file name) and "seed" (into *seed). */
static attn_status read_source(const char *path, const cJSON *const *k,
                               attn__resident *r, uint64_t *seed,
                               attn_diag *d) {
  attn_status s;
  r->bias = true;
  if (k[K_BIAS]) {
    if (!cJSON_IsBool(k[K_BIAS]))
      return attn_diag_set(d, ATTN_EINVAL, "%s: \"bias\" must be true or false",
                           path);
    r->bias = cJSON_IsTrue(k[K_BIAS]);
  }
  if (!!k[K_WEIGHTS] == !!k[K_SEED])
    return attn_diag_set(d, ATTN_EINVAL,
                         "%s: give exactly one of \"weights\" (a .safetensors "
                         "file) and \"seed\"",
                         path);
  if (k[K_WEIGHTS] && (s = json_str(k[K_WEIGHTS], path, "weights", d)))
    return s;
  if (k[K_WEIGHTS] && !k[K_WEIGHTS]->valuestring[0])
    return attn_diag_set(d, ATTN_EINVAL,
                         "%s: \"weights\" is empty; give the name of a "
                         ".safetensors file",
                         path);
  if (k[K_WEIGHTS] &&
      strlen(k[K_WEIGHTS]->valuestring) > ATTN_MODEL_MAX_WEIGHTS_PATH)
    return attn_diag_set(
        d, ATTN_EINVAL, "%s: \"weights\" is a path of %zu bytes; at most %d",
        path, strlen(k[K_WEIGHTS]->valuestring), ATTN_MODEL_MAX_WEIGHTS_PATH);
  *seed = 0;
  if (k[K_SEED]) {
    double x = k[K_SEED]->valuedouble;
    if (!cJSON_IsNumber(k[K_SEED]) || x != floor(x) || x < 0 || x > SEED_MAX)
      return attn_diag_set(
          d, ATTN_EINVAL, "%s: \"seed\" must be an integer in 0..2^53-1", path);
    *seed = (uint64_t)x;
  }
  return ATTN_OK;
}

/* "precision": "fp32" (the default) or "bf16", the arithmetic of the
 * model's requests unless a request asks fp32. */
static attn_status read_precision(const char *path, const cJSON *v,
                                  attn_precision *p, attn_diag *d) {
  *p = ATTN_PRECISION_FP32;
  if (!v) return ATTN_OK;
  if (cJSON_IsString(v) && attn_precision_parse(v->valuestring, p))
    return ATTN_OK;
  return attn_diag_set(d, ATTN_EINVAL,
                       "%s: \"precision\" must be \"fp32\" or \"bf16\"", path);
}

/* "version" as text into vbuf[32]: "1" when absent. */
static attn_status read_version(const char *path, const cJSON *v, char *vbuf,
                                attn_diag *d) {
  snprintf(vbuf, 32, "1");
  if (!v) return ATTN_OK;
  if (cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) &&
      v->valuedouble >= 0 && v->valuedouble <= SEED_MAX)
    snprintf(vbuf, 32, "%llu", (unsigned long long)v->valuedouble);
  else if (cJSON_IsString(v) && attn__model_name_ok(v->valuestring) &&
           strlen(v->valuestring) < 32)
    snprintf(vbuf, 32, "%s", v->valuestring);
  else
    return attn_diag_set(d, ATTN_EINVAL,
                         "%s: \"version\" must be a non-negative integer or "
                         "1..31 of [A-Za-z0-9_.-]",
                         path);
  return ATTN_OK;
}

/* Parameter count, overflow-checked, before any weight memory: *total the
 * weights the model holds, *bound what a weights file may hold.  `bound`
 * counts the biases even without "bias" so that a file holding them fails
 * with a message naming them rather than on the size bound. */
static attn_status count_params(const char *path, const dims *z, bool bias,
                                size_t *total, size_t *bound, attn_diag *d) {
  size_t t;
  const int64_t terms[][2] = {{z->E, z->E},
                              {z->kw, z->kdim},
                              {z->kw, z->vdim},
                              {z->E, z->E},
                              {1, 2 * z->E + 2 * z->kw}};
  *total = *bound = 0;
  for (size_t i = 0; i < sizeof terms / sizeof terms[0]; i++) {
    if (!attn_size_mul((size_t)terms[i][0], (size_t)terms[i][1], &t) ||
        !attn_size_add(*bound, t, bound) || *bound > ATTN_MODEL_MAX_PARAMS)
      return attn_diag_set(d, ATTN_ETOOBIG,
                           "%s: the model would have more than %zu "
                           "parameters",
                           path, ATTN_MODEL_MAX_PARAMS);
    if (i < 4 || bias) *total += t;
  }
  return ATTN_OK;
}

/* The description at json_path (root), named `path` in messages: keys,
 * name, dimensions, the weights' source, description and version, the
 * parameter count; then r's strings and its weights, seeded or read from
 * the file (whose failure, with the file's path, goes into *detail). */
static attn_status load_json(const char *json_path, const char *path,
                             const cJSON *root, attn__resident *r, attn_diag *d,
                             attn_diag *detail) {
  const cJSON *k[K_N] = {NULL};
  attn_status s;
  if ((s = read_keys(path, root, k, d))) return s;
  if (!k[K_NAME] || !k[K_E] || !k[K_H])
    return attn_diag_set(d, ATTN_EINVAL, "%s: missing required key '%s'", path,
                         !k[K_NAME] ? "name"
                         : !k[K_E]  ? "embed_dim"
                                    : "num_heads");
  if ((s = json_str(k[K_NAME], path, "name", d))) return s;
  if (!attn__model_name_ok(k[K_NAME]->valuestring))
    return attn_diag_set(d, ATTN_EINVAL,
                         "%s: \"name\" must be 1..%d of [A-Za-z0-9_.-] not "
                         "starting with '.'",
                         path, ATTN_MODEL_MAX_NAME);
  dims z = {0};
  uint64_t seed;
  char vbuf[32];
  size_t total, bound;
  if ((s = read_dims(path, k, &z, d)) ||
      (s = read_source(path, k, r, &seed, d)) ||
      (k[K_DESC] && (s = json_str(k[K_DESC], path, "description", d))) ||
      (s = read_version(path, k[K_VERSION], vbuf, d)) ||
      (s = read_precision(path, k[K_PRECISION], &r->precision, d)) ||
      (s = count_params(path, &z, r->bias, &total, &bound, d)) ||
      (s = attn__variants_from_json(path, root, z.H, z.E / z.H, &r->fixed, d)))
    return s;

  r->name = strdup(k[K_NAME]->valuestring);
  r->version = strdup(vbuf);
  r->description = k[K_DESC] ? strdup(k[K_DESC]->valuestring) : NULL;
  r->path = strdup(json_path);
  if (!r->name || !r->version || !r->path || (k[K_DESC] && !r->description) ||
      attn__variants_json(&r->fixed, &r->fixed_json) != ATTN_OK)
    return attn_diag_set(d, ATTN_ENOMEM, "%s: out of memory", path);
  r->E = z.E, r->H = z.H, r->Hkv = z.Hkv, r->kdim = z.kdim, r->vdim = z.vdim;
  if (k[K_SEED]) return seed_weights(r, path, &z, seed, total, d);
  const char *rel = k[K_WEIGHTS]->valuestring;
  char *file = resolve(json_path, rel), *label = weights_label(path, rel);
  if (!file || !label) {
    free(file);
    free(label);
    return attn_diag_set(d, ATTN_ENOMEM, "%s: out of memory", path);
  }
  /* A packed file for a model that cannot use one should fail naming
   * in_proj_weight, so the read bound also admits that layout's size. */
  size_t packed = (size_t)(4 * z.E * z.E + 4 * z.E);
  if (packed > bound)
    bound = packed < ATTN_MODEL_MAX_PARAMS ? packed : ATTN_MODEL_MAX_PARAMS;
  s = file_weights(r, &z, file, label, bound, d);
  if (s && detail) attn__diag_unlabel(detail, d, label, file);
  free(file);
  free(label);
  return s;
}

attn_status attn__resident_load(const char *json_path, const char *label,
                                attn__resident *out, attn_diag *d,
                                attn_diag *detail) {
  char *text = NULL;
  size_t len = 0;
  memset(out, 0, sizeof *out);
  attn_diag scratch;
  if (!detail) detail = &scratch;
  detail->msg[0] = '\0';
  attn_status s = attn_read_file(json_path, label, ATTN_MODEL_MAX_JSON_BYTES,
                                 &text, &len, d);
  if (s == ATTN_OK) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, false);
    if (!root) {
      size_t at = end && end >= text ? (size_t)(end - text) : 0;
      s = attn_diag_set(d, ATTN_EPARSE, "%s: invalid JSON near byte %zu", label,
                        at);
    }
    for (const char *p = end; root && s == ATTN_OK && p < text + len; p++)
      if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
        s = attn_diag_set(d, ATTN_EPARSE,
                          "%s: unexpected text after the JSON object", label);
    if (s == ATTN_OK) s = load_json(json_path, label, root, out, d, detail);
    cJSON_Delete(root);
    free(text);
  }
  if (s) {
    attn__resident_free(out);
    /* the weights' failure set it; any other names the json file */
    if (!detail->msg[0]) attn__diag_unlabel(detail, d, label, json_path);
  }
  return s;
}

attn_status attn__resident_name(const char *json_path, const char *label,
                                char *name, size_t cap, attn_diag *d) {
  char *text = NULL;
  size_t len = 0;
  attn_status s = attn_read_file(json_path, label, ATTN_MODEL_MAX_JSON_BYTES,
                                 &text, &len, d);
  if (s) return s;
  cJSON *root = cJSON_ParseWithLength(text, len);
  const cJSON *n = cJSON_GetObjectItemCaseSensitive(root, "name");
  if (!cJSON_IsObject(root))
    s = attn_diag_set(d, ATTN_EPARSE, "%s: %s", label,
                      root ? "not a JSON object" : "invalid JSON");
  else if (!cJSON_IsString(n) || strlen(n->valuestring) >= cap)
    s = attn_diag_set(d, ATTN_EINVAL, "%s: no \"name\" of at most %zu bytes",
                      label, cap - 1);
  else
    memcpy(name, n->valuestring, strlen(n->valuestring) + 1);
  cJSON_Delete(root);
  free(text);
  return s;
}
