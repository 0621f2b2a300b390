/* json_avx512.c - the numbers of a packed JSON array, 64 bytes at a time on
 * AVX-512 (attn__json_windows_avx512, see internal.h).
 *
 * DESIGN
 *
 * Purpose: a small inference request is a few thousand numbers such as
 * -0.482913, and reading them one by one (json_parse.c: find the delimiter,
 * classify the bytes, two SWAR digit merges, a division) costs ~85
 * instructions each.  Here the structure of a whole 64-byte window is
 * worked out with 64-bit masks, every number's digits are pulled into a
 * 16-byte lane by one byte permute, and eight numbers are converted and
 * divided at once.  json_parse.c picks this path at start-up when the CPU
 * has AVX-512 F/BW/DQ/VL/VBMI/VBMI2; its SSE2 window and its one-number
 * parser stay, the latter as the reference every path is tested against.
 *
 * Algorithm, for the window W = p[0..63] (bit i of a mask is byte i):
 *   1. Classes: DIG, DOT, MIN ('-'), COM (','), CLO (']'), WS (space, tab,
 *      LF, CR), ZERO ('0').  Delimiters DEL = COM | CLO | WS; token bytes
 *      T = ~DEL.  Only what lies before the first ']' (at c) counts.
 *      Token starts S = T & ~(T << 1), ends E = ~T & (T << 1) (the
 *      delimiter just after a token).  p[0] is a start by contract.
 *   2. Flags F: every byte that makes its token or its gap something this
 *      path does not take:
 *        T & ~(DIG | DOT | MIN)            any other byte ('e', '"', ...)
 *        MIN & ~S, (MIN << 1) & ~DIG       '-' inside, or not before a digit
 *        DOT without a digit on each side  ".5", "5.", "-."
 *        a '0' that starts the integer part and is followed by a digit
 *        DOT & ~((T + DOT) ^ T)            the second '.' of a token: adding
 *          a token's first dot bit to T carries up to the token's end and
 *          clears every bit on the way, so a later dot bit is not flipped
 *        (WS + (E & WS)) & S               a gap of whitespace only: a gap
 *          that starts with whitespace carries through it and lands on the
 *          next token's start unless a ',' stops it first.
 *        a token of 16 bytes or more (flagged 15 bytes in): it may hold
 *          more than 15 digits, whose value is not an exact double.
 *      Bits travel only upward, so a flag lies inside the token or gap at
 *      fault or at the start of the token after that gap ("-]" puts it on
 *      the ']' itself, which therefore counts; later bytes do not).
 *   3. Numbers taken: token k is taken when the next start (or the ']' at
 *      c, which then closes the array) lies below the first flag, so its
 *      bytes and its whole gap are clean.  The last token of a window
 *      (maybe cut by the window's end) has no next start and waits for the
 *      next window.  Then: at most `room`.  The next start is unflagged,
 *      so it is '-' or a digit (any other byte there, '.' included, is a
 *      flag): where the window stops, a number starts, as the caller
 *      needs.  Finally the commas before the next start (or before ']')
 *      must number exactly one per gap (none in the closing one): with
 *      "every gap has one" from step 2 that is "exactly one each";
 *      otherwise the window is left to the caller, which then meets the
 *      error at its byte.  The next window starts where this one's taken
 *      numbers end, so that position is the loop's critical path: in the
 *      common window (no flag, no ']') it is the last start, found from S
 *      alone (a predicted branch skips the rest of this step).
 *   4. Per-number bytes (token k in byte k): starts, ends and "begins with
 *      '-'" by compressing an index vector with S, E and MIN.  T + DOT sets
 *      the end bit of exactly the tokens with a dot (the carry of step 2),
 *      so DOT | (E & ~(T + DOT)) holds one bit per taken token: its dot,
 *      or its end when it has none.  Compressed, that position differs
 *      from the end exactly for the tokens with a dot, and end - dot - 1
 *      is their fraction digits nf (one compress instead of two, an
 *      expand and a pext: -7% in the kernel harness).  nd = all digits
 *      (at most 15: tokens are under 16 bytes).
 *   5. Digits: lane byte j of token k (4 tokens per register) is
 *      W[a + j - 16 + nd], one further past the '.' for j >= 16 - nf, and
 *      '0' for j < 16 - nd (zero-masking), a = first digit: one vpermb of W.
 *      Then 10a+b (vpmaddubsw), 100ab+cd (vpmaddwd), pack, 10^4 (vpmaddwd):
 *      two 8-digit halves, hi * 10^8 + lo (vpmuludq) = m < 10^15.
 *      The common window (at most 8 numbers, none over 8 digits, such as
 *      -0.482913) takes 8-byte lanes instead (16 - x above becomes 8 - x):
 *      all its numbers in one register, 10a+b, 100ab+cd, then
 *      hi * 10^4 + lo (vpmuludq) lands each m < 10^8 in its own qword, in
 *      order, with no pack or permute.  Measured (min of 15 x 5,000 calls,
 *      2,048 such numbers): 6.39 -> 5.40 us.
 *   6. Value: m and 10^nf are exact doubles, so one IEEE division rounds
 *      m / 10^nf correctly (Clinger's fast path, as json_parse.c's
 *      number_known); the sign is xored in (-0 stays -0).  8 at a time.
 * The rules of step 2 and 3 accept exactly the numbers and gaps RFC 8259
 * allows there, restricted to the common form; anything else is left to
 * json_parse.c, whose errors and values then decide.
 *
 * Threads: pure function over constant tables; callable from any thread.
 * Checked by tests/test_codec.c: every packed-array test runs with each
 * path ("avx512", "sse2", "scalar") against the plain parse.
 */
