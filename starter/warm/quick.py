"""The ``hubjobs`` command: a one-shot ``status`` or ``list`` answered by the stack's
warm worker before the CLI is even imported; any other command line goes to the full
CLI (``starter.cli.main``), unchanged.

Why: the full CLI's imports (pydantic for its settings and views, typer, rich) alone
take longer than such a command may (250 ms); this module imports the stdlib and the
warm starter's protocol only. It sends the command line, its environment and working
directory to the worker serving ``<HUBJOBS_HOME>/starts.sock``, which answers with
exactly what the full command would print, made the full command's way
(starter/warm/server.py): it reads the settings only when the caller's ``HUBJOBS_*``
variables and directory are its own (the same reading, so the same settings), and then
parses the command line with the command's own parser, reads with the same call, and
renders with the command's own functions. So nothing here knows a setting, an option's
type or a layout, and nothing can drift from the full CLI.

Whatever the worker does not answer goes to the full CLI: no worker, other settings, a
usage error or any error (the full CLI says it), ``--help``, ``list --watch``, an answer
not back in time. Plain text for a terminal is answered too: its layout depends on the
terminal, so the request carries what rich decides it from (that stdout is one, its
size, its encoding, the environment), and the worker renders for that terminal."""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from starter.startup import imports_uncollected
from starter.warm.protocol import QUICK, READ_PATIENCE, SOCKET_FILE, line

# Options a quick read never takes, wherever they stand: help, and the list that keeps
# reading. (A value that merely looks like one, as in `--kind --watch`, goes to the
# full CLI too: it is rare, and there it is right.)
NOT_QUICK = ("--help", "--watch", "--interval")
# The longest answer taken: a thousand jobs' table or JSON (a request's own bound,
# MAX_LINE, is for what is sent to the worker).
MAX_ANSWER = 64 << 20


def recognised(args: Sequence[str]) -> bool:
    """A command line a quick read may answer: ``status`` or ``list`` and none of
    ``NOT_QUICK``. The worker parses it with the command's own parser; this only keeps
    away what must not be answered that way."""
    return (
        bool(args) and args[0] in QUICK and not any(arg.startswith(NOT_QUICK) for arg in args[1:])
    )


def request_for(args: Sequence[str]) -> dict[str, object]:
    """What the worker needs to answer as the full command would: the command line, and
    what the command's settings and output depend on: the environment (its ``HUBJOBS_*``
    variables for the settings, the rest for rich's choices, FORCE_COLOR and the like;
    the worker keeps none of it past the call), the working directory, whether stdout
    is a terminal, the terminal's size, stdout's encoding."""
    return {
        "quick": list(args),
        "environ": dict(os.environ),
        "cwd": os.getcwd(),
        "terminal": sys.stdout.isatty(),
        "terminal_size": terminal_size(),
        "encoding": sys.stdout.encoding,
    }


def terminal_size() -> list[int] | None:
    """The terminal's ``[columns, lines]`` where rich would ask for them in this process
    (rich.console.Console.size): the first of stdin, stdout and stderr that is a
    terminal, so a table for stdout is as wide as the full CLI makes it even when stdin
    is the terminal and stdout is not; None when none is. Only the raw answer: which of
    it rich takes (COLUMNS and LINES first, 80×25 for none, …) is rich's own, in the
    worker."""
    for stream, default in ((sys.__stdin__, 0), (sys.__stdout__, 1), (sys.__stderr__, 2)):
        try:
            return list(os.get_terminal_size(_fileno(stream, default)))
        except (AttributeError, ValueError, OSError):  # not a terminal
            continue
    return None


def _fileno(stream: TextIO | None, default: int) -> int:
    """The descriptor rich asks for a standard stream: its own, or the usual one when it
    has none (no stream, a closed or replaced one), as rich.console takes them."""
    try:
        return stream.fileno() if stream is not None else default
    except Exception:  # whatever a stand-in raises, as rich takes it
        return default


def socket_path() -> Path:
    """Where the worker of this home serves. A guess that may name another home's socket
    (say, a lower-case ``hubjobs_home``): that worker's settings then differ from ours,
    and it sends the call back."""
    return Path(os.environ.get("HUBJOBS_HOME") or ".hubjobs") / SOCKET_FILE


def answered(args: Sequence[str]) -> str | None:
    """What the worker answers ``args`` with, or None: the full CLI runs them."""
    path = socket_path()
    if not recognised(args) or not path.is_socket():
        return None
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(READ_PATIENCE)
            conn.connect(str(path))
            conn.sendall(line(request_for(args)))
            with conn.makefile("rb") as stream:
                raw = stream.readline(MAX_ANSWER)
        answer = json.loads(raw)
    except (OSError, ValueError):  # no worker, a dead one, too slow, not an answer
        return None
    printed = answer.get("stdout") if isinstance(answer, dict) else None
    return printed if isinstance(printed, str) and _writable(printed) else None


def _writable(printed: str) -> bool:
    """Whether stdout takes the text (not, say, a title's CJK on a latin-1 stdout: the
    full CLI then fails its own way)."""
    try:
        printed.encode(sys.stdout.encoding, sys.stdout.errors or "strict")
    except (UnicodeError, LookupError):
        return False
    return True


def main() -> None:
    printed = answered(sys.argv[1:])
    if printed is None:
        with imports_uncollected():
            from starter.cli import main as full_cli
        full_cli()
        return
    sys.stdout.write(printed)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
