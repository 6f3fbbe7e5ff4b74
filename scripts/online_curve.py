#!/usr/bin/env python3
"""Learning curves of online episodes (issue 8): best-so-far against trials, the policy against its baselines.

    python3 scripts/online_curve.py online.jsonl [more.jsonl ...] [--datasets policy/datasets] [--json out.json]

Input: the JSON lines `kjit policy online --json FILE` appends, one per episode, from runs with
`--proposer policy`, `random` and `expert` on the same queued keys (kjitd's evaluator on the GPU). Only keys
that every mode in the files finished are compared. Per mode and trial count t, two figures, averaged over keys:

  speedup   geometric mean of PyTorch's time / the fastest verified kernel within t trials (1.0 while none is
            verified: the program keeps PyTorch's kernel), each episode against the PyTorch time it measured
  of best   mean of (fastest time any mode found on the key) / (fastest within t trials); 0 while none

and, per mode, the trials each episode took to reach --reach (0.95) of that best (a time within best / 0.95):
their mean and median over keys (a mode's runs of a key averaged first), and how many episodes never reached
it within the budget (counted as budget + 1).

Keys found in the datasets (their key hash in policy/datasets/*.jsonl) are marked: issue 8 asks for keys
outside them. Prints markdown tables; nothing here is a pass/fail threshold.
"""
import argparse
import glob
import json
import math
import os
import sys


def dataset_keys(directory):
    keys = set()
    # The files the replay environment trains on (policy/learn/src/replay.cc): the H200's, not matmul-h100.jsonl.
    for path in glob.glob(os.path.join(directory, "*-h200.jsonl")):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    keys.add(json.loads(line)["key"])
                except (ValueError, KeyError):
                    continue
    return keys


def best_so_far(trials, t):
    times = [x["median_us"] for x in trials[:t] if x["outcome"] == "verified" and x["median_us"] > 0]
    return min(times) if times else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", help="JSON lines from kjit policy online --json")
    parser.add_argument("--datasets", default=os.path.join(os.path.dirname(__file__), "..", "policy", "datasets"),
                        help="directory of the measured datasets (to mark keys seen in training data)")
    parser.add_argument("--json", help="also write the curves here")
    parser.add_argument("--reach", type=float, default=0.95,
                        help="the fraction of the best time any mode found that 'trials to reach' counts to")
    args = parser.parse_args()

    episodes = {}  # (key, mode) -> every episode (random runs with several seeds: averaged per key)
    for path in args.files:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    e = json.loads(line)
                    episodes.setdefault((e["key"], e["mode"]), []).append(e)
                except (ValueError, KeyError) as err:
                    print(f"{path}:{n}: skipped: {err}", file=sys.stderr)
    if not episodes:
        print("online_curve.py: no episodes in the input", file=sys.stderr)
        return 1
    modes = sorted({m for _, m in episodes}, key=lambda m: {"tuner": 0, "policy": 1, "expert": 2, "random": 3}.get(m, 3))
    keys = sorted({k for k, _ in episodes if all((k, m) in episodes for m in modes)})
    if not keys:
        print("online_curve.py: no key was finished by every mode", file=sys.stderr)
        return 1
    known = dataset_keys(args.datasets)
    budget = max(len(e["trials"]) for es in episodes.values() for e in es)
    runs = {m: max(len(episodes[(k, m)]) for k in keys) for m in modes}

    # The fastest time any mode's episodes found on each key (the curves' "of best" denominator).
    best_any = {k: min(b for b in (best_so_far(e["trials"], budget) for m in modes for e in episodes[(k, m)]) if b)
                for k in keys}

    def curve(mode, metric):
        out = []
        for t in range(1, budget + 1):
            vals = []
            for k in keys:
                per_run = []
                for e in episodes[(k, mode)]:
                    b = best_so_far(e["trials"], t)
                    if metric == "speedup":
                        per_run.append(math.log(e["baseline_us"] / b if b and e["baseline_us"] > 0 else 1.0))
                    else:
                        per_run.append(best_any[k] / b if b else 0.0)
                vals.append(sum(per_run) / len(per_run))
            out.append(math.exp(sum(vals) / len(vals)) if metric == "speedup" else sum(vals) / len(vals))
        return out

    curves = {m: {"speedup": curve(m, "speedup"), "of_best": curve(m, "of_best")} for m in modes}

    def trials_to_reach(trials, target_us):
        for t in range(1, len(trials) + 1):
            b = best_so_far(trials, t)
            if b is not None and b <= target_us:
                return t
        return None

    reach = {}  # mode -> {"per_key": [mean trials per key], "missed": episodes that never reached it}
    for m in modes:
        per_key, missed = [], 0
        for k in keys:
            runs_t = []
            for e in episodes[(k, m)]:
                t = trials_to_reach(e["trials"], best_any[k] / args.reach)
                if t is None:
                    missed += 1
                    t = budget + 1
                runs_t.append(t)
            per_key.append(sum(runs_t) / len(runs_t))
        reach[m] = {"per_key": per_key, "missed": missed, "episodes": sum(len(episodes[(k, m)]) for k in keys)}
    unseen = [k for k in keys if k not in known]
    print(f"{len(keys)} keys finished by every mode ({', '.join(f'{m} x{runs[m]}' for m in modes)} episodes per "
          f"key); {len(unseen)} of them outside the datasets; budget {budget} trials\n")
    for metric, title in (("speedup", "geomean speedup over PyTorch of the best kernel within t trials"),
                          ("of_best", "mean fraction of the best time any mode found, within t trials")):
        print(f"**{title}**\n")
        print("| t | " + " | ".join(modes) + " |")
        print("|---:|" + "---:|" * len(modes))
        for t in range(budget):
            print(f"| {t + 1} | " + " | ".join(f"{curves[m][metric][t]:.3f}" for m in modes) + " |")
        print()
    print(f"**trials to reach {args.reach:.2f} of the best time any mode found** (per key, a mode's runs "
          f"averaged; an episode that never reached it counts {budget + 1})\n")
    print("| mode | mean | median | episodes that never reached it |")
    print("|---|---:|---:|---:|")
    for m in modes:
        v = sorted(reach[m]["per_key"])
        median = v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2
        print(f"| {m} | {sum(v) / len(v):.2f} | {median:.1f} | {reach[m]['missed']} of {reach[m]['episodes']} |")
    print()
    print("**per key** (PyTorch us; best us within the budget per mode, its first run if several; trials to "
          "reach it)\n")
    print("| key | family | in datasets | PyTorch us | " + " | ".join(modes) + " |")
    print("|---|---|---|---:|" + "---:|" * len(modes))
    for k in keys:
        e0 = episodes[(k, modes[0])][0]
        cells = []
        for m in modes:
            tr = episodes[(k, m)][0]["trials"]
            b = best_so_far(tr, budget)
            if b is None:
                cells.append("none verified")
                continue
            first = next(t for t in range(1, budget + 1) if best_so_far(tr, t) == b)
            cells.append(f"{b:.2f} ({first})")
        print(f"| `{e0['key_text'][:70]}` | {e0['family']} | {'yes' if k in known else 'no'} | "
              f"{e0['baseline_us']:.2f} | " + " | ".join(cells) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"keys": keys, "unseen": unseen, "modes": modes, "curves": curves, "reach": reach,
                       "reach_fraction": args.reach}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
