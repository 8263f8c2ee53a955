"""Every package the product's code imports is installed by what `make run` installs:
the project's dependencies and its ``embedded`` extra, with what they pull in. The test
tier runs in a venv with the dev extra too, so a module only a test tool brings (httpx
was one: the webhook delivery imported it and a fresh `make run`'s worker died on it)
would pass every other test and fail a user's first run."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("hubjobs", "starter", "activities", "workflows", "worker.py")
FIRST_PARTY = {"hubjobs", "starter", "activities", "workflows", "worker"}
# What `make run` installs: the project with its `embedded` extra.
RUN_EXTRAS = ("embedded",)


def _name(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text).lower()


def installed_for_running() -> set[str]:
    """The distributions the project's run-time requirements install, transitively."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [Requirement(r) for r in project["dependencies"]]
    extras, taken = list(RUN_EXTRAS), set()
    while extras:  # an extra may pull in others of the project's (hubjobs[api,otel])
        extra = extras.pop()
        taken.add(extra)
        for req in map(Requirement, project["optional-dependencies"][extra]):
            if _name(req.name) == "hubjobs":
                extras += sorted(req.extras - taken)
            else:
                wanted.append(req)
    seen: set[str] = set()
    while wanted:
        req = wanted.pop()
        name = _name(req.name)
        if name in seen and not req.extras:
            continue
        seen.add(name)
        for text in metadata.requires(req.name) or []:
            dep = Requirement(text)
            marker_env = [{"extra": extra} for extra in req.extras] or [{"extra": ""}]
            if dep.marker is None or any(dep.marker.evaluate(env) for env in marker_env):
                if _name(dep.name) not in seen or dep.extras:
                    wanted.append(dep)
    return seen


def imported_top_levels() -> dict[str, str]:
    """Each third-party top-level module the product imports, with one file doing so."""
    found: dict[str, str] = {}
    files = [
        path
        for part in PRODUCT
        for path in ([ROOT / part] if part.endswith(".py") else (ROOT / part).rglob("*.py"))
    ]
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in FIRST_PARTY and top not in sys.stdlib_module_names:
                    found.setdefault(top, str(path.relative_to(ROOT)))
    return found


def test_every_import_of_the_product_is_installed_by_make_run() -> None:
    installed = installed_for_running()
    distributions = metadata.packages_distributions()
    missing = {
        module: where
        for module, where in imported_top_levels().items()
        if not {_name(d) for d in distributions.get(module, [])} & installed
    }
    assert not missing, f"imported but not installed by `make run`: {missing}"
