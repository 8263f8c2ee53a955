"""No pause an activity makes outlasts its heartbeat timeout without a beat: ``pause``
beats in steps of at most a quarter of the attempt's heartbeat timeout (run here in the
SDK's activity environment, which records every heartbeat), and no other code under
activities/ or hubjobs/archive/ sleeps for longer than a yield to the event loop."""

from __future__ import annotations

import ast
import dataclasses
import itertools
import time
from datetime import timedelta
from pathlib import Path

from temporalio import activity
from temporalio.testing import ActivityEnvironment

from activities.pauses import pause, step_seconds

ROOT = Path(__file__).resolve().parents[2]
# Where activity code lives, and the one module allowed to sleep.
SCANNED = (ROOT / "activities", ROOT / "hubjobs" / "archive")
PAUSES = ROOT / "activities" / "pauses.py"


async def test_a_pause_five_times_the_heartbeat_timeout_beats_all_along() -> None:
    timeout = 0.4
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=timeout))
    beats: list[float] = []
    env.on_heartbeat = lambda *details: beats.append(time.monotonic())

    @activity.defn
    async def throttled() -> float:
        await pause(5 * timeout, activity.heartbeat)
        return step_seconds()

    began = time.monotonic()
    step = await env.run(throttled)
    ended = time.monotonic()
    assert step == timeout / 4
    assert ended - began >= 5 * timeout
    moments = [began, *beats, ended]
    gaps = [b - a for a, b in itertools.pairwise(moments)]
    # Never a heartbeat timeout without a beat (steps of a quarter of it: room for a
    # loaded machine's late wake-ups), and so at least one beat a timeout.
    assert max(gaps) < timeout, gaps
    assert len(beats) >= 5


async def test_outside_an_activity_a_pause_beats_every_second_at_most() -> None:
    assert step_seconds() == 1.0
    beats: list[float] = []
    await pause(0.25, lambda: beats.append(time.monotonic()), step=0.05)
    assert len(beats) >= 5


def _sleeps(path: Path) -> list[str]:
    """Each sleep call in the file that waits for more than a yield (``sleep(0)``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name != "sleep":
            continue
        arg = node.args[0] if node.args else None
        if isinstance(arg, ast.Constant) and arg.value == 0:
            continue
        found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_no_activity_code_sleeps_but_through_pause() -> None:
    sleeps = [
        where
        for folder in SCANNED
        for path in sorted(folder.rglob("*.py"))
        if path != PAUSES
        for where in _sleeps(path)
    ]
    assert sleeps == [], f"sleep through activities.pauses.pause (it beats): {sleeps}"
    assert _sleeps(PAUSES), "the guard must see the one sleep it allows"
