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

run: all
	@if [ -x $(BUILD)/src/attnd ]; then exec $(BUILD)/src/attnd; \
	else echo "attnd: no server yet (engine only); see README"; fi

test: test-deps $(BUILD)/build.ninja
	ninja -C $(BUILD)
	meson test -C $(BUILD) --print-errorlogs

bench: all
	$(BUILD)/bench/bench_attention

asan: test-deps
	[ -f build-asan/build.ninja ] || meson setup build-asan -Db_sanitize=address,undefined -Dbuildtype=debug -Db_lundef=false
	ninja -C build-asan
	meson test -C build-asan --print-errorlogs

clean:
	rm -rf $(BUILD) build-asan
