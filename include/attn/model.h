/* model.h - the model layer: a registry of named models, each turning an
 * attn_infer_request into engine calls and an attn_infer_response.
 *
 * Models
 *  - "sdpa" (built in): scaled dot-product attention on client tensors.
 *      inputs  query [B,H,Lq,Dk], key [B,Hkv,Lk,Dk], value [B,Hkv,Lk,Dv]
 *              (B and H optional: rank 2 is [L,D], rank 3 is [H,L,D]; all
 *              three share one rank), optional attn_mask, key_padding_mask,
 *              key_lengths (below), alibi_slopes FP32 [H].
 *      params  causal (bool, "bottom_right" or "top_left"), scale (number),
 *              need_weights (bool, default true), average_attn_weights
 *              (bool, default false), and the variants: window_left,
 *              window_right, softcap, alibi, rotary, rotary_base,
 *              rotary_dims, rotary_interleaved, rotary_query_offset
 *              (docs/api.md "Attention variants"; every model).
 *      outputs attn_output [..,H,Lq,Dv] (rank of query),
 *              attn_weights [..,H,Lq,Lk], or [..,Lq,Lk] when averaged.
 *  - "mha" (built in): multi-head attention with client-supplied weights.
 *      inputs  query [B,Lq,E] (B optional), optional key [B,Lk,kdim] and
 *              value [B,Lk,vdim] (no key: self-attention; key without value:
 *              value = key), w_q [E,E], w_k [kdim,Hkv*E/H], w_v
 *              [vdim,Hkv*E/H], w_o [E,E] (all [in,out]), optional b_q [E],
 *              b_k, b_v [Hkv*E/H], b_o [E], and the masks.
 *      params  num_heads (int, required), num_kv_heads (int, default
 *              num_heads) and the sdpa params.
 *      outputs attn_output [B,Lq,E] (rank of query), attn_weights
 *              [B,H,Lq,Lk] or [B,Lq,Lk] averaged (B dropped when the query
 *              has none).
 *  - resident models, one per NAME.json file in models_dir: an "mha" whose
 * weights are loaded once at registry creation (PyTorch nn.MultiheadAttention
 *    state_dict names in a .safetensors file, or seeded random weights).
 *    Inputs query/key/value and the masks; params as mha, where num_heads and
 *    num_kv_heads, if given, must equal the model's.  The file may fix any
 *    variant ("causal", "window", "alibi", "alibi_slopes", "softcap",
 *    "rotary"); a request contradicting one is ATTN_EINVAL naming both.
 *      {"name": "tiny", "embed_dim": 64, "num_heads": 4, "num_kv_heads": 4,
 *       "kdim": 64, "vdim": 64, "bias": true,
 *       "weights": "tiny.safetensors" | "seed": 1234,
 *       "description": "...", "version": "1", "precision": "fp32"}
 *    "precision": "bf16" makes bf16 the model's arithmetic (a request may
 *    still ask "fp32") and keeps F16 / BF16 weights in bfloat16.
 *
 * Masks (every model)
 *   attn_mask         BOOL (true = blocked) or FP32 (added to the scores);
 *                     [Lq,Lk], [N,Lq,Lk] with N = 1 or B*H (PyTorch's
 *                     batch-major 3-d layout), or [B,H,Lq,Lk] with B, H = 1
 *                     broadcasting.
 *   key_padding_mask  BOOL [B,Lk] (true = padding); [Lk] when B is 1.
 *   key_lengths       INT32/INT64 [B] ([] or [1] when B is 1), each in
 *                     [0,Lk]; keys j >= length are padding.  Not together
 *                     with key_padding_mask.
 *
 * Threads: the registry is built once (attn_registry_create, one thread);
 * then loads, unloads and reloads (the repository functions below) may
 * replace its resident models from any thread while others look models up
 * and run them: a model taken with attn_registry_get stays whole until put
 * back, whatever replaced it.  attn_model_infer may run concurrently on
 * any number of threads for the same model.  The model layer starts no threads:
 * the attn_exec passed in says how many threads the engine may use.
 */
#ifndef ATTN_MODEL_H
#define ATTN_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attn/engine.h"
#include "attn/infer_request.h"
#include "attn/limits.h" /* ATTN_MODEL_MAX_*: model files */
#include "attn/status.h"
#include "attn/tensor.h"

