/* infer_request.h - the plain inference request and its response, which
 * codecs produce and consume and models execute.  No HTTP and no JSON library
 * here: codecs turn bytes into an attn_infer_request, a model turns that into
 * an attn_infer_response, codecs turn that back into bytes.  (What a request
 * goes through on a worker thread is src/server/infer.c.)
 *
 * Ownership: every pointer inside a request or response is owned by it and
 * released by attn_infer_request_free / attn_infer_response_free (both take
 * NULL and partially filled structs). */
#ifndef ATTN_INFER_REQUEST_H
#define ATTN_INFER_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attn/status.h"
#include "attn/tensor.h"

typedef enum {
  ATTN_PARAM_BOOL,
  ATTN_PARAM_INT,
  ATTN_PARAM_DOUBLE,
  ATTN_PARAM_STRING
} attn_param_type;

/* A request parameter such as causal, scale, num_heads, need_weights. */
typedef struct attn_param {
  char *name;
  char *label; /* how the user wrote it when that differs from name (/v1's
                  "window[1]" for window_right), for messages; or NULL */
  attn_param_type type;
  bool b;
  int64_t i;
  double d;
  char *s;
} attn_param;

/* One input tensor.  Float inputs (FP32, FP64, FP16, BF16) are converted to
 * FP32 by the codec; `wire_dtype` remembers what the client sent.  BOOL is
 * uint8 (0/1), INT32 and INT64 stay as they are; BYTES is a block of byte
 * strings (tensor.h: attn_tensor_bytes_at). */
typedef struct attn_infer_input {
  char *name;
  attn_dtype wire_dtype;
  attn_tensor tensor; /* owns its data, or borrows it (owns false) from
                         the body or from another input of the request */
} attn_infer_input;

/* One requested output.  binary: -1 not said, 0 JSON, 1 binary.
 * datatype: the binary encoding asked for (v2 output parameter
 * "datatype"): ATTN_DT_INVALID when not said (FP32), else FP32, FP16 or
 * BF16. */
typedef struct attn_infer_output_req {
  char *name;
  int binary;
  attn_dtype datatype;
} attn_infer_output_req;

/* A labelled JSON value echoed back verbatim (v1 `tokens`, `key_tokens`). */
typedef struct attn_echo {
  char *name;
  char *json; /* printed JSON text */
} attn_echo;

typedef struct attn_infer_request {
  char *model;   /* model name (URL or v1 `model`, else "sdpa"/"mha") */
  char *version; /* NULL = unspecified */
  char *id;      /* NULL when absent */
  attn_infer_input *inputs;
  size_t n_inputs;
  attn_param *params; /* model parameters, scheduling ones removed */
  size_t n_params;
  bool outputs_given; /* `outputs` present: only these are returned */
  attn_infer_output_req *outputs;
  size_t n_outputs;
  int binary_data_output; /* -1 not said, 0, 1 */
  int64_t timeout_us;     /* Triton `timeout`, us; -1 absent, 0 no limit */
  int64_t priority;       /* Triton `priority`; accepted, 0 if absent */
  attn_echo *echo;
  size_t n_echo;
} attn_infer_request;

typedef struct attn_infer_output {
  char *name;
  attn_tensor tensor;  /* FP32, owned */
  bool binary;         /* encode as a binary blob */
  attn_dtype datatype; /* binary blob's type: FP32 (or 0), FP16 or BF16,
                          converted from the FP32 tensor when encoded */
} attn_infer_output;

typedef struct attn_infer_response {
  char *model_name;
  char *model_version;
  char *id; /* echoed request id or NULL */
  attn_infer_output *outputs;
  size_t n_outputs;
  /* What was computed, for the metrics: the attention's floating-point
   * operations (attn_sdpa_flops / attn_mha_flops) and the query's
   * sequence length Lq. */
  double flops;
  int64_t query_tokens;
  /* The arithmetic actually used ("fp32" or "bf16") and the kernel its
   * products ran on in this call (attn_exec.kernel: "avx512", "avx2",
   * "blas", "avx512+blas", "avx2+blas", "avx512bf16", "portable"); static
   * strings, NULL when not said.  v1 writes them in "timing", v2 in the
   * response's "parameters". */
  const char *precision, *kernel;
} attn_infer_response;

void attn_infer_request_free(attn_infer_request *r);
void attn_infer_response_free(attn_infer_response *r);

/* Lookups; NULL when absent. */
const attn_infer_input *attn_infer_find_input(const attn_infer_request *r,
                                              const char *name);
const attn_param *attn_infer_find_param(const attn_infer_request *r,
                                        const char *name);

#endif /* ATTN_INFER_REQUEST_H */
