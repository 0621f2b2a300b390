/* fuzz_session_file.c - libFuzzer target: the session file decoder
 * (src/codec/session_file.c, attn_session_file_decode), what PUT
 * /v1/sessions/{id} with application/octet-stream and a session_dir file
 * at start-up go through, then the store's import of what it decoded.
 *
 * The first input byte is the framing, the rest is the file:
 *   bit 0   0: the bytes are the whole file; 1: they are the header JSON,
 *           a NUL, then the data section, and the 8-byte little-endian
 *           header length is written in front (so that most inputs get
 *           past it)
 * Every input checks, besides the sanitizers:
 *   - a failure is ATTN_EPARSE (or ATTN_ENOMEM) with a message that starts
 *     "session file: ", and the dump left zeroed;
 *   - a success is a dump the codec can write again: its id valid, its
 *     rows inside the input (read in full here, so that ASan sees an
 *     overread), every length <= max_tokens; encoded, the file decodes to
 *     the same dump (id, owner, spec, lengths, rows byte for byte), and
 *     encoding that gives the same bytes again;
 *   - the dump imported into a small store either is refused with a
 *     client's status (EINVAL, ENOSPACE) or makes a session whose export
 *     has the same lengths and rows, byte for byte.
 * Any violation aborts (a crash for libFuzzer).
 *
 * Build and run: tests/fuzz/run.sh session_file [seconds]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/codec.h"
#include "attn/session.h"

static void fail(const char *what, const char *detail) {
  fprintf(stderr, "fuzz_session_file: %s: %s\n", what, detail);
  abort();
}

static size_t layer_bytes(const attn_session_dump *x, int64_t l) {
  return (size_t)x->length[l] * (size_t)x->spec.num_kv_heads *
         (size_t)x->spec.head_dim * attn_kv_dtype_size(x->spec.kv_dtype);
}

/* The same dump: id, owner, spec fields, lengths and rows. */
static void same_dump(const attn_session_dump *a, const attn_session_dump *b,
                      int with_id, const char *ctx) {
  const attn_session_spec *p = &a->spec, *q = &b->spec;
  if (with_id && (strcmp(a->id, b->id) || a->owner != b->owner))
    fail(ctx, "id or owner differ");
  if (p->layers != q->layers || p->num_heads != q->num_heads ||
      p->num_kv_heads != q->num_kv_heads || p->head_dim != q->head_dim ||
      p->max_tokens != q->max_tokens || p->kv_dtype != q->kv_dtype)
    fail(ctx, "the shape differs");
  if (with_id &&
      (p->has_scale != q->has_scale ||
       memcmp(&p->scale, &q->scale, sizeof p->scale) ||
       p->has_window != q->has_window || p->window_left != q->window_left ||
       p->alibi != q->alibi || p->alibi_count != q->alibi_count ||
       memcmp(&p->softcap, &q->softcap, sizeof p->softcap) ||
       p->has_rotary != q->has_rotary || p->rotary_base != q->rotary_base ||
       p->rotary_dims != q->rotary_dims ||
       p->rotary_interleaved != q->rotary_interleaved))
    fail(ctx, "the variants differ");
  if (with_id && p->alibi == ATTN_SESSION_ALIBI_SLOPES &&
      memcmp(p->alibi_slopes, q->alibi_slopes,
             (size_t)p->alibi_count * sizeof(float)))
    fail(ctx, "the slopes differ");
  for (int64_t l = 0; l < p->layers; l++) {
    if (a->length[l] != b->length[l]) fail(ctx, "a length differs");
    size_t n = layer_bytes(a, l);
    if (n && (memcmp(a->k[l], b->k[l], n) || memcmp(a->v[l], b->v[l], n)))
      fail(ctx, "rows differ");
  }
}

static void check_import(const attn_session_dump *x) {
  static attn_session_store *st;
  attn_diag d = {{0}};
  if (!st) {
    attn_session_limits lim = {(size_t)4 << 20, 4, 0, 4096, 1 << 16};
    if (attn_session_store_create(&lim, &st, &d)) fail("store", d.msg);
  }
  attn_status s = attn_session_import(st, 1, "f", x, 0, NULL, &d);
  if (s == ATTN_EINVAL || s == ATTN_ENOSPACE) return;
  if (s) fail("import", d.msg);
  attn_session *h;
  attn_session_dump y;
  if (attn_session_get(st, 1, "f", 0, &h, &d)) fail("get", d.msg);
  if (attn_session_export(h, &y, &d)) fail("export", d.msg);
  same_dump(x, &y, 0, "import then export");
  attn_session_dump_clear(&y);
  attn_session_put(h);
  if (attn_session_delete(st, 1, "f", &d)) fail("delete", d.msg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  unsigned char *buf;
  size_t len;
  if (data[0] & 1) {
    const uint8_t *nul = memchr(data + 1, 0, size - 1);
    size_t h = nul ? (size_t)(nul - data - 1) : size - 1;
    size_t rest = nul ? size - 1 - h - 1 : 0;
    len = 8 + h + rest;
    buf = malloc(len);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)h >> 8 * i);
    memcpy(buf + 8, data + 1, h);
    if (rest) memcpy(buf + 8 + h, nul + 1, rest);
  } else {
    len = size - 1;
    buf = malloc(len ? len : 1);
    memcpy(buf, data + 1, len);
  }
  attn_session_dump x, y;
  attn_diag d = {{0}};
  attn_status s = attn_session_file_decode(buf, len, &x, &d);
  if (s) {
    if (s != ATTN_EPARSE && s != ATTN_ENOMEM) fail("status", d.msg);
    if (strncmp(d.msg, "session file: ", 14)) fail("message", d.msg);
    attn_session_dump zero;
    memset(&zero, 0, sizeof zero);
    if (memcmp(&x, &zero, sizeof x)) fail("failure", "the dump is not zeroed");
    free(buf);
    return 0;
  }
  if (!attn_session_id_ok(x.id, strlen(x.id))) fail("id", x.id);
  for (int64_t l = 0; l < x.spec.layers; l++) {
    size_t n = layer_bytes(&x, l);
    if (x.length[l] < 0 || x.length[l] > x.spec.max_tokens)
      fail("length", "outside 0 .. max_tokens");
    if (!n) continue;
    const unsigned char *k = x.k[l], *v = x.v[l];
    if (k < buf || k + n > buf + len || v < buf || v + n > buf + len)
      fail("rows", "outside the input");
  }
  attn_buf a, b;
  attn_buf_init(&a, 0);
  attn_buf_init(&b, 0);
  if (attn_session_file_encode(&a, &x)) fail("encode", "refused");
  if (attn_session_file_decode(a.data, a.len, &y, &d)) fail("decode", d.msg);
  same_dump(&x, &y, 1, "encode then decode");
  if (attn_session_file_encode(&b, &y)) fail("encode", "refused again");
  if (a.len != b.len || memcmp(a.data, b.data, a.len))
    fail("encode", "not the same bytes twice");
  check_import(&x);
  attn_session_dump_clear(&y);
  attn_session_dump_clear(&x);
  attn_buf_free(&a);
  attn_buf_free(&b);
  free(buf);
  return 0;
}
