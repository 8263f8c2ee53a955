"""The phases of a restore. With ``HUBJOBS_RESTORE_PAUSE_AT`` naming one, a restore
writes ``restore: paused at <phase>`` to stderr there and waits until it is killed: the
fault tests kill it at a known point, never after a time."""

from __future__ import annotations

import logging
import sys
import threading

log = logging.getLogger(__name__)

# In order: a chunk of the largest table sent; one table's keys built; one foreign key
# validated; everything staged before the final transaction; inside it, not committed.
PHASES = ("load", "keys", "validate", "swap", "swapped")


def reached(phase: str, pause_at: str | None) -> None:
    assert phase in PHASES, phase
    log.debug("restore: phase %s", phase)
    if pause_at != phase:
        return
    sys.stderr.write(f"restore: paused at {phase}\n")
    sys.stderr.flush()
    threading.Event().wait()  # until the process is killed
