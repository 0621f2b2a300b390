/* test_tensor.c - dtypes, shapes, half floats and conversions
 * (src/common/tensor.c). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "attn/tensor.h"
#include "unit.h"

START_TEST(test_dtype_table) {
  ck_assert_int_eq(attn_dtype_parse("FP32"), ATTN_DT_FP32);
  ck_assert_int_eq(attn_dtype_parse("BF16"), ATTN_DT_BF16);
  ck_assert_int_eq(attn_dtype_parse("fp32"), ATTN_DT_INVALID);
  ck_assert_int_eq(attn_dtype_parse(NULL), ATTN_DT_INVALID);
  ck_assert_uint_eq(attn_dtype_size(ATTN_DT_INT64), 8);
  ck_assert_uint_eq(attn_dtype_size(ATTN_DT_BOOL), 1);
  ck_assert_str_eq(attn_dtype_name(ATTN_DT_FP16), "FP16");
  ck_assert_ptr_null(attn_dtype_name(ATTN_DT_INVALID));
  ck_assert_int_eq(attn_dtype_parse("BYTES"), ATTN_DT_BYTES);
  ck_assert_uint_eq(attn_dtype_size(ATTN_DT_BYTES), 0);
}
END_TEST

/* A BYTES tensor built in order and read back in any order; what put and
 * at refuse. */
START_TEST(test_bytes_tensor) {
  int64_t shape[2] = {2, 2};
  attn_tensor t, f;
  const char *s;
  size_t n;
  ck_assert_int_eq(attn_tensor_bytes_alloc(&t, 2, shape, 9), ATTN_OK);
  ck_assert_int_eq(t.dtype, ATTN_DT_BYTES);
  ck_assert(t.owns);
  ck_assert_int_eq(attn_tensor_bytes_at(&t, 0, &s, &n), ATTN_EINVAL);
  ck_assert_int_eq(attn_tensor_bytes_put(&t, 1, "x", 1), ATTN_EINVAL);
  ck_assert_int_eq(attn_tensor_bytes_put(&t, 0, "abc", 3), ATTN_OK);
  ck_assert_int_eq(attn_tensor_bytes_put(&t, 1, NULL, 0), ATTN_OK);
  ck_assert_int_eq(attn_tensor_bytes_put(&t, 2, "a\0b", 3), ATTN_OK);
  ck_assert_int_eq(attn_tensor_bytes_put(&t, 3, "xyz!", 4), ATTN_EINVAL);
  ck_assert_int_eq(attn_tensor_bytes_put(&t, 3, "xyz", 3), ATTN_OK);
  ck_assert_int_eq(attn_tensor_bytes_put(&t, 4, "", 0), ATTN_EINVAL);
  ck_assert_int_eq(attn_tensor_bytes_at(&t, 3, &s, &n), ATTN_OK);
  ck_assert_uint_eq(n, 3);
  ck_assert_str_eq(s, "xyz");
  ck_assert_int_eq(attn_tensor_bytes_at(&t, 1, &s, &n), ATTN_OK);
  ck_assert_uint_eq(n, 0);
  ck_assert_str_eq(s, "");
  ck_assert_int_eq(attn_tensor_bytes_at(&t, 2, &s, &n), ATTN_OK);
  ck_assert_uint_eq(n, 3);
  ck_assert(memcmp(s, "a\0b", 4) == 0);
  ck_assert_int_eq(attn_tensor_bytes_at(&t, 0, &s, &n), ATTN_OK);
  ck_assert_str_eq(s, "abc");
  ck_assert_int_eq(attn_tensor_bytes_at(&t, 4, &s, &n), ATTN_EINVAL);
  ck_assert_int_eq(attn_tensor_bytes_at(&t, -1, &s, &n), ATTN_EINVAL);
  ck_assert_int_eq(attn_tensor_to_f32(&t, &f), ATTN_EINVAL);
  attn_tensor_free(&t);
  ck_assert_ptr_null(t.data);
  /* rank 0: one element; an empty shape: none */
  ck_assert_int_eq(attn_tensor_bytes_alloc(&t, 0, NULL, 2), ATTN_OK);
  ck_assert_int_eq(attn_tensor_bytes_put(&t, 0, "hi", 2), ATTN_OK);
  ck_assert_int_eq(attn_tensor_bytes_at(&t, 0, &s, &n), ATTN_OK);
  ck_assert_str_eq(s, "hi");
  attn_tensor_free(&t);
  shape[0] = 0;
  ck_assert_int_eq(attn_tensor_bytes_alloc(&t, 2, shape, 0), ATTN_OK);
  ck_assert_int_eq(attn_tensor_bytes_put(&t, 0, "", 0), ATTN_EINVAL);
  attn_tensor_free(&t);
  shape[0] = -1;
  ck_assert_int_eq(attn_tensor_bytes_alloc(&t, 2, shape, 0), ATTN_EINVAL);
  ck_assert_ptr_null(t.data);
  /* not a BYTES tensor */
  float v = 1;
  attn_tensor ft = {.dtype = ATTN_DT_FP32, .rank = 0, .data = &v};
  ck_assert_int_eq(attn_tensor_bytes_at(&ft, 0, &s, &n), ATTN_EINVAL);
  ck_assert_int_eq(attn_tensor_bytes_put(&ft, 0, "a", 1), ATTN_EINVAL);
}
END_TEST

