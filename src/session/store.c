/* store.c - the session store (include/attn/session.h): sessions keyed by
 * (owner, id), each a filled spec and one KV sequence per layer of one
 * pool; steps through the engine's attn_kv_attend.
 *
 * DESIGN
 * Map.  A hash table of chains keyed by (owner, id), under the store's
 * mutex, which is held only to find, insert or remove an entry, to move
 * one in the list of last use, or to add to the counters: never while a
 * session's lock is taken for it, never across the pool or the engine.
 *
 * Reference counts.  A session's refs count the map (1 while it is
 * linked) and each holder (attn_session_get, list's own short holds).  A
 * holder is taken under the store's mutex (find, then add); a put
 * subtracts without it.  Unlinking (delete, expiry) drops the map's
 * reference under the mutex; whoever drops the last one frees the
 * session, outside the mutex: a session being stepped is never freed
 * under its holder, and its blocks go back to the pool when the last
 * holder puts it.
 *
 * Locks.  Each session has its own mutex for what reads or changes its
 * sequences (a step, truncate, fork's source, info), so one session's
 * steps run in order and different sessions' in parallel.  A batched step
 * takes its sessions' locks in address order (no two steps can each hold
 * one the other waits for).  Lock order: session locks, then the store's
 * mutex; never the other way round.
 *
 * Expiry.  Linked sessions sit in one intrusive list ordered by last use
 * (get, a step, info and create move one to the tail); a sweep walks it
 * from the head and stops at the first that is not idle long enough, so
 * it costs the sessions that expire.  Times are the callers' now_ns
 * (attn_now_ns's clock); a session's last use never goes backwards past
 * the tail's, which keeps the list ordered when callers' clocks are read
 * out of order.  The (owner, id) of the last EXPIRED_RING sessions that
 * expired are kept in a ring, so that a lookup of one answers "expired"
 * rather than "not found".
 *
 * A step is all or nothing: every session is checked, its rows encoded
 * (and a retry's compared with what is stored) and every buffer allocated
 * before the first append; an append the pool cannot serve, or an engine
 * call that fails, truncates the appended sessions back to their lengths
 * before the step.  The engine runs once per group of sessions with the
 * same storage dtype and variants (attn_kv_problem takes one of each);
 * its answer for a sequence does not depend on the others of its call, so
 * the grouping changes no bit of any answer.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define MAX_LAYERS 4096
#define MAX_HEADS 65536
#define MAX_HEAD_DIM 65536
#define MIN_BUCKETS 64

/* ---- small helpers ------------------------------------------------------- */

static uint64_t key_hash(uint64_t owner, const char *id) {
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < 8; i++)
    h = (h ^ ((owner >> (8 * i)) & 0xff)) * 1099511628211ull;
  for (const unsigned char *c = (const unsigned char *)id; *c; c++)
    h = (h ^ *c) * 1099511628211ull;
  return h ? h : 1;
}

static const char *alibi_name(attn_session_alibi a) {
  return a == ATTN_SESSION_ALIBI_STANDARD ? "true"
         : a == ATTN_SESSION_ALIBI_SLOPES ? "a list of slopes"
                                          : "off";
}

static attn_status id_check(const char *id, attn_diag *d) {
  if (!id || !attn_session_id_ok(id, strlen(id)))
    return attn_diag_set(d, ATTN_EINVAL,
                         "a session id is 1 to %d characters of A-Z a-z 0-9 "
                         ". _ : -",
                         ATTN_SESSION_ID_MAX);
  return ATTN_OK;
}

/* ---- the spec ------------------------------------------------------------ */

static attn_status check_counts(const attn_session_spec *in,
                                const attn_session_limits *lim, attn_diag *d) {
  if (in->layers < 0 || in->layers > MAX_LAYERS)
    return attn_diag_set(d, ATTN_EINVAL, "layers is %lld; it must be 1 to %d",
                         (long long)in->layers, MAX_LAYERS);
  if (in->num_heads < 1 || in->num_heads > MAX_HEADS)
    return attn_diag_set(d, ATTN_EINVAL,
                         "num_heads is %lld; it must be 1 to %d",
                         (long long)in->num_heads, MAX_HEADS);
  if (in->num_kv_heads < 0 || in->num_kv_heads > in->num_heads ||
      (in->num_kv_heads > 0 && in->num_heads % in->num_kv_heads != 0))
    return attn_diag_set(d, ATTN_EINVAL,
                         "num_kv_heads (%lld) must divide num_heads (%lld)",
                         (long long)in->num_kv_heads, (long long)in->num_heads);
  if (in->head_dim < 1 || in->head_dim > MAX_HEAD_DIM)
    return attn_diag_set(d, ATTN_EINVAL, "head_dim is %lld; it must be 1 to %d",
                         (long long)in->head_dim, MAX_HEAD_DIM);
  if (in->max_tokens < 0)
    return attn_diag_set(d, ATTN_EINVAL, "max_tokens is %lld; it must be >= 1",
                         (long long)in->max_tokens);
  if (in->max_tokens > lim->max_tokens)
    return attn_diag_set(d, ATTN_EINVAL,
                         "max_tokens is %lld; this server allows at most %lld "
                         "(max_seq_len)",
                         (long long)in->max_tokens, (long long)lim->max_tokens);
  if (!attn_kv_dtype_size(in->kv_dtype))
    return attn_diag_set(d, ATTN_EINVAL,
                         "kv_dtype must be \"fp32\", \"bf16\" or \"fp16\"");
  return ATTN_OK;
}

