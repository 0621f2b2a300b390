/* session.c - sessions (docs/api.md "Sessions"): the /v1/sessions kind of
 * job, and the step of the built-in model kv_attention for infer.c.
 *
 * DESIGN
 * routes.c checks a /v1/sessions path (the id, the operation) and hands
 * it on; attn__session_job makes the job on the HTTP thread, with the
 * owner of what it touches: the tag of the API key that sent it
 * (attn__auth_owner; 0 with keys off), so that a key sees only its own
 * sessions.  A worker runs it:
 *   decode   the body, by the /v1 session codec (src/codec/session_v1.c);
 *            a step's body is read with the session's shape, so that its
 *            messages say what the session takes;
 *   store    the operation on main's store (include/attn/session.h),
 *            which holds each session while it works on it;
 *   encode   the object, the list, or the step's answer.
 * KServe v2 reaches sessions through the model kv_attention: infer.c
 * decodes and encodes the request as any other inference and calls
 * attn__session_v2 instead of the model (the batched decode, or Triton's
 * sequence extension for one session).
 * Statuses: the store's, through respond.c (ECONFLICT 409, ENOSPACE 507,
 * ENOTFOUND 404); a 409 of a step at the wrong position also carries the
 * layer's "length", so that a client can resume.
 * Threads: made on an HTTP thread; run/expire on a worker.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/buf.h"
#include "attn/clock.h"
#include "attn/codec.h"
#include "attn/session.h"
#include "auth.h"
#include "internal.h"
#include "jobs.h"
#include "respond.h"

/* kv_attention's slot + 1 in the registry (0: none), for the metrics'
 * per-model series of /v1 steps. */
static int kv_model(const attn__srv_ctx *s) {
  return attn_registry_slot(s->models, ATTN_KV_MODEL_NAME,
                            strlen(ATTN_KV_MODEL_NAME)) +
         1;
}

static void answer_info(attn__http_resp *resp, int status,
                        const attn_session_info *info) {
  attn_buf b;
  attn_buf_init(&b, 0);
  attn_status st = attn_v1_encode_session(&b, info);
  attn__resp_encoded(resp, st, &b);
  if (st == ATTN_OK) resp->status = status;
}

/* A step refused because of the layer's length (409): the error and the
 * length, so that a client can resume. */
static void answer_conflict(attn__http_resp *resp, const attn_diag *d,
                            attn_session *sess, int64_t layer) {
  attn_session_info info = {0};
  if (layer < 0 || attn_session_info_get(sess, attn_now_ns(), &info, NULL) ||
      layer >= info.spec.layers) {
    attn_session_info_clear(&info);
    attn__resp_error(resp, 409, "%s", d->msg);
    return;
  }
  attn_buf b;
  attn_buf_init(&b, 0);
  attn_buf_puts(&b, "{\"error\":");
  attn_buf_json_string(&b, d->msg);
  attn_buf_puts(&b, ",\"length\":");
  attn_buf_i64(&b, info.length[layer]);
  attn_buf_puts(&b, "}");
  attn_session_info_clear(&info);
  attn__resp_json(resp, 409, &b);
}

/* The trace of a step for the metrics: kv_attention's series. */
static void trace_step(const attn__srv_ctx *s, attn__http_resp *resp,
                       uint64_t c0, uint64_t c1, int64_t B, int64_t t,
                       int64_t H, int64_t D, const int64_t *length) {
  attn__resp_trace *tr = &resp->trace;
  double flops = 0;
  tr->computed = true;
  tr->compute_ns = c1 - c0;
  tr->query_tokens = t;
  for (int64_t b = 0; b < B; b++)
    flops += 4.0 * (double)H * (double)t * (double)length[b] * (double)D;
  tr->flops = flops < 1.8e19 ? (uint64_t)flops : 0;
  resp->compute_ms = (double)(c1 - c0) / 1e6;
  (void)s;
}

