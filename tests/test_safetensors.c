/* test_safetensors.c - the .safetensors reader: conversion of every supported
 * dtype, metadata, and one case per validation rule (truncated files, bad
 * offsets, overlaps, holes, dtypes, limits).  Files are made here, byte by
 * byte, so every malformed variant is exact. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attn/safetensors.h"
#include "unit.h"

/* ---- building files ------------------------------------------------------ */

typedef struct sbuf {
  unsigned char *p;
  size_t n;
} sbuf;

static void sb_put(sbuf *b, const void *p, size_t n) {
  b->p = realloc(b->p, b->n + n + 1);
  ck_assert_ptr_nonnull(b->p);
  memcpy(b->p + b->n, p, n);
  b->n += n;
}

/* 8-byte LE length + header text (padded with spaces to a multiple of 8)
 * + data. hlen_override != 0 replaces the length field. */
static sbuf st_file(const char *header, const void *data, size_t dlen,
                    uint64_t hlen_override) {
  sbuf b = {NULL, 0};
  size_t hl = strlen(header), pad = (8 - hl % 8) % 8;
  uint64_t n = hlen_override ? hlen_override : hl + pad;
  unsigned char len[8];
  for (int i = 0; i < 8; i++) len[i] = (unsigned char)(n >> (8 * i));
  sb_put(&b, len, 8);
  sb_put(&b, header, hl);
  for (size_t i = 0; i < pad; i++) sb_put(&b, " ", 1);
  if (dlen) sb_put(&b, data, dlen);
  return b;
}

static attn_status parse(const char *header, const void *data, size_t dlen,
                         attn_safetensors **st, attn_diag *d) {
  sbuf b = st_file(header, data, dlen, 0);
  attn_status s = attn_safetensors_parse(b.p, b.n, "t.safetensors", 0, st, d);
  free(b.p);
  return s;
}

/* Expect failure with status s and a message containing each of the
 * substrings. */
static void expect_fail(const char *header, const void *data, size_t dlen,
                        attn_status want, const char *sub1, const char *sub2) {
  attn_safetensors *st = (attn_safetensors *)1;
  attn_diag d = {{0}};
  attn_status s = parse(header, data, dlen, &st, &d);
  ck_assert_msg(s == want, "status %s, want %s (%s)", attn_status_name(s),
                attn_status_name(want), d.msg);
  ck_assert_ptr_null(st);
  ck_assert_msg(strstr(d.msg, "t.safetensors") != NULL, "no file in '%s'",
                d.msg);
  if (sub1) ck_assert_msg(strstr(d.msg, sub1), "'%s' not in '%s'", sub1, d.msg);
  if (sub2) ck_assert_msg(strstr(d.msg, sub2), "'%s' not in '%s'", sub2, d.msg);
}

static const float F6[6] = {1.0f, -2.0f, 0.5f, 3.25f, -0.125f, 100.0f};

/* ---- good files ---------------------------------------------------------- */

