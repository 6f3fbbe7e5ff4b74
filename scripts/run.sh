#!/usr/bin/env bash
# Sets everything up and shows kjit doing its job on this machine.
#
#   scripts/run.sh
#
# Installs the dependencies, builds, starts kjitd (left running: stop it with
# `build/bin/kjit daemon stop`) and shows the GPU. Without a GPU it compiles
# the example kernel with NVRTC and stops there. With one (and a PyTorch that
# sees it), it runs an unmodified PyTorch program (examples/shim_app/app.py)
# under `kjit run`: every op misses and runs PyTorch's kernel; kjitd then tunes
# the program's keys by itself (a progress line every 5 s, at most
# KJIT_RUN_TUNE_S seconds, 180); the program runs again, served kjit's kernels,
# and a table compares each op before and after, with the time saved, followed
# by `kjit report --run last`. What takes the time: the build (minutes on a fresh
# machine; its output goes to build/build.log), kjitd training its first policy
# in the background (about two minutes, while the expert defaults already serve)
# and the tuning itself. KJIT_SKIP_SETUP=1 skips installing the dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac

t0=$(date +%s)
# KJIT_SKIP_SETUP=1: the dependencies are already installed (or unpacked and on CMAKE_PREFIX_PATH).
[[ "${KJIT_SKIP_SETUP:-0}" == 1 ]] || bash scripts/setup-deps.sh
# The build's own output (compiler warnings included) goes to build/build.log; the terminal gets a progress
# line every tenth of the build and, on failure, the log's last lines.
mkdir -p build
log=build/build.log
echo "building kjit (output in $log)..."
if ! cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo > "$log" 2>&1; then
  tail -40 "$log"; echo "run.sh: configuring failed; the whole output is in $log" >&2; exit 1
fi
set +e
cmake --build build -j "${KJIT_JOBS:-$(nproc)}" 2>&1 | tee -a "$log" | awk '
  match($0, /^\[[0-9]+\/[0-9]+\]/) {
    split(substr($0, 2, RLENGTH - 2), nm, "/"); step = int(10 * nm[1] / nm[2])
    if (step > shown) { shown = step; printf "  built %d of %d steps\n", nm[1], nm[2]; fflush() }
  }'
build_rc=${PIPESTATUS[0]}
set -e
if [[ $build_rc -ne 0 ]]; then
  grep -m 20 -B2 -A6 'error' "$log" || tail -40 "$log"
  echo "run.sh: the build failed; the whole output is in $log" >&2; exit 1
fi
warnings=$(grep -c 'warning:' "$log" || true)
[[ $warnings -eq 0 ]] || echo "  ($warnings compiler warnings, in $log)"
kjit=build/bin/kjit
echo "(set up and built in $(( $(date +%s) - t0 )) s)"

echo
echo "== kjitd"
$kjit daemon start
$kjit daemon status
echo
echo "== the GPU"
if ! $kjit device; then
  echo "(no GPU here: kjit compiles kernels but cannot run them; PyTorch keeps its own)"
  echo
  echo "== run-time compilation example"
  ./build/examples/compile_and_run/kjit_example_compile_and_run
  echo
  echo "kjitd keeps running; stop it with: $kjit daemon stop"
  exit 0
fi
echo
echo "== run-time compilation example"
./build/examples/compile_and_run/kjit_example_compile_and_run

if ! python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo
  echo "(python3 has no PyTorch that sees this GPU: the PyTorch part is skipped; pip install torch, then run this again)"
  exit 0
fi

work=$(mktemp -d)
app=(python3 examples/shim_app/app.py --iters "${KJIT_RUN_ITERS:-30}")
echo
echo "== an unmodified PyTorch program under kjit run: ${app[*]}"
echo "(first run: keys kjit has no kernel for run PyTorch's own kernels and are queued for kjitd)"
$kjit run -- "${app[@]}" --json "$work/before.json"

echo
echo "== kjitd tunes the program's keys by itself (no command needed; progress every 5 s)"
t_tune=$(date +%s)
limit=${KJIT_RUN_TUNE_S:-180}
while true; do
  elapsed=$(( $(date +%s) - t_tune ))
  line=$($kjit tasks --json 2>/dev/null | python3 -c '
import json, sys
try:
    tasks = json.load(sys.stdin)
except ValueError:
    print("waiting for kjitd"); sys.exit(1)
states = {}
for t in tasks:
    # A queued key that holds a kernel waits for a search round; counted with the kernels, not as queued.
    if t.get("record_id", 0) > 0 and t["state"] == "queued":
        continue
    states[t["state"]] = states.get(t["state"], 0) + 1
kernels = sum(1 for t in tasks if t.get("record_id", 0) > 0)
settled = sum(1 for t in tasks if t.get("record_id", 0) > 0 or t["state"] in ("done", "unfit", "failed"))
trials = sum(t.get("trials", 0) for t in tasks)
print(f"{len(tasks)} keys: {kernels} with a kernel, " + ", ".join(f"{n} {s}" for s, n in sorted(states.items())) +
      f"; {trials} trials")
sys.exit(0 if tasks and settled == len(tasks) else 1)
') && settled=1 || settled=0
  echo "  [${elapsed} s] $line"
  if (( settled )) || (( elapsed >= limit )); then break; fi
  sleep 5
done
(( settled )) && echo "every key holds a kernel or a recorded reason after $(( $(date +%s) - t_tune )) s" ||
  echo "(stopped watching after ${limit} s; kjitd goes on tuning: \`$kjit tasks\` shows where it is)"

echo
echo "== the same program again, served kjit's kernels"
$kjit run -- "${app[@]}" --json "$work/after.json"

echo
echo "== before and after, per op (us per call; CUDA events over ${KJIT_RUN_ITERS:-30} calls)"
python3 - "$work/before.json" "$work/after.json" <<'EOF'
import json, math, sys
before, after = (json.load(open(p)) for p in sys.argv[1:3])
print(f"| op | PyTorch (first run) | kjit (second run) | speedup |")
print("|---|---:|---:|---:|")
logs, saved, total = [], 0.0, 0.0
for op, rows in before["ops"].items():
    b = rows[-1]["us_per_call"]
    a = after["ops"].get(op, rows)[-1]["us_per_call"]
    logs.append(math.log(b / a))
    saved += b - a
    total += b
    print(f"| {op} | {b:.1f} | {a:.1f} | {b / a:.2f}x |")
# Two runs of one op differ by a percent or two without any change: faster means by more than 2%.
faster = sum(1 for x in logs if x > math.log(1.02))
print(f"\n{faster} of {len(logs)} ops faster (by more than 2%); geometric mean {math.exp(sum(logs) / len(logs)):.2f}x; "
      f"one call of each op: {total:.1f} us before, {total - saved:.1f} us after ({saved:.1f} us saved)")
EOF
rm -rf "$work"

echo
echo "== kjit report --run last (the second run's calls; \`kjit report\` covers every key kjit has seen, --html FILE adds plots)"
$kjit report --run last
echo
echo "kjitd keeps running (and tuning); stop it with: $kjit daemon stop"