static attn_status check_variants(const attn_session_spec *in, attn_diag *d) {
  if (in->has_scale && !isfinite(in->scale))
    return attn_diag_set(d, ATTN_EINVAL, "scale must be a finite number");
  if (in->has_window && in->window_left < -1)
    return attn_diag_set(d, ATTN_EINVAL,
                         "window is %lld; it must be >= 0, or -1 (unbounded)",
                         (long long)in->window_left);
  if (in->alibi != ATTN_SESSION_ALIBI_OFF &&
      in->alibi != ATTN_SESSION_ALIBI_STANDARD &&
      in->alibi != ATTN_SESSION_ALIBI_SLOPES)
    return attn_diag_set(d, ATTN_EINVAL, "alibi must be true, false or a list");
  if (in->alibi == ATTN_SESSION_ALIBI_SLOPES) {
    if (!in->alibi_slopes || in->alibi_count != in->num_heads)
      return attn_diag_set(d, ATTN_EINVAL,
                           "alibi has %lld slopes; give one per query head: "
                           "num_heads (%lld) of them",
                           (long long)(in->alibi_slopes ? in->alibi_count : 0),
                           (long long)in->num_heads);
    for (int64_t h = 0; h < in->num_heads; h++)
      if (!isfinite(in->alibi_slopes[h]))
        return attn_diag_set(d, ATTN_EINVAL,
                             "alibi[%lld] must be a finite number",
                             (long long)h);
  }
  if (!(in->softcap >= 0.0f) || !isfinite(in->softcap))
    return attn_diag_set(d, ATTN_EINVAL,
                         "softcap must be a finite number >= 0 (0: off)");
  if (!in->has_rotary) return ATTN_OK;
  if (in->rotary_base != 0.0 &&
      (!(in->rotary_base > 1.0) || !isfinite(in->rotary_base)))
    return attn_diag_set(d, ATTN_EINVAL,
                         "rotary base is %g; it must be a finite number > 1",
                         in->rotary_base);
  int64_t R = in->rotary_dims ? in->rotary_dims : in->head_dim;
  if (R < 0 || R % 2 != 0 || R > in->head_dim)
    return attn_diag_set(d, ATTN_EINVAL,
                         "rotary dims is %lld; it must be even, at least 2 "
                         "and at most head_dim (%lld)",
                         (long long)R, (long long)in->head_dim);
  return ATTN_OK;
}

/* The engine's options of a filled spec; slopes: the ones it reads. */
static attn_attend_opts spec_opts(const attn_session_spec *f,
                                  const float *slopes) {
  attn_attend_opts o;
  memset(&o, 0, sizeof o);
  o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
  o.has_scale = 1;
  o.scale = f->scale;
  o.has_window = f->has_window;
  o.window_left = f->window_left;
  o.window_right = 0;
  o.alibi_slopes = slopes;
  o.softcap = f->softcap;
  o.rotary.on = f->has_rotary;
  o.rotary.interleaved = f->rotary_interleaved;
  o.rotary.dims = f->rotary_dims;
  o.rotary.base = f->rotary_base;
  return o;
}

/* Check in and fill *out (out->alibi_slopes a copy, owned by out; NULL
 * when the spec has none).  Every field checked in the client's terms. */
static attn_status spec_fill(const attn_session_spec *in,
                             const attn_session_limits *lim,
                             attn_session_spec *out, attn_diag *d) {
  attn_status s;
  memset(out, 0, sizeof *out);
  if (!in) return attn_diag_set(d, ATTN_EINVAL, "no session spec");
  if ((s = check_counts(in, lim, d)) || (s = check_variants(in, d))) return s;
  *out = *in;
  out->alibi_slopes = NULL;
  if (!out->layers) out->layers = 1;
  if (!out->num_kv_heads) out->num_kv_heads = out->num_heads;
  if (!out->max_tokens) out->max_tokens = lim->max_tokens;
  if (!out->has_scale) {
    out->has_scale = true;
    out->scale = (float)(1.0 / sqrt((double)out->head_dim));
  }
  if (!out->has_window) out->window_left = -1;
  if (out->has_rotary) {
    if (out->rotary_base == 0.0) out->rotary_base = 10000.0;
    if (!out->rotary_dims) out->rotary_dims = out->head_dim;
  } else {
    out->rotary_base = 0.0;
    out->rotary_dims = 0;
    out->rotary_interleaved = false;
  }
  if (in->alibi == ATTN_SESSION_ALIBI_SLOPES) {
    size_t n = (size_t)out->num_heads * sizeof(float);
    if (!(out->alibi_slopes = malloc(n)))
      return attn_diag_set(d, ATTN_ENOMEM, "session: out of memory");
    memcpy(out->alibi_slopes, in->alibi_slopes, n);
  }
  /* What the engine would refuse is refused here, before anything. */
  attn_kv_problem p;
  memset(&p, 0, sizeof p);
  p.t = 1, p.H = out->num_heads, p.Hkv = out->num_kv_heads;
  p.D = out->head_dim, p.dtype = out->kv_dtype;
  p.o = spec_opts(out, out->alibi_slopes);
  if ((s = attn_kv_check(&p, d))) attn_session_spec_clear(out);
  return s;
}

