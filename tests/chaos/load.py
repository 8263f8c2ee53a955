"""The mixed load, at the plan's times: jobs started through the HTTP API and the Python
client (tagging of every size, exports, backups; some with an idempotency key, some
with a completion webhook, some followed by a live stream), cancels (the API's DELETE,
the client's, a bare ``temporal workflow signal --name cancel``), keys sent again (the
same payload, or another), retries of failed pages, two schedules firing. Everything
it sent and what it was answered goes to the ledger for the checker.

A caller with an idempotency key tries again when the answer is lost or says the
service is unavailable, as a real one would; one without does not (it cannot tell a
lost answer from no job)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import SecretStr

from hubjobs.errors import HubJobsError
from hubjobs.settings import Settings
from starter.api.tokens import mint
from starter.client import HubJobsClient, WorkspaceJobs
from tests.chaos.hub import Hub
from tests.chaos.ledger import Ledger
from tests.chaos.plan import Cancel, Plan, Repeat, Retry, Schedule, Start
from tests.chaos.stack import ChaosStack
from tests.support.helpers import temporal_cli
from tests.support.sse import Stream

TRANSIENT = frozenset({"unavailable", "database_full", "database_read_only"})
KEYED_TRIES = 6
TRY_AGAIN_SECONDS = 3.0
HTTP_TIMEOUT = httpx.Timeout(30.0)
STREAM_TIMEOUT = httpx.Timeout(10.0, read=60.0)
# A cancel or retry waits this long for the job it is about to have been answered.
JOB_KNOWN_WITHIN = 30.0
# A retry waits this long for its source job to finish.
SOURCE_FINAL_WITHIN = 90.0
BARE_TRIES = 3
TOKEN_SECONDS = 6 * 3600


@dataclass(frozen=True)
class Started:
    number: int
    job_id: str
    workflow_id: str
    workspace: int


class JobBook:
    """The jobs the load started, by their start's number, as their starts are answered."""

    def __init__(self) -> None:
        self.jobs: dict[int, Started] = {}
        self._known: dict[int, asyncio.Event] = {}

    def _event(self, number: int) -> asyncio.Event:
        return self._known.setdefault(number, asyncio.Event())

    def add(self, started: Started) -> None:
        self.jobs[started.number] = started
        self._event(started.number).set()

    def failed(self, number: int) -> None:
        self._event(number).set()

    async def wait_for(self, number: int, timeout: float) -> Started | None:
        try:
            async with asyncio.timeout(timeout):
                await self._event(number).wait()
        except TimeoutError:
            return None
        return self.jobs.get(number)


@dataclass
class Answer:
    outcome: str  # accepted, refused, error
    http_status: int | None = None
    code: str | None = None
    job: dict[str, Any] | None = None
    # The job a refusal names (``idempotency_key_reused`` names the key's job).
    named_job_id: str | None = None

    @property
    def final(self) -> bool:
        return self.outcome != "error"


