# ddpc top-level commands. `make test` and `make demo` install what is
# missing (scripts/setup), configure, build and run.
BUILD ?= build
JOBS ?= 2
PYTHON ?= python3
CMAKE_FLAGS ?=

.PHONY: all setup configure build test test-format test-lit test-unit test-backend test-backend-other \
        test-light test-cuda-emulate test-python test-fuzz fuzz demo \
        demo-inference bench clean format

all: build

setup:
	@bash scripts/setup

$(BUILD)/build.ninja:
	cmake -G Ninja -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

configure: setup $(BUILD)/build.ninja

build: configure
	ninja -C $(BUILD) -j$(JOBS)

test-lit: build
	ninja -C $(BUILD) check-ddpc

test-unit: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

# Every ONNX backend node test whose ops ddpc supports, against the
# reference outputs shipped in the onnx wheel.
test-backend: build
	$(PYTHON) test/backend/run_backend_tests.py --suite node --jobs $(JOBS) \
	  --report $(BUILD)/backend-node-report.md --json $(BUILD)/backend-node.json

# The simple, pytorch-converted and pytorch-operator suites (140 models).
test-backend-other: build
	$(PYTHON) test/backend/run_backend_tests.py --suite simple --suite pytorch-converted \
	  --suite pytorch-operator --jobs $(JOBS) --report $(BUILD)/backend-other-report.md

# The light/ real-model architectures (AlexNet, ResNet-50, ...).
test-light: build
	$(PYTHON) test/backend/run_backend_tests.py --suite light --jobs $(JOBS) \
	  --report $(BUILD)/backend-light-report.md

# The CUDA target's kernel-level IR (GEMM library calls, atomic
# scatter-adds, thread-mapped loops) run on the CPU over the same suites:
# tests the CUDA lowering without a GPU (docs/architecture.md).
test-cuda-emulate: build
	$(PYTHON) test/backend/run_backend_tests.py --suite node --suite light --jobs $(JOBS) \
	  --target cuda-emulate --report $(BUILD)/backend-cuda-emulate-report.md

# End-to-end CLI/model tests, the training runtime, and the Python API.
test-python: build
	DDPC_UNITTEST_DIR=$(CURDIR)/$(BUILD)/unittests PYTHONPATH=$(CURDIR)/$(BUILD)/python \
	  $(PYTHON) -m pytest -q -p no:cacheprovider test/e2e test/runtime test/python

# The libFuzzer targets (fuzz/README.md): the inputs that once crashed,
# then a 30-second run of each target. `make fuzz` runs them 30 minutes each.
FUZZ_SECONDS ?= 1800
test-fuzz: setup
	JOBS=$(JOBS) bash scripts/fuzz 30

fuzz: setup
	JOBS=$(JOBS) bash scripts/fuzz $(FUZZ_SECONDS)

test: test-format test-lit test-unit test-backend test-backend-other test-light test-cuda-emulate test-python test-fuzz

# The main job: data-parallel training of a CNN on Fashion-MNIST (2 ranks),
# then the digits MLP. Each checks test accuracy with onnxruntime.
demo: build
	$(PYTHON) examples/fashion_mnist/demo.py --ddpc $(BUILD)/bin/ddpc
	$(PYTHON) examples/digits/demo.py --ddpc $(BUILD)/bin/ddpc

# Inference: real CNN architectures compiled and checked against onnxruntime.
demo-inference: build
	$(PYTHON) examples/inference_demo.py --ddpc $(BUILD)/bin/ddpc

# ddpc vs onnxruntime / PyTorch (bench/README.md); not part of `test`.
bench: build
	$(PYTHON) bench/run_bench.py --ddpc $(BUILD)/bin/ddpc

# The formatters and versions scripts/check-format (part of make test) holds
# the tree to.
format: setup
	git ls-files '*.cpp' '*.h' '*.cu' | xargs clang-format-14 -i
	git ls-files '*.py' | xargs $(PYTHON) -m black -q

test-format: setup
	scripts/check-format

clean:
	rm -rf $(BUILD) build-fuzz build-fuzz.configure.log
