/* test_golden.c - the engine against golden vectors from PyTorch.
 *
 * DESIGN
 * tests/golden/make_golden.py (run once, with torch) writes one JSON file per
 * case; they are committed, so this test needs only cJSON.  Each file holds
 * fp32 inputs and parameters (PyTorch state_dict names, [out, in] weights)
 * and float64 golden outputs (see tests/golden/README.md).
 *
 *  - kind "mha": an attn_mha_problem whose projection weights are
 *    ATTN_W_OUT_IN views into the stored state_dict (wq, wk, wv are pointer
 *    offsets into in_proj_weight; biases likewise into in_proj_bias): no
 *    copies.
 *  - kind "sdpa": an attn_sdpa_problem on q/k/v [B,H,L,D] views.
 *  - kind "model_io": tests/golden/demo_model_io.json, checked by its own test
 *    against config/models/demo.safetensors.
 *
 * Each case runs through a table of variants: the reference kernel, the
 * materialised path (with and without weights), the streaming path (no
 * weights), the auto path, threads 1 and 2, small query/key tiles, and, where
 * they apply, key padding given as lengths, self-attention given as explicit
 * xk = xv = xq, causal given as an explicit mask, the case's causal, window
 * and ALiBi settings given as its torch_attn_mask, and sdpa on interleaved
 * [B,L,H,D] views.  The variants (causal_alignment, window, alibi_slopes,
 * softcap, rotary) go to attn_attend_opts as the file gives them.  Every
 * element must satisfy |ours - golden| <= 1e-5 * (1 + |golden|) and a failure
 * names the case, variant, tensor, element and both values.
 *
 * golden_suite() lists the directory once (sorted) into a static table; one
 * Check loop test per file.  Single-threaded apart from the engine's own
 * threads.  The directory is ATTN_TEST_DATA_DIR "/golden".
 */
#include <cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/engine.h"
#include "unit.h"

#define GOLDEN_DIR ATTN_TEST_DATA_DIR "/golden"
#define DEMO_WEIGHTS ATTN_TEST_DATA_DIR "/../config/models/demo.safetensors"
#define DEMO_CONFIG ATTN_TEST_DATA_DIR "/../config/models/demo.json"
#ifndef GOLDEN_TOL /* -DGOLDEN_TOL=1e-6 to measure the margin */
#define GOLDEN_TOL 1e-5
#endif
#define MIN_CASES 10
#define MAX_FILES 128
#define MAX_NAME 128
#define MAX_PRINT 8 /* mismatches printed per case and variant */

/* ---- file list ------------------------------------------------------------
 */

static char g_files[MAX_FILES][MAX_NAME];
static int g_nfiles;

static int cmp_names(const void *a, const void *b) {
  return strcmp((const char *)a, (const char *)b);
}

/* Fill g_files with the sorted *.json names in GOLDEN_DIR (at most
 * MAX_FILES); an unreadable directory leaves the table empty. */
static void list_golden_files(void) {
  g_nfiles = 0;
  DIR *dir = opendir(GOLDEN_DIR);
  if (!dir) return;
  struct dirent *de;
  while ((de = readdir(dir)) != NULL && g_nfiles < MAX_FILES) {
    size_t n = strlen(de->d_name);
    if (n <= 5 || n >= MAX_NAME || strcmp(de->d_name + n - 5, ".json") != 0)
      continue;
    memcpy(g_files[g_nfiles++], de->d_name, n + 1);
  }
  closedir(dir);
  qsort(g_files, (size_t)g_nfiles, sizeof g_files[0], cmp_names);
}

/* Whole file into a NUL-terminated malloc'd buffer; NULL on any error. */
static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  long n;
  if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 &&
      fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) != NULL) {
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
      free(buf);
      buf = NULL;
    } else {
      buf[n] = '\0';
      if (len) *len = (size_t)n;
    }
  }
  fclose(f);
  return buf;
}

static cJSON *load_json(const char *path) {
  char *text = slurp(path, NULL);
  if (!text) return NULL;
  cJSON *root = cJSON_Parse(text);
  free(text);
  return root;
}

/* ---- tensors from JSON ----------------------------------------------------
 */

/* {"shape": [...], "data": [...], "dtype"?: "bool"|"float"} as read.  Numbers
 * are kept as float (inputs) and double (golden outputs); booleans as uint8;
 * the strings "-inf", "inf", "nan" stand for the non-JSON values. */
typedef struct gtensor {
  int present, is_bool, rank;
  int64_t shape[4];
  size_t n;
  float *f;
  double *d;
  uint8_t *u;
} gtensor;

static void gtensor_free(gtensor *t) {
  free(t->f);
  free(t->d);
  free(t->u);
  memset(t, 0, sizeof *t);
}

/* Parse item `key` of obj into *t.  Absent key: returns 0 with
 * t->present = 0.  Malformed: returns -1 with a message in err. */
