/* fuzz_http.c - libFuzzer target: the checks src/server/http.c makes on a
 * request's headers before its body is read, against reference models
 * of RFC 9110 and 9112 and of libmicrohttpd 0.9.75 written here.  This
 * file includes http.c (its checks are static) and stands in for
 * libmicrohttpd's MHD_get_connection_values, MHD_get_connection_values_n
 * and MHD_get_connection_info (an executable's definitions win over the
 * shared library's), so the real functions read the fuzzed headers.
 *
 * The first input byte picks the mode (its low bit; the seeds use '0' and
 * '1'), the rest is the mode's input.
 *
 * Mode 0, the framing: the input is header lines ("Name: value", '\n'
 * between them; a line without ':' is skipped), as libmicrohttpd hands
 * them over (the value's leading whitespace removed), and check_framing
 * (Content-Length, Transfer-Encoding and Inference-Header-Content-Length,
 * every one of them) and the header-value helpers are checked
 * (check_framing_of):
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
 *
 * Mode 1, the header section: the input is the raw bytes that follow the
 * request line "GET / HTTP/1.1\r\n" (the header section, then perhaps a
 * body).  mhd_parse() leaves them as libmicrohttpd 0.9.75 does
 * (connection.c: get_next_header_line, process_header_line,
 * process_broken_line, the states URL_RECEIVED and HEADER_PART_RECEIVED,
 * parse_connection_headers): in place in its read buffer, each line end
 * (CR LF, or a bare LF) turned into NULs and the first colon of a header
 * line too, the value's leading blanks skipped and its end not trimmed,
 * a value cut at a NUL, a line ": v" (an empty name) after the first
 * header ending the section, a folded line (a line after a header that
 * starts with SP or HT) glued onto the previous header's NAME in a block
 * of its own (MHD_pool_reallocate, which zeroes the name and its colon
 * in the buffer); the headers listed as libmicrohttpd lists them, and
 * MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE.  The section's bytes are then
 * copied to a block of exactly that size, so that a read past either end
 * of it is a sanitizer report.  Inputs libmicrohttpd answers itself are
 * skipped (attnd never sees them): no end of the section yet, a header
 * line without a colon (400), a first Content-Length that is not a
 * number (400, 413).  section_ref() reads the same raw bytes strictly
 * (RFC 9112 2.2 and 5, RFC 9110 5.5 and 5.6.2): lines end with CR LF or a
 * bare LF (a CR not followed by LF ends nothing); up to the empty line,
 * each is token ":" OWS value, the value holding no byte below 0x20 but
 * HTAB (DEL and obs-text pass, as attnd lets them); no line starts with
 * SP or HT (obs-fold); the empty line must come.  Then:
 *   - well formed: check_headers must return NULL, and the headers
 *     libmicrohttpd lists must be the reference's, names and values byte
 *     for byte, in order, with header_size the section's length; then
 *     the framing checks above run on them, as on_headers runs them next;
 *   - malformed: check_headers must return a reason (and
 *     check_request_bytes answer 400 naming a header, and close), but
 *     for its blind spot.  check_headers sees only the buffer, where a
 *     bare LF is one NUL and a CR LF two, so a NUL right before a line
 *     end looks like part of one: "A: v\0\n" leaves "A: v\r\n" byte for
 *     byte, "A: v\0\0\n\n" and "A:\0\r\n\n" leave "...\r\n\r\n", a line
 *     "\0" before an LF leaves an empty line; such NULs cut nothing off.
 *     Precisely: a malformed input that libmicrohttpd leaves exactly as
 *     a well-formed one (indistinguishable(): the same section bytes,
 *     the same headers at the same places) and that is well formed
 *     without its NUL bytes may go either way, and when let through its
 *     headers must be those of the input without its NULs.  Any other
 *     malformed input let through is a finding, reported as one that
 *     check_headers could refuse, or as one that no check of the buffer
 *     can (indistinguishable, with a fault other than NULs: a line ":"
 *     ends the section there, its colon the NUL a line end leaves).
 *     FUZZ_HTTP_EXCUSE (see excuse_indistinguishable) lets a run go on
 *     past known findings.
 * Any violation aborts (a crash for libFuzzer), printing the input
 * escaped.
 *
 * Build and run: tests/fuzz/run.sh http [seconds]
 */
#include "../../src/server/http.c"

#include <stdio.h>

#define MAX_HEADERS 64

typedef struct hdr {
  const char *name, *value;
  size_t name_len, value_len;
} hdr;

