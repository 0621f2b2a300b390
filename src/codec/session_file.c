/* session_file.c - a session as one safetensors file (codec.h "session
 * files"): GET /v1/sessions/{id}/kv, PUT /v1/sessions/{id} with
 * application/octet-stream, and session_dir at shutdown and start-up.
 *
 * Design
 *  - The bytes only: a dump (session.h's plain struct) in, a file out, and
 *    back.  The store exports and imports dumps; the server moves them.
 *  - The model's safetensors reader (src/model/safetensors.c) is not used:
 *    it is in attn_model, above the codecs (docs/architecture.md), and it
 *    converts to fp32, where a session's rows must stay bitwise as stored.
 *    This reader is as strict, for this one kind of file: every key of the
 *    header is expected (the metadata's, the tensors' names and fields),
 *    and anything else is refused, named.
 *  - Two passes, as the model reader: the header is read and every entry
 *    checked against the spec first (sizes overflow-checked, counts below
 *    2^53), then the entries sorted by offset must tile the data section
 *    exactly.  Nothing is copied: the dump's rows point into the file.
 *  - The spec is PUT /v1/sessions/{id}'s JSON in a metadata string, read
 *    by the same decoder (attn_v1_decode_session_spec), so a file says its
 *    shape and variants in the words a client uses.
 *  - The encoder writes the tensors in layer order, key then value, and
 *    pads the header with spaces so that the data starts on 8 bytes (as
 *    the safetensors library does); the reader takes any order.
 *
 * Threads: reentrant; no state.
 */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/codec.h"
#include "attn/json.h"
#include "attn/tensor.h"
#include "internal.h"

#define EXACT_LIMIT 9007199254740992.0 /* 2^53 */
#define MAX_LAYERS 4096                /* the store's */

/* safetensors' dtype names by attn_kv_dtype. */
static const char *const st_dtypes[] = {"F32", "BF16", "F16"};
static const char *const kv_names[] = {"fp32", "bf16", "fp16"};

static attn_status put_u64_le(attn_buf *b, uint64_t v) {
  unsigned char x[8];
  for (int i = 0; i < 8; i++) x[i] = (unsigned char)(v >> (8 * i));
  return attn_buf_append(b, x, 8);
}

/* Bytes of n rows of Hkv x D elements of e bytes; false on overflow. */
static bool rows_size(int64_t n, int64_t Hkv, int64_t D, size_t e,
                      size_t *out) {
  size_t r;
  return n >= 0 && Hkv >= 0 && D >= 0 &&
         attn_size_mul((size_t)Hkv, (size_t)D, &r) && attn_size_mul(r, e, &r) &&
         attn_size_mul(r, (size_t)n, out);
}

/* ---- encoding ------------------------------------------------------------ */

#define TRY(x)                           \
  do {                                   \
    if ((s = (x)) != ATTN_OK) goto fail; \
  } while (0)

/* One tensor's entry: ,"layers.L.key":{"dtype":..,"shape":[..],
 * "data_offsets":[b,e]} */
static attn_status put_entry(attn_buf *h, int64_t l, const char *which,
                             const attn_session_spec *p, int64_t len,
                             size_t begin, size_t end) {
  return attn_buf_printf(
      h,
      ",\"layers.%lld.%s\":{\"dtype\":\"%s\",\"shape\":[%lld,%lld,%lld],"
      "\"data_offsets\":[%zu,%zu]}",
      (long long)l, which, st_dtypes[p->kv_dtype], (long long)len,
      (long long)p->num_kv_heads, (long long)p->head_dim, begin, end);
}

