/* test_session_codec.c - the /v1/sessions codec (src/codec/session_v1.c,
 * include/attn/codec.h "/v1/sessions").
 *
 * Decoder cases are tables: (body, expected status, message, expected
 * result).  JSON in the tables is written with ' for " (unquote, unit.h).
 * A message starting with '=' must be the whole message, otherwise a
 * substring.  A decoded spec is checked by encoding it as a session object
 * (id "s", no lengths) and comparing the text; a decoded step by a summary
 * of its fields and numbers (describe_step).  Floats round-trip: what the
 * encoders write decodes back bit for bit.
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
#include "attn/session.h"
#include "unit.h"

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

static void check_msg(const char *got, const char *want, const char *ctx) {
  if (!want) return;
  if (want[0] == '=')
    ck_assert_msg(strcmp(got, want + 1) == 0, "%s: message '%s', expected '%s'",
                  ctx, got, want + 1);
  else
    ck_assert_msg(strstr(got, want) != NULL, "%s: message '%s' lacks '%s'", ctx,
                  got, want);
}

static int all_zero(const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    if (b[i]) return 0;
  return 1;
}

/* A random finite float (any exponent, either sign, subnormals too) but
 * +-FLT_MAX (see step_answer_round_trip). */
static float rand_f32(uint64_t *seed) {
  for (;;) {
    uint32_t u = (uint32_t)xs64(seed);
    float f;
    memcpy(&f, &u, sizeof f);
    if (isfinite(f) && fabsf(f) != FLT_MAX) return f;
  }
}

/* ---- the spec ----------------------------------------------------------- */

typedef struct spec_case {
  const char *json;
  attn_status st;
  const char *msg; /* on failure */
  const char *enc; /* on success: the spec as attn_v1_encode_session writes
                      it (id "s", no lengths), ' for " */
} spec_case;

#define ENC_HEAD(h, d) \
  "{'id':'s','layers':0,'num_heads':" #h ",'num_kv_heads':0,'head_dim':" #d
#define ENC_TAIL ",'length':[],'bytes':0,'idle_s':0.000}"

static const spec_case spec_cases[] = {
    /* what a session takes */
    {"{'num_heads':8,'head_dim':64}", ATTN_OK, NULL,
     ENC_HEAD(8, 64) ",'max_tokens':0,'kv_dtype':'fp32'" ENC_TAIL},
    {" \n{'head_dim':1,'num_heads':1}\t", ATTN_OK, NULL,
     ENC_HEAD(1, 1) ",'max_tokens':0,'kv_dtype':'fp32'" ENC_TAIL},
    {"{'layers':2,'num_heads':2,'num_kv_heads':1,'head_dim':4,'max_tokens':"
     "100,'kv_dtype':'fp16','scale':0.125,'window':[128,0],'alibi':[0.5,0.25],"
     "'softcap':50,'rotary':{'base':500000,'dims':2,'interleaved':true}}",
     ATTN_OK, NULL,
     "{'id':'s','layers':2,'num_heads':2,'num_kv_heads':1,'head_dim':4,"
     "'max_tokens':100,'kv_dtype':'fp16','scale':0.125,'window':[128,0],"
     "'alibi':[0.5,0.25],'softcap':50,'rotary':{'base':500000,'dims':2,"
     "'interleaved':true}" ENC_TAIL},
    {"{'num_heads':1,'head_dim':1,'kv_dtype':'bf16','kv_dtype2':1}",
     ATTN_EINVAL, "=unknown field 'kv_dtype2' (did you mean 'kv_dtype'?)",
     NULL},
    {"{'num_heads':1,'head_dim':1,'kv_dtype':'bf16'}", ATTN_OK, NULL,
     ENC_HEAD(1, 1) ",'max_tokens':0,'kv_dtype':'bf16'" ENC_TAIL},
    {"{'num_heads':1,'head_dim':1,'kv_dtype':'fp32'}", ATTN_OK, NULL,
     ENC_HEAD(1, 1) ",'max_tokens':0,'kv_dtype':'fp32'" ENC_TAIL},
    {"{'num_heads':3,'head_dim':1,'alibi':true,'rotary':{}}", ATTN_OK, NULL,
     ENC_HEAD(3,
              1) ",'max_tokens':0,'kv_dtype':'fp32','alibi':true,"
                 "'rotary':{'base':0,'dims':0,'interleaved':false}" ENC_TAIL},
    {"{'num_heads':3,'head_dim':1,'alibi':false,'rotary':false}", ATTN_OK, NULL,
     ENC_HEAD(3, 1) ",'max_tokens':0,'kv_dtype':'fp32'" ENC_TAIL},
    {"{'num_heads':3,'head_dim':1,'rotary':true,'window':[-1,0],'scale':-2.5}",
     ATTN_OK, NULL,
     ENC_HEAD(3, 1) ",'max_tokens':0,'kv_dtype':'fp32','scale':-2.5,"
                    "'window':[-1,0],'rotary':{'base':0,'dims':0,"
                    "'interleaved':false}" ENC_TAIL},
    {"{'num_heads':1,'head_dim':1,'window':[0,0],'scale':0,'rotary':{'base':"
     "10000.5}}",
     ATTN_OK, NULL,
     ENC_HEAD(1, 1) ",'max_tokens':0,'kv_dtype':'fp32','scale':0,"
                    "'window':[0,0],'rotary':{'base':10000.5,'dims':0,"
                    "'interleaved':false}" ENC_TAIL},
    {"{'num_heads':1,'head_dim':1,'rotary':{'base':1.1}}", ATTN_OK, NULL,
     ENC_HEAD(1, 1) ",'max_tokens':0,'kv_dtype':'fp32','rotary':{'base':1.1,"
                    "'dims':0,'interleaved':false}" ENC_TAIL},
    {"{'num_heads':1,'head_dim':1,'num_kv_heads':1e3,'max_tokens':"
     "9007199254740991}",
     ATTN_OK, NULL,
     "{'id':'s','layers':0,'num_heads':1,'num_kv_heads':1000,'head_dim':1,"
     "'max_tokens':9007199254740991,'kv_dtype':'fp32'" ENC_TAIL},

    /* the body */
    {"", ATTN_EINVAL,
     "=the body is empty: a session needs a JSON object with num_heads and "
     "head_dim",
     NULL},
    {" \r\n ", ATTN_EINVAL, "the body is empty", NULL},
    {"[]", ATTN_EINVAL, "=the body must be a JSON object, got an array", NULL},
    {"null", ATTN_EINVAL, "=the body must be a JSON object, got null", NULL},
    {"{'num_heads':1", ATTN_EPARSE, "malformed JSON", NULL},
    {"{}", ATTN_EINVAL,
     "=num_heads is missing: a session needs num_heads and head_dim (integers "
     ">= 1)",
     NULL},
    {"{'num_heads':8}", ATTN_EINVAL, "head_dim is missing", NULL},
    {"{'head_dim':8}", ATTN_EINVAL, "num_heads is missing", NULL},

    /* fields: did you mean, duplicates */
    {"{'num_head':8,'head_dim':64}", ATTN_EINVAL,
     "=unknown field 'num_head' (did you mean 'num_heads'?)", NULL},
    {"{'num_heads':8,'head_dim':64,'window_left':3}", ATTN_EINVAL,
     "=unknown field 'window_left'", NULL},
    {"{'num_heads':8,'head_dim':64,'layer':3}", ATTN_EINVAL,
     "=unknown field 'layer' (did you mean 'layers'?)", NULL},
    {"{'num_heads':8,'head_dim':64,'max_token':3}", ATTN_EINVAL,
     "(did you mean 'max_tokens'?)", NULL},
    {"{'num_heads':8,'head_dim':64,'softcapp':3}", ATTN_EINVAL,
     "(did you mean 'softcap'?)", NULL},
    {"{'num_heads':8,'num_heads':8,'head_dim':64}", ATTN_EINVAL,
     "=duplicate field 'num_heads'", NULL},

    /* integers */
    {"{'num_heads':1.5,'head_dim':64}", ATTN_EINVAL,
     "=num_heads must be an integer >= 1, got 1.5", NULL},
    {"{'num_heads':'8','head_dim':64}", ATTN_EINVAL,
     "=num_heads must be an integer >= 1, got a string", NULL},
    {"{'num_heads':8,'head_dim':-3}", ATTN_EINVAL,
     "=head_dim must be an integer >= 1, got -3", NULL},
    {"{'num_heads':8,'head_dim':0}", ATTN_EINVAL,
     "=head_dim must be an integer >= 1, got 0", NULL},
    {"{'num_heads':8,'head_dim':8,'layers':0}", ATTN_EINVAL,
     "=layers must be an integer >= 1, got 0", NULL},
    {"{'num_heads':8,'head_dim':8,'num_kv_heads':null}", ATTN_EINVAL,
     "=num_kv_heads must be an integer >= 1, got null", NULL},
    {"{'num_heads':8,'head_dim':8,'max_tokens':1e300}", ATTN_EINVAL,
     "=max_tokens must be an integer >= 1, got 1e+300", NULL},
    {"{'num_heads':8,'head_dim':8,'max_tokens':9007199254740992}", ATTN_EINVAL,
     "max_tokens must be an integer >= 1, got 9.00719925474099e+15", NULL},

    /* kv_dtype, scale */
    {"{'num_heads':8,'head_dim':8,'kv_dtype':'int8'}", ATTN_EINVAL,
     "=kv_dtype 'int8' is not one of \"fp32\", \"bf16\", \"fp16\"", NULL},
    {"{'num_heads':8,'head_dim':8,'kv_dtype':'FP32'}", ATTN_EINVAL,
     "kv_dtype 'FP32' is not one of", NULL},
    {"{'num_heads':8,'head_dim':8,'kv_dtype':16}", ATTN_EINVAL,
     "=kv_dtype must be \"fp32\", \"bf16\" or \"fp16\", got a number", NULL},
    {"{'num_heads':8,'head_dim':8,'scale':'x'}", ATTN_EINVAL,
     "=scale must be a number, got a string", NULL},
    {"{'num_heads':8,'head_dim':8,'scale':1e39}", ATTN_ENONFINITE,
     "=scale is 1e+39, outside the fp32 range", NULL},

    /* window */
    {"{'num_heads':8,'head_dim':8,'window':[4,3]}", ATTN_EINVAL,
     "=window[1] is 3; a session's window must end at the token itself: "
     "[left, 0]",
     NULL},
    {"{'num_heads':8,'head_dim':8,'window':[-1,-1]}", ATTN_EINVAL,
     "=window[1] is -1; a session's window must end at the token itself: "
     "[left, 0]",
     NULL},
    {"{'num_heads':8,'head_dim':8,'window':[-2,0]}", ATTN_EINVAL,
     "=window[0] is -2; it must be an integer >= 0 (the tokens before each "
     "one it sees), or -1 for unbounded",
     NULL},
    {"{'num_heads':8,'head_dim':8,'window':[1.5,0]}", ATTN_EINVAL,
     "window[0] is 1.5; it must be an integer", NULL},
    {"{'num_heads':8,'head_dim':8,'window':[1]}", ATTN_EINVAL,
     "=window must be [left, 0]: two integers, left -1 for unbounded (got "
     "another array)",
     NULL},
    {"{'num_heads':8,'head_dim':8,'window':[1,0,0]}", ATTN_EINVAL,
     "window must be [left, 0]", NULL},
    {"{'num_heads':8,'head_dim':8,'window':['1',0]}", ATTN_EINVAL,
     "window must be [left, 0]", NULL},
    {"{'num_heads':8,'head_dim':8,'window':4}", ATTN_EINVAL,
     "=window must be [left, 0]: two integers, left -1 for unbounded (got a "
     "number)",
     NULL},

    /* alibi */
    {"{'num_heads':8,'head_dim':8,'alibi':[]}", ATTN_EINVAL,
     "=alibi is an empty list: give one slope per query head (num_heads of "
     "them), or true for the standard slopes",
     NULL},
    {"{'num_heads':8,'head_dim':8,'alibi':'yes'}", ATTN_EINVAL,
     "=alibi must be true, false or a list of slopes (one per query head), "
     "got a string",
     NULL},
    {"{'num_heads':8,'head_dim':8,'alibi':[1,'a']}", ATTN_EINVAL,
     "=alibi[1] must be a number, got a string", NULL},
    {"{'num_heads':8,'head_dim':8,'alibi':[0.5,1e39]}", ATTN_ENONFINITE,
     "=alibi[1] is 1e+39, outside the fp32 range", NULL},
    {"{'num_heads':8,'head_dim':8,'alibi':[[0.5]]}", ATTN_EINVAL,
     "=alibi[0] must be a number, got an array", NULL},

    /* softcap */
    {"{'num_heads':8,'head_dim':8,'softcap':-1}", ATTN_EINVAL,
     "=softcap is -1; it must be > 0 (the cap on the logits; leave it out "
     "for none)",
     NULL},
    {"{'num_heads':8,'head_dim':8,'softcap':0}", ATTN_EINVAL,
     "=softcap is 0; it must be > 0 (the cap on the logits; leave it out "
     "for none)",
     NULL},
    {"{'num_heads':8,'head_dim':8,'softcap':true}", ATTN_EINVAL,
     "=softcap must be a number, got a boolean", NULL},
    {"{'num_heads':8,'head_dim':8,'softcap':-1e300}", ATTN_ENONFINITE,
     "=softcap is -1e+300, outside the fp32 range", NULL},

    /* rotary */
    {"{'num_heads':8,'head_dim':8,'rotary':'neox'}", ATTN_EINVAL,
     "=rotary must be true, false or an object {\"base\", \"dims\", "
     "\"interleaved\"}, got a string",
     NULL},
    {"{'num_heads':8,'head_dim':8,'rotary':{'bse':3}}", ATTN_EINVAL,
     "=rotary: unknown field 'bse' (did you mean 'base'?)", NULL},
    {"{'num_heads':8,'head_dim':8,'rotary':{'query_offset':3}}", ATTN_EINVAL,
     "=rotary: unknown field 'query_offset'", NULL},
    {"{'num_heads':8,'head_dim':8,'rotary':{'dims':2,'dims':2}}", ATTN_EINVAL,
     "=rotary: duplicate field 'dims'", NULL},
    {"{'num_heads':8,'head_dim':8,'rotary':{'base':1}}", ATTN_EINVAL,
     "=rotary.base is 1; it must be > 1 (10000 when not given)", NULL},
    {"{'num_heads':8,'head_dim':8,'rotary':{'base':'1e4'}}", ATTN_EINVAL,
     "=rotary.base must be a number, got a string", NULL},
    {"{'num_heads':8,'head_dim':8,'rotary':{'dims':0}}", ATTN_EINVAL,
     "=rotary.dims must be an integer >= 1, got 0", NULL},
    {"{'num_heads':8,'head_dim':8,'rotary':{'interleaved':1}}", ATTN_EINVAL,
     "=rotary.interleaved must be true or false, got a number", NULL},
};

