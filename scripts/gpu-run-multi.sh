#!/usr/bin/env bash
# kjitd on a host with several GPUs (issue 10). Run ON THE GPU MACHINE, from the repo
# root, through the device tool (here, first: scripts/fetch-gpu-debs.sh):
#
#   run(command="bash scripts/gpu-run-multi.sh", carry=[".gpu-debs"], kind="nvidia-h200-x2")
#
# On a machine with one GPU it runs too, as a smoke test of the script and of kjit
# on one GPU, and says at every step what it could not show (both programs then
# share the GPU and there is no second worker).
#
# It builds kjit against the machine's PyTorch (build-gpu/, only the targets it
# needs; reused by a second call on a warm machine), runs the GPU tests of device
# selection and the shim's two-device test (one process on both GPUs), then:
#   1. starts kjitd with one evaluator worker per GPU (devices = all, CUDA_VISIBLE_DEVICES
#      unset for kjitd; --when always, since both GPUs run a program the whole time);
#   2. runs two unmodified PyTorch programs (examples/shim_app/app.py), one per GPU
#      (CUDA_VISIBLE_DEVICES=<that GPU's UUID>), both under `kjit run`, for several rounds;
#   3. while they run, kjit_seed_defaults (the stand-in for the RL policy) in two shards
#      at once submits each missed key's expert-default kernel through kjitd: jobs go
#      to both GPUs' workers; verified kernels are announced and hot-swapped into both
#      programs, whichever GPU verified them;
#   4. kills GPU 0's worker (SIGKILL) and submits more trials at once: GPU 1's worker
#      carries on, GPU 0's comes back;
#   5. prints figures for benchmarks/RESULTS.md (multi.md);
#   6. (two GPUs) restarts kjitd with --when idle while a plain PyTorch program keeps GPU A busy:
#      trials go to GPU B, and A's worker says A is busy.
# Results in $OUT (at most 8 files come back from the device tool):
#   summary.txt  build.log  tests.log  multi.md  multi.tar.gz (every log, JSON and status)
# KJIT_MULTI_SKIP_BUILD=1 reuses build-gpu/ as it is; KJIT_MULTI_SKIP_TESTS=1 skips the tests and
# KJIT_MULTI_ONLY_TESTS=1 stops after them; KJIT_MULTI_ROUNDS (default 40) and KJIT_MULTI_PAUSE_S
# (default 1) set how long the programs live. One device call is at most 10 minutes: if build, tests
# and run do not fit in one, split them over two calls on the warm machine, e.g.
#   run(command="KJIT_MULTI_ONLY_TESTS=1 bash scripts/gpu-run-multi.sh", carry=[".gpu-debs"], kind=...)
#   run(command="KJIT_MULTI_SKIP_BUILD=1 KJIT_MULTI_SKIP_TESTS=1 bash scripts/gpu-run-multi.sh", carry=[".gpu-debs"], kind=...)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/kjit-gpu-out}"
mkdir -p "$OUT"
summary="$OUT/summary.txt"
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }

# NVLink multicast stays off on the shared multi-GPU hosts (the device tool's KINDS.md): kjit uses
# none, but every process started here inherits these, whatever else it does.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

