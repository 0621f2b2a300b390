/* kserve_v2.c - KServe v2 / Open Inference Protocol request decoding and
 * response encoding, including Triton's binary tensor data extension.
 *
 * Design
 *  - Decoding is strict: the JSON schema of kserve
 *    docs/predict-api/v2/required_api.md plus the parameters of Triton's
 *    docs/protocol/extension_binary_data.md (binary_data_size on inputs,
 *    binary_data on outputs, binary_data_output on the request) and Triton's
 *    scheduling parameters priority and timeout.  Unknown keys in the request,
 *    an input or an output are errors naming the key and where; other
 *    request-level parameters pass through to the model, Triton's sequence
 *    ones checked (sequence_id: a string or a uint64, whose digits above
 *    2^53 - 1 are read from the JSON text by raw_sequence_id, as the
 *    parsed double is not exact there).  "model_name" and
 *    "model_version" are accepted at the top level (Triton's own examples
 *    send them) and returned for the server to check against the URL.
 *  - Two passes over the inputs.  Pass 1 (scan_inputs, scan_input) reads
 *    every input's name, datatype, shape and parameters, checks the element
 *    count against the limits (overflow-safe) and lays out the binary blobs:
 *    each input with binary_data_size takes that many bytes, in input order,
 *    right after the JSON header, and together they must fill the body
 *    exactly.  Nothing is allocated for tensor data until pass 1 has
 *    accepted the whole request.  Pass 2 (build_inputs) allocates each
 *    tensor and converts: JSON data (flat, or nested matching the shape at
 *    every level) or little-endian binary.  Float types become FP32
 *    (wire_dtype keeps the sent type), BOOL one byte 0/1, INT32 and INT64
 *    stay.  BYTES (build_bytes) is walked twice, JSON strings or Triton's
 *    length-prefixed blob: checked and measured, then written into a tensor
 *    of that size (tensor.h's BYTES block), so a malformed one allocates
 *    nothing.  An FP32, INT32 or INT64 blob aligned for its type is borrowed
 *    where it lies (build_input; the tensor does not own it), on
 *    little-endian hosts; the others are copied (a blob after an
 *    arbitrary-length header is often unaligned).
 *  - Any failure frees the partially built request; *out ends zeroed.
 *  - Encoding writes JSON straight into an attn_buf; floats go through
 *    attn_f32_append (shortest round-trip text).  Binary outputs follow the
 *    JSON, little-endian, in output order: FP32 as computed, or FP16 / BF16
 *    when the output asked for that "datatype" (rounded to nearest even a
 *    block at a time, append_half).  The response's "parameters" name the
 *    precision and kernel the model used.
 *
 * Threads: reentrant; no state.
 */
#define _GNU_SOURCE /* memmem */
#include <cjson/cJSON.h>
#include <math.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/tensor.h" /* attn_f32_in_range */
#include "attn/codec.h"
#include "attn/f32fmt.h"
#include "attn/json.h"
#include "internal.h"

/* The largest integer a JSON number carries exactly, 2^53 - 1: above it
 * two texts can read as one double (9007199254740993 reads as 2^53, so
 * 2^53 itself is not known to be what was sent). */
#define JSON_INT_MAX 9007199254740991.0

/* ---- helpers ------------------------------------------------------------ */

static char *dupstr(const char *s) {
  size_t n = strlen(s) + 1;
  char *p = malloc(n);
  if (p) memcpy(p, s, n);
  return p;
}

/* An integral JSON number within [lo, hi] (|hi|, |lo| <= JSON_INT_MAX). */
static bool json_int(const cJSON *it, double lo, double hi, int64_t *v) {
  if (!cJSON_IsNumber(it)) return false;
  double x = it->valuedouble;
  if (!(x >= lo && x <= hi) || x != floor(x)) return false;
  *v = (int64_t)x;
  return true;
}

/* Why a JSON value is not an integer in [0, JSON_INT_MAX] (json_int failed):
 * for the messages below. */
static const char *why_not_count(const cJSON *it) {
  if (!cJSON_IsNumber(it)) return attn_json_kind(it);
  double x = it->valuedouble;
  if (x < 0) return "negative";
  if (x != floor(x)) return "not an integer";
  return "above 2^53 - 1, the largest integer JSON carries exactly";
}

/* Known KServe datatypes that attnd does not take. */
static bool kserve_dtype_known(const char *s) {
  static const char *const names[] = {"UINT8",  "UINT16", "UINT32",
                                      "UINT64", "INT8",   "INT16"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strcmp(s, names[i]) == 0) return true;
  return false;
}

/* Diagnostic prefixed with "inputs[i] 'name'" (or "inputs[i]" when the name
 * is not known yet).  Names are cut at 64 bytes in messages. */
#if defined(__GNUC__)
__attribute__((format(printf, 6, 7)))
#endif
static attn_status
where_err(attn_diag *d, attn_status s, const char *list, size_t i,
          const char *name, const char *fmt, ...) {
  char msg[ATTN_DIAG_MAX];
  va_list ap;
  if (!d) return s;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (name)
    return attn_diag_set(d, s, "%s[%zu] '%.64s': %s", list, i, name, msg);
  return attn_diag_set(d, s, "%s[%zu]: %s", list, i, msg);
}

static uint16_t ld16(const unsigned char *p) {
  return (uint16_t)(p[0] | (unsigned)p[1] << 8);
}
static uint32_t ld32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}
static uint64_t ld64(const unsigned char *p) {
  return (uint64_t)ld32(p) | (uint64_t)ld32(p + 4) << 32;
}

/* FP64 -> FP32, rounded to nearest: values that do not round to a finite
 * float become +-inf (the engine then rejects them as non-finite, naming
 * the tensor). */
static float f64_to_f32(double v) {
  if (v >= ATTN_F32_LIMIT) return INFINITY;
  if (v <= -ATTN_F32_LIMIT) return -INFINITY;
  return (float)v; /* NaN stays NaN */
}

/* ---- decoding: request level ------------------------------------------- */

/* What pass 1 learns about one input. */
typedef struct in_desc {
  const char *name;  /* borrowed from the cJSON tree */
  const cJSON *data; /* NULL for binary inputs */
  attn_dtype dt;
  int rank;
  int64_t shape[ATTN_MAX_RANK];
  size_t numel;
  bool binary;
  size_t bin_off, bin_size;
} in_desc;

static attn_status parse_id(const cJSON *it, const char *key, size_t max,
                            char **dst, attn_diag *d) {
  if (!cJSON_IsString(it) || !it->valuestring[0])
    return attn_diag_set(d, ATTN_EINVAL,
                         "'%s' must be a non-empty string, got %s", key,
                         attn_json_kind(it));
  if (strlen(it->valuestring) > max)
    return attn_diag_set(d, ATTN_EINVAL, "'%s' is longer than %zu bytes", key,
                         max);
  *dst = dupstr(it->valuestring);
  return *dst ? ATTN_OK : ATTN_ENOMEM;
}

static int raw_sequence_id(const char *json, size_t n, uint64_t *u);

/* Triton's sequence_id into p: a string as it is (STRING), or an unsigned
 * integer up to 2^64 - 1 (INT, see codec.h), read from its digits in the
 * JSON text json[0, n) when above 2^53 - 1, where the parsed double is not
 * exact. */
static attn_status sequence_id(const cJSON *c, const char *json, size_t n,
                               attn_param *p, attn_diag *d) {
  static const char what[] =
      "parameters: sequence_id must be a string or an unsigned integer";
  uint64_t u;
  char digits[24];
  if (cJSON_IsString(c)) {
    p->type = ATTN_PARAM_STRING;
    return (p->s = dupstr(c->valuestring)) ? ATTN_OK : ATTN_ENOMEM;
  }
  if (!cJSON_IsNumber(c))
    return attn_diag_set(d, ATTN_EINVAL, "%s, got %s", what, attn_json_kind(c));
  double x = c->valuedouble;
  if (signbit(x) || x != floor(x)) /* -0 too: Triton's is a uint64 */
    return attn_diag_set(d, ATTN_EINVAL, "%s, got %.17g (%s)", what, x,
                         signbit(x) ? "negative" : "not an integer");
  if (x <= JSON_INT_MAX) {
    u = (uint64_t)x;
  } else {
    int r = raw_sequence_id(json, n, &u);
    if (r < 0)
      return attn_diag_set(d, ATTN_EINVAL, "%s, got a number above 2^64 - 1",
                           what);
    if (r == 0)
      return attn_diag_set(d, ATTN_EINVAL,
                           "%s, got %.17g (above 2^53 - 1: write it in plain "
                           "digits, at most 18446744073709551615)",
                           what, x);
  }
  snprintf(digits, sizeof digits, "%" PRIu64, u);
  p->type = ATTN_PARAM_INT;
  p->i = (int64_t)u; /* two's complement: (uint64_t)p->i is u */
  p->d = x;
  return (p->s = dupstr(digits)) ? ATTN_OK : ATTN_ENOMEM;
}

