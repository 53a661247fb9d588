#!/usr/bin/env bash
# The test command of the README and of CI: installs what is missing, builds, and runs every test that this
# machine can run: the normal build (all labels; gpu only where a GPU is, and CUDA built only there), then one clang
# build with ASan+UBSan that runs the unit and integration tests under the sanitizers and every fuzz harness (its
# corpus replayed, then CPT_FUZZ_SECONDS of fresh fuzzing; default 2). Each phase prints its time.
set -euo pipefail
cd "$(dirname "$0")"
scripts/deps.sh
scripts/fetch_assets.sh
# One test more than cores: many tests spend part of their time waiting (daemons starting, Slurm scheduling, sleeps
# between polls), and a third test fills that time (docs/performance.md, "Test suite").
jobs=$(( $(nproc) + 1 ))
# Tests run side by side on few cores: OpenMP workers that spin while they wait take the core from the other test
# (docs/performance.md, "Rollout (CPU)"). Passive waiting for the tests only; the product's default is unchanged.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }

# The sanitizer build starts at once at the lowest CPU priority: it takes only what the release build and tests
# leave idle (tests waiting on daemons and sleeps, serial links, a phase's last test running alone), so much of it
# is done by the time the release tests are. Its own process group, so an early exit stops all of it.
setsid -w nice -n 19 scripts/build.sh sanitize > build-sanitize.log 2>&1 &
san_build=$!
trap 'kill -- -"$san_build" 2> /dev/null || true' EXIT

# The build under test: build/ with CUDA where a GPU is (the gpu tests run on it); without a GPU, build-cpu/ without
# CUDA: compiling the kernels there takes minutes of a small machine and runs nothing (./run.sh and the sbatch
# scripts use build/, with CUDA wherever nvcc is; tests/gpu/device_all.sh builds the kernels for the GPU machine).
if [ -e /dev/nvidia0 ]; then kind=release; else kind=cpu; fi
echo "== build ($kind)"
dir=$(scripts/build.sh "$kind" | tail -n 1)
echo "== build ($kind) done at $(elapsed) s"
(cd "$dir" && ctest --output-on-failure -j "$jobs" -LE fuzz)
echo "== tests ($kind) done at $(elapsed) s"

echo "== build (clang, asan+ubsan, libFuzzer): waiting for the background build"
wait "$san_build" || { cat build-sanitize.log; echo "== build (clang, asan+ubsan, libFuzzer) failed"; exit 1; }
trap - EXIT
echo "== build (clang, asan+ubsan, libFuzzer) done at $(elapsed) s"
echo "== tests (asan+ubsan: unit, integration; fuzz: corpus replay + ${CPT_FUZZ_SECONDS:-2} s per harness)"
# each fuzzer is one process on one core: they run side by side with the tests
(cd build-sanitize && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
   ctest --output-on-failure -j "$jobs" -L 'unit|integration|fuzz')
echo "== tests (asan+ubsan, fuzz) done at $(elapsed) s"

echo "== all tests passed in $(elapsed) s"
