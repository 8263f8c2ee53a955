"""The chaos campaign's plan and its checker's independence, without servers.

- A seed fixes the plan: the same seed and length draw the same faults, load and edits;
  another seed draws others. Faults never overlap on one target, a long campaign throws
  every kind, and a flood aims at a long tagging job started just before it.
- ``keep_faults`` (the replay of a seed with some fault kinds only) keeps the load.
- The checker loads none of the product's modules (nor the tests' helpers, which do):
  imported in a fresh interpreter, ``sys.modules`` holds none of them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.chaos.plan import (
    FAULT_KINDS,
    FLOOD_JOB_LEAD,
    busy_seconds,
    make_plan,
    resources,
)

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("hubjobs", "starter", "activities", "workflows", "worker", "tests.support")


def test_a_seed_fixes_the_whole_plan() -> None:
    first, again, other = make_plan(7, 10), make_plan(7, 10), make_plan(8, 10)
    assert json.dumps(first.as_json()) == json.dumps(again.as_json())
    assert first.faults != other.faults
    assert first.starts != other.starts
    assert first.edits != other.edits


def test_faults_never_overlap_on_a_target_and_every_kind_is_thrown() -> None:
    for seed in range(20):
        plan = make_plan(seed, 10)
        assert {f.kind for f in plan.faults} == set(FAULT_KINDS), seed
        taken: dict[str, list[tuple[float, float]]] = {}
        for fault in plan.faults:
            span = (fault.at, fault.at + busy_seconds(fault.kind, fault.seconds))
            for resource in resources(fault.kind, fault.target):
                for start, end in taken.get(resource, []):
                    assert span[1] <= start or end <= span[0], (seed, fault, start, end)
                taken.setdefault(resource, []).append(span)
            assert 0 < fault.at and fault.at + fault.seconds <= plan.window, fault


def test_overlapping_faults_on_different_targets_happen() -> None:
    plan = make_plan(101, 10)
    overlapping = sum(
        1
        for a in plan.faults
        for b in plan.faults
        if a.number < b.number and b.at < a.at + busy_seconds(a.kind, a.seconds)
    )
    assert overlapping >= 5, overlapping


def test_a_flood_aims_at_a_long_tagging_job_started_just_before_it() -> None:
    plan = make_plan(3, 10)
    floods = [f for f in plan.faults if f.kind == "signal_flood"]
    assert floods
    long = next(c for c in plan.courses if c.long)
    for flood in floods:
        job = plan.starts_by_number[flood.params["job"]]
        assert job.kind == "course_tagging" and job.course == long.number
        assert job.at == round(flood.at - FLOOD_JOB_LEAD, 1)
        assert flood.params["signals"] == 20_000 and flood.params["senders"] == 25
        assert flood.params["queries_per_second"] == 100
        assert long.pages >= 40_000


def test_keeping_some_fault_kinds_keeps_the_load() -> None:
    plan = make_plan(5, 10)
    kept = plan.keep_faults({"disk_full", "postgres_kill"})
    assert {f.kind for f in kept.faults} == {"disk_full", "postgres_kill"}
    assert kept.faults == [f for f in plan.faults if f.kind in {"disk_full", "postgres_kill"}]
    assert (kept.starts, kept.cancels, kept.edits) == (plan.starts, plan.cancels, plan.edits)


def test_the_checker_loads_nothing_of_the_product() -> None:
    probe = (
        "import sys, json; import tests.chaos.checker.__main__; "
        "print(json.dumps(sorted(sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    )
    loaded = json.loads(done.stdout)
    product = [m for m in loaded if m.split(".")[0] in PRODUCT or m.startswith(PRODUCT)]
    assert product == [], product
    assert "temporalio.client" in loaded and "psycopg" in loaded
