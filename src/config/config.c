/* config.c - the key table of attnd and the code that fills attn_config from
 * defaults, a JSON file, the environment and argv.
 *
 * DESIGN
 *  - One static table, `keys[]`, has a row per key: name (also the struct
 *    field name: the row macros stringify the field, and _Generic checks its
 *    C type against the row's type), environment variable (written out so a
 *    grep finds it; the tests check it is ATTND_<KEY>), type,
 *    field offset and size, default, min, max, unit and help text.  Every
 *    layer (defaults, file, env, flags) and every output (--help,
 *    --check-config) walks that table; nothing else knows the key list.
 *    tests/test_config.c checks config/attnd.json and docs/configuration.md
 *    against it.
 *  - Values arrive either as text (env, flags, attn_config_set) or as cJSON
 *    items (file).  Both paths end in check_and_store(), which does the one
 *    range check and the one store, so a key can never be set out of range.
 *  - Failure changes nothing: each public entry point works on a copy of the
 *    struct and copies it back only when every step succeeded.
 *  - Diagnostics begin with where the bad value came from: the key name
 *    (attn_config_set), "FILE: key", "ATTND_KEY" or "--flag".  Values echoed
 *    in messages are cut to VALUE_SHOW bytes so they fit ATTN_DIAG_MAX.
 *
 * THREADS: no global or static mutable state; every function is reentrant.
 * cJSON is used only through cJSON_ParseWithOpts (which reports its error
 * position locally, not through the global cJSON_GetErrorPtr).
 */
#include "attn/config.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- The key table ------------------------------------------------------ */

/* CFG_PATH is a CFG_STR naming a file or directory: in a config file a
 * relative path is resolved against the file's folder, and where it was
 * last set is kept beside it (origin_off) for messages. */
typedef enum {
  CFG_INT,
  CFG_I64,
  CFG_BOOL,
  CFG_ENUM,
  CFG_STR,
  CFG_PATH
} cfg_type;

typedef struct cfg_key {
  const char *key; /* also the attn_config field name */
  const char *env; /* "ATTND_" + upper-case key */
  cfg_type type;
  size_t off, size;               /* field within attn_config */
  size_t origin_off, origin_size; /* PATH: the field naming its source */
  int64_t def, min, max;          /* INT/I64: value and range; BOOL: 0/1;
                                     ENUM: index into names; STR: length range */
  const char *sdef;               /* STR: default */
  const char *const *names; /* ENUM: NULL-terminated, index = enum value */
  const char *unit;         /* shown after numbers in --help; "" for none */
  const char *help;         /* one line, no trailing period */
} cfg_key;

/* The log's names are log.c's (attn_log_level_names, ...). */
static const char *const sched_policy_names[] = {"batch", "other", NULL};

_Static_assert(ATTN_SCHED_BATCH == 0 && ATTN_SCHED_OTHER == 1,
               "sched_policy_names[] is indexed by attn_sched_policy");
static const char *const model_control_names[] = {"none", "explicit", NULL};

_Static_assert(ATTN_MODEL_CONTROL_NONE == 0 && ATTN_MODEL_CONTROL_EXPLICIT == 1,
               "model_control_names[] is indexed by attn_model_control");
/* Enum fields are stored through memcpy of an int. */
_Static_assert(sizeof(attn_log_level) == sizeof(int) &&
                   sizeof(attn_log_format) == sizeof(int) &&
                   sizeof(attn_log_prefix_mode) == sizeof(int) &&
                   sizeof(attn_sched_policy) == sizeof(int) &&
                   sizeof(attn_model_control) == sizeof(int),
               "enum fields must be int-sized");
_Static_assert(ATTN_MAX_WORKERS <= INT_MAX &&
                   ATTN_MAX_BLAS_THREADS <= INT_MAX &&
                   ATTN_MAX_QUEUE_CAPACITY <= INT_MAX &&
                   ATTN_MAX_CONNECTIONS <= INT_MAX &&
                   ATTN_MAX_CONNECTION_TIMEOUT_S <= INT_MAX &&
                   ATTN_MAX_INFLATE_RATIO <= INT_MAX,
               "ceilings of int keys must fit an int");

/* clang-format off */
/* Offset and size of field m; _Generic makes the build fail when a row's
 * type does not match the field's C type (a char array matches char *). */
#define CFG_FIELD(m, T) \
  offsetof(attn_config, m), \
  _Generic(((attn_config *)0)->m, T: sizeof(((attn_config *)0)->m))

/* One row per key type.  k is the key and the field name. */
#define K_INT(k, env, def, lo, hi, unit, help) \
  {#k, env, CFG_INT, CFG_FIELD(k, int), 0, 0, def, lo, hi, NULL, NULL, unit, \
   help}
#define K_I64(k, env, def, lo, hi, unit, help) \
  {#k, env, CFG_I64, CFG_FIELD(k, int64_t), 0, 0, def, lo, hi, NULL, NULL, \
   unit, help}
#define K_BOOL(k, env, def, help) \
  {#k, env, CFG_BOOL, CFG_FIELD(k, bool), 0, 0, def, 0, 1, NULL, NULL, "", \
   help}
#define K_ENUM(k, env, T, def, names, help) \
  {#k, env, CFG_ENUM, CFG_FIELD(k, T), 0, 0, def, 0, \
   (int64_t)(sizeof names / sizeof names[0]) - 2, NULL, names, "", help}
#define K_STR(k, env, def, help) \
  {#k, env, CFG_STR, CFG_FIELD(k, char *), 0, 0, 0, 1, \
   (int64_t)sizeof(((attn_config *)0)->k) - 1, def, NULL, "", help}
/* from: the char array that keeps where k was last set. */
#define K_PATH(k, from, env, def, help) \
  {#k, env, CFG_PATH, CFG_FIELD(k, char *), CFG_FIELD(from, char *), 0, 1, \
   (int64_t)sizeof(((attn_config *)0)->k) - 1, def, NULL, "", help}
/* A file that may be left unset (default ""): relative to the config
 * file's folder like K_PATH, with no record of where it was set. */
#define K_FILE(k, env, help) \
  {#k, env, CFG_PATH, CFG_FIELD(k, char *), 0, 0, 0, 0, \
   (int64_t)sizeof(((attn_config *)0)->k) - 1, "", NULL, "", help}
/* Text that may be left unset (default "", off). */
#define K_TEXT(k, env, help) \
  {#k, env, CFG_STR, CFG_FIELD(k, char *), 0, 0, 0, 0, \
   (int64_t)sizeof(((attn_config *)0)->k) - 1, "", NULL, "", help}

