/* buf.c - the growable byte buffer of include/attn/buf.h.
 *
 * Design
 *  - Capacity grows geometrically (x2, at least 256 bytes) so appending n
 *    bytes one at a time costs O(n) overall.
 *  - Whenever data is non-NULL it is followed by one NUL byte that is not
 *    counted in len (nor against max): encoders' JSON can be handed to
 *    string functions and parsers directly.  The NUL is not part of the
 *    contract of buf.h; callers must still use len.
 *  - max (when non-zero) bounds len; a call that would pass it fails with
 *    ATTN_ETOOBIG and changes nothing.
 *  - attn_buf_json_string writes valid JSON whatever the input: control
 *    characters are escaped and each maximal invalid UTF-8 sequence becomes
 *    one U+FFFD (the Unicode "substitution of maximal subparts" practice).
 *
 * Threads: none; a buffer has one owner at a time.
 */
#include "attn/buf.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void attn_buf_init(attn_buf *b, size_t max) {
  b->data = NULL;
  b->len = 0;
  b->cap = 0;
  b->max = max;
}

void attn_buf_free(attn_buf *b) {
  if (!b) return;
  free(b->data);
  b->data = NULL;
  b->len = b->cap = 0;
}

attn_status attn_buf_reserve(attn_buf *b, size_t n) {
  size_t need, want;
  if (n > SIZE_MAX - 1 - b->len) return ATTN_ETOOBIG;
  need = b->len + n;
  if (b->max && need > b->max) return ATTN_ETOOBIG;
  if (need + 1 <= b->cap) return ATTN_OK; /* +1: the trailing NUL */
  want = b->cap ? b->cap : 256;
  while (want < need + 1) {
    if (want > SIZE_MAX / 2) {
      want = need + 1;
      break;
    }
    want *= 2;
  }
  char *p = realloc(b->data, want);
  if (!p) return ATTN_ENOMEM;
  if (!b->data) p[0] = '\0';
  b->data = p;
  b->cap = want;
  return ATTN_OK;
}

attn_status attn_buf_append(attn_buf *b, const void *p, size_t n) {
  attn_status s = attn_buf_reserve(b, n);
  if (s != ATTN_OK) return s;
  if (n) memcpy(b->data + b->len, p, n);
  b->len += n;
  b->data[b->len] = '\0';
  return ATTN_OK;
}

attn_status attn_buf_puts(attn_buf *b, const char *s) {
  return attn_buf_append(b, s, strlen(s));
}

attn_status attn_buf_printf(attn_buf *b, const char *fmt, ...) {
  va_list ap;
  char small[256];
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) return ATTN_EINVAL;
  if ((size_t)n < sizeof small) return attn_buf_append(b, small, (size_t)n);
  attn_status s = attn_buf_reserve(b, (size_t)n);
  if (s != ATTN_OK) return s;
  va_start(ap, fmt);
  vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
  return ATTN_OK;
}

/* The decimal digits of u (at least one) written backwards ending at p;
 * returns the first. */
