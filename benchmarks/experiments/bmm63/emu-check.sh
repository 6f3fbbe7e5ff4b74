#!/usr/bin/env bash
# A CPU check of a variants.py variant that keeps the launch shape (m; s and i are codegen 6's own): each case's
# kernel is generated for the CPU emulation (tests/policy/emu, matmul_gen), edited as variants.py edits an
# emitted source, and run beside the unedited kernel one std::thread per CUDA thread (matmul_run): both must
# match the promised product bit for bit, NaN, +-Inf and -0.0 included, and read only inside the views.
#
#   benchmarks/experiments/bmm63/emu-check.sh [LETTERS] [BUILD_DIR]    (LETTERS: default m; BUILD_DIR: build/)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
emu="$root/tests/policy/emu"
letters=${1:-m}
build=$(cd "${2:-$root/build}" && pwd)
cuda=${KJIT_CUDA_HOME:-/usr/local/cuda}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
g++ -std=c++20 -O1 -rdynamic -I"$cuda/include" -I"$emu" "$emu/matmul_run.cc" -o "$work/run" -ldl -lpthread
g++ -std=c++20 -O1 -I"$root/policy/include" -I"$root/runtime/include" -I"$root/cache/include" "$emu/matmul_gen.cc" \
  -o "$work/gen" "$build/policy/libkjit_policy.a" "$build/cache/libkjit_cache.a" "$build/runtime/libkjit_runtime.a" \
  -L"$cuda/lib64" -lnvrtc -lsqlite3 -lxxhash -ldl -lpthread -Wl,-rpath,"$cuda/lib64"
failed=0
r() {
  local name=$1; shift
  local line
  line=$("$work/gen" "$work/$name.cc" "$@") || { echo "$name: $line"; failed=1; return; }
  if ! python3 -c "
import importlib.util, sys
spec = importlib.util.spec_from_file_location('v', '$here/variants.py'); v = importlib.util.module_from_spec(spec)
spec.loader.exec_module(v)
try:
    open('$work/${name}v.cc', 'w').write(v.make(open('$work/$name.cc').read(), '$letters'))
except AssertionError as e:
    print('$name: variant $letters not made for this case:', e); sys.exit(1)"; then return; fi
  for k in "$name" "${name}v"; do
    g++ -std=c++20 -O1 -w -fPIC -shared -I"$cuda/include" -I"$emu" "$work/$k.cc" -o "$work/$k.so"
    local res
    if res=$(timeout 300 "$work/run" "$work/$k.so" ${line% | *}); then echo "$k [${line#* | }]: $res"; else
      echo "$k: $res (exit $?)"; failed=1
    fi
  done
}
# Span 2, 8x4 a thread (the odd-batch default's shape): offsets of 4 and 12 bytes, broadcast B with two items
# ahead, f16, the copies synchronous.
r e1 bmm f32 37,63,63,63 3969,63,1 3969,63,1 0 aoff=1 boff=3 stage=4 bm=64 bn=64 bk=16 tm=8 tn=4 vec=1 bpb=1 hint=0 minb=1 ahead=1 span=2
r e2 bmm f32 37,63,63,63 3969,63,1 0,63,1 0 aoff=2 boff=1 stage=4 bm=64 bn=64 bk=16 tm=8 tn=4 vec=1 bpb=4 hint=1 minb=1 ahead=2 span=2
r e3 bmm f16 9,63,63,63 3969,63,1 3969,63,1 0 aoff=1 boff=5 stage=4 bm=64 bn=64 bk=16 tm=8 tn=4 vec=1 bpb=3 hint=0 minb=1 ahead=1 span=2
KJIT_EMU_CP_ASYNC=sync r e4 bmm f32 37,63,63,63 3969,63,1 3969,63,1 0 aoff=1 boff=3 stage=4 bm=64 bn=64 bk=16 tm=8 tn=4 vec=1 bpb=1 hint=0 minb=1 ahead=1 span=2
exit $failed
