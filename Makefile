# The two commands: `make run` and `make test` (see README.md).
BUILD      ?= build
BUILD_SAN  ?= build-asan
JOBS       ?= $(shell nproc)
CMAKE_ARGS ?=

.PHONY: all deps build build-san run stop wipe status test test-unit test-e2e test-deploy test-san \
	test-vm test-rdma test-image test-clean bench bench-auth bench-metrics bench-fair bench-vm clean

all: build

deps:
	$(call stage,deps,scripts/install-deps.sh)

# $(call stage,NAME,COMMAND): runs COMMAND and then prints
# "stage NAME: SECONDS s" (and its exit status when it failed), so that a
# log of `make test` shows where the time goes. Fails when COMMAND fails.
stage = $(info == stage $(1): $(2))@t0=$$(date +%s); rc=0; $(2) || rc=$$?; \
	echo "stage $(1): $$(($$(date +%s) - t0)) s$$([ $$rc -eq 0 ] || echo " (FAILED, exit $$rc)")"; \
	exit $$rc

# ctest that fails when the label selects no test (a stage that ran nothing).
CTEST = ctest --test-dir $(BUILD) --output-on-failure --no-tests=error

$(BUILD)/CMakeCache.txt:
	$(call stage,configure,cmake -S . -B $(BUILD) -DZL_WERROR=ON $(CMAKE_ARGS))

build: deps $(BUILD)/CMakeCache.txt
	$(call stage,build,cmake --build $(BUILD) -j$(JOBS))

run: build
	scripts/local-cluster.sh start
	scripts/local-cluster.sh demo

stop:
	@scripts/local-cluster.sh stop

wipe:
	@scripts/local-cluster.sh wipe

status:
	@scripts/local-cluster.sh status

# Everything, one stage after the other, each printing its time:
#   unit, e2e, deploy  the normal build's unit tests, end-to-end tests and
#                      Helm chart checks;
#   san                unit tests again under ASan+UBSan (clang) with a
#                      bounded run of every fuzz target;
#   vm                 the tests that run inside the Soft-RoCE VM (labels
#                      rdma and vm; a VM that cannot start fails loudly);
#   image              the container image built from the Dockerfile with
#                      scripts/build-image.sh (minutes).
# TEST_STAGES selects stages, e.g. `make test TEST_STAGES="unit e2e"`.
TEST_STAGES ?= unit e2e deploy san vm image
# The stages run in the order given, never in parallel (cmake and ctest
# get their own -j).
.NOTPARALLEL:
test: build $(addprefix test-,$(TEST_STAGES))

# Unit tests $(JOBS) at a time: each has its own files, and the ones with an
# etcd start their own on ports of their own (test/lib/with-etcd.sh).
test-unit: build
	$(call stage,unit,$(CTEST) -L unit -j$(JOBS))

test-e2e: build
	$(call stage,e2e,$(CTEST) -L e2e)

test-deploy: build
	$(call stage,deploy,$(CTEST) -L deploy)

test-vm: build
	$(call stage,vm,$(CTEST) -L 'rdma|vm')

test-rdma: test-vm

test-image: build
	$(call stage,image,$(CTEST) -L image)

build-san: deps
	$(call stage,configure-san,cmake -S . -B $(BUILD_SAN) -DCMAKE_C_COMPILER=clang -DZL_WERROR=ON -DZL_SANITIZE=ON -DZL_FUZZ=ON $(CMAKE_ARGS))
	$(call stage,build-san,cmake --build $(BUILD_SAN) -j$(JOBS))

# The unit tests one after the other, then the fuzz targets $(JOBS) at a
# time: each runs for a fixed time on one core, so running them side by
# side gives each the same executions in less wall time. Then the e2e tests
# of recovery, snapshots' copy-on-write and an emptied disk against the
# sanitizer build's daemons (any runtime error stops a daemon: the test
# fails); leaks are not checked there (daemons end by signal).
SAN_RUN = ctest --test-dir $(BUILD_SAN) --output-on-failure --no-tests=error
SAN_CTEST = ASAN_OPTIONS=detect_leaks=1 $(SAN_RUN)
SAN_E2E = ^(heal_e2e|snap_store_e2e|emptydisk_e2e|watch_compact_e2e)$$
test-san: build-san
	$(call stage,san,$(SAN_CTEST) -L unit && $(SAN_CTEST) -L fuzz -j$(JOBS) && \
		ASAN_OPTIONS=detect_leaks=0 $(SAN_RUN) -R '$(SAN_E2E)')

# `make test` as a new user runs it: a fresh bookworm container with only
# gcc, g++, make, cmake and git, a `git clone` of this tree's committed HEAD,
# then `make test` in it as root. Prints the time of every stage.
# TEST_STAGES is passed on.
test-clean:
	TEST_STAGES="$(TEST_STAGES)" test/clean-machine.sh

bench: build
	bench/compare.sh

# What --auth on costs next to --auth off (zl bench, CPU per I/O, idle CPU).
bench-auth: build
	bench/auth.sh

# The storage fair share: a QD1 reader's p99 alone and beside a hammering
# volume on one daemon, checked against issue 26's 2x (test/e2e/fair_e2e.sh).
# What --metrics costs: callgrind instructions per 4 KiB I/O, on against off.
bench-metrics: build
	bench/metrics_instr.sh

bench-fair: build
	FAIR_P99_RATIO=2 test/e2e/fair_e2e.sh $(BUILD)

# The ublk, NBD and FUSE frontends next to zl bench, in the test VM (fio,
# CPU per I/O of the attach process).
bench-vm: build
	bench/vm_frontends.sh $(BUILD)

clean:
	rm -rf $(BUILD) $(BUILD_SAN)
