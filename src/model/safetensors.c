/* safetensors.c - validate and convert .safetensors files (safetensors.h);
 * F16 and BF16 tensors stay bfloat16 when the caller asks
 * (attn_safetensors_load_as, for bf16 models).
 *
 * Design: parsing is two passes over the header.  Pass one (read_entries,
 * read_entry) reads every entry into a small `raw` record (name, dtype,
 * shape, offsets) and checks it on its own; pass two (check_layout) sorts
 * the records by offset and checks that they tile the data section
 * exactly.  Only then is tensor memory allocated and the data converted,
 * so a malformed or oversize file costs no more than its header.
 * All size arithmetic is overflow-checked (attn_size_mul/add); JSON numbers
 * are accepted as offsets or dimensions only when they are integers below
 * 2^53, where doubles are exact.
 *
 * Files are opened without blocking and refused unread unless regular
 * (attn__read_file): a FIFO would wait for a writer, /dev/zero never end.
 * No message shows the file's bytes before they parse as a header (the
 * header length field is only compared): a "weights" path naming some
 * other file must not show it to the client who loads the model.
 *
 * Threads: none of its own; a set is immutable after parsing.
 */
#include "attn/safetensors.h"

#include "attn/file.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

struct attn_safetensors {
  attn_safetensors_entry *ents;
  char **names; /* owned storage behind ents[i].name */
  size_t n;
  char **meta_keys, **meta_vals;
  size_t n_meta;
};

/* One header entry before conversion. */
typedef struct raw {
  const char *name; /* points into the cJSON tree */
  attn_dtype dt;
  size_t dsize;
  int rank;
  int64_t shape[ATTN_MAX_RANK];
  size_t numel, begin, end;
} raw;

#define LBL(l) ((l) ? (l) : "safetensors")
#define EXACT_LIMIT 9007199254740992.0 /* 2^53 */

void attn_safetensors_destroy(attn_safetensors *st) {
  if (!st) return;
  for (size_t i = 0; i < st->n; i++) {
    free(st->names[i]);
    attn_tensor_free(&st->ents[i].tensor);
  }
  for (size_t i = 0; i < st->n_meta; i++) {
    free(st->meta_keys[i]);
    free(st->meta_vals[i]);
  }
  free(st->ents);
  free(st->names);
  free(st->meta_keys);
  free(st->meta_vals);
  free(st);
}

size_t attn_safetensors_count(const attn_safetensors *st) {
  return st ? st->n : 0;
}

const attn_safetensors_entry *attn_safetensors_at(const attn_safetensors *st,
                                                  size_t i) {
  return st && i < st->n ? &st->ents[i] : NULL;
}

const attn_safetensors_entry *attn_safetensors_find(const attn_safetensors *st,
                                                    const char *name) {
  if (!st || !name) return NULL;
  for (size_t i = 0; i < st->n; i++)
    if (strcmp(st->ents[i].name, name) == 0) return &st->ents[i];
  return NULL;
}

const char *attn_safetensors_metadata(const attn_safetensors *st,
                                      const char *key) {
  if (!st || !key) return NULL;
  for (size_t i = 0; i < st->n_meta; i++)
    if (strcmp(st->meta_keys[i], key) == 0) return st->meta_vals[i];
  return NULL;
}

/* A JSON number that is a non-negative integer below 2^53. */
static bool json_uint(const cJSON *j, uint64_t *v) {
  if (!cJSON_IsNumber(j)) return false;
  double x = j->valuedouble;
  if (!(x >= 0.0 && x < EXACT_LIMIT) || x != (double)(uint64_t)x) return false;
  *v = (uint64_t)x;
  return true;
}