static int gtensor_parse(const cJSON *obj, const char *key, gtensor *t,
                         char *err, size_t errn) {
  memset(t, 0, sizeof *t);
  const cJSON *o = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!o || cJSON_IsNull(o)) return 0;
  const cJSON *shape = cJSON_GetObjectItemCaseSensitive(o, "shape");
  const cJSON *data = cJSON_GetObjectItemCaseSensitive(o, "data");
  const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(o, "dtype");
  if (!cJSON_IsArray(shape) || !cJSON_IsArray(data)) {
    snprintf(err, errn, "%s: needs \"shape\" and \"data\" arrays", key);
    return -1;
  }
  int rank = cJSON_GetArraySize(shape);
  if (rank < 1 || rank > 4) {
    snprintf(err, errn, "%s: rank %d not in 1..4", key, rank);
    return -1;
  }
  size_t n = 1;
  for (int i = 0; i < rank; i++) {
    const cJSON *s = cJSON_GetArrayItem(shape, i);
    if (!cJSON_IsNumber(s) || s->valuedouble < 1 || s->valuedouble > 4096) {
      snprintf(err, errn, "%s: bad shape[%d]", key, i);
      return -1;
    }
    t->shape[i] = (int64_t)s->valuedouble;
    n *= (size_t)t->shape[i];
  }
  if ((size_t)cJSON_GetArraySize(data) != n) {
    snprintf(err, errn, "%s: %d values for %zu elements", key,
             cJSON_GetArraySize(data), n);
    return -1;
  }
  t->rank = rank;
  t->n = n;
  t->is_bool = cJSON_IsString(dtype) && strcmp(dtype->valuestring, "bool") == 0;
  t->f = malloc(n * sizeof *t->f);
  t->d = malloc(n * sizeof *t->d);
  t->u = malloc(n);
  if (!t->f || !t->d || !t->u) {
    gtensor_free(t);
    snprintf(err, errn, "%s: out of memory", key);
    return -1;
  }
  size_t i = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, data) {
    double v;
    if (cJSON_IsNumber(e)) {
      v = e->valuedouble;
    } else if (cJSON_IsBool(e)) {
      v = cJSON_IsTrue(e) ? 1.0 : 0.0;
    } else if (cJSON_IsString(e) && strcmp(e->valuestring, "-inf") == 0) {
      v = -INFINITY;
    } else if (cJSON_IsString(e) && strcmp(e->valuestring, "inf") == 0) {
      v = INFINITY;
    } else if (cJSON_IsString(e) && strcmp(e->valuestring, "nan") == 0) {
      v = NAN;
    } else {
      gtensor_free(t);
      snprintf(err, errn, "%s: element %zu is not a number", key, i);
      return -1;
    }
    t->d[i] = v;
    t->f[i] = (float)v;
    t->u[i] = v != 0.0;
    i++;
  }
  t->present = 1;
  return 0;
}

/* 0 if t has exactly the given rank and dims; else -1 with a message. */
static int expect_shape(const gtensor *t, const char *what, char *err,
                        size_t errn, int rank, int64_t d0, int64_t d1,
                        int64_t d2, int64_t d3) {
  const int64_t want[4] = {d0, d1, d2, d3};
  int ok = t->present && t->rank == rank;
  for (int i = 0; ok && i < rank; i++) ok = t->shape[i] == want[i];
  if (!ok) {
    snprintf(err, errn,
             "%s: missing or shape is not the expected %d-d "
             "[%lld,%lld,%lld,%lld]",
             what, rank, (long long)d0, (long long)d1, (long long)d2,
             (long long)d3);
    return -1;
  }
  return 0;
}

static int64_t jint(const cJSON *o, const char *key, int64_t dflt) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) ? (int64_t)v->valuedouble : dflt;
}

static int jbool(const cJSON *o, const char *key) {
  return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, key));
}

/* ---- one golden case --------------------------------------------------------
 */

enum { KIND_MHA = 1, KIND_SDPA, KIND_MODEL_IO };

typedef struct golden {
  char name[MAX_NAME];
  int kind;
  int64_t B, H, Hkv, Lq, Lk, E, kdim, vdim, Dk, Dv;
  int bias, self_attn, causal, need_w, avg, has_scale;
  float scale;
  /* the variants (engine.h, attn_attend_opts) */
  int top_left, has_window, alibi_std, rotary, rot_inter, has_qoff;
  int64_t wl, wr, rot_dims, qoff;
  double rot_base;
  float softcap;
  gtensor slopes;                                  /* alibi_slopes [H] */
  gtensor q, k, v;                                 /* inputs */
  gtensor in_w, in_b, q_w, k_w, v_w, out_w, out_b; /* mha state_dict */
  gtensor kpm, mask, torch_mask;
  gtensor out, w; /* golden */
} golden;

static void golden_free(golden *g) {
  gtensor *all[] = {&g->q,          &g->k,     &g->v,   &g->in_w,
                    &g->in_b,       &g->q_w,   &g->k_w, &g->v_w,
                    &g->out_w,      &g->out_b, &g->kpm, &g->mask,
                    &g->torch_mask, &g->out,   &g->w,   &g->slopes};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) gtensor_free(all[i]);
}

static int kind_of(const cJSON *root) {
  const cJSON *k = cJSON_GetObjectItemCaseSensitive(root, "kind");
  if (!cJSON_IsString(k)) return 0;
  if (strcmp(k->valuestring, "mha") == 0) return KIND_MHA;
  if (strcmp(k->valuestring, "sdpa") == 0) return KIND_SDPA;
  if (strcmp(k->valuestring, "model_io") == 0) return KIND_MODEL_IO;
  return 0;
}

/* Masks: attn_mask [Lq,Lk] or [mb,mh,Lq,Lk]; key_padding_mask [B,Lk]. */
static int check_masks(golden *g, char *err, size_t errn) {
  if (g->kpm.present && expect_shape(&g->kpm, "key_padding_mask", err, errn, 2,
                                     g->B, g->Lk, 0, 0))
    return -1;
  for (int i = 0; i < 2; i++) {
    gtensor *m = i ? &g->torch_mask : &g->mask;
    if (!m->present) continue;
    int ok = (m->rank == 2 && m->shape[0] == g->Lq && m->shape[1] == g->Lk) ||
             (m->rank == 4 && (m->shape[0] == 1 || m->shape[0] == g->B) &&
              (m->shape[1] == 1 || m->shape[1] == g->H) &&
              m->shape[2] == g->Lq && m->shape[3] == g->Lk);
    if (!ok) {
      snprintf(err, errn, "%s: shape is not [Lq,Lk] or [mb,mh,Lq,Lk]",
               i ? "torch_attn_mask" : "attn_mask");
      return -1;
    }
  }
  return 0;
}

/* The variants' fields: causal_alignment, window [left, right],
 * alibi_standard, softcap, rotary {base, dims, interleaved, query_offset?}
 * (alibi_slopes is a tensor, parsed with the others). */
