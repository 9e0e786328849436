# Entry points for a fresh machine: `make run` (set up, build, make the tiny model, run it)
# and `make test` (set up, build, run every test). Everything else is CMake.
BUILD ?= build
MODEL ?= models/tiny
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
# `make fuzz`: a separate clang build with libFuzzer + ASan + UBSan, each fuzzer run this long.
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_RSS_MB ?= 2048

.PHONY: setup configure build test run clean
.PHONY: fuzz

setup:
	scripts/setup.sh

configure: setup
	@test -f $(BUILD)/build.ninja || cmake -S . -B $(BUILD) -G Ninja \
	  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

run: build
	scripts/run_default.sh $(BUILD)/tools/dsv4 $(MODEL)

clean:
	rm -rf $(BUILD)

# Builds every fuzzer and runs each from its committed seeds (fuzz/corpus/<name>/, read only)
# plus the corpus it grows in $(FUZZ_BUILD)/corpus/; a crash input lands in $(FUZZ_BUILD)/crashes/.
fuzz: setup
	@test -f $(FUZZ_BUILD)/build.ninja || CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD) -G Ninja \
	  -DDSV4_CUDA=OFF -DDSV4_FUZZ=ON -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzzers
	@set -e; for fuzzer in $(FUZZ_BUILD)/fuzz/fuzz_*; do \
	  name=$$(basename $$fuzzer); seeds=fuzz/corpus/$${name#fuzz_}; dict=fuzz/$${name#fuzz_}.dict; \
	  mkdir -p $(FUZZ_BUILD)/corpus/$$name $(FUZZ_BUILD)/crashes; \
	  echo "fuzz: $$name for $(FUZZ_SECONDS) s"; \
	  $$fuzzer -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=$(FUZZ_RSS_MB) \
	    $$(test -f $$dict && echo -dict=$$dict) -artifact_prefix=$(FUZZ_BUILD)/crashes/$$name- \
	    $(FUZZ_BUILD)/corpus/$$name $$seeds; \
	done
