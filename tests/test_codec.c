/* test_codec.c - the v2 and v1 codecs, error JSON and attn_buf.
 *
 * Decoder cases are tables: (input, expected status, message substring,
 * expected tensors).  JSON in the tables is written with ' for " to stay
 * readable; the runner swaps them back (no case needs a literal ').
 * Expected tensors are written as
 *     name:DTYPE[/WIRE][d0,d1,..]=v0,v1,..;next:...
 * with values read by strtof/strtoll (so "inf", "-0", "0x1p-24" work) and
 * compared bit for bit.  Encoder output is parsed back with cJSON and every
 * float must round-trip exactly.
 */
#include <cjson/cJSON.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/buf.h"
#include "attn/codec.h"
#include "attn/f32fmt.h"
#include "attn/infer_request.h"
#include "attn/json.h"
#include "../src/json/internal.h"
#include "unit.h"

/* ---- helpers ------------------------------------------------------------ */

static char *unquote(const char *s) {
  size_t n = strlen(s);
  char *p = malloc(n + 1);
  ck_assert_ptr_nonnull(p);
  for (size_t i = 0; i <= n; i++) p[i] = s[i] == '\'' ? '"' : s[i];
  return p;
}

static char *xstrdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *p = malloc(n);
  ck_assert_ptr_nonnull(p);
  memcpy(p, s, n);
  return p;
}

static bool same_f32(float a, float b) {
  if (isnan(a) && isnan(b)) return true;
  return memcmp(&a, &b, sizeof a) == 0;
}

/* Check r's inputs against an expectation string (see file comment). */
static void check_tensors(const attn_infer_request *r, const char *expect,
                          const char *ctx) {
  size_t n_spec = 0;
  const char *p = expect;
  while (*p) {
    char name[64], dt[16], wire[16] = "";
    size_t k = 0;
    while (*p && *p != ':') name[k++] = *p++;
    name[k] = '\0';
    ck_assert_msg(*p == ':', "%s: bad expectation", ctx);
    p++;
    k = 0;
    while (*p && *p != '[' && *p != '/') dt[k++] = *p++;
    dt[k] = '\0';
    if (*p == '/') {
      p++;
      k = 0;
      while (*p && *p != '[') wire[k++] = *p++;
      wire[k] = '\0';
    }
    ck_assert_msg(*p == '[', "%s: bad expectation", ctx);
    p++;
    int64_t shape[ATTN_MAX_RANK];
    int rank = 0;
    while (*p != ']') {
      char *e;
      shape[rank++] = strtoll(p, &e, 10);
      p = e;
      if (*p == ',') p++;
    }
    p++; /* ] */
    const attn_infer_input *in = attn_infer_find_input(r, name);
    ck_assert_msg(in != NULL, "%s: no input '%s'", ctx, name);
    n_spec++;
    ck_assert_msg(in->tensor.dtype == attn_dtype_parse(dt),
                  "%s: '%s' dtype %s, expected %s", ctx, name,
                  attn_dtype_name(in->tensor.dtype), dt);
    ck_assert_msg(in->wire_dtype == attn_dtype_parse(wire[0] ? wire : dt),
                  "%s: '%s' wire dtype %s", ctx, name,
                  attn_dtype_name(in->wire_dtype));
    ck_assert_msg(in->tensor.rank == rank, "%s: '%s' rank %d, expected %d", ctx,
                  name, in->tensor.rank, rank);
    for (int i = 0; i < rank; i++)
      ck_assert_msg(in->tensor.shape[i] == shape[i],
                    "%s: '%s' dim %d is %lld, expected %lld", ctx, name, i,
                    (long long)in->tensor.shape[i], (long long)shape[i]);
    size_t numel = 0, i = 0;
    attn_shape_numel(rank, shape, &numel);
    ck_assert_msg(in->tensor.data != NULL, "%s: '%s' has no data", ctx, name);
    if (*p == '=') p++;
    while (*p && *p != ';') {
      char *e;
      ck_assert_msg(i < numel, "%s: '%s' more values expected than elements",
                    ctx, name);
      switch (in->tensor.dtype) {
        case ATTN_DT_FP32: {
          float want = strtof(p, &e), got = ((float *)in->tensor.data)[i];
          ck_assert_msg(same_f32(got, want),
                        "%s: '%s'[%zu] = %.9g, expected %.9g", ctx, name, i,
                        (double)got, (double)want);
        } break;
        case ATTN_DT_BOOL:
          ck_assert_int_eq(((uint8_t *)in->tensor.data)[i], strtoll(p, &e, 10));
          break;
        case ATTN_DT_INT32:
          ck_assert_int_eq(((int32_t *)in->tensor.data)[i], strtoll(p, &e, 10));
          break;
        case ATTN_DT_INT64:
          ck_assert_int_eq(((int64_t *)in->tensor.data)[i], strtoll(p, &e, 10));
          break;
        default:
          ck_abort_msg("%s: unexpected dtype", ctx);
          return;
      }
      ck_assert_msg(e != p, "%s: bad value text at '%s'", ctx, p);
      p = e;
      i++;
      if (*p == ',') p++;
    }
    ck_assert_msg(i == numel, "%s: '%s' %zu values given for %zu elements", ctx,
                  name, i, numel);
    if (*p == ';') p++;
  }
  ck_assert_msg(n_spec == r->n_inputs, "%s: %zu inputs decoded, %zu expected",
                ctx, r->n_inputs, n_spec);
}

static void check_zeroed(const attn_infer_request *r) {
  attn_infer_request z;
  memset(&z, 0, sizeof z);
  ck_assert_msg(memcmp(r, &z, sizeof z) == 0, "request not zeroed on failure");
}

/* ---- v2 decode table ---------------------------------------------------- */

#define BIN(s) s, sizeof(s) - 1

typedef struct v2_case {
  const char *json; /* ' stands for " */
  const char *bin;  /* bytes appended after the JSON */
  size_t bin_len;
  size_t zeros; /* zero bytes appended after bin */
  long hdr;     /* header_len: -1 = JSON length when bytes follow, else 0 */
  attn_status st;
  const char *msg;              /* diagnostic substring */
  const char *expect;           /* tensors (success only) */
  size_t max_elems, max_inputs; /* 0 = defaults */
} v2_case;

#define IN1(dt, shape, data)                                                  \
  "{'inputs':[{'name':'x','datatype':'" dt "','shape':" shape ",'data':" data \
  "}]}"

static const v2_case v2_cases[] = {
    /* 0-8: JSON data, every accepted type, flat and nested */
    {IN1("FP32", "[2,2]", "[1,2,3,4]"), NULL, 0, 0, -1, ATTN_OK, NULL,
     "x:FP32[2,2]=1,2,3,4", 0, 0},
    {IN1("FP32", "[2,2]", "[[1,2],[3,4]]"), NULL, 0, 0, -1, ATTN_OK, NULL,
     "x:FP32[2,2]=1,2,3,4", 0, 0},
    {IN1("FP64", "[3]", "[0.1,-2.5e-3,1e30]"), NULL, 0, 0, -1, ATTN_OK, NULL,
     "x:FP32/FP64[3]=0.1,-2.5e-3,1e30", 0, 0},
    {IN1("BOOL", "[1,3]", "[[true,false,true]]"), NULL, 0, 0, -1, ATTN_OK, NULL,
     "x:BOOL[1,3]=1,0,1", 0, 0},
    {IN1("INT32", "[2]", "[-2147483648,2147483647]"), NULL, 0, 0, -1, ATTN_OK,
     NULL, "x:INT32[2]=-2147483648,2147483647", 0, 0},
    {IN1("INT64", "[2]", "[9007199254740991,-9007199254740991]"), NULL, 0, 0,
     -1, ATTN_OK, NULL, "x:INT64[2]=9007199254740991,-9007199254740991", 0, 0},
    {IN1("FP32", "[]", "[5]"), NULL, 0, 0, -1, ATTN_OK, NULL, "x:FP32[]=5", 0,
     0},
    {IN1("FP32", "[0,3]", "[]"), NULL, 0, 0, -1, ATTN_OK, NULL,
     "x:FP32[0,3]=", 0, 0},
    {"{'id':'r1','model_name':'sdpa','parameters':{'causal':true},"
     "'inputs':[{'name':'q','datatype':'FP32','shape':[1,2],'data':[[1,2]]},"
     "{'name':'k','datatype':'FP32','shape':[2,1],'data':[[3],[4]]}],"
     "'outputs':[{'name':'attn_output'}]}",
     NULL, 0, 0, -1, ATTN_OK, NULL, "q:FP32[1,2]=1,2;k:FP32[2,1]=3,4", 0, 0},

    /* 9-17: binary extension */
    {"{'inputs':[{'name':'x','datatype':'FP32','shape':[2,2],"
     "'parameters':{'binary_data_size':16}}]}",
     BIN("\x00\x00\x80\x3f"
         "\x00\x00\x00\x40"
         "\x00\x00\x40\x40"
         "\x00\x00\x80\x40"),
     0, -1, ATTN_OK, NULL, "x:FP32[2,2]=1,2,3,4", 0, 0},
    {"{'inputs':[{'name':'x','datatype':'FP16','shape':[7],"
     "'parameters':{'binary_data_size':14}}]}",
     BIN("\x00\x3c"
         "\x00\xc0"
         "\xff\x7b"
         "\x01\x00"
         "\x00\x7c"
         "\x00\x38"
         "\x00\x80"),
     0, -1, ATTN_OK, NULL, "x:FP32/FP16[7]=1,-2,65504,0x1p-24,inf,0.5,-0", 0,
     0},
    {"{'inputs':[{'name':'x','datatype':'BF16','shape':[5],"
     "'parameters':{'binary_data_size':10}}]}",
     BIN("\x80\x3f"
         "\x49\xc0"
         "\x01\x00"
         "\x80\xff"
         "\x7f\x7f"),
     0, -1, ATTN_OK, NULL,
     "x:FP32/BF16[5]=1,-3.140625,0x1p-133,-inf,0x1.fep127", 0, 0},
    {"{'inputs':[{'name':'x','datatype':'FP64','shape':[3],"
     "'parameters':{'binary_data_size':24}}]}",
     BIN("\x00\x00\x00\x00\x00\x00\xf8\x3f"
         "\x00\x00\x00\x00\x00\x00\xd0\xbf"
         "\x00\x00\x00\x00\x00\x00\xf0\x7f"),
     0, -1, ATTN_OK, NULL, "x:FP32/FP64[3]=1.5,-0.25,inf", 0, 0},
    {"{'inputs':[{'name':'m','datatype':'BOOL','shape':[4],"
     "'parameters':{'binary_data_size':4}}]}",
     BIN("\x00\x01\x07\xff"), 0, -1, ATTN_OK, NULL, "m:BOOL[4]=0,1,1,1", 0, 0},
    {"{'inputs':[{'name':'a','datatype':'INT32','shape':[2],"
     "'parameters':{'binary_data_size':8}},{'name':'b','datatype':'INT64',"
     "'shape':[1],'parameters':{'binary_data_size':8}}]}",
     BIN("\xff\xff\xff\xff"
         "\x07\x00\x00\x00"
         "\xfe\xff\xff\xff\xff\xff\xff\xff"),
     0, -1, ATTN_OK, NULL, "a:INT32[2]=-1,7;b:INT64[1]=-2", 0, 0},
    {"{'inputs':[{'name':'j','datatype':'FP32','shape':[1],'data':[9]},"
     "{'name':'b','datatype':'FP32','shape':[1],"
     "'parameters':{'binary_data_size':4}}]}",
     BIN("\x00\x00\x80\x3f"), 0, -1, ATTN_OK, NULL, "j:FP32[1]=9;b:FP32[1]=1",
     0, 0},
    {IN1("FP32", "[1]", "[2]"), NULL, 0, 0, 66, ATTN_OK, NULL, /* hdr == len */
     "x:FP32[1]=2", 0, 0},
    {"{'inputs':[{'name':'x','datatype':'FP32','shape':[0],"
     "'parameters':{'binary_data_size':0}}]}",
     NULL, 0, 0, -2, ATTN_OK, NULL, "x:FP32[0]=", 0, 0},

    /* 18-24: syntax and top level */
    {"{'inputs':[", NULL, 0, 0, -1, ATTN_EPARSE, "malformed JSON at byte", NULL,
     0, 0},
    {IN1("FP32", "[1]", "[2]") " x", NULL, 0, 0, -1, ATTN_EPARSE,
     "unexpected bytes after the JSON value", NULL, 0, 0},
    {"[1,2]", NULL, 0, 0, -1, ATTN_EINVAL, "must be a JSON object", NULL, 0, 0},
    {"{'input':[]}", NULL, 0, 0, -1, ATTN_EINVAL,
     "unknown key 'input' (known: id, inputs, outputs, parameters, "
     "model_name, model_version)",
     NULL, 0, 0},
    {"{'id':'a'}", NULL, 0, 0, -1, ATTN_EINVAL, "missing 'inputs'", NULL, 0, 0},
    {"{'id':7,'inputs':[]}", NULL, 0, 0, -1, ATTN_EINVAL,
     "'id' must be a non-empty string", NULL, 0, 0},
    {"{'inputs':[],'inputs':[]}", NULL, 0, 0, -1, ATTN_EINVAL,
     "duplicate key 'inputs'", NULL, 0, 0},

    /* 25-35: input objects */
    {"{'inputs':[{'name':'a','datatype':'FP32','shape':[1],'data':[1]},"
     "{'name':'b','datatype':'FP32','shap':[1],'data':[1]}]}",
     NULL, 0, 0, -1, ATTN_EINVAL, "inputs[1]: unknown key 'shap'", NULL, 0, 0},
    {"{'inputs':[{'name':'a','datatype':'FP32','shape':[1],'data':[1],"
     "'parameters':{'foo':1}}]}",
     NULL, 0, 0, -1, ATTN_EINVAL, "inputs[0] 'a': unknown parameter 'foo'",
     NULL, 0, 0},
    {"{'inputs':[{'name':'a','datatype':'FP32','shape':[1],'data':[1]},"
     "{'name':'a','datatype':'FP32','shape':[1],'data':[1]}]}",
     NULL, 0, 0, -1, ATTN_EINVAL,
     "inputs[1] 'a': duplicate name (also inputs[0])", NULL, 0, 0},
    {"{'inputs':[{'datatype':'FP32','shape':[1],'data':[1]}]}", NULL, 0, 0, -1,
     ATTN_EINVAL, "inputs[0]: missing 'name'", NULL, 0, 0},
    {"{'inputs':[{'name':'a','shape':[1],'data':[1]}]}", NULL, 0, 0, -1,
     ATTN_EINVAL, "inputs[0] 'a': missing 'datatype'", NULL, 0, 0},
    {"{'inputs':[{'name':'a','datatype':'FP32','shape':[1]}]}", NULL, 0, 0, -1,
     ATTN_EINVAL, "inputs[0] 'a': missing 'data'", NULL, 0, 0},
    {IN1("UINT8", "[1]", "[1]"), NULL, 0, 0, -1, ATTN_EUNSUPPORTED,
     "unsupported datatype 'UINT8'", NULL, 0, 0},
    {IN1("FLOAT", "[1]", "[1]"), NULL, 0, 0, -1, ATTN_EINVAL,
     "unknown datatype 'FLOAT'", NULL, 0, 0},
    {IN1("FP32", "[2,-1]", "[1,2]"), NULL, 0, 0, -1, ATTN_EINVAL,
     "shape[1] must be a non-negative integer, got -1 (negative)", NULL, 0, 0},
    {IN1("FP32", "[1.5]", "[1]"), NULL, 0, 0, -1, ATTN_EINVAL,
     "shape[0] must be a non-negative integer, got 1.5 (not an integer)", NULL,
     0, 0},
    {IN1("FP32", "[4611686018427387904,4]", "[1]"), NULL, 0, 0, -1, ATTN_EINVAL,
     "shape[0] must be a non-negative integer, got 4.6116860184273879e+18 "
     "(above 2^53 - 1, the largest integer JSON carries exactly)",
     NULL, 0, 0},
    {"{'inputs':[{'name':'k','datatype':'FP32','shape':[1],"
     "'parameters':{'binary_data_size':4611686018427387904}}]}",
     NULL, 0, 4, -1, ATTN_EINVAL,
     "inputs[0] 'k': binary_data_size must be a non-negative integer (above "
     "2^53 - 1",
     NULL, 0, 0},
    {IN1("FP32", "[1,1,1,1,1,1,1,1,1]", "[1]"), NULL, 0, 0, -1, ATTN_EINVAL,
     "shape has rank 9, at most 8", NULL, 0, 0},

    /* 36-50: data */
    {"{'inputs':[{'name':'query','datatype':'FP32','shape':[2,4],"
     "'data':[1,2,3,4,5,6]}]}",
     NULL, 0, 0, -1, ATTN_EINVAL,
     "inputs[0] 'query': data has 6 elements, shape [2,4] needs 8", NULL, 0, 0},
    {IN1("FP32", "[2,4]", "[[1,2,3,4],[1,2,3]]"), NULL, 0, 0, -1, ATTN_EINVAL,
     "inputs[0] 'x': data[1] has 3 elements, shape [2,4] needs 4 at dim 1",
     NULL, 0, 0},
    {IN1("FP32", "[2,2]", "[[1,2],[3,4],[5,6]]"), NULL, 0, 0, -1, ATTN_EINVAL,
     "data has 3 elements, shape [2,2] needs 2 at dim 0", NULL, 0, 0},
    {IN1("FP32", "[2,2]", "[[1,2],3]"), NULL, 0, 0, -1, ATTN_EINVAL,
     "data[1] is a number, expected an array", NULL, 0, 0},
    {IN1("FP32", "[2]", "[[1],[2]]"), NULL, 0, 0, -1, ATTN_EINVAL,
     "data[0] is an array, expected a number (FP32)", NULL, 0, 0},
    {IN1("FP32", "[2]", "[1,[2]]"), NULL, 0, 0, -1, ATTN_EINVAL,
     "data[1] is an array, expected a number", NULL, 0, 0},
    {IN1("INT32", "[2]", "[1,1.5]"), NULL, 0, 0, -1, ATTN_EINVAL,
     "data[1] = 1.5 is not an integer (INT32)", NULL, 0, 0},
    {IN1("INT32", "[1]", "[2147483648]"), NULL, 0, 0, -1, ATTN_EINVAL,
     "outside the INT32 range", NULL, 0, 0},
    {IN1("INT64", "[1]", "[9007199254740994]"), NULL, 0, 0, -1, ATTN_EINVAL,
     "outside the INT64 range JSON can carry exactly", NULL, 0, 0},
    /* 2^53 + 1 reads as 2^53: neither is known to be what was sent */
    {IN1("INT64", "[2]", "[1,9007199254740993]"), NULL, 0, 0, -1, ATTN_EINVAL,
     "data[1] = 9007199254740992 is outside the INT64 range JSON can carry "
     "exactly (+-(2^53 - 1)); send it as binary data",
     NULL, 0, 0},
    {IN1("INT64", "[1]", "[-9007199254740992]"), NULL, 0, 0, -1, ATTN_EINVAL,
     "outside the INT64 range JSON can carry exactly", NULL, 0, 0},
    {IN1("BOOL", "[2]", "[true,1]"), NULL, 0, 0, -1, ATTN_EINVAL,
     "data[1] is a number, expected true or false (BOOL)", NULL, 0, 0},
    {IN1("FP32", "[2]", "[1,'2']"), NULL, 0, 0, -1, ATTN_EINVAL,
     "data[1] is a string, expected a number (FP32)", NULL, 0, 0},
    {IN1("FP32", "[2]", "[1,1e39]"), NULL, 0, 0, -1, ATTN_ENONFINITE,
     "data[1] = 1e+39 is outside the FP32 range", NULL, 0, 0},
    {IN1("FP64", "[1,1]", "[[-1e300]]"), NULL, 0, 0, -1, ATTN_ENONFINITE,
     "data[0][0] = -1e+300 is outside the FP32 range", NULL, 0, 0},
    /* past the first block of 8 that attn_json_f64_to_f32 checks at once */
    {IN1("FP32", "[10]", "[0,1,2,3,4,5,6,7,8,-4e38]"), NULL, 0, 0, -1,
     ATTN_ENONFINITE, "data[9] = -4e+38 is outside the FP32 range", NULL, 0, 0},
    {IN1("FP16", "[1]", "[1]"), NULL, 0, 0, -1, ATTN_EUNSUPPORTED,
     "FP16 data cannot be sent as JSON numbers; use the binary tensor data "
     "extension",
     NULL, 0, 0},
    {IN1("BF16", "[1]", "[1]"), NULL, 0, 0, -1, ATTN_EUNSUPPORTED,
     "BF16 data cannot be sent as JSON", NULL, 0, 0},

    /* 51-53: limits */
    {IN1("FP32", "[1099511627776,1099511627776]", "[]"), NULL, 0, 0, -1,
     ATTN_ETOOBIG,
     "inputs[0] 'x': shape [1099511627776,1099511627776] has too "
     "many elements (overflow)",
     NULL, 0, 0},
    {IN1("FP32", "[4096,4097]", "[]"), NULL, 0, 0, -1, ATTN_ETOOBIG,
     "shape [4096,4097] has 16781312 elements, above the limit of 16777216",
     NULL, 0, 0},
    {"{'inputs':[{'name':'a','datatype':'FP32','shape':[1],'data':[1]},"
     "{'name':'b','datatype':'FP32','shape':[1],'data':[1]}]}",
     NULL, 0, 0, -1, ATTN_ETOOBIG, "inputs: 2 tensors, above the limit of 1",
     NULL, 0, 1},

    /* 54-62: binary layout errors */
    {"{'inputs':[{'name':'q','datatype':'FP32','shape':[1],'data':[1]},"
     "{'name':'k','datatype':'FP32','shape':[1],'data':[1]},"
     "{'name':'value','datatype':'FP32','shape':[2,8],"
     "'parameters':{'binary_data_size':100}}]}",
     NULL, 0, 100, -1, ATTN_EINVAL,
     "inputs[2] 'value': binary_data_size 100 != 4*2*8 = 64 (FP32 [2,8])", NULL,
     0, 0},
    {"{'inputs':[{'name':'k','datatype':'FP32','shape':[4],"
     "'parameters':{'binary_data_size':16}}]}",
     NULL, 0, 8, -1, ATTN_EINVAL,
     "inputs[0] 'k': binary data of 16 bytes at offset", NULL, 0, 0},
    {"{'inputs':[{'name':'k','datatype':'FP32','shape':[2],"
     "'parameters':{'binary_data_size':8}}]}",
     NULL, 0, 12, -1, ATTN_EINVAL,
     "inputs[0] 'k': 4 trailing bytes after this input's binary data", NULL, 0,
     0},
    {IN1("FP32", "[1]", "[2]"), NULL, 0, 5, -1, ATTN_EINVAL,
     "5 bytes follow the 66-byte JSON header but no input has", NULL, 0, 0},
    {IN1("FP32", "[1]", "[2]"), NULL, 0, 0, 67, ATTN_EINVAL,
     "Inference-Header-Content-Length 67 is larger than the body (66 bytes)",
     NULL, 0, 0},
    {IN1("FP32", "[1]", "[2]"), NULL, 0, 0, 40, ATTN_EPARSE, "malformed JSON",
     NULL, 0, 0},
    {"{'inputs':[{'name':'k','datatype':'FP32','shape':[1],"
     "'parameters':{'binary_data_size':4}}]}",
     NULL, 0, 0, 0, ATTN_EINVAL,
     "binary_data_size given but the request has no "
     "Inference-Header-Content-Length",
     NULL, 0, 0},
    {"{'inputs':[{'name':'k','datatype':'FP32','shape':[1],"
     "'parameters':{'binary_data_size':4}}]}",
     NULL, 0, 4, 0, ATTN_EPARSE,
     "unexpected bytes after the JSON value at byte 91 (binary tensor data "
     "needs the Inference-Header-Content-Length header)",
     NULL, 0, 0},
    {"{'inputs':[{'name':'k','datatype':'FP32','shape':[1],'data':[1],"
     "'parameters':{'binary_data_size':4}}]}",
     NULL, 0, 4, -1, ATTN_EINVAL, "both 'data' and binary_data_size", NULL, 0,
     0},
    {"{'inputs':[{'name':'k','datatype':'FP32','shape':[1],"
     "'parameters':{'binary_data_size':-4}}]}",
     NULL, 0, 4, -1, ATTN_EINVAL, "binary_data_size must be a non-negative",
     NULL, 0, 0},

    /* 63-69: outputs and parameters */
    {"{'inputs':[],'outputs':[{'nam':'o'}]}", NULL, 0, 0, -1, ATTN_EINVAL,
     "outputs[0]: unknown key 'nam'", NULL, 0, 0},
    {"{'inputs':[],'outputs':[{'name':'o','parameters':{'classification':2}}]}",
     NULL, 0, 0, -1, ATTN_EINVAL,
     "outputs[0] 'o': unknown parameter 'classification'", NULL, 0, 0},
    {"{'inputs':[],'outputs':[{'name':'o','parameters':{'binary_data':1}}]}",
     NULL, 0, 0, -1, ATTN_EINVAL, "'binary_data' must be a boolean", NULL, 0,
     0},
    {"{'inputs':[],'outputs':[{'name':'o'},{'name':'o'}]}", NULL, 0, 0, -1,
     ATTN_EINVAL, "outputs[1] 'o': duplicate name", NULL, 0, 0},
    {"{'inputs':[],'parameters':{'binary_data_output':'yes'}}", NULL, 0, 0, -1,
     ATTN_EINVAL, "'binary_data_output' must be a boolean", NULL, 0, 0},
    {"{'inputs':[],'parameters':{'timeout':-1}}", NULL, 0, 0, -1, ATTN_EINVAL,
     "'timeout' must be a non-negative integer", NULL, 0, 0},
    {"{'inputs':[],'parameters':{'x':[1]}}", NULL, 0, 0, -1, ATTN_EINVAL,
     "parameters: 'x' must be a string, number or boolean, got an array", NULL,
     0, 0},
};

