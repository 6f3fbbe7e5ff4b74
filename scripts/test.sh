#!/usr/bin/env bash
# Sets up, builds and runs every test: the README's test command and what CI runs.
#
#   scripts/test.sh [--no-sanitize] [--full-sweep]
#
# Three builds: build/ (RelWithDebInfo; nvcc compiles every family's expert-default kernels for sm_80, sm_90 and
# sm_100 as part of it, build/kernel-check/report.md) runs all tests; build-fuzz/ (clang)
# fuzzes the kjitd protocol decoder with libFuzzer for 30 s; build-asan/ runs
# the CPU tests again under AddressSanitizer and UndefinedBehaviorSanitizer. Tests that
# need a GPU are labelled `gpu` and are reported as skipped, with their reason,
# where there is none. The design-space sweeps compile each sample key's pairwise
# cover with NVRTC; --full-sweep compiles every valid point (hours on two cores:
# run it before a change to a family's generator lands). Each phase prints its time.
set -euo pipefail
cd "$(dirname "$0")/.."

sanitize=1
for arg in "$@"; do
  case "$arg" in
    --no-sanitize) sanitize=0 ;;
    --full-sweep) export KJIT_FULL_SWEEP=1 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "test.sh: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

started=$SECONDS
phase() { echo "[test] $* (at $((SECONDS - started)) s)"; }

bash scripts/setup-deps.sh
jobs="${KJIT_JOBS:-$(nproc)}"

phase "configure and build build/"
# nvcc compiles the families' kernels ahead of run time where the toolkit has it (NVRTC alone suffices to run).
nvcc_kernels=OFF
if [[ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]]; then
  nvcc_kernels=ON
else
  echo "[test] no nvcc in ${CUDA_HOME:-/usr/local/cuda}/bin: the families' kernels are not compiled ahead of run time (KJIT_NVCC_KERNELS off)"
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKJIT_WERROR=ON -DKJIT_NVCC_KERNELS=$nvcc_kernels >/dev/null
cmake --build build -j "$jobs"
phase "run all tests (GPU tests skip without a GPU)"
(cd build && ctest --output-on-failure -j "$jobs" --timeout 600)
# CTest lists skipped tests without their reasons; print each distinct reason once.
reasons=$(grep -h -A1 ': Skipped$' build/Testing/Temporary/LastTest.log 2>/dev/null | grep -v -e ': Skipped$' -e '^--$' | sort | uniq -c || true)
if [[ -n "$reasons" ]]; then
  echo "[test] skipped tests, by reason (count, reason):"
  echo "$reasons"
fi

phase "libFuzzer on the kjitd protocol decoder, 30 s"
bash scripts/fuzz-ipc.sh 30

if ((sanitize)); then
  phase "configure and build build-asan/ (ASan + UBSan)"
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DKJIT_SANITIZE=ON -DKJIT_BUILD_BENCHMARKS=OFF \
    -DKJIT_BUILD_GPU_TESTS=OFF -DKJIT_WERROR=ON >/dev/null
  cmake --build build-asan -j "$jobs"
  phase "run CPU tests under sanitizers"
  # -L is a regular expression: anchored, so that tests labelled cpu_release stay out.
  # Not the NVRTC compile sweeps (EveryPointCompilesFor*): their time is NVRTC's, which the sanitizers do not
  # check, and the release run above compiles the same covers; SampledSourcesArePinned still runs each family's
  # Generate here on 4,000 drawn points a key. Not the tests whose every process loads the repository's
  # datasets (Replay.*, Agent.*, Online.*: 70-150 s each here, 35 minutes in all) nor MatmulSpace's walk of its
  # 6.2 million points a key (180 s here): one Replay and one Online test, run after the others, keep the loader
  # and the tuner's episodes under the sanitizers; the release run has them all.
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 KJIT_SPACE_SWEEP=cover ctest --output-on-failure -j "$jobs" -L '^cpu$' --timeout 600 \
    -E 'EveryPointCompilesFor|^Replay[.]|^Agent[.]|^Online[.]|^MatmulSpace[.]BulkFollowsTheArchAndTheLayout$')
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j "$jobs" -L '^cpu$' --timeout 600 \
    -R '^Replay[.]EveryDatasetKeyBecomesATask$|^Online[.]EpisodeProposesValidUntriedPointsAndRecordsThePolicyVersion$')
fi
phase "done"

