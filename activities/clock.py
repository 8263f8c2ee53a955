"""One clock decides: a duration that spans attempts or hosts (an outage an attempt began
and another carries on measuring, a webhook's timestamp that a receiver checks) is read
on Temporal's clock, never on this host's wall clock, which may be hours off. Within
one process the monotonic clock counts the seconds."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from temporalio import activity


@dataclass(frozen=True)
class OneClock:
    """A time on some clock (``at``) and this process's monotonic reading at that
    moment: ``now()`` moves on from ``at`` by the monotonic seconds since, whatever this
    host's wall clock says (or is stepped to) meanwhile."""

    at: datetime
    mono: float = field(default_factory=time.monotonic)

    @classmethod
    def temporal(cls) -> OneClock:
        """Temporal's clock, in the running activity: the server's time when it started
        this attempt (read as the attempt starts). A local activity's start time is this
        host's own: it gets this process's clock, as it never hands a time on."""
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