#include "internal.h"

#if ATTN__JSON_HAVE_AVX512

#include <immintrin.h>
#include <stdint.h>

#define TARGET                                                \
  __attribute__((                                             \
      target("avx512f,avx512bw,avx512dq,avx512vl,avx512vbmi," \
             "avx512vbmi2,popcnt,bmi,bmi2")))

#define I4(b) b, b + 1, b + 2, b + 3
#define I16(b) I4(b), I4(b + 4), I4(b + 8), I4(b + 12)
#define R16(v) v, v, v, v, v, v, v, v, v, v, v, v, v, v, v, v

static const uint8_t IOTA[64]
    __attribute__((aligned(64))) = {I16(0), I16(16), I16(32), I16(48)};
/* byte j -> j mod 16, and j -> the lane's token (j / 16) */
static const uint8_t J16[64]
    __attribute__((aligned(64))) = {I16(0), I16(0), I16(0), I16(0)};
static const uint8_t LANE[64]
    __attribute__((aligned(64))) = {R16(0), R16(1), R16(2), R16(3)};
/* the same for 8-byte lanes: j -> j mod 8, j -> j / 8 */
#define I8(b) I4(b), I4(b + 4)
#define R8(v) v, v, v, v, v, v, v, v
static const uint8_t J8[64] __attribute__((aligned(64))) = {
    I8(0), I8(0), I8(0), I8(0), I8(0), I8(0), I8(0), I8(0)};
static const uint8_t LANE8[64] __attribute__((aligned(64))) = {
    R8(0), R8(1), R8(2), R8(3), R8(4), R8(5), R8(6), R8(7)};
static const double POW10[16] __attribute__((aligned(64))) = {
    1e0, 1e1, 1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
    1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15};

/* Step 1's constants: 64 copies of a byte, compared from memory.
 * vpcmpeqb has no byte broadcast, and GCC 12 rebuilt each
 * _mm512_set1_epi8 in the loop (mov, vpbroadcastb); an address it cannot
 * see through (kv) makes the load part of the compare. */
#define B64(x) \
  { R16(x), R16(x), R16(x), R16(x) }
static const uint8_t K_DOT[64] __attribute__((aligned(64))) = B64('.');
static const uint8_t K_MIN[64] __attribute__((aligned(64))) = B64('-');
static const uint8_t K_COM[64] __attribute__((aligned(64))) = B64(',');
static const uint8_t K_CLO[64] __attribute__((aligned(64))) = B64(']');
static const uint8_t K_ZERO[64] __attribute__((aligned(64))) = B64('0');
static const uint8_t K_TEN[64] __attribute__((aligned(64))) = B64(10);

static inline TARGET __m512i kv(const uint8_t *p) {
  __asm__("" : "+r"(p));
  return _mm512_load_si512((const void *)p);
}

