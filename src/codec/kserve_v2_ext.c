/* kserve_v2_ext.c - Triton's extensions of KServe v2 that are not an
 * inference: the bodies of the model repository extension
 * (docs/protocol/extension_model_repository.md) and its answers, and the
 * statistics (extension_statistics.md).
 *
 * Design
 *  - A repository body is tiny by nature: index {"ready": bool}, load and
 *    unload {"parameters": {...}}, and tritonclient sends none for a load
 *    (empty or blank reads as {}).  So one longer than
 *    ATTN_MAX_REPO_BODY_BYTES is refused before a byte of it is parsed
 *    (ATTN_ETOOBIG: a 413), and the rest is parsed by src/json/ with the
 *    small depth and value limits of include/attn/limits.h: what a body can
 *    make the parser allocate is a few hundred KiB at most.  (cJSON, which
 *    read these bodies without a bound, took 2 GB for a 48 MiB one:
 *    issue 39.)
 *  - The keys are checked against a list per operation (repo_keys): one
 *    not on it is refused by name, Triton's load overrides ("config",
 *    "file:...") with a message of their own, since attnd loads only what
 *    its models directory holds.  A key given twice counts once, the
 *    first (what cJSON_GetObjectItemCaseSensitive finds).
 *  - The answers are written from plain rows that the server fills from
 *    the registry and the metrics (attn_v2_repo_entry,
 *    attn_v2_model_stats): nothing here knows models or counters.
 *
 * Threads: reentrant; no state.
 */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <string.h>

#include "attn/codec.h"
#include "attn/json.h"
#include "internal.h"

/* ---- the repository's bodies -------------------------------------------- */

/* The operation as messages name it. */
static const char *repo_what(attn_v2_repo_op op) {
  return op == ATTN_V2_REPO_INDEX  ? "POST /v2/repository/index"
         : op == ATTN_V2_REPO_LOAD ? "a load"
                                   : "an unload";
}

/* The body as a JSON object into *root (NULL when the body is blank: {}),
 * within the limits of the file's design. */
static attn_status repo_body(const char *body, size_t len, const char *what,
                             cJSON **root, attn_diag *d) {
  attn_diag pd = {{0}};
  size_t i = 0;
  *root = NULL;
  if (len > ATTN_MAX_REPO_BODY_BYTES)
    return attn_diag_set(d, ATTN_ETOOBIG,
                         "the body of %s is %zu bytes, above the limit of %zu "
                         "(it takes a few keys)",
                         what, len, ATTN_MAX_REPO_BODY_BYTES);
  while (i < len && (body[i] == ' ' || body[i] == '\t' || body[i] == '\r' ||
                     body[i] == '\n'))
    i++;
  if (i == len) return ATTN_OK;
  attn_status s =
      attn_json_parse_capped(body, len, ATTN_MAX_REPO_JSON_DEPTH,
                             ATTN_MAX_REPO_JSON_NODES, "", root, &pd);
  if (s == ATTN_ETOOBIG)
    return attn_diag_set(d, ATTN_EINVAL,
                         "the body of %s holds more than %d JSON values (it "
                         "takes a few keys)",
                         what, ATTN_MAX_REPO_JSON_NODES);
  if (s == ATTN_EINVAL) /* nested too deep: the parser says where */
    return attn_diag_set(d, s, "the body of %s: %s", what, pd.msg);
  if (s == ATTN_ENOMEM)
    return attn_diag_set(d, s, "out of memory reading the body of %s", what);
  if (s == ATTN_OK && cJSON_IsObject(*root)) return ATTN_OK;
  attn_json_free(*root);
  *root = NULL;
  return attn_diag_set(d, s ? s : ATTN_EINVAL,
                       "the body of %s must be a JSON object (or empty)", what);
}

/* Only the keys of `allowed` (a NULL-ended list) in object o (NULL: none),
 * named `where` in the message. */
static attn_status repo_keys(const cJSON *o, const char *const *allowed,
                             const char *where, attn_diag *d) {
  for (const cJSON *k = o ? o->child : NULL; k; k = k->next) {
    size_t i = 0;
    while (allowed[i] && strcmp(allowed[i], k->string)) i++;
    if (allowed[i]) continue;
    if (strcmp(k->string, "config") == 0 || strncmp(k->string, "file:", 5) == 0)
      return attn_diag_set(d, ATTN_EINVAL,
                           "%s: '%.64s' is not supported: attnd loads a model "
                           "from its file in the models directory (edit the "
                           "file, then load)",
                           where, k->string);
    return attn_diag_set(d, ATTN_EINVAL, "%s: unknown key '%.64s'", where,
                         k->string);
  }
  return ATTN_OK;
}

/* index: {"ready": bool} */
static attn_status repo_index(const cJSON *root, attn_v2_repo_request *out,
                              attn_diag *d) {
  static const char *const keys[] = {"ready", NULL};
  const cJSON *r = cJSON_GetObjectItemCaseSensitive(root, "ready");
  attn_status s = repo_keys(root, keys, "index", d);
  if (s) return s;
  if (r && !cJSON_IsBool(r))
    return attn_diag_set(d, ATTN_EINVAL,
                         "index: 'ready' must be true or false");
  out->ready = cJSON_IsTrue(r);
  return ATTN_OK;
}

/* load: {"parameters": {}}; unload: {"parameters": {"unload_dependents":
 * any}} (attnd's models depend on none). */
