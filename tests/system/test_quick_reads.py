"""Quick reads (starter/warm/quick.py): with the stack's worker serving, ``hubjobs status``
and ``hubjobs list`` print exactly what the full CLI prints for the same call, JSON and
plain text off a terminal, loading neither pydantic nor typer nor rich; whenever the
worker may not answer (none serves, other settings, another directory, an error to
report), the full CLI runs the command line, as before; and on a real terminal a table
is byte for byte the full CLI's (its size, its colours, TERM=dumb, NO_COLOR). A real
``hubjobs worker --serve-starts`` process, real CLI processes, the real servers."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from hubjobs.devstack.demo_data import DemoCourse
from hubjobs.settings import Settings
from tests.support.cli_imports import Loaded, Quick, cli_loading, quick_loading
from tests.support.processes import HUBJOBS, hubjobs_env
from tests.support.terminal import OnTerminal, run_on_terminal

# What rich reads to decide it writes for a terminal and how: not inherited from the
# test run.
TERMINAL_HINTS = (
    "FORCE_COLOR",
    "TTY_COMPATIBLE",
    "TTY_INTERACTIVE",
    "NO_COLOR",
    "TERM",
    "COLORTERM",
    "COLUMNS",
    "LINES",
)
# The `hubjobs` command's entry point on a terminal, reporting to a file (argv[1]) which
# of the full CLI's packages it loaded: none when the worker printed the answer.
QUICK_ON_TERMINAL = """
import json, sys
report, sys.argv[1:] = sys.argv[1], sys.argv[2:]
try:
    from starter.warm.quick import main
    main()
finally:
    sys.stdout.flush()
    loaded = sorted({m.split(".")[0] for m in sys.modules} & {"pydantic", "typer", "rich"})
    with open(report, "w") as out:
        json.dump(loaded, out)
