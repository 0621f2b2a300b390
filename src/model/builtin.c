/* builtin.c - from attn_infer_request to engine call to attn_infer_response,
 * for the built-in models "sdpa" and "mha" and for resident models (an mha
 * whose weights and dims are fixed by the registry).
 *
 * Design: one request goes through fixed stages, each finishing before the
 * next starts so that the first client mistake is the one reported:
 *   1. names and types: every input, parameter and output name is known and
 *      given once; datatypes fit (activations and weights FP32, masks BOOL or
 *      FP32, key_lengths INT32/INT64); parameter types fit.
 *   2. shapes: the 4-d sdpa problem or the mha problem is derived from the
 *      inputs with messages naming the input and dimension; masks checked.
 *   3. limits: Lq/Lk against max_seq_len, every output's element count
 *      against max_tensor_elements, JSON attn_weights against
 *      max_weights_elements - all before anything is allocated.
 *   4. engine check and sizes (attn_*_check, attn_*_bytes), then allocate the
 *      outputs (zeroed), run, and hand the buffers to the response.
 * attn__model_run is those stages in order: plan_request (1 to 3: read_*,
 * sdpa_shapes or mha_shapes, plan_variants, check_limits), run_engine (4),
 * make_response.  The attention variants (causal alignment, window, ALiBi,
 * softcap, rotary) are variants.c's: read_params hands it their
 * parameters, plan_variants merges a resident model's fixed settings and
 * checks every combination against the problem's heads and head dim.
 * Nothing here holds state between calls; every function is reentrant.  No
 * threads of its own: the attn_exec from the caller goes to the engine.
 * Inputs are read in place (engine views over the request's tensors); the
 * only copies are key_lengths, widened to int64 (B values), and, for an
 * fp32 request of a resident model held in bfloat16, its weights widened
 * for that call (widen_weights).
 * Precision (parameter "precision", resolve_precision): the request's,
 * else the resident model's, else fp32; bf16 of an fp32 resident model is
 * refused.  The response names the precision and the kernel the engine's
 * products ran on in this call (attn_exec.kernel: "avx512+blas" when some
 * fell through to OpenBLAS); an output's binary datatype (FP32, FP16,
 * BF16) passes through.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/tensor.h" /* attn_f32_in_range */
#include "attn/model.h"
#include "internal.h"

#define LL(x) ((long long)(x))

/* Input ids; sdpa and resident models take the first IN_N_COMMON. */
enum {
  IN_QUERY,
  IN_KEY,
  IN_VALUE,
  IN_MASK,
  IN_KPM,
  IN_KLEN,
  IN_ALIBI,
  IN_N_COMMON,
  IN_WQ = IN_N_COMMON,
  IN_WK,
  IN_WV,
  IN_WO,
  IN_BQ,
  IN_BK,
  IN_BV,
  IN_BO,
  IN_N
};
static const char *const in_names[IN_N] = {
    "query",       "key",          "value", "attn_mask", "key_padding_mask",
    "key_lengths", "alibi_slopes", "w_q",   "w_k",       "w_v",
    "w_o",         "b_q",          "b_k",   "b_v",       "b_o"};

/* Parameter ids; sdpa takes the first P_N_SDPA.  The variants (causal,
 * window, alibi, softcap, rotary) are variants.c's, for every model. */
enum {
  P_SCALE,
  P_NEED,
  P_AVG,
  P_PRECISION,
  P_N_SDPA,
  P_HEADS = P_N_SDPA,
  P_KV,
  P_N
};
static const char *const p_names[P_N] = {
    "scale",     "need_weights", "average_attn_weights",
    "precision", "num_heads",    "num_kv_heads"};

enum { OUT_O, OUT_W, OUT_N };
static const char *const out_names[OUT_N] = {"attn_output", "attn_weights"};

/* Everything stage 1 learns from a request. */
typedef struct req_info {
  const char *model; /* for messages */
  const attn_tensor *in[IN_N];
  attn__variants var; /* causal, window, alibi, softcap, rotary */
  bool avg;
  bool has_scale;
  double scale;
  int need;                /* need_weights: -1 unset, 0, 1 */
  int64_t heads, kv;       /* -1 unset */
  int precision;           /* attn_precision asked for; -1 unset */
  bool want_w;             /* compute attn_weights */
  bool bin[OUT_N];         /* binary flag per output */
  attn_dtype dtype[OUT_N]; /* binary datatype per output (0: FP32) */
  int order[OUT_N];        /* outputs returned, in order */
  int n_order;
} req_info;

static const char *param_type_name(attn_param_type t) {
  switch (t) {
    case ATTN_PARAM_BOOL:
      return "a bool";
    case ATTN_PARAM_INT:
      return "an integer";
    case ATTN_PARAM_DOUBLE:
      return "a number";
    case ATTN_PARAM_STRING:
      return "a string";
  }
  return "unknown";
}

/* "a, b, c" of the first n names, into buf. */
static const char *join(const char *const *names, int n, char *buf,
                        size_t cap) {
  size_t at = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && at < cap; i++) {
    int w = snprintf(buf + at, cap - at, "%s%s", i ? ", " : "", names[i]);
    if (w < 0) break;
    at += (size_t)w;
  }
  return buf;
}

const char *attn__model_param_names(attn__model_kind kind, char *buf,
                                    size_t cap) {
  int n = kind == ATTN__MODEL_SDPA ? P_N_SDPA : P_N;
  join(p_names, n, buf, cap);
  size_t at = strlen(buf);
  if (at < cap) snprintf(buf + at, cap - at, ", %s", attn__variant_names);
  return buf;
}

static const char *shape_str(const attn_tensor *t, char *buf, size_t cap) {
  size_t at = 0;
  buf[0] = '\0';
  for (int i = 0; i < t->rank && at < cap; i++) {
    int w =
        snprintf(buf + at, cap - at, "%s%lld", i ? "," : "[", LL(t->shape[i]));
    if (w < 0) break;
    at += (size_t)w;
  }
  if (at < cap) snprintf(buf + at, cap - at, t->rank ? "]" : "[]");
  return buf;
}

static int find_name(const char *const *names, int n, const char *s) {
  for (int i = 0; s && i < n; i++)
    if (strcmp(names[i], s) == 0) return i;
  return -1;
}

/* ---- stage 1: names and types ------------------------------------------ */

