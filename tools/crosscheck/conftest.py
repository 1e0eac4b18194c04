"""Shared fixtures of the libCacheSim cross-check: the traces, built once per session."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(scope="session")
def workdir():
    """A scratch directory for the session's traces (a few hundred MB), removed at the end."""
    with tempfile.TemporaryDirectory(prefix="memvisor-crosscheck-") as tmp:
        yield Path(tmp)


@pytest.fixture(scope="session")
def lackey_logs(workdir):
    import traces

    return traces.record_lackey(traces.LACKEY_PROGRAMS, workdir)


@pytest.fixture(scope="session")
def trace_store(workdir, request):
    """name -> Trace, built on first use."""
    import traces

    built = {}

    def get(name: str):
        if name not in built:
            if name in traces.SYNTHETIC:
                built[name] = traces.synthetic_trace(name, workdir)
            else:
                logs = request.getfixturevalue("lackey_logs")
                built[name] = traces.lackey_trace(name, logs[name], workdir)
        return built[name]

    return get
