#!/usr/bin/env bash
# Run HERE (not on the GPU machine): downloads the Debian packages the build
# needs into .gpu-debs/, an ignored folder that travels to the GPU machine with
# the device tool's `carry`. That machine reaches no package registry;
# scripts/gpu-run.sh unpacks these into a private prefix there (never into /).
#
#   scripts/fetch-gpu-debs.sh
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac

pkgs=(
  libgtest-dev libgmock-dev googletest libbenchmark-dev libbenchmark1debian
  libcli11-dev libxxhash-dev
  libzmq3-dev libzmq5 libsodium23 libpgm-5.3-0 libnorm1 cppzmq-dev
  libmsgpack-cxx-dev libtbb-dev libtbb12 libtbbmalloc2 libtbbbind-2-5 libhwloc15
  libsqlite3-dev libsqlite3-0 nlohmann-json3-dev
)
mkdir -p .gpu-debs
cd .gpu-debs
[[ -n "$(ls /var/lib/apt/lists 2>/dev/null | grep -v lock)" ]] || apt-get update -qq
apt-get download "${pkgs[@]}" >/dev/null
echo "[fetch-gpu-debs] $(ls *.deb | wc -l) packages, $(du -sh . | cut -f1) in .gpu-debs/"
