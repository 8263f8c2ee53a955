"""Every write that moves a job's row guards on its move's statuses, read back from the
statement's own SQL, and every move is one that ``JOB_MOVES`` (the diagram's dict)
draws: a guard edited by hand, or a move the diagram does not have, fails here."""

from __future__ import annotations

import ast
import asyncio
import inspect
import re
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.sql.elements import TextClause

from hubjobs.db.direct import Statement
from hubjobs.job_rows import moves, store
from hubjobs.job_rows.moves import Move
from hubjobs.readmodel import items
from hubjobs.readmodel.status import JOB_MOVES, JobStatus

# Each statement of the store that writes a job's row under a status guard, and its move.
GUARDED: dict[str, Move] = {
    "OPEN_JOB": moves.OPEN,
    "FINISH": moves.FINISH,
    "WITHDRAW": moves.WITHDRAW,
    "REQUEST_CANCELS": moves.REQUEST_CANCEL,
    "MARK_STUCK": moves.MARK_STUCK,
    "SNAPSHOT_DUE": moves.SNAPSHOT,
    "EXPIRE_OLDER_RUNS": moves.EXPIRE_OLDER_RUNS,
}
# The row's own status column, not a parameter (``:status``) nor another column.
IN_LIST = re.compile(r"(?<![:\w.])status IN \(([^)]*)\)")
EQUALS = re.compile(r"(?<![:\w.])status = '(\w+)'")
SETS = re.compile(r"SET status = '(\w+)'")
PAIR = re.compile(r"\('(\w+)', '(\w+)'\)")


def sql_of(statement: Any) -> str:
    if isinstance(statement, Statement):
        return statement.sql
    if isinstance(statement, TextClause):
        return statement.text
    return str(statement)


def guard_of(sql: str) -> frozenset[str]:
    """The statuses the statement's WHERE lets the row be in."""
    where = sql.split("WHERE", 1)[-1]
    found = {v.strip().strip("'") for m in IN_LIST.finditer(where) for v in m[1].split(",")}
    found |= {source for source, _ in PAIR.findall(where)}
    return frozenset(found | set(EQUALS.findall(where)))


def pairs_of(sql: str) -> frozenset[tuple[str, str]]:
    """The (from, to) pairs a guard on the status and the target parameter allows."""
    return frozenset(PAIR.findall(sql.split("WHERE", 1)[-1]))


def disagreement(sql: str, move: Move) -> str | None:
    guard = guard_of(sql)
    if guard != {str(s) for s in move.sources}:
        return f"guards on {sorted(guard)}, its move {move.name} on {sorted(move.sources)}"
    targets = set(SETS.findall(sql))
    if not targets <= {str(s) for s in move.targets}:
        return f"sets {sorted(targets)}, its move {move.name} goes to {sorted(move.targets)}"
    if move.target is not None:
        drawn = {(str(s), str(t)) for s, moves_to in JOB_MOVES.items() for t in moves_to}
        allowed = pairs_of(sql)
        if not allowed or allowed != drawn & {(str(s), str(t)) for s, t in move.pairs}:
            return f"moves {sorted(allowed)}, the diagram draws {sorted(drawn)}"
    return None


@pytest.mark.parametrize("name", sorted(GUARDED))
def test_each_statement_guards_on_its_moves_statuses(name: str) -> None:
    assert disagreement(sql_of(getattr(store, name)), GUARDED[name]) is None


@pytest.mark.parametrize("name", sorted(GUARDED))
def test_a_guard_changed_by_hand_is_caught(name: str) -> None:
    """The check above can fail: the statement with one status dropped from its guard
    (or, guarding on one, another put in its place; or one pair of a finish's moved to
    a target the diagram does not draw)."""
    sql = sql_of(getattr(store, name))
    move = GUARDED[name]
    if move.target is not None:
        source, target = sorted(move.pairs)[0]
        edited = sql.replace(f"({source.sql}, {target.sql})", f"({source.sql}, 'succeeded')")
        edited = edited if edited != sql else sql.replace(f"({source.sql}, ", "('queued', ", 1)
    else:
        kept = sorted(move.sources)[1:] or [next(s for s in JobStatus if s not in move.sources)]
        edited = sql.replace(move.guard, "status IN (" + ", ".join(f"'{s}'" for s in kept) + ")")
    assert edited != sql
    assert disagreement(edited, move) is not None


def test_every_status_guarded_write_of_the_store_is_declared() -> None:
    """A new statement that writes a job's row under a status guard names its move here:
    the store's named statements that guard on the status are the ones above, and no
    ``UPDATE jobs`` in its source spells a guard on the status by hand."""
    named = {
        name
        for name, value in vars(store).items()
        if isinstance(value, Statement | TextClause)
        and ("UPDATE jobs" in sql_of(value) or name in GUARDED)
        and guard_of(sql_of(value))
    }
    assert named == set(GUARDED)
    for module in (store, items):
        source = inspect.getsource(module)
        for call in ast.walk(ast.parse(source)):
            if not (isinstance(call, ast.Call) and call.args):
                continue
            segment = ast.get_source_segment(source, call.args[0]) or ""
            if "UPDATE jobs" in segment and "WHERE" in segment:
                where = segment.split("WHERE", 1)[1]
                assert not re.search(r"(?<![:\w.])status (IN|=) ", where), segment


def test_a_move_the_diagram_does_not_draw_is_refused() -> None:
    with pytest.raises(ValueError, match="not a job's move"):
        Move("revive", frozenset({JobStatus.succeeded}), frozenset({JobStatus.running}))
    with pytest.raises(ValueError, match="does not finish"):
        asyncio.run(
            store.finish(
                None,  # type: ignore[arg-type]  # refused before any statement
                uuid.uuid4(),
                store.Ending(JobStatus.running),
                retention=timedelta(days=1),
            )
        )


PRODUCT = ("hubjobs", "starter", "activities", "workflows", "worker.py")
PRIVATE = ("hubjobs.job_rows.store", "hubjobs.job_rows.moves", "hubjobs.job_rows.admission")


def _private_imports(source: str) -> set[str]:
    """The modules of ``job_rows`` a source names past the package's own door."""
    named: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            modules = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        else:
            continue
        named |= {m for m in modules if m in PRIVATE}
    return named


def test_only_the_package_writes_a_job_s_row() -> None:
    root = Path(__file__).resolve().parents[2]
    files = [root / "worker.py"] + [
        path for top in PRODUCT[:-1] for path in (root / top).rglob("*.py")
    ]
    outside = {
        str(path.relative_to(root)): names
        for path in files
        if "job_rows" not in path.parts and (names := _private_imports(path.read_text()))
    }
    assert not outside, outside
    # The check itself: an import of the store from elsewhere is seen.
    assert _private_imports("from hubjobs.job_rows import store") == {"hubjobs.job_rows.store"}
    assert _private_imports("from hubjobs.job_rows.store import FINISH")