/* s encoded as a session object with id "s" and no lengths. */
static char *encode_spec(const attn_session_spec *s) {
  attn_session_info i;
  attn_buf b;
  memset(&i, 0, sizeof i);
  snprintf(i.id, sizeof i.id, "s");
  i.spec = *s;
  attn_buf_init(&b, 0);
  ck_assert_int_eq(attn_v1_encode_session(&b, &i), ATTN_OK);
  return attn_buf_steal(&b, NULL);
}

START_TEST(spec_table) {
  const spec_case *c = &spec_cases[_i];
  char ctx[32], *json = unquote(c->json);
  attn_session_spec s;
  attn_diag d = {{0}};
  snprintf(ctx, sizeof ctx, "spec case %d", _i);
  memset(&s, 0xAB, sizeof s);
  attn_status st =
      attn_v1_decode_session_spec(json, strlen(json), NULL, &s, &d);
  ck_assert_msg(st == c->st, "%s: status %s (%s), expected %s", ctx,
                attn_status_name(st), d.msg, attn_status_name(c->st));
  if (st == ATTN_OK) {
    char *got = encode_spec(&s), *want = unquote(c->enc);
    ck_assert_msg(strcmp(got, want) == 0, "%s: encoded\n  %s\nexpected\n  %s",
                  ctx, got, want);
    free(got);
    free(want);
  } else {
    check_msg(d.msg, c->msg, ctx);
    ck_assert_msg(all_zero(&s, sizeof s), "%s: spec not zeroed", ctx);
  }
  attn_session_spec_clear(&s);
  free(json);
}
END_TEST

/* decode(encode(spec)) is the spec: random floats for scale, softcap and
 * the slopes, random integers and variants. */
