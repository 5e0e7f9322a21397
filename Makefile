# Thin wrapper over CMake: `make run` and `make test` are the two commands.
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
WORKLOAD ?= small

.PHONY: all build run test clean

all: build

# CUDA=OFF: the CPU-only build, even where nvcc exists (a fresh build folder).
CUDA ?= ON

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DVCATTN_CUDA=$(CUDA)

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# The main job: every method on the small built-in workload, best backend.
run: build
	./$(BUILD)/vcattn eval --workload $(WORKLOAD) --backend auto

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

clean:
	rm -rf $(BUILD)
