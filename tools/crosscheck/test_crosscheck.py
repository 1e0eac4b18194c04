"""memvisor's simulator against libCacheSim, miss count by miss count.

For each trace (traces.py: synthetic workloads and lackey recordings of sqlite3 and sort) and
each policy, both simulators run at 1%, 5%, 10%, 25% and 50% of the trace's distinct units
(exact information model, unit-size objects). Where the two implement the same algorithm the
miss counts must be equal; where they implement different variants, the miss-ratio difference
must stay within the bound documented in EXPECTATIONS and docs/crosscheck.md. Any change in
memvisor's numbers beyond that fails here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

import compare
import lackey
import memvisor_cli
import oracle_general
import traces

try:
    import lcs_runner
except ImportError:  # conftest skips (or, in CI, fails) the whole suite
    lcs_runner = None


@dataclass(frozen=True)
class Expectation:
    """Exact agreement from `exact_from` units up; below, |miss-ratio difference| <= bound."""

    exact_from: int = 1
    bound: float = 0.0
    why: str = "the same algorithm"


EXPECTATIONS = {
    "lru": Expectation(),
    "fifo": Expectation(),
    "clock": Expectation(why="second chance, one reference bit, new units start unreferenced"),
    "arc": Expectation(),
    "s3-fifo": Expectation(
        exact_from=20,
        bound=0.35,
        why="below 20 units libCacheSim's small queue (int(0.1 * size) units) admits "
        "nothing, while memvisor's always holds at least one unit",
    ),
    "sieve": Expectation(),
    "opt": Expectation(why="Belady's MIN without bypass: the optimal miss count is unique"),
}

TRACES = [*traces.SYNTHETIC, *traces.LACKEY_PROGRAMS]


@pytest.fixture(scope="session")
def memvisor_results(trace_store):
    """name -> memvisor's sweep of every policy and size (one run per trace)."""
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = compare.memvisor_run(trace_store(name))
        return cache[name]

    return get


@pytest.mark.parametrize("policy", compare.POLICIES)
@pytest.mark.parametrize("trace_name", TRACES)
def test_miss_counts_agree(trace_name, policy, trace_store, memvisor_results):
    trace = trace_store(trace_name)
    rows = compare.pairs(trace, policy, memvisor_results(trace_name))
    expect = EXPECTATIONS[policy]
    table = compare.markdown(trace, rows)
    compared = [p for p in rows if p.libcachesim is not None]
    assert compared, f"libCacheSim ran no size of {policy} on {trace_name}\n{table}"
    for p in compared:
        if p.size >= expect.exact_from:
            assert p.diff == 0, (
                f"{policy} at {p.size} units on {trace_name}: memvisor {p.memvisor} misses, "
                f"libCacheSim {p.libcachesim} ({expect.why})\n{table}"
            )
        else:
            assert abs(p.ratio_diff) <= expect.bound, (
                f"{policy} at {p.size} units on {trace_name}: miss-ratio difference "
                f"{p.ratio_diff:+.4f} exceeds the documented bound {expect.bound} "
                f"({expect.why})\n{table}"
            )


def test_opt_bounds_every_online_policy(trace_store, memvisor_results):
    """Sanity of the comparison itself: OPT never misses more than an online policy."""
    for name in TRACES:
        misses = memvisor_results(name).misses()
        for size in trace_store(name).sizes():
            opt = misses[("opt", size)]
            for policy in compare.POLICIES:
                assert opt <= misses[(policy, size)], (name, policy, size)


@pytest.mark.parametrize("program", traces.LACKEY_PROGRAMS)
def test_lackey_conversion_matches_independent_parser(program, lackey_logs, workdir):
    """memvisor's lackey reader (through `sim` and, if present, `trace convert`) sees the
    same page stream as lackey.py, and libCacheSim on lackey.py's stream agrees with memvisor
    simulating the raw log."""
    log = lackey_logs[program]
    ids = lackey.pages(log)
    assert len(ids) > 1_000_000, f"{program}: only {len(ids)} requests recorded"
    og = workdir / f"{program}-python.oracleGeneral"
    oracle_general.write(og, ids)
    if memvisor_cli.has_convert():
        converted = oracle_general.read(workdir / f"{program}.oracleGeneral")
        mine = oracle_general.read(og)
        assert len(converted) == len(mine)
        assert np.array_equal(converted["id"], mine["id"]), "page ids differ"
        assert np.array_equal(converted["next"], mine["next"]), "next-access fields differ"
    unique = len(np.unique(ids))
    size = max(traces.FRACTIONS[1] * unique, 1)
    size = round(size)
    mv = memvisor_cli.sim(log, "lackey", ["lru", "clock"], [size], threads=2)
    assert (mv.requests, mv.unique_units) == (len(ids), unique)
    for policy in ("lru", "clock"):
        assert mv.misses()[(policy, size)] == lcs_runner.run_one(og, policy, size).misses
