/* inflate.c - request bodies sent with Content-Encoding: gzip or deflate.
 *
 * DESIGN
 * tritonclient (request_compression_algorithm="gzip" | "deflate") and other
 * HTTP clients may compress a request body.  Undoing that is decoding, so
 * it runs on the worker, never on a libmicrohttpd thread: routes.c only
 * reads the header (attn__encoding_parse) and infer.c inflates before the
 * codecs see the body.
 *  - gzip: RFC 1952 members, one (what gzip.compress sends) or more in a
 *    row (what `cat a.gz b.gz` makes), read as one body.  deflate: the zlib
 * format of RFC 1950, as HTTP defines it; a raw RFC 1951 stream (what some
 * clients send under that name) is accepted too, recognised by a zlib header
 * that does not check.
 *  - Limits: the inflated body may not exceed max_body_bytes, the same
 *    limit as an uncompressed one, nor max_inflate_ratio times the body as
 *    sent (ATTN_INFLATE_FLOOR_BYTES at least): 413.  The size is unknown
 *    until the stream ends, so the output grows by doubling from 4x the
 *    input (64 KiB at least) and the request is refused the moment it
 *    would pass the limit: a compression bomb costs at most max_body_bytes
 *    of memory, like the largest plain body, and its work is bounded by
 *    what was sent.  Where a body's time goes (issue 39: a 249 KB gzip of
 *    250 MB of JSON took 1-2.5 s of a worker's CPU, 4-9 s on the busy
 *    machine): zlib ~50% (crc32 7 of it), page faults of the output and of
 *    the parser's nodes ~25%, the doublings' copies 5%, then the JSON
 *    parser, up to its 2^24 values (1 GiB of nodes).  Each is linear in
 *    the inflated size, so the ratio bounds them all; at 200 that 249 KB
 *    body is refused after 50 MB of output.
 *  - Anything after the end of the stream, a truncated stream or corrupt
 *    data is a 400 that says which and where (input byte offset).
 *  - The output block is 64-byte aligned and the body starts `pad` bytes
 *    in, as http.c lays out uncompressed bodies, so binary tensors after the
 *    JSON header can be used where they lie.
 * attn__inflate is its stages over one `stream`: stream_open, then
 * stream_room and stream_step until the end (next_member for another gzip
 * member), stream_error for any other result, stream_finish; a deflate
 * body without its zlib header is read a second time as raw deflate.
 * Thread-safe: no state outside the call.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

#include "attn/limits.h"
#include "internal.h"
#include "inflate.h"

int attn__encoding_parse(const char *ce, attn__encoding *out) {
  size_t n;
  if (!ce) {
    *out = ATTN_ENC_IDENTITY;
    return 1;
  }
  while (*ce == ' ' || *ce == '\t') ce++;
  n = strlen(ce);
  while (n && (ce[n - 1] == ' ' || ce[n - 1] == '\t')) n--;
#define IS(s) (n == strlen(s) && strncasecmp(ce, s, n) == 0)
  if (n == 0 || IS("identity"))
    *out = ATTN_ENC_IDENTITY;
  else if (IS("gzip") || IS("x-gzip"))
    *out = ATTN_ENC_GZIP;
  else if (IS("deflate"))
    *out = ATTN_ENC_DEFLATE;
  else
    return 0;
#undef IS
  return 1;
}

const char *attn__encoding_name(attn__encoding e) {
  return e == ATTN_ENC_GZIP      ? "gzip"
         : e == ATTN_ENC_DEFLATE ? "deflate"
                                 : "identity";
}

/* A new 64-byte aligned block of pad + cap bytes holding the first keep
 * bytes of old (at old_body) from pad on; NULL when out of memory. */
static char *grow(const char *old_body, size_t keep, size_t pad, size_t cap) {
  char *nb = aligned_alloc(64, (pad + cap + 63) / 64 * 64);
  if (nb && keep) memcpy(nb + pad, old_body, keep);
  return nb;
}

/* One pass over the input: attn__inflate's stages (stream_open, stream_room,
 * stream_step, next_member, stream_error, stream_finish) share it. */
