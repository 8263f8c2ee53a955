"""The published contract for starting, following and cancelling jobs straight through
Temporal, from any language: JSON Schemas generated from the models the workflows read,
and an index of workflow types, ids, task queue, signals and queries. Checked into
docs/contract/ (``make contract``; the unit tier fails when they disagree).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from hubjobs.kinds import REGISTRY, JobKind
from hubjobs.settings import Settings
from hubjobs.temporal.messages import (
    CANCEL_SIGNAL,
    PROGRESS_QUERY,
    CancelRequest,
    JobProgress,
    StartInput,
)

FOLDER = Path(__file__).resolve().parents[2] / "docs" / "contract"
INDEX = "index.json"
JOB_INPUT = "job-input.schema.json"
CANCEL_REQUEST = "cancel-request.schema.json"
JOB_PROGRESS = "job-progress.schema.json"
SCHEMA_DRAFT = "https://json-schema.org/draft/2020-12/schema"


def shipped_kinds() -> list[JobKind[Any]]:
    """The kinds this package ships (a kind registered by tests or a plugin publishes
    its own contract)."""
    return [kind for kind in REGISTRY if kind.module is None]


def _schema(model: Any, *, by_alias: bool = False) -> dict[str, Any]:
    return {"$schema": SCHEMA_DRAFT, **model.model_json_schema(by_alias=by_alias)}


def documents() -> dict[str, dict[str, Any]]:
    """Every file of the contract, by name."""
    kinds = shipped_kinds()
    files: dict[str, dict[str, Any]] = {
        JOB_INPUT: _schema(StartInput),
        CANCEL_REQUEST: _schema(CancelRequest),
        JOB_PROGRESS: _schema(JobProgress),
    }
    for kind in kinds:
        files[f"{kind.name}.payload.schema.json"] = _schema(kind.payload)
        # What the workflow returns as the result: for an export, a bounded summary
        # naming where its manifest is served.
        files[f"{kind.name}.result.schema.json"] = _schema(kind.carried_model, by_alias=True)
    files[INDEX] = {
        "description": "How to start, follow and cancel a hubjobs job straight through "
        "Temporal. Paths are relative to this file.",
        "namespace": "default",
        "task_queue": Settings.model_fields["task_queue"].default,
        "task_queue_setting": "HUBJOBS_TASK_QUEUE",
        "input": JOB_INPUT,
        "kinds": {
            kind.name: {
                "workflow_type": kind.workflow_type,
                "workflow_id": f"{kind.name}-{{job_id}}",
                "payload": f"{kind.name}.payload.schema.json",
                "result": f"{kind.name}.result.schema.json",
                "result_content_type": kind.result_content_type,
            }
            for kind in kinds
        },
        "signals": {
            CANCEL_SIGNAL: {
                "argument": CANCEL_REQUEST,
                "optional": True,
                "description": "Cancels the job: no argument, null, {} or "
                "{actor_id, reason}. Anything else is refused and changes nothing.",
            }
        },
        "queries": {
            PROGRESS_QUERY: {
                "answer": JOB_PROGRESS,
                "description": "The job's status and counters, within about a second "
                "of the read model while it runs.",
            }
        },
    }
    return files


def render(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, sort_keys=False) + "\n"


def write(folder: Path = FOLDER) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, document in documents().items():
        path = folder / name
        path.write_text(render(document))
        written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description="Write the Temporal contract's JSON files.")
    parser.add_argument("--folder", type=Path, default=FOLDER)
    for path in write(parser.parse_args().folder):
        print(path)


if __name__ == "__main__":
    main()
