#!/usr/bin/env python3
"""Host time the shim adds per call, measured from Python, for small tensors.

Run on the GPU machine (its python3 has a CUDA torch; kjit built against that torch):

    python3 benchmarks/shim_overhead.py --build build-gpu [--prepare-hit] [--json FILE]

The same timing loop runs in fresh subprocesses, each under one setting:

  (a) no shim                  softmax, LD_PRELOAD unset
  (b) shim, miss               softmax, libkjit_preload.so, an empty kernel cache: the key has no kernel
  (c) shim, hit                softmax, a cache holding a kernel for exactly that key (--prepare-hit)
  (e) preload, KJIT_DISABLE=1  softmax, libkjit_preload.so loaded but doing nothing (no adapter)
  (f) adapter, op not intercepted  softmax, the adapter attached with KJIT_OPS=cumsum: softmax keeps
                               PyTorch's kernel, so any change is process-wide, not the wrapper's
  (g) wrapper only forwards    softmax intercepted with KJIT_PASSTHROUGH=1: the boxed wrapper calls
                               PyTorch's kernel at once (no key, no lookup): the cost of the override
                               itself (the dispatcher boxing the call, PyTorch's kernel called boxed)
  (d) not intercepted          torch.add, without and with the shim

Between-process variation is as large as the effects measured (a process's
median moves by microseconds from one run to the next), so each setting runs
in several processes, in interleaved rounds (a b c e f g d d', then again with
the order rotated by one, ...), for as many rounds as fit in --budget-s (at
least --min-rounds, at most --rounds). Each process warms up, then times
--loops loops of --calls calls with time.perf_counter_ns (host time only: the
loop does not wait for the GPU, and the queue is drained between loops,
untimed, so the GPU never holds the host back) and reports its median per
call. Per setting the table gives the median of the per-process medians, their
spread (min-max over processes), the difference to the baseline (a for
softmax, d without the shim for add) and the median of the per-round paired
differences (the same round's baseline process: robust to drift over the run).
--pin CPUS pins every timed process to the same CPUs (off by default), which
may narrow the spread further on a machine whose cores differ (SMT siblings,
NUMA nodes); the CPUs are reported per process.

Then one more process per intercepted setting (b, c, g) runs with KJIT_PROFILE=1:
the adapter's per-call stage profile (shim/shim_core.h, Stage): host
time in the pre-filter, keying, hashing, table lookup, output allocation and
launch (hit) or PyTorch's kernel (miss, and g), miss accounting, and the
wrapper as a whole. Each figure includes one clock read (its cost is printed
and taken out of the sums below the tables). "added vs no shim" minus kjit's
own time per miss is what the shim costs outside its code: the dispatcher
boxing the call for the boxed wrapper, and anything process-wide; a hit's
allocation and launch are to be set against PyTorch's kernel's host time in
the (g) profile. Profiled timings are not in the main table.

The hit case needs a cached kernel for the benchmark's key. --prepare-hit makes
one: it runs the loop once under the shim with a private kjitd (no evaluator),
which queues the key, then `kjit_seed_defaults --direct` stores the family's
expert-default kernel for it (compiled, not verified: its outputs are checked
against eager here instead). Or pass --hit-cache FILE, a cache that already
serves the key (e.g. after kjit_seed_defaults through kjitd's evaluator).

--ab measures instead within one process, free of process-to-process noise:
the loops interleave three modes, "none" (kjit_adapter_set_registered(0)
deregisters kjit's overrides, so the dispatcher calls PyTorch's kernel itself,
exactly as in a process without kjit), "forward" (kjit_adapter_set_passthrough:
the wrapper forwards at once, as (g)) and "on". The added time is the median of
the per-loop paired differences on - none; forward - none is the override's own
cost, on - forward kjit's work. --processes processes with an empty cache (a
miss per call) and, with --prepare-hit or --hit-cache, as many with the hit
cache (a hit per call); --pin applies to each.

Nothing here is a pass/fail threshold; issue 9's targets are at most 1 us
added on a hit and 0.5 us on a miss, and no change for ops not intercepted.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child(args):
    """One setting: time the op in this process and print a JSON line."""
    import ctypes
    pinned = None
    if args.pin:
        # Only CPUs this process may run on: a list written for another machine pins what it can.
        allowed = os.sched_getaffinity(0)
        want = {int(c) for c in args.pin.split(",") if c.strip()} & allowed
        if want:
            os.sched_setaffinity(0, want)
            pinned = sorted(want)
    import torch

    if not torch.cuda.is_available():
        print(json.dumps({"error": "no CUDA device"}))
        return 0
    x = torch.randn(args.rows, args.cols, device="cuda")
    y = torch.randn(args.rows, args.cols, device="cuda")
    w = torch.randn(args.cols, device="cuda")
    if args.op == "softmax":
        def fn():
            return torch.softmax(x, dim=-1)
    elif args.op == "layer_norm":  # aten::native_layer_norm: a SymInt[] and two optional tensors
        def fn():
            return torch.nn.functional.layer_norm(x, (args.cols,), w, w)
    elif args.op == "sum":  # aten::sum.dim_IntList: an int[]? and an optional ScalarType
        def fn():
            return x.sum(dim=-1)
    elif args.op == "cumsum":  # aten::cumsum: the pre-filter, then the key
        def fn():
            return torch.cumsum(x, dim=-1)
    elif args.op == "max_pool2d":  # aten::max_pool2d_with_indices: four int[] and two outputs
        x3 = x.view(1, args.rows, args.cols)

        def fn():
            return torch.nn.functional.max_pool2d(x3, 2)
    else:
        def fn():
            return torch.add(x, y)
    if args.ab:
        return child_ab(args, torch, ctypes, fn, pinned)
    reference = None
    with torch.inference_mode():
        for _ in range(args.warmup):
            out = fn()
        torch.cuda.synchronize()
        reference = out.clone()
        samples = []
        for _ in range(args.loops):
            start = time.perf_counter_ns()
            for _ in range(args.calls):
                out = fn()
            end = time.perf_counter_ns()
            torch.cuda.synchronize()
            samples.append((end - start) / args.calls / 1000.0)
        # The reference by ops the shim does not intercept (a softmax call here could be served by kjit).
        if args.op == "softmax":
            e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
            eager = e / e.sum(dim=-1, keepdim=True)
        else:
            eager = torch.add(x, y)
    counters = None
    try:
        adapter = ctypes.CDLL("libkjit_torch_adapter.so", mode=os.RTLD_NOLOAD | os.RTLD_LOCAL)
        values = (ctypes.c_uint64 * 5)()
        adapter.kjit_adapter_counters.restype = ctypes.c_int
        n = adapter.kjit_adapter_counters(values, 5)
        counters = dict(zip(["attached", "hits", "first_sights", "misses", "failures"], list(values)[:n]))
    except OSError:
        pass  # not loaded: no shim in this process
    profile = None
    if os.environ.get("KJIT_PROFILE", "0") not in ("", "0"):
        try:
            adapter = ctypes.CDLL("libkjit_torch_adapter.so", mode=os.RTLD_NOLOAD | os.RTLD_LOCAL)
            buf = ctypes.create_string_buffer(16384)
            adapter.kjit_adapter_profile_json.restype = ctypes.c_int
            n = adapter.kjit_adapter_profile_json(buf, len(buf))
            if 0 <= n < len(buf):
                profile = json.loads(buf.value.decode())
        except (OSError, AttributeError, ValueError):
            pass  # no adapter, or one without the profile: reported as missing
    q = statistics.quantiles(samples, n=4)
    print(json.dumps({"median_us": statistics.median(samples), "iqr_us": q[2] - q[0], "loops": len(samples),
                      "max_abs_diff": (out.float() - eager.float()).abs().max().item(),
                      "stable": bool(torch.equal(out, reference)), "counters": counters, "profile": profile,
                      "pinned": pinned}))
    return 0


AB_MODES = ("on", "forward", "none")


def child_ab(args, torch, ctypes, fn, pinned):
    """--ab: three modes in this one process, in interleaved loops (the order rotated every loop):
    "on" (the shim keys, looks up and serves or forwards each call), "forward" (the wrapper only
    forwards: kjit_adapter_set_passthrough) and "none" (the overrides deregistered:
    kjit_adapter_set_registered(0), so the dispatcher calls PyTorch's kernel itself, as in a
    process without kjit). No process-to-process variation in the paired differences."""
    try:
        adapter = ctypes.CDLL("libkjit_torch_adapter.so", mode=os.RTLD_NOLOAD | os.RTLD_LOCAL)
        passthrough = adapter.kjit_adapter_set_passthrough
        registered = adapter.kjit_adapter_set_registered
    except (OSError, AttributeError):
        print(json.dumps({"error": "no adapter with kjit_adapter_set_passthrough and kjit_adapter_set_registered "
                                   "in this process"}))
        return 0
    for f in (passthrough, registered):
        f.restype = ctypes.c_int
        f.argtypes = [ctypes.c_int]
    if passthrough(0) < 0:
        print(json.dumps({"error": "the adapter is not attached"}))
        return 0

    def mode_on(mode):
        if registered(0 if mode == "none" else 1) < 0:
            raise RuntimeError("kjit_adapter_set_registered failed (KJIT_LOG=1 says why)")
        passthrough(1 if mode == "forward" else 0)

    values = (ctypes.c_uint64 * 5)()
    adapter.kjit_adapter_counters.restype = ctypes.c_int
    samples = {m: [] for m in AB_MODES}
    served = {m: 0 for m in AB_MODES}
    with torch.inference_mode():
        for m in AB_MODES:
            mode_on(m)
            for _ in range(args.warmup):
                fn()
        torch.cuda.synchronize()
        for i in range(args.loops):
            for k in range(len(AB_MODES)):
                m = AB_MODES[(i + k) % len(AB_MODES)]
                mode_on(m)
                # A registration change recomputes dispatch tables (and the first calls after it
                # find colder caches): untimed calls first, so each timed loop starts settled.
                for _ in range(args.settle):
                    fn()
                torch.cuda.synchronize()
                adapter.kjit_adapter_counters(values, 5)
                before = values[1] + values[3]  # hits + misses: calls kjit keyed
                start = time.perf_counter_ns()
                for _ in range(args.calls):
                    fn()
                end = time.perf_counter_ns()
                torch.cuda.synchronize()
                adapter.kjit_adapter_counters(values, 5)
                served[m] += values[1] + values[3] - before
                samples[m].append((end - start) / args.calls / 1000.0)
    mode_on("on")
    adapter.kjit_adapter_counters(values, 5)
    result = {"pinned": pinned, "loops": args.loops, "keyed_calls": served,
              "hits": values[1], "misses": values[3]}
    for m in AB_MODES:
        result[f"{m}_median_us"] = statistics.median(samples[m])
    for name, x, y in (("added", "on", "none"), ("wrapper", "forward", "none"), ("kjit", "on", "forward")):
        paired = [p - q for p, q in zip(samples[x], samples[y])]
        q = statistics.quantiles(paired, n=4)
        result[f"{name}_median_us"] = statistics.median(paired)
        result[f"{name}_iqr_us"] = q[2] - q[0]
    print(json.dumps(result))
    return 0


def run_ab(args, preload, empty_cache, hit_cache, run_dir):
    """--ab: --processes processes under the shim with an empty cache (a miss per call) and, with a
    hit cache, as many with it (a hit per call), alternating."""
    # Hits are prepared for the softmax key only.
    cases = [("miss", empty_cache)] + ([("hit", hit_cache)] if hit_cache and args.ab_op == "softmax" else [])
    results = {name: [] for name, _ in cases}
    for i in range(max(1, args.processes)):
        for name, cache in cases:
            r = run_child(args, args.ab_op, preload, cache, run_dir)
            results[name].append(r)
            print(f"[ab] process {i + 1}/{args.processes} ({name}): "
                  + (r["error"] if "error" in r else f"added {r['added_median_us']:.3f} us"), file=sys.stderr)
    import torch
    print(f"In-process A/B, {args.ab_op} f32[{args.rows},{args.cols}], torch {torch.__version__}, "
          f"{torch.cuda.get_device_name()}: each process times {args.loops} loops of {args.calls} calls per mode, "
          f"the modes interleaved (order rotated per loop; {args.settle} untimed calls after each switch): "
          f"on (kjit keys the call), forward (kjit's wrapper only forwards: kjit_adapter_set_passthrough), none (kjit's overrides deregistered: "
          f"kjit_adapter_set_registered(0); the dispatcher calls PyTorch's kernel itself, as without kjit). "
          f"Differences: medians of the per-loop paired differences." + (f" Pinned to CPUs {args.pin}." if args.pin
                                                                         else ""))
    for name, _ in cases:
        rows = results[name]
        print()
        print(f"{name} (each timed call a {name}; bar: {'0.5' if name == 'miss' else '1'} us added)")
        print()
        print("| process | none us/call | forward us/call | on us/call | added: on - none, us (IQR) | "
              "wrapper: forward - none, us | kjit: on - forward, us | keyed calls in on / forward / none |")
        print("|---:|---:|---:|---:|---:|---:|---:|---|")
        added = []
        for i, r in enumerate(rows):
            if "error" in r:
                print(f"| {i} | {r['error']} | | | | | | |")
                continue
            added.append(r["added_median_us"])
            k = r["keyed_calls"]
            print(f"| {i} | {r['none_median_us']:.3f} | {r['forward_median_us']:.3f} | {r['on_median_us']:.3f} | "
                  f"**{r['added_median_us']:.3f}** ({r['added_iqr_us']:.3f}) | {r['wrapper_median_us']:.3f} | "
                  f"{r['kjit_median_us']:.3f} | {k['on']} / {k['forward']} / {k['none']} |")
        if added:
            print()
            print(f"{name}: added per call, median over {len(added)} processes {statistics.median(added):.3f} us "
                  f"(min {min(added):.3f}, max {max(added):.3f})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"ab": results, "args": {k: v for k, v in vars(args).items() if k not in ("child", "op")}}, f,
                      indent=1)
    return 0


def run_child(args, op, preload, cache_path, runtime_dir, extra_env=None):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env["KJIT_CACHE"] = cache_path
    env["KJIT_RUNTIME_DIR"] = runtime_dir
    for name in ("KJIT_ENDPOINT", "KJIT_DISABLE", "KJIT_OPS", "KJIT_PROFILE", "KJIT_PASSTHROUGH"):
        env.pop(name, None)  # each setting says its own
    if preload:
        env["LD_PRELOAD"] = preload
    env.update(extra_env or {})
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--op", op, "--rows", str(args.rows),
           "--cols", str(args.cols), "--calls", str(args.calls), "--loops", str(args.loops), "--warmup",
           str(args.warmup)] + (["--pin", args.pin] if args.pin else []) + (
               ["--ab", "--settle", str(args.settle)] if args.ab else [])
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    if p.returncode != 0 or not lines:
        raise RuntimeError(f"{op} ({'shim' if preload else 'no shim'}) failed, status {p.returncode}:\n"
                           f"{p.stdout}\n{p.stderr}")
    return json.loads(lines[-1])


def prepare_hit(args, preload, work):
    """A cache with a kernel for the benchmark's softmax key; returns its path."""
    kjit = os.path.join(args.build, "daemon", "kjit")
    seed = os.path.join(args.build, "examples", "shim_app", "kjit_seed_defaults")
    for tool in (kjit, seed):
        if not os.access(tool, os.X_OK):
            raise RuntimeError(f"{tool} is missing: build it (cmake --build {args.build} --target kjit kjitd "
                               "kjit_seed_defaults)")
    cache_path = os.path.join(work, "hit.db")
    run_dir = os.path.join(work, "hit-run")
    env = dict(os.environ, KJIT_CACHE=cache_path, KJIT_RUNTIME_DIR=run_dir, KJIT_CACHE_DIR=work,
               XDG_CONFIG_HOME=os.path.join(work, "config"))
    env.pop("KJIT_ENDPOINT", None)
    subprocess.run([kjit, "daemon", "start", "--", "--when", "never"], env=env, check=True, capture_output=True)
    try:
        # The shim reports the key's first miss at once; kjitd queues it with its exact bytes.
        run_child(args, "softmax", preload, cache_path, run_dir)
        subprocess.run([kjit, "daemon", "stop"], env=env, check=True, capture_output=True)
    finally:
        subprocess.run([kjit, "daemon", "stop"], env=env, capture_output=True)
    seeded = subprocess.run([seed, "--direct", "--cache", cache_path], env=env, capture_output=True, text=True)
    print(f"prepare-hit: {seeded.stdout.strip() or seeded.stderr.strip()}", file=sys.stderr)
    return cache_path