/* A copy of a filled spec, slopes duplicated. */
static attn_status spec_copy(const attn_session_spec *f, attn_session_spec *out,
                             attn_diag *d) {
  *out = *f;
  if (!f->alibi_slopes) return ATTN_OK;
  size_t n = (size_t)f->num_heads * sizeof(float);
  if (!(out->alibi_slopes = malloc(n))) {
    out->alibi_slopes = NULL;
    return attn_diag_set(d, ATTN_ENOMEM, "session: out of memory");
  }
  memcpy(out->alibi_slopes, f->alibi_slopes, n);
  return ATTN_OK;
}

/* The spec's fields in the order a conflict names the first that
 * differs. */
static const char *const field_names[] = {
    "layers", "num_heads", "num_kv_heads", "head_dim", "max_tokens", "kv_dtype",
    "scale",  "window",    "alibi",        "softcap",  "rotary"};
#define NFIELDS (sizeof field_names / sizeof *field_names)

/* Field i of a filled spec as a client would read it (floats to the
 * digits that tell them apart). */
static void field_text(const attn_session_spec *f, size_t i, char *buf,
                       size_t n) {
  const int64_t counts[] = {f->layers, f->num_heads, f->num_kv_heads,
                            f->head_dim, f->max_tokens};
  if (i < 5)
    snprintf(buf, n, "%lld", (long long)counts[i]);
  else if (i == 5)
    snprintf(buf, n, "%s", attn_kv_dtype_name(f->kv_dtype));
  else if (i == 6)
    snprintf(buf, n, "%.9g", (double)f->scale);
  else if (i == 7 && f->has_window)
    snprintf(buf, n, "%lld", (long long)f->window_left);
  else if (i == 8)
    snprintf(buf, n, "%s", alibi_name(f->alibi));
  else if (i == 9)
    snprintf(buf, n, "%.9g", (double)f->softcap);
  else if (i == 10 && f->has_rotary)
    snprintf(buf, n, "base %.17g, dims %lld, interleaved %s", f->rotary_base,
             (long long)f->rotary_dims,
             f->rotary_interleaved ? "true" : "false");
  else
    snprintf(buf, n, "off");
}

/* 0 when two filled specs are the same shape; else 1 and, in d, the first
 * field that differs with both values (ECONFLICT's message). */
static int spec_differs(const char *id, const attn_session_spec *a,
                        const attn_session_spec *b, attn_diag *d) {
  char x[96], y[96];
  for (size_t i = 0; i < NFIELDS; i++) {
    field_text(a, i, x, sizeof x);
    field_text(b, i, y, sizeof y);
    if (!strcmp(x, y) && i == 8 && a->alibi == ATTN_SESSION_ALIBI_SLOPES &&
        memcmp(a->alibi_slopes, b->alibi_slopes,
               (size_t)a->num_heads * sizeof(float)) != 0)
      snprintf(y, sizeof y, "other slopes");
    if (strcmp(x, y)) {
      attn_diag_set(d, ATTN_ECONFLICT,
                    "session '%s' exists with another shape: %s is %s "
                    "there, %s here",
                    id, field_names[i], x, y);
      return 1;
    }
  }
  return 0;
}

/* ---- sessions ------------------------------------------------------------ */

