/* codec.h - request decoding and response encoding for the two wire formats
 * of attnd: KServe v2 / Open Inference Protocol (with Triton's binary tensor
 * data extension, and the bodies of its model repository and statistics
 * extensions) and the curl-friendly /v1/attention JSON.  Every byte of these
 * formats that attnd reads or writes goes through here; src/server/ hands over
 * and gets back plain structs.
 *
 * Codecs know tensors, not the server: inputs are byte buffers plus the one
 * HTTP header value the v2 binary extension needs (as a number), outputs are
 * attn_buf bytes.  No HTTP status codes here: every function returns an
 * attn_status and explains failures in an attn_diag (which may be NULL) that
 * names what is wrong and where, e.g.
 *   "inputs[0] 'query': data has 6 elements, shape [2,4] needs 8".
 * docs/api.md describes both wire formats for clients.
 *
 * Threads: every function is reentrant; calls share no state.  (cJSON keeps
 * a global "last error" pointer that its parser writes on failure; attnd
 * never reads it, the codecs report positions themselves.)
 */
#ifndef ATTN_CODEC_H
#define ATTN_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attn/buf.h"
#include "attn/infer_request.h"
#include "attn/limits.h"
#include "attn/session.h"
#include "attn/status.h"
#include "attn/tensor.h"

/* ---- Limits ------------------------------------------------------------- */

/* Runtime limits a decoder enforces before it allocates anything for the
 * offending part (a tensor's element count is checked from its shape before
 * its data is allocated; nesting depth is checked on the raw bytes before
 * JSON parsing).  0 in a field means "the hard ceiling"; values above the
 * ceilings of attn/limits.h are lowered to them:
 *   max_tensor_elements  <= ATTN_MAX_ELEMENTS   elements of any one tensor
 *   max_inputs           <= ATTN_MAX_INPUTS     input tensors per request
 *   max_depth            <= ATTN_MAX_JSON_DEPTH JSON nesting of the body
 * Exceeding a limit is ATTN_ETOOBIG, except nesting, which no well-formed
 * request needs and is ATTN_EINVAL (a 400, not a 413). */
typedef struct attn_codec_limits {
  size_t max_tensor_elements;
  size_t max_inputs;
  size_t max_depth;
} attn_codec_limits;

/* Default: 2^24 elements per tensor (64 MiB of FP32), ATTN_MAX_INPUTS
 * inputs, ATTN_MAX_JSON_DEPTH levels.  A NULL limits pointer passed to a
 * decoder means these defaults. */
#define ATTN_CODEC_DEFAULT_MAX_TENSOR_ELEMENTS ((size_t)1 << 24)
void attn_codec_limits_default(attn_codec_limits *l);

/* ---- KServe v2 / Open Inference Protocol -------------------------------- */

