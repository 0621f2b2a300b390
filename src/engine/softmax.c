/* softmax.c - the element-wise passes of attention: mask + row max, exp +
 * sum, scaling.
 *
 * DESIGN
 * These loops dominate the non-sgemm time (one exp per score: 33 M per call
 * at n=2048, h=8).  The two hot ones, row max and exp + sum, have explicit
 * AVX-512 and AVX2+FMA versions beside the portable C that is their
 * reference; one is picked at start-up from what the CPU supports
 * (attn__set_kernel can force another, for tests).  The other loops are
 * plain, branch-free C that GCC vectorises, compiled once per instruction
 * set with target_clones.  exp is a Cody-Waite range reduction to r in
 * [-ln2/2, ln2/2] and a degree-6 polynomial; relative error < 3e-7, inputs
 * below -87.33 (including -inf from masks) give exactly 0.  Sums (the
 * softmax denominator) are accumulated in double, as in the reference; the
 * AVX-512 kernel first adds 8 vectors per lane in float (relative error
 * <= 8 * 2^-24 before the double sum).
 * Stateless but for the kernel choice, which is written once before any
 * engine call (a constructor) or by tests; thread-safe otherwise.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ATTN_X86 1
#endif

#include "internal.h"
#include "vexp.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(ATTN_NO_CLONES)
#define ATTN_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define ATTN_CLONES
#endif

#define LANES 16 /* one AVX-512 register of floats */

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
  /* n is NaN when x is (inf - inf: scores that overflowed float32); the
   * result is NaN then, and (int32_t)NaN would be undefined. */
  int32_t bits = ((n == n ? (int32_t)n : 0) + 127) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  return x < EXP_LO ? 0.0f : p * scale;
}

float attn__expf(float x) {
  return expf_poly(x);
}

static float max_scalar(const float *s, int64_t n) {
  float m = -INFINITY;
  for (int64_t j = 0; j < n; j++) m = s[j] > m ? s[j] : m;
  return m;
}

static double exp_sum_scalar(float *s, int64_t n, float m) {
  /* LANES double partial sums, so the order matches the SIMD kernels' */
  double lane[LANES], sum = 0.0;
  int64_t j = 0;
  for (int64_t i = 0; i < n; i++) s[i] = expf_poly(s[i] - m);
  for (int k = 0; k < LANES; k++) lane[k] = 0.0;
  for (; j + LANES <= n; j += LANES)
    for (int k = 0; k < LANES; k++) lane[k] += (double)s[j + k];
  for (; j < n; j++) sum += (double)s[j];
  for (int k = 0; k < LANES; k++) sum += lane[k];
  return sum;
}

/* tanh as Eigen's float rational approximation: x in [-7.905, 7.905]
 * (tanh is 1 - 2.7e-7 there), x p(x^2) / q(x^2); absolute error below
 * 3.5e-7 over the reals (checked against double tanh in the unit tests).
 * NaN stays NaN, +-inf gives +-1. */
#define TANH_CLAMP 7.90531110763549805f
#define TANH_P13 (-2.76076847742355e-16f)
#define TANH_P11 2.00018790482477e-13f
#define TANH_P9 (-8.60467152213735e-11f)
#define TANH_P7 5.12229709037114e-08f
#define TANH_P5 1.48572235717979e-05f
#define TANH_P3 6.37261928875436e-04f
#define TANH_P1 4.89352455891786e-03f
#define TANH_Q6 1.19825839466702e-06f
#define TANH_Q4 1.18534705686654e-04f
#define TANH_Q2 2.26843463243900e-03f
#define TANH_Q0 4.89352518554385e-03f

static inline float tanh_rational(float x) {
  float xc = x > TANH_CLAMP ? TANH_CLAMP : x < -TANH_CLAMP ? -TANH_CLAMP : x;
  float x2 = xc * xc;
  float p = TANH_P13;
  p = p * x2 + TANH_P11;
  p = p * x2 + TANH_P9;
  p = p * x2 + TANH_P7;
  p = p * x2 + TANH_P5;
  p = p * x2 + TANH_P3;
  p = p * x2 + TANH_P1;
  float q = TANH_Q6;
  q = q * x2 + TANH_Q4;
  q = q * x2 + TANH_Q2;
  q = q * x2 + TANH_Q0;
  return xc * p / q;
}

float attn__tanhf(float x) {
  return tanh_rational(x);
}

static void softcap_scalar(float *s, int64_t n, float cap) {
  float inv = 1.0f / cap;
  for (int64_t j = 0; j < n; j++) s[j] = cap * tanh_rational(s[j] * inv);
}

#ifdef ATTN_X86
__attribute__((target("avx512f"))) static float max_avx512(const float *s,
                                                           int64_t n) {
  __m512 m0 = _mm512_set1_ps(-INFINITY), m1 = m0;
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) {
    m0 = _mm512_max_ps(m0, _mm512_loadu_ps(s + j));
    m1 = _mm512_max_ps(m1, _mm512_loadu_ps(s + j + 16));
  }
  for (; j + 16 <= n; j += 16) m0 = _mm512_max_ps(m0, _mm512_loadu_ps(s + j));
  if (j < n) {
    __mmask16 k = (__mmask16)((1u << (n - j)) - 1);
    m1 = _mm512_max_ps(m1, _mm512_mask_loadu_ps(m1, k, s + j));
  }
  return _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
}