attn_status attn_session_file_encode(attn_buf *out,
                                     const attn_session_dump *x) {
  const attn_session_spec *p = &x->spec;
  attn_buf h, spec;
  attn_status s = ATTN_OK;
  size_t start = out->len, e = attn_kv_dtype_size(p->kv_dtype), at = 0;
  char owner[17];
  if (!e || p->layers < 1 || p->num_kv_heads < 1 || p->head_dim < 1 ||
      !x->length)
    return ATTN_EINVAL;
  attn_buf_init(&h, 0);
  attn_buf_init(&spec, 0);
  snprintf(owner, sizeof owner, "%016" PRIx64, x->owner);
  TRY(attn__session_spec_json(&spec, p));
  TRY(attn_buf_puts(
      &h, "{\"__metadata__\":{\"format\":\"" ATTN_SESSION_FILE_FORMAT
          "\",\"format_version\":\"" ATTN_SESSION_FILE_VERSION "\",\"id\":"));
  TRY(attn_buf_json_string(&h, x->id));
  TRY(attn_buf_printf(&h, ",\"owner\":\"%s\",\"spec\":", owner));
  TRY(attn_buf_json_string(&h, spec.data));
  TRY(attn_buf_puts(&h, "}"));
  for (int64_t l = 0; l < p->layers; l++) {
    size_t n = 0;
    if (!rows_size(x->length[l], p->num_kv_heads, p->head_dim, e, &n)) {
      s = ATTN_EINVAL;
      goto fail;
    }
    TRY(put_entry(&h, l, "key", p, x->length[l], at, at + n));
    TRY(put_entry(&h, l, "value", p, x->length[l], at + n, at + 2 * n));
    at += 2 * n;
  }
  TRY(attn_buf_puts(&h, "}"));
  while ((8 + h.len) % 8) TRY(attn_buf_puts(&h, " "));
  TRY(attn_buf_reserve(out, 8 + h.len + at));
  TRY(put_u64_le(out, (uint64_t)h.len));
  TRY(attn_buf_append(out, h.data, h.len));
  for (int64_t l = 0; l < p->layers; l++) {
    size_t n = 0;
    rows_size(x->length[l], p->num_kv_heads, p->head_dim, e, &n);
    if (!n) continue;
    TRY(attn_buf_append(out, x->k[l], n));
    TRY(attn_buf_append(out, x->v[l], n));
  }
  attn_buf_free(&h);
  attn_buf_free(&spec);
  return ATTN_OK;
fail:
  attn_buf_free(&h);
  attn_buf_free(&spec);
  attn__buf_restore(out, start);
  return s;
}

#undef TRY

/* ---- decoding ------------------------------------------------------------ */

#define PFX "session file: "

/* One tensor of the header, checked on its own. */
typedef struct entry {
  const char *name;
  int64_t layer;
  int value; /* 0 key, 1 value */
  int64_t len;
  size_t begin, end;
} entry;

/* "layers.{i}.key" / "layers.{i}.value", i in canonical decimal below
 * layers. */
static int tensor_name(const char *s, int64_t layers, int64_t *l, int *value) {
  if (strncmp(s, "layers.", 7) != 0) return 0;
  const char *p = s + 7;
  int64_t v = 0;
  size_t n = 0;
  while (p[n] >= '0' && p[n] <= '9' && n < 5) v = v * 10 + (p[n++] - '0');
  if (n == 0 || (n > 1 && p[0] == '0') || v >= layers) return 0;
  p += n;
  if (strcmp(p, ".key") == 0)
    *value = 0;
  else if (strcmp(p, ".value") == 0)
    *value = 1;
  else
    return 0;
  *l = v;
  return 1;
}

/* it as an integer in [0, 2^53) into *v; 0 when it is not one. */
static int exact_uint(const cJSON *it, uint64_t *v) {
  if (!cJSON_IsNumber(it)) return 0;
  double x = it->valuedouble;
  if (!(x >= 0 && x < EXACT_LIMIT) || x != floor(x)) return 0;
  *v = (uint64_t)x;
  return 1;
}

