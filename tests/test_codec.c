/* test_codec.c - the v2 and v1 codecs (src/codec/) and the error JSON.
 *
 * Decoder cases are tables: (input, expected status, message substring,
 * expected tensors).  JSON in the tables is written with ' for " to stay
 * readable; the runner swaps them back (unquote, unit.h; no case needs a
 * literal ').
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
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "attn/buf.h"
#include "attn/codec.h"
#include "attn/f32fmt.h"
#include "attn/infer_request.h"
#include "unit.h"

/* ---- helpers ------------------------------------------------------------ */

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

    /* 70-81: BYTES, JSON and binary (the values: v2_bytes_decode) */
    {IN1("BYTES", "[3]", "['a','b']"), NULL, 0, 0, -1, ATTN_EINVAL,
     "inputs[0] 'x': data has 2 elements, shape [3] needs 3", NULL, 0, 0},
    {IN1("BYTES", "[2,2]", "[['a','b'],['c']]"), NULL, 0, 0, -1, ATTN_EINVAL,
     "inputs[0] 'x': data[1] has 1 elements, shape [2,2] needs 2 at dim 1",
     NULL, 0, 0},
    {IN1("BYTES", "[2]", "['a',1]"), NULL, 0, 0, -1, ATTN_EINVAL,
     "inputs[0] 'x': data[1] is a number, expected a string (BYTES)", NULL, 0,
     0},
    {IN1("BYTES", "[2]", "[1,2]"), NULL, 0, 0, -1, ATTN_EINVAL,
     "inputs[0] 'x': data[0] is a number, expected a string (BYTES)", NULL, 0,
     0},
    {IN1("BYTES", "[2]", "['a',null]"), NULL, 0, 0, -1, ATTN_EINVAL,
     "data[1] is null, expected a string (BYTES)", NULL, 0, 0},
    {"{'inputs':[{'name':'s','datatype':'BYTES','shape':[2],"
     "'parameters':{'binary_data_size':9}}]}",
     BIN("\x01\x00\x00\x00"
         "a"
         "\x09\x00\x00\x00"),
     0, -1, ATTN_EINVAL,
     "inputs[0] 's': element 1's length 9 runs past the end of the binary "
     "data (0 bytes left at offset 9 of 9)",
     NULL, 0, 0},
    {"{'inputs':[{'name':'s','datatype':'BYTES','shape':[2],"
     "'parameters':{'binary_data_size':10}}]}",
     BIN("\x01\x00\x00\x00"
         "a"
         "\xff\xff\xff\xff"
         "b"),
     0, -1, ATTN_EINVAL,
     "inputs[0] 's': element 1's length 4294967295 runs past the end", NULL, 0,
     0},
    {"{'inputs':[{'name':'s','datatype':'BYTES','shape':[1],"
     "'parameters':{'binary_data_size':7}}]}",
     BIN("\x01\x00\x00\x00"
         "abc"),
     0, -1, ATTN_EINVAL,
     "inputs[0] 's': 2 bytes follow the 1 elements of shape [1] in the binary "
     "data (binary_data_size 7)",
     NULL, 0, 0},
    {"{'inputs':[{'name':'s','datatype':'BYTES','shape':[3],"
     "'parameters':{'binary_data_size':10}}]}",
     BIN("\x01\x00\x00\x00"
         "a"
         "\x01\x00\x00\x00"
         "b"),
     0, -1, ATTN_EINVAL,
     "inputs[0] 's': binary data holds 2 elements, shape [3] needs 3", NULL, 0,
     0},
    {"{'inputs':[{'name':'s','datatype':'BYTES','shape':[2],"
     "'parameters':{'binary_data_size':6}}]}",
     BIN("\x00\x00\x00\x00"
         "\x01\x00"),
     0, -1, ATTN_EINVAL,
     "inputs[0] 's': binary data ends inside element 1's 4-byte length (2 "
     "bytes left at offset 4)",
     NULL, 0, 0},
    /* the blob is laid out by binary_data_size: past the body's end */
    {"{'inputs':[{'name':'s','datatype':'BYTES','shape':[1],"
     "'parameters':{'binary_data_size':8}}]}",
     BIN("\x01\x00\x00\x00"
         "a"),
     0, -1, ATTN_EINVAL, "inputs[0] 's': binary data of 8 bytes at offset",
     NULL, 0, 0},
    {IN1("BYTES", "[4097]", "[]"), NULL, 0, 0, -1, ATTN_ETOOBIG,
     "shape [4097] has 4097 elements, above the limit of 4096", NULL, 4096, 0},

    /* 82-89: Triton's sequence parameters (the values: v2_sequence_params) */
    {"{'inputs':[],'parameters':{'sequence_id':-1}}", NULL, 0, 0, -1,
     ATTN_EINVAL,
     "parameters: sequence_id must be a string or an unsigned integer, got -1 "
     "(negative)",
     NULL, 0, 0},
    {"{'inputs':[],'parameters':{'sequence_id':1.5}}", NULL, 0, 0, -1,
     ATTN_EINVAL,
     "sequence_id must be a string or an unsigned integer, got 1.5 (not an "
     "integer)",
     NULL, 0, 0},
    {"{'inputs':[],'parameters':{'sequence_id':true}}", NULL, 0, 0, -1,
     ATTN_EINVAL,
     "sequence_id must be a string or an unsigned integer, got a boolean", NULL,
     0, 0},
    {"{'inputs':[],'parameters':{'sequence_id':18446744073709551616}}", NULL, 0,
     0, -1, ATTN_EINVAL,
     "sequence_id must be a string or an unsigned integer, got a number "
     "above 2^64 - 1",
     NULL, 0, 0},
    {"{'inputs':[],'parameters':{'sequence_id':1e19}}", NULL, 0, 0, -1,
     ATTN_EINVAL, "above 2^53 - 1: write it in plain digits", NULL, 0, 0},
    {"{'inputs':[],'parameters':{'sequence_id':-0.0}}", NULL, 0, 0, -1,
     ATTN_EINVAL, "got -0 (negative)", NULL, 0, 0},
    {"{'inputs':[],'parameters':{'sequence_start':1}}", NULL, 0, 0, -1,
     ATTN_EINVAL,
     "parameters: 'sequence_start' must be a boolean, got a number", NULL, 0,
     0},
    {"{'inputs':[],'parameters':{'sequence_end':'true'}}", NULL, 0, 0, -1,
     ATTN_EINVAL, "parameters: 'sequence_end' must be a boolean, got a string",
     NULL, 0, 0},
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
    {"{'query':[[[1,2]]],'attn_mask':[[[[-1e30]]]],"
     "'key_padding_mask':[[true]]}",
     ATTN_OK, NULL, "sdpa",
     "query:FP32[1,1,1,2]=1,2;key:FP32[1,1,1,2]=1,2;value:FP32[1,1,1,2]=1,2;"
     "attn_mask:FP32[1,1,1,1]=-1e30;key_padding_mask:BOOL[1,1]=1",
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
    {"{'query':[[1,2,3]],'num_heads':2}", ATTN_ESHAPE,
     "'query' has 3 columns, not a multiple of num_heads 2", NULL, NULL, NULL,
     0, 0, 0, 0},
    {"{'query':[[1,2]],'key':[[1,2,3]],'num_heads':2}", ATTN_ESHAPE,
     "'key' has 3 columns where 'query' has 2", NULL, NULL, NULL, 0, 0, 0, 0},
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
     "'causal' must be true, false, \"bottom_right\" or \"top_left\", got "
     "a number",
     NULL, NULL, NULL, 0, 0, 0, 0},
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
                    "input %d differs between JSON and binary (offset %zu)", k,
                    off);
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