static const cfg_key keys[] = {
    K_STR(host, "ATTND_HOST", "0.0.0.0",
          "address to listen on; 0.0.0.0 = all IPv4, :: = all IPv6"),
    K_INT(port, "ATTND_PORT", 8080, 0, 65535, "",
          "TCP port to listen on; 0 = ephemeral (the kernel picks)"),
    K_INT(metrics_port, "ATTND_METRICS_PORT", 0, 0, 65535, "",
          "a second TCP port (on host) that serves only GET /metrics, as "
          "Triton's 8002; 0 = none (/metrics is on port)"),
    K_INT(workers, "ATTND_WORKERS", 0, 0, ATTN_MAX_WORKERS, "threads",
          "worker threads running requests; 0 = auto (the CPUs attnd may "
          "use: its affinity mask and its cgroup's CPU quota, rounded up)"),
    K_INT(blas_threads_per_worker, "ATTND_BLAS_THREADS_PER_WORKER", 0, 0,
          ATTN_MAX_BLAS_THREADS, "threads",
          "threads one request may use inside the engine; 0 = auto (the "
          "cores other workers are not using)"),
    K_INT(http_threads, "ATTND_HTTP_THREADS", 2, 1, ATTN_MAX_HTTP_THREADS,
          "threads", "libmicrohttpd I/O threads (parse, route, send)"),
    K_ENUM(cpu_scheduling_policy, "ATTND_CPU_SCHEDULING_POLICY",
           attn_sched_policy, ATTN_SCHED_BATCH, sched_policy_names,
           "Linux scheduling policy of every attnd thread: batch "
           "(SCHED_BATCH: a thread that wakes up does not preempt a running "
           "one; replaces only the default policy) or other (the policy "
           "attnd was started with, SCHED_OTHER by default)"),
    K_INT(queue_capacity, "ATTND_QUEUE_CAPACITY", 64, 1,
          ATTN_MAX_QUEUE_CAPACITY, "requests",
          "requests that may wait for a worker; beyond that: 503"),
    K_I64(queue_timeout_ms, "ATTND_QUEUE_TIMEOUT_MS", 10000, 0,
          ATTN_MAX_TIMEOUT_MS, "ms",
          "longest a request may wait in the queue before a 503; 0 = no limit"),
    K_I64(shutdown_delay_ms, "ATTND_SHUTDOWN_DELAY_MS", 0, 0,
          ATTN_MAX_TIMEOUT_MS, "ms",
          "on SIGTERM, how long readiness is 503 while every request is "
          "still served, before the drain (so load balancers stop sending)"),
    K_I64(drain_timeout_ms, "ATTND_DRAIN_TIMEOUT_MS", 30000, 0,
          ATTN_MAX_TIMEOUT_MS, "ms",
          "on SIGTERM (after shutdown_delay_ms), how long the requests "
          "already accepted (bodies still arriving, queued, running) may "
          "take to finish"),
    K_I64(max_body_bytes, "ATTND_MAX_BODY_BYTES", 256LL * 1024 * 1024, 1024,
          ATTN_MAX_BODY_BYTES, "bytes", "largest request body accepted"),
    K_INT(max_inflate_ratio, "ATTND_MAX_INFLATE_RATIO", 200, 0,
          ATTN_MAX_INFLATE_RATIO, "",
          "a gzip or deflate body may inflate to this many times its size "
          "(at least 1 MiB), else 413; 0 = no ratio (max_body_bytes still "
          "holds)"),
    K_I64(max_total_body_bytes, "ATTND_MAX_TOTAL_BODY_BYTES", 0, 0,
          ATTN_MAX_TOTAL_BODY_BYTES, "bytes",
          "request and response bodies held at once, all connections "
          "together (arriving, queued, computing, being sent); beyond that: "
          "503; 0 = auto (half the memory attnd may use, at least "
          "max_body_bytes)"),
    K_I64(max_seq_len, "ATTND_MAX_SEQ_LEN", 16384, 1, ATTN_MAX_SEQ_LEN,
          "tokens", "longest query or key sequence in a request"),
    K_I64(max_tensor_elements, "ATTND_MAX_TENSOR_ELEMENTS", 64LL * 1024 * 1024,
          1, ATTN_MAX_ELEMENTS, "elements", "largest input or output tensor"),
    K_I64(max_weights_elements, "ATTND_MAX_WEIGHTS_ELEMENTS",
          16LL * 1024 * 1024, 0, ATTN_MAX_ELEMENTS, "elements",
          "largest attention-weights output returned as JSON; 0 = never"),
    K_I64(kv_cache_bytes, "ATTND_KV_CACHE_BYTES", 0, 0, ATTN_MAX_KV_CACHE_BYTES,
          "bytes",
          "the sessions' KV cache: keys and values kept between requests, "
          "all sessions together; a step that needs more: 507; 0 = auto (a "
          "quarter of the memory attnd may use)"),
    K_I64(max_sessions, "ATTND_MAX_SESSIONS", 10000, 1, ATTN_MAX_SESSIONS,
          "sessions", "sessions open at once; beyond: 507"),
    K_I64(session_idle_timeout_s, "ATTND_SESSION_IDLE_TIMEOUT_S", 600, 0,
          ATTN_MAX_SESSION_IDLE_TIMEOUT_S, "s",
          "a session unused this long is freed; 0 = never"),
    K_FILE(session_dir, "ATTND_SESSION_DIR",
           "on SIGTERM, after the drain, every session is written to this "
           "folder, and read back (then removed) at the next start; relative: "
           "to the config file's folder in a file; \"\" = off"),
    K_INT(max_connections, "ATTND_MAX_CONNECTIONS", 1024, 1,
          ATTN_MAX_CONNECTIONS, "connections", "open client connections"),
    K_INT(connection_timeout_s, "ATTND_CONNECTION_TIMEOUT_S", 60, 0,
          ATTN_MAX_CONNECTION_TIMEOUT_S, "s",
          "idle connection timeout; 0 = none"),
    K_INT(header_timeout_s, "ATTND_HEADER_TIMEOUT_S", 10, 0,
          ATTN_MAX_CONNECTION_TIMEOUT_S, "s",
          "a request's line and headers must arrive within this, counted "
          "from their first byte (a new connection: from its opening); else "
          "408 and close; 0 = no limit"),
    K_I64(body_min_rate_bytes_s, "ATTND_BODY_MIN_RATE_BYTES_S", 500, 0,
          ATTN_MAX_BODY_BYTES, "bytes/s",
          "a request body arriving slower than this on average for longer "
          "than header_timeout_s is cut with a 408; 0 = no limit"),
    K_INT(max_connections_per_ip, "ATTND_MAX_CONNECTIONS_PER_IP", 0, 0,
          ATTN_MAX_CONNECTIONS, "connections",
          "open connections from one client address; past it: 429; 0 = no "
          "limit (behind a load balancer every client has its address)"),
    K_PATH(models_dir, models_dir_from, "ATTND_MODELS_DIR", "config/models",
           "directory of model definitions; relative: to the config file's "
           "folder in a file, else to the working directory"),
    K_TEXT(model_name, "ATTND_MODEL_NAME",
           "serve a model of models_dir under this name, as KServe's "
           "--model_name: NEW renames the only model its files name, "
           "FROM=NEW the model named FROM; refused at start when "
           "ambiguous or taken (a built-in such as sdpa, another model); "
           "\"\" = none"),
    K_INT(models_poll_s, "ATTND_MODELS_POLL_S", 0, 0, ATTN_MAX_MODELS_POLL_S,
          "s",
          "look at models_dir this often and, once a change (a file added, "
          "removed or rewritten) has held still for one period, reload "
          "every model file as SIGHUP does (Triton's poll mode); 0 = off"),
    K_ENUM(log_level, "ATTND_LOG_LEVEL", attn_log_level, ATTN_LOG_INFO,
           attn_log_level_names, "least severe log level written"),
    K_ENUM(log_format, "ATTND_LOG_FORMAT", attn_log_format, ATTN_LOG_JSON,
           attn_log_format_names, "log line format"),
    K_ENUM(log_priority_prefix, "ATTND_LOG_PRIORITY_PREFIX",
           attn_log_prefix_mode, ATTN_LOG_PREFIX_AUTO, attn_log_prefix_names,
           "begin each line with its syslog priority (<3> error ... <7> "
           "debug) for journald: auto = when stderr is the journal "
           "(JOURNAL_STREAM), always, never"),
    K_BOOL(access_log, "ATTND_ACCESS_LOG", 1, "log one line per request"),
    K_TEXT(access_log_exclude, "ATTND_ACCESS_LOG_EXCLUDE",
           "path prefixes whose requests get no access line (still "
           "counted in the metrics), comma-separated (/v2/health/,/metrics); "
           "\"\" = none"),
    K_FILE(api_keys_file, "ATTND_API_KEYS_FILE",
           "API keys, one per line (blank lines and # comments skipped; "
           "re-read on SIGHUP): when it or ATTND_API_KEY gives a key, every "
           "route but health, the page and CORS preflights needs one; "
           "\"\" = none"),
    K_BOOL(metrics_require_key, "ATTND_METRICS_REQUIRE_KEY", 0,
           "GET /metrics needs an API key too (when keys are set)"),
    K_FILE(admin_api_keys_file, "ATTND_ADMIN_API_KEYS_FILE",
           "admin API keys, one per line as api_keys_file (re-read on "
           "SIGHUP): with keys set, loading and unloading models needs one "
           "of these (or ATTND_ADMIN_API_KEY); an admin key is also "
           "accepted wherever an API key is; \"\" = none"),
    K_ENUM(model_control, "ATTND_MODEL_CONTROL", attn_model_control,
           ATTN_MODEL_CONTROL_NONE, model_control_names,
           "the repository's load and unload over HTTP, as Triton's "
           "--model-control-mode: none (they answer 403; SIGHUP still "
           "reloads the models) or explicit (they work, with an admin key "
           "when keys are set)"),
    K_FILE(tls_cert_file, "ATTND_TLS_CERT_FILE",
           "serve HTTPS with this PEM certificate (chain); needs "
           "tls_key_file; \"\" = plain HTTP"),
    K_FILE(tls_key_file, "ATTND_TLS_KEY_FILE",
           "the PEM private key of tls_cert_file (unencrypted)"),
    K_FILE(tls_client_ca_file, "ATTND_TLS_CLIENT_CA_FILE",
           "mutual TLS: every client must present a certificate signed by a "
           "CA of this PEM file; \"\" = none asked"),
    K_TEXT(cors_allow_origins, "ATTND_CORS_ALLOW_ORIGINS",
           "browser origins allowed to call attnd (CORS), comma-separated "
           "(https://app.example, http://localhost:3000), or * for any; "
           "\"\" = CORS off"),
};
/* clang-format on */

