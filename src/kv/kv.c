/* kv.c - the KV block pool (include/attn/kv.h): chunks, blocks, sequences.
 *
 * DESIGN
 * One pool holds a class per block size (a sequence's shape and dtype
 * give its block size).  A class maps chunks of about CHUNK_BYTES and
 * keeps those with a block to give on a list (avail); a chunk hands out
 * its never-used blocks front to back (fresh: zero from mmap) and then
 * those given back (a stack, zeroed when taken again).  Each block has a
 * reference count in its chunk's record.  A chunk whose blocks are all
 * free is unmapped at once: the pool's memory follows what sequences hold.
 * Chunks start on a 2 MiB boundary and are asked for transparent huge
 * pages (map_aligned): a decode step streams through them.
 * The limit bounds the bytes mapped (whole pages), so the pool never
 * holds more than it was given, but a class may refuse while another has
 * free blocks.
 *
 * A sequence is a table of block pointers (what readers get through a
 * view) and, beside it, the chunk of each block (what the reference
 * counts need): 16 bytes of table per block.  Its last block may be
 * partly filled; last_own says that this sequence alone references it
 * (it took or copied the block itself and has not been forked since), so
 * that an append into it needs no lock; otherwise the append looks at the
 * count under the mutex and copies a shared block (copy on write) before
 * writing.  The copy is made while this sequence still references the
 * original, which is given back only after, so the other side cannot free
 * it mid-copy.
 *
 * Locking: the mutex guards classes, chunks, reference counts and the
 * statistics.  Block contents and a sequence's own fields are not under
 * it: a block is written only by the one sequence that references it
 * alone, and a sequence is used by one thread at a time (kv.h).  Zeroing
 * and copying happen outside the mutex.  meta_bytes is an atomic: tables
 * grow outside the mutex.
 */
#include "attn/kv.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "attn/tensor.h"

#define BT ATTN_KV_BLOCK_TOKENS
/* Bytes a chunk aims at: 64 blocks of Llama-3-8B's layer in fp32 (8 kv
 * heads x 128 dims x 16 tokens x 8 bytes = 128 KiB a block). */
#define CHUNK_BYTES ((size_t)8 << 20)
#define MIN_TABLE 4                  /* blocks a new table has room for */
#define HUGE_ALIGN ((size_t)2 << 20) /* chunks start on a 2 MiB page */

typedef struct kv_class kv_class;

typedef struct kv_chunk {
  kv_class *cls;
  unsigned char *base;
  size_t map_bytes;               /* whole pages */
  uint32_t nblocks, nused, fresh; /* blocks [fresh, nblocks) never used */
  uint32_t nfree;                 /* entries of free_stack */
  uint32_t *refs;                 /* [nblocks] */
  uint32_t *free_stack;           /* [nblocks] */
  struct kv_chunk *prev, *next;   /* the class's chunks with a block to give */
  struct kv_chunk *all_prev, *all_next; /* every chunk of the class */
  int on_avail;
} kv_chunk;

struct kv_class {
  size_t block_bytes;
  uint32_t per_chunk;
  size_t avail_blocks; /* free or fresh blocks of the mapped chunks */
  kv_chunk *avail, *all;
  kv_class *next;
};

struct attn_kv_pool {
  pthread_mutex_t mu;
  size_t limit, mapped, used_blocks, used_bytes, seqs, chunks;
  atomic_size_t meta;
  kv_class *classes;
};

struct attn_kv_seq {
  attn_kv_pool *pool;
  kv_class *cls;
  attn_kv_shape shape;
  size_t esize, block_bytes, panel_bytes, voff;
  int64_t len, nblk, cap;
  void **ptr;     /* [cap] block pointers, the first nblk used */
  kv_chunk **chk; /* [cap] each block's chunk */
  int last_own;   /* this sequence alone references blocks[nblk - 1] */
};

static size_t page_size(void) {
  long p = sysconf(_SC_PAGESIZE);
  return p > 0 ? (size_t)p : 4096;
}

static size_t round_pages(size_t n) {
  size_t p = page_size();
  return n / p * p + (n % p ? p : 0);
}

/* ---- names and shapes ---------------------------------------------------- */

