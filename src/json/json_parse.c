/* json_parse.c - the request-body JSON parser: strict RFC 8259 in, a tree of
 * genuine cJSON structs out, every node and string in one arena.
 *
 * Why: a small inference request is mostly a few thousand JSON numbers, and
 * cJSON spends ~100 ns on each (a malloc per node, strtod plus localeconv()
 * per number).  Here a number costs a bump-pointer node and, in the common
 * case, one correctly rounded multiply or divide.
 *
 * Design
 *  - Grammar: exactly RFC 8259.  Whitespace is space, tab, LF and CR only;
 *    numbers follow the grammar to the letter (no leading zeros, '+', '.5',
 *    '5.', hex, NaN or Infinity); strings must be valid UTF-8 (RFC 8259 8.1),
 *    may not hold raw bytes below 0x20, and take only the escapes of section
 *    7.  \uXXXX becomes UTF-8, surrogate pairs one 4-byte sequence; a lone
 *    surrogate and \u0000 are errors (cJSON strings are NUL-terminated, so
 *    U+0000 could only be truncated silently).  One UTF-8 byte order mark at
 *    the start is skipped, as RFC 8259 8.1 allows and cJSON did.  1e999 is
 *    +inf like strtod (the codecs then report the value as out of range).
 *  - Iterative: an explicit stack of open containers (on the C stack up to
 *    ATTN_MAX_JSON_DEPTH, on the heap beyond), so a hostile body cannot
 *    exhaust the thread's stack whatever max_depth a caller passes.  Depth is
 *    checked at each '[' or '{' as it is met.
 *  - Tree: cJSON's conventions exactly, so cJSON's readers (GetArraySize,
 *    GetObjectItem*, ArrayForEach, PrintUnformatted) work unchanged: members
 *    carry their key in `string`; children are linked by next/prev, the last
 *    one's next is NULL and the first one's prev points to the last; the
 *    root's prev and next are NULL; true has valueint 1; a number has
 *    valuedouble and valueint = (int)valuedouble saturated to
 *    INT_MIN..INT_MAX.  Never give such a tree to cJSON_Delete.
 *  - Arena: a chain of malloc'd blocks, 16 KiB first and doubling up to 1 MiB.
 *    Nodes are bumped up from the bottom of a block and strings down from its
 *    top, so nodes stay aligned without padding.  A string larger than half
 *    a block gets a block of its own.  Block 1 is [jblock header][root node]
 *    [...]: the root is always the first node allocated, so attn_json_free
 *    finds the header just in front of the root and frees the chain hanging
 *    off it (newer blocks are linked in right after block 1).
 *  - Numbers: the grammar is checked by hand while up to 19 significant
 *    digits collect in a uint64 mantissa m (up to eight digits per step,
 *    without a branch on their count: take_digits) with a decimal exponent
 *    e.  When m <= 2^53 and |e| <= 22, m and 10^|e| are exact doubles and
 *    one IEEE multiply or divide gives the correctly rounded result
 *    (Clinger's fast path; 10^23.. via m*10^(e-22) when that product is
 *    still exact).  Up to 19 digits beyond that (Python's 17-digit reprs,
 *    for one) take the Eisel-Lemire method with a 128-bit table of powers
 *    of five (eisel_lemire, pow5_128.h), which gives the correctly rounded
 *    value or says it cannot.  What is left goes to strtod on a
 *    NUL-terminated copy of the token, so every result is bit-identical to
 *    strtod's (the process stays in the "C" locale).  Digits dropped past
 *    the 19th keep the fast path only if they are zeros.
 *  - Packed arrays (attn_json_parse_ex with pack_keys): the codecs read
 *    tensors, i.e. arrays of numbers under a few known member names, and a
 *    64-byte node per number costs more than parsing the number.  An array
 *    opened under a listed key, or inside such an array (through arrays
 *    only), that starts with a number is read by pack_run into a run of
 *    doubles, a malloc'd block with room for a jblock header in front.  At
 *    its ']' a short run (under JSON_RUN_DONATE bytes, such as a row of a
 *    nested matrix) is copied into the arena and its block reused for the
 *    next array; a longer one is trimmed with realloc and its block joins
 *    the arena as it is, so a tensor's numbers are never copied.  Either
 *    way the array node points at them (ATTN_JSON_PACKED, count in
 *    valuedouble).
 *    If a value other than a number turns up, the run becomes ordinary
 *    nodes and the generic loop carries on, so packing changes the shape of
 *    the tree, never the values, the errors or the byte they name.  While
 *    80 bytes remain, pack_chunk finds the delimiters of 64 bytes at once
 *    (SSE2) and converts each number of the common [-]I[.F] form from its
 *    known length (number_known), so the numbers of a chunk do not wait on
 *    each other; anything else goes through parse_number one at a time.
 *    On CPUs with AVX-512 VBMI2 json_avx512.c reads the windows instead
 *    (64 bytes each, up to 32 numbers converted together, as many windows
 *    per call as take something), and on CPUs with AVX2, BMI1/2 and POPCNT
 *    but not those (AMD Zen 2 and 3, Intel cores before Ice Lake)
 *    json_avx2.c does (same windows and contract, four numbers per
 *    division).  Which one (or neither: "sse2", "scalar") is used is set
 *    before main, the fastest the CPU has, and by the test hook
 *    attn__json_set_impl (internal.h).
 *  - Limits: at most max_nodes values (ATTN_JSON_MAX_NODES in production),
 *    checked before each node is allocated; string bytes are bounded by the
 *    body size.  Whatever fails, everything allocated so far is freed.
 *
 * Threads: reentrant; all state is on the caller's stack and in the arena of
 * the tree being built.
 */
#include <assert.h>
#include <cjson/cJSON.h>
#include <float.h>
#include <math.h>
#include <limits.h>
#include <stdalign.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attn/tensor.h" /* attn_f32_in_range */
#include "attn/json.h"
#include "internal.h"

/* ---- arena -------------------------------------------------------------- */

#define JSON_BLOCK_FIRST ((size_t)16 << 10)
#define JSON_BLOCK_MAX ((size_t)1 << 20)
#define JSON_MAGIC 0x4a534f4e41524e41ull /* "JSONARNA" */

/* Header of every block; in block 1 the root node follows it directly. */
typedef struct jblock {
  struct jblock *next; /* block 1: newest other block; others: next older */
  uint64_t magic;
} jblock;

_Static_assert(sizeof(jblock) % alignof(cJSON) == 0,
               "the root node must be aligned right after the block header");

typedef struct {
  jblock *first;
  char *lo, *hi;    /* free space of the current block: nodes at lo, strings
                       end at hi */
  size_t next_size; /* size of the next block */
} jarena;

/* Make the malloc'd block b part of the arena: block 1 when it is the
 * first, else linked in right after block 1. */
