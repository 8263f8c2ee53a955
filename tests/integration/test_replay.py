"""Recorded histories of real runs replay against today's workflow code: a change that
would break workflows already running fails here, not in production.

Refresh them with HUBJOBS_RECORD_HISTORIES=1 (see tests/support/histories.py) only for a
change meant to be compatible, and keep the old files too while old runs may exist.

They replay through the data converter hubjobs uses, with the payload codec on (the
test-only keys of tests/support/codec_keys.py): the encrypted history decodes, and the plain
ones pass through it unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from hubjobs.settings import Settings
from hubjobs.temporal.client import data_converter, header_codec
from hubjobs.temporal.sandbox import sandbox_runner
from tests.support.codec_keys import with_codec
from tests.support.histories import FOLDER
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
        "course_tagging_encrypted",
        # Recorded on the code of issue 18 (a job cancelled by signal closes Canceled).
        "course_tagging_cancelled_by_signal_v2",
        "course_tagging_cancelled_in_temporal_v2",
        "course_tagging_actor_unavailable_v2",
        "scheduled_start_kept_v2",
        "scheduled_start_refused_v2",
        # Recorded on the code of issue 19: attempts handed over by a worker cut off from
        # PostgreSQL, a lifecycle step handed to another worker.
        "course_tagging_handed_over_v3",
        "course_tagging_cancel_handed_over_v3",
        # Recorded on the code of issue 23: jobs started with a notify_url (succeeded,
        # cancelled by signal, cancelled in Temporal) start their completion delivery,
        # and the delivery's own workflow (retried until taken; refused on a redirect;
        # failed at its deadline).
        "course_tagging_notified_v4",
        "course_tagging_cancelled_by_signal_notified_v4",
        "course_tagging_cancelled_by_temporal_notified_v4",
        "completion_delivery_retried_v4",
        "completion_delivery_refused_v4",
        "completion_delivery_failed_v4",
        # Recorded on the code of issue 22: a small course-tagging job done at once by a
        # local activity, tried on a course too big for it (then the ordinary way), and
        # cancelled before its work could commit.
        "course_tagging_at_once_v5",
        "course_tagging_at_once_too_big_v5",
        "course_tagging_at_once_cancelled_v5",
        # Recorded on the code of issue 30: a run that continued as new on its signals.
        "course_tagging_signal_budget_v6",
        # Recorded on the code of issue 33: a run closing with its failed items, and one
        # whose work took several slices.
        "course_tagging_outcomes_v7",
        "course_tagging_slices_v7",
        # A run full of signals that continued as new with its attempt still running.
        "course_tagging_signal_budget_v8",
        # A small job's first attempt, the work activity run whole: done, too big for
        # it, cancelled before its work could commit.
        "course_tagging_at_once_v9",
        "course_tagging_at_once_too_big_v9",
        "course_tagging_at_once_cancelled_v9",
    } <= names


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_history_replays_without_nondeterminism(path: object) -> None:

    assert isinstance(path, Path)
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    codec = with_codec(Settings())
    replayer = Replayer(
        workflows=workflows(),
        workflow_runner=sandbox_runner(),
        data_converter=data_converter(codec),
        header_codec_behavior=header_codec(codec),
    )
    result = await replayer.replay_workflow(history, raise_on_replay_failure=True)
    assert result.replay_failure is None


async def test_the_encrypted_history_needs_the_keys() -> None:
    """What makes it replay above is the codec: without the keys its input is ciphertext
    the workflow cannot read."""
    path = FOLDER / "course_tagging_encrypted.json"
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    plain = data_converter(Settings(payload_codec=False))
    replayer = Replayer(workflows=workflows(), data_converter=plain)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is not None
