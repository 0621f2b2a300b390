/* fuzz_http.c - libFuzzer target: the checks src/server/http.c makes on a
 * request's headers before its body is read, against a reference model
 * of RFC 9110 and 9112 written here:
 *   - check_framing (static; Content-Length, Transfer-Encoding and
 *     Inference-Header-Content-Length, every one of them): this file
 *     includes http.c and stands in for libmicrohttpd's
 *     MHD_get_connection_values, so the real function reads the fuzzed
 *     headers;
 *   - attn__header_number, attn__path_control and attn__target_path, on
 *     every header value.
 * The input is header lines ("Name: value", '\n' between them; a line
 * without ':' is skipped), as libmicrohttpd hands them over (the value's
 * leading whitespace removed).  Every input checks:
 *   - the status is 0, 400 or 501, and the message (when not 0) is a
 *     non-empty, terminated string;
 *   - a request is let through (0) only when its Content-Lengths agree,
 *     its Inference-Header-Content-Lengths agree, and its
 *     Transfer-Encoding is absent or exactly one "chunked": RFC 9112 6.1
 *     and 6.3, so that no two readers see different bodies (smuggling);
 *   - Content-Lengths that differ are a 400; a Transfer-Encoding whose
 *     last coding is not chunked is a 400 (the length is unknown); one
 *     that ends in chunked after other codings is a 501; a list that is
 *     not well formed (spaces inside a coding) may be either;
 *   - the connection is closed after any refusal, and after any request
 *     that has both Transfer-Encoding and Content-Length;
 *   - attn__header_number agrees with a reference parser (optional
 *     whitespace, digits, optional whitespace; past UINT64_MAX is 2);
 *   - on every header name and value, taken as a request target:
 *     attn__path_control finds the first control byte (below 0x20, or
 *     DEL) and attn__target_path gives an origin-form target as it is and
 *     an absolute-form one ("http://host/path") by its path, "/" when it
 *     has none (RFC 9112 3.2.2).
 * Any violation aborts (a crash for libFuzzer).
 *
 * Build and run: tests/fuzz/run.sh http [seconds]
 */
#include "../../src/server/http.c"

#include <stdio.h>

#define MAX_HEADERS 64

typedef struct hdr {
  const char *name, *value;
} hdr;

typedef struct fake_conn {
  hdr h[MAX_HEADERS];
  int n;
} fake_conn;

/* libmicrohttpd's, for the fake connection: every header in order. */
int MHD_get_connection_values(struct MHD_Connection *connection,
                              enum MHD_ValueKind kind,
                              MHD_KeyValueIterator iterator,
                              void *iterator_cls) {
  const fake_conn *fc = (const fake_conn *)connection;
  int i = 0;
  for (; i < fc->n; i++)
    if (iterator &&
        iterator(iterator_cls, kind, fc->h[i].name, fc->h[i].value) != MHD_YES)
      return i + 1;
  return i;
}

static void fail(const char *what, const char *detail) {
  fprintf(stderr, "fuzz_http: %s: %s\n", what, detail);
  abort();
}

/* ---- the reference -------------------------------------------------- */

static int ows(char c) {
  return c == ' ' || c == '\t';
}

static int number_ref(const char *v, uint64_t *out) {
  while (ows(*v)) v++;
  if (*v < '0' || *v > '9') return 0;
  uint64_t n = 0;
  int over = 0;
  for (; *v >= '0' && *v <= '9'; v++) {
    unsigned d = (unsigned)(*v - '0');
    if (n > (UINT64_MAX - d) / 10) over = 1;
    n = over ? UINT64_MAX : n * 10 + d;
  }
  while (ows(*v)) v++;
  if (*v) return 0;
  *out = n;
  return over ? 2 : 1;
}

/* The Transfer-Encoding codings of every header, as a list: how many,
 * whether the last non-empty one is "chunked", whether one has
 * whitespace inside it (not a token). */
typedef struct te_list {
  int n_headers, n_codings, last_chunked, malformed;
  const char *only; /* the value when there is one header */
} te_list;

static void te_add(te_list *t, const char *v) {
  t->only = t->n_headers++ ? NULL : v;
  for (const char *p = v; *p;) {
    const char *e = strchr(p, ',');
    if (!e) e = p + strlen(p);
    const char *a = p, *b = e;
    while (a < b && ows(*a)) a++;
    while (b > a && ows(b[-1])) b--;
    if (b > a) {
      t->n_codings++;
      t->last_chunked = b - a == 7 && !strncasecmp(a, "chunked", 7);
      for (const char *q = a; q < b; q++) t->malformed |= ows(*q);
    }
    p = *e ? e + 1 : e;
  }
}

