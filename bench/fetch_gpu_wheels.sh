#!/usr/bin/env bash
# Download, here, the wheels bench/gpu_check.sh needs on the device machine (Python 3.12, x86-64,
# no internet there). They go to .whl/ (git-ignored); pass carry=[".whl"] to the device tool.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
PLATFORMS="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any"
for package in playground mujoco==3.17.0 mujoco-mjx==3.17.0 warp-lang ml_collections etils brax flax orbax-checkpoint \
        hydra-core omegaconf antlr4-python3-runtime gymnasium cloudpickle farama-notifications tqdm \
        glfw pyopengl absl-py lxml trimesh; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLATFORMS \
        -d .whl "$package" || echo "could not fetch $package"
done
du -sh .whl
