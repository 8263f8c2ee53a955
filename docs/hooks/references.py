"""MkDocs hook: writes the generated reference pages before each build, from the code
itself, so that they cannot go stale: the CLI (typer's own Markdown of every command)
and the HTTP API's operations (from the app's OpenAPI document)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parents[1]
GENERATED = "<!-- generated at build time by docs/hooks/references.py: do not edit -->\n\n"


def on_pre_build(config: Any) -> None:
    reference = DOCS / "reference"
    reference.mkdir(exist_ok=True)
    (reference / "cli.md").write_text(GENERATED + cli_reference())
    (reference / "http-operations.md").write_text(GENERATED + http_reference())


def cli_reference() -> str:
    typer = Path(sys.executable).parent / "typer"
    done = subprocess.run(
        [str(typer), "starter.cli", "utils", "docs", "--name", "hubjobs", "--title", "CLI"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def http_reference() -> str:
    from starter.api import create_app

    document = create_app().openapi()
    lines = [
        "# HTTP operations\n",
        "Every operation of the API, from its OpenAPI document (served at `/openapi.json`).\n",
    ]
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            lines += _operation(method, path, operation)
    return "".join(lines)


def _cell(text: str | None) -> str:
    return (text or "").replace("|", "\\|").replace("\n", " ")


def _operation(method: str, path: str, operation: dict[str, Any]) -> list[str]:
    lines = [f"\n## `{method.upper()} {path}`\n", f"{operation.get('summary', '')}\n"]
    if operation.get("operationId"):
        lines.append(f"\nOperation id: `{operation['operationId']}`\n")
    parameters = operation.get("parameters", [])
    if parameters:
        lines.append("\n| parameter | in | required | description |\n| --- | --- | --- | --- |\n")
        for p in parameters:
            required = "yes" if p.get("required") else "no"
            lines.append(
                f"| `{p['name']}` | {p['in']} | {required} | {_cell(p.get('description'))} |\n"
            )
    responses = operation.get("responses", {})
    if responses:
        lines.append("\n| status | meaning |\n| --- | --- |\n")
        for status, response in responses.items():
            lines.append(f"| {status} | {_cell(response.get('description'))} |\n")
    return lines
