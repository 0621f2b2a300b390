/* test_kv.c - the KV block pool (include/attn/kv.h, src/kv/kv.c): append,
 * read, the block layout, fork with copy on write, truncate, free and
 * reuse, exhaustion, reference counts, threads, and the bookkeeping
 * overhead of 1,000 sequences of 1,024 tokens. */
#include <pthread.h>
#include <stdio.h>

#include "attn/kv.h"
#include "unit.h"

#define BT ATTN_KV_BLOCK_TOKENS

/* fp32 rows whose values name them: token tag, head h, dim c. */
static float *rows_f32(int64_t t, int64_t H, int64_t D, float tag) {
  float *r = malloc((size_t)(t * H * D) * sizeof *r);
  ck_assert_ptr_nonnull(r);
  for (int64_t i = 0; i < t; i++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t c = 0; c < D; c++)
        r[(i * H + h) * D + c] = tag + (float)i * 1000.0f + (float)(h * D + c);
  return r;
}

static attn_kv_pool *pool_new(size_t limit) {
  attn_kv_pool *p;
  attn_diag d;
  ck_assert_int_eq(attn_kv_pool_create(limit, &p, &d), ATTN_OK);
  return p;
}

static attn_kv_seq *seq_new(attn_kv_pool *p, int64_t H, int64_t D,
                            attn_kv_dtype dt) {
  attn_kv_shape sh = {H, D, dt};
  attn_kv_seq *s;
  attn_diag d;
  ck_assert_msg(attn_kv_seq_create(p, &sh, &s, &d) == ATTN_OK, "%s", d.msg);
  return s;
}

static void append_f32(attn_kv_seq *s, int64_t t, float ktag, float vtag) {
  const attn_kv_shape *sh = attn_kv_seq_shape(s);
  float *k = rows_f32(t, sh->num_kv_heads, sh->head_dim, ktag);
  float *v = rows_f32(t, sh->num_kv_heads, sh->head_dim, vtag);
  attn_diag d;
  ck_assert_msg(attn_kv_seq_append(s, t, k, v, &d) == ATTN_OK, "%s", d.msg);
  free(k);
  free(v);
}

/* Tokens [pos, pos + t) of s are the rows tagged ktag, vtag (as appended
 * by append_f32 starting at pos0 = pos - first). */
static void expect_f32(const attn_kv_seq *s, int64_t pos, int64_t t,
                       int64_t first, float ktag, float vtag) {
  const attn_kv_shape *sh = attn_kv_seq_shape(s);
  int64_t H = sh->num_kv_heads, D = sh->head_dim, n = first + t;
  float *k = rows_f32(n, H, D, ktag), *v = rows_f32(n, H, D, vtag);
  float *gk = malloc((size_t)(t * H * D) * sizeof *gk);
  float *gv = malloc((size_t)(t * H * D) * sizeof *gv);
  attn_diag d;
  ck_assert_int_eq(attn_kv_seq_read(s, pos, t, gk, gv, &d), ATTN_OK);
  ck_assert(memcmp(gk, k + first * H * D, (size_t)(t * H * D) * 4) == 0);
  ck_assert(memcmp(gv, v + first * H * D, (size_t)(t * H * D) * 4) == 0);
  free(k);
  free(v);
  free(gk);
  free(gv);
}

static attn_kv_pool_stats stats(attn_kv_pool *p) {
  attn_kv_pool_stats st;
  attn_kv_pool_stats_get(p, &st);
  return st;
}

