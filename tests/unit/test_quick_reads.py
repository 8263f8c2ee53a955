"""The quick reads' rules (starter/warm/quick.py), without servers: which command lines
they may answer, that they load nothing heavy, and that the worker answers only a caller
whose settings it can read as its own: same ``HUBJOBS_*`` variables (in any case, as
pydantic-settings matches them; nothing else changes the settings), same directory,
same settings as it serves with; and that it renders a table at the size rich finds in
the caller's process. Printing the same as the full CLI: tests/system."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any, cast
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hubjobs.settings import Settings
from starter.cli.output import console_on
from starter.client import HubJobsClient
from starter.warm.protocol import fingerprint, settings_environ
from starter.warm.quick import recognised, request_for, terminal_size
from starter.warm.server import NotQuick, _printed, respond_quick, sized_as_callers

JOB = str(uuid.uuid4())
BASE = {
    "HUBJOBS_DATABASE_URL": "postgresql://hubjobs@127.0.0.1:1/hubjobs",
    "HUBJOBS_TEMPORAL_ADDRESS": "127.0.0.1:1",
}


@pytest.mark.parametrize(
    ("args", "quick"),
    [
        (["status", JOB], True),
        (["status", JOB, "--json", "--workspace", JOB], True),
        (["list"], True),
        (["list", "--limit=5", "--status", "queued", "--kind", "x", "--json"], True),
        (["list", "--bogus"], True),  # the worker's parser refuses it: the full CLI runs
        ([], False),
        (["--version"], False),
        (["cancel", JOB], False),
        (["items", JOB], False),
        (["status", "--help"], False),
        (["list", "--watch"], False),
        (["list", "--interval=3"], False),
        (["list", "--kind", "--help"], False),  # a value like --help: the full CLI's
    ],
)
def test_only_a_one_shot_status_or_list_is_recognised(args: list[str], quick: bool) -> None:
    assert recognised(args) is quick


def _fingerprint_in(environ: dict[str, str]) -> str:
    with mock.patch.dict(os.environ, environ, clear=True):
        return fingerprint(Settings())


NOT_OURS = st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_0123456789", min_size=1)


@settings(max_examples=60, deadline=None)
@given(
    noise=st.dictionaries(
        NOT_OURS.filter(lambda name: not name.lower().startswith("hubjobs_"))
        | st.sampled_from(["DATABASE_URL", "HOME", "HUBJOBS", "XHUBJOBS_HOME", "TEMPORAL_ADDRESS"]),
        st.text("abc123:/._-", max_size=12),
        max_size=6,
    ),
    ours=st.fixed_dictionaries(
        {},
        optional={
            "HUBJOBS_TASK_QUEUE": st.text("abcxyz-", min_size=1, max_size=8),
            "hubjobs_log_level": st.sampled_from(["INFO", "DEBUG"]),
            "HUBJOBS_Codec_Key_Id": st.text("k12", min_size=1, max_size=3),
            "HUBJOBS_DB_READ_TIMEOUT_SECONDS": st.sampled_from(["1", "2.5", ""]),
        },
    ),
)
def test_the_settings_read_nothing_but_the_hubjobs_variables(
    noise: dict[str, str], ours: dict[str, str]
) -> None:
    """Whatever else the environment holds, the same ``settings_environ`` gives the same
    settings: what lets the worker read a caller's settings as its own."""
    environ = BASE | ours
    assert settings_environ(environ | noise) == environ
    assert _fingerprint_in(environ | noise) == _fingerprint_in(environ)


def test_a_variable_in_any_case_is_read_and_compared() -> None:
    lower = BASE | {"hubjobs_task_queue": "elsewhere"}
    assert _fingerprint_in(lower) != _fingerprint_in(BASE)
    assert settings_environ(lower) != settings_environ(BASE)


