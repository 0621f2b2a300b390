/* unit.h - every Check suite of the unit-test binary.  Each tests/test_X.c
 * defines one `Suite *X_suite(void)`; unit_main.c runs them all in one
 * SRunner so that Check prints one closing line with the total counts. */
#ifndef ATTN_TESTS_UNIT_H
#define ATTN_TESTS_UNIT_H

#include <check.h>

Suite *status_suite(void);
Suite *tensor_suite(void);
Suite *engine_suite(void);
/* Suites below need cJSON or other server-side pieces. */
Suite *golden_suite(void);
Suite *f32fmt_suite(void);
Suite *config_suite(void);
Suite *queue_suite(void);
Suite *codec_suite(void);
Suite *safetensors_suite(void);
Suite *model_suite(void);
Suite *routes_suite(void);
Suite *healthcheck_suite(void);

/* Directory holding tests/ data (golden vectors); set by meson. */
#ifndef ATTN_TEST_DATA_DIR
#define ATTN_TEST_DATA_DIR "tests"
#endif

#endif
