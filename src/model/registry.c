/* registry.c - the set of models a server offers (model.h).
 *
 * Design: slots, one per model name, in the order names first appeared:
 * the built-ins "sdpa" and "mha", then one resident model per *.json file
 * of the models directory, in file-name order so that registry order (and
 * any listing built from it) is the same on every start; later loads add
 * names at the end.  A slot keeps its name for the registry's life (the
 * metrics and statistics are kept by slot); its model is replaced by a
 * load and is NULL after an unload.  Each model carries its input/output
 * description for metadata; resident models carry their loaded weights
 * (resident.c).  Running a request is builtin.c's job.
 *
 * Invariants: names are unique across the slots; a model is freed when
 * its last reference goes: the slot's, and one per attn_registry_get not
 * yet put back, so a request that started on a model finishes on it
 * while a load replaces it.  `mu` guards the slots' models and reasons
 * (held for a lookup, never for file I/O); `load_mu` lets one load,
 * unload or reload run at a time.  Slot names and `n` are written before
 * a slot is published (n, release) and never change after.
 * Files: no file of the folder is opened blocking (resident.c reads them
 * through attn_read_file): a FIFO named x.json is refused at once, never
 * waited on; at start-up a *.json that is no regular file is passed over
 * (stat opens nothing), and the index lists any file whose "name" cannot be
 * read under its own name, with the reason.
 * Messages: what a client may read (a load's, the index's reasons) names
 * files by their labels, "models/x.json" (internal.h); a load's detail and
 * reload's report (the log), and attn_registry_create's (the operator's,
 * at start-up), by their paths.
 * Threads: creation and destruction on one thread (start-up, shut-down);
 * everything else from any thread.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
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
  atomic_int refs;    /* the slot's, and attn_registry_get's */
};

struct attn_registry {
  pthread_mutex_t mu, load_mu;
  attn_model *model[ATTN_MAX_MODELS]; /* NULL: unloaded */
  char *name[ATTN_MAX_MODELS];        /* the slot's, for ever */
  char *reason[ATTN_MAX_MODELS];      /* why not loaded, or the last
                                         failed load; NULL: none */
  atomic_size_t n;                    /* slots published */
  char *dir;                          /* models_dir or NULL */
  char *from, *to; /* model_name: the files' model `from` served as `to`;
                      NULL: none */
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
    case ATTN__MODEL_KV: /* the batched form; a sequence drops the B dim */
      io(in, ni, "session_id", ATTN_DT_BYTES, true, 1, V, 0, 0, 0);
      io(in, ni, "position", ATTN_DT_INT64, true, 1, V, 0, 0, 0);
      io(in, ni, "query", ATTN_DT_FP32, false, 4, V, V, V, V);
      io(in, ni, "key", ATTN_DT_FP32, true, 4, V, V, V, V);
      io(in, ni, "value", ATTN_DT_FP32, true, 4, V, V, V, V);
      io(out, no, "output", ATTN_DT_FP32, false, 4, V, V, V, V);
      io(out, no, "lse", ATTN_DT_FP32, false, 3, V, V, V, 0);
      break;
  }
}

/* ---- models ------------------------------------------------------------- */

static void model_free(attn_model *m) {
  if (!m) return;
  if (m->kind == ATTN__MODEL_RESIDENT) attn__resident_free(&m->res);
  free(m->params_json);
  free(m);
}

void attn_model_put(const attn_model *m) {
  attn_model *w = (attn_model *)m; /* the count is the model's own */
  if (w && atomic_fetch_sub(&w->refs, 1) == 1) model_free(w);
}

/* Describes m, makes its metadata parameters, one reference.  Takes m
 * (freed on failure). */
/* kv_attention's metadata "parameters": its request parameters, and both
 * forms of a step (the inputs and outputs above are the batched one's). */
#define KV_PARAMS_JSON                                                       \
  "{\"request_parameters\":\"layer, sequence_id, sequence_start, "           \
  "sequence_end, layers, max_tokens, kv_dtype, scale, window_left, "         \
  "window_right, softcap, alibi, rotary, rotary_base, rotary_dims, "         \
  "rotary_interleaved\",\"batched_form\":\"inputs session_id BYTES [B], "    \
  "position INT64 [B] (each session's length), query [B,t,num_heads,"        \
  "head_dim], key and value [B,t,num_kv_heads,head_dim] (both or neither); " \
  "parameter layer; outputs output [B,t,num_heads,head_dim] and lse "        \
  "[B,t,num_heads]\",\"sequence_form\":\"Triton's sequence extension: "      \
  "parameters sequence_id (string or uint64), sequence_start (creates the "  \
  "session: its shape from the tensors, layers, max_tokens, kv_dtype and "   \
  "the variants from parameters), sequence_end (deletes it after the "       \
  "answer), layer; inputs query [t,num_heads,head_dim], key and value "      \
  "[t,num_kv_heads,head_dim] (appended at the layer's length); outputs "     \
  "output [t,num_heads,head_dim] and lse [t,num_heads]\"}"