/* POST /v1/sessions/{id}/attend on the held session. */
static void attend_v1(attn__srv_ctx *s, attn_session *sess, const char *body,
                      size_t len, attn__http_resp *resp) {
  const attn_session_spec *sp = attn_session_spec_of(sess);
  attn_v1_step_shape shape = {sp->num_heads, sp->num_kv_heads, sp->head_dim};
  attn_codec_limits lim = {
      .max_tensor_elements = (size_t)s->cfg->max_tensor_elements,
      .max_inputs = ATTN_MAX_INPUTS,
      .max_depth = ATTN_MAX_JSON_DEPTH};
  attn_v1_step step;
  attn_diag d = {{0}};
  attn_status st =
      attn_v1_decode_session_step(body, len, &lim, &shape, &step, &d);
  if (st) {
    attn__resp_status(resp, st, &d);
    return;
  }
  size_t rows = (size_t)step.t * (size_t)shape.H;
  float *out = malloc(rows * (size_t)shape.D * sizeof *out);
  float *lse = malloc(rows * sizeof *lse);
  float *w = NULL;
  int64_t length = 0, bad = 0;
  if (!out || !lse) {
    attn__resp_status(resp, ATTN_ENOMEM, NULL);
  } else {
    attn_session *one[1] = {sess};
    attn_session_step sst = {
        .B = 1,
        .t = step.t,
        .layer = step.layer,
        .sessions = one,
        .position = step.has_position ? &step.position : NULL,
        .q = step.q,
        .k = step.k,
        .v = step.v,
        .threads = attn__request_threads(s)};
    if (step.k && !step.has_position) sst.position = NULL;
    uint64_t c0 = attn_now_ns();
    st = attn_session_attend(s->sessions, &sst, c0, out, lse, &length,
                             step.need_weights ? &w : NULL, &bad, &d);
    uint64_t c1 = attn_now_ns();
    if (st == ATTN_ECONFLICT) {
      answer_conflict(resp, &d, sess, step.layer);
    } else if (st) {
      attn__resp_status(resp, st, &d);
    } else {
      trace_step(s, resp, c0, c1, 1, step.t, shape.H, shape.D, &length);
      attn_buf b;
      attn_buf_init(&b, 0);
      st = attn_v1_encode_session_step(&b, &shape, step.t, out, lse, length, w);
      attn__resp_encoded(resp, st, &b);
    }
  }
  free(out);
  free(lse);
  free(w);
  attn_v1_step_clear(&step);
}

/* GET /v1/sessions/{id}/kv: the held session as a session file
 * (codec.h).  The owner tag is written as 0: a tag is a hash of an API
 * key, not given out; a PUT of the file takes its owner from its key. */
static void answer_file(attn_session *sess, attn__http_resp *resp) {
  attn_session_dump x;
  attn_diag d = {{0}};
  attn_status st = attn_session_export(sess, &x, &d);
  if (st) {
    attn__resp_status(resp, st, &d);
    return;
  }
  x.owner = 0;
  attn_buf b;
  attn_buf_init(&b, 0);
  st = attn_session_file_encode(&b, &x);
  attn_session_dump_clear(&x);
  if (st) {
    attn_buf_free(&b);
    attn__resp_status(resp, st, NULL);
    return;
  }
  resp->status = 200;
  resp->content_type = "application/octet-stream";
  resp->body = attn_buf_steal(&b, &resp->len);
}

/* PUT /v1/sessions/{id} of application/octet-stream: a session from a
 * session file (its id and owner those of the request, not the file's). */
static void import_file(attn__srv_ctx *s, uint64_t owner, const char *id,
                        const char *body, size_t len, attn__http_resp *resp) {
  attn_session_dump x;
  attn_session_info info = {0};
  attn_diag d = {{0}};
  attn_status st = attn_session_file_decode(body, len, &x, &d);
  if (!st) {
    st = attn_session_import(s->sessions, owner, id, &x, attn_now_ns(), &info,
                             &d);
    attn_session_dump_clear(&x);
  }
  if (st)
    attn__resp_status(resp, st, &d);
  else
    answer_info(resp, 201, &info);
  attn_session_info_clear(&info);
}

/* The operations that work on one held session. */
static void run_held(attn__srv_ctx *s, attn__session_op op, attn_session *sess,
                     const char *body, size_t len, attn__http_resp *resp) {
  attn_session_info info = {0};
  attn_diag d = {{0}};
  attn_status st = ATTN_OK;
  uint64_t now = attn_now_ns();
  int status = 200;
  switch (op) {
    case ATTN_SESSION_ATTEND:
      attend_v1(s, sess, body, len, resp);
      return;
    case ATTN_SESSION_KV:
      answer_file(sess, resp);
      return;
    case ATTN_SESSION_TRUNCATE: {
      int64_t n = 0;
      if (!(st = attn_v1_decode_session_truncate(body, len, &n, &d)))
        st = attn_session_truncate(sess, n, now, &info, &d);
    } break;
    case ATTN_SESSION_FORK: {
      char id[ATTN_SESSION_ID_MAX + 1];
      if (!(st = attn_v1_decode_session_fork(body, len, id, &d)))
        st = attn_session_fork(s->sessions, sess, id, now, &info, &d);
      status = 201;
    } break;
    default:
      st = attn_session_info_get(sess, now, &info, &d);
      break;
  }
  if (st)
    attn__resp_status(resp, st, &d);
  else
    answer_info(resp, status, &info);
  attn_session_info_clear(&info);
}

