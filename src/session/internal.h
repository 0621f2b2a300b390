/* internal.h - what the files of src/session/ share: the store's and a
 * session's structs (store.c has the design), and the one call step.c
 * makes into store.c.  Not a public header. */
#ifndef ATTN_SESSION_INTERNAL_H
#define ATTN_SESSION_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "attn/engine.h"
#include "attn/kv.h"
#include "attn/session.h"

/* (owner, id) pairs of recently expired sessions kept for "expired". */
#define EXPIRED_RING 4096

struct attn_session {
  attn_session_store *st;
  uint64_t owner, hash;
  char id[ATTN_SESSION_ID_MAX + 1];
  attn_session_spec spec; /* filled; alibi_slopes owned */
  attn_attend_opts o;     /* the engine's options of this session */
  float *slopes;          /* ALiBi slopes the engine reads, or NULL */
  attn_kv_seq **seq;      /* [spec.layers] */
  pthread_mutex_t lock;   /* the sequences: steps, truncate, fork, info */
  atomic_long refs;       /* the map's (while linked) and each holder's */
  /* Under the store's mutex: */
  int linked;
  uint64_t last_ns;
  attn_session *next;                /* hash chain */
  attn_session *lru_prev, *lru_next; /* order of last use, head oldest */
};

/* An (owner, id) that expired recently. */
typedef struct expired_entry {
  uint64_t owner, hash;
  double idle_s;
  int used;
  char id[ATTN_SESSION_ID_MAX + 1];
} expired_entry;

struct attn_session_store {
  attn_session_limits lim;
  attn_kv_pool *pool;
  pthread_mutex_t mu;
  /* Under mu: */
  attn_session **buckets;
  size_t nbuckets, count;
  attn_session *lru_head, *lru_tail;
  uint64_t latest_ns; /* the greatest last use given */
  uint64_t tokens_total, expired_total;
  expired_entry *expired; /* [EXPIRED_RING] */
  size_t expired_next;
};

/* After a step (store.c): the n sessions' last use becomes now, and
 * tokens (appended by the step) are added to tokens_total.  Takes the
 * store's mutex; the caller may hold the sessions' locks. */
void attn__session_stepped(attn_session_store *st, attn_session *const *s,
                           size_t n, uint64_t now_ns, uint64_t tokens);

/* Sessions open now (under the store's mutex). */
size_t attn__session_count(attn_session_store *st);

#endif