/* The metadata: every key once, no other; *spec decoded. */
static attn_status read_meta(const cJSON *m, attn_session_dump *out,
                             attn_diag *d) {
  static const char *const names[] = {"format", "format_version", "id", "owner",
                                      "spec"};
  const cJSON *f[5] = {0};
  attn_status s;
  if (!cJSON_IsObject(m))
    return attn_diag_set(d, ATTN_EPARSE,
                         PFX "__metadata__ is %s, not an object",
                         attn_json_kind(m));
  for (const cJSON *c = m->child; c; c = c->next) {
    size_t i = 0;
    while (i < 5 && strcmp(c->string, names[i]) != 0) i++;
    if (i == 5)
      return attn_diag_set(d, ATTN_EPARSE,
                           PFX
                           "unknown __metadata__ key '%.64s' (a session "
                           "file has format, format_version, id, owner, spec)",
                           c->string);
    if (f[i])
      return attn_diag_set(d, ATTN_EPARSE,
                           PFX "__metadata__ key '%s' given twice", names[i]);
    if (!cJSON_IsString(c))
      return attn_diag_set(d, ATTN_EPARSE,
                           PFX "__metadata__ value '%s' is %s, not a string",
                           names[i], attn_json_kind(c));
    f[i] = c;
  }
  for (size_t i = 0; i < 5; i++)
    if (!f[i])
      return attn_diag_set(d, ATTN_EPARSE, PFX "__metadata__ has no '%s'%s",
                           names[i], i == 0 ? " (not a session file)" : "");
  if (strcmp(f[0]->valuestring, ATTN_SESSION_FILE_FORMAT) != 0)
    return attn_diag_set(d, ATTN_EPARSE,
                         PFX "format is '%.64s', not '" ATTN_SESSION_FILE_FORMAT
                             "' (not a session file)",
                         f[0]->valuestring);
  if (strcmp(f[1]->valuestring, ATTN_SESSION_FILE_VERSION) != 0)
    return attn_diag_set(d, ATTN_EPARSE,
                         PFX
                         "format_version is '%.32s'; this attnd reads "
                         "version " ATTN_SESSION_FILE_VERSION,
                         f[1]->valuestring);
  const char *id = f[2]->valuestring, *ow = f[3]->valuestring;
  if (!attn_session_id_ok(id, strlen(id)))
    return attn_diag_set(d, ATTN_EPARSE,
                         PFX
                         "id '%.140s' is not a session id (1 to %d bytes "
                         "of A-Z a-z 0-9 . _ : -)",
                         id, ATTN_SESSION_ID_MAX);
  memcpy(out->id, id, strlen(id) + 1);
  if (strlen(ow) != 16 || strspn(ow, "0123456789abcdef") != 16)
    return attn_diag_set(
        d, ATTN_EPARSE, PFX "owner '%.32s' is not 16 lowercase hex digits", ow);
  out->owner = strtoull(ow, NULL, 16);
  const char *sp = f[4]->valuestring;
  attn_diag sub = {{0}};
  s = attn_v1_decode_session_spec(sp, strlen(sp), NULL, &out->spec, &sub);
  if (s)
    return attn_diag_set(d, s == ATTN_ENOMEM ? s : ATTN_EPARSE, PFX "spec: %s",
                         sub.msg);
  const attn_session_spec *p = &out->spec;
  const char *missing = !p->layers         ? "layers"
                        : !p->num_kv_heads ? "num_kv_heads"
                        : !p->max_tokens   ? "max_tokens"
                                           : NULL;
  if (missing)
    return attn_diag_set(d, ATTN_EPARSE,
                         PFX
                         "spec: %s is missing (a session file's spec is "
                         "filled)",
                         missing);
  if (p->alibi == ATTN_SESSION_ALIBI_SLOPES && p->alibi_count != p->num_heads)
    return attn_diag_set(d, ATTN_EPARSE,
                         PFX "spec: alibi has %lld slopes; num_heads is %lld",
                         (long long)p->alibi_count, (long long)p->num_heads);
  if (p->layers > MAX_LAYERS)
    return attn_diag_set(d, ATTN_EPARSE, PFX "spec: layers is %lld; at most %d",
                         (long long)p->layers, MAX_LAYERS);
  return ATTN_OK;
}

