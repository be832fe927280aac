#!/usr/bin/env bash
# kiln setup: installs every Debian package kiln needs, configures, builds, and runs the demo.
# Safe to run twice: apt-get skips what is installed, CMake reuses the build directory.
#
#   ./scripts/setup.sh            install + configure + build (preset "release") + `kiln demo`
#   KILN_SKIP_APT=1 ./scripts/setup.sh   skip the package step (no root needed)
#   KILN_SKIP_DEMO=1 ./scripts/setup.sh  build only
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

packages=(
  # build
  build-essential cmake ninja-build pkg-config git
  # libraries (all from Debian; nothing is downloaded at configure time)
  libxbyak-dev libdnnl-dev
  llvm-16-dev llvm-16-tools clang-16 lld-16 libmlir-16-dev mlir-16-tools
  libfmt-dev nlohmann-json3-dev libcli11-dev libxxhash-dev
  libgtest-dev libgmock-dev libbenchmark-dev libdlpack-dev pybind11-dev libtbb-dev
  # tools used by `kiln compile --dump` and the tests (objdump decodes AVX-512/AMX)
  binutils clang-format
  # AArch64 cross build and emulation (used by the NEON backend)
  g++-aarch64-linux-gnu qemu-user
  # the Python package (python/) and its pytest suite
  python3-dev python3-pytest python3-numpy
)

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

if [ "${KILN_SKIP_APT:-0}" != "1" ]; then
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "setup: installing ${#missing[@]} Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    as_root apt-get update -q
    as_root apt-get install -y -q --no-install-recommends "${missing[@]}"
  else
    echo "setup: all Debian packages present"
  fi
fi

# The neon tests run kiln's AArch64 objects under qemu-aarch64 in a driver linked against the
# arm64 libLLVM: Debian multiarch puts it next to the amd64 one. Only the runtime library:
# llvm-16-dev:arm64 would replace the amd64 LLVM, clang and python3. Safe to rerun.
if [ "${KILN_SKIP_APT:-0}" != "1" ]; then
  if ! dpkg-query -W -f='${Status}' libllvm16:arm64 2>/dev/null | grep -q "install ok installed"; then
    echo "setup: installing libllvm16:arm64 (multiarch) for the neon tests"
    dpkg --print-foreign-architectures | grep -qx arm64 || as_root dpkg --add-architecture arm64
    export DEBIAN_FRONTEND=noninteractive
    as_root apt-get update -q
    as_root apt-get install -y -q --no-install-recommends libllvm16:arm64
  fi
fi

preset="${KILN_PRESET:-release}"
cmake --preset "$preset"
cmake --build --preset "$preset"

if [ "${KILN_SKIP_DEMO:-0}" != "1" ]; then
  "build/$preset/tools/kiln" demo
fi