static void run_v2_case(const v2_case *c, size_t idx) {
  char ctx[32];
  char *json = unquote(c->json);
  size_t jl = strlen(json), len = jl + c->bin_len + c->zeros;
  char *body = calloc(len + 1, 1);
  attn_infer_request r;
  attn_diag d = {{0}};
  attn_codec_limits lim;
  snprintf(ctx, sizeof ctx, "v2 case %zu", idx);
  memcpy(body, json, jl);
  if (c->bin_len) memcpy(body + jl, c->bin, c->bin_len);
  size_t hdr = c->hdr == -2               ? jl
               : c->hdr >= 0              ? (size_t)c->hdr
               : (c->bin_len || c->zeros) ? jl
                                          : 0;
  attn_codec_limits_default(&lim);
  if (c->max_elems) lim.max_tensor_elements = c->max_elems;
  if (c->max_inputs) lim.max_inputs = c->max_inputs;
  attn_status s = attn_v2_decode(body, len, hdr, &lim, &r, &d);
  ck_assert_msg(s == c->st, "%s: status %s (%s), expected %s", ctx,
                attn_status_name(s), d.msg, attn_status_name(c->st));
  if (c->msg)
    ck_assert_msg(strstr(d.msg, c->msg) != NULL, "%s: message '%s' lacks '%s'",
                  ctx, d.msg, c->msg);
  if (s == ATTN_OK) {
    if (c->expect) check_tensors(&r, c->expect, ctx);
  } else {
    check_zeroed(&r);
  }
  attn_infer_request_free(&r);
  free(body);
  free(json);
}

START_TEST(v2_decode_table) {
  run_v2_case(&v2_cases[_i], (size_t)_i);
}
END_TEST

/* ---- v1 decode table ---------------------------------------------------- */

typedef struct v1_case {
  const char *json;
  attn_status st;
  const char *msg;
  const char *model;  /* expected out->model */
  const char *expect; /* tensors */
  const char *params; /* "name=b1,name=d0.5,name=i2" (all of them) */
  int sliced;
  int64_t B, H;
  size_t max_elems;
} v1_case;

static const v1_case v1_cases[] = {
    /* 0-11: accepted requests and their mapping */
    {"{'query':[[1,2],[3,4]]}", ATTN_OK, NULL, "sdpa",
     "query:FP32[1,2,2]=1,2,3,4;key:FP32[1,2,2]=1,2,3,4;"
     "value:FP32[1,2,2]=1,2,3,4",
     "need_weights=b1,average_attn_weights=b0", 1, 0, 1, 0},
    {"{'query':[[1,2,3,4],[5,6,7,8]],'num_heads':2}", ATTN_OK, NULL, "sdpa",
     "query:FP32[2,2,2]=1,2,5,6,3,4,7,8;key:FP32[2,2,2]=1,2,5,6,3,4,7,8;"
     "value:FP32[2,2,2]=1,2,5,6,3,4,7,8",
     "need_weights=b1,average_attn_weights=b0", 1, 0, 2, 0},
    {"{'query':[[[1,2],[3,4]],[[5,6],[7,8]]],'num_heads':2}", ATTN_OK, NULL,
     "sdpa",
     "query:FP32[2,2,2,1]=1,3,2,4,5,7,6,8;key:FP32[2,2,2,1]=1,3,2,4,5,7,6,8;"
     "value:FP32[2,2,2,1]=1,3,2,4,5,7,6,8",
     "need_weights=b1,average_attn_weights=b0", 1, 2, 2, 0},
    {"{'query':[[1,2]],'key':[[3,4],[5,6]],'num_heads':2}", ATTN_OK, NULL,
     "sdpa",
     "query:FP32[2,1,1]=1,2;key:FP32[2,2,1]=3,5,4,6;value:FP32[2,2,1]=3,5,4,6",
     "need_weights=b1,average_attn_weights=b0", 1, 0, 2, 0},
    {"{'query':[[1,2]],'key':[[3,4]],'value':[[1,2,3,4,5,6]],'num_heads':2,"
     "'causal':true,'scale':0.5,'need_weights':false,"
     "'average_attn_weights':true}",
     ATTN_OK, NULL, "sdpa",
     "query:FP32[2,1,1]=1,2;key:FP32[2,1,1]=3,4;value:FP32[2,1,3]=1,2,3,4,5,6",
     "causal=b1,scale=d0.5,need_weights=b0,average_attn_weights=b1", 1, 0, 2,
     0},
    {"{'query':[[1,2]],'key':[[3,4],[5,6]],'attn_mask':[[true,false]],"
     "'key_padding_mask':[false,true]}",
     ATTN_OK, NULL, "sdpa",
     "query:FP32[1,1,2]=1,2;key:FP32[1,2,2]=3,4,5,6;value:FP32[1,2,2]=3,4,5,6;"
     "attn_mask:BOOL[1,2]=1,0;key_padding_mask:BOOL[1,2]=0,1",
     "need_weights=b1,average_attn_weights=b0", 1, 0, 1, 0},
    {"{'query':[[[1,2]]],'attn_mask':[[[[0,-1e30]]]],"
     "'key_padding_mask':[[true]]}",
     ATTN_OK, NULL, "sdpa",
     "query:FP32[1,1,1,2]=1,2;key:FP32[1,1,1,2]=1,2;value:FP32[1,1,1,2]=1,2;"
     "attn_mask:FP32[1,1,1,2]=0,-1e30;key_padding_mask:BOOL[1,1]=1",
     "need_weights=b1,average_attn_weights=b0", 1, 1, 1, 0},
    {"{'query':[[1,2]],'num_heads':2,'weights':{'w_q':[[1,0],[0,1]],"
     "'w_k':[[1,0],[0,1]],'w_v':[[1,0],[0,1]],'w_o':[[1,0],[0,1]],"
     "'b_o':[0.5,0.25]}}",
     ATTN_OK, NULL, "mha",
     "query:FP32[1,2]=1,2;w_q:FP32[2,2]=1,0,0,1;w_k:FP32[2,2]=1,0,0,1;"
     "w_v:FP32[2,2]=1,0,0,1;w_o:FP32[2,2]=1,0,0,1;b_o:FP32[2]=0.5,0.25",
     "num_heads=i2,need_weights=b1,average_attn_weights=b0", 0, 0, 2, 0},
    {"{'query':[[[1,2]]],'key':[[[3,4]]],'weights':{'w_q':[[1]],"
     "'w_k':[[1]],'w_v':[[1]],'w_o':[[1]]},'causal':false}",
     ATTN_OK, NULL, "mha",
     "query:FP32[1,1,2]=1,2;key:FP32[1,1,2]=3,4;w_q:FP32[1,1]=1;"
     "w_k:FP32[1,1]=1;w_v:FP32[1,1]=1;w_o:FP32[1,1]=1",
     "num_heads=i1,causal=b0,need_weights=b1,average_attn_weights=b0", 0, 1, 1,
     0},
    {"{'model':'tiny','query':[[1,2,3]],'num_heads':3}", ATTN_OK, NULL, "tiny",
     "query:FP32[1,3]=1,2,3",
     "num_heads=i3,need_weights=b1,average_attn_weights=b0", 0, 0, 3, 0},
    {"{'model':'tiny','query':[[1]],'tokens':['a'],'key_tokens':[[2]]}",
     ATTN_OK, NULL, "tiny", "query:FP32[1,1]=1",
     "need_weights=b1,average_attn_weights=b0", 0, 0, 1, 0},
    {"{'query':[[]]}", ATTN_OK, NULL, "sdpa",
     "query:FP32[1,1,0]=;key:FP32[1,1,0]=;value:FP32[1,1,0]=",
     "need_weights=b1,average_attn_weights=b0", 1, 0, 1, 0},

    /* 12-19: field names */
    {"{'query':[[1]],'causl':true}", ATTN_EINVAL,
     "unknown field 'causl' (did you mean 'causal'?)", NULL, NULL, NULL, 0, 0,
     0, 0},
    {"{'query':[[1]],'need_weight':true}", ATTN_EINVAL,
     "unknown field 'need_weight' (did you mean 'need_weights'?)", NULL, NULL,
     NULL, 0, 0, 0, 0},
    {"{'query':[[1]],'banana':1}", ATTN_EINVAL, "unknown field 'banana'", NULL,
     NULL, NULL, 0, 0, 0, 0},
    {"{'query':[[1]],'query':[[1]]}", ATTN_EINVAL, "duplicate field 'query'",
     NULL, NULL, NULL, 0, 0, 0, 0},
    {"{'key':[[1]]}", ATTN_EINVAL, "missing 'query'", NULL, NULL, NULL, 0, 0, 0,
     0},
    {"{'query':[[1]],'value':[[1]]}", ATTN_EINVAL,
     "'value' given without 'key'", NULL, NULL, NULL, 0, 0, 0, 0},
    {"[]", ATTN_EINVAL, "request must be a JSON object", NULL, NULL, NULL, 0, 0,
     0, 0},
    {"{'query':[[1]]", ATTN_EPARSE, "malformed JSON", NULL, NULL, NULL, 0, 0, 0,
     0},

    /* 20-29: nested arrays */
    {"{'query':[[1,2],[3,4],[5]]}", ATTN_EINVAL,
     "query[2]: row has 1 numbers, expected 2", NULL, NULL, NULL, 0, 0, 0, 0},
    {"{'query':[[[1,2]],[[1,2],[3,4]]]}", ATTN_EINVAL,
     "query[1]: has 2 arrays, expected 1", NULL, NULL, NULL, 0, 0, 0, 0},
    {"{'query':[[1,2],3]}", ATTN_EINVAL,
     "query[1]: expected an array of 2, got a number", NULL, NULL, NULL, 0, 0,
     0, 0},
    {"{'query':[[1,[2]]]}", ATTN_EINVAL,
     "query[0][1]: expected a number, got an array", NULL, NULL, NULL, 0, 0, 0,
     0},
    {"{'query':[['a']]}", ATTN_EINVAL,
     "query[0][0]: expected a number, got a "
     "string",
     NULL, NULL, NULL, 0, 0, 0, 0},
    {"{'query':[[1,1e39]]}", ATTN_ENONFINITE,
     "query[0][1]: 1e+39 is outside the FP32 range", NULL, NULL, NULL, 0, 0, 0,
     0},
    {"{'query':[[1,2,3,4,5,6,7,8,9,10,11],[1,2,3,4,5,6,7,8,9,10,1e39]]}",
     ATTN_ENONFINITE, "query[1][10]: 1e+39 is outside the FP32 range", NULL,
     NULL, NULL, 0, 0, 0, 0},
    {"{'query':[[[[[[[[[1]]]]]]]]]}", ATTN_EINVAL,
     "query: nested deeper than 8 levels", NULL, NULL, NULL, 0, 0, 0, 0},
    {"{'query':[[1,2,3],[4,5,6]]}", ATTN_ETOOBIG,
     "query: shape [2,3] has 6 elements, above the limit of 4", NULL, NULL,
     NULL, 0, 0, 0, 4},
    {"{'query':[[1]],'attn_mask':[[true,0]]}", ATTN_EINVAL,
     "attn_mask[0][1]: expected true or false (like the first element), got a "
     "number",
     NULL, NULL, NULL, 0, 0, 0, 0},
    {"{'query':[[1]],'key_padding_mask':[1]}", ATTN_EINVAL,
     "key_padding_mask[0]: expected true or false, got a number", NULL, NULL,
     NULL, 0, 0, 0, 0},

    /* 30-53: shapes, types, combinations and labels */
    {"{'query':[1,2]}", ATTN_EINVAL,
     "'query' must be [Lq,D] or [B,Lq,D], got shape [2]", NULL, NULL, NULL, 0,
     0, 0, 0},
    {"{'query':5}", ATTN_EINVAL, "'query' must be a nested array of numbers",
     NULL, NULL, NULL, 0, 0, 0, 0},
    {"{'query':[[1]],'key':[[[1]]]}", ATTN_EINVAL,
     "'key' must be [L,D] like 'query', got shape [1,1,1]", NULL, NULL, NULL, 0,
     0, 0, 0},
    {"{'query':[[1,2,3]],'num_heads':2}", ATTN_EINVAL,
     "'query': last dimension 3 is not divisible by num_heads 2", NULL, NULL,
     NULL, 0, 0, 0, 0},
    {"{'query':[[1,2]],'key':[[1,2,3]],'num_heads':2}", ATTN_EINVAL,
     "'key': last dimension 3 is not divisible by num_heads 2", NULL, NULL,
     NULL, 0, 0, 0, 0},
    {"{'query':[[1]],'num_heads':0}", ATTN_EINVAL,
     "'num_heads' must be an integer in 1..65536, got 0", NULL, NULL, NULL, 0,
     0, 0, 0},
    {"{'query':[[1]],'num_heads':1.5}", ATTN_EINVAL,
     "'num_heads' must be an integer in 1..65536, got 1.5", NULL, NULL, NULL, 0,
     0, 0, 0},
    {"{'query':[[1]],'num_heads':1e30}", ATTN_EINVAL,
     "'num_heads' must be an integer in 1..65536, got 1e+30", NULL, NULL, NULL,
     0, 0, 0, 0},
    {"{'query':[[1]],'num_heads':'2'}", ATTN_EINVAL,
     "'num_heads' must be an integer in 1..65536, got a string", NULL, NULL,
     NULL, 0, 0, 0, 0},
    {"{'query':[[1]],'causal':1}", ATTN_EINVAL,
     "'causal' must be true or false, got a number", NULL, NULL, NULL, 0, 0, 0,
     0},
    {"{'query':[[1]],'scale':'0.5'}", ATTN_EINVAL,
     "'scale' must be a finite number, got a string", NULL, NULL, NULL, 0, 0, 0,
     0},
    {"{'query':[[1]],'model':'tiny','weights':{}}", ATTN_EINVAL,
     "give either 'model' (a resident model) or 'weights', not both", NULL,
     NULL, NULL, 0, 0, 0, 0},
    {"{'query':[[1]],'model':'sdpa'}", ATTN_EINVAL,
     "'model': 'sdpa' is chosen automatically", NULL, NULL, NULL, 0, 0, 0, 0},
    {"{'query':[[1]],'weights':{'w_g':[[1]]}}", ATTN_EINVAL,
     "weights: unknown field 'w_g' (did you mean 'w_q'?)", NULL, NULL, NULL, 0,
     0, 0, 0},
    {"{'query':[[1]],'weights':{'w_q':[[1]],'w_k':[[1]],'w_v':[[1]]}}",
     ATTN_EINVAL, "weights: missing 'w_o'", NULL, NULL, NULL, 0, 0, 0, 0},
    {"{'query':[[1]],'weights':{'w_q':[1],'w_k':[[1]],'w_v':[[1]],"
     "'w_o':[[1]]}}",
     ATTN_EINVAL, "'weights.w_q' must be [in,out], got shape [1]", NULL, NULL,
     NULL, 0, 0, 0, 0},
    {"{'query':[[1]],'attn_mask':[[[true]]]}", ATTN_EINVAL,
     "'attn_mask' must be [Lq,Lk] or [B,H,Lq,Lk], got shape [1,1,1]", NULL,
     NULL, NULL, 0, 0, 0, 0},
    {"{'query':[[1]],'tokens':'abc'}", ATTN_EINVAL,
     "'tokens' must be an array, got a string", NULL, NULL, NULL, 0, 0, 0, 0},
    {"{'query':[[1],[2]],'tokens':['a']}", ATTN_EINVAL,
     "'tokens' has 1 label, but 'query' has 2 positions", NULL, NULL, NULL, 0,
     0, 0, 0},
    {"{'query':[[1],[2]],'key':[[1],[2],[3]],'tokens':['a','b'],"
     "'key_tokens':['a','b']}",
     ATTN_EINVAL, "'key_tokens' has 2 labels, but 'key' has 3 positions", NULL,
     NULL, NULL, 0, 0, 0, 0},
    {"{'query':[[1]],'key_tokens':[]}", ATTN_EINVAL,
     "'key_tokens' has 0 labels, but 'query' has 1 position", NULL, NULL, NULL,
     0, 0, 0, 0},
    {"{'query':[[[1],[2]],[[3],[4]],[[5],[6]]],'tokens':['a','b','c','d']}",
     ATTN_EINVAL,
     "'tokens' has 4 entries, but 'query' is 3 batches of 2 positions: give 2 "
     "labels, or 3 lists of them",
     NULL, NULL, NULL, 0, 0, 0, 0},
    {"{'query':[[[1],[2]],[[3],[4]],[[5],[6]]],"
     "'tokens':[['a','b'],['c'],['d','e']]}",
     ATTN_EINVAL, "'tokens'[1] has 1 label, but 'query' has 2 positions", NULL,
     NULL, NULL, 0, 0, 0, 0},
    {"{'query':[[[1],[2]],[[3],[4]],[[5],[6]]],'tokens':[['a','b'],'c','d']}",
     ATTN_EINVAL,
     "'tokens'[1] must be an array of the labels of batch 1 of 'query', got a "
     "string",
     NULL, NULL, NULL, 0, 0, 0, 0},
    {"{'query':[[1]],'model':''}", ATTN_EINVAL, "'model' must be a model name",
     NULL, NULL, NULL, 0, 0, 0, 0},
    {"{'query':[[1]],'weights':[1]}", ATTN_EINVAL,
     "'weights' must be an object, got an array", NULL, NULL, NULL, 0, 0, 0, 0},
};

