#!/usr/bin/env bash
# Sets up, builds and runs every test: the README's test command and what CI runs.
#
#   scripts/test.sh [--no-sanitize]
#
# Three builds: build/ (RelWithDebInfo; nvcc compiles every family's expert-default kernels for sm_80, sm_90 and
# sm_100 as part of it, build/kernel-check/report.md) runs all tests; build-fuzz/ (clang)
# fuzzes the kjitd protocol decoder with libFuzzer for 30 s; build-asan/ runs
# the CPU tests again under AddressSanitizer and UndefinedBehaviorSanitizer. Tests that
# need a GPU are labelled `gpu` and are reported as skipped, with their reason,
# where there is none.
set -euo pipefail
cd "$(dirname "$0")/.."

sanitize=1
for arg in "$@"; do
  case "$arg" in
    --no-sanitize) sanitize=0 ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "test.sh: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

bash scripts/setup-deps.sh
jobs="${KJIT_JOBS:-$(nproc)}"

echo "[test] configure and build build/"
# nvcc compiles the families' kernels ahead of run time where the toolkit has it (NVRTC alone suffices to run).
nvcc_kernels=OFF
if [[ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]]; then
  nvcc_kernels=ON
else
  echo "[test] no nvcc in ${CUDA_HOME:-/usr/local/cuda}/bin: the families' kernels are not compiled ahead of run time (KJIT_NVCC_KERNELS off)"
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKJIT_WERROR=ON -DKJIT_NVCC_KERNELS=$nvcc_kernels >/dev/null
cmake --build build -j "$jobs"
echo "[test] run all tests (GPU tests skip without a GPU)"
(cd build && ctest --output-on-failure -j "$jobs" --timeout 600)
# CTest lists skipped tests without their reasons; print each distinct reason once.
reasons=$(grep -h -A1 ': Skipped$' build/Testing/Temporary/LastTest.log 2>/dev/null | grep -v -e ': Skipped$' -e '^--$' | sort | uniq -c || true)
if [[ -n "$reasons" ]]; then
  echo "[test] skipped tests, by reason (count, reason):"
  echo "$reasons"
fi

echo "[test] libFuzzer on the kjitd protocol decoder, 30 s"
bash scripts/fuzz-ipc.sh 30

if ((sanitize)); then
  echo "[test] configure and build build-asan/ (ASan + UBSan)"
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DKJIT_SANITIZE=ON -DKJIT_BUILD_BENCHMARKS=OFF -DKJIT_WERROR=ON >/dev/null
  cmake --build build-asan -j "$jobs"
  echo "[test] run CPU tests under sanitizers"
  # -L is a regular expression: anchored, so that tests labelled cpu_release stay out.
  # Not matmul's compile sweep: enumerating its ten-knob space under the sanitizers outlasts the test's 900 s
  # (the release build above compiles its pairwise cover in ~100 s, and the matmul space tests run here).
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 KJIT_SPACE_SWEEP=cover ctest --output-on-failure -j "$jobs" -L '^cpu$' --timeout 600 \
    -E 'EveryPointCompilesForSm90/matmul')
fi