static void session_run(attn__srv_ctx *s, attn__session_op op, uint64_t owner,
                        const char *id, const char *body, size_t len,
                        attn__http_resp *resp) {
  attn_diag d = {{0}};
  attn_status st;
  uint64_t now = attn_now_ns();
  switch (op) {
    case ATTN_SESSION_LIST: {
      attn_session_info *v = NULL;
      size_t n = 0;
      if ((st = attn_session_list(s->sessions, owner, now, &v, &n, &d))) {
        attn__resp_status(resp, st, &d);
        return;
      }
      attn_buf b;
      attn_buf_init(&b, 0);
      st = attn_v1_encode_sessions(&b, v, n);
      for (size_t i = 0; i < n; i++) attn_session_info_clear(&v[i]);
      free(v);
      attn__resp_encoded(resp, st, &b);
      return;
    }
    case ATTN_SESSION_CREATE: {
      attn_session_spec spec;
      attn_session_info info = {0};
      int created = 0;
      if (!(st = attn_v1_decode_session_spec(body, len, NULL, &spec, &d))) {
        st = attn_session_create(s->sessions, owner, id, &spec, now, &created,
                                 &info, &d);
        attn_session_spec_clear(&spec);
      }
      if (st)
        attn__resp_status(resp, st, &d);
      else
        answer_info(resp, created ? 201 : 200, &info);
      attn_session_info_clear(&info);
      return;
    }
    case ATTN_SESSION_IMPORT:
      import_file(s, owner, id, body, len, resp);
      return;
    case ATTN_SESSION_DELETE:
      if ((st = attn_session_delete(s->sessions, owner, id, &d))) {
        attn__resp_status(resp, st, &d);
        return;
      }
      resp->status = 204;
      resp->body = calloc(1, 1); /* no body; NULL would mean no memory */
      resp->len = 0;
      if (!resp->body) attn__resp_status(resp, ATTN_ENOMEM, NULL);
      return;
    default: {
      attn_session *sess = NULL;
      if ((st = attn_session_get(s->sessions, owner, id, now, &sess, &d))) {
        attn__resp_status(resp, st, &d);
        return;
      }
      run_held(s, op, sess, body, len, resp);
      attn_session_put(sess);
    }
  }
}

/* ---- the job ------------------------------------------------------------ */

typedef struct session_job {
  attn__job_base base; /* first member: the queue's link, whom to answer */
  attn__session_op op;
  uint64_t owner;
  const char *body; /* borrowed from the connection */
  size_t body_len;
  char id[ATTN_SESSION_ID_MAX + 1];
} session_job;

/* A step's answer counts under kv_attention's series (observe.c): its
 * wait in the queue, its model. */
static void trace_queued(const session_job *job, uint64_t waited_ns,
                         attn__http_resp *resp) {
  if (job->op != ATTN_SESSION_ATTEND) return;
  resp->trace.queued = true;
  resp->trace.queue_ns = waited_ns;
  resp->trace.model = kv_model(job->base.srv);
}

static void job_run(attn_job *j, int worker, uint64_t waited_ns) {
  session_job *job = (session_job *)j;
  attn__http_resp resp = {.queue_ms = (double)waited_ns / 1e6};
  (void)worker;
  session_run(job->base.srv, job->op, job->owner, job->id, job->body,
              job->body_len, &resp);
  trace_queued(job, waited_ns, &resp);
  attn__job_finish(&job->base, &resp);
}

static void job_expire(attn_job *j, uint64_t waited_ns) {
  session_job *job = (session_job *)j;
  attn__http_resp resp = {.queue_ms = (double)waited_ns / 1e6};
  attn__resp_waited(&resp, resp.queue_ms, -1,
                    job->base.srv->cfg->queue_timeout_ms);
  trace_queued(job, waited_ns, &resp);
  if (job->op == ATTN_SESSION_ATTEND)
    resp.trace.hint = ATTN_OUTCOME_TIMEOUT + 1;
  attn__job_finish(&job->base, &resp);
}

