"""The start command of each kind the API serves (``hubjobs tag-course``, ``backup``,
``export``, and any kind declared elsewhere), built from GET /kinds: a command a kind,
an option a payload field (``--root-page`` for ``root_page_id``, its type, bounds and
help from the field's JSON Schema), beside the options every start takes. A field whose
schema says ``x-profile-default`` defaults to the profile's value of that name."""

from __future__ import annotations

import inspect
import json
import uuid
from typing import Annotated, Any

import typer
from typer.models import CommandInfo

from hubjobs.domain.text import check_correlation_id, check_idempotency_key
from hubjobs.errors import InvalidInput
from hubjobs.home import PROFILE_FILE, home_now, recorded
from starter.cli.common import ActorOpt, JsonOpt, WorkspaceOpt, command
from starter.cli.jobs import NotifyUrlOpt, start_job

# The options every start takes, as (parameter, annotation, default).
COMMON: list[tuple[str, Any, Any]] = [
    ("workspace", WorkspaceOpt, None),
    ("actor", ActorOpt, None),
    (
        "idempotency_key",
        Annotated[str | None, typer.Option(help="Same key, same job.")],
        None,
    ),
    ("correlation_id", Annotated[str | None, typer.Option(help="Carried into logs.")], None),
    ("notify_url", NotifyUrlOpt, None),
    ("wait", Annotated[bool, typer.Option("--wait", help="Wait for the job to finish.")], False),
    ("as_json", JsonOpt, False),
]


def _alternative(schema: dict[str, Any]) -> dict[str, Any]:
    """A field's schema without its ``null`` alternative (an optional field's)."""
    options = [s for s in schema.get("anyOf", []) if s.get("type") != "null"]
    return (
        {**options[0], **{k: v for k, v in schema.items() if k != "anyOf"}} if options else schema
    )


def _type_of(schema: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The option's Python type and typer's bounds for a field's schema; what a command
    line cannot hold plainly (objects, lists) is JSON text."""
    kind, bounds = schema.get("type"), {}
    if kind == "integer" or kind == "number":
        bounds = {"min": schema.get("minimum"), "max": schema.get("maximum")}
        return (int if kind == "integer" else float), {
            k: v for k, v in bounds.items() if v is not None
        }
    if kind == "boolean":
        return bool, {}
    if kind == "string":
        return (uuid.UUID if schema.get("format") == "uuid" else str), {}
    return str, {}


def _field_option(field: str, schema: dict[str, Any], required: bool) -> tuple[Any, Any, bool]:
    """The annotation and default of a field's option, and whether its value is JSON."""
    schema = _alternative(schema)
    python_type, bounds = _type_of(schema)
    flag = flag_of(field, schema)
    help_text = str(schema.get("description") or field.replace("_", " ").capitalize())
    if schema.get("default") is not None:
        help_text += f" (default: {json.dumps(schema['default'])})"
    if python_type is bool:
        flag = f"{flag}/--no-{flag[2:]}"
    option = typer.Option(flag, help=help_text, **bounds)
    by_profile = bool(schema.get("x-profile-default"))
    if required and not by_profile:
        return Annotated[python_type, option], ..., False
    is_json = schema.get("type") not in ("integer", "number", "boolean", "string")
    return Annotated[python_type | None, option], None, is_json


def flag_of(field: str, schema: dict[str, Any]) -> str:
    """A field's option: its ``x-option``, else its name with dashes."""
    return "--" + str(schema.get("x-option") or field.replace("_", "-"))


def _profile_value(field: str, flag: str) -> Any:
    value = recorded(home_now(), PROFILE_FILE).get(field)
    if value is None:
        raise InvalidInput(
            f"no {flag}: pass it, or run `hubjobs demo` (its profile names one)",
            code="invalid_argument",
        )
    return value


def command_of(kind: dict[str, Any]) -> CommandInfo:
    """The kind's start command."""
    schema = kind["payload"]
    required = set(schema.get("required", []))
    fields: dict[str, tuple[str, dict[str, Any], bool]] = {}
    parameters = []
    for index, (field, prop) in enumerate(schema.get("properties", {}).items()):
        annotation, default, is_json = _field_option(field, prop, field in required)
        name = f"field_{index}"
        fields[name] = (field, _alternative(prop), is_json)
        parameters.append((name, annotation, default))
    parameters += COMMON

    def start(**given: Any) -> None:
        payload: dict[str, Any] = {}
        for name, (field, prop, is_json) in fields.items():
            value = given[name]
            if value is None and prop.get("x-profile-default"):
                value = _profile_value(field, flag_of(field, prop))
            if value is None:
                continue
            payload[field] = _json_value(value, field) if is_json else _plain(value)
        keys = {name: given[name] for name in ("idempotency_key", "correlation_id", "notify_url")}
        # Checked here as the API would: a header cannot carry what a key may not hold.
        check_idempotency_key(keys["idempotency_key"])
        check_correlation_id(keys["correlation_id"])
        start_job(
            given["workspace"],
            given["actor"],
            lambda jobs: jobs.start(kind["name"], payload, **keys),
            wait=given["wait"],
            as_json=given["as_json"],
        )

    start.__name__ = kind["command"].replace("-", "_")
    start.__doc__ = kind["help"]
    wrapped = command(start)
    wrapped.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=ann)
            for name, ann, default in parameters
        ]
    )
    wrapped.__annotations__ = {name: ann for name, ann, _ in parameters}
    del wrapped.__wrapped__  # type: ignore[attr-defined]
    return CommandInfo(name=kind["command"], callback=wrapped, help=kind["help"])


def _plain(value: Any) -> Any:
    return str(value) if isinstance(value, uuid.UUID) else value


def _json_value(text: str, field: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        raise InvalidInput(f"{field} must be JSON", code="invalid_argument") from None
