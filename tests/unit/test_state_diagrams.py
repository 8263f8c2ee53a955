"""The state diagrams of docs/concepts/states.md are the moves the code allows: every
arrow between two states is in ``JOB_MOVES`` or ``NOTIFY_MOVES``, every move is drawn,
every state has its place, and the final states are those the diagram ends."""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path

import pytest

from hubjobs.readmodel.status import JOB_MOVES, NOTIFY_MOVES, JobStatus, NotifyState

STATES = Path(__file__).resolve().parents[2] / "docs" / "concepts" / "states.md"
ARROW = re.compile(r"^\s*(\S+)\s*-->\s*([^\s:]+)", re.M)


def diagrams() -> list[str]:
    return re.findall(r"```mermaid\n(.*?)```", STATES.read_text(), re.S)


def arrows(diagram: str) -> set[tuple[str, str]]:
    return {(a, b) for a, b in ARROW.findall(diagram)}


@pytest.mark.parametrize(
    ("index", "enum", "moves"),
    [(0, JobStatus, JOB_MOVES), (1, NotifyState, NOTIFY_MOVES)],
    ids=["job", "delivery"],
)
def test_the_diagram_draws_exactly_the_moves(
    index: int, enum: type[StrEnum], moves: dict[StrEnum, frozenset[StrEnum]]
) -> None:
    drawn = arrows(diagrams()[index])
    between = {(a, b) for a, b in drawn if "[*]" not in (a, b)}
    allowed = {(a.value, b.value) for a, targets in moves.items() for b in targets}
    assert between == allowed
    assert set(moves) == set(enum)
    ends = {a for a, b in drawn if b == "[*]"}
    assert ends == {state.value for state, targets in moves.items() if not targets}
    starts = {b for a, b in drawn if a == "[*]"}
    assert len(starts) == 1 and starts <= {state.value for state in enum}