/* One tensor entry e named name against the spec; data_len: the data
 * section's. */
static attn_status read_entry(const cJSON *t, const attn_session_spec *p,
                              size_t data_len, entry *e, attn_diag *d) {
  static const char *const keys[] = {"dtype", "shape", "data_offsets"};
  const cJSON *f[3] = {0};
  const char *nm = t->string;
  if (!cJSON_IsObject(t))
    return attn_diag_set(d, ATTN_EPARSE, PFX "tensor '%s' is %s, not an object",
                         nm, attn_json_kind(t));
  for (const cJSON *c = t->child; c; c = c->next) {
    size_t i = 0;
    while (i < 3 && strcmp(c->string, keys[i]) != 0) i++;
    if (i == 3)
      return attn_diag_set(d, ATTN_EPARSE,
                           PFX "tensor '%s': unknown key '%.64s'", nm,
                           c->string);
    if (f[i])
      return attn_diag_set(
          d, ATTN_EPARSE, PFX "tensor '%s': key '%s' given twice", nm, keys[i]);
    f[i] = c;
  }
  for (size_t i = 0; i < 3; i++)
    if (!f[i])
      return attn_diag_set(d, ATTN_EPARSE, PFX "tensor '%s': missing '%s'", nm,
                           keys[i]);
  const char *want = st_dtypes[p->kv_dtype];
  if (!cJSON_IsString(f[0]) || strcmp(f[0]->valuestring, want) != 0)
    return attn_diag_set(
        d, ATTN_EPARSE,
        PFX
        "tensor '%s': dtype is %s%.16s%s; the spec's "
        "kv_dtype %s is stored as %s",
        nm, cJSON_IsString(f[0]) ? "'" : "",
        cJSON_IsString(f[0]) ? f[0]->valuestring : attn_json_kind(f[0]),
        cJSON_IsString(f[0]) ? "'" : "", kv_names[p->kv_dtype], want);
  const cJSON *sh = f[1];
  uint64_t dims[3] = {0};
  int ok = cJSON_IsArray(sh) && cJSON_GetArraySize(sh) == 3;
  const cJSON *c = ok ? sh->child : NULL;
  for (int i = 0; ok && i < 3; i++, c = c->next) ok = exact_uint(c, &dims[i]);
  if (!ok)
    return attn_diag_set(d, ATTN_EPARSE,
                         PFX
                         "tensor '%s': shape must be [length, "
                         "num_kv_heads, head_dim]: three non-negative "
                         "integers",
                         nm);
  if (dims[1] != (uint64_t)p->num_kv_heads || dims[2] != (uint64_t)p->head_dim)
    return attn_diag_set(d, ATTN_EPARSE,
                         PFX "tensor '%s': shape [%" PRIu64 ",%" PRIu64
                             ",%" PRIu64
                             "]; the spec's is [length, %lld, "
                             "%lld] (num_kv_heads, head_dim)",
                         nm, dims[0], dims[1], dims[2],
                         (long long)p->num_kv_heads, (long long)p->head_dim);
  if (dims[0] > (uint64_t)p->max_tokens)
    return attn_diag_set(d, ATTN_EPARSE,
                         PFX "tensor '%s': %" PRIu64
                             " tokens, above the "
                             "spec's max_tokens (%lld)",
                         nm, dims[0], (long long)p->max_tokens);
  e->len = (int64_t)dims[0];
  const cJSON *o = f[2];
  uint64_t b = 0, en = 0;
  if (!cJSON_IsArray(o) || cJSON_GetArraySize(o) != 2 ||
      !exact_uint(o->child, &b) || !exact_uint(o->child->next, &en) || en < b)
    return attn_diag_set(d, ATTN_EPARSE,
                         PFX
                         "tensor '%s': data_offsets must be [begin, end], "
                         "integers with 0 <= begin <= end",
                         nm);
  if (en > data_len)
    return attn_diag_set(d, ATTN_EPARSE,
                         PFX "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                             "] reach past the data section (%zu bytes: the "
                             "file is cut short?)",
                         nm, b, en, data_len);
  size_t need = 0;
  if (!rows_size(e->len, p->num_kv_heads, p->head_dim,
                 attn_kv_dtype_size(p->kv_dtype), &need) ||
      en - b != need)
    return attn_diag_set(d, ATTN_EPARSE,
                         PFX "tensor '%s': data_offsets hold %" PRIu64
                             " bytes; its shape needs %zu",
                         nm, en - b, need);
  e->begin = (size_t)b;
  e->end = (size_t)en;
  return ATTN_OK;
}

