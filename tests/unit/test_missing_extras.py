"""Without the api and otel extras (their packages made unimportable in a fresh
interpreter): `hubjobs api` and tracing settings are refused in one line naming the
extra, while the worker's modules and `hubjobs token` load without them. The real
worker-only install, running a job: tests/system/test_worker_only_install.py."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.unit.test_lazy_imports import probed

# The extras' top-level modules, as a worker-only install lacks them.
ABSENT = ("fastapi", "fastapi_offline", "uvicorn", "starlette", "sse_starlette", "opentelemetry")
PROBE = f"""
import importlib.abc, sys

class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {ABSENT!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, Absent())
from starter.cli import run_cli
sys.exit(run_cli(sys.argv[1:]))
"""


def hubjobs(home: Path, *args: str, **settings: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HUBJOBS_")}
    env |= {"HUBJOBS_HOME": str(home)} | {f"HUBJOBS_{k.upper()}": v for k, v in settings.items()}
    return probed(PROBE, list(args), env)


# Addresses nothing is asked at: each refusal comes before any connection.
SERVERS = {"database_url": "postgresql://u@127.0.0.1:1/none", "temporal_address": "127.0.0.1:1"}
TRACING = "tracing (HUBJOBS_TRACING, HUBJOBS_OTLP_ENDPOINT) needs the otel extra"


@pytest.mark.parametrize(
    ("args", "settings", "said"),
    [
        (["api"], {}, "the HTTP API needs the api extra: pip install 'hubjobs[api]'"),
        (["worker"], SERVERS | {"tracing": "true"}, f"{TRACING}: pip install 'hubjobs[otel]'"),
        (["worker"], SERVERS | {"otlp_endpoint": "http://127.0.0.1:1/v1/traces"}, TRACING),
    ],
    ids=["api", "worker-tracing", "worker-otlp-endpoint"],
)
def test_what_needs_a_missing_extra_is_refused_in_one_line_naming_it(
    args: list[str], settings: dict[str, str], said: str, tmp_path: Path
) -> None:
    done = hubjobs(tmp_path, *args, **settings)
    assert done.returncode == 1 and done.stdout == "", done
    line = done.stderr.strip()
    assert "\n" not in line and line.startswith(f"error: {said}"), done.stderr
    assert line.endswith(" [missing_extra]"), line


def test_a_token_is_minted_without_the_api_extra(tmp_path: Path) -> None:
    secret = "a-token-secret-for-this-test-only-0123456789"
    done = hubjobs(tmp_path, "token", "--actor", str(uuid.uuid4()), api_jwt_secret=secret)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count(".") == 2  # header.claims.signature