/* Request-level "parameters": binary_data_output, priority and timeout are
 * taken here; everything else is copied for the model, Triton's sequence
 * parameters checked (sequence_id, sequence_start, sequence_end).  json,
 * n: the request's JSON text (sequence_id's digits are read from it). */
static attn_status parse_req_params(const cJSON *obj, const char *json,
                                    size_t json_len, attn_infer_request *out,
                                    attn_diag *d) {
  const cJSON *c;
  size_t n = 0;
  int64_t v;
  if (!cJSON_IsObject(obj))
    return attn_diag_set(d, ATTN_EINVAL,
                         "'parameters' must be an object, got %s",
                         attn_json_kind(obj));
  cJSON_ArrayForEach(c, obj) {
    if (++n > ATTN_MAX_PARAMS)
      return attn_diag_set(d, ATTN_ETOOBIG, "parameters: more than %d entries",
                           ATTN_MAX_PARAMS);
  }
  out->params = calloc(n ? n : 1, sizeof *out->params);
  if (!out->params) return ATTN_ENOMEM;
  cJSON_ArrayForEach(c, obj) {
    const char *k = c->string;
    if (!k[0] || strlen(k) > ATTN_MAX_NAME_LEN)
      return attn_diag_set(d, ATTN_EINVAL,
                           "parameters: name must be 1..%d bytes",
                           ATTN_MAX_NAME_LEN);
    for (const cJSON *p = obj->child; p != c; p = p->next)
      if (strcmp(p->string, k) == 0)
        return attn_diag_set(d, ATTN_EINVAL,
                             "parameters: duplicate key '%.64s'", k);
    if (strcmp(k, "binary_data_output") == 0) {
      if (!cJSON_IsBool(c))
        return attn_diag_set(d, ATTN_EINVAL,
                             "parameters: 'binary_data_output' must be a "
                             "boolean, got %s",
                             attn_json_kind(c));
      out->binary_data_output = cJSON_IsTrue(c) ? 1 : 0;
      continue;
    }
    if (strcmp(k, "priority") == 0 || strcmp(k, "timeout") == 0) {
      if (!json_int(c, 0, JSON_INT_MAX, &v))
        return attn_diag_set(
            d, ATTN_EINVAL,
            "parameters: '%s' must be a non-negative integer%s (%s)", k,
            k[0] == 't' ? " of microseconds" : "", why_not_count(c));
      if (k[0] == 'p')
        out->priority = v;
      else
        out->timeout_us = v;
      continue;
    }
    attn_param *p = &out->params[out->n_params];
    if ((strcmp(k, "sequence_start") == 0 || strcmp(k, "sequence_end") == 0) &&
        !cJSON_IsBool(c))
      return attn_diag_set(d, ATTN_EINVAL,
                           "parameters: '%s' must be a boolean, got %s", k,
                           attn_json_kind(c));
    if (strcmp(k, "sequence_id") == 0) {
      attn_status s = sequence_id(c, json, json_len, p, d);
      if (s != ATTN_OK) return s; /* p->s is set only on success */
    } else if (cJSON_IsBool(c)) {
      p->type = ATTN_PARAM_BOOL;
      p->b = cJSON_IsTrue(c);
    } else if (cJSON_IsNumber(c)) {
      double x = c->valuedouble;
      if (!isfinite(x))
        return attn_diag_set(d, ATTN_EINVAL,
                             "parameters: '%.64s' is not a finite number", k);
      p->d = x;
      if (json_int(c, -JSON_INT_MAX, JSON_INT_MAX, &v)) {
        p->type = ATTN_PARAM_INT;
        p->i = v;
      } else {
        p->type = ATTN_PARAM_DOUBLE;
      }
    } else if (cJSON_IsString(c)) {
      p->type = ATTN_PARAM_STRING;
      if (!(p->s = dupstr(c->valuestring))) return ATTN_ENOMEM;
    } else {
      return attn_diag_set(d, ATTN_EINVAL,
                           "parameters: '%.64s' must be a string, number or "
                           "boolean, got %s",
                           k, attn_json_kind(c));
    }
    if (!(p->name = dupstr(k))) { /* p is not counted yet: free its value */
      free(p->s);
      p->s = NULL;
      return ATTN_ENOMEM;
    }
    out->n_params++; /* from here freed with the request */
  }
  return ATTN_OK;
}

/* A requested output's parameters: binary_data (a boolean) and datatype
 * (the binary blob's type: "FP32", "FP16" or "BF16"). */
static attn_status output_params(const cJSON *params, size_t i, const char *nm,
                                 int *binary, attn_dtype *dt, attn_diag *d) {
  const cJSON *c;
  cJSON_ArrayForEach(c, params) {
    bool is_bin = strcmp(c->string, "binary_data") == 0;
    if (!is_bin && strcmp(c->string, "datatype") != 0)
      return where_err(d, ATTN_EINVAL, "outputs", i, nm,
                       "unknown parameter '%.64s' (binary_data and datatype "
                       "are known)",
                       c->string);
    if (is_bin ? *binary != -1 : *dt != ATTN_DT_INVALID)
      return where_err(d, ATTN_EINVAL, "outputs", i, nm,
                       "duplicate parameter '%s'", c->string);
    if (is_bin && !cJSON_IsBool(c))
      return where_err(d, ATTN_EINVAL, "outputs", i, nm,
                       "'binary_data' must be a boolean, got %s",
                       attn_json_kind(c));
    if (is_bin) {
      *binary = cJSON_IsTrue(c) ? 1 : 0;
      continue;
    }
    attn_dtype t =
        cJSON_IsString(c) ? attn_dtype_parse(c->valuestring) : ATTN_DT_INVALID;
    if (t != ATTN_DT_FP32 && t != ATTN_DT_FP16 && t != ATTN_DT_BF16)
      return where_err(d, ATTN_EINVAL, "outputs", i, nm,
                       "'datatype' must be \"FP32\", \"FP16\" or "
                       "\"BF16\", got %s%.32s%s",
                       cJSON_IsString(c) ? "\"" : attn_json_kind(c),
                       cJSON_IsString(c) ? c->valuestring : "",
                       cJSON_IsString(c) ? "\"" : "");
    *dt = t;
  }
  return ATTN_OK;
}

static attn_status parse_outputs(const cJSON *arr, attn_infer_request *out,
                                 attn_diag *d) {
  const cJSON *o;
  size_t n, i = 0;
  if (!cJSON_IsArray(arr))
    return attn_diag_set(d, ATTN_EINVAL, "'outputs' must be an array, got %s",
                         attn_json_kind(arr));
  n = (size_t)cJSON_GetArraySize(arr);
  if (n > ATTN_MAX_OUTPUTS)
    return attn_diag_set(d, ATTN_ETOOBIG,
                         "outputs: %zu requested, at most %d allowed", n,
                         ATTN_MAX_OUTPUTS);
  if (n == 0) return ATTN_OK; /* same as absent: all outputs */
  out->outputs = calloc(n, sizeof *out->outputs);
  if (!out->outputs) return ATTN_ENOMEM;
  out->outputs_given = true;
  cJSON_ArrayForEach(o, arr) {
    const cJSON *name = NULL, *params = NULL, *c;
    int binary = -1;
    if (!cJSON_IsObject(o))
      return where_err(d, ATTN_EINVAL, "outputs", i, NULL,
                       "expected an object, got %s", attn_json_kind(o));
    cJSON_ArrayForEach(c, o) {
      const cJSON **slot = strcmp(c->string, "name") == 0         ? &name
                           : strcmp(c->string, "parameters") == 0 ? &params
                                                                  : NULL;
      if (!slot)
        return where_err(d, ATTN_EINVAL, "outputs", i, NULL,
                         "unknown key '%.64s'", c->string);
      if (*slot)
        return where_err(d, ATTN_EINVAL, "outputs", i, NULL,
                         "duplicate key '%s'", c->string);
      *slot = c;
    }
    if (!name)
      return where_err(d, ATTN_EINVAL, "outputs", i, NULL, "missing 'name'");
    if (!cJSON_IsString(name) || !name->valuestring[0] ||
        strlen(name->valuestring) > ATTN_MAX_NAME_LEN)
      return where_err(d, ATTN_EINVAL, "outputs", i, NULL,
                       "'name' must be a string of 1..%d bytes",
                       ATTN_MAX_NAME_LEN);
    const char *nm = name->valuestring;
    for (size_t j = 0; j < i; j++)
      if (strcmp(out->outputs[j].name, nm) == 0)
        return where_err(d, ATTN_EINVAL, "outputs", i, nm,
                         "duplicate name (also outputs[%zu])", j);
    if (params) {
      if (!cJSON_IsObject(params))
        return where_err(d, ATTN_EINVAL, "outputs", i, nm,
                         "'parameters' must be an object, got %s",
                         attn_json_kind(params));
      attn_status s =
          output_params(params, i, nm, &binary, &out->outputs[i].datatype, d);
      if (s) return s;
    }
    if (!(out->outputs[i].name = dupstr(nm))) return ATTN_ENOMEM;
    out->outputs[i].binary = binary;
    out->n_outputs = ++i;
  }
  return ATTN_OK;
}

