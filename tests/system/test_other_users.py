"""Another user of the machine (``nobody``, through setpriv) against a stack brought up
by ``hubjobs up``: nothing is open to them.

- The embedded PostgreSQL authenticates every connection (scram-sha-256 on every rule
  of pg_hba.conf, no Unix socket at all): psql as the superuser with no password, or
  a guessed one, is refused over TCP; the owner's URL, as ``up`` prints and records it,
  carries the password.
- The stack's secrets (the database's password, its record, the token and webhook
  secrets, the sign-in links' codes, the profile) are files of the owner's alone,
  which ``nobody`` cannot read.
- The stack's API gives ``nobody`` no token: there is no route handing one to whoever
  asks (the old ``/operator/dev-token``), and a sign-in without a link's code, or with
  a made-up one, is refused.
- A stack home of the previous version (pg_hba.conf trusting every local connection, no
  password) is secured by the next ``hubjobs up``: the password set, every rule
  authenticating, the record's URL carrying it.
"""

from __future__ import annotations

import json
import os
import stat
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg

from hubjobs.devstack import embedded
from tests.support.other_user import as_other_user, readable_by_other_user
from tests.support.stacks import OwnStack, own_stack, timed_json

PSQL = str(embedded._pg_bin_path() / "psql")
# The stack's files that hold a secret, by name in its home.
SECRET_FILES = (
    "postgres-password",
    "stack.json",
    "dev-token-secret",
    "dev-webhook-secret",
    "login-codes.json",
)


def psql_as_other_user(port: int, password: str | None = None) -> tuple[int, str]:
    """``psql`` as ``nobody``, as PostgreSQL's superuser, over TCP to the stack's port,
    reading the read model (never asking for a password: ``-w``)."""
    env = {"PGPASSWORD": password} if password is not None else None
    done = as_other_user(
        PSQL,
        f"host=127.0.0.1 port={port} user=postgres dbname=hubjobs connect_timeout=10",
        "-w",
        "-At",
        "-c",
        "SELECT count(*) FROM jobs",
        env=env,
    )
    return done.returncode, done.stdout + done.stderr


def assert_closed_to_other_users(stack: OwnStack, database_url: str) -> None:
    port = urlsplit(database_url).port
    assert port is not None
    for guess in (None, "", "postgres", "hubjobs"):
        code, said = psql_as_other_user(port, guess)
        assert code != 0, f"nobody read the jobs table (password {guess!r}): {said}"
        assert "password" in said, said
    # The owner's URL carries the password, and every rule authenticates; no socket.
    assert urlsplit(database_url).password
    with psycopg.connect(database_url, connect_timeout=10) as conn:
        rules = conn.execute(
            "SELECT type, auth_method FROM pg_hba_file_rules WHERE error IS NULL"
        ).fetchall()
        sockets = conn.execute("SHOW unix_socket_directories").fetchone()
    assert rules and {method for _, method in rules} == {"scram-sha-256"}, rules
    assert {kind for kind, _ in rules} >= {"local", "host"}
    assert sockets == ("",)
    for name in SECRET_FILES:
        path = stack.home / name
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, name
        assert not readable_by_other_user(path), name


def post_as_other_user(url: str, body: str | None = None) -> tuple[int, str]:
    """``curl`` as ``nobody``: a POST with no Origin (not a browser), its status and body."""
    args = ["curl", "-sS", "-X", "POST", "-w", "\n%{http_code}", url]
    if body is not None:
        args += ["-H", "Content-Type: application/json", "--data", body]
    done = as_other_user(*args)
    assert done.returncode == 0, done.stderr
    answer, _, status = done.stdout.rpartition("\n")
    return int(status), answer


def test_another_user_is_refused_by_the_database_and_the_sign_in() -> None:
    with own_stack() as stack:
        recorded = json.loads((stack.home / "stack.json").read_text())
        assert recorded["database_url"] == stack.database_url
        # A demo actor in the profile: what the page would sign in as.
        seeded, _ = timed_json(stack.env, "seed-demo", "--pages", "3")
        api = json.loads((stack.home / "api.json").read_text())["url"]
        # No route hands a token to whoever asks; a sign-in needs a link's code, which
        # nobody cannot read (login-codes.json above), and a made-up one gets nothing.
        status, answer = post_as_other_user(f"{api}/operator/dev-token")
        assert status == 404 and "token" not in answer, answer
        for body in ("{}", json.dumps({"code": "x" * 43})):
            status, answer = post_as_other_user(f"{api}/operator/login", body)
            assert status in (401, 422) and "token" not in answer, (body, answer)
        listed = as_other_user(
            "curl", "-sS", "-w", "\n%{http_code}", f"{api}/workspaces/{seeded['workspace_id']}/jobs"
        )
        assert listed.stdout.endswith("\n401"), listed.stdout
        assert_closed_to_other_users(stack, stack.database_url)
        assert stat.S_IMODE((stack.home / "profile.json").stat().st_mode) == 0o600


def make_previous_version(home: Path) -> None:
    """The stack home as the previous version left it (its servers down): pg_hba.conf
    trusting every local connection, no password file, the record's URL without one."""
    hba = home / "pgdata" / "pg_hba.conf"
    owner = hba.stat()
    hba.write_text(hba.read_text().replace("scram-sha-256", "trust"))
    os.chown(hba, owner.st_uid, owner.st_gid)
    (home / "postgres-password").unlink(missing_ok=True)
    record = home / "stack.json"
    info = json.loads(record.read_text())
    parts = urlsplit(info["database_url"])
    info["database_url"] = parts._replace(netloc=f"postgres@{parts.hostname}:{parts.port}").geturl()
    record.write_text(json.dumps(info))
    record.chmod(0o644)


def test_up_secures_a_stack_of_the_previous_version() -> None:
    with own_stack() as stack:
        timed_json(stack.env, "down")
        make_previous_version(stack.home)
        old_url = json.loads((stack.home / "stack.json").read_text())["database_url"]
        assert urlsplit(old_url).password is None

        info = stack.up()
        assert urlsplit(info["database_url"]).password
        recorded = json.loads((stack.home / "stack.json").read_text())
        assert recorded["database_url"] == info["database_url"]
        # The old address, without the password, no longer gets in.
        try:
            psycopg.connect(old_url, connect_timeout=10).close()
        except psycopg.OperationalError as refused:
            assert "password" in str(refused)
        else:
            raise AssertionError("the old URL, without a password, still connects")
        assert_closed_to_other_users(stack, info["database_url"])
        # And the stack works on: its API, started again, reaches the database.
        assert api_health(stack.home)["status"] == "ok"


def api_health(home: Path) -> Any:
    url = json.loads((home / "api.json").read_text())["url"]
    with urllib.request.urlopen(f"{url}/health", timeout=30) as answer:
        return json.loads(answer.read())