const char *attn_kv_dtype_name(attn_kv_dtype t) {
  switch (t) {
    case ATTN_KV_FP32:
      return "fp32";
    case ATTN_KV_BF16:
      return "bf16";
    case ATTN_KV_FP16:
      return "fp16";
  }
  return NULL;
}

int attn_kv_dtype_parse(const char *s, attn_kv_dtype *t) {
  static const attn_kv_dtype all[] = {ATTN_KV_FP32, ATTN_KV_BF16, ATTN_KV_FP16};
  for (size_t i = 0; s && i < sizeof all / sizeof *all; i++)
    if (strcmp(s, attn_kv_dtype_name(all[i])) == 0) {
      *t = all[i];
      return 1;
    }
  return 0;
}

size_t attn_kv_block_bytes(const attn_kv_shape *s) {
  size_t n;
  if (!attn_kv_dtype_size(s->dtype) || s->num_kv_heads < 1 || s->head_dim < 1 ||
      s->head_dim > INT32_MAX ||
      !attn_size_mul((size_t)s->num_kv_heads, attn_kv_panel_bytes(s), &n))
    return 0;
  return n;
}

/* ---- the pool ------------------------------------------------------------ */

attn_status attn_kv_pool_create(size_t limit_bytes, attn_kv_pool **out,
                                attn_diag *d) {
  *out = NULL;
  if (limit_bytes == 0)
    return attn_diag_set(d, ATTN_EINVAL, "kv pool: the limit is 0 bytes");
  attn_kv_pool *p = calloc(1, sizeof *p);
  if (!p) return attn_diag_set(d, ATTN_ENOMEM, "kv pool: out of memory");
  if (pthread_mutex_init(&p->mu, NULL) != 0) {
    free(p);
    return attn_diag_set(d, ATTN_ENOMEM, "kv pool: cannot make its mutex");
  }
  p->limit = limit_bytes;
  atomic_init(&p->meta, sizeof *p);
  *out = p;
  return ATTN_OK;
}

static void chunk_unmap(attn_kv_pool *p, kv_chunk *c) {
  kv_class *k = c->cls;
  if (c->on_avail) {
    if (c->prev) c->prev->next = c->next;
    if (c->next) c->next->prev = c->prev;
    if (k->avail == c) k->avail = c->next;
  }
  if (c->all_prev) c->all_prev->all_next = c->all_next;
  if (c->all_next) c->all_next->all_prev = c->all_prev;
  if (k->all == c) k->all = c->all_next;
  k->avail_blocks -= c->nfree + (c->nblocks - c->fresh);
  munmap(c->base, c->map_bytes);
  p->mapped -= c->map_bytes;
  p->chunks--;
  atomic_fetch_sub(&p->meta, sizeof *c + 2 * (size_t)c->nblocks * 4);
  free(c);
}

void attn_kv_pool_destroy(attn_kv_pool *p) {
  if (!p) return;
  for (kv_class *k = p->classes, *next; k; k = next) {
    next = k->next;
    while (k->all) chunk_unmap(p, k->all);
    free(k);
  }
  pthread_mutex_destroy(&p->mu);
  free(p);
}

void attn_kv_pool_stats_get(attn_kv_pool *p, attn_kv_pool_stats *st) {
  pthread_mutex_lock(&p->mu);
  st->limit_bytes = p->limit;
  st->mapped_bytes = p->mapped;
  st->used_bytes = p->used_bytes;
  st->used_blocks = p->used_blocks;
  st->meta_bytes = atomic_load(&p->meta);
  st->sequences = p->seqs;
  st->chunks = p->chunks;
  pthread_mutex_unlock(&p->mu);
}

/* The class of a block size, made when new.  Under the mutex. */
static kv_class *class_for(attn_kv_pool *p, size_t block_bytes) {
  for (kv_class *k = p->classes; k; k = k->next)
    if (k->block_bytes == block_bytes) return k;
  kv_class *k = calloc(1, sizeof *k);
  if (!k) return NULL;
  size_t per = CHUNK_BYTES / block_bytes;
  k->block_bytes = block_bytes;
  k->per_chunk = per < 1 ? 1 : per > UINT32_MAX / 2 ? UINT32_MAX / 2 : per;
  k->next = p->classes;
  p->classes = k;
  atomic_fetch_add(&p->meta, sizeof *k);
  return k;
}

