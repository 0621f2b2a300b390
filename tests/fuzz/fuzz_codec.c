/* fuzz_codec.c - libFuzzer target: what a worker does with a request body
 * (decode, run the model, encode the answer), for both protocols, without
 * the HTTP layer; and the bodies of the model repository's operations.
 *
 * The first input byte is the framing, the rest is the body:
 *   bits 5-6   3: a model repository body (below); else an inference:
 *   bit 0      0: KServe v2 (POST /v2/models/{m}/infer), 1: /v1/attention
 *   bit 1      v2 model: 0 "sdpa", 1 "mha"
 *   bit 2      v2 only: bytes 1-2 (little-endian) are the
 *              Inference-Header-Content-Length, the body follows them
 *   bits 3-4   Content-Encoding: 0 or 3 identity, 1 gzip, 2 deflate; the
 *              body is inflated first (at most 64 KiB), as infer.c does
 * A repository body (bits 5-6 both set, bit 7 clear) is read by
 * attn_v2_decode_repository as the operation of bits 1-2 (0 or 3 index, 1
 * load, 2 unload).  With bits 5-7 all set the body is one of /v1/sessions
 * (check_session): bits 0-1 pick the decoder (0 a spec, 1 a step, 2
 * truncate, 3 fork), bits 2-4 the session shape a step is read against
 * (step_shapes).
 * Limits are small (4096 elements per tensor, 64 tokens) so that every
 * input runs in microseconds.  Besides the sanitizers (ASan, UBSan), each
 * input checks what src/server/infer.c and repo.c rely on:
 *   - a failed inflate, decode, infer or encode leaves its output zeroed
 *     (nothing to free) and says why (a non-empty message), with a status
 *     that is a client error: a 500 must never come from a request body;
 *   - a successful encode is valid JSON (the v2 JSON header up to its
 *     header length), and a binary part is exactly the sizes it declares;
 *   - Triton's timeout peeked at (attn_v2_peek_timeout, before the queue)
 *     is the one the v2 decode reads, whenever both find one;
 *   - what a consumer reads of a decoded request is there: every element
 *     of a BYTES input, read with attn_tensor_bytes_at (ASan sees an
 *     overread), and a numeric sequence_id's digits (p->s) are its value
 *     ((uint64_t)p->i);
 *   - a /v1/sessions body that decodes is what its type promises (a spec
 *     with num_heads and head_dim, a step's rows all there and finite, key
 *     with value and position, a valid id, a length >= 0), and what the
 *     encoders make of it is JSON that decodes back to the same: a spec
 *     from its session object, a step's query from the answer's "output",
 *     bit for bit;
 *   - a repository body is taken or refused, with the same message, as
 *     repo.c did with cJSON before the codec read these bodies (the
 *     reference below), whenever attnd's JSON parser takes the body within
 *     the repository's limits (cJSON is laxer: the bodies it alone takes
 *     are refused, which is checked as any failure is).
 * Any violation aborts (a crash for libFuzzer).
 *
 * Build and run: tests/fuzz/run.sh codec [seconds]
 */
#include <cjson/cJSON.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/buf.h"
#include "attn/codec.h"
#include "attn/engine.h"
#include "attn/infer_request.h"
#include "attn/json.h"
#include "attn/model.h"
#include "attn/session.h"
#include "../../src/server/internal.h"
#include "../../src/server/inflate.h"

static attn_registry *reg;

static void fail(const char *what, attn_status s, const attn_diag *d) {
  fprintf(stderr, "fuzz_codec: %s: %s: %s\n", what, attn_status_name(s),
          d ? d->msg : "");
  abort();
}

static int all_zero(const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    if (b[i]) return 0;
  return 1;
}

/* The statuses a request body may cause: each is a 4xx. */
static int client_error(attn_status s) {
  return s == ATTN_EPARSE || s == ATTN_EINVAL || s == ATTN_ESHAPE ||
         s == ATTN_ETOOBIG || s == ATTN_EUNSUPPORTED || s == ATTN_ENONFINITE;
}