START_TEST(all_dtypes) {
  unsigned char data[24 + 4 + 4 + 16];
  memcpy(data, F6, 24);                      /* F32 [2,3] */
  const uint16_t h16[2] = {0x3C00, 0xC000};  /* 1, -2 */
  const uint16_t bf16[2] = {0x3F80, 0xC040}; /* 1, -3 */
  const double f64[2] = {0.25, -1e10};
  memcpy(data + 24, h16, 4);
  memcpy(data + 28, bf16, 4);
  memcpy(data + 32, f64, 16);
  const char *hdr =
      "{\"__metadata__\":{\"format\":\"pt\",\"who\":\"test\"},"
      "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
      "\"h\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[24,28]},"
      "\"b\":{\"dtype\":\"BF16\",\"shape\":[1,2],\"data_offsets\":[28,32]},"
      "\"d\":{\"shape\":[2],\"data_offsets\":[32,48],\"dtype\":\"F64\"}}";
  attn_safetensors *st = NULL;
  attn_diag d = {{0}};
  ck_assert_int_eq(parse(hdr, data, sizeof data, &st, &d), ATTN_OK);
  ck_assert_uint_eq(attn_safetensors_count(st), 4);
  ck_assert_str_eq(attn_safetensors_at(st, 0)->name, "a"); /* header order */
  ck_assert_str_eq(attn_safetensors_at(st, 3)->name, "d");
  ck_assert_ptr_null(attn_safetensors_at(st, 4));

  const attn_safetensors_entry *e = attn_safetensors_find(st, "a");
  ck_assert_ptr_nonnull(e);
  ck_assert_int_eq(e->file_dtype, ATTN_DT_FP32);
  ck_assert_int_eq(e->tensor.dtype, ATTN_DT_FP32);
  ck_assert_int_eq(e->tensor.rank, 2);
  ck_assert_int_eq(e->tensor.shape[0], 2);
  ck_assert_int_eq(e->tensor.shape[1], 3);
  ck_assert_mem_eq(e->tensor.data, F6, 24);

  e = attn_safetensors_find(st, "h");
  ck_assert_int_eq(e->file_dtype, ATTN_DT_FP16);
  ck_assert_float_eq(((float *)e->tensor.data)[0], 1.0f);
  ck_assert_float_eq(((float *)e->tensor.data)[1], -2.0f);
  e = attn_safetensors_find(st, "b");
  ck_assert_int_eq(e->file_dtype, ATTN_DT_BF16);
  ck_assert_int_eq(e->tensor.rank, 2);
  ck_assert_float_eq(((float *)e->tensor.data)[1], -3.0f);
  e = attn_safetensors_find(st, "d");
  ck_assert_int_eq(e->file_dtype, ATTN_DT_FP64);
  ck_assert_float_eq(((float *)e->tensor.data)[0], 0.25f);
  ck_assert_float_eq(((float *)e->tensor.data)[1], -1e10f);
  ck_assert_ptr_null(attn_safetensors_find(st, "zz"));

  ck_assert_str_eq(attn_safetensors_metadata(st, "format"), "pt");
  ck_assert_str_eq(attn_safetensors_metadata(st, "who"), "test");
  ck_assert_ptr_null(attn_safetensors_metadata(st, "none"));
  attn_safetensors_destroy(st);
  attn_safetensors_destroy(NULL);
}
END_TEST

START_TEST(scalar_empty_and_order) {
  /* Offsets need not follow header order; zero-size tensors are fine; a
   * rank-0 tensor has one element; no tensors at all is a valid file. */
  float data[2] = {7.0f, 8.0f};
  const char *hdr =
      "{\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[4,8]},"
      "\"z\":{\"dtype\":\"F32\",\"shape\":[0,5],\"data_offsets\":[4,4]},"
      "\"f\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
  attn_safetensors *st = NULL;
  attn_diag d = {{0}};
  ck_assert_int_eq(parse(hdr, data, sizeof data, &st, &d), ATTN_OK);
  const attn_safetensors_entry *e = attn_safetensors_find(st, "s");
  ck_assert_int_eq(e->tensor.rank, 0);
  ck_assert_float_eq(((float *)e->tensor.data)[0], 8.0f);
  e = attn_safetensors_find(st, "z");
  ck_assert_int_eq(e->tensor.shape[0], 0);
  ck_assert_int_eq(e->tensor.shape[1], 5);
  attn_safetensors_destroy(st);

  ck_assert_int_eq(parse("{}", NULL, 0, &st, &d), ATTN_OK);
  ck_assert_uint_eq(attn_safetensors_count(st), 0);
  attn_safetensors_destroy(st);
}
END_TEST

START_TEST(load_file) {
  char path[] = "/tmp/attn_st_XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  sbuf b = st_file(
      "{\"w\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[0,24]}}", F6,
      24, 0);
  ck_assert_int_eq(write(fd, b.p, b.n), (ssize_t)b.n);
  close(fd);
  attn_safetensors *st = NULL;
  attn_diag d = {{0}};
  ck_assert_int_eq(attn_safetensors_load(path, 6, &st, &d), ATTN_OK);
  ck_assert_mem_eq(attn_safetensors_find(st, "w")->tensor.data, F6, 24);
  attn_safetensors_destroy(st);

  /* element bound: parsed header says 6 > 5 */
  ck_assert_int_eq(attn_safetensors_load(path, 5, &st, &d), ATTN_ETOOBIG);
  ck_assert_ptr_null(st);
  ck_assert_ptr_nonnull(strstr(d.msg, "'w'"));
  /* file far larger than 1 element can need: refused unread */
  unsigned char big[4096] = {0};
  FILE *f = fopen(path, "ab");
  ck_assert_ptr_nonnull(f);
  for (int i = 0; i < 30000; i++) fwrite(big, 1, sizeof big, f);
  fclose(f);
  ck_assert_int_eq(attn_safetensors_load(path, 1, &st, &d), ATTN_ETOOBIG);
  ck_assert_ptr_nonnull(strstr(d.msg, path));
  unlink(path);
  free(b.p);

  ck_assert_int_eq(
      attn_safetensors_load("/nonexistent/x.safetensors", 0, &st, &d),
      ATTN_EIO);
  ck_assert_ptr_null(st);
  ck_assert_ptr_nonnull(strstr(d.msg, "/nonexistent/x.safetensors"));
}
END_TEST