def make_settings(preload, empty_cache, hit_cache):
    """The settings, in round order. base: the id of the setting a row is compared with."""
    def setting(sid, label, op, shim, cache=empty_cache, env=None, base=None, profile=False):
        return {"id": sid, "case": label, "op": op, "preload": preload if shim else None, "cache": cache,
                "env": env or {}, "base": base, "profile": profile}
    out = [setting("a", "(a) no shim", "softmax", False),
           setting("b", "(b) shim, miss", "softmax", True, base="a", profile=True)]
    if hit_cache:
        out.append(setting("c", "(c) shim, hit", "softmax", True, cache=hit_cache, base="a", profile=True))
    out += [setting("e", "(e) preload, KJIT_DISABLE=1", "softmax", True, env={"KJIT_DISABLE": "1"}, base="a"),
            setting("f", "(f) adapter, softmax not intercepted", "softmax", True, env={"KJIT_OPS": "cumsum"},
                    base="a"),
            setting("g", "(g) shim, wrapper only forwards", "softmax", True, env={"KJIT_PASSTHROUGH": "1"},
                    base="a", profile=True),
            setting("d0", "(d) not intercepted, no shim", "add", False),
            setting("d1", "(d) not intercepted, shim", "add", True, base="d0")]
    return out


def run_rounds(args, settings, run_dir, began):
    """Interleaved rounds, each running every setting once (order rotated by one per round).

    Stops after --rounds rounds, or earlier once at least --min-rounds are done and another
    round (timed as the slowest so far), plus the profiled processes after the rounds, would
    pass --budget-s since `began`."""
    rounds = []
    slowest = 0.0
    profiled = 0 if args.no_profile else sum(1 for s in settings if s["profile"])
    for i in range(args.rounds):
        reserve = slowest * (1 + profiled / len(settings))
        if i >= args.min_rounds and time.monotonic() - began + reserve > args.budget_s:
            break
        t0 = time.monotonic()
        k = i % len(settings)
        results = {}
        for s in settings[k:] + settings[:k]:
            results[s["id"]] = run_child(args, s["op"], s["preload"], s["cache"], run_dir, s["env"])
        rounds.append(results)
        slowest = max(slowest, time.monotonic() - t0)
        # Progress (and what is left if a time limit kills the run before the table): one line per round.
        print(f"round {i + 1}: {time.monotonic() - t0:.0f} s; " +
              ", ".join(f"{sid} {r.get('median_us', float('nan')):.2f}" for sid, r in results.items()),
              file=sys.stderr, flush=True)
    return rounds