typedef struct fake_conn {
  hdr *h;
  int n;
  int have_size; /* the section is read (else the size is NULL) */
  union MHD_ConnectionInfo info; /* .header_size */
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

/* The same with the sizes libmicrohttpd keeps (strlen of each, as it
 * adds them: connection_add_header). */
int MHD_get_connection_values_n(struct MHD_Connection *connection,
                                enum MHD_ValueKind kind,
                                MHD_KeyValueIteratorN iterator,
                                void *iterator_cls) {
  const fake_conn *fc = (const fake_conn *)connection;
  int i = 0;
  for (; i < fc->n; i++)
    if (iterator &&
        iterator(iterator_cls, kind, fc->h[i].name, fc->h[i].name_len,
                 fc->h[i].value, fc->h[i].value_len) != MHD_YES)
      return i + 1;
  return i;
}

/* Only MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE is known; NULL, as
 * libmicrohttpd answers before the section is read, otherwise. */
const union MHD_ConnectionInfo *MHD_get_connection_info(
    struct MHD_Connection *connection, enum MHD_ConnectionInfoType info_type,
    ...) {
  fake_conn *fc = (fake_conn *)connection;
  if (info_type != MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE || !fc->have_size)
    return NULL;
  return &fc->info;
}

/* The input being checked, for the message of a failure. */
static const uint8_t *cur_in;
static size_t cur_len;

static void print_escaped(const uint8_t *p, size_t n) {
  fputc('"', stderr);
  for (size_t i = 0; i < n; i++) {
    unsigned c = p[i];
    if (c == '\r')
      fputs("\\r", stderr);
    else if (c == '\n')
      fputs("\\n", stderr);
    else if (c == '\t')
      fputs("\\t", stderr);
    else if (c == '\\' || c == '"')
      fprintf(stderr, "\\%c", c);
    else if (c < 0x20 || c >= 0x7f)
      fprintf(stderr, "\\%03o", c); /* octal: at most 3 digits */
    else
      fputc((int)c, stderr);
  }
  fputs("\"\n", stderr);
}

static void fail(const char *what, const char *detail) {
  fprintf(stderr, "fuzz_http: %s: %s\n", what, detail);
  fprintf(stderr, "fuzz_http: the input (mode byte, then %zu bytes): ",
          cur_len ? cur_len - 1 : 0);
  if (cur_in) print_escaped(cur_in, cur_len);
  abort();
}

/* ---- the framing reference ------------------------------------------ */

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

/* ---- the framing target ---------------------------------------------- */

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

/* check_framing and the value helpers on the headers of fc. */
static void check_framing_of(fake_conn *fc) {
  conn_ctx cx = {.conn = (struct MHD_Connection *)fc, .fd = -1};
  char msg[256];
  memset(msg, 'x', sizeof msg);
  int status = check_framing(&cx, msg, sizeof msg);
  verdict want = framing_ref(fc);
  if (status != 0 && status != 400 && status != 501)
    fail("status", "not 0, 400 or 501");
  if (status && (!memchr(msg, 0, sizeof msg) || !msg[0]))
    fail("message", "empty or not terminated");
  if (!want.either && status != want.status) {
    fprintf(stderr, "status %d, reference %d\n", status, want.status);
    fail("framing differs from the reference", "");
  }
  if (want.either && status != 400 && status != 501)
    fail("a malformed Transfer-Encoding let through", "");
  if (cx.must_close != want.must_close)
    fail("Connection: close differs from the reference", "");
  check_numbers(fc);
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
      fc->h[fc->n++] = (hdr){line, v, strlen(line), strlen(v)};
    }
    line = nl ? nl + 1 : NULL;
  }
}

static void framing_mode(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text) return;
  memcpy(text, data, size);
  text[size] = '\0';
  hdr h[MAX_HEADERS];
  fake_conn fc = {.h = h};
  read_headers(text, &fc);
  check_framing_of(&fc);
  free(text);
}

/* ---- libmicrohttpd 0.9.75's header section, modelled ----------------- */

/* The request line of every section: what the method pointer is and how
 * long the line is are all that matter (parse_initial_message_line
 * leaves "GET\0/\0HTTP/1.1" and the line end two NULs). */
static const char req_line[] = "GET / HTTP/1.1\r\n";
#define REQ_LINE_LEN (sizeof req_line - 1)

