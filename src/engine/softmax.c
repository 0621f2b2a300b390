/* softmax.c - the element-wise passes of attention: mask + row max, exp +
 * sum, scaling.
 *
 * DESIGN
 * These loops dominate the non-sgemm time (one exp per score: 33 M per call
 * at n=2048, h=8), so they are written as plain, branch-free C that GCC
 * vectorises, and compiled once per instruction set with target_clones; the
 * dynamic loader picks the widest clone the CPU supports (x86-64-v4 = AVX-512,
 * v3 = AVX2+FMA, else the baseline).  The baseline clone is the scalar
 * reference of the same arithmetic.  exp is a Cody-Waite range reduction
 * to r in [-ln2/2, ln2/2] and a degree-6 polynomial; relative error < 2e-7,
 * inputs below -87.33 (including -inf from masks) give exactly 0.
 * Sums are accumulated in double (the softmax denominator), as in the
 * reference.  Stateless and thread-safe.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(ATTN_NO_CLONES)
#define ATTN_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define ATTN_CLONES
#endif

#define LANES 16 /* one AVX-512 register of floats */
#define EXP_LO (-87.33654f) /* below this, exp underflows float: return 0 */

static inline float expf_poly(float x) {
  const float log2e = 1.44269504088896341f;
  const float ln2_hi = 0.693145751953125f, ln2_lo = 1.42860682030941723e-6f;
  const float magic = 12582912.0f; /* 1.5 * 2^23: round to nearest integer */
  float xc = x < EXP_LO ? EXP_LO : x;
  float n = (xc * log2e + magic) - magic;
  float r = (xc - n * ln2_hi) - n * ln2_lo;
  float p = 1.3888889e-3f;
  p = p * r + 8.3333333e-3f;
  p = p * r + 4.1666667e-2f;
  p = p * r + 1.6666667e-1f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int32_t bits = ((int32_t)n + 127) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  return x < EXP_LO ? 0.0f : p * scale;
}

float attn__expf(float x) { return expf_poly(x); }

ATTN_CLONES
float attn__row_mask_max(float *s, int64_t n, const float *add,
                         const uint8_t *blk_a, const uint8_t *blk_b) {
  float m = -INFINITY;
  if (add)
    for (int64_t j = 0; j < n; j++) s[j] += add[j];
  if (blk_a)
    for (int64_t j = 0; j < n; j++) s[j] = blk_a[j] ? -INFINITY : s[j];
  if (blk_b)
    for (int64_t j = 0; j < n; j++) s[j] = blk_b[j] ? -INFINITY : s[j];
  /* Lane-wise maxima so the loop vectorises without reassociation. */
  float lane[LANES];
  int64_t j = 0;
  for (int k = 0; k < LANES; k++) lane[k] = -INFINITY;
  for (; j + LANES <= n; j += LANES)
    for (int k = 0; k < LANES; k++)
      lane[k] = s[j + k] > lane[k] ? s[j + k] : lane[k];
  for (; j < n; j++) m = s[j] > m ? s[j] : m;
  for (int k = 0; k < LANES; k++) m = lane[k] > m ? lane[k] : m;
  return m;
}

ATTN_CLONES
double attn__row_exp_sum(float *s, int64_t n, float m) {
  /* LANES double partial sums: vectorises, and keeps the denominator as
   * exact as the reference's.  The summation order is fixed by n alone. */
  for (int64_t j = 0; j < n; j++) s[j] = expf_poly(s[j] - m);
  double lane[LANES], sum = 0.0;
  int64_t j = 0;
  for (int k = 0; k < LANES; k++) lane[k] = 0.0;
  for (; j + LANES <= n; j += LANES)
    for (int k = 0; k < LANES; k++) lane[k] += (double)s[j + k];
  for (; j < n; j++) sum += (double)s[j];
  for (int k = 0; k < LANES; k++) sum += lane[k];
  return sum;
}

ATTN_CLONES
void attn__row_scale(float *s, int64_t n, float f) {
  for (int64_t j = 0; j < n; j++) s[j] *= f;
}

ATTN_CLONES
void attn__row_axpy(float *dst, const float *src, int64_t n, float f) {
  for (int64_t j = 0; j < n; j++) dst[j] += f * src[j];
}

const char *attn__kernel_name(void) {
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(ATTN_NO_CLONES)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("x86-64-v4")) return "x86-64-v4 (avx512)";
  if (__builtin_cpu_supports("x86-64-v3")) return "x86-64-v3 (avx2+fma)";
#endif
  return "scalar";
}
