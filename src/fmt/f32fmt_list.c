/* f32fmt_list.c - lists and rows of floats (attn_f32_shortest_list,
 * attn_f32_shortest_rows): the portable loops over attn_f32_shortest, and
 * the choice among them and the AVX-512 and AVX2 printers.
 *
 * DESIGN
 * The conversion of one float is f32fmt.c's; the SIMD printers of
 * f32fmt_avx512.c and f32fmt_avx2.c fall back on it for the floats they
 * leave to it.  The choice of implementation lives here, apart from the
 * conversion, so that the calls go one way: this file calls the printers
 * and f32fmt.c, the printers call f32fmt.c, and f32fmt.c calls neither
 * (scripts/check-calls.py).  f32fmt.c's design comment describes the
 * lists, the rows and the order in which a constructor picks the first
 * printer the CPU can run.
 *
 * Threads: the implementation is chosen before main (or by a test, while
 * no list is being printed) and only read afterwards.
 */
#include <stddef.h>
#include <string.h>

#include "attn/f32fmt.h"
#include "internal.h"

/* ---- lists ------------------------------------------------------------- */

/* The reference: one attn_f32_shortest per element.  Each call may store
 * 16 bytes at p, which starts at most 17 * i bytes into out. */
static size_t list_portable(const float *v, size_t n, char *out) {
  char *p = out;
  for (size_t i = 0; i < n; i++) {
    if (i) *p++ = ',';
    p += attn_f32_shortest(v[i], p);
  }
  return (size_t)(p - out);
}

/* Rows as "[..],[..]" through list_portable: the reference of the rows. */
static size_t rows_portable(const float *v, size_t rows, size_t cols, size_t ld,
                            char *out) {
  char *p = out;
  for (size_t r = 0; r < rows; r++) {
    if (r) *p++ = ',';
    *p++ = '[';
    p += list_portable(v + r * ld, cols, p);
    *p++ = ']';
  }
  return (size_t)(p - out);
}

typedef struct list_impl {
  const char *name;
  size_t (*fn)(const float *v, size_t n, char *out);
  size_t (*rows)(const float *v, size_t rows, size_t cols, size_t ld,
                 char *out);
} list_impl;

static const list_impl list_impls[] = {
#if ATTN__F32_HAVE_AVX512
    {"avx512", attn__f32_list_avx512, attn__f32_rows_avx512},
#endif
#if ATTN__F32_HAVE_AVX2
    {"avx2", attn__f32_list_avx2, attn__f32_rows_avx2},
#endif
    {"portable", list_portable, rows_portable},
};
#define N_LIST_IMPLS (sizeof list_impls / sizeof list_impls[0])

/* Written before main (constructor) and by the test hook only. */
static const list_impl *list_active = &list_impls[N_LIST_IMPLS - 1];

static int list_supported(const list_impl *m) {
#if ATTN__F32_HAVE_AVX512
  if (strcmp(m->name, "avx512") == 0) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512cd") &&
           __builtin_cpu_supports("avx512vbmi");
  }
#endif
#if ATTN__F32_HAVE_AVX2
  if (strcmp(m->name, "avx2") == 0) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi") &&
           __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("popcnt");
  }
#endif
  return strcmp(m->name, "portable") == 0;
}

#if ATTN__F32_HAVE_AVX512 || ATTN__F32_HAVE_AVX2
__attribute__((constructor)) static void list_pick(void) {
  for (size_t i = 0; i < N_LIST_IMPLS; i++)
    if (list_supported(&list_impls[i])) {
      list_active = &list_impls[i];
      return;
    }
}
#endif

int attn__f32fmt_set_impl(const char *name) {
  for (size_t i = 0; i < N_LIST_IMPLS; i++)
    if (strcmp(list_impls[i].name, name) == 0 &&
        list_supported(&list_impls[i])) {
      list_active = &list_impls[i];
      return 1;
    }
  return 0;
}

const char *attn__f32fmt_impl_name(void) {
  return list_active->name;
}

size_t attn_f32_shortest_list(const float *v, size_t n, char *out) {
  return list_active->fn(v, n, out);
}

size_t attn_f32_shortest_rows(const float *v, size_t rows, size_t cols,
                              size_t ld, char *out) {
  return list_active->rows(v, rows, cols, ld, out);
}