/* Decode a v2 inference request body.
 *
 * body, len   the whole HTTP body; borrowed and never written.  A binary
 *             blob already in its tensor's stored type (FP32, INT32 or
 *             INT64, this machine being little-endian) and aligned for it
 *             is not copied: that tensor points into body (owns false), so
 *             body must outlive *out.  Every other tensor is a copy.
 * header_len  value of the Inference-Header-Content-Length header, 0 when
 *             the header is absent.  When > 0 it must be <= len: the JSON
 *             header is body[0, header_len) and binary blobs follow, one per
 *             input that has parameters.binary_data_size, in input order,
 *             filling the body exactly.  When 0 the whole body is JSON.
 * lim         borrowed; NULL = defaults.
 * out         written on return; caller-owned storage, need not be
 *             initialised.  On success it owns everything it points to
 *             (free with attn_infer_request_free).  On failure it is zeroed
 *             and nothing is left allocated.
 *
 * Filled fields: id; inputs (FP32/FP64/FP16/BF16 become FP32 tensors with
 * wire_dtype recording the sent type; BOOL is one byte 0/1; INT32/INT64
 * unchanged; BYTES a tensor of byte strings, always a copy, read element i
 * with attn_tensor_bytes_at, tensor.h); outputs_given/outputs (an empty
 * "outputs" array counts as not given); binary_data_output (-1 when not
 * said); priority (0 when absent); timeout_us (Triton "timeout" in
 * microseconds, -1 when absent; 0 means no limit, as in Triton); params (all
 * other request-level parameters: booleans -> BOOL, strings -> STRING,
 * integral numbers -> INT with .d also set, other numbers -> DOUBLE).
 *
 * BYTES: JSON "data" is an array of strings (flat, or nested by the shape
 * as numbers are); binary data is Triton's serialization, each element a
 * 4-byte little-endian length then its bytes, the elements filling
 * binary_data_size exactly.  Element counts are checked against the shape
 * and max_tensor_elements; an element whose length runs past the blob,
 * missing elements or bytes after the last are ATTN_EINVAL naming the input
 * and the element.  No model takes BYTES yet: they refuse it by name.
 *
 * Triton's sequence parameters are kept in params, checked:
 *   sequence_start, sequence_end  BOOL (anything else is ATTN_EINVAL);
 *   sequence_id  a JSON string -> STRING (s as sent); a JSON unsigned
 *                integer up to 2^64 - 1 (Triton's uint64) -> INT, exactly:
 *                (uint64_t)p->i is the value (above INT64_MAX p->i reads
 *                negative), p->s its decimal digits ("18446744073709551615")
 *                and p->d the nearest double.  So p->s names the sequence
 *                either way, and p->type says which form came.  Above
 *                2^53 - 1 the digits are read from the JSON text, so such a
 *                value must be written in plain digits.  Negative (-0 too),
 *                fractional, larger or other values are ATTN_EINVAL
 *                ("sequence_id must be a string or an unsigned integer").
 * Everything else a sequence takes (layers, max_tokens, kv_dtype, layer,
 * ...) passes as any parameter does.
 * model and version are set only when the body carries "model_name" /
 * "model_version" (Triton's examples do); the caller must check them against
 * the URL, or replace them (free first).
 *
 * Errors: ATTN_EPARSE malformed JSON (with byte offset); ATTN_EINVAL any
 * schema violation (unknown key, wrong type, size mismatch, trailing or
 * missing binary bytes); ATTN_ETOOBIG a limit; ATTN_EUNSUPPORTED a datatype
 * attnd cannot take in that form (FP16/BF16 as JSON, UINT8, INT16...);
 * ATTN_ENONFINITE a JSON number outside the FP32 range; ATTN_ENOMEM. */
attn_status attn_v2_decode(const char *body, size_t len, size_t header_len,
                           const attn_codec_limits *lim,
                           attn_infer_request *out, attn_diag *d);

/* Triton's `parameters.timeout` of a v2 request, found before (and
 * without) decoding it: the queue's deadline is set from it on the HTTP
 * thread, for every v2 request, so this reads only what it must.  body,
 * len and header_len as for attn_v2_decode (the JSON is body[0,
 * header_len) when header_len is within (0, len), else all of it).
 * Returns the timeout in microseconds, a non-negative integer written
 * in digits only, when the top-level object's "parameters" member holds
 * one; -1 when it is absent, not within the first or last 512 bytes of the
 * JSON (where clients put a request's parameters), or when anything on the
 * way is malformed: attn_v2_decode then reads it (or reports the fault) in
 * full.  When both succeed they agree. */
int64_t attn_v2_peek_timeout(const char *body, size_t len, size_t header_len);

/* Encode a v2 inference response, appending to *out:
 *   {"model_name":..,"model_version":..(if set),"id":..(if set),
 *    "outputs":[{"name":..,"datatype":"FP32","shape":[..],"data":[..]},..]}
 * Outputs with .binary carry "parameters":{"binary_data_size":N} instead of
 * "data", and their little-endian bytes follow the JSON in output order;
 * an output whose .datatype is FP16 or BF16 (binary only) is written in
 * that type, rounded to nearest even.  r->precision and r->kernel, when
 * set, become the response's "parameters":{"precision":..,"kernel":..}.
 *
 * r           borrowed; outputs must be FP32 tensors.  Decoding reads an
 *             output's "datatype" parameter (FP32, FP16, BF16) into
 *             attn_infer_output_req.datatype.
 * out         caller-owned; appended to (normally empty on entry).
 * header_len  set to the JSON length when any output is binary (the value of
 *             the Inference-Header-Content-Length response header), else 0.
 * Non-finite floats are written as null (JSON has no NaN/Inf).
 * On failure out->len is restored and *header_len is 0.  Errors: ATTN_EINVAL
 * (malformed response struct), ATTN_ENOMEM, ATTN_ETOOBIG (out->max). */
