"""Runs the memvisor binary: `memvisor sim` sweeps and `memvisor trace convert`.

The binary is ``$MEMVISOR`` if set, else ``target/release/memvisor`` of this repository (built
with ``cargo build --release -p memvisor`` if missing, see :func:`binary`).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path


REPO = Path(__file__).resolve().parents[2]


@lru_cache(maxsize=None)
def binary() -> Path:
    """The memvisor executable, built (release) if it does not exist yet."""
    env = os.environ.get("MEMVISOR")
    if env:
        return Path(env)
    path = REPO / "target" / "release" / "memvisor"
    if not path.exists():
        subprocess.run(
            ["cargo", "build", "--release", "--quiet", "-p", "memvisor"], cwd=REPO, check=True
        )
    return path


def run(args: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    """Runs memvisor with `args`; raises with its stderr if it fails."""
    proc = subprocess.run(
        [str(binary()), *args], capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        raise RuntimeError(f"memvisor {' '.join(args)} failed:\n{proc.stderr}")
    return proc


@dataclass
class SimResult:
    """A parsed `memvisor sim --out r.json`, plus the wall time of the whole process."""

    report: dict
    wall_seconds: float

    @property
    def requests(self) -> int:
        return self.report["requests"]

    @property
    def unique_units(self) -> int:
        return self.report["unique_units"]

    def misses(self) -> dict[tuple[str, int], int]:
        """(policy, size) -> misses."""
        return {(r["policy"], r["size"]): r["misses"] for r in self.report["rows"]}

    def row(self, policy: str, size: int) -> dict:
        for r in self.report["rows"]:
            if r["policy"] == policy and r["size"] == size:
                return r
        raise KeyError((policy, size))


def sim(
    trace: Path | str,
    fmt: str | None,
    policies: list[str],
    sizes: list[int],
    threads: int | None = None,
) -> SimResult:
    """`memvisor sim` on a trace file; OPT runs only if `opt` is among `policies`."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        args = ["sim", "--trace", str(trace)]
        if fmt:
            args += ["--format", fmt]
        args += ["--policy", ",".join(policies), "--size", ",".join(map(str, sizes))]
        args += ["--no-opt", "--out", str(out), "-q"]
        if threads:
            args += ["--threads", str(threads)]
        start = time.perf_counter()
        run(args)
        wall = time.perf_counter() - start
        return SimResult(json.loads(out.read_text()), wall)


def convert(source_args: list[str], out: Path | str) -> None:
    """`memvisor trace convert SOURCE --to oracle-general --output OUT`; `source_args` is
    ``["--workload", SPEC]`` or ``["--trace", FILE, "--format", F]``."""
    run(["trace", "convert", *source_args, "--to", "oracle-general", "--output", str(out)])
