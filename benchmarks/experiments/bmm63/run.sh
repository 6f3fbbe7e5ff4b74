#!/usr/bin/env bash
# On the GPU machine: the odd bmm (f32 4095 x 63^3, issue 7) default of matmul's generator (src/, emitted by
# `kjit_tune_spaces --family matmul --keys headroom --key-contains "4095,63" --emit-sources
# benchmarks/experiments/bmm63/src`, carried; other points with --point-list) beside its hand-edited variants (variants.py), each through
# ../launch.cu (CUDA events, L2 flushed before each of RUNS launches, median; output poisoned and hashed: equal
# hashes, equal outputs), then ncu on the default and the variants named in NCU_VARIANTS (stall reasons,
# instruction mix; the default's per-instruction source counters as CSV).
set -uo pipefail
cd "$(dirname "$0")"
OUT="${OUT:-/tmp/bmm63-out}"; mkdir -p "$OUT"
RUNS="${RUNS:-51}"
SRC=/tmp/bmm63-src; rm -rf "$SRC"; mkdir -p "$SRC"  # not under $OUT: the device tool returns few files
nvcc -std=c++17 -O2 ../launch.cu -o /tmp/launch -lcuda -lnvrtc || exit 1
for f in "${SRC_DIR:-src}"/*.cu; do python3 variants.py "$f" "$SRC" ${VARIANTS:-s i si x xi} || echo "variants: not all made from $f"; done
# BATCH=600 SRC_DIR=src600: the sample key bmm 600 x 63^3 (its sources emitted with --keys samples --key-contains "600,63").
bytes=$((${BATCH:-4095} * 63 * 63 * 4))
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw --format=csv,noheader | tee -a "$OUT/times.md"
# The default's outputs are the reference every variant is compared with (variants that round differently, and the
# diagnostic ones that skip work, differ in their hash; --against says by how much).
for f in "$SRC"/odd-*-default.cu; do /tmp/launch "$f" $bytes $bytes $bytes --runs 3 --outputs 1 --save /tmp/bmm63-ref.bin > /dev/null; done
# Two rounds, interleaved, so drift shows.
for round in 1 2; do
  for f in "$SRC"/odd-*.cu; do
    /tmp/launch "$f" $bytes $bytes $bytes --runs "$RUNS" --outputs 1 --against /tmp/bmm63-ref.bin | tee -a "$OUT/times.md"
  done
done
if [[ "${NCU:-1}" == 1 ]]; then
  for v in t8x4-default ${NCU_VARIANTS:-t8x4-si}; do
    f="$SRC/odd-$v.cu"
    timeout 200 ncu --clock-control none -k regex:kjit --launch-skip 2 --launch-count 1 \
      --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
      --section Occupancy --section InstructionStats --section SourceCounters --section LaunchStats \
      --metrics dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active \
      -o "/tmp/ncu-$v" -f /tmp/launch "$f" $bytes $bytes $bytes --runs 2 > /dev/null 2>&1
    echo "ncu $v rc=$?"
    ncu --import "/tmp/ncu-$v.ncu-rep" --page details > "$OUT/ncu-$v.txt" 2>&1
    grep -E "Duration|DRAM Throughput|Issue Slots|Warp Cycles Per Issued|Eligible Warps|Registers|dram__bytes|inst_executed|ffma|bank|wavefronts|pipe_fma|Achieved Occ|Stall|No Eligible" "$OUT/ncu-$v.txt" | head -40
  done
  ncu --import /tmp/ncu-t8x4-default.ncu-rep --page source --csv --print-source sass > "$OUT/source-default.csv" 2>&1
  echo "source page rc=$? lines $(wc -l < "$OUT/source-default.csv")"; head -3 "$OUT/source-default.csv" | cut -c1-600
  # The raw stall metrics (the details page prints only the top ones).
  ncu --import /tmp/ncu-t8x4-default.ncu-rep --page raw --csv 2>/dev/null | python3 -c '
import csv, sys
rows = list(csv.reader(sys.stdin))
if len(rows) >= 3:
    for h, u, v in zip(rows[0], rows[1], rows[2]):
        if "warp_issue_stalled" in h and "pct" not in h and h.endswith("ratio") or "average_warp" in h:
            print(h, v, u)
' > "$OUT/stalls-default.txt" 2>&1; head -40 "$OUT/stalls-default.txt"
fi
