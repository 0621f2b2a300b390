/* tensor.c - datatype table, element counts and conversions for attn_tensor.
 * Stateless and thread-safe. */
#include "attn/tensor.h"

#include <stdlib.h>
#include <string.h>

static const struct {
  const char *name;
  size_t size;
} dtypes[] = {[ATTN_DT_INVALID] = {NULL, 0},
#define ATTN__DT_ROW(name, text, size) [ATTN_DT_##name] = {text, size},
              ATTN_DTYPE_MAP(ATTN__DT_ROW)
#undef ATTN__DT_ROW
};

#define NDTYPES (sizeof dtypes / sizeof dtypes[0])

const char *attn_dtype_name(attn_dtype t) {
  return (unsigned)t < NDTYPES ? dtypes[t].name : NULL;
}

size_t attn_dtype_size(attn_dtype t) {
  return (unsigned)t < NDTYPES ? dtypes[t].size : 0;
}

attn_dtype attn_dtype_parse(const char *s) {
  if (!s) return ATTN_DT_INVALID;
  for (size_t i = 1; i < NDTYPES; i++)
    if (strcmp(s, dtypes[i].name) == 0) return (attn_dtype)i;
  return ATTN_DT_INVALID;
}

bool attn_shape_numel(int rank, const int64_t *shape, size_t *n) {
  size_t acc = 1;
  if (rank < 0 || rank > ATTN_MAX_RANK) return false;
  for (int i = 0; i < rank; i++) {
    if (shape[i] < 0) return false;
    if (!attn_size_mul(acc, (size_t)shape[i], &acc)) return false;
  }
  *n = acc;
  return true;
}

const char *attn_shape_format(char *buf, size_t cap, int rank,
                              const int64_t *shape) {
  char t[24];
  size_t n = 0;
  if (cap == 0) return buf;
#define PUT(c)                       \
  do {                               \
    if (n + 1 < cap) buf[n++] = (c); \
  } while (0)
  PUT('[');
  for (int i = 0; i < rank; i++) {
    int64_t v = shape[i];
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    size_t k = sizeof t;
    do {
      t[--k] = (char)('0' + u % 10);
      u /= 10;
    } while (u);
    if (v < 0) t[--k] = '-';
    if (i) PUT(',');
    for (; k < sizeof t; k++) PUT(t[k]);
  }
  PUT(']');
#undef PUT
  buf[n] = '\0';
  return buf;
}

/* ---- BYTES --------------------------------------------------------------
 * The block a BYTES tensor's data points to: this header, the offsets
 * off[0, numel], then the char area of cap bytes.  Element k is the area's
 * bytes [off[k], off[k + 1] - 1) and a NUL; off[put] is where the next
 * element goes. */
typedef struct bytes_block {
  size_t numel; /* elements the shape has */
  size_t cap;   /* bytes of the char area: the elements and their NULs */
  size_t put;   /* elements written so far */
  size_t off[]; /* numel + 1 */
} bytes_block;

static char *bytes_chars(bytes_block *b) {
  return (char *)&b->off[b->numel + 1];
}

attn_status attn_tensor_bytes_alloc(attn_tensor *t, int rank,
                                    const int64_t *shape, size_t chars) {
  size_t numel, offs, cap, bytes;
  memset(t, 0, sizeof *t);
  if (!attn_shape_numel(rank, shape, &numel)) return ATTN_EINVAL;
  if (!attn_size_add(numel, 1, &offs) ||
      !attn_size_mul(offs, sizeof(size_t), &offs) ||
      !attn_size_add(chars, numel, &cap) ||
      !attn_size_add(sizeof(bytes_block), offs, &bytes) ||
      !attn_size_add(bytes, cap, &bytes))
    return ATTN_ETOOBIG;
  bytes_block *b = malloc(bytes);
  if (!b) return ATTN_ENOMEM;
  b->numel = numel;
  b->cap = cap;
  b->put = 0;
  b->off[0] = 0;
  t->dtype = ATTN_DT_BYTES;
  t->rank = rank;
  if (rank) memcpy(t->shape, shape, sizeof(int64_t) * (size_t)rank);
  t->data = b;
  t->owns = true;
  return ATTN_OK;
}

attn_status attn_tensor_bytes_put(attn_tensor *t, int64_t i, const void *s,
                                  size_t n) {
  if (!t || t->dtype != ATTN_DT_BYTES || !t->data) return ATTN_EINVAL;
  bytes_block *b = t->data;
  size_t at = b->off[b->put];
  if (i < 0 || (uint64_t)i != b->put || b->put >= b->numel || b->cap - at < 1 ||
      n > b->cap - at - 1)
    return ATTN_EINVAL;
  char *c = bytes_chars(b) + at;
  if (n) memcpy(c, s, n);
  c[n] = '\0';
  b->off[++b->put] = at + n + 1;
  return ATTN_OK;
}

