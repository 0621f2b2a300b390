/* kv.h - the KV block pool: where sessions keep their keys and values.
 *
 * A decoder's keys and values live in fixed-size blocks of
 * ATTN_KV_BLOCK_TOKENS tokens, taken from one pool with a byte limit (the
 * future kv_cache_bytes).  A sequence (one layer of one session) is a
 * table of blocks and a length; its operations are append, truncate, fork
 * and free.  The pool moves bytes only: it knows the storage dtype's size
 * and the block layout, never what the values mean (rotary positions and
 * the conversion from fp32 are the engine's: attn_kv_encode in engine.h).
 *
 * Blocks.  A sequence of num_kv_heads Hkv, head_dim D and element size e
 * (attn_kv_dtype_size) holds token p in block p / 16, slot s = p % 16.  A
 * block is Hkv panels, one per key/value head (attn_kv_panel_bytes); a
 * panel holds the head's 16 keys, then (at attn_kv_values_offset) its 16
 * values.  fp32 and fp16:
 *   keys   stored [D][16]: slot s's value d at element d * 16 + s;
 *   values stored [16][D]: slot s's value d at element s * D + d.
 * bf16 stores pairs, as vdpbf16ps reads them: two bf16 side by side are
 * one 32-bit word whose high half is an fp32 when the low half is
 * shifted out, and whose low half is one when shifted up:
 *   keys   stored [D2 / 2][16][2] (D2 = D rounded up to even, the last
 *          dim's partner a zero when D is odd): slot s's value d at
 *          element ((d / 2) * 16 + s) * 2 + d % 2;
 *   values stored [8][D][2]: slot s's value d at element
 *          ((s / 2) * D + d) * 2 + s % 2.
 * attn_kv_key_index and attn_kv_value_index give these.  Keys are
 * transposed so that one vector load reads one dim (bf16: two dims) of 16
 * keys (the decode kernel's scores); a block's panels are one contiguous
 * run, read front to back.

 * Sharing.  Blocks are reference-counted: attn_kv_seq_fork gives the copy
 * the same blocks; whichever side appends to a shared partly filled last
 * block first copies it (copy on write), so neither ever sees the other's
 * later tokens.  A block that no sequence references goes back to the
 * pool; a block taken from the pool again is zeroed before a sequence sees
 * it (blocks never handed out come zeroed from mmap), so no sequence ever
 * reads another's data.  Slots at or past a sequence's length may hold
 * anything of its own past (a truncation does not clear them): readers go
 * by the length.
 *
 * Memory.  The pool maps chunks of about 8 MiB (mmap, on 2 MiB boundaries,
 * asking for transparent huge pages) per block size and hands out blocks
 * from them; a chunk whose blocks are all free is
 * unmapped at once, so when every sequence is freed the pool holds no
 * memory.  The byte limit bounds the bytes mapped: used <= mapped <=
 * limit, always.  A free block of one block size does not serve another
 * (sessions of other shapes or dtypes): the pool then refuses while
 * blocks of the other size are free.
 *
 * Threads.  The pool's shared state (free blocks, chunks, reference
 * counts, statistics) is under one mutex: any thread may create, append
 * to, truncate, fork and free sequences.  One sequence is used by one
 * thread at a time (a session's steps are applied in order by its caller);
 * a view (attn_kv_seq_view) is valid until that sequence's next append,
 * truncate or free, and may be read by any number of threads meanwhile,
 * while other sequences, those sharing its blocks included, change.
 *
 * Every failure returns a status with an attn_diag message and changes
 * nothing: an append that the pool cannot serve appends no token.
 */
#ifndef ATTN_KV_H
#define ATTN_KV_H

#include <stddef.h>
#include <stdint.h>

#include "attn/status.h"

#define ATTN_KV_BLOCK_TOKENS 16

typedef enum {
  ATTN_KV_FP32 = 0,
  ATTN_KV_BF16 = 1, /* bfloat16: the top half of an fp32 */
  ATTN_KV_FP16 = 2  /* IEEE binary16 */
} attn_kv_dtype;

/* Bytes of one element: 4, 2, 2; 0 for anything else. */
static inline size_t attn_kv_dtype_size(attn_kv_dtype t) {
  return t == ATTN_KV_FP32 ? 4 : t == ATTN_KV_BF16 || t == ATTN_KV_FP16 ? 2 : 0;
}

/* "fp32", "bf16", "fp16" (the names sessions use); NULL for others. */
const char *attn_kv_dtype_name(attn_kv_dtype t);
/* *t from exactly those names; 0 for anything else (NULL too). */
int attn_kv_dtype_parse(const char *s, attn_kv_dtype *t);

/* The shape of a sequence's rows. */
typedef struct attn_kv_shape {
  int64_t num_kv_heads; /* Hkv >= 1 */
  int64_t head_dim;     /* D >= 1 */
  attn_kv_dtype dtype;
} attn_kv_shape;

/* Bytes of a block of this shape (Hkv panels), 0 when the shape is
 * invalid or the size overflows. */
size_t attn_kv_block_bytes(const attn_kv_shape *s);

