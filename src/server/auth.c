/* auth.c - API keys: read from api_keys_file and ATTND_API_KEY (or, for
 * the admin keys, admin_api_keys_file and ATTND_ADMIN_API_KEY), checked in
 * constant time, swapped whole on SIGHUP.
 *
 * DESIGN
 * A key set (attn__keyset) is immutable once parsed: one block with every
 * key's bytes and lengths.  An attn__auth holds the set in force behind a
 * read-write lock: the HTTP threads take it for reading to check a
 * request (no allocation, no syscall), attn__auth_reload parses the file
 * into a new set first and swaps it in under the write lock, so a reload
 * that fails (a file gone, a line that is not a key, no key left) keeps the
 * keys in force.  The file's format: one key per line; spaces and tabs
 * around a key and a CR before the LF are trimmed; blank lines and lines
 * whose first non-blank byte is '#' are skipped; a key is 1 to
 * ATTN_MAX_API_KEY_LEN bytes of printable ASCII without spaces.  Messages
 * name the file and the line, never a key's bytes (nor does anything
 * else: keys stay out of logs and answers).
 * Comparing: every configured key is compared with every token the request
 * presents, in time that depends on the keys' lengths and the token's, not
 * on where the bytes differ, and without stopping at the first match.
 * Refusals are counted here (attn__auth_failures), the one counter the
 * metrics read.
 * The server holds two: the inference keys and the admin keys (which may
 * also change the repository); routes.c decides which a route needs.
 * Each names its file key and variable in its messages (attn__auth_named).
 * Threads: check and the counter on any thread; create, reload and
 * destroy on main (reload while HTTP threads check).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "attn/limits.h"
#include "attn/file.h"
#include "internal.h"
#include "auth.h"

struct attn__keyset {
  size_t n;
  size_t len[ATTN_MAX_API_KEYS];
  char key[ATTN_MAX_API_KEYS][ATTN_MAX_API_KEY_LEN];
};

struct attn__auth {
  pthread_rwlock_t lock;
  attn__keyset *set;                /* under lock; never NULL */
  char path[ATTN_MAX_PATH_LEN + 1]; /* api_keys_file; "" for none */
  char env_key[ATTN_MAX_API_KEY_LEN + 1];
  const char *file_key; /* "api_keys_file", for messages */
  const char *env_name; /* "ATTND_API_KEY" */
  atomic_uint_fast64_t failures;
};

static int key_byte(char c) {
  return c > 0x20 && c < 0x7f;
}

/* Add key k[0, n) to set; where/line name it in messages. */
static attn_status add_key(attn__keyset *set, const char *k, size_t n,
                           const char *where, size_t line, attn_diag *d) {
  char at[64] = "";
  if (line) snprintf(at, sizeof at, ", line %zu", line);
  if (n > ATTN_MAX_API_KEY_LEN)
    return attn_diag_set(d, ATTN_EINVAL,
                         "%s%s: the key is %zu bytes, more than %d", where, at,
                         n, ATTN_MAX_API_KEY_LEN);
  for (size_t i = 0; i < n; i++)
    if (!key_byte(k[i]))
      return attn_diag_set(d, ATTN_EINVAL,
                           "%s%s: byte %zu of the key is a space or not "
                           "printable ASCII (a key is one word of printable "
                           "ASCII)",
                           where, at, i + 1);
  if (set->n == ATTN_MAX_API_KEYS)
    return attn_diag_set(d, ATTN_ETOOBIG, "%s%s: more than %d keys", where, at,
                         ATTN_MAX_API_KEYS);
  memcpy(set->key[set->n], k, n);
  set->len[set->n++] = n;
  return ATTN_OK;
}

