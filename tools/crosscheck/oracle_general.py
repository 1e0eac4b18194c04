"""libCacheSim's oracleGeneral trace format, written and read with numpy.

A trace is a sequence of 24-byte little-endian records:

    u32 time, u64 object id, u32 object size, i64 next access

The next-access field follows libCacheSim's converter (traceConv): the 1-based number of the
next request for the same object (request index ``j``, 0-based, is stored as ``j + 1``), or -1
if the object is never requested again. libCacheSim's Belady only compares these values, so
the offset does not matter to it; memvisor's reader converts them back to 0-based indices and
checks that each points after its own request. Every object here has size 1: a cache of N
units holds N objects.

This writer is deliberately independent of memvisor's own (``memvisor trace convert``): the
cross-check feeds libCacheSim files written by both.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

RECORD = np.dtype([("time", "<u4"), ("id", "<u8"), ("size", "<u4"), ("next", "<i8")])
assert RECORD.itemsize == 24
NEVER = -1


def next_accesses(ids: np.ndarray) -> np.ndarray:
    """For each request, the 0-based index of the next request for the same id, or -1."""
    ids = np.asarray(ids, dtype=np.uint64)
    order = np.argsort(ids, kind="stable")  # equal ids keep their request order
    sorted_ids = ids[order]
    same = sorted_ids[1:] == sorted_ids[:-1]
    nxt = np.full(len(ids), NEVER, dtype=np.int64)
    nxt[order[:-1][same]] = order[1:][same]
    return nxt


def records(ids: np.ndarray) -> np.ndarray:
    """The oracleGeneral records of a request sequence: time = index, size 1."""
    ids = np.asarray(ids, dtype=np.uint64)
    out = np.empty(len(ids), dtype=RECORD)
    out["time"] = np.minimum(np.arange(len(ids), dtype=np.uint64), 0xFFFF_FFFF)
    out["id"] = ids
    out["size"] = 1
    nxt = next_accesses(ids)
    out["next"] = np.where(nxt == NEVER, NEVER, nxt + 1)
    return out


def write(path: Path | str, ids: np.ndarray) -> int:
    """Writes `ids` as an oracleGeneral trace; returns the number of records."""
    recs = records(ids)
    recs.tofile(str(path))
    return len(recs)


def read(path: Path | str) -> np.ndarray:
    """All records of an (uncompressed) oracleGeneral trace."""
    data = np.fromfile(str(path), dtype=np.uint8)
    if len(data) % RECORD.itemsize:
        raise ValueError(f"{path}: size {len(data)} is not a multiple of {RECORD.itemsize}")
    return data.view(RECORD)
