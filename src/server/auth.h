/* auth.h - auth.c's interface: API keys.
 * Private to src/server/ (docs/architecture.md). */
#ifndef ATTN_SERVER_AUTH_H
#define ATTN_SERVER_AUTH_H

#include "internal.h"

/* auth.c: API keys (see its DESIGN).  A key set is immutable; an
 * attn__auth holds the one in force and swaps it on reload. */
typedef struct attn__keyset attn__keyset;
typedef struct attn__auth attn__auth;
/* Keys from text[0, len) (the lines of a keys file; text may be NULL) and
 * env_key (ATTND_API_KEY; NULL or "" for none).  where names the text in
 * messages ("api_keys_file '/etc/attnd/keys'").  ATTN_EINVAL for a line
 * that is not a key or no key at all, ATTN_ETOOBIG past ATTN_MAX_API_KEYS;
 * messages give the line, never a key.  Pure. */
attn_status attn__keys_parse(const char *text, size_t len, const char *where,
                             const char *env_key, attn__keyset **out,
                             attn_diag *d);
void attn__keys_free(attn__keyset *set);
size_t attn__keys_count(const attn__keyset *set);
/* Is tok[0, n) one of the keys?  Constant time in the keys' bytes. */
int attn__keys_match(const attn__keyset *set, const char *tok, size_t n);
/* *out holds the keys of api_keys_file path and env_key, or is NULL when
 * both are unset (or ""): no key, every route open.  Errors: the file
 * cannot be read, or see attn__keys_parse.  Main thread. */
attn_status attn__auth_create(const char *path, const char *env_key,
                              attn__auth **out, attn_diag *d);
/* attn__auth_create with other names in messages: file_key for the file
 * ("admin_api_keys_file"), env_name for the variable
 * ("ATTND_ADMIN_API_KEY"); both must outlive *out (literals). */
attn_status attn__auth_named(const char *file_key, const char *env_name,
                             const char *path, const char *env_key,
                             attn__auth **out, attn_diag *d);
/* Re-read the file: on success the new keys are in force and *count says
 * how many; on error the old ones stay.  Main thread, while serving. */
attn_status attn__auth_reload(attn__auth *a, size_t *count, attn_diag *d);
size_t attn__auth_count(attn__auth *a);
void attn__auth_destroy(attn__auth *a);
typedef enum {
  ATTN_AUTH_OK,      /* a key matched (or a is NULL: no keys) */
  ATTN_AUTH_MISSING, /* neither header was sent */
  ATTN_AUTH_SCHEME,  /* Authorization of another scheme than Bearer */
  ATTN_AUTH_WRONG    /* a key was sent and is not one of them */
} attn__auth_result;
/* The request's Authorization and X-Api-Key values (NULL when absent)
 * against the keys.  Any thread. */
attn__auth_result attn__auth_check(attn__auth *a, const char *authorization,
                                   const char *api_key);
/* Who owns what a request makes (a session): a 64-bit tag of the key it
 * sent that matched (the Bearer token's, else X-Api-Key's), never 0; 0
 * when a is NULL (no keys: one owner) or no key matched.  The key itself
 * is not kept.  Any thread. */
uint64_t attn__auth_owner(attn__auth *a, const char *authorization,
                          const char *api_key);
/* The owner tag of the key matched in a, else in admin (either NULL). */
uint64_t attn__auth_owner_of(attn__auth *a, attn__auth *admin,
                             const char *authorization, const char *api_key);
/* Count one refused request / read the count (0 for NULL).  Any thread. */
void attn__auth_refused(attn__auth *a);
uint64_t attn__auth_failures(attn__auth *a);

#endif
