"""Reading a CLI error line: ``error: <message> [<code>]``, or with ``--json`` one JSON
object ``{"error": {"code", "message"}}``."""

from __future__ import annotations

import json


def refusal_code(line: str) -> str:
    """The code of one error line of either form (asserting the form)."""
    if line.startswith("{"):
        error = json.loads(line)["error"]
        assert set(error) == {"code", "message"}, line
        code: str = error["code"]
        return code
    assert line.startswith("error: ") and line.endswith("]"), line
    return line.rsplit("[", 1)[1][:-1]