static attn_status repo_model(const cJSON *root, bool load, attn_diag *d) {
  static const char *const top[] = {"parameters", NULL};
  static const char *const load_params[] = {NULL};
  static const char *const unload_params[] = {"unload_dependents", NULL};
  const char *where = load ? "load: parameters" : "unload: parameters";
  const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "parameters");
  attn_status s = repo_keys(root, top, load ? "load" : "unload", d);
  if (s) return s;
  if (p && !cJSON_IsObject(p))
    return attn_diag_set(d, ATTN_EINVAL, "%s must be a JSON object", where);
  return repo_keys(p, load ? load_params : unload_params, where, d);
}

attn_status attn_v2_decode_repository(const char *body, size_t len,
                                      attn_v2_repo_op op,
                                      attn_v2_repo_request *out, attn_diag *d) {
  cJSON *root;
  memset(out, 0, sizeof *out);
  if (op != ATTN_V2_REPO_INDEX && op != ATTN_V2_REPO_LOAD &&
      op != ATTN_V2_REPO_UNLOAD)
    return attn_diag_set(d, ATTN_EINVAL, "unknown repository operation %d",
                         (int)op);
  attn_status s = repo_body(body, len, repo_what(op), &root, d);
  if (s) return s;
  s = op == ATTN_V2_REPO_INDEX ? repo_index(root, out, d)
                               : repo_model(root, op == ATTN_V2_REPO_LOAD, d);
  attn_json_free(root);
  if (s) memset(out, 0, sizeof *out);
  return s;
}

/* ---- the repository's answers ------------------------------------------- */

static attn_status put_entry(attn_buf *b, const void *item) {
  const attn_v2_repo_entry *e = item;
  attn_status s = attn_buf_puts(b, "{\"name\":");
  if (!s) s = attn_buf_json_string(b, e->name);
  if (!s && e->version && e->version[0] &&
      !(s = attn_buf_puts(b, ",\"version\":")))
    s = attn_buf_json_string(b, e->version);
  if (!s)
    s = attn_buf_puts(
        b, e->ready ? ",\"state\":\"READY\"" : ",\"state\":\"UNAVAILABLE\"");
  if (!s && !e->ready && !(s = attn_buf_puts(b, ",\"reason\":")))
    s = attn_buf_json_string(b, e->reason ? e->reason : "");
  return s ? s : attn_buf_puts(b, "}");
}

attn_status attn_v2_encode_repository_index(attn_buf *out,
                                            const attn_v2_repo_entry *e,
                                            size_t n) {
  return attn__json_list(out, "[", e, sizeof *e, n, put_entry, "]");
}

attn_status attn_v2_encode_repository_entry(attn_buf *out,
                                            const attn_v2_repo_entry *e) {
  size_t start = out->len;
  attn_status s = put_entry(out, e);
  if (s) attn__buf_restore(out, start);
  return s;
}

/* ---- statistics ---------------------------------------------------------- */

/* "name":{"count":count,"ns":ns} */
static attn_status put_count_ns(attn_buf *b, const char *name, uint64_t count,
                                uint64_t ns) {
  attn_status s = attn_buf_puts(b, "\"");
  if (!s) s = attn_buf_puts(b, name);
  if (!s) s = attn_buf_puts(b, "\":{\"count\":");
  if (!s) s = attn_buf_u64(b, count);
  if (!s) s = attn_buf_puts(b, ",\"ns\":");
  if (!s) s = attn_buf_u64(b, ns);
  return s ? s : attn_buf_puts(b, "}");
}

static attn_status put_model_stats(attn_buf *b, const void *item) {
  const attn_v2_model_stats *m = item;
  const struct {
    const char *name;
    uint64_t count, ns;
  } rows[] = {{"success", m->success_count, m->success_ns},
              {"fail", m->fail_count, m->fail_ns},
              {"queue", m->success_count, m->queue_ns},
              {"compute_input", m->success_count, m->input_ns},
              {"compute_infer", m->success_count, m->infer_ns},
              {"compute_output", m->success_count, m->output_ns},
              {"cache_hit", 0, 0},
              {"cache_miss", 0, 0}};
  attn_status s = attn_buf_puts(b, "{\"name\":");
  if (!s) s = attn_buf_json_string(b, m->name);
  if (!s) s = attn_buf_puts(b, ",\"version\":");
  if (!s) s = attn_buf_json_string(b, m->version);
  if (!s) s = attn_buf_puts(b, ",\"last_inference\":");
  if (!s) s = attn_buf_u64(b, m->last_inference_ms);
  if (!s) s = attn_buf_puts(b, ",\"inference_count\":");
  if (!s) s = attn_buf_u64(b, m->success_count);
  if (!s) s = attn_buf_puts(b, ",\"execution_count\":");
  if (!s) s = attn_buf_u64(b, m->success_count);
  if (!s) s = attn_buf_puts(b, ",\"inference_stats\":{");
  for (size_t r = 0; !s && r < sizeof rows / sizeof rows[0]; r++)
    if (!r || !(s = attn_buf_puts(b, ",")))
      s = put_count_ns(b, rows[r].name, rows[r].count, rows[r].ns);
  return s ? s : attn_buf_puts(b, "},\"batch_stats\":[]}");
}

attn_status attn_v2_encode_statistics(attn_buf *out,
                                      const attn_v2_model_stats *m, size_t n) {
  return attn__json_list(out, "{\"model_stats\":[", m, sizeof *m, n,
                         put_model_stats, "]}");
}