/* A FIFO, a folder, a device: refused at once, unread (the FIFO's open
 * waited for a writer for ever; /dev/zero's reads never end). */
START_TEST(not_regular_files) {
  char dir[] = "/tmp/attn_st_XXXXXX", fifo[64];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(fifo, sizeof fifo, "%s/w.fifo", dir);
  ck_assert_int_eq(mkfifo(fifo, 0600), 0);
  const char *const paths[] = {fifo, dir, "/dev/zero"};
  const char *const kinds[] = {"(a FIFO)", "(a directory)",
                               "(a character device)"};
  for (int i = 0; i < 3; i++) {
    attn_safetensors *st = (attn_safetensors *)1;
    attn_diag d = {{0}};
    ck_assert_int_eq(attn_safetensors_load(paths[i], 0, &st, &d), ATTN_EIO);
    ck_assert_ptr_null(st);
    ck_assert_msg(strstr(d.msg, "not a regular file") &&
                      strstr(d.msg, kinds[i]) && strstr(d.msg, paths[i]),
                  "%s", d.msg);
  }
  unlink(fifo);
  rmdir(dir);
}
END_TEST

/* ---- malformed files ----------------------------------------------------- */

START_TEST(truncated) {
  attn_safetensors *st = (attn_safetensors *)1;
  attn_diag d = {{0}};
  unsigned char four[4] = {1, 0, 0, 0};
  ck_assert_int_eq(attn_safetensors_parse(four, 4, "t.safetensors", 0, &st, &d),
                   ATTN_EPARSE);
  ck_assert_ptr_null(st);
  ck_assert_ptr_nonnull(strstr(d.msg, "too short"));

  /* header length beyond the file */
  sbuf b = st_file("{}", NULL, 0, 1000);
  ck_assert_int_eq(
      attn_safetensors_parse(b.p, b.n, "t.safetensors", 0, &st, &d),
      ATTN_EPARSE);
  ck_assert_ptr_nonnull(strstr(d.msg, "truncated"));
  /* the length is the file's first bytes: never in the message */
  ck_assert_ptr_nonnull(strstr(d.msg, "not a safetensors file"));
  ck_assert_ptr_null(strstr(d.msg, "1000"));
  free(b.p);
  /* header length absurdly large (overflow bait) */
  b = st_file("{}", NULL, 0, UINT64_MAX);
  ck_assert_int_eq(
      attn_safetensors_parse(b.p, b.n, "t.safetensors", 0, &st, &d),
      ATTN_EPARSE);
  free(b.p);
  /* data cut short: tensor needs 24 bytes, 12 present */
  expect_fail(
      "{\"w\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[0,24]}}", F6,
      12, ATTN_EPARSE, "'w'", "outside the data section");
}
END_TEST

START_TEST(bad_offsets) {
  expect_fail(
      "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", F6,
      24, ATTN_EPARSE, "'w'", "outside");
  expect_fail(
      "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,12]}}", F6,
      12, ATTN_EPARSE, "'w'", "hold 12 bytes");
  expect_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}",
              F6, 8, ATTN_EPARSE, "'w'", "data_offsets");
  expect_fail(
      "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}", F6,
      8, ATTN_EPARSE, "'w'", "data_offsets");
  expect_fail(
      "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8.5]}}", F6,
      8, ATTN_EPARSE, "'w'", "data_offsets");
  expect_fail(
      "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,"
      "18446744073709551616]}}",
      F6, 8, ATTN_EPARSE, "'w'", NULL);
  /* numel * 4 overflows size_t */
  expect_fail(
      "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
      "\"data_offsets\":[0,8]}}",
      F6, 8, ATTN_EPARSE, "'w'", NULL);
}
END_TEST

