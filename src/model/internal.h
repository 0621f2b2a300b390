/* internal.h - what registry.c, builtin.c, resident.c and safetensors.c
 * share (attn__ prefix).  Not a public header: only src/model/ includes it.
 */
#ifndef ATTN_MODEL_INTERNAL_H
#define ATTN_MODEL_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attn/engine.h"
#include "attn/infer_request.h"
#include "attn/model.h"
#include "attn/status.h"

struct attn_safetensors;
struct cJSON;

/* The attention variants of a request or of a resident model's file
 * (variants.c): each setting a value with a "given" flag. */
typedef enum {
  ATTN__V_CAUSAL,  /* i: attn_causal */
  ATTN__V_WL,      /* i: window_left, -1 unbounded */
  ATTN__V_WR,      /* i: window_right */
  ATTN__V_SOFTCAP, /* d */
  ATTN__V_ALIBI,   /* i: 0/1, the standard slopes unless slopes are given */
  ATTN__V_ROTARY,  /* i: 0/1 */
  ATTN__V_RBASE,   /* d */
  ATTN__V_RDIMS,   /* i */
  ATTN__V_RINTER,  /* i: 0/1 */
  ATTN__V_ROFF,    /* i: rotary_query_offset */
  ATTN__V_N
} attn__variant_id;

typedef struct attn__variants {
  bool given[ATTN__V_N];
  int64_t i[ATTN__V_N];
  double d[ATTN__V_N];
  const char *label[ATTN__V_N]; /* the user's spelling (attn_param.label) */
  float *slopes; /* a model file's alibi_slopes (owned by the model's copy,
                    borrowed by a merged request's) */
  int64_t n_slopes;
} attn__variants;

/* "causal, window_left, ...": the parameter names, for messages. */
extern const char attn__variant_names[];
/* The setting a parameter name sets, or -1. */
int attn__variant_find(const char *name);
/* p (named as setting id) into v: its type and range checked; given twice
 * is an error.  Messages use p->label when set, else p->name. */
attn_status attn__variant_param(const attn_param *p, int id, attn__variants *v,
                                attn_diag *d);
/* A resident model file's "causal", "window", "alibi", "alibi_slopes",
 * "softcap", "rotary" (root: the file's object; H query heads, Dh head
 * dim), checked; *v zeroed first, owns its slopes (attn__variants_free). */
attn_status attn__variants_from_json(const char *path, const struct cJSON *root,
                                     int64_t H, int64_t Dh, attn__variants *v,
                                     attn_diag *d);
void attn__variants_free(attn__variants *v);
/* The settings v gives, as a JSON object in /v1's and the model files'
 * spelling ({"causal": "bottom_right", "window": [4, 0], ...}), into *out
 * (malloc'd; NULL when v gives none).  ATTN_ENOMEM. */
attn_status attn__variants_json(const attn__variants *v, char **out);
/* A model's v2 metadata "parameters" (the protocol's $parameters: scalars
 * only) into *out (malloc'd): {"request_parameters": names, "precision":
 * precision (when not NULL), and the settings `fixed` gives (NULL: none) as
 * v2 parameters spell them, e.g. "causal": "bottom_right", "window_left":
 * 4}.  ATTN_ENOMEM. */
attn_status attn__model_params_json(const char *names,
                                    const attn__variants *fixed,
                                    const char *precision, char **out);
/* A model's fixed settings into the request's: a setting given by both
 * with another value, or an alibi_slopes input (slopes_input) where the
 * model fixes alibi, is ATTN_EINVAL naming both. */
attn_status attn__variants_merge(const attn__variants *fixed, const char *model,
                                 bool slopes_input, attn__variants *req,
                                 attn_diag *d);
/* Every combination checked against H query heads and the head dim Dh
 * (slopes: the alibi_slopes input or NULL), then written into *o (NULL:
 * check only).  The standard ALiBi slopes are not filled in: see
 * attn__variants_standard_alibi. */
attn_status attn__variants_check(const attn__variants *v,
                                 const attn_tensor *slopes, int64_t H,
                                 int64_t Dh, attn_attend_opts *o, attn_diag *d);