static void check_failure(const char *what, attn_status s, const attn_diag *d,
                          const void *out, size_t out_size) {
  if (!client_error(s)) fail(what, s, d);
  if (!d->msg[0]) fail("empty message", s, d);
  if (!all_zero(out, out_size)) fail("output not zeroed on failure", s, d);
}

static void check_json(const char *p, size_t n) {
  cJSON *j = cJSON_ParseWithLength(p, n);
  if (!j) {
    fprintf(stderr, "fuzz_codec: answer is not JSON: %.*s\n",
            (int)(n > 400 ? 400 : n), p);
    abort();
  }
  cJSON_Delete(j);
}

/* Every element of each BYTES input, read in full; sequence_id's forms
 * agreeing (see codec.h). */
static void check_decoded(const attn_infer_request *r) {
  for (size_t i = 0; i < r->n_inputs; i++) {
    const attn_tensor *t = &r->inputs[i].tensor;
    size_t n, len, sum = 0;
    const char *e;
    if (t->dtype != ATTN_DT_BYTES) continue;
    if (!attn_shape_numel(t->rank, t->shape, &n))
      fail("BYTES shape overflows", ATTN_OK, NULL);
    for (size_t k = 0; k < n; k++) {
      if (attn_tensor_bytes_at(t, (int64_t)k, &e, &len) != ATTN_OK)
        fail("a BYTES element of the shape is missing", ATTN_OK, NULL);
      for (size_t c = 0; c <= len; c++) sum += (unsigned char)e[c];
      if (e[len] != '\0')
        fail("a BYTES element without its NUL", ATTN_OK, NULL);
    }
    if (attn_tensor_bytes_at(t, (int64_t)n, &e, &len) == ATTN_OK)
      fail("a BYTES element past the shape", ATTN_OK, NULL);
    if (sum == SIZE_MAX) abort(); /* keeps the reads */
  }
  const attn_param *p = attn_infer_find_param(r, "sequence_id");
  if (!p) return;
  if (p->type == ATTN_PARAM_INT) {
    char digits[24];
    snprintf(digits, sizeof digits, "%" PRIu64, (uint64_t)p->i);
    if (!p->s || strcmp(digits, p->s) != 0)
      fail("sequence_id's digits are not its value", ATTN_OK, NULL);
  } else if (p->type != ATTN_PARAM_STRING || !p->s) {
    fail("sequence_id neither a number nor a string", ATTN_OK, NULL);
  }
}

/* ---- the repository's bodies ------------------------------------------- */

/* The reference: repo.c's reading of a repository body with cJSON before
 * the codec read them (d set to its message when it refuses). */
static int ref_keys(const cJSON *o, const char *const *allowed,
                    const char *where, attn_diag *d) {
  for (const cJSON *k = o ? o->child : NULL; k; k = k->next) {
    size_t i = 0;
    while (allowed[i] && strcmp(allowed[i], k->string)) i++;
    if (allowed[i]) continue;
    if (strcmp(k->string, "config") == 0 || strncmp(k->string, "file:", 5) == 0)
      attn_diag_set(d, ATTN_EINVAL,
                    "%s: '%.64s' is not supported: attnd loads a model from "
                    "its file in the models directory (edit the file, then "
                    "load)",
                    where, k->string);
    else
      attn_diag_set(d, ATTN_EINVAL, "%s: unknown key '%.64s'", where,
                    k->string);
    return 0;
  }
  return 1;
}