START_TEST(spec_round_trip) {
  uint64_t seed = 0x5e55;
  for (int it = 0; it < 200; it++) {
    attn_session_spec a, b;
    memset(&a, 0, sizeof a);
    a.layers = 1 + (int64_t)(xs64(&seed) % 40);
    a.num_heads = 1 + (int64_t)(xs64(&seed) % 9);
    a.num_kv_heads = 1 + (int64_t)(xs64(&seed) % 9);
    a.head_dim = 1 + (int64_t)(xs64(&seed) % 256);
    a.max_tokens = 1 + (int64_t)(xs64(&seed) % 100000);
    a.kv_dtype = (attn_kv_dtype)(xs64(&seed) % 3);
    a.has_scale = xs64(&seed) & 1;
    if (a.has_scale) a.scale = rand_f32(&seed);
    a.has_window = xs64(&seed) & 1;
    if (a.has_window) a.window_left = (int64_t)(xs64(&seed) % 5000) - 1;
    a.alibi = (attn_session_alibi)(xs64(&seed) % 3);
    if (a.alibi == ATTN_SESSION_ALIBI_SLOPES) {
      a.alibi_slopes = malloc((size_t)a.num_heads * sizeof(float));
      for (int64_t h = 0; h < a.num_heads; h++)
        a.alibi_slopes[h] = rand_f32(&seed);
    }
    if (xs64(&seed) & 1) a.softcap = fabsf(rand_f32(&seed));
    a.has_rotary = xs64(&seed) & 1;
    if (a.has_rotary) {
      a.rotary_base = 1 + (double)(xs64(&seed) % 1000000) / 7;
      a.rotary_dims = 1 + (int64_t)(xs64(&seed) % 64);
      a.rotary_interleaved = xs64(&seed) & 1;
    }
    if (a.softcap == 0) a.softcap = 0; /* -0 is written as none */
    /* the object less what is not a spec's: "id" first, "length",
     * "bytes" and "idle_s" last (cJSON would print the doubles again, not
     * always exactly) */
    char *enc = encode_spec(&a), *body = malloc(strlen(enc) + 1);
    const char *from = strstr(enc, ",\"layers\":"),
               *to = strstr(enc, ",\"length\":");
    ck_assert(from && to);
    body[0] = '{';
    memcpy(body + 1, from + 1, (size_t)(to - from - 1));
    memcpy(body + (to - from), "}", 2);
    attn_diag d = {{0}};
    ck_assert_msg(attn_v1_decode_session_spec(body, strlen(body), NULL, &b,
                                              &d) == ATTN_OK,
                  "%s: %s", body, d.msg);
    ck_assert_msg(a.alibi_slopes == NULL || b.alibi_slopes != NULL, "%s", body);
    if (a.alibi_slopes)
      ck_assert_msg(memcmp(a.alibi_slopes, b.alibi_slopes,
                           (size_t)a.num_heads * sizeof(float)) == 0,
                    "%s: slopes differ", body);
    ck_assert_int_eq(b.alibi_count, a.alibi_slopes ? a.num_heads : 0);
    float *sa = a.alibi_slopes, *sb = b.alibi_slopes;
    a.alibi_slopes = b.alibi_slopes = NULL;
    a.alibi_count = b.alibi_count = 0;
    ck_assert_msg(memcmp(&a, &b, sizeof a) == 0,
                  "%s: spec differs: base %.17g %.17g scale %.9g %.9g softcap "
                  "%.9g %.9g",
                  body, a.rotary_base, b.rotary_base, (double)a.scale,
                  (double)b.scale, (double)a.softcap, (double)b.softcap);
    a.alibi_slopes = sa;
    b.alibi_slopes = sb;
    attn_session_spec_clear(&a);
    attn_session_spec_clear(&b);
    free(body);
    free(enc);
  }
}
END_TEST

START_TEST(spec_depth_limit) {
  char *json = unquote("{'num_heads':1,'head_dim':1,'rotary':{'base':[[1]]}}");
  attn_codec_limits lim;
  attn_session_spec s;
  attn_diag d = {{0}};
  attn_codec_limits_default(&lim);
  lim.max_depth = 3;
  ck_assert_int_eq(
      attn_v1_decode_session_spec(json, strlen(json), &lim, &s, &d),
      ATTN_EINVAL);
  ck_assert_msg(strstr(d.msg, "deep") || strstr(d.msg, "depth"), "%s", d.msg);
  ck_assert(all_zero(&s, sizeof s));
  lim.max_depth = 4; /* deep enough: the base's type is what is wrong */
  ck_assert_int_eq(
      attn_v1_decode_session_spec(json, strlen(json), &lim, &s, &d),
      ATTN_EINVAL);
  check_msg(d.msg, "=rotary.base must be a number, got an array", "depth");
  free(json);
}
END_TEST

/* ---- a step ------------------------------------------------------------- */

typedef struct step_case {
  const char *json;
  attn_status st;
  const char *msg;    /* on failure */
  const char *expect; /* on success: describe_step's text */
  size_t max_elems;   /* 0: the default */
} step_case;

/* The shape of the table's session: 2 query heads, 1 KV head, D = 2. */
static const attn_v1_step_shape table_shape = {2, 1, 2};

static void put_floats(char *buf, size_t cap, const char *name, const float *v,
                       int64_t n) {
  size_t k = strlen(buf);
  k += (size_t)snprintf(buf + k, cap - k, " %s=", name);
  for (int64_t i = 0; i < n && k < cap; i++)
    k += (size_t)snprintf(buf + k, cap - k, "%s%.9g", i ? "," : "",
                          (double)v[i]);
}

/* "t=1 layer=0 pos=- nw=0 q=1,2,3,4 k=.. v=.." */
static void describe_step(const attn_v1_step *s, const attn_v1_step_shape *sh,
                          char *buf, size_t cap) {
  char pos[24] = "-";
  if (s->has_position)
    snprintf(pos, sizeof pos, "%lld", (long long)s->position);
  snprintf(buf, cap, "t=%lld layer=%lld pos=%s nw=%d", (long long)s->t,
           (long long)s->layer, pos, s->need_weights);
  put_floats(buf, cap, "q", s->q, s->t * sh->H * sh->D);
  if (s->k) put_floats(buf, cap, "k", s->k, s->t * sh->Hkv * sh->D);
  if (s->v) put_floats(buf, cap, "v", s->v, s->t * sh->Hkv * sh->D);
}

