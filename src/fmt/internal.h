/* internal.h - internals shared by f32fmt.c, f32fmt_avx512.c and
 * f32fmt_avx2.c, and the test hook that picks the attn_f32_shortest_list
 * implementation.  Not a public header: only src/fmt/,
 * tests/test_f32fmt.c and bench/bench_f32fmt.c include it. */
#ifndef ATTN_FMT_INTERNAL_H
#define ATTN_FMT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* Range of the decimal exponent k the conversion needs for binary32 (see
 * f32fmt.c); attn__f32_g has one entry per k. */
#define ATTN__F32_K_MIN (-45)
#define ATTN__F32_K_MAX 31
#define ATTN__F32_NG (ATTN__F32_K_MAX - ATTN__F32_K_MIN + 1)

/* attn__f32_g[k - ATTN__F32_K_MIN], 0 <= k - ATTN__F32_K_MIN < ATTN__F32_NG:
 * 10^-k's 64-bit mantissa, rounded up (the table G of f32fmt.c). */
extern const uint64_t *const attn__f32_g;

/* The AVX-512 batch path exists on x86-64 with GCC-compatible compilers
 * (per-function target attributes); elsewhere only the portable loop. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(ATTN_F32FMT_PORTABLE)
#define ATTN__F32_HAVE_AVX512 1
/* attn_f32_shortest_list on AVX-512 F/BW/DQ/VL/CD/VBMI; the caller has
 * checked that the CPU has them.  Same contract and bytes as the portable
 * loop. */
size_t attn__f32_list_avx512(const float *v, size_t n, char *out);
/* attn_f32_shortest_rows on the same CPUs. */
size_t attn__f32_rows_avx512(const float *v, size_t rows, size_t cols,
                             size_t ld, char *out);
#else
#define ATTN__F32_HAVE_AVX512 0
#endif

/* The AVX2 batch path: same conditions. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(ATTN_F32FMT_PORTABLE)
#define ATTN__F32_HAVE_AVX2 1
/* attn_f32_shortest_list on AVX2 (with BMI1, BMI2, POPCNT); the caller has
 * checked that the CPU has them.  Same contract and bytes as the portable
 * loop. */
size_t attn__f32_list_avx2(const float *v, size_t n, char *out);
/* attn_f32_shortest_rows on the same CPUs. */
size_t attn__f32_rows_avx2(const float *v, size_t rows, size_t cols, size_t ld,
                           char *out);
#else
#define ATTN__F32_HAVE_AVX2 0
#endif

/* Test and benchmark hook: make attn_f32_shortest_list use the named
 * implementation, "avx512", "avx2" or "portable".  Returns 0 (and changes
 * nothing) when the name is unknown or the CPU lacks it.  Call it while no
 * other thread formats lists.  The default, set before main by a constructor,
 * is the fastest one the CPU supports. */
int attn__f32fmt_set_impl(const char *name);

/* Name of the implementation attn_f32_shortest_list uses now. */
const char *attn__f32fmt_impl_name(void);

#endif /* ATTN_FMT_INTERNAL_H */