static int ref_repo(cJSON *root, attn_v2_repo_op op, bool *ready,
                    attn_diag *d) {
  static const char *const index_keys[] = {"ready", NULL};
  static const char *const top[] = {"parameters", NULL};
  static const char *const load_params[] = {NULL};
  static const char *const unload_params[] = {"unload_dependents", NULL};
  const char *what = op == ATTN_V2_REPO_INDEX  ? "POST /v2/repository/index"
                     : op == ATTN_V2_REPO_LOAD ? "a load"
                                               : "an unload";
  *ready = false;
  if (!cJSON_IsObject(root)) {
    attn_diag_set(d, ATTN_EINVAL,
                  "the body of %s must be a JSON object (or empty)", what);
    return 0;
  }
  if (op == ATTN_V2_REPO_INDEX) {
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(root, "ready");
    if (!ref_keys(root, index_keys, "index", d)) return 0;
    if (r && !cJSON_IsBool(r)) {
      attn_diag_set(d, ATTN_EINVAL, "index: 'ready' must be true or false");
      return 0;
    }
    *ready = cJSON_IsTrue(r);
    return 1;
  }
  int load = op == ATTN_V2_REPO_LOAD;
  const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "parameters");
  const char *where = load ? "load: parameters" : "unload: parameters";
  if (!ref_keys(root, top, load ? "load" : "unload", d)) return 0;
  if (p && !cJSON_IsObject(p)) {
    attn_diag_set(d, ATTN_EINVAL, "%s must be a JSON object", where);
    return 0;
  }
  return ref_keys(p, load ? load_params : unload_params, where, d);
}

static void check_repo(const char *body, size_t n, attn_v2_repo_op op) {
  attn_v2_repo_request r;
  attn_diag d = {{0}}, rd = {{0}};
  memset(&r, 1, sizeof r);
  attn_status s = attn_v2_decode_repository(body, n, op, &r, &d);
  if (s) check_failure("repository", s, &d, &r, sizeof r);
  size_t i = 0;
  while (i < n && strchr(" \t\r\n", body[i]) && body[i]) i++;
  cJSON *tree = NULL, *root;
  if (i < n && attn_json_parse_capped(body, n, ATTN_MAX_REPO_JSON_DEPTH,
                                      ATTN_MAX_REPO_JSON_NODES, "", &tree,
                                      NULL) != ATTN_OK) {
    if (!s) fail("repository body taken that the parser refuses", s, &d);
    return;
  }
  attn_json_free(tree);
  if (i == n) {
    root = cJSON_CreateObject();
  } else { /* cJSON's own tree, as repo.c had it */
    char *z = malloc(n + 1);
    if (!z) abort();
    memcpy(z, body, n);
    z[n] = '\0';
    root = cJSON_ParseWithLengthOpts(z, n + 1, NULL, 1);
    free(z);
  }
  if (!root) fail("a body attnd's parser takes and cJSON refuses", s, &d);
  bool ready;
  int ok = ref_repo(root, op, &ready, &rd);
  cJSON_Delete(root);
  if (ok != (s == ATTN_OK) || (ok && ready != r.ready) ||
      (!ok && strcmp(rd.msg, d.msg) != 0)) {
    fprintf(stderr, "fuzz_codec: repository: reference %s '%s', codec %s\n",
            ok ? "takes" : "refuses", rd.msg, attn_status_name(s));
    fail("repository body read unlike repo.c", s, &d);
  }
}

/* ---- /v1/sessions ------------------------------------------------------ */

/* The shapes a step is read against (H, Hkv, D). */
static const attn_v1_step_shape step_shapes[8] = {
    {1, 1, 1}, {2, 1, 2}, {2, 2, 3},  {4, 2, 2},
    {3, 1, 5}, {8, 2, 4}, {1, 1, 16}, {16, 4, 1}};

/* The count of the body's "alibi" list, -1 when there is none or cJSON
 * does not read the body. */
static long alibi_count(const char *body, size_t n) {
  cJSON *j = cJSON_ParseWithLength(body, n);
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "alibi");
  long c = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : -1;
  cJSON_Delete(j);
  return c;
}

/* a and b ask for the same session (softcap -0 and 0 both none). */
static int same_spec(const attn_session_spec *a, const attn_session_spec *b) {
  attn_session_spec x = *a, y = *b;
  if (a->alibi == ATTN_SESSION_ALIBI_SLOPES &&
      (b->alibi != ATTN_SESSION_ALIBI_SLOPES ||
       memcmp(a->alibi_slopes, b->alibi_slopes,
              (size_t)a->num_heads * sizeof(float)) != 0))
    return 0;
  x.alibi_slopes = y.alibi_slopes = NULL;
  if (x.softcap == 0) x.softcap = 0;
  return memcmp(&x, &y, sizeof x) == 0;
}

