/* test_json.c - the request-body JSON parser (src/json/): syntax and
 * escapes as tables, the depth and node limits, numbers bit-identical to
 * strtod, the same trees as cJSON, packed arrays on each path the CPU has
 * (AVX-512, AVX2, SSE2, scalar), and attn_json_f64_to_f32.
 *
 * JSON in the tables is written with ' for " to stay readable (unquote,
 * unit.h). */
#include <cjson/cJSON.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/f32fmt.h"
#include "attn/json.h"
#include "../src/json/internal.h"
#include "unit.h"

/* cJSON's own parse of p[0, n) when it is one value plus whitespace. */
static cJSON *cjson_parse(const char *p, size_t n) {
  const char *end = NULL;
  cJSON *t = cJSON_ParseWithLengthOpts(p, n, &end, 0);
  for (; t && end < p + n; end++)
    if (!strchr(" \t\r\n", *end) || !*end) {
      cJSON_Delete(t);
      t = NULL;
    }
  return t;
}

/* a and b equal field by field (doubles bit for bit), with cJSON's linking:
 * first child's prev is the last child, the others' prev the one before. */
static void check_same_tree(const cJSON *a, const cJSON *b, const char *ctx) {
  ck_assert_msg(a->type == b->type, "%s: type %d != %d", ctx, a->type, b->type);
  ck_assert_msg(a->valueint == b->valueint, "%s: valueint %d != %d", ctx,
                a->valueint, b->valueint);
  ck_assert_msg(memcmp(&a->valuedouble, &b->valuedouble, sizeof(double)) == 0,
                "%s: valuedouble %.17g != %.17g", ctx, a->valuedouble,
                b->valuedouble);
  ck_assert_msg(!a->string == !b->string &&
                    (!a->string || strcmp(a->string, b->string) == 0),
                "%s: key differs", ctx);
  ck_assert_msg(
      !a->valuestring == !b->valuestring &&
          (!a->valuestring || strcmp(a->valuestring, b->valuestring) == 0),
      "%s: string differs", ctx);
  const cJSON *x = a->child, *y = b->child, *last = NULL;
  for (; x && y; x = x->next, y = y->next) {
    ck_assert_msg(x == a->child || x->prev == last, "%s: bad prev link", ctx);
    check_same_tree(x, y, ctx);
    last = x;
  }
  ck_assert_msg(!x && !y, "%s: child counts differ", ctx);
  if (a->child) {
    ck_assert_msg(a->child->prev == last, "%s: first child's prev", ctx);
    int n = cJSON_GetArraySize(a);
    ck_assert_int_eq(n, cJSON_GetArraySize(b));
    ck_assert_ptr_eq(cJSON_GetArrayItem(a, n - 1), last);
    if (cJSON_IsObject(a))
      for (x = a->child; x; x = x->next) { /* first match, duplicates too */
        const cJSON *fa = cJSON_GetObjectItemCaseSensitive(a, x->string),
                    *fb = cJSON_GetObjectItemCaseSensitive(b, x->string);
        ck_assert_msg(
            fa && fb && fa->type == fb->type && fa->valueint == fb->valueint,
            "%s: lookup of '%s' differs", ctx, x->string);
      }
  }
}

/* Parse with attn_json_parse and cJSON; both must accept, print the same
 * and hold the same tree.  test_codec.c uses it too (unit.h). */
void check_like_cjson(const char *p, size_t n, const char *ctx) {
  cJSON *t = NULL, *c = cjson_parse(p, n);
  attn_diag d = {{0}};
  attn_status s = attn_json_parse(p, n, ATTN_MAX_JSON_DEPTH, "", &t, &d);
  ck_assert_msg(s == ATTN_OK, "%s: %s", ctx, d.msg);
  ck_assert_msg(c != NULL, "%s: cJSON rejects it", ctx);
  char *pa = cJSON_PrintUnformatted(t), *pb = cJSON_PrintUnformatted(c);
  ck_assert_msg(pa && pb && strcmp(pa, pb) == 0, "%s: '%s' != '%s'", ctx, pa,
                pb);
  check_same_tree(t, c, ctx);
  cJSON_free(pa);
  cJSON_free(pb);
  cJSON_Delete(c);
  attn_json_free(t);
}

typedef struct json_case {
  const char *in; /* ' stands for " */
  size_t len;     /* 0: strlen */
  attn_status st;
  const char *msg; /* the whole message on failure */
} json_case;

#define J(s) s, sizeof(s) - 1 /* inputs with NUL bytes */

