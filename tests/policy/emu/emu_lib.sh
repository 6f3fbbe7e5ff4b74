# Sourced by the CPU emulation scripts (run.sh, pool.sh, reduce.sh, softmax.sh, depthwise_conv.sh,
# matmul.sh; and benchmarks/experiments/bmm63/emu-check.sh, whose cases run hand-edited kernels).
#
#   emu_setup RUN_SOURCE GEN_SOURCE [BUILD_DIR]
#
# builds, in a temporary folder removed on exit, $work/run (the family's harness: loads a generated
# kernel compiled as a shared library and runs it one std::thread per CUDA thread, emu.h) and
# $work/gen (writes the kernel for a key and point with the family's generator, linked against
# BUILD_DIR's kjit_policy; default build/). Then `r NAME GEN_ARGS...` runs one case: the generator
# prints "HARNESS_ARGS | POINT", the kernel is compiled with the host compiler and the harness run
# with HARNESS_ARGS; a failure sets failed=1, and the script ends with `exit $failed`. RUN_SOURCE and
# GEN_SOURCE are files of this folder ($here).
emu_setup() {
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  root=$(cd "$here/../../.." && pwd)
  build=$(cd "${3:-$root/build}" && pwd)
  cuda=${KJIT_CUDA_HOME:-/usr/local/cuda}
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  g++ -std=c++20 -O1 -rdynamic -I"$cuda/include" -I"$here" "$here/$1" -o "$work/run" -ldl -lpthread
  g++ -std=c++20 -O1 -I"$root/policy/include" -I"$root/runtime/include" -I"$root/cache/include" "$here/$2" \
    -o "$work/gen" "$build/policy/libkjit_policy.a" "$build/cache/libkjit_cache.a" "$build/runtime/libkjit_runtime.a" \
    -L"$cuda/lib64" -lnvrtc -lsqlite3 -lxxhash -ldl -lpthread -Wl,-rpath,"$cuda/lib64"
  failed=0
}

# Compiles $work/NAME.cc into $work/NAME.so.
emu_compile_kernel() {
  g++ -std=c++20 -O1 -w -fPIC -shared -I"$cuda/include" -I"$here" "$work/$1.cc" -o "$work/$1.so"
}

# Compiles $work/NAME.cc and runs the harness on it with HARNESS_ARGS (the generator's line before " | ",
# POINT after it): prints "NAME [POINT]: RESULT"; a failure sets failed=1.
emu_run_kernel() {
  local name=$1 line=$2
  emu_compile_kernel "$name"
  local res
  if res=$(timeout 300 "$work/run" "$work/$name.so" ${line% | *}); then echo "$name [${line#* | }]: $res"; else
    echo "$name [${line#* | }]: $res (exit $?)"; failed=1
  fi
}

r() {
  local name=$1
  shift
  local line
  line=$("$work/gen" "$work/$name.cc" "$@") || { echo "$name: $line"; failed=1; return; }
  emu_run_kernel "$name" "$line"
}