/* The defaults the store fills in a session's object (session.h). */
static void fill_spec(attn_session_spec *s) {
  if (!s->layers) s->layers = 1;
  if (!s->num_kv_heads) s->num_kv_heads = s->num_heads;
  if (!s->max_tokens) s->max_tokens = 8192;
  if (s->has_rotary && !s->rotary_base) s->rotary_base = 10000;
  if (s->has_rotary && !s->rotary_dims) s->rotary_dims = s->head_dim;
}

/* A spec that decodes is encoded as a session object (when its slopes are
 * num_heads, as the store makes sure) with the store's defaults filled,
 * which is JSON, and which without its id and lengths decodes to that
 * filled spec. */
static void check_spec(const char *body, size_t n,
                       const attn_codec_limits *lim) {
  attn_session_spec sp, back;
  attn_diag d = {{0}};
  attn_status s = attn_v1_decode_session_spec(body, n, lim, &sp, &d);
  if (s) {
    check_failure("session spec", s, &d, &sp, sizeof sp);
    return;
  }
  if (sp.num_heads < 1 || sp.head_dim < 1 ||
      (sp.alibi == ATTN_SESSION_ALIBI_SLOPES) != (sp.alibi_slopes != NULL))
    fail("session spec decoded without its fields", s, &d);
  if (sp.alibi == ATTN_SESSION_ALIBI_SLOPES &&
      alibi_count(body, n) != (long)sp.num_heads) {
    attn_session_spec_clear(&sp);
    return;
  }
  attn_session_info info;
  attn_buf b;
  memset(&info, 0, sizeof info);
  memcpy(info.id, "f", 2);
  fill_spec(&sp);
  info.spec = sp;
  attn_buf_init(&b, 0);
  if (attn_v1_encode_session(&b, &info)) fail("session encode", s, &d);
  check_json(b.data, b.len);
  const char *from = strstr(b.data, ",\"layers\":"),
             *to = strstr(b.data, ",\"length\":");
  if (!from || !to) fail("session object without its fields", s, &d);
  b.data[0] = '{';
  memmove(b.data + 1, from + 1, (size_t)(to - from - 1));
  b.data[to - from] = '}';
  s = attn_v1_decode_session_spec(b.data, (size_t)(to - from + 1), lim, &back,
                                  &d);
  if (s) fail("a session object's spec does not decode", s, &d);
  if (!same_spec(&sp, &back)) fail("a spec decodes unlike it was", s, &d);
  attn_session_spec_clear(&back);
  attn_session_spec_clear(&sp);
  attn_buf_free(&b);
}

/* A step that decodes has its rows, finite; its answer (the query as the
 * output, part of it as lse and weights) is JSON whose "output", sent back
 * as a query, decodes to the same floats (but for +-FLT_MAX, whose text
 * 3.4028235e+38 is above FLT_MAX as a double: the decoders refuse it, as
 * attn_json_f64_to_f32 says). */
