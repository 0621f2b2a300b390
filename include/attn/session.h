/* session.h - sessions: a decoder's KV cache kept in attnd between
 * requests (issue 41, docs/api.md "Sessions").
 *
 * A session is an id chosen by the client, a fixed shape (layers, heads,
 * head dim, the most tokens it may hold, the storage dtype) and the
 * attention variants fixed for it, and per layer one sequence of the KV
 * block pool (kv.h) with its own length.  A step appends the keys and
 * values of t new tokens to one layer and attends the t query rows to
 * everything the layer holds (causal, bottom-right), through the engine's
 * attn_kv_attend; a batched step does that for B sessions at once, all or
 * nothing.
 *
 * Two parts.  The plain types at the top (the spec, the object, the id
 * rule) are data only: the codecs include this header for them and call
 * nothing below.  The store below is the library attn_session (src/
 * session/): on attn_kv, attn_engine and attn_common, no HTTP, no JSON,
 * no threads of the server.  main.c makes one store and the server uses
 * it from its workers.
 *
 * Ownership.  Each session belongs to an owner, a 64-bit tag the caller
 * derives from the API key that created it (0 when keys are off).  The
 * store keys sessions by (owner, id): another owner never sees, finds,
 * lists or collides with it (a lookup answers ATTN_ENOTFOUND exactly as
 * for an id that never existed).
 *
 * Statuses (the server maps them; every failure changes nothing):
 *   ATTN_EINVAL     a spec, id, layer, shape or option the client got
 *                   wrong, or a step past max_tokens (the message names it);
 *   ATTN_ENOTFOUND  no such session (or, for one that expired recently,
 *                   a message that says it expired);
 *   ATTN_ECONFLICT  an id taken with another shape (create), a taken id
 *                   (fork), a step at a position other than the layer's
 *                   length, queries only on an empty layer;
 *   ATTN_ENOSPACE   the KV pool cannot give the blocks a step needs, or
 *                   max_sessions are open (the message says what is in
 *                   use, by how many sessions, and the limit);
 *   ATTN_ETOOBIG    attention weights beyond max_weights_elements;
 *   ATTN_ENONFINITE a NaN or Inf in a query, key or value;
 *   ATTN_ENOMEM.
 */
#ifndef ATTN_SESSION_H
#define ATTN_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "attn/kv.h"
#include "attn/status.h"

/* ---- plain types (codecs may include these; no calls) ------------------ */

#define ATTN_SESSION_ID_MAX 128

/* An id is 1 to 128 bytes of A-Z a-z 0-9 . _ : - (Triton's string
 * sequence_id).  1 when s[0, n) is one. */
static inline int attn_session_id_ok(const char *s, size_t n) {
  if (n < 1 || n > ATTN_SESSION_ID_MAX) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
          (c >= '0' && c <= '9') || c == '.' || c == '_' || c == ':' ||
          c == '-'))
      return 0;
  }
  return 1;
}

/* ALiBi of a session. */
typedef enum {
  ATTN_SESSION_ALIBI_OFF = 0,
  ATTN_SESSION_ALIBI_STANDARD = 1, /* "alibi": true */
  ATTN_SESSION_ALIBI_SLOPES = 2    /* "alibi": [num_heads numbers] */
} attn_session_alibi;

/* A session's shape and fixed variants, as a client asks for it.  Fields
 * a client left out are 0 (has_* false): the store fills the defaults
 * (layers 1, num_kv_heads = num_heads, max_tokens = the store's
 * max_tokens) and answers the filled spec in attn_session_info.  Two specs
 * are "the same shape" (an idempotent create) when every field is equal
 * once filled. */
typedef struct attn_session_spec {
  int64_t layers;       /* >= 1 (0: not given: 1) */
  int64_t num_heads;    /* H >= 1: query heads */
  int64_t num_kv_heads; /* Hkv, divides H (0: not given: H) */
  int64_t head_dim;     /* D >= 1 */
  int64_t max_tokens;   /* per layer, 1 .. store max (0: not given: max) */
  attn_kv_dtype kv_dtype;
  bool has_scale;
  float scale; /* finite; default 1/sqrt(D) */
  bool has_window;
  int64_t window_left; /* >= 0, or -1 unbounded; the right side is 0 */
  attn_session_alibi alibi;
  float *alibi_slopes; /* SLOPES: alibi_count finite floats, owned by the
                          spec (attn_session_spec_clear frees them) */
  int64_t alibi_count; /* SLOPES: how many the client gave (the store
                          checks that it is num_heads) */
  float softcap;       /* > 0: on; 0: off */
  bool has_rotary;
  double rotary_base;      /* > 1 (0: not given: 10000) */
  int64_t rotary_dims;     /* even, <= head_dim (0: not given: head_dim) */
  bool rotary_interleaved; /* GPT-J pairs; default false (NeoX halves) */
} attn_session_spec;

static inline void attn_session_spec_clear(attn_session_spec *s) {
  if (!s) return;
  free(s->alibi_slopes);
  s->alibi_slopes = NULL;
}