#define N_KEYS (sizeof keys / sizeof keys[0])

/* Longest key name, for buffers that hold a key or its env/flag form. */
#define KEY_NAME_MAX 64
/* Bytes of a user value echoed back in a diagnostic. */
#define VALUE_SHOW 48

/* "--" + key with '_' as '-' into buf. */
static const char *flag_name(const char *key, char *buf, size_t size) {
  size_t n = 0;
  for (const char *p = "--"; *p && n + 1 < size; p++) buf[n++] = *p;
  for (const char *p = key; *p && n + 1 < size; p++)
    buf[n++] = *p == '_' ? '-' : *p;
  buf[n] = '\0';
  return buf;
}

static const cfg_key *find_key(const char *key) {
  for (size_t i = 0; i < N_KEYS; i++)
    if (strcmp(keys[i].key, key) == 0) return &keys[i];
  return NULL;
}

/* Key whose dashed form equals name[0..len). */
static const cfg_key *find_flag(const char *name, size_t len) {
  for (size_t i = 0; i < N_KEYS; i++) {
    const char *k = keys[i].key;
    size_t j = 0;
    while (j < len && k[j] && (k[j] == '_' ? '-' : k[j]) == name[j]) j++;
    if (j == len && k[j] == '\0') return &keys[i];
  }
  return NULL;
}

/* ---- Suggestions -------------------------------------------------------- */

/* Optimal-string-alignment distance (Levenshtein plus adjacent swaps)
 * between a and b when it is at most max, else max + 1 (also when either
 * string is longer than KEY_NAME_MAX).  Only the band |i - j| <= max of the
 * table is computed: a cell outside it is at least |i - j| > max, and a
 * path of cost <= max never leaves the band, so a distance <= max is
 * exact.  Three rows are kept: i - 2 (for swaps), i - 1 and i. */
static size_t edit_distance(const char *a, const char *b, size_t max) {
  size_t la = strlen(a), lb = strlen(b), far = max + 1;
  if (la > KEY_NAME_MAX || lb > KEY_NAME_MAX) return far;
  if ((la > lb ? la - lb : lb - la) > max) return far;
  size_t row[3][KEY_NAME_MAX + 2];
  for (size_t j = 0; j <= lb; j++) row[0][j] = j <= max ? j : far;
  for (size_t i = 1; i <= la; i++) {
    size_t *cur = row[i % 3], *up = row[(i + 2) % 3], *up2 = row[(i + 1) % 3];
    size_t lo = i > max ? i - max : 0, hi = i + max < lb ? i + max : lb;
    if (lo == 0)
      cur[0] = i;
    else
      cur[lo - 1] = far; /* left of the band */
    cur[hi + 1] = far;   /* right of it: row i + 1 reads it */
    for (size_t j = lo ? lo : 1; j <= hi; j++) {
      size_t cost = a[i - 1] != b[j - 1];
      size_t v = up[j] + 1;
      if (cur[j - 1] + 1 < v) v = cur[j - 1] + 1;
      if (up[j - 1] + cost < v) v = up[j - 1] + cost;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
          up2[j - 2] + 1 < v)
        v = up2[j - 2] + 1;
      cur[j] = v;
    }
  }
  size_t dist = row[la % 3][lb];
  return dist < far ? dist : far;
}

/* Closest known key (or, with extra, one of the extra names) within edit
 * distance 2 of name; NULL when none is that close.  Ties: first in table. */
static const char *closest(const char *name, const char *const *extra) {
  const char *best = NULL;
  size_t best_d = 3;
  for (size_t i = 0; i < N_KEYS && best_d; i++) {
    size_t dist = edit_distance(name, keys[i].key, best_d - 1);
    if (dist < best_d) best_d = dist, best = keys[i].key;
  }
  for (; extra && *extra && best_d; extra++) {
    size_t dist = edit_distance(name, *extra, best_d - 1);
    if (dist < best_d) best_d = dist, best = *extra;
  }
  return best;
}

/* ---- Parsing and storing one value -------------------------------------- */

static void store(attn_config *c, const cfg_key *k, int64_t v, const char *s) {
  char *field = (char *)c + k->off;
  switch (k->type) {
    case CFG_INT: {
      int x = (int)v;
      memcpy(field, &x, sizeof x);
      break;
    }
    case CFG_I64:
      memcpy(field, &v, sizeof v);
      break;
    case CFG_BOOL: {
      bool x = v != 0;
      memcpy(field, &x, sizeof x);
      break;
    }
    case CFG_ENUM: {
      int x = (int)v;
      memcpy(field, &x, sizeof x);
      break;
    }
    case CFG_STR:
    case CFG_PATH: {
      size_t n = strlen(s);
      memcpy(field, s, n + 1); /* length checked against k->max < size */
      break;
    }
  }
}

/* "0..65535", "true/false/1/0/yes/no", "debug, info, warn, error" or
 * "1..255 bytes" into buf. */
static const char *allowed(const cfg_key *k, char *buf, size_t size) {
  size_t n = 0;
  switch (k->type) {
    case CFG_INT:
    case CFG_I64:
      snprintf(buf, size, "%" PRId64 "..%" PRId64, k->min, k->max);
      break;
    case CFG_BOOL:
      snprintf(buf, size, "true/false/1/0/yes/no");
      break;
    case CFG_ENUM:
      buf[0] = '\0';
      for (const char *const *p = k->names; *p && n < size; p++)
        n += (size_t)snprintf(buf + n, size - n, "%s%s",
                              p == k->names ? "" : ", ", *p);
      break;
    case CFG_STR:
    case CFG_PATH:
      snprintf(buf, size, "%" PRId64 "..%" PRId64 " bytes", k->min, k->max);
      break;
  }
  return buf;
}

