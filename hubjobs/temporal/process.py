"""Ending a process that held a Temporal client: its Rust runtime threads can abort the
process during interpreter finalization after the work succeeded (temporalio/sdk-python
#300), so commands and the worker flush, shut logging down and leave with ``os._exit``.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import NoReturn

# The exit code of a process that did not stop within its bound and was ended.
STUCK_EXIT = 70


def run_and_exit(main: Callable[[], object]) -> NoReturn:
    try:
        main()
        code = 0
    except SystemExit as exit_:
        if exit_.code is None or isinstance(exit_.code, int):
            code = exit_.code or 0
        else:
            sys.stderr.write(f"{exit_.code}\n")
            code = 1
    except KeyboardInterrupt:
        code = 130
    except Exception:
        logging.getLogger(__name__).exception("exiting on an unexpected error")
        code = 1
    exit_now(code)


def exit_now(code: int) -> NoReturn:
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(code)


def exit_within(seconds: float, what: str) -> threading.Timer:
    """Ends the process with STUCK_EXIT unless it has ended within ``seconds``: a worker's
    shutdown waits for its workflow tasks, and one stuck in workflow code (past the
    SDK's deadlock detector, its thread cannot be stopped) would hold it for good."""

    def end() -> None:
        logging.getLogger(__name__).error("%s took longer than %.0f s: exiting", what, seconds)
        exit_now(STUCK_EXIT)

    timer = threading.Timer(seconds, end)
    timer.daemon = True
    timer.start()
    return timer
