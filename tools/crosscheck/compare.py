"""Runs one trace through memvisor and libCacheSim and pairs up their miss counts."""

from __future__ import annotations

from dataclasses import dataclass

import lcs_runner
import memvisor_cli
from traces import Trace

POLICIES = ("lru", "fifo", "clock", "arc", "s3-fifo", "sieve", "opt")


@dataclass
class Pair:
    """One (policy, size): memvisor's and libCacheSim's misses (None if libCacheSim cannot)."""

    policy: str
    size: int
    requests: int
    memvisor: int
    libcachesim: int | None

    @property
    def diff(self) -> int | None:
        return None if self.libcachesim is None else self.memvisor - self.libcachesim

    @property
    def ratio_diff(self) -> float | None:
        """memvisor's miss ratio minus libCacheSim's."""
        return None if self.diff is None else self.diff / self.requests


def lcs_supports(policy: str, size: int) -> bool:
    return not (policy == "s3-fifo" and size < lcs_runner.S3FIFO_MIN_SIZE)


def memvisor_run(trace: Trace, policies=POLICIES, threads: int = 2) -> memvisor_cli.SimResult:
    result = memvisor_cli.sim(
        trace.memvisor_path, trace.memvisor_format, list(policies), trace.sizes(), threads
    )
    if (result.requests, result.unique_units) != (trace.requests, trace.unique):
        raise AssertionError(
            f"{trace.name}: memvisor read {result.requests} requests over "
            f"{result.unique_units} units, the trace has {trace.requests} over {trace.unique}"
        )
    return result


def pairs(trace: Trace, policy: str, mv: memvisor_cli.SimResult) -> list[Pair]:
    out = []
    misses = mv.misses()
    for size in trace.sizes():
        lcs = None
        if lcs_supports(policy, size):
            row = lcs_runner.run_one(trace.oracle, policy, size)
            assert row.requests == trace.requests, (row.requests, trace.requests)
            lcs = row.misses
        out.append(Pair(policy, size, trace.requests, misses[(policy, size)], lcs))
    return out


def markdown(trace: Trace, rows: list[Pair]) -> str:
    lines = [
        f"**{trace.name}**: {trace.origin}; {trace.requests:,} requests, "
        f"{trace.unique:,} distinct units",
        "",
        "| policy | size | memvisor misses | libCacheSim misses | difference | miss-ratio difference |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for p in rows:
        if p.libcachesim is None:
            lines.append(f"| {p.policy} | {p.size} | {p.memvisor} | n/a | | |")
        else:
            lines.append(
                f"| {p.policy} | {p.size} | {p.memvisor} | {p.libcachesim} | {p.diff:+d} | "
                f"{p.ratio_diff:+.4f} |"
            )
    return "\n".join(lines)


def compact_markdown(trace: Trace, rows: list[Pair]) -> str:
    """One row per policy, one column per size: memvisor's misses, then `=` when libCacheSim's
    count is equal, `≠ N` with libCacheSim's count when not, `(n/a)` when it cannot run."""
    sizes = sorted({p.size for p in rows})
    policies = list(dict.fromkeys(p.policy for p in rows))
    by_key = {(p.policy, p.size): p for p in rows}
    lines = [
        f"**{trace.name}**: {trace.origin}; {trace.requests:,} requests, "
        f"{trace.unique:,} distinct units. Misses at each size (units):",
        "",
        "| policy | " + " | ".join(f"{s:,}" for s in sizes) + " |",
        "|---|" + "---:|" * len(sizes),
    ]
    for policy in policies:
        cells = []
        for s in sizes:
            p = by_key[(policy, s)]
            if p.libcachesim is None:
                cells.append(f"{p.memvisor} (n/a)")
            elif p.diff == 0:
                cells.append(f"{p.memvisor} =")
            else:
                cells.append(f"{p.memvisor} ≠ {p.libcachesim}")
        lines.append(f"| {policy} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