static const step_case step_cases[] = {
    /* rows flat, nested, mixed */
    {"{'query':[[1,2,3,4]]}", ATTN_OK, NULL, "t=1 layer=0 pos=- nw=0 q=1,2,3,4",
     0},
    {"{'query':[[[1,2],[3,4]]]}", ATTN_OK, NULL,
     "t=1 layer=0 pos=- nw=0 q=1,2,3,4", 0},
    {"{'query':[[[1,2],[3,4]],[5,6,7,8]],'key':[[9,10],[[11,12]]],"
     "'value':[[[-1,-2]],[-3,-4]],'position':5,'layer':3,'need_weights':true}",
     ATTN_OK, NULL,
     "t=2 layer=3 pos=5 nw=1 q=1,2,3,4,5,6,7,8 k=9,10,11,12 v=-1,-2,-3,-4", 0},
    {"{'need_weights':false,'position':0,'query':[[0.5,-0,1e-45,"
     "3.4028234e38]]}",
     ATTN_OK, NULL,
     "t=1 layer=0 pos=0 nw=0 q=0.5,-0,1.40129846e-45,3.40282347e+38", 0},
    {"{'query':[[1,2,3,4],[5,6,7,8]]}", ATTN_OK, NULL,
     "t=2 layer=0 pos=- nw=0 q=1,2,3,4,5,6,7,8", 8},

    /* the body */
    {"", ATTN_EINVAL,
     "=the body is empty: a step needs a JSON object with query", NULL, 0},
    {"[[1,2,3,4]]", ATTN_EINVAL,
     "=the body must be a JSON object, got an array", NULL, 0},
    {"{'query':[[1,2,3,4]]", ATTN_EPARSE, "malformed JSON", NULL, 0},
    {"{}", ATTN_EINVAL,
     "=query is missing: a step takes t rows of num_heads x head_dim = 2 x 2 "
     "numbers",
     NULL, 0},
    {"{'qurey':[[1,2,3,4]]}", ATTN_EINVAL,
     "=unknown field 'qurey' (did you mean 'query'?)", NULL, 0},
    {"{'query':[[1,2,3,4]],'need_weight':true}", ATTN_EINVAL,
     "=unknown field 'need_weight' (did you mean 'need_weights'?)", NULL, 0},
    {"{'query':[[1,2,3,4]],'keys':[[1,2]]}", ATTN_EINVAL,
     "=unknown field 'keys' (did you mean 'key'?)", NULL, 0},
    {"{'query':[[1,2,3,4]],'causal':true}", ATTN_EINVAL,
     "=unknown field 'causal'", NULL, 0},
    {"{'query':[[1,2,3,4]],'query':[[1,2,3,4]]}", ATTN_EINVAL,
     "=duplicate field 'query'", NULL, 0},

    /* scalars */
    {"{'query':[[1,2,3,4]],'layer':-1}", ATTN_EINVAL,
     "=layer must be an integer >= 0, got -1", NULL, 0},
    {"{'query':[[1,2,3,4]],'layer':'0'}", ATTN_EINVAL,
     "=layer must be an integer >= 0, got a string", NULL, 0},
    {"{'query':[[1,2,3,4]],'position':1.5}", ATTN_EINVAL,
     "=position must be an integer >= 0, got 1.5", NULL, 0},
    {"{'query':[[1,2,3,4]],'need_weights':1}", ATTN_EINVAL,
     "=need_weights must be true or false, got a number", NULL, 0},

    /* key and value */
    {"{'query':[[1,2,3,4]],'key':[[1,2]],'position':0}", ATTN_EINVAL,
     "=key is given without value", NULL, 0},
    {"{'query':[[1,2,3,4]],'value':[[1,2]],'position':0}", ATTN_EINVAL,
     "=value is given without key", NULL, 0},
    {"{'query':[[1,2,3,4]],'key':[[1,2]],'value':[[1,2]]}", ATTN_EINVAL,
     "=position is missing: a step that appends keys and values says where "
     "(the layer's length)",
     NULL, 0},
    {"{'query':[[1,2,3,4]],'key':[[1,2],[3,4]],'value':[[1,2]],'position':0}",
     ATTN_ESHAPE,
     "=key has 2 rows; query has 1: a step appends one key and value per "
     "query row",
     NULL, 0},
    {"{'query':[[1,2,3,4],[1,2,3,4]],'key':[[1,2],[3,4]],'value':[[1,2]],"
     "'position':0}",
     ATTN_ESHAPE,
     "=value has 1 rows; query has 2: a step appends one key and value per "
     "query row",
     NULL, 0},
    {"{'query':[[1,2,3,4]],'key':[[1,2,3,4]],'value':[[1,2]],'position':0}",
     ATTN_ESHAPE,
     "=key[0] has 4 numbers; this session takes num_kv_heads x head_dim = 1 x "
     "2 = 2",
     NULL, 0},
    {"{'query':[[1,2,3,4]],'key':[[1,2]],'value':[[1]],'position':0}",
     ATTN_ESHAPE,
     "=value[0] has 1 number; this session takes num_kv_heads x head_dim = 1 "
     "x 2 = 2",
     NULL, 0},
    {"{'query':[[1,2,3,4]],'key':[[1,2]],'value':{},'position':0}", ATTN_EINVAL,
     "=value must be a list of rows, each num_kv_heads x head_dim = 1 x 2 = 2 "
     "numbers, got an object",
     NULL, 0},
    {"{'query':[[1,2,3,4]],'key':[],'value':[],'position':0}", ATTN_EINVAL,
     "=key has no rows; a step takes at least one token", NULL, 0},

    /* the query's rows */
    {"{'query':'x'}", ATTN_EINVAL,
     "=query must be a list of rows, each num_heads x head_dim = 2 x 2 = 4 "
     "numbers, got a string",
     NULL, 0},
    {"{'query':[]}", ATTN_EINVAL,
     "=query has no rows; a step takes at least one token", NULL, 0},
    {"{'query':[1,2,3,4]}", ATTN_EINVAL,
     "=query is one list of 4 numbers; it must be a list of rows (one per "
     "token), each num_heads x head_dim = 2 x 2 = 4 numbers: [[...]] for one "
     "token",
     NULL, 0},
    {"{'query':[[1,2,3]]}", ATTN_ESHAPE,
     "=query[0] has 3 numbers; this session takes num_heads x head_dim = 2 x "
     "2 = 4",
     NULL, 0},
    {"{'query':[[1,2,3,4],[]]}", ATTN_ESHAPE,
     "=query[1] has 0 numbers; this session takes num_heads x head_dim = 2 x "
     "2 = 4",
     NULL, 0},
    {"{'query':[[1,2,3,4],'x']}", ATTN_EINVAL,
     "=query[1] must be a list of num_heads x head_dim = 2 x 2 = 4 numbers (or "
     "2 lists of 2), got a string",
     NULL, 0},
    {"{'query':[[[1,2]]]}", ATTN_ESHAPE,
     "=query[0] has 1 list; this session takes num_heads = 2 lists of "
     "head_dim = 2 numbers (or one list of 4)",
     NULL, 0},
    {"{'query':[[[1,2],[3,4],[5,6]]]}", ATTN_ESHAPE,
     "query[0] has 3 lists; this session takes num_heads = 2", NULL, 0},
    {"{'query':[[[1,2],[3]]]}", ATTN_ESHAPE,
     "=query[0][1] has 1 number; this session takes head_dim = 2", NULL, 0},
    {"{'query':[[[1,2],3]]}", ATTN_EINVAL,
     "=query[0][1] must be a list of head_dim = 2 numbers, got a number", NULL,
     0},
    {"{'query':[[[1,2],[3,'4']]]}", ATTN_EINVAL,
     "=query[0][1][1] must be a number, got a string", NULL, 0},
    {"{'query':[[1,2,3,'x']]}", ATTN_EINVAL,
     "=query[0][3] must be a number, got a string", NULL, 0},
    {"{'query':[[1,2,3,null]]}", ATTN_EINVAL,
     "=query[0][3] must be a number, got null", NULL, 0},
    {"{'query':[[1,[2],3,4]]}", ATTN_EINVAL,
     "=query[0][1] must be a number, got an array", NULL, 0},

    /* fp32's range */
    {"{'query':[[1,2,3,3.41e38]]}", ATTN_ENONFINITE,
     "=query[0][3] is 3.41e+38, outside the fp32 range", NULL, 0},
    {"{'query':[[1,2,3,1e39]]}", ATTN_ENONFINITE,
     "=query[0][3] is 1e+39, outside the fp32 range", NULL, 0},
    {"{'query':[[1,2,3,4],[[1,2],[3,-1e39]]]}", ATTN_ENONFINITE,
     "=query[1][1][1] is -1e+39, outside the fp32 range", NULL, 0},
    {"{'query':[[1,2,3,4]],'key':[[1,2]],'value':[[1e300,2]],'position':0}",
     ATTN_ENONFINITE, "=value[0][0] is 1e+300, outside the fp32 range", NULL,
     0},

    /* the element limit */
    {"{'query':[[1,2,3,4],[5,6,7,8],[9,10,11,12]]}", ATTN_ETOOBIG,
     "=query has 3 rows of num_heads x head_dim = 2 x 2 = 4 numbers, above the "
     "limit of 8 numbers a tensor",
     NULL, 8},
    {"{'query':[[1,2,3,4],[5,6,7,8],[9,10,11,12]],'key':[[1,2],[3,4],[5,6]],"
     "'value':[[1,2],[3,4],[5,6]],'position':0}",
     ATTN_ETOOBIG, "query has 3 rows", NULL, 11},
    {"{'query':[[1,2,3,4],[5,6,7,8],[9,10,11,12]],'key':[[1,2],[3,4],[5,6]],"
     "'value':[[1,2],[3,4],[5,6]],'position':0}",
     ATTN_OK, NULL,
     "t=3 layer=0 pos=0 nw=0 q=1,2,3,4,5,6,7,8,9,10,11,12 k=1,2,3,4,5,6 "
     "v=1,2,3,4,5,6",
     12},
};

START_TEST(step_table) {
  const step_case *c = &step_cases[_i];
  char ctx[32], *json = unquote(c->json), got[512];
  attn_codec_limits lim;
  attn_v1_step s;
  attn_diag d = {{0}};
  snprintf(ctx, sizeof ctx, "step case %d", _i);
  attn_codec_limits_default(&lim);
  if (c->max_elems) lim.max_tensor_elements = c->max_elems;
  memset(&s, 0xAB, sizeof s);
  attn_status st = attn_v1_decode_session_step(json, strlen(json), &lim,
                                               &table_shape, &s, &d);
  ck_assert_msg(st == c->st, "%s: status %s (%s), expected %s", ctx,
                attn_status_name(st), d.msg, attn_status_name(c->st));
  if (st == ATTN_OK) {
    describe_step(&s, &table_shape, got, sizeof got);
    ck_assert_msg(strcmp(got, c->expect) == 0, "%s: got\n  %s\nexpected\n  %s",
                  ctx, got, c->expect);
  } else {
    check_msg(d.msg, c->msg, ctx);
    ck_assert_msg(all_zero(&s, sizeof s), "%s: step not zeroed", ctx);
  }
  attn_v1_step_clear(&s);
  ck_assert(all_zero(&s, sizeof s));
  free(json);
}
END_TEST

/* A step body: t rows of H x D numbers from v, each flat or nested as
 * nested[i] says, written with %.9g (exact for floats). */
static char *step_body(const float *v, int64_t t, int64_t H, int64_t D,
                       const bool *nested) {
  attn_buf b;
  attn_buf_init(&b, 0);
  attn_buf_puts(&b, "{\"query\":[");
  for (int64_t i = 0; i < t; i++) {
    attn_buf_puts(&b, i ? ",[" : "[");
    for (int64_t h = 0; h < H; h++) {
      if (nested[i]) attn_buf_puts(&b, h ? ",[" : "[");
      for (int64_t j = 0; j < D; j++)
        attn_buf_printf(&b, "%s%.9g", j || (h && !nested[i]) ? "," : "",
                        (double)v[(i * H + h) * D + j]);
      if (nested[i]) attn_buf_puts(&b, "]");
    }
    attn_buf_puts(&b, "]");
  }
  attn_buf_puts(&b, "]}");
  return attn_buf_steal(&b, NULL);
}

