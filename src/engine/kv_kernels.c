/* kv_kernels.c - the kernels of attn_kv_attend: one chunk of query rows of
 * one (sequence, kv head) against the sequence's blocks (attn__kv_job,
 * internal.h).  Portable C only so far (the vector kernels come next).
 *
 * DESIGN
 * Decode is bound by memory: every cached key and value is read once per
 * step and used for two multiply-adds per query head of its group.  So
 * the kernels walk the blocks in order, and for each block take the rows
 * 4 at a time (a tile): one load of a key or value row feeds the tile's 4
 * rows (a GQA group of 4 is one tile: each key and value is read once),
 * and the block, 2 x 16 x D values of this head, stays in L1 for the
 * tile's passes.  Per block and tile:
 *  - scores: keys are stored [D][16] (kv.h), so a vector load is one dim
 *    of the block's 16 keys; with the query value broadcast, a
 *    multiply-add per dim and row accumulates the 16 scores of a row in
 *    one register (two, even and odd dims, to hide the latency);
 *  - the online softmax per row: scale, softcap and ALiBi (softmax.c's
 *    row passes), the lanes the row cannot see set to -inf, the block's
 *    max, alpha = exp(m_old - m_new) when the max grows, p = exp(s - m),
 *    the 16 lane sums l = l alpha + p;
 *  - values: stored [16][D]; for each 32 (AVX-512) or 16 (AVX2) columns,
 *    sum_j p_j v_j over the block's tokens the tile sees, in registers,
 *    then o = o alpha + that sum (one rounding per block, not per token).
 * bf16 and fp16 values are widened exactly on load (a shift; vcvtph2ps),
 * so the arithmetic is fp32 for every dtype.  A row's operations and
 * their order depend only on the block, the rows' ranges and the kernel
 * set, never on other units, so results repeat bit for bit.  The portable
 * kernel is the straightforward one: per row, per key, per dim.
 * Stateless but for the kernel choice (a constructor, or tests).
 */
#include <math.h>
#include <string.h>

#include "internal.h"

#define BT ATTN_KV_BLOCK_TOKENS
#define TILE 4 /* rows per tile */

/* The lanes of the block starting at key kb that row r sees. */
static unsigned lane_mask(const attn__kv_job *j, int64_t r, int64_t kb) {
  int64_t a = j->lo[r] - kb, b = j->hi[r] - kb;
  if (a < 0) a = 0;
  if (b > BT - 1) b = BT - 1;
  if (a > b) return 0;
  return ((2u << b) - 1u) & ~((1u << a) - 1u);
}

/* Softcap and ALiBi on the 16 scores of row r in s (already scaled). */
static void score_variants(const attn__kv_job *j, int64_t r, int64_t kb,
                           float *s) {
  if (j->softcap > 0.0f) attn__row_softcap(s, BT, j->softcap);
  if (j->slope) attn__row_alibi(s, BT, j->slope[r], kb - j->pos[r]);
}

static size_t esize(attn_kv_dtype dt) {
  return attn_kv_dtype_size(dt);
}

/* ---- portable ------------------------------------------------------------ */

/* Row r against the block at kp (keys) / vp (values), lanes in mask. */
static void row_scalar(const attn__kv_job *j, int64_t r, int64_t kb,
                       const void *kp, const void *vp, unsigned mask) {
  int64_t D = j->D;
  const float *q = j->q + r * D;
  float s[BT], mx = -INFINITY;
  for (int k = 0; k < BT; k++) {
    float acc = 0.0f;
    for (int64_t c = 0; c < D; c++)
      acc += q[c] * attn__kv_elem(kp, j->dtype, (size_t)(c * BT + k));
    s[k] = acc * j->scale;
  }
  score_variants(j, r, kb, s);
  for (int k = 0; k < BT; k++) {
    if (!(mask >> k & 1u)) s[k] = -INFINITY;
    mx = s[k] > mx ? s[k] : mx;
  }
  float mo = j->m[r], mn = mx > mo ? mx : mo;
  float alpha = mn > mo ? attn__expf(mo - mn) : 1.0f;
  for (int k = 0; k < BT; k++) {
    s[k] = attn__expf(s[k] - mn);
    j->l[r * BT + k] = j->l[r * BT + k] * alpha + s[k];
  }
  for (int64_t c = 0; c < D; c++) {
    float acc = 0.0f;
    for (int k = 0; k < BT; k++)
      if (mask >> k & 1u)
        acc += s[k] * attn__kv_elem(vp, j->dtype, (size_t)(k * D + c));
    j->o[r * D + c] = j->o[r * D + c] * alpha + acc;
  }
  j->m[r] = mn;
}

static void run_scalar(const attn__kv_job *j) {
  size_t e = esize(j->dtype);
  for (int64_t blk = j->blk0; blk < j->blk1; blk++) {
    const unsigned char *kp =
        (const unsigned char *)j->blocks[blk] + j->head_off;
    const unsigned char *vp = kp + (size_t)(BT * j->D) * e;
    for (int64_t r = 0; r < j->rows; r++) {
      unsigned mask = lane_mask(j, r, blk * BT);
      if (mask) row_scalar(j, r, blk * BT, kp, vp, mask);
    }
  }
}

/* ---- the choice ---------------------------------------------------------- */

typedef struct kv_kernel {
  const char *name;
  void (*run)(const attn__kv_job *);
} kv_kernel;

static const kv_kernel kernels[] = {
    {"scalar", run_scalar},
};
#define NKERNELS (sizeof kernels / sizeof kernels[0])

static const kv_kernel *active = &kernels[NKERNELS - 1];

static int supported(const kv_kernel *k) {
  return strcmp(k->name, "scalar") == 0;
}

__attribute__((constructor)) static void pick_kv_kernel(void) {
  for (size_t i = 0; i < NKERNELS; i++)
    if (supported(&kernels[i])) {
      active = &kernels[i];
      return;
    }
}

int attn__kv_set_kernel(const char *name) {
  for (size_t i = 0; i < NKERNELS; i++)
    if (strcmp(kernels[i].name, name) == 0 && supported(&kernels[i])) {
      active = &kernels[i];
      return 1;
    }
  return 0;
}

const char *attn__kv_kernel_name(void) {
  return active->name;
}

void attn__kv_run(const attn__kv_job *j) {
  active->run(j);
}
