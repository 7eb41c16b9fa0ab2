# The two commands: `make run` and `make test` (see README.md).
BUILD      ?= build
BUILD_SAN  ?= build-asan
JOBS       ?= $(shell nproc)
CMAKE_ARGS ?=

.PHONY: all deps build build-san run stop wipe status test test-unit test-e2e test-san test-rdma test-fuzz bench clean

all: build

deps:
	@scripts/install-deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DZL_WERROR=ON $(CMAKE_ARGS)

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j$(JOBS)

run: build
	scripts/local-cluster.sh start
	scripts/local-cluster.sh demo

stop:
	@scripts/local-cluster.sh stop

wipe:
	@scripts/local-cluster.sh wipe

status:
	@scripts/local-cluster.sh status

# Everything: unit + e2e + chart checks with the normal build, then unit
# tests again under ASan+UBSan (clang) with a bounded run of every fuzz
# target, then the RDMA tests inside the Soft-RoCE VM (../shared/rdma-vm:
# the transport conformance suite and the storage e2e over RDMA; a VM that
# cannot start fails loudly), then the container image built from the
# Dockerfile (minutes).
test: build
	ctest --test-dir $(BUILD) --output-on-failure -L 'unit|e2e|deploy'
	$(MAKE) test-san
	ctest --test-dir $(BUILD) --output-on-failure -L rdma
	ctest --test-dir $(BUILD) --output-on-failure -L image

test-rdma: build
	ctest --test-dir $(BUILD) --output-on-failure -L rdma

test-unit: build
	ctest --test-dir $(BUILD) --output-on-failure -L unit

test-e2e: build
	ctest --test-dir $(BUILD) --output-on-failure -L e2e

build-san: deps
	cmake -S . -B $(BUILD_SAN) -DCMAKE_C_COMPILER=clang -DZL_WERROR=ON -DZL_SANITIZE=ON -DZL_FUZZ=ON $(CMAKE_ARGS)
	cmake --build $(BUILD_SAN) -j$(JOBS)

test-san: build-san
	ASAN_OPTIONS=detect_leaks=1 ctest --test-dir $(BUILD_SAN) --output-on-failure -L 'unit|fuzz'

bench: build
	bench/compare.sh

clean:
	rm -rf $(BUILD) $(BUILD_SAN)
