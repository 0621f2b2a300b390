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

typedef enum {
  ATTN__MODEL_SDPA,
  ATTN__MODEL_MHA,
  ATTN__MODEL_RESIDENT
} attn__model_kind;

/* A resident model as loaded from its json file.  Weight views point into
 * `st` (safetensors) or `mem` (seeded); both owned. */
typedef struct attn__resident {
  char *name, *version, *description, *path;
  int64_t E, H, Hkv, kdim, vdim;
  bool bias, seeded;
  attn_weight wq, wk, wv, wo;     /* ATTN_W_OUT_IN */
  const float *bq, *bk, *bv, *bo; /* NULL without bias */
  struct attn_safetensors *st;
  float *mem;
} attn__resident;

/* resident.c: load one json file into *out (zeroed on entry).  On error *out
 * is left zeroed.  Errors name the file. */
attn_status attn__resident_load(const char *json_path, attn__resident *out,
                                attn_diag *d);
/* Frees everything inside r and zeroes it; NULL is allowed. */
void attn__resident_free(attn__resident *r);

/* builtin.c: attn_model_infer for a kind; `fixed` is the resident model or
 * NULL. */
attn_status attn__model_run(attn__model_kind kind, const attn__resident *fixed,
                            const char *name, const char *version,
                            const attn_infer_request *req,
                            const attn_model_limits *lim, const attn_exec *x,
                            attn_infer_response *resp, attn_diag *d);

/* safetensors.c: read a whole regular file of at most max_bytes into a new
 * buffer (NUL-terminated: *buf has len + 1 bytes).  Errors: ATTN_EIO (cannot
 * open, not a regular file, short read), ATTN_ETOOBIG (larger than
 * max_bytes, before reading), ATTN_ENOMEM; on error *buf is NULL and nothing
 * is allocated. */
attn_status attn__read_file(const char *path, size_t max_bytes, char **buf,
                            size_t *len, attn_diag *d);

#endif /* ATTN_MODEL_INTERNAL_H */
