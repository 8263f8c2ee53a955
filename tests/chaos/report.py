"""The campaign's report: the seed, faults thrown by kind (and each one's log line), jobs
by kind and outcome, each invariant with its count checked and its violations, the time
to settle after the last fault; as JSON and as text."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from tests.chaos.plan import Plan


def faults_by_kind(thrown: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    kinds: dict[str, list[float]] = defaultdict(list)
    for record in thrown:
        kinds[record["kind"]].append(float(record["seconds"]))
    return {
        kind: {"count": len(lasted), "seconds_min": min(lasted), "seconds_max": max(lasted)}
        for kind, lasted in sorted(kinds.items())
    }


def build(
    plan: Plan,
    thrown: list[dict[str, Any]],
    verdicts: dict[str, Any],
    settle: dict[str, Any],
    load: dict[str, Any],
) -> dict[str, Any]:
    return {
        "seed": plan.seed,
        "minutes": plan.minutes,
        "faults": {
            "thrown": len(thrown),
            "by_kind": faults_by_kind(thrown),
            "log": sorted(thrown, key=lambda r: r["started_at"]),
        },
        "load": load,
        "jobs": verdicts.get("jobs", {}),
        "jobs_by_origin": verdicts.get("jobs_by_origin", {}),
        "job_count": verdicts.get("job_count", 0),
        "settle": settle,
        "invariants": verdicts.get("invariants", []),
        "violations": verdicts.get("violations", 0),
        "checker": verdicts.get("checker", "ran"),
    }


def text(report: dict[str, Any]) -> str:
    lines = [
        f"chaos campaign: seed {report['seed']}, {report['minutes']:g} min, "
        f"{report['faults']['thrown']} faults, {report['job_count']} jobs",
        "",
        "faults thrown, by kind:",
    ]
    for kind, figures in report["faults"]["by_kind"].items():
        lines.append(
            f"  {kind:<22} {figures['count']:>3}  "
            f"({figures['seconds_min']:.1f}–{figures['seconds_max']:.1f} s)"
        )
    lines += ["", "fault log (start from the window's start, kind, target, length, notes):"]
    for record in report["faults"]["log"]:
        notes = "; ".join(record["notes"])
        lines.append(
            f"  +{record['at']:>6.1f} s  {record['kind']:<20} {record['target']:<15} "
            f"{record['seconds']:>5.1f} s  {notes[:160]}"
        )
    lines += ["", "jobs, by kind and outcome:"]
    for kind, outcomes in report["jobs"].items():
        listed = ", ".join(f"{outcome} {n}" for outcome, n in outcomes.items())
        lines.append(f"  {kind:<16} {listed}")
    origins = ", ".join(f"{k} {v}" for k, v in report["jobs_by_origin"].items())
    lines.append(f"  {'by origin':<16} {origins}")
    lines += ["", "load: " + ", ".join(f"{k} {v}" for k, v in sorted(report["load"].items()))]
    settle = report["settle"]
    took = settle.get("seconds_after_last_fault")
    settled = f"{took:.1f} s" if took is not None else "NOT settled"
    left = "" if took is not None else f": {settle['left']}"
    lines += [
        "",
        f"settle: {settled} after the last fault (bound {settle['bound_seconds']:.0f} s){left}",
        "",
        "invariants:",
    ]
    for invariant in report["invariants"]:
        lines.append(
            f"  {invariant['number']}. {invariant['name']:<40} {invariant['checked']:>8} checked, "
            f"{len(invariant['violations'])} violations"
        )
    violations = [(i["number"], v) for i in report["invariants"] for v in i["violations"]]
    if violations:
        lines += ["", "violations:"]
        for number, violation in violations:
            lines.append(f"  [{number}] job {violation['job_id']}: {violation['what']}")
    if report["checker"] != "ran":
        lines += ["", f"the checker: {report['checker']}"]
    lines += ["", f"seed {report['seed']}: {report['violations']} violations"]
    return "\n".join(lines)
