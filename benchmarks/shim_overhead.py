#!/usr/bin/env python3
"""Host time the shim adds per call, measured from Python, for small tensors.

Run on the GPU machine (its python3 has a CUDA torch; kjit built against that torch):

    python3 benchmarks/shim_overhead.py --build build-gpu [--prepare-hit]

The same timing loop runs in fresh subprocesses, each under one setting:

  (a) no shim             LD_PRELOAD unset
  (b) shim, miss          libkjit_preload.so, an empty kernel cache: the intercepted op's key has no kernel
  (c) shim, hit           libkjit_preload.so, a cache holding a kernel for exactly that key
  (d) not intercepted     torch.add, with and without the shim

Each subprocess warms up, then times --loops loops of --calls calls with
time.perf_counter_ns (host time only: the loop does not wait for the GPU,
and the queue is drained between loops, untimed, so the GPU never holds the
host back), and reports the median and interquartile range per call. The
table's last column is the difference to (a) for the same op.

The hit case needs a cached kernel for the benchmark's key. --prepare-hit makes
one: it runs the loop once under the shim with a private kjitd (no evaluator),
which queues the key, then `kjit_seed_defaults --direct` stores the family's
expert-default kernel for it (compiled, not verified: its outputs are checked
against eager here instead). Or pass --hit-cache FILE, a cache that already
serves the key (e.g. after kjit_seed_defaults through kjitd's evaluator).

Nothing here is a pass/fail threshold; issue 9's targets are at most 1 us
added on a hit and 0.5 us on a miss.
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
    import torch

    if not torch.cuda.is_available():
        print(json.dumps({"error": "no CUDA device"}))
        return 0
    x = torch.randn(args.rows, args.cols, device="cuda")
    y = torch.randn(args.rows, args.cols, device="cuda")
    if args.op == "softmax":
        def fn():
            return torch.softmax(x, dim=-1)
    else:
        def fn():
            return torch.add(x, y)
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
    q = statistics.quantiles(samples, n=4)
    print(json.dumps({"median_us": statistics.median(samples), "iqr_us": q[2] - q[0], "loops": len(samples),
                      "max_abs_diff": (out.float() - eager.float()).abs().max().item(),
                      "stable": bool(torch.equal(out, reference)), "counters": counters}))
    return 0


def run_child(args, op, preload, cache_path, runtime_dir, extra_env=None):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env["KJIT_CACHE"] = cache_path
    env["KJIT_RUNTIME_DIR"] = runtime_dir
    env.pop("KJIT_ENDPOINT", None)
    env.pop("KJIT_DISABLE", None)
    if preload:
        env["LD_PRELOAD"] = preload
    env.update(extra_env or {})
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--op", op, "--rows", str(args.rows),
           "--cols", str(args.cols), "--calls", str(args.calls), "--loops", str(args.loops), "--warmup",
           str(args.warmup)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
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


def main():
    parser = argparse.ArgumentParser(description="Host time per call added by the kjit shim, from Python: no shim, "
                                                 "shim with a miss, shim with a hit, and a non-intercepted op.",
                                     epilog="Prints a markdown table; --json writes the figures.")
    parser.add_argument("--build", default=os.path.join(ROOT, "build"), help="kjit's build directory (default: build)")
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--cols", type=int, default=64, help="small on purpose: launch-bound, not GPU-bound")
    parser.add_argument("--calls", type=int, default=200, help="calls per timed loop (below the launch queue depth)")
    parser.add_argument("--loops", type=int, default=200, help="timed loops per setting")
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--prepare-hit", action="store_true", help="make a cache that serves the softmax key")
    parser.add_argument("--hit-cache", metavar="FILE", help="a kernel cache that serves the softmax key")
    parser.add_argument("--json", metavar="FILE", help="write the figures here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--op", default="softmax", help=argparse.SUPPRESS)
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
        hit_cache = args.hit_cache or (prepare_hit(args, preload, work) if args.prepare_hit else None)
        rows = []

        def measure(label, op, shim, cache, base=None):
            r = run_child(args, op, preload if shim else None, cache, run_dir)
            r.update(case=label, op=op)
            if base is not None:
                r["added_us"] = r["median_us"] - base["median_us"]
            rows.append(r)
            return r

        base = measure("(a) no shim", "softmax", False, empty_cache)
        miss = measure("(b) shim, miss", "softmax", True, empty_cache, base)
        if hit_cache:
            hit = measure("(c) shim, hit", "softmax", True, hit_cache, base)
            c = hit.get("counters") or {}
            if not c.get("hits"):
                hit["note"] = "no hits: the cache did not serve this key here (arch, toolchain?)"
            elif hit["max_abs_diff"] > 1e-5 or miss["max_abs_diff"] > 1e-5:
                hit["note"] = f"kernel output differs from eager by {hit['max_abs_diff']:.3g}"
        add_base = measure("(d) not intercepted, no shim", "add", False, empty_cache)
        measure("(d) not intercepted, shim", "add", True, empty_cache, add_base)
        for r in (miss,):
            if not (r.get("counters") or {}).get("misses"):
                r["note"] = "the shim counted no misses: was the adapter loaded (KJIT_LOG=1)?"

        print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, f32[{args.rows},{args.cols}], "
              f"{args.loops} loops of {args.calls} calls")
        print()
        print("| case | op | host us/call (median) | IQR | added vs no shim | shim counters | note |")
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            added = f"{r['added_us']:+.3f}" if "added_us" in r else ""
            counters = r.get("counters")
            ctext = ", ".join(f"{k} {v}" for k, v in counters.items() if k != "attached") if counters else "-"
            print(f"| {r['case']} | {r['op']} | {r['median_us']:.3f} | {r['iqr_us']:.3f} | {added} | {ctext} | "
                  f"{r.get('note', '')} |")
        if not hit_cache:
            print("\n(c) not measured: run with --prepare-hit, or --hit-cache FILE")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name(), "rows": rows}, f,
                          indent=1)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
