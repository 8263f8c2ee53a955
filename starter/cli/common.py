"""What every command shares: its options' types, the settings it read, the wrapper that
turns errors into one line and an exit code, running a coroutine, and a client scoped
to a workspace and an actor."""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, cast

import typer
from pydantic import ValidationError

from hubjobs.errors import (
    INTERNAL_ERROR,
    HubJobsError,
    InvalidInput,
    describe_validation_errors,
)
from hubjobs.observability.logs import handler_for, log_failure
from hubjobs.settings import Settings
from starter.cli.output import error_line, errors_as_json, exit_code_of
from starter.warm.relay import NotServed, Relay

if TYPE_CHECKING:
    # Not before a command needs them: a call the stack's worker makes (starter/warm)
    # loads neither psycopg nor the SDK here.
    from starter.client import HubJobsClient, WorkspaceJobs

log = logging.getLogger("hubjobs.cli")

R = TypeVar("R")


JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]


WorkspaceOpt = Annotated[
    uuid.UUID | None,
    typer.Option(
        "--workspace",
        help="Workspace id (default: HUBJOBS_WORKSPACE, else the demo's profile).",
        show_default=False,
    ),
]


ActorOpt = Annotated[
    uuid.UUID | None,
    typer.Option(
        "--actor",
        help="Acting user's id (default: HUBJOBS_ACTOR, else the demo's profile).",
        show_default=False,
    ),
]


def _setup_logging(settings: Settings) -> None:
    """The command's log lines go to HUBJOBS_HOME/hubjobs.log, one JSON object a line
    with HUBJOBS_LOG_JSON (as a worker's and the API's)."""
    settings.home.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(settings.home / "hubjobs.log")
    logging.basicConfig(
        level=logging.INFO, handlers=[handler_for(handler, json_lines=settings.log_json)]
    )


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
    """The settings the running command read (once: reading them costs milliseconds)."""
    global _settings
    if _settings is None:
        _settings = Settings()
    return _settings


def command(fn: Callable[..., R]) -> Callable[..., R]:
    """Turns errors into one plain line on stderr and exit code 1 (2 for bad input)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> R:
        global _settings
        errors_as_json(bool(kwargs.get("as_json")))
        try:
            settings = _settings = Settings()
        except ValidationError as invalid:  # a HUBJOBS_* variable that does not parse
            problems = describe_validation_errors(invalid.errors(include_input=False))
            error_line(f"invalid HUBJOBS_* setting: {problems}", "invalid_settings")
            raise typer.Exit(2) from None
        _setup_logging(settings)
        try:
            check_encoding(kwargs)
            return fn(*args, **kwargs)
        except HubJobsError as error:
            # The code only: a message is plain, but the log keeps to codes and ids.
            log.info("command %s failed: %s", fn.__name__, error.code)
            error_line(error.message, error.code)
            raise typer.Exit(exit_code_of(error.code)) from None
        except (typer.Exit, typer.Abort, KeyboardInterrupt):
            raise
        except Exception as failure:
            log_failure(log, f"command {fn.__name__} failed", failure)
            error_line(
                f"internal error; the detail is in {settings.home / 'hubjobs.log'}",
                INTERNAL_ERROR,
            )
            raise typer.Exit(1) from None

    return wrapper


def run(coro: Coroutine[Any, Any, R]) -> R:
    return asyncio.run(coro)


def _default(
    flag: uuid.UUID | None, setting: uuid.UUID | None, key: str, what: str, settings: Settings
) -> uuid.UUID:
    """A flag, else its setting, else the demo's profile; refused when none names one."""
    value = flag or setting
    if value is None:
        recorded = settings.recorded_profile().get(key)
        value = uuid.UUID(recorded) if recorded else None
    if value is None:
        raise InvalidInput(
            f"no {what}: pass --{what}, set HUBJOBS_{what.upper()}, or run `hubjobs demo` "
            "(it writes a profile with its own)",
            code="invalid_argument",
        )
    return value


def root_page_of(flag: uuid.UUID | None, settings: Settings | None = None) -> uuid.UUID:
    """``--root-page``, else the course of the profile ``hubjobs demo`` wrote."""
    settings = settings or settings_now()
    recorded = settings.recorded_profile().get("root_page_id")
    value = flag or (uuid.UUID(recorded) if recorded else None)
    if value is None:
        raise InvalidInput(
            "no course: pass --root-page, or run `hubjobs demo` (its profile names one)",
            code="invalid_argument",
        )
    return value


def actor_of(actor: uuid.UUID | None, settings: Settings | None = None) -> uuid.UUID:
    settings = settings or settings_now()
    return _default(actor, settings.actor, "actor_id", "actor", settings)


def scope_of(
    workspace: uuid.UUID | None, actor: uuid.UUID | None, settings: Settings | None = None
) -> tuple[uuid.UUID, uuid.UUID]:
    """The workspace and actor a command acts as: flags override HUBJOBS_WORKSPACE /
    HUBJOBS_ACTOR, which override the profile ``hubjobs demo`` wrote in HUBJOBS_HOME (of
    ``settings``: by default the command's)."""
    settings = settings or settings_now()
    workspace_id = _default(workspace, settings.workspace, "workspace_id", "workspace", settings)
    return workspace_id, actor_of(actor, settings)


async def _scoped(
    workspace: uuid.UUID | None, actor: uuid.UUID | None
) -> tuple[HubJobsClient, WorkspaceJobs]:
    from starter.client import HubJobsClient

    workspace_id, actor_id = scope_of(workspace, actor)
    client = await HubJobsClient.connect(settings_now())
    return client, client.scope(workspace_id, actor_id)


async def scoped_call(
    workspace: uuid.UUID | None,
    actor: uuid.UUID | None,
    call: Callable[[WorkspaceJobs], Awaitable[R]],
) -> R:
    """``call`` on the jobs of the workspace as the actor sees them: made by the stack's
    worker when one serves this home (starter/warm: warm, it is quick), else here."""
    workspace_id, actor_id = scope_of(workspace, actor)
    try:
        return await call(cast("WorkspaceJobs", Relay(settings_now(), workspace_id, actor_id)))
    except NotServed:
        pass
    client, jobs = await _scoped(workspace_id, actor_id)
    async with client:
        return await call(jobs)