/* ---- decoding: pass 1, one input's metadata ----------------------------- */

/* The members of one input object, each given at most once. */
typedef struct in_keys {
  const cJSON *name, *shape, *dtype, *data, *params;
} in_keys;

static attn_status input_keys(const cJSON *in, size_t i, in_keys *k,
                              attn_diag *d) {
  const cJSON *c;
  memset(k, 0, sizeof *k);
  if (!cJSON_IsObject(in))
    return where_err(d, ATTN_EINVAL, "inputs", i, NULL,
                     "expected an object, got %s", attn_json_kind(in));
  cJSON_ArrayForEach(c, in) {
    const char *key = c->string;
    const cJSON **slot = strcmp(key, "name") == 0         ? &k->name
                         : strcmp(key, "shape") == 0      ? &k->shape
                         : strcmp(key, "datatype") == 0   ? &k->dtype
                         : strcmp(key, "data") == 0       ? &k->data
                         : strcmp(key, "parameters") == 0 ? &k->params
                                                          : NULL;
    if (!slot)
      return where_err(d, ATTN_EINVAL, "inputs", i, NULL, "unknown key '%.64s'",
                       key);
    if (*slot)
      return where_err(d, ATTN_EINVAL, "inputs", i, NULL, "duplicate key '%s'",
                       key);
    *slot = c;
  }
  return ATTN_OK;
}

/* o->name: a string of 1..ATTN_MAX_NAME_LEN bytes that no earlier input
 * (prev[0..i)) has. */
static attn_status input_name(const cJSON *name, size_t i, const in_desc *prev,
                              in_desc *o, attn_diag *d) {
  if (!name)
    return where_err(d, ATTN_EINVAL, "inputs", i, NULL, "missing 'name'");
  if (!cJSON_IsString(name) || !name->valuestring[0] ||
      strlen(name->valuestring) > ATTN_MAX_NAME_LEN)
    return where_err(d, ATTN_EINVAL, "inputs", i, NULL,
                     "'name' must be a string of 1..%d bytes",
                     ATTN_MAX_NAME_LEN);
  const char *nm = o->name = name->valuestring;
  for (size_t j = 0; j < i; j++)
    if (strcmp(prev[j].name, nm) == 0)
      return where_err(d, ATTN_EINVAL, "inputs", i, nm,
                       "duplicate name (also inputs[%zu])", j);
  return ATTN_OK;
}

/* o->dt from 'datatype'. */
static attn_status input_dtype(const cJSON *dtype, size_t i, in_desc *o,
                               attn_diag *d) {
  const char *nm = o->name;
  if (!dtype)
    return where_err(d, ATTN_EINVAL, "inputs", i, nm, "missing 'datatype'");
  if (!cJSON_IsString(dtype))
    return where_err(d, ATTN_EINVAL, "inputs", i, nm,
                     "'datatype' must be a string, got %s",
                     attn_json_kind(dtype));
  o->dt = attn_dtype_parse(dtype->valuestring);
  if (o->dt == ATTN_DT_INVALID) {
    bool known = kserve_dtype_known(dtype->valuestring);
    return where_err(d, known ? ATTN_EUNSUPPORTED : ATTN_EINVAL, "inputs", i,
                     nm,
                     "%s datatype '%.32s' (use FP32, FP64, FP16, BF16, "
                     "BOOL, INT32, INT64 or BYTES)",
                     known ? "unsupported" : "unknown", dtype->valuestring);
  }
  return ATTN_OK;
}

/* o->rank, o->shape and o->numel from 'shape', within the element limit. */
static attn_status input_shape(const cJSON *shape, size_t i,
                               const attn_codec_limits *lim, in_desc *o,
                               attn_diag *d) {
  const char *nm = o->name;
  const cJSON *c;
  char sh[160];
  if (!shape)
    return where_err(d, ATTN_EINVAL, "inputs", i, nm, "missing 'shape'");
  if (!cJSON_IsArray(shape))
    return where_err(d, ATTN_EINVAL, "inputs", i, nm,
                     "'shape' must be an array, got %s", attn_json_kind(shape));
  cJSON_ArrayForEach(c, shape) {
    if (o->rank == ATTN_MAX_RANK)
      return where_err(d, ATTN_EINVAL, "inputs", i, nm,
                       "shape has rank %d, at most %d is supported",
                       cJSON_GetArraySize(shape), ATTN_MAX_RANK);
    if (!json_int(c, 0, JSON_INT_MAX, &o->shape[o->rank])) {
      if (cJSON_IsNumber(c))
        return where_err(d, ATTN_EINVAL, "inputs", i, nm,
                         "shape[%d] must be a non-negative integer, got %.17g "
                         "(%s)",
                         o->rank, c->valuedouble, why_not_count(c));
      return where_err(d, ATTN_EINVAL, "inputs", i, nm,
                       "shape[%d] must be a non-negative integer, got %s",
                       o->rank, attn_json_kind(c));
    }
    o->rank++;
  }
  if (!attn_shape_numel(o->rank, o->shape, &o->numel))
    return where_err(d, ATTN_ETOOBIG, "inputs", i, nm,
                     "shape %s has too many elements (overflow)",
                     attn_shape_format(sh, sizeof sh, o->rank, o->shape));
  if (o->numel > lim->max_tensor_elements)
    return where_err(d, ATTN_ETOOBIG, "inputs", i, nm,
                     "shape %s has %zu elements, above the limit of %zu",
                     attn_shape_format(sh, sizeof sh, o->rank, o->shape),
                     o->numel, lim->max_tensor_elements);
  return ATTN_OK;
}

/* The input's 'parameters': *bds is its binary_data_size, or NULL. */
static attn_status input_params(const cJSON *params, size_t i, const char *nm,
                                const cJSON **bds, attn_diag *d) {
  const cJSON *c;
  *bds = NULL;
  if (!params) return ATTN_OK;
  if (!cJSON_IsObject(params))
    return where_err(d, ATTN_EINVAL, "inputs", i, nm,
                     "'parameters' must be an object, got %s",
                     attn_json_kind(params));
  cJSON_ArrayForEach(c, params) {
    if (strcmp(c->string, "binary_data_size") != 0)
      return where_err(d, ATTN_EINVAL, "inputs", i, nm,
                       "unknown parameter '%.64s' (only binary_data_size is "
                       "known)",
                       c->string);
    if (*bds)
      return where_err(d, ATTN_EINVAL, "inputs", i, nm,
                       "duplicate parameter 'binary_data_size'");
    *bds = c;
  }
  return ATTN_OK;
}

/* A binary input of `bytes` bytes (binary_data_size bds; for BYTES any
 * size: the blob's elements are checked in pass 2): its blob is laid out at
 * *off, which moves past it. */
