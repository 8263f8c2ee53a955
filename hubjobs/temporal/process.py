"""Ending a process that held a Temporal client.

The client's Rust runtime threads can outlive interpreter finalization and abort the
process (SIGABRT, "Fatal Python error: PyGILState_Release", temporalio/sdk-python#300)
after the work succeeded. Commands and the worker therefore flush their output, shut
logging down, and leave with ``os._exit`` and the exit code they meant (1, logged, for
an error nothing else caught).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from typing import NoReturn


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
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(code)
