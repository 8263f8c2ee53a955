"""The API's schema lists every error code (ErrorDetail.code's enum): each code the code
base names, as a ``code=`` argument or a class's ``code``, is in it."""

from __future__ import annotations

import ast
from pathlib import Path

from hubjobs.errors import INTERNAL_ERROR
from hubjobs.settings import Settings
from starter.api.app import create_app
from starter.api.errors import ERROR_CODES

ROOT = Path(__file__).resolve().parents[2]


def named_codes() -> dict[str, str]:
    """Each code literal under hubjobs/, starter/, activities/ and workflows/, and a
    file that names it."""
    found: dict[str, str] = {}
    for folder in ("hubjobs", "starter", "activities", "workflows"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                values: list[ast.expr] = []
                if isinstance(node, ast.keyword) and node.arg == "code":
                    values.append(node.value)
                if isinstance(node, ast.ClassDef):
                    values += [
                        stmt.value
                        for stmt in node.body
                        if isinstance(stmt, ast.Assign)
                        and any(isinstance(t, ast.Name) and t.id == "code" for t in stmt.targets)
                    ]
                for value in values:
                    if isinstance(value, ast.Constant) and isinstance(value.value, str):
                        found.setdefault(value.value, str(path.relative_to(ROOT)))
    return found


def test_every_named_code_is_in_the_enum() -> None:
    missing = {code: where for code, where in named_codes().items() if code not in ERROR_CODES}
    assert missing == {}, f"add these to starter/api/errors.py's ERROR_CODES: {missing}"
    assert INTERNAL_ERROR in ERROR_CODES and len(set(ERROR_CODES)) == len(ERROR_CODES)


def test_the_schema_publishes_the_enum() -> None:
    schema = create_app(Settings()).openapi()["components"]["schemas"]["ErrorDetail"]
    assert schema["properties"]["code"]["enum"] == list(ERROR_CODES)