static attn_status read_inputs(attn__model_kind kind,
                               const attn_infer_request *req, req_info *ri,
                               attn_diag *d) {
  int n = kind == ATTN__MODEL_MHA ? IN_N : IN_N_COMMON;
  char list[160];
  for (size_t i = 0; i < req->n_inputs; i++) {
    const attn_infer_input *x = &req->inputs[i];
    int id = find_name(in_names, n, x->name);
    if (id < 0)
      return attn_diag_set(d, ATTN_EINVAL,
                           "unknown input '%.40s' for model '%s' (expected "
                           "%s)",
                           x->name ? x->name : "", ri->model,
                           join(in_names, n, list, sizeof list));
    if (ri->in[id])
      return attn_diag_set(d, ATTN_EINVAL, "input '%s' given twice",
                           in_names[id]);
    const attn_tensor *t = &x->tensor;
    const char *dt = attn_dtype_name(t->dtype);
    dt = dt ? dt : "invalid";
    switch (id) {
      case IN_MASK:
        if (t->dtype != ATTN_DT_BOOL && t->dtype != ATTN_DT_FP32)
          return attn_diag_set(d, ATTN_EINVAL,
                               "input 'attn_mask': datatype %s, expected BOOL "
                               "(true = blocked) or FP32 (added to scores)",
                               dt);
        break;
      case IN_KPM:
        if (t->dtype != ATTN_DT_BOOL)
          return attn_diag_set(d, ATTN_EINVAL,
                               "input 'key_padding_mask': datatype %s, "
                               "expected BOOL (true = padding)",
                               dt);
        break;
      case IN_KLEN:
        if (t->dtype != ATTN_DT_INT32 && t->dtype != ATTN_DT_INT64)
          return attn_diag_set(d, ATTN_EINVAL,
                               "input 'key_lengths': datatype %s, expected "
                               "INT32 or INT64",
                               dt);
        break;
      default:
        if (t->dtype != ATTN_DT_FP32)
          return attn_diag_set(d, ATTN_EINVAL,
                               "input '%s': datatype %s, expected a float "
                               "type (FP32, FP16, BF16, FP64)",
                               in_names[id], dt);
    }
    size_t numel;
    if (t->rank < 0 || t->rank > ATTN_MAX_RANK ||
        !attn_shape_numel(t->rank, t->shape, &numel) || (numel && !t->data))
      return attn_diag_set(d, ATTN_EINVAL, "input '%s': malformed tensor",
                           in_names[id]);
    ri->in[id] = t;
  }
  const int required[] = {IN_QUERY, IN_KEY, IN_VALUE, IN_WQ,
                          IN_WK,    IN_WV,  IN_WO};
  for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
    int id = required[i];
    if ((id == IN_KEY || id == IN_VALUE) && kind != ATTN__MODEL_SDPA) continue;
    if (id >= IN_N_COMMON && kind != ATTN__MODEL_MHA) continue;
    if (!ri->in[id])
      return attn_diag_set(d, ATTN_EINVAL,
                           "missing required input '%s' for model '%s'",
                           in_names[id], ri->model);
  }
  if (ri->in[IN_KPM] && ri->in[IN_KLEN])
    return attn_diag_set(d, ATTN_EINVAL,
                         "inputs 'key_padding_mask' and 'key_lengths' both "
                         "given; give one");
  if (kind != ATTN__MODEL_SDPA && ri->in[IN_VALUE] && !ri->in[IN_KEY])
    return attn_diag_set(d, ATTN_EINVAL,
                         "input 'value' given without 'key' (omit both for "
                         "self-attention)");
  return ATTN_OK;
}

static attn_status want_bool(const attn_param *p, bool *v, attn_diag *d) {
  if (p->type != ATTN_PARAM_BOOL)
    return attn_diag_set(d, ATTN_EINVAL,
                         "parameter '%s' must be a bool, got %s", p->name,
                         param_type_name(p->type));
  *v = p->b;
  return ATTN_OK;
}

/* A positive head count: an integer (or an integral number) in [1, 2^31). */
static attn_status want_count(const attn_param *p, int64_t *v, attn_diag *d) {
  int64_t x;
  if (p->type == ATTN_PARAM_INT) {
    x = p->i;
  } else if (p->type == ATTN_PARAM_DOUBLE && p->d == floor(p->d) &&
             fabs(p->d) < 9.0e15) {
    x = (int64_t)p->d;
  } else if (p->type == ATTN_PARAM_DOUBLE) {
    return attn_diag_set(d, ATTN_EINVAL,
                         "parameter '%s' must be an integer, got %.15g",
                         p->name, p->d);
  } else {
    return attn_diag_set(d, ATTN_EINVAL,
                         "parameter '%s' must be an integer, got %s", p->name,
                         param_type_name(p->type));
  }
  if (x < 1 || x > INT32_MAX)
    return attn_diag_set(d, ATTN_EINVAL,
                         "parameter '%s' is %lld, expected a positive integer",
                         p->name, LL(x));
  *v = x;
  return ATTN_OK;
}

/* p is none of the model's parameters; is_causal (PyTorch's name) is
 * answered with the alignment it means here. */
static attn_status unknown_param(const attn_param *p, const char *model,
                                 const char *const *names, int n,
                                 attn_diag *d) {
  char list[120];
  if (p->name && strcmp(p->name, "is_causal") == 0)
    return attn_diag_set(d, ATTN_EINVAL,
                         "unknown parameter 'is_causal': use 'causal': "
                         "\"top_left\" for PyTorch's is_causal (query i sees "
                         "keys j <= i); 'causal': true aligns bottom-right "
                         "(j <= i + Lk - Lq), which differs when Lq != Lk");
  return attn_diag_set(d, ATTN_EINVAL,
                       "unknown parameter '%.40s' for model '%s' (expected "
                       "%s, %s)",
                       p->name ? p->name : "", model,
                       join(names, n, list, sizeof list), attn__variant_names);
}

/* "fp32" or "bf16" (attn_precision). */
static attn_status want_precision(const attn_param *p, int *v, attn_diag *d) {
  if (p->type != ATTN_PARAM_STRING)
    return attn_diag_set(d, ATTN_EINVAL,
                         "parameter 'precision' must be a string (\"fp32\" "
                         "or \"bf16\"), got %s",
                         param_type_name(p->type));
  attn_precision x;
  if (attn_precision_parse(p->s, &x)) {
    *v = (int)x;
    return ATTN_OK;
  }
  return attn_diag_set(d, ATTN_EINVAL,
                       "parameter 'precision' is \"%.40s\"; expected \"fp32\" "
                       "or \"bf16\"",
                       p->s ? p->s : "");
}

/* The arithmetic of the call: the request's, else the resident model's,
 * else fp32; a request may not ask bf16 of an fp32 resident model (its
 * weights were chosen for fp32), only the reverse. */