attn_status attn_v2_encode(const attn_infer_response *r, attn_buf *out,
                           size_t *header_len, attn_diag *d);

/* {"name":..,"version":..,"extensions":[..]}, appended to *out.  All
 * arguments borrowed; extensions may be NULL when n is 0.  On failure out->len
 * is restored.  Errors: ATTN_ENOMEM, ATTN_ETOOBIG. */
attn_status attn_v2_encode_server_metadata(attn_buf *out, const char *name,
                                           const char *version,
                                           const char *const *extensions,
                                           size_t n);

/* Model metadata, a plain description independent of the model module. */
typedef struct attn_tensor_meta {
  const char *name;
  const char *datatype;         /* "FP32", "BOOL", ... */
  int rank;                     /* 0..ATTN_MAX_RANK */
  int64_t shape[ATTN_MAX_RANK]; /* -1 = variable */
  bool optional; /* not written: the v2 schema has no such field (see below) */
} attn_tensor_meta;

typedef struct attn_model_meta {
  const char *name;
  const char *const *versions; /* may be NULL when n_versions is 0 */
  size_t n_versions;
  const char *platform;
  const attn_tensor_meta *inputs;
  size_t n_inputs;
  const attn_tensor_meta *outputs;
  size_t n_outputs;
  const char *parameters; /* a JSON object written as is, or NULL */
} attn_model_meta;

/* KServe $metadata_model_response, appended to *out:
 *   {"name":..,"versions":[..](only when n_versions > 0),"platform":..,
 *    "inputs":[{"name":..,"datatype":..,"shape":[..]}],"outputs":[..],
 *    "parameters":{..}(only when m->parameters is set)}
 * The Open Inference Protocol's optional model "parameters" ($parameters:
 * scalar values) is where a model lists the request parameters it takes.
 * Strictly the schema otherwise: $metadata_tensor has name, datatype, shape,
 * so `optional` is not written anywhere (clients that validate against the
 * schema would reject extra keys); which inputs are optional is documented
 * per model in docs/api.md.  m borrowed.  On failure out->len is restored.
 * Errors: ATTN_EINVAL (NULL name/datatype, bad rank), ATTN_ENOMEM,
 * ATTN_ETOOBIG. */
attn_status attn_v2_encode_model_metadata(attn_buf *out,
                                          const attn_model_meta *m);

/* ---- Triton's extensions: the model repository, statistics ------------- */

/* The operations of Triton's model repository extension. */
typedef enum {
  ATTN_V2_REPO_INDEX, /* POST /v2/repository/index: {"ready": bool} */
  ATTN_V2_REPO_LOAD,  /* POST /v2/repository/models/{m}/load:
                         {"parameters": {}} */
  ATTN_V2_REPO_UNLOAD /* POST /v2/repository/models/{m}/unload:
                         {"parameters": {"unload_dependents": any}} */
} attn_v2_repo_op;

/* What a repository body asks. */
typedef struct attn_v2_repo_request {
  bool ready; /* index: only the models that are READY */
} attn_v2_repo_request;

/* Decode the body of the repository operation op.  body, len: borrowed
 * (body may be NULL when len is 0); empty or blank is {} (tritonclient
 * sends no body).  A key the operation does not take is refused by name;
 * Triton's load overrides ("config", "file:...") with a message of their
 * own, since attnd loads only what its models directory holds.  A key
 * given twice counts once, the first.  *out is written on return (zeroed
 * on failure).  Errors: ATTN_ETOOBIG (longer than
 * ATTN_MAX_REPO_BODY_BYTES: refused before parsing), ATTN_EPARSE (not
 * JSON), ATTN_EINVAL (not an object, deeper than ATTN_MAX_REPO_JSON_DEPTH,
 * more than ATTN_MAX_REPO_JSON_NODES values, a key refused, a value of the
 * wrong type), ATTN_ENOMEM. */
attn_status attn_v2_decode_repository(const char *body, size_t len,
                                      attn_v2_repo_op op,
                                      attn_v2_repo_request *out, attn_diag *d);

