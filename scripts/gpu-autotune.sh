#!/usr/bin/env bash
# Run ON THE GPU MACHINE, from the repo root, through the device tool:
#
#   run(command="KJIT_COMMIT=<sha> bash scripts/gpu-autotune.sh", carry=[".gpu-debs"])
#
# (Here, first: scripts/fetch-gpu-debs.sh.) kjitd tunes by itself (issue 39), measured as a new user meets
# it, with no command between the two runs of the program:
#   1. builds what a user runs (kjit, kjitd, the evaluator, the shim, kjit-policy) against that machine's
#      PyTorch;
#   2. runs examples/shim_app/app.py under `kjit run` with an empty cache: every op misses, kjitd starts in
#      the background with its tuner (which trains its first policy while the expert default serves);
#   3. from the program's exit, watches `kjit tasks` once a second for KJIT_AUTOTUNE_S (180) seconds: when
#      the first verified kernel lands, when every key holds a kernel or a recorded reason;
#   4. runs the program again and compares each op with the first run (PyTorch's kernels then);
#   5. KJIT_AUTOTUNE_STEPS (default "example") picks the programs: "example" (the above with app.py),
#      "large" (the same with examples/shim_app/large.py: 4-8 GB tensors, watched KJIT_AUTOTUNE_LARGE_S, 420 s),
#      "long" (a long-running app.py against a fresh cache, rounds with pauses: kjit's kernels swapped in
#      mid-run without a restart).
# Results in $OUT: autotune.md (the tables), autotune.tar.gz (logs, tasks, runs' JSON), build.log.
# KJIT_AUTOTUNE_OPS=softmax,cumsum runs a subset; KJIT_AUTOTUNE_ITERS (30) calls per op and round;
# KJIT_GPU_RUN_SKIP_BUILD=1 reuses build-gpu/ on a warm machine.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/kjit-gpu-out}"
mkdir -p "$OUT"
md="$OUT/autotune.md"
: > "$md"
note() { echo "$*" | tee -a "$md"; }