static attn_status resolve_precision(const attn__resident *fx,
                                     const req_info *ri, attn_attend_opts *o,
                                     attn_diag *d) {
  attn_precision model = fx ? fx->precision : ATTN_PRECISION_FP32;
  if (ri->precision < 0) {
    o->precision = model;
    return ATTN_OK;
  }
  if (fx && ri->precision == ATTN_PRECISION_BF16 &&
      model == ATTN_PRECISION_FP32)
    return attn_diag_set(d, ATTN_EINVAL,
                         "parameter 'precision' is \"bf16\" but model '%s' "
                         "has precision \"fp32\": a request may ask fp32 "
                         "of a bf16 model, not bf16 of an fp32 one",
                         ri->model);
  o->precision = (attn_precision)ri->precision;
  return ATTN_OK;
}

static attn_status read_params(attn__model_kind kind,
                               const attn_infer_request *req, req_info *ri,
                               attn_diag *d) {
  int n = kind == ATTN__MODEL_SDPA ? P_N_SDPA : P_N;
  bool seen[P_N] = {false};
  attn_status s = ATTN_OK;
  for (size_t i = 0; i < req->n_params && s == ATTN_OK; i++) {
    const attn_param *p = &req->params[i];
    int id = find_name(p_names, n, p->name);
    int v = id < 0 ? attn__variant_find(p->name) : -1;
    if (v >= 0) {
      s = attn__variant_param(p, v, &ri->var, d);
      continue;
    }
    if (id < 0) return unknown_param(p, ri->model, p_names, n, d);
    if (seen[id])
      return attn_diag_set(d, ATTN_EINVAL, "parameter '%s' given twice",
                           p_names[id]);
    seen[id] = true;
    bool b = false;
    switch (id) {
      case P_AVG:
        s = want_bool(p, &ri->avg, d);
        break;
      case P_NEED:
        if ((s = want_bool(p, &b, d)) == ATTN_OK) ri->need = b;
        break;
      case P_SCALE:
        if (p->type == ATTN_PARAM_DOUBLE)
          ri->scale = p->d;
        else if (p->type == ATTN_PARAM_INT)
          ri->scale = (double)p->i;
        else
          return attn_diag_set(d, ATTN_EINVAL,
                               "parameter 'scale' must be a number, got %s",
                               param_type_name(p->type));
        if (!attn_f32_in_range(ri->scale))
          return attn_diag_set(d, ATTN_EINVAL,
                               "parameter 'scale' must be a finite float");
        ri->has_scale = true;
        break;
      case P_PRECISION:
        s = want_precision(p, &ri->precision, d);
        break;
      case P_HEADS:
        s = want_count(p, &ri->heads, d);
        break;
      case P_KV:
        s = want_count(p, &ri->kv, d);
        break;
    }
  }
  return s;
}

/* An output's binary datatype: FP32 (the default), FP16 or BF16, which
 * only a binary output can carry (JSON outputs are FP32 numbers). */
static attn_status want_datatype(const attn_infer_output_req *o, bool bin,
                                 attn_dtype *dt, attn_diag *d) {
  attn_dtype t = o->datatype ? o->datatype : ATTN_DT_FP32;
  if (t != ATTN_DT_FP32 && t != ATTN_DT_FP16 && t != ATTN_DT_BF16)
    return attn_diag_set(d, ATTN_EINVAL,
                         "output '%s': datatype %s; expected FP32, FP16 or "
                         "BF16",
                         o->name,
                         attn_dtype_name(t) ? attn_dtype_name(t) : "?");
  if (t != ATTN_DT_FP32 && !bin)
    return attn_diag_set(d, ATTN_EINVAL,
                         "output '%s': datatype %s needs binary output "
                         "(parameters: {\"binary_data\": true}); JSON "
                         "outputs are FP32 numbers",
                         o->name, attn_dtype_name(t));
  *dt = t;
  return ATTN_OK;
}

static attn_status read_outputs(const attn_infer_request *req, req_info *ri,
                                attn_diag *d) {
  attn_status s;
  bool dflt = req->binary_data_output == 1;
  ri->bin[OUT_O] = ri->bin[OUT_W] = dflt;
  if (!req->outputs_given || req->n_outputs == 0) {
    ri->want_w = ri->need != 0;
    ri->order[ri->n_order++] = OUT_O;
    if (ri->want_w) ri->order[ri->n_order++] = OUT_W;
    return ATTN_OK;
  }
  bool seen[OUT_N] = {false};
  for (size_t i = 0; i < req->n_outputs; i++) {
    const attn_infer_output_req *o = &req->outputs[i];
    int id = find_name(out_names, OUT_N, o->name);
    if (id < 0)
      return attn_diag_set(d, ATTN_EINVAL,
                           "unknown output '%.40s' for model '%s' (expected "
                           "attn_output, attn_weights)",
                           o->name ? o->name : "", ri->model);
    if (seen[id])
      return attn_diag_set(d, ATTN_EINVAL, "output '%s' requested twice",
                           out_names[id]);
    seen[id] = true;
    ri->bin[id] = o->binary != -1 ? o->binary != 0 : dflt;
    if ((s = want_datatype(o, ri->bin[id], &ri->dtype[id], d))) return s;
    ri->order[ri->n_order++] = id;
  }
  ri->want_w = seen[OUT_W];
  if (ri->want_w && ri->need == 0)
    return attn_diag_set(d, ATTN_EINVAL,
                         "parameter need_weights is false but outputs request "
                         "attn_weights: they conflict");
  return ATTN_OK;
}

/* ---- stage 2: shapes ---------------------------------------------------- */

/* Fill o->mask and o->kpm from the mask inputs (key_lengths only checked:
 * its int64 copy is made after the limits).  B, H are the problem's batch
 * and query heads. */
