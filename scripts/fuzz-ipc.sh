#!/usr/bin/env bash
# The libFuzzer run of the kjitd protocol decoder (tests/ipc/fuzz_decode.cc).
#
#   scripts/fuzz-ipc.sh [SECONDS] [LIBFUZZER_FLAG...]     e.g. scripts/fuzz-ipc.sh 600 -jobs=2
#
# Builds the target with clang (-fsanitize=fuzzer,address,undefined) in
# build-fuzz/ and fuzzes for SECONDS (60). The corpus, seeded with encoded sample
# messages, stays in build-fuzz/fuzz/corpus/ and grows from run to run; an input
# that crashes is saved in build-fuzz/fuzz/ and the script exits non-zero.
# (g++ builds run the same target with a simple mutator as the ctest ipc.fuzz_decode.)
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=60
if [[ $# -gt 0 && "$1" != -* ]]; then
  seconds="$1"
  shift
fi
case "${1:-}" in
  -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
jobs="${KJIT_JOBS:-$(nproc)}"

echo "[fuzz] configure and build build-fuzz/ with clang"
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DKJIT_BUILD_BENCHMARKS=OFF -DKJIT_WITH_TORCH=OFF >/dev/null
cmake --build build-fuzz -j "$jobs" --target kjit_ipc_fuzz_decode

out=build-fuzz/fuzz
mkdir -p "$out/corpus"
echo "[fuzz] fuzzing Decode for ${seconds} s (corpus $out/corpus)"
KJIT_FUZZ_SEED_DIR="$out/corpus" build-fuzz/tests/ipc/kjit_ipc_fuzz_decode \
  -max_total_time="$seconds" -artifact_prefix="$out/" -print_final_stats=1 "$@" "$out/corpus"