static int load_variants(const cJSON *root, golden *g, char *err, size_t errn) {
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, "causal_alignment");
  const cJSON *w = cJSON_GetObjectItemCaseSensitive(root, "window");
  const cJSON *r = cJSON_GetObjectItemCaseSensitive(root, "rotary");
  const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "softcap");
  if (a &&
      !(cJSON_IsString(a) && (strcmp(a->valuestring, "top_left") == 0 ||
                              strcmp(a->valuestring, "bottom_right") == 0))) {
    snprintf(err, errn,
             "causal_alignment: not \"top_left\" or "
             "\"bottom_right\"");
    return -1;
  }
  g->top_left = a && strcmp(a->valuestring, "top_left") == 0;
  if (w) {
    if (cJSON_GetArraySize(w) != 2 ||
        !cJSON_IsNumber(cJSON_GetArrayItem(w, 0)) ||
        !cJSON_IsNumber(cJSON_GetArrayItem(w, 1))) {
      snprintf(err, errn, "window: not [left, right]");
      return -1;
    }
    g->has_window = 1;
    g->wl = (int64_t)cJSON_GetArrayItem(w, 0)->valuedouble;
    g->wr = (int64_t)cJSON_GetArrayItem(w, 1)->valuedouble;
  }
  g->alibi_std = jbool(root, "alibi_standard");
  g->softcap = cJSON_IsNumber(c) ? (float)c->valuedouble : 0.0f;
  if (r) {
    const cJSON *qo = cJSON_GetObjectItemCaseSensitive(r, "query_offset");
    const cJSON *base = cJSON_GetObjectItemCaseSensitive(r, "base");
    g->rotary = 1;
    g->rot_dims = jint(r, "dims", 0);
    g->rot_inter = jbool(r, "interleaved");
    g->rot_base = cJSON_IsNumber(base) ? base->valuedouble : 0.0;
    g->has_qoff = cJSON_IsNumber(qo);
    g->qoff = g->has_qoff ? (int64_t)qo->valuedouble : 0;
  }
  return 0;
}

/* Load one golden file.  Returns 0 and fills *g (free with golden_free), or
 * -1 with a message in err and *g holding nothing. */
static int golden_load(const cJSON *root, golden *g, char *err, size_t errn) {
  memset(g, 0, sizeof *g);
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(root, "name");
  snprintf(g->name, sizeof g->name, "%s",
           cJSON_IsString(name) ? name->valuestring : "?");
  g->kind = kind_of(root);
  g->B = jint(root, "batch", 0);
  g->H = jint(root, "num_heads", 0);
  g->Lq = jint(root, "lq", 0);
  g->Lk = jint(root, "lk", 0);
  g->causal = jbool(root, "causal");
  g->need_w = jbool(root, "need_weights");
  g->avg = jbool(root, "average_attn_weights");
  const cJSON *sd = cJSON_GetObjectItemCaseSensitive(root, "state_dict");
  int rc = 0;
#define PARSE(obj, key, dst) \
  if (rc == 0) rc = gtensor_parse(obj, key, dst, err, errn)
  PARSE(root, "key_padding_mask", &g->kpm);
  PARSE(root, "attn_mask", &g->mask);
  PARSE(root, "torch_attn_mask", &g->torch_mask);
  PARSE(root, "attn_output", &g->out);
  PARSE(root, "attn_weights", &g->w);
  PARSE(root, "alibi_slopes", &g->slopes);
  if (rc == 0) rc = load_variants(root, g, err, errn);
  if (g->kind == KIND_MHA) {
    g->E = jint(root, "embed_dim", 0);
    g->kdim = jint(root, "kdim", g->E);
    g->vdim = jint(root, "vdim", g->E);
    g->Hkv = g->H;
    g->bias = jbool(root, "bias");
    g->self_attn = jbool(root, "self_attention");
    PARSE(root, "query", &g->q);
    PARSE(root, "key", &g->k);
    PARSE(root, "value", &g->v);
    PARSE(sd, "in_proj_weight", &g->in_w);
    PARSE(sd, "q_proj_weight", &g->q_w);
    PARSE(sd, "k_proj_weight", &g->k_w);
    PARSE(sd, "v_proj_weight", &g->v_w);
    PARSE(sd, "in_proj_bias", &g->in_b);
    PARSE(sd, "out_proj.weight", &g->out_w);
    PARSE(sd, "out_proj.bias", &g->out_b);
  } else if (g->kind == KIND_SDPA) {
    g->Hkv = jint(root, "num_kv_heads", g->H);
    g->Dk = jint(root, "dk", 0);
    g->Dv = jint(root, "dv", 0);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(root, "scale");
    g->has_scale = cJSON_IsNumber(s);
    g->scale = g->has_scale ? (float)s->valuedouble : 0.0f;
    PARSE(root, "q", &g->q);
    PARSE(root, "k", &g->k);
    PARSE(root, "v", &g->v);
  } else if (rc == 0) {
    snprintf(err, errn, "unknown \"kind\"");
    rc = -1;
  }
#undef PARSE
  if (rc == 0 && (g->B < 1 || g->H < 1 || g->Lq < 1 || g->Lk < 1)) {
    snprintf(err, errn, "batch, num_heads, lq, lk must be >= 1");
    rc = -1;
  }
  if (rc == 0 && g->need_w != g->w.present) {
    snprintf(err, errn, "need_weights and attn_weights disagree");
    rc = -1;
  }
  if (rc == 0) rc = check_masks(g, err, errn);
  if (rc == 0 && g->slopes.present)
    rc = expect_shape(&g->slopes, "alibi_slopes", err, errn, 1, g->H, 0, 0, 0);
  const int64_t B = g->B, H = g->H, Lq = g->Lq, Lk = g->Lk, E = g->E;
  if (rc == 0 && g->need_w)
    rc = g->avg
             ? expect_shape(&g->w, "attn_weights", err, errn, 3, B, Lq, Lk, 0)
             : expect_shape(&g->w, "attn_weights", err, errn, 4, B, H, Lq, Lk);
  if (rc == 0 && g->kind == KIND_MHA) {
    if (g->self_attn) g->Lk = Lq;
    rc = expect_shape(&g->q, "query", err, errn, 3, B, Lq, E, 0);
    if (rc == 0 && !g->self_attn)
      rc = expect_shape(&g->k, "key", err, errn, 3, B, Lk, g->kdim, 0);
    if (rc == 0 && !g->self_attn)
      rc = expect_shape(&g->v, "value", err, errn, 3, B, Lk, g->vdim, 0);
    if (rc == 0 && g->in_w.present)
      rc = expect_shape(&g->in_w, "in_proj_weight", err, errn, 2, 3 * E, E, 0,
                        0);
    if (rc == 0 && !g->in_w.present)
      rc = expect_shape(&g->q_w, "q_proj_weight", err, errn, 2, E, E, 0, 0);
    if (rc == 0 && !g->in_w.present)
      rc = expect_shape(&g->k_w, "k_proj_weight", err, errn, 2, E, g->kdim, 0,
                        0);
    if (rc == 0 && !g->in_w.present)
      rc = expect_shape(&g->v_w, "v_proj_weight", err, errn, 2, E, g->vdim, 0,
                        0);
    if (rc == 0)
      rc = expect_shape(&g->out_w, "out_proj.weight", err, errn, 2, E, E, 0, 0);
    if (rc == 0 && g->bias)
      rc = expect_shape(&g->in_b, "in_proj_bias", err, errn, 1, 3 * E, 0, 0, 0);
    if (rc == 0 && g->bias)
      rc = expect_shape(&g->out_b, "out_proj.bias", err, errn, 1, E, 0, 0, 0);
    if (rc == 0 && !g->bias && (g->in_b.present || g->out_b.present)) {
      snprintf(err, errn, "bias is false but the state_dict has biases");
      rc = -1;
    }
    if (rc == 0)
      rc = expect_shape(&g->out, "attn_output", err, errn, 3, B, Lq, E, 0);
  } else if (rc == 0) {
    rc = expect_shape(&g->q, "q", err, errn, 4, B, H, Lq, g->Dk);
    if (rc == 0)
      rc = expect_shape(&g->k, "k", err, errn, 4, B, g->Hkv, Lk, g->Dk);
    if (rc == 0)
      rc = expect_shape(&g->v, "v", err, errn, 4, B, g->Hkv, Lk, g->Dv);
    if (rc == 0)
      rc = expect_shape(&g->out, "attn_output", err, errn, 4, B, H, Lq, g->Dv);
  }
  if (rc != 0) golden_free(g);
  return rc;
}