def test_the_quick_module_loads_nothing_heavy(tmp_path: Path) -> None:
    """Imported and asked with no worker serving (it then hands over): neither pydantic
    nor typer (nor its click) nor rich."""
    probe = (
        "import json, sys\n"
        "from starter.warm.quick import answered\n"
        "printed = answered(['status', sys.argv[1], '--json'])\n"
        "print(json.dumps([printed, sorted({m.split('.')[0] for m in sys.modules})]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, JOB],
        env={"HUBJOBS_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    printed, loaded = json.loads(done.stdout)
    assert printed is None
    heavy = {"pydantic", "pydantic_settings", "typer", "click", "rich", "psycopg", "temporalio"}
    assert heavy.isdisjoint(loaded), heavy & set(loaded)


async def _answer(request: dict[str, Any], mine: str) -> dict[str, Any]:
    # No call is made before the settings are checked: no client is needed to refuse.
    return await respond_quick(cast(HubJobsClient, None), mine, request)


async def test_the_worker_answers_only_a_caller_with_its_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    for name in [name for name in os.environ if name.lower().startswith("hubjobs_")]:
        monkeypatch.delenv(name)
    for name, value in BASE.items():
        monkeypatch.setenv(name, value)
    mine = fingerprint(Settings())
    request = request_for(["status", JOB, "--json"])
    environ = cast(dict[str, str], request["environ"])

    other_url = request | {"environ": environ | {"HUBJOBS_DATABASE_URL": "postgresql://other/db"}}
    assert await _answer(other_url, mine) == {"fallback": "settings"}
    lower_case = request | {"environ": environ | {"hubjobs_home": "/elsewhere"}}
    assert await _answer(lower_case, mine) == {"fallback": "settings"}
    elsewhere = request | {"cwd": "/"}
    assert await _answer(elsewhere, mine) == {"fallback": "settings"}
    # The same variables, but the worker serves other settings (it read them before a
    # file in its home changed, say).
    assert await _answer(request, "another fingerprint") == {"fallback": "settings"}
    # Its own settings, but a command line it does not answer, or one its parser refuses.
    assert await _answer(request | {"quick": ["status", "--help"]}, mine) == {"fallback": "call"}
    assert await _answer(request | {"quick": ["status", "x"]}, mine) == {"fallback": "usage"}


class _Stdout(io.StringIO):
    """A stdout that is a terminal or not, as rich asks it."""

    def __init__(self, terminal: bool) -> None:
        super().__init__()
        self._terminal = terminal

    def isatty(self) -> bool:
        return self._terminal


def _rich_size(environ: dict[str, str], terminal: bool, size: tuple[int, int] | None) -> object:
    """The size rich itself finds in the full CLI, for a process whose first terminal
    among stdin, stdout and stderr is ``size`` (None: none is)."""

    def asked(fd: int) -> os.terminal_size:
        if size is None:
            raise OSError("not a terminal")
        return os.terminal_size(size)

    with mock.patch("rich.console.os.get_terminal_size", asked):
        return console_on(_Stdout(terminal), environ=environ).size


def _workers_size(environ: dict[str, str], terminal: bool, size: tuple[int, int] | None) -> object:
    """The size the worker renders the same caller's table at, its own stdin, stdout and
    stderr not asked (they would fail the call)."""
    console = console_on(_Stdout(terminal), environ=environ)
    with mock.patch("rich.console.os.get_terminal_size", side_effect=AssertionError("asked")):
        sized_as_callers(console, None if size is None else list(size))
        return console.size


@pytest.mark.parametrize("terminal", [True, False])
@pytest.mark.parametrize("size", [(120, 40), (60, 20), (0, 0), None])
@pytest.mark.parametrize(
    "environ",
    [
        {"TERM": "xterm-256color"},
        {"TERM": "dumb"},
        {"TERM": "unknown", "COLUMNS": "100"},
        {"TERM": "DUMB", "COLUMNS": "100", "LINES": "10"},
        {"COLUMNS": "100"},
        {"LINES": "10"},
        {"COLUMNS": "x", "LINES": "-3"},
        {"FORCE_COLOR": "1"},
        {"TTY_COMPATIBLE": "0", "LINES": "7"},
    ],
)
def test_the_worker_renders_at_the_size_rich_finds_for_the_caller(
    environ: dict[str, str], size: tuple[int, int] | None, terminal: bool
) -> None:
    """COLUMNS and LINES first, then the caller's terminal, 80×25 for none or for 0, a
    dumb terminal 80×25: whatever rich decides, the worker's console has that size."""
    assert _workers_size(environ, terminal, size) == _rich_size(environ, terminal, size)


def test_a_size_that_is_not_one_leaves_the_table_to_the_full_cli() -> None:
    for size in ([80], ["80", 25], [80, -1], [True, 25], {"columns": 80}):
        console = console_on(_Stdout(True), environ={"TERM": "xterm"})
        with pytest.raises(NotQuick):
            sized_as_callers(console, size)


def test_a_table_without_the_callers_terminal_size_is_the_full_clis() -> None:
    """A caller's CLI from before the size was sent: rich would lay its table out for a
    terminal the worker cannot see."""
    found = cast(Any, [])
    request = request_for(["list"])
    del request["terminal_size"]
    with pytest.raises(NotQuick):
        _printed("list", found, False, request)
    assert _printed("list", found, True, request) == "[]\n"


def test_the_terminal_size_is_the_first_standard_streams_as_rich_asks() -> None:
    """stdin, then stdout, then stderr: here stdin is none, stdout is one."""
    asked: list[int] = []

    def get_terminal_size(fd: int) -> os.terminal_size:
        asked.append(fd)
        if fd == 0:
            raise OSError("not a terminal")
        return os.terminal_size((61, 17))

    streams = [mock.Mock(**{"fileno.return_value": fd}) for fd in (0, 1, 2)]
    with (
        mock.patch.object(sys, "__stdin__", streams[0]),
        mock.patch.object(sys, "__stdout__", streams[1]),
        mock.patch.object(sys, "__stderr__", streams[2]),
        mock.patch("starter.warm.quick.os.get_terminal_size", get_terminal_size),
    ):
        assert terminal_size() == [61, 17]
        assert request_for(["list"])["terminal_size"] == [61, 17]
    assert asked[:2] == [0, 1]
    with mock.patch("starter.warm.quick.os.get_terminal_size", side_effect=OSError):
        assert terminal_size() is None
