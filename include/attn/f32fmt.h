/* f32fmt.h - shortest round-trip decimal text for float32, as a JSON number.
 *
 * attn_f32_shortest() prints the shortest decimal digit string that reads
 * back (strtof, round-to-nearest-even) to exactly the same float; among
 * equally short candidates it picks the one closest to the float's exact
 * value (ties: even last digit).  "Shortest" counts significant digits, not
 * characters: 1e8 prints as "100000000".
 *
 * Output format (always a valid RFC 8259 number, never NUL-terminated):
 *   - plain decimal when 1e-5 <= |v| < 1e9 (decimal exponent -5..8):
 *     "1", "-0.000123", "123.25", "100000000";
 *   - otherwise scientific, one digit before the point, 'e', an explicit
 *     sign and exactly two exponent digits (float exponents fit in two):
 *     "1.5e-07", "3.4028235e+38", "1e-45", "1e+09";
 *   - 0.0 -> "0", -0.0 -> "-0";
 *   - NaN and +-Inf -> "null" (JSON has no such numbers; the engine never
 *     produces them, so a null in a response marks a bug upstream).
 *
 * Pure functions: no locale, no allocation, safe from any thread; the only
 * state is which list implementation to use, fixed before main.  The
 * attn_f32_append functions at the end write the same texts into an
 * attn_buf, which grows as needed.
 */
#ifndef ATTN_F32FMT_H
#define ATTN_F32FMT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attn/buf.h"
#include "attn/status.h"

/* Longest text attn_f32_shortest() produces ("-0.0000123456789" is 16), and
 * the room its `out` buffer must have.  The function may store all 16 bytes
 * (it assembles the text in a register and writes it in one go); only the
 * first `returned length` bytes are meaningful. */
#define ATTN_F32_MAX_CHARS 16

/* Writes the shortest round-trip text of v to out (no NUL) and returns its
 * length, 1..ATTN_F32_MAX_CHARS.  out must have room for ATTN_F32_MAX_CHARS
 * bytes; bytes past the returned length are left unspecified.  Never fails. */
size_t attn_f32_shortest(float v, char *out);

/* Room attn_f32_shortest_list() needs for n numbers: ATTN_F32_MAX_CHARS
 * plus a separator each, and no more (number i starts at most 17 * i bytes
 * in, so even its 16-byte store and a ',' after it end within 17 * (i+1)). */
#define ATTN_F32_LIST_MAX_CHARS(n) ((n) * (ATTN_F32_MAX_CHARS + 1))

/* Writes the texts of v[0..n) as attn_f32_shortest() prints them (so
 * non-finite values as "null"), separated by ',' with none before the first
 * or after the last, to out (no NUL) and returns the length: the same bytes
 * as calling attn_f32_shortest() per element.  0 for n == 0.  out must have
 * room for ATTN_F32_LIST_MAX_CHARS(n) bytes; bytes past the returned length
 * are left unspecified.  Never fails.  Uses AVX-512 or AVX2 where the CPU
 * has it (chosen once at start-up), several times faster than the
 * per-element loop. */
size_t attn_f32_shortest_list(const float *v, size_t n, char *out);

/* Room attn_f32_shortest_rows() needs: each row's list plus '[', ']' and
 * a separator. */
#define ATTN_F32_ROWS_MAX_CHARS(rows, cols) \
  ((rows) * (ATTN_F32_LIST_MAX_CHARS(cols) + 3))

/* Writes rows x cols floats, row r at v + r * ld, as JSON arrays joined by
 * ',': "[a,b],[c,d]" -- the same bytes as "[" attn_f32_shortest_list(row)
 * "]" per row ("[]" for cols == 0), without the per-call set-up of that
 * many lists: a response's nested rows are often a single AVX-512 block
 * long.  Returns the length; 0 for rows == 0.  out must have room for
 * ATTN_F32_ROWS_MAX_CHARS(rows, cols) bytes; bytes past the returned length
 * are left unspecified.  Never fails. */
size_t attn_f32_shortest_rows(const float *v, size_t rows, size_t cols,
                              size_t ld, char *out);

/* ---- Into an attn_buf (src/fmt/f32fmt_buf.c) ---------------------------- */

/* Append v as a JSON number (shortest round-trip text) or null when not
 * finite. */
attn_status attn_f32_append(attn_buf *b, float v);
/* n floats v[0], v[stride], ... as comma-separated JSON numbers (preceded by
 * a comma when lead_comma), reserving room per chunk rather than per number.
 * On failure the buffer may hold a partial list: callers restore its length. */
attn_status attn_f32_append_list(attn_buf *b, const float *v, size_t n,
                                 int64_t stride, bool lead_comma);
/* rows x cols floats (row r at v + r * ld, contiguous within a row) as
 * "[..],[..]": the same bytes as "[" attn_f32_append_list "]" per row joined
 * by ',', in one call for many short rows.  Failure as for
 * attn_f32_append_list. */
attn_status attn_f32_append_rows(attn_buf *b, const float *v, size_t rows,
                                 size_t cols, size_t ld);

#endif /* ATTN_F32FMT_H */