static attn_status finish_model(attn_model *m, attn_diag *d) {
  char names[512];
  describe(m);
  atomic_init(&m->refs, 1);
  if (m->kind == ATTN__MODEL_KV) { /* the two forms of a step, in words */
    m->params_json = strdup(KV_PARAMS_JSON);
    if (!m->params_json) {
      model_free(m);
      return attn_diag_set(d, ATTN_ENOMEM, "out of memory for the registry");
    }
    return ATTN_OK;
  }
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
  return ATTN_OK;
}

static attn_status make_builtin(attn__model_kind kind, const char *name,
                                const char *desc, attn_model **out,
                                attn_diag *d) {
  attn_model *m = calloc(1, sizeof *m);
  if (!m) return attn_diag_set(d, ATTN_ENOMEM, "out of memory");
  m->kind = kind;
  m->name = name;
  m->version = "1";
  m->description = desc;
  attn_status s = finish_model(m, d);
  *out = s ? NULL : m;
  return s;
}

/* A file of the models folder (path: the folder's path, '/', its name) as
 * messages a client may read name it: "models/NAME" (internal.h). */
#define LABEL_MAX 320
static const char *label_of(const char *path, char *buf) {
  const char *slash = strrchr(path, '/');
  snprintf(buf, LABEL_MAX, "models/%s", slash ? slash + 1 : path);
  return buf;
}

/* The name a file whose "name" is nm gives its model in r: nm, or the
 * model_name it is served under (r->to). */
static const char *served(const attn_registry *r, const char *nm) {
  return r->from && strcmp(nm, r->from) == 0 ? r->to : nm;
}

/* attn__resident_name, then served(): the name r serves the file's model
 * under, into name[cap]. */
static attn_status file_name(const attn_registry *r, const char *path,
                             const char *label, char *name, size_t cap,
                             attn_diag *d) {
  attn_status s = attn__resident_name(path, label, name, cap, d);
  if (s == ATTN_OK && r->from && strcmp(name, r->from) == 0)
    snprintf(name, cap, "%s", r->to);
  return s;
}

/* The resident model of the file at path (under the name r serves it
 * by), or the file's error: in *d by its label, in *detail (may be NULL)
 * by its path. */
static attn_status make_resident(const attn_registry *r, const char *path,
                                 attn_model **out, attn_diag *d,
                                 attn_diag *detail) {
  char label[LABEL_MAX];
  *out = NULL;
  attn_model *m = calloc(1, sizeof *m);
  if (!m) return attn_diag_set(d, ATTN_ENOMEM, "out of memory");
  attn_status s =
      attn__resident_load(path, label_of(path, label), &m->res, d, detail);
  if (s) {
    free(m);
    return s;
  }
  if (strcmp(served(r, m->res.name), m->res.name) != 0) {
    char *to = strdup(r->to);
    if (!to) {
      attn__resident_free(&m->res);
      free(m);
      return attn_diag_set(d, ATTN_ENOMEM, "out of memory");
    }
    free(m->res.name);
    m->res.name = to;
  }
  m->kind = ATTN__MODEL_RESIDENT;
  m->name = m->res.name;
  m->version = m->res.version;
  m->description = m->res.description;
  if ((s = finish_model(m, d)) == ATTN_OK) *out = m;
  return s;
}

static int is_builtin(const char *name) {
  return strcmp(name, "sdpa") == 0 || strcmp(name, "mha") == 0 ||
         strcmp(name, ATTN_KV_MODEL_NAME) == 0;
}

/* ---- slots -------------------------------------------------------------- */

static size_t slots(const attn_registry *r) {
  return atomic_load_explicit(&r->n, memory_order_acquire);
}

static int slot_of(const attn_registry *r, const char *name, size_t len) {
  size_t n = slots(r);
  for (size_t i = 0; i < n; i++)
    if (strlen(r->name[i]) == len && memcmp(r->name[i], name, len) == 0)
      return (int)i;
  return -1;
}

