"""What a command prints: whole values as text or JSON, a progress bar on a terminal,
and errors as one plain line on stderr with their exit code (2 for what the caller
got wrong, 1 otherwise). rich is imported on first use: `--json` never loads it."""

from __future__ import annotations

import functools
import json
import sys
import uuid
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING, Any

from hubjobs.errors import IdempotencyKeyReused, UnknownKind
from hubjobs.readmodel.status import FINAL_STATUSES, JobStatus, status_label

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
    from rich.table import Table

    from starter.cli.remote import Api

Job = dict[str, Any]


# Off a terminal (piped, logged) nothing is cut to 80 columns: ids, links and paths are
# pasted from there. Tables take the width their values need, not this one.
UNBOUNDED_WIDTH = 100_000


def console_on(
    file: IO[str] | None = None, *, stderr: bool = False, environ: Mapping[str, str] | None = None
) -> Console:
    """A console as commands print with: a terminal or not as rich decides (from the
    file and the environment (``environ``; default this process's): FORCE_COLOR,
    TTY_COMPATIBLE, …), unbounded off one."""
    from rich.console import Console

    console = Console(file=file, stderr=stderr, _environ=environ)
    if not console.is_terminal:
        console = Console(file=file, stderr=stderr, width=UNBOUNDED_WIDTH, _environ=environ)
    return console


@functools.cache
def _console(stderr: bool) -> Console:
    _replacing(sys.stderr if stderr else sys.stdout)
    return console_on(stderr=stderr)


def _replacing(stream: IO[str]) -> None:
    """A stream whose encoding cannot take what rich draws on a terminal (the "…" of a
    cell cut to its column) gets "?" for it, not a failed command: rich picks ASCII
    borders for such a stream, but not an ASCII ellipsis."""
    try:
        "…".encode(getattr(stream, "encoding", None) or "utf-8")
    except (UnicodeEncodeError, LookupError):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="replace")


def out() -> Console:
    """The console of what a command prints as text (rich, imported on first use)."""
    return _console(False)


def err() -> Console:
    """The console of progress bars and error lines."""
    return _console(True)


def moment(value: Any) -> str:
    """A time as a table shows it: 2026-12-03T08:40:15.123456Z as 2026-12-03 08:40:15,
    nothing for none."""
    return str(value).replace("T", " ")[:19] if value else ""


CALLER_CODES = frozenset({UnknownKind.code, IdempotencyKeyReused.code})

_json_errors = False


def errors_as_json(on: bool) -> None:
    """With ``--json`` an error is ``{"error": {"code", "message"}}`` on stderr, and
    ``job_id`` when it names a job (as the API's error body)."""
    global _json_errors
    _json_errors = on


def error_line(message: str, code: str, job_id: uuid.UUID | None = None) -> None:
    if _json_errors:
        detail = {"code": code, "message": message}
        if job_id is not None:
            detail["job_id"] = str(job_id)
        sys.stderr.write(json.dumps({"error": detail}) + "\n")
        return
    err().print(
        f"error: {message} [{code}]",
        markup=False,
        highlight=False,
        soft_wrap=True,  # one line, however long, whatever the terminal's width
    )


def exit_code_of(code: str) -> int:
    return 2 if code.startswith("invalid") or code in CALLER_CODES else 1


def json_text(value: Any) -> str:
    return json.dumps(value, indent=2) + "\n"


def print_json(value: Any) -> None:
    sys.stdout.write(json_text(value))


def show(shown: str | RenderableType) -> None:
    """Prints what a command shows: text (JSON) as it is, a table on ``out()``."""
    if isinstance(shown, str):
        sys.stdout.write(shown)
    else:
        out().print(shown)


def status_shown(job: Job) -> str:
    """A job's status with its failed items, if any: ``succeeded (10 failed)``."""
    return status_label(job["status"], int(job.get("failed") or 0))


def job_shown(job: Job, as_json: bool) -> str | Table:
    """A job as a command shows it: JSON, or a table of its fields."""
    if as_json:
        return json_text(job)
    from rich.table import Table

    table = Table(show_header=False, box=None)
    for key, value in job.items():
        if key == "status":
            value = status_shown(job)
        if value is not None:
            table.add_row(key, json.dumps(value) if isinstance(value, dict) else str(value))
    return table


def print_job(job: Job, as_json: bool) -> None:
    show(job_shown(job, as_json))


def is_final(job: Job) -> bool:
    return JobStatus(job["status"]) in FINAL_STATUSES


def follow(api: Api, job: Job, *, show_bar: bool) -> Job:
    """Follows the job's events to its end (a progress bar on a terminal): its record."""
    if is_final(job):
        return api.get(job["id"])
    if not show_bar:
        for _ in api.events(job["id"]):
            pass
        return api.get(job["id"])
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description}", markup=False),
        BarColumn(bar_width=32),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err(),
    ) as bar:
        task = bar.add_task(job["kind"], total=job["total"] or None)
        for current in api.events(job["id"]):
            bar.update(
                task,
                total=current["total"] or None,
                completed=current["processed"],
                description=f"{current['kind']} ({status_shown(current)})",
            )
            job = current
    if job.get("progress_message"):
        err().print(job["progress_message"], markup=False, highlight=False)
    return api.get(job["id"])


# A wrapping column's least width, however narrow the console.
WRAP_MIN_WIDTH = 12


class FittedTable:
    """Rows as a table as wide as the console it is printed on: on a narrow one,
    columns are left out (the last of KEPT first), never cut; ids (an ``id`` column)
    fold whole onto two lines rather than lose characters; WRAPS wraps."""

    KEPT: tuple[str, ...] = ()
    SHOWN: tuple[str, ...] = ()
    WRAPS = ""

    def __init__(self, rows: list[dict[str, str]]) -> None:
        self.rows = rows

    def fitting(self, width: int) -> list[str]:
        """The columns shown at ``width``: each one's widest cell and 3 for its padding
        and border, the wrapping one at least WRAP_MIN_WIDTH wide."""
        shown: list[str] = []
        used = 1
        for name in self.KEPT:
            widest = max([len(name), *(len(row[name]) for row in self.rows)])
            need = min(widest, WRAP_MIN_WIDTH) if name == self.WRAPS else widest
            if used + need + 3 > width and shown:
                break
            shown.append(name)
            used += need + 3
        return shown

    def table(self, width: int) -> Table:
        from rich.table import Table
        from rich.text import Text

        shown = set(self.fitting(width))
        names = [name for name in self.SHOWN if name in shown]
        table = Table()
        for name in names:
            # An id too wide for the whole terminal folds onto two lines, never cut.
            table.add_column(
                name, no_wrap=name != self.WRAPS, overflow="fold" if name == "id" else "ellipsis"
            )
        for row in self.rows:
            # Cells are the hub's users' text (titles, reasons): text, never markup.
            table.add_row(*(Text(row[name]) for name in names))
        return table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.table(options.max_width)