static const json_case json_cases[] = {
    /* accepted (compared with cJSON's parse) */
    {" [ 1 , 2 ] \n\t\r", 0, ATTN_OK, NULL},
    {"\xEF\xBB\xBF{}", 0, ATTN_OK, NULL}, /* BOM skipped */
    {"0", 0, ATTN_OK, NULL},
    {"-0", 0, ATTN_OK, NULL},
    {"[-0.0e+0,1E+2,1e-2,12.5E1,0.000123]", 0, ATTN_OK, NULL},
    {"[true,false,null,[],{},'',[[]],{'':{}}]", 0, ATTN_OK, NULL},
    {"{'a':1,'a':2,'b':{'c':[1,{'d':null}]}}", 0, ATTN_OK, NULL},
    {"[2147483647,2147483648,-2147483648,-2147483649,1e300,-1e999,1.5]", 0,
     ATTN_OK, NULL},
    {"'\\u00e9\\ud83d\\ude00 \xc3\xa9 \xf4\x8f\xbf\xbf \\/\\b\\f\\n\\r\\t\\\\'",
     0, ATTN_OK, NULL},
    /* empty, whitespace, truncation */
    {"", 0, ATTN_EPARSE, "empty JSON body"},
    {"   ", 0, ATTN_EPARSE, "malformed JSON at byte 3"},
    {"[1,2", 0, ATTN_EPARSE, "malformed JSON at byte 4"},
    {"{'a':1", 0, ATTN_EPARSE, "malformed JSON at byte 6"},
    {"{'a'", 0, ATTN_EPARSE, "malformed JSON at byte 4"},
    {"'abc", 0, ATTN_EPARSE, "malformed JSON at byte 4"},
    {"'abc\\", 0, ATTN_EPARSE, "malformed JSON at byte 5"},
    {"\xEF\xBB", 0, ATTN_EPARSE, "malformed JSON at byte 0"},
    /* numbers */
    {"[01]", 0, ATTN_EPARSE, "malformed JSON at byte 2"},
    {"[-01]", 0, ATTN_EPARSE, "malformed JSON at byte 3"},
    {"[1.]", 0, ATTN_EPARSE, "malformed JSON at byte 3"},
    {"[.5]", 0, ATTN_EPARSE, "malformed JSON at byte 1"},
    {"[+1]", 0, ATTN_EPARSE, "malformed JSON at byte 1"},
    {"[-]", 0, ATTN_EPARSE, "malformed JSON at byte 2"},
    {"[- 1]", 0, ATTN_EPARSE, "malformed JSON at byte 2"},
    {"[1e]", 0, ATTN_EPARSE, "malformed JSON at byte 3"},
    {"[1e+]", 0, ATTN_EPARSE, "malformed JSON at byte 4"},
    {"[1.e5]", 0, ATTN_EPARSE, "malformed JSON at byte 3"},
    {"[0x10]", 0, ATTN_EPARSE, "malformed JSON at byte 2"},
    {"[NaN]", 0, ATTN_EPARSE, "malformed JSON at byte 1"},
    {"[Infinity]", 0, ATTN_EPARSE, "malformed JSON at byte 1"},
    {"[-Infinity]", 0, ATTN_EPARSE, "malformed JSON at byte 2"},
    {"-", 0, ATTN_EPARSE, "malformed JSON at byte 1"},
    /* structure */
    {"[1 2]", 0, ATTN_EPARSE, "malformed JSON at byte 3"},
    {"[1,]", 0, ATTN_EPARSE, "malformed JSON at byte 3"},
    {"[,1]", 0, ATTN_EPARSE, "malformed JSON at byte 1"},
    {"[1}", 0, ATTN_EPARSE, "malformed JSON at byte 2"},
    {"{'a':1]", 0, ATTN_EPARSE, "malformed JSON at byte 6"},
    {"{'a' 1}", 0, ATTN_EPARSE, "malformed JSON at byte 5"},
    {"{'a':1,}", 0, ATTN_EPARSE, "malformed JSON at byte 7"},
    {"{,}", 0, ATTN_EPARSE, "malformed JSON at byte 1"},
    {"{1:2}", 0, ATTN_EPARSE, "malformed JSON at byte 1"},
    {"{'a':}", 0, ATTN_EPARSE, "malformed JSON at byte 5"},
    {"]", 0, ATTN_EPARSE, "malformed JSON at byte 0"},
    {"[tru]", 0, ATTN_EPARSE, "malformed JSON at byte 4"},
    {"[nul", 0, ATTN_EPARSE, "malformed JSON at byte 4"},
    {"[falsy]", 0, ATTN_EPARSE, "malformed JSON at byte 5"},
    {"True", 0, ATTN_EPARSE, "malformed JSON at byte 0"},
    {"\x01[1]", 0, ATTN_EPARSE, "malformed JSON at byte 0"}, /* strict ws */
    {"[1,\v2]", 0, ATTN_EPARSE, "malformed JSON at byte 3"},
    {J("[1,\0 2]"), ATTN_EPARSE, "malformed JSON at byte 3"},
    /* strings */
    {"'a\\x'", 0, ATTN_EPARSE, "malformed JSON at byte 2"},
    {"'a\\U0041'", 0, ATTN_EPARSE, "malformed JSON at byte 2"},
    {"'\\u12'", 0, ATTN_EPARSE, "malformed JSON at byte 1"},
    {"'\\u12G4'", 0, ATTN_EPARSE, "malformed JSON at byte 1"},
    {"'\\ud800'", 0, ATTN_EPARSE, "malformed JSON at byte 1"},
    {"'\\ud800\\u0041'", 0, ATTN_EPARSE, "malformed JSON at byte 1"},
    {"'\\ud800\\ud800'", 0, ATTN_EPARSE, "malformed JSON at byte 1"},
    {"'x\\udc00'", 0, ATTN_EPARSE, "malformed JSON at byte 2"},
    {"'a\\u0000b'", 0, ATTN_EPARSE, "malformed JSON at byte 2"},
    {"'\x01'", 0, ATTN_EPARSE, "malformed JSON at byte 1"},
    {"'a\tb'", 0, ATTN_EPARSE, "malformed JSON at byte 2"},
    {J("'a\0b'"), ATTN_EPARSE, "malformed JSON at byte 2"},
    {"'\xff'", 0, ATTN_EPARSE, "malformed JSON at byte 1"},
    {"'\x80'", 0, ATTN_EPARSE, "malformed JSON at byte 1"},
    {"'ab\xc0\x80'", 0, ATTN_EPARSE, "malformed JSON at byte 3"}, /* overlong */
    {"'\xe0\x9f\xbf'", 0, ATTN_EPARSE, "malformed JSON at byte 1"},
    {"'\xed\xa0\x80'", 0, ATTN_EPARSE, "malformed JSON at byte 1"}, /* D800 */
    {"'\xf4\x90\x80\x80'", 0, ATTN_EPARSE, "malformed JSON at byte 1"},
    {"'\xe2\x82'", 0, ATTN_EPARSE, "malformed JSON at byte 1"},
    {"{'k\x01':1}", 0, ATTN_EPARSE, "malformed JSON at byte 3"},
    {"{'\\q':1}", 0, ATTN_EPARSE, "malformed JSON at byte 2"},
    /* after the value */
    {"[1] x", 0, ATTN_EPARSE,
     "unexpected bytes after the JSON value at byte 4 (hint)"},
    {"[1]\x01", 0, ATTN_EPARSE,
     "unexpected bytes after the JSON value at byte 3 (hint)"},
    {"1 2", 0, ATTN_EPARSE,
     "unexpected bytes after the JSON value at byte 2 (hint)"},
    {"0x10", 0, ATTN_EPARSE,
     "unexpected bytes after the JSON value at byte 1 (hint)"},
};

START_TEST(json_syntax_table) {
  const json_case *c = &json_cases[_i];
  char ctx[32];
  size_t n = c->len ? c->len : strlen(c->in);
  char *in = malloc(n + 1);
  ck_assert_ptr_nonnull(in);
  for (size_t i = 0; i < n; i++) in[i] = c->in[i] == '\'' ? '"' : c->in[i];
  in[n] = '\0';
  snprintf(ctx, sizeof ctx, "json case %d", _i);
  cJSON *t = (cJSON *)&t; /* must become NULL on failure */
  attn_diag d = {{0}};
  attn_status s = attn_json_parse(in, n, 8, " (hint)", &t, &d);
  ck_assert_msg(s == c->st, "%s: status %s (%s), expected %s", ctx,
                attn_status_name(s), d.msg, attn_status_name(c->st));
  if (s == ATTN_OK) {
    attn_json_free(t);
    check_like_cjson(in, n, ctx);
  } else {
    ck_assert_ptr_null(t);
    ck_assert_msg(strcmp(d.msg, c->msg) == 0, "%s: message '%s', expected '%s'",
                  ctx, d.msg, c->msg);
  }
  free(in);
}
END_TEST

/* Escapes in values and keys decode to these UTF-8 bytes. */
static const struct {
  const char *in, *out;
} json_escapes[] = {
    {"\\u00e9", "\xc3\xa9"},
    {"\\u20AC", "\xe2\x82\xac"},
    {"\\u07FF\\u0800", "\xdf\xbf\xe0\xa0\x80"},
    {"\\uffff", "\xef\xbf\xbf"},
    {"\\ud83d\\ude00", "\xf0\x9f\x98\x80"},
    {"\\uD800\\uDC00", "\xf0\x90\x80\x80"},
    {"\\uDBFF\\uDFFF", "\xf4\x8f\xbf\xbf"},
    {"\\u0041\\u007f\\u0001", "A\x7f\x01"},
    {"\\\"\\\\\\/\\b\\f\\n\\r\\t", "\"\\/\b\f\n\r\t"},
    {"x\xf0\x9f\x98\x80\xc3\xa9\xe2\x82\xac y",
     "x\xf0\x9f\x98\x80\xc3\xa9\xe2\x82\xac y"},
    {"plain", "plain"},
    {"", ""},
};

START_TEST(json_escapes_table) {
  char doc[128];
  cJSON *t;
  attn_diag d;
  const char *in = json_escapes[_i].in, *want = json_escapes[_i].out;
  int n = snprintf(doc, sizeof doc, "[\"%s\",{\"%s\":1}]", in, in);
  ck_assert(n > 0 && (size_t)n < sizeof doc);
  ck_assert_int_eq(attn_json_parse(doc, (size_t)n, 8, NULL, &t, &d), ATTN_OK);
  ck_assert_str_eq(t->child->valuestring, want);
  ck_assert_str_eq(t->child->next->child->string, want);
  ck_assert_ptr_nonnull(cJSON_GetObjectItemCaseSensitive(t->child->next, want));
  attn_json_free(t);
  check_like_cjson(doc, (size_t)n, in);
}
END_TEST