START_TEST(kv_names) {
  attn_kv_dtype t;
  ck_assert_str_eq(attn_kv_dtype_name(ATTN_KV_BF16), "bf16");
  ck_assert(attn_kv_dtype_parse("fp16", &t) && t == ATTN_KV_FP16);
  ck_assert(!attn_kv_dtype_parse("FP16", &t));
  ck_assert(!attn_kv_dtype_parse(NULL, &t));
  attn_kv_shape sh = {8, 128, ATTN_KV_BF16};
  ck_assert_uint_eq(attn_kv_block_bytes(&sh), 2 * 16 * 8 * 128 * 2);
  sh = (attn_kv_shape){3, 5, ATTN_KV_BF16}; /* keys padded to 6 dims */
  ck_assert_uint_eq(attn_kv_block_bytes(&sh), 3 * (16 * 6 + 16 * 5) * 2);
  ck_assert_uint_eq(attn_kv_values_offset(&sh), 16 * 6 * 2);
  sh.dtype = ATTN_KV_FP16;
  ck_assert_uint_eq(attn_kv_block_bytes(&sh), 3 * 2 * 16 * 5 * 2);
  sh.head_dim = 0;
  ck_assert_uint_eq(attn_kv_block_bytes(&sh), 0);
}
END_TEST

START_TEST(kv_bad_shapes) {
  attn_kv_pool *p = pool_new(1 << 20);
  attn_kv_seq *s;
  attn_diag d;
  attn_kv_shape sh = {0, 64, ATTN_KV_FP32};
  ck_assert_int_eq(attn_kv_seq_create(p, &sh, &s, &d), ATTN_EINVAL);
  ck_assert(strstr(d.msg, "num_kv_heads") != NULL);
  sh = (attn_kv_shape){2, 64, (attn_kv_dtype)7};
  ck_assert_int_eq(attn_kv_seq_create(p, &sh, &s, &d), ATTN_EINVAL);
  ck_assert(strstr(d.msg, "kv_dtype") != NULL);
  sh = (attn_kv_shape){64, 1024, ATTN_KV_FP32}; /* 8 MiB a block */
  ck_assert_int_eq(attn_kv_seq_create(p, &sh, &s, &d), ATTN_ETOOBIG);
  ck_assert(strstr(d.msg, "limit") != NULL);
  attn_kv_pool *none;
  ck_assert_int_eq(attn_kv_pool_create(0, &none, &d), ATTN_EINVAL);
  ck_assert_ptr_null(none);
  attn_kv_pool_destroy(NULL);
  ck_assert_uint_eq(stats(p).sequences, 0);
  attn_kv_pool_destroy(p);
}
END_TEST

/* What one append writes is read back bitwise, every dtype, across block
 * boundaries, in steps of any size; the blocks are laid out as kv.h says. */