/* One model of the repository index, as the server knows it. */
typedef struct attn_v2_repo_entry {
  const char *name;
  const char *version; /* NULL or "": not written */
  bool ready;          /* "state": "READY", else "UNAVAILABLE" */
  const char *reason;  /* written when not ready (NULL: "") */
} attn_v2_repo_entry;

/* The index, appended to *out: [{"name":..,"version":..,"state":..,
 * "reason":..},..], the entries e[0, n) in order (e may be NULL when n is
 * 0); the _entry form writes one object (the answer to a load or an
 * unload).  On failure out->len is restored.  Errors: ATTN_ENOMEM,
 * ATTN_ETOOBIG. */
attn_status attn_v2_encode_repository_index(attn_buf *out,
                                            const attn_v2_repo_entry *e,
                                            size_t n);
attn_status attn_v2_encode_repository_entry(attn_buf *out,
                                            const attn_v2_repo_entry *e);

/* One model's statistics, the server's sums (durations in ns).  attnd runs
 * one request per execution and has no cache. */
typedef struct attn_v2_model_stats {
  const char *name, *version;
  uint64_t last_inference_ms; /* ms since the epoch; 0: none yet */
  uint64_t success_count, success_ns, fail_count, fail_ns;
  uint64_t queue_ns, input_ns, infer_ns, output_ns; /* the successes' */
} attn_v2_model_stats;

/* Triton's statistics (ModelStatisticsResponse of its HTTP/REST extension,
 * what tritonclient's get_inference_statistics returns), appended to *out:
 *   {"model_stats":[{"name":..,"version":..,"last_inference":..,
 *    "inference_count":..,"execution_count":..(both the successes),
 *    "inference_stats":{"success","fail","queue","compute_input",
 *    "compute_infer","compute_output","cache_hit","cache_miss": each
 *    {"count":..,"ns":..}},"batch_stats":[]},..]}
 * The successes' count goes with queue and compute_*, as Triton counts
 * them; the cache's are 0.  m borrowed (NULL when n is 0).  On failure
 * out->len is restored.  Errors: ATTN_ENOMEM, ATTN_ETOOBIG. */
attn_status attn_v2_encode_statistics(attn_buf *out,
                                      const attn_v2_model_stats *m, size_t n);

/* ---- /v1/attention ------------------------------------------------------ */

/* Which internal model a v1 request was mapped to. */
typedef enum {
  ATTN_V1_SDPA,    /* no "weights", no "model": model "sdpa", heads sliced */
  ATTN_V1_MHA,     /* "weights" given: model "mha" */
  ATTN_V1_RESIDENT /* "model" given: that resident model */
} attn_v1_mapping;

/* How a v1 request was reshaped, so that attn_v1_encode can undo it. */
typedef struct attn_v1_info {
  attn_v1_mapping mapping;
  int heads_sliced; /* 1: query/key/value [.., L, H*D] were sent to the model
                       as [.., H, L, D]; attn_output comes back that way */
  int64_t B_given;  /* batch size when the query was [B,Lq,D]; 0 = unbatched
                       (a batched query always has B >= 1) */
  int64_t H;        /* num_heads (1 when not given) */
} attn_v1_info;

/* Decode a /v1/attention body (whole body is JSON; see docs/api.md).
 *
 * body, len  borrowed, read only during the call.
 * lim        borrowed; NULL = defaults.
 * out        as for attn_v2_decode: owned by the caller on success (free with
 *            attn_infer_request_free), zeroed with nothing allocated on
 *            failure.  model is "sdpa", "mha" or the requested resident
 *            model; echo holds "tokens"/"key_tokens" as printed JSON.
 * info       written on success (zeroed on failure); caller-owned.
 *
 * Mapping (input and parameter names are what the models take):
 *  sdpa: "query" [H,Lq,Dk] or [B,H,Lq,Dk] cut from [Lq,H*Dk] / [B,Lq,H*Dk]
 *        (column block h -> head h), "key" and "value" likewise, always
 *        present (self-attention copies the query); params causal, scale
 *        (when given), need_weights, average_attn_weights (always).
 *  mha:  query/key/value as sent (key, value only when given), w_q, w_k,
 *        w_v, w_o [in,out], b_* [out] when given; params num_heads (always),
 *        causal, scale (when given), need_weights, average_attn_weights.
 *  resident: like mha without weights; num_heads only when given.
 *  All: "attn_mask" (BOOL or FP32, [Lq,Lk] or [B,H,Lq,Lk]) and
 *  "key_padding_mask" (BOOL, [1,Lk] from [Lk], or [B,Lk]) when given.
 *
 * Errors: ATTN_EPARSE, ATTN_EINVAL (unknown field with a "did you mean",
 * ragged arrays with the index path, wrong types or ranks, D % num_heads),
 * ATTN_ETOOBIG, ATTN_ENONFINITE, ATTN_ENOMEM. */
