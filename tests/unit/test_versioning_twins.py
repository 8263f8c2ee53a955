"""A declared workflow's unversioned twin (workflows/versioning.py) is made only once a
worker asks for it: a versioned worker's runs, each importing the workflow's module
afresh in its sandbox, build one workflow class, not two. Once asked for, every fresh
copy of the module makes its twin again (the sandbox imports the twin by module and
name). In a fresh interpreter: the flag is the process's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import importlib.util, json, sys
import worker
from workflows import course_tagging

def fresh_copy():
    # As the sandbox does: the module's code run again, in a module of its own.
    spec = importlib.util.find_spec("workflows.course_tagging")
    module = importlib.util.module_from_spec(spec)
    saved = sys.modules["workflows.course_tagging"]
    sys.modules["workflows.course_tagging"] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules["workflows.course_tagging"] = saved
    return module

NAME = "CourseTaggingWorkflowUnversioned"
seen = {"versioned_only": hasattr(course_tagging, NAME)}
worker.workflows(versioned=True)
seen["after_versioned"] = hasattr(course_tagging, NAME)
seen["fresh_before"] = hasattr(fresh_copy(), NAME)
twins = worker.workflows(versioned=False)
twin = getattr(course_tagging, NAME)
seen["twin_served"] = twin in twins
seen["same_twin"] = worker.workflows(versioned=False) == twins
copy = fresh_copy()
seen["fresh_after"] = hasattr(copy, NAME)
seen["fresh_type"] = getattr(copy, NAME).__temporal_workflow_definition.name
seen["twin_type"] = twin.__temporal_workflow_definition.name
# the twin states no behaviour (VersioningBehavior.UNSPECIFIED)
seen["twin_behaviour"] = twin.__temporal_workflow_definition.versioning_behavior == 0
print(json.dumps(seen))
"""


def test_the_twin_is_made_only_once_asked_for() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {
        "versioned_only": False,
        "after_versioned": False,
        "fresh_before": False,
        "twin_served": True,
        "same_twin": True,
        "fresh_after": True,
        "fresh_type": "CourseTagging",
        "twin_type": "CourseTagging",
        "twin_behaviour": True,
    }