START_TEST(kv_append_read_layout) {
  static const attn_kv_dtype dts[] = {ATTN_KV_FP32, ATTN_KV_BF16, ATTN_KV_FP16};
  attn_kv_pool *p = pool_new(64 << 20);
  for (int di = 0; di < 3; di++) {
    int64_t H = 3, D = 5, e = (int64_t)attn_kv_dtype_size(dts[di]);
    attn_kv_seq *s = seq_new(p, H, D, dts[di]);
    uint64_t rs = 7 + (uint64_t)di;
    int64_t total = 0, steps[] = {1, 15, 1, 16, 33, 2};
    unsigned char *k = malloc(200 * (size_t)(H * D * e)),
                  *v = malloc(200 * (size_t)(H * D * e));
    for (size_t i = 0; i < 200 * (size_t)(H * D * e); i++) {
      k[i] = (unsigned char)xs64(&rs);
      v[i] = (unsigned char)xs64(&rs);
    }
    for (int st = 0; st < 6; st++) {
      attn_diag d;
      size_t off = (size_t)(total * H * D * e);
      ck_assert_int_eq(attn_kv_seq_append(s, steps[st], k + off, v + off, &d),
                       ATTN_OK);
      total += steps[st];
    }
    ck_assert_int_eq(attn_kv_seq_len(s), total);
    ck_assert_uint_eq(attn_kv_seq_bytes(s),
                      (size_t)((total + BT - 1) / BT) *
                          attn_kv_block_bytes(attn_kv_seq_shape(s)));
    unsigned char *gk = malloc((size_t)(total * H * D * e));
    unsigned char *gv = malloc((size_t)(total * H * D * e));
    attn_diag d;
    ck_assert_int_eq(attn_kv_seq_read(s, 0, total, gk, gv, &d), ATTN_OK);
    ck_assert(memcmp(gk, k, (size_t)(total * H * D * e)) == 0);
    ck_assert(memcmp(gv, v, (size_t)(total * H * D * e)) == 0);
    ck_assert_int_eq(attn_kv_seq_read(s, 3, total, gk, gv, &d), ATTN_EINVAL);
    /* the layout: token 37 (block 2, slot 5), head 1, dims 3 and 4 */
    attn_kv_view vw = attn_kv_seq_view(s);
    ck_assert_int_eq(vw.len, total);
    const attn_kv_shape *sh = attn_kv_seq_shape(s);
    const unsigned char *pan =
        (const unsigned char *)vw.blocks[37 / BT] + attn_kv_panel_bytes(sh);
    for (int64_t c = 3; c <= 4; c++) {
      size_t ki = dts[di] == ATTN_KV_BF16
                      ? (size_t)(((c / 2) * BT + 5) * 2 + c % 2)
                      : (size_t)(c * BT + 5);
      size_t vi = dts[di] == ATTN_KV_BF16 ? (size_t)(((5 / 2) * D + c) * 2 + 1)
                                          : (size_t)(5 * D + c);
      ck_assert_uint_eq(attn_kv_key_index(dts[di], c, 5), ki);
      ck_assert_uint_eq(attn_kv_value_index(dts[di], D, 5, c), vi);
      ck_assert(memcmp(pan + ki * (size_t)e, k + ((37 * H + 1) * D + c) * e,
                       (size_t)e) == 0);
      ck_assert(memcmp(pan + attn_kv_values_offset(sh) + vi * (size_t)e,
                       v + ((37 * H + 1) * D + c) * e, (size_t)e) == 0);
    }
    free(gk);
    free(gv);
    free(k);
    free(v);
    attn_kv_seq_free(s);
  }
  ck_assert_uint_eq(stats(p).used_blocks, 0);
  attn_kv_pool_destroy(p);
}
END_TEST

/* Fork shares every block; each side then appends other tokens into the
 * shared partly filled last block: each copies it first, and neither sees
 * the other's tokens; the full blocks stay shared. */
START_TEST(kv_fork_copy_on_write) {
  attn_kv_pool *p = pool_new(64 << 20);
  attn_kv_seq *a = seq_new(p, 2, 8, ATTN_KV_FP32), *b;
  attn_diag d;
  append_f32(a, 20, 0.5f, 0.25f); /* blocks 0 (full) and 1 (4 tokens) */
  ck_assert_int_eq(attn_kv_seq_fork(a, &b, &d), ATTN_OK);
  ck_assert_int_eq(attn_kv_seq_len(b), 20);
  ck_assert_uint_eq(attn_kv_seq_block_refs(a, 0), 2);
  ck_assert_uint_eq(attn_kv_seq_block_refs(a, 19), 2);
  ck_assert_uint_eq(stats(p).used_blocks, 2);
  append_f32(a, 3, 0.75f, 0.125f);   /* a's tokens 20..22 */
  append_f32(b, 5, 0.875f, 0.0625f); /* b's tokens 20..24 */
  ck_assert_uint_eq(attn_kv_seq_block_refs(a, 0), 2);
  ck_assert_uint_eq(attn_kv_seq_block_refs(a, 19), 1);
  ck_assert_uint_eq(attn_kv_seq_block_refs(b, 19), 1);
  ck_assert_uint_eq(stats(p).used_blocks, 3);
  ck_assert_ptr_ne(attn_kv_seq_view(a).blocks[1],
                   attn_kv_seq_view(b).blocks[1]);
  expect_f32(a, 0, 20, 0, 0.5f, 0.25f);
  expect_f32(b, 0, 20, 0, 0.5f, 0.25f);
  expect_f32(a, 20, 3, 0, 0.75f, 0.125f);
  expect_f32(b, 20, 5, 0, 0.875f, 0.0625f);
  ck_assert_int_eq(attn_kv_seq_len(a), 23);
  ck_assert_int_eq(attn_kv_seq_len(b), 25);
  /* a fork of a fork at a block boundary: nothing to copy on append */
  attn_kv_seq *c;
  ck_assert_int_eq(attn_kv_seq_truncate(b, 16, &d), ATTN_OK);
  ck_assert_int_eq(attn_kv_seq_fork(b, &c, &d), ATTN_OK);
  ck_assert_uint_eq(attn_kv_seq_block_refs(c, 0), 3);
  append_f32(c, 1, 0.3f, 0.6f);
  append_f32(b, 1, 0.4f, 0.7f);
  expect_f32(c, 16, 1, 0, 0.3f, 0.6f);
  expect_f32(b, 16, 1, 0, 0.4f, 0.7f);
  expect_f32(c, 0, 16, 0, 0.5f, 0.25f);
  attn_kv_seq_free(a);
  attn_kv_seq_free(b);
  ck_assert_uint_eq(attn_kv_seq_block_refs(c, 0), 1);
  expect_f32(c, 0, 16, 0, 0.5f, 0.25f);
  attn_kv_seq_free(c);
  ck_assert_uint_eq(stats(p).used_blocks, 0);
  attn_kv_pool_destroy(p);
}
END_TEST

