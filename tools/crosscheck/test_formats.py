"""The cross-check's own readers and writers, on small hand-checked inputs."""

from __future__ import annotations

import os

import pytest

try:
    import numpy as np
except ImportError as e:
    if os.environ.get("CI"):
        raise  # in CI the cross-check must run: numpy comes with libcachesim (scripts/install)
    pytest.skip(f"numpy cannot be imported ({e})", allow_module_level=True)

import lackey  # noqa: E402
import oracle_general  # noqa: E402

SAMPLE = (
    "==123== Lackey, an example Valgrind tool\n"
    "==123== Copyright (C) 2002-2024, and GNU GPL'd\n"
    "I  04222cac,3\n"
    " L 04222cac,8\n"
    " S 7ff000398,8\n"
    " M 0421d2c8,4\n"
    "\n"
    "I  00000fff,2\n"  # crosses into page 1
    " L 00001ffe,4096\n"  # pages 1 and 2
    " S 00000010,0\n"  # size 0 still touches its page
    "==123== Counted 1 call to main()\n"
)


def test_lackey_pages(tmp_path):
    log = tmp_path / "t.lackey"
    log.write_text(SAMPLE)
    assert lackey.pages(log).tolist() == [0x4222, 0x4222, 0x7FF000, 0x421D, 0, 1, 1, 2, 0]
    assert lackey.pages(log, instructions=False).tolist() == [0x4222, 0x7FF000, 0x421D, 1, 2, 0]
    assert lackey.pages(log, page_size=8).tolist()[:3] == [0x4222CAC // 8] * 2 + [
        (0x4222CAC + 7) // 8
    ]


@pytest.mark.parametrize("line", ["X  10,1", "I 10,1", " L 10", " L zz,1", " L 10,x"])
def test_lackey_rejects_malformed_lines(tmp_path, line):
    log = tmp_path / "bad.lackey"
    log.write_text(f"I  10,1\n{line}\n")
    with pytest.raises(ValueError):
        lackey.pages(log)


def test_oracle_general_records(tmp_path):
    path = tmp_path / "t.oracleGeneral"
    assert oracle_general.write(path, np.array([1, 2, 1, 3, 2, 1], dtype=np.uint64)) == 6
    assert path.stat().st_size == 6 * 24
    recs = oracle_general.read(path)
    assert recs["time"].tolist() == [0, 1, 2, 3, 4, 5]
    assert recs["id"].tolist() == [1, 2, 1, 3, 2, 1]
    assert recs["size"].tolist() == [1] * 6
    # 1-based number of the next request for the same id (traceConv's convention), -1 = never
    assert recs["next"].tolist() == [3, 5, 6, -1, -1, -1]
    # byte layout: u32 time, u64 id, u32 size, i64 next, little-endian, packed
    assert path.read_bytes()[:24] == bytes.fromhex("00000000" "0100000000000000" "01000000") + (
        3
    ).to_bytes(8, "little")