static void check_params(const attn_infer_request *r, const char *spec,
                         const char *ctx) {
  size_t n = 0;
  const char *p = spec;
  while (*p) {
    char name[64];
    size_t k = 0;
    while (*p != '=') name[k++] = *p++;
    name[k] = '\0';
    p++;
    char type = *p++;
    char *e;
    const attn_param *pa = attn_infer_find_param(r, name);
    ck_assert_msg(pa != NULL, "%s: no param '%s'", ctx, name);
    n++;
    switch (type) {
      case 'b':
        ck_assert_msg(pa->type == ATTN_PARAM_BOOL, "%s: %s not BOOL", ctx,
                      name);
        ck_assert_int_eq(pa->b, strtol(p, &e, 10));
        break;
      case 'i':
        ck_assert_msg(pa->type == ATTN_PARAM_INT, "%s: %s not INT", ctx, name);
        ck_assert_int_eq(pa->i, strtoll(p, &e, 10));
        break;
      case 's': /* up to the next comma */
        ck_assert_msg(pa->type == ATTN_PARAM_STRING, "%s: %s not STRING", ctx,
                      name);
        e = (char *)p + strcspn(p, ",");
        ck_assert_int_eq(strlen(pa->s), (size_t)(e - p));
        ck_assert(strncmp(pa->s, p, (size_t)(e - p)) == 0);
        break;
      default:
        ck_assert_msg(pa->type == ATTN_PARAM_DOUBLE, "%s: %s not DOUBLE", ctx,
                      name);
        ck_assert(pa->d == strtod(p, &e));
        break;
    }
    p = e;
    if (*p == ',') p++;
  }
  ck_assert_msg(n == r->n_params, "%s: %zu params, %zu expected", ctx,
                r->n_params, n);
}

static void run_v1_case(const v1_case *c, size_t idx) {
  char ctx[32];
  char *json = unquote(c->json);
  attn_infer_request r;
  attn_v1_info info;
  attn_diag d = {{0}};
  attn_codec_limits lim;
  snprintf(ctx, sizeof ctx, "v1 case %zu", idx);
  attn_codec_limits_default(&lim);
  if (c->max_elems) lim.max_tensor_elements = c->max_elems;
  memset(&info, 0xAB, sizeof info);
  attn_status s = attn_v1_decode(json, strlen(json), &lim, &r, &info, &d);
  ck_assert_msg(s == c->st, "%s: status %s (%s), expected %s", ctx,
                attn_status_name(s), d.msg, attn_status_name(c->st));
  if (c->msg)
    ck_assert_msg(strstr(d.msg, c->msg) != NULL, "%s: message '%s' lacks '%s'",
                  ctx, d.msg, c->msg);
  if (s == ATTN_OK) {
    ck_assert_str_eq(r.model, c->model);
    check_tensors(&r, c->expect, ctx);
    check_params(&r, c->params, ctx);
    ck_assert_int_eq(info.heads_sliced, c->sliced);
    ck_assert_int_eq(info.B_given, c->B);
    ck_assert_int_eq(info.H, c->H);
  } else {
    check_zeroed(&r);
    ck_assert_int_eq(info.heads_sliced, 0);
  }
  attn_infer_request_free(&r);
  free(json);
}

START_TEST(v1_decode_table) {
  run_v1_case(&v1_cases[_i], (size_t)_i);
}
END_TEST

/* ---- targeted decoder tests --------------------------------------------- */

/* Self-attention: key is the query and value the key, as views of one
 * buffer (no copies), which the request frees once. */
START_TEST(v1_self_attention_views) {
  char *json = unquote("{'query':[[1,2],[3,4],[5,6]]}");
  attn_infer_request r;
  attn_diag d = {{0}};
  ck_assert_int_eq(attn_v1_decode(json, strlen(json), NULL, &r, NULL, &d),
                   ATTN_OK);
  ck_assert_int_eq(r.n_inputs, 3);
  const attn_tensor *q = &attn_infer_find_input(&r, "query")->tensor;
  const attn_tensor *k = &attn_infer_find_input(&r, "key")->tensor;
  const attn_tensor *v = &attn_infer_find_input(&r, "value")->tensor;
  ck_assert(q->owns && !k->owns && !v->owns);
  ck_assert_ptr_eq(k->data, q->data);
  ck_assert_ptr_eq(v->data, q->data);
  ck_assert_int_eq(k->rank, q->rank);
  ck_assert_int_eq(k->shape[k->rank - 1], 2);
  ck_assert(((const float *)v->data)[5] == 6.0f);
  attn_infer_request_free(&r);
  free(json);

  /* a key of its own: value is a view of it; two heads cut copies */
  json = unquote("{'query':[[1,2]],'key':[[7,8],[9,10]],'num_heads':2}");
  ck_assert_int_eq(attn_v1_decode(json, strlen(json), NULL, &r, NULL, &d),
                   ATTN_OK);
  q = &attn_infer_find_input(&r, "query")->tensor;
  k = &attn_infer_find_input(&r, "key")->tensor;
  v = &attn_infer_find_input(&r, "value")->tensor;
  ck_assert(q->owns && k->owns && !v->owns);
  ck_assert_ptr_ne(k->data, q->data);
  ck_assert_ptr_eq(v->data, k->data);
  /* [H=2, Lk=2, 1]: head 1 holds the second column */
  ck_assert(((const float *)v->data)[2] == 8.0f);
  attn_infer_request_free(&r);
  free(json);
}
END_TEST

START_TEST(v2_request_fields) {
  char *json = unquote(
      "{'id':'req-7','parameters':{'binary_data_output':true,'priority':3,"
      "'timeout':1500,'causal':true,'scale':0.125,'num_heads':4,"
      "'note':'hi'},'inputs':[],'outputs':[{'name':'attn_output',"
      "'parameters':{'binary_data':false}},{'name':'attn_weights'}]}");
  attn_infer_request r;
  attn_diag d;
  ck_assert_int_eq(attn_v2_decode(json, strlen(json), 0, NULL, &r, &d),
                   ATTN_OK);
  ck_assert_str_eq(r.id, "req-7");
  ck_assert_ptr_null(r.model);
  ck_assert_int_eq(r.binary_data_output, 1);
  ck_assert_int_eq(r.priority, 3);
  ck_assert_int_eq(r.timeout_us, 1500);
  check_params(&r, "causal=b1,scale=d0.125,num_heads=i4,note=shi", "v2 params");
  ck_assert(attn_infer_find_param(&r, "num_heads")->d == 4.0);
  ck_assert(r.outputs_given);
  ck_assert_int_eq(r.n_outputs, 2);
  ck_assert_str_eq(r.outputs[0].name, "attn_output");
  ck_assert_int_eq(r.outputs[0].binary, 0);
  ck_assert_int_eq(r.outputs[1].binary, -1);
  attn_infer_request_free(&r);
  free(json);

  /* defaults, an empty outputs list, model_name/model_version kept */
  json = unquote(
      "{'model_name':'m','model_version':'2','inputs':[],"
      "'outputs':[]}");
  ck_assert_int_eq(attn_v2_decode(json, strlen(json), 0, NULL, &r, &d),
                   ATTN_OK);
  ck_assert_str_eq(r.model, "m");
  ck_assert_str_eq(r.version, "2");
  ck_assert(!r.outputs_given);
  ck_assert_int_eq(r.binary_data_output, -1);
  ck_assert_int_eq(r.timeout_us, -1);
  ck_assert_int_eq(r.priority, 0);
  ck_assert_ptr_null(r.id);
  attn_infer_request_free(&r);
  free(json);
}
END_TEST

static bool same_tensor(const attn_tensor *a, const attn_tensor *b) {
  size_t n;
  if (a->dtype != b->dtype || a->rank != b->rank ||
      memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->rank) != 0)
    return false;
  attn_shape_numel(a->rank, a->shape, &n);
  return memcmp(a->data, b->data, n * attn_dtype_size(a->dtype)) == 0;
}

/* The same random tensors sent as JSON and as binary decode identically. */
START_TEST(v2_binary_equals_json) {
  enum { N = 97 };
  float f[N];
  int32_t iv[N];
  uint32_t seed = 12345;
  attn_buf js, bj;
  attn_buf_init(&js, 0);
  attn_buf_init(&bj, 0);
  for (int i = 0; i < N; i++) {
    uint32_t u;
    do {
      seed = seed * 1664525u + 1013904223u;
      u = seed;
      memcpy(&f[i], &u, 4);
    } while (!isfinite(f[i]));
    iv[i] = (int32_t)(seed >> 3) - (1 << 28);
  }
  attn_buf_puts(&js,
                "{\"inputs\":[{\"name\":\"f\",\"datatype\":\"FP32\","
                "\"shape\":[97],\"data\":[");
  for (int i = 0; i < N; i++) {
    if (i) attn_buf_puts(&js, ",");
    attn_f32_append(&js, f[i]);
  }
  attn_buf_puts(&js,
                "]},{\"name\":\"i\",\"datatype\":\"INT32\",\"shape\":[97],"
                "\"data\":[");
  for (int i = 0; i < N; i++) attn_buf_printf(&js, i ? ",%d" : "%d", iv[i]);
  attn_buf_puts(&js, "]}]}");
  attn_buf_puts(&bj,
                "{\"inputs\":[{\"name\":\"f\",\"datatype\":\"FP32\","
                "\"shape\":[97],\"parameters\":{\"binary_data_size\":388}},"
                "{\"name\":\"i\",\"datatype\":\"INT32\",\"shape\":[97],"
                "\"parameters\":{\"binary_data_size\":388}}]}");
  size_t hl = bj.len;
  attn_buf_append(&bj, f, sizeof f); /* the test host is little-endian */
  attn_buf_append(&bj, iv, sizeof iv);
  attn_infer_request a, b;
  attn_diag d;
  ck_assert_int_eq(attn_v2_decode(js.data, js.len, 0, NULL, &a, &d), ATTN_OK);
  ck_assert_int_eq(a.n_inputs, 2);
  /* The binary body at every alignment: an aligned blob is used in place
   * (the tensor points into the body), a misaligned one is copied; the
   * values are the JSON path's either way. */
  char *mem = malloc(bj.len + 8);
  ck_assert_ptr_nonnull(mem);
  for (size_t off = 0; off < 8; off++) {
    char *body = mem + off;
    memcpy(body, bj.data, bj.len);
    ck_assert_int_eq(attn_v2_decode(body, bj.len, hl, NULL, &b, &d), ATTN_OK);
    ck_assert_int_eq(b.n_inputs, 2);
    for (int k = 0; k < 2; k++) {
      const attn_tensor *t = &b.inputs[k].tensor;
      const char *blob = body + hl + (size_t)k * sizeof f;
      ck_assert_str_eq(a.inputs[k].name, b.inputs[k].name);
      ck_assert_msg(same_tensor(&a.inputs[k].tensor, t),
                    "input %d differs between JSON and binary (offset %zu)",
                    k, off);
      ck_assert_int_eq(t->owns, (uintptr_t)blob % 4 != 0);
      if (!t->owns) ck_assert_ptr_eq(t->data, blob);
    }
    attn_infer_request_free(&b);
  }
  free(mem);
  attn_infer_request_free(&a);
  attn_buf_free(&js);
  attn_buf_free(&bj);
}
END_TEST