/* Truncate gives back the blocks past n; appending after it writes the new
 * tokens where the old ones were, the first n unchanged. */
START_TEST(kv_truncate_then_append) {
  attn_kv_pool *p = pool_new(64 << 20);
  attn_kv_seq *s = seq_new(p, 2, 8, ATTN_KV_FP32);
  attn_diag d;
  append_f32(s, 40, 1.0f, 2.0f);
  ck_assert_uint_eq(stats(p).used_blocks, 3);
  ck_assert_int_eq(attn_kv_seq_truncate(s, 18, &d), ATTN_OK);
  ck_assert_int_eq(attn_kv_seq_len(s), 18);
  ck_assert_uint_eq(stats(p).used_blocks, 2);
  ck_assert_int_eq(attn_kv_seq_truncate(s, 30, &d), ATTN_OK); /* no-op */
  ck_assert_int_eq(attn_kv_seq_len(s), 18);
  ck_assert_int_eq(attn_kv_seq_truncate(s, -1, &d), ATTN_EINVAL);
  append_f32(s, 5, 3.0f, 4.0f);
  expect_f32(s, 0, 18, 0, 1.0f, 2.0f);
  expect_f32(s, 18, 5, 0, 3.0f, 4.0f);
  ck_assert_int_eq(attn_kv_seq_truncate(s, 0, &d), ATTN_OK);
  ck_assert_uint_eq(stats(p).used_blocks, 0);
  append_f32(s, 1, 5.0f, 6.0f);
  expect_f32(s, 0, 1, 0, 5.0f, 6.0f);
  /* a truncated fork: the shared block is kept, the other side intact */
  attn_kv_seq *f;
  append_f32(s, 20, 7.0f, 8.0f); /* tokens 1..20 */
  ck_assert_int_eq(attn_kv_seq_fork(s, &f, &d), ATTN_OK);
  ck_assert_int_eq(attn_kv_seq_truncate(f, 3, &d), ATTN_OK);
  append_f32(f, 2, 9.0f, 10.0f);
  expect_f32(s, 1, 20, 0, 7.0f, 8.0f);
  expect_f32(f, 1, 2, 0, 7.0f, 8.0f);
  expect_f32(f, 3, 2, 0, 9.0f, 10.0f);
  attn_kv_seq_free(f);
  attn_kv_seq_free(s);
  ck_assert_uint_eq(stats(p).used_blocks, 0);
  attn_kv_pool_destroy(p);
}
END_TEST

static int all_zero(const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i]) return 0;
  return 1;
}

/* A block given back and taken by another sequence shows none of the old
 * data: appending one token leaves the rest of the block zero.  The chunk
 * stays mapped (a third sequence holds a block of it), so the block is
 * reused, not freshly mapped. */
