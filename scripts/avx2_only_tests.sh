#!/usr/bin/env bash
# Runs x86 tests on an emulated AVX2-only CPU (qemu-x86_64's Haswell model, from the qemu-user
# package that setup.sh installs). The CI machine has AVX-512, so its avx2 test paths would not
# notice an AVX-512 instruction in host code that runs at the AVX2 level (a function compiled
# with an AVX-512 target attribute called without the level check); here it would be a SIGILL.
# The tests see only the avx2 level under the model. qemu's TCG is ~50x slower than the host,
# so this is a manual check with a narrow default filter, not a CI step.
#
#   scripts/avx2_only_tests.sh [BUILD_DIR] [GTEST_FILTER] [TEST_BINARY]
#
# Defaults: build/release, paged attention's direct kernel and its fp8 stage (about 25 minutes),
# tests/x86/test_x86_attention.
set -euo pipefail

build="${1:-build/release}"
filter="${2:-*PagedDirect*:*PagedFp8*:X86AttentionPaged.*}"
binary="${3:-tests/x86/test_x86_attention}"

if ! command -v qemu-x86_64 >/dev/null; then
  echo "qemu-x86_64 not found: install qemu-user (scripts/setup.sh does)" >&2
  exit 2
fi
if [[ ! -x "$build/$binary" ]]; then
  echo "$build/$binary not found: build it first (ninja -C $build $binary)" >&2
  exit 2
fi
exec qemu-x86_64 -cpu Haswell-noTSX-IBRS "$build/$binary" --gtest_filter="$filter"