static void arena_link(jarena *a, jblock *b) {
  b->magic = JSON_MAGIC;
  if (!a->first) {
    b->next = NULL;
    a->first = b;
  } else {
    b->next = a->first->next;
    a->first->next = b;
  }
}

/* Link a new block of `size` bytes (header included) after block 1.
 * Returns NULL when out of memory; the arena is unchanged then. */
static jblock *arena_block(jarena *a, size_t size) {
  jblock *b = malloc(size);
  if (!b) return NULL;
  arena_link(a, b);
  return b;
}

/* Make the next block current.  Returns false when out of memory. */
static bool arena_grow(jarena *a) {
  jblock *b = arena_block(a, a->next_size);
  if (!b) return false;
  a->lo = (char *)(b + 1);
  a->hi = (char *)b + a->next_size;
  if (a->next_size < JSON_BLOCK_MAX) a->next_size *= 2;
  return true;
}

static void arena_free_chain(jblock *b) {
  while (b) {
    jblock *next = b->next;
    free(b);
    b = next;
  }
}

/* n bytes for a string (no alignment).  NULL when out of memory. */
static char *arena_bytes(jarena *a, size_t n) {
  if ((size_t)(a->hi - a->lo) >= n) {
    a->hi -= n;
    return a->hi;
  }
  if (n > a->next_size / 2) { /* a block of its own */
    if (n > SIZE_MAX - sizeof(jblock)) return NULL;
    jblock *b = arena_block(a, sizeof(jblock) + n);
    return b ? (char *)(b + 1) : NULL;
  }
  if (!arena_grow(a)) return NULL;
  a->hi -= n;
  return a->hi;
}

/* n bytes (a multiple of 8) from the node end of the arena, so 8-byte
 * aligned like the nodes.  NULL when out of memory. */
static void *arena_words(jarena *a, size_t n) {
  void *r;
  if ((size_t)(a->hi - a->lo) < n) {
    if (n > a->next_size / 2) { /* a block of its own */
      if (n > SIZE_MAX - sizeof(jblock)) return NULL;
      jblock *b = arena_block(a, sizeof(jblock) + n);
      return b ? (void *)(b + 1) : NULL;
    }
    if (!arena_grow(a)) return NULL;
  }
  r = a->lo;
  a->lo += n;
  return r;
}

/* ---- parser state ------------------------------------------------------- */

/* An open array or object. */
typedef struct {
  cJSON *node;
  cJSON *last; /* last child so far, NULL while empty */
  bool pack;   /* an array whose arrays of numbers are packed (see DESIGN) */
} jframe;

#define JSON_INLINE_FRAMES ATTN_MAX_JSON_DEPTH

typedef struct {
  const char *base, *p, *end;
  jarena a;
  size_t nodes, max_nodes, max_depth;
  jframe *frames; /* open containers, innermost last */
  size_t n_frames, cap_frames;
  jframe inline_frames[JSON_INLINE_FRAMES];
  cJSON *root; /* the first node, set when it is allocated */
  attn_diag *d;
  const char *const *pack_keys; /* NULL: pack nothing */
  jblock *run_block; /* the run's malloc'd block, not yet in the arena */
  double *run;       /* numbers of the array being packed: run_block + 1 */
  size_t run_cap;    /* numbers the block holds */
} jparser;

#if defined(__GNUC__)
#define JSON_COLD __attribute__((cold, noinline))
#else
#define JSON_COLD
#endif

JSON_COLD static attn_status malformed(jparser *ps, const char *at) {
  return attn_diag_set(ps->d, ATTN_EPARSE, "malformed JSON at byte %zu",
                       (size_t)(at - ps->base));
}

JSON_COLD static attn_status out_of_memory(jparser *ps) {
  return attn_diag_set(ps->d, ATTN_ENOMEM, "out of memory parsing JSON");
}

static inline const char *skip_ws(const char *p, const char *end) {
  while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
  return p;
}

static inline bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

/* new_node's slow path: the node limit, or a new block.  Returns ATTN_OK
 * when a node fits in the current block. */
JSON_COLD static attn_status node_room(jparser *ps) {
  if (ps->nodes >= ps->max_nodes)
    return attn_diag_set(ps->d, ATTN_ETOOBIG,
                         "JSON has more than %zu values; send large tensors "
                         "with the binary extension",
                         ps->max_nodes);
  if ((size_t)(ps->a.hi - ps->a.lo) < sizeof(cJSON) && !arena_grow(&ps->a))
    return out_of_memory(ps);
  return ATTN_OK;
}

/* A zeroed node linked as the next value of the innermost container (or as
 * the root), carrying key (NULL outside objects).  NULL with the error set
 * in *s when the node limit is reached or memory runs out. */
static inline cJSON *new_node(jparser *ps, const char *key, attn_status *s) {
  jarena *a = &ps->a;
  if ((ps->nodes >= ps->max_nodes || (size_t)(a->hi - a->lo) < sizeof(cJSON)) &&
      (*s = node_room(ps)) != ATTN_OK)
    return NULL;
  cJSON *n = (cJSON *)(void *)a->lo;
  a->lo += sizeof(cJSON);
  ps->nodes++;
  memset(n, 0, sizeof *n);
  n->string = (char *)key;
  if (ps->n_frames) {
    jframe *f = &ps->frames[ps->n_frames - 1];
    if (f->last) {
      f->last->next = n;
      n->prev = f->last;
    } else {
      f->node->child = n;
    }
    f->last = n;
  } else {
    ps->root = n;
  }
  return n;
}

/* Open container node at ps->p ('[' or '{').  Errors: ATTN_EINVAL (deeper
 * than max_depth: a malformed request, not a large one), ATTN_ENOMEM. */
static attn_status push_frame(jparser *ps, cJSON *node, bool pack) {
  if (ps->n_frames >= ps->max_depth)
    return attn_diag_set(ps->d, ATTN_EINVAL,
                         "JSON nested deeper than %zu levels at byte %zu",
                         ps->max_depth, (size_t)(ps->p - ps->base));
  if (ps->n_frames == ps->cap_frames) {
    size_t cap = ps->cap_frames * 2;
    jframe *f = ps->frames == ps->inline_frames
                    ? malloc(cap * sizeof *f)
                    : realloc(ps->frames, cap * sizeof *f);
    if (!f) return out_of_memory(ps);
    if (ps->frames == ps->inline_frames)
      memcpy(f, ps->inline_frames, sizeof ps->inline_frames);
    ps->frames = f;
    ps->cap_frames = cap;
  }
  ps->frames[ps->n_frames].node = node;
  ps->frames[ps->n_frames].last = NULL;
  ps->frames[ps->n_frames].pack = pack;
  ps->n_frames++;
  return ATTN_OK;
}