/* Safetensors dtype names we convert; the others are known but refused. */
static attn_dtype st_dtype(const char *s, size_t *size, bool *known) {
  static const char *const other[] = {"BOOL",    "U8",      "I8",      "I16",
                                      "U16",     "I32",     "U32",     "I64",
                                      "U64",     "F8_E4M3", "F8_E5M2", "F4",
                                      "F6_E2M3", "F6_E3M2", "F8_E8M0", "C64"};
  *known = true;
  if (strcmp(s, "F32") == 0) return *size = 4, ATTN_DT_FP32;
  if (strcmp(s, "F16") == 0) return *size = 2, ATTN_DT_FP16;
  if (strcmp(s, "BF16") == 0) return *size = 2, ATTN_DT_BF16;
  if (strcmp(s, "F64") == 0) return *size = 8, ATTN_DT_FP64;
  *known = false;
  for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
    if (strcmp(s, other[i]) == 0) *known = true;
  return ATTN_DT_INVALID;
}

/* The members of entry `nm` (an object): dtype, shape and data_offsets,
 * each exactly once. */
static attn_status entry_keys(const cJSON *e, const char *label,
                              const cJSON **jd, const cJSON **js,
                              const cJSON **jo, attn_diag *d) {
  const char *nm = e->string;
  const cJSON *c;
  *jd = *js = *jo = NULL;
  cJSON_ArrayForEach(c, e) {
    const cJSON **slot = strcmp(c->string, "dtype") == 0          ? jd
                         : strcmp(c->string, "shape") == 0        ? js
                         : strcmp(c->string, "data_offsets") == 0 ? jo
                                                                  : NULL;
    if (!slot)
      return attn_diag_set(d, ATTN_EPARSE, "%s: tensor '%s': unknown key '%s'",
                           LBL(label), nm, c->string);
    if (*slot)
      return attn_diag_set(d, ATTN_EPARSE,
                           "%s: tensor '%s': key '%s' given twice", LBL(label),
                           nm, c->string);
    *slot = c;
  }
  if (!*jd || !*js || !*jo)
    return attn_diag_set(d, ATTN_EPARSE, "%s: tensor '%s': missing '%s'",
                         LBL(label), nm,
                         !*jd   ? "dtype"
                         : !*js ? "shape"
                                : "data_offsets");
  return ATTN_OK;
}

/* r->dt and r->dsize from "dtype". */
static attn_status entry_dtype(const cJSON *jd, const char *label, raw *r,
                               attn_diag *d) {
  bool known;
  if (!cJSON_IsString(jd))
    return attn_diag_set(d, ATTN_EPARSE,
                         "%s: tensor '%s': dtype is not a string", LBL(label),
                         r->name);
  r->dt = st_dtype(jd->valuestring, &r->dsize, &known);
  if (r->dt == ATTN_DT_INVALID)
    return attn_diag_set(d, known ? ATTN_EUNSUPPORTED : ATTN_EPARSE,
                         "%s: tensor '%s': dtype '%.32s' %s (F32, F16, BF16 "
                         "or F64)",
                         LBL(label), r->name, jd->valuestring,
                         known ? "is not supported" : "is unknown");
  return ATTN_OK;
}

/* r->rank, r->shape and r->numel (overflow-checked) from "shape". */
static attn_status entry_shape(const cJSON *js, const char *label, raw *r,
                               attn_diag *d) {
  const char *nm = r->name;
  const cJSON *c;
  if (!cJSON_IsArray(js))
    return attn_diag_set(d, ATTN_EPARSE,
                         "%s: tensor '%s': shape is not an array", LBL(label),
                         nm);
  int rank = cJSON_GetArraySize(js);
  if (rank > ATTN_MAX_RANK)
    return attn_diag_set(d, ATTN_EPARSE, "%s: tensor '%s': rank %d exceeds %d",
                         LBL(label), nm, rank, ATTN_MAX_RANK);
  r->rank = rank;
  r->numel = 1;
  int i = 0;
  cJSON_ArrayForEach(c, js) {
    uint64_t v;
    if (!json_uint(c, &v) || v > (uint64_t)INT64_MAX)
      return attn_diag_set(d, ATTN_EPARSE,
                           "%s: tensor '%s': shape[%d] is not a non-negative "
                           "integer",
                           LBL(label), nm, i);
    r->shape[i++] = (int64_t)v;
    if (v > SIZE_MAX || !attn_size_mul(r->numel, (size_t)v, &r->numel))
      return attn_diag_set(d, ATTN_EPARSE,
                           "%s: tensor '%s': element count overflows",
                           LBL(label), nm);
  }
  return ATTN_OK;
}