static void session_free(attn_session *s) {
  if (!s) return;
  for (int64_t l = 0; s->seq && l < s->spec.layers; l++)
    attn_kv_seq_free(s->seq[l]);
  free(s->seq);
  free(s->slopes);
  attn_session_spec_clear(&s->spec);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

/* A new session of a filled spec (taken over: *f is left empty), its
 * sequences empty when from is NULL, else forks of from's (whose lock the
 * caller holds).  Not linked; refs 1 (the map's, once linked). */
static attn_status session_new(attn_session_store *st, uint64_t owner,
                               const char *id, attn_session_spec *f,
                               attn_session *from, attn_session **out,
                               attn_diag *d) {
  attn_status s = ATTN_OK;
  attn_session *x = calloc(1, sizeof *x);
  if (!x) return attn_diag_set(d, ATTN_ENOMEM, "session: out of memory");
  pthread_mutex_init(&x->lock, NULL);
  x->st = st;
  x->owner = owner;
  x->hash = key_hash(owner, id);
  snprintf(x->id, sizeof x->id, "%s", id);
  x->spec = *f;
  memset(f, 0, sizeof *f);
  atomic_init(&x->refs, 1);
  int64_t H = x->spec.num_heads, L = x->spec.layers;
  x->seq = calloc((size_t)L, sizeof *x->seq);
  if (x->spec.alibi != ATTN_SESSION_ALIBI_OFF)
    x->slopes = malloc((size_t)H * sizeof *x->slopes);
  if (!x->seq || (x->spec.alibi != ATTN_SESSION_ALIBI_OFF && !x->slopes)) {
    session_free(x);
    return attn_diag_set(d, ATTN_ENOMEM, "session: out of memory");
  }
  if (x->spec.alibi == ATTN_SESSION_ALIBI_SLOPES)
    memcpy(x->slopes, x->spec.alibi_slopes, (size_t)H * sizeof *x->slopes);
  else if (x->spec.alibi == ATTN_SESSION_ALIBI_STANDARD)
    s = attn_alibi_slopes(H, x->slopes, d);
  x->o = spec_opts(&x->spec, x->slopes);
  attn_kv_shape sh = {x->spec.num_kv_heads, x->spec.head_dim, x->spec.kv_dtype};
  for (int64_t l = 0; l < L && s == ATTN_OK; l++)
    s = from ? attn_kv_seq_fork(from->seq[l], &x->seq[l], d)
             : attn_kv_seq_create(st->pool, &sh, &x->seq[l], d);
  if (s == ATTN_ETOOBIG) /* one block larger than the whole cache */
    s = ATTN_EINVAL;
  if (s) {
    session_free(x);
    return s;
  }
  *out = x;
  return ATTN_OK;
}

/* Its object; the caller holds its lock.  ENOMEM only. */
static attn_status session_info(attn_session *s, uint64_t now_ns,
                                uint64_t last_ns, attn_session_info *info,
                                attn_diag *d) {
  memset(info, 0, sizeof *info);
  snprintf(info->id, sizeof info->id, "%s", s->id);
  info->length = malloc((size_t)s->spec.layers * sizeof *info->length);
  if (!info->length || spec_copy(&s->spec, &info->spec, d)) {
    attn_session_info_clear(info);
    return attn_diag_set(d, ATTN_ENOMEM, "session: out of memory");
  }
  for (int64_t l = 0; l < s->spec.layers; l++) {
    info->length[l] = attn_kv_seq_len(s->seq[l]);
    info->bytes += attn_kv_seq_bytes(s->seq[l]);
  }
  info->idle_s = now_ns > last_ns ? (double)(now_ns - last_ns) / 1e9 : 0.0;
  return ATTN_OK;
}

/* ---- the map, the list of last use, the ring of expired ids ---------------
 * All under st->mu. */

static attn_session *map_find(attn_session_store *st, uint64_t owner,
                              const char *id, uint64_t h) {
  for (attn_session *s = st->buckets[h & (st->nbuckets - 1)]; s; s = s->next)
    if (s->hash == h && s->owner == owner && strcmp(s->id, id) == 0) return s;
  return NULL;
}

static void lru_unlink(attn_session_store *st, attn_session *s) {
  if (s->lru_prev)
    s->lru_prev->lru_next = s->lru_next;
  else
    st->lru_head = s->lru_next;
  if (s->lru_next)
    s->lru_next->lru_prev = s->lru_prev;
  else
    st->lru_tail = s->lru_prev;
  s->lru_prev = s->lru_next = NULL;
}

static void lru_append(attn_session_store *st, attn_session *s) {
  s->lru_prev = st->lru_tail;
  s->lru_next = NULL;
  if (st->lru_tail)
    st->lru_tail->lru_next = s;
  else
    st->lru_head = s;
  st->lru_tail = s;
}

/* Its last use becomes now (never before the list's tail) and it goes to
 * the tail.  Returns its last use before. */
static uint64_t lru_touch(attn_session_store *st, attn_session *s,
                          uint64_t now_ns) {
  uint64_t before = s->last_ns;
  if (now_ns < st->latest_ns) now_ns = st->latest_ns;
  st->latest_ns = now_ns;
  s->last_ns = now_ns;
  if (!s->linked || st->lru_tail == s) return before;
  lru_unlink(st, s);
  lru_append(st, s);
  return before;
}

/* Double the buckets when full; a failed allocation keeps the old ones
 * (longer chains, still correct). */
static void map_grow(attn_session_store *st) {
  if (st->count < st->nbuckets) return;
  size_t n = st->nbuckets * 2;
  attn_session **b = calloc(n, sizeof *b);
  if (!b) return;
  for (size_t i = 0; i < st->nbuckets; i++)
    for (attn_session *s = st->buckets[i], *nx; s; s = nx) {
      nx = s->next;
      s->next = b[s->hash & (n - 1)];
      b[s->hash & (n - 1)] = s;
    }
  free(st->buckets);
  st->buckets = b;
  st->nbuckets = n;
}

static void expired_forget(attn_session_store *st, uint64_t owner,
                           const char *id, uint64_t h) {
  for (size_t i = 0; st->expired_total && i < EXPIRED_RING; i++) {
    expired_entry *e = &st->expired[i];
    if (e->used && e->hash == h && e->owner == owner && !strcmp(e->id, id))
      e->used = 0;
  }
}

static void map_insert(attn_session_store *st, attn_session *s,
                       uint64_t now_ns) {
  map_grow(st);
  attn_session **b = &st->buckets[s->hash & (st->nbuckets - 1)];
  s->next = *b;
  *b = s;
  st->count++;
  expired_forget(st, s->owner, s->id, s->hash);
  lru_touch(st, s, now_ns); /* its time, before it is in the list */
  s->linked = 1;
  lru_append(st, s);
}

/* Out of the map and the list; 1 when that dropped the last reference
 * (the caller frees it, after unlocking). */
static int map_remove(attn_session_store *st, attn_session *s) {
  attn_session **p = &st->buckets[s->hash & (st->nbuckets - 1)];
  while (*p != s) p = &(*p)->next;
  *p = s->next;
  s->next = NULL;
  lru_unlink(st, s);
  s->linked = 0;
  st->count--;
  return atomic_fetch_sub(&s->refs, 1) == 1;
}

static attn_status not_found(attn_session_store *st, uint64_t owner,
                             const char *id, uint64_t h, attn_diag *d) {
  for (size_t i = 0; st->expired_total && i < EXPIRED_RING; i++) {
    expired_entry *e = &st->expired[i];
    if (e->used && e->hash == h && e->owner == owner && !strcmp(e->id, id))
      return attn_diag_set(d, ATTN_ENOTFOUND,
                           "session '%s' expired after %.0f s idle "
                           "(session_idle_timeout_s)",
                           id, e->idle_s);
  }
  return attn_diag_set(d, ATTN_ENOTFOUND, "session '%s' not found", id);
}

/* ---- the store ----------------------------------------------------------- */

attn_status attn_session_store_create(const attn_session_limits *lim,
                                      attn_session_store **out, attn_diag *d) {
  attn_status s;
  *out = NULL;
  if (!lim || lim->cache_bytes == 0 || lim->max_sessions < 1 ||
      lim->max_tokens < 1 || lim->max_weights_elements < 0)
    return attn_diag_set(d, ATTN_EINVAL,
                         "session limits: kv_cache_bytes, max_sessions and "
                         "max_seq_len must be >= 1");
  attn_session_store *st = calloc(1, sizeof *st);
  if (!st) return attn_diag_set(d, ATTN_ENOMEM, "session store: out of memory");
  st->lim = *lim;
  st->nbuckets = MIN_BUCKETS;
  st->buckets = calloc(st->nbuckets, sizeof *st->buckets);
  st->expired = calloc(EXPIRED_RING, sizeof *st->expired);
  if (!st->buckets || !st->expired) {
    free(st->buckets);
    free(st->expired);
    free(st);
    return attn_diag_set(d, ATTN_ENOMEM, "session store: out of memory");
  }
  if ((s = attn_kv_pool_create(lim->cache_bytes, &st->pool, d))) {
    free(st->buckets);
    free(st->expired);
    free(st);
    return s;
  }
  pthread_mutex_init(&st->mu, NULL);
  *out = st;
  return ATTN_OK;
}

void attn_session_store_destroy(attn_session_store *st) {
  if (!st) return;
  for (attn_session *s = st->lru_head, *nx; s; s = nx) {
    nx = s->lru_next;
    session_free(s);
  }
  attn_kv_pool_destroy(st->pool);
  pthread_mutex_destroy(&st->mu);
  free(st->buckets);
  free(st->expired);
  free(st);
}

void attn_session_store_stats(attn_session_store *st, attn_session_stats *s) {
  attn_kv_pool_stats ps;
  attn_kv_pool_stats_get(st->pool, &ps);
  pthread_mutex_lock(&st->mu);
  s->sessions = st->count;
  s->tokens_total = st->tokens_total;
  s->expired_total = st->expired_total;
  s->meta_bytes =
      ps.meta_bytes + sizeof *st + st->nbuckets * sizeof *st->buckets +
      EXPIRED_RING * sizeof *st->expired + st->count * sizeof(attn_session);
  pthread_mutex_unlock(&st->mu);
  s->used_bytes = ps.used_bytes;
  s->limit_bytes = ps.limit_bytes;
}

void attn__session_stepped(attn_session_store *st, attn_session *const *s,
                           size_t n, uint64_t now_ns, uint64_t tokens) {
  pthread_mutex_lock(&st->mu);
  for (size_t i = 0; i < n; i++) lru_touch(st, s[i], now_ns);
  st->tokens_total += tokens;
  pthread_mutex_unlock(&st->mu);
}

size_t attn__session_count(attn_session_store *st) {
  pthread_mutex_lock(&st->mu);
  size_t n = st->count;
  pthread_mutex_unlock(&st->mu);
  return n;
}

static attn_status too_many(attn_session_store *st, attn_diag *d) {
  attn_kv_pool_stats ps;
  attn_kv_pool_stats_get(st->pool, &ps);
  return attn_diag_set(d, ATTN_ENOSPACE,
                       "%zu sessions are open, the most this server keeps "
                       "(max_sessions = %lld); %zu bytes of the KV cache in "
                       "use, limit %zu bytes",
                       st->count, (long long)st->lim.max_sessions,
                       ps.used_bytes, ps.limit_bytes);
}

attn_status attn_session_create(attn_session_store *st, uint64_t owner,
                                const char *id, const attn_session_spec *spec,
                                uint64_t now_ns, int *created,
                                attn_session_info *info, attn_diag *d) {
  attn_status s;
  attn_session_spec f;
  attn_session *x = NULL, *old;
  if (created) *created = 0;
  if ((s = id_check(id, d)) || (s = spec_fill(spec, &st->lim, &f, d))) return s;
  uint64_t h = key_hash(owner, id);
  /* The common case first: an existing session, found without building a
   * new one. */
  pthread_mutex_lock(&st->mu);
  old = map_find(st, owner, id, h);
  if (!old && st->count >= (size_t)st->lim.max_sessions) {
    s = too_many(st, d);
    pthread_mutex_unlock(&st->mu);
    attn_session_spec_clear(&f);
    return s;
  }
  if (old) atomic_fetch_add(&old->refs, 1);
  pthread_mutex_unlock(&st->mu);
  if (!old && (s = session_new(st, owner, id, &f, NULL, &x, d))) {
    attn_session_spec_clear(&f);
    return s;
  }
  if (!old) {
    pthread_mutex_lock(&st->mu);
    old = map_find(st, owner, id, h); /* made meanwhile by another thread */
    if (old)
      atomic_fetch_add(&old->refs, 1);
    else if (st->count >= (size_t)st->lim.max_sessions)
      s = too_many(st, d);
    else {
      map_insert(st, x, now_ns);
      /* Held for the info below, before a delete can see it. */
      atomic_fetch_add(&x->refs, 1);
    }
    pthread_mutex_unlock(&st->mu);
    if (old || s) {
      if (old) f = x->spec, memset(&x->spec, 0, sizeof x->spec);
      session_free(x);
      x = NULL;
      if (s) return s;
    }
  }
  if (old) { /* the same shape, or a conflict */
    int differs = spec_differs(id, &old->spec, &f, d);
    attn_session_spec_clear(&f);
    if (differs) {
      attn_session_put(old);
      return ATTN_ECONFLICT;
    }
    x = old;
  } else if (created) {
    *created = 1;
  }
  if (info) {
    pthread_mutex_lock(&x->lock);
    pthread_mutex_lock(&st->mu);
    uint64_t last = old ? lru_touch(st, x, now_ns) : now_ns;
    pthread_mutex_unlock(&st->mu);
    s = session_info(x, now_ns, last, info, d);
    pthread_mutex_unlock(&x->lock);
  } else if (old) {
    pthread_mutex_lock(&st->mu);
    lru_touch(st, x, now_ns);
    pthread_mutex_unlock(&st->mu);
  }
  attn_session_put(x);
  return s;
}

attn_status attn_session_get(attn_session_store *st, uint64_t owner,
                             const char *id, uint64_t now_ns,
                             attn_session **out, attn_diag *d) {
  attn_status s;
  *out = NULL;
  if ((s = id_check(id, d))) return s;
  uint64_t h = key_hash(owner, id);
  pthread_mutex_lock(&st->mu);
  attn_session *x = map_find(st, owner, id, h);
  if (x) {
    atomic_fetch_add(&x->refs, 1);
    lru_touch(st, x, now_ns);
  } else {
    s = not_found(st, owner, id, h, d);
  }
  pthread_mutex_unlock(&st->mu);
  *out = x;
  return s;
}

void attn_session_put(attn_session *s) {
  if (s && atomic_fetch_sub(&s->refs, 1) == 1) session_free(s);
}

const attn_session_spec *attn_session_spec_of(const attn_session *s) {
  return &s->spec;
}

const char *attn_session_id(const attn_session *s) {
  return s->id;
}

attn_status attn_session_info_get(attn_session *s, uint64_t now_ns,
                                  attn_session_info *info, attn_diag *d) {
  attn_session_store *st = s->st;
  pthread_mutex_lock(&s->lock);
  pthread_mutex_lock(&st->mu);
  uint64_t last = lru_touch(st, s, now_ns);
  pthread_mutex_unlock(&st->mu);
  attn_status r = session_info(s, now_ns, last, info, d);
  pthread_mutex_unlock(&s->lock);
  return r;
}

static int by_id(const void *a, const void *b) {
  return strcmp((*(attn_session *const *)a)->id,
                (*(attn_session *const *)b)->id);
}

attn_status attn_session_list(attn_session_store *st, uint64_t owner,
                              uint64_t now_ns, attn_session_info **v, size_t *n,
                              attn_diag *d) {
  attn_status s = ATTN_OK;
  *v = NULL;
  *n = 0;
  /* The owner's sessions, held, then their objects outside the map's
   * mutex (each under its own lock). */
  pthread_mutex_lock(&st->mu);
  size_t m = 0, k = 0;
  for (attn_session *x = st->lru_head; x; x = x->lru_next)
    m += x->owner == owner;
  attn_session **held = malloc((m ? m : 1) * sizeof *held);
  if (held)
    for (attn_session *x = st->lru_head; x; x = x->lru_next)
      if (x->owner == owner) {
        atomic_fetch_add(&x->refs, 1);
        held[k++] = x;
      }
  pthread_mutex_unlock(&st->mu);
  attn_session_info *out = calloc(m ? m : 1, sizeof *out);
  if (!held || !out) {
    for (size_t i = 0; i < k; i++) attn_session_put(held[i]);
    free(held);
    free(out);
    return attn_diag_set(d, ATTN_ENOMEM, "session list: out of memory");
  }
  qsort(held, k, sizeof *held, by_id);
  for (size_t i = 0; i < k && s == ATTN_OK; i++) {
    pthread_mutex_lock(&held[i]->lock);
    pthread_mutex_lock(&st->mu);
    uint64_t at = held[i]->last_ns;
    pthread_mutex_unlock(&st->mu);
    s = session_info(held[i], now_ns, at, &out[i], d);
    pthread_mutex_unlock(&held[i]->lock);
  }
  for (size_t i = 0; i < k; i++) attn_session_put(held[i]);
  free(held);
  if (s) {
    for (size_t i = 0; i < k; i++) attn_session_info_clear(&out[i]);
    free(out);
    return s;
  }
  *v = out;
  *n = k;
  return ATTN_OK;
}

attn_status attn_session_delete(attn_session_store *st, uint64_t owner,
                                const char *id, attn_diag *d) {
  attn_status s;
  if ((s = id_check(id, d))) return s;
  uint64_t h = key_hash(owner, id);
  int last = 0;
  pthread_mutex_lock(&st->mu);
  attn_session *x = map_find(st, owner, id, h);
  if (x)
    last = map_remove(st, x);
  else
    s = not_found(st, owner, id, h, d);
  pthread_mutex_unlock(&st->mu);
  if (last) session_free(x);
  return s;
}

attn_status attn_session_truncate(attn_session *s, int64_t n, uint64_t now_ns,
                                  attn_session_info *info, attn_diag *d) {
  attn_status r = ATTN_OK;
  if (n < 0)
    return attn_diag_set(d, ATTN_EINVAL, "truncate: length %lld must be >= 0",
                         (long long)n);
  pthread_mutex_lock(&s->lock);
  /* The pool's truncate gives blocks back and fails only on a bad length:
   * the layers change together. */
  for (int64_t l = 0; l < s->spec.layers && r == ATTN_OK; l++)
    r = attn_kv_seq_truncate(s->seq[l], n, d);
  pthread_mutex_lock(&s->st->mu);
  uint64_t last = lru_touch(s->st, s, now_ns);
  pthread_mutex_unlock(&s->st->mu);
  if (r == ATTN_OK && info) r = session_info(s, now_ns, last, info, d);
  pthread_mutex_unlock(&s->lock);
  return r;
}

/* Link the new session x (unlinked, refs 1) under its owner and id,
 * unless that was taken meanwhile (ECONFLICT) or max_sessions are open
 * (x is freed then); also (may be NULL) is touched with it.  info (may be
 * NULL) gets x's object. */
static attn_status link_new(attn_session_store *st, attn_session *x,
                            attn_session *also, uint64_t now_ns,
                            attn_session_info *info, attn_diag *d) {
  attn_status r = ATTN_OK;
  pthread_mutex_lock(&st->mu);
  if (map_find(st, x->owner, x->id, x->hash)) /* made meanwhile */
    r = attn_diag_set(d, ATTN_ECONFLICT, "session '%s' exists already", x->id);
  else if (st->count >= (size_t)st->lim.max_sessions)
    r = too_many(st, d);
  else {
    map_insert(st, x, now_ns);
    if (also) lru_touch(st, also, now_ns);
    atomic_fetch_add(&x->refs, 1); /* held for the info below, before a
                                      delete can see it */
  }
  pthread_mutex_unlock(&st->mu);
  if (r) {
    session_free(x);
    return r;
  }
  if (info) {
    pthread_mutex_lock(&x->lock);
    r = session_info(x, now_ns, now_ns, info, d);
    pthread_mutex_unlock(&x->lock);
  }
  attn_session_put(x);
  return r;
}

attn_status attn_session_fork(attn_session_store *st, attn_session *s,
                              const char *new_id, uint64_t now_ns,
                              attn_session_info *info, attn_diag *d) {
  attn_status r;
  attn_session_spec f;
  attn_session *x = NULL;
  if ((r = id_check(new_id, d))) return r;
  uint64_t h = key_hash(s->owner, new_id);
  pthread_mutex_lock(&st->mu);
  if (map_find(st, s->owner, new_id, h) || !strcmp(new_id, s->id))
    r = attn_diag_set(d, ATTN_ECONFLICT, "session '%s' exists already", new_id);
  else if (st->count >= (size_t)st->lim.max_sessions)
    r = too_many(st, d);
  pthread_mutex_unlock(&st->mu);
  if (r) return r;
  if ((r = spec_copy(&s->spec, &f, d))) return r;
  pthread_mutex_lock(&s->lock);
  r = session_new(st, s->owner, new_id, &f, s, &x, d);
  pthread_mutex_unlock(&s->lock);
  attn_session_spec_clear(&f);
  if (r) return r;
  return link_new(st, x, s, now_ns, info, d);
}

size_t attn_session_sweep(attn_session_store *st, uint64_t now_ns) {
  uint64_t T = st->lim.idle_timeout_ns;
  attn_session *dead = NULL;
  size_t n = 0;
  if (T == 0) return 0;
  pthread_mutex_lock(&st->mu);
  while (st->lru_head && now_ns >= st->lru_head->last_ns &&
         now_ns - st->lru_head->last_ns >= T) {
    attn_session *x = st->lru_head;
    expired_entry *e = &st->expired[st->expired_next];
    st->expired_next = (st->expired_next + 1) % EXPIRED_RING;
    e->owner = x->owner;
    e->hash = x->hash;
    e->idle_s = (double)T / 1e9; /* the key's value, as the message says */
    e->used = 1;
    snprintf(e->id, sizeof e->id, "%s", x->id);
    if (map_remove(st, x)) { /* else its last holder frees it */
      x->next = dead;
      dead = x;
    }
    st->expired_total++;
    n++;
  }
  pthread_mutex_unlock(&st->mu);
  for (attn_session *nx; dead; dead = nx) {
    nx = dead->next;
    session_free(dead);
  }
  return n;
}

/* ---- export and import (session files, session_dir) ---------------------- */

/* Bytes of n tokens of a layer: n x Hkv x D elements; 0 on overflow. */
static size_t rows_bytes(const attn_session_spec *f, int64_t n) {
  size_t e = attn_kv_dtype_size(f->kv_dtype), row;
  if (n < 0 || !e ||
      __builtin_mul_overflow((size_t)f->num_kv_heads, (size_t)f->head_dim,
                             &row) ||
      __builtin_mul_overflow(row, e, &row) ||
      __builtin_mul_overflow(row, (size_t)n, &row))
    return 0;
  return row;
}

/* attn_session_export's work, s->lock held; unlocks it. */
static attn_status export_locked(attn_session *s, attn_session_dump *out,
                                 attn_diag *d) {
  attn_status r = ATTN_OK;
  int64_t L = s->spec.layers;
  size_t total = 0;
  out->length = malloc((size_t)L * sizeof *out->length);
  out->k = calloc((size_t)L, sizeof *out->k);
  out->v = calloc((size_t)L, sizeof *out->v);
  if (!out->length || !out->k || !out->v || spec_copy(&s->spec, &out->spec, d))
    r = ATTN_ENOMEM;
  for (int64_t l = 0; !r && l < L; l++) {
    out->length[l] = attn_kv_seq_len(s->seq[l]);
    total += 2 * rows_bytes(&s->spec, out->length[l]);
  }
  if (!r && !(out->data = malloc(total ? total : 1))) r = ATTN_ENOMEM;
  unsigned char *p = out->data;
  for (int64_t l = 0; !r && l < L; l++) {
    size_t n = rows_bytes(&s->spec, out->length[l]);
    if (!n) continue;
    out->k[l] = p;
    out->v[l] = p + n;
    r = attn_kv_seq_read(s->seq[l], 0, out->length[l], p, p + n, d);
    p += 2 * n;
  }
  pthread_mutex_unlock(&s->lock);
  snprintf(out->id, sizeof out->id, "%s", s->id);
  out->owner = s->owner;
  if (r) {
    attn_session_dump_clear(out);
    memset(out, 0, sizeof *out);
    if (r == ATTN_ENOMEM)
      attn_diag_set(d, r, "session '%s': out of memory exporting it", s->id);
  }
  return r;
}

attn_status attn_session_export(attn_session *s, attn_session_dump *out,
                                attn_diag *d) {
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&s->lock);
  return export_locked(s, out, d);
}

