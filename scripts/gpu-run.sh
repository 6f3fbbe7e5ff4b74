#!/usr/bin/env bash
# Run ON THE GPU MACHINE, from the repo root, through the device tool:
#
#   run(command="bash scripts/gpu-run.sh", carry=[".gpu-debs"])
#
# (Here, first: scripts/fetch-gpu-debs.sh.) Unpacks the carried Debian packages
# into a private prefix, builds kjit against that machine's own toolchain and
# PyTorch, runs every test (the `gpu` ones must pass there, not skip), the
# example, `kjit device`, and the benchmarks. Logs and results go to $OUT:
#   summary.txt  build.log  tests.log  bench.md  bench.json  bench-torch.json  bench-cache.json  run.log
# (at most 8 files come back from the device tool; KJIT_GPU_RUN_PACK=1 packs all but summary.txt into results.tar.gz)
# Set KJIT_GPU_RUN_SKIP_BENCH=1 to skip the benchmarks, KJIT_GPU_RUN_SKIP_TESTS=1 to skip
# the tests (a second call on a warm machine reuses build-gpu/), KJIT_GPU_RUN_CTEST_ARGS to pass ctest
# more arguments ("-L gpu": only the GPU tests, ~2 min instead of ~5; CI runs the rest), KJIT_GPU_RUN_TUNE=1 to
# verify and search the design spaces (tune.md, tune.tar.gz; see the step at the end),
# KJIT_GPU_RUN_SHIM=1 to measure the shim and run its example twice (shim.tar.gz), KJIT_GPU_RUN_ONLINE=1 for
# online policy episodes on the example's keys against the expert default then random (KJIT_ONLINE_PROPOSERS
# "tuner policy expert": tuner is the expert default first, then the policy, as kjitd runs it; add "random" for
# uniform random search) (online.tar.gz).
# KJIT_GPU_RUN_TARGETS="kjit kjitd ..." builds only those targets (a short call: the tests run must need no more).
# KJIT_GPU_RUN_NVML_PROBE=1 records what NVML reports while another process computes (nvml-probe.txt).
# KJIT_GPU_RUN_FUSION=1 runs benchmarks/fusion_chain.py (KJIT_FUSION_CHAIN: gelu, the default, rms_norm, masked_cumsum) under
# `kjit run` with KJIT_FUSION=serve against an empty cache, kjitd tuning the chain by itself (KJIT_FUSION_ROUNDS,
# KJIT_FUSION_PAUSE_S; fusion.tar.gz: the table, the chain tasks each round, kjitd's log, `kjit tasks`).
# KJIT_GPU_RUN_BLOCK=1 runs benchmarks/transformer_block.py (an eager GPT-2-style block) the same way
# (KJIT_BLOCK_ROUNDS, KJIT_BLOCK_PAUSE_S; block.tar.gz).
# KJIT_GPU_RUN_EXAMPLE=1 runs scripts/run.sh (the example twice, kjitd tuning between, KJIT_RUN_TUNE_S) on the
# build above (run.sh builds in build/: pass KJIT_GPU_RUN_BUILD_DIR=build KJIT_GPU_RUN_BUILD_TYPE=RelWithDebInfo)
# against an empty cache (example.tar.gz: its output, `kjit report --run last --markdown`, `kjit
# tasks`, kjitd's log with one line per trial).
# Pass KJIT_COMMIT=<this machine's `git rev-parse --short HEAD`>: on the device machine `git rev-parse` in the copied
# tree has reported an older commit than the tree held (2026-12-01), and the summary's commit is what RESULTS.md cites.
# One device call is at most 10 minutes: split the work over calls, e.g.
#   KJIT_GPU_RUN_SKIP_BENCH=1 KJIT_GPU_RUN_SKIP_TESTS=1 KJIT_GPU_RUN_TUNE=1 \
#     KJIT_TUNE_FAMILIES=softmax KJIT_TUNE_VERIFY_S=150 KJIT_TUNE_SEARCH_S=300 bash scripts/gpu-run.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/kjit-gpu-out}"
mkdir -p "$OUT"
summary="$OUT/summary.txt"
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }

prefix=/tmp/kjit-deps
if [[ ! -d .gpu-debs ]] || ! ls .gpu-debs/*.deb >/dev/null 2>&1; then
  note "FAIL: no .gpu-debs/: run scripts/fetch-gpu-debs.sh here first and pass carry=[\".gpu-debs\"]"
  exit 1
fi
mkdir -p "$prefix"
for f in .gpu-debs/*.deb; do dpkg -x "$f" "$prefix"; done
export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
torch_prefix="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null || true)"

note "host: $(hostname); $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
note "toolchain: $(g++ --version | head -1); $(cmake --version | head -1); $(nvcc --version | grep -o 'release [0-9.]*')"
note "torch: $(python3 -c 'import torch; print(torch.__version__)' 2>&1 | tail -1); commit: ${KJIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
# The evaluator runs each kernel faster than PyTorch under compute-sanitizer where it finds one (evaluator/).
note "compute-sanitizer: $( (command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer) 2>/dev/null | head -1) $( (compute-sanitizer --version || /usr/local/cuda/bin/compute-sanitizer --version) 2>/dev/null | grep -i version | head -1)"

# KJIT_GPU_RUN_BUILD_DIR=build KJIT_GPU_RUN_BUILD_TYPE=RelWithDebInfo: the build scripts/run.sh makes, so that a
# later `KJIT_SKIP_SETUP=1 bash scripts/run.sh` on the same warm machine finds it built.
build="${KJIT_GPU_RUN_BUILD_DIR:-build-gpu}"
t0=$(date +%s)
{
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE="${KJIT_GPU_RUN_BUILD_TYPE:-Release}" -DKJIT_WERROR=OFF \
    -DCMAKE_PREFIX_PATH="$prefix/usr;$prefix/usr/lib/x86_64-linux-gnu/cmake;$prefix/usr/share/cmake;$torch_prefix" \
    -DCMAKE_INCLUDE_PATH="$prefix/usr/include" && cmake --build "$build" -j "$(nproc)" ${KJIT_GPU_RUN_TARGETS:+--target $KJIT_GPU_RUN_TARGETS}
} > "$OUT/build.log" 2>&1
rc=$?
note "build: rc=$rc in $(( $(date +%s) - t0 )) s; warnings: $(grep -c 'warning:' "$OUT/build.log")"
# Template-heavy warnings run to kilobytes a line: the location and the first 160 characters are enough here.
grep 'warning:' "$OUT/build.log" | cut -c1-160 | sort -u | head -20 | tee -a "$summary"
if [[ $rc -ne 0 ]]; then tail -40 "$OUT/build.log"; exit 1; fi

"$build/bin/kjit" device --remeasure > /tmp/kjit-device.txt 2>&1
note "kjit device: rc=$?"; tee -a "$summary" < /tmp/kjit-device.txt

rc_tests=0; skipped_gpu=0
if [[ "${KJIT_GPU_RUN_SKIP_TESTS:-0}" != 1 ]]; then
(cd "$build" && ctest --output-on-failure -j 4 --timeout 300 ${KJIT_GPU_RUN_CTEST_ARGS:-}) > "$OUT/tests.log" 2>&1
rc_tests=$?
note "ctest (all): rc=$rc_tests; $(grep -E 'tests passed' "$OUT/tests.log")"
grep -E "Failed|Skipped|Not Run" "$OUT/tests.log" | tee -a "$summary"
# GPU tests must run here: a skip on the GPU machine is a failure. They ran above
# with the rest (running them again cost minutes: the shim's Python tests take
# 80-100 s each); pick their lines out of that log by name.
(cd "$build" && ctest -N -L gpu ${KJIT_GPU_RUN_CTEST_ARGS:-}) | sed -n 's/^ *Test *#[0-9]*: //p' > /tmp/kjit-gpu-tests.txt
gpu_total=$(wc -l < /tmp/kjit-gpu-tests.txt)
gpu_passed=0
while read -r name; do
  line=$(grep -E "Test +#[0-9]+: ${name//./\\.} " "$OUT/tests.log" | tail -1)
  case "$line" in
    *" Passed "*) gpu_passed=$((gpu_passed + 1)) ;;
    *Skipped*) skipped_gpu=$((skipped_gpu + 1)); note "gpu test skipped here: $name" ;;
    *) note "gpu test not passed: $name: ${line:-no result line}" ;;
  esac
done < /tmp/kjit-gpu-tests.txt
note "gpu-labelled tests: $gpu_passed of $gpu_total passed; skipped: $skipped_gpu"
fi

"$build/examples/compile_and_run/kjit_example_compile_and_run" 2>&1 | tail -3 | tee -a "$summary"

if [[ "${KJIT_GPU_RUN_SKIP_BENCH:-0}" != 1 ]]; then
  "$build/benchmarks/kjit_bench_runtime" --benchmark_repetitions=7 \
    --benchmark_out="$OUT/bench.json" --benchmark_out_format=json > "$OUT/run.log" 2>&1
  note "runtime benchmarks: rc=$?"
  "$build/benchmarks/kjit_bench_torch" --benchmark_repetitions=7 \
    --benchmark_out="$OUT/bench-torch.json" --benchmark_out_format=json >> "$OUT/run.log" 2>&1
  note "torch benchmarks: rc=$?"
  "$build/benchmarks/kjit_bench_cache" --records 100000 \
    --benchmark_out="$OUT/bench-cache.json" --benchmark_out_format=json >> "$OUT/run.log" 2>&1
  note "cache benchmarks: rc=$?"
  python3 scripts/bench_to_markdown.py "$OUT/bench.json" "$OUT/bench-torch.json" "$OUT/bench-cache.json" \
    > "$OUT/bench.md"
  echo -e "\nkjitd load test (kjit_bench_ipc):\n" >> "$OUT/bench.md"
  for clients in 1 8; do
    "$build/benchmarks/kjit_bench_ipc" --kjitd "$build/bin/kjitd" --clients $clients --requests 2000 \
      2>>"$OUT/run.log" | tail -n $([[ $clients == 1 ]] && echo 3 || echo 1) >> "$OUT/bench.md"
  done
  note "ipc load test: rc=$?"
  echo -e "\nEvaluator timing noise and cost (kjit_bench_evaluator):\n" >> "$OUT/bench.md"
  "$build/benchmarks/kjit_bench_evaluator" --repeats 5 >> "$OUT/bench.md" 2>>"$OUT/run.log"
  note "evaluator benchmark: rc=$?"
  cat "$OUT/bench.md"
fi
if [[ "${KJIT_GPU_RUN_TUNE:-0}" == 1 ]]; then
  # The design spaces: verification of random (key, point) pairs per family, the
  # search on the headroom cases and their neighbours, and eager/torch.compile
  # for the same shapes. Everything goes into tune.tar.gz (the device tool
  # brings back at most 8 files) and a summary into tune.md. Time limits keep
  # the whole step within one device call; KJIT_TUNE_VERIFY (pairs, default 50),
  # KJIT_TUNE_KEYS (headroom | headroom-cases) and KJIT_TUNE_FAMILIES adjust it.
  tune=/tmp/kjit-tune; rm -rf "$tune"; mkdir -p "$tune"
  families="${KJIT_TUNE_FAMILIES:-softmax layer_norm batch_norm group_norm scan pool reduce depthwise_conv matmul}"
  # KJIT_TUNE_STEPS picks the steps (and KJIT_TUNE_SEARCH_FAMILIES the searched families) to fit one call;
  # KJIT_TUNE_EXHAUSTIVE=1 screens every valid point (KJIT_TUNE_MAX_POINTS=0: no cap);
  # KJIT_TUNE_KEY_CONTAINS=TEXT searches only the keys whose text contains TEXT; KJIT_TUNE_POINTS="stage=5" verifies
  # and screens only points with those knob values (the search still verifies the expert default);
  # KJIT_TUNE_VERIFY_KEY_CONTAINS=TEXT verifies only sample keys whose text contains TEXT, KJIT_TUNE_SEED its draw.
  steps=" ${KJIT_TUNE_STEPS:-verify baselines search} "
  [[ "$steps" == *" verify "* ]] && for fam in $families; do
    timeout "${KJIT_TUNE_VERIFY_S:-240}" "$build/benchmarks/kjit_tune_spaces" --family "$fam" \
      --verify "${KJIT_TUNE_VERIFY:-50}" ${KJIT_TUNE_POINTS:+--points "$KJIT_TUNE_POINTS"} --seed "${KJIT_TUNE_SEED:-1}" \
      ${KJIT_TUNE_VERIFY_KEY_CONTAINS:+--verify-key-contains "$KJIT_TUNE_VERIFY_KEY_CONTAINS"} --dataset "$tune/$fam-verify.jsonl" > "$tune/$fam-verify.txt" 2>&1
    note "verify $fam: rc=$? $(grep -c '^- ok' "$tune/$fam-verify.txt") verified, $(grep -c '^- FAIL' "$tune/$fam-verify.txt") rejected"
  done
  if [[ "$steps" == *" baselines "* ]]; then
    timeout "${KJIT_TUNE_BASELINES_S:-300}" python3 scripts/torch_baselines.py \
      $([[ "${KJIT_TUNE_KEYS:-headroom}" == headroom-cases ]] && echo --cases-only) --runs 50 \
      $([[ "$families" != *" "* ]] && echo --family "$families") \
      --json "$tune/torch-baselines.json" > "$tune/torch-baselines.md" 2>"$tune/torch-baselines.err"
    note "torch baselines: rc=$?"
  fi
  [[ "$steps" == *" search "* ]] && for fam in ${KJIT_TUNE_SEARCH_FAMILIES:-$families}; do
    timeout "${KJIT_TUNE_SEARCH_S:-600}" "$build/benchmarks/kjit_tune_spaces" --family "$fam" --search \
      --keys "${KJIT_TUNE_KEYS:-headroom}" --max-points "${KJIT_TUNE_MAX_POINTS:-40}" --climb-rounds 2 --finalists "${KJIT_TUNE_FINALISTS:-1}" \
      $([[ "${KJIT_TUNE_EXHAUSTIVE:-0}" == 1 ]] && echo --exhaustive) \
      ${KJIT_TUNE_KEY_CONTAINS:+--key-contains "$KJIT_TUNE_KEY_CONTAINS"} ${KJIT_TUNE_POINTS:+--points "$KJIT_TUNE_POINTS"} \
      --dataset "$tune/$fam-search.jsonl" > "$tune/$fam-search.md" 2>"$tune/$fam-search.err"
    note "search $fam: rc=$?"
  done
  # KJIT_TUNE_POINT_LIST=FILE (lines "<key hash>\t<point>\t<label>", `kjit policy propose --points-file`):
  # each listed point and its key's expert default fully verified and timed in the same run, judged as the
  # cache judges a kernel (the policy's zero-shot proposals over the whole space against the expert default).
  if [[ "$steps" == *" listed "* && -n "${KJIT_TUNE_POINT_LIST:-}" ]]; then
    timeout "${KJIT_TUNE_LISTED_S:-540}" "$build/benchmarks/kjit_tune_spaces" --search --point-list "$KJIT_TUNE_POINT_LIST" \
      --dataset "$tune/listed.jsonl" > "$tune/listed.md" 2>"$tune/listed.err"
    note "listed points: rc=$? $(grep -c '| faster |' "$tune/listed.md") faster, $(grep -c '| tie |' "$tune/listed.md") ties, $(grep -c '| slower |' "$tune/listed.md") slower"
  fi
  cat "$tune"/*-search.md "$tune/torch-baselines.md" > "$OUT/tune.md" 2>/dev/null
  tar -C /tmp -czf "$OUT/tune.tar.gz" kjit-tune
fi
if [[ "${KJIT_GPU_RUN_SHIM:-0}" == 1 ]]; then
  # The shim end to end (issue 9): its host overhead per call, and the example
  # program run twice under `kjit run` with a private cache and kjitd: first all
  # misses, then kjit_seed_defaults (the expert default per queued key, verified
  # by kjitd's evaluator and stored if faster), then the hits. Into shim.tar.gz.
  shim=/tmp/kjit-shim; rm -rf "$shim"; mkdir -p "$shim/run"
  export KJIT_CACHE="$shim/cache.db" KJIT_RUNTIME_DIR="$shim/run" XDG_CACHE_HOME="$shim/xdg"
  # Interleaved rounds of one process per setting (no shim, miss, hit, KJIT_DISABLE=1, adapter without
  # softmax, a wrapper that only forwards, add with and without) within a 70 s budget, then a
  # KJIT_PROFILE=1 process per intercepted setting (the adapter's stage profile); the script's
  # docstring says what each setting isolates. The clock source: a clock read that is a system call
  # (no TSC in the VM) would make every timed call dear.
  cat /sys/devices/system/clocksource/clocksource0/current_clocksource > "$shim/clocksource.txt" 2>&1
  note "clock source: $(cat "$shim/clocksource.txt")"
  # On the H200 host a process (import torch, CUDA context) takes ~6 s: a round of 8 is ~50 s.
  if [[ "${KJIT_SHIM_ROUNDS:-1}" == 1 ]]; then  # KJIT_SHIM_ROUNDS=0: only the in-process A/B below
    timeout "${KJIT_SHIM_OVERHEAD_S:-240}" python3 benchmarks/shim_overhead.py --build "$build" --prepare-hit \
      --min-rounds "${KJIT_SHIM_MIN_ROUNDS:-2}" --budget-s "${KJIT_SHIM_BUDGET_S:-150}" --json "$shim/overhead.json" \
      > "$shim/overhead.md" 2> "$shim/overhead.err"
    note "shim overhead: rc=$?"; cat "$shim/overhead.md" >> "$summary"
  fi
  # The same within each process (--ab: kjit's overrides on, forwarding only, deregistered, in interleaved
  # loops), a miss and a hit, KJIT_SHIM_AB_PROCESSES processes each (0: skipped); then again pinned to
  # KJIT_SHIM_AB_PIN's CPUs if set (e.g. "4,5").
  if [[ "${KJIT_SHIM_AB_PROCESSES:-6}" -gt 0 ]]; then
    for pin in "" ${KJIT_SHIM_AB_PIN:-}; do
      tag=${pin:+-pinned}
      timeout "${KJIT_SHIM_AB_S:-200}" python3 benchmarks/shim_overhead.py --build "$build" --prepare-hit --ab \
        --processes "${KJIT_SHIM_AB_PROCESSES:-6}" ${pin:+--pin "$pin"} --json "$shim/ab$tag.json" \
        > "$shim/ab$tag.md" 2> "$shim/ab$tag.err"
      note "shim in-process A/B${pin:+ (pinned to $pin)}: rc=$?"; cat "$shim/ab$tag.md" >> "$summary"
    done
  fi
  # The miss of other intercepted ops (--ab-op), KJIT_SHIM_AB_OPS (a list; default: those with more or other
  # arguments than softmax's), KJIT_SHIM_AB_OP_PROCESSES processes each (0: skipped).
  if [[ "${KJIT_SHIM_AB_OP_PROCESSES:-6}" -gt 0 ]]; then
    for op in ${KJIT_SHIM_AB_OPS:-layer_norm sum cumsum max_pool2d}; do
      timeout "${KJIT_SHIM_AB_S:-200}" python3 benchmarks/shim_overhead.py --build "$build" --ab --ab-op "$op" \
        --processes "${KJIT_SHIM_AB_OP_PROCESSES:-6}" --json "$shim/ab-$op.json" > "$shim/ab-$op.md" 2> "$shim/ab-$op.err"
      note "shim in-process A/B, $op miss: rc=$?"; grep -E '^miss: added' "$shim/ab-$op.md" >> "$summary"
    done
  fi
  # The CPU side of the hot path on this machine's CPU: keying, hashing, the entry table, miss accounting,
  # boxed against unboxed dispatch (benchmarks/bench_torch.cc).
  timeout 40 "$build/benchmarks/kjit_bench_torch" --benchmark_filter='Small|Shim|Steady|Numerics' --benchmark_min_time=0.1 \
    > "$shim/bench_torch.txt" 2>&1
  note "kjit_bench_torch (shim hot path, CPU): rc=$?"
  if [[ "${KJIT_SHIM_APP:-1}" == 1 ]]; then  # KJIT_SHIM_APP=0: the overhead only (~2.5 of ~7 minutes)
    app=(python3 examples/shim_app/app.py --iters "${KJIT_SHIM_ITERS:-30}")
    timeout 75 "$build/bin/kjit" run -- "${app[@]}" --json "$shim/run1.json" > "$shim/run1.txt" 2>&1
    note "app run 1 (misses): rc=$?"
    timeout 120 "$build/examples/shim_app/kjit_seed_defaults" > "$shim/seed.txt" 2>&1
    note "kjit_seed_defaults: rc=$? $(grep -ci stored "$shim/seed.txt") lines saying stored"
    timeout 75 "$build/bin/kjit" run -- "${app[@]}" --json "$shim/run2.json" > "$shim/run2.txt" 2>&1
    note "app run 2 (hits): rc=$?"
  fi
  "$build/bin/kjit" cache ls > "$shim/cache-ls.txt" 2>&1
  "$build/bin/kjit" daemon stop > /dev/null 2>&1 || pkill -f "$build/bin/kjitd" || true
  unset KJIT_CACHE KJIT_RUNTIME_DIR XDG_CACHE_HOME
  tar -C /tmp -czf "$OUT/shim.tar.gz" kjit-shim
fi
if [[ "${KJIT_GPU_RUN_NVML_PROBE:-0}" == 1 ]]; then
  # What NVML tells kjitd's idle gate while another process computes: per-process SM utilization (the
  # figure --when idle reads), the device-wide figure, and the process list with its PIDs (the host's).
  p="$OUT/nvml-probe.txt"
  python3 -c "
import os, time, torch
print('probe pid', os.getpid(), flush=True)
a = torch.randn(8192, 8192, device='cuda')
t = time.time()
while time.time() - t < 12:
    a = (a @ a) / 8192.0
torch.cuda.synchronize()
print('probe done', flush=True)" > "$p" 2>&1 &
  sleep 5
  {
    nvidia-smi --query-gpu=utilization.gpu --format=csv
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv
    nvidia-smi pmon -s u -c 3
    "$build/bin/kjit" device --list
  } >> "$p" 2>&1
  wait
  note "nvml probe: $(grep -c . "$p") lines in nvml-probe.txt"
fi
if [[ "${KJIT_GPU_RUN_ONLINE:-0}" == 1 ]]; then
  # Issue 8's online run: the example program under the shim queues its keys (misses) with a private kjitd;
  # then `kjit policy online` runs an episode per queued key through kjitd's evaluator, once per proposer
  # (the policy, random search, the expert default then random), KJIT_ONLINE_BUDGET trials each; every
  # episode is a JSON line in online.jsonl and scripts/online_curve.py draws the learning curves (curve.md).
  # The checkpoint: .gpu-online/cache.db if carried (trained on a CPU: `kjit policy train --cache
  # .gpu-online/cache.db`), else trained here first.
  # kjitd's own tuner stays off here: the episodes below are the only ones that work the queued keys.
  on=/tmp/kjit-online; rm -rf "$on"; mkdir -p "$on/run"
  export KJIT_CACHE="$on/cache.db" KJIT_RUNTIME_DIR="$on/run" XDG_CACHE_HOME="$on/xdg" KJITD_TUNER=off
  if [[ -f .gpu-online/cache.db ]]; then
    cp .gpu-online/cache.db "$KJIT_CACHE"; note "online: checkpoint from the carried .gpu-online/cache.db"
  else
    timeout 400 "$build/bin/kjit" policy train --fresh > "$on/train.txt" 2>&1
    note "online: policy train rc=$?"
  fi
  timeout 90 "$build/bin/kjit" run -- python3 examples/shim_app/app.py --iters 10 > "$on/app.txt" 2>&1
  note "online: app run (queues the misses): rc=$?"
  # Modes: policy (alone), tuner (the expert default first, then the policy: kjitd's tuner), expert (the expert
  # default, then random), random.
  for mode in ${KJIT_ONLINE_PROPOSERS:-tuner policy expert}; do
    seeds=1; [[ $mode == policy || $mode == tuner ]] || seeds="${KJIT_ONLINE_SEEDS:-1 2 3}"  # random: average
    flags=(--proposer "$mode"); [[ $mode == tuner ]] && flags=(--proposer policy --expert-first)
    for seed in $seeds; do
      timeout "${KJIT_ONLINE_S:-150}" "$build/bin/kjit" policy online "${flags[@]}" --seed "$seed" \
        --budget "${KJIT_ONLINE_BUDGET:-8}" --json "$on/online.jsonl" > "$on/online-$mode-$seed.txt" 2>&1
      note "online --proposer $mode --seed $seed: rc=$? $(grep -c '^  best' "$on/online-$mode-$seed.txt") episodes with a verified kernel"
    done
  done
  python3 scripts/online_curve.py "$on/online.jsonl" --json "$on/curve.json" > "$on/curve.md" 2>&1
  cat "$on/curve.md" >> "$summary"
  "$build/bin/kjit" cache ls > "$on/cache-ls.txt" 2>&1
  "$build/bin/kjit" daemon stop > /dev/null 2>&1 || pkill -f "$build/bin/kjitd" || true
  unset KJIT_CACHE KJIT_RUNTIME_DIR XDG_CACHE_HOME KJITD_TUNER
  tar -C /tmp -czf "$OUT/online.tar.gz" --exclude='kjit-online/run' kjit-online
fi
# A step of its own kjit state (/tmp/kjit-NAME: cache, runtime dir, kjitd and its log), left in $OUT/NAME.tar.gz
# with `kjit tasks` and kjitd's log by end_fresh_kjit.
begin_fresh_kjit() {
  local dir=/tmp/kjit-$1
  rm -rf "$dir"; mkdir -p "$dir/run"
  export KJIT_CACHE="$dir/cache.db" KJIT_RUNTIME_DIR="$dir/run" XDG_CACHE_HOME="$dir/xdg"
}
end_fresh_kjit() {
  local dir=/tmp/kjit-$1
  "$build/bin/kjit" tasks > "$dir/tasks.txt" 2>&1
  cp "$dir/xdg/kjit/kjitd.log" "$dir/" 2>/dev/null
  "$build/bin/kjit" daemon stop > /dev/null 2>&1 || true
  unset KJIT_CACHE KJIT_RUNTIME_DIR XDG_CACHE_HOME
  tar -C /tmp -czf "$OUT/$1.tar.gz" --exclude="kjit-$1/run" "kjit-$1"
}
if [[ "${KJIT_GPU_RUN_FUSION:-0}" == 1 ]]; then
  begin_fresh_kjit fusion
  chain="${KJIT_FUSION_CHAIN:-gelu}"
  KJIT_FUSION=serve KJIT_LOG=1 timeout "${KJIT_FUSION_S:-300}" "$build/bin/kjit" run -- python3 benchmarks/fusion_chain.py \
    --chain "$chain" --rounds "${KJIT_FUSION_ROUNDS:-12}" --pause "${KJIT_FUSION_PAUSE_S:-10}" --kjit "$build/bin/kjit" \
    --json "/tmp/kjit-fusion/$chain.json" > "/tmp/kjit-fusion/$chain.md" 2>&1
  note "fusion: fusion_chain --chain $chain under kjit run, KJIT_FUSION=serve: rc=$?"
  grep -E '^\|' "/tmp/kjit-fusion/$chain.md" | tail -6 | tee -a "$summary"
  grep -E '^shim counters' "/tmp/kjit-fusion/$chain.md" | tee -a "$summary"
  grep -E "announcement|chain" "/tmp/kjit-fusion/$chain.md" | grep "^kjit:" | head -8 | tee -a "$summary"
  end_fresh_kjit fusion
fi
if [[ "${KJIT_GPU_RUN_BLOCK:-0}" == 1 ]]; then
  begin_fresh_kjit block
  KJIT_FUSION=serve KJIT_LOG=1 timeout "${KJIT_BLOCK_S:-400}" "$build/bin/kjit" run -- python3 benchmarks/transformer_block.py \
    --rounds "${KJIT_BLOCK_ROUNDS:-12}" --pause "${KJIT_BLOCK_PAUSE_S:-10}" --kjit "$build/bin/kjit" \
    --json /tmp/kjit-block/block.json > /tmp/kjit-block/block.md 2>&1
  note "block: transformer_block under kjit run, KJIT_FUSION=serve: rc=$?"
  grep -E '^\|' /tmp/kjit-block/block.md | tail -6 | tee -a "$summary"
  grep -E '^shim counters' /tmp/kjit-block/block.md | tee -a "$summary"
  end_fresh_kjit block
fi
if [[ "${KJIT_GPU_RUN_EXAMPLE:-0}" == 1 ]]; then
  begin_fresh_kjit example
  KJIT_SKIP_SETUP=1 KJIT_RUN_TUNE_S="${KJIT_RUN_TUNE_S:-180}" timeout 560 bash scripts/run.sh \
    > /tmp/kjit-example/run.txt 2>&1
  note "example: scripts/run.sh rc=$?"
  grep -E 'ops faster|with a kernel|first verified' /tmp/kjit-example/run.txt | tail -4 | tee -a "$summary"
  "$build/bin/kjit" report --run last --markdown > /tmp/kjit-example/report.md 2>&1
  end_fresh_kjit example
fi
# KJIT_GPU_RUN_PACK=1: everything in $OUT but summary.txt goes into one results.tar.gz, so that several runs
# of this script in one device call (OUT=$O/a, OUT=$O/b, ...) stay within the 8 files that come back.
if [[ "${KJIT_GPU_RUN_PACK:-0}" == 1 ]]; then
  (cd "$OUT" && find . -maxdepth 1 -type f ! -name summary.txt ! -name results.tar.gz -printf '%P\n' |
    tar -czf results.tar.gz -T - --remove-files)
fi
[[ $rc_tests -eq 0 && $skipped_gpu -eq 0 ]]