def summarize(settings, rounds):
    """One row per setting: median and spread of its per-process medians, and the added time."""
    rows = []
    medians = {s["id"]: [r[s["id"]]["median_us"] for r in rounds] for s in settings}
    for s in settings:
        m = medians[s["id"]]
        row = {"id": s["id"], "case": s["case"], "op": s["op"], "processes": len(m),
               "median_us": statistics.median(m), "min_us": min(m), "max_us": max(m),
               "per_process_us": m, "within_iqr_us": statistics.median(r[s["id"]]["iqr_us"] for r in rounds),
               "counters": rounds[-1][s["id"]].get("counters"),
               "max_abs_diff": max(r[s["id"]]["max_abs_diff"] for r in rounds),
               "stable": all(r[s["id"]]["stable"] for r in rounds)}
        if s["base"]:
            row["added_us"] = row["median_us"] - statistics.median(medians[s["base"]])
            paired = [a - b for a, b in zip(m, medians[s["base"]])]
            row["paired_added_us"] = statistics.median(paired)
            row["paired_min_us"] = min(paired)
            row["paired_max_us"] = max(paired)
        rows.append(row)
    return rows


def notes(rows, hit_cache):
    by_id = {r["id"]: r for r in rows}
    miss = by_id["b"]
    if not (miss.get("counters") or {}).get("misses"):
        miss["note"] = "the shim counted no misses: was the adapter loaded (KJIT_LOG=1)?"
    if "c" in by_id:
        hit = by_id["c"]
        c = hit.get("counters") or {}
        if not c.get("hits"):
            hit["note"] = "no hits: the cache did not serve this key here (arch, toolchain?)"
        elif hit["max_abs_diff"] > 1e-5 or miss["max_abs_diff"] > 1e-5:
            hit["note"] = f"kernel output differs from eager by {hit['max_abs_diff']:.3g}"
    f = by_id["f"]
    if (f.get("counters") or {}).get("attached") != 1:
        f["note"] = "the adapter was not attached"
    elif any((f.get("counters") or {}).get(k) for k in ("hits", "misses", "first_sights")):
        f["note"] = "softmax was intercepted: KJIT_OPS not honoured?"
    g = by_id["g"]
    if any((g.get("counters") or {}).get(k) for k in ("hits", "misses", "first_sights")):
        g["note"] = "calls were keyed: KJIT_PASSTHROUGH not honoured?"
    if by_id["e"].get("counters"):
        by_id["e"]["note"] = "the adapter was loaded despite KJIT_DISABLE=1"