/* t is a BYTES tensor of the n elements want[k] (lengths len[k]). */
static void check_bytes(const attn_tensor *t, const char *const *want,
                        const size_t *len, size_t n, const char *ctx) {
  const char *e;
  size_t el;
  ck_assert_msg(t->dtype == ATTN_DT_BYTES, "%s: dtype %s", ctx,
                attn_dtype_name(t->dtype));
  for (size_t k = 0; k < n; k++) {
    ck_assert_msg(attn_tensor_bytes_at(t, (int64_t)k, &e, &el) == ATTN_OK,
                  "%s: no element %zu", ctx, k);
    ck_assert_msg(el == len[k] && memcmp(e, want[k], el) == 0 && e[el] == 0,
                  "%s: element %zu is '%.*s' (%zu bytes), expected '%s'", ctx,
                  k, (int)el, e, el, want[k]);
  }
  ck_assert_int_eq(attn_tensor_bytes_at(t, (int64_t)n, &e, &el), ATTN_EINVAL);
}

/* BYTES as tritonclient sends it: JSON strings (flat or nested), and
 * binary (a 4-byte little-endian length, then the bytes, per element),
 * next to other inputs; empty strings, UTF-8, NULs in binary elements. */
START_TEST(v2_bytes_decode) {
  static const char *const want[] = {"sess-1", "", "h\xc3\xa9llo \xe6\x97\xa5",
                                     "\"q\"\n"};
  static const size_t len[] = {6, 0, 10, 4};
  attn_infer_request r;
  attn_diag d = {{0}};
  char *json = unquote(
      "{'inputs':[{'name':'session_id','datatype':'BYTES','shape':[4],"
      "'data':['sess-1','','h\\u00e9llo \xe6\x97\xa5','\\'q\\'\\n']},"
      "{'name':'position','datatype':'INT64','shape':[4],'data':[0,1,2,3]}]}");
  ck_assert_msg(attn_v2_decode(json, strlen(json), 0, NULL, &r, &d) == ATTN_OK,
                "%s", d.msg);
  ck_assert_int_eq(r.n_inputs, 2);
  ck_assert_int_eq(r.inputs[0].wire_dtype, ATTN_DT_BYTES);
  ck_assert_int_eq(r.inputs[0].tensor.rank, 1);
  ck_assert_int_eq(r.inputs[0].tensor.shape[0], 4);
  check_bytes(&r.inputs[0].tensor, want, len, 4, "BYTES JSON");
  attn_infer_request_free(&r);
  free(json);

  /* nested by the shape, and rank 0 */
  json = unquote(
      "{'inputs':[{'name':'s','datatype':'BYTES','shape':[2,2],"
      "'data':[['sess-1',''],['h\xc3\xa9llo \xe6\x97\xa5','\\'q\\'\\n']]},"
      "{'name':'one','datatype':'BYTES','shape':[],'data':['sess-1']}]}");
  ck_assert_msg(attn_v2_decode(json, strlen(json), 0, NULL, &r, &d) == ATTN_OK,
                "%s", d.msg);
  check_bytes(&r.inputs[0].tensor, want, len, 4, "BYTES nested");
  check_bytes(&r.inputs[1].tensor, want, len, 1, "BYTES rank 0");
  attn_infer_request_free(&r);
  free(json);

  /* binary: the same strings, then one with NULs, then an FP32 blob after
   * it at every alignment the BYTES blob's length gives */
  static const char *const bwant[] = {"sess-1", "", "h\xc3\xa9llo \xe6\x97\xa5",
                                      "\"q\"\n", "a\0b\0"};
  static const size_t blen[] = {6, 0, 10, 4, 4};
  attn_buf b;
  attn_buf_init(&b, 0);
  attn_buf_puts(&b,
                "{\"inputs\": [{\"name\": \"session_id\", \"shape\": [5], "
                "\"datatype\": \"BYTES\", \"parameters\": "
                "{\"binary_data_size\": 44}}, {\"name\": \"q\", "
                "\"shape\": [2], \"datatype\": \"FP32\", \"parameters\": "
                "{\"binary_data_size\": 8}}]}");
  size_t hl = b.len;
  for (size_t k = 0; k < 5; k++) {
    unsigned char le[4] = {(unsigned char)blen[k], 0, 0, 0};
    attn_buf_append(&b, le, 4);
    attn_buf_append(&b, bwant[k], blen[k]);
  }
  ck_assert_int_eq(b.len - hl, 44);
  float q[2] = {1.5f, -2.0f};
  attn_buf_append(&b, q, sizeof q);
  ck_assert_msg(attn_v2_decode(b.data, b.len, hl, NULL, &r, &d) == ATTN_OK,
                "%s", d.msg);
  check_bytes(&r.inputs[0].tensor, bwant, blen, 5, "BYTES binary");
  ck_assert(r.inputs[0].tensor.owns);
  ck_assert(((float *)r.inputs[1].tensor.data)[1] == -2.0f);
  attn_infer_request_free(&r);

  /* no elements: shape [0] with an empty blob, and with [] */
  attn_buf_free(&b);
  attn_buf_init(&b, 0);
  attn_buf_puts(&b,
                "{\"inputs\":[{\"name\":\"s\",\"shape\":[0],"
                "\"datatype\":\"BYTES\",\"parameters\":"
                "{\"binary_data_size\":0}},{\"name\":\"t\",\"shape\":[2,0],"
                "\"datatype\":\"BYTES\",\"data\":[]}]}");
  ck_assert_msg(attn_v2_decode(b.data, b.len, b.len, NULL, &r, &d) == ATTN_OK,
                "%s", d.msg);
  check_bytes(&r.inputs[0].tensor, NULL, NULL, 0, "BYTES empty binary");
  check_bytes(&r.inputs[1].tensor, NULL, NULL, 0, "BYTES empty JSON");
  attn_infer_request_free(&r);
  attn_buf_free(&b);
}
END_TEST