/* ---- variants
 * ---------------------------------------------------------------- */

typedef struct variant {
  const char *label;
  int ref; /* attn_ref_mha / attn_ref_sdpa instead of the fast call */
  attn_path path;
  int threads, tile_q, tile_k;
  int weights;       /* ask for the case's weights (if it has any) */
  int kpm_lengths;   /* key_padding_mask as ATTN_KPM_LENGTHS */
  int explicit_self; /* mha self-attention as xk = xv = xq */
  int causal_mask;   /* causal as an explicit bool mask, flag off */
  int interleaved;   /* sdpa on [B,L,H,D] views */
  int torch_mask;    /* torch_attn_mask as the attn_mask, in place of the
                        causal, window and ALiBi settings */
} variant;

#define MAT ATTN_PATH_MATERIALISED
#define STR ATTN_PATH_STREAMING
#define AUT ATTN_PATH_AUTO
static const variant variants[] = {
    {"reference", 1, AUT, 0, 0, 0, 1, 0, 0, 0, 0, 0},
    {"materialised t1", 0, MAT, 1, 0, 0, 1, 0, 0, 0, 0, 0},
    {"materialised t2 tq1", 0, MAT, 2, 1, 0, 1, 0, 0, 0, 0, 0},
    {"materialised t1 no-weights", 0, MAT, 1, 0, 0, 0, 0, 0, 0, 0, 0},
    {"auto t2", 0, AUT, 2, 0, 0, 1, 0, 0, 0, 0, 0},
    {"auto t1 no-weights", 0, AUT, 1, 0, 0, 0, 0, 0, 0, 0, 0},
    {"streaming t1", 0, STR, 1, 0, 0, 0, 0, 0, 0, 0, 0},
    {"streaming t2 tq1 tk2", 0, STR, 2, 1, 2, 0, 0, 0, 0, 0, 0},
    {"streaming t2 tk3", 0, STR, 2, 0, 3, 0, 0, 0, 0, 0, 0},
    {"materialised t2 kpm-lengths", 0, MAT, 2, 0, 0, 1, 1, 0, 0, 0, 0},
    {"streaming t1 tk2 kpm-lengths", 0, STR, 1, 0, 2, 0, 1, 0, 0, 0, 0},
    {"materialised t1 explicit-self", 0, MAT, 1, 0, 0, 1, 0, 1, 0, 0, 0},
    {"streaming t2 tk2 explicit-self", 0, STR, 2, 0, 2, 0, 0, 1, 0, 0, 0},
    {"materialised t1 causal-as-mask", 0, MAT, 1, 0, 0, 1, 0, 0, 1, 0, 0},
    {"streaming t2 tk2 causal-as-mask", 0, STR, 2, 0, 2, 0, 0, 0, 1, 0, 0},
    {"materialised t2 interleaved", 0, MAT, 2, 0, 0, 1, 0, 0, 0, 1, 0},
    {"streaming t2 tq1 tk2 interleaved", 0, STR, 2, 1, 2, 0, 0, 0, 0, 1, 0},
    {"materialised t1 torch-mask", 0, MAT, 1, 0, 0, 1, 0, 0, 0, 0, 1},
    {"streaming t2 tk2 torch-mask", 0, STR, 2, 0, 2, 0, 0, 0, 0, 0, 1},
};
#undef MAT
#undef STR
#undef AUT
#define NVARIANTS (sizeof variants / sizeof variants[0])

/* Key lengths if every key_padding_mask row is keys-then-padding; else 0. */
static int kpm_as_lengths(const golden *g, int64_t *len) {
  for (int64_t b = 0; b < g->B; b++) {
    const uint8_t *row = g->kpm.u + b * g->Lk;
    int64_t n = 0;
    while (n < g->Lk && !row[n]) n++;
    for (int64_t j = n; j < g->Lk; j++)
      if (!row[j]) return 0;
    len[b] = n;
  }
  return 1;
}