typedef struct mhd_req {
  char *buf;  /* the read buffer: the request line, then the input */
  size_t len; /* its bytes */
  size_t pos; /* where the next line starts (read_buffer) */
  hdr *h;     /* the headers added (connection_add_header), in order */
  int n;
  char **moved; /* the folded names' own blocks */
  int n_moved;
  char *last, *colon; /* connection->last, connection->colon */
  size_t header_size;
} mhd_req;

typedef enum {
  MHD_CALLS_ATTND, /* the section is read: on_request is called */
  MHD_WAITS,       /* no end of the section yet */
  MHD_ANSWERS      /* libmicrohttpd answers itself (400, 413) */
} mhd_outcome;

static int in_buf(const mhd_req *m, const char *p) {
  return p >= m->buf && p < m->buf + m->len;
}

/* get_next_header_line: the next line, its end (CR LF or a bare LF; a CR
 * not followed by LF is no end) turned into NULs; NULL when no line is
 * whole yet. */
static char *mhd_line(mhd_req *m) {
  char *b = m->buf;
  for (size_t i = m->pos; i < m->len; i++) {
    int crlf = b[i] == '\r' && i + 1 < m->len && b[i + 1] == '\n';
    if (crlf || b[i] == '\n') {
      char *line = b + m->pos;
      b[i] = '\0';
      if (crlf) b[++i] = '\0';
      m->pos = i + 1;
      return line;
    }
  }
  return NULL;
}

/* process_header_line: the first colon (before any NUL) becomes a NUL,
 * the value starts past the blanks after it; 0: no colon (a 400). */
static int mhd_header_line(mhd_req *m, char *line) {
  char *colon = strchr(line, ':');
  if (!colon) return 0;
  *colon++ = '\0';
  while (*colon == ' ' || *colon == '\t') colon++;
  m->last = line;
  m->colon = colon;
  return 1;
}

/* The fold in process_broken_line: the line past its blanks appended to
 * the NAME (connection->last) by MHD_pool_reallocate, which moves a name
 * out of the read buffer into a block of its own and zeroes the bytes it
 * held (the name and its colon) there.  (A name that ends where the
 * buffer's pool block ends would be grown in place instead; a request
 * that fills its read buffer to its last 16 bytes, not one of these.) */
static void mhd_fold(mhd_req *m, const char *line) {
  size_t last_len = strlen(m->last);
  const char *tmp = line;
  while (*tmp == ' ' || *tmp == '\t') tmp++;
  size_t tmp_len = strlen(tmp);
  char *nk;
  if (in_buf(m, m->last)) {
    nk = malloc(last_len + tmp_len + 1);
    if (!nk) abort();
    memcpy(nk, m->last, last_len + 1);
    memset(m->last, 0, last_len + 1);
    m->moved[m->n_moved++] = nk;
  } else { /* moved already: the last block taken */
    nk = realloc(m->last, last_len + tmp_len + 1);
    if (!nk) abort();
    m->moved[m->n_moved - 1] = nk;
  }
  memcpy(nk + last_len, tmp, tmp_len + 1);
  m->last = nk;
}

static void mhd_add(mhd_req *m) {
  m->h[m->n++] = (hdr){m->last, m->colon, strlen(m->last), strlen(m->colon)};
}

/* The first header named name (as MHD_lookup_connection_value_n finds
 * it: the same length, case-insensitive), or NULL. */
static const hdr *mhd_lookup(const mhd_req *m, const char *name) {
  size_t n = strlen(name);
  for (int i = 0; i < m->n; i++)
    if (m->h[i].name_len == n && !strncasecmp(m->h[i].name, name, n))
      return &m->h[i];
  return NULL;
}

/* parse_connection_headers: with no Transfer-Encoding, the first
 * Content-Length must be digits only and fit in 64 bits (else 400 or
 * 413).  (No Host is required: attnd leaves strict_for_client at 0.) */
static int mhd_length_refused(const mhd_req *m) {
  if (mhd_lookup(m, "Transfer-Encoding")) return 0;
  const hdr *cl = mhd_lookup(m, "Content-Length");
  if (!cl) return 0;
  if (!cl->value_len) return 1;
  uint64_t v = 0;
  for (size_t i = 0; i < cl->value_len; i++) {
    unsigned d = (unsigned)(cl->value[i] - '0');
    if (d > 9 || v > (UINT64_MAX - d) / 10) return 1;
    v = v * 10 + d;
  }
  return 0;
}

/* The request line, then the states MHD_CONNECTION_URL_RECEIVED (no
 * header yet) and MHD_CONNECTION_HEADER_PART_RECEIVED (one is pending
 * in last/colon: it is added when the next line is not a fold). */