class Load:
    def __init__(
        self,
        chaos: ChaosStack,
        plan: Plan,
        hub: Hub,
        client: HubJobsClient,
        http: httpx.AsyncClient,
        ledger: Ledger,
    ) -> None:
        self.chaos = chaos
        self.plan = plan
        self.hub = hub
        self.client = client
        self.http = http
        self.ledger = ledger
        self.book = JobBook()
        self.counts: Counter[str] = Counter()
        self.stop_watching = asyncio.Event()
        self.watchers: set[asyncio.Task[None]] = set()
        settings = Settings(home=chaos.home, api_jwt_secret=SecretStr(chaos.api_secret))
        self.tokens = [
            {"Authorization": f"Bearer {mint(actor, settings, ttl_seconds=TOKEN_SECONDS)}"}
            for _, actor in hub.workspaces
        ]
        self.t0 = 0.0

    async def run(self, t0: float) -> None:
        self.t0 = t0
        plan = self.plan
        await asyncio.gather(
            *(self._at(s.at, self.start(s)) for s in plan.starts),
            *(self._at(c.at, self.cancel(c)) for c in plan.cancels),
            *(self._at(r.at, self.repeat(r)) for r in plan.repeats),
            *(self._at(r.at, self.retry(r)) for r in plan.retries),
            *(self.schedule(s) for s in plan.schedules),
        )

    async def _at(self, at: float, action: Any) -> None:
        await asyncio.sleep(max(0.0, self.t0 + at - time.monotonic()))
        await action

    async def close_watchers(self, within: float) -> None:
        self.stop_watching.set()
        if self.watchers:
            await asyncio.wait(self.watchers, timeout=within)
        for task in self.watchers:
            task.cancel()

    # --- what each start sends ------------------------------------------------------------

    def workspace_id(self, number: int) -> uuid.UUID:
        return self.hub.workspaces[number][0]

    def jobs_of(self, workspace: int) -> WorkspaceJobs:
        return self.client.scope(*self.hub.workspaces[workspace])

    def payload(self, start: Start, *, conflict: bool = False) -> dict[str, Any]:
        root = None if start.course is None else str(self.hub.courses[start.course][0])
        if start.kind == "course_tagging":
            return {"root_page_id": root, "tag": f"{start.tag}-other" if conflict else start.tag}
        if start.kind == "page_export":
            per_file = (start.pages_per_file or 500) + (1 if conflict else 0)
            body: dict[str, Any] = {"pages_per_file": per_file}
            if root is not None:
                body["root_page_id"] = root
            return body
        return {}

    # --- starts -------------------------------------------------------------------------

    async def start(self, start: Start, repeat: Repeat | None = None) -> None:
        conflict = repeat is not None and repeat.conflict
        payload = self.payload(start, conflict=conflict)
        method = repeat.method if repeat else start.method
        notify = self.chaos.receiver_url if start.notify else None
        record: dict[str, Any] = {
            "type": "start",
            "number": start.number,
            "repeat_of": start.number if repeat else None,
            "method": method,
            "workspace_id": str(self.workspace_id(start.workspace)),
            "kind": start.kind,
            "payload": payload,
            "key": start.key,
            "conflict": conflict,
            "notify_url": notify,
            "flood": start.flood,
            "sent_at": time.time(),
        }
        answer = Answer("error")
        for _ in range(KEYED_TRIES if start.key else 1):
            if method == "api":
                answer = await self._api_start(start, payload, notify)
            else:
                answer = await self._client_start(start, payload, notify)
            if answer.final:
                break
            await asyncio.sleep(TRY_AGAIN_SECONDS)
        job = answer.job or {}
        record.update(
            answered_at=time.time(),
            outcome=answer.outcome,
            http_status=answer.http_status,
            code=answer.code,
            named_job_id=answer.named_job_id,
            job_id=job.get("id"),
            status_in_answer=job.get("status"),
        )
        self.ledger.write(record)
        self.counts[f"{'repeat' if repeat else 'start'} {answer.outcome}"] += 1
        if repeat is not None:
            return
        if answer.outcome != "accepted":
            self.book.failed(start.number)
            return
        started = Started(start.number, str(job["id"]), str(job["workflow_id"]), start.workspace)
        self.book.add(started)
        if start.watch:
            task = asyncio.create_task(self.watch(started))
            self.watchers.add(task)

    async def _api_start(self, start: Start, payload: dict[str, Any], notify: str | None) -> Answer:
        headers = dict(self.tokens[start.workspace])
        if start.key:
            headers["Idempotency-Key"] = start.key
        params = {"notify_url": notify} if notify else None
        path = f"/workspaces/{self.workspace_id(start.workspace)}/jobs/{start.kind}"
        return await self._api("POST", path, headers, json=payload, params=params)

    async def _api(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        *,
        json: dict[str, Any] | None = None,
        params: dict[str, str] | None = None,
    ) -> Answer:
        try:
            response = await self.http.request(
                method,
                self.chaos.api_url() + path,
                headers=headers,
                json=json,
                params=params,
                timeout=HTTP_TIMEOUT,
            )
        except (httpx.HTTPError, OSError) as err:
            return Answer("error", code=type(err).__name__)
        body = _json(response)
        if response.status_code < 300:
            return Answer("accepted", response.status_code, job=body)
        error = (body.get("error") or {}) if body else {}
        outcome = "error" if response.status_code >= 500 else "refused"
        return Answer(
            outcome, response.status_code, code=error.get("code"), named_job_id=error.get("job_id")
        )

    async def _client_start(
        self, start: Start, payload: dict[str, Any], notify: str | None
    ) -> Answer:
        try:
            job = await self.jobs_of(start.workspace).start(
                start.kind, payload, idempotency_key=start.key, notify_url=notify
            )
        except HubJobsError as err:
            named = str(err.job_id) if err.job_id else None
            outcome = "error" if err.code in TRANSIENT else "refused"
            return Answer(outcome, code=err.code, named_job_id=named)
        except Exception as err:  # the client's own failure, counted
            return Answer("error", code=type(err).__name__)
        return Answer("accepted", job=job.model_dump(mode="json"))

    async def repeat(self, repeat: Repeat) -> None:
        await self.start(self.plan.starts_by_number[repeat.start], repeat)

    # --- cancels --------------------------------------------------------------------------

    async def cancel(self, cancel: Cancel) -> None:
        job = await self.book.wait_for(cancel.start, JOB_KNOWN_WITHIN)
        record: dict[str, Any] = {
            "type": "cancel",
            "number": cancel.number,
            "start": cancel.start,
            "method": cancel.method,
            "job_id": job.job_id if job else None,
        }
        if job is None:
            self.ledger.write(record | {"accepted": False, "detail": "its start had no job"})
            return
        if cancel.method == "bare":
            record |= await self._bare_cancel(job)
        else:
            record["sent_at"] = time.time()
            record |= await self._cancel(cancel.method, job)
            record["answered_at"] = time.time()
        self.ledger.write(record)
        self.counts[f"cancel {cancel.method} {'accepted' if record['accepted'] else 'not'}"] += 1

    async def _cancel(self, method: str, job: Started) -> dict[str, Any]:
        if method == "api":
            path = f"/workspaces/{self.workspace_id(job.workspace)}/jobs/{job.job_id}"
            answer = await self._api("DELETE", path, dict(self.tokens[job.workspace]))
            status = (answer.job or {}).get("status")
            return {
                "accepted": answer.http_status == 202,
                "status_in_answer": status,
                "detail": answer.code or answer.http_status,
            }
        try:
            view = await self.jobs_of(job.workspace).cancel(uuid.UUID(job.job_id), reason="chaos")
        except Exception as err:
            return {"accepted": False, "detail": getattr(err, "code", type(err).__name__)}
        return {"accepted": True, "status_in_answer": str(view.status)}

    async def _bare_cancel(self, job: Started) -> dict[str, Any]:
        """``temporal workflow signal --name cancel`` with no input, sent again while the
        server refuses it (as an operator would)."""
        detail = ""
        for _ in range(BARE_TRIES):
            sent = time.time()
            done = await asyncio.to_thread(
                temporal_cli,
                self.chaos.temporal_address,
                "workflow",
                "signal",
                "--workflow-id",
                job.workflow_id,
                "--name",
                "cancel",
            )
            if done.returncode == 0:
                return {"accepted": True, "sent_at": sent, "answered_at": time.time()}
            detail = done.stderr.strip()[-200:]
            await asyncio.sleep(TRY_AGAIN_SECONDS)
        return {"accepted": False, "sent_at": sent, "answered_at": time.time(), "detail": detail}

    # --- retries --------------------------------------------------------------------------

    async def retry(self, retry: Retry) -> None:
        job = await self.book.wait_for(retry.start, JOB_KNOWN_WITHIN)
        record: dict[str, Any] = {
            "type": "retry",
            "number": retry.number,
            "method": retry.method,
            "source_job_id": job.job_id if job else None,
        }
        source = await self._final(job) if job else None
        if job is None or source is None or not source.failed:
            self.ledger.write(record | {"outcome": "nothing to retry"})
            return
        if retry.method == "api":
            path = f"/workspaces/{self.workspace_id(job.workspace)}/jobs/{job.job_id}/retry"
            answer = await self._api("POST", path, dict(self.tokens[job.workspace]))
        else:
            try:
                view = await self.jobs_of(job.workspace).retry(uuid.UUID(job.job_id))
                answer = Answer("accepted", job=view.model_dump(mode="json"))
            except HubJobsError as err:
                answer = Answer("refused", code=err.code)
        self.ledger.write(
            record
            | {
                "outcome": answer.outcome,
                "code": answer.code,
                "job_id": (answer.job or {}).get("id"),
            }
        )
        self.counts[f"retry {answer.outcome}"] += 1

    async def _final(self, job: Started) -> Any:
        deadline = time.monotonic() + SOURCE_FINAL_WITHIN
        while time.monotonic() < deadline:
            try:
                view = await self.jobs_of(job.workspace).get(uuid.UUID(job.job_id))
                if view.is_final:
                    return view
            except HubJobsError:
                pass
            await asyncio.sleep(2)
        return None

    # --- schedules ------------------------------------------------------------------------

    async def schedule(self, schedule: Schedule) -> None:
        await asyncio.sleep(max(0.0, self.t0 + schedule.create_at - time.monotonic()))
        workspace = self.workspace_id(schedule.workspace)
        root = str(self.hub.courses[schedule.course][0])
        payload: dict[str, Any] = {"root_page_id": root}
        if schedule.tag:
            payload["tag"] = schedule.tag
        body = {"kind": schedule.kind, "every": f"{schedule.every_seconds}s", "payload": payload}
        headers = dict(self.tokens[schedule.workspace])
        created = await self._until_answered(
            "POST", f"/workspaces/{workspace}/schedules", headers, body, schedule.delete_at
        )
        record: dict[str, Any] = {
            "type": "schedule",
            "number": schedule.number,
            "workspace_id": str(workspace),
            "schedule_id": (created.job or {}).get("id"),
        }
        if record["schedule_id"] is None:
            self.ledger.write(record | {"created": False, "deleted": False})
            return
        await asyncio.sleep(max(0.0, self.t0 + schedule.delete_at - time.monotonic()))
        path = f"/workspaces/{workspace}/schedules/{record['schedule_id']}"
        deleted = await self._until_answered(
            "DELETE", path, headers, None, schedule.delete_at + 120
        )
        self.ledger.write(record | {"created": True, "deleted": deleted.outcome == "accepted"})

    async def _until_answered(
        self, method: str, path: str, headers: dict[str, str], body: Any, until: float
    ) -> Answer:
        while True:
            answer = await self._api(method, path, headers, json=body)
            if answer.final or time.monotonic() > self.t0 + until:
                return answer
            await asyncio.sleep(TRY_AGAIN_SECONDS)

    # --- live streams ---------------------------------------------------------------------

    async def watch(self, job: Started) -> None:
        """The job's live stream, followed to its ``final`` event, resumed with the last
        event's id whenever the connection goes (the API killed or stopped)."""
        path = f"/workspaces/{self.workspace_id(job.workspace)}/jobs/{job.job_id}/events"
        last_id: str | None = None
        events = reconnects = 0
        final: str | None = None
        while final is None and not self.stop_watching.is_set():
            headers = dict(self.tokens[job.workspace])
            if last_id:
                headers["Last-Event-ID"] = last_id
            try:
                async with self.http.stream(
                    "GET", self.chaos.api_url() + path, headers=headers, timeout=STREAM_TIMEOUT
                ) as response:
                    if response.status_code == 200:
                        stream = Stream(response)
                        while (event := await stream.next()) is not None:
                            events += 1
                            last_id = event.id or last_id
                            if event.event == "final":
                                final = str(event.job["status"])
                                break
            except (httpx.HTTPError, OSError, ValueError):
                pass
            if final is None:
                reconnects += 1
                await asyncio.sleep(1)
        self.ledger.write(
            {
                "type": "sse",
                "job_id": job.job_id,
                "events": events,
                "reconnects": reconnects,
                "final_status": final,
            }
        )


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}
