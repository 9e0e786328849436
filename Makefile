# Entry points for a fresh machine: `make run` (set up, build, make the tiny model, run it)
# and `make test` (set up, build, run every test). Everything else is CMake.
BUILD ?= build
MODEL ?= models/tiny
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: setup configure build test run clean

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