/* Dims of a panel's keys: D, for bf16 D rounded up to even. */
static inline int64_t attn_kv_key_dims(const attn_kv_shape *s) {
  return s->dtype == ATTN_KV_BF16 ? s->head_dim + (s->head_dim & 1)
                                  : s->head_dim;
}
/* Bytes from a panel to its values: 16 x attn_kv_key_dims x e. */
static inline size_t attn_kv_values_offset(const attn_kv_shape *s) {
  return (size_t)ATTN_KV_BLOCK_TOKENS * (size_t)attn_kv_key_dims(s) *
         attn_kv_dtype_size(s->dtype);
}
/* Bytes of one head's panel: its keys, then 16 x D values. */
static inline size_t attn_kv_panel_bytes(const attn_kv_shape *s) {
  return attn_kv_values_offset(s) + (size_t)ATTN_KV_BLOCK_TOKENS *
                                        (size_t)s->head_dim *
                                        attn_kv_dtype_size(s->dtype);
}
/* Element of key dim d of slot s within a panel (layout above). */
static inline size_t attn_kv_key_index(attn_kv_dtype t, int64_t d, int64_t s) {
  if (t == ATTN_KV_BF16)
    return ((size_t)(d / 2) * ATTN_KV_BLOCK_TOKENS + (size_t)s) * 2 +
           (size_t)(d & 1);
  return (size_t)d * ATTN_KV_BLOCK_TOKENS + (size_t)s;
}
/* Element of value dim d of slot s from the panel's values. */
static inline size_t attn_kv_value_index(attn_kv_dtype t, int64_t D, int64_t s,
                                         int64_t d) {
  if (t == ATTN_KV_BF16)
    return ((size_t)(s / 2) * (size_t)D + (size_t)d) * 2 + (size_t)(s & 1);
  return (size_t)s * (size_t)D + (size_t)d;
}

/* What a reader needs: the blocks of a sequence, in token order, and its
 * length.  blocks[b] holds tokens [16 b, 16 b + 16) as laid out above. */
typedef struct attn_kv_view {
  const void *const *blocks;
  int64_t len;
  attn_kv_shape shape;
} attn_kv_view;

typedef struct attn_kv_pool attn_kv_pool;
typedef struct attn_kv_seq attn_kv_seq;

/* A pool that maps at most limit_bytes.  ATTN_EINVAL for a limit of 0,
 * ATTN_ENOMEM. */
attn_status attn_kv_pool_create(size_t limit_bytes, attn_kv_pool **out,
                                attn_diag *d);
/* Unmaps everything.  Every sequence of the pool must have been freed
 * (attn_kv_seq_free) before; NULL is allowed. */
void attn_kv_pool_destroy(attn_kv_pool *p);

typedef struct attn_kv_pool_stats {
  size_t limit_bytes;
  size_t mapped_bytes; /* chunks mapped now */
  size_t used_bytes;   /* blocks some sequence references */
  size_t used_blocks;
  size_t meta_bytes; /* bookkeeping: chunk records, block tables, sequences */
  size_t sequences;
  size_t chunks;
} attn_kv_pool_stats;

/* A consistent snapshot (taken under the pool's mutex).  Any thread. */
void attn_kv_pool_stats_get(attn_kv_pool *p, attn_kv_pool_stats *st);

/* An empty sequence of this shape.  ATTN_EINVAL for a shape that is not
 * valid (the field named), ATTN_ETOOBIG when one block of it would be
 * larger than the pool's limit, ATTN_ENOMEM. */
attn_status attn_kv_seq_create(attn_kv_pool *p, const attn_kv_shape *shape,
                               attn_kv_seq **out, attn_diag *d);
/* Give back every block it references (to the pool when no other sequence
 * references them) and free it.  NULL is allowed. */
void attn_kv_seq_free(attn_kv_seq *s);

int64_t attn_kv_seq_len(const attn_kv_seq *s);
const attn_kv_shape *attn_kv_seq_shape(const attn_kv_seq *s);
/* Bytes of the blocks it references (shared ones counted in full). */
size_t attn_kv_seq_bytes(const attn_kv_seq *s);
/* The blocks, for readers (see Threads above). */
attn_kv_view attn_kv_seq_view(const attn_kv_seq *s);

/* Append t >= 0 tokens at positions len .. len + t - 1: k and v are
 * [t][Hkv][D] elements of the sequence's dtype (attn_kv_encode makes them
 * from fp32), or both NULL for zeros (which writes only into a partly
 * filled last block: new blocks are zero without being touched).  All or
 * nothing: when the pool cannot give the blocks it needs (new ones, and a copy
 * of a shared partly filled last block) it returns ATTN_ETOOBIG with what is in
 * use, by how many sequences, and the limit, and the sequence is unchanged;
 * likewise ATTN_ENOMEM.  A session layer answers ATTN_ETOOBIG from here as "the
 * KV cache is full" (issue 41's 507). */
attn_status attn_kv_seq_append(attn_kv_seq *s, int64_t t, const void *k,
                               const void *v, attn_diag *d);

/* Keep the first n tokens (nothing happens when n >= len; n >= 0).  The
 * blocks past them are given back. */
attn_status attn_kv_seq_truncate(attn_kv_seq *s, int64_t n, attn_diag *d);

/* A new sequence with the same tokens, sharing s's blocks (nothing is
 * copied until one side appends).  ATTN_ENOMEM only (the block table). */
attn_status attn_kv_seq_fork(attn_kv_seq *s, attn_kv_seq **out, attn_diag *d);

/* Copy tokens [pos, pos + n) out as [n][Hkv][D] elements of the dtype (k
 * or v may be NULL).  ATTN_EINVAL when the range is not within the
 * length. */
attn_status attn_kv_seq_read(const attn_kv_seq *s, int64_t pos, int64_t n,
                             void *k, void *v, attn_diag *d);

/* For tests: the number of sequences referencing the block that holds
 * token pos (0 when pos is not within the length). */
uint32_t attn_kv_seq_block_refs(const attn_kv_seq *s, int64_t pos);

#endif /* ATTN_KV_H */
