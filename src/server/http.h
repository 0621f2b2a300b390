/* http.h - what http.c exports for tests and routes: header numbers and request
 * targets. Private to src/server/ (docs/architecture.md). */
#ifndef ATTN_SERVER_HTTP_H
#define ATTN_SERVER_HTTP_H

#include "internal.h"

/* http.c: a header value of digits, with the optional whitespace (space,
 * tab) HTTP allows around a field value (RFC 9110 5.5): 1 and *out, 2 when
 * the number is past UINT64_MAX (*out = UINT64_MAX), 0 when the value is
 * not one (or v is NULL).  Any thread. */
int attn__header_number(const char *v, uint64_t *out);

/* http.c: the path of a request target: origin-form as it is, absolute-
 * form ("http://host/path", RFC 9112 3.2.2) by its path ("/" when it has
 * none).  Points into url.  Any thread. */
const char *attn__target_path(const char *url);
/* http.c: the offset of the first control byte (below 0x20, or DEL) in a
 * decoded path, -1 when there is none.  Any thread. */
long attn__path_control(const char *path);

#endif
