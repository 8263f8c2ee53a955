"""A process whose wall clock is off, for real: libfaketime (Debian's ``faketime``)
preloaded, its wall clock moved by an offset and its monotonic clock untouched, as an
NTP step leaves a host's: fixed from the start (``skewed``), or stepped while it runs
(``steppable``, then ``step``)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1")


def skewed(env: dict[str, str], offset: str) -> dict[str, str]:
    """``env`` for a process whose wall clock is ``offset`` off (libfaketime's form:
    "+2h", "-5s")."""
    if not LIBFAKETIME.is_file():
        pytest.fail(f"libfaketime is required at {LIBFAKETIME} (Debian's faketime)")
    return env | {
        "LD_PRELOAD": str(LIBFAKETIME),
        "FAKETIME": offset,
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }


def steppable(env: dict[str, str], clock_file: Path) -> dict[str, str]:
    """``env`` for a process whose wall clock follows the offset written in
    ``clock_file`` (``step``), read again at most a second later: a running process's
    clock stepped, as NTP steps a host's. The offset starts at zero."""
    if not LIBFAKETIME.is_file():
        pytest.fail(f"libfaketime is required at {LIBFAKETIME} (Debian's faketime)")
    step(clock_file, "+0")
    return env | {
        "LD_PRELOAD": str(LIBFAKETIME),
        "FAKETIME_TIMESTAMP_FILE": str(clock_file),
        "FAKETIME_CACHE_DURATION": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }


def step(clock_file: Path, offset: str) -> None:
    """Steps the wall clock of the processes reading ``clock_file`` to ``offset``
    (libfaketime's form: "+2h", "-2h", "+0"), written whole in one step."""
    partial = clock_file.with_suffix(".partial")
    partial.write_text(offset + "\n")
    partial.replace(clock_file)


def clock_offset(env: dict[str, str]) -> float:
    """How far the wall clock of a process started with ``env`` is from this one's."""
    read = subprocess.run(
        [sys.executable, "-c", "import time; print(time.time())"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(read.stdout) - time.time()
