"""Valgrind lackey logs (``--tool=lackey --trace-mem=yes``) to page-granular request streams.

Each data line is ``I  ADDR,SIZE`` (instruction fetch) or `` L|S|M ADDR,SIZE`` (load, store,
modify), with a hexadecimal address and a decimal size; lines starting with ``==`` are
valgrind's own messages. An access becomes one request per page it touches (pages
``addr // page_size`` to ``(addr + size - 1) // page_size``; a size of 0 touches the first
page), so a request stream is a sequence of page numbers. A modify (``M``) is one access.

This is the same mapping memvisor's lackey reader documents (default: instruction fetches
included, 4096-byte pages), written separately so that the two can be compared.
"""

from __future__ import annotations

from array import array
from pathlib import Path

import numpy as np


def pages(path: Path | str, page_size: int = 4096, instructions: bool = True) -> np.ndarray:
    """The page-number request stream of a lackey log, as a uint64 array."""
    out = array("Q")
    push = out.append
    with open(path, "rb") as f:
        for line in f:
            if line.startswith(b"=="):
                continue
            fields = line.split()
            if not fields:
                continue
            kind = fields[0]
            if kind == b"I":
                if not instructions:
                    continue
            elif kind not in (b"L", b"S", b"M"):
                raise ValueError(f"{path}: unexpected line {line!r}")
            addr_text, _, size_text = fields[1].partition(b",")
            addr = int(addr_text, 16)
            size = int(size_text)
            first = addr // page_size
            last = (addr + max(size, 1) - 1) // page_size
            push(first)
            for page in range(first + 1, last + 1):
                push(page)
    return np.frombuffer(out, dtype=np.uint64) if len(out) else np.zeros(0, dtype=np.uint64)