/* What a client sees of a session (GET, PUT, truncate, fork). */
typedef struct attn_session_info {
  char id[ATTN_SESSION_ID_MAX + 1];
  attn_session_spec spec; /* filled: no zero defaults left; alibi_slopes
                             owned by the info */
  int64_t *length;        /* [spec.layers], owned by the info */
  size_t bytes;           /* of the blocks it references (shared ones in
                             full) */
  double idle_s;          /* seconds since its last use */
} attn_session_info;

static inline void attn_session_info_clear(attn_session_info *i) {
  if (!i) return;
  attn_session_spec_clear(&i->spec);
  free(i->length);
  i->length = NULL;
}

/* A session's whole state, as attn_session_export gives it and
 * attn_session_import takes it (and the session file codec, codec.h,
 * writes and reads it): the rows exactly as stored, keys already turned
 * by rotary, in the storage dtype, so that a session made from a dump
 * answers bitwise as the one it came from. */
typedef struct attn_session_dump {
  char id[ATTN_SESSION_ID_MAX + 1];
  uint64_t owner;
  attn_session_spec spec; /* filled; alibi_slopes owned by the dump */
  int64_t *length;        /* [spec.layers], owned */
  /* [spec.layers] each: length[l] x num_kv_heads x head_dim elements of
   * spec.kv_dtype ([token][head][dim], little-endian), NULL when a layer
   * is empty.  The arrays are owned; what they point to is in data when
   * the dump owns it (export), else borrowed (a decoded file's bytes). */
  const void **k, **v;
  void *data;
} attn_session_dump;

static inline void attn_session_dump_clear(attn_session_dump *x) {
  if (!x) return;
  attn_session_spec_clear(&x->spec);
  free(x->length);
  free((void *)x->k);
  free((void *)x->v);
  free(x->data);
  x->length = NULL;
  x->k = x->v = NULL;
  x->data = NULL;
}

/* ---- the store (library attn_session) ---------------------------------- */

typedef struct attn_session_limits {
  size_t cache_bytes;           /* the KV pool's limit, > 0 (kv_cache_bytes,
                                   resolved by the caller when 0 = auto) */
  int64_t max_sessions;         /* >= 1 */
  uint64_t idle_timeout_ns;     /* 0: never expire */
  int64_t max_tokens;           /* default and upper bound of a session's
                                   max_tokens (max_seq_len) */
  int64_t max_weights_elements; /* need_weights: H x t x length at most */
} attn_session_limits;

typedef struct attn_session_store attn_session_store;
typedef struct attn_session attn_session;

attn_status attn_session_store_create(const attn_session_limits *lim,
                                      attn_session_store **out, attn_diag *d);
/* Frees every session and the pool.  No other call may run or follow. */
void attn_session_store_destroy(attn_session_store *st);

typedef struct attn_session_stats {
  size_t sessions;        /* open now */
  size_t used_bytes;      /* KV blocks in use (attnd_kv_cache_bytes used) */
  size_t limit_bytes;     /* the pool's limit */
  size_t meta_bytes;      /* bookkeeping (pool's and the store's) */
  uint64_t tokens_total;  /* tokens appended, ever */
  uint64_t expired_total; /* sessions freed by idle expiry, ever */
} attn_session_stats;

void attn_session_store_stats(attn_session_store *st, attn_session_stats *s);

/* Create (owner, spec->id...) or find it.  spec is checked first (EINVAL
 * naming the field in the client's terms: "num_kv_heads (3) must divide
 * num_heads (8)", "max_tokens is 9000; this server allows at most 8192
 * (max_seq_len)", ...).  When no session of that owner and id exists:
 * a new one (*created 1), ENOSPACE when max_sessions are open.  When one
 * of the same shape exists: that one (*created 0).  ECONFLICT when it
 * exists with another shape (the message names the first field that
 * differs, with both values).  info (may be NULL) gets the object. */
attn_status attn_session_create(attn_session_store *st, uint64_t owner,
                                const char *id, const attn_session_spec *spec,
                                uint64_t now_ns, int *created,
                                attn_session_info *info, attn_diag *d);

/* Hold the session (owner, id) for a step, truncate, fork or info: its
 * last use becomes now.  ENOTFOUND ("session 'x' not found", or "session
 * 'x' expired after N s idle (session_idle_timeout_s)" for one that
 * expired recently).  Give it back with attn_session_put. */
attn_status attn_session_get(attn_session_store *st, uint64_t owner,
                             const char *id, uint64_t now_ns,
                             attn_session **out, attn_diag *d);
void attn_session_put(attn_session *s);

/* The session's spec (filled; valid while it is held). */
const attn_session_spec *attn_session_spec_of(const attn_session *s);
const char *attn_session_id(const attn_session *s);

/* Its object now.  ENOMEM only. */
attn_status attn_session_info_get(attn_session *s, uint64_t now_ns,
                                  attn_session_info *info, attn_diag *d);

/* The owner's sessions, in id order: *v (free each with
 * attn_session_info_clear, then free(*v)), *n. */
