"""What every activity class is built with, once per worker: the database, the settings,
the metrics, Temporal, and the worker's knowledge of whether it reaches the database."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from hubjobs.observability.telemetry import JobMetrics
from hubjobs.settings import Settings

log = logging.getLogger(__name__)


@dataclass
class Reach:
    """Whether this worker found it cannot reach the database. The queue may well hand
    the job back to it (its idle polls are the oldest), so its attempts then hand over
    at once, trying the database at most once a handover wait."""

    cut_off_at: float | None = None

    @property
    def cut_off(self) -> bool:
        return self.cut_off_at is not None

    def lost(self) -> None:
        self.cut_off_at = time.monotonic()

    def found(self) -> None:
        self.cut_off_at = None

    def tried_lately(self, seconds: float) -> bool:
        """Cut off, and the database was tried less than ``seconds`` ago."""
        return self.cut_off_at is not None and time.monotonic() - self.cut_off_at < seconds


@dataclass(frozen=True)
class Deps:
    """What activities are built with, once per worker."""

    engine: AsyncEngine
    settings: Settings
    metrics: JobMetrics
    # Temporal, for the activities that talk to it (maintenance, progress reports).
    client: Client | None = None
    # Test hooks by name (e.g. "before_write"); empty in production.
    hooks: Mapping[str, Any] = field(default_factory=dict)
    reach: Reach = field(default_factory=Reach)

    @property
    def default_retention(self) -> timedelta:
        return timedelta(hours=self.settings.retention_hours)
