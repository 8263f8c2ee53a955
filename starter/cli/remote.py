"""The job commands' one way to the jobs: the HTTP API, called as any other service calls
it. Each of these is the first found: the address (HUBJOBS_API_URL, the profile's
``api_url``, the API ``hubjobs up`` recorded, the default for a stack's folder); the token
(HUBJOBS_API_TOKEN, the profile's, else one signed here for the actor with
HUBJOBS_API_JWT_SECRET or the stack's secret); the workspace and actor (the flag,
HUBJOBS_WORKSPACE / HUBJOBS_ACTOR, the profile's). A token acts as its subject: an
``--actor`` naming someone else is refused, never sent."""

from __future__ import annotations

import base64
import json
import os
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httpx

from hubjobs.errors import (
    INVALID_SETTINGS,
    ConfigurationError,
    HubJobsError,
    InvalidInput,
    Unavailable,
)
from hubjobs.home import (
    API_FILE,
    DEV_SECRET_FILE,
    PROFILE_FILE,
    holds_stack,
    home_named,
    home_now,
    no_stack,
    recorded,
)

DEFAULT_API_URL = "http://127.0.0.1:8080"
# A call waits at most the API's own budget (30 s) and a little; connecting is quick or
# the API is not there.
TIMEOUT = httpx.Timeout(35.0, connect=3.0)
# An event stream is quiet but for its pings (every 15 s): three missed, it is gone.
STREAM_TIMEOUT = httpx.Timeout(35.0, connect=3.0, read=50.0)
# A stream cut (the API restarted) is opened again, with the last event's id, for this long.
STREAM_RECONNECT_SECONDS = 30.0
SIGNED_TOKEN_SECONDS = 300

Job = dict[str, Any]


def _setting(name: str) -> str | None:
    """A HUBJOBS_* variable; empty means unset, as for the settings."""
    return os.environ.get(f"HUBJOBS_{name}") or None


def _uuid_of(text: str | None, what: str) -> uuid.UUID | None:
    if text is None:
        return None
    try:
        return uuid.UUID(text)
    except ValueError:
        raise InvalidInput(f"{what} is not a UUID", code=INVALID_SETTINGS) from None


def subject_of(token: str) -> str | None:
    """The ``sub`` a JWT claims (read, not verified: the API verifies it)."""
    try:
        part = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    except (IndexError, ValueError):
        return None
    subject = claims.get("sub") if isinstance(claims, dict) else None
    return subject if isinstance(subject, str) else None


def sign(secret: str, actor: uuid.UUID, *, ttl_seconds: int) -> str:
    """A token for ``actor`` signed with the shared secret (HS256), with the audience and
    issuer the API checks (HUBJOBS_API_JWT_AUDIENCE / _ISSUER, ``hubjobs`` for each
    unset, as starter/api/tokens.py has them)."""
    import jwt

    now = int(time.time())
    claims: dict[str, Any] = {
        "sub": str(actor),
        "iat": now,
        "exp": now + ttl_seconds,
        "iss": _setting("API_JWT_ISSUER") or "hubjobs",
        "aud": _setting("API_JWT_AUDIENCE") or "hubjobs",
    }
    return jwt.encode(claims, secret, algorithm="HS256")


@dataclass(frozen=True)
class Target:
    """The API a command calls, the token it sends and the workspace it acts in."""

    url: str
    token: str
    workspace: uuid.UUID

    @classmethod
    def find(cls, workspace: uuid.UUID | None, actor: uuid.UUID | None) -> Target:
        home = home_now()
        url = api_url()
        profile = recorded(home, PROFILE_FILE)
        # The workspace first: a command naming neither is told of it before the actor.
        workspace_id = scope_id(workspace, "workspace", profile)
        return cls(url=url, token=_token(profile, actor, home), workspace=workspace_id)


def api_url() -> str:
    """The API's address (the first of the module's list that names one). With none
    named and no stack found, ``NoStack``: the default address is the stack's API's."""
    home = home_now()
    url = (
        _setting("API_URL")
        or recorded(home, PROFILE_FILE).get("api_url")
        or recorded(home, API_FILE).get("url")
    )
    if not url and not holds_stack(home):
        raise no_stack(home, named=home_named(), instead="HUBJOBS_API_URL")
    return str(url or DEFAULT_API_URL).rstrip("/")