/* A mask moved to a general register once, where steps 2 and 3 work on
 * it: left alone, GCC kept masks in k registers and moved the same one
 * out up to four times a window.  Both changes: -6% (kernel harness). */
static inline TARGET uint64_t gpr(__mmask64 m) {
  uint64_t x = _cvtmask64_u64(m);
  __asm__("" : "+r"(x));
  return x;
}

/* Byte mask of p[i] == the byte of k. */
static inline TARGET uint64_t eq(__m512i w, const uint8_t *k) {
  return gpr(_mm512_cmpeq_epi8_mask(w, kv(k)));
}

/* The 4 values m of tokens k0..k0+3 in qwords 0, 2, 4, 6 (step 5). */
static inline TARGET __m512i digits4(__m512i w, __m512i bv, __m512i fv,
                                     __m512i zv, unsigned k0) {
  const __m512i j = _mm512_load_si512(J16), one = _mm512_set1_epi8(1);
  __m512i li =
      _mm512_add_epi8(_mm512_load_si512(LANE), _mm512_set1_epi8((char)k0));
  __m512i b = _mm512_permutexvar_epi8(li, bv);
  __mmask64 frac = _mm512_cmpge_epu8_mask(j, _mm512_permutexvar_epi8(li, fv));
  __mmask64 live = _mm512_cmpge_epu8_mask(j, _mm512_permutexvar_epi8(li, zv));
  __m512i idx = _mm512_add_epi8(b, j);
  idx = _mm512_mask_add_epi8(idx, frac, idx, one);
  __m512i d = _mm512_maskz_sub_epi8(live, _mm512_permutexvar_epi8(idx, w),
                                    _mm512_set1_epi8('0'));
  __m512i t = _mm512_maddubs_epi16(d, _mm512_set1_epi16(0x010A)); /* 10a+b */
  t = _mm512_madd_epi16(t, _mm512_set1_epi32(0x00010064));        /* 100x+y */
  t = _mm512_packus_epi32(t, t);
  t = _mm512_madd_epi16(t, _mm512_set1_epi32(0x00012710)); /* 10^4 x + y */
  return _mm512_add_epi64(_mm512_mul_epu32(t, _mm512_set1_epi64(100000000)),
                          _mm512_srli_epi64(t, 32));
}

/* The values m of tokens 0..7, each of at most 8 digits, in qwords 0..7:
 * step 5 with 8-byte lanes (bv8, fv8, zv8 as bv, fv, zv for 8). */
static inline TARGET __m512i digits8(__m512i w, __m512i bv8, __m512i fv8,
                                     __m512i zv8) {
  const __m512i j = _mm512_load_si512(J8), li = _mm512_load_si512(LANE8);
  __m512i b = _mm512_permutexvar_epi8(li, bv8);
  __mmask64 frac = _mm512_cmpge_epu8_mask(j, _mm512_permutexvar_epi8(li, fv8));
  __mmask64 live = _mm512_cmpge_epu8_mask(j, _mm512_permutexvar_epi8(li, zv8));
  __m512i idx = _mm512_add_epi8(b, j);
  idx = _mm512_mask_add_epi8(idx, frac, idx, _mm512_set1_epi8(1));
  __m512i d = _mm512_maskz_sub_epi8(live, _mm512_permutexvar_epi8(idx, w),
                                    _mm512_set1_epi8('0'));
  __m512i t = _mm512_maddubs_epi16(d, _mm512_set1_epi16(0x010A)); /* 10a+b */
  t = _mm512_madd_epi16(t, _mm512_set1_epi32(0x00010064));        /* 100x+y */
  /* dword 0: the first four digits, dword 1: the last four */
  return _mm512_add_epi64(_mm512_mul_epu32(t, _mm512_set1_epi64(10000)),
                          _mm512_srli_epi64(t, 32));
}

/* One window at p (64 bytes readable): the numbers it takes into out (at
 * most room), *adv and *closed as internal.h says; 0 when it takes none.
 * Steps 1 to 6 of the DESIGN, in order, marked by number.
 * One function of ~110 lines on purpose: it is the body of the windows
 * loop below (always inlined there), on the chain that decides where the
 * next window starts, and each step reads what the steps before it left
 * in registers (the window, the class masks, S, E, F, the compressed
 * starts, ends and digit counts).  The parts that stand alone are
 * functions already (step 2: attn__json_window_marks; step 5: digits4,
 * digits8); cutting the rest would hand a dozen masks and vectors between
 * helpers, where GCC's register allocation is already tight (see kv, gpr
 * and the loop's comment), for no gain in reading. */