START_TEST(json_depth_limit) {
  cJSON *t;
  attn_diag d;
  ck_assert_int_eq(attn_json_parse("[[[1]]]", 7, 3, NULL, &t, &d), ATTN_OK);
  attn_json_free(t);
  ck_assert_int_eq(attn_json_parse("[[[[1]]]]", 9, 3, NULL, &t, &d),
                   ATTN_EINVAL);
  ck_assert_str_eq(d.msg, "JSON nested deeper than 3 levels at byte 3");
  ck_assert_ptr_null(t);
  const char *o = "{\"a\":[{\"b\":{}}]}";
  ck_assert_int_eq(attn_json_parse(o, strlen(o), 3, NULL, &t, &d), ATTN_EINVAL);
  ck_assert_str_eq(d.msg, "JSON nested deeper than 3 levels at byte 11");
  /* past the on-stack frames: 5000 levels allowed, then one too many */
  size_t lv = 5000;
  char *deep = malloc(2 * lv + 4);
  ck_assert_ptr_nonnull(deep);
  memset(deep, '[', lv);
  memset(deep + lv, ']', lv);
  ck_assert_int_eq(attn_json_parse(deep, 2 * lv, lv, NULL, &t, &d), ATTN_OK);
  size_t got = 0;
  for (cJSON *e = t; e; e = e->child) got++;
  ck_assert_uint_eq(got, lv);
  attn_json_free(t);
  ck_assert_int_eq(attn_json_parse(deep, 2 * lv, lv - 1, NULL, &t, &d),
                   ATTN_EINVAL);
  ck_assert_ptr_nonnull(strstr(d.msg, "at byte 4999"));
  deep[lv] = '1'; /* truncated inside: freed on the error path */
  ck_assert_int_eq(attn_json_parse(deep, lv + 1, SIZE_MAX, NULL, &t, &d),
                   ATTN_EPARSE);
  free(deep);
}
END_TEST

START_TEST(json_node_limit) {
  cJSON *t;
  attn_diag d;
  ck_assert_uint_eq(ATTN_JSON_MAX_NODES, (size_t)1 << 24);
  ck_assert_int_eq(attn_json_parse_capped("[1,2,3]", 7, 8, 4, NULL, &t, &d),
                   ATTN_OK);
  ck_assert_int_eq(cJSON_GetArraySize(t), 3);
  attn_json_free(t);
  ck_assert_int_eq(attn_json_parse_capped("[1,2,3,4]", 9, 8, 4, NULL, &t, &d),
                   ATTN_ETOOBIG);
  ck_assert_str_eq(d.msg,
                   "JSON has more than 4 values; send large tensors with the "
                   "binary extension");
  ck_assert_ptr_null(t);
  const char *o = "{\"a\":[true,null]}";
  ck_assert_int_eq(attn_json_parse_capped(o, strlen(o), 8, 4, NULL, &t, &d),
                   ATTN_OK);
  attn_json_free(t);
  ck_assert_int_eq(attn_json_parse_capped(o, strlen(o), 8, 3, NULL, &t, &d),
                   ATTN_ETOOBIG);
  attn_json_free(NULL);
}
END_TEST

/* Big strings (own arena block), long number tokens (strtod on an arena
 * copy), many arena blocks. */
START_TEST(json_large_values) {
  size_t n = 300000;
  char *doc = malloc(n + 64);
  ck_assert_ptr_nonnull(doc);
  size_t k = 0;
  doc[k++] = '[';
  doc[k++] = '"';
  for (size_t i = 0; i < 100000; i++) doc[k++] = (char)('a' + i % 26);
  doc[k++] = '"';
  doc[k++] = ',';
  doc[k++] = '1';
  for (size_t i = 0; i < 400; i++) doc[k++] = (char)('0' + i % 10);
  doc[k++] = 'e';
  doc[k++] = '-';
  doc[k++] = '3';
  doc[k++] = '9';
  doc[k++] = '0';
  while (k < n - 8) {
    doc[k++] = ',';
    doc[k++] = '7';
  }
  doc[k++] = ']';
  check_like_cjson(doc, k, "large values");
  cJSON *t;
  attn_diag d;
  ck_assert_int_eq(attn_json_parse(doc, k, 8, NULL, &t, &d), ATTN_OK);
  ck_assert_uint_eq(strlen(t->child->valuestring), 100000);
  size_t tok = 1 + 400 + 5; /* the 406-character number */
  char *num = malloc(tok + 1);
  ck_assert_ptr_nonnull(num);
  memcpy(num, doc + 2 + 100000 + 2, tok);
  num[tok] = '\0';
  double want = strtod(num, NULL), got = t->child->next->valuedouble;
  ck_assert(memcmp(&want, &got, sizeof got) == 0);
  attn_json_free(t);
  free(num);
  free(doc);
}
END_TEST

/* ---- numbers: bit-identical to strtod ----------------------------------- */

static size_t put_digits(char *o, uint64_t *rng, int n, bool lead_nonzero) {
  for (int i = 0; i < n; i++) {
    unsigned dg = (unsigned)(xs64(rng) % 10);
    if (i == 0 && lead_nonzero) dg = 1 + dg % 9;
    o[i] = (char)('0' + dg);
  }
  return (size_t)n;
}

/* One JSON number text of a random form into o (< 80 bytes); returns its
 * length. */
static size_t gen_number(char *o, uint64_t *rng) {
  uint64_t r = xs64(rng);
  int form = (int)(r % 10);
  size_t k = 0;
  switch (form) {
    case 0: { /* shortest text of a random finite float */
      uint32_t u = (uint32_t)(r >> 32);
      float f;
      memcpy(&f, &u, 4);
      if (!isfinite(f)) f = 1.5f;
      return attn_f32_shortest(f, o);
    }
    case 1: /* shortest text of a float in [-1, 1] (typical tensor data) */
      return attn_f32_shortest(
          (float)((double)(r >> 11) / 4503599627370496.0 - 1.0), o);
    case 2: { /* %.9g of a random float */
      uint32_t u = (uint32_t)(r >> 32);
      float f;
      memcpy(&f, &u, 4);
      if (!isfinite(f)) f = -0.0f;
      return (size_t)snprintf(o, 40, "%.9g", (double)f);
    }
    case 3: { /* %.17g / %.16g of random double bits, subnormals included */
      double v;
      uint64_t u = xs64(rng);
      if (r & 256) u &= 0x800FFFFFFFFFFFFFull; /* subnormal */
      memcpy(&v, &u, 8);
      if (!isfinite(v)) v = 1e308;
      return (size_t)snprintf(o, 40, r & 512 ? "%.16g" : "%.17g", v);
    }
    default: { /* grammar-generated: [-]int[.frac][e[+-]exp] */
      if (r & 1) o[k++] = '-';
      int nint = (int)((r >> 8) % 22) + 1, nfrac = (int)((r >> 16) % 22);
      if ((r >> 24) % 5 == 0)
        o[k++] = '0';
      else
        k += put_digits(o + k, rng, nint, true);
      if (nfrac) {
        o[k++] = '.';
        k += put_digits(o + k, rng, nfrac, false);
        if ((r >> 28) % 4 == 0) /* trailing zeros */
          for (int i = 0; i < 6; i++) o[k++] = '0';
      }
      if ((r >> 32) % 3) {
        int range = form == 9 ? 40 : form == 8 ? 700 : 60;
        int e = (int)((r >> 40) % (uint64_t)(2 * range + 1)) - range;
        if (form == 7) e += e < 0 ? -290 : 290; /* near the ends */
        k += (size_t)snprintf(o + k, 16, "%s%s%d", r >> 62 & 1 ? "E" : "e",
                              e >= 0 && r >> 63 ? "+" : "", e);
      }
      return k;
    }
  }
}

static const char *const tricky_numbers[] = {
    "2.2250738585072011e-308",
    "2.2250738585072012e-308",
    "4.9e-324",
    "2.4703282292062327e-324",
    "2.4703282292062328e-324",
    "5e-324",
    "1.7976931348623157e308",
    "1.7976931348623158e308",
    "1.7976931348623159e308",
    "1e309",
    "-1e999",
    "1e-999",
    "-0.0e-1000",
    "0e1000",
    "9007199254740992",
    "9007199254740993",
    "9007199254740993e-22",
    "9007199254740992e22",
    "900719925474099e23",
    "1e22",
    "1e23",
    "1e-22",
    "1e-23",
    "1e37",
    "1e38",
    "0.1",
    "0.30000000000000004",
    "123456789012345678901234567890",
    "18446744073709551615",
    "18446744073709551616",
    "10000000000000000000000000000000000000000e-40",
    "1.00000000000000011102230246251565404236316680908203125",
    "1.00000000000000011102230246251565404236316680908203124",
    "8.98846567431158e307",
    "3.4028235e38",
    "1.17549435e-38",
    "1e-45",
    "-2147483648",
    "2147483647.9999",
    "-2147483648.5",
    "1e0000000000000000001",
};