static int by_begin(const void *a, const void *b) {
  const entry *x = *(entry *const *)a, *y = *(entry *const *)b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return x->end < y->end ? -1 : x->end > y->end;
}

/* The entries, sorted by offset, cover [0, data_len) exactly. */
static attn_status check_tiling(entry *es, size_t n, size_t data_len,
                                attn_diag *d) {
  entry **idx = malloc((n ? n : 1) * sizeof *idx);
  attn_status s = ATTN_OK;
  if (!idx) return attn_diag_set(d, ATTN_ENOMEM, PFX "out of memory");
  for (size_t i = 0; i < n; i++) idx[i] = &es[i];
  qsort(idx, n, sizeof *idx, by_begin);
  size_t at = 0;
  for (size_t i = 0; i < n && !s; i++) {
    const entry *e = idx[i];
    if (e->begin < at)
      s = attn_diag_set(d, ATTN_EPARSE,
                        PFX
                        "tensor '%s': data_offsets [%zu, %zu] overlap the "
                        "tensor before it (which ends at %zu)",
                        e->name, e->begin, e->end, at);
    else if (e->begin > at)
      s = attn_diag_set(d, ATTN_EPARSE,
                        PFX
                        "tensor '%s': data_offsets start at %zu, leaving "
                        "a hole after byte %zu",
                        e->name, e->begin, at);
    at = e->end;
  }
  if (!s && at != data_len)
    s = attn_diag_set(d, ATTN_EPARSE,
                      PFX
                      "the tensors cover %zu bytes of a %zu-byte data "
                      "section (%zu trailing bytes)",
                      at, data_len, data_len - at);
  free(idx);
  return s;
}

/* The header's tensors against the spec (read first), into out. */
static attn_status read_tensors(const cJSON *root, const unsigned char *data,
                                size_t data_len, attn_session_dump *out,
                                attn_diag *d) {
  const attn_session_spec *p = &out->spec;
  size_t L = (size_t)p->layers;
  attn_status s = ATTN_OK;
  entry *es = calloc(2 * L, sizeof *es);
  out->length = calloc(L, sizeof *out->length);
  out->k = calloc(L, sizeof *out->k);
  out->v = calloc(L, sizeof *out->v);
  if (!es || !out->length || !out->k || !out->v) {
    free(es);
    return attn_diag_set(d, ATTN_ENOMEM, PFX "out of memory");
  }
  for (const cJSON *c = root->child; c && !s; c = c->next) {
    int64_t l;
    int v;
    if (!strcmp(c->string, "__metadata__")) continue;
    if (!tensor_name(c->string, p->layers, &l, &v)) {
      s = attn_diag_set(d, ATTN_EPARSE,
                        PFX
                        "unknown tensor '%.64s' (this session has "
                        "layers.0 to layers.%lld, each .key and .value)",
                        c->string, (long long)p->layers - 1);
      break;
    }
    entry *e = &es[2 * (size_t)l + (size_t)v];
    if (e->name) {
      s = attn_diag_set(d, ATTN_EPARSE, PFX "tensor '%s' given twice",
                        c->string);
      break;
    }
    e->name = c->string;
    e->layer = l;
    e->value = v;
    s = read_entry(c, p, data_len, e, d);
  }
  for (size_t i = 0; i < 2 * L && !s; i++)
    if (!es[i].name)
      s = attn_diag_set(d, ATTN_EPARSE,
                        PFX
                        "tensor 'layers.%zu.%s' is missing (the spec has "
                        "%zu layers)",
                        i / 2, i % 2 ? "value" : "key", L);
  for (size_t l = 0; l < L && !s; l++)
    if (es[2 * l].len != es[2 * l + 1].len)
      s = attn_diag_set(d, ATTN_EPARSE,
                        PFX "layer %zu has %lld keys and %lld values", l,
                        (long long)es[2 * l].len, (long long)es[2 * l + 1].len);
  if (!s) s = check_tiling(es, 2 * L, data_len, d);
  for (size_t l = 0; l < L && !s; l++) {
    out->length[l] = es[2 * l].len;
    if (!out->length[l]) continue;
    out->k[l] = data + es[2 * l].begin;
    out->v[l] = data + es[2 * l + 1].begin;
  }
  free(es);
  return s;
}