/* The one range/length check and the one store.  `src` names where the value
 * came from (a CFG_PATH keeps it beside the value); `shown` is the value as
 * the user wrote it.  For CFG_STR and CFG_PATH, s is the string; otherwise v
 * is the parsed number (bool 0/1, enum index). */
static attn_status check_and_store(attn_config *c, const cfg_key *k,
                                   const char *src, const char *shown,
                                   int64_t v, const char *s, attn_diag *d) {
  char range[96];
  if (k->type == CFG_STR || k->type == CFG_PATH) {
    size_t len = strlen(s);
    if (len < (size_t)k->min)
      return attn_diag_set(d, ATTN_EINVAL, "%s: empty value (%s must be %s)",
                           src, k->key, allowed(k, range, sizeof range));
    if (len > (size_t)k->max)
      return attn_diag_set(
          d, ATTN_EINVAL,
          "%s: '%.*s...' is too long, %zu bytes (%s must be %s)", src,
          VALUE_SHOW / 2, s, len, k->key, allowed(k, range, sizeof range));
    for (const char *p = s; *p; p++)
      if ((unsigned char)*p < 0x20 || *p == 0x7f)
        return attn_diag_set(d, ATTN_EINVAL,
                             "%s: value contains a control character", src);
  } else if (v < k->min || v > k->max) {
    return attn_diag_set(
        d, ATTN_EINVAL, "%s: %.*s is out of range (%s must be %s)", src,
        VALUE_SHOW, shown, k->key, allowed(k, range, sizeof range));
  }
  store(c, k, v, s);
  if (k->type == CFG_PATH && k->origin_size)
    snprintf((char *)c + k->origin_off, k->origin_size, "%s", src);
  return ATTN_OK;
}

/* Strict decimal: optional '-', digits, nothing else.  Returns 1 on success,
 * 0 when not an integer, -1 when an integer outside int64. */
static int parse_int(const char *s, int64_t *out) {
  const char *p = s[0] == '-' ? s + 1 : s;
  if (!isdigit((unsigned char)*p)) return 0; /* "", "+1", " 1", "-" */
  for (const char *q = p; *q; q++)
    if (!isdigit((unsigned char)*q)) return 0;
  errno = 0;
  char *end;
  long long v = strtoll(s, &end, 10);
  if (errno == ERANGE) return -1;
  if (*end != '\0') return 0;
  *out = (int64_t)v;
  return 1;
}

/* Parse text for key k and store it.  See attn_config_set for the rules. */
static attn_status set_text(attn_config *c, const cfg_key *k, const char *src,
                            const char *text, attn_diag *d) {
  char range[96];
  int64_t v = 0;
  switch (k->type) {
    case CFG_INT:
    case CFG_I64: {
      int r = parse_int(text, &v);
      if (r == 0)
        return attn_diag_set(
            d, ATTN_EINVAL, "%s: '%.*s' is not an integer (%s must be %s)", src,
            VALUE_SHOW, text, k->key, allowed(k, range, sizeof range));
      if (r < 0)
        return attn_diag_set(
            d, ATTN_EINVAL, "%s: %.*s is out of range (%s must be %s)", src,
            VALUE_SHOW, text, k->key, allowed(k, range, sizeof range));
      return check_and_store(c, k, src, text, v, NULL, d);
    }
    case CFG_BOOL: {
      static const char *const yes[] = {"true", "1", "yes"};
      static const char *const no[] = {"false", "0", "no"};
      for (size_t i = 0; i < 3; i++) {
        if (strcasecmp(text, yes[i]) == 0)
          return check_and_store(c, k, src, text, 1, NULL, d);
        if (strcasecmp(text, no[i]) == 0)
          return check_and_store(c, k, src, text, 0, NULL, d);
      }
      return attn_diag_set(
          d, ATTN_EINVAL, "%s: '%.*s' is not a boolean (%s must be %s)", src,
          VALUE_SHOW, text, k->key, allowed(k, range, sizeof range));
    }
    case CFG_ENUM:
      for (int64_t i = 0; k->names[i]; i++)
        if (strcmp(text, k->names[i]) == 0)
          return check_and_store(c, k, src, text, i, NULL, d);
      return attn_diag_set(d, ATTN_EINVAL, "%s: '%.*s' is not one of %s", src,
                           VALUE_SHOW, text, allowed(k, range, sizeof range));
    case CFG_STR:
    case CFG_PATH:
      return check_and_store(c, k, src, text, 0, text, d);
  }
  return attn_diag_set(d, ATTN_EINTERNAL, "%s: bad key type", src);
}

/* Room for a file-relative path before its length check: the working
 * directory (up to PATH_MAX), the file's folder and the value. */
#define JOIN_MAX (3 * 4096)

/* Skip leading "./" (and the slashes after it). */
static const char *skip_dot_slash(const char *p) {
  while (p[0] == '.' && p[1] == '/')
    for (p += 2; *p == '/';) p++;
  return p;
}

/* value, a path written in the config file `file`, as attnd must open it,
 * into buf: an absolute value as it is; a relative one joined to the
 * file's folder, which is made absolute with the working directory when
 * the file was named by a relative path (so that --check-config prints a
 * path that means the same wherever it is read).  Returns false when the
 * result does not fit size. */
static bool path_in_folder(const char *file, const char *value, char *buf,
                           size_t size) {
  if (value[0] == '/' || value[0] == '\0')
    return snprintf(buf, size, "%s", value) < (int)size;
  file = skip_dot_slash(file);
  value = skip_dot_slash(value);
  if (strcmp(value, ".") == 0) value = "";
  /* the folder: "/etc" of "/etc/a.json", "/" of "/a.json", "/w/c" of
   * "c/a.json" in /w, or "c" (".") when the working directory is unknown */
  const char *slash = strrchr(file, '/');
  int dir_len = slash ? (int)(slash - file) : 0;
  size_t n;
  if (file[0] == '/') {
    n = (size_t)snprintf(buf, size, "%.*s", dir_len ? dir_len : 1, file);
  } else if (getcwd(buf, size)) {
    n = strlen(buf);
    if (dir_len)
      n += (size_t)snprintf(buf + n, size - n, "%s%.*s",
                            buf[n - 1] == '/' ? "" : "/", dir_len, file);
  } else {
    n = (size_t)snprintf(buf, size, "%.*s", dir_len ? dir_len : 1,
                         dir_len ? file : ".");
  }
  if (n >= size) return false;
  if (*value &&
      (size_t)snprintf(buf + n, size - n, "%s%s", buf[n - 1] == '/' ? "" : "/",
                       value) >= size - n)
    return false;
  return true;
}

static const char *json_type_name(const cJSON *it) {
  if (cJSON_IsBool(it)) return "a boolean";
  if (cJSON_IsNull(it)) return "null";
  if (cJSON_IsNumber(it)) return "a number";
  if (cJSON_IsString(it)) return "a string";
  if (cJSON_IsArray(it)) return "an array";
  if (cJSON_IsObject(it)) return "an object";
  return "an invalid value";
}

/* A list key (cors_allow_origins, access_log_exclude) given as a JSON array of
 * strings in the config file: its items joined with ", ", as the text form
 * lists them. */
static attn_status set_list(attn_config *c, const cfg_key *k, const char *src,
                            const cJSON *it, attn_diag *d) {
  size_t n = 0, i = 0;
  for (const cJSON *e = it->child; e; e = e->next, i++) {
    if (!cJSON_IsString(e))
      return attn_diag_set(d, ATTN_EINVAL, "%s[%zu]: must be a string, not %s",
                           src, i, json_type_name(e));
    n += strlen(e->valuestring) + 2;
  }
  char *text = malloc(n + 1);
  if (!text) return attn_diag_set(d, ATTN_ENOMEM, "%s: out of memory", src);
  size_t at = 0;
  for (const cJSON *e = it->child; e; e = e->next) {
    size_t len = strlen(e->valuestring);
    if (e != it->child) memcpy(text + at, ", ", 2), at += 2;
    memcpy(text + at, e->valuestring, len);
    at += len;
  }
  text[at] = '\0';
  attn_status st = set_text(c, k, src, text, d);
  free(text);
  return st;
}