attn_status attn_v1_decode(const char *body, size_t len,
                           const attn_codec_limits *lim,
                           attn_infer_request *out, attn_v1_info *info,
                           attn_diag *d);

/* Times reported in a v1 answer, milliseconds. */
typedef struct attn_v1_timing {
  double queue_ms, compute_ms, total_ms;
} attn_v1_timing;

/* Encode a v1 answer, appending to *out:
 *   {"output":nested,"attn_weights":nested(if returned),
 *    "shape":{"output":[..],"attn_weights":[..]},
 *    "tokens":..,"key_tokens":..(echoed when sent),
 *    "timing":{"queue_ms":..,"compute_ms":..,"total_ms":..}(when t != NULL)}
 * With info->heads_sliced, "attn_output" [H,Lq,Dv] / [B,H,Lq,Dv] is written
 * as [Lq,H*Dv] / [B,Lq,H*Dv] (with H > 1 from a copy with the heads side by
 * side, so that a row is one list); otherwise tensors are written as
 * returned.
 *
 * r, req, info, t  borrowed; req may be NULL (no echo), t may be NULL (no
 *                  timing), info NULL means "nothing to undo".
 * On failure out->len is restored.  Errors: ATTN_EINVAL (no "attn_output",
 * non-FP32 tensor), ATTN_ESHAPE (attn_output does not match info),
 * ATTN_ENOMEM, ATTN_ETOOBIG. */
attn_status attn_v1_encode(const attn_infer_response *r,
                           const attn_infer_request *req,
                           const attn_v1_info *info, const attn_v1_timing *t,
                           attn_buf *out, attn_diag *d);

/* One model as GET /v1/models lists it (the strings borrowed). */
typedef struct attn_v1_model_entry {
  const char *name;
  const char *version; /* NULL: "1" */
  const char *kind;    /* "sdpa", "mha", "resident"; NULL: "" */
  int64_t embed_dim;   /* > 0: written, with the four below */
  int64_t num_heads, num_kv_heads, kdim, vdim;
  const char *precision; /* written, with weight_bytes, when set */
  size_t weight_bytes;
  const char *description; /* written when set */
  const char *fixed;       /* a JSON object written as is, or NULL */
} attn_v1_model_entry;

/* {"models":[{"name":..,"version":..,"kind":..,"embed_dim":..,
 * "num_heads":..,"num_kv_heads":..,"kdim":..,"vdim":..,"precision":..,
 * "weight_bytes":..,"description":..,"fixed":{..}},..]}, appended to *out
 * (the optional fields as attn_v1_model_entry says).  m borrowed (NULL
 * when n is 0).  On failure out->len is restored.  Errors: ATTN_ENOMEM,
 * ATTN_ETOOBIG. */
attn_status attn_v1_encode_models(attn_buf *out, const attn_v1_model_entry *m,
                                  size_t n);

/* ---- /v1/sessions (docs/api.md "Sessions") ------------------------------
 * The JSON of the session routes.  The plain types are session.h's (the
 * codec calls nothing of the store).  Unknown fields are ATTN_EINVAL with
 * a "did you mean" as on /v1/attention; every message speaks the user's
 * field names. */