/* [t][H*D] rows, [t][H][D] rows and any mix of them decode to the same
 * numbers. */
START_TEST(step_flat_equals_nested) {
  const int64_t t = 5, H = 3, D = 7;
  const attn_v1_step_shape sh = {H, 1, D};
  float v[5 * 3 * 7];
  uint64_t seed = 42;
  for (size_t i = 0; i < sizeof v / sizeof *v; i++) v[i] = rand_f32(&seed);
  for (int mask = 0; mask < 1 << t; mask += 5) {
    bool nested[5];
    for (int i = 0; i < t; i++) nested[i] = mask >> i & 1;
    char *body = step_body(v, t, H, D, nested);
    attn_v1_step s;
    attn_diag d = {{0}};
    ck_assert_msg(attn_v1_decode_session_step(body, strlen(body), NULL, &sh, &s,
                                              &d) == ATTN_OK,
                  "mask %d: %s", mask, d.msg);
    ck_assert_int_eq(s.t, t);
    ck_assert(s.k == NULL && s.v == NULL && !s.has_position);
    ck_assert_msg(memcmp(s.q, v, sizeof v) == 0, "mask %d differs", mask);
    attn_v1_step_clear(&s);
    free(body);
  }
}
END_TEST

/* The message of codec.h's example, in a session of 8 heads of 64. */
START_TEST(step_message_names_the_session) {
  const attn_v1_step_shape sh = {8, 2, 64};
  attn_buf b;
  attn_buf_init(&b, 0);
  attn_buf_puts(&b, "{\"query\":[");
  for (int i = 0; i < 4; i++) {
    attn_buf_puts(&b, i ? ",[" : "[");
    for (int j = 0; j < (i == 3 ? 256 : 512); j++)
      attn_buf_puts(&b, j ? ",0.5" : "0.5");
    attn_buf_puts(&b, "]");
  }
  attn_buf_puts(&b, "]}");
  attn_v1_step s;
  attn_diag d = {{0}};
  ck_assert_int_eq(
      attn_v1_decode_session_step(b.data, b.len, NULL, &sh, &s, &d),
      ATTN_ESHAPE);
  check_msg(d.msg,
            "=query[3] has 256 numbers; this session takes num_heads x "
            "head_dim = 8 x 64 = 512",
            "8x64");
  ck_assert(all_zero(&s, sizeof s));
  /* no shape: the server's fault, still a message */
  ck_assert_int_eq(
      attn_v1_decode_session_step(b.data, b.len, NULL, NULL, &s, &d),
      ATTN_EINVAL);
  check_msg(d.msg, "=a step needs the session's shape", "no shape");
  attn_v1_step_clear(NULL);
  attn_buf_free(&b);
}
END_TEST

/* ---- truncate and fork -------------------------------------------------- */

typedef struct small_case {
  const char *json;
  attn_status st;
  const char *want; /* on success the length or id; else the message */
} small_case;

static const small_case truncate_cases[] = {
    {"{'length':0}", ATTN_OK, "0"},
    {"{'length':12345}", ATTN_OK, "12345"},
    {" {'length':9007199254740991} ", ATTN_OK, "9007199254740991"},
    {"", ATTN_EINVAL,
     "=the body is empty: truncate needs a JSON object with length (the "
     "tokens to keep)"},
    {"3", ATTN_EINVAL, "=the body must be a JSON object, got a number"},
    {"{", ATTN_EPARSE, "malformed JSON"},
    {"{}", ATTN_EINVAL,
     "=length is missing: truncate keeps the first length tokens of every "
     "layer"},
    {"{'lenght':3}", ATTN_EINVAL,
     "=unknown field 'lenght' (did you mean 'length'?)"},
    {"{'length':3,'layer':1}", ATTN_EINVAL, "=unknown field 'layer'"},
    {"{'length':-1}", ATTN_EINVAL, "=length must be an integer >= 0, got -1"},
    {"{'length':2.5}", ATTN_EINVAL, "=length must be an integer >= 0, got 2.5"},
    {"{'length':'3'}", ATTN_EINVAL,
     "=length must be an integer >= 0, got a string"},
    {"{'length':1,'length':2}", ATTN_EINVAL, "=duplicate field 'length'"},
};

START_TEST(truncate_table) {
  const small_case *c = &truncate_cases[_i];
  char ctx[32], *json = unquote(c->json);
  int64_t n = 77;
  attn_diag d = {{0}};
  snprintf(ctx, sizeof ctx, "truncate case %d", _i);
  attn_status st = attn_v1_decode_session_truncate(json, strlen(json), &n, &d);
  ck_assert_msg(st == c->st, "%s: status %s (%s), expected %s", ctx,
                attn_status_name(st), d.msg, attn_status_name(c->st));
  if (st == ATTN_OK) {
    ck_assert_int_eq(n, strtoll(c->want, NULL, 10));
  } else {
    check_msg(d.msg, c->want, ctx);
    ck_assert_int_eq(n, 0);
  }
  free(json);
}
END_TEST

static const small_case fork_cases[] = {
    {"{'id':'a'}", ATTN_OK, "a"},
    {"{'id':'chat-42:turn_3.b'}", ATTN_OK, "chat-42:turn_3.b"},
    {"{'id':'AZaz09._:-'}", ATTN_OK, "AZaz09._:-"},
    {"", ATTN_EINVAL,
     "=the body is empty: fork needs a JSON object with id (the new "
     "session's)"},
    {"'a'", ATTN_EINVAL, "=the body must be a JSON object, got a string"},
    {"{}", ATTN_EINVAL, "=id is missing: fork makes a new session of that id"},
    {"{'ids':'a'}", ATTN_EINVAL, "=unknown field 'ids' (did you mean 'id'?)"},
    {"{'id':3}", ATTN_EINVAL, "=id must be a string, got a number"},
    {"{'id':'a b'}", ATTN_EINVAL,
     "=id 'a b' is not a session id: 1 to 128 of A-Z a-z 0-9 . _ : -"},
    {"{'id':''}", ATTN_EINVAL,
     "=id '' is not a session id: 1 to 128 of A-Z a-z 0-9 . _ : -"},
    {"{'id':'a/b'}", ATTN_EINVAL, "id 'a/b' is not a session id"},
    {"{'id':'\\u00e9'}", ATTN_EINVAL, "is not a session id"},
    {"{'id':'a','id':'b'}", ATTN_EINVAL, "=duplicate field 'id'"},
};

START_TEST(fork_table) {
  const small_case *c = &fork_cases[_i];
  char ctx[32], *json = unquote(c->json), id[ATTN_SESSION_ID_MAX + 1];
  attn_diag d = {{0}};
  snprintf(ctx, sizeof ctx, "fork case %d", _i);
  memset(id, 'x', sizeof id);
  attn_status st = attn_v1_decode_session_fork(json, strlen(json), id, &d);
  ck_assert_msg(st == c->st, "%s: status %s (%s), expected %s", ctx,
                attn_status_name(st), d.msg, attn_status_name(c->st));
  if (st == ATTN_OK) {
    ck_assert_str_eq(id, c->want);
  } else {
    check_msg(d.msg, c->want, ctx);
    ck_assert_str_eq(id, "");
  }
  free(json);
}
END_TEST

/* Ids of 128 bytes are taken, of 129 refused by their length. */
START_TEST(fork_id_length) {
  char body[200], id[ATTN_SESSION_ID_MAX + 1];
  attn_diag d = {{0}};
  for (int n = 128; n <= 129; n++) {
    int k = snprintf(body, sizeof body, "{\"id\":\"");
    memset(body + k, 'q', (size_t)n);
    k += n;
    k += snprintf(body + k, sizeof body - (size_t)k, "\"}");
    attn_status st = attn_v1_decode_session_fork(body, (size_t)k, id, &d);
    if (n == 128) {
      ck_assert_int_eq(st, ATTN_OK);
      ck_assert_int_eq(strlen(id), 128);
    } else {
      ck_assert_int_eq(st, ATTN_EINVAL);
      check_msg(d.msg,
                "=id is 129 bytes; a session id is 1 to 128 of A-Z a-z 0-9 . "
                "_ : -",
                "129");
    }
  }
}
END_TEST

/* ---- encoding ----------------------------------------------------------- */

