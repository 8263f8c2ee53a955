"""What a job kind is, declared once in its kind module. Its workflow and activities
name it (``@kind_workflow(KIND)``, ``kind = KIND``); everything else (the row, moves,
retries, cancellation, progress) is the shared lifecycle's.
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
from hubjobs.kinds.fields import kind_fields
from hubjobs.readmodel.views import Counters, JobView
from hubjobs.settings import Settings

P = TypeVar("P", bound=BaseModel)
S = TypeVar("S", bound=BaseSettings)

# A kind's own settings under the deployment's prefix, so their variables keep the names
# they had as fields of Settings; an empty one is unset, an unknown override refused.
KIND_SETTINGS = SettingsConfigDict(env_prefix="HUBJOBS_", extra="forbid", env_ignore_empty=True)


class Result(BaseModel):
    """Base of a kind's result: camelCase JSON, as seed 000's results and FHIR use."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class CarriedResult(Result):
    """A bounded summary of a result that grows with the work, for the workflow to return
    (Temporal fails a payload over 2 MB); the whole result stays in the read model."""

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


# Checks the start (raising a HubJobsError) in the row's transaction, bounded whatever the
# job's size; returns the job's summary.
Check = Callable[[AsyncConnection, NewJob, Any], Awaitable[str]]
# Snapshots the job's items in its first attempt's opening transaction; may refuse too.
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
    # The job's durable progress as its row shows it (only attempts that moved it nothing
    # count against the kind's attempts). Items recorded, by default.
    durable_progress: Callable[[JobView], int] = items_recorded
    # Whether a start of this payload acts on the whole hub: then it is a hub operator's
    # too. None: never.
    hub_wide: Callable[[Any], bool] | None = None
    # Whether `retry` may start a new job over a finished job's failed items.
    retryable_items: bool = False
    # The model of its attempts' cursor; None: they need none.
    cursor: type[BaseModel] | None = None
    # What its workflow returns of a result that grows; None: the result itself.
    carried: type[CarriedResult] | None = None
    # One module with its workflow and activities, for a kind outside workflows/ and
    # activities/.
    module: str | None = None
    # The CLI's start command and its help line; default: the name with dashes, the title.
    command: str | None = None
    help: str | None = None
    # How callers read a success's result; None: as stored.
    show: ShowResult | None = None
    # The files a finished job serves (GET …/files/{name}) and their media type.
    file_of: FileOf | None = None
    file_content_type: str = "application/octet-stream"
    # A small job its activities' ``fits_whole`` accepts is done in one transaction.
    whole_when_small: bool = False
    # The kind's own settings, read from the environment (``own_settings``).
    settings: type[BaseSettings] | None = None
    # Database connections one attempt holds at once (the worker sizes its pool by it).
    connections_per_attempt: Callable[[Settings], int] = one_connection

    @property
    def workflow_type(self) -> str:
        """The Temporal workflow type, derived from the name and written nowhere else."""
        return "".join(part.capitalize() for part in self.name.split("_"))

    @property
    def command_name(self) -> str:
        return self.command or self.name.replace("_", "-")

    def described(self) -> dict[str, Any]:
        """What a client needs to offer the kind's start (GET /kinds)."""
        return {
            "name": self.name,
            "title": self.title,
            "command": self.command_name,
            "help": self.help or self.title,
            "payload": self.payload.model_json_schema(),
            "fields": [f.model_dump(exclude_none=True) for f in kind_fields(self)],
        }

    def own_settings(self, settings: Settings) -> BaseSettings | None:
        """The kind's settings from the environment, ``Settings.kind_settings`` first."""
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
        Strictly as JSON, however it came: ``true`` is not 1, ``1e3`` not 1000, while ids
        and timestamps are read from their text."""
        try:
            return self.payload.model_validate_json(to_json(raw), strict=True)
        except PydanticSerializationError:
            raise InvalidPayload(f"invalid {self.name} payload: not JSON") from None
        except ValidationError as err:
            # Each error's place and message only, never the input.
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