static mhd_outcome mhd_parse(mhd_req *m) {
  char *line = mhd_line(m);
  if (!line || m->pos != REQ_LINE_LEN) abort(); /* the fixed request line */
  m->buf[3] = m->buf[5] = '\0';                 /* "GET\0/\0HTTP/1.1" */
  int pending = 0;
  for (;;) {
    line = mhd_line(m);
    if (!line) return MHD_WAITS;
    if (!pending) { /* URL_RECEIVED */
      if (!line[0]) break;
      if (!mhd_header_line(m, line)) return MHD_ANSWERS;
      pending = 1;
      continue;
    }
    /* HEADER_PART_RECEIVED: process_broken_line */
    if (line[0] == ' ' || line[0] == '\t') {
      mhd_fold(m, line);
      continue;
    }
    mhd_add(m);
    /* the line is a header line, or ends the section: an empty line, a
     * line that starts with a NUL, and ": v" (its colon now a NUL) */
    if (line[0] && !mhd_header_line(m, line)) return MHD_ANSWERS;
    if (!line[0]) break;
  }
  m->header_size = m->pos; /* read_buffer - method */
  return mhd_length_refused(m) ? MHD_ANSWERS : MHD_CALLS_ATTND;
}

/* ---- the strict reference of a header section ------------------------ */

typedef struct span {
  const uint8_t *p;
  size_t n;
} span;

typedef struct ref_section {
  span *name, *value; /* the fields, in order (room for n / 2 + 2) */
  int n;
  size_t end;        /* the section's bytes, through its empty line */
  const char *fault; /* NULL: well formed */
} ref_section;

static int tchar_ref(uint8_t c) {
  static const char extra[] = "!#$%&'*+-.^_`|~";
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
      (c >= 'A' && c <= 'Z'))
    return 1;
  for (const char *e = extra; *e; e++)
    if (c == (uint8_t)*e) return 1;
  return 0;
}

/* RFC 9112 2.2 and 5, RFC 9110 5.5 and 5.6.2, on raw bytes: NULL when
 * r is a well-formed header section (with its empty line), else the
 * fault.  The value is kept as libmicrohttpd keeps it: its leading OWS
 * dropped, its trailing OWS not. */
static const char *section_ref(const uint8_t *r, size_t n, ref_section *s) {
  s->n = 0;
  for (size_t i = 0;;) {
    const uint8_t *lf = memchr(r + i, '\n', n - i);
    if (!lf) return s->fault = "no empty line ends the section";
    size_t e = (size_t)(lf - r);        /* the LF */
    size_t c = e;                       /* the line's content ends here */
    if (c > i && r[c - 1] == '\r') c--; /* CR LF */
    if (c == i) {
      s->end = e + 1;
      return s->fault = NULL;
    }
    if (r[i] == ' ' || r[i] == '\t') return s->fault = "obs-fold";
    size_t k = i;
    while (k < c && tchar_ref(r[k])) k++;
    if (k == i || k == c || r[k] != ':')
      return s->fault = "not token \":\" (no name, or a byte not a tchar)";
    size_t v = k + 1;
    while (v < c && (r[v] == ' ' || r[v] == '\t')) v++;
    for (size_t j = v; j < c; j++)
      if (r[j] < 0x20 && r[j] != '\t')
        return s->fault = "a control byte in a value";
    s->name[s->n] = (span){r + i, k - i};
    s->value[s->n] = (span){r + v, c - v};
    s->n++;
    i = e + 1;
  }
}

/* The input without its NUL bytes (into out): the blind spot's test
 * (see the top of this file). */
static size_t without_nuls(const uint8_t *r, size_t n, uint8_t *out) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (r[i]) out[k++] = r[i];
  return k;
}

/* libmicrohttpd's headers are the reference's, in order, byte for byte. */
static void same_headers(const fake_conn *fc, const ref_section *s) {
  if (fc->n != s->n) {
    fprintf(stderr, "%d headers, the reference %d\n", fc->n, s->n);
    fail("the headers differ from the reference", "how many");
  }
  for (int i = 0; i < s->n; i++) {
    const hdr *h = &fc->h[i];
    if (h->name_len != s->name[i].n ||
        memcmp(h->name, s->name[i].p, h->name_len))
      fail("a header name differs from the reference", h->name);
    if (h->value_len != s->value[i].n ||
        memcmp(h->value, s->value[i].p, h->value_len))
      fail("a header value differs from the reference", h->name);
  }
}