/* ---- comparison
 * ---------------------------------------------------------------- */

typedef struct report {
  int nbad;
  char first[600];
} report;

static void format_index(char *buf, size_t n, const gtensor *t, size_t i) {
  int64_t idx[4];
  size_t r = i;
  for (int a = t->rank - 1; a >= 0; a--) {
    idx[a] = (int64_t)(r % (size_t)t->shape[a]);
    r /= (size_t)t->shape[a];
  }
  size_t off = (size_t)snprintf(buf, n, "[");
  for (int a = 0; a < t->rank && off < n; a++)
    off += (size_t)snprintf(buf + off, n - off, "%s%lld", a ? "," : "",
                            (long long)idx[a]);
  if (off < n) snprintf(buf + off, n - off, "]");
}

/* Compare got (float or double, contiguous, same shape as want) with the
 * golden values; record mismatches in r and print the first few. */
static void compare(report *r, const golden *g, const variant *v,
                    const char *what, const gtensor *want, const float *gotf,
                    const double *gotd) {
  int printed = 0;
  for (size_t i = 0; i < want->n; i++) {
    double t = want->d[i], o = gotf ? (double)gotf[i] : gotd[i];
    double tol = GOLDEN_TOL * (1.0 + fabs(t));
    if (fabs(o - t) <= tol) continue; /* false for NaN */
    char at[64], msg[600];
    format_index(at, sizeof at, want, i);
    snprintf(msg, sizeof msg,
             "%s [%s] %s%s (flat %zu): ours %.9g, torch %.12g, |diff| %.3g > "
             "tol %.3g",
             g->name, v->label, what, at, i, o, t, fabs(o - t), tol);
    if (r->nbad == 0) snprintf(r->first, sizeof r->first, "%s", msg);
    if (printed++ < MAX_PRINT) fprintf(stderr, "golden: %s\n", msg);
    r->nbad++;
  }
}

static void fail_status(report *r, const golden *g, const variant *v,
                        attn_status s, const attn_diag *d) {
  char msg[600];
  snprintf(msg, sizeof msg, "%s [%s]: status %s (%s): %s", g->name, v->label,
           attn_status_name(s), attn_strerror(s), d->msg);
  fprintf(stderr, "golden: %s\n", msg);
  if (r->nbad == 0) snprintf(r->first, sizeof r->first, "%s", msg);
  r->nbad++;
}

static float *alloc_filled(size_t n) {
  float *p = malloc((n ? n : 1) * sizeof *p);
  for (size_t i = 0; p && i < n; i++) p[i] = 1e30f; /* untouched = mismatch */
  return p;
}

/* ---- running one variant ----------------------------------------------------
 */

/* Options common to mha and sdpa.  mask_buf receives an explicit causal
 * mask for causal-as-mask (Lq*Lk bytes); len receives key lengths. */
static void fill_opts(const golden *g, const variant *v, attn_attend_opts *o,
                      uint8_t *mask_buf, int64_t *len) {
  memset(o, 0, sizeof *o);
  int causal = g->top_left ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_BOTTOM_RIGHT;
  o->causal = g->causal && !v->causal_mask && !v->torch_mask ? causal : 0;
  if (!v->torch_mask) {
    o->has_window = g->has_window;
    o->window_left = g->wl;
    o->window_right = g->wr;
    o->alibi_slopes = g->slopes.present ? g->slopes.f : NULL;
  }
  o->softcap = g->softcap;
  o->rotary = (attn_rotary){.on = g->rotary,
                            .interleaved = g->rot_inter,
                            .dims = g->rot_dims,
                            .base = g->rot_base,
                            .has_query_offset = g->has_qoff,
                            .query_offset = g->qoff};
  if (v->torch_mask) {
    const gtensor *m = &g->torch_mask;
    o->mask.kind = m->is_bool ? ATTN_MASK_BOOL : ATTN_MASK_ADD;
    o->mask.data = m->is_bool ? (const void *)m->u : (const void *)m->f;
    o->mask.mb = m->rank == 4 ? m->shape[0] : 1;
    o->mask.mh = m->rank == 4 ? m->shape[1] : 1;
  } else if (g->causal && v->causal_mask) {
    for (int64_t i = 0; i < g->Lq; i++)
      for (int64_t j = 0; j < g->Lk; j++)
        mask_buf[i * g->Lk + j] = j > i + (g->top_left ? 0 : g->Lk - g->Lq);
    o->mask.kind = ATTN_MASK_BOOL;
    o->mask.data = mask_buf;
    o->mask.mb = o->mask.mh = 1;
  } else if (g->mask.present) {
    o->mask.kind = g->mask.is_bool ? ATTN_MASK_BOOL : ATTN_MASK_ADD;
    o->mask.data =
        g->mask.is_bool ? (const void *)g->mask.u : (const void *)g->mask.f;
    o->mask.mb = g->mask.rank == 4 ? g->mask.shape[0] : 1;
    o->mask.mh = g->mask.rank == 4 ? g->mask.shape[1] : 1;
  }
  if (g->kpm.present && v->kpm_lengths) {
    o->kpm.kind = ATTN_KPM_LENGTHS;
    o->kpm.lengths = len;
  } else if (g->kpm.present) {
    o->kpm.kind = ATTN_KPM_BOOL;
    o->kpm.pad = g->kpm.u;
  }
  o->weights = (g->need_w && v->weights)
                   ? (g->avg ? ATTN_WEIGHTS_MEAN : ATTN_WEIGHTS_PER_HEAD)
                   : ATTN_WEIGHTS_NONE;
  o->has_scale = g->has_scale;
  o->scale = g->scale;
}

