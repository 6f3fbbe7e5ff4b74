#!/usr/bin/env bash
# On the GPU machine: build the experiment (the generated defaults from the emitted sources, renamed), time it,
# profile it with ncu. Usage: bash benchmarks/experiments/bmm64/run.sh (OUT set by the device tool); the sources in src/ and
# ../pool-src/ come from `kjit_tune_spaces --emit-sources` (benchmarks/experiments/README.md).
set -uo pipefail
cd "$(dirname "$0")"
OUT="${OUT:-/tmp/bmm64-out}"; mkdir -p "$OUT"
args=""
for bt in 2048 4096 8192; do
  f=$(grep -l "bmm ${bt}x(64x64" src/*.cu | head -1)
  grid=$(sed -n 's/.*launch: entry kjit_matmul grid \([0-9]*\),.*/\1/p' "$f")
  # nvcc's host pass sees the CPU-emulation branch (tests/policy/emu): empty stand-ins.
  { echo '#ifndef __CUDA_ARCH__'; for e in emu_mbar_init emu_mbar_expect emu_bulk_copy emu_mbar_wait; do
      echo "template <class... T> __host__ __device__ void $e(T...) {}"; done; echo '#endif'
    sed "s/kjit_matmul(/gen_${bt}(/" "$f"; } > /tmp/gen_${bt}.cu
  nvcc -arch=sm_90 -std=c++17 -O3 -c /tmp/gen_${bt}.cu -o /tmp/gen_${bt}.o --diag-suppress=177 -Xptxas -v 2>&1 | grep -E "registers|spill" | head -2
  args="$args -DGEN_GRID_${bt}=$grid"
done
nvcc -arch=sm_90 -std=c++17 -O3 $args bench.cu /tmp/gen_*.o -o /tmp/bmm64 -Xptxas -v 2> "$OUT/ptxas.txt" || { cat "$OUT/ptxas.txt" | tail -30; exit 1; }
grep -E "bmm64_ws|registers|spill" "$OUT/ptxas.txt" | head -60
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw --format=csv
/tmp/bmm64 | tee "$OUT/times.md"
if [[ "${NCU:-1}" == 1 ]]; then
  timeout 300 ncu --clock-control none -k "regex:gen_4096|bmm64_ws|bmm64_wst" --launch-skip 0 --launch-count 20 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
    --section ComputeWorkloadAnalysis --section Occupancy --section LaunchStats \
    --metrics l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,smsp__inst_executed_pipe_fma.sum,smsp__inst_executed.sum,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__cycles_elapsed.avg.per_second \
    /tmp/bmm64 profile > "$OUT/ncu.txt" 2>&1
  echo "ncu rc=$?"; grep -E "^  [a-z_]+.*\(|Duration|Throughput|Issue Slots|Bank|bank_conflicts|wavefronts|pipe_fma|Warp Cycles|Active Warps|Registers|Eligible|cycles_elapsed" "$OUT/ncu.txt" | head -150
fi
# The pooling kernels (issue 7's odd max_pool3d against its aligned neighbour), through the generic harness.
cd ..
nvcc -std=c++17 -O2 launch.cu -o /tmp/launch -lcuda -lnvrtc || exit 1
odd=$(ls pool-src/pool-6daf3aa21a97-0.cu); even=$(ls pool-src/pool-99bb5fc46b62-0.cu)
/tmp/launch $odd 1950963840 251658240 503316480 | tee -a "$OUT/times.md"
/tmp/launch $even 2147483648 268435456 536870912 | tee -a "$OUT/times.md"
if [[ "${NCU:-1}" == 1 ]]; then
  for f in $odd $even; do
    sz="1950963840 251658240 503316480"; [[ $f == $even ]] && sz="2147483648 268435456 536870912"
    timeout 200 ncu --clock-control none -k regex:kjit --launch-skip 2 --launch-count 1 \
      --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
      --section Occupancy --section LaunchStats --section InstructionStats \
      --metrics dram__bytes_read.sum,dram__bytes_write.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,smsp__inst_executed.sum \
      /tmp/launch $f $sz --runs 2 > "$OUT/ncu-$(basename $f .cu).txt" 2>&1
    echo "ncu $f rc=$?"; grep -E "Duration|Throughput|Issue Slots|Warp Cycles|Active Warps|Registers|Eligible|dram__bytes|sectors|requests|inst_executed|Achieved Occ|No Eligible" "$OUT/ncu-$(basename $f .cu).txt" | head -40
  done
fi