/* The exact message from the contract, on a realistic size. */
START_TEST(v1_ragged_message) {
  attn_buf b;
  attn_buf_init(&b, 0);
  attn_buf_puts(&b, "{\"query\":[");
  for (int r = 0; r < 5; r++) {
    attn_buf_puts(&b, r ? ",[" : "[");
    for (int c = 0; c < (r == 3 ? 63 : 64); c++)
      attn_buf_puts(&b, c ? ",0.5" : "0.5");
    attn_buf_puts(&b, "]");
  }
  attn_buf_puts(&b, "]}");
  attn_infer_request r;
  attn_diag d;
  ck_assert_int_eq(attn_v1_decode(b.data, b.len, NULL, &r, NULL, &d),
                   ATTN_EINVAL);
  ck_assert_str_eq(d.msg, "query[3]: row has 63 numbers, expected 64");
  attn_buf_free(&b);
}
END_TEST

START_TEST(v1_echo_tokens) {
  char *json = unquote(
      "{'query':[[1],[2]],'tokens':['a','b\\u00e9'],"
      "'key_tokens':[1,[2,null]]}");
  attn_infer_request r;
  attn_diag d;
  ck_assert_int_eq(attn_v1_decode(json, strlen(json), NULL, &r, NULL, &d),
                   ATTN_OK);
  ck_assert_int_eq(r.n_echo, 2);
  ck_assert_str_eq(r.echo[0].name, "tokens");
  ck_assert_str_eq(r.echo[0].json, "[\"a\",\"b\xc3\xa9\"]");
  ck_assert_str_eq(r.echo[1].name, "key_tokens");
  ck_assert_str_eq(r.echo[1].json, "[1,[2,null]]");
  attn_infer_request_free(&r);
  free(json);
}
END_TEST

static char *deep_json(int levels, bool v1) {
  attn_buf b;
  attn_buf_init(&b, 0);
  attn_buf_puts(&b, v1 ? "{\"query\":"
                       : "{\"inputs\":[{\"name\":\"x\","
                         "\"datatype\":\"FP32\",\"shape\":[1],"
                         "\"data\":");
  for (int i = 0; i < levels; i++) attn_buf_puts(&b, "[");
  attn_buf_puts(&b, "1");
  for (int i = 0; i < levels; i++) attn_buf_puts(&b, "]");
  attn_buf_puts(&b, v1 ? "}" : "}]}");
  return attn_buf_steal(&b, NULL);
}

START_TEST(depth_limit) {
  attn_infer_request r;
  attn_diag d;
  char *j = deep_json(200, false);
  ck_assert_int_eq(attn_v2_decode(j, strlen(j), 0, NULL, &r, &d), ATTN_EINVAL);
  ck_assert_ptr_nonnull(strstr(d.msg, "JSON nested deeper than 64 levels"));
  free(j);
  j = deep_json(100000, true); /* would exhaust cJSON's own limit */
  ck_assert_int_eq(attn_v1_decode(j, strlen(j), NULL, &r, NULL, &d),
                   ATTN_EINVAL);
  free(j);
  /* brackets inside strings do not count */
  j = unquote(
      "{'query':[[1]],'tokens':['[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
      "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\\'[[[[']}");
  attn_codec_limits lim = {0, 0, 4};
  ck_assert_int_eq(attn_v1_decode(j, strlen(j), &lim, &r, NULL, &d), ATTN_OK);
  attn_infer_request_free(&r);
  free(j);
}
END_TEST

/* ---- encoders ----------------------------------------------------------- */

static float rand_f32(uint32_t *seed) {
  float f;
  do {
    *seed = *seed * 1664525u + 1013904223u;
    uint32_t u = *seed ^ (*seed >> 7) * 2654435761u;
    memcpy(&f, &u, 4);
  } while (!isfinite(f));
  return f;
}

static void make_output(attn_infer_output *o, const char *name, int rank,
                        const int64_t *shape, uint32_t *seed, bool binary) {
  size_t n;
  attn_shape_numel(rank, shape, &n);
  o->name = xstrdup(name);
  o->binary = binary;
  o->tensor.dtype = ATTN_DT_FP32;
  o->tensor.rank = rank;
  memcpy(o->tensor.shape, shape, sizeof(int64_t) * (size_t)rank);
  o->tensor.data = malloc(n ? n * 4 : 1);
  o->tensor.owns = true;
  for (size_t i = 0; i < n; i++) ((float *)o->tensor.data)[i] = rand_f32(seed);
}

static void check_json_floats(const cJSON *arr, const float *want, size_t n) {
  size_t i = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, arr) {
    ck_assert(i < n);
    ck_assert(cJSON_IsNumber(e));
    float got = (float)e->valuedouble;
    ck_assert_msg(same_f32(got, want[i]), "element %zu: %.9g != %.9g", i,
                  (double)got, (double)want[i]);
    i++;
  }
  ck_assert_int_eq(i, n);
}

START_TEST(v2_encode_json_and_binary) {
  attn_infer_response r = {0};
  uint32_t seed = 99;
  int64_t s1[2] = {3, 5}, s2[3] = {2, 3, 4}, s0[1] = {0};
  r.model_name = xstrdup("sdpa");
  r.model_version = xstrdup("1");
  r.id = xstrdup("id \"x\"");
  r.outputs = calloc(3, sizeof *r.outputs);
  r.n_outputs = 3;
  make_output(&r.outputs[0], "attn_output", 2, s1, &seed, false);
  make_output(&r.outputs[1], "attn_weights", 3, s2, &seed, true);
  make_output(&r.outputs[2], "empty", 1, s0, &seed, false);
  attn_buf b;
  attn_buf_init(&b, 0);
  size_t hl = 77;
  attn_diag d;
  ck_assert_int_eq(attn_v2_encode(&r, &b, &hl, &d), ATTN_OK);
  ck_assert_int_eq(hl + 24 * 4, b.len);
  ck_assert_mem_eq(b.data + hl, r.outputs[1].tensor.data, 96);
  cJSON *j = cJSON_ParseWithLength(b.data, hl);
  ck_assert_ptr_nonnull(j);
  ck_assert_str_eq(cJSON_GetObjectItem(j, "model_name")->valuestring, "sdpa");
  ck_assert_str_eq(cJSON_GetObjectItem(j, "model_version")->valuestring, "1");
  ck_assert_str_eq(cJSON_GetObjectItem(j, "id")->valuestring, "id \"x\"");
  const cJSON *outs = cJSON_GetObjectItem(j, "outputs");
  ck_assert_int_eq(cJSON_GetArraySize(outs), 3);
  const cJSON *o0 = cJSON_GetArrayItem(outs, 0),
              *o1 = cJSON_GetArrayItem(outs, 1);
  ck_assert_str_eq(cJSON_GetObjectItem(o0, "datatype")->valuestring, "FP32");
  ck_assert_int_eq(
      cJSON_GetArrayItem(cJSON_GetObjectItem(o0, "shape"), 1)->valueint, 5);
  check_json_floats(cJSON_GetObjectItem(o0, "data"), r.outputs[0].tensor.data,
                    15);
  ck_assert_ptr_null(cJSON_GetObjectItem(o1, "data"));
  ck_assert_int_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(o1, "parameters"),
                                       "binary_data_size")
                       ->valueint,
                   96);
  ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(
                       cJSON_GetArrayItem(outs, 2), "data")),
                   0);
  cJSON_Delete(j);

  /* all JSON: header_len 0; no version/id: keys absent; NaN -> null */
  free(r.model_version);
  free(r.id);
  r.model_version = r.id = NULL;
  r.outputs[1].binary = false;
  ((float *)r.outputs[1].tensor.data)[0] = NAN;
  attn_buf_free(&b);
  ck_assert_int_eq(attn_v2_encode(&r, &b, &hl, &d), ATTN_OK);
  ck_assert_int_eq(hl, 0);
  j = cJSON_Parse(b.data);
  ck_assert_ptr_nonnull(j);
  ck_assert_ptr_null(cJSON_GetObjectItem(j, "model_version"));
  ck_assert_ptr_null(cJSON_GetObjectItem(j, "id"));
  const cJSON *w = cJSON_GetObjectItem(
      cJSON_GetArrayItem(cJSON_GetObjectItem(j, "outputs"), 1), "data");
  ck_assert_int_eq(cJSON_GetArraySize(w), 24);
  ck_assert(cJSON_IsNull(cJSON_GetArrayItem(w, 0)));
  for (int k = 1; k < 24; k++)
    ck_assert(same_f32((float)cJSON_GetArrayItem(w, k)->valuedouble,
                       ((float *)r.outputs[1].tensor.data)[k]));
  cJSON_Delete(j);
  attn_buf_free(&b);
  attn_infer_response_free(&r);
}
END_TEST

/* Many random floats, every one bit-exact after a cJSON round trip. */
START_TEST(v2_encode_float_roundtrip) {
  attn_infer_response r = {0};
  uint32_t seed = 7;
  int64_t shape[1] = {20000};
  r.model_name = xstrdup("m");
  r.outputs = calloc(1, sizeof *r.outputs);
  r.n_outputs = 1;
  make_output(&r.outputs[0], "o", 1, shape, &seed, false);
  float *v = r.outputs[0].tensor.data;
  v[0] = 0.0f;
  v[1] = -0.0f;
  v[2] = 1e-45f;
  v[3] = 3.4028235e38f;
  v[4] = -1.17549435e-38f;
  v[5] = 0.1f;
  v[6] = 16777216.0f;
  attn_buf b;
  attn_diag d;
  attn_buf_init(&b, 0);
  ck_assert_int_eq(attn_v2_encode(&r, &b, NULL, &d), ATTN_OK);
  cJSON *j = cJSON_Parse(b.data);
  ck_assert_ptr_nonnull(j);
  check_json_floats(
      cJSON_GetObjectItem(
          cJSON_GetArrayItem(cJSON_GetObjectItem(j, "outputs"), 0), "data"),
      v, 20000);
  cJSON_Delete(j);
  attn_buf_free(&b);
  attn_infer_response_free(&r);
}
END_TEST

START_TEST(v2_encode_errors_restore) {
  attn_infer_response r = {0};
  attn_buf b;
  attn_diag d;
  size_t hl = 5;
  uint32_t seed = 1;
  int64_t shape[1] = {1000};
  attn_buf_init(&b, 64);
  attn_buf_puts(&b, "prefix");
  ck_assert_int_eq(attn_v2_encode(&r, &b, &hl, &d), ATTN_EINVAL); /* no name */
  r.model_name = xstrdup("m");
  r.outputs = calloc(1, sizeof *r.outputs);
  r.n_outputs = 1;
  make_output(&r.outputs[0], "o", 1, shape, &seed, false);
  ck_assert_int_eq(attn_v2_encode(&r, &b, &hl, &d), ATTN_ETOOBIG); /* cap 64 */
  ck_assert_int_eq(b.len, 6);
  ck_assert_str_eq(b.data, "prefix");
  ck_assert_int_eq(hl, 0);
  r.outputs[0].tensor.dtype = ATTN_DT_INT32;
  ck_assert_int_eq(attn_v2_encode(&r, &b, &hl, &d), ATTN_EINVAL);
  ck_assert_ptr_nonnull(strstr(d.msg, "outputs[0] 'o': tensor is INT32"));
  attn_buf_free(&b);
  attn_infer_response_free(&r);
}
END_TEST

START_TEST(v2_metadata) {
  attn_buf b;
  attn_buf_init(&b, 0);
  const char *ext[] = {"binary_tensor_data", "schedule_policy"};
  ck_assert_int_eq(attn_v2_encode_server_metadata(&b, "attnd", "0.1", ext, 2),
                   ATTN_OK);
  ck_assert_str_eq(b.data,
                   "{\"name\":\"attnd\",\"version\":\"0.1\",\"extensions\":"
                   "[\"binary_tensor_data\",\"schedule_policy\"]}");
  attn_buf_free(&b);
  ck_assert_int_eq(attn_v2_encode_server_metadata(&b, "a", "b", NULL, 0),
                   ATTN_OK);
  ck_assert_str_eq(b.data,
                   "{\"name\":\"a\",\"version\":\"b\",\"extensions\":[]}");
  attn_buf_free(&b);

  const char *versions[] = {"1"};
  attn_tensor_meta in[2] = {{"query", "FP32", 3, {-1, -1, 64}, false},
                            {"attn_mask", "BOOL", 2, {-1, -1}, true}};
  attn_tensor_meta outm[1] = {{"attn_output", "FP32", 3, {-1, -1, 64}, false}};
  attn_model_meta m = {"tiny", versions, 1, "attnd", in, 2, outm, 1};
  ck_assert_int_eq(attn_v2_encode_model_metadata(&b, &m), ATTN_OK);
  ck_assert_str_eq(
      b.data,
      "{\"name\":\"tiny\",\"versions\":[\"1\"],\"platform\":\"attnd\","
      "\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[-1,-1,"
      "64]},{\"name\":\"attn_mask\",\"datatype\":\"BOOL\",\"shape\":[-1,-1]}],"
      "\"outputs\":[{\"name\":\"attn_output\",\"datatype\":\"FP32\",\"shape\":"
      "[-1,-1,64]}]}");
  attn_buf_free(&b);
  m.n_versions = 0;
  in[1].datatype = NULL;
  ck_assert_int_eq(attn_v2_encode_model_metadata(&b, &m), ATTN_EINVAL);
  ck_assert_int_eq(b.len, 0);
  in[1].datatype = "BOOL";
  ck_assert_int_eq(attn_v2_encode_model_metadata(&b, &m), ATTN_OK);
  ck_assert_ptr_null(strstr(b.data, "versions"));
  attn_buf_free(&b);
}
END_TEST

/* Same nesting, and numbers equal once rounded to float. */
static bool same_nested_f32(const cJSON *a, const cJSON *b) {
  if (cJSON_IsNumber(a) && cJSON_IsNumber(b))
    return same_f32((float)a->valuedouble, (float)b->valuedouble);
  if (!cJSON_IsArray(a) || !cJSON_IsArray(b) ||
      cJSON_GetArraySize(a) != cJSON_GetArraySize(b))
    return false;
  for (a = a->child, b = b->child; a; a = a->next, b = b->next)
    if (!same_nested_f32(a, b)) return false;
  return true;
}

/* Decode a v1 request, answer with its own (sliced) query as attn_output,
 * encode: the "output" must be the original query, element for element. */
static void v1_roundtrip(const char *body_q, int64_t H, bool batched) {
  char *json = unquote(body_q);
  attn_infer_request req;
  attn_v1_info info;
  attn_diag d;
  ck_assert_int_eq(attn_v1_decode(json, strlen(json), NULL, &req, &info, &d),
                   ATTN_OK);
  ck_assert_int_eq(info.H, H);
  ck_assert_int_eq(info.B_given != 0, batched);
  attn_infer_response r = {0};
  r.model_name = xstrdup("sdpa");
  r.outputs = calloc(2, sizeof *r.outputs);
  r.n_outputs = 2;
  r.outputs[0].name = xstrdup("attn_output");
  ck_assert_int_eq(
      attn_tensor_to_f32(&req.inputs[0].tensor, &r.outputs[0].tensor), ATTN_OK);
  r.outputs[1].name = xstrdup("attn_weights");
  ck_assert_int_eq(
      attn_tensor_to_f32(&req.inputs[1].tensor, &r.outputs[1].tensor), ATTN_OK);
  attn_v1_timing t = {1.25, 2.5, 3.75};
  attn_buf b;
  attn_buf_init(&b, 0);
  ck_assert_int_eq(attn_v1_encode(&r, &req, &info, &t, &b, &d), ATTN_OK);
  cJSON *got = cJSON_Parse(b.data), *want = cJSON_Parse(json);
  ck_assert_ptr_nonnull(got);
  ck_assert_msg(same_nested_f32(cJSON_GetObjectItem(got, "output"),
                                cJSON_GetObjectItem(want, "query")),
                "output differs from query: %s", b.data);
  /* shape.output is the query's shape; attn_weights is written as is */
  char *sh = cJSON_PrintUnformatted(
      cJSON_GetObjectItem(cJSON_GetObjectItem(got, "shape"), "output"));
  const cJSON *q = cJSON_GetObjectItem(want, "query");
  char expect[64];
  if (batched)
    snprintf(expect, sizeof expect, "[%d,%d,%d]", cJSON_GetArraySize(q),
             cJSON_GetArraySize(q->child), cJSON_GetArraySize(q->child->child));
  else
    snprintf(expect, sizeof expect, "[%d,%d]", cJSON_GetArraySize(q),
             cJSON_GetArraySize(q->child));
  ck_assert_str_eq(sh, expect);
  free(sh);
  ck_assert_ptr_nonnull(cJSON_GetObjectItem(got, "attn_weights"));
  ck_assert(cJSON_Compare(cJSON_GetObjectItem(got, "tokens"),
                          cJSON_GetObjectItem(want, "tokens"), 1));
  const cJSON *tm = cJSON_GetObjectItem(got, "timing");
  ck_assert(cJSON_GetObjectItem(tm, "queue_ms")->valuedouble == 1.25);
  ck_assert(cJSON_GetObjectItem(tm, "total_ms")->valuedouble == 3.75);
  cJSON_Delete(got);
  cJSON_Delete(want);
  attn_buf_free(&b);
  attn_infer_response_free(&r);
  attn_infer_request_free(&req);
  free(json);
}

START_TEST(v1_encode_undoes_slicing) {
  v1_roundtrip(
      "{'query':[[1,2,3,4,5,6],[7,8,9,10,11,12]],'num_heads':3,"
      "'tokens':['a','b']}",
      3, false);
  v1_roundtrip(
      "{'query':[[[1,2,3,4],[5,6,7,8],[9,10,11,12]],"
      "[[13,14,15,16],[17,18,19,20],[21,22,23,24]]],'num_heads':2,"
      "'tokens':[['a','b','c'],['d','e','f']]}",
      2, true);
  v1_roundtrip("{'query':[[0.1,-2.5],[1e-7,3e38]],'tokens':[[1],{'a':2}]}", 1,
               false);
  /* one head with a batch: each batch's rows printed as whole rows */
  v1_roundtrip(
      "{'query':[[[0.5,-1],[2,3e-5]],[[7,8],[-9,1e9]]],'tokens':['x','y']}", 1,
      true);
}
END_TEST

