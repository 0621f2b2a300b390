/* unit_main.c - runs every unit suite in one Check runner, so Check prints
 * one closing line with the total counts.
 *
 * tests/meson.build defines ATTN_HAVE_<NAME>_SUITE for each suite it builds:
 * the engine suites always, the server-side ones when cJSON and friends are
 * there.  ATTN_UNIT_ONLY=name_suite runs a single suite (while developing).
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
#ifdef ATTN_HAVE_GOLDEN_SUITE
  srunner_add_suite(sr, golden_suite());
#endif
#ifdef ATTN_HAVE_F32FMT_SUITE
  srunner_add_suite(sr, f32fmt_suite());
#endif
#ifdef ATTN_HAVE_CONFIG_SUITE
  srunner_add_suite(sr, config_suite());
#endif
#ifdef ATTN_HAVE_QUEUE_SUITE
  srunner_add_suite(sr, queue_suite());
#endif
#ifdef ATTN_HAVE_CODEC_SUITE
  srunner_add_suite(sr, codec_suite());
#endif
#ifdef ATTN_HAVE_SAFETENSORS_SUITE
  srunner_add_suite(sr, safetensors_suite());
#endif
#ifdef ATTN_HAVE_MODEL_SUITE
  srunner_add_suite(sr, model_suite());
#endif
#ifdef ATTN_HAVE_ROUTES_SUITE
  srunner_add_suite(sr, routes_suite());
#endif
#ifdef ATTN_HAVE_HEALTHCHECK_SUITE
  srunner_add_suite(sr, healthcheck_suite());
#endif
#endif
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
