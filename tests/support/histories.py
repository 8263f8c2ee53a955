"""Recording workflow histories for the replay test.

Set HUBJOBS_RECORD_HISTORIES=1 and run the tests that call ``record`` to refresh the
files in tests/histories/; commit them when a workflow change is meant to be
compatible with runs already in flight. Each recording is named after the generation
of the workflow code that made it (``<name>_v2.json``): a new generation adds files
and never overwrites an older one's, which must keep replaying while runs recorded
by that code may still be open (files without a suffix are the first generation)."""

from __future__ import annotations

import os
from pathlib import Path

from temporalio.client import WorkflowHandle

from tests.support.helpers import run_closed

FOLDER = Path(__file__).resolve().parents[1] / "histories"
# Bump when a workflow change makes new runs' histories differ (a ``workflow.patched``).
# v3: lifecycle steps hand over to any worker (``lifecycle-steps-hand-over``).
# v4: a job with a notify_url starts its completion webhook's delivery as a child
# workflow once final (``completion-webhook``), and that delivery's own workflow.
# v5: a small course-tagging job is done at once by a local activity
# (``small-job-at-once``).
# v6: a run past its job's signal budget continues as new (``run-signal-budget``).
# v7: a run closes with its failed items in ``JobFailedItems``, and names each work
# activity a slice (no patch: Temporal compares neither on replay).
# v8: a full run continues as new at once, its attempt left running
# (``run-full-leaves-attempt``).
# v9: a small job's first attempt is the kind's work activity run whole, not an
# activity of its own (``small-job-whole``).
GENERATION = "v9"


async def record(handle: WorkflowHandle[object, object], name: str) -> None:
    if os.environ.get("HUBJOBS_RECORD_HISTORIES") != "1":
        return
    # A whole history only: a job's row is final a step before its run closes, and a
    # recording cut there would replay as a run still open.
    await run_closed(handle)
    history = await handle.fetch_history()
    FOLDER.mkdir(exist_ok=True)
    (FOLDER / f"{name}_{GENERATION}.json").write_text(history.to_json())
