# make demo: a local elastic training run, resized 4 -> 2 -> 3 and losing a worker.
# make test: the whole test suite.
# Both install missing Debian packages first (launch/install_deps.sh).
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps configure build demo test bench clean

all: build

deps:
	@bash launch/install_deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

demo: build
	@python3 launch/demo.py $(BUILD)

test: build
	@cd $(BUILD) && ctest --output-on-failure --timeout 300 -j 2

bench: build
	@for b in $(BUILD)/bench/*/bench_*; do echo "== $$b"; $$b; done

clean:
	rm -rf $(BUILD)
