"""What a job kind is, declared once in its kind module: its name, payload and result
models, how a start is checked and (by its first attempt) its items snapshotted, its
retention, attempts, priority and expire hook. Its workflow and activities live in
``workflows/<name>.py`` and ``activities/<name>.py`` and name it
(``@kind_workflow(KIND)``, ``kind = KIND``); the worker finds them there from the
registry. Everything else (the read-model row, status moves, retries, cancellation,
progress, search attributes, retention) is the shared lifecycle's.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Generic, Self, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticSerializationError, to_json
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy.ext.asyncio import AsyncConnection

from hubjobs.errors import (
    INVALID_SETTINGS,
    InvalidInput,
    InvalidPayload,
    describe_validation_errors,
)
from hubjobs.readmodel.views import Counters, JobView
from hubjobs.settings import Settings

P = TypeVar("P", bound=BaseModel)
S = TypeVar("S", bound=BaseSettings)

# A kind's own settings (``JobKind.settings``) under the deployment's prefix, so that
# their variables keep the names they had as fields of Settings; as Settings, an empty
# variable is unset and an unknown override is refused.
KIND_SETTINGS = SettingsConfigDict(env_prefix="HUBJOBS_", extra="forbid", env_ignore_empty=True)


class Result(BaseModel):
    """Base of a kind's result: camelCase JSON, as seed 000's results and FHIR use."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class CarriedResult(Result):
    """What a job's workflow returns of a result that grows with the work (an export's
    manifest, a line per file): a summary built from the stored result, bounded whatever
    the job's size, since Temporal fails a payload over 2 MB. The whole result stays in
    the read model."""

    @classmethod
    def of(cls, job: JobView) -> Self:
        raise NotImplementedError


@dataclass(frozen=True)
class NewJob:
    job_id: uuid.UUID
    workspace_id: uuid.UUID
    actor_id: uuid.UUID
    correlation_id: str
    # Set for a retry: the finished job whose failed items the new one runs again.
    source_job_id: uuid.UUID | None = None


@dataclass(frozen=True)
class Prepared:
    """What preparing a job found: how many items it has, and a one-line summary for
    the Temporal UI and the job list."""

    total: int
    summary: str


# Checks the start (raising a typed HubJobsError) in the transaction that inserts the
# job row, so that a refused start leaves nothing behind; returns the job's summary.
# Bounded whatever the job's size: a start returns within a second.
Check = Callable[[AsyncConnection, NewJob, Any], Awaitable[str]]
# Snapshots the job's items, in the transaction of its first attempt that opens it
# (what the items were then is what the job works on); may refuse too (the course was
# trashed since the start), and the job then fails with that code.
Prepare = Callable[[AsyncConnection, NewJob, Any], Awaitable[Prepared]]
# (payload, final counters, what the work handed back) -> the result of a success.
BuildResult = Callable[[Any, Counters, dict[str, Any] | None], Result]
# Removes what an expired job produced (its archive, its files), whatever it ended as.
Expire = Callable[[JobView, Settings], Awaitable[None]]
# (the stored result, the API's own base URL or None) -> the result as callers read it.
ShowResult = Callable[[dict[str, Any], str | None], dict[str, Any]]
# (settings, a finished job of the kind, a file name) -> where the file is, if the job's
# result lists it; None for any other name.
FileOf = Callable[[Settings, JobView, str], "Path | None"]


def items_recorded(job: JobView) -> int:
    """Durable progress of a kind with items: the items whose outcome is recorded."""
    return job.processed


def one_connection(settings: Settings) -> int:
    return 1


