"""The published Temporal contract (docs/contract/) is what the models say: a change to
``StartInput``, a kind's payload or result, the cancel signal or the progress query
that is not written out (``make contract``) fails here, before another service reads a
stale file."""

from __future__ import annotations

import json
import uuid

from hubjobs.temporal.contract import FOLDER, documents, render
from hubjobs.temporal.messages import StartInput


def test_the_checked_in_contract_matches_the_models() -> None:
    expected = documents()
    on_disk = {path.name for path in FOLDER.glob("*.json")}
    assert on_disk == set(expected), "run `make contract` and commit docs/contract/"
    for name, document in expected.items():
        assert (FOLDER / name).read_text() == render(document), (
            f"docs/contract/{name} is stale: run `make contract` and commit it"
        )


def test_the_input_schema_says_what_a_direct_start_needs() -> None:
    schema = json.loads((FOLDER / "job-input.schema.json").read_text())
    assert set(schema["required"]) == {"workspace_id", "actor_id"}
    assert schema["additionalProperties"] is False
    assert "checkpoint" not in schema["properties"]  # the workflow's own, not the caller's
    ids = {"workspace_id": str(uuid.uuid4()), "actor_id": str(uuid.uuid4())}
    assert StartInput.model_validate(ids).payload == {}