/* The built-in model of sessions' steps (docs/api.md "Sessions"): the
 * registry describes it (metadata, statistics, the per-model metrics);
 * the server runs it on the session store, never attn_model_infer. */
#define ATTN_KV_MODEL_NAME "kv_attention"

typedef struct attn_registry attn_registry;
typedef struct attn_model attn_model;

/* Per-request limits, checked before any output is allocated.  0 in a size
 * field means no limit; a NULL limits pointer means no limits at all. */
typedef struct attn_model_limits {
  int64_t max_seq_len;         /* Lq and Lk (ATTN_ETOOBIG) */
  size_t max_tensor_elements;  /* every output tensor (ATTN_ETOOBIG) */
  size_t max_weights_elements; /* attn_weights sent as JSON (ATTN_EINVAL) */
  bool no_weights_json;        /* true: no attn_weights as JSON at all
                                  (ATTN_EINVAL), whatever the size */
} attn_model_limits;

/* One input or output as GET /v2/models/{m} describes it.  shape[i] == -1 is
 * a variable dimension; leading dimensions the model allows to be omitted are
 * still listed (sdpa query is rank 4 here, ranks 2 and 3 are accepted).
 * attn_mask is listed as BOOL (FP32 is accepted too) and key_lengths as INT64
 * (INT32 too). */
typedef struct attn_model_io {
  const char *name;
  attn_dtype datatype;
  int rank;
  int64_t shape[ATTN_MAX_RANK];
  bool optional;
} attn_model_io;

/* Static facts about a model (all strings owned by the registry). */
typedef struct attn_model_info {
  const char *name, *version, *description;
  const char *kind;   /* "sdpa", "mha" or "resident" */
  const char *source; /* resident: path of the json file; else NULL */
  /* resident only (0 / false otherwise): */
  int64_t embed_dim, num_heads, num_kv_heads, kdim, vdim;
  bool bias;
  bool seeded;            /* weights from "seed" rather than a file */
  const char *parameters; /* KServe v2 metadata "parameters": a JSON object
                             of scalars, {"request_parameters": "scale, ...",
                             and the variants the model fixes as v2 spells
                             them}; lives as long as the registry */
  const char *fixed;      /* the attention variants the file fixes, a JSON
                             object as /v1 spells them ({"causal": "bottom_right",
                             "window": [4, 0], ...}), or NULL */
  const char *precision;  /* resident: "fp32" or "bf16"; else NULL */
  size_t weight_bytes;    /* resident: bytes its weights hold in memory
                             (bfloat16 ones 2 a value, the others 4) */
} attn_model_info;

/* Build the registry: "sdpa" and "mha", then one resident model per
 * NAME.json file directly in models_dir (hidden files skipped, loaded in name
 * order; the weights of each are read and converted once, here).  models_dir
 * NULL or a directory that does not exist gives the built-ins only.  A
 * NAME.json that is not a regular file (a FIFO, a folder) is no model file:
 * it is passed over, unopened, and attn_registry_index lists it with the
 * reason.  A bad model file (JSON syntax, unknown key, bad value, duplicate
 * or built-in name, missing or malformed weights, weights that are no
 * regular file) fails the whole call with a diagnostic naming the file by
 * its path (the operator's, at start-up): ATTN_EPARSE, ATTN_EINVAL,
 * ATTN_EIO, ATTN_ETOOBIG, ATTN_EUNSUPPORTED, ATTN_ENONFINITE, ATTN_ESHAPE (a
 * weights tensor of the wrong shape) or ATTN_ENOMEM. On success *out owns a new
 * registry (free with attn_registry_destroy); on error *out is NULL and nothing
 * is left allocated. Thread: start-up, before workers run. */
attn_status attn_registry_create(const char *models_dir, attn_registry **out,
                                 attn_diag *d);