static attn_status input_blob(const cJSON *bds, const cJSON *data, size_t i,
                              size_t bytes, size_t header_len, size_t len,
                              size_t *off, in_desc *o, attn_diag *d) {
  const char *nm = o->name;
  size_t esize = attn_dtype_size(o->dt);
  int64_t n;
  char sh[160];
  if (!json_int(bds, 0, JSON_INT_MAX, &n))
    return where_err(d, ATTN_EINVAL, "inputs", i, nm,
                     "binary_data_size must be a non-negative integer "
                     "(%s)",
                     why_not_count(bds));
  if (header_len == 0)
    return where_err(d, ATTN_EINVAL, "inputs", i, nm,
                     "binary_data_size given but the request has no "
                     "Inference-Header-Content-Length header");
  if (data)
    return where_err(d, ATTN_EINVAL, "inputs", i, nm,
                     "both 'data' and binary_data_size given");
  if (o->dt == ATTN_DT_BYTES) bytes = (size_t)n;
  if ((uint64_t)n != bytes) {
    char f[160];
    size_t k = (size_t)snprintf(f, sizeof f, "%zu", esize);
    for (int r = 0; r < o->rank && k < sizeof f; r++)
      k += (size_t)snprintf(f + k, sizeof f - k, "*%lld",
                            (long long)o->shape[r]);
    return where_err(d, ATTN_EINVAL, "inputs", i, nm,
                     "binary_data_size %lld != %s = %zu (%s %s)", (long long)n,
                     f, bytes, attn_dtype_name(o->dt),
                     attn_shape_format(sh, sizeof sh, o->rank, o->shape));
  }
  if (bytes > len - *off)
    return where_err(d, ATTN_EINVAL, "inputs", i, nm,
                     "binary data of %zu bytes at offset %zu runs past the "
                     "end of the body (%zu bytes)",
                     bytes, *off, len);
  o->binary = true;
  o->bin_off = *off;
  o->bin_size = bytes;
  *off += bytes;
  return ATTN_OK;
}

/* A JSON input: 'data' is an array, of a dtype JSON numbers can carry. */
static attn_status input_data(const cJSON *data, size_t i, in_desc *o,
                              attn_diag *d) {
  const char *nm = o->name;
  if (!data)
    return where_err(d, ATTN_EINVAL, "inputs", i, nm,
                     "missing 'data' (or parameters.binary_data_size)");
  if (o->dt == ATTN_DT_FP16 || o->dt == ATTN_DT_BF16)
    return where_err(d, ATTN_EUNSUPPORTED, "inputs", i, nm,
                     "%s data cannot be sent as JSON numbers; use the binary "
                     "tensor data extension (parameters.binary_data_size)",
                     attn_dtype_name(o->dt));
  if (!cJSON_IsArray(data))
    return where_err(d, ATTN_EINVAL, "inputs", i, nm,
                     "'data' must be an array, got %s", attn_json_kind(data));
  o->data = data;
  return ATTN_OK;
}

/* Input i: keys, name, datatype, shape, parameters, then where its data is
 * (a blob at *off, or JSON).  prev holds inputs 0..i-1. */
static attn_status scan_input(const cJSON *in, size_t i, const in_desc *prev,
                              size_t header_len, size_t len, size_t *off,
                              const attn_codec_limits *lim, in_desc *o,
                              attn_diag *d) {
  in_keys k;
  const cJSON *bds;
  attn_status s;
  char sh[160];
  memset(o, 0, sizeof *o);
  if ((s = input_keys(in, i, &k, d)) ||
      (s = input_name(k.name, i, prev, o, d)) ||
      (s = input_dtype(k.dtype, i, o, d)) ||
      (s = input_shape(k.shape, i, lim, o, d)) ||
      (s = input_params(k.params, i, o->name, &bds, d)))
    return s;
  size_t bytes;
  if (!attn_size_mul(o->numel, attn_dtype_size(o->dt), &bytes))
    return where_err(d, ATTN_ETOOBIG, "inputs", i, o->name,
                     "shape %s is too large in bytes",
                     attn_shape_format(sh, sizeof sh, o->rank, o->shape));
  if (bds) return input_blob(bds, k.data, i, bytes, header_len, len, off, o, d);
  return input_data(k.data, i, o, d);
}

/* ---- decoding: pass 2, tensor data -------------------------------------- */

typedef struct fill_ctx {
  const in_desc *in;
  size_t i;     /* input index, for messages */
  void *dst;    /* BYTES: the attn_tensor, or NULL while measuring */
  size_t pos;   /* next element to write */
  size_t chars; /* BYTES, measuring: the strings' bytes so far */
  int64_t idx[ATTN_MAX_RANK + 1];
  attn_diag *d;
} fill_ctx;

/* "data[1][2]" for the first `depth` indices. */
static const char *fmt_path(const fill_ctx *c, int depth, char *buf,
                            size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "data");
  for (int k = 0; k < depth && n < cap; k++)
    n += (size_t)snprintf(buf + n, cap - n, "[%lld]", (long long)c->idx[k]);
  return buf;
}

/* Flat data with a ragged tail: more elements than the shape holds. */
static attn_status too_many(fill_ctx *c) {
  return where_err(c->d, ATTN_EINVAL, "inputs", c->i, c->in->name,
                   "data has more elements than shape needs");
}

/* The number x as element c->pos (of a numeric dtype: FP32, FP64, INT32,
 * INT64; the caller handles the rest). */
static attn_status put_num(fill_ctx *c, double x, int depth) {
  char p[128];
  const char *dn = attn_dtype_name(c->in->dt);
  if (c->pos >= c->in->numel) return too_many(c);
  if (c->in->dt == ATTN_DT_FP32 || c->in->dt == ATTN_DT_FP64) {
    if (!attn_f32_in_range(x))
      return where_err(c->d, ATTN_ENONFINITE, "inputs", c->i, c->in->name,
                       "%s = %.9g is outside the FP32 range",
                       fmt_path(c, depth, p, sizeof p), x);
    ((float *)c->dst)[c->pos++] = (float)x;
    return ATTN_OK;
  }
  bool i32 = c->in->dt == ATTN_DT_INT32;
  double lim = i32 ? 2147483647.0 : JSON_INT_MAX;
  if (x >= (i32 ? -lim - 1 : -lim) && x <= lim && x == floor(x)) {
    if (i32)
      ((int32_t *)c->dst)[c->pos++] = (int32_t)x;
    else
      ((int64_t *)c->dst)[c->pos++] = (int64_t)x;
    return ATTN_OK;
  }
  fmt_path(c, depth, p, sizeof p);
  if (isfinite(x) && x != floor(x))
    return where_err(c->d, ATTN_EINVAL, "inputs", c->i, c->in->name,
                     "%s = %g is not an integer (%s)", p, x, dn);
  /* integers of up to 18 digits in full (2^53 + 1 shows as the 2^53 it
   * reads as, next to the limit), larger ones as %g */
  return where_err(c->d, ATTN_EINVAL, "inputs", c->i, c->in->name,
                   "%s = %.*g is outside the %s range%s", p,
                   fabs(x) < 1e18 ? 18 : 6, x, dn,
                   i32 ? ""
                       : " JSON can carry exactly (+-(2^53 - 1)); send it as "
                         "binary data");
}

/* The wrong kind of value for the input's dtype. */
static attn_status bad_elem(fill_ctx *c, const char *kind, int depth) {
  char p[128];
  return where_err(
      c->d, ATTN_EINVAL, "inputs", c->i, c->in->name,
      "%s is %s, expected %s (%s)", fmt_path(c, depth, p, sizeof p), kind,
      c->in->dt == ATTN_DT_BOOL    ? "true or false"
      : c->in->dt == ATTN_DT_BYTES ? "a string"
      : c->in->dt == ATTN_DT_INT32 || c->in->dt == ATTN_DT_INT64 ? "an integer"
                                                                 : "a number",
      attn_dtype_name(c->in->dt));
}

/* A BYTES element: a JSON string (no NUL: the parser refuses \u0000),
 * measured (c->dst NULL) or written. */
static attn_status put_string(fill_ctx *c, const cJSON *e, int depth) {
  if (!cJSON_IsString(e)) return bad_elem(c, attn_json_kind(e), depth);
  size_t n = strlen(e->valuestring);
  if (!c->dst) {
    c->chars += n; /* no overflow: they are all in the body */
    c->pos++;
    return ATTN_OK;
  }
  return attn_tensor_bytes_put(c->dst, (int64_t)c->pos++, e->valuestring, n);
}

static attn_status put_elem(fill_ctx *c, const cJSON *e, int depth) {
  if (c->pos >= c->in->numel) return too_many(c);
  if (c->in->dt == ATTN_DT_BYTES) return put_string(c, e, depth);
  if (c->in->dt == ATTN_DT_BOOL && cJSON_IsBool(e)) {
    ((uint8_t *)c->dst)[c->pos++] = cJSON_IsTrue(e) ? 1 : 0;
    return ATTN_OK;
  }
  if (c->in->dt == ATTN_DT_BOOL || !cJSON_IsNumber(e))
    return bad_elem(c, attn_json_kind(e), depth);
  return put_num(c, e->valuedouble, depth);
}

