"""The payload codec on the real servers: with it on, a job's raw history (as `temporal
workflow show --output json` prints it) holds none of the job's values, the job works
end to end, a job started under the old key finishes under the new one, the API's codec
endpoint decodes for an authorised caller and refuses others, and `make run`'s stack
with the codec on shows the decoded input in the Temporal UI (headless Chromium,
screenshot in test-artifacts/) through that endpoint."""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import re
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.message import Message
from playwright.async_api import async_playwright, expect
from pydantic import SecretStr
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.api.common.v1 import Payload, Payloads, SearchAttributes
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHistory

from hubjobs.devstack import embedded
from hubjobs.devstack.demo_data import DemoCourse
from hubjobs.errors import ConfigurationError
from hubjobs.settings import Settings
from hubjobs.temporal.client import connect, data_converter
from hubjobs.temporal.codec import ENCODING, KEY_ID
from starter.api import create_app
from starter.api.tokens import mint
from starter.client import HubJobsClient
from tests.support import toy_kind
from tests.support.codec_keys import NEW_KEY_ID, OLD_KEY_ID, codec_env, with_codec
from tests.support.helpers import (
    assert_every_page_tagged_once,
    temporal_cli,
    with_kind,
    workflow_closed,
)
from tests.support.histories import record
from tests.support.processes import api_process
from tests.support.servers import running_worker, seed
from tests.support.stacks import hubjobs, own_stack

SECRET = "codec-test-secret-" + "x" * 32
assert toy_kind.TOY.name == "toy_echo"  # registered by importing it
UI_ORIGIN = "http://ui.example:8233"
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
PLAIN = data_converter(Settings(payload_codec=False))
BASE64 = re.compile(r"^[A-Za-z0-9+/_-]{8,}={0,2}$")


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def plain_secrets(shown_json: str, secrets: list[str]) -> list[str]:
    """The secrets found in a JSON document's strings, as they are or base64-decoded
    (protobuf JSON writes a payload's bytes as base64)."""
    texts = []
    for text in _strings(json.loads(shown_json)):
        texts.append(text)
        if BASE64.match(text):
            try:
                raw = base64.b64decode(text.replace("-", "+").replace("_", "/") + "==")
            except (binascii.Error, ValueError):
                continue
            texts.append(raw.decode(errors="ignore"))
    return sorted({s for s in secrets if any(s in text for text in texts)})


# What the SDK itself writes in its markers, plain by design (its core reads them back
# on replay, below any codec), none of it a job's value: a patch's name (``patch-data``)
# and a local activity's sequence number, type, attempt and times (``data``). A local
# activity's ``result`` is the job's, and is encrypted.
SDK_MARKER_FIELDS = frozenset({"patch-data", "data"})


def payload_metadata(history: WorkflowHistory) -> list[dict[str, bytes]]:
    """Every payload of the history but its search attributes (plain by design: the
    UI and the visibility store query them) and the SDK's own marker fields
    (``SDK_MARKER_FIELDS``), by its metadata."""
    found: list[dict[str, bytes]] = []

    def walk(message: Message) -> None:
        if isinstance(message, Payload):
            found.append(dict(message.metadata))
            return
        if isinstance(message, SearchAttributes):
            return
        for field, value in message.ListFields():
            entry = field.message_type
            if field.type != field.TYPE_MESSAGE or entry is None:
                continue
            if entry.GetOptions().map_entry:
                if entry.fields_by_name["value"].type != field.TYPE_MESSAGE:
                    continue
                items = list(value.values())
            elif field.is_repeated:
                items = list(value)
            else:
                items = [value]
            for item in items:
                walk(item)

    for event in history.events:
        for message in _with_payloads(event):
            walk(message)
    return found


def _with_payloads(event: HistoryEvent) -> list[Message]:
    """The event, or of a marker only the parts that are not the SDK's own."""
    if not event.HasField("marker_recorded_event_attributes"):
        return [event]
    marker = event.marker_recorded_event_attributes
    parts: list[Message] = [
        p for name, p in marker.details.items() if name not in SDK_MARKER_FIELDS
    ]
    return parts + ([marker.failure] if marker.HasField("failure") else [])


