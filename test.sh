#!/usr/bin/env bash
# The test command of the README and of CI: installs what is missing, builds, and runs every test that this
# machine can run: the normal build (all labels; gpu only where a GPU is), the ASan+UBSan build, and short
# libFuzzer runs of every decoder of outside bytes.
set -euo pipefail
cd "$(dirname "$0")"
scripts/deps.sh
scripts/fetch_assets.sh
jobs=$(nproc)
start=$(date +%s)

echo "== build (release)"
scripts/build.sh release
echo "== tests (release)"
(cd build && ctest --output-on-failure -j "$jobs" -LE fuzz)

echo "== build (asan+ubsan)"
scripts/build.sh sanitize
echo "== tests (asan+ubsan: unit, integration)"
(cd build-sanitize && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
   ctest --output-on-failure -j "$jobs" -L 'unit|integration')

echo "== build (libFuzzer)"
scripts/build.sh fuzz
echo "== fuzz (${CPT_FUZZ_SECONDS:-20} s per harness)"
# each harness is one process on one core: they run side by side
(cd build-fuzz && ctest --output-on-failure -j "$jobs" -L fuzz)

echo "== all tests passed in $(( $(date +%s) - start )) s"