static void set_reason(attn_registry *r, size_t i, const char *why) {
  free(r->reason[i]);
  r->reason[i] = why ? strdup(why) : NULL;
}

/* Puts m (its name's slot, a new one for a new name) in place of what the
 * slot held, which is put back.  Takes m; under load_mu. */
static attn_status install(attn_registry *r, attn_model *m, attn_diag *d) {
  int i = slot_of(r, m->name, strlen(m->name));
  attn_model *old = NULL;
  if (i < 0) {
    size_t n = slots(r);
    char *nm = n < ATTN_MAX_MODELS ? strdup(m->name) : NULL;
    if (!nm) {
      attn_status s =
          n < ATTN_MAX_MODELS
              ? attn_diag_set(d, ATTN_ENOMEM, "out of memory")
              : attn_diag_set(d, ATTN_ETOOBIG,
                              "model '%s': the server holds at most %d "
                              "model names (ATTN_MAX_MODELS), built-ins "
                              "and unloaded ones included",
                              m->name, ATTN_MAX_MODELS);
      attn_model_put(m);
      return s;
    }
    r->name[n] = nm;
    pthread_mutex_lock(&r->mu);
    r->model[n] = m;
    pthread_mutex_unlock(&r->mu);
    atomic_store_explicit(&r->n, n + 1, memory_order_release);
    return ATTN_OK;
  }
  pthread_mutex_lock(&r->mu);
  old = r->model[i];
  r->model[i] = m;
  set_reason(r, (size_t)i, NULL);
  pthread_mutex_unlock(&r->mu);
  attn_model_put(old);
  return ATTN_OK;
}

