/* cors.c - which browser origins may call attnd (cors_allow_origins).
 *
 * DESIGN
 * CORS is off unless cors_allow_origins names origins (or "*").  The list
 * is checked once by the config (each entry scheme://host[:port], or "*"
 * alone), so here an origin is compared entry by entry: scheme and host
 * case-insensitively, as browsers send them lower-case anyway.  routes.c
 * answers preflights with it; http.c adds Access-Control-Allow-Origin and
 * Access-Control-Expose-Headers to every answer to an allowed origin.
 * Pure: no state, any thread.
 */
#include <string.h>
#include <strings.h>

#include "internal.h"
#include "cors.h"

int attn__cors_allowed(const char *list, const char *origin) {
  if (!origin || !*origin || !list) return 0;
  size_t olen = strlen(origin);
  for (const char *p = list; *p;) {
    p += strspn(p, " \t,");
    size_t n = strcspn(p, " \t,");
    if (!n) break;
    if ((n == 1 && *p == '*') || (n == olen && !strncasecmp(p, origin, n)))
      return 1;
    p += n;
  }
  return 0;
}