/* r->begin and r->end from "data_offsets": inside the data section
 * (data_len bytes) and exactly the bytes the dtype and shape need. */
static attn_status entry_offsets(const cJSON *jo, const char *label,
                                 size_t data_len, raw *r, attn_diag *d) {
  const char *nm = r->name;
  uint64_t b, en;
  if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2 ||
      !json_uint(cJSON_GetArrayItem(jo, 0), &b) ||
      !json_uint(cJSON_GetArrayItem(jo, 1), &en))
    return attn_diag_set(d, ATTN_EPARSE,
                         "%s: tensor '%s': data_offsets must be [begin, end] "
                         "non-negative integers",
                         LBL(label), nm);
  if (b > en || en > data_len)
    return attn_diag_set(d, ATTN_EPARSE,
                         "%s: tensor '%s': data_offsets [%llu, %llu] outside "
                         "the data section (%zu bytes)",
                         LBL(label), nm, (unsigned long long)b,
                         (unsigned long long)en, data_len);
  r->begin = (size_t)b;
  r->end = (size_t)en;
  size_t need;
  if (!attn_size_mul(r->numel, r->dsize, &need) || need != r->end - r->begin)
    return attn_diag_set(d, ATTN_EPARSE,
                         "%s: tensor '%s': data_offsets hold %zu bytes, shape "
                         "needs %zu elements of %zu bytes",
                         LBL(label), nm, r->end - r->begin, r->numel, r->dsize);
  return ATTN_OK;
}

/* Check one header entry on its own; fills *r. */
static attn_status read_entry(const cJSON *e, const char *label,
                              size_t data_len, raw *r, attn_diag *d) {
  const char *nm = e->string;
  const cJSON *jd, *js, *jo;
  attn_status s;
  memset(r, 0, sizeof *r);
  r->name = nm;
  if (nm[0] == '\0')
    return attn_diag_set(d, ATTN_EPARSE, "%s: empty tensor name", LBL(label));
  if (!cJSON_IsObject(e))
    return attn_diag_set(d, ATTN_EPARSE, "%s: tensor '%s' is not an object",
                         LBL(label), nm);
  if ((s = entry_keys(e, label, &jd, &js, &jo, d)) ||
      (s = entry_dtype(jd, label, r, d)) ||
      (s = entry_shape(js, label, r, d)) ||
      (s = entry_offsets(jo, label, data_len, r, d)))
    return s;
  return ATTN_OK;
}

static int cmp_raw(const void *a, const void *b) {
  const raw *x = *(const raw *const *)a, *y = *(const raw *const *)b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return 0;
}

static int cmp_name(const void *a, const void *b) {
  const raw *x = *(const raw *const *)a, *y = *(const raw *const *)b;
  return strcmp(x->name, y->name);
}

/* Sorted by offset, the tensors must tile [0, data_len) with no overlap and
 * no hole; names must be unique.  `idx` is scratch of n pointers. */
static attn_status check_layout(raw *rs, const raw **idx, size_t n,
                                const char *label, size_t data_len,
                                attn_diag *d) {
  for (size_t i = 0; i < n; i++) idx[i] = &rs[i];
  qsort(idx, n, sizeof *idx, cmp_name);
  for (size_t i = 1; i < n; i++)
    if (strcmp(idx[i - 1]->name, idx[i]->name) == 0)
      return attn_diag_set(d, ATTN_EPARSE, "%s: tensor '%s' appears twice",
                           LBL(label), idx[i]->name);
  qsort(idx, n, sizeof *idx, cmp_raw);
  size_t at = 0;
  for (size_t i = 0; i < n; i++) {
    const raw *r = idx[i];
    if (r->begin < at)
      return attn_diag_set(d, ATTN_EPARSE,
                           "%s: tensor '%s': data_offsets [%zu, %zu] overlap "
                           "tensor '%s' (ends at %zu)",
                           LBL(label), r->name, r->begin, r->end,
                           idx[i - 1]->name, at);
    if (r->begin > at)
      return attn_diag_set(d, ATTN_EPARSE,
                           "%s: tensor '%s': data_offsets start at %zu, "
                           "leaving a hole after byte %zu",
                           LBL(label), r->name, r->begin, at);
    at = r->end;
  }
  if (at != data_len)
    return attn_diag_set(d, ATTN_EPARSE,
                         "%s: tensors cover %zu bytes of a %zu-byte data "
                         "section",
                         LBL(label), at, data_len);
  return ATTN_OK;
}