START_TEST(overlap_and_holes) {
  expect_fail(
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}",
      F6, 24, ATTN_EPARSE, "'b'", "overlap");
  expect_fail(
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
      F6, 8, ATTN_EPARSE, "overlap", NULL);
  expect_fail(
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}",
      F6, 20, ATTN_EPARSE, "'b'", "hole");
  /* trailing bytes no tensor covers */
  expect_fail(
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", F6,
      24, ATTN_EPARSE, "cover 8 bytes", NULL);
}
END_TEST

START_TEST(dtypes_and_fields) {
  expect_fail(
      "{\"i\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}", F6, 8,
      ATTN_EUNSUPPORTED, "'i'", "I32");
  expect_fail(
      "{\"i\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", F6, 8,
      ATTN_EPARSE, "'i'", "F33");
  expect_fail("{\"i\":{\"dtype\":7,\"shape\":[2],\"data_offsets\":[0,8]}}", F6,
              8, ATTN_EPARSE, "'i'", "dtype");
  expect_fail("{\"i\":{\"shape\":[2],\"data_offsets\":[0,8]}}", F6, 8,
              ATTN_EPARSE, "'i'", "missing 'dtype'");
  expect_fail(
      "{\"i\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],"
      "\"extra\":1}}",
      F6, 8, ATTN_EPARSE, "'i'", "'extra'");
  expect_fail(
      "{\"i\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", F6,
      8, ATTN_EPARSE, "'i'", "shape[0]");
  expect_fail(
      "{\"i\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,2],"
      "\"data_offsets\":[0,8]}}",
      F6, 8, ATTN_EPARSE, "'i'", "rank 9");
  expect_fail("{\"i\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}",
              F6, 8, ATTN_EPARSE, "'i'", "shape");
  expect_fail("{\"i\":[1,2]}", F6, 0, ATTN_EPARSE, "'i'", "not an object");
  expect_fail(
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
      "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
      F6, 8, ATTN_EPARSE, "'a'", "twice");
  expect_fail("{\"__metadata__\":{\"k\":1}}", NULL, 0, ATTN_EPARSE,
              "__metadata__", "'k'");
  expect_fail("{\"__metadata__\":[]}", NULL, 0, ATTN_EPARSE, "__metadata__",
              NULL);
}
END_TEST

START_TEST(bad_header) {
  expect_fail("[1,2]", NULL, 0, ATTN_EPARSE, "not a JSON object", NULL);
  expect_fail("{\"a\":", NULL, 0, ATTN_EPARSE, "not valid JSON", NULL);
  expect_fail("{} x", NULL, 0, ATTN_EPARSE, "after the header", NULL);
  /* max_elements */
  sbuf b = st_file(
      "{\"w\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[0,24]}}", F6,
      24, 0);
  attn_safetensors *st = NULL;
  attn_diag d = {{0}};
  ck_assert_int_eq(
      attn_safetensors_parse(b.p, b.n, "t.safetensors", 5, &st, &d),
      ATTN_ETOOBIG);
  ck_assert_ptr_null(st);
  ck_assert_int_eq(
      attn_safetensors_parse(b.p, b.n, "t.safetensors", 6, &st, &d), ATTN_OK);
  attn_safetensors_destroy(st);
  /* every prefix of a good file fails cleanly */
  for (size_t n = 0; n < b.n; n++) {
    ck_assert_int_ne(
        attn_safetensors_parse(b.p, n, "t.safetensors", 0, &st, &d), ATTN_OK);
    ck_assert_ptr_null(st);
  }
  free(b.p);
}
END_TEST

Suite *safetensors_suite(void) {
  Suite *s = suite_create("safetensors");
  TCase *tc = tcase_create("safetensors");
  tcase_add_test(tc, all_dtypes);
  tcase_add_test(tc, scalar_empty_and_order);
  tcase_add_test(tc, load_file);
  tcase_add_test(tc, not_regular_files);
  tcase_add_test(tc, truncated);
  tcase_add_test(tc, bad_offsets);
  tcase_add_test(tc, overlap_and_holes);
  tcase_add_test(tc, dtypes_and_fields);
  tcase_add_test(tc, bad_header);
  suite_add_tcase(s, tc);
  return s;
}
