"""What every command shares: its options' types, the wrapper that turns errors into one
line and an exit code, the settings of the commands that talk to the servers, and the
API the job commands call."""

from __future__ import annotations

import functools
import logging
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from hubjobs.errors import (
    INTERNAL_ERROR,
    INVALID_SETTINGS,
    HubJobsError,
    InvalidInput,
    describe_validation_errors,
)
from hubjobs.home import PROFILE_FILE, holds_stack, home_named, home_now, recorded
from hubjobs.observability.logs import handler_for, log_failure
from starter.cli.output import error_line, errors_as_json, exit_code_of

if TYPE_CHECKING:
    # Not before a command needs them: a job command loads neither (it calls the API).
    from hubjobs.settings import Settings
    from starter.cli.remote import Api

log = logging.getLogger("hubjobs.cli")

R = TypeVar("R")


JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]


def _scope_option(what: str, label: str) -> Any:
    help_text = f"{label} (default: HUBJOBS_{what.upper()}, else the demo's profile)."
    return typer.Option(f"--{what}", help=help_text, show_default=False)


WorkspaceOpt = Annotated[uuid.UUID | None, _scope_option("workspace", "Workspace id")]
ActorOpt = Annotated[uuid.UUID | None, _scope_option("actor", "Acting user's id")]


LOG_FILE = "hubjobs.log"


class StackLog(logging.FileHandler):
    """The command's log file in its state folder, written only once that folder is there
    (named by HUBJOBS_HOME, or a stack's, perhaps made by ``up``): outside a stack, nothing."""

    def __init__(self, home: Path, *, named: bool) -> None:
        self.home = home
        self.named = named
        # Opened at once where it may be, as a command's log always was; else at the
        # first line once it may (`up` made the folder).
        super().__init__(home / LOG_FILE, delay=not self.writable())

    def writable(self) -> bool:
        return (self.named and self.home.is_dir()) or holds_stack(self.home)

    def emit(self, record: logging.LogRecord) -> None:
        if self.stream is not None or self.writable():
            super().emit(record)


def _setup_logging(home: Path) -> StackLog:
    """The command's log lines go to HUBJOBS_HOME/hubjobs.log (see StackLog), one JSON
    object a line with HUBJOBS_LOG_JSON (as a worker's and the API's)."""
    handler = StackLog(home, named=home_named())
    json_lines = (os.environ.get("HUBJOBS_LOG_JSON") or "").lower() in ("1", "true", "yes", "on")
    logging.basicConfig(level=logging.INFO, handlers=[handler_for(handler, json_lines=json_lines)])
    # httpx logs each request's URL, which holds the caller's text (a reason, a filter).
    logging.getLogger("httpx").setLevel(logging.WARNING)
    return handler


def check_encoding(kwargs: dict[str, Any]) -> None:
    """Refuses an option whose bytes were not UTF-8: Python hands them over as lone
    surrogates (surrogateescape), which no database or server takes."""
    for name, value in kwargs.items():
        if isinstance(value, str) and any("\ud800" <= ch <= "\udfff" for ch in value):
            raise InvalidInput(
                f"--{name.replace('_', '-')} is not valid UTF-8 text", code="invalid_encoding"
            )


_settings: Settings | None = None


def settings_now() -> Settings:
    """The settings of a command that talks to the servers itself, read once (they are
    slow to read; the job commands read only what remote.py names)."""
    global _settings
    if _settings is None:
        from pydantic import ValidationError

        from hubjobs.settings import Settings

        try:
            _settings = Settings()
        except ValidationError as invalid:  # a HUBJOBS_* variable that does not parse
            problems = describe_validation_errors(invalid.errors(include_input=False))
            raise InvalidInput(
                f"invalid HUBJOBS_* setting: {problems}", code=INVALID_SETTINGS
            ) from None
    return _settings


def command(fn: Callable[..., R]) -> Callable[..., R]:
    """Turns errors into one plain line on stderr and exit code 1 (2 for bad input)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> R:
        errors_as_json(bool(kwargs.get("as_json")))
        home = home_now()
        stack_log = _setup_logging(home)
        try:
            check_encoding(kwargs)
            return fn(*args, **kwargs)
        except HubJobsError as error:
            # The code only: a message is plain, but the log keeps to codes and ids.
            log.info("command %s failed: %s", fn.__name__, error.code)
            error_line(error.message, error.code, error.job_id)
            raise typer.Exit(exit_code_of(error.code)) from None
        except (typer.Exit, typer.Abort, KeyboardInterrupt):
            raise
        except Exception as failure:
            log_failure(log, f"command {fn.__name__} failed", failure)
            logged = stack_log.writable()
            where = f"the detail is in {home / LOG_FILE}" if logged else "no stack to log it in"
            error_line(f"internal error; {where}", INTERNAL_ERROR)
            raise typer.Exit(1) from None

    return wrapper


def actor_of(actor: uuid.UUID | None) -> uuid.UUID:
    """``--actor``, else HUBJOBS_ACTOR, else the demo's profile's (as the job commands)."""
    from starter.cli.remote import scope_id

    return scope_id(actor, "actor", recorded(home_now(), PROFILE_FILE))


def api(workspace: uuid.UUID | None, actor: uuid.UUID | None) -> Api:
    """The HTTP API for the workspace, as the actor the token names (starter/cli/remote.py)."""
    from starter.cli.remote import Api, Target

    return Api(Target.find(workspace, actor))
