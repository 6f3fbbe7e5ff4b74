#!/usr/bin/env python3
"""Turns Google Benchmark JSON files into one markdown table.

    scripts/bench_to_markdown.py bench.json [more.json ...] > table.md

With --benchmark_repetitions, each row gives the median of the repetitions and
their range; without, the single run.
"""
import json
import statistics
import sys
from collections import OrderedDict


# Counters worth showing in the table, where a benchmark reports them.
NOTED_COUNTERS = ("p50_us", "p99_us", "max_us", "records", "cubin_bytes")


def fmt(ns: float) -> str:
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"


def to_ns(value: float, unit: str) -> float:
    return value * {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}[unit]


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(sys.argv) >= 2 else 2
    rows = OrderedDict()
    notes = {}
    errors = OrderedDict()
    context = None
    for path in sys.argv[1:]:
        with open(path) as f:
            data = json.load(f)
        context = context or data.get("context", {})
        for b in data["benchmarks"]:
            name = b.get("run_name", b["name"])
            if b.get("error_occurred"):
                errors[name] = b.get("error_message", "")
                continue
            if b.get("run_type") == "aggregate":
                continue
            rows.setdefault(name, []).append(to_ns(b["real_time"], b.get("time_unit", "ns")))
            extra = [f"{k}={b[k]:.3g}" for k in NOTED_COUNTERS if k in b]
            if extra:
                notes[name] = ", ".join(extra)
    print(f"Host: {context.get('host_name', '?')}, {context.get('num_cpus', '?')} CPUs, "
          f"{context.get('date', '?')}\n")
    print("| benchmark | median | min | max | repetitions | counters (last repetition) |")
    print("|---|---:|---:|---:|---:|---|")
    for name, times in rows.items():
        print(f"| {name} | {fmt(statistics.median(times))} | {fmt(min(times))} | {fmt(max(times))} | "
              f"{len(times)} | {notes.get(name, '')} |")
    for name, message in errors.items():
        print(f"| {name} | skipped: {message[:100]} | | | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