START_TEST(v1_encode_as_is_and_errors) {
  attn_infer_response r = {0};
  uint32_t seed = 3;
  int64_t s[3] = {2, 3, 4}, w[2] = {3, 3};
  r.model_name = xstrdup("mha");
  r.outputs = calloc(2, sizeof *r.outputs);
  r.n_outputs = 2;
  make_output(&r.outputs[0], "attn_output", 3, s, &seed, false);
  make_output(&r.outputs[1], "other", 2, w, &seed, false);
  attn_v1_info info = {ATTN_V1_MHA, 0, 2, 4};
  attn_buf b;
  attn_diag d;
  attn_buf_init(&b, 0);
  ck_assert_int_eq(attn_v1_encode(&r, NULL, &info, NULL, &b, &d), ATTN_OK);
  cJSON *j = cJSON_Parse(b.data);
  ck_assert_ptr_nonnull(j);
  const cJSON *o = cJSON_GetObjectItem(j, "output");
  ck_assert_int_eq(cJSON_GetArraySize(o), 2);
  ck_assert_int_eq(cJSON_GetArraySize(o->child), 3);
  const float *v = r.outputs[0].tensor.data;
  for (int a = 0; a < 2; a++)
    for (int c = 0; c < 3; c++)
      check_json_floats(cJSON_GetArrayItem(cJSON_GetArrayItem(o, a), c),
                        v + (a * 3 + c) * 4, 4);
  ck_assert_ptr_null(cJSON_GetObjectItem(j, "attn_weights"));
  ck_assert_ptr_null(cJSON_GetObjectItem(j, "timing"));
  ck_assert_ptr_null(cJSON_GetObjectItem(j, "tokens"));
  cJSON_Delete(j);

  /* sliced info that does not match the model's output: ESHAPE, restored */
  attn_v1_info bad = {ATTN_V1_SDPA, 1, 0, 5};
  size_t before = b.len;
  ck_assert_int_eq(attn_v1_encode(&r, NULL, &bad, NULL, &b, &d), ATTN_ESHAPE);
  ck_assert_ptr_nonnull(strstr(d.msg,
                               "attn_output: expected [H=5,Lq,Dv], the "
                               "model returned [2,3,4]"));
  ck_assert_int_eq(b.len, before);
  free(r.outputs[0].name);
  r.outputs[0].name = xstrdup("x");
  ck_assert_int_eq(attn_v1_encode(&r, NULL, &info, NULL, &b, &d), ATTN_EINVAL);
  ck_assert_str_eq(d.msg, "response has no 'attn_output'");
  attn_buf_free(&b);

  /* rank-1 and capped buffer */
  free(r.outputs[0].name);
  r.outputs[0].name = xstrdup("attn_output");
  attn_buf_init(&b, 40);
  ck_assert_int_eq(attn_v1_encode(&r, NULL, NULL, NULL, &b, &d), ATTN_ETOOBIG);
  ck_assert_int_eq(b.len, 0);
  attn_buf_free(&b);
  attn_infer_response_free(&r);
}
END_TEST

/* ---- error JSON and attn_buf -------------------------------------------- */

static const struct {
  const char *in, *out;
} err_cases[] = {
    {"plain", "{\"error\":\"plain\"}"},
    {"", "{\"error\":\"\"}"},
    {"q\"b\\s/", "{\"error\":\"q\\\"b\\\\s/\"}"},
    {"\b\f\n\r\t", "{\"error\":\"\\b\\f\\n\\r\\t\"}"},
    {"\x01\x1f\x7f", "{\"error\":\"\\u0001\\u001f\x7f\"}"},
    {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
     "{\"error\":\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"}"},
    {"a\xff"
     "b",
     "{\"error\":\"a\xef\xbf\xbd"
     "b\"}"},
    {"\xc0\xaf", "{\"error\":\"\xef\xbf\xbd\xef\xbf\xbd\"}"}, /* overlong */
    {"\xed\xa0\x80", "{\"error\":\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"}"},
    {"\xe2\x82", "{\"error\":\"\xef\xbf\xbd\"}"}, /* truncated */
    {"\xe2\x82x", "{\"error\":\"\xef\xbf\xbdx\"}"},
    {"\xf4\x90\x80\x80",
     "{\"error\":\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"
     "\xef\xbf\xbd\"}"}, /* > U+10FFFF */
};

START_TEST(error_json_table) {
  attn_buf b;
  attn_buf_init(&b, 0);
  ck_assert_int_eq(attn_error_json(&b, err_cases[_i].in), ATTN_OK);
  ck_assert_str_eq(b.data, err_cases[_i].out);
  cJSON *j = cJSON_Parse(b.data);
  ck_assert_msg(j && cJSON_IsString(cJSON_GetObjectItem(j, "error")),
                "not parseable: %s", b.data);
  cJSON_Delete(j);
  attn_buf_free(&b);
}
END_TEST