/* PUT /v1/sessions/{id}: {"layers", "num_heads", "num_kv_heads",
 * "head_dim", "max_tokens", "kv_dtype" ("fp32", "bf16", "fp16"), "scale",
 * "window" ([left, 0], left >= -1), "alibi" (true, false or num_heads
 * numbers), "softcap" (> 0; 0 is none, as when left out), "rotary" (true,
 * false, or {"base" > 1, "dims" >= 1, "interleaved"})}; num_heads and
 * head_dim required; layers, num_kv_heads, max_tokens too are integers
 * >= 1.  Syntax and types only: the store checks what fields mean together
 * (num_kv_heads divides num_heads, the slopes' count, rotary.dims even and
 * <= head_dim, limits).  lim: its max_depth (NULL = defaults).  An empty
 * or blank body is ATTN_EINVAL naming what a session needs.  *out owns its
 * slopes (attn_session_spec_clear) on success, and is zeroed with nothing
 * allocated on failure.  Errors: ATTN_EPARSE, ATTN_EINVAL, ATTN_ENONFINITE
 * (a number beyond fp32's range), ATTN_ETOOBIG (the parser's node limit),
 * ATTN_ENOMEM. */
attn_status attn_v1_decode_session_spec(const char *body, size_t len,
                                        const attn_codec_limits *lim,
                                        attn_session_spec *out, attn_diag *d);

/* The shape a step of a session takes (from its spec). */
typedef struct attn_v1_step_shape {
  int64_t H, Hkv, D;
} attn_v1_step_shape;

/* POST /v1/sessions/{id}/attend, decoded. */
typedef struct attn_v1_step {
  int64_t layer; /* "layer", default 0 */
  bool has_position;
  int64_t position; /* "position" (required with key and value) */
  int64_t t;        /* rows of "query" (>= 1) */
  float *q;         /* [t][H][D], owned */
  float *k, *v;     /* [t][Hkv][D], owned; both NULL when not sent */
  bool need_weights;
} attn_v1_step;

/* {"layer", "position", "query" [t][H][D] or [t][H*D], "key" and "value"
 * [t][Hkv][D] or [t][Hkv*D] (both or neither; same t as the query),
 * "need_weights"}: numbers within fp32's range; each row is read on its
 * own, so one body may mix the two layouts row by row.  The messages name
 * the field, the row and what the session takes ("query[3] has 256
 * numbers; this session takes num_heads x head_dim = 8 x 64 = 512").
 * shape: the session's (H, Hkv, D >= 1).  lim: max_tensor_elements per
 * tensor (t x H x D, checked before allocating) and max_depth; NULL =
 * defaults.  *out owns q, k, v on success (attn_v1_step_clear, which
 * takes NULL and leaves *s zeroed), zeroed on failure.  Errors:
 * ATTN_EPARSE, ATTN_EINVAL, ATTN_ESHAPE, ATTN_ENONFINITE, ATTN_ETOOBIG
 * (lim->max_tensor_elements), ATTN_ENOMEM. */
attn_status attn_v1_decode_session_step(const char *body, size_t len,
                                        const attn_codec_limits *lim,
                                        const attn_v1_step_shape *shape,
                                        attn_v1_step *out, attn_diag *d);
void attn_v1_step_clear(attn_v1_step *s);

/* POST /v1/sessions/{id}/truncate: {"length": n >= 0} into *length (0 on
 * failure).  Errors: ATTN_EPARSE, ATTN_EINVAL, ATTN_ENOMEM. */
attn_status attn_v1_decode_session_truncate(const char *body, size_t len,
                                            int64_t *length, attn_diag *d);
/* POST /v1/sessions/{id}/fork: {"id": "new-id"} (an id as session.h
 * says), copied NUL-terminated into id[ATTN_SESSION_ID_MAX + 1] ("" on
 * failure).  Errors: ATTN_EPARSE, ATTN_EINVAL, ATTN_ENOMEM. */
attn_status attn_v1_decode_session_fork(const char *body, size_t len, char *id,
                                        attn_diag *d);

/* The session object: {"id", "layers", "num_heads", "num_kv_heads",
 * "head_dim", "max_tokens", "kv_dtype", then the fixed variants as given
 * ("scale", "window": [left, 0], "alibi": true or [slopes], "softcap",
 * "rotary": {"base", "dims", "interleaved"}), "length": [per layer],
 * "bytes", "idle_s" (seconds, 3 decimals)}, appended to *out.  s
 * borrowed, its spec filled (alibi_slopes num_heads floats; alibi "off",
 * softcap 0 and the has_* false are not written); floats in shortest
 * round-trip form.  On failure out->len is restored.  Errors: ATTN_ENOMEM,
 * ATTN_ETOOBIG (out->max). */