attn__job_base *attn__session_job(attn__srv_ctx *s, const attn__http_req *req,
                                  const attn__infer_target *t) {
  session_job *job = malloc(sizeof *job);
  if (!job) return NULL;
  job->base.job = (attn_job){.run = job_run, .expire = job_expire};
  job->base.job.deadline_ns = attn__queue_deadline(s->cfg, attn_now_ns());
  job->base.srv = s;
  job->op = t->session_op;
  job->owner = attn__auth_owner_of(s->auth, s->admin_auth, req->authorization,
                                   req->api_key);
  job->body = req->body;
  job->body_len = req->body_len;
  attn__copy_str(job->id, sizeof job->id, t->session);
  return &job->base;
}

/* ---- KServe v2: the model kv_attention ---------------------------------- */

/* The parameters kv_attention takes; those after N_STEP_PARAMS only with
 * sequence_start (they make the session). */
static const char *const v2_params[] = {
    "layer",       "sequence_id",  "sequence_start", "sequence_end",
    "layers",      "max_tokens",   "kv_dtype",       "scale",
    "window_left", "window_right", "softcap",        "alibi",
    "rotary",      "rotary_base",  "rotary_dims",    "rotary_interleaved"};
enum { N_STEP_PARAMS = 4, N_V2_PARAMS = sizeof v2_params / sizeof *v2_params };

static const char *kind_name(attn_param_type t) {
  return t == ATTN_PARAM_BOOL     ? "a boolean"
         : t == ATTN_PARAM_INT    ? "an integer"
         : t == ATTN_PARAM_DOUBLE ? "a number"
                                  : "a string";
}

/* Parameter name as an integer (or absent: *v unchanged). */
static attn_status param_int(const attn_infer_request *req, const char *name,
                             int64_t lo, int64_t *v, attn_diag *d) {
  const attn_param *p = attn_infer_find_param(req, name);
  if (!p) return ATTN_OK;
  if (p->type != ATTN_PARAM_INT || p->i < lo)
    return attn_diag_set(d, ATTN_EINVAL,
                         "parameter %s must be an integer >= %lld (it is %s)",
                         name, (long long)lo, kind_name(p->type));
  *v = p->i;
  return ATTN_OK;
}

static attn_status param_bool(const attn_infer_request *req, const char *name,
                              bool *v, attn_diag *d) {
  const attn_param *p = attn_infer_find_param(req, name);
  if (!p) return ATTN_OK;
  if (p->type != ATTN_PARAM_BOOL)
    return attn_diag_set(d, ATTN_EINVAL,
                         "parameter %s must be a boolean (it is %s)", name,
                         kind_name(p->type));
  *v = p->b;
  return ATTN_OK;
}

static attn_status param_num(const attn_infer_request *req, const char *name,
                             bool *given, double *v, attn_diag *d) {
  const attn_param *p = attn_infer_find_param(req, name);
  if (!p) return ATTN_OK;
  if ((p->type != ATTN_PARAM_INT && p->type != ATTN_PARAM_DOUBLE) ||
      !isfinite(p->d))
    return attn_diag_set(d, ATTN_EINVAL,
                         "parameter %s must be a finite number (it is %s)",
                         name, kind_name(p->type));
  *v = p->d;
  if (given) *given = true;
  return ATTN_OK;
}

/* A new session's spec from sequence_start's request: the shape from
 * the tensors, the rest from the parameters. */