prefix=/tmp/kjit-deps
if ! ls .gpu-debs/*.deb >/dev/null 2>&1; then
  note "FAIL: no .gpu-debs/: run scripts/fetch-gpu-debs.sh here first and pass carry=[\".gpu-debs\"]"
  exit 1
fi
mkdir -p "$prefix"
for f in .gpu-debs/*.deb; do dpkg -x "$f" "$prefix"; done
export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
torch_prefix="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null || true)"
note "# kjitd tunes by itself: programs run twice, nothing run between"
note ""
note "host: $(hostname); $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
note "torch: $(python3 -c 'import torch; print(torch.__version__)' 2>&1 | tail -1); commit: ${KJIT_COMMIT:-unknown: pass KJIT_COMMIT}"

build=build-gpu
if [[ "${KJIT_GPU_RUN_SKIP_BUILD:-0}" != 1 ]]; then
  t0=$(date +%s)
  {
    cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKJIT_WERROR=OFF -DKJIT_BUILD_BENCHMARKS=OFF \
      -DCMAKE_PREFIX_PATH="$prefix/usr;$prefix/usr/lib/x86_64-linux-gnu/cmake;$prefix/usr/share/cmake;$torch_prefix" \
      -DCMAKE_INCLUDE_PATH="$prefix/usr/include" &&
      cmake --build "$build" -j "$(nproc)" --target kjit kjitd kjit-evaluator kjit_preload kjit_torch_adapter kjit-policy
  } > "$OUT/build.log" 2>&1
  rc=$?
  note "build: rc=$rc in $(( $(date +%s) - t0 )) s"
  if [[ $rc -ne 0 ]]; then tail -40 "$OUT/build.log"; exit 1; fi
fi

kjit="$PWD/$build/bin/kjit"
work=/tmp/kjit-autotune
ops="${KJIT_AUTOTUNE_OPS:-}"
iters="${KJIT_AUTOTUNE_ITERS:-30}"
watch_s="${KJIT_AUTOTUNE_S:-180}"
app=(python3 examples/shim_app/app.py --iters "$iters" ${ops:+--ops "$ops"})

# A private cache, runtime dir and kjitd (its log lands in $XDG_CACHE_HOME/kjit/kjitd.log).
fresh() {
  "$kjit" daemon stop >/dev/null 2>&1 || true
  rm -rf "$work/$1"; mkdir -p "$work/$1/run"
  export KJIT_CACHE="$work/$1/cache.db" KJIT_RUNTIME_DIR="$work/$1/run" XDG_CACHE_HOME="$work/$1/xdg"
}

# two_runs NAME WATCH_S APP...: the program under `kjit run` on a fresh cache, the watch from its exit, the
# program again, the comparison.
two_runs() {
local name=$1 watch=$2; shift 2
local app=("$@")
note ""
note "## $name: ${app[*]}"
fresh "$name"
t_start=$(date +%s.%N)
PYTHONUNBUFFERED=1 "$kjit" run -- "${app[@]}" --json "$work/$name/run1.json" > "$work/$name/run1.txt" 2>&1
note "first run (every op misses): rc=$? in $(python3 -c "import time; print(round(time.time() - $t_start, 1))") s"
t_exit=$(date +%s.%N)

# The watch: one line a second of the queue's states, from the program's exit.
python3 - "$kjit" "$t_exit" "$watch" "$work/$name" <<'EOF' | tee -a "$md"
import json, subprocess, sys, time
kjit, t_exit, watch_s, out = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
first_kernel = all_settled = None
timeline = []
while time.time() - t_exit < watch_s:
    r = subprocess.run([kjit, "tasks", "--json"], capture_output=True, text=True)
    try:
        tasks = json.loads(r.stdout)
    except ValueError:
        time.sleep(1)
        continue
    t = time.time() - t_exit
    states = {}
    for task in tasks:
        states[task["state"]] = states.get(task["state"], 0) + 1
    with_kernel = sum(1 for task in tasks if task.get("record_id", 0) > 0)
    settled = sum(1 for task in tasks if task.get("record_id", 0) > 0 or task["state"] in ("done", "unfit", "failed"))
    timeline.append({"t": round(t, 1), "states": states, "with_kernel": with_kernel, "settled": settled,
                     "keys": len(tasks), "trials": sum(task.get("trials", 0) for task in tasks)})
    if with_kernel and first_kernel is None:
        first_kernel = t
    if tasks and settled == len(tasks) and all_settled is None:
        all_settled = t
    if all_settled is not None and all(task["state"] != "running" and task["state"] != "queued" for task in tasks):
        break
    time.sleep(1)
json.dump(timeline, open(out + "/timeline.json", "w"), indent=0)
json.dump(tasks, open(out + "/tasks.json", "w"), indent=1)
last = timeline[-1] if timeline else {}
print(f"\nkeys: {last.get('keys', 0)}; after {last.get('t', 0)} s: {last.get('states', {})}, "
      f"{last.get('with_kernel', 0)} with a kernel, {last.get('trials', 0)} trials")
print(f"first verified kernel: {'%.1f s' % first_kernel if first_kernel is not None else 'none'} after the "
      f"program's exit; every key with a kernel or a reason: "
      f"{'%.1f s' % all_settled if all_settled is not None else 'not within %d s' % watch_s}")
print("\n| t (s) | queued | tuning | done | unfit | failed | with a kernel | trials |\n|---:|---:|---:|---:|---:|---:|---:|---:|")
for row in timeline[:: max(1, len(timeline) // 20)] + timeline[-1:]:
    s = row["states"]
    print(f"| {row['t']} | {s.get('queued', 0)} | {s.get('running', 0)} | {s.get('done', 0)} | {s.get('unfit', 0)} | "
          f"{s.get('failed', 0)} | {row['with_kernel']} | {row['trials']} |")
print("\n| task | state | trials | best | PyTorch (evaluator) us | kernel us | floor us | kernel/floor | proposer | detail |")
print("|---|---|---:|---:|---:|---:|---:|---:|---|---|")
for task in tasks:
    best, base, floor = task.get("best_us", 0), task.get("baseline_us", 0), task.get("floor_us", 0)
    print(f"| `{task['key_text'][:70]}` | {task['state']} | {task.get('trials', 0)} | "
          f"{'%.2fx' % (base / best) if best and base else '-'} | {base:.1f} | {best:.1f} | {floor:.1f} | "
          f"{'%.2f' % (best / floor) if best and floor else '-'} | {task.get('policy_version', '')} | "
          f"{task['detail'][:90]} |")
EOF

PYTHONUNBUFFERED=1 "$kjit" run -- "${app[@]}" --json "$work/$name/run2.json" > "$work/$name/run2.txt" 2>&1
note ""
note "second run: rc=$?"
python3 - "$work/$name/run1.json" "$work/$name/run2.json" <<'EOF' | tee -a "$md"
import json, math, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
print("\n| op | first run (PyTorch) us | second run (kjit) us | speedup | checksums |\n|---|---:|---:|---:|---|")
faster = 0
logs = []
def last(rows):  # app.py keeps a list of rounds per op, large.py one result
    return rows[-1] if isinstance(rows, list) else rows
for op, rows in a["ops"].items():
    rows = [last(rows)]
    us1 = rows[-1]["us_per_call"]
    r2 = last(b["ops"].get(op, [{}]))
    us2 = r2.get("us_per_call", float("nan"))
    c1, c2 = rows[-1]["checksum"], r2.get("checksum", float("nan"))
    same = "equal" if c1 == c2 else ("close" if abs(c1 - c2) <= 1e-3 * max(1.0, abs(c1)) else f"DIFFER {c1:.6g} vs {c2:.6g}")
    s = us1 / us2 if us2 > 0 else float("nan")
    faster += s > 1.02
    logs.append(math.log(s))
    print(f"| {op} | {us1:.1f} | {us2:.1f} | {s:.2f}x | {same} |")
print(f"\n{faster} of {len(logs)} ops faster than in the first run (by more than 2%); geometric mean "
      f"{math.exp(sum(logs) / len(logs)):.2f}x")
# What guarding a record's first launch costs (the launch journal): app.py times its first three calls of
# each op one at a time; in the second run the second call is kjit's first launch in the process.
first = b.get("first_calls_ms")
if first:
    print("\n| op | call 1 ms (first sight) | call 2 ms (first launch, guarded) | call 3 ms | guard cost ms (2 - 3) |"
          "\n|---|---:|---:|---:|---:|")
    for op, ms in first.items():
        if len(ms) >= 3:
            print(f"| {op} | {ms[0]:.3f} | {ms[1]:.3f} | {ms[2]:.3f} | {ms[1] - ms[2]:.3f} |")
EOF
"$kjit" daemon status > "$work/$name/status.txt" 2>&1
"$kjit" cache ls --json > "$work/$name/cache-ls.json" 2>&1
"$kjit" daemon stop >/dev/null 2>&1
}

steps="${KJIT_AUTOTUNE_STEPS:-example}"
for step in $steps; do
  case "$step" in
    example) two_runs example "$watch_s" "${app[@]}" ;;
    large) two_runs large "${KJIT_AUTOTUNE_LARGE_S:-420}" python3 examples/shim_app/large.py --iters 5 ;;
  esac
done

if [[ " $steps " == *" long "* ]]; then
  # A long-running program against a cold cache: kjitd tunes in its pauses (the GPU idle), and the shim swaps
  # the kernels in as they are announced.
  fresh long
  PYTHONUNBUFFERED=1 timeout 400 "$kjit" run -- "${app[@]}" --rounds "${KJIT_AUTOTUNE_ROUNDS:-5}" \
    --pause-s "${KJIT_AUTOTUNE_PAUSE_S:-40}" --json "$work/long/run.json" > "$work/long/run.txt" 2>&1
  note ""
  note "long-running program (rounds with pauses, one process, cold cache): rc=$?"
  python3 - "$work/long/run.json" <<'EOF' | tee -a "$md"
import json, sys
r = json.load(open(sys.argv[1]))
rounds = r["rounds"]
print("\n| op | " + " | ".join(f"round {i + 1} us" for i in range(rounds)) + " | last/first |")
print("|---|" + "---:|" * (rounds + 1))
for op, rows in r["ops"].items():
    print(f"| {op} | " + " | ".join(f"{x['us_per_call']:.1f}" for x in rows) +
          f" | {rows[-1]['us_per_call'] / rows[0]['us_per_call']:.2f} |")
EOF
  # Whether kjitd kept out of the program's way: the program's activity reports, the trials that yielded to
  # it, and, from kjitd's log, how many trials ended while a round ran (the run's round times).
  "$kjit" daemon status --json > "$work/long/status.json" 2>&1
  python3 - "$work/long/status.json" "$work/long/run.json" "$work/long/xdg/kjit/kjitd.log" <<'EOF' | tee -a "$md"
import datetime, json, sys
try:
    counters = json.load(open(sys.argv[1])).get("counters", {})
except (OSError, ValueError):
    counters = {}
print()
for k in ("client_activity_reports", "trials_preempted_requests", "jobs_backed_off", "trials", "kernels_verified",
          "kernels_not_better", "compile_ahead_sent"):
    print(f"- kjitd {k}: {counters.get(k, 0):.0f}")
try:
    intervals = [(r["start_unix"], r["end_unix"]) for r in json.load(open(sys.argv[2])).get("round_times", [])]
except (OSError, ValueError, KeyError, TypeError):
    intervals = []
inside = total = 0
try:
    for line in open(sys.argv[3]):
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("event") != "trial":
            continue
        total += 1
        t = datetime.datetime.fromisoformat(e["ts"].replace("Z", "+00:00")).timestamp()
        inside += any(a <= t <= b for a, b in intervals)
except (OSError, KeyError, ValueError):
    pass
if intervals:
    print(f"- trials that ended while a round ran: {inside} of {total}")
else:
    print(f"- trials: {total} (the run did not record its rounds' times)")
EOF
  "$kjit" daemon stop >/dev/null 2>&1
fi

tar -czf "$OUT/autotune.tar.gz" --exclude='cache.db*' -C "$work" . 2>/dev/null
note ""
note "logs, tasks and the runs' JSON: autotune.tar.gz"
