/* registry.c - the set of models a server offers (model.h).
 *
 * Design: an array of models built once by attn_registry_create: the
 * built-ins "sdpa" and "mha", then one resident model per *.json file of the
 * models directory, in file-name order so that registry order (and any
 * listing built from it) is the same on every start.  Each model carries its
 * input/output description for metadata; resident models carry their loaded
 * weights (resident.c).  Running a request is builtin.c's job.
 *
 * Invariants: names are unique across the registry; after creation nothing
 * changes, so lookups and attn_model_infer need no locks.
 * Threads: creation and destruction on one thread (start-up, shut-down);
 * everything else from any thread.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "attn/model.h"
#include "internal.h"

#define MAX_IO 15

struct attn_model {
  attn__model_kind kind;
  const char *name, *version, *description; /* static or owned by `res` */
  attn_model_io in[MAX_IO], out[2];
  size_t n_in, n_out;
  attn__resident res; /* kind == ATTN__MODEL_RESIDENT */
  char *params_json;  /* v2 metadata "parameters" (attn__model_params_json) */
};

struct attn_registry {
  attn_model **models;
  size_t n, cap;
};

/* ---- input/output descriptions ----------------------------------------- */

static void io(attn_model_io *t, size_t *n, const char *name, attn_dtype dt,
               bool optional, int rank, int64_t d0, int64_t d1, int64_t d2,
               int64_t d3) {
  attn_model_io *e = &t[(*n)++];
  const int64_t dims[4] = {d0, d1, d2, d3};
  memset(e, 0, sizeof *e);
  e->name = name;
  e->datatype = dt;
  e->optional = optional;
  e->rank = rank;
  for (int i = 0; i < rank; i++) e->shape[i] = dims[i];
}

static void describe(attn_model *m) {
  const int64_t V = -1;
  attn_model_io *in = m->in, *out = m->out;
  size_t *ni = &m->n_in, *no = &m->n_out;
  *ni = *no = 0;
  switch (m->kind) {
    case ATTN__MODEL_SDPA:
      io(in, ni, "query", ATTN_DT_FP32, false, 4, V, V, V, V);
      io(in, ni, "key", ATTN_DT_FP32, false, 4, V, V, V, V);
      io(in, ni, "value", ATTN_DT_FP32, false, 4, V, V, V, V);
      io(in, ni, "attn_mask", ATTN_DT_BOOL, true, 4, V, V, V, V);
      io(in, ni, "key_padding_mask", ATTN_DT_BOOL, true, 2, V, V, 0, 0);
      io(in, ni, "key_lengths", ATTN_DT_INT64, true, 1, V, 0, 0, 0);
      io(in, ni, "alibi_slopes", ATTN_DT_FP32, true, 1, V, 0, 0, 0);
      io(out, no, "attn_output", ATTN_DT_FP32, false, 4, V, V, V, V);
      io(out, no, "attn_weights", ATTN_DT_FP32, true, 4, V, V, V, V);
      break;
    case ATTN__MODEL_MHA:
      io(in, ni, "query", ATTN_DT_FP32, false, 3, V, V, V, 0);
      io(in, ni, "key", ATTN_DT_FP32, true, 3, V, V, V, 0);
      io(in, ni, "value", ATTN_DT_FP32, true, 3, V, V, V, 0);
      io(in, ni, "attn_mask", ATTN_DT_BOOL, true, 4, V, V, V, V);
      io(in, ni, "key_padding_mask", ATTN_DT_BOOL, true, 2, V, V, 0, 0);
      io(in, ni, "key_lengths", ATTN_DT_INT64, true, 1, V, 0, 0, 0);
      io(in, ni, "alibi_slopes", ATTN_DT_FP32, true, 1, V, 0, 0, 0);
      io(in, ni, "w_q", ATTN_DT_FP32, false, 2, V, V, 0, 0);
      io(in, ni, "w_k", ATTN_DT_FP32, false, 2, V, V, 0, 0);
      io(in, ni, "w_v", ATTN_DT_FP32, false, 2, V, V, 0, 0);
      io(in, ni, "w_o", ATTN_DT_FP32, false, 2, V, V, 0, 0);
      io(in, ni, "b_q", ATTN_DT_FP32, true, 1, V, 0, 0, 0);
      io(in, ni, "b_k", ATTN_DT_FP32, true, 1, V, 0, 0, 0);
      io(in, ni, "b_v", ATTN_DT_FP32, true, 1, V, 0, 0, 0);
      io(in, ni, "b_o", ATTN_DT_FP32, true, 1, V, 0, 0, 0);
      io(out, no, "attn_output", ATTN_DT_FP32, false, 3, V, V, V, 0);
      io(out, no, "attn_weights", ATTN_DT_FP32, true, 4, V, V, V, V);
      break;
    case ATTN__MODEL_RESIDENT: {
      const attn__resident *r = &m->res;
      io(in, ni, "query", ATTN_DT_FP32, false, 3, V, V, r->E, 0);
      io(in, ni, "key", ATTN_DT_FP32, true, 3, V, V, r->kdim, 0);
      io(in, ni, "value", ATTN_DT_FP32, true, 3, V, V, r->vdim, 0);
      io(in, ni, "attn_mask", ATTN_DT_BOOL, true, 4, V, V, V, V);
      io(in, ni, "key_padding_mask", ATTN_DT_BOOL, true, 2, V, V, 0, 0);
      io(in, ni, "key_lengths", ATTN_DT_INT64, true, 1, V, 0, 0, 0);
      io(in, ni, "alibi_slopes", ATTN_DT_FP32, true, 1, r->H, 0, 0, 0);
      io(out, no, "attn_output", ATTN_DT_FP32, false, 3, V, V, r->E, 0);
      io(out, no, "attn_weights", ATTN_DT_FP32, true, 4, V, r->H, V, V);
    } break;
  }
}

