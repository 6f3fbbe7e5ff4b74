#!/usr/bin/env bash
# On the GPU machine: the fixed cost of a launch that streams memory, against the bmm ring's. A plain float4
# c = a + b over three buffers of S bytes each moves exactly what a bmm of S / 16 KB 64x64 f32 matrices moves
# (A and B read, C written once); timed through ../launch.cu (CUDA events, L2 flushed, median) at the three
# bmm headroom sizes and at 4 KB (a launch that moves nothing to speak of), beside the emitted ring defaults
# (src/, from `kjit_tune_spaces --emit-sources`, carried). time - 3 S / bandwidth is each kernel's fixed cost.
set -uo pipefail
cd "$(dirname "$0")"
OUT="${OUT:-/tmp/fixed-out}"; mkdir -p "$OUT"
nvcc -std=c++17 -O2 ../launch.cu -o /tmp/launch -lcuda -lnvrtc || exit 1
# SIZES: other operand sizes (bytes, a multiple of 16), e.g. the odd bmm's 4095 x 63^2 floats rounded down: 65012208.
for s in ${SIZES:-4096 33554432 67108864 134217728}; do
  n4=$((s / 16)); blocks=$(( n4 / 512 < 132 * 4 ? (n4 + 511) / 512 : 132 * 4 ))
  cat > /tmp/add_$s.cu <<CU
// c = a + b over $s bytes each
// launch: entry kjit_add grid $blocks,1,1 block 512,1,1 shared 0 workspace 0
// nvrtc options: --std=c++17
constexpr long long N4 = $n4;
extern "C" __global__ void __launch_bounds__(512) kjit_add(const float4* a, const float4* b, float4* c) {
  for (long long i = blockIdx.x * 512ll + threadIdx.x; i < N4; i += (long long)gridDim.x * 512) {
    const float4 x = __ldcs(a + i), y = __ldcs(b + i);
    __stcs(c + i, make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w));
  }
}
CU
  /tmp/launch /tmp/add_$s.cu $s $s $s --runs 55 | tee -a "$OUT/times.md"
done
[[ -n "${SIZES:-}" ]] || for bt in 2048 4096 8192; do
  f=$(grep -l "bmm ${bt}x(64x64" src/*.cu | head -1); s=$((bt * 16384))
  /tmp/launch "$f" $s $s $s --runs 55 | tee -a "$OUT/times.md"
done