typedef struct verdict {
  int status, must_close, either; /* either: 400 or 501 */
} verdict;

static int all_same(const fake_conn *fc, const char *name) {
  const char *first = NULL;
  for (int i = 0; i < fc->n; i++)
    if (!strcasecmp(fc->h[i].name, name)) {
      if (!first) first = fc->h[i].value;
      if (strcmp(first, fc->h[i].value)) return 0;
    }
  return 1;
}

static verdict framing_ref(const fake_conn *fc) {
  verdict v = {0, 0, 0};
  te_list t = {0};
  int n_cl = 0;
  for (int i = 0; i < fc->n; i++) {
    if (!strcasecmp(fc->h[i].name, "Content-Length")) n_cl++;
    if (!strcasecmp(fc->h[i].name, "Transfer-Encoding"))
      te_add(&t, fc->h[i].value);
  }
  v.must_close = t.n_headers && n_cl;
  if (!all_same(fc, "Content-Length") ||
      !all_same(fc, "Inference-Header-Content-Length"))
    return (verdict){400, 1, 0};
  if (!t.n_headers || (t.only && !strcasecmp(t.only, "chunked"))) return v;
  v.must_close = 1;
  v.status = t.last_chunked ? 501 : 400;
  v.either = t.malformed;
  return v;
}

/* ---- the target ------------------------------------------------------ */

/* attn__path_control and attn__target_path on v, as a decoded path and as
 * a request target: the first control byte (below 0x20, or DEL) and the
 * path of an absolute-form target, each found here independently. */
static void check_target(const char *v) {
  long want = -1;
  for (long i = 0; v[i]; i++)
    if ((unsigned char)v[i] < 0x20 || v[i] == 0x7f) {
      want = i;
      break;
    }
  if (attn__path_control(v) != want) fail("attn__path_control", v);
  const char *p = attn__target_path(v);
  size_t skip = !strncasecmp(v, "http://", 7)    ? 7
                : !strncasecmp(v, "https://", 8) ? 8
                                                 : 0;
  if (!skip) {
    if (p != v) fail("origin-form target changed", v);
    return;
  }
  const char *slash = strchr(v + skip, '/');
  if (slash ? p != slash : strcmp(p, "/") != 0)
    fail("absolute-form target: not its path", v);
}

static void check_numbers(const fake_conn *fc) {
  for (int i = 0; i < fc->n; i++) {
    uint64_t a = 7, b = 7;
    int ra = attn__header_number(fc->h[i].value, &a);
    int rb = number_ref(fc->h[i].value, &b);
    if (ra != rb || (ra && a != b))
      fail("attn__header_number differs from the reference", fc->h[i].value);
    check_target(fc->h[i].value);
    check_target(fc->h[i].name);
  }
}

/* Split text into header lines (in place). */
static void read_headers(char *text, fake_conn *fc) {
  for (char *line = text; line && fc->n < MAX_HEADERS;) {
    char *nl = strchr(line, '\n');
    if (nl) *nl = '\0';
    char *colon = strchr(line, ':');
    if (colon) {
      *colon = '\0';
      char *v = colon + 1;
      while (ows(*v)) v++;
      fc->h[fc->n++] = (hdr){line, v};
    }
    line = nl ? nl + 1 : NULL;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  fake_conn fc = {.n = 0};
  read_headers(text, &fc);
  conn_ctx cx = {.conn = (struct MHD_Connection *)&fc, .fd = -1};
  char msg[256];
  memset(msg, 'x', sizeof msg);
  int status = check_framing(&cx, msg, sizeof msg);
  verdict want = framing_ref(&fc);
  if (status != 0 && status != 400 && status != 501)
    fail("status", "not 0, 400 or 501");
  if (status && (!memchr(msg, 0, sizeof msg) || !msg[0]))
    fail("message", "empty or not terminated");
  if (!want.either && status != want.status) {
    fprintf(stderr, "status %d, reference %d\n", status, want.status);
    fail("framing differs from the reference", text);
  }
  if (want.either && status != 400 && status != 501)
    fail("a malformed Transfer-Encoding let through", text);
  if (cx.must_close != want.must_close)
    fail("Connection: close differs from the reference", text);
  check_numbers(&fc);
  free(text);
  return 0;
}