static attn_status read_masks(const req_info *ri, int64_t B, int64_t H,
                              int64_t Lq, int64_t Lk, attn_attend_opts *o,
                              attn_diag *d) {
  char sh[96];
  const attn_tensor *m = ri->in[IN_MASK];
  if (m) {
    const int r = m->rank;
    bool ok =
        r >= 2 && r <= 4 && m->shape[r - 2] == Lq && m->shape[r - 1] == Lk;
    int64_t mb = 1, mh = 1;
    if (ok && r == 3) {
      if (m->shape[0] == B * H && B * H != 1)
        mb = B, mh = H;
      else
        ok = m->shape[0] == 1;
    } else if (ok && r == 4) {
      mb = m->shape[0];
      mh = m->shape[1];
      ok = (mb == 1 || mb == B) && (mh == 1 || mh == H);
    }
    if (!ok)
      return attn_diag_set(d, ATTN_ESHAPE,
                           "input 'attn_mask': shape %s, expected [Lq,Lk], "
                           "[1 or B*H,Lq,Lk] or [1 or B,1 or H,Lq,Lk] with "
                           "B=%lld H=%lld Lq=%lld Lk=%lld",
                           shape_str(m, sh, sizeof sh), LL(B), LL(H), LL(Lq),
                           LL(Lk));
    o->mask.kind = m->dtype == ATTN_DT_BOOL ? ATTN_MASK_BOOL : ATTN_MASK_ADD;
    o->mask.data = m->data;
    o->mask.mb = mb;
    o->mask.mh = mh;
  }
  const attn_tensor *k = ri->in[IN_KPM];
  if (k) {
    bool ok = (k->rank == 2 && k->shape[0] == B && k->shape[1] == Lk) ||
              (k->rank == 1 && B == 1 && k->shape[0] == Lk);
    if (!ok)
      return attn_diag_set(d, ATTN_ESHAPE,
                           "input 'key_padding_mask': shape %s, expected "
                           "[B,Lk] = [%lld,%lld]%s",
                           shape_str(k, sh, sizeof sh), LL(B), LL(Lk),
                           B == 1 ? " or [Lk]" : "");
    o->kpm.kind = ATTN_KPM_BOOL;
    o->kpm.pad = k->data;
  }
  const attn_tensor *l = ri->in[IN_KLEN];
  if (l) {
    bool ok = (l->rank == 1 && l->shape[0] == B) || (l->rank == 0 && B == 1);
    if (!ok)
      return attn_diag_set(d, ATTN_ESHAPE,
                           "input 'key_lengths': shape %s, expected [B] = "
                           "[%lld]",
                           shape_str(l, sh, sizeof sh), LL(B));
    const unsigned char *p = l->data;
    for (int64_t b = 0; b < B; b++) {
      int64_t v;
      if (l->dtype == ATTN_DT_INT32) {
        int32_t v32;
        memcpy(&v32, p + 4 * b, 4);
        v = v32;
      } else {
        memcpy(&v, p + 8 * b, 8);
      }
      if (v < 0 || v > Lk)
        return attn_diag_set(d, ATTN_EINVAL,
                             "input 'key_lengths': element %lld is %lld, "
                             "expected 0..Lk=%lld",
                             LL(b), LL(v), LL(Lk));
    }
    o->kpm.kind = ATTN_KPM_LENGTHS;
  }
  return ATTN_OK;
}

/* The int64 copy of key_lengths (B values); NULL on ENOMEM. */
static int64_t *copy_lengths(const attn_tensor *l, int64_t B) {
  int64_t *v = malloc((size_t)B * sizeof *v);
  const unsigned char *p = l->data;
  for (int64_t b = 0; v && b < B; b++) {
    if (l->dtype == ATTN_DT_INT32) {
      int32_t v32;
      memcpy(&v32, p + 4 * b, 4);
      v[b] = v32;
    } else {
      memcpy(&v[b], p + 8 * b, 8);
    }
  }
  return v;
}

/* Problem dims plus the response layout. */
typedef struct plan {
  bool is_sdpa;
  attn_sdpa_problem sp;
  attn_mha_problem mp;
  int64_t B, H, Lq, Lk;
  int out_rank, w_rank;
  int64_t out_shape[ATTN_MAX_RANK], w_shape[ATTN_MAX_RANK];
  size_t out_n, w_n; /* the outputs' element counts */
} plan;

/* Every dimension >= 1 (the engine's rule), checked first so that products
 * of dimensions are bounded by the tensor's element count. */
static attn_status positive_dims(const attn_tensor *t, const char *name,
                                 attn_diag *d) {
  for (int i = 0; i < t->rank; i++)
    if (t->shape[i] < 1)
      return attn_diag_set(d, ATTN_ESHAPE,
                           "input '%s': dim %d is %lld; every dimension must "
                           "be >= 1",
                           name, i, LL(t->shape[i]));
  return ATTN_OK;
}

/* Input `name`'s batch (dim 0) is not the query's. */
static attn_status batch_differs(const char *name, int64_t got, int64_t B,
                                 attn_diag *d) {
  return attn_diag_set(d, ATTN_ESHAPE,
                       "input '%s' has a batch of %lld (dim 0) where 'query' "
                       "has %lld",
                       name, LL(got), LL(B));
}

static attn_status sdpa_shapes(const req_info *ri, plan *pl, attn_diag *d) {
  const attn_tensor *q = ri->in[IN_QUERY], *k = ri->in[IN_KEY],
                    *v = ri->in[IN_VALUE];
  const int r = q->rank;
  char sh[96];
  if (r < 2 || r > 4)
    return attn_diag_set(d, ATTN_ESHAPE,
                         "input 'query': shape %s, expected rank 2 [Lq,Dk], "
                         "3 [H,Lq,Dk] or 4 [B,H,Lq,Dk]",
                         shape_str(q, sh, sizeof sh));
  if (k->rank != r || v->rank != r)
    return attn_diag_set(d, ATTN_ESHAPE,
                         "input '%s': rank %d, query has rank %d (query, key "
                         "and value share one rank)",
                         k->rank != r ? "key" : "value",
                         k->rank != r ? k->rank : v->rank, r);
  attn_status s;
  if ((s = positive_dims(q, "query", d)) || (s = positive_dims(k, "key", d)) ||
      (s = positive_dims(v, "value", d)))
    return s;
  const int dh = r - 3, dl = r - 2, dd = r - 1; /* dim indices */
  int64_t B = r == 4 ? q->shape[0] : 1, H = r >= 3 ? q->shape[dh] : 1;
  int64_t Lq = q->shape[dl], Dk = q->shape[dd];
  int64_t Hkv = r >= 3 ? k->shape[dh] : 1, Lk = k->shape[dl];
  int64_t Dv = v->shape[dd];
  if (r == 4 && k->shape[0] != B)
    return batch_differs("key", k->shape[0], B, d);
  if (r == 4 && v->shape[0] != B)
    return batch_differs("value", v->shape[0], B, d);
  if (k->shape[dd] != Dk)
    return attn_diag_set(d, ATTN_ESHAPE,
                         "input 'key' has %lld values per position (dim %d, "
                         "Dk) where 'query' has %lld",
                         LL(k->shape[dd]), dd, LL(Dk));
  if (r >= 3 && v->shape[dh] != Hkv)
    return attn_diag_set(d, ATTN_ESHAPE,
                         "input 'value' has %lld heads (dim %d) where 'key' "
                         "has %lld",
                         LL(v->shape[dh]), dh, LL(Hkv));
  if (v->shape[dl] != Lk)
    return attn_diag_set(d, ATTN_ESHAPE,
                         "input 'value' has %lld positions (dim %d, Lk) where "
                         "'key' has %lld",
                         LL(v->shape[dl]), dl, LL(Lk));
  if (Hkv < 1 || H < 1 || H % Hkv != 0)
    return attn_diag_set(d, ATTN_ESHAPE,
                         "input 'key' has %lld heads (dim %d), which do not "
                         "divide the %lld heads of 'query' (query head h "
                         "reads key head h / (H / Hkv))",
                         LL(Hkv), dh, LL(H));
  attn_sdpa_problem *p = &pl->sp;
  pl->is_sdpa = true;
  p->B = B, p->H = H, p->Hkv = Hkv, p->Lq = Lq, p->Lk = Lk, p->Dk = Dk,
  p->Dv = Dv;
  p->q = (attn_view){q->data, H * Lq * Dk, Lq * Dk, Dk};
  p->k = (attn_view){k->data, Hkv * Lk * Dk, Lk * Dk, Dk};
  p->v = (attn_view){v->data, Hkv * Lk * Dv, Lk * Dv, Dv};
  pl->B = B, pl->H = H, pl->Lq = Lq, pl->Lk = Lk;
  /* Outputs keep the query's leading dims. */
  pl->out_rank = r;
  memcpy(pl->out_shape, q->shape, sizeof pl->out_shape);
  pl->out_shape[dd] = Dv;
  pl->w_rank = r;
  memcpy(pl->w_shape, q->shape, sizeof pl->w_shape);
  pl->w_shape[dd] = Lk;
  if (ri->avg && r >= 3) { /* drop H */
    pl->w_rank = r - 1;
    pl->w_shape[dh] = Lq;
    pl->w_shape[dh + 1] = Lk;
  }
  return ATTN_OK;
}

