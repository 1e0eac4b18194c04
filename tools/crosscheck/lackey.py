"""Valgrind lackey logs (``--tool=lackey --trace-mem=yes``) to page-granular request streams.

Lackey writes one access per line: ``I  ADDR,SIZE`` (instruction fetch) or `` L ADDR,SIZE``,
`` S ...``, `` M ...`` (load, store, modify), with the hexadecimal address starting in column 3
and a decimal size; lines starting with ``==`` are valgrind's own messages. An access becomes
one request per page it touches (pages ``addr // page_size`` to ``(addr + size - 1) //
page_size``; a size of 0 touches the first page), so a request stream is a sequence of page
numbers. A modify (``M``) is one access.

This is the mapping memvisor's lackey reader documents (default: instruction fetches included,
4096-byte pages), written separately here so that the two can be compared. The parser is
vectorized with numpy (a log of 10M lines takes a few seconds) and reads lackey's exact layout
only; anything else is an error.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

NL, SPACE, COMMA, EQUALS = (ord(c) for c in "\n ,=")
ADDR_COLUMN = 3  # "I  04222cac,3" and " L 04222cac,8": the address starts at column 3
MAX_HEX_DIGITS = 16
MAX_SIZE_DIGITS = 7  # memvisor's reader rejects sizes above 1 MiB (7 digits)
CHUNK = 1 << 20  # lines per vectorized step, to bound the temporary arrays


def _digit_table(digits: str, base_values: range) -> np.ndarray:
    table = np.full(256, 255, dtype=np.uint64)
    for ch, v in zip(digits, base_values):
        table[ord(ch)] = v
        table[ord(ch.upper())] = v
    return table


HEX = _digit_table("0123456789abcdef", range(16))
DEC = _digit_table("0123456789", range(10))


def _numbers(data, begin, end, width, table, base, path) -> np.ndarray:
    """The numbers written in data[begin[i]:end[i]] (right-aligned into `width` digits)."""
    length = end - begin
    if (length < 1).any() or (length > width).any():
        i = int(np.flatnonzero((length < 1) | (length > width))[0])
        raise ValueError(f"{path}: bad number field at byte {begin[i]}")
    pos = end[:, None] - width + np.arange(width)  # the `width` bytes before each end
    present = pos >= begin[:, None]
    digits = table[data[np.where(present, pos, 0)]]
    digits[~present] = 0
    if (digits == 255).any():
        i = int(np.flatnonzero((digits == 255).any(axis=1))[0])
        raise ValueError(f"{path}: bad digit in field at byte {begin[i]}")
    value = np.zeros(len(begin), dtype=np.uint64)
    for k in range(width):
        value = value * np.uint64(base) + digits[:, k]
    return value


def pages(path: Path | str, page_size: int = 4096, instructions: bool = True) -> np.ndarray:
    """The page-number request stream of a lackey log, as a uint64 array."""
    data = np.fromfile(str(path), dtype=np.uint8)
    if len(data) and data[-1] != NL:
        data = np.append(data, np.uint8(NL))
    ends = np.flatnonzero(data == NL)
    starts = np.concatenate(([0], ends[:-1] + 1)).astype(np.int64)
    keep = ends > starts  # not blank
    keep[keep] = data[starts[keep]] != EQUALS  # not a valgrind message
    starts, ends = starts[keep], ends[keep]
    if len(starts) == 0:
        return np.zeros(0, dtype=np.uint64)
    if (ends - starts <= ADDR_COLUMN).any():
        raise ValueError(f"{path}: short line at byte {starts[ends - starts <= ADDR_COLUMN][0]}")

    kind, mode, gap = data[starts], data[starts + 1], data[starts + 2]
    fetch = (kind == ord("I")) & (mode == SPACE)
    access = (kind == SPACE) & np.isin(mode, [ord("L"), ord("S"), ord("M")])
    bad = ~(fetch | access) | (gap != SPACE)
    if bad.any():
        at = int(starts[bad][0])
        line = bytes(data[at : at + 40]).split(b"\n")[0]
        raise ValueError(f"{path}: not a lackey access line at byte {at}: {line!r}")
    if not instructions:
        starts, ends = starts[access], ends[access]

    # Each kept line has exactly one comma; commas of valgrind messages fall outside them.
    commas = np.flatnonzero(data == COMMA)
    line = np.searchsorted(starts, commas, side="right") - 1
    inside = line >= 0
    inside[inside] = commas[inside] < ends[line[inside]]
    commas, line = commas[inside], line[inside]
    if len(commas) != len(starts) or (line != np.arange(len(starts))).any():
        raise ValueError(f"{path}: every access line needs exactly one comma")

    out = []
    for lo in range(0, len(starts), CHUNK):
        s, c, e = starts[lo : lo + CHUNK], commas[lo : lo + CHUNK], ends[lo : lo + CHUNK]
        addr = _numbers(data, s + ADDR_COLUMN, c, MAX_HEX_DIGITS, HEX, 16, path)
        size = _numbers(data, c + 1, e, MAX_SIZE_DIGITS, DEC, 10, path)
        first = addr // np.uint64(page_size)
        last = (addr + np.maximum(size, np.uint64(1)) - np.uint64(1)) // np.uint64(page_size)
        count = (last - first + np.uint64(1)).astype(np.int64)
        # One request per page: first, first + 1, ..., last for each access, in order.
        offset = np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)
        out.append(np.repeat(first, count) + offset.astype(np.uint64))
    return np.concatenate(out)