/* Close the innermost container: the first child's prev points to the last
 * child, as cJSON links them. */
static void pop_frame(jparser *ps) {
  jframe *f = &ps->frames[--ps->n_frames];
  if (f->last) f->node->child->prev = f->last;
}

/* ---- numbers ------------------------------------------------------------ */

/* 10^0 .. 10^22: every one is an exact double (5^22 < 2^53). */
static const double pow10_exact[] = {
    1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

#define TWO_POW_53_U ((uint64_t)1 << 53)

/* The correctly rounded value of m * 10^e, or false when one IEEE operation
 * cannot give it.  Needs double arithmetic without excess precision. */
static inline bool fast_decimal(uint64_t m, int64_t e, double *out) {
#if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD == 0
  if (m > TWO_POW_53_U) return false;
  if (e >= -22 && e <= 22) {
    double x = (double)m; /* exact */
    *out = e < 0 ? x / pow10_exact[-e] : x * pow10_exact[e];
    return true;
  }
  if (e > 22 && e <= 22 + 15) {
    uint64_t k = (uint64_t)pow10_exact[e - 22]; /* 10^(e-22), exact */
    if (m > TWO_POW_53_U / k) return false;
    /* m * 10^(e-22) is an integer <= 2^53, so exact: one rounding left */
    *out = (double)(m * k) * 1e22;
    return true;
  }
#else
  (void)m, (void)e, (void)out;
#endif
  return false;
}

#if defined(__SIZEOF_INT128__)
#include "pow5_128.h"
#define JSON_EISEL_LEMIRE 1

/* floor(a / 2^16) for any sign (>> of a negative value is the
 * implementation's choice in C). */
static inline int64_t floor_div65536(int64_t a) {
  return a >= 0 ? a / 65536 : -((-a + 65535) / 65536);
}

/* The correctly rounded double of m * 10^q (m >= 1, every significant digit
 * of the text), or false when it cannot be decided here; the caller then
 * asks strtod.  Eisel and Lemire's method (Lemire, "Number Parsing at a
 * Gigabyte per Second", 2021), in this form:
 *   w = m << lz is in [2^63, 2^64); T = ATTN__POW5[q] is 5^q scaled into
 *   [2^127, 2^128) with |T - exact| < 1 (pow5_128.h).  The 192-bit product
 *   P = w * T (two 64x64 multiplies) then differs from the exact product
 *   X by less than w < 2^64.  X's top 54 bits (53 and a rounding bit) are
 *   P's unless P's remaining bits (the sticky part) lie within 2^64 of a
 *   multiple of the rounding unit: that is when the discarded bits of the
 *   high word and the whole middle word are all 0 or all 1, and then
 *   strtod decides.  Otherwise the sticky part of X is not zero, so X is
 *   no tie: a rounding bit of 1 rounds up, 0 down.
 *   The exponent: X = w * T * 2^(q + floor(q log2 5) - 127 - lz), so the
 *   double's unbiased exponent is floor(q log2 10) + 63 + upper - lz,
 *   upper = P's top bit; floor(q log2 10) = floor(217706 q / 2^16) over the
 *   table's range (checked by scripts/gen_pow5.py).
 *   Subnormal and overflowing results go to strtod too. */
static bool eisel_lemire(uint64_t m, int64_t q, double *out) {
  if (q < ATTN__POW5_Q_MIN || q > ATTN__POW5_Q_MAX) return false;
  int lz = __builtin_clzll(m);
  uint64_t w = m << lz;
  const uint64_t *t = ATTN__POW5[q - ATTN__POW5_Q_MIN];
  unsigned __int128 a = (unsigned __int128)w * t[0];
  unsigned __int128 b = (unsigned __int128)w * t[1];
  uint64_t mid = (uint64_t)a + (uint64_t)(b >> 64);
  uint64_t hi = (uint64_t)(a >> 64) + (mid < (uint64_t)a);
  int upper = (int)(hi >> 63);
  uint64_t low = ((uint64_t)1 << (9 + upper)) - 1; /* below the 54 bits */
  if (((hi & low) == 0 && mid == 0) || ((hi & low) == low && mid == UINT64_MAX))
    return false;
  uint64_t mant = hi >> (9 + upper);
  int64_t e = floor_div65536(217706 * q) + 63 + upper - lz + 1023;
  mant = (mant + 1) >> 1;
  if (mant == (uint64_t)1 << 53) {
    mant >>= 1;
    e++;
  }
  if (e <= 0 || e >= 2047) return false;
  uint64_t bits = (mant & (((uint64_t)1 << 52) - 1)) | ((uint64_t)e << 52);
  memcpy(out, &bits, sizeof bits);
  return true;
}
#else
#define JSON_EISEL_LEMIRE 0
#endif

/* strtod on a NUL-terminated copy of the checked token [s, e). */
static attn_status slow_decimal(jparser *ps, const char *s, const char *e,
                                double *out) {
  size_t n = (size_t)(e - s);
  char small[128], *buf = small;
  if (n >= sizeof small && !(buf = arena_bytes(&ps->a, n + 1)))
    return out_of_memory(ps);
  memcpy(buf, s, n);
  buf[n] = '\0';
  *out = strtod(buf, NULL);
  return ATTN_OK;
}

/* Eight digit values as bytes of x (first digit lowest; zero bytes above a
 * shorter run are leading zeros) -> their decimal value: neighbours merge
 * into 2-, 4- and 8-digit values with one multiply each (no lane can carry
 * into the next). */
static inline uint64_t merge8(uint64_t x) {
  x = (x * 10 + (x >> 8)) & 0x00FF00FF00FF00FFull;        /* 2 digits */
  x = (x * 100 + (x >> 16)) & 0x0000FFFF0000FFFFull;      /* 4 digits */
  return (x * 10000 + (x >> 32)) & 0x00000000FFFFFFFFull; /* 8 digits */
}

/* 10^0 .. 10^8 as integers. */
static const uint64_t pow10_u64[9] = {
    1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000};

/* Read digits at [p, end) into *m (at most `room` of them); returns the end
 * of the digits taken.  Eight bytes at a time where they are there to read:
 * with the bytes as one little-endian word (first digit lowest) XORed with
 * '0', a byte is a digit iff its value is below 10; the first byte that is
 * not gives the run length (1 bit per byte, counted with ctz), the digits
 * are shifted to the top of the word (zeros above the run are leading
 * zeros) and merged (merge8).  No branch depends on how many digits there
 * are, up to eight. */
static inline const char *take_digits(const char *p, const char *end, int room,
                                      uint64_t *m) {
  uint64_t v = *m;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ && \
    defined(__GNUC__)
  const uint64_t ones = 0x0101010101010101ull;
  while (room >= 8 && end - p >= 8) {
    uint64_t x;
    memcpy(&x, p, 8);
    x ^= 0x30 * ones; /* digit value */
    uint64_t nd = (((x & 0x7F * ones) + 0x76 * ones) | x) & 0x80 * ones;
    int n = nd ? __builtin_ctzll(nd) >> 3 : 8; /* digits in this word */
    if (n == 0) break;
    v = v * pow10_u64[n] + merge8(x << (64 - 8 * n));
    p += n;
    room -= n;
    if (n < 8) {
      *m = v;
      return p;
    }
  }
#endif
  for (; room > 0 && p < end && is_digit(*p); room--) v = v * 10 + (*p++ - '0');
  *m = v;
  return p;
}

/* The number at ps->p (a '-' or digit); ps->p moves past it.  The byte after
 * the token is left to the caller (so "01" fails at the '1').
 * Errors: ATTN_EPARSE, ATTN_ENOMEM (very long tokens only). */
static attn_status parse_number(jparser *ps, double *out) {
  const char *s = ps->p, *p = s, *end = ps->end;
  bool neg = false, exact = true;
  uint64_t m = 0;
  int64_t e10 = 0;
  int nd = 0; /* significant digits in m */
  if (*p == '-') {
    neg = true;
    p++;
  }
  if (p == end || !is_digit(*p)) return malformed(ps, p);
  if (*p == '0') {
    p++;
  } else { /* the first 19 digits go to m, later ones only scale it */
    const char *d0 = p;
    p = take_digits(p, end, 19, &m);
    nd = (int)(p - d0);
    for (; p < end && is_digit(*p); p++) {
      e10++;
      exact &= *p == '0';
    }
  }
  if (p < end && *p == '.') {
    p++;
    if (p == end || !is_digit(*p)) return malformed(ps, p);
    if (m == 0) { /* leading zeros of 0.000x are not significant */
      const char *z = p;
      while (p < end && *p == '0') p++;
      e10 -= p - z;
    }
    const char *d0 = p;
    p = take_digits(p, end, 19 - nd, &m);
    e10 -= p - d0;
    nd += (int)(p - d0);
    for (; p < end && is_digit(*p); p++) exact &= *p == '0';
  }
  if (p < end && (*p == 'e' || *p == 'E')) {
    bool eneg = false;
    int64_t x = 0;
    p++;
    if (p < end && (*p == '+' || *p == '-')) eneg = *p++ == '-';
    if (p == end || !is_digit(*p)) return malformed(ps, p);
    do { /* past 10^8 only under- or overflow is possible: stop counting */
      if (x < 100000000) x = x * 10 + (*p - '0');
      p++;
    } while (p < end && is_digit(*p));
    e10 += eneg ? -x : x;
  }
  ps->p = p;
  double v;
  if (m == 0) { /* all digits zero: a signed zero whatever the exponent */
    *out = neg ? -0.0 : 0.0;
    return ATTN_OK;
  }
  if (exact && fast_decimal(m, e10, &v)) {
    *out = neg ? -v : v;
    return ATTN_OK;
  }
#if JSON_EISEL_LEMIRE
  if (exact && eisel_lemire(m, e10, &v)) {
    *out = neg ? -v : v;
    return ATTN_OK;
  }
#endif
  return slow_decimal(ps, s, p, out);
}

/* ---- strings ------------------------------------------------------------ */

static int hex4(const char *p) {
  int v = 0;
  for (int i = 0; i < 4; i++) {
    char c = p[i];
    v <<= 4;
    if (c >= '0' && c <= '9')
      v |= c - '0';
    else if (c >= 'a' && c <= 'f')
      v |= c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      v |= c - 'A' + 10;
    else
      return -1;
  }
  return v;
}

/* Length of the well-formed UTF-8 sequence at q (lead byte >= 0x80) ending
 * before r, or 0 (Unicode 15, table 3-7: no overlongs, no surrogates,
 * nothing above U+10FFFF). */
static size_t utf8_seq(const unsigned char *q, const unsigned char *r) {
  unsigned c = q[0], lo = 0x80, hi = 0xBF;
  size_t need;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if ((size_t)(r - q) <= need || q[1] < lo || q[1] > hi) return 0;
  for (size_t i = 2; i <= need; i++)
    if ((q[i] & 0xC0) != 0x80) return 0;
  return need + 1;
}

static char *put_utf8(char *o, unsigned cp) {
  if (cp < 0x80) {
    *o++ = (char)cp;
  } else if (cp < 0x800) {
    *o++ = (char)(0xC0 | cp >> 6);
    *o++ = (char)(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *o++ = (char)(0xE0 | cp >> 12);
    *o++ = (char)(0x80 | (cp >> 6 & 0x3F));
    *o++ = (char)(0x80 | (cp & 0x3F));
  } else {
    *o++ = (char)(0xF0 | cp >> 18);
    *o++ = (char)(0x80 | (cp >> 12 & 0x3F));
    *o++ = (char)(0x80 | (cp >> 6 & 0x3F));
    *o++ = (char)(0x80 | (cp & 0x3F));
  }
  return o;
}

/* Decode the string body [s, r) into o (room for r - s bytes: no escape
 * grows).  Returns the end of the output, or NULL with *bad at the offending
 * byte (an escape's backslash, a control byte, a bad UTF-8 lead byte). */
static char *decode_string(const char *s, const char *r, char *o,
                           const char **bad) {
  const char *q = s;
  while (q < r) {
    unsigned char c = (unsigned char)*q;
    if (c >= 0x20 && c < 0x80 && c != '\\') {
      *o++ = (char)c;
      q++;
    } else if (c >= 0x80) {
      size_t k = utf8_seq((const unsigned char *)q, (const unsigned char *)r);
      if (!k) break;
      memcpy(o, q, k);
      o += k;
      q += k;
    } else if (c < 0x20) {
      break;
    } else if (r - q < 2) { /* a backslash ends an unterminated string */
      *bad = r;
      return NULL;
    } else {
      static const char esc_in[8] = "\"\\/bfnrt",
                        esc_out[8] = "\"\\/\b\f\n\r\t";
      const char *k = memchr(esc_in, q[1], sizeof esc_in);
      if (k) {
        *o++ = esc_out[k - esc_in];
        q += 2;
        continue;
      }
      if (q[1] != 'u') break;
      int cp = r - q >= 6 ? hex4(q + 2) : -1;
      if (cp <= 0 || (cp >= 0xDC00 && cp <= 0xDFFF)) break; /* \u0000 too */
      if (cp >= 0xD800 && cp <= 0xDBFF) { /* needs a low surrogate next */
        int lo = r - q >= 12 && q[6] == '\\' && q[7] == 'u' ? hex4(q + 8) : -1;
        if (lo < 0xDC00 || lo > 0xDFFF) break;
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        q += 6;
      }
      o = put_utf8(o, (unsigned)cp);
      q += 6;
    }
  }
  if (q < r) {
    *bad = q;
    return NULL;
  }
  return o;
}

/* The string at ps->p (a '"'), as a new NUL-terminated arena string in *out;
 * ps->p moves past the closing quote.  Errors: ATTN_EPARSE, ATTN_ENOMEM. */
static attn_status parse_string(jparser *ps, char **out) {
  const char *s = ps->p + 1, *q = s, *end = ps->end;
  while (q < end) { /* plain ASCII runs need no decoding */
    unsigned char c = (unsigned char)*q;
    if (c == '"') {
      size_t n = (size_t)(q - s);
      char *o = arena_bytes(&ps->a, n + 1);
      if (!o) return out_of_memory(ps);
      memcpy(o, s, n);
      o[n] = '\0';
      *out = o;
      ps->p = q + 1;
      return ATTN_OK;
    }
    if (c == '\\' || c < 0x20 || c >= 0x80) break;
    q++;
  }
  const char *r = q; /* find the closing quote, skipping escaped bytes */
  while (r < end && *r != '"') {
    if (*r == '\\' && ++r == end) break;
    r++;
  }
  char *o = arena_bytes(&ps->a, (size_t)(r - s) + 1), *oe;
  if (!o) return out_of_memory(ps);
  const char *bad = NULL;
  memcpy(o, s, (size_t)(q - s));
  if (!(oe = decode_string(q, r, o + (q - s), &bad))) return malformed(ps, bad);
  if (r == end) return malformed(ps, end); /* unterminated */
  *oe = '\0';
  *out = o;
  ps->p = r + 1;
  return ATTN_OK;
}

/* ---- values ------------------------------------------------------------- */

/* The literal word at ps->p; on mismatch the error names the first byte
 * that differs (or the end of the body). */
static attn_status parse_literal(jparser *ps, const char *word, size_t n) {
  const char *p = ps->p;
  for (size_t i = 0; i < n; i++)
    if (p + i == ps->end || p[i] != word[i]) return malformed(ps, p + i);
  ps->p = p + n;
  return ATTN_OK;
}

/* After '{' or ',' in an object: the key string, ':', and whitespace up to
 * the value.  Errors: ATTN_EPARSE, ATTN_ENOMEM. */
static attn_status parse_key(jparser *ps, char **key) {
  if (ps->p == ps->end || *ps->p != '"') return malformed(ps, ps->p);
  attn_status s = parse_string(ps, key);
  if (s != ATTN_OK) return s;
  ps->p = skip_ws(ps->p, ps->end);
  if (ps->p == ps->end || *ps->p != ':') return malformed(ps, ps->p);
  ps->p = skip_ws(ps->p + 1, ps->end);
  return ATTN_OK;
}

/* ---- packed arrays of numbers ------------------------------------------ */

/* Does an array opened with `key` (NULL inside arrays) get packed? */
static bool pack_here(const jparser *ps, const char *key) {
  if (!ps->pack_keys) return false;
  if (!key) return ps->n_frames && ps->frames[ps->n_frames - 1].pack;
  for (const char *const *k = ps->pack_keys; *k; k++)
    if (strcmp(*k, key) == 0) return true;
  return false;
}

/* The value of a number node. */
static void set_number(cJSON *n, double v) {
  n->type = cJSON_Number;
  n->valuedouble = v;
  n->valueint = v >= (double)INT_MAX   ? INT_MAX
                : v <= (double)INT_MIN ? INT_MIN
                                       : (int)v;
}

/* Bytes scanned at once by pack_chunk (one bit each in a uint64). */
#define CHUNK 64

#if defined(__SSE2__) && defined(__GNUC__) && defined(__BYTE_ORDER__) &&     \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ && defined(FLT_EVAL_METHOD) && \
    FLT_EVAL_METHOD == 0
#include <emmintrin.h>
#define JSON_CHUNKS 1

/* CHUNK_READ bytes must remain readable from a chunk's start (a number
 * text at its end is read 16 bytes at a time). */
#define CHUNK_READ (CHUNK + 16)

/* Bit i set when p[i] (0 <= i < 64) is ',', ']' or JSON whitespace. */
static inline uint64_t chunk_delims(const char *p) {
  const __m128i comma = _mm_set1_epi8(','), close = _mm_set1_epi8(']'),
                sp = _mm_set1_epi8(' '), lf = _mm_set1_epi8('\n'),
                cr = _mm_set1_epi8('\r'), tab = _mm_set1_epi8('\t');
  uint64_t m = 0;
  for (int i = 0; i < 4; i++) {
    __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(p + 16 * i));
    __m128i d = _mm_or_si128(
        _mm_or_si128(_mm_cmpeq_epi8(x, comma), _mm_cmpeq_epi8(x, close)),
        _mm_or_si128(
            _mm_or_si128(_mm_cmpeq_epi8(x, sp), _mm_cmpeq_epi8(x, lf)),
            _mm_or_si128(_mm_cmpeq_epi8(x, cr), _mm_cmpeq_epi8(x, tab))));
    m |= (uint64_t)(uint32_t)_mm_movemask_epi8(d) << (16 * i);
  }
  return m;
}

/* The value of k (1..8) digits at q (8 bytes readable). */
static inline uint64_t swar_digits(const char *q, int k) {
  uint64_t x;
  memcpy(&x, q, 8);
  return merge8((x - 0x3030303030303030ull) << (64 - 8 * k));
}

/* The number text s[0, len) when it has the common form [-]I[.F] with 1..8
 * digits in I (no leading zero) and 1..8 in F, and 16 bytes are readable
 * from s + 1: m = IF < 10^16 is then an exact double and one division by
 * 10^|F| the correctly rounded value (Clinger, as in fast_decimal).  False
 * for anything else, valid or not: parse_number decides those. */
static inline bool number_known(const char *s, unsigned len, double *out) {
  unsigned neg = s[0] == '-', L = len - neg;
  const char *q = s + neg;
  if (L - 1 >= 16) return false; /* also L == 0 */
  __m128i x = _mm_loadu_si128((const __m128i *)(const void *)q);
  __m128i dig = _mm_and_si128(_mm_cmpgt_epi8(x, _mm_set1_epi8('0' - 1)),
                              _mm_cmplt_epi8(x, _mm_set1_epi8('9' + 1)));
  unsigned digits = (unsigned)_mm_movemask_epi8(dig);
  unsigned dots =
      (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(x, _mm_set1_epi8('.')));
  unsigned valid = (1u << L) - 1;
  dots &= valid;
  if (((digits | dots) & valid) != valid || (dots & (dots - 1))) return false;
  unsigned ni = dots ? (unsigned)__builtin_ctz(dots) : L;
  unsigned nf = dots ? L - ni - 1 : 0;
  if (ni - 1 >= 8 || nf > 8 || (dots && nf == 0) || (ni > 1 && q[0] == '0'))
    return false;
  uint64_t m = swar_digits(q, (int)ni);
  if (nf) m = m * pow10_u64[nf] + swar_digits(q + ni + 1, (int)nf);
  double v = (double)m / pow10_exact[nf];
  uint64_t b;
  memcpy(&b, &v, sizeof b);
  b ^= (uint64_t)neg << 63; /* no branch on the sign: random data */
  memcpy(out, &b, sizeof b);
  return true;
}

enum { CHUNK_MORE, CHUNK_CLOSED, CHUNK_SLOW };

/* Numbers from ps->p (a number's first byte; CHUNK_READ bytes readable),
 * CHUNK bytes at a time: the delimiter mask gives every number's length
 * at once, so the numbers of a chunk are parsed independently of each
 * other rather than byte after byte.  Appends to ps->run from *n.
 * CHUNK_MORE: ps->p is at the next number's first byte.  CHUNK_CLOSED:
 * ps->p is at the array's ']'.  CHUNK_SLOW: ps->p is at a number this
 * cannot take (a rare form, whitespace around it, something other than a
 * number after it, a text longer than the chunk, the node limit, a full
 * run): the caller's byte-by-byte step takes that one and its delimiter. */
static int pack_chunk(jparser *ps, size_t *n) {
  const char *p = ps->p;
  uint64_t d = chunk_delims(p);
  unsigned start = 0;
  size_t k = *n;
  while (d) {
    unsigned t = (unsigned)__builtin_ctzll(d);
    d &= d - 1;
    if (ps->nodes >= ps->max_nodes || k == ps->run_cap ||
        !number_known(p + start, t - start, &ps->run[k]) ||
        (p[t] != ',' && p[t] != ']'))
      break;
    k++;
    ps->nodes++;
    if (p[t] == ']') {
      *n = k;
      ps->p = p + t;
      return CHUNK_CLOSED;
    }
    if (!(p[t + 1] == '-' || is_digit(p[t + 1]))) { /* let the slow step */
      k--;                                          /* redo this one */
      ps->nodes--;
      break;
    }
    start = t + 1;
  }
  *n = k;
  ps->p = p + start;
  return start ? CHUNK_MORE : CHUNK_SLOW;
}
#else
#define JSON_CHUNKS 0
#endif

/* See pack_run. */
#define JSON_RUN_FIRST 2048 /* numbers; doubled as it fills */
#define JSON_RUN_DONATE                              \
  ((size_t)4 << 10) /* bytes: a run this long is not \
                       copied into the arena */
#define JSON_WINDOW_BACKOFF 7
#define JSON_WINDOW_BACKOFF_MAX 1024

/* How packed arrays are read (internal.h): written before main by the
 * constructor and by the test hook only. */
enum { JSON_IMPL_SCALAR, JSON_IMPL_SSE2, JSON_IMPL_AVX2, JSON_IMPL_AVX512 };
static const char *const json_impl_names[] = {"scalar", "sse2", "avx2",
                                              "avx512"};
static int json_impl = JSON_CHUNKS ? JSON_IMPL_SSE2 : JSON_IMPL_SCALAR;

static bool json_impl_supported(int impl) {
  if (impl == JSON_IMPL_SSE2) return JSON_CHUNKS;
#if ATTN__JSON_HAVE_AVX2
  if (impl == JSON_IMPL_AVX2) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("popcnt") &&
           __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2");
  }
#endif
#if ATTN__JSON_HAVE_AVX512
  if (impl == JSON_IMPL_AVX512) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512vbmi") &&
           __builtin_cpu_supports("avx512vbmi2") &&
           __builtin_cpu_supports("popcnt") && __builtin_cpu_supports("bmi") &&
           __builtin_cpu_supports("bmi2");
  }