static float load_f32(const unsigned char *p, attn_dtype dt) {
  switch (dt) {
    case ATTN_DT_FP32: {
      uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                   (uint32_t)p[3] << 24;
      float f;
      memcpy(&f, &u, sizeof f);
      return f;
    }
    case ATTN_DT_FP16:
      return attn_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
    case ATTN_DT_BF16:
      return attn_bf16_to_f32((uint16_t)(p[0] | p[1] << 8));
    case ATTN_DT_FP64: {
      uint64_t u = 0;
      for (int i = 7; i >= 0; i--) u = u << 8 | p[i];
      double x;
      memcpy(&x, &u, sizeof x);
      return (float)x;
    }
    default:
      return 0.0f;
  }
}

static attn_status copy_metadata(attn_safetensors *st, const cJSON *m,
                                 const char *label, attn_diag *d) {
  if (!cJSON_IsObject(m))
    return attn_diag_set(d, ATTN_EPARSE, "%s: __metadata__ is not an object",
                         LBL(label));
  size_t n = (size_t)cJSON_GetArraySize(m);
  if (n == 0) return ATTN_OK;
  st->meta_keys = calloc(n, sizeof *st->meta_keys);
  st->meta_vals = calloc(n, sizeof *st->meta_vals);
  if (!st->meta_keys || !st->meta_vals)
    return attn_diag_set(d, ATTN_ENOMEM, "%s: out of memory", LBL(label));
  const cJSON *c;
  cJSON_ArrayForEach(c, m) {
    if (!cJSON_IsString(c))
      return attn_diag_set(d, ATTN_EPARSE,
                           "%s: __metadata__ value '%s' is not a string",
                           LBL(label), c->string);
    size_t i = st->n_meta;
    st->meta_keys[i] = strdup(c->string);
    st->meta_vals[i] = strdup(c->valuestring);
    st->n_meta++; /* counted now so that destroy frees a half-made pair */
    if (!st->meta_keys[i] || !st->meta_vals[i])
      return attn_diag_set(d, ATTN_ENOMEM, "%s: out of memory", LBL(label));
  }
  return ATTN_OK;
}

/* F16 and BF16 data as BF16 tensor bits: BF16 copied, F16 rounded to
 * nearest even (exact through float). */
static void load_bf16(const unsigned char *p, attn_dtype dt, size_t n,
                      uint16_t *h) {
  for (size_t k = 0; k < n; k++) {
    uint16_t v = (uint16_t)(p[2 * k] | p[2 * k + 1] << 8);
    h[k] = dt == ATTN_DT_BF16 ? v : attn_f32_to_bf16(attn_f16_to_f32(v));
  }
}

/* Convert the validated records into owned FP32 tensors (F16 and BF16
 * ones into BF16 tensors when keep_bf16). */
