/* tensor.h - a named, typed, contiguous n-d array as codecs and models see it.
 *
 * Codecs decode request bodies into attn_tensor values; models turn them into
 * engine views.  data is either owned (owns = 1, freed by attn_tensor_free)
 * or borrowed from a request buffer that outlives the tensor.  A BYTES
 * tensor (byte strings) is the exception to "contiguous": its data is one
 * owned block read through attn_tensor_bytes_at (below).
 */
#ifndef ATTN_TENSOR_H
#define ATTN_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attn/limits.h" /* ATTN_MAX_RANK */
#include "attn/status.h"

/* KServe v2 datatype names are the second column, the size of an element
 * in bytes the third (0 for BYTES, whose elements have any length). */
#define ATTN_DTYPE_MAP(X) \
  X(FP32, "FP32", 4)      \
  X(FP64, "FP64", 8)      \
  X(FP16, "FP16", 2)      \
  X(BF16, "BF16", 2)      \
  X(BOOL, "BOOL", 1)      \
  X(INT32, "INT32", 4)    \
  X(INT64, "INT64", 8)    \
  X(BYTES, "BYTES", 0)

typedef enum {
  ATTN_DT_INVALID = 0,
#define ATTN__DT_ENUM(name, text, size) ATTN_DT_##name,
  ATTN_DTYPE_MAP(ATTN__DT_ENUM)
#undef ATTN__DT_ENUM
} attn_dtype;

typedef struct attn_tensor {
  attn_dtype dtype;
  int rank;
  int64_t shape[ATTN_MAX_RANK];
  void *data; /* row-major, contiguous, little-endian */
  bool owns;  /* attn_tensor_free releases data */
} attn_tensor;

/* "FP32" etc.; NULL for ATTN_DT_INVALID. */
const char *attn_dtype_name(attn_dtype t);
/* Parse a KServe datatype name; ATTN_DT_INVALID when unknown. */
attn_dtype attn_dtype_parse(const char *s);
/* Bytes per element; 0 for ATTN_DT_INVALID and ATTN_DT_BYTES. */
size_t attn_dtype_size(attn_dtype t);

/* Element count with overflow check.  Returns false on overflow or a negative
 * dimension; *n is then unchanged. */
bool attn_shape_numel(int rank, const int64_t *shape, size_t *n);

/* shape as "[2,4]" into buf (cap >= 1 bytes, always NUL-terminated,
 * truncated when short); returns buf.  No printf: codecs call it on every
 * request. */
const char *attn_shape_format(char *buf, size_t cap, int rank,
                              const int64_t *shape);

/* Overflow-checked arithmetic on sizes: return false on overflow. */
static inline bool attn_size_mul(size_t a, size_t b, size_t *r) {
  return !__builtin_mul_overflow(a, b, r);
}
static inline bool attn_size_add(size_t a, size_t b, size_t *r) {
  return !__builtin_add_overflow(a, b, r);
}

/* Release owned data and zero the struct; NULL is allowed. */
void attn_tensor_free(attn_tensor *t);

/* Convert any numeric tensor to a new owned FP32 tensor (FP64, FP16, BF16,
 * INT32, INT64 and BOOL are converted; FP32 is copied).  On failure *out is
 * zeroed and nothing is allocated.  Returns ATTN_ENOMEM or ATTN_EINVAL (also
 * for BYTES). */
attn_status attn_tensor_to_f32(const attn_tensor *in, attn_tensor *out);

/* ---- BYTES: a tensor of byte strings ------------------------------------
 * KServe's BYTES datatype: every element a string of bytes of any length
 * and content (NULs included).  Such a tensor's data is one owned block
 * (owns true, freed by attn_tensor_free like any other) holding a table of
 * offsets and then the elements' bytes, each followed by a NUL that is not
 * part of it (so an element without NULs is also a C string).  Its layout is
 * tensor.c's: read element i with attn_tensor_bytes_at in O(1); build one
 * with attn_tensor_bytes_alloc, then attn_tensor_bytes_put for elements 0,
 * 1, ... in order. */

/* *t (need not be initialised) becomes a BYTES tensor of the given shape,
 * with room for elements of `chars` bytes in all, none written yet.  On
 * failure *t is zeroed.  Errors: ATTN_EINVAL (bad rank, negative dimension),
 * ATTN_ETOOBIG (sizes overflow), ATTN_ENOMEM. */
attn_status attn_tensor_bytes_alloc(attn_tensor *t, int rank,
                                    const int64_t *shape, size_t chars);

/* Element i of a tensor from attn_tensor_bytes_alloc becomes s[0, n) (s may
 * be NULL when n is 0).  i must be the next element not yet written, and n
 * must fit the room left: else ATTN_EINVAL and nothing changes. */
attn_status attn_tensor_bytes_put(attn_tensor *t, int64_t i, const void *s,
                                  size_t n);

/* Element i of a BYTES tensor: *s its first byte (followed by a NUL after
 * its n bytes), *n its length; both borrowed from t.  ATTN_EINVAL when t is
 * not a BYTES tensor or i is not an element written (0 <= i < the elements
 * put); *s and *n are then untouched. */
attn_status attn_tensor_bytes_at(const attn_tensor *t, int64_t i,
                                 const char **s, size_t *n);

/* A number (as a double) is an FP32 value when it rounds to a finite
 * float: |x| below FLT_MAX plus half its ulp, 2^128 - 2^103 (a tie there
 * rounds to infinity).  "3.4028235e38", FLT_MAX's shortest decimal (as
 * attnd's own answers, numpy and PyTorch print it), is above FLT_MAX as a
 * double and rounds to it.  NaN is not. */
#define ATTN_F32_LIMIT 0x1.ffffffp127
static inline int attn_f32_in_range(double x) {
  return x < ATTN_F32_LIMIT && x > -ATTN_F32_LIMIT;
}

/* IEEE half and bfloat16 to float. */
float attn_f16_to_f32(uint16_t h);
float attn_bf16_to_f32(uint16_t h);
/* Float to IEEE half and bfloat16, rounded to nearest even as numpy's
 * astype(float16) and PyTorch's .to(torch.bfloat16) do: subnormal results
 * kept, beyond the largest finite value infinity, NaN stays a quiet NaN
 * with its sign. */
uint16_t attn_f32_to_f16(float f);
uint16_t attn_f32_to_bf16(float f);

#endif /* ATTN_TENSOR_H */
