/* json.h - the request-body JSON parser: strict RFC 8259 bytes in, a tree
 * of genuine cJSON structs out, every node and string in one arena.
 *
 * src/json/json_parse.c holds the parser and its DESIGN (grammar, arena,
 * numbers, packed arrays, limits); src/json/json_avx512.c and json_avx2.c
 * read the numbers of packed arrays 64 bytes at a time.  The codecs
 * (src/codec/) decode request bodies with it; it knows nothing of tensors,
 * requests or HTTP.  Errors are attn_status values explained in an attn_diag
 * (which may be NULL) that names the byte at fault.
 *
 * Threads: every function is reentrant; calls share no state.  (Which path
 * reads packed arrays is fixed before main; src/json/internal.h has the test
 * hook that changes it.)
 */
#ifndef ATTN_JSON_H
#define ATTN_JSON_H

#include <stddef.h>

#include "attn/limits.h" /* ATTN_JSON_MAX_NODES */
#include "attn/status.h"

struct cJSON;

/* Parse p[0, n) (RFC 8259, strictly; a leading UTF-8 BOM is skipped) as one
 * JSON value followed only by whitespace, refusing nesting deeper than
 * max_depth and more than ATTN_JSON_MAX_NODES values as it goes.
 * trailing_hint (may be NULL) is appended to the message about bytes after the
 * value.  p borrowed, need not be NUL-terminated.  On success *out owns a new
 * tree of cJSON structs living in one arena: read it with cJSON's getters or
 * print it, free it with attn_json_free, never cJSON_Delete, and do not add,
 * detach or replace items.  On failure *out is NULL and nothing is left
 * allocated.  Errors: ATTN_EPARSE ("malformed JSON at byte N", N the first
 * byte that cannot continue a valid text, n when it ends early; trailing
 * bytes), ATTN_EINVAL (depth), ATTN_ETOOBIG (node count), ATTN_ENOMEM. */
attn_status attn_json_parse(const char *p, size_t n, size_t max_depth,
                            const char *trailing_hint, struct cJSON **out,
                            attn_diag *d);

/* attn_json_parse with the node limit max_nodes instead of
 * ATTN_JSON_MAX_NODES (tests use a small one). */
attn_status attn_json_parse_capped(const char *p, size_t n, size_t max_depth,
                                   size_t max_nodes, const char *trailing_hint,
                                   struct cJSON **out, attn_diag *d);

/* Packed arrays.  attn_json_parse_ex with pack_keys (a NULL-terminated
 * list of member names) stores an array of numbers found under one of those
 * keys, or nested (through arrays only) inside such a member's array, as one
 * node instead of one node per number: cJSON_IsArray is true, child is NULL,
 * type has ATTN_JSON_PACKED set, and the values (as doubles, exactly what a
 * number node would hold) are read with attn_json_packed.  cJSON's own
 * readers see such an array as empty, so only code that reads those keys
 * with attn_json_len / attn_json_packed may ask for packing.  An array
 * that mixes numbers with other values is never packed.  Everything else
 * (grammar, errors, limits: each number counts as a node) is as for
 * attn_json_parse_capped, which is this with pack_keys NULL. */
#define ATTN_JSON_PACKED (1 << 12)
attn_status attn_json_parse_ex(const char *p, size_t n, size_t max_depth,
                               size_t max_nodes, const char *const *pack_keys,
                               const char *trailing_hint, struct cJSON **out,
                               attn_diag *d);

/* Elements of an array, packed or not (0 for NULL). */
size_t attn_json_len(const struct cJSON *a);

/* The values of a packed array (count in *n), or NULL when a is not one. */
const double *attn_json_packed(const struct cJSON *a, size_t *n);

/* v[0, n) as floats into dst, up to the first value outside the FP32 range
 * (|v| > FLT_MAX, or NaN); returns how many were converted: n when all
 * fit.  What a packed array becomes in an FP32 tensor, without a branch per
 * value. */
size_t attn_json_f64_to_f32(const double *v, size_t n, float *dst);

/* Free a tree from attn_json_parse: root must be the *out it returned (not
 * a subtree).  NULL is allowed. */
void attn_json_free(struct cJSON *root);

/* "a string", "an array", ... for messages. */
const char *attn_json_kind(const struct cJSON *item);

#endif /* ATTN_JSON_H */