async def tag_a_course(
    client: Client, engine: AsyncEngine, settings: Settings, course: DemoCourse, tag: str
) -> tuple[str, Any]:
    """Tags the course and waits for the job, then for its run to close (the row is final
    a step before): the caller, whose worker is still up, reads a whole history."""
    jobs = HubJobsClient(client, engine, settings).scope(course.workspace_id, course.actor_id)
    job = await jobs.start("course_tagging", {"root_page_id": course.root_page_id, "tag": tag})
    done = await jobs.wait(job.id, timeout=60, interval=0.1)
    await workflow_closed(client, job.workflow_id)
    return job.workflow_id, done


async def test_with_the_codec_on_the_history_holds_no_plain_value_and_the_job_works(
    stack: embedded.StackInfo, temporal: Client, engine: AsyncEngine, settings: Settings
) -> None:
    tag = f"Quillonwort{uuid.uuid4().hex[:6]}"
    codec = with_codec(settings)
    client = await connect(codec)
    course = await seed(engine, 30)
    # A course bigger than one batch, so that the history holds an ordinary attempt's
    # payloads (its heartbeats) too; a small job's local activity is in the next test's.
    ordinary = with_kind(codec, "course_tagging", tagging_batch_size=10)
    async with running_worker(client, ordinary):
        workflow_id, done = await tag_a_course(client, engine, codec, course, tag)
    assert done.status == "succeeded"
    await assert_every_page_tagged_once(engine, done, course.page_ids, tag)
    await record(client.get_workflow_handle(workflow_id), "course_tagging_encrypted")

    secrets = [tag, str(course.root_page_id), *(str(p) for p in course.page_ids)]
    shown = await asyncio.to_thread(
        temporal_cli, stack.temporal_address, "workflow", "show", "-w", workflow_id, "-o", "json"
    )
    assert shown.returncode == 0, shown.stderr
    assert plain_secrets(shown.stdout, secrets) == []
    # Every payload (inputs, results, heartbeats, summaries, headers) is encrypted.
    history = await temporal.get_workflow_handle(workflow_id).fetch_history()
    metadata = payload_metadata(history)
    print(f"\n{len(metadata)} payloads in the history, all encrypted")
    assert len(metadata) > 5
    assert [m for m in metadata if m.get("encoding") != ENCODING] == []
    assert {m[KEY_ID] for m in metadata} == {NEW_KEY_ID.encode()}

    # The same look finds the values of a job run without the codec.
    plain_course = await seed(engine, 3)
    async with running_worker(temporal, settings):
        plain_id, plain_done = await tag_a_course(temporal, engine, settings, plain_course, tag)
    assert plain_done.status == "succeeded"
    shown = await asyncio.to_thread(
        temporal_cli, stack.temporal_address, "workflow", "show", "-w", plain_id, "-o", "json"
    )
    assert tag in plain_secrets(shown.stdout, [tag, str(plain_course.root_page_id)])


async def test_a_job_started_under_the_old_key_finishes_under_the_new_one(
    temporal: Client, engine: AsyncEngine, settings: Settings
) -> None:
    """Rotation mid-flight: a starter still encrypting with the old key, a worker already
    encrypting with the new one (and holding both). The course fits in one batch: the
    worker's payloads are its local activity's result and the workflow's."""
    old_client = await connect(with_codec(settings, current=OLD_KEY_ID))
    new_settings = with_codec(settings, current=NEW_KEY_ID)
    new_client = await connect(new_settings)
    course = await seed(engine, 20)
    async with running_worker(new_client, new_settings):
        workflow_id, done = await tag_a_course(old_client, engine, settings, course, "rotated")
    assert done.status == "succeeded" and done.succeeded == 20
    history = await temporal.get_workflow_handle(workflow_id).fetch_history()
    assert any(e.HasField("marker_recorded_event_attributes") for e in history.events)
    key_ids = {m[KEY_ID].decode() for m in payload_metadata(history)}
    assert key_ids == {OLD_KEY_ID, NEW_KEY_ID}
    result = await new_client.get_workflow_handle(workflow_id).result()
    assert result["status"] == "succeeded"