/* >= 1 million numbers in arrays of 1000: every valuedouble must equal
 * strtod's result bit for bit, and each array must match cJSON's tree. */
static void check_packed_like_plain(const char *doc, size_t n, size_t nodes,
                                    const char *ctx);

/* Decimal digits of x (no sign, no leading zeros; "0" for 0) into o. */
static size_t put_u128(char *o, unsigned __int128 x) {
  char t[48];
  size_t n = 0, k = 0;
  do {
    t[n++] = (char)('0' + (int)(x % 10));
    x /= 10;
  } while (x);
  while (n) o[k++] = t[--n];
  return k;
}

/* Member names whose arrays are packed in the packed-array tests. */
static const char *const pack_k[] = {"k", "k2", NULL};

/* The paths packed arrays can be read with (src/json/internal.h); the
 * packed tests run once per path (loop index), each against the plain
 * parse.  A path this CPU lacks is skipped; "scalar" always runs. */
static const char *const json_impls[] = {"avx512", "avx2", "sse2", "scalar"};
#define N_JSON_IMPLS ((int)(sizeof json_impls / sizeof *json_impls))

/* Make packed arrays use path i for this test; false when the CPU lacks
 * it, which is then said for the calling test (unit_skipped, unit.h).
 * Check forks per test, so the choice dies with the test (and CK_FORK=no
 * runs restore it in use_default_json_impl). */
static bool use_json_impl_in(int i, const char *func) {
  if (attn__json_set_impl(json_impls[i])) return true;
  unit_skipped(func, json_impls[i]);
  return false;
}
#define use_json_impl(i) use_json_impl_in((i), __func__)

static void use_default_json_impl(void) {
  for (int i = 0; i < N_JSON_IMPLS; i++)
    if (attn__json_set_impl(json_impls[i])) return;
}

/* doc[0, k) is a JSON array of `count` numbers, number i starting at
 * off[i]: each parsed value must be bit-identical to strtod's, in the
 * plain tree and as a packed array read by each path the CPU has. */
static void values_match_strtod(const char *doc, size_t k, const size_t *off,
                                int count) {
  cJSON *t;
  attn_diag d;
  ck_assert_msg(attn_json_parse(doc, k, 8, NULL, &t, &d) == ATTN_OK, "%s",
                d.msg);
  double *want = malloc((size_t)count * sizeof *want);
  ck_assert_ptr_nonnull(want);
  int i = 0;
  for (const cJSON *e = t->child; e; e = e->next, i++) {
    char *end;
    ck_assert_int_lt(i, count);
    want[i] = strtod(doc + off[i], &end);
    ck_assert_msg(*end == ',' || *end == ']', "generated a bad number");
    ck_assert_msg(memcmp(&want[i], &e->valuedouble, sizeof *want) == 0,
                  "'%.*s': %a, strtod says %a", (int)(end - doc - off[i]),
                  doc + off[i], e->valuedouble, want[i]);
  }
  ck_assert_int_eq(i, count);
  attn_json_free(t);
  /* {"k": doc}: the packed paths */
  char *w = malloc(k + 8);
  ck_assert_ptr_nonnull(w);
  memcpy(w, "{\"k\":", 5);
  memcpy(w + 5, doc, k);
  w[k + 5] = '}';
  for (int impl = 0; impl < N_JSON_IMPLS; impl++) {
    if (!use_json_impl(impl)) continue;
    ck_assert_msg(attn_json_parse_ex(w, k + 6, 8, ATTN_JSON_MAX_NODES, pack_k,
                                     "", &t, &d) == ATTN_OK,
                  "%s", d.msg);
    size_t n = 0;
    const double *v = attn_json_packed(t->child, &n);
    ck_assert_ptr_nonnull(v);
    ck_assert_uint_eq(n, (size_t)count);
    for (i = 0; i < count; i++)
      ck_assert_msg(memcmp(&want[i], &v[i], sizeof *want) == 0,
                    "%s: '%.*s': %a, strtod says %a", json_impls[impl],
                    (int)strcspn(doc + off[i], ",]"), doc + off[i], v[i],
                    want[i]);
    attn_json_free(t);
  }
  use_default_json_impl();
  free(w);
  free(want);
}

/* One number for json_long_numbers_match_strtod (see there) into o;
 * returns its length. */
static size_t gen_long_number(char *o, uint64_t *rng) {
  size_t k = 0;
  uint64_t r = xs64(rng);
  if (r & 1) o[k++] = '-';
  uint64_t t = ((uint64_t)1 << 53) | (xs64(rng) & (((uint64_t)1 << 53) - 1));
  t |= 1; /* odd and 54 bits: halfway between two doubles */
  int p = (int)(xs64(rng) % 7);
  switch ((r >> 1) % 6) {
    case 0:
    case 1: { /* 1..19 digits, exponent -360..339 */
      int nd = 1 + (int)(xs64(rng) % 19);
      for (int d = 0; d < nd; d++)
        o[k++] = (char)('0' + (d == 0 ? 1 + xs64(rng) % 9 : xs64(rng) % 10));
      k += (size_t)snprintf(o + k, 16, "e%d", (int)(xs64(rng) % 700) - 360);
      break;
    }
    case 2: /* a tie as an integer: t * 2^p */
      k += put_u128(o + k, (unsigned __int128)t << p);
      break;
    case 3: { /* a tie below 1 ulp of an integer: t * 5^p * 10^-p */
      unsigned __int128 x = t;
      for (int j = 0; j < p % 3; j++) x *= 5;
      k += put_u128(o + k, x);
      k += (size_t)snprintf(o + k, 8, "e-%d", p % 3);
      break;
    }
    case 4: /* next to a tie */
      k += put_u128(o + k, ((unsigned __int128)t << p) +
                               (unsigned __int128)(xs64(rng) % 5) - 2);
      break;
    default: { /* 17 or 19 significant digits of random double bits */
      uint64_t u = xs64(rng);
      double v;
      memcpy(&v, &u, 8);
      if (!isfinite(v)) v = 0.1;
      k += (size_t)snprintf(o + k, 40, r & 64 ? "%.17g" : "%.19g", fabs(v));
    }
  }
  return k;
}

/* The JSON array "[a,b,...]" of the texts first[0 .. n_first) and then of
 * gen's numbers, `count` in all, into doc (NUL-terminated after it);
 * number i starts at off[i].  Returns the array's length. */
static size_t number_array(char *doc, size_t *off, int count,
                           size_t (*gen)(char *, uint64_t *), uint64_t *rng,
                           const char *const *first, size_t n_first) {
  size_t k = 0;
  doc[k++] = '[';
  for (int i = 0; i < count; i++) {
    if (i) doc[k++] = ',';
    off[i] = k;
    if ((size_t)i < n_first) {
      size_t l = strlen(first[i]);
      memcpy(doc + k, first[i], l);
      k += l;
    } else {
      k += gen(doc + k, rng);
    }
  }
  doc[k++] = ']';
  doc[k] = '\0';
  return k;
}

/* Numbers of 1 to 9 digits in all, 8 and 9 (the edge of the AVX-512
 * window's 8-digit lanes, src/json/json_avx512.c) most often: integers,
 * "0.ddd" and "dd.ddd", either sign.  Within a window every number
 * has 8 digits or fewer (the one-register case) or some have 9. */