/* Store the cJSON value `it` for key k, read from the config file `file`.
 * src is "FILE: key". */
static attn_status set_json(attn_config *c, const cfg_key *k, const char *src,
                            const cJSON *it, const char *file, attn_diag *d) {
  if (cJSON_IsArray(it) && (strcmp(k->key, "cors_allow_origins") == 0 ||
                            strcmp(k->key, "access_log_exclude") == 0))
    return set_list(c, k, src, it, d);
  static const char *const want[] = {
      [CFG_INT] = "an integer",     [CFG_I64] = "an integer",
      [CFG_BOOL] = "true or false", [CFG_ENUM] = "a string",
      [CFG_STR] = "a string",       [CFG_PATH] = "a string"};
  char shown[40];
  bool ok_type = false;
  switch (k->type) {
    case CFG_INT:
    case CFG_I64:
      ok_type = cJSON_IsNumber(it);
      break;
    case CFG_BOOL:
      ok_type = cJSON_IsBool(it);
      break;
    case CFG_ENUM:
    case CFG_STR:
    case CFG_PATH:
      ok_type = cJSON_IsString(it) && it->valuestring;
      break;
  }
  if (!ok_type)
    return attn_diag_set(d, ATTN_EINVAL, "%s: must be %s, not %s", src,
                         want[k->type], json_type_name(it));
  switch (k->type) {
    case CFG_INT:
    case CFG_I64: {
      double x = it->valuedouble;
      snprintf(shown, sizeof shown, "%.15g", x);
      /* Compare as doubles first: also rejects NaN/Inf and anything that would
       * not fit int64 (all ranges are far inside +-2^53, so this is exact). */
      if (!(x >= (double)k->min && x <= (double)k->max))
        return check_and_store(c, k, src, shown, x < 0 ? INT64_MIN : INT64_MAX,
                               NULL, d);
      int64_t v = (int64_t)x;
      if ((double)v != x)
        return attn_diag_set(d, ATTN_EINVAL, "%s: %s is not an integer", src,
                             shown);
      return check_and_store(c, k, src, shown, v, NULL, d);
    }
    case CFG_BOOL:
      return check_and_store(c, k, src, "", cJSON_IsTrue(it), NULL, d);
    case CFG_ENUM:
    case CFG_STR:
      return set_text(c, k, src, it->valuestring, d);
    case CFG_PATH: {
      const char *v = it->valuestring;
      if (v[0] == '/' || v[0] == '\0') return set_text(c, k, src, v, d);
      char *joined = malloc(JOIN_MAX);
      if (!joined)
        return attn_diag_set(d, ATTN_ENOMEM, "%s: out of memory", src);
      char from[ATTN_DIAG_MAX + VALUE_SHOW + 48];
      snprintf(from, sizeof from, "%s '%.*s', relative to the file's folder",
               src, VALUE_SHOW, v);
      attn_status st =
          path_in_folder(file, v, joined, JOIN_MAX)
              ? set_text(c, k, from, joined, d)
              : attn_diag_set(d, ATTN_EINVAL, "%s: path too long", from);
      free(joined);
      return st;
    }
  }
  return attn_diag_set(d, ATTN_EINTERNAL, "%s: bad key type", src);
}

/* ---- Public: defaults, set, names --------------------------------------- */

void attn_config_defaults(attn_config *c) {
  memset(c, 0, sizeof *c);
  for (size_t i = 0; i < N_KEYS; i++)
    store(c, &keys[i], keys[i].def, keys[i].sdef);
}

static attn_status unknown_key(const char *prefix, const char *key,
                               attn_diag *d) {
  const char *near = closest(key, NULL);
  if (near)
    return attn_diag_set(d, ATTN_EINVAL,
                         "%sunknown key '%.*s' (did you mean '%s'?)", prefix,
                         VALUE_SHOW, key, near);
  return attn_diag_set(d, ATTN_EINVAL, "%sunknown key '%.*s'", prefix,
                       VALUE_SHOW, key);
}

attn_status attn_config_set(attn_config *c, const char *key, const char *value,
                            attn_diag *d) {
  if (!c || !key || !value)
    return attn_diag_set(d, ATTN_EINVAL, "attn_config_set: NULL argument");
  const cfg_key *k = find_key(key);
  if (!k) return unknown_key("", key, d);
  attn_config tmp = *c;
  attn_status st = set_text(&tmp, k, k->key, value, d);
  if (st == ATTN_OK) *c = tmp;
  return st;
}

const char *attn_config_key_name(size_t i) {
  return i < N_KEYS ? keys[i].key : NULL;
}

const char *attn_config_env_unknown(const char *name) {
  static const char *const extra[] = {"config", NULL};
  char key[KEY_NAME_MAX + 1];
  size_t n = 0;
  if (!name || strncmp(name, "ATTND_", 6) != 0) return NULL;
  if (strcmp(name, "ATTND_CONFIG") == 0) return NULL;
  if (strcmp(name, "ATTND_API_KEY") == 0) return NULL; /* main reads it */
  for (size_t i = 0; i < N_KEYS; i++)
    if (strcmp(name, keys[i].env) == 0) return NULL;
  /* ATTND_WORKRS -> "workrs", compared with the key names */
  for (const char *p = name + 6; *p && n < KEY_NAME_MAX; p++)
    key[n++] = *p >= 'A' && *p <= 'Z' ? (char)(*p - 'A' + 'a') : *p;
  key[n] = '\0';
  const char *best = closest(key, extra);
  if (!best) return "";
  if (best == extra[0]) return "ATTND_CONFIG";
  for (size_t i = 0; i < N_KEYS; i++)
    if (best == keys[i].key) return keys[i].env;
  return "";
}

const char *attn_sched_policy_name(attn_sched_policy p) {
  return (unsigned)p < 2 ? sched_policy_names[p] : NULL;
}

const char *attn_model_control_name(attn_model_control m) {
  return (unsigned)m < 2 ? model_control_names[m] : NULL;
}

/* ---- Public: file ------------------------------------------------------- */

/* Read all of path into a NUL-terminated malloc'd buffer.  The buffer
 * starts at the file's size and one byte more (to see it grow meanwhile),
 * and doubles while it fills, up to one byte past the limit. */
static attn_status read_file(const char *path, char **out, attn_diag *d) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return attn_diag_set(d, ATTN_EIO, "%s: cannot open: %s", path,
                         strerror(errno));
  const size_t limit = ATTN_MAX_CONFIG_FILE_BYTES;
  struct stat st;
  size_t cap = 4096, n = 0;
  if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) &&
      st.st_size < (off_t)limit)
    cap = (size_t)st.st_size + 1;
  char *buf = NULL;
  for (;;) {
    char *grown = realloc(buf, cap + 1);
    if (!grown) {
      free(buf);
      fclose(f);
      return attn_diag_set(d, ATTN_ENOMEM, "%s: out of memory", path);
    }
    buf = grown;
    n += fread(buf + n, 1, cap - n, f);
    if (n < cap || cap > limit) break; /* the end, an error or too big */
    cap = cap > limit / 2 ? limit + 1 : cap * 2;
  }
  int err = ferror(f) ? errno : 0; /* e.g. EISDIR for a directory */
  fclose(f);
  if (err) {
    free(buf);
    return attn_diag_set(d, ATTN_EIO, "%s: cannot read: %s", path,
                         strerror(err));
  }
  if (n > limit) {
    free(buf);
    return attn_diag_set(d, ATTN_ETOOBIG, "%s: larger than %d bytes", path,
                         ATTN_MAX_CONFIG_FILE_BYTES);
  }
  buf[n] = '\0';
  if (strlen(buf) != n) {
    free(buf);
    return attn_diag_set(d, ATTN_EPARSE, "%s: contains a NUL byte", path);
  }
  *out = buf;
  return ATTN_OK;
}

