"""An invariant's verdict: what was checked, how many, and each violation (the job, and
what is wrong with it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Violation:
    job_id: str | None
    what: str


@dataclass
class Verdict:
    number: int
    name: str
    checked: int = 0
    violations: list[Violation] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)

    def violated(self, job_id: str | None, what: str) -> None:
        self.violations.append(Violation(job_id, what))

    def as_json(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "name": self.name,
            "checked": self.checked,
            "violations": [{"job_id": v.job_id, "what": v.what} for v in self.violations],
            "notes": self.notes,
        }


NAMES = {
    1: "each page's effect once",
    2: "counters equal items",
    3: "row final, run closed, Temporal agrees",
    4: "every accepted cancel honoured",
    5: "backups restore",
    6: "webhooks delivered or recorded failed",
    7: "one idempotency key, one job",
    8: "no job stuck, no worker hung",
}


def verdict(number: int) -> Verdict:
    return Verdict(number, NAMES[number])