/* ---- the header-section target --------------------------------------- */

/* The input as libmicrohttpd leaves it (mhd_parse); m freed by
 * mhd_close whatever the outcome. */
static mhd_outcome mhd_open(mhd_req *m, const uint8_t *raw, size_t size) {
  size_t room = size / 2 + 2; /* a header line takes 2 bytes or more */
  *m = (mhd_req){.len = REQ_LINE_LEN + size};
  m->buf = malloc(m->len);
  m->h = malloc(room * sizeof *m->h);
  m->moved = malloc(room * sizeof *m->moved);
  if (!m->buf || !m->h || !m->moved) abort();
  memcpy(m->buf, req_line, REQ_LINE_LEN);
  memcpy(m->buf + REQ_LINE_LEN, raw, size);
  return mhd_parse(m);
}

static void mhd_close(mhd_req *m) {
  for (int i = 0; i < m->n_moved; i++) free(m->moved[i]);
  free(m->moved);
  free(m->h);
  free(m->buf);
}

/* Does libmicrohttpd leave this input (its section sec, header_size
 * bytes, and its headers fc) exactly as it leaves a well-formed one: the
 * same bytes, the same headers at the same places?  Then no check of
 * the buffer can tell them apart.  The well-formed one is rebuilt from
 * the buffer alone: each name's NUL a colon, each other run of NULs a
 * line end ("\n" or "\r\n"; the last run a line end and the empty line,
 * "\n\n", "\r\n\n" or "\r\n\r\n", or the empty line alone when no
 * header came), every other byte as it is; then read by the reference
 * and by the model again. */
static int indistinguishable(const char *sec, size_t size,
                             const fake_conn *fc) {
  uint8_t *colon = calloc(size, 1), *r = malloc(4 * size);
  if (!colon || !r) abort();
  for (int i = 0; i < fc->n; i++) {
    const char *k = fc->h[i].name;
    if (k < sec || k + fc->h[i].name_len >= sec + size)
      goto no; /* moved: no well-formed input moves a name */
    colon[k - sec + fc->h[i].name_len] = 1;
  }
  size_t n = 0;
  for (size_t i = REQ_LINE_LEN; i < size;) {
    if (colon[i] || sec[i]) {
      r[n++] = colon[i] ? ':' : (uint8_t)sec[i];
      i++;
      continue;
    }
    size_t j = i;
    while (j < size && !sec[j] && !colon[j]) j++;
    /* a line end; the last run is a line end and the empty line, or the
     * empty line alone when no header came */
    static const char *const mid[] = {"", "\n", "\r\n", "\r\n\n", "\r\n\r\n"};
    static const char *const last[] = {"", "", "\n\n", "\r\n\n", "\r\n\r\n"};
    static const char *const alone[] = {"", "\n", "\r\n", "", ""};
    const char *const *ends = j < size ? mid : i > REQ_LINE_LEN ? last : alone;
    if (j - i > 4 || strlen(ends[j - i]) != j - i) goto no;
    memcpy(r + n, ends[j - i], j - i);
    n += j - i;
    i = j;
  }
  ref_section s = {.name = malloc((n / 2 + 2) * sizeof(span)),
                   .value = malloc((n / 2 + 2) * sizeof(span))};
  if (!s.name || !s.value) abort();
  const char *fault = section_ref(r, n, &s);
  free(s.name);
  free(s.value);
  if (fault) goto no;
  mhd_req m2;
  int same = mhd_open(&m2, r, n) == MHD_CALLS_ATTND && m2.header_size == size &&
             !memcmp(m2.buf, sec, size) && m2.n == fc->n;
  for (int i = 0; same && i < fc->n; i++) {
    const hdr *a = &fc->h[i], *b = &m2.h[i];
    same = a->name - sec == b->name - m2.buf &&
           a->value - sec == b->value - m2.buf && a->name_len == b->name_len &&
           a->value_len == b->value_len;
  }
  mhd_close(&m2);
  free(colon);
  free(r);
  return same;
no:
  free(colon);
  free(r);
  return 0;
}