/* attn__keys_parse, with the names of the file's key and the variable. */
static attn_status parse_named(const char *text, size_t len, const char *where,
                               const char *env_key, const char *file_key,
                               const char *env_name, attn__keyset **out,
                               attn_diag *d) {
  attn__keyset *set = calloc(1, sizeof *set);
  attn_status st = ATTN_OK;
  *out = NULL;
  if (!set) return attn_diag_set(d, ATTN_ENOMEM, "out of memory for keys");
  size_t line = 0;
  for (size_t i = 0; text && i < len && st == ATTN_OK; line++) {
    size_t end = i;
    while (end < len && text[end] != '\n') end++;
    size_t a = i, b = end;
    while (a < b && (text[a] == ' ' || text[a] == '\t')) a++;
    while (b > a &&
           (text[b - 1] == ' ' || text[b - 1] == '\t' || text[b - 1] == '\r'))
      b--;
    if (b > a && text[a] != '#')
      st = add_key(set, text + a, b - a, where, line + 1, d);
    i = end + 1;
  }
  if (st == ATTN_OK && env_key && *env_key)
    st = add_key(set, env_key, strlen(env_key), env_name, 0, d);
  if (st == ATTN_OK && set->n == 0)
    st = attn_diag_set(d, ATTN_EINVAL,
                       "%s holds no key (only blank lines and # comments): "
                       "add one, or unset %s",
                       where, file_key);
  if (st != ATTN_OK) {
    free(set);
    return st;
  }
  *out = set;
  return ATTN_OK;
}

attn_status attn__keys_parse(const char *text, size_t len, const char *where,
                             const char *env_key, attn__keyset **out,
                             attn_diag *d) {
  return parse_named(text, len, where, env_key, "api_keys_file",
                     "ATTND_API_KEY", out, d);
}

void attn__keys_free(attn__keyset *set) {
  free(set);
}

size_t attn__keys_count(const attn__keyset *set) {
  return set ? set->n : 0;
}

/* tok[0, n) against key[0, klen): time depends on klen (and on n only for
 * the bytes past the token), not on the bytes. */
static unsigned differs(const char *tok, size_t n, const char *key,
                        size_t klen) {
  unsigned diff = n != klen;
  for (size_t i = 0; i < klen; i++)
    diff |= (unsigned char)(key[i] ^ (i < n ? tok[i] : 0));
  return diff;
}

int attn__keys_match(const attn__keyset *set, const char *tok, size_t n) {
  unsigned ok = 0;
  for (size_t i = 0; i < set->n; i++)
    ok |= !differs(tok, n, set->key[i], set->len[i]);
  return ok != 0;
}

/* The token of "Bearer TOKEN" (scheme case-insensitive, spaces trimmed):
 * 1 and *tok, *n; 0 when the value is of another scheme or has no token. */
static int bearer(const char *v, const char **tok, size_t *n) {
  while (*v == ' ' || *v == '\t') v++;
  if (strncasecmp(v, "Bearer", 6) || (v[6] != ' ' && v[6] != '\t')) return 0;
  v += 6;
  while (*v == ' ' || *v == '\t') v++;
  size_t len = strlen(v);
  while (len && (v[len - 1] == ' ' || v[len - 1] == '\t')) len--;
  *tok = v;
  *n = len;
  return len > 0;
}

static size_t trimmed(const char **v) {
  while (**v == ' ' || **v == '\t') ++*v;
  size_t n = strlen(*v);
  while (n && ((*v)[n - 1] == ' ' || (*v)[n - 1] == '\t')) n--;
  return n;
}

attn__auth_result attn__auth_check(attn__auth *a, const char *authorization,
                                   const char *api_key) {
  const char *tok = NULL;
  size_t n = 0;
  int has_bearer = authorization && bearer(authorization, &tok, &n);
  if (!a) return ATTN_AUTH_OK;
  if (!has_bearer && !api_key)
    return authorization ? ATTN_AUTH_SCHEME : ATTN_AUTH_MISSING;
  int ok = 0;
  pthread_rwlock_rdlock(&a->lock);
  if (has_bearer) ok |= attn__keys_match(a->set, tok, n);
  if (api_key) {
    size_t m = trimmed(&api_key);
    ok |= attn__keys_match(a->set, api_key, m);
  }
  pthread_rwlock_unlock(&a->lock);
  return ok ? ATTN_AUTH_OK : ATTN_AUTH_WRONG;
}

/* FNV-1a over the key, then splitmix64's finaliser; never 0. */
static uint64_t key_tag(const char *k, size_t n) {
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ (unsigned char)k[i]) * 1099511628211ull;
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h ? h : 1;
}

uint64_t attn__auth_owner(attn__auth *a, const char *authorization,
                          const char *api_key) {
  const char *tok = NULL;
  size_t n = 0;
  if (!a) return 0;
  int has_bearer = authorization && bearer(authorization, &tok, &n);
  uint64_t tag = 0;
  pthread_rwlock_rdlock(&a->lock);
  if (has_bearer && attn__keys_match(a->set, tok, n)) {
    tag = key_tag(tok, n);
  } else if (api_key) {
    size_t m = trimmed(&api_key);
    if (attn__keys_match(a->set, api_key, m)) tag = key_tag(api_key, m);
  }
  pthread_rwlock_unlock(&a->lock);
  return tag;
}