/* ---- registry ----------------------------------------------------------- */

static void model_free(attn_model *m) {
  if (!m) return;
  if (m->kind == ATTN__MODEL_RESIDENT) attn__resident_free(&m->res);
  free(m->params_json);
  free(m);
}

void attn_registry_destroy(attn_registry *r) {
  if (!r) return;
  for (size_t i = 0; i < r->n; i++) model_free(r->models[i]);
  free(r->models);
  free(r);
}

/* Takes m (freed on failure); describes it first. */
static attn_status add(attn_registry *r, attn_model *m, attn_diag *d) {
  char names[512];
  describe(m);
  if (attn__model_params_json(
          attn__model_param_names(m->kind, names, sizeof names),
          m->kind == ATTN__MODEL_RESIDENT ? &m->res.fixed : NULL,
          m->kind == ATTN__MODEL_RESIDENT
              ? attn_precision_name(m->res.precision)
              : NULL,
          &m->params_json) != ATTN_OK) {
    model_free(m);
    return attn_diag_set(d, ATTN_ENOMEM, "out of memory for the registry");
  }
  if (r->n == r->cap) {
    size_t cap = r->cap ? 2 * r->cap : 8;
    attn_model **p = realloc(r->models, cap * sizeof *p);
    if (!p) {
      model_free(m);
      return attn_diag_set(d, ATTN_ENOMEM, "out of memory for the registry");
    }
    r->models = p;
    r->cap = cap;
  }
  r->models[r->n++] = m;
  return ATTN_OK;
}