async def test_failures_are_encrypted_and_still_judged(
    stack: embedded.StackInfo, engine: AsyncEngine, settings: Settings
) -> None:
    """A failed attempt's message and stack trace go into an encrypted payload, and the
    workflow still reads them: a transient failure is retried and the job succeeds, and
    a job out of attempts fails with its code, as without the codec."""
    codec = with_codec(settings).model_copy(
        update={"retry_initial_seconds": 0.2, "max_activity_attempts": 2}
    )
    client = await connect(codec)
    course = await seed(engine, 1)
    jobs = HubJobsClient(client, engine, codec).scope(course.workspace_id, course.actor_id)
    async with running_worker(client, codec):
        retried = await jobs.start("toy_echo", {"message": "Quillonwort", "fail_attempts": 1})
        exhausted = await jobs.start("toy_echo", {"message": "Quillonwort", "fail_attempts": 9})
        retried_done = await jobs.wait(retried.id, timeout=60, interval=0.1)
        exhausted_done = await jobs.wait(exhausted.id, timeout=60, interval=0.1)
        # The rows are final a step before the runs close: the histories shown below
        # are whole once the runs have closed, while the worker can close them.
        for job in (retried_done, exhausted_done):
            await workflow_closed(client, job.workflow_id)
    assert (retried_done.status, retried_done.attempts_failed) == ("succeeded", 1)
    assert (exhausted_done.status, exhausted_done.error_code) == ("failed", "processing_failed")
    for job in (retried_done, exhausted_done):
        shown = await asyncio.to_thread(
            temporal_cli,
            stack.temporal_address,
            "workflow",
            "show",
            "-w",
            job.workflow_id,
            "-o",
            "json",
        )
        assert shown.returncode == 0, shown.stderr
        # The activity's message ("transient failure 1") is in no failure, only its type.
        assert plain_secrets(shown.stdout, ["Quillonwort", "transient failure"]) == []
        assert "Encoded failure" in shown.stdout


def codec_body(payloads: list[Payload]) -> dict[str, Any]:
    """What the Temporal UI and CLI send: the protobuf JSON of Payloads."""
    return MessageToDict(Payloads(payloads=payloads))


async def decoded_values(answer: httpx.Response) -> list[Any]:
    payloads = ParseDict(answer.json(), Payloads()).payloads
    return await PLAIN.decode(list(payloads), None)