/* The values of a packed array (see attn_json_parse_ex) at index depth-1
 * of the data. */
static attn_status put_packed(fill_ctx *c, const double *v, size_t n,
                              int depth) {
  attn_dtype dt = c->in->dt;
  if (dt == ATTN_DT_BOOL || dt == ATTN_DT_BYTES) {
    c->idx[depth - 1] = 0;
    return bad_elem(c, "a number", depth);
  }
  if ((dt == ATTN_DT_FP32 || dt == ATTN_DT_FP64) &&
      n <= c->in->numel - c->pos) { /* the common case, in one loop */
    size_t k = attn_json_f64_to_f32(v, n, (float *)c->dst + c->pos);
    c->pos += k;
    if (k == n) return ATTN_OK;
    c->idx[depth - 1] = (int64_t)k;
    return put_num(c, v[k], depth); /* the error */
  }
  for (size_t k = 0; k < n; k++) {
    c->idx[depth - 1] = (int64_t)k;
    attn_status s = put_num(c, v[k], depth);
    if (s != ATTN_OK) return s;
  }
  return ATTN_OK;
}

static attn_status fill_nested(fill_ctx *c, const cJSON *arr, int depth) {
  const in_desc *in = c->in;
  char p[128], sh[160];
  size_t n = attn_json_len(arr);
  if ((int64_t)n != in->shape[depth]) {
    attn_shape_format(sh, sizeof sh, in->rank, in->shape);
    if (depth == 0)
      return where_err(c->d, ATTN_EINVAL, "inputs", c->i, in->name,
                       "data has %zu elements, shape %s needs %lld at dim 0", n,
                       sh, (long long)in->shape[0]);
    return where_err(c->d, ATTN_EINVAL, "inputs", c->i, in->name,
                     "%s has %zu elements, shape %s needs %lld at dim %d",
                     fmt_path(c, depth, p, sizeof p), n, sh,
                     (long long)in->shape[depth], depth);
  }
  const double *v = attn_json_packed(arr, &n);
  if (v && depth + 1 < in->rank) {
    c->idx[depth] = 0;
    attn_shape_format(sh, sizeof sh, in->rank, in->shape);
    return where_err(c->d, ATTN_EINVAL, "inputs", c->i, in->name,
                     "%s is a number, expected an array (shape %s, dim %d)",
                     fmt_path(c, depth + 1, p, sizeof p), sh, depth + 1);
  }
  if (v) return put_packed(c, v, n, depth + 1);
  const cJSON *e;
  int64_t k = 0;
  cJSON_ArrayForEach(e, arr) {
    attn_status s;
    c->idx[depth] = k++;
    if (depth + 1 < in->rank) {
      if (!cJSON_IsArray(e)) {
        attn_shape_format(sh, sizeof sh, in->rank, in->shape);
        return where_err(c->d, ATTN_EINVAL, "inputs", c->i, in->name,
                         "%s is %s, expected an array (shape %s, dim %d)",
                         fmt_path(c, depth + 1, p, sizeof p), attn_json_kind(e),
                         sh, depth + 1);
      }
      s = fill_nested(c, e, depth + 1);
    } else {
      s = put_elem(c, e, depth + 1);
    }
    if (s != ATTN_OK) return s;
  }
  return ATTN_OK;
}

static attn_status fill_json(fill_ctx *c) {
  const in_desc *in = c->in;
  const cJSON *data = in->data, *e;
  char sh[160];
  if (in->rank > 0 && data->child && cJSON_IsArray(data->child))
    return fill_nested(c, data, 0);
  size_t n = attn_json_len(data);
  if (n != in->numel) {
    attn_shape_format(sh, sizeof sh, in->rank, in->shape);
    return where_err(c->d, ATTN_EINVAL, "inputs", c->i, in->name,
                     "data has %zu elements, shape %s needs %zu", n, sh,
                     in->numel);
  }
  const double *v = attn_json_packed(data, &n);
  if (v) return put_packed(c, v, n, 1);
  int64_t k = 0;
  cJSON_ArrayForEach(e, data) {
    c->idx[0] = k++;
    attn_status s = put_elem(c, e, 1);
    if (s != ATTN_OK) return s;
  }
  return ATTN_OK;
}

static void fill_binary(const in_desc *in, const unsigned char *p, void *dst) {
  size_t n = in->numel;
  switch (in->dt) {
    case ATTN_DT_FP32:
    case ATTN_DT_INT32:
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
      memcpy(dst, p, n * 4);
#else
      for (size_t k = 0; k < n; k++) {
        uint32_t u = ld32(p + 4 * k);
        memcpy((char *)dst + 4 * k, &u, 4);
      }
#endif
      break;
    case ATTN_DT_INT64:
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
      memcpy(dst, p, n * 8);
#else
      for (size_t k = 0; k < n; k++) {
        uint64_t u = ld64(p + 8 * k);
        memcpy((char *)dst + 8 * k, &u, 8);
      }
#endif
      break;
    case ATTN_DT_FP64:
      for (size_t k = 0; k < n; k++) {
        uint64_t u = ld64(p + 8 * k);
        double v;
        memcpy(&v, &u, 8);
        ((float *)dst)[k] = f64_to_f32(v);
      }
      break;
    case ATTN_DT_FP16:
      for (size_t k = 0; k < n; k++)
        ((float *)dst)[k] = attn_f16_to_f32(ld16(p + 2 * k));
      break;
    case ATTN_DT_BF16:
      /* attn_bf16_to_f32 (the top half of an fp32) written out here, so
       * that the loop vectorises: a call per element cost a bf16 step of
       * B 8 more than its decoding otherwise (tests/unit: test_codec_v2's
       * bf16 widening against attn_bf16_to_f32) */
      for (size_t k = 0; k < n; k++) {
        uint32_t u = (uint32_t)ld16(p + 2 * k) << 16;
        memcpy((char *)dst + 4 * k, &u, 4);
      }
      break;
    case ATTN_DT_BOOL:
      for (size_t k = 0; k < n; k++) ((uint8_t *)dst)[k] = p[k] != 0;
      break;
    default:
      break;
  }
}

/* Tensor dtype after decoding: floats become FP32. */
static attn_dtype stored_dtype(attn_dtype wire) {
  switch (wire) {
    case ATTN_DT_FP64:
    case ATTN_DT_FP16:
    case ATTN_DT_BF16:
      return ATTN_DT_FP32;
    default:
      return wire;
  }
}

/* Triton's BYTES blob of input i, at p (in->bin_size bytes): in->numel
 * elements, each a 4-byte little-endian length then that many bytes,
 * filling it exactly.  Checked, with the elements' total length in *chars
 * (t NULL), or written into t. */
static attn_status walk_bytes_blob(const in_desc *in, size_t i,
                                   const unsigned char *p, attn_tensor *t,
                                   size_t *chars, attn_diag *d) {
  size_t at = 0, len = in->bin_size, total = 0;
  char sh[160];
  attn_shape_format(sh, sizeof sh, in->rank, in->shape);
  for (size_t k = 0; k < in->numel; k++) {
    if (len - at < 4) {
      if (at == len)
        return where_err(d, ATTN_EINVAL, "inputs", i, in->name,
                         "binary data holds %zu elements, shape %s needs %zu "
                         "(BYTES: each a 4-byte length, then its bytes)",
                         k, sh, in->numel);
      return where_err(d, ATTN_EINVAL, "inputs", i, in->name,
                       "binary data ends inside element %zu's 4-byte length "
                       "(%zu bytes left at offset %zu)",
                       k, len - at, at);
    }
    size_t n = ld32(p + at);
    at += 4;
    if (n > len - at)
      return where_err(d, ATTN_EINVAL, "inputs", i, in->name,
                       "element %zu's length %zu runs past the end of the "
                       "binary data (%zu bytes left at offset %zu of %zu)",
                       k, n, len - at, at, len);
    if (t) {
      attn_status s = attn_tensor_bytes_put(t, (int64_t)k, p + at, n);
      if (s != ATTN_OK) return s;
    }
    total += n;
    at += n;
  }
  if (at != len)
    return where_err(d, ATTN_EINVAL, "inputs", i, in->name,
                     "%zu bytes follow the %zu elements of shape %s in the "
                     "binary data (binary_data_size %zu)",
                     len - at, in->numel, sh, len);
  *chars = total;
  return ATTN_OK;
}

