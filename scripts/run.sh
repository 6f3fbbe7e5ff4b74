#!/usr/bin/env bash
# Sets everything up and runs kjit's main job on this machine.
#
#   scripts/run.sh
#
# Installs the dependencies, builds, starts kjitd (left running: stop it with
# `build/daemon/kjit daemon stop`), shows what the GPU is (or says there is
# none), runs the example that compiles a kernel with NVRTC and, on a GPU,
# launches it and checks every output element, then asks kjitd to tune the
# sample key and shows its queue. The PyTorch shim that reports misses by
# itself joins this script with its issue (see README, "Status").
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac

bash scripts/setup-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "${KJIT_JOBS:-$(nproc)}"
kjit=build/daemon/kjit

echo
echo "== kjitd"
$kjit daemon start
$kjit daemon status
echo
echo "== the GPU"
$kjit device || echo "(no GPU here: kjit compiles kernels but cannot run them; PyTorch keeps its own)"
echo
echo "== run-time compilation example"
./build/examples/compile_and_run/kjit_example_compile_and_run
echo
echo "== a tuning request, and kjitd's queue"
$kjit submit --example
$kjit tasks
echo
echo "kjitd keeps running; stop it with: $kjit daemon stop"