prefix=/tmp/kjit-deps
if [[ ! -d .gpu-debs ]] || ! ls .gpu-debs/*.deb >/dev/null 2>&1; then
  note "FAIL: no .gpu-debs/: run scripts/fetch-gpu-debs.sh here first and pass carry=[\".gpu-debs\"]"
  exit 1
fi
mkdir -p "$prefix"
for f in .gpu-debs/*.deb; do dpkg -x "$f" "$prefix"; done
export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
torch_prefix="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null || true)"

note "host: $(hostname); commit: ${KJIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
nvidia-smi -L 2>&1 | tee -a "$summary"
note "torch: $(python3 -c 'import torch; print(torch.__version__, torch.cuda.device_count(), "GPU(s)")' 2>&1 | tail -1)"

build=build-gpu
if [[ "${KJIT_MULTI_SKIP_BUILD:-0}" != 1 ]]; then
  t0=$(date +%s)
  {
    cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKJIT_WERROR=OFF \
      -DCMAKE_PREFIX_PATH="$prefix/usr;$prefix/usr/lib/x86_64-linux-gnu/cmake;$prefix/usr/share/cmake;$torch_prefix" \
      -DCMAKE_INCLUDE_PATH="$prefix/usr/include" &&
      cmake --build "$build" -j "$(nproc)" --target kjit kjitd kjit-evaluator kjit_preload kjit_torch_adapter \
        kjit_seed_defaults kjit_test_break_records
  } > "$OUT/build.log" 2>&1
  rc=$?
  note "build: rc=$rc in $(( $(date +%s) - t0 )) s"
  if [[ $rc -ne 0 ]]; then tail -40 "$OUT/build.log"; exit 1; fi
fi
kjit="$build/bin/kjit"
seed="$build/examples/shim_app/kjit_seed_defaults"

# Device selection on the real GPU(s): by ordinal, by UUID, under CUDA_VISIBLE_DEVICES; and one
# process on two GPUs (skipped, with the reason, on one).
if [[ "${KJIT_MULTI_SKIP_TESTS:-0}" != 1 ]]; then
  (cd "$build" && ctest -R 'gpu\.device_selection|shim\.python_two_devices' --output-on-failure --timeout 300) \
    > "$OUT/tests.log" 2>&1
  note "device selection and two-device shim tests: rc=$? $(grep -E 'tests passed' "$OUT/tests.log")"
  grep -E "Skipped|Failed" "$OUT/tests.log" | tee -a "$summary"
fi
[[ "${KJIT_MULTI_ONLY_TESTS:-0}" == 1 ]] && exit 0

# The GPUs, by UUID (CUDA's ordinals and nvidia-smi's indices may differ; UUIDs do not).
mapfile -t uuids < <(nvidia-smi --query-gpu=uuid --format=csv,noheader 2>/dev/null | tr -d ' ')
if [[ ${#uuids[@]} -ge 2 ]]; then
  mode=two; gpu_a=${uuids[0]}; gpu_b=${uuids[1]}
  note "mode: two GPUs: program A on $gpu_a, program B on $gpu_b"
elif [[ ${#uuids[@]} -eq 1 ]]; then
  mode=one; gpu_a=${uuids[0]}; gpu_b=${uuids[0]}
  note "mode: ONE GPU ($gpu_a): SMOKE TEST ONLY. Both programs share it and kjitd has one worker; this run"
  note "  cannot show two workers evaluating, a kernel crossing GPUs, or one worker carrying on for another."
else
  note "FAIL: nvidia-smi lists no GPU"; exit 1
fi

dir=/tmp/kjit-multi
rm -rf "$dir"; mkdir -p "$dir/run"
export KJIT_CACHE="$dir/cache.db" KJIT_RUNTIME_DIR="$dir/run" XDG_CACHE_HOME="$dir/xdg"
unset KJIT_ENDPOINT CUDA_VISIBLE_DEVICES
status_json() { "$kjit" daemon status --json 2>/dev/null; }
# count_workers STATE: how many evaluator workers are in STATE now.
count_workers() {
  status_json | python3 -c 'import json, sys; d = json.load(sys.stdin); print(sum(e["state"] == sys.argv[1] for e in d.get("evaluators", [])))' "$1" 2>/dev/null || echo 0
}
cleanup() {
  [[ -n "${pid_a:-}" ]] && kill "$pid_a" 2>/dev/null
  [[ -n "${pid_b:-}" ]] && kill "$pid_b" 2>/dev/null
  "$kjit" daemon stop > /dev/null 2>&1 || true
}
trap cleanup EXIT

# 1. kjitd first, from this environment (no CUDA_VISIBLE_DEVICES): a kjitd that `kjit run`
#    starts inherits the program's CUDA_VISIBLE_DEVICES and would see that one GPU only.
"$kjit" daemon start -- --devices all --when always --log-file "$dir/kjitd.log" --watch-interval-ms 200 \
  > "$dir/daemon-start.txt" 2>&1
note "kjitd: $(cat "$dir/daemon-start.txt")"
want=${#uuids[@]}
for _ in $(seq 180); do [[ $(count_workers ready) -ge $want ]] && break; sleep 1; done
"$kjit" daemon status > "$dir/status-start.txt" 2>&1
note "workers ready: $(count_workers ready) of $want"; sed -n '/^evaluators/,/^counters/p' "$dir/status-start.txt" | tee -a "$summary"

# 2. The two programs, each on its GPU, both under the shim.
rounds=${KJIT_MULTI_ROUNDS:-40}
app=(python3 examples/shim_app/app.py --ops layer_norm,group_norm,instance_norm --iters 100 --rounds "$rounds"
     --pause-s "${KJIT_MULTI_PAUSE_S:-1}")
CUDA_VISIBLE_DEVICES=$gpu_a KJIT_LOG=1 timeout 400 "$kjit" run -- "${app[@]}" --json "$dir/app-a.json" \
  > "$dir/app-a.txt" 2>&1 &
pid_a=$!
CUDA_VISIBLE_DEVICES=$gpu_b KJIT_LOG=1 timeout 400 "$kjit" run -- "${app[@]}" --json "$dir/app-b.json" \
  > "$dir/app-b.txt" 2>&1 &
pid_b=$!
# Both programs' misses reach kjitd, as one task per key (same arch: the same keys).
for _ in $(seq 90); do
  [[ $(grep -c "^kjit: miss" "$dir/app-a.txt" 2>/dev/null) -ge 3 && $(grep -c "^kjit: miss" "$dir/app-b.txt" 2>/dev/null) -ge 3 ]] && break
  sleep 1
done
sleep 2
"$kjit" tasks > "$dir/tasks.txt" 2>&1
note "misses: program A $(grep -c '^kjit: miss' "$dir/app-a.txt"), program B $(grep -c '^kjit: miss' "$dir/app-b.txt"); queued tasks: $(grep -c 'queued' "$dir/tasks.txt")"

# 3. Kernels for the queued keys, two agents at once, so both GPUs' workers are busy together.
t0=$(date +%s)
timeout 200 "$seed" --shard 0/2 > "$dir/seed-0.txt" 2>&1 &
s0=$!
timeout 200 "$seed" --shard 1/2 > "$dir/seed-1.txt" 2>&1 &
s1=$!
wait "$s0"; r0=$?; wait "$s1"; r1=$?
note "seeding: rc=$r0/$r1 in $(( $(date +%s) - t0 )) s; stored: $(cat "$dir"/seed-*.txt | grep -c ': stored')"
status_json > "$dir/status-seeded.json"
"$kjit" daemon status > "$dir/status-seeded.txt" 2>&1
sed -n '/^evaluators/,/^counters/p' "$dir/status-seeded.txt" | tee -a "$summary"
sleep 3  # announcements reach both programs (kjitd announces within its 200 ms watch interval)

# 4. Kill GPU 0's worker, then trials at once: GPU 1's worker takes them.
victim=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["evaluators"][0].get("pid", ""))' "$dir/status-seeded.json")
if [[ -n $victim ]]; then
  kill -9 "$victim"
  note "killed the worker of evaluator 0 (pid $victim)"
  t0=$(date +%s)
  timeout 200 "$seed" --limit 3 > "$dir/seed-after-kill.txt" 2>&1
  note "trials right after the kill: rc=$? in $(( $(date +%s) - t0 )) s; $(grep -c 'verified' "$dir/seed-after-kill.txt") verified of $(grep -c . "$dir/seed-after-kill.txt")"
  for _ in $(seq 120); do [[ $(count_workers ready) -ge $want ]] && break; sleep 1; done
  status_json > "$dir/status-after-kill.json"
  "$kjit" daemon status > "$dir/status-after-kill.txt" 2>&1
  sed -n '/^evaluators/,/^counters/p' "$dir/status-after-kill.txt" | tee -a "$summary"
  [[ $mode == one ]] && note "  (one GPU: the trials waited for the only worker's restart; nothing else could take them)"
else
  note "no worker pid to kill (evaluator 0 is not running): step 4 skipped"
fi

wait "$pid_a"; note "program A: rc=$?"; pid_a=
wait "$pid_b"; note "program B: rc=$?"; pid_b=
"$kjit" cache ls > "$dir/cache-ls.txt" 2>&1
"$kjit" daemon stop > /dev/null 2>&1

# 6. Idle state per GPU (two GPUs; KJIT_MULTI_IDLE=0 skips it): kjitd --when idle while GPU A runs
#    someone else's program (PyTorch alone, KJIT_DISABLE=1) and GPU B is idle: trials go to B only,
#    and A's worker says why (NVML read by A's UUID).
if [[ $mode == two && "${KJIT_MULTI_IDLE:-1}" == 1 ]]; then
  "$kjit" daemon start -- --devices all --when idle --idle-settle-ms 1000 --log-file "$dir/kjitd-idle.log" \
    > /dev/null 2>&1
  for _ in $(seq 180); do [[ $(count_workers ready) -ge $want ]] && break; sleep 1; done
  CUDA_VISIBLE_DEVICES=$gpu_a KJIT_DISABLE=1 timeout 150 python3 examples/shim_app/app.py --ops layer_norm \
    --iters 20000 --rounds 100 > "$dir/busy-a.txt" 2>&1 &
  busy=$!
  sleep 10  # PyTorch starts, and the GPU is busy for NVML's last sample period
  timeout 120 "$seed" --limit 2 > "$dir/seed-idle.txt" 2>&1
  note "trials with GPU A busy: rc=$? $(grep -c 'verified' "$dir/seed-idle.txt") verified"
  status_json > "$dir/status-idle.json"
  "$kjit" daemon status > "$dir/status-idle.txt" 2>&1
  sed -n '/^evaluators/,/^counters/p' "$dir/status-idle.txt" | tee -a "$summary"
  kill "$busy" 2>/dev/null; wait "$busy" 2>/dev/null
  "$kjit" daemon stop > /dev/null 2>&1
fi

# 5. Figures.
python3 - "$dir" "$mode" "$gpu_a" "$gpu_b" > "$OUT/multi.md" 2>> "$summary" <<'EOF'
import json, re, sys
d, mode, gpu_a, gpu_b = sys.argv[1:5]
log = [json.loads(l) for l in open(f"{d}/kjitd.log") if l.startswith("{")]
verified_on = {e["record"]: e.get("gpu", "") for e in log if e.get("event") == "kernel_verified"}
trials = [e for e in log if e.get("event") == "trial"]
print(f"## kjitd on {'two GPUs' if mode == 'two' else 'ONE GPU (smoke test: no cross-GPU claims)'}\n")
print("| GPU | trials | verified and stored |")
print("|---|---|---|")
for g in sorted({t.get("gpu", "") for t in trials}):
    n = sum(t.get("gpu", "") == g for t in trials)
    s = sum(v == g for v in verified_on.values())
    print(f"| {g or '(none)'} | {n} | {s} |")
print()
def workers(path):
    try:
        return {e["device"]: e for e in json.load(open(path)).get("evaluators", [])}
    except Exception:
        return {}
before, after = workers(f"{d}/status-seeded.json"), workers(f"{d}/status-after-kill.json")
if before:
    print("Evaluator workers after seeding, and after evaluator 0's worker was killed (SIGKILL) and 3 more trials:\n")
    print("| evaluator | GPU | jobs after seeding | jobs after the kill | crashes | starts |")
    print("|---|---|---|---|---|---|")
    for dev, b in before.items():
        a = after.get(dev, {})
        print(f"| {dev} | {b.get('uuid', '?')} | {b.get('jobs', '?')} | {a.get('jobs', '?')} | "
              f"{a.get('crashes', '?')} | {a.get('starts', '?')} |")
    print()
idle = workers(f"{d}/status-idle.json")
if idle:
    print(f"kjitd --when idle while a PyTorch program keeps {gpu_a} busy ({gpu_b} idle), 2 trials:\n")
    print("| evaluator | GPU | jobs | idle verdict |")
    print("|---|---|---|---|")
    for dev, w in idle.items():
        print(f"| {dev} | {w.get('uuid', '?')} | {w.get('jobs', '?')} | {w.get('idle', '')} |")
    print()
for name, gpu in (("A", gpu_a), ("B", gpu_b)):
    try:
        run = json.load(open(f"{d}/app-{name.lower()}.json"))
    except Exception as e:  # the program failed: its log says why
        print(f"program {name} on {gpu}: no results ({e})\n")
        continue
    text = open(f"{d}/app-{name.lower()}.txt").read()
    swapped = re.findall(r"record (\d+): (?:device \d+: )?swapped in record (\d+)", text)
    records = sorted({int(r) for _, r in swapped})
    crossed = [r for r in records if verified_on.get(str(r), "") not in ("", gpu)]
    print(f"program {name} on {gpu}: {len(records)} kernels hot-swapped in (records {records}); "
          f"verified on the other GPU: {crossed if mode == 'two' else 'n/a (one GPU)'}\n")
    print("| op | first round us/call | last round us/call | speedup |")
    print("|---|---|---|---|")
    for op, rounds in run["ops"].items():
        first, last = rounds[0]["us_per_call"], rounds[-1]["us_per_call"]
        print(f"| {op} | {first:.1f} | {last:.1f} | {first / last:.2f}x |")
    print()
EOF
note "figures: rc=$?"; cat "$OUT/multi.md" | tee -a "$summary"
tar -C /tmp -czf "$OUT/multi.tar.gz" kjit-multi
