/* safetensors.h - read Hugging Face .safetensors files into FP32 tensors.
 *
 * File layout: an 8-byte little-endian header length N, N bytes of JSON
 *   {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [b, e]}, ...,
 *    "__metadata__": {"key": "string", ...}}
 * (optionally padded with spaces), then the data section; offsets are relative
 * to the start of the data section.  Every tensor is checked before anything
 * is converted: N fits the file, offsets lie inside the data section, sizes
 * equal numel * dtype size (overflow-checked), tensors neither overlap nor
 * leave holes (the format requires the data section to be covered exactly),
 * names are unique.  F32, F16, BF16 and F64 are converted to FP32; other
 * safetensors dtypes are ATTN_EUNSUPPORTED.  Diagnostics name the file (the
 * `label`) and the tensor.
 *
 * Threads: a loaded set is immutable and may be read from any number of
 * threads.  Parse or load from one thread at a time: cJSON's parser resets a
 * process-wide error variable on every call.
 */
#ifndef ATTN_SAFETENSORS_H
#define ATTN_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attn/limits.h" /* ATTN_SAFETENSORS_MAX_HEADER */
#include "attn/status.h"
#include "attn/tensor.h"

typedef struct attn_safetensors attn_safetensors;

/* One tensor of a file.  `tensor` is FP32 (or BF16: attn_safetensors_load_as),
 * contiguous and owned by the set. */
typedef struct attn_safetensors_entry {
  const char *name;
  attn_dtype file_dtype; /* dtype stored in the file (FP32/FP16/BF16/FP64) */
  attn_tensor tensor;
} attn_safetensors_entry;

/* Parse a whole file image buf[0..len).  `label` names the file in
 * diagnostics (may be NULL).  max_elements bounds the total element count of
 * all tensors (0 = no bound); exceeding it is ATTN_ETOOBIG, decided before
 * any tensor memory is allocated.  buf is only read during the call.
 * On success *out owns a new set (free with attn_safetensors_destroy); on
 * error *out is NULL, nothing stays allocated and the status is ATTN_EPARSE
 * (malformed), ATTN_EUNSUPPORTED (dtype), ATTN_ETOOBIG or ATTN_ENOMEM. */
attn_status attn_safetensors_parse(const void *buf, size_t len,
                                   const char *label, size_t max_elements,
                                   attn_safetensors **out, attn_diag *d);

/* Read and parse the file at `path`.  A file larger than the header bound
 * plus max_elements * 8 bytes is refused before it is read (ATTN_ETOOBIG).
 * ATTN_EIO when the file cannot be opened or read; otherwise as
 * attn_safetensors_parse.  Same ownership rules. */
attn_status attn_safetensors_load(const char *path, size_t max_elements,
                                  attn_safetensors **out, attn_diag *d);

/* As attn_safetensors_load; with keep_bf16, F16 and BF16 tensors are not
 * widened: they become BF16 tensors (uint16_t bfloat16 bits; BF16 as
 * stored, F16 rounded to nearest even), half the memory of FP32.  F32 and
 * F64 tensors are FP32 either way. */
attn_status attn_safetensors_load_as(const char *path, size_t max_elements,
                                     bool keep_bf16, attn_safetensors **out,
                                     attn_diag *d);

/* NULL is allowed. */
void attn_safetensors_destroy(attn_safetensors *st);

/* Tensors in header order; i < attn_safetensors_count(). */
size_t attn_safetensors_count(const attn_safetensors *st);
const attn_safetensors_entry *attn_safetensors_at(const attn_safetensors *st,
                                                  size_t i);
/* NULL when absent. */
const attn_safetensors_entry *attn_safetensors_find(const attn_safetensors *st,
                                                    const char *name);
/* Value of a "__metadata__" key; NULL when absent. */
const char *attn_safetensors_metadata(const attn_safetensors *st,
                                      const char *key);

#endif /* ATTN_SAFETENSORS_H */
