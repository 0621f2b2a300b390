/* internal.h - internals shared by json_parse.c, json_avx512.c and
 * json_avx2.c, and the test hook that picks how packed arrays of numbers
 * are read.  Not a public header: only src/json/, tests/ and bench/
 * include it. */
#ifndef ATTN_JSON_INTERNAL_H
#define ATTN_JSON_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* Bytes that must be readable from a window's start (json_avx512.c and
 * json_avx2.c load 64 at once; json_parse.c's SSE2 window reads up to 16
 * past its 64). */
#define ATTN__JSON_WINDOW 64

/* Steps 1 (what follows from the byte classes) and 2 of json_avx512.c's
 * DESIGN, shared by the AVX-512 and AVX2 windows: pure 64-bit mask
 * arithmetic on the classes of a 64-byte window (bit i is byte i).  tok:
 * token bytes; dig, dot, min, clo, zero: '0'..'9', '.', '-', ']', '0';
 * ws: JSON whitespace. */
typedef struct {
  uint64_t s; /* token starts before the first ']' */
  uint64_t e; /* the delimiter just after each token */
  uint64_t f; /* flags: bytes that make their token or gap not taken */
  unsigned c; /* the first ']', 64 if none */
} attn__json_marks;

static inline __attribute__((always_inline)) attn__json_marks
attn__json_window_marks(uint64_t tok, uint64_t dig, uint64_t dot, uint64_t min,
                        uint64_t clo, uint64_t ws, uint64_t zero) {
  attn__json_marks m;
  m.c = clo ? (unsigned)__builtin_ctzll(clo) : 64;
  uint64_t region = clo ? (1ull << m.c) - 1 : ~0ull;
  uint64_t s = tok & ~(tok << 1) & region, e = ~tok & (tok << 1);
  uint64_t f = tok & ~(dig | dot | min);
  f |= (min & ~s) | ((min << 1) & ~dig);
  f |= dot & ~((dig << 1) & (dig >> 1));
  f |= ((s & ~min) | ((s & min) << 1)) & zero & (dig >> 1);
  f |= dot & ~((tok + dot) ^ tok); /* the second dot of a token */
  f |= (ws + (e & ws)) & s;
  uint64_t r = tok & (tok >> 1); /* r: bit i when tok[i .. i + 15] */
  r &= r >> 2;
  r &= r >> 4;
  r &= r >> 8;
  f |= r << 15;               /* 16 bytes or more: maybe over 15 digits */
  f &= region | (clo & -clo); /* "-]" is flagged at the ']' */
  m.s = s;
  m.e = e;
  m.f = f;
  return m;
}

/* The AVX-512 and AVX2 windows exist on x86-64 with GCC-compatible
 * compilers (per-function target attributes); elsewhere only the SSE2 and
 * scalar paths of json_parse.c. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(ATTN_JSON_PORTABLE)
#define ATTN__JSON_HAVE_AVX512 1
#define ATTN__JSON_HAVE_AVX2 1
/* Numbers of a packed array, 64-byte windows one after another, on
 * AVX-512 F/BW/DQ/VL/VBMI/VBMI2 (the caller has checked the CPU).
 *
 * p       a number's first byte inside an array being packed.
 * len     bytes readable from p; windows are read while 64 remain.
 * room    at most this many numbers are taken (>= 1).
 * out     receives the values, out[0 .. return value).
 * adv     on return > 0: bytes taken; p + *adv is the first byte of the
 *         next number, or the array's ']' when *closed is 1.
 * Returns how many numbers were taken: those of the first numbers that
 * have the form -?(0|[1-9][0-9]*)(\.[0-9]+)? with at most 15 digits, each
 * followed by whitespace, one ',' and whitespace up to the next number (or
 * by whitespace and the closing ']'), up to the first window that takes
 * none of its numbers, the ']', room numbers, or fewer than 64 bytes left.
 * Each value is the correctly rounded double, bit-identical to strtod.  0
 * means "nothing here for the window" (a rarer form, a number longer than
 * the window, an error): the caller parses one number its own way and
 * calls again. */
size_t attn__json_windows_avx512(const char *p, size_t len, size_t room,
                                 double *out, size_t *adv, int *closed);
/* attn__json_windows_avx512's contract exactly, on AVX2, BMI1, BMI2 and
 * POPCNT (the caller has checked the CPU), with one addition: numbers past
 * the return value may be overwritten with scratch, inside out[0 .. room)
 * (out must have room for `room` numbers, as the caller's run always has).
 * It reads only p[0 .. len), like the AVX-512 one. */
size_t attn__json_windows_avx2(const char *p, size_t len, size_t room,
                               double *out, size_t *adv, int *closed);
#else
#define ATTN__JSON_HAVE_AVX512 0
#define ATTN__JSON_HAVE_AVX2 0
#endif

/* Test and benchmark hook: read packed arrays with the named path,
 * "avx512" (json_avx512.c), "avx2" (json_avx2.c), "sse2" (json_parse.c's
 * 64-byte window) or "scalar" (one number at a time, the reference).
 * Returns 0 (and changes nothing) when the name is unknown or the CPU lacks
 * it.  Call it while no other thread parses.  The default, set before main
 * by a constructor, is the fastest one the CPU supports. */
int attn__json_set_impl(const char *name);

/* Name of the path packed arrays are read with now. */
const char *attn__json_impl_name(void);

#endif /* ATTN_JSON_INTERNAL_H */