/* A BYTES input into dst->tensor: its blob or JSON strings checked and
 * measured, then the tensor allocated and written. */
static attn_status build_bytes(const in_desc *in, size_t i, const char *body,
                               attn_infer_input *dst, attn_diag *d) {
  const unsigned char *p = (const unsigned char *)body + in->bin_off;
  fill_ctx c = {.in = in, .i = i, .d = d};
  size_t chars = 0;
  attn_status s =
      in->binary ? walk_bytes_blob(in, i, p, NULL, &chars, d) : fill_json(&c);
  if (s != ATTN_OK) return s;
  if (!in->binary) chars = c.chars;
  if ((s = attn_tensor_bytes_alloc(&dst->tensor, in->rank, in->shape, chars)) !=
      ATTN_OK)
    return s;
  if (in->binary) return walk_bytes_blob(in, i, p, &dst->tensor, &chars, d);
  c.dst = &dst->tensor;
  c.pos = 0;
  return fill_json(&c);
}

static attn_status build_input(const in_desc *in, size_t i, const char *body,
                               attn_infer_input *dst, attn_diag *d) {
  attn_dtype st = stored_dtype(in->dt);
  size_t bytes = in->numel * attn_dtype_size(st); /* checked in pass 1 */
  if (!(dst->name = dupstr(in->name))) return ATTN_ENOMEM;
  dst->wire_dtype = in->dt;
  if (in->dt == ATTN_DT_BYTES) return build_bytes(in, i, body, dst, d);
  dst->tensor.dtype = st;
  dst->tensor.rank = in->rank;
  memcpy(dst->tensor.shape, in->shape, sizeof in->shape);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  /* A little-endian blob of the stored type, aligned for it, is used where
   * it lies: no copy (a large binary request is mostly such blobs).  The
   * tensor then borrows the body (owns false; read only). */
  if (in->binary && in->dt == st && in->dt != ATTN_DT_BOOL && bytes &&
      (uintptr_t)(body + in->bin_off) % attn_dtype_size(st) == 0) {
    dst->tensor.data = (void *)(uintptr_t)(body + in->bin_off);
    dst->tensor.owns = false;
    return ATTN_OK;
  }
#endif
  if (!(dst->tensor.data = malloc(bytes ? bytes : 1))) return ATTN_ENOMEM;
  dst->tensor.owns = true;
  if (in->binary) {
    fill_binary(in, (const unsigned char *)body + in->bin_off,
                dst->tensor.data);
    return ATTN_OK;
  }
  fill_ctx c = {.in = in, .i = i, .dst = dst->tensor.data, .d = d};
  return fill_json(&c);
}

/* ---- decoding: entry point ---------------------------------------------- */

/* The members of the request object, each given at most once. */
typedef struct req_keys {
  const cJSON *id, *inputs, *outputs, *params, *mname, *mver;
} req_keys;

static attn_status request_keys(const cJSON *root, req_keys *k, attn_diag *d) {
  const cJSON *c;
  memset(k, 0, sizeof *k);
  if (!cJSON_IsObject(root))
    return attn_diag_set(d, ATTN_EINVAL,
                         "request must be a JSON object, got %s",
                         attn_json_kind(root));
  cJSON_ArrayForEach(c, root) {
    const char *key = c->string;
    const cJSON **slot = strcmp(key, "id") == 0              ? &k->id
                         : strcmp(key, "inputs") == 0        ? &k->inputs
                         : strcmp(key, "outputs") == 0       ? &k->outputs
                         : strcmp(key, "parameters") == 0    ? &k->params
                         : strcmp(key, "model_name") == 0    ? &k->mname
                         : strcmp(key, "model_version") == 0 ? &k->mver
                                                             : NULL;
    if (!slot)
      return attn_diag_set(d, ATTN_EINVAL,
                           "request: unknown key '%.64s' (known: id, inputs, "
                           "outputs, parameters, model_name, model_version)",
                           key);
    if (*slot)
      return attn_diag_set(d, ATTN_EINVAL, "request: duplicate key '%s'", key);
    *slot = c;
  }
  return ATTN_OK;
}

/* Pass 1 over the array `inputs` into desc[]: every input's metadata, and
 * the blobs laid out after the header_len-byte JSON header, which together
 * must fill the body (len bytes) exactly. */
static attn_status scan_inputs(const cJSON *inputs, size_t header_len,
                               size_t len, const attn_codec_limits *lim,
                               in_desc *desc, attn_diag *d) {
  const cJSON *c;
  size_t i = 0, off = header_len, last_bin = SIZE_MAX;
  cJSON_ArrayForEach(c, inputs) {
    attn_status s =
        scan_input(c, i, desc, header_len, len, &off, lim, &desc[i], d);
    if (s != ATTN_OK) return s;
    if (desc[i].binary) last_bin = i;
    i++;
  }
  if (header_len == 0 || off == len) return ATTN_OK;
  if (last_bin == SIZE_MAX)
    return attn_diag_set(d, ATTN_EINVAL,
                         "%zu bytes follow the %zu-byte JSON header but no "
                         "input has parameters.binary_data_size",
                         len - off, header_len);
  return where_err(d, ATTN_EINVAL, "inputs", last_bin, desc[last_bin].name,
                   "%zu trailing bytes after this input's binary data "
                   "(body is %zu bytes, binary data ends at %zu)",
                   len - off, len, off);
}

/* Pass 2: out->inputs, the n tensors of desc[] allocated and filled. */
static attn_status build_inputs(const in_desc *desc, size_t n, const char *body,
                                attn_infer_request *out, attn_diag *d) {
  out->inputs = calloc(n ? n : 1, sizeof *out->inputs);
  if (!out->inputs) return ATTN_ENOMEM;
  for (size_t i = 0; i < n; i++) {
    out->n_inputs = i + 1; /* so that a failure frees this one too */
    attn_status s = build_input(&desc[i], i, body, &out->inputs[i], d);
    if (s != ATTN_OK) return s;
  }
  return ATTN_OK;
}

/* The request object: its keys, the request-level fields, then the inputs
 * in two passes (the file's design). */
static attn_status v2_decode(const cJSON *root, const char *body, size_t len,
                             size_t header_len, const attn_codec_limits *lim,
                             attn_infer_request *out, attn_diag *d) {
  req_keys k;
  attn_status s;
  if ((s = request_keys(root, &k, d))) return s;
  if (k.id && (s = parse_id(k.id, "id", ATTN_MAX_ID_LEN, &out->id, d)))
    return s;
  if (k.mname &&
      (s = parse_id(k.mname, "model_name", ATTN_MAX_NAME_LEN, &out->model, d)))
    return s;
  if (k.mver && (s = parse_id(k.mver, "model_version", ATTN_MAX_NAME_LEN,
                              &out->version, d)))
    return s;
  if (k.params && (s = parse_req_params(k.params, body,
                                        header_len ? header_len : len, out, d)))
    return s;
  if (k.outputs && (s = parse_outputs(k.outputs, out, d))) return s;

  if (!k.inputs)
    return attn_diag_set(d, ATTN_EINVAL, "request: missing 'inputs'");
  if (!cJSON_IsArray(k.inputs))
    return attn_diag_set(d, ATTN_EINVAL, "'inputs' must be an array, got %s",
                         attn_json_kind(k.inputs));
  size_t n = (size_t)cJSON_GetArraySize(k.inputs);
  if (n > lim->max_inputs)
    return attn_diag_set(d, ATTN_ETOOBIG,
                         "inputs: %zu tensors, above the limit of %zu", n,
                         lim->max_inputs);
  in_desc *desc = calloc(n ? n : 1, sizeof *desc);
  if (!desc) return ATTN_ENOMEM;
  s = scan_inputs(k.inputs, header_len, len, lim, desc, d);
  if (s == ATTN_OK) s = build_inputs(desc, n, body, out, d);
  free(desc);
  return s;
}

