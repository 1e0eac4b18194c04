#!/usr/bin/env python3
"""Prints the cross-check tables (memvisor vs libCacheSim misses) for every trace as markdown.

Usage: python3 tools/crosscheck/report.py [--policy lru,fifo,...] [--trace NAME,...] [--full]

By default one compact table per trace (a row per policy, a column per size); --full prints one
row per (policy, size) with both counts and the miss-ratio difference.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import compare
import traces


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", default=",".join(compare.POLICIES))
    ap.add_argument("--full", action="store_true", help="one row per (policy, size)")
    ap.add_argument("--trace", default=",".join([*traces.SYNTHETIC, *traces.LACKEY_PROGRAMS]))
    args = ap.parse_args()
    policies = args.policy.split(",")
    names = args.trace.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        programs = [n for n in names if n in traces.LACKEY_PROGRAMS]
        logs = traces.record_lackey(programs, workdir) if programs else {}
        for name in names:
            if name in traces.SYNTHETIC:
                trace = traces.synthetic_trace(name, workdir)
            else:
                trace = traces.lackey_trace(name, logs[name], workdir)
            mv = compare.memvisor_run(trace, policies)
            rows = [p for policy in policies for p in compare.pairs(trace, policy, mv)]
            print((compare.markdown if args.full else compare.compact_markdown)(trace, rows))
            print(flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