"""
# The full CLI as the `hubjobs` command runs it when the worker does not answer.
FULL_ON_TERMINAL = "from starter.cli import main; main()"


@dataclass(frozen=True)
class Served:
    env: dict[str, str]
    cwd: Path
    home: Path
    worker: subprocess.Popen[bytes]

    def quick(self, *args: str, env: dict[str, str] | None = None, cwd: str = "") -> Quick:
        """The quick read's answer (None: not answered), in a fresh interpreter."""
        return quick_loading(self.env | (env or {}), *args, cwd=cwd or str(self.cwd))

    def full(self, *args: str, env: dict[str, str] | None = None, cwd: str = "") -> Loaded:
        """The full CLI (starter.cli.run_cli), in a fresh interpreter."""
        return cli_loading(self.env | (env or {}), *args, cwd=cwd or str(self.cwd))

    def hubjobs(
        self, *args: str, env: dict[str, str] | None = None, cwd: str = ""
    ) -> subprocess.CompletedProcess[str]:
        """The ``hubjobs`` command as people run it."""
        return subprocess.run(
            [str(HUBJOBS), *args],
            env=self.env | (env or {}),
            cwd=cwd or self.cwd,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def on_terminal(
        self, *args: str, env: dict[str, str], columns: int, lines: int, how: str
    ) -> OnTerminal:
        """``hubjobs <args>`` with stdout and stderr on a real terminal: ``how`` is
        "quick" (the command's entry point, answered by the worker: it loads none of the
        full CLI's packages), "full" (the full CLI itself) or "hubjobs" (the command)."""
        report = self.cwd / "loaded.json"
        report.unlink(missing_ok=True)
        argv = {
            "quick": [sys.executable, "-c", QUICK_ON_TERMINAL, str(report), *args],
            "full": [sys.executable, "-c", FULL_ON_TERMINAL, *args],
            "hubjobs": [str(HUBJOBS), *args],
        }[how]
        done = run_on_terminal(argv, self.env | env, str(self.cwd), columns=columns, lines=lines)
        if how == "quick":
            assert report.exists(), (args, env, done)  # not left by the full CLI's exit
            assert json.loads(report.read_text()) == [], f"{args} {env}: not a quick read"
        return done


@pytest.fixture
def served(settings: Settings, course: DemoCourse, tmp_path: Path) -> Iterator[Served]:
    """The stack's worker serving a home whose profile names the course's actor; the
    workspace comes from HUBJOBS_WORKSPACE (the CLI's defaults, as after `make run`)."""
    home = tmp_path / "h"  # short: a unix socket's path has at most 107 bytes
    home.mkdir()
    (home / "profile.json").write_text(json.dumps({"actor_id": str(course.actor_id)}))
    env = hubjobs_env(settings, home, workspace=str(course.workspace_id))
    for hint in TERMINAL_HINTS:
        env.pop(hint, None)
    with open(tmp_path / "worker.log", "wb") as log:
        worker = subprocess.Popen(
            [str(HUBJOBS), "worker", "--serve-starts"],
            env=env,
            cwd=tmp_path,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        deadline = time.monotonic() + 60
        while not (home / "starts.sock").is_socket():
            assert worker.poll() is None, (tmp_path / "worker.log").read_text()
            assert time.monotonic() < deadline, "the worker did not serve its socket"
            time.sleep(0.1)
        yield Served(env, tmp_path, home, worker)
    finally:
        worker.terminate()
        worker.wait(timeout=60)


def _tagged(served: Served, root_page: object, tag: str) -> str:
    done = served.hubjobs("tag-course", "--root-page", str(root_page), "--tag", tag, "--wait")
    assert done.returncode == 0, done.stderr
    (line,) = [row for row in done.stdout.splitlines() if row.startswith(" id ")]
    return line.split()[1]


async def test_a_quick_read_prints_what_the_full_cli_prints(
    served: Served, course: DemoCourse
) -> None:
    first = await asyncio.to_thread(_tagged, served, course.root_page_id, "quick-1")
    second = await asyncio.to_thread(_tagged, served, course.root_page_id, "quick-2")
    for args in (
        ("status", first, "--json"),
        ("status", second),
        ("status", first, "--workspace", str(course.workspace_id), "--actor", str(course.actor_id)),
        ("list", "--json"),
        ("list",),
        ("list", "--limit", "1", "--status", "succeeded"),
        ("list", "--kind=course_tagging", "--json", "--limit=5"),
        ("list", "--kind", "page_export"),
    ):
        quick = await asyncio.to_thread(served.quick, *args)
        assert quick.printed is not None, f"{args}: not answered by the worker"
        assert quick.loaded == [], f"{args}: loaded {quick.loaded}"
        full = await asyncio.to_thread(served.full, *args)
        assert full.code == 0, full.stderr
        assert quick.printed == full.stdout, args
        done = await asyncio.to_thread(served.hubjobs, *args)
        assert (done.returncode, done.stdout, done.stderr) == (0, full.stdout, ""), args
    # The table as rich draws it for the caller's stdout: in ASCII on an ASCII one.
    ascii_out = {"PYTHONIOENCODING": "ascii"}
    quick = await asyncio.to_thread(served.quick, "list", env=ascii_out)
    full = await asyncio.to_thread(served.full, "list", env=ascii_out)
    assert quick.printed == full.stdout and "+---" in full.stdout
    # A terminal as rich decides it from the environment, on a pipe: its layout, its
    # styles (the list's header; on a real terminal:
    # test_a_table_for_a_terminal_is_the_full_clis_bytes).
    for args, env in (
        (("list",), {"FORCE_COLOR": "1"}),
        (("status", first), {"TTY_COMPATIBLE": "1"}),
    ):
        quick = await asyncio.to_thread(served.quick, *args, env=env)
        full = await asyncio.to_thread(served.full, *args, env=env)
        assert quick.printed == full.stdout, env
        assert "\x1b[" in full.stdout or args[0] == "status", env
    listed = json.loads((await asyncio.to_thread(served.quick, "list", "--json")).printed or "")
    assert [job["id"] for job in listed] == [second, first]  # newest first


async def test_the_full_cli_runs_what_the_worker_may_not_answer(
    served: Served, settings: Settings, course: DemoCourse
) -> None:
    job = await asyncio.to_thread(_tagged, served, course.root_page_id, "quick-3")
    # The same database under another URL: other settings, so the CLI reads it itself.
    other_url = settings.resolved_database_url() + "?application_name=other"
    cases: list[tuple[tuple[str, ...], dict[str, str], str]] = [
        (("status", job, "--json"), {"HUBJOBS_DATABASE_URL": other_url}, ""),
        (("list",), {"HUBJOBS_DATABASE_URL": other_url}, ""),
        # Another directory (the same settings: HUBJOBS_HOME is absolute; the worker
        # answers only a caller in its own directory, where a relative one is the same).
        (("status", job, "--json"), {}, "/"),
        # Errors are the full CLI's to print (and their exit codes).
        (("status", "8cfcfd20-f95f-4e7f-b675-55af8d32cc39", "--json"), {}, ""),
        (("list", "--status", "bogus"), {}, ""),
        (("list", "--limit", "0"), {}, ""),
        (("status",), {}, ""),
        (("list", "--help"), {}, ""),
        (("list", "--watch", "--json"), {}, ""),  # not a one-shot read
    ]
    for args, env, cwd in cases:
        quick = await asyncio.to_thread(served.quick, *args, env=env, cwd=cwd)
        assert quick.printed is None, f"{args} {env}: answered by the worker"
        if "--watch" in args:
            continue
        full = await asyncio.to_thread(served.full, *args, env=env, cwd=cwd)
        done = await asyncio.to_thread(served.hubjobs, *args, env=env, cwd=cwd)
        assert (done.returncode, done.stdout, done.stderr) == (
            full.code,
            full.stdout,
            full.stderr,
        ), (args, env)
        if "HUBJOBS_DATABASE_URL" in env:  # read here, not by the worker
            assert "psycopg" in full.heavy
    # JSON is the same on any stdout: a quick read answers it whatever rich would decide.
    colored = await asyncio.to_thread(
        served.quick, "status", job, "--json", env={"FORCE_COLOR": "1"}
    )
    assert colored.printed is not None and json.loads(colored.printed)["id"] == job

    # No worker serving: the full CLI reads itself (no relay either), and prints the same.
    reads = [("status", job, "--json"), ("status", job), ("list", "--json"), ("list",)]
    answered = [(await asyncio.to_thread(served.quick, *args)).printed for args in reads]
    served.worker.terminate()
    await asyncio.to_thread(served.worker.wait, 60)
    assert not (served.home / "starts.sock").exists()
    for args, printed in zip(reads, answered, strict=True):
        assert printed is not None, args
        alone = await asyncio.to_thread(served.quick, *args)
        assert alone.printed is None
        done = await asyncio.to_thread(served.hubjobs, *args)
        assert (done.returncode, done.stdout, done.stderr) == (0, printed, ""), args


# rich's colours and styles, to measure what a terminal shows.
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# Terminals of a fixed size and what rich reads in the environment for them.
TERMINALS: list[tuple[dict[str, str], int, int]] = [
    ({"TERM": "xterm-256color"}, 120, 40),
    ({"TERM": "xterm-256color", "NO_COLOR": "1"}, 120, 40),
    ({"TERM": "xterm-256color"}, 60, 20),  # narrow: the table's columns wrap
    ({"TERM": "dumb"}, 120, 40),  # rich: 80 columns, no colours, whatever the size
    ({"TERM": "xterm", "COLORTERM": "truecolor", "COLUMNS": "100"}, 120, 40),
    ({"TERM": "xterm-256color", "TTY_COMPATIBLE": "0"}, 120, 40),  # laid out as off one
]


async def test_a_narrow_table_on_an_ascii_terminal_is_printed(
    served: Served, course: DemoCourse
) -> None:
    """A terminal whose encoding is ASCII, too narrow for the whole list: the table
    leaves columns out, its borders ASCII, every id whole, and the command succeeds
    (it failed ``internal_error`` when rich cut a cell with a "…" the stream could not
    take). The quick read hands this case to the full CLI."""
    job = await asyncio.to_thread(_tagged, served, course.root_page_id, "quick-ascii")
    env = {"TERM": "xterm-256color", "PYTHONIOENCODING": "ascii"}
    for how in ("full", "hubjobs"):
        done = await asyncio.to_thread(
            served.on_terminal, "list", env=env, columns=60, lines=20, how=how
        )
        shown = ANSI.sub("", done.written.decode("ascii"))
        assert done.code == 0 and "internal_error" not in shown, (how, shown)
        assert "+--" in shown and job in shown and "summary" not in shown, (how, shown)


async def test_a_table_for_a_terminal_is_the_full_clis_bytes(
    served: Served, course: DemoCourse
) -> None:
    """On a real terminal, each environment: the quick read (printed by the worker),
    the full CLI and the ``hubjobs`` command write the same bytes."""
    job = await asyncio.to_thread(_tagged, served, course.root_page_id, "quick-tty")
    for env, columns, lines in TERMINALS:
        for args in (("status", job), ("list",)):
            written = {
                how: await asyncio.to_thread(
                    served.on_terminal, *args, env=env, columns=columns, lines=lines, how=how
                )
                for how in ("quick", "full", "hubjobs")
            }
            full = written["full"]
            # The id whole in the status, cut to the column's width in the list.
            assert full.code == 0 and job[:4].encode() in full.written, (args, env, full)
            assert written["quick"] == full, (args, env, columns)
            assert written["hubjobs"] == full, (args, env, columns)
            shown = ANSI.sub("", full.written.decode())
            if env == TERMINALS[0][0] and columns == 120 and args == ("list",):
                assert shown != full.written.decode(), "no styles: not for a terminal"
            if columns == 60 and args == ("list",):
                assert max(len(row) for row in shown.splitlines()) <= 60, shown
