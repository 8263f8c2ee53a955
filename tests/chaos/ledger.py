"""What the campaign saw, one JSON object a line, for the checker to read: plain standard
library on both sides, since the checker imports nothing of the product.

Record types (``type``):

- ``start``: a job start (or a repeat of one's key, ``repeat_of``): ``number``,
  ``method``, ``workspace_id``, ``kind``, ``payload``, ``key``, ``conflict`` (a repeat
  with another payload), ``sent_at``/``answered_at`` (epoch seconds), ``outcome``
  (``accepted``, ``refused``, ``error``), ``http_status``, ``code``, ``job_id``,
  ``named_job_id`` (the job a refusal names).
- ``cancel``: ``number``, ``method`` (api, client, bare), ``job_id``, ``sent_at``,
  ``answered_at``, ``accepted`` (202, the client's return, the CLI's exit 0),
  ``status_in_answer``, ``detail``.
- ``retry``: ``number``, ``method``, ``source_job_id``, ``outcome``, ``job_id``.
- ``schedule``: ``number``, ``schedule_id``, ``workspace_id``, ``created``, ``deleted``.
- ``sse``: a watcher's stream: ``job_id``, ``events``, ``reconnects``,
  ``final_status`` (the ``final`` event's, None when none came).
- ``webhook``: a delivery the receiver got: ``headers``, ``body`` (text),
  ``answered``, ``received_at``.
- ``fault``: a fault thrown: ``number``, ``kind``, ``target``, ``started_at``,
  ``ended_at``, ``planned_seconds``, ``notes``.
- ``worker``: a worker process as it was left: ``name``, ``pid``.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any


class Ledger:
    """Appends records to a file, each flushed at once (a campaign that dies keeps what
    it saw); safe from several threads."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._file = open(path, "a", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, default=str, sort_keys=True)
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


def read(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            records.append(json.loads(line))
    return records


def of_type(records: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [r for r in records if r.get("type") == kind]
