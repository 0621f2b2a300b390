/* test_auth.c - src/server/auth.c (API keys: the file's format, constant-
 * time matching, the Authorization and X-Api-Key headers, reload) and
 * src/server/cors.c (which origins are allowed). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/server/internal.h"
#include "../src/server/auth.h"
#include "../src/server/cors.h"
#include "unit.h"

static attn__keyset *parse_ok(const char *text, const char *env) {
  attn__keyset *set = NULL;
  attn_diag d = {{0}};
  attn_status st =
      attn__keys_parse(text, text ? strlen(text) : 0, "keys", env, &set, &d);
  ck_assert_msg(st == ATTN_OK, "%s", d.msg);
  return set;
}

static int match(const attn__keyset *set, const char *tok) {
  return attn__keys_match(set, tok, strlen(tok));
}

START_TEST(test_file_format) {
  attn__keyset *set = parse_ok(
      "# the keys of team a\n\n  alpha-1  \n\tbeta_2\r\n   # indented note\n"
      "gamma", /* no newline at the end */
      NULL);
  ck_assert_uint_eq(attn__keys_count(set), 3);
  ck_assert(match(set, "alpha-1"));
  ck_assert(match(set, "beta_2"));
  ck_assert(match(set, "gamma"));
  ck_assert(!match(set, "# the keys of team a"));
  ck_assert(!match(set, "alpha-"));   /* a prefix */
  ck_assert(!match(set, "alpha-12")); /* longer */
  ck_assert(!match(set, "Alpha-1"));  /* case counts */
  ck_assert(!match(set, ""));
  ck_assert(!match(set, "beta_2\r"));
  attn__keys_free(set);
  /* the variable's key beside the file's, or alone */
  set = parse_ok("one\n", "two");
  ck_assert_uint_eq(attn__keys_count(set), 2);
  ck_assert(match(set, "one") && match(set, "two"));
  attn__keys_free(set);
  set = parse_ok(NULL, "only");
  ck_assert_uint_eq(attn__keys_count(set), 1);
  ck_assert(match(set, "only") && !match(set, "onl"));
  attn__keys_free(set);
}
END_TEST

static void parse_fails(const char *text, attn_status want, const char *says) {
  attn__keyset *set = (attn__keyset *)1;
  attn_diag d = {{0}};
  ck_assert_int_eq(
      attn__keys_parse(text, strlen(text), "api_keys_file 'k'", NULL, &set, &d),
      want);
  ck_assert_ptr_null(set);
  ck_assert_msg(strstr(d.msg, says), "diag '%s' lacks '%s'", d.msg, says);
}

START_TEST(test_file_errors) {
  parse_fails("", ATTN_EINVAL, "holds no key");
  parse_fails("# only a comment\n\n  \n", ATTN_EINVAL, "holds no key");
  parse_fails("good\nsecret with space\n", ATTN_EINVAL, "line 2");
  parse_fails("good\ntab\tinside\n", ATTN_EINVAL, "line 2");
  parse_fails("ok\n\x01\n", ATTN_EINVAL, "line 2");
  parse_fails("caf\xc3\xa9\n", ATTN_EINVAL, "line 1");
  /* the message never holds the key */
  attn__keyset *set;
  attn_diag d = {{0}};
  const char *t = "good\nsecret with space\n";
  attn__keys_parse(t, strlen(t), "k", NULL, &set, &d);
  ck_assert_ptr_null(strstr(d.msg, "secret"));
  /* a key one byte too long; one of the longest allowed */
  char *line = malloc(ATTN_MAX_API_KEY_LEN + 3);
  memset(line, 'k', ATTN_MAX_API_KEY_LEN + 1);
  memcpy(line + ATTN_MAX_API_KEY_LEN + 1, "\n", 2);
  parse_fails(line, ATTN_EINVAL, "more than 256");
  memcpy(line + ATTN_MAX_API_KEY_LEN, "\n", 2);
  set = parse_ok(line, NULL);
  line[ATTN_MAX_API_KEY_LEN] = '\0';
  ck_assert(match(set, line));
  attn__keys_free(set);
  free(line);
  /* one key too many */
  size_t n = ATTN_MAX_API_KEYS + 1;
  char *many = malloc(n * 8 + 1), *p = many;
  for (size_t i = 0; i < n; i++) p += snprintf(p, 9, "k%06zu\n", i);
  parse_fails(many, ATTN_ETOOBIG, "more than 1024 keys");
  many[(n - 1) * 8] = '\0';
  set = parse_ok(many, NULL);
  ck_assert_uint_eq(attn__keys_count(set), ATTN_MAX_API_KEYS);
  ck_assert(match(set, "k001023") && !match(set, "k001024"));
  attn__keys_free(set);
  free(many);
}
END_TEST

