"""A command run on a real pseudo-terminal of a fixed size: its stdout and stderr are the
terminal (stdin is not: rich then takes the size from stdout, as in a pipeline that
ends on a terminal), and what it wrote is every byte read from the terminal's other
side until the command and all its children have closed it."""

from __future__ import annotations

import errno
import fcntl
import os
import pty
import select
import struct
import subprocess
import termios
from collections.abc import Sequence
from dataclasses import dataclass

# A bound on a command that hangs, so a broken run fails rather than blocks the suite;
# the read ends when the command closes the terminal, never after a set time.
HUNG = 120.0


@dataclass(frozen=True)
class OnTerminal:
    code: int
    written: bytes


def run_on_terminal(
    argv: Sequence[str], env: dict[str, str], cwd: str, *, columns: int, lines: int
) -> OnTerminal:
    """Runs ``argv`` with stdout and stderr on a ``columns`` × ``lines`` terminal."""
    master, slave = pty.openpty()
    try:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", lines, columns, 0, 0))
        child = subprocess.Popen(
            list(argv), env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave
        )
    finally:
        os.close(slave)  # the child's copies are the only ones left: EOF when it is done
    try:
        written = _read_to_end(master)
    finally:
        os.close(master)
    return OnTerminal(child.wait(timeout=HUNG), written)


def _read_to_end(master: int) -> bytes:
    """Everything written to the terminal; Linux says EIO once no one holds it open."""
    chunks: list[bytes] = []
    while True:
        ready, _, _ = select.select([master], [], [], HUNG)
        assert ready, "the command wrote nothing and did not end"
        try:
            chunk = os.read(master, 65536)
        except OSError as err:
            if err.errno != errno.EIO:
                raise
            return b"".join(chunks)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