attn_status attn_session_list(attn_session_store *st, uint64_t owner,
                              uint64_t now_ns, attn_session_info **v, size_t *n,
                              attn_diag *d);

/* Unlink it (ENOTFOUND as attn_session_get); its blocks are freed when
 * the last holder puts it. */
attn_status attn_session_delete(attn_session_store *st, uint64_t owner,
                                const char *id, attn_diag *d);

/* Every layer keeps at most its first n >= 0 tokens.  info may be NULL. */
attn_status attn_session_truncate(attn_session *s, int64_t n, uint64_t now_ns,
                                  attn_session_info *info, attn_diag *d);

/* A new session new_id of the same owner, a copy of s sharing its blocks
 * (copy on write).  ECONFLICT when new_id is taken, ENOSPACE when
 * max_sessions are open, EINVAL for a bad id.  info (may be NULL) gets
 * the new one's object. */
attn_status attn_session_fork(attn_session_store *st, attn_session *s,
                              const char *new_id, uint64_t now_ns,
                              attn_session_info *info, attn_diag *d);

/* The held session's whole state into *out (zeroed first; free it with
 * attn_session_dump_clear): id, owner, filled spec, lengths and every
 * layer's rows as stored (attn_kv_seq_read), out->data owning them.  Its
 * last use is not changed.  ENOMEM only. */
attn_status attn_session_export(attn_session *s, attn_session_dump *out,
                                attn_diag *d);

/* As attn_session_export, but only if no step holds the session now:
 * EBUSY, nothing exported, when one does (never waits).  For a save while
 * steps may still be running (a drain that ran out of time). */
attn_status attn_session_export_idle(attn_session *s, attn_session_dump *out,
                                     attn_diag *d);

/* A new session (owner, id) holding in's tokens: in->spec is checked as
 * create checks a spec (EINVAL naming the field; max_tokens against the
 * store's), each length must be 0 .. max_tokens (EINVAL), and the rows are
 * appended as they are (no encoding, no rotary: they are stored already).
 * in->id and in->owner are not read.  ECONFLICT when (owner, id) exists
 * (with any shape), ENOSPACE when max_sessions are open or the KV pool
 * cannot hold the rows (nothing is kept then).  Its last use is now_ns.
 * info (may be NULL) gets the new session's object. */
attn_status attn_session_import(attn_session_store *st, uint64_t owner,
                                const char *id, const attn_session_dump *in,
                                uint64_t now_ns, attn_session_info *info,
                                attn_diag *d);

/* fn(user, s) for every open session, each held for its call (in order
 * of last use, oldest first; sessions made meanwhile may be missed).
 * Stops at fn's first nonzero return.  Returns how many calls were made,
 * or -1 out of memory.  (main writes the sessions to session_dir so.) */
long attn_session_each(attn_session_store *st,
                       int (*fn)(void *user, attn_session *s), void *user);

/* One step of B sessions (held) on one layer.  The sessions share
 * num_heads, num_kv_heads and head_dim (EINVAL naming the first that
 * does not), each appears once, and may differ in dtype and variants.
 *   q     [B][t][H][D] fp32, unrotated;
 *   k, v  [B][t][Hkv][D] fp32, unrotated, or both NULL: queries only
 *         (nothing appended; each row attends every cached token; a layer
 *         with no token is ECONFLICT);
 *   position [B]: where the step's first token goes, which must be the
 *         layer's length (else ECONFLICT with the length) except for a
 *         retry: position + t equals the length and the stored keys and
 *         values there are bitwise what these rows encode to: then
 *         nothing is appended and the answer is computed again, bitwise
 *         the same.  NULL: at each layer's length (Triton's sequence
 *         extension).  Ignored for queries only.
 * All or nothing: when any session fails (unknown layer, max_tokens,
 * position, the pool), no session changes; *bad is its index (0 when the
 * failure is not one session's).  Answers: out [B][t][H][D], lse
 * [B][t][H] (natural log of the sum of exp of the row's final logits;
 * -inf for a row that sees no key), length[B] the layers' new lengths.
 * weights (may be NULL; B must be 1 then): *weights gets a malloc'd
 * [H][t][length] of attention probabilities (ETOOBIG beyond
 * max_weights_elements, checked before anything changes).  threads: the
 * engine's threads for this call.  Each session's answer is bitwise the
 * same alone or in any batch, at any batch position, on any thread
 * count. */
typedef struct attn_session_step {
  int64_t B, t, layer;
  attn_session *const *sessions;
  const int64_t *position;
  const float *q, *k, *v;
  int threads;
} attn_session_step;

attn_status attn_session_attend(attn_session_store *st,
                                const attn_session_step *step, uint64_t now_ns,
                                float *out, float *lse, int64_t *length,
                                float **weights, int64_t *bad, attn_diag *d);

/* Free every session idle for idle_timeout_ns or longer at now; returns
 * how many.  Costs the sessions that expire (a list ordered by last use),
 * not all of them.  A held session is not freed until put. */
size_t attn_session_sweep(attn_session_store *st, uint64_t now_ns);

#endif /* ATTN_SESSION_H */
