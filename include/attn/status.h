/* status.h - the one table of status codes used by every attnd module.
 *
 * Every fallible function returns an attn_status.  Codes are negative on
 * failure and ATTN_OK (0) on success.  The mapping to HTTP codes lives only in
 * src/server.  Where a failure needs a human explanation (which tensor, which
 * dimension) the function also fills an attn_diag supplied by the caller.
 */
#ifndef ATTN_STATUS_H
#define ATTN_STATUS_H

#include <stddef.h>

#define ATTN_STATUS_MAP(X)                                    \
  X(OK, 0, "ok")                                              \
  X(EINVAL, -1, "invalid argument")                           \
  X(ENOMEM, -2, "out of memory")                              \
  X(EBUSY, -3, "queue full")                                  \
  X(ESHAPE, -4, "tensor shape mismatch")                      \
  X(ENONFINITE, -5, "non-finite value (NaN or Inf) in input") \
  X(ETOOBIG, -6, "request exceeds a configured limit")        \
  X(ENOTFOUND, -7, "not found")                               \
  X(EPARSE, -8, "malformed input")                            \
  X(EUNSUPPORTED, -9, "unsupported")                          \
  X(ETIMEDOUT, -10, "timed out")                              \
  X(ESHUTDOWN, -11, "shutting down")                          \
  X(EIO, -12, "input/output error")                           \
  X(EINTERNAL, -13, "internal error")                         \
  X(ECONFLICT, -14, "conflicts with the current state")       \
  X(ENOSPACE, -15, "no space left")

typedef enum {
#define ATTN__STATUS_ENUM(name, code, text) ATTN_##name = code,
  ATTN_STATUS_MAP(ATTN__STATUS_ENUM)
#undef ATTN__STATUS_ENUM
} attn_status;

/* Static text for a status; never NULL ("unknown status" for foreign codes). */
const char *attn_strerror(attn_status s);

/* Short symbolic name such as "ESHAPE"; never NULL. */
const char *attn_status_name(attn_status s);

/* A human-readable explanation of the last failure, filled by functions that
 * take an `attn_diag *` (which may always be NULL).  Messages name the
 * offending tensor and dimension, e.g. "key: dim 2 (Dk) is 32, query has 64".
 */
#define ATTN_DIAG_MAX 256
typedef struct attn_diag {
  char msg[ATTN_DIAG_MAX];
} attn_diag;

/* printf-style; a no-op when d is NULL.  Returns s so that callers can write
 * `return attn_diag_set(d, ATTN_ESHAPE, "...")`. */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
attn_status
attn_diag_set(attn_diag *d, attn_status s, const char *fmt, ...);

#endif /* ATTN_STATUS_H */