static size_t gen_short_number(char *o, uint64_t *rng) {
  static const unsigned digits[] = {1, 2, 3, 5, 7, 8, 8, 8, 9, 9};
  uint64_t r = xs64(rng);
  unsigned nd = digits[r % 10], form = (unsigned)(r >> 8) % 3;
  if ((r >> 12) % 16 < 14 && nd == 9) nd = 8; /* whole windows of <= 8 */
  size_t n = 0;
  if ((r >> 16) & 1) o[n++] = '-';
  if (form == 1 && nd >= 2) { /* 0.ddd: the 0 counts as a digit */
    o[n++] = '0';
    o[n++] = '.';
    for (unsigned i = 1; i < nd; i++) o[n++] = (char)('0' + xs64(rng) % 10);
    return n;
  }
  unsigned ni = form == 2 && nd >= 2 ? 1 + (unsigned)(r >> 20) % (nd - 1) : nd;
  for (unsigned i = 0; i < nd; i++) {
    if (i == ni) o[n++] = '.';
    o[n++] =
        (char)('0' + (i == 0 && ni > 1 ? 1 + xs64(rng) % 9 : xs64(rng) % 10));
  }
  return n;
}

/* docs arrays of 1000 of gen's numbers (each under max_len bytes), every
 * value against strtod on every path. */
static void generated_match_strtod(size_t (*gen)(char *, uint64_t *),
                                   size_t max_len, int docs, uint64_t seed) {
  enum { PER_DOC = 1000 };
  char *doc = malloc(PER_DOC * (max_len + 1) + 8);
  size_t *off = malloc(PER_DOC * sizeof *off);
  ck_assert(doc && off);
  for (int di = 0; di < docs; di++) {
    size_t k = number_array(doc, off, PER_DOC, gen, &seed, NULL, 0);
    values_match_strtod(doc, k, off, PER_DOC);
  }
  free(off);
  free(doc);
}

/* Short numbers such as -0.482913, every path against strtod. */
START_TEST(json_short_numbers_match_strtod) {
  generated_match_strtod(gen_short_number, 16, 200, 0x243F6A8885A308D3ull);
}
END_TEST

/* Numbers for the Eisel-Lemire path of json_parse.c (mantissas of 16 to 19
 * digits that are no exact double) and the cases it must leave to strtod:
 * exact ties between two doubles (an odd 54-bit integer t times 2^p, or
 * t * 5^p / 10^p), their neighbours, every decimal exponent of the table
 * and beyond it, 17- and 19-digit texts of random doubles.  Each value
 * must be bit-identical to strtod's. */
START_TEST(json_long_numbers_match_strtod) {
  generated_match_strtod(gen_long_number, 63, 300, 0x5DEECE66Dull);
}
END_TEST

START_TEST(json_numbers_match_strtod) {
  enum { PER_DOC = 1000, DOCS = 1050 };
  char *doc = malloc(PER_DOC * 88 + 8);
  size_t *off = malloc(PER_DOC * sizeof *off);
  ck_assert(doc && off);
  uint64_t rng = 0x9E3779B97F4A7C15ull;
  size_t checked = 0, n_tricky = sizeof tricky_numbers / sizeof *tricky_numbers;
  for (int di = 0; di < DOCS; di++) {
    size_t k = number_array(doc, off, PER_DOC, gen_number, &rng, tricky_numbers,
                            di == 0 ? n_tricky : 0);
    values_match_strtod(doc, k, off, PER_DOC);
    checked += PER_DOC;
    if (di % 8 == 0) {
      check_like_cjson(doc, k, "random numbers");
      /* the same numbers packed: {"k":[...]} */
      char *w = malloc(k + 8);
      ck_assert_ptr_nonnull(w);
      memcpy(w, "{\"k\":", 5);
      memcpy(w + 5, doc, k);
      w[k + 5] = '}';
      check_packed_like_plain(w, k + 6, ATTN_JSON_MAX_NODES, "random packed");
      free(w);
    }
  }
  ck_assert_uint_ge(checked, 1000000);
  free(off);
  free(doc);
}
END_TEST

/* Sample bodies parse to cJSON's tree (the decoder tables' bodies do too:
 * test_codec.c, bodies_parse_like_cjson). */
START_TEST(json_same_as_cjson) {
  static const char *const docs[] = {
      "{'inputs':[{'name':'x','datatype':'FP32','shape':[2,2],"
      "'data':[[0.25,-1.5e-3],[3.4028235e38,-0]]}],"
      "'outputs':[{'name':'o','parameters':{'binary_data':true}}],"
      "'parameters':{'a':'\\u00e9','b':null,'c':false,'d':-7}}",
      "  {\"\":[{},[],\"\",0,-0.0,1e-400]}  ",
      "[[[[[[[[[[1]]]]]]]]]]",
      "\"top\"",
      "null",
  };
  char ctx[48];
  for (size_t i = 0; i < sizeof docs / sizeof *docs; i++) {
    char *j = unquote(docs[i]);
    snprintf(ctx, sizeof ctx, "sample %zu", i);
    check_like_cjson(j, strlen(j), ctx);
    free(j);
  }
}
END_TEST

/* ---- packed arrays (attn_json_parse_ex with pack_keys) ------------------ */

static bool pack_key_listed(const char *key) {
  for (const char *const *k = pack_k; *k; k++)
    if (strcmp(*k, key) == 0) return true;
  return false;
}

/* a (parsed with pack_k) holds the same values as b (parsed plainly); an
 * array is packed exactly when it may be (allowed: listed key, or inside an
 * allowed array) and holds only numbers. */
static void check_packed_tree(const cJSON *a, const cJSON *b, bool allowed,
                              const char *ctx) {
  size_t n;
  const double *v = attn_json_packed(a, &n);
  bool all_num = cJSON_IsArray(b) && b->child;
  for (const cJSON *y = b->child; all_num && y; y = y->next)
    all_num = cJSON_IsNumber(y);
  ck_assert_msg(!!v == (allowed && all_num), "%s: packed %d, expected %d", ctx,
                !!v, allowed && all_num);
  ck_assert_msg(!a->string == !b->string &&
                    (!a->string || strcmp(a->string, b->string) == 0),
                "%s: key differs", ctx);
  if (v) {
    ck_assert(cJSON_IsArray(a) && !a->child);
    ck_assert_uint_eq(n, (size_t)cJSON_GetArraySize(b));
    ck_assert_uint_eq(attn_json_len(a), n);
    size_t i = 0;
    for (const cJSON *y = b->child; y; y = y->next, i++)
      ck_assert_msg(memcmp(&v[i], &y->valuedouble, sizeof *v) == 0,
                    "%s: element %zu is %a, expected %a", ctx, i, v[i],
                    y->valuedouble);
    return;
  }
  ck_assert_msg(a->type == b->type, "%s: type %d != %d", ctx, a->type, b->type);
  ck_assert(memcmp(&a->valuedouble, &b->valuedouble, sizeof(double)) == 0);
  ck_assert_int_eq(a->valueint, b->valueint);
  ck_assert_uint_eq(attn_json_len(a), (size_t)cJSON_GetArraySize(b));
  const cJSON *x = a->child, *y = b->child;
  for (; x && y; x = x->next, y = y->next) {
    bool child_allowed = cJSON_IsObject(b) ? pack_key_listed(y->string)
                                           : allowed && cJSON_IsArray(b);
    check_packed_tree(x, y, child_allowed, ctx);
  }
  ck_assert_msg(!x && !y, "%s: child counts differ", ctx);
}

/* Parse doc with and without packing: same status and message, and on
 * success the same values. */