#endif
  return impl == JSON_IMPL_SCALAR;
}

#if ATTN__JSON_HAVE_AVX512 || ATTN__JSON_HAVE_AVX2
#define JSON_WINDOWS 1
/* The fastest window the CPU has, before main. */
__attribute__((constructor)) static void json_impl_pick(void) {
  if (json_impl_supported(JSON_IMPL_AVX512))
    json_impl = JSON_IMPL_AVX512;
  else if (json_impl_supported(JSON_IMPL_AVX2))
    json_impl = JSON_IMPL_AVX2;
}

/* attn__json_windows_avx512 or _avx2 (internal.h), as json_impl says. */
static size_t json_windows(const char *p, size_t len, size_t room, double *out,
                           size_t *adv, int *closed) {
#if ATTN__JSON_HAVE_AVX2
  if (json_impl == JSON_IMPL_AVX2)
    return attn__json_windows_avx2(p, len, room, out, adv, closed);
#endif
#if ATTN__JSON_HAVE_AVX512
  if (json_impl == JSON_IMPL_AVX512)
    return attn__json_windows_avx512(p, len, room, out, adv, closed);
#endif
  return 0;
}
#else
#define JSON_WINDOWS 0
#endif

int attn__json_set_impl(const char *name) {
  for (int i = 0; i < (int)(sizeof json_impl_names / sizeof *json_impl_names);
       i++)
    if (strcmp(json_impl_names[i], name) == 0 && json_impl_supported(i)) {
      json_impl = i;
      return 1;
    }
  return 0;
}