static uint64_t xs64(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* attn_buf_i64 and attn_buf_fixed3 give printf's "%lld" and "%.3f" text. */
START_TEST(buf_numbers) {
  static const int64_t ints[] = {0, 1, -1, 9, 10, -10, 123456789,
                                 INT64_MAX, INT64_MIN, INT64_MIN + 1};
  static const double fixed[] = {0.0, -0.0, 0.0005, 0.0015, 0.0025, 1.0005,
                                 -0.0004, -0.0005, 2.5e-4, 999.9995,
                                 1e-300, 123.456, 1073741.8235, 1e6, 1e12,
                                 -1e15, 4e18, 1.0 / 3.0, 2.0 / 3.0};
  char want[400];
  attn_buf b;
  uint64_t rng = 99;
  for (int i = 0; i < 200000; i++) {
    int64_t v;
    double x;
    if (i < (int)(sizeof ints / sizeof *ints)) {
      v = ints[i];
    } else {
      v = (int64_t)xs64(&rng) >> (xs64(&rng) % 64);
    }
    attn_buf_init(&b, 0);
    ck_assert_int_eq(attn_buf_i64(&b, v), ATTN_OK);
    snprintf(want, sizeof want, "%lld", (long long)v);
    ck_assert_str_eq(b.data, want);
    attn_buf_free(&b);
    if (i < (int)(sizeof fixed / sizeof *fixed)) {
      x = fixed[i];
    } else { /* milliseconds-like values, and exact ties k / 2000 */
      uint64_t r = xs64(&rng);
      x = r & 1 ? (double)(r >> 12) / 4503599627370496.0 * 1e4
                : (double)((int64_t)(r >> 20) % 20000001 - 10000000) / 2000.0;
    }
    attn_buf_init(&b, 0);
    ck_assert_int_eq(attn_buf_fixed3(&b, x), ATTN_OK);
    snprintf(want, sizeof want, "%.3f", x);
    ck_assert_msg(strcmp(b.data, want) == 0, "%.17g: '%s', printf '%s'", x,
                  b.data, want);
    attn_buf_free(&b);
  }
}
END_TEST

START_TEST(buf_basics) {
  attn_buf b;
  attn_buf_init(&b, 10);
  ck_assert_int_eq(attn_buf_puts(&b, "hello"), ATTN_OK);
  ck_assert_int_eq(attn_buf_printf(&b, "%d", 12345), ATTN_OK);
  ck_assert_int_eq(attn_buf_append(&b, "x", 1), ATTN_ETOOBIG);
  ck_assert_int_eq(attn_buf_json_string(&b, ""), ATTN_ETOOBIG);
  ck_assert_int_eq(b.len, 10);
  ck_assert_str_eq(b.data, "hello12345");
  size_t n;
  char *p = attn_buf_steal(&b, &n);
  ck_assert_int_eq(n, 10);
  ck_assert_ptr_null(b.data);
  free(p);
  p = attn_buf_steal(&b, &n); /* empty buffer still yields a string */
  ck_assert_int_eq(n, 0);
  ck_assert_str_eq(p, "");
  free(p);
  attn_buf_init(&b, 0);
  char big[1000];
  memset(big, 'a', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  ck_assert_int_eq(attn_buf_printf(&b, "%s|%s", big, big), ATTN_OK);
  ck_assert_int_eq(b.len, 1999);
  ck_assert_int_eq(b.data[999], '|');
  attn_buf_free(&b);
  attn_buf_free(&b);
  attn_buf_free(NULL);
}
END_TEST

START_TEST(infer_free_partial) {
  attn_infer_request r;
  memset(&r, 0, sizeof r);
  r.inputs = calloc(3, sizeof *r.inputs);
  r.n_inputs = 3; /* only the first filled */
  r.inputs[0].name = xstrdup("a");
  attn_infer_request_free(&r);
  attn_infer_request_free(&r);
  attn_infer_request_free(NULL);
  attn_infer_response_free(NULL);
  ck_assert_ptr_null(attn_infer_find_input(&r, "a"));
  ck_assert_ptr_null(attn_infer_find_param(NULL, "a"));
}
END_TEST

/* ---- JSON parser (json_parse.c) ------------------------------------------ */

/* cJSON's own parse of p[0, n) when it is one value plus whitespace. */
static cJSON *cjson_parse(const char *p, size_t n) {
  const char *end = NULL;
  cJSON *t = cJSON_ParseWithLengthOpts(p, n, &end, 0);
  for (; t && end < p + n; end++)
    if (!strchr(" \t\r\n", *end) || !*end) {
      cJSON_Delete(t);
      t = NULL;
    }
  return t;
}

/* a and b equal field by field (doubles bit for bit), with cJSON's linking:
 * first child's prev is the last child, the others' prev the one before. */
static void check_same_tree(const cJSON *a, const cJSON *b, const char *ctx) {
  ck_assert_msg(a->type == b->type, "%s: type %d != %d", ctx, a->type, b->type);
  ck_assert_msg(a->valueint == b->valueint, "%s: valueint %d != %d", ctx,
                a->valueint, b->valueint);
  ck_assert_msg(memcmp(&a->valuedouble, &b->valuedouble, sizeof(double)) == 0,
                "%s: valuedouble %.17g != %.17g", ctx, a->valuedouble,
                b->valuedouble);
  ck_assert_msg(!a->string == !b->string &&
                    (!a->string || strcmp(a->string, b->string) == 0),
                "%s: key differs", ctx);
  ck_assert_msg(
      !a->valuestring == !b->valuestring &&
          (!a->valuestring || strcmp(a->valuestring, b->valuestring) == 0),
      "%s: string differs", ctx);
  const cJSON *x = a->child, *y = b->child, *last = NULL;
  for (; x && y; x = x->next, y = y->next) {
    ck_assert_msg(x == a->child || x->prev == last, "%s: bad prev link", ctx);
    check_same_tree(x, y, ctx);
    last = x;
  }
  ck_assert_msg(!x && !y, "%s: child counts differ", ctx);
  if (a->child) {
    ck_assert_msg(a->child->prev == last, "%s: first child's prev", ctx);
    int n = cJSON_GetArraySize(a);
    ck_assert_int_eq(n, cJSON_GetArraySize(b));
    ck_assert_ptr_eq(cJSON_GetArrayItem(a, n - 1), last);
    if (cJSON_IsObject(a))
      for (x = a->child; x; x = x->next) { /* first match, duplicates too */
        const cJSON *fa = cJSON_GetObjectItemCaseSensitive(a, x->string),
                    *fb = cJSON_GetObjectItemCaseSensitive(b, x->string);
        ck_assert_msg(
            fa && fb && fa->type == fb->type && fa->valueint == fb->valueint,
            "%s: lookup of '%s' differs", ctx, x->string);
      }
  }
}

/* Parse with attn_json_parse and cJSON; both must accept, print the same
 * and hold the same tree. */
static void check_like_cjson(const char *p, size_t n, const char *ctx) {
  cJSON *t = NULL, *c = cjson_parse(p, n);
  attn_diag d = {{0}};
  attn_status s = attn_json_parse(p, n, ATTN_MAX_JSON_DEPTH, "", &t, &d);
  ck_assert_msg(s == ATTN_OK, "%s: %s", ctx, d.msg);
  ck_assert_msg(c != NULL, "%s: cJSON rejects it", ctx);
  char *pa = cJSON_PrintUnformatted(t), *pb = cJSON_PrintUnformatted(c);
  ck_assert_msg(pa && pb && strcmp(pa, pb) == 0, "%s: '%s' != '%s'", ctx, pa,
                pb);
  check_same_tree(t, c, ctx);
  cJSON_free(pa);
  cJSON_free(pb);
  cJSON_Delete(c);
  attn_json_free(t);
}

typedef struct json_case {
  const char *in; /* ' stands for " */
  size_t len;     /* 0: strlen */
  attn_status st;
  const char *msg; /* the whole message on failure */
} json_case;

#define J(s) s, sizeof(s) - 1 /* inputs with NUL bytes */

static const json_case json_cases[] = {
    /* accepted (compared with cJSON's parse) */
    {" [ 1 , 2 ] \n\t\r", 0, ATTN_OK, NULL},
    {"\xEF\xBB\xBF{}", 0, ATTN_OK, NULL}, /* BOM skipped */
    {"0", 0, ATTN_OK, NULL},
    {"-0", 0, ATTN_OK, NULL},
    {"[-0.0e+0,1E+2,1e-2,12.5E1,0.000123]", 0, ATTN_OK, NULL},
    {"[true,false,null,[],{},'',[[]],{'':{}}]", 0, ATTN_OK, NULL},
    {"{'a':1,'a':2,'b':{'c':[1,{'d':null}]}}", 0, ATTN_OK, NULL},
    {"[2147483647,2147483648,-2147483648,-2147483649,1e300,-1e999,1.5]", 0,
     ATTN_OK, NULL},
    {"'\\u00e9\\ud83d\\ude00 \xc3\xa9 \xf4\x8f\xbf\xbf \\/\\b\\f\\n\\r\\t\\\\'",
     0, ATTN_OK, NULL},
    /* empty, whitespace, truncation */
    {"", 0, ATTN_EPARSE, "empty JSON body"},
    {"   ", 0, ATTN_EPARSE, "malformed JSON at byte 3"},
    {"[1,2", 0, ATTN_EPARSE, "malformed JSON at byte 4"},
    {"{'a':1", 0, ATTN_EPARSE, "malformed JSON at byte 6"},
    {"{'a'", 0, ATTN_EPARSE, "malformed JSON at byte 4"},
    {"'abc", 0, ATTN_EPARSE, "malformed JSON at byte 4"},
    {"'abc\\", 0, ATTN_EPARSE, "malformed JSON at byte 5"},
    {"\xEF\xBB", 0, ATTN_EPARSE, "malformed JSON at byte 0"},
    /* numbers */
    {"[01]", 0, ATTN_EPARSE, "malformed JSON at byte 2"},
    {"[-01]", 0, ATTN_EPARSE, "malformed JSON at byte 3"},
    {"[1.]", 0, ATTN_EPARSE, "malformed JSON at byte 3"},
    {"[.5]", 0, ATTN_EPARSE, "malformed JSON at byte 1"},
    {"[+1]", 0, ATTN_EPARSE, "malformed JSON at byte 1"},
    {"[-]", 0, ATTN_EPARSE, "malformed JSON at byte 2"},
    {"[- 1]", 0, ATTN_EPARSE, "malformed JSON at byte 2"},
    {"[1e]", 0, ATTN_EPARSE, "malformed JSON at byte 3"},
    {"[1e+]", 0, ATTN_EPARSE, "malformed JSON at byte 4"},
    {"[1.e5]", 0, ATTN_EPARSE, "malformed JSON at byte 3"},
    {"[0x10]", 0, ATTN_EPARSE, "malformed JSON at byte 2"},
    {"[NaN]", 0, ATTN_EPARSE, "malformed JSON at byte 1"},
    {"[Infinity]", 0, ATTN_EPARSE, "malformed JSON at byte 1"},
    {"[-Infinity]", 0, ATTN_EPARSE, "malformed JSON at byte 2"},
    {"-", 0, ATTN_EPARSE, "malformed JSON at byte 1"},
    /* structure */
    {"[1 2]", 0, ATTN_EPARSE, "malformed JSON at byte 3"},
    {"[1,]", 0, ATTN_EPARSE, "malformed JSON at byte 3"},
    {"[,1]", 0, ATTN_EPARSE, "malformed JSON at byte 1"},
    {"[1}", 0, ATTN_EPARSE, "malformed JSON at byte 2"},
    {"{'a':1]", 0, ATTN_EPARSE, "malformed JSON at byte 6"},
    {"{'a' 1}", 0, ATTN_EPARSE, "malformed JSON at byte 5"},
    {"{'a':1,}", 0, ATTN_EPARSE, "malformed JSON at byte 7"},
    {"{,}", 0, ATTN_EPARSE, "malformed JSON at byte 1"},
    {"{1:2}", 0, ATTN_EPARSE, "malformed JSON at byte 1"},
    {"{'a':}", 0, ATTN_EPARSE, "malformed JSON at byte 5"},
    {"]", 0, ATTN_EPARSE, "malformed JSON at byte 0"},
    {"[tru]", 0, ATTN_EPARSE, "malformed JSON at byte 4"},
    {"[nul", 0, ATTN_EPARSE, "malformed JSON at byte 4"},
    {"[falsy]", 0, ATTN_EPARSE, "malformed JSON at byte 5"},
    {"True", 0, ATTN_EPARSE, "malformed JSON at byte 0"},
    {"\x01[1]", 0, ATTN_EPARSE, "malformed JSON at byte 0"}, /* strict ws */
    {"[1,\v2]", 0, ATTN_EPARSE, "malformed JSON at byte 3"},
    {J("[1,\0 2]"), ATTN_EPARSE, "malformed JSON at byte 3"},
    /* strings */
    {"'a\\x'", 0, ATTN_EPARSE, "malformed JSON at byte 2"},
    {"'a\\U0041'", 0, ATTN_EPARSE, "malformed JSON at byte 2"},
    {"'\\u12'", 0, ATTN_EPARSE, "malformed JSON at byte 1"},
    {"'\\u12G4'", 0, ATTN_EPARSE, "malformed JSON at byte 1"},
    {"'\\ud800'", 0, ATTN_EPARSE, "malformed JSON at byte 1"},
    {"'\\ud800\\u0041'", 0, ATTN_EPARSE, "malformed JSON at byte 1"},
    {"'\\ud800\\ud800'", 0, ATTN_EPARSE, "malformed JSON at byte 1"},
    {"'x\\udc00'", 0, ATTN_EPARSE, "malformed JSON at byte 2"},
    {"'a\\u0000b'", 0, ATTN_EPARSE, "malformed JSON at byte 2"},
    {"'\x01'", 0, ATTN_EPARSE, "malformed JSON at byte 1"},
    {"'a\tb'", 0, ATTN_EPARSE, "malformed JSON at byte 2"},
    {J("'a\0b'"), ATTN_EPARSE, "malformed JSON at byte 2"},
    {"'\xff'", 0, ATTN_EPARSE, "malformed JSON at byte 1"},
    {"'\x80'", 0, ATTN_EPARSE, "malformed JSON at byte 1"},
    {"'ab\xc0\x80'", 0, ATTN_EPARSE, "malformed JSON at byte 3"}, /* overlong */
    {"'\xe0\x9f\xbf'", 0, ATTN_EPARSE, "malformed JSON at byte 1"},
    {"'\xed\xa0\x80'", 0, ATTN_EPARSE, "malformed JSON at byte 1"}, /* D800 */
    {"'\xf4\x90\x80\x80'", 0, ATTN_EPARSE, "malformed JSON at byte 1"},
    {"'\xe2\x82'", 0, ATTN_EPARSE, "malformed JSON at byte 1"},
    {"{'k\x01':1}", 0, ATTN_EPARSE, "malformed JSON at byte 3"},
    {"{'\\q':1}", 0, ATTN_EPARSE, "malformed JSON at byte 2"},
    /* after the value */
    {"[1] x", 0, ATTN_EPARSE,
     "unexpected bytes after the JSON value at byte 4 (hint)"},
    {"[1]\x01", 0, ATTN_EPARSE,
     "unexpected bytes after the JSON value at byte 3 (hint)"},
    {"1 2", 0, ATTN_EPARSE,
     "unexpected bytes after the JSON value at byte 2 (hint)"},
    {"0x10", 0, ATTN_EPARSE,
     "unexpected bytes after the JSON value at byte 1 (hint)"},
};

START_TEST(json_syntax_table) {
  const json_case *c = &json_cases[_i];
  char ctx[32];
  size_t n = c->len ? c->len : strlen(c->in);
  char *in = malloc(n + 1);
  ck_assert_ptr_nonnull(in);
  for (size_t i = 0; i < n; i++) in[i] = c->in[i] == '\'' ? '"' : c->in[i];
  in[n] = '\0';
  snprintf(ctx, sizeof ctx, "json case %d", _i);
  cJSON *t = (cJSON *)&t; /* must become NULL on failure */
  attn_diag d = {{0}};
  attn_status s = attn_json_parse(in, n, 8, " (hint)", &t, &d);
  ck_assert_msg(s == c->st, "%s: status %s (%s), expected %s", ctx,
                attn_status_name(s), d.msg, attn_status_name(c->st));
  if (s == ATTN_OK) {
    attn_json_free(t);
    check_like_cjson(in, n, ctx);
  } else {
    ck_assert_ptr_null(t);
    ck_assert_msg(strcmp(d.msg, c->msg) == 0, "%s: message '%s', expected '%s'",
                  ctx, d.msg, c->msg);
  }
  free(in);
}
END_TEST

/* Escapes in values and keys decode to these UTF-8 bytes. */
static const struct {
  const char *in, *out;
} json_escapes[] = {
    {"\\u00e9", "\xc3\xa9"},
    {"\\u20AC", "\xe2\x82\xac"},
    {"\\u07FF\\u0800", "\xdf\xbf\xe0\xa0\x80"},
    {"\\uffff", "\xef\xbf\xbf"},
    {"\\ud83d\\ude00", "\xf0\x9f\x98\x80"},
    {"\\uD800\\uDC00", "\xf0\x90\x80\x80"},
    {"\\uDBFF\\uDFFF", "\xf4\x8f\xbf\xbf"},
    {"\\u0041\\u007f\\u0001", "A\x7f\x01"},
    {"\\\"\\\\\\/\\b\\f\\n\\r\\t", "\"\\/\b\f\n\r\t"},
    {"x\xf0\x9f\x98\x80\xc3\xa9\xe2\x82\xac y",
     "x\xf0\x9f\x98\x80\xc3\xa9\xe2\x82\xac y"},
    {"plain", "plain"},
    {"", ""},
};

START_TEST(json_escapes_table) {
  char doc[128];
  cJSON *t;
  attn_diag d;
  const char *in = json_escapes[_i].in, *want = json_escapes[_i].out;
  int n = snprintf(doc, sizeof doc, "[\"%s\",{\"%s\":1}]", in, in);
  ck_assert(n > 0 && (size_t)n < sizeof doc);
  ck_assert_int_eq(attn_json_parse(doc, (size_t)n, 8, NULL, &t, &d), ATTN_OK);
  ck_assert_str_eq(t->child->valuestring, want);
  ck_assert_str_eq(t->child->next->child->string, want);
  ck_assert_ptr_nonnull(cJSON_GetObjectItemCaseSensitive(t->child->next, want));
  attn_json_free(t);
  check_like_cjson(doc, (size_t)n, in);
}
END_TEST

START_TEST(json_depth_limit) {
  cJSON *t;
  attn_diag d;
  ck_assert_int_eq(attn_json_parse("[[[1]]]", 7, 3, NULL, &t, &d), ATTN_OK);
  attn_json_free(t);
  ck_assert_int_eq(attn_json_parse("[[[[1]]]]", 9, 3, NULL, &t, &d),
                   ATTN_EINVAL);
  ck_assert_str_eq(d.msg, "JSON nested deeper than 3 levels at byte 3");
  ck_assert_ptr_null(t);
  const char *o = "{\"a\":[{\"b\":{}}]}";
  ck_assert_int_eq(attn_json_parse(o, strlen(o), 3, NULL, &t, &d), ATTN_EINVAL);
  ck_assert_str_eq(d.msg, "JSON nested deeper than 3 levels at byte 11");
  /* past the on-stack frames: 5000 levels allowed, then one too many */
  size_t lv = 5000;
  char *deep = malloc(2 * lv + 4);
  ck_assert_ptr_nonnull(deep);
  memset(deep, '[', lv);
  memset(deep + lv, ']', lv);
  ck_assert_int_eq(attn_json_parse(deep, 2 * lv, lv, NULL, &t, &d), ATTN_OK);
  size_t got = 0;
  for (cJSON *e = t; e; e = e->child) got++;
  ck_assert_uint_eq(got, lv);
  attn_json_free(t);
  ck_assert_int_eq(attn_json_parse(deep, 2 * lv, lv - 1, NULL, &t, &d),
                   ATTN_EINVAL);
  ck_assert_ptr_nonnull(strstr(d.msg, "at byte 4999"));
  deep[lv] = '1'; /* truncated inside: freed on the error path */
  ck_assert_int_eq(attn_json_parse(deep, lv + 1, SIZE_MAX, NULL, &t, &d),
                   ATTN_EPARSE);
  free(deep);
}
END_TEST

START_TEST(json_node_limit) {
  cJSON *t;
  attn_diag d;
  ck_assert_uint_eq(ATTN_JSON_MAX_NODES, (size_t)1 << 24);
  ck_assert_int_eq(attn_json_parse_capped("[1,2,3]", 7, 8, 4, NULL, &t, &d),
                   ATTN_OK);
  ck_assert_int_eq(cJSON_GetArraySize(t), 3);
  attn_json_free(t);
  ck_assert_int_eq(attn_json_parse_capped("[1,2,3,4]", 9, 8, 4, NULL, &t, &d),
                   ATTN_ETOOBIG);
  ck_assert_str_eq(d.msg,
                   "JSON has more than 4 values; send large tensors with the "
                   "binary extension");
  ck_assert_ptr_null(t);
  const char *o = "{\"a\":[true,null]}";
  ck_assert_int_eq(attn_json_parse_capped(o, strlen(o), 8, 4, NULL, &t, &d),
                   ATTN_OK);
  attn_json_free(t);
  ck_assert_int_eq(attn_json_parse_capped(o, strlen(o), 8, 3, NULL, &t, &d),
                   ATTN_ETOOBIG);
  attn_json_free(NULL);
}
END_TEST

/* Big strings (own arena block), long number tokens (strtod on an arena
 * copy), many arena blocks. */
START_TEST(json_large_values) {
  size_t n = 300000;
  char *doc = malloc(n + 64);
  ck_assert_ptr_nonnull(doc);
  size_t k = 0;
  doc[k++] = '[';
  doc[k++] = '"';
  for (size_t i = 0; i < 100000; i++) doc[k++] = (char)('a' + i % 26);
  doc[k++] = '"';
  doc[k++] = ',';
  doc[k++] = '1';
  for (size_t i = 0; i < 400; i++) doc[k++] = (char)('0' + i % 10);
  doc[k++] = 'e';
  doc[k++] = '-';
  doc[k++] = '3';
  doc[k++] = '9';
  doc[k++] = '0';
  while (k < n - 8) {
    doc[k++] = ',';
    doc[k++] = '7';
  }
  doc[k++] = ']';
  check_like_cjson(doc, k, "large values");
  cJSON *t;
  attn_diag d;
  ck_assert_int_eq(attn_json_parse(doc, k, 8, NULL, &t, &d), ATTN_OK);
  ck_assert_uint_eq(strlen(t->child->valuestring), 100000);
  size_t tok = 1 + 400 + 5; /* the 406-character number */
  char *num = malloc(tok + 1);
  ck_assert_ptr_nonnull(num);
  memcpy(num, doc + 2 + 100000 + 2, tok);
  num[tok] = '\0';
  double want = strtod(num, NULL), got = t->child->next->valuedouble;
  ck_assert(memcmp(&want, &got, sizeof got) == 0);
  attn_json_free(t);
  free(num);
  free(doc);
}
END_TEST

/* ---- numbers: bit-identical to strtod ----------------------------------- */


static size_t put_digits(char *o, uint64_t *rng, int n, bool lead_nonzero) {
  for (int i = 0; i < n; i++) {
    unsigned dg = (unsigned)(xs64(rng) % 10);
    if (i == 0 && lead_nonzero) dg = 1 + dg % 9;
    o[i] = (char)('0' + dg);
  }
  return (size_t)n;
}

/* One JSON number text of a random form into o (< 80 bytes); returns its
 * length. */
static size_t gen_number(char *o, uint64_t *rng) {
  uint64_t r = xs64(rng);
  int form = (int)(r % 10);
  size_t k = 0;
  switch (form) {
    case 0: { /* shortest text of a random finite float */
      uint32_t u = (uint32_t)(r >> 32);
      float f;
      memcpy(&f, &u, 4);
      if (!isfinite(f)) f = 1.5f;
      return attn_f32_shortest(f, o);
    }
    case 1: /* shortest text of a float in [-1, 1] (typical tensor data) */
      return attn_f32_shortest(
          (float)((double)(r >> 11) / 4503599627370496.0 - 1.0), o);
    case 2: { /* %.9g of a random float */
      uint32_t u = (uint32_t)(r >> 32);
      float f;
      memcpy(&f, &u, 4);
      if (!isfinite(f)) f = -0.0f;
      return (size_t)snprintf(o, 40, "%.9g", (double)f);
    }
    case 3: { /* %.17g / %.16g of random double bits, subnormals included */
      double v;
      uint64_t u = xs64(rng);
      if (r & 256) u &= 0x800FFFFFFFFFFFFFull; /* subnormal */
      memcpy(&v, &u, 8);
      if (!isfinite(v)) v = 1e308;
      return (size_t)snprintf(o, 40, r & 512 ? "%.16g" : "%.17g", v);
    }
    default: { /* grammar-generated: [-]int[.frac][e[+-]exp] */
      if (r & 1) o[k++] = '-';
      int nint = (int)((r >> 8) % 22) + 1, nfrac = (int)((r >> 16) % 22);
      if ((r >> 24) % 5 == 0)
        o[k++] = '0';
      else
        k += put_digits(o + k, rng, nint, true);
      if (nfrac) {
        o[k++] = '.';
        k += put_digits(o + k, rng, nfrac, false);
        if ((r >> 28) % 4 == 0) /* trailing zeros */
          for (int i = 0; i < 6; i++) o[k++] = '0';
      }
      if ((r >> 32) % 3) {
        int range = form == 9 ? 40 : form == 8 ? 700 : 60;
        int e = (int)((r >> 40) % (uint64_t)(2 * range + 1)) - range;
        if (form == 7) e += e < 0 ? -290 : 290; /* near the ends */
        k += (size_t)snprintf(o + k, 16, "%s%s%d", r >> 62 & 1 ? "E" : "e",
                              e >= 0 && r >> 63 ? "+" : "", e);
      }
      return k;
    }
  }
}

static const char *const tricky_numbers[] = {
    "2.2250738585072011e-308",
    "2.2250738585072012e-308",
    "4.9e-324",
    "2.4703282292062327e-324",
    "2.4703282292062328e-324",
    "5e-324",
    "1.7976931348623157e308",
    "1.7976931348623158e308",
    "1.7976931348623159e308",
    "1e309",
    "-1e999",
    "1e-999",
    "-0.0e-1000",
    "0e1000",
    "9007199254740992",
    "9007199254740993",
    "9007199254740993e-22",
    "9007199254740992e22",
    "900719925474099e23",
    "1e22",
    "1e23",
    "1e-22",
    "1e-23",
    "1e37",
    "1e38",
    "0.1",
    "0.30000000000000004",
    "123456789012345678901234567890",
    "18446744073709551615",
    "18446744073709551616",
    "10000000000000000000000000000000000000000e-40",
    "1.00000000000000011102230246251565404236316680908203125",
    "1.00000000000000011102230246251565404236316680908203124",
    "8.98846567431158e307",
    "3.4028235e38",
    "1.17549435e-38",
    "1e-45",
    "-2147483648",
    "2147483647.9999",
    "-2147483648.5",
    "1e0000000000000000001",
};

/* >= 1 million numbers in arrays of 1000: every valuedouble must equal
 * strtod's result bit for bit, and each array must match cJSON's tree. */
static void check_packed_like_plain(const char *doc, size_t n, size_t nodes,
                                    const char *ctx);

/* Decimal digits of x (no sign, no leading zeros; "0" for 0) into o. */
static size_t put_u128(char *o, unsigned __int128 x) {
  char t[48];
  size_t n = 0, k = 0;
  do {
    t[n++] = (char)('0' + (int)(x % 10));
    x /= 10;
  } while (x);
  while (n) o[k++] = t[--n];
  return k;
}

/* Member names whose arrays are packed in the packed-array tests. */
static const char *const pack_k[] = {"k", "k2", NULL};

/* The paths packed arrays can be read with (src/json/internal.h); the
 * packed tests run once per path (loop index), each against the plain
 * parse.  A path this CPU lacks is skipped; "scalar" always runs. */
static const char *const json_impls[] = {"avx512", "avx2", "sse2", "scalar"};
#define N_JSON_IMPLS ((int)(sizeof json_impls / sizeof *json_impls))

/* Make packed arrays use path i for this test; false when the CPU lacks
 * it.  Check forks per test, so the choice dies with the test (and
 * CK_FORK=no runs restore it in use_default_json_impl). */
static bool use_json_impl(int i) {
  return attn__json_set_impl(json_impls[i]) != 0;
}

static void use_default_json_impl(void) {
  for (int i = 0; i < N_JSON_IMPLS; i++)
    if (attn__json_set_impl(json_impls[i])) return;
}

/* doc[0, k) is a JSON array of `count` numbers, number i starting at
 * off[i]: each parsed value must be bit-identical to strtod's, in the
 * plain tree and as a packed array read by each path the CPU has. */
static void values_match_strtod(const char *doc, size_t k, const size_t *off,
                                int count) {
  cJSON *t;
  attn_diag d;
  ck_assert_msg(attn_json_parse(doc, k, 8, NULL, &t, &d) == ATTN_OK, "%s",
                d.msg);
  double *want = malloc((size_t)count * sizeof *want);
  ck_assert_ptr_nonnull(want);
  int i = 0;
  for (const cJSON *e = t->child; e; e = e->next, i++) {
    char *end;
    ck_assert_int_lt(i, count);
    want[i] = strtod(doc + off[i], &end);
    ck_assert_msg(*end == ',' || *end == ']', "generated a bad number");
    ck_assert_msg(memcmp(&want[i], &e->valuedouble, sizeof *want) == 0,
                  "'%.*s': %a, strtod says %a", (int)(end - doc - off[i]),
                  doc + off[i], e->valuedouble, want[i]);
  }
  ck_assert_int_eq(i, count);
  attn_json_free(t);
  /* {"k": doc}: the packed paths */
  char *w = malloc(k + 8);
  ck_assert_ptr_nonnull(w);
  memcpy(w, "{\"k\":", 5);
  memcpy(w + 5, doc, k);
  w[k + 5] = '}';
  for (int impl = 0; impl < N_JSON_IMPLS; impl++) {
    if (!use_json_impl(impl)) continue;
    ck_assert_msg(attn_json_parse_ex(w, k + 6, 8, ATTN_JSON_MAX_NODES, pack_k,
                                     "", &t, &d) == ATTN_OK,
                  "%s", d.msg);
    size_t n = 0;
    const double *v = attn_json_packed(t->child, &n);
    ck_assert_ptr_nonnull(v);
    ck_assert_uint_eq(n, (size_t)count);
    for (i = 0; i < count; i++)
      ck_assert_msg(memcmp(&want[i], &v[i], sizeof *want) == 0,
                    "%s: '%.*s': %a, strtod says %a", json_impls[impl],
                    (int)strcspn(doc + off[i], ",]"), doc + off[i], v[i],
                    want[i]);
    attn_json_free(t);
  }
  use_default_json_impl();
  free(w);
  free(want);
}

/* One number for json_long_numbers_match_strtod (see there) into o;
 * returns its length. */
static size_t gen_long_number(char *o, uint64_t *rng) {
  size_t k = 0;
  uint64_t r = xs64(rng);
  if (r & 1) o[k++] = '-';
  uint64_t t = ((uint64_t)1 << 53) | (xs64(rng) & (((uint64_t)1 << 53) - 1));
  t |= 1; /* odd and 54 bits: halfway between two doubles */
  int p = (int)(xs64(rng) % 7);
  switch ((r >> 1) % 6) {
    case 0:
    case 1: { /* 1..19 digits, exponent -360..339 */
      int nd = 1 + (int)(xs64(rng) % 19);
      for (int d = 0; d < nd; d++)
        o[k++] = (char)('0' + (d == 0 ? 1 + xs64(rng) % 9 : xs64(rng) % 10));
      k += (size_t)snprintf(o + k, 16, "e%d", (int)(xs64(rng) % 700) - 360);
      break;
    }
    case 2: /* a tie as an integer: t * 2^p */
      k += put_u128(o + k, (unsigned __int128)t << p);
      break;
    case 3: { /* a tie below 1 ulp of an integer: t * 5^p * 10^-p */
      unsigned __int128 x = t;
      for (int j = 0; j < p % 3; j++) x *= 5;
      k += put_u128(o + k, x);
      k += (size_t)snprintf(o + k, 8, "e-%d", p % 3);
      break;
    }
    case 4: /* next to a tie */
      k += put_u128(o + k, ((unsigned __int128)t << p) +
                               (unsigned __int128)(xs64(rng) % 5) - 2);
      break;
    default: { /* 17 or 19 significant digits of random double bits */
      uint64_t u = xs64(rng);
      double v;
      memcpy(&v, &u, 8);
      if (!isfinite(v)) v = 0.1;
      k += (size_t)snprintf(o + k, 40, r & 64 ? "%.17g" : "%.19g", fabs(v));
    }
  }
  return k;
}

/* The JSON array "[a,b,...]" of the texts first[0 .. n_first) and then of
 * gen's numbers, `count` in all, into doc (NUL-terminated after it);
 * number i starts at off[i].  Returns the array's length. */
static size_t number_array(char *doc, size_t *off, int count,
                           size_t (*gen)(char *, uint64_t *), uint64_t *rng,
                           const char *const *first, size_t n_first) {
  size_t k = 0;
  doc[k++] = '[';
  for (int i = 0; i < count; i++) {
    if (i) doc[k++] = ',';
    off[i] = k;
    if ((size_t)i < n_first) {
      size_t l = strlen(first[i]);
      memcpy(doc + k, first[i], l);
      k += l;
    } else {
      k += gen(doc + k, rng);
    }
  }
  doc[k++] = ']';
  doc[k] = '\0';
  return k;
}

/* Numbers of 1 to 9 digits in all, 8 and 9 (the edge of the AVX-512
 * window's 8-digit lanes, src/json/json_avx512.c) most often: integers,
 * "0.ddd" and "dd.ddd", either sign.  Within a window every number
 * has 8 digits or fewer (the one-register case) or some have 9. */
static size_t gen_short_number(char *o, uint64_t *rng) {
  static const unsigned digits[] = {1, 2, 3, 5, 7, 8, 8, 8, 9, 9};
  uint64_t r = xs64(rng);
  unsigned nd = digits[r % 10], form = (unsigned)(r >> 8) % 3;
  if ((r >> 12) % 16 < 14 && nd == 9) nd = 8; /* whole windows of <= 8 */
  size_t n = 0;
  if ((r >> 16) & 1) o[n++] = '-';
  if (form == 1 && nd >= 2) { /* 0.ddd: the 0 counts as a digit */
    o[n++] = '0';
    o[n++] = '.';
    for (unsigned i = 1; i < nd; i++) o[n++] = (char)('0' + xs64(rng) % 10);
    return n;
  }
  unsigned ni = form == 2 && nd >= 2 ? 1 + (unsigned)(r >> 20) % (nd - 1) : nd;
  for (unsigned i = 0; i < nd; i++) {
    if (i == ni) o[n++] = '.';
    o[n++] = (char)('0' + (i == 0 && ni > 1 ? 1 + xs64(rng) % 9
                                            : xs64(rng) % 10));
  }
  return n;
}

/* docs arrays of 1000 of gen's numbers (each under max_len bytes), every
 * value against strtod on every path. */
static void generated_match_strtod(size_t (*gen)(char *, uint64_t *),
                                   size_t max_len, int docs, uint64_t seed) {
  enum { PER_DOC = 1000 };
  char *doc = malloc(PER_DOC * (max_len + 1) + 8);
  size_t *off = malloc(PER_DOC * sizeof *off);
  ck_assert(doc && off);
  for (int di = 0; di < docs; di++) {
    size_t k = number_array(doc, off, PER_DOC, gen, &seed, NULL, 0);
    values_match_strtod(doc, k, off, PER_DOC);
  }
  free(off);
  free(doc);
}

/* Short numbers such as -0.482913, every path against strtod. */
START_TEST(json_short_numbers_match_strtod) {
  generated_match_strtod(gen_short_number, 16, 200, 0x243F6A8885A308D3ull);
}
END_TEST

/* Numbers for the Eisel-Lemire path of json_parse.c (mantissas of 16 to 19
 * digits that are no exact double) and the cases it must leave to strtod:
 * exact ties between two doubles (an odd 54-bit integer t times 2^p, or
 * t * 5^p / 10^p), their neighbours, every decimal exponent of the table
 * and beyond it, 17- and 19-digit texts of random doubles.  Each value
 * must be bit-identical to strtod's. */
START_TEST(json_long_numbers_match_strtod) {
  generated_match_strtod(gen_long_number, 63, 300, 0x5DEECE66Dull);
}
END_TEST

START_TEST(json_numbers_match_strtod) {
  enum { PER_DOC = 1000, DOCS = 1050 };
  char *doc = malloc(PER_DOC * 88 + 8);
  size_t *off = malloc(PER_DOC * sizeof *off);
  ck_assert(doc && off);
  uint64_t rng = 0x9E3779B97F4A7C15ull;
  size_t checked = 0, n_tricky = sizeof tricky_numbers / sizeof *tricky_numbers;
  for (int di = 0; di < DOCS; di++) {
    size_t k = number_array(doc, off, PER_DOC, gen_number, &rng,
                            tricky_numbers, di == 0 ? n_tricky : 0);
    values_match_strtod(doc, k, off, PER_DOC);
    checked += PER_DOC;
    if (di % 8 == 0) {
      check_like_cjson(doc, k, "random numbers");
      /* the same numbers packed: {"k":[...]} */
      char *w = malloc(k + 8);
      ck_assert_ptr_nonnull(w);
      memcpy(w, "{\"k\":", 5);
      memcpy(w + 5, doc, k);
      w[k + 5] = '}';
      check_packed_like_plain(w, k + 6, ATTN_JSON_MAX_NODES, "random packed");
      free(w);
    }
  }
  ck_assert_uint_ge(checked, 1000000);
  free(off);
  free(doc);
}
END_TEST

/* Every decoder test body that is valid JSON parses to cJSON's tree. */
START_TEST(json_same_as_cjson) {
  static const char *const docs[] = {
      "{'inputs':[{'name':'x','datatype':'FP32','shape':[2,2],"
      "'data':[[0.25,-1.5e-3],[3.4028235e38,-0]]}],"
      "'outputs':[{'name':'o','parameters':{'binary_data':true}}],"
      "'parameters':{'a':'\\u00e9','b':null,'c':false,'d':-7}}",
      "  {\"\":[{},[],\"\",0,-0.0,1e-400]}  ",
      "[[[[[[[[[[1]]]]]]]]]]",
      "\"top\"",
      "null",
  };
  char ctx[48];
  for (size_t i = 0; i < sizeof docs / sizeof *docs; i++) {
    char *j = unquote(docs[i]);
    snprintf(ctx, sizeof ctx, "sample %zu", i);
    check_like_cjson(j, strlen(j), ctx);
    free(j);
  }
  for (size_t i = 0; i < sizeof v2_cases / sizeof *v2_cases; i++) {
    if (v2_cases[i].st == ATTN_EPARSE || v2_cases[i].st == ATTN_ETOOBIG)
      continue;
    char *j = unquote(v2_cases[i].json);
    snprintf(ctx, sizeof ctx, "v2 case %zu", i);
    check_like_cjson(j, strlen(j), ctx);
    free(j);
  }
  for (size_t i = 0; i < sizeof v1_cases / sizeof *v1_cases; i++) {
    if (v1_cases[i].st == ATTN_EPARSE || v1_cases[i].st == ATTN_ETOOBIG)
      continue;
    char *j = unquote(v1_cases[i].json);
    snprintf(ctx, sizeof ctx, "v1 case %zu", i);
    check_like_cjson(j, strlen(j), ctx);
    free(j);
  }
}
END_TEST

/* ---- packed arrays (attn_json_parse_ex with pack_keys) ------------------ */


static bool pack_key_listed(const char *key) {
  for (const char *const *k = pack_k; *k; k++)
    if (strcmp(*k, key) == 0) return true;
  return false;
}

/* a (parsed with pack_k) holds the same values as b (parsed plainly); an
 * array is packed exactly when it may be (allowed: listed key, or inside an
 * allowed array) and holds only numbers. */
static void check_packed_tree(const cJSON *a, const cJSON *b, bool allowed,
                              const char *ctx) {
  size_t n;
  const double *v = attn_json_packed(a, &n);
  bool all_num = cJSON_IsArray(b) && b->child;
  for (const cJSON *y = b->child; all_num && y; y = y->next)
    all_num = cJSON_IsNumber(y);
  ck_assert_msg(!!v == (allowed && all_num), "%s: packed %d, expected %d", ctx,
                !!v, allowed && all_num);
  ck_assert_msg(!a->string == !b->string &&
                    (!a->string || strcmp(a->string, b->string) == 0),
                "%s: key differs", ctx);
  if (v) {
    ck_assert(cJSON_IsArray(a) && !a->child);
    ck_assert_uint_eq(n, (size_t)cJSON_GetArraySize(b));
    ck_assert_uint_eq(attn_json_len(a), n);
    size_t i = 0;
    for (const cJSON *y = b->child; y; y = y->next, i++)
      ck_assert_msg(memcmp(&v[i], &y->valuedouble, sizeof *v) == 0,
                    "%s: element %zu is %a, expected %a", ctx, i, v[i],
                    y->valuedouble);
    return;
  }
  ck_assert_msg(a->type == b->type, "%s: type %d != %d", ctx, a->type, b->type);
  ck_assert(memcmp(&a->valuedouble, &b->valuedouble, sizeof(double)) == 0);
  ck_assert_int_eq(a->valueint, b->valueint);
  ck_assert_uint_eq(attn_json_len(a), (size_t)cJSON_GetArraySize(b));
  const cJSON *x = a->child, *y = b->child;
  for (; x && y; x = x->next, y = y->next) {
    bool child_allowed = cJSON_IsObject(b) ? pack_key_listed(y->string)
                                           : allowed && cJSON_IsArray(b);
    check_packed_tree(x, y, child_allowed, ctx);
  }
  ck_assert_msg(!x && !y, "%s: child counts differ", ctx);
}

/* Parse doc with and without packing: same status and message, and on
 * success the same values. */
static void check_packed_like_plain(const char *text, size_t n,
                                    size_t nodes, const char *ctx) {
  cJSON *a = NULL, *b = NULL;
  attn_diag da = {{0}}, db = {{0}};
  /* an allocation of exactly n bytes, so that ASan sees any read past it */
  char *doc = malloc(n ? n : 1);
  ck_assert_ptr_nonnull(doc);
  memcpy(doc, text, n);
  attn_status sa = attn_json_parse_ex(doc, n, 8, nodes, pack_k, "", &a, &da);
  attn_status sb = attn_json_parse_capped(doc, n, 8, nodes, "", &b, &db);
  free(doc);
  ck_assert_msg(sa == sb, "%s: status %s, plain %s", ctx, attn_status_name(sa),
                attn_status_name(sb));
  if (sa != ATTN_OK) {
    ck_assert_ptr_null(a);
    ck_assert_msg(strcmp(da.msg, db.msg) == 0, "%s: '%s', plain '%s'", ctx,
                  da.msg, db.msg);
    return;
  }
  check_packed_tree(a, b, false, ctx);
  attn_json_free(a);
  attn_json_free(b);
}

static const char *const packed_docs[] = {
    "{'k':[1,2.5,-3e-7]}",
    "{'k': [ 1 , 2 ] , 'j':[1,2]}",
    "{'k':[1,2,true]}",
    "{'k':[1,[2,3]]}",
    "{'k':[[1,2],[3,'x'],[4]],'k2':[[[5]]]}",
    "{'k':[{'j':[1]},{'k':[2,3]},[]]}",
    "{'j':{'k':[7,8]},'k2':{'k':[9]}}",
    "[1,2]",
    "{'k':[]}",
    "{'k':[1,2,]}",
    "{'k':[1 2]}",
    "{'k':[1,-]}",
    "{'k':[-]}",
    "{'k':[01]}",
    "{'k':[1,2",
    "{'k':[1,2,",
    "{'k':[1,2]",
    "{'k':[1e999,-1e-999,123456789012345678901234567890,0.000001]}",
};

/* Long packed arrays (the chunked fast path of json_parse.c takes 64 bytes
 * at a time once 80 remain) with one odd token put at every position:
 * packed and plain parses must agree on status, message and values. */
/* Runs around the sizes where pack_run changes course (json_parse.c): a
 * run of 4 KiB (512 numbers) or more joins the arena as its own block and
 * the next array starts a new one, a shorter one is copied and its block
 * reused; the block doubles when 64 numbers short of full (2048 numbers
 * first).  Arrays of those lengths one after another, nested, and ended by
 * a value that turns the run back into nodes, must read as the plain parse
 * does. */
START_TEST(json_packed_run_blocks) {
  if (!use_json_impl(_i)) return;
  static const int lens[] = {1, 63, 64, 511, 512, 513, 1983, 1984, 1985,
                             2048, 4100};
  enum { N_LENS = sizeof lens / sizeof *lens };
  size_t cap = 1 << 20, k;
  char *doc = malloc(cap), ctx[96];
  ck_assert_ptr_nonnull(doc);
  uint64_t rng = 0x51ab;
  for (int form = 0; form < 3; form++) {
    for (int a = 0; a < N_LENS; a++) {
      /* form 0: {"k":[A],"k2":[B],"k":[A]}; 1: {"k":[[A],[B],[A]]};
       * 2: {"k":[A numbers, then "x"]} (the run becomes nodes) */
      int b = (a * 7 + 3) % N_LENS;
      const int seq[3] = {lens[a], lens[b], lens[a]};
      k = (size_t)snprintf(doc, cap, form == 1 ? "{\"k\":[" : "{");
      for (int j = 0; j < (form == 2 ? 1 : 3); j++) {
        if (j) doc[k++] = ',';
        if (form == 0)
          k += (size_t)snprintf(doc + k, cap - k, "\"%s\":",
                                j == 1 ? "k2" : "k");
        if (form == 2) k += (size_t)snprintf(doc + k, cap - k, "\"k\":");
        doc[k++] = '[';
        for (int i = 0; i < seq[j]; i++) {
          uint64_t r = xs64(&rng);
          k += (size_t)snprintf(doc + k, cap - k, "%s%s%u.%06u",
                                i ? "," : "", r & 1 ? "-" : "",
                                (unsigned)(r >> 8) % 10,
                                (unsigned)(r >> 32) % 1000000);
        }
        if (form == 2) k += (size_t)snprintf(doc + k, cap - k, ",\"x\"");
        doc[k++] = ']';
      }
      k += (size_t)snprintf(doc + k, cap - k, form == 1 ? "]}" : "}");
      ck_assert_uint_lt(k, cap);
      snprintf(ctx, sizeof ctx, "%s: form %d, %d / %d numbers", json_impls[_i],
               form, lens[a], lens[b]);
      check_packed_like_plain(doc, k, ATTN_JSON_MAX_NODES, ctx);
    }
  }
  free(doc);
  use_default_json_impl();
}
END_TEST

START_TEST(json_packed_long_runs) {
  if (!use_json_impl(_i)) return;
  static const char *const odd[] = {
      "01",  "1.",   ".5",     "-",     "--1",   "+1",   "1.2.3", "0x1",
      "1e5", "-0",   "1E-2",   "1e+",   "0.0",   "123456789.5",
      "1.123456789", "12345678.12345678", "true", "[1]",  "\"x\"", "null",
      "1 ",  " 1",   "1 ,",    ", 1",   "",      "1]",   "]",     "1,]",
      "9007199254740993", "-0.000001", "1\n", "\t2", "3\r", "1e400",
  };
  enum { COUNT = 40 };
  static const char pad_member[] =
      ",\"z\":\"0123456789012345678901234567890123456789012345678901234567"
      "890123\"}";
  char doc[1024], ctx[96];
  uint64_t rng = 0x1234567;
  for (size_t o = 0; o < sizeof odd / sizeof *odd; o++)
    for (int at = 0; at < COUNT; at++) {
      size_t k = (size_t)snprintf(doc, sizeof doc, "{\"k\":[");
      for (int i = 0; i < COUNT; i++) {
        if (i) doc[k++] = ',';
        if (i == at) {
          k += (size_t)snprintf(doc + k, sizeof doc - k, "%s", odd[o]);
        } else { /* short texts of varied length: "0.5", "-12.375", ... */
          uint64_t r = xs64(&rng);
          k += (size_t)snprintf(doc + k, sizeof doc - k, "%s%u.%0*u",
                                r & 1 ? "-" : "", (unsigned)(r >> 8) % 100,
                                1 + (int)(r >> 20) % 6,
                                (unsigned)(r >> 32) % 1000);
        }
      }
      k += (size_t)snprintf(doc + k, sizeof doc - k, "]}");
      ck_assert_uint_lt(k, sizeof doc);
      snprintf(ctx, sizeof ctx, "odd '%s' at %d", odd[o], at);
      check_packed_like_plain(doc, k, ATTN_JSON_MAX_NODES, ctx);
      /* again with 70 bytes after the array, so that a window holds its
       * ']' and the odd token before it */
      memcpy(doc + k - 1, pad_member, sizeof pad_member);
      check_packed_like_plain(doc, k - 1 + strlen(pad_member),
                              ATTN_JSON_MAX_NODES, ctx);
      doc[k - 1] = '}';
      if (at == 0) /* the node limit inside a run */
        for (size_t cap = 2; cap < COUNT + 3; cap += 3)
          check_packed_like_plain(doc, k, cap, ctx);
      /* and cut short at every byte from the odd token on */
      if (at == COUNT / 2)
        for (size_t cut = k / 2; cut < k; cut++)
          check_packed_like_plain(doc, cut, ATTN_JSON_MAX_NODES, ctx);
    }
  use_default_json_impl();
}
END_TEST

START_TEST(json_packed_like_plain) {
  if (!use_json_impl(_i)) return;
  char ctx[64];
  for (size_t i = 0; i < sizeof packed_docs / sizeof *packed_docs; i++) {
    char *j = unquote(packed_docs[i]);
    snprintf(ctx, sizeof ctx, "packed doc %zu", i);
    check_packed_like_plain(j, strlen(j), ATTN_JSON_MAX_NODES, ctx);
    for (size_t cap = 1; cap < 12; cap++) /* the node limit, everywhere */
      check_packed_like_plain(j, strlen(j), cap, ctx);
    for (size_t cut = 0; cut < strlen(j); cut++) /* every truncation */
      check_packed_like_plain(j, cut, ATTN_JSON_MAX_NODES, ctx);
    free(j);
  }
  /* every syntax case, as a packed member and inside a packed array */
  for (size_t i = 0; i < sizeof json_cases / sizeof *json_cases; i++) {
    const json_case *c = &json_cases[i];
    size_t n = c->len ? c->len : strlen(c->in);
    char *doc = malloc(2 * n + 32);
    ck_assert_ptr_nonnull(doc);
    size_t k = 6;
    memcpy(doc, "{\"k\":[", k);
    for (int rep = 0; rep < 2; rep++) {
      if (rep) doc[k++] = ',';
      for (size_t b = 0; b < n; b++)
        doc[k++] = c->in[b] == '\'' ? '"' : c->in[b];
    }
    memcpy(doc + k, "]}", 2);
    k += 2;
    snprintf(ctx, sizeof ctx, "json case %zu wrapped", i);
    check_packed_like_plain(doc, k, ATTN_JSON_MAX_NODES, ctx);
    free(doc);
  }
  use_default_json_impl();
}
END_TEST

/* A random token for json_packed_random_windows: mostly numbers of the
 * forms the 64-byte windows take (short decimals, integers, -0), often
 * forms they leave to the one-number parser (exponents, 16 or more bytes,
 * 17 significant digits), sometimes something malformed. */
static size_t gen_window_token(char *o, uint64_t *rng, bool allow_bad) {
  static const char *const bad[] = {
      "01", "1.", ".5", "-", "--1", "+1", "1.2.3", "0x1", "-.5", "1..2",
      "00", "-01", "1e", "1e+", "true", "\"a\"", "[1]", "{}", "null", "1-2",
      "0.5.", "1a", "\x01", "\xc3\xa9", "", "-0.", "1.e5",
      /* not JSON whitespace, though near it (VT, FF, 0x19, ')', 0xa0,
       * 0x89: low nibbles of ' ', '\t', '\n', '\r' or a high bit) */
      "\x0b", "\x0c1", "\x19", "1)", "\xa0", "\x89"};
  uint64_t r = xs64(rng);
  unsigned kind = (unsigned)(r % 100);
  size_t n = 0;
  if (kind < 2 && allow_bad) { /* malformed */
    const char *b = bad[(r >> 8) % (sizeof bad / sizeof *bad)];
    n = strlen(b);
    memcpy(o, b, n);
    return n;
  }
  if ((r >> 7) & 1) o[n++] = '-';
  if (kind < 10) { /* integer */
    unsigned nd = 1 + (unsigned)(r >> 12) % 17;
    for (unsigned i = 0; i < nd; i++)
      o[n++] = (char)('0' + (i == 0 && nd > 1 ? 1 + (r >> (20 + i)) % 9
                                              : (xs64(rng) % 10)));
    return n;
  }
  /* decimal: 1..9 integer digits (or "0"), 1..12 fraction digits */
  unsigned ni = (r >> 12) & 1 ? 1 + (unsigned)(r >> 13) % 9 : 0;
  unsigned nf = 1 + (unsigned)(r >> 17) % 12;
  if (ni == 0) o[n++] = '0';
  for (unsigned i = 0; i < ni; i++)
    o[n++] = (char)('0' + (i == 0 ? 1 + xs64(rng) % 9 : xs64(rng) % 10));
  o[n++] = '.';
  for (unsigned i = 0; i < nf; i++) o[n++] = (char)('0' + xs64(rng) % 10);
  if (kind >= 96) /* exponent */
    n += (size_t)snprintf(o + n, 8, "e%s%u", (r >> 30) & 1 ? "-" : "",
                          (unsigned)(r >> 31) % 40);
  return n;
}

/* Random packed arrays against the plain parse, every path: numbers of
 * mixed lengths, separators with and without whitespace, now and then an
 * error (malformed number, missing or doubled comma, trailing comma), a
 * node limit or a truncated body, so that each rule of the 64-byte window
 * (src/json/json_avx512.c, step 2) is met at every offset; a fifth
 * are valid arrays with other values among the numbers (the run becomes
 * nodes where one turns up). */
START_TEST(json_packed_random_windows) {
  if (!use_json_impl(_i)) return;
  static const char *const sep[] = {",", ",", ",", ",", ", ", ", ", " ,",
                                    " , ", ",\n  ", "\t,\r\n", ",,", "",
                                    " ", ", ,"};
  enum { DOCS = 6000 };
  char *doc = malloc(16384);
  ck_assert_ptr_nonnull(doc);
  char ctx[64];
  uint64_t rng = 0xC0FFEE123ull + (uint64_t)_i;
  for (int di = 0; di < DOCS; di++) {
    size_t k = (size_t)snprintf(doc, 8, "{\"k\":[");
    int count = 1 + (int)(xs64(&rng) % 200);
    unsigned cls = (unsigned)(xs64(&rng) % 8);
    bool clean = cls < 5; /* 3/8 get odd separators and tokens */
    bool mixed = cls == 4; /* valid, with other values among the numbers */
    for (int i = 0; i < count; i++) {
      if (i) {
        uint64_t r = xs64(&rng);
        const char *sp = clean ? sep[r % 10] : sep[r % 14];
        if (!clean && r % 61 == 0) sp = sep[10 + (r >> 8) % 4];
        size_t l = strlen(sp);
        memcpy(doc + k, sp, l);
        k += l;
      }
      uint64_t v = xs64(&rng);
      if (mixed && v % 23 == 0) {
        static const char *const other[] = {"true", "null", "\"s\"", "[1,2]",
                                            "{\"a\":1}", "[]", "false"};
        const char *o = other[(v >> 8) % 7];
        memcpy(doc + k, o, strlen(o));
        k += strlen(o);
      } else {
        k += gen_window_token(doc + k, &rng, !clean);
      }
    }
    uint64_t r = xs64(&rng);
    /* half the arrays are followed by 70 more bytes, so that windows meet
     * the closing ']' too */
    k += (size_t)snprintf(doc + k, 120, "%s]%s}",
                          r % 9 == 0 ? " " : r % 97 == 1 && !clean ? "," : "",
                          (r >> 8) & 1 ? ",\"z\":\"0123456789012345678901234"
                                         "5678901234567890123456789012345678"
                                         "9\""
                                       : "");
    ck_assert_uint_lt(k, 16384);
    snprintf(ctx, sizeof ctx, "%s doc %d", json_impls[_i], di);
    check_packed_like_plain(doc, k, ATTN_JSON_MAX_NODES, ctx);
    if (di % 16 == 0) /* a node limit somewhere in the run */
      check_packed_like_plain(doc, k, 1 + xs64(&rng) % (size_t)(count + 2),
                              ctx);
    if (di % 16 == 1) /* cut short */
      check_packed_like_plain(doc, xs64(&rng) % k, ATTN_JSON_MAX_NODES, ctx);
  }
  free(doc);
  use_default_json_impl();
}
END_TEST

/* Every byte value next to, between and inside numbers of a packed array,
 * at several offsets into the windows, against the plain parse: the
 * classes of step 1 (src/json/json_avx512.c), whitespace above all, must
 * be exactly JSON's. */
START_TEST(json_packed_every_byte) {
  if (!use_json_impl(_i)) return;
  static const char *const around[][2] = {
      {"1,", "2"}, {"1", ",2"}, {"1", "2"}, {"1.", "5"}, {"-", "1"}};
  char doc[512], ctx[64];
  for (int b = 0; b < 256; b++)
    for (size_t pi = 0; pi < sizeof around / sizeof *around; pi++)
      for (int before = 0; before < 8; before++) {
        size_t k = (size_t)snprintf(doc, 16, "{\"k\":[");
        for (int i = 0; i < before; i++)
          k += (size_t)snprintf(doc + k, 16, "%d,", 10 + 7 * i);
        k += (size_t)snprintf(doc + k, 8, "%s", around[pi][0]);
        doc[k++] = (char)b;
        k += (size_t)snprintf(doc + k, 200,
                              "%s,-0.25,3.5,-17,0.125,9,-8.75,61,0.5,-2,44,"
                              "0.0625,-3,7.5,-11,0.75,13]}",
                              around[pi][1]);
        snprintf(ctx, sizeof ctx, "%s byte 0x%02x around %zu offset %d",
                 json_impls[_i], b, pi, before);
        check_packed_like_plain(doc, k, ATTN_JSON_MAX_NODES, ctx);
      }
  use_default_json_impl();
}
END_TEST

/* Numbers at the edges of what the 64-byte windows take (15 digits, a
 * token of 15 bytes or 16, '-0', a fraction of leading zeros) and forms
 * they leave to the one-number parser ("01" must fail at the same byte),
 * at every offset into a window, with several separators, and the ']' at
 * every distance from the end of the body (json_avx2.c reads its last
 * windows from a padded copy), against the plain parse, every path. */
START_TEST(json_packed_window_edges) {
  if (!use_json_impl(_i)) return;
  static const char *const edge[] = {"999999999999999",
                                     "-99999999999999",
                                     "100000000000001",
                                     "9.9999999999999",
                                     "-9.999999999999",
                                     "0.0000000000001",
                                     "-0.00000000000001",
                                     "99999999999999.9",
                                     "1234567890123456",
                                     "-0",
                                     "-0.0",
                                     "0",
                                     "-9",
                                     "0.5",
                                     "-1.25",
                                     "01",
                                     "-01",
                                     "1.",
                                     ".5",
                                     "1e5",
                                     "-",
                                     "00",
                                     "0.1.2",
                                     "1,,2",
                                     "9999999999999999"};
  static const char *const sep[] = {",", ", ", "\n,\n", " ,\t"};
  char doc[512], ctx[96];
  for (size_t t = 0; t < sizeof edge / sizeof *edge; t++)
    for (int off = 0; off < 70; off += 3)
      for (size_t si = 0; si < sizeof sep / sizeof *sep; si++) {
        size_t k = (size_t)snprintf(doc, 16, "{\"k\":[");
        /* off bytes of fillers "7," (and one "7" more when off is odd) */
        for (int i = 0; i + 1 < off; i += 2)
          k += (size_t)snprintf(doc + k, 4, "7,");
        if (off & 1) k += (size_t)snprintf(doc + k, 4, "70,");
        for (int rep = 0; rep < 6; rep++)
          k += (size_t)snprintf(doc + k, 64, "%s%s", rep ? sep[si] : "",
                                edge[t]);
        k += (size_t)snprintf(doc + k, 64, "%s-0.482913,0.5]", sep[si]);
        for (int tail = 0; tail < 90; tail += 7) {
          /* tail bytes of a string member after the array */
          size_t n = k;
          if (tail) {
            n += (size_t)snprintf(doc + n, 8, ",\"z\":\"");
            memset(doc + n, 'x', (size_t)tail);
            n += (size_t)tail;
            doc[n++] = '"';
          }
          doc[n++] = '}';
          snprintf(ctx, sizeof ctx, "%s: '%s' x6 at %d, sep %zu, tail %d",
                   json_impls[_i], edge[t], off, si, tail);
          check_packed_like_plain(doc, n, ATTN_JSON_MAX_NODES, ctx);
          if (tail == 0) /* the node limit inside the run */
            for (size_t cap = 2; cap < 40; cap += 5)
              check_packed_like_plain(doc, n, cap, ctx);
        }
      }
  use_default_json_impl();
}
END_TEST

/* The constructor picks the AVX-512 window on a CPU that has what it
 * needs, else the AVX2 one, else SSE2 (every x86-64 has it), and the hook
 * refuses unknown names. */
START_TEST(json_impl_default) {
  const char *want = "scalar";
#if defined(__x86_64__)
  want = "sse2";
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi") &&
      __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("popcnt"))
    want = "avx2";
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512vbmi") &&
      __builtin_cpu_supports("avx512vbmi2") && __builtin_cpu_supports("bmi2"))
    want = "avx512";
#endif
  ck_assert_str_eq(attn__json_impl_name(), want);
  ck_assert_int_eq(attn__json_set_impl("avx1024"), 0);
  ck_assert_str_eq(attn__json_impl_name(), want);
  ck_assert_int_eq(attn__json_set_impl("scalar"), 1);
  ck_assert_str_eq(attn__json_impl_name(), "scalar");
  use_default_json_impl();
  ck_assert_str_eq(attn__json_impl_name(), want);
}
END_TEST

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* attn_json_f64_to_f32 against the obvious loop: every length to 40, a value
 * out of range (or NaN) at every position or nowhere, and the floats. */
