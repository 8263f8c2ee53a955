"""Recording workflow histories for the replay test.

Set HUBJOBS_RECORD_HISTORIES=1 and run the tests that call ``record`` to refresh the
files in tests/histories/; commit them when a workflow change is meant to be
compatible with runs already in flight."""

from __future__ import annotations

import os
from pathlib import Path

from temporalio.client import WorkflowHandle

FOLDER = Path(__file__).parent / "histories"


async def record(handle: WorkflowHandle[object, object], name: str) -> None:
    if os.environ.get("HUBJOBS_RECORD_HISTORIES") != "1":
        return
    history = await handle.fetch_history()
    FOLDER.mkdir(exist_ok=True)
    (FOLDER / f"{name}.json").write_text(history.to_json())
