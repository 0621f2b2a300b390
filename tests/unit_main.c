/* unit_main.c - runs every unit suite in one Check runner.
 *
 * Build flags choose the suites: the engine suites always run; with
 * ATTN_UNIT_SERVER the codec, config, queue and model suites run too.
 * ATTN_UNIT_ONLY=name_suite runs a single suite (handy while developing).
 * Exit status is 0 only when every check passed. */
#include <stdlib.h>

#include "unit.h"

int main(void) {
  SRunner *sr;
#ifdef ATTN_UNIT_ONLY
  sr = srunner_create(ATTN_UNIT_ONLY());
#else
  sr = srunner_create(status_suite());
  srunner_add_suite(sr, tensor_suite());
  srunner_add_suite(sr, engine_suite());
#ifdef ATTN_UNIT_SERVER
  srunner_add_suite(sr, f32fmt_suite());
  srunner_add_suite(sr, config_suite());
  srunner_add_suite(sr, queue_suite());
  srunner_add_suite(sr, codec_suite());
  srunner_add_suite(sr, safetensors_suite());
  srunner_add_suite(sr, model_suite());
  srunner_add_suite(sr, golden_suite());
#endif
#endif
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
