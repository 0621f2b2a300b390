/* status.c - text for the status table in include/attn/status.h and the
 * diagnostic helper.  Stateless and thread-safe. */
#include "attn/status.h"

#include <stdarg.h>
#include <stdio.h>

const char *attn_strerror(attn_status s) {
  switch (s) {
#define ATTN__STATUS_TEXT(name, code, text) \
  case ATTN_##name:                         \
    return text;
    ATTN_STATUS_MAP(ATTN__STATUS_TEXT)
#undef ATTN__STATUS_TEXT
  }
  return "unknown status";
}

const char *attn_status_name(attn_status s) {
  switch (s) {
#define ATTN__STATUS_NAME(name, code, text) \
  case ATTN_##name:                         \
    return #name;
    ATTN_STATUS_MAP(ATTN__STATUS_NAME)
#undef ATTN__STATUS_NAME
  }
  return "UNKNOWN";
}

attn_status attn_diag_set(attn_diag *d, attn_status s, const char *fmt, ...) {
  if (d) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->msg, sizeof d->msg, fmt, ap);
    va_end(ap);
  }
  return s;
}
