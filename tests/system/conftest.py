"""Fixtures of the system tier only."""

from __future__ import annotations

from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture
def chromium() -> Path:
    """Debian's Chromium (`make test` installs it): without it a browser test fails, it
    is not skipped."""
    if not CHROMIUM.is_file():
        pytest.fail(f"Chromium is required at {CHROMIUM} for the Temporal UI tests; install it")
    return CHROMIUM
