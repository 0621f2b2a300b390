/* repo.c - Triton's model repository extension, run on a worker.
 *
 * DESIGN
 *   POST /v2/repository/index                  every model: READY or
 *                                              UNAVAILABLE with a reason
 *   POST /v2/repository/models/{m}/load        (re)load m from its file
 *   POST /v2/repository/models/{m}/unload      stop serving m
 * routes.c checks the path and hands the request on as a job (infer.c),
 * because a load reads files and converts weights: an HTTP thread must
 * not wait for that.  The registry does the work (model.h): a load that
 * fails leaves the old model serving, and requests that hold a model
 * finish on it.  The bodies are Triton's: index {"ready": bool}, load
 * and unload {"parameters": {...}}; an empty body is an empty object
 * (tritonclient sends none).  A load's "config" and "file:" overrides
 * are refused: attnd loads what the models directory holds.  Answers
 * name files relative to the models folder ("models/x.json") and quote
 * none of their bytes; the log line of a failed load has the paths.
 * Threads: a worker.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/buf.h"
#include "attn/log.h"
#include "internal.h"

/* The body as a JSON object ({} when empty) into *root, or a 400. */
static int body_object(const char *body, size_t len, const char *what,
                       cJSON **root, attn_http_resp *resp) {
  size_t i = 0;
  while (i < len && strchr(" \t\r\n", body[i])) i++;
  *root = i == len ? cJSON_CreateObject() : cJSON_ParseWithLength(body, len);
  if (*root && cJSON_IsObject(*root)) return 1;
  cJSON_Delete(*root);
  *root = NULL;
  attn__resp_error(resp, 400, "the body of %s must be a JSON object (or empty)",
                   what);
  return 0;
}

/* Only the keys in `allowed` (a NULL-ended list) in object o, named
 * `where` in the message; 0 and a 400 otherwise. */
static int only_keys(const cJSON *o, const char *const *allowed,
                     const char *where, attn_http_resp *resp) {
  for (const cJSON *k = o ? o->child : NULL; k; k = k->next) {
    size_t i = 0;
    while (allowed[i] && strcmp(allowed[i], k->string)) i++;
    if (allowed[i]) continue;
    if (strcmp(k->string, "config") == 0 || strncmp(k->string, "file:", 5) == 0)
      attn__resp_error(resp, 400,
                       "%s: '%.64s' is not supported: attnd loads a model "
                       "from its file in the models directory (edit the file, "
                       "then load)",
                       where, k->string);
    else
      attn__resp_error(resp, 400, "%s: unknown key '%.64s'", where, k->string);
    return 0;
  }
  return 1;
}

static void entry_json(attn_buf *b, const attn_registry_entry *e) {
  attn_buf_puts(b, "{\"name\":");
  attn_buf_json_string(b, e->name);
  if (e->version[0]) {
    attn_buf_puts(b, ",\"version\":");
    attn_buf_json_string(b, e->version);
  }
  attn_buf_puts(
      b, e->ready ? ",\"state\":\"READY\"" : ",\"state\":\"UNAVAILABLE\"");
  if (!e->ready) {
    attn_buf_puts(b, ",\"reason\":");
    attn_buf_json_string(b, e->reason);
  }
  attn_buf_puts(b, "}");
}

/* The index, all of it or (ready) the READY rows; `only`: one model's
 * row (the answer to its load or unload). */
static void answer_index(attn_srv_ctx *s, bool ready, const char *only,
                         attn_http_resp *resp) {
  attn_registry_entry *v;
  size_t n, shown = 0;
  attn_diag d = {{0}};
  attn_status st = attn_registry_index(s->models, &v, &n, &d);
  if (st) {
    attn__resp_status(resp, st, &d);
    return;
  }
  attn_buf b;
  attn_buf_init(&b, 0);
  if (!only) attn_buf_puts(&b, "[");
  for (size_t i = 0; i < n; i++) {
    if ((ready && !v[i].ready) || (only && strcmp(v[i].name, only))) continue;
    if (shown++ && !only) attn_buf_puts(&b, ",");
    entry_json(&b, &v[i]);
    if (only) break;
  }
  if (!only) attn_buf_puts(&b, "]");
  free(v);
  attn__resp_json(resp, 200, &b);
}

/* A load's failure: 404 when no file names the model, 503 out of
 * memory, else 400 (the model file is wrong: the message says how). */
static void load_failed(attn_status st, const attn_diag *d,
                        attn_http_resp *resp) {
  int code = st == ATTN_ENOTFOUND ? 404 : st == ATTN_ENOMEM ? 503 : 400;
  attn__resp_error(resp, code, "%s", d->msg[0] ? d->msg : attn_strerror(st));
}

void attn__repo_run(attn_srv_ctx *s, attn_job_proto op, const char *model,
                    const char *body, size_t len, attn_http_resp *resp) {
  static const char *const index_keys[] = {"ready", NULL};
  static const char *const load_params[] = {NULL};
  static const char *const unload_params[] = {"unload_dependents", NULL};
  static const char *const top[] = {"parameters", NULL};
  const char *what = op == ATTN_JOB_REPO_INDEX  ? "POST /v2/repository/index"
                     : op == ATTN_JOB_REPO_LOAD ? "a load"
                                                : "an unload";
  cJSON *root;
  if (!body_object(body, len, what, &root, resp)) return;
  attn_diag d = {{0}}, detail = {{0}};
  attn_status st;
  if (op == ATTN_JOB_REPO_INDEX) {
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(root, "ready");
    if (only_keys(root, index_keys, "index", resp)) {
      if (r && !cJSON_IsBool(r))
        attn__resp_error(resp, 400, "index: 'ready' must be true or false");
      else
        answer_index(s, cJSON_IsTrue(r), NULL, resp);
    }
    cJSON_Delete(root);
    return;
  }
  const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "parameters");
  const char *where =
      op == ATTN_JOB_REPO_LOAD ? "load: parameters" : "unload: parameters";
  if (!only_keys(root, top, op == ATTN_JOB_REPO_LOAD ? "load" : "unload",
                 resp) ||
      (p && !cJSON_IsObject(p) &&
       (attn__resp_error(resp, 400, "%s must be a JSON object", where), 1)) ||
      !only_keys(p, op == ATTN_JOB_REPO_LOAD ? load_params : unload_params,
                 where, resp)) {
    cJSON_Delete(root);
    return;
  }
  cJSON_Delete(root);
  if (op == ATTN_JOB_REPO_LOAD) {
    if ((st = attn_registry_load(s->models, model, &d, &detail))) {
      /* the client's answer names files relative to the models folder;
       * the log, with their paths */
      attn_log(ATTN_LOG_WARN, "load of model '%s' failed: %s", model,
               detail.msg);
      load_failed(st, &d, resp);
      return;
    }
    attn_log(ATTN_LOG_INFO, "model '%s' loaded", model);
  } else {
    if ((st = attn_registry_unload(s->models, model, &d))) {
      attn__resp_status(resp, st, &d);
      return;
    }
    attn_log(ATTN_LOG_INFO, "model '%s' unloaded", model);
  }
  answer_index(s, false, model, resp);
}