const char *attn__json_impl_name(void) {
  return json_impl_names[json_impl];
}

/* ps->run doubled (JSON_RUN_FIRST numbers at first): pack_run keeps room
 * for a chunk's or a window's numbers after the n it holds. */
static attn_status run_grow(jparser *ps) {
  size_t cap = ps->run_cap ? ps->run_cap * 2 : JSON_RUN_FIRST;
  if (cap > (SIZE_MAX - sizeof(jblock)) / sizeof(double))
    return out_of_memory(ps);
  jblock *b = realloc(ps->run_block, sizeof(jblock) + cap * sizeof(double));
  if (!b) return out_of_memory(ps);
  ps->run_block = b;
  ps->run = (double *)(void *)(b + 1);
  ps->run_cap = cap;
  return ATTN_OK;
}

/* A value other than a number follows a ',': the run's n numbers become
 * ordinary child nodes of the open array, one node per value again. */
static attn_status run_unpack(jparser *ps, size_t n) {
  attn_status s;
  ps->nodes -= n;
  for (size_t i = 0; i < n; i++) {
    cJSON *e = new_node(ps, NULL, &s);
    if (!e) return s;
    set_number(e, ps->run[i]);
  }
  return ATTN_OK;
}

/* The ']' at p closes arr: its n numbers, from the run, become its packed
 * values (donated or copied, see the design), its frame is popped and
 * *closed set. */