START_TEST(f64_to_f32_matches_loop) {
  double v[40];
  float got[40], want[40];
  const double bad[] = {1e39, -3.5e38, (double)FLT_MAX * (1 + 1e-9), NAN,
                        INFINITY};
  unsigned seed = 11;
  for (size_t n = 0; n <= 40; n++)
    for (size_t at = 0; at <= n; at++) { /* at == n: all in range */
      for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        v[i] = ((double)(seed >> 8) - 8388608.0) * 1e-3;
        if (i % 7 == 3) v[i] = (i & 1 ? -1 : 1) * (double)FLT_MAX;
      }
      if (at < n) v[at] = bad[(n + at) % 5];
      size_t k = 0;
      for (; k < n && fabs(v[k]) <= FLT_MAX; k++) want[k] = (float)v[k];
      memset(got, 0, sizeof got);
      ck_assert_uint_eq(attn_json_f64_to_f32(v, n, got), k);
      ck_assert_uint_eq(k, at < n ? at : n);
      ck_assert_int_eq(memcmp(got, want, k * sizeof *got), 0);
    }
}
END_TEST

Suite *codec_suite(void) {
  Suite *s = suite_create("codec");
  TCase *tc = tcase_create("v2_decode");
  tcase_add_loop_test(tc, v2_decode_table, 0, N_OF(v2_cases));
  tcase_add_test(tc, v2_request_fields);
  tcase_add_test(tc, v1_self_attention_views);
  tcase_add_test(tc, v2_binary_equals_json);
  tcase_add_test(tc, depth_limit);
  suite_add_tcase(s, tc);
  tc = tcase_create("v1_decode");
  tcase_add_loop_test(tc, v1_decode_table, 0, N_OF(v1_cases));
  tcase_add_test(tc, v1_ragged_message);
  tcase_add_test(tc, v1_echo_tokens);
  suite_add_tcase(s, tc);
  tc = tcase_create("encode");
  tcase_add_test(tc, v2_encode_json_and_binary);
  tcase_add_test(tc, v2_encode_float_roundtrip);
  tcase_add_test(tc, v2_encode_errors_restore);
  tcase_add_test(tc, v2_metadata);
  tcase_add_test(tc, v1_encode_undoes_slicing);
  tcase_add_test(tc, v1_encode_as_is_and_errors);
  suite_add_tcase(s, tc);
  tc = tcase_create("json_buf");
  tcase_add_loop_test(tc, error_json_table, 0, N_OF(err_cases));
  tcase_add_test(tc, buf_basics);
  tcase_add_test(tc, f64_to_f32_matches_loop);
  tcase_add_test(tc, buf_numbers);
  tcase_add_test(tc, infer_free_partial);
  suite_add_tcase(s, tc);
  tc = tcase_create("json_parse");
  tcase_set_timeout(tc, 120); /* a million numbers, slower under ASan */
  tcase_add_loop_test(tc, json_syntax_table, 0, N_OF(json_cases));
  tcase_add_loop_test(tc, json_escapes_table, 0, N_OF(json_escapes));
  tcase_add_test(tc, json_depth_limit);
  tcase_add_test(tc, json_node_limit);
  tcase_add_test(tc, json_large_values);
  tcase_add_test(tc, json_numbers_match_strtod);
  tcase_add_test(tc, json_long_numbers_match_strtod);
  tcase_add_test(tc, json_short_numbers_match_strtod);
  tcase_add_test(tc, json_same_as_cjson);
  tcase_add_loop_test(tc, json_packed_like_plain, 0, N_OF(json_impls));
  tcase_add_loop_test(tc, json_packed_long_runs, 0, N_OF(json_impls));
  tcase_add_loop_test(tc, json_packed_run_blocks, 0, N_OF(json_impls));
  tcase_add_loop_test(tc, json_packed_random_windows, 0, N_OF(json_impls));
  tcase_add_loop_test(tc, json_packed_every_byte, 0, N_OF(json_impls));
  tcase_add_loop_test(tc, json_packed_window_edges, 0, N_OF(json_impls));
  tcase_add_test(tc, json_impl_default);
  suite_add_tcase(s, tc);
  return s;
}
