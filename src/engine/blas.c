/* blas.c - the one place the engine touches OpenBLAS's process-wide state.
 *
 * Debian 12's OpenBLAS 0.3.21 has a single global thread count and no
 * per-call setting; calls made from several threads at once share one
 * OpenBLAS thread pool.  The engine therefore owns parallelism itself (see
 * attn__parallel_for) and expects OpenBLAS at one thread.
 * OpenBLAS also chooses its kernels once, when it loads, from the CPU
 * model: attn_engine_blas_better_core() tells when that choice fell far
 * below the CPU (a model newer than the library). */
#include <cblas.h>
#include <strings.h>

#include "attn/engine.h"
#include "internal.h"

void attn_engine_set_blas_threads(int n) {
  openblas_set_num_threads(n < 1 ? 1 : n);
}

int attn_engine_blas_threads(void) {
  return openblas_get_num_threads();
}

const char *attn_engine_kernel_name(void) {
  return attn__kernel_name();
}

const char *attn_engine_blas_core(void) {
  const char *c = openblas_get_corename();
  return c ? c : "unknown";
}

const char *attn_engine_blas_better_core(void) {
  /* OpenBLAS 0.3.21's names of kernels with AVX2 and FMA or better */
  static const char *const good[] = {"Haswell", "Zen", "SkylakeX", "Cooperlake",
                                     "SapphireRapids"};
  const char *core = attn_engine_blas_core();
  for (size_t i = 0; i < sizeof good / sizeof *good; i++)
    if (strcasecmp(core, good[i]) == 0) return NULL;
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
      __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return "Haswell";
#endif
  return NULL;
}
