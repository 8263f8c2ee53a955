"""A command's heavy imports (restore's) without the cyclic garbage collector: nearly every
object an import makes lives as long as the process, and the collector would walk them
again and again as they pile up."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def imports_uncollected() -> Iterator[None]:
    """Imports in the block run with the collector off; what they made is then frozen
    (moved out of the collector's view: it stays for good anyway), and the collector
    back as it was."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()