static attn_status add_builtin(attn_registry *r, attn__model_kind kind,
                               const char *name, const char *desc,
                               attn_diag *d) {
  attn_model *m = calloc(1, sizeof *m);
  if (!m) return attn_diag_set(d, ATTN_ENOMEM, "out of memory");
  m->kind = kind;
  m->name = name;
  m->version = "1";
  m->description = desc;
  return add(r, m, d);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static void free_list(char **v, size_t n) {
  for (size_t i = 0; i < n; i++) free(v[i]);
  free(v);
}

/* Paths of the *.json files in dir, sorted; *paths NULL and *n 0 when the
 * directory does not exist. */
static attn_status list_json(const char *dir, char ***paths, size_t *n,
                             attn_diag *d) {
  *paths = NULL;
  *n = 0;
  DIR *dp = opendir(dir);
  if (!dp) {
    if (errno == ENOENT) return ATTN_OK;
    return attn_diag_set(d, ATTN_EIO, "models dir '%s': %s", dir,
                         strerror(errno));
  }
  char **v = NULL;
  size_t cnt = 0, cap = 0;
  attn_status s = ATTN_OK;
  struct dirent *e;
  for (errno = 0; (e = readdir(dp)) != NULL; errno = 0) {
    const char *nm = e->d_name;
    size_t len = strlen(nm);
    if (nm[0] == '.' || len <= 5 || strcmp(nm + len - 5, ".json") != 0)
      continue;
    if (cnt == cap) {
      size_t nc = cap ? 2 * cap : 16;
      char **p = realloc(v, nc * sizeof *p);
      if (!p) {
        s = attn_diag_set(d, ATTN_ENOMEM, "out of memory");
        break;
      }
      v = p;
      cap = nc;
    }
    size_t dl = strlen(dir);
    char *path = malloc(dl + 1 + len + 1);
    if (!path) {
      s = attn_diag_set(d, ATTN_ENOMEM, "out of memory");
      break;
    }
    memcpy(path, dir, dl);
    path[dl] = '/';
    memcpy(path + dl + 1, nm, len + 1);
    v[cnt++] = path;
  }
  if (s == ATTN_OK && errno != 0)
    s = attn_diag_set(d, ATTN_EIO, "models dir '%s': %s", dir, strerror(errno));
  closedir(dp);
  if (s != ATTN_OK) {
    free_list(v, cnt);
    return s;
  }
  if (cnt) qsort(v, cnt, sizeof *v, cmp_str);
  *paths = v;
  *n = cnt;
  return ATTN_OK;
}

static attn_status add_resident(attn_registry *r, const char *path,
                                attn_diag *d) {
  attn_model *m = calloc(1, sizeof *m);
  if (!m) return attn_diag_set(d, ATTN_ENOMEM, "out of memory");
  attn_status s = attn__resident_load(path, &m->res, d);
  if (s) {
    free(m);
    return s;
  }
  m->kind = ATTN__MODEL_RESIDENT;
  for (size_t i = 0; i < r->n; i++) {
    const attn_model *o = r->models[i];
    if (strcmp(o->name, m->res.name) != 0) continue;
    s = o->kind == ATTN__MODEL_RESIDENT
            ? attn_diag_set(d, ATTN_EINVAL,
                            "%s: model name '%s' is already used by %s", path,
                            m->res.name, o->res.path)
            : attn_diag_set(d, ATTN_EINVAL,
                            "%s: model name '%s' is a built-in model", path,
                            m->res.name);
    model_free(m);
    return s;
  }
  m->name = m->res.name;
  m->version = m->res.version;
  m->description = m->res.description;
  return add(r, m, d);
}

attn_status attn_registry_create(const char *models_dir, attn_registry **out,
                                 attn_diag *d) {
  *out = NULL;
  attn_registry *r = calloc(1, sizeof *r);
  if (!r) return attn_diag_set(d, ATTN_ENOMEM, "out of memory");
  attn_status s;
  if ((s = add_builtin(r, ATTN__MODEL_SDPA, "sdpa",
                       "scaled dot-product attention on query, key, value",
                       d)) ||
      (s = add_builtin(r, ATTN__MODEL_MHA, "mha",
                       "multi-head attention with client-supplied "
                       "projection weights",
                       d))) {
    attn_registry_destroy(r);
    return s;
  }
  if (models_dir) {
    char **paths;
    size_t n;
    if ((s = list_json(models_dir, &paths, &n, d))) {
      attn_registry_destroy(r);
      return s;
    }
    for (size_t i = 0; i < n && s == ATTN_OK; i++)
      s = add_resident(r, paths[i], d);
    free_list(paths, n);
    if (s) {
      attn_registry_destroy(r);
      return s;
    }
  }
  *out = r;
  return ATTN_OK;
}

const attn_model *attn_registry_find(const attn_registry *r, const char *name,
                                     const char *version) {
  if (!r || !name) return NULL;
  for (size_t i = 0; i < r->n; i++) {
    const attn_model *m = r->models[i];
    if (strcmp(m->name, name) == 0)
      return !version || !version[0] || strcmp(version, m->version) == 0 ? m
                                                                         : NULL;
  }
  return NULL;
}

size_t attn_registry_count(const attn_registry *r) {
  return r ? r->n : 0;
}

const attn_model *attn_registry_at(const attn_registry *r, size_t i) {
  return r && i < r->n ? r->models[i] : NULL;
}

const char *attn_model_name(const attn_model *m) {
  return m->name;
}
const char *attn_model_version(const attn_model *m) {
  return m->version;
}

void attn_model_info_get(const attn_model *m, attn_model_info *info) {
  memset(info, 0, sizeof *info);
  info->name = m->name;
  info->version = m->version;
  info->description = m->description;
  info->parameters = m->params_json;
  switch (m->kind) {
    case ATTN__MODEL_SDPA:
      info->kind = "sdpa";
      break;
    case ATTN__MODEL_MHA:
      info->kind = "mha";
      break;
    case ATTN__MODEL_RESIDENT: {
      const attn__resident *r = &m->res;
      info->kind = "resident";
      info->source = r->path;
      info->embed_dim = r->E;
      info->num_heads = r->H;
      info->num_kv_heads = r->Hkv;
      info->kdim = r->kdim;
      info->vdim = r->vdim;
      info->bias = r->bias;
      info->seeded = r->seeded;
      info->fixed = r->fixed_json;
      info->precision = attn_precision_name(r->precision);
      info->weight_bytes = r->weight_bytes;
    } break;
  }
}

const attn_model_io *attn_model_inputs(const attn_model *m, size_t *n) {
  *n = m->n_in;
  return m->in;
}

const attn_model_io *attn_model_outputs(const attn_model *m, size_t *n) {
  *n = m->n_out;
  return m->out;
}

attn_status attn_model_infer(const attn_model *m, const attn_infer_request *req,
                             const attn_model_limits *lim, const attn_exec *x,
                             attn_infer_response *resp, attn_diag *d) {
  if (!m || !resp) {
    if (resp) memset(resp, 0, sizeof *resp);
    return attn_diag_set(d, ATTN_EINVAL, "model or response is NULL");
  }
  return attn__model_run(m->kind,
                         m->kind == ATTN__MODEL_RESIDENT ? &m->res : NULL,
                         m->name, m->version, req, lim, x, resp, d);
}