static attn_status run_close(jparser *ps, cJSON *arr, size_t n, const char *p,
                             bool *closed) {
  double *v;
  if (n * sizeof *v >= JSON_RUN_DONATE) {
    /* the run's block joins the arena as it is (trimmed to its numbers);
     * the next array gets a new one */
    jblock *b = realloc(ps->run_block, sizeof(jblock) + n * sizeof *v);
    if (!b) b = ps->run_block; /* could not shrink: keep it whole */
    arena_link(&ps->a, b);
    v = (double *)(void *)(b + 1);
    ps->run_block = NULL;
    ps->run = NULL;
    ps->run_cap = 0;
  } else {
    v = arena_words(&ps->a, n * sizeof *v);
    if (!v) return out_of_memory(ps);
    memcpy(v, ps->run, n * sizeof *v);
  }
  arr->type = cJSON_Array | ATTN_JSON_PACKED;
  arr->valuestring = (char *)(void *)v;
  arr->valuedouble = (double)n; /* exact: n <= max_nodes < 2^53 */
  ps->p = p + 1;
  pop_frame(ps);
  *closed = true;
  return ATTN_OK;
}

/* Inside the array `arr` (its frame innermost), a number starts at ps->p.
 * Collect numbers while only numbers follow.  At ']' the array becomes
 * packed and its frame is closed (*closed = true).  When some other value
 * follows a ',', the numbers so far become ordinary child nodes and the
 * frame stays open with ps->p at that value (*closed = false): the generic
 * parser goes on from there, so any text parses to the same values (and
 * fails at the same byte) as without packing.  Each number counts against
 * the node limit.  The loop reads by windows (AVX-512, AVX2), chunks (SSE2)
 * or one number at a time; run_grow, run_unpack and run_close are its
 * rare ends. */
