/* blas.c - the one place the engine touches OpenBLAS's process-wide state.
 *
 * Debian 12's OpenBLAS 0.3.21 has a single global thread count and no
 * per-call setting; calls made from several threads at once share one
 * OpenBLAS thread pool.  The engine therefore owns parallelism itself (see
 * attn__parallel_for) and expects OpenBLAS at one thread. */
#include <cblas.h>

#include "attn/engine.h"
#include "internal.h"

void attn_engine_set_blas_threads(int n) {
  openblas_set_num_threads(n < 1 ? 1 : n);
}

int attn_engine_blas_threads(void) { return openblas_get_num_threads(); }

const char *attn_engine_kernel_name(void) { return attn__kernel_name(); }