attn_status attn_v2_decode(const char *body, size_t len, size_t header_len,
                           const attn_codec_limits *lim,
                           attn_infer_request *out, attn_diag *d) {
  attn_codec_limits l;
  cJSON *root = NULL;
  attn_status s;
  memset(out, 0, sizeof *out);
  if (header_len > len)
    return attn_diag_set(d, ATTN_EINVAL,
                         "Inference-Header-Content-Length %zu is larger than "
                         "the body (%zu bytes)",
                         header_len, len);
  attn__codec_limits_eff(lim, &l);
  static const char *const packed_keys[] = {"data", NULL}; /* fill_json */
  s = attn_json_parse_ex(body, header_len ? header_len : len, l.max_depth,
                         ATTN_JSON_MAX_NODES, packed_keys,
                         header_len ? ""
                                    : " (binary tensor data needs the "
                                      "Inference-Header-Content-Length "
                                      "header)",
                         &root, d);
  if (s != ATTN_OK) return s;
  out->binary_data_output = -1;
  out->timeout_us = -1;
  s = v2_decode(root, body, len, header_len, &l, out, d);
  if (s == ATTN_ENOMEM) attn_diag_set(d, s, "out of memory decoding request");
  attn_json_free(root);
  if (s != ATTN_OK) attn_infer_request_free(out);
  return s;
}

/* ---- Triton's timeout, peeked at before the decode ---------------------
 * A request's own `parameters.timeout` (microseconds) bounds its wait in
 * the queue (src/server/infer.c), so it is needed before a worker decodes
 * the request: on the HTTP thread, for every v2 request.  The JSON is
 * scanned without building anything: the top-level object's members are
 * stepped over (strings, nested brackets) up to "parameters", whose
 * "timeout" is read.  Only when the JSON's first or last 512 bytes hold
 * the word "timeout" (may_hold_timeout), so a request without one costs two
 * short memmem calls.  Anything malformed gives up (-1): the decode then
 * reports it in full. */

typedef struct jscan {
  const char *p, *end;
} jscan;

