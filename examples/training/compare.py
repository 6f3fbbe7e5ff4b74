#!/usr/bin/env python3
"""Train examples/training/train.py's model eager, under kjit and with torch.compile, from one seed, and
compare: the loss curves step by step, and the steps per second, all in one run on one GPU.

    python3 examples/training/compare.py --kjit build/bin/kjit [--steps 200] [--tune-seconds 300] [--out DIR]

1. eager, then torch.compile (the references);
2. under `kjit run` with an empty cache of its own: the shim reports each missed key, kjitd tunes them on the
   idle GPU (its tuner, no other command), and this script waits until every key holds a kernel or a recorded
   reason, or --tune-seconds;
3. under `kjit run` again, served by the kernels tuned in 2 (the figures that count).
Then a markdown table: steps per second of each run and their ratios, the largest relative loss difference from
eager over all steps (the stated tolerance: --loss-rtol, 1e-3 by default), and `kjit report` of run 3. Exit
status 1 if a kjit run's losses leave the tolerance.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd, env, log):
    print("$ " + " ".join(cmd), flush=True)
    with open(log, "w") as f:
        p = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT)
    tail = open(log).read().splitlines()[-3:]
    for line in tail:
        print("  " + line)
    if p.returncode != 0:
        raise SystemExit(f"compare.py: {' '.join(cmd)} exited with status {p.returncode} (log: {log})")


def settled(kjit, env):
    """Whether every task kjitd has holds a kernel or a final state, and a one-line summary."""
    p = subprocess.run([kjit, "tasks", "--json"], env=env, capture_output=True, text=True)
    try:
        tasks = json.loads(p.stdout)
    except json.JSONDecodeError:
        return False, "waiting for kjitd"
    done = sum(1 for t in tasks if t.get("record_id", 0) > 0 or t.get("state") in ("done", "unfit", "failed"))
    kernels = sum(1 for t in tasks if t.get("record_id", 0) > 0)
    return bool(tasks) and done == len(tasks), f"{len(tasks)} keys, {kernels} with a kernel, {done} settled"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kjit", required=True, help="the kjit command (build/bin/kjit)")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--tune-seconds", type=float, default=300)
    parser.add_argument("--loss-rtol", type=float, default=1e-3)
    parser.add_argument("--out", help="folder for the logs and JSON (default: a new temporary one)")
    args = parser.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="kjit-training-")
    os.makedirs(out, exist_ok=True)
    train = [sys.executable, os.path.join(HERE, "train.py"), "--steps", str(args.steps), "--quiet"]
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    # kjit's state for this comparison only: an empty cache, its own kjitd.
    env.update(KJIT_CACHE=os.path.join(out, "cache.db"), KJIT_RUNTIME_DIR=os.path.join(out, "run"),
               KJIT_CACHE_DIR=os.path.join(out, "state"))
    results = {}
    for name, extra in (("eager", []), ("torch.compile", ["--compile"])):
        path = os.path.join(out, name.replace(".", "_") + ".json")
        run(train + extra + ["--json", path], env, path + ".log")
        results[name] = json.load(open(path))
    path = os.path.join(out, "kjit_first.json")
    t0 = time.monotonic()
    run([args.kjit, "run", "--"] + train + ["--json", path], env, path + ".log")
    results["kjit, first run (tuning)"] = json.load(open(path))
    while True:
        ok, line = settled(args.kjit, env)
        elapsed = time.monotonic() - t0
        print(f"  [{elapsed:5.0f} s] {line}", flush=True)
        if ok or elapsed >= args.tune_seconds:
            break
        time.sleep(5)
    path = os.path.join(out, "kjit.json")
    run([args.kjit, "run", "--"] + train + ["--json", path], env, path + ".log")
    results["kjit"] = json.load(open(path))
    report = subprocess.run([args.kjit, "report", "--run", "last", "--markdown"], env=env, capture_output=True,
                            text=True).stdout
    subprocess.run([args.kjit, "daemon", "stop"], env=env, capture_output=True)

    eager = results["eager"]
    worst_ok = True
    print(f"\n{args.steps} steps of AdamW from one seed, float32 (medians after {eager['args']['warmup']} steps)\n")
    print("| run | steps/s | vs eager | vs torch.compile | final loss | worst loss difference from eager |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, r in results.items():
        sps = 1000.0 / r["median_step_ms"]
        worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(r["losses"], eager["losses"]))
        if name.startswith("kjit") and worst > args.loss_rtol:
            worst_ok = False
        print(f"| {name} | {sps:.1f} | {eager['median_step_ms'] / r['median_step_ms']:.2f}x | "
              f"{results['torch.compile']['median_step_ms'] / r['median_step_ms']:.2f}x | {r['losses'][-1]:.5f} | "
              f"{worst:.2e} |")
    print(f"\nkjit's losses {'stay' if worst_ok else 'DO NOT stay'} within {args.loss_rtol:g} of eager's at every step "
          f"(torch.compile's difference is shown for scale).\n\n`kjit report` of the last run:\n\n{report}")
    print(f"logs and JSON in {out}")
    return 0 if worst_ok else 1


if __name__ == "__main__":
    sys.exit(main())