static void check_packed_like_plain(const char *text, size_t n, size_t nodes,
                                    const char *ctx) {
  cJSON *a = NULL, *b = NULL;
  attn_diag da = {{0}}, db = {{0}};
  /* an allocation of exactly n bytes, so that ASan sees any read past it */
  char *doc = malloc(n ? n : 1);
  ck_assert_ptr_nonnull(doc);
  memcpy(doc, text, n);
  attn_status sa = attn_json_parse_ex(doc, n, 8, nodes, pack_k, "", &a, &da);
  attn_status sb = attn_json_parse_capped(doc, n, 8, nodes, "", &b, &db);
  free(doc);
  ck_assert_msg(sa == sb, "%s: status %s, plain %s", ctx, attn_status_name(sa),
                attn_status_name(sb));
  if (sa != ATTN_OK) {
    ck_assert_ptr_null(a);
    ck_assert_msg(strcmp(da.msg, db.msg) == 0, "%s: '%s', plain '%s'", ctx,
                  da.msg, db.msg);
    return;
  }
  check_packed_tree(a, b, false, ctx);
  attn_json_free(a);
  attn_json_free(b);
}

static const char *const packed_docs[] = {
    "{'k':[1,2.5,-3e-7]}",
    "{'k': [ 1 , 2 ] , 'j':[1,2]}",
    "{'k':[1,2,true]}",
    "{'k':[1,[2,3]]}",
    "{'k':[[1,2],[3,'x'],[4]],'k2':[[[5]]]}",
    "{'k':[{'j':[1]},{'k':[2,3]},[]]}",
    "{'j':{'k':[7,8]},'k2':{'k':[9]}}",
    "[1,2]",
    "{'k':[]}",
    "{'k':[1,2,]}",
    "{'k':[1 2]}",
    "{'k':[1,-]}",
    "{'k':[-]}",
    "{'k':[01]}",
    "{'k':[1,2",
    "{'k':[1,2,",
    "{'k':[1,2]",
    "{'k':[1e999,-1e-999,123456789012345678901234567890,0.000001]}",
};

/* Long packed arrays (the chunked fast path of json_parse.c takes 64 bytes
 * at a time once 80 remain) with one odd token put at every position:
 * packed and plain parses must agree on status, message and values. */
/* Runs around the sizes where pack_run changes course (json_parse.c): a
 * run of 4 KiB (512 numbers) or more joins the arena as its own block and
 * the next array starts a new one, a shorter one is copied and its block
 * reused; the block doubles when 64 numbers short of full (2048 numbers
 * first).  Arrays of those lengths one after another, nested, and ended by
 * a value that turns the run back into nodes, must read as the plain parse
 * does. */
START_TEST(json_packed_run_blocks) {
  if (!use_json_impl(_i)) return;
  static const int lens[] = {1,    63,   64,   511,  512, 513,
                             1983, 1984, 1985, 2048, 4100};
  enum { N_LENS = sizeof lens / sizeof *lens };
  size_t cap = 1 << 20, k;
  char *doc = malloc(cap), ctx[96];
  ck_assert_ptr_nonnull(doc);
  uint64_t rng = 0x51ab;
  for (int form = 0; form < 3; form++) {
    for (int a = 0; a < N_LENS; a++) {
      /* form 0: {"k":[A],"k2":[B],"k":[A]}; 1: {"k":[[A],[B],[A]]};
       * 2: {"k":[A numbers, then "x"]} (the run becomes nodes) */
      int b = (a * 7 + 3) % N_LENS;
      const int seq[3] = {lens[a], lens[b], lens[a]};
      k = (size_t)snprintf(doc, cap, form == 1 ? "{\"k\":[" : "{");
      for (int j = 0; j < (form == 2 ? 1 : 3); j++) {
        if (j) doc[k++] = ',';
        if (form == 0)
          k += (size_t)snprintf(doc + k, cap - k,
                                "\"%s\":", j == 1 ? "k2" : "k");
        if (form == 2) k += (size_t)snprintf(doc + k, cap - k, "\"k\":");
        doc[k++] = '[';
        for (int i = 0; i < seq[j]; i++) {
          uint64_t r = xs64(&rng);
          k += (size_t)snprintf(doc + k, cap - k, "%s%s%u.%06u", i ? "," : "",
                                r & 1 ? "-" : "", (unsigned)(r >> 8) % 10,
                                (unsigned)(r >> 32) % 1000000);
        }
        if (form == 2) k += (size_t)snprintf(doc + k, cap - k, ",\"x\"");
        doc[k++] = ']';
      }
      k += (size_t)snprintf(doc + k, cap - k, form == 1 ? "]}" : "}");
      ck_assert_uint_lt(k, cap);
      snprintf(ctx, sizeof ctx, "%s: form %d, %d / %d numbers", json_impls[_i],
               form, lens[a], lens[b]);
      check_packed_like_plain(doc, k, ATTN_JSON_MAX_NODES, ctx);
    }
  }
  free(doc);
  use_default_json_impl();
}
END_TEST

START_TEST(json_packed_long_runs) {
  if (!use_json_impl(_i)) return;
  /* clang-format off */
  static const char *const odd[] = {
      "01",  "1.",   ".5",     "-",     "--1",   "+1",   "1.2.3", "0x1",
      "1e5", "-0",   "1E-2",   "1e+",   "0.0",   "123456789.5",
      "1.123456789", "12345678.12345678", "true", "[1]",  "\"x\"", "null",
      "1 ",  " 1",   "1 ,",    ", 1",   "",      "1]",   "]",     "1,]",
      "9007199254740993", "-0.000001", "1\n", "\t2", "3\r", "1e400",
  };
  /* clang-format on */
  enum { COUNT = 40 };
  static const char pad_member[] =
      ",\"z\":\"0123456789012345678901234567890123456789012345678901234567"
      "890123\"}";
  char doc[1024], ctx[96];
  uint64_t rng = 0x1234567;
  for (size_t o = 0; o < sizeof odd / sizeof *odd; o++)
    for (int at = 0; at < COUNT; at++) {
      size_t k = (size_t)snprintf(doc, sizeof doc, "{\"k\":[");
      for (int i = 0; i < COUNT; i++) {
        if (i) doc[k++] = ',';
        if (i == at) {
          k += (size_t)snprintf(doc + k, sizeof doc - k, "%s", odd[o]);
        } else { /* short texts of varied length: "0.5", "-12.375", ... */
          uint64_t r = xs64(&rng);
          k += (size_t)snprintf(doc + k, sizeof doc - k, "%s%u.%0*u",
                                r & 1 ? "-" : "", (unsigned)(r >> 8) % 100,
                                1 + (int)(r >> 20) % 6,
                                (unsigned)(r >> 32) % 1000);
        }
      }
      k += (size_t)snprintf(doc + k, sizeof doc - k, "]}");
      ck_assert_uint_lt(k, sizeof doc);
      snprintf(ctx, sizeof ctx, "odd '%s' at %d", odd[o], at);
      check_packed_like_plain(doc, k, ATTN_JSON_MAX_NODES, ctx);
      /* again with 70 bytes after the array, so that a window holds its
       * ']' and the odd token before it */
      memcpy(doc + k - 1, pad_member, sizeof pad_member);
      check_packed_like_plain(doc, k - 1 + strlen(pad_member),
                              ATTN_JSON_MAX_NODES, ctx);
      doc[k - 1] = '}';
      if (at == 0) /* the node limit inside a run */
        for (size_t cap = 2; cap < COUNT + 3; cap += 3)
          check_packed_like_plain(doc, k, cap, ctx);
      /* and cut short at every byte from the odd token on */
      if (at == COUNT / 2)
        for (size_t cut = k / 2; cut < k; cut++)
          check_packed_like_plain(doc, cut, ATTN_JSON_MAX_NODES, ctx);
    }
  use_default_json_impl();
}
END_TEST