/* attn_registry_create, with one model of models_dir served under another
 * name (model_name, KServe's --model_name): model_name "NEW" renames the
 * only model the folder's files name (ATTN_EINVAL when they name none or
 * several: the message lists them), "FROM=NEW" the model named FROM
 * (ATTN_EINVAL when no file names it).  NEW must be a good model name and
 * neither a built-in's nor another file's model's (ATTN_EINVAL).  For the
 * registry's life a file whose "name" is FROM is that model's file under
 * NEW: at start-up, in loads (of NEW; FROM is unknown), reloads and the
 * index; metadata, readiness and the slot (the metrics' label) say NEW.
 * model_name NULL or "" is attn_registry_create. */
attn_status attn_registry_create_named(const char *models_dir,
                                       const char *model_name,
                                       attn_registry **out, attn_diag *d);
/* A stamp of the files directly in the models directory: their names,
 * sizes, modification times and inodes, in any order; it changes when a
 * file is added, removed, replaced or rewritten.  0 when there is no
 * directory or it cannot be read.  Opens no file (stat only).  Any
 * thread. */
uint64_t attn_registry_dir_stamp(const attn_registry *r);
/* The rename in force: *from and *to (NULL when none). */
void attn_registry_renamed(const attn_registry *r, const char **from,
                           const char **to);
/* NULL is allowed.  No attn_model_infer may be running, and every model
 * taken with attn_registry_get must have been put back. */
void attn_registry_destroy(attn_registry *r);

/* Slots: one per model name, in the order names first appeared (the
 * built-ins first, then the models directory's files in name order, then
 * names that later loads added).  A slot keeps its name, and its index,
 * for the registry's life; its model is NULL while unloaded.  At most
 * ATTN_MAX_MODELS slots. */
size_t attn_registry_count(const attn_registry *r);
/* Slot i's name (lives as long as the registry); NULL when i >= count.
 * Any thread, no lock. */
const char *attn_registry_slot_name(const attn_registry *r, size_t i);
/* The slot of the name name[0..len), or -1.  Any thread, no lock. */
int attn_registry_slot(const attn_registry *r, const char *name, size_t len);

/* The model of that name, with a reference that attn_model_put gives back
 * (the model stays whole until then, even when a load replaces it or an
 * unload removes it); version NULL or "" matches any.  NULL when there is
 * no such model (unloaded, or another version); *slot (may be NULL) gets
 * the name's slot or -1.  Any thread. */
const attn_model *attn_registry_get(attn_registry *r, const char *name,
                                    const char *version, int *slot);
/* Slot i's model with a reference, or NULL (unloaded, or i >= count). */
const attn_model *attn_registry_get_at(attn_registry *r, size_t i);
/* Gives back a reference; NULL is a no-op.  Any thread. */
void attn_model_put(const attn_model *m);

/* Borrowed lookups, without a reference: valid until a load or unload
 * replaces the model, so only where none can run (start-up, tests).
 * Version NULL or "" matches any; NULL when absent. */
const attn_model *attn_registry_find(const attn_registry *r, const char *name,
                                     const char *version);
const attn_model *attn_registry_at(const attn_registry *r, size_t i);

/* ---- the model repository (Triton's repository extension) ----
 * One load, unload or reload runs at a time; lookups go on meanwhile.
 * Requests already holding a model finish on it.  Files are opened without
 * blocking: a FIFO, a folder or a device where a model or weights file
 * should be is refused at once, never waited on or read.
 * What a client may read (a load's *d, the index's reasons) names files
 * relative to the models folder, behind "models/" ("models/x.json"; a
 * weights file outside the folder as "models/x.json's weights"), and never
 * quotes a file's bytes; the server's paths are only in what goes to the
 * log (a load's *detail, reload's report). */

/* (Re)load model `name` from the file of the models directory whose
 * "name" it is.  A failure leaves the model that served serving (and is
 * remembered as its slot's reason, attn_registry_index): ATTN_ENOTFOUND
 * (no file names it), ATTN_EINVAL (two files name it, or any error of
 * attn_registry_create's about the file), ATTN_EIO (the file, or NAME.json
 * when no file names it and its "name" cannot be read, is not a regular
 * file or cannot be read), ATTN_ETOOBIG (ATTN_MAX_MODELS names already),
 * ATTN_ENOMEM.  *d says why for the client, *detail (may be NULL) the
 * same with the files' paths, for the log.  A built-in's is a no-op
 * (ATTN_OK). */