attn_status attn_v1_encode_session(attn_buf *out, const attn_session_info *s);
/* {"sessions": [objects]}, s[0, n) in order (s may be NULL when n is 0);
 * as attn_v1_encode_session otherwise. */
attn_status attn_v1_encode_sessions(attn_buf *out, const attn_session_info *s,
                                    size_t n);
/* A step's answer: {"output": [t][H][D], "lse": [t][H], "length": n,
 * "attn_weights": [H][t][length] when weights is not NULL}, appended to
 * *out from the arrays given (borrowed, contiguous in those orders).
 * Non-finite numbers (a row that saw no key has lse -inf) are written as
 * null.  On failure out->len is restored.  Errors: ATTN_ENOMEM,
 * ATTN_ETOOBIG (out->max). */
attn_status attn_v1_encode_session_step(attn_buf *out,
                                        const attn_v1_step_shape *shape,
                                        int64_t t, const float *output,
                                        const float *lse, int64_t length,
                                        const float *weights);

/* ---- session files (docs/api.md "Moving a session") --------------------
 * A session as one safetensors file (GET /v1/sessions/{id}/kv, PUT
 * /v1/sessions/{id} with application/octet-stream, session_dir): an
 * 8-byte little-endian header length N, N bytes of JSON (padded with
 * spaces so that the data starts on 8 bytes), then the data section.  The
 * header: "__metadata__" {"format": "attnd-session", "format_version":
 * "1", "id", "owner" (the owner tag, 16 hex digits), "spec" (the filled
 * spec as a JSON object in a string: PUT /v1/sessions/{id}'s fields)},
 * and per layer i of the spec "layers.{i}.key" and "layers.{i}.value",
 * each {"dtype": "F32" | "BF16" | "F16" (the kv_dtype), "shape": [len_i,
 * num_kv_heads, head_dim], "data_offsets": [begin, end]}: the rows as
 * stored (keys turned by rotary), [token][head][dim] little-endian. */
#define ATTN_SESSION_FILE_FORMAT "attnd-session"
#define ATTN_SESSION_FILE_VERSION "1"

/* x as a session file, appended to *out (x->k/v for each layer of
 * x->length[l] > 0 tokens).  On failure out->len is restored.  Errors:
 * ATTN_EINVAL (a spec that is not filled: no layers, num_kv_heads,
 * head_dim or dtype), ATTN_ENOMEM, ATTN_ETOOBIG (out->max). */
attn_status attn_session_file_encode(attn_buf *out, const attn_session_dump *x);

/* A whole session file buf[0, len) into *out, checked as strictly as a
 * model file: the header length within the file and at most
 * ATTN_SAFETENSORS_MAX_HEADER, strict JSON, the metadata's keys (each
 * once, no other), format and version, a valid id and owner, the spec (as
 * PUT's body, every count given), exactly the two tensors of each layer
 * and no other, each of the spec's dtype and shape [len, num_kv_heads,
 * head_dim] with len <= max_tokens and the same len for key and value,
 * offsets whose sizes match the shapes and which tile the data section
 * exactly (no overlap, no hole, no trailing byte).  Each message starts
 * "session file: " and names the tensor or key at fault.  On success
 * out->k and out->v point into buf (borrowed: keep buf while out is
 * used), out->data is NULL; free with attn_session_dump_clear.  On
 * failure *out is zeroed with nothing allocated.  Errors: ATTN_EPARSE (a
 * damaged or truncated file), ATTN_EINVAL (a spec refused, as PUT's
 * body), ATTN_ENOMEM. */
attn_status attn_session_file_decode(const void *buf, size_t len,
                                     attn_session_dump *out, attn_diag *d);

/* ---- Errors ------------------------------------------------------------- */

/* Append {"error":"<msg>"} (the v2 $inference_error_response, also used by
 * v1) with msg escaped as a JSON string: quotes, backslash and control
 * characters escaped, invalid UTF-8 replaced by U+FFFD.  msg borrowed; NULL
 * is written as "".  On failure out->len is restored.  Errors: ATTN_ENOMEM,
 * ATTN_ETOOBIG. */
attn_status attn_error_json(attn_buf *out, const char *msg);

#endif /* ATTN_CODEC_H */
