/* vexp.h - the vector exp of the engine's kernels, inline: softmax.c's
 * row passes and kv_attend.c's decode kernels use the same polynomial as
 * attn__expf (softmax.c's scalar expf_poly), so every kernel set rounds
 * exp alike.  Cody-Waite reduction to r in [-ln2/2, ln2/2] and a degree-6
 * polynomial; relative error < 3e-7; inputs below EXP_LO (-inf too) give
 * exactly 0, NaN stays NaN. */
#ifndef ATTN_ENGINE_VEXP_H
#define ATTN_ENGINE_VEXP_H

#define EXP_LO (-87.33654f) /* below this, exp underflows float: return 0 */

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* 16 lanes of expf_poly: the same reduction and polynomial, 2^n by scalef. */
__attribute__((target("avx512f"))) static inline __m512 attn__exp16(__m512 x) {
  const __m512 lo = _mm512_set1_ps(EXP_LO);
  __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  __m512 xc = _mm512_max_ps(lo, x); /* NaN stays NaN (max takes its 2nd) */
  __m512 n = _mm512_roundscale_ps(
      _mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), xc);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860682030941723e-6f), r);
  __m512 p = _mm512_set1_ps(1.3888889e-3f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3333333e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1666667e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666667e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_maskz_mov_ps((__mmask16)~under, _mm512_scalef_ps(p, n));
}

__attribute__((target("avx2,fma"))) static inline __m256 attn__exp8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(EXP_LO);
  __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  __m256 xc = _mm256_max_ps(lo, x); /* NaN stays NaN (max takes its 2nd) */
  __m256 n =
      _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), xc);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.42860682030941723e-6f), r);
  __m256 p = _mm256_set1_ps(1.3888889e-3f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3333333e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1666667e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666667e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  __m256i bits = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  __m256 e = _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
  return _mm256_andnot_ps(under, e);
}

#endif

#endif /* ATTN_ENGINE_VEXP_H */
