/* fuzz_json.c - libFuzzer target: the request-body JSON parser
 * (src/json/json_parse.c, json_avx512.c, json_avx2.c), differentially.
 *
 * Each input is parsed plainly and with packed arrays under every path the
 * CPU has ("avx512", "avx2", "sse2", "scalar"); all must agree on the status,
 * the error message and every value (packed arrays against the plain tree's
 * numbers, bit for bit).  The first input byte picks the framing: the bytes
 * as they are, or wrapped as {"k":[ ... ]} so that most inputs reach the
 * packed paths.  Any disagreement aborts (a crash for libFuzzer), as does
 * any sanitizer report.
 *
 * Build and run: tests/fuzz/run.sh [seconds]  (clang, libFuzzer, ASan+UBSan)
 */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/json.h"
#include "../../src/json/internal.h"

static const char *const pack_k[] = {"k", "k2", NULL};

static void fail(const char *what, const char *a, const char *b) {
  fprintf(stderr, "fuzz_json: %s: '%s' vs '%s'\n", what, a, b);
  abort();
}

/* a (packed) holds what b (plain) holds. */
static void same_tree(const cJSON *a, const cJSON *b) {
  size_t n;
  const double *v = attn_json_packed(a, &n);
  if (v) {
    const cJSON *e = b->child;
    for (size_t i = 0; i < n; i++, e = e->next) {
      if (!e || !cJSON_IsNumber(e)) fail("packed array", "number", "other");
      if (memcmp(&v[i], &e->valuedouble, sizeof *v) != 0)
        fail("packed value", "a", "b");
    }
    if (e) fail("packed length", "short", "long");
    return;
  }
  if ((a->type & 0xFF) != (b->type & 0xFF)) fail("type", "a", "b");
  if (cJSON_IsNumber(a) &&
      memcmp(&a->valuedouble, &b->valuedouble, sizeof(double)) != 0)
    fail("number", "a", "b");
  if ((a->string || b->string) &&
      (!a->string || !b->string || strcmp(a->string, b->string) != 0))
    fail("key", a->string ? a->string : "", b->string ? b->string : "");
  if (cJSON_IsString(a) && strcmp(a->valuestring, b->valuestring) != 0)
    fail("string", a->valuestring, b->valuestring);
  const cJSON *x = a->child, *y = b->child;
  for (; x && y; x = x->next, y = y->next) same_tree(x, y);
  if (x || y) fail("children", "a", "b");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char *const impls[] = {"avx512", "avx2", "sse2", "scalar"};
  if (size == 0) return 0;
  size_t n = size - 1;
  char *doc = malloc(n + 16);
  if (!doc) return 0;
  size_t k = 0;
  if (data[0] & 1) {
    memcpy(doc, "{\"k\":[", 6);
    k = 6;
  }
  memcpy(doc + k, data + 1, n);
  k += n;
  if (data[0] & 1) {
    memcpy(doc + k, "]}", 2);
    k += 2;
  }
  /* exactly k bytes, so that ASan sees a read past the body */
  char *body = malloc(k ? k : 1);
  if (!body) {
    free(doc);
    return 0;
  }
  memcpy(body, doc, k);
  free(doc);
  size_t nodes = data[0] & 2 ? 1 + (data[0] >> 2) : ATTN_JSON_MAX_NODES;
  cJSON *plain = NULL;
  attn_diag dp = {{0}};
  attn_status sp = attn_json_parse_capped(body, k, 8, nodes, "", &plain, &dp);
  for (int i = 0; i < (int)(sizeof impls / sizeof *impls); i++) {
    if (!attn__json_set_impl(impls[i])) continue;
    cJSON *t = NULL;
    attn_diag d = {{0}};
    attn_status s = attn_json_parse_ex(body, k, 8, nodes, pack_k, "", &t, &d);
    if (s != sp) fail(impls[i], attn_status_name(s), attn_status_name(sp));
    if (s != ATTN_OK) {
      if (strcmp(d.msg, dp.msg) != 0) fail(impls[i], d.msg, dp.msg);
    } else {
      same_tree(t, plain);
      attn_json_free(t);
    }
  }
  attn_json_free(plain);
  free(body);
  return 0;
}
