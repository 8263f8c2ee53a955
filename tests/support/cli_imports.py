"""What a CLI command loads: ``hubjobs <args>`` run in a fresh interpreter that reports,
beside the command's exit code and output, which of the heavy packages it imported."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass

# pydantic too: ~30 ms of a command's start (typer 0.29 loads it for every option).
HEAVY = ("temporalio", "sqlalchemy", "psycopg", "pydantic")
PROBE = f"""
import json, sys
from starter.cli import run_cli
code = run_cli(sys.argv[1:])
sys.stdout.flush()
heavy = sorted({{m.split(".")[0] for m in sys.modules}} & set({HEAVY!r}))
print("\\n" + json.dumps({{"code": code, "heavy": heavy}}))
"""


@dataclass(frozen=True)
class Loaded:
    code: int
    heavy: list[str]
    stdout: str
    stderr: str


def cli_loading(
    env: dict[str, str], *args: str, timeout: float = 120, cwd: str | None = None
) -> Loaded:
    done = _probed(PROBE, args, env, cwd=cwd, timeout=timeout)
    printed, _, probe = done.stdout.rstrip().rpartition("\n")
    answer = json.loads(probe)
    return Loaded(answer["code"], answer["heavy"], printed, done.stderr)


def _probed(
    script: str, args: tuple[str, ...], env: dict[str, str], *, cwd: str | None, timeout: float
) -> subprocess.CompletedProcess[str]:
    """``script`` run with ``args`` in a fresh interpreter, its output captured."""
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