START_TEST(kv_free_reuse_shows_no_old_data) {
  attn_kv_pool *p = pool_new(64 << 20);
  attn_kv_seq *keep = seq_new(p, 2, 8, ATTN_KV_FP32);
  attn_kv_seq *a = seq_new(p, 2, 8, ATTN_KV_FP32);
  append_f32(keep, 1, 1.0f, 1.0f);
  append_f32(a, 32, 3.0f, 4.0f);
  const void *old0 = attn_kv_seq_view(a).blocks[0];
  const void *old1 = attn_kv_seq_view(a).blocks[1];
  attn_kv_seq_free(a);
  ck_assert_uint_eq(stats(p).chunks, 1);
  attn_kv_seq *b = seq_new(p, 2, 8, ATTN_KV_FP32);
  append_f32(b, 1, 5.0f, 6.0f);
  attn_kv_view v = attn_kv_seq_view(b);
  ck_assert(v.blocks[0] == old0 || v.blocks[0] == old1); /* reused */
  size_t bb = attn_kv_block_bytes(attn_kv_seq_shape(b));
  const unsigned char *blk = v.blocks[0];
  /* zero but for the token written: per head, key slot 0 of every dim and
   * value row 0 */
  for (int h = 0; h < 2; h++) {
    const float *kp = (const float *)(blk + (size_t)h * bb / 2);
    for (int c = 0; c < 8; c++)
      for (int s = 1; s < BT; s++) ck_assert(kp[c * BT + s] == 0.0f);
    ck_assert(
        all_zero((const unsigned char *)(kp + BT * 8 + 8), (BT - 1) * 8 * 4));
  }
  expect_f32(b, 0, 1, 0, 5.0f, 6.0f);
  /* zeros appended after a truncation overwrite the old tokens' slots */
  append_f32(b, 9, 7.0f, 8.0f);
  attn_diag d;
  ck_assert_int_eq(attn_kv_seq_truncate(b, 2, &d), ATTN_OK);
  ck_assert_int_eq(attn_kv_seq_append(b, 3, NULL, NULL, &d), ATTN_OK);
  float z[2 * 3 * 16];
  ck_assert_int_eq(attn_kv_seq_read(b, 2, 3, z, z + 48, &d), ATTN_OK);
  ck_assert(all_zero((const unsigned char *)z, sizeof z));
  ck_assert_int_eq(attn_kv_seq_append(b, 1, z, NULL, &d), ATTN_EINVAL);
  attn_kv_seq_free(b);
  attn_kv_seq_free(keep);
  ck_assert_uint_eq(stats(p).chunks, 0);
  attn_kv_pool_destroy(p);
}
END_TEST

/* An append the pool cannot serve fails with ATTN_ETOOBIG, says how much
 * is in use, and appends nothing: the length, the tokens and the pool's
 * counts are as before, for new blocks and for the copy of a shared last
 * block. */