static attn_status v2_spec(const attn_infer_request *req, int64_t H,
                           int64_t Hkv, int64_t D, attn_session_spec *sp,
                           attn_diag *d) {
  attn_status st;
  bool alibi = false, has_right = false;
  double scale = 0, softcap = 0, right = 0;
  int64_t left = -2;
  memset(sp, 0, sizeof *sp);
  sp->num_heads = H;
  sp->num_kv_heads = Hkv;
  sp->head_dim = D;
  const attn_param *dt = attn_infer_find_param(req, "kv_dtype");
  if (dt && (dt->type != ATTN_PARAM_STRING ||
             !(strcmp(dt->s, "fp32") == 0 || strcmp(dt->s, "bf16") == 0 ||
               strcmp(dt->s, "fp16") == 0)))
    return attn_diag_set(d, ATTN_EINVAL,
                         "parameter kv_dtype must be \"fp32\", \"bf16\" or "
                         "\"fp16\"");
  if (dt)
    sp->kv_dtype = dt->s[1] == 'p' && dt->s[2] == '3' ? ATTN_KV_FP32
                   : dt->s[0] == 'b'                  ? ATTN_KV_BF16
                                                      : ATTN_KV_FP16;
  if ((st = param_int(req, "layers", 1, &sp->layers, d)) ||
      (st = param_int(req, "max_tokens", 1, &sp->max_tokens, d)) ||
      (st = param_num(req, "scale", &sp->has_scale, &scale, d)) ||
      (st = param_num(req, "softcap", NULL, &softcap, d)) ||
      (st = param_int(req, "window_left", -1, &left, d)) ||
      (st = param_num(req, "window_right", &has_right, &right, d)) ||
      (st = param_bool(req, "alibi", &alibi, d)) ||
      (st = param_bool(req, "rotary", &sp->has_rotary, d)) ||
      (st = param_num(req, "rotary_base", NULL, &sp->rotary_base, d)) ||
      (st = param_int(req, "rotary_dims", 0, &sp->rotary_dims, d)) ||
      (st = param_bool(req, "rotary_interleaved", &sp->rotary_interleaved, d)))
    return st;
  if (has_right && right != 0)
    return attn_diag_set(d, ATTN_EINVAL,
                         "parameter window_right is %g; a session's window "
                         "ends at the token itself (0)",
                         right);
  if (attn_infer_find_param(req, "softcap") && !(softcap > 0))
    return attn_diag_set(d, ATTN_EINVAL,
                         "parameter softcap is %g; it must be > 0 (leave it "
                         "out for none)",
                         softcap);
  if ((attn_infer_find_param(req, "rotary_base") ||
       attn_infer_find_param(req, "rotary_dims") ||
       attn_infer_find_param(req, "rotary_interleaved")) &&
      !attn_infer_find_param(req, "rotary"))
    sp->has_rotary = true;
  sp->scale = (float)scale;
  sp->softcap = (float)softcap;
  sp->has_window = left != -2;
  sp->window_left = left == -2 ? 0 : left;
  sp->alibi = alibi ? ATTN_SESSION_ALIBI_STANDARD : ATTN_SESSION_ALIBI_OFF;
  return ATTN_OK;
}

/* Every parameter is one kv_attention takes, and the session's own only
 * with sequence_start. */
static attn_status v2_check_params(const attn_infer_request *req, bool start,
                                   attn_diag *d) {
  for (size_t i = 0; i < req->n_params; i++) {
    const char *name = req->params[i].name;
    size_t k = 0;
    while (k < N_V2_PARAMS && strcmp(v2_params[k], name) != 0) k++;
    if (k == N_V2_PARAMS)
      return attn_diag_set(d, ATTN_EINVAL,
                           "unknown parameter '%.64s' for model "
                           "kv_attention (it takes layer, and sequence_id, "
                           "sequence_start, sequence_end; with "
                           "sequence_start also layers, max_tokens, "
                           "kv_dtype and the variants)",
                           name);
    if (k >= N_STEP_PARAMS && !start)
      return attn_diag_set(d, ATTN_EINVAL,
                           "parameter %s is fixed when a session is made "
                           "(PUT /v1/sessions/{id}, or sequence_start); a "
                           "step does not take it",
                           name);
  }
  return ATTN_OK;
}

/* An input of the request, of rank `rank`, FP32 (as decoded); NULL when
 * absent. */
static attn_status v2_input(const attn_infer_request *req, const char *name,
                            int rank, bool required,
                            const attn_infer_input **out, attn_diag *d) {
  const attn_infer_input *in = attn_infer_find_input(req, name);
  *out = in;
  if (!in)
    return required ? attn_diag_set(d, ATTN_EINVAL,
                                    "input '%s' is missing (model "
                                    "kv_attention)",
                                    name)
                    : ATTN_OK;
  if (in->tensor.rank != rank)
    return attn_diag_set(d, ATTN_ESHAPE,
                         "input '%s' has %d dims; kv_attention takes %d here",
                         name, in->tensor.rank, rank);
  return ATTN_OK;
}

