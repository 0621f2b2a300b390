/* fuzz_safetensors.c - libFuzzer target: the .safetensors reader
 * (src/model/safetensors.c, attn_safetensors_parse), what a resident
 * model's weights file goes through at start-up.
 *
 * The first input byte is the framing, the rest is the file:
 *   bit 0      0: the bytes are the whole file; 1: they are the header JSON,
 *              a NUL, then the data section, and the 8-byte little-endian
 *              header length is written in front (so that most inputs get
 *              past it)
 *   bits 1-2   max_elements: 0 (no bound), 1, 16 or 4096
 * Every input checks, besides the sanitizers:
 *   - a failure is ATTN_EPARSE, ATTN_EUNSUPPORTED or ATTN_ETOOBIG with a
 *     non-empty message that names the file, and *out NULL;
 *   - a success holds what the header says, read again here without the
 *     reader's code (cJSON on the header): every tensor's dtype, shape and
 *     offsets, its size numel * dtype size, the sizes summing to the data
 *     section (the format's tiling), names unique and found by name, at
 *     most max_elements elements, and every value converted to FP32 as an
 *     independent converter here does it (bit for bit; NaN for NaN).
 * Any violation aborts (a crash for libFuzzer).
 *
 * Build and run: tests/fuzz/run.sh safetensors [seconds]
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/safetensors.h"

#define LABEL "fuzz.safetensors"

static void fail(const char *what, const char *detail) {
  fprintf(stderr, "fuzz_safetensors: %s: %s\n", what, detail);
  abort();
}

/* IEEE half to float, from the definition (not the reader's code). */
static float half_ref(uint16_t h) {
  int e = h >> 10 & 0x1f, m = h & 0x3ff;
  float v;
  if (e == 0)
    v = ldexpf((float)m, -24);
  else if (e == 31)
    v = m ? NAN : INFINITY;
  else
    v = ldexpf((float)(m | 0x400), e - 25);
  return h & 0x8000 ? -v : v;
}

static float value_ref(const unsigned char *p, const char *dt) {
  uint64_t u = 0;
  if (!strcmp(dt, "F32")) {
    for (int i = 3; i >= 0; i--) u = u << 8 | p[i];
    uint32_t w = (uint32_t)u;
    float f;
    memcpy(&f, &w, 4);
    return f;
  }
  if (!strcmp(dt, "BF16")) {
    uint32_t w = (uint32_t)(p[0] | p[1] << 8) << 16;
    float f;
    memcpy(&f, &w, 4);
    return f;
  }
  if (!strcmp(dt, "F16")) return half_ref((uint16_t)(p[0] | p[1] << 8));
  if (!strcmp(dt, "F64")) {
    for (int i = 7; i >= 0; i--) u = u << 8 | p[i];
    double x;
    memcpy(&x, &u, 8);
    return (float)x;
  }
  fail("converted an unexpected dtype", dt);
  return 0;
}

static size_t dtype_size(const char *dt) {
  return !strcmp(dt, "F32") ? 4 : !strcmp(dt, "F64") ? 8 : 2;
}

static void same_float(float a, float b, const char *name) {
  if (isnan(a) && isnan(b)) return;
  if (memcmp(&a, &b, sizeof a) != 0) fail("value differs", name);
}

/* The entry e as the header (hdr) says it, against the reader's. */
static size_t check_entry(const attn_safetensors_entry *e, const cJSON *hdr,
                          const unsigned char *data, size_t data_len) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(hdr, e->name);
  if (!j) fail("entry not in the header", e->name);
  const char *dt = cJSON_GetObjectItemCaseSensitive(j, "dtype")->valuestring;
  const cJSON *shape = cJSON_GetObjectItemCaseSensitive(j, "shape");
  const cJSON *off = cJSON_GetObjectItemCaseSensitive(j, "data_offsets");
  size_t begin = (size_t)cJSON_GetArrayItem(off, 0)->valuedouble;
  size_t end = (size_t)cJSON_GetArrayItem(off, 1)->valuedouble;
  if (e->tensor.rank != cJSON_GetArraySize(shape)) fail("rank", e->name);
  size_t numel = 1;
  for (int i = 0; i < e->tensor.rank; i++) {
    double x = cJSON_GetArrayItem(shape, i)->valuedouble;
    if ((double)e->tensor.shape[i] != x) fail("shape", e->name);
    numel *= (size_t)x;
  }
  if (begin > end || end > data_len) fail("offsets outside the data", e->name);
  if ((end - begin) / dtype_size(dt) != numel ||
      (end - begin) % dtype_size(dt) != 0)
    fail("size is not numel * dtype size", e->name);
  const float *f = e->tensor.data;
  for (size_t k = 0; k < numel; k++)
    same_float(f[k], value_ref(data + begin + k * dtype_size(dt), dt), e->name);
  return numel;
}

