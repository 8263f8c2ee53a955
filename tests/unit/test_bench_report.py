"""bench/report.py's pure parts: a py-spy profile's shares (what the benchmarks page's
CPU section shows) and the README's table written between its markers only."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# bench/ is a folder of scripts, each importing its neighbours by their bare names; last
# on the path, so that none of them shadows a module of the other tests.
sys.path.append(str(Path(__file__).resolve().parents[2] / "bench"))

import cpu_profile
import report

ENTRY = "<module> (hubjobs:10);run (asyncio/runners.py:118);Handle._run (asyncio/events.py:80)"
RAW = "\n".join(
    [
        # The sandbox importing a module again: the sandbox's, whatever runs below it.
        f"{ENTRY};_Instance._run_code (temporalio/worker/workflow_sandbox/_runner.py:193);"
        "<module> (<string>:2);_find_and_load (<frozen importlib._bootstrap>:1360) 3",
        # A statement: psycopg's (innermost), counted once however deep it recurses.
        f"{ENTRY};tag (activities/course_tagging.py:144);execute "
        "(sqlalchemy/engine/base.py:1494);execute (psycopg/cursor_async.py:97);execute "
        "(psycopg/cursor_async.py:97) 5",
        f"{ENTRY};_create_fn (dataclasses.py:433) 2",
        # Idle: the event loop waiting, a pool thread waiting, no Python frame at all.
        "<module> (hubjobs:10);run (asyncio/runners.py:118);EpollSelector.select "
        "(selectors.py:468) 10",
        "Thread._bootstrap (threading.py:1002);_worker (concurrent/futures/thread.py:90) 4",
        " 1",
    ]
)


def test_a_profile_counts_active_samples_by_function_and_by_layer() -> None:
    profile = cpu_profile.parse(RAW)
    assert (profile.active, profile.idle) == (10, 15)
    assert profile.inclusive["execute (psycopg/cursor_async.py)"] == 5
    assert profile.own["execute (psycopg/cursor_async.py)"] == 5
    assert profile.inclusive["tag (activities/course_tagging.py)"] == 5
    # The entry and the event loop are in every stack: left out of the functions.
    assert not any(
        key.startswith(("Handle._run", "<module> (hubjobs)")) for key in profile.inclusive
    )
    assert profile.layers == {
        "the workflow sandbox": 3,
        "psycopg": 5,
        cpu_profile.OTHER: 2,
    }


def test_the_section_puts_before_beside_after() -> None:
    before = cpu_profile.parse(RAW)
    after = cpu_profile.parse(RAW.replace(") 3\n", ") 13\n"))
    text = cpu_profile.section(("before.raw", before), ("after.raw", after), top=3)
    assert text.startswith("## Worker CPU in a burst, by function")
    # Sandboxed code: 3 of 10 active samples before, 13 of 20 after.
    row = "| `_Instance._run_code` | `temporalio/worker/workflow_sandbox/_runner.py` |"
    assert f"{row} 30.0 % (0.0 %) | 65.0 % (0.0 %) |" in text
    assert "| psycopg | 50.0 % | 25.0 % |" in text
    assert len([line for line in text.splitlines() if line.startswith("| `")]) == 3


def test_one_profile_alone_leaves_the_other_column_empty() -> None:
    text = cpu_profile.section(("before.raw", cpu_profile.parse(RAW)), None)
    assert "| psycopg | 50.0 % | - |" in text
    assert cpu_profile.section(None, None) == ""


def test_the_readme_changes_between_its_markers_only() -> None:
    readme = f"# hubjobs\n\nprose\n\n{report.BEGIN}\nold table\n{report.END}\n\nmore prose\n"
    table = f"{report.BEGIN}\nnew table\n{report.END}"
    assert report.spliced(readme, table) == (
        f"# hubjobs\n\nprose\n\n{report.BEGIN}\nnew table\n{report.END}\n\nmore prose\n"
    )
    with pytest.raises(SystemExit):
        report.spliced("# hubjobs, no markers\n", table)