attn_status attn_config_load_file(attn_config *c, const char *path,
                                  attn_diag *d) {
  if (!c || !path)
    return attn_diag_set(d, ATTN_EINVAL,
                         "attn_config_load_file: NULL argument");
  char *text = NULL;
  attn_status st = read_file(path, &text, d);
  if (st != ATTN_OK) return st;

  const char *end = NULL;
  cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
  if (!root) {
    int line = 1, col = 1;
    if (!end) end = text;
    for (const char *p = text; p < end && *p; p++) {
      if (*p == '\n')
        line++, col = 1;
      else
        col++;
    }
    free(text);
    return attn_diag_set(d, ATTN_EPARSE, "%s:%d:%d: invalid JSON", path, line,
                         col);
  }
  free(text);
  if (!cJSON_IsObject(root)) {
    st = attn_diag_set(d, ATTN_EPARSE, "%s: must be a JSON object, not %s",
                       path, json_type_name(root));
    cJSON_Delete(root);
    return st;
  }

  attn_config tmp = *c;
  char src[ATTN_DIAG_MAX];
  char prefix[ATTN_DIAG_MAX];
  for (const cJSON *it = root->child; it && st == ATTN_OK; it = it->next) {
    const char *name = it->string ? it->string : "";
    for (const cJSON *prev = root->child; prev != it; prev = prev->next) {
      if (prev->string && strcmp(prev->string, name) == 0) {
        st = attn_diag_set(d, ATTN_EINVAL, "%s: duplicate key '%.*s'", path,
                           VALUE_SHOW, name);
        break;
      }
    }
    if (st != ATTN_OK) break;
    const cfg_key *k = find_key(name);
    if (!k) {
      snprintf(prefix, sizeof prefix, "%s: ", path);
      st = unknown_key(prefix, name, d);
      break;
    }
    snprintf(src, sizeof src, "%s: %s", path, k->key);
    st = set_json(&tmp, k, src, it, path, d);
  }
  cJSON_Delete(root);
  if (st == ATTN_OK) *c = tmp;
  return st;
}

/* ---- Public: command line ----------------------------------------------- */

/* Option names that are not keys, with '_' for '-' (for suggestions). */
static const char *const extra_opts[] = {
    "config", "check_config", "healthcheck", "reload", "help", "version", NULL};

typedef enum {
  OPT_KEY,
  OPT_CONFIG,
  OPT_CHECK,
  OPT_HEALTHCHECK,
  OPT_RELOAD,
  OPT_HELP,
  OPT_VERSION
} opt_kind;

/* --healthcheck's optional URL: "--healthcheck=URL", or the argument after
 * "--healthcheck" unless it begins with '-' (then it is the next option).
 * argv[i] is the option.  *used is set to 1 when argv[i + 1] is the URL. */
static const char *healthcheck_url(int argc, char **argv, int i, int *used) {
  const char *a = argv[i];
  *used = 0;
  if (a[13] == '=') return a + 14;
  if (i + 1 < argc && argv[i + 1][0] != '-') {
    *used = 1;
    return argv[i + 1];
  }
  return NULL;
}

/* Is a "--reload" or "--reload=..."? */
static bool is_reload(const char *a) {
  return strncmp(a, "--reload", 8) == 0 && (a[8] == '\0' || a[8] == '=');
}

/* Is a "--healthcheck" or "--healthcheck=..."? */
static bool is_healthcheck(const char *a) {
  return strncmp(a, "--healthcheck", 13) == 0 &&
         (a[13] == '\0' || a[13] == '=');
}

typedef struct cli_opt {
  opt_kind kind;
  const cfg_key *key;          /* OPT_KEY */
  const char *value;           /* OPT_KEY, OPT_CONFIG */
  char flag[KEY_NAME_MAX + 8]; /* "--port", for messages */
} cli_opt;

/* Decode argv[*i] (and its value, possibly argv[*i + 1]) into *o, advancing
 * *i past what was used.  Never changes anything else. */
static attn_status next_opt(int argc, char **argv, int *i, cli_opt *o,
                            attn_diag *d) {
  const char *a = argv[*i];
  o->key = NULL;
  o->value = NULL;
  if (strcmp(a, "-h") == 0) a = "--help";
  if (strcmp(a, "-V") == 0) a = "--version";
  if (strncmp(a, "--", 2) != 0 || a[2] == '\0')
    return attn_diag_set(d, ATTN_EINVAL,
                         "unexpected argument '%.*s'; try --help", VALUE_SHOW,
                         a);
  const char *name = a + 2;
  const char *eq = strchr(name, '=');
  size_t len = eq ? (size_t)(eq - name) : strlen(name);
  snprintf(o->flag, sizeof o->flag, "--%.*s",
           (int)(len < KEY_NAME_MAX ? len : KEY_NAME_MAX), name);

  bool takes_value = true;
  if (is_healthcheck(a)) {
    int used;
    o->kind = OPT_HEALTHCHECK;
    o->value = healthcheck_url(argc, argv, *i, &used);
    if (o->value && !*o->value)
      return attn_diag_set(d, ATTN_EINVAL,
                           "option '--healthcheck=' needs a URL after '=' "
                           "(or none: --healthcheck alone probes this "
                           "configuration's port)");
    *i += 1 + used;
    return ATTN_OK;
  }
  if (is_reload(a)) { /* --reload, or --reload=PID (never a separate PID) */
    o->kind = OPT_RELOAD;
    o->value = a[8] == '=' ? a + 9 : NULL;
    if (o->value) {
      char *end;
      long pid = strtol(o->value, &end, 10);
      if (!*o->value || *end || pid < 1 || pid > 0x7fffffffL)
        return attn_diag_set(d, ATTN_EINVAL,
                             "option '--reload=%.*s': give the process id of "
                             "the attnd to reload (a positive integer), or "
                             "nothing: --reload alone finds it",
                             VALUE_SHOW, o->value);
    }
    ++*i;
    return ATTN_OK;
  }
  if ((o->key = find_flag(name, len)) != NULL) {
    o->kind = OPT_KEY;
  } else if (len == 6 && strncmp(name, "config", 6) == 0) {
    o->kind = OPT_CONFIG;
  } else if (len == 12 && strncmp(name, "check-config", 12) == 0) {
    o->kind = OPT_CHECK, takes_value = false;
  } else if (len == 4 && strncmp(name, "help", 4) == 0) {
    o->kind = OPT_HELP, takes_value = false;
  } else if (len == 7 && strncmp(name, "version", 7) == 0) {
    o->kind = OPT_VERSION, takes_value = false;
  } else {
    char under[KEY_NAME_MAX + 1], sugg[KEY_NAME_MAX + 8];
    size_t n = 0;
    for (; n < len && n < KEY_NAME_MAX; n++)
      under[n] = name[n] == '-' ? '_' : name[n];
    under[n] = '\0';
    const char *near = len <= KEY_NAME_MAX ? closest(under, extra_opts) : NULL;
    if (near)
      return attn_diag_set(d, ATTN_EINVAL,
                           "unknown option '%s' (did you mean '%s'?)", o->flag,
                           flag_name(near, sugg, sizeof sugg));
    return attn_diag_set(d, ATTN_EINVAL, "unknown option '%s'; try --help",
                         o->flag);
  }

  if (!takes_value) {
    if (eq)
      return attn_diag_set(d, ATTN_EINVAL, "option '%s' takes no value",
                           o->flag);
  } else if (eq) {
    o->value = eq + 1;
  } else if (*i + 1 < argc && strncmp(argv[*i + 1], "--", 2) != 0) {
    o->value = argv[++*i];
  } else {
    return attn_diag_set(d, ATTN_EINVAL, "option '%s' needs a value", o->flag);
  }
  ++*i;
  return ATTN_OK;
}

