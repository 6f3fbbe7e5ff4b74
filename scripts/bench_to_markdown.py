#!/usr/bin/env python3
"""Turns a Google Benchmark JSON file into a markdown table (median rows).

    scripts/bench_to_markdown.py bench.json > table.md
"""
import json
import sys


def main() -> int:
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(sys.argv) == 2 else 2
    with open(sys.argv[1]) as f:
        data = json.load(f)
    ctx = data.get("context", {})
    print(f"Host: {ctx.get('host_name', '?')}, {ctx.get('num_cpus', '?')} CPUs, "
          f"date {ctx.get('date', '?')}, build {ctx.get('library_build_type', '?')}\n")
    print("| benchmark | median | cv | iterations | note |")
    print("|---|---:|---:|---:|---|")
    cvs = {b["run_name"]: b for b in data["benchmarks"] if b.get("aggregate_name") == "cv"}
    for b in data["benchmarks"]:
        if b.get("error_occurred"):
            print(f"| {b['name']} | - | - | - | skipped: {b.get('error_message', '')[:80]} |")
            continue
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        unit = b.get("time_unit", "ns")
        cv = cvs.get(b.get("run_name"), {}).get("real_time")
        cv_text = f"{cv * 100:.1f}%" if isinstance(cv, float) else "-"
        extra = ", ".join(f"{k}={v:.0f}" for k, v in b.items()
                          if k in ("cubin_bytes",))
        print(f"| {b.get('run_name', b['name'])} | {b['real_time']:.3g} {unit} | {cv_text} | "
              f"{b.get('iterations', '-')} | {extra} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
