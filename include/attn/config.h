/* config.h - the settings of attnd as one plain struct, and how to fill it.
 *
 * Every key is one row of a single table in src/config/config.c; that table
 * gives the key's type, default, range, environment variable, flag and help
 * text, and drives defaults, the JSON file, the environment, argv, --help and
 * --check-config alike.  docs/configuration.md describes every key;
 * config/attnd.json lists every key with its default.
 *
 * Layers, later ones win:  built-in defaults < config file < environment
 * (ATTND_<KEY>) < command-line flags (--<key-with-dashes>).  A file is read
 * only when --config FILE or ATTND_CONFIG names one.
 *
 * Modules receive a const attn_config (or the fields they need), never the
 * file, the environment or argv.  Only main calls attn_config_from_cli.
 *
 * No global state: every function is reentrant and may run on any thread as
 * long as two threads do not write the same attn_config.  Functions that fail
 * leave *c unchanged and explain why in the attn_diag (which may be NULL).
 */
#ifndef ATTN_CONFIG_H
#define ATTN_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "attn/limits.h"
#include "attn/log.h" /* attn_log_level, attn_log_format: log_level, ... */
#include "attn/status.h"

/* Linux scheduling policy of attnd's threads (systemd's CPUSchedulingPolicy
 * names): SCHED_BATCH in place of the default SCHED_OTHER, or the policy
 * attnd was started with (SCHED_OTHER unless chosen otherwise). */
typedef enum { ATTN_SCHED_BATCH, ATTN_SCHED_OTHER } attn_sched_policy;

/* Who may change the model repository over HTTP (Triton's
 * --model-control-mode): nobody (load and unload answer 403), or clients
 * (with an admin key when keys are set). */
typedef enum {
  ATTN_MODEL_CONTROL_NONE,
  ATTN_MODEL_CONTROL_EXPLICIT
} attn_model_control;

/* The effective configuration.  Field names are the key names; units are in
 * the names or the comments.  Ranges are enforced when a value is set, so a
 * filled struct is always within them. */
typedef struct attn_config {
  char host[ATTN_MAX_HOST_LEN + 1]; /* listen address; "0.0.0.0" = all IPv4 */
  int port;                         /* 0 = ephemeral (kernel picks) */
  int workers;                      /* worker threads; 0 = auto (CPUs) */
  int blas_threads_per_worker;      /* threads one request may use; 0 auto */
  int http_threads;                 /* libmicrohttpd I/O threads */
  int queue_capacity;               /* queued requests beyond which: 503 */
  int64_t queue_timeout_ms;         /* max wait in queue; 0 = no limit */
  int64_t shutdown_delay_ms;        /* SIGTERM: unready, still serving */
  int64_t drain_timeout_ms;         /* grace after SIGTERM (and the delay) */
  int64_t max_body_bytes;           /* request body, bytes */
  int max_inflate_ratio;            /* inflated / sent; 0 = no limit */
  int64_t max_total_body_bytes;     /* all bodies held at once; 0 = auto */
  int64_t max_seq_len;              /* tokens per sequence */
  int64_t max_tensor_elements;      /* elements of any one tensor */
  int64_t max_weights_elements;     /* attention weights returned in JSON */
  int64_t kv_cache_bytes;           /* sessions' KV blocks; 0 = auto */
  int64_t max_sessions;             /* sessions open at once */
  int64_t session_idle_timeout_s;   /* idle session freed; 0 = never */
  /* sessions written here at shutdown, read back at start; "" = off */
  char session_dir[ATTN_MAX_PATH_LEN + 1];
  int max_connections;           /* open client connections */
  int connection_timeout_s;      /* idle connection timeout; 0 = none */
  int header_timeout_s;          /* request line + headers; 0 = none */
  int64_t body_min_rate_bytes_s; /* slower bodies cut after the above */
  int max_connections_per_ip;    /* 0 = no limit */
  char models_dir[ATTN_MAX_PATH_LEN + 1]; /* model definitions */
  /* Not a key: where models_dir was last set, for messages and for the rule
   * that a configured models_dir must exist: "" for the built-in default,
   * else the source as diagnostics name it ("FILE: models_dir",
   * "ATTND_MODELS_DIR", "--models-dir", "models_dir"), cut to fit. */
  char models_dir_from[ATTN_MAX_PATH_LEN + 1];
  /* The model of models_dir served under another name: "NEW" (the only
   * one) or "FROM=NEW" (attn_registry_create_named); "" = none. */
  char model_name[2 * ATTN_MODEL_MAX_NAME + 2];
  int models_poll_s; /* models_dir looked at for changes; 0 = never */
  attn_log_level log_level;
  attn_log_format log_format;
  attn_log_prefix_mode log_priority_prefix; /* "<N>" before each line */
  bool access_log;                          /* one log line per request */
  /* path prefixes whose requests get no access line ("/v2/health/,
   * /metrics"); "" = none */
  char access_log_exclude[ATTN_MAX_ACCESS_LOG_EXCLUDE_LEN + 1];
  attn_sched_policy cpu_scheduling_policy; /* of every attnd thread */
  /* A second port, on host, serving only GET /metrics; 0 = none. */
  int metrics_port;
  /* Access (docs/configuration.md, "Access"): "" = none / off. */
  char api_keys_file[ATTN_MAX_PATH_LEN + 1]; /* one key per line */
  bool metrics_require_key;                  /* GET /metrics needs a key */
  /* Keys that may also change the repository (load, unload). */
  char admin_api_keys_file[ATTN_MAX_PATH_LEN + 1];
  attn_model_control model_control;          /* load and unload over HTTP */
  char tls_cert_file[ATTN_MAX_PATH_LEN + 1]; /* PEM; with tls_key_file */
  char tls_key_file[ATTN_MAX_PATH_LEN + 1];
  char tls_client_ca_file[ATTN_MAX_PATH_LEN + 1]; /* mutual TLS */
  /* "https://a.example, http://b.example:8000", or "*" */
  char cors_allow_origins[ATTN_MAX_CORS_ORIGINS_LEN + 1];
} attn_config;

