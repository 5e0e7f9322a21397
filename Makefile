# Thin wrapper over CMake: `make run` and `make test` are the two commands;
# `make sanitize` runs the tests under ASan and UBSan.
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
WORKLOAD ?= small

SAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan

.PHONY: all build run test sanitize tsan clean

all: build

# CUDA=OFF: the CPU-only build, even where nvcc exists (a fresh build folder).
CUDA ?= ON

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DVCATTN_CUDA=$(CUDA)

# A build folder configured with the other CUDA setting is configured again
# (make CUDA=OFF after a CUDA build builds the CPU backend alone).
build: $(BUILD)/CMakeCache.txt
	@grep -qx 'VCATTN_CUDA:BOOL=$(CUDA)' $(BUILD)/CMakeCache.txt || cmake -S . -B $(BUILD) -DVCATTN_CUDA=$(CUDA)
	cmake --build $(BUILD) -j $(JOBS)

# The main job: every method on the small built-in workload, best backend.
run: build
	$(BUILD)/vcattn eval --workload $(WORKLOAD) --backend auto

# The Python tests run with the python3 on PATH now (an activated virtual
# environment), not the one the build folder was first configured with.
PYTHON ?= $(shell command -v python3 2>/dev/null)

test: build
	@[ -z "$(PYTHON)" ] || cmake -S . -B $(BUILD) -DPython3_EXECUTABLE=$(PYTHON) >/dev/null
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# The C tests and the CLI under AddressSanitizer and UndefinedBehaviorSanitizer
# (CPU backend; any report fails the test that produced it). fuzz_smoke builds
# its own sanitized harnesses; the Python tests and bench_smoke would need the ASan runtime
# preloaded into the interpreter, so both run in `make test` instead, as does
# `install` (it links an unsanitized program against the library).
# RelWithDebInfo: at -O0 the fidelity studies alone take over half an hour.
sanitize:
	cmake -S . -B $(SAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVCATTN_CUDA=OFF \
	      -DCMAKE_C_FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
	cmake --build $(SAN_BUILD) -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	      ctest --test-dir $(SAN_BUILD) --output-on-failure -j $(JOBS) -E "fuzz_smoke|py_|wheel|install|bench_smoke"

# The same tests under ThreadSanitizer (clang, LLVM's OpenMP with archer).
tsan:
	sh tools/tsan.sh $(TSAN_BUILD) $(JOBS)

clean:
	rm -rf $(BUILD) $(SAN_BUILD) $(TSAN_BUILD)
