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
 *  - Limit: the inflated body may not exceed max_body_bytes, the same limit
 *    as an uncompressed one (413).  The size is unknown until the stream
 *    ends, so the output grows by doubling from 4x the input (64 KiB at
 *    least) and the request is refused the moment it would pass the limit:
 *    a compression bomb costs at most max_body_bytes of memory, like the
 *    largest plain body.
 *  - Anything after the end of the stream, a truncated stream or corrupt
 *    data is a 400 that says which and where (input byte offset).
 *  - The output block is 64-byte aligned and the body starts `pad` bytes
 *    in, as http.c lays out uncompressed bodies, so binary tensors after the
 *    JSON header can be used where they lie.
 * Thread-safe: no state outside the call.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

#include "internal.h"

int attn__encoding_parse(const char *ce, attn_encoding *out) {
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

const char *attn__encoding_name(attn_encoding e) {
  return e == ATTN_ENC_GZIP ? "gzip" : e == ATTN_ENC_DEFLATE ? "deflate"
                                                             : "identity";
}

/* A new 64-byte aligned block of pad + cap bytes holding the first keep
 * bytes of old (at old_body) from pad on; NULL when out of memory. */
static char *grow(const char *old_body, size_t keep, size_t pad, size_t cap) {
  char *nb = aligned_alloc(64, (pad + cap + 63) / 64 * 64);
  if (nb && keep) memcpy(nb + pad, old_body, keep);
  return nb;
}

static attn_status fail(z_stream *z, char *mem, attn_status s) {
  inflateEnd(z);
  free(mem);
  return s;
}

attn_status attn__inflate(const char *in, size_t n, attn_encoding e,
                          size_t max, size_t pad, char **mem, size_t *len,
                          attn_diag *d) {
  const char *name = attn__encoding_name(e);
  int raw = 0;
  *mem = NULL;
  *len = 0;
  if (pad > 63) pad = 63;
retry:;
  z_stream z;
  memset(&z, 0, sizeof z);
  /* gzip: 16 + 15 (gzip wrapper); deflate: 15 (zlib), -15 (raw) */
  int wbits =
      e == ATTN_ENC_GZIP ? 16 + MAX_WBITS : raw ? -MAX_WBITS : MAX_WBITS;
  if (inflateInit2(&z, wbits) != Z_OK)
    return attn_diag_set(d, ATTN_ENOMEM, "out of memory inflating the body");
  size_t cap = n > max / 4 ? max : n * 4;
  if (cap < 65536) cap = max < 65536 ? max : 65536;
  char *m = grow(NULL, 0, pad, cap);
  if (!m)
    return fail(&z, NULL, attn_diag_set(d, ATTN_ENOMEM,
                                        "out of memory inflating the body"));
  size_t have = 0, fed = 0;
  size_t base = 0; /* input bytes of the gzip members before this one */
  for (;;) {
    if (z.avail_in == 0 && fed < n) { /* zlib counts in uInt */
      size_t chunk = n - fed < (size_t)UINT32_MAX ? n - fed : UINT32_MAX;
      z.next_in = (Bytef *)(uintptr_t)(in + fed);
      z.avail_in = (uInt)chunk;
      fed += chunk;
    }
    if (have == cap && cap < max) {
      size_t ncap = cap > max / 2 ? max : cap * 2;
      char *nm = grow(m + pad, have, pad, ncap);
      if (!nm)
        return fail(&z, m, attn_diag_set(d, ATTN_ENOMEM,
                                         "out of memory inflating the body "
                                         "(%zu bytes so far)",
                                         have));
      free(m);
      m = nm;
      cap = ncap;
    }
    /* At the limit, a 1-byte probe tells a stream that ends exactly there
     * from one that would go past it. */
    unsigned char probe;
    int probing = have == cap;
    size_t room = probing ? 1
                  : cap - have < (size_t)UINT32_MAX ? cap - have
                                                    : UINT32_MAX;
    z.next_out = probing ? &probe : (Bytef *)(m + pad + have);
    z.avail_out = (uInt)room;
    int r = inflate(&z, Z_NO_FLUSH);
    size_t produced = room - z.avail_out;
    if (probing && produced)
      return fail(&z, m, attn_diag_set(d, ATTN_ETOOBIG,
                                       "Content-Encoding %s: the body "
                                       "inflates to more than "
                                       "max_body_bytes=%zu bytes",
                                       name, max));
    if (!probing) have += produced;
    if (r == Z_STREAM_END) {
      /* another gzip member follows (its magic bytes): go on with it */
      size_t at = fed - z.avail_in;
      if (e != ATTN_ENC_GZIP || n - at < 2 || (unsigned char)in[at] != 0x1f ||
          (unsigned char)in[at + 1] != 0x8b)
        break;
      base = at;
      if (inflateReset(&z) != Z_OK)
        return fail(
            &z, m,
            attn_diag_set(d, ATTN_ENOMEM, "out of memory inflating the body"));
      continue;
    }
    if (r == Z_OK) continue;
    if (r == Z_BUF_ERROR && z.avail_out == 0) continue; /* needs room */
    if (r == Z_BUF_ERROR && z.avail_in == 0 && fed >= n)
      return fail(&z, m, attn_diag_set(d, ATTN_EPARSE,
                                       "Content-Encoding %s: the body ends "
                                       "inside the compressed stream (%zu "
                                       "bytes)",
                                       name, n));
    if (r == Z_MEM_ERROR)
      return fail(&z, m, attn_diag_set(d, ATTN_ENOMEM,
                                       "out of memory inflating the body"));
    if (r == Z_DATA_ERROR && e == ATTN_ENC_DEFLATE && !raw &&
        z.total_out == 0) { /* no zlib header: try raw deflate */
      inflateEnd(&z);
      free(m);
      raw = 1;
      goto retry;
    }
    return fail(&z, m,
                attn_diag_set(d, ATTN_EPARSE,
                              "Content-Encoding %s: corrupt data near "
                              "byte %lu of the body (%s)",
                              name, (unsigned long)(base + z.total_in),
                              z.msg ? z.msg : "invalid stream"));
  }
  size_t used = fed - z.avail_in;
  inflateEnd(&z);
  if (used != n) {
    free(m);
    return attn_diag_set(d, ATTN_EPARSE,
                         "Content-Encoding %s: %zu bytes after the end of the "
                         "compressed stream (at byte %zu)",
                         name, n - used, used);
  }
  *mem = m;
  *len = have;
  return ATTN_OK;
}