/* Binary BF16 is widened in a loop of its own (kserve_v2.c fill_binary,
 * written to vectorise): every one of the 65536 bit patterns, at an odd
 * offset in the body (no alignment), against attn_bf16_to_f32 bit for bit,
 * and the FP16 beside it against attn_f16_to_f32. */
START_TEST(v2_binary_half_widening) {
  static const char *const types[2] = {"BF16", "FP16"};
  for (int ty = 0; ty < 2; ty++) {
    attn_infer_request r = {0};
    attn_diag d = {{0}};
    attn_buf b;
    attn_buf_init(&b, 0);
    attn_buf_printf(&b,
                    "{\"inputs\":[{\"name\":\"pad\",\"shape\":[1],"
                    "\"datatype\":\"BOOL\",\"parameters\":"
                    "{\"binary_data_size\":1}},{\"name\":\"x\","
                    "\"shape\":[65536],\"datatype\":\"%s\",\"parameters\":"
                    "{\"binary_data_size\":131072}}]}",
                    types[ty]);
    size_t hl = b.len;
    unsigned char one = 1;
    attn_buf_append(&b, &one, 1);
    for (uint32_t h = 0; h < 65536; h++) {
      unsigned char le[2] = {(unsigned char)(h & 255), (unsigned char)(h >> 8)};
      attn_buf_append(&b, le, 2);
    }
    ck_assert_msg(attn_v2_decode(b.data, b.len, hl, NULL, &r, &d) == ATTN_OK,
                  "%s", d.msg);
    const attn_tensor *t = &r.inputs[1].tensor;
    ck_assert_int_eq(t->dtype, ATTN_DT_FP32);
    for (uint32_t h = 0; h < 65536; h++) {
      float want =
          ty ? attn_f16_to_f32((uint16_t)h) : attn_bf16_to_f32((uint16_t)h);
      uint32_t a, w;
      memcpy(&a, (const float *)t->data + h, 4);
      memcpy(&w, &want, 4);
      ck_assert_msg(a == w, "%s 0x%04x: 0x%08x, want 0x%08x", types[ty],
                    (unsigned)h, (unsigned)a, (unsigned)w);
    }
    attn_infer_request_free(&r);
    attn_buf_free(&b);
  }
}
END_TEST

/* Triton's sequence parameters as tritonclient.http writes them (json.dumps:
 * ", " and ": ", the parameters after the inputs): sequence_id as a uint64
 * kept exactly, or a string; sequence_start and sequence_end booleans; the
 * session's own parameters passed on. */