/* Keys from a file written here, through attn__auth_create and reload. */
START_TEST(test_headers_and_reload) {
  char path[] = "/tmp/attnd-keys-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, "k-one\n", 6), 6);
  close(fd);
  attn__auth *a;
  attn_diag d = {{0}};
  ck_assert_int_eq(attn__auth_create(path, "k-env", &a, &d), ATTN_OK);
  ck_assert_uint_eq(attn__auth_count(a), 2);
  ck_assert_int_eq(attn__auth_check(a, NULL, NULL), ATTN_AUTH_MISSING);
  ck_assert_int_eq(attn__auth_check(a, "Bearer k-one", NULL), ATTN_AUTH_OK);
  ck_assert_int_eq(attn__auth_check(a, "bearer   k-env  ", NULL), ATTN_AUTH_OK);
  ck_assert_int_eq(attn__auth_check(a, "Bearer k-two", NULL), ATTN_AUTH_WRONG);
  ck_assert_int_eq(attn__auth_check(a, "Bearer", NULL), ATTN_AUTH_SCHEME);
  ck_assert_int_eq(attn__auth_check(a, "Bearerk-one", NULL), ATTN_AUTH_SCHEME);
  ck_assert_int_eq(attn__auth_check(a, "Basic azpvbmU=", NULL),
                   ATTN_AUTH_SCHEME);
  ck_assert_int_eq(attn__auth_check(a, NULL, " k-one "), ATTN_AUTH_OK);
  ck_assert_int_eq(attn__auth_check(a, NULL, "k-on"), ATTN_AUTH_WRONG);
  ck_assert_int_eq(attn__auth_check(a, NULL, ""), ATTN_AUTH_WRONG);
  /* a proxy's Basic beside the key: the key counts */
  ck_assert_int_eq(attn__auth_check(a, "Basic eDp5", "k-one"), ATTN_AUTH_OK);
  ck_assert_int_eq(attn__auth_check(NULL, NULL, NULL), ATTN_AUTH_OK);
  /* reload: new keys replace the file's; a bad file keeps them */
  FILE *f = fopen(path, "w");
  fputs("# rotated\nk-three\n", f);
  fclose(f);
  size_t n = 0;
  ck_assert_int_eq(attn__auth_reload(a, &n, &d), ATTN_OK);
  ck_assert_uint_eq(n, 2);
  ck_assert_int_eq(attn__auth_check(a, NULL, "k-one"), ATTN_AUTH_WRONG);
  ck_assert_int_eq(attn__auth_check(a, NULL, "k-three"), ATTN_AUTH_OK);
  ck_assert_int_eq(attn__auth_check(a, NULL, "k-env"), ATTN_AUTH_OK);
  f = fopen(path, "w");
  fputs("two words\n", f);
  fclose(f);
  ck_assert_int_eq(attn__auth_reload(a, &n, &d), ATTN_EINVAL);
  ck_assert_int_eq(attn__auth_check(a, NULL, "k-three"), ATTN_AUTH_OK);
  unlink(path);
  ck_assert_int_eq(attn__auth_reload(a, &n, &d), ATTN_EIO);
  ck_assert_ptr_nonnull(strstr(d.msg, path));
  ck_assert_int_eq(attn__auth_check(a, NULL, "k-three"), ATTN_AUTH_OK);
  attn__auth_refused(a);
  attn__auth_refused(a);
  ck_assert_uint_eq(attn__auth_failures(a), 2);
  attn__auth_destroy(a);
  /* nothing set: no attn__auth at all; a file that is not there stops it */
  ck_assert_int_eq(attn__auth_create("", NULL, &a, &d), ATTN_OK);
  ck_assert_ptr_null(a);
  ck_assert_int_eq(attn__auth_create(path, NULL, &a, &d), ATTN_EIO);
  ck_assert_ptr_null(a);
  ck_assert_ptr_nonnull(strstr(d.msg, "api_keys_file"));
}
END_TEST

/* The admin keys' set: its own names in messages, its own reload; the
 * owner tag of a key is the same in either set. */