START_TEST(kv_exhaustion_changes_nothing) {
  attn_kv_shape sh = {2, 64, ATTN_KV_FP32};
  size_t bb = attn_kv_block_bytes(&sh); /* 16 KiB: whole pages */
  attn_kv_pool *p = pool_new(3 * bb);
  attn_kv_seq *s = seq_new(p, 2, 64, ATTN_KV_FP32), *f;
  attn_diag d;
  append_f32(s, 40, 1.0f, 2.0f); /* 3 blocks: the pool is full */
  attn_kv_pool_stats before = stats(p);
  ck_assert_uint_eq(before.mapped_bytes, 3 * bb);
  float *k = rows_f32(9, 2, 64, 3.0f);
  ck_assert_int_eq(attn_kv_seq_append(s, 9, k, k, &d), ATTN_ETOOBIG);
  ck_assert(strstr(d.msg, "full") && strstr(d.msg, "in use"));
  ck_assert_int_eq(attn_kv_seq_len(s), 40);
  ck_assert_int_eq(attn_kv_seq_append(s, 8, k, k, &d), ATTN_OK); /* fits */
  ck_assert_int_eq(attn_kv_seq_truncate(s, 44, &d), ATTN_OK);
  expect_f32(s, 0, 40, 0, 1.0f, 2.0f);
  /* the copy a shared last block needs cannot be had either */
  ck_assert_int_eq(attn_kv_seq_fork(s, &f, &d), ATTN_OK);
  ck_assert_int_eq(attn_kv_seq_append(f, 1, k, k, &d), ATTN_ETOOBIG);
  ck_assert_int_eq(attn_kv_seq_append(s, 1, k, k, &d), ATTN_ETOOBIG);
  ck_assert_int_eq(attn_kv_seq_len(f), 44);
  ck_assert_uint_eq(attn_kv_seq_block_refs(f, 43), 2);
  attn_kv_pool_stats after = stats(p);
  ck_assert_uint_eq(after.used_blocks, before.used_blocks);
  ck_assert_uint_eq(after.mapped_bytes, before.mapped_bytes);
  expect_f32(f, 0, 40, 0, 1.0f, 2.0f);
  /* once the other side lets go of the block, appending works again */
  attn_kv_seq_free(s);
  ck_assert_int_eq(attn_kv_seq_append(f, 1, k, k, &d), ATTN_OK);
  free(k);
  attn_kv_seq_free(f);
  attn_kv_pool_destroy(p);
}
END_TEST

/* Forks, truncations and frees in any order bring every count back to
 * zero and unmap every chunk. */
START_TEST(kv_refcounts_reach_zero) {
  attn_kv_pool *p = pool_new(256 << 20);
  size_t meta0 = stats(p).meta_bytes;
  attn_kv_seq *s[24] = {0};
  uint64_t rs = 99;
  attn_diag d;
  for (int step = 0; step < 2000; step++) {
    int i = (int)(xs64(&rs) % 24), j = (int)(xs64(&rs) % 24);
    switch (xs64(&rs) % 5) {
      case 0:
        if (!s[i]) s[i] = seq_new(p, 2, 16, ATTN_KV_BF16);
        ck_assert_int_eq(
            attn_kv_seq_append(s[i], (int64_t)(xs64(&rs) % 40), NULL, NULL, &d),
            ATTN_OK);
        break;
      case 1:
        if (s[i] && !s[j])
          ck_assert_int_eq(attn_kv_seq_fork(s[i], &s[j], &d), ATTN_OK);
        break;
      case 2:
        if (s[i])
          ck_assert_int_eq(
              attn_kv_seq_truncate(s[i], (int64_t)(xs64(&rs) % 50), &d),
              ATTN_OK);
        break;
      case 3:
        attn_kv_seq_free(s[i]);
        s[i] = NULL;
        break;
      default:
        if (s[i] && attn_kv_seq_len(s[i]) > 0)
          ck_assert_uint_ge(attn_kv_seq_block_refs(s[i], 0), 1);
    }
  }
  for (int i = 0; i < 24; i++) attn_kv_seq_free(s[i]);
  attn_kv_pool_stats st = stats(p);
  ck_assert_uint_eq(st.used_blocks, 0);
  ck_assert_uint_eq(st.used_bytes, 0);
  ck_assert_uint_eq(st.mapped_bytes, 0);
  ck_assert_uint_eq(st.chunks, 0);
  ck_assert_uint_eq(st.sequences, 0);
  ck_assert_uint_ge(st.meta_bytes, meta0); /* the class record stays */
  ck_assert_uint_le(st.meta_bytes, meta0 + 256);
  attn_kv_pool_destroy(p);
}
END_TEST

/* Threads on their own sequences of one pool, forking and freeing
 * concurrently: every sequence keeps its own tokens. */
typedef struct kv_worker {
  attn_kv_pool *p;
  int id;
} kv_worker;

