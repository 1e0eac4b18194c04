"""Fallback synthetic workloads in numpy, used only when memvisor has no `trace convert`.

They follow the shapes of memvisor's workload specs (``zipf:n=..:alpha=..``, ``loop``,
``uniform``, ``hotset`` with scans) but not their exact random streams: the cross-check only
needs both simulators to see the same requests, which they do, as both read the file written
from these arrays.
"""

from __future__ import annotations

import numpy as np


def parse_spec(spec: str) -> tuple[str, dict[str, str]]:
    kind, *params = spec.split(":")
    return kind, dict(p.split("=", 1) for p in params)


def generate(spec: str) -> np.ndarray:
    """The request ids of a workload spec (kinds: loop, uniform, zipf, hotset)."""
    kind, p = parse_spec(spec)
    n = int(p["n"])
    length = int(p.get("len", 10 * n))
    rng = np.random.default_rng(int(p.get("seed", 1)))
    if kind == "loop":
        return (np.arange(length, dtype=np.uint64) % np.uint64(n)).astype(np.uint64)
    if kind == "uniform":
        return rng.integers(0, n, size=length, dtype=np.uint64)
    if kind == "zipf":
        alpha = float(p.get("alpha", 0.99))
        weights = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** alpha
        cdf = np.cumsum(weights)
        cdf /= cdf[-1]
        ranks = np.minimum(np.searchsorted(cdf, rng.random(length), side="right"), n - 1)
        ids = rng.permutation(n).astype(np.uint64)  # popular ids are not contiguous
        return ids[ranks]
    if kind == "hotset":
        hot = min(max(round(float(p.get("hot", 0.1)) * n), 1), n - 1)
        hot_prob = float(p.get("hot-prob", 0.9))
        scan_every = int(p.get("scan-every", 0))
        scan_len = int(p.get("scan-len", n - hot))
        is_hot = rng.random(length) < hot_prob
        draws = np.where(
            is_hot, rng.integers(0, hot, size=length), rng.integers(hot, n, size=length)
        ).astype(np.uint64)
        if not scan_every:
            return draws
        out, cursor, i = [], 0, 0
        while sum(len(a) for a in out) < length:
            out.append(draws[i : i + scan_every])
            i += scan_every
            scan = hot + (cursor + np.arange(scan_len)) % (n - hot)
            cursor = (cursor + scan_len) % (n - hot)
            out.append(scan.astype(np.uint64))
        return np.concatenate(out)[:length]
    raise ValueError(f"no fallback generator for workload kind {kind!r}")