/* t must be rank n with the given dims; `what` names them for the message. */
static attn_status expect(const attn_tensor *t, const char *name, int n,
                          const int64_t *dims, const char *what, attn_diag *d) {
  bool ok = t->rank == n;
  for (int i = 0; ok && i < n; i++) ok = t->shape[i] == dims[i];
  if (ok) return ATTN_OK;
  char sh[96];
  if (n == 1)
    return attn_diag_set(d, ATTN_ESHAPE,
                         "input '%s': shape %s, expected [%s] = [%lld]", name,
                         shape_str(t, sh, sizeof sh), what, LL(dims[0]));
  return attn_diag_set(
      d, ATTN_ESHAPE, "input '%s': shape %s, expected [%s] = [%lld,%lld]", name,
      shape_str(t, sh, sizeof sh), what, LL(dims[0]), LL(dims[1]));
}

/* The head counts: a resident model's own (parameters, if given, must
 * agree; so must the query's embedding dim E), else the num_heads and
 * num_kv_heads parameters.  r is the query's rank. */
static attn_status mha_heads(attn__model_kind kind, const attn__resident *fx,
                             const req_info *ri, int r, int64_t E, int64_t *H,
                             int64_t *Hkv, attn_diag *d) {
  if (kind == ATTN__MODEL_RESIDENT) {
    if (ri->heads != -1 && ri->heads != fx->H)
      return attn_diag_set(d, ATTN_EINVAL,
                           "parameter 'num_heads' is %lld but model '%s' has "
                           "%lld heads",
                           LL(ri->heads), ri->model, LL(fx->H));
    if (ri->kv != -1 && ri->kv != fx->Hkv)
      return attn_diag_set(d, ATTN_EINVAL,
                           "parameter 'num_kv_heads' is %lld but model '%s' "
                           "has %lld",
                           LL(ri->kv), ri->model, LL(fx->Hkv));
    if (E != fx->E)
      return attn_diag_set(d, ATTN_ESHAPE,
                           "input 'query' has %lld columns (dim %d, E) where "
                           "model '%s' has embed_dim %lld",
                           LL(E), r - 1, ri->model, LL(fx->E));
    *H = fx->H, *Hkv = fx->Hkv;
  } else {
    if (ri->heads == -1)
      return attn_diag_set(d, ATTN_EINVAL,
                           "missing required parameter 'num_heads' for model "
                           "'%s'",
                           ri->model);
    *H = ri->heads;
    *Hkv = ri->kv == -1 ? *H : ri->kv;
  }
  if (E < 1 || E % *H != 0)
    return attn_diag_set(d, ATTN_ESHAPE,
                         "input 'query' has %lld columns (dim %d, E), not a "
                         "multiple of num_heads %lld",
                         LL(E), r - 1, LL(*H));
  if (*H % *Hkv != 0)
    return attn_diag_set(d, ATTN_EINVAL,
                         "num_heads=%lld is not a multiple of "
                         "num_kv_heads=%lld",
                         LL(*H), LL(*Hkv));
  return ATTN_OK;
}

/* Key and value against the query (rank r, batch B): Lk, kdim and vdim,
 * which default to the query's Lq and E (self-attention, value = key). */
static attn_status mha_kv(const attn_tensor *k, const attn_tensor *v, int r,
                          int64_t B, int64_t *Lk, int64_t *kdim, int64_t *vdim,
                          attn_diag *d) {
  if (k) {
    if (k->rank != r)
      return attn_diag_set(d, ATTN_ESHAPE,
                           "input 'key': rank %d, query has rank %d", k->rank,
                           r);
    if (r == 3 && k->shape[0] != B)
      return batch_differs("key", k->shape[0], B, d);
    *Lk = k->shape[r - 2];
    *kdim = *vdim = k->shape[r - 1];
  }
  if (v) {
    if (v->rank != r)
      return attn_diag_set(d, ATTN_ESHAPE,
                           "input 'value': rank %d, query has rank %d", v->rank,
                           r);
    if (r == 3 && v->shape[0] != B)
      return batch_differs("value", v->shape[0], B, d);
    if (v->shape[r - 2] != *Lk)
      return attn_diag_set(d, ATTN_ESHAPE,
                           "input 'value' has %lld rows (dim %d, Lk) where "
                           "'key' has %lld",
                           LL(v->shape[r - 2]), r - 2, LL(*Lk));
    *vdim = v->shape[r - 1];
  }
  return ATTN_OK;
}

/* A resident model's kdim and vdim against the key's and value's (or the
 * query's, when they are not sent). */
static attn_status resident_kv_dims(const attn__resident *fx,
                                    const req_info *ri, int r, int64_t kdim,
                                    int64_t vdim, attn_diag *d) {
  const attn_tensor *k = ri->in[IN_KEY], *v = ri->in[IN_VALUE];
  const char *who = k ? "key" : "query";
  if (kdim != fx->kdim)
    return attn_diag_set(d, ATTN_ESHAPE,
                         "input '%s' has %lld columns (dim %d) where model "
                         "'%s' takes kdim %lld%s",
                         who, LL(kdim), r - 1, ri->model, LL(fx->kdim),
                         k ? "" : " (send 'key')");
  if (vdim != fx->vdim)
    return attn_diag_set(d, ATTN_ESHAPE,
                         "input '%s' has %lld columns (dim %d) where model "
                         "'%s' takes vdim %lld%s",
                         v ? "value" : who, LL(vdim), r - 1, ri->model,
                         LL(fx->vdim), v ? "" : " (send 'value')");
  return ATTN_OK;
}

