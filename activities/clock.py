"""A duration that spans attempts or hosts is read on Temporal's clock, never this
host's wall clock, which may be hours off; within a process, the monotonic one."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from temporalio import activity


@dataclass(frozen=True)
class OneClock:
    """``at`` and the monotonic reading then: ``now()`` moves on by monotonic seconds,
    whatever this host's wall clock is stepped to."""

    at: datetime
    mono: float = field(default_factory=time.monotonic)

    @classmethod
    def temporal(cls) -> OneClock:
        """The server's time when it started this attempt (a local activity's start time
        is this host's own, so it gets ``here``)."""
        info = activity.info()
        return cls.here() if info.is_local else cls(info.started_time)

    @classmethod
    def here(cls) -> OneClock:
        """This process's clock: for durations that stay within it."""
        return cls(datetime.now(UTC))

    def now(self) -> datetime:
        return self.at + timedelta(seconds=time.monotonic() - self.mono)

    def seconds_since(self, then: datetime) -> float:
        """How long ago ``then`` (a time on this clock) was; never negative."""
        return max(0.0, (self.now() - then).total_seconds())