/* One origin of cors_allow_origins, o[0, n): "*" alone, or
 * scheme://host[:port] with scheme http or https and nothing after (what a
 * browser sends in Origin).  NULL when it is one, else what is wrong. */
static const char *origin_problem(const char *o, size_t n) {
  size_t s = n >= 7 && !strncasecmp(o, "http://", 7)    ? 7
             : n >= 8 && !strncasecmp(o, "https://", 8) ? 8
                                                        : 0;
  if (!s) return "does not begin with http:// or https://";
  if (s == n) return "has no host";
  for (size_t i = s; i < n; i++) {
    if (o[i] == '/') return "has a path (an origin is scheme://host[:port])";
    if ((unsigned char)o[i] <= 0x20 || o[i] == 0x7f || o[i] == '*' ||
        o[i] == '?' || o[i] == '#')
      return "is not an origin (scheme://host[:port])";
  }
  return NULL;
}

/* The access keys that must agree: both TLS files or neither, a client CA
 * only with them, and each origin of cors_allow_origins. */
static attn_status check_access(const attn_config *c, attn_diag *d) {
  if (!*c->tls_cert_file != !*c->tls_key_file)
    return attn_diag_set(
        d, ATTN_EINVAL,
        "%s is set but %s is not: HTTPS needs both the certificate and its "
        "private key",
        *c->tls_cert_file ? "tls_cert_file" : "tls_key_file",
        *c->tls_cert_file ? "tls_key_file" : "tls_cert_file");
  if (*c->tls_client_ca_file && !*c->tls_cert_file)
    return attn_diag_set(d, ATTN_EINVAL,
                         "tls_client_ca_file is set without tls_cert_file "
                         "and tls_key_file: mutual TLS needs HTTPS");
  const char *p = c->cors_allow_origins;
  int n_items = 0, star = 0;
  while (*p) {
    p += strspn(p, " \t,");
    size_t n = strcspn(p, " \t,");
    if (!n) break;
    n_items++;
    if (n == 1 && *p == '*') {
      star = 1;
    } else {
      const char *why = origin_problem(p, n);
      if (why)
        return attn_diag_set(d, ATTN_EINVAL, "cors_allow_origins: '%.*s' %s",
                             (int)(n < 80 ? n : 80), p, why);
    }
    p += n;
  }
  if (star && n_items > 1)
    return attn_diag_set(d, ATTN_EINVAL,
                         "cors_allow_origins: '*' allows every origin; give "
                         "it alone, or list the origins");
  return ATTN_OK;
}

/* Each prefix of access_log_exclude (split as cors_allow_origins is:
 * commas or spaces) is a path: it begins with '/' (set_text refused
 * control bytes already). */
static attn_status check_access_log_exclude(const attn_config *c,
                                            attn_diag *d) {
  const char *p = c->access_log_exclude;
  while (*p) {
    p += strspn(p, " \t,");
    size_t n = strcspn(p, " \t,");
    if (!n) break;
    if (*p != '/')
      return attn_diag_set(d, ATTN_EINVAL,
                           "access_log_exclude: '%.*s' does not begin with "
                           "'/' (each item is a path prefix, such as "
                           "/v2/health/ or /metrics)",
                           (int)(n < 80 ? n : 80), p);
    p += n;
  }
  return ATTN_OK;
}

/* The flag of a command (--check-config, --healthcheck, --reload). */
static const char *action_flag(attn_cli_action a) {
  return a == ATTN_CLI_CHECK         ? "--check-config"
         : a == ATTN_CLI_HEALTHCHECK ? "--healthcheck"
                                     : "--reload";
}

attn_status attn_config_from_cli(attn_config *c, int argc, char **argv,
                                 const char *(*getenv_fn)(const char *),
                                 attn_cli_action *action, attn_diag *d) {
  if (!c || !action || argc < 0 || (argc > 0 && !argv))
    return attn_diag_set(d, ATTN_EINVAL, "attn_config_from_cli: bad argument");
  attn_cli_action act = ATTN_CLI_RUN;
  const char *file = NULL;
  cli_opt o;
  attn_status st;

  /* Pass 1: syntax, actions and the config file; no values applied yet. */
  for (int i = 1; i < argc;) {
    if ((st = next_opt(argc, argv, &i, &o, d)) != ATTN_OK) return st;
    if (o.kind == OPT_HELP || o.kind == OPT_VERSION) {
      *action = o.kind == OPT_HELP ? ATTN_CLI_HELP : ATTN_CLI_VERSION;
      return ATTN_OK;
    }
    if (o.kind == OPT_CHECK || o.kind == OPT_HEALTHCHECK ||
        o.kind == OPT_RELOAD) {
      attn_cli_action want = o.kind == OPT_CHECK         ? ATTN_CLI_CHECK
                             : o.kind == OPT_HEALTHCHECK ? ATTN_CLI_HEALTHCHECK
                                                         : ATTN_CLI_RELOAD;
      if (act != ATTN_CLI_RUN && act != want)
        return attn_diag_set(d, ATTN_EINVAL,
                             "%s and %s cannot be used together",
                             action_flag(act), action_flag(want));
      act = want;
    }
    if (o.kind == OPT_CONFIG) {
      if (o.value[0] == '\0')
        return attn_diag_set(d, ATTN_EINVAL,
                             "option '--config' needs a file name");
      file = o.value;
    }
  }

  attn_config tmp;
  attn_config_defaults(&tmp);

  /* Layer 2: the file. */
  if (!file && getenv_fn) {
    file = getenv_fn("ATTND_CONFIG");
    if (file && file[0] == '\0')
      return attn_diag_set(d, ATTN_EINVAL, "ATTND_CONFIG is set but empty");
  }
  if (file && (st = attn_config_load_file(&tmp, file, d)) != ATTN_OK) return st;

  /* Layer 3: the environment. */
  for (size_t i = 0; getenv_fn && i < N_KEYS; i++) {
    const char *v = getenv_fn(keys[i].env);
    if (v && (st = set_text(&tmp, &keys[i], keys[i].env, v, d)) != ATTN_OK)
      return st;
  }

  /* Layer 4: flags, left to right. */
  for (int i = 1; i < argc;) {
    if ((st = next_opt(argc, argv, &i, &o, d)) != ATTN_OK) return st;
    if (o.kind == OPT_KEY &&
        (st = set_text(&tmp, o.key, o.flag, o.value, d)) != ATTN_OK)
      return st;
  }

  /* Across keys: settings that are each in range but cannot work together. */
  if (tmp.max_total_body_bytes && tmp.max_total_body_bytes < tmp.max_body_bytes)
    return attn_diag_set(
        d, ATTN_EINVAL,
        "max_total_body_bytes=%lld is less than max_body_bytes=%lld: a body "
        "of max_body_bytes could never be accepted (raise it, or set 0 for "
        "auto)",
        (long long)tmp.max_total_body_bytes, (long long)tmp.max_body_bytes);

  if ((st = check_access(&tmp, d)) != ATTN_OK) return st;
  if ((st = check_access_log_exclude(&tmp, d)) != ATTN_OK) return st;

  *c = tmp;
  *action = act;
  return ATTN_OK;
}

