/* metrics.c - per-thread counters and their Prometheus exposition.
 *
 * DESIGN
 * Every value attnd counts is a uint64 at a fixed index of one flat array
 * (`layout` below: the HTTP counters, three plain counters, then one block
 * per model, the last block for requests whose model is not known).  Each
 * thread that records gets its own copy of that array, a shard, the first
 * time it records (my_shard: a thread-local pointer, checked against the
 * instance's generation so that a thread outliving one server and
 * recording into the next gets a fresh shard).  Only that thread writes
 * its shard, with relaxed atomic loads and stores (plain moves on x86: no
 * lock prefix, no cache line shared with another writer); a scrape reads
 * every shard with relaxed loads and adds them up (totals()).  Shards
 * live until attn_metrics_destroy; there are as many as threads that
 * recorded (the HTTP threads, in attnd).
 * A histogram is its buckets (not cumulative), a +Inf bucket and the sum;
 * the exposition makes the buckets cumulative and prints the +Inf bucket
 * as _count, so a scrape is consistent with itself even while requests
 * complete.  Durations are kept in integer ns and printed as exact
 * decimal seconds, so a sum is the sum of the observed times to the ns.
 * Threads: record on any thread (its own shard); create, destroy on one;
 * render and model_stats on any (the shard list under `mu`).
 */
#include "attn/metrics.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attn/clock.h"

#include "attn/limits.h"

#define NB_TIME 18           /* duration buckets: 50 us .. 30 s */
#define NB_TOK 21            /* query tokens: 1, 2, 4 .. 2^20 */
#define H_TIME (NB_TIME + 2) /* a histogram: buckets, +Inf, sum */
#define H_TOK (NB_TOK + 2)

static const uint64_t time_bounds[NB_TIME] = {
    50000,     100000,     250000,     500000,      1000000,     2500000,
    5000000,   10000000,   25000000,   50000000,    100000000,   250000000,
    500000000, 1000000000, 2500000000, 5000000000u, 10000000000, 30000000000};
static const char *const time_le[NB_TIME] = {
    "5e-05", "0.0001", "0.00025", "0.0005", "0.001", "0.0025",
    "0.005", "0.01",   "0.025",   "0.05",   "0.1",   "0.25",
    "0.5",   "1",      "2.5",     "5",      "10",    "30"};

static const uint64_t tok_bounds[NB_TOK] = {
    1,    2,    4,    8,     16,    32,    64,     128,    256,    512,    1024,
    2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288, 1048576};
_Static_assert(1048576 == ATTN_MAX_SEQ_LEN, "the last bucket is the limit");

static const char *const methods[] = {"GET",    "HEAD",    "POST",  "PUT",
                                      "DELETE", "OPTIONS", "PATCH", "other"};
#define N_METHODS (sizeof methods / sizeof methods[0])

/* The status codes of RFC 9110 and friends that a server sends, and 499
 * (the access log's "client left"); any other is "other". */
static const int codes[] = {
    100, 101, 200, 201, 202, 204, 206, 301, 302, 304, 307, 308, 400, 401,
    403, 404, 405, 406, 408, 409, 410, 411, 412, 413, 414, 415, 416, 417,
    421, 422, 426, 428, 429, 431, 499, 500, 501, 502, 503, 504, 505};
#define N_CODES (sizeof codes / sizeof codes[0] + 1)

static const char *const outcomes[ATTN_OUTCOME_N] = {
    "success", "invalid",  "too_large", "rejected",
    "timeout", "draining", "internal"};
static const char *const protos[ATTN_PROTO_N] = {"v2", "v1"};

/* One model's block. */
enum {
  M_OUTCOME = 0,                                     /* [proto][outcome] */
  M_REQ = M_OUTCOME + ATTN_PROTO_N * ATTN_OUTCOME_N, /* [proto][H_TIME] */
  M_QUEUE = M_REQ + ATTN_PROTO_N * H_TIME,           /* H_TIME */
  M_COMPUTE = M_QUEUE + H_TIME,                      /* H_TIME */
  M_TOK = M_COMPUTE + H_TIME,                        /* H_TOK */
  M_FLOPS = M_TOK + H_TOK,
  M_SUCC_N,
  M_SUCC_NS,
  M_FAIL_N,
  M_FAIL_NS, /* Triton's statistics */
  M_QUEUE_NS,
  M_IN_NS,
  M_INFER_NS,
  M_OUT_NS,
  M_LAST, /* attn_now_ns() of the last success (max, not a sum) */
  M_SIZE
};

