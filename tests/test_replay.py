"""Recorded histories of real runs replay against today's workflow code: a change that
would break workflows already running fails here, not in production.

Refresh them with HUBJOBS_RECORD_HISTORIES=1 (see tests/histories.py) only for a
change meant to be compatible, and keep the old files too while old runs may exist."""

from __future__ import annotations

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from tests.histories import FOLDER
from worker import workflows

HISTORIES = sorted(FOLDER.glob("*.json"))


def test_histories_are_recorded() -> None:
    names = {path.stem for path in HISTORIES}
    assert {
        "course_tagging_outcomes",
        "course_tagging_cancelled_by_signal",
        "course_tagging_cancelled_in_temporal",
        "course_tagging_actor_unavailable",
        "backup_succeeded",
        "course_tagging_worker_killed",
        "course_tagging_continued_as_new",
        "scheduled_start_kept",
        "scheduled_start_refused",
    } <= names


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_history_replays_without_nondeterminism(path: object) -> None:
    from pathlib import Path

    assert isinstance(path, Path)
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    replayer = Replayer(workflows=workflows(), data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=True)
    assert result.replay_failure is None