int attn_config_reload_arg(int argc, char **argv) {
  int pid = -1;
  for (int i = 1; argv && i < argc; i++)
    if (argv[i] && is_reload(argv[i]))
      pid = argv[i][8] == '=' ? (int)strtol(argv[i] + 9, NULL, 10) : 0;
  return pid;
}

bool attn_config_healthcheck_arg(int argc, char **argv, const char **url) {
  bool found = false;
  int used;
  *url = NULL;
  for (int i = 1; argv && i < argc; i++) {
    if (!argv[i] || !is_healthcheck(argv[i])) continue;
    found = true;
    *url = healthcheck_url(argc, argv, i, &used);
  }
  return found;
}

attn_status attn_config_check_models_dir(const attn_config *c, attn_diag *d) {
  const char *dir = c->models_dir, *from = c->models_dir_from;
  char cwd[4096] = "", where[ATTN_DIAG_MAX * 2];
  struct stat st;
  /* "(set by --models-dir, relative to the working directory /w)"; a
   * file's relative path is absolute by now (path_in_folder) */
  if (dir[0] != '/' && !getcwd(cwd, sizeof cwd)) cwd[0] = '\0';
  snprintf(where, sizeof where, "(%s%.160s%s%.160s)",
           *from ? "set by " : "the built-in default", from,
           *cwd ? ", relative to the working directory " : "", cwd);
  if (stat(dir, &st) != 0) {
    int err = errno;
    if (err != ENOENT && err != ENOTDIR)
      return attn_diag_set(d, ATTN_EIO, "models_dir '%s' %s: %s", dir, where,
                           strerror(err));
    if (!*from)
      return attn_diag_set(d, ATTN_ENOTFOUND,
                           "models_dir '%s' %s does not exist: only the "
                           "built-in models are served",
                           dir, where);
    return attn_diag_set(d, ATTN_EINVAL,
                         "models_dir '%s' %s does not exist (create it, or "
                         "fix the path)",
                         dir, where);
  }
  if (!S_ISDIR(st.st_mode))
    return attn_diag_set(d, ATTN_EINVAL,
                         "models_dir '%s' %s is not a directory", dir, where);
  return ATTN_OK;
}

int64_t attn_config_body_budget(const attn_config *c, uint64_t memory_limit) {
  if (c->max_total_body_bytes) return c->max_total_body_bytes;
  uint64_t half = memory_limit / 2;
  if (half > (uint64_t)ATTN_MAX_TOTAL_BODY_BYTES)
    half = (uint64_t)ATTN_MAX_TOTAL_BODY_BYTES;
  return (int64_t)half > c->max_body_bytes ? (int64_t)half : c->max_body_bytes;
}

/* ---- Public: output ----------------------------------------------------- */

/* Value of key k in c as text (JSON scalar syntax without string quotes). */
static const char *value_text(const attn_config *c, const cfg_key *k, char *buf,
                              size_t size) {
  const char *field = (const char *)c + k->off;
  int x;
  int64_t v;
  bool b;
  switch (k->type) {
    case CFG_INT:
      memcpy(&x, field, sizeof x);
      snprintf(buf, size, "%d", x);
      return buf;
    case CFG_I64:
      memcpy(&v, field, sizeof v);
      snprintf(buf, size, "%" PRId64, v);
      return buf;
    case CFG_BOOL:
      memcpy(&b, field, sizeof b);
      return b ? "true" : "false";
    case CFG_ENUM:
      memcpy(&x, field, sizeof x);
      return x >= 0 && x <= k->max ? k->names[x] : "?";
    case CFG_STR:
    case CFG_PATH:
      return field;
  }
  return "?";
}

void attn_config_usage(FILE *f, const char *prog) {
  if (!prog || !*prog) prog = "attnd";
  char flag[KEY_NAME_MAX + 8], range[96], val[32];
  attn_config def;
  attn_config_defaults(&def);
  fprintf(
      f,
      "Usage: %s [--config FILE] [--KEY VALUE | --KEY=VALUE]...\n"
      "HTTP attention-inference server.\n"
      "\n"
      "Settings come from built-in defaults, then the JSON file named by\n"
      "--config or ATTND_CONFIG (none by default), then ATTND_<KEY>\n"
      "environment variables, then flags; later ones win.\n"
      "\n"
      "Options:\n"
      "  --config FILE   read settings from a JSON file (env ATTND_CONFIG)\n"
      "  --check-config  validate, print the effective settings as JSON, exit\n"
      "  --healthcheck [URL]\n"
      "                  ask a running attnd whether it is ready: exit 0 when\n"
      "                  URL answers 200, else 1 with the reason on stderr\n"
      "                  (for Docker HEALTHCHECK and exec probes).  URL:\n"
      "                  http://HOST[:PORT][/PATH]; by default\n"
      "                  http://127.0.0.1:PORT/v2/health/ready, PORT from the\n"
      "                  settings below (HOST too, unless 0.0.0.0 or ::);\n"
      "                  gives up after %d ms\n"
      "  --reload[=PID]  make the running attnd reload (API keys, admin\n"
      "                  keys, every model file: what SIGHUP does) and wait\n"
      "                  for it to confirm: exit 0 once it has, else 1 with\n"
      "                  the reason on stderr.  Without PID: the attnd of\n"
      "                  this binary, PID 1 in its container; of several, the\n"
      "                  one whose port is the port of the settings below\n"
      "  -h, --help      print this help and exit\n"
      "  -V, --version   print the version and exit\n"
      "\n"
      "Settings:\n",
      prog, ATTN_HEALTHCHECK_TIMEOUT_MS);
  for (size_t i = 0; i < N_KEYS; i++) {
    const cfg_key *k = &keys[i];
    const char *meta = k->type == CFG_BOOL   ? "BOOL"
                       : k->type == CFG_STR  ? "TEXT"
                       : k->type == CFG_PATH ? "PATH"
                       : k->type == CFG_ENUM ? "NAME"
                                             : "N";
    fprintf(f, "  %s %s\n      %s\n", flag_name(k->key, flag, sizeof flag),
            meta, k->help);
    const char *dv = value_text(&def, k, val, sizeof val);
    if (k->type == CFG_STR || k->type == CFG_PATH)
      fprintf(f, "      default \"%s\"", dv);
    else
      fprintf(f, "      default %s", dv);
    if (k->type == CFG_INT || k->type == CFG_I64 || k->type == CFG_ENUM)
      fprintf(f, ", %s %s%s%s", k->type == CFG_ENUM ? "one of" : "range",
              allowed(k, range, sizeof range), *k->unit ? " " : "", k->unit);
    fprintf(f, ", env %s\n", k->env);
  }
}

static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p);
    else if (*p < 0x20 || *p == 0x7f)
      fprintf(f, "\\u%04x", *p);
    else
      fputc(*p, f);
  }
  fputc('"', f);
}

attn_status attn_config_write_json(const attn_config *c, FILE *f) {
  if (!c || !f) return ATTN_EINVAL;
  char val[32];
  fputs("{\n", f);
  for (size_t i = 0; i < N_KEYS; i++) {
    const cfg_key *k = &keys[i];
    fprintf(f, "  \"%s\": ", k->key);
    const char *v = value_text(c, k, val, sizeof val);
    if (k->type == CFG_STR || k->type == CFG_PATH || k->type == CFG_ENUM)
      json_string(f, v);
    else
      fputs(v, f);
    fputs(i + 1 < N_KEYS ? ",\n" : "\n", f);
  }
  fputs("}\n", f);
  if (fflush(f) != 0 || ferror(f)) return ATTN_EIO;
  return ATTN_OK;
}
