#!/usr/bin/env bash
# Wheels for the GPU machine, whose Python (3.12, torch's virtual
# environment) holds torch, transformers and huggingface_hub 1.x but not
# diffusers: diffusers and importlib_metadata, the one requirement of it
# that image lacks, into DIR (default .whl, git-ignored). Carry DIR in the
# device call; tools/gpu_check.sh installs what it finds in .whl into a
# folder of its own, so the diffusers GPU tests run instead of skipping.
# (Installing diffusers with all its requirements would shadow the image's
# huggingface_hub 1.x with 2.x, which diffusers' loaders refuse.)
#   bash tools/device_wheels.sh [DIR]
set -euo pipefail
dir=${1:-.whl}
mkdir -p "$dir"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform any -d "$dir" \
    diffusers==0.42.1 importlib_metadata
ls "$dir"