__attribute__((target("avx512f"))) static double exp_sum_avx512(float *s,
                                                                int64_t n,
                                                                float m) {
  const __m512 vm = _mm512_set1_ps(m);
  __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
  int64_t j = 0;
  /* Each lane adds up to 8 exps (each <= 1) in float, then the 16 lane
   * sums go into the double accumulators: the widening is ~a third of the
   * loop's work when done per vector, and 8 float additions of values in
   * [0, 1] lose at most 8 * 2^-24 of the sum. */
  while (j + 16 <= n) {
    __m512 f = _mm512_setzero_ps();
    for (int k = 0; k < 8 && j + 16 <= n; k++, j += 16) {
      __m512 e = attn__exp16(_mm512_sub_ps(_mm512_loadu_ps(s + j), vm));
      _mm512_storeu_ps(s + j, e);
      f = _mm512_add_ps(f, e);
    }
    a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm512_castps512_ps256(f)));
    a1 =
        _mm512_add_pd(a1, _mm512_cvtps_pd(_mm256_castpd_ps(
                              _mm512_extractf64x4_pd(_mm512_castps_pd(f), 1))));
  }
  double sum = 0.0;
  if (j < n) {
    __mmask16 k = (__mmask16)((1u << (n - j)) - 1);
    __m512 e = attn__exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + j), vm));
    _mm512_mask_storeu_ps(s + j, k, e);
    for (int64_t i = j; i < n; i++) sum += (double)s[i];
  }
  return sum + _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
}

/* 16 lanes of tanh_rational times cap; max(lo, x) and min(hi, x) keep a
 * NaN x (they return their second operand when either is NaN). */
__attribute__((target("avx512f"))) static void softcap_avx512(float *s,
                                                              int64_t n,
                                                              float cap) {
  const __m512 hi = _mm512_set1_ps(TANH_CLAMP),
               lo = _mm512_set1_ps(-TANH_CLAMP);
  const __m512 inv = _mm512_set1_ps(1.0f / cap), vc = _mm512_set1_ps(cap);
  for (int64_t j = 0; j < n; j += 16) {
    __mmask16 k =
        n - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - j)) - 1);
    __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, s + j), inv);
    x = _mm512_min_ps(hi, _mm512_max_ps(lo, x));
    __m512 x2 = _mm512_mul_ps(x, x);
    __m512 p =
        _mm512_fmadd_ps(_mm512_set1_ps(TANH_P13), x2, _mm512_set1_ps(TANH_P11));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(TANH_P9));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(TANH_P7));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(TANH_P5));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(TANH_P3));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(TANH_P1));
    __m512 q =
        _mm512_fmadd_ps(_mm512_set1_ps(TANH_Q6), x2, _mm512_set1_ps(TANH_Q4));
    q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(TANH_Q2));
    q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(TANH_Q0));
    __m512 t = _mm512_div_ps(_mm512_mul_ps(x, p), q);
    _mm512_mask_storeu_ps(s + j, k, _mm512_mul_ps(vc, t));
  }
}

__attribute__((target("avx2,fma"))) static float max_avx2(const float *s,
                                                          int64_t n) {
  __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0;
  int64_t j = 0;
  float m = -INFINITY, t[8];
  for (; j + 16 <= n; j += 16) {
    m0 = _mm256_max_ps(m0, _mm256_loadu_ps(s + j));
    m1 = _mm256_max_ps(m1, _mm256_loadu_ps(s + j + 8));
  }
  _mm256_storeu_ps(t, _mm256_max_ps(m0, m1));
  for (int k = 0; k < 8; k++) m = t[k] > m ? t[k] : m;
  for (; j < n; j++) m = s[j] > m ? s[j] : m;
  return m;
}

__attribute__((target("avx2,fma"))) static double exp_sum_avx2(float *s,
                                                               int64_t n,
                                                               float m) {
  const __m256 vm = _mm256_set1_ps(m);
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
  int64_t j = 0;
  double sum = 0.0, t[4];
  for (; j + 8 <= n; j += 8) {
    __m256 e = attn__exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm));
    _mm256_storeu_ps(s + j, e);
    a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  for (; j < n; j++) {
    s[j] = expf_poly(s[j] - m);
    sum += (double)s[j];
  }
  _mm256_storeu_pd(t, _mm256_add_pd(a0, a1));
  return sum + ((t[0] + t[1]) + (t[2] + t[3]));
}
__attribute__((target("avx2,fma"))) static void softcap_avx2(float *s,
                                                             int64_t n,
                                                             float cap) {
  const __m256 hi = _mm256_set1_ps(TANH_CLAMP),
               lo = _mm256_set1_ps(-TANH_CLAMP);
  const __m256 inv = _mm256_set1_ps(1.0f / cap), vc = _mm256_set1_ps(cap);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 x = _mm256_mul_ps(_mm256_loadu_ps(s + j), inv);
    x = _mm256_min_ps(hi, _mm256_max_ps(lo, x));
    __m256 x2 = _mm256_mul_ps(x, x);
    __m256 p =
        _mm256_fmadd_ps(_mm256_set1_ps(TANH_P13), x2, _mm256_set1_ps(TANH_P11));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(TANH_P9));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(TANH_P7));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(TANH_P5));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(TANH_P3));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(TANH_P1));
    __m256 q =
        _mm256_fmadd_ps(_mm256_set1_ps(TANH_Q6), x2, _mm256_set1_ps(TANH_Q4));
    q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(TANH_Q2));
    q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(TANH_Q0));
    __m256 t = _mm256_div_ps(_mm256_mul_ps(x, p), q);
    _mm256_storeu_ps(s + j, _mm256_mul_ps(vc, t));
  }
  softcap_scalar(s + j, n - j, cap);
}
#endif /* ATTN_X86 */