START_TEST(encode_session_object) {
  float slopes[2] = {0.5f, 0.1f};
  int64_t length[3] = {0, 7, 4096};
  attn_session_info i;
  memset(&i, 0, sizeof i);
  snprintf(i.id, sizeof i.id, "chat-1");
  i.spec = (attn_session_spec){.layers = 3,
                               .num_heads = 2,
                               .num_kv_heads = 1,
                               .head_dim = 64,
                               .max_tokens = 8192,
                               .kv_dtype = ATTN_KV_BF16,
                               .has_scale = true,
                               .scale = 0.125f,
                               .has_window = true,
                               .window_left = -1,
                               .alibi = ATTN_SESSION_ALIBI_SLOPES,
                               .alibi_slopes = slopes,
                               .softcap = 30.5f,
                               .has_rotary = true,
                               .rotary_base = 10000,
                               .rotary_dims = 64,
                               .rotary_interleaved = false};
  i.length = length;
  i.bytes = 1234567890123u;
  i.idle_s = 12.3456;
  attn_buf b;
  attn_buf_init(&b, 0);
  attn_buf_puts(&b, "<");
  ck_assert_int_eq(attn_v1_encode_session(&b, &i), ATTN_OK);
  char *want = unquote(
      "<{'id':'chat-1','layers':3,'num_heads':2,'num_kv_heads':1,'head_dim':64,"
      "'max_tokens':8192,'kv_dtype':'bf16','scale':0.125,'window':[-1,0],"
      "'alibi':[0.5,0.1],'softcap':30.5,'rotary':{'base':10000,'dims':64,"
      "'interleaved':false},'length':[0,7,4096],'bytes':1234567890123,"
      "'idle_s':12.346}");
  ck_assert_str_eq(b.data, want);
  free(want);

  /* the plain one: no variants; a NaN idle time as null */
  b.len = 0;
  i.spec = (attn_session_spec){.layers = 1,
                               .num_heads = 1,
                               .num_kv_heads = 1,
                               .head_dim = 8,
                               .max_tokens = 16,
                               .kv_dtype = ATTN_KV_FP16};
  i.idle_s = NAN;
  i.bytes = 0;
  ck_assert_int_eq(attn_v1_encode_session(&b, &i), ATTN_OK);
  want = unquote(
      "{'id':'chat-1','layers':1,'num_heads':1,'num_kv_heads':1,'head_dim':8,"
      "'max_tokens':16,'kv_dtype':'fp16','length':[0],'bytes':0,"
      "'idle_s':null}");
  ck_assert_str_eq(b.data, want);
  free(want);

  /* the list: none, then two */
  b.len = 0;
  ck_assert_int_eq(attn_v1_encode_sessions(&b, NULL, 0), ATTN_OK);
  ck_assert_str_eq(b.data, "{\"sessions\":[]}");
  attn_session_info two[2] = {i, i};
  snprintf(two[1].id, sizeof two[1].id, "b");
  two[1].idle_s = 0.0004;
  b.len = 0;
  ck_assert_int_eq(attn_v1_encode_sessions(&b, two, 2), ATTN_OK);
  cJSON *j = cJSON_Parse(b.data);
  ck_assert_ptr_nonnull(j);
  const cJSON *list = cJSON_GetObjectItem(j, "sessions");
  ck_assert_int_eq(cJSON_GetArraySize(list), 2);
  ck_assert_str_eq(
      cJSON_GetObjectItem(cJSON_GetArrayItem(list, 1), "id")->valuestring, "b");
  ck_assert_ptr_nonnull(strstr(b.data, "\"idle_s\":0.000}]}"));
  cJSON_Delete(j);
  attn_buf_free(&b);
}
END_TEST

/* A failed encode (a capped buffer) leaves the buffer as it was. */
START_TEST(encode_errors_restore) {
  int64_t length[1] = {3};
  float out[4] = {1, 2, 3, 4}, lse[2] = {0.5f, 0.25f};
  const attn_v1_step_shape sh = {2, 1, 2};
  attn_session_info i;
  memset(&i, 0, sizeof i);
  snprintf(i.id, sizeof i.id, "s");
  i.spec = (attn_session_spec){.layers = 1, .num_heads = 1, .head_dim = 1};
  i.length = length;
  for (size_t cap = 8; cap < 160; cap += 9) {
    attn_buf b;
    attn_buf_init(&b, cap);
    attn_buf_puts(&b, "prefix");
    attn_status s1 = attn_v1_encode_session(&b, &i);
    if (s1 != ATTN_OK) {
      ck_assert_int_eq(s1, ATTN_ETOOBIG);
      ck_assert_str_eq(b.data, "prefix");
    }
    b.len = 6;
    attn_status s2 = attn_v1_encode_sessions(&b, &i, 1);
    if (s2 != ATTN_OK) ck_assert_str_eq(b.data, "prefix");
    b.len = 6;
    attn_status s3 = attn_v1_encode_session_step(&b, &sh, 1, out, lse, 3, NULL);
    if (s3 != ATTN_OK) {
      ck_assert_int_eq(s3, ATTN_ETOOBIG);
      ck_assert_str_eq(b.data, "prefix");
    }
    attn_buf_free(&b);
  }
}
END_TEST

START_TEST(encode_step_answer) {
  const attn_v1_step_shape sh = {2, 1, 2};
  /* t = 2 rows of 2 heads of 2; lse [2][2]; weights [H=2][t=2][length=3] */
  float out[8] = {1, 2, 3, 4, 5, 6, 7, 8.5f};
  float lse[4] = {0.5f, -INFINITY, NAN, 1e-7f};
  float w[12] = {1, 0, 0, 0.5f, 0.5f, 0, 0.25f, 0.75f, 0, 0, 1, 0};
  attn_buf b;
  attn_buf_init(&b, 0);
  ck_assert_int_eq(attn_v1_encode_session_step(&b, &sh, 2, out, lse, 3, NULL),
                   ATTN_OK);
  ck_assert_str_eq(b.data,
                   "{\"output\":[[[1,2],[3,4]],[[5,6],[7,8.5]]],"
                   "\"lse\":[[0.5,null],[null,1e-07]],\"length\":3}");
  b.len = 0;
  ck_assert_int_eq(attn_v1_encode_session_step(&b, &sh, 2, out, lse, 3, w),
                   ATTN_OK);
  ck_assert_str_eq(b.data,
                   "{\"output\":[[[1,2],[3,4]],[[5,6],[7,8.5]]],"
                   "\"lse\":[[0.5,null],[null,1e-07]],\"length\":3,"
                   "\"attn_weights\":[[[1,0,0],[0.5,0.5,0]],"
                   "[[0.25,0.75,0],[0,1,0]]]}");
  attn_buf_free(&b);
}
END_TEST

/* What a step's answer writes reads back bit for bit: its "output" sent
 * back as a step's query decodes to the same floats. */
START_TEST(step_answer_round_trip) {
  const attn_v1_step_shape sh = {3, 1, 5};
  enum { T = 4, N = T * 3 * 5 };
  float out[N], lse[T * 3];
  uint64_t seed = 7;
  for (int i = 0; i < N; i++) out[i] = rand_f32(&seed);
  /* FLT_MAX is left out: its text 3.4028235e+38 is above FLT_MAX as a
   * double, which the decoders refuse (attn_json_f64_to_f32) */
  out[0] = 0.0f, out[1] = -0.0f, out[2] = 1e-45f;
  out[3] = nextafterf(FLT_MAX, 0);
  out[4] = -FLT_MIN, out[5] = 0.1f, out[6] = 16777216.0f;
  for (int i = 0; i < T * 3; i++) lse[i] = rand_f32(&seed);
  attn_buf b;
  attn_buf_init(&b, 0);
  ck_assert_int_eq(attn_v1_encode_session_step(&b, &sh, T, out, lse, 9, NULL),
                   ATTN_OK);
  const char *lse_at = strstr(b.data, ",\"lse\":");
  ck_assert_ptr_nonnull(lse_at);
  attn_buf q;
  attn_buf_init(&q, 0);
  attn_buf_puts(&q, "{\"query\":");
  attn_buf_append(&q, b.data + 10, (size_t)(lse_at - b.data) - 10);
  attn_buf_puts(&q, "}");
  attn_v1_step s;
  attn_diag d = {{0}};
  ck_assert_msg(
      attn_v1_decode_session_step(q.data, q.len, NULL, &sh, &s, &d) == ATTN_OK,
      "%s", d.msg);
  ck_assert_int_eq(s.t, T);
  ck_assert(memcmp(s.q, out, sizeof out) == 0);
  attn_v1_step_clear(&s);
  /* and lse, read by cJSON */
  cJSON *j = cJSON_Parse(b.data);
  ck_assert_ptr_nonnull(j);
  const cJSON *rows = cJSON_GetObjectItem(j, "lse"), *row;
  int k = 0;
  cJSON_ArrayForEach(row, rows) {
    const cJSON *e;
    cJSON_ArrayForEach(e, row) {
      float f = (float)e->valuedouble;
      ck_assert(memcmp(&f, &lse[k++], sizeof f) == 0);
    }
  }
  ck_assert_int_eq(k, T * 3);
  ck_assert_int_eq(cJSON_GetObjectItem(j, "length")->valueint, 9);
  cJSON_Delete(j);
  attn_buf_free(&q);
  attn_buf_free(&b);
}
END_TEST

