/* test_inflate.c - attn__inflate (src/server/inflate.c), the undoing of
 * Content-Encoding gzip and deflate, on its own: no request, no server. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "../src/server/internal.h"
#include "../src/server/inflate.h"
#include "attn/limits.h"
#include "unit.h"

/* One gzip member of in[0, n) at level into out (room for cap bytes);
 * returns its length. */
static size_t gzip_into(const unsigned char *in, size_t n, int level,
                        unsigned char *out, size_t cap) {
  z_stream zs;
  memset(&zs, 0, sizeof zs);
  ck_assert_int_eq(deflateInit2(&zs, level, Z_DEFLATED, 16 + MAX_WBITS, 8,
                                Z_DEFAULT_STRATEGY),
                   Z_OK);
  zs.next_in = (Bytef *)(uintptr_t)in;
  zs.avail_in = (uInt)n;
  zs.next_out = out;
  zs.avail_out = (uInt)cap;
  ck_assert_int_eq(deflate(&zs, Z_FINISH), Z_STREAM_END);
  size_t len = zs.total_out;
  deflateEnd(&zs);
  return len;
}

/* attn__inflate on its own: a body that needs several doublings of the
 * output, exactly at the limit and one byte over, every truncation point
 * of a small stream, two gzip members; each result is compared with the
 * original bytes. */
START_TEST(test_inflate) {
  enum { N = 300000 };
  unsigned char *plain = malloc(N), *z = malloc(N + 1024);
  ck_assert_ptr_nonnull(plain);
  ck_assert_ptr_nonnull(z);
  uint32_t x = 1;
  for (size_t i = 0; i < N; i++) { /* compressible but not trivial */
    x = x * 1103515245u + 12345u;
    plain[i] = (x >> 28) == 0 ? (unsigned char)(x >> 20) : 'a';
  }
  size_t zn = gzip_into(plain, N, 6, z, N + 1024);
  ck_assert_uint_lt(zn, N / 4); /* so the output must grow several times */
  char *mem;
  size_t len;
  attn_diag d = {{0}};
  for (size_t pad = 0; pad < 64; pad += 21) {
    ck_assert_int_eq(
        attn__inflate((char *)z, zn, ATTN_ENC_GZIP, N, 0, pad, &mem, &len, &d),
        ATTN_OK);
    ck_assert_uint_eq(len, N);
    ck_assert_uint_eq((uintptr_t)mem % 64, 0);
    ck_assert_int_eq(memcmp(mem + pad, plain, N), 0);
    free(mem);
  }
  ck_assert_int_eq(
      attn__inflate((char *)z, zn, ATTN_ENC_GZIP, N - 1, 0, 0, &mem, &len, &d),
      ATTN_ETOOBIG);
  ck_assert_ptr_null(mem);
  ck_assert_ptr_nonnull(strstr(d.msg, "max_body_bytes=299999"));
  /* gzip data is not deflate (zlib or raw) */
  ck_assert_int_eq(
      attn__inflate((char *)z, zn, ATTN_ENC_DEFLATE, N, 0, 0, &mem, &len, &d),
      ATTN_EPARSE);
  /* every cut of a short stream fails cleanly (ASan checks the frees) */
  uLongf sn = 200;
  unsigned char small[200];
  ck_assert_int_eq(compress(small, &sn, plain, 100), Z_OK);
  for (size_t cut = 0; cut < sn; cut++) {
    attn_status st = attn__inflate((char *)small, cut, ATTN_ENC_DEFLATE, N, 0,
                                   0, &mem, &len, &d);
    ck_assert_int_eq(st, ATTN_EPARSE);
    ck_assert_ptr_null(mem);
  }
  ck_assert_int_eq(attn__inflate((char *)small, sn, ATTN_ENC_DEFLATE, 100, 0, 0,
                                 &mem, &len, &d),
                   ATTN_OK);
  ck_assert_uint_eq(len, 100);
  ck_assert_int_eq(memcmp(mem, plain, 100), 0);
  free(mem);
  /* gzip members in a row are one body: the first 100 bytes as one
   * member, the next 100 as another; cut, corrupt or followed by junk,
   * the second member fails with its offset in the whole body */
  unsigned char two[600];
  size_t tn = 0, first = 0;
  for (int k = 0; k < 2; k++) {
    tn += gzip_into(plain + 100 * k, 100, 6, two + tn, sizeof two - 8 - tn);
    if (k == 0) first = tn;
  }
  ck_assert_int_eq(
      attn__inflate((char *)two, tn, ATTN_ENC_GZIP, N, 0, 5, &mem, &len, &d),
      ATTN_OK);
  ck_assert_uint_eq(len, 200);
  ck_assert_int_eq(memcmp(mem + 5, plain, 200), 0);
  free(mem);
  /* exactly 200 bytes fit; 199 do not, the second member passing it */
  ck_assert_int_eq(
      attn__inflate((char *)two, tn, ATTN_ENC_GZIP, 200, 0, 0, &mem, &len, &d),
      ATTN_OK);
  ck_assert_uint_eq(len, 200);
  free(mem);
  ck_assert_int_eq(
      attn__inflate((char *)two, tn, ATTN_ENC_GZIP, 199, 0, 0, &mem, &len, &d),
      ATTN_ETOOBIG);
  ck_assert_int_eq(attn__inflate((char *)two, tn - 1, ATTN_ENC_GZIP, N, 0, 0,
                                 &mem, &len, &d),
                   ATTN_EPARSE);
  ck_assert_ptr_nonnull(strstr(d.msg, "ends inside the compressed stream"));
  memcpy(two + tn, "junk", 4);
  ck_assert_int_eq(attn__inflate((char *)two, tn + 4, ATTN_ENC_GZIP, N, 0, 0,
                                 &mem, &len, &d),
                   ATTN_EPARSE);
  char want[96];
  snprintf(want, sizeof want,
           "4 bytes after the end of the compressed "
           "stream (at byte %zu)",
           tn);
  ck_assert_str_eq(strstr(d.msg, "4 bytes"), want);
  two[first + 10] ^= 0xff; /* the second member's first deflate byte */
  ck_assert_int_eq(
      attn__inflate((char *)two, tn, ATTN_ENC_GZIP, N, 0, 0, &mem, &len, &d),
      ATTN_EPARSE);
  ck_assert_ptr_nonnull(strstr(d.msg, "corrupt data near byte"));
  unsigned long near = strtoul(strstr(d.msg, "near byte ") + 10, NULL, 10);
  ck_assert_uint_gt(near, first);
  ck_assert_ptr_null(mem);
  free(plain);
  free(z);
}
END_TEST