typedef struct kernel {
  const char *name;
  float (*max)(const float *, int64_t);
  double (*exp_sum)(float *, int64_t, float);
  void (*softcap)(float *, int64_t, float);
} kernel;

static const kernel kernels[] = {
#ifdef ATTN_X86
    {"avx512", max_avx512, exp_sum_avx512, softcap_avx512},
    {"avx2", max_avx2, exp_sum_avx2, softcap_avx2},
#endif
    {"scalar", max_scalar, exp_sum_scalar, softcap_scalar},
};
#define NKERNELS (sizeof kernels / sizeof kernels[0])

static const kernel *active = &kernels[NKERNELS - 1];

static int supported(const kernel *k) {
#ifdef ATTN_X86
  __builtin_cpu_init();
  if (strcmp(k->name, "avx512") == 0) return __builtin_cpu_supports("avx512f");
  if (strcmp(k->name, "avx2") == 0)
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
  return strcmp(k->name, "scalar") == 0;
}

__attribute__((constructor)) static void pick_kernel(void) {
  for (size_t i = 0; i < NKERNELS; i++)
    if (supported(&kernels[i])) {
      active = &kernels[i];
      return;
    }
}

int attn__set_kernel(const char *name) {
  for (size_t i = 0; i < NKERNELS; i++)
    if (strcmp(kernels[i].name, name) == 0 && supported(&kernels[i])) {
      active = &kernels[i];
      return 1;
    }
  return 0;
}

const char *attn__kernel_name(void) {
  return active->name;
}

ATTN_CLONES
static void apply_masks(float *s, int64_t n, const float *add,
                        const uint8_t *blk_a, const uint8_t *blk_b) {
  if (add)
    for (int64_t j = 0; j < n; j++) s[j] += add[j];
  if (blk_a)
    for (int64_t j = 0; j < n; j++) s[j] = blk_a[j] ? -INFINITY : s[j];
  if (blk_b)
    for (int64_t j = 0; j < n; j++) s[j] = blk_b[j] ? -INFINITY : s[j];
}

float attn__row_mask_max(float *s, int64_t n, const float *add,
                         const uint8_t *blk_a, const uint8_t *blk_b) {
  if (add || blk_a || blk_b) apply_masks(s, n, add, blk_a, blk_b);
  return active->max(s, n);
}

double attn__row_exp_sum(float *s, int64_t n, float m) {
  return active->exp_sum(s, n, m);
}

ATTN_CLONES
void attn__row_scale(float *s, int64_t n, float f) {
  for (int64_t j = 0; j < n; j++) s[j] *= f;
}

ATTN_CLONES
void attn__row_scale_to(float *dst, const float *src, int64_t n, float f) {
  for (int64_t j = 0; j < n; j++) dst[j] = src[j] * f;
}

ATTN_CLONES
void attn__row_axpy(float *dst, const float *src, int64_t n, float f) {
  for (int64_t j = 0; j < n; j++) dst[j] += f * src[j];
}

void attn__row_softcap(float *s, int64_t n, float cap) {
  active->softcap(s, n, cap);
}

/* d0 + j is a key minus a query position, within +-INT_MAX (Lq, Lk <=
 * INT_MAX): int32 so that the conversion vectorises on AVX2 too. */
ATTN_CLONES
void attn__row_alibi(float *s, int64_t n, float slope, int64_t d0) {
  int32_t d = (int32_t)d0, m = (int32_t)n;
  for (int32_t j = 0; j < m; j++) s[j] -= slope * fabsf((float)(d + j));
}

ATTN_CLONES
void attn__rope(float *x, const float *cs, const float *sn, int64_t half,
                int interleaved) {
  if (interleaved) {
    for (int64_t t = 0; t < half; t++) {
      float a = x[2 * t], b = x[2 * t + 1];
      x[2 * t] = a * cs[t] - b * sn[t];
      x[2 * t + 1] = b * cs[t] + a * sn[t];
    }
  } else {
    float *y = x + half;
    for (int64_t t = 0; t < half; t++) {
      float a = x[t], b = y[t];
      x[t] = a * cs[t] - b * sn[t];
      y[t] = b * cs[t] + a * sn[t];
    }
  }
}