START_TEST(json_packed_like_plain) {
  if (!use_json_impl(_i)) return;
  char ctx[64];
  for (size_t i = 0; i < sizeof packed_docs / sizeof *packed_docs; i++) {
    char *j = unquote(packed_docs[i]);
    snprintf(ctx, sizeof ctx, "packed doc %zu", i);
    check_packed_like_plain(j, strlen(j), ATTN_JSON_MAX_NODES, ctx);
    for (size_t cap = 1; cap < 12; cap++) /* the node limit, everywhere */
      check_packed_like_plain(j, strlen(j), cap, ctx);
    for (size_t cut = 0; cut < strlen(j); cut++) /* every truncation */
      check_packed_like_plain(j, cut, ATTN_JSON_MAX_NODES, ctx);
    free(j);
  }
  /* every syntax case, as a packed member and inside a packed array */
  for (size_t i = 0; i < sizeof json_cases / sizeof *json_cases; i++) {
    const json_case *c = &json_cases[i];
    size_t n = c->len ? c->len : strlen(c->in);
    char *doc = malloc(2 * n + 32);
    ck_assert_ptr_nonnull(doc);
    size_t k = 6;
    memcpy(doc, "{\"k\":[", k);
    for (int rep = 0; rep < 2; rep++) {
      if (rep) doc[k++] = ',';
      for (size_t b = 0; b < n; b++)
        doc[k++] = c->in[b] == '\'' ? '"' : c->in[b];
    }
    memcpy(doc + k, "]}", 2);
    k += 2;
    snprintf(ctx, sizeof ctx, "json case %zu wrapped", i);
    check_packed_like_plain(doc, k, ATTN_JSON_MAX_NODES, ctx);
    free(doc);
  }
  use_default_json_impl();
}
END_TEST

/* A random token for json_packed_random_windows: mostly numbers of the
 * forms the 64-byte windows take (short decimals, integers, -0), often
 * forms they leave to the one-number parser (exponents, 16 or more bytes,
 * 17 significant digits), sometimes something malformed. */
static size_t gen_window_token(char *o, uint64_t *rng, bool allow_bad) {
  static const char *const bad[] = {
      "01", "1.", ".5", "-", "--1", "+1", "1.2.3", "0x1", "-.5", "1..2", "00",
      "-01", "1e", "1e+", "true", "\"a\"", "[1]", "{}", "null", "1-2", "0.5.",
      "1a", "\x01", "\xc3\xa9", "", "-0.", "1.e5",
      /* not JSON whitespace, though near it (VT, FF, 0x19, ')', 0xa0,
       * 0x89: low nibbles of ' ', '\t', '\n', '\r' or a high bit) */
      "\x0b", "\x0c1", "\x19", "1)", "\xa0", "\x89"};
  uint64_t r = xs64(rng);
  unsigned kind = (unsigned)(r % 100);
  size_t n = 0;
  if (kind < 2 && allow_bad) { /* malformed */
    const char *b = bad[(r >> 8) % (sizeof bad / sizeof *bad)];
    n = strlen(b);
    memcpy(o, b, n);
    return n;
  }
  if ((r >> 7) & 1) o[n++] = '-';
  if (kind < 10) { /* integer */
    unsigned nd = 1 + (unsigned)(r >> 12) % 17;
    for (unsigned i = 0; i < nd; i++)
      o[n++] = (char)('0' + (i == 0 && nd > 1 ? 1 + (r >> (20 + i)) % 9
                                              : (xs64(rng) % 10)));
    return n;
  }
  /* decimal: 1..9 integer digits (or "0"), 1..12 fraction digits */
  unsigned ni = (r >> 12) & 1 ? 1 + (unsigned)(r >> 13) % 9 : 0;
  unsigned nf = 1 + (unsigned)(r >> 17) % 12;
  if (ni == 0) o[n++] = '0';
  for (unsigned i = 0; i < ni; i++)
    o[n++] = (char)('0' + (i == 0 ? 1 + xs64(rng) % 9 : xs64(rng) % 10));
  o[n++] = '.';
  for (unsigned i = 0; i < nf; i++) o[n++] = (char)('0' + xs64(rng) % 10);
  if (kind >= 96) /* exponent */
    n += (size_t)snprintf(o + n, 8, "e%s%u", (r >> 30) & 1 ? "-" : "",
                          (unsigned)(r >> 31) % 40);
  return n;
}

/* Random packed arrays against the plain parse, every path: numbers of
 * mixed lengths, separators with and without whitespace, now and then an
 * error (malformed number, missing or doubled comma, trailing comma), a
 * node limit or a truncated body, so that each rule of the 64-byte window
 * (src/json/json_avx512.c, step 2) is met at every offset; a fifth
 * are valid arrays with other values among the numbers (the run becomes
 * nodes where one turns up). */
START_TEST(json_packed_random_windows) {
  if (!use_json_impl(_i)) return;
  static const char *const sep[] = {",",  ",",  ",",   ",",     ", ",
                                    ", ", " ,", " , ", ",\n  ", "\t,\r\n",
                                    ",,", "",   " ",   ", ,"};
  enum { DOCS = 6000 };
  char *doc = malloc(16384);
  ck_assert_ptr_nonnull(doc);
  char ctx[64];
  uint64_t rng = 0xC0FFEE123ull + (uint64_t)_i;
  for (int di = 0; di < DOCS; di++) {
    size_t k = (size_t)snprintf(doc, 8, "{\"k\":[");
    int count = 1 + (int)(xs64(&rng) % 200);
    unsigned cls = (unsigned)(xs64(&rng) % 8);
    bool clean = cls < 5;  /* 3/8 get odd separators and tokens */
    bool mixed = cls == 4; /* valid, with other values among the numbers */
    for (int i = 0; i < count; i++) {
      if (i) {
        uint64_t r = xs64(&rng);
        const char *sp = clean ? sep[r % 10] : sep[r % 14];
        if (!clean && r % 61 == 0) sp = sep[10 + (r >> 8) % 4];
        size_t l = strlen(sp);
        memcpy(doc + k, sp, l);
        k += l;
      }
      uint64_t v = xs64(&rng);
      if (mixed && v % 23 == 0) {
        static const char *const other[] = {
            "true", "null", "\"s\"", "[1,2]", "{\"a\":1}", "[]", "false"};
        const char *o = other[(v >> 8) % 7];
        memcpy(doc + k, o, strlen(o));
        k += strlen(o);
      } else {
        k += gen_window_token(doc + k, &rng, !clean);
      }
    }
    uint64_t r = xs64(&rng);
    /* half the arrays are followed by 70 more bytes, so that windows meet
     * the closing ']' too */
    k += (size_t)snprintf(doc + k, 120, "%s]%s}",
                          r % 9 == 0              ? " "
                          : r % 97 == 1 && !clean ? ","
                                                  : "",
                          (r >> 8) & 1 ? ",\"z\":\"0123456789012345678901234"
                                         "5678901234567890123456789012345678"
                                         "9\""
                                       : "");
    ck_assert_uint_lt(k, 16384);
    snprintf(ctx, sizeof ctx, "%s doc %d", json_impls[_i], di);
    check_packed_like_plain(doc, k, ATTN_JSON_MAX_NODES, ctx);
    if (di % 16 == 0) /* a node limit somewhere in the run */
      check_packed_like_plain(doc, k, 1 + xs64(&rng) % (size_t)(count + 2),
                              ctx);
    if (di % 16 == 1) /* cut short */
      check_packed_like_plain(doc, xs64(&rng) % k, ATTN_JSON_MAX_NODES, ctx);
  }
  free(doc);
  use_default_json_impl();
}
END_TEST

/* Every byte value next to, between and inside numbers of a packed array,
 * at several offsets into the windows, against the plain parse: the
 * classes of step 1 (src/json/json_avx512.c), whitespace above all, must
 * be exactly JSON's. */
START_TEST(json_packed_every_byte) {
  if (!use_json_impl(_i)) return;
  static const char *const around[][2] = {
      {"1,", "2"}, {"1", ",2"}, {"1", "2"}, {"1.", "5"}, {"-", "1"}};
  char doc[512], ctx[64];
  for (int b = 0; b < 256; b++)
    for (size_t pi = 0; pi < sizeof around / sizeof *around; pi++)
      for (int before = 0; before < 8; before++) {
        size_t k = (size_t)snprintf(doc, 16, "{\"k\":[");
        for (int i = 0; i < before; i++)
          k += (size_t)snprintf(doc + k, 16, "%d,", 10 + 7 * i);
        k += (size_t)snprintf(doc + k, 8, "%s", around[pi][0]);
        doc[k++] = (char)b;
        k += (size_t)snprintf(doc + k, 200,
                              "%s,-0.25,3.5,-17,0.125,9,-8.75,61,0.5,-2,44,"
                              "0.0625,-3,7.5,-11,0.75,13]}",
                              around[pi][1]);
        snprintf(ctx, sizeof ctx, "%s byte 0x%02x around %zu offset %d",
                 json_impls[_i], b, pi, before);
        check_packed_like_plain(doc, k, ATTN_JSON_MAX_NODES, ctx);
      }
  use_default_json_impl();
}
END_TEST

