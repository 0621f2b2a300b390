/* infer_request.c - release and lookup helpers of
 * include/attn/infer_request.h.
 *
 * Design: requests and responses are plain structs whose every pointer is
 * owned by the struct.  The free functions accept NULL and partially filled
 * structs (any pointer may be NULL, any count may describe fewer filled
 * entries than allocated as long as unfilled entries are zeroed), and leave
 * the struct zeroed so a second free is harmless.
 *
 * Threads: none; stateless.
 */
#include "attn/infer_request.h"

#include <stdlib.h>
#include <string.h>

void attn_infer_request_free(attn_infer_request *r) {
  if (!r) return;
  free(r->model);
  free(r->version);
  free(r->id);
  for (size_t i = 0; r->inputs && i < r->n_inputs; i++) {
    free(r->inputs[i].name);
    attn_tensor_free(&r->inputs[i].tensor);
  }
  free(r->inputs);
  for (size_t i = 0; r->params && i < r->n_params; i++) {
    free(r->params[i].name);
    free(r->params[i].label);
    free(r->params[i].s);
  }
  free(r->params);
  for (size_t i = 0; r->outputs && i < r->n_outputs; i++)
    free(r->outputs[i].name);
  free(r->outputs);
  for (size_t i = 0; r->echo && i < r->n_echo; i++) {
    free(r->echo[i].name);
    free(r->echo[i].json);
  }
  free(r->echo);
  memset(r, 0, sizeof *r);
}

void attn_infer_response_free(attn_infer_response *r) {
  if (!r) return;
  free(r->model_name);
  free(r->model_version);
  free(r->id);
  for (size_t i = 0; r->outputs && i < r->n_outputs; i++) {
    free(r->outputs[i].name);
    attn_tensor_free(&r->outputs[i].tensor);
  }
  free(r->outputs);
  memset(r, 0, sizeof *r);
}

const attn_infer_input *attn_infer_find_input(const attn_infer_request *r,
                                              const char *name) {
  if (!r || !name) return NULL;
  for (size_t i = 0; i < r->n_inputs; i++)
    if (r->inputs[i].name && strcmp(r->inputs[i].name, name) == 0)
      return &r->inputs[i];
  return NULL;
}

const attn_param *attn_infer_find_param(const attn_infer_request *r,
                                        const char *name) {
  if (!r || !name) return NULL;
  for (size_t i = 0; i < r->n_params; i++)
    if (r->params[i].name && strcmp(r->params[i].name, name) == 0)
      return &r->params[i];
  return NULL;
}
