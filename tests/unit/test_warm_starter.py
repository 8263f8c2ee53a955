"""The warm starter's rules (starter/warm), without servers: a worker acts only for a
caller with its settings and only for the calls it makes; an error reaches the caller as
the call would have raised it; ids stay ``uuid.UUID`` across the socket."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, cast

import pytest
from pydantic import SecretStr

from hubjobs.errors import HubJobsError, JobNotFound
from hubjobs.settings import Settings
from starter.client import HubJobsClient
from starter.warm.protocol import decode, encode, fingerprint
from starter.warm.server import respond

WORKSPACE, ACTOR, JOB = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()


def settings(tmp_path: Path, **changed: Any) -> Settings:
    base: dict[str, Any] = {
        "home": tmp_path,
        "database_url": "postgresql://hubjobs@127.0.0.1:1/hubjobs",
        "temporal_address": "127.0.0.1:1",
    }
    return Settings(**{**base, **changed})


def test_ids_cross_the_socket_as_ids() -> None:
    args = [JOB, {"root_page_id": WORKSPACE, "tag": "t", "n": None}]
    assert decode(encode(args)) == args
    assert isinstance(decode(encode(JOB)), uuid.UUID)


def test_the_fingerprint_is_of_what_changes_a_call(tmp_path: Path) -> None:
    mine = fingerprint(settings(tmp_path))
    # Whom the CLI acts as by default changes nothing: the request names its scope.
    assert fingerprint(settings(tmp_path, workspace=WORKSPACE, actor=ACTOR)) == mine
    assert fingerprint(settings(tmp_path, temporal_address="127.0.0.1:2")) != mine
    assert fingerprint(settings(tmp_path, db_lifecycle_timeout_seconds=1.0)) != mine
    # Secrets by their values, not their masks.
    keys = fingerprint(settings(tmp_path, codec_keys=SecretStr("k1:" + "a" * 44)))
    assert fingerprint(settings(tmp_path, codec_keys=SecretStr("k1:" + "b" * 44))) != keys


class FakeJobs:
    def __init__(self, outcome: object) -> None:
        self.outcome = outcome
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    async def cancel(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(("cancel", args, kwargs))
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


class FakeClient:
    def __init__(self, jobs: FakeJobs) -> None:
        self.jobs = jobs
        self.scopes: list[tuple[object, object]] = []

    def scope(self, workspace_id: object, actor_id: object) -> FakeJobs:
        self.scopes.append((workspace_id, actor_id))
        return self.jobs


class FakeJob:
    def model_dump(self, mode: str) -> dict[str, str]:
        return {"id": str(JOB), "mode": mode}


def request(call: str = "cancel", print_: str = "mine") -> dict[str, Any]:
    return {
        "call": call,
        "args": encode([JOB]),
        "kwargs": {"reason": "r"},
        "workspace_id": encode(WORKSPACE),
        "actor_id": encode(ACTOR),
        "fingerprint": print_,
    }


async def answer(outcome: object, sent: dict[str, Any]) -> tuple[dict[str, Any], FakeClient]:
    client = FakeClient(FakeJobs(outcome))
    return await respond(cast(HubJobsClient, client), "mine", sent), client


async def test_the_worker_makes_the_call_on_the_callers_scope() -> None:
    got, client = await answer(FakeJob(), request())
    assert got == {"job": {"id": str(JOB), "mode": "json"}}
    assert client.scopes == [(WORKSPACE, ACTOR)]
    assert client.jobs.calls == [("cancel", (JOB,), {"reason": "r"})]


@pytest.mark.parametrize(
    "sent", [request(print_="theirs"), request(call="items"), request(call="__init__")]
)
async def test_other_settings_or_another_call_are_left_to_the_caller(sent: dict[str, Any]) -> None:
    got, client = await answer(FakeJob(), sent)
    assert "fallback" in got
    assert client.jobs.calls == []


async def test_an_error_reaches_the_caller_as_raised() -> None:
    got, _ = await answer(JobNotFound("no such job in this workspace"), request())
    assert got == {"error": {"code": "job_not_found", "message": "no such job in this workspace"}}
    got, _ = await answer(HubJobsError("slow", code="unavailable"), request())
    assert got["error"] == {"code": "unavailable", "message": "slow"}


async def test_an_unexpected_failure_is_an_internal_error_pointing_at_the_log() -> None:
    got, _ = await answer(RuntimeError("secret detail"), request())
    assert got["error"]["code"] == "internal_error"
    assert "secret" not in got["error"]["message"]
    assert "worker.log" in got["error"]["message"]