/* "[2,3,4]" into buf[96]. */
static const char *shape_text(const attn_tensor *t, char *buf) {
  size_t at = 0;
  buf[0] = '[';
  buf[1] = '\0';
  for (int i = 0; i < t->rank && at < 80; i++)
    at += (size_t)snprintf(buf + at + 1, 96 - at - 1, "%s%lld", i ? "," : "",
                           (long long)t->shape[i]);
  snprintf(buf + at + 1, 96 - at - 1, "]");
  return buf;
}

/* The step's tensors: query [B..,t,H,D], key and value [B..,t,Hkv,D]
 * (lead: 1 with the batch dim, 0 without). */
typedef struct v2_tensors {
  const attn_infer_input *q, *k, *v;
  int64_t B, t, H, Hkv, D;
} v2_tensors;

static attn_status v2_tensors_get(const attn_infer_request *req, int lead,
                                  v2_tensors *x, attn_diag *d) {
  attn_status st;
  int r = 3 + lead;
  if ((st = v2_input(req, "query", r, true, &x->q, d)) ||
      (st = v2_input(req, "key", r, false, &x->k, d)) ||
      (st = v2_input(req, "value", r, false, &x->v, d)))
    return st;
  if (!x->k != !x->v)
    return attn_diag_set(d, ATTN_EINVAL,
                         "input '%s' is given without '%s': a step sends "
                         "both or neither",
                         x->k ? "key" : "value", x->k ? "value" : "key");
  const int64_t *qs = x->q->tensor.shape;
  x->B = lead ? qs[0] : 1;
  x->t = qs[lead];
  x->H = qs[lead + 1];
  x->D = qs[lead + 2];
  x->Hkv = x->H;
  for (int i = 0; i < 2 && x->k; i++) {
    const attn_infer_input *kv = i ? x->v : x->k;
    const int64_t *ks = kv->tensor.shape;
    if ((lead && ks[0] != x->B) || ks[lead] != x->t || ks[lead + 2] != x->D ||
        (i && ks[lead + 1] != x->Hkv)) {
      char a[96], b[96];
      return attn_diag_set(d, ATTN_ESHAPE,
                           "input '%s' is %s and query %s: key and value "
                           "take [%st, num_kv_heads, head_dim] with query's "
                           "%st and head_dim, and the same num_kv_heads",
                           kv->name, shape_text(&kv->tensor, a),
                           shape_text(&x->q->tensor, b), lead ? "B, " : "",
                           lead ? "B, " : "");
    }
    if (!i) x->Hkv = ks[lead + 1];
  }
  if (x->B < 1 || x->t < 1 || x->H < 1 || x->D < 1 || x->Hkv < 1)
    return attn_diag_set(d, ATTN_ESHAPE,
                         "input 'query' has an empty dimension");
  return ATTN_OK;
}

/* The session id of sequence_id (a string, or an unsigned integer in its
 * decimal digits) into id. */
static attn_status v2_sequence_id(const attn_param *p, char *id, attn_diag *d) {
  if (p->type == ATTN_PARAM_INT) { /* the codec keeps a uint64 exactly */
    snprintf(id, ATTN_SESSION_ID_MAX + 1, "%" PRIu64, (uint64_t)p->i);
    return ATTN_OK;
  }
  if (p->type == ATTN_PARAM_STRING && attn_session_id_ok(p->s, strlen(p->s))) {
    attn__copy_str(id, ATTN_SESSION_ID_MAX + 1, p->s);
    return ATTN_OK;
  }
  return attn_diag_set(d, ATTN_EINVAL,
                       "parameter sequence_id must be an unsigned integer or "
                       "a string of 1 to %d bytes of A-Z a-z 0-9 . _ : -",
                       ATTN_SESSION_ID_MAX);
}