static void check_set(const attn_safetensors *st, const unsigned char *file,
                      size_t len, size_t max_elements) {
  uint64_t hn = 0;
  for (int i = 7; i >= 0; i--) hn = hn << 8 | file[i];
  size_t data_len = len - 8 - (size_t)hn;
  cJSON *hdr = cJSON_ParseWithLength((const char *)file + 8, (size_t)hn);
  if (!hdr) fail("accepted a header cJSON refuses", "");
  size_t n = attn_safetensors_count(st), bytes = 0, elements = 0, entries = 0;
  const cJSON *c;
  cJSON_ArrayForEach(c, hdr) entries += strcmp(c->string, "__metadata__") != 0;
  if (n != entries) fail("entry count", "");
  for (size_t i = 0; i < n; i++) {
    const attn_safetensors_entry *e = attn_safetensors_at(st, i);
    if (attn_safetensors_find(st, e->name) != e) fail("find", e->name);
    if (e->tensor.dtype != ATTN_DT_FP32 || !e->tensor.owns)
      fail("not an owned FP32 tensor", e->name);
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(hdr, e->name);
    size_t k = check_entry(e, hdr, file + 8 + hn, data_len);
    elements += k;
    bytes += k * dtype_size(
                     cJSON_GetObjectItemCaseSensitive(j, "dtype")->valuestring);
  }
  if (bytes != data_len) fail("tensors do not cover the data section", "");
  if (max_elements && elements > max_elements) fail("max_elements", "");
  cJSON_Delete(hdr);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const size_t bounds[] = {0, 1, 16, 4096};
  if (size == 0) return 0;
  size_t max_elements = bounds[data[0] >> 1 & 3];
  size_t n = size - 1;
  unsigned char *file = malloc(n + 8 ? n + 8 : 1);
  if (!file) return 0;
  size_t len = n;
  if (data[0] & 1) {
    const uint8_t *nul = memchr(data + 1, 0, n);
    uint64_t hn = nul ? (uint64_t)(nul - (data + 1)) : n;
    for (int i = 0; i < 8; i++) file[i] = (unsigned char)(hn >> (8 * i));
    memcpy(file + 8, data + 1, hn);
    size_t rest = nul ? n - hn - 1 : 0;
    memcpy(file + 8 + hn, data + 1 + hn + (nul ? 1 : 0), rest);
    len = 8 + hn + rest;
  } else {
    memcpy(file, data + 1, n);
  }
  /* exactly len bytes, so that ASan sees any read past the file */
  unsigned char *exact = malloc(len ? len : 1);
  if (!exact) {
    free(file);
    return 0;
  }
  memcpy(exact, file, len);
  free(file);
  attn_safetensors *st = (attn_safetensors *)1;
  attn_diag d = {{0}};
  attn_status s =
      attn_safetensors_parse(exact, len, LABEL, max_elements, &st, &d);
  if (s != ATTN_OK) {
    if (s != ATTN_EPARSE && s != ATTN_EUNSUPPORTED && s != ATTN_ETOOBIG)
      fail("status", attn_status_name(s));
    if (st) fail("*out not NULL on failure", d.msg);
    if (strncmp(d.msg, LABEL, strlen(LABEL)) != 0)
      fail("message does not name the file", d.msg);
  } else {
    check_set(st, exact, len, max_elements);
    attn_safetensors_destroy(st);
  }
  free(exact);
  return 0;
}