/* p's weights and biases: a resident model's, or the request's w_* and b_*
 * inputs once their shapes fit p's dims. */
static attn_status mha_weights(attn__model_kind kind, const attn__resident *fx,
                               const req_info *ri, attn_mha_problem *p,
                               attn_diag *d) {
  attn_status s;
  if (kind == ATTN__MODEL_RESIDENT) {
    p->wq = fx->wq, p->wk = fx->wk, p->wv = fx->wv, p->wo = fx->wo;
    p->bq = fx->bq, p->bk = fx->bk, p->bv = fx->bv, p->bo = fx->bo;
    return ATTN_OK;
  }
  const int64_t E = p->E, kw = p->Hkv * (E / p->H);
  const int64_t dq[2] = {E, E}, dk[2] = {p->kdim, kw}, dv[2] = {p->vdim, kw};
  if ((s = expect(ri->in[IN_WQ], "w_q", 2, dq, "E,E", d)) ||
      (s = expect(ri->in[IN_WK], "w_k", 2, dk, "kdim,Hkv*E/H", d)) ||
      (s = expect(ri->in[IN_WV], "w_v", 2, dv, "vdim,Hkv*E/H", d)) ||
      (s = expect(ri->in[IN_WO], "w_o", 2, dq, "E,E", d)) ||
      (ri->in[IN_BQ] && (s = expect(ri->in[IN_BQ], "b_q", 1, &E, "E", d))) ||
      (ri->in[IN_BK] &&
       (s = expect(ri->in[IN_BK], "b_k", 1, &kw, "Hkv*E/H", d))) ||
      (ri->in[IN_BV] &&
       (s = expect(ri->in[IN_BV], "b_v", 1, &kw, "Hkv*E/H", d))) ||
      (ri->in[IN_BO] && (s = expect(ri->in[IN_BO], "b_o", 1, &E, "E", d))))
    return s;
  p->wq = (attn_weight){ri->in[IN_WQ]->data, ATTN_W_IN_OUT, 0, NULL};
  p->wk = (attn_weight){ri->in[IN_WK]->data, ATTN_W_IN_OUT, 0, NULL};
  p->wv = (attn_weight){ri->in[IN_WV]->data, ATTN_W_IN_OUT, 0, NULL};
  p->wo = (attn_weight){ri->in[IN_WO]->data, ATTN_W_IN_OUT, 0, NULL};
  p->bq = ri->in[IN_BQ] ? ri->in[IN_BQ]->data : NULL;
  p->bk = ri->in[IN_BK] ? ri->in[IN_BK]->data : NULL;
  p->bv = ri->in[IN_BV] ? ri->in[IN_BV]->data : NULL;
  p->bo = ri->in[IN_BO] ? ri->in[IN_BO]->data : NULL;
  return ATTN_OK;
}

/* The mha problem (built-in or resident) from the query [B,]Lq,E, the
 * optional key and value, and the weights: heads, key and value dims,
 * weights, then the outputs' shapes. */
static attn_status mha_shapes(attn__model_kind kind, const attn__resident *fx,
                              const req_info *ri, plan *pl, attn_diag *d) {
  const attn_tensor *q = ri->in[IN_QUERY], *k = ri->in[IN_KEY],
                    *v = ri->in[IN_VALUE];
  const int r = q->rank;
  char sh[96];
  attn_status s;
  if (r != 2 && r != 3)
    return attn_diag_set(d, ATTN_ESHAPE,
                         "input 'query': shape %s, expected rank 3 [B,Lq,E] "
                         "or 2 [Lq,E]",
                         shape_str(q, sh, sizeof sh));
  if ((s = positive_dims(q, "query", d)) ||
      (k && (s = positive_dims(k, "key", d))) ||
      (v && (s = positive_dims(v, "value", d))))
    return s;
  int64_t B = r == 3 ? q->shape[0] : 1, Lq = q->shape[r - 2],
          E = q->shape[r - 1];
  int64_t H = 1, Hkv = 1, Lk = Lq, kdim = E, vdim = E;
  if ((s = mha_heads(kind, fx, ri, r, E, &H, &Hkv, d)) ||
      (s = mha_kv(k, v, r, B, &Lk, &kdim, &vdim, d)) ||
      (kind == ATTN__MODEL_RESIDENT &&
       (s = resident_kv_dims(fx, ri, r, kdim, vdim, d))))
    return s;
  attn_mha_problem *p = &pl->mp;
  p->B = B, p->Lq = Lq, p->Lk = Lk, p->E = E, p->H = H, p->Hkv = Hkv;
  p->kdim = kdim, p->vdim = vdim;
  p->xq = q->data;
  p->xk = k ? k->data : NULL;
  p->xv = v ? v->data : NULL;
  if ((s = mha_weights(kind, fx, ri, p, d))) return s;
  pl->is_sdpa = false;
  pl->B = B, pl->H = H, pl->Lq = Lq, pl->Lk = Lk;
  pl->out_rank = r;
  memcpy(pl->out_shape, q->shape, sizeof pl->out_shape);
  /* weights: [B,]H,Lq,Lk or [B,]Lq,Lk */
  int w = 0;
  if (r == 3) pl->w_shape[w++] = B;
  if (!ri->avg) pl->w_shape[w++] = H;
  pl->w_shape[w++] = Lq;
  pl->w_shape[w++] = Lk;
  pl->w_rank = w;
  return ATTN_OK;
}

/* ---- stage 3: limits ---------------------------------------------------- */