/* Known findings a run may excuse, by name in the environment variable
 * FUZZ_HTTP_EXCUSE (comma-separated), so that a long run goes on past
 * them.  "indistinguishable" is excused unless FUZZ_HTTP_EXCUSE is set
 * (to "none", say, for a strict run): it is a limit of libmicrohttpd
 * 0.9.75's buffer that attnd documents (docs/security.md, "What a proxy
 * in front may rely on"), not a fault check_headers can mend:
 *   indistinguishable  a malformed section let through that libmicrohttpd
 *                      leaves exactly as a well-formed one
 *                      (indistinguishable()), which no check of its
 *                      buffer can refuse: a line ":" ending the section
 *                      (libmicrohttpd ends it there; its colon becomes
 *                      the NUL a line end leaves), as "A: v\r\n:\n";
 *   no_header          a malformed section let through with no header
 *                      listed: a first line that starts with a NUL ends
 *                      the section for libmicrohttpd (found by this
 *                      target; fixed: check_headers walks from the
 *                      request line's end; see README.md). */
static int excuse_indistinguishable = 1, excuse_no_header;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  const char *e = getenv("FUZZ_HTTP_EXCUSE");
  if (!e) return 0;
  excuse_indistinguishable = strstr(e, "indistinguishable") != NULL;
  excuse_no_header = strstr(e, "no_header") != NULL;
  return 0;
}

static void section_mode(const uint8_t *data, size_t size) {
  size_t room = size / 2 + 2;
  ref_section s = {.name = malloc(room * sizeof(span)),
                   .value = malloc(room * sizeof(span))};
  uint8_t *alt = malloc(size + 1);
  char *sec = NULL;
  mhd_req m;
  if (!s.name || !s.value || !alt) abort();
  if (mhd_open(&m, data, size) != MHD_CALLS_ATTND) goto out;

  /* the section alone, in a block of its size; the headers into it */
  sec = malloc(m.header_size);
  if (!sec) abort();
  memcpy(sec, m.buf, m.header_size);
  for (int i = 0; i < m.n; i++) {
    hdr *h = &m.h[i];
    if (in_buf(&m, h->name)) h->name = sec + (h->name - m.buf);
    if (!in_buf(&m, h->value) || h->value + h->value_len >= m.buf + m.pos)
      fail("model", "a value outside the section");
    h->value = sec + (h->value - m.buf);
  }
  fake_conn fc = {.h = m.h, .n = m.n, .have_size = 1};
  fc.info.header_size = m.header_size;

  hdr_walk w;
  /* the request line's version, in place: "GET\0/\0HTTP/1.1" */
  const char *version = sec + 6;
  const char *why =
      check_headers((struct MHD_Connection *)&fc, sec, version, &w);
  const char *fault = section_ref(data, size, &s);
  if (!fault) {
    if (why) fail("a well-formed section refused", why);
    if (m.header_size != REQ_LINE_LEN + s.end)
      fail("header_size differs from the reference's end", "");
    same_headers(&fc, &s);
  } else if (why) {
    if (!w.name && m.n) fail("a refusal names no header", why);
  } else if (indistinguishable(sec, m.header_size, &fc)) {
    /* let through, and no check of the buffer could refuse it: the blind
     * spot when its only faults are NULs (see above), else a finding */
    size_t n = without_nuls(data, size, alt);
    if (!section_ref(alt, n, &s))
      same_headers(&fc, &s); /* those of the input without its NULs */
    else if (!excuse_indistinguishable)
      fail(
          "a malformed section let through, which libmicrohttpd leaves "
          "as a well-formed one (no check of the buffer can refuse it)",
          fault);
  } else if (!(excuse_no_header && !m.n)) { /* fixed: see README.md */
    fail("a malformed section let through", fault);
  }

  /* the caller: the same verdict, 400 and Connection: close, and a
   * message naming the header */
  conn_ctx cx = {.conn = (struct MHD_Connection *)&fc, .fd = -1};
  char msg[320];
  memset(msg, 'x', sizeof msg);
  int status = check_request_bytes(&cx, sec, version, "/", msg, sizeof msg);
  if (status != (why ? 400 : 0) || cx.must_close != !!why)
    fail("check_request_bytes differs from check_headers", why ? why : "");
  if (why && (!memchr(msg, 0, sizeof msg) ||
              (strncmp(msg, "the request header '", 20) &&
               (m.n || strncmp(msg, "the request line ", 17)))))
    fail("message", "not terminated, or naming no header");

  /* what on_headers checks next, on the headers let through */
  if (!why) check_framing_of(&fc);
out:
  mhd_close(&m);
  free(sec);
  free(alt);
  free(s.name);
  free(s.value);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!size) return 0;
  cur_in = data;
  cur_len = size;
  if (data[0] & 1)
    section_mode(data + 1, size - 1);
  else
    framing_mode(data + 1, size - 1);
  cur_in = NULL;
  cur_len = 0;
  return 0;
}