START_TEST(test_numel_overflow) {
  int64_t ok[3] = {2, 3, 4}, big[2] = {(int64_t)1 << 40, (int64_t)1 << 40};
  int64_t neg[2] = {2, -1};
  size_t n = 99;
  ck_assert(attn_shape_numel(3, ok, &n));
  ck_assert_uint_eq(n, 24);
  ck_assert(!attn_shape_numel(2, big, &n));
  ck_assert(!attn_shape_numel(2, neg, &n));
  ck_assert(!attn_shape_numel(9, ok, &n));
  ck_assert_uint_eq(n, 24);
  ck_assert(attn_shape_numel(0, ok, &n));
  ck_assert_uint_eq(n, 1);
}
END_TEST

START_TEST(test_half_conversions) {
  ck_assert_float_eq(attn_f16_to_f32(0x3c00), 1.0f);
  ck_assert_float_eq(attn_f16_to_f32(0xc000), -2.0f);
  ck_assert_float_eq(attn_f16_to_f32(0x7bff), 65504.0f);
  ck_assert_float_eq(attn_f16_to_f32(0x0001), ldexpf(1.0f, -24));
  ck_assert_float_eq(attn_f16_to_f32(0x0200), ldexpf(1.0f, -15));
  ck_assert(isinf(attn_f16_to_f32(0x7c00)));
  ck_assert(isnan(attn_f16_to_f32(0x7e00)));
  ck_assert_float_eq(attn_bf16_to_f32(0x3f80), 1.0f);
  ck_assert_float_eq(attn_bf16_to_f32(0xc0a0), -5.0f);
  /* every finite half converts exactly: check the ordering is monotone */
  float prev = -INFINITY;
  for (uint32_t h = 0xfbff; h >= 0x8001; h--) { /* negative, descending mag */
    float f = attn_f16_to_f32((uint16_t)h);
    ck_assert(f > prev);
    prev = f;
  }
}
END_TEST

START_TEST(test_to_f32) {
  int64_t v[3] = {-3, 0, 1 << 20};
  attn_tensor t = {.dtype = ATTN_DT_INT64, .rank = 1, .shape = {3}, .data = v};
  attn_tensor f;
  ck_assert_int_eq(attn_tensor_to_f32(&t, &f), ATTN_OK);
  ck_assert_int_eq(f.dtype, ATTN_DT_FP32);
  ck_assert_float_eq(((float *)f.data)[0], -3.0f);
  ck_assert_float_eq(((float *)f.data)[2], 1048576.0f);
  attn_tensor_free(&f);
  ck_assert_ptr_null(f.data);
  t.dtype = ATTN_DT_INVALID;
  ck_assert_int_eq(attn_tensor_to_f32(&t, &f), ATTN_EINVAL);
  ck_assert_ptr_null(f.data);
  attn_tensor_free(NULL);
}
END_TEST

/* attn_shape_format against snprintf (the text it replaced): every rank,
 * extreme and negative dims, and every buffer size from 1 up. */