static char *digits_before(char *p, uint64_t u) {
  do {
    *--p = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  return p;
}

attn_status attn_buf_i64(attn_buf *b, int64_t v) {
  char t[24], *p = t + sizeof t;
  p = digits_before(p, v < 0 ? 0 - (uint64_t)v : (uint64_t)v);
  if (v < 0) *--p = '-';
  return attn_buf_append(b, p, (size_t)(t + sizeof t - p));
}

attn_status attn_buf_u64(attn_buf *b, uint64_t v) {
  char t[24], *p = digits_before(t + sizeof t, v);
  return attn_buf_append(b, p, (size_t)(t + sizeof t - p));
}

attn_status attn_buf_fixed3(attn_buf *b, double v) {
  /* %.3f rounds the exact v * 1000; the double product is within 2^-23 of
   * it below 2^30, so rounding the product agrees unless it is within that
   * of a tie: those, and everything large or not finite, go to printf. */
  double x = v * 1000.0, r = nearbyint(x);
  if (!(fabs(x) < 1073741824.0) || fabs(fabs(x - r) - 0.5) < 1e-6)
    return attn_buf_printf(b, "%.3f", v);
  int64_t k = (int64_t)r;
  char t[32];
  uint64_t u = k < 0 ? 0 - (uint64_t)k : (uint64_t)k;
  char *p = t + sizeof t;
  for (int i = 0; i < 3; i++, u /= 10) *--p = (char)('0' + u % 10);
  *--p = '.';
  p = digits_before(p, u);
  if (signbit(v)) *--p = '-';
  return attn_buf_append(b, p, (size_t)(t + sizeof t - p));
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 when invalid; *bad
 * then gets the length of the maximal invalid subpart to replace (>= 1). */
static size_t utf8_seq(const unsigned char *s, size_t *bad) {
  unsigned char c = s[0];
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF; /* allowed range of the 2nd byte */
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0; /* no overlongs */
    if (c == 0xED) hi = 0x9F; /* no surrogates */
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90; /* no overlongs */
    if (c == 0xF4) hi = 0x8F; /* <= U+10FFFF */
  } else {
    *bad = 1;
    return 0;
  }
  for (size_t i = 1; i < n; i++) {
    unsigned char lo_i = i == 1 ? lo : 0x80, hi_i = i == 1 ? hi : 0xBF;
    if (s[i] < lo_i || s[i] > hi_i) { /* also stops at the NUL */
      *bad = i;
      return 0;
    }
  }
  return n;
}

attn_status attn_buf_json_string(attn_buf *b, const char *str) {
  static const char hex[] = "0123456789abcdef";
  const unsigned char *s = (const unsigned char *)(str ? str : "");
  size_t start = b->len;
  attn_status st = attn_buf_append(b, "\"", 1);
  while (st == ATTN_OK && *s) {
    const unsigned char *run = s; /* copy plain bytes in runs */
    size_t bad = 0, n;
    while (*s >= 0x20 && *s != '"' && *s != '\\' && (n = utf8_seq(s, &bad)))
      s += n;
    if (s > run) st = attn_buf_append(b, run, (size_t)(s - run));
    if (st != ATTN_OK || !*s) break;
    char esc[6] = {'\\', 0, 0, 0, 0, 0};
    size_t esc_len = 2;
    switch (*s) {
      case '"':
        esc[1] = '"';
        break;
      case '\\':
        esc[1] = '\\';
        break;
      case '\b':
        esc[1] = 'b';
        break;
      case '\f':
        esc[1] = 'f';
        break;
      case '\n':
        esc[1] = 'n';
        break;
      case '\r':
        esc[1] = 'r';
        break;
      case '\t':
        esc[1] = 't';
        break;
      default:
        if (*s < 0x20) {
          esc[1] = 'u';
          esc[2] = '0';
          esc[3] = '0';
          esc[4] = hex[*s >> 4];
          esc[5] = hex[*s & 15];
          esc_len = 6;
        } else { /* invalid UTF-8: one U+FFFD per maximal subpart */
          st = attn_buf_append(b, "\xEF\xBF\xBD", 3);
          s += bad;
          continue;
        }
    }
    st = attn_buf_append(b, esc, esc_len);
    s++;
  }
  if (st == ATTN_OK) st = attn_buf_append(b, "\"", 1);
  if (st != ATTN_OK) { /* failure changes nothing */
    b->len = start;
    if (b->data) b->data[start] = '\0';
  }
  return st;
}

char *attn_buf_steal(attn_buf *b, size_t *len) {
  char *p = b->data;
  if (len) *len = b->len;
  if (!p) p = calloc(1, 1); /* an empty buffer still yields a freeable "" */
  b->data = NULL;
  b->len = b->cap = 0;
  return p;
}
