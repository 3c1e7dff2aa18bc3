#!/usr/bin/env bash
# Download, here, the wheels bench/gpu_check.sh needs on the device machine (Python 3.12, x86-64,
# no internet there). They go to .whl/ and .gl/ (git-ignored); pass carry=[".whl", ".gl"] to the device tool.
# warp-lang is left out: its wheel (149 MB) is over the tool's 64 MiB carry limit, so MJX runs with
# impl="jax" there (genpol's default when warp is not installed).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
PLATFORMS="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any"
for package in playground mujoco==3.17.0 mujoco-mjx==3.17.0 ml_collections etils brax flax orbax-checkpoint \
        hydra-core omegaconf gymnasium cloudpickle farama-notifications tqdm \
        jaxopt mediapy tensorboardx glfw pyopengl absl-py lxml trimesh \
        optax tensorflow-probability dm-tree decorator gast; do  # the last five: authors_cost's JAX side
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLATFORMS \
        -d .whl "$package" || echo "could not fetch $package"
done
# hydra needs antlr4 4.9.3 exactly, which PyPI has only as an sdist: build its (pure Python) wheel here.
python3 -m pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3
# MuJoCo's EGL rendering needs libEGL, which the device image lacks: its Debian packages go to .gl/
# (carry=[".whl", ".gl"]); gpu_check.sh unpacks them there.
mkdir -p .gl /tmp/amd64/partial
apt_amd64='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
apt-get $apt_amd64 update >/dev/null
(cd .gl && apt-get $apt_amd64 download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
du -sh .whl .gl