static attn_status convert(attn_safetensors *st, const raw *rs, size_t n,
                           const unsigned char *data, const char *label,
                           bool keep_bf16, attn_diag *d) {
  st->ents = calloc(n ? n : 1, sizeof *st->ents);
  st->names = calloc(n ? n : 1, sizeof *st->names);
  if (!st->ents || !st->names)
    return attn_diag_set(d, ATTN_ENOMEM, "%s: out of memory", LBL(label));
  for (size_t i = 0; i < n; i++) {
    const raw *r = &rs[i];
    attn_safetensors_entry *e = &st->ents[i];
    st->n = i + 1;
    st->names[i] = strdup(r->name);
    bool half = keep_bf16 && (r->dt == ATTN_DT_FP16 || r->dt == ATTN_DT_BF16);
    void *f = malloc(r->numel ? r->numel * (half ? 2 : 4) : 1);
    if (!st->names[i] || !f) {
      free(f);
      return attn_diag_set(d, ATTN_ENOMEM, "%s: tensor '%s': out of memory",
                           LBL(label), r->name);
    }
    const unsigned char *p = data + r->begin;
    if (half) load_bf16(p, r->dt, r->numel, f);
    for (size_t k = 0; !half && k < r->numel; k++)
      ((float *)f)[k] = load_f32(p + k * r->dsize, r->dt);
    e->name = st->names[i];
    e->file_dtype = r->dt;
    e->tensor.dtype = half ? ATTN_DT_BF16 : ATTN_DT_FP32;
    e->tensor.rank = r->rank;
    memcpy(e->tensor.shape, r->shape, sizeof r->shape);
    e->tensor.data = f;
    e->tensor.owns = true;
  }
  return ATTN_OK;
}

/* The 8-byte header length and the JSON header after it: *root (an object
 * with nothing but whitespace after it; the caller deletes it), *data and
 * *data_len the data section. */
static attn_status read_header(const unsigned char *b, size_t len,
                               const char *label, cJSON **root,
                               const unsigned char **data, size_t *data_len,
                               attn_diag *d) {
  *root = NULL;
  if (len < 8)
    return attn_diag_set(d, ATTN_EPARSE,
                         "%s: %zu bytes, too short for the 8-byte header "
                         "length",
                         LBL(label), len);
  uint64_t hn = 0;
  for (int i = 7; i >= 0; i--) hn = hn << 8 | b[i];
  /* hn is the file's first 8 bytes: never in a message (a "weights" path
   * naming some other file would show its bytes to the client) */
  if (hn > len - 8)
    return attn_diag_set(d, ATTN_EPARSE,
                         "%s: not a safetensors file: its header length "
                         "field is larger than the %zu bytes after it "
                         "(truncated file?)",
                         LBL(label), len - 8);
  if (hn > ATTN_SAFETENSORS_MAX_HEADER)
    return attn_diag_set(d, ATTN_ETOOBIG,
                         "%s: header length over the %zu-byte limit",
                         LBL(label), ATTN_SAFETENSORS_MAX_HEADER);
  if (hn < 2 || b[8] != '{')
    return attn_diag_set(d, ATTN_EPARSE, "%s: header is not a JSON object",
                         LBL(label));
  const char *hdr = (const char *)b + 8;
  *data_len = len - 8 - (size_t)hn;
  *data = b + 8 + hn;

  const char *end = NULL;
  cJSON *j = cJSON_ParseWithLengthOpts(hdr, (size_t)hn, &end, false);
  if (!j || !cJSON_IsObject(j)) {
    size_t at = end && end >= hdr ? (size_t)(end - hdr) : 0;
    cJSON_Delete(j);
    return attn_diag_set(d, ATTN_EPARSE,
                         "%s: header is not valid JSON (near byte %zu)",
                         LBL(label), at);
  }
  for (const char *p = end; p < hdr + hn; p++)
    if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
      cJSON_Delete(j);
      return attn_diag_set(d, ATTN_EPARSE,
                           "%s: unexpected bytes after the header JSON",
                           LBL(label));
    }
  *root = j;
  return ATTN_OK;
}

/* The header's tensor entries (*n) and its __metadata__ (*meta, NULL when
 * absent; given at most once). */
static attn_status count_entries(const cJSON *root, const char *label,
                                 size_t *n, const cJSON **meta, attn_diag *d) {
  const cJSON *c;
  *n = 0;
  *meta = NULL;
  cJSON_ArrayForEach(c, root) {
    if (strcmp(c->string, "__metadata__") == 0) {
      if (*meta)
        return attn_diag_set(d, ATTN_EPARSE, "%s: __metadata__ given twice",
                             LBL(label));
      *meta = c;
    } else {
      (*n)++;
    }
  }
  return ATTN_OK;
}

/* Pass one: each entry but meta into rs[], checked on its own, with the
 * running element count against max_elements (0: no bound). */