static void avail_push(kv_class *k, kv_chunk *c) {
  c->prev = NULL;
  c->next = k->avail;
  if (k->avail) k->avail->prev = c;
  k->avail = c;
  c->on_avail = 1;
}

static void avail_drop(kv_class *k, kv_chunk *c) {
  if (c->prev) c->prev->next = c->next;
  if (c->next) c->next->prev = c->prev;
  if (k->avail == c) k->avail = c->next;
  c->on_avail = 0;
}

/* Blocks of class k that fit in what the limit leaves (whole pages). */
static size_t room_blocks(const attn_kv_pool *p, const kv_class *k,
                          size_t cap) {
  size_t room = p->limit > p->mapped ? p->limit - p->mapped : 0;
  size_t n = room / k->block_bytes;
  if (n > cap) n = cap;
  while (n > 0 && round_pages(n * k->block_bytes) > room) n--;
  return n;
}

/* bytes of fresh zero memory at a HUGE_ALIGN boundary (the rest of the
 * larger mapping given back), asked to be backed by huge pages: a decode
 * step reads a sequence's blocks one after another, and with 4 KiB pages
 * the reads of a single thread reached 16-18 GB/s here against 24-26 with
 * 2 MiB pages (Zen 4, Linux THP in madvise mode).  NULL when mmap fails. */