START_TEST(v2_sequence_params) {
  static const struct {
    const char *id; /* the JSON text of sequence_id */
    int type;       /* ATTN_PARAM_INT or _STRING */
    const char *s;  /* p->s */
    uint64_t u;     /* (uint64_t)p->i for INT */
  } cases[] = {
      {"18446744073709551615", ATTN_PARAM_INT, "18446744073709551615",
       UINT64_MAX},
      {"9223372036854775808", ATTN_PARAM_INT, "9223372036854775808",
       (uint64_t)1 << 63},
      {"9223372036854775807", ATTN_PARAM_INT, "9223372036854775807", INT64_MAX},
      /* 2^53 + 1 parses as the double 2^53: the digits are read instead */
      {"9007199254740993", ATTN_PARAM_INT, "9007199254740993",
       9007199254740993u},
      {"9007199254740991", ATTN_PARAM_INT, "9007199254740991",
       9007199254740991u},
      {"42", ATTN_PARAM_INT, "42", 42},
      {"0", ATTN_PARAM_INT, "0", 0},
      {"\"chat-7\"", ATTN_PARAM_STRING, "chat-7", 0},
      {"\"18446744073709551616\"", ATTN_PARAM_STRING, "18446744073709551616",
       0},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    for (int form = 0; form < 3; form++) {
      attn_buf b;
      attn_infer_request r;
      attn_diag d = {{0}};
      char ctx[64];
      snprintf(ctx, sizeof ctx, "sequence case %zu form %d", c, form);
      attn_buf_init(&b, 0);
      if (form == 2) attn_buf_puts(&b, "\xef\xbb\xbf"); /* a BOM */
      if (form == 1) /* parameters first, and the key not first in them */
        attn_buf_printf(&b,
                        "{\"parameters\":{\"layer\":1,\"sequence_id\":%s},"
                        "\"inputs\":[]}",
                        cases[c].id);
      else
        attn_buf_printf(
            &b,
            "{\"inputs\": [{\"name\": \"session_id\", \"shape\": [1], "
            "\"datatype\": \"BYTES\", \"data\": [\"x\"]}, {\"name\": "
            "\"query\", \"shape\": [1, 1, 2, 2], \"datatype\": \"FP32\", "
            "\"data\": [1.0, 2.0, 3.0, 4.0]}], \"outputs\": [{\"name\": "
            "\"attn_output\", \"parameters\": {\"binary_data\": true}}], "
            "\"parameters\": {\"sequence_id\": %s, \"sequence_start\": true, "
            "\"sequence_end\": false, \"layers\": 2, \"max_tokens\": 64, "
            "\"kv_dtype\": \"bf16\", \"layer\": 1}}",
            cases[c].id);
      ck_assert_msg(attn_v2_decode(b.data, b.len, 0, NULL, &r, &d) == ATTN_OK,
                    "%s: %s", ctx, d.msg);
      const attn_param *p = attn_infer_find_param(&r, "sequence_id");
      ck_assert_msg(p != NULL, "%s: no sequence_id", ctx);
      ck_assert_int_eq(p->type, cases[c].type);
      ck_assert_str_eq(p->s, cases[c].s);
      if (p->type == ATTN_PARAM_INT)
        ck_assert_msg((uint64_t)p->i == cases[c].u, "%s: i is %llu", ctx,
                      (unsigned long long)(uint64_t)p->i);
      ck_assert_uint_eq(r.n_params, form == 1 ? 2 : 7);
      if (form != 1) {
        ck_assert(attn_infer_find_param(&r, "sequence_start")->b);
        ck_assert(!attn_infer_find_param(&r, "sequence_end")->b);
        ck_assert_int_eq(attn_infer_find_param(&r, "layers")->i, 2);
        ck_assert_int_eq(attn_infer_find_param(&r, "max_tokens")->i, 64);
        ck_assert_str_eq(attn_infer_find_param(&r, "kv_dtype")->s, "bf16");
        check_bytes(&r.inputs[0].tensor, (const char *const[]){"x"},
                    (const size_t[]){1}, 1, ctx);
      }
      attn_infer_request_free(&r);
      attn_buf_free(&b);
    }
  }
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
  attn_model_meta m = {"tiny", versions, 1, "attnd", in, 2, outm, 1, NULL};
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
  m.parameters = "{\"request_parameters\":\"scale\"}"; /* written as is */
  ck_assert_int_eq(attn_v2_encode_model_metadata(&b, &m), ATTN_OK);
  cJSON *j = cJSON_Parse(b.data);
  ck_assert_ptr_nonnull(j);
  const cJSON *pj = cJSON_GetObjectItemCaseSensitive(j, "parameters");
  ck_assert_str_eq(
      cJSON_GetObjectItemCaseSensitive(pj, "request_parameters")->valuestring,
      "scale");
  cJSON_Delete(j);
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

START_TEST(v1_models_list) {
  const attn_v1_model_entry m[] = {
      {.name = "sdpa", .version = "1", .kind = "sdpa", .description = "d\""},
      {.name = "r",
       .kind = "resident",
       .embed_dim = 16,
       .num_heads = 4,
       .num_kv_heads = 2,
       .kdim = 8,
       .vdim = 12,
       .precision = "bf16",
       .weight_bytes = 4352,
       .fixed = "{\"causal\":\"bottom_right\"}"},
      {.name = "bare"},
  };
  attn_buf b;
  attn_buf_init(&b, 0);
  ck_assert_int_eq(attn_v1_encode_models(&b, m, 3), ATTN_OK);
  ck_assert_str_eq(
      b.data,
      "{\"models\":[{\"name\":\"sdpa\",\"version\":\"1\",\"kind\":\"sdpa\","
      "\"description\":\"d\\\"\"},{\"name\":\"r\",\"version\":\"1\","
      "\"kind\":\"resident\",\"embed_dim\":16,\"num_heads\":4,"
      "\"num_kv_heads\":2,\"kdim\":8,\"vdim\":12,\"precision\":\"bf16\","
      "\"weight_bytes\":4352,\"fixed\":{\"causal\":\"bottom_right\"}},"
      "{\"name\":\"bare\",\"version\":\"1\",\"kind\":\"\"}]}");
  b.len = 0;
  ck_assert_int_eq(attn_v1_encode_models(&b, NULL, 0), ATTN_OK);
  ck_assert_str_eq(b.data, "{\"models\":[]}");
  attn_buf_free(&b);
  attn_buf_init(&b, 60); /* full: nothing left of the attempt */
  ck_assert_int_eq(attn_v1_encode_models(&b, m, 3), ATTN_ETOOBIG);
  ck_assert_int_eq(b.len, 0);
  attn_buf_free(&b);
}
END_TEST

/* The bodies of the decoder tables that parse, through attn_json_parse
 * and cJSON alike (check_like_cjson, test_json.c). */
START_TEST(bodies_parse_like_cjson) {
  char ctx[48];
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

/* ---- v2: the timeout peeked at before the decode ------------------------ */

static int64_t peek_us(const char *json) {
  return attn_v2_peek_timeout(json, strlen(json), 0);
}

START_TEST(v2_peek_timeout) {
  ck_assert_int_eq(peek_us("{\"parameters\": {\"timeout\": 200000}}"), 200000);
  ck_assert_int_eq(
      peek_us("{\"id\": \"a\\\"timeout\\\"\", \"inputs\": [{\"name\":"
              " \"q\", \"data\": [1, [2, {}], \"]}\"]}], "
              "\"parameters\" : { \"priority\": 1, \"timeout\" :0 } }"),
      0);
  /* only the top level's parameters count */
  ck_assert_int_eq(
      peek_us("{\"inputs\": [{\"parameters\": {\"timeout\": 5}}]}"), -1);
  ck_assert_int_eq(peek_us("{\"timeout\": 5}"), -1);
  ck_assert_int_eq(peek_us("{\"parameters\": {\"timeout\": -5}}"), -1);
  ck_assert_int_eq(peek_us("{\"parameters\": {\"timeout\": 1.5}}"), -1);
  ck_assert_int_eq(peek_us("{\"parameters\": {\"timeout\": \"5\"}}"), -1);
  ck_assert_int_eq(peek_us("{\"parameters\": {\"timeout\": 5"), 5);
  ck_assert_int_eq(peek_us("{\"parameters\": {\"timeout\""), -1);
  ck_assert_int_eq(peek_us("{\"parameters\" {\"timeout\": 5}}"), -1);
  ck_assert_int_eq(peek_us("[\"timeout\"]"), -1);
  ck_assert_int_eq(peek_us(""), -1);
  /* a huge number is cut short, never overflows */
  ck_assert_int_eq(
      peek_us("{\"parameters\": {\"timeout\": 99999999999999999999999}}"), -1);
  /* a binary body: only its JSON header, header_len bytes, is read */
  const char bin[] = "{\"parameters\":{\"timeout\":7}}\x00\xff\"timeout\"";
  ck_assert_int_eq(attn_v2_peek_timeout(bin, sizeof bin - 1, strlen(bin)), 7);
  ck_assert_int_eq(attn_v2_peek_timeout(bin, sizeof bin - 1, 0), 7);
  ck_assert_int_eq(attn_v2_peek_timeout(bin, sizeof bin - 1, 20), -1);
  /* a header length past the body: the body (as attn_v2_decode refuses) */
  ck_assert_int_eq(attn_v2_peek_timeout(bin, 20, 40), -1);
  /* a long body: found at its end (where tritonclient puts parameters),
   * not in its middle (left to the decode) */
  char big[4096];
  int k = snprintf(big, sizeof big, "{\"inputs\": [%*s], ", 3000, "");
  snprintf(big + k, sizeof big - (size_t)k,
           "\"parameters\": {\"timeout\": 42}}");
  ck_assert_int_eq(peek_us(big), 42);
  k = snprintf(big, sizeof big, "{\"id\": \"%*s\", ", 1000, "");
  k += snprintf(big + k, sizeof big - (size_t)k,
                "\"parameters\": {\"timeout\": 42}, ");
  snprintf(big + k, sizeof big - (size_t)k, "\"inputs\": [%*s]}", 1000, "");
  ck_assert_int_eq(peek_us(big), -1);
}
END_TEST

/* Where the peek finds a timeout, the decode reads the same one. */
START_TEST(v2_peek_agrees_with_decode) {
  static const char *const bodies[] = {
      "{'inputs': [], 'parameters': {'timeout': 0}}",
      "{'parameters': {'priority': 2, 'timeout': 1500}, 'inputs': []}",
      "{'id': 'x', 'inputs': [{'name': 'q', 'datatype': 'FP32', 'shape': "
      "[1], 'data': [1]}], 'parameters': {'timeout': 9007199254740991}}",
  };
  for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++) {
    char *j = unquote(bodies[i]);
    attn_infer_request r;
    attn_diag d = {{0}};
    ck_assert_int_eq(attn_v2_decode(j, strlen(j), 0, NULL, &r, &d), ATTN_OK);
    int64_t peeked = attn_v2_peek_timeout(j, strlen(j), 0);
    ck_assert_msg(peeked >= 0, "%s: not found", j);
    ck_assert_int_eq(peeked, r.timeout_us);
    attn_infer_request_free(&r);
    free(j);
  }
}
END_TEST

/* ---- v2: the model repository's bodies and answers ---------------------- */

#define RI ATTN_V2_REPO_INDEX
#define RL ATTN_V2_REPO_LOAD
#define RU ATTN_V2_REPO_UNLOAD
#define NOT_SUPPORTED                                                    \
  "' is not supported: attnd loads a model from its file in the models " \
  "directory (edit the file, then load)"

/* The messages are what repo.c answered before the codec read these
 * bodies (tests/integration/test_repository.py checks some of them). */
static const struct {
  attn_v2_repo_op op;
  const char *json;
  attn_status st;
  const char *msg; /* the whole message, or for st OK "ready" or "" */
} repo_cases[] = {
    {RI, "", ATTN_OK, ""},
    {RI, " \t\r\n ", ATTN_OK, ""},
    {RI, "{}", ATTN_OK, ""},
    {RI, "{'ready': true}", ATTN_OK, "ready"},
    {RI, " {'ready' : false} ", ATTN_OK, ""},
    {RI, "{'ready': true, 'ready': 1}", ATTN_OK, "ready"}, /* the first */
    {RI, "{'ready': 'yes'}", ATTN_EINVAL,
     "index: 'ready' must be true or false"},
    {RI, "{'ready': null}", ATTN_EINVAL,
     "index: 'ready' must be true or false"},
    {RI, "{'colour': 1, 'ready': 'yes'}", ATTN_EINVAL,
     "index: unknown key 'colour'"},
    {RI, "{'config': 1}", ATTN_EINVAL, "index: 'config" NOT_SUPPORTED},
    {RI, "[1]", ATTN_EINVAL,
     "the body of POST /v2/repository/index must be a JSON object (or "
     "empty)"},
    {RI, "{", ATTN_EPARSE,
     "the body of POST /v2/repository/index must be a JSON object (or "
     "empty)"},
    {RI, "{'ready': true} {}", ATTN_EPARSE,
     "the body of POST /v2/repository/index must be a JSON object (or "
     "empty)"},
    {RL, "", ATTN_OK, ""},
    {RL, "{}", ATTN_OK, ""},
    {RL, "{'parameters': {}}", ATTN_OK, ""},
    {RL, "{'parameters': {'config': '{}'}}", ATTN_EINVAL,
     "load: parameters: 'config" NOT_SUPPORTED},
    {RL, "{'parameters': {'file:1/model.onnx': 'AAAA'}}", ATTN_EINVAL,
     "load: parameters: 'file:1/model.onnx" NOT_SUPPORTED},
    {RL, "{'config': {}}", ATTN_EINVAL, "load: 'config" NOT_SUPPORTED},
    {RL, "{'parameters': {'unload_dependents': true}}", ATTN_EINVAL,
     "load: parameters: unknown key 'unload_dependents'"},
    {RL, "{'parameters': [], 'x': 1}", ATTN_EINVAL, "load: unknown key 'x'"},
    {RL, "{'parameters': 3}", ATTN_EINVAL,
     "load: parameters must be a JSON object"},
    {RL, "'x'", ATTN_EINVAL,
     "the body of a load must be a JSON object (or empty)"},
    {RU, "{'parameters': {'unload_dependents': true}}", ATTN_OK, ""},
    {RU, "{'parameters': {'unload_dependents': [1]}}", ATTN_OK, ""},
    {RU, "{'parameters': {'cascade': true}}", ATTN_EINVAL,
     "unload: parameters: unknown key 'cascade'"},
    {RU, "{'parameters': null}", ATTN_EINVAL,
     "unload: parameters must be a JSON object"},
    {RU, "null", ATTN_EINVAL,
     "the body of an unload must be a JSON object (or empty)"},
    /* a long key is cut at 64 bytes in the message */
    {RU,
     "{'k123456789012345678901234567890123456789012345678901234567890123"
     "45678': 1}",
     ATTN_EINVAL,
     "unload: unknown key "
     "'k123456789012345678901234567890123456789012345678901234567890123'"},
    {RI, "{'a': [[[[[[[[1]]]]]]]]}", ATTN_EINVAL,
     "the body of POST /v2/repository/index: JSON nested deeper than 8 "
     "levels at byte 13"},
};

START_TEST(v2_repo_decode_table) {
  char *j = unquote(repo_cases[_i].json);
  attn_v2_repo_request r;
  attn_diag d = {{0}};
  memset(&r, 0xab, sizeof r);
  attn_status st =
      attn_v2_decode_repository(j, strlen(j), repo_cases[_i].op, &r, &d);
  ck_assert_msg(st == repo_cases[_i].st, "case %d %s: %s, expected %s: %s", _i,
                j, attn_status_name(st), attn_status_name(repo_cases[_i].st),
                d.msg);
  if (st == ATTN_OK)
    ck_assert_int_eq(r.ready, strcmp(repo_cases[_i].msg, "ready") == 0);
  else
    ck_assert_str_eq(d.msg, repo_cases[_i].msg);
  if (st != ATTN_OK) ck_assert_int_eq(r.ready, 0); /* zeroed */
  free(j);
}
END_TEST

/* n bytes: pre, then fill repeated, then post (n >= both). */
static char *filled(size_t n, const char *pre, const char *fill,
                    const char *post) {
  char *b = malloc(n + 1);
  ck_assert_ptr_nonnull(b);
  size_t a = strlen(pre), z = strlen(post), f = strlen(fill);
  memcpy(b, pre, a);
  for (size_t i = a; i < n - z; i++) b[i] = fill[(i - a) % f];
  memcpy(b + n - z, post, z);
  b[n] = '\0';
  return b;
}

/* The limits: a body past ATTN_MAX_REPO_BODY_BYTES is refused unread, and
 * one within it that nests deep or holds many values is refused at the
 * limit; a body of NULs is not blank. */
START_TEST(v2_repo_decode_limits) {
  attn_v2_repo_request r;
  attn_diag d = {{0}};
  const size_t max = ATTN_MAX_REPO_BODY_BYTES;
  char *b = filled(max, "", " ", "");
  ck_assert_int_eq(attn_v2_decode_repository(b, max, RI, &r, &d), ATTN_OK);
  free(b);
  b = filled(max + 1, "{", " ", "}");
  ck_assert_int_eq(attn_v2_decode_repository(b, max + 1, RL, &r, &d),
                   ATTN_ETOOBIG);
  ck_assert_str_eq(d.msg,
                   "the body of a load is 65537 bytes, above the limit of "
                   "65536 (it takes a few keys)");
  free(b);
  b = filled(max, "{\"a\":", "[", "");
  ck_assert_int_eq(attn_v2_decode_repository(b, max, RU, &r, &d), ATTN_EINVAL);
  ck_assert_ptr_nonnull(strstr(d.msg, "nested deeper than 8 levels"));
  free(b);
  b = filled(max, "{\"a\":[", "0,", "0]}");
  ck_assert_int_eq(attn_v2_decode_repository(b, max, RI, &r, &d), ATTN_EINVAL);
  ck_assert_str_eq(d.msg,
                   "the body of POST /v2/repository/index holds more than "
                   "256 JSON values (it takes a few keys)");
  free(b);
  ck_assert_int_eq(attn_v2_decode_repository("\0\0", 2, RI, &r, &d),
                   ATTN_EPARSE);
  ck_assert_int_eq(attn_v2_decode_repository(NULL, 0, RU, &r, &d), ATTN_OK);
  ck_assert_int_eq(
      attn_v2_decode_repository("{}", 2, (attn_v2_repo_op)7, &r, &d),
      ATTN_EINVAL);
}
END_TEST

#if !defined(__SANITIZE_ADDRESS__) /* its one user is skipped under ASan */
/* VmData of this process, bytes (0 when unknown). */
static size_t vm_data(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  size_t kb = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmData: %zu kB", &kb) == 1) break;
  if (f) fclose(f);
  return kb * 1024;
}
#endif

/* Hostile bodies are refused without a large allocation: in a child whose
 * data segment may grow by only 4 MiB (RLIMIT_DATA), a 48 MiB body (it
 * took cJSON to 2 GB: issue 39), and 64 KiB ones of brackets, of numbers
 * and of one long string are each refused with their own status (an
 * allocation past the limit would be ENOMEM instead). */
START_TEST(v2_repo_decode_small_memory) {
#if defined(__SANITIZE_ADDRESS__)
  UNIT_SKIPPED("data limit under AddressSanitizer");
#else
  const size_t max = ATTN_MAX_REPO_BODY_BYTES, huge = (size_t)48 << 20;
  char *bodies[] = {filled(huge, "{\"a\":[", "0,", "0]}"),
                    filled(max, "", "[", ""), filled(max, "[", "0,", "0]"),
                    filled(max, "{\"", "x", "\":1}")};
  const size_t lens[] = {huge, max, max, max};
  const attn_status want[] = {ATTN_ETOOBIG, ATTN_EINVAL, ATTN_EINVAL,
                              ATTN_EINVAL};
  size_t base = vm_data();
  ck_assert_uint_gt(base, 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    struct rlimit rl = {base + ((size_t)4 << 20), base + ((size_t)4 << 20)};
    if (setrlimit(RLIMIT_DATA, &rl)) _exit(2);
    for (int i = 0; i < 4; i++) {
      attn_v2_repo_request r;
      attn_diag d = {{0}};
      if (attn_v2_decode_repository(bodies[i], lens[i], RL, &r, &d) != want[i])
        _exit(10 + i);
    }
    _exit(0);
  }
  int status = 0;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                "child: %d (10 + the body that was not refused as expected)",
                WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  for (int i = 0; i < 4; i++) free(bodies[i]);
#endif
}
END_TEST

START_TEST(v2_repo_encode) {
  const attn_v2_repo_entry e[] = {
      {"sdpa", "1", true, NULL},
      {"demo", "", false, "unloaded"},
      {"q\"x", NULL, false, NULL},
  };
  attn_buf b;
  attn_buf_init(&b, 0);
  ck_assert_int_eq(attn_v2_encode_repository_index(&b, e, 3), ATTN_OK);
  ck_assert_str_eq(b.data,
                   "[{\"name\":\"sdpa\",\"version\":\"1\",\"state\":\"READY\"},"
                   "{\"name\":\"demo\",\"state\":\"UNAVAILABLE\",\"reason\":"
                   "\"unloaded\"},{\"name\":\"q\\\"x\",\"state\":"
                   "\"UNAVAILABLE\",\"reason\":\"\"}]");
  b.len = 0;
  ck_assert_int_eq(attn_v2_encode_repository_index(&b, NULL, 0), ATTN_OK);
  ck_assert_str_eq(b.data, "[]");
  b.len = 0;
  ck_assert_int_eq(attn_v2_encode_repository_entry(&b, &e[0]), ATTN_OK);
  ck_assert_str_eq(b.data,
                   "{\"name\":\"sdpa\",\"version\":\"1\",\"state\":\"READY\"}");
  attn_buf_free(&b);
  /* a full buffer: nothing left of the attempt */
  attn_buf_init(&b, 40);
  attn_buf_puts(&b, "x");
  ck_assert_int_eq(attn_v2_encode_repository_index(&b, e, 3), ATTN_ETOOBIG);
  ck_assert_str_eq(b.data, "x");
  ck_assert_int_eq(attn_v2_encode_repository_entry(&b, &e[1]), ATTN_ETOOBIG);
  ck_assert_str_eq(b.data, "x");
  attn_buf_free(&b);
}
END_TEST

/* ---- v2: Triton's statistics --------------------------------------------- */

START_TEST(v2_statistics) {
  const attn_v2_model_stats m[] = {
      {"sdpa", "1", 1700000000123ull, 3, 3000, 1, 50, 300, 400, 500, 600},
      {"q\"", "2", 0, 0, 0, 0, 0, 0, 0, 0, 0},
  };
  attn_buf b;
  attn_buf_init(&b, 0);
  ck_assert_int_eq(attn_v2_encode_statistics(&b, m, 1), ATTN_OK);
  ck_assert_str_eq(
      b.data,
      "{\"model_stats\":[{\"name\":\"sdpa\",\"version\":\"1\","
      "\"last_inference\":1700000000123,\"inference_count\":3,"
      "\"execution_count\":3,\"inference_stats\":{"
      "\"success\":{\"count\":3,\"ns\":3000},"
      "\"fail\":{\"count\":1,\"ns\":50},"
      "\"queue\":{\"count\":3,\"ns\":300},"
      "\"compute_input\":{\"count\":3,\"ns\":400},"
      "\"compute_infer\":{\"count\":3,\"ns\":500},"
      "\"compute_output\":{\"count\":3,\"ns\":600},"
      "\"cache_hit\":{\"count\":0,\"ns\":0},"
      "\"cache_miss\":{\"count\":0,\"ns\":0}},\"batch_stats\":[]}]}");
  b.len = 0;
  ck_assert_int_eq(attn_v2_encode_statistics(&b, NULL, 0), ATTN_OK);
  ck_assert_str_eq(b.data, "{\"model_stats\":[]}");
  b.len = 0;
  ck_assert_int_eq(attn_v2_encode_statistics(&b, m, 2), ATTN_OK);
  cJSON *j = cJSON_Parse(b.data);
  const cJSON *list = cJSON_GetObjectItem(j, "model_stats");
  ck_assert_int_eq(cJSON_GetArraySize(list), 2);
  ck_assert_str_eq(
      cJSON_GetObjectItem(cJSON_GetArrayItem(list, 1), "name")->valuestring,
      "q\"");
  cJSON_Delete(j);
  attn_buf_free(&b);
  attn_buf_init(&b, 100); /* full: nothing left of the attempt */
  ck_assert_int_eq(attn_v2_encode_statistics(&b, m, 2), ATTN_ETOOBIG);
  ck_assert_int_eq(b.len, 0);
  attn_buf_free(&b);
}
END_TEST

/* ---- error JSON ---------------------------------------------------------- */

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

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

Suite *codec_suite(void) {
  Suite *s = suite_create("codec");
  TCase *tc = tcase_create("v2_decode");
  tcase_add_loop_test(tc, v2_decode_table, 0, N_OF(v2_cases));
  tcase_add_test(tc, v2_request_fields);
  tcase_add_test(tc, v1_self_attention_views);
  tcase_add_test(tc, v2_binary_equals_json);
  tcase_add_test(tc, v2_bytes_decode);
  tcase_add_test(tc, v2_sequence_params);
  tcase_add_test(tc, v2_binary_half_widening);
  tcase_add_test(tc, depth_limit);
  tcase_add_test(tc, v2_peek_timeout);
  tcase_add_test(tc, v2_peek_agrees_with_decode);
  suite_add_tcase(s, tc);
  tc = tcase_create("v1_decode");
  tcase_add_loop_test(tc, v1_decode_table, 0, N_OF(v1_cases));
  tcase_add_test(tc, v1_ragged_message);
  tcase_add_test(tc, v1_echo_tokens);
  tcase_add_test(tc, bodies_parse_like_cjson);
  suite_add_tcase(s, tc);
  tc = tcase_create("encode");
  tcase_add_test(tc, v2_encode_json_and_binary);
  tcase_add_test(tc, v2_encode_float_roundtrip);
  tcase_add_test(tc, v2_encode_errors_restore);
  tcase_add_test(tc, v2_metadata);
  tcase_add_test(tc, v1_encode_undoes_slicing);
  tcase_add_test(tc, v1_encode_as_is_and_errors);
  tcase_add_test(tc, v1_models_list);
  suite_add_tcase(s, tc);
  tc = tcase_create("triton_extensions");
  tcase_add_loop_test(tc, v2_repo_decode_table, 0, N_OF(repo_cases));
  tcase_add_test(tc, v2_repo_decode_limits);
  tcase_add_test(tc, v2_repo_decode_small_memory);
  tcase_add_test(tc, v2_repo_encode);
  tcase_add_test(tc, v2_statistics);
  suite_add_tcase(s, tc);
  tc = tcase_create("error_json");
  tcase_add_loop_test(tc, error_json_table, 0, N_OF(err_cases));
  suite_add_tcase(s, tc);
  return s;
}