static attn_status pack_run(jparser *ps, cJSON *arr, bool *closed) {
  size_t n = 0;
  attn_status s;
  const char *p;
#if JSON_WINDOWS
  unsigned alone = 0; /* numbers to read one at a time before the next window */
  unsigned backoff = JSON_WINDOW_BACKOFF; /* alone after the next failure */
#endif
  for (;;) {
    /* room for a chunk's numbers */
    if (n + CHUNK >= ps->run_cap && (s = run_grow(ps)) != ATTN_OK) return s;
#if JSON_WINDOWS
    /* A window that takes nothing (mostly: numbers of 16 bytes or more,
     * such as Python's 17-digit reprs) is tried again only after
     * JSON_WINDOW_BACKOFF numbers read one at a time, twice as many after
     * each further failure in a row (up to JSON_WINDOW_BACKOFF_MAX), so
     * that texts it never takes do not pay for it at every number: an
     * array of 1,024 such numbers tries 8 windows, not 128. */
    if (alone) {
      alone--;
    } else if ((json_impl == JSON_IMPL_AVX512 || json_impl == JSON_IMPL_AVX2) &&
               ps->end - ps->p >= ATTN__JSON_WINDOW) {
      size_t room = ps->max_nodes - ps->nodes, adv = 0;
      int shut = 0;
      if (room > ps->run_cap - n) room = ps->run_cap - n;
      size_t got = room ? json_windows(ps->p, (size_t)(ps->end - ps->p), room,
                                       ps->run + n, &adv, &shut)
                        : 0;
      if (got) {
        n += got;
        ps->nodes += got;
        ps->p += adv;
        backoff = JSON_WINDOW_BACKOFF;
        if (!shut) continue;
        p = ps->p;
        break;
      }
      alone = backoff;
      if (backoff < JSON_WINDOW_BACKOFF_MAX) backoff *= 2;
    } else
#endif
#if JSON_CHUNKS
        if (json_impl == JSON_IMPL_SSE2 && ps->end - ps->p >= CHUNK_READ) {
      int c = pack_chunk(ps, &n);
      if (c == CHUNK_MORE) continue;
      if (c == CHUNK_CLOSED) {
        p = ps->p;
        break;
      }
    }
#endif
    if (ps->nodes >= ps->max_nodes) return node_room(ps);
    if ((s = parse_number(ps, &ps->run[n])) != ATTN_OK) return s;
    n++;
    ps->nodes++;
    p = skip_ws(ps->p, ps->end);
    if (p == ps->end) return malformed(ps, p);
    if (*p == ']') break;
    if (*p != ',') return malformed(ps, p);
    ps->p = p = skip_ws(p + 1, ps->end);
    if (p < ps->end && (*p == '-' || is_digit(*p))) continue;
    *closed = false;
    return run_unpack(ps, n);
  }
  return run_close(ps, arr, n, p, closed);
}

/* One value and everything nested in it, starting at ps->p (whitespace
 * skipped); on success *root is its node and ps->p is just past it. */
static attn_status parse_root(jparser *ps, cJSON **root) {
  attn_status s = ATTN_OK;
  char *key = NULL; /* key of the next value inside an object */
  for (;;) {
    /* a value starts at ps->p */
    const char *p = ps->p;
    cJSON *n;
    if (p == ps->end) return malformed(ps, p);
    char c = *p;
    if (c == '[' || c == '{') {
      if (!(n = new_node(ps, key, &s))) return s;
      n->type = c == '[' ? cJSON_Array : cJSON_Object;
      bool pack = c == '[' && pack_here(ps, key);
      if ((s = push_frame(ps, n, pack)) != ATTN_OK) return s;
      ps->p = skip_ws(p + 1, ps->end);
      if (ps->p < ps->end && *ps->p == (c == '[' ? ']' : '}')) {
        ps->p++;
        pop_frame(ps);
      } else if (pack && ps->p < ps->end &&
                 (*ps->p == '-' || is_digit(*ps->p))) {
        bool closed;
        key = NULL;
        if ((s = pack_run(ps, n, &closed)) != ATTN_OK) return s;
        if (!closed) continue;
      } else {
        if (c == '{' && (s = parse_key(ps, &key)) != ATTN_OK) return s;
        if (c == '[') key = NULL;
        continue;
      }
    } else if (c == '"') {
      if (!(n = new_node(ps, key, &s))) return s;
      n->type = cJSON_String;
      if ((s = parse_string(ps, &n->valuestring)) != ATTN_OK) return s;
    } else if (c == '-' || is_digit(c)) {
      if (!(n = new_node(ps, key, &s))) return s;
      double v = 0;
      if ((s = parse_number(ps, &v)) != ATTN_OK) return s;
      set_number(n, v);
    } else if (c == 't' || c == 'f' || c == 'n') {
      static const char *const words[] = {"true", "false", "null"};
      int w = c == 't' ? 0 : c == 'f' ? 1 : 2;
      if ((s = parse_literal(ps, words[w], strlen(words[w]))) != ATTN_OK)
        return s;
      if (!(n = new_node(ps, key, &s))) return s;
      n->type = w == 0 ? cJSON_True : w == 1 ? cJSON_False : cJSON_NULL;
      n->valueint = w == 0;
    } else {
      return malformed(ps, p);
    }
    /* after a value: ',' or the closing bracket of the open container */
    for (;;) {
      if (ps->n_frames == 0) {
        *root = ps->root;
        return ATTN_OK;
      }
      jframe *f = &ps->frames[ps->n_frames - 1];
      bool obj = f->node->type == cJSON_Object;
      p = ps->p = skip_ws(ps->p, ps->end);
      if (p == ps->end) return malformed(ps, p);
      if (*p == ',') {
        ps->p = skip_ws(p + 1, ps->end);
        if (!obj)
          key = NULL;
        else if ((s = parse_key(ps, &key)) != ATTN_OK)
          return s;
        break;
      }
      if (*p != (obj ? '}' : ']')) return malformed(ps, p);
      ps->p = p + 1;
      pop_frame(ps);
    }
  }
}