attn_status attn_session_file_decode(const void *buf, size_t len,
                                     attn_session_dump *out, attn_diag *d) {
  const unsigned char *b = buf;
  cJSON *root = NULL;
  attn_status s;
  memset(out, 0, sizeof *out);
  if (!b || len < 8)
    return attn_diag_set(d, ATTN_EPARSE,
                         PFX
                         "%zu bytes, too short for the 8-byte header "
                         "length (the file is cut short?)",
                         b ? len : 0);
  uint64_t N = 0;
  for (int i = 0; i < 8; i++) N |= (uint64_t)b[i] << (8 * i);
  if (N > len - 8)
    return attn_diag_set(d, ATTN_EPARSE,
                         PFX "the header length is %" PRIu64
                             " bytes; the "
                             "file has %zu after it (the file is cut short?)",
                         N, len - 8);
  if (N > ATTN_SAFETENSORS_MAX_HEADER)
    return attn_diag_set(d, ATTN_EPARSE,
                         PFX "the header length is %" PRIu64
                             " bytes, above "
                             "the limit of %zu",
                         N, (size_t)ATTN_SAFETENSORS_MAX_HEADER);
  if (N < 2 || b[8] != '{')
    return attn_diag_set(d, ATTN_EPARSE,
                         PFX
                         "the header does not start with a JSON object "
                         "(not a safetensors file)");
  attn_diag sub = {{0}};
  s = attn_json_parse((const char *)b + 8, (size_t)N, 4, "", &root, &sub);
  if (s)
    return attn_diag_set(d, s == ATTN_ENOMEM ? s : ATTN_EPARSE,
                         PFX "header: %s", sub.msg);
  if (!cJSON_IsObject(root)) {
    s = attn_diag_set(d, ATTN_EPARSE, PFX "the header is not a JSON object");
  } else {
    const cJSON *m = NULL;
    for (const cJSON *c = root->child; c && !s; c = c->next)
      if (!strcmp(c->string, "__metadata__")) {
        if (m)
          s = attn_diag_set(d, ATTN_EPARSE, PFX "__metadata__ given twice");
        m = c;
      }
    if (!s && !m)
      s = attn_diag_set(d, ATTN_EPARSE,
                        PFX
                        "the header has no __metadata__ (not a session "
                        "file)");
    if (!s) s = read_meta(m, out, d);
    if (!s) s = read_tensors(root, b + 8 + N, len - 8 - (size_t)N, out, d);
  }
  attn_json_free(root);
  if (s) {
    attn_session_dump_clear(out);
    memset(out, 0, sizeof *out);
  }
  return s;
}