static void check_step(const char *body, size_t n, const attn_codec_limits *lim,
                       const attn_v1_step_shape *sh) {
  attn_v1_step st, back;
  attn_diag d = {{0}};
  attn_status s = attn_v1_decode_session_step(body, n, lim, sh, &st, &d);
  if (s) {
    check_failure("session step", s, &d, &st, sizeof st);
    return;
  }
  size_t nq = (size_t)(st.t * sh->H * sh->D),
         nk = (size_t)(st.t * sh->Hkv * sh->D);
  if (st.t < 1 || !st.q || !st.k != !st.v || (st.k && !st.has_position) ||
      st.layer < 0 || (st.has_position && st.position < 0) ||
      nq > lim->max_tensor_elements)
    fail("session step decoded without its fields", s, &d);
  int max = 0;
  for (size_t i = 0; i < nq; i++) {
    if (!isfinite(st.q[i])) fail("a step's query not finite", s, &d);
    max |= fabsf(st.q[i]) == FLT_MAX;
  }
  for (size_t i = 0; st.k && i < nk; i++)
    if (!isfinite(st.k[i]) || !isfinite(st.v[i]))
      fail("a step's key or value not finite", s, &d);
  size_t nw = (size_t)(sh->H * st.t * st.t);
  float *w = st.need_weights && nw <= 65536 ? malloc(nw * sizeof *w) : NULL;
  for (size_t i = 0; w && i < nw; i++) w[i] = st.q[i % nq];
  attn_buf b, q;
  attn_buf_init(&b, 0);
  attn_buf_init(&q, 0);
  if (attn_v1_encode_session_step(&b, sh, st.t, st.q, st.q, st.t, w))
    fail("step answer encode", s, &d);
  check_json(b.data, b.len);
  const char *lse = strstr(b.data, ",\"lse\":");
  if (!lse) fail("a step's answer without lse", s, &d);
  if (attn_buf_puts(&q, "{\"query\":") ||
      attn_buf_append(&q, b.data + 10, (size_t)(lse - b.data) - 10) ||
      attn_buf_puts(&q, "}"))
    abort();
  s = attn_v1_decode_session_step(q.data, q.len, lim, sh, &back, &d);
  if (!max && s) fail("a step's output does not decode as a query", s, &d);
  if (!max && (back.t != st.t || memcmp(back.q, st.q, nq * sizeof *st.q)))
    fail("a step's output decodes unlike the query", s, &d);
  attn_v1_step_clear(&back);
  attn_v1_step_clear(&st);
  attn_buf_free(&b);
  attn_buf_free(&q);
  free(w);
}