static void run_mha(const golden *g, const variant *v,
                    const attn_attend_opts *o, report *r) {
  const int64_t E = g->E;
  attn_mha_problem p;
  memset(&p, 0, sizeof p);
  p.B = g->B;
  p.Lq = g->Lq;
  p.Lk = g->Lk;
  p.E = E;
  p.H = g->H;
  p.Hkv = g->H;
  p.kdim = g->kdim;
  p.vdim = g->vdim;
  p.xq = g->q.f;
  if (!g->self_attn) {
    p.xk = g->k.f;
    p.xv = g->v.f;
  } else if (v->explicit_self) {
    p.xk = p.xv = g->q.f;
  }
  if (g->in_w.present) { /* views into PyTorch's packed [3E, E] */
    p.wq = (attn_weight){g->in_w.f, ATTN_W_OUT_IN, E, NULL};
    p.wk = (attn_weight){g->in_w.f + E * E, ATTN_W_OUT_IN, E, NULL};
    p.wv = (attn_weight){g->in_w.f + 2 * E * E, ATTN_W_OUT_IN, E, NULL};
  } else {
    p.wq = (attn_weight){g->q_w.f, ATTN_W_OUT_IN, E, NULL};
    p.wk = (attn_weight){g->k_w.f, ATTN_W_OUT_IN, g->kdim, NULL};
    p.wv = (attn_weight){g->v_w.f, ATTN_W_OUT_IN, g->vdim, NULL};
  }
  p.wo = (attn_weight){g->out_w.f, ATTN_W_OUT_IN, 0, NULL};
  if (g->bias) {
    p.bq = g->in_b.f;
    p.bk = g->in_b.f + E;
    p.bv = g->in_b.f + 2 * E;
    p.bo = g->out_b.f;
  }
  p.o = *o;
  const size_t nout = (size_t)(g->B * g->Lq * E);
  const size_t nw = o->weights == ATTN_WEIGHTS_NONE ? 0 : g->w.n;
  attn_diag d = {{0}};
  attn_status s;
  if (v->ref) {
    double *out = malloc(nout * sizeof *out);
    double *w = nw ? malloc(nw * sizeof *w) : NULL;
    ck_assert(out && (w || !nw));
    s = attn_ref_mha(&p, out, w, &d);
    if (s != ATTN_OK) {
      fail_status(r, g, v, s, &d);
    } else {
      compare(r, g, v, "attn_output", &g->out, NULL, out);
      if (nw) compare(r, g, v, "attn_weights", &g->w, NULL, w);
    }
    free(out);
    free(w);
    return;
  }
  attn_exec x = {.threads = v->threads,
                 .path = v->path,
                 .tile_q = v->tile_q,
                 .tile_k = v->tile_k};
  float *out = alloc_filled(nout);
  float *w = nw ? alloc_filled(nw) : NULL;
  ck_assert(out && (w || !nw));
  s = attn_mha(&p, &x, out, w, &d);
  if (s != ATTN_OK) {
    fail_status(r, g, v, s, &d);
  } else {
    compare(r, g, v, "attn_output", &g->out, out, NULL);
    if (nw) compare(r, g, v, "attn_weights", &g->w, w, NULL);
  }
  free(out);
  free(w);
}

/* Copy contiguous [B,H,L,D] src into [B,L,H,D] dst, or back (to_bhld). */
static void permute(const golden *g, int64_t Hn, int64_t L, int64_t D,
                    const float *src, float *dst, int to_bhld) {
  for (int64_t b = 0; b < g->B; b++)
    for (int64_t h = 0; h < Hn; h++)
      for (int64_t i = 0; i < L; i++)
        for (int64_t e = 0; e < D; e++) {
          int64_t bhld = ((b * Hn + h) * L + i) * D + e;
          int64_t blhd = ((b * L + i) * Hn + h) * D + e;
          if (to_bhld)
            dst[bhld] = src[blhd];
          else
            dst[blhd] = src[bhld];
        }
}

static attn_view view_bhld(const float *p, int64_t Hn, int64_t L, int64_t D) {
  return (attn_view){p, Hn * L * D, L * D, D};
}

static attn_view view_blhd(const float *p, int64_t Hn, int64_t L, int64_t D) {
  return (attn_view){p, L * Hn * D, D, Hn * D};
}

static void run_sdpa(const golden *g, const variant *v,
                     const attn_attend_opts *o, report *r) {
  const int64_t B = g->B, H = g->H, Hkv = g->Hkv, Lq = g->Lq, Lk = g->Lk;
  const int64_t Dk = g->Dk, Dv = g->Dv;
  attn_sdpa_problem p;
  memset(&p, 0, sizeof p);
  p.B = B;
  p.H = H;
  p.Hkv = Hkv;
  p.Lq = Lq;
  p.Lk = Lk;
  p.Dk = Dk;
  p.Dv = Dv;
  p.o = *o;
  const size_t nout = (size_t)(B * H * Lq * Dv);
  const size_t nw = o->weights == ATTN_WEIGHTS_NONE ? 0 : g->w.n;
  float *qi = NULL, *ki = NULL, *vi = NULL;
  if (v->interleaved) {
    qi = malloc(g->q.n * sizeof *qi);
    ki = malloc(g->k.n * sizeof *ki);
    vi = malloc(g->v.n * sizeof *vi);
    ck_assert(qi && ki && vi);
    permute(g, H, Lq, Dk, g->q.f, qi, 0);
    permute(g, Hkv, Lk, Dk, g->k.f, ki, 0);
    permute(g, Hkv, Lk, Dv, g->v.f, vi, 0);
    p.q = view_blhd(qi, H, Lq, Dk);
    p.k = view_blhd(ki, Hkv, Lk, Dk);
    p.v = view_blhd(vi, Hkv, Lk, Dv);
  } else {
    p.q = view_bhld(g->q.f, H, Lq, Dk);
    p.k = view_bhld(g->k.f, Hkv, Lk, Dk);
    p.v = view_bhld(g->v.f, Hkv, Lk, Dv);
  }
  attn_diag d = {{0}};
  attn_status s;
  if (v->ref) {
    double *out = malloc(nout * sizeof *out);
    double *w = nw ? malloc(nw * sizeof *w) : NULL;
    ck_assert(out && (w || !nw));
    s = attn_ref_sdpa(&p, out, w, &d);
    if (s != ATTN_OK) {
      fail_status(r, g, v, s, &d);
    } else {
      compare(r, g, v, "attn_output", &g->out, NULL, out);
      if (nw) compare(r, g, v, "attn_weights", &g->w, NULL, w);
    }
    free(out);
    free(w);
  } else {
    attn_exec x = {.threads = v->threads,
                   .path = v->path,
                   .tile_q = v->tile_q,
                   .tile_k = v->tile_k};
    float *out = alloc_filled(nout);
    float *w = nw ? alloc_filled(nw) : NULL;
    ck_assert(out && (w || !nw));
    attn_mview mv;
    if (v->interleaved)
      mv = (attn_mview){out, Lq * H * Dv, Dv, H * Dv};
    else
      mv = (attn_mview){out, H * Lq * Dv, Lq * Dv, Dv};
    s = attn_sdpa(&p, &x, mv, w, &d);
    if (s != ATTN_OK) {
      fail_status(r, g, v, s, &d);
    } else {
      float *cmp = out;
      float *tmp = NULL;
      if (v->interleaved) {
        tmp = malloc(nout * sizeof *tmp);
        ck_assert(tmp != NULL);
        permute(g, H, Lq, Dv, out, tmp, 1);
        cmp = tmp;
      }
      compare(r, g, v, "attn_output", &g->out, cmp, NULL);
      if (nw) compare(r, g, v, "attn_weights", &g->w, w, NULL);
      free(tmp);
    }
    free(out);
    free(w);
  }
  free(qi);
  free(ki);
  free(vi);
}

