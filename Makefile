# Thin wrapper over meson.  `make run` and `make test` work on a fresh
# Debian 12 machine: they install what is missing, configure build/, build,
# then run, or run meson test.
BUILD ?= build
PORT ?= 8080

.PHONY: all deps test-deps run test bench asan clean

all: deps $(BUILD)/build.ninja
	ninja -C $(BUILD)

deps:
	@scripts/install-deps.sh

test-deps:
	@scripts/install-deps.sh --test

$(BUILD)/build.ninja:
	meson setup $(BUILD)

# Built-in defaults (0.0.0.0:8080); models from config/models.
run: all
	exec $(BUILD)/src/attnd

# Every suite of meson test (tests/meson.build: lint, unit, integration,
# readme), then their counts, whose closing line is `N passed, M failed`
# (scripts/test-summary.py).  One suite: meson test -C build --suite NAME.
test: test-deps $(BUILD)/build.ninja
	ninja -C $(BUILD)
	@rm -f $(BUILD)/meson-logs/testlog.json; \
	meson test -C $(BUILD) --print-errorlogs; rc=$$?; \
	python3 scripts/test-summary.py $(BUILD) || rc=1; exit $$rc

bench: all
	$(BUILD)/bench/bench_attention

# The unit and integration suites built with AddressSanitizer +
# UndefinedBehaviorSanitizer (any report is fatal; leaks fail the run at
# exit).
ASAN_ENV = ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
asan: test-deps
	[ -f build-asan/build.ninja ] || meson setup build-asan -Db_sanitize=address,undefined -Dbuildtype=debugoptimized -Db_lundef=false -Dc_args=-fno-sanitize-recover=all -Dwerror=true
	ninja -C build-asan
	@rm -f build-asan/meson-logs/testlog.json; \
	$(ASAN_ENV) CK_FORK=no meson test -C build-asan --suite unit --suite integration --print-errorlogs --timeout-multiplier 3; rc=$$?; \
	python3 scripts/test-summary.py build-asan || rc=1; exit $$rc

clean:
	rm -rf $(BUILD) build-asan