static attn_status check_limits(const attn_model_limits *lim, const plan *pl,
                                const req_info *ri, size_t out_n, size_t w_n,
                                attn_diag *d) {
  if (!lim) return ATTN_OK;
  if (lim->max_seq_len > 0 && pl->Lq > lim->max_seq_len)
    return attn_diag_set(d, ATTN_ETOOBIG,
                         "query length Lq=%lld exceeds max_seq_len %lld",
                         LL(pl->Lq), LL(lim->max_seq_len));
  if (lim->max_seq_len > 0 && pl->Lk > lim->max_seq_len)
    return attn_diag_set(d, ATTN_ETOOBIG,
                         "key length Lk=%lld exceeds max_seq_len %lld",
                         LL(pl->Lk), LL(lim->max_seq_len));
  size_t mt = lim->max_tensor_elements;
  if (mt && out_n > mt)
    return attn_diag_set(d, ATTN_ETOOBIG,
                         "attn_output would have %zu elements (limit %zu)",
                         out_n, mt);
  if (ri->want_w && mt && w_n > mt)
    return attn_diag_set(d, ATTN_ETOOBIG,
                         "attn_weights would have %zu elements (limit %zu)",
                         w_n, mt);
  size_t mw = lim->max_weights_elements;
  if (ri->want_w && !ri->bin[OUT_W] && lim->no_weights_json)
    return attn_diag_set(d, ATTN_EINVAL,
                         "attn_weights are not returned as JSON by this "
                         "server (max_weights_elements = 0): drop "
                         "attn_weights from the outputs, set need_weights "
                         "false, or request binary output");
  if (ri->want_w && !ri->bin[OUT_W] && mw && w_n > mw)
    return attn_diag_set(d, ATTN_EINVAL,
                         "attn_weights would have %zu elements (limit %zu): "
                         "drop attn_weights from the outputs, set "
                         "need_weights false, or request binary output",
                         w_n, mw);
  return ATTN_OK;
}

/* ---- the whole request -------------------------------------------------- */

static char *dup_or_null(const char *s, bool *oom) {
  if (!s) return NULL;
  char *r = strdup(s);
  if (!r) *oom = true;
  return r;
}

/* The variants (variants.c): a resident model's fixed settings merged
 * with the request's, then every combination checked against the
 * problem's query heads and head dim. */
static attn_status plan_variants(attn__model_kind kind,
                                 const attn__resident *fixed, req_info *ri,
                                 const plan *pl, attn_attend_opts *o,
                                 attn_diag *d) {
  attn_status s;
  const attn_tensor *slopes = ri->in[IN_ALIBI];
  if (kind == ATTN__MODEL_RESIDENT &&
      (s = attn__variants_merge(&fixed->fixed, ri->model, slopes != NULL,
                                &ri->var, d)))
    return s;
  int64_t Dh = pl->is_sdpa ? pl->sp.Dk : pl->mp.E / pl->mp.H;
  return attn__variants_check(&ri->var, slopes, pl->H, Dh, o, d);
}

/* Stages 1 to 3: ri, pl and the engine's options o (zeroed by the
 * caller) from the request (names and types, shapes and masks, limits),
 * every client mistake found before anything is allocated. */
static attn_status plan_request(attn__model_kind kind,
                                const attn__resident *fixed,
                                const attn_infer_request *req,
                                const attn_model_limits *lim, req_info *ri,
                                plan *pl, attn_attend_opts *o, attn_diag *d) {
  attn_status s;
  if ((s = read_inputs(kind, req, ri, d)) ||
      (s = read_params(kind, req, ri, d)) || (s = read_outputs(req, ri, d)))
    return s;

  if ((s = resolve_precision(kind == ATTN__MODEL_RESIDENT ? fixed : NULL, ri, o,
                             d)))
    return s;
  o->has_scale = ri->has_scale;
  o->scale = (float)ri->scale;
  o->weights = !ri->want_w ? ATTN_WEIGHTS_NONE
               : ri->avg   ? ATTN_WEIGHTS_MEAN
                           : ATTN_WEIGHTS_PER_HEAD;
  s = kind == ATTN__MODEL_SDPA ? sdpa_shapes(ri, pl, d)
                               : mha_shapes(kind, fixed, ri, pl, d);
  if (s) return s;
  if ((s = read_masks(ri, pl->B, pl->H, pl->Lq, pl->Lk, o, d)) ||
      (s = plan_variants(kind, fixed, ri, pl, o, d)))
    return s;

  if (!attn_shape_numel(pl->out_rank, pl->out_shape, &pl->out_n) ||
      !attn_shape_numel(pl->w_rank, pl->w_shape, &pl->w_n))
    return attn_diag_set(d, ATTN_ETOOBIG, "output size overflows");
  return check_limits(lim, pl, ri, pl->out_n, pl->w_n, d);
}

/* An fp32 request of a resident model held in bfloat16 (a bf16 model of
 * an F16 or BF16 file): the weights widened, the same values in fp32, into
 * *buf for this call (NULL when none is held in bfloat16). */
static attn_status widen_weights(attn_mha_problem *p, float **buf,
                                 attn_diag *d) {
  attn_weight *w[4] = {&p->wq, &p->wk, &p->wv, &p->wo};
  int64_t kw = p->Hkv * (p->E / p->H);
  const int64_t rows[4] = {p->E, kw, kw, p->E},
                cols[4] = {p->E, p->kdim, p->vdim, p->E};
  size_t n = 0, at = 0;
  *buf = NULL;
  for (int i = 0; i < 4; i++)
    if (!w[i]->data) n += (size_t)(rows[i] * cols[i]);
  if (!n) return ATTN_OK;
  if (!(*buf = malloc(n * sizeof **buf)))
    return attn_diag_set(d, ATTN_ENOMEM,
                         "out of memory widening the weights to fp32");
  for (int i = 0; i < 4; i++) {
    if (w[i]->data) continue;
    int64_t ld = w[i]->ld ? w[i]->ld : cols[i]; /* resident: [out, in] */
    float *f = *buf + at;
    for (int64_t r = 0; r < rows[i]; r++)
      for (int64_t c = 0; c < cols[i]; c++)
        f[r * cols[i] + c] = attn_bf16_to_f32(w[i]->bf16[r * ld + c]);
    *w[i] = (attn_weight){f, ATTN_W_OUT_IN, cols[i], NULL};
    at += (size_t)(rows[i] * cols[i]);
  }
  return ATTN_OK;
}

/* Stage 4: the engine's check and sizes for pl with the options o, then
 * the outputs allocated (zeroed) and computed into *out and *w (NULL when
 * attn_weights are not wanted), *kernel naming the kernel the products ran
 * on (attn_exec.kernel).  On failure nothing stays allocated. */