uint64_t attn__auth_owner_of(attn__auth *a, attn__auth *admin,
                             const char *authorization, const char *api_key) {
  uint64_t tag = attn__auth_owner(a, authorization, api_key);
  return tag ? tag : attn__auth_owner(admin, authorization, api_key);
}

void attn__auth_refused(attn__auth *a) {
  if (a) atomic_fetch_add(&a->failures, 1);
}

uint64_t attn__auth_failures(attn__auth *a) {
  return a ? (uint64_t)atomic_load(&a->failures) : 0;
}

/* The file's bytes (NULL and 0 when path is ""), malloc'd.  Opened
 * without blocking and refused unless a regular file: it is re-read on
 * SIGHUP, by the main thread, which must never wait on a FIFO. */
static attn_status read_keys_file(const char *file_key, const char *path,
                                  char **text, size_t *len, attn_diag *d) {
  char label[ATTN_MAX_PATH_LEN + 32];
  *text = NULL;
  *len = 0;
  if (!*path) return ATTN_OK;
  snprintf(label, sizeof label, "%s '%s'", file_key, path);
  return attn_read_file(path, label, ATTN_MAX_KEYS_FILE_BYTES, text, len, d);
}

/* A new set from a's file and variable. */
static attn_status load(const attn__auth *a, attn__keyset **out, attn_diag *d) {
  char *text;
  size_t len;
  char where[ATTN_MAX_PATH_LEN + 32];
  attn_status st = read_keys_file(a->file_key, a->path, &text, &len, d);
  if (st != ATTN_OK) return st;
  snprintf(where, sizeof where, "%s '%s'", a->file_key, a->path);
  st = parse_named(text, len, *a->path ? where : a->env_name, a->env_key,
                   a->file_key, a->env_name, out, d);
  free(text);
  return st;
}

attn_status attn__auth_named(const char *file_key, const char *env_name,
                             const char *path, const char *env_key,
                             attn__auth **out, attn_diag *d) {
  *out = NULL;
  if ((!path || !*path) && (!env_key || !*env_key)) return ATTN_OK;
  if (env_key && strlen(env_key) > ATTN_MAX_API_KEY_LEN)
    return attn_diag_set(d, ATTN_EINVAL,
                         "%s: the key is %zu bytes, more than %d", env_name,
                         strlen(env_key), ATTN_MAX_API_KEY_LEN);
  attn__auth *a = calloc(1, sizeof *a);
  if (!a) return attn_diag_set(d, ATTN_ENOMEM, "out of memory for keys");
  a->file_key = file_key;
  a->env_name = env_name;
  attn__copy_str(a->path, sizeof a->path, path ? path : "");
  attn__copy_str(a->env_key, sizeof a->env_key, env_key ? env_key : "");
  attn_status st = load(a, &a->set, d);
  if (st != ATTN_OK) {
    free(a);
    return st;
  }
  pthread_rwlock_init(&a->lock, NULL);
  atomic_init(&a->failures, 0);
  *out = a;
  return ATTN_OK;
}

attn_status attn__auth_create(const char *path, const char *env_key,
                              attn__auth **out, attn_diag *d) {
  return attn__auth_named("api_keys_file", "ATTND_API_KEY", path, env_key, out,
                          d);
}

attn_status attn__auth_reload(attn__auth *a, size_t *count, attn_diag *d) {
  attn__keyset *set;
  attn_status st = load(a, &set, d);
  if (st != ATTN_OK) return st;
  pthread_rwlock_wrlock(&a->lock);
  attn__keyset *old = a->set;
  a->set = set;
  pthread_rwlock_unlock(&a->lock);
  attn__keys_free(old);
  *count = set->n;
  return ATTN_OK;
}

size_t attn__auth_count(attn__auth *a) {
  if (!a) return 0;
  pthread_rwlock_rdlock(&a->lock);
  size_t n = a->set->n;
  pthread_rwlock_unlock(&a->lock);
  return n;
}

void attn__auth_destroy(attn__auth *a) {
  if (!a) return;
  attn__keys_free(a->set);
  pthread_rwlock_destroy(&a->lock);
  free(a);
}