/* gzip of n zero bytes into a new buffer (*zn its length). */
static unsigned char *gzip_zeros(size_t n, size_t *zn) {
  unsigned char *zero = calloc(n, 1), *z = malloc(n / 100 + 1024);
  ck_assert_ptr_nonnull(zero);
  ck_assert_ptr_nonnull(z);
  *zn = gzip_into(zero, n, 9, z, n / 100 + 1024);
  free(zero);
  return z;
}

/* max_inflate_ratio: a body may inflate to ratio x its size, and always
 * to ATTN_INFLATE_FLOOR_BYTES; past that a 413 naming the ratio, unless
 * max_body_bytes is the smaller limit (its own message); 0 = no ratio. */
START_TEST(test_inflate_ratio) {
  size_t n = 8 * ATTN_INFLATE_FLOOR_BYTES, zn;
  unsigned char *z = gzip_zeros(n, &zn);              /* ~1000:1 */
  unsigned ratio = (unsigned)((n + zn - 1) / zn) - 1; /* just short of it */
  ck_assert_uint_gt(ratio, 200);
  char *mem;
  size_t len;
  attn_diag d = {{0}};
  ck_assert_int_eq(attn__inflate((char *)z, zn, ATTN_ENC_GZIP, n, ratio + 1, 0,
                                 &mem, &len, &d),
                   ATTN_OK);
  ck_assert_uint_eq(len, n);
  free(mem);
  ck_assert_int_eq(
      attn__inflate((char *)z, zn, ATTN_ENC_GZIP, n, ratio, 0, &mem, &len, &d),
      ATTN_ETOOBIG);
  ck_assert_ptr_null(mem);
  char want[160];
  snprintf(want, sizeof want,
           "Content-Encoding gzip: the body inflates to more than %zu bytes, "
           "over max_inflate_ratio=%u times its %zu bytes",
           zn * ratio, ratio, zn);
  ck_assert_str_eq(d.msg, want);
  /* max_body_bytes below ratio x size: that limit speaks */
  ck_assert_int_eq(attn__inflate((char *)z, zn, ATTN_ENC_GZIP, n - 1, ratio + 1,
                                 0, &mem, &len, &d),
                   ATTN_ETOOBIG);
  ck_assert_ptr_nonnull(strstr(d.msg, "max_body_bytes="));
  ck_assert_int_eq(
      attn__inflate((char *)z, zn, ATTN_ENC_GZIP, n, 0, 0, &mem, &len, &d),
      ATTN_OK);
  free(mem);
  free(z);
  /* the floor: 1 MiB of zeros inflates whatever the ratio; a byte more
   * does not */
  z = gzip_zeros(ATTN_INFLATE_FLOOR_BYTES, &zn);
  ck_assert_int_eq(
      attn__inflate((char *)z, zn, ATTN_ENC_GZIP, n, 1, 0, &mem, &len, &d),
      ATTN_OK);
  ck_assert_uint_eq(len, ATTN_INFLATE_FLOOR_BYTES);
  free(mem);
  free(z);
  z = gzip_zeros(ATTN_INFLATE_FLOOR_BYTES + 1, &zn);
  ck_assert_int_eq(
      attn__inflate((char *)z, zn, ATTN_ENC_GZIP, n, 1, 0, &mem, &len, &d),
      ATTN_ETOOBIG);
  ck_assert_ptr_nonnull(strstr(d.msg,
                               "more than 1048576 bytes, over "
                               "max_inflate_ratio=1 times"));
  free(z);
}
END_TEST

Suite *inflate_suite(void) {
  Suite *s = suite_create("inflate");
  TCase *tc = tcase_create("inflate");
  tcase_add_test(tc, test_inflate);
  tcase_add_test(tc, test_inflate_ratio);
  suite_add_tcase(s, tc);
  return s;
}