typedef struct stream {
  z_stream z;
  attn__encoding e;
  const char *name; /* of e, for messages */
  int raw;          /* deflate read as a raw RFC 1951 stream */
  int retry_raw;    /* set: no zlib header, read it again as raw */
  const char *in;
  size_t n, fed; /* input bytes, and those handed to zlib so far */
  size_t base;   /* input bytes of the gzip members before this one */
  char *m;       /* the output block; the body from m + pad */
  size_t pad, cap, have, max;
  unsigned ratio; /* max is ratio x n, not max_body_bytes; else 0 */
} stream;

static attn_status fail(stream *s, attn_status st) {
  inflateEnd(&s->z);
  free(s->m);
  s->m = NULL;
  return st;
}

/* Start zlib for the encoding and the first output block: 4x the input,
 * at least 64 KiB, at most max. */
static attn_status stream_open(stream *s, attn_diag *d) {
  memset(&s->z, 0, sizeof s->z);
  s->fed = s->base = s->have = 0;
  s->m = NULL;
  /* gzip: 16 + 15 (gzip wrapper); deflate: 15 (zlib), -15 (raw) */
  int wbits = s->e == ATTN_ENC_GZIP ? 16 + MAX_WBITS
              : s->raw              ? -MAX_WBITS
                                    : MAX_WBITS;
  if (inflateInit2(&s->z, wbits) != Z_OK)
    return attn_diag_set(d, ATTN_ENOMEM, "out of memory inflating the body");
  s->cap = s->n > s->max / 4 ? s->max : s->n * 4;
  if (s->cap < 65536) s->cap = s->max < 65536 ? s->max : 65536;
  s->m = grow(NULL, 0, s->pad, s->cap);
  if (!s->m)
    return fail(
        s, attn_diag_set(d, ATTN_ENOMEM, "out of memory inflating the body"));
  return ATTN_OK;
}

/* Hand zlib more input when it has used what it had, and double the
 * output block (up to max) when it is full. */
static attn_status stream_room(stream *s, attn_diag *d) {
  if (s->z.avail_in == 0 && s->fed < s->n) { /* zlib counts in uInt */
    size_t chunk =
        s->n - s->fed < (size_t)UINT32_MAX ? s->n - s->fed : UINT32_MAX;
    s->z.next_in = (Bytef *)(uintptr_t)(s->in + s->fed);
    s->z.avail_in = (uInt)chunk;
    s->fed += chunk;
  }
  if (s->have == s->cap && s->cap < s->max) {
    size_t ncap = s->cap > s->max / 2 ? s->max : s->cap * 2;
    char *nm = grow(s->m + s->pad, s->have, s->pad, ncap);
    if (!nm)
      return fail(s, attn_diag_set(d, ATTN_ENOMEM,
                                   "out of memory inflating the body "
                                   "(%zu bytes so far)",
                                   s->have));
    free(s->m);
    s->m = nm;
    s->cap = ncap;
  }
  return ATTN_OK;
}

/* One inflate() call into the room left; zlib's result.  At the limit, a
 * 1-byte probe tells a stream that ends exactly there from one that would
 * go past it: *over is set when it would. */
static int stream_step(stream *s, int *over) {
  unsigned char probe;
  int probing = s->have == s->cap;
  size_t n = probing                                 ? 1
             : s->cap - s->have < (size_t)UINT32_MAX ? s->cap - s->have
                                                     : UINT32_MAX;
  s->z.next_out = probing ? &probe : (Bytef *)(s->m + s->pad + s->have);
  s->z.avail_out = (uInt)n;
  int r = inflate(&s->z, Z_NO_FLUSH);
  size_t produced = n - s->z.avail_out;
  *over = probing && produced;
  if (!probing) s->have += produced;
  return r;
}

/* At the end of a stream: 1 when another gzip member follows (its magic
 * bytes), to be read as part of the same body. */
static int next_member(stream *s) {
  size_t at = s->fed - s->z.avail_in;
  if (s->e != ATTN_ENC_GZIP || s->n - at < 2 ||
      (unsigned char)s->in[at] != 0x1f || (unsigned char)s->in[at + 1] != 0x8b)
    return 0;
  s->base = at;
  return 1;
}

/* What zlib's result r (neither progress nor the end) means: a truncated
 * or corrupt stream, no memory, or a deflate body without the zlib header
 * (s->retry_raw: read it again as raw deflate).  Frees the stream. */