typedef struct shard {
  struct shard *next;
  _Atomic uint64_t v[]; /* n */
} shard;

struct attn_metrics {
  uint64_t gen;
  _Atomic(char *) *models; /* n_models; NULL until named */
  size_t n_models;
  char **routes; /* n_routes */
  size_t n_routes;
  size_t n;                /* values per shard */
  size_t bytes_in, model0; /* indexes: the plain counters, model blocks */
  pthread_mutex_t mu;
  shard *shards;
};

static atomic_uint_fast64_t next_gen = 1;
static _Thread_local uint64_t tls_gen;
static _Thread_local shard *tls_shard;

static char **copy_names(const char *const *names, size_t n) {
  char **c = calloc(n ? n : 1, sizeof *c);
  for (size_t i = 0; c && i < n; i++) {
    if (!(c[i] = strdup(names[i]))) {
      while (i--) free(c[i]);
      free(c);
      return NULL;
    }
  }
  return c;
}

static void free_names(char **c, size_t n) {
  for (size_t i = 0; c && i < n; i++) free(c[i]);
  free(c);
}

attn_status attn_metrics_create(const attn_metrics_labels *l,
                                attn_metrics **out, attn_diag *d) {
  *out = NULL;
  attn_metrics *m = calloc(1, sizeof *m);
  if (!m) return attn_diag_set(d, ATTN_ENOMEM, "out of memory for metrics");
  m->gen = atomic_fetch_add(&next_gen, 1);
  m->n_models = l->max_models > l->n_models ? l->max_models : l->n_models;
  m->n_routes = l->n_routes;
  m->models = calloc(m->n_models ? m->n_models : 1, sizeof *m->models);
  m->routes = copy_names(l->routes, l->n_routes);
  pthread_mutex_init(&m->mu, NULL);
  bool named = m->models != NULL;
  for (size_t i = 0; named && i < l->n_models; i++)
    named = attn_metrics_name_model(m, i, l->models[i]);
  if (!named || !m->routes) {
    attn_metrics_destroy(m);
    return attn_diag_set(d, ATTN_ENOMEM, "out of memory for metrics");
  }
  m->bytes_in = l->n_routes * N_METHODS * N_CODES;
  m->model0 = m->bytes_in + 3; /* bytes in, bytes out, auth failures */
  m->n = m->model0 + (m->n_models + 1) * M_SIZE;
  *out = m;
  return ATTN_OK;
}

void attn_metrics_destroy(attn_metrics *m) {
  if (!m) return;
  for (shard *s = m->shards, *next; s; s = next) {
    next = s->next;
    free(s);
  }
  pthread_mutex_destroy(&m->mu);
  for (size_t i = 0; m->models && i < m->n_models; i++)
    free(atomic_load(&m->models[i]));
  free(m->models);
  free_names(m->routes, m->n_routes);
  free(m);
}

int attn_metrics_method(const char *method) {
  for (size_t i = 0; i + 1 < N_METHODS; i++)
    if (strcmp(method, methods[i]) == 0) return (int)i;
  return (int)N_METHODS - 1;
}

static size_t code_index(int code) {
  for (size_t i = 0; i + 1 < N_CODES; i++)
    if (codes[i] == code) return i;
  return N_CODES - 1;
}

/* ---- recording ---------------------------------------------------------- */

/* This thread's shard of m, made on its first use; NULL when out of
 * memory (the observation is dropped). */
static shard *my_shard(attn_metrics *m) {
  if (tls_gen == m->gen) return tls_shard;
  shard *s = calloc(1, sizeof *s + m->n * sizeof s->v[0]);
  if (!s) return NULL;
  pthread_mutex_lock(&m->mu);
  s->next = m->shards;
  m->shards = s;
  pthread_mutex_unlock(&m->mu);
  tls_gen = m->gen;
  tls_shard = s;
  return s;
}

/* Only the owning thread writes a shard: no read-modify-write needed. */
static inline void add(_Atomic uint64_t *c, uint64_t n) {
  atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
                        memory_order_relaxed);
}

static void observe(_Atomic uint64_t *h, const uint64_t *bounds, size_t nb,
                    uint64_t v) {
  size_t i = 0;
  while (i < nb && v > bounds[i]) i++;
  add(&h[i], 1); /* i == nb: +Inf */
  add(&h[nb + 1], v);
}