static unsigned char *map_aligned(size_t bytes) {
  size_t span = bytes + HUGE_ALIGN;
  unsigned char *m = mmap(NULL, span, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return NULL;
  size_t head = (HUGE_ALIGN - (uintptr_t)m % HUGE_ALIGN) % HUGE_ALIGN;
  if (head) munmap(m, head);
  if (span - head > bytes) munmap(m + head + bytes, span - head - bytes);
#ifdef MADV_HUGEPAGE
  madvise(m + head, bytes, MADV_HUGEPAGE);
#endif
  return m + head;
}

/* Map a chunk of up to per_chunk blocks within the limit.  Under the
 * mutex.  NULL with *full = 1 when the limit leaves no room for a block,
 * NULL with *full = 0 when there is no memory. */
static kv_chunk *chunk_map(attn_kv_pool *p, kv_class *k, int *full) {
  size_t nb = room_blocks(p, k, k->per_chunk);
  *full = nb == 0;
  if (nb == 0) return NULL;
  size_t meta = sizeof(kv_chunk) + 2 * nb * sizeof(uint32_t);
  kv_chunk *c = calloc(1, meta);
  if (!c) return NULL;
  c->map_bytes = round_pages(nb * k->block_bytes);
  c->base = map_aligned(c->map_bytes);
  if (!c->base) {
    free(c);
    return NULL;
  }
  c->cls = k;
  c->nblocks = (uint32_t)nb;
  c->refs = (uint32_t *)(c + 1);
  c->free_stack = c->refs + nb;
  c->all_next = k->all;
  if (k->all) k->all->all_prev = c;
  k->all = c;
  avail_push(k, c);
  k->avail_blocks += nb;
  p->mapped += c->map_bytes;
  p->chunks++;
  atomic_fetch_add(&p->meta, meta);
  return c;
}

static uint32_t slot_of(const kv_chunk *c, const void *block) {
  return (uint32_t)(((const unsigned char *)block - c->base) /
                    c->cls->block_bytes);
}

/* Drop one reference to a block; the last one gives it back, and the
 * chunk's last block unmaps the chunk.  Under the mutex. */
static void block_put(attn_kv_pool *p, kv_chunk *c, void *block) {
  uint32_t s = slot_of(c, block);
  if (--c->refs[s] > 0) return;
  kv_class *k = c->cls;
  c->free_stack[c->nfree++] = s;
  c->nused--;
  k->avail_blocks++;
  p->used_blocks--;
  p->used_bytes -= k->block_bytes;
  if (c->nused == 0)
    chunk_unmap(p, c);
  else if (!c->on_avail)
    avail_push(k, c);
}

static attn_status full(const attn_kv_pool *p, const kv_class *k, size_t n,
                        attn_diag *d) {
  return attn_diag_set(
      d, ATTN_ETOOBIG,
      "the KV cache is full: %zu more blocks of %zu bytes needed; %zu bytes "
      "in use by %zu sequences, %zu bytes mapped, limit %zu bytes",
      n, k->block_bytes, p->used_bytes, p->seqs, p->mapped, p->limit);
}

/* Take n blocks of class k, all or none: ptr[i], chk[i], and dirty[i] = 1
 * for a block that held data before (to be zeroed).  Under the mutex. */
static attn_status blocks_take(attn_kv_pool *p, kv_class *k, size_t n,
                               void **ptr, kv_chunk **chk, unsigned char *dirty,
                               attn_diag *d) {
  if (k->avail_blocks + room_blocks(p, k, SIZE_MAX) < n)
    return full(p, k, n, d);
  for (size_t i = 0; i < n; i++) {
    int no_room = 0;
    kv_chunk *c = k->avail ? k->avail : chunk_map(p, k, &no_room);
    if (!c) {
      while (i-- > 0) block_put(p, chk[i], ptr[i]);
      if (no_room) return full(p, k, n, d);
      return attn_diag_set(d, ATTN_ENOMEM, "kv pool: cannot map a chunk");
    }
    int reused = c->nfree > 0;
    uint32_t s = reused ? c->free_stack[--c->nfree] : c->fresh++;
    dirty[i] = (unsigned char)reused;
    ptr[i] = c->base + (size_t)s * k->block_bytes;
    chk[i] = c;
    c->refs[s] = 1;
    c->nused++;
    k->avail_blocks--;
    p->used_blocks++;
    p->used_bytes += k->block_bytes;
    if (c->nfree == 0 && c->fresh == c->nblocks) avail_drop(k, c);
  }
  return ATTN_OK;
}

/* ---- sequences ----------------------------------------------------------- */

static attn_status check_shape(const attn_kv_shape *sh, attn_diag *d) {
  if (!attn_kv_dtype_size(sh->dtype))
    return attn_diag_set(d, ATTN_EINVAL,
                         "kv_dtype is %d; expected fp32 (0), bf16 (1) or fp16 "
                         "(2)",
                         (int)sh->dtype);
  if (sh->num_kv_heads < 1 || sh->num_kv_heads > INT32_MAX)
    return attn_diag_set(d, ATTN_EINVAL,
                         "num_kv_heads is %lld; it must be in [1, %d]",
                         (long long)sh->num_kv_heads, INT32_MAX);
  if (sh->head_dim < 1 || sh->head_dim > INT32_MAX)
    return attn_diag_set(d, ATTN_EINVAL,
                         "head_dim is %lld; it must be in [1, %d]",
                         (long long)sh->head_dim, INT32_MAX);
  return ATTN_OK;
}

attn_status attn_kv_seq_create(attn_kv_pool *p, const attn_kv_shape *shape,
                               attn_kv_seq **out, attn_diag *d) {
  attn_status st;
  *out = NULL;
  if ((st = check_shape(shape, d))) return st;
  size_t bb = attn_kv_block_bytes(shape);
  if (bb == 0 || round_pages(bb) > p->limit)
    return attn_diag_set(d, ATTN_ETOOBIG,
                         "a block of %d tokens x %lld kv heads x %lld dims "
                         "(%s, keys and values) is larger than the KV cache's "
                         "limit of %zu bytes",
                         BT, (long long)shape->num_kv_heads,
                         (long long)shape->head_dim,
                         attn_kv_dtype_name(shape->dtype), p->limit);
  attn_kv_seq *s = calloc(1, sizeof *s);
  void **ptr = malloc(MIN_TABLE * sizeof *ptr);
  kv_chunk **chk = malloc(MIN_TABLE * sizeof *chk);
  if (!s || !ptr || !chk) {
    free(s);
    free(ptr);
    free(chk);
    return attn_diag_set(d, ATTN_ENOMEM, "kv sequence: out of memory");
  }
  pthread_mutex_lock(&p->mu);
  kv_class *k = class_for(p, bb);
  if (k) p->seqs++;
  pthread_mutex_unlock(&p->mu);
  if (!k) {
    free(s);
    free(ptr);
    free(chk);
    return attn_diag_set(d, ATTN_ENOMEM, "kv sequence: out of memory");
  }
  s->pool = p;
  s->cls = k;
  s->shape = *shape;
  s->esize = attn_kv_dtype_size(shape->dtype);
  s->block_bytes = bb;
  s->panel_bytes = attn_kv_panel_bytes(shape);
  s->voff = attn_kv_values_offset(shape);
  s->cap = MIN_TABLE;
  s->ptr = ptr;
  s->chk = chk;
  atomic_fetch_add(&p->meta,
                   sizeof *s + MIN_TABLE * (sizeof *ptr + sizeof *chk));
  *out = s;
  return ATTN_OK;
}

void attn_kv_seq_free(attn_kv_seq *s) {
  if (!s) return;
  attn_kv_pool *p = s->pool;
  pthread_mutex_lock(&p->mu);
  for (int64_t b = 0; b < s->nblk; b++) block_put(p, s->chk[b], s->ptr[b]);
  p->seqs--;
  pthread_mutex_unlock(&p->mu);
  atomic_fetch_sub(
      &p->meta, sizeof *s + (size_t)s->cap * (sizeof *s->ptr + sizeof *s->chk));
  free(s->ptr);
  free(s->chk);
  free(s);
}

int64_t attn_kv_seq_len(const attn_kv_seq *s) {
  return s->len;
}

const attn_kv_shape *attn_kv_seq_shape(const attn_kv_seq *s) {
  return &s->shape;
}

size_t attn_kv_seq_bytes(const attn_kv_seq *s) {
  return (size_t)s->nblk * s->block_bytes;
}

attn_kv_view attn_kv_seq_view(const attn_kv_seq *s) {
  attn_kv_view v = {(const void *const *)s->ptr, s->len, s->shape};
  return v;
}

/* Room in the table for n blocks.  Growing it changes nothing else. */
static attn_status table_reserve(attn_kv_seq *s, int64_t n, attn_diag *d) {
  if (n <= s->cap) return ATTN_OK;
  int64_t cap = s->cap * 2 > n ? s->cap * 2 : n;
  void **ptr = realloc(s->ptr, (size_t)cap * sizeof *ptr);
  if (ptr) s->ptr = ptr;
  kv_chunk **chk = ptr ? realloc(s->chk, (size_t)cap * sizeof *chk) : NULL;
  if (chk) s->chk = chk;
  if (!ptr || !chk)
    return attn_diag_set(d, ATTN_ENOMEM,
                         "kv sequence: no memory for a table of %lld blocks",
                         (long long)cap);
  atomic_fetch_add(&s->pool->meta,
                   (size_t)(cap - s->cap) * (sizeof *ptr + sizeof *chk));
  s->cap = cap;
  return ATTN_OK;
}

/* Copy one element of e bytes (or zero it when src is NULL). */
static inline void put_elem(unsigned char *dst, const unsigned char *src,
                            size_t e) {
  if (e == 4) {
    uint32_t x = 0;
    if (src) memcpy(&x, src, 4);
    memcpy(dst, &x, 4);
  } else {
    uint16_t x = 0;
    if (src) memcpy(&x, src, 2);
    memcpy(dst, &x, 2);
  }
}

/* One head's row of keys and values (ks, vs: D elements each, or NULL for
 * zeros) into slot `slot` of its panel (kp, vp), laid out as kv.h says.
 * Inlined with dt and e constant for each dtype (scatter), so that the
 * index arithmetic folds: a call per element cost a one-token step of 8
 * kv heads x 128 dims about 50,000 instructions. */
static inline void scatter_head(unsigned char *kp, unsigned char *vp,
                                const unsigned char *ks,
                                const unsigned char *vs, size_t D, int64_t slot,
                                attn_kv_dtype dt, size_t e) {
  for (size_t c = 0; c < D; c++) {
    put_elem(kp + attn_kv_key_index(dt, (int64_t)c, slot) * e,
             ks ? ks + c * e : NULL, e);
    put_elem(vp + attn_kv_value_index(dt, (int64_t)D, slot, (int64_t)c) * e,
             vs ? vs + c * e : NULL, e);
  }
}

/* Tokens [pos, pos + t) into the blocks (k, v: [t][Hkv][D], NULL for
 * zeros), laid out as kv.h says. */
static void scatter(const attn_kv_seq *s, int64_t pos, int64_t t,
                    const unsigned char *k, const unsigned char *v) {
  size_t e = s->esize, D = (size_t)s->shape.head_dim;
  size_t H = (size_t)s->shape.num_kv_heads, row = H * D * e;
  attn_kv_dtype dt = s->shape.dtype;
  for (int64_t i = 0; i < t; i++) {
    unsigned char *blk = s->ptr[(pos + i) / BT];
    int64_t slot = (pos + i) % BT;
    for (size_t h = 0; h < H; h++) {
      unsigned char *kp = blk + h * s->panel_bytes, *vp = kp + s->voff;
      const unsigned char *ks = k ? k + (size_t)i * row + h * D * e : NULL;
      const unsigned char *vs = v ? v + (size_t)i * row + h * D * e : NULL;
      if (ks && vs && dt == ATTN_KV_FP32)
        scatter_head(kp, vp, ks, vs, D, slot, ATTN_KV_FP32, 4);
      else if (ks && vs && dt == ATTN_KV_BF16)
        scatter_head(kp, vp, ks, vs, D, slot, ATTN_KV_BF16, 2);
      else if (ks && vs && dt == ATTN_KV_FP16)
        scatter_head(kp, vp, ks, vs, D, slot, ATTN_KV_FP16, 2);
      else
        scatter_head(kp, vp, ks, vs, D, slot, dt, e);
    }
  }
}

/* Under the mutex: 1 when this sequence alone references its last block. */
static int last_alone(const attn_kv_seq *s) {
  const kv_chunk *c = s->chk[s->nblk - 1];
  return c->refs[slot_of(c, s->ptr[s->nblk - 1])] == 1;
}

/* The blocks an append of t tokens needs: add new ones into the table at
 * [nblk, nblk + add), and, when *cow, one more at nblk + add to copy the
 * shared last block into.  All or nothing. */
static attn_status append_take(attn_kv_seq *s, int64_t add, int *cow,
                               unsigned char *dirty, attn_diag *d) {
  attn_kv_pool *p = s->pool;
  pthread_mutex_lock(&p->mu);
  *cow = s->len % BT != 0 && !s->last_own && !last_alone(s);
  attn_status st = blocks_take(p, s->cls, (size_t)(add + *cow),
                               s->ptr + s->nblk, s->chk + s->nblk, dirty, d);
  pthread_mutex_unlock(&p->mu);
  return st;
}

/* Replace the shared last block by the copy taken at nblk + add. */
static void append_copy(attn_kv_seq *s, int64_t add) {
  int64_t last = s->nblk - 1;
  void *old = s->ptr[last];
  kv_chunk *oc = s->chk[last];
  memcpy(s->ptr[s->nblk + add], old, s->block_bytes);
  s->ptr[last] = s->ptr[s->nblk + add];
  s->chk[last] = s->chk[s->nblk + add];
  pthread_mutex_lock(&s->pool->mu);
  block_put(s->pool, oc, old);
  pthread_mutex_unlock(&s->pool->mu);
}

attn_status attn_kv_seq_append(attn_kv_seq *s, int64_t t, const void *k,
                               const void *v, attn_diag *d) {
  attn_status st;
  if (t < 0)
    return attn_diag_set(d, ATTN_EINVAL, "append of %lld tokens", (long long)t);
  if (!k != !v)
    return attn_diag_set(d, ATTN_EINVAL,
                         "append: keys and values come together or not at all");
  if (t == 0) return ATTN_OK;
  if (t > INT64_MAX / 2 - s->len)
    return attn_diag_set(d, ATTN_ETOOBIG, "append of %lld tokens to %lld",
                         (long long)t, (long long)s->len);
  int64_t nb = (s->len + t + BT - 1) / BT, add = nb - s->nblk;
  unsigned char small[64], *dirty = small;
  if ((st = table_reserve(s, nb + 1, d))) return st;
  if (add + 1 > (int64_t)sizeof small && !(dirty = malloc((size_t)add + 1)))
    return attn_diag_set(d, ATTN_ENOMEM, "kv sequence: out of memory");
  int cow = 0;
  if (add > 0 || (s->len % BT != 0 && !s->last_own))
    st = append_take(s, add, &cow, dirty, d);
  if (st == ATTN_OK) {
    for (int64_t i = 0; i < add; i++)
      if (dirty[i]) memset(s->ptr[s->nblk + i], 0, s->block_bytes);
    if (cow) append_copy(s, add);
    s->nblk = nb;
    /* zeros: new blocks are zero already; only the slots of a partly
     * filled last block may hold an old token */
    int64_t nz = s->len % BT ? BT - s->len % BT : 0;
    scatter(s, s->len, k ? t : (t < nz ? t : nz), k, v);
    s->len += t;
    s->last_own = 1;
  }
  if (dirty != small) free(dirty);
  return st;
}

attn_status attn_kv_seq_truncate(attn_kv_seq *s, int64_t n, attn_diag *d) {
  if (n < 0)
    return attn_diag_set(d, ATTN_EINVAL, "truncate to %lld tokens",
                         (long long)n);
  if (n >= s->len) return ATTN_OK;
  int64_t keep = (n + BT - 1) / BT;
  if (keep < s->nblk) {
    pthread_mutex_lock(&s->pool->mu);
    for (int64_t b = keep; b < s->nblk; b++)
      block_put(s->pool, s->chk[b], s->ptr[b]);
    pthread_mutex_unlock(&s->pool->mu);
    s->nblk = keep;
    s->last_own = 0;
  }
  s->len = n;
  return ATTN_OK;
}

attn_status attn_kv_seq_fork(attn_kv_seq *s, attn_kv_seq **out, attn_diag *d) {
  attn_status st = attn_kv_seq_create(s->pool, &s->shape, out, d);
  if (st) return st;
  attn_kv_seq *c = *out;
  if ((st = table_reserve(c, s->nblk, d))) {
    attn_kv_seq_free(c);
    *out = NULL;
    return st;
  }
  memcpy(c->ptr, s->ptr, (size_t)s->nblk * sizeof *s->ptr);
  memcpy(c->chk, s->chk, (size_t)s->nblk * sizeof *s->chk);
  pthread_mutex_lock(&s->pool->mu);
  for (int64_t b = 0; b < s->nblk; b++)
    c->chk[b]->refs[slot_of(c->chk[b], c->ptr[b])]++;
  pthread_mutex_unlock(&s->pool->mu);
  c->nblk = s->nblk;
  c->len = s->len;
  s->last_own = 0;
  return ATTN_OK;
}

attn_status attn_kv_seq_read(const attn_kv_seq *s, int64_t pos, int64_t n,
                             void *k, void *v, attn_diag *d) {
  if (pos < 0 || n < 0 || pos > s->len || n > s->len - pos)
    return attn_diag_set(
        d, ATTN_EINVAL, "tokens [%lld, %lld) are not within the length %lld",
        (long long)pos, (long long)(pos + n), (long long)s->len);
  size_t e = s->esize, D = (size_t)s->shape.head_dim;
  size_t H = (size_t)s->shape.num_kv_heads, row = H * D * e;
  attn_kv_dtype dt = s->shape.dtype;
  unsigned char *ko = k, *vo = v;
  for (int64_t i = 0; i < n; i++) {
    const unsigned char *blk = s->ptr[(pos + i) / BT];
    int64_t slot = (pos + i) % BT;
    for (size_t h = 0; h < H; h++) {
      const unsigned char *kp = blk + h * s->panel_bytes, *vp = kp + s->voff;
      for (size_t c = 0; c < D; c++) {
        size_t at = (size_t)i * row + (h * D + c) * e;
        if (ko)
          memcpy(ko + at, kp + attn_kv_key_index(dt, (int64_t)c, slot) * e, e);
        if (vo)
          memcpy(vo + at,
                 vp + attn_kv_value_index(dt, (int64_t)D, slot, (int64_t)c) * e,
                 e);
      }
    }
  }
  return ATTN_OK;
}

uint32_t attn_kv_seq_block_refs(const attn_kv_seq *s, int64_t pos) {
  if (pos < 0 || pos >= s->len) return 0;
  const kv_chunk *c = s->chk[pos / BT];
  pthread_mutex_lock(&s->pool->mu);
  uint32_t r = c->refs[slot_of(c, s->ptr[pos / BT])];
  pthread_mutex_unlock(&s->pool->mu);
  return r;
}