def unreachable(url: str) -> Unavailable:
    return Unavailable(f"the API at {url} did not answer (is `hubjobs up` running?)")


def served_kinds(url: str) -> list[dict[str, Any]]:
    """The kinds the API serves, each with its command, help and payload schema
    (GET /kinds: public, so no token is made for it)."""
    try:
        response = httpx.get(f"{url}/kinds", timeout=TIMEOUT)
    except httpx.TransportError:
        raise unreachable(url) from None
    if response.status_code >= 400:
        raise error_of(response)
    kinds: list[dict[str, Any]] = response.json()["kinds"]
    return kinds


def scope_id(flag: uuid.UUID | None, what: str, profile: Mapping[str, Any]) -> uuid.UUID:
    """The workspace or actor a command acts as: ``--<what>``, else HUBJOBS_<WHAT>, else
    the profile's ``<what>_id``; refused when none names one."""
    value = (
        flag
        or _uuid_of(_setting(what.upper()), f"HUBJOBS_{what.upper()}")
        or _uuid_of(profile.get(f"{what}_id"), f"the profile's {what}")
    )
    if value is None:
        raise InvalidInput(
            f"no {what}: pass --{what}, set HUBJOBS_{what.upper()}, or run `hubjobs demo` "
            "(it writes a profile with its own)",
            code="invalid_argument",
        )
    return value


def _token(profile: Mapping[str, Any], actor: uuid.UUID | None, home: Path) -> str:
    token = _setting("API_TOKEN") or profile.get("api_token")
    if token:
        subject = subject_of(token)
        if actor is not None and subject != str(actor):
            raise InvalidInput(
                "--actor names someone the API token does not: a token acts as its subject",
                code="invalid_argument",
            )
        return str(token)
    actor = scope_id(actor, "actor", profile)
    secret = _setting("API_JWT_SECRET")
    if secret is None and (home / DEV_SECRET_FILE).is_file():
        secret = (home / DEV_SECRET_FILE).read_text().strip()
    if secret is None:
        raise ConfigurationError(
            "no API token: `hubjobs login --token …`, set HUBJOBS_API_TOKEN, or run "
            "`hubjobs up` (the embedded stack's secret signs one)"
        )
    return sign(secret, actor, ttl_seconds=SIGNED_TOKEN_SECONDS)