START_TEST(test_admin_named) {
  char path[] = "/tmp/attnd-admin-XXXXXX";
  ck_assert_int_ge(mkstemp(path), 0);
  attn__auth *a = NULL, *inf = NULL;
  attn_diag d = {{0}};
  FILE *f = fopen(path, "w");
  fputs("# admins\n", f);
  fclose(f);
  ck_assert_int_eq(attn__auth_named("admin_api_keys_file",
                                    "ATTND_ADMIN_API_KEY", path, NULL, &a, &d),
                   ATTN_EINVAL);
  ck_assert_ptr_nonnull(strstr(d.msg, "admin_api_keys_file '"));
  ck_assert_ptr_nonnull(strstr(d.msg, "unset admin_api_keys_file"));
  char big[ATTN_MAX_API_KEY_LEN + 2];
  memset(big, 'k', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  ck_assert_int_eq(attn__auth_named("admin_api_keys_file",
                                    "ATTND_ADMIN_API_KEY", "", big, &a, &d),
                   ATTN_EINVAL);
  ck_assert_ptr_nonnull(strstr(d.msg, "ATTND_ADMIN_API_KEY: the key is"));
  f = fopen(path, "w");
  fputs("boss-1\n", f);
  fclose(f);
  ck_assert_int_eq(
      attn__auth_named("admin_api_keys_file", "ATTND_ADMIN_API_KEY", path,
                       "boss-env", &a, &d),
      ATTN_OK);
  ck_assert_uint_eq(attn__auth_count(a), 2);
  ck_assert_int_eq(attn__auth_check(a, "Bearer boss-1", NULL), ATTN_AUTH_OK);
  f = fopen(path, "w");
  fputs("boss-2\nbad key\n", f);
  fclose(f);
  size_t n = 0;
  ck_assert_int_eq(attn__auth_reload(a, &n, &d), ATTN_EINVAL);
  ck_assert_ptr_nonnull(strstr(d.msg, "admin_api_keys_file '"));
  ck_assert_ptr_nonnull(strstr(d.msg, "line 2"));
  ck_assert_int_eq(attn__auth_check(a, NULL, "boss-1"), ATTN_AUTH_OK);
  f = fopen(path, "w");
  fputs("boss-2\n", f);
  fclose(f);
  ck_assert_int_eq(attn__auth_reload(a, &n, &d), ATTN_OK);
  ck_assert_uint_eq(n, 2);
  ck_assert_int_eq(attn__auth_check(a, NULL, "boss-1"), ATTN_AUTH_WRONG);
  ck_assert_int_eq(attn__auth_check(a, NULL, "boss-2"), ATTN_AUTH_OK);
  ck_assert_int_eq(attn__auth_create("", "user", &inf, &d), ATTN_OK);
  uint64_t tag = attn__auth_owner_of(inf, a, "Bearer boss-2", NULL);
  ck_assert_uint_ne(tag, 0);
  ck_assert_uint_eq(tag, attn__auth_owner(a, "Bearer boss-2", NULL));
  ck_assert_uint_eq(attn__auth_owner_of(inf, a, NULL, "user"),
                    attn__auth_owner(inf, NULL, "user"));
  ck_assert_uint_eq(attn__auth_owner_of(inf, a, NULL, "who"), 0);
  ck_assert_uint_eq(attn__auth_owner_of(NULL, a, NULL, "boss-env"),
                    attn__auth_owner(a, NULL, "boss-env"));
  attn__auth_destroy(inf);
  attn__auth_destroy(a);
  unlink(path);
}
END_TEST

START_TEST(test_cors_allowed) {
  const char *list = "https://app.example, http://localhost:3000 https://b.c";
  ck_assert(attn__cors_allowed(list, "https://app.example"));
  ck_assert(attn__cors_allowed(list, "http://localhost:3000"));
  ck_assert(attn__cors_allowed(list, "https://b.c"));
  ck_assert(attn__cors_allowed(list, "HTTPS://APP.example"));
  ck_assert(!attn__cors_allowed(list, "https://app.example:443"));
  ck_assert(!attn__cors_allowed(list, "http://localhost:300"));
  ck_assert(!attn__cors_allowed(list, "https://app.example.evil"));
  ck_assert(!attn__cors_allowed(list, "https://b"));
  ck_assert(!attn__cors_allowed(list, ""));
  ck_assert(!attn__cors_allowed(list, NULL));
  ck_assert(!attn__cors_allowed("", "https://app.example"));
  ck_assert(attn__cors_allowed("*", "https://anything.example"));
  ck_assert(attn__cors_allowed("*", "null"));
}
END_TEST

Suite *auth_suite(void) {
  Suite *s = suite_create("auth");
  TCase *t = tcase_create("auth");
  tcase_add_test(t, test_file_format);
  tcase_add_test(t, test_file_errors);
  tcase_add_test(t, test_headers_and_reload);
  tcase_add_test(t, test_admin_named);
  tcase_add_test(t, test_cors_allowed);
  suite_add_tcase(s, t);
  return s;
}