/* Numbers at the edges of what the 64-byte windows take (15 digits, a
 * token of 15 bytes or 16, '-0', a fraction of leading zeros) and forms
 * they leave to the one-number parser ("01" must fail at the same byte),
 * at every offset into a window, with several separators, and the ']' at
 * every distance from the end of the body (json_avx2.c reads its last
 * windows from a padded copy), against the plain parse, every path. */
START_TEST(json_packed_window_edges) {
  if (!use_json_impl(_i)) return;
  static const char *const edge[] = {"999999999999999",
                                     "-99999999999999",
                                     "100000000000001",
                                     "9.9999999999999",
                                     "-9.999999999999",
                                     "0.0000000000001",
                                     "-0.00000000000001",
                                     "99999999999999.9",
                                     "1234567890123456",
                                     "-0",
                                     "-0.0",
                                     "0",
                                     "-9",
                                     "0.5",
                                     "-1.25",
                                     "01",
                                     "-01",
                                     "1.",
                                     ".5",
                                     "1e5",
                                     "-",
                                     "00",
                                     "0.1.2",
                                     "1,,2",
                                     "9999999999999999"};
  static const char *const sep[] = {",", ", ", "\n,\n", " ,\t"};
  char doc[512], ctx[96];
  for (size_t t = 0; t < sizeof edge / sizeof *edge; t++)
    for (int off = 0; off < 70; off += 3)
      for (size_t si = 0; si < sizeof sep / sizeof *sep; si++) {
        size_t k = (size_t)snprintf(doc, 16, "{\"k\":[");
        /* off bytes of fillers "7," (and one "7" more when off is odd) */
        for (int i = 0; i + 1 < off; i += 2)
          k += (size_t)snprintf(doc + k, 4, "7,");
        if (off & 1) k += (size_t)snprintf(doc + k, 4, "70,");
        for (int rep = 0; rep < 6; rep++)
          k += (size_t)snprintf(doc + k, 64, "%s%s", rep ? sep[si] : "",
                                edge[t]);
        k += (size_t)snprintf(doc + k, 64, "%s-0.482913,0.5]", sep[si]);
        for (int tail = 0; tail < 90; tail += 7) {
          /* tail bytes of a string member after the array */
          size_t n = k;
          if (tail) {
            n += (size_t)snprintf(doc + n, 8, ",\"z\":\"");
            memset(doc + n, 'x', (size_t)tail);
            n += (size_t)tail;
            doc[n++] = '"';
          }
          doc[n++] = '}';
          snprintf(ctx, sizeof ctx, "%s: '%s' x6 at %d, sep %zu, tail %d",
                   json_impls[_i], edge[t], off, si, tail);
          check_packed_like_plain(doc, n, ATTN_JSON_MAX_NODES, ctx);
          if (tail == 0) /* the node limit inside the run */
            for (size_t cap = 2; cap < 40; cap += 5)
              check_packed_like_plain(doc, n, cap, ctx);
        }
      }
  use_default_json_impl();
}
END_TEST

/* The constructor picks the AVX-512 window on a CPU that has what it
 * needs, else the AVX2 one, else SSE2 (every x86-64 has it), and the hook
 * refuses unknown names. */
START_TEST(json_impl_default) {
  const char *want = "scalar";
#if defined(__x86_64__)
  want = "sse2";
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi") &&
      __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("popcnt"))
    want = "avx2";
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512vbmi") &&
      __builtin_cpu_supports("avx512vbmi2") && __builtin_cpu_supports("bmi2"))
    want = "avx512";
#endif
  ck_assert_str_eq(attn__json_impl_name(), want);
  ck_assert_int_eq(attn__json_set_impl("avx1024"), 0);
  ck_assert_str_eq(attn__json_impl_name(), want);
  ck_assert_int_eq(attn__json_set_impl("scalar"), 1);
  ck_assert_str_eq(attn__json_impl_name(), "scalar");
  use_default_json_impl();
  ck_assert_str_eq(attn__json_impl_name(), want);
}
END_TEST

/* attn_json_f64_to_f32 against the obvious loop: every length to 40, a value
 * out of range (or NaN) at every position or nowhere, and the floats.  In
 * range is what rounds to a finite float, (float)x finite: FLT_MAX's
 * shortest decimal 3.4028235e38 (above FLT_MAX as a double) and the double
 * just below the tie 2^128 - 2^103 are in, the tie is out. */
START_TEST(f64_to_f32_matches_loop) {
  double v[40];
  float got[40], want[40];
  const double bad[] = {1e39, -3.5e38, 0x1.ffffffp127, NAN, INFINITY};
  const double edge[] = {FLT_MAX, 3.4028235e38, 0x1.fffffefffffffp127};
  unsigned seed = 11;
  for (size_t n = 0; n <= 40; n++)
    for (size_t at = 0; at <= n; at++) { /* at == n: all in range */
      for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        v[i] = ((double)(seed >> 8) - 8388608.0) * 1e-3;
        if (i % 7 == 3) v[i] = (i & 1 ? -1 : 1) * edge[(n + i) % 3];
      }
      if (at < n) v[at] = (at & 1 ? -1 : 1) * bad[(n + at) % 5];
      size_t k = 0;
      for (; k < n && isfinite((float)v[k]); k++) want[k] = (float)v[k];
      memset(got, 0, sizeof got);
      ck_assert_uint_eq(attn_json_f64_to_f32(v, n, got), k);
      ck_assert_uint_eq(k, at < n ? at : n);
      ck_assert_int_eq(memcmp(got, want, k * sizeof *got), 0);
    }
  v[0] = 3.4028235e38; /* rounds to FLT_MAX, not refused */
  ck_assert_uint_eq(attn_json_f64_to_f32(v, 1, got), 1);
  ck_assert(got[0] == FLT_MAX);
}
END_TEST

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

Suite *json_suite(void) {
  Suite *s = suite_create("json");
  TCase *tc = tcase_create("json_parse");
  tcase_set_timeout(tc, 120); /* a million numbers, slower under ASan */
  tcase_add_loop_test(tc, json_syntax_table, 0, N_OF(json_cases));
  tcase_add_loop_test(tc, json_escapes_table, 0, N_OF(json_escapes));
  tcase_add_test(tc, json_depth_limit);
  tcase_add_test(tc, json_node_limit);
  tcase_add_test(tc, json_large_values);
  tcase_add_test(tc, json_numbers_match_strtod);
  tcase_add_test(tc, json_long_numbers_match_strtod);
  tcase_add_test(tc, json_short_numbers_match_strtod);
  tcase_add_test(tc, json_same_as_cjson);
  tcase_add_loop_test(tc, json_packed_like_plain, 0, N_OF(json_impls));
  tcase_add_loop_test(tc, json_packed_long_runs, 0, N_OF(json_impls));
  tcase_add_loop_test(tc, json_packed_run_blocks, 0, N_OF(json_impls));
  tcase_add_loop_test(tc, json_packed_random_windows, 0, N_OF(json_impls));
  tcase_add_loop_test(tc, json_packed_every_byte, 0, N_OF(json_impls));
  tcase_add_loop_test(tc, json_packed_window_edges, 0, N_OF(json_impls));
  tcase_add_test(tc, json_impl_default);
  tcase_add_test(tc, f64_to_f32_matches_loop);
  suite_add_tcase(s, tc);
  return s;
}
