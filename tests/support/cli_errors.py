"""Reading a CLI error line: ``error: <message> [<code>]``, or with ``--json`` one JSON
object ``{"error": {"code", "message"}}`` (and ``job_id`` when it names a job)."""

from __future__ import annotations

import json


def refusal_code(line: str) -> str:
    """The code of one error line of either form (asserting the form)."""
    if line.startswith("{"):
        error = json.loads(line)["error"]
        # job_id only when the error names a job (idempotency_key_reused).
        assert set(error) - {"job_id"} == {"code", "message"}, line
        code: str = error["code"]
        return code
    assert line.startswith("error: ") and line.endswith("]"), line
    return line.rsplit("[", 1)[1][:-1]