attn_status attn_tensor_bytes_at(const attn_tensor *t, int64_t i,
                                 const char **s, size_t *n) {
  if (!t || t->dtype != ATTN_DT_BYTES || !t->data) return ATTN_EINVAL;
  bytes_block *b = t->data;
  if (i < 0 || (uint64_t)i >= b->put) return ATTN_EINVAL;
  *s = bytes_chars(b) + b->off[i];
  *n = b->off[i + 1] - b->off[i] - 1;
  return ATTN_OK;
}

void attn_tensor_free(attn_tensor *t) {
  if (!t) return;
  if (t->owns) free(t->data);
  memset(t, 0, sizeof *t);
}

float attn_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ffu, bits;
  if (exp == 0x1f) { /* inf / nan */
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) { /* normal */
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) { /* zero */
    bits = sign;
  } else { /* subnormal: renormalise */
    int e = -1;
    do {
      e++;
      man <<= 1;
    } while (!(man & 0x400u));
    bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

float attn_bf16_to_f32(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

attn_status attn_tensor_to_f32(const attn_tensor *in, attn_tensor *out) {
  size_t n, bytes;
  memset(out, 0, sizeof *out);
  if (!in || !attn_shape_numel(in->rank, in->shape, &n)) return ATTN_EINVAL;
  if (!attn_size_mul(n, sizeof(float), &bytes)) return ATTN_ETOOBIG;
  float *dst = malloc(bytes ? bytes : 1);
  if (!dst) return ATTN_ENOMEM;
  const unsigned char *src = in->data;
  for (size_t i = 0; i < n; i++) {
    switch (in->dtype) {
      case ATTN_DT_FP32: {
        float v;
        memcpy(&v, src + 4 * i, 4);
        dst[i] = v;
      } break;
      case ATTN_DT_FP64: {
        double v;
        memcpy(&v, src + 8 * i, 8);
        dst[i] = (float)v;
      } break;
      case ATTN_DT_FP16: {
        uint16_t v;
        memcpy(&v, src + 2 * i, 2);
        dst[i] = attn_f16_to_f32(v);
      } break;
      case ATTN_DT_BF16: {
        uint16_t v;
        memcpy(&v, src + 2 * i, 2);
        dst[i] = attn_bf16_to_f32(v);
      } break;
      case ATTN_DT_BOOL:
        dst[i] = src[i] ? 1.0f : 0.0f;
        break;
      case ATTN_DT_INT32: {
        int32_t v;
        memcpy(&v, src + 4 * i, 4);
        dst[i] = (float)v;
      } break;
      case ATTN_DT_INT64: {
        int64_t v;
        memcpy(&v, src + 8 * i, 8);
        dst[i] = (float)v;
      } break;
      default:
        free(dst);
        return ATTN_EINVAL;
    }
  }
  out->dtype = ATTN_DT_FP32;
  out->rank = in->rank;
  memcpy(out->shape, in->shape, sizeof out->shape);
  out->data = dst;
  out->owns = true;
  return ATTN_OK;
}

uint16_t attn_f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN: quiet, sign kept */
    return (uint16_t)((x >> 16) | 0x0040u);
  x += 0x7fffu + ((x >> 16) & 1u); /* ties to even; overflow gives inf */
  return (uint16_t)(x >> 16);
}

/* Below 2^-14 in magnitude (ax < 0x38800000): a subnormal half, m * 2^-24
 * rounded to nearest even (2^-25 and below round to 0). */
static uint16_t f16_subnormal(uint32_t ax) {
  if (ax < 0x33000000u) return 0; /* < 2^-25; exactly 2^-25 ties to 0 */
  uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u;
  uint32_t shift = 126u - e; /* 14..24 */
  uint32_t h = m >> shift, rem = m & ((1u << shift) - 1u),
           half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (h & 1u))) h++; /* 1024 is 2^-14 */
  return (uint16_t)h;
}

uint16_t attn_f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) /* NaN: quiet, the top of the payload kept */
    return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 */
  if (ax < 0x38800000u) return (uint16_t)(sign | f16_subnormal(ax));
  uint32_t r = ax - 0x38000000u; /* exponent rebiased from 127 to 15 */
  uint32_t h = r >> 13, rem = r & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
  return (uint16_t)(sign | h);
}