@dataclass(frozen=True, kw_only=True)
class JobKind(Generic[P]):
    name: str
    # Shown in summaries, the UI's activity summaries and the CLI.
    title: str
    payload: type[P]
    result: type[Result]
    prepare: Prepare
    build_result: BuildResult
    result_content_type: str = "application/json"
    # The start's own checks and summary; None: none beyond the shared ones, and the
    # kind's title as summary.
    check: Check | None = None
    # None takes the deployment's default (HUBJOBS_RETENTION_HOURS).
    retention: timedelta | None = None
    # Attempts in a row without progress before the job fails; None takes the
    # deployment's default (HUBJOBS_MAX_ACTIVITY_ATTEMPTS).
    max_attempts: int | None = None
    expire: Expire | None = None
    # Removes what a job ended cancelled had produced (an export's files): a cancelled
    # job keeps its work done in the hub, but nothing half made of its own.
    discard: Expire | None = None
    # Temporal's priority key, 1 (first) to 5: interactive kinds ahead of bulk ones.
    priority: int = 3
    # The job's durable progress, as its row shows it: what an attempt that died after
    # committing work moved (only attempts that moved it nothing count against the
    # kind's attempts). Items recorded, by default.
    durable_progress: Callable[[JobView], int] = items_recorded
    # Whether a start of this payload acts on the whole hub, above any workspace (a
    # whole-hub backup): then it is a hub operator's (HUBJOBS_HUB_OPERATORS) besides
    # an administrator's of the job's workspace. None: never.
    hub_wide: Callable[[Any], bool] | None = None
    # Whether `retry` may start a new job over a finished job's failed items.
    retryable_items: bool = False
    # The model of its attempts' cursor (where the next attempt carries on: heartbeat
    # details, the workflow's state); None: its attempts need none.
    cursor: type[BaseModel] | None = None
    # What its workflow returns of a success's result, when the result grows with the
    # work; None: the result itself, which its model bounds.
    carried: type[CarriedResult] | None = None
    # One module holding both its workflow and its activities, for a kind that lives
    # outside workflows/ and activities/ (a kind shipped by tests or another package).
    module: str | None = None
    # The CLI's start command (``hubjobs <command>``: its options are the payload's
    # fields, read from the API's GET /kinds) and its help line; default: the name with
    # dashes, and the title.
    command: str | None = None
    help: str | None = None
    # How callers read a success's result (an export's manifest with absolute URLs);
    # None: as stored.
    show: ShowResult | None = None
    # The files a finished job serves (GET …/files/{name}) and their media type.
    file_of: FileOf | None = None
    file_content_type: str = "application/octet-stream"
    # Its small jobs are done whole: the first attempt, a local activity, does a job its
    # activities' ``fits_whole`` accepts in one transaction (one workflow task).
    whole_when_small: bool = False
    # The kind's own settings, read from the environment (``own_settings``), so that a
    # kind needs no field of the deployment's Settings.
    settings: type[BaseSettings] | None = None
    # Database connections one attempt holds at once: the worker's pool has room for
    # its largest kind's at every activity slot.
    connections_per_attempt: Callable[[Settings], int] = one_connection

    @property
    def workflow_type(self) -> str:
        """The Temporal workflow type, derived from the name (course_tagging ->
        CourseTagging) and written nowhere else."""
        return "".join(part.capitalize() for part in self.name.split("_"))

    @property
    def command_name(self) -> str:
        return self.command or self.name.replace("_", "-")

    def described(self) -> dict[str, Any]:
        """What a client needs to offer the kind's start (GET /kinds): its names, help
        and the payload's JSON schema."""
        return {
            "name": self.name,
            "title": self.title,
            "command": self.command_name,
            "help": self.help or self.title,
            "payload": self.payload.model_json_schema(),
        }

    def own_settings(self, settings: Settings) -> BaseSettings | None:
        """The kind's settings as the environment holds them now, with the deployment's
        values for this kind (``Settings.kind_settings``) in their place."""
        if self.settings is None:
            return None
        try:
            return self.settings(**settings.kind_settings.get(self.name, {}))
        except ValidationError as invalid:
            problems = describe_validation_errors(invalid.errors(include_input=False))
            raise InvalidInput(
                f"invalid HUBJOBS_* setting of kind {self.name}: {problems}", code=INVALID_SETTINGS
            ) from None

    def settings_as(self, model: type[S], settings: Settings) -> S:
        """``own_settings`` as the class the kind declares (its own code's typed view)."""
        own = self.own_settings(settings)
        if not isinstance(own, model):
            raise TypeError(f"{self.name} declares {self.settings!r} as settings, not {model!r}")
        return own

    def shown(self, result: dict[str, Any] | None, base_url: str | None) -> dict[str, Any] | None:
        """The stored result as callers read it."""
        if result is None or self.show is None:
            return result
        return self.show(result, base_url)

    @property
    def workflow_module(self) -> str:
        return self.module or f"workflows.{self.name}"

    @property
    def activities_module(self) -> str:
        return self.module or f"activities.{self.name}"

    def validate(self, raw: dict[str, Any]) -> P:
        """The payload, or ``invalid_payload`` naming where and what (never the value).

        Strictly, as JSON, whatever way it came (the API's body, a client's dict, a
        workflow input through Temporal): no coercion of a boolean or a string to a
        number, nor of a float to an integer (``true`` is not 1 page a file, ``1e3`` is
        not 1000), while what JSON can only carry as text (ids, timestamps) is read
        from its text."""
        try:
            return self.payload.model_validate_json(to_json(raw), strict=True)
        except PydanticSerializationError:
            raise InvalidPayload(f"invalid {self.name} payload: not JSON") from None
        except ValidationError as err:
            # From each error's place and message only: never the input, nor a key that
            # is not a plain name (``describe_validation_errors``).
            problems = describe_validation_errors(err.errors(include_input=False))
            raise InvalidPayload(f"invalid {self.name} payload: {problems}") from None

    def result_of(self, payload: P, counters: Counters, output: dict[str, Any] | None) -> Any:
        """The stored result of a success, as JSON."""
        return self.build_result(payload, counters, output).model_dump(mode="json", by_alias=True)

    @property
    def carried_model(self) -> type[Result]:
        """The model of what its workflow returns as the result (the contract's)."""
        return self.carried or self.result

    def carried_result(self, job: JobView) -> dict[str, Any] | None:
        """What its workflow returns of the job's stored result, as JSON."""
        if job.result is None or self.carried is None:
            return job.result
        return self.carried.of(job).model_dump(mode="json", by_alias=True)