static attn_status run_engine(attn__model_kind kind, const req_info *ri,
                              plan *pl, attn_attend_opts *o, const attn_exec *x,
                              float **out, float **w, const char **kernel,
                              attn_diag *d) {
  attn_status s;
  attn_exec xk = *x;
  xk.kernel = kernel;
  x = &xk;
  *out = *w = NULL;
  /* key_lengths widened to int64 (B values, bounded by the input); the
   * standard ALiBi slopes (H values, bounded by the inputs too). */
  int64_t *lens = NULL;
  float *slopes = NULL, *wide = NULL; /* wide: widen_weights */
  if (ri->in[IN_KLEN]) {
    if (!(lens = copy_lengths(ri->in[IN_KLEN], pl->B)))
      return attn_diag_set(d, ATTN_ENOMEM, "out of memory for key_lengths");
    o->kpm.lengths = lens;
  }
  if (attn__variants_standard_alibi(&ri->var, o)) {
    if (!(slopes = malloc((size_t)pl->H * sizeof *slopes))) {
      s = attn_diag_set(d, ATTN_ENOMEM, "out of memory for alibi slopes");
      goto fail;
    }
    if ((s = attn_alibi_slopes(pl->H, slopes, d))) goto fail;
    o->alibi_slopes = slopes;
  }
  /* Engine validation and sizes, still before allocating outputs. */
  attn_bytes bytes;
  pl->sp.o = *o;
  pl->mp.o = *o;
  if (kind == ATTN__MODEL_RESIDENT && o->precision == ATTN_PRECISION_FP32 &&
      (s = widen_weights(&pl->mp, &wide, d)))
    goto fail;
  if (kind == ATTN__MODEL_SDPA)
    s = attn_sdpa_bytes(&pl->sp, x, &bytes, d);
  else
    s = attn_mha_bytes(&pl->mp, x, &bytes, d);
  if (s) goto fail;
  size_t out_n = pl->out_n, w_n = pl->w_n, out_b, w_b = 0;
  if (!attn_size_mul(out_n, sizeof(float), &out_b) ||
      (ri->want_w && !attn_size_mul(w_n, sizeof(float), &w_b))) {
    s = attn_diag_set(d, ATTN_ETOOBIG, "output size overflows");
    goto fail;
  }
  if (out_b != bytes.out || (ri->want_w && w_b != bytes.weights)) {
    s = attn_diag_set(d, ATTN_EINTERNAL,
                      "output sizes disagree with the engine (%zu/%zu, "
                      "%zu/%zu bytes)",
                      out_b, bytes.out, w_b, bytes.weights);
    goto fail;
  }

  *out = calloc(out_n ? out_n : 1, sizeof **out);
  *w = ri->want_w ? calloc(w_n ? w_n : 1, sizeof **w) : NULL;
  if (!*out || (ri->want_w && !*w)) {
    s = attn_diag_set(d, ATTN_ENOMEM,
                      "out of memory for outputs (%zu + %zu bytes)", out_b,
                      w_b);
    goto fail;
  }
  if (kind == ATTN__MODEL_SDPA) {
    const attn_sdpa_problem *p = &pl->sp;
    attn_mview mv = {*out, p->H * p->Lq * p->Dv, p->Lq * p->Dv, p->Dv};
    s = attn_sdpa(p, x, mv, *w, d);
  } else {
    s = attn_mha(&pl->mp, x, *out, *w, d);
  }
  if (s) goto fail;
  free(lens);
  free(slopes);
  free(wide);
  return ATTN_OK;

fail:
  free(lens);
  free(slopes);
  free(wide);
  free(*out);
  free(*w);
  *out = *w = NULL;
  return s;
}

/* The response: the model's names, the request's id and the outputs in the
 * order asked, each owning its buffer (out, w: taken, and freed when not
 * asked for). */
static attn_status make_response(const char *name, const char *version,
                                 const attn_infer_request *req,
                                 const req_info *ri, const plan *pl,
                                 attn_precision prec, float *out, float *w,
                                 attn_infer_response *resp, attn_diag *d) {
  attn_infer_response r;
  memset(&r, 0, sizeof r);
  r.precision = attn_precision_name(prec);
  bool oom = false;
  r.model_name = dup_or_null(name, &oom);
  r.model_version = dup_or_null(version, &oom);
  r.id = dup_or_null(req->id, &oom);
  r.outputs = calloc((size_t)ri->n_order, sizeof *r.outputs);
  if (!r.outputs) oom = true;
  for (int i = 0; !oom && i < ri->n_order; i++) {
    int id = ri->order[i];
    attn_infer_output *ro = &r.outputs[i];
    r.n_outputs = (size_t)i + 1;
    ro->name = dup_or_null(out_names[id], &oom);
    ro->binary = ri->bin[id];
    ro->datatype = ri->dtype[id];
    ro->tensor.dtype = ATTN_DT_FP32;
    ro->tensor.owns = true;
    if (id == OUT_O) {
      ro->tensor.rank = pl->out_rank;
      memcpy(ro->tensor.shape, pl->out_shape, sizeof pl->out_shape);
      ro->tensor.data = out;
      out = NULL;
    } else {
      ro->tensor.rank = pl->w_rank;
      memcpy(ro->tensor.shape, pl->w_shape, sizeof pl->w_shape);
      ro->tensor.data = w;
      w = NULL;
    }
  }
  free(out); /* computed but not asked for */
  free(w);
  if (oom) {
    attn_infer_response_free(&r);
    return attn_diag_set(d, ATTN_ENOMEM, "out of memory for the response");
  }
  *resp = r;
  return ATTN_OK;
}

/* The stages of the file's design: plan (1-3), run (4), the response. */
attn_status attn__model_run(attn__model_kind kind, const attn__resident *fixed,
                            const char *name, const char *version,
                            const attn_infer_request *req,
                            const attn_model_limits *lim, const attn_exec *x,
                            attn_infer_response *resp, attn_diag *d) {
  static const attn_exec one_thread = {0};
  req_info ri;
  plan pl;
  attn_attend_opts o;
  attn_status s;
  float *out, *w;
  const char *kernel = NULL;
  memset(&ri, 0, sizeof ri);
  memset(&pl, 0, sizeof pl);
  memset(&o, 0, sizeof o);
  memset(resp, 0, sizeof *resp);
  ri.model = name;
  ri.need = -1;
  ri.heads = ri.kv = -1;
  ri.precision = -1;
  if (!x) x = &one_thread;
  if (!req) return attn_diag_set(d, ATTN_EINVAL, "request is NULL");
  if (kind == ATTN__MODEL_RESIDENT && !fixed)
    return attn_diag_set(d, ATTN_EINTERNAL, "resident model without weights");
  if ((s = plan_request(kind, fixed, req, lim, &ri, &pl, &o, d)) ||
      (s = run_engine(kind, &ri, &pl, &o, x, &out, &w, &kernel, d)) ||
      (s = make_response(name, version, req, &ri, &pl, o.precision, out, w,
                         resp, d)))
    return s;
  resp->flops = kind == ATTN__MODEL_SDPA ? attn_sdpa_flops(&pl.sp)
                                         : attn_mha_flops(&pl.mp);
  resp->query_tokens = pl.Lq;
  resp->kernel = kernel;
  return ATTN_OK;
}