static attn_status read_entries(const cJSON *root, const cJSON *meta,
                                const char *label, size_t data_len,
                                size_t max_elements, raw *rs, attn_diag *d) {
  const cJSON *c;
  size_t i = 0, total = 0;
  cJSON_ArrayForEach(c, root) {
    if (c == meta) continue;
    attn_status s = read_entry(c, label, data_len, &rs[i], d);
    if (s != ATTN_OK) return s;
    if (!attn_size_add(total, rs[i].numel, &total) ||
        (max_elements && total > max_elements))
      return attn_diag_set(d, ATTN_ETOOBIG,
                           "%s: tensors hold more than %zu elements (at '%s')",
                           LBL(label), max_elements, rs[i].name);
    i++;
  }
  return ATTN_OK;
}

/* The file's design: the header, pass one (read_entries), pass two
 * (check_layout), then the metadata and the tensors converted. */
static attn_status parse(const void *buf, size_t len, const char *label,
                         size_t max_elements, bool keep_bf16,
                         attn_safetensors **out, attn_diag *d) {
  const unsigned char *data = NULL;
  size_t data_len = 0, n;
  cJSON *root;
  const cJSON *meta;
  *out = NULL;
  attn_status s = read_header(buf, len, label, &root, &data, &data_len, d);
  if (s != ATTN_OK) return s;
  if ((s = count_entries(root, label, &n, &meta, d)) != ATTN_OK) {
    cJSON_Delete(root);
    return s;
  }
  raw *rs = calloc(n ? n : 1, sizeof *rs);
  const raw **idx = calloc(n ? n : 1, sizeof *idx);
  attn_safetensors *st = calloc(1, sizeof *st);
  if (!rs || !idx || !st)
    s = attn_diag_set(d, ATTN_ENOMEM, "%s: out of memory", LBL(label));
  if (s == ATTN_OK)
    s = read_entries(root, meta, label, data_len, max_elements, rs, d);
  if (s == ATTN_OK) s = check_layout(rs, idx, n, label, data_len, d);
  if (s == ATTN_OK && meta) s = copy_metadata(st, meta, label, d);
  if (s == ATTN_OK) s = convert(st, rs, n, data, label, keep_bf16, d);
  free(rs);
  free(idx);
  cJSON_Delete(root);
  if (s != ATTN_OK) {
    attn_safetensors_destroy(st);
    return s;
  }
  *out = st;
  return ATTN_OK;
}

attn_status attn_safetensors_parse(const void *buf, size_t len,
                                   const char *label, size_t max_elements,
                                   attn_safetensors **out, attn_diag *d) {
  return parse(buf, len, label, max_elements, false, out, d);
}

attn_status attn_safetensors_load(const char *path, size_t max_elements,
                                  attn_safetensors **out, attn_diag *d) {
  return attn__safetensors_read(path, path, max_elements, false, out, d);
}

attn_status attn_safetensors_load_as(const char *path, size_t max_elements,
                                     bool keep_bf16, attn_safetensors **out,
                                     attn_diag *d) {
  return attn__safetensors_read(path, path, max_elements, keep_bf16, out, d);
}

attn_status attn__safetensors_read(const char *path, const char *label,
                                   size_t max_elements, bool keep_bf16,
                                   attn_safetensors **out, attn_diag *d) {
  *out = NULL;
  /* Refuse before reading: header bound + 8 bytes (F64) per element. */
  size_t cap = SIZE_MAX;
  if (max_elements) {
    size_t data;
    if (!attn_size_mul(max_elements, 8, &data) ||
        !attn_size_add(data, ATTN_SAFETENSORS_MAX_HEADER + 8, &cap))
      cap = SIZE_MAX;
  }
  char *buf;
  size_t len;
  attn_status s = attn_read_file(path, label, cap, &buf, &len, d);
  if (s == ATTN_ETOOBIG)
    return attn_diag_set(d, s, "%s: larger than %zu elements can need", label,
                         max_elements);
  if (s) return s;
  s = parse(buf, len, label, max_elements, keep_bf16, out, d);
  free(buf);
  return s;
}