/* The answer's outputs: output and lse, binary as asked. */
static attn_status v2_outputs(const attn_infer_request *req,
                              attn_infer_response *r, float **out, float **lse,
                              const int64_t *oshape, const int64_t *lshape,
                              int lead, attn_diag *d) {
  static const char *const names[2] = {"output", "lse"};
  bool want[2] = {true, true}, bin[2];
  attn_dtype dt[2] = {ATTN_DT_INVALID, ATTN_DT_INVALID};
  bin[0] = bin[1] = req->binary_data_output == 1;
  if (req->outputs_given && req->n_outputs) {
    want[0] = want[1] = false;
    for (size_t i = 0; i < req->n_outputs; i++) {
      const attn_infer_output_req *o = &req->outputs[i];
      int id = o->name && strcmp(o->name, "output") == 0 ? 0
               : o->name && strcmp(o->name, "lse") == 0  ? 1
                                                         : -1;
      if (id < 0)
        return attn_diag_set(d, ATTN_EINVAL,
                             "unknown output '%.40s' for model kv_attention "
                             "(expected output, lse)",
                             o->name ? o->name : "");
      want[id] = true;
      if (o->binary != -1) bin[id] = o->binary != 0;
      dt[id] = o->datatype;
    }
  }
  r->model_name = strdup(ATTN_KV_MODEL_NAME);
  r->model_version = strdup("1");
  r->id = req->id ? strdup(req->id) : NULL;
  r->outputs = calloc(2, sizeof *r->outputs);
  if (!r->outputs || !r->model_name || !r->model_version || (req->id && !r->id))
    return attn_diag_set(d, ATTN_ENOMEM, "out of memory");
  for (int i = 0; i < 2; i++) {
    if (!want[i]) continue;
    attn_infer_output *o = &r->outputs[r->n_outputs];
    if (!(o->name = strdup(names[i])))
      return attn_diag_set(d, ATTN_ENOMEM, "out of memory");
    r->n_outputs++;
    o->binary = bin[i];
    o->datatype = dt[i];
    o->tensor.dtype = ATTN_DT_FP32;
    o->tensor.owns = true;
    o->tensor.rank = i ? 2 + lead : 3 + lead;
    memcpy(o->tensor.shape, i ? lshape : oshape,
           (size_t)o->tensor.rank * sizeof *oshape);
    float **data = i ? lse : out;
    o->tensor.data = *data;
    *data = NULL;
  }
  return ATTN_OK;
}

/* A session's failure in a batch: its index and id before the message. */
static attn_status in_batch(attn_status st, attn_diag *d, int64_t i,
                            const char *id) {
  char m[ATTN_DIAG_MAX];
  if (!d) return st;
  snprintf(m, sizeof m, "%s", d->msg);
  return attn_diag_set(d, st, "session_id[%lld] '%s': %s", (long long)i, id, m);
}

/* Get sessions ids[0, B) into held[] (all or none held). */
static attn_status hold_all(attn__srv_ctx *s, uint64_t owner,
                            const attn_infer_input *ids, int64_t B,
                            attn_session **held, char (*names)[129],
                            attn_diag *d) {
  uint64_t now = attn_now_ns();
  for (int64_t i = 0; i < B; i++) {
    const char *p;
    size_t n;
    attn_status st = attn_tensor_bytes_at(&ids->tensor, i, &p, &n);
    if (!st && !attn_session_id_ok(p, n))
      st = attn_diag_set(d, ATTN_EINVAL,
                         "session_id[%lld] is not a session id: 1 to %d "
                         "bytes of A-Z a-z 0-9 . _ : -",
                         (long long)i, ATTN_SESSION_ID_MAX);
    if (!st) {
      memcpy(names[i], p, n);
      names[i][n] = '\0';
      st = attn_session_get(s->sessions, owner, names[i], now, &held[i], d);
      if (st) st = in_batch(st, d, i, names[i]);
    }
    if (st) {
      while (i-- > 0) attn_session_put(held[i]);
      return st;
    }
  }
  return ATTN_OK;
}