static void js_ws(jscan *j) {
  while (j->p < j->end &&
         (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
    j->p++;
}

/* Past a string starting at j->p ('"'); *k, *kn: its raw contents. */
static int js_string(jscan *j, const char **k, size_t *kn) {
  if (j->p >= j->end || *j->p != '"') return 0;
  const char *b = ++j->p;
  while (j->p < j->end && *j->p != '"')
    j->p += *j->p == '\\' && j->p + 1 < j->end ? 2 : 1;
  if (j->p >= j->end) return 0;
  *k = b;
  *kn = (size_t)(j->p++ - b);
  return 1;
}

/* Past one value of any kind (not checked beyond its brackets). */
static int js_skip(jscan *j) {
  const char *k;
  size_t kn;
  int depth = 0;
  do {
    if (j->p >= j->end) return 0;
    char c = *j->p;
    if (c == '"') {
      if (!js_string(j, &k, &kn)) return 0;
    } else if (c == '{' || c == '[') {
      depth++, j->p++;
    } else if (c == '}' || c == ']') {
      if (--depth < 0) return 0;
      j->p++;
    } else if (depth == 0) { /* a scalar: up to its end */
      while (j->p < j->end && !strchr(",}] \t\r\n", *j->p)) j->p++;
    } else {
      j->p++;
    }
  } while (depth > 0);
  return 1;
}

/* Steps through the object at j->p, stopping at the member named key
 * (j->p at its value): 1, or 0 when it has none or is malformed. */
static int js_member(jscan *j, const char *key) {
  size_t want = strlen(key);
  js_ws(j);
  if (j->p >= j->end || *j->p++ != '{') return 0;
  for (;;) {
    const char *k;
    size_t kn;
    js_ws(j);
    if (!js_string(j, &k, &kn)) return 0;
    js_ws(j);
    if (j->p >= j->end || *j->p++ != ':') return 0;
    js_ws(j);
    if (kn == want && !memcmp(k, key, want)) return 1;
    if (!js_skip(j)) return 0;
    js_ws(j);
    if (j->p >= j->end || *j->p++ != ',') return 0;
  }
}

/* Triton's sequence_id above 2^53 - 1 (a uint64: the parsed double is not
 * exact there), read from its digits: the top-level object's "parameters"
 * member's "sequence_id" (the decode has checked that each is given once).
 * 1 with *u set; 0 when not found as plain digits (written with a fraction
 * or an exponent, or its key with escapes); -1 above 2^64 - 1. */
static int raw_sequence_id(const char *json, size_t n, uint64_t *u) {
  jscan j = {json, json + n};
  if (n >= 3 && !memcmp(json, "\xef\xbb\xbf", 3)) j.p += 3; /* a BOM */
  if (!js_member(&j, "parameters") || !js_member(&j, "sequence_id")) return 0;
  const char *b = j.p;
  uint64_t v = 0;
  bool over = false;
  for (; j.p < j.end && *j.p >= '0' && *j.p <= '9'; j.p++)
    over |= __builtin_mul_overflow(v, 10, &v) ||
            __builtin_add_overflow(v, (uint64_t)(*j.p - '0'), &v);
  if (j.p == b || (j.p < j.end && !strchr(",} \t\r\n", *j.p))) return 0;
  if (over) return -1;
  *u = v;
  return 1;
}

/* Where "timeout" is looked for: the first and last TIMEOUT_WINDOW bytes
 * of the JSON (all of it when shorter), where clients put a request's
 * parameters (tritonclient: last, after inputs and outputs).  A whole-body
 * memmem cost a small v2 JSON request 42,000 instructions (+11%,
 * callgrind); the windows cost a thousandth of that.  A timeout in the
 * middle of a long JSON body is left to the decode. */
#define TIMEOUT_WINDOW 512

static int may_hold_timeout(const char *json, size_t n) {
  static const char word[] = "\"timeout\"";
  const size_t w = sizeof word - 1;
  if (n <= 2 * TIMEOUT_WINDOW) return memmem(json, n, word, w) != NULL;
  return memmem(json, TIMEOUT_WINDOW, word, w) != NULL ||
         memmem(json + n - TIMEOUT_WINDOW, TIMEOUT_WINDOW, word, w) != NULL;
}

int64_t attn_v2_peek_timeout(const char *body, size_t len, size_t header_len) {
  size_t n = header_len && header_len < len ? header_len : len;
  if (!may_hold_timeout(body, n)) return -1;
  jscan j = {body, body + n};
  if (!js_member(&j, "parameters") || !js_member(&j, "timeout")) return -1;
  int64_t v = 0;
  const char *b = j.p;
  while (j.p < j.end && *j.p >= '0' && *j.p <= '9' && v < INT64_MAX / 10 - 9)
    v = v * 10 + (*j.p++ - '0');
  if (j.p == b || (j.p < j.end && !strchr(",} \t\r\n", *j.p))) return -1;
  return v;
}

/* ---- encoding ----------------------------------------------------------- */

#define TRY(x)                           \
  do {                                   \
    if ((s = (x)) != ATTN_OK) goto fail; \
  } while (0)

/* The type an output is written in: FP32 unless a binary one asks FP16 or
 * BF16. */
static attn_dtype out_dtype(const attn_infer_output *o) {
  return o->datatype ? o->datatype : ATTN_DT_FP32;
}

/* The FP32 values v[0, n) appended as little-endian FP16 or BF16, rounded
 * to nearest even, a block at a time. */
static attn_status append_half(attn_buf *out, const float *v, size_t n,
                               attn_dtype t) {
  unsigned char blk[4096];
  attn_status s = attn_buf_reserve(out, 2 * n);
  for (size_t i = 0; s == ATTN_OK && i < n;) {
    size_t m = n - i < sizeof blk / 2 ? n - i : sizeof blk / 2;
    for (size_t k = 0; k < m; k++) {
      uint16_t h = t == ATTN_DT_BF16 ? attn_f32_to_bf16(v[i + k])
                                     : attn_f32_to_f16(v[i + k]);
      blk[2 * k] = (unsigned char)(h & 255);
      blk[2 * k + 1] = (unsigned char)(h >> 8);
    }
    s = attn_buf_append(out, blk, 2 * m);
    i += m;
  }
  return s;
}

/* The response's "parameters": the precision and kernel actually used. */
static attn_status put_resp_params(attn_buf *out,
                                   const attn_infer_response *r) {
  attn_status s;
  if (!r->precision) return ATTN_OK;
  if ((s = attn_buf_puts(out, ",\"parameters\":{\"precision\":")) ||
      (s = attn_buf_json_string(out, r->precision)))
    return s;
  if (r->kernel && ((s = attn_buf_puts(out, ",\"kernel\":")) ||
                    (s = attn_buf_json_string(out, r->kernel))))
    return s;
  return attn_buf_puts(out, "}");
}

static attn_status check_output(const attn_infer_output *o, size_t i,
                                size_t *numel, attn_diag *d) {
  if (!o->name) return where_err(d, ATTN_EINVAL, "outputs", i, NULL, "no name");
  if (o->tensor.dtype != ATTN_DT_FP32)
    return where_err(d, ATTN_EINVAL, "outputs", i, o->name,
                     "tensor is %s, only FP32 outputs are encoded",
                     attn_dtype_name(o->tensor.dtype)
                         ? attn_dtype_name(o->tensor.dtype)
                         : "invalid");
  attn_dtype w = out_dtype(o);
  if (w != ATTN_DT_FP32 && (w != ATTN_DT_FP16 && w != ATTN_DT_BF16))
    return where_err(d, ATTN_EINVAL, "outputs", i, o->name,
                     "datatype %d is not FP32, FP16 or BF16", (int)w);
  if (w != ATTN_DT_FP32 && !o->binary)
    return where_err(d, ATTN_EINVAL, "outputs", i, o->name,
                     "%s only as binary data", attn_dtype_name(w));
  if (!attn_shape_numel(o->tensor.rank, o->tensor.shape, numel) ||
      *numel > SIZE_MAX / sizeof(float))
    return where_err(d, ATTN_EINVAL, "outputs", i, o->name, "bad shape");
  if (*numel && !o->tensor.data)
    return where_err(d, ATTN_EINVAL, "outputs", i, o->name, "no data");
  return ATTN_OK;
}

attn_status attn_v2_encode(const attn_infer_response *r, attn_buf *out,
                           size_t *header_len, attn_diag *d) {
  size_t start = out->len, numel;
  bool any_binary = false;
  attn_status s;
  if (header_len) *header_len = 0;
  if (!r->model_name)
    return attn_diag_set(d, ATTN_EINVAL, "response has no model_name");
  for (size_t i = 0; i < r->n_outputs; i++)
    if ((s = check_output(&r->outputs[i], i, &numel, d)) != ATTN_OK) return s;

  TRY(attn_buf_puts(out, "{\"model_name\":"));
  TRY(attn_buf_json_string(out, r->model_name));
  if (r->model_version) {
    TRY(attn_buf_puts(out, ",\"model_version\":"));
    TRY(attn_buf_json_string(out, r->model_version));
  }
  if (r->id) {
    TRY(attn_buf_puts(out, ",\"id\":"));
    TRY(attn_buf_json_string(out, r->id));
  }
  TRY(put_resp_params(out, r));
  TRY(attn_buf_puts(out, ",\"outputs\":["));
  for (size_t i = 0; i < r->n_outputs; i++) {
    const attn_infer_output *o = &r->outputs[i];
    const float *v = o->tensor.data;
    attn_shape_numel(o->tensor.rank, o->tensor.shape, &numel);
    TRY(attn_buf_puts(out, i ? ",{\"name\":" : "{\"name\":"));
    TRY(attn_buf_json_string(out, o->name));
    TRY(attn_buf_puts(out, ",\"datatype\":\""));
    TRY(attn_buf_puts(out, attn_dtype_name(out_dtype(o))));
    TRY(attn_buf_puts(out, "\",\"shape\":"));
    TRY(attn__json_shape(out, o->tensor.rank, o->tensor.shape));
    if (o->binary) {
      any_binary = true;
      TRY(attn_buf_printf(out, ",\"parameters\":{\"binary_data_size\":%zu}}",
                          numel * attn_dtype_size(out_dtype(o))));
      continue;
    }
    TRY(attn_buf_puts(out, ",\"data\":["));
    TRY(attn_f32_append_list(out, v, numel, 1, false));
    TRY(attn_buf_puts(out, "]}"));
  }
  TRY(attn_buf_puts(out, "]}"));
  size_t json_len = out->len - start;
  for (size_t i = 0; any_binary && i < r->n_outputs; i++) {
    const attn_infer_output *o = &r->outputs[i];
    if (!o->binary) continue;
    attn_shape_numel(o->tensor.rank, o->tensor.shape, &numel);
    if (out_dtype(o) != ATTN_DT_FP32) {
      TRY(append_half(out, o->tensor.data, numel, out_dtype(o)));
      continue;
    }
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    TRY(attn_buf_append(out, o->tensor.data, numel * sizeof(float)));
#else
    TRY(attn_buf_reserve(out, numel * sizeof(float)));
    for (size_t k = 0; k < numel; k++) {
      uint32_t u;
      unsigned char le[4];
      memcpy(&u, (const float *)o->tensor.data + k, 4);
      le[0] = u & 255;
      le[1] = (u >> 8) & 255;
      le[2] = (u >> 16) & 255;
      le[3] = u >> 24;
      TRY(attn_buf_append(out, le, 4));
    }
#endif
  }
  if (header_len) *header_len = any_binary ? json_len : 0;
  return ATTN_OK;
fail:
  attn__buf_restore(out, start);
  return attn_diag_set(d, s, "encoding the response: %s", attn_strerror(s));
}

attn_status attn_v2_encode_server_metadata(attn_buf *out, const char *name,
                                           const char *version,
                                           const char *const *extensions,
                                           size_t n) {
  size_t start = out->len;
  attn_status s;
  TRY(attn_buf_puts(out, "{\"name\":"));
  TRY(attn_buf_json_string(out, name));
  TRY(attn_buf_puts(out, ",\"version\":"));
  TRY(attn_buf_json_string(out, version));
  TRY(attn_buf_puts(out, ",\"extensions\":["));
  for (size_t i = 0; i < n; i++) {
    if (i) TRY(attn_buf_append(out, ",", 1));
    TRY(attn_buf_json_string(out, extensions[i]));
  }
  TRY(attn_buf_puts(out, "]}"));
  return ATTN_OK;
fail:
  attn__buf_restore(out, start);
  return s;
}

static attn_status put_tensor_metas(attn_buf *out, const attn_tensor_meta *t,
                                    size_t n) {
  attn_status s = attn_buf_append(out, "[", 1);
  for (size_t i = 0; s == ATTN_OK && i < n; i++) {
    s = attn_buf_puts(out, i ? ",{\"name\":" : "{\"name\":");
    if (s == ATTN_OK) s = attn_buf_json_string(out, t[i].name);
    if (s == ATTN_OK) s = attn_buf_puts(out, ",\"datatype\":");
    if (s == ATTN_OK) s = attn_buf_json_string(out, t[i].datatype);
    if (s == ATTN_OK) s = attn_buf_puts(out, ",\"shape\":");
    if (s == ATTN_OK) s = attn__json_shape(out, t[i].rank, t[i].shape);
    if (s == ATTN_OK) s = attn_buf_append(out, "}", 1);
  }
  return s == ATTN_OK ? attn_buf_append(out, "]", 1) : s;
}

static bool metas_ok(const attn_tensor_meta *t, size_t n) {
  if (n && !t) return false;
  for (size_t i = 0; i < n; i++)
    if (!t[i].name || !t[i].datatype || t[i].rank < 0 ||
        t[i].rank > ATTN_MAX_RANK)
      return false;
  return true;
}

attn_status attn_v2_encode_model_metadata(attn_buf *out,
                                          const attn_model_meta *m) {
  size_t start = out->len;
  attn_status s;
  if (!m || !m->name || !metas_ok(m->inputs, m->n_inputs) ||
      !metas_ok(m->outputs, m->n_outputs) || (m->n_versions && !m->versions))
    return ATTN_EINVAL;
  TRY(attn_buf_puts(out, "{\"name\":"));
  TRY(attn_buf_json_string(out, m->name));
  if (m->n_versions) {
    TRY(attn_buf_puts(out, ",\"versions\":["));
    for (size_t i = 0; i < m->n_versions; i++) {
      if (i) TRY(attn_buf_append(out, ",", 1));
      TRY(attn_buf_json_string(out, m->versions[i]));
    }
    TRY(attn_buf_append(out, "]", 1));
  }
  TRY(attn_buf_puts(out, ",\"platform\":"));
  TRY(attn_buf_json_string(out, m->platform ? m->platform : ""));
  TRY(attn_buf_puts(out, ",\"inputs\":"));
  TRY(put_tensor_metas(out, m->inputs, m->n_inputs));
  TRY(attn_buf_puts(out, ",\"outputs\":"));
  TRY(put_tensor_metas(out, m->outputs, m->n_outputs));
  if (m->parameters) {
    TRY(attn_buf_puts(out, ",\"parameters\":"));
    TRY(attn_buf_puts(out, m->parameters));
  }
  TRY(attn_buf_append(out, "}", 1));
  return ATTN_OK;
fail:
  attn__buf_restore(out, start);
  return s;
}
