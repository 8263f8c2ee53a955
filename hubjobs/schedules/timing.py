"""When a job schedule fires: a cron expression (in a time zone, UTC unless one is named)
or a fixed interval (``5s``, ``1h30m``, ``7d``), checked here with stable codes before
anything reaches Temporal, which checks a cron again (a refusal there is ``invalid_cron``).
"""

from __future__ import annotations

import re
import zoneinfo
from datetime import timedelta

from pydantic import BaseModel

from hubjobs.errors import InvalidInput

CRON_MAX_LENGTH = 100
# Fields of digits, names (MON, JAN) and * / , - ? # L W, or a shortcut (@daily,
# @every 5s). No `=`: a time zone is named apart (CRON_TZ= is not taken).
_CRON = re.compile(r"[A-Za-z0-9*/,?#@ -]+")
_EVERY = re.compile(r"(?:(\d{1,4})d)?(?:(\d{1,5})h)?(?:(\d{1,6})m)?(?:(\d{1,7})s)?")
_TIME_ZONE = re.compile(r"[A-Za-z][A-Za-z0-9_+/-]{0,63}")
MIN_EVERY = timedelta(seconds=1)
MAX_EVERY = timedelta(days=366)


class Timing(BaseModel):
    """Exactly one of ``cron`` and ``every_seconds``; ``time_zone`` only with a cron."""

    cron: str | None = None
    every_seconds: int | None = None
    time_zone: str | None = None

    def describe(self) -> str:
        if self.cron is not None:
            return f"cron {self.cron} ({self.time_zone or 'UTC'})"
        assert self.every_seconds is not None
        return f"every {format_every(self.every_seconds)}"


def format_every(seconds: int) -> str:
    """``5400`` as ``1h30m``: the interval as ``--every`` takes it."""
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


def invalid_interval() -> InvalidInput:
    return InvalidInput(
        "the interval must be like 30s, 15m, 1h30m or 7d, from 1 second to 366 days",
        code="invalid_interval",
    )


def invalid_cron() -> InvalidInput:
    return InvalidInput(
        "the cron expression is not valid: five fields (minute hour day month weekday), "
        'such as "0 3 * * *", or a shortcut such as @daily',
        code="invalid_cron",
    )


def parse_every(value: str | timedelta | int) -> int:
    """The interval in whole seconds, or ``invalid_interval``."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int) and not isinstance(value, bool):
        seconds = value
    elif isinstance(value, str):
        match = _EVERY.fullmatch(value.strip()) if value.strip() else None
        if match is None:
            raise invalid_interval()
        d, h, m, s = (int(g or 0) for g in match.groups())
        seconds = ((d * 24 + h) * 60 + m) * 60 + s
    else:
        raise invalid_interval()
    if seconds != int(seconds) or not (
        MIN_EVERY.total_seconds() <= seconds <= MAX_EVERY.total_seconds()
    ):
        raise invalid_interval()
    return int(seconds)


def check_cron(value: str) -> str:
    """The expression with its spaces tidied, or ``invalid_cron``."""
    if not isinstance(value, str):
        raise invalid_cron()
    tidy = " ".join(value.split())
    if not tidy or len(tidy) > CRON_MAX_LENGTH or _CRON.fullmatch(tidy) is None:
        raise invalid_cron()
    if not tidy.startswith("@") and not 5 <= len(tidy.split(" ")) <= 7:
        raise invalid_cron()
    return tidy


def check_time_zone(value: str) -> str:
    """An IANA time zone name this host knows (``Europe/Amsterdam``), or
    ``invalid_time_zone``."""
    refusal = InvalidInput(
        "the time zone must be an IANA name such as Europe/Amsterdam or UTC",
        code="invalid_time_zone",
    )
    if not isinstance(value, str) or _TIME_ZONE.fullmatch(value) is None:
        raise refusal
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise refusal from None
    return value


def timing(
    *,
    cron: str | None = None,
    every: str | timedelta | int | None = None,
    time_zone: str | None = None,
) -> Timing:
    """A schedule's timing from what a caller gave, or ``invalid_schedule`` (neither or
    both, a time zone with an interval), ``invalid_cron``, ``invalid_interval`` or
    ``invalid_time_zone``."""
    if (cron is None) == (every is None):
        raise InvalidInput(
            "give a schedule either a cron expression or an interval (not both)",
            code="invalid_schedule",
        )
    if cron is not None:
        zone = None if time_zone is None else check_time_zone(time_zone)
        return Timing(cron=check_cron(cron), time_zone=zone)
    if time_zone is not None:
        raise InvalidInput(
            "a time zone goes with a cron expression, not with an interval",
            code="invalid_schedule",
        )
    assert every is not None
    return Timing(every_seconds=parse_every(every))
