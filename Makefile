# The two commands of README.md:
#   make demo   installs what is missing, builds, and trains a small local cluster on Fashion-MNIST
#   make test   installs what is missing, builds, and runs the whole test suite (what CI runs)
# Others:
#   make package            the Debian packages gridtrain, python3-gridtrain (and gridtrain-cuda when CUDA is built) in build/
#   make test-hosts         the boot path across hosts: network namespaces booting as the AWS user data does (root)
#   make asan / make tsan   the test suite under ASan+UBSan / TSan (own build folders; see tsan below)
#   make bench              builds and runs the benchmarks (long; not part of `make test`)
#   make fuzz               builds the fuzz targets with clang's libFuzzer and runs each for FUZZ_SECONDS
#   make chaos              a training cluster under random faults for CHAOS_MINUTES (default 30); with
#                           CHAOS_ARGS=--partitions, cuts of the network too (root)
#   make bench-wan          allreduce over shaped wide-area links between network namespaces (root; bench/wan/run)

BUILD ?= build
JOBS  ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps test-deps configure build test demo package test-hosts asan tsan tsan-actors bench bench-wan chaos fuzz clean

all: build

deps:
	@scripts/install-deps.sh

$(BUILD)/build.ninja: | deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)

configure: deps $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# The suite also lints the deployment (shell scripts, the CloudFormation template): its tools come with test-deps.
test-deps:
	@scripts/install-deps.sh test

test: test-deps build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 600

package: build
	cd $(BUILD) && cpack -G DEB
	@ls $(BUILD)/*.deb

# Needs root (network namespaces); about a minute. Not part of `make test`.
test-hosts: test-deps build
	tests/hosts/run.sh $(BUILD)

demo: build
	$(BUILD)/gridnode demo

# LSan's "Suppressions used" table goes to a process's stderr when one of CAF's known leaks was suppressed at exit
# (not every time: it depends on how far CAF's I/O got): print_suppressions=0 keeps it out of the output that the
# process tests read, where it once broke the test that every line of --log-format json is JSON.
asan: deps
	cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DGRIDTRAIN_SANITIZE=address -DGRIDTRAIN_BENCH=OFF
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan-caf.supp:print_suppressions=0 \
	  UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j $(JOBS) --timeout 1200

# TSan runs the tests that do not go through CAF (label unit: config, grid, allreduce, learner with its threads).
# Debian's libcaf is not built with -fsanitize=thread, so TSan cannot see the synchronisation of CAF's mailboxes:
# every message handed from one actor's thread to another is reported as a race. The actor tests need a CAF built
# with TSan to mean anything under it; `make tsan-actors` runs them anyway, for whoever has one.
tsan: deps
	cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DGRIDTRAIN_SANITIZE=thread -DGRIDTRAIN_BENCH=OFF
	cmake --build build-tsan -j $(JOBS)
	cd build-tsan && TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure -j $(JOBS) --timeout 1200 -L unit

tsan-actors: tsan
	cd build-tsan && TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure -j $(JOBS) --timeout 1200 -L cluster

# A training cluster of 6 processes under random kills, stops and restarts (the GridMaster's node included), one
# every 20 s, for CHAOS_MINUTES; it prints what it measured (app/chaos.cpp). Not part of `make test`.
# CHAOS_ARGS=--partitions (root) runs the nodes in network namespaces and makes every other fault a cut of the
# network (one node, a minority, two halves), watched for split brain.
CHAOS_MINUTES ?= 30
CHAOS_ARGS ?=
chaos: build
	$(BUILD)/gridnode chaos --minutes $(CHAOS_MINUTES) $(CHAOS_ARGS) --out chaos-out

# The fuzz targets of tests/fuzz/ under libFuzzer with ASan+UBSan, each for FUZZ_SECONDS (default 300). `make
# test` runs the same targets for a few seconds each, built with g++ (tests/fuzz/smoke_main.cpp).
FUZZ_SECONDS ?= 300
fuzz:
	@scripts/install-deps.sh fuzz
	CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGRIDTRAIN_FUZZ=ON \
	  -DGRIDTRAIN_BENCH=OFF -DGRIDTRAIN_CUDA=OFF
	cmake --build build-fuzz -j $(JOBS) --target fuzz_targets
	scripts/fuzz.sh build-fuzz $(FUZZ_SECONDS)

bench: build
	scripts/run-benchmarks.sh $(BUILD)

# Allreduce over emulated wide-area links (root; network namespaces, TUN delay lines, tc tbf): three links, 2 and 4
# hosts; about 15 minutes. WAN_ARGS passes options (bench/wan/run --help), e.g. WAN_ARGS="--links b --sizes 4".
WAN_ARGS ?=
bench-wan: build
	bench/wan/run --build $(BUILD) $(WAN_ARGS)

clean:
	rm -rf $(BUILD) build-asan build-tsan
