#!/usr/bin/env bash
# Installs everything kjit builds against. Idempotent: run it as often as you like.
#
#   scripts/setup-deps.sh [--no-torch]
#
# Debian packages: the build tools and libraries (ZeroMQ, msgpack-c, oneTBB,
# SQLite, GoogleTest, Google Benchmark, CLI11, xxHash, nlohmann/json). LibTorch: PyPI's
# torch==2.11.0 wheel (the GPU machine's version), unpacked into .deps/torch
# without its Python dependencies: kjit uses only its C++ headers, libraries and
# CMake config. The CUDA 13 toolkit is expected at /usr/local/cuda (or
# $CUDA_HOME); it is not installed here.
set -euo pipefail
cd "$(dirname "$0")/.."

want_torch=1
for arg in "$@"; do
  case "$arg" in
    --no-torch) want_torch=0 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup-deps: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

say() { printf '[setup] %s\n' "$*"; }

# --- Debian packages
packages=(
  build-essential cmake ninja-build pkg-config python3-pip clang libclang-rt-14-dev
  libzmq3-dev cppzmq-dev libmsgpack-cxx-dev libtbb-dev libsqlite3-dev
  libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev libxxhash-dev nlohmann-json3-dev
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  say "installing Debian packages: ${missing[*]}"
  SUDO=""
  [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  say "Debian packages: all present"
fi

# --- CUDA toolkit (headers and NVRTC; no driver needed)
cuda_home="${CUDA_HOME:-/usr/local/cuda}"
if [[ ! -f "$cuda_home/include/cuda.h" || ! -f "$cuda_home/include/nvrtc.h" ]]; then
  echo "setup-deps: no CUDA toolkit at $cuda_home (need include/cuda.h and NVRTC)." >&2
  echo "Install the CUDA 13 toolkit, or set CUDA_HOME to where it is." >&2
  exit 1
fi
say "CUDA toolkit: $cuda_home ($("$cuda_home/bin/nvcc" --version 2>/dev/null | grep -o 'release [0-9.]*' || echo 'nvcc not found'))"

# --- LibTorch from the torch==2.11.0 wheel
torch_version=2.11.0
torch_dir=.deps/torch
if ((want_torch)); then
  if [[ -f "$torch_dir/torch/share/cmake/Torch/TorchConfig.cmake" && "$(cat "$torch_dir/.version" 2>/dev/null)" == "$torch_version" ]]; then
    say "LibTorch $torch_version: present in $torch_dir"
  else
    say "LibTorch $torch_version: downloading the torch wheel from PyPI (~530 MB) into $torch_dir"
    rm -rf "$torch_dir"
    mkdir -p "$torch_dir"
    python3 -m pip install --quiet --disable-pip-version-check --no-deps --no-compile \
      --target "$torch_dir" "torch==$torch_version"
    echo "$torch_version" > "$torch_dir/.version"
    say "LibTorch $torch_version: installed"
  fi
fi
say "done"