/* Does variant v say something about case g?  (Skip those that don't.) */
static int variant_applies(const golden *g, const variant *v, int lengths_ok) {
  if (v->kpm_lengths && !(g->kpm.present && lengths_ok)) return 0;
  if (v->explicit_self && !(g->kind == KIND_MHA && g->self_attn)) return 0;
  if (v->causal_mask && !(g->causal && !g->mask.present)) return 0;
  if (v->interleaved && g->kind != KIND_SDPA) return 0;
  if (v->torch_mask && !(g->torch_mask.present && !g->mask.present)) return 0;
  if (v->path == ATTN_PATH_STREAMING && v->weights) return 0;
  return 1;
}

/* Run every applicable variant of g; returns how many ran. */
static int run_case(const golden *g, report *r) {
  int64_t len[16];
  uint8_t *cmask = malloc((size_t)(g->Lq * g->Lk));
  ck_assert(cmask != NULL && g->B <= 16);
  int lengths_ok = g->kpm.present && kpm_as_lengths(g, len);
  int ran = 0;
  for (size_t i = 0; i < NVARIANTS; i++) {
    const variant *v = &variants[i];
    if (!variant_applies(g, v, lengths_ok)) continue;
    attn_attend_opts o;
    fill_opts(g, v, &o, cmask, len);
    if (g->kind == KIND_MHA)
      run_mha(g, v, &o, r);
    else
      run_sdpa(g, v, &o, r);
    ran++;
  }
  free(cmask);
  return ran;
}

/* ---- tests ------------------------------------------------------------------
 */

START_TEST(test_golden_files_exist) {
  int ncases = 0;
  for (int i = 0; i < g_nfiles; i++) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", GOLDEN_DIR, g_files[i]);
    cJSON *root = load_json(path);
    ck_assert_msg(root != NULL, "%s: unreadable or not JSON", path);
    int k = kind_of(root);
    ck_assert_msg(k != 0, "%s: no known \"kind\"", path);
    if (k == KIND_MHA || k == KIND_SDPA) ncases++;
    cJSON_Delete(root);
  }
  ck_assert_msg(ncases >= MIN_CASES,
                "%d golden cases in %s (want >= %d); regenerate with "
                "/usr/bin/python3 tests/golden/make_golden.py",
                ncases, GOLDEN_DIR, MIN_CASES);
}
END_TEST

START_TEST(test_golden_case) {
  ck_assert_int_lt(_i, g_nfiles);
  char path[512], err[256] = "";
  snprintf(path, sizeof path, "%s/%s", GOLDEN_DIR, g_files[_i]);
  cJSON *root = load_json(path);
  ck_assert_msg(root != NULL, "%s: unreadable or not JSON", path);
  if (kind_of(root) == KIND_MODEL_IO) { /* test_demo_model_io */
    cJSON_Delete(root);
    return;
  }
  golden g;
  int rc = golden_load(root, &g, err, sizeof err);
  cJSON_Delete(root);
  ck_assert_msg(rc == 0, "%s: %s", path, err);
  report r = {0, ""};
  if (g.alibi_std) { /* the stored slopes are the reference get_slopes' */
    float *sl = malloc((size_t)g.H * sizeof *sl);
    ck_assert(sl && attn_alibi_slopes(g.H, sl, NULL) == ATTN_OK);
    for (int64_t h = 0; h < g.H; h++)
      ck_assert_msg(fabsf(sl[h] - g.slopes.f[h]) <= 1e-7f * g.slopes.f[h],
                    "%s: attn_alibi_slopes(%lld)[%lld] = %.9g, file %.9g", path,
                    (long long)g.H, (long long)h, sl[h], g.slopes.f[h]);
    free(sl);
  }
  int ran = run_case(&g, &r);
  golden_free(&g);
  ck_assert_msg(ran > 0, "%s: no variant ran", path);
  ck_assert_msg(r.nbad == 0, "%s: %d mismatches; first: %s", g_files[_i],
                r.nbad, r.first);
}
END_TEST

/* ---- demo model: config/models/demo.safetensors + demo_model_io.json ------
 */

/* Find a F32 tensor of the given shape in a safetensors image; NULL if absent
 * or malformed.  Data must be 4-byte aligned inside the (malloc'd) image. */