attn_status attn_registry_load(attn_registry *r, const char *name, attn_diag *d,
                               attn_diag *detail);
/* Unloads model `name` (new lookups find nothing; it is freed once the
 * last request on it ends).  ATTN_EINVAL for a built-in, ATTN_ENOTFOUND
 * for a name no slot has; an unloaded one again is ATTN_OK. */
attn_status attn_registry_unload(attn_registry *r, const char *name,
                                 attn_diag *d);
/* Every file of the models directory loaded again (as attn_registry_load,
 * each failure leaving the old model serving), and every resident model
 * whose file was removed unloaded.  report (may be NULL) hears of each:
 * the model's name ("" when the file has none), the file's path, the
 * status and a message (on failure, why, with the files' paths: for the
 * log).  Returns ATTN_OK, or the error of reading the directory itself
 * (then nothing changed; *d names the folder by its path). */
typedef void (*attn_reload_report)(void *arg, const char *name,
                                   const char *path, attn_status s,
                                   const char *msg);
attn_status attn_registry_reload(attn_registry *r, attn_reload_report report,
                                 void *arg, attn_diag *d);

/* One row of the repository index. */
typedef struct attn_registry_entry {
  char name[ATTN_MODEL_MAX_NAME + 1];
  char version[32];           /* "" when never loaded */
  bool ready;                 /* loaded and serving */
  char reason[ATTN_DIAG_MAX]; /* not ready: "unloaded", "not loaded", or
                                 the last failed load's message, or why
                                 the file has no "name" to read */
} attn_registry_entry;
/* Every slot, then every model the directory's files name that no slot
 * has yet; a file whose "name" cannot be read (not a regular file, not
 * JSON, no "name") is a row named after the file (x.json: "x") with the
 * reason.  *out malloc'd (free it), *n rows.  Messages name no path. */
attn_status attn_registry_index(attn_registry *r, attn_registry_entry **out,
                                size_t *n, attn_diag *d);

const char *attn_model_name(const attn_model *m);
const char *attn_model_version(const attn_model *m); /* "1" unless the file
                                                        says otherwise */
void attn_model_info_get(const attn_model *m, attn_model_info *info);
/* Inputs and outputs for metadata; *n receives the count.  The arrays live as
 * long as the registry. */
const attn_model_io *attn_model_inputs(const attn_model *m, size_t *n);
const attn_model_io *attn_model_outputs(const attn_model *m, size_t *n);

/* Run one request.
 *   req   decoded request (float inputs already FP32); only read.
 *   lim   per-request limits or NULL.
 *   x     threads/path for the engine; NULL = one thread, auto path.
 *   resp  must be empty (zeroed); on success it owns the outputs (free with
 *         attn_infer_response_free): model_name, model_version, id (copy of
 *         req->id), and the outputs in the order of req->outputs when given,
 *         else attn_output then attn_weights (when computed).  Each output's
 *         binary flag is req->outputs[i].binary when not -1, else
 *         req->binary_data_output == 1.
 * attn_weights is computed when need_weights (default true) and either no
 * outputs list was given or it names attn_weights; naming it while
 * need_weights is false is ATTN_EINVAL.  An empty outputs list counts as no
 * list.
 * Errors (diagnostic names the input, parameter or dimension):
 *   ATTN_EINVAL   unknown/duplicate/missing input, output or parameter, wrong
 *                 datatype or parameter type, bad key_lengths value,
 *                 attn_weights over max_weights_elements as JSON;
 *   ATTN_ESHAPE   shapes disagree;
 *   ATTN_ETOOBIG  Lq/Lk over max_seq_len, an output over
 *                 max_tensor_elements, or a size that overflows;
 *   ATTN_ENONFINITE, ATTN_ENOMEM and engine statuses as from attn_sdpa /
 *   attn_mha.
 * On error *resp is left zeroed and nothing is allocated.  Limits are checked
 * before any output memory is allocated.  Results are bitwise reproducible
 * for the same request and exec settings.
 * Thread: any (typically a worker); reentrant. */
attn_status attn_model_infer(const attn_model *m, const attn_infer_request *req,
                             const attn_model_limits *lim, const attn_exec *x,
                             attn_infer_response *resp, attn_diag *d);

#endif /* ATTN_MODEL_H */