attn_status attn_session_export_idle(attn_session *s, attn_session_dump *out,
                                     attn_diag *d) {
  memset(out, 0, sizeof *out);
  if (pthread_mutex_trylock(&s->lock))
    return attn_diag_set(d, ATTN_EBUSY,
                         "session '%s': a step was still running on it", s->id);
  return export_locked(s, out, d);
}

attn_status attn_session_import(attn_session_store *st, uint64_t owner,
                                const char *id, const attn_session_dump *in,
                                uint64_t now_ns, attn_session_info *info,
                                attn_diag *d) {
  attn_status r;
  attn_session_spec f;
  attn_session *x = NULL;
  if ((r = id_check(id, d)) || (r = spec_fill(&in->spec, &st->lim, &f, d)))
    return r;
  for (int64_t l = 0; l < f.layers; l++)
    if (!in->length || in->length[l] < 0 || in->length[l] > f.max_tokens ||
        (in->length[l] > 0 && (!in->k || !in->v || !in->k[l] || !in->v[l]))) {
      r = attn_diag_set(d, ATTN_EINVAL,
                        "layer %lld has %lld tokens; it may hold 0 to "
                        "max_tokens (%lld)",
                        (long long)l,
                        in->length ? (long long)in->length[l] : -1,
                        (long long)f.max_tokens);
      attn_session_spec_clear(&f);
      return r;
    }
  uint64_t h = key_hash(owner, id);
  pthread_mutex_lock(&st->mu);
  if (map_find(st, owner, id, h))
    r = attn_diag_set(d, ATTN_ECONFLICT, "session '%s' exists already", id);
  else if (st->count >= (size_t)st->lim.max_sessions)
    r = too_many(st, d);
  pthread_mutex_unlock(&st->mu);
  if (!r) r = session_new(st, owner, id, &f, NULL, &x, d);
  attn_session_spec_clear(&f);
  if (r) return r;
  /* Not linked yet: no one else sees it, its lock is not needed. */
  for (int64_t l = 0; l < x->spec.layers && !r; l++) {
    attn_diag sub;
    if (!in->length[l]) continue;
    r = attn_kv_seq_append(x->seq[l], in->length[l], in->k[l], in->v[l], &sub);
    if (r == ATTN_ETOOBIG) {
      attn_kv_pool_stats ps;
      attn_kv_pool_stats_get(st->pool, &ps);
      r = attn_diag_set(d, ATTN_ENOSPACE,
                        "the KV cache is full: session '%s' needs room for "
                        "%lld tokens on layer %lld; %zu bytes in use, limit "
                        "%zu bytes (kv_cache_bytes)",
                        id, (long long)in->length[l], (long long)l,
                        ps.used_bytes, ps.limit_bytes);
    } else if (r) {
      attn_diag_set(d, r, "%s", sub.msg);
    }
  }
  if (r) {
    session_free(x);
    return r;
  }
  return link_new(st, x, NULL, now_ns, info, d);
}

long attn_session_each(attn_session_store *st,
                       int (*fn)(void *user, attn_session *s), void *user) {
  pthread_mutex_lock(&st->mu);
  size_t m = st->count, k = 0;
  attn_session **held = malloc((m ? m : 1) * sizeof *held);
  for (attn_session *x = st->lru_head; held && x && k < m; x = x->lru_next) {
    atomic_fetch_add(&x->refs, 1);
    held[k++] = x;
  }
  pthread_mutex_unlock(&st->mu);
  if (!held) return -1;
  long calls = 0;
  int stop = 0;
  for (size_t i = 0; i < k; i++) {
    if (!stop) {
      calls++;
      stop = fn(user, held[i]);
    }
    attn_session_put(held[i]);
  }
  free(held);
  return calls;
}
