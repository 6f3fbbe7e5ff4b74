#!/usr/bin/env bash
# Sets everything up and runs kjit's main job on this machine.
#
#   scripts/run.sh
#
# Today that is: install the dependencies, build, print what the GPU is (or that
# there is none), and run the example that compiles a kernel with NVRTC and, on
# a GPU, launches it and checks every output element. kjitd and the PyTorch shim
# join this script when they land (see README, "Status").
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac

bash scripts/setup-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "${KJIT_JOBS:-$(nproc)}"
echo
./build/daemon/kjit device || echo "(no GPU here: kjit compiles kernels but cannot run them; PyTorch keeps its own)"
echo
./build/examples/compile_and_run/kjit_example_compile_and_run