static const float *st_tensor(const char *img, size_t len, const cJSON *hdr,
                              size_t data_off, const char *name, int rank,
                              int64_t d0, int64_t d1) {
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(hdr, name);
  const cJSON *dt = cJSON_GetObjectItemCaseSensitive(t, "dtype");
  const cJSON *sh = cJSON_GetObjectItemCaseSensitive(t, "shape");
  const cJSON *off = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
  if (!cJSON_IsString(dt) || strcmp(dt->valuestring, "F32") != 0 ||
      cJSON_GetArraySize(sh) != rank || cJSON_GetArraySize(off) != 2)
    return NULL;
  const int64_t want[2] = {d0, d1};
  size_t n = 1;
  for (int i = 0; i < rank; i++) {
    if ((int64_t)cJSON_GetArrayItem(sh, i)->valuedouble != want[i]) return NULL;
    n *= (size_t)want[i];
  }
  size_t b = (size_t)cJSON_GetArrayItem(off, 0)->valuedouble;
  size_t e = (size_t)cJSON_GetArrayItem(off, 1)->valuedouble;
  if (e < b || e - b != n * 4 || data_off + e > len || (data_off + b) % 4)
    return NULL;
  return (const float *)(const void *)(img + data_off + b);
}

START_TEST(test_demo_model_io) {
  cJSON *cfg = load_json(DEMO_CONFIG);
  ck_assert_msg(cfg != NULL, "%s: unreadable or not JSON", DEMO_CONFIG);
  const int64_t E = jint(cfg, "embed_dim", 0), H = jint(cfg, "num_heads", 0);
  ck_assert_msg(E == 16 && H == 4 && jbool(cfg, "bias"),
                "demo.json: expected embed_dim 16, num_heads 4, bias true");
  cJSON_Delete(cfg);

  size_t len = 0;
  char *img = slurp(DEMO_WEIGHTS, &len);
  ck_assert_msg(img != NULL && len >= 8, "%s: unreadable", DEMO_WEIGHTS);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | (unsigned char)img[i];
  ck_assert_msg(hlen <= len - 8, "safetensors header length %llu too big",
                (unsigned long long)hlen);
  cJSON *hdr = cJSON_ParseWithLength(img + 8, (size_t)hlen);
  ck_assert_msg(hdr != NULL, "safetensors header is not JSON");
  size_t doff = 8 + (size_t)hlen;
  const float *w_in =
      st_tensor(img, len, hdr, doff, "in_proj_weight", 2, 3 * E, E);
  const float *b_in =
      st_tensor(img, len, hdr, doff, "in_proj_bias", 1, 3 * E, 0);
  const float *w_o = st_tensor(img, len, hdr, doff, "out_proj.weight", 2, E, E);
  const float *b_o = st_tensor(img, len, hdr, doff, "out_proj.bias", 1, E, 0);
  ck_assert_msg(w_in && b_in && w_o && b_o,
                "demo.safetensors: a tensor is missing or malformed");

  char path[512];
  snprintf(path, sizeof path, "%s/demo_model_io.json", GOLDEN_DIR);
  cJSON *io = load_json(path);
  ck_assert_msg(io != NULL, "%s: unreadable or not JSON", path);
  const cJSON *cases = cJSON_GetObjectItemCaseSensitive(io, "cases");
  ck_assert_msg(cJSON_GetArraySize(cases) >= 1, "%s: no cases", path);
  report r = {0, ""};
  const cJSON *c;
  cJSON_ArrayForEach(c, cases) {
    golden g;
    char err[256] = "";
    memset(&g, 0, sizeof g);
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(c, "name");
    snprintf(g.name, sizeof g.name, "demo_model_io/%s",
             cJSON_IsString(nm) ? nm->valuestring : "?");
    int rc = gtensor_parse(c, "query", &g.q, err, sizeof err);
    if (rc == 0)
      rc = gtensor_parse(c, "key_padding_mask", &g.kpm, err, sizeof err);
    if (rc == 0) rc = gtensor_parse(c, "attn_output", &g.out, err, sizeof err);
    if (rc == 0) rc = gtensor_parse(c, "attn_weights", &g.w, err, sizeof err);
    if (rc == 0)
      rc = expect_shape(&g.q, "query", err, sizeof err, 3, g.q.shape[0],
                        g.q.shape[1], E, 0);
    g.kind = KIND_MHA;
    g.B = g.q.shape[0];
    g.Lq = g.Lk = g.q.shape[1];
    g.E = g.kdim = g.vdim = E;
    g.H = g.Hkv = H;
    g.bias = g.self_attn = 1;
    g.need_w = jbool(c, "need_weights");
    g.avg = jbool(c, "average_attn_weights");
    if (rc == 0)
      rc = expect_shape(&g.out, "attn_output", err, sizeof err, 3, g.B, g.Lq, E,
                        0);
    if (rc == 0 && g.need_w)
      rc = g.avg ? expect_shape(&g.w, "attn_weights", err, sizeof err, 3, g.B,
                                g.Lq, g.Lk, 0)
                 : expect_shape(&g.w, "attn_weights", err, sizeof err, 4, g.B,
                                H, g.Lq, g.Lk);
    if (rc == 0 && g.kpm.present)
      rc = expect_shape(&g.kpm, "key_padding_mask", err, sizeof err, 2, g.B,
                        g.Lk, 0, 0);
    ck_assert_msg(rc == 0, "%s: %s", g.name, err);
    /* weights are views into the safetensors image: no copies */
    g.in_w = (gtensor){.present = 1, .f = (float *)(uintptr_t)w_in};
    g.in_b = (gtensor){.present = 1, .f = (float *)(uintptr_t)b_in};
    g.out_w = (gtensor){.present = 1, .f = (float *)(uintptr_t)w_o};
    g.out_b = (gtensor){.present = 1, .f = (float *)(uintptr_t)b_o};
    int ran = run_case(&g, &r);
    ck_assert_int_gt(ran, 0);
    g.in_w = g.in_b = g.out_w = g.out_b = (gtensor){0};
    golden_free(&g);
  }
  cJSON_Delete(io);
  cJSON_Delete(hdr);
  free(img);
  ck_assert_msg(r.nbad == 0, "demo model: %d mismatches; first: %s", r.nbad,
                r.first);
}
END_TEST

Suite *golden_suite(void) {
  list_golden_files();
  Suite *s = suite_create("golden");
  TCase *tc = tcase_create("torch");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_golden_files_exist);
  tcase_add_loop_test(tc, test_golden_case, 0, g_nfiles);
  tcase_add_test(tc, test_demo_model_io);
  suite_add_tcase(s, tc);
  return s;
}
