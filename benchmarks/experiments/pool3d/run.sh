#!/usr/bin/env bash
# On the GPU machine: hand-written load variants of pooling's sliding strategy (odd.cu.in) for max_pool3d f32
# 15x32x63x127x127 k3 s2 p1, beside the generator's expert default (src/, from `kjit_tune_spaces --family pool
# --keys headroom --key-contains "max_pool3d f32 N=15" --emit-sources benchmarks/experiments/pool3d/src`, carried;
# the seventeenth session carried codegen 3 and 4 defaults with and without minb, renamed odd-codegenN-minbM.cu).
# Each through ../launch.cu (CUDA events, L2 flushed before each of RUNS launches, median); outputs poisoned
# and hashed, so a variant's values and indices can be compared with the default's bit for bit.
set -uo pipefail
cd "$(dirname "$0")"
OUT="${OUT:-/tmp/pool3d-out}"; mkdir -p "$OUT"
RUNS="${RUNS:-41}"
nvcc -std=c++17 -O2 ../launch.cu -o /tmp/launch -lcuda -lnvrtc || exit 1
sizes="1950963840 251658240 503316480"
for f in src/*.cu; do /tmp/launch "$f" $sizes --runs "$RUNS" --outputs 2 | tee -a "$OUT/times.md"; done
SRC=/tmp/pool3d-src; mkdir -p "$SRC"  # not under $OUT: the device tool returns few files
# frames rows threads minb variants
for shape in ${SHAPES:-"1 2 128 1 0123" "2 1 128 1 0123" "2 2 128 1 0123" "1 1 128 1 0123" "1 2 256 1 0123"}; do
  IFS=: read -r fr rows threads minb vs <<< "${shape// /:}"
  items=$(( 480 * ((32 + fr - 1) / fr) * ((64 + rows - 1) / rows) * 32 ))
  for v in $(echo "$vs" | grep -o .); do
    f="$SRC/odd-v$v-fr$fr-rows$rows-t$threads-b$minb.cu"
    sed -e "s/@GRID@/$(( (items + threads - 1) / threads ))/" -e "s/@THREADS@/$threads/g" -e "s/@ROWS@/$rows/" \
        -e "s/@FR@/$fr/" -e "s/@VARIANT@/$v/" -e "s/@MINB@/$minb/" odd.cu.in > "$f"
    /tmp/launch "$f" $sizes --runs "$RUNS" --outputs 2 | tee -a "$OUT/times.md"
  done
done
if [[ "${NCU:-1}" == 1 ]]; then
  for f in src/*.cu ${NCU_FILES:-"$SRC"/odd-v[123]-fr1-rows2-t128-b1.cu}; do
    timeout 150 ncu --clock-control none -k regex:kjit --launch-skip 2 --launch-count 1 \
      --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
      --section Occupancy --section InstructionStats \
      --metrics dram__bytes_read.sum,dram__bytes_write.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,smsp__inst_executed.sum \
      /tmp/launch "$f" $sizes --runs 2 > "$OUT/ncu-$(basename "$f" .cu).txt" 2>&1
    echo "ncu $f rc=$?"; grep -E "Duration|DRAM Throughput|Issue Slots|Warp Cycles Per Issued|Eligible Warps|Registers|dram__bytes|sectors|requests|inst_executed|Achieved Occ|L1/TEX Hit" "$OUT/ncu-$(basename "$f" .cu).txt" | head -20
  done
fi