/* ---- session files (codec.h "session files") ------------------------------
 * A dump of three layers (5, 0 and 17 tokens) with every variant, in each
 * dtype: encoded, decoded back field for field and byte for byte; then
 * the file damaged one way at a time (its header text edited, the data
 * kept), each refused with a message naming the fault; and every prefix
 * of the file refused. */

static float file_slopes[4] = {0.5f, 0.25f, 0.125f, 0.0625f};

/* A dump of dtype dt; its rows are bytes counting up (any bits will do:
 * the codec never reads them as numbers). */
static void file_dump(attn_kv_dtype dt, attn_session_dump *x) {
  memset(x, 0, sizeof *x);
  snprintf(x->id, sizeof x->id, "chat-1:a.b_c");
  x->owner = 0x0123456789abcdefull;
  attn_session_spec *p = &x->spec;
  p->layers = 3, p->num_heads = 4, p->num_kv_heads = 2, p->head_dim = 3;
  p->max_tokens = 17, p->kv_dtype = dt;
  p->has_scale = true, p->scale = 0.1f;
  p->has_window = true, p->window_left = 7;
  p->alibi = ATTN_SESSION_ALIBI_SLOPES, p->alibi_count = 4;
  p->alibi_slopes = malloc(sizeof file_slopes);
  memcpy(p->alibi_slopes, file_slopes, sizeof file_slopes);
  p->softcap = 30.0f;
  p->has_rotary = true, p->rotary_base = 10000.5, p->rotary_dims = 2;
  p->rotary_interleaved = true;
  static const int64_t len[3] = {5, 0, 17};
  size_t e = attn_kv_dtype_size(dt), total = 0;
  x->length = malloc(3 * sizeof *x->length);
  x->k = calloc(3, sizeof *x->k);
  x->v = calloc(3, sizeof *x->v);
  for (int l = 0; l < 3; l++) total += 2 * (size_t)len[l] * 2 * 3 * e;
  unsigned char *d = malloc(total);
  for (size_t i = 0; i < total; i++) d[i] = (unsigned char)(i * 7 + 1);
  x->data = d;
  for (int l = 0; l < 3; l++) {
    size_t n = (size_t)len[l] * 2 * 3 * e;
    x->length[l] = len[l];
    if (!n) continue;
    x->k[l] = d;
    x->v[l] = d + n;
    d += 2 * n;
  }
}

static void file_encode(attn_kv_dtype dt, attn_buf *b) {
  attn_session_dump x;
  file_dump(dt, &x);
  attn_buf_init(b, 0);
  ck_assert_int_eq(attn_session_file_encode(b, &x), ATTN_OK);
  attn_session_dump_clear(&x);
}

START_TEST(file_round_trip) {
  attn_kv_dtype dt = (attn_kv_dtype)_i;
  attn_session_dump x, y;
  attn_buf b;
  attn_diag d = {{0}};
  file_dump(dt, &x);
  attn_buf_init(&b, 0);
  ck_assert_int_eq(attn_session_file_encode(&b, &x), ATTN_OK);
  uint64_t N = 0;
  for (int i = 0; i < 8; i++) N |= (uint64_t)(unsigned char)b.data[i] << 8 * i;
  ck_assert_uint_eq((8 + N) % 8, 0); /* the data on 8 bytes */
  ck_assert_msg(attn_session_file_decode(b.data, b.len, &y, &d) == ATTN_OK,
                "%s", d.msg);
  ck_assert_str_eq(y.id, x.id);
  ck_assert_uint_eq(y.owner, x.owner);
  ck_assert_ptr_null(y.data);
  const attn_session_spec *p = &x.spec, *q = &y.spec;
  ck_assert_int_eq(q->layers, 3);
  ck_assert_int_eq(q->num_heads, p->num_heads);
  ck_assert_int_eq(q->num_kv_heads, p->num_kv_heads);
  ck_assert_int_eq(q->head_dim, p->head_dim);
  ck_assert_int_eq(q->max_tokens, p->max_tokens);
  ck_assert_int_eq(q->kv_dtype, dt);
  ck_assert(q->has_scale && q->scale == p->scale);
  ck_assert(q->has_window && q->window_left == 7);
  ck_assert_int_eq(q->alibi, ATTN_SESSION_ALIBI_SLOPES);
  ck_assert_int_eq(q->alibi_count, 4);
  ck_assert(!memcmp(q->alibi_slopes, file_slopes, sizeof file_slopes));
  ck_assert(q->softcap == p->softcap);
  ck_assert(q->has_rotary && q->rotary_base == p->rotary_base);
  ck_assert_int_eq(q->rotary_dims, 2);
  ck_assert(q->rotary_interleaved);
  size_t e = attn_kv_dtype_size(dt);
  for (int l = 0; l < 3; l++) {
    size_t n = (size_t)x.length[l] * 2 * 3 * e;
    ck_assert_int_eq(y.length[l], x.length[l]);
    if (!n) {
      ck_assert_ptr_null(y.k[l]);
      continue;
    }
    ck_assert(!memcmp(y.k[l], x.k[l], n));
    ck_assert(!memcmp(y.v[l], x.v[l], n));
    ck_assert((const char *)y.k[l] > b.data &&
              (const char *)y.k[l] < b.data + b.len);
  }
  /* encoded again: the same bytes */
  attn_buf c;
  attn_buf_init(&c, 0);
  ck_assert_int_eq(attn_session_file_encode(&c, &y), ATTN_OK);
  ck_assert_uint_eq(c.len, b.len);
  ck_assert(!memcmp(c.data, b.data, b.len));
  attn_buf_free(&c);
  /* a buffer with a cap: ETOOBIG, its length restored */
  attn_buf_init(&c, 64);
  attn_buf_puts(&c, "x");
  ck_assert_int_eq(attn_session_file_encode(&c, &x), ATTN_ETOOBIG);
  ck_assert_uint_eq(c.len, 1);
  attn_buf_free(&c);
  attn_session_dump_clear(&x);
  attn_session_dump_clear(&y);
  attn_buf_free(&b);
}
END_TEST

/* The file of b with its header text edited: the first `from` replaced by
 * `to` (the data kept, the header length rewritten). */
static void file_edit(const attn_buf *b, const char *from, const char *to,
                      attn_buf *out) {
  uint64_t N = 0;
  for (int i = 0; i < 8; i++) N |= (uint64_t)(unsigned char)b->data[i] << 8 * i;
  char *h = strndup(b->data + 8, (size_t)N);
  char *at = strstr(h, from);
  ck_assert_msg(at != NULL, "'%s' not in the header %s", from, h);
  attn_buf hdr;
  attn_buf_init(&hdr, 0);
  attn_buf_append(&hdr, h, (size_t)(at - h));
  attn_buf_puts(&hdr, to);
  attn_buf_puts(&hdr, at + strlen(from));
  attn_buf_init(out, 0);
  unsigned char len8[8];
  for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(hdr.len >> 8 * i);
  attn_buf_append(out, len8, 8);
  attn_buf_append(out, hdr.data, hdr.len);
  attn_buf_append(out, b->data + 8 + N, b->len - 8 - (size_t)N);
  attn_buf_free(&hdr);
  free(h);
}

typedef struct file_case {
  const char *from, *to; /* an edit of the F32 file's header */
  const char *msg;
} file_case;

/* The F32 file's data: layer 0 keys [0, 120), values [120, 240), layer 2
 * keys [240, 648), values [648, 1056). */