/* True when o still needs the standard slopes (attn_alibi_slopes). */
bool attn__variants_standard_alibi(const attn__variants *v,
                                   const attn_attend_opts *o);

typedef enum {
  ATTN__MODEL_SDPA,
  ATTN__MODEL_MHA,
  ATTN__MODEL_RESIDENT,
  ATTN__MODEL_KV /* kv_attention: described here, run by the sessions */
} attn__model_kind;

/* A resident model as loaded from its json file.  Weight views point into
 * `st` (safetensors) or `mem` (seeded); both owned.  A bf16 model's F16 and
 * BF16 tensors stay bfloat16 (the views' bf16, data NULL), its biases then
 * widened into `mem`. */
typedef struct attn__resident {
  char *name, *version, *description, *path;
  int64_t E, H, Hkv, kdim, vdim;
  bool bias, seeded;
  attn_precision precision;       /* "precision" of the file: fp32 default */
  size_t weight_bytes;            /* weights and biases as held (RAM) */
  attn_weight wq, wk, wv, wo;     /* ATTN_W_OUT_IN */
  const float *bq, *bk, *bv, *bo; /* NULL without bias */
  struct attn_safetensors *st;
  float *mem;
  attn__variants fixed; /* the settings the model file fixes */
  char *fixed_json;     /* the same as JSON (attn__variants_json) or NULL */
} attn__resident;

/* Messages name a file of the models folder by its label, the path
 * relative to the folder behind "models/" ("models/x.json"; a weights
 * file outside the folder is "models/x.json's weights"): a client may read
 * them (a load's answer, the index's reasons), and must see neither the
 * server's paths nor the files' bytes.  The log gets the same message with
 * the file's path (attn__diag_unlabel). */

/* resident.c: load one json file (json_path, named `label` in messages)
 * into *out (zeroed on entry).  On error *out is left zeroed; *d names the
 * file that failed (the json or its weights) by its label, *detail (may
 * be NULL) by its path. */
attn_status attn__resident_load(const char *json_path, const char *label,
                                attn__resident *out, attn_diag *d,
                                attn_diag *detail);
/* Frees everything inside r and zeroes it; NULL is allowed. */
void attn__resident_free(attn__resident *r);
/* resident.c: the "name" of the model file at json_path into name[cap]:
 * ATTN_OK, or why it has none (the file cannot be read or is not a regular
 * one: ATTN_EIO; not a JSON object: ATTN_EPARSE; no string "name" shorter
 * than cap: ATTN_EINVAL), naming the file by its label. */
attn_status attn__resident_name(const char *json_path, const char *label,
                                char *name, size_t cap, attn_diag *d);
/* resident.c: whether s may name a model (in URL paths): 1..
 * ATTN_MODEL_MAX_NAME of [A-Za-z0-9_.-], no leading dot. */
bool attn__model_name_ok(const char *s);
/* d's message into *log (NULL: nothing) with the label it begins with
 * ("label: ...") replaced by path; any other message as it is. */
void attn__diag_unlabel(attn_diag *log, const attn_diag *d, const char *label,
                        const char *path);

/* builtin.c: attn_model_infer for a kind; `fixed` is the resident model or
 * NULL. */
/* builtin.c: "scale, need_weights, ...": the request parameters a model of
 * this kind takes (the variants' included), into buf. */
const char *attn__model_param_names(attn__model_kind kind, char *buf,
                                    size_t cap);
attn_status attn__model_run(attn__model_kind kind, const attn__resident *fixed,
                            const char *name, const char *version,
                            const attn_infer_request *req,
                            const attn_model_limits *lim, const attn_exec *x,
                            attn_infer_response *resp, attn_diag *d);

/* safetensors.c: attn_safetensors_load_as of the file at path, named
 * `label` in messages. */
attn_status attn__safetensors_read(const char *path, const char *label,
                                   size_t max_elements, bool keep_bf16,
                                   struct attn_safetensors **out, attn_diag *d);

#endif /* ATTN_MODEL_INTERNAL_H */
