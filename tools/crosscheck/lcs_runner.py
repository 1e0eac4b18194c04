#!/usr/bin/env python3
"""Runs libCacheSim's eviction policies on an oracleGeneral trace: miss counts and requests/s.

Policies are named as memvisor names them (``memvisor sim --policy``):

    lru, fifo, clock, arc, s3-fifo, sieve, opt

and map to libCacheSim's classes with their default parameters, which for CLOCK and S3-FIFO
are spelled out here (``Clock(init_freq=0, n_bit_counter=1)``: one reference bit, new objects
start with it clear; ``S3FIFO(small_size_ratio=0.1, ghost_size_ratio=0.9,
move_to_main_threshold=2)``). Every object has size 1, so a cache size is a number of units.

libCacheSim reports a miss ratio (a double, misses / requests); the miss count is recovered
exactly by rounding ratio * requests (both counts are far below 2**53).

Usage: lcs_runner.py TRACE --policy lru,fifo --size 100,1000 [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import libcachesim as lcs

# The smallest cache libCacheSim's S3FIFO accepts with unit-size objects: with fewer than 10
# units its small queue gets 0 units and it aborts the whole process (not an exception).
S3FIFO_MIN_SIZE = 10


def _s3fifo(size: int, **kw):
    if size < S3FIFO_MIN_SIZE:
        raise ValueError(
            f"libCacheSim's S3FIFO aborts the process below {S3FIFO_MIN_SIZE} units (got {size})"
        )
    return lcs.S3FIFO(
        cache_size=size,
        small_size_ratio=0.1,
        ghost_size_ratio=0.9,
        move_to_main_threshold=2,
        **kw,
    )


# memvisor policy name -> libCacheSim cache of a given size in units; keyword arguments are
# common cache parameters (e.g. hashpower: log2 of the hash table's buckets, default 24).
POLICIES: dict[str, Callable[..., object]] = {
    "lru": lambda n, **kw: lcs.LRU(cache_size=n, **kw),
    "fifo": lambda n, **kw: lcs.FIFO(cache_size=n, **kw),
    "clock": lambda n, **kw: lcs.Clock(cache_size=n, init_freq=0, n_bit_counter=1, **kw),
    "arc": lambda n, **kw: lcs.ARC(cache_size=n, **kw),
    "s3-fifo": _s3fifo,
    "sieve": lambda n, **kw: lcs.Sieve(cache_size=n, **kw),
    "opt": lambda n, **kw: lcs.Belady(cache_size=n, **kw),
}


@dataclass
class Row:
    """One libCacheSim run."""

    policy: str
    size: int
    requests: int
    misses: int
    miss_ratio: float
    seconds: float
    requests_per_sec: float


def open_trace(path: Path | str):
    """A libCacheSim reader over an oracleGeneral trace."""
    return lcs.TraceReader(trace=str(path), trace_type=lcs.TraceType.ORACLE_GENERAL_TRACE)


def run_one(path: Path | str, policy: str, size: int, hashpower: int | None = None) -> Row:
    """Simulates one (policy, size); `seconds` is the wall time of process_trace alone.
    `hashpower` overrides libCacheSim's default hash table size (2**24 buckets)."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; known: {', '.join(POLICIES)}")
    if size < 1:
        raise ValueError(f"cache size must be at least 1 unit, got {size}")
    cache = POLICIES[policy](size, **({} if hashpower is None else {"hashpower": hashpower}))
    reader = open_trace(path)
    requests = reader.get_num_of_req()
    start = time.perf_counter()
    miss_ratio, _byte_miss_ratio = cache.process_trace(reader)
    seconds = time.perf_counter() - start
    return Row(
        policy=policy,
        size=size,
        requests=requests,
        misses=round(miss_ratio * requests),
        miss_ratio=miss_ratio,
        seconds=seconds,
        requests_per_sec=requests / max(seconds, 1e-9),
    )


def run(
    path: Path | str, policies: list[str], sizes: list[int], hashpower: int | None = None
) -> list[Row]:
    """Every (policy, size), grouped by policy, sizes ascending."""
    return [run_one(path, p, s, hashpower) for p in policies for s in sorted(set(sizes))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", help="oracleGeneral trace (uncompressed)")
    ap.add_argument("--policy", default="lru,fifo,clock,arc,s3-fifo,sieve,opt")
    ap.add_argument("--size", required=True, help="cache sizes in units, comma separated")
    ap.add_argument("--hashpower", type=int, help="libCacheSim hash table: 2**N buckets")
    ap.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    args = ap.parse_args(argv)
    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    sizes = [int(s) for s in args.size.split(",") if s.strip()]
    rows = run(args.trace, policies, sizes, args.hashpower)
    if args.json:
        json.dump([asdict(r) for r in rows], sys.stdout, indent=1)
        print()
    else:
        print("| policy | size | requests | misses | miss ratio | req/s |")
        print("|---|---:|---:|---:|---:|---:|")
        for r in rows:
            print(
                f"| {r.policy} | {r.size} | {r.requests} | {r.misses} | "
                f"{r.miss_ratio:.4f} | {r.requests_per_sec:,.0f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