void attn_metrics_http(attn_metrics *m, int route, int method, int code,
                       uint64_t bytes_in, uint64_t bytes_out) {
  shard *s = m ? my_shard(m) : NULL;
  if (!s || route < 0 || (size_t)route >= m->n_routes || method < 0 ||
      (size_t)method >= N_METHODS)
    return;
  add(&s->v[((size_t)route * N_METHODS + (size_t)method) * N_CODES +
            code_index(code)],
      1);
  add(&s->v[m->bytes_in], bytes_in);
  add(&s->v[m->bytes_in + 1], bytes_out);
}

void attn_metrics_auth_failure(attn_metrics *m) {
  shard *s = m ? my_shard(m) : NULL;
  if (s) add(&s->v[m->bytes_in + 2], 1);
}

void attn_metrics_infer(attn_metrics *m, const attn_infer_obs *o) {
  shard *s = m ? my_shard(m) : NULL;
  if (!s || o->proto >= ATTN_PROTO_N || o->outcome >= ATTN_OUTCOME_N) return;
  size_t mi = o->model >= 0 && (size_t)o->model < m->n_models ? (size_t)o->model
                                                              : m->n_models;
  _Atomic uint64_t *b = &s->v[m->model0 + mi * M_SIZE];
  add(&b[M_OUTCOME + o->proto * ATTN_OUTCOME_N + o->outcome], 1);
  observe(&b[M_REQ + o->proto * H_TIME], time_bounds, NB_TIME, o->total_ns);
  if (o->queued) observe(&b[M_QUEUE], time_bounds, NB_TIME, o->queue_ns);
  if (o->computed) observe(&b[M_COMPUTE], time_bounds, NB_TIME, o->compute_ns);
  if (o->query_tokens >= 0)
    observe(&b[M_TOK], tok_bounds, NB_TOK, (uint64_t)o->query_tokens);
  if (o->outcome != ATTN_OUTCOME_SUCCESS) {
    add(&b[M_FAIL_N], 1);
    add(&b[M_FAIL_NS], o->total_ns);
    return;
  }
  add(&b[M_FLOPS], o->flops);
  add(&b[M_SUCC_N], 1);
  add(&b[M_SUCC_NS], o->total_ns);
  add(&b[M_QUEUE_NS], o->queue_ns);
  add(&b[M_IN_NS], o->input_ns);
  add(&b[M_INFER_NS], o->compute_ns);
  add(&b[M_OUT_NS], o->output_ns);
  atomic_store_explicit(&b[M_LAST], o->end_mono_ns, memory_order_relaxed);
}

/* ---- reading ------------------------------------------------------------ */

/* Every shard added up into a new array of m->n (NULL: out of memory);
 * M_LAST is the latest of the shards', not their sum. */
static uint64_t *totals(attn_metrics *m) {
  uint64_t *t = calloc(m->n, sizeof *t);
  if (!t) return NULL;
  pthread_mutex_lock(&m->mu);
  for (const shard *s = m->shards; s; s = s->next) {
    for (size_t i = 0; i < m->n; i++)
      t[i] += atomic_load_explicit(&s->v[i], memory_order_relaxed);
    for (size_t mi = 0; mi <= m->n_models; mi++) {
      size_t at = m->model0 + mi * M_SIZE + M_LAST;
      uint64_t v = atomic_load_explicit(&s->v[at], memory_order_relaxed);
      t[at] -= v; /* undo the sum: keep the max */
      if (v > t[at]) t[at] = v;
    }
  }
  pthread_mutex_unlock(&m->mu);
  return t;
}

void attn_metrics_model_stats(attn_metrics *m, size_t model,
                              attn_model_stats *out) {
  memset(out, 0, sizeof *out);
  uint64_t *t = m && model < m->n_models ? totals(m) : NULL;
  if (!t) return;
  const uint64_t *b = &t[m->model0 + model * M_SIZE];
  out->success_count = b[M_SUCC_N];
  out->success_ns = b[M_SUCC_NS];
  out->fail_count = b[M_FAIL_N];
  out->fail_ns = b[M_FAIL_NS];
  out->queue_ns = b[M_QUEUE_NS];
  out->input_ns = b[M_IN_NS];
  out->infer_ns = b[M_INFER_NS];
  out->output_ns = b[M_OUT_NS];
  if (b[M_LAST]) {
    /* the monotonic time of the last success, on the wall clock */
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    uint64_t ago = attn_now_ns() - b[M_LAST];
    uint64_t wall = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
    out->last_inference_ms = (wall > ago ? wall - ago : 0) / 1000000u;
  }
  free(t);
}

