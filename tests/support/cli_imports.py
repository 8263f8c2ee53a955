"""What a CLI command loads: ``hubjobs <args>`` run in a fresh interpreter that reports,
beside the command's exit code and output, which of the heavy packages it imported."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass

HEAVY = ("temporalio", "sqlalchemy", "psycopg")
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


# What a quick read (starter/warm/quick.py) loads: its answer, or None (the full CLI
# would then run the command line).
LIGHT = ("pydantic", "pydantic_settings", "typer", "click", "rich", *HEAVY)
QUICK_PROBE = f"""
import json, sys
from starter.warm.quick import answered
printed = answered(sys.argv[1:])
loaded = sorted({{m.split(".")[0] for m in sys.modules}} & set({LIGHT!r}))
print(json.dumps({{"printed": printed, "loaded": loaded}}))
"""


@dataclass(frozen=True)
class Quick:
    printed: str | None
    loaded: list[str]


def quick_loading(env: dict[str, str], *args: str, cwd: str | None = None) -> Quick:
    done = _probed(QUICK_PROBE, args, env, cwd=cwd, timeout=60)
    done.check_returncode()
    answer = json.loads(done.stdout)
    return Quick(answer["printed"], answer["loaded"])


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
