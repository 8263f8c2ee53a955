"""`hubjobs api`, `hubjobs worker` and `python worker.py`, as processes, refuse to start
with a placeholder or short secret: `.env.example`'s own placeholders for the token
secret and the codec's keys, and a placeholder, a short and a patterned value for each
of the token secret, the webhook signing secret and the codec's keys. Each exits
non-zero within seconds with one line on stderr naming the setting (never its value),
and the API never listens. Before: the API started and reported healthy with
`.env.example`'s token secret, and the worker ran with any of the shared secrets."""

from __future__ import annotations

import base64
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from hubjobs.devstack.embedded import choose_port, port_holder
from hubjobs.settings import Settings
from tests.support.processes import HUBJOBS, REPO, hubjobs_env
from tests.support.stacks import accepts

# Generous: a loaded machine takes seconds to import what a command needs.
EXIT_WITHIN_SECONDS = 120.0


def example_value(name: str) -> str:
    """A variable's value as `.env.example` has it (what a newcomer copies to .env)."""
    for line in (REPO / ".env.example").read_text().splitlines():
        if line.startswith(f"{name}="):
            return line.split("=", 1)[1]
    raise AssertionError(f"{name} is not in .env.example")


def codec(keys: str, key_id: str) -> dict[str, str]:
    return {
        "HUBJOBS_PAYLOAD_CODEC": "true",
        "HUBJOBS_CODEC_KEYS": keys,
        "HUBJOBS_CODEC_KEY_ID": key_id,
    }


# (the setting the refusal names, the environment that sets it)
CASES: list[tuple[str, dict[str, str]]] = [
    ("HUBJOBS_API_JWT_SECRET", {"HUBJOBS_API_JWT_SECRET": example_value("HUBJOBS_API_JWT_SECRET")}),
    ("HUBJOBS_API_JWT_SECRET", {"HUBJOBS_API_JWT_SECRET": "a-real-looking-but-short-secret"}),
    ("HUBJOBS_API_JWT_SECRET", {"HUBJOBS_API_JWT_SECRET": "ab" * 32}),
    ("HUBJOBS_WEBHOOK_SECRET", {"HUBJOBS_WEBHOOK_SECRET": "change-me"}),
    (
        "HUBJOBS_WEBHOOK_SECRET",
        {"HUBJOBS_WEBHOOK_SECRET": "replace-me-with-32-or-more-random-bytes"},
    ),
    ("HUBJOBS_WEBHOOK_SECRET", {"HUBJOBS_WEBHOOK_SECRET": "0123456"}),
    (
        "HUBJOBS_CODEC_KEYS",
        codec(example_value("HUBJOBS_CODEC_KEYS"), example_value("HUBJOBS_CODEC_KEY_ID")),
    ),
    ("HUBJOBS_CODEC_KEYS", codec("k1:" + base64.b64encode(b"12345678").decode(), "k1")),
]
ENTRY_POINTS = {
    "hubjobs api": [str(HUBJOBS), "api"],
    "hubjobs worker": [str(HUBJOBS), "worker"],
    "python worker.py": [sys.executable, "worker.py"],
}


def refusal(command: list[str], env: dict[str, str], port: int, what: object) -> tuple[int, str]:
    """The command's exit code and stderr, once it exited; an API that listens on
    ``port``, or a process still running after EXIT_WITHIN_SECONDS, fails the test
    (saying ``what`` it was given)."""
    process = subprocess.Popen(
        command, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + EXIT_WITHIN_SECONDS
    try:
        while process.poll() is None:
            holder = port_holder(port) if accepts(port) else None
            assert holder is None or holder.pid != process.pid, f"{command} serves with {what}"
            assert time.monotonic() < deadline, f"{command} still runs with {what}"
            time.sleep(0.2)
        assert process.stderr is not None
        return process.returncode, process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)
        if process.stderr is not None:
            process.stderr.close()


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_a_placeholder_or_short_secret_is_refused_at_start(
    entry: str, settings: Settings, tmp_path: Path
) -> None:
    def run(case: tuple[str, dict[str, str]]) -> tuple[str, dict[str, str], int, str]:
        name, secret = case
        port = choose_port(0)
        env = hubjobs_env(settings, tmp_path, api_port=port) | secret
        code, stderr = refusal(ENTRY_POINTS[entry], env, port, secret)
        return name, secret, code, stderr

    with ThreadPoolExecutor(2) as pool:
        outcomes = list(pool.map(run, CASES))
    for name, secret, code, stderr in outcomes:
        lines = stderr.strip().splitlines()
        assert code != 0 and len(lines) == 1, (entry, secret, code, stderr)
        assert lines[0].startswith("error: ") and name in lines[0], (entry, lines)
        for value in secret.values():
            if value not in ("true", "k1", example_value("HUBJOBS_CODEC_KEY_ID")):
                assert value not in lines[0], (entry, lines)