static attn_status stream_error(stream *s, int r, attn_diag *d) {
  if (r == Z_BUF_ERROR && s->z.avail_in == 0 && s->fed >= s->n)
    return fail(s, attn_diag_set(d, ATTN_EPARSE,
                                 "Content-Encoding %s: the body ends "
                                 "inside the compressed stream (%zu "
                                 "bytes)",
                                 s->name, s->n));
  if (r == Z_MEM_ERROR)
    return fail(
        s, attn_diag_set(d, ATTN_ENOMEM, "out of memory inflating the body"));
  if (r == Z_DATA_ERROR && s->e == ATTN_ENC_DEFLATE && !s->raw &&
      s->z.total_out == 0) { /* no zlib header: try raw deflate */
    s->retry_raw = 1;
    return fail(s, ATTN_EPARSE);
  }
  return fail(s,
              attn_diag_set(d, ATTN_EPARSE,
                            "Content-Encoding %s: corrupt data near "
                            "byte %lu of the body (%s)",
                            s->name, (unsigned long)(s->base + s->z.total_in),
                            s->z.msg ? s->z.msg : "invalid stream"));
}

/* The stream has ended: every input byte must have been part of it. */
static attn_status stream_finish(stream *s, attn_diag *d) {
  size_t used = s->fed - s->z.avail_in;
  inflateEnd(&s->z);
  if (used != s->n) {
    free(s->m);
    s->m = NULL;
    return attn_diag_set(d, ATTN_EPARSE,
                         "Content-Encoding %s: %zu bytes after the end of the "
                         "compressed stream (at byte %zu)",
                         s->name, s->n - used, used);
  }
  return ATTN_OK;
}

/* The whole input through zlib once (as s->raw says). */
static attn_status inflate_all(stream *s, attn_diag *d) {
  attn_status st = stream_open(s, d);
  if (st != ATTN_OK) return st;
  for (;;) {
    if ((st = stream_room(s, d)) != ATTN_OK) return st;
    int over;
    int r = stream_step(s, &over);
    if (over && s->ratio)
      return fail(s, attn_diag_set(d, ATTN_ETOOBIG,
                                   "Content-Encoding %s: the body inflates "
                                   "to more than %zu bytes, over "
                                   "max_inflate_ratio=%u times its %zu bytes",
                                   s->name, s->max, s->ratio, s->n));
    if (over)
      return fail(s, attn_diag_set(d, ATTN_ETOOBIG,
                                   "Content-Encoding %s: the body inflates "
                                   "to more than max_body_bytes=%zu bytes",
                                   s->name, s->max));
    if (r == Z_STREAM_END) {
      if (!next_member(s)) break;
      if (inflateReset(&s->z) != Z_OK)
        return fail(s, attn_diag_set(d, ATTN_ENOMEM,
                                     "out of memory inflating the body"));
      continue;
    }
    if (r == Z_OK) continue;
    if (r == Z_BUF_ERROR && s->z.avail_out == 0) continue; /* needs room */
    return stream_error(s, r, d);
  }
  return stream_finish(s, d);
}

attn_status attn__inflate(const char *in, size_t n, attn__encoding e,
                          size_t max, unsigned ratio, size_t pad, char **mem,
                          size_t *len, attn_diag *d) {
  stream s = {.e = e,
              .name = attn__encoding_name(e),
              .in = in,
              .n = n,
              .pad = pad > 63 ? 63 : pad,
              .max = max};
  /* n <= 8 GiB (max_body_bytes) and ratio <= 1032: no overflow */
  size_t by_ratio = n * ratio;
  if (by_ratio < ATTN_INFLATE_FLOOR_BYTES) by_ratio = ATTN_INFLATE_FLOOR_BYTES;
  if (ratio && by_ratio < max) {
    s.max = by_ratio;
    s.ratio = ratio;
  }
  *mem = NULL;
  *len = 0;
  attn_status st = inflate_all(&s, d);
  if (s.retry_raw) {
    s.raw = 1;
    s.retry_raw = 0;
    st = inflate_all(&s, d);
  }
  if (st != ATTN_OK) return st;
  *mem = s.m;
  *len = s.have;
  return ATTN_OK;
}