/* ---- entry points ------------------------------------------------------- */

attn_status attn_json_parse_ex(const char *p, size_t n, size_t max_depth,
                               size_t max_nodes, const char *const *pack_keys,
                               const char *trailing_hint, cJSON **out,
                               attn_diag *d) {
  jparser ps;
  cJSON *root = NULL;
  attn_status s;
  *out = NULL;
  if (n == 0) return attn_diag_set(d, ATTN_EPARSE, "empty JSON body");
  ps.base = p;
  ps.end = p + n;
  ps.p = n >= 3 && memcmp(p, "\xEF\xBB\xBF", 3) == 0 ? p + 3 : p; /* BOM */
  ps.p = skip_ws(ps.p, ps.end);
  ps.nodes = 0;
  ps.max_nodes = max_nodes;
  ps.max_depth = max_depth;
  ps.frames = ps.inline_frames;
  ps.n_frames = 0;
  ps.cap_frames = JSON_INLINE_FRAMES;
  ps.d = d;
  ps.root = NULL;
  ps.a.first = NULL;
  ps.a.next_size = JSON_BLOCK_FIRST;
  ps.pack_keys = pack_keys;
  ps.run_block = NULL;
  ps.run = NULL;
  ps.run_cap = 0;
  if (!arena_grow(&ps.a)) return out_of_memory(&ps);
  s = parse_root(&ps, &root);
  if (ps.frames != ps.inline_frames) free(ps.frames);
  free(ps.run_block);
  if (s == ATTN_OK) {
    assert(root == (cJSON *)(void *)(ps.a.first + 1));
    const char *q = skip_ws(ps.p, ps.end);
    if (q < ps.end)
      s = attn_diag_set(d, ATTN_EPARSE,
                        "unexpected bytes after the JSON value at byte %zu%s",
                        (size_t)(q - p), trailing_hint ? trailing_hint : "");
  }
  if (s != ATTN_OK) {
    arena_free_chain(ps.a.first);
    return s;
  }
  *out = root;
  return ATTN_OK;
}

attn_status attn_json_parse_capped(const char *p, size_t n, size_t max_depth,
                                   size_t max_nodes, const char *trailing_hint,
                                   cJSON **out, attn_diag *d) {
  return attn_json_parse_ex(p, n, max_depth, max_nodes, NULL, trailing_hint,
                            out, d);
}

attn_status attn_json_parse(const char *p, size_t n, size_t max_depth,
                            const char *trailing_hint, cJSON **out,
                            attn_diag *d) {
  return attn_json_parse_ex(p, n, max_depth, ATTN_JSON_MAX_NODES, NULL,
                            trailing_hint, out, d);
}

size_t attn_json_len(const cJSON *a) {
  if (!a) return 0;
  if (a->type & ATTN_JSON_PACKED) return (size_t)a->valuedouble;
  return (size_t)cJSON_GetArraySize(a);
}

const double *attn_json_packed(const cJSON *a, size_t *n) {
  if (!a || !(a->type & ATTN_JSON_PACKED)) return NULL;
  *n = (size_t)a->valuedouble;
  return (const double *)(const void *)a->valuestring;
}

size_t attn_json_f64_to_f32(const double *v, size_t n, float *dst) {
  size_t k = 0;
#if JSON_CHUNKS
  /* Blocks of 8 in SSE2: GCC vectorises the conversion of the loop below
   * but not its range check (8 scalar compares and setcc per block, ~0.5
   * ns a number).  cmplt is false for NaN, as the scalar test is; a block
   * with any value out of range is left to the loop below, which stops at
   * it. */
  const __m128d lim = _mm_set1_pd(ATTN_F32_LIMIT);
  const __m128d mag = _mm_castsi128_pd(_mm_set1_epi64x(INT64_MAX));
  for (; k + 8 <= n; k += 8) {
    __m128d a0 = _mm_loadu_pd(v + k), a1 = _mm_loadu_pd(v + k + 2);
    __m128d a2 = _mm_loadu_pd(v + k + 4), a3 = _mm_loadu_pd(v + k + 6);
    __m128d ok = _mm_and_pd(_mm_and_pd(_mm_cmplt_pd(_mm_and_pd(a0, mag), lim),
                                       _mm_cmplt_pd(_mm_and_pd(a1, mag), lim)),
                            _mm_and_pd(_mm_cmplt_pd(_mm_and_pd(a2, mag), lim),
                                       _mm_cmplt_pd(_mm_and_pd(a3, mag), lim)));
    if (_mm_movemask_pd(ok) != 3) break;
    _mm_storeu_ps(dst + k, _mm_movelh_ps(_mm_cvtpd_ps(a0), _mm_cvtpd_ps(a1)));
    _mm_storeu_ps(dst + k + 4,
                  _mm_movelh_ps(_mm_cvtpd_ps(a2), _mm_cvtpd_ps(a3)));
  }
#endif
  for (; k < n && attn_f32_in_range(v[k]); k++) dst[k] = (float)v[k];
  return k;
}

void attn_json_free(cJSON *root) {
  if (!root) return;
  jblock *first = (jblock *)(void *)root - 1;
  assert(first->magic == JSON_MAGIC && "not a tree from attn_json_parse");
  arena_free_chain(first);
}

/* ---- messages ----------------------------------------------------------- */

const char *attn_json_kind(const cJSON *item) {
  if (!item) return "nothing";
  if (cJSON_IsArray(item)) return "an array";
  if (cJSON_IsObject(item)) return "an object";
  if (cJSON_IsString(item)) return "a string";
  if (cJSON_IsNumber(item)) return "a number";
  if (cJSON_IsBool(item)) return "a boolean";
  if (cJSON_IsNull(item)) return "null";
  return "an invalid value";
}