async def test_the_codec_endpoint_decodes_for_an_authorised_caller_and_refuses_others(
    temporal: Client, engine: AsyncEngine, settings: Settings
) -> None:
    allowed, other = uuid.uuid4(), uuid.uuid4()
    api = with_codec(settings).model_copy(
        update={
            "api_jwt_secret": SecretStr(SECRET),
            "codec_actors": [allowed],
            "codec_cors_origins": [UI_ORIGIN],
        }
    )
    written = await data_converter(with_codec(settings, current=OLD_KEY_ID)).encode(
        [{"tag": "Quillonwort", "root_page_id": "p-1"}]
    )
    body = codec_body(written)

    def app_for(s: Settings) -> httpx.AsyncClient:
        app = create_app(s, client=HubJobsClient(temporal, engine, s))
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api")

    bearer = {"Authorization": f"Bearer {mint(allowed, api)}"}
    forged = mint(allowed, api.model_copy(update={"api_jwt_secret": SecretStr("y" * 40)}))
    async with app_for(api) as http:
        answer = await http.post("/codec/decode", json=body, headers=bearer)
        assert answer.status_code == 200, answer.text
        # Written under the old key id, decoded now that the new one is current.
        assert await decoded_values(answer) == [{"tag": "Quillonwort", "root_page_id": "p-1"}]

        sealed = await http.post(
            "/codec/encode",
            json=codec_body(list(await PLAIN.encode(["x"]))),
            headers=bearer,
        )
        assert sealed.status_code == 200
        [encrypted] = ParseDict(sealed.json(), Payloads()).payloads
        assert encrypted.metadata[KEY_ID] == NEW_KEY_ID.encode()
        back = await http.post("/codec/decode", json=sealed.json(), headers=bearer)
        assert await decoded_values(back) == ["x"]

        refusals = {
            "no token": await http.post("/codec/decode", json=body),
            "another secret": await http.post(
                "/codec/decode", json=body, headers={"Authorization": f"Bearer {forged}"}
            ),
            "an actor not allowed": await http.post(
                "/codec/decode", json=body, headers={"Authorization": f"Bearer {mint(other, api)}"}
            ),
            "a token but from an origin": await http.post(
                "/codec/decode", json=body, headers={"Origin": UI_ORIGIN}
            ),
        }
        assert {why: r.status_code for why, r in refusals.items()} == {
            "no token": 401,
            "another secret": 401,
            "an actor not allowed": 403,
            "a token but from an origin": 401,
        }
        for answer in refusals.values():
            assert "Quillonwort" not in answer.text and "payloads" not in answer.json()

        tampered = json.loads(json.dumps(body))
        data = bytearray(base64.b64decode(tampered["payloads"][0]["data"]))
        data[-1] ^= 1
        tampered["payloads"][0]["data"] = base64.b64encode(bytes(data)).decode()
        broken = await http.post("/codec/decode", json=tampered, headers=bearer)
        assert broken.status_code == 422
        assert broken.json()["error"]["code"] == "undecodable_payload"
        not_base64 = await http.post(
            "/codec/decode", json={"payloads": [{"data": "***"}]}, headers=bearer
        )
        assert not_base64.status_code == 422

        # CORS: the UI's origin gets its preflight answered, another origin does not.
        preflight = {
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type,x-namespace",
        }
        ok = await http.options("/codec/decode", headers={"Origin": UI_ORIGIN, **preflight})
        assert ok.status_code == 200
        assert ok.headers["access-control-allow-origin"] == UI_ORIGIN
        assert "x-namespace" in ok.headers["access-control-allow-headers"].lower()
        elsewhere = await http.options(
            "/codec/decode", headers={"Origin": "http://evil.example", **preflight}
        )
        assert elsewhere.status_code == 400
        assert "access-control-allow-origin" not in elsewhere.headers
        # The job routes answer no browser.
        jobs = await http.options("/health", headers={"Origin": UI_ORIGIN, **preflight})
        assert "access-control-allow-origin" not in jobs.headers

    # The embedded UI sends no token: trusted by origin only when asked, and only on
    # loopback.
    trusting = api.model_copy(update={"codec_trust_ui_origin": True})
    async with app_for(trusting) as http:
        from_ui = await http.post("/codec/decode", json=body, headers={"Origin": UI_ORIGIN})
        assert from_ui.status_code == 200
        assert from_ui.headers["access-control-allow-origin"] == UI_ORIGIN
        other_origin = await http.post(
            "/codec/decode", json=body, headers={"Origin": "http://evil.example"}
        )
        assert other_origin.status_code == 401
    with pytest.raises(ConfigurationError, match="only for an API on loopback"):
        create_app(trusting.model_copy(update={"api_host": "0.0.0.0"}))
    # With the codec off, there is no codec endpoint.
    async with app_for(settings.model_copy(update={"api_jwt_secret": SecretStr(SECRET)})) as http:
        assert (await http.post("/codec/decode", json=body, headers=bearer)).status_code == 404