/* ---- the exposition ----------------------------------------------------- */

static void head(attn_buf *b, const char *name, const char *type,
                 const char *help) {
  attn_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* name="value", the value escaped as the text format asks. */
static void label(attn_buf *b, const char *name, const char *v) {
  attn_buf_puts(b, name);
  attn_buf_puts(b, "=\"");
  for (; *v; v++) {
    if (*v == '\\' || *v == '"') attn_buf_append(b, "\\", 1);
    if (*v == '\n')
      attn_buf_puts(b, "\\n");
    else
      attn_buf_append(b, v, 1);
  }
  attn_buf_puts(b, "\"");
}

/* ns as exact decimal seconds. */
static void seconds(attn_buf *b, uint64_t ns) {
  attn_buf_printf(b, "%llu.%09llu", (unsigned long long)(ns / 1000000000u),
                  (unsigned long long)(ns % 1000000000u));
}

bool attn_metrics_name_model(attn_metrics *m, size_t i, const char *name) {
  if (!m || i >= m->n_models || atomic_load(&m->models[i])) return true;
  char *c = strdup(name);
  if (!c) return false;
  char *none = NULL;
  if (!atomic_compare_exchange_strong(&m->models[i], &none, c)) free(c);
  return true;
}

/* The model label of block mi ("" unnamed, or past the models). */
static const char *model_name(const attn_metrics *m, size_t mi) {
  char *n = mi < m->n_models ? atomic_load(&m->models[mi]) : NULL;
  return n ? n : "";
}

/* A model's block is shown for every named model, and for the unknown
 * model once it has counted something; an unnamed one never (its label
 * would be the unknown model's). */
static int shown(const attn_metrics *m, const uint64_t *t, size_t mi) {
  if (mi < m->n_models) return atomic_load(&m->models[mi]) != NULL;
  const uint64_t *b = &t[m->model0 + mi * M_SIZE];
  for (size_t i = 0; i < ATTN_PROTO_N * ATTN_OUTCOME_N; i++)
    if (b[M_OUTCOME + i]) return 1;
  return 0;
}

/* A histogram's labels: model, and protocol unless proto is NULL. */
typedef struct hist_labels {
  const char *model, *proto;
} hist_labels;

static void put_labels(attn_buf *b, const hist_labels *lb) {
  label(b, "model", lb->model);
  if (lb->proto) attn_buf_printf(b, ",protocol=\"%s\"", lb->proto);
}

/* One histogram series: h (buckets, +Inf, sum) with the labels lb. */
static void histogram(attn_buf *b, const char *name, const hist_labels *lb,
                      const uint64_t *h, const uint64_t *bounds, size_t nb,
                      int time) {
  uint64_t cum = 0;
  for (size_t i = 0; i <= nb; i++) {
    cum += h[i];
    attn_buf_printf(b, "%s_bucket{", name);
    put_labels(b, lb);
    attn_buf_puts(b, ",le=\"");
    if (i == nb)
      attn_buf_puts(b, "+Inf");
    else if (time)
      attn_buf_puts(b, time_le[i]);
    else
      attn_buf_u64(b, bounds[i]);
    attn_buf_puts(b, "\"} ");
    attn_buf_u64(b, cum);
    attn_buf_puts(b, "\n");
  }
  attn_buf_printf(b, "%s_sum{", name);
  put_labels(b, lb);
  attn_buf_puts(b, "} ");
  if (time)
    seconds(b, h[nb + 1]);
  else
    attn_buf_u64(b, h[nb + 1]);
  attn_buf_printf(b, "\n%s_count{", name);
  put_labels(b, lb);
  attn_buf_puts(b, "} ");
  attn_buf_u64(b, cum);
  attn_buf_puts(b, "\n");
}

static void render_http(const attn_metrics *m, const uint64_t *t, attn_buf *b) {
  head(b, "attnd_http_requests_total", "counter",
       "HTTP requests answered, by route template, method and status code.");
  for (size_t r = 0; r < m->n_routes; r++)
    for (size_t me = 0; me < N_METHODS; me++)
      for (size_t c = 0; c < N_CODES; c++) {
        uint64_t v = t[(r * N_METHODS + me) * N_CODES + c];
        if (!v) continue;
        attn_buf_puts(b, "attnd_http_requests_total{");
        label(b, "route", m->routes[r]);
        attn_buf_puts(b, ",");
        label(b, "method", methods[me]);
        if (c + 1 < N_CODES)
          attn_buf_printf(b, ",code=\"%d\"} ", codes[c]);
        else
          attn_buf_puts(b, ",code=\"other\"} ");
        attn_buf_u64(b, v);
        attn_buf_puts(b, "\n");
      }
  static const char *const plain[3][2] = {
      {"attnd_request_bytes_total", "Request body bytes read."},
      {"attnd_response_bytes_total", "Response body bytes sent."},
      {"attnd_auth_failures_total",
       "Requests refused for a missing or wrong API key."}};
  for (size_t i = 0; i < 3; i++) {
    head(b, plain[i][0], "counter", plain[i][1]);
    attn_buf_printf(b, "%s ", plain[i][0]);
    attn_buf_u64(b, t[m->bytes_in + i]);
    attn_buf_puts(b, "\n");
  }
}

static void render_outcomes(const attn_metrics *m, const uint64_t *t,
                            attn_buf *b) {
  head(b, "attnd_inference_requests_total", "counter",
       "Inference requests answered, by model, protocol and outcome.");
  for (size_t mi = 0; mi <= m->n_models; mi++) {
    if (!shown(m, t, mi)) continue;
    const uint64_t *blk = &t[m->model0 + mi * M_SIZE];
    for (size_t p = 0; p < ATTN_PROTO_N; p++)
      for (size_t o = 0; o < ATTN_OUTCOME_N; o++) {
        attn_buf_puts(b, "attnd_inference_requests_total{");
        label(b, "model", model_name(m, mi));
        attn_buf_printf(b, ",protocol=\"%s\",outcome=\"%s\"} ", protos[p],
                        outcomes[o]);
        attn_buf_u64(b, blk[M_OUTCOME + p * ATTN_OUTCOME_N + o]);
        attn_buf_puts(b, "\n");
      }
  }
  head(b, "attnd_attention_flops_total", "counter",
       "Floating-point operations of the attention computed for successful "
       "requests (projections included).");
  for (size_t mi = 0; mi <= m->n_models; mi++) {
    if (!shown(m, t, mi)) continue;
    attn_buf_puts(b, "attnd_attention_flops_total{");
    label(b, "model", model_name(m, mi));
    attn_buf_puts(b, "} ");
    attn_buf_u64(b, t[m->model0 + mi * M_SIZE + M_FLOPS]);
    attn_buf_puts(b, "\n");
  }
}

/* The histograms by model (at offset `at` of each block, H_TIME or H_TOK
 * values); by model and protocol when per_proto. */
static void render_hist(const attn_metrics *m, const uint64_t *t, attn_buf *b,
                        const char *name, const char *help, size_t at,
                        int per_proto, int time) {
  head(b, name, "histogram", help);
  for (size_t mi = 0; mi <= m->n_models; mi++) {
    if (!shown(m, t, mi)) continue;
    for (size_t p = 0; p < (per_proto ? ATTN_PROTO_N : 1); p++) {
      hist_labels lb = {model_name(m, mi), per_proto ? protos[p] : NULL};
      const uint64_t *h = &t[m->model0 + mi * M_SIZE + at + p * H_TIME];
      histogram(b, name, &lb, h, time ? time_bounds : tok_bounds,
                time ? NB_TIME : NB_TOK, time);
    }
  }
}

static void gauge(attn_buf *b, const char *name, const char *help, uint64_t v) {
  head(b, name, "gauge", help);
  attn_buf_printf(b, "%s ", name);
  attn_buf_u64(b, v);
  attn_buf_puts(b, "\n");
}

static void render_gauges(const attn_metrics_gauges *g, attn_buf *b) {
  gauge(b, "attnd_queue_depth", "Inference requests waiting in the queue.",
        g->queue_depth);
  gauge(b, "attnd_queue_capacity", "The queue's size (queue_capacity).",
        g->queue_capacity);
  gauge(b, "attnd_workers", "Worker threads.", g->workers);
  gauge(b, "attnd_workers_busy", "Workers running a request now.",
        g->workers_busy);
  gauge(b, "attnd_body_bytes_in_use",
        "Bytes of request and response bodies held now.", g->body_bytes_in_use);
  gauge(b, "attnd_body_bytes_limit",
        "What the bodies held may reach (max_total_body_bytes).",
        g->body_bytes_limit);
  gauge(b, "attnd_connections_open", "HTTP connections open now.",
        g->connections_open);
  gauge(b, "attnd_sessions", "Sessions open now (their KV caches kept).",
        g->sessions);
  head(b, "attnd_kv_cache_bytes", "gauge",
       "The sessions' KV cache: bytes of blocks in use, and the limit "
       "(kv_cache_bytes).");
  attn_buf_puts(b, "attnd_kv_cache_bytes{state=\"used\"} ");
  attn_buf_u64(b, g->kv_cache_used);
  attn_buf_puts(b, "\nattnd_kv_cache_bytes{state=\"limit\"} ");
  attn_buf_u64(b, g->kv_cache_limit);
  attn_buf_puts(b, "\n");
  head(b, "attnd_session_tokens_total", "counter",
       "Tokens appended to sessions (a retried step appends none).");
  attn_buf_puts(b, "attnd_session_tokens_total ");
  attn_buf_u64(b, g->session_tokens_total);
  attn_buf_puts(b, "\n");
  head(b, "attnd_sessions_expired_total", "counter",
       "Sessions freed after session_idle_timeout_s unused.");
  attn_buf_puts(b, "attnd_sessions_expired_total ");
  attn_buf_u64(b, g->sessions_expired_total);
  attn_buf_puts(b, "\n");
  gauge(b, "attnd_ready", "1 while /v2/health/ready answers 200, else 0.",
        g->ready ? 1 : 0);
  head(b, "attnd_build_info", "gauge",
       "Always 1; the labels say what runs: attnd's version, the engine's "
       "kernels, OpenBLAS's core.");
  attn_buf_puts(b, "attnd_build_info{");
  label(b, "version", g->version ? g->version : "");
  attn_buf_puts(b, ",");
  label(b, "engine_kernels", g->engine_kernels ? g->engine_kernels : "");
  attn_buf_puts(b, ",");
  label(b, "blas", g->blas ? g->blas : "");
  attn_buf_puts(b, "} 1\n");
}

/* More than the exposition of t can take, so that once reserved no
 * append can fail: each line is at most 160 bytes and its labels (escaped:
 * twice their length at most). */
static size_t bound(const attn_metrics *m, const uint64_t *t,
                    const attn_metrics_gauges *g) {
  size_t n = 32768; /* HELP, TYPE, the gauges, process_* */
  for (size_t i = 0; i < m->n_routes * N_METHODS * N_CODES; i++)
    if (t[i]) n += 160 + 2 * strlen(m->routes[i / (N_METHODS * N_CODES)]);
  for (size_t mi = 0; mi <= m->n_models; mi++)
    n +=
        (M_SIZE + 3 * ATTN_PROTO_N + 8) * (160 + 2 * strlen(model_name(m, mi)));
  const char *const info[] = {g->version, g->engine_kernels, g->blas};
  for (size_t i = 0; i < 3; i++) n += info[i] ? 2 * strlen(info[i]) : 0;
  return n;
}

attn_status attn_metrics_render(attn_metrics *m, const attn_metrics_gauges *g,
                                attn_buf *out) {
  uint64_t *t = totals(m);
  if (!t) return ATTN_ENOMEM;
  if (attn_buf_reserve(out, bound(m, t, g)) != ATTN_OK) {
    free(t);
    return ATTN_ENOMEM;
  }
  render_http(m, t, out);
  render_outcomes(m, t, out);
  render_hist(m, t, out, "attnd_request_duration_seconds",
              "Time from a request's first byte to its answer, as the access "
              "log's total_ms.",
              M_REQ, 1, 1);
  render_hist(m, t, out, "attnd_queue_duration_seconds",
              "Time requests waited in the queue, as the access log's "
              "queue_ms.",
              M_QUEUE, 0, 1);
  render_hist(m, t, out, "attnd_compute_duration_seconds",
              "Time the model computed, as the access log's compute_ms.",
              M_COMPUTE, 0, 1);
  render_hist(m, t, out, "attnd_query_tokens",
              "Query sequence length of each request computed.", M_TOK, 0, 0);
  free(t);
  render_gauges(g, out);
  return attn_metrics_process(out);
}
