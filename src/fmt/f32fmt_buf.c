/* f32fmt_buf.c - floats as JSON numbers appended to an attn_buf: one
 * float, a list, or the rows of a matrix (include/attn/f32fmt.h).
 *
 * Design
 *  - Every float a codec prints goes through attn_f32_append,
 *    attn_f32_append_list or attn_f32_append_rows, which use the shortest
 *    round-trip text of f32fmt.c.  Non-finite values become null: JSON has
 *    no NaN or Infinity, and a response must stay parseable.
 *  - Room is reserved for a chunk of numbers at a time, not per number, and
 *    the text is written straight into it; contiguous floats go to
 *    attn_f32_shortest_list / attn_f32_shortest_rows (vectorised where the
 *    CPU allows).  buf.c keeps the data NUL-terminated, so each write puts
 *    the NUL back after the text.
 *
 * Threads: none; a buffer has one owner at a time.
 */
#include <math.h>
#include <string.h>

#include "attn/f32fmt.h"

attn_status attn_f32_append(attn_buf *b, float v) {
  if (!isfinite(v)) return attn_buf_append(b, "null", 4);
  attn_status s = attn_buf_reserve(b, ATTN_F32_MAX_CHARS + 1);
  if (s != ATTN_OK) return s;
  size_t n = attn_f32_shortest(v, b->data + b->len);
  b->len += n;
  b->data[b->len] = '\0'; /* buf.c keeps data NUL-terminated */
  return ATTN_OK;
}

attn_status attn_f32_append_list(attn_buf *b, const float *v, size_t n,
                                 int64_t stride, bool lead_comma) {
  /* Room for a chunk at a time: one reserve per 1024 numbers instead of one
   * per number; the buffer still grows geometrically.  A contiguous chunk
   * goes to attn_f32_shortest_list (same bytes, vectorised where the CPU
   * allows), which needs no more room than the loop below. */
  enum { CHUNK = 1024 };
  for (size_t i = 0; i < n;) {
    size_t m = n - i < CHUNK ? n - i : CHUNK;
    attn_status s = attn_buf_reserve(b, m * (ATTN_F32_MAX_CHARS + 1) + 1);
    if (s != ATTN_OK) return s;
    char *p = b->data + b->len;
    if (stride == 1) {
      if (i || lead_comma) *p++ = ',';
      p += attn_f32_shortest_list(v + i, m, p);
      i += m;
      b->len = (size_t)(p - b->data);
      b->data[b->len] = '\0'; /* buf.c keeps data NUL-terminated */
      continue;
    }
    for (size_t k = 0; k < m; k++, i++) {
      float x = v[(int64_t)i * stride];
      if (i || lead_comma) *p++ = ',';
      if (isfinite(x)) {
        p += attn_f32_shortest(x, p);
      } else {
        memcpy(p, "null", 4);
        p += 4;
      }
    }
    b->len = (size_t)(p - b->data);
    b->data[b->len] = '\0'; /* buf.c keeps data NUL-terminated */
  }
  return ATTN_OK;
}

attn_status attn_f32_append_rows(attn_buf *b, const float *v, size_t rows,
                                 size_t cols, size_t ld) {
  /* As many rows at a time as make about one list chunk (the room reserved
   * stays as small as attn_f32_append_list's); longer rows go one by one
   * through it. */
  enum { CHUNK = 1024 };
  for (size_t r = 0; r < rows;) {
    attn_status s;
    if (cols > CHUNK) {
      if ((s = attn_buf_append(b, r ? ",[" : "[", r ? 2 : 1)) != ATTN_OK ||
          (s = attn_f32_append_list(b, v + r * ld, cols, 1, false)) !=
              ATTN_OK ||
          (s = attn_buf_append(b, "]", 1)) != ATTN_OK)
        return s;
      r++;
      continue;
    }
    size_t m = cols ? CHUNK / cols : CHUNK;
    if (m > rows - r) m = rows - r;
    s = attn_buf_reserve(b, ATTN_F32_ROWS_MAX_CHARS(m, cols) + 2);
    if (s != ATTN_OK) return s;
    char *p = b->data + b->len;
    if (r) *p++ = ',';
    p += attn_f32_shortest_rows(v + r * ld, m, cols, ld, p);
    r += m;
    b->len = (size_t)(p - b->data);
    b->data[b->len] = '\0'; /* buf.c keeps data NUL-terminated */
  }
  return ATTN_OK;
}