static void *kv_worker_run(void *arg) {
  kv_worker *w = arg;
  attn_kv_seq *s = seq_new(w->p, 2, 8, ATTN_KV_FP32), *f;
  attn_diag d;
  for (int r = 0; r < 200; r++) {
    float tag = (float)(w->id * 1000 + r);
    append_f32(s, 1 + r % 19, tag, -tag);
    ck_assert_int_eq(attn_kv_seq_fork(s, &f, &d), ATTN_OK);
    append_f32(f, 3, tag + 0.5f, tag);
    expect_f32(s, attn_kv_seq_len(s) - (1 + r % 19), 1 + r % 19, 0, tag, -tag);
    attn_kv_seq_free(s);
    s = f;
    if (attn_kv_seq_len(s) > 300) attn_kv_seq_truncate(s, 7, &d);
  }
  attn_kv_seq_free(s);
  return NULL;
}

START_TEST(kv_threads) {
  attn_kv_pool *p = pool_new(256 << 20);
  pthread_t th[4];
  kv_worker w[4];
  for (int i = 0; i < 4; i++) {
    w[i] = (kv_worker){p, i};
    ck_assert_int_eq(pthread_create(&th[i], NULL, kv_worker_run, &w[i]), 0);
  }
  for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
  ck_assert_uint_eq(stats(p).used_blocks, 0);
  ck_assert_uint_eq(stats(p).mapped_bytes, 0);
  attn_kv_pool_destroy(p);
}
END_TEST

/* Bookkeeping (records, tables, mapped bytes past the raw keys and values)
 * for 1,000 sequences of 1,024 tokens at 8 kv heads x 128 dims: at most 2%
 * of the raw bytes.  Zeros are appended, which touches no page: the
 * mapping is as large as the cache would be, the memory is not used. */
START_TEST(kv_overhead_1000_sequences) {
  static const attn_kv_dtype dts[] = {ATTN_KV_FP32, ATTN_KV_BF16};
  for (int di = 0; di < 2; di++) {
    attn_kv_pool *p = pool_new((size_t)16 << 30);
    attn_kv_seq **s = calloc(1000, sizeof *s);
    attn_diag d;
    for (int i = 0; i < 1000; i++) {
      s[i] = seq_new(p, 8, 128, dts[di]);
      ck_assert_int_eq(attn_kv_seq_append(s[i], 1024, NULL, NULL, &d), ATTN_OK);
    }
    attn_kv_pool_stats st = stats(p);
    double raw =
        1000.0 * 1024 * 8 * 128 * 2 * (double)attn_kv_dtype_size(dts[di]);
    double over = ((double)st.meta_bytes + (double)st.mapped_bytes - raw) / raw;
    printf(
        "kv overhead, 1000 x 1024 tokens, 8 x 128, %s: raw %.0f MiB, "
        "mapped %.0f MiB, bookkeeping %.1f KiB: %.4f%%\n",
        attn_kv_dtype_name(dts[di]), raw / 1048576.0,
        (double)st.mapped_bytes / 1048576.0, (double)st.meta_bytes / 1024.0,
        100.0 * over);
    ck_assert_double_le(over, 0.02);
    ck_assert_double_ge((double)st.used_bytes, raw);
    for (int i = 0; i < 1000; i++) attn_kv_seq_free(s[i]);
    ck_assert_uint_eq(stats(p).mapped_bytes, 0);
    free(s);
    attn_kv_pool_destroy(p);
  }
}
END_TEST

Suite *kv_suite(void) {
  Suite *s = suite_create("kv");
  TCase *tc = tcase_create("kv");
  tcase_add_test(tc, kv_names);
  tcase_add_test(tc, kv_bad_shapes);
  tcase_add_test(tc, kv_append_read_layout);
  tcase_add_test(tc, kv_fork_copy_on_write);
  tcase_add_test(tc, kv_truncate_then_append);
  tcase_add_test(tc, kv_free_reuse_shows_no_old_data);
  tcase_add_test(tc, kv_exhaustion_changes_nothing);
  tcase_add_test(tc, kv_refcounts_reach_zero);
  tcase_add_test(tc, kv_threads);
  tcase_add_test(tc, kv_overhead_1000_sequences);
  suite_add_tcase(s, tc);
  return s;
}