/* Fill *c with the built-in defaults.  Never fails. */
void attn_config_defaults(attn_config *c);

/* Set one key from text, the way an environment variable or flag does.
 * key is the key name ("workers"); value is parsed strictly: integers are
 * decimal, fully consumed and in range; bools are true/false/1/0/yes/no (any
 * case); enums are one of their names; strings must be non-empty and fit.
 * Returns ATTN_OK, or ATTN_EINVAL for an unknown key (the diagnostic suggests
 * the closest key) or a bad value (it names key, value and allowed range).
 * On failure *c is unchanged. */
attn_status attn_config_set(attn_config *c, const char *key, const char *value,
                            attn_diag *d);

/* Apply the JSON object in file `path` on top of *c.  Keys present override;
 * keys absent keep their value.  Numbers must be integral and in range,
 * strings/bools/enums must have the JSON type of the key.
 * Errors (diagnostic starts with the path):
 *   ATTN_EIO      cannot open or read the file
 *   ATTN_ETOOBIG  larger than ATTN_MAX_CONFIG_FILE_BYTES
 *   ATTN_EPARSE   not JSON, or not an object (line:column given)
 *   ATTN_EINVAL   unknown or duplicate key, wrong type, out of range
 * On failure *c is unchanged. */
attn_status attn_config_load_file(attn_config *c, const char *path,
                                  attn_diag *d);

/* What main should do after attn_config_from_cli succeeds. */
typedef enum {
  ATTN_CLI_RUN,         /* serve */
  ATTN_CLI_HELP,        /* print attn_config_usage to stdout, exit 0 */
  ATTN_CLI_VERSION,     /* print the version, exit 0 */
  ATTN_CLI_CHECK,       /* print attn_config_write_json to stdout, exit 0 */
  ATTN_CLI_HEALTHCHECK, /* probe a running attnd (attn_healthcheck) */
  ATTN_CLI_RELOAD       /* make a running attnd reload (attn_reload_*) */
} attn_cli_action;

/* Build the effective configuration from all layers:
 *   1. built-in defaults (whatever *c held before is ignored);
 *   2. the file named by --config FILE, else by ATTND_CONFIG, else none;
 *   3. ATTND_<KEY> for every key, looked up with getenv_fn;
 *   4. flags, left to right (a repeated flag: the last wins).
 * argv[0] is the program name.  Flags: --<key-with-dashes> VALUE or
 * --<key-with-dashes>=VALUE for every key, --config FILE, --check-config,
 * -h/--help and -V/--version.  --help and --version return at once with
 * *action set and *c unchanged (the rest of argv is not examined, no file or
 * variable is read).  A flag's value may not begin
 * with "--" (that is taken as a missing value).  getenv_fn may be NULL (no
 * environment) and is called only with names beginning "ATTND_".
 * Returns ATTN_OK with *c and *action set, or ATTN_EINVAL (unknown flag,
 * missing value, bad value; the diagnostic names the flag or variable; two
 * keys that cannot work together, such as max_total_body_bytes below
 * max_body_bytes) or any error of attn_config_load_file.  On failure *c and
 * *action are unchanged.  --healthcheck [URL] sets ATTN_CLI_HEALTHCHECK
 * after building *c like a start (the URL: attn_config_healthcheck_arg);
 * with --check-config it is an error.  --reload or --reload=PID sets
 * ATTN_CLI_RELOAD likewise (with either of the others: an error).  Nothing here
 * looks at models_dir on disk (attn_config_check_models_dir does). */