def markdown(rows):
    lines = ["| case | op | processes | host us/call (median of process medians) | spread (min-max) | "
             "within-process IQR | added vs baseline | paired per round (median [min, max]) | shim counters (last) "
             "| note |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        added = f"{r['added_us']:+.3f}" if "added_us" in r else ""
        paired = (f"{r['paired_added_us']:+.3f} [{r['paired_min_us']:+.2f}, {r['paired_max_us']:+.2f}]"
                  if "paired_added_us" in r else "")
        counters = r.get("counters")
        ctext = ", ".join(f"{k} {v}" for k, v in counters.items() if k != "attached") if counters else "-"
        lines.append(f"| {r['case']} | {r['op']} | {r['processes']} | {r['median_us']:.3f} | "
                     f"{r['min_us']:.2f}-{r['max_us']:.2f} | {r['within_iqr_us']:.3f} | {added} | {paired} | {ctext} "
                     f"| {r.get('note', '')} |")
    return "\n".join(lines)


def profile_markdown(setting, result, row=None):
    """The stage table of one profiled process, and what it says about the setting's added time."""
    p = result.get("profile")
    head = f"Stage profile, {setting['case']} (one process, KJIT_PROFILE=1; its median {result['median_us']:.3f} us/call)"
    if not p:
        return head + ": no profile (adapter not attached, or built without kjit_adapter_profile_json)"
    lines = [head + f"; each figure includes one clock read ({p['clock_ns']:.1f} ns):", "",
             "| stage | calls | mean ns/call |", "|---|---:|---:|"]
    for st in p["stages"]:
        lines.append(f"| {st['stage']} | {st['calls']} | {st['mean_ns']:.1f} |")
    stages = {st["stage"]: st["mean_ns"] for st in p["stages"]}
    clock = p["clock_ns"]
    added = row.get("added_us") if row else None
    notes = []

    def own(names):
        """The stages' means summed, less one clock read each (the lap's own)."""
        present = [n for n in names if n in stages]
        return sum(stages[n] for n in present) - clock * len(present)

    kjit_stages = ["pre-filter", "key", "hash", "lookup"]
    if "pytorch (miss)" in stages:
        mine = own(kjit_stages + ["miss accounting"])
        notes.append(f"kjit's own time per miss (pre-filter, key, hash, lookup, miss accounting; clock reads "
                     f"taken out): {mine:.0f} ns; PyTorch's kernel called from the wrapper: "
                     f"{stages['pytorch (miss)'] - clock:.0f} ns.")
        if added is not None:
            notes.append(f"Added vs no shim (the rounds above) minus kjit's own time: {added * 1000 - mine:+.0f} ns per "
                         "call spent outside kjit's code (the dispatcher boxing the call for the boxed wrapper, "
                         "process-wide effects) or noise; the (g) row measures the boxed override alone.")
    elif "launch (hit)" in stages:
        mine = own(kjit_stages)
        serve = own(["allocate outputs (hit)", "launch (hit)"])
        notes.append(f"kjit's own time per hit before serving it (pre-filter, key, hash, lookup): {mine:.0f} ns; "
                     f"allocating the outputs and launching: {serve:.0f} ns (clock reads taken out). Set the "
                     "latter against PyTorch's kernel's host time in the (g) profile.")
    elif "pytorch (not keyed)" in stages:
        notes.append(f"PyTorch's kernel called from the wrapper: {stages['pytorch (not keyed)'] - clock:.0f} ns per "
                     "call (clock read taken out).")
        if added is not None:
            notes.append(f"Added vs no shim (the rounds above): {added * 1000:+.0f} ns per call: the boxed override "
                         "alone (boxing in the dispatcher, the wrapper's branch and call) or noise.")
    if notes:
        lines += [""] + notes
    return "\n".join(lines)

def main():
    parser = argparse.ArgumentParser(description="Host time per call added by the kjit shim, from Python: no shim, "
                                                 "shim with a miss, shim with a hit, and a non-intercepted op.",
                                     epilog="Prints a markdown table; --json writes the figures.")
    parser.add_argument("--build", default=os.path.join(ROOT, "build"), help="kjit's build directory (default: build)")
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--cols", type=int, default=64, help="small on purpose: launch-bound, not GPU-bound")
    parser.add_argument("--calls", type=int, default=200, help="calls per timed loop (below the launch queue depth)")
    parser.add_argument("--loops", type=int, default=100, help="timed loops per process")
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=8, help="at most this many rounds of one process per setting")
    parser.add_argument("--min-rounds", type=int, default=3, help="at least this many rounds, whatever the budget")
    parser.add_argument("--budget-s", type=float, default=70,
                        help="start no round that would end past this many seconds since the start (default 70)")
    parser.add_argument("--no-profile", action="store_true", help="skip the KJIT_PROFILE=1 processes")
    parser.add_argument("--pin", metavar="CPUS", help="pin each timed process to these CPUs (comma-separated; those "
                        "this machine lacks are left out; default: not pinned)")
    parser.add_argument("--prepare-hit", action="store_true", help="make a cache that serves the softmax key")
    parser.add_argument("--hit-cache", metavar="FILE", help="a kernel cache that serves the softmax key")
    parser.add_argument("--json", metavar="FILE", help="write the figures here")
    parser.add_argument("--ab", action="store_true",
                        help="instead: the added time within one process, kjit's overrides on, forwarding only, and "
                        "deregistered in interleaved loops; a miss per call, and a hit with --prepare-hit or "
                        "--hit-cache; --processes processes each")
    parser.add_argument("--processes", type=int, default=6, help="--ab: processes per case (default 6)")
    parser.add_argument("--settle", type=int, default=50,
                        help="--ab: untimed calls after each mode switch, before the timed loop (default 50)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--op", default="softmax", help=argparse.SUPPRESS)
    parser.add_argument("--ab-op", default="softmax", choices=["softmax", "layer_norm", "sum", "cumsum", "max_pool2d"],
                        help="--ab: the op timed (default softmax; a hit is prepared for softmax only)")
    args = parser.parse_args()
    if args.child:
        return child(args)

    try:
        import torch
    except ImportError:
        print("shim_overhead.py: needs PyTorch with CUDA", file=sys.stderr)
        return 1
    if not torch.cuda.is_available():
        print("shim_overhead.py: no CUDA device: nothing to measure", file=sys.stderr)
        return 0
    preload = os.path.join(args.build, "daemon", "shim", "libkjit_preload.so")
    if not os.path.exists(preload):
        print(f"shim_overhead.py: {preload} is missing: build kjit_preload and kjit_torch_adapter", file=sys.stderr)
        return 1
    work = tempfile.mkdtemp(prefix="kjit-overhead-")
    try:
        empty_cache = os.path.join(work, "empty.db")  # never created: every key is a miss
        run_dir = os.path.join(work, "run")  # no kjitd there: misses are queued in the shim, not sent
        began = time.monotonic()
        hit_cache = args.hit_cache or (prepare_hit(args, preload, work) if args.prepare_hit else None)
        if args.ab:
            return run_ab(args, preload, empty_cache, hit_cache, run_dir)
        settings = make_settings(preload, empty_cache, hit_cache)
        rounds = run_rounds(args, settings, run_dir, began)
        profiles = {}
        if not args.no_profile:
            for s in settings:
                if s["profile"]:
                    r = run_child(args, s["op"], s["preload"], s["cache"], run_dir, dict(s["env"], KJIT_PROFILE="1"))
                    profiles[s["id"]] = r
        summary = summarize(settings, rounds)
        notes(summary, hit_cache)
        elapsed = time.monotonic() - began
        print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, f32[{args.rows},{args.cols}], "
              f"{len(rounds)} rounds (one process per setting each, order rotated per round), "
              f"{args.loops} loops of {args.calls} calls per process, {elapsed:.0f} s")
        print()
        print(markdown(summary))
        if not hit_cache:
            print("\n(c) not measured: run with --prepare-hit, or --hit-cache FILE")
        for sid, r in profiles.items():
            print()
            print(profile_markdown(next(s for s in settings if s["id"] == sid), r,
                                   next(row for row in summary if row["id"] == sid)))
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name(), "rows": summary,
                           "rounds": rounds, "profiles": profiles, "elapsed_s": elapsed,
                           "args": {k: v for k, v in vars(args).items() if k not in ("child", "op")}}, f, indent=1)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