def error_of(response: httpx.Response) -> HubJobsError:
    """The API's error answer as the error it names: its code, message and job if any."""
    try:
        detail = response.json()["error"]
        job_id = detail.get("job_id")
        return HubJobsError(
            str(detail["message"]),
            code=str(detail["code"]),
            job_id=None if job_id is None else uuid.UUID(str(job_id)),
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return Unavailable(f"the API answered {response.status_code} without an error body")


class Api:
    """The workspace's jobs and schedules through the HTTP API, as one actor."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.base = f"/workspaces/{target.workspace}"
        self.http = httpx.Client(
            base_url=target.url,
            # The surface the audit trail records of what these calls do.
            headers={"Authorization": f"Bearer {target.token}", "X-Hubjobs-Surface": "cli"},
            timeout=TIMEOUT,
        )

    def __enter__(self) -> Api:
        return self

    def __exit__(self, *_: object) -> None:
        self.http.close()

    def call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        headers: Mapping[str, str | None] | None = None,
    ) -> Any:
        """The call's JSON answer (None for 204), or the error it answered."""
        try:
            response = self.http.request(
                method,
                self.base + path,
                params={k: v for k, v in (params or {}).items() if v is not None},
                json=body,
                headers={k: v for k, v in (headers or {}).items() if v is not None},
            )
        except httpx.TransportError:
            raise unreachable(self.target.url) from None
        if response.status_code >= 400:
            raise error_of(response)
        return None if response.status_code == 204 else response.json()

    def start(
        self,
        kind: str,
        payload: Mapping[str, Any],
        *,
        idempotency_key: str | None = None,
        correlation_id: str | None = None,
        notify_url: str | None = None,
    ) -> Job:
        job: Job = self.call(
            "POST",
            f"/jobs/{kind}",
            body=dict(payload),
            params={"notify_url": notify_url},
            headers={"Idempotency-Key": idempotency_key, "X-Correlation-Id": correlation_id},
        )
        return job

    def get(self, job_id: uuid.UUID | str) -> Job:
        return cast(Job, self.call("GET", f"/jobs/{job_id}/record"))

    def list(self, **filters: Any) -> dict[str, Any]:
        return cast(dict[str, Any], self.call("GET", "/jobs", params=filters))

    def audit(self, **filters: Any) -> dict[str, Any]:
        return cast(dict[str, Any], self.call("GET", "/audit", params=filters))

    def overview(self, **filters: Any) -> dict[str, Any]:
        return cast(dict[str, Any], self.call("GET", "/overview", params=filters))

    def workers(self) -> dict[str, Any]:
        return cast(dict[str, Any], self.call("GET", "/workers"))

    def items(self, job_id: uuid.UUID, **filters: Any) -> dict[str, Any]:
        return cast(dict[str, Any], self.call("GET", f"/jobs/{job_id}/items", params=filters))

    def cancel(self, job_id: uuid.UUID, reason: str | None) -> Job:
        return cast(Job, self.call("DELETE", f"/jobs/{job_id}", params={"reason": reason}))

    def retry(self, job_id: uuid.UUID) -> Job:
        return cast(Job, self.call("POST", f"/jobs/{job_id}/retry"))

    def events(self, job_id: uuid.UUID | str) -> Iterator[Job]:
        """The job as it changes (its event stream), to its final state."""
        for event, data in self._stream(f"/jobs/{job_id}/events"):
            yield json.loads(data)
            if event == "final":
                return

    def list_events(self) -> Iterator[tuple[str, Job | None]]:
        """The workspace's jobs as they change (its list's event stream): ``("reset",
        None)`` first and whenever changes may have been missed (read the list then),
        ``("job", job)`` for each change; until interrupted."""
        for event, data in self._stream("/jobs/events"):
            if event == "reset":
                yield "reset", None
            elif event == "job":
                yield "job", json.loads(data)

    def _stream(self, path: str) -> Iterator[tuple[str, str]]:
        """An event stream's (event, data); one the API cuts is opened again where it left
        off (``Last-Event-ID``) for STREAM_RECONNECT_SECONDS, but an API that never
        answered is unavailable at once, as for any other command."""
        last_id: str | None = None
        cut_at: float | None = None
        answered = False
        while True:
            headers = {} if last_id is None else {"Last-Event-ID": last_id}
            try:
                with self.http.stream(
                    "GET", self.base + path, headers=headers, timeout=STREAM_TIMEOUT
                ) as response:
                    if response.status_code == 204:
                        return  # its final event was the last one seen
                    if response.status_code >= 400:
                        response.read()
                        raise error_of(response)
                    answered = True
                    for event, data, event_id in _sse(response.iter_lines()):
                        cut_at = None
                        last_id = event_id or last_id
                        if event == "error":
                            detail = json.loads(data)["error"]
                            raise HubJobsError(detail["message"], code=detail["code"])
                        yield event, data
            except httpx.TransportError:
                if not answered:
                    raise unreachable(self.target.url) from None
            now = time.monotonic()
            cut_at = cut_at or now
            if now - cut_at > STREAM_RECONNECT_SECONDS:
                raise unreachable(self.target.url)
            time.sleep(0.5)

    def schedules(self, method: str, path: str = "", body: Any = None) -> Any:
        return self.call(method, f"/schedules{path}", body=body)


def _sse(lines: Iterator[str]) -> Iterator[tuple[str, str, str | None]]:
    """Server-Sent Events as (event, data, id), comments (pings) skipped."""
    event, event_id = "message", None
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield event, "\n".join(data), event_id
            event, data, event_id = "message", [], None
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                event = value
            elif name == "data":
                data.append(value)
            elif name == "id":
                event_id = value
