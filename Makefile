# Thin wrapper over meson.  `make run` and `make test` work on a fresh
# Debian 12 machine: they install what is missing, configure build/, build,
# then run or test.
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

# Integration tests (real server over HTTP) first, then the Check unit
# tests, whose closing line gives the counts.
test: test-deps $(BUILD)/build.ninja
	scripts/lint.sh
	ninja -C $(BUILD)
	python3 tests/integration/run.py --attnd $(BUILD)/src/attnd --source-dir .
	python3 tests/readme_examples.py --attnd $(BUILD)/src/attnd --source-dir .
	$(BUILD)/tests/unit

bench: all
	$(BUILD)/bench/bench_attention

# The same tests built with AddressSanitizer + UndefinedBehaviorSanitizer
# (any report is fatal; leaks fail the run at exit).
ASAN_ENV = ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
asan: test-deps
	[ -f build-asan/build.ninja ] || meson setup build-asan -Db_sanitize=address,undefined -Dbuildtype=debugoptimized -Db_lundef=false -Dc_args=-fno-sanitize-recover=all -Dwerror=true
	ninja -C build-asan
	$(ASAN_ENV) python3 tests/integration/run.py --attnd build-asan/src/attnd --source-dir .
	$(ASAN_ENV) CK_FORK=no build-asan/tests/unit

clean:
	rm -rf $(BUILD) build-asan
