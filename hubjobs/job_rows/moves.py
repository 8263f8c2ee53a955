"""Every write that moves a job's row, named with the statuses it moves it from: each
statement's ``WHERE`` takes its guard from here, checked against ``JOB_MOVES`` as this
module loads, so no write allows a move the diagram does not draw."""

from __future__ import annotations

from dataclasses import dataclass

from hubjobs.readmodel.status import (
    FINAL_STATUSES,
    JOB_MOVES,
    UNFINISHED_STATUSES,
    JobStatus,
    sql_list,
)


@dataclass(frozen=True)
class Move:
    """From one of ``sources`` to one of ``targets`` (none: the status stays; a source
    among them may stay). ``target`` names the parameter that picks one of several:
    the guard is then the diagram's pairs, not the sources alone."""

    name: str
    sources: frozenset[JobStatus]
    targets: frozenset[JobStatus] = frozenset()
    target: str | None = None

    def __post_init__(self) -> None:
        for source in self.sources:
            for goal in self.targets - {source}:
                if self.target is None and goal not in JOB_MOVES[source]:
                    raise ValueError(f"{self.name}: {source} -> {goal} is not a job's move")
        for goal in self.targets:
            if not any(goal in JOB_MOVES[source] or goal == source for source in self.sources):
                raise ValueError(f"{self.name}: nothing moves to {goal}")

    @property
    def pairs(self) -> frozenset[tuple[JobStatus, JobStatus]]:
        """(from, to) for each move the diagram draws between the sources and targets."""
        return frozenset(
            (source, goal)
            for source in self.sources
            for goal in self.targets
            if goal in JOB_MOVES[source]
        )

    @property
    def guard(self) -> str:
        """The statement's condition on the row's status."""
        if self.target is None:
            return f"status IN {sql_list(self.sources)}"
        pairs = ", ".join(f"({s.sql}, {t.sql})" for s, t in sorted(self.pairs))
        return f"(status, CAST({self.target} AS text)) IN ({pairs})"


def _to(*targets: JobStatus) -> frozenset[JobStatus]:
    return frozenset(targets)


# Opened by each attempt: queued to running, or running still.
OPEN = Move("open", UNFINISHED_STATUSES, _to(JobStatus.running))
# Finished by the attempt (or the workflow's step) that ends it, to ``:status``.
FINISH = Move("finish", UNFINISHED_STATUSES, FINAL_STATUSES, target=":status")
# A start Temporal did not take, failed while nothing runs it yet.
WITHDRAW = Move("withdraw", _to(JobStatus.queued), _to(JobStatus.failed))
# Writes that leave the status as it is, on an unfinished job only.
REQUEST_CANCEL = Move("request_cancel", UNFINISHED_STATUSES)
MARK_STUCK = Move("mark_stuck", UNFINISHED_STATUSES)
SNAPSHOT = Move("snapshot", UNFINISHED_STATUSES)
# A schedule keeps its newest successful runs: the older ones expire at once.
EXPIRE_OLDER_RUNS = Move("expire_older_runs", _to(JobStatus.succeeded))