START_TEST(test_shape_format) {
  int64_t shape[ATTN_MAX_RANK] = {0};
  char got[200], want[200];
  unsigned seed = 7;
  ck_assert_str_eq(attn_shape_format(got, sizeof got, 0, shape), "[]");
  for (int it = 0; it < 2000; it++) {
    int rank = it % (ATTN_MAX_RANK + 1);
    for (int i = 0; i < rank; i++) {
      seed = seed * 1103515245u + 12345u;
      switch (seed >> 29) {
        case 0:
          shape[i] = INT64_MIN;
          break;
        case 1:
          shape[i] = INT64_MAX;
          break;
        case 2:
          shape[i] = -(int64_t)(seed >> 20);
          break;
        case 3:
          shape[i] = 0;
          break;
        default:
          shape[i] = (int64_t)(seed >> (seed >> 27));
          break;
      }
    }
    size_t n = 0;
    n += (size_t)snprintf(want + n, sizeof want - n, "[");
    for (int i = 0; i < rank; i++)
      n += (size_t)snprintf(want + n, sizeof want - n, "%s%lld", i ? "," : "",
                            (long long)shape[i]);
    snprintf(want + n, sizeof want - n, "]");
    ck_assert_str_eq(attn_shape_format(got, sizeof got, rank, shape), want);
    for (size_t cap = 1; cap <= strlen(want) + 1; cap++) {
      memset(got, 'x', sizeof got);
      attn_shape_format(got, cap, rank, shape);
      ck_assert_uint_eq(strlen(got), cap - 1);          /* truncated, */
      ck_assert_int_eq(strncmp(got, want, cap - 1), 0); /* a prefix */
      ck_assert_int_eq(got[cap], 'x');                  /* within cap */
    }
  }
}
END_TEST

static uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

/* Float to FP16 and BF16: every non-NaN half value converts back to
 * itself; the midpoint between two neighbours goes to the even one and
 * anything off the midpoint to the nearer; NaN stays NaN. */
START_TEST(test_f32_to_half) {
  for (uint32_t h = 0; h < 0x10000u; h++) {
    float f = attn_f16_to_f32((uint16_t)h), g = attn_bf16_to_f32((uint16_t)h);
    if (f == f) ck_assert_uint_eq(attn_f32_to_f16(f), h);
    if (g == g) ck_assert_uint_eq(attn_f32_to_bf16(g), h);
    if (f != f)
      ck_assert(attn_f16_to_f32(attn_f32_to_f16(f)) !=
                attn_f16_to_f32(attn_f32_to_f16(f)));
    if (g != g)
      ck_assert(attn_bf16_to_f32(attn_f32_to_bf16(g)) !=
                attn_bf16_to_f32(attn_f32_to_bf16(g)));
    /* midpoints to the next value up in magnitude, finite ones */
    uint16_t n = (uint16_t)(h + 1);
    if ((h & 0x7fffu) < 0x7c00u) { /* FP16: next is finite or inf */
      double a = attn_f16_to_f32((uint16_t)h), b = attn_f16_to_f32(n);
      float mid = (float)((a + b) / 2); /* exact: 11 bits + 1 */
      uint16_t even = (h & 1u) ? n : (uint16_t)h;
      ck_assert_uint_eq(attn_f32_to_f16(mid), even);
      uint32_t up = bits_of(mid) + 1u, dn = bits_of(mid) - 1u;
      float above, below;
      memcpy(&above, &up, 4);
      memcpy(&below, &dn, 4);
      if ((h & 0x7fffu) != 0x7bffu) { /* not next to inf */
        ck_assert_uint_eq(attn_f32_to_f16(above), n);
        ck_assert_uint_eq(attn_f32_to_f16(below), h);
      }
    }
    if ((h & 0x7fffu) < 0x7f80u) { /* BF16 */
      double a = attn_bf16_to_f32((uint16_t)h), b = attn_bf16_to_f32(n);
      float mid = (float)((a + b) / 2);
      uint16_t even = (h & 1u) ? n : (uint16_t)h;
      ck_assert_uint_eq(attn_f32_to_bf16(mid), even);
    }
  }
  ck_assert_uint_eq(attn_f32_to_f16(65519.0f), 0x7bffu);
  ck_assert_uint_eq(attn_f32_to_f16(65520.0f), 0x7c00u);
  ck_assert_uint_eq(attn_f32_to_f16(-1e30f), 0xfc00u);
  ck_assert_uint_eq(attn_f32_to_bf16(FLT_MAX), 0x7f80u);
}
END_TEST

Suite *tensor_suite(void) {
  Suite *s = suite_create("tensor");
  TCase *tc = tcase_create("tensor");
  tcase_add_test(tc, test_dtype_table);
  tcase_add_test(tc, test_numel_overflow);
  tcase_add_test(tc, test_bytes_tensor);
  tcase_add_test(tc, test_half_conversions);
  tcase_add_test(tc, test_f32_to_half);
  tcase_add_test(tc, test_to_f32);
  tcase_add_test(tc, test_shape_format);
  suite_add_tcase(s, tc);
  return s;
}