bool attn__session_v2(attn__srv_ctx *s, uint64_t owner,
                      const attn_infer_request *req, int threads,
                      attn_infer_response *r, attn__http_resp *resp) {
  attn_diag d = {{0}};
  attn_status st;
  const attn_param *seq = attn_infer_find_param(req, "sequence_id");
  bool start = false, end = false;
  int lead = seq ? 0 : 1;
  v2_tensors x = {0};
  int64_t layer = 0;
  memset(r, 0, sizeof *r);
  if (!s->sessions) {
    attn__resp_error(resp, 503, "sessions are not available on this server");
    return true;
  }
  if ((st = param_bool(req, "sequence_start", &start, &d)) ||
      (st = param_bool(req, "sequence_end", &end, &d)) ||
      (st = !seq && (start || end)
                ? attn_diag_set(&d, ATTN_EINVAL,
                                "sequence_start and sequence_end need a "
                                "sequence_id")
                : ATTN_OK) ||
      (st = v2_check_params(req, start, &d)) ||
      (st = param_int(req, "layer", 0, &layer, &d)) ||
      (st = v2_tensors_get(req, lead, &x, &d))) {
    attn__resp_status(resp, st, &d);
    return true;
  }
  int64_t B = x.B;
  attn_session **held = calloc((size_t)B, sizeof *held);
  char(*names)[129] = calloc((size_t)B, sizeof *names);
  int64_t *pos = NULL, *length = calloc((size_t)B, sizeof *length), bad = 0;
  size_t rows = (size_t)B * (size_t)x.t * (size_t)x.H;
  float *out = malloc(rows * (size_t)x.D * sizeof *out);
  float *lse = malloc(rows * sizeof *lse);
  bool failed = true, got = false;
  if (!held || !names || !length || !out || !lse) {
    st = attn_diag_set(&d, ATTN_ENOMEM, "out of memory");
  } else if (seq) { /* Triton's sequence extension: one session */
    attn_session_spec sp;
    int created = 0;
    uint64_t now = attn_now_ns();
    if (!(st = v2_sequence_id(seq, names[0], &d)) && start &&
        !(st = v2_spec(req, x.H, x.Hkv, x.D, &sp, &d))) {
      st = attn_session_create(s->sessions, owner, names[0], &sp, now, &created,
                               NULL, &d);
      attn_session_spec_clear(&sp);
    }
    if (!st) st = attn_session_get(s->sessions, owner, names[0], now, held, &d);
    got = st == ATTN_OK;
    /* a start on a sequence that exists begins it again, as Triton's */
    if (got && start && !created)
      st = attn_session_truncate(held[0], 0, now, NULL, &d);
  } else {
    const attn_infer_input *ids, *p;
    if (!(st = v2_input(req, "session_id", 1, true, &ids, &d)) &&
        !(st = v2_input(req, "position", 1, x.k != NULL, &p, &d))) {
      if (ids->tensor.dtype != ATTN_DT_BYTES || ids->tensor.shape[0] != B)
        st = attn_diag_set(&d, ATTN_ESHAPE,
                           "input 'session_id' must be BYTES [%lld] (one id "
                           "per row of query)",
                           (long long)B);
      else if (p &&
               (p->tensor.dtype != ATTN_DT_INT64 || p->tensor.shape[0] != B))
        st = attn_diag_set(&d, ATTN_ESHAPE,
                           "input 'position' must be INT64 [%lld] (one per "
                           "session)",
                           (long long)B);
      else if (!(st = hold_all(s, owner, ids, B, held, names, &d)))
        got = true;
      if (p) pos = (int64_t *)p->tensor.data;
    }
  }
  if (got && !st) {
    attn_session_step step = {.B = B,
                              .t = x.t,
                              .layer = layer,
                              .sessions = held,
                              .position = x.k ? pos : NULL,
                              .q = (const float *)x.q->tensor.data,
                              .k = x.k ? (const float *)x.k->tensor.data : 0,
                              .v = x.v ? (const float *)x.v->tensor.data : 0,
                              .threads = threads};
    uint64_t c0 = attn_now_ns();
    st = attn_session_attend(s->sessions, &step, c0, out, lse, length, NULL,
                             &bad, &d);
    uint64_t c1 = attn_now_ns();
    if (st && (B > 1 || !seq)) st = in_batch(st, &d, bad, names[bad]);
    if (!st) {
      trace_step(s, resp, c0, c1, B, x.t, x.H, x.D, length);
      int64_t os[5] = {B, x.t, x.H, x.D}, ls[4] = {B, x.t, x.H};
      st = v2_outputs(req, r, &out, &lse, os + !lead, ls + !lead, lead, &d);
      r->flops = (double)resp->trace.flops; /* infer.c's trace reads these */
      r->query_tokens = x.t;
      failed = st != ATTN_OK;
    }
  }
  if (failed) {
    if (st == ATTN_ECONFLICT && got && bad >= 0 && bad < B)
      answer_conflict(resp, &d, held[bad], layer); /* its length */
    else
      attn__resp_status(resp, st, &d);
    attn_infer_response_free(r);
  }
  for (int64_t i = 0; got && i < B; i++) attn_session_put(held[i]);
  if (!failed && seq && end)
    attn_session_delete(s->sessions, owner, names[0], NULL);
  free(held);
  free(names);
  free(length);
  free(out);
  free(lse);
  return failed;
}