attn_status attn_config_from_cli(attn_config *c, int argc, char **argv,
                                 const char *(*getenv_fn)(const char *),
                                 attn_cli_action *action, attn_diag *d);

/* Does argv ask for --healthcheck, and with which URL?  *url is the URL
 * given ("--healthcheck=URL", or "--healthcheck URL" when URL does not
 * begin with '-'; a pointer into argv) or NULL for none.  Reads argv
 * alone, so it answers even for an argv that attn_config_from_cli refuses:
 * main uses it to exit 1, not 2, from a healthcheck whose settings are
 * wrong. */
bool attn_config_healthcheck_arg(int argc, char **argv, const char **url);

/* Does argv ask for --reload?  -1 when not, 0 for "--reload", PID for
 * "--reload=PID" (the last one given).  Reads argv alone, like
 * attn_config_healthcheck_arg (a refused argv still exits 1). */
int attn_config_reload_arg(int argc, char **argv);

/* Whether models_dir can be served, as a start (and --check-config) needs:
 *   ATTN_OK        it is a directory;
 *   ATTN_ENOTFOUND it does not exist and is the built-in default (nothing
 *                  configured it): only the built-in models are served, and
 *                  d says so, for a warning;
 *   ATTN_EINVAL    it was configured (file, environment, flag or
 *                  attn_config_set: models_dir_from is set) and does not
 *                  exist, or it is not a directory;
 *   ATTN_EIO       it cannot be examined (permissions).
 * Every diagnostic names the path and where it came from (with the working
 * directory when the path is relative to it). */
attn_status attn_config_check_models_dir(const attn_config *c, attn_diag *d);

/* The budget for request and response bodies held at once, in bytes:
 * max_total_body_bytes, or when that is 0 (auto) half of memory_limit (see
 * attn_memory_limit), but never less than max_body_bytes. */
int64_t attn_config_body_budget(const attn_config *c, uint64_t memory_limit);

/* Bytes of memory this process may use: the smallest of phys (the machine's
 * RAM) and the memory limits of its cgroup and each ancestor, cgroup v2
 * (memory.max) and v1 (memory.limit_in_bytes), as /proc/self/cgroup names
 * them and as a container sees its own (the mount's top).  Files are read
 * under root: "" for the real ones, a directory of fakes in tests.  Limits
 * that are absent, unreadable or "max" are skipped. */
uint64_t attn_memory_limit(const char *root, uint64_t phys);

/* The smallest CPU quota of this process's cgroup and its ancestors, in
 * CPUs: cgroup v2 cpu.max ("150000 100000" is 1.5; "max 100000" is none)
 * and v1 cpu.cfs_quota_us / cpu.cfs_period_us (-1 is none), found as
 * attn_memory_limit finds memory limits, under root likewise.  0 when no
 * quota applies (or none can be read). */
double attn_cpu_quota(const char *root);

/* CPUs attnd may use, what auto settings (workers = 0,
 * blas_threads_per_worker = 0) count: the smallest of online (CPUs online),
 * affinity (CPUs in its affinity mask; 0 when unknown) and quota rounded up
 * (attn_cpu_quota; 0 = none), at least 1.  why (may be NULL) gets what it
 * was made of, for the log: "2 CPUs allowed: cgroup CPU quota 1.5 CPUs, 4 in
 * the affinity mask, 8 online". */
int attn_cpus_allowed(int online, int affinity, double quota, char *why,
                      size_t why_size);

/* Print usage: every flag with its meaning, default, range and environment
 * variable, generated from the key table.  prog is argv[0] (may be NULL). */
void attn_config_usage(FILE *f, const char *prog);

/* Print *c as a JSON object, one key per line in table order, two-space
 * indent, trailing newline: the exact format of config/attnd.json, which the
 * file accepts back.  Returns ATTN_OK or ATTN_EIO when writing failed. */
attn_status attn_config_write_json(const attn_config *c, FILE *f);

/* For a variable of the environment that looks like attnd's but is not
 * read (a typo such as ATTND_WORKRS): name begins with "ATTND_" and is
 * neither ATTND_CONFIG nor ATTND_<KEY> of a key.  Returns NULL when attnd
 * reads name or name does not begin with "ATTND_"; otherwise the closest
 * variable attnd reads (within edit distance 2 of the key part), or "" when
 * none is that close. */
const char *attn_config_env_unknown(const char *name);

/* Name of the i-th key in table order ("host", "port", ...), or NULL when i
 * is past the last key.  For documentation checks and tests. */
const char *attn_config_key_name(size_t i);

/* Text name of the enum ("batch"); NULL for foreign values.  The log's
 * enums name themselves (attn_log_level_name, include/attn/log.h). */
const char *attn_sched_policy_name(attn_sched_policy p);
const char *attn_model_control_name(attn_model_control m);

#endif /* ATTN_CONFIG_H */