static inline TARGET __attribute__((always_inline)) size_t window(
    const char *p, size_t room, double *out, size_t *adv, int *closed) {
  const __m512i w = _mm512_loadu_si512((const void *)p);
  const __m512i iota = _mm512_load_si512(IOTA), one = _mm512_set1_epi8(1);

  /* 1. classes */
  uint64_t dig =
      gpr(_mm512_cmplt_epu8_mask(_mm512_sub_epi8(w, kv(K_ZERO)), kv(K_TEN)));
  uint64_t dot = eq(w, K_DOT), min = eq(w, K_MIN), com = eq(w, K_COM),
           clo = eq(w, K_CLO), zero = eq(w, K_ZERO);
  /* whitespace: bytes equal to their low nibble's entry in a table that
   * holds ' ', '\t', '\n', '\r' at 0, 9, 10, 13 and 0 elsewhere (a byte
   * >= 0x80 reads 0): two instructions instead of four compares */
  const __m512i wst = _mm512_broadcast_i32x4(
      _mm_setr_epi8(' ', 0, 0, 0, 0, 0, 0, 0, 0, '\t', '\n', 0, 0, '\r', 0, 0));
  uint64_t ws = gpr(_mm512_cmpeq_epi8_mask(_mm512_shuffle_epi8(wst, w), w));
  uint64_t tok = ~(com | clo | ws);
  /* 2. flags (internal.h) */
  attn__json_marks mk =
      attn__json_window_marks(tok, dig, dot, min, clo, ws, zero);
  uint64_t s = mk.s, e = mk.e, f = mk.f;
  unsigned c = mk.c;

  /* 3. how many.  The common window (no ']', no flag) has a short
   * dependency chain to the next window's start, its last token. */
  unsigned k, end;
  int shut = 0;
  unsigned last = 63 - (unsigned)__builtin_clzll(s);
  k = (unsigned)__builtin_popcountll(s) - 1;
  if (!(clo | f) && k - 1 < room) {
    end = last;
  } else {
    unsigned ff = f ? (unsigned)__builtin_ctzll(f) : 64;
    uint64_t below_f = ff == 64 ? ~0ull : (1ull << ff) - 1;
    uint64_t sx = s | (clo ? 1ull << c : 0);
    k = (unsigned)__builtin_popcountll(sx & below_f);
    if (k < 2) return 0;
    k--;
    shut = clo && c < ff; /* the ']' is the last token's successor */
    if (k > room) {
      k = (unsigned)room;
      shut = 0;
    }
    end = c;
    if (!shut) end = (unsigned)__builtin_ctzll(_pdep_u64(1ull << k, s));
  }
  if ((unsigned)__builtin_popcountll(com & ((1ull << end) - 1)) !=
      (shut ? k - 1 : k))
    return 0;

  /* 4. per-number bytes */
  __m512i spos = _mm512_maskz_compress_epi8(_cvtu64_mask64(s), iota);
  __m512i epos = _mm512_maskz_compress_epi8(_cvtu64_mask64(e), iota);
  __m512i neg = _mm512_maskz_compress_epi8(
      _cvtu64_mask64(s), _mm512_maskz_mov_epi8(_cvtu64_mask64(min), one));
  /* X = T + DOT carries each dotted token's dot up to its end (step 2),
   * so E & ~X are the ends of the tokens without a dot: DOT | (E & ~X)
   * has one bit per taken token, its dot or else its end.  Where that
   * position differs from the end the token has a dot, and nf digits
   * after it. */
  uint64_t x = tok + dot;
  __m512i mpos =
      _mm512_maskz_compress_epi8(_cvtu64_mask64(dot | (e & ~x)), iota);
  __mmask64 hasdot = _mm512_cmpneq_epi8_mask(mpos, epos);
  __m512i nf = _mm512_maskz_sub_epi8(hasdot, _mm512_sub_epi8(epos, mpos), one);
  __m512i nd = _mm512_sub_epi8(_mm512_sub_epi8(epos, spos), neg);
  nd = _mm512_mask_sub_epi8(nd, hasdot, nd, one);

  /* 5, 6. digits and values */
  __m512i bv = _mm512_sub_epi8(_mm512_add_epi8(_mm512_add_epi8(spos, neg), nd),
                               _mm512_set1_epi8(16));
  __m512i fv = _mm512_sub_epi8(_mm512_set1_epi8(16), nf);
  __m512i zv = _mm512_sub_epi8(_mm512_set1_epi8(16), nd);
  const __m512d p0 = _mm512_load_pd(POW10), p1 = _mm512_load_pd(POW10 + 8);
  const __m512i even = _mm512_set_epi64(14, 12, 10, 8, 6, 4, 2, 0);
  if (k <= 8 &&
      !(_cvtmask64_u64(_mm512_cmpgt_epu8_mask(nd, _mm512_set1_epi8(8))) &
        ((1ull << k) - 1))) {
    /* the common window: at most 8 numbers of at most 8 digits, such as
     * -0.482913, in one register of 8-byte lanes */
    __m512i m = digits8(w, _mm512_add_epi8(bv, _mm512_set1_epi8(8)),
                        _mm512_sub_epi8(_mm512_set1_epi8(8), nf),
                        _mm512_sub_epi8(_mm512_set1_epi8(8), nd));
    __m512i nf8 = _mm512_cvtepu8_epi64(_mm512_castsi512_si128(nf));
    __m512i ng8 = _mm512_cvtepu8_epi64(_mm512_castsi512_si128(neg));
    __m512d v =
        _mm512_div_pd(_mm512_cvtepu64_pd(m), _mm512_permutexvar_pd(nf8, p0));
    v = _mm512_castsi512_pd(
        _mm512_xor_si512(_mm512_castpd_si512(v), _mm512_slli_epi64(ng8, 63)));
    _mm512_mask_storeu_pd(out, (__mmask8)((1u << k) - 1), v);
    *adv = end;
    *closed = shut;
    return k;
  }
  for (unsigned k0 = 0; k0 < k; k0 += 8) {
    __m512i m = _mm512_permutex2var_epi64(digits4(w, bv, fv, zv, k0), even,
                                          digits4(w, bv, fv, zv, k0 + 4));
    __m512i sel = _mm512_add_epi8(iota, _mm512_set1_epi8((char)k0));
    __m512i nf8 = _mm512_cvtepu8_epi64(
        _mm512_castsi512_si128(_mm512_permutexvar_epi8(sel, nf)));
    __m512i ng8 = _mm512_cvtepu8_epi64(
        _mm512_castsi512_si128(_mm512_permutexvar_epi8(sel, neg)));
    __m512d v = _mm512_div_pd(_mm512_cvtepu64_pd(m),
                              _mm512_permutex2var_pd(p0, nf8, p1));
    v = _mm512_castsi512_pd(
        _mm512_xor_si512(_mm512_castpd_si512(v), _mm512_slli_epi64(ng8, 63)));
    unsigned left = k - k0 < 8 ? k - k0 : 8;
    _mm512_mask_storeu_pd(out + k0, (__mmask8)((1u << left) - 1), v);
  }
  *adv = end;
  *closed = shut;
  return k;
}

/* Windows one after another while each takes something.  The loop lives
 * here: called once per window from json_parse.c, each window's end went
 * through memory twice (*adv, then the parser's position) on the chain
 * that decides where the next window starts.  GCC 12 still keeps the
 * position in a stack slot here (one add to memory and one load a window:
 * the window's masks take the general registers; 31 stack references in
 * the loop), so once through memory is what is left. */
TARGET size_t attn__json_windows_avx512(const char *p, size_t len, size_t room,
                                        double *out, size_t *adv, int *closed) {
  size_t n = 0, at = 0;
  int shut = 0;
  while (len - at >= ATTN__JSON_WINDOW && n < room) {
    size_t a;
    size_t got = window(p + at, room - n, out + n, &a, &shut);
    if (!got) break;
    n += got;
    at += a;
    if (shut) break;
  }
  *adv = at;
  *closed = shut;
  return n;
}

#endif /* ATTN__JSON_HAVE_AVX512 */
