"""The phases of a restore, and a pause at one of them for the fault tests.

With ``HUBJOBS_RESTORE_PAUSE_AT`` set to a phase's name, a restore that reaches it
writes ``restore: paused at <phase>`` to stderr and waits there until its process is
killed: the tests kill it at a known point, having waited for that line, never for a
time. Unset (always, outside the tests), ``reached`` only logs.
"""

from __future__ import annotations

import logging
import sys
import threading

log = logging.getLogger(__name__)

# In order. load: the tables' COPY under way (a chunk of the largest table sent, its
# rows not committed); keys: one table's keys and indexes built, others maybe not;
# validate: one foreign key validated; swap: everything staged, the final transaction
# not begun; swapped: inside it, the staged schema moved into the live one, not committed.
PHASES = ("load", "keys", "validate", "swap", "swapped")


def reached(phase: str, pause_at: str | None) -> None:
    assert phase in PHASES, phase
    log.debug("restore: phase %s", phase)
    if pause_at != phase:
        return
    sys.stderr.write(f"restore: paused at {phase}\n")
    sys.stderr.flush()
    threading.Event().wait()  # until the process is killed