static void check_session(const char *body, size_t n, unsigned frame) {
  attn_codec_limits lim = {
      .max_tensor_elements = 4096, .max_inputs = 16, .max_depth = 32};
  attn_diag d = {{0}};
  attn_status s;
  switch (frame & 3) {
    case 0:
      check_spec(body, n, &lim);
      break;
    case 1:
      check_step(body, n, &lim, &step_shapes[frame >> 2 & 7]);
      break;
    case 2: {
      int64_t len = -5;
      s = attn_v1_decode_session_truncate(body, n, &len, &d);
      if (s) check_failure("session truncate", s, &d, &len, sizeof len);
      if (!s && len < 0) fail("truncate to a negative length", s, &d);
      break;
    }
    default: {
      char id[ATTN_SESSION_ID_MAX + 1];
      memset(id, 'x', sizeof id);
      s = attn_v1_decode_session_fork(body, n, id, &d);
      if (s) check_failure("session fork", s, &d, id, 1);
      if (!s && !attn_session_id_ok(id, strlen(id)))
        fail("fork to an invalid id", s, &d);
      break;
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!reg) {
    attn_diag d = {{0}};
    attn_status s = attn_registry_create(NULL, &reg, &d);
    if (s) fail("registry", s, &d);
    attn_engine_set_blas_threads(1);
  }
  if (size == 0) return 0;
  unsigned frame = data[0];
  if (frame >> 5 == 7) { /* a /v1/sessions body, exactly its size */
    char *sb = malloc(size - 1 ? size - 1 : 1);
    if (!sb) return 0;
    memcpy(sb, data + 1, size - 1);
    check_session(sb, size - 1, frame);
    free(sb);
    return 0;
  }
  if ((frame >> 5 & 3) == 3) { /* a repository body, exactly its size */
    static const attn_v2_repo_op ops[] = {ATTN_V2_REPO_INDEX, ATTN_V2_REPO_LOAD,
                                          ATTN_V2_REPO_UNLOAD,
                                          ATTN_V2_REPO_INDEX};
    char *rb = malloc(size - 1 ? size - 1 : 1);
    if (!rb) return 0;
    memcpy(rb, data + 1, size - 1);
    check_repo(rb, size - 1, ops[frame >> 1 & 3]);
    free(rb);
    return 0;
  }
  int v1 = frame & 1, mha = (frame >> 1) & 1;
  size_t hl = 0, off = 1;
  if (!v1 && (frame & 4)) {
    if (size < 3) return 0;
    hl = (size_t)data[1] | (size_t)data[2] << 8;
    off = 3;
  }
  /* A copy the exact size of the body, so ASan sees every overread; 64-byte
   * aligned as http.c keeps bodies (blobs may then be used in place). */
  size_t n = size - off;
  char *body = aligned_alloc(64, (n + 64) / 64 * 64);
  if (!body) return 0;
  memcpy(body, data + off, n);
  char *plain = NULL; /* the inflated body's block */
  const char *in = body;

  attn_codec_limits lim = {
      .max_tensor_elements = 4096, .max_inputs = 16, .max_depth = 32};
  attn_model_limits ml = {.max_seq_len = 64,
                          .max_tensor_elements = 4096,
                          .max_weights_elements = 4096};
  attn_exec x = {.threads = 1};
  attn_infer_request req;
  attn_infer_response out = {0};
  attn_v1_info info;
  attn_diag d = {{0}};
  attn_buf b;
  attn_buf_init(&b, 0);
  attn_status s;

  attn__encoding enc = (frame >> 3 & 3) == 1   ? ATTN_ENC_GZIP
                       : (frame >> 3 & 3) == 2 ? ATTN_ENC_DEFLATE
                                               : ATTN_ENC_IDENTITY;
  if (enc != ATTN_ENC_IDENTITY) {
    size_t pad = (64 - hl % 64) % 64, len = 0;
    /* the ratio of the default config: a small body reaches it past 1 MiB
     * only, so 65536 stays the limit that is hit */
    s = attn__inflate(body, n, enc, 65536, 200, pad, &plain, &len, &d);
    if (s) {
      if (plain || len) fail("inflate left output", s, &d);
      check_failure("inflate", s, &d, &req, 0);
      goto done;
    }
    in = plain + pad;
    n = len;
    if (hl > n) goto done; /* infer.c: a 400 about the header length */
  }
  int64_t peeked = v1 ? -1 : attn_v2_peek_timeout(in, n, hl);
  s = v1 ? attn_v1_decode(in, n, &lim, &req, &info, &d)
         : attn_v2_decode(in, n, hl, &lim, &req, &d);
  if (s) {
    check_failure("decode", s, &d, &req, sizeof req);
    goto done;
  }
  if (!v1) check_decoded(&req);
  if (peeked >= 0 && peeked != req.timeout_us) {
    fprintf(stderr, "fuzz_codec: timeout peeked %lld, decoded %lld\n",
            (long long)peeked, (long long)req.timeout_us);
    fail("the peek and the decode disagree", s, &d);
  }
  const char *name =
      v1 ? (req.model ? req.model : "sdpa") : (mha ? "mha" : "sdpa");
  const attn_model *m = attn_registry_find(reg, name, NULL);
  if (!m) goto done_req; /* v1 naming a resident model: a 404 */
  memset(&d, 0, sizeof d);
  s = attn_model_infer(m, &req, &ml, &x, &out, &d);
  if (s) {
    check_failure("infer", s, &d, &out, sizeof out);
    goto done_req;
  }
  memset(&d, 0, sizeof d);
  if (v1) {
    attn_v1_timing t = {0.25, 1.5, 2.0};
    s = attn_v1_encode(&out, &req, &info, &t, &b, &d);
    if (s) fail("v1 encode of a successful result", s, &d);
    check_json(b.data, b.len);
  } else {
    size_t json_len = 0, bin = 0;
    s = attn_v2_encode(&out, &b, &json_len, &d);
    if (s) fail("v2 encode of a successful result", s, &d);
    for (size_t i = 0; i < out.n_outputs; i++)
      if (out.outputs[i].binary) {
        size_t k;
        if (!attn_shape_numel(out.outputs[i].tensor.rank,
                              out.outputs[i].tensor.shape, &k))
          fail("output shape overflows", ATTN_OK, NULL);
        bin += k * sizeof(float);
      }
    if (json_len == 0 && bin) fail("binary outputs, no header length", s, &d);
    check_json(b.data, json_len ? json_len : b.len);
    if (json_len && json_len + bin != b.len)
      fail("binary part is not the declared sizes", s, &d);
  }
  attn_infer_response_free(&out);
done_req:
  attn_infer_request_free(&req);
done:
  attn_buf_free(&b);
  free(plain);
  free(body);
  return 0;
}