static const file_case file_cases[] = {
    {"\"format\":\"attnd-session\"", "\"format\":\"other\"",
     "format is 'other', not 'attnd-session' (not a session file)"},
    {"\"format\":\"attnd-session\",", "", "__metadata__ has no 'format'"},
    {"\"format_version\":\"1\"", "\"format_version\":\"2\"",
     "format_version is '2'; this attnd reads version 1"},
    {"\"id\":\"chat-1:a.b_c\"", "\"id\":\"a b\"", "id 'a b' is not a session"},
    {"\"owner\":\"0123456789abcdef\"", "\"owner\":\"0123\"",
     "owner '0123' is not 16"},
    {"\"owner\":\"0123456789abcdef\"", "\"owner\":1", "value 'owner' is a"},
    {"\"owner\":", "\"extra\":\"x\",\"owner\":",
     "unknown __metadata__ key 'extra'"},
    {"\"owner\":", "\"id\":\"x\",\"owner\":", "key 'id' given twice"},
    {"{\\\"layers\\\":3", "{\\\"layers\\\":3,\\\"colour\\\":1",
     "spec: unknown field 'colour'"},
    {"{\\\"layers\\\":3", "[", "spec: "},
    {"\\\"num_kv_heads\\\":2,", "", "spec: num_kv_heads is missing"},
    {"[0.5,0.25,0.125,0.0625]", "[0.5]",
     "spec: alibi has 1 slopes; num_heads is 4"},
    {"\\\"layers\\\":3", "\\\"layers\\\":5000", "layers is 5000; at most 4096"},
    {"\"dtype\":\"F32\"", "\"dtype\":\"F16\"",
     "tensor 'layers.0.key': dtype is 'F16'; the spec's kv_dtype fp32 is "
     "stored as F32"},
    {"\"shape\":[5,2,3]", "\"shape\":[5,2,4]",
     "tensor 'layers.0.key': shape [5,2,4]; the spec's is [length, 2, 3]"},
    {"\"shape\":[5,2,3]", "\"shape\":[5,2]", "shape must be [length,"},
    {"\"shape\":[5,2,3]", "\"shape\":[5,-2,3]", "shape must be [length,"},
    {"\"shape\":[17,2,3],\"data_offsets\":[240,648]",
     "\"shape\":[18,2,3],\"data_offsets\":[240,672]",
     "18 tokens, above the spec's max_tokens (17)"},
    {"\"data_offsets\":[0,120]", "\"data_offsets\":[0,121]",
     "data_offsets hold 121 bytes; its shape needs 120"},
    {"\"data_offsets\":[0,120]", "\"data_offsets\":[1,121]",
     "leaving a hole after byte 0"},
    {"\"data_offsets\":[120,240]", "\"data_offsets\":[0,120]", "overlap"},
    {"\"data_offsets\":[648,1056]", "\"data_offsets\":[648,1056.5]",
     "data_offsets must be [begin, end]"},
    {"\"data_offsets\":[648,1056]", "\"data_offsets\":[2000,2408]",
     "reach past the data section (1056 bytes"},
    {"\"data_offsets\":[0,120]}", "\"data_offsets\":[0,120],\"x\":1}",
     "tensor 'layers.0.key': unknown key 'x'"},
    {",\"data_offsets\":[0,120]", "",
     "tensor 'layers.0.key': missing "
     "'data_offsets'"},
    {"\"layers.1.key\"", "\"layers.3.key\"", "unknown tensor 'layers.3.key'"},
    {"\"layers.1.key\"", "\"layers.01.key\"", "unknown tensor 'layers.01.key'"},
    {"\"layers.1.key\"", "\"layers.0.key\"",
     "tensor 'layers.0.key' given "
     "twice"},
    {"[240,240]},\"layers.1.value\"",
     "[240,240]},\"layers.1.extra\":{},\"layers.1.value\"",
     "unknown tensor 'layers.1.extra'"},
    {"{\"__metadata__\"", "{\"__metadata__\":{},\"__metadata__\"",
     "__metadata__ given twice"},
    {"\"__metadata__\"", "\"__meta\"", "no __metadata__ (not a session file)"},
    {"{\"__metadata__\"", " {\"__metadata__\"", "does not start with a JSON"},
    {"\"format\"", "\"format\"\"", "header: malformed JSON"},
};

START_TEST(file_damaged) {
  const file_case *c = &file_cases[_i];
  attn_buf b, e;
  attn_session_dump y;
  attn_diag d = {{0}};
  file_encode(ATTN_KV_FP32, &b);
  file_edit(&b, c->from, c->to, &e);
  attn_status s = attn_session_file_decode(e.data, e.len, &y, &d);
  ck_assert_msg(s == ATTN_EPARSE, "case %d: status %d (%s)", _i, s, d.msg);
  ck_assert_msg(!strncmp(d.msg, "session file: ", 14), "%s", d.msg);
  check_msg(d.msg, c->msg, c->from);
  ck_assert(all_zero(&y, sizeof y));
  attn_buf_free(&b);
  attn_buf_free(&e);
}
END_TEST

/* A missing tensor (its bytes gone too), key and value of other lengths,
 * a trailing byte, a cut at every length, a header length past the file. */
START_TEST(file_cut_or_padded) {
  attn_buf b, e;
  attn_session_dump y;
  attn_diag d = {{0}};
  file_encode(ATTN_KV_BF16, &b);
  /* every prefix is refused */
  for (size_t n = 0; n < b.len; n++) {
    ck_assert_msg(attn_session_file_decode(b.data, n, &y, &d) == ATTN_EPARSE,
                  "a file cut at %zu bytes read", n);
    ck_assert(all_zero(&y, sizeof y));
  }
  attn_session_file_decode(b.data, 4, &y, &d);
  check_msg(d.msg, "too short for the 8-byte header length", "4 bytes");
  attn_session_file_decode(b.data, 100, &y, &d);
  check_msg(d.msg, "the file is cut short?", "100 bytes");
  attn_session_file_decode(b.data, b.len - 1, &y, &d);
  check_msg(d.msg, "reach past the data section", "one byte short");
  /* a trailing byte */
  attn_buf_init(&e, 0);
  attn_buf_append(&e, b.data, b.len);
  attn_buf_append(&e, "", 1);
  ck_assert_int_eq(attn_session_file_decode(e.data, e.len, &y, &d),
                   ATTN_EPARSE);
  check_msg(d.msg, "(1 trailing bytes)", "trailing");
  attn_buf_free(&e);
  /* a header length of 2^63 */
  attn_buf_init(&e, 0);
  attn_buf_append(&e, b.data, b.len);
  e.data[7] = (char)0x80;
  ck_assert_int_eq(attn_session_file_decode(e.data, e.len, &y, &d),
                   ATTN_EPARSE);
  check_msg(d.msg, "the header length is 9223372036854", "2^63");
  attn_buf_free(&e);
  /* a layer without its value: the key's entry names it */
  file_edit(&b, "\"layers.2.value\"", "\"layers.2.key\"", &e);
  attn_session_file_decode(e.data, e.len, &y, &d);
  check_msg(d.msg, "tensor 'layers.2.key' given twice", "dup");
  attn_buf_free(&e);
  attn_buf_free(&b);
  /* key and value of other lengths (sizes consistent) */
  file_encode(ATTN_KV_FP32, &b);
  file_edit(&b,
            "\"layers.0.value\":{\"dtype\":\"F32\",\"shape\":[5,2,3],"
            "\"data_offsets\":[120,240]}",
            "\"layers.0.value\":{\"dtype\":\"F32\",\"shape\":[4,2,3],"
            "\"data_offsets\":[120,216]}",
            &e);
  attn_session_file_decode(e.data, e.len, &y, &d);
  check_msg(d.msg, "layer 0 has 5 keys and 4 values", "lengths");
  attn_buf_free(&e);
  /* a tensor missing, with its bytes */
  file_edit(&b,
            ",\"layers.1.value\":{\"dtype\":\"F32\",\"shape\":[0,2,3],"
            "\"data_offsets\":[240,240]}",
            "", &e);
  attn_session_file_decode(e.data, e.len, &y, &d);
  check_msg(d.msg,
            "tensor 'layers.1.value' is missing (the spec has 3 "
            "layers)",
            "missing");
  attn_buf_free(&e);
  attn_buf_free(&b);
}
END_TEST

Suite *session_codec_suite(void) {
  Suite *s = suite_create("session_codec");
  TCase *tc = tcase_create("spec");
  tcase_add_loop_test(tc, spec_table, 0, N_OF(spec_cases));
  tcase_add_test(tc, spec_round_trip);
  tcase_add_test(tc, spec_depth_limit);
  suite_add_tcase(s, tc);
  tc = tcase_create("step");
  tcase_add_loop_test(tc, step_table, 0, N_OF(step_cases));
  tcase_add_test(tc, step_flat_equals_nested);
  tcase_add_test(tc, step_message_names_the_session);
  suite_add_tcase(s, tc);
  tc = tcase_create("truncate_fork");
  tcase_add_loop_test(tc, truncate_table, 0, N_OF(truncate_cases));
  tcase_add_loop_test(tc, fork_table, 0, N_OF(fork_cases));
  tcase_add_test(tc, fork_id_length);
  suite_add_tcase(s, tc);
  tc = tcase_create("encode");
  tcase_add_test(tc, encode_session_object);
  tcase_add_test(tc, encode_errors_restore);
  tcase_add_test(tc, encode_step_answer);
  tcase_add_test(tc, step_answer_round_trip);
  suite_add_tcase(s, tc);
  tc = tcase_create("file");
  tcase_add_loop_test(tc, file_round_trip, 0, 3);
  tcase_add_loop_test(tc, file_damaged, 0, N_OF(file_cases));
  tcase_add_test(tc, file_cut_or_padded);
  suite_add_tcase(s, tc);
  return s;
}
