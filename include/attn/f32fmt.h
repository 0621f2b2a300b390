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
 * Pure function: no state, no locale, no allocation, safe from any thread.
 */
#ifndef ATTN_F32FMT_H
#define ATTN_F32FMT_H

#include <stddef.h>

/* Longest text attn_f32_shortest() produces ("-0.0000123456789" is 16), and
 * the room its `out` buffer must have.  The function may store all 16 bytes
 * (it assembles the text in a register and writes it in one go); only the
 * first `returned length` bytes are meaningful. */
#define ATTN_F32_MAX_CHARS 16

/* Writes the shortest round-trip text of v to out (no NUL) and returns its
 * length, 1..ATTN_F32_MAX_CHARS.  out must have room for ATTN_F32_MAX_CHARS
 * bytes; bytes past the returned length are left unspecified.  Never fails. */
size_t attn_f32_shortest(float v, char *out);

#endif /* ATTN_F32FMT_H */