async def test_make_run_with_the_codec_on_shows_decoded_payloads_only_through_the_endpoint(
    chromium: Path, tmp_path: Path
) -> None:
    """`hubjobs up` and `hubjobs demo` (what `make run` runs) with the codec on and
    `hubjobs api` serving the endpoint: the demo's job runs (its worker, versioned by
    default, made its build current), its history is ciphertext, the CLI decodes it
    through the endpoint with a token and not without, and the UI shows the input."""
    api_port = embedded.choose_port(0)
    tag = f"Quillonwort{uuid.uuid4().hex[:6]}"
    extra = {
        **codec_env(),
        "HUBJOBS_API_PORT": str(api_port),
        "HUBJOBS_API_JWT_SECRET": SECRET,
        "HUBJOBS_CODEC_TRUST_UI_ORIGIN": "true",
        "HUBJOBS_METRICS_PORT": "0",
        "HUBJOBS_MAINTENANCE": "false",
    }
    with own_stack(extra_env=extra) as stack:
        endpoint = f"http://127.0.0.1:{api_port}/codec"
        assert stack.info["ui_codec_endpoint"] == endpoint
        with api_process(stack.env, tmp_path / "api.log"):
            demo = await asyncio.to_thread(
                hubjobs, stack.env, "demo", "--pages", "30", "--tag", tag, "--json"
            )
            assert demo.returncode == 0, demo.stdout + demo.stderr
            job = json.loads(demo.stdout)
            assert job["status"] == "succeeded" and job["succeeded"] == 30
            workflow_id = job["workflow_id"]
            address = stack.temporal_address

            # The job ran pinned to the embedded stack's build, made current by its worker.
            described = await asyncio.to_thread(
                temporal_cli, address, "workflow", "describe", "-w", workflow_id, "-o", "json"
            )
            assert described.returncode == 0, described.stderr
            versioning = json.loads(described.stdout)["workflowExecutionInfo"]["versioningInfo"]
            assert versioning["behavior"] == "VERSIONING_BEHAVIOR_PINNED"
            assert versioning["deploymentVersion"] == {
                "deploymentName": "hubjobs",
                "buildId": "dev",
            }

            raw = await asyncio.to_thread(
                temporal_cli, address, "workflow", "show", "-w", workflow_id, "-o", "json"
            )
            assert raw.returncode == 0 and plain_secrets(raw.stdout, [tag]) == []
            token = mint(uuid.uuid4(), Settings(api_jwt_secret=SecretStr(SECRET)))
            through_endpoint = await asyncio.to_thread(
                temporal_cli,
                address,
                "workflow",
                "show",
                "-w",
                workflow_id,
                "-o",
                "json",
                "--codec-endpoint",
                endpoint,
                "--codec-auth",
                f"Bearer {token}",
            )
            assert through_endpoint.returncode == 0, through_endpoint.stderr
            assert plain_secrets(through_endpoint.stdout, [tag]) == [tag]
            refused = await asyncio.to_thread(
                temporal_cli,
                address,
                "workflow",
                "show",
                "-w",
                workflow_id,
                "-o",
                "json",
                "--codec-endpoint",
                endpoint,
                "--codec-auth",
                "Bearer not-a-token",
            )
            assert plain_secrets(refused.stdout or "{}", [tag]) == []

            await show_decoded_input_in_the_ui(
                chromium, stack.info["ui_url"], workflow_id, tag, endpoint
            )


async def show_decoded_input_in_the_ui(
    chromium: Path, ui_url: str, workflow_id: str, tag: str, endpoint: str
) -> None:
    """The workflow's page in the UI shows its input with the tag: decoded in the
    browser by the codec endpoint (the history holds only ciphertext)."""
    ARTIFACTS.mkdir(exist_ok=True)
    screenshot = ARTIFACTS / "temporal-ui-codec.png"
    screenshot.unlink(missing_ok=True)
    url = f"{ui_url}/namespaces/default/workflows/{urllib.parse.quote(workflow_id)}"
    decoded: list[int] = []
    async with async_playwright() as p:
        browser = await p.chromium.launch(
            executable_path=str(chromium),
            args=["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync"],
        )
        try:
            page = await browser.new_page(viewport={"width": 1400, "height": 1400})
            page.on(
                "response",
                lambda r: (
                    decoded.append(r.status)
                    if r.url.startswith(f"{endpoint}/decode") and r.request.method == "POST"
                    else None
                ),
            )
            shown = page.get_by_text(tag).first
            for attempt in range(3):
                # The dev server's UI may answer 500 while it warms up: reload, as a user.
                await (page.goto(url) if attempt == 0 else page.reload())
                try:
                    await expect(shown).to_be_visible(timeout=20_000)
                    break
                except AssertionError:
                    if attempt == 2:
                        raise
            await page.screenshot(path=str(screenshot), full_page=True)
        finally:
            await browser.close()
    assert decoded and set(decoded) == {200}, decoded
    print(f"\nthe UI decoded {len(decoded)} payload sets through {endpoint}")
    data = screenshot.read_bytes()
    assert len(data) > 1000 and data.startswith(b"\x89PNG\r\n\x1a\n")