void attn_registry_destroy(attn_registry *r) {
  if (!r) return;
  for (size_t i = 0; i < slots(r); i++) {
    attn_model_put(r->model[i]);
    free(r->name[i]);
    free(r->reason[i]);
  }
  pthread_mutex_destroy(&r->mu);
  pthread_mutex_destroy(&r->load_mu);
  free(r->dir);
  free(r->from);
  free(r->to);
  free(r);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static void free_list(char **v, size_t n) {
  for (size_t i = 0; i < n; i++) free(v[i]);
  free(v);
}

/* The folder dir could not be read (errno err): *d says so without its
 * path, *detail (may be NULL) with it. */
static attn_status dir_failed(const char *dir, int err, attn_diag *d,
                              attn_diag *detail) {
  if (detail)
    attn_diag_set(detail, ATTN_EIO, "models dir '%s': %s", dir, strerror(err));
  return attn_diag_set(d, ATTN_EIO, "cannot read the models folder: %s",
                       strerror(err));
}

/* Paths of the *.json files in dir, sorted; *paths NULL and *n 0 when the
 * directory does not exist.  Errors as dir_failed. */
static attn_status list_json(const char *dir, char ***paths, size_t *n,
                             attn_diag *d, attn_diag *detail) {
  *paths = NULL;
  *n = 0;
  if (!dir) return ATTN_OK;
  DIR *dp = opendir(dir);
  if (!dp) {
    if (errno == ENOENT) return ATTN_OK;
    return dir_failed(dir, errno, d, detail);
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
  if (s == ATTN_OK && errno != 0) s = dir_failed(dir, errno, d, detail);
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

/* Whether the file at path is a regular one, or may be (stat fails: its
 * load then says why).  stat opens nothing: a FIFO is not waited for.  At
 * start-up a *.json that is no regular file (a FIFO, a folder) is not a
 * model file and is passed over: the index lists it with the reason. */
static bool regular(const char *path) {
  struct stat st;
  return stat(path, &st) != 0 || S_ISREG(st.st_mode);
}

/* At start-up: a file's model into a new slot; a name used twice or a
 * built-in's fails.  Messages name files by their paths (the operator's,
 * at start-up). */
static attn_status add_resident(attn_registry *r, const char *path,
                                attn_diag *d) {
  attn_model *m;
  attn_diag labelled;
  attn_status s = make_resident(r, path, &m, &labelled, d);
  if (s) return s;
  int i = slot_of(r, m->name, strlen(m->name));
  if (i >= 0) {
    const attn_model *o = r->model[i];
    s = o->kind == ATTN__MODEL_RESIDENT
            ? attn_diag_set(d, ATTN_EINVAL,
                            "%s: model name '%s' is already used by %s", path,
                            m->name, o->res.path)
            : attn_diag_set(d, ATTN_EINVAL,
                            "%s: model name '%s' is a built-in model", path,
                            m->name);
    attn_model_put(m);
    return s;
  }
  return install(r, m, d);
}

/* The model names the regular files of dir give (each once, in file
 * order) into names ("a, b", cut to fit size); returns their count, and
 * whether one is `want` (may be NULL) in *has. */
static size_t file_models(const char *dir, const char *want, bool *has,
                          char *names, size_t size) {
  char **paths;
  size_t n, count = 0, at = 0;
  attn_diag ignored;
  *has = false;
  names[0] = '\0';
  if (list_json(dir, &paths, &n, &ignored, NULL) != ATTN_OK) return 0;
  for (size_t i = 0; i < n; i++) {
    char nm[ATTN_MODEL_MAX_NAME + 1], label[LABEL_MAX];
    if (!regular(paths[i]) ||
        attn__resident_name(paths[i], label_of(paths[i], label), nm, sizeof nm,
                            &ignored) != ATTN_OK)
      continue;
    size_t j = 0; /* an earlier file naming the same model */
    while (j < i && strcmp(paths[j], nm) != 0) j++;
    if (j < i) continue;
    *has |= want && strcmp(nm, want) == 0;
    int w = snprintf(names + at, size - at, "%s%s", count ? ", " : "", nm);
    if (w > 0 && at + (size_t)w < size) at += (size_t)w;
    count++;
    char *c = strdup(nm); /* paths[i] becomes its name, for the check */
    if (c) {
      free(paths[i]);
      paths[i] = c;
    }
  }
  free_list(paths, n);
  return count;
}

/* model_name ("NEW" or "FROM=NEW") into r->from and r->to, as
 * attn_registry_create_named says; r->dir is set. */
static attn_status set_rename(attn_registry *r, const char *model_name,
                              attn_diag *d) {
  const char *eq = strchr(model_name, '='), *to = eq ? eq + 1 : model_name;
  char from[ATTN_MODEL_MAX_NAME + 1], names[160];
  bool has = false;
  if (!attn__model_name_ok(to) ||
      (eq && (eq == model_name || (size_t)(eq - model_name) >= sizeof from)))
    return attn_diag_set(d, ATTN_EINVAL,
                         "model_name '%.80s': write NEW or FROM=NEW, each "
                         "1..%d of [A-Za-z0-9_.-] not starting with '.'",
                         model_name, ATTN_MODEL_MAX_NAME);
  if (is_builtin(to))
    return attn_diag_set(d, ATTN_EINVAL,
                         "model_name '%s': '%s' is a built-in model (sdpa, "
                         "mha, %s): choose another name",
                         model_name, to, ATTN_KV_MODEL_NAME);
  if (eq)
    snprintf(from, sizeof from, "%.*s", (int)(eq - model_name), model_name);
  size_t n = file_models(r->dir, eq ? from : NULL, &has, names, sizeof names);
  if (eq && !has)
    return attn_diag_set(d, ATTN_EINVAL,
                         "model_name '%s': no model file of models_dir '%s' "
                         "has \"name\": \"%s\" (they name: %s)",
                         model_name, r->dir ? r->dir : "", from,
                         n ? names : "none");
  if (!eq && n != 1)
    return attn_diag_set(
        d, ATTN_EINVAL,
        "model_name '%s' renames the only model of "
        "models_dir '%s', which holds %zu (%s): %s",
        model_name, r->dir ? r->dir : "", n, n ? names : "no model file",
        n ? "name the one, as model_name FROM=NEW" : "add its file");
  if (!eq) { /* the one model's name: it is in names */
    snprintf(from, sizeof from, "%.*s", ATTN_MODEL_MAX_NAME, names);
  } else if (strcmp(from, to) != 0) {
    bool clash = false;
    char ignored[8];
    file_models(r->dir, to, &clash, ignored, sizeof ignored);
    if (clash)
      return attn_diag_set(d, ATTN_EINVAL,
                           "model_name '%s': another model file of "
                           "models_dir already names a model '%s'",
                           model_name, to);
  }
  if (!(r->from = strdup(from)) || !(r->to = strdup(to)))
    return attn_diag_set(d, ATTN_ENOMEM, "out of memory");
  return ATTN_OK;
}

/* FNV-1a of n bytes at p, continuing h. */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211u;
  return h;
}

uint64_t attn_registry_dir_stamp(const attn_registry *r) {
  DIR *dp = r->dir ? opendir(r->dir) : NULL;
  if (!dp) return 0;
  uint64_t sum = 1; /* an empty folder is not "no folder" */
  size_t dl = strlen(r->dir);
  char path[ATTN_MAX_PATH_LEN + 300];
  for (struct dirent *e; (e = readdir(dp)) != NULL;) {
    struct stat st;
    if (e->d_name[0] == '.' ||
        (size_t)snprintf(path, sizeof path, "%s/%s", r->dir, e->d_name) >=
            sizeof path ||
        stat(path, &st) != 0)
      continue;
    uint64_t h = fnv(14695981039346656037u, path + dl, strlen(path + dl));
    int64_t v[4] = {(int64_t)st.st_size, (int64_t)st.st_mtim.tv_sec,
                    (int64_t)st.st_mtim.tv_nsec, (int64_t)st.st_ino};
    sum += fnv(h, v, sizeof v); /* a sum: the order of readdir is not kept */
  }
  closedir(dp);
  return sum;
}

void attn_registry_renamed(const attn_registry *r, const char **from,
                           const char **to) {
  *from = r->from;
  *to = r->to;
}

attn_status attn_registry_create(const char *models_dir, attn_registry **out,
                                 attn_diag *d) {
  return attn_registry_create_named(models_dir, NULL, out, d);
}

attn_status attn_registry_create_named(const char *models_dir,
                                       const char *model_name,
                                       attn_registry **out, attn_diag *d) {
  *out = NULL;
  attn_registry *r = calloc(1, sizeof *r);
  if (!r) return attn_diag_set(d, ATTN_ENOMEM, "out of memory");
  pthread_mutex_init(&r->mu, NULL);
  pthread_mutex_init(&r->load_mu, NULL);
  atomic_init(&r->n, 0);
  attn_model *b = NULL;
  attn_status s;
  if ((s = make_builtin(ATTN__MODEL_SDPA, "sdpa",
                        "scaled dot-product attention on query, key, value", &b,
                        d)) ||
      (s = install(r, b, d)) ||
      (s = make_builtin(ATTN__MODEL_MHA, "mha",
                        "multi-head attention with client-supplied "
                        "projection weights",
                        &b, d)) ||
      (s = install(r, b, d)) ||
      (s = make_builtin(ATTN__MODEL_KV, ATTN_KV_MODEL_NAME,
                        "attention over the KV cache of sessions kept in "
                        "attnd: a batched decode step (session_id, "
                        "position, query, key, value -> output, lse) or "
                        "Triton's sequence extension (sequence_id, "
                        "sequence_start, sequence_end; no batch dim)",
                        &b, d)) ||
      (s = install(r, b, d)) ||
      (models_dir && !(r->dir = strdup(models_dir)) &&
       (s = attn_diag_set(d, ATTN_ENOMEM, "out of memory"))) ||
      (model_name && *model_name && (s = set_rename(r, model_name, d)))) {
    attn_registry_destroy(r);
    return s;
  }
  char **paths;
  size_t n;
  attn_diag unnamed;
  if ((s = list_json(models_dir, &paths, &n, &unnamed, d))) {
    attn_registry_destroy(r);
    return s;
  }
  for (size_t i = 0; i < n && s == ATTN_OK; i++)
    if (regular(paths[i])) s = add_resident(r, paths[i], d);
  free_list(paths, n);
  if (s) {
    attn_registry_destroy(r);
    return s;
  }
  *out = r;
  return ATTN_OK;
}

/* ---- lookups ------------------------------------------------------------ */

/* The slot named `name`'s model when its version matches (NULL or ""
 * matches any); a reference more when `ref`.  Under mu. */
static attn_model *lookup(attn_registry *r, const char *name,
                          const char *version, bool ref, int *slot) {
  int i = name ? slot_of(r, name, strlen(name)) : -1;
  if (slot) *slot = i;
  if (i < 0) return NULL;
  pthread_mutex_lock(&r->mu);
  attn_model *m = r->model[i];
  if (m && version && version[0] && strcmp(version, m->version) != 0) m = NULL;
  if (m && ref) atomic_fetch_add(&m->refs, 1);
  pthread_mutex_unlock(&r->mu);
  return m;
}

const attn_model *attn_registry_find(const attn_registry *r, const char *name,
                                     const char *version) {
  return r ? lookup((attn_registry *)r, name, version, false, NULL) : NULL;
}

const attn_model *attn_registry_get(attn_registry *r, const char *name,
                                    const char *version, int *slot) {
  if (slot) *slot = -1;
  return r ? lookup(r, name, version, true, slot) : NULL;
}

const attn_model *attn_registry_get_at(attn_registry *r, size_t i) {
  if (!r || i >= slots(r)) return NULL;
  pthread_mutex_lock(&r->mu);
  attn_model *m = r->model[i];
  if (m) atomic_fetch_add(&m->refs, 1);
  pthread_mutex_unlock(&r->mu);
  return m;
}

size_t attn_registry_count(const attn_registry *r) {
  return r ? slots(r) : 0;
}

const attn_model *attn_registry_at(const attn_registry *r, size_t i) {
  if (!r || i >= slots(r)) return NULL;
  pthread_mutex_lock((pthread_mutex_t *)&r->mu);
  const attn_model *m = r->model[i];
  pthread_mutex_unlock((pthread_mutex_t *)&r->mu);
  return m;
}

const char *attn_registry_slot_name(const attn_registry *r, size_t i) {
  return r && i < slots(r) ? r->name[i] : NULL;
}

int attn_registry_slot(const attn_registry *r, const char *name, size_t len) {
  return r ? slot_of(r, name, len) : -1;
}

/* ---- the repository: load, unload, reload, index ------------------------ */

/* The same message into *d and *detail (may be NULL): one naming no file. */
#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static attn_status
both(attn_diag *d, attn_diag *detail, attn_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(d->msg, sizeof d->msg, fmt, ap);
  va_end(ap);
  if (detail) memcpy(detail->msg, d->msg, sizeof d->msg);
  return s;
}

/* The stem of path's file name ("x" of ".../x.json") into buf[cap]: the
 * index's name for a file whose "name" cannot be read. */
static const char *stem_of(const char *path, char *buf, size_t cap) {
  const char *slash = strrchr(path, '/'), *nm = slash ? slash + 1 : path;
  size_t len = strlen(nm);
  snprintf(buf, cap, "%.*s", (int)(len > 5 ? len - 5 : len), nm);
  return buf;
}

/* No file names model `name`: ATTN_ENOTFOUND, the folder's path in
 * *detail only. */
static attn_status not_found(const attn_registry *r, const char *name,
                             attn_diag *d, attn_diag *detail) {
  if (r->from && strcmp(name, r->from) == 0)
    return both(d, detail, ATTN_ENOTFOUND,
                "model '%s' is served as '%s' (model_name): load '%s'", name,
                r->to, r->to);
  if (!r->dir)
    return both(d, detail, ATTN_ENOTFOUND,
                "no models folder is configured: no file has \"name\": "
                "\"%s\"",
                name);
  attn_diag_set(detail, ATTN_ENOTFOUND,
                "no model file in the models directory (%s) has \"name\": "
                "\"%s\"",
                r->dir, name);
  return attn_diag_set(d, ATTN_ENOTFOUND,
                       "no model file in the models folder has \"name\": "
                       "\"%s\"",
                       name);
}

/* The model file of models_dir whose "name" is `name`: *path (malloc'd),
 * or ATTN_ENOTFOUND, or ATTN_EINVAL when two files name it.  When none
 * does and NAME.json has no "name" to read (not a regular file, not JSON),
 * that file's error.  *d names files by their labels, *detail by their
 * paths. */
static attn_status file_of(const attn_registry *r, const char *name,
                           char **path, attn_diag *d, attn_diag *detail) {
  char **paths, nm[ATTN_MODEL_MAX_NAME + 1], l1[LABEL_MAX], l2[LABEL_MAX];
  size_t n;
  attn_status unread = ATTN_OK; /* NAME.json's, when it has no name */
  attn_status s = list_json(r->dir, &paths, &n, d, detail);
  *path = NULL;
  for (size_t i = 0; i < n && s == ATTN_OK; i++) {
    const char *label = label_of(paths[i], l1);
    attn_diag why;
    attn_status f = file_name(r, paths[i], label, nm, sizeof nm, &why);
    if (f && !unread && strcmp(stem_of(paths[i], nm, sizeof nm), name) == 0) {
      unread = f;
      *d = why;
      attn__diag_unlabel(detail, &why, label, paths[i]);
    }
    if (f || strcmp(nm, name)) continue;
    if (*path) {
      attn_diag_set(detail, ATTN_EINVAL,
                    "model '%s' is named by two files: %s and %s", name, *path,
                    paths[i]);
      s = attn_diag_set(d, ATTN_EINVAL,
                        "model '%s' is named by two files: %s and %s", name,
                        label_of(*path, l2), label);
    } else if (!(*path = strdup(paths[i]))) {
      s = both(d, detail, ATTN_ENOMEM, "out of memory");
    }
  }
  free_list(paths, n);
  if (s == ATTN_OK && !*path)
    s = unread ? unread : not_found(r, name, d, detail);
  if (s) {
    free(*path);
    *path = NULL;
  }
  return s;
}

/* Loads the file at path over the model of its name; a failure leaves
 * what served serving and is kept as the slot's reason.  *d names the
 * file by its label, *detail by its path.  Under load_mu. */
static attn_status load_file(attn_registry *r, const char *path,
                             const char *want, attn_diag *d,
                             attn_diag *detail) {
  attn_model *m;
  attn_status s = make_resident(r, path, &m, d, detail);
  if (s == ATTN_OK) {
    char label[LABEL_MAX];
    label_of(path, label);
    if (want && strcmp(m->name, want) != 0)
      s = attn_diag_set(d, ATTN_EINVAL,
                        "%s: names model '%s' now, not '%s' (changed while "
                        "loading?)",
                        label, m->name, want);
    else if (is_builtin(m->name))
      s = attn_diag_set(d, ATTN_EINVAL,
                        "%s: model name '%s' is a built-in model", label,
                        m->name);
    else if ((s = install(r, m, d)) == ATTN_OK)
      return ATTN_OK;
    else
      m = NULL; /* install took it */
    attn_model_put(m);
    attn__diag_unlabel(detail, d, label, path);
  }
  int i = want ? slot_of(r, want, strlen(want)) : -1;
  if (i >= 0) {
    pthread_mutex_lock(&r->mu);
    set_reason(r, (size_t)i, d->msg);
    pthread_mutex_unlock(&r->mu);
  }
  return s;
}

attn_status attn_registry_load(attn_registry *r, const char *name, attn_diag *d,
                               attn_diag *detail) {
  if (is_builtin(name)) return ATTN_OK; /* always loaded */
  pthread_mutex_lock(&r->load_mu);
  char *path;
  attn_status s = file_of(r, name, &path, d, detail);
  if (s == ATTN_OK) {
    s = load_file(r, path, name, d, detail);
    free(path);
  }
  pthread_mutex_unlock(&r->load_mu);
  return s;
}

attn_status attn_registry_unload(attn_registry *r, const char *name,
                                 attn_diag *d) {
  if (is_builtin(name))
    return attn_diag_set(d, ATTN_EINVAL,
                         "model '%s' is built in and cannot be unloaded", name);
  pthread_mutex_lock(&r->load_mu);
  int i = slot_of(r, name, strlen(name));
  attn_model *old = NULL;
  if (i >= 0) {
    pthread_mutex_lock(&r->mu);
    old = r->model[i];
    r->model[i] = NULL;
    set_reason(r, (size_t)i, "unloaded");
    pthread_mutex_unlock(&r->mu);
  }
  pthread_mutex_unlock(&r->load_mu);
  attn_model_put(old); /* freed here unless a request still runs on it */
  if (i < 0)
    return attn_diag_set(d, ATTN_ENOTFOUND,
                         "unknown model '%s' (POST /v2/repository/index "
                         "lists them)",
                         name);
  return ATTN_OK;
}

attn_status attn_registry_reload(attn_registry *r, attn_reload_report report,
                                 void *arg, attn_diag *d) {
  pthread_mutex_lock(&r->load_mu);
  char **paths;
  size_t n;
  attn_diag unnamed; /* the client's form of each message: not reported */
  attn_status s = list_json(r->dir, &paths, &n, &unnamed, d);
  for (size_t i = 0; s == ATTN_OK && i < n; i++) {
    char nm[ATTN_MODEL_MAX_NAME + 1], label[LABEL_MAX];
    attn_diag e = {{0}};
    bool named = file_name(r, paths[i], label_of(paths[i], label), nm,
                           sizeof nm, &unnamed) == ATTN_OK;
    size_t j = 0; /* an earlier file of this pass with the same name */
    while (named && j < i && strcmp(paths[j], nm) != 0) j++;
    attn_status f =
        named && j < i
            ? attn_diag_set(&e, ATTN_EINVAL,
                            "%s: model name '%s' is already used by an "
                            "earlier file; not loaded",
                            paths[i], nm)
            : load_file(r, paths[i], named ? nm : NULL, &unnamed, &e);
    if (report) report(arg, named ? nm : "", paths[i], f, e.msg);
    /* paths[i] becomes the name it loaded, for the check above */
    if (named && f == ATTN_OK) {
      char *c = strdup(nm);
      if (c) {
        free(paths[i]);
        paths[i] = c;
      }
    }
  }
  /* a resident model whose file is gone goes too */
  for (size_t i = 0; s == ATTN_OK && i < slots(r); i++) {
    attn_model *m = r->model[i]; /* only load_mu's holder changes it */
    struct stat st;
    bool gone = m && m->kind == ATTN__MODEL_RESIDENT &&
                stat(m->res.path, &st) != 0 && errno == ENOENT;
    if (gone) {
      pthread_mutex_lock(&r->mu);
      r->model[i] = NULL;
      set_reason(r, i, "unloaded: its file was removed");
      pthread_mutex_unlock(&r->mu);
      if (report)
        report(arg, r->name[i], m->res.path, ATTN_OK, "file removed: unloaded");
      attn_model_put(m);
    }
  }
  free_list(paths, n);
  pthread_mutex_unlock(&r->load_mu);
  return s;
}

static attn_status index_add(attn_registry_entry **v, size_t *n, size_t *cap,
                             const char *name, const char *version, bool ready,
                             const char *reason, attn_diag *d) {
  if (*n == *cap) {
    size_t nc = *cap ? 2 * *cap : 16;
    attn_registry_entry *p = realloc(*v, nc * sizeof *p);
    if (!p) return attn_diag_set(d, ATTN_ENOMEM, "out of memory");
    *v = p;
    *cap = nc;
  }
  attn_registry_entry *e = &(*v)[(*n)++];
  memset(e, 0, sizeof *e);
  snprintf(e->name, sizeof e->name, "%s", name);
  snprintf(e->version, sizeof e->version, "%s", version ? version : "");
  snprintf(e->reason, sizeof e->reason, "%s", reason ? reason : "");
  e->ready = ready;
  return ATTN_OK;
}

attn_status attn_registry_index(attn_registry *r, attn_registry_entry **out,
                                size_t *count, attn_diag *d) {
  attn_registry_entry *v = NULL;
  size_t n = 0, cap = 0, ns = slots(r);
  attn_status s = ATTN_OK;
  for (size_t i = 0; i < ns && s == ATTN_OK; i++) {
    pthread_mutex_lock(&r->mu);
    const attn_model *m = r->model[i];
    s = index_add(&v, &n, &cap, r->name[i], m ? m->version : NULL, m != NULL,
                  m              ? NULL
                  : r->reason[i] ? r->reason[i]
                                 : "unloaded",
                  d);
    pthread_mutex_unlock(&r->mu);
  }
  /* the files' models never loaded */
  char **paths = NULL;
  size_t np = 0;
  if (s == ATTN_OK) s = list_json(r->dir, &paths, &np, d, NULL);
  for (size_t i = 0; i < np && s == ATTN_OK; i++) {
    char nm[ATTN_MODEL_MAX_NAME + 1], label[LABEL_MAX];
    attn_diag why;
    /* a file whose "name" cannot be read is listed by its own, with why */
    attn_status f =
        file_name(r, paths[i], label_of(paths[i], label), nm, sizeof nm, &why);
    if (f) stem_of(paths[i], nm, sizeof nm);
    if (slot_of(r, nm, strlen(nm)) >= 0) continue;
    bool dup = false;
    for (size_t j = ns; j < n; j++) dup |= strcmp(v[j].name, nm) == 0;
    if (!dup)
      s = index_add(&v, &n, &cap, nm, NULL, false, f ? why.msg : "not loaded",
                    d);
  }
  free_list(paths, np);
  if (s) {
    free(v);
    return s;
  }
  *out = v;
  *count = n;
  return ATTN_OK;
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
    case ATTN__MODEL_KV:
      info->kind = "kv_attention";
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
  if (m->kind == ATTN__MODEL_KV) {
    memset(resp, 0, sizeof *resp);
    return attn_diag_set(d, ATTN_EUNSUPPORTED,
                         "model '%s' runs on sessions, not on one request",
                         m->name);
  }
  return attn__model_run(m->kind,
                         m->kind == ATTN__MODEL_RESIDENT ? &m->res : NULL,
                         m->name, m->version, req, lim, x, resp, d);
}
